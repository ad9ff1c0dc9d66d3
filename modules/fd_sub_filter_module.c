/*
 * sub_filter: literal replacements in text responses, as nginx's
 * ngx_http_sub_module makes them: `sub_filter = 'FROM' 'TO'` (repeatable),
 * FROM matched without regard to ASCII case, TO with $variables, taken
 * for the request once its response is filtered.
 *
 * A response filter on the public API: it picks the responses (the type
 * in sub_filter_types, no Content-Encoding, no range, a body), drops
 * Content-Length and the validators, and sets a body filter that
 * rewrites the body as it passes, complete (a static file, fed by the
 * engine from memory and files a bounded piece at a time) or streamed (a
 * proxied answer, each read a call). Body filters chain in module order,
 * and sub_filter comes before gzip (auto/modules): gzip compresses the
 * substituted text.
 *
 * Streamed, never whole: what is held between pieces is only the tail
 * that may still begin a FROM (shorter than the longest FROM), so a
 * FROM split across chunks, reads or file pieces is found and memory
 * stays a few buffers per response whatever the body's length. One pass
 * for all patterns: a byte that begins no FROM (a 256-entry table of
 * first bytes, both cases) is skipped at once; at a byte that does, the
 * FROMs are tried in configuration order and the first that matches
 * wins (leftmost, then first configured), as nginx's list is. Output goes
 * out in runs straight from the input, small pieces gathered in a buffer
 * of the response's first, so that a body with many matches does not
 * become many tiny chunks.
 *
 * sub_filter_once = on (nginx's default): each FROM is replaced once;
 * when all have been, the rest of the body passes untouched.
 */
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <errno.h>
#include <stdlib.h>

#include <fastd.h>

#define CONF_ERROR(...) (fd_api_conf_error(__VA_ARGS__), FD_ERROR)
/* patterns a location may have: a bit each in the "replaced once" set */
#define SUBF_MAX 64
/* small output pieces are gathered up to this before going on */
#define SUBF_STAGE (16 * 1024)
#define SUBF_READ (64 * 1024)
/* up to this many bytes that begin a FROM are looked for with memchr()
 * (vectorised), more with the table a byte at a time */
#define SUBF_FB 4

typedef struct {
    fd_str_t from;                /* lowercased */
    fd_str_t to;                  /* plain text: the value */
    const fd_api_script_t *script; /* TO with variables, or NULL */
} subf_pat_t;

typedef struct {
    subf_pat_t *pats;
    unsigned npats, cap;
    int own;                      /* the [location]'s own lines */
    int once;
    int last_modified;
    const char **types_in;        /* sub_filter_types lines */
    unsigned ntypes_in;
    fd_str_t *types;
    unsigned ntypes;
    int any_type;
    size_t maxlen;                /* the longest FROM */
    uint8_t first[256];           /* 1: a FROM begins with this byte */
    /* the FROMs' first two bytes (lowercased), a bit each pair: a
     * candidate whose next byte begins no FROM is passed without trying
     * them; short1: a FROM of one byte, no such check */
    uint8_t pair[256 * 256 / 8];
    int short1;
    unsigned nfb;                 /* how many bytes begin one */
    unsigned char fb[SUBF_FB];    /* those bytes, when few */
} subf_conf_t;

/* one filtered response's state, in its memory */
typedef struct {
    const subf_conf_t *c;
    fd_str_t *to;                 /* each pattern's TO for this request */
    uint64_t done, all;           /* once: patterns replaced, all of them */
    char *hold;                   /* a tail that may begin a FROM */
    size_t hlen;
    char *win;                    /* hold + the next piece's head */
    char *stage;                  /* small output pieces, gathered */
    size_t slen;
} subf_ctx_t;

static char *rbuf;                /* the worker's file read buffer */

static const unsigned char lower[256] = {
#define L4(n) L1(n), L1(n + 1), L1(n + 2), L1(n + 3)
#define L1(n) ((n) + 32 * ((n) >= 'A' && (n) <= 'Z'))
#define L16(n) L4(n), L4(n + 4), L4(n + 8), L4(n + 12)
    L16(0), L16(16), L16(32), L16(48), L16(64), L16(80), L16(96),
    L16(112), L16(128), L16(144), L16(160), L16(176), L16(192), L16(208),
    L16(224), L16(240)
#undef L16
#undef L1
#undef L4
};

/* The next word of v at *p: quoted ('...' or "...") or up to a blank. */
static int next_word(const char **p, fd_str_t *w)
{
    const char *s = *p, *e;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '\0')
        return FD_DECLINED;
    if (*s == '\'' || *s == '"') {
        if ((e = strchr(s + 1, *s)) == NULL)
            return FD_ERROR;
        *w = (fd_str_t){(size_t)(e - s - 1), s + 1};
        *p = e + 1;
        return FD_OK;
    }
    for (e = s; *e && *e != ' ' && *e != '\t'; e++)
        ;
    *w = (fd_str_t){(size_t)(e - s), s};
    *p = e;
    return FD_OK;
}

static int set_pattern(subf_conf_t *sc, const char *v, int own)
{
    fd_str_t from, to;
    const char *p = v;
    subf_pat_t *pat, *more;
    char *f;
    size_t i;

    if (next_word(&p, &from) != FD_OK || next_word(&p, &to) != FD_OK ||
        next_word(&p, &(fd_str_t){0}) != FD_DECLINED)
        return CONF_ERROR("\"sub_filter\" takes two words, 'FROM' 'TO' "
                          "(quoted when they hold blanks), not \"%s\"", v);
    if (from.len == 0)
        return CONF_ERROR("\"sub_filter\": FROM is empty");
    /* nginx's inheritance: a level with lines of its own uses only those */
    if (own && !sc->own) {
        sc->own = 1;
        sc->npats = 0;
    }
    if (sc->npats == SUBF_MAX)
        return CONF_ERROR("at most %d \"sub_filter\" lines a location",
                          SUBF_MAX);
    if (sc->npats == sc->cap) {
        unsigned cap = sc->cap ? sc->cap * 2 : 4;

        if ((more = fd_api_conf_alloc(cap * sizeof(*more))) == NULL)
            return CONF_ERROR("out of memory");
        if (sc->npats)
            memcpy(more, sc->pats, sc->npats * sizeof(*more));
        sc->pats = more;
        sc->cap = cap;
    }
    pat = &sc->pats[sc->npats];
    if ((f = fd_api_conf_alloc(from.len + 1)) == NULL)
        return CONF_ERROR("out of memory");
    for (i = 0; i < from.len; i++)
        f[i] = (char)lower[(unsigned char)from.data[i]];
    f[from.len] = '\0';
    *pat = (subf_pat_t){.from = {from.len, f}};
    if (memchr(to.data, '$', to.len)) {
        pat->script = fd_api_script_compile(to.data, to.len, 0, "sub_filter");
        if (pat->script == NULL)
            return FD_ERROR;
    } else {
        char *t = fd_api_conf_alloc(to.len + 1);

        if (t == NULL)
            return CONF_ERROR("out of memory");
        memcpy(t, to.data, to.len);
        t[to.len] = '\0';
        pat->to = (fd_str_t){to.len, t};
    }
    sc->npats++;
    return FD_OK;
}

static int subf_set(void *conf, const char *key, const char *v, int own)
{
    subf_conf_t *sc = conf;
    const char **more;

    if (strcmp(key, "sub_filter") == 0)
        return set_pattern(sc, v, own);
    /* sub_filter_types: the lines add up, as gzip_types' do */
    if ((more = fd_api_conf_alloc((sc->ntypes_in + 1) * sizeof(*more))) ==
        NULL)
        return CONF_ERROR("out of memory");
    if (sc->ntypes_in)
        memcpy(more, sc->types_in, sc->ntypes_in * sizeof(*more));
    more[sc->ntypes_in++] = v;
    sc->types_in = more;
    return FD_OK;
}

static int subf_init_conf(void *conf)
{
    subf_conf_t *sc = conf;
    unsigned i, n = 1;
    char *tok, *save, *copy;
    size_t len;

    memset(sc->first, 0, sizeof(sc->first));
    sc->maxlen = 0;
    for (i = 0; i < sc->npats; i++) {
        unsigned char b = (unsigned char)sc->pats[i].from.data[0];

        sc->first[b] = 1;
        if (b >= 'a' && b <= 'z')
            sc->first[b - 32] = 1;
    }
    for (i = 0, sc->nfb = 0; i < 256; i++) {
        if (!sc->first[i])
            continue;
        if (sc->nfb < SUBF_FB)
            sc->fb[sc->nfb] = (unsigned char)i;
        sc->nfb++;
    }
    memset(sc->pair, 0, sizeof(sc->pair));
    sc->short1 = 0;
    for (i = 0; i < sc->npats; i++) {
        const unsigned char *f = (const unsigned char *)sc->pats[i].from.data;
        unsigned pi = (unsigned)f[0] << 8 | f[1];

        if (sc->pats[i].from.len > sc->maxlen)
            sc->maxlen = sc->pats[i].from.len;
        if (sc->pats[i].from.len == 1)
            sc->short1 = 1;
        else
            sc->pair[pi >> 3] |= (uint8_t)(1 << (pi & 7));
    }
    /* text/html always, as nginx */
    for (i = 0; i < sc->ntypes_in; i++)
        n += (unsigned)strlen(sc->types_in[i]) / 2 + 1;
    if ((sc->types = fd_api_conf_alloc(n * sizeof(fd_str_t))) == NULL)
        return CONF_ERROR("out of memory");
    sc->types[0] = (fd_str_t){9, "text/html"};
    sc->ntypes = 1;
    for (i = 0; i < sc->ntypes_in; i++) {
        len = strlen(sc->types_in[i]);
        if ((copy = fd_api_conf_alloc(len + 1)) == NULL)
            return CONF_ERROR("out of memory");
        memcpy(copy, sc->types_in[i], len + 1);
        for (tok = strtok_r(copy, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save)) {
            if (strcmp(tok, "*") == 0)
                sc->any_type = 1;
            sc->types[sc->ntypes++] = (fd_str_t){strlen(tok), tok};
        }
    }
    return FD_OK;
}

static int subf_active(const void *conf)
{
    return ((const subf_conf_t *)conf)->npats > 0;
}

/* --- the body --- */

static int flush(fd_request_t *r, subf_ctx_t *x)
{
    size_t n = x->slen;

    x->slen = 0;
    return n ? fd_resp_filter_output(r, x->stage, n) : FD_OK;
}

/* Output: long runs go on from where they are, short ones gathered. */
static int emit(fd_request_t *r, subf_ctx_t *x, const char *p, size_t n)
{
    if (n == 0)
        return FD_OK;
    if (n > SUBF_STAGE - x->slen && flush(r, x) != FD_OK)
        return FD_ERROR;
    if (n >= SUBF_STAGE / 2)
        return fd_resp_filter_output(r, p, n);
    memcpy(x->stage + x->slen, p, n);
    x->slen += n;
    return FD_OK;
}

/* The pattern matching at s (avail bytes known; end: no more after
 * them): its index, -1 none, -2 one may when more comes. Configuration
 * order decides between FROMs matching at the same place. */
static int match_at(const subf_ctx_t *x, const char *s, size_t avail,
                    int end)
{
    const subf_conf_t *c = x->c;
    const unsigned char *u = (const unsigned char *)s;
    unsigned k;
    size_t j, m;

    for (k = 0; k < c->npats; k++) {
        const fd_str_t *f = &c->pats[k].from;

        if ((x->done >> k) & 1 || (unsigned char)f->data[0] != lower[u[0]])
            continue;
        m = f->len < avail ? f->len : avail;
        for (j = 1; j < m; j++)
            if (lower[u[j]] != (unsigned char)f->data[j])
                break;
        if (j < m)
            continue;
        if (m == f->len)
            return (int)k;
        if (!end)
            return -2;
    }
    return -1;
}

static int replaced(fd_request_t *r, subf_ctx_t *x, int k)
{
    if (x->c->once)
        x->done |= (uint64_t)1 << k;
    return emit(r, x, x->to[k].data, x->to[k].len);
}

/* Filters len bytes of the body (end: the body ends with them). */
static int feed(fd_request_t *r, subf_ctx_t *x, const char *d, size_t len,
                int end)
{
    const subf_conf_t *c = x->c;
    const char *nx[SUBF_FB];
    size_t i, run, p;
    unsigned j;
    int k;

    if (x->hlen) {
        /* what was held, with enough of d to decide each of its bytes */
        size_t hlen = x->hlen, k2 = len < c->maxlen ? len : c->maxlen;
        size_t wl = hlen + k2;
        int wend = end && k2 == len;
        char *w = x->win;

        memcpy(w, x->hold, hlen);
        memcpy(w + hlen, d, k2);
        x->hlen = 0;
        for (p = run = 0; p < hlen;) {
            if (!c->first[(unsigned char)w[p]] ||
                (k = match_at(x, w + p, wl - p, wend)) == -1) {
                p++;
                continue;
            }
            if (emit(r, x, w + run, p - run) != FD_OK)
                return FD_ERROR;
            if (k == -2) {
                /* d was short: all of it is held */
                memcpy(x->hold, w + p, wl - p);
                x->hlen = wl - p;
                return FD_OK;
            }
            if (replaced(r, x, k) != FD_OK)
                return FD_ERROR;
            p += c->pats[k].from.len;
            run = p;
        }
        if (run < hlen && emit(r, x, w + run, hlen - run) != FD_OK)
            return FD_ERROR;
        /* a match begun in the hold may end in d */
        d += p - hlen;
        len -= p - hlen;
    }
    if (c->nfb <= SUBF_FB)
        for (j = 0; j < c->nfb; j++)
            nx[j] = d - 1; /* not looked for yet */
    for (i = run = 0; i < len;) {
        if (x->done == x->all)
            break; /* once: nothing left to replace */
        if (c->nfb <= SUBF_FB) {
            /* the nearest of each first byte, found again only once passed */
            const char *best = d + len;

            for (j = 0; j < c->nfb; j++) {
                if (nx[j] != NULL && nx[j] < d + i)
                    nx[j] = memchr(d + i, c->fb[j], len - i);
                if (nx[j] != NULL && nx[j] < best)
                    best = nx[j];
            }
            i = (size_t)(best - d);
        } else
            while (i < len && !c->first[(unsigned char)d[i]])
                i++;
        if (i + 1 < len && !c->short1) {
            unsigned pi = (unsigned)lower[(unsigned char)d[i]] << 8 |
                          lower[(unsigned char)d[i + 1]];

            if (!(c->pair[pi >> 3] & (1 << (pi & 7)))) {
                i++;
                continue;
            }
        }
        if (i >= len || (k = match_at(x, d + i, len - i, end)) == -1) {
            i++;
            continue;
        }
        if (emit(r, x, d + run, i - run) != FD_OK)
            return FD_ERROR;
        if (k == -2) {
            memcpy(x->hold, d + i, len - i); /* shorter than maxlen */
            x->hlen = len - i;
            return FD_OK;
        }
        if (replaced(r, x, k) != FD_OK)
            return FD_ERROR;
        i += c->pats[k].from.len;
        run = i;
    }
    return emit(r, x, d + run, len - run);
}

static int feed_piece(fd_request_t *r, subf_ctx_t *x,
                      const fd_api_piece_t *p)
{
    int64_t pos, end;

    if (p->fd < 0)
        return feed(r, x, p->data, p->len, 0);
    if (rbuf == NULL && (rbuf = malloc(SUBF_READ)) == NULL)
        return FD_ERROR;
    for (pos = p->offset, end = p->offset + (int64_t)p->len; pos < end;) {
        size_t want = end - pos < SUBF_READ ? (size_t)(end - pos) : SUBF_READ;
        ssize_t n = pread(p->fd, rbuf, want, (off_t)pos);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_api_log(FD_API_LOG_ERR, n < 0 ? errno : 0,
                       "sub_filter: pread() failed");
            return FD_ERROR;
        }
        /* rbuf is reused: what is held or gathered was copied */
        if (feed(r, x, rbuf, (size_t)n, 0) != FD_OK)
            return FD_ERROR;
        pos += n;
    }
    return FD_OK;
}

static int subf_body(fd_request_t *r, const fd_api_piece_t *in, unsigned n,
                     int last)
{
    subf_ctx_t *x = fd_req_get_ctx_of(r, FD_API_SELF);
    unsigned i;

    if (x == NULL)
        return FD_ERROR;
    for (i = 0; i < n; i++)
        if (in[i].len && feed_piece(r, x, &in[i]) != FD_OK)
            return FD_ERROR;
    /* the body's end: the held tail begins no FROM after all */
    if (last && x->hlen && feed(r, x, NULL, 0, 1) != FD_OK)
        return FD_ERROR;
    /* each call is a flush point: nothing stays gathered */
    return flush(r, x);
}

/* --- the response --- */

static int type_matches(const subf_conf_t *sc, fd_str_t ct)
{
    size_t n = 0;
    unsigned i;

    if (sc->any_type)
        return 1;
    while (n < ct.len && ct.data[n] != ';' && ct.data[n] != ' ')
        n++;
    for (i = 0; i < sc->ntypes; i++)
        if (sc->types[i].len == n &&
            strncasecmp(sc->types[i].data, ct.data, n) == 0)
            return 1;
    return 0;
}

/* Each TO for this request: plain text, or its variables' values. */
static int eval_to(fd_request_t *r, subf_ctx_t *x)
{
    const subf_conf_t *c = x->c;
    char tmp[FD_API_VAR_TMP];
    unsigned k, i, nparts;

    if ((x->to = fd_req_alloc(r, c->npats * sizeof(fd_str_t))) == NULL)
        return FD_ERROR;
    for (k = 0; k < c->npats; k++) {
        const fd_api_script_t *s = c->pats[k].script;
        size_t len = 0;
        char *p;

        if (s == NULL) {
            x->to[k] = c->pats[k].to;
            continue;
        }
        nparts = fd_api_script_parts(s);
        for (i = 0; i < nparts; i++)
            len += fd_req_script_value(r, s, i, NULL, tmp).len;
        if ((p = fd_req_alloc(r, len ? len : 1)) == NULL)
            return FD_ERROR;
        x->to[k] = (fd_str_t){len, p};
        for (i = 0; i < nparts; i++) {
            fd_str_t v = fd_req_script_value(r, s, i, NULL, tmp);

            memcpy(p, v.data, v.len);
            p += v.len;
        }
    }
    return FD_OK;
}

static int subf_filter(fd_request_t *r)
{
    const subf_conf_t *sc = fd_req_conf_of(r, FD_API_SELF);
    subf_ctx_t *x;
    int status, rc;

    if (sc == NULL || sc->npats == 0)
        return FD_OK;
    status = fd_resp_get_status(r);
    if (status < 200 || status == 204 || status == 206 || status == 304 ||
        fd_resp_get_length(r) == 0 ||
        !type_matches(sc, fd_resp_get_content_type(r)) ||
        /* compressed (a proxied answer): left as it is, as nginx does */
        fd_resp_get_header(r, "Content-Encoding", 0).data != NULL ||
        fd_resp_get_header(r, "Content-Range", 0).data != NULL)
        return FD_OK;
    /* another body, of a length known only once sent */
    if (sc->last_modified) {
        if (fd_resp_weaken_etag(r) != FD_OK)
            return FD_ERROR;
    } else
        fd_resp_remove_validators(r);
    fd_resp_remove_header(r, "Accept-Ranges");
    if (fd_resp_is_header_only(r)) {
        fd_resp_length_unknown(r);
        return FD_OK;
    }
    if ((x = fd_req_alloc(r, sizeof(*x))) == NULL)
        return FD_ERROR;
    *x = (subf_ctx_t){.c = sc,
                      .all = sc->npats == SUBF_MAX
                                 ? ~(uint64_t)0
                                 : ((uint64_t)1 << sc->npats) - 1};
    if (!sc->once)
        x->all = ~(uint64_t)0; /* never all done */
    if ((x->hold = fd_req_alloc(r, sc->maxlen)) == NULL ||
        (x->win = fd_req_alloc(r, 2 * sc->maxlen)) == NULL ||
        (x->stage = fd_req_alloc(r, SUBF_STAGE)) == NULL ||
        eval_to(r, x) != FD_OK ||
        fd_req_set_ctx_of(r, FD_API_SELF, x) != FD_OK)
        return FD_ERROR;
    rc = fd_resp_body_filter(r, subf_body);
    if (rc == FD_DECLINED) {
        fd_api_log(FD_API_LOG_WARN, 0, "sub_filter: no room for its body "
                   "filter, the response goes unchanged");
        return FD_OK;
    }
    return rc;
}

static void subf_exit_worker(void)
{
    free(rbuf);
    rbuf = NULL;
}

#define C(f) offsetof(subf_conf_t, f)

static const fd_api_key_t subf_keys[] = {
    {.name = "sub_filter", .type = FD_API_LIST,
     .doc = "'FROM' 'TO': replace FROM (literal, any ASCII case) with TO "
            "($variables allowed) in responses of sub_filter_types, "
            "proxied or static, as they stream; repeatable (at most 64), "
            "the first configured wins where two match at one place; a "
            "level with lines of its own does not inherit others"},
    {.name = "sub_filter_once", .type = FD_API_FLAG, .offset = C(once),
     .def = "on",
     .doc = "on: each FROM is replaced once a response (its first "
            "occurrence); off: every occurrence"},
    {.name = "sub_filter_types", .type = FD_API_LIST,
     .doc = "media types sub_filter rewrites besides text/html (always), "
            "repeatable, several per line, * for any; the lists add up"},
    {.name = "sub_filter_last_modified", .type = FD_API_FLAG,
     .offset = C(last_modified), .def = "off",
     .doc = "off: a rewritten response loses Last-Modified and ETag (its "
            "bytes are not the original's); on: both kept, the ETag weak"},
    {.name = NULL}};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "sub_filter",
    .keys = subf_keys,
    .conf_size = sizeof(subf_conf_t),
    .init_conf = subf_init_conf,
    .exit_worker = subf_exit_worker,
    .set = subf_set,
    .active = subf_active,
    .filter = subf_filter,
};
