#!/usr/bin/perl
# HTTP/2 to upstreams (core/http/fd_upstream_h2.c): nghttpd (h2c and TLS
# with ALPN h2) serving files, and a python h2 backend (lib/h2_backend.py)
# that echoes what it got and misbehaves on purpose. Requests from
# HTTP/1.1 and HTTP/2 clients, bodies both ways past the windows, the
# proxy's header rules, trailers to both kinds of client; streams
# multiplexed on at most h2_connections connections; a reset before and
# after the response header, a connection closed mid-response, a refused
# stream and a GOAWAY (both retried), a silent server (504), a response
# stalled after its header (cut at read_timeout); PING on idle connections.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Digest::MD5 qw(md5_hex);
use FastdTest;
use H2;
use H2Up;
use TLS;
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();
my $nghttpd = (grep { -x } qw(/usr/sbin/nghttpd /usr/bin/nghttpd))[0];
plan skip_all => 'nghttpd (nghttp2-server) is not installed' unless $nghttpd;

my $t = FastdTest->new(conf => '');
my $dir = $t->dir;
my $py = H2::python();

# --- backends --------------------------------------------------------------
mkdir "$dir/www";
my $big = join '', map { sprintf "%07d:%s\n", $_, 'x' x ($_ % 50) } 1 .. 12000;
FastdTest::spew("$dir/www/index.html", "hello from nghttpd\n");
FastdTest::spew("$dir/www/big.txt", $big);
my $pki = TLS->new($dir);
my $crt = $pki->server('localhost');

my $ng = FastdTest::free_port();
H2Up::start("$dir/ng.log", [ $nghttpd, '--no-tls', '-d', "$dir/www", $ng ],
            ready => 'port', port => $ng);
my $ngs = FastdTest::free_port();
H2Up::start("$dir/ngs.log", [ $nghttpd, '-d', "$dir/www", $ngs,
                              $crt->{key}, $crt->{crt} ],
            ready => 'port', port => $ngs);
my $hb = FastdTest::free_port();
H2Up::start("$dir/hb.log", [ $py, "$FindBin::Bin/lib/h2_backend.py", $hb, 100 ]);
my $mx = FastdTest::free_port();
H2Up::start("$dir/mx.log", [ $py, "$FindBin::Bin/lib/h2_backend.py", $mx, 4 ]);

my $conf = H2::conf(extra => <<"EOF");
[upstream hb]
server = 127.0.0.1:$hb h2

[upstream mx]
server = 127.0.0.1:$mx h2
h2_connections = 2
h2_ping_interval = 1s

[location /n/]
handler = proxy
pass = h2://127.0.0.1:$ng/

[location /s/]
handler = proxy
pass = h2s://localhost:$ngs/
proxy_ssl_verify = on
proxy_ssl_trusted_certificate = @{[ $pki->ca ]}

[location /b/]
handler = proxy
pass = http://hb/
set_header = X-Set: set-\$request_method
read_timeout = 1s

[location /m/]
handler = proxy
pass = http://mx/
EOF
$t->write_conf($conf);
$t->start;
my $port = $t->port;

sub curl1 {
    my (@args) = @_;
    my $out = `curl -sS --max-time 20 @args 2>&1`;
    return ($? >> 8, $out);
}

# --- files through nghttpd -------------------------------------------------
my ($rc, $out) = curl1("http://127.0.0.1:$port/n/index.html");
is($out, "hello from nghttpd\n", 'HTTP/1.1 client, h2c upstream: a file');
my $r = H2::curl($t, '/n/big.txt');
is($r->{code}, 200, 'HTTP/2 client, h2c upstream: a large file');
is(md5_hex($r->{body}), md5_hex($big), 'whole, past the 256k window');
($rc, $out) = curl1("http://127.0.0.1:$port/n/big.txt");
is(md5_hex($out), md5_hex($big), 'the same to an HTTP/1.1 client');
($rc, $out) = curl1('-I', "http://127.0.0.1:$port/n/big.txt");
like($out, qr/^Content-Length: @{[ length $big ]}\r?$/mi, 'HEAD: the length');
($rc, $out) = curl1("--cacert", $pki->ca, "http://127.0.0.1:$port/s/big.txt");
is(md5_hex($out), md5_hex($big), 'h2s: TLS with ALPN h2 to nghttpd');
($rc, $out) = curl1("http://127.0.0.1:$port/n/none");
like($out, qr/404/, "the upstream's 404 passes");

# --- what the backend got --------------------------------------------------
use JSON::PP;
sub echo_of {
    my ($body) = @_;
    my $j = eval { decode_json($body) } or return undef;
    my %h;
    push @{ $h{ $_->[0] } }, $_->[1] for @{ $j->{headers} };
    return { h => \%h, len => $j->{len}, md5 => $j->{md5} };
}
($rc, $out) = curl1('-H', "'Connection: x-hop'", '-H', "'X-Hop: 1'",
                    '-H', "'Keep-Alive: 5'", '-H', "'TE: trailers'",
                    '-H', "'X-Keep: kept'", '-H', "'Host: app.example'",
                    "'http://127.0.0.1:$port/b/echo?q=1'");
my $e = echo_of($out);
ok($e, 'the echo backend answered') or diag($out);
is($e->{h}{':authority'}[0], 'app.example', ':authority from Host');
is($e->{h}{':path'}[0], '/echo?q=1', ':path as pass = .../ maps it');
is($e->{h}{':scheme'}[0], 'http', ':scheme');
is($e->{h}{'x-keep'}[0], 'kept', 'a client field passes');
is($e->{h}{'x-set'}[0], 'set-GET', 'set_header applies');
is($e->{h}{'x-forwarded-for'}[0], '127.0.0.1', 'X-Forwarded-For added');
ok(!exists $e->{h}{$_}, "no $_ upstream")
    for qw(connection keep-alive te x-hop host transfer-encoding);

my $body = join '', map { chr(65 + $_ % 26) x 100 } 1 .. 3000; # 300k
FastdTest::spew("$dir/body", $body);
($rc, $out) = curl1('--data-binary', "\@$dir/body",
                    "http://127.0.0.1:$port/b/echo");
$e = echo_of($out);
is_deeply([ $e->{len}, $e->{md5} ], [ length $body, md5_hex($body) ],
          'a 300k POST body (Content-Length), whole');
is($e->{h}{'content-length'}[0], length $body, 'with its content-length');
($rc, $out) = curl1('-H', "'Transfer-Encoding: chunked'", '--data-binary',
                    "\@$dir/body", "http://127.0.0.1:$port/b/echo");
$e = echo_of($out);
is_deeply([ $e->{len}, $e->{md5} ], [ length $body, md5_hex($body) ],
          'a chunked POST body, whole');
$r = H2::curl($t, '/b/echo', args => [ '--data-binary', "\@$dir/body" ]);
$e = echo_of($r->{body});
is_deeply([ $e->{len}, $e->{md5} ], [ length $body, md5_hex($body) ],
          'a POST body from an HTTP/2 client, whole');

# --- trailers --------------------------------------------------------------
my $raw = $t->raw("GET /b/trailers HTTP/1.1\r\nHost: x\r\n"
                  . "Connection: close\r\n\r\n");
like($raw, qr/\r\n4\r\nbody\r\n0\r\nx-trailer: yes\r\ngrpc-status: 0\r\n\r\n\z/,
     'trailers: the chunked trailer of an HTTP/1.1 response');
$r = H2::curl($t, '/b/trailers', args => [ '-v' ]);
is($r->{body}, 'body', 'HTTP/2 client: the body');
like($r->{err}, qr/^< x-trailer: yes/m, 'and the trailers as HEADERS');

# --- failures --------------------------------------------------------------
($rc, $out) = curl1('-o', '/dev/null', '-w', '%{http_code}',
                    "http://127.0.0.1:$port/b/rst-before");
is($out, '502', 'RST_STREAM before the header: 502');
($rc, $out) = curl1("http://127.0.0.1:$port/b/rst-after");
isnt($rc, 0, 'RST_STREAM after the header: the HTTP/1.1 response is cut');
$r = H2::curl($t, '/b/rst-after');
isnt($r->{rc}, 0, '... and the HTTP/2 stream reset') or diag($r->{err});
($rc, $out) = curl1("http://127.0.0.1:$port/b/close-mid");
isnt($rc, 0, 'the connection closed mid-response: cut');
($rc, $out) = curl1('--data-binary', 'xyz', "http://127.0.0.1:$port/b/refuse-once");
$e = echo_of($out);
is($e && $e->{len}, 3, 'REFUSED_STREAM: a POST goes again, and answers');
($rc, $out) = curl1('--data-binary', 'xyz', "http://127.0.0.1:$port/b/goaway-once");
$e = echo_of($out);
is($e && $e->{len}, 3, 'GOAWAY below the stream: again on a new connection');
($rc, $out) = curl1('-o', '/dev/null', '-w', '%{http_code}',
                    "http://127.0.0.1:$port/b/hang");
is($out, '504', 'a silent upstream: 504 after read_timeout');
($rc, $out) = curl1("http://127.0.0.1:$port/b/stall");
isnt($rc, 0, 'a response that stalls after its header: cut after '
     . 'read_timeout');
like($t->error_log, qr/timed out reading the response body/,
     'logged as such');
($rc, $out) = curl1("http://127.0.0.1:$port/b/echo");
ok(echo_of($out), 'the group still answers after all that');

# --- multiplexing ----------------------------------------------------------
my @urls = map { ('-o', '/dev/null', "http://127.0.0.1:$port/m/delay/300?$_") }
           1 .. 24;
($rc, $out) = curl1('--parallel', '--parallel-immediate', '--parallel-max',
                    24, '-w', "'%{http_code}\\n'", @urls);
my @codes = split /\n/, $out;
is(scalar(grep { $_ eq '200' } @codes), 24, '24 concurrent requests answer')
    or diag($out);
($rc, $out) = curl1("http://127.0.0.1:$port/m/stats");
my $st = eval { decode_json($out) } || {};
ok($st->{connections} >= 1 && $st->{connections} <= 2,
   "on at most h2_connections = 2 connections ($st->{connections})");
ok($st->{max_streams} > 1 && $st->{max_streams} <= 4,
   "as concurrent streams, up to the server's 4 ($st->{max_streams})");

# an idle connection is kept with PINGs, and reused
ok(FastdTest::wait_for(sub {
    my (undef, $o) = curl1("http://127.0.0.1:$port/m/stats");
    my $s = eval { decode_json($o) } || {};
    return ($s->{pings} // 0) >= 1;
}, 12, 2), 'an idle connection is PINGed (h2_ping_interval = 1s)');
($rc, $out) = curl1("http://127.0.0.1:$port/m/stats");
$st = eval { decode_json($out) } || {};
ok($st->{connections} <= 2, "and still used ($st->{connections} connections)");

diag($t->error_log) if $ENV{H2UP_DEBUG};
$t->stop;
$t->no_alerts;
done_testing;
