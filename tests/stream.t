#!/usr/bin/perl
# [stream NAME]: the L4 TCP proxy. An echo server behind it (bytes both
# ways, a client half-close passed on and answered), a backend that
# half-closes first and still reads, one that resets mid-connection, a
# dead server of a group skipped for the next, a pass to nothing at all
# (the client is closed, 502 in the log), proxy_timeout, max_conns_per_ip,
# the PROXY protocol to the server, the access log line (made by a root
# master for workers that run as nobody) and the /status counters.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;
$| = 1;
use Time::HiRes qw(time);

my $PY = "$FindBin::Bin/lib/stream_backend.py";
my (@kids, @pipes);

# a backend of stream_backend.py; its port once it listens
sub backend {
    my (@args) = @_;
    my $pid = open(my $fh, '-|', '/usr/bin/python3', $PY, @args)
        or die "python3: $!";
    push @kids, $pid;
    push @pipes, $fh;    # closing a piped open waits for the child
    my $port = <$fh>;
    die "backend @args did not start" unless defined $port;
    chomp $port;
    return $port;
}
END { local $?; kill "KILL", @kids if @kids; waitpid $_, 0 for @kids }

my $echo = backend('echo');
my $die = backend('die');
my $t0 = FastdTest->new;    # for its directory
my $count_file = $t0->dir . '/banner.count';
my $banner = backend('banner', $count_file);
my $dead = FastdTest::dead_port();

my $t = FastdTest->new;
my ($p_echo, $p_group, $p_banner, $p_die, $p_none, $p_idle, $p_lim, $p_pp) =
    map { $t->another_port } 1 .. 8;
my $dir = $t->dir;
# as root, the workers run as nobody: the log's directory is not theirs
my $logdir = "$dir/logs";
mkdir $logdir, 0755;
chmod 0711, $dir;
my $user = $> == 0 ? "user = nobody\n" : '';
(my $conf = FastdTest::base_conf(
    locations => "[location = /status]\nhandler = status\n\n",
    extra => <<"C")) =~ s/^user = root\n/$user/m;
[upstream pair]
server = 127.0.0.1:$dead
server = 127.0.0.1:$echo

[stream echo]
listen = 127.0.0.1:$p_echo
pass = 127.0.0.1:$echo
access_log = $logdir/stream.log

[stream group]
listen = 127.0.0.1:$p_group
pass = pair
proxy_connect_timeout = 2s

[stream banner]
listen = 127.0.0.1:$p_banner
pass = 127.0.0.1:$banner

[stream die]
listen = 127.0.0.1:$p_die
pass = 127.0.0.1:$die

[stream none]
listen = 127.0.0.1:$p_none
pass = 127.0.0.1:$dead
access_log = $logdir/stream.log

[stream pp]
listen = 127.0.0.1:$p_pp
pass = 127.0.0.1:$echo
proxy_protocol = on

[stream idle]
listen = 127.0.0.1:$p_idle
pass = 127.0.0.1:$echo
proxy_timeout = 300ms

[stream lim]
listen = 127.0.0.1:$p_lim
pass = 127.0.0.1:$echo
max_conns_per_ip = 2
C
$t->write_conf($conf);
$t->start;
# not $p_lim: a check's connection there would count against its
# max_conns_per_ip (every connection from 127.0.0.1 a worker holds counts)
# and, refused or not by what else is open, change the figures below;
# every [stream] listens once one does
ok(FastdTest::wait_for(sub { $t->port_open($p_echo) }, 5), "listening on $p_echo");

sub conn { FastdTest::Conn->new($_[0], timeout => 10) }

# echo, then the client's half-close comes back as the server's
my $c = conn($p_echo);
ok($c->send("hello\n"), 'sent');
ok($c->wait_for_bytes(qr/hello\n/), 'echoed through the proxy');
my $big = join '', map { chr(($_ * 7 + 3) % 256) } 1 .. 1_000_000;
ok($c->send($big), '1 MB sent');
$c->shut_wr;
ok($c->wait_eof, "the client's FIN reached the server and its came back");
is($c->{raw}, "hello\n$big", 'every byte back, in order');
$c->close;

# the server half-closes first: the client reads its EOF and still sends
$c = conn($p_banner);
ok($c->wait_for_bytes(qr/banner\n/), 'banner');
ok($c->wait_eof, "the server's FIN reached the client");
ok($c->send('x' x 5000), 'the client sends after the server closed its half');
$c->shut_wr;
ok(FastdTest::wait_for(sub { (FastdTest::slurp($count_file) // '') =~ /\n/ },
                       10), 'the server saw the client end');
is(FastdTest::slurp($count_file), "5000\n",
   'the server read all the client sent after its own FIN');
$c->close;

# a group whose first server is dead: the next one takes it
for my $i (1 .. 3) {
    $c = conn($p_group);
    $c->send("g$i");
    ok($c->wait_for_bytes(qr/g$i/), "group connection $i reached the live server");
    $c->close;
}
like($t->error_log, qr/connect\(\) to 127\.0\.0\.1:$dead failed/,
     'the refused connect is logged');

# a backend that resets mid-connection: the client is closed
$c = conn($p_die);
$c->send('first');
ok($c->wait_eof, 'a reset backend closes the client');
$c->close;

# nothing to connect to
$c = conn($p_none);
ok($c->wait_eof, 'no server: the client is closed');
$c->close;

# proxy_timeout
$c = conn($p_idle);
$c->send('a');
ok($c->wait_for_bytes(qr/a/), 'idle stream works');
my $s = time;
ok($c->wait_eof(5), 'closed after proxy_timeout');
cmp_ok(time - $s, '<', 3, 'in about proxy_timeout');
$c->close;

# max_conns_per_ip = 2
my @held = map { conn($p_lim) } 1 .. 2;
$_->send('k') for @held;
ok($_->wait_for_bytes(qr/k/), 'within the limit') for @held;
my $third = conn($p_lim);
ok($third->wait_eof, 'a third connection is closed');
is($third->{raw}, '', 'and got nothing');
$_->close for @held, $third;
like($t->error_log, qr/max_conns_per_ip 2/, 'the limit is logged');

# the PROXY protocol: the echo server sends the header back
$c = conn($p_pp);
$c->send("after\n");
ok($c->wait_for_bytes(qr/after\n/), 'proxy_protocol: the data follows');
like($c->{raw}, qr/^PROXY TCP4 127\.0\.0\.1 127\.0\.0\.1 \d+ $p_pp\r\nafter\n\z/,
     "the server got a PROXY v1 header first: the client, the address it reached") or diag($c->{raw});
$c->close;

# the access log: one line per connection
ok(FastdTest::wait_for(sub {
    (() = (FastdTest::slurp("$logdir/stream.log") // '') =~ /\n/g) >= 2 }, 5),
   'access log lines');
if ($> == 0) {
    my @st = stat "$logdir/stream.log";
    is(scalar getpwuid($st[4]), 'nobody',
       "a root master made the log for the workers' user");
}
my $log = FastdTest::slurp("$logdir/stream.log") // '';
like($log, qr/^127\.0\.0\.1 \[[^\]]+\] TCP 200 1000006 1000006 \d+\.\d{3} "127\.0\.0\.1:$echo" echo$/m,
     'echo line: status, bytes both ways, duration, server');
like($log, qr/^127\.0\.0\.1 \[[^\]]+\] TCP 502 0 0 \d+\.\d{3} "-" none$/m,
     'no server: 502');

# /status: per [stream] counters
my $m;
ok(FastdTest::wait_for(sub {
    my $r = $t->get('/status?format=prometheus');
    $m = $r ? $r->body : '';
    $m =~ /^fastd_stream_active\{stream="lim"\} 0$/m }, 5),
   '/status: no connection open once all are closed');
# two: the readiness check's connection, and the test's
like($m, qr/^fastd_stream_connections_total\{stream="echo"\} 2$/m,
     'stream_connections');
like($m, qr/^fastd_stream_bytes_received_total\{stream="echo"\} 1000006$/m,
     'bytes received from clients');
like($m, qr/^fastd_stream_bytes_sent_total\{stream="echo"\} 1000006$/m,
     'bytes sent to clients');
like($m, qr/^fastd_stream_failed_total\{stream="none"\} 1$/m,
     'no server: failed');
like($m, qr/^fastd_stream_connections_total\{stream="lim"\} 2$/m,
     'connections refused by max_conns_per_ip are not counted as accepted');
my $j = $t->get('/status');
like($j ? $j->body : '', qr/"stream":\s*\[/, 'and in the JSON');

$t->stop;
$t->no_alerts;

# a file of [stream] sections alone (no [server]) is a whole L4 proxy
my $t2 = FastdTest->new(conf => '');
my $p2 = $t2->another_port;
$t2->write_conf(FastdTest::main_section()
                . "[stream only]\nlisten = 127.0.0.1:$p2\npass = 127.0.0.1:$echo\n");
$t2->start({ port => $p2 });
$c = conn($p2);
$c->send("alone\n");
ok($c->wait_for_bytes(qr/alone\n/), 'a configuration of [stream] alone proxies');
$c->close;
$t2->stop;
$t2->no_alerts;
done_testing;
