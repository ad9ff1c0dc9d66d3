#!/usr/bin/perl
# Descriptor exhaustion: with rlimit_nofile = 64, clients open far more
# connections than the worker can accept. The worker keeps serving the
# connections it has, does not spin on EMFILE (it pauses accepting; its CPU
# time is measured over 2 s), and recovers when connections close: the
# ones that waited in the backlog are then served too. The error log says
# so once per episode, at [error], not once per retry: one line when
# accepting pauses, one with the count when it resumes.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use Test::More;
use Time::HiRes qw(time sleep);

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { rlimit_nofile => 64 },
    events => { max_connections => 1024 },
));
my $master = $t->start;
my ($w) = Faults::children($master);
ok($w, 'worker ' . ($w // 'missing'));
# the worker sets its limit first thing, but may not have yet
my $lim = 0;
FastdTest::wait_for(sub {
    $lim = (FastdTest::slurp("/proc/$w/limits") // '') =~ /Max open files\s+(\d+)/
        ? $1 : 0;
    $lim == 64;
}, 10, 0.01);
is($lim, 64, 'rlimit_nofile lowers the worker\'s RLIMIT_NOFILE to 64');

my $GET = "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n";

# 30 kept-alive connections that the worker has accepted
my @mine;
for (1 .. 30) {
    my $c = $t->connect or last;
    $c->send($GET);
    my $r = $c->read_response(timeout => 5);
    push @mine, $c if $r && $r->{status} == 200;
}
is(scalar @mine, 30, '30 connections served before the exhaustion');

# 100 more, each sending a request (TCP_DEFER_ACCEPT: a silent connection
# is not even offered to accept()): the worker runs out of descriptors
# part way; the rest wait in the listen backlog
my @extra = grep { defined } map { $t->connect } 1 .. 100;
cmp_ok(scalar @extra, '>', 60, scalar(@extra) . ' more connections opened (the kernel completes them)');
$_->send($GET) for @extra;
FastdTest::wait_for(sub { $t->error_log =~ /accept4\(\) failed/ }, 5, 0.01);
like($t->error_log,
     qr/\[error\].*accept4\(\) failed, accepting paused \(24: Too many open files\)/,
     'the worker reports EMFILE at [error] and pauses accepting');

# no spin: CPU used by the worker over 2 s while exhausted
my $cpu0 = Faults::cpu_seconds($w);
my $t0 = time;
sleep 2;
my $cpu = Faults::cpu_seconds($w) - $cpu0;
my $wall = time - $t0;
cmp_ok($cpu / $wall, '<', 0.2,
       sprintf('worker CPU while out of descriptors: %.0f%% (not spinning)', 100 * $cpu / $wall));
# the worker retried every 100 ms meanwhile (about 20 times): one line
my @lines = grep { /accept4\(\)/ } split /\n/, $t->error_log;
is(scalar @lines, 1, 'one accept4() line over ' . sprintf('%.1f', $wall)
   . ' s of exhaustion, not one per retry') or diag(join "\n", @lines[0 .. 4]);

# the existing connections are still served
my $served = 0;
for my $c (@mine) {
    $c->send($GET);
    my $r = $c->read_response(timeout => 5);
    $served++ if $r && $r->{status} == 200;
}
is($served, 30, 'the 30 existing connections are still served');

# recovery: close the served ones; the backlog is taken and served
$_->close for @mine;
my $ok = 0;
my $t1 = time;
for my $c (@extra) {
    my $r = $c->read_response(timeout => 10);
    $ok++ if $r && $r->{status} == 200;
    $c->close;
}
is($ok, scalar @extra, sprintf('after closing, every waiting connection was served (%.1f s)',
                               time - $t1));
my $r = $t->get('/plaintext');
is($r && $r->{status}, 200, 'a new connection is served');
my ($n, $ms) = $t->error_log =~ /\[error\].*accepting resumed after (\d+) failed accept4\(\) calls? over (\d+) ms/;
ok(defined $n && $n >= 10 && $ms >= 1000,
   'when accepting resumes, one line counts the episode: '
   . ($n // '?') . ' failures over ' . ($ms // '?') . ' ms')
    or diag($t->error_log);
@lines = grep { /accept/ } split /\n/, $t->error_log;
is(scalar @lines, 2, 'two lines for the whole episode')
    or diag(join "\n", @lines[0 .. 4]);
cmp_ok(Faults::fd_count($w), '<', 20, 'the worker holds few descriptors again');
ok(FastdTest::pid_alive($w), 'the same worker throughout');

$t->stop;
$t->no_alerts;
done_testing;
