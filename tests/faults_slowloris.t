#!/usr/bin/perl
# Slowloris: 1000 connections each dribbling a request header, one byte
# every 1.5 s. Meanwhile a normal client's requests are answered at once (a
# median under 10 ms, a p99 under 100 ms: a worker that waited on a slow
# connection would take the 1.5 s between its bytes), and header_timeout
# (4 s) closes every slow connection (header_timeout is for the whole header,
# not between bytes). The p99 has slack for a loaded machine: the sanitizer
# build beside another lane of tests once took 10.8 ms there.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use Errno qw(EAGAIN EWOULDBLOCK);
use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

# 1000 slow connections, or as many as our own descriptor limit allows
my $open_max = POSIX::sysconf(POSIX::_SC_OPEN_MAX()) || 1024;
my $SLOW = $ENV{FASTD_SLOWLORIS} // ($open_max - 100 < 1000 ? $open_max - 100 : 1000);
my $HEADER_TIMEOUT = 4;
my $P50_LIMIT_MS = 10;
my $P99_LIMIT_MS = $ENV{FASTD_P99_LIMIT_MS} // 100;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    events => { max_connections => 4096 },
    http   => { header_timeout => "${HEADER_TIMEOUT}s" },
));
my $master = $t->start;
my ($w) = Faults::children($master);

# the slow clients, in a child: prints "opened N", later "closed N maxlife S"
pipe(my $rd, my $wr) or die "pipe: $!";
my $kid = fork // die "fork: $!";
if ($kid == 0) {
    close $rd;
    $wr->autoflush(1);
    $SIG{PIPE} = 'IGNORE';
    my $hdr = "GET /plaintext HTTP/1.1\r\nHost: slow\r\nX-Slow: " . ('z' x 64);
    my @c;
    for (1 .. $SLOW) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                      Proto => 'tcp', Timeout => 5) or last;
        $s->blocking(0);
        syswrite($s, substr($hdr, 0, 1));
        push @c, { s => $s, t0 => time, pos => 1, closed => undef };
    }
    print $wr "opened " . scalar(@c) . "\n";
    my $end = time + $HEADER_TIMEOUT + 6;
    my $next_write = time + 1.5;
    my %by_fd = map { fileno($_->{s}) => $_ } @c;
    while (time < $end && %by_fd) {
        if (time >= $next_write) {
            # one more byte on every open connection
            for my $c (values %by_fd) {
                syswrite($c->{s}, substr($hdr, $c->{pos}++ % length($hdr), 1));
            }
            $next_write += 1.5;
        }
        # wait for closes (EOF) until the next round of bytes
        my $rin = '';
        vec($rin, $_, 1) = 1 for keys %by_fd;
        my $wait = $next_write - time;
        $wait = 0 if $wait < 0;
        my $n = select(my $rout = $rin, undef, undef, $wait);
        next unless $n && $n > 0;
        for my $fd (keys %by_fd) {
            next unless vec($rout, $fd, 1);
            my $c = $by_fd{$fd};
            my $r = sysread($c->{s}, my $buf, 4096);
            if (defined $r && $r > 0) {
                $c->{answered} = 1;    # the 408 before the close
                next;
            }
            next if !defined $r && ($! == EAGAIN || $! == EWOULDBLOCK);
            $c->{closed} = time - $c->{t0};
            close $c->{s};
            delete $by_fd{$fd};
        }
    }
    my @closed = grep { defined $_->{closed} } @c;
    my $max = 0;
    $max = $_->{closed} > $max ? $_->{closed} : $max for @closed;
    printf $wr "closed %d maxlife %.2f\n", scalar(@closed), $max;
    POSIX::_exit(0);
}
close $wr;
my $opened = <$rd> // '';
my ($n_open) = $opened =~ /opened (\d+)/;
is($n_open, $SLOW, "$SLOW slow connections opened");
sleep 0.5;
my $held = Faults::established($w, $t->port);
cmp_ok($held, '>=', $SLOW * 0.95, "the worker holds them ($held)");

# a normal client meanwhile: 400 requests on one kept-alive connection,
# then 100 on fresh connections
my @lat;
my $c = $t->connect;
my $t_end = time + $HEADER_TIMEOUT - 1.5;
my $fail = 0;
while (@lat < 400 && time < $t_end) {
    my $t0 = time;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    my $r = $c->read_response(timeout => 2);
    $fail++ unless $r && $r->{status} == 200;
    push @lat, (time - $t0) * 1000;
}
$c->close;
for (1 .. 100) {
    last if time >= $t_end;
    my $t0 = time;
    my $r = $t->get('/plaintext');
    $fail++ unless $r && $r->{status} == 200;
    push @lat, (time - $t0) * 1000;
}
my @s = sort { $a <=> $b } @lat;
my $p99 = $s[int(0.99 * $#s)];
my $p50 = $s[int(0.5 * $#s)];
is($fail, 0, scalar(@lat) . ' normal requests while the slow ones held on: all 200');
ok($p50 < $P50_LIMIT_MS && $p99 < $P99_LIMIT_MS,
   sprintf('normal clients: p50 %.2f ms (< %d), p99 %.2f ms (< %d)',
           $p50, $P50_LIMIT_MS, $p99, $P99_LIMIT_MS));

# header_timeout closes the slow ones
my $res = <$rd> // '';
waitpid($kid, 0);
my ($n_closed, $maxlife) = $res =~ /closed (\d+) maxlife ([\d.]+)/;
is($n_closed, $SLOW, 'header_timeout closed every slow connection');
cmp_ok($maxlife // 99, '<', $HEADER_TIMEOUT + 1,
       sprintf('the last one lived %.2f s (header_timeout %d s)', $maxlife // -1,
               $HEADER_TIMEOUT));
ok(FastdTest::wait_for(sub { Faults::established($w, $t->port) == 0 }, 5),
   'the worker holds no connection afterwards');
is(($t->get('/plaintext') // {})->{status}, 200, 'still serving');

$t->stop;
$t->no_alerts;
done_testing;
