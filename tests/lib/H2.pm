package H2;

# The HTTP/2 tests' tools (tests/h2_*.t): the configuration of an http2
# listener, real clients (curl, nghttp, h2load) and a python frame-level
# client. The python side is a small library (h2lib.py, written into the
# test's directory) over hyperframe and hpack, the packages python3-h2
# brings: a test writes a scenario in python that prints one JSON object,
# and gets that object back. Only /usr/bin/python3 is used: the python
# first in PATH may be a build without h2.
#
#   plan skip_all => H2::why_not() if H2::why_not();
#   my $t = FastdTest->new(conf => H2::conf(...));
#   my $r = H2::curl($t, '/plaintext');          # { code, version, ... }
#   my $o = H2::py($t, 'c = Raw(PORT); ...; done(status=...)');

use strict;
use warnings;

use JSON::PP ();
use POSIX ();
use FastdTest;
use TLS;

sub python { '/usr/bin/python3' }

# Why the HTTP/2 tests cannot run here (undef when they can): the h2
# python package and curl with HTTP2 are required; nghttp and h2load are
# checked by the tests that use them.
my $why;
sub why_not {
    return $why if defined $why;
    return $why = 'no /usr/bin/python3' unless -x python();
    my ($rc) = TLS::run([ python(), '-c',
                          'import h2.connection, hyperframe.frame, hpack' ]);
    return $why = 'python3-h2 is not installed (/usr/bin/python3 cannot '
                . 'import h2)' if $rc != 0;
    my $curl = TLS::curl() or return $why = 'curl is not installed';
    my (undef, $v) = TLS::run([ $curl, '--version' ]);
    return $why = 'curl has no HTTP2 support' unless $v =~ /^Features:.*\bHTTP2\b/m;
    return $why = '';
}

sub nghttp { (grep { -x } qw(/usr/bin/nghttp /usr/local/bin/nghttp))[0] }
sub h2load { (grep { -x } qw(/usr/bin/h2load /usr/local/bin/h2load))[0] }

# base_conf with its listener speaking HTTP/2 beside HTTP/1.1 (h2c); with
# cert => {crt, key}: TLS with ALPN h2. %o as base_conf, and listen_opt
# (the options after the address, default "http2" / "ssl http2").
sub conf {
    my (%o) = @_;
    my $cert = delete $o{cert};
    my $opt = delete $o{listen_opt} // ($cert ? 'ssl http2' : 'http2');
    my $text = FastdTest::base_conf(%o);
    my $keys = "listen = 127.0.0.1:%%PORT%% $opt\n";
    $keys .= "ssl_certificate = $cert->{crt}\nssl_certificate_key = $cert->{key}\n"
        if $cert;
    $text =~ s/^listen = 127\.0\.0\.1:%%PORT%%\n/$keys/m
        or die "base_conf has no listen line";
    return $text;
}

# ---------------------------------------------------------------------------
# curl

# One curl run over HTTP/2: cleartext with prior knowledge, or with
# %o{ca} https (ALPN) to localhost. $path may be a list of paths (one
# connection). %o: port, ca, args (more options), http (the protocol
# option, default --http2-prior-knowledge / --http2), timeout.
# Returns { rc, code, codes, version (the last %{http_version}), versions,
# connects, headers (raw text, every response), hlist ([name, value] of
# the last response), body, bodies, err }.
sub curl {
    my ($t, $path, %o) = @_;
    my $d = $t->dir;
    my $port = $o{port} // $t->port;
    my @paths = ref $path ? @$path : ($path);
    my $base = $o{ca} ? "https://localhost:$port" : "http://127.0.0.1:$port";
    my @cmd = (TLS::curl(), '-sS', '--max-time', $o{timeout} // 20,
               $o{http} // ($o{ca} ? '--http2' : '--http2-prior-knowledge'),
               $o{ca} ? ('--cacert', $o{ca},
                         '--resolve', "localhost:$port:127.0.0.1") : (),
               '-D', "$d/curl.head",
               '-w', '%{http_code} %{http_version} %{num_connects}\n',
               @{ $o{args} || [] });
    unlink "$d/curl.head", "$d/curl.err", glob("$d/curl.body.*");
    for my $i (0 .. $#paths) {
        push @cmd, '-o', "$d/curl.body.$i", "$base$paths[$i]";
    }
    my ($rc, $out) = TLS::run(\@cmd, stderr => "$d/curl.err",
                              timeout => ($o{timeout} // 20) + 10,
                              in => $o{in});
    my (@codes, @versions, $connects);
    for (split /\n/, $out) {
        my ($c, $v, $n) = /^(\d+) (\S+) (\d+)$/ or next;
        push @codes, $c + 0;
        push @versions, $v;
        $connects += $n;
    }
    my $head = FastdTest::slurp("$d/curl.head") // '';
    # the last response's header block (curl -D writes them one by one)
    my @blocks = grep { /\S/ } split /\r?\n\r?\n/, $head;
    my @hl;
    for my $l (split /\r?\n/, $blocks[-1] // '') {
        my ($n, $v) = $l =~ /^([^:\s]+):\s*(.*?)\s*$/ or next;
        push @hl, [ $n, $v ];
    }
    return { rc => $rc, codes => \@codes, code => $codes[-1] // 0,
             versions => \@versions, version => $versions[-1] // '',
             connects => $connects // 0, headers => $head, hlist => \@hl,
             bodies => [ map { FastdTest::slurp("$d/curl.body.$_") // '' }
                         0 .. $#paths ],
             body => FastdTest::slurp("$d/curl.body.$#paths") // '',
             err => FastdTest::slurp("$d/curl.err") // '' };
}

# The value of header $name in curl()'s last response (case-insensitive).
sub hval {
    my ($r, $name) = @_;
    my ($h) = grep { lc $_->[0] eq lc $name } @{ $r->{hlist} };
    return $h ? $h->[1] : undef;
}

# ---------------------------------------------------------------------------
# python

my $LIB = <<'PY';
# h2lib: a frame-level HTTP/2 client for fastd's tests. Raw speaks frames
# (hyperframe) with a stateless HPACK encoder of its own (literals never
# indexed, so a test may put anything on the wire without desynchronising
# a dynamic table) and decodes the server's header blocks with hpack.
import json, os, select, socket, ssl, sys, time
import hpack
from hyperframe.frame import (Frame, DataFrame, HeadersFrame, RstStreamFrame,
                              SettingsFrame, PingFrame, GoAwayFrame,
                              WindowUpdateFrame, ContinuationFrame)

PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
PORT = int(sys.argv[1])
CA = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
ARGS = sys.argv[3:]
ERRORS = {0: 'NO_ERROR', 1: 'PROTOCOL_ERROR', 2: 'INTERNAL_ERROR',
          3: 'FLOW_CONTROL_ERROR', 4: 'SETTINGS_TIMEOUT', 5: 'STREAM_CLOSED',
          6: 'FRAME_SIZE_ERROR', 7: 'REFUSED_STREAM', 8: 'CANCEL',
          9: 'COMPRESSION_ERROR', 10: 'CONNECT_ERROR',
          11: 'ENHANCE_YOUR_CALM', 12: 'INADEQUATE_SECURITY',
          13: 'HTTP_1_1_REQUIRED'}


def done(**kw):
    print('RESULT ' + json.dumps(kw), flush=True)
    sys.exit(0)


def hpack_int(n, prefix, first=0):
    top = (1 << prefix) - 1
    if n < top:
        return bytes([first | n])
    out = [first | top]
    n -= top
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def hpack_str(s):
    if isinstance(s, str):
        s = s.encode('latin-1')
    return hpack_int(len(s), 7) + s


def literal(name, value):
    """A literal header field without indexing, new name (RFC 7541 6.2.2)."""
    return b'\x00' + hpack_str(name) + hpack_str(value)


def block(headers):
    return b''.join(literal(n, v) for n, v in headers)


def rss_kb(pid):
    try:
        with open('/proc/%d/status' % pid) as f:
            for l in f:
                if l.startswith('VmRSS:'):
                    return int(l.split()[1])
    except OSError:
        pass
    return 0


class Raw:
    def __init__(self, port=None, tls=None, alpn=('h2',), preface=True,
                 settings=None, timeout=5, auto_window=True):
        self.s = socket.create_connection(('127.0.0.1', port or PORT),
                                          timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.alpn = None
        if tls:
            ctx = ssl.create_default_context(cafile=tls)
            ctx.set_alpn_protocols(list(alpn))
            self.s = ctx.wrap_socket(self.s, server_hostname='localhost')
            self.alpn = self.s.selected_alpn_protocol()
        self.scheme = 'https' if tls else 'http'
        self.buf = b''
        self.frames = []        # every frame received, in order
        self.eof = False
        self.reset = False      # the server reset the TCP connection
        self.send_error = None
        self.dec = hpack.Decoder(max_header_list_size=1 << 24)
        self.dec.max_allowed_table_size = 65536
        self.streams = {}       # id -> {headers, data, end, rst}
        self.goaway = None      # (last stream id, error code, debug data)
        self.settings = {}      # the server's SETTINGS
        self.hblock = None      # (stream id, bytes) of a header block
        self.auto_window = auto_window
        self.t0 = time.time()
        if preface:
            self.send(PREFACE + SettingsFrame(0, settings=settings or {})
                      .serialize())

    # --- sending -----------------------------------------------------------
    def send(self, data):
        if not isinstance(data, (bytes, bytearray)):
            data = data.serialize()
        try:
            self.s.sendall(data)
            return True
        except (OSError, ssl.SSLError) as e:
            self.send_error = e.__class__.__name__
            return False

    def req(self, sid, path='/plaintext', method='GET', headers=(),
            end_stream=True, end_headers=True, authority='localhost',
            send=True):
        h = [(':method', method), (':scheme', self.scheme),
             (':authority', authority), (':path', path)] + list(headers)
        f = HeadersFrame(sid, block(h))
        if end_headers:
            f.flags.add('END_HEADERS')
        if end_stream:
            f.flags.add('END_STREAM')
        return self.send(f) if send else f.serialize()

    def data(self, sid, payload=b'', end_stream=False, send=True):
        f = DataFrame(sid, payload)
        if end_stream:
            f.flags.add('END_STREAM')
        return self.send(f) if send else f.serialize()

    def rst(self, sid, code=8, send=True):
        f = RstStreamFrame(sid, error_code=code)
        return self.send(f) if send else f.serialize()

    def window_update(self, sid, inc, send=True):
        f = WindowUpdateFrame(sid, window_increment=inc)
        return self.send(f) if send else f.serialize()

    def ping(self, payload=b'\0' * 8, send=True):
        f = PingFrame(0, opaque_data=payload)
        return self.send(f) if send else f.serialize()

    # --- receiving ---------------------------------------------------------
    def read(self, timeout=5):
        """One read: bytes read, 0 at EOF, None on timeout."""
        if self.eof:
            return 0
        if not (isinstance(self.s, ssl.SSLSocket) and self.s.pending()):
            r, _, _ = select.select([self.s], [], [], max(timeout, 0))
            if not r:
                return None
        try:
            chunk = self.s.recv(65536)
        except (ssl.SSLWantReadError, BlockingIOError, socket.timeout):
            return None
        except (OSError, ssl.SSLError):
            self.reset = True
            chunk = b''
        if not chunk:
            self.eof = True
            return 0
        self.buf += chunk
        self._parse()
        return len(chunk)

    def _parse(self):
        while len(self.buf) >= 9:
            f, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
            if len(self.buf) < 9 + length:
                return
            f.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            self._got(f)

    def stream(self, sid):
        return self.streams.setdefault(sid, {'headers': None, 'data': b'',
                                             'end': False, 'rst': None,
                                             'frames': 0})

    def _got(self, f):
        self.frames.append(f)
        name = f.__class__.__name__
        if name in ('HeadersFrame', 'ContinuationFrame'):
            sid, b = self.hblock if name == 'ContinuationFrame' and \
                self.hblock else (f.stream_id, b'')
            self.hblock = (sid, b + f.data)
            if 'END_HEADERS' in f.flags:
                st = self.stream(sid)
                hl = self.dec.decode(self.hblock[1])
                if st['headers'] is None:
                    st['headers'] = hl
                else:
                    st['trailers'] = hl
                self.hblock = None
            if 'END_STREAM' in f.flags:
                self.stream(f.stream_id)['end'] = True
        elif name == 'DataFrame':
            st = self.stream(f.stream_id)
            st['data'] += f.data
            st['frames'] += 1
            if 'END_STREAM' in f.flags:
                st['end'] = True
            n = f.flow_controlled_length
            if self.auto_window and n:
                self.send(self.window_update(0, n, send=False)
                          + self.window_update(f.stream_id, n, send=False))
        elif name == 'RstStreamFrame':
            self.stream(f.stream_id)['rst'] = f.error_code
        elif name == 'GoAwayFrame':
            if self.goaway is None:
                self.goaway = (f.last_stream_id, f.error_code,
                               bytes(f.additional_data).decode('latin-1'))
        elif name == 'SettingsFrame':
            if 'ACK' not in f.flags:
                self.settings.update(f.settings)
                self.send(SettingsFrame(0, flags=['ACK']))

    def until(self, cond, timeout=5):
        """Read until cond() holds, EOF, or timeout; cond()'s value."""
        deadline = time.time() + timeout
        while True:
            v = cond()
            if v or self.eof:
                return v
            left = deadline - time.time()
            if left <= 0:
                return v
            self.read(left)

    def response(self, sid, timeout=5):
        """Stream sid's response: {status, headers, body, end, rst}."""
        # a GOAWAY ends the wait only for a stream it does not let finish
        # (above its last stream id) or for an error: a graceful one
        # (NO_ERROR, last id >= sid) lets the stream run to its end
        self.until(lambda: sid in self.streams and
                   (self.streams[sid]['end'] or
                    self.streams[sid]['rst'] is not None) or
                   self.goaway is not None and
                   (self.goaway[0] < sid or self.goaway[1] != 0), timeout)
        st = self.streams.get(sid) or self.stream(sid)
        hl = st['headers'] or []
        status = next((int(v) for n, v in hl if n == ':status'), None)
        return {'status': status, 'headers': [[n, v] for n, v in hl],
                'body': st['data'].decode('latin-1'), 'end': st['end'],
                'rst': st['rst'], 'data_frames': st['frames']}

    def wait_goaway(self, timeout=5):
        self.until(lambda: self.goaway is not None, timeout)
        return self.goaway

    def wait_close(self, timeout=5):
        """Read until the server closes; the seconds it took, or None."""
        t = time.time()
        self.until(lambda: False, timeout)
        return round(time.time() - t, 3) if self.eof else None

    def summary(self):
        """What happened on the connection, for done()."""
        g = self.goaway
        return {'goaway': list(g) if g else None,
                'goaway_name': ERRORS.get(g[1]) if g else None,
                'eof': self.eof, 'reset': self.reset,
                'send_error': self.send_error,
                'rsts': {str(k): v['rst'] for k, v in self.streams.items()
                         if v['rst'] is not None},
                'frames': [f.__class__.__name__.replace('Frame', '')
                           for f in self.frames[:40]],
                'nframes': len(self.frames),
                'settings': {str(k): v for k, v in self.settings.items()}}

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def h2get(path='/plaintext', port=None, tls=None, timeout=5):
    """A GET with python-h2's own client (another implementation than Raw):
    (status, body) or (None, why)."""
    import h2.connection, h2.config, h2.events
    try:
        s = socket.create_connection(('127.0.0.1', port or PORT),
                                     timeout=timeout)
        if tls:
            ctx = ssl.create_default_context(cafile=tls)
            ctx.set_alpn_protocols(['h2'])
            s = ctx.wrap_socket(s, server_hostname='localhost')
        c = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=True, header_encoding='utf-8'))
        c.initiate_connection()
        c.send_headers(1, [(':method', 'GET'), (':path', path),
                           (':scheme', 'https' if tls else 'http'),
                           (':authority', 'localhost')], end_stream=True)
        s.sendall(c.data_to_send())
        status, body = None, b''
        deadline = time.time() + timeout
        while time.time() < deadline:
            d = s.recv(65536)
            if not d:
                return (status, 'closed')
            for e in c.receive_data(d):
                if isinstance(e, h2.events.ResponseReceived):
                    status = int(dict(e.headers)[':status'])
                elif isinstance(e, h2.events.DataReceived):
                    body += e.data
                    c.acknowledge_received_data(e.flow_controlled_length,
                                                e.stream_id)
                elif isinstance(e, h2.events.StreamEnded):
                    s.close()
                    return (status, body.decode('latin-1'))
                elif isinstance(e, (h2.events.StreamReset,
                                    h2.events.ConnectionTerminated)):
                    return (None, repr(e))
            s.sendall(c.data_to_send())
        return (status, 'timeout')
    except Exception as e:
        return (None, repr(e))
PY

# Run a python scenario against $t: $code after "from h2lib import *",
# as /usr/bin/python3 SCRIPT PORT CA ARGS...; it ends with done(k=v, ...).
# %o: port, ca, args ([...]), timeout (default 40 s), name.
# Returns the object done() printed, or { error => what went wrong,
# output => everything it printed }.
my $seq = 0;
sub py {
    my ($t, $code, %o) = @_;
    my $d = $t->dir;
    FastdTest::spew("$d/h2lib.py", $LIB) unless -e "$d/h2lib.py";
    my $name = $o{name} // 'h2_' . ++$seq;
    my $script = "$d/$name.py";
    FastdTest::spew($script, "import sys\nsys.path.insert(0, "
                    . "'$d')\nfrom h2lib import *\n\n$code\n");
    my ($rc, $out) = TLS::run([ python(), $script, $o{port} // $t->port,
                                $o{ca} // '', @{ $o{args} || [] } ],
                              timeout => $o{timeout} // 40);
    my ($json) = $out =~ /^RESULT (.*)$/m;
    my $r = defined $json ? eval { JSON::PP::decode_json($json) } : undef;
    return $r if $r;
    return { error => $rc == -1 ? 'timed out' : "exit $rc", output => $out };
}

# py() in the background (a forked child), for a scenario that must run
# while the test does something else (a reload); py_wait: its result.
sub py_start {
    my ($t, $code, %o) = @_;
    my $out = $t->dir . '/bg.' . ++$seq . '.json';
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $r = py($t, $code, %o);
        FastdTest::spew($out, JSON::PP::encode_json($r));
        POSIX::_exit(0);
    }
    return { pid => $pid, out => $out };
}

sub py_wait {
    my ($h, $timeout) = @_;
    my $done = FastdTest::wait_for(sub { waitpid($h->{pid}, POSIX::WNOHANG()) == $h->{pid} },
                                   $timeout // 60, 0.05);
    unless ($done) {
        kill 'KILL', $h->{pid};
        waitpid($h->{pid}, 0);
        return { error => 'the background scenario did not end' };
    }
    my $j = FastdTest::slurp($h->{out});
    return (defined $j ? eval { JSON::PP::decode_json($j) } : undef)
        || { error => 'no result from the background scenario' };
}

# A one-line account of a py() result for diag().
sub explain {
    my ($r) = @_;
    return JSON::PP->new->canonical->encode($r);
}

# Is the worker still serving? A fresh HTTP/2 connection (python-h2's
# client) gets 200 for /plaintext within $timeout s. Returns
# (ok, seconds, why).
sub serving {
    my ($t, %o) = @_;
    my $r = py($t, "import time\nt = time.time()\n"
               . "st, body = h2get('/plaintext', tls=CA, timeout=5)\n"
               . "done(status=st, body=body, took=time.time() - t)",
               ca => $o{ca}, name => 'serving', timeout => 15);
    my $ok = ($r->{status} // 0) == 200
          && ($r->{took} // 99) < ($o{timeout} // 3);
    return ($ok, $r->{took}, explain($r));
}

1;
