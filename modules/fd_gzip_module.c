/*
 * gzip: a response filter that compresses, for clients that accept it
 * (gzip, or brotli: br before gzip at equal q, each with its own keys),
 * complete responses (memory buffers and file ranges) and streamed ones
 * (the proxy's, chunked or of a known length from the upstream) as they
 * flow.
 *
 * Complete responses up to GZIP_WHOLE_MAX: the response filter, run
 * before the header is written, compresses the body fastd holds whole
 * (fd_resp_get_pieces) into one buffer of the request's memory
 * (Content-Length becomes the compressed size). Longer ones: the filter
 * sets a body filter (fd_resp_body_filter), and fastd feeds the body
 * through it in pieces as the client takes the output, a bounded amount a
 * loop turn; no piece is a flush point, and the body goes chunked
 * (close-delimited for HTTP/1.0). So a
 * large file costs one deflate state and the output queue's high-water
 * mark, whatever its size, and never holds the loop. Files are read with
 * pread() through a per-worker 64 KB buffer.
 *
 * Streamed responses (the proxy's, fd_resp_write's): the response filter
 * drops Content-Length (fastd then chunk-encodes for HTTP/1.1 or closes
 * after the body for 1.0) and sets a body filter, which feeds
 * each piece to deflate and queues the output in pieces of at most
 * GZIP_OUT_SIZE, copied by the engine; a stream holds no buffer of its
 * own. The engine's high-water mark still pauses the producer, so a slow
 * client slows the upstream read. Each call of the filter ends with a
 * Z_SYNC_FLUSH, so what the upstream sent reaches the client without
 * waiting for more (server-sent events through buffering = off). The
 * price is a worse ratio when the pieces are small: the proxy hands what
 * it has read, up to 16 KB a call, and against one deflate of the whole
 * body that costs about 0.4% more bytes with 16 KB pieces, 2% with 4 KB
 * and 7% with 1 KB (level 1 or 6 alike).
 *
 * Both codings go through one path: an encoder (fd_gzip.h) is a state
 * and a feed() that writes through fd_gzip_emit(), to the output queue or
 * to the buffer of a complete response; deflate is below, brotli in
 * fd_gzip_brotli.c (its state, about 2 MB at quality 5 with its 64 KB
 * window, lives as long as the response, since brotli cannot reset one).
 *
 * Deflate state: ~260 KB each (zlib's default window and memLevel). A
 * short complete response uses one while it is compressed, a long or
 * streamed one until its last piece. Given back, they stay on a
 * per-worker free list of up to GZIP_KEEP (deflateReset on reuse), so a
 * steady load allocates none. A response whose client leaves (or whose
 * producer fails) returns its state through a cleanup of the request's
 * (fd_req_cleanup), which runs when the connection goes.
 *
 * Not compressed: a status other than 200, 403 and 404 (nginx's three), a
 * Content-Encoding already set, a range (206 or Content-Range), a body
 * (or a streamed response's Content-Length) below gzip_min_length, a type
 * not in gzip_types, a client whose Accept-Encoding refuses gzip. A streamed
 * response of unknown length is compressed whatever its size. A HEAD gets
 * the header its GET would (Content-Encoding, Vary, the weak ETag), with
 * no length: that is known only once compressed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

#include "fd_gzip.h"

/* Complete bodies up to this are compressed at once, before the header,
 * and keep a Content-Length; longer ones go through the body filter in
 * the engine's pieces (~1 ms of deflate each at level 1). */
#define GZIP_WHOLE_MAX (32 * 1024)
#define GZIP_READ_SIZE (64 * 1024)
/* idle deflate states a worker keeps (~260 KB each) */
#define GZIP_KEEP 8

/* fd_api_conf_error(), then FD_ERROR */
#define CONF_ERROR(...) (fd_api_conf_error(__VA_ARGS__), FD_ERROR)
#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* one coding's keys */
typedef struct {
    int enable;
    const char **types_in;    /* as configured, words split in init_conf */
    unsigned ntypes_in;
    fd_str_t *types;
    unsigned ntypes;
    int any_type;             /* *_types = * */
    uint64_t min_length;
    int64_t level;
} coding_conf_t;

typedef struct {
    coding_conf_t gzip;
    coding_conf_t br;
} gzip_conf_t;

typedef struct zstate_s {
    z_stream zs;
    int level;
    struct zstate_s *next;    /* on the free list */
} zstate_t;

/* a response compressed through its body filter, in its memory */
typedef struct {
    const fd_gzip_encoder_t *enc;
    void *st;                 /* the encoder's state, NULL once given back */
    unsigned complete:1;      /* a complete body fed by the engine */
} gzip_ctx_t;

static zstate_t *zfree;       /* the worker's idle deflate states */
static unsigned nzfree;
static unsigned zkeep = GZIP_KEEP; /* 0 once the worker exits */
static int zfailed;           /* deflateInit2() failed: logged once */
static char *rbuf;            /* file read buffer */
char fd_gzip_scratch[FD_GZIP_OUT_SIZE]; /* encoder output, copied on */

/* Every text type conf/mime.types ships (a .js file is text/javascript
 * there, RFC 9239), the older names proxied applications still send for
 * the same content, and the XML and JSON formats; what nginx's usual
 * gzip_types and Caddy's encode default take. Binary formats stay out,
 * text/event-stream too: a stream of events must not wait in deflate. */
static const char *default_types[] = {
    "text/html", "text/css", "text/javascript", "application/javascript",
    "application/x-javascript", "application/json", "text/plain",
    "image/svg+xml", "text/xml", "application/xml", "application/xhtml+xml",
    "application/ld+json", "application/manifest+json",
    "application/atom+xml", "application/rss+xml", "text/csv",
    "text/markdown", "text/calendar", "text/vtt", "text/x-component",
    "text/vnd.wap.wml"};

/* gzip_types, brotli_types: the lines the module keeps */
static int gzip_set(void *conf, const char *key, const char *v, int own)
{
    gzip_conf_t *gc = conf;
    coding_conf_t *cc = key[0] == 'g' ? &gc->gzip : &gc->br;
    const char **more;

    (void)own; /* the lists add up, inherited and own */
    more = fd_api_conf_alloc((cc->ntypes_in + 1) * sizeof(*more));
    if (more == NULL)
        return CONF_ERROR("out of memory");
    if (cc->ntypes_in)
        memcpy(more, cc->types_in, cc->ntypes_in * sizeof(*more));
    more[cc->ntypes_in++] = v;
    cc->types_in = more;
    return FD_OK;
}

/* The types: the default list, then every *_types line inherited and
 * this level's (the README's "lists add up": a location that names one
 * more type keeps the defaults). */
static int init_types(coding_conf_t *cc)
{
    unsigned i, n = NELEMS(default_types);
    char *tok, *save, *copy;
    size_t len;

    for (i = 0; i < cc->ntypes_in; i++)
        n += (unsigned)strlen(cc->types_in[i]) / 2 + 1;
    cc->types = fd_api_conf_alloc(n * sizeof(fd_str_t));
    if (cc->types == NULL)
        return CONF_ERROR("out of memory");
    cc->ntypes = 0;
    for (i = 0; i < NELEMS(default_types); i++)
        cc->types[cc->ntypes++] = (fd_str_t){strlen(default_types[i]),
                                             default_types[i]};
    for (i = 0; i < cc->ntypes_in; i++) {
        len = strlen(cc->types_in[i]);
        if ((copy = fd_api_conf_alloc(len + 1)) == NULL)
            return CONF_ERROR("out of memory");
        memcpy(copy, cc->types_in[i], len + 1);
        for (tok = strtok_r(copy, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save)) {
            if (strcmp(tok, "*") == 0)
                cc->any_type = 1;
            cc->types[cc->ntypes++] = (fd_str_t){strlen(tok), tok};
        }
    }
    return FD_OK;
}

static int gzip_init_conf(void *conf)
{
    gzip_conf_t *gc = conf;

    if (gc->gzip.level < 1 || gc->gzip.level > 9) {
        fd_api_conf_at_key(gc, "gzip_level");
        return CONF_ERROR("\"gzip_level\" must be 1..9, not \"%lld\"",
                          (long long)gc->gzip.level);
    }
    if (fd_api_conf_bounds(gc, "brotli_level", gc->br.level, 0, 11, 0) !=
            FD_OK ||
        init_types(&gc->gzip) != FD_OK || init_types(&gc->br) != FD_OK)
        return FD_ERROR;
    return FD_OK;
}

/* --- deflate, the gzip encoder --- */

static void zstate_free(zstate_t *z)
{
    deflateEnd(&z->zs);
    free(z);
}

/* A deflate state at level: an idle one reset, or a new one. NULL when
 * zlib cannot have the memory: the response goes uncompressed. */
static void *zstate_get(int level, size_t size_hint)
{
    zstate_t *z = zfree;

    (void)size_hint;
    if (z) {
        zfree = z->next;
        nzfree--;
        if (deflateReset(&z->zs) != Z_OK) {
            zstate_free(z);
            return NULL;
        }
    } else {
        z = calloc(1, sizeof(*z));
        /* windowBits 15 + 16: the gzip wrapper; memLevel 8: zlib's default */
        if (z == NULL || deflateInit2(&z->zs, level, Z_DEFLATED, 15 + 16, 8,
                                      Z_DEFAULT_STRATEGY) != Z_OK) {
            if (!zfailed)
                fd_api_log(FD_API_LOG_ERR, 0, "gzip: deflateInit2() failed, "
                           "responses go uncompressed while it does");
            zfailed = 1;
            free(z);
            return NULL;
        }
        z->level = level;
    }
    if (z->level != level) {
        /* right after the reset nothing is pending, so this only sets */
        if (deflateParams(&z->zs, level, Z_DEFAULT_STRATEGY) != Z_OK) {
            zstate_free(z);
            return NULL;
        }
        z->level = level;
    }
    return z;
}

static void zstate_put(void *st, int reuse)
{
    zstate_t *z = st;

    if (!reuse || nzfree >= zkeep) {
        zstate_free(z);
        return;
    }
    z->next = zfree;
    zfree = z;
    nzfree++;
}

static int zfeed(void *st, const void *data, size_t len, int op,
                 fd_gzip_out_t *out)
{
    z_stream *zs = &((zstate_t *)st)->zs;
    int flush = op == FD_GZIP_FINISH  ? Z_FINISH
                : op == FD_GZIP_FLUSH ? Z_SYNC_FLUSH
                                      : Z_NO_FLUSH;
    int rc;

    zs->next_in = (Bytef *)(uintptr_t)data;
    zs->avail_in = (uInt)len;
    for (;;) {
        size_t n;

        zs->next_out = (Bytef *)fd_gzip_scratch;
        zs->avail_out = FD_GZIP_OUT_SIZE;
        rc = deflate(zs, flush);
        if (rc == Z_STREAM_ERROR)
            return FD_ERROR;
        if ((n = FD_GZIP_OUT_SIZE - zs->avail_out) > 0 &&
            fd_gzip_emit(out, fd_gzip_scratch, n) != FD_OK)
            return FD_ERROR;
        /* room left: all input taken and the flush done */
        if (flush == Z_FINISH ? rc == Z_STREAM_END
                              : zs->avail_in == 0 && zs->avail_out > 0)
            return FD_OK;
        if (rc == Z_BUF_ERROR && zs->avail_out > 0)
            return FD_ERROR; /* no progress possible */
    }
}

static size_t zbound(void *st, size_t len)
{
    return deflateBound(&((zstate_t *)st)->zs, (uLong)len) + 64;
}

static const fd_gzip_encoder_t deflate_encoder = {
    .coding = {4, "gzip"},
    .open = zstate_get,
    .close = zstate_put,
    .feed = zfeed,
    .bound = zbound,
};

static void gzip_exit_worker(void)
{
    while (zfree) {
        zstate_t *z = zfree;
        zfree = z->next;
        zstate_free(z);
    }
    nzfree = 0;
    zkeep = 0; /* streams that end later free theirs */
    free(rbuf);
    rbuf = NULL;
}

/* --- the filter --- */

int fd_gzip_emit(fd_gzip_out_t *out, const void *p, size_t n)
{
    if (out->r)
        return fd_resp_filter_output(out->r, p, n);
    if (n > out->room)
        return FD_ERROR; /* beyond bound(): never */
    memcpy(out->dst, p, n);
    out->dst += n;
    out->room -= n;
    return FD_OK;
}

static int type_matches(const coding_conf_t *cc, fd_str_t ct)
{
    size_t n = 0;
    unsigned i;

    if (cc->any_type)
        return 1;
    /* the media type without parameters */
    while (n < ct.len && ct.data[n] != ';' && ct.data[n] != ' ')
        n++;
    for (i = 0; i < cc->ntypes; i++)
        if (cc->types[i].len == n &&
            strncasecmp(cc->types[i].data, ct.data, n) == 0)
            return 1;
    return 0;
}

/* The codings this location would use for a body of len bytes of the
 * response's type (len < 0: unknown, a stream), FD_API_ENC_* bits. */
static unsigned codings_for(const gzip_conf_t *gc, fd_str_t ct, int64_t len)
{
    unsigned set = 0;

    if (gc->gzip.enable && type_matches(&gc->gzip, ct) &&
        (len < 0 || (uint64_t)len >= gc->gzip.min_length))
        set |= FD_API_ENC_GZIP;
    if (gc->br.enable && type_matches(&gc->br, ct) &&
        (len < 0 || (uint64_t)len >= gc->br.min_length))
        set |= FD_API_ENC_BR;
    return set;
}

/* Vary: Accept-Encoding, unless a Vary already names it. */
static int add_vary(fd_request_t *r)
{
    static const fd_str_t vary = {4, "Vary"}, ae = {15, "Accept-Encoding"};
    fd_str_t v;
    unsigned i;

    for (i = 0; (v = fd_resp_get_header(r, "Vary", i)).data; i++)
        if (memmem(v.data, v.len, "ccept-", 6) ||
            (v.len == 1 && v.data[0] == '*'))
            return FD_OK;
    return fd_resp_header_static(r, vary, ae);
}

/* One piece of a body into the encoder (no flush); files through rbuf. */
static int feed_piece(const fd_gzip_encoder_t *enc, void *st,
                      const fd_api_piece_t *p, fd_gzip_out_t *out)
{
    int64_t pos, end;

    if (p->fd < 0)
        return enc->feed(st, p->data, p->len, FD_GZIP_RUN, out);
    if (rbuf == NULL && (rbuf = malloc(GZIP_READ_SIZE)) == NULL)
        return FD_ERROR;
    for (pos = p->offset, end = p->offset + (int64_t)p->len; pos < end;) {
        size_t want = end - pos < GZIP_READ_SIZE ? (size_t)(end - pos)
                                                 : GZIP_READ_SIZE;
        ssize_t n = pread(p->fd, rbuf, want, (off_t)pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_api_log(FD_API_LOG_ERR, n < 0 ? errno : 0,
                       "gzip: pread() failed");
            return FD_ERROR;
        }
        if (enc->feed(st, rbuf, (size_t)n, FD_GZIP_RUN, out) != FD_OK)
            return FD_ERROR;
        pos += n;
    }
    return FD_OK;
}

static int compress_body(fd_request_t *r, const fd_gzip_encoder_t *enc,
                         void *st, size_t total, const fd_api_piece_t *in,
                         unsigned n, fd_str_t *out)
{
    fd_gzip_out_t o = {0};
    size_t bound = enc->bound(st, total);
    char *dst;
    unsigned i;

    if (bound == 0 || (dst = fd_req_alloc(r, bound)) == NULL)
        return FD_ERROR;
    o.dst = dst;
    o.room = bound;
    for (i = 0; i < n; i++)
        if (feed_piece(enc, st, &in[i], &o) != FD_OK)
            return FD_ERROR;
    if (enc->feed(st, NULL, 0, FD_GZIP_FINISH, &o) != FD_OK)
        return FD_ERROR;
    *out = (fd_str_t){(size_t)(o.dst - dst), dst};
    return FD_OK;
}

/* The response is now encoded: say so; other bytes than the original's,
 * so ranges no longer apply and the validator becomes weak (as nginx
 * does). */
static int set_encoded(fd_request_t *r, const fd_gzip_encoder_t *enc)
{
    static const fd_str_t ce = {16, "Content-Encoding"};

    if (fd_resp_header_static(r, ce, enc->coding) != FD_OK)
        return FD_ERROR;
    fd_resp_remove_header(r, "Accept-Ranges");
    return fd_resp_weaken_etag(r);
}

/* The coding the client takes among set, its encoder and its level. */
static const fd_gzip_encoder_t *choose(fd_request_t *r, const gzip_conf_t *gc,
                                       unsigned set, int *level)
{
    unsigned c = fd_req_accept_encoding(r, set);

    if (c == FD_API_ENC_BR) {
        *level = (int)gc->br.level;
        return &fd_gzip_brotli;
    }
    *level = (int)gc->gzip.level;
    return c == FD_API_ENC_GZIP ? &deflate_encoder : NULL;
}

/* --- streamed responses --- */

/* Pool cleanup: a stream that did not reach its end gives its state back
 * (the client left, or the producer failed). */
static void stream_cleanup(void *data)
{
    gzip_ctx_t *x = data;

    if (x->st) {
        x->enc->close(x->st, 1);
        x->st = NULL;
    }
}

/* The body filter: each piece through the encoder, then a flush (every
 * call of a streamed body is a flush point); finish on the last. The
 * pieces of a complete body need no flush: nothing waits for them, and
 * the encoder compresses better across them. */
static int gzip_body(fd_request_t *r, const fd_api_piece_t *in, unsigned n,
                     int last)
{
    gzip_ctx_t *x = fd_req_get_ctx_of(r, FD_API_SELF);
    fd_gzip_out_t o = {.r = r};
    unsigned i;
    int fed = 0;

    if (x == NULL || x->st == NULL)
        return FD_ERROR;
    for (i = 0; i < n; i++) {
        if (in[i].len == 0)
            continue;
        fed = 1;
        if (feed_piece(x->enc, x->st, &in[i], &o) != FD_OK)
            goto failed;
    }
    if ((last || (fed && !x->complete)) &&
        x->enc->feed(x->st, NULL, 0, last ? FD_GZIP_FINISH : FD_GZIP_FLUSH,
                     &o) != FD_OK)
        goto failed;
    if (last) {
        x->enc->close(x->st, 1);
        x->st = NULL;
    }
    return FD_OK;

failed:
    /* fastd cuts the response; a state in an unknown state is not worth
     * keeping */
    fd_api_log(FD_API_LOG_ERR, 0, "gzip: %s of a streamed response failed",
               x->enc->coding.data);
    x->enc->close(x->st, 0);
    x->st = NULL;
    return FD_ERROR;
}

/* Compress the body as it goes through the body filter: a streamed one,
 * or a complete one fastd feeds in pieces. */
static int filter_start(fd_request_t *r, const fd_gzip_encoder_t *enc,
                        int level, int complete)
{
    int64_t len = fd_resp_get_length(r);
    gzip_ctx_t *x = fd_req_alloc(r, sizeof(*x));
    int rc;

    if (x == NULL)
        return FD_ERROR;
    *x = (gzip_ctx_t){.enc = enc};
    if (fd_req_set_ctx_of(r, FD_API_SELF, x) != FD_OK ||
        fd_req_cleanup(r, stream_cleanup, x) != FD_OK)
        return FD_ERROR;
    if ((x->st = enc->open(level, len > 0 ? (size_t)len : 0)) == NULL)
        return FD_OK; /* uncompressed */
    x->complete = (unsigned)complete;
    rc = fd_resp_body_filter(r, gzip_body);
    if (rc == FD_DECLINED) {
        /* no room in the chain: uncompressed */
        enc->close(x->st, 1);
        x->st = NULL;
        return FD_OK;
    }
    if (rc != FD_OK)
        return FD_ERROR; /* the cleanup gives the state back */
    return set_encoded(r, enc);
}

/* Already encoded, or a range of the body: left alone (looked at once
 * the type and length call for compression: the headers are a walk) */
static int encoded(fd_request_t *r)
{
    return fd_resp_get_header(r, "Content-Encoding", 0).data != NULL ||
           fd_resp_get_header(r, "Content-Range", 0).data != NULL;
}

/* A streamed response: a known length below *_min_length is left alone,
 * an unknown one (chunked) is compressed. */
static int stream_start(fd_request_t *r, const gzip_conf_t *gc)
{
    const fd_gzip_encoder_t *enc;
    unsigned set = codings_for(gc, fd_resp_get_content_type(r),
                               fd_resp_get_length(r));
    int level;

    if (set == 0 || encoded(r))
        return FD_OK;
    if (add_vary(r) != FD_OK)
        return FD_ERROR;
    /* a body filter already set (sub_filter) comes before gzip's */
    if (fd_resp_is_header_only(r) ||
        (enc = choose(r, gc, set, &level)) == NULL)
        return FD_OK;
    return filter_start(r, enc, level, 0);
}

static int gzip_filter(fd_request_t *r)
{
    const fd_gzip_encoder_t *enc;
    const gzip_conf_t *gc = fd_req_conf_of(r, FD_API_SELF);
    fd_api_piece_t local[8], *in = local;
    fd_str_t out, ct;
    size_t total = 0;
    unsigned set, n, i;
    int has_file = 0, level, rc, status;
    void *st;

    if (gc == NULL || (!gc->gzip.enable && !gc->br.enable))
        return FD_OK;
    status = fd_resp_get_status(r);
    ct = fd_resp_get_content_type(r);
    if ((status != 200 && status != 403 && status != 404) || ct.len == 0)
        return FD_OK;
    if (fd_resp_is_streamed(r))
        return stream_start(r, gc);
    n = fd_resp_get_pieces(r, local, NELEMS(local));
    if (n > NELEMS(local)) {
        if ((in = fd_req_alloc(r, n * sizeof(*in))) == NULL)
            return FD_ERROR;
        fd_resp_get_pieces(r, in, n);
    }
    for (i = 0; i < n; i++) {
        total += in[i].len;
        has_file |= in[i].fd >= 0;
    }
    /* a HEAD has no body here: the length says what the GET would send */
    if (fd_resp_is_header_only(r) && fd_resp_get_length(r) >= 0)
        total = (size_t)fd_resp_get_length(r);
    if ((set = codings_for(gc, ct, (int64_t)total)) == 0 || encoded(r))
        return FD_OK;
    /* from here on the response depends on Accept-Encoding */
    if (add_vary(r) != FD_OK)
        return FD_ERROR;
    if ((enc = choose(r, gc, set, &level)) == NULL)
        return FD_OK;
    if (fd_resp_is_header_only(r)) {
        /* the GET's header: encoded, of a length known only once
         * compressed, so none is sent (as nginx) */
        fd_resp_length_unknown(r);
        return set_encoded(r, enc);
    }
    /* long, or transformed by a body filter before gzip's (sub_filter):
     * compressed as it is fed */
    if (total > GZIP_WHOLE_MAX || fd_resp_has_body_filter(r))
        return filter_start(r, enc, level, 1);
    if ((st = enc->open(level, total)) == NULL)
        return FD_OK;
    rc = compress_body(r, enc, st, total, in, n, &out);
    enc->close(st, rc == FD_OK);
    if (rc != FD_OK) {
        /* the body is untouched: send it as it is */
        fd_api_log(FD_API_LOG_ERR, 0, "gzip: %s of %zu bytes%s failed",
                   enc->coding.data, total, has_file ? " of a file" : "");
        return FD_OK;
    }
    if (fd_resp_body_static(r, out.data, out.len) != FD_OK)
        return FD_ERROR;
    return set_encoded(r, enc);
}

#define GZ(f) offsetof(gzip_conf_t, gzip.f)
#define BR(f) offsetof(gzip_conf_t, br.f)

static const fd_api_key_t gzip_keys[] = {
    {.name = "gzip", .type = FD_API_FLAG, .offset = GZ(enable),
     .def = "off",
     .doc = "on: compress responses for clients that accept gzip, complete "
            "ones and streamed ones (proxied) as they flow"},
    {.name = "gzip_types", .type = FD_API_LIST,
     .doc = "media types to compress besides the defaults (text/html "
            "text/css text/javascript application/javascript "
            "application/x-javascript application/json text/plain "
            "image/svg+xml text/xml application/xml application/xhtml+xml "
            "application/ld+json application/manifest+json "
            "application/atom+xml application/rss+xml text/csv "
            "text/markdown text/calendar text/vtt text/x-component "
            "text/vnd.wap.wml: every text type of conf/mime.types), "
            "repeatable, several per line, * for any; the "
            "[http], [server] and [location] lists add up, so a location "
            "that adds one keeps the others (gzip = off turns it off)"},
    {.name = "gzip_min_length", .type = FD_API_SIZE,
     .offset = GZ(min_length), .def = "256",
     .doc = "bodies shorter than this are sent uncompressed; a streamed "
            "(proxied) one goes by its Content-Length, and one of unknown "
            "length (chunked) is compressed"},
    {.name = "gzip_level", .type = FD_API_INT, .offset = GZ(level),
     .def = "1",
     .doc = "deflate level 1 (fastest) .. 9 (smallest)"},
    {.name = "brotli", .type = FD_API_FLAG, .offset = BR(enable),
     .def = "off",
     .doc = "on: compress with brotli (Content-Encoding: br) for clients "
            "that accept br, as gzip does (complete and streamed "
            "responses, the same statuses, HEAD, Vary); with gzip on too, "
            "br is chosen when the client takes both at equal q"},
    {.name = "brotli_types", .type = FD_API_LIST,
     .doc = "media types brotli compresses besides the defaults (those of "
            "gzip_types), repeatable, several per line, * for any; the "
            "lists add up as gzip_types' do"},
    {.name = "brotli_min_length", .type = FD_API_SIZE,
     .offset = BR(min_length), .def = "256",
     .doc = "bodies shorter than this are not brotli-compressed (a "
            "streamed one goes by its Content-Length, as for gzip)"},
    {.name = "brotli_level", .type = FD_API_INT, .offset = BR(level),
     .def = "5",
     .doc = "brotli quality 0 (fastest) .. 11 (smallest, far too slow on "
            "the fly); each response being compressed holds about 2 MB at "
            "4 or 5 (a 64 KB window), 1 MB at 3 and below"},
    {.name = NULL}};

static int gzip_active(const void *conf)
{
    const gzip_conf_t *gc = conf;

    return gc->gzip.enable || gc->br.enable;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "gzip",
    .keys = gzip_keys,
    .conf_size = sizeof(gzip_conf_t),
    .init_conf = gzip_init_conf,
    .exit_worker = gzip_exit_worker,
    .set = gzip_set,
    .active = gzip_active,
    .filter = gzip_filter,
};
