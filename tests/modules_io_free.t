#!/usr/bin/perl
# fd_api_io_free while an event for the watch is in the loop's batch:
# tests/modules/iofree.c arms two pipes whose events come in one wait,
# and the first handler frees both watches. The second event must be
# dropped (its struct outlives the batch), not run on freed memory: the
# worker answers on, one handler a round, with no crash (under
# --with-sanitizers, no AddressSanitizer report). And fd_api_io_stop in
# a handler while other events of the batch wait: the stop runs no turn
# of the loop inside the handler, so none of them is lost (?do=nest:
# three events in one batch, the first stops a fourth watch; each of the
# three runs once). On both backends.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use Test::More;

my $root = FastdTest::root();
my $dir = FastdTest->new(conf => 'placeholder')->dir;
ApiModule::install($dir);
is(ApiModule::build("$dir/iofree.so", "$root/tests/modules/iofree.c"), '',
   'iofree.so builds against the installed API');

my $rounds = 20;
for my $backend (qw(epoll io_uring)) {
    my $t = FastdTest->new(conf => 'placeholder');
    # the test's own backend: FASTD_TEST_BACKEND does not replace it
    $t->write_conf(FastdTest::base_conf(
        main => { load_module => "$dir/iofree.so" },
        events => { backend => $backend },
        locations => "[location /io]\nhandler = iofree\n"));
    $t->start;
    my @pids = $t->workers;
    for my $i (1 .. $rounds) {
        my $r = $t->get('/io?do=arm');
        last unless $r && $r->status == 200;
        # the pipes' events come on the loop's next turn
        FastdTest::wait_for(sub {
            my $c = $t->get('/io?do=count');
            $c && $c->status == 200 && $c->body eq "$i $i";
        }, 5);
    }
    my $c = $t->get('/io?do=count');
    is($c && $c->body, "$rounds $rounds",
       "$backend: each round ran one handler, the freed watch's event dropped");
    my $lost = 0;
    for my $i (1 .. $rounds) {
        my $r = $t->get('/io?do=nest');
        last unless $r && $r->status == 200;
        my $h;
        FastdTest::wait_for(sub {
            $h = $t->get('/io?do=hits');
            $h && $h->status == 200 && $h->body eq '1 1 1';
        }, 2);
        $lost++ unless $h && $h->body eq '1 1 1';
    }
    is($lost, 0, "$backend: a watch stopped in a handler: the batch's "
       . "other events all run, once");
    is(join(',', $t->workers), join(',', @pids), "$backend: the same worker");
    $t->stop;
    my $logs = $t->error_log . $t->stderr_log;
    ok($logs !~ /AddressSanitizer|exited on signal|exited with code/,
       "$backend: no crash, no sanitizer report")
        or diag(substr($logs, 0, 3000));
    $t->no_alerts;
}
done_testing;
