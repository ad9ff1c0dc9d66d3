#!/usr/bin/perl
# WebSocket over HTTP/2 (RFC 8441): python-h2 clients send an extended
# CONNECT (:protocol websocket) to a proxied location over h2c and over
# TLS (ALPN h2); fastd passes it to a real WebSocket server
# (python3-websockets) as an HTTP/1.1 Upgrade with a key of its own and
# answers 200, and the stream's DATA carries WebSocket frames both ways:
# echo, a subprotocol, large messages through both windows, a close from
# either side, END_STREAM as a half-close, a client's RST_STREAM (the
# upstream connection goes), a slow client (the upstream is held back,
# fastd's memory stays flat), an upstream whose Sec-WebSocket-Accept is
# wrong (502), one that refuses (its 403), and the refusals (501) where
# nothing tunnels.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use H2;
use TLS;
use POSIX ();
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
my ($wrc) = TLS::run([ H2::python(), '-c', 'import websockets' ]);
plan skip_all => 'python3-websockets is not installed' if $wrc != 0;

my $t = FastdTest->new;
my $dir = $t->dir;

# the WebSocket server (its own process: killed by pid at the end)
my $wsport = FastdTest::free_port();
my $ws_pid = fork // die "fork: $!";
if ($ws_pid == 0) {
    open STDOUT, '>', "$dir/ws_backend.log";
    open STDERR, '>&', \*STDOUT;
    { no warnings 'exec'; exec H2::python(), "$FindBin::Bin/lib/ws_backend.py", $wsport, $dir; }
    POSIX::_exit(127);
}
END { local $?; if ($ws_pid) { kill 'TERM', $ws_pid; waitpid($ws_pid, 0) } }
ok(FastdTest::wait_for(sub { -e "$dir/ws.ready" }, 20, 0.05),
   'the WebSocket server listens')
    or BAIL_OUT('no WebSocket server: ' . (FastdTest::slurp("$dir/ws_backend.log") // ''));

# an upstream whose 101 carries an Accept that answers no key
my $liar = Backend->new(name => 'liar', handler => sub {
    Backend::websocket_echo($_[1],
                            'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
});

my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
my $ca = $pki->ca;
my $locs = <<"L";
[location /ws/]
handler = proxy
pass = http://127.0.0.1:$wsport
websocket = on
websocket_idle_timeout = 30s

[location /nows/]
handler = proxy
pass = http://127.0.0.1:$wsport

[location /liar/]
handler = proxy
pass = http://${\ $liar->addr}
websocket = on

L
$t->write_conf(H2::conf(
    locations => $locs,
    extra => "[server]\nlisten = 127.0.0.1:%%PORT2%% ssl http2\n"
           . "ssl_certificate = $cert->{crt}\nssl_certificate_key = $cert->{key}\n"
           . "root = %%HTML%%\n\n$locs"));
$t->start;
FastdTest::spew("$dir/ws2lib.py", FastdTest::slurp("$FindBin::Bin/lib/ws2lib.py"));

sub py {
    my ($code, %o) = @_;
    my $r = H2::py($t, "from ws2lib import *\n$code", timeout => 90, %o);
    return $r;
}

# --- the handshake, echo, subprotocol, both windows; h2c and TLS ---------
for my $case ([ 'h2c', $t->port, undef ], [ 'TLS', $t->port2, $ca ]) {
    my ($name, $port, $cafile) = @$case;
    my $r = py(<<'PY', port => $port, ca => $cafile);
w = WS2('/ws/echo', tls=CA, headers=[('sec-websocket-version', '13'),
                                     ('sec-websocket-protocol', 'chat')])
w.send('hello', TEXT)
a = w.msg()
big = bytes(range(256)) * 2048           # 512 KiB, past every window
w.send(big)
b = w.msg(30)
w.send(b'\x03\xe8', CLOSE)               # close 1000
c = w.msg()
w.wait_end()
done(settings=w.settings, proto=w.headers.get('sec-websocket-protocol'),
     hop=[k for k in w.headers if k in ('upgrade', 'connection',
                                        'sec-websocket-accept')],
     a=[a[0], a[1].decode()] if a else None,
     b=(b[0], len(b[1]), 1 if b[1] == big else 0) if b else None,
     c=[c[0], c[1].hex()] if c else None, **w.state())
PY
    is($r->{settings}{8}, 1, "$name: SETTINGS_ENABLE_CONNECT_PROTOCOL = 1")
        or diag(H2::explain($r));
    is($r->{status}, 200, "$name: the extended CONNECT is answered 200");
    is($r->{proto}, 'chat', "$name: the upstream's subprotocol comes back");
    is_deeply($r->{hop}, [], "$name: no Upgrade, Connection or Accept field");
    is_deeply($r->{a}, [ 1, 'hello' ], "$name: a text message echoed");
    is_deeply($r->{b}, [ 2, 524288, 1 ],
              "$name: a 512 KiB message both ways, intact");
    is_deeply($r->{c}, [ 8, '03e8' ], "$name: the close handshake");
    ok($r->{ended} && !$r->{closed},
       "$name: the upstream's close ends the stream, the connection stays");
}

# --- what the upstream saw: fastd's handshake ------------------------------
my $r = py(<<'PY');
w = WS2('/ws/headers', headers=[('sec-websocket-key', 'Y2xpZW50c293bmtleQ=='),
                                ('sec-websocket-extensions', 'x-test')])
m = w.msg()
w.rst()
done(h=json.loads(m[1]) if m else None, **w.state())
PY
my %seen;
push @{ $seen{lc $_->[0]} }, $_->[1] for @{ $r->{h} || [] };
is_deeply($seen{upgrade}, [ 'websocket' ], 'upstream: Upgrade: websocket')
    or diag(H2::explain($r));
is_deeply($seen{connection}, [ 'upgrade' ], 'upstream: Connection: upgrade');
is_deeply($seen{'sec-websocket-version'}, [ '13' ], 'upstream: version 13, once');
is(scalar @{ $seen{'sec-websocket-key'} || [] }, 1, 'upstream: one key');
isnt($seen{'sec-websocket-key'}[0], 'Y2xpZW50c293bmtleQ==',
     "upstream: fastd's own key, not the client's");
is_deeply($seen{'sec-websocket-extensions'}, [ 'x-test' ],
          'upstream: Sec-WebSocket-Extensions passed');
ok($seen{'x-forwarded-for'}, 'upstream: the proxy fields as for any request');

# --- ends: upstream close, END_STREAM half-close, RST_STREAM ---------------
$r = py(<<'PY');
w = WS2('/ws/bye')
m = w.msg()
c = w.msg()
w.send(c[1] if c else b'', CLOSE)
w.wait_end()
done(m=m[1].decode() if m else None, c=c[0] if c else None, **w.state())
PY
is($r->{m}, 'bye', 'an upstream message before its close');
is($r->{c}, 8, "the upstream's close frame");
# the client's half, if still open, is closed with RST_STREAM NO_ERROR
ok($r->{ended} && !$r->{reset}, "the upstream's close: END_STREAM")
    or diag(H2::explain($r));

$r = py(<<'PY');
w = WS2('/ws/drop')
w.send('x', TEXT)
w.wait_end()
done(rest=len(w.buf), **w.state())
PY
ok($r->{ended} && !$r->{closed},
   'an upstream that drops the connection: END_STREAM, the connection stays')
    or diag(H2::explain($r));

$r = py(<<'PY');
w = WS2('/ws/echo')
w.send('last', TEXT)
w.end()                              # half-close: no more from the client
m = w.msg()
w.wait_end()
done(m=m[1].decode() if m else None, **w.state())
PY
is($r->{m}, 'last', 'END_STREAM: what was sent before it is answered');
ok($r->{ended} && !defined $r->{reset}, 'END_STREAM: the upstream ends, the stream closes')
    or diag(H2::explain($r));

unlink "$dir/track.closed";
$r = py(<<'PY');
w = WS2('/ws/track')
w.send('x', TEXT)
m = w.msg()
w.rst()
w2 = WS2('/ws/echo', port=PORT)      # the connection serves on
w2.send('again', TEXT)
m2 = w2.msg()
done(m=m[1].decode() if m else None, m2=m2[1].decode() if m2 else None)
PY
is($r->{m}, 'x', 'an echo before the reset');
ok(FastdTest::wait_for(sub { -e "$dir/track.closed" }, 10, 0.05),
   "a client's RST_STREAM closes the upstream connection");
is($r->{m2}, 'again', 'and a new tunnel works');

unlink "$dir/track.closed";
$r = py(<<'PY');
w = WS2('/ws/track')
w.send('y', TEXT)
m = w.msg()
w.s.close()                          # the whole connection, no frame
done(m=m[1].decode() if m else None)
PY
is($r->{m}, 'y', 'an echo before the client goes');
ok(FastdTest::wait_for(sub { -e "$dir/track.closed" }, 10, 0.05),
   "a client's connection closed: the upstream connection goes too");

# --- a slow client: the upstream is held back, fastd's memory stays --------
my ($worker) = FastdTest::children_of($t->pid);
my $rss0 = FastdTest::rss_kb($worker);
unlink "$dir/flood.sent";
my $total = 32 * 1024 * 1024;
my $bg = H2::py_start($t, <<"PY", timeout => 120);
from ws2lib import *
w = WS2('/ws/flood?$total', ack=False)
# nothing read: only the first windows' worth reaches the client
stalled = w.until(lambda: os.path.exists('$dir/flood.go'), 60)
held = w.got
w.open_window()
n, ok = 0, True
while n < $total:
    m = w.msg(30)
    if m is None:
        break
    ok = ok and m[1] == bytes([(n // 65536) % 256]) * 65536
    n += len(m[1])
done(held=held, n=n, ok=ok, **w.state())
PY
my $last = -1;
my $stable = FastdTest::wait_for(sub {
    my $s = FastdTest::slurp("$dir/flood.sent") // 0;
    my $same = $s > 0 && $s == $last;
    $last = $s;
    return $same;
}, 30, 0.5);
my $rss1 = FastdTest::rss_kb($worker);
ok($stable && $last < $total,
   "a client that reads nothing holds the upstream back ($last of $total bytes sent)");
cmp_ok($rss1 - $rss0, '<', 8192,
       "fastd's memory stays flat meanwhile ($rss0 kB -> $rss1 kB)");
FastdTest::spew("$dir/flood.go", '1');
$r = H2::py_wait($bg, 120);
cmp_ok($r->{held} // 1e9, '<=', 65535, 'the client got no more than its window')
    or diag(H2::explain($r));

is($r->{n}, $total, 'then all of it arrives once the window opens');
ok($r->{ok}, '... in order, intact');

# --- refusals ---------------------------------------------------------------
$r = py(<<'PY');
out = {}
for p, proto in (('/plaintext', 'websocket'), ('/index.html', 'websocket'),
                 ('/nows/echo', 'websocket'), ('/ws/echo', 'foo'),
                 ('/ws/deny', 'websocket'), ('/liar/x', 'websocket')):
    w = WS2(p, protocol=proto)
    out[p + ' ' + proto] = w.status
done(out=out)
PY
is($r->{out}{'/plaintext websocket'}, 501, 'a handler that does not tunnel: 501')
    or diag(H2::explain($r));
is($r->{out}{'/index.html websocket'}, 501, 'a static file: 501');
is($r->{out}{'/nows/echo websocket'}, 501, 'a proxy with websocket = off: 501');
is($r->{out}{'/ws/echo foo'}, 501, 'another :protocol: 501');
is($r->{out}{'/ws/deny websocket'}, 403, "an upstream's refusal is its answer");
is($r->{out}{'/liar/x websocket'}, 502, 'a wrong Sec-WebSocket-Accept: 502');

# malformed: :protocol on a GET (RFC 8441 4), a plain CONNECT (no :path)
$r = H2::py($t, <<'PY');
c = Raw()
c.req(1, '/ws/echo', headers=[(':protocol', 'websocket')], end_stream=False)
a = c.response(1)
f = HeadersFrame(3, block([(':method', 'CONNECT'),
                           (':authority', 'localhost:443')]))
f.flags.add('END_HEADERS')
c.send(f)
b = c.response(3)
done(a=a, b=b, goaway=c.goaway)
PY
is($r->{a}{rst}, 1,
   ':protocol on a GET: RST_STREAM PROTOCOL_ERROR (nghttp2)') or diag(H2::explain($r));
is($r->{b}{status}, 400, 'a plain CONNECT (no :path): 400')
    or diag(H2::explain($r));

# --- a graceful stop: the tunnel goes on until it ends ----------------------
# (h2lib's frame client: python-h2 sends nothing more once it read a
# GOAWAY, even a graceful one that lets the stream run on)
my $bgq = H2::py_start($t, <<"PY", timeout => 60);
import struct
from ws2lib import frame, parse, TEXT, CLOSE
c = Raw()
c.until(lambda: c.settings.get(8) == 1)
c.req(1, '/ws/echo', method='CONNECT', end_stream=False,
      headers=[(':protocol', 'websocket')])
def msg():
    r = c.until(lambda: parse(c.stream(1)['data']))
    if not r:
        return None
    c.stream(1)['data'] = r[2]
    return r[0], r[1]
c.data(1, frame('before', TEXT))
a = msg()
open('$dir/tunnel.open', 'w').close()
# (Raw.until() waits for the socket, not the file: poll both)
t0 = time.time()
while not (os.path.exists('$dir/quit.sent') and c.goaway) and \\
        time.time() - t0 < 30:
    c.read(0.05)
c.data(1, frame('after', TEXT))
b = msg()
c.data(1, frame(struct.pack('!H', 1000), CLOSE))
e = msg()
r = c.response(1)
done(a=a[1].decode('latin-1') if a else None,
     b=b[1].decode('latin-1') if b else None, bop=b[0] if b else None,
     c=e[0] if e else None, goaway=c.goaway, end=r['end'],
     frames=c.summary()['frames'])
PY
ok(FastdTest::wait_for(sub { -e "$dir/tunnel.open" }, 20, 0.05), 'a tunnel is open');
ok($t->signal('QUIT'), 'SIGQUIT sent');
FastdTest::spew("$dir/quit.sent", '1');
$r = H2::py_wait($bgq, 60);
is_deeply([ @$r{qw(a b c)} ], [ 'before', 'after', 8 ],
          'a graceful stop (GOAWAY) lets the tunnel carry on to its close')
    or diag(H2::explain($r));
ok($r->{end} && $r->{goaway} && $r->{goaway}[1] == 0,
   'the stream ends after a GOAWAY NO_ERROR');
ok(defined $t->wait_exit(20), 'then fastd exits');

$t->stop;
$t->no_alerts;
done_testing;
