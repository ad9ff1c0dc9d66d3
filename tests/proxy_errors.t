#!/usr/bin/perl
# proxy: failures. A backend killed mid-run (idempotent requests retried,
# a POST already sent is not), every server down (502, the log line, then
# recovery after fail_timeout), read_timeout (504), malformed responses
# (502, never a smuggled second response), next_upstream http_503 and
# next_upstream_tries, and a client that leaves mid-request.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Temp ();
use IO::Select;
use JSON::PP;
use Test::More;
use Time::HiRes qw(sleep time);

# where the backend notes that the proxy dropped a held connection
my $hold_tmp = File::Temp->new(UNLINK => 1);
my $hold_log = $hold_tmp->filename;

my %bad = (
    '/status-line' => "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
    '/version'     => "HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    '/garbage'     => "hello there\r\n\r\n",
    '/bad-chunk'   => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    . "zz\r\nhello\r\n0\r\n\r\n",
    '/cl-te'       => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                    . "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    '/two-cl'      => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                    . "Content-Length: 6\r\n\r\nhello!",
    '/fold'        => "HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\n"
                    . "Content-Length: 2\r\n\r\nok",
    '/space-colon' => "HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 2\r\n\r\nok",
    '/bare-lf'     => "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    '/te-gzip'     => "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                    . "0\r\n\r\n",
);

my $main = Backend->new(stream_body => sub { $_[0]{path} =~ /noread/ }, handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    $p =~ s{^/[a-z]+(?=/)}{};
    return $bad{$p} if $bad{$p};
    if ($p eq '/smuggle') {
        # one response as framed, then bytes no request asked for
        return Backend::response(200, 'legit') . "HTTP/1.1 200 OK\r\n"
             . "Content-Length: 8\r\n\r\nsmuggled";
    }
    if ($p eq '/late-bad-chunk') {
        $c->write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                  . "5\r\nfirst\r\n");
        sleep 0.3;
        $c->write("zz\r\n");
        sleep 0.3;
        return undef;
    }
    if ($p eq '/noread') {
        sleep 30; # the body stays unread
        return undef;
    }
    if ($p eq '/hang') {
        sleep 30;
        return undef;
    }
    if ($p eq '/hold') {
        # wait for the proxy to drop the connection
        my $sel = IO::Select->new($c->sock);
        my $t0 = time;
        while (time - $t0 < 10) {
            next unless $sel->can_read(0.1);
            my $n = sysread($c->sock, my $b, 100);
            last unless $n;
        }
        open my $fh, '>>', $hold_log;
        syswrite $fh, "closed\n";
        close $fh;
        return undef;
    }
    return Backend::response(200, "main $req->{method} $p");
});
my $mp = $main->port;

# a server that reads a request and closes without answering
my $closer = Backend->new(handler => sub { return undef });
my $ok_be = Backend->new(handler => sub {
    my ($req) = @_;
    return Backend::response(200, "ok $req->{method}");
});
my $u503 = Backend->new(handler => sub { Backend::response(503, 'busy') });
my $victim = Backend->new();
my $dead1 = FastdTest::free_port();
my $dead2 = FastdTest::free_port();
my $dead3 = FastdTest::free_port();
# a listener that never accepts, its backlog full: a connect() to it hangs
my $stuck = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 0, Proto => 'tcp') or die;
my $stuck_port = $stuck->sockport;
my @fillers;
for (1 .. 8) {
    my $f = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $stuck_port,
                                  Proto => 'tcp', Timeout => 0.3, Blocking => 1) or last;
    push @fillers, $f;
}
my $rec = Backend->new();
my $rec_port = $rec->port;
$rec->stop;
my $sole = Backend->new();
my $sole_port = $sole->port;
$sole->stop;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { body_timeout => '1s', log_format => 'up $uri|$status|$upstream_addr|$upstream_status|$upstream_response_time' },
    locations => FastdTest::proxy_locations(qw(pair dead rec sole p503))
               . <<"L",
[location /main/]
handler = proxy
upstream = main
read_timeout = 1s

[location = /status]
handler = status

[location /stuck/]
handler = proxy
pass = http://127.0.0.1:$stuck_port
connect_timeout = 1s

[location /body/]
handler = proxy
upstream = main
proxy_send_timeout = 1s
max_body_size = 100m

[location /small/]
handler = proxy
upstream = main
max_body_size = 1k

[location /postfail/]
handler = proxy
upstream = postfail
access_log = %%DIR%%/up.log format=up buffer=0

[location /tries/]
handler = proxy
upstream = tries
next_upstream_tries = 2

[location /soleps/]
handler = proxy
pass = http://127.0.0.1:$sole_port/ max_fails=1 fail_timeout=30s

[location /n503/]
handler = proxy
upstream = n503
next_upstream = error timeout http_503

L
    extra => <<"U"));
[upstream main]
server = 127.0.0.1:$mp max_fails=0
keepalive = 8

[upstream pair]
server = 127.0.0.1:${\ $victim->port}
server = 127.0.0.1:${\ $ok_be->port}
keepalive = 8

[upstream postfail]
server = 127.0.0.1:${\ $closer->port} max_fails=0
server = 127.0.0.1:${\ $ok_be->port}

[upstream dead]
server = 127.0.0.1:$dead1

[upstream tries]
server = 127.0.0.1:$dead1
server = 127.0.0.1:$dead2
server = 127.0.0.1:$dead3

[upstream rec]
server = 127.0.0.1:$rec_port max_fails=1 fail_timeout=2s
server = 127.0.0.1:$dead2 max_fails=1 fail_timeout=2s

[upstream sole]
server = 127.0.0.1:$sole_port max_fails=1 fail_timeout=30s

[upstream n503]
server = 127.0.0.1:${\ $u503->port}
server = 127.0.0.1:${\ $ok_be->port}

[upstream p503]
server = 127.0.0.1:${\ $u503->port}
server = 127.0.0.1:${\ $ok_be->port}
U
$t->start;

sub get {
    my ($path, %o) = @_;
    my $m = $o{method} // 'GET';
    my $body = $o{body} // '';
    my $req = "$m $path HTTP/1.1\r\nHost: x\r\n";
    $req .= "Content-Length: " . length($body) . "\r\n" if $m eq 'POST';
    return $t->http("$req\r\n$body", timeout => $o{timeout} // 10);
}

# --- a backend killed mid-run ------------------------------------------------------
{
    my ($ok, $n) = (0, 0);
    my @c = map { $t->connect(timeout => 10) } 1 .. 3;
    for my $i (1 .. 300) {
        $victim->stop if $i == 100;
        my $c = $c[$i % 3];
        $c->send("GET /pair/$i HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $c->read_response(timeout => 10);
        $n++;
        $ok++ if $r && $r->status == 200;
    }
    is($ok, 300, 'a backend killed mid-run: every GET answered 200 (retried)');
}

# --- a POST that was sent is not retried ---------------------------------------------
{
    $closer->reset_log;
    $ok_be->reset_log;
    my $r = get('/postfail/p', method => 'POST', body => 'data');
    is($r && $r->status, 502, 'a POST the server took and dropped: 502');
    is(scalar(grep { /POST/ } $ok_be->log_lines), 0, 'the POST was not sent again elsewhere');
    is(scalar(grep { /POST/ } $closer->log_lines), 1, 'the first server got it once');
    my $ok = 0;
    $ok += (get("/postfail/g$_") // {status => 0})->status == 200 for 1 .. 6;
    is($ok, 6, 'GETs to the same group are retried on the other server');
    ok(scalar(grep { /GET/ } $closer->log_lines) >= 2, '(some of them went to the dropping server first)');
    my $cp = $closer->port;
    my $op = $ok_be->port;
    my @l;
    FastdTest::wait_for(sub {
        @l = split /\n/, FastdTest::slurp($t->dir . '/up.log') // ''; @l >= 7 }, 5);
    like($l[0] // '', qr{^/postfail/p\|502\|127\.0\.0\.1:$cp\|502\|\d+\.\d{3}$},
         'access log: $upstream_addr, $upstream_status, $upstream_response_time');
    ok((grep { m{^/postfail/g\d\|200\|127\.0\.0\.1:$cp, 127\.0\.0\.1:$op\|502, 200\|\d+\.\d{3}, \d+\.\d{3}$} } @l),
       'access log: every server tried, in order') or diag(join "\n", @l);
}

# --- everything down ---------------------------------------------------------------------
{
    my $r = get('/dead/x');
    is($r && $r->status, 502, 'all servers down: 502');
    like($t->error_log, qr/\[error\].*upstream "dead" server 127\.0\.0\.1:$dead1: connect\(\) failed \(111: Connection refused\)/,
         'the error log names the upstream, the server and the reason');
    my $before = () = $t->error_log =~ /upstream "tries" server .*connect\(\) failed/g;
    $r = get('/tries/x');
    my $after = () = $t->error_log =~ /upstream "tries" server .*connect\(\) failed/g;
    is($r && $r->status, 502, 'next_upstream_tries: 502');
    is($after - $before, 2, 'next_upstream_tries = 2: two servers tried of three');
}

# --- recovery after fail_timeout ------------------------------------------------------------
{
    my $r = get('/rec/1');
    my $failed_at = time;
    is($r && $r->status, 502, 'fail_timeout: the server is down');
    $rec->start;
    $r = get('/rec/2');
    my $still = time - $failed_at < 1.5;
    ok(!$still || ($r && $r->status == 502), 'up again, but skipped within fail_timeout');
    like($t->error_log, qr/upstream "rec": no live servers/, '"no live servers" is logged');
    my $back = FastdTest::wait_for(sub { my $x = get('/rec/3'); $x && $x->status == 200 }, 6, 0.2);
    ok($back, 'served again once fail_timeout passed');
    ok(time - $failed_at >= 1.9, 'not before fail_timeout') or diag(time - $failed_at);
}

# --- a group's only server is never taken out (as nginx) ----------------------------------
for my $loc ('/sole/', '/soleps/') {
    $sole->stop;
    my $r = get("${loc}1");
    is($r && $r->status, 502, "$loc: the only server refuses: 502");
    $sole->start;
    $r = get("${loc}2");
    is($r && $r->status, 200, "$loc: served at once when it is back, though fail_timeout = 30s");
}
unlike($t->error_log, qr/server 127\.0\.0\.1:$sole_port temporarily disabled/,
       'the only server is never disabled');

# --- read_timeout ----------------------------------------------------------------------------
{
    my $t0 = time;
    my $r = get('/main/hang', timeout => 10);
    my $dt = time - $t0;
    is($r && $r->status, 504, 'a backend that never answers: 504');
    ok($dt >= 0.9 && $dt < 5, "after read_timeout = 1s ($dt)");
    like($t->error_log, qr/upstream "main" server .*timed out reading the response header \(110: Connection timed out\)/,
         'the timeout is logged');
}

# --- connect_timeout, send_timeout, the client's body ---------------------------------------
SKIP: {
    skip 'no hanging connect() on this kernel', 2 unless @fillers >= 1;
    my $t0 = time;
    my $r = get('/stuck/x', timeout => 10);
    my $dt = time - $t0;
    is($r && $r->status, 504, 'connect() that never completes: 504');
    ok($dt >= 0.9 && $dt < 5, "after connect_timeout = 1s ($dt)");
}
{
    # the backend never reads the body: it fills the socket buffers
    my $c = $t->connect(timeout => 10);
    my $size = 64 << 20;
    $c->send("POST /body/noread HTTP/1.1\r\nHost: x\r\nContent-Length: $size\r\n\r\n");
    my $t0 = time;
    my $piece = 'x' x 65536;
    for (1 .. $size / 65536) {
        $c->send($piece, timeout => 0.2) or last;
        last if time - $t0 > 8;
    }
    my $r = $c->read_response(timeout => 10);
    my $dt = time - $t0;
    is($r && $r->status, 504, 'a backend that does not read the body: 504');
    ok($dt < 8, "after send_timeout = 1s ($dt)");
    like($t->error_log, qr/upstream "main" server .*timed out sending the request/,
         'the send timeout is logged');
}
{
    my $c = $t->connect(timeout => 10);
    my $t0 = time;
    $c->send("POST /main/late HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789");
    my $r = $c->read_response(timeout => 10);
    my $dt = time - $t0;
    is($r && $r->status, 408, 'a client body that stops coming: 408');
    ok($dt >= 0.9 && $dt < 5, "after body_timeout = 1s ($dt)");
    ok($c->wait_eof(3), 'and the connection closes');
}
{
    my $c = $t->connect(timeout => 10);
    my $body = join '', map { sprintf("%x\r\n%s\r\n", 100, 'y' x 100) } 1 .. 30;
    $c->send("POST /small/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n$body");
    my $r = $c->read_response(timeout => 10);
    is($r && $r->status, 413, 'a chunked body over max_body_size: 413');
}

# --- malformed responses ---------------------------------------------------------------------
for my $p (sort keys %bad) {
    my $r = get("/main$p");
    is($r && $r->status, 502, "malformed response ($p): 502");
}
{
    my $c = $t->connect(timeout => 10);
    $c->send("GET /main/smuggle HTTP/1.1\r\nHost: x\r\n\r\n");
    my $r1 = $c->read_response(timeout => 10);
    $c->send("GET /main/next HTTP/1.1\r\nHost: x\r\n\r\n");
    my $r2 = $c->read_response(timeout => 10);
    is($r1 && $r1->body, 'legit', 'a response followed by extra bytes: the response as framed');
    is($r2 && $r2->body, 'main GET /next', 'the extra bytes never answer the next request');
    unlike($c->{raw}, qr/smuggled/, 'nothing of them reaches the client');
}
{
    my $c = $t->connect(timeout => 10);
    $c->send("GET /main/late-bad-chunk HTTP/1.1\r\nHost: x\r\n\r\n");
    ok($c->wait_eof(5), 'a bad chunk after the header left: the client connection is cut');
    like($c->{raw}, qr/^HTTP\/1\.1 200.*\r\n\r\n5\r\nfirst\r\n$/s,
         '(after the good part, without a last chunk)');
}

# --- next_upstream http_503 ---------------------------------------------------------------------
{
    my %st;
    $st{ (get("/n503/$_") // {status => 0})->status }++ for 1 .. 6;
    is_deeply(\%st, { 200 => 6 }, 'next_upstream http_503: the next server answers');
    %st = ();
    $st{ (get("/p503/$_") // {status => 0})->status }++ for 1 .. 6;
    ok($st{503}, 'without it, a 503 is passed on');
}

# --- the client leaves --------------------------------------------------------------------------
{
    my $c = $t->connect(timeout => 10);
    $c->send("GET /main/hold HTTP/1.1\r\nHost: x\r\n\r\n");
    ok(FastdTest::wait_for(sub { grep { m{/hold} } $main->log_lines }, 5), 'the request reached the backend');
    $c->close;
    ok(FastdTest::wait_for(sub { -s $hold_log }, 5),
       'a client that leaves: its upstream connection is closed');
}

# --- nothing leaked: every server's active count is back to 0 ---------------------------------
{
    my $busy;
    my $ok = FastdTest::wait_for(sub {
        my $r = $t->get('/status');
        my $j = $r && eval { decode_json($r->body) } or return 0;
        my @u = @{ $j->{modules}{upstream} || [] };
        $busy = join ', ', map { "$_->{upstream}/$_->{server}=$_->{active}" }
                           grep { $_->{active} } @u;
        return @u && !$busy;
    }, 5);
    ok($ok, 'after all that, no request is counted active on any server')
        or diag($busy);
}

$t->stop;
$t->no_alerts;
done_testing;
