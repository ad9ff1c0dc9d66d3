#!/usr/bin/python3
"""HTTP/3 requests for the tests, through Debian's pycurl on libcurl-gnutls
(built with ngtcp2 and nghttp3): HTTP/3 only (no fallback to TCP).

  h3get.py [--post FILE | --post-unsized FILE] [--streams N] [--cafile CA]
           [--abort-after BYTES] [--timeout-ms MS] [--tcp]
           [--cert CRT --key KEY] [--host HOST] [--resume] HOST:PORT:ADDR URL...

--streams N fetches the URLs N times each, all at once, multiplexed on one
connection (PIPEWAIT). One JSON line per response: status, HTTP version
(30 for HTTP/3), body length and sha256, the header fields, and the
connections libcurl opened for it; a failed transfer prints its curl error.
--post-unsized sends the body without a Content-Length (libcurl reads it
through a callback: a body of unknown length). --abort-after gives up
on a response once that many body bytes came (its
stream is reset), --timeout-ms on a transfer that takes longer.

HOST:PORT:ADDR may be several, comma-separated. For the TLS tests
(tests/http3_tls.t), the same client over TCP too:
--tcp speaks HTTP/1.1 over TLS instead, --cert/--key send a client
certificate, --host a Host header of its own; --resume fetches the URLs
one after the other on one handle, each on a new connection, so that
each offers the session the one before got (TLS session resumption).
Each line then has the serial number (hex) of the server's certificate.
"""
import hashlib
import io
import json
import sys

import pycurl


ABORT_AFTER = None
TIMEOUT_MS = None
TCP = False
CERT = None
HOST = None
UNSIZED = False


def handle(url, resolve, cafile, post, c=None):
    c = c or pycurl.Curl()
    c.body = io.BytesIO()
    c.hdr = io.BytesIO()
    c.setopt(pycurl.URL, url)
    # CURL_HTTP_VERSION_1_1 or CURL_HTTP_VERSION_3ONLY
    c.setopt(pycurl.HTTP_VERSION, 2 if TCP else 31)
    if CERT:
        c.setopt(pycurl.SSLCERT, CERT[0])
        c.setopt(pycurl.SSLKEY, CERT[1])
    if HOST:
        c.setopt(pycurl.HTTPHEADER, ['Host: ' + HOST])
    c.setopt(pycurl.OPT_CERTINFO, 1)
    c.setopt(pycurl.RESOLVE, resolve.split(','))
    if cafile:
        c.setopt(pycurl.CAINFO, cafile)
    else:
        c.setopt(pycurl.SSL_VERIFYPEER, 0)
        c.setopt(pycurl.SSL_VERIFYHOST, 0)
    if ABORT_AFTER is None:
        c.setopt(pycurl.WRITEDATA, c.body)
    else:
        def write(data, body=c.body):
            body.write(data)
            return 0 if body.tell() >= ABORT_AFTER else None
        c.setopt(pycurl.WRITEFUNCTION, write)
    if TIMEOUT_MS:
        c.setopt(pycurl.TIMEOUT_MS, TIMEOUT_MS)
    c.setopt(pycurl.HEADERFUNCTION, c.hdr.write)
    c.setopt(pycurl.PIPEWAIT, 1)
    if not TIMEOUT_MS:
        c.setopt(pycurl.TIMEOUT, 60)
    if post is not None and UNSIZED:
        c.setopt(pycurl.POST, 1)
        c.setopt(pycurl.READFUNCTION, io.BytesIO(post).read)
    elif post is not None:
        c.setopt(pycurl.POSTFIELDS, post)
    return c


def report(c, err=None):
    body = c.body.getvalue()
    headers = {}
    for line in c.hdr.getvalue().decode('latin-1').split('\r\n')[1:]:
        if ':' in line:
            k, v = line.split(':', 1)
            headers[k.strip().lower()] = v.strip()
    out = {'status': c.getinfo(pycurl.RESPONSE_CODE),
           'version': c.getinfo(pycurl.INFO_HTTP_VERSION),
           'length': len(body),
           'sha256': hashlib.sha256(body).hexdigest(),
           'connects': c.getinfo(pycurl.NUM_CONNECTS),
           'headers': headers}
    try:
        for field, value in c.getinfo(pycurl.INFO_CERTINFO)[0]:
            if field == 'Serial Number':
                out['serial'] = '%x' % int(value.replace(':', ''), 16)
    except (pycurl.error, IndexError):
        pass
    if len(body) <= 4096:
        out['body'] = body.decode('latin-1')
    if err:
        out['error'] = err
    print(json.dumps(out), flush=True)


def main(argv):
    global ABORT_AFTER, TIMEOUT_MS, TCP, CERT, HOST, UNSIZED
    post, streams, cafile, resume = None, 0, None, False
    while argv and argv[0].startswith('--'):
        opt = argv.pop(0)
        if opt in ('--post', '--post-unsized'):
            UNSIZED = opt == '--post-unsized'
            with open(argv.pop(0), 'rb') as f:
                post = f.read()
        elif opt == '--streams':
            streams = int(argv.pop(0))
        elif opt == '--cafile':
            cafile = argv.pop(0)
        elif opt == '--abort-after':
            ABORT_AFTER = int(argv.pop(0))
        elif opt == '--timeout-ms':
            TIMEOUT_MS = int(argv.pop(0))
        elif opt == '--tcp':
            TCP = True
        elif opt == '--cert':
            CERT = (argv.pop(0), None)
        elif opt == '--key':
            CERT = (CERT[0], argv.pop(0))
        elif opt == '--host':
            HOST = argv.pop(0)
        elif opt == '--resume':
            resume = True
    resolve, urls = argv[0], argv[1:]
    if resume or not streams:
        c = None
        for url in urls:
            c = handle(url, resolve, cafile, post, c if resume else None)
            if resume:
                c.setopt(pycurl.FRESH_CONNECT, 1)
            try:
                c.perform()
                report(c)
            except pycurl.error as e:
                report(c, str(e))
        return 0
    m = pycurl.CurlMulti()
    m.setopt(pycurl.M_PIPELINING, pycurl.PIPE_MULTIPLEX)
    m.setopt(pycurl.M_MAX_HOST_CONNECTIONS, 1)
    hs = [handle(u, resolve, cafile, post) for u in urls * streams]
    for c in hs:
        m.add_handle(c)
    left = len(hs)
    errors = {}
    while left:
        while m.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        n, ok, failed = m.info_read()
        for c, code, msg in failed:
            errors[id(c)] = msg
        left -= len(ok) + len(failed)
        if left:
            m.select(1.0)
    for c in hs:
        report(c, errors.get(id(c)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
