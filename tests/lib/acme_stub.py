#!/usr/bin/python3
# A small HTTPS stub in front of pebble for tests/acme_*.t: it forwards
# every request to pebble (rewriting pebble's address to its own in the
# answers, so the client keeps coming back through it) and, as the mode
# file says at each request, spoils one answer:
#   pass        nothing
#   bad_json    the directory is malformed JSON
#   bad_ctype   the directory comes as text/html
#   huge        the directory is 3 MB
#   other_cert  the certificate download is OTHER_PEM (another name, key)
# With an ari file (lines "ID START END RETRY_AFTER", Unix times and
# seconds; ID "*" for any other certificate), the directory gets
# renewalInfo and GET /renewal-info/ID answers that window; each ID asked
# is appended to DIR/ari.log. A profiles file (names) adds them to the
# directory's meta.profiles; each newOrder's payload is appended to
# DIR/orders.log.
#
#   acme_stub.py PORT PEBBLE_PORT CERT KEY PEBBLE_CA DIR
# DIR holds "mode", "ari", "other.pem"; it writes "ready" once listening.

import base64
import http.client
import http.server
import json
import os
import ssl
import sys
import time

port, pport = int(sys.argv[1]), int(sys.argv[2])
cert, key, pca, d = sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
me, them = '127.0.0.1:%d' % port, '127.0.0.1:%d' % pport
up_ctx = ssl.create_default_context(cafile=pca)


def read(name, default=''):
    try:
        with open(os.path.join(d, name)) as f:
            return f.read().strip()
    except OSError:
        return default


def iso(t):
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(t))


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        with open(os.path.join(d, 'stub.log'), 'a') as f:
            f.write(fmt % args + '\n')

    def answer(self, status, headers, body):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ('content-length', 'transfer-encoding',
                                 'connection', 'date', 'server'):
                self.send_header(k, v.replace(them, me))
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def forward(self):
        mode = read('mode', 'pass')
        ari = read('ari')
        if self.path.startswith('/renewal-info/') and ari:
            cid = self.path[len('/renewal-info/'):]
            with open(os.path.join(d, 'ari.log'), 'a') as f:
                f.write(cid + '\n')
            win = {}
            for line in ari.splitlines():
                k, a, b, r = line.split()
                win[k] = (int(a), int(b), int(r))
            start, end, retry = win.get(cid, win.get('*'))
            body = json.dumps({'suggestedWindow': {
                'start': iso(start), 'end': iso(end)}}).encode()
            return self.answer(200, [('Content-Type', 'application/json'),
                                     ('Retry-After', str(retry))], body)
        n = int(self.headers.get('Content-Length') or 0)
        data = self.rfile.read(n) if n else None
        c = http.client.HTTPSConnection('127.0.0.1', pport, context=up_ctx,
                                        timeout=30)
        hdrs = {k: v for k, v in self.headers.items()
                if k.lower() in ('content-type',)}
        # pebble checks the JWS url against the URL it was asked: its own
        # host as the client named it, the stub's
        hdrs['Host'] = me
        c.request(self.command, self.path, body=data, headers=hdrs)
        r = c.getresponse()
        body = r.read()
        headers = r.getheaders()
        c.close()
        body = body.replace(them.encode(), me.encode())
        if data and self.path == '/order-plz':
            # what fastd ordered: the JWS payload, decoded
            try:
                pl = json.loads(data)['payload']
                pl += '=' * (-len(pl) % 4)
                with open(os.path.join(d, 'orders.log'), 'a') as f:
                    f.write(base64.urlsafe_b64decode(pl).decode() + '\n')
            except (ValueError, KeyError):
                pass
        if self.path == '/dir':
            profiles = read('profiles')
            if profiles:
                j = json.loads(body)
                j.setdefault('meta', {})['profiles'] = {
                    p: 'a test profile' for p in profiles.split()}
                body = json.dumps(j).encode()
            if ari:
                j = json.loads(body)
                j['renewalInfo'] = 'https://%s/renewal-info/' % me
                body = json.dumps(j).encode()
            if mode == 'bad_json':
                body = b'{"newNonce": "https://' + me.encode() + b'/nonce-plz",'
            elif mode == 'bad_ctype':
                headers = [(k, 'text/html' if k.lower() == 'content-type'
                            else v) for k, v in headers]
            elif mode == 'huge':
                body = b'{' + b' ' * (3 << 20) + b'}'
        if mode == 'other_cert' and any(
                k.lower() == 'content-type' and 'pem-certificate-chain' in v
                for k, v in headers):
            body = read('other.pem').encode() + b'\n'
        self.answer(r.status, headers, body)

    do_GET = do_POST = do_HEAD = forward


srv = http.server.ThreadingHTTPServer(('127.0.0.1', port), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
with open(os.path.join(d, 'ready'), 'w') as f:
    f.write('ok\n')
srv.serve_forever()
