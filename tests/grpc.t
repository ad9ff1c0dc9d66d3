#!/usr/bin/perl
# gRPC through the proxy (pass = grpc:// and grpcs://) with real gRPC:
# python3-grpcio's server and client (tests/lib/grpc_echo.py: generic
# handlers, raw bytes, no generated code), the client to fastd over h2c
# and over TLS. Unary (with trailing metadata), server streaming, client
# streaming, bidirectional, a status and message from the server, the
# client's deadline exceeded, grpc-timeout bounding the wait on a silent
# server, a grpcs:// upstream, and the server dying mid-stream.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use JSON::PP;
use Time::HiRes ();
use FastdTest;
use H2;
use H2Up;
use TLS;
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();
my $py = H2::python();
{
    my ($rc) = TLS::run([ $py, '-c', 'import grpc' ]);
    plan skip_all => 'python3-grpcio is not installed' if $rc != 0;
}

my $t = FastdTest->new(conf => '');
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $crt = $pki->server('localhost');
my $echo = "$FindBin::Bin/lib/grpc_echo.py";

my $gp = FastdTest::free_port();
my $gpid = H2Up::start("$dir/grpc.log", [ $py, $echo, 'server', $gp ]);
my $gs = FastdTest::free_port();
H2Up::start("$dir/grpcs.log", [ $py, $echo, 'server', $gs, $crt->{crt},
                                $crt->{key} ]);

my $hb = FastdTest::free_port();
H2Up::start("$dir/hb.log", [ $py, "$FindBin::Bin/lib/h2_backend.py", $hb, 100 ]);

my $locations = <<"EOF";
[location /silent/]
handler = proxy
pass = grpc://127.0.0.1:$hb/
read_timeout = 60s

[location /echo.Echo/]
handler = proxy
pass = grpc://127.0.0.1:$gp

[location /tls/]
handler = proxy
pass = grpcs://localhost:$gs/echo.Echo/
proxy_ssl_verify = on
proxy_ssl_trusted_certificate = @{[ $pki->ca ]}
EOF
$t->write_conf(FastdTest::main_section() . "\n" . <<"EOF");
[server]
listen = 127.0.0.1:%%PORT%% http2

$locations
[server]
listen = 127.0.0.1:%%PORT2%% ssl http2
ssl_certificate = $crt->{crt}
ssl_certificate_key = $crt->{key}

$locations
EOF
$t->start;
my ($port, $tport) = ($t->port, $t->port2);
FastdTest::wait_for(sub { $t->port_open($tport) }, 5);

# One call of grpc_echo.py's client: its JSON answer
sub call {
    my ($target, $kind, @opt) = @_;
    my ($rc, $out) = TLS::run([ $py, $echo, 'client', $target, $kind, @opt ],
                              timeout => 30);
    my $j = eval { decode_json((split /\n/, $out)[-1] // '') };
    diag("client $kind: $out") unless $j;
    return $j || {};
}

my $h2c = "127.0.0.1:$port";
my $r = call($h2c, 'Unary');
is($r->{code}, 'OK', 'unary over h2c');
is_deeply($r->{replies}, ['hello'], 'its reply');
is($r->{trailers}{'x-echo-trailer'}, 't-hello', 'its trailing metadata');
$r = call($h2c, 'ServerStream', '--n', 5);
is_deeply($r->{replies}, [ map { "R$_:5:ping" } 0 .. 4 ],
          'server streaming: five replies') or diag(explain($r));
$r = call($h2c, 'ClientStream', '--n', 6);
is_deeply($r->{replies}, [ join '+', map { "c$_" } 0 .. 5 ],
          'client streaming: six requests, one reply');
$r = call($h2c, 'Bidi', '--n', 4);
is_deeply($r->{replies}, [ map { "B:m$_" } 0 .. 3 ], 'bidirectional');
$r = call($h2c, 'Bidi', '--n', 200);
is(scalar @{ $r->{replies} || [] }, 200, 'bidirectional, 200 messages');
$r = call($h2c, 'Fail');
is($r->{code}, 'FAILED_PRECONDITION', "the server's status passes");
is($r->{details}, 'no way', 'and its message');
$r = call($h2c, 'Slow', '--deadline', '0.5');
is($r->{code}, 'DEADLINE_EXCEEDED', 'the deadline exceeded');

# grpc-timeout goes upstream: the server keeps the deadline itself
my $msg = pack('CN', 0, 1) . '2'; # Slow: sleep 2 s
FastdTest::spew("$dir/msg", $msg);
my @grpc = ('-H', 'content-type: application/grpc', '-H', 'te: trailers');
my $c = H2::curl($t, '/silent/echo', args => [
    @grpc, '-H', 'grpc-timeout: 5S', '--data-binary', "\@$dir/msg" ]);
my $e = eval { decode_json($c->{body}) } || {};
my %got = map { $_->[0] => $_->[1] } @{ $e->{headers} || [] };
is($got{'grpc-timeout'}, '5S', 'grpc-timeout goes upstream');
is($got{te}, 'trailers', 'with te: trailers');
is($got{'content-type'}, 'application/grpc', 'and the content type');

# and bounds fastd's wait on a server that keeps silent: 300 ms and a
# second's grace, not read_timeout (60s)
my $t0 = Time::HiRes::time();
$c = H2::curl($t, '/silent/hang', args => [
    @grpc, '-H', 'grpc-timeout: 300m', '--data-binary', "\@$dir/msg" ]);
my $took = Time::HiRes::time() - $t0;
ok($c->{code} == 504
       || ($c->{code} == 200 && ($c->{headers} =~ /^grpc-status: 4\r?$/m)),
   "grpc-timeout: 300m, a silent server: 504 (or DEADLINE_EXCEEDED)")
    or diag($c->{code} . $c->{headers});
ok($took >= 1 && $took < 5,
   sprintf("after the deadline's grace, long before read_timeout (%.1fs)",
           $took));
like($t->error_log, qr/timed out reading the response header/,
     'logged as a read timeout');

my $tls = "localhost:$tport";
$r = call($tls, 'Unary', '--ca', $pki->ca);
is($r->{code}, 'OK', 'unary over TLS to fastd');
$r = call($tls, 'ServerStream', '--ca', $pki->ca);
is(scalar @{ $r->{replies} || [] }, 3, 'server streaming over TLS');
$r = call($tls, 'Bidi', '--ca', $pki->ca);
is(scalar @{ $r->{replies} || [] }, 3, 'bidirectional over TLS');

# grpcs: the path /tls/Unary becomes /echo.Echo/Unary upstream; the
# client asks for /tls/...: call it raw
$c = H2::curl($t, '/tls/Unary', args => [
    '-H', 'content-type: application/grpc', '-H', 'te: trailers',
    '--data-binary', "\@$dir/msg", '-v' ]);
is($c->{code}, 200, 'grpcs:// upstream (TLS, ALPN h2): 200');
like($c->{err}, qr/^< grpc-status: 0/m, 'grpc-status 0 in the trailers');
is(substr($c->{body}, 5), '2', 'the message echoed');

$r = call($h2c, 'Die');
is_deeply($r->{replies}, [qw(one two)], 'a server dying mid-stream: what '
          . 'it sent arrives');
isnt($r->{code}, 'OK', "then the call fails ($r->{code})");
ok(FastdTest::wait_for(sub { H2Up::gone($gpid) }, 5), 'the server is gone');
$r = call($h2c, 'Unary');
isnt($r->{code}, 'OK', "with the server down: $r->{code}");

$t->stop;
$t->no_alerts;
done_testing;
