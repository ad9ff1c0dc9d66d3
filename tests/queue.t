#!/usr/bin/perl
# Queue limiting ([queue NAME], queue = NAME): FIFO and LIFO admission,
# rejections with reject_status and Retry-After, queue_timeout, a client
# that leaves while queued, the slot given back on every path (a hammer
# with random aborts), and the counters in /status.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use IO::Select;
use JSON::PP;
use Test::More;
use Time::HiRes qw(time sleep);

# a slow backend for the proxy behind a queue
my $be = Backend->new(handler => sub {
    my ($req) = @_;
    return undef if $req->{path} eq '/px/fail';   # close: 502
    Time::HiRes::sleep(0.6);
    return Backend::response(200, "proxied $req->{path}");
});
my $bp = $be->port;

my $locations = <<'END';
[location /px/]
handler = proxy
upstream = be
queue = px

[location = /status]
handler = status

[location = /fifo]
handler = delay
delay = 300ms
queue = fifo

[location = /lifo]
handler = delay
delay = 800ms
queue = lifo

[location = /short]
handler = delay
delay = 1s
queue = short

[location = /leave]
handler = delay
delay = 1s
queue = leave

[location = /hammer]
handler = delay
delay = 20ms
queue = hammer

[location = /qplain]
handler = plaintext
queue = hammer

END

my $extra = "[upstream be]\nserver = 127.0.0.1:$bp\n\n" . <<'END';
[queue px]
max_concurrent = 1
queue_limit = 1

[offload]
threads = 16

[queue fifo]
max_concurrent = 2
queue_limit = 2
retry_after = 7s

[queue lifo]
max_concurrent = 1
queue_limit = 2
order = lifo

[queue short]
max_concurrent = 1
queue_limit = 5
queue_timeout = 200ms
reject_status = 429

[queue leave]
max_concurrent = 1
queue_limit = 1

[queue hammer]
max_concurrent = 3
queue_limit = 4
order = lifo
END

my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => $locations, extra => $extra));
$t->start;

sub req { "GET $_[0] HTTP/1.1\r\nHost: localhost\r\n\r\n" }

sub q_status { $t->queue_status(@_) }
sub wait_q { $t->wait_queue(@_) }

# Read one response from each connection; returns the responses in
# connection order, and the order in which they completed.
sub collect {
    my ($conns, $timeout) = @_;
    my (%resp, @order, %t);
    my $deadline = time + ($timeout // 10);
    my $t0 = time;
    while (keys %resp < @$conns && time < $deadline) {
        my $sel = IO::Select->new(map { $_->sock }
                                  grep { !$resp{$_} } @$conns);
        $sel->can_read(0.05);
        for my $i (0 .. $#$conns) {
            my $c = $conns->[$i];
            next if $resp{$c};
            my $r = $c->read_response(timeout => 0.001) or next;
            $resp{$c} = $r;
            $t{$i} = time - $t0;
            push @order, $i;
        }
    }
    return ([map { $resp{$_} } @$conns], \@order, \%t);
}

# --- FIFO: 2 slots, 2 places, 10 at once -> 4 x 200, 6 x 503 ---------------
{
    my @c = map { $t->connect } 1 .. 10;
    $_->send(req('/fifo')) for @c;
    my ($r) = collect(\@c, 10);
    my @st = map { $_ ? $_->{status} : 0 } @$r;
    is(scalar(grep { $_ == 200 } @st), 4, 'fifo: 4 of 10 simultaneous get 200');
    is(scalar(grep { $_ == 503 } @st), 6, 'fifo: 6 of 10 get 503');
    my @rej = grep { $_ && $_->{status} == 503 } @$r;
    is(scalar(grep { ($_->header('retry-after') // '') eq '7' } @rej), 6,
       'fifo: every 503 carries Retry-After: 7');
    my @ok = grep { $_ && $_->{status} == 200 } @$r;
    is(scalar(grep { $_->{body} eq "delayed 300ms\n" } @ok), 4,
       'fifo: the admitted ones ran the handler');
    $_->close for @c;
    my $q = wait_q('fifo', sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 });
    ok($q, 'fifo: all slots given back');
    is($q && $q->{admitted}, 4, 'fifo: admitted counter 4');
    is($q && $q->{rejected_full}, 6, 'fifo: rejected_full counter 6');
    ok($q && $q->{wait_usec_sum} >= 2 * 250_000,
       'fifo: two waited ~300 ms each (wait_usec_sum)')
        or diag(explain $q);
    is($q && $q->{max_concurrent}, 2, 'fifo: max_concurrent gauge');
    is($q && $q->{queue_limit}, 2, 'fifo: queue_limit gauge');
}

# --- LIFO: 1 slot, 2 places; arrivals staggered by the status counters -------
{
    my %c;
    $c{A} = $t->connect;
    $c{A}->send(req('/lifo'));
    ok(wait_q('lifo', sub { $_[0]{active} == 1 }), 'lifo: A holds the slot');
    $c{B} = $t->connect;
    $c{B}->send(req('/lifo'));
    ok(wait_q('lifo', sub { $_[0]{waiting} == 1 }), 'lifo: B waits');
    $c{C} = $t->connect;
    $c{C}->send(req('/lifo'));
    ok(wait_q('lifo', sub { $_[0]{waiting} == 2 }), 'lifo: C waits, full');
    $c{D} = $t->connect;
    $c{D}->send(req('/lifo'));
    my @names = qw(A B C D);
    my ($r, $order, $when) = collect([@c{@names}], 10);
    my %st = map { $names[$_] => ($r->[$_] ? $r->[$_]{status} : 0) } 0 .. 3;
    is_deeply(\%st, {A => 200, B => 503, C => 200, D => 200},
              'lifo: the oldest waiter (B) is rejected for the newcomer D');
    is(join('', map { $names[$_] } @$order), 'BADC',
       'lifo: B rejected first, then A, then the newest (D) before C');
    ok($when->{1} < 0.5, 'lifo: B is rejected at once, not after a wait')
        or diag("B after $when->{1} s");
    $_->close for values %c;
    my $q = wait_q('lifo', sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 });
    ok($q && $q->{admitted} == 3 && $q->{rejected_full} == 1,
       'lifo: counters admitted 3, rejected_full 1') or diag(explain $q);
}

# --- queue_timeout: a waiter gets reject_status after 200 ms ----------------
{
    my $a = $t->connect;
    $a->send(req('/short'));
    ok(wait_q('short', sub { $_[0]{active} == 1 }), 'timeout: A holds the slot');
    my $t0 = time;
    my $b = $t->connect;
    $b->send(req('/short'));
    my $rb = $b->read_response(timeout => 5);
    my $dt = time - $t0;
    is($rb && $rb->{status}, 429, 'timeout: the waiter gets reject_status 429');
    ok($dt >= 0.18 && $dt < 0.9, 'timeout: after about queue_timeout')
        or diag("after $dt s");
    ok(!defined(($rb && $rb->header('retry-after'))),
       'timeout: no Retry-After unless configured');
    my $ra = $a->read_response(timeout => 5);
    is($ra && $ra->{status}, 200, 'timeout: the slot holder still gets 200');
    $_->close for $a, $b;
    my $q = wait_q('short', sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 });
    ok($q && $q->{rejected_timeout} == 1 && $q->{rejected_full} == 0 &&
       $q->{rejected} == 1, 'timeout: rejected_timeout 1 (rejected 1)')
        or diag(explain $q);
}

# --- a client that leaves while queued frees its place -----------------------
{
    my $a = $t->connect;
    $a->send(req('/leave'));
    ok(wait_q('leave', sub { $_[0]{active} == 1 }), 'leave: A holds the slot');
    my $b = $t->connect;
    $b->send(req('/leave'));
    ok(wait_q('leave', sub { $_[0]{waiting} == 1 }), 'leave: B waits');
    my $c = $t->connect;
    $c->send(req('/leave'));
    my $rc = $c->read_response(timeout => 5);
    is($rc && $rc->{status}, 503, 'leave: C finds the queue full');
    $b->close;
    ok(wait_q('leave', sub { $_[0]{waiting} == 0 && $_[0]{active} == 1
                             && $_[0]{admitted} == 1 }),
       'leave: B closed: its place is free, A still holds the slot');
    my $d = $t->connect;
    $d->send(req('/leave'));
    ok(wait_q('leave', sub { $_[0]{waiting} == 1 }), 'leave: D takes the place');
    my $ra = $a->read_response(timeout => 5);
    my $rd = $d->read_response(timeout => 5);
    is($ra && $ra->{status}, 200, 'leave: A gets 200');
    is($rd && $rd->{status}, 200, 'leave: D (the next one) gets in: 200');
    $_->close for $a, $c, $d;
    my $q = wait_q('leave', sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 });
    ok($q && $q->{admitted} == 2 && $q->{rejected_full} == 1,
       'leave: admitted 2 (A, D), rejected 1 (C), B counted in neither')
        or diag(explain $q);
}

# --- a client that leaves while its handler runs: the slot comes back --------
{
    my $a = $t->connect;
    $a->send(req('/leave'));
    ok(wait_q('leave', sub { $_[0]{active} == 1 }), 'abort: A runs');
    $a->close;
    ok(wait_q('leave', sub { $_[0]{active} == 0 }, 3),
       'abort: A left mid-handler: its slot is given back when it ends');
    my $r = $t->http(req('/leave'), timeout => 5);
    is($r && $r->{status}, 200, 'abort: the next request gets the slot');
}

# --- the proxy behind a queue: waiting, client abort, upstream error --------
{
    my $a = $t->connect;
    $a->send(req('/px/a'));
    ok(wait_q('px', sub { $_[0]{active} == 1 }), 'proxy: A holds the slot');
    my $b = $t->connect;
    $b->send(req('/px/b'));
    ok(wait_q('px', sub { $_[0]{waiting} == 1 }), 'proxy: B waits');
    my $rc = $t->http(req('/px/c'), timeout => 5);
    is($rc && $rc->{status}, 503, 'proxy: C is rejected (full)');
    my $ra = $a->read_response(timeout => 5);
    my $rb = $b->read_response(timeout => 5);
    is($ra && $ra->{body}, 'proxied /px/a', 'proxy: A answered by the backend');
    is($rb && $rb->{body}, 'proxied /px/b', 'proxy: B answered after A');
    $_->close for $a, $b;

    # the client leaves while the proxy waits on the upstream
    $a = $t->connect;
    $a->send(req('/px/slow'));
    ok(wait_q('px', sub { $_[0]{active} == 1 }), 'proxy abort: A is proxied');
    $a->close;
    ok(wait_q('px', sub { $_[0]{active} == 0 }, 3),
       'proxy abort: the slot is back as soon as the client left');

    # an upstream error ends the request: 502, and the slot is back
    my $rf = $t->http(req('/px/fail'), timeout => 5);
    is($rf && $rf->{status}, 502, 'proxy error: 502');
    my $q = wait_q('px', sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 });
    ok($q && $q->{admitted} == 4, 'proxy: admitted 4, none left holding a slot')
        or diag(explain $q);
}

# --- hammer: random aborts, sync and offloaded handlers, LIFO evictions ------
{
    srand(4);
    my $end = time + 10;
    my (@open, %seen, $sent);
    while (time < $end) {
        while (@open < 24) {
            my $c = $t->connect or last;
            my $path = rand() < 0.3 ? '/qplain' : '/hammer';
            # sometimes two pipelined requests on one connection
            $c->send(req($path) x (rand() < 0.2 ? 2 : 1));
            $sent++;
            push @open, [$c, time + rand(0.08), rand() < 0.4];
        }
        my @keep;
        for my $e (@open) {
            my ($c, $at, $abort) = @$e;
            if ($abort && time >= $at) {
                $c->close;          # leave, whatever state it is in
                $seen{abort}++;
                next;
            }
            my $r = $c->read_response(timeout => 0.001);
            if ($r) {
                $seen{$r->{status}}++;
                $c->close;
                next;
            }
            if (time > $at + 5) {
                $seen{stuck}++;
                $c->close;
                next;
            }
            push @keep, $e;
        }
        @open = @keep;
        IO::Select->new(map { $_->[0]->sock } @open)->can_read(0.005) if @open;
    }
    for my $e (@open) {
        my $r = $e->[0]->read_response(timeout => 5);
        $seen{$r ? $r->{status} : 'none'}++;
        $e->[0]->close;
    }
    ok(!$seen{stuck} && !$seen{none}, 'hammer: every request answered or aborted')
        or diag(explain \%seen);
    ok(($seen{200} // 0) > 0 && ($seen{abort} // 0) > 0,
       "hammer: $sent connections, 200s and aborts seen")
        or diag(explain \%seen);
    my $q = wait_q('hammer', sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 },
                   5);
    ok($q, 'hammer: ends with active = 0 and waiting = 0')
        or diag(explain q_status('hammer'));
    my $r = $t->http(req('/qplain'), timeout => 5);
    is($r && $r->{status}, 200, 'hammer: the queue still admits afterwards');
}

# --- /status: every queue, per worker too ------------------------------------
{
    my $r = $t->get('/status');
    my $s = $r && eval { decode_json($r->body) };
    my %names = map { $_->{queue} => 1 } @{ $s->{modules}{queue} || [] };
    is_deeply(\%names, {map { $_ => 1 } qw(fifo lifo short leave hammer px)},
              'status: modules.queue lists every [queue]');
    my ($w) = @{ $s->{workers} || [] };
    ok($w && grep({ ($_->{queue} // '') eq 'fifo' && $_->{admitted} == 4 }
                  @{ $w->{modules}{queue} || [] }),
       'status: the worker detail has the queue counters');
    my $p = $t->get('/status?format=prometheus');
    like($p && $p->body, qr/^fastd_queue_rejected_full_total\{queue="fifo"\} 6$/m,
         'status: Prometheus fastd_queue_rejected_full_total{queue="fifo"}');
}

# --- configuration errors name file:line -------------------------------------
{
    my $conf = FastdTest::base_conf(locations => "[location /x]\nhandler = plaintext\n"
        . "queue = nosuch\n");
    my $path = $t->write_conf($conf, 'bad.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, 'unknown queue name: -t fails');
    like($out, qr/bad\.conf:\d+: unknown queue "nosuch"/,
         'unknown queue name: file:line in the message');
    my ($line) = $out =~ /bad\.conf:(\d+):/;
    my @lines = split /\n/, FastdTest::slurp($path);
    is($line && $lines[$line - 1], 'queue = nosuch', 'the line is the queue = key');

    $path = $t->write_conf(FastdTest::base_conf(extra => "[queue q]\norder = random\n"),
                           'bad2.conf');
    ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/bad2\.conf:\d+: "order" must be one of fifo \| lifo/,
         'bad order: rejected with file:line');
}

$t->stop;
$t->no_alerts;
done_testing;
