#!/usr/bin/perl
# HTTP/3 across a reload, with two workers: the new workers read the same
# UDP sockets as the old ones, and a datagram whose connection ID names a
# worker of another generation is forwarded to it (fd_quic_fwd.c).
#
# Four rate-limited downloads (ngtcp2's gtlsclient) start on the old
# workers; a reload comes while they run, and one client moves to a new
# local port after it (connection migration during the drain). Each
# download completes byte for byte, in about the time its rate sets (a
# lost half of the client's packets would show as stalls), the migrated
# one on its old worker; /status counts the forwarded datagrams. New
# connections after the reload are the new workers' (the old ones make
# none, and no Initial is dropped). Then the forwarding fails: the old
# workers of a second reload are killed under a live connection, and a
# packet for it, read by a new worker, gets a stateless reset on their
# behalf. Last, a stop of the whole server (SIGQUIT) during a drain: the
# new workers exit at once, and the old one reads its socket again to
# finish its download.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use File::Path qw(make_path);
use JSON::PP;
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use Time::HiRes qw(time);
use Test::More;

my $py = TLS::http3_or_skip();
my $gtls = '/usr/bin/gtlsclient';
plan skip_all => 'ngtcp2-client (gtlsclient) is not installed' unless -x $gtls;

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
my ($file, $server) = TLS::quic_rated_file($dir, $cert, 1_000_000, # 4 MB
                                           '500k', status => 1);
my $rate = 500_000;
$t->write_conf(FastdTest::main_section(workers => 2, level => 'debug')
               . $server);
$t->start;
my $port = $t->port;

sub status { TLS::status($port) }

# the live workers of generation $g
sub gen_workers {
    my ($s, $g) = @_;
    return grep { $_->{alive} && $_->{generation} == $g }
           @{ $s->{workers} // [] };
}

sub sum_quic {
    my ($field, @w) = @_;
    my $n = 0;
    $n += $_->{quic}{$field} // 0 for @w;
    return $n;
}

# a gtlsclient download in the background, into $dir/dl$n (its
# output, verbose without -q, in $dir/gtls$n.out)
sub download {
    my ($n, @opt) = @_;
    make_path("$dir/dl$n");
    unlink "$dir/dl$n/f.bin";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$dir/gtls$n.out";
        open STDERR, '>&', \*STDOUT;
        exec('timeout', '60', $gtls, '--exit-on-all-streams-close',
             @opt, "--download=$dir/dl$n", '127.0.0.1', $port,
             "https://localhost:$port/rated/f.bin") or POSIX::_exit(127);
    }
    return { pid => $pid, n => $n, start => time };
}

sub finish {
    my ($d) = @_;
    my $ok = FastdTest::wait_for(sub {
        waitpid($d->{pid}, POSIX::WNOHANG()) == $d->{pid} }, 60);
    $d->{rc} = $ok ? $? >> 8 : -1;
    $d->{secs} = time - $d->{start};
    return $d;
}

sub h3_ok {
    my $out = `$py $FindBin::Bin/lib/h3get.py localhost:$port:127.0.0.1 https://localhost:$port/status`;
    my ($j) = grep { /^\{/ } split /\n/, $out;
    my $r = $j ? decode_json($j) : {};
    return ($r->{status} // 0) == 200 && ($r->{version} // 0) == 30;
}

# --- a reload under four downloads ------------------------------------------
my $s0 = status();
my $g1 = $s0->{generation};
my @dl = map { download($_, '-q') } 1 .. 3;
# the fourth moves to a new local port 5 s after its handshake: after the
# reload, while the old workers drain (the download takes 8 s)
push @dl, download(4, '-q', '--change-local-addr=5s');
ok(FastdTest::wait_for(sub {
    sum_quic('active_connections', gen_workers(status(), $g1)) >= 4 }, 20),
   'four downloads on the old workers');

my $hup = time;
$t->signal('HUP');
my $s1;
ok(FastdTest::wait_for(sub {
    $s1 = status();
    ($s1->{generation} // 0) == $g1 + 1 &&
        gen_workers($s1, $g1 + 1) == 2 }, 20),
   'the reload started two new workers');
cmp_ok(time - $dl[3]{start}, '<', 4.5,
       'the reload was done before the client moved');
my @old = map { $_->{pid} } gen_workers($s1, $g1);
my $old_conns = sum_quic('connections', gen_workers($s1, $g1));
my $dropped = $s1->{quic}{dropped_initials} // 0;

# new connections: the new workers'
ok(h3_ok(), "a new connection after the reload ($_)") for 1 .. 4;
my $s2 = status();
is(sum_quic('connections', gen_workers($s2, $g1 + 1)), 4,
   'the new workers made the four new connections');
is(sum_quic('connections', grep { $_->{generation} == $g1 }
                                @{ $s2->{workers} }), $old_conns,
   'the old workers made none');
is($s2->{quic}{dropped_initials} // 0, $dropped, 'no Initial was dropped');

for my $d (map { finish($_) } @dl) {
    my $got = FastdTest::slurp("$dir/dl$d->{n}/f.bin") // '';
    is($d->{rc}, 0, "download $d->{n}: the client ends normally")
        or diag(FastdTest::slurp("$dir/gtls$d->{n}.out"));
    ok(length $got == length $file && $got eq $file,
       "download $d->{n}: whole (" . length($got) . " bytes)");
    # 8 s at the rate; stalls on lost packets would add many seconds
    cmp_ok($d->{secs}, '<', length($file) / $rate + 5,
           sprintf("download %d: in %.1f s, without stalls", $d->{n},
                   $d->{secs}));
}
my $s3 = status();
cmp_ok($s3->{quic}{forwarded_datagrams} // 0, '>', 0,
       'datagrams were forwarded to the old workers (/status)');
cmp_ok($s3->{quic}{migrations} // 0, '>=', 1, 'the client migrated');
# the migration was an old worker's (those that exited fold into the
# total: the new workers' own count is 0)
is(sum_quic('migrations', gen_workers($s3, $g1 + 1)), 0,
   'and stayed on its old worker');
like($t->error_log, qr/QUIC socket of \S+ left to the new workers/,
     'an old worker left its socket to the new workers');
ok(FastdTest::wait_for(sub { !grep { kill 0, $_ } @old }, 20),
   'the old workers exited once their downloads ended');

# --- forwarding fails: the owner is gone -----------------------------------
# a download on generation 2 (its client verbose: the server's ID), a
# reload, and its workers die; a packet for that ID, read by a new worker
# and forwarded to nobody, gets a stateless reset on the owner's behalf
my $victim = download(5);
ok(FastdTest::wait_for(sub {
    sum_quic('active_connections', gen_workers(status(), $g1 + 1)) >= 1 },
    20), 'a download on the generation-2 workers');
my $scid;
FastdTest::wait_for(sub {
    ($scid) = (FastdTest::slurp("$dir/gtls5.out") // '')
        =~ /pkt rx .* scid=0x([0-9a-f]{36}) .*type=Initial/;
    $scid }, 10);
ok($scid && hex(substr($scid, 2, 2)) == (($g1 + 1) & 0xff),
   'its connection ID names generation 2') or diag($scid // 'no ID');
my $resets = status()->{quic}{stateless_resets} // 0;
$t->signal('HUP');
my $s4;
ok(FastdTest::wait_for(sub {
    $s4 = status();
    gen_workers($s4, $g1 + 2) == 2 }, 20), 'a second reload');
my @gone = map { $_->{pid} } gen_workers($s4, $g1 + 1);
kill 'KILL', @gone;
# reaped, and their stats slots retired (what the forwarding worker
# checks: a killed worker's socket name may outlive it for a moment,
# held by the kernel's deferred io_uring teardown)
my %gone = map { $_ => 1 } @gone;
ok(FastdTest::wait_for(sub {
    !grep({ kill 0, $_ } @gone) &&
        !grep { $_->{alive} && $gone{$_->{pid}} } @{ status()->{workers} }
    }, 10), 'its workers are killed');
my $udp = IO::Socket::INET->new(Proto => 'udp', PeerAddr => '127.0.0.1',
                                PeerPort => $port) or die "udp: $!";
$udp->send(pack('C H36 a81', 0x41, $scid // '', 'x' x 81));
my $reply = '';
$udp->recv($reply, 2048) if IO::Select->new($udp)->can_read(10);
ok(length $reply && length $reply < 100 && (ord($reply) & 0xc0) == 0x40,
   'a packet for its connection gets a stateless reset (' . length($reply)
   . ' bytes for 100)');
cmp_ok(status()->{quic}{stateless_resets} // 0, '>', $resets,
       'counted');
like($t->error_log, qr/QUIC worker \d+ of generation \d+ is gone/,
     'the new worker found the owner gone');
kill 'TERM', $victim->{pid};
waitpid $victim->{pid}, 0;
ok(h3_ok(), 'HTTP/3 still served');

# --- a stop of the whole server during a drain ------------------------------
# the old worker has left its socket to the new ones; told to stop, they
# exit at once (no connection), and it reads the socket again
my $last = download(6, '-q');
ok(FastdTest::wait_for(sub {
    sum_quic('active_connections', gen_workers(status(), $g1 + 2)) >= 1 },
    20), 'a download on the generation-3 workers');
my $left = () = $t->error_log =~ /left to the new workers/g;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    (() = $t->error_log =~ /left to the new workers/g) > $left }, 20),
   'a reload, and the old worker left its socket to the new ones');
$t->signal('QUIT');
finish($last);
my $got = FastdTest::slurp("$dir/dl6/f.bin") // '';
ok(length $got == length $file && $got eq $file,
   'fastd -s quit during the drain: the download ends whole ('
   . length($got) . ' bytes)');
cmp_ok($last->{secs}, '<', length($file) / $rate + 5,
       sprintf('in %.1f s', $last->{secs}));
like($t->error_log, qr/QUIC socket of \S+ read again/,
     'the old worker read its socket again');
ok(defined $t->wait_exit(20), 'fastd exited once the download ended');

$t->stop;
$t->no_alerts;
done_testing;
