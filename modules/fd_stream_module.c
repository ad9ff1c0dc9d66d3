/*
 * The L4 stream proxy: [stream NAME] sections, each a TCP listener whose
 * connections are joined byte for byte to a server of an upstream group
 * (pass = HOST:PORT makes an implicit one, pass = NAME names an
 * [upstream NAME]): its balancer, max_fails and health checks choose the
 * server, a refused or timed-out connect goes on to the next one.
 *
 * Written on the public API alone (fastd.h, and fastd_stream.h for the
 * connections): fastd accepts, connects, and splices (the copying on
 * either event backend, bounded buffers both ways, a half-close passed
 * on as shutdown(SHUT_WR), proxy_timeout as the idle timeout). This file
 * steers and accounts: TLS, the preread and its routes, one access log
 * line per connection, as nginx's stream log, and per [stream] counters
 * in each worker's stats slot (/status: stream_connections, _active,
 * _failed, _bytes_received, _bytes_sent).
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
 * handshake runs before any server is chosen, and the splice then
 * carries plaintext to the server.
 *
 * ssl_preread = on reads the client's TLS ClientHello first (into the
 * buffer that goes on to the server: nothing is decrypted or changed) and
 * chooses the server by its server_name: the sni = NAME TARGET routes,
 * else pass, once the hello is whole (preread_timeout).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fastd_stream.h"
#include "fd_stream_preread.h"

#define STREAM_STATS 64        /* [stream] sections counted in /status */
#define NAME_MAX_ 64           /* a [stream]'s name, its NUL included */

/* One [stream]'s figures in a worker's stats slot, found by name (a
 * reload may reorder the sections). */
typedef struct {
    char name[NAME_MAX_];
    uint64_t connections;      /* accepted */
    uint64_t active;           /* gauge: open now */
    uint64_t failed;           /* no server took it (502), or an error */
    uint64_t received;         /* bytes from clients */
    uint64_t sent;             /* bytes to clients */
} stream_stats_t;

/* sni = NAME TARGET, alpn = PROTOCOL TARGET */
typedef struct stream_route_s stream_route_t;
struct stream_route_s {
    char *name;                /* lowercased; "*.x.y": any name under x.y;
                                * alpn: the protocol */
    char *target;
    fd_api_upstream_t *up;
    fd_api_conf_pos_t pos;     /* its line */
    unsigned alpn:1;
    stream_route_t *next;      /* in file order */
};

typedef struct {
    const char *listen;
    const char *pass;
    int preread;
    uint64_t preread_timeout;
    /* listen ... ssl: TLS ends here, the server gets the plaintext */
    const char *ssl_certificate, *ssl_certificate_key;
    const char *ssl_protocols, *ssl_ciphers;
    uint64_t ssl_handshake_timeout;
    uint64_t proxy_timeout;
    uint64_t connect_timeout;
    int64_t max_conns_per_ip;
    int64_t proxy_responses;
    uint64_t buffer_size;
    int proxy_protocol;
    const char *access_log;
    /* resolved */
    const char *name;
    char what[80];             /* "stream NAME": log lines begin so */
    fd_api_stream_ops_t ops;
    fd_api_stream_t *l;
    fd_api_tls_t *tls;
    fd_api_upstream_t *up;     /* pass's, or NULL (ssl_preread: none) */
    stream_route_t *routes, **last;
    unsigned nsni, nalpn;
    int log_fd;                /* per worker; -1: none */
    struct udp_listener_s *udp; /* per worker: listen ... udp's state */
    stream_stats_t *stats;     /* per worker: its entry, or NULL */
} stream_conf_t;

/* A TCP connection's: the module's bytes of an fd_api_conn_t */
typedef struct {
    unsigned counted:1;        /* in the figures and the access log */
    char sni[256];             /* the hello's server_name, for the log */
} session_t;

#define SC(f) offsetof(stream_conf_t, f)

static stream_stats_t *stats_area; /* this worker's slot, or NULL */

/* $time_local, made once a second */
static const char *log_time(void)
{
    static char buf[sizeof("28/Sep/1970:12:00:00 +0000")];
    static time_t made = -1;
    time_t now = time(NULL);
    struct tm tm;

    if (now != made && localtime_r(&now, &tm) != NULL) {
        strftime(buf, sizeof(buf), "%d/%b/%Y:%H:%M:%S %z", &tm);
        made = now;
    }
    return buf;
}

/* One access log line, nginx's stream log: $remote_addr [$time_local]
 * $protocol $status $bytes_sent $bytes_received $session_time
 * "$upstream_addr", then the [stream]'s name (and the SNI: ssl_preread).
 * sent: bytes to the client; received: from it. */
static void stream_log(const stream_conf_t *sc, const char *addr,
                       const char *proto, int status, uint64_t sent,
                       uint64_t received, uint64_t start,
                       const char *server, const char *sni)
{
    char line[600];
    uint64_t ms = fd_api_now_msec() - start;
    int n;

    n = snprintf(line, sizeof(line),
                 "%s [%s] %s %d %llu %llu %llu.%03llu \"%s\" %s%s%s%s\n",
                 addr, log_time(), proto, status, (unsigned long long)sent,
                 (unsigned long long)received,
                 (unsigned long long)(ms / 1000),
                 (unsigned long long)(ms % 1000), server ? server : "-",
                 sc->name, sni ? " \"" : "", sni ? sni : "",
                 sni ? "\"" : "");
    if (n > 0 && write(sc->log_fd, line,
                       (size_t)n < sizeof(line) ? (size_t)n
                                                : sizeof(line) - 1) < 0)
        fd_api_log(FD_API_LOG_ERR, errno, "write() to %s failed",
                   sc->access_log);
}

static void addr_text(const fd_api_addr_t *a, char *buf, size_t size)
{
    if (inet_ntop(a->family, a->addr, buf, (socklen_t)size) == NULL)
        snprintf(buf, size, "-");
}

/* The ops' end: counted, logged. */
static void session_end(fd_api_conn_t *c, void *data)
{
    session_t *ss = data;
    stream_conf_t *sc = fd_api_conn_ctx(c);
    stream_stats_t *st = sc->stats;
    fd_api_conn_info_t in;

    if (!ss->counted)
        return;
    fd_api_conn_info(c, &in);
    if (in.how == FD_API_STREAM_IDLE)
        fd_api_log(FD_API_LOG_INFO, 0, "stream %s: proxy_timeout %llums "
                   "passed, closed", sc->name,
                   (unsigned long long)in.idle_msec);
    else if (in.how == FD_API_STREAM_FAILED)
        fd_api_log(FD_API_LOG_INFO, in.err, "stream %s: closed on an error "
                   "%s", sc->name, in.where);
    if (st) {
        st->active--;
        st->failed += in.status != 200;
        st->received += in.received;
        st->sent += in.sent;
    }
    if (sc->log_fd >= 0) {
        char addr[INET6_ADDRSTRLEN];
        fd_api_addr_t a;
        fd_api_conn_client(c, &a);
        addr_text(&a, addr, sizeof(addr));
        stream_log(sc, addr, "TCP", in.status, in.sent, in.received,
                   in.start_msec, in.server, sc->preread ? ss->sni : NULL);
    }
}

static void session_pass(fd_api_conn_t *c, stream_conf_t *sc,
                         fd_api_upstream_t *up, const char *sni)
{
    if (up == NULL) {
        fd_api_log(FD_API_LOG_ERR, 0, "stream %s: no route for \"%s\" and "
                   "no pass", sc->name, sni);
        fd_api_conn_close(c, 502);
        return;
    }
    fd_api_conn_pass(c, up);
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
static fd_api_upstream_t *route(const stream_conf_t *sc,
                                const fd_preread_t *h)
{
    const stream_route_t *r, *best = NULL;
    size_t n = strlen(h->sni), bl = 0;

    for (r = sc->routes; r; r = r->next)
        if (r->alpn && offers(h->alpn, r->name))
            return r->up;
    if (n == 0)
        return sc->up;
    for (r = sc->routes; r; r = r->next) {
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

/* The client's first bytes: the hello whole (or never), to its server. */
static int preread_more(fd_api_conn_t *c, void *data, const char *buf,
                        size_t len, int rc)
{
    session_t *ss = data;
    stream_conf_t *sc = fd_api_conn_ctx(c);
    fd_preread_t hello;
    int err = errno, prc;

    if (rc == FD_ERROR) {
        fd_api_log(FD_API_LOG_INFO, err, "stream %s: the client %s before "
                   "its TLS ClientHello ended", sc->name,
                   err ? "failed" : "closed");
        fd_api_conn_close(c, 400);
        return FD_OK;
    }
    if (rc == FD_AGAIN) {
        fd_api_log(FD_API_LOG_INFO, 0, "stream %s: no whole TLS ClientHello "
                   "in preread_timeout %llums", sc->name,
                   (unsigned long long)sc->preread_timeout);
        fd_api_conn_close(c, 400);
        return FD_OK;
    }
    prc = fd_preread_parse((const uint8_t *)buf, len, &hello);
    if (prc == FD_AGAIN && rc == FD_OK)
        return FD_AGAIN;
    /* else a hello larger than the buffer, or not one: no name */
    if (prc == FD_OK) {
        memcpy(ss->sni, hello.sni, sizeof(ss->sni));
        session_pass(c, sc, route(sc, &hello), ss->sni);
    } else {
        session_pass(c, sc, sc->up, ss->sni);
    }
    return FD_OK;
}

/* --- listen ... ssl: the handshake before the server ------------------- */

static void handshake_done(fd_api_conn_t *c, void *data, int rc)
{
    session_t *ss = data;
    stream_conf_t *sc = fd_api_conn_ctx(c);

    if (rc == FD_OK) {
        session_pass(c, sc, sc->up, ss->sni);
        return;
    }
    if (rc == FD_AGAIN)
        fd_api_log(FD_API_LOG_INFO, 0, "stream %s: no TLS handshake in "
                   "ssl_handshake_timeout %llums", sc->name,
                   (unsigned long long)sc->ssl_handshake_timeout);
    else
        fd_api_log(FD_API_LOG_INFO, 0, "stream %s: the TLS handshake "
                   "failed%s", sc->name, rc == FD_DECLINED
                                             ? " (plain HTTP sent to a "
                                               "TLS port)"
                                             : "");
    fd_api_conn_close(c, 400);
}

/* The ops' accept: a connection on a [stream] listener. */
static void session_accept(fd_api_conn_t *c, void *data)
{
    session_t *ss = data;
    stream_conf_t *sc = fd_api_conn_ctx(c);

    if (sc->max_conns_per_ip &&
        fd_api_conn_ip_count(c) > (unsigned)sc->max_conns_per_ip) {
        char addr[INET6_ADDRSTRLEN];
        fd_api_addr_t a;
        fd_api_conn_client(c, &a);
        addr_text(&a, addr, sizeof(addr));
        fd_api_log(FD_API_LOG_WARN, 0, "stream %s: %s has %u connections "
                   "open, max_conns_per_ip %ld", sc->name, addr,
                   fd_api_conn_ip_count(c) - 1, (long)sc->max_conns_per_ip);
        fd_api_conn_close(c, 503); /* not counted, not logged */
        return;
    }
    ss->counted = 1;
    if (sc->stats) {
        sc->stats->connections++;
        sc->stats->active++;
    }
    if (sc->tls) {
        if (fd_api_conn_tls(c, sc->tls, sc->ssl_handshake_timeout,
                            handshake_done) != FD_OK)
            fd_api_conn_close(c, 500);
        return;
    }
    if (sc->preread) {
        fd_api_conn_preread(c, sc->preread_timeout, preread_more);
        return;
    }
    fd_api_conn_pass(c, sc->up);
}

/* --- configuration -------------------------------------------------------- */

/* sni = NAME TARGET: NAME a host name or *.DOMAIN; alpn = PROTOCOL
 * TARGET; TARGET HOST:PORT or an [upstream] name (found once the whole
 * file is read) */
static int stream_set(void *conf, const char *key, const char *value,
                      int own)
{
    stream_conf_t *sc = conf;
    int alpn = strcmp(key, "alpn") == 0;
    stream_route_t *r = fd_api_conf_alloc(sizeof(*r));
    char *s = fd_api_conf_alloc(strlen(value) + 1);
    char *save, *extra;
    size_t k;

    (void)own;
    if (r == NULL || s == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    strcpy(s, value);
    r->alpn = (unsigned)alpn;
    r->name = strtok_r(s, " \t", &save);
    r->target = strtok_r(NULL, " \t", &save);
    extra = strtok_r(NULL, " \t", &save);
    if (r->name == NULL || r->target == NULL || extra) {
        fd_api_conf_error(alpn ? "alpn = PROTOCOL TARGET (h2, acme-tls/1..., "
                                 "then HOST:PORT or an [upstream] name), "
                                 "not \"%s\""
                               : "sni = NAME TARGET (a host name or "
                                 "*.DOMAIN, then HOST:PORT or an "
                                 "[upstream] name), not \"%s\"",
                          value);
        return FD_ERROR;
    }
    if (alpn) {
        if (strlen(r->name) > 255 || strchr(r->name, ',') != NULL) {
            fd_api_conf_error("alpn: \"%s\" is not one protocol name",
                              r->name);
            return FD_ERROR;
        }
        sc->nalpn++;
    } else {
        for (k = 0; r->name[k]; k++) {
            char ch = r->name[k];
            if (ch >= 'A' && ch <= 'Z')
                r->name[k] = (char)(ch + 32);
            else if (!((ch >= 'a' && ch <= 'z') ||
                       (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
                       ch == '_' ||
                       (ch == '*' && k == 0 && r->name[1] == '.'))) {
                fd_api_conf_error("sni: \"%s\" is not a host name (or "
                                  "*.DOMAIN)", r->name);
                return FD_ERROR;
            }
        }
        if (r->name[0] == '*' && r->name[2] == '\0') {
            fd_api_conf_error("sni: \"%s\" names no domain (pass is the "
                              "default route)", r->name);
            return FD_ERROR;
        }
        sc->nsni++;
    }
    if (strchr(r->target, ':') != NULL &&
        (r->up = fd_api_upstream_server(r->target, "")) == NULL)
        return FD_ERROR;
    fd_api_conf_pos(&r->pos);
    if (sc->last == NULL)
        sc->last = &sc->routes;
    *sc->last = r;
    sc->last = &r->next;
    return FD_OK;
}

/* listen ... ssl: the context, built now by the master (the files are
 * read as its user), freed with the configuration */
static int ssl_build(stream_conf_t *sc)
{
    const char *cert, *key;
    char what[80];

    if (sc->ssl_certificate == NULL || sc->ssl_certificate_key == NULL) {
        fd_api_conf_error("[stream %s]: listen ... ssl needs "
                          "ssl_certificate and ssl_certificate_key",
                          sc->name);
        return FD_ERROR;
    }
    cert = fd_api_conf_path(sc->ssl_certificate);
    key = fd_api_conf_path(sc->ssl_certificate_key);
    if (cert == NULL || key == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    snprintf(what, sizeof(what), "[stream %s]", sc->name);
    sc->tls = fd_api_tls_server_at(sc, what, cert, key, sc->ssl_protocols,
                                   sc->ssl_ciphers);
    return sc->tls ? FD_OK : FD_ERROR;
}

static int bounds(stream_conf_t *sc)
{
    static const struct {
        const char *key;
        size_t off;
        int64_t min, max;
        int msec;
    } b[] = {
        {"preread_timeout", SC(preread_timeout), 1, 3600000, 1},
        {"ssl_handshake_timeout", SC(ssl_handshake_timeout), 1, 3600000, 1},
        {"proxy_timeout", SC(proxy_timeout), 1, 86400000, 1},
        {"proxy_connect_timeout", SC(connect_timeout), 1, 86400000, 1},
        {"proxy_buffer_size", SC(buffer_size), 1024, 16777216,
         FD_API_SIZE},
        {"proxy_responses", SC(proxy_responses), 0, 1000000, 0},
        {"max_conns_per_ip", SC(max_conns_per_ip), 0, 1000000, 0},
    };
    unsigned i;

    for (i = 0; i < sizeof(b) / sizeof(b[0]); i++) {
        const char *f = (const char *)sc + b[i].off;
        int64_t v;
        if (b[i].msec)
            v = (int64_t) * (const uint64_t *)(const void *)f;
        else
            v = *(const int64_t *)(const void *)f;
        if (fd_api_conf_bounds(sc, b[i].key, v, b[i].min, b[i].max,
                               b[i].msec) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

static void session_end(fd_api_conn_t *c, void *data);

static int stream_init_section(const char *name, void *conf, unsigned index)
{
    stream_conf_t *sc = conf;
    const char *listen = sc->listen;
    size_t n;
    int ssl = 0;

    (void)index;
    sc->name = name;
    sc->log_fd = -1;
    snprintf(sc->what, sizeof(sc->what), "stream %s", name);
    sc->ops = (fd_api_stream_ops_t){.what = sc->what,
                                    .size = sizeof(session_t),
                                    .accept = session_accept,
                                    .end = session_end};
    if (bounds(sc) != FD_OK)
        return FD_ERROR;
    if (listen == NULL) {
        fd_api_conf_error("[stream %s] needs listen = ADDR:PORT", name);
        return FD_ERROR;
    }
    if (sc->pass == NULL && sc->routes == NULL) {
        fd_api_conf_error("[stream %s] needs pass = HOST:PORT or an "
                          "[upstream] name", name);
        return FD_ERROR;
    }
    if (sc->routes && !sc->preread) {
        const char *key = sc->nsni ? "sni" : "alpn";
        fd_api_conf_at_key(sc, key);
        fd_api_conf_error("[stream %s]: %s routes need ssl_preread = on",
                          name, key);
        return FD_ERROR;
    }
    /* "ADDR ssl": TLS ends here (the listening socket is a plain one to
     * the engine: the handshake is this module's) */
    n = strlen(listen);
    if (n > 4 && strcmp(listen + n - 4, " ssl") == 0) {
        char *a = fd_api_conf_alloc(n - 3);
        if (a == NULL) {
            fd_api_conf_error("out of memory");
            return FD_ERROR;
        }
        memcpy(a, listen, n - 4);
        a[n - 4] = '\0';
        listen = a;
        ssl = 1;
    }
    fd_api_conf_at_key(sc, "listen");
    sc->l = fd_api_stream_listen(listen, &sc->ops, sc);
    if (sc->l == NULL)
        return FD_ERROR;
    if (ssl) {
        if (fd_api_stream_is_udp(sc->l) || sc->preread) {
            fd_api_conf_error("[stream %s]: listen ... ssl goes with "
                              "neither udp nor ssl_preread (which passes "
                              "TLS on as it is)", name);
            return FD_ERROR;
        }
        if (ssl_build(sc) != FD_OK)
            return FD_ERROR;
    } else if (sc->ssl_certificate || sc->ssl_certificate_key) {
        fd_api_conf_at_key(sc, sc->ssl_certificate ? "ssl_certificate"
                                                   : "ssl_certificate_key");
        fd_api_conf_error("[stream %s]: a certificate without listen = "
                          "ADDR ssl", name);
        return FD_ERROR;
    }
    if (fd_api_stream_is_udp(sc->l)) {
        const char *tcp = sc->preread ? "ssl_preread"
                          : sc->proxy_protocol ? "proxy_protocol"
                          : sc->max_conns_per_ip ? "max_conns_per_ip"
                                                 : NULL;
        if (tcp) {
            fd_api_conf_at_key(sc, tcp);
            fd_api_conf_error("[stream %s]: %s is for TCP, not listen ... "
                              "udp", name, tcp);
            return FD_ERROR;
        }
    } else if (sc->proxy_responses) {
        fd_api_conf_at_key(sc, "proxy_responses");
        fd_api_conf_error("[stream %s]: proxy_responses is for listen ... "
                          "udp", name);
        return FD_ERROR;
    }
    if (fd_api_stream_set(sc->l, FD_API_STREAM_BUFFER_SIZE,
                          (int64_t)sc->buffer_size) != FD_OK ||
        fd_api_stream_set(sc->l, FD_API_STREAM_IDLE_TIMEOUT,
                          (int64_t)sc->proxy_timeout) != FD_OK ||
        fd_api_stream_set(sc->l, FD_API_STREAM_CONNECT_TIMEOUT,
                          (int64_t)sc->connect_timeout) != FD_OK ||
        fd_api_stream_set(sc->l, FD_API_STREAM_PROXY_PROTOCOL,
                          sc->proxy_protocol) != FD_OK ||
        fd_api_stream_set(sc->l, FD_API_STREAM_COUNT_IP,
                          sc->max_conns_per_ip != 0) != FD_OK)
        return FD_ERROR;
    if (sc->pass && strchr(sc->pass, ':') != NULL) {
        sc->up = fd_api_upstream_server(sc->pass, "");
        if (sc->up == NULL)
            return FD_ERROR;
    }
    if (sc->access_log && strcmp(sc->access_log, "off") == 0)
        sc->access_log = NULL;
    /* the workers open it as their user: a root master makes it theirs */
    if (sc->access_log) {
        sc->access_log = fd_api_conf_path(sc->access_log);
        if (sc->access_log == NULL ||
            fd_api_conf_worker_file(sc->access_log) != FD_OK) {
            fd_api_conf_error("out of memory");
            return FD_ERROR;
        }
    }
    return FD_OK;
}

/* pass = NAME, and the routes' names: the [upstream NAME], wherever it is
 * in the file. */
static void resolve(const char *name, void *conf, void *data)
{
    stream_conf_t *sc = conf;
    int *rc = data;
    stream_route_t *r;

    (void)name;
    if (*rc != FD_OK)
        return;
    if (sc->pass && sc->up == NULL &&
        (sc->up = fd_api_upstream_group(sc->pass)) == NULL) {
        fd_api_conf_at_key(sc, "pass");
        fd_api_conf_error("[stream %s]: pass = %s: no [upstream %s] section "
                          "(or HOST:PORT)", sc->name, sc->pass, sc->pass);
        *rc = FD_ERROR;
        return;
    }
    for (r = sc->routes; r; r = r->next)
        if (r->up == NULL &&
            (r->up = fd_api_upstream_group(r->target)) == NULL) {
            fd_api_conf_at(&r->pos);
            fd_api_conf_error("[stream %s]: %s = %s %s: no [upstream %s] "
                              "section (or HOST:PORT)", sc->name,
                              r->alpn ? "alpn" : "sni", r->name, r->target,
                              r->target);
            *rc = FD_ERROR;
            return;
        }
}

static int stream_configured(void)
{
    int rc = FD_OK;

    fd_api_section_each("stream", resolve, &rc);
    return rc;
}

/* --- UDP ----------------------------------------------------------------- */

#define UDP_BUCKETS 1024
#define UDP_MAX_DGRAM 65536

typedef struct udp_sess_s udp_sess_t;

typedef struct udp_listener_s {
    fd_api_io_t *io;           /* this worker's socket of the listener */
    int fd;                    /* fastd's: never closed here */
    stream_conf_t *sc;
    udp_sess_t *table[UDP_BUCKETS];
} udp_listener_t;

/* One client address's session: its socket to the server. */
struct udp_sess_s {
    fd_api_io_t *io;           /* the server's socket */
    int fd;
    fd_api_timer_t *timer;     /* proxy_timeout */
    fd_api_posted_t *free;     /* its end: freed at the end of the turn */
    udp_listener_t *ul;
    udp_sess_t *next;          /* in its bucket */
    struct sockaddr_storage client;
    socklen_t clen;
    union {                    /* the address the client wrote to */
        struct in_pktinfo v4;
        struct in6_pktinfo v6;
    } local;
    unsigned has_local:1;
    unsigned ended:1;          /* an event of this turn finds it over */
    fd_api_peer_t *peer;
    uint64_t start;
    uint64_t received, sent;   /* bytes from the client, to it */
    uint64_t requests, responses; /* datagrams each way */
    int status;
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

static void udp_free(void *data)
{
    udp_sess_t *us = data;

    fd_api_io_free(us->io);
    fd_api_timer_cancel(us->timer);
    fd_api_posted_free(us->free);
    free(us);
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
    us->ended = 1;
    fd_api_timer_unset(us->timer);
    if (us->fd >= 0) {
        fd_api_io_stop(us->io);
        close(us->fd);
        us->fd = -1;
    }
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
                   us->start, us->peer ? fd_api_peer_name(us->peer) : NULL,
                   NULL);
    }
    if (us->peer)
        fd_api_peer_release(us->peer);
    /* an event of this turn may still name it */
    fd_api_post(us->free);
}

static void udp_timeout(void *data)
{
    udp_end(data);
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
    return sendmsg(us->ul->fd, &mh, MSG_DONTWAIT) < 0 ? FD_ERROR : FD_OK;
}

/* The server's socket: its datagrams go back to the client. */
static void udp_upstream_event(void *data, unsigned events)
{
    udp_sess_t *us = data;
    stream_conf_t *sc = us->ul->sc;
    int i;

    (void)events;
    if (us->ended)
        return;
    for (i = 0; i < 64; i++) {
        ssize_t n = recv(us->fd, udp_buf, sizeof(udp_buf), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            /* ECONNREFUSED: an ICMP port unreachable for what we sent */
            fd_api_log(FD_API_LOG_ERR, errno, "stream %s: recv() from %s "
                       "failed", sc->name, fd_api_peer_name(us->peer));
            if (us->responses == 0) {
                fd_api_peer_failed(us->peer);
                us->status = 502;
            }
            udp_end(us);
            return;
        }
        if (us->responses == 0)
            fd_api_peer_ok(us->peer);
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
    fd_api_timer_set(us->timer, sc->proxy_timeout);
}

/* A new client address: a server of the group, a socket connected to it */
static udp_sess_t *udp_session(udp_listener_t *ul,
                               const struct sockaddr_storage *sa,
                               socklen_t len)
{
    stream_conf_t *sc = ul->sc;
    udp_sess_t *us = calloc(1, sizeof(*us));
    const void *key = sa->ss_family == AF_INET6
                          ? (const void *)&((struct sockaddr_in6 *)sa)->sin6_addr
                          : (const void *)&((struct sockaddr_in *)sa)->sin_addr;

    if (us == NULL)
        return NULL;
    us->io = fd_api_io_new(udp_upstream_event, us);
    us->timer = fd_api_timer_new(udp_timeout, us);
    us->free = fd_api_posted_new(udp_free, us);
    if (us->io == NULL || us->timer == NULL || us->free == NULL) {
        us->fd = -1;
        if (us->free)
            udp_free(us); /* never posted */
        else {
            fd_api_io_free(us->io);
            fd_api_timer_cancel(us->timer);
            free(us);
        }
        return NULL;
    }
    us->ul = ul;
    us->client = *sa;
    us->clen = len;
    us->start = fd_api_now_msec();
    us->status = 502;
    if (sc->stats) {
        sc->stats->connections++;
        sc->stats->active++;
    }
    us->fd = fd_api_stream_dgram(sc->up, key,
                                 sa->ss_family == AF_INET6 ? 16 : 4,
                                 sc->what, &us->peer);
    if (us->fd < 0) {
        udp_end(us); /* logged, counted */
        return NULL;
    }
    if (fd_api_io_watch(us->io, us->fd, FD_API_IO_IN) != FD_OK) {
        fd_api_log(FD_API_LOG_ERR, errno, "epoll_ctl() failed");
        udp_end(us);
        return NULL;
    }
    us->next = ul->table[udp_hash(sa, len)];
    ul->table[udp_hash(sa, len)] = us;
    return us;
}

/* The listener: each datagram to its client's session. */
static void udp_listen_event(void *data, unsigned events)
{
    udp_listener_t *ul = data;
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
        ssize_t n = recvmsg(ul->fd, &mh, MSG_DONTWAIT);

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
        if (send(us->fd, udp_buf, (size_t)n, MSG_DONTWAIT) < 0 &&
            errno != EAGAIN) {
            /* ECONNREFUSED: the server's port said no to an earlier one */
            fd_api_log(FD_API_LOG_ERR, errno, "stream %s: send() to %s "
                       "failed", sc->name, fd_api_peer_name(us->peer));
            if (us->responses == 0) {
                fd_api_peer_failed(us->peer);
                us->status = 502;
            }
            udp_end(us);
            continue;
        }
        fd_api_timer_set(us->timer, sc->proxy_timeout);
    }
}

static int udp_init_worker(stream_conf_t *sc)
{
    udp_listener_t *ul = calloc(1, sizeof(*ul));

    if (ul == NULL)
        return FD_ERROR;
    ul->fd = fd_api_stream_socket(sc->l);
    ul->sc = sc;
    ul->io = fd_api_io_new(udp_listen_event, ul);
    if (ul->io == NULL || fd_api_io_watch(ul->io, ul->fd, FD_API_IO_IN) !=
                              FD_OK) {
        fd_api_log(FD_API_LOG_ERR, errno, "stream %s: watching its UDP "
                   "socket failed", sc->name);
        fd_api_io_free(ul->io);
        free(ul);
        return FD_ERROR;
    }
    sc->udp = ul;
    return FD_OK;
}

/* The worker's end: its sessions logged, its socket let go. */
static void udp_exit_worker(stream_conf_t *sc)
{
    udp_listener_t *ul = sc->udp;
    unsigned i;

    if (ul == NULL)
        return;
    for (i = 0; i < UDP_BUCKETS; i++)
        while (ul->table[i])
            udp_end(ul->table[i]);
    fd_api_io_free(ul->io);
    sc->udp = NULL;
    free(ul); /* the sessions' frees are posted: none names it */
}

/* --- the worker ------------------------------------------------------------ */

static void worker_section(const char *name, void *conf, void *data)
{
    stream_conf_t *sc = conf;
    int *rc = data;

    (void)name;
    sc->stats = stats_area ? fd_api_status_named_entry(
                                 stats_area, sizeof(stream_stats_t),
                                 STREAM_STATS, sc->name,
                                 sizeof(stats_area->name))
                           : NULL;
    if (fd_api_stream_is_udp(sc->l) && sc->udp == NULL &&
        udp_init_worker(sc) != FD_OK)
        *rc = FD_ERROR;
    if (sc->access_log == NULL || sc->log_fd >= 0)
        return;
    sc->log_fd = open(sc->access_log, O_WRONLY | O_APPEND | O_CREAT |
                      O_CLOEXEC | O_NOFOLLOW, 0644);
    if (sc->log_fd < 0)
        fd_api_log(FD_API_LOG_ERR, errno, "open(\"%s\") failed",
                   sc->access_log);
}

static int stream_init_worker(void)
{
    int rc = FD_OK;

    stats_area = fd_api_status_area(FD_API_SELF);
    fd_api_section_each("stream", worker_section, &rc);
    return rc;
}

/* The access logs (and, at exit, the UDP sessions: logged first) */
static void close_section(const char *name, void *conf, void *data)
{
    stream_conf_t *sc = conf;

    (void)name;
    if (data)
        udp_exit_worker(sc);
    if (sc->log_fd >= 0) {
        close(sc->log_fd);
        sc->log_fd = -1;
    }
}

static void stream_exit_worker(void)
{
    fd_api_section_each("stream", close_section, (void *)1);
}

static void stream_reopen(void)
{
    fd_api_section_each("stream", close_section, NULL);
    stream_init_worker(); /* a UDP listener already set up stays */
}

/* --- status -------------------------------------------------------------- */

static void stream_status(fd_api_status_t *st, const void *a, unsigned worker)
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
        fd_api_status_counter(st, "stream_connections", "Connections accepted "
                          "on the [stream] listener.", labels,
                          e->connections);
        if (worker != FD_API_STATUS_RETIRED)
            fd_api_status_gauge(st, "stream_active", "Connections open now.",
                            labels, e->active);
        fd_api_status_counter(st, "stream_failed", "Connections no server "
                          "took (502) or that failed before one did.",
                          labels, e->failed);
        fd_api_status_counter(st, "stream_bytes_received", "Bytes read from "
                          "clients (and passed to the servers).", labels,
                          e->received);
        fd_api_status_counter(st, "stream_bytes_sent", "Bytes sent to clients "
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
            (into = fd_api_status_named_entry(retired, sizeof(*s), STREAM_STATS,
                                          s->name, sizeof(s->name))) ==
                NULL)
            continue;
        into->connections += s->connections;
        into->failed += s->failed;
        into->received += s->received;
        into->sent += s->sent;
    }
}

static const fd_api_key_t stream_keys[] = {
    {.name = "listen", .type = FD_API_STRING, .offset = SC(listen),
     .doc = "ADDR:PORT ([::]:PORT for IPv6) of this TCP listener: its "
            "connections are proxied to pass, byte for byte. ADDR:PORT "
            "ssl: TLS ends here (ssl_certificate...), the server gets the "
            "plaintext. ADDR:PORT udp: a UDP listener; each client "
            "address's datagrams are a session with one server "
            "(proxy_responses, proxy_timeout)"},
    {.name = "pass", .type = FD_API_STRING, .offset = SC(pass),
     .doc = "HOST:PORT, or the NAME of an [upstream NAME] group (its "
            "balance, max_fails, fail_timeout and health checks choose the "
            "server; a failed connect goes on to the next one). With "
            "ssl_preread, the route of a name no sni line names (optional: "
            "without it such a client is closed)"},
    {.name = "ssl_preread", .type = FD_API_FLAG, .offset = SC(preread),
     .def = "off",
     .doc = "on: read the client's TLS ClientHello first (nothing is "
            "decrypted; the bytes go on to the server unchanged) and choose "
            "the server by its server_name: the sni routes, else pass. For "
            "TLS passthrough to servers that terminate TLS themselves"},
    {.name = "preread_timeout", .type = FD_API_MSEC,
     .offset = SC(preread_timeout), .def = "30s",
     .doc = "ssl_preread: time for the whole ClientHello; past it the "
            "client is closed (400 in the access log)"},
    {.name = "sni", .type = FD_API_LIST, 
     .doc = "NAME TARGET, repeatable (ssl_preread = on): a ClientHello "
            "whose server_name is NAME goes to TARGET (HOST:PORT or an "
            "[upstream] name). NAME is a host name, or *.DOMAIN for any name "
            "under DOMAIN (an exact NAME wins, then the longest DOMAIN); "
            "no match, no server_name or not TLS: pass"},
    {.name = "ssl_certificate", .type = FD_API_STRING,
     .offset = SC(ssl_certificate),
     .doc = "listen = ADDR ssl: the certificate chain (PEM) TLS ends "
            "with; the server gets the plaintext"},
    {.name = "ssl_certificate_key", .type = FD_API_STRING,
     .offset = SC(ssl_certificate_key),
     .doc = "listen = ADDR ssl: its key (PEM)"},
    {.name = "ssl_protocols", .type = FD_API_STRING,
     .offset = SC(ssl_protocols),
     .def = "TLSv1.2 TLSv1.3",
     .doc = "listen = ADDR ssl: the TLS versions taken"},
    {.name = "ssl_ciphers", .type = FD_API_STRING, .offset = SC(ssl_ciphers), .def = "ECDHE+AESGCM:ECDHE+CHACHA20",
     .doc = "listen = ADDR ssl: the TLS 1.2 cipher list (OpenSSL's syntax)"},
    {.name = "ssl_handshake_timeout", .type = FD_API_MSEC,
     .offset = SC(ssl_handshake_timeout), .def = "60s",
     .doc = "listen = ADDR ssl: time for the client's TLS handshake "
            "(nginx's default); past it the client is closed (400 in the "
            "access log)"},
    {.name = "alpn", .type = FD_API_LIST, 
     .doc = "PROTOCOL TARGET, repeatable (ssl_preread = on): a ClientHello "
            "that offers PROTOCOL (among its ALPN list: h2, http/1.1, "
            "acme-tls/1...) goes to TARGET, before the sni routes; the "
            "first such line wins"},
    {.name = "proxy_timeout", .type = FD_API_MSEC,
     .offset = SC(proxy_timeout), .def = "10m",
     .doc = "a connection with no byte moved either way for this long is "
            "closed (nginx's proxy_timeout)"},
    {.name = "proxy_connect_timeout", .type = FD_API_MSEC,
     .offset = SC(connect_timeout), .def = "60s",
     .doc = "time to connect to a server before trying the next one"},
    {.name = "proxy_buffer_size", .type = FD_API_SIZE,
     .offset = SC(buffer_size), .def = "16k",
     .doc = "the buffer each way of a TCP connection (two per "
            "connection): larger moves bulk transfers in fewer system "
            "calls, at that much memory per connection. ssl_preread's "
            "ClientHello must fit in it (nginx's proxy_buffer_size)"},
    {.name = "proxy_responses", .type = FD_API_INT,
     .offset = SC(proxy_responses), .def = "0",
     .doc = "listen ... udp: the datagrams a server answers each client "
            "datagram with; once they all came, the session ends (1 for "
            "DNS). 0: no number, the session ends after proxy_timeout of "
            "silence"},
    {.name = "proxy_protocol", .type = FD_API_FLAG,
     .offset = SC(proxy_protocol), .def = "off",
     .doc = "on: a PROXY protocol v1 header (the client's address and the "
            "one it reached) first on each connection to the server"},
    {.name = "max_conns_per_ip", .type = FD_API_INT,
     .offset = SC(max_conns_per_ip), .def = "0",
     .doc = "connections one client address may hold open, per worker; "
            "more are closed at once. 0: no limit"},
    {.name = "access_log", .type = FD_API_STRING, .offset = SC(access_log),
     .doc = "a file that gets one line per connection, or off (the "
            "default): client, time, TCP, status (200; 502: no server "
            "answered), bytes sent to the client, bytes received from it, "
            "duration, the server's address and the [stream] name (with "
            "ssl_preread, then the ClientHello's server_name in quotes)"},
    {.name = NULL},
};

static const fd_api_section_t stream_section = {
    .type = "stream",
    .keys = stream_keys,
    .conf_size = sizeof(stream_conf_t),
    .name_max = NAME_MAX_,
    .init = stream_init_section,
    .set = stream_set,
};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "stream",
    .init_worker = stream_init_worker,
    .exit_worker = stream_exit_worker,
    .reopen = stream_reopen,
    .section = &stream_section,
    .configured = stream_configured,
    .shm_size = STREAM_STATS * sizeof(stream_stats_t),
    .status = stream_status,
    .retire = stream_retire,
};
