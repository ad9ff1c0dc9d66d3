#!/usr/bin/perl
# Forwarded datagrams that cannot be handed over are counted: a worker
# hands a datagram for another worker's connection (or, in an older
# generation, a client's first Initial) to its owner through the owner's
# unix datagram socket (fd_quic_fwd.c), which queues a few messages
# (net.unix.max_dgram_qlen). Here the owner stops reading: after a
# reload, with one worker, the old worker drains a rate-limited
# download and is stopped (SIGSTOP); the new worker reads the shared
# UDP socket, and the packets the test sends for the download's
# connection ID (short headers that do not decrypt), one a millisecond,
# are the old worker's, so the new one forwards each. Once the stopped
# worker's queue is full they are dropped, after one retry, and /status
# and Prometheus count them (forward_dropped_datagrams). Once the old
# worker runs again, its download ends whole.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use File::Path qw(make_path);
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Time::HiRes ();
use Test::More;

my $py = TLS::http3_or_skip();
my $gtls = '/usr/bin/gtlsclient';
plan skip_all => 'ngtcp2-client (gtlsclient) is not installed' unless -x $gtls;

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
make_path("$dir/dl");
# 2 MB: 8 s at the rate
my ($file, $server) = TLS::quic_rated_file($dir, $cert, 500_000, '250k',
                                           status => 1);
$t->write_conf(FastdTest::main_section(workers => 1) . $server);
$t->start;
my $port = $t->port;

sub status { TLS::status($port, @_) }

sub gen_pids {
    my ($s, $g) = @_;
    return map { $_->{pid} } grep { $_->{alive} && $_->{generation} == $g }
           @{ $s->{workers} // [] };
}

my $s0 = status();
my $g1 = $s0->{generation};
is($s0->{quic}{forward_dropped_datagrams}, 0, 'none dropped at first');

my $dl = fork // die "fork: $!";
if ($dl == 0) {
    open STDOUT, '>', "$dir/gtls.out";
    open STDERR, '>&', \*STDOUT;
    exec('timeout', '60', $gtls, '--exit-on-all-streams-close',
         "--download=$dir/dl", '127.0.0.1', $port,
         "https://localhost:$port/rated/f.bin") or POSIX::_exit(127);
}
ok(FastdTest::wait_for(sub {
    my ($w) = grep { $_->{generation} == $g1 } @{ status()->{workers} };
    ($w->{quic}{active_connections} // 0) >= 1 }, 20),
   'a download on the old worker');
# the server's ID, from the client's log of the first packets
my $scid;
FastdTest::wait_for(sub {
    ($scid) = (FastdTest::slurp("$dir/gtls.out") // '')
        =~ /pkt rx .* scid=0x([0-9a-f]{36}) .*type=Initial/;
    $scid }, 10);
ok($scid, 'its connection ID') or diag(FastdTest::slurp("$dir/gtls.out"));

$t->signal('HUP');
my @new;
ok(FastdTest::wait_for(sub { @new = gen_pids(status(), $g1 + 1); @new == 1 },
                       20), 'the reload started a new worker');
my @old = gen_pids(status(), $g1);
is(scalar @old, 1, 'the old one drains its download');

kill 'STOP', @old;
my $udp = IO::Socket::INET->new(Proto => 'udp', PeerAddr => '127.0.0.1',
                                PeerPort => $port) or die "udp: $!";
# in rounds of 100, one a millisecond (about one a turn of the new
# worker, each turn a message), till the figure moves: a busy machine
# may have the worker read many in one turn
my ($n, $s) = (0, {});
for my $round (1 .. 20) {
    for (1 .. 100) {
        $udp->send(pack('C H36 a81', 0x41, $scid // '', 'x' x 81));
        Time::HiRes::sleep(0.001);
    }
    $n += 100;
    $s = status();
    last if ($s->{quic}{forward_dropped_datagrams} // 0) > 0;
}
ok(($s->{quic}{forward_dropped_datagrams} // 0) > 0,
   'with the owner stopped, forwarded datagrams are dropped')
    or diag(encode_json($s->{quic} // {}));
kill 'CONT', @old;
note("of $n: forwarded " . ($s->{quic}{forwarded_datagrams} // 0)
     . ', dropped ' . ($s->{quic}{forward_dropped_datagrams} // 0));
cmp_ok($s->{quic}{forward_dropped_datagrams} // 0, '<=', $n,
       "at most the $n sent");
cmp_ok($s->{quic}{forwarded_datagrams} // 0, '>', 0,
       'the first were handed over');
like(status(1), qr/^fastd_quic_forward_dropped_datagrams_total [1-9]\d*$/m,
     'Prometheus counts them too');

my $got = FastdTest::wait_for(sub {
    waitpid($dl, POSIX::WNOHANG()) == $dl }, 60);
ok($got && $? == 0, 'the download ends normally')
    or diag(FastdTest::slurp("$dir/gtls.out"));
my $body = FastdTest::slurp("$dir/dl/f.bin") // '';
ok(length $body == length $file && $body eq $file, 'whole');
my $h3 = `$py $FindBin::Bin/lib/h3get.py localhost:$port:127.0.0.1 https://localhost:$port/status`;
like($h3, qr/"status": 200/, 'the new worker serves HTTP/3');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
