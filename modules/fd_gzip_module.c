/*
 * gzip: a response filter that compresses, for clients that accept it
 * (gzip, or brotli: br before gzip at equal q, each with its own keys),
 * complete responses (memory buffers and file ranges) and streamed ones
 * (the proxy's, chunked or of a known length from the upstream) as they
 * flow.
 *
 * Complete responses up to GZIP_WHOLE_MAX: the header filter, run before
 * the header is written, compresses the body the engine holds whole in
 * r->out into one buffer from r->pool (Content-Length becomes the
 * compressed size). Longer ones: the filter sets r->body_filter, and the
 * engine feeds r->out through it in pieces as the client takes the
 * output, a bounded amount a loop turn (fd_module.h); no piece is a flush
 * point, and the body goes chunked (close-delimited for HTTP/1.0). So a
 * large file costs one deflate state and the output queue's high-water
 * mark, whatever its size, and never holds the loop. Files are read with
 * pread() through a per-worker 64 KB buffer.
 *
 * Streamed responses (fd_http_send_header / fd_http_output): the header
 * filter drops Content-Length (the engine then chunk-encodes for HTTP/1.1
 * or closes after the body for 1.0) and sets r->body_filter, which feeds
 * each piece to deflate and queues the output in pieces of at most
 * GZIP_OUT_SIZE, copied by the engine; a stream holds no buffer of its
 * own. The engine's high-water mark still pauses the producer, so a slow
 * client slows the upstream read. Each fd_http_output() call ends with a
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
 * producer fails) returns its state through a cleanup of the request
 * pool, which dies with the connection.
 *
 * Not compressed: a status other than 200, 403 and 404 (nginx's three), a
 * Content-Encoding already set, a range (206 or Content-Range), a body
 * (or a streamed response's Content-Length) below gzip_min_length, a type
 * not in gzip_types, a client whose Accept-Encoding refuses gzip. A streamed
 * response of unknown length is compressed whatever its size. A HEAD gets
 * the header its GET would (Content-Encoding, Vary, the weak ETag), with
 * no length: that is known only once compressed.
 */
#include <strings.h>
#include <zlib.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_http_accept.h"
#include "fd_gzip.h"

/* Complete bodies up to this are compressed at once, before the header,
 * and keep a Content-Length; longer ones go through the body filter in
 * the engine's pieces (~1 ms of deflate each at level 1). */
#define GZIP_WHOLE_MAX (32 * 1024)
#define GZIP_READ_SIZE (64 * 1024)
/* idle deflate states a worker keeps (~260 KB each) */
#define GZIP_KEEP 8

/* one coding's keys */
typedef struct {
    int enable;
    fd_conf_list_t types_in;  /* as configured, words split in init_conf */
    fd_str_t *types;
    unsigned ntypes;
    int any_type;             /* *_types = * */
    size_t min_length;
    fd_int_t level;
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

/* a response compressed through r->body_filter, in r->pool */
typedef struct {
    const fd_gzip_encoder_t *enc;
    void *st;                 /* the encoder's state, NULL once given back */
    unsigned complete:1;      /* a complete body fed by the engine */
} gzip_ctx_t;

fd_module_t fd_gzip_module;

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

static int set_level(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);

    (void)d;
    if (*end || end == v || n < 1 || n > 9)
        return fd_conf_error(cf, "\"gzip_level\" must be 1..9, not \"%s\"",
                             v);
    ((gzip_conf_t *)conf)->gzip.level = n;
    return FD_OK;
}

/* The types: the default list, then every *_types line inherited and
 * this level's (the README's "lists add up": a location that names one
 * more type keeps the defaults). */
static int init_types(fd_conf_t *cf, coding_conf_t *cc)
{
    unsigned i, n = fd_nelems(default_types);
    char *tok, *save, *copy;

    for (i = 0; i < cc->types_in.n; i++)
        n += (unsigned)strlen(cc->types_in.items[i]) / 2 + 1;
    cc->types = fd_palloc(cf->pool, n * sizeof(fd_str_t));
    if (cc->types == NULL)
        return fd_conf_error(cf, "out of memory");
    cc->ntypes = 0;
    for (i = 0; i < fd_nelems(default_types); i++)
        cc->types[cc->ntypes++] = (fd_str_t){strlen(default_types[i]),
                                             default_types[i]};
    for (i = 0; i < cc->types_in.n; i++) {
        copy = fd_pstrdup(cf->pool, cc->types_in.items[i],
                          strlen(cc->types_in.items[i]));
        for (tok = strtok_r(copy, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save)) {
            if (strcmp(tok, "*") == 0)
                cc->any_type = 1;
            cc->types[cc->ntypes++] = (fd_str_t){strlen(tok), tok};
        }
    }
    return FD_OK;
}

static int gzip_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    gzip_conf_t *gc = conf;

    (void)loc;
    if (init_types(cf, &gc->gzip) != FD_OK || init_types(cf, &gc->br) !=
                                                   FD_OK)
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
                fd_log_error(FD_LOG_ALERT, 0, "gzip: deflateInit2() failed, "
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
    .coding = fd_string("gzip"),
    .open = zstate_get,
    .close = zstate_put,
    .feed = zfeed,
    .bound = zbound,
};

static void gzip_exit_worker(fd_worker_t *w)
{
    (void)w;
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
    if (out->r) {
        fd_buf_t b = {.pos = (char *)(uintptr_t)p,
                      .last = (char *)(uintptr_t)p + n, .file_fd = -1};

        return fd_http_output_body(out->r, &b);
    }
    if (n > out->room)
        return FD_ERROR; /* beyond bound(): never */
    memcpy(out->dst, p, n);
    out->dst += n;
    out->room -= n;
    return FD_OK;
}

static fd_http_header_out_t **header_find(fd_request_t *r, const char *name,
                                          size_t n)
{
    fd_http_header_out_t **pp;

    for (pp = &r->headers_out; *pp; pp = &(*pp)->next)
        if (fd_str_caseeq((*pp)->name, name, n))
            return pp;
    return NULL;
}

static void header_remove(fd_request_t *r, fd_http_header_out_t **pp)
{
    fd_http_header_out_t *h = *pp;

    *pp = h->next;
    if (r->headers_out_last == &h->next)
        r->headers_out_last = pp;
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
 * response's type (len < 0: unknown, a stream), FD_ENC_* bits. */
static unsigned codings_for(const gzip_conf_t *gc, fd_str_t ct, int64_t len)
{
    unsigned set = 0;

    if (gc->gzip.enable && type_matches(&gc->gzip, ct) &&
        (len < 0 || (uint64_t)len >= gc->gzip.min_length))
        set |= FD_ENC_GZIP;
    if (gc->br.enable && type_matches(&gc->br, ct) &&
        (len < 0 || (uint64_t)len >= gc->br.min_length))
        set |= FD_ENC_BR;
    return set;
}

/* Vary: Accept-Encoding, unless a Vary already names it. */
static int add_vary(fd_request_t *r)
{
    fd_http_header_out_t *h;

    for (h = r->headers_out; h; h = h->next)
        if (fd_str_caseeq_lit(h->name, "Vary") &&
            (memmem(h->value.data, h->value.len, "ccept-", 6) ||
             fd_str_eq_lit(h->value, "*")))
            return FD_OK;
    return fd_http_header_add(r, fd_string("Vary"),
                              fd_string("Accept-Encoding"));
}

/* One buffer of a body into the encoder (no flush); files through rbuf. */
static int feed_buf(const fd_gzip_encoder_t *enc, void *st, fd_buf_t *b,
                    fd_gzip_out_t *out)
{
    off_t pos;

    if (b->file_fd < 0)
        return enc->feed(st, b->pos, fd_buf_size(b), FD_GZIP_RUN, out);
    if (rbuf == NULL && (rbuf = malloc(GZIP_READ_SIZE)) == NULL)
        return FD_ERROR;
    for (pos = b->file_pos; pos < b->file_last;) {
        size_t want = (size_t)fd_min((off_t)GZIP_READ_SIZE,
                                     b->file_last - pos);
        ssize_t n = pread(b->file_fd, rbuf, want, pos);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_log_error(FD_LOG_ERR, n < 0 ? errno : 0,
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
                         void *st, size_t total, fd_buf_t **out)
{
    fd_gzip_out_t o = {0};
    size_t bound = enc->bound(st, total);
    fd_buf_t *b;
    char *dst;

    if (bound == 0 || (dst = fd_pnalloc(r->pool, bound)) == NULL)
        return FD_ERROR;
    o.dst = dst;
    o.room = bound;
    for (b = r->out; b; b = b->next)
        if (feed_buf(enc, st, b, &o) != FD_OK)
            return FD_ERROR;
    if (enc->feed(st, NULL, 0, FD_GZIP_FINISH, &o) != FD_OK)
        return FD_ERROR;
    b = fd_buf_wrap(r->pool, dst, (size_t)(o.dst - dst));
    if (b == NULL)
        return FD_ERROR;
    *out = b;
    return FD_OK;
}

/* The response is now encoded: say so; other bytes than the original's,
 * so ranges no longer apply and the validator becomes weak (as nginx
 * does). */
static int set_encoded(fd_request_t *r, const fd_gzip_encoder_t *enc)
{
    fd_http_header_out_t **pp;

    if (fd_http_header_add(r, fd_string("Content-Encoding"), enc->coding) !=
        FD_OK)
        return FD_ERROR;
    if ((pp = header_find(r, "Accept-Ranges", 13)) != NULL)
        header_remove(r, pp);
    if (r->etag.len && r->etag.data[0] == '"') {
        char *w = fd_pnalloc(r->pool, r->etag.len + 2);
        if (w == NULL)
            return FD_ERROR;
        memcpy(w, "W/", 2);
        memcpy(w + 2, r->etag.data, r->etag.len);
        r->etag = (fd_str_t){r->etag.len + 2, w};
    }
    /* a proxied one is a header of its own */
    if ((pp = header_find(r, "ETag", 4)) != NULL && (*pp)->value.len &&
        (*pp)->value.data[0] == '"') {
        fd_str_t v = (*pp)->value;
        char *w = fd_pnalloc(r->pool, v.len + 2);
        if (w == NULL)
            return FD_ERROR;
        memcpy(w, "W/", 2);
        memcpy(w + 2, v.data, v.len);
        (*pp)->value = (fd_str_t){v.len + 2, w};
    }
    return FD_OK;
}

/* The coding the client takes among set, its encoder and its level. */
static const fd_gzip_encoder_t *choose(fd_request_t *r, const gzip_conf_t *gc,
                                       unsigned set, int *level)
{
    unsigned c = fd_http_accept_encoding(r->in.accept_encoding, set);

    if (c == FD_ENC_BR) {
        *level = (int)gc->br.level;
        return &fd_gzip_brotli;
    }
    *level = (int)gc->gzip.level;
    return c == FD_ENC_GZIP ? &deflate_encoder : NULL;
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

/* r->body_filter: each piece through the encoder, then a flush (every
 * fd_http_output() call is a flush point); finish on the last. The
 * pieces of a complete body need no flush: nothing waits for them, and
 * the encoder compresses better across them. */
static int gzip_body(fd_request_t *r, fd_buf_t *in, int last)
{
    gzip_ctx_t *x = r->mctx[fd_gzip_module.index];
    fd_gzip_out_t o = {.r = r};
    fd_buf_t *b;
    int fed = 0;

    if (x->st == NULL)
        return FD_ERROR;
    for (b = in; b; b = b->next) {
        if (fd_buf_size(b) == 0)
            continue;
        fed = 1;
        if (feed_buf(x->enc, x->st, b, &o) != FD_OK)
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
    /* the engine cuts the response; a state in an unknown state is not
     * worth keeping */
    fd_log_error(FD_LOG_ERR, 0, "gzip: %s of a streamed response failed",
                 x->enc->coding.data);
    x->enc->close(x->st, 0);
    x->st = NULL;
    return FD_ERROR;
}

/* Compress the body as it goes through r->body_filter: a streamed one,
 * or a complete one the engine feeds in pieces. */
static int filter_start(fd_request_t *r, const fd_gzip_encoder_t *enc,
                        int level, int complete)
{
    gzip_ctx_t *x;
    void **slot;

    slot = fd_request_ctx(r, &fd_gzip_module);
    x = fd_pcalloc(r->pool, sizeof(*x));
    if (slot == NULL || x == NULL)
        return FD_ERROR;
    if (fd_pool_cleanup_add(r->pool, stream_cleanup, x) == NULL)
        return FD_ERROR;
    x->enc = enc;
    if ((x->st = enc->open(level, r->content_length > 0
                                      ? (size_t)r->content_length
                                      : 0)) == NULL)
        return FD_OK; /* uncompressed */
    x->complete = (unsigned)complete;
    *slot = x;
    if (set_encoded(r, enc) != FD_OK)
        return FD_ERROR; /* the cleanup gives the state back */
    r->content_length = -1;
    r->body_filter = gzip_body;
    return FD_OK;
}

/* A streamed response: a known length below *_min_length is left alone,
 * an unknown one (chunked) is compressed. */
static int stream_start(fd_request_t *r, const gzip_conf_t *gc)
{
    const fd_gzip_encoder_t *enc;
    unsigned set = codings_for(gc, r->content_type, r->content_length);
    int level;

    if (set == 0)
        return FD_OK;
    if (add_vary(r) != FD_OK)
        return FD_ERROR;
    /* a body filter already set transforms the body: not twice */
    if (r->header_only || r->body_filter ||
        (enc = choose(r, gc, set, &level)) == NULL)
        return FD_OK;
    return filter_start(r, enc, level, 0);
}

static int gzip_filter(fd_request_t *r)
{
    const fd_gzip_encoder_t *enc;
    gzip_conf_t *gc;
    fd_buf_t *b, *out;
    size_t total = 0;
    unsigned set;
    int has_file = 0, level, rc;
    void *st;

    if (r->loc == NULL)
        return FD_OK;
    gc = fd_loc_conf(r->loc, &fd_gzip_module);
    if ((!gc->gzip.enable && !gc->br.enable) ||
        (r->status != 200 && r->status != 403 && r->status != 404) ||
        r->content_type.len == 0 ||
        header_find(r, "Content-Encoding", 16) ||
        header_find(r, "Content-Range", 13))
        return FD_OK;
    if (r->streamed)
        return stream_start(r, gc);
    for (b = r->out; b; b = b->next) {
        total += fd_buf_size(b);
        has_file |= b->file_fd >= 0;
    }
    /* a HEAD has no body here: the length says what the GET would send */
    if (r->header_only && r->content_length >= 0)
        total = (size_t)r->content_length;
    if ((set = codings_for(gc, r->content_type, (int64_t)total)) == 0)
        return FD_OK;
    /* from here on the response depends on Accept-Encoding */
    if (add_vary(r) != FD_OK)
        return FD_ERROR;
    if (r->body_filter || (enc = choose(r, gc, set, &level)) == NULL)
        return FD_OK;
    if (r->header_only) {
        /* the GET's header: encoded, of a length known only once
         * compressed, so none is sent (as nginx) */
        r->content_length = -1;
        r->length_unknown = 1;
        return set_encoded(r, enc);
    }
    if (total > GZIP_WHOLE_MAX)
        return filter_start(r, enc, level, 1);
    if ((st = enc->open(level, total)) == NULL)
        return FD_OK;
    rc = compress_body(r, enc, st, total, &out);
    enc->close(st, rc == FD_OK);
    if (rc != FD_OK) {
        /* the body is untouched: send it as it is */
        fd_log_error(FD_LOG_ERR, 0, "gzip: %s of %zu bytes%s failed",
                     enc->coding.data, total, has_file ? " of a file" : "");
        return FD_OK;
    }
    r->out = out;
    r->out_last = &out->next;
    out->next = NULL;
    r->content_length = (int64_t)fd_buf_size(out);
    return set_encoded(r, enc);
}

#define GZ(f) offsetof(gzip_conf_t, gzip.f)
#define BR(f) offsetof(gzip_conf_t, br.f)

static const fd_directive_t gzip_directives[] = {
    {.name = "gzip", .type = FD_CONF_FLAG, .offset = GZ(enable),
     .def = "off",
     .doc = "on: compress responses for clients that accept gzip, complete "
            "ones and streamed ones (proxied) as they flow"},
    {.name = "gzip_types", .type = FD_CONF_LIST, .offset = GZ(types_in),
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
    {.name = "gzip_min_length", .type = FD_CONF_SIZE,
     .offset = GZ(min_length), .def = "256",
     .doc = "bodies shorter than this are sent uncompressed; a streamed "
            "(proxied) one goes by its Content-Length, and one of unknown "
            "length (chunked) is compressed"},
    {.name = "gzip_level", .type = FD_CONF_CUSTOM, .offset = GZ(level),
     .def = "1", .set = set_level,
     .doc = "deflate level 1 (fastest) .. 9 (smallest)"},
    {.name = "brotli", .type = FD_CONF_FLAG, .offset = BR(enable),
     .def = "off",
     .doc = "on: compress with brotli (Content-Encoding: br) for clients "
            "that accept br, as gzip does (complete and streamed "
            "responses, the same statuses, HEAD, Vary); with gzip on too, "
            "br is chosen when the client takes both at equal q"},
    {.name = "brotli_types", .type = FD_CONF_LIST, .offset = BR(types_in),
     .doc = "media types brotli compresses besides the defaults (those of "
            "gzip_types), repeatable, several per line, * for any; the "
            "lists add up as gzip_types' do"},
    {.name = "brotli_min_length", .type = FD_CONF_SIZE,
     .offset = BR(min_length), .def = "256",
     .doc = "bodies shorter than this are not brotli-compressed (a "
            "streamed one goes by its Content-Length, as for gzip)"},
    {.name = "brotli_level", .type = FD_CONF_INT, .offset = BR(level),
     .def = "5", .min = 0, .max = 11,
     .doc = "brotli quality 0 (fastest) .. 11 (smallest, far too slow on "
            "the fly); each response being compressed holds about 2 MB at "
            "4 or 5 (a 64 KB window), 1 MB at 3 and below"},
    FD_CONF_END};

static int gzip_loc_active(const fd_http_loc_t *loc)
{
    const gzip_conf_t *gc = fd_loc_conf(loc, &fd_gzip_module);

    return gc->gzip.enable || gc->br.enable;
}

fd_module_t fd_gzip_module = {
    FD_MODULE_LOC(gzip, gzip_conf_t),
    .exit_worker = gzip_exit_worker,
    .filter = gzip_filter,
    .loc_active = gzip_loc_active,
};
