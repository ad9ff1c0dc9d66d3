#!/bin/bash
# Writes the fuzzers' seed corpora under DIR (default objs/fuzz/seeds):
# DIR/fuzz_NAME/* for each harness in tests/fuzz/. Seeds are text written
# here, not committed files; "make fuzz" runs this first.
#
# The request, response and chunked harnesses read 5 bytes before the
# message: one byte of limits (requests: bits 0-1 max_header_size
# 64/256/1k/8k, bit 2 4 headers at most; responses: bit 0 4 fields at most,
# bit 1 a HEAD request, bit 2 a 256-byte buffer) or output room (chunked),
# and a 4-byte seed for the random splits.
set -eu

cd "$(dirname "$0")/../.."
dir=${1:-objs/fuzz/seeds}

n=0
# seed HARNESS PREFIX TEXT: TEXT is a printf format (\r \n \0 work)
seed() {
    n=$((n + 1))
    mkdir -p "$dir/$1"
    { printf -- "$2"; printf -- "$3"; } > "$dir/$1/seed-$n"
}

# --- requests -----------------------------------------------------------
P='\003\001\002\003\004'    # max_header_size 8k, 100 headers
S='\001\021\042\063\104'    # 256 bytes: limits are reached
G='GET / HTTP/1.1\r\nHost: x\r\n\r\n'
for r in \
    "$G" \
    "$G$G$G" \
    'GET /plaintext HTTP/1.1\r\nHost: localhost\r\nUser-Agent: wrk\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n' \
    'GET /a/b/../c/./d%%2e%%2e/e?x=1&y=%%20 HTTP/1.1\r\nHost: h:80\r\n\r\n' \
    'GET http://example.com:8080/p?q HTTP/1.1\r\nHost: other\r\n\r\n' \
    'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n' \
    'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n' \
    'GET / HTTP/1.0\r\n\r\n' \
    'GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n' \
    'POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello'"$G" \
    'POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'"$G" \
    'POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: CHUNKED\r\n\r\n5;a=b;c="d e"\r\nhello\r\n0\r\nT: 1\r\n\r\n' \
    'POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' \
    'POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n' \
    'POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n' \
    'POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n' \
    'POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello' \
    'POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello' \
    'POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' \
    'GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n' \
    'GET / HTTP/1.1\r\nHost : x\r\n\r\n' \
    'GET / HTTP/1.1\nHost: x\n\n' \
    'GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n' \
    'GET / HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n' \
    'GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n' \
    'GET / HTTP/2.0\r\nHost: x\r\n\r\n' \
    'GET /\r\n' \
    'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' \
    '\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n' \
    'FOO-BAR /x HTTP/1.1\r\nHost: x\r\nIf-None-Match: "a"\r\nRange: bytes=0-1\r\nAccept-Encoding: gzip\r\nReferer: r\r\nContent-Type: t\r\nIf-Modified-Since: d\r\n\r\n'
do
    seed fuzz_http_parse "$P" "$r"
done
seed fuzz_http_parse "$S" "$G$G"
seed fuzz_http_parse "$S" 'GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: x\r\n\r\n'
seed fuzz_http_parse '\007\001\002\003\004' 'GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n'

# --- upstream responses -----------------------------------------------------
R='\000\001\002\003\004'    # 128 fields, GET, 16k buffer
O='HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello'
for r in \
    "$O" \
    "$O$O$O" \
    'HTTP/1.1 200 OK\r\nServer: up\r\nDate: d\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nokHTTP/1.1 204 No Content\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nT: 1\r\n\r\n'"$O" \
    'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n'"$O" \
    'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\201\005hello' \
    'HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>up to the close</html>' \
    'HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n'"$O" \
    'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\nContent-Length: 99\r\n\r\n'"$O" \
    'HTTP/1.1 502 Bad Gateway\r\nConnection: close, x-hop\r\nX-Hop: 1\r\nContent-Length: 0\r\n\r\n' \
    'HTTP/1.1 200\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello' \
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!' \
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nX : a\r\n\r\n' \
    'HTTP/1.1 200 OK\nX: a\n\n' \
    'HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n' \
    'HTTP/1.1 600 Odd\r\n\r\n' \
    'HTTP/2 200\r\n\r\n' \
    'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n'
do
    seed fuzz_http_response "$R" "$r"
done
seed fuzz_http_response '\002\001\002\003\004' 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n'
seed fuzz_http_response '\005\001\002\003\004' 'HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nContent-Length: 0\r\n\r\n'
seed fuzz_http_response '\004\001\002\003\004' 'HTTP/1.1 200 OK\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n'

# --- chunked bodies -------------------------------------------------------
C='\010\001\002\003\004'    # output room 9 bytes
for b in \
    '0\r\n\r\n' \
    '5\r\nhello\r\n0\r\n\r\n' \
    '5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET' \
    'a;name=value\r\n0123456789\r\n0\r\n\r\n' \
    '3;q="a \\" b";x\r\nabc\r\n0 ;last\r\nTrailer: v\r\nT2: w\r\n\r\n' \
    'fffffffffffffffff\r\n' \
    '5\r\nhelloXX0\r\n\r\n' \
    '5\nhello\n0\n\n' \
    '-5\r\nhello\r\n0\r\n\r\n' \
    '0000000000000005\r\nhello\r\n0\r\n\r\n' \
    '10\r\n0123456789abcdef\r\n0\r\n\r\n'
do
    seed fuzz_chunked "$C" "$b"
done
seed fuzz_chunked '\300\001\002\003\004' '40\r\n0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n0\r\n\r\n'

# --- the whole request path ----------------------------------------------------
# fuzz_request reads 8 bytes before the client's bytes: 3 that choose the
# configuration (see tests/fuzz/fuzz_request.c), one for how the bytes
# travel, one more bit of configuration (websocket) and the pieces' seed; then "\n--UPSTREAM--\n" and what
# the upstream answers. The configurations here are each proxy form with
# the defaults (proxy_host = pass), proxy_host = upstream, and a few with
# headers, gzip, the access log, keep-alive and retries; the requests are
# ordinary ones, origin-form and absolute-form.
U='\n--UPSTREAM--\n'
OK='HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello'
rq() { # CONFIG(4 bytes: the last is how the bytes travel) BYTE4 REQUEST RESPONSE
    n=$((n + 1))
    mkdir -p "$dir/fuzz_request"
    { printf -- "$1$2\001\002\003"; printf -- "$3"; printf -- "$U"; printf -- "$4"; } \
        > "$dir/fuzz_request/seed-$n"
}
for c in '\000' '\004' '\010' '\014' '\020' '\024' '\030' '\034' '\001' '\102' '\203'; do
    rq "$c"'\000\000\000' '\000' 'GET /up/x?q=1 HTTP/1.1\r\nHost: a.example\r\nUser-Agent: t\r\n\r\n' "$OK"
done
rq '\040\000\000\000' '\000' 'GET /up/x HTTP/1.1\r\nHost: a.example\r\n\r\n' "$OK"
rq '\040\017\000\001' '\000' 'GET /up/a/b HTTP/1.1\r\nHost: a.example\r\nX-Forwarded-For: 10.1.1.1\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n' "$OK"
rq '\000\000\000\000' '\000' 'GET http://a.example/up/x HTTP/1.1\r\nHost: a.example\r\n\r\n' "$OK"
rq '\004\000\000\000' '\000' 'GET http://a.example:8080/up/x?y=1 HTTP/1.1\r\nHost: b\r\n\r\n' "$OK"
rq '\040\000\000\000' '\000' 'GET http://a.example/up/x HTTP/1.1\r\nHost: a.example\r\n\r\n' "$OK"
rq '\000\000\000\005' '\000' 'POST /up/p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello' "$OK"
rq '\010\000\001\004' '\000' 'POST /up/p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /up/2 HTTP/1.1\r\nHost: a\r\n\r\n' "$OK$OK"
rq '\010\000\022\000' '\000' 'PUT /up/p HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc' 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n'
rq '\000\000\000\000' '\001' 'GET /up/ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\201\005hello' 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\201\002ok'
rq '\000\060\000\001' '\000' 'GET /up/big HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n' 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n'
rq '\000\240\000\001' '\000' 'HEAD /up/h HTTP/1.1\r\nHost: a\r\n\r\nGET /up/2 HTTP/1.0\r\n\r\n' 'HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<p>up to the close</p>'
rq '\000\000\001\020' '\000' 'GET /up/k HTTP/1.1\r\nHost: a\r\n\r\nGET /up/k2 HTTP/1.1\r\nHost: a\r\n\r\n' 'HTTP/1.1 304 Not Modified\r\nETag: "a"\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n'
rq '\000\000\000\000' '\000' 'GET /up/bad HTTP/1.1\r\nHost: a\r\n\r\n' 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
rq '\000\000\000\000' '\000' 'GET /up/e HTTP/1.1\r\nHost: a\r\n\r\n' 'HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n'
rq '\010\000\006\000' '\000' 'DELETE /up/d HTTP/1.1\r\nHost: a\r\nX-Key: k\r\n\r\n' "$OK"
rq '\000\000\200\000' '\000' 'GET /up/q HTTP/1.1\r\nHost: a\r\n\r\n' "$OK"
rq '\000\000\000\000' '\000' 'GET /rw/x?q=1 HTTP/1.1\r\nHost: a\r\n\r\n' "$OK"
rq '\000\060\000\000' '\000' 'GET /ret/x?a=b HTTP/1.1\r\nHost: a.example\r\n\r\nGET /rx/abc/12 HTTP/1.1\r\nHost: a\r\n\r\nGET /text?a=b HTTP/1.1\r\nHost: h\r\n\r\n' ''
rq '\000\160\000\000' '\000' 'GET /static/a.txt HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\nGET /static/ HTTP/1.1\r\nHost: a\r\nRange: bytes=0-3\r\n\r\nGET /static/nope HTTP/1.1\r\nHost: a\r\n\r\n' ''
rq '\000\040\000\000' '\000' 'GET /plaintext HTTP/1.1\r\nHost: a\r\n\r\nGET /json HTTP/1.1\r\nHost: a\r\n\r\nGET /status HTTP/1.1\r\nHost: a\r\nAccept: application/json\r\n\r\nGET /deny HTTP/1.1\r\nHost: a\r\n\r\n' ''
# byte 4: add_header, expires and the proxy's header rules; alias
# locations; the PROXY protocol; the real address from X-Forwarded-For
rq '\000\000\000\000' '\004' 'GET /up/r?a=1 HTTP/1.1\r\nHost: a.example\r\nX-Key: k\r\n\r\nGET /text HTTP/1.1\r\nHost: a\r\n\r\n' 'HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1/up/x\r\nRefresh: 0; url=http://127.0.0.1/\r\nX-Hide: 1\r\nServer: up\r\nContent-Length: 0\r\n\r\n'
rq '\000\000\000\000' '\010' 'GET /al/a.txt HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\nGET /al/sub/ HTTP/1.1\r\nHost: a\r\n\r\nGET /ar/b.json HTTP/1.1\r\nHost: a\r\n\r\nGET /ar/../conf/fuzz.conf HTTP/1.1\r\nHost: a\r\n\r\n' ''
rq '\000\000\000\000' '\010' 'GET /spa/deep/link HTTP/1.1\r\nHost: a\r\n\r\nGET /spa/a.txt HTTP/1.1\r\nHost: a\r\n\r\nGET /tf/x?y=1 HTTP/1.1\r\nHost: a\r\n\r\nGET /loop/z HTTP/1.1\r\nHost: a\r\n\r\nGET /code/?x=../../etc HTTP/1.1\r\nHost: a\r\n\r\n' "$OK"
rq '\000\000\000\000' '\110' 'GET /al/ HTTP/1.1\r\nHost: a\r\nAccept: application/json\r\n\r\nGET /al/%2e%2e/ HTTP/1.1\r\nHost: a\r\n\r\n' ''
rq '\010\000\000\000' '\020' 'PROXY TCP4 192.0.2.1 127.0.0.1 1234 80\r\nGET /up/x HTTP/1.1\r\nHost: a\r\n\r\n' "$OK"
rq '\010\000\000\000' '\020' '\r\n\r\n\000\r\nQUIT\n\041\021\000\014\300\000\002\001\177\000\000\001\004\322\000\120GET /up/v2 HTTP/1.1\r\nHost: a\r\n\r\n' "$OK"
rq '\000\000\000\000' '\044' 'GET /up/f HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9, 10.0.0.1, 127.0.0.1\r\n\r\n' "$OK"
rq '\000\000\000\000' '\140' 'GET /up/f HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: bad, ::1, 127.0.0.2\r\n\r\n' "$OK"

# HTTP/2 (byte 4 bit 1): frames [type][flags][stream][length][payload];
# type bit 6 makes the stream 2n+1, a HEADERS payload is "name: value"
# lines (tests/fuzz/fuzz_request.c)
fr() { # TYPE FLAGS STREAM PAYLOAD: one frame record, its length counted
    printf -- "$1$2$3"
    printf "\\$(printf %03o "$(printf -- "$4" | wc -c)")"
    printf -- "$4"
}
h2() { # NAME CONFIG RESPONSE, the frames (made by fr) on stdin: a pipe's
    # subshell, so the name is given rather than counted
    mkdir -p "$dir/fuzz_request"
    { printf -- "$2\002\001\002\003"; cat; printf -- "$U"; printf -- "$3"; } \
        > "$dir/fuzz_request/seed-$1"
}
fr '\101' '\005' '\000' ':path: /plaintext' | h2 h2-1 '\000\000\000\000' ''
{ fr '\101' '\005' '\000' ':path: /up/x?q=1\nuser-agent: t\ncookie: a=1\ncookie: b=2'
  fr '\101' '\005' '\001' ':path: /json'
  fr '\101' '\005' '\002' ':path: /static/a.txt\naccept-encoding: gzip'
  fr '\101' '\005' '\003' ':path: /static/\nrange: bytes=0-3'; } \
    | h2 h2-2 '\000\020\000\000' "$OK"
{ fr '\101' '\004' '\000' ':method: POST\n:path: /up/p\ncontent-length: 5'
  fr '\100' '\001' '\000' 'hello'; } | h2 h2-3 '\000\000\000\000' "$OK"
{ fr '\101' '\004' '\000' ':method: POST\n:path: /up/p'
  fr '\100' '\000' '\000' 'hel'
  fr '\100' '\001' '\000' 'lo'; } | h2 h2-4 '\000\000\000\000' "$OK"
{ fr '\101' '\005' '\000' ':path: /up/slow'
  fr '\103' '\000' '\000' '\000\000\000\010'
  fr '\101' '\005' '\001' ':path: /plaintext'; } | h2 h2-5 '\000\000\000\000' "$OK"
{ fr '\101' '\001' '\000' ':path: /up/c'
  fr '\011' '\004' '\001' 'x-a: b'
  fr '\006' '\000' '\000' '12345678'
  fr '\010' '\000' '\000' '\177\377\377\377'
  fr '\004' '\000' '\000' '\000\004\000\000\000\000'
  fr '\107' '\000' '\000' '\000\000\000\000\000\000\000\000'; } \
    | h2 h2-6 '\000\000\000\000' "$OK"

# --- PROXY protocol headers (no prefix bytes) -----------------------------
seed fuzz_proxy_protocol '' 'PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\nGET / HTTP/1.1\r\n\r\n'
seed fuzz_proxy_protocol '' 'PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n'
seed fuzz_proxy_protocol '' 'PROXY UNKNOWN\r\n'
seed fuzz_proxy_protocol '' 'PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n\026\003\001'
seed fuzz_proxy_protocol '' '\r\n\r\n\0\r\nQUIT\n\041\021\000\014\300\000\002\001\177\000\000\001\021\134\000\120'
seed fuzz_proxy_protocol '' '\r\n\r\n\0\r\nQUIT\n\041\021\000\021\300\000\002\001\177\000\000\001\021\134\000\120\004\000\002hi'
seed fuzz_proxy_protocol '' '\r\n\r\n\0\r\nQUIT\n\040\000\000\000'
seed fuzz_proxy_protocol '' '\r\n\r\n\0\r\nQUIT\n\041\041\000\044\040\001\015\270\000\000\000\000\000\000\000\000\000\000\000\001\040\001\015\270\000\000\000\000\000\000\000\000\000\000\000\002\004\000\001\273'

# --- FastCGI response records -------------------------------------------------
# (4 bytes of split seed, then records: version 1, type, request id 1,
# content length, padding length, reserved)
F='\001\002\003\004'
E='\001\003\000\001\000\010\000\000\000\000\000\000\000\000\000\000'
seed fuzz_fastcgi "$F" '\001\006\000\001\000\037\000\000Content-Type: text/plain\r\n\r\nhi'"$E"
seed fuzz_fastcgi "$F" '\001\007\000\001\000\005\003\000oops\n\000\000\000\001\006\000\001\000\000\000\000'"$E"
seed fuzz_fastcgi "$F" '\001\006\000\001\000\004\004\000Stat\000\000\000\000\001\006\000\001\000\002\000\000us'"$E"'\001\006\000\001\000\001\000\000x'
seed fuzz_fastcgi "$F" '\002\006\000\001\000\001\000\000x'
seed fuzz_fastcgi "$F" '\001\003\000\001\000\007\000\000\000\000\000\000\000\000\000'

# --- configurations ---------------------------------------------------------
mkdir -p "$dir/fuzz_conf"
cp conf/fastd.conf "$dir/fuzz_conf/fastd.conf"
for f in conf/profiles/*.conf; do
    [ -f "$f" ] && cp "$f" "$dir/fuzz_conf/profile-${f##*/}"
done
seed fuzz_conf '' '[main]\ndaemon = off\nworkers = 2\npid = off\nerror_log = stderr\nrlimit_nofile = 1024\nshutdown_timeout = 1m30s\n[events]\nmax_connections = 100\naccept = exclusive\nedge_triggered = off\n[http]\nkeepalive_timeout = 75s\nmax_header_size = 8k\nmax_headers = 50\n[server]\nlisten = 127.0.0.1:8080 default\nserver_name = a.example *.b.example c.*\nroot = html\nindex = index.html\nerror_page = 404 /404.html\n[location = /x]\nhandler = plaintext\n[location /p]\nhandler = json\nmax_body_size = 1k\n[location ~ ^/r/(\\d+)$]\nhandler = plaintext\n[location ~* \\.JPG$]\nfollow_symlinks = on\n'
seed fuzz_conf '' '[main]\npid = off\nprofile = fast\n[server]\nlisten = 127.0.0.1:1\n[location /api/]\nhandler = proxy\nupstream = app\nqueue = q\nnext_upstream = error timeout http_502\nconnect_timeout = 1s\nset_header = X-A: b\n[upstream app]\nserver = 127.0.0.1:3000 weight=2\nserver = 127.0.0.1:3001 max_fails=3 fail_timeout=10s backup\nbalance = least_conn\nkeepalive = 8\n[queue q]\nmax_concurrent = 2\nqueue_limit = 4\norder = lifo\nqueue_timeout = 1s\n[offload]\nthreads = 2\n[profile fast]\nevents.read_until_eagain = off\nqueue.q.max_concurrent = 10\nhttp.inline_completions = off\n'
seed fuzz_conf '' '[main]\npid = off\n[server]\nlisten = 127.0.0.1:1\n[location /a]\nreturn = 301 http://x/$1\nrewrite = ^/a/(.*)$ /b/$1 last\nallow = 127.0.0.0/8\ndeny = all\ngzip = on\ngzip_types = text/plain application/json\naccess_log = off\n[location /b]\nhandler = proxy\npass = http://127.0.0.1:9/x\n[location /c]\nhandler = delay\ndelay = 10ms\n'
seed fuzz_conf '' '[main]\npid = off\n[server]\nlisten = 127.0.0.1:1\n[server]\nlisten = [::1]:2\nunknown = 1\n'
seed fuzz_conf '' '[main]\npid = off\n[server\nlisten 127.0.0.1:1\n'

# --- ClientHellos (ssl_preread) ---------------------------------------------
# real ones, from python's ssl client (memory BIOs): with SNI and ALPN,
# without, and re-framed over small records
mkdir -p "$dir/fuzz_preread"
/usr/bin/python3 - "$dir/fuzz_preread" <<'PY' || true
import ssl, sys
def hello(sni, alpn):
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    if alpn:
        c.set_alpn_protocols(alpn)
    i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    s = c.wrap_bio(i, o, server_hostname=sni)
    try:
        s.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return o.read()
def reframe(h, k):
    body, out = h[5:], b""
    for a in range(0, len(body), k):
        part = body[a:a + k]
        out += bytes([22, 3, 1, len(part) >> 8, len(part) & 255]) + part
    return out
seeds = [hello("app.example.com", ["h2", "http/1.1"]), hello(None, None),
         reframe(hello("x.test", ["h2"]), 50)]
for n, b in enumerate(seeds):
    open("%s/hello-%d" % (sys.argv[1], n), "wb").write(b)
PY

# --- QUIC and HTTP/3 (fuzz_quic: the modes are in its header) ---------------
mkdir -p "$dir/fuzz_quic"
/usr/bin/python3 - "$dir/fuzz_quic" <<'PY' || true
import struct, sys
out = sys.argv[1]
seed = b"\x11\x22\x33\x44"
def rec(b): return struct.pack(">H", len(b)) + b
def op(o, b): return bytes([o]) + struct.pack(">H", len(b)) + b
def vi(v):
    if v < 64: return bytes([v])
    if v < 16384: return struct.pack(">H", 0x4000 | v)
    return struct.pack(">I", 0x80000000 | v)
def frame(t, p): return vi(t) + vi(len(p)) + p
def long_hdr(version, dcid, scid, rest):
    return bytes([0xc0]) + struct.pack(">I", version) + bytes([len(dcid)]) \
        + dcid + bytes([len(scid)]) + scid + rest
def pad(b): return b + b"\0" * max(0, 1200 - len(b))
GET = b":method: GET\n:scheme: https\n:authority: localhost\n"
seeds = {
  # raw datagrams: an unknown version (Version Negotiation), a short
  # header for a gone connection of this worker (a stateless reset), an
  # Initial with a Retry token and one with a NEW_TOKEN one, not ours,
  # a truncated long header
  "vn": b"\0" + seed + rec(pad(long_hdr(0x1a2a3a4a, b"D" * 8, b"S" * 8, b""))),
  "reset": b"\x40" + seed + rec(b"\x41" + b"\0" * 17 + b"r" * 40),
  "retry-token": b"\x04" + seed + rec(pad(long_hdr(1, b"D" * 18, b"S" * 8,
      vi(40) + b"\xb7" + b"t" * 39 + vi(60) + b"\0" * 60))),
  "new-token": b"\0" + seed + rec(pad(long_hdr(1, b"D" * 8, b"S" * 8,
      vi(40) + b"\x36" + b"t" * 39 + vi(60) + b"\0" * 60))),
  "short": b"\0" + seed + rec(b"\xc0\0\0\0\1\x08DDDD"),
  # Initials: the real ClientHello alone, then with frames after it, to
  # the quic_retry address (the Retry, then its token), of the input's
  # own (a CRYPTO frame that is not TLS, ACK, PING, CONNECTION_CLOSE)
  "hello": b"\x09" + seed,
  "hello-retry": b"\x0d" + seed,
  # with a NEW_TOKEN token of the worker's: no Retry, no amplification limit
  "hello-newtoken": b"\x49" + seed,
  "hello-newtoken-retry": b"\x4d" + seed + rec(b"\x01"),
  "hello-ping": b"\x09" + seed + rec(b"\x01") + rec(b"\x02\x00\x00\x00\x00"),
  "hello-close": b"\x09" + seed + rec(b"\x1c\x0a\x06\x03bye"),
  "crypto": b"\x01" + seed + rec(b"0123456789abcdef")
      + rec(b"\x06\x00\x10" + b"\x16\x03\x03\x00\x0c" + b"\x01" * 11)
      + rec(b"\x06\x40\x10\x04" + b"\x01" * 4),
  "crypto-nopad": b"\x11" + seed + rec(b"0123456789") + rec(b"\x01"),
  # HTTP/3: SETTINGS on the control stream, then requests
  "get": b"\x02" + seed + op(1, frame(4, b"")) + op(0x24, GET + b":path: /index.html\n"),
  "get-retry": b"\x06" + seed + op(1, frame(4, b"")) + op(0x24, GET + b":path: /a.txt\naccept-encoding: gzip\n"),
  "plaintext": b"\x02" + seed + op(1, frame(4, vi(1) + vi(0) + vi(7) + vi(0)))
      + op(0x24, GET + b":path: /plaintext\nuser-agent: fuzz\n")
      + op(0x2c, GET + b":path: /status\n")
      + op(0x34, GET + b":path: /up/x?a=1\n"),
  "post": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x20, b":method: POST\n:scheme: https\n:authority: localhost\n:path: /up/p\ncontent-length: 5\n")
      + op(0x04, frame(0, b"hello")),
  # a body over max_body_size, its length not said; a Content-Length the
  # DATA does not match; trailers; a response larger than the client's
  # windows, and one paced by limit_rate; CONNECT; a bad :path
  "post-big": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x20, b":method: POST\n:scheme: https\n:authority: localhost\n:path: /small/x\n")
      + op(0x00, frame(0, b"x" * 100)) + op(0x04, frame(0, b"y" * 10)),
  "post-cl": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x20, b":method: POST\n:scheme: https\n:authority: localhost\n:path: /small/x\ncontent-length: 3\n")
      + op(0x00, frame(0, b"abcd")) + op(0x24, b"x-trailer: 1\n"),
  "big": b"\x02" + seed + op(1, frame(4, b"")) + op(0x24, GET + b":path: /big.txt\n")
      + op(0x2c, GET + b":path: /rated/big.txt\nrange: bytes=3-40000\n"),
  "connect": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x24, b":method: CONNECT\n:authority: localhost:443\n")
      + op(0x2c, GET + b":path: ../x\nhost: other\ncookie: a=1\ncookie: b=2\n"),
  # the proxy to the harness's upstream: a streamed upload answered at
  # once, a request held while its stream is reset, one held while the
  # connection ends (silent, or closed by the client), one held through a
  # graceful stop
  "echo-post": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x20, b":method: POST\n:scheme: https\n:authority: localhost\n:path: /echo/p\n")
      + op(0x00, frame(0, b"a" * 300)) + op(0x04, frame(0, b"b" * 30)),
  "hold-reset": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x64, GET + b":path: /hold/x\n"),
  "hold-gone": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x24, GET + b":path: /hold/y\n") + op(0x2c, GET + b":path: /echo/z\n"),
  "hold-close": b"\x42" + seed + op(1, frame(4, b""))
      + op(0x24, GET + b":path: /hold/c\n"),
  "hold-quit": b"\x02" + seed + op(1, frame(4, b""))
      + op(0xa4, GET + b":path: /hold/q\n") + op(0x2c, GET + b":path: /plaintext\n"),
  "stream-reset": b"\x02" + seed + op(1, frame(4, b""))
      + op(0x20, GET + b":path: /a.txt\n") + op(0x40, b""),
  "qpack": b"\x02" + seed + op(1, frame(4, vi(1) + vi(4096)))
      + op(2, b"\x3f\xe1\x1f" + b"\x4a" + b"x-custom-k" + b"\x01v")
      + op(0x04, frame(1, b"\x02\x00\xd1\xd7\x50\x09localhost\xc1\x80")),
  "goaway": b"\x02" + seed + op(1, frame(4, b"") + frame(7, vi(0))),
  "data-first": b"\x02" + seed + op(1, frame(4, b"")) + op(0x04, frame(0, b"x")),
}
for name, b in seeds.items():
    open("%s/%s" % (out, name), "wb").write(b)
PY

echo "seeds written to $dir ($n text seeds)"
