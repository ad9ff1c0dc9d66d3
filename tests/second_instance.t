#!/usr/bin/perl
# A second fastd on an address another process already listens on fails
# to start ("address already in use", exit 1), whatever the accept mode:
# with SO_REUSEPORT the kernel would otherwise split new connections
# between the two configurations. The running master's own sockets are
# unaffected: its reloads keep them, and a reload that adds a taken
# address fails and leaves the old configuration serving. In the
# foreground the reason is on stderr as well as in the error log.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Socket::INET;
use Test::More;

my $a = FastdTest->new(conf => FastdTest::base_conf(main => { workers => 2 }));
$a->start;
my $port = $a->port;

for my $mode ('reuseport', 'exclusive') {
    my $b = FastdTest->new(conf => FastdTest::base_conf(
        events => { accept => $mode }));
    # B's config, on A's port
    my $text = FastdTest::slurp($b->conf_file);
    $text =~ s/127\.0\.0\.1:\d+/127.0.0.1:$port/;
    FastdTest::spew($b->conf_file, $text);
    $b->start({ nowait => 1 });
    my $exited = FastdTest::wait_for(sub { !$b->running }, 10, 0.02);
    ok($exited, "$mode: the second instance exits");
    is($b->exit_code, 1, "$mode: with exit code 1");
    like($b->error_log . $b->stderr_log, qr/Address already in use/i,
         "$mode: and says the address is in use") or $b->diag_logs;
    # in the foreground the reason is on stderr too, not only in the log
    like($b->stderr_log, qr/^fastd: \[emerg\] bind\(\) to 127\.0\.0\.1:$port failed.*Address already in use\)$/m,
         "$mode: stderr says why") or $b->diag_logs;
    unlike($b->stderr_log, qr/see the error log/,
           "$mode: and does not send the user to the log for it");
}

# every new connection still reaches A
my $ok = 0;
for (1 .. 20) {
    my $r = $a->get('/plaintext');
    $ok++ if $r && $r->{status} == 200;
}
is($ok, 20, 'the first instance answers every new connection');

# A's reload keeps its own sockets
my %old = map { $_ => 1 } $a->workers;
$a->signal('HUP');
ok(FastdTest::wait_for(sub {
    my @w = $a->workers; @w == 2 && !grep { $old{$_} } @w }, 20, 0.05),
   'a reload of the first instance starts new workers');
is(($a->get('/plaintext') // {})->{status}, 200, '... on its sockets');

# a reload that adds an address someone else holds fails, A keeps serving
my $squatter = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                     Listen => 5, ReuseAddr => 1) or die $!;
my $sp = $squatter->sockport;
my $conf = FastdTest::slurp($a->conf_file);
(my $more = $conf) =~ s/^(listen = 127\.0\.0\.1:$port)$/$1\nlisten = 127.0.0.1:$sp/m;
isnt($more, $conf, 'the reload config adds a listen line');
FastdTest::spew($a->conf_file, $more);
%old = map { $_ => 1 } $a->workers;
$a->signal('HUP');
ok(FastdTest::wait_for(sub { $a->error_log =~ /reload failed \(listening sockets\)/ }, 10),
   'a reload adding a taken address fails');
like($a->error_log, qr/bind\(\) to 127\.0\.0\.1:$sp failed.*Address already in use/,
     '... naming the address');
is(($a->get('/plaintext') // {})->{status}, 200, 'the old configuration keeps serving');
is_deeply([sort keys %old], [sort $a->workers], '... with its workers');

$a->stop;
ok($a->no_alerts(allow => qr/Address already in use/), 'no other alerts');
done_testing;
