#!/usr/bin/perl
# Active health checks of HTTP/2 and gRPC servers: a group that locations
# pass to with h2:// or grpc:// is probed over HTTP/2 (an HTTP/1.1 GET
# would fail on a server that speaks only HTTP/2), over TLS with ALPN h2
# for grpcs://; type=grpc asks the gRPC health protocol
# (/grpc.health.v1.Health/Check) of real python3-grpcio servers, and a
# NOT_SERVING answer, a dead server, an unknown service and a reset
# stream take a server out; grpc_status=N passes on that status. Bad
# lines are config errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
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

# g1 healthy, g2 NOT_SERVING while $dir/g2.sick exists, gs over TLS
my ($g1, $g2, $gs) = map { FastdTest::free_port() } 1 .. 3;
my $g1pid = H2Up::start("$dir/g1.log", [ $py, $echo, 'server', $g1 ]);
{
    local $ENV{GRPC_ECHO_SICK} = "$dir/g2.sick";
    H2Up::start("$dir/g2.log", [ $py, $echo, 'server', $g2 ]);
}
H2Up::start("$dir/gs.log", [ $py, $echo, 'server', $gs, $crt->{crt},
                             $crt->{key} ]);
# plain HTTP/2 (h2c, prior knowledge)
my $hb = FastdTest::free_port();
H2Up::start("$dir/hb.log", [ $py, "$FindBin::Bin/lib/h2_backend.py", $hb,
                             100 ]);

# timeout: no case here times a probe out, and a Python server on a busy
# 2-CPU machine may take a second to answer one (fails=1 would then take
# a healthy server out, and flap the checks below)
my $hc = 'interval=300ms timeout=5s fails=1 passes=1';
$t->write_conf(FastdTest::main_section() . "\n" . <<"EOF");
[upstream grpc]
server = 127.0.0.1:$g1 max_fails=0
server = 127.0.0.1:$g2 max_fails=0
health_check = type=grpc $hc

[upstream grpc_tls]
server = localhost:$gs max_fails=0
health_check = type=grpc grpc_service=echo.Echo $hc

[upstream grpc_unknown]
server = 127.0.0.1:$g1 max_fails=0
health_check = type=grpc grpc_service=nope $hc

[upstream grpc_unknown_ok]
server = 127.0.0.1:$g1 max_fails=0
health_check = type=grpc grpc_service=nope grpc_status=5 $hc

[upstream h2]
server = 127.0.0.1:$hb h2 max_fails=0
health_check = /echo/health $hc

[upstream h2_reset]
server = 127.0.0.1:$hb h2 max_fails=0
health_check = /rst-before $hc

[upstream h2_404]
server = 127.0.0.1:$hb h2 max_fails=0
health_check = /echo status=204 $hc

[server]
listen = 127.0.0.1:%%PORT%% http2

[location /echo.Echo/]
handler = proxy
pass = grpc://grpc

[location /tls/]
handler = proxy
pass = grpcs://grpc_tls/echo.Echo/
proxy_ssl_verify = on
proxy_ssl_name = localhost
proxy_ssl_trusted_certificate = @{[ $pki->ca ]}

[location /u1/]
handler = proxy
pass = grpc://grpc_unknown/

[location /u2/]
handler = proxy
pass = grpc://grpc_unknown_ok/

[location /h2/]
handler = proxy
pass = http://h2/

[location /h2r/]
handler = proxy
pass = http://h2_reset/

[location /h2n/]
handler = proxy
pass = http://h2_404/

[location = /status]
handler = status
EOF
$t->start;
my $port = $t->port;

sub up {
    my ($group, $server) = @_;
    my $r = $t->get('/status?format=prometheus');
    my $body = $r ? $r->body : '';
    return $body =~ /^fastd_upstream_check_up\{upstream="\Q$group\E",server="\Q$server\E"\} (\d)$/m
        ? $1 : undef;
}
sub probes {
    my ($group, $server) = @_;
    my $r = $t->get('/status?format=prometheus');
    my $body = $r ? $r->body : '';
    return $body =~ /^fastd_upstream_check_probes_total\{upstream="\Q$group\E",server="\Q$server\E"\} (\d+)$/m
        ? $1 : 0;
}
sub log_has {
    my ($re, $mark) = @_;
    return FastdTest::wait_for(
        sub { substr($t->error_log, $mark // 0) =~ $re }, 15);
}
sub call {
    my ($kind) = @_;
    my ($rc, $out) = TLS::run([ $py, $echo, 'client', "127.0.0.1:$port",
                                $kind ], timeout => 30);
    return $out =~ /"code": "(\w+)"/ ? $1 : "none: $out";
}

my $s1 = "127.0.0.1:$g1";
my $s2 = "127.0.0.1:$g2";
ok(FastdTest::wait_for(sub { probes('grpc', $s1) >= 2
                                 && probes('grpc', $s2) >= 2
                                 && probes('grpc_tls', "127.0.0.1:$gs") >= 2
                                 && probes('h2', "127.0.0.1:$hb") >= 2 }, 15),
   'every server is probed');
is(up('grpc', $s1), 1, 'gRPC health protocol: a SERVING server passes');
is(up('grpc', $s2), 1, '... both of them');
is(up('grpc_tls', "127.0.0.1:$gs"), 1,
   'grpcs:// with grpc_service=: probed over TLS with ALPN h2, passes');
is(up('h2', "127.0.0.1:$hb"), 1,
   'an h2 server: probed with an HTTP/2 GET (HTTP/1.1 would fail), passes');
ok(log_has(qr/h2_reset" server \S+ failed its health check \(stream reset: [^)]+\)/),
   'an h2 server resetting the probe\'s stream fails, the log says so');
is(up('h2_reset', "127.0.0.1:$hb"), 0, '... and it is out');
ok(log_has(qr/h2_404" server \S+ failed its health check \(status 200, not 204-204\)/),
   'an h2 answer out of the status= range fails');
ok(log_has(qr/grpc_unknown" server \S+ failed its health check \(grpc-status 5\)/),
   'an unknown grpc_service= fails: grpc-status 5 (NOT_FOUND)');
is(up('grpc_unknown_ok', $s1), 1, 'grpc_status=5 passes on that status');
is(call('Unary'), 'OK', 'calls go through');

# NOT_SERVING takes g2 out; calls go on to g1
my $m = length $t->error_log;
FastdTest::spew("$dir/g2.sick", '');
ok(log_has(qr/"grpc" server \Q$s2\E failed its health check \(NOT_SERVING\): taken out/, $m),
   'a NOT_SERVING answer takes the server out');
is(up('grpc', $s2), 0, '/status: it is out');
my @codes = map { call('Unary') } 1 .. 4;
is_deeply(\@codes, [ ('OK') x 4 ], 'calls go to the other server');
$m = length $t->error_log;
unlink "$dir/g2.sick";
ok(log_has(qr/"grpc" server \Q$s2\E passed its health check: back/, $m),
   'SERVING again: back in the group');

# a dead server: out, and the group's calls go to the live one
$m = length $t->error_log;
H2Up::stop($g1pid);
# (the first probe to fail says why: connect() refused, or, when a probe
# was under way on the connection as the server died, that connection's
# end; fails=1 takes it out at that one)
ok(log_has(qr/"grpc" server \Q$s1\E failed its health check \(.+\): taken out/, $m),
   'a dead gRPC server is taken out') or diag(substr($t->error_log, $m));
@codes = map { call('Unary') } 1 .. 4;
is_deeply(\@codes, [ ('OK') x 4 ], 'calls go to the live server');

ok($t->running, 'fastd still running');
if ($ENV{SHOWLOG}) { diag($t->error_log); diag($t->get("/status?format=prometheus")->body); }
$t->no_alerts;
$t->stop;

# --- bad lines -------------------------------------------------------------------
for my $bad (['type=grpc /h', qr/the URI \(\/h\) goes first/],
             ['/h type=grpc', qr/type=grpc asks \/grpc\.health\.v1\.Health\/Check, not \/h/],
             ['/h grpc_status=5', qr/grpc_status= go with type=grpc/],
             ['type=grpc grpc_status=17', qr/bad "grpc_status=17"/],
             ['type=tcp', qr/bad "type=tcp"/],
             ['interval=2s', qr/needs a URI that starts with \/.*or type=grpc/]) {
    my ($v, $re) = @$bad;
    my $file = "$dir/bad.conf";
    my $text = FastdTest::main_section() . "\n[upstream u]\n"
             . "server = 127.0.0.1:1\nhealth_check = $v\n\n[server]\n"
             . "listen = 127.0.0.1:" . $t->port . "\n\n[location /]\n"
             . "handler = proxy\npass = grpc://u\n";
    $text =~ s/%%DIR%%/$dir/g;
    FastdTest::spew($file, $text);
    my $line = FastdTest::line_of($text, qr/^health_check = /);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re && $out =~ /bad\.conf:$line\b/,
       "health_check = $v: a config error at bad.conf:$line")
        or diag($out);
}

done_testing();
