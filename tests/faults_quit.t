#!/usr/bin/perl
# SIGQUIT under load: every request in flight when the stop begins
# completes (slow ones: handler = delay, 600 ms and 3 s), its answer carries
# "Connection: close", a request sent on a kept-alive connection during the
# drain is still answered, the workers exit as soon as their work is done
# (not after keepalive_timeout), and the port refuses new connections from
# the start of the drain, as nginx. wrk keeps a plaintext load going.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use IO::Socket::INET;
use Test::More;
use Time::HiRes qw(time sleep);

my $DELAY = 0.6;
my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    locations => "[location /slow]\nhandler = delay\ndelay = 600ms\n\n"
               . "[location /slower]\nhandler = delay\ndelay = 3s\n\n",
    extra => "[offload]\nthreads = 16\n",
));
my $master = $t->start;
FastdTest::wait_for(sub { Faults::children($master) == 2 }, 10);

my $wrk = Faults::wrk_path()
    ? Faults::wrk_start(url => 'http://127.0.0.1:' . $t->port . '/plaintext',
                        conns => 8, duration => 3)
    : undef;
sleep 0.5;

# slow requests in flight, on kept-alive connections
my @slow = map {
    my $c = $t->connect;
    $c->send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    $c;
} 1 .. 10;
my $slower = $t->connect;
$slower->send("GET /slower HTTP/1.1\r\nHost: x\r\n\r\n");
# an idle kept-alive connection that sends during the drain
my $ka = $t->connect;
$ka->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
my $r0 = $ka->read_response(timeout => 5);
is($r0 && $r0->{status}, 200, 'a kept-alive connection, answered before the stop');
sleep 0.1;

my $t0 = time;
ok($t->signal('QUIT'), 'SIGQUIT sent');
sleep 0.05;
$ka->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
my $kr = $ka->read_response(timeout => 5);
is($kr && $kr->{status}, 200, 'a request on a kept-alive connection during the drain: 200');
like($kr ? $kr->header('connection') // '' : '', qr/close/i, '... with Connection: close');
ok($ka->wait_eof(3), '... then the connection is closed');

# as nginx, the listening sockets close when a graceful stop begins: a new
# client is refused at once (the master once kept them until it exited, so
# the kernel completed handshakes that were reset when the drain ended)
my $refused_at;
FastdTest::wait_for(sub {
    my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                  Proto => 'tcp', Timeout => 1);
    $refused_at = time - $t0 unless $c;
    !$c;
}, 2.5, 0.02);
ok(defined $refused_at, sprintf('new connections are refused during the drain (%.2f s after '
                                . 'SIGQUIT)', $refused_at // -1));

my ($done, $closed, $last) = (0, 0, 0);
for my $c (@slow) {
    my $r = $c->read_response(timeout => 5);
    $done++ if $r && $r->{status} == 200 && $r->{body} =~ /delayed/;
    $closed++ if $r && ($r->header('connection') // '') =~ /close/i;
    $last = time - $t0;
}
is($done, 10, 'all 10 requests in flight at the stop completed with 200');
is($closed, 10, '... each answered with Connection: close');

my $st = $t->wait_exit(10);
my $exit = time - $t0;
ok(defined $st, sprintf('the master exited %.2f s after SIGQUIT (last answer at %.2f s)',
                        $exit, $last));
cmp_ok($exit, '<', 3 + 3, 'the drain ends with the work, not with keepalive_timeout');
is($t->exit_code, 0, 'exit code 0');
my $refused = !IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                     Proto => 'tcp', Timeout => 2);
ok($refused, 'after the drain the port refuses connections');

{
    my $r = $slower->read_response(timeout => 10);
    is($r && $r->{status}, 200, 'the 3 s request in flight when the listeners closed completed');
}

if ($wrk) {
    my $r = $wrk->finish;
    note($r->{text});
    is($r->{non2xx}, 0, 'wrk: no non-2xx answer during the stop');
    # wrk's own connections: each got its last answer with Connection: close;
    # reconnecting once the workers stopped accepting is what fails
    cmp_ok($r->{requests}, '>', 100, "wrk: $r->{requests} requests");
}

$t->no_alerts;
done_testing;
