#!/usr/bin/perl
# Signals and -s: reload (good and broken config), respawn of a killed
# worker, log reopen, graceful and fast stops, the pid file.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;
use POSIX qw(WIFEXITED WEXITSTATUS);

my %main = (workers => 2);
my $conf = FastdTest::base_conf(main => \%main);
my $t = FastdTest->new(conf => $conf);
my $master = $t->start;

sub status_of {
    my ($path) = @_;
    my $r = $t->get($path);
    return $r ? $r->{status} : 0;
}

# The pid in the pid file once it names $want (the port may accept before
# the file is written), or whatever it holds after 5 s.
sub pid_file_pid {
    my ($want) = @_;
    my $s;
    FastdTest::wait_for(sub {
        $s = FastdTest::slurp($t->pid_file) // '';
        $s =~ /^$want\s*$/;
    }, 5);
    return $s =~ s/\s+$//r;
}

# Wait until there are $n workers, none of them in @$old; returns them.
sub new_generation {
    my ($old, $n, $timeout) = @_;
    my %old = map { $_ => 1 } @$old;
    my @w;
    FastdTest::wait_for(sub {
        @w = $t->workers;
        @w == $n && !grep { $old{$_} } @w;
    }, $timeout // 10, 0.05);
    return @w;
}

# --- start ---------------------------------------------------------------------
my @w0;
FastdTest::wait_for(sub { @w0 = $t->workers; @w0 == 2 }, 10);
is(scalar @w0, 2, 'workers = 2: two worker processes');
is(pid_file_pid($master), $master, 'the pid file holds the master pid');
is(status_of('/plaintext'), 200, 'serving');
is(status_of('/new'), 404, '/new is not configured yet');

# --- SIGHUP with a changed config ----------------------------------------------
$t->write_conf(FastdTest::base_conf(main => \%main,
    locations => "[location /new]\nhandler = plaintext\n"));
$t->signal('HUP');
ok(FastdTest::wait_for(sub { status_of('/new') == 200 }, 10, 0.1),
   'SIGHUP: the new location answers 200');
my @w1 = new_generation(\@w0, 2);
is(scalar @w1, 2, 'SIGHUP: two new workers, the old ones are gone')
    or diag("old @w0, now " . join(' ', $t->workers));
ok(!grep({ FastdTest::pid_alive($_) } @w0), 'SIGHUP: old worker pids exited');
is(status_of('/plaintext'), 200, 'SIGHUP: still serving /plaintext');

# --- SIGHUP with a broken config -------------------------------------------------
{
    my $broken = FastdTest::base_conf(main => \%main,
        locations => "[location /new]\nhandler = plaintext\n"
                   . "[location /other]\nhandler = plaintext\nthis_is_not_a_key = 1\n");
    my @l = split /\n/, $broken;
    my ($line) = grep { $l[$_ - 1] =~ /^this_is_not_a_key/ } 1 .. @l;
    my $file = $t->conf_file;
    $t->write_conf($broken);
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { $t->error_log =~ /\Q$file\E:$line\b/ }, 10, 0.05),
       "broken reload: the error log names $file:$line")
        or diag($t->error_log);
    is(status_of('/new'), 200, 'broken reload: the old config keeps serving');
    is(status_of('/other'), 404, 'broken reload: nothing of the new config');
    is_deeply([ $t->workers ], [ sort { $a <=> $b } @w1 ],
              'broken reload: the same workers');
    ok($t->running, 'broken reload: the master is still running');
}

# --- fastd -s reload ---------------------------------------------------------------
{
    $t->write_conf(FastdTest::base_conf(main => \%main,
        locations => "[location /new2]\nhandler = json\n"));
    my ($rc, $out) = FastdTest::run_fastd('-s', 'reload', '-c', $t->conf_file);
    is($rc, 0, '-s reload exits 0') or diag($out);
    ok(FastdTest::wait_for(sub { status_of('/new2') == 200 }, 10, 0.1),
       '-s reload: the new location answers');
    my @w2 = new_generation(\@w1, 2);
    is(scalar @w2, 2, '-s reload: a new generation of workers');
    is(status_of('/new'), 404, '-s reload: the removed location is gone');
    @w1 = @w2;
}

# --- a killed worker is respawned ----------------------------------------------------
my $victim = $w1[0];
{
    ok(kill('KILL', $victim), "kill -9 worker $victim");
    my @w;
    FastdTest::wait_for(sub {
        @w = $t->workers;
        @w == 2 && !grep { $_ == $victim } @w;
    }, 10, 0.05);
    is(scalar @w, 2, 'a replacement worker appears');
    ok(!grep({ $_ == $victim } @w), '... with a new pid');
    ok(grep({ $_ == $w1[1] } @w), '... and the other worker was left alone');
    my $ok = 0;
    $ok += status_of('/plaintext') == 200 for 1 .. 20;
    is($ok, 20, 'requests keep succeeding after the respawn');
    @w1 = @w;
}

# --- SIGUSR1 and -s reopen ---------------------------------------------------------
{
    my $log = $t->log_file;
    ok(-e $log, 'error.log exists');
    ok(rename($log, "$log.1"), 'error.log moved away') or diag("rename: $!");
    $t->signal('USR1');
    ok(FastdTest::wait_for(sub { status_of('/reopen-404'); -e $log }, 10, 0.1),
       'SIGUSR1: error.log is reopened (recreated)');
    like(FastdTest::slurp("$log.1") // '', qr/\[notice\] \d+#\d+: reopening logs$/m,
         'SIGUSR1: the old error.log ends with "reopening logs" at notice');
    # (if SIGUSR1 failed to recreate it, -s reopen gets its own chance)
    ok(rename($log, "$log.2"), 'error.log moved away again') if -e $log;
    my ($rc, $out) = FastdTest::run_fastd('-s', 'reopen', '-c', $t->conf_file);
    is($rc, 0, '-s reopen exits 0') or diag($out);
    ok(FastdTest::wait_for(sub { status_of('/reopen-404'); -e $log }, 10, 0.1),
       '-s reopen: error.log is recreated');
    like(FastdTest::slurp("$log.2") // '', qr/\[notice\] \d+#\d+: reopening logs$/m,
         '-s reopen: "reopening logs" at notice');
    is(status_of('/plaintext'), 200, 'still serving after the reopens');
}

# everything logged so far, for the alert check (the kill -9 may be an alert)
# (the kill -9 and the broken reload may be logged as alerts/emerg)
my $allow = qr/\b$victim\b|this_is_not_a_key|fastd\.conf:\d+/;
my $logs = join '', map { FastdTest::slurp($_) // '' }
    $t->log_file . '.1', $t->log_file . '.2';

# --- SIGQUIT: graceful ---------------------------------------------------------------
{
    my @w = $t->workers;
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    my $r = $c->read_response;
    is($r && $r->{status}, 200, 'an idle keep-alive connection is open');
    $t->signal('QUIT');
    my $st = $t->wait_exit(10);
    ok(defined $st, 'SIGQUIT: the master exits');
    is($t->exit_code, 0, 'SIGQUIT: exit status 0');
    ok($c->wait_eof(1), 'SIGQUIT: the idle keep-alive connection was closed');
    $c->close;
    ok(FastdTest::wait_for(sub { !grep { FastdTest::pid_alive($_) } @w }, 5),
       'SIGQUIT: the workers are gone');
    ok(!-e $t->pid_file, 'SIGQUIT: the pid file is removed');
    ok(!$t->port_open, 'SIGQUIT: the port is closed');
}

my @bad = grep { /\[(alert|emerg|crit)\]/ && !/$allow/ } split /\n/, $logs;
ok(!@bad, 'rotated logs have no alerts (other than the killed worker)')
    or diag(join "\n", @bad);
$t->no_alerts(allow => $allow);

# Serve a few fresh connections, so that (with reuseport) every worker has
# certainly reached its event loop before we signal.
sub settle {
    my @w;
    FastdTest::wait_for(sub { @w = $t->workers; @w == 2 }, 10);
    my $ok = 0;
    $ok += status_of('/plaintext') == 200 for 1 .. 12;
    return @w;
}

# --- SIGTERM / SIGINT: fast ---------------------------------------------------------
for my $sig (qw(TERM INT)) {
    $t->write_conf($conf);
    my $pid = $t->start;
    is(pid_file_pid($pid), $pid, "SIG$sig: pid file written at start");
    my @w = settle();
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    $c->read_response;
    $t->signal($sig);
    my $st = $t->wait_exit(3);
    ok(defined $st, "SIG$sig: the master exits within 3 s");
    is($t->exit_code, 0, "SIG$sig: exit status 0");
    ok(FastdTest::wait_for(sub { !grep { FastdTest::pid_alive($_) } @w }, 5),
       "SIG$sig: the workers are gone");
    ok($c->wait_eof(1), "SIG$sig: an open keep-alive connection is closed");
    $c->close;
    ok(!-e $t->pid_file, "SIG$sig: the pid file is removed");
}

# --- a fast stop as soon as the port accepts ------------------------------------------
# The master forwards SIGTERM to workers that may still be starting; none may
# lose it. Up to 40 tries; each must end well before the master's own
# kill deadline.
{
    my ($tries, $slow) = (0, undef);
    for my $i (1 .. 40) {
        $tries++;
        $t->start;
        $t->signal('TERM');
        next if defined $t->wait_exit(2.5);
        $slow = $i;
        $t->wait_exit(10);
        last;
    }
    ok(!defined $slow, "SIGTERM right after start: the master exits promptly ($tries tries)")
        or diag("try $slow: the master took more than 2.5 s to exit");
}

# --- -s quit and -s stop -------------------------------------------------------------
for my $cmd (qw(quit stop)) {
    my $pid = $t->start;
    pid_file_pid($pid);    # -s reads it
    my ($rc, $out) = FastdTest::run_fastd('-s', $cmd, '-c', $t->conf_file);
    is($rc, 0, "-s $cmd exits 0") or diag($out);
    ok(defined $t->wait_exit(10), "-s $cmd: the master exits");
    is($t->exit_code, 0, "-s $cmd: exit status 0");
    ok(!-e $t->pid_file, "-s $cmd: the pid file is removed");
}
{
    my ($rc, $out) = FastdTest::run_fastd('-s', 'reload', '-c', $t->conf_file);
    isnt($rc, 0, '-s reload with no master running fails');
    my ($rc2) = FastdTest::run_fastd('-s', 'sideways', '-c', $t->conf_file);
    isnt($rc2, 0, '-s with an unknown signal name fails');
}

$t->no_alerts(allow => $allow);
done_testing;
