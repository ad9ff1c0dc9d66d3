#!/usr/bin/perl
# The offload pool: inline_completions = off serves plaintext/json through
# it, the loop keeps answering while the pool is blocked, an idle pool costs
# no CPU, adaptive sizing grows to max_threads under blocking work and
# shrinks after idle_timeout, adaptive = off keeps a fixed size, and the
# figures reach /status (group "offload").

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Select;
use JSON::PP;
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

my $locations = <<'END';
[location = /status]
handler = status

[location = /delay]
handler = delay
delay = 200ms

END

sub req { "GET $_[0] HTTP/1.1\r\nHost: localhost\r\n\r\n" }

sub pool_status {
    my ($t) = @_;
    my $r = $t->get('/status');
    return undef unless $r && $r->status == 200;
    my $s = eval { decode_json($r->body) } or return undef;
    return $s->{modules}{offload}[0];
}

sub wait_pool {
    my ($t, $cond, $timeout) = @_;
    return FastdTest::wait_for(sub {
        my $p = pool_status($t);
        return $p && $cond->($p) ? $p : undef;
    }, $timeout // 5, 0.02);
}

# utime + stime of a process, in clock ticks (all its threads).
sub cpu_ticks {
    my ($pid) = @_;
    my $stat = FastdTest::slurp("/proc/$pid/stat") // return undef;
    $stat =~ s/^.*\)\s+//s;
    my @f = split ' ', $stat;
    return $f[11] + $f[12]; # fields 14 and 15, counted from 3
}

# The worker's pid, once it answers (the port opens before the fork).
sub worker_pid {
    my ($t) = @_;
    return FastdTest::wait_for(sub {
        my $r = $t->get('/status');
        my $s = $r && $r->status == 200 && eval { decode_json($r->body) };
        return $s && $s->{workers}[0]{alive} ? $s->{workers}[0]{pid} : undef;
    }, 5, 0.02);
}

sub threads_of {
    my ($pid) = @_;
    opendir my $d, "/proc/$pid/task" or return 0;
    my $n = grep { /^\d+$/ } readdir $d;
    closedir $d;
    return $n;
}

# Send $n requests for $path on $n connections; returns the connections.
sub fire {
    my ($t, $path, $n) = @_;
    my @c = map { $t->connect } 1 .. $n;
    $_->send(req($path)) for @c;
    return @c;
}

sub all_ok {
    my (@c) = @_;
    my $ok = 0;
    for my $c (@c) {
        my $r = $c->read_response(timeout => 10);
        $ok++ if $r && $r->{status} == 200;
        $c->close;
    }
    return $ok;
}

# --- inline_completions = off: every handler through a fixed pool --------------
{
    my $t = FastdTest->new(conf => FastdTest::base_conf(
        http      => { inline_completions => 'off' },
        locations => $locations,
        extra     => "[offload]\nthreads = 2\nadaptive = off\n"));
    $t->start;
    my $worker = worker_pid($t);

    my $p0 = wait_pool($t, sub { $_[0]{threads} == 2 });
    ok($p0, 'fixed pool: 2 threads started') or diag(explain pool_status($t));
    is($p0 && $p0->{max_threads}, 2, 'fixed pool: max_threads is the size');
    my $c0 = $p0 ? $p0->{completed} : 0;

    my $ok = 0;
    for (1 .. 20) {
        my $r = $t->get('/plaintext');
        $ok++ if $r && $r->status == 200 && $r->body eq 'Hello, World!';
        $r = $t->get('/json');
        $ok++ if $r && $r->status == 200
            && $r->body =~ /^\{"message":\s*"Hello, World!"\}$/;
    }
    is($ok, 40, 'inline_completions = off: plaintext and json answered');

    # 16 pipelined: done() order must not reorder responses
    my $c = $t->connect;
    $c->send(join '', map { req($_ % 2 ? '/json' : '/plaintext') } 1 .. 16);
    my @r = $c->read_responses(16, timeout => 5);
    $c->close;
    is(scalar(grep { $_->{status} == 200 } @r), 16,
       'inline_completions = off: 16 pipelined answered');
    is(join('', map { $_->{body} =~ /message/ ? 'j' : 'p' } @r), 'jp' x 8,
       'inline_completions = off: pipelined responses in order');

    my $p = wait_pool($t, sub { $_[0]{completed} >= $c0 + 40 + 16 });
    ok($p, 'the pool counted every dispatched handler (completed)')
        or diag(explain pool_status($t));

    # idle: a worker with an idle pool must not spin
    sleep 0.3;
    my $a = cpu_ticks($worker);
    sleep 2;
    my $b = cpu_ticks($worker);
    my $ticks = $b - $a;
    ok(defined $a && $ticks < 5, "idle worker with an idle pool: $ticks ticks in 2 s")
        or diag("cpu ticks $a -> $b");
    is(threads_of($worker), 3, 'the worker has its loop and 2 pool threads');

    $t->stop;
    $t->no_alerts;
}

# --- adaptive = off: a fixed size under blocking work ---------------------------
{
    my $t = FastdTest->new(conf => FastdTest::base_conf(
        locations => $locations,
        extra     => "[offload]\nthreads = 2\nmax_threads = 8\nadaptive = off\n"));
    $t->start;
    my $worker = worker_pid($t);

    # blocking work: 16 x 200 ms on 2 fixed threads
    my $t0 = time;
    my @c = fire($t, '/delay', 16);
    my $busy = wait_pool($t, sub { $_[0]{busy} == 2 && $_[0]{pending} > 0 });
    ok($busy, 'fixed pool: 2 busy, the rest pending') or diag(explain pool_status($t));
    my $max_threads = 0;
    my $during = FastdTest::wait_for(sub {
        my $q = pool_status($t);
        $max_threads = $q->{threads} if $q && $q->{threads} > $max_threads;
        return $q && $q->{pending} == 0 && $q->{busy} == 0;
    }, 10, 0.05);
    is(all_ok(@c), 16, 'fixed pool: 16 delay requests answered');
    is($max_threads, 2, 'adaptive = off: never more than `threads`');
    ok(time - $t0 >= 1.5, 'fixed pool: 16 x 200 ms on 2 threads took >= 1.5 s');
    my $after = pool_status($t);
    ok($after && $after->{wait_usec_sum} > 1_000_000,
       'queue-wait time is summed (wait_usec_sum)') or diag(explain $after);

    is(threads_of($worker), 3, 'fixed pool: the worker has its loop and 2 threads');
    $t->stop;
    $t->no_alerts;
}

# --- adaptive: grows to max_threads, shrinks after idle_timeout ---------------
{
    my $t = FastdTest->new(conf => FastdTest::base_conf(
        locations => $locations,
        extra     => "[offload]\nthreads = 1\nmax_threads = 4\n"
                   . "adaptive = on\nidle_timeout = 1s\n"));
    $t->start;
    my $worker = worker_pid($t);
    ok(wait_pool($t, sub { $_[0]{threads} == 1 && $_[0]{max_threads} == 4 }),
       'adaptive: starts with `threads` = 1');

    my @c = fire($t, '/delay', 40);
    my $t0 = time;
    my $grown = wait_pool($t, sub { $_[0]{threads} == 4 }, 6);
    my $dt = time - $t0;
    ok($grown, sprintf('adaptive: grew to max_threads = 4 while work waited '
                       . '(%.2f s)', $dt)) or diag(explain pool_status($t));
    is(all_ok(@c), 40, 'adaptive: 40 delay requests answered');
    my $p = pool_status($t);
    ok($p && $p->{threads} <= 4, 'adaptive: never above max_threads');

    # the loop never blocks: plaintext answers while the pool is full
    @c = fire($t, '/delay', 50);
    ok(wait_pool($t, sub { $_[0]{busy} == 4 && $_[0]{pending} > 0 }),
       'the pool is blocked: 4 busy, work pending');
    # a loop that waited for the pool would hold every one of them for a
    # 200 ms job or longer: the median tells, one slow turn of a loaded
    # machine does not
    my @d;
    for (1 .. 10) {
        my $t1 = time;
        my $r = $t->get('/plaintext');
        push @d, $r && $r->status == 200 ? time - $t1 : 99;
    }
    @d = sort { $a <=> $b } @d;
    ok($d[4] < 0.1 && $d[-1] < 99,
       sprintf('plaintext answers in %.1f ms (median; %.1f ms at worst) while '
               . '50 delay requests block the pool', $d[4] * 1000, $d[-1] * 1000));
    $_->close for @c; # their work still ends; nothing must break

    my $shrunk = wait_pool($t, sub { $_[0]{threads} == 1 && $_[0]{busy} == 0
                                     && $_[0]{pending} == 0 }, 20);
    ok($shrunk, 'adaptive: back to `threads` = 1 after idle_timeout')
        or diag(explain pool_status($t));
    ok(FastdTest::wait_for(sub { threads_of($worker) == 2 }, 3),
       'adaptive: the idle threads really exited');

    $t->stop;
    $t->no_alerts;
}

# --- offload = on: a static location reads its files on the pool -----------------
{
    my $t = FastdTest->new(conf => FastdTest::base_conf(
        locations => "[location = /status]\nhandler = status\n\n"
                   . "[location /files/]\nroot = %%DIR%%\noffload = on\n",
        extra     => "[offload]\nthreads = 1\nadaptive = off\n"));
    mkdir $t->dir . '/files';
    FastdTest::spew($t->dir . '/files/a.txt', 'x' x 5000);
    $t->start;
    my $p0 = wait_pool($t, sub { 1 });
    my $c0 = $p0 ? $p0->{completed} : 0;
    my $ok = 0;
    for (1 .. 10) {
        my $r = $t->get('/files/a.txt');
        $ok++ if $r && $r->status == 200 && length($r->body) == 5000;
    }
    is($ok, 10, 'offload = on: static files served');
    ok(wait_pool($t, sub { $_[0]{completed} >= $c0 + 10 }),
       'offload = on: each static request went through the pool');
    is($t->get('/plaintext')->status, 200, 'other locations stay inline');
    $t->stop;
    $t->no_alerts;
}

done_testing;
