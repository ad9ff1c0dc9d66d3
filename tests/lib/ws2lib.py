# ws2lib: WebSocket over HTTP/2 (RFC 8441) for tests/h2_websocket.t, on
# python-h2's client (H2Connection): an extended CONNECT, then WebSocket
# frames (RFC 6455, masked as a client's) in the stream's DATA.
import os
import select
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

PORT = int(sys.argv[1])
CA = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
TEXT, BINARY, CLOSE = 1, 2, 8


def frame(payload, opcode=BINARY):
    """One masked frame (FIN set)."""
    if isinstance(payload, str):
        payload = payload.encode()
    n = len(payload)
    if n < 126:
        hdr = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        hdr = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack('!H', n)
    else:
        hdr = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack('!Q', n)
    key = os.urandom(4)
    m = (key * (n // 4 + 1))[:n]
    x = (int.from_bytes(payload, 'big') ^ int.from_bytes(m, 'big')) \
        .to_bytes(n, 'big') if n else b''
    return hdr + key + x


def parse(buf):
    """(opcode, payload, rest) for the first whole frame in buf, or None."""
    if len(buf) < 2:
        return None
    n, i = buf[1] & 127, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, i = struct.unpack('!H', buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, i = struct.unpack('!Q', buf[2:10])[0], 10
    if buf[1] & 0x80:
        i += 4  # a server never masks; skipped if it did
    if len(buf) < i + n:
        return None
    return buf[0] & 15, bytes(buf[i:i + n]), buf[i + n:]


class WS2:
    def __init__(self, path, tls=None, headers=(), protocol='websocket',
                 ack=True, timeout=10, port=None):
        s = socket.create_connection(('127.0.0.1', port or PORT),
                                     timeout=timeout)
        if tls:
            ctx = ssl.create_default_context(cafile=tls)
            ctx.set_alpn_protocols(['h2'])
            s = ctx.wrap_socket(s, server_hostname='localhost')
        self.s = s
        self.c = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=True, header_encoding='utf-8'))
        self.c.initiate_connection()
        self.ack = ack
        self.buf = b''
        self.got = 0           # DATA bytes received
        self.unacked = 0
        self.settings = None
        self.status = None
        self.headers = {}
        self.ended = False
        self.reset = None
        self.closed = False
        self.flush()
        self.until(lambda: self.settings is not None)
        self.sid = self.c.get_next_available_stream_id()
        h = [(':method', 'CONNECT')]
        if protocol:
            h.append((':protocol', protocol))
        h += [(':scheme', 'https' if tls else 'http'), (':path', path),
              (':authority', 'localhost')] + list(headers)
        self.c.send_headers(self.sid, h, end_stream=False)
        self.flush()
        self.until(lambda: self.status is not None or self.reset is not None
                   or self.ended)

    def flush(self):
        d = self.c.data_to_send()
        if d:
            self.s.sendall(d)

    def pump(self, timeout):
        if self.closed:
            return
        if not (isinstance(self.s, ssl.SSLSocket) and self.s.pending()):
            r, _, _ = select.select([self.s], [], [], max(timeout, 0))
            if not r:
                return
        try:
            d = self.s.recv(262144)
        except (ssl.SSLWantReadError, BlockingIOError, socket.timeout):
            return
        except OSError:
            d = b''
        if not d:
            self.closed = True
            return
        for e in self.c.receive_data(d):
            self.event(e)
        self.flush()

    def event(self, e):
        if isinstance(e, h2.events.RemoteSettingsChanged):
            self.settings = {int(k): v.new_value
                             for k, v in e.changed_settings.items()}
        elif isinstance(e, h2.events.ResponseReceived):
            self.headers = dict(e.headers)
            self.status = int(self.headers[':status'])
        elif isinstance(e, h2.events.DataReceived):
            self.buf += e.data
            self.got += len(e.data)
            if self.ack:
                self.c.acknowledge_received_data(e.flow_controlled_length,
                                                 e.stream_id)
            else:
                self.unacked += e.flow_controlled_length
        elif isinstance(e, h2.events.StreamEnded):
            self.ended = True
        elif isinstance(e, h2.events.StreamReset):
            self.reset = e.error_code
        elif isinstance(e, h2.events.ConnectionTerminated):
            self.closed = True

    def until(self, cond, timeout=10):
        deadline = time.time() + timeout
        while True:
            v = cond()
            if v or self.closed:
                return v
            left = deadline - time.time()
            if left <= 0:
                return v
            self.pump(min(left, 0.1))

    def send(self, payload, opcode=BINARY, raw=False):
        """A message (or raw bytes), as the stream's windows let it go."""
        f = payload if raw else frame(payload, opcode)
        deadline = time.time() + 20
        while f and time.time() < deadline and self.reset is None:
            w = min(self.c.local_flow_control_window(self.sid),
                    self.c.max_outbound_frame_size, len(f))
            if w <= 0:
                self.pump(1)
                continue
            self.c.send_data(self.sid, f[:w])
            f = f[w:]
            self.flush()
        return not f

    def msg(self, timeout=10):
        """The next message: (opcode, payload), or None."""
        r = self.until(lambda: parse(self.buf), timeout)
        if not r:
            return None
        op, p, self.buf = r
        return op, p

    def open_window(self):
        self.ack = True
        if self.unacked:
            self.c.acknowledge_received_data(self.unacked, self.sid)
            self.unacked = 0
        self.flush()

    def end(self):
        self.c.end_stream(self.sid)
        self.flush()

    def rst(self):
        self.c.reset_stream(self.sid, error_code=8)
        self.flush()

    def wait_end(self, timeout=10):
        """Until the stream ends (END_STREAM or a reset) or the connection."""
        return self.until(lambda: self.ended or self.reset is not None,
                          timeout)

    def state(self):
        return {'status': self.status, 'ended': self.ended,
                'reset': self.reset, 'closed': self.closed}
