#!/usr/bin/perl
# Slow readers: clients that ask for a lot and never read it. 100 ask for a
# 16 MB file (sendfile), 50 pipeline 4000 small requests each (the engine
# must stop reading at its output high-water mark rather than buffer every
# answer). send_timeout (3 s) closes them all, the worker's memory stays
# bounded meanwhile, and a normal client is served throughout.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use Socket qw(:all);
use Test::More;
use Time::HiRes qw(time sleep);

my $SEND_TIMEOUT = 3;
my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { send_timeout => "${SEND_TIMEOUT}s" },
    events => { max_connections => 1024 },
    locations => "[location /big/]\nroot = %%DIR%%\n\n",
));
mkdir $t->dir . '/big';
$t->write_file('big/file', 'x' x (16 << 20));
my $master = $t->start;
my ($w) = Faults::children($master);
my $rss0 = Faults::rss_kb($w);

# a socket with a small receive window that we never read from
sub stuck_client {
    my ($req) = @_;
    socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
    setsockopt($s, SOL_SOCKET, SO_RCVBUF, pack('i', 4096));
    connect($s, pack_sockaddr_in($t->port, inet_aton('127.0.0.1'))) or return undef;
    binmode $s;
    my $off = 0;
    # blocking write of the whole request (the server reads requests
    # until its output is full: bounded by its high-water mark)
    $s->blocking(0);
    my $deadline = time + 3;
    while ($off < length $req && time < $deadline) {
        my $n = syswrite($s, $req, length($req) - $off, $off);
        if (defined $n) { $off += $n; next }
        sleep 0.01;
    }
    return { s => $s, sent => $off };
}

# One wave of stuck clients; returns the worker's peak RSS (KB) while they
# hang on.
sub wave {
    my ($k) = @_;
    my @big = grep { defined } map {
        stuck_client("GET /big/file HTTP/1.1\r\nHost: x\r\n\r\n")
    } 1 .. 100;
    my $pipe = "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n" x 4000;
    my @piped = grep { defined } map { stuck_client($pipe) } 1 .. 50;
    is(scalar @big, 100, "wave $k: 100 clients asked for 16 MB each and read nothing");
    is(scalar @piped, 50, "wave $k: 50 clients pipelined 4000 requests each and read nothing");

    # memory while they hang on, and a normal client meanwhile
    my $peak = 0;
    my $t0 = time;
    my $normal_ok = 0;
    while (time - $t0 < $SEND_TIMEOUT - 0.5) {
        my $rss = Faults::rss_kb($w) // 0;
        $peak = $rss if $rss > $peak;
        my $r = $t->get('/plaintext');
        $normal_ok++ if $r && $r->{status} == 200;
        sleep 0.1;
    }
    # on a busy CI box setting up the 150 clients can eat most of the
    # window: one answer while they hang on is the proof
    cmp_ok($normal_ok, '>=', 1, "wave $k: a normal client was served meanwhile ($normal_ok requests)");

    # send_timeout closes them all
    ok(FastdTest::wait_for(sub { Faults::established($w, $t->port) == 0 },
                           $SEND_TIMEOUT + 6, 0.05),
       "wave $k: send_timeout closed every stuck connection");
    my $closed_in = time - $t0;
    cmp_ok($closed_in, '<', $SEND_TIMEOUT + 4,
           sprintf("wave %d: ... %.1f s after they stopped reading (send_timeout %d s)",
                   $k, $closed_in, $SEND_TIMEOUT));
    close $_->{s} for @big, @piped;
    return $peak;
}

# The sendfile clients cost nothing; a pipelining client holds at most the
# engine's output high-water mark of answers (64 KB) plus the pool memory
# of the requests answered so far on its connection.
# (AddressSanitizer keeps freed memory in quarantine: no RSS figures then)
my $asan = `$FastdTest::BIN -v 2>&1` =~ /--with-sanitizers/;
my $peak1 = wave(1);
my $per_conn = ($peak1 - $rss0) / 150;
my $peak2 = wave(2);
SKIP: {
    skip 'RSS is not meaningful under AddressSanitizer', 2 if $asan;
    cmp_ok($per_conn, '<', 1024,
           sprintf('worker RSS %d KB before, peak %d KB with 150 stuck clients '
                 . '(%.0f KB each)', $rss0, $peak1, $per_conn));
    cmp_ok($peak2, '<', $peak1 + 8192,
           "a second wave reuses the memory: peak $peak2 KB (first $peak1 KB)");
}
is(($t->get('/plaintext') // {})->{status}, 200, 'still serving');

$t->stop;
$t->no_alerts;
done_testing;
