#!/usr/bin/python3
"""HTTP/3 requests for the tests, through Debian's pycurl on libcurl-gnutls
(built with ngtcp2 and nghttp3): HTTP/3 only (no fallback to TCP).

  h3get.py [--post FILE] [--streams N] [--cafile CA] [--abort-after BYTES]
           [--timeout-ms MS] HOST:PORT:ADDR URL...

--streams N fetches the URLs N times each, all at once, multiplexed on one
connection (PIPEWAIT). One JSON line per response: status, HTTP version
(30 for HTTP/3), body length and sha256, the header fields, and the
connections libcurl opened for it; a failed transfer prints its curl error.
--abort-after gives up on a response once that many body bytes came (its
stream is reset), --timeout-ms on a transfer that takes longer.
"""
import hashlib
import io
import json
import sys

import pycurl


ABORT_AFTER = None
TIMEOUT_MS = None


def handle(url, resolve, cafile, post):
    c = pycurl.Curl()
    c.body = io.BytesIO()
    c.hdr = io.BytesIO()
    c.setopt(pycurl.URL, url)
    c.setopt(pycurl.HTTP_VERSION, 31)  # CURL_HTTP_VERSION_3ONLY
    c.setopt(pycurl.RESOLVE, [resolve])
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
    if post is not None:
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
    if len(body) <= 4096:
        out['body'] = body.decode('latin-1')
    if err:
        out['error'] = err
    print(json.dumps(out), flush=True)


def main(argv):
    global ABORT_AFTER, TIMEOUT_MS
    post, streams, cafile = None, 0, None
    while argv and argv[0].startswith('--'):
        opt = argv.pop(0)
        if opt == '--post':
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
    resolve, urls = argv[0], argv[1:]
    if not streams:
        for url in urls:
            c = handle(url, resolve, cafile, post)
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
