/*
 * HTTP/2 to upstreams: the upstream engine's mux (fd_upstream_proto.h).
 *
 * A worker keeps, per server (peer->mux) and TLS client, a few
 * connections (h2_connections), each an nghttp2 client session whose
 * bytes go through fastd's own non-blocking stream (fd_stream_recv/send:
 * TCP or TLS, epoll or io_uring). A request's try is a stream on one of
 * them: the first with room under the server's MAX_CONCURRENT_STREAMS, a
 * new connection while fewer than h2_connections are open, else the
 * least busy (nghttp2 queues the stream until one of its others ends).
 *
 * What stays the engine's (fd_upstream_req.c): picking the server, the
 * tries, next_upstream, passive health, failing. What is here: the
 * connections, their frames, and each stream's timer.
 *
 * Back-pressure both ways is HTTP/2's flow control:
 *   - the request body is pulled from the client only when nghttp2 asks
 *     for DATA (the upstream's window has room); none there yet defers
 *     the stream, and the client's next bytes resume it (r->on_body);
 *   - the response's DATA is handed to the client at once (the engine
 *     copies it), but the stream's window is given back only as the
 *     client takes it (automatic window updates are off): a paused
 *     stream holds at most H2_WINDOW bytes past the client's high water.
 *
 * Lifetimes: a stream struct (malloc'd) lives until nghttp2 is done with
 * its id (on_stream_close, or a HEADERS never sent), or its connection
 * dies; the request lets go of it earlier (detach: a reset unless it had
 * ended). nghttp2's callbacks may call the engine's verbs, which may end
 * the request or start a try on another stream (nghttp2 allows submits
 * from callbacks), but never the connection's I/O: that is posted and
 * runs after the callbacks returned. A connection dies only outside its
 * session's calls; its memory goes in its posted handler.
 *
 * The request header is the module's HTTP/1.1 block (u->hdr, built once
 * with its header rules), mapped here: the request line to :method and
 * :path, Host to :authority, hop-by-hop fields dropped, names lower case.
 */
#include <nghttp2/nghttp2.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_ssl.h"
#include "fd_upstream_proto.h"

#define H2_WINDOW (256 * 1024)  /* a stream's receive window */
#define H2_CONN_WINDOW (1 << 30) /* the streams' windows bound it */
#define H2_ASSUMED_STREAMS 100  /* a new connection's share of streams
                                 * before the server's SETTINGS came */
#define H2_MAX_FIELDS 128       /* in a response header or its trailer */
#define H2_MAX_NV 160           /* request fields */
#define H2_WRITE 32768          /* frames gathered into one write */

typedef struct h2u_conn_s h2u_conn_t;
typedef struct h2u_stream_s h2u_stream_t;

struct h2u_conn_s {
    fd_upstream_conn_t *uc;
    nghttp2_session *ss;
    fd_upstream_peer_t *peer;
    const void *key;            /* the TLS client it was made for */
    h2u_conn_t *next, **prev;   /* peer->mux */
    h2u_stream_t *streams;      /* every stream nghttp2 knows of */
    unsigned nstreams;
    fd_msec_t idle_since;
    fd_posted_t post;
    char *wbuf;                 /* frames not yet written */
    size_t wpos, wlen, wcap;
    unsigned posted:1;
    unsigned ready:1;           /* connected, handshaken (ALPN h2) */
    unsigned settings:1;        /* the server's SETTINGS came */
    unsigned goaway:1;          /* no new streams on it */
    unsigned dead:1;            /* its memory goes in the posted handler */
    unsigned pinged:1;          /* a PING waits for its ACK */
    unsigned failing:1;         /* a stream's fail waits (conn_posted) */
};

struct h2u_stream_s {
    fd_upstream_req_t *u;       /* NULL: the request let go of it */
    h2u_conn_t *hc;
    int32_t id;
    h2u_stream_t *next, **prev; /* hc->streams */
    fd_timer_t timer;
    uint32_t deadline;          /* 0: none (the client's output is full) */
    size_t unconsumed;          /* DATA the client has not taken yet */
    fd_http_header_t *f;        /* the header block being received */
    unsigned nf;
    int status;
    int fail;                   /* a status to fail with (conn_posted) */
    unsigned deferred:1;        /* its body waits for the client */
    unsigned closed:1;          /* nghttp2 is done with it */
    unsigned header:1;          /* the response header came */
    unsigned end:1;             /* the response is complete */
    unsigned toomany:1;         /* a header block past H2_MAX_FIELDS */
};

static nghttp2_session_callbacks *callbacks;
static nghttp2_option *options;
static char rbuf[65536];

static h2u_conn_t *conn_open(fd_upstream_req_t *u);
static void conn_post(h2u_conn_t *hc);
static void conn_fail(h2u_conn_t *hc, int err, const char *what);
static void stream_arm(h2u_stream_t *hs);

/* --- streams -------------------------------------------------------------- */

static void stream_unlink(h2u_stream_t *hs)
{
    h2u_conn_t *hc = hs->hc;

    if (hs->prev == NULL)
        return;
    FD_LIST_UNLINK(hs);
    if (--hc->nstreams == 0) {
        hc->idle_since = fd_current_msec;
        if (hc->ready && !hc->dead)
            fd_upstream_conn_deadline(hc->uc,
                                      hc->peer->up->h2_ping_interval);
    }
}

static void stream_free(h2u_stream_t *hs)
{
    stream_unlink(hs);
    if (fd_timer_armed(&hs->timer))
        fd_timer_del(&hs->timer);
    if (hs->hc && hs->hc->goaway && hs->hc->nstreams == 0)
        conn_post(hs->hc); /* it closes there */
    free(hs);
}

static h2u_stream_t *stream_by_id(h2u_conn_t *hc, int32_t id)
{
    h2u_stream_t *hs;

    for (hs = hc->streams; hs; hs = hs->next)
        if (hs->id == id)
            return hs;
    return NULL;
}

/* The timer for what the stream waits on now (lazy: fd_stream.c's way). */
static void stream_arm(h2u_stream_t *hs)
{
    fd_upstream_req_t *u = hs->u;
    const fd_upstream_opts_t *o;
    fd_msec_t ms;
    uint32_t when;

    if (u == NULL)
        return;
    o = u->o;
    if (u->paused) {
        hs->deadline = 0; /* the client's send timeout rules */
        return;
    }
    if (!hs->hc->ready)
        ms = o->connect_timeout;
    else if (u->header_done || u->req_sent)
        ms = u->read_timeout ? u->read_timeout : o->read_timeout;
    else if (u->wait_body)
        ms = fd_worker->cycle->http.body_timeout;
    else
        ms = o->send_timeout; /* the server's window too */
    when = fd_msec32_after(ms);
    hs->deadline = when ? when : 1;
    if (!fd_timer_armed(&hs->timer) ||
        fd_msec32_diff(hs->timer.when, when) > 0) {
        if (fd_timer_armed(&hs->timer))
            fd_timer_del(&hs->timer);
        fd_timer_add(&hs->timer, ms);
    }
}

static void stream_timeout(fd_timer_t *t)
{
    h2u_stream_t *hs = (h2u_stream_t *)((char *)t -
                                        offsetof(h2u_stream_t, timer));
    fd_upstream_req_t *u = hs->u;
    int32_t left;

    if (u == NULL || hs->deadline == 0)
        return;
    left = fd_msec32_diff(hs->deadline, (uint32_t)fd_current_msec);
    if (left > 0) {
        fd_timer_add(&hs->timer, (fd_msec_t)left);
        return;
    }
    fd_log_conn_id = u->r->c->id;
    if (!hs->hc->ready) {
        fd_upstream_req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                             "connect() or the SSL handshake timed out");
    } else if (u->header_done) {
        fd_log_error(FD_LOG_ERR, ETIMEDOUT, "%s \"%s\" server %s: timed "
                     "out reading the response body", u->proto->what,
                     u->up->name, u->peer->name);
        fd_upstream_peer_failed(u->peer);
        fd_upstream_req_fail(u, u->r->header_sent ? FD_ERROR : 504);
    } else if (u->req_sent) {
        fd_upstream_req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                             "timed out reading the response header");
    } else if (u->wait_body) {
        fd_log_error(FD_LOG_INFO, 0, "client timed out sending the request "
                     "body");
        fd_upstream_req_fail(u, 408);
    } else {
        fd_upstream_req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                             "timed out sending the request (no window)");
    }
    fd_log_conn_id = 0;
}

/* The response is over before its end (a reset, a dead connection): the
 * engine's answer for where it was. FD_DONE. */
static int stream_broken(fd_upstream_req_t *u, int err, const char *what)
{
    char why[160];

    if (!u->header_done) {
        snprintf(why, sizeof(why), "%s before the response header", what);
        return fd_upstream_req_next(u, FD_UPSTREAM_NEXT_ERROR, err, why);
    }
    fd_log_error(FD_LOG_ERR, err, "%s \"%s\" server %s: %s in the middle of "
                 "the response", u->proto->what, u->up->name,
                 u->peer->name, what);
    fd_upstream_peer_failed(u->peer);
    return fd_upstream_req_fail(u, u->r->header_sent ? FD_ERROR : 502);
}

/* --- the request ---------------------------------------------------------- */

static int hop_field(const char *n, size_t len)
{
    static const struct {
        const char *name;
        size_t len;
    } hop[] = {{"connection", 10}, {"keep-alive", 10},
               {"proxy-connection", 16}, {"transfer-encoding", 17},
               {"upgrade", 7}, {"te", 2}, {"host", 4}};
    unsigned i;

    for (i = 0; i < fd_nelems(hop); i++)
        if (len == hop[i].len && memcmp(n, hop[i].name, len) == 0)
            return 1;
    return 0;
}

static void nv_set(nghttp2_nv *nv, const char *name, size_t nlen,
                   const char *value, size_t vlen)
{
    nv->name = (uint8_t *)name;
    nv->namelen = nlen;
    nv->value = (uint8_t *)value;
    nv->valuelen = vlen;
    nv->flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
}

/*
 * The module's HTTP/1.1 request header (u->hdr, in r->pool, which
 * outlives the stream's HEADERS) as HTTP/2 fields: names lowered in
 * place (the same bytes for every try). The count, or 0 when it is not
 * a header the module would have built.
 */
static size_t request_nv(fd_upstream_req_t *u, nghttp2_nv *nv, size_t max)
{
    char *p = u->hdr, *end = u->hdr + u->hdr_len, *sp, *sp2, *eol, *c, *v;
    size_t n = 4, k;

    eol = memchr(p, '\r', (size_t)(end - p));
    sp = eol ? memchr(p, ' ', (size_t)(eol - p)) : NULL;
    sp2 = sp ? memchr(sp + 1, ' ', (size_t)(eol - sp - 1)) : NULL;
    if (sp2 == NULL)
        return 0;
    nv_set(&nv[0], ":method", 7, p, (size_t)(sp - p));
    nv_set(&nv[1], ":scheme", 7, u->o->ssl ? "https" : "http",
           u->o->ssl ? 5 : 4);
    nv_set(&nv[2], ":authority", 10, u->up->name, strlen(u->up->name));
    nv_set(&nv[3], ":path", 5, sp + 1, (size_t)(sp2 - sp - 1));
    for (p = eol + 2; p < end && *p != '\r'; p = eol + 2) {
        eol = memchr(p, '\r', (size_t)(end - p));
        c = memchr(p, ':', (size_t)((eol ? eol : end) - p));
        if (eol == NULL || c == NULL)
            return 0;
        for (k = 0; p + k < c; k++)
            p[k] = fd_tolower(p[k]);
        for (v = c + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
            ;
        if ((size_t)(c - p) == 4 && memcmp(p, "host", 4) == 0) {
            nv_set(&nv[2], ":authority", 10, v, (size_t)(eol - v));
            continue;
        }
        if (hop_field(p, (size_t)(c - p)))
            continue;
        if (n == max - 1)
            return 0;
        nv_set(&nv[n++], p, (size_t)(c - p), v, (size_t)(eol - v));
    }
    if (u->proto->grpc)
        nv_set(&nv[n++], "te", 2, "trailers", 8);
    return n;
}

/* nghttp2 wants body bytes for the stream: the client's, as they come */
static ssize_t body_read(nghttp2_session *ss, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    h2u_stream_t *hs = src->ptr;
    h2u_conn_t *hc = ud;
    ssize_t n;
    int status = 0;

    (void)ss;
    (void)id;
    if (hs->u == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* reset it */
    n = fd_upstream_req_body(hs->u, (char *)buf, len, &status);
    if (n == FD_AGAIN) {
        hs->deferred = 1;
        stream_arm(hs);
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n == FD_ERROR) {
        /* failed outside nghttp2's call (conn_posted) */
        hs->fail = status;
        hc->failing = 1;
        conn_post(hc);
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n == 0)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return n;
}

/* The engine's try on u->peer: a stream on a connection to it. */
static int h2_attach(fd_upstream_req_t *u)
{
    fd_upstream_peer_t *p = u->peer;
    h2u_conn_t *hc, *best = NULL, *least = NULL;
    h2u_stream_t *hs;
    nghttp2_nv nv[H2_MAX_NV];
    nghttp2_data_provider prd;
    unsigned n = 0;
    size_t nnv;
    int32_t id;

    for (hc = p->mux; hc; hc = hc->next) {
        uint32_t max;
        if (hc->key != u->key || hc->goaway || hc->dead)
            continue;
        n++;
        max = hc->settings ? nghttp2_session_get_remote_settings(
                                 hc->ss, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)
                           : H2_ASSUMED_STREAMS;
        if (hc->nstreams < max) {
            best = hc;
            break;
        }
        if (least == NULL || hc->nstreams < least->nstreams)
            least = hc;
    }
    if (best == NULL && (n < (unsigned)u->up->h2_connections || !least)) {
        best = conn_open(u);
        if (best == NULL)
            return FD_DONE;
    } else if (best == NULL) {
        best = least; /* nghttp2 holds the stream until one ends */
    }
    hc = best;

    nnv = request_nv(u, nv, H2_MAX_NV);
    if (nnv == 0) {
        fd_log_error(FD_LOG_ERR, 0, "%s \"%s\": a request header HTTP/2 "
                     "cannot carry", u->proto->what, u->up->name);
        return fd_upstream_req_fail(u, 500);
    }
    hs = calloc(1, sizeof(*hs));
    if (hs == NULL)
        return fd_upstream_req_fail(u, 500);
    hs->u = u;
    hs->hc = hc;
    hs->timer.handler = stream_timeout;
    prd.source.ptr = hs;
    prd.read_callback = body_read;
    id = nghttp2_submit_request(hc->ss, NULL, nv, nnv,
                                u->has_body ? &prd : NULL, hs);
    if (id < 0) {
        free(hs);
        return fd_upstream_req_next(u, FD_UPSTREAM_NEXT_ERROR, 0,
                                    nghttp2_strerror(id));
    }
    hs->id = id;
    FD_LIST_LINK(&hc->streams, hs);
    hc->nstreams++;
    u->stream = hs;
    stream_arm(hs);
    conn_post(hc);
    return FD_OK;
}

/* The engine's try ends: the stream goes (reset unless it ended). */
static void h2_detach(fd_upstream_req_t *u)
{
    h2u_stream_t *hs = u->stream;
    h2u_conn_t *hc = hs->hc;
    int over = hs->end && u->req_sent; /* nghttp2 closes it by itself */

    u->stream = NULL;
    hs->u = NULL;
    if (fd_timer_armed(&hs->timer))
        fd_timer_del(&hs->timer);
    if (hs->closed || hc == NULL || hc->dead) {
        stream_free(hs);
        return;
    }
    if (hs->unconsumed) {
        nghttp2_session_consume(hc->ss, hs->id, hs->unconsumed);
        hs->unconsumed = 0;
    }
    /* a reset of a stream that ended both ways would reach the server
     * after its close: a server counting resets (a flood's sign) would
     * close the connection */
    if (!over)
        nghttp2_submit_rst_stream(hc->ss, NGHTTP2_FLAG_NONE, hs->id,
                                  hs->end ? NGHTTP2_NO_ERROR
                                          : NGHTTP2_CANCEL);
    conn_post(hc);
}

/* The client took the output, or sent more of its body. */
static void h2_resume(fd_upstream_req_t *u)
{
    h2u_stream_t *hs = u->stream;
    h2u_conn_t *hc = hs->hc;

    if (hs->closed || hc == NULL || hc->dead)
        return;
    if (hs->unconsumed && !u->paused) {
        nghttp2_session_consume(hc->ss, hs->id, hs->unconsumed);
        hs->unconsumed = 0;
        conn_post(hc);
    }
    if (hs->deferred) {
        hs->deferred = 0;
        nghttp2_session_resume_data(hc->ss, hs->id);
        conn_post(hc);
    }
    stream_arm(hs);
}

const fd_upstream_mux_t fd_upstream_h2_mux = {
    .attach = h2_attach,
    .detach = h2_detach,
    .resume = h2_resume,
};

/* --- the response: nghttp2's callbacks ------------------------------------ */

static h2u_stream_t *frame_stream(nghttp2_session *ss, int32_t id)
{
    h2u_stream_t *hs = nghttp2_session_get_stream_user_data(ss, id);

    return hs && hs->u ? hs : NULL;
}

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *frame,
                            void *ud)
{
    h2u_stream_t *hs = frame_stream(ss, frame->hd.stream_id);

    (void)ud;
    if (hs) {
        hs->nf = 0;
        hs->toomany = 0;
    }
    return 0;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *frame,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *ud)
{
    h2u_stream_t *hs = frame_stream(ss, frame->hd.stream_id);
    fd_pool_t *pool;
    char *m;

    (void)flags;
    (void)ud;
    if (hs == NULL || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
        hs->status = vlen == 3 ? (value[0] - '0') * 100 +
                                     (value[1] - '0') * 10 + (value[2] - '0')
                               : 0;
        return 0;
    }
    if (nlen && name[0] == ':')
        return 0;
    pool = hs->u->r->pool;
    if (hs->f == NULL &&
        (hs->f = fd_palloc(pool, H2_MAX_FIELDS * sizeof(*hs->f))) == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    if (hs->nf == H2_MAX_FIELDS) {
        hs->toomany = 1;
        return 0;
    }
    /* the fields outlive nghttp2's buffers: r's response keeps them */
    if ((m = fd_pnalloc(pool, nlen + vlen + 1)) == NULL)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    memcpy(m, name, nlen);
    memcpy(m + nlen, value, vlen);
    hs->f[hs->nf].name = (fd_str_t){nlen, m};
    hs->f[hs->nf++].value = (fd_str_t){vlen, m + nlen};
    return 0;
}

/* Content-Length's value (nghttp2 checked it against the DATA), -1 */
static int64_t field_length(fd_str_t v)
{
    int64_t n = 0;
    size_t i;

    if (v.len == 0 || v.len > 18)
        return -1;
    for (i = 0; i < v.len; i++) {
        if (v.data[i] < '0' || v.data[i] > '9')
            return -1;
        n = n * 10 + (v.data[i] - '0');
    }
    return n;
}

/* The response header is complete: into r by the module. */
static void response_header(h2u_stream_t *hs, int end)
{
    fd_upstream_req_t *u = hs->u;
    fd_request_t *r = u->r;
    int64_t len = -1;
    unsigned i;
    int rc;

    if (hs->status >= 100 && hs->status < 200) {
        hs->status = 0; /* interim: the final one follows */
        return;
    }
    if (hs->status < 200 || hs->toomany) {
        fd_upstream_req_invalid(u, hs->toomany ? "sent too many header "
                                                 "fields"
                                               : "sent no valid :status");
        return;
    }
    if (fd_upstream_req_header(u, hs->status) != FD_OK)
        return; /* a retry (next_upstream http_5xx), or over */
    for (i = 0; i < hs->nf; i++)
        if (fd_str_caseeq_lit(hs->f[i].name, "content-length"))
            len = field_length(hs->f[i].value);
    rc = u->proto->fields(u, hs->status, hs->f, hs->nf);
    if (rc != FD_OK) {
        fd_upstream_req_fail(u, rc);
        return;
    }
    hs->header = 1;
    u->header_done = 1;
    if (r->header_only || hs->status == 204 || hs->status == 304)
        r->content_length = r->header_only && len >= 0 ? len : -1;
    else
        r->content_length = end ? 0 : len;
    if (end) {
        /* a whole response without a body (gRPC's Trailers-Only): one
         * HEADERS that ends the stream to an HTTP/2 client, as it came */
        hs->end = 1;
        fd_upstream_req_end(u, FD_OK);
    } else if (u->proto->grpc) {
        /* a stream's metadata goes out before its first message */
        fd_upstream_req_output(u, NULL);
    } else {
        stream_arm(hs);
    }
}

/* Trailer fields: r's, for the client after the body */
static void response_trailers(h2u_stream_t *hs)
{
    fd_upstream_req_t *u = hs->u;
    fd_request_t *r = u->r;
    fd_http_header_out_t *t, **last = &r->trailers_out;
    unsigned i;

    for (i = 0; i < hs->nf; i++) {
        if ((t = fd_palloc(r->pool, sizeof(*t))) == NULL)
            break;
        t->name = hs->f[i].name;
        t->value = hs->f[i].value;
        t->next = NULL;
        *last = t;
        last = &t->next;
    }
    hs->end = 1;
    fd_upstream_req_last(u, NULL, 1);
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *frame,
                         void *ud)
{
    h2u_conn_t *hc = ud;
    h2u_stream_t *hs;
    int end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;

    switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
            hc->settings = 1;
        return 0;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            hc->pinged = 0;
        return 0;
    case NGHTTP2_GOAWAY:
        /* the streams above last_stream_id close REFUSED (again, on
         * another connection); those below finish */
        hc->goaway = 1;
        return 0;
    case NGHTTP2_HEADERS:
        if ((hs = frame_stream(ss, frame->hd.stream_id)) == NULL)
            return 0;
        hs->u->got = 1;
        fd_log_conn_id = hs->u->r->c->id;
        if (!hs->header)
            response_header(hs, end);
        else if (end)
            response_trailers(hs);
        fd_log_conn_id = 0;
        return 0;
    case NGHTTP2_DATA:
        if (end && (hs = frame_stream(ss, frame->hd.stream_id)) != NULL &&
            hs->header) {
            hs->end = 1;
            fd_log_conn_id = hs->u->r->c->id;
            fd_upstream_req_last(hs->u, NULL, 1);
            fd_log_conn_id = 0;
        }
        return 0;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *ud)
{
    h2u_stream_t *hs = frame_stream(ss, id);
    fd_upstream_req_t *u;
    fd_buf_t b = {.pos = (char *)data, .last = (char *)data + len,
                  .file_fd = -1};
    int rc;

    (void)flags;
    (void)ud;
    if (hs == NULL || !hs->header) {
        nghttp2_session_consume(ss, id, len);
        return 0;
    }
    u = hs->u;
    u->got = 1;
    fd_log_conn_id = u->r->c->id;
    rc = fd_upstream_req_output(u, &b); /* the engine copies it */
    fd_log_conn_id = 0;
    if (rc == FD_AGAIN && hs->u) {
        hs->unconsumed += len; /* given back as the client takes it */
        stream_arm(hs);
        return 0;
    }
    nghttp2_session_consume(ss, id, len);
    if (rc == FD_OK)
        stream_arm(hs);
    return 0;
}

static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *frame,
                         void *ud)
{
    h2u_stream_t *hs;

    (void)ud;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    if ((hs = frame_stream(ss, frame->hd.stream_id)) == NULL)
        return 0;
    hs->u->written = 1;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        hs->u->req_sent = 1;
    stream_arm(hs);
    return 0;
}

/* nghttp2 is done with a stream: what the request makes of it */
static void stream_ended(h2u_stream_t *hs, uint32_t code, int sent)
{
    fd_upstream_req_t *u = hs->u;
    char why[96];

    stream_unlink(hs);
    hs->closed = 1;
    if (u == NULL) {
        stream_free(hs);
        return;
    }
    /* the engine's verbs below let go of it (h2_detach frees it) */
    fd_log_conn_id = u->r->c->id;
    if (hs->fail)
        fd_upstream_req_fail(u, hs->fail);
    else if (!sent || code == NGHTTP2_REFUSED_STREAM)
        fd_upstream_req_refused(u, sent ? "refused the stream"
                                        : "the connection goes away");
    else if (hs->end)
        fd_upstream_req_last(u, NULL, 1); /* cannot be: it was over */
    else {
        snprintf(why, sizeof(why), "reset the stream (%s)",
                 nghttp2_http2_strerror(code));
        stream_broken(u, 0, why);
    }
    fd_log_conn_id = 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t code,
                           void *ud)
{
    h2u_stream_t *hs = nghttp2_session_get_stream_user_data(ss, id);

    (void)ud;
    if (hs)
        stream_ended(hs, code, 1);
    return 0;
}

/* A request's HEADERS never left: a GOAWAY came first, or it was reset
 * while nghttp2 still held it */
static int on_frame_not_send(nghttp2_session *ss, const nghttp2_frame *frame,
                             int err, void *ud)
{
    h2u_conn_t *hc = ud;
    h2u_stream_t *hs;

    (void)ss;
    (void)err;
    if (frame->hd.type != NGHTTP2_HEADERS ||
        (hs = stream_by_id(hc, frame->hd.stream_id)) == NULL)
        return 0;
    stream_ended(hs, 0, 0);
    return 0;
}

static int h2_setup(void)
{
    nghttp2_session_callbacks *cb;

    if (callbacks)
        return FD_OK;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return FD_ERROR;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
                                                              on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_frame_not_send_callback(
        cb, on_frame_not_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb,
                                                           on_stream_close);
    if (nghttp2_option_new(&options) != 0) {
        nghttp2_session_callbacks_del(cb);
        return FD_ERROR;
    }
    /* windows open only as the client takes the bytes (h2_resume) */
    nghttp2_option_set_no_auto_window_update(options, 1);
    /* the first stream alone until the server said how many it takes
     * (its SETTINGS come with its preface): a burst before that would
     * be refused, or kill the connection of a server less lenient */
    nghttp2_option_set_peer_max_concurrent_streams(options, 1);
    callbacks = cb;
    return FD_OK;
}

/* --- connections ---------------------------------------------------------- */

static void conn_event(fd_upstream_conn_t *uc);
static void conn_timeout(fd_upstream_conn_t *uc);
static void conn_posted(void *data);

/* A new connection to u->peer, for u->key; NULL when the try failed
 * (the engine's verbs were called) */
static h2u_conn_t *conn_open(fd_upstream_req_t *u)
{
    fd_upstream_peer_t *p = u->peer;
    nghttp2_settings_entry set[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_WINDOW},
    };
    fd_upstream_conn_t *uc;
    h2u_conn_t *hc;

    if (h2_setup() != FD_OK || (hc = calloc(1, sizeof(*hc))) == NULL) {
        fd_upstream_req_fail(u, 500);
        return NULL;
    }
    if (nghttp2_session_client_new2(&hc->ss, callbacks, hc, options) != 0) {
        free(hc);
        fd_upstream_req_fail(u, 500);
        return NULL;
    }
    nghttp2_submit_settings(hc->ss, NGHTTP2_FLAG_NONE, set, fd_nelems(set));
    nghttp2_session_set_local_window_size(hc->ss, NGHTTP2_FLAG_NONE, 0,
                                          H2_CONN_WINDOW);
    uc = fd_upstream_conn_open(p); /* errno set when NULL */
    if (uc == NULL) {
        int err = errno;
        nghttp2_session_del(hc->ss);
        free(hc);
        fd_upstream_req_next(u, FD_UPSTREAM_NEXT_ERROR, err,
                             "connect() failed");
        return NULL;
    }
    uc->key = u->key;
    if (u->o->ssl &&
        fd_ssl_connect(&uc->s, u->o->ssl, &p->ssl_session) != FD_OK) {
        fd_upstream_conn_close(uc);
        nghttp2_session_del(hc->ss);
        free(hc);
        fd_upstream_req_next(u, FD_UPSTREAM_NEXT_ERROR, 0,
                             "SSL_new() failed");
        return NULL;
    }
    uc->data = hc;
    uc->on_event = conn_event;
    uc->on_timeout = conn_timeout;
    hc->uc = uc;
    hc->peer = p;
    hc->key = u->key;
    hc->post.handler = conn_posted;
    hc->post.data = hc;
    FD_LIST_LINK((h2u_conn_t **)&p->mux, hc);
    /* bounded by the streams' timers meanwhile, and by this once alone */
    fd_upstream_conn_deadline(uc, u->o->connect_timeout);
    if (!uc->connecting && !u->o->ssl)
        hc->ready = 1;
    return hc;
}

static void conn_post(h2u_conn_t *hc)
{
    if (hc->posted)
        return;
    hc->posted = 1;
    fd_event_post(&hc->post);
}

/*
 * The connection is over (it failed, or it is done): its streams go to
 * the engine (again elsewhere, or failed), the socket is closed, the
 * memory goes in the posted handler. Never from inside the session.
 */
static void conn_fail(h2u_conn_t *hc, int err, const char *what)
{
    h2u_stream_t *hs;

    if (hc->dead)
        return;
    hc->dead = 1;
    *hc->prev = hc->next;
    if (hc->next)
        hc->next->prev = hc->prev;
    if (what && hc->nstreams)
        fd_log_error(FD_LOG_INFO, err, "HTTP/2 upstream \"%s\" server %s: "
                     "%s", hc->peer->up->name, hc->peer->name, what);
    while ((hs = hc->streams) != NULL) {
        fd_upstream_req_t *u = hs->u;
        stream_unlink(hs);
        hs->closed = 1;
        hs->hc = NULL;
        if (u == NULL) {
            stream_free(hs);
            continue;
        }
        fd_log_conn_id = u->r->c->id;
        if (hs->fail)
            fd_upstream_req_fail(u, hs->fail);
        else if (!hc->ready)
            fd_upstream_req_next(u, FD_UPSTREAM_NEXT_ERROR, err, what);
        else if (!u->written)
            fd_upstream_req_refused(u, what);
        else
            stream_broken(u, err, what);
        fd_log_conn_id = 0;
    }
    fd_upstream_conn_close(hc->uc);
    hc->uc = NULL;
    conn_post(hc);
}

/* Write what nghttp2 has, gathered, as far as the socket takes it. */
static void conn_write(h2u_conn_t *hc)
{
    fd_stream_t *s = &hc->uc->s;

    while (!hc->dead) {
        struct iovec iov;
        ssize_t w;

        if (hc->wpos == hc->wlen) {
            hc->wpos = hc->wlen = 0;
            while (hc->wlen < H2_WRITE) {
                const uint8_t *data;
                ssize_t n = nghttp2_session_mem_send(hc->ss, &data);
                if (n < 0) {
                    conn_fail(hc, 0, nghttp2_strerror((int)n));
                    return;
                }
                if (n == 0)
                    break;
                if (hc->wlen + (size_t)n > hc->wcap) {
                    size_t cap = fd_max(hc->wlen + (size_t)n, 2 * H2_WRITE);
                    char *b = realloc(hc->wbuf, cap);
                    if (b == NULL) {
                        conn_fail(hc, ENOMEM, "out of memory");
                        return;
                    }
                    hc->wbuf = b;
                    hc->wcap = cap;
                }
                memcpy(hc->wbuf + hc->wlen, data, (size_t)n);
                hc->wlen += (size_t)n;
            }
            if (hc->wlen == 0)
                break;
        }
        iov.iov_base = hc->wbuf + hc->wpos;
        iov.iov_len = hc->wlen - hc->wpos;
        w = fd_stream_send(s, &iov, 1, 0);
        if (w == FD_AGAIN)
            return; /* an event says when */
        if (w < 0) {
            conn_fail(hc, errno, "send() failed");
            return;
        }
        hc->wpos += (size_t)w;
    }
    if (!hc->dead && !nghttp2_session_want_read(hc->ss) &&
        !nghttp2_session_want_write(hc->ss) && hc->wpos == hc->wlen)
        conn_fail(hc, 0, "the session is over");
}

/* Read and hand to nghttp2 what the server sent. */
static void conn_read(h2u_conn_t *hc)
{
    fd_stream_t *s = &hc->uc->s;

    while (!hc->dead && (s->readable || s->eof)) {
        ssize_t n = fd_stream_recv(s, rbuf, sizeof(rbuf)), rv;
        if (n == FD_AGAIN)
            return;
        if (n == 0) {
            s->eof = 1;
            s->readable = 0;
            conn_fail(hc, 0, "the server closed the connection");
            return;
        }
        if (n < 0) {
            s->eof = 1;
            s->readable = 0;
            conn_fail(hc, s->tls ? EPROTO : errno ? errno : ECONNRESET,
                      "recv() failed");
            return;
        }
        rv = nghttp2_session_mem_recv(hc->ss, (uint8_t *)rbuf, (size_t)n);
        if (rv < 0) {
            conn_fail(hc, 0, nghttp2_strerror((int)rv));
            return;
        }
    }
}

/* Streams whose body failed from inside nghttp2's call: failed now. */
static void conn_failing(h2u_conn_t *hc)
{
    h2u_stream_t *hs;

    hc->failing = 0;
again:
    for (hs = hc->streams; hs; hs = hs->next)
        if (hs->fail && hs->u) {
            fd_upstream_req_t *u = hs->u;
            fd_log_conn_id = u->r->c->id;
            fd_upstream_req_fail(u, hs->fail); /* resets the stream */
            fd_log_conn_id = 0;
            goto again; /* the list may have changed */
        }
}

static void conn_run(h2u_conn_t *hc)
{
    fd_upstream_conn_t *uc = hc->uc;
    char why[200];
    int err, rc;

    if (!hc->ready) {
        if (uc->connecting) {
            rc = fd_upstream_conn_connected(uc, &err);
            if (rc == FD_AGAIN)
                return;
            if (rc == FD_ERROR) {
                conn_fail(hc, err, "connect() failed");
                return;
            }
        }
        rc = fd_stream_handshake(&uc->s);
        if (rc == FD_AGAIN)
            return;
        if (rc == FD_ERROR) {
            snprintf(why, sizeof(why), "SSL handshake failed: %s",
                     fd_ssl_connect_error(&uc->s));
            conn_fail(hc, 0, why);
            return;
        }
        if (uc->s.tls && !fd_str_eq_lit(fd_ssl_alpn(&uc->s), "h2")) {
            conn_fail(hc, 0, "the server did not choose h2 (ALPN)");
            return;
        }
        hc->ready = 1;
        fd_upstream_conn_deadline(uc, hc->peer->up->h2_ping_interval);
    }
    conn_read(hc);
    if (hc->failing && !hc->dead)
        conn_failing(hc);
    if (!hc->dead && hc->uc->s.writable)
        conn_write(hc);
}

static void conn_event(fd_upstream_conn_t *uc)
{
    conn_run(uc->data);
}

static void conn_posted(void *data)
{
    h2u_conn_t *hc = data;

    hc->posted = 0;
    if (!hc->dead && hc->failing)
        conn_failing(hc);
    if (!hc->dead && hc->goaway && hc->nstreams == 0)
        conn_fail(hc, 0, NULL);
    if (hc->dead) {
        if (hc->posted)
            return; /* conn_fail posted it again: next time */
        nghttp2_session_del(hc->ss);
        free(hc->wbuf);
        free(hc);
        return;
    }
    if (hc->ready && hc->uc->s.writable)
        conn_write(hc);
}

/*
 * The connection's own timer: while it connects, connect_timeout; once
 * ready, every h2_ping_interval a PING, and it is closed when the last
 * went unanswered, or when it has been idle for keepalive_timeout.
 */
static void conn_timeout(fd_upstream_conn_t *uc)
{
    h2u_conn_t *hc = uc->data;
    fd_upstream_t *up = hc->peer->up;

    if (!hc->ready) {
        if (hc->nstreams == 0)
            conn_fail(hc, ETIMEDOUT, "connect() timed out");
        else /* the streams' timers decide */
            fd_upstream_conn_deadline(uc, up->h2_ping_interval);
        return;
    }
    if (hc->pinged) {
        conn_fail(hc, ETIMEDOUT, "PING unanswered");
        return;
    }
    if (hc->nstreams == 0 && up->keepalive_timeout &&
        fd_current_msec - hc->idle_since >= up->keepalive_timeout) {
        conn_fail(hc, 0, NULL);
        return;
    }
    if (nghttp2_submit_ping(hc->ss, NGHTTP2_FLAG_NONE, NULL) == 0) {
        hc->pinged = 1;
        conn_post(hc);
    }
    fd_upstream_conn_deadline(uc, up->h2_ping_interval);
}
