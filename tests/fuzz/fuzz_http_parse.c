/*
 * libFuzzer harness: the request parser (core/http/fd_http_parse.c).
 *
 * The input is a byte stream as a client would send it on one connection:
 * pipelined requests with Content-Length or chunked bodies. It is parsed
 * twice, as the engine does (a window of at most max_header_size bytes,
 * the read buffer), first whole, then fed in random prefixes (every split
 * across reads), and both runs must give the same verdict for every request.
 * Every accepted request is checked against the grammar it was accepted
 * under (slices inside the header, tokens, no control bytes, framing), and
 * its path is normalised into an exactly sized buffer.
 *
 * Input: byte 0 picks the limits, bytes 1-4 seed the splits, the rest is
 * the stream.
 */
#include <assert.h>

#include "fd_core.h"
#include "fd_http_parse.h"
#include "fuzz_rng.h"

#define MAX_REQS 32

typedef struct {
    int rc;
    size_t header_len;
    int method_id, version;
    int64_t content_length;
    unsigned chunked, nheaders, host_seen;
    size_t host_off, host_len, path_off, path_len, query_off, query_len;
    uint32_t host_hash;
} verdict_t;

static fd_pool_t *pool;

static size_t off_of(const char *base, fd_str_t s)
{
    return s.data ? (size_t)(s.data - base) : (size_t)-1;
}

static void in_header(const char *start, size_t hl, fd_str_t s)
{
    if (s.len == 0)
        return;
    assert(s.data >= start && s.data + s.len <= start + hl);
}

/* Reference list walk with plain strncasecmp: does the comma-separated
 * value hold the token (after trimming SP/HT)? Counts the elements and
 * how many equal the token. */
static void list_ref(fd_str_t v, const char *tok, unsigned *nel, unsigned *nhit,
                     int *last_hit)
{
    size_t i = 0, tl = strlen(tok);

    while (i < v.len) {
        size_t s = i, e;
        while (i < v.len && v.data[i] != ',')
            i++;
        e = i;
        while (s < e && (v.data[s] == ' ' || v.data[s] == '\t'))
            s++;
        while (e > s && (v.data[e - 1] == ' ' || v.data[e - 1] == '\t'))
            e--;
        (*nel)++;
        *last_hit = e - s == tl && strncasecmp(v.data + s, tok, tl) == 0;
        *nhit += *last_hit;
        i++;
    }
}

/* What an accepted request must satisfy. */
static void check_accepted(const fd_http_req_t *p, const char *start,
                           size_t window, unsigned max_headers)
{
    size_t hl = p->header_len, i, j;
    unsigned cl_fields = 0, te_fields = 0, host_fields = 0;
    unsigned te_el = 0, te_chunked = 0, conn_close = 0, expect = 0;
    int te_last = 0;

    assert(hl >= 4 && hl <= window);
    assert(memcmp(start + hl - 4, "\r\n\r\n", 4) == 0);
    assert(p->version == 10 || p->version == 11);
    assert(p->method.len > 0 && p->method.len <= 32);
    in_header(start, hl, p->method);
    for (i = 0; i < p->method.len; i++)
        assert(fd_http_tchar[(uint8_t)p->method.data[i]]);
    in_header(start, hl, p->target);
    assert(p->target.len > 0);
    for (i = 0; i < p->target.len; i++) {
        uint8_t c = (uint8_t)p->target.data[i];
        assert(c > 0x20 && c != 0x7f && c != '#');
    }
    assert(p->nheaders <= max_headers);
    for (i = 0; i < p->nheaders; i++) {
        fd_str_t n = p->headers[i].name, v = p->headers[i].value;
        assert(n.len > 0);
        in_header(start, hl, n);
        in_header(start, hl, v);
        for (j = 0; j < n.len; j++)
            assert(fd_http_tchar[(uint8_t)n.data[j]]);
        for (j = 0; j < v.len; j++) {
            uint8_t c = (uint8_t)v.data[j];
            /* no CR, LF or NUL can reach a handler, a log or a proxy */
            assert(c >= 0x20 || c == '\t');
            assert(c != 0x7f);
        }
        if (v.len) {
            assert(v.data[0] != ' ' && v.data[0] != '\t');
            assert(v.data[v.len - 1] != ' ' && v.data[v.len - 1] != '\t');
        }
        /* plain strncasecmp: a reference for the parser's word-wise fold */
        if (n.len == 14 && strncasecmp(n.data, "content-length", 14) == 0)
            cl_fields++;
        else if (n.len == 17 &&
                 strncasecmp(n.data, "transfer-encoding", 17) == 0) {
            te_fields++;
            list_ref(v, "chunked", &te_el, &te_chunked, &te_last);
        } else if (n.len == 4 && strncasecmp(n.data, "host", 4) == 0)
            host_fields++;
        else if (n.len == 10 && strncasecmp(n.data, "connection", 10) == 0) {
            unsigned a = 0, b = 0;
            int l = 0;
            list_ref(v, "close", &a, &b, &l);
            conn_close |= b > 0;
        } else if (n.len == 6 && strncasecmp(n.data, "expect", 6) == 0)
            expect |= v.len == 12 && strncasecmp(v.data, "100-continue", 12) == 0;
    }
    assert(p->conn_close == conn_close);
    assert(p->expect_continue == expect);
    if (p->chunked) /* exactly one coding, chunked, in one or more fields */
        assert(te_el == 1 && te_chunked == 1 && te_last);
    /* one framing, never two */
    assert(cl_fields <= 1);
    assert(host_fields <= 1);
    if (p->chunked) {
        assert(p->content_length == -1);
        assert(cl_fields == 0 && te_fields >= 1);
        assert(p->version == 11);
    }
    if (te_fields)
        assert(p->chunked);
    if (cl_fields)
        assert(p->content_length >= 0);
    else
        assert(p->content_length == -1);
    if (p->version == 11)
        assert(p->host_seen && host_fields == 1);
    for (i = 0; i < p->host.len; i++) /* routing and upstreams see it */
        assert(!strchr(" \t/\\@?#\"<>{}|^`", p->host.data[i]));

    if (p->path_raw.len && p->path_raw.data[0] == '/') {
        /* normalise into exactly src + 1 bytes: ASan sees any overrun */
        char *dst = malloc(p->path_raw.len + 1);
        size_t dlen = 0;
        assert(dst != NULL);
        if (fd_http_normalize_path(p->path_raw, dst, &dlen) == FD_OK) {
            assert(dlen >= 1 && dlen <= p->path_raw.len);
            assert(dst[0] == '/' && dst[dlen] == '\0');
            assert(strlen(dst) == dlen);
            assert(strstr(dst, "//") == NULL);
            assert(strstr(dst, "/../") == NULL);
            assert(strstr(dst, "/./") == NULL);
            assert(!(dlen >= 3 && memcmp(dst + dlen - 3, "/..", 3) == 0));
            assert(!(dlen >= 2 && memcmp(dst + dlen - 2, "/.", 2) == 0));
        }
        /* path_plain: the engine copies such a path without normalising
         * it, so it must be its own normal form */
        if (p->path_plain) {
            assert(fd_http_normalize_path(p->path_raw, dst, &dlen) == FD_OK);
            assert(dlen == p->path_raw.len &&
                   memcmp(dst, p->path_raw.data, dlen) == 0);
        }
        free(dst);
    }
}

static void record(verdict_t *v, const fd_http_req_t *p, const char *start,
                   int rc)
{
    memset(v, 0, sizeof(*v));
    v->rc = rc;
    if (rc != FD_OK)
        return;
    v->header_len = p->header_len;
    v->method_id = p->method_id;
    v->version = p->version;
    v->content_length = p->content_length;
    v->chunked = p->chunked;
    v->nheaders = p->nheaders;
    v->host_seen = p->host_seen;
    /* a normalised host ("name.:80" without its dot) may be a copy in
     * the pool: compared by its bytes, not where it lies */
    v->host_off = p->host.data >= start &&
                          p->host.data < start + p->header_len
                      ? off_of(start, p->host)
                      : (size_t)-2;
    v->host_len = p->host.len;
    v->host_hash = p->host.len ? fd_hash(p->host.data, p->host.len) : 0;
    v->path_off = off_of(start, p->path_raw);
    v->path_len = p->path_raw.len;
    v->query_off = off_of(start, p->query);
    v->query_len = p->query.len;
}

/*
 * Parse the stream as the engine would; split != 0 feeds each request in
 * random prefixes. Returns the number of verdicts.
 */
static unsigned run(const char *d, size_t n, size_t mhs, unsigned mh,
                    int split, verdict_t *out)
{
    size_t pos = 0;
    unsigned k = 0;

    while (k < MAX_REQS && pos < n) {
        fd_http_req_t p;
        size_t window = fd_min(n - pos, mhs);
        const char *s = d + pos;
        int rc = FD_AGAIN;

        fd_pool_clear(pool);
        fd_http_parse_init(&p, pool, mhs, mh);
        p.version = 11; /* as request_new() does */
        if (split) {
            size_t have = 0;
            while (rc == FD_AGAIN && have < window) {
                size_t step = 1 + rng() % (rng() & 1 ? 8 : window);
                have = fd_min(window, have + step);
                rc = fd_http_parse_request(&p, s, have);
            }
        } else {
            rc = fd_http_parse_request(&p, s, window);
        }
        /* a full read buffer is never "more input": the engine could not
         * read on and the connection would stall until header_timeout */
        if (window == mhs)
            assert(rc != FD_AGAIN);
        record(&out[k++], &p, s, rc);
        if (rc != FD_OK)
            break;
        check_accepted(&p, s, window, mh);
        pos += p.header_len;
        if (p.chunked) {
            fd_http_chunked_t ck;
            const char *cp = d + pos, *data;
            size_t len;
            memset(&ck, 0, sizeof(ck));
            do {
                rc = fd_http_parse_chunked(&ck, &cp, d + n, &data, &len);
                if (rc == FD_OK)
                    assert(data >= d + pos && data + len <= d + n);
            } while (rc == FD_OK);
            if (rc != FD_DONE)
                break;
            assert(cp <= d + n);
            pos = (size_t)(cp - d);
        } else if (p.content_length > 0) {
            if ((uint64_t)p.content_length > n - pos)
                break;
            pos += (size_t)p.content_length;
        }
    }
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t mhs_choice[4] = {64, 256, 1024, 8192};
    verdict_t whole[MAX_REQS], split[MAX_REQS];
    unsigned nw, ns, i;
    size_t mhs;
    unsigned mh;
    uint32_t seed;
    char *buf;

    if (pool == NULL)
        pool = fd_pool_create(4096);
    if (size < 5)
        return 0;
    mhs = mhs_choice[data[0] & 3];
    mh = (data[0] & 4) ? 4 : 100;
    memcpy(&seed, data + 1, 4);
    data += 5;
    size -= 5;
    /* a heap copy of exactly the input: reads past it are caught */
    buf = malloc(size ? size : 1);
    assert(buf != NULL);
    memcpy(buf, data, size);

    nw = run(buf, size, mhs, mh, 0, whole);
    rng_state = seed;
    ns = run(buf, size, mhs, mh, 1, split);
    assert(nw == ns);
    for (i = 0; i < nw; i++) {
        if (memcmp(&whole[i], &split[i], sizeof(verdict_t)) != 0) {
            fprintf(stderr, "request %u: whole rc %d hl %zu, split rc %d "
                    "hl %zu\n", i, whole[i].rc, whole[i].header_len,
                    split[i].rc, split[i].header_len);
            abort();
        }
    }
    free(buf);
    return 0;
}
