/*
 * The request mapping every multiplexed protocol shares (see
 * fd_http_stream.h): a stream's header block into fd_request_t, its DATA
 * into the request's body, and the response header's fields out.
 */
#include "fd_core.h"
#include "fd_http_stream.h"

int fd_http_stream_cookie(fd_request_t *r, fd_http_sreq_t *sq, fd_str_t v)
{
    size_t need, cap;
    char *d;

    if (sq->cookie.len == 0) {
        sq->cookie = v;
        sq->cookie_cap = v.len; /* v is the pool's copy */
        return FD_OK;
    }
    need = sq->cookie.len + 2 + v.len;
    d = (char *)sq->cookie.data; /* the pool's: ours */
    if (need > sq->cookie_cap) {
        cap = fd_max(need, 2 * sq->cookie_cap);
        if ((d = fd_pnalloc(r->pool, cap)) == NULL)
            return 500;
        memcpy(d, sq->cookie.data, sq->cookie.len);
        sq->cookie.data = d;
        sq->cookie_cap = cap;
    }
    memcpy(d + sq->cookie.len, "; ", 2);
    memcpy(d + sq->cookie.len + 2, v.data, v.len);
    sq->cookie.len = need;
    return FD_OK;
}

void fd_http_stream_start(fd_request_t *r, fd_http_sreq_t *sq, int no_body)
{
    fd_http_req_t *in = &r->in;

    if (sq->bad == 0 && (in->method.len == 0 || in->target.len == 0))
        sq->bad = 400;
    if (sq->bad == 0 && sq->cookie.len &&
        fd_http_req_header(in, fd_string("cookie"), sq->cookie) != FD_OK)
        sq->bad = 431;
    if (sq->bad) {
        fd_http_finalize(r, sq->bad);
        return;
    }
    if (!no_body && in->content_length < 0 && !in->ext_connect)
        in->chunked = 1; /* a body of unknown length: DATA until the end */
    fd_http_request_start(r);
}

int fd_http_sbuf_add(fd_http_sbuf_t *b, const uint8_t *data, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 16384, keep = b->len - b->pos;
        char *nb;
        /* what was taken goes from the front first */
        if (b->pos) {
            memmove(b->data, b->data + b->pos, keep);
            b->pos = 0;
            b->len = keep;
        }
        while (cap < keep + len)
            cap *= 2;
        if (cap > b->cap) {
            if ((nb = realloc(b->data, cap)) == NULL)
                return FD_ERROR;
            b->data = nb;
            b->cap = cap;
        }
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return FD_OK;
}

size_t fd_http_sbuf_take(fd_http_sbuf_t *b, char *buf, size_t size)
{
    size_t n = fd_min(size, b->len - b->pos);

    if (n == 0)
        return 0;
    memcpy(buf, b->data + b->pos, n);
    b->pos += n;
    if (b->pos == b->len)
        b->pos = b->len = 0;
    return n;
}

size_t fd_http_stream_body_take(fd_request_t *r, fd_http_sbuf_t *b)
{
    size_t n = b->len - b->pos, max = r->loc->max_body_size;

    if (n == 0)
        return 0;
    /* before the buffer is full too: a body of unknown length starts in
     * one of 4 KB (body_start), whatever max_body_size says */
    if (r->body_len + n > max) {
        fd_http_finalize(r, 413);
        return (size_t)-1;
    }
    if (r->body_len + n > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        char *nb;
        while (cap < r->body_len + n)
            cap *= 2;
        cap = fd_min(cap, max);
        if ((nb = fd_pnalloc(r->pool, cap)) == NULL) {
            fd_http_finalize(r, 500);
            return (size_t)-1;
        }
        memcpy(nb, r->body, r->body_len);
        r->body = nb;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, b->data + b->pos, n);
    r->body_len += n;
    b->pos = b->len = 0;
    return n;
}

void fd_http_stream_body_end(fd_request_t *r)
{
    if (r->in.content_length >= 0 &&
        (int64_t)r->body_len != r->in.content_length) {
        fd_http_finalize(r, 400);
        return;
    }
    r->body_rest = 0;
    r->phase = PH_HANDLER;
    fd_http_run_handler(r);
}

int fd_http_stream_abort(fd_request_t *r)
{
    if (r->feed_queued)
        fd_http_feed_unlink(r);
    if (r->on_abort && !r->response_done) {
        void (*abort)(fd_request_t *) = r->on_abort;
        r->on_abort = NULL;
        r->on_drain = NULL;
        r->on_body = NULL;
        abort(r);
        return 0;
    }
    return r->in_offload || r->async;
}

void fd_http_stream_release(fd_request_t *r, fd_http_pools_t *pp)
{
    fd_pool_t *pool = r->pool;

    if (r->feed_queued)
        fd_http_feed_unlink(r);
    r->h2 = NULL;
    if (fd_pool_blocks(pool, 2) <= 2 && pp->n < pp->max) {
        fd_pool_clear(pool);
        pp->kept[pp->n++] = pool;
    } else {
        fd_pool_destroy(pool);
    }
}

size_t fd_http_stream_rate(fd_http_rate_t *rt, fd_timer_t *t,
                           void (*wake)(fd_timer_t *t))
{
    size_t allow = fd_http_rate_allow(rt);

    if (allow == 0 && !fd_timer_armed(t)) {
        t->handler = wake;
        fd_timer_add(t, fd_http_rate_delay(rt));
    }
    return allow;
}

int fd_http_stream_hop_field(fd_str_t n)
{
    return fd_str_caseeq_lit(n, "connection") ||
           fd_str_caseeq_lit(n, "keep-alive") ||
           fd_str_caseeq_lit(n, "proxy-connection") ||
           fd_str_caseeq_lit(n, "transfer-encoding") ||
           fd_str_caseeq_lit(n, "upgrade");
}

/* left in place: lives as long as the stream */
#define NV_STABLE (FD_HTTP_NV_NO_COPY_NAME | FD_HTTP_NV_NO_COPY_VALUE)

static void nv_set(fd_http_nv_t *nv, const char *name, size_t nlen,
                   const char *value, size_t vlen, uint8_t flags)
{
    nv->name = (const uint8_t *)name;
    nv->namelen = nlen;
    nv->value = (const uint8_t *)value;
    nv->valuelen = vlen;
    nv->flags = flags;
}

/* a literal name (lower case); the value stable (NV_STABLE) or a
 * module's (0) */
#define NV_LIT(nv, lit, v, l, fl) \
    nv_set(nv, lit, sizeof(lit) - 1, v, l, \
           (uint8_t)(FD_HTTP_NV_NO_COPY_NAME | (fl)))

fd_http_nv_t *fd_http_stream_fields(fd_request_t *r, size_t *np)
{
    const fd_http_conf_t *hc = &fd_worker->cycle->http;
    fd_http_header_out_t *ho;
    fd_http_nv_t *nv;
    size_t n = 0, max = 8;
    char *p;

    for (ho = r->headers_out; ho; ho = ho->next)
        max++;
    nv = fd_palloc(r->pool, max * sizeof(*nv));
    p = fd_pnalloc(r->pool, 4 + 21 + sizeof(fd_http_date));
    if (nv == NULL || p == NULL)
        return NULL;
    /* :status, then the fields HTTP/1.1 would send, in its order */
    p[0] = (char)('0' + r->status / 100 % 10);
    p[1] = (char)('0' + r->status / 10 % 10);
    p[2] = (char)('0' + r->status % 10);
    NV_LIT(&nv[n++], ":status", p, 3, NV_STABLE);
    p += 4;
    if (hc->server_header[0] && !r->server_passed)
        NV_LIT(&nv[n++], "server", hc->server_header,
               strlen(hc->server_header), NV_STABLE);
    /* the loop's date, rewritten in place once a second: the frame is
     * encoded in this turn, or carries the next second */
    NV_LIT(&nv[n++], "date", fd_http_date, sizeof(fd_http_date) - 1,
           NV_STABLE);
    if (r->content_type.len)
        NV_LIT(&nv[n++], "content-type", r->content_type.data,
               r->content_type.len, 0);
    if (r->content_length >= 0 && r->status >= 200 && r->status != 204 &&
        r->status != 304) {
        char *e = fd_fmt_uint(p, (uint64_t)r->content_length);
        NV_LIT(&nv[n++], "content-length", p, (size_t)(e - p), NV_STABLE);
        p = e + 1;
    }
    if (r->last_modified >= 0) {
        size_t k = fd_http_time(p, r->last_modified);
        NV_LIT(&nv[n++], "last-modified", p, k, NV_STABLE);
        p += k;
    }
    if (r->etag.len)
        NV_LIT(&nv[n++], "etag", r->etag.data, r->etag.len, 0);
    for (ho = r->headers_out; ho; ho = ho->next) {
        const char *name = ho->name.data;
        uint8_t fl = 0;
        size_t i;
        if (ho->name.len == 0 || fd_http_stream_hop_field(ho->name))
            continue;
        if (fd_http_field_bad(ho->name.data, ho->name.len) ||
            fd_http_field_bad(ho->value.data, ho->value.len)) {
            fd_log_error(FD_LOG_ERR, 0, "a response header holding CR, LF "
                         "or NUL was dropped");
            continue;
        }
        /* names go lower case (RFC 9113 8.2.1, RFC 9114 4.2): copied
         * only if needed */
        for (i = 0; i < ho->name.len && fd_tolower(name[i]) == name[i]; i++)
            ;
        if (i < ho->name.len) {
            char *lc = fd_pnalloc(r->pool, ho->name.len);
            if (lc == NULL)
                return NULL;
            for (i = 0; i < ho->name.len; i++)
                lc[i] = fd_tolower(name[i]);
            name = lc;
            fl = FD_HTTP_NV_NO_COPY_NAME; /* in the pool */
        }
        /* a module's value may be a slice of a buffer it reuses or frees
         * at once (the proxy's upstream read buffer): the library copies
         * it */
        nv_set(&nv[n++], name, ho->name.len, ho->value.data, ho->value.len,
               fl);
    }
    *np = n;
    return nv;
}

int fd_http_shead_init(fd_http_shead_t *sh, fd_connection_t *c,
                       fd_http_pools_t *pp, int64_t id, int version)
{
    fd_pool_t *pool = fd_http_stream_pool(pp);

    if (pool == NULL)
        return FD_ERROR;
    if ((sh->r = fd_http_request_new(c, pool)) == NULL) {
        fd_pool_destroy(pool);
        return FD_ERROR;
    }
    sh->r->h2 = sh;
    sh->r->in.version = version;
    sh->id = id;
    return FD_OK;
}

int fd_http_shead_closed(fd_http_shead_t *sh, fd_http_consume_pt give)
{
    fd_request_t *r = sh->r;

    sh->closed = 1;
    FD_LIST_UNLINK(sh);
    fd_http_shead_drop(sh, give);
    if (r && !r->done && sh->started && fd_http_stream_abort(r)) {
        sh->orphan = 1; /* it finishes on its own: fd_h2_finish */
        return 1;
    }
    return 0;
}

fd_http_nv_t *fd_http_shead_header(fd_http_shead_t *sh, size_t *n)
{
    fd_request_t *r = sh->r;
    fd_http_nv_t *nv;

    if (fd_unlikely(r->loc && r->loc->limit_rate))
        fd_http_rate_start(&sh->rate, r);
    if ((nv = fd_http_stream_fields(r, n)) == NULL)
        return NULL;
    /* a complete empty body needs no DATA */
    sh->provider = fd_http_stream_has_body(r);
    return nv;
}

int fd_http_shead_finish(fd_http_shead_t *sh, int rc)
{
    fd_request_t *r = sh->r;

    r->async = 0;
    r->on_abort = NULL;
    if (sh->orphan) {
        /* its stream went while the module worked: nothing to answer */
        if (r->response_done)
            fd_http_access_count(r); /* it was answered early */
        return 1;
    }
    if (!r->done)
        fd_http_finalize(r, rc); /* answered early: only the end */
    return 0;
}

ssize_t fd_http_shead_pull(fd_http_shead_t *sh, char *buf, size_t size,
                           fd_http_consume_pt consume)
{
    size_t n = fd_http_sbuf_take(&sh->ib, buf, size);

    if (n == 0)
        return sh->in_ended ? 0 : FD_AGAIN;
    /* the window opens by what was taken: the upload's pace is the
     * reader's */
    consume(sh, n);
    return (ssize_t)n;
}
