/*
 * The L4 stream proxy: [stream NAME] sections, each a TCP listener whose
 * connections are joined byte for byte to a server of an upstream group
 * (pass = HOST:PORT makes an implicit one, pass = NAME names an
 * [upstream NAME]): its balancer, max_fails and health checks choose the
 * server, a refused or timed-out connect goes on to the next one.
 *
 * A connection is taken out of the engine at accept (its proto's init:
 * no HTTP ever runs on it) into a splice (fd_stream.h), which does the
 * copying on either event backend, bounded buffers both ways, a half-close
 * passed on as shutdown(SHUT_WR), and proxy_timeout as its idle timeout.
 * This file only picks, connects, and accounts: one access log line per
 * connection, as nginx's stream log, and per [stream] counters in each
 * worker's stats slot (/status: stream_connections, _active, _failed,
 * _bytes_received, _bytes_sent).
 *
 * listen = ADDR udp: a UDP socket per worker (the kernel's hash of the
 * client's address keeps a client on one worker). A client address's
 * datagrams make a session: a connected UDP socket to a server of the
 * group, datagrams passed both ways (the answers sent from the address
 * the client wrote to), ended by proxy_timeout of silence or once
 * proxy_responses answers per datagram came back (nginx's semantics).
 *
 * listen = ADDR ssl ends TLS here: the client's stream gets the TLS
 * transport (a context of the section's own, built by the master), its
 * handshake runs with its events before any server is chosen, and the
 * splice then carries plaintext to the server.
 *
 * ssl_preread = on reads the client's TLS ClientHello first (into the
 * buffer that goes on to the server: nothing is decrypted or changed) and
 * chooses the server by its server_name: the sni = NAME TARGET routes,
 * else pass. Until the hello is whole (preread_timeout) the client's
 * events come here, not to the splice.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <time.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_ssl.h"
#include "fd_status.h"
#include "fd_upstream.h"
#include "fd_stream_preread.h"

#define STREAM_STATS 64        /* [stream] sections counted in /status */

/* One [stream]'s figures in a worker's stats slot, found by name (a
 * reload may reorder the sections). */
typedef struct {
    char name[64];
    uint64_t connections;      /* accepted */
    uint64_t active;           /* gauge: open now */
    uint64_t failed;           /* no server took it (502), or an error */
    uint64_t received;         /* bytes from clients */
    uint64_t sent;             /* bytes to clients */
} stream_stats_t;

static stream_stats_t *stats_area; /* this worker's slot, or NULL */

enum { CLIENT, UPSTREAM }; /* the splice's sides */

/* sni = NAME TARGET, alpn = PROTOCOL TARGET */
typedef struct {
    char *name;                /* lowercased; "*.x.y": any name under x.y;
                                * alpn: the protocol */
    char *target;
    fd_upstream_t *up;
    unsigned alpn:1;
} stream_route_t;

typedef struct {
    char *listen;
    char *pass;
    int preread;
    fd_msec_t preread_timeout;
    /* listen ... ssl: TLS ends here, the server gets the plaintext */
    char *ssl_certificate, *ssl_certificate_key;
    fd_ssl_protocols_t ssl_protocols;
    char *ssl_ciphers;
    fd_msec_t ssl_handshake_timeout;
    void *ssl_ctx;             /* the master's, at load */
    fd_conf_list_t sni;
    fd_conf_list_t alpn;
    fd_msec_t proxy_timeout;
    fd_msec_t connect_timeout;
    fd_int_t max_conns_per_ip;
    fd_int_t proxy_responses;
    size_t buffer_size;
    int proxy_protocol;
    char *access_log;
    /* resolved */
    const char *name;
    fd_upstream_t *up;         /* pass's, or NULL (ssl_preread: none) */
    stream_route_t *routes;
    unsigned nroutes;
    size_t words;              /* of tried[]: the largest group's */
    fd_listening_t *ls;
    int log_fd;                /* per worker; -1: none */
    struct udp_listener_s *udp; /* per worker: listen ... udp's state */
    stream_stats_t *stats;     /* per worker: its entry, or NULL */
} stream_conf_t;

typedef struct {
    fd_splice_t sp;
    stream_conf_t *sc;
    fd_upstream_t *up;         /* the group chosen */
    fd_upstream_conn_t *uc;    /* while connecting */
    fd_timer_t preread;        /* preread_timeout, while reading */
    void (*handler)(fd_event_t *ev, uint32_t events); /* the splice's */
    size_t got;                /* preread: bytes of the hello so far */
    char sni[256];             /* its server_name, for the log */
    fd_upstream_peer_t *peer;  /* acquired: counted active on it */
    void *ipref;               /* the client's place in max_conns_per_ip */
    fd_api_addr_t client, local;
    fd_msec_t start;
    int status;                /* nginx's $status: 200, 502, 503 */
    fd_posted_t free_post;
    char *mem[2];              /* proxy_buffer_size each, after tried[] */
    uint64_t tried[];          /* sc->words */
} session_t;

fd_module_t fd_stream_module;

static const fd_directive_t stream_directives[];

#define SC(f) offsetof(stream_conf_t, f)

static void session_connect(session_t *ss);
static int udp_init_worker(fd_worker_t *w, stream_conf_t *sc);
static void udp_exit_worker(stream_conf_t *sc);

/* One access log line, nginx's stream log: $remote_addr [$time_local]
 * $protocol $status $bytes_sent $bytes_received $session_time
 * "$upstream_addr", then the [stream]'s name (and the SNI: ssl_preread).
 * sent: bytes to the client; received: from it. */
static void stream_log(const stream_conf_t *sc, const char *addr,
                       const char *proto, int status, uint64_t sent,
                       uint64_t received, fd_msec_t start,
                       const fd_upstream_peer_t *peer, const char *sni)
{
    char line[600];
    fd_msec_t ms = fd_current_msec - start;
    int n;

    /* the time: fd_log_time, made once a second (fd_time.c) */
    n = snprintf(line, sizeof(line),
                 "%s [%s] %s %d %llu %llu %llu.%03llu \"%s\" %s%s%s%s\n",
                 addr, fd_log_time, proto, status, (unsigned long long)sent,
                 (unsigned long long)received,
                 (unsigned long long)(ms / 1000),
                 (unsigned long long)(ms % 1000), peer ? peer->name : "-",
                 sc->name, sni ? " \"" : "", sni ? sni : "",
                 sni ? "\"" : "");
    if (n > 0 && write(sc->log_fd, line, (size_t)fd_min((size_t)n,
                                                       sizeof(line) - 1)) <
                     0)
        fd_log_error(FD_LOG_ERR, errno, "write() to %s failed",
                     sc->access_log);
}

static void session_log(session_t *ss)
{
    char addr[INET6_ADDRSTRLEN];

    if (ss->sc->log_fd < 0)
        return;
    if (inet_ntop(ss->client.family, ss->client.addr, addr, sizeof(addr)) ==
        NULL)
        strcpy(addr, "-");
    stream_log(ss->sc, addr, "TCP", ss->status, ss->sp.side[CLIENT].sent,
               ss->sp.side[UPSTREAM].sent, ss->start, ss->peer,
               ss->sc->preread ? ss->sni : NULL);
}

/* The session's end: log, give back, free at the end of the turn (an
 * event of this turn may still name a side). */
static void session_end(session_t *ss)
{
    stream_stats_t *st = ss->sc->stats;

    if (st) {
        st->active--;
        st->failed += ss->status != 200;
        st->received += ss->sp.side[UPSTREAM].sent;
        st->sent += ss->sp.side[CLIENT].sent;
    }
    session_log(ss);
    if (fd_timer_armed(&ss->preread))
        fd_timer_del(&ss->preread);
    if (ss->peer)
        fd_upstream_peer_release(ss->peer);
    fd_ip_release(ss->ipref);
    fd_worker_hold(-1);
    ss->free_post.handler = free;
    ss->free_post.data = ss;
    fd_event_post(&ss->free_post);
}

static void session_done(fd_splice_t *sp)
{
    session_t *ss = sp->data;

    static const char *const side[] = {"the client", "the upstream"};
    static const char *const op[] = {"on", "reading from", "sending to"};

    if (sp->reason == FD_SPLICE_TIMEOUT)
        fd_log_error(FD_LOG_INFO, 0, "stream %s: proxy_timeout %llums "
                     "passed, closed", ss->sc->name,
                     (unsigned long long)sp->idle);
    else if (sp->reason == FD_SPLICE_ERROR)
        fd_log_error(FD_LOG_INFO, sp->err, "stream %s: closed on an error "
                     "%s %s", ss->sc->name, op[sp->err_op],
                     side[sp->err_side]);
    session_end(ss);
}

/* No server took the connection: close the client (502, as nginx). */
static void session_fail(session_t *ss, int status)
{
    ss->status = status;
    fd_splice_close(&ss->sp);
    session_end(ss);
}

/* The connect to ss->peer failed (err) or timed out (err 0). */
static void connect_failed(session_t *ss, int err)
{
    fd_upstream_peer_t *p = ss->peer;

    fd_log_error(FD_LOG_ERR, err, "stream %s: connect() to %s %s",
                 ss->sc->name, p->name, err ? "failed" : "timed out");
    fd_upstream_peer_failed(p);
    fd_upstream_peer_release(p);
    ss->peer = NULL;
    if (ss->uc) {
        fd_upstream_conn_close(ss->uc);
        ss->uc = NULL;
    }
    session_connect(ss);
}

/* The PROXY header, first on the new connection: the group's own
 * (proxy_protocol in [upstream], its version), else the [stream]'s
 * proxy_protocol = on (v1, as nginx's stream module). */
static int send_proxy_header(session_t *ss)
{
    fd_upstream_conn_t *uc = ss->uc;
    uint8_t buf[FD_PROXY_PROTOCOL_V1_MAX + 1];
    size_t n;
    ssize_t k;

    if (uc->peer->up->proxy_protocol || !ss->sc->proxy_protocol)
        return fd_upstream_proxy_protocol(uc, &ss->client, &ss->local);
    n = fd_proxy_protocol_write(buf, sizeof(buf), 1, &ss->client,
                                &ss->local);
    /* a new connection's send buffer takes ~100 bytes whole */
    k = send(uc->s.ev.fd, buf, n, MSG_NOSIGNAL);
    if (k != (ssize_t)n) {
        if (k >= 0)
            errno = EAGAIN;
        return FD_ERROR;
    }
    return FD_OK;
}

/* Connected: the upstream's socket goes into the splice, which starts. */
static void session_connected(session_t *ss)
{
    fd_upstream_conn_t *uc = ss->uc;
    fd_splice_side_t *us = &ss->sp.side[UPSTREAM];

    fd_upstream_peer_ok(ss->peer);
    if (send_proxy_header(ss) != FD_OK) {
        connect_failed(ss, errno);
        return;
    }
    fd_stream_move(&us->s, &uc->s);
    us->s.registered = 1;
    ss->uc = NULL;
    fd_upstream_conn_close(uc); /* its fd is -1 now: frees only uc */
    if (fd_splice_watch(&ss->sp, UPSTREAM) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        session_fail(ss, 500);
        return;
    }
    ss->status = 200;
    fd_stream_splice(&ss->sp);
}

static void connect_event(fd_upstream_conn_t *uc)
{
    session_t *ss = uc->data;
    int err = 0;

    fd_log_conn_id = ss->sp.log_id;
    switch (fd_upstream_conn_connected(uc, &err)) {
    case FD_AGAIN:
        break;
    case FD_OK:
        session_connected(ss);
        break;
    default:
        connect_failed(ss, err);
    }
    fd_log_conn_id = 0;
}

static void connect_timeout(fd_upstream_conn_t *uc)
{
    session_t *ss = uc->data;

    fd_log_conn_id = ss->sp.log_id;
    connect_failed(ss, 0);
    fd_log_conn_id = 0;
}

/* Pick the next server not yet tried and connect to it. */
static void session_connect(session_t *ss)
{
    stream_conf_t *sc = ss->sc;
    fd_upstream_peer_t *p;
    fd_upstream_conn_t *uc;

    if (ss->up == NULL) {
        fd_log_error(FD_LOG_ERR, 0, "stream %s: no route for \"%s\" and "
                     "no pass", sc->name, ss->sni);
        session_fail(ss, 502);
        return;
    }
    for (;;) {
        p = fd_upstream_pick(ss->up, ss->tried,
                             fd_upstream_hash(ss->client.addr,
                                              ss->client.family == AF_INET
                                                  ? 4 : 16));
        if (p == NULL) {
            fd_log_error(FD_LOG_ERR, 0, "stream %s: no live server in "
                         "upstream \"%s\"", sc->name, ss->up->name);
            session_fail(ss, 502);
            return;
        }
        fd_upstream_set_tried(ss->tried, p, 1);
        fd_upstream_peer_acquire(p);
        ss->peer = p;
        uc = fd_upstream_conn_open(p);
        if (uc != NULL)
            break;
        fd_log_error(FD_LOG_ERR, errno, "stream %s: connect() to %s failed",
                     sc->name, p->name);
        fd_upstream_peer_failed(p);
        fd_upstream_peer_release(p);
        ss->peer = NULL;
    }
    ss->uc = uc;
    uc->data = ss;
    uc->on_event = connect_event;
    uc->on_timeout = connect_timeout;
    if (!uc->connecting) {
        session_connected(ss);
        return;
    }
    fd_upstream_conn_deadline(uc, sc->connect_timeout);
}

/* --- ssl_preread ----------------------------------------------------------- */

/* Does the hello's list ("h2,http/1.1") offer proto? */
static int offers(const char *list, const char *proto)
{
    size_t n = strlen(proto);
    const char *p;

    for (p = list; (p = strstr(p, proto)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
    return 0;
}

/* The group for the hello: the first alpn route whose protocol it
 * offers, else an exact sni route for its server_name, else the longest
 * "*." one that covers it, else pass's. */
static fd_upstream_t *route(const stream_conf_t *sc, const fd_preread_t *h)
{
    const stream_route_t *best = NULL;
    size_t n = strlen(h->sni), bl = 0;
    unsigned i;

    for (i = 0; i < sc->nroutes; i++)
        if (sc->routes[i].alpn && offers(h->alpn, sc->routes[i].name))
            return sc->routes[i].up;
    if (n == 0)
        return sc->up;
    for (i = 0; i < sc->nroutes; i++) {
        const stream_route_t *r = &sc->routes[i];
        size_t k = strlen(r->name) - 1; /* "*.x.y": ".x.y" */
        if (r->alpn)
            continue;
        if (r->name[0] != '*') {
            if (strcmp(r->name, h->sni) == 0)
                return r->up;
        } else if (n > k && strcmp(h->sni + n - k, r->name + 1) == 0 &&
                   k > bl) {
            best = r;
            bl = k;
        }
    }
    return best ? best->up : sc->up;
}

/* The hello is in (or will never be): to its server. */
static void preread_done(session_t *ss, const fd_preread_t *hello)
{
    fd_splice_side_t *cs = &ss->sp.side[CLIENT];

    fd_timer_del(&ss->preread);
    cs->s.ev.handler = ss->handler;
    ss->sp.side[UPSTREAM].len = ss->got; /* owed to the server first */
    if (hello) {
        memcpy(ss->sni, hello->sni, sizeof(ss->sni));
        ss->up = route(ss->sc, hello);
    }
    session_connect(ss);
}

static void preread_event(fd_event_t *ev, uint32_t events)
{
    fd_splice_side_t *cs = (fd_splice_side_t *)ev;
    session_t *ss = cs->sp->data;
    fd_preread_t hello;
    int rc = FD_AGAIN;

    fd_log_conn_id = ss->sp.log_id;
    fd_stream_events(&cs->s, events);
    while (cs->s.readable && ss->got < ss->sc->buffer_size) {
        ssize_t n = fd_stream_recv(&cs->s, ss->mem[UPSTREAM] + ss->got,
                                   ss->sc->buffer_size - ss->got);
        if (n == FD_AGAIN)
            break;
        if (n <= 0) {
            fd_log_error(FD_LOG_INFO, n < 0 ? errno : 0, "stream %s: the "
                         "client %s before its TLS ClientHello ended",
                         ss->sc->name, n < 0 ? "failed" : "closed");
            session_fail(ss, 400);
            fd_log_conn_id = 0;
            return;
        }
        ss->got += (size_t)n;
        rc = fd_preread_parse((const uint8_t *)ss->mem[UPSTREAM], ss->got,
                              &hello);
        if (rc != FD_AGAIN)
            break;
    }
    if (rc == FD_AGAIN && ss->got == ss->sc->buffer_size)
        rc = FD_DECLINED; /* a hello larger than the buffer: no name */
    if (rc != FD_AGAIN)
        preread_done(ss, rc == FD_OK ? &hello : NULL);
    fd_log_conn_id = 0;
}

static void preread_timeout(fd_timer_t *t)
{
    session_t *ss = (session_t *)((char *)t - offsetof(session_t, preread));

    fd_log_conn_id = ss->sp.log_id;
    fd_log_error(FD_LOG_INFO, 0, "stream %s: no whole TLS ClientHello in "
                 "preread_timeout %llums", ss->sc->name,
                 (unsigned long long)ss->sc->preread_timeout);
    session_fail(ss, 400);
    fd_log_conn_id = 0;
}

/* --- listen ... ssl: the handshake before the server ------------------- */

static void handshake_event(fd_event_t *ev, uint32_t events)
{
    fd_splice_side_t *cs = (fd_splice_side_t *)ev;
    session_t *ss = cs->sp->data;
    int rc;

    fd_log_conn_id = ss->sp.log_id;
    fd_stream_events(&cs->s, events);
    if (events & EPOLLHUP)
        cs->s.writable = 1;
    rc = fd_stream_handshake(&cs->s);
    if (rc == FD_OK) {
        fd_timer_del(&ss->preread);
        cs->s.ev.handler = ss->handler;
        session_connect(ss);
    } else if (rc != FD_AGAIN) {
        fd_log_error(FD_LOG_INFO, 0, "stream %s: the TLS handshake failed%s",
                     ss->sc->name, rc == FD_DECLINED ? " (plain HTTP sent "
                                                       "to a TLS port)"
                                                     : "");
        session_fail(ss, 400);
    }
    fd_log_conn_id = 0;
}

static void handshake_timeout(fd_timer_t *t)
{
    session_t *ss = (session_t *)((char *)t - offsetof(session_t, preread));

    fd_log_conn_id = ss->sp.log_id;
    fd_ssl_handshake_timeout(&ss->sp.side[CLIENT].s);
    fd_log_error(FD_LOG_INFO, 0, "stream %s: no TLS handshake in "
                 "ssl_handshake_timeout %llums", ss->sc->name,
                 (unsigned long long)ss->sc->ssl_handshake_timeout);
    session_fail(ss, 400);
    fd_log_conn_id = 0;
}

/* The proto's init: a connection accepted on a [stream] listener. */
static void stream_init(fd_connection_t *c)
{
    stream_conf_t *sc = fd_conn_listening(c)->owner;
    size_t words = sc->words;
    session_t *ss;
    int dup;

    if (sc->max_conns_per_ip &&
        fd_connection_ip_count(c) > (unsigned)sc->max_conns_per_ip) {
        char addr[INET6_ADDRSTRLEN];
        fd_connection_addr_text(c, addr, sizeof(addr));
        fd_log_error(FD_LOG_WARN, 0, "stream %s: %s has %u connections "
                     "open, max_conns_per_ip %ld", sc->name, addr,
                     fd_connection_ip_count(c) - 1,
                     (long)sc->max_conns_per_ip);
        fd_connection_close(c);
        return;
    }
    /* the session, its tried[], then the two buffers (not zeroed) */
    ss = malloc(sizeof(*ss) + words * sizeof(uint64_t) +
                2 * sc->buffer_size);
    if (ss == NULL) {
        fd_log_error(FD_LOG_ERR, errno, "malloc() failed");
        fd_connection_close(c);
        return;
    }
    memset(ss, 0, sizeof(*ss));
    memset(ss->tried, 0, words * sizeof(uint64_t));
    ss->mem[CLIENT] = (char *)(ss->tried + words);
    ss->mem[UPSTREAM] = ss->mem[CLIENT] + sc->buffer_size;
    fd_splice_init(&ss->sp, ss->mem[CLIENT], ss->mem[UPSTREAM],
                   sc->buffer_size);
    ss->sp.idle = sc->proxy_timeout;
    ss->sp.done = session_done;
    ss->sp.data = ss;
    ss->sp.log_id = c->id;
    ss->sc = sc;
    ss->up = sc->up;
    ss->start = fd_current_msec;
    ss->status = 502;
    if (sc->stats) {
        sc->stats->connections++;
        sc->stats->active++;
    }
    fd_connection_addr(c, &ss->client);
    fd_connection_hop(c, &ss->local);
    {
        /* the PROXY header's destination: the address the client reached */
        struct sockaddr_storage la;
        socklen_t ll = sizeof(la);
        if (getsockname(c->s.ev.fd, (struct sockaddr *)&la, &ll) == 0) {
            ss->local.family = (uint8_t)la.ss_family;
            if (la.ss_family == AF_INET) {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&la;
                memcpy(ss->local.addr, &s4->sin_addr, 4);
                ss->local.port = ntohs(s4->sin_port);
            } else if (la.ss_family == AF_INET6) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&la;
                memcpy(ss->local.addr, &s6->sin6_addr, 16);
                ss->local.port = ntohs(s6->sin6_port);
            }
        }
    }
    /* The client's stream leaves the engine for the splice, as a tunnel's
     * does (fd_http_detach): the connection closes a duplicate, so that
     * its own accounting runs and the socket stays the splice's. */
    dup = fcntl(c->s.ev.fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) {
        fd_log_error(FD_LOG_ERR, errno, "fcntl(F_DUPFD) failed");
        free(ss);
        fd_connection_close(c);
        return;
    }
    fd_stream_move(&ss->sp.side[CLIENT].s, &c->s);
    c->s.ev.fd = dup;
    ss->ipref = fd_connection_ip_take(c);
    fd_connection_close(c);
    fd_worker_hold(1); /* a graceful stop waits for the session */
    if (sc->ssl_ctx &&
        fd_ssl_accept_ctx(&ss->sp.side[CLIENT].s, sc->ssl_ctx) != FD_OK) {
        session_fail(ss, 500);
        return;
    }
    if (fd_splice_watch(&ss->sp, CLIENT) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        session_fail(ss, 500);
        return;
    }
    if (sc->ssl_ctx) {
        /* the client's events come here until the handshake is done */
        fd_splice_side_t *cs = &ss->sp.side[CLIENT];
        ss->handler = cs->s.ev.handler;
        cs->s.ev.handler = handshake_event;
        ss->preread.handler = handshake_timeout;
        fd_timer_add(&ss->preread, sc->ssl_handshake_timeout);
        return;
    }
    if (sc->preread) {
        /* the client's events come here until the hello is in */
        fd_splice_side_t *cs = &ss->sp.side[CLIENT];
        ss->handler = cs->s.ev.handler;
        cs->s.ev.handler = preread_event;
        ss->preread.handler = preread_timeout;
        fd_timer_add(&ss->preread, sc->preread_timeout);
        return;
    }
    session_connect(ss);
}

/* The engine's other hooks never see a stream connection: it leaves at
 * init. They are here for the proto's shape. */
static void stream_timeout(fd_connection_t *c) { fd_connection_close(c); }
static void stream_release(fd_connection_t *c) { (void)c; }
static int stream_idle(fd_connection_t *c) { (void)c; return 1; }

static const fd_proto_t stream_proto = {
    .name = "stream",
    .init = stream_init,
    .timeout = stream_timeout,
    .release = stream_release,
    .idle = stream_idle,
};

/* sni = NAME TARGET: NAME a host name or *.DOMAIN; alpn = PROTOCOL
 * TARGET; TARGET HOST:PORT or an [upstream] name (found in init_cycle) */
static int routes_parse(fd_conf_t *cf, stream_conf_t *sc)
{
    unsigned i, k, n = sc->sni.n + sc->alpn.n;

    if (n == 0)
        return FD_OK;
    sc->routes = fd_pcalloc(cf->pool, n * sizeof(stream_route_t));
    if (sc->routes == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < n; i++) {
        stream_route_t *r = &sc->routes[i];
        int alpn = i >= sc->sni.n;
        const char *v = alpn ? sc->alpn.items[i - sc->sni.n]
                             : sc->sni.items[i];
        char *s = fd_pstrdup(cf->pool, v, strlen(v));
        char *save, *extra;
        fd_conf_at_key(cf, sc, alpn ? "alpn" : "sni");
        if (s == NULL)
            return fd_conf_error(cf, "out of memory");
        r->alpn = (unsigned)alpn;
        r->name = strtok_r(s, " \t", &save);
        r->target = strtok_r(NULL, " \t", &save);
        extra = strtok_r(NULL, " \t", &save);
        if (r->name == NULL || r->target == NULL || extra)
            return fd_conf_error(cf, alpn ? "alpn = PROTOCOL TARGET (h2, "
                                 "acme-tls/1..., then HOST:PORT or an "
                                 "[upstream] name), not \"%s\""
                                          : "sni = NAME TARGET (a host name "
                                 "or *.DOMAIN, then HOST:PORT or an "
                                 "[upstream] name), not \"%s\"", v);
        if (alpn) {
            if (strlen(r->name) > 255 || strchr(r->name, ',') != NULL)
                return fd_conf_error(cf, "alpn: \"%s\" is not one "
                                     "protocol name", r->name);
            if (strchr(r->target, ':') != NULL &&
                (r->up = fd_upstream_implicit(cf, r->target, "")) == NULL)
                return FD_ERROR;
            continue;
        }
        for (k = 0; r->name[k]; k++) {
            char ch = r->name[k];
            if (ch >= 'A' && ch <= 'Z')
                r->name[k] = (char)(ch + 32);
            else if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                       ch == '-' || ch == '.' || ch == '_' ||
                       (ch == '*' && k == 0 && r->name[1] == '.')))
                return fd_conf_error(cf, "sni: \"%s\" is not a host name "
                                     "(or *.DOMAIN)", r->name);
        }
        if (r->name[0] == '*' && r->name[2] == '\0')
            return fd_conf_error(cf, "sni: \"%s\" names no domain "
                                 "(pass is the default route)", r->name);
        if (strchr(r->target, ':') != NULL &&
            (r->up = fd_upstream_implicit(cf, r->target, "")) == NULL)
            return FD_ERROR;
    }
    sc->nroutes = n;
    return FD_OK;
}

static void ssl_ctx_free(void *ctx)
{
    fd_ssl_server_ctx_free(ctx);
}

/* listen ... ssl: the context, built now by the master (the files are
 * read as its user), freed with the configuration */
static int ssl_build(fd_conf_t *cf, stream_conf_t *sc)
{
    char err[512], *cert, *key;

    if (sc->ssl_certificate == NULL || sc->ssl_certificate_key == NULL)
        return fd_conf_error(cf, "[stream %s]: listen ... ssl needs "
                             "ssl_certificate and ssl_certificate_key",
                             sc->name);
    cert = fd_conf_path(cf, sc->ssl_certificate);
    key = fd_conf_path(cf, sc->ssl_certificate_key);
    if (cert == NULL || key == NULL)
        return fd_conf_error(cf, "out of memory");
    sc->ssl_ctx = fd_ssl_server_ctx(cert, key, &sc->ssl_protocols,
                                    sc->ssl_ciphers, err, sizeof(err));
    if (sc->ssl_ctx == NULL) {
        fd_conf_at_key(cf, sc, "ssl_certificate");
        return fd_conf_error(cf, "[stream %s]: %s", sc->name, err);
    }
    if (fd_pool_cleanup_add(cf->pool, ssl_ctx_free, sc->ssl_ctx) == NULL) {
        fd_ssl_server_ctx_free(sc->ssl_ctx);
        return fd_conf_error(cf, "out of memory");
    }
    return FD_OK;
}

static int stream_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    stream_conf_t *sc = conf;

    if (fd_cycle_section_name(cf, "stream", name, 64) != FD_OK)
        return FD_ERROR;
    sc->name = name;
    sc->log_fd = -1;
    if (sc->listen == NULL)
        return fd_conf_error(cf, "[stream %s] needs listen = ADDR:PORT",
                             name);
    if (sc->pass == NULL && sc->sni.n == 0 && sc->alpn.n == 0)
        return fd_conf_error(cf, "[stream %s] needs pass = HOST:PORT or "
                             "an [upstream] name", name);
    if ((sc->sni.n || sc->alpn.n) && !sc->preread) {
        fd_conf_at_key(cf, sc, sc->sni.n ? "sni" : "alpn");
        return fd_conf_error(cf, "[stream %s]: %s routes need "
                             "ssl_preread = on", name,
                             sc->sni.n ? "sni" : "alpn");
    }
    {
        /* "ADDR ssl": TLS ends here (the listening socket is a plain one
         * to the engine: the handshake is this module's) */
        size_t n = strlen(sc->listen);
        if (n > 4 && strcmp(sc->listen + n - 4, " ssl") == 0) {
            char *a = fd_pstrdup(cf->pool, sc->listen, n - 4);
            if (a == NULL)
                return fd_conf_error(cf, "out of memory");
            sc->ls = fd_cycle_listening_add(cf, a, &stream_proto, sc);
            if (sc->ls == NULL)
                return FD_ERROR;
            if (sc->ls->udp || sc->preread)
                return fd_conf_error(cf, "[stream %s]: listen ... ssl goes "
                                     "with neither udp nor ssl_preread "
                                     "(which passes TLS on as it is)", name);
            if (ssl_build(cf, sc) != FD_OK)
                return FD_ERROR;
        } else {
            sc->ls = fd_cycle_listening_add(cf, sc->listen, &stream_proto,
                                            sc);
            if (sc->ls == NULL)
                return FD_ERROR;
            if (sc->ssl_certificate || sc->ssl_certificate_key) {
                fd_conf_at_key(cf, sc, sc->ssl_certificate
                                           ? "ssl_certificate"
                                           : "ssl_certificate_key");
                return fd_conf_error(cf, "[stream %s]: a certificate "
                                     "without listen = ADDR ssl", name);
            }
        }
    }
    if (sc->ls->udp) {
        const char *tcp = sc->preread ? "ssl_preread"
                          : sc->proxy_protocol ? "proxy_protocol"
                          : sc->max_conns_per_ip ? "max_conns_per_ip"
                                                 : NULL;
        if (tcp) {
            fd_conf_at_key(cf, sc, tcp);
            return fd_conf_error(cf, "[stream %s]: %s is for TCP, not "
                                 "listen ... udp", name, tcp);
        }
    } else if (sc->proxy_responses) {
        fd_conf_at_key(cf, sc, "proxy_responses");
        return fd_conf_error(cf, "[stream %s]: proxy_responses is for "
                             "listen ... udp", name);
    }
    if (sc->pass && strchr(sc->pass, ':') != NULL) {
        sc->up = fd_upstream_implicit(cf, sc->pass, "");
        if (sc->up == NULL)
            return FD_ERROR;
    }
    if (routes_parse(cf, sc) != FD_OK)
        return FD_ERROR;
    if (sc->max_conns_per_ip)
        cf->cycle->conns_per_ip = 1;
    if (sc->access_log && strcmp(sc->access_log, "off") == 0)
        sc->access_log = NULL;
    /* the workers open it as their user: a root master makes it theirs */
    if (sc->access_log) {
        sc->access_log = (char *)fd_conf_path(cf, sc->access_log);
        if (sc->access_log == NULL ||
            fd_dso_worker_file(cf, sc->access_log) != FD_OK)
            return fd_conf_error(cf, "out of memory");
    }
    return FD_OK;
}

/* pass = NAME: the [upstream NAME], wherever it is in the file. */
static int stream_init_cycle(fd_conf_t *cf, fd_cycle_t *cycle)
{
    fd_conf_section_t *s;

    for (s = cycle->sections; s; s = s->next) {
        stream_conf_t *sc = s->conf;
        unsigned i;
        if (s->module != &fd_stream_module)
            continue;
        cf->file = s->file;
        cf->line = s->line;
        if (sc->pass && sc->up == NULL &&
            (sc->up = fd_cycle_section(cycle, "upstream", sc->pass)) ==
                NULL)
            return fd_conf_error(cf, "[stream %s]: pass = %s: no [upstream "
                                 "%s] section (or HOST:PORT)", s->name,
                                 sc->pass, sc->pass);
        sc->words = sc->up ? fd_upstream_tried_words(sc->up) : 1;
        for (i = 0; i < sc->nroutes; i++) {
            stream_route_t *r = &sc->routes[i];
            if (r->up == NULL &&
                (r->up = fd_cycle_section(cycle, "upstream", r->target)) ==
                    NULL)
                return fd_conf_error(cf, "[stream %s]: %s = %s %s: no "
                                     "[upstream %s] section (or HOST:PORT)",
                                     s->name, r->alpn ? "alpn" : "sni",
                                     r->name, r->target, r->target);
            sc->words = fd_max(sc->words, fd_upstream_tried_words(r->up));
        }
    }
    return FD_OK;
}

static int stream_init_worker(fd_worker_t *w)
{
    fd_conf_section_t *s;

    stats_area = fd_stats ? fd_stats_area(fd_stats, &fd_stream_module) : NULL;
    for (s = w->cycle->sections; s; s = s->next) {
        stream_conf_t *sc = s->conf;
        if (s->module != &fd_stream_module)
            continue;
        sc->stats = stats_area ? fd_status_named_entry(
                                     stats_area, sizeof(stream_stats_t),
                                     STREAM_STATS, sc->name,
                                     sizeof(stats_area->name))
                               : NULL;
        if (sc->ls->udp && sc->udp == NULL &&
            udp_init_worker(w, sc) != FD_OK)
            return FD_ERROR;
        if (sc->access_log == NULL)
            continue;
        sc->log_fd = open(sc->access_log, O_WRONLY | O_APPEND | O_CREAT |
                          O_CLOEXEC | O_NOFOLLOW, 0644);
        if (sc->log_fd < 0)
            fd_log_error(FD_LOG_ERR, errno, "open(\"%s\") failed",
                         sc->access_log);
    }
    return FD_OK;
}

/* The access logs (and, at exit, the UDP sessions: logged first) */
static void logs_close(fd_worker_t *w, int udp_too)
{
    fd_conf_section_t *s;

    for (s = w->cycle->sections; s; s = s->next) {
        stream_conf_t *sc = s->conf;
        if (s->module != &fd_stream_module)
            continue;
        if (udp_too)
            udp_exit_worker(sc);
        if (sc->log_fd >= 0) {
            close(sc->log_fd);
            sc->log_fd = -1;
        }
    }
}

static void stream_exit_worker(fd_worker_t *w)
{
    logs_close(w, 1);
}

static void stream_reopen(fd_worker_t *w)
{
    logs_close(w, 0);
    stream_init_worker(w); /* a UDP listener already set up stays */
}

/* --- UDP ----------------------------------------------------------------- */

#define UDP_BUCKETS 1024
#define UDP_MAX_DGRAM 65536

typedef struct udp_sess_s udp_sess_t;

typedef struct udp_listener_s {
    fd_event_t ev;             /* this worker's socket of the listener */
    stream_conf_t *sc;
    udp_sess_t *table[UDP_BUCKETS];
} udp_listener_t;

/* One client address's session: its socket to the server. */
struct udp_sess_s {
    fd_event_t ev;             /* the server's socket; first */
    udp_listener_t *ul;
    udp_sess_t *next;          /* in its bucket */
    struct sockaddr_storage client;
    socklen_t clen;
    union {                    /* the address the client wrote to */
        struct in_pktinfo v4;
        struct in6_pktinfo v6;
    } local;
    unsigned has_local:1;
    fd_upstream_peer_t *peer;
    fd_timer_t timer;          /* proxy_timeout */
    fd_msec_t start;
    uint64_t received, sent;   /* bytes from the client, to it */
    uint64_t requests, responses; /* datagrams each way */
    int status;
    fd_posted_t free_post;
};

static char udp_buf[UDP_MAX_DGRAM];

static unsigned udp_hash(const struct sockaddr_storage *sa, socklen_t len)
{
    const unsigned char *p = (const unsigned char *)sa;
    uint32_t h = 2166136261u;
    socklen_t i;

    for (i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h % UDP_BUCKETS;
}

static void udp_end(udp_sess_t *us)
{
    udp_listener_t *ul = us->ul;
    stream_conf_t *sc = ul->sc;
    udp_sess_t **pp = &ul->table[udp_hash(&us->client, us->clen)];

    while (*pp && *pp != us)
        pp = &(*pp)->next;
    if (*pp)
        *pp = us->next;
    if (fd_timer_armed(&us->timer))
        fd_timer_del(&us->timer);
    if (us->ev.fd >= 0)
        fd_event_close(&us->ev);
    if (sc->stats) {
        sc->stats->active--;
        sc->stats->failed += us->status != 200;
        sc->stats->received += us->received;
        sc->stats->sent += us->sent;
    }
    if (sc->log_fd >= 0) {
        char addr[INET6_ADDRSTRLEN] = "-";
        if (us->client.ss_family == AF_INET)
            inet_ntop(AF_INET, &((struct sockaddr_in *)&us->client)->sin_addr,
                      addr, sizeof(addr));
        else if (us->client.ss_family == AF_INET6)
            inet_ntop(AF_INET6,
                      &((struct sockaddr_in6 *)&us->client)->sin6_addr, addr,
                      sizeof(addr));
        stream_log(sc, addr, "UDP", us->status, us->sent, us->received,
                   us->start, us->peer, NULL);
    }
    if (us->peer)
        fd_upstream_peer_release(us->peer);
    /* an event of this turn may still name it */
    us->free_post.handler = free;
    us->free_post.data = us;
    fd_event_post(&us->free_post);
}

static void udp_timeout(fd_timer_t *t)
{
    udp_sess_t *us = (udp_sess_t *)((char *)t - offsetof(udp_sess_t, timer));

    udp_end(us);
}

/* A datagram of the server's, to the client from the address it wrote to */
static int udp_reply(udp_sess_t *us, const char *buf, size_t n)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = n};
    char cbuf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
    struct msghdr mh = {.msg_name = &us->client, .msg_namelen = us->clen,
                        .msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *cm;

    if (us->has_local) {
        memset(cbuf, 0, sizeof(cbuf));
        mh.msg_control = cbuf;
        cm = (struct cmsghdr *)cbuf;
        if (us->client.ss_family == AF_INET6) {
            cm->cmsg_level = IPPROTO_IPV6;
            cm->cmsg_type = IPV6_PKTINFO;
            cm->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
            memcpy(CMSG_DATA(cm), &us->local.v6, sizeof(us->local.v6));
            mh.msg_controllen = CMSG_SPACE(sizeof(struct in6_pktinfo));
        } else {
            struct in_pktinfo pi = {.ipi_spec_dst = us->local.v4.ipi_addr};
            cm->cmsg_level = IPPROTO_IP;
            cm->cmsg_type = IP_PKTINFO;
            cm->cmsg_len = CMSG_LEN(sizeof(pi));
            memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
            mh.msg_controllen = CMSG_SPACE(sizeof(pi));
        }
    }
    return sendmsg(us->ul->ev.fd, &mh, MSG_DONTWAIT) < 0 ? FD_ERROR : FD_OK;
}

/* The server's socket: its datagrams go back to the client. */
static void udp_upstream_event(fd_event_t *ev, uint32_t events)
{
    udp_sess_t *us = (udp_sess_t *)ev;
    stream_conf_t *sc = us->ul->sc;
    int i;

    (void)events;
    for (i = 0; i < 64; i++) {
        ssize_t n = recv(ev->fd, udp_buf, sizeof(udp_buf), 0);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            /* ECONNREFUSED: an ICMP port unreachable for what we sent */
            fd_log_error(FD_LOG_ERR, errno, "stream %s: recv() from %s "
                         "failed", sc->name, us->peer->name);
            if (us->responses == 0) {
                fd_upstream_peer_failed(us->peer);
                us->status = 502;
            }
            udp_end(us);
            return;
        }
        if (us->responses == 0)
            fd_upstream_peer_ok(us->peer);
        us->responses++;
        if (udp_reply(us, udp_buf, (size_t)n) == FD_OK)
            us->sent += (uint64_t)n;
        us->status = 200;
        if (sc->proxy_responses &&
            us->responses >= us->requests * (uint64_t)sc->proxy_responses) {
            udp_end(us);
            return;
        }
    }
    fd_timer_del(&us->timer);
    fd_timer_add(&us->timer, sc->proxy_timeout);
}

/* A new client address: a server of the group, a socket connected to it */
static udp_sess_t *udp_session(udp_listener_t *ul,
                               const struct sockaddr_storage *sa,
                               socklen_t len)
{
    stream_conf_t *sc = ul->sc;
    uint64_t *tried;
    udp_sess_t *us;
    const void *key = sa->ss_family == AF_INET6
                          ? (const void *)&((struct sockaddr_in6 *)sa)->sin6_addr
                          : (const void *)&((struct sockaddr_in *)sa)->sin_addr;
    fd_upstream_peer_t *p;
    int fd = -1;

    us = calloc(1, sizeof(*us));
    tried = calloc(sc->words, sizeof(*tried));
    if (us == NULL || tried == NULL) {
        free(us);
        free(tried);
        return NULL;
    }
    us->ul = ul;
    us->client = *sa;
    us->clen = len;
    us->start = fd_current_msec;
    us->status = 502;
    us->ev.fd = -1;
    us->timer.handler = udp_timeout;
    /* a server the socket can be made for; sends fail later, if at all */
    while ((p = fd_upstream_pick(sc->up, tried,
                                 fd_upstream_hash(
                                     key, sa->ss_family == AF_INET6 ? 16
                                                                    : 4))) !=
           NULL) {
        fd = socket(p->sa.ss_family, SOCK_DGRAM | SOCK_NONBLOCK |
                                         SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&p->sa, p->salen) == 0)
            break;
        fd_log_error(FD_LOG_ERR, errno, "stream %s: UDP socket to %s failed",
                     sc->name, p->name);
        if (fd >= 0)
            close(fd);
        fd = -1;
        fd_upstream_peer_failed(p);
        fd_upstream_set_tried(tried, p, 1);
    }
    free(tried);
    if (sc->stats) {
        sc->stats->connections++;
        sc->stats->active++;
    }
    if (fd < 0) {
        if (p == NULL)
            fd_log_error(FD_LOG_ERR, 0, "stream %s: no live server in "
                         "upstream \"%s\"", sc->name, sc->up->name);
        us->status = 502;
        udp_end(us); /* logged, counted */
        return NULL;
    }
    fd_upstream_peer_acquire(p);
    us->peer = p;
    us->ev.fd = fd;
    us->ev.handler = udp_upstream_event;
    if (fd_event_add(&us->ev, EPOLLIN) < 0) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        close(fd);
        us->ev.fd = -1;
        udp_end(us);
        return NULL;
    }
    us->next = ul->table[udp_hash(sa, len)];
    ul->table[udp_hash(sa, len)] = us;
    return us;
}

/* The listener: each datagram to its client's session. */
static void udp_listen_event(fd_event_t *ev, uint32_t events)
{
    udp_listener_t *ul = (udp_listener_t *)ev;
    stream_conf_t *sc = ul->sc;
    int i;

    (void)events;
    for (i = 0; i < 64; i++) {
        struct sockaddr_storage sa;
        char cbuf[CMSG_SPACE(sizeof(struct in6_pktinfo)) + 64];
        struct iovec iov = {.iov_base = udp_buf, .iov_len = sizeof(udp_buf)};
        struct msghdr mh = {.msg_name = &sa, .msg_namelen = sizeof(sa),
                            .msg_iov = &iov, .msg_iovlen = 1,
                            .msg_control = cbuf,
                            .msg_controllen = sizeof(cbuf)};
        struct cmsghdr *cm;
        udp_sess_t *us;
        ssize_t n = recvmsg(ev->fd, &mh, MSG_DONTWAIT);

        if (n < 0)
            break; /* EAGAIN; an error of a datagram is that datagram's */
        if (mh.msg_namelen > sizeof(sa))
            continue;
        for (us = ul->table[udp_hash(&sa, mh.msg_namelen)]; us;
             us = us->next)
            if (us->clen == mh.msg_namelen &&
                memcmp(&us->client, &sa, mh.msg_namelen) == 0)
                break;
        if (us == NULL) {
            us = udp_session(ul, &sa, mh.msg_namelen);
            if (us == NULL)
                continue;
            for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level == IPPROTO_IP &&
                    cm->cmsg_type == IP_PKTINFO) {
                    memcpy(&us->local.v4, CMSG_DATA(cm),
                           sizeof(us->local.v4));
                    us->has_local = 1;
                } else if (cm->cmsg_level == IPPROTO_IPV6 &&
                           cm->cmsg_type == IPV6_PKTINFO) {
                    memcpy(&us->local.v6, CMSG_DATA(cm),
                           sizeof(us->local.v6));
                    us->has_local = 1;
                }
            }
        }
        us->requests++;
        us->received += (uint64_t)n;
        if (send(us->ev.fd, udp_buf, (size_t)n, MSG_DONTWAIT) < 0 &&
            errno != EAGAIN) {
            /* ECONNREFUSED: the server's port said no to an earlier one */
            fd_log_error(FD_LOG_ERR, errno, "stream %s: send() to %s failed",
                         sc->name, us->peer->name);
            if (us->responses == 0) {
                fd_upstream_peer_failed(us->peer);
                us->status = 502;
            }
            udp_end(us);
            continue;
        }
        if (fd_timer_armed(&us->timer))
            fd_timer_del(&us->timer);
        fd_timer_add(&us->timer, sc->proxy_timeout);
    }
}

static int udp_init_worker(fd_worker_t *w, stream_conf_t *sc)
{
    fd_listening_t *ls = sc->ls;
    udp_listener_t *ul = calloc(1, sizeof(*ul));
    int fd;

    if (ul == NULL)
        return FD_ERROR;
    fd = fcntl(ls->fds[ls->nfds > 1 ? w->index % ls->nfds : 0],
               F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "the socket of %s udp", ls->text);
        free(ul);
        return FD_ERROR;
    }
    ul->ev.fd = fd;
    ul->ev.handler = udp_listen_event;
    ul->sc = sc;
    if (fd_event_add(&ul->ev, EPOLLIN) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "epoll_ctl(%s udp) failed",
                     ls->text);
        close(fd);
        free(ul);
        return FD_ERROR;
    }
    sc->udp = ul;
    return FD_OK;
}

/* The worker's end: its sessions logged, its socket closed. */
static void udp_exit_worker(stream_conf_t *sc)
{
    udp_listener_t *ul = sc->udp;
    unsigned i;

    if (ul == NULL)
        return;
    for (i = 0; i < UDP_BUCKETS; i++)
        while (ul->table[i])
            udp_end(ul->table[i]);
    fd_event_close(&ul->ev);
    sc->udp = NULL;
    free(ul); /* the sessions' frees are posted: none names it */
}

/* --- status -------------------------------------------------------------- */

static void stream_status(fd_status_t *st, const void *a, unsigned worker)
{
    const stream_stats_t *e = a;
    char labels[96];
    unsigned i;

    if (e == NULL)
        return;
    for (i = 0; i < STREAM_STATS; i++, e++) {
        if (e->name[0] == '\0')
            continue;
        snprintf(labels, sizeof(labels), "stream=\"%s\"", e->name);
        fd_status_counter(st, "stream_connections", "Connections accepted "
                          "on the [stream] listener.", labels,
                          e->connections);
        if (worker != FD_STATUS_RETIRED)
            fd_status_gauge(st, "stream_active", "Connections open now.",
                            labels, e->active);
        fd_status_counter(st, "stream_failed", "Connections no server "
                          "took (502) or that failed before one did.",
                          labels, e->failed);
        fd_status_counter(st, "stream_bytes_received", "Bytes read from "
                          "clients (and passed to the servers).", labels,
                          e->received);
        fd_status_counter(st, "stream_bytes_sent", "Bytes sent to clients "
                          "(read from the servers).", labels, e->sent);
    }
}

static void stream_retire(void *retired, const void *a)
{
    const stream_stats_t *s = a;
    stream_stats_t *into;
    unsigned i;

    for (i = 0; i < STREAM_STATS; i++, s++) {
        if (s->name[0] == '\0' ||
            (into = fd_status_named_entry(retired, sizeof(*s), STREAM_STATS,
                                          s->name, sizeof(s->name))) ==
                NULL)
            continue;
        into->connections += s->connections;
        into->failed += s->failed;
        into->received += s->received;
        into->sent += s->sent;
    }
}

static const fd_directive_t stream_directives[] = {
    {.name = "listen", .type = FD_CONF_STR, .offset = SC(listen),
     .doc = "ADDR:PORT ([::]:PORT for IPv6) of this TCP listener: its "
            "connections are proxied to pass, byte for byte. ADDR:PORT "
            "ssl: TLS ends here (ssl_certificate...), the server gets the "
            "plaintext. ADDR:PORT udp: a UDP listener; each client "
            "address's datagrams are a session with one server "
            "(proxy_responses, proxy_timeout)"},
    {.name = "pass", .type = FD_CONF_STR, .offset = SC(pass),
     .doc = "HOST:PORT, or the NAME of an [upstream NAME] group (its "
            "balance, max_fails, fail_timeout and health checks choose the "
            "server; a failed connect goes on to the next one). With "
            "ssl_preread, the route of a name no sni line names (optional: "
            "without it such a client is closed)"},
    {.name = "ssl_preread", .type = FD_CONF_FLAG, .offset = SC(preread),
     .def = "off",
     .doc = "on: read the client's TLS ClientHello first (nothing is "
            "decrypted; the bytes go on to the server unchanged) and choose "
            "the server by its server_name: the sni routes, else pass. For "
            "TLS passthrough to servers that terminate TLS themselves"},
    {.name = "preread_timeout", .type = FD_CONF_MSEC,
     .offset = SC(preread_timeout), .def = "30s", .min = 1, .max = 3600000,
     .doc = "ssl_preread: time for the whole ClientHello; past it the "
            "client is closed (400 in the access log)"},
    {.name = "sni", .type = FD_CONF_LIST, .offset = SC(sni),
     .doc = "NAME TARGET, repeatable (ssl_preread = on): a ClientHello "
            "whose server_name is NAME goes to TARGET (HOST:PORT or an "
            "[upstream] name). NAME is a host name, or *.DOMAIN for any name "
            "under DOMAIN (an exact NAME wins, then the longest DOMAIN); "
            "no match, no server_name or not TLS: pass"},
    {.name = "ssl_certificate", .type = FD_CONF_STR,
     .offset = SC(ssl_certificate),
     .doc = "listen = ADDR ssl: the certificate chain (PEM) TLS ends "
            "with; the server gets the plaintext"},
    {.name = "ssl_certificate_key", .type = FD_CONF_STR,
     .offset = SC(ssl_certificate_key),
     .doc = "listen = ADDR ssl: its key (PEM)"},
    {.name = "ssl_protocols", .type = FD_CONF_CUSTOM,
     .offset = SC(ssl_protocols), .set = fd_ssl_set_protocols,
     .def = "TLSv1.2 TLSv1.3",
     .doc = "listen = ADDR ssl: the TLS versions taken"},
    {.name = "ssl_ciphers", .type = FD_CONF_CUSTOM, .offset = SC(ssl_ciphers),
     .set = fd_ssl_set_ciphers, .def = "ECDHE+AESGCM:ECDHE+CHACHA20",
     .doc = "listen = ADDR ssl: the TLS 1.2 cipher list (OpenSSL's syntax)"},
    {.name = "ssl_handshake_timeout", .type = FD_CONF_MSEC,
     .offset = SC(ssl_handshake_timeout), .def = "60s", .min = 1,
     .max = 3600000,
     .doc = "listen = ADDR ssl: time for the client's TLS handshake "
            "(nginx's default); past it the client is closed (400 in the "
            "access log)"},
    {.name = "alpn", .type = FD_CONF_LIST, .offset = SC(alpn),
     .doc = "PROTOCOL TARGET, repeatable (ssl_preread = on): a ClientHello "
            "that offers PROTOCOL (among its ALPN list: h2, http/1.1, "
            "acme-tls/1...) goes to TARGET, before the sni routes; the "
            "first such line wins"},
    {.name = "proxy_timeout", .type = FD_CONF_MSEC,
     .offset = SC(proxy_timeout), .def = "10m", .min = 1, .max = 86400000,
     .doc = "a connection with no byte moved either way for this long is "
            "closed (nginx's proxy_timeout)"},
    {.name = "proxy_connect_timeout", .type = FD_CONF_MSEC,
     .offset = SC(connect_timeout), .def = "60s", .min = 1, .max = 86400000,
     .doc = "time to connect to a server before trying the next one"},
    {.name = "proxy_buffer_size", .type = FD_CONF_SIZE,
     .offset = SC(buffer_size), .def = "16k", .min = 1024,
     .max = 16777216,
     .doc = "the buffer each way of a TCP connection (two per "
            "connection): larger moves bulk transfers in fewer system "
            "calls, at that much memory per connection. ssl_preread's "
            "ClientHello must fit in it (nginx's proxy_buffer_size)"},
    {.name = "proxy_responses", .type = FD_CONF_INT,
     .offset = SC(proxy_responses), .def = "0", .min = 0, .max = 1000000,
     .doc = "listen ... udp: the datagrams a server answers each client "
            "datagram with; once they all came, the session ends (1 for "
            "DNS). 0: no number, the session ends after proxy_timeout of "
            "silence"},
    {.name = "proxy_protocol", .type = FD_CONF_FLAG,
     .offset = SC(proxy_protocol), .def = "off",
     .doc = "on: a PROXY protocol v1 header (the client's address and the "
            "one it reached) first on each connection to the server"},
    {.name = "max_conns_per_ip", .type = FD_CONF_INT,
     .offset = SC(max_conns_per_ip), .def = "0", .min = 0,
     .max = 1000000,
     .doc = "connections one client address may hold open, per worker; "
            "more are closed at once. 0: no limit"},
    {.name = "access_log", .type = FD_CONF_STR, .offset = SC(access_log),
     .doc = "a file that gets one line per connection, or off (the "
            "default): client, time, TCP, status (200; 502: no server "
            "answered), bytes sent to the client, bytes received from it, "
            "duration, the server's address and the [stream] name (with "
            "ssl_preread, then the ClientHello's server_name in quotes)"},
    {.name = NULL},
};

fd_module_t fd_stream_module = {
    .name = "stream",
    .init_worker = stream_init_worker,
    .exit_worker = stream_exit_worker,
    .reopen = stream_reopen,
    .section = "stream",
    .section_directives = stream_directives,
    .section_size = sizeof(stream_conf_t),
    .init_section = stream_init_section,
    .init_cycle = stream_init_cycle,
    .shm_size = STREAM_STATS * sizeof(stream_stats_t),
    .status = stream_status,
    .retire = stream_retire,
};
