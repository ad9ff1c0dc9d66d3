/*
 * libFuzzer harness: the upstream response parser (fd_http_parse_response
 * and fd_http_parse_response_end in core/http/fd_http_parse.c), as the proxy's
 * resp_header() and resp_body() use them.
 *
 * The input is what an upstream sends on one connection: responses, each
 * a header (after any interim 1xx) and a body framed as the proxy frames
 * it (none for HEAD, 204 and 304; chunked; Content-Length; or up to the
 * close). It is read twice, first whole, then in random prefixes (every
 * split across reads, the header's end searched for again after each),
 * and both runs must give the same verdict for every response. Each
 * header is parsed from an exactly sized heap copy, as the proxy parses
 * its pool copy, into a fields array of exactly max_fields: ASan sees any
 * read past hlen or write past the array. An accepted response is checked
 * against a plain reference of its grammar and framing rules.
 *
 * Input: byte 0 the limits (bit 0: 4 fields at most, else 128 as the
 * proxy; bit 1: the request was HEAD; bit 2: a 256-byte read buffer, else
 * 16k as the proxy), bytes 1-4 seed the splits, the rest is the stream.
 */
#include <assert.h>

#include "fd_core.h"
#include "fd_http_parse.h"
#include "fuzz_rng.h"

#define MAX_RESPS 16

enum { ST_HEADER = 1, ST_PARSE, ST_TOO_BIG, ST_BODY };

typedef struct {
    int stage;        /* where it stopped: 0 accepted, or an ST_ */
    const char *err;  /* the parser's text when stage is ST_PARSE */
    size_t hlen;
    int status, version;
    int64_t content_length;
    unsigned chunked, conn_close, conn_keepalive, nfields, ntok;
    size_t upgrade_off, upgrade_len;
    int body_rc;      /* chunked: FD_DONE, FD_AGAIN or 400 */
    size_t body_len;  /* decoded or framed body bytes */
    size_t end;       /* stream offset after the response */
} verdict_t;

static size_t step(size_t n)
{
    return 1 + rng() % (rng() & 1 ? 8 : n);
}

static void in_header(const char *h, size_t hlen, fd_str_t s)
{
    if (s.len == 0)
        return;
    assert(s.data >= h && s.data + s.len <= h + hlen);
}

static int name_is(fd_str_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n.len == l && strncasecmp(n.data, lit, l) == 0;
}

/* What an accepted response must satisfy, against a plain reference. */
static void check_accepted(const fd_http_resp_t *rs, const char *h,
                           size_t hlen)
{
    fd_str_t tok[FD_HTTP_RESP_MAX_TOKENS];
    unsigned ntok = 0, i, cl_fields = 0, te_fields = 0, close = 0, ka = 0;
    int64_t cl = -1;
    fd_str_t upgrade = {0, NULL};
    size_t j;
    int interim = rs->status < 200 && rs->status != 101;

    assert(hlen >= 16 && memcmp(h + hlen - 4, "\r\n\r\n", 4) == 0);
    /* the first blank line ends the header */
    assert(memmem(h, hlen - 1, "\r\n\r\n", 4) == NULL);
    assert(memcmp(h, "HTTP/1.", 7) == 0);
    assert(rs->version == (h[7] == '1' ? 11 : 10) && h[7] <= '1');
    assert(rs->status >= 100 && rs->status <= 599);
    assert(rs->nfields <= rs->max_fields);
    for (i = 0; i < rs->nfields; i++) {
        fd_str_t n = rs->fields[i].name, v = rs->fields[i].value;
        assert(n.len > 0);
        in_header(h, hlen, n);
        in_header(h, hlen, v);
        for (j = 0; j < n.len; j++)
            assert(fd_http_tchar[(uint8_t)n.data[j]]);
        /* no CR, LF or NUL can reach the client or a log */
        for (j = 0; j < v.len; j++) {
            uint8_t c = (uint8_t)v.data[j];
            assert((c >= 0x20 || c == '\t') && c != 0x7f);
        }
        if (v.len) {
            assert(v.data[0] != ' ' && v.data[0] != '\t');
            assert(v.data[v.len - 1] != ' ' && v.data[v.len - 1] != '\t');
        }
        if (name_is(n, "content-length")) {
            int64_t x = 0;
            int valid = v.len > 0 && v.len <= 18;
            for (j = 0; j < v.len && valid; j++) {
                valid = v.data[j] >= '0' && v.data[j] <= '9';
                x = x * 10 + (v.data[j] - '0'); /* 18 digits: no overflow */
            }
            assert(interim || (valid && (cl == -1 || cl == x)));
            cl = x;
            cl_fields++;
        } else if (name_is(n, "transfer-encoding")) {
            te_fields++;
            assert(interim || (v.len == 7 && strncasecmp(v.data, "chunked",
                                                         7) == 0));
        } else if (name_is(n, "connection")) {
            size_t k = 0;
            /* tokens split at ',', SP and HTAB; the first 16 are kept */
            while (k < v.len) {
                size_t s;
                while (k < v.len && strchr(", \t", v.data[k]))
                    k++;
                s = k;
                while (k < v.len && !strchr(", \t", v.data[k]))
                    k++;
                if (k > s && ntok < FD_HTTP_RESP_MAX_TOKENS) {
                    tok[ntok] = (fd_str_t){k - s, v.data + s};
                    close |= name_is(tok[ntok], "close");
                    ka |= name_is(tok[ntok], "keep-alive");
                    ntok++;
                }
            }
        } else if (name_is(n, "upgrade")) {
            upgrade = v;
        }
    }
    if (interim) { /* no body: its framing fields are not read */
        assert(rs->content_length == -1 && !rs->chunked && rs->ntok == 0);
        assert(!rs->conn_close && !rs->conn_keepalive);
        assert(rs->upgrade.data == NULL);
        return;
    }
    /* one framing, never two */
    assert(!(rs->chunked && rs->content_length >= 0));
    assert(te_fields <= 1 && rs->chunked == (te_fields == 1));
    assert(cl_fields ? rs->content_length == cl : rs->content_length == -1);
    assert(rs->ntok == ntok);
    for (i = 0; i < ntok; i++)
        assert(rs->conn_tok[i].data == tok[i].data &&
               rs->conn_tok[i].len == tok[i].len);
    assert(rs->conn_close == close && rs->conn_keepalive == ka);
    assert(rs->upgrade.data == upgrade.data &&
           rs->upgrade.len == upgrade.len);
}

/* The chunked body at d[0, n): whole, or in random prefixes. */
static void body_chunked(const char *d, size_t n, int split, verdict_t *v)
{
    fd_http_chunked_t ck;
    const char *pos = d, *data;
    size_t have = split ? 0 : n, len;
    int rc;

    memset(&ck, 0, sizeof(ck));
    for (;;) {
        rc = fd_http_parse_chunked(&ck, &pos, d + have, &data, &len);
        assert(pos >= d && pos <= d + have);
        if (rc == FD_OK) {
            assert(len == 0 || (data >= d && data + len <= pos));
            v->body_len += len;
            continue;
        }
        if (rc != FD_AGAIN || have == n)
            break;
        len = step(n); /* fd_min() is a macro: no rng() in it */
        have = fd_min(n, have + len);
    }
    assert(rc == FD_DONE || rc == FD_AGAIN || rc == 400);
    v->body_rc = rc;
    v->end = rc == FD_DONE ? (size_t)(pos - d) : 0;
}

/*
 * Read the stream as the proxy would; split != 0 feeds it in random
 * prefixes. Returns the number of verdicts.
 */
static unsigned run(const char *d, size_t n, unsigned max_fields,
                    int header_only, size_t bufsize, int split,
                    verdict_t *out)
{
    fd_http_header_t *f = malloc(max_fields * sizeof(*f));
    size_t pos = 0;
    unsigned k = 0;

    assert(f != NULL);
    while (k < MAX_RESPS && pos < n) {
        verdict_t *v = &out[k++];
        fd_http_resp_t rs = {.fields = f, .max_fields = max_fields};
        const char *s = d + pos, *err = NULL;
        size_t window = fd_min(n - pos, bufsize), have, scan = 0, hlen = 0;
        char *h;
        int rc = FD_AGAIN;

        memset(v, 0, sizeof(*v));
        have = split ? 0 : window;
        do {
            if (split) {
                size_t more = step(window); /* fd_min() is a macro */
                have = fd_min(window, have + more);
            }
            rc = fd_http_parse_response_end(s, have, &scan, &hlen, &err);
        } while (rc == FD_AGAIN && have < window);
        if (rc == FD_AGAIN) {
            /* "sent a response header over 16k", or the stream ended */
            v->stage = window == bufsize ? ST_TOO_BIG : ST_HEADER;
            break;
        }
        if (rc == FD_ERROR) {
            assert(err != NULL);
            v->stage = ST_HEADER;
            break;
        }
        assert(hlen >= 4 && hlen <= have);
        assert(memcmp(s + hlen - 4, "\r\n\r\n", 4) == 0);
        /* an exact copy, as the proxy parses its pool copy */
        h = malloc(hlen);
        assert(h != NULL);
        memcpy(h, s, hlen);
        if (fd_http_parse_response(&rs, h, hlen, &err) != FD_OK) {
            assert(err != NULL);
            v->stage = ST_PARSE;
            v->err = err;
            free(h);
            break;
        }
        check_accepted(&rs, h, hlen);
        v->hlen = hlen;
        v->status = rs.status;
        v->version = rs.version;
        v->content_length = rs.content_length;
        v->chunked = rs.chunked;
        v->conn_close = rs.conn_close;
        v->conn_keepalive = rs.conn_keepalive;
        v->nfields = rs.nfields;
        v->ntok = rs.ntok;
        v->upgrade_off = rs.upgrade.data ? (size_t)(rs.upgrade.data - h) : 0;
        v->upgrade_len = rs.upgrade.len;
        free(h);
        pos += hlen;
        v->end = pos;
        if (rs.status < 200 && rs.status != 101)
            continue; /* interim: the final response follows */
        if (rs.status == 101)
            break; /* a tunnel: the rest is not HTTP */
        if (header_only || rs.status == 204 || rs.status == 304)
            continue;
        if (rs.chunked) {
            body_chunked(d + pos, n - pos, split, v);
            if (v->body_rc != FD_DONE) {
                v->stage = ST_BODY;
                v->end = 0;
                break;
            }
            pos += v->end;
            v->end = pos;
        } else if (rs.content_length >= 0) {
            if ((uint64_t)rs.content_length > n - pos) {
                v->stage = ST_BODY;
                break;
            }
            v->body_len = (size_t)rs.content_length;
            pos += v->body_len;
            v->end = pos;
        } else {
            v->body_len = n - pos; /* up to the close */
            break;
        }
    }
    free(f);
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    verdict_t whole[MAX_RESPS], split[MAX_RESPS];
    unsigned nw, ns, i, max_fields;
    size_t bufsize;
    int header_only;
    uint32_t seed;
    char *buf;

    if (size < 5)
        return 0;
    max_fields = (data[0] & 1) ? 4 : 128;
    header_only = (data[0] & 2) != 0;
    bufsize = (data[0] & 4) ? 256 : 16384;
    memcpy(&seed, data + 1, 4);
    data += 5;
    size -= 5;
    /* a heap copy of exactly the input: reads past it are caught */
    buf = malloc(size ? size : 1);
    assert(buf != NULL);
    memcpy(buf, data, size);

    nw = run(buf, size, max_fields, header_only, bufsize, 0, whole);
    rng_state = seed;
    ns = run(buf, size, max_fields, header_only, bufsize, 1, split);
    assert(nw == ns);
    for (i = 0; i < nw; i++) {
        verdict_t *a = &whole[i], *b = &split[i];
        /* read in pieces, a bare LF can be refused before the header's
         * end arrives; whole, the parse refuses the same line */
        if (b->stage == ST_HEADER && a->stage == ST_PARSE)
            continue;
        if (memcmp(a, b, sizeof(*a)) != 0) {
            fprintf(stderr, "response %u: whole stage %d (%s) hlen %zu "
                    "end %zu, split stage %d (%s) hlen %zu end %zu\n", i,
                    a->stage, a->err ? a->err : "-", a->hlen, a->end,
                    b->stage, b->err ? b->err : "-", b->hlen, b->end);
            abort();
        }
    }
    free(buf);
    return 0;
}
