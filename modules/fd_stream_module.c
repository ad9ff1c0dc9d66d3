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
 * ssl_preread = on reads the client's TLS ClientHello first (into the
 * buffer that goes on to the server: nothing is decrypted or changed) and
 * chooses the server by its server_name: the sni = NAME TARGET routes,
 * else pass. Until the hello is whole (preread_timeout) the client's
 * events come here, not to the splice.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <time.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_status.h"
#include "fd_upstream.h"
#include "fd_stream_preread.h"

#define STREAM_BUF 16384
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

/* sni = NAME TARGET */
typedef struct {
    char *name;                /* lowercased; "*.x.y": any name under x.y */
    char *target;
    fd_upstream_t *up;
} stream_route_t;

typedef struct {
    char *listen;
    char *pass;
    int preread;
    fd_msec_t preread_timeout;
    fd_conf_list_t sni;
    fd_msec_t proxy_timeout;
    fd_msec_t connect_timeout;
    fd_int_t max_conns_per_ip;
    int proxy_protocol;
    char *access_log;
    /* resolved */
    const char *name;
    fd_upstream_t *up;         /* pass's, or NULL (ssl_preread: none) */
    stream_route_t *routes;
    unsigned nroutes;
    size_t words;              /* of tried[]: the largest group's */
    int log_fd;                /* per worker; -1: none */
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
    char mem[2][STREAM_BUF];
    uint64_t tried[];          /* fd_upstream_tried_words(up) */
} session_t;

fd_module_t fd_stream_module;

static const fd_directive_t stream_directives[];

#define SC(f) offsetof(stream_conf_t, f)

static void session_connect(session_t *ss);

static void session_log(session_t *ss)
{
    stream_conf_t *sc = ss->sc;
    char line[512], addr[INET6_ADDRSTRLEN], when[32];
    struct tm tm;
    time_t now = time(NULL);
    fd_msec_t ms = fd_current_msec - ss->start;
    int n;

    if (sc->log_fd < 0)
        return;
    if (inet_ntop(ss->client.family, ss->client.addr, addr, sizeof(addr)) ==
        NULL)
        strcpy(addr, "-");
    localtime_r(&now, &tm);
    strftime(when, sizeof(when), "%d/%b/%Y:%H:%M:%S %z", &tm);
    /* nginx's stream log: $remote_addr [$time_local] $protocol $status
     * $bytes_sent $bytes_received $session_time "$upstream_addr" */
    n = snprintf(line, sizeof(line),
                 "%s [%s] TCP %d %llu %llu %llu.%03llu \"%s\" %s%s%s%s\n",
                 addr, when, ss->status,
                 (unsigned long long)ss->sp.side[CLIENT].sent,
                 (unsigned long long)ss->sp.side[UPSTREAM].sent,
                 (unsigned long long)(ms / 1000),
                 (unsigned long long)(ms % 1000),
                 ss->peer ? ss->peer->name : "-", sc->name,
                 sc->preread ? " \"" : "", sc->preread ? ss->sni : "",
                 sc->preread ? "\"" : "");
    if (n > 0 && write(sc->log_fd, line, (size_t)n) < 0)
        fd_log_error(FD_LOG_ERR, errno, "write() to %s failed",
                     sc->access_log);
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

/* The group for the hello's server_name: an exact route, else the
 * longest "*." one that covers it, else pass's. */
static fd_upstream_t *route(const stream_conf_t *sc, const char *sni)
{
    const stream_route_t *best = NULL;
    size_t n = strlen(sni), bl = 0;
    unsigned i;

    if (n == 0)
        return sc->up;
    for (i = 0; i < sc->nroutes; i++) {
        const stream_route_t *r = &sc->routes[i];
        size_t k = strlen(r->name) - 1; /* "*.x.y": ".x.y" */
        if (r->name[0] != '*') {
            if (strcmp(r->name, sni) == 0)
                return r->up;
        } else if (n > k && strcmp(sni + n - k, r->name + 1) == 0 &&
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
        ss->up = route(ss->sc, hello->sni);
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
    while (cs->s.readable && ss->got < STREAM_BUF) {
        ssize_t n = fd_stream_recv(&cs->s, ss->mem[UPSTREAM] + ss->got,
                                   STREAM_BUF - ss->got);
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
    if (rc == FD_AGAIN && ss->got == STREAM_BUF)
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
    ss = malloc(sizeof(*ss) + words * sizeof(uint64_t));
    if (ss == NULL) {
        fd_log_error(FD_LOG_ERR, errno, "malloc() failed");
        fd_connection_close(c);
        return;
    }
    memset(ss, 0, offsetof(session_t, mem));
    memset(ss->tried, 0, words * sizeof(uint64_t));
    fd_splice_init(&ss->sp, ss->mem[CLIENT], ss->mem[UPSTREAM], STREAM_BUF);
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
    if (fd_splice_watch(&ss->sp, CLIENT) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        session_fail(ss, 500);
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

/* sni = NAME TARGET: NAME a host name or *.DOMAIN, TARGET HOST:PORT or
 * an [upstream] name (found in init_cycle) */
static int routes_parse(fd_conf_t *cf, stream_conf_t *sc)
{
    unsigned i, k;

    if (sc->sni.n == 0)
        return FD_OK;
    sc->routes = fd_pcalloc(cf->pool, sc->sni.n * sizeof(stream_route_t));
    if (sc->routes == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < sc->sni.n; i++) {
        stream_route_t *r = &sc->routes[i];
        char *s = fd_pstrdup(cf->pool, sc->sni.items[i],
                             strlen(sc->sni.items[i]));
        char *save, *extra;
        fd_conf_at_key(cf, sc, "sni");
        if (s == NULL)
            return fd_conf_error(cf, "out of memory");
        r->name = strtok_r(s, " \t", &save);
        r->target = strtok_r(NULL, " \t", &save);
        extra = strtok_r(NULL, " \t", &save);
        if (r->name == NULL || r->target == NULL || extra)
            return fd_conf_error(cf, "sni = NAME TARGET (a host name or "
                                 "*.DOMAIN, then HOST:PORT or an "
                                 "[upstream] name), not \"%s\"",
                                 sc->sni.items[i]);
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
    sc->nroutes = sc->sni.n;
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
    if (sc->pass == NULL && sc->sni.n == 0)
        return fd_conf_error(cf, "[stream %s] needs pass = HOST:PORT or "
                             "an [upstream] name", name);
    if (sc->sni.n && !sc->preread) {
        fd_conf_at_key(cf, sc, "sni");
        return fd_conf_error(cf, "[stream %s]: sni routes need "
                             "ssl_preread = on", name);
    }
    if (fd_cycle_listening_add(cf, sc->listen, &stream_proto, sc) == NULL)
        return FD_ERROR;
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
                return fd_conf_error(cf, "[stream %s]: sni = %s %s: no "
                                     "[upstream %s] section (or HOST:PORT)",
                                     s->name, r->name, r->target, r->target);
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

static void stream_exit_worker(fd_worker_t *w)
{
    fd_conf_section_t *s;

    for (s = w->cycle->sections; s; s = s->next) {
        stream_conf_t *sc = s->conf;
        if (s->module == &fd_stream_module && sc->log_fd >= 0) {
            close(sc->log_fd);
            sc->log_fd = -1;
        }
    }
}

static void stream_reopen(fd_worker_t *w)
{
    stream_exit_worker(w);
    stream_init_worker(w);
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
            "connections are proxied to pass, byte for byte"},
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
    {.name = "proxy_timeout", .type = FD_CONF_MSEC,
     .offset = SC(proxy_timeout), .def = "10m", .min = 1, .max = 86400000,
     .doc = "a connection with no byte moved either way for this long is "
            "closed (nginx's proxy_timeout)"},
    {.name = "proxy_connect_timeout", .type = FD_CONF_MSEC,
     .offset = SC(connect_timeout), .def = "60s", .min = 1, .max = 86400000,
     .doc = "time to connect to a server before trying the next one"},
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
