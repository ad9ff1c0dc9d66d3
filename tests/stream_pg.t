#!/usr/bin/perl
# A PostgreSQL server behind the stream proxy ([stream NAME], issue 40):
# psql through fastd logs in by password (SCRAM: several round trips each
# way), runs queries, moves a large result and a large COPY in, and many
# sessions at once; a database killed mid-session closes the clients
# without harming fastd, and sessions after its restart go through again.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pg;
use POSIX ();
use Test::More;

if (my $why = Pg::missing()) {
    plan skip_all => $why;
}
plan skip_all => 'psql is not installed' unless -x '/usr/bin/psql';

my $pg = Pg->new(max_connections => 40);
my $t = FastdTest->new;
my $sp = $t->another_port;
my $dir = $t->dir;
$t->write_conf(FastdTest::base_conf(
    locations => "[location = /status]\nhandler = status\n\n",
    extra => "[stream postgres]\nlisten = 127.0.0.1:$sp\npass = 127.0.0.1:"
           . $pg->port . "\naccess_log = $dir/stream.log\n"));
$t->start;
ok(FastdTest::wait_for(sub { $t->port_open($sp) }, 5), 'the stream listens');

(my $url = $pg->url) =~ s/:${\ $pg->port}\//:$sp\//;
sub psql {
    my ($sql, @opt) = @_;
    my $out = `psql -X -q -A -t -d '$url' @opt -c "$sql" 2>&1`;
    chomp $out;
    return ($? == 0, $out);
}

my ($ok, $out) = psql('SELECT count(*) FROM World');
ok($ok, 'psql logs in through the stream proxy (password, SCRAM)')
    or diag($out);
is($out, '10000', 'and reads World');

# 4 MB back, and a COPY of 2 MB in
($ok, $out) = psql("SELECT sum(length(s)) FROM (SELECT repeat('x', 400) || i AS s FROM generate_series(1, 10000) i) q");
ok($ok && $out > 4_000_000, 'a large result computed') or diag($out);
($ok, $out) = psql("SELECT string_agg(repeat('y', 100), ',') FROM generate_series(1, 40000)");
ok($ok && length($out) == 40000 * 101 - 1, '4 MB of one row come back whole')
    or diag(length $out);
my $rows = join '', map { "$_\t" . ('z' x 50) . "\n" } 1 .. 40000;
FastdTest::spew("$dir/copy.tsv", $rows);
($ok, $out) = psql('CREATE TABLE IF NOT EXISTS s (id int, v text)');
ok($ok, 'a table') or diag($out);
$out = `psql -X -q -A -t -d '$url' -c "\\copy s FROM '$dir/copy.tsv'" -c "SELECT count(*), sum(length(v)) FROM s" 2>&1`;
chomp $out;
is($out, '40000|2000000', 'COPY of 2 MB in through the proxy');

# sessions at once
my @kids;
for my $i (1 .. 16) {
    my $pid = fork // die;
    if ($pid == 0) {
        my ($k, $o) = psql("SELECT $i + count(*) FROM World WHERE id <= 100");
        # _exit: the objects are the parent's to stop
        POSIX::_exit($k && $o == $i + 100 ? 0 : 1);
    }
    push @kids, $pid;
}
my $bad = 0;
for (@kids) { waitpid $_, 0; $bad++ if $? }
is($bad, 0, '16 sessions at once, each its own answer');

# the database dies under a session: the client is closed, fastd goes on
my $pid = open(my $slow, '-|', "psql -X -q -A -t -d '$url' -c 'SELECT pg_sleep(30)' 2>&1")
    or die "psql: $!";
ok(FastdTest::wait_for(sub {
    $pg->psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'") >= 1 }, 10),
   'a session waits in the database');
$pg->kill9;
my $got = do { local $/; <$slow> } // '';
close $slow;
ok($? != 0, 'its client fails when the database dies') or diag($got);
($ok, $out) = psql('SELECT 1');
ok(!$ok, 'no database: psql fails') or diag($out);
$pg->start;
($ok, $out) = psql('SELECT count(*) FROM Fortune');
is($out, '12', 'back after the restart') or diag($out);

ok($t->running, 'fastd still running');
my $log = FastdTest::slurp("$dir/stream.log") // '';
like($log, qr/^127\.0\.0\.1 \[[^\]]+\] TCP 200 [1-9]\d{6,} \d+ \d+\.\d{3} "127\.0\.0\.1:\d+" postgres$/m,
     'the access log has the large session');
$t->stop;
$t->no_alerts;
$pg->stop;
done_testing;
