#!/usr/bin/perl
# Strict RFC 9112 parsing: every rejection, its status, and the close after
# it; limits; request bodies (Content-Length, chunked, 100-continue).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { max_header_size => '1k', max_body_size => '1k' },
));
$t->start;

my $CRLF = "\r\n";

# Send $req on a fresh connection; expect one response with status $want
# (a number or a list of acceptable ones) and, unless keep => 1, the server
# closing the connection after it.
sub reject {
    my ($name, $req, $want, %o) = @_;
    my ($raw, $eof) = $t->raw($req, timeout => 3,
                              $o{keep} ? (responses => 1) : ());
    my @r = FastdTest::parse_responses($raw, eof => $eof);
    my $st = @r ? $r[0]{status} // 'garbage' : 'none';
    my @want = ref $want ? @$want : ($want);
    ok((grep { $st eq $_ } @want), "$name: " . join('/', @want))
        or diag("got $st; raw: " . substr($raw, 0, 300));
    return if $o{keep};
    ok($eof, "$name: connection closed after the response");
    is(scalar @r, 1, "$name: nothing else sent") if @r;
}

# Send $req; expect the listed statuses in order.
sub answers {
    my ($name, $req, @want) = @_;
    my $c = $t->connect;
    $c->send($req);
    my @r = $c->read_responses(scalar @want, timeout => 5);
    my @got = map { $_->{status} } @r;
    is_deeply(\@got, \@want, $name) or diag('raw: ' . substr($c->{raw}, 0, 400));
    $c->close;
    return @r;
}

my $get = "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n";
my $json = "GET /json HTTP/1.1\r\nHost: x\r\n\r\n";

# --- Host ------------------------------------------------------------------
reject('HTTP/1.1 without Host', "GET /plaintext HTTP/1.1\r\n\r\n", 400);
reject('two Host headers',
       "GET /plaintext HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
reject('two identical Host headers',
       "GET /plaintext HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400);

# --- framing ---------------------------------------------------------------
reject('Content-Length with Transfer-Encoding',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     . "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400);
reject('Transfer-Encoding with Content-Length',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     . "Content-Length: 5\r\n\r\n0\r\n\r\n", 400);
reject('two differing Content-Length',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     . "Content-Length: 6\r\n\r\nhello!", 400);
for my $cl ('+5', '5 5', '-1', 'abc', '5,6', '0x5', '') {
    reject("Content-Length '$cl'",
           "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: $cl\r\n\r\nhello",
           400);
}
reject('Content-Length overflowing 64 bits',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\n"
     . "Content-Length: 99999999999999999999999\r\n\r\nhello", [400, 413]);
reject('Transfer-Encoding: gzip',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nxx",
       501);
reject('Transfer-Encoding: foo, chunked (unknown coding)',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: foo, chunked\r\n"
     . "\r\n0\r\n\r\n", 501);
# BWS before ';' (RFC 9112 7.3): a tab is whitespace as a space is
reject('Transfer-Encoding: "deflate ;" (space before ;)',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: deflate ;\r\n"
     . "\r\nxx", 501);
reject('Transfer-Encoding: "deflate\t;" (tab before ;): the same 501',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: deflate\t;\r\n"
     . "\r\nxx", 501);
reject('Transfer-Encoding: chunked, gzip (last not chunked)',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n"
     . "\r\n0\r\n\r\n", 400);
reject('Transfer-Encoding in HTTP/1.0',
       "POST /plaintext HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
       400);

# --- header syntax -----------------------------------------------------------
reject('space before the colon',
       "GET /plaintext HTTP/1.1\r\nHost : x\r\n\r\n", 400);
reject('space before the colon (other header)',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n", 400);
reject('obs-fold (space)',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400);
reject('obs-fold (tab)',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n", 400);
reject('bare CR in a header value',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400);
reject('NUL in a header value',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 400);
reject('NUL in a header name',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX\0A: b\r\n\r\n", 400);
reject('invalid character in a header name',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX[A]: b\r\n\r\n", 400);
reject('empty header name',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\n: b\r\n\r\n", 400);
reject('header line without a colon',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", 400);
reject('bare LF line endings',
       "GET /plaintext HTTP/1.1\nHost: x\n\n", 400);
reject('bare LF after the headers',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\n\n", 400);

# --- request line ------------------------------------------------------------
reject('HTTP/2.0', "GET /plaintext HTTP/2.0\r\nHost: x\r\n\r\n", 505);
reject('HTTP/3.0', "GET /plaintext HTTP/3.0\r\nHost: x\r\n\r\n", 505);
reject('HTTP/1.x', "GET /plaintext HTTP/1.x\r\nHost: x\r\n\r\n", 400);
reject('lowercase http/1.1', "GET /plaintext http/1.1\r\nHost: x\r\n\r\n", 400);
reject('no version (HTTP/0.9): 400 or a plain close', "GET /\r\n", [400, 'none']);
reject('two spaces in the request line',
       "GET  /plaintext HTTP/1.1\r\nHost: x\r\n\r\n", 400);
reject('space inside the target',
       "GET /plain text HTTP/1.1\r\nHost: x\r\n\r\n", 400);
reject('origin-form not starting with /',
       "GET plaintext HTTP/1.1\r\nHost: x\r\n\r\n", 400);
reject('lowercase method (get)',
       "get /plaintext HTTP/1.1\r\nHost: x\r\n\r\n", [400, 501], keep => 1);
reject('unknown method FOO', "FOO /plaintext HTTP/1.1\r\nHost: x\r\n\r\n",
       501, keep => 1);
reject('TRACE', "TRACE /plaintext HTTP/1.1\r\nHost: x\r\n\r\n", 405, keep => 1);

# --- limits ------------------------------------------------------------------
reject('request line over max_header_size',
       "GET /" . ('a' x 1500) . " HTTP/1.1\r\nHost: x\r\n\r\n", 414);
reject('headers over max_header_size',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\n"
     . join('', map { sprintf "X-Header-%02d: %s\r\n", $_, 'v' x 30 } 1 .. 40)
     . "\r\n", 431);
reject('one header line over max_header_size',
       "GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Big: " . ('b' x 1500) . "\r\n\r\n",
       431);
{
    # just under the limit is fine
    my $req = "GET /plaintext HTTP/1.1\r\nHost: x\r\n";
    $req .= sprintf "X-Fill-%02d: %s\r\n", $_, 'f' x 50 for 1 .. 12;
    $req .= "\r\n";
    cmp_ok(length $req, '<', 1000, 'the near-limit request is under 1k');
    answers('headers just under max_header_size: 200', $req, 200);
}
reject('Content-Length over max_body_size',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", 413);
{
    my $req = "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        . join('', map { "100\r\n" . ('c' x 256) . "\r\n" } 1 .. 8) . "0\r\n\r\n";
    reject('chunked body over max_body_size', $req, 413);
}

# --- chunked -------------------------------------------------------------------
my $chunked_head = "POST /plaintext HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
reject('chunk size zz', $chunked_head . "zz\r\nhello\r\n0\r\n\r\n", 400);
reject('chunk size overflow', $chunked_head . "ffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
       400);
reject('chunk size with a sign', $chunked_head . "+5\r\nhello\r\n0\r\n\r\n", 400);
reject('chunk data longer than its size', $chunked_head . "3\r\nhello\r\n0\r\n\r\n",
       400);
reject('empty chunk size line', $chunked_head . "\r\nhello\r\n0\r\n\r\n", 400);

answers('valid chunked POST, then a pipelined GET',
        $chunked_head . "5\r\nhello\r\n6;name=value\r\n world\r\n0\r\n\r\n" . $json,
        200, 200);
{
    my @r = answers('chunked POST with a trailer, then a pipelined GET',
                    $chunked_head . "5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n" . $json,
                    200, 200);
    like($r[1] ? $r[1]{body} : '', qr/"message"/, '... the second is the json answer');
}
answers('Content-Length POST, then a pipelined GET',
        "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world"
      . $json, 200, 200);
{
    # a body that looks like a request must not be taken for one
    my $inner = "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n";
    my @r = answers('body that looks like a request is only a body',
        "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: "
      . length($inner) . "\r\n\r\n$inner" . $json, 200, 200);
    like($r[1] ? $r[1]{body} : '', qr/"message"/, '... the second answer is /json');
}
answers('Content-Length: 0 POST, then a pipelined GET',
        "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n" . $json,
        200, 200);

# --- buffers and boundaries (max_header_size = 1k, max_body_size = 1k) -------
{
    # a pipelined batch larger than max_header_size is not one huge header
    my $n = 40;
    my @r = answers("$n pipelined GETs (" . length($get x $n) . " bytes > max_header_size)",
                    $get x $n, (200) x $n);
}
answers('body of exactly max_body_size, then a pipelined GET',
        "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n"
      . ('a' x 1024) . $json, 200, 200);
reject('body of max_body_size + 1',
       "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n", 413);
{
    # the chunked decoder resumes at any byte
    my $req = "POST /plaintext HTTP/1.1\r\nHost: x\r\n"
        . "Transfer-Encoding: chunked\r\n\r\n"
        . "5;a=b\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n" . $json;
    my $c = $t->connect;
    $c->sock->setsockopt(Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
    $c->send_slowly($req, size => 1, delay => 0.002);
    my @r = $c->read_responses(2, timeout => 5);
    is_deeply([ map { $_->{status} } @r ], [200, 200],
              'chunked request sent one byte at a time, then a pipelined GET');
    $c->close;
}
{
    # a header section split between CR and LF
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r");
    $c->wait_eof(0.1);
    $c->send("\nHost: x\r");
    $c->wait_eof(0.1);
    $c->send("\n\r");
    $c->wait_eof(0.1);
    $c->send("\n");
    my $r = $c->read_response(timeout => 5);
    is($r && $r->{status}, 200, 'request split between every CR and LF: 200');
    $c->close;
}

# --- Expect: 100-continue ------------------------------------------------------
{
    my $c = $t->connect;
    $c->send("POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
           . "Expect: 100-continue\r\n\r\n");
    my $r1 = $c->read_response(timeout => 5);
    is($r1 && $r1->{status}, 100, 'Expect: 100-continue: 100 before the body')
        or diag('raw: ' . $c->{raw});
    like($c->{raw}, qr{^HTTP/1\.1 100 Continue\r\n}, '... the 100 Continue status line');
    $c->send('hello');
    my $r2 = $c->read_response(timeout => 5);
    is($r2 && $r2->{status}, 200, '... then 200 after the body');
    $c->send($json);
    my $r3 = $c->read_response(timeout => 5);
    is($r3 && $r3->{status}, 200, '... and the connection is still usable');
    $c->close;
}
{
    my $c = $t->connect;
    $c->send("POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n"
           . "Expect: 100-continue\r\n\r\n");
    my $r1 = $c->read_response(timeout => 5);
    is($r1 && $r1->{status}, 413, 'Expect: 100-continue over max_body_size: 413, no 100');
    $c->close;
}

{
    # HTTP/1.0 clients never get a 100 (RFC 9110 10.1.1)
    my $c = $t->connect;
    $c->send("POST /plaintext HTTP/1.0\r\nContent-Length: 5\r\n"
           . "Expect: 100-continue\r\n\r\n");
    $c->wait_eof(0.5);
    is($c->{raw}, '', 'Expect: 100-continue from HTTP/1.0: no 100 Continue');
    $c->send('hello');
    my $r = $c->read_response(timeout => 5);
    is($r && $r->{status}, 200, '... and 200 after the body');
    $c->close;
}
{
    # the body already sent with the headers: a 100 is allowed, the 200 must come
    my $c = $t->connect;
    $c->send("POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
           . "Expect: 100-continue\r\n\r\nhello" . $json);
    my @r = grep { $_->{status} != 100 } $c->read_responses(3, timeout => 3);
    is_deeply([ map { $_->{status} } @r ], [200, 200],
              'Expect: 100-continue with the body already sent, then a GET');
    $c->close;
}

# --- targets -------------------------------------------------------------------
{
    my @r = answers('absolute-form target',
                    "GET http://x/plaintext HTTP/1.1\r\nHost: y\r\n\r\n", 200);
    is($r[0] && $r[0]{body}, 'Hello, World!', 'absolute-form: plaintext body');
}
{
    my ($raw) = $t->raw("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 3,
                        responses => 1);
    my @r = FastdTest::parse_responses($raw, eof => 0);
    ok(@r && $r[0]{status} >= 200 && $r[0]{status} < 500,
       'OPTIONS *: a 2xx or 4xx answer') or diag("raw: $raw");
}

# --- still serving ---------------------------------------------------------------
my $r = $t->get('/plaintext');
is($r && $r->{status}, 200, 'a fresh connection is served after all of this');
ok($t->running, 'the master is still running');

$t->stop;
$t->no_alerts;
done_testing;
