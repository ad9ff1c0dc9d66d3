/*
 * The HTTP/1.1 engine: read -> parse -> route -> body -> handler -> filters
 * -> write -> keep-alive or close.
 *
 * The connection is a stream (fd_stream.h): every byte goes through its
 * transport, plain TCP or TLS, and the engine never touches the socket's
 * data itself. Pipelined requests are taken one after another from the
 * read buffer and their responses appended to one output queue
 * (fd_outq_t), which is written once per batch (writev/sendfile, or one
 * SSL_write). An idle keep-alive connection gives its read
 * buffer, output buffer and pool back (http_release) and keeps only its
 * fd_connection_t.
 *
 * This file is the request side and the connection state machine; the
 * response side (header writer, error pages, the end of a request,
 * streamed bodies) is fd_http_output.c.
 */
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "fd_core.h"
#include "fd_http_int.h"
#include "fd_offload.h"
#include "fd_sendq.h"
#include "fd_ssl.h"
#ifdef FD_HTTP3
#include "fd_quic_tls.h"
#endif

#define LINGER_MSEC 2000
#define FD_HTTP_ALLOW "GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"

/*
 * Level-triggered mode only: ask for exactly the events the connection can
 * act on, or a readable socket whose request waits on a handler would wake
 * the loop forever. (Edge-triggered connections register everything once.)
 * in: LT_IN reading, LT_HUP only the peer's close (a waiting request that
 * can be aborted), LT_NONE nothing.
 */
enum { LT_NONE = 0, LT_IN = 1, LT_HUP = 2 };

int fd_http_early_on;

static uint32_t lt_events(int in, int out)
{
    return (in == LT_IN ? EPOLLIN | EPOLLRDHUP : in == LT_HUP ? EPOLLRDHUP : 0)
           | (out ? EPOLLOUT : 0);
}

static void lt_interest(fd_connection_t *c, int in, int out)
{
    if (c->s.et ||
        (c->s.lt_noin == (in != LT_IN) && c->s.lt_hup == (in == LT_HUP) &&
         c->s.lt_out == !!out))
        return;
    c->s.lt_noin = in != LT_IN;
    c->s.lt_hup = in == LT_HUP;
    c->s.lt_out = !!out;
    if (c->s.registered)
        fd_event_mod(&c->s.ev, lt_events(in, out));
}

/*
 * A connection joins epoll only when it first has to wait: with
 * TCP_DEFER_ACCEPT the request is usually readable at accept time, and a
 * "Connection: close" exchange then needs no epoll_ctl() at all. Adding a
 * socket that is already ready queues an event at once, so nothing is
 * missed between the EAGAIN and the add.
 */
static void conn_register(fd_connection_t *c)
{
    uint32_t ev;

    if (c->s.et)
        ev = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    else
        ev = lt_events(c->s.lt_noin ? (c->s.lt_hup ? LT_HUP : LT_NONE) : LT_IN,
                       c->s.lt_out);
    if (fd_event_add(&c->s.ev, ev) < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "epoll_ctl() failed");
        fd_connection_close(c);
        return;
    }
    c->s.registered = 1;
}

static void http_event(fd_event_t *ev, uint32_t events);

/* A batched send left (fd_outq_t): go on as after a writable event. */
static void http_sent(fd_outq_t *q)
{
    fd_http_conn_t *h = (fd_http_conn_t *)((char *)q -
                                           offsetof(fd_http_conn_t, out));

    /* a pipeline stopped at the output high-water mark goes on once its
     * output has left: http_after_io() looks for one only while output
     * is queued, and a batched send may have taken all of it */
    if (!h->c->h2 && fd_outq_empty(q) && h->r == NULL && !h->c->closing &&
        h->rpos < h->rlast)
        post_resume(h);
    h->c->s.ev.handler(&h->c->s.ev, 0); /* HTTP/1.1's or HTTP/2's */
}

static fd_http_conn_t *hc_free;
static unsigned hc_nfree;

static void http_process(fd_connection_t *c);
static void http_after_io(fd_connection_t *c);
static void run_handler(fd_request_t *r);
static void resume_handler(void *data);


/* --- per-connection active state --- */

static fd_http_conn_t *hc_get(fd_connection_t *c)
{
    fd_http_conn_t *h = hc_free;

    if (h) {
        hc_free = h->next_free;
        hc_nfree--;
        if (h->pool == NULL && (h->pool = fd_pool_create(4096)) == NULL) {
            h->next_free = hc_free; /* it had served HTTP/2 */
            hc_free = h;
            hc_nfree++;
            return NULL;
        }
    } else {
        h = calloc(1, sizeof(*h));
        if (h == NULL)
            return NULL;
        h->pool = fd_pool_create(4096);
        if (h->pool == NULL) {
            free(h);
            return NULL;
        }
        h->resume.handler = resume_handler;
        fd_outq_init(&h->out);
        if (fd_sendq_active())
            h->out.sent = http_sent;
    }
    h->rbuf = fd_block_get(&fd_worker->rbufs);
    if (h->rbuf == NULL) {
        h->next_free = hc_free;
        hc_free = h;
        hc_nfree++;
        return NULL;
    }
    h->rpos = h->rlast = 0;
    h->r = NULL;
    h->h2 = NULL;
    h->c = c;
    h->resume.data = h;
    c->h = h;
    return h;
}

/* Nothing received yet on this connection's current request? */
static int http_idle(fd_connection_t *c)
{
    if (c->h2)
        return fd_h2_idle(c);
    return c->h == NULL || (c->h->r == NULL && c->h->rlast == c->h->rpos);
}

/*
 * The client left (or its connection failed) while a module works on r:
 * whether the module is to finish r anyway, the connection closing after,
 * rather than be stopped through r->on_abort: one that cannot be stopped
 * (no on_abort), or one whose answer went already (a background update
 * after fd_http_respond_early(), which nginx too lets run on). A forced
 * close (a timeout, the end of a graceful stop) still calls on_abort.
 */
static int finishes_alone(const fd_request_t *r)
{
    return r->async && (r->on_abort == NULL || r->response_done);
}

static void http_release(fd_connection_t *c)
{
    fd_http_conn_t *h = c->h;

    if (h == NULL)
        return;
    if (h->h2)
        fd_h2_release(c); /* its streams and session; h goes below */
    if (h->r && h->r->feed_queued) /* r is in the pool cleared below */
        fd_http_feed_unlink(h->r);
    if (h->r && h->r->on_abort) {
        void (*abort)(fd_request_t *) = h->r->on_abort;
        h->r->on_abort = NULL;
        abort(h->r);
    }
    /* keep a few blocks with the cached state (a pipelined batch needs
     * them again); a pool that grew large gives its extra blocks back */
    if (h->pool) { /* HTTP/2 gave it back: each stream has its own */
        if (fd_pool_blocks(h->pool, 4) <= 4)
            fd_pool_clear(h->pool);
        else
            fd_pool_reset(h->pool);
    }
    if (h->rbuf)
        fd_block_put(&fd_worker->rbufs, h->rbuf);
    fd_outq_clear(&h->out);
    if (fd_unlikely(h->rate.rate)) { /* the timer is armed only then */
        if (fd_timer_armed(&h->rate_timer))
            fd_timer_del(&h->rate_timer);
        h->rate.rate = 0;
    }
    h->rbuf = NULL;
    h->r = NULL;
    c->h = NULL;
    if (hc_nfree < 1024 || h->resume_posted) { /* posted: must stay valid */
        h->next_free = hc_free;
        hc_free = h;
        hc_nfree++;
    } else {
        fd_outq_free(&h->out);
        if (h->pool)
            fd_pool_destroy(h->pool);
        free(h);
    }
}

/* --- output --- */

/* limit_rate's wait is over: go on as after a writable event */
static void rate_wake(fd_timer_t *t)
{
    fd_http_conn_t *h = (fd_http_conn_t *)((char *)t -
                                           offsetof(fd_http_conn_t,
                                                    rate_timer));

    if (h->c && h->c->h == h)
        h->c->s.ev.handler(&h->c->s.ev, 0);
}

/* A flush under limit_rate: what the rate allows, then a timer for the
 * rest (the socket may well take more: no EPOLLOUT to wait for). */
static __attribute__((noinline)) int flush_limited(fd_connection_t *c)
{
    fd_http_conn_t *h = c->h;
    size_t before = h->out.bytes, allow = fd_http_rate_allow(&h->rate);
    int rc = allow ? fd_outq_flush_max(&h->out, &c->s, allow) : FD_DONE;

    h->rate.sent += before - h->out.bytes;
    if (rc == FD_DONE && !fd_timer_armed(&h->rate_timer)) {
        h->rate_timer.handler = rate_wake;
        fd_timer_add(&h->rate_timer, fd_http_rate_delay(&h->rate));
    }
    return rc;
}

/* Write what is queued: FD_OK when empty, FD_AGAIN, or FD_ERROR. */
int fd_http_flush(fd_connection_t *c)
{
    int in = c->s.lt_noin ? (c->s.lt_hup ? LT_HUP : LT_NONE) : LT_IN;
    int rc;

    if (fd_likely(c->h->rate.rate == 0)) {
        rc = fd_outq_flush(&c->h->out, &c->s);
    } else if ((rc = flush_limited(c)) == FD_DONE) {
        /* limit_rate's timer goes on, not the socket */
        lt_interest(c, in, 0);
        fd_connection_set_timeout(c, fd_worker->cycle->http.send_timeout);
        return FD_AGAIN;
    }
    if (rc == FD_AGAIN) {
        /* a full socket waits for EPOLLOUT; a batched send for the end of
         * the turn (http_sent) */
        lt_interest(c, in, !fd_outq_batched(&c->h->out));
        fd_connection_set_timeout(c, fd_worker->cycle->http.send_timeout);
    } else if (rc == FD_OK) {
        lt_interest(c, in, 0);
    }
    return rc;
}

/* --- request data for handlers --- */

fd_str_t fd_http_var_header(fd_request_t *r, fd_str_t name)
{
    unsigned i;
    size_t j;

    for (i = 0; i < r->in.nheaders; i++) {
        fd_str_t h = r->in.headers[i].name;
        if (h.len != name.len)
            continue;
        for (j = 0; j < h.len; j++) {
            char c = fd_tolower(h.data[j]);
            if ((c == '-' ? '_' : c) != name.data[j])
                break;
        }
        if (j == h.len)
            return r->in.headers[i].value;
    }
    return fd_null_string;
}

void **fd_request_ctx(fd_request_t *r, const fd_module_t *m)
{
    if (r->mctx == NULL) {
        r->mctx = fd_pcalloc(r->pool, fd_nmodules * sizeof(void *));
        if (r->mctx == NULL)
            return NULL;
    }
    return &r->mctx[m->index];
}

/* --- connection variables --- */

enum {
    CV_SCHEME = 1, CV_HTTPS, CV_SSL_PROTOCOL, CV_SSL_CIPHER,
    CV_SSL_SERVER_NAME, CV_SSL_SESSION_REUSED, CV_SSL_CLIENT_VERIFY,
    CV_SSL_CLIENT_S_DN, CV_HTTP2, CV_HTTP2_STREAM_ID
};

static const struct {
    const char *name;
    int id;
} conn_vars[] = {
    {"scheme", CV_SCHEME},
    {"https", CV_HTTPS},
    {"ssl_protocol", CV_SSL_PROTOCOL},
    {"ssl_cipher", CV_SSL_CIPHER},
    {"ssl_server_name", CV_SSL_SERVER_NAME},
    {"ssl_session_reused", CV_SSL_SESSION_REUSED},
    {"ssl_client_verify", CV_SSL_CLIENT_VERIFY},
    {"ssl_client_s_dn", CV_SSL_CLIENT_S_DN},
    {"http2", CV_HTTP2},                     /* "h2", "h2c" or "" */
    {"http2_stream_id", CV_HTTP2_STREAM_ID}, /* "" over HTTP/1.x */
};

int fd_http_conn_var_id(const char *name, size_t len)
{
    unsigned i;

    for (i = 0; i < fd_nelems(conn_vars); i++)
        if (strlen(conn_vars[i].name) == len &&
            memcmp(conn_vars[i].name, name, len) == 0)
            return conn_vars[i].id;
    return 0;
}

/* A TLS fact of the connection: over HTTP/3 from QUIC's TLS (fd_quic_tls.c,
 * t set), over TCP from OpenSSL's (fd_ssl.c) */
#ifdef FD_HTTP3
#define TLS_FACT(quic, tcp) (t ? (quic) : (tcp))
#else
#define TLS_FACT(quic, tcp) (tcp)
#endif

fd_str_t fd_http_conn_var(fd_request_t *r, int id)
{
    fd_stream_t *s = &r->c->s;

    if (id == CV_SCHEME)
        return s->tls || r->h3 ? fd_string("https") : fd_string("http");
    if (id == CV_HTTP2)
        return r->h2 == NULL || r->h3 ? fd_null_string
               : s->tls      ? fd_string("h2")
                             : fd_string("h2c");
    if (id == CV_HTTP2_STREAM_ID) {
        char *p;
        if (r->h2 == NULL || (p = fd_pnalloc(r->pool, 12)) == NULL)
            return fd_null_string;
        return (fd_str_t){(size_t)(fd_fmt_uint(p, fd_http_stream_id(r)) - p),
                          p};
    }
#ifdef FD_HTTP3
    fd_quic_tls_t t = r->h3 ? fd_h3_tls(r) : NULL;
#endif
    if (s->tls == NULL && !r->h3)
        return fd_null_string;
    switch (id) {
    case CV_HTTPS:
        return fd_string("on");
    case CV_SSL_PROTOCOL:
        return TLS_FACT(fd_quic_tls_protocol(t), fd_ssl_protocol(s));
    case CV_SSL_CIPHER:
        return TLS_FACT(fd_quic_tls_cipher(t), fd_ssl_cipher(s));
    case CV_SSL_SERVER_NAME:
        return TLS_FACT(fd_quic_tls_server_name_var(t, r->pool),
                        fd_ssl_server_name(s));
    case CV_SSL_SESSION_REUSED:
        return TLS_FACT(fd_quic_tls_session_reused(t),
                        fd_ssl_session_reused(s))
                   ? fd_string("r")
                   : fd_string(".");
    case CV_SSL_CLIENT_VERIFY:
        return TLS_FACT(fd_quic_tls_client_verify(t, r->pool),
                        fd_ssl_client_verify(s, r->pool));
    case CV_SSL_CLIENT_S_DN:
        return TLS_FACT(fd_quic_tls_client_s_dn(t, r->pool),
                        fd_ssl_client_s_dn(s, r->pool));
    }
    return fd_null_string;
}

/* --- requests --- */

fd_request_t *fd_http_request_new(fd_connection_t *c, fd_pool_t *pool)
{
    fd_request_t *r = fd_pcalloc(pool, sizeof(*r));

    if (r == NULL)
        return NULL;
    r->c = c;
    r->pool = pool;
    r->start_msec = fd_current_msec;
    r->content_length = -1;
    r->last_modified = -1;
    r->headers_out_last = &r->headers_out;
    r->out_last = &r->out;
    r->keepalive = 1;
    fd_http_parse_init_zeroed(&r->in, pool,
                              fd_worker->cycle->http.max_header_size,
                              (unsigned)fd_worker->cycle->http.max_headers);
    r->in.version = 11;
    return r;
}

static fd_request_t *request_new(fd_connection_t *c)
{
    fd_http_conn_t *h = c->h;

    /*
     * No request lives on this connection now. If what waits to be written
     * is all copied bytes (no body or file still pointing into the
     * pool), nothing refers to the pool: reuse it from the start. A
     * pipelined batch then runs in the same few (cache-warm) kilobytes
     * instead of growing the pool by a block every few requests, to be
     * freed when the connection goes idle.
     */
    if (fd_outq_copied(&h->out))
        fd_pool_clear(h->pool);
    return fd_http_request_new(c, h->pool);
}

/* Respond with an error page and close after it: framing is lost. */
static void request_fail(fd_request_t *r, int status)
{
    r->keepalive = 0;
    fd_http_finalize(r, status);
}

/*
 * The [server] for the request: by Host among those on the address, or
 * the address's default. Over TLS the connection belongs to the server
 * whose settings made the handshake (chosen by SNI, or the default one
 * when the client sent no name or one no server has): a Host with no
 * server of its own stays there, and one that names a server with other
 * TLS terms (certificates, protocols, ciphers, client verification) gets
 * 421 (RFC 9110, 7.4: this connection is not authoritative for it), or a
 * client could reach a server that requires a certificate, or TLS 1.3,
 * through a handshake with another. Servers with the same terms share
 * connections (a browser coalesces names one certificate covers).
 */
static fd_http_server_t *find_server(fd_request_t *r, int *misdirected)
{
    fd_listening_t *ls = fd_conn_listening(r->c);
    fd_http_server_t *hs, *s;
    fd_str_t host = r->in.host;
    unsigned i;

    *misdirected = 0;
    if (ls->nservers == 1)
        return ls->servers[0];
    hs = r->c->s.tls ? fd_ssl_server(&r->c->s) : NULL;
#ifdef FD_HTTP3
    if (r->h3)
        hs = fd_quic_tls_server(fd_h3_tls(r));
#endif
    if (host.len == 0)
        return hs ? hs : ls->servers[0];
    /* strip the port; IPv6 literals keep their brackets. The parser
     * checked the grammar and dropped a trailing dot (fd_http_parse_host) */
    for (i = host.len; i > 0; i--) {
        if (host.data[i - 1] == ':') {
            host.len = i - 1;
            break;
        }
        if (host.data[i - 1] < '0' || host.data[i - 1] > '9')
            break;
    }
    s = fd_listening_server(ls, host);
    if (s == NULL)
        return hs ? hs : ls->servers[0];
    if (hs && s != hs && !fd_ssl_same_tls(hs, s)) {
        *misdirected = 1;
        return hs;
    }
    return s;
}

fd_http_loc_t *fd_http_find_location(fd_request_t *r)
{
    fd_http_server_t *s = r->server;
    fd_http_loc_t *loc;

    for (loc = s->exact; loc; loc = loc->next)
        if (r->path.len == loc->match.len &&
            memcmp(r->path.data, loc->match.data, loc->match.len) == 0)
            return loc;
    /* longest prefix first; nginx checks regexes after the prefix match */
    {
        fd_http_loc_t *best = NULL;
        for (loc = s->prefix; loc; loc = loc->next)
            if (r->path.len >= loc->match.len &&
                memcmp(r->path.data, loc->match.data, loc->match.len) == 0) {
                best = loc;
                break;
            }
        if (best && best->kind == FD_LOC_PREFIX_STOP)
            return best; /* ^~: no regex check */
        for (loc = s->regex; loc; loc = loc->next) {
            /* one match block per thread, for every regex and request */
            static __thread pcre2_match_data *md;
            int rc;
            if (md == NULL &&
                (md = pcre2_match_data_create(32, NULL)) == NULL)
                break;
            rc = pcre2_match(loc->regex, (PCRE2_SPTR)r->path.data, r->path.len,
                             0, 0, md, NULL);
            if (rc == 0)
                rc = 32; /* more groups than the block holds: keep 32 */
            if (rc > 0) {
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                r->ncaptures = rc;
                r->captures = fd_palloc(r->pool, 2 * (size_t)rc *
                                                     sizeof(size_t));
                if (r->captures)
                    for (int i = 0; i < 2 * rc; i++)
                        r->captures[i] = ov[i];
                return loc;
            }
        }
        if (best)
            return best;
    }
    return s->root_loc;
}

fd_http_loc_t *fd_http_named_location(const fd_http_server_t *s,
                                      const char *name)
{
    fd_http_loc_t *loc;

    for (loc = s->named; loc; loc = loc->next)
        if (strcmp(loc->match.data, name) == 0)
            return loc;
    return NULL;
}

static int body_start(fd_request_t *r);
static void run_access(fd_request_t *r, const fd_module_t *const *m);

void fd_request_addr(fd_request_t *r, fd_addr_t *a)
{
    if (r->realip)
        *a = *r->realip;
    else
        fd_connection_addr(r->c, a);
}

size_t fd_request_addr_text(fd_request_t *r, char *buf, size_t size)
{
    if (r->realip)
        return fd_addr_text(r->realip, buf, size);
    return fd_connection_addr_text(r->c, buf, size);
}

size_t fd_request_hop_text(fd_request_t *r, char *buf, size_t size)
{
    fd_addr_t a;

    fd_connection_hop(r->c, &a);
    return fd_addr_text(&a, buf, size);
}

/*
 * real_ip_header: a trusted hop's word for the client's address, taken
 * for this request only (an HTTP/2 connection from a balancer carries
 * many clients' requests at once). The connection's address, which the
 * socket or a PROXY header gave, is the hop's. Called with the server's
 * keys, then again with a location's own once routed (so it starts from
 * the hop each time).
 */
static void request_realip(fd_request_t *r, const fd_realip_conf_t *rc)
{
    fd_addr_t a, *p;
    fd_str_t one[4], *vals = one;
    unsigned i, n = 0;

    r->realip = NULL;
    if (rc->nfrom == 0 || rc->header == FD_REALIP_PROXY_PROTOCOL)
        return;
    fd_connection_addr(r->c, &a);
    if (rc->header == FD_REALIP_X_REAL_IP) {
        fd_str_t v = fd_http_var_header(r, fd_string("x_real_ip"));
        if (v.data == NULL || !fd_cidr_match(rc->from, rc->nfrom, &a) ||
            fd_addr_parse(v.data, v.len, &a) != FD_OK)
            return;
    } else {
        for (i = 0; i < r->in.nheaders; i++)
            n += fd_str_caseeq_lit(r->in.headers[i].name, "x-forwarded-for");
        if (n == 0)
            return;
        if (n > fd_nelems(one) &&
            (vals = fd_palloc(r->pool, n * sizeof(*vals))) == NULL)
            return;
        for (i = 0, n = 0; i < r->in.nheaders; i++)
            if (fd_str_caseeq_lit(r->in.headers[i].name, "x-forwarded-for"))
                vals[n++] = r->in.headers[i].value;
        if (fd_realip_forwarded(vals, n, rc->from, rc->nfrom, rc->recursive,
                                &a) != FD_OK)
            return;
    }
    if ((p = fd_palloc(r->pool, sizeof(*p))) != NULL) {
        *p = a;
        r->realip = p;
    }
}

/* Header parsed: decide keep-alive, normalise, route, then body/handler. */
void fd_http_request_start(fd_request_t *r)
{
    fd_connection_t *c = r->c;
    fd_http_conf_t *hc = &fd_worker->cycle->http;
    char *path;
    size_t plen;
    int misdirected;

    fd_stats->requests++;
    r->body_rest = r->in.chunked ? -1 : fd_max(r->in.content_length, 0);
    if (r->h2) {
        r->keepalive = 1; /* the connection's end is GOAWAY's business */
    } else {
        r->keepalive = r->in.version == 11 ? !r->in.conn_close
                                           : r->in.conn_keepalive &&
                                                 !r->in.conn_close;
        if (c->requests + 1 >= (uint32_t)hc->keepalive_requests ||
            fd_worker->quitting)
            r->keepalive = 0;
    }
    r->header_only = r->in.method_id == FD_HTTP_HEAD;
    r->server = find_server(r, &misdirected);
    request_realip(r, &r->server->root_loc->realip);
    if (c->plain_on_tls) {
        fd_log_error(FD_LOG_INFO, 0, "client sent plain HTTP request to "
                     "HTTPS port");
        r->keepalive = 0;
        fd_http_error_detail(r, 400,
                             "The plain HTTP request was sent to HTTPS port");
        fd_http_finalize(r, FD_OK);
        return;
    }
    if (misdirected) {
        fd_log_error(FD_LOG_INFO, 0, "client sent Host \"%.*s\" on a TLS "
                     "connection for another server",
                     (int)fd_min(r->in.host.len, 256), r->in.host.data);
        request_fail(r, 421);
        return;
    }
    if (r->server->max_conns_per_ip &&
        fd_connection_ip_count(c) > (unsigned)r->server->max_conns_per_ip) {
        char addr[INET6_ADDRSTRLEN];
        fd_connection_addr_text(c, addr, sizeof(addr)); /* what counts */
        fd_log_error(FD_LOG_WARN, 0, "limiting connections from %s: %u "
                     "open, max_conns_per_ip %ld", addr,
                     fd_connection_ip_count(c),
                     (long)r->server->max_conns_per_ip);
        request_fail(r, 503);
        return;
    }

    if (r->in.method_id == FD_HTTP_TRACE || r->in.method_id == FD_HTTP_CONNECT)
    {
        r->keepalive = 0;
        fd_http_error_page(r, 405);
        fd_http_header_add(r, fd_string("Allow"), fd_string(FD_HTTP_ALLOW));
        fd_http_finalize(r, FD_OK);
        return;
    }
    if (r->in.path_raw.len == 1 && r->in.path_raw.data[0] == '*') {
        /* OPTIONS * : the server's own capabilities */
        r->status = 200;
        fd_http_header_add(r, fd_string("Allow"), fd_string(FD_HTTP_ALLOW));
        fd_http_body_set(r, "", 0);
        if (r->in.content_length > 0 || r->in.chunked)
            r->keepalive = 0;
        fd_http_finalize(r, FD_OK);
        return;
    }
    path = fd_pnalloc(r->pool, r->in.path_raw.len + 2);
    if (path && r->in.path_plain) {
        /* the parser saw no escape, "//" or "/.": already normal */
        plen = r->in.path_raw.len;
        memcpy(path, r->in.path_raw.data, plen);
        path[plen] = '\0';
    } else if (path == NULL ||
               fd_http_normalize_path(r->in.path_raw, path, &plen) != FD_OK) {
        request_fail(r, 400);
        return;
    }
    r->path.data = path;
    r->path.len = plen;
    if (fd_http_early_on)
        for (unsigned m = 0; m < fd_nmodules; m++)
            if (fd_modules[m]->early && fd_modules[m]->early(r) == FD_OK) {
                fd_http_finalize(r, FD_OK);
                return;
            }
    r->loc = fd_http_find_location(r);
    if (r->loc->realip_own)
        request_realip(r, &r->loc->realip);

    if (r->in.content_length > 0 || r->in.chunked) {
        if (r->in.content_length > (int64_t)r->loc->max_body_size) {
            request_fail(r, 413);
            return;
        }
        /* the body is read once the access phase lets the request in (as
         * nginx): a refused client is answered without uploading it, and
         * one that sent "Expect: 100-continue" is never invited to */
        r->body_wanted = 1;
    }
    run_handler(r);
}

/* --- request body --- */

static void send_continue(fd_request_t *r)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

    /* HTTP/2: the window invites the body; a client waiting for a 100
     * gets the final response or sends on its timer */
    if (r->h2)
        return;
    if (r->in.expect_continue && r->in.version == 11 && !r->continue_sent) {
        r->continue_sent = 1;
        out_append(r->c->h, cont, sizeof(cont) - 1);
        fd_http_flush(r->c);
    }
}

static int body_start(fd_request_t *r)
{
    fd_http_conn_t *h = r->c->h;

    if ((r->loc->handler_flags & FD_MODULE_STREAM_BODY) && !r->body_whole) {
        r->phase = PH_STREAM;
        if (h->rpos == h->rlast)
            send_continue(r);
        return FD_OK;
    }
    r->body_cap = r->in.chunked ? 4096 : (size_t)r->in.content_length;
    r->body = fd_pnalloc(r->pool, r->body_cap ? r->body_cap : 1);
    if (r->body == NULL)
        return FD_ERROR;
    r->phase = PH_BODY;
    if (h->rpos == h->rlast)
        send_continue(r);
    return FD_OK;
}

/*
 * Decode body bytes from the read buffer into dst (at most size): > 0
 * bytes, 0 at the end of the body, FD_AGAIN for more input, or -400 on a
 * chunked framing error.
 */
static ssize_t body_decode(fd_request_t *r, char *dst, size_t size)
{
    fd_http_conn_t *h = r->c->h;
    size_t got = 0;

    if (!r->in.chunked) {
        size_t n = fd_min((size_t)r->body_rest, h->rlast - h->rpos);
        n = fd_min(n, size);
        memcpy(dst, h->rbuf + h->rpos, n);
        h->rpos += n;
        r->body_rest -= (int64_t)n;
        if (n)
            return (ssize_t)n;
        return r->body_rest == 0 ? 0 : FD_AGAIN;
    }
    while (got < size && r->body_rest != 0) {
        const char *pos = h->rbuf + h->rpos, *data;
        size_t len;
        int rc = fd_http_parse_chunked(&r->ck, &pos, h->rbuf + h->rlast,
                                       &data, &len);

        if (rc == FD_OK && len > size - got) {
            /* dst is full: leave the rest of this chunk in the buffer */
            size_t extra = len - (size - got);
            r->ck.size += extra;
            r->ck.state = FD_HTTP_CK_DATA;
            pos -= extra;
            len = size - got;
        }
        h->rpos = (size_t)(pos - h->rbuf);
        if (rc == FD_OK) {
            memcpy(dst + got, data, len);
            got += len;
        } else if (rc == FD_DONE) {
            r->body_rest = 0;
        } else if (rc == FD_AGAIN) {
            break;
        } else {
            return -400;
        }
    }
    if (got)
        return (ssize_t)got;
    return r->body_rest == 0 ? 0 : FD_AGAIN;
}

/* Buffered body: FD_OK when complete, FD_AGAIN, or an error status. */
static int body_read(fd_request_t *r)
{
    size_t max = r->loc->max_body_size;

    for (;;) {
        ssize_t n;

        if (r->body_len == r->body_cap) {
            /* only a chunked body grows; Content-Length was allocated */
            size_t cap = r->body_cap * 2;
            char *nb;
            if (!r->in.chunked)
                return r->body_rest == 0 ? FD_OK : 500;
            if (r->body_len > max)
                return 413;
            cap = fd_min(cap, max + 1);
            nb = fd_pnalloc(r->pool, cap);
            if (nb == NULL)
                return 500;
            memcpy(nb, r->body, r->body_len);
            r->body = nb;
            r->body_cap = cap;
        }
        n = body_decode(r, r->body + r->body_len, r->body_cap - r->body_len);
        if (n == 0)
            return FD_OK;
        if (n == FD_AGAIN)
            return FD_AGAIN;
        if (n < 0)
            return (int)-n;
        r->body_len += (size_t)n;
        if (r->body_len > max)
            return 413;
    }
}

ssize_t fd_http_body_pull(fd_request_t *r, char *buf, size_t size)
{
    ssize_t n;

    if (r->body_whole) {
        /* read whole before the handler (body_start): from r->body */
        size_t left = r->body_len - r->body_pulled;
        n = (ssize_t)fd_min(left, size);
        memcpy(buf, r->body + r->body_pulled, (size_t)n);
        r->body_pulled += (size_t)n;
        return n;
    }
    if (r->h2)
        return fd_h2_body_pull(r, buf, size);
    if (r->body_rest == 0)
        return 0;
    n = body_decode(r, buf, size);
    if (n >= 0)
        return n;
    if (n == FD_AGAIN) {
        /* reading may have stopped on a full buffer: resume it */
        if (r->c->s.readable)
            post_resume(r->c->h);
        return FD_AGAIN;
    }
    /* a framing error: the connection cannot be reused */
    r->keepalive = 0;
    return FD_ERROR;
}

/* --- handler --- */

static void offload_work(fd_request_t *r)
{
    unsigned redirects = r->redirects;
    int rc;

    r->api_finished = 0;
    rc = r->loc->handler_fn(r);
    /* FD_AGAIN after fd_api_finish() on this thread (a database answered
     * inline): the request ends now, as fd_api_finish() asked */
    if (!(rc == FD_AGAIN && r->api_finished))
        r->handler_rc = rc;
    r->moved = r->handler_rc == FD_DECLINED && r->redirects != redirects;
}

static void offload_done(fd_request_t *r)
{
    r->in_offload = 0;
    if (r->handler_rc == FD_AGAIN)
        return; /* the module finishes it with fd_request_finish() */
    if (r->moved) {
        /* redirected (static's index): the new location's access phase,
         * the request still held (r->async); a closed stream is only
         * to finish */
        r->moved = 0;
        if (!fd_h2_gone(r)) {
            run_access(r, (const fd_module_t *const *)r->loc->access);
            return;
        }
        r->handler_rc = FD_ERROR;
    }
    fd_request_finish(r, r->handler_rc);
}

/*
 * The handler does not take this method: 501 for one fastd does not know,
 * else a 405 whose Allow lists what the handler does take.
 */
static int method_refuse(fd_request_t *r, unsigned methods)
{
    static const struct {
        int id;
        fd_str_t name;
    } names[] = {
        {FD_HTTP_GET, fd_string("GET")},
        {FD_HTTP_HEAD, fd_string("HEAD")},
        {FD_HTTP_POST, fd_string("POST")},
        {FD_HTTP_PUT, fd_string("PUT")},
        {FD_HTTP_DELETE, fd_string("DELETE")},
        {FD_HTTP_OPTIONS, fd_string("OPTIONS")},
        {FD_HTTP_PATCH, fd_string("PATCH")},
    };
    fd_sbuf_t sb;
    unsigned i;

    if (r->in.method_id == FD_HTTP_UNKNOWN)
        return 501;
    if (fd_http_error_page(r, 405) != FD_OK ||
        fd_sbuf_init(&sb, r->pool, 48) != FD_OK)
        return 500;
    for (i = 0; i < fd_nelems(names); i++) {
        if (!(methods & FD_METHOD(names[i].id)))
            continue;
        if (fd_sbuf_len(&sb))
            fd_sbuf_add_lit(&sb, ", ");
        fd_sbuf_add_str(&sb, names[i].name);
    }
    if (fd_sbuf_failed(&sb) ||
        fd_http_header_add(r, fd_string("Allow"), fd_sbuf_str(&sb)) != FD_OK)
        return 500;
    return FD_OK;
}

void fd_http_run_handler(fd_request_t *r)
{
    const fd_http_loc_t *loc;
    unsigned methods;
    int resumed = r->async; /* held by an access module until now */
    unsigned redirects;
    int rc;

    if (r->loc->try_files && !r->try_done) {
        /* before the method check: the file, or the location it falls
         * back to, decides which handler answers */
        r->try_done = 1;
        rc = fd_http_try_files(r);
        if (rc == FD_DECLINED) {
            /* moved: the new location's access phase, from its first */
            run_access(r, (const fd_module_t *const *)r->loc->access);
            return;
        }
        if (rc != FD_OK)
            goto finish;
    }
    loc = r->loc;
    methods = loc->handler_methods ? loc->handler_methods : FD_METHODS_GET;
    if (!(methods & FD_METHOD(r->in.method_id))) {
        /* before the body is read: a body already here is skipped */
        rc = method_refuse(r, methods);
        goto finish;
    }
    if (r->in.ext_connect && !(loc->handler_flags & FD_MODULE_TUNNEL)) {
        /* an HTTP/2 WebSocket (RFC 8441) where nothing tunnels */
        rc = 501;
        goto finish;
    }
    if (r->body_wanted) {
        /* past the access phase: now the body, for the final location
         * (a rewrite may have moved the request) */
        r->body_wanted = 0;
        if (r->in.content_length > (int64_t)r->loc->max_body_size) {
            r->keepalive = 0;
            rc = 413;
            goto finish;
        }
        if (body_start(r) != FD_OK) {
            r->keepalive = 0;
            rc = 500;
            goto finish;
        }
        if (r->phase == PH_BODY) {
            /* http_process() reads it, then comes back here (HTTP/2:
             * the stream's DATA, at the end of the turn) */
            if (r->h2) {
                r->async = 0;
                fd_h2_resume(r);
                return;
            }
            if (resumed) {
                r->async = 0;
                post_resume(r->c->h);
            }
            return;
        }
    }

    if (r->pre)
        fd_http_run_pre(r);
    if (((!fd_worker->cycle->http.inline_completions || r->loc->offload) &&
         (loc->handler_flags & FD_MODULE_THREAD_SAFE)) ||
        (loc->handler_flags & FD_MODULE_BLOCKING)) {
        r->in_offload = 1;
        r->async = 1;
        if (fd_offload(r, offload_work, offload_done) == FD_OK)
            return;
        r->in_offload = 0;
        r->async = resumed;
        if (loc->handler_flags & FD_MODULE_BLOCKING) {
            rc = 503; /* no pool thread: a blocking handler never runs on
                         the loop */
            goto finish;
        }
    }
    redirects = r->redirects;
    rc = loc->handler_fn(r);
    if (rc == FD_AGAIN) {
        r->async = 1;
        return;
    }
    if (rc == FD_DECLINED && r->redirects != redirects) {
        /* the handler moved it (static's index): its new location */
        run_access(r, (const fd_module_t *const *)r->loc->access);
        return;
    }
finish:
    if (resumed)
        fd_request_finish(r, rc); /* outside http_process: resume it */
    else
        fd_http_finalize(r, rc);
}

/* The access phase (acl, rewrite, limit_req, queue limits) from m on in
 * the location's list, then the body and the handler
 * (fd_http_run_handler). r->async: resumed by a module that held it,
 * outside http_process. */
static void run_access(fd_request_t *r, const fd_module_t *const *m)
{
    int held = r->async;
    fd_http_loc_t *loc = r->loc;
    int rc;

    while (*m) {
        if ((rc = (*m)->access(r)) == FD_OK) {
            /* rewritten to another location: its checks, from the first */
            if (r->loc != loc) {
                loc = r->loc;
                m = (const fd_module_t *const *)loc->access;
            } else {
                m++;
            }
            continue;
        }
        if (rc == FD_AGAIN) {
            r->async = 1;
            return;
        }
        if (held)
            fd_request_finish(r, rc);
        else
            fd_http_finalize(r, rc);
        return;
    }
    fd_http_run_handler(r);
}

static void run_handler(fd_request_t *r)
{
    r->phase = PH_HANDLER; /* no reading while an access module holds it */
    run_access(r, (const fd_module_t *const *)r->loc->access);
}

void fd_http_request_run(fd_request_t *r)
{
    run_handler(r);
}

void fd_http_access_continue(fd_request_t *r, const fd_module_t *m)
{
    const fd_module_t **k;

    if (fd_h2_gone(r)) {
        /* its stream closed while the module held it (a module without
         * on_abort, as auth_basic's offloaded check): nothing is to
         * answer, and its connection may be gone (r->c->h NULL) */
        fd_request_finish(r, FD_ERROR);
        return;
    }
    for (k = r->loc->access; *k && *k != m; k++)
        ;
    run_access(r, (const fd_module_t *const *)(*k ? k + 1 : k));
}

void fd_request_finish(fd_request_t *r, int rc)
{
    fd_http_conn_t *h = r->c->h;

    if (fd_unlikely(r->sub_post != NULL)) {
        fd_http_finalize(r, rc); /* its end (fd_http_sub.c) */
        return;
    }
    if (r->h2) {
        fd_h2_finish(r, rc);
        return;
    }
    r->async = 0;
    r->on_abort = NULL;
    if (r->c->s.error && r->c->closing && h->r == r) {
        /* the client went away while the module worked */
        h->r = NULL;
        fd_connection_close(r->c);
        return;
    }
    if (!r->done)
        fd_http_finalize(r, rc); /* answered early: only the end */
    post_resume(h);
}

/* A streaming handler waits for the output to drain: tell it. */
static void stream_drain(fd_connection_t *c)
{
    fd_request_t *r = c->h ? c->h->r : NULL;

    if (r && r->on_drain && c->h->out.bytes == 0 &&
        (r->phase == PH_RESPONSE || r->phase == PH_STREAM)) {
        void (*drain)(fd_request_t *) = r->on_drain;
        drain(r);
    }
}

static void http_read(fd_connection_t *c);

static void resume_handler(void *data)
{
    fd_http_conn_t *h = data;
    fd_connection_t *c = h->c;

    h->resume_posted = 0;
    if (c == NULL || c->h != h || c->h2)
        return;
    fd_log_conn_id = c->id;
    http_process(c);
    /* reading may have stopped on a full buffer or behind a handler (a
     * streamed body, a pipeline behind an async request); with
     * edge-triggered events no new event comes for bytes already in the
     * socket: read on (http_read() stops again if still blocked) */
    if (c->h && c->s.readable && !c->closing) {
        http_read(c);
        if (c->h && c->s.eof)
            http_process(c);
    }
    if (c->h)
        http_after_io(c);
    stream_drain(c);
    fd_log_conn_id = 0;
}

/*
 * A tunnel (101 Switching Protocols): once the header is written, the
 * socket leaves the engine. See fd_http.h.
 */
int fd_http_detach(fd_request_t *r, fd_stream_t *to, char *buf, size_t size,
                   size_t *n, void **ipref)
{
    fd_connection_t *c = r->c;
    fd_http_conn_t *h = c->h;
    size_t left;
    int rc;

    if (r->sub_post)
        return FD_ERROR; /* a subrequest has no client socket to give */
    if (r->h2 && r->header_sent) {
        /* RFC 8441: the stream is the tunnel's side, the connection stays
         * (what the client sent already is in the stream's buffer) */
        *n = 0;
        *ipref = NULL;
        return fd_h2_detach(r, to);
    }
    if (!r->header_sent || h == NULL || h->r != r || r->h2)
        return FD_ERROR;
    rc = fd_http_flush(c);
    if (rc != FD_OK)
        return rc; /* FD_AGAIN: r->on_drain is called when it is written */
    left = h->rlast - h->rpos;
    if (left > size)
        return FD_ERROR;
    /* the descriptor changes owner, with its TLS state and its
     * registration (`to` is registered): under io_uring that holds what
     * the ring received and nobody read yet (the client's first
     * tunnelled bytes, sent while the upstream answered) */
    fd_stream_move(to, &c->s);
    memcpy(buf, h->rbuf + h->rpos, left);
    *n = left;
    h->rpos = h->rlast;
    r->on_drain = NULL;
    r->on_abort = NULL;
    r->on_body = NULL;
    r->async = 0;
    request_done(c, h, r);
    *ipref = fd_connection_ip_take(c);
    fd_connection_detach(c); /* counted out, its socket left to `to` */
    return FD_OK;
}

/* --- the connection state machine --- */

/* The transport is ready: read the first request. */
static void http_start(fd_connection_t *c)
{
    if (c->s.tls && fd_conn_listening(c)->http2 &&
        fd_str_eq_lit(fd_ssl_alpn(&c->s), "h2")) {
        /* ALPN chose h2: no HTTP/1.1 on this connection */
        if ((c->h == NULL && hc_get(c) == NULL) || fd_h2_start(c) != FD_OK)
            fd_connection_close(c);
        return;
    }
    c->s.ev.handler = http_event;
    fd_connection_set_state(c, FD_CONN_READING);
    fd_connection_set_timeout(c, fd_worker->cycle->http.header_timeout);
    /* TCP_DEFER_ACCEPT: data is usually here already; try it now */
    c->s.readable = 1;
    http_event(&c->s.ev, EPOLLIN);
}

/*
 * The transport's handshake (TLS) before the first request, bounded by
 * the connection's deadline. A plain HTTP request on a TLS port is read
 * and answered 400, as nginx does (fd_ssl.h: FD_DECLINED).
 */
static void handshake_event(fd_event_t *ev, uint32_t events)
{
    fd_connection_t *c = (fd_connection_t *)ev;
    int was_full = !c->s.writable, rc;

    fd_stream_events(&c->s, events);
    /* waiting for the client's next flight, the EPOLLOUT that an
     * edge-triggered registration reports at once says nothing new */
    if (events && !c->s.error && !c->s.readable &&
        !(was_full && c->s.writable))
        return;
    fd_log_conn_id = c->id;
    rc = c->s.error ? FD_ERROR : fd_stream_handshake(&c->s);
    if (rc == FD_OK || rc == FD_DECLINED) {
        c->plain_on_tls = rc == FD_DECLINED;
        http_start(c);
    } else if (rc == FD_AGAIN) {
        if (!c->s.registered)
            conn_register(c);
    } else {
        fd_connection_close(c);
    }
    fd_log_conn_id = 0;
}

static void http_init(fd_connection_t *c)
{
    if (c->s.tp->handshake == NULL) {
        http_start(c);
        return;
    }
    c->s.ev.handler = handshake_event;
    fd_connection_set_state(c, FD_CONN_READING);
    fd_connection_set_timeout(c, fd_conn_listening(c)->ssl_handshake_timeout);
    c->s.readable = 1;
    c->s.writable = 1;
    handshake_event(&c->s.ev, 0);
}

/*
 * The first bytes on a cleartext http2 address: the HTTP/2 client preface
 * (prior knowledge), 1; anything else, 0; FD_AGAIN while what came so far
 * is a beginning of it.
 */
static int h2_preface(fd_http_conn_t *h)
{
    static const char pri[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    size_t n = fd_min(h->rlast - h->rpos, sizeof(pri) - 1);

    if (memcmp(h->rbuf + h->rpos, pri, n) != 0)
        return 0;
    return n == sizeof(pri) - 1 ? 1 : FD_AGAIN;
}

/* Parse and run what the read buffer holds, in order. */
static void http_process(fd_connection_t *c)
{
    fd_http_conn_t *h = c->h;

    if (c->requests == 0 && h->r == NULL && h->rpos < h->rlast &&
        c->s.tls == NULL && fd_conn_listening(c)->http2) {
        int rc = h2_preface(h);
        if (rc == FD_AGAIN)
            return;
        if (rc == 1) {
            if (fd_h2_start(c) != FD_OK) {
                c->closing = 1;
                c->s.error = 1;
            }
            return;
        }
    }
    while (!c->h2 && !c->closing && h->out.bytes <= OUT_HIGH_WATER) {
        fd_request_t *r = h->r;
        int rc;

        if (r == NULL) {
            if (h->rpos == h->rlast)
                return;
            r = h->r = request_new(c);
            if (r == NULL) {
                c->closing = 1;
                c->s.error = 1;
                return;
            }
            fd_connection_set_state(c, FD_CONN_READING);
            fd_connection_set_timeout(c, fd_worker->cycle->http.header_timeout);
        }
        switch (r->phase) {
        case PH_HEADER:
            rc = fd_http_parse_request(&r->in, h->rbuf + h->rpos,
                                       h->rlast - h->rpos);
            if (rc == FD_AGAIN)
                return;
            if (rc != FD_OK) {
                request_fail(r, rc);
                return;
            }
            h->rpos += r->in.header_len;
            r->phase = PH_HANDLER; /* the header is in; body_start may
                                    * switch to reading the body */
            fd_connection_set_state(c, FD_CONN_BUSY);
            fd_http_request_start(r);
            continue;
        case PH_BODY:
            rc = body_read(r);
            if (rc == FD_AGAIN) {
                fd_connection_set_state(c, FD_CONN_READING);
                fd_connection_set_timeout(c,
                                          fd_worker->cycle->http.body_timeout);
                return;
            }
            if (rc != FD_OK) {
                request_fail(r, rc);
                return;
            }
            fd_connection_set_state(c, FD_CONN_BUSY);
            r->phase = PH_HANDLER;
            fd_http_run_handler(r); /* the access phase ran before */
            continue;
        case PH_STREAM:
            if (h->rpos < h->rlast && r->on_body)
                r->on_body(r);
            return;
        default:
            return; /* the handler owns the request */
        }
    }
}

/*
 * The read buffer is about to be reused while a parsed request lives on
 * (its body is still coming): copy the header out and re-point the slices.
 */
int fd_http_request_pin(fd_request_t *r)
{
    const char *from = r->in.start;
    size_t len = r->in.header_len;
    char *to = fd_pnalloc(r->pool, len ? len : 1);

    if (to == NULL)
        return FD_ERROR;
    memcpy(to, from, len);
    fd_http_req_rebase(&r->in, from, len, to);
    r->header_pinned = 1;
    return FD_OK;
}

static void http_read(fd_connection_t *c)
{
    fd_http_conn_t *h = c->h;
    size_t size = fd_worker->rbufs.size;
    int until_eagain = fd_worker->cycle->events.read_until_eagain;

    for (;;) {
        ssize_t n;
        size_t space;

        if (c->closing || c->h == NULL || c->h2)
            return;
        h = c->h;
        if (h->rpos > 0 && (h->rpos == h->rlast || h->rlast == size) &&
            h->r && h->r->phase != PH_HEADER && !h->r->header_pinned &&
            fd_http_request_pin(h->r) != FD_OK) {
            c->s.error = 1;
            c->s.eof = 1;
            return;
        }
        if (h->rpos == h->rlast && h->rpos) {
            h->rpos = h->rlast = 0;
        } else if (h->rlast == size && h->rpos > 0) {
            /* move the unparsed tail to the front */
            memmove(h->rbuf, h->rbuf + h->rpos, h->rlast - h->rpos);
            h->rlast -= h->rpos;
            h->rpos = 0;
            if (h->r && h->r->phase == PH_HEADER) {
                /* slices pointed into the old place: parse again */
                fd_http_parse_init(&h->r->in, h->pool,
                                   fd_worker->cycle->http.max_header_size,
                                   (unsigned)fd_worker->cycle->http
                                       .max_headers);
                h->r->in.version = 11;
            }
        }
        space = size - h->rlast;
        if (space == 0 || (h->r && h->r->phase >= PH_HANDLER &&
                           h->r->phase != PH_STREAM) ||
            h->out.bytes > OUT_HIGH_WATER) {
            /* back-pressure: leave the rest in the socket */
            c->s.readable = 1;
            return;
        }
        n = fd_stream_recv(&c->s, h->rbuf + h->rlast, space);
        if (n > 0) {
            h->rlast += (size_t)n;
            fd_stats->bytes_in += (uint64_t)n;
            http_process(c);
            if (!until_eagain &&
                (((size_t)n < space && c->s.tp->short_read_drains) ||
                 !c->s.readable)) {
                /* a short read drained the socket (EPOLLET contract;
                 * the TLS transport knows it from below OpenSSL) */
                c->s.readable = 0;
                return;
            }
            continue;
        }
        /* the end, the socket empty (FD_AGAIN) or an error: the stream's
         * flags say which */
        c->s.readable = 0;
        return;
    }
}

static void linger_read(fd_connection_t *c)
{
    char buf[4096];

    for (;;) {
        /* plain TCP through the stream (under io_uring the ring holds
         * the bytes); under TLS the raw bytes, after close_notify */
        ssize_t n = c->s.tp == &fd_transport_tcp
                        ? fd_stream_recv(&c->s, buf, sizeof(buf))
                        : recv(c->s.ev.fd, buf, sizeof(buf), 0);
        if (n > 0)
            continue;
        if (n == FD_AGAIN || (n < 0 && (errno == EAGAIN || errno == EINTR)))
            return;
        fd_connection_close(c);
        return;
    }
}

/*
 * After reading/processing: write, then decide between waiting, going
 * idle, lingering or closing.
 */
static void http_after_io(fd_connection_t *c)
{
    fd_http_conn_t *h = c->h;
    int rc;

    if (!fd_outq_empty(&h->out)) {
        /* the connection's last response, closed at once after it */
        c->s.last_out = c->closing && !c->linger;
        rc = fd_http_flush(c);
        if (rc == FD_ERROR) {
            if (h->r && h->r->phase >= PH_HANDLER && !h->r->in_offload &&
                finishes_alone(h->r)) {
                c->closing = 1;
                c->s.error = 1;
                lt_interest(c, LT_NONE, 0);
                return;
            }
            fd_connection_close(c);
            return;
        }
        if (rc == FD_AGAIN) {
            fd_connection_set_state(c, FD_CONN_BUSY);
            return;
        }
        if (h->r == NULL && !c->closing &&
            (h->rpos < h->rlast || c->s.readable)) {
            /* a pipeline stopped at the output high-water mark and the
             * output is now all written: requests wait in the buffer or
             * the socket, and with edge-triggered events nothing would
             * say so. Go on at the end of this turn. */
            post_resume(h);
            return;
        }
        if (h->r && h->r->on_drain &&
            (h->r->phase == PH_RESPONSE || h->r->phase == PH_STREAM))
            post_resume(h);
    }
    if (h->r && (h->r->phase == PH_HANDLER || h->r->phase == PH_RESPONSE ||
                 h->r->phase == PH_STREAM)) {
        if (c->s.eof && h->r->phase != PH_STREAM && !h->r->in_offload &&
            finishes_alone(h->r)) {
            /* the peer left; the module will finish, then we close */
            c->closing = 1;
            c->s.error = 1;
            return;
        }
        if (c->s.eof && h->r->on_abort) {
            fd_connection_close(c);
            return;
        }
        c->s.deadline = 0; /* the module's own timers rule */
        fd_connection_set_state(c, FD_CONN_BUSY);
        if (h->r->phase != PH_STREAM)
            /* an abortable wait (a queue) still hears the peer leave */
            lt_interest(c, h->r->on_abort ? LT_HUP : LT_NONE,
                        !fd_outq_empty(&h->out));
        return;
    }
    lt_interest(c, LT_IN, !fd_outq_empty(&h->out));
    if (c->closing) {
        if (c->linger && !c->s.error && !c->s.eof) {
            /* the peer may still be sending (an unread body): closing now
             * would reset the connection and could destroy the answer in
             * flight; send FIN and drain for a while first */
            fd_stream_close_transport(&c->s); /* TLS: close_notify */
            shutdown(c->s.ev.fd, SHUT_WR);
            http_release(c);
            fd_connection_set_state(c, FD_CONN_LINGER);
            fd_connection_set_timeout(c, LINGER_MSEC);
            linger_read(c);
            return;
        }
        fd_connection_close(c);
        return;
    }
    if (h->r == NULL && h->rpos == h->rlast) {
        if (c->s.eof) {
            fd_connection_close(c);
            return;
        }
        /* idle keep-alive: give everything back */
        if (!c->s.nodelay) {
            int one = 1;
            setsockopt(c->s.ev.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            c->s.nodelay = 1;
        }
        http_release(c);
        if (c->s.tp->idle)
            c->s.tp->idle(&c->s);
        fd_connection_set_state(c, FD_CONN_IDLE);
        /* idle during a graceful stop (a response begun before it): one
         * more second, as the worker gives the others */
        fd_connection_set_timeout(c, fd_worker->quitting
                                         ? fd_min(fd_worker->cycle->http
                                                      .keepalive_timeout,
                                                  1000)
                                         : fd_worker->cycle->http
                                               .keepalive_timeout);
        fd_connection_park(c);
        return;
    }
    if (c->s.eof) {
        /* a partial request and no more coming */
        fd_connection_close(c);
        return;
    }
}

static void http_event(fd_event_t *ev, uint32_t events)
{
    fd_connection_t *c = (fd_connection_t *)ev;

    fd_log_conn_id = c->id;
    if (c->state == FD_CONN_LINGER) {
        linger_read(c);
        goto out;
    }
    fd_stream_events(&c->s, events);
    if (c->s.error && c->h && c->h->r && c->h->r->phase >= PH_HANDLER &&
        finishes_alone(c->h->r)) {
        c->closing = 1;
        goto out;
    }
    if (c->s.error) {
        fd_connection_close(c);
        goto out;
    }
    if (c->h == NULL) {
        if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)))
            goto out;
        if (hc_get(c) == NULL) {
            fd_log_error(FD_LOG_ALERT, errno, "out of memory for connection");
            fd_connection_close(c);
            goto out;
        }
    }
    if (c->s.readable) {
        int eof_before = c->s.eof;
        c->s.eof = 0;
        http_read(c);
        if (c->h == NULL || c->h2)
            goto out; /* closed, or HTTP/2 took it (fd_http2.c) */
        c->s.eof |= eof_before;
        if (c->s.eof)
            http_process(c);
    }
    if (c->h)
        http_after_io(c);
    stream_drain(c);
out:
    /* a response in the turn's batch comes back through http_sent(),
     * which registers then if the connection lives on: a Connection:
     * close exchange needs no epoll_ctl() at all */
    if (!c->s.registered && !c->h2 && c->s.ev.fd >= 0 &&
        c->state != FD_CONN_FREE && !(c->h && fd_outq_batched(&c->h->out)))
        conn_register(c);
    fd_log_conn_id = 0;
}

static void http_timeout(fd_connection_t *c)
{
    if (c->h2) {
        fd_h2_timeout(c);
        return;
    }
    if (!c->s.handshaken && c->s.tls) {
        fd_ssl_handshake_timeout(&c->s); /* counted, logged at info */
        fd_connection_close(c);
        return;
    }
    switch (c->state) {
    case FD_CONN_READING:
        if (c->h && c->h->r && c->h->rlast > 0) {
            /* nginx logs it as 408 and closes; the client is told */
            fd_log_error(FD_LOG_INFO, 0, "client timed out reading the "
                         "request");
            request_fail(c->h->r, 408);
            c->s.error = 0;
            http_after_io(c);
            return;
        }
        break;
    case FD_CONN_BUSY:
        fd_log_error(FD_LOG_INFO, 0, "client timed out reading the response");
        break;
    default:
        break;
    }
    fd_connection_close(c);
}

/* A graceful stop: HTTP/2 says GOAWAY now; HTTP/1.1 answers the request
 * in flight with Connection: close (header_build). */
static void http_quit(fd_connection_t *c)
{
    if (c->h2)
        fd_h2_quit(c);
}

const fd_proto_t fd_http_proto = {
    .name = "http/1.1",
    .init = http_init,
    .timeout = http_timeout,
    .release = http_release,
    .idle = http_idle,
    .quit = http_quit,
    .handler = http_event,
};
