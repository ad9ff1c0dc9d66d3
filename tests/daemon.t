#!/usr/bin/perl
# daemon = on: the launcher returns, the pid file names the master, -s stop
# ends it. -g keeps a daemon = on config in the foreground.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new(conf => FastdTest::base_conf(main => { daemon => 'on' }));
my $pidfile = $t->pid_file;

# --- daemon = on -------------------------------------------------------------------
my ($rc, $out) = FastdTest::run_fastd({ timeout => 10 }, '-c', $t->conf_file);
is($rc, 0, 'daemon = on: the launching command exits 0') or diag($out);

my $pid;
FastdTest::wait_for(sub {
    my $s = FastdTest::slurp($pidfile) // '';
    ($pid) = $s =~ /^(\d+)\s*$/;
    $pid && FastdTest::pid_alive($pid);
}, 10);
ok($pid, 'the pid file holds a live pid') or diag(FastdTest::slurp($pidfile) // 'no pid file');

# From here on the daemon is ours to clean up.
END { kill 'TERM', $pid if $pid && FastdTest::pid_alive($pid) }

SKIP: {
    skip 'no daemon pid', 6 unless $pid;
    my $stat = FastdTest::slurp("/proc/$pid/stat") // '';
    my ($ppid) = $stat =~ /.*\)\s+\S\s+(\d+)/s;
    isnt($ppid, $$, 'the daemon is not a child of the launcher\'s parent');
    ok(FastdTest::wait_for(sub { $t->port_open }, 10), 'the daemon listens');
    my $r = $t->get('/plaintext');
    is($r && $r->{status}, 200, 'the daemon answers');
    ok(scalar(FastdTest::children_of($pid)) >= 1, 'the pid file names the master (it has workers)');

    ($rc, $out) = FastdTest::run_fastd('-s', 'stop', '-c', $t->conf_file);
    is($rc, 0, '-s stop exits 0') or diag($out);
    ok(FastdTest::wait_for(sub { !FastdTest::pid_alive($pid) }, 10),
       '-s stop: the daemon is gone');
    ok(FastdTest::wait_for(sub { !-e $pidfile }, 5), '-s stop: the pid file is removed');
}

# --- -g: foreground even with daemon = on --------------------------------------------
{
    my $fg = $t->start('-g');
    ok($t->running, '-g: the started process is still running (foreground)');
    # the port may accept before the pid file is written: poll for it
    my $s;
    FastdTest::wait_for(sub { $s = FastdTest::slurp($pidfile) // ''; $s =~ /^$fg\s*$/ }, 5);
    is($s =~ s/\s+$//r, $fg, '-g: the pid file holds our child\'s pid');
    is($t->get('/plaintext')->{status}, 200, '-g: serving');
    $t->stop;
    is($t->exit_code, 0, '-g: SIGTERM ends it with 0');
}

$t->no_alerts;
done_testing;
