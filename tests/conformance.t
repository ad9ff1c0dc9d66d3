#!/usr/bin/perl
# RFC 9112 message framing, table-driven: every way a client and a server
# could disagree on where a request ends, and the request-line oddities.
# Expected answers follow RFC 9112 and nginx's choices (REFERENCE.md):
# framing errors are 400, an unknown transfer coding 501, CONNECT and
# TRACE 405. Every rejection must close the connection after its one
# answer (read to EOF, bounded); every acceptance must keep it usable.
# tests/parser.t has the basic cases; this file adds what it lacks.
#
# Where fastd is stricter than nginx 1.22 (each is safe: a refusal cannot
# be read two ways): bare LF line endings (400; nginx accepts), HTTP/0.9
# (400; nginx answers it), chunk sizes over 15 hex digits even with leading
# zeros (400), an empty Transfer-Encoding list element (400; nginx 501).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { max_header_size => '4k', max_body_size => '64k' },
));
$t->start;

my $NEXT = "GET /json HTTP/1.1\r\nHost: x\r\n\r\n";   # the follow-up request
my $H = "Host: x\r\n";

sub post_te {
    my ($te, $body) = @_;
    return "POST /plaintext HTTP/1.1\r\n${H}Transfer-Encoding: $te\r\n\r\n"
         . ($body // "5\r\nhello\r\n0\r\n\r\n");
}
sub post_chunked { post_te('chunked', $_[0]) }
sub post_cl {
    my ($cl, $body) = @_;
    return "POST /plaintext HTTP/1.1\r\n${H}Content-Length: $cl\r\n\r\n"
         . ($body // 'hello');
}

# [ name, request bytes, expected status (or [alternatives]), 'close' |
#   'keep' ]. 'close': one answer, then the server closes. 'keep': the
#   answer, then $NEXT on the same connection is answered 200.
my @cases = (
    # --- Content-Length ------------------------------------------------
    ['CL and TE, CL first, smuggled request in the body',
     "POST /plaintext HTTP/1.1\r\n${H}Content-Length: 4\r\n"
     . "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n$H\r\n",
     400, 'close'],
    ['CL: 0 and TE: chunked (TE.CL)',
     "POST /plaintext HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n"
     . "Content-Length: 0\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400, 'close'],
    ['CL with an obfuscated TE (TE.TE: "chunked" and "x")',
     "POST /plaintext HTTP/1.1\r\n${H}Content-Length: 5\r\n"
     . "Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\nhello", 400, 'close'],
    ['two identical Content-Length fields', post_cl("5\r\nContent-Length: 5"), 400, 'close'],
    ['Content-Length list "5, 5"', post_cl('5, 5'), 400, 'close'],
    ['Content-Length list "5,6"', post_cl('5,6'), 400, 'close'],
    ['Content-Length with a minus sign', post_cl('-5'), 400, 'close'],
    ['Content-Length with a plus sign', post_cl('+5'), 400, 'close'],
    ['Content-Length with a space inside', post_cl('1 0'), 400, 'close'],
    ['Content-Length with a tab inside', post_cl("1\t0"), 400, 'close'],
    ['Content-Length in hex', post_cl('0x5'), 400, 'close'],
    ['Content-Length with a decimal point', post_cl('5.0'), 400, 'close'],
    ['Content-Length with 19 digits', post_cl('1000000000000000000'), 400, 'close'],
    ['Content-Length 2^64 + 5 (wraps to 5 in 64 bits)',
     post_cl('18446744073709551621'), 400, 'close'],
    ['Content-Length name with a space before the colon',
     "POST /plaintext HTTP/1.1\r\n${H}Content-Length : 5\r\n\r\nhello", 400, 'close'],
    ['Content-Length with leading zeros is decimal 5', post_cl('005') . $NEXT, 200, 'keep'],
    ['Content-Length with surrounding whitespace', post_cl("  5 \t") . $NEXT, 200, 'keep'],
    ['Content-Length without OWS',
     "POST /plaintext HTTP/1.1\r\n${H}Content-Length:5\r\n\r\nhello" . $NEXT, 200, 'keep'],
    ['Content-Length over max_body_size', post_cl('70000', ''), 413, 'close'],

    # --- Transfer-Encoding ------------------------------------------------
    ['TE: chunked, identity (last coding not chunked)', post_te('chunked, identity'),
     400, 'close'],
    ['TE: identity', post_te('identity', 'hello'), 501, 'close'],
    ['TE: xchunked', post_te('xchunked'), 501, 'close'],
    ['TE: chunkedx', post_te('chunkedx'), 501, 'close'],
    ['TE: "chunked" quoted (nginx: 501)', post_te('"chunked"'), 400, 'close'],
    ['TE: chunked;q=1 (chunked takes no parameters)', post_te('chunked;q=1'),
     501, 'close'],
    ['TE: chunked, chunked', post_te('chunked, chunked'), 400, 'close'],
    ['TE: chunked in two fields',
     "POST /plaintext HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n"
     . "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 'close'],
    ['TE: chunked then TE: identity in a second field',
     "POST /plaintext HTTP/1.1\r\n${H}Transfer-Encoding: chunked\r\n"
     . "Transfer-Encoding: identity\r\n\r\n0\r\n\r\n", 400, 'close'],
    ['TE: empty value', post_te(''), 501, 'close'],
    # RFC 9110 5.6.1 lets a recipient skip empty list elements; refusing is
    # the safe side (nginx: 501)
    ['TE: ", chunked" (empty list element)', post_te(', chunked'), [200, 400], 'close-or-keep'],
    ['TE with obs-fold',
     "POST /plaintext HTTP/1.1\r\n${H}Transfer-Encoding:\r\n chunked\r\n\r\n"
     . "5\r\nhello\r\n0\r\n\r\n", 400, 'close'],
    ['TE with a vertical tab before chunked', post_te("\x0bchunked"), 400, 'close'],
    ['TE with a space before the colon',
     "POST /plaintext HTTP/1.1\r\n${H}Transfer-Encoding : chunked\r\n\r\n"
     . "5\r\nhello\r\n0\r\n\r\n", 400, 'close'],
    ['TE: chunked in HTTP/1.0 with a Content-Length',
     "POST /plaintext HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     . "hello", 400, 'close'],
    ['TE: CHUNKED (case-insensitive)', post_te('CHUNKED') . $NEXT, 200, 'keep'],
    ['TE: cHuNkEd', post_te('cHuNkEd') . $NEXT, 200, 'keep'],
    ['TE: chunked with whitespace around it', post_te(" \tchunked \t") . $NEXT, 200, 'keep'],

    # --- chunked framing ----------------------------------------------------
    ['chunk size 2^64 - 1', post_chunked("ffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
     400, 'close'],
    ['chunk size 2^63', post_chunked("8000000000000000\r\nhello\r\n0\r\n\r\n"),
     400, 'close'],
    ['chunk size 2^64 + 5 (wraps to 5)',
     post_chunked("10000000000000005\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['chunk size with a minus sign', post_chunked("-5\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['chunk size 0x5', post_chunked("0x5\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['chunk size followed by junk', post_chunked("5x\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['chunk size line ending in a bare LF', post_chunked("5\nhello\r\n0\r\n\r\n"),
     400, 'close'],
    ['chunk data ending in a bare LF', post_chunked("5\r\nhello\n0\r\n\r\n"), 400, 'close'],
    ['chunk data ending in a bare CR', post_chunked("5\r\nhello\r0\r\n\r\n"), 400, 'close'],
    ['last chunk ending in bare LFs', post_chunked("5\r\nhello\r\n0\n\n"), 400, 'close'],
    ['chunk data shorter than its size',
     post_chunked("6\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['NUL in a chunk extension', post_chunked("5;a\0b\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['chunk extension of 5000 bytes',
     post_chunked("5;x=" . ('a' x 5000) . "\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['trailer line with a bare LF', post_chunked("5\r\nhello\r\n0\r\nX: y\n\r\n"),
     400, 'close'],
    ['trailer line with NUL', post_chunked("5\r\nhello\r\n0\r\nX: a\0b\r\n\r\n"),
     400, 'close'],
    ['chunk extension name=value', post_chunked("5;name=value\r\nhello\r\n0\r\n\r\n") . $NEXT,
     200, 'keep'],
    ['chunk extension with a quoted string holding ";" and "\\r"-free escapes',
     post_chunked("5;a=\"x;y \\\" z\";b\r\nhello\r\n0;last\r\n\r\n") . $NEXT, 200, 'keep'],
    ['chunk extension after whitespace (BWS)',
     post_chunked("5 ;a=b\r\nhello\r\n0\r\n\r\n") . $NEXT, 200, 'keep'],
    ['chunk size with leading zeros', post_chunked("0005\r\nhello\r\n0\r\n\r\n") . $NEXT,
     200, 'keep'],
    # a size is at most 15 hex digits, leading zeros included (nginx: 200)
    ['chunk size of 19 digits with leading zeros',
     post_chunked("0000000000000000005\r\nhello\r\n0\r\n\r\n"), 400, 'close'],
    ['uppercase hex chunk size', post_chunked("A\r\nhelloworld\r\n0\r\n\r\n") . $NEXT,
     200, 'keep'],
    ['chunked body holding a whole request is only a body',
     post_chunked(sprintf("%x\r\n%s\r\n0\r\n\r\n", length($NEXT), $NEXT)) . $NEXT,
     200, 'keep'],

    # --- line endings, CR, NUL ------------------------------------------------
    ['bare LF ending one header line (fastd refuses bare LF: 400)',
     "GET /plaintext HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", 400, 'close'],
    ['bare LF ending the request line only',
     "GET /plaintext HTTP/1.1\nHost: x\r\n\r\n", 400, 'close'],
    ['bare CR inside the request line', "GET /plain\rtext HTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['bare CR as the line ending', "GET /plaintext HTTP/1.1\rHost: x\r\r\n\r\n", 400, 'close'],
    ['bare CR in a header name', "GET /plaintext HTTP/1.1\r\n${H}X\rA: b\r\n\r\n",
     400, 'close'],
    ['CR CR LF ending a header', "GET /plaintext HTTP/1.1\r\n${H}X-A: b\r\r\n\r\n",
     400, 'close'],
    ['NUL in the target', "GET /plain\0text HTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['NUL in the method', "GE\0T /plaintext HTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['NUL in the version', "GET /plaintext HTTP/1.1\0\r\n$H\r\n", 400, 'close'],
    ['DEL in a header value', "GET /plaintext HTTP/1.1\r\n${H}X-A: a\x7fb\r\n\r\n",
     400, 'close'],
    ['form feed in a header value', "GET /plaintext HTTP/1.1\r\n${H}X-A: a\x0cb\r\n\r\n",
     400, 'close'],
    ['obs-text (UTF-8) in a header value is allowed',
     "GET /plaintext HTTP/1.1\r\n${H}X-A: caf\xc3\xa9\r\n\r\n" . $NEXT, 200, 'keep'],
    ['one empty line before the request is ignored (RFC 9112 2.2)',
     "\r\nGET /plaintext HTTP/1.1\r\n$H\r\n" . $NEXT, 200, 'keep'],

    # --- header names --------------------------------------------------------
    ['space inside a header name', "GET /plaintext HTTP/1.1\r\n${H}X A: b\r\n\r\n",
     400, 'close'],
    ['tab before the colon', "GET /plaintext HTTP/1.1\r\nHost\t: x\r\n\r\n", 400, 'close'],
    ['"(" in a header name', "GET /plaintext HTTP/1.1\r\n${H}X(A): b\r\n\r\n", 400, 'close'],
    ['"@" in a header name', "GET /plaintext HTTP/1.1\r\n${H}X\@A: b\r\n\r\n", 400, 'close'],
    ['"/" in a header name', "GET /plaintext HTTP/1.1\r\n${H}X/A: b\r\n\r\n", 400, 'close'],
    ['UTF-8 in a header name', "GET /plaintext HTTP/1.1\r\n${H}X\xc3\xa9: b\r\n\r\n",
     400, 'close'],
    ['DEL in a header name', "GET /plaintext HTTP/1.1\r\n${H}X\x7f: b\r\n\r\n", 400, 'close'],
    ['header line starting with a colon-less token and spaces',
     "GET /plaintext HTTP/1.1\r\n${H}X-A b c\r\n\r\n", 400, 'close'],

    # --- request line --------------------------------------------------------
    ['absolute-form', "GET http://x/plaintext HTTP/1.1\r\nHost: y\r\n\r\n" . $NEXT,
     200, 'keep'],
    ['absolute-form, https and no path (the path is "/")',
     "GET https://x HTTP/1.1\r\n$H\r\n" . $NEXT, 200, 'keep'],
    ['absolute-form with userinfo', "GET http://user\@x/plaintext HTTP/1.1\r\n$H\r\n",
     400, 'close'],
    ['absolute-form with an empty authority', "GET http:///plaintext HTTP/1.1\r\n$H\r\n",
     400, 'close'],
    ['absolute-form with another scheme', "GET ftp://x/plaintext HTTP/1.1\r\n$H\r\n",
     400, 'close'],
    ['asterisk-form with GET', "GET * HTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['asterisk-form with OPTIONS', "OPTIONS * HTTP/1.1\r\n$H\r\n" . $NEXT, 200, 'keep'],
    ['CONNECT authority-form (not a proxy: 405)',
     "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 405, 'close'],
    ['CONNECT origin-form', "CONNECT /plaintext HTTP/1.1\r\n$H\r\n", 405, 'close'],
    ['TRACE (405, and the connection closes)', "TRACE /plaintext HTTP/1.1\r\n$H\r\n",
     405, 'close'],
    ['method of 33 characters (fastd: 501 and close)',
     ('M' x 33) . " /plaintext HTTP/1.1\r\n$H\r\n", 501, 'close'],
    ['method of 1000 characters', ('M' x 1000) . " /plaintext HTTP/1.1\r\n$H\r\n",
     501, 'close'],
    ['method with a non-token byte', "GE(T /plaintext HTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['leading space before the method', " GET /plaintext HTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['trailing space after the version', "GET /plaintext HTTP/1.1 \r\n$H\r\n", 400, 'close'],
    ['tab as the separator', "GET\t/plaintext\tHTTP/1.1\r\n$H\r\n", 400, 'close'],
    ['HTTP/0.9 request line (nginx answers HTTP/0.9; fastd refuses)',
     "GET /plaintext\r\n\r\n", 400, 'close'],
    ['HTTP/0.9 version', "GET /plaintext HTTP/0.9\r\n$H\r\n", 400, 'close'],
    ['HTTP/01.1', "GET /plaintext HTTP/01.1\r\n$H\r\n", 400, 'close'],
    ['HTTP/1.10', "GET /plaintext HTTP/1.10\r\n$H\r\n", 400, 'close'],
    ['HTTP/1 without minor', "GET /plaintext HTTP/1\r\n$H\r\n", 400, 'close'],
    ['HTTP/1.2 is answered as HTTP/1.1', "GET /plaintext HTTP/1.2\r\n$H\r\n" . $NEXT,
     200, 'keep'],
    ['HTTP/2 connection preface (no h2c: 400, as nginx)',
     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, 'close'],
    ['HTTP/2 preface, then a request', "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n$NEXT",
     400, 'close'],
    ['fragment in the target', "GET /plaintext#frag HTTP/1.1\r\n$H\r\n", 400, 'close'],

    # --- Host and Expect -------------------------------------------------------
    ['Host with an empty value in HTTP/1.1', "GET /plaintext HTTP/1.1\r\nHost:\r\n\r\n",
     400, 'close'],
    ['absolute-form without a Host field (RFC 9112 3.2)',
     "GET http://x/plaintext HTTP/1.1\r\n\r\n", 400, 'close'],
    ['Host with a slash', "GET /plaintext HTTP/1.1\r\nHost: x/y\r\n\r\n", 400, 'close'],
    ['Host with a backslash', "GET /plaintext HTTP/1.1\r\nHost: x\\y\r\n\r\n", 400, 'close'],
    ['Host with a space inside', "GET /plaintext HTTP/1.1\r\nHost: x y\r\n\r\n", 400, 'close'],
    ['Host with userinfo', "GET /plaintext HTTP/1.1\r\nHost: u\@x\r\n\r\n", 400, 'close'],
    ['Host with a quote', "GET /plaintext HTTP/1.1\r\nHost: x\"y\r\n\r\n", 400, 'close'],
    ['Host: IPv6 literal with a port', "GET /plaintext HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"
     . $NEXT, 200, 'keep'],
    ['Host: reg-name with "_" and a trailing dot',
     "GET /plaintext HTTP/1.1\r\nHost: a_b.example.:80\r\n\r\n" . $NEXT, 200, 'keep'],
    ['unknown Expect', "GET /plaintext HTTP/1.1\r\n${H}Expect: 200-ok\r\n\r\n",
     417, 'close'],
);

# The answer to one case: (statuses, eof, raw).
sub exchange {
    my ($req, $mode) = @_;
    my $want = $mode eq 'keep' ? 2 : 1;
    my ($raw, $eof) = $t->raw($req, timeout => 4,
                              $mode eq 'close' ? () : (responses => $want));
    my @r = FastdTest::parse_responses($raw, eof => $eof);
    return ([ map { $_->{status} // 'garbage' } @r ], $eof, $raw);
}

for my $case (@cases) {
    my ($name, $req, $want, $mode) = @$case;
    my @want = ref $want ? @$want : ($want);
    if ($mode eq 'close-or-keep') {
        # either answer is conformant; each must be consistent
        my ($st, $eof, $raw) = exchange($req . $NEXT, 'close');
        my $first = $st->[0] // 'none';
        ok((grep { $first eq $_ } @want), "$name: " . join('/', @want))
            or diag("got $first; raw: " . substr($raw, 0, 300));
        if ($first eq '200') {
            is_deeply($st, [200, 200], "$name: accepted, the next request is answered");
        } else {
            ok($eof && @$st == 1, "$name: rejected, one answer and the connection closed");
        }
        next;
    }
    my ($st, $eof, $raw) = exchange($req, $mode);
    my $first = $st->[0] // 'none';
    ok((grep { $first eq $_ } @want), "$name: " . join('/', @want))
        or diag("got $first; raw: " . substr($raw, 0, 300));
    if ($mode eq 'close') {
        ok($eof, "$name: connection closed after the answer");
        ok(@$st <= 1, "$name: nothing after the one answer")
            or diag("answers: @$st");
    } else {
        is_deeply($st, [ $st->[0], 200 ], "$name: connection kept, next request answered")
            or diag("answers: @$st; raw: " . substr($raw, 0, 300));
    }
}

# A rejection ends the connection even when more requests were pipelined
# behind it: nothing after the bad one may be answered.
{
    my $bad = "POST /plaintext HTTP/1.1\r\n${H}Content-Length: 5\r\n"
            . "Transfer-Encoding: chunked\r\n\r\n";
    my ($st, $eof) = exchange($NEXT . $bad . $NEXT . $NEXT, 'close');
    is_deeply($st, [200, 400], 'good, bad, good, good: 200 then 400 and nothing more');
    ok($eof, '... and the connection is closed');
}

# Headers split across reads at every awkward place still frame the same.
{
    my $req = post_chunked("5;a=b\r\nhello\r\n0\r\nT: v\r\n\r\n") . $NEXT;
    my @pieces;
    push @pieces, substr($req, $_, 1) for 0 .. length($req) - 1;
    my ($raw, $eof) = $t->raw(\@pieces, timeout => 8, responses => 2);
    my @r = FastdTest::parse_responses($raw, eof => 0);
    is_deeply([ map { $_->{status} } @r ], [200, 200],
              'chunked request and a GET, one byte per send: 200, 200');
}

my $r = $t->get('/plaintext');
is($r && $r->{status}, 200, 'still serving after every rejection');
ok($t->running, 'the master is still running');
$t->stop;
$t->no_alerts;
done_testing;
