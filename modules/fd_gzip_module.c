/*
 * gzip: a response filter that compresses complete responses (memory
 * buffers and file ranges) for clients that accept it.
 *
 * The filter runs before the header is written, on responses the engine
 * holds whole in r->out. It compresses into one buffer from r->pool with
 * the worker's single deflate stream (deflateReset per response, so the
 * ~256 KB of zlib state is allocated once per worker, on first use, not
 * per request).
 * Files are read with pread() through a per-worker 64 KB buffer.
 *
 * Not compressed: a status other than 200, a Content-Encoding already set,
 * a range (206 or Content-Range), a HEAD (it still gets Vary, like the GET
 * would), a body below gzip_min_length or above GZIP_MAX_BODY, a type not
 * in gzip_types, a client whose Accept-Encoding refuses gzip.
 *
 * Streamed responses (fd_http_send_header / fd_http_output, the proxy) do
 * not pass through the filters: compressing them needs an output-filter
 * hook in the engine, which does not exist yet.
 */
#include <strings.h>
#include <zlib.h>

#include "fd_core.h"
#include "fd_http.h"

/* Bodies above it are sent as they are: compressing them would hold the
 * loop for too long (~100 ms per 16 MB at level 1). */
#define GZIP_MAX_BODY (16 * 1024 * 1024)
#define GZIP_READ_SIZE (64 * 1024)

typedef struct {
    int enable;
    fd_conf_list_t types_in;  /* as configured, words split in init_conf */
    fd_str_t *types;
    unsigned ntypes;
    int any_type;             /* gzip_types = * */
    size_t min_length;
    fd_int_t level;
} gzip_conf_t;

fd_module_t fd_gzip_module;

static z_stream zs;           /* the worker's deflate stream */
static int zs_ready;           /* 1: made; -1: failed, do not retry */
static int zs_level;
static char *rbuf;            /* file read buffer */

static const char *default_types[] = {
    "text/html", "text/plain", "text/css", "application/json",
    "application/javascript", "image/svg+xml"};

static int set_level(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);

    (void)d;
    if (*end || end == v || n < 1 || n > 9)
        return fd_conf_error(cf, "\"gzip_level\" must be 1..9, not \"%s\"",
                             v);
    ((gzip_conf_t *)conf)->level = n;
    return FD_OK;
}

static int gzip_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    gzip_conf_t *gc = conf;
    unsigned i, n = 0;
    char *tok, *save, *copy;

    (void)loc;
    if (gc->types_in.n == 0) {
        gc->types = fd_palloc(cf->pool, sizeof(default_types) /
                                            sizeof(default_types[0]) *
                                            sizeof(fd_str_t));
        if (gc->types == NULL)
            return fd_conf_error(cf, "out of memory");
        for (i = 0; i < fd_nelems(default_types); i++)
            gc->types[i] = (fd_str_t){strlen(default_types[i]),
                                      default_types[i]};
        gc->ntypes = fd_nelems(default_types);
        return FD_OK;
    }
    for (i = 0; i < gc->types_in.n; i++)
        n += (unsigned)strlen(gc->types_in.items[i]) / 2 + 1;
    gc->types = fd_palloc(cf->pool, n * sizeof(fd_str_t));
    if (gc->types == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < gc->types_in.n; i++) {
        copy = fd_pstrdup(cf->pool, gc->types_in.items[i],
                          strlen(gc->types_in.items[i]));
        for (tok = strtok_r(copy, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save)) {
            if (strcmp(tok, "*") == 0)
                gc->any_type = 1;
            gc->types[gc->ntypes++] = (fd_str_t){strlen(tok), tok};
        }
    }
    return FD_OK;
}

/* The stream and read buffer, made on the first response to compress so
 * that a worker that never compresses holds none of it. */
static int zs_init(void)
{
    if (zs_ready)
        return FD_OK;
    if (zs_ready < 0)
        return FD_ERROR;
    memset(&zs, 0, sizeof(zs));
    rbuf = malloc(GZIP_READ_SIZE);
    /* windowBits 15 + 16: the gzip wrapper; memLevel 8: zlib's default */
    if (rbuf == NULL || deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8,
                                     Z_DEFAULT_STRATEGY) != Z_OK) {
        fd_log_error(FD_LOG_ALERT, 0, "gzip: deflateInit2() failed, "
                     "responses go uncompressed");
        free(rbuf);
        rbuf = NULL;
        zs_ready = -1;
        return FD_ERROR;
    }
    zs_ready = 1;
    zs_level = 1;
    return FD_OK;
}

static void gzip_exit_worker(fd_worker_t *w)
{
    (void)w;
    if (zs_ready > 0)
        deflateEnd(&zs);
    zs_ready = 0;
    free(rbuf);
    rbuf = NULL;
}

/* --- Accept-Encoding --- */

/* q-value at s ("1", "0.5", "0.000"): 0..1000, or -1 when malformed. */
static int parse_q(const char *s, const char *end)
{
    int q = 0, digits = 0;

    if (s == end || (*s != '0' && *s != '1'))
        return -1;
    q = (*s++ - '0') * 1000;
    if (s < end && *s == '.') {
        int scale = 100;
        for (s++; s < end && *s >= '0' && *s <= '9' && digits < 3; s++) {
            q += (*s - '0') * scale;
            scale /= 10;
            digits++;
        }
    }
    if (s != end || q > 1000)
        return -1;
    return q;
}

/*
 * Does Accept-Encoding allow gzip (RFC 9110 12.5.3)? gzip (or x-gzip)
 * with q > 0, or "*" with q > 0 when gzip is not named; not when identity
 * is preferred by a higher q. No header: no compression.
 */
static int accepts_gzip(fd_str_t ae)
{
    const char *p = ae.data, *end = ae.data + ae.len;
    int q_gzip = -1, q_star = -1, q_identity = -1;

    while (p < end) {
        const char *tok, *tok_end, *item_end;
        int q = 1000;

        while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p == end)
            break;
        tok = p;
        while (p < end && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
            p++;
        tok_end = p;
        item_end = memchr(p, ',', (size_t)(end - p));
        if (item_end == NULL)
            item_end = end;
        /* parameters: only q matters */
        while (p < item_end) {
            const char *v, *ve;
            while (p < item_end && (*p == ' ' || *p == '\t' || *p == ';'))
                p++;
            if (p + 1 < item_end && (p[0] == 'q' || p[0] == 'Q')) {
                const char *e = p + 1;
                while (e < item_end && (*e == ' ' || *e == '\t'))
                    e++;
                if (e < item_end && *e == '=') {
                    v = e + 1;
                    while (v < item_end && (*v == ' ' || *v == '\t'))
                        v++;
                    ve = v;
                    while (ve < item_end && *ve != ';' && *ve != ' ' &&
                           *ve != '\t')
                        ve++;
                    q = parse_q(v, ve);
                    if (q < 0)
                        q = 0; /* malformed: not acceptable */
                    p = ve;
                    continue;
                }
            }
            while (p < item_end && *p != ';')
                p++;
        }
        p = item_end;
        {
            fd_str_t t = {(size_t)(tok_end - tok), tok};
            if (fd_str_caseeq_lit(t, "gzip") || fd_str_caseeq_lit(t, "x-gzip"))
                q_gzip = fd_max(q_gzip, q);
            else if (fd_str_eq_lit(t, "*"))
                q_star = q;
            else if (fd_str_caseeq_lit(t, "identity"))
                q_identity = q;
        }
    }
    if (q_gzip < 0)
        q_gzip = q_star;
    if (q_gzip <= 0)
        return 0;
    return q_identity < 0 || q_gzip >= q_identity;
}

/* --- the filter --- */

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

static int type_matches(const gzip_conf_t *gc, fd_str_t ct)
{
    size_t n = 0;
    unsigned i;

    if (gc->any_type)
        return 1;
    /* the media type without parameters */
    while (n < ct.len && ct.data[n] != ';' && ct.data[n] != ' ')
        n++;
    for (i = 0; i < gc->ntypes; i++)
        if (gc->types[i].len == n &&
            strncasecmp(gc->types[i].data, ct.data, n) == 0)
            return 1;
    return 0;
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

/* Feed len bytes to deflate, growing nothing: out was sized by
 * deflateBound(). */
static int deflate_some(const void *data, size_t len, int flush)
{
    int rc;

    zs.next_in = (Bytef *)(uintptr_t)data;
    zs.avail_in = (uInt)len;
    do {
        rc = deflate(&zs, flush);
        if (rc == Z_STREAM_ERROR || (rc == Z_BUF_ERROR && zs.avail_out == 0))
            return FD_ERROR;
    } while (zs.avail_in > 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    return FD_OK;
}

static int compress_body(fd_request_t *r, const gzip_conf_t *gc,
                         size_t total, fd_buf_t **out)
{
    fd_buf_t *b;
    uLong bound;
    char *dst;

    if (deflateReset(&zs) != Z_OK)
        return FD_ERROR;
    bound = deflateBound(&zs, (uLong)total) + 64;
    dst = fd_pnalloc(r->pool, bound);
    if (dst == NULL)
        return FD_ERROR;
    zs.next_out = (Bytef *)dst;
    zs.avail_out = (uInt)bound;
    if (gc->level != zs_level) {
        /* right after the reset nothing is pending, so this only sets */
        if (deflateParams(&zs, (int)gc->level, Z_DEFAULT_STRATEGY) != Z_OK)
            return FD_ERROR;
        zs_level = (int)gc->level;
    }
    for (b = r->out; b; b = b->next) {
        if (b->file_fd < 0) {
            if (deflate_some(b->pos, fd_buf_size(b), Z_NO_FLUSH) != FD_OK)
                return FD_ERROR;
            continue;
        }
        for (off_t pos = b->file_pos; pos < b->file_last;) {
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
            if (deflate_some(rbuf, (size_t)n, Z_NO_FLUSH) != FD_OK)
                return FD_ERROR;
            pos += n;
        }
    }
    if (deflate_some(NULL, 0, Z_FINISH) != FD_OK)
        return FD_ERROR;
    b = fd_buf_wrap(r->pool, dst, (size_t)(bound - zs.avail_out));
    if (b == NULL)
        return FD_ERROR;
    *out = b;
    return FD_OK;
}

static int gzip_filter(fd_request_t *r)
{
    gzip_conf_t *gc;
    fd_http_header_out_t **ar;
    fd_buf_t *b, *out;
    size_t total = 0;
    int has_file = 0;

    if (r->loc == NULL)
        return FD_OK;
    gc = fd_loc_conf(r->loc, &fd_gzip_module);
    if (!gc->enable || r->status != 200 || r->content_type.len == 0 ||
        !type_matches(gc, r->content_type) ||
        header_find(r, "Content-Encoding", 16) ||
        header_find(r, "Content-Range", 13))
        return FD_OK;
    for (b = r->out; b; b = b->next) {
        total += fd_buf_size(b);
        has_file |= b->file_fd >= 0;
    }
    /* a HEAD has no body here: the length says what the GET would send */
    if (r->header_only && r->content_length >= 0)
        total = (size_t)r->content_length;
    if (total < gc->min_length)
        return FD_OK;
    /* from here on the response depends on Accept-Encoding */
    if (add_vary(r) != FD_OK)
        return FD_ERROR;
    if (r->header_only || total > GZIP_MAX_BODY ||
        !accepts_gzip(r->in.accept_encoding) || zs_init() != FD_OK)
        return FD_OK;
    if (compress_body(r, gc, total, &out) != FD_OK) {
        /* the body is untouched: send it as it is */
        fd_log_error(FD_LOG_ERR, 0, "gzip: compressing %zu bytes%s failed",
                     total, has_file ? " of a file" : "");
        return FD_OK;
    }
    r->out = out;
    r->out_last = &out->next;
    out->next = NULL;
    r->content_length = (int64_t)fd_buf_size(out);
    if (fd_http_header_add(r, fd_string("Content-Encoding"),
                           fd_string("gzip")) != FD_OK)
        return FD_ERROR;
    /* other bytes than the file's: ranges no longer apply, and the
     * validator becomes weak (as nginx does) */
    if ((ar = header_find(r, "Accept-Ranges", 13)) != NULL)
        header_remove(r, ar);
    if (r->etag.len && r->etag.data[0] == '"') {
        char *w = fd_pnalloc(r->pool, r->etag.len + 2);
        if (w) {
            memcpy(w, "W/", 2);
            memcpy(w + 2, r->etag.data, r->etag.len);
            r->etag = (fd_str_t){r->etag.len + 2, w};
        }
    }
    return FD_OK;
}

static const fd_directive_t gzip_directives[] = {
    {.name = "gzip", .type = FD_CONF_FLAG,
     .offset = offsetof(gzip_conf_t, enable), .def = "off",
     .doc = "on: compress responses for clients that accept gzip (complete "
            "responses; streamed ones pass as they are)"},
    {.name = "gzip_types", .type = FD_CONF_LIST,
     .offset = offsetof(gzip_conf_t, types_in),
     .doc = "media types to compress, repeatable, several per line, * for "
            "any; [http], [server] and [location] lists add up (default "
            "text/html text/plain text/css application/json "
            "application/javascript image/svg+xml)"},
    {.name = "gzip_min_length", .type = FD_CONF_SIZE,
     .offset = offsetof(gzip_conf_t, min_length), .def = "256",
     .doc = "bodies shorter than this are sent uncompressed"},
    {.name = "gzip_level", .type = FD_CONF_CUSTOM,
     .offset = offsetof(gzip_conf_t, level), .def = "1", .set = set_level,
     .doc = "deflate level 1 (fastest) .. 9 (smallest)"},
    FD_CONF_END};

fd_module_t fd_gzip_module = {
    .name = "gzip",
    .directives = gzip_directives,
    .conf_size = sizeof(gzip_conf_t),
    .init_conf = gzip_init_conf,
    .exit_worker = gzip_exit_worker,
    .filter = gzip_filter,
};
