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

/* r's header fields for the subrequest: all but those of a body */
static int sub_headers(fd_request_t *sr, const fd_request_t *r)
{
    fd_http_header_t *hs;
    unsigned i, n = 0;

    hs = fd_palloc(sr->pool, (r->in.nheaders + 1) * sizeof(*hs));
    if (hs == NULL)
        return FD_ERROR;
    for (i = 0; i < r->in.nheaders; i++) {
        fd_str_t name = r->in.headers[i].name;
        if (fd_str_caseeq_lit(name, "content-length") ||
            fd_str_caseeq_lit(name, "transfer-encoding") ||
            fd_str_caseeq_lit(name, "content-type") ||
            fd_str_caseeq_lit(name, "expect"))
            continue;
        hs[n++] = r->in.headers[i];
    }
    sr->in.headers = hs;
    sr->in.nheaders = n;
    sr->in.headers_cap = n;
    return FD_OK;
}

fd_request_t *fd_http_subrequest(fd_request_t *r, fd_str_t path,
                                 void (*done)(fd_request_t *sr), void *data)
{
    fd_pool_t *pool;
    fd_request_t *sr;
    fd_sbuf_t sb;
    char *p;

    /* its header slices are r's: r's must stay where they are while r
     * waits (HTTP/1.1 reads on into the buffer behind it) */
    if (!r->h2 && !r->header_pinned && fd_http_request_pin(r) != FD_OK)
        return NULL;
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
    sr->in.method = fd_string("GET");
    sr->in.method_id = FD_HTTP_GET;
    sr->in.content_length = -1;
    sr->in.chunked = 0;
    sr->in.expect_continue = 0;
    sr->in.content_type = fd_null_string;
    sr->in.query = fd_null_string;
    /* it asks, it never becomes a tunnel (WebSocket, RFC 8441's too) */
    sr->in.conn_upgrade = 0;
    sr->in.upgrade = fd_null_string;
    sr->in.ext_connect = 0;
    if (sub_headers(sr, r) != FD_OK || fd_sbuf_init(&sb, pool, path.len + 16)
                                           != FD_OK) {
        fd_pool_destroy(pool);
        return NULL;
    }
    memcpy(p, path.data, path.len);
    p[path.len] = '\0';
    sr->path = (fd_str_t){path.len, p};
    fd_sbuf_add_escaped_path(&sb, p, path.len);
    if (fd_sbuf_failed(&sb)) {
        fd_pool_destroy(pool);
        return NULL;
    }
    /* its own target ($request_uri reads its parent's) */
    sr->in.path_raw = fd_sbuf_str(&sb);
    sr->in.target = sr->in.path_raw;
    sr->in.path_plain = 0;
    sr->parent = r;
    sr->sub_done = done;
    sr->sub_data = data;
    sr->sub_post->handler = sub_posted;
    sr->sub_post->data = sr;
    sr->server = r->server;
    sr->realip = r->realip;
    sr->start_msec = fd_current_msec;
    sr->loc = fd_http_find_location(sr);
    fd_http_request_run(sr);
    return sr;
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
