/*
 * handler = proxy: a reverse proxy to [upstream NAME] groups of servers.
 *
 * The file reads in the order a request goes through it:
 *   1. configuration: the location keys, [upstream NAME] sections (servers
 *      resolved at load time, the hash ring built once), worker setup;
 *   2. balancing: smooth weighted round robin, least connections,
 *      consistent hashing; passive health (max_fails in fail_timeout);
 *   3. upstream connections: non-blocking sockets on the worker's epoll
 *      (edge-triggered, registered once), one timer each, and the
 *      keep-alive pool (per server, bounded per upstream, least recently
 *      used first out; an idle connection that turns readable is closed,
 *      and one is peeked at before it is reused);
 *   4. the request: its header is built once in the handler; the body is
 *      pulled from the client only while the upstream takes it
 *      (back-pressure), Content-Length passed on, chunked re-chunked;
 *   5. the response: a strict parser (status line, header fields, framing),
 *      then the body streamed through fd_http_output(), which stops us at
 *      its high-water mark until r->on_drain (back-pressure); chunked is
 *      decoded here and framed again by the engine;
 *   6. errors, retries (next_upstream), timeouts and client aborts;
 *   7. the tunnel after a 101 (WebSocket), with its own idle timeout;
 *   8. status counters in the worker's shared-memory slot, and the
 *      access-log getters.
 *
 * Everything runs on the worker's loop thread; state is per worker (each
 * worker has its own copy of the configuration, whose runtime fields it
 * alone writes). Memory per request: the request header in r->pool and at
 * most two 16k blocks (response and request body), whatever the size of
 * the bodies.
 *
 * Access-log variables, for the access-log module (NULL when the request
 * was not proxied; one entry per server tried, ", "-separated as nginx):
 *   const char *fd_proxy_upstream_addr(fd_request_t *r);
 *       "127.0.0.1:3000, 127.0.0.1:3001"
 *   const char *fd_proxy_upstream_status(fd_request_t *r);       "502, 200"
 *   const char *fd_proxy_upstream_response_time(fd_request_t *r);
 *       seconds with milliseconds: "0.002, 0.013"
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_sendq.h"
#include "fd_status.h"

const char *fd_proxy_upstream_addr(fd_request_t *r);
const char *fd_proxy_upstream_status(fd_request_t *r);
const char *fd_proxy_upstream_response_time(fd_request_t *r);

extern fd_module_t fd_proxy_module;

#define BUF_SIZE 16384        /* response header limit, streaming piece */
#define RING_POINTS 160       /* hash ring points per unit of weight */
#define SHM_PEERS 64          /* servers with status counters, all groups */
#define LOG_TRIES 8           /* servers remembered for the access log */
#define MAX_RESP_HEADERS 128
#define MAX_INTERIM 8         /* 1xx responses before a final one */

enum { BALANCE_RR, BALANCE_LEAST_CONN, BALANCE_HASH };
enum { KEY_REMOTE_ADDR, KEY_URI, KEY_REQUEST_URI, KEY_HOST, KEY_HEADER };
enum { HOST_PASS, HOST_UPSTREAM };

/* next_upstream */
#define NEXT_ERROR 0x01
#define NEXT_TIMEOUT 0x02
#define NEXT_502 0x04
#define NEXT_503 0x08
#define NEXT_504 0x10
#define NEXT_NON_IDEMPOTENT 0x20

/* request headers the proxy generates, which a set_header replaces */
#define GEN_HOST 0x01
#define GEN_XFF 0x02
#define GEN_XRIP 0x04
#define GEN_XFP 0x08
#define GEN_XFH 0x10

/*
 * Results of the steps of a request. PX_DONE: it is over (r may be gone),
 * touch nothing. PX_WAIT: stop here, an event resumes it (a new attempt
 * began, or the client's output is full). The response header parser
 * also says PX_MORE (incomplete) and PX_INTERIM (a 1xx was skipped).
 */
enum { PX_OK = 0, PX_WAIT, PX_DONE, PX_MORE, PX_INTERIM };

enum { RS_HEADER, RS_BODY };
enum { FR_NONE, FR_LENGTH, FR_CHUNKED, FR_CLOSE };

typedef struct upstream_s upstream_t;
typedef struct peer_s peer_t;
typedef struct uconn_s uconn_t;
typedef struct proxy_req_s proxy_req_t;
typedef struct tunnel_s tunnel_t;

/* --- 1. configuration ---------------------------------------------------- */

struct peer_s {
    char *name;                /* "127.0.0.1:3000", "[::1]:80", "unix:/x" */
    struct sockaddr_storage sa;
    socklen_t salen;
    fd_int_t weight;
    fd_int_t max_fails;
    fd_msec_t fail_timeout;
    unsigned backup:1;
    unsigned down:1;
    unsigned index;            /* in up->peers */
    int shm;                   /* status entry, -1: none */
    upstream_t *up;
    /* per worker */
    int64_t current;           /* smooth weighted round robin */
    unsigned fails;            /* in the current fail_timeout window */
    fd_msec_t checked;         /* time of the last failure */
    unsigned active;           /* requests (and tunnels) using it */
    uconn_t *idle;             /* keep-alive connections, newest first */
};

typedef struct {
    uint32_t point;
    peer_t *peer;
} ring_point_t;

struct upstream_s {
    /* keys of [upstream NAME] */
    fd_conf_list_t server;
    int balance;
    char *hash_key;
    fd_int_t keepalive;
    fd_msec_t keepalive_timeout;
    fd_int_t keepalive_requests;

    char *name;
    const char *file;
    int line;
    peer_t *peers;
    unsigned npeers;
    ring_point_t *ring;
    unsigned nring;
    int key;
    fd_str_t key_header;       /* $http_x_y: "x-y" */
    upstream_t *next_implicit; /* pass = http://host:port/ groups */
    char *implicit_opts;       /* ... and the options pass gave them */

    /* per worker: every idle connection, newest first (eviction order) */
    uconn_t *lru_head, *lru_tail;
    unsigned nidle;
};

typedef struct {
    fd_str_t name;
    fd_str_t value;            /* empty: the header is not sent */
} set_header_t;

typedef struct {
    char *upstream_name;       /* upstream = NAME */
    char *pass;                /* pass = http://NAME/uri */
    int proxy_host;
    fd_conf_list_t set_header;
    int buffering;
    fd_msec_t connect_timeout;
    fd_msec_t send_timeout;
    fd_msec_t read_timeout;
    unsigned next_upstream;
    fd_int_t next_upstream_tries;
    fd_msec_t websocket_idle_timeout;
    int websocket;

    /* built */
    upstream_t *up;
    fd_str_t uri;              /* the URI part of pass, if any */
    unsigned has_uri:1;
    set_header_t *hdrs;
    unsigned nhdrs;
    unsigned gen_replaced;     /* GEN_* a set_header replaces */
} proxy_loc_conf_t;

static int set_upstream(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *value);
static int set_pass(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *value);
static int set_next_upstream(fd_conf_t *cf, const fd_directive_t *d,
                             void *conf, const char *value);
static int set_hash_key(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *value);

static const fd_conf_enum_t host_enums[] = {
    {"pass", HOST_PASS}, {"upstream", HOST_UPSTREAM}, {NULL, 0}};

static const fd_conf_enum_t balance_enums[] = {
    {"round_robin", BALANCE_RR},
    {"least_conn", BALANCE_LEAST_CONN},
    {"hash", BALANCE_HASH},
    {NULL, 0}};

#define LOC(f) offsetof(proxy_loc_conf_t, f)

static const fd_directive_t proxy_directives[] = {
    {.name = "upstream", .type = FD_CONF_CUSTOM, .set = set_upstream,
     .doc = "handler = proxy: the [upstream NAME] group requests go to; the "
            "request URI is passed as the client sent it (after a rewrite: "
            "the new URI, normalised and encoded)"},
    {.name = "pass", .type = FD_CONF_CUSTOM, .set = set_pass,
     .doc = "handler = proxy, as nginx's proxy_pass: http://NAME[/uri] where "
            "NAME is an [upstream NAME] or HOST[:PORT] (resolved at load). "
            "With a /uri, the part of the normalised path the location "
            "matched is replaced by it and the rest sent encoded, so \"..\", "
            "\"%2e%2e\" or \"//\" cannot leave the prefix (prefix and exact "
            "locations); a regex location passes the request URI unchanged. "
            "HOST:PORT may be followed by max_fails=N and fail_timeout=T, as "
            "on an [upstream] server line"},
    {.name = "proxy_host", .type = FD_CONF_ENUM, .offset = LOC(proxy_host),
     .def = "pass", .enums = host_enums,
     .doc = "Host header sent upstream: pass (the client's) or upstream "
            "(the upstream's name, or HOST:PORT of pass)"},
    {.name = "set_header", .type = FD_CONF_LIST, .offset = LOC(set_header),
     .doc = "\"Name: value\", repeatable: sent upstream instead of the "
            "client's header of that name (also replaces Host, "
            "X-Forwarded-*, X-Real-IP); an empty value removes it"},
    {.name = "buffering", .type = FD_CONF_FLAG, .offset = LOC(buffering),
     .def = "on",
     .doc = "on: the response body is read in pieces of up to 16k as fast "
            "as the client takes it (memory stays bounded; no temp files); "
            "off: each piece leaves as soon as it arrives (server-sent "
            "events, long polling)"},
    {.name = "connect_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(connect_timeout), .def = "60s",
     .doc = "connecting to an upstream server; 504 on expiry"},
    {.name = "proxy_send_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(send_timeout), .def = "60s",
     .doc = "between two writes of the request to the upstream; 504 on "
            "expiry"},
    /* its old name, which [http] send_timeout (the client's) shares */
    {.name = "send_timeout", .renamed = "proxy_send_timeout",
     .doc = "the upstream's is proxy_send_timeout; the client's is [http] "
            "send_timeout"},
    {.name = "read_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(read_timeout), .def = "60s",
     .doc = "between two reads of the response from the upstream; 504 on "
            "expiry before the response header"},
    {.name = "next_upstream", .type = FD_CONF_CUSTOM,
     .offset = LOC(next_upstream), .def = "error timeout",
     .set = set_next_upstream,
     .doc = "when to try the next server: any of error timeout http_502 "
            "http_503 http_504 non_idempotent, or off. A request whose "
            "method is not idempotent is retried only if no byte of it was "
            "sent (or with non_idempotent), and never once its body was "
            "read from the client"},
    {.name = "next_upstream_tries", .type = FD_CONF_INT,
     .offset = LOC(next_upstream_tries), .def = "0",
     .doc = "at most this many servers per request; 0: no limit"},
    {.name = "websocket", .type = FD_CONF_FLAG, .offset = LOC(websocket),
     .def = "off",
     .doc = "on: a GET with \"Upgrade: websocket\" is passed with its "
            "Upgrade, and the upstream's 101 opens a tunnel. Off (as "
            "nginx, where the Upgrade headers must be set by hand): the "
            "tunnel's bytes escape every location rule, so a location "
            "opts in. No other upgrade token (h2c, TLS/1.0) is ever passed"},
    {.name = "websocket_idle_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(websocket_idle_timeout), .def = "1h",
     .doc = "a WebSocket tunnel with no byte either way for this long is "
            "closed"},
    FD_CONF_END};

#define UP(f) offsetof(upstream_t, f)

static const fd_directive_t upstream_directives[] = {
    {.name = "server", .type = FD_CONF_LIST, .offset = UP(server),
     .doc = "HOST:PORT or unix:/path [weight=N] [max_fails=N] "
            "[fail_timeout=T] [backup] [down], repeatable. A host name is "
            "resolved at load time (every address becomes a server). "
            "max_fails (1) failures within fail_timeout (10s) take the "
            "server out for fail_timeout; max_fails=0 never does, nor does "
            "anything take out a group's only server (as nginx). backup "
            "servers are used only when no other is available"},
    {.name = "balance", .type = FD_CONF_ENUM, .offset = UP(balance),
     .def = "round_robin", .enums = balance_enums,
     .doc = "round_robin (smooth, weighted), least_conn (fewest requests "
            "in progress per weight, per worker) or hash (consistent, on "
            "hash_key: losing a server moves only its share of keys)"},
    {.name = "hash_key", .type = FD_CONF_CUSTOM, .offset = UP(hash_key),
     .set = set_hash_key,
     .doc = "balance = hash: $remote_addr (the default), $uri, "
            "$request_uri, $host or $http_NAME (a request header)"},
    {.name = "keepalive", .type = FD_CONF_INT, .offset = UP(keepalive),
     .def = "0",
     .doc = "idle connections to this group kept per worker for reuse; 0: "
            "a connection per request (Connection: close)"},
    {.name = "keepalive_timeout", .type = FD_CONF_MSEC,
     .offset = UP(keepalive_timeout), .def = "60s",
     .doc = "an idle upstream connection is closed after this long"},
    {.name = "keepalive_requests", .type = FD_CONF_INT,
     .offset = UP(keepalive_requests), .def = "1000",
     .doc = "requests per upstream connection before it is closed"},
    FD_CONF_END};

/* --- runtime state --- */

struct uconn_s {
    fd_event_t ev;             /* first: epoll's data.ptr */
    fd_timer_t timer;
    fd_msec_t deadline;        /* 0: none; the timer may fire early */
    fd_msec_t idle_since;
    peer_t *peer;
    proxy_req_t *px;           /* NULL while idle */
    uconn_t *pnext, *pprev;    /* the server's idle list */
    uconn_t *lnext, *lprev;    /* the group's idle LRU; free lists */
    unsigned requests;
    unsigned idle:1;
    unsigned connecting:1;
    unsigned readable:1;       /* edge-triggered: data may be waiting */
    unsigned writable:1;
    unsigned eof:1;            /* the upstream closed (or failed) */
    unsigned reused:1;         /* came from the keep-alive pool */
};

typedef struct {
    peer_t *peer;
    int status;                /* 0: no response header */
    fd_msec_t msec;
} try_log_t;

struct proxy_req_s {
    fd_request_t *r;
    proxy_loc_conf_t *lc;
    upstream_t *up;
    uconn_t *uc;
    peer_t *peer;              /* of uc, counted active */
    uint64_t *tried;           /* bitmap over up->peers */
    uint32_t hash;
    unsigned tries;

    /* to the upstream */
    char *hdr;
    size_t hdr_len, hdr_sent;
    char *obuf;                /* framed body bytes */
    size_t opos, olen;
    int64_t body_bytes;
    fd_sendop_t sop;           /* the first write, batched (fd_sendq.h) */

    /* from the upstream */
    char *ibuf;
    size_t ipos, ilast, hscan;
    int rstate, framing;
    int64_t rest;
    fd_http_chunked_t ck;
    fd_msec_t start;

    unsigned sync:1;           /* inside the handler */
    unsigned done:1;
    unsigned paused:1;         /* the client's output is above high water */
    unsigned wait_body:1;      /* the client's body is late */
    unsigned has_body:1;
    unsigned chunked_body:1;
    unsigned body_done:1;      /* all of the body is framed in obuf */
    unsigned body_kept:1;      /* obuf holds all the body pulled so far */
    unsigned req_sent:1;       /* this attempt wrote all of the request */
    unsigned written:1;        /* some attempt wrote some of it */
    unsigned pulled:1;         /* body bytes were taken from the client */
    unsigned idempotent:1;
    unsigned upgrade:1;        /* a tunnel was asked for */
    unsigned keepalive:1;      /* the response lets us reuse uc */
    unsigned timed_out:1;      /* the last failed try timed out */
    int rc;                    /* the handler's result when sync */
    unsigned ninterim;         /* 1xx responses skipped */
    tunnel_t *tunnel;          /* 101 waiting for its header to drain */

    try_log_t log[LOG_TRIES];
    unsigned nlog;
};

/* --- status area (one per worker slot) --- */

typedef struct {
    char upstream[32];
    char server[48];
    uint64_t healthy;          /* gauge */
    uint64_t active;           /* gauge */
    uint64_t requests;
    uint64_t fails;
    uint64_t responses;        /* response headers received */
    uint64_t response_msec;    /* sum of their times */
} shm_peer_t;

typedef struct {
    shm_peer_t peer[SHM_PEERS];
} shm_area_t;

static shm_area_t *shm;        /* this worker's */

static shm_peer_t *peer_shm(peer_t *p)
{
    return shm && p->shm >= 0 ? &shm->peer[p->shm] : NULL;
}

/* --- small helpers --- */

static uint32_t hash_bytes(const void *data, size_t n)
{
    uint32_t h = fd_hash(data, n);

    /* murmur3's finaliser: FNV alone clusters short similar keys */
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static int parse_int(const char *s, fd_int_t *v)
{
    char *end;
    long n;

    if (*s < '0' || *s > '9')
        return FD_ERROR;
    errno = 0;
    n = strtol(s, &end, 10);
    if (errno || *end != '\0' || n > 1000000)
        return FD_ERROR;
    *v = n;
    return FD_OK;
}

/*
 * The line of the nth (from 0) "key =" of the section that starts at
 * cf->line in cf->file: the values of a repeatable key do not carry their
 * own line, and an error should name the exact one.
 */
static int key_line(fd_conf_t *cf, const char *key, unsigned nth)
{
    char buf[4096];
    size_t klen = strlen(key);
    int ln = 0, found = cf->line;
    FILE *fp;

    if (cf->file == NULL || (fp = fopen(cf->file, "r")) == NULL)
        return cf->line;
    while (fgets(buf, sizeof(buf), fp)) {
        char *p = buf;

        ln++;
        if (ln < cf->line)
            continue;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '[') {
            if (ln > cf->line)
                break;
            continue;
        }
        if (strncmp(p, key, klen) == 0) {
            p += klen;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == '=' && nth-- == 0) {
                found = ln;
                break;
            }
        }
    }
    fclose(fp);
    return found;
}

static char *peer_name(fd_pool_t *pool, const struct sockaddr *sa)
{
    char host[INET6_ADDRSTRLEN], buf[INET6_ADDRSTRLEN + 16];

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        snprintf(buf, sizeof(buf), "%s:%u", host, ntohs(sin->sin_port));
    } else {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
        snprintf(buf, sizeof(buf), "[%s]:%u", host, ntohs(sin6->sin6_port));
    }
    return fd_pstrdup(pool, buf, strlen(buf));
}

static peer_t *peer_add(fd_conf_t *cf, upstream_t *up)
{
    peer_t *np = fd_pcalloc(cf->pool, (up->npeers + 1) * sizeof(peer_t));

    if (np == NULL)
        return NULL;
    if (up->npeers)
        memcpy(np, up->peers, up->npeers * sizeof(peer_t));
    up->peers = np;
    np[up->npeers].index = up->npeers;
    np[up->npeers].up = up;
    np[up->npeers].shm = -1;
    return &np[up->npeers++];
}

/*
 * Resolve "HOST[:PORT]" or "unix:/path" into servers of up with the given
 * options; HOST may be a name (every address it has is a server).
 */
static int resolve_servers(fd_conf_t *cf, upstream_t *up, const char *addr,
                           const peer_t *opt)
{
    char host[256];
    const char *port = "80", *colon;
    struct addrinfo hints, *res, *ai;
    unsigned first = up->npeers;
    int rc;

    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un *sun;
        peer_t *p;
        if (strlen(addr + 5) == 0 ||
            strlen(addr + 5) >= sizeof(sun->sun_path))
            return fd_conf_error(cf, "bad unix socket path in \"%s\"", addr);
        if ((p = peer_add(cf, up)) == NULL)
            return fd_conf_error(cf, "out of memory");
        sun = (struct sockaddr_un *)&p->sa;
        sun->sun_family = AF_UNIX;
        strcpy(sun->sun_path, addr + 5);
        p->salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                               strlen(addr + 5) + 1);
        p->name = fd_pstrdup(cf->pool, addr, strlen(addr));
        goto options;
    }
    if (addr[0] == '[') {
        const char *end = strchr(addr, ']');
        if (end == NULL || (size_t)(end - addr - 1) >= sizeof(host))
            return fd_conf_error(cf, "bad address \"%s\"", addr);
        memcpy(host, addr + 1, (size_t)(end - addr - 1));
        host[end - addr - 1] = '\0';
        if (end[1] == ':')
            port = end + 2;
        else if (end[1] != '\0')
            return fd_conf_error(cf, "bad address \"%s\"", addr);
    } else {
        colon = strrchr(addr, ':');
        size_t hl = colon ? (size_t)(colon - addr) : strlen(addr);
        if (hl == 0 || hl >= sizeof(host))
            return fd_conf_error(cf, "bad address \"%s\"", addr);
        memcpy(host, addr, hl);
        host[hl] = '\0';
        if (colon)
            port = colon + 1;
    }
    if (*port == '\0' || strspn(port, "0123456789") != strlen(port) ||
        atoi(port) < 1 || atoi(port) > 65535)
        return fd_conf_error(cf, "bad port in \"%s\"", addr);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return fd_conf_error(cf, "host not found in \"%s\": %s", addr,
                             gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
        peer_t *p;
        unsigned i;
        int dup = 0;
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
            continue;
        for (i = first; i < up->npeers; i++)
            if (up->peers[i].salen == ai->ai_addrlen &&
                memcmp(&up->peers[i].sa, ai->ai_addr, ai->ai_addrlen) == 0)
                dup = 1;
        if (dup)
            continue;
        if ((p = peer_add(cf, up)) == NULL) {
            freeaddrinfo(res);
            return fd_conf_error(cf, "out of memory");
        }
        memcpy(&p->sa, ai->ai_addr, ai->ai_addrlen);
        p->salen = (socklen_t)ai->ai_addrlen;
        p->name = peer_name(cf->pool, ai->ai_addr);
    }
    freeaddrinfo(res);
    if (up->npeers == first)
        return fd_conf_error(cf, "no address for \"%s\"", addr);
options:
    for (unsigned i = first; i < up->npeers; i++) {
        peer_t *p = &up->peers[i];
        p->weight = opt->weight;
        p->max_fails = opt->max_fails;
        p->fail_timeout = opt->fail_timeout;
        p->backup = opt->backup;
        p->down = opt->down;
    }
    return FD_OK;
}

/* "HOST:PORT [weight=N] [max_fails=N] [fail_timeout=T] [backup] [down]" */
/* One server option (weight=, max_fails=, fail_timeout=, backup, down);
 * the pass shorthand takes only the failure ones. */
static int server_option(fd_conf_t *cf, const char *tok, peer_t *opt,
                         int shorthand)
{
    if (strncmp(tok, "max_fails=", 10) == 0) {
        if (parse_int(tok + 10, &opt->max_fails) != FD_OK ||
            opt->max_fails < 0)
            return fd_conf_error(cf, "bad \"%s\"", tok);
    } else if (strncmp(tok, "fail_timeout=", 13) == 0) {
        int64_t ms = fd_conf_parse_msec(tok + 13);
        if (ms < 0)
            return fd_conf_error(cf, "bad \"%s\" (a duration like 10s)", tok);
        opt->fail_timeout = (fd_msec_t)ms;
    } else if (shorthand) {
        return fd_conf_error(cf, "\"pass\": unknown option \"%s\" "
                             "(max_fails=, fail_timeout=; the others need an "
                             "[upstream])", tok);
    } else if (strncmp(tok, "weight=", 7) == 0) {
        if (parse_int(tok + 7, &opt->weight) != FD_OK || opt->weight < 1 ||
            opt->weight > 1000)
            return fd_conf_error(cf, "bad \"%s\" (1..1000)", tok);
    } else if (strcmp(tok, "backup") == 0) {
        opt->backup = 1;
    } else if (strcmp(tok, "down") == 0) {
        opt->down = 1;
    } else {
        return fd_conf_error(cf, "unknown server option \"%s\" (weight=, "
                             "max_fails=, fail_timeout=, backup, down)", tok);
    }
    return FD_OK;
}

static int parse_server(fd_conf_t *cf, upstream_t *up, const char *text)
{
    char *s = fd_pstrdup(cf->pool, text, strlen(text)), *save, *tok, *addr;
    peer_t opt = {.weight = 1, .max_fails = 1, .fail_timeout = 10000};

    addr = strtok_r(s, " \t", &save);
    if (addr == NULL)
        return fd_conf_error(cf, "\"server\" needs an address");
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL)
        if (server_option(cf, tok, &opt, 0) != FD_OK)
            return FD_ERROR;
    return resolve_servers(cf, up, addr, &opt);
}

/* A group whose only server failed has nowhere else to send a request:
 * as nginx, such a server is never taken out (its failures still count
 * in the status figures). */
static void upstream_finish(upstream_t *up)
{
    if (up->npeers == 1)
        up->peers[0].max_fails = 0;
}

static int ring_cmp(const void *a, const void *b)
{
    uint32_t x = ((const ring_point_t *)a)->point;
    uint32_t y = ((const ring_point_t *)b)->point;

    return x < y ? -1 : x > y;
}

/*
 * Consistent hashing: every primary server owns RING_POINTS points per
 * unit of weight, placed by hashing its name; a key goes to the owner of
 * the first point at or after the key's hash. The points of the other
 * servers do not depend on a server being there, so removing one moves
 * only the keys it owned.
 */
static int ring_build(fd_conf_t *cf, upstream_t *up)
{
    unsigned i, n = 0, k;
    char buf[128];

    for (i = 0; i < up->npeers; i++)
        if (!up->peers[i].backup)
            n += RING_POINTS * (unsigned)fd_min(up->peers[i].weight, 100);
    up->ring = fd_palloc(cf->pool, (n ? n : 1) * sizeof(ring_point_t));
    if (up->ring == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < up->npeers; i++) {
        peer_t *p = &up->peers[i];
        unsigned pts = RING_POINTS * (unsigned)fd_min(p->weight, 100);
        if (p->backup)
            continue;
        for (k = 0; k < pts; k++) {
            int len = snprintf(buf, sizeof(buf), "%s-%u", p->name, k);
            up->ring[up->nring].point = hash_bytes(buf, (size_t)len);
            up->ring[up->nring].peer = p;
            up->nring++;
        }
    }
    qsort(up->ring, up->nring, sizeof(ring_point_t), ring_cmp);
    return FD_OK;
}

static int upstream_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    upstream_t *up = conf;
    int line = cf->line;
    unsigned i;

    up->name = (char *)name;
    up->file = cf->file;
    up->line = cf->line;
    if (up->server.n == 0)
        return fd_conf_error(cf, "[upstream %s] has no \"server\"", name);
    for (i = 0; i < up->server.n; i++) {
        cf->line = key_line(cf, "server", i);
        if (parse_server(cf, up, up->server.items[i]) != FD_OK)
            return FD_ERROR;
    }
    cf->line = line;
    if (up->hash_key && up->balance != BALANCE_HASH)
        return fd_conf_error(cf, "[upstream %s]: hash_key needs balance = "
                             "hash", name);
    for (i = 0; i < up->npeers && up->peers[i].backup; i++)
        ;
    if (i == up->npeers)
        return fd_conf_error(cf, "[upstream %s]: every server is a backup",
                             name);
    if (up->balance == BALANCE_HASH && ring_build(cf, up) != FD_OK)
        return FD_ERROR;
    upstream_finish(up);
    return FD_OK;
}

static int set_hash_key(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *v)
{
    upstream_t *up = conf;
    size_t i, n;
    char *h;

    (void)d;
    if (strcmp(v, "$remote_addr") == 0) {
        up->key = KEY_REMOTE_ADDR;
    } else if (strcmp(v, "$uri") == 0) {
        up->key = KEY_URI;
    } else if (strcmp(v, "$request_uri") == 0) {
        up->key = KEY_REQUEST_URI;
    } else if (strcmp(v, "$host") == 0) {
        up->key = KEY_HOST;
    } else if (strncmp(v, "$http_", 6) == 0 && v[6] != '\0') {
        n = strlen(v + 6);
        h = fd_pnalloc(cf->pool, n + 1);
        for (i = 0; i < n; i++) {
            char c = fd_tolower(v[6 + i]);
            h[i] = c == '_' ? '-' : c;
            if (!fd_http_tchar[(uint8_t)h[i]])
                return fd_conf_error(cf, "bad header name in \"%s\"", v);
        }
        h[n] = '\0';
        up->key = KEY_HEADER;
        up->key_header = (fd_str_t){n, h};
    } else {
        return fd_conf_error(cf, "\"hash_key\" must be $remote_addr, $uri, "
                             "$request_uri, $host or $http_NAME, not \"%s\"",
                             v);
    }
    up->hash_key = fd_pstrdup(cf->pool, v, strlen(v));
    return FD_OK;
}

/* The groups pass = http://HOST:PORT made for the configuration being
 * loaded into implicit_pool. A reload loads the new one while the old one
 * lives: its groups must not be found (they die with the old pool). */
static upstream_t *implicit_list;
static fd_pool_t *implicit_pool;

static void implicit_reset(void *data)
{
    if (data == implicit_pool) {
        implicit_list = NULL;
        implicit_pool = NULL;
    }
}

/* pass = http://HOST:PORT[/uri] [max_fails=N] [fail_timeout=T]: a group of
 * its own per address and options, shared by the locations naming both */
static upstream_t *implicit_upstream(fd_conf_t *cf, const char *hostport,
                                     const char *opts)
{
    upstream_t *up;
    peer_t opt = {.weight = 1, .max_fails = 1, .fail_timeout = 10000};
    char *s = fd_pstrdup(cf->pool, opts, strlen(opts)), *save, *tok;

    if (implicit_pool != cf->pool) {
        implicit_list = NULL;
        implicit_pool = cf->pool;
        fd_pool_cleanup_add(cf->pool, implicit_reset, cf->pool);
    }
    for (up = implicit_list; up; up = up->next_implicit)
        if (strcmp(up->name, hostport) == 0 &&
            strcmp(up->implicit_opts, opts) == 0)
            return up;
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save))
        if (server_option(cf, tok, &opt, 1) != FD_OK)
            return NULL;
    up = fd_pcalloc(cf->pool, sizeof(*up));
    if (up == NULL)
        return NULL;
    if (fd_conf_defaults(cf, upstream_directives, up) != FD_OK)
        return NULL;
    up->name = fd_pstrdup(cf->pool, hostport, strlen(hostport));
    up->implicit_opts = fd_pstrdup(cf->pool, opts, strlen(opts));
    up->file = cf->file;
    up->line = cf->line;
    if (resolve_servers(cf, up, hostport, &opt) != FD_OK)
        return NULL;
    upstream_finish(up);
    up->next_implicit = implicit_list;
    implicit_list = up;
    return up;
}

static int set_upstream(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *value)
{
    proxy_loc_conf_t *lc = conf;

    (void)d;
    lc->up = fd_cycle_section(cf->cycle, "upstream", value);
    if (lc->up == NULL)
        return fd_conf_error(cf, "unknown upstream \"%s\" (no [upstream %s] "
                             "section)", value, value);
    lc->upstream_name = fd_pstrdup(cf->pool, value, strlen(value));
    lc->pass = NULL;
    lc->has_uri = 0;
    return FD_OK;
}

static int set_pass(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *value)
{
    proxy_loc_conf_t *lc = conf;
    const char *auth, *end, *slash, *opts;
    char name[256];
    size_t n, ulen;

    (void)d;
    if (strncmp(value, "https://", 8) == 0)
        return fd_conf_error(cf, "\"pass\": https upstreams are not "
                             "supported");
    if (strncmp(value, "http://", 7) != 0)
        return fd_conf_error(cf, "\"pass\" must be http://NAME[/uri], not "
                             "\"%s\"", value);
    auth = value + 7;
    end = auth + strcspn(auth, " \t");
    for (opts = end; *opts == ' ' || *opts == '\t'; opts++)
        ;
    slash = memchr(auth, '/', (size_t)(end - auth));
    n = (size_t)((slash ? slash : end) - auth);
    if (n == 0 || n >= sizeof(name))
        return fd_conf_error(cf, "\"pass\": bad host in \"%s\"", value);
    memcpy(name, auth, n);
    name[n] = '\0';
    lc->up = fd_cycle_section(cf->cycle, "upstream", name);
    if (lc->up && *opts)
        return fd_conf_error(cf, "\"pass\": options for [upstream %s] go on "
                             "its \"server\" lines", name);
    if (lc->up == NULL && (lc->up = implicit_upstream(cf, name, opts)) == NULL)
        return FD_ERROR;
    lc->pass = fd_pstrdup(cf->pool, value, (size_t)(end - value));
    lc->upstream_name = NULL;
    lc->has_uri = slash != NULL;
    if (slash) {
        ulen = (size_t)(end - slash);
        lc->uri = (fd_str_t){ulen, fd_pstrdup(cf->pool, slash, ulen)};
    }
    return FD_OK;
}

static int set_next_upstream(fd_conf_t *cf, const fd_directive_t *d,
                             void *conf, const char *value)
{
    static const struct {
        const char *name;
        unsigned flag;
    } flags[] = {{"error", NEXT_ERROR},       {"timeout", NEXT_TIMEOUT},
                 {"http_502", NEXT_502},      {"http_503", NEXT_503},
                 {"http_504", NEXT_504},
                 {"non_idempotent", NEXT_NON_IDEMPOTENT}};
    unsigned *mask = (unsigned *)((char *)conf + d->offset), i, m = 0;
    char *s = fd_pstrdup(cf->pool, value, strlen(value)), *save, *tok;

    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (strcmp(tok, "off") == 0) {
            m = 0;
            continue;
        }
        for (i = 0; i < fd_nelems(flags); i++)
            if (strcmp(tok, flags[i].name) == 0)
                break;
        if (i == fd_nelems(flags))
            return fd_conf_error(cf, "\"next_upstream\": unknown \"%s\" "
                                 "(error timeout http_502 http_503 http_504 "
                                 "non_idempotent off)", tok);
        m |= flags[i].flag;
    }
    *mask = m;
    return FD_OK;
}

static int proxy_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    proxy_loc_conf_t *lc = conf;
    unsigned i;

    if (loc->handler != &fd_proxy_module)
        return FD_OK;
    if (lc->up == NULL)
        return fd_conf_error(cf, "%s: handler = proxy needs \"upstream = "
                             "NAME\" or \"pass = http://NAME/\"", loc->name);
    if (loc->kind == FD_LOC_REGEX || loc->kind == FD_LOC_REGEX_CASELESS)
        lc->has_uri = 0; /* documented: a regex location passes the URI */
    lc->nhdrs = lc->set_header.n;
    lc->hdrs = fd_pcalloc(cf->pool, (lc->nhdrs + 1) * sizeof(set_header_t));
    for (i = 0; i < lc->nhdrs; i++) {
        const char *s = lc->set_header.items[i], *colon = strchr(s, ':');
        const char *v;
        size_t n, k;
        set_header_t *h = &lc->hdrs[i];

        n = colon ? (size_t)(colon - s) : 0;
        for (k = 0; k < n; k++)
            if (!fd_http_tchar[(uint8_t)s[k]])
                break;
        if (n == 0 || k < n)
            return fd_conf_error(cf, "\"set_header\" must be \"Name: "
                                 "value\", not \"%s\"", s);
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        h->name = (fd_str_t){n, s};
        h->value = (fd_str_t){strlen(v), v};
        while (h->value.len && (v[h->value.len - 1] == ' ' ||
                                v[h->value.len - 1] == '\t'))
            h->value.len--;
        for (k = 0; k < h->value.len; k++)
            if ((uint8_t)v[k] < 0x20 && v[k] != '\t')
                return fd_conf_error(cf, "\"set_header\": control character "
                                     "in \"%s\"", s);
        if (fd_str_caseeq_lit(h->name, "connection") ||
            fd_str_caseeq_lit(h->name, "transfer-encoding") ||
            fd_str_caseeq_lit(h->name, "content-length") ||
            fd_str_caseeq_lit(h->name, "upgrade") ||
            fd_str_caseeq_lit(h->name, "te") ||
            fd_str_caseeq_lit(h->name, "keep-alive"))
            return fd_conf_error(cf, "\"set_header\": %.*s is the proxy's to "
                                 "set (framing and hop-by-hop)", (int)n, s);
        if (fd_str_caseeq_lit(h->name, "host"))
            lc->gen_replaced |= GEN_HOST;
        else if (fd_str_caseeq_lit(h->name, "x-forwarded-for"))
            lc->gen_replaced |= GEN_XFF;
        else if (fd_str_caseeq_lit(h->name, "x-real-ip"))
            lc->gen_replaced |= GEN_XRIP;
        else if (fd_str_caseeq_lit(h->name, "x-forwarded-proto"))
            lc->gen_replaced |= GEN_XFP;
        else if (fd_str_caseeq_lit(h->name, "x-forwarded-host"))
            lc->gen_replaced |= GEN_XFH;
    }
    return FD_OK;
}

/* Every group of the configuration: [upstream] sections in file order,
 * then the implicit ones of pass = (found through the locations). */
static unsigned upstreams_collect(fd_cycle_t *cy, upstream_t **out,
                                  unsigned max)
{
    fd_conf_section_t *s;
    fd_http_server_t *srv;
    unsigned n = 0, i, j;

    for (s = cy->sections; s; s = s->next)
        if (s->module == &fd_proxy_module && n < max)
            out[n++] = s->conf;
    for (i = 0; i < n / 2; i++) { /* the list is newest first */
        upstream_t *t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    for (srv = cy->servers; srv; srv = srv->next) {
        fd_http_loc_t *lists[4] = {srv->exact, srv->prefix, srv->regex,
                                   srv->root_loc};
        for (j = 0; j < 4; j++) {
            fd_http_loc_t *loc;
            for (loc = lists[j]; loc; loc = j == 3 ? NULL : loc->next) {
                proxy_loc_conf_t *lc = fd_loc_conf(loc, &fd_proxy_module);
                if (lc == NULL || lc->up == NULL)
                    continue;
                for (i = 0; i < n && out[i] != lc->up; i++)
                    ;
                if (i == n && n < max)
                    out[n++] = lc->up;
            }
        }
    }
    return n;
}

static fd_block_cache_t bufs;  /* 16k blocks: response, request body */
static void zombies_free(void *data);
static fd_posted_t zombie_post = {.handler = zombies_free};

static void shm_name(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size) /* keep the end: ports and socket names differ there */
        src += n - (size - 1);
    snprintf(dst, size, "%s", src);
}

static int proxy_init_worker(fd_worker_t *w)
{
    upstream_t *ups[256];
    unsigned n, i, k, slot = 0;

    bufs.size = BUF_SIZE;
    bufs.keep = 64;
    shm = fd_stats ? fd_stats_area(fd_stats, &fd_proxy_module) : NULL;
    if (shm)
        memset(shm, 0, sizeof(*shm));
    n = upstreams_collect(w->cycle, ups, fd_nelems(ups));
    for (i = 0; i < n; i++) {
        for (k = 0; k < ups[i]->npeers; k++) {
            peer_t *p = &ups[i]->peers[k];
            p->shm = -1;
            if (shm == NULL || slot == SHM_PEERS)
                continue;
            p->shm = (int)slot;
            shm_name(shm->peer[slot].upstream, sizeof(shm->peer[0].upstream),
                     ups[i]->name);
            shm_name(shm->peer[slot].server, sizeof(shm->peer[0].server),
                     p->name);
            shm->peer[slot].healthy = !p->down;
            slot++;
        }
    }
    if (slot == SHM_PEERS && n)
        fd_log_error(FD_LOG_INFO, 0, "proxy: status counters for the first "
                     "%d servers only", SHM_PEERS);
    return FD_OK;
}

/* --- 2. balancing -------------------------------------------------------- */

static int peer_usable(const peer_t *p)
{
    if (p->down)
        return 0;
    if (p->max_fails && p->fails >= (unsigned)p->max_fails &&
        fd_current_msec - p->checked <= p->fail_timeout)
        return 0;
    return 1;
}

static int tried(const proxy_req_t *px, const peer_t *p);

static int candidate(const proxy_req_t *px, const peer_t *p, int backup)
{
    return (int)p->backup == backup && !tried(px, p) && peer_usable(p);
}

/* Smooth weighted round robin (nginx's): over the candidates, raise each
 * current weight by its weight, take the highest, lower it by the total. */
static peer_t *pick_rr(proxy_req_t *px, upstream_t *up, int backup,
                       int least)
{
    peer_t *best = NULL;
    int64_t total = 0;
    unsigned i;
    uint64_t min_a = 0, min_w = 1;

    if (least) {
        /* fewest active per weight; ties go round robin */
        int any = 0;
        for (i = 0; i < up->npeers; i++) {
            peer_t *p = &up->peers[i];
            if (!candidate(px, p, backup))
                continue;
            if (!any || (uint64_t)p->active * min_w <
                            min_a * (uint64_t)p->weight) {
                min_a = p->active;
                min_w = (uint64_t)p->weight;
                any = 1;
            }
        }
        if (!any)
            return NULL;
    }
    for (i = 0; i < up->npeers; i++) {
        peer_t *p = &up->peers[i];
        if (!candidate(px, p, backup))
            continue;
        if (least && (uint64_t)p->active * min_w !=
                         min_a * (uint64_t)p->weight)
            continue;
        p->current += p->weight;
        total += p->weight;
        if (best == NULL || p->current > best->current)
            best = p;
    }
    if (best)
        best->current -= total;
    return best;
}

static peer_t *pick_hash(proxy_req_t *px, upstream_t *up);

static peer_t *upstream_pick(proxy_req_t *px)
{
    upstream_t *up = px->up;
    peer_t *p;

    switch (up->balance) {
    case BALANCE_HASH:
        p = pick_hash(px, up);
        break;
    case BALANCE_LEAST_CONN:
        p = pick_rr(px, up, 0, 1);
        break;
    default:
        p = pick_rr(px, up, 0, 0);
    }
    if (p == NULL) /* backups only when no primary can be used */
        p = pick_rr(px, up, 1, up->balance == BALANCE_LEAST_CONN);
    return p;
}

static int upstream_has_candidate(const proxy_req_t *px)
{
    unsigned i;

    for (i = 0; i < px->up->npeers; i++)
        if (!tried(px, &px->up->peers[i]) && peer_usable(&px->up->peers[i]))
            return 1;
    return 0;
}

/* Passive health: max_fails failures within fail_timeout of each other
 * take the server out until fail_timeout after the last one. */
static void peer_failed(peer_t *p)
{
    shm_peer_t *s = peer_shm(p);

    if (s)
        s->fails++;
    if (p->max_fails == 0)
        return;
    if (fd_current_msec - p->checked > p->fail_timeout)
        p->fails = 0;
    p->fails++;
    p->checked = fd_current_msec;
    if (p->fails >= (unsigned)p->max_fails) {
        if (p->fails == (unsigned)p->max_fails)
            fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s "
                         "temporarily disabled for %llums", p->up->name,
                         p->name, (unsigned long long)p->fail_timeout);
        if (s)
            s->healthy = 0;
    }
}

static void peer_ok(peer_t *p)
{
    shm_peer_t *s = peer_shm(p);

    p->fails = 0;
    if (s)
        s->healthy = 1;
}

/* --- 3. upstream connections --------------------------------------------- */

/* Closed connections wait one loop turn before their memory is reused: an
 * event for them may still be in the batch epoll_wait returned. */
static uconn_t *conn_free_list, *conn_zombies;
static int zombies_posted;

static void conn_event(fd_event_t *ev, uint32_t events);
static void conn_timer(fd_timer_t *t);

static void zombies_free(void *data)
{
    (void)data;
    zombies_posted = 0;
    while (conn_zombies) {
        uconn_t *uc = conn_zombies;
        conn_zombies = uc->lnext;
        uc->lnext = conn_free_list;
        conn_free_list = uc;
    }
}

static uconn_t *conn_alloc(void)
{
    uconn_t *uc = conn_free_list;

    if (uc)
        conn_free_list = uc->lnext;
    else if ((uc = malloc(sizeof(*uc))) == NULL)
        return NULL;
    memset(uc, 0, sizeof(*uc));
    uc->ev.fd = -1;
    uc->ev.handler = conn_event;
    uc->timer.handler = conn_timer;
    return uc;
}

static void idle_unlink(uconn_t *uc)
{
    peer_t *p = uc->peer;
    upstream_t *up = p->up;

    if (uc->pprev)
        uc->pprev->pnext = uc->pnext;
    else
        p->idle = uc->pnext;
    if (uc->pnext)
        uc->pnext->pprev = uc->pprev;
    if (uc->lprev)
        uc->lprev->lnext = uc->lnext;
    else
        up->lru_head = uc->lnext;
    if (uc->lnext)
        uc->lnext->lprev = uc->lprev;
    else
        up->lru_tail = uc->lprev;
    uc->pnext = uc->pprev = uc->lnext = uc->lprev = NULL;
    up->nidle--;
    uc->idle = 0;
}

static void conn_close(uconn_t *uc)
{
    if (uc->idle)
        idle_unlink(uc);
    fd_timer_del(&uc->timer);
    if (uc->ev.fd >= 0)
        close(uc->ev.fd); /* also leaves epoll */
    uc->ev.fd = -1;
    uc->px = NULL;
    uc->lnext = conn_zombies;
    conn_zombies = uc;
    if (!zombies_posted) {
        zombies_posted = 1;
        fd_event_post(&zombie_post);
    }
}

/* Deadlines move on every read and write: only touch the heap when the
 * new one is earlier than the armed timer (it re-arms when early). */
static void conn_deadline(uconn_t *uc, fd_msec_t ms)
{
    fd_msec_t when = fd_current_msec + ms;

    uc->deadline = when;
    if (!fd_timer_armed(&uc->timer) || uc->timer.when > when)
        fd_timer_add(&uc->timer, ms);
}

static void keepalive_close_peer(peer_t *p)
{
    while (p->idle)
        conn_close(p->idle);
}

static void keepalive_put(uconn_t *uc)
{
    peer_t *p = uc->peer;
    upstream_t *up = p->up;

    uc->px = NULL;
    uc->deadline = 0;
    if (up->keepalive == 0 || uc->eof || fd_worker->quitting ||
        uc->requests >= (unsigned)up->keepalive_requests) {
        conn_close(uc);
        return;
    }
    if (up->nidle >= (unsigned)up->keepalive)
        conn_close(up->lru_tail);
    uc->pnext = p->idle;
    if (p->idle)
        p->idle->pprev = uc;
    p->idle = uc;
    uc->lnext = up->lru_head;
    if (up->lru_head)
        up->lru_head->lprev = uc;
    up->lru_head = uc;
    if (up->lru_tail == NULL)
        up->lru_tail = uc;
    up->nidle++;
    uc->idle = 1;
    uc->idle_since = fd_current_msec;
    conn_deadline(uc, up->keepalive_timeout);
}

/*
 * An idle connection the upstream closed (or sent bytes on) is closed when
 * that event arrives. One whose FIN arrived after this loop turn's
 * epoll_wait is caught by peeking before reuse: always for a request that
 * could not be retried once sent, else when it has been idle for a second
 * or more, long enough for an upstream's idle timeout to be near (under
 * load connections are reused sooner, and a peek per request would cost a
 * syscall in five). A GET on a connection that dies under it is retried on
 * a new one anyway.
 */
static uconn_t *keepalive_get(peer_t *p, int careful)
{
    uconn_t *uc;
    char ch;

    while ((uc = p->idle) != NULL) {
        ssize_t n = -1;
        idle_unlink(uc);
        errno = EAGAIN;
        if (careful || fd_current_msec - uc->idle_since >= 1000)
            n = recv(uc->ev.fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uc->reused = 1;
            uc->deadline = 0;
            uc->readable = 0;
            return uc;
        }
        conn_close(uc);
    }
    return NULL;
}

/* A new connection: connecting, or connected; NULL with errno set. */
static uconn_t *conn_open(peer_t *p)
{
    int fd, err, one = 1;
    uconn_t *uc;

    fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0)
        return NULL;
    if (p->sa.ss_family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uc = conn_alloc();
    if (uc == NULL) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    uc->ev.fd = fd;
    uc->peer = p;
    if (connect(fd, (struct sockaddr *)&p->sa, p->salen) == 0) {
        uc->writable = 1;
    } else if (errno == EINPROGRESS) {
        uc->connecting = 1;
    } else {
        err = errno == EAGAIN ? ECONNREFUSED : errno; /* unix: backlog */
        conn_close(uc);
        errno = err;
        return NULL;
    }
    if (fd_event_add(&uc->ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) < 0) {
        err = errno;
        conn_close(uc);
        errno = err;
        return NULL;
    }
    return uc;
}

/* --- 4. the request ------------------------------------------------------ */

static int tried(const proxy_req_t *px, const peer_t *p)
{
    return (px->tried[p->index / 64] >> (p->index % 64)) & 1;
}

static int proxy_connect(proxy_req_t *px);
static int proxy_send(proxy_req_t *px);
static int proxy_read(proxy_req_t *px);
static void proxy_arm(proxy_req_t *px);

static peer_t *pick_hash(proxy_req_t *px, upstream_t *up)
{
    unsigned lo = 0, hi = up->nring, i;

    if (up->nring == 0)
        return NULL;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (up->ring[mid].point < px->hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* the owner, or walking on (clockwise) the next usable server */
    for (i = 0; i < up->nring; i++) {
        peer_t *p = up->ring[(lo + i) % up->nring].peer;
        if (candidate(px, p, 0))
            return p;
    }
    return NULL;
}

static uint32_t request_hash(fd_request_t *r, upstream_t *up)
{
    char addr[INET6_ADDRSTRLEN];
    size_t n, i;

    switch (up->key) {
    case KEY_URI:
        return hash_bytes(r->path.data, r->path.len);
    case KEY_REQUEST_URI:
        return hash_bytes(r->in.target.data, r->in.target.len);
    case KEY_HOST:
        return hash_bytes(r->in.host.data, r->in.host.len);
    case KEY_HEADER:
        for (i = 0; i < r->in.nheaders; i++)
            if (fd_str_caseeq(r->in.headers[i].name, up->key_header.data,
                              up->key_header.len))
                return hash_bytes(r->in.headers[i].value.data,
                                  r->in.headers[i].value.len);
        return hash_bytes("", 0);
    default:
        n = fd_connection_addr_text(r->c, addr, sizeof(addr));
        return hash_bytes(addr, n);
    }
}

/* What a request header line becomes upstream. */
enum { H_PASS, H_DROP, H_XFF };

static int header_kind(fd_str_t n)
{
    switch (n.len) {
    case 2:
        return fd_str_caseeq_lit(n, "te") ? H_DROP : H_PASS;
    case 4:
        return fd_str_caseeq_lit(n, "host") ? H_DROP : H_PASS;
    case 6:
        return fd_str_caseeq_lit(n, "expect") ? H_DROP : H_PASS;
    case 7:
        return fd_str_caseeq_lit(n, "trailer") ||
                       fd_str_caseeq_lit(n, "upgrade")
                   ? H_DROP
                   : H_PASS;
    case 9:
        return fd_str_caseeq_lit(n, "x-real-ip") ? H_DROP : H_PASS;
    case 10:
        return fd_str_caseeq_lit(n, "connection") ||
                       fd_str_caseeq_lit(n, "keep-alive")
                   ? H_DROP
                   : H_PASS;
    case 14:
        return fd_str_caseeq_lit(n, "content-length") ? H_DROP : H_PASS;
    case 15:
        return fd_str_caseeq_lit(n, "x-forwarded-for") ? H_XFF : H_PASS;
    case 16:
        return fd_str_caseeq_lit(n, "proxy-connection") ||
                       fd_str_caseeq_lit(n, "x-forwarded-host")
                   ? H_DROP
                   : H_PASS;
    case 17:
        return fd_str_caseeq_lit(n, "transfer-encoding") ||
                       fd_str_caseeq_lit(n, "x-forwarded-proto")
                   ? H_DROP
                   : H_PASS;
    }
    return H_PASS;
}

/* The tokens of every Connection header: the headers they name are
 * hop-by-hop too. */
static unsigned connection_tokens(fd_request_t *r, fd_str_t *tok,
                                  unsigned max)
{
    unsigned i, n = 0;

    for (i = 0; i < r->in.nheaders; i++)
        if (fd_str_caseeq_lit(r->in.headers[i].name, "connection"))
            fd_http_tokens(r->in.headers[i].value, tok, &n, max);
    return n;
}

static int named_in(fd_str_t name, const fd_str_t *list, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++)
        if (fd_str_caseeq(name, list[i].data, list[i].len))
            return 1;
    return 0;
}

static int replaced_by_set_header(proxy_loc_conf_t *lc, fd_str_t name)
{
    unsigned i;

    for (i = 0; i < lc->nhdrs; i++)
        if (fd_str_caseeq(name, lc->hdrs[i].name.data, lc->hdrs[i].name.len))
            return 1;
    return 0;
}

/*
 * The URI sent upstream, as nginx's proxy_pass:
 * - pass without a URI, request URI unchanged: the client's target as it
 *   came (origin form; path and query of an absolute-form target);
 * - pass with a URI: the location's matched part of the normalised path
 *   replaced by it, the rest re-encoded. The client's raw bytes are never
 *   pasted after the prefix, so "..", "%2e%2e", "//" or "%2f" cannot climb
 *   out of it: they were resolved before the location matched;
 * - a URI a rewrite changed: the new (normalised) path, encoded, whatever
 *   pass holds, so a confinement written as a rewrite holds upstream too.
 */
static void request_uri(fd_sbuf_t *sb, fd_request_t *r, proxy_loc_conf_t *lc)
{
    fd_http_loc_t *loc = r->loc;
    fd_str_t q = r->in.query, path = r->path;

    if (!r->uri_changed && !lc->has_uri) {
        if (r->in.target.len && r->in.target.data[0] == '/') {
            fd_sbuf_add_str(sb, r->in.target);
            return;
        }
        fd_sbuf_add_str(sb, r->in.path_raw); /* absolute-form */
        goto query;
    }
    if (!r->uri_changed) {
        fd_sbuf_add_str(sb, lc->uri);
        if (loc->kind == FD_LOC_EXACT)
            path.len = 0;
        else if (path.len >= loc->match.len)
            path = (fd_str_t){path.len - loc->match.len,
                              path.data + loc->match.len};
    }
    fd_sbuf_add_escaped_path(sb, path.data, path.len);
    if (q.len == 0)
        return; /* "/x?" from a rewrite that drops the arguments */
query:
    if (q.data) {
        fd_sbuf_addc(sb, '?');
        fd_sbuf_add_str(sb, q);
    }
}

/*
 * The upstream request header, built once (the client's header slices
 * point into its read buffer, which moves once the body streams). Every
 * attempt sends the same bytes. The builder grows as it goes: the size
 * below is only a first guess.
 */
static int request_build(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    upstream_t *up = px->up;
    fd_str_t tok[16], host, a;
    char addr[INET6_ADDRSTRLEN];
    unsigned ntok = connection_tokens(r, tok, fd_nelems(tok)), i;
    int keep_xff = !(lc->gen_replaced & GEN_XFF);
    fd_sbuf_t sb;

    a.len = fd_connection_addr_text(r->c, addr, sizeof(addr));
    a.data = addr;
    if (lc->proxy_host == HOST_PASS && r->in.host.len)
        host = r->in.host;
    else
        host = (fd_str_t){strlen(up->name), up->name};
    if (fd_sbuf_init(&sb, r->pool, 512 + r->in.target.len) != FD_OK)
        return FD_ERROR;

    fd_sbuf_add_str(&sb, r->in.method);
    fd_sbuf_addc(&sb, ' ');
    request_uri(&sb, r, lc);
    fd_sbuf_add_lit(&sb, " HTTP/1.1\r\n");
    if (!(lc->gen_replaced & GEN_HOST))
        fd_sbuf_add_header(&sb, fd_string("Host"), host);
    for (i = 0; i < r->in.nheaders; i++) {
        fd_http_header_t *h = &r->in.headers[i];
        if (header_kind(h->name) != H_PASS || named_in(h->name, tok, ntok) ||
            replaced_by_set_header(lc, h->name))
            continue;
        fd_sbuf_add_header(&sb, h->name, h->value);
    }
    if (keep_xff) {
        /* every X-Forwarded-For the client sent, joined, then the client */
        fd_sbuf_add_lit(&sb, "X-Forwarded-For: ");
        for (i = 0; i < r->in.nheaders; i++) {
            fd_http_header_t *h = &r->in.headers[i];
            if (header_kind(h->name) != H_XFF || h->value.len == 0)
                continue;
            fd_sbuf_add_str(&sb, h->value);
            fd_sbuf_add_lit(&sb, ", ");
        }
        fd_sbuf_add_str(&sb, a);
        fd_sbuf_add_crlf(&sb);
    }
    if (!(lc->gen_replaced & GEN_XRIP))
        fd_sbuf_add_header(&sb, fd_string("X-Real-IP"), a);
    if (!(lc->gen_replaced & GEN_XFP))
        fd_sbuf_add_lit(&sb, "X-Forwarded-Proto: http\r\n");
    if (!(lc->gen_replaced & GEN_XFH) && r->in.host.len)
        fd_sbuf_add_header(&sb, fd_string("X-Forwarded-Host"), r->in.host);
    for (i = 0; i < lc->nhdrs; i++)
        if (lc->hdrs[i].value.len)
            fd_sbuf_add_header(&sb, lc->hdrs[i].name, lc->hdrs[i].value);
    if (r->in.chunked) {
        fd_sbuf_add_lit(&sb, "Transfer-Encoding: chunked\r\n");
    } else if (r->in.content_length >= 0) {
        fd_sbuf_add_lit(&sb, "Content-Length: ");
        fd_sbuf_add_uint(&sb, (uint64_t)r->in.content_length);
        fd_sbuf_add_crlf(&sb);
    }
    if (px->upgrade)
        fd_sbuf_add_lit(&sb, "Connection: upgrade\r\nUpgrade: websocket\r\n");
    else if (up->keepalive)
        fd_sbuf_add_lit(&sb, "Connection: keep-alive\r\n");
    else
        fd_sbuf_add_lit(&sb, "Connection: close\r\n");
    fd_sbuf_add_crlf(&sb);
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    px->hdr = sb.start;
    px->hdr_len = fd_sbuf_len(&sb);
    return FD_OK;
}

static void peer_active(peer_t *p, int d)
{
    shm_peer_t *s = peer_shm(p);

    p->active += (unsigned)d;
    if (s)
        s->active += (uint64_t)(int64_t)d;
}

/* Let go of the upstream connection (into the pool when reuse). */
static void conn_release(proxy_req_t *px, int reuse)
{
    uconn_t *uc = px->uc;

    fd_sendq_cancel(&px->sop);
    if (uc) {
        px->uc = NULL;
        uc->px = NULL;
        if (reuse)
            keepalive_put(uc);
        else
            conn_close(uc);
    }
    if (px->peer) {
        peer_active(px->peer, -1);
        px->peer = NULL;
    }
}

static void bufs_release(proxy_req_t *px)
{
    if (px->ibuf) {
        fd_block_put(&bufs, px->ibuf);
        px->ibuf = NULL;
    }
    if (px->obuf) {
        fd_block_put(&bufs, px->obuf);
        px->obuf = NULL;
    }
}

static void proxy_release(proxy_req_t *px, int reuse)
{
    fd_request_t *r = px->r;

    conn_release(px, reuse);
    bufs_release(px);
    r->on_abort = NULL;
    r->on_drain = NULL;
    r->on_body = NULL;
}

/* The request ends without a (complete) response: an error page, or a
 * cut connection once the header left. */
static int proxy_fail(proxy_req_t *px, int status)
{
    fd_request_t *r = px->r;

    proxy_release(px, 0);
    px->done = 1;
    if (px->sync) {
        px->rc = status;
        return PX_DONE;
    }
    fd_request_finish(r, r->header_sent ? FD_ERROR : status);
    return PX_DONE;
}

static void log_try(proxy_req_t *px, peer_t *p)
{
    if (px->nlog < LOG_TRIES) {
        px->log[px->nlog].peer = p;
        px->log[px->nlog].status = 0;
        px->log[px->nlog].msec = 0;
        px->nlog++;
    }
}

static int retry_allowed(proxy_req_t *px)
{
    proxy_loc_conf_t *lc = px->lc;

    if (px->r->header_sent || (px->pulled && !px->body_kept))
        return 0; /* the body read from the client cannot be sent again */
    if (px->written && !px->idempotent &&
        !(lc->next_upstream & NEXT_NON_IDEMPOTENT))
        return 0;
    if (lc->next_upstream_tries && px->tries >= (unsigned)
                                                lc->next_upstream_tries)
        return 0;
    return 1;
}

/*
 * This attempt failed (ft: NEXT_ERROR or NEXT_TIMEOUT): log it, count it
 * against the server, then the next server or the error response.
 */
static int proxy_next(proxy_req_t *px, unsigned ft, int err, const char *what)
{
    peer_t *p = px->peer;
    uconn_t *uc = px->uc;
    /* a kept-alive connection the upstream closed before it saw the
     * request is not the server's failure: retry on a new connection */
    int stale = uc && uc->reused && ft == NEXT_ERROR && px->ilast == 0 &&
                px->rstate == RS_HEADER;

    if (stale && !(px->pulled && !px->body_kept) &&
        (!px->written || px->idempotent ||
         (px->lc->next_upstream & NEXT_NON_IDEMPOTENT))) {
        fd_log_error(FD_LOG_INFO, err, "upstream \"%s\" server %s: kept-alive "
                     "connection closed: %s", px->up->name, p->name, what);
        /* its siblings in the pool are likely dead too (a restart) */
        keepalive_close_peer(p);
        conn_release(px, 0);
        px->tried[p->index / 64] &= ~(1ull << (p->index % 64));
        px->tries--;
        if (px->nlog)
            px->nlog--;
        px->written = 0;
        return proxy_connect(px);
    }
    fd_log_error(FD_LOG_ERR, err, "upstream \"%s\" server %s: %s%s",
                 px->up->name, p ? p->name : "-", what,
                 stale ? " (a kept-alive connection)" : "");
    if (p && !stale)
        peer_failed(p);
    if (px->nlog && px->log[px->nlog - 1].status == 0)
        px->log[px->nlog - 1].status = ft == NEXT_TIMEOUT ? 504 : 502;
    conn_release(px, 0);
    px->ipos = px->ilast = px->hscan = 0;
    px->timed_out = ft == NEXT_TIMEOUT;
    if ((px->lc->next_upstream & ft) && retry_allowed(px))
        return proxy_connect(px);
    return proxy_fail(px, ft == NEXT_TIMEOUT ? 504 : 502);
}

/*
 * Pick a server and get a connection to it: from the pool (then the
 * request is written at once), or a new one. Servers that refuse at once
 * are failed over here.
 */
static int proxy_connect(proxy_req_t *px)
{
    peer_t *p = upstream_pick(px);
    shm_peer_t *s;
    uconn_t *uc;

    if (p == NULL) {
        if (px->tries == 0) /* else the last failure was logged */
            fd_log_error(FD_LOG_ERR, 0, "upstream \"%s\": no live servers",
                         px->up->name);
        return proxy_fail(px, px->timed_out ? 504 : 502);
    }
    px->tried[p->index / 64] |= 1ull << (p->index % 64);
    px->tries++;
    px->peer = p;
    peer_active(p, 1);
    if ((s = peer_shm(p)) != NULL)
        s->requests++;
    log_try(px, p);
    px->start = fd_current_msec;
    px->hdr_sent = 0;
    px->req_sent = 0;
    px->rstate = RS_HEADER;
    px->wait_body = 0;
    px->ipos = px->ilast = px->hscan = 0;
    if (px->body_kept) {
        px->opos = 0; /* the whole body is still in obuf: again */
    } else {
        px->opos = px->olen = 0;
        px->body_done = 0;
    }

    uc = keepalive_get(p, !px->idempotent || px->upgrade);
    if (uc == NULL)
        uc = conn_open(p); /* errno set when NULL */
    if (uc == NULL)
        return proxy_next(px, NEXT_ERROR, errno, "connect() failed");
    uc->px = px;
    uc->requests++;
    px->uc = uc;
    proxy_arm(px);
    if (uc->connecting)
        return PX_OK;
    return proxy_send(px);
}

/* The timer for what the request waits on now. */
static void proxy_arm(proxy_req_t *px)
{
    uconn_t *uc = px->uc;
    proxy_loc_conf_t *lc = px->lc;
    fd_msec_t ms;

    if (uc == NULL)
        return;
    if (px->paused) {
        uc->deadline = 0; /* the client's send timeout rules */
        return;
    }
    if (uc->connecting)
        ms = lc->connect_timeout;
    else if (px->rstate == RS_BODY || px->req_sent)
        ms = lc->read_timeout;
    else if (px->wait_body)
        ms = fd_worker->cycle->http.body_timeout;
    else
        ms = lc->send_timeout;
    conn_deadline(uc, ms);
}

/* Refill obuf from the client's body: PX_OK, PX_WAIT (none yet), PX_DONE */
static int body_fill(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    size_t head = px->chunked_body ? 16 : 0;
    ssize_t n;

    if (px->obuf == NULL && (px->obuf = fd_block_get(&bufs)) == NULL)
        return proxy_fail(px, 500);
    if (px->body_kept) {
        /* a small body accumulates, to be sent again on a retry */
        n = fd_http_body_pull(r, px->obuf + px->olen, BUF_SIZE - px->olen);
        if (n > 0) {
            px->pulled = 1;
            px->body_bytes += n;
            px->wait_body = 0;
            px->olen += (size_t)n;
            return PX_OK;
        }
    } else {
        n = fd_http_body_pull(r, px->obuf + head, BUF_SIZE - head - 8);
    }
    if (n > 0) {
        px->pulled = 1;
        px->body_bytes += n;
        px->wait_body = 0;
        if (px->chunked_body) {
            char hex[20];
            int k;
            if (px->body_bytes > (int64_t)r->loc->max_body_size) {
                fd_log_error(FD_LOG_INFO, 0, "client body over "
                             "max_body_size");
                return proxy_fail(px, 413);
            }
            k = snprintf(hex, sizeof(hex), "%zx\r\n", (size_t)n);
            memcpy(px->obuf + head - (size_t)k, hex, (size_t)k);
            px->opos = head - (size_t)k;
            px->olen = head + (size_t)n;
            memcpy(px->obuf + px->olen, "\r\n", 2);
            px->olen += 2;
        } else {
            px->opos = 0;
            px->olen = (size_t)n;
        }
        return PX_OK;
    }
    if (n == 0) {
        px->body_done = 1;
        px->wait_body = 0;
        if (px->chunked_body) {
            memcpy(px->obuf, "0\r\n\r\n", 5);
            px->opos = 0;
            px->olen = 5;
        }
        return PX_OK;
    }
    if (n == FD_AGAIN) {
        px->wait_body = 1;
        return PX_WAIT;
    }
    return proxy_fail(px, 400); /* bad framing of the client's body */
}

static void proxy_sent(fd_sendop_t *op);

/* w bytes of the request left: first the header, then obuf */
static void sent_bytes(proxy_req_t *px, size_t w)
{
    size_t k;

    px->written = 1;
    if (px->hdr_sent < px->hdr_len) {
        k = fd_min(w, px->hdr_len - px->hdr_sent);
        px->hdr_sent += k;
        w -= k;
    }
    px->opos += w;
    if (px->opos == px->olen && !px->body_kept)
        px->opos = px->olen = 0;
}

/*
 * Write the request (header, then body as the client sends it). An
 * attempt's first write goes into the turn's batch when it can
 * (events.batch_sends); proxy_sent() goes on from there.
 */
static int proxy_send(proxy_req_t *px)
{
    if (px->sop.slot)
        return PX_OK; /* the batch has it */
    for (;;) {
        uconn_t *uc = px->uc;
        struct iovec iov[2];
        int niov = 0, rc;
        ssize_t w;

        if (px->opos == px->olen && px->has_body && !px->body_done) {
            rc = body_fill(px);
            if (rc == PX_DONE)
                return PX_DONE;
        }
        if (px->hdr_sent < px->hdr_len) {
            iov[niov].iov_base = px->hdr + px->hdr_sent;
            iov[niov++].iov_len = px->hdr_len - px->hdr_sent;
        }
        if (px->opos < px->olen) {
            iov[niov].iov_base = px->obuf + px->opos;
            iov[niov++].iov_len = px->olen - px->opos;
        }
        if (niov == 0) {
            if (!px->has_body || px->body_done) {
                px->req_sent = 1;
                px->wait_body = 0;
            }
            proxy_arm(px);
            return PX_OK;
        }
        if (px->hdr_sent == 0) {
            px->sop.fd = uc->ev.fd;
            px->sop.niov = niov;
            px->sop.iov[0] = iov[0];
            px->sop.iov[1] = iov[1];
            px->sop.handler = proxy_sent;
            if (fd_sendq_add(&px->sop) == FD_OK)
                return PX_OK;
        }
        w = niov == 1 ? send(uc->ev.fd, iov[0].iov_base, iov[0].iov_len,
                             MSG_NOSIGNAL)
                      : writev(uc->ev.fd, iov, niov);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                uc->writable = 0;
                proxy_arm(px);
                return PX_OK;
            }
            return proxy_next(px, NEXT_ERROR, errno, "send() failed");
        }
        sent_bytes(px, (size_t)w);
    }
}

/* The batched first write was made: go on as proxy_send() would. */
static void proxy_sent(fd_sendop_t *op)
{
    proxy_req_t *px = (proxy_req_t *)((char *)op -
                                      offsetof(proxy_req_t, sop));
    ssize_t w = op->res;

    fd_log_conn_id = px->r->c->id;
    if (w == -EAGAIN || w == -EWOULDBLOCK) {
        px->uc->writable = 0;
        proxy_arm(px);
    } else if (w < 0) {
        proxy_next(px, NEXT_ERROR, (int)-w, "send() failed");
    } else {
        sent_bytes(px, (size_t)w);
        if (proxy_send(px) != PX_DONE && px->uc && px->uc->readable &&
            !px->paused)
            proxy_read(px);
    }
    fd_log_conn_id = 0;
}

/* r->on_body: more of the client's body arrived */
static void proxy_on_body(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    if (px == NULL || px->done || px->uc == NULL || px->uc->connecting ||
        px->req_sent || !px->uc->writable)
        return;
    proxy_send(px);
}

/* --- 5. the response ----------------------------------------------------- */

static int proxy_invalid(proxy_req_t *px, const char *why)
{
    peer_t *p = px->peer;

    fd_log_error(FD_LOG_ERR, 0, "upstream \"%s\" server %s: %s",
                 px->up->name, p ? p->name : "-", why);
    if (p)
        peer_failed(p);
    if (px->nlog && px->log[px->nlog - 1].status == 0)
        px->log[px->nlog - 1].status = 502;
    return proxy_fail(px, 502);
}

static int tunnel_begin(proxy_req_t *px, fd_str_t upgrade);
static void tunnel_free(tunnel_t *t);

/*
 * The response header at ibuf + ipos, once complete: check it strictly
 * (fd_http_parse_response), then either fail over (next_upstream
 * http_5xx), or set the client's response and the body framing. PX_OK
 * (body follows), PX_MORE (incomplete), PX_INTERIM (a 1xx was skipped),
 * PX_WAIT (a new attempt or a tunnel began), PX_DONE.
 */
static int resp_header(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    const char *buf = px->ibuf + px->ipos, *err;
    char *h;
    size_t hlen;
    fd_http_header_t f[MAX_RESP_HEADERS];
    fd_http_resp_t rs = {.fields = f, .max_fields = MAX_RESP_HEADERS};
    unsigned nf, ntok, i, ft;
    int status;

    switch (fd_http_parse_response_end(buf, px->ilast - px->ipos, &px->hscan,
                                       &hlen, &err)) {
    case FD_AGAIN:
        return PX_MORE;
    case FD_ERROR:
        return proxy_invalid(px, err);
    }
    /* the fields outlive the buffer, which the body reuses */
    h = fd_pnalloc(r->pool, hlen);
    if (h == NULL)
        return proxy_fail(px, 500);
    memcpy(h, buf, hlen);
    if (fd_http_parse_response(&rs, h, hlen, &err) != FD_OK)
        return proxy_invalid(px, err);
    status = rs.status;
    nf = rs.nfields;
    ntok = rs.ntok;

    if (status >= 100 && status < 200 && status != 101) {
        /* 100 Continue, 102, 103: interim, not forwarded; each was copied
         * into the request's pool, so an upstream gets a handful */
        if (++px->ninterim > MAX_INTERIM)
            return proxy_invalid(px, "sent too many 1xx responses");
        px->ipos += hlen;
        return PX_INTERIM;
    }

    if (px->nlog) {
        px->log[px->nlog - 1].status = status;
        px->log[px->nlog - 1].msec = fd_current_msec - px->start;
    }
    if (px->peer) {
        shm_peer_t *s = peer_shm(px->peer);
        if (s) {
            s->responses++;
            s->response_msec += fd_current_msec - px->start;
        }
    }

    /* next_upstream http_502/503/504: only while another server remains */
    ft = status == 502 ? NEXT_502 : status == 503 ? NEXT_503
       : status == 504 ? NEXT_504 : 0;
    if (ft && (px->lc->next_upstream & ft) && retry_allowed(px) &&
        upstream_has_candidate(px)) {
        fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s answered %d, "
                     "trying the next", px->up->name, px->peer->name,
                     status);
        peer_failed(px->peer);
        conn_release(px, 0);
        return proxy_connect(px) == PX_DONE ? PX_DONE : PX_WAIT;
    }
    if (ft && (px->lc->next_upstream & ft))
        peer_failed(px->peer); /* counted, though passed on: the last */
    else
        peer_ok(px->peer);

    if (status == 101) {
        if (!px->upgrade)
            return proxy_invalid(px, "sent 101 to a request without "
                                 "Upgrade");
        if (rs.upgrade.data && !fd_str_caseeq_lit(rs.upgrade, "websocket"))
            return proxy_invalid(px, "sent 101 switching to another "
                                 "protocol than websocket");
        px->ipos += hlen;
        r->status = 101;
        for (i = 0; i < nf; i++) {
            fd_str_t n = f[i].name;
            if (fd_str_caseeq_lit(n, "connection") ||
                fd_str_caseeq_lit(n, "upgrade") ||
                fd_str_caseeq_lit(n, "keep-alive") ||
                fd_str_caseeq_lit(n, "transfer-encoding") ||
                fd_str_caseeq_lit(n, "content-length") ||
                fd_str_caseeq_lit(n, "server") ||
                fd_str_caseeq_lit(n, "date") ||
                named_in(n, rs.conn_tok, ntok))
                continue;
            fd_http_header_add(r, n, f[i].value);
        }
        return tunnel_begin(px, fd_string("websocket"));
    }

    r->status = status;
    for (i = 0; i < nf; i++) {
        fd_str_t n = f[i].name;
        switch (n.len) {
        case 2:
            if (fd_str_caseeq_lit(n, "te"))
                continue;
            break;
        case 4:
            if (fd_str_caseeq_lit(n, "date"))
                continue; /* the engine's own */
            break;
        case 6:
            if (fd_str_caseeq_lit(n, "server"))
                continue;
            break;
        case 7:
            if (fd_str_caseeq_lit(n, "trailer") ||
                fd_str_caseeq_lit(n, "upgrade"))
                continue;
            break;
        case 10:
            if (fd_str_caseeq_lit(n, "connection") ||
                fd_str_caseeq_lit(n, "keep-alive"))
                continue;
            break;
        case 12:
            if (fd_str_caseeq_lit(n, "content-type")) {
                if (r->content_type.len == 0)
                    r->content_type = f[i].value;
                continue;
            }
            break;
        case 14:
            if (fd_str_caseeq_lit(n, "content-length"))
                continue;
            break;
        case 16:
            if (fd_str_caseeq_lit(n, "proxy-connection"))
                continue;
            break;
        case 17:
            if (fd_str_caseeq_lit(n, "transfer-encoding"))
                continue;
            break;
        }
        if (ntok && named_in(n, rs.conn_tok, ntok))
            continue;
        if (fd_http_header_add(r, n, f[i].value) != FD_OK)
            return proxy_fail(px, 500);
    }
    px->ipos += hlen;
    px->keepalive = (rs.version == 11 ? !rs.conn_close
                                      : rs.conn_keepalive && !rs.conn_close) &&
                    !px->upgrade;
    if (r->header_only || status == 204 || status == 304) {
        px->framing = FR_NONE;
        r->content_length = rs.content_length >= 0 && r->header_only
                                ? rs.content_length
                                : -1;
    } else if (rs.chunked) {
        px->framing = FR_CHUNKED;
        memset(&px->ck, 0, sizeof(px->ck));
        r->content_length = -1;
    } else if (rs.content_length >= 0) {
        px->framing = FR_LENGTH;
        px->rest = rs.content_length;
        r->content_length = rs.content_length;
    } else {
        px->framing = FR_CLOSE;
        px->keepalive = 0;
        r->content_length = -1;
    }
    px->rstate = RS_BODY;
    if (!px->lc->buffering && !r->c->s.nodelay) {
        int one = 1;
        setsockopt(r->c->s.ev.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        r->c->s.nodelay = 1;
    }
    return PX_OK;
}

/* The client is gone or the response cannot go on. */
static int proxy_abort_response(proxy_req_t *px)
{
    return proxy_fail(px, FD_ERROR);
}

static void proxy_drain(fd_request_t *r);

/*
 * Hand the body bytes in ibuf to the engine (which copies them), decoding
 * chunked framing. Ends the request when the body is complete.
 */
static int resp_body(proxy_req_t *px, int eof)
{
    fd_request_t *r = px->r;
    fd_buf_t b[16], *chain = NULL; /* slices of ibuf: the engine copies */
    unsigned nb = 0;
    char *p = px->ibuf + px->ipos, *end = px->ibuf + px->ilast;
    int done = 0, rc;

    switch (px->framing) {
    case FR_NONE:
        done = 1;
        break;
    case FR_LENGTH: {
        size_t n = (size_t)fd_min((int64_t)(end - p), px->rest);
        if (n)
            b[nb++] = (fd_buf_t){.pos = p, .last = p + n, .file_fd = -1};
        p += n;
        px->rest -= (int64_t)n;
        done = px->rest == 0;
        break;
    }
    case FR_CLOSE:
        if (p < end)
            b[nb++] = (fd_buf_t){.pos = p, .last = end, .file_fd = -1};
        p = end;
        done = eof;
        break;
    case FR_CHUNKED:
        while (nb < fd_nelems(b)) {
            const char *pos = p, *data;
            size_t len;
            rc = fd_http_parse_chunked(&px->ck, &pos, end, &data, &len);
            p = (char *)pos;
            if (rc == FD_OK) {
                if (len)
                    b[nb++] = (fd_buf_t){.pos = (char *)data,
                                         .last = (char *)data + len,
                                         .file_fd = -1};
                continue;
            }
            if (rc == FD_DONE) {
                done = 1;
                break;
            }
            if (rc == FD_AGAIN)
                break;
            if (!r->header_sent)
                return proxy_invalid(px, "sent an invalid chunked body");
            fd_log_error(FD_LOG_ERR, 0, "upstream \"%s\" server %s: sent an "
                         "invalid chunked body", px->up->name,
                         px->peer->name);
            return proxy_abort_response(px);
        }
        break;
    }
    for (unsigned k = 0; k + 1 < nb; k++)
        b[k].next = &b[k + 1];
    if (nb)
        chain = &b[0];
    px->ipos = (size_t)(p - px->ibuf);

    if (done) {
        /* bytes after the response: the upstream does not frame as we
         * read it, never reuse that connection */
        int reuse = px->keepalive && px->req_sent && px->framing != FR_CLOSE &&
                    px->ipos == px->ilast;
        if (px->ipos != px->ilast)
            fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s sent "
                         "data after the response", px->up->name,
                         px->peer->name);
        conn_release(px, reuse);
        rc = fd_http_output(r, chain, 1);
        proxy_release(px, 0);
        px->done = 1;
        (void)rc; /* the engine ends the request either way */
        return PX_DONE;
    }
    if (chain == NULL) {
        if (!r->header_sent && fd_http_send_header(r) != FD_OK)
            return proxy_abort_response(px);
        return PX_OK;
    }
    rc = fd_http_output(r, chain, 0);
    if (rc == FD_ERROR)
        return proxy_abort_response(px);
    if (rc == FD_AGAIN) {
        /* above the engine's high water: read on once it drained */
        px->paused = 1;
        r->on_drain = proxy_drain;
        proxy_arm(px);
        return PX_WAIT;
    }
    return PX_OK;
}

/* Work through what ibuf holds. */
static int resp_process(proxy_req_t *px, int eof)
{
    for (;;) {
        int rc;

        if (px->rstate == RS_HEADER) {
            if (px->ipos == px->ilast)
                return PX_OK;
            rc = resp_header(px);
            if (rc == PX_MORE)
                return PX_OK;
            if (rc == PX_INTERIM)
                continue;
            if (rc != PX_OK)
                return rc;
        }
        rc = resp_body(px, eof);
        if (rc != PX_OK)
            return rc;
        if (px->ipos == px->ilast)
            return PX_OK;
        /* more chunks than one output call takes: go on */
    }
}

/* The upstream closed (or reset) its side. */
static int resp_eof(proxy_req_t *px, int err)
{
    if (px->rstate == RS_HEADER)
        return proxy_next(px, NEXT_ERROR, err,
                          err ? "recv() failed while reading the response "
                                "header"
                              : "closed the connection before the response "
                                "header");
    if (px->framing == FR_CLOSE && !err)
        return resp_process(px, 1);
    fd_log_error(FD_LOG_ERR, err, "upstream \"%s\" server %s: closed the "
                 "connection in the middle of the response body",
                 px->up->name, px->peer->name);
    if (px->peer)
        peer_failed(px->peer);
    return proxy_abort_response(px);
}

/* Read what the upstream sent, as long as the client keeps up. */
static int proxy_read(proxy_req_t *px)
{
    int pending = 0, rc;

    for (;;) {
        uconn_t *uc = px->uc;
        ssize_t n;
        size_t room;

        if (px->paused)
            return PX_WAIT;
        if (px->ibuf == NULL && (px->ibuf = fd_block_get(&bufs)) == NULL)
            return proxy_fail(px, 500);
        if (px->ipos == px->ilast && px->rstate == RS_BODY)
            px->ipos = px->ilast = 0;
        if (px->ilast == BUF_SIZE) {
            if (px->ipos == 0 && px->rstate == RS_HEADER)
                return proxy_invalid(px, "sent a response header over 16k");
            if (px->ipos == 0) { /* full of unprocessed body: hand it on */
                rc = resp_process(px, 0);
                if (rc != PX_OK)
                    return rc;
                pending = 0;
                continue;
            }
            memmove(px->ibuf, px->ibuf + px->ipos, px->ilast - px->ipos);
            px->ilast -= px->ipos;
            px->ipos = 0;
        }
        room = BUF_SIZE - px->ilast;
        n = recv(uc->ev.fd, px->ibuf + px->ilast, room, 0);
        if (n > 0) {
            px->ilast += (size_t)n;
            /* buffering on: gather what is there before handing it on
             * (unless that is the end of a body of known length) */
            if (px->lc->buffering && px->rstate == RS_BODY &&
                px->ilast < BUF_SIZE &&
                !(px->framing == FR_LENGTH &&
                  (int64_t)(px->ilast - px->ipos) >= px->rest)) {
                pending = 1;
                continue;
            }
            pending = 0;
            rc = resp_process(px, 0);
            if (rc != PX_OK)
                return rc;
            continue;
        }
        if (n == 0) {
            uc->eof = 1;
            uc->readable = 0;
            if (pending && px->framing != FR_CLOSE) {
                rc = resp_process(px, 0);
                if (rc != PX_OK)
                    return rc;
            }
            return resp_eof(px, 0);
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            uc->readable = 0;
            if (pending) {
                rc = resp_process(px, 0);
                if (rc != PX_OK)
                    return rc;
            }
            proxy_arm(px);
            return PX_OK;
        }
        uc->eof = 1;
        uc->readable = 0;
        if (pending && px->rstate == RS_BODY) {
            rc = resp_process(px, 0);
            if (rc != PX_OK)
                return rc;
        }
        return resp_eof(px, errno ? errno : ECONNRESET);
    }
}

/* r->on_drain: the client took the output; read on. */
static int tunnel_detach(proxy_req_t *px);

static void proxy_drain(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    r->on_drain = NULL;
    if (px == NULL || px->done || !px->paused)
        return;
    px->paused = 0;
    if (px->tunnel) {
        tunnel_detach(px);
        return;
    }
    proxy_arm(px);
    if (px->uc->readable || px->uc->eof)
        proxy_read(px);
}

/* r->on_abort: the client closed; drop the upstream connection. */
static void proxy_abort(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    if (px == NULL || px->done)
        return;
    fd_log_error(FD_LOG_INFO, 0, "client closed the connection while "
                 "proxying to upstream \"%s\"", px->up->name);
    if (px->tunnel) {
        tunnel_free(px->tunnel);
        px->tunnel = NULL;
    }
    proxy_release(px, 0);
    px->done = 1;
}

/* --- 6. events and timeouts ---------------------------------------------- */

static void proxy_run(proxy_req_t *px)
{
    uconn_t *uc = px->uc;

    if (uc->connecting) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (!uc->writable && !uc->eof)
            return;
        if (getsockopt(uc->ev.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err == 0 && !uc->writable)
            return;
        if (err) {
            proxy_next(px, NEXT_ERROR, err, "connect() failed");
            return;
        }
        uc->connecting = 0;
        proxy_arm(px);
    }
    if (!px->req_sent && uc->writable &&
        (!px->wait_body || px->hdr_sent < px->hdr_len ||
         px->opos < px->olen)) {
        if (proxy_send(px) == PX_DONE)
            return;
        if (px->uc != uc) /* failed over to another server */
            return;
    }
    if (uc->readable && !px->paused)
        proxy_read(px);
}

static void conn_event(fd_event_t *ev, uint32_t events)
{
    uconn_t *uc = (uconn_t *)ev;
    proxy_req_t *px;

    if (uc->ev.fd < 0)
        return; /* closed earlier in this turn */
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        uc->eof = 1;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        uc->readable = 1;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        uc->writable = 1;
    px = uc->px;
    if (px == NULL) {
        /* idle: the upstream closed it, or sent what nobody asked for */
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            conn_close(uc);
        return;
    }
    fd_log_conn_id = px->r->c->id;
    proxy_run(px);
    fd_log_conn_id = 0;
}

static void proxy_timeout(proxy_req_t *px)
{
    uconn_t *uc = px->uc;

    if (uc->connecting) {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT, "connect() timed out");
    } else if (px->rstate == RS_BODY) {
        fd_log_error(FD_LOG_ERR, ETIMEDOUT, "upstream \"%s\" server %s: "
                     "timed out reading the response body", px->up->name,
                     px->peer->name);
        peer_failed(px->peer);
        proxy_abort_response(px);
    } else if (px->req_sent) {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT,
                   "timed out reading the response header");
    } else if (px->wait_body) {
        fd_log_error(FD_LOG_INFO, 0, "client timed out sending the request "
                     "body");
        proxy_fail(px, 408);
    } else {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT,
                   "timed out sending the request");
    }
}

static void conn_timer(fd_timer_t *t)
{
    uconn_t *uc = (uconn_t *)((char *)t - offsetof(uconn_t, timer));

    if (uc->ev.fd < 0 || uc->deadline == 0)
        return;
    if (uc->deadline > fd_current_msec) {
        fd_timer_add(&uc->timer, uc->deadline - fd_current_msec);
        return;
    }
    if (uc->px == NULL) {
        conn_close(uc); /* keepalive_timeout */
        return;
    }
    fd_log_conn_id = uc->px->r->c->id;
    proxy_timeout(uc->px);
    fd_log_conn_id = 0;
}

/* --- the handler --- */

static int proxy_handler(fd_request_t *r)
{
    proxy_loc_conf_t *lc = fd_loc_conf(r->loc, &fd_proxy_module);
    upstream_t *up = lc->up;
    size_t words = (up->npeers + 63) / 64;
    proxy_req_t *px;
    int m = r->in.method_id;

    px = fd_pcalloc(r->pool, sizeof(*px) + words * sizeof(uint64_t));
    if (px == NULL)
        return 500;
    px->tried = (uint64_t *)(px + 1);
    px->r = r;
    px->lc = lc;
    px->up = up;
    px->idempotent = m == FD_HTTP_GET || m == FD_HTTP_HEAD ||
                     m == FD_HTTP_PUT || m == FD_HTTP_DELETE ||
                     m == FD_HTTP_OPTIONS;
    /* only WebSocket, only where the location allows it: any other token
     * (h2c above all) would open a tunnel past every location rule */
    px->upgrade = lc->websocket && r->in.conn_upgrade &&
                  r->in.version == 11 && m == FD_HTTP_GET &&
                  fd_str_caseeq_lit(r->in.upgrade, "websocket");
    px->has_body = r->in.chunked || r->in.content_length > 0;
    px->chunked_body = r->in.chunked;
    px->body_kept = px->has_body && !px->chunked_body &&
                    r->in.content_length <= BUF_SIZE;
    r->ctx = px;
    if (request_build(px) != FD_OK)
        return 500;
    if (up->balance == BALANCE_HASH)
        px->hash = request_hash(r, up);
    r->on_abort = proxy_abort;
    if (px->has_body)
        r->on_body = proxy_on_body;
    px->sync = 1;
    proxy_connect(px);
    px->sync = 0;
    return px->done ? px->rc : FD_AGAIN;
}

/* --- 7. tunnels ---------------------------------------------------------- */

typedef struct tside_s {
    fd_event_t ev;             /* first: epoll's data.ptr */
    tunnel_t *t;
    char *buf;                 /* read from the other side, to write here */
    size_t pos, len;
    unsigned readable:1;
    unsigned writable:1;
    unsigned eof:1;            /* this side sent its FIN */
    unsigned shut:1;           /* we shut this side's write half */
} tside_t;

struct tunnel_s {
    tside_t side[2];           /* 0: the client, 1: the upstream */
    fd_timer_t timer;
    fd_msec_t deadline;
    fd_msec_t idle;
    peer_t *peer;
    uint64_t conn_id;
    void *ipref;               /* the client's place in max_conns_per_ip */
    fd_posted_t free_post;
    unsigned started:1;
    unsigned closed:1;
    char mem[2][BUF_SIZE];
};

static void tunnel_event(fd_event_t *ev, uint32_t events);
static void tunnel_timer(fd_timer_t *t);
static void tunnel_run(tunnel_t *t);

static void tunnel_release(void *data)
{
    free(data);
}

/* Close both sides; the memory goes at the end of the turn (events). */
static void tunnel_free(tunnel_t *t)
{
    unsigned i;

    if (t->closed)
        return;
    t->closed = 1;
    fd_timer_del(&t->timer);
    for (i = 0; i < 2; i++) {
        if (t->side[i].ev.fd >= 0)
            close(t->side[i].ev.fd);
        t->side[i].ev.fd = -1;
    }
    if (t->peer)
        peer_active(t->peer, -1);
    if (t->started)
        fd_worker_hold(-1);
    fd_ip_release(t->ipref);
    t->ipref = NULL;
    t->free_post.handler = tunnel_release;
    t->free_post.data = t;
    fd_event_post(&t->free_post);
}

/*
 * The upstream answered 101: take its socket into a tunnel, send the 101
 * to the client, then take the client's socket out of the engine.
 */
static int tunnel_begin(proxy_req_t *px, fd_str_t upgrade)
{
    fd_request_t *r = px->r;
    uconn_t *uc = px->uc;
    tunnel_t *t;
    size_t left = px->ilast - px->ipos;
    unsigned i;

    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return proxy_fail(px, 500);
    for (i = 0; i < 2; i++) {
        t->side[i].ev.fd = -1;
        t->side[i].ev.handler = tunnel_event;
        t->side[i].t = t;
        t->side[i].buf = t->mem[i];
    }
    t->timer.handler = tunnel_timer;
    t->idle = px->lc->websocket_idle_timeout;
    t->conn_id = r->c->id;
    /* what the upstream sent after the 101 goes to the client first */
    if (left > BUF_SIZE)
        left = BUF_SIZE;
    memcpy(t->side[0].buf, px->ibuf + px->ipos, left);
    t->side[0].len = left;
    /* the upstream socket moves into the tunnel */
    t->side[1].ev.fd = uc->ev.fd;
    t->side[1].writable = uc->writable;
    t->side[1].readable = 1;
    uc->ev.fd = -1;
    if (fd_event_mod(&t->side[1].ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP |
                                         EPOLLET) < 0) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        t->peer = NULL;
        tunnel_free(t);
        return proxy_fail(px, 500);
    }
    /* the request keeps counting as active on the server until the end */
    t->peer = px->peer;
    px->peer = NULL;
    conn_release(px, 0);
    bufs_release(px); /* what ibuf held past the 101 is in the tunnel */
    px->tunnel = t;

    fd_http_header_add(r, fd_string("Upgrade"), upgrade);
    fd_http_header_add(r, fd_string("Connection"), fd_string("upgrade"));
    r->content_length = -1;
    if (fd_http_send_header(r) != FD_OK) {
        px->tunnel = NULL;
        tunnel_free(t);
        return proxy_abort_response(px);
    }
    return tunnel_detach(px) == PX_DONE ? PX_DONE : PX_WAIT;
}

static int tunnel_detach(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    tunnel_t *t = px->tunnel;
    size_t n = 0;
    int fd;

    fd = fd_http_detach(r, t->side[1].buf, BUF_SIZE, &n, &t->ipref);
    if (fd == FD_AGAIN) {
        px->paused = 1;
        r->on_drain = proxy_drain;
        return PX_WAIT;
    }
    if (fd < 0) {
        px->tunnel = NULL;
        tunnel_free(t);
        return proxy_abort_response(px);
    }
    /* r and px are gone now */
    t->side[1].len = n;
    t->side[0].ev.fd = fd;
    t->side[0].readable = 1;
    t->side[0].writable = 1;
    if (fd_event_add(&t->side[0].ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP |
                                         EPOLLET) < 0) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        tunnel_free(t);
        return PX_DONE;
    }
    t->started = 1;
    fd_worker_hold(1); /* a graceful stop waits for the tunnel */
    t->deadline = fd_current_msec + t->idle;
    fd_timer_add(&t->timer, t->idle);
    tunnel_run(t);
    return PX_DONE;
}

/* Move bytes from one side to the other: 1 moved some, 0 none, -1 error */
static int tunnel_pump(tside_t *from, tside_t *to)
{
    int moved = 0;

    for (;;) {
        if (to->pos < to->len) {
            ssize_t w;
            if (!to->writable)
                return moved;
            w = send(to->ev.fd, to->buf + to->pos, to->len - to->pos,
                     MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    to->writable = 0;
                    return moved;
                }
                return -1;
            }
            to->pos += (size_t)w;
            moved = 1;
            if (to->pos == to->len)
                to->pos = to->len = 0;
            continue;
        }
        if (from->eof) {
            if (!to->shut) {
                shutdown(to->ev.fd, SHUT_WR);
                to->shut = 1;
            }
            return moved;
        }
        if (!from->readable)
            return moved;
        {
            ssize_t n = recv(from->ev.fd, to->buf, BUF_SIZE, 0);
            if (n > 0) {
                to->len = (size_t)n;
                to->pos = 0;
                moved = 1;
                continue;
            }
            if (n == 0) {
                from->eof = 1;
                from->readable = 0;
                continue;
            }
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                from->readable = 0;
                return moved;
            }
            return -1;
        }
    }
}

static void tunnel_run(tunnel_t *t)
{
    int a, b;

    if (!t->started || t->closed)
        return;
    fd_log_conn_id = t->conn_id;
    a = tunnel_pump(&t->side[0], &t->side[1]);
    b = tunnel_pump(&t->side[1], &t->side[0]);
    if (a < 0 || b < 0) {
        fd_log_error(FD_LOG_INFO, errno, "tunnel closed on an error");
        tunnel_free(t);
    } else if (t->side[0].eof && t->side[1].eof && t->side[0].shut &&
               t->side[1].shut) {
        tunnel_free(t); /* both directions ended */
    } else if (a || b) {
        t->deadline = fd_current_msec + t->idle;
    }
    fd_log_conn_id = 0;
}

static void tunnel_event(fd_event_t *ev, uint32_t events)
{
    tside_t *s = (tside_t *)ev;

    if (s->ev.fd < 0)
        return;
    if (events & EPOLLERR) {
        tunnel_free(s->t);
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
        s->readable = 1;
    if (events & (EPOLLOUT | EPOLLHUP))
        s->writable = 1;
    tunnel_run(s->t);
}

static void tunnel_timer(fd_timer_t *tm)
{
    tunnel_t *t = (tunnel_t *)((char *)tm - offsetof(tunnel_t, timer));

    if (t->closed)
        return;
    if (t->deadline > fd_current_msec) {
        fd_timer_add(&t->timer, t->deadline - fd_current_msec);
        return;
    }
    fd_log_conn_id = t->conn_id;
    fd_log_error(FD_LOG_INFO, 0, "tunnel idle for %llums, closed",
                 (unsigned long long)t->idle);
    fd_log_conn_id = 0;
    tunnel_free(t);
}

/* --- 8. status and access-log variables ---------------------------------- */

static size_t label_escape(char *dst, size_t size, const char *src,
                           size_t max)
{
    size_t n = 0, i;

    for (i = 0; i < max && src[i] && n + 3 < size; i++) {
        if (src[i] == '"' || src[i] == '\\')
            dst[n++] = '\\';
        if (src[i] == '\n') {
            dst[n++] = '\\';
            dst[n++] = 'n';
            continue;
        }
        dst[n++] = src[i];
    }
    dst[n] = '\0';
    return n;
}

static void proxy_status(fd_status_t *st, const void *area, unsigned worker)
{
    const shm_area_t *a = area;
    char labels[256], u[80], s[112];
    unsigned i;

    if (a == NULL)
        return;
    for (i = 0; i < SHM_PEERS; i++) {
        const shm_peer_t *e = &a->peer[i];
        if (e->upstream[0] == '\0')
            continue;
        label_escape(u, sizeof(u), e->upstream, sizeof(e->upstream));
        label_escape(s, sizeof(s), e->server, sizeof(e->server));
        snprintf(labels, sizeof(labels), "upstream=\"%s\",server=\"%s\"", u,
                 s);
        if (worker != FD_STATUS_RETIRED) {
            fd_status_gauge(st, "upstream_healthy",
                            "1 while the server is taken, 0 while it is "
                            "down or failed", labels, e->healthy);
            fd_status_gauge(st, "upstream_active",
                            "Requests in progress on the server.", labels,
                            e->active);
        }
        fd_status_counter(st, "upstream_requests",
                          "Requests sent to the server (each try).", labels,
                          e->requests);
        fd_status_counter(st, "upstream_fails",
                          "Failed tries (errors, timeouts, bad responses).",
                          labels, e->fails);
        fd_status_counter(st, "upstream_responses",
                          "Response headers received from the server.",
                          labels, e->responses);
        fd_status_counter(st, "upstream_response_msec",
                          "Sum of the times to the response header, ms.",
                          labels, e->response_msec);
    }
}

/* Fold an exited worker's counters, matched by name (indexes may differ
 * between configurations). */
static void proxy_retire(void *retired_area, const void *area)
{
    shm_area_t *d = retired_area;
    const shm_area_t *a = area;
    unsigned i, j;

    for (i = 0; i < SHM_PEERS; i++) {
        const shm_peer_t *e = &a->peer[i];
        shm_peer_t *x = NULL;
        if (e->upstream[0] == '\0')
            continue;
        for (j = 0; j < SHM_PEERS; j++) {
            if (d->peer[j].upstream[0] == '\0') {
                if (x == NULL)
                    x = &d->peer[j];
                continue;
            }
            if (strncmp(d->peer[j].upstream, e->upstream,
                        sizeof(e->upstream)) == 0 &&
                strncmp(d->peer[j].server, e->server, sizeof(e->server)) ==
                    0) {
                x = &d->peer[j];
                break;
            }
        }
        if (x == NULL)
            continue; /* full: the oldest names keep their counts */
        if (x->upstream[0] == '\0') {
            memcpy(x->upstream, e->upstream, sizeof(x->upstream));
            memcpy(x->server, e->server, sizeof(x->server));
        }
        x->requests += e->requests;
        x->fails += e->fails;
        x->responses += e->responses;
        x->response_msec += e->response_msec;
    }
}

static proxy_req_t *request_px(fd_request_t *r)
{
    if (r == NULL || r->loc == NULL || r->loc->handler != &fd_proxy_module)
        return NULL;
    return r->ctx;
}

enum { TRY_ADDR, TRY_STATUS, TRY_TIME };

/* One value per server tried, ", " between them (nginx's form), as a C
 * string for the access log. */
static const char *tries_text(fd_request_t *r, int what)
{
    proxy_req_t *px = request_px(r);
    fd_sbuf_t sb;
    unsigned i;

    if (px == NULL || px->nlog == 0 ||
        fd_sbuf_init(&sb, r->pool, px->nlog * 24) != FD_OK)
        return NULL;
    for (i = 0; i < px->nlog; i++) {
        try_log_t *t = &px->log[i];
        if (i)
            fd_sbuf_add_lit(&sb, ", ");
        if (what == TRY_ADDR) {
            fd_sbuf_add(&sb, t->peer->name, strlen(t->peer->name));
        } else if (what == TRY_STATUS) {
            if (t->status)
                fd_sbuf_add_uint(&sb, (uint64_t)t->status);
            else
                fd_sbuf_addc(&sb, '-');
        } else {
            fd_sbuf_add_uint(&sb, t->msec / 1000);
            fd_sbuf_addc(&sb, '.');
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 1000 / 100));
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 100 / 10));
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 10));
        }
    }
    fd_sbuf_addc(&sb, '\0');
    return fd_sbuf_failed(&sb) ? NULL : sb.start;
}

const char *fd_proxy_upstream_addr(fd_request_t *r)
{
    return tries_text(r, TRY_ADDR);
}

const char *fd_proxy_upstream_status(fd_request_t *r)
{
    return tries_text(r, TRY_STATUS);
}

const char *fd_proxy_upstream_response_time(fd_request_t *r)
{
    return tries_text(r, TRY_TIME);
}

fd_module_t fd_proxy_module = {
    .name = "proxy",
    .directives = proxy_directives,
    .conf_size = sizeof(proxy_loc_conf_t),
    .init_conf = proxy_init_conf,
    .init_worker = proxy_init_worker,
    .handler = proxy_handler,
    .flags = FD_MODULE_STREAM_BODY,
    .methods = FD_METHODS_ANY, /* the backend decides, but TRACE/CONNECT */
    .section = "upstream",
    .section_directives = upstream_directives,
    .section_size = sizeof(upstream_t),
    .init_section = upstream_init_section,
    .shm_size = sizeof(shm_area_t),
    .status = proxy_status,
    .retire = proxy_retire,
};
