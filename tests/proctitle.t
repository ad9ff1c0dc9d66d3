#!/usr/bin/perl
# Process titles as nginx sets them: ps tells the master (with its command
# line), the workers and a draining old generation apart.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

sub title {
    my ($pid) = @_;
    my $s = FastdTest::slurp("/proc/$pid/cmdline") // '';
    $s =~ s/\0+$//;
    $s =~ tr/\0/ /;
    return $s;
}

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    locations => "[location /slow]\nhandler = delay\ndelay = 3s\n\n"));
my $master = $t->start;
my @w;
# a worker just forked still shows the master's title until it sets its
# own: wait for that too (seen on a loaded machine), then look
FastdTest::wait_for(sub {
    @w = $t->workers;
    @w == 2 && !grep { title($_) =~ /master/ } @w }, 10);
my $conf = $t->conf_file;
like(title($master), qr{^fastd: master process \S*fastd -c \Q$conf\E$},
     'master: "fastd: master process" and its command line');
is(title($_), 'fastd: worker process', "worker $_: \"fastd: worker process\"")
    for @w;

# an old generation that still has work
my @slow = map {
    my $c = $t->connect;
    $c->send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    $c;
} 1 .. 4;
sleep 0.3;
my %old = map { $_ => 1 } @w;
$t->signal('HUP');
my @draining;
ok(FastdTest::wait_for(sub {
    @draining = grep { title($_) eq 'fastd: worker process is shutting down' }
                grep { $old{$_} } $t->workers;
    @draining > 0 }, 5, 0.02),
   'an old worker with a request in flight: "worker process is shutting down"');
# a worker just forked shows the master's title until it sets its own
ok(FastdTest::wait_for(sub {
    my @new = grep { !$old{$_} } $t->workers;
    @new == 2 && !grep { title($_) ne 'fastd: worker process' } @new }, 5, 0.02),
   'the new generation: "fastd: worker process"');
like(title($master), qr/^fastd: master process /, 'the master keeps its title');
for (@slow) {
    my $r = $_->read_response(timeout => 10);
    is($r && $r->{status}, 200, 'the request in flight completed');
}
is($t->get('/plaintext')->{status}, 200, 'serving');
$t->stop;
ok($t->no_alerts, 'no alerts');
done_testing;
