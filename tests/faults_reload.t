#!/usr/bin/perl
# 100 SIGHUP reloads, 50 ms apart, under wrk load: zero failed requests,
# zero non-2xx; afterwards the old generations are gone and the master holds
# no more descriptors than before (nothing leaks per reload).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => 'wrk not installed' unless Faults::wrk_path();

my $t = FastdTest->new(conf => FastdTest::base_conf(main => { workers => 2 }));
my $master = $t->start;
my @w;
FastdTest::wait_for(sub { @w = Faults::children($master); @w == 2 }, 10);
is(scalar @w, 2, 'two workers');
my $fds0 = Faults::fd_count($master);

my $wrk = Faults::wrk_start(url => 'http://127.0.0.1:' . $t->port . '/plaintext',
                            conns => 16, duration => 9);
sleep 0.5;    # connections established before the first reload
my $t0 = time;
my $sent = 0;
for my $i (1 .. 100) {
    last unless $wrk->running;
    $t->signal('HUP') and $sent++;
    sleep 0.05;
}
my $spent = time - $t0;
is($sent, 100, sprintf('100 SIGHUPs sent in %.1f s while wrk ran', $spent));
ok($wrk->running, 'wrk still running after the last reload');

my $r = $wrk->finish;
note($r->{text});
ok(!$r->{overran}, 'wrk ran to its end');
cmp_ok($r->{requests}, '>', 10000, "requests served: $r->{requests}");
is($r->{errors}, 0, 'zero socket errors through 100 reloads') or diag($r->{text});
is($r->{non2xx}, 0, 'zero non-2xx answers through 100 reloads');

# the last generation stays, every older one drains and exits
ok(FastdTest::wait_for(sub { @w = Faults::children($master); @w == 2 }, 20, 0.1),
   'old generations drained: two workers left') or diag("workers: @w");
my $fds1 = Faults::fd_count($master);
cmp_ok($fds1, '<=', $fds0, "master descriptors: $fds0 before, $fds1 after");
is(($t->get('/plaintext') // {})->{status}, 200, 'still serving');
unlike($t->error_log, qr/\[(?:alert|crit|emerg)\]/, 'no alerts during the reloads');

$t->stop;
$t->no_alerts;
done_testing;
