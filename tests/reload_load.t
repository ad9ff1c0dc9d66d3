#!/usr/bin/perl
# 20 reloads under a steady wrk load: zero socket errors, zero non-2xx.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use POSIX qw(:sys_wait_h);
use Test::More;
use Time::HiRes qw(time sleep);

my $wrk = (grep { -x "$_/wrk" } split /:/, $ENV{PATH})[0];
plan skip_all => 'wrk not installed' unless $wrk;
$wrk .= '/wrk';

my $t = FastdTest->new(conf => FastdTest::base_conf(main => { workers => 2 }));
my $master = $t->start;
my @w;
FastdTest::wait_for(sub { @w = $t->workers; @w == 2 }, 10);
is(scalar @w, 2, 'two workers');

my $duration = 8;
my $out = $t->dir . '/wrk.out';
my $wpid = fork // die "fork: $!";
if ($wpid == 0) {
    open STDIN, '<', '/dev/null';
    open STDOUT, '>', $out or POSIX::_exit(126);
    open STDERR, '>&', \*STDOUT;
    no warnings 'exec';
    exec $wrk, '-t1', '-c16', "-d${duration}s", '--timeout', '5s',
        'http://127.0.0.1:' . $t->port . '/plaintext';
    POSIX::_exit(127);
}
my $wrk_status;
my $wrk_done = sub {
    return 1 if defined $wrk_status;
    my $r = waitpid($wpid, WNOHANG);
    $wrk_status = $? if $r == $wpid;
    return defined $wrk_status;
};

sleep 0.5;    # let wrk ramp up: connections established before the first reload
my $reloads = 0;
my $gens = 0;
my $t0 = time;
for my $i (1 .. 20) {
    last if $wrk_done->();
    my @old = $t->workers;
    my %old = map { $_ => 1 } @old;
    $t->signal('HUP');
    $reloads++;
    my $t1 = time;
    # wait for the new generation (two workers not in the old set)
    my $ok = FastdTest::wait_for(sub {
        my @now = $t->workers;
        (grep { !$old{$_} } @now) >= 2;
    }, 5, 0.02);
    $gens++ if $ok;
    my $spent = time - $t1;
    sleep(0.2 - $spent) if $spent < 0.2;
}
my $reload_time = time - $t0;
ok(!$wrk_done->(), "20 reloads done while wrk still ran ($reload_time s)");
is($reloads, 20, '20 SIGHUPs sent');
is($gens, 20, 'each reload started a new generation of workers');

FastdTest::wait_for($wrk_done, $duration + 10, 0.1);
if (!defined $wrk_status) {
    kill 'TERM', $wpid;
    FastdTest::wait_for($wrk_done, 3) or kill 'KILL', $wpid;
    waitpid($wpid, 0) unless defined $wrk_status;
    fail('wrk overran its duration');
}
my $report = FastdTest::slurp($out) // '';
ok(defined $wrk_status && $wrk_status == 0, 'wrk exited normally')
    or diag('wrk wait status: ' . ($wrk_status // 'none') . "; output:\n$report");
note($report);
like($report, qr/Requests\/sec:\s+\d/, 'wrk produced a report') or diag($report);
my ($reqs) = $report =~ /(\d+) requests in/;
cmp_ok($reqs // 0, '>', 1000, 'wrk completed requests');
unlike($report, qr/Socket errors/, 'no socket errors during the reloads')
    or diag($report);
unlike($report, qr/Non-2xx/, 'no non-2xx responses during the reloads')
    or diag($report);

# afterwards
FastdTest::wait_for(sub { @w = $t->workers; @w == 2 }, 10);
is(scalar @w, 2, 'old generations drained: two workers left');
is($t->get('/plaintext')->{status}, 200, 'still serving');

$t->stop;
$t->no_alerts;
done_testing;
