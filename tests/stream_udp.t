#!/usr/bin/perl
# [stream] listen = ADDR udp: a DNS server (python, tests/lib/
# stream_backend.py) behind the UDP proxy. Queries from one and from many
# client sockets get their own answers (proxy_responses = 1 ends each
# session at its answer), a session without proxy_responses lasts until
# proxy_timeout, a dead server (ICMP port unreachable) is a 502 and the
# group's next server takes the next sessions, TCP and UDP on one port
# are two listeners, /status counts the sessions, and bad lines are
# config errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Socket::INET;
use IO::Select;
use Test::More;

my $PY = "$FindBin::Bin/lib/stream_backend.py";
my (@kids, @pipes);
sub backend {
    my (@args) = @_;
    my $pid = open(my $fh, '-|', '/usr/bin/python3', $PY, @args)
        or die "python3: $!";
    push @kids, $pid;
    push @pipes, $fh;
    my $port = <$fh>;
    die "backend @args did not start" unless defined $port;
    chomp $port;
    return $port;
}
END { local $?; kill "KILL", @kids if @kids; waitpid $_, 0 for @kids }

my $dns = backend('dns');
my $echo = backend('echo');
# a UDP port nothing is bound to: datagrams get ICMP port unreachable
my $dead = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'udp') or die;
    my $p = $s->sockport;
    close $s;
    $p;
};

my $t = FastdTest->new;
my $dir = $t->dir;
my ($p1, $p2, $p3, $p4) = map { $t->another_port } 1 .. 4;
# two workers: a UDP socket each, a client's datagrams always to one
$t->write_conf(FastdTest::base_conf(
    main => { workers => 2 },
    locations => "[location = /status]\nhandler = status\n\n",
    extra => <<"C"));
[upstream pair]
server = 127.0.0.1:$dead max_fails=1 fail_timeout=30s
server = 127.0.0.1:$dns

[stream dns]
listen = 127.0.0.1:$p1 udp
pass = 127.0.0.1:$dns
proxy_responses = 1
access_log = $dir/udp.log

[stream dns_tcp]
listen = 127.0.0.1:$p1
pass = 127.0.0.1:$echo

[stream held]
listen = 127.0.0.1:$p2 udp
pass = 127.0.0.1:$dns
proxy_timeout = 500ms
access_log = $dir/udp.log

[stream dead]
listen = 127.0.0.1:$p3 udp
pass = 127.0.0.1:$dead
proxy_responses = 1
access_log = $dir/udp.log

[stream group]
listen = 127.0.0.1:$p4 udp
pass = pair
proxy_responses = 1
C
$t->start;

sub query {
    my ($id, $name) = @_;
    my $q = pack('nnnnnn', $id, 0x0100, 1, 0, 0, 0);
    $q .= join('', map { chr(length $_) . $_ } split /\./, $name) . "\0";
    return $q . pack('nn', 1, 1);
}
# the answer's id and address, or undef after $secs
sub answer {
    my ($s, $secs) = @_;
    return undef unless IO::Select->new($s)->can_read($secs // 3);
    my $buf;
    defined $s->recv($buf, 4096) or return undef;
    return undef if length $buf < 16;
    return [ unpack('n', $buf), join '.', unpack('C4', substr($buf, -4)) ];
}
sub client {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'udp') or die "udp: $!";
    return $s;
}

my $c = client($p1);
my $ok = 0;
for my $id (1 .. 20) {
    $c->send(query($id, "q$id.example"));
    my $a = answer($c);
    $ok++ if $a && $a->[0] == $id && $a->[1] eq '127.0.0.1';
}
is($ok, 20, '20 queries from one socket, 20 answers, each its own id');

my @cs = map { client($p1) } 1 .. 10;
$cs[$_]->send(query(1000 + $_, "m$_.test")) for 0 .. 9;
my %got;
for my $i (0 .. 9) {
    my $a = answer($cs[$i]);
    $got{$i} = $a && $a->[0] == 1000 + $i;
}
is(scalar(grep { $_ } values %got), 10, '10 client sockets at once: each its answer');

# TCP on the same port is another listener
my $tc = FastdTest::Conn->new($p1, timeout => 10);
$tc->send("tcp too\n");
ok($tc->wait_for_bytes(qr/tcp too\n/), 'TCP beside UDP on one port');
$tc->close;

# no proxy_responses: the session lasts until proxy_timeout
my $h = client($p2);
$h->send(query(7, 'held.test'));
ok(answer($h), 'a held session answers');
$h->send(query(8, 'held.test'));
ok(answer($h), '... and again in the same session');
ok(FastdTest::wait_for(sub {
    (FastdTest::slurp("$dir/udp.log") // '') =~ /UDP 200 \d+ \d+ \S+ "127\.0\.0\.1:$dns" held$/m }, 5),
   'logged once after proxy_timeout');
my ($held) = (FastdTest::slurp("$dir/udp.log") // '') =~ /^(.* held)$/m;
like($held, qr/UDP 200 (\d+) (\d+) /, 'one line');
my ($sent, $recv) = $held =~ /UDP 200 (\d+) (\d+) /;
is($recv, 2 * length(query(7, 'held.test')), 'both queries in its bytes received');

# a dead server: no answer, 502
my $d = client($p3);
$d->send(query(9, 'dead.test'));
ok(!answer($d, 1), 'a dead server: no answer');
ok(FastdTest::wait_for(sub {
    (FastdTest::slurp("$dir/udp.log") // '') =~ /UDP 502 0 \d+ \S+ "127\.0\.0\.1:$dead" dead$/m }, 5),
   'logged 502') or diag(FastdTest::slurp("$dir/udp.log"));
like($t->error_log, qr/stream dead: (recv\(\) from|send\(\) to) 127\.0\.0\.1:$dead failed \(111/,
     'the refusal is in the error log');

# a group: a session on the dead server fails it, the next go to the live one
my $answered = 0;
for my $id (1 .. 6) {
    my $g = client($p4);
    $g->send(query(100 + $id, 'group.test'));
    my $a = answer($g, 1);
    $answered++ if $a && $a->[0] == 100 + $id;
}
# passive health is per worker: each of the two may try the dead one once
cmp_ok($answered, '>=', 4, 'a group: the dead server is taken out, the live one answers');

# /status
my $m;
ok(FastdTest::wait_for(sub {
    my $r = $t->get('/status?format=prometheus');
    $m = $r ? $r->body : '';
    $m =~ /^fastd_stream_connections_total\{stream="dns"\} (\d+)$/m && $1 >= 30 }, 5),
   '/status counts the UDP sessions') or diag($m);
like($m, qr/^fastd_stream_failed_total\{stream="dead"\} 1$/m, 'and the failed one');
ok($t->running, 'fastd still running');
$t->stop;
$t->no_alerts;

# bad lines
for my $bad (["listen = 127.0.0.1:1 udp\npass = 127.0.0.1:2\nssl_preread = on\n",
              qr/ssl_preread is for TCP/],
             ["listen = 127.0.0.1:1 udp\npass = 127.0.0.1:2\nproxy_protocol = on\n",
              qr/proxy_protocol is for TCP/],
             ["listen = 127.0.0.1:1\npass = 127.0.0.1:2\nproxy_responses = 1\n",
              qr/proxy_responses is for listen \.\.\. udp/],
             ["listen = 127.0.0.1:1 udp ssl\npass = 127.0.0.1:2\n",
              qr/goes with neither udp nor ssl_preread/]) {
    my ($body, $re) = @$bad;
    my $file = "$dir/bad.conf";
    FastdTest::spew($file, "[main]\ndaemon = off\nerror_log = $dir/bad.log\n\n[stream s]\n$body");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re, "a config error: $re") or diag($out);
}
my $file = "$dir/bad2.conf";
FastdTest::spew($file, "[main]\ndaemon = off\nerror_log = $dir/bad.log\n\n[server]\nlisten = 127.0.0.1:1 udp\n");
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
ok($rc != 0 && $out =~ /plain UDP is for a \[stream\]/, 'listen ... udp in a [server]: an error')
    or diag($out);

done_testing;
