#!/usr/bin/perl
# proxy: streaming with bounded memory. 1 GiB down and up through the
# proxy (fastd's worker RSS grows by less than a few MiB), chunked both
# ways, a backend that stops reading, a client that reads slowly,
# buffering = off for server-sent events, and a WebSocket tunnel.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Digest::MD5 qw(md5_hex);
use IO::Select;
use Test::More;
use Time::HiRes qw(sleep time);

my $GiB = 1 << 30;
my $block = join '', map { chr(65 + $_ % 26) } 0 .. 65535;
my $sample = join '', map { chr(($_ * 131 + 7) % 256) } 1 .. 3_000_000;
my $sample_md5 = md5_hex($sample);

# bodies the backend reads itself, in pieces, counting
my $stream_body = sub { $_[0]{path} =~ m{^/(up|slow-up)} };

my $be = Backend->new(stream_body => $stream_body, handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    if ($p =~ m{^/down/(\d+)$}) {
        my $n = $1;
        $c->write("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                  . "Content-Length: $n\r\n\r\n") or return undef;
        while ($n > 0) {
            my $k = $n < length $block ? $n : length $block;
            $c->write(substr($block, 0, $k)) or return undef;
            $n -= $k;
        }
        return '';
    }
    if ($p =~ m{^/chunked/(\d+)$}) {
        my $n = $1;
        $c->write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") or return undef;
        while ($n > 0) {
            my $k = $n < 40000 ? $n : 40000;
            $c->write(sprintf("%x\r\n%s\r\n", $k, substr($block, 0, $k))) or return undef;
            $n -= $k;
        }
        $c->write("0\r\n\r\n");
        return '';
    }
    if ($p eq '/sample') {
        return Backend::response(200, $sample);
    }
    if ($p =~ m{^/(up|slow-up)}) {
        my ($n, $md5) = (0, Digest::MD5->new);
        my $sink = sub { $n += length $_[0]; $md5->add($_[0]) if $n <= 3_000_000 };
        my $slow = $p =~ /slow/;
        if (($req->{headers}{'transfer-encoding'} // '') =~ /chunked/) {
            while (1) {
                my $sz = $c->read_line // return undef;
                $sz = hex $sz;
                last if $sz == 0;
                $c->read_bytes($sz, $sink) // return undef;
                $c->read_line;
            }
            $c->read_line;
        } else {
            my $left = $req->{headers}{'content-length'};
            while ($left > 0) {
                # the slow one stops reading for a while, twice
                sleep 1 if $slow && ($n == 64 << 20 || $n == 128 << 20);
                my $k = $left < 1 << 20 ? $left : 1 << 20;
                $k = (64 << 20) - $n if $slow && $n < 64 << 20 && $n + $k > 64 << 20;
                $k = (128 << 20) - $n if $slow && $n > 64 << 20 && $n < 128 << 20
                                         && $n + $k > 128 << 20;
                $c->read_bytes($k, $sink) // return undef;
                $left -= $k;
            }
        }
        return Backend::response(200, "got $n " . ($n <= 3_000_000 ? $md5->hexdigest : ''));
    }
    return Backend::sse($c) if $p eq '/sse';
    if (($req->{headers}{upgrade} // '') eq 'websocket') {
        sleep 0.3 if $p eq '/ws-late';   # the client's bytes wait at fastd
        return Backend::websocket_echo($c, 'Sec-WebSocket-Accept: x');
    }
    return Backend::echo($req);
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => <<"L",
[location /]
handler = proxy
upstream = be
max_body_size = 2g
websocket = on

[location /sse]
handler = proxy
upstream = be
buffering = off

[location /ws-idle]
handler = proxy
upstream = be
websocket = on
websocket_idle_timeout = 1s

L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\nkeepalive = 4\n"));
$t->start;
my ($worker) = $t->workers;


# warm up: buffers and caches the steady state uses anyway
for (1 .. 3) {
    my $r = $t->get('/down/1000000');
    die 'warm-up failed' unless $r && length $r->body == 1_000_000;
}
my $base = FastdTest::rss_kb($worker);
my $peak = $base;
ok($base > 0, "worker RSS readable ($base kB)");

# Read a response's header, then its body in pieces: returns (header,
# body bytes, first 3 MB). The RSS peak is sampled while reading.
sub stream_get {
    my ($c, %o) = @_;
    my $s = $c->sock;
    my $sel = IO::Select->new($s);
    my ($buf, $head, $n, $keep, $chunked) = ('', undef, 0, '', 0);
    my $deadline = time + ($o{timeout} // 60);
    my ($cstate, $csize) = ('size', 0);
    my $last_sample = 0;
    while (time < $deadline) {
        sleep $o{pace} if $o{pace} && defined $head;
        next unless $sel->can_read(1);
        my $k = sysread($s, my $piece, $o{read} // 262144);
        last unless $k;
        $buf .= $piece;
        if (!defined $head) {
            my $e = index($buf, "\r\n\r\n");
            next if $e < 0;
            $head = substr($buf, 0, $e + 4, '');
            $chunked = $head =~ /^Transfer-Encoding: chunked/mi;
        }
        if (!$chunked) {
            $n += length $buf;
            $keep .= substr($buf, 0, 3_000_000 - length $keep) if length $keep < 3_000_000;
            $buf = '';
            my ($cl) = $head =~ /^Content-Length: (\d+)/mi;
            last if defined $cl && $n >= $cl;
        } else {
            while (1) {
                if ($cstate eq 'size') {
                    my $i = index($buf, "\r\n");
                    last if $i < 0;
                    $csize = hex substr(substr($buf, 0, $i + 2, ''), 0, $i);
                    $cstate = $csize ? 'data' : 'done';
                } elsif ($cstate eq 'data') {
                    last if length $buf < $csize + 2;
                    my $d = substr($buf, 0, $csize + 2, '');
                    $n += $csize;
                    $keep .= substr($d, 0, $csize) if length $keep < 3_000_000;
                    $cstate = 'size';
                } else {
                    last;
                }
            }
            last if $cstate eq 'done' && index($buf, "\r\n") >= 0;
        }
        if ($n - $last_sample > (8 << 20)) {
            my $r = FastdTest::rss_kb($worker);
            $peak = $r if $r > $peak;
            $last_sample = $n;
        }
    }
    return ($head // '', $n, $keep);
}

# --- 1 GiB down ---------------------------------------------------------------------------
{
    my $c = $t->connect(timeout => 60);
    my $t0 = time;
    $c->send("GET /down/$GiB HTTP/1.1\r\nHost: x\r\n\r\n");
    my ($head, $n) = stream_get($c);
    like($head, qr/^HTTP\/1\.1 200 .*^Content-Length: $GiB\r$/ms, '1 GiB download: 200 with its length');
    is($n, $GiB, '1 GiB download: every byte arrived');
    my $grow = $peak - $base;
    ok($grow < 4096, "1 GiB download: worker RSS grew by $grow kB (< 4 MiB)");
    diag(sprintf "1 GiB down in %.1f s", time - $t0);
    $c->close;
}

# --- chunked down ------------------------------------------------------------------------------
{
    my $c = $t->connect(timeout => 60);
    $peak = FastdTest::rss_kb($worker);
    my $b0 = $peak;
    $c->send("GET /chunked/268435456 HTTP/1.1\r\nHost: x\r\n\r\n");
    my ($head, $n) = stream_get($c);
    like($head, qr/^Transfer-Encoding: chunked\r$/mi, 'chunked download: chunked to the client');
    is($n, 268435456, 'chunked download: 256 MiB decoded and framed again');
    ok($peak - $b0 < 4096, 'chunked download: RSS bounded (' . ($peak - $b0) . ' kB)');
}
{
    my $r = $t->get('/sample');
    ok($r && md5_hex($r->body) eq $sample_md5, 'a 3 MB body arrives intact');
}

# --- a slow client --------------------------------------------------------------------------------
{
    my $c = $t->connect(timeout => 60);
    $peak = FastdTest::rss_kb($worker);
    my $b0 = $peak;
    my $size = 64 << 20;
    $c->send("GET /down/$size HTTP/1.1\r\nHost: x\r\n\r\n");
    # 2 s of slow reading: the backend can send far faster than that
    my $s = $c->sock;
    my $sel = IO::Select->new($s);
    my ($got, $first) = (0, '');
    my $t0 = time;
    while (time - $t0 < 2) {
        sleep 0.05;
        next unless $sel->can_read(0.5);
        my $n = sysread($s, my $x, 16384) // 0;
        $first .= $x if length $first < 4096;
        $got += $n;
        my $r = FastdTest::rss_kb($worker);
        $peak = $r if $r > $peak;
    }
    ok($got < (8 << 20), "the slow client read little ($got bytes)");
    ok($peak - $b0 < 4096, 'a slow client does not grow fastd\'s RSS (' . ($peak - $b0) . ' kB)');
    my $hlen = index($first, "\r\n\r\n") + 4;
    ok($hlen > 4, 'the header came first');
    while ($got < $hlen + $size && time - $t0 < 30) {
        last unless $sel->can_read(5);
        my $n = sysread($s, my $x, 262144);
        last unless $n;
        $got += $n;
    }
    is($got - $hlen, $size, 'then, read fast, the rest arrives');
}

# --- 1 GiB up, with a backend that stops reading twice ----------------------------------------------
sub upload {
    my ($path, $size, %o) = @_;
    my $c = $t->connect(timeout => 60);
    $peak = FastdTest::rss_kb($worker);
    my $b0 = $peak;
    my $head = "POST $path HTTP/1.1\r\nHost: x\r\n"
             . ($o{chunked} ? "Transfer-Encoding: chunked\r\n" : "Content-Length: $size\r\n")
             . "\r\n";
    $c->send($head) or return;
    my ($sent, $next_sample) = (0, 0);
    while ($sent < $size) {
        my $k = $size - $sent < length $block ? $size - $sent : length $block;
        my $data = substr($block, 0, $k);
        $data = sprintf("%x\r\n%s\r\n", $k, $data) if $o{chunked};
        $c->send($data, timeout => 30) or last;
        $sent += $k;
        if ($sent >= $next_sample) {
            my $r = FastdTest::rss_kb($worker);
            $peak = $r if $r > $peak;
            $next_sample += 8 << 20;
        }
    }
    $c->send("0\r\n\r\n") if $o{chunked};
    my $r = $c->read_response(timeout => 30);
    return ($r, $peak - $b0);
}
{
    my $t0 = time;
    my ($r, $grow) = upload('/slow-up', $GiB);
    is($r && $r->body =~ /^got (\d+)/ ? $1 : -1, $GiB, '1 GiB upload: the backend got every byte');
    ok($grow < 4096, "1 GiB upload past a backend that pauses: RSS grew by $grow kB");
    diag(sprintf "1 GiB up in %.1f s", time - $t0);
    ($r, $grow) = upload('/up', 64 << 20, chunked => 1);
    is($r && $r->body =~ /^got (\d+)/ ? $1 : -1, 64 << 20, 'chunked upload of 64 MiB');
    ok($grow < 4096, "chunked upload: RSS grew by $grow kB");
    my $c = $t->connect(timeout => 30);
    $c->send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: " . length($sample) . "\r\n\r\n$sample");
    $r = $c->read_response(timeout => 30);
    is($r && $r->body, "got 3000000 $sample_md5", 'a 3 MB upload arrives intact');
}

# --- buffering = off: server-sent events ----------------------------------------------------------
{
    my $c = $t->connect(timeout => 10);
    my $t0 = time;
    $c->send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n");
    ok($c->wait_for_bytes(qr/data: first\n\n/, 3), 'buffering = off: the first event arrives');
    my $first = time - $t0;
    ok($first < 0.5, sprintf('... within 0.5 s (%.3f s), before the stream ends', $first));
    ok($c->wait_for_bytes(qr/data: second\n\n\r\n0\r\n\r\n/, 5), 'then the second, and the end');
    ok(time - $t0 >= 0.9, 'the second one came a second later');
}

# --- WebSocket -----------------------------------------------------------------------------------------
sub ws_open {
    my ($path, $early) = @_;
    my $c = $t->connect(timeout => 10);
    $c->send("GET $path HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
             . "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             . "Sec-WebSocket-Version: 13\r\n\r\n" . ($early // ''));
    return $c;
}
{
    my $c = ws_open('/ws', 'early bytes|');
    ok($c->wait_for_bytes(qr/\r\n\r\n/, 5), 'WebSocket: an answer');
    like($c->{raw}, qr/^HTTP\/1\.1 101 /, 'WebSocket: 101 Switching Protocols');
    like($c->{raw}, qr/^Upgrade: websocket\r$/mi, 'with Upgrade');
    like($c->{raw}, qr/^Connection: upgrade\r$/mi, 'and Connection: upgrade');
    like($c->{raw}, qr/^Sec-WebSocket-Accept: x\r$/mi, "the backend's headers");
    ok($c->wait_for_bytes(qr/\r\n\r\nearly bytes\|/, 5), 'bytes sent with the request are tunnelled');
    $c->send('hello?');
    ok($c->wait_for_bytes(qr/early bytes\|hello\?$/, 5), 'an echo through the tunnel');
    my $big = $block x 32;   # 2 MiB each way, flow-controlled
    my $s = $c->sock;
    my $sel = IO::Select->new($s);
    my ($off, $got) = (0, 0);
    my $t0 = time;
    while ($got < length $big && time - $t0 < 20) {
        if ($off < length $big && $sel->can_write(0)) {
            my $w = syswrite($s, $big, 65536, $off);
            $off += $w if $w;
        }
        if ($sel->can_read(0.01)) {
            my $n = sysread($s, my $x, 65536);
            last unless $n;
            $got += $n;
        }
    }
    is($got, length $big, '2 MiB echoed through the tunnel');
    shutdown($s, 1);
    ok($c->wait_eof(5), 'a half-close travels through; the tunnel ends');
}
{
    # bytes the client sends after the request, while the upstream has
    # not answered yet: fastd holds them (under io_uring, in the ring's
    # receive queue of the client's stream) and they go through the
    # tunnel once it opens. They were dropped when the client's stream
    # changed hands with its registration deleted.
    my $c = ws_open('/ws-late');
    select(undef, undef, undef, 0.1);
    $c->send('late bytes|');
    ok($c->wait_for_bytes(qr/^HTTP\/1\.1 101 .*\r\n\r\n/s, 5), 'WebSocket answered late: 101');
    ok($c->wait_for_bytes(qr/\r\n\r\nlate bytes\|$/, 5),
       'bytes sent before the 101 came go through the tunnel');
    $c->send('more');
    ok($c->wait_for_bytes(qr/late bytes\|more$/, 5), 'and the tunnel echoes on');
}
{
    my $c = ws_open('/ws-idle');
    ok($c->wait_for_bytes(qr/^HTTP\/1\.1 101 .*\r\n\r\n/s, 5), 'WebSocket with websocket_idle_timeout = 1s');
    my $t0 = time;
    ok($c->wait_eof(5), 'an idle tunnel is closed');
    my $dt = time - $t0;
    ok($dt > 0.8 && $dt < 3, sprintf('after the idle timeout (%.2f s)', $dt));
}
{
    # tunnels one after another: the worker's memory stays flat (each
    # used to keep the 16 KB buffer its 101 was read into)
    my $before = FastdTest::rss_kb($worker);
    my $ok = 0;
    for my $i (1 .. 300) {
        my $c = ws_open('/ws');
        $c->send("n$i.");
        $ok++ if $c->wait_for_bytes(qr/n$i\.$/, 5);
        shutdown($c->sock, 1);
        $c->wait_eof(5);
        $c->close;
    }
    is($ok, 300, '300 tunnels in a row echo');
    my $grew = FastdTest::rss_kb($worker) - $before;
    SKIP: {
        # AddressSanitizer keeps freed memory in quarantine
        skip 'RSS is not meaningful under AddressSanitizer', 1
            if `$FastdTest::BIN -v 2>&1` =~ /--with-sanitizers/;
        ok($grew < 2048, "... and the worker's RSS grew by $grew kB (< 2 MB)");
    }
}
{
    # the connection counts come back: nothing leaked
    my $r = $t->get('/after');
    ok($r && $r->status == 200, 'the server still answers');
}

# --- a graceful stop (SIGQUIT) waits for an open tunnel ---------------------------------
{
    my $c = ws_open('/ws');
    ok($c->wait_for_bytes(qr/\r\n\r\n/, 5), 'a tunnel open before SIGQUIT');
    my $idle = $t->connect;
    $idle->send("GET /idle HTTP/1.1\r\nHost: x\r\n\r\n");
    ok($idle->read_response, 'and an idle keep-alive connection');
    kill 'QUIT', $t->pid;
    # the worker closes idle connections one second into a drain: once this
    # one is gone, the stop is under way
    ok($idle->wait_eof(10), 'SIGQUIT: the idle connection is closed');
    $c->send('still there?');
    ok($c->wait_for_bytes(qr/still there\?$/, 5), 'the tunnel still carries data during the drain');
    ok($t->running, 'fastd waits for the tunnel');
    shutdown($c->sock, 1);
    ok($c->wait_eof(5), 'the client ends the tunnel');
    is($t->wait_exit(10), 0, 'then fastd exits, cleanly');
}

$t->no_alerts;
done_testing;
