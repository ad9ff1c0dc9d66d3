#!/usr/bin/perl
# The [http] HTTP/2 limits, set away from their defaults and seen on the
# wire: http2_max_concurrent_streams (SETTINGS, the stream past it
# refused), http2_max_header_size (431, the connection goes on),
# http2_initial_window (SETTINGS, the window an upload gets and never
# more), max_body_size for a body without content-length, send_timeout
# against a zero-window slow reader (closed in 2-8 s,
# RSS flat), keepalive_requests (GOAWAY after that many streams, the
# streams in flight finish, the connection closes) and http2_idle_timeout.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use H2;
use File::Path qw(make_path);
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();

my $be = Backend->new(handler => sub {
    my ($req) = @_;
    return Backend::response(200, "got " . length($req->{body}) . " "
                             . unpack('%32C*', $req->{body}) . "\n");
});
my $proxy = FastdTest::proxy_locations('p')
          . "[upstream p]\nserver = " . $be->addr . "\n\n"
          . "[location /limited/]\nhandler = plaintext\nmax_body_size = 64\n\n";

my $t = FastdTest->new(conf => H2::conf(
    http => { http2_max_concurrent_streams => 4, http2_max_header_size => '1k',
              http2_initial_window => '16k', send_timeout => '2s',
              body_timeout => '2s' },
    server => { root => '%%DIR%%/www' },
    locations => $proxy));
make_path($t->dir . '/www');
my $big = join '', map { sprintf "%08d\n", $_ } 1 .. 300000;   # 2.7 MB
FastdTest::spew($t->dir . '/www/big.txt', $big);
$t->start;
my ($worker) = $t->workers;

# --- SETTINGS ----------------------------------------------------------------
my $o = H2::py($t, <<'PY');
c = Raw()
c.until(lambda: c.settings, 5)
done(**c.summary())
PY
my $s = $o->{settings} || {};
is($s->{3}, 4, 'SETTINGS_MAX_CONCURRENT_STREAMS = http2_max_concurrent_streams')
    or diag(H2::explain($o));
is($s->{4}, 16384, 'SETTINGS_INITIAL_WINDOW_SIZE = http2_initial_window');
ok(!exists $s->{6} || $s->{6} == 1024,
   'SETTINGS_MAX_HEADER_LIST_SIZE, when sent, = http2_max_header_size ('
   . ($s->{6} // 'not sent') . ')');

# --- the fifth stream of four ----------------------------------------------
# Five POSTs whose bodies have not come: the backend waits for them, so
# the four first streams stay open and the fifth is one too many. Then
# the bodies come and the four are answered. Twice: sent with the
# preface, before the client has seen (and acknowledged) the server's
# SETTINGS, and after. RFC 9113 5.1.2: a HEADERS frame past the
# advertised limit is a stream error, PROTOCOL_ERROR or REFUSED_STREAM,
# not a connection error.
for my $when ('with the preface', 'after SETTINGS') {
    $o = H2::py($t, <<'PY', args => [ $when eq 'after SETTINGS' ? 1 : 0 ]);
wait = ARGS[0] == '1'
c = Raw(preface=False)
first = PREFACE + SettingsFrame(0).serialize()
if wait:
    c.send(first)
    first = b''
    c.until(lambda: c.settings, 5)
for sid in (1, 3, 5, 7, 9):
    first += c.req(sid, '/p/up', method='POST', end_stream=False,
                   headers=[('content-length', '4')], send=False)
c.send(first)
c.until(lambda: 9 in c.streams and c.streams[9]['rst'] is not None
        or c.goaway, 5)
for sid in (1, 3, 5, 7):
    c.data(sid, b'abcd', end_stream=True)
out = {sid: c.response(sid, timeout=10) for sid in (1, 3, 5, 7)}
done(s=[out[i]['status'] for i in (1, 3, 5, 7)],
     b=[out[i]['body'] for i in (1, 3, 5, 7)], **c.summary())
PY
    my $rst = $o->{rsts} && $o->{rsts}{9};
    # libnghttp2 1.52 refuses such a stream (REFUSED_STREAM) only while its
    # SETTINGS are unacknowledged; after the ACK it ends the connection
    # (GOAWAY PROTOCOL_ERROR "max concurrent streams exceeded") before any
    # callback of fastd's could refuse the stream alone. A client that
    # heeds SETTINGS never gets there.
    local $TODO = 'libnghttp2 1.52 makes it a connection error once '
                . 'SETTINGS is acknowledged'
        if $when eq 'after SETTINGS';
    if ($when eq 'with the preface') {
        is($rst, 7, "$when: the fifth stream gets RST_STREAM REFUSED_STREAM")
            or diag(H2::explain($o));
    } else {
        ok(defined $rst && ($rst == 7 || $rst == 1),
           "$when: the fifth stream gets RST_STREAM REFUSED_STREAM or "
           . "PROTOCOL_ERROR (" . ($rst // 'none') . ')') or diag(H2::explain($o));
    }
    ok(!$o->{goaway}, "$when: a stream past the limit is no connection error")
        or diag(H2::explain($o));
    is_deeply($o->{s}, [200, 200, 200, 200], "$when: the four others answered");
    is_deeply($o->{b}, [ ("got 4 " . unpack('%32C*', 'abcd') . "\n") x 4 ],
              "$when: each with its body");
}

# --- header size ---------------------------------------------------------------
$o = H2::py($t, <<'PY');
c = Raw()
c.req(1, '/plaintext', headers=[('x-big', 'b' * 2000)])
r1 = c.response(1)
c.req(3, '/plaintext', headers=[('x-small', 's' * 500)])
r3 = c.response(3)
done(s1=r1['status'], rst1=r1['rst'], s3=r3['status'], **c.summary())
PY
ok(($o->{s1} // 0) == 431 || defined $o->{rst1},
   'a 2000-byte header over http2_max_header_size = 1k: 431 (status '
   . ($o->{s1} // 'none') . ', rst ' . ($o->{rst1} // 'none') . ')')
    or diag(H2::explain($o));
is($o->{s1}, 431, 'and it is a 431 response');
is($o->{s3}, 200, 'a 500-byte header on the next stream: 200');
ok(!$o->{goaway}, 'no GOAWAY');

# --- the upload window ----------------------------------------------------------
# A 100 KB body sent as the windows allow: the stream's window starts at
# 16k and the server's WINDOW_UPDATEs never open more than 16k ahead of
# what was sent; the backend gets every byte.
my $body = join '', map { chr(65 + $_ % 26) } 0 .. 102399;
$o = H2::py($t, <<'PY', args => [ length $body ], timeout => 40);
n = int(ARGS[0])
body = bytes(65 + i % 26 for i in range(n))
c = Raw()
c.until(lambda: c.settings, 5)
c.req(1, '/p/upload', method='POST', end_stream=False,
      headers=[('content-length', str(n))])
swin = c.settings.get(4, 65535)
cwin = 65535
seen = 0          # WINDOW_UPDATE frames handled
most = swin       # the widest the stream window got
sent, t0 = 0, time.time()
while sent < n and time.time() - t0 < 20:
    for f in c.frames[seen:]:
        if f.__class__.__name__ == 'WindowUpdateFrame':
            if f.stream_id == 1:
                swin += f.window_increment
                most = max(most, swin)
            elif f.stream_id == 0:
                cwin += f.window_increment
    seen = len(c.frames)
    k = min(swin, cwin, 16384, n - sent)
    if k > 0:
        c.data(1, body[sent:sent + k], end_stream=sent + k == n)
        sent += k
        swin -= k
        cwin -= k
    else:
        c.read(1)
    if c.goaway or c.eof:
        break
r = c.response(1, timeout=10)
done(sent=sent, most=most, status=r['status'], body=r['body'], **c.summary())
PY
is($o->{sent}, length $body, 'the whole body went out within the windows')
    or diag(H2::explain($o));
is($o->{status}, 200, 'the upload answered 200');
is($o->{body}, "got " . length($body) . " " . unpack('%32C*', $body) . "\n",
   'the backend got every byte');
ok(($o->{most} // 1e9) <= 16384,
   "the stream window never opened past 16k (widest: " . ($o->{most} // '?') . ')');

# --- a zero-window slow reader ----------------------------------------------------
# SETTINGS_INITIAL_WINDOW_SIZE = 0 and no WINDOW_UPDATE: the response
# cannot move; send_timeout = 2s closes the connection.
{
    my $rss0 = FastdTest::rss_kb($worker);
    $o = H2::py($t, <<'PY', args => [ $worker ], timeout => 30);
pid = int(ARGS[0])
conns = []
for i in range(4):
    c = Raw(settings={4: 0}, auto_window=False)
    c.until(lambda: c.settings, 5)
    c.req(1, '/big.txt')
    conns.append(c)
t0 = time.time()
peak = rss_kb(pid)
closed = []
for c in conns:
    while not c.eof and time.time() - t0 < 12:
        c.read(0.2)
        peak = max(peak, rss_kb(pid))
    closed.append(round(time.time() - t0, 2) if c.eof else None)
st = conns[0].streams.get(1) or {}
done(closed=closed, peak=peak, data=len(st.get('data', b'')),
     headers=bool(st.get('headers')), **conns[0].summary())
PY
    my @closed = @{ $o->{closed} || [] };
    is(scalar(grep { defined && $_ >= 1.5 && $_ <= 8 } @closed), 4,
       'four zero-window readers closed within 2-8 s (send_timeout = 2s): '
       . join(' ', map { $_ // 'open' } @closed)) or diag(H2::explain($o));
    is($o->{data}, 0, 'no DATA was sent into a zero window');
    my $grew = ($o->{peak} // 0) - $rss0;
    ok($rss0 && $grew < 4096, "the worker's RSS grew $grew kB (< 4 MB) "
       . 'with 2.7 MB files stuck');
}

# --- bodies nobody reads ----------------------------------------------------------
# A request answered before its body is read (405 from static for a POST)
# leaves DATA in the stream's buffer: the connection's window must get it
# back, or 1 MB of such bodies stalls the connection for good (a client
# that keeps to the window waits forever; this one, which does not, gets
# FLOW_CONTROL_ERROR). 120 POSTs of 12 KB (each within the 16k stream
# window), one after another.
$o = H2::py($t, <<'PY', timeout => 60);
c = Raw()
c.until(lambda: c.settings, 5)
codes = []
for i in range(120):
    sid = 1 + 2 * i
    # HEADERS and DATA in one write: the body is in when 405 is decided
    c.send(c.req(sid, '/nothing-here', method='POST', end_stream=False,
                 headers=[('content-length', '12288')], send=False)
           + c.data(sid, b'x' * 12288, end_stream=True, send=False))
    r = c.response(sid, timeout=5)
    codes.append(r['status'])
    if r['status'] is None or c.goaway:
        break
done(codes=codes, **c.summary())
PY
is(scalar(grep { ($_ // 0) == 405 } @{ $o->{codes} || [] }), 120,
   '120 unread 12 KB bodies on one connection: each answered (405)')
    or diag(H2::explain($o));
ok(!$o->{goaway}, 'and no GOAWAY (no flow-control error)')
    or diag(H2::explain($o));

# --- a body that never comes ------------------------------------------------------
# HEADERS announce a body to a buffered location, then nothing: body_timeout
# (2s) ends the connection, as it would an HTTP/1.1 one.
$o = H2::py($t, <<'PY', timeout => 30);
c = Raw()
c.until(lambda: c.settings, 5)
c.req(1, '/plaintext', method='POST', end_stream=False,
      headers=[('content-length', '100')])
c.data(1, b'x' * 10)
t0 = time.time()
c.wait_close(12)
done(closed=round(time.time() - t0, 2) if c.eof else None, **c.summary())
PY
ok(defined $o->{closed} && $o->{closed} >= 1.5 && $o->{closed} <= 8,
   'a stalled request body: closed within 2-8 s (body_timeout = 2s): '
   . ($o->{closed} // 'open')) or diag(H2::explain($o));
ok(FastdTest::wait_for(sub { $t->error_log =~ /client timed out sending the request/ }),
   'and logged as the client sending too slowly');

# --- max_body_size, the body's length unsaid ------------------------------------
# A body without content-length to a buffered location with max_body_size
# = 64: 100 bytes are 413, as with a length (they once went through: the
# check waited for the first 4 KB buffer to grow); 60 are the handler's.
$o = H2::py($t, <<'PY');
c = Raw()
c.until(lambda: c.settings, 5)
out = {}
for sid, n in ((1, 100), (3, 60)):
    c.req(sid, '/limited/', method='POST', end_stream=False)
    c.data(sid, b'x' * n, end_stream=True)
    out[n] = c.response(sid, timeout=10)['status']
done(s100=out[100], s60=out[60], **c.summary())
PY
is($o->{s100}, 413, 'a body of unknown length over max_body_size: 413')
    or diag(H2::explain($o));
is($o->{s60}, 200, 'and one under it: 200');

my @w = H2::serving($t);
ok($w[0], 'the worker serves a new client') or diag($w[2]);
$t->no_alerts;
$t->stop;

# --- keepalive_requests, http2_idle_timeout ---------------------------------------
my $k = FastdTest->new(conf => H2::conf(
    http => { keepalive_requests => 3, http2_idle_timeout => '1s' }));
$k->start;

$o = H2::py($k, <<'PY');
c = Raw()
c.until(lambda: c.settings, 5)
for sid in (1, 3, 5, 7, 9):
    c.req(sid, '/plaintext')
out = {sid: c.response(sid, timeout=5) for sid in (1, 3, 5)}
closed = c.wait_close(5)
rest = {sid: c.streams.get(sid, {}) for sid in (7, 9)}
done(s=[out[i]['status'] for i in (1, 3, 5)], closed=closed,
     later=[1 if rest[i].get('headers') else 0 for i in (7, 9)], **c.summary())
PY
is_deeply($o->{s}, [200, 200, 200], 'keepalive_requests = 3: three streams answered')
    or diag(H2::explain($o));
is($o->{goaway} && $o->{goaway}[0], 5, 'GOAWAY with last stream 5')
    or diag(H2::explain($o));
is($o->{goaway} && $o->{goaway}[1], 0, 'GOAWAY NO_ERROR');
is_deeply($o->{later}, [0, 0],
          'streams 7 and 9 are not answered') or diag(H2::explain($o));
ok(defined $o->{closed} && $o->{closed} < 3, 'then the connection closes ('
   . ($o->{closed} // 'open') . ' s)');

$o = H2::py($k, <<'PY');
c = Raw()
c.req(1, '/plaintext')
r = c.response(1)
t0 = time.time()
c.wait_goaway(6)
g = time.time() - t0
closed = c.wait_close(3)
done(s=r['status'], goaway_after=g, **c.summary())
PY
is($o->{s}, 200, 'a request, then idle');
is($o->{goaway} && $o->{goaway}[1], 0,
   'http2_idle_timeout = 1s: GOAWAY NO_ERROR') or diag(H2::explain($o));
ok(($o->{goaway_after} // 99) >= 0.5 && $o->{goaway_after} < 4,
   sprintf('after %.2f s of idleness', $o->{goaway_after} // -1));
ok($o->{eof}, 'and the connection is closed');

@w = H2::serving($k);
ok($w[0], 'the worker serves a new client') or diag($w[2]);
$k->no_alerts;
done_testing();
