#!/usr/bin/perl
# API 1.8, what an HTTP proxy reads and writes of the request
# (fastd_upstream.h), in a module loaded at run time: tests/modules/h1pass.c,
# built outside the tree against the installed headers (make install into
# a scratch prefix), passes requests to a backend over HTTP/1.1. The
# backend sees the client's header lines (fd_req_http) but Connection,
# X-Client with the client's address (fd_req_client_text), the path
# re-escaped behind the prefix and the query (fd_api_sbuf_add_escaped),
# all written through an fd_api_out_t window; the client gets the
# response head as fd_api_http_response parsed it (a Connection's tokens
# dropped), a chunked body decoded by fd_api_http_chunked, a body read
# until the server closes, and a 502 for a response head the parser
# refuses. Over TLS (h1pass_tls_name, h1pass_tls_trusted: the 1.8
# fastd_upstream.h TLS client, fd_api_tls_client_set and
# fd_api_upstream_conf_tls), to a fastd serving TLS: the certificate
# verified against the test CA for the name given, a wrong name or CA a
# 502. h1pass says FD_API_TUNNEL: an HTTP/2 extended CONNECT (RFC 8441)
# reaches it (its own 403) where a handler without the flag gets fastd's
# 501.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use Backend;
use TLS;
use H2;
use Test::More;

plan skip_all => 'needs the openssl CLI' unless TLS::openssl();

my $root = FastdTest::root();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
ApiModule::install($dir);
is(ApiModule::build("$dir/h1pass.so", "$root/tests/modules/h1pass.c"), '',
   'h1pass.so builds against the installed fastd_upstream.h');

my $b = Backend->new(handler => sub {
    my ($req) = @_;
    my $p = $req->{path};
    return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
         . "Connection: close, X-Hop\r\nX-Hop: 1\r\nX-Kept: 2\r\n\r\n"
         . "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n" if $p eq '/pre/chunked';
    return "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
        if $p eq '/pre/twice';
    if ($p eq '/pre/close') {
        $req->{c}->write("HTTP/1.0 200 OK\r\nContent-Type: text/x-bye\r\n\r\nbye");
        return undef; # closes: the body ends there
    }
    return Backend::echo($req);
});

# a TLS server: fastd's plaintext handler on every path
my $pki = TLS->new("$dir");
my $up = $pki->server('up.test');
mkdir "$dir/other" or die "mkdir: $!";
my $other_ca = TLS->new("$dir/other")->ca;
my $tb = FastdTest->new(conf => 'placeholder');
$tb->write_conf(TLS::conf(certs => [$up],
                          locations => "[location /]\nhandler = plaintext\n"));
$tb->start;

my $tls = "handler = h1pass\nh1pass_to = 127.0.0.1:" . $tb->port . "\n";
$t->write_conf(FastdTest::base_conf(
    main => { load_module => "$dir/h1pass.so", workers => 1 },
    locations => "[location /]\nhandler = h1pass\n"
               . "h1pass_to = 127.0.0.1:" . $b->port . "\n"
               . "h1pass_prefix = /pre\n"
               . "[location /tls/]\n$tls"
               . "h1pass_tls_name = up.test\n"
               . "h1pass_tls_trusted = " . $pki->ca . "\n"
               . "[location /tlsname/]\n$tls"
               . "h1pass_tls_name = other.test\n"
               . "h1pass_tls_trusted = " . $pki->ca . "\n"
               . "[location /tlsca/]\n$tls"
               . "h1pass_tls_name = up.test\n"
               . "h1pass_tls_trusted = $other_ca\n",
    extra => "[server]\nlisten = 127.0.0.1:%%PORT2%% http2\n"
           . "[location /]\nhandler = h1pass\n"
           . "h1pass_to = 127.0.0.1:" . $b->port . "\n"
           . "[location /plaintext]\nhandler = plaintext\n"));
$t->start;

my $r = $t->get('/a%20b/c?x=1&y=%41', 'X-Mine' => 'yes',
                'Connection' => 'keep-alive');
is($r->{status}, 200, 'GET through h1pass: 200');
my $seen = $r->{body} // '';
like($seen, qr{^GET /pre/a%20b/c\?x=1&y=%41 HTTP/1\.1$}m,
     'the backend sees the path re-escaped behind the prefix, the query');
like($seen, qr/^X-Mine: yes$/m, '... the client\'s header lines');
like($seen, qr/^X-Client: 127\.0\.0\.1$/m, '... X-Client, the client\'s address');
is(scalar(() = $seen =~ /^Connection:/mg), 1,
   '... not the client\'s Connection: one field, the module\'s');
like($seen, qr/^Connection: close$/m, '... which says close');
is($r->header('x-backend-port'), $b->port, 'the response\'s own fields come back');

$r = $t->get('/chunked');
is($r->{status}, 200, 'a chunked response: 200');
is($r->{body}, 'hello world', '... its body decoded (fd_api_http_chunked)');
is($r->header('x-kept'), '2', '... its fields passed');
ok(!defined $r->header('x-hop'), '... but the one its Connection names');

$r = $t->get('/close');
is($r->{status}, 200, 'an HTTP/1.0 response without a length: 200');
is($r->{body}, 'bye', '... its body until the server closed');
is($r->header('content-type'), 'text/x-bye', '... its Content-Type');

$r = $t->get('/twice');
is($r->{status}, 502, 'two Content-Lengths: the parser refuses it, 502');
like($t->error_log, qr/h1pass upstream.*sent/, '... logged as what the server sent');

$r = $t->get('/tls/x');
is($r->{status}, 200, 'over TLS, the certificate valid for the name: 200');
is($r->{body}, 'Hello, World!', '... the TLS server\'s answer');
$r = $t->get('/tlsname/x');
is($r->{status}, 502, 'a certificate not valid for h1pass_tls_name: 502');
like($t->error_log, qr/h1pass upstream.*hostname mismatch/,
     '... logged as a hostname mismatch');
$r = $t->get('/tlsca/x');
is($r->{status}, 502, 'a certificate of a CA h1pass_tls_trusted does not '
                    . 'name: 502');

SKIP: {
    skip H2::why_not(), 2 if H2::why_not();
    FastdTest::spew("$dir/ws2lib.py",
                    FastdTest::slurp("$FindBin::Bin/lib/ws2lib.py"));
    my $h2 = H2::py($t, <<'PY', port => $t->port2);
from ws2lib import *
done(mine=WS2('/x').status, plain=WS2('/plaintext').status)
PY
    is($h2->{mine}, 403, 'an extended CONNECT reaches h1pass (FD_API_TUNNEL): '
                       . 'its 403') or diag(H2::explain($h2));
    is($h2->{plain}, 501, '... a handler without the flag: fastd\'s 501');
}

# the option's errors are the key's, at its line
$t->stop;
my $bad = FastdTest->new(conf => FastdTest::base_conf(
    main => { load_module => "$dir/h1pass.so" },
    locations => "[location /]\n$tls"
               . "h1pass_tls_name = up.test\n"
               . "h1pass_tls_trusted = $dir/none.pem\n"));
my ($code, $out) = FastdTest::run_fastd('-t', '-c', $bad->conf_file);
isnt($code, 0, 'fastd -t: h1pass_tls_trusted names a missing file');
like($out, qr/h1pass_tls_trusted/, '... the error names the key');

$t->no_alerts;
$tb->stop;
done_testing();
