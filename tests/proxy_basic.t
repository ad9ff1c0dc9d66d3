#!/usr/bin/perl
# proxy: requests and responses through handler = proxy to a real backend:
# bodies both ways (Content-Length and chunked), header rewriting, hop-by-hop
# headers, pass = URI replacement, keep-alive reuse of upstream connections,
# a pooled connection the backend closes, config errors, status counters.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use JSON::PP;
use Test::More;
use IO::Socket::UNIX;
use POSIX ();
use Socket qw(SOCK_STREAM);
use Time::HiRes qw(sleep time);

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    if ($p eq '/echo-body') {
        return Backend::response(200, $req->{body},
                                 'X-Chunked-In' => $req->{chunked} ? 1 : 0);
    }
    if ($p eq '/hop') {
        return "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\n"
             . "X-Secret: s\r\nKeep-Alive: timeout=5\r\nProxy-Connection: x\r\n"
             . "X-Keep: k\r\nServer: backend\r\n"
             . "Date: Mon, 01 Jan 2001 00:00:00 GMT\r\n"
             . "Set-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
             . "Content-Length: 2\r\n\r\nok";
    }
    if ($p eq '/chunked') {
        return "HTTP/1.1 200 OK\r\nContent-Type: text/x\r\n"
             . "Transfer-Encoding: chunked\r\n\r\n"
             . "5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-T: t\r\n\r\n";
    }
    if ($p eq '/noclen') {
        $c->write("HTTP/1.1 200 OK\r\nContent-Type: text/x\r\n\r\n"
                  . "until the end");
        return undef; # the close ends the body
    }
    return "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n" if $p eq '/204';
    return "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n" if $p eq '/304';
    if ($p eq '/continue') {
        return "HTTP/1.1 100 Continue\r\n\r\n"
             . "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
    }
    if ($p eq '/close-now') {
        # answers as if the connection stayed open, closes it, and says so
        $c->write(Backend::response(200, "n=$req->{n}"));
        $c->close;
        $req->{backend}->logit("closed $$");
        return undef;
    }
    if ($p eq '/close-after') {
        # answers as if the connection stayed open, then closes it a
        # moment later: the proxy's pooled connection dies under it
        $c->write(Backend::response(200, "n=$req->{n}"));
        sleep(rand(0.004));
        $c->close;
        $req->{backend}->logit("closed $$");
        return undef;
    }
    return Backend::echo($req);
});
my $bp = $be->port;

# a backend on a unix socket: one fixed answer per connection
my $sock_path = "/tmp/fastd-proxy-test-$$.sock";
unlink $sock_path;
my $us = IO::Socket::UNIX->new(Type => SOCK_STREAM, Local => $sock_path, Listen => 16)
    or die "unix socket: $!";
my $upid = fork // die;
if ($upid == 0) {
    while (my $c = $us->accept) {
        my $req = '';
        sysread($c, $req, 65536, length $req) until $req =~ /\r\n\r\n/;
        my ($path) = $req =~ /^GET (\S+)/;
        syswrite($c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: "
                 . length("unix $path") . "\r\n\r\nunix $path");
        close $c;
    }
    POSIX::_exit(0);
}
close $us;
END { kill 'KILL', $upid if $upid; unlink $sock_path if $sock_path }

my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => FastdTest::proxy_locations(qw(unix kr)) . <<"L",
[location = /status]
handler = status

[location /]
handler = proxy
upstream = be

[location /api/]
handler = proxy
pass = http://be/v2/

[location ~ ^/rx/]
handler = proxy
pass = http://be/ignored/

[location = /exact]
handler = proxy
pass = http://127.0.0.1:$bp/other

[location /host/]
handler = proxy
upstream = be
proxy_host = upstream
set_header = X-Custom: yes
set_header = User-Agent:
set_header = X-Real-IP: 9.9.9.9

L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\nkeepalive = 4\n\n"
           . "[upstream unix]\nserver = unix:$sock_path\n\n"
           . "[upstream kr]\nserver = 127.0.0.1:$bp\nkeepalive = 2\n"
           . "keepalive_requests = 10\nkeepalive_timeout = 1s\n"));
$t->start;

sub req {
    my ($method, $path, %o) = @_;
    my $h = $o{headers} // {};
    my $r = "$method $path HTTP/" . ($o{v} // '1.1') . "\r\nHost: localhost\r\n";
    $r .= "$_: $h->{$_}\r\n" for sort keys %$h;
    if (defined $o{body}) {
        $r .= "Content-Length: " . length($o{body}) . "\r\n\r\n$o{body}";
    } else {
        $r .= "\r\n";
    }
    return $t->http($r, timeout => 10);
}

# --- a plain GET ---------------------------------------------------------------
my $r = req('GET', '/hello?x=1');
ok($r && $r->status == 200, 'GET through the proxy: 200');
my $seen = $r ? $r->body : '';
like($seen, qr{^GET /hello\?x=1 HTTP/1\.1\n}, 'the backend got the method, URI and HTTP/1.1');
like($seen, qr/^Host: localhost$/m, 'Host is passed through');
like($seen, qr/^X-Forwarded-For: 127\.0\.0\.1$/m, 'X-Forwarded-For set');
like($seen, qr/^X-Real-IP: 127\.0\.0\.1$/m, 'X-Real-IP set');
like($seen, qr/^X-Forwarded-Proto: http$/m, 'X-Forwarded-Proto set');
like($seen, qr/^X-Forwarded-Host: localhost$/m, 'X-Forwarded-Host set');
like($seen, qr/^Connection: keep-alive$/m, 'upstream connection asked to stay open');
is($r && $r->header('X-Backend-Port'), $bp, 'backend header passed back');
like($r && $r->header('Server'), qr{^fastd(/[\d.]+)?$}, "fastd's Server header");
is(scalar($r ? $r->header_all('Date') : ()), 1, 'one Date header');

# --- hop-by-hop and X-Forwarded-For -------------------------------------------------
$r = req('GET', '/h', headers => {
    'Connection' => 'keep-alive, X-Hop', 'X-Hop' => 1, 'Keep-Alive' => 300,
    'TE' => 'trailers', 'Proxy-Connection' => 'x', 'Trailer' => 'X-T',
    'X-Forwarded-For' => '1.2.3.4', 'X-Other' => 'kept' });
$seen = $r ? $r->body : '';
unlike($seen, qr/^(X-Hop|Keep-Alive|TE|Proxy-Connection|Trailer):/mi,
       'hop-by-hop request headers are not forwarded');
unlike($seen, qr/^Connection: .*X-Hop/mi, "client's Connection not forwarded");
like($seen, qr/^X-Other: kept$/m, 'end-to-end headers are forwarded');
like($seen, qr/^X-Forwarded-For: 1\.2\.3\.4, 127\.0\.0\.1$/m,
     'X-Forwarded-For is appended to');

$r = req('GET', '/hop');
ok($r && $r->status == 200 && $r->body eq 'ok', 'response with hop-by-hop headers');
ok($r && !defined $r->header('X-Secret'), 'header named in Connection removed');
ok($r && !defined $r->header('Keep-Alive') && !defined $r->header('Proxy-Connection'),
   'Keep-Alive and Proxy-Connection removed');
is($r && $r->header('X-Keep'), 'k', 'other response headers kept');
like($r && $r->header('Server'), qr{^fastd(/[\d.]+)?$}, "the backend's Server is replaced");
isnt($r && $r->header('Date'), 'Mon, 01 Jan 2001 00:00:00 GMT', "the backend's Date is replaced");
is_deeply([ $r ? $r->header_all('Set-Cookie') : () ], [ 'a=1', 'b=2' ],
          'repeated Set-Cookie kept in order');

# --- set_header, proxy_host ------------------------------------------------------------
$r = req('GET', '/host/x', headers => { 'User-Agent' => 'ua', 'X-Real-IP' => '6.6.6.6' });
$seen = $r ? $r->body : '';
like($seen, qr/^Host: be$/m, 'proxy_host = upstream sends the upstream name');
like($seen, qr/^X-Custom: yes$/m, 'set_header adds a header');
unlike($seen, qr/^User-Agent:/m, 'set_header with an empty value removes one');
like($seen, qr/^X-Real-IP: 9\.9\.9\.9$/m, 'set_header replaces a generated header');
unlike($seen, qr/6\.6\.6\.6/, "the client's X-Real-IP is not forwarded");

# --- pass = URI ----------------------------------------------------------------------------
$r = req('GET', '/api/foo/bar?q=2');
like($r ? $r->body : '', qr{^GET /v2/foo/bar\?q=2 }, 'pass = http://be/v2/ replaces the prefix');
$r = req('GET', '/api/a%20b');
like($r ? $r->body : '', qr{^GET /v2/a%20b }, 'the rest of the URI stays encoded');
$r = req('GET', '/rx/abc?d');
like($r ? $r->body : '', qr{^GET /rx/abc\?d }, 'a regex location passes the URI unchanged');
$r = req('GET', '/exact?z=1');
like($r ? $r->body : '', qr{^GET /other\?z=1 }, 'pass = http://HOST:PORT/uri in an exact location');

# --- bodies -----------------------------------------------------------------------------------
my $big = join '', map { chr(32 + ($_ * 7) % 90) } 1 .. 300_000;
$r = req('POST', '/echo-body', body => $big);
ok($r && $r->status == 200 && $r->body eq $big, 'POST with Content-Length: 300k body both ways');
is($r && $r->header('X-Chunked-In'), 0, 'the backend got Content-Length');
{
    my $c = $t->connect(timeout => 10);
    my $raw = "POST /echo-body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    my $body = '';
    for my $i (1 .. 50) {
        my $piece = ('z' x ($i * 97)) . "|$i|";
        $raw .= sprintf("%x\r\n%s\r\n", length $piece, $piece);
        $body .= $piece;
    }
    $raw .= "0\r\n\r\n";
    $c->send($raw);
    my $res = $c->read_response(timeout => 10);
    ok($res && $res->status == 200 && $res->body eq $body, 'chunked upload is passed on');
    is($res && $res->header('X-Chunked-In'), 1, 'the backend got it chunked');
    # the same client connection goes on
    $c->send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
    $res = $c->read_response(timeout => 10);
    ok($res && $res->status == 200 && $res->body =~ m{^GET /again}, 'keep-alive after a chunked upload');
    $c->close;
}
$r = req('GET', '/chunked');
ok($r && $r->status == 200 && $r->body eq 'hello world', 'chunked response decoded and framed again');
is($r && $r->header('Transfer-Encoding'), 'chunked', 'chunked to an HTTP/1.1 client');
is($r && $r->header('Content-Type'), 'text/x', 'Content-Type passed');
$r = req('GET', '/chunked', v => '1.0');
ok($r && $r->body eq 'hello world' && !defined $r->header('Transfer-Encoding'),
   'an HTTP/1.0 client gets the body close-delimited');
$r = req('GET', '/noclen');
ok($r && $r->body eq 'until the end', 'a close-delimited response is passed on');
$r = req('HEAD', '/echo-body');
ok($r && $r->status == 200 && $r->body eq '', 'HEAD: no body');
ok($r && defined $r->header('Content-Length'), "HEAD: the backend's Content-Length is kept");
$r = req('GET', '/204');
ok($r && $r->status == 204 && $r->header('X-A') eq '1', '204 passed');
$r = req('GET', '/304');
ok($r && $r->status == 304 && $r->header('ETag') eq '"x"', '304 passed');
$r = req('GET', '/continue');
ok($r && $r->status == 201 && $r->body eq 'ok' && !@{ $r->{interim} },
   "the backend's 100 Continue is not forwarded");

# --- pipelining --------------------------------------------------------------------------------
{
    my $c = $t->connect(timeout => 10);
    $c->send("GET /p1 HTTP/1.1\r\nHost: x\r\n\r\n"
             . "POST /echo-body HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"
             . "GET /p3 HTTP/1.1\r\nHost: x\r\n\r\n"
             . "POST /echo-body HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             . "3\r\nxyz\r\n0\r\n\r\n"
             . "GET /p5 HTTP/1.1\r\nHost: x\r\n\r\n");
    my @r = $c->read_responses(5, timeout => 10);
    is(scalar @r, 5, 'five pipelined requests, five responses');
    ok(@r == 5 && $r[0]->body =~ m{^GET /p1 } && $r[1]->body eq 'abcde'
       && $r[2]->body =~ m{^GET /p3 } && $r[3]->body eq 'xyz'
       && $r[4]->body =~ m{^GET /p5 }, 'in order, with their bodies');
}

# --- keep-alive reuse ------------------------------------------------------------------------
$be->reset_log;
my $ok = 0;
for my $k (1 .. 4) {
    my $c = $t->connect(timeout => 10);
    for my $i (1 .. 250) {
        $c->send("GET /ka/$k/$i HTTP/1.1\r\nHost: x\r\n\r\n");
        my $res = $c->read_response(timeout => 10) or last;
        $ok++ if $res->status == 200 && $res->body =~ m{^GET /ka/$k/$i };
    }
    $c->close;
}
is($ok, 1000, '1000 requests over 4 client connections all answered');
is($be->requests, 1000, 'the backend saw 1000 requests');
my $conns = $be->connections;
ok($conns >= 1 && $conns <= 4, "they used at most keepalive = 4 upstream connections ($conns)");

# Sockets on local port $port that closed first and wait for the peer's
# FIN (FIN_WAIT1/2), from /proc/net/tcp.
sub half_closed {
    my ($port) = @_;
    my $hex = sprintf '%04X', $port;
    open my $fh, '<', '/proc/net/tcp' or return 0;
    my $n = grep { /^\s*\d+: [0-9A-F]{8}:$hex [0-9A-F]{8}:[0-9A-F]{4} 0[45] / } <$fh>;
    return $n;
}

# a backend that closes each connection right after answering
$ok = 0;
{
    my $c = $t->connect(timeout => 10);
    for my $i (1 .. 60) {
        $c->send("GET /close-after HTTP/1.1\r\nHost: x\r\n\r\n");
        my $res = $c->read_response(timeout => 10) or last;
        $ok++ if $res->status == 200;
        sleep(rand(0.006));
    }
}
is($ok, 60, 'a pooled connection the backend closed is never used for a request');

# POSTs cannot be retried once sent: a connection closed while pooled must
# be noticed before one is written to it
$ok = 0;
sub closes { scalar grep { /^closed / } $be->log_lines }
FastdTest::wait_for(sub { closes() >= 60 && !half_closed($bp) }, 5);
{
    my $base = closes();
    my $c = $t->connect(timeout => 10);
    for my $i (1 .. 30) {
        $c->send("POST /close-now HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
        my $res = $c->read_response(timeout => 10) or last;
        $ok++ if $res->status == 200;
        # the backend closed that connection: wait until fastd has seen it
        # (no backend socket left half-closed, waiting for fastd's FIN)
        FastdTest::wait_for(sub { closes() >= $base + $i && !half_closed($bp) },
                            20);
    }
}
is($ok, 30, 'POSTs never go to a pooled connection the backend closed');

# keepalive_requests, keepalive_timeout
$be->reset_log;
{
    my $c = $t->connect(timeout => 10);
    for my $i (1 .. 50) {
        $c->send("GET /kr/$i HTTP/1.1\r\nHost: x\r\n\r\n");
        $c->read_response(timeout => 10) or last;
    }
}
is($be->connections, 5, 'keepalive_requests = 10: 50 requests on 5 upstream connections');
ok(FastdTest::wait_for(sub { $be->closed >= 5 }, 4),
   'keepalive_timeout = 1s: the idle upstream connection is closed');

# --- unix sockets ----------------------------------------------------------------------------
$r = req('GET', '/unix/x');
ok($r && $r->status == 200 && $r->body eq 'unix /unix/x', 'server = unix:/path');

# --- status -----------------------------------------------------------------------------------
my $st = FastdTest::wait_for(sub {
    my $res = $t->get('/status');
    return undef unless $res && $res->status == 200;
    my $j = eval { decode_json($res->body) } or return undef;
    my ($u) = grep { $_->{upstream} eq 'be' } @{ $j->{modules}{upstream} || [] };
    return $u && $u->{requests} >= 1000 ? $u : undef;
}, 5);
ok($st, 'status: modules.upstream has the server of "be" with its requests');
is($st && $st->{server}, "127.0.0.1:$bp", 'status: labelled by server address');
is($st && $st->{healthy}, 1, 'status: healthy');
ok($st && defined $st->{fails} && defined $st->{active}, 'status: fails and active reported');

# a worker that dies: its counters are kept (retired), the new one counts on
{
    my ($w) = $t->workers;
    my $before = $st ? $st->{requests} : 0;
    kill 'KILL', $w;
    ok(FastdTest::wait_for(sub { my ($n) = $t->workers; $n && $n != $w && $t->port_open }, 10),
       'a killed worker is replaced');
    req('GET', '/after-kill');
    my $st2 = FastdTest::wait_for(sub {
        my $res = $t->get('/status');
        my $j = $res && eval { decode_json($res->body) } or return undef;
        my ($u) = grep { $_->{upstream} eq 'be' } @{ $j->{modules}{upstream} || [] };
        return $u && $u->{requests} > $before ? $u : undef;
    }, 5);
    ok($st2, "status: the dead worker's upstream requests still count ("
       . ($st2 ? $st2->{requests} : '-') . " > $before)");
}

# --- config errors ----------------------------------------------------------------------------
sub bad {
    my ($name, $text, $mark, $also) = @_;
    my $file = $t->write_conf($text, 'bad.conf');
    my @l = split /\n/, $t->subst($text);
    my ($line) = grep { $l[$_ - 1] =~ $mark } 1 .. @l;
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    is($rc, 1, "$name: -t fails");
    like($out, qr/\Q$file\E:$line\b/, "$name: names the line") or diag($out);
    like($out, $also, "$name: says why") if $also;
}
bad('unknown upstream',
    FastdTest::base_conf(locations => "[location /p]\nhandler = proxy\nupstream = nope\n"),
    qr/^upstream = nope/, qr/unknown upstream "nope"/);
bad('bad server option',
    FastdTest::base_conf(extra => "[upstream u]\n; comment\nserver = 127.0.0.1:1\n"
        . "keepalive = 2\nserver = 127.0.0.1:2 weight=x\n"),
    qr/weight=x/, qr/weight=x/);
bad('unresolvable server',
    FastdTest::base_conf(extra => "[upstream u]\nserver = no-such-host.invalid:80\n"),
    qr/no-such-host/, qr/host not found/);
bad('proxy without an upstream',
    FastdTest::base_conf(locations => "[location /p]\nhandler = proxy\n"),
    qr/^\[location \/p\]/, qr/needs/);
bad('hash_key without balance = hash',
    FastdTest::base_conf(extra => "[upstream u]\nserver = 127.0.0.1:1\nhash_key = \$uri\n"),
    qr/^\[upstream u\]/, qr/hash_key/);
bad('bad next_upstream',
    FastdTest::base_conf(locations => "[location /p]\nhandler = proxy\npass = http://127.0.0.1:1/\nnext_upstream = error sometimes\n"),
    qr/^next_upstream/, qr/sometimes/);

$t->stop;
$t->no_alerts(allow => qr/exited on signal 9|signal 9/);
done_testing;
