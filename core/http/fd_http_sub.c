/*
 * Subrequests: a request of the engine's own making, for a request r (its
 * parent), to a location of r's server: routed, through the location's
 * access phase and handler as any request (a proxy to an auth service,
 * usually), but its response is not sent. Its status and header stay in
 * it for the one who asked (sub_done), which is told at the end of the
 * loop turn its response ended, never from inside the handler: the
 * handler may still be on the stack, and the parent's hook that started
 * it has returned by then.
 *
 * What it is: a GET of the given path, without a body, on r's
 * connection, with r's header (less the body's framing fields and
 * Content-Type: nothing is sent after it), r's server and client address;
 * its target is the path ($request_uri is still r's, as in nginx's
 * subrequests). Its body is read as any response's (a proxy keeps its
 * upstream connection's framing) and goes nowhere. It is not logged nor
 * counted as a request.
 *
 * Its pool is its own: freed at the end of the turn it ended, or at once
 * when the parent goes (fd_http_subrequest_abort: its handler's on_abort
 * first). The engine's response side (fd_http_output.c) hands a
 * subrequest's end here instead of the client's connection.
 *
 * A background subrequest (fd_http_background: mirror's copies) shares
 * nothing with r: its header, its body and a connection struct standing
 * for r's are copies in its own pool, it has no parent, and nobody hears
 * of its end but its pool's clean-ups. r may end, its connection close
 * or go on to the next request, its HTTP/2 stream close, while it runs,
 * and it may end first: neither side holds a pointer into the other.
 */
#include "fd_core.h"
#include "fd_http_int.h"

static void sub_posted(void *data)
{
    fd_request_t *sr = data;

    if (sr->parent && sr->sub_done)
        sr->sub_done(sr);
    fd_pool_destroy(sr->pool);
}

void fd_http_sub_end(fd_request_t *sr, int rc)
{
    if (sr->done)
        return;
    sr->done = 1;
    sr->async = 0;
    sr->on_abort = NULL;
    sr->on_drain = NULL;
    sr->on_body = NULL;
    if (rc != FD_OK && rc != FD_DONE && !sr->header_sent)
        sr->status = rc >= 100 && rc <= 599 ? rc : 500;
    else if (rc != FD_OK && rc != FD_DONE && sr->status < 400)
        sr->status = 502; /* cut after its header: it did not complete */
    if (sr->status == 0)
        sr->status = 200;
    fd_event_post(sr->sub_post);
}

/* r's header fields for the subrequest: all but those of a body (with
 * one: but its framing, which the subrequest's own length replaces) */
static int sub_headers(fd_request_t *sr, const fd_http_req_t *in, int body)
{
    fd_http_header_t *hs;
    unsigned i, n = 0;

    hs = fd_palloc(sr->pool, (in->nheaders + 1) * sizeof(*hs));
    if (hs == NULL)
        return FD_ERROR;
    for (i = 0; i < in->nheaders; i++) {
        fd_str_t name = in->headers[i].name;
        if (fd_str_caseeq_lit(name, "content-length") ||
            fd_str_caseeq_lit(name, "transfer-encoding") ||
            (!body && fd_str_caseeq_lit(name, "content-type")) ||
            fd_str_caseeq_lit(name, "expect"))
            continue;
        hs[n++] = in->headers[i];
    }
    sr->in.headers = hs;
    sr->in.nheaders = n;
    sr->in.headers_cap = n;
    return FD_OK;
}

/* A request for r to path, in a pool of its own, its header still r's
 * (sr->in = r->in) and not yet run; NULL: out of memory. */
static fd_request_t *sub_new(fd_request_t *r, fd_str_t path)
{
    fd_pool_t *pool;
    fd_request_t *sr;
    char *p;

    if ((pool = fd_pool_create(4096)) == NULL)
        return NULL;
    if ((sr = fd_http_request_new(r->c, pool)) == NULL ||
        (sr->sub_post = fd_pcalloc(pool, sizeof(*sr->sub_post))) == NULL ||
        (p = fd_pnalloc(pool, path.len + 1)) == NULL) {
        fd_pool_destroy(pool);
        return NULL;
    }
    sr->in = r->in;
    sr->in.pool = pool;
    sr->in.expect_continue = 0;
    /* it asks, it never becomes a tunnel (WebSocket, RFC 8441's too) */
    sr->in.conn_upgrade = 0;
    sr->in.upgrade = fd_null_string;
    sr->in.ext_connect = 0;
    memcpy(p, path.data, path.len);
    p[path.len] = '\0';
    sr->path = (fd_str_t){path.len, p};
    sr->sub_post->handler = sub_posted;
    sr->sub_post->data = sr;
    sr->server = r->server;
    sr->realip = r->realip;
    sr->start_msec = fd_current_msec;
    return sr;
}

/* Its path, escaped (path_raw) */
static int sub_path_raw(fd_request_t *sr)
{
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, sr->pool, sr->path.len + 16) != FD_OK)
        return FD_ERROR;
    fd_sbuf_add_escaped_path(&sb, sr->path.data, sr->path.len);
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    sr->in.path_raw = fd_sbuf_str(&sb);
    sr->in.path_plain = 0;
    return FD_OK;
}

fd_request_t *fd_http_subrequest(fd_request_t *r, fd_str_t path,
                                 void (*done)(fd_request_t *sr), void *data)
{
    fd_request_t *sr;

    /* its header slices are r's: r's must stay where they are while r
     * waits (HTTP/1.1 reads on into the buffer behind it) */
    if (!r->h2 && !r->header_pinned && fd_http_request_pin(r) != FD_OK)
        return NULL;
    if ((sr = sub_new(r, path)) == NULL)
        return NULL;
    sr->in.method = fd_string("GET");
    sr->in.method_id = FD_HTTP_GET;
    sr->in.content_length = -1;
    sr->in.chunked = 0;
    sr->in.content_type = fd_null_string;
    sr->in.query = fd_null_string;
    /* its own target ($request_uri reads its parent's) */
    if (sub_headers(sr, &r->in, 0) != FD_OK || sub_path_raw(sr) != FD_OK) {
        fd_pool_destroy(sr->pool);
        return NULL;
    }
    sr->in.target = sr->in.path_raw;
    sr->parent = r;
    sr->sub_done = done;
    sr->sub_data = data;
    sr->loc = fd_http_find_location(sr);
    fd_http_request_run(sr);
    return sr;
}

/*
 * The connection a background subrequest reads: r's peer, listener and
 * ids, nothing that is r's socket's (no descriptor: -1, no TLS state).
 * Its client address is resolved now (a PROXY header's is kept by the
 * descriptor, which may be another connection's by the time it asks).
 */
static fd_connection_t *sub_connection(fd_pool_t *pool,
                                       const fd_connection_t *c)
{
    fd_connection_t *bc = fd_pcalloc(pool, sizeof(*bc));
    fd_addr_t a;

    if (bc == NULL)
        return NULL;
    bc->s.ev.fd = -1;
    bc->s.tp = &fd_transport_tcp;
    bc->s.nodelay = 1; /* no socket to set it on */
    bc->requests = c->requests;
    bc->id = c->id;
    bc->ls_index = c->ls_index;
    bc->state = FD_CONN_BUSY;
    fd_connection_addr(c, &a);
    bc->family = a.family;
    bc->port = a.port;
    memcpy(bc->addr, a.addr, sizeof(bc->addr));
    return bc;
}

fd_request_t *fd_http_background(fd_request_t *r, fd_str_t path,
                                 fd_http_loc_t *to, unsigned flags)
{
    int body = (flags & FD_SUB_BODY) && r->body && r->body_len > 0;
    fd_request_t *sr;
    fd_addr_t *ra = NULL;

    if ((sr = sub_new(r, to ? r->path : path)) == NULL)
        return NULL;
    if (fd_http_req_copy(&sr->in, &r->in, sr->pool) != FD_OK ||
        sub_headers(sr, &sr->in, body) != FD_OK ||
        (sr->c = sub_connection(sr->pool, r->c)) == NULL ||
        (r->realip && (ra = fd_palloc(sr->pool, sizeof(*ra))) == NULL))
        goto failed;
    sr->in.expect_continue = 0;
    sr->in.conn_upgrade = 0;
    sr->in.upgrade = fd_null_string;
    sr->in.ext_connect = 0;
    sr->in.chunked = 0;
    sr->in.content_length = body ? (int64_t)r->body_len : -1;
    if (!body)
        sr->in.content_type = fd_null_string;
    /* routed by path; its target stays r's (a copy of it) */
    if (sub_path_raw(sr) != FD_OK)
        goto failed;
    if (ra) {
        *ra = *r->realip;
        sr->realip = ra;
    }
    if (body) {
        if ((sr->body = fd_pnalloc(sr->pool, r->body_len)) == NULL)
            goto failed;
        memcpy(sr->body, r->body, r->body_len);
        sr->body_len = r->body_len;
        sr->body_cap = r->body_len;
        sr->body_whole = 1;
    }
    sr->header_pinned = 1; /* nothing of it is in a read buffer */
    sr->loc = to ? to : fd_http_find_location(sr);
    return sr;

failed:
    fd_pool_destroy(sr->pool);
    return NULL;
}

void fd_http_background_run(fd_request_t *sr)
{
    fd_http_request_run(sr);
}

void fd_http_subrequest_abort(fd_request_t *sr)
{
    sr->parent = NULL; /* nobody to tell now */
    if (sr->done)
        return; /* its end is posted: it only frees then */
    if (sr->feed_queued)
        fd_http_feed_unlink(sr);
    if (sr->on_abort) {
        void (*abort)(fd_request_t *) = sr->on_abort;
        sr->on_abort = NULL;
        abort(sr);
    } else if (sr->in_offload || sr->async) {
        /* a handler that cannot be stopped finishes on its own: its end
         * (fd_http_sub_end) frees it then */
        return;
    }
    fd_pool_destroy(sr->pool);
}
