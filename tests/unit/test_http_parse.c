/* Unit tests: the request parser, the upstream response parser, the chunked
 * decoder, path normalising. */
#include "fd_core.h"
#include "fd_http_parse.h"
#include "tap.h"

static fd_pool_t *pool;

/* Parse msg whole; returns the parser's answer. */
static int parse(const char *msg, fd_http_req_t *p)
{
    fd_pool_clear(pool);
    fd_http_parse_init(p, pool, 8192, 100);
    p->version = 11;
    return fd_http_parse_request(p, msg, strlen(msg));
}

/* Parse msg fed one byte at a time: every split must give one answer. */
static int parse_bytewise(const char *msg, fd_http_req_t *p)
{
    size_t n = strlen(msg), i;
    int rc = FD_AGAIN;

    fd_pool_clear(pool);
    fd_http_parse_init(p, pool, 8192, 100);
    for (i = 1; i <= n && rc == FD_AGAIN; i++)
        rc = fd_http_parse_request(p, msg, i);
    return rc;
}

static void rejects(const char *msg, int status, const char *name)
{
    fd_http_req_t p;

    is_int(parse(msg, &p), status, "%s", name);
    is_int(parse_bytewise(msg, &p), status, "%s (byte by byte)", name);
}

static void test_requests(void)
{
    fd_http_req_t p;
    const char *get = "GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\n"
                      "User-Agent: t\r\nConnection: keep-alive, Upgrade\r\n"
                      "\r\nGET /next";

    is_int(parse(get, &p), FD_OK, "simple GET");
    is_int(p.method_id, FD_HTTP_GET, "method");
    is_strn(p.path_raw.data, p.path_raw.len, "/a/b", "path");
    is_strn(p.query.data, p.query.len, "x=1", "query");
    is_strn(p.host.data, p.host.len, "example.com", "host");
    is_int(p.version, 11, "version");
    is_int(p.nheaders, 3, "three headers");
    ok(p.conn_keepalive && p.conn_upgrade && !p.conn_close, "Connection list");
    is_int(p.header_len, strlen(get) - strlen("GET /next"),
           "header_len stops at the end of the header");
    is_int(parse_bytewise(get, &p), FD_OK, "byte by byte");
    is_strn(p.host.data, p.host.len, "example.com", "host, byte by byte");

    is_int(parse("GET / HTTP/1.1\r\nHost: x\r\n", &p), FD_AGAIN,
           "incomplete header: again");
    is_int(parse("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", &p), FD_OK,
           "one leading empty line is ignored");
    is_int(parse("POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\n\r\n",
                 &p), FD_OK, "POST with a length");
    is_int(p.content_length, 42, "Content-Length value");
    is_int(parse("POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                 "Chunked\r\n\r\n", &p), FD_OK, "chunked (any case)");
    ok(p.chunked, "chunked flag");
    is_int(parse("GET http://h.example:8/p?q HTTP/1.1\r\nHost: other\r\n\r\n",
                 &p), FD_OK, "absolute-form");
    is_strn(p.host.data, p.host.len, "h.example:8", "absolute-form host wins");
    is_strn(p.path_raw.data, p.path_raw.len, "/p", "absolute-form path");
    is_int(parse("GET / HTTP/1.0\r\n\r\n", &p), FD_OK, "HTTP/1.0 needs no Host");
    is_int(p.version, 10, "version 1.0");
    is_int(parse("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", &p), FD_OK,
           "OPTIONS *");
    is_int(parse("GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
                 &p), FD_OK, "Expect: 100-continue");
    ok(p.expect_continue, "expect flag");
}

static void test_rejections(void)
{
    rejects("GET / HTTP/1.1\r\n\r\n", 400, "HTTP/1.1 without Host");
    rejects("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "two Host");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
            "Transfer-Encoding: chunked\r\n\r\n", 400, "CL and TE");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
            "Content-Length: 2\r\n\r\n", 400, "two Content-Length");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", 400,
            "Content-Length with a sign");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", 400,
            "Content-Length with a space");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999"
            "\r\n\r\n", 400, "Content-Length overflow");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
            501, "unknown coding");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip"
            "\r\n\r\n", 400, "chunked not last");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
            "Transfer-Encoding: chunked\r\n\r\n", 400, "chunked twice");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n",
            501, "xchunked");
    /* BWS around ';' is a space or a tab: the same answer for both */
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: deflate ;"
            "\r\n\r\n", 501, "a coding, space, ';'");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: deflate\t;"
            "\r\n\r\n", 501, "a coding, tab, ';'");
    rejects("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x;\tq=1, "
            "chunked\r\n\r\n", 501, "a tab after ';'");
    rejects("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
            "TE in HTTP/1.0");
    rejects("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400, "space before colon");
    rejects("GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400, "obs-fold");
    rejects("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, "bare CR");
    rejects("GET / HTTP/1.1\nHost: a\n\n", 400, "bare LF");
    rejects("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "HTTP/2.0");
    rejects("GET / HTTP/1.x\r\nHost: a\r\n\r\n", 400, "bad version");
    rejects("GET /\r\n\r\n", 400, "HTTP/0.9");
    rejects("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "two spaces");
    rejects("GET /a#f HTTP/1.1\r\nHost: a\r\n\r\n", 400, "fragment");
    rejects("GET a HTTP/1.1\r\nHost: a\r\n\r\n", 400, "relative target");
    rejects("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "non-token method");
    rejects("GET / HTTP/1.1\r\nX Y: a\r\n\r\n", 400, "space in a name");
    rejects("GET / HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n", 417,
            "unknown expectation");
    rejects("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, "HTTP/2 preface");
    {
        char big[9000];
        fd_http_req_t p;
        memset(big, 'a', sizeof(big));
        memcpy(big, "GET /", 5);
        big[sizeof(big) - 1] = '\0';
        is_int(parse(big, &p), 414, "request line over the limit: 414");
        memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
        is_int(parse(big, &p), 431, "header over the limit: 431");
    }
    {
        char many[4096] = "GET / HTTP/1.1\r\nHost: a\r\n";
        fd_http_req_t p;
        for (int i = 0; i < 120; i++)
            strcat(many, "X-A: b\r\n");
        strcat(many, "\r\n");
        is_int(parse(many, &p), 431, "too many headers: 431");
    }
}

/* --- upstream responses --- */

static fd_http_header_t resp_fields[8];

/* Find the end of msg and parse the header; the error text, or NULL when
 * accepted. Fed byte by byte, the end must be found at the same place, or
 * a bare LF refused sooner (whole, the same LF is refused by the parse). */
static const char *resp(const char *msg, fd_http_resp_t *rs)
{
    size_t n = strlen(msg), scan = 0, hlen = 0, hlen1 = 0, i;
    const char *err = NULL, *err1 = NULL;
    int rc, rc1 = FD_AGAIN;

    *rs = (fd_http_resp_t){.fields = resp_fields,
                           .max_fields = fd_nelems(resp_fields)};
    rc = fd_http_parse_response_end(msg, n, &scan, &hlen, &err);
    if (rc == FD_OK && fd_http_parse_response(rs, msg, hlen, &err) != FD_OK)
        rc = FD_ERROR;
    scan = 0;
    for (i = 1; i <= n && rc1 == FD_AGAIN; i++)
        rc1 = fd_http_parse_response_end(msg, i, &scan, &hlen1, &err1);
    if ((rc1 == FD_ERROR && rc != FD_ERROR) ||
        (rc1 == FD_OK && rc != FD_ERROR && hlen1 != hlen) ||
        (rc1 == FD_AGAIN && rc != FD_AGAIN))
        return "a different answer byte by byte";
    if (rc == FD_AGAIN)
        return "incomplete";
    return rc == FD_OK ? NULL : err;
}

/* The end of a header that arrives a byte at a time. */
static const char *resp_end_bytewise(const char *msg)
{
    size_t n = strlen(msg), scan = 0, hlen, i;
    const char *err = NULL;
    int rc = FD_AGAIN;

    for (i = 1; i <= n && rc == FD_AGAIN; i++)
        rc = fd_http_parse_response_end(msg, i, &scan, &hlen, &err);
    return rc == FD_ERROR ? err : rc == FD_OK ? "found" : "incomplete";
}

static void resp_rejects(const char *msg, const char *why, const char *name)
{
    fd_http_resp_t rs;
    const char *err = resp(msg, &rs);

    is_str(err ? err : "accepted", why, "response: %s", name);
}

static void test_responses(void)
{
    fd_http_resp_t rs;
    const char *ok200 = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        "Content-Length:  12 \r\nConnection: x-a, close\r\n"
                        "X-A: 1\r\n\r\nhello world\n";

    ok(resp(ok200, &rs) == NULL, "response: 200 with a length");
    is_int(rs.version, 11, "version 1.1");
    is_int(rs.status, 200, "status");
    is_int(rs.nfields, 4, "four fields");
    is_strn(rs.fields[1].name.data, rs.fields[1].name.len, "Content-Length",
            "field name");
    is_strn(rs.fields[1].value.data, rs.fields[1].value.len, "12",
            "field value without its spaces");
    is_int(rs.content_length, 12, "Content-Length value");
    ok(!rs.chunked && rs.conn_close && !rs.conn_keepalive, "close, no TE");
    is_int(rs.ntok, 2, "two Connection tokens");
    is_strn(rs.conn_tok[0].data, rs.conn_tok[0].len, "x-a", "first token");
    is_int(rs.fields[3].value.data + 5 - ok200, strlen(ok200) - 12,
           "the header ends after its blank line");

    ok(resp("HTTP/1.0 404 Not Found\r\nConnection: Keep-Alive\r\n"
            "Transfer-Encoding: CHUNKED\r\n\r\n", &rs) == NULL,
       "response: 1.0, keep-alive, chunked (any case)");
    ok(rs.version == 10 && rs.status == 404 && rs.chunked &&
       rs.conn_keepalive && !rs.conn_close && rs.content_length == -1,
       "1.0 response fields");
    ok(resp("HTTP/1.1 204\r\n\r\n", &rs) == NULL && rs.status == 204 &&
       rs.nfields == 0, "response: no reason phrase, no fields");
    ok(resp("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            "Connection: upgrade\r\n\r\n", &rs) == NULL,
       "response: 101");
    is_strn(rs.upgrade.data, rs.upgrade.len, "websocket", "Upgrade value");
    ok(resp("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n"
            "\r\n", &rs) == NULL && rs.content_length == 5,
       "response: the same Content-Length twice");
    ok(resp("HTTP/1.1 100 Continue\r\nContent-Length: 1\r\n"
            "Transfer-Encoding: chunked\r\n\r\n", &rs) == NULL &&
       rs.status == 100 && rs.content_length == -1 && !rs.chunked,
       "response: interim 1xx, its framing fields ignored");
    ok(resp("HTTP/1.1 200 OK\r\nX: a\tb\r\n\r\n", &rs) == NULL,
       "response: tab in a value");
    is_str(resp("HTTP/1.1 200 OK\r\nX: a\r\n", &rs), "incomplete",
           "response: no blank line yet");

    resp_rejects("HTTP/1.1 20 OK\r\n\r\n", "sent an invalid status line",
                 "two-digit status");
    resp_rejects("HTTP/1.1 600 X\r\n\r\n", "sent an invalid status line",
                 "status 600");
    resp_rejects("HTTP/1.1 099 X\r\n\r\n", "sent an invalid status line",
                 "status 099");
    resp_rejects("HTTP/2.0 200 OK\r\n\r\n", "sent an invalid status line",
                 "HTTP/2.0");
    resp_rejects("HTTP/1.2 200 OK\r\n\r\n", "sent an invalid status line",
                 "HTTP/1.2");
    resp_rejects("http/1.1 200 OK\r\n\r\n", "sent an invalid status line",
                 "lower-case version");
    resp_rejects("HTTP/1.1 200OK\r\n\r\n", "sent an invalid status line",
                 "no space after the status");
    resp_rejects("HTTP/1.1 200 O\x01K\r\n\r\n", "sent an invalid status line",
                 "control character in the reason");
    resp_rejects("\n\r\n\r\n", "sent a bare LF in the header", "LF first");
    resp_rejects("HTTP/1.1 200 OK\nX: a\r\n\r\n",
                 "sent a bare LF in the header", "bare LF in the status line");
    is_str(resp_end_bytewise("HTTP/1.1 200 OK\nX: a\r\n\r\n"),
           "sent a bare LF in the header",
           "response: a bare LF is refused before the header's end");
    is_str(resp_end_bytewise("\n"), "sent a bare LF in the header",
           "response: a bare LF first");
    is_str(resp_end_bytewise("HTTP/1.1 200 OK\r\nX: a\r\n\r"), "incomplete",
           "response: CRLF CR is not the end");
    is_str(resp_end_bytewise("HTTP/1.1 200 OK\r\nX: a\r\n\r\n"), "found",
           "response: the end found byte by byte");
    resp_rejects("HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n",
                 "sent a bare LF in the header", "bare LF in a field");
    resp_rejects("HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n",
                 "sent an obsolete folded header line", "obs-fold");
    resp_rejects("HTTP/1.1 200 OK\r\nX Y: a\r\n\r\n",
                 "sent an invalid header name", "space in a name");
    resp_rejects("HTTP/1.1 200 OK\r\nX : a\r\n\r\n",
                 "sent an invalid header name", "space before the colon");
    resp_rejects("HTTP/1.1 200 OK\r\n: a\r\n\r\n",
                 "sent an invalid header name", "empty name");
    resp_rejects("HTTP/1.1 200 OK\r\nX-A\r\n\r\n",
                 "sent an invalid header name", "no colon");
    resp_rejects("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
                 "sent a control character in a header", "bare CR");
    resp_rejects("HTTP/1.1 200 OK\r\nX: a\x7f\r\n\r\n",
                 "sent a control character in a header", "DEL");
    resp_rejects("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n"
                 "Content-Length: 2\r\n\r\n",
                 "sent two different Content-Length", "two different CL");
    resp_rejects("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                 "sent an invalid Content-Length", "negative CL");
    resp_rejects("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
                 "sent an invalid Content-Length", "empty CL");
    resp_rejects("HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789"
                 "\r\n\r\n", "sent an invalid Content-Length", "CL over 10^18");
    resp_rejects("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 "sent both Content-Length and Transfer-Encoding", "CL and TE");
    resp_rejects("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                 "sent a Transfer-Encoding other than chunked", "gzip, chunked");
    resp_rejects("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n",
                 "sent a Transfer-Encoding other than chunked", "TE twice");
    resp_rejects("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n"
                 "F: 6\r\nG: 7\r\nH: 8\r\n\r\n", "accepted",
                 "as many fields as the array holds");
    resp_rejects("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n"
                 "F: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\n\r\n",
                 "sent too many header lines", "one field too many");
    {
        const char *err = NULL;
        ok(fd_http_parse_response(&rs, "HTTP/1.1 200 OK\r\n\r", 18, &err) ==
           FD_ERROR && strcmp(err, "sent an incomplete header") == 0,
           "response: a header without its blank line is refused");
    }
}

static int chunked(const char *in, char *out, size_t *outlen)
{
    fd_http_chunked_t ck = {0};
    const char *pos = in, *last = in + strlen(in), *data;
    size_t len;
    int rc;

    *outlen = 0;
    for (;;) {
        rc = fd_http_parse_chunked(&ck, &pos, last, &data, &len);
        if (rc != FD_OK)
            return rc;
        memcpy(out + *outlen, data, len);
        *outlen += len;
    }
}

static void test_chunked(void)
{
    char out[256];
    size_t n;

    is_int(chunked("5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n", out, &n),
           FD_DONE, "two chunks and an extension");
    is_strn(out, n, "hello world", "decoded");
    is_int(chunked("3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", out, &n), FD_DONE,
           "trailer");
    is_strn(out, n, "abc", "decoded with a trailer");
    is_int(chunked("3\r\nab", out, &n), FD_AGAIN, "partial: again");
    is_int(chunked("zz\r\n", out, &n), 400, "bad size");
    is_int(chunked("fffffffffffffffff\r\n", out, &n), 400, "size overflow");
    is_int(chunked("-1\r\n", out, &n), 400, "negative size");
    is_int(chunked("3\r\nabcd\r\n", out, &n), 400, "data over its size");
    is_int(chunked("\r\n", out, &n), 400, "empty size line");
    is_int(chunked("3\nabc\r\n", out, &n), 400, "bare LF after size");
    /* byte by byte */
    {
        const char *m = "4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n";
        fd_http_chunked_t ck = {0};
        size_t i, len, got = 0;
        int rc = FD_AGAIN;
        for (i = 0; m[i] && rc != FD_DONE; i++) {
            const char *pos = m + i, *data;
            rc = fd_http_parse_chunked(&ck, &pos, m + i + 1, &data, &len);
            if (rc == FD_OK) {
                memcpy(out + got, data, len);
                got += len;
            }
        }
        is_int(rc, FD_DONE, "byte by byte: done");
        is_strn(out, got, "wikipedia", "byte by byte: decoded");
    }
}

static void norm(const char *in, const char *want)
{
    char out[256];
    size_t n;
    fd_str_t s = {strlen(in), in};

    if (want == NULL) {
        is_int(fd_http_normalize_path(s, out, &n), FD_ERROR, "%s refused", in);
        return;
    }
    is_int(fd_http_normalize_path(s, out, &n), FD_OK, "%s accepted", in);
    is_strn(out, n, want, "%s -> %s", in, want);
}

static void test_paths(void)
{
    norm("/", "/");
    norm("/a/b", "/a/b");
    norm("/a//b/", "/a/b/");
    norm("/a/./b", "/a/b");
    norm("/a/../b", "/b");
    norm("/a/b/..", "/a/");
    norm("/%41%42", "/AB");
    norm("/a%2fb", "/a/b");
    norm("/..", NULL);
    norm("/a/../..", NULL);
    norm("/%2e%2e/etc/passwd", NULL);
    norm("/..%2f..%2fetc", NULL);
    norm("/a%00b", NULL);
    norm("/%zz", NULL);
    norm("/%4", NULL);
}

/* The parser's path_plain promise: a plain path is its own normal form. */
static void plain(const char *target, int want_plain, const char *path,
                  const char *query)
{
    char msg[512], out[512];
    fd_http_req_t p;
    size_t n;
    int rc;

    snprintf(msg, sizeof(msg), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
    rc = parse(msg, &p);
    is_int(rc, FD_OK, "%s parsed", target);
    if (rc != FD_OK)
        return;
    is_int(p.path_plain, want_plain, "%s: plain %d", target, want_plain);
    is_strn(p.path_raw.data, p.path_raw.len, path, "%s: path %s", target, path);
    if (query)
        is_strn(p.query.data, p.query.len, query, "%s: query %s", target, query);
    else
        ok(p.query.data == NULL, "%s: no query", target);
    if (p.path_plain)
        ok(fd_http_normalize_path(p.path_raw, out, &n) == FD_OK &&
               n == p.path_raw.len && memcmp(out, p.path_raw.data, n) == 0,
           "%s: a plain path is already normal", target);
}

static void test_plain_paths(void)
{
    plain("/plaintext", 1, "/plaintext", NULL);
    plain("/", 1, "/", NULL);
    plain("/a/b/", 1, "/a/b/", NULL);
    plain("/a/b?x=%2F//../y?z", 1, "/a/b", "x=%2F//../y?z");
    plain("/?", 1, "/", "");
    plain("/a//b", 0, "/a//b", NULL);
    plain("/a/./b", 0, "/a/./b", NULL);
    plain("/a/../b", 0, "/a/../b", NULL);
    plain("/a/.hidden", 0, "/a/.hidden", NULL); /* conservative */
    plain("/a%41", 0, "/a%41", NULL);
    plain("/a.b/c.d", 1, "/a.b/c.d", NULL);
    plain("http://h.example/a/b?q", 0, "/a/b", "q");
    plain("http://h.example", 0, "/", NULL);
    rejects("GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "a CTL in the target");
    rejects("GET /a?b\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 400, "DEL in the query");
    rejects("GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400, "a fragment");
    rejects("GET /a\r\nHost: x\r\n\r\n", 400, "no version after the target");
    rejects("GET /a  HTTP/1.1\r\nHost: x\r\n\r\n", 400, "two spaces after the target");
}


/* --- Host (RFC 9110 7.2, RFC 3986 3.2.2) --- */

/* The Host field value h, and the same as an absolute-form authority: both
 * accepted with want as the normalised host, or both 400 (want NULL). */
static void host(const char *h, const char *want)
{
    char msg[512];
    fd_http_req_t p;
    int rc;

    snprintf(msg, sizeof(msg), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", h);
    rc = parse(msg, &p);
    is_int(rc, want ? FD_OK : 400, "Host: %s %s", h, want ? "valid" : "400");
    if (want && rc == FD_OK)
        is_strn(p.host.data, p.host.len, want, "Host: %s is %s", h, want);
    is_int(parse_bytewise(msg, &p), want ? FD_OK : 400,
           "Host: %s (byte by byte)", h);
    if (want && rc == FD_OK)
        is_strn(p.host.data, p.host.len, want, "Host: %s (byte by byte)", h);
    snprintf(msg, sizeof(msg), "GET http://%s/p HTTP/1.1\r\nHost: x\r\n\r\n",
             h);
    rc = parse(msg, &p);
    is_int(rc, want ? FD_OK : 400, "http://%s/p %s", h, want ? "valid" : "400");
    if (want && rc == FD_OK) {
        is_strn(p.host.data, p.host.len, want, "http://%s/p: host %s", h,
                want);
        is_strn(p.path_raw.data, p.path_raw.len, "/p", "http://%s/p: path", h);
    }
    if (want) {
        /* the normal form is a fixed point: what the upstream is sent
         * parses to itself there */
        fd_str_t out = {0, NULL};
        is_int(fd_http_parse_host((fd_str_t){strlen(want), want}, &out, pool),
               FD_OK, "%s parses", want);
        is_strn(out.data, out.len, want, "%s is its own normal form", want);
    }
}

static void test_hosts(void)
{
    fd_http_req_t p;

    /* the bypasses of issue 14: none of these is admin.example */
    host("admin.example:abc", NULL);
    host("admin.example:80:80", NULL);
    host("admin.example..", NULL);
    host("[admin.example]", NULL);
    host("admin.example%00", NULL);
    host("admin%2eexample", NULL);
    host("admin.example:99999", NULL);
    /* ports: at most 5 digits, at most 65535, digits only */
    host("a.example:65536", NULL);
    host("a.example:000080", NULL);
    host("a.example:+80", NULL);
    host("a.example:-1", NULL);
    host("a.example:8a", NULL);
    host("a.example:65535", "a.example:65535");
    host("a.example:00080", "a.example:00080");
    host("a.example:0", "a.example:0");
    host("a.example:", "a.example"); /* port = *DIGIT: empty is allowed */
    /* reg-name: unreserved and sub-delims, no empty label */
    host("a.example", "a.example");
    host("A.Example", "A.Example"); /* case is the router's business */
    host("a.example.", "a.example");
    host("a.example.:8080", "a.example:8080");
    host("a.example.:", "a.example");
    host("a-b_c~d.example", "a-b_c~d.example");
    host("x!$&'()*+,;=y", "x!$&'()*+,;=y");
    host("localhost", "localhost");
    host(".a.example", NULL);
    host("a..example", NULL);
    host(".", NULL);
    host("..", NULL);
    host(":80", NULL);
    host("a.example%2e", NULL);
    host("a\xc3\xa9.example", NULL); /* raw UTF-8: IDNs travel as punycode */
    host("a.example]", NULL);
    host("a[b]", NULL);
    host("a:b:c", NULL);
    /* IPv4, and names that end in a number (WHATWG reads them as IPv4) */
    host("1.2.3.4", "1.2.3.4");
    host("1.2.3.4:8080", "1.2.3.4:8080");
    host("1.2.3.4.", "1.2.3.4");
    host("0.0.0.0", "0.0.0.0");
    host("255.255.255.255", "255.255.255.255");
    host("1.2.3.256", NULL);
    host("01.2.3.4", NULL);
    host("1.2.3", NULL);
    host("1.2.3.4.5", NULL);
    host("127.1", NULL);
    host("2130706433", NULL);
    host("0x7f.1", NULL);
    host("a.0x7F", NULL);
    host("a.example.123", NULL);
    host("1a.example", "1a.example");
    host("a.1b", "a.1b");
    host("0xg.example", "0xg.example");
    /* IP-literal: IPv6 or IPvFuture */
    host("[::1]", "[::1]");
    host("[::1]:80", "[::1]:80");
    host("[::1]:", "[::1]");
    host("[2001:db8::a:b:c]", "[2001:db8::a:b:c]");
    host("[::ffff:1.2.3.4]", "[::ffff:1.2.3.4]");
    host("[1:2:3:4:5:6:7:8]", "[1:2:3:4:5:6:7:8]");
    host("[v1.x]", "[v1.x]");
    host("[vA.a:b!]:1", "[vA.a:b!]:1");
    host("[v1.]", NULL);
    host("[v.x]", NULL);
    host("[vg.x]", NULL);
    host("[::1", NULL);
    host("::1", NULL);
    host("[::1]x", NULL);
    host("[::1]:99999", NULL);
    host("[::g]", NULL);
    host("[1:2:3:4:5:6:7:8:9]", NULL);
    host("[1::2::3]", NULL);
    host("[fe80::1%25eth0]", NULL); /* RFC 6874 zones: not on the wire */
    host("[]", NULL);
    host("[::1]]", NULL);
    host("[[::1]]", NULL);
    host("[::1.2.3.256]", NULL);
    host("[::01.2.3.4]", NULL);

    /* the absolute-form authority wins, but Host is checked all the same */
    is_int(parse("GET http://a.example/ HTTP/1.1\r\nHost: b:abc\r\n\r\n", &p),
           400, "an invalid Host beside a valid authority: 400");
    is_int(parse("GET http://a.example./ HTTP/1.1\r\nHost: b\r\n\r\n", &p),
           FD_OK, "authority with a trailing dot");
    is_strn(p.host.data, p.host.len, "a.example", "the authority, normalised");
    is_int(parse("GET http://a.example.:81/x HTTP/1.1\r\nHost: b\r\n\r\n", &p),
           FD_OK, "authority with a trailing dot and a port");
    is_strn(p.host.data, p.host.len, "a.example:81",
            "the authority, normalised (a copy)");
    is_int(parse_bytewise("GET / HTTP/1.1\r\nHost: a.example.:81\r\n\r\n", &p),
           FD_OK, "Host with a trailing dot and a port, byte by byte");
    is_strn(p.host.data, p.host.len, "a.example:81", "normalised byte by byte");
    is_int(parse("GET / HTTP/1.0\r\nHost:\r\n\r\n", &p), FD_OK,
           "HTTP/1.0: an empty Host is no Host");
    is_int(p.host.len, 0, "HTTP/1.0: no host");
    is_int(parse("GET / HTTP/1.1\r\nHost:\r\n\r\n", &p), 400,
           "HTTP/1.1: an empty Host is 400");
    is_int(parse("GET http:// HTTP/1.1\r\nHost: x\r\n\r\n", &p), 400,
           "an empty authority");
    is_int(parse("GET http://u@a.example/ HTTP/1.1\r\nHost: x\r\n\r\n", &p),
           400, "userinfo in the authority");

    /* absolute-form, no path, then a query: the path is "/" */
    is_int(parse("GET http://a.example?x=1 HTTP/1.1\r\nHost: b\r\n\r\n", &p),
           FD_OK, "http://host?x=1");
    is_strn(p.host.data, p.host.len, "a.example", "http://host?x=1: host");
    is_strn(p.path_raw.data, p.path_raw.len, "/", "http://host?x=1: path /");
    is_strn(p.query.data, p.query.len, "x=1", "http://host?x=1: query");
    is_int(parse("GET http://a.example:8080?x=1 HTTP/1.1\r\nHost: b\r\n\r\n",
                 &p), FD_OK, "http://host:8080?x=1");
    is_strn(p.host.data, p.host.len, "a.example:8080",
            "http://host:8080?x=1: host");
    is_strn(p.path_raw.data, p.path_raw.len, "/",
            "http://host:8080?x=1: path /");
    is_strn(p.query.data, p.query.len, "x=1", "http://host:8080?x=1: query");
    is_int(parse("GET https://a.example.?/x HTTP/1.1\r\nHost: b\r\n\r\n", &p),
           FD_OK, "https://host.?/x");
    is_strn(p.host.data, p.host.len, "a.example", "https://host.?/x: host");
    is_strn(p.path_raw.data, p.path_raw.len, "/", "https://host.?/x: path /");
    is_strn(p.query.data, p.query.len, "/x", "https://host.?/x: query");
    is_int(parse("GET http://a.example? HTTP/1.1\r\nHost: b\r\n\r\n", &p),
           FD_OK, "http://host? (an empty query)");
    is_strn(p.path_raw.data, p.path_raw.len, "/", "http://host?: path /");
}

static void test_methods(void)
{
    static const char *const tokens[] = {"M-SEARCH", "PROPFIND", "MKCOL",
                                         "PROPPATCH", "X_Y.z~1!#$%&'*+^`|"};
    fd_http_req_t p;
    char msg[256];
    unsigned i;

    /* every RFC 9110 token is a method; the engine decides who takes it */
    for (i = 0; i < fd_nelems(tokens); i++) {
        snprintf(msg, sizeof(msg), "%s /x HTTP/1.1\r\nHost: a\r\n\r\n",
                 tokens[i]);
        is_int(parse(msg, &p), FD_OK, "method %s parses", tokens[i]);
        is_int(p.method_id, FD_HTTP_UNKNOWN, "method %s: no id of its own",
               tokens[i]);
        is_strn(p.method.data, p.method.len, tokens[i], "method %s kept",
                tokens[i]);
    }
    is_int(parse("PATCH /x HTTP/1.1\r\nHost: a\r\n\r\n", &p), FD_OK, "PATCH");
    is_int(p.method_id, FD_HTTP_PATCH, "PATCH has its id");
}

/* HTTP/2's decoded parts: the same answers a request line would get */
static fd_str_t S(const char *s)
{
    return (fd_str_t){strlen(s), s};
}

static void h2_init(fd_http_req_t *p)
{
    fd_pool_clear(pool);
    fd_http_parse_init(p, pool, 8192, 4);
    p->version = 20;
}

static void test_h2_parts(void)
{
    static const char *const bad_paths[] = {
        "", "x", "http://a/b", "/a b", "/a\tb", "/a\x7f", "/a#f", "/\x01"};
    fd_http_req_t p;
    unsigned i;

    h2_init(&p);
    is_int(fd_http_req_method(&p, "GET", 3), FD_OK, "h2 :method GET");
    is_int(p.method_id, FD_HTTP_GET, "with its id");
    is_int(fd_http_req_path(&p, "/a/b?c=d", 8), FD_OK, "h2 :path");
    is_strn(p.path_raw.data, p.path_raw.len, "/a/b", "path before '?'");
    is_strn(p.query.data, p.query.len, "c=d", "and the query");
    ok(p.path_plain, "a plain path is seen plain");
    h2_init(&p);
    fd_http_req_method(&p, "GET", 3);
    is_int(fd_http_req_path(&p, "/a/../b", 7), FD_OK, "a dot segment");
    ok(!p.path_plain, "is left for normalising");
    h2_init(&p);
    fd_http_req_method(&p, "GET", 3);
    is_int(fd_http_req_path(&p, "/%2e%2e/x?/..", 13), FD_OK, "an escape");
    ok(!p.path_plain, "is left for normalising too");
    for (i = 0; i < fd_nelems(bad_paths); i++) {
        h2_init(&p);
        fd_http_req_method(&p, "GET", 3);
        is_int(fd_http_req_path(&p, bad_paths[i], strlen(bad_paths[i])), 400,
               "h2 :path \"%s\" is 400", bad_paths[i]);
    }
    h2_init(&p);
    fd_http_req_method(&p, "GET", 3);
    is_int(fd_http_req_path(&p, "*", 1), 400, "* is for OPTIONS only");
    h2_init(&p);
    fd_http_req_method(&p, "OPTIONS", 7);
    is_int(fd_http_req_path(&p, "*", 1), FD_OK, "OPTIONS *");

    h2_init(&p);
    is_int(fd_http_req_header(&p, S("content-length"), S("12")), FD_OK,
           "a field");
    is_int((int)p.content_length, 12, "indexed as on HTTP/1.1");
    is_int(fd_http_req_header(&p, S("content-length"), S("12")), 400,
           "a second content-length is 400");
    h2_init(&p);
    is_int(fd_http_req_header(&p, S("x"), S("a\r\nb: c")), 400,
           "a value holding CR LF is 400");
    is_int(fd_http_req_header(&p, S("transfer-encoding"), S("chunked")), 400,
           "transfer-encoding is 400 over HTTP/2");
    is_int(fd_http_req_header(&p, S("connection"), S("close")), 400,
           "so is connection");
    is_int(fd_http_req_header(&p, S("upgrade"), S("h2c")), 400,
           "and upgrade");
    is_int(fd_http_req_header(&p, S("host"), S("a..b")), 400,
           "a bad host field is 400");
    h2_init(&p);
    for (i = 0; i < 4; i++)
        fd_http_req_header(&p, S("x-a"), S("1"));
    is_int(fd_http_req_header(&p, S("x-a"), S("1")), 431,
           "fields past max_headers are 431");
}

/* fd_http_req_copy: every slice in the copy's pool, none in the source
 * (which a background subrequest outlives) */
static void test_copy(void)
{
    char buf[256];
    const char *req = "POST /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\n"
                      "User-Agent: t\r\nContent-Type: text/plain\r\n"
                      "Content-Length: 3\r\nX-A: 1\r\n\r\n";
    fd_pool_t *cp = fd_pool_create(256);
    fd_http_req_t p, c;
    unsigned i;
    int inside = 0;

    memcpy(buf, req, strlen(req) + 1);
    fd_http_parse_init(&p, pool, 8192, 100);
    is_int(fd_http_parse_request(&p, buf, strlen(buf)), FD_OK, "parsed");
    is_int(fd_http_req_copy(&c, &p, cp), FD_OK, "copied");
    memset(buf, 'Z', sizeof(buf)); /* the source's bytes are gone */
    is_strn(c.method.data, c.method.len, "POST", "copy: method");
    is_strn(c.target.data, c.target.len, "/a/b?x=1", "copy: target");
    is_strn(c.path_raw.data, c.path_raw.len, "/a/b", "copy: path");
    is_strn(c.query.data, c.query.len, "x=1", "copy: query");
    is_strn(c.host.data, c.host.len, "example.com", "copy: host");
    is_strn(c.user_agent.data, c.user_agent.len, "t", "copy: user agent");
    is_strn(c.content_type.data, c.content_type.len, "text/plain",
            "copy: content type");
    is_int(c.content_length, 3, "copy: content length");
    is_int(c.nheaders, 5, "copy: five fields");
    is_strn(c.headers[4].name.data, c.headers[4].name.len, "X-A",
            "copy: a field's name");
    is_strn(c.headers[4].value.data, c.headers[4].value.len, "1",
            "copy: its value");
    ok(c.headers != p.headers && c.pool == cp && c.start == NULL,
       "copy: its own array and pool, no raw header");
    for (i = 0; i < c.nheaders; i++)
        if ((c.headers[i].name.data >= buf &&
             c.headers[i].name.data < buf + sizeof(buf)) ||
            (c.headers[i].value.data >= buf &&
             c.headers[i].value.data < buf + sizeof(buf)))
            inside = 1;
    ok(!inside, "copy: no field points into the source");
    fd_pool_destroy(cp);
}

int main(void)
{
    pool = fd_pool_create(4096);
    test_copy();
    test_h2_parts();
    test_plain_paths();
    test_requests();
    test_rejections();
    test_responses();
    test_chunked();
    test_paths();
    test_hosts();
    test_methods();
    fd_pool_destroy(pool);
    return done_testing();
}
