#!/usr/bin/perl
# The PostgreSQL harness (tests/lib/Pg.pm) the database tests and the
# benchmarks stand on: a cluster of the test's own starts on a free port,
# holds TechEmpower's tables (tests/bench/world-db), answers the URL's
# user by password, survives a kill -9 and a restart on the same port and
# directory, and leaves no process and no directory once stopped; the
# same as a command (tests/bench/run starts it so), stopped by SIGTERM.
# Also world-db's SQLite file: the same tables and rows.

use strict;
use warnings;

use lib 'tests/lib';
use FastdTest;
use Pg;
use File::Temp qw(tempdir);
use POSIX qw(:sys_wait_h);
use Test::More;

if (my $why = Pg::missing()) {
    plan skip_all => $why;
}

my $root = FastdTest::root();

# psql as TechEmpower's user, by the URL (TCP, password)
sub as_user {
    my ($url, $sql) = @_;
    my $out = `psql -X -q -A -t -d '$url' -c "$sql" 2>&1`;
    chomp $out;
    return ($? == 0, $out);
}

sub gone {
    my (@pids) = @_;
    return !grep { FastdTest::pid_alive($_) } @pids;
}

my $pg = Pg->new(max_connections => 20);
ok($pg, 'a cluster starts');
my ($dir, $port) = ($pg->dir, $pg->port);
ok(-d $dir, 'in a directory of its own');
like($pg->url, qr{^postgresql://benchmarkdbuser:benchmarkdbpass\@127\.0\.0\.1:$port/hello_world$},
     'URL');
is($pg->psql('SHOW fsync') . ' ' . $pg->psql('SHOW synchronous_commit')
   . ' ' . $pg->psql('SHOW max_connections'), 'off off 20',
   'test settings (fsync, synchronous_commit off; max_connections)');
my @st = stat "$dir/data";
isnt($st[4], 0, 'the data directory is not root\'s') if $> == 0;

# the tables, as TechEmpower's user
my ($ok, $out) = as_user($pg->url,
    'SELECT count(*), min(id), max(id), min(randomNumber), max(randomNumber) FROM World');
ok($ok, 'benchmarkdbuser connects by password') or diag($out);
my ($n, $lo, $hi, $rlo, $rhi) = split /\|/, $out;
ok($n == 10000 && $lo == 1 && $hi == 10000 && $rlo >= 1 && $rhi <= 10000,
   'World: ids 1..10000, random numbers in 1..10000') or diag($out);
($ok, $out) = as_user($pg->url, 'SELECT count(*) FROM Fortune');
is($out, '12', 'Fortune: 12 rows');
($ok, $out) = as_user($pg->url, 'SELECT message FROM Fortune WHERE id = 11');
is($out, '<script>alert("This should not be displayed in a browser alert box.");</script>',
   'the <script> fortune, unescaped in the table');
($ok, $out) = as_user($pg->url, 'SELECT count(DISTINCT randomNumber) > 5000 FROM World');
is($out, 't', 'the numbers are random');
($ok, $out) = as_user("postgresql://benchmarkdbuser:wrong\@127.0.0.1:$port/hello_world",
                      'SELECT 1');
ok(!$ok, 'a wrong password is refused');

# kill -9 and back on the same port and directory
my @before = $pg->processes;
ok(@before > 1, 'a postmaster and its processes');
$pg->psql('UPDATE World SET randomNumber = 4242 WHERE id = 1');
$pg->psql('CHECKPOINT');
$pg->kill9;
ok(gone(@before), 'kill9: every process gone');
($ok, $out) = as_user($pg->url, 'SELECT 1');
ok(!$ok, 'nothing answers while it is down');
$pg->start;
is($pg->port, $port, 'restarted on the same port');
($ok, $out) = as_user($pg->url, 'SELECT randomNumber FROM World WHERE id = 1');
is($out, '4242', 'with the same data (crash recovery)');
like($pg->log, qr/not properly shut down/, 'after a crash recovery');

my @pids = $pg->processes;
$pg->stop;
ok(gone(@pids, @before), 'stop: no process left');
ok(!-e $dir, 'stop: no directory left');

# as a command: ready once the URL file is there; SIGTERM stops it
{
    my $tmp = tempdir(CLEANUP => 1);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$tmp/out";
        open STDERR, '>&', \*STDOUT;
        { no warnings qw(exec syntax);
          exec $^X, "-I$root/tests/lib", "$root/tests/lib/Pg.pm",
               '--url-file', "$tmp/url", '--max-connections', '10'; }
        POSIX::_exit(127);
    }
    my $url = FastdTest::wait_for(sub {
        return -1 if waitpid($pid, WNOHANG) == $pid;
        return FastdTest::slurp("$tmp/url");
    }, 60, 0.05);
    ok($url && $url ne '-1', 'Pg.pm as a command writes its URL')
        or diag(FastdTest::slurp("$tmp/out"));
    chomp(my $u = $url // '');
    ($ok, $out) = as_user($u, 'SELECT count(*) FROM Fortune');
    is($out, '12', 'and the database answers there');
    my @kids = FastdTest::children_of($pid);
    my ($pm) = @kids;
    my @all = ($pm, FastdTest::children_of($pm // 0));
    my ($cdir) = (FastdTest::slurp("/proc/$pm/cmdline") // '') =~ m{(/[^\0]*fastd-pg\.\w+)/data};
    kill 'TERM', $pid;
    waitpid($pid, 0);
    is($?, 0, 'SIGTERM: it stops the cluster and exits 0')
        or diag(FastdTest::slurp("$tmp/out"));
    ok(gone(@all), 'no process left');
    ok($cdir && !-e $cdir, 'no directory left');
}

# world-db's SQLite file: the same tables
{
    my $tmp = tempdir(CLEANUP => 1);
    system("$root/tests/bench/world-db", "sqlite:$tmp/w.db");
    is($?, 0, 'world-db sqlite:PATH');
    my $py = q{import sqlite3,sys; d=sqlite3.connect(sys.argv[1]);
print(d.execute("SELECT count(*), min(randomNumber) >= 1, max(randomNumber) <= 10000 FROM World").fetchone(),
      d.execute("SELECT count(*) FROM Fortune").fetchone()[0],
      d.execute("SELECT message FROM Fortune WHERE id = 12").fetchone()[0])};
    my $got = `python3 -c '$py' $tmp/w.db`;
    my $japanese = "\x{30d5}\x{30ec}\x{30fc}\x{30e0}\x{30ef}\x{30fc}\x{30af}"
                 . "\x{306e}\x{30d9}\x{30f3}\x{30c1}\x{30de}\x{30fc}\x{30af}";
    utf8::encode($japanese);
    is($got, "(10000, 1, 1) 12 $japanese\n",
       'World (10,000 rows in range) and Fortune (12, UTF-8) in SQLite');
}

done_testing();
