#!/usr/bin/perl
# WebSocket through a TLS client (wss://): the tunnel's client side stays
# TLS, so the bytes the client sends arrive at the backend decrypted and
# its echo comes back encrypted. A python ssl client upgrades, sends bytes
# with the request and after, 2 MiB both ways at once, then closes with
# close_notify: the half-close travels to the backend, the backend's FIN
# comes back as fastd's close_notify, and the tunnel ends cleanly.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

plan skip_all => 'python3 is needed for the TLS client'
    unless grep { -x "$_/python3" } split /:/, $ENV{PATH};

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    return Backend::websocket_echo($c)
        if ($req->{headers}{upgrade} // '') eq 'websocket';
    return Backend::echo($req);
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { listen => '127.0.0.1:%%PORT%% ssl',
                ssl_certificate => '%%DIR%%/ws.crt',
                ssl_certificate_key => '%%DIR%%/ws.key' },
    locations => "[location /ws]\nhandler = proxy\nupstream = be\n"
               . "websocket = on\n\n",
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\n"));
my $dir = $t->dir;
FastdTest::self_signed("$dir/ws", 'ws.test');
$t->start;

# One line per step: what the client saw.
FastdTest::spew("$dir/wss.py", <<'PY');
import hashlib, os, select, socket, ssl, sys

port, cafile = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=cafile)
raw = socket.create_connection(("127.0.0.1", port), timeout=20)
s = ctx.wrap_socket(raw, server_hostname="ws.test")
print("tls", s.version(), flush=True)
s.sendall(b"GET /ws HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\n"
          b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nearly|")
buf = b""
while b"\r\n\r\n" not in buf:
    b = s.recv(65536)
    if not b:
        break
    buf += b
head, _, buf = buf.partition(b"\r\n\r\n")
print("status", head.split(b"\r\n")[0].decode(), flush=True)

def read_n(n):
    global buf
    while len(buf) < n:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    got, buf = buf[:n], buf[n:]
    return got

print("early", read_n(6).decode(), flush=True)
s.sendall(b"hello?")
print("echo", read_n(6).decode(), flush=True)

# 2 MiB both ways at once, from one thread: an SSL object is not to be
# used by two threads at a time (a reader thread beside a writer thread
# once saw a spurious end of stream), so a non-blocking loop sends and
# reads as each side allows
big = os.urandom(2 << 20)
s.setblocking(False)
sent, back = 0, bytearray(buf)
buf = b""
while len(back) < len(big):
    r, w, _ = select.select([s], [s] if sent < len(big) else [], [], 20)
    if not r and not w:
        break
    if w:
        try:
            sent += s.send(big[sent:sent + 65536])
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            back += b
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        pass
    else:
        break
s.setblocking(True)
print("big", len(back), hashlib.sha256(back).hexdigest() ==
      hashlib.sha256(big).hexdigest(), flush=True)

# close_notify, then wait for fastd's: the backend's FIN came back
plain = s.unwrap()
print("closed", plain.recv(1) == b"", flush=True)
PY

my $out = `python3 '$dir/wss.py' ${\ $t->port} '$dir/ws.crt' 2>&1`;
like($out, qr/^tls TLSv1\.[23]$/m, 'the client speaks TLS to fastd') or diag($out);
like($out, qr/^status HTTP\/1\.1 101 /m, 'wss: 101 Switching Protocols');
like($out, qr/^early early\|$/m, 'bytes sent with the request reach the backend and come back');
like($out, qr/^echo hello\?$/m, 'an echo through the tunnel, decrypted and encrypted again');
like($out, qr/^big 2097152 True$/m, '2 MiB each way at once, unchanged');
like($out, qr/^closed True$/m,
     "the client's close_notify reaches the backend as a FIN, its FIN comes back as close_notify");
ok(FastdTest::wait_for(sub { $t->error_log =~ /tunnel closed by both sides/ }),
   'the tunnel ended as an end, not an error');
like($t->error_log, qr/tunnel closed by both sides \(2097164 bytes up, 2097164 down\)/,
     'and counted every byte each way');
is($be->requests, 1, 'one request reached the backend');
$t->no_alerts;
$t->stop;
done_testing();
