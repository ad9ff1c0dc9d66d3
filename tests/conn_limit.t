#!/usr/bin/perl
# max_conns_per_ip: a server refuses requests (503, then close) on
# connections beyond the limit from one address; closing one frees a
# place; a server without the limit is not affected; a WebSocket tunnel
# keeps its place until it ends; a bad value is a config error naming
# file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

# --- config errors ------------------------------------------------------------
{
    my $t = FastdTest->new(conf => FastdTest::base_conf(
        server => { max_conns_per_ip => -1 }));
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
    isnt($rc, 0, 'max_conns_per_ip = -1 is refused');
    like($out, qr/fastd\.conf:\d+: "max_conns_per_ip" needs a non-negative integer/,
         '... naming file:line');
}

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { max_conns_per_ip => 3 },
    locations => "[server]\nlisten = 127.0.0.1:%%PORT2%%\nroot = %%HTML%%\n\n"
               . "[location /plaintext]\nhandler = plaintext\n\n",
));
$t->start;

sub request_on {
    my ($c) = @_;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    return $c->read_response;
}

# three connections: each is served and kept alive
my @conns;
for my $i (1 .. 3) {
    my $c = $t->connect;
    my $r = request_on($c);
    is($r && $r->status, 200, "connection $i of 3 is served");
    push @conns, $c;
}

# the fourth: 503 and closed
{
    my $c = $t->connect;
    my $r = request_on($c);
    is($r && $r->status, 503, 'a fourth connection gets 503');
    is($r && $r->header('connection'), 'close', '... with Connection: close');
    ok($c->wait_eof(5), '... and is closed');
}

# the first three keep working
for my $i (0 .. 2) {
    my $r = request_on($conns[$i]);
    is($r && $r->status, 200, 'an admitted connection is still served (' . ($i + 1) . ')');
}

# a server without the limit, same address, same worker: not affected
{
    my @more;
    for my $i (1 .. 4) {
        my $c = $t->connect(port => $t->port2);
        my $r = $c && request_on($c);
        is($r && $r->status, 200, "server without a limit: connection $i is served");
        push @more, $c;
    }
    $_->close for @more;
}

# closing one admitted connection makes room for a new one
{
    $conns[0]->close;
    shift @conns;
    my $ok = FastdTest::wait_for(sub {
        my $c = $t->connect;
        my $r = request_on($c);
        if ($r && $r->status == 200) {
            push @conns, $c;
            return 1;
        }
        $c->close;
        return 0;
    }, 10, 0.1);
    ok($ok, 'after one closes, a new connection is served');
}
$_->close for @conns;

like($t->error_log, qr/limiting connections from 127\.0\.0\.1: 4 open, max_conns_per_ip 3/,
     'the refusal is logged with the address and the figures');
$t->no_alerts;
$t->stop;

# --- tunnels count: a WebSocket through the proxy keeps its place -------------
{
    my $be = Backend->new(handler => sub {
        my ($req, $c) = @_;
        return Backend::response(200, 'plain')
            unless ($req->{headers}{upgrade} // '') eq 'websocket';
        return Backend::websocket_echo($c);
    });
    my $bp = $be->port;
    my $tt = FastdTest->new(conf => FastdTest::base_conf(
        server    => { max_conns_per_ip => 2 },
        locations => "[location /ws]\nhandler = proxy\nupstream = be\nwebsocket = on\n\n",
        extra     => "[upstream be]\nserver = 127.0.0.1:$bp\n"));
    $tt->start;
    my @ws;
    for my $i (1, 2) {
        my $c = $tt->connect;
        $c->send("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                 . "Connection: Upgrade\r\n\r\n");
        ok($c->wait_for_bytes(qr/^HTTP\/1\.1 101 .*?\r\n\r\n/s, 5),
           "tunnel $i of 2 is up");
        $c->send("ping$i");
        ok($c->wait_for_bytes(qr/ping$i\z/, 5), "tunnel $i echoes");
        push @ws, $c;
    }
    {
        my $c = $tt->connect;
        my $r = request_on($c);
        is($r && $r->status, 503, 'two open tunnels fill max_conns_per_ip = 2: 503');
    }
    $ws[0]->shut_wr;
    ok($ws[0]->wait_eof(5), 'one tunnel ends');
    my $ok = FastdTest::wait_for(sub {
        my $c = $tt->connect;
        my $r = request_on($c);
        $c->close;
        return $r && $r->status == 200;
    }, 10, 0.1);
    ok($ok, 'its place is free again: served');
    $_->close for @ws;
    $tt->no_alerts;
    $tt->stop;
    $be->stop;
}

done_testing;
