/*
 * The public face of connections below HTTP (core/api/fastd_stream.h): a
 * module's listening addresses, whose connections it steers through TLS,
 * a preread, and a server of an upstream group, which the engine splices
 * to the client (fd_stream.h's splice: either event backend, bounded
 * buffers, half-closes, the idle timeout).
 *
 * A connection is taken out of the engine at accept (the listener's
 * proto init: no HTTP ever runs on it): its stream moves into the
 * splice's client side and the engine's struct is let go without its
 * socket (fd_connection_detach), one malloc holding the rest: this
 * struct, the module's bytes and the two buffers.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_realip.h"
#include "fd_ssl.h"
#include "fd_upstream.h"
#include "fastd_stream.h"

struct fd_api_stream_s {
    fd_listening_t *ls;
    const fd_api_stream_ops_t *ops;
    void *ctx;
    size_t buffer_size;
    fd_msec_t idle;
    fd_msec_t connect;
    unsigned proxy_protocol:1;
};

enum { CLIENT, UPSTREAM }; /* the splice's sides */

struct fd_api_conn_s {
    fd_splice_t sp;
    fd_api_stream_t *l;
    fd_upstream_t *up;         /* pass's group */
    fd_upstream_conn_t *uc;    /* while connecting */
    fd_upstream_peer_t *peer;  /* acquired: counted active on it */
    uint64_t *tried;           /* of up's servers: tried1, or allocated */
    uint64_t tried1;
    fd_timer_t timer;          /* the handshake's or the preread's */
    void (*handler)(fd_event_t *ev, uint32_t events); /* the splice's */
    fd_api_conn_pt tls_done;
    int (*more)(fd_api_conn_t *c, void *data, const char *buf, size_t len,
                int rc);
    size_t got;                /* preread: bytes so far */
    void *ipref;               /* the client's place in the per-IP count */
    unsigned ipcount;
    fd_api_addr_t client;
    fd_msec_t start;
    int status;
    unsigned ended:1;          /* end ran */
    fd_posted_t free_post;
    void *data;                /* the module's, after this struct */
};

static void conn_connect(fd_api_conn_t *c);

/* --- configuration -------------------------------------------------------- */

static void stream_init(fd_connection_t *fc);

static void stream_timeout(fd_connection_t *c) { fd_connection_close(c); }
static void stream_release(fd_connection_t *c) { (void)c; }
static int stream_idle(fd_connection_t *c) { (void)c; return 1; }

/* Its connections leave the engine at init: the other hooks are there
 * for the proto's shape. */
static const fd_proto_t stream_proto = {
    .name = "stream",
    .init = stream_init,
    .timeout = stream_timeout,
    .release = stream_release,
    .idle = stream_idle,
};

fd_api_stream_t *fd_api_stream_listen(const char *addr,
                                      const fd_api_stream_ops_t *ops,
                                      void *ctx)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_api_stream_t *l;

    if (cf == NULL)
        return NULL;
    l = fd_pcalloc(cf->pool, sizeof(*l));
    if (l == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    l->ops = ops;
    l->ctx = ctx;
    l->buffer_size = 16384;
    l->idle = 600000;
    l->connect = 60000;
    l->ls = fd_cycle_listening_add(cf, addr, &stream_proto, l);
    return l->ls ? l : NULL;
}

int fd_api_stream_set(fd_api_stream_t *l, int opt, int64_t v)
{
    fd_conf_t *cf;

    if (v < 0)
        return FD_ERROR;
    switch (opt) {
    case FD_API_STREAM_BUFFER_SIZE:
        if (v < 1)
            return FD_ERROR;
        l->buffer_size = (size_t)v;
        return FD_OK;
    case FD_API_STREAM_IDLE_TIMEOUT:
        l->idle = v ? (fd_msec_t)v : 1;
        return FD_OK;
    case FD_API_STREAM_CONNECT_TIMEOUT:
        l->connect = v ? (fd_msec_t)v : 1;
        return FD_OK;
    case FD_API_STREAM_PROXY_PROTOCOL:
        l->proxy_protocol = v != 0;
        return FD_OK;
    case FD_API_STREAM_COUNT_IP:
        cf = fd_dso_conf();
        if (cf && v)
            cf->cycle->conns_per_ip = 1;
        return cf ? FD_OK : FD_ERROR;
    }
    return FD_ERROR;
}

int fd_api_stream_is_udp(const fd_api_stream_t *l)
{
    return l->ls->udp != 0;
}

static void tls_free(void *ctx)
{
    fd_ssl_server_ctx_free(ctx);
}

fd_api_tls_t *fd_api_tls_server(const char *what, const char *cert,
                                const char *key, const char *protocols,
                                const char *ciphers)
{
    return fd_api_tls_server_at(NULL, what, cert, key, protocols, ciphers);
}

fd_api_tls_t *fd_api_tls_server_at(const void *conf, const char *what,
                                   const char *cert, const char *key,
                                   const char *protocols,
                                   const char *ciphers)
{
    fd_conf_t *cf = fd_dso_conf();
    const fd_directive_t dp = {.name = "ssl_protocols", .offset = 0};
    const fd_directive_t dc = {.name = "ssl_ciphers", .offset = 0};
    fd_ssl_protocols_t p;
    char err[512], *c = NULL;
    void *ctx;

    if (cf == NULL)
        return NULL;
    if (conf)
        fd_conf_at_key(cf, conf, dp.name);
    if (fd_ssl_set_protocols(cf, &dp, &p, protocols) != FD_OK)
        return NULL;
    if (conf)
        fd_conf_at_key(cf, conf, dc.name);
    if (fd_ssl_set_ciphers(cf, &dc, &c, ciphers) != FD_OK)
        return NULL;
    if (conf)
        fd_conf_at_key(cf, conf, "ssl_certificate");
    ctx = fd_ssl_server_ctx(cert, key, &p, c, err, sizeof(err));
    if (ctx == NULL) {
        fd_conf_error(cf, "%s: %s", what, err);
        return NULL;
    }
    if (fd_pool_cleanup_add(cf->pool, tls_free, ctx) == NULL) {
        fd_ssl_server_ctx_free(ctx);
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    return ctx;
}

/* --- a connection's end ---------------------------------------------------- */

static void conn_free(void *data)
{
    fd_api_conn_t *c = data;

    if (c->tried != &c->tried1)
        free(c->tried);
    free(c);
}

/* Over: the module's end, then given back, freed at the end of the turn
 * (an event of this turn may still name a side). */
static void conn_end(fd_api_conn_t *c)
{
    c->ended = 1;
    if (fd_timer_armed(&c->timer))
        fd_timer_del(&c->timer);
    c->l->ops->end(c, c->data);
    if (c->peer)
        fd_upstream_peer_release(c->peer);
    fd_ip_release(c->ipref);
    fd_worker_hold(-1);
    c->free_post.handler = conn_free;
    c->free_post.data = c;
    fd_event_post(&c->free_post);
}

static void splice_done(fd_splice_t *sp)
{
    conn_end(sp->data);
}

void fd_api_conn_close(fd_api_conn_t *c, int status)
{
    c->status = status;
    if (c->uc) {
        fd_upstream_conn_close(c->uc);
        c->uc = NULL;
    }
    fd_splice_close(&c->sp);
    conn_end(c);
}

void fd_api_conn_info(fd_api_conn_t *c, fd_api_conn_info_t *info)
{
    static const char *const side[] = {"the client", "the upstream"};
    static const char *const op[] = {"on", "reading from", "sending to"};
    static char where[32];
    fd_splice_t *sp = &c->sp;

    *info = (fd_api_conn_info_t){
        .status = c->status,
        .sent = sp->side[CLIENT].sent,
        .received = sp->side[UPSTREAM].sent,
        .start_msec = c->start,
        .server = c->peer ? c->peer->name : NULL,
        .how = sp->started ? sp->reason : 0,
        .idle_msec = sp->idle};
    if (info->how == FD_SPLICE_ERROR) {
        info->how = FD_API_STREAM_FAILED;
        info->err = sp->err;
        snprintf(where, sizeof(where), "%s %s", op[sp->err_op],
                 side[sp->err_side]);
        info->where = where;
    } else if (info->how == FD_SPLICE_TIMEOUT) {
        info->how = FD_API_STREAM_IDLE;
    } else if (info->how == FD_SPLICE_END) {
        info->how = FD_API_STREAM_ENDED;
    }
}

/* --- accept ------------------------------------------------------------------ */

/* The listener's proto init: a connection accepted for the module. */
static void stream_init(fd_connection_t *fc)
{
    fd_api_stream_t *l = fd_conn_listening(fc)->owner;
    size_t size = (l->ops->size + 15) & ~(size_t)15;
    fd_api_conn_t *c;
    char *mem;

    /* the struct, the module's bytes (zeroed), the two buffers (not) */
    c = malloc(sizeof(*c) + size + 2 * l->buffer_size);
    if (c == NULL) {
        fd_log_error(FD_LOG_ERR, errno, "malloc() failed");
        fd_connection_close(fc);
        return;
    }
    memset(c, 0, sizeof(*c) + size);
    c->data = c + 1;
    mem = (char *)c->data + size;
    fd_splice_init(&c->sp, mem, mem + l->buffer_size, l->buffer_size);
    c->sp.idle = l->idle;
    c->sp.done = splice_done;
    c->sp.data = c;
    c->sp.log_id = fc->id;
    c->l = l;
    c->tried = &c->tried1;
    c->start = fd_current_msec;
    c->status = 502;
    fd_connection_addr(fc, &c->client);
    c->ipcount = fd_connection_ip_count(fc);
    /* the client's stream leaves the engine for the splice; the engine's
     * struct goes, counted out, without the socket */
    fd_stream_move(&c->sp.side[CLIENT].s, &fc->s);
    c->ipref = fd_connection_ip_take(fc);
    fd_connection_detach(fc);
    fd_worker_hold(1); /* a graceful stop waits for it */
    fd_log_conn_id = c->sp.log_id;
    if (fd_splice_watch(&c->sp, CLIENT) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        c->status = 500;
        fd_splice_close(&c->sp);
        conn_end(c);
    } else {
        l->ops->accept(c, c->data);
    }
    fd_log_conn_id = 0;
}

void *fd_api_conn_data(fd_api_conn_t *c)
{
    return c->data;
}

void *fd_api_conn_ctx(fd_api_conn_t *c)
{
    return c->l->ctx;
}

void fd_api_conn_client(fd_api_conn_t *c, fd_api_addr_t *a)
{
    *a = c->client;
}

/* The address the client reached: asked of the socket when wanted (a
 * PROXY header's destination), not at every accept. */
void fd_api_conn_local(fd_api_conn_t *c, fd_api_addr_t *a)
{
    struct sockaddr_storage la;
    socklen_t ll = sizeof(la);

    memset(a, 0, sizeof(*a));
    if (getsockname(c->sp.side[CLIENT].s.ev.fd, (struct sockaddr *)&la,
                    &ll) < 0)
        return;
    a->family = (uint8_t)la.ss_family;
    if (la.ss_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&la;
        memcpy(a->addr, &s4->sin_addr, 4);
        a->port = ntohs(s4->sin_port);
    } else if (la.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&la;
        memcpy(a->addr, &s6->sin6_addr, 16);
        a->port = ntohs(s6->sin6_port);
    }
}

unsigned fd_api_conn_ip_count(fd_api_conn_t *c)
{
    return c->ipcount;
}

/* --- TLS, preread: the client's events come here until they are done ---- */

static void take_events(fd_api_conn_t *c,
                        void (*h)(fd_event_t *ev, uint32_t events),
                        void (*t)(fd_timer_t *t), fd_msec_t ms)
{
    fd_splice_side_t *cs = &c->sp.side[CLIENT];

    c->handler = cs->s.ev.handler;
    cs->s.ev.handler = h;
    c->timer.handler = t;
    fd_timer_add(&c->timer, ms);
}

static void give_events(fd_api_conn_t *c)
{
    fd_timer_del(&c->timer);
    c->sp.side[CLIENT].s.ev.handler = c->handler;
}

static void handshake_event(fd_event_t *ev, uint32_t events)
{
    fd_splice_side_t *cs = (fd_splice_side_t *)ev;
    fd_api_conn_t *c = cs->sp->data;
    int rc;

    fd_log_conn_id = c->sp.log_id;
    fd_stream_events(&cs->s, events);
    if (events & EPOLLHUP)
        cs->s.writable = 1;
    rc = fd_stream_handshake(&cs->s);
    if (rc != FD_AGAIN) {
        give_events(c);
        c->tls_done(c, c->data, rc == FD_OK || rc == FD_DECLINED ? rc
                                                                : FD_ERROR);
    }
    fd_log_conn_id = 0;
}

static void handshake_timeout(fd_timer_t *t)
{
    fd_api_conn_t *c = (fd_api_conn_t *)((char *)t -
                                         offsetof(fd_api_conn_t, timer));

    fd_log_conn_id = c->sp.log_id;
    fd_ssl_handshake_timeout(&c->sp.side[CLIENT].s);
    c->sp.side[CLIENT].s.ev.handler = c->handler;
    c->tls_done(c, c->data, FD_AGAIN);
    fd_log_conn_id = 0;
}

int fd_api_conn_tls(fd_api_conn_t *c, const fd_api_tls_t *tls, uint64_t ms,
                    fd_api_conn_pt done)
{
    if (fd_ssl_accept_ctx(&c->sp.side[CLIENT].s, (void *)tls) != FD_OK)
        return FD_ERROR;
    c->tls_done = done;
    take_events(c, handshake_event, handshake_timeout, (fd_msec_t)ms);
    return FD_OK;
}

/* The bytes read go into the buffer owed to the server. */
static void preread_event(fd_event_t *ev, uint32_t events)
{
    fd_splice_side_t *cs = (fd_splice_side_t *)ev;
    fd_api_conn_t *c = cs->sp->data;
    char *buf = c->sp.side[UPSTREAM].buf;
    size_t size = c->sp.size;
    int rc = FD_AGAIN;

    fd_log_conn_id = c->sp.log_id;
    fd_stream_events(&cs->s, events);
    while (cs->s.readable && c->got < size) {
        ssize_t n = fd_stream_recv(&cs->s, buf + c->got, size - c->got);
        if (n == FD_AGAIN)
            break;
        if (n <= 0) {
            if (n == 0)
                errno = 0;
            give_events(c);
            c->more(c, c->data, buf, c->got, FD_ERROR);
            fd_log_conn_id = 0;
            return;
        }
        c->got += (size_t)n;
        c->sp.side[UPSTREAM].len = c->got; /* owed to the server first */
        rc = c->more(c, c->data, buf, c->got,
                     c->got == size ? FD_DECLINED : FD_OK);
        if (rc != FD_AGAIN)
            break;
        if (c->got == size) { /* full, and no answer: as the module's */
            rc = FD_OK;
            break;
        }
    }
    if (rc != FD_AGAIN && fd_timer_armed(&c->timer))
        give_events(c);
    fd_log_conn_id = 0;
}

static void preread_timeout(fd_timer_t *t)
{
    fd_api_conn_t *c = (fd_api_conn_t *)((char *)t -
                                         offsetof(fd_api_conn_t, timer));

    fd_log_conn_id = c->sp.log_id;
    c->sp.side[CLIENT].s.ev.handler = c->handler;
    c->more(c, c->data, c->sp.side[UPSTREAM].buf, c->got, FD_AGAIN);
    fd_log_conn_id = 0;
}

void fd_api_conn_preread(fd_api_conn_t *c, uint64_t ms,
                         int (*more)(fd_api_conn_t *c, void *data,
                                     const char *buf, size_t len, int rc))
{
    c->more = more;
    take_events(c, preread_event, preread_timeout, (fd_msec_t)ms);
}

/* --- to a server ------------------------------------------------------------- */

/* The PROXY header, first on the new connection: the group's own
 * (proxy_protocol in [upstream], its version), else the listener's
 * (v1, as nginx's stream module). */
static int send_proxy_header(fd_api_conn_t *c)
{
    fd_upstream_conn_t *uc = c->uc;
    uint8_t buf[FD_PROXY_PROTOCOL_V1_MAX + 1];
    fd_api_addr_t local;
    size_t n;
    ssize_t k;

    if (!uc->peer->up->proxy_protocol && !c->l->proxy_protocol)
        return FD_OK;
    fd_api_conn_local(c, &local);
    if (uc->peer->up->proxy_protocol)
        return fd_upstream_proxy_protocol(uc, &c->client, &local);
    n = fd_proxy_protocol_write(buf, sizeof(buf), 1, &c->client, &local);
    /* a new connection's send buffer takes ~100 bytes whole */
    k = send(uc->s.ev.fd, buf, n, MSG_NOSIGNAL);
    if (k != (ssize_t)n) {
        if (k >= 0)
            errno = EAGAIN;
        return FD_ERROR;
    }
    return FD_OK;
}

/* The connect to c->peer failed (err) or timed out (err 0): the next. */
static void connect_failed(fd_api_conn_t *c, int err)
{
    fd_upstream_peer_t *p = c->peer;

    fd_log_error(FD_LOG_ERR, err, "%s: connect() to %s %s", c->l->ops->what,
                 p->name, err ? "failed" : "timed out");
    fd_upstream_peer_failed(p);
    fd_upstream_peer_release(p);
    c->peer = NULL;
    if (c->uc) {
        fd_upstream_conn_close(c->uc);
        c->uc = NULL;
    }
    conn_connect(c);
}

/* Connected: the server's socket goes into the splice, which starts. */
static void conn_connected(fd_api_conn_t *c)
{
    fd_upstream_conn_t *uc = c->uc;
    fd_splice_side_t *us = &c->sp.side[UPSTREAM];

    fd_upstream_peer_ok(c->peer);
    if (send_proxy_header(c) != FD_OK) {
        connect_failed(c, errno);
        return;
    }
    fd_stream_move(&us->s, &uc->s);
    us->s.registered = 1;
    c->uc = NULL;
    fd_upstream_conn_close(uc); /* its fd is -1 now: frees only uc */
    if (fd_splice_watch(&c->sp, UPSTREAM) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        fd_api_conn_close(c, 500);
        return;
    }
    c->status = 200;
    fd_stream_splice(&c->sp);
}

static void connect_event(fd_upstream_conn_t *uc)
{
    fd_api_conn_t *c = uc->data;
    int err = 0;

    fd_log_conn_id = c->sp.log_id;
    switch (fd_upstream_conn_connected(uc, &err)) {
    case FD_AGAIN:
        break;
    case FD_OK:
        conn_connected(c);
        break;
    default:
        connect_failed(c, err);
    }
    fd_log_conn_id = 0;
}

static void connect_timeout(fd_upstream_conn_t *uc)
{
    fd_api_conn_t *c = uc->data;

    fd_log_conn_id = c->sp.log_id;
    connect_failed(c, 0);
    fd_log_conn_id = 0;
}

static uint32_t client_hash(const fd_api_addr_t *a)
{
    return fd_upstream_hash(a->addr, a->family == AF_INET ? 4 : 16);
}

/* Pick the next server not yet tried and connect to it. */
static void conn_connect(fd_api_conn_t *c)
{
    fd_upstream_peer_t *p;
    fd_upstream_conn_t *uc;

    for (;;) {
        p = fd_upstream_pick(c->up, c->tried, client_hash(&c->client));
        if (p == NULL) {
            fd_log_error(FD_LOG_ERR, 0, "%s: no live server in upstream "
                         "\"%s\"", c->l->ops->what, c->up->name);
            fd_api_conn_close(c, 502);
            return;
        }
        fd_upstream_set_tried(c->tried, p, 1);
        fd_upstream_peer_acquire(p);
        c->peer = p;
        uc = fd_upstream_conn_open(p);
        if (uc != NULL)
            break;
        fd_log_error(FD_LOG_ERR, errno, "%s: connect() to %s failed",
                     c->l->ops->what, p->name);
        fd_upstream_peer_failed(p);
        fd_upstream_peer_release(p);
        c->peer = NULL;
    }
    c->uc = uc;
    uc->data = c;
    uc->on_event = connect_event;
    uc->on_timeout = connect_timeout;
    if (!uc->connecting) {
        conn_connected(c);
        return;
    }
    fd_upstream_conn_deadline(uc, c->l->connect);
}

void fd_api_conn_pass(fd_api_conn_t *c, fd_api_upstream_t *up)
{
    size_t words;

    c->up = (fd_upstream_t *)up;
    words = fd_upstream_tried_words(c->up);
    if (words > 1 && (c->tried = calloc(words, sizeof(uint64_t))) == NULL) {
        c->tried = &c->tried1;
        fd_log_error(FD_LOG_ERR, errno, "calloc() failed");
        fd_api_conn_close(c, 500);
        return;
    }
    conn_connect(c);
}

/* --- UDP ------------------------------------------------------------------- */

int fd_api_stream_socket(const fd_api_stream_t *l)
{
    const fd_listening_t *ls = l->ls;

    if (!ls->udp || fd_worker == NULL || ls->nfds == 0)
        return -1;
    return ls->fds[ls->nfds > 1 ? fd_worker->index % ls->nfds : 0];
}

int fd_api_stream_dgram(fd_api_upstream_t *up, const void *key, size_t n,
                        const char *what, fd_api_peer_t **peer)
{
    fd_upstream_t *u = (fd_upstream_t *)up;
    size_t words = fd_upstream_tried_words(u);
    uint64_t one = 0, *tried = words > 1 ? calloc(words, sizeof(*tried))
                                         : &one;
    fd_upstream_peer_t *p;
    int fd = -1;

    if (tried == NULL)
        return -1;
    /* a server the socket can be made for; sends fail later, if at all */
    while ((p = fd_upstream_pick(u, tried, fd_upstream_hash(key, n))) !=
           NULL) {
        fd = socket(p->sa.ss_family, SOCK_DGRAM | SOCK_NONBLOCK |
                                         SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&p->sa, p->salen) == 0)
            break;
        fd_log_error(FD_LOG_ERR, errno, "%s: UDP socket to %s failed", what,
                     p->name);
        if (fd >= 0)
            close(fd);
        fd = -1;
        fd_upstream_peer_failed(p);
        fd_upstream_set_tried(tried, p, 1);
    }
    if (tried != &one)
        free(tried);
    if (p == NULL) {
        fd_log_error(FD_LOG_ERR, 0, "%s: no live server in upstream \"%s\"",
                     what, u->name);
        return -1;
    }
    fd_upstream_peer_acquire(p);
    *peer = (fd_api_peer_t *)p;
    return fd;
}

void fd_api_peer_ok(fd_api_peer_t *p)
{
    fd_upstream_peer_ok((fd_upstream_peer_t *)p);
}

void fd_api_peer_failed(fd_api_peer_t *p)
{
    fd_upstream_peer_failed((fd_upstream_peer_t *)p);
}

void fd_api_peer_release(fd_api_peer_t *p)
{
    fd_upstream_peer_release((fd_upstream_peer_t *)p);
}

const char *fd_api_peer_name(const fd_api_peer_t *p)
{
    return ((const fd_upstream_peer_t *)p)->name;
}
