#!/usr/bin/perl
# Upstream faults under load: two backends flap every second (one down, the
# other down, both down, both up) while four clients send requests through
# handler = proxy. No request hangs, 5xx answers come only while both
# backends are down (with slack at the edges), and the worker leaks no
# descriptors. max_fails = 0 keeps the test about the flapping itself: a
# refused connect goes to the other server at once.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Faults;
use File::Temp ();
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => 'the proxy module is not built'
    unless `$FastdTest::BIN -k 2>/dev/null` =~ /module proxy/;

my @be = map { Backend->new(name => "b$_") } 1 .. 2;
my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 1 },
    locations => <<"L",
[location /app/]
handler = proxy
upstream = app
connect_timeout = 1s
read_timeout = 3s

[upstream app]
server = ${\ $be[0]->addr } max_fails=0
server = ${\ $be[1]->addr } max_fails=0
keepalive = 4
L
));
my $master = $t->start;
my ($w) = Faults::children($master);
is(($t->get('/app/warm') // {})->{status}, 200, 'through the proxy');
sleep 0.3;
my $fds0 = Faults::fd_count($w);

# the clients: sequential keep-alive requests, one line per answer
my $log = File::Temp->new(UNLINK => 1);
my $LOAD = 8;
my @kids;
for my $k (1 .. 4) {
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open my $fh, '>>', $log->filename or POSIX::_exit(1);
        my $end = time + $LOAD;
        my $c;
        while (time < $end) {
            $c //= $t->connect;
            my $t0 = time;
            my $r;
            if ($c && $c->send("GET /app/$k HTTP/1.1\r\nHost: x\r\n\r\n")) {
                $r = $c->read_response(timeout => 10);
            }
            my $st = $r ? $r->{status} : 0;
            syswrite $fh, sprintf("%.4f %.4f %d\n", $t0, time - $t0, $st);
            if (!$r || ($r->header('connection') // '') =~ /close/i) {
                $c->close if $c;
                $c = undef;
            }
        }
        POSIX::_exit(0);
    }
    push @kids, $pid;
}

# the flapping: [ A up, B up ] per second. A server goes down only when
# the other has been up for a second: a request that met the first dead
# server is retried on a live one (swapping both at once would also fail
# requests that tried the newly dead one after the still-dead one).
my @phases = ([1, 1], [0, 1], [1, 1], [1, 0], [0, 0], [1, 1], [0, 1], [0, 0]);
my @windows;    # [from, to] while both were down
my @changes;
my @state = (1, 1);
my $down_since;
for my $ph (@phases) {
    for my $i (0, 1) {
        next if $state[$i] == $ph->[$i];
        $ph->[$i] ? $be[$i]->start : $be[$i]->stop;
        $state[$i] = $ph->[$i];
        push @changes, sprintf('%.4f b%d %s', time, $i + 1, $ph->[$i] ? 'up' : 'down');
    }
    my $now = time;
    if (!$state[0] && !$state[1]) {
        $down_since //= $now;
    } elsif (defined $down_since) {
        push @windows, [$down_since, $now];
        $down_since = undef;
    }
    sleep 1;
}
for my $i (0, 1) { $be[$i]->start unless $state[$i] }
push @windows, [$down_since, time] if defined $down_since;
waitpid($_, 0) for @kids;

my (@lines) = map { [ split ' ' ] } split /\n/, FastdTest::slurp($log->filename) // '';
my $total = @lines;
my @hung = grep { $_->[1] > 4 || $_->[2] == 0 } @lines;
my @bad5 = grep {
    my ($t0, $dt, $st) = @$_;
    $st >= 500 && !grep { $t0 + $dt >= $_->[0] - 0.2 && $t0 <= $_->[1] + 0.2 } @windows
} @lines;
my @in5 = grep { $_->[2] >= 500 } @lines;
my @ok = grep { $_->[2] == 200 } @lines;
cmp_ok($total, '>', 200, "$total requests during the flapping");
is(scalar @hung, 0, 'no request hung or went unanswered') or diag(explain \@hung);
cmp_ok(scalar @in5, '>', 0, scalar(@in5) . ' answers were 5xx while both backends were down');
is(scalar @bad5, 0, 'no 5xx while a backend was up')
    or diag(explain({ bad => [ @bad5[0 .. fd_min(9, $#bad5)] ], down => \@windows,
                      changes => \@changes }), $t->error_log =~ /.*(?:error|warn).*\n/g);
cmp_ok(scalar @ok, '>', $total / 2, scalar(@ok) . ' answers were 200');
my %codes;
$codes{ $_->[2] }++ for @lines;
note('statuses: ' . join(', ', map { "$_ x $codes{$_}" } sort keys %codes));

# afterwards: all up, every request answered, no descriptor leaked
my $good = grep { (($t->get("/app/after$_") // {})->{status} // 0) == 200 } 1 .. 20;
is($good, 20, 'after the flapping: 20 requests, all 200');
my $fds1;
ok(FastdTest::wait_for(sub { $fds1 = Faults::fd_count($w); $fds1 <= $fds0 + 4 }, 5),
   "worker descriptors: $fds0 before, $fds1 after (upstream keepalive pool of 4)");

$t->stop;
$t->no_alerts;
done_testing;

sub fd_min { $_[0] < $_[1] ? $_[0] : $_[1] }
