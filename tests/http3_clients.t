#!/usr/bin/perl
# The HTTP/3 tests' own clients against a QUIC server that is not fastd:
# ngtcp2's gtlsserver (Debian's ngtcp2-server). tests/bench/h3load.c
# makes the h3 benchmark's figures and drives http3_attacks.t, and
# tests/lib/quicraw.c builds its own 1-RTT packets for http3_frames.t;
# were either wrong in a way fastd happened to forgive, those tests would
# prove nothing. Here h3load fetches a file (its body byte for byte, and
# 200 requests over 4 connections all "ok"), a missing one is a 404, and
# quicraw's handshake and packet protection read the transport
# parameters gtlsserver was told to send.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use File::Path qw(make_path);
use POSIX ();
use Test::More;

my ($server) = grep { -x } '/usr/sbin/gtlsserver', '/usr/bin/gtlsserver';
plan skip_all => 'ngtcp2-server (gtlsserver) is not installed' unless $server;
FastdTest::skip_in_sanitizer_stage("it runs no fastd");
my $flags = TLS::quic_client_flags();

my $t = FastdTest->new;
my $dir = $t->dir;
my ($quicraw, $h3load) = TLS::quic_clients($dir, $flags,
    'tests/lib/quicraw.c', 'tests/bench/h3load.c');
my $cert = TLS->new($dir)->server('localhost');
make_path("$dir/htdocs");
my $body = join '', map { chr(32 + $_ % 95) } 1 .. 5000;
FastdTest::spew("$dir/htdocs/f.txt", $body);
my $port = $t->port;

my $pid = fork // die "fork: $!";
if ($pid == 0) {
    open STDOUT, '>', "$dir/gtlsserver.out";
    open STDERR, '>&', \*STDOUT;
    exec($server, '-q', "--htdocs=$dir/htdocs", '--max-streams-bidi=37',
         '--max-stream-data-bidi-remote=65536', '127.0.0.1', $port,
         $cert->{key}, $cert->{crt}) or POSIX::_exit(127);
}
END { local $?; if ($pid) { kill 'TERM', $pid; waitpid $pid, 0 } }

my $url = "https://127.0.0.1:$port";
my $out = '';
# UDP has no listen to wait for: the first answer is the readiness
ok(FastdTest::wait_for(sub {
    $out = `timeout 10 $h3load -n1 -v $url/f.txt 2>&1`;
    $out =~ /^status 200$/m }, 20), 'h3load: a GET to gtlsserver, 200')
    or diag($out, FastdTest::slurp("$dir/gtlsserver.out") // '');
my ($got) = $out =~ /^status 200\n(.*)\nend$/ms;
ok(defined $got && $got eq $body,
   '  the body byte for byte (' . length($got // '') . ' bytes)');

$out = `timeout 20 $h3load -n1 -v $url/none 2>&1`;
like($out, qr/^status 404$/m, 'h3load: a missing file, 404');

$out = `timeout 30 $h3load -c4 -m8 -n200 $url/f.txt 2>&1`;
like($out, qr/^requests: (\d+) done, \1 ok, 0 errors, 0 connections failed$/m,
     'h3load: 4 connections x 8 streams, every request ok')
    or diag($out);
my ($done) = $out =~ /^requests: (\d+) done/m;
cmp_ok($done // 0, '>=', 200, '  200 of them at least');
like($out, qr/^status codes: \d+ 2xx, 0 3xx, 0 4xx, 0 5xx$/m, '  all 2xx');

$out = `timeout 20 $quicraw 127.0.0.1 $port params 2>&1`;
like($out, qr/^params: streams 37 stream_data 65536$/m,
     'quicraw: the transport parameters gtlsserver was told to send')
    or diag($out);

ok(kill(0, $pid), 'gtlsserver still running');
done_testing;
