#!/usr/bin/perl
# Bad input on a TLS port, each answered by closing that connection alone:
# garbage instead of a ClientHello; a ClientHello sent one byte per 100 ms
# from several connections while other clients are still served; clients
# that close mid-handshake; a TLS 1.2 renegotiation attempt (refused at
# once with a no_renegotiation alert, one ServerHello only); a record longer than TLS allows (16K + 2048); a plain
# HTTP request (400 "The plain HTTP request was sent to HTTPS port", then
# close); a silent connection closed at ssl_handshake_timeout. After each
# the workers are the same processes, the error log has no alert, and
# https requests are served.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use POSIX ();
use Time::HiRes qw(sleep time);
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
plan skip_all => 'curl is not installed' unless TLS::curl();

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('a.test');

# port: a long handshake timeout, so that every close seen there is the
# server's answer to the input; port2: a 1 s handshake timeout
$t->write_conf(TLS::conf(
    main => { workers => 2 }, certs => [$cert], names => 'a.test',
    more => "ssl_handshake_timeout = 60s\n",
    extra => "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$cert],
                              names => 'a.test',
                              more => "ssl_handshake_timeout = 1s\n")));
$t->start;
my $port = $t->port;
my @workers = $t->workers;
my $hello = $pki->client_hello(name => 'a.test');

sub served {
    my ($what) = @_;
    my $r = $pki->curl_get('/plaintext', port => $port, name => 'a.test');
    is($r->{code}, 200, "$what: https still served") or diag($r->{err});
}

# Send $bytes on a raw connection; true if the server closes it in 10 s.
sub closes {
    my ($bytes, $p) = @_;
    my $c = $t->connect(port => $p // $port) or return 0;
    $c->send($bytes);
    my $eof = $c->wait_eof(10);
    $c->close;
    return $eof;
}

# --- garbage ----------------------------------------------------------------
srand(16);
my $noise = join '', map { chr int rand 256 } 1 .. 2048;
ok(closes("\x00" . $noise), 'random bytes: the connection is closed');
ok(closes("\x16\x03\x01\x01\x00" . substr($noise, 0, 256)),
   'a handshake record header over random bytes: closed');
ok(closes("\x16\x03\x01\x00\x04\x01\x00\x00\x00"),
   'an empty ClientHello: closed');
ok(closes("\x15\x03\x03\x00\x02\x02\x28"), 'an alert instead of a ClientHello: closed');
served('after garbage');

# --- an oversized record --------------------------------------------------
# a record header claiming 16384 + 2048 + 1 bytes: refused at the header,
# before the body comes (the connection is not kept waiting for it)
ok(closes("\x16\x03\x01" . pack('n', 16384 + 2048 + 1) . substr($noise, 0, 512)),
   'a record longer than 16K + 2048: closed without waiting for its body');
ok(closes("\x17\x03\x03" . pack('n', 0xffff) . substr($noise, 0, 64)),
   'an application-data record of 64K before any handshake: closed');
served('after oversized records');

# --- plain HTTP on the TLS port -------------------------------------------------
{
    my ($raw, $eof) = $t->raw("GET /plaintext HTTP/1.1\r\nHost: a.test\r\n\r\n",
                              port => $port, timeout => 10);
    my ($r) = FastdTest::parse_responses($raw);
    is($r && $r->status, 400, 'a plain HTTP request on the TLS port: 400');
    like($r ? $r->body : '', qr/The plain HTTP request was sent to HTTPS port/,
         'nginx\'s message');
    ok($eof, 'and the connection is closed');
    is(scalar(() = $raw =~ /HTTP\/1\.1 /g), 1, 'one response only');
}

# --- clients that close mid-handshake ---------------------------------------
for my $cut (1, 5, 40, length($hello) - 1) {
    my $c = $t->connect(port => $port);
    $c->send(substr($hello, 0, $cut));
    $c->close;
}
{
    # the whole ClientHello, then gone before reading the ServerHello
    my $c = $t->connect(port => $port);
    $c->send($hello);
    $c->close;
    # and one that reads a little of the server's flight first
    $c = $t->connect(port => $port);
    $c->send($hello);
    ok($c->wait_for_bytes(qr/^\x16\x03/, 10), 'a ClientHello gets a ServerHello');
    $c->close;
}
served('after clients that closed mid-handshake');

# --- the handshake one byte at a time ---------------------------------------------
{
    my @slow;
    pipe(my $ready_r, my $ready_w) or die "pipe: $!";
    for my $i (1 .. 6) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            close $ready_r;
            my $c = $t->connect(port => $port) or POSIX::_exit(1);
            $c->send(substr($hello, 0, 1));
            syswrite $ready_w, '.';
            $c->send_slowly(substr($hello, 1), delay => 0.1);
            $c->wait_eof(30);
            POSIX::_exit(0);
        }
        push @slow, $pid;
    }
    close $ready_w;
    # the slow ones are connected and sending before the others ask
    my $got = '';
    while (length $got < 6) {
        sysread($ready_r, $got, 6 - length $got, length $got) or last;
    }
    is(length $got, 6, '6 slow clients connected');
    my $ok = 0;
    for my $i (1 .. 20) {
        my $r = $pki->curl_get("/plaintext?$i", port => $port, name => 'a.test');
        $ok++ if $r->{code} == 200;
    }
    is($ok, 20, 'while 6 clients send their ClientHello one byte per 100 ms, '
       . '20 others are served');
    my @alive = grep { waitpid($_, POSIX::WNOHANG()) == 0 } @slow;
    is(scalar @alive, 6, 'the slow clients are still sending (not refused)');
    kill 'KILL', @slow;
    waitpid($_, 0) for @slow;
}

# --- renegotiation ----------------------------------------------------------------
{
    my $c = $pki->connect(port => $port, name => 'a.test', quiet => 0,
                          commands => 1, args => ['-tls1_2', '-msg']);
    ok($c->wait_for_bytes(qr/^New, TLSv1\.2/m, 10), 'a TLS 1.2 connection');
    $c->send("R\n");
    ok($c->wait_for_bytes(qr/ClientHello.*^>>> [^\n]*ClientHello/ms, 10),
       'the client sends a second ClientHello (renegotiation)');
    # the refusal leaves from the read that took the ClientHello, not
    # with the connection's close (keepalive_timeout, 75 s, later)
    ok($c->wait_for_bytes(qr/^<<< TLS 1\.2, Alert [^\n]*no_renegotiation/m,
                          3),
       'the no_renegotiation alert arrives at once (within 3 s)')
        or diag($c->{raw});
    # a server that renegotiated would answer it; one that refuses sends
    # no_renegotiation, and the client gives up
    $c->wait_eof(10);
    $c->close;
    my $hellos = () = $c->{raw}
        =~ /^<<< TLS 1\.2, Handshake \[length [0-9a-f]+\], ServerHello$/mg;
    is($hellos, 1, 'a renegotiation attempt gets no second ServerHello')
        or diag($c->{raw});
}
served('after a renegotiation attempt');

# --- the handshake timeout -----------------------------------------------------------
{
    my $c = $t->connect(port => $t->port2);
    ok($c->wait_eof(10), 'ssl_handshake_timeout = 1s: a silent connection is closed');
    $c = $t->connect(port => $t->port2);
    $c->send(substr($hello, 0, 20));
    ok($c->wait_eof(10), 'and one that stopped halfway through its ClientHello');
    $c->close;
}
{
    # port has 60 s: a silent connection there is still open once the 1 s
    # ones are gone (the timeout is the server's, not something else)
    my $c = $t->connect(port => $port);
    my $d = $t->connect(port => $t->port2);
    ok($d->wait_eof(10), 'a 1 s connection closes');
    ok(!$c->{eof} && !defined($c->_fill(time + 0.1)),
       'while a silent one on the 60 s port is still open');
    $c->close;
}

is_deeply([ $t->workers ], \@workers, 'the same worker processes throughout');
served('at the end');
$t->no_alerts;
done_testing();
