/* Unit tests: the request parser, the chunked decoder, path normalising. */
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

int main(void)
{
    pool = fd_pool_create(4096);
    test_requests();
    test_rejections();
    test_chunked();
    test_paths();
    fd_pool_destroy(pool);
    return done_testing();
}
