#!/usr/bin/perl
# QUIC stateless reset (RFC 9000 10.3), with two workers: a short-header
# packet for a connection ID no connection has gets a stateless reset,
# shorter than the packet and ending with the ID's token, only from the
# worker and generation the ID names (byte 0: the worker, byte 1: the
# generation's low byte), never for 43 bytes or fewer. The token is the
# same after the workers are killed and respawned (the secret is the
# master's, shared), and a real client (ngtcp2's gtlsclient) whose
# connection's worker was killed takes the new worker's reset as its
# connection's. A real HTTP/3 request is served all along, and /status
# counts every reset, the killed workers' too.
#
# No reply is awaited for a set time: a packet that must get none is
# followed, on the same worker's socket, by one that must get a reply of
# its own length; whatever came before that reply answered the first.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use JSON::PP;
use Test::More;

my $root = FastdTest::root();
my $cfg = FastdTest::slurp("$root/objs/fd_auto_config.h") // '';
plan skip_all => 'fastd built without HTTP/3 (./configure --with-http3)'
    unless $cfg =~ /^#define FD_HTTP3 1/m;
my $py = '/usr/bin/python3';
plan skip_all => 'python3-pycurl on libcurl with HTTP/3 is not installed'
    unless system($py, '-c', 'import pycurl, sys; '
                . 'sys.exit(0 if "nghttp3" in pycurl.version else 1)') == 0;
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
mkdir "$dir/www";
FastdTest::spew("$dir/www/index.html", "hello\n");
$t->write_conf(<<"CONF");
@{[ FastdTest::main_section(workers => 2, level => 'debug') ]}
[server]
@{[ TLS::quic_server_keys($cert) ]}root = %%DIR%%/www

[location = /status]
handler = status
CONF
$t->start;
my $port = $t->port;

sub h3_ok {
    my $out = `$py $FindBin::Bin/lib/h3get.py localhost:$port:127.0.0.1 https://localhost:$port/index.html`;
    my ($j) = grep { /^\{/ } split /\n/, $out;
    my $r = $j ? decode_json($j) : {};
    return ($r->{status} // 0) == 200 && ($r->{body} // '') eq "hello\n";
}

my $udp = IO::Socket::INET->new(Proto => 'udp', PeerAddr => '127.0.0.1',
                                PeerPort => $port) or die "udp: $!";
my $sel = IO::Select->new($udp);

sub rnd { join '', map { chr int rand 256 } 1 .. $_[0] }

# an 18-byte connection ID: worker, generation, 16 random bytes
sub cid { my ($w, $g) = @_; return chr($w) . chr($g) . rnd(16) }

# a short header (fixed bit set) for $cid, $len bytes long
sub short_pkt {
    my ($cid, $len) = @_;
    return chr(0x40 | int rand 64) . $cid . rnd($len - 1 - length $cid);
}

# Send the packets, then the probe; the replies up to and including the
# probe's (the one of its length less one), undef if it never came.
sub exchange {
    my ($probe, @pkts) = @_;
    $udp->send($_) for @pkts, $probe;
    my @got;
    my $deadline = time + 10;
    while (time < $deadline) {
        next unless $sel->can_read(0.5);
        my $buf;
        $udp->recv($buf, 65536) // next;
        push @got, $buf;
        return @got if length($buf) == length($probe) - 1;
    }
    return;
}

ok(h3_ok(), 'an HTTP/3 request is served');

my $c0 = cid(0, 1);
my @r = exchange(short_pkt($c0, 100));
is(scalar @r, 1, 'a short header for an unknown ID of worker 0 gets one '
               . 'reply');
my $reset = $r[0] // '';
is(length $reset, 99, 'shorter than the packet it answers');
is(ord($reset) & 0xc0, 0x40, 'it looks like a short header (fixed bit)');
my $token = substr($reset, -16);

@r = exchange(short_pkt($c0, 1300));
is(scalar @r, 1, 'the same ID again, a bigger packet: one reply');
is(length($r[0] // ''), 1299, 'shorter than it');
is(substr($r[0] // '', -16), $token, 'ending with the same token');

@r = exchange(short_pkt(cid(0, 1), 80));
isnt(substr($r[0] // '', -16), $token, 'another ID, another token');

# 43 bytes or fewer: nothing (RFC 9000 10.3.3)
@r = exchange(short_pkt(cid(0, 1), 60), short_pkt($c0, 43),
              short_pkt($c0, 30));
is(scalar @r, 1, 'no reply to packets of 43 bytes or fewer');

# worker 1's IDs: worker 1 answers, not 0 (the steering sends byte 0 = 3
# to socket 3 % 2 = 1, where worker 1 does not own index 3)
my $c1 = cid(1, 1);
@r = exchange(short_pkt($c1, 90));
is(scalar @r, 1, 'worker 1 resets its own IDs');
my $token1 = substr($r[0] // '', -16);
@r = exchange(short_pkt(cid(1, 1), 70), short_pkt(cid(3, 1), 100));
is(scalar @r, 1, 'no reset for an ID whose worker byte is no worker\'s');

# another generation's IDs (an old worker may still own them): nothing
@r = exchange(short_pkt(cid(0, 1), 66), short_pkt(cid(0, 2), 100),
              short_pkt(cid(0, 0), 100));
is(scalar @r, 1, 'no reset for an ID of another generation');

ok(h3_ok(), 'HTTP/3 still served');

# the workers die and are respawned: the same secret, the same tokens.
# A real client (ngtcp2's) holds a connection across it, and sends its
# request only 3 s after its handshake: the new worker does not know the
# connection, and the client takes its stateless reset as the one the
# dead worker's transport parameters announced.
my $gtls = '/usr/bin/gtlsclient';
my $client;
if (-x $gtls) {
    $client = fork // die "fork: $!";
    if ($client == 0) {
        no warnings 'exec';
        # its debug output says when the handshake is done (the frame
        # HANDSHAKE_DONE); the qlog is written through stdio's buffer, and a
        # wait on it once saw the line only after the request, 3 s on,
        # was answered by the worker still alive
        exec "timeout 60 $gtls --delay-stream=3s "
           . "--exit-on-all-streams-close --qlog-file=$dir/client.qlog "
           . "127.0.0.1 $port https://localhost:$port/index.html "
           . ">$dir/client.out 2>&1";
        POSIX::_exit(127);
    }
    ok(FastdTest::wait_for(sub {
        (FastdTest::slurp("$dir/client.out") // '') =~ /HANDSHAKE_DONE/
    }, 10, 0.02), 'the client\'s handshake is done') or
        diag(substr(FastdTest::slurp("$dir/client.out") // '', 0, 2000));
}
my @old = $t->workers;
kill 'KILL', @old;
ok(FastdTest::wait_for(sub {
    my %o = map { $_ => 1 } @old;
    (grep { !$o{$_} } $t->workers) >= 2;
}, 15), 'two new workers after both were killed');
SKIP: {
    skip 'ngtcp2-client (gtlsclient) is not installed', 2 unless $client;
    waitpid $client, 0;
    my $q = FastdTest::slurp("$dir/client.qlog") // '';
    like($q, qr/handshake_done/, 'a real client had a connection');
    like($q, qr/"packet_type":"stateless_reset"/,
         'which it took as reset by the respawned worker');
}
@r = exchange(short_pkt($c0, 100));
is(substr($r[0] // '', -16), $token, 'worker 0 respawned: the same token');
@r = exchange(short_pkt($c1, 100));
is(substr($r[0] // '', -16), $token1, 'worker 1 respawned: the same token');

# a reload: generation 2 resets its IDs, not generation 1's
@old = $t->workers;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    my %o = map { $_ => 1 } @old;
    my @w = $t->workers;
    !(grep { $o{$_} } @w) && @w >= 2;
}, 15), 'the reload replaced both workers');
@r = exchange(short_pkt(cid(0, 2), 77), short_pkt($c0, 100));
is(scalar @r, 1, 'after a reload: generation 2 resets, generation 1\'s ID '
               . 'gets nothing');
ok(h3_ok(), 'HTTP/3 served after the reload');

like($t->error_log, qr/QUIC stateless reset sent/, 'logged at debug');
my ($rc, $out) = TLS::run([TLS::curl(), '-sk',
                           "https://127.0.0.1:$port/status"]);
my $q = (eval { decode_json($out) } // {})->{quic} // {};
is($q->{stateless_resets},
   scalar(() = $t->error_log =~ /QUIC stateless reset sent/g),
   '/status counts each, the killed workers\' too');
$t->stop;
$t->no_alerts(allow => qr/exited on signal 9|killed/);
done_testing;
