#!/usr/bin/perl
# A reload, then a worker that dies: the respawned worker sets up the
# proxy from the new configuration's groups. The groups behind
# pass = http://HOST:PORT were once shared with the old configuration,
# freed with it, and read by every later worker (heap-use-after-free under
# ASan, a respawn loop).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $be = Backend->new;
my $bp = $be->port;
my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => "[location /p/]\nhandler = proxy\npass = http://127.0.0.1:$bp/\n\n"));
$t->start;
is(($t->get('/p/a') // {})->{status}, 200, 'proxied');

for my $round (1 .. 2) {
    my %old = map { $_ => 1 } $t->workers;
    $t->signal('HUP');
    my @w;
    ok(FastdTest::wait_for(sub { @w = grep { !$old{$_} } $t->workers; @w == 1 }, 10),
       "reload $round: a new worker");
    kill 'KILL', $w[0];
    my @n;
    ok(FastdTest::wait_for(sub {
        @n = grep { $_ != $w[0] && !$old{$_} } $t->workers; @n == 1 }, 10),
       "reload $round: the killed worker is respawned");
    my $r;
    FastdTest::wait_for(sub { $r = $t->get("/p/r$round"); $r && $r->{status} == 200 }, 10);
    is($r && $r->{status}, 200, "reload $round: the respawned worker proxies");
    my @again = $t->workers;
    is_deeply(\@again, \@n, "reload $round: and stays up");
}
my @crash = grep { /exited on signal (?!9\b)/ } split /\n/, $t->error_log;
is(scalar @crash, 0, 'no worker died but the one killed') or diag(join "\n", @crash);
$t->stop;
ok($t->no_alerts(allow => qr/exited on signal 9\b/), 'no other alerts');
done_testing;
