#!/usr/bin/python3
"""An HTTP/2 (h2c, prior knowledge) backend for tests/h2_upstream.t, on
python's h2: what nghttpd cannot do on purpose (echo what it got, send
trailers, reset, close, refuse, go away, hang).

  h2_backend.py PORT MAX_CONCURRENT_STREAMS     prints "READY"

Paths (the request's :path):
  /echo...        200, JSON: the fields it got, body length and md5
  /big/N          200, N bytes (as the window lets them go)
  /trailers       200, "body", then trailers x-trailer, grpc-status
  /rst-before     RST_STREAM INTERNAL_ERROR instead of a response
  /rst-after      a header and "partial", then RST_STREAM
  /close-mid      a header and "partial", then the connection closes
  /refuse-once    the first time REFUSED_STREAM, then as /echo
  /goaway-once    the first time GOAWAY below it and a close, then /echo
  /hang           never answers
  /stall          a header and "partial", then nothing more
  /delay/MS       /echo after MS milliseconds
  /stats          JSON: connections so far, most streams open at once,
                  PINGs received
"""
import hashlib
import json
import select
import socket
import sys
import threading
import time
import traceback

import h2.config
import h2.connection
import h2.events
import h2.settings

lock = threading.Lock()
stats = {"connections": 0, "max_streams": 0, "pings": 0}
once = {"refuse": True, "goaway": True}


class Conn:
    def __init__(self, sock, max_streams):
        self.sock = sock
        cfg = h2.config.H2Configuration(client_side=False,
                                        header_encoding="utf-8")
        self.c = h2.connection.H2Connection(config=cfg)
        self.c.local_settings = h2.settings.Settings(
            client=False,
            initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS:
                            max_streams})
        self.req = {}      # stream id: [headers, body]
        self.later = []    # (when, stream id)
        self.pending = {}  # stream id: bytes still to send
        self.open = set()

    def flush(self):
        data = self.c.data_to_send()
        if data:
            self.sock.sendall(data)

    def run(self):
        self.c.initiate_connection()
        self.flush()
        while True:
            now = time.time()
            due = [s for w, s in self.later if w <= now]
            self.later = [(w, s) for w, s in self.later if w > now]
            for sid in due:
                if sid in self.req:
                    self.echo(sid)
            self.push()
            self.flush()
            tmo = min([w for w, _ in self.later], default=now + 1) - now
            r, _, _ = select.select([self.sock], [], [], max(tmo, 0.01))
            if not r:
                continue
            data = self.sock.recv(65536)
            if not data:
                return
            for ev in self.c.receive_data(data):
                if self.event(ev) == "close":
                    return
            self.flush()

    def event(self, ev):
        if isinstance(ev, h2.events.PingReceived):
            with lock:
                stats["pings"] += 1  # h2 answers it
        if isinstance(ev, h2.events.RequestReceived):
            self.req[ev.stream_id] = [dict(), b""]
            self.req[ev.stream_id][0] = ev.headers
            self.open.add(ev.stream_id)
            with lock:
                stats["max_streams"] = max(stats["max_streams"],
                                           len(self.open))
            path = dict(ev.headers).get(":path", "").split("?")[0]
            return self.begin(ev.stream_id, path,
                              ev.stream_ended is not None)
        if isinstance(ev, h2.events.DataReceived):
            if ev.stream_id in self.req:
                self.req[ev.stream_id][1] += ev.data
            self.c.acknowledge_received_data(ev.flow_controlled_length,
                                             ev.stream_id)
        if isinstance(ev, h2.events.StreamEnded):
            if ev.stream_id in self.req:
                path = dict(self.req[ev.stream_id][0]).get(":path", "")
                if path.startswith("/echo") or path.endswith("-once"):
                    self.echo(ev.stream_id)
        if isinstance(ev, (h2.events.StreamReset, h2.events.StreamEnded)):
            if isinstance(ev, h2.events.StreamReset):
                self.open.discard(ev.stream_id)
                self.pending.pop(ev.stream_id, None)
        return None

    def begin(self, sid, path, ended):
        c = self.c
        if path == "/stats":
            with lock:
                self.respond(sid, json.dumps(stats).encode())
        elif path.startswith("/big/"):
            c.send_headers(sid, [(":status", "200"),
                                 ("content-type", "application/x-big")])
            n = int(path[5:])
            self.pending[sid] = bytes(i % 251 for i in range(n))
        elif path == "/trailers":
            c.send_headers(sid, [(":status", "200")])
            c.send_data(sid, b"body")
            c.send_headers(sid, [("x-trailer", "yes"),
                                 ("grpc-status", "0")], end_stream=True)
            self.open.discard(sid)
        elif path == "/rst-before":
            c.reset_stream(sid, error_code=2)
            self.open.discard(sid)
        elif path == "/stall":
            c.send_headers(sid, [(":status", "200")])
            c.send_data(sid, b"partial")
        elif path in ("/rst-after", "/close-mid"):
            c.send_headers(sid, [(":status", "200")])
            c.send_data(sid, b"partial")
            if path == "/close-mid":
                self.flush()
                time.sleep(0.1)
                self.sock.close()
                return "close"
            self.flush()
            time.sleep(0.1)
            c.reset_stream(sid, error_code=2)
            self.open.discard(sid)
        elif path == "/refuse-once":
            with lock:
                first, once["refuse"] = once["refuse"], False
            if first:
                c.reset_stream(sid, error_code=7)  # REFUSED_STREAM
                self.open.discard(sid)
                del self.req[sid]
        elif path == "/goaway-once":
            with lock:
                first, once["goaway"] = once["goaway"], False
            if first:
                c.close_connection(error_code=0, last_stream_id=sid - 2
                                   if sid > 1 else 0)
                self.flush()
                self.sock.close()
                return "close"
        elif path.startswith("/delay/"):
            self.later.append((time.time() + int(path[7:]) / 1000.0, sid))
        return None

    def respond(self, sid, body, ctype="application/json"):
        self.c.send_headers(sid, [(":status", "200"),
                                  ("content-type", ctype),
                                  ("content-length", str(len(body)))])
        self.pending[sid] = body

    def echo(self, sid):
        hdrs, body = self.req.pop(sid)
        out = {"headers": [[k, v] for k, v in hdrs], "len": len(body),
               "md5": hashlib.md5(body).hexdigest()}
        self.respond(sid, json.dumps(out).encode())

    def push(self):
        for sid in list(self.pending):
            data = self.pending[sid]
            while data:
                room = min(self.c.local_flow_control_window(sid),
                           self.c.max_outbound_frame_size)
                if room <= 0:
                    break
                self.c.send_data(sid, data[:room])
                data = data[room:]
            if data:
                self.pending[sid] = data
            else:
                del self.pending[sid]
                self.c.end_stream(sid)
                self.open.discard(sid)


def serve(sock, max_streams):
    try:
        Conn(sock, max_streams).run()
    except Exception:
        traceback.print_exc()  # into the test's log
    finally:
        try:
            sock.close()
        except OSError:
            pass


def main():
    port, max_streams = int(sys.argv[1]), int(sys.argv[2])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(128)
    print("READY", flush=True)
    while True:
        s, _ = ls.accept()
        with lock:
            stats["connections"] += 1
        threading.Thread(target=serve, args=(s, max_streams),
                         daemon=True).start()


if __name__ == "__main__":
    main()
