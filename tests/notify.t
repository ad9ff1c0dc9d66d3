#!/usr/bin/perl
# systemd notification protocol on $NOTIFY_SOCKET: READY=1, RELOADING=1,
# STOPPING=1.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Select;
use IO::Socket::UNIX;
use Socket qw(SOCK_DGRAM);
use Test::More;
use Time::HiRes qw(time);

my $t = FastdTest->new(conf => FastdTest::base_conf(main => { workers => 1 }));
my $path = $t->dir . '/notify.sock';
my $sock = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => $path)
    or die "notify socket: $!";

my @msgs;    # every datagram received, in order

# Receive datagrams until one holds $re or the timeout passes.
sub expect_msg {
    my ($re, $timeout) = @_;
    my $deadline = time + ($timeout // 10);
    my $sel = IO::Select->new($sock);
    while (1) {
        my $left = $deadline - time;
        return undef if $left <= 0;
        next unless $sel->can_read($left);
        my $buf;
        defined $sock->recv($buf, 4096) or next;
        push @msgs, $buf;
        return $buf if $buf =~ $re;
    }
}

local $ENV{NOTIFY_SOCKET} = $path;
my $pid = $t->start;
delete $ENV{NOTIFY_SOCKET};

my $m = expect_msg(qr/^READY=1$/m);
ok($m, 'READY=1 after start') or diag('got: ' . join(' | ', @msgs));
if ($m && $m =~ /^MAINPID=(\d+)$/m) {
    is($1, $pid, 'MAINPID is the master pid');
}
my $before = @msgs;

$t->signal('HUP');
$m = expect_msg(qr/^RELOADING=1$/m);
ok($m, 'SIGHUP: RELOADING=1') or diag('got: ' . join(' | ', @msgs));
$m = expect_msg(qr/^READY=1$/m);
ok($m, 'SIGHUP: READY=1 after the reload') or diag('got: ' . join(' | ', @msgs));
my @order = grep { /^(RELOADING|READY)=1$/m } @msgs[$before .. $#msgs];
ok(@order >= 2 && $order[0] =~ /RELOADING/ && $order[-1] =~ /READY/,
   'RELOADING=1 comes before READY=1');
is($t->get('/plaintext')->{status}, 200, 'serving after the reload');

$t->signal('TERM');
$m = expect_msg(qr/^STOPPING=1$/m);
ok($m, 'SIGTERM: STOPPING=1') or diag('got: ' . join(' | ', @msgs));
ok(defined $t->wait_exit(10), 'the master exits');

$t->no_alerts;
done_testing;
