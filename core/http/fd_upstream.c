/*
 * Upstream groups: configuration ([upstream NAME] and the implicit groups
 * of pass = http://HOST:PORT), balancing, passive health, the keep-alive
 * pool and the status counters. See fd_upstream.h.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "fd_uring.h"
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_http_parse.h"
#include "fd_module.h"
#include "fd_status.h"
#include "fd_upstream.h"
#include "fd_realip.h"
#include "fd_var.h"

#define RING_POINTS 160       /* hash ring points per unit of weight */

/* --- configuration ------------------------------------------------------- */

static int set_hash_key(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *value);

static const fd_conf_enum_t balance_enums[] = {
    {"round_robin", FD_UPSTREAM_RR},
    {"least_conn", FD_UPSTREAM_LEAST_CONN},
    {"hash", FD_UPSTREAM_HASH},
    {NULL, 0}};

#define UP(f) offsetof(fd_upstream_t, f)

const fd_directive_t fd_upstream_directives[] = {
    {.name = "server", .type = FD_CONF_LIST, .offset = UP(server),
     .doc = "HOST:PORT or unix:/path [weight=N] [max_fails=N] "
            "[fail_timeout=T] [backup] [down] [resolve], repeatable. A host "
            "name is resolved at load time (every address becomes a "
            "server); with resolve it is resolved again and again through "
            "resolver (up to 16 addresses, each a server with these "
            "options), and a name that does not resolve yet at load is no "
            "error (the group answers 502 while it has no server). "
            "max_fails (1) failures within fail_timeout (10s) take the "
            "server out for fail_timeout; max_fails=0 never does, nor does "
            "it take out a group's only server (as nginx; health_check "
            "does). backup "
            "servers are used only when no other is available. h2: the "
            "server speaks HTTP/2 (prior knowledge, or TLS with ALPN h2 "
            "when a location passes here with https://): requests share "
            "a few connections as streams (h2_connections); every server "
            "of a group says h2, or none"},
    {.name = "balance", .type = FD_CONF_ENUM, .offset = UP(balance),
     .def = "round_robin", .enums = balance_enums,
     .doc = "round_robin (smooth, weighted), least_conn (fewest requests "
            "in progress per weight, per worker) or hash (consistent, on "
            "hash_key: losing a server moves only its share of keys)"},
    {.name = "hash_key", .type = FD_CONF_CUSTOM, .offset = UP(hash_key),
     .set = set_hash_key,
     .doc = "balance = hash: the key, text with $variables: $remote_addr "
            "(the default), $uri, $request_uri, $host, $http_NAME, "
            "$cookie_NAME, $arg_NAME or several (\"$host$uri\")"},
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
    {.name = "proxy_protocol", .type = FD_CONF_FLAG,
     .offset = UP(proxy_protocol), .def = "off",
     .doc = "on: each new connection to this group starts with a PROXY "
            "protocol header giving the client's address ($remote_addr) "
            "and the one it reached, before the first request (and before "
            "the TLS handshake to an https upstream). A connection then "
            "speaks for one client, so keepalive must stay 0"},
    {.name = "proxy_protocol_version", .type = FD_CONF_INT,
     .offset = UP(proxy_protocol_version), .def = "1", .min = 1, .max = 2,
     .doc = "1 (text) or 2 (binary) for proxy_protocol = on"},
    {.name = "health_check", .type = FD_CONF_STR,
     .offset = UP(health_check),
     .doc = "URI [interval=5s] [timeout=2s] [fails=1] [passes=1] "
            "[status=200-399] [port=N], or type=grpc [grpc_service=NAME] "
            "[grpc_status=N] and the same options: every interval, one "
            "GET of URI (on a connection of its own, to the server's "
            "address as its requests go: HTTP/2 when a location passes "
            "here with h2:// or grpc://, else HTTP/1.1; TLS when with "
            "https:// or grpcs://, a PROXY header with proxy_protocol; or "
            "plain to port=), or with type=grpc a gRPC health protocol "
            "Check (passes on SERVING, or on grpc-status grpc_status=), "
            "per server for the whole fastd, not per "
            "worker; fails= failed probes in a row take the server out of "
            "the group for every worker, passes= passed ones bring it "
            "back. Unlike passive health (max_fails), it takes out a "
            "group's only server too: its requests then get 502. The state "
            "outlives a reload. Example: health_check = /healthz "
            "interval=2s fails=3 passes=2"},
    {.name = "resolver", .type = FD_CONF_LIST, .offset = UP(resolver),
     .doc = "IP or IP:PORT (53) of a DNS server for this group's server "
            "= NAME:PORT resolve lines, repeatable (tried in turn). One "
            "query per name for the whole fastd, not per worker; it never "
            "blocks a worker"},
    {.name = "resolver_timeout", .type = FD_CONF_MSEC,
     .offset = UP(resolver_timeout), .def = "5s", .min = 100,
     .max = 60000,
     .doc = "how long a DNS server has to answer before the next one is "
            "asked (or, after the last, the query fails: the addresses "
            "stay as they were)"},
    {.name = "resolve_interval", .type = FD_CONF_MSEC,
     .offset = UP(resolve_interval), .def = "0", .max = 86400000,
     .doc = "how often a resolve name is queried again: 0 (the default) "
            "follows the answer's TTL, at least 1s and at most 5m; another "
            "value (1s at least) overrides the TTL. A failed query is "
            "retried after 1s to 5s; until one succeeds the last good "
            "addresses stay"},
    {.name = "h2_connections", .type = FD_CONF_INT,
     .offset = UP(h2_connections), .def = "4", .min = 1, .max = 64,
     .doc = "HTTP/2 upstreams (server = HOST:PORT h2, pass = h2:// or "
            "grpc://): the connections each worker may open to one server. "
            "Requests share them as concurrent streams, up to the server's "
            "MAX_CONCURRENT_STREAMS each; a new connection opens only when "
            "those are full, and past this bound requests queue on the "
            "least busy one"},
    {.name = "h2_ping_interval", .type = FD_CONF_MSEC,
     .offset = UP(h2_ping_interval), .def = "30s", .min = 1000,
     .max = 3600000,
     .doc = "HTTP/2 upstreams: an idle connection sends a PING this often "
            "and is closed when the server does not answer it by the next; "
            "an idle connection is closed after keepalive_timeout (0: kept "
            "while the server answers)"},
    FD_CONF_END};

static fd_upstream_shm_t *shm; /* this worker's status area */
static fd_upstream_t **groups;  /* this worker's groups (health status) */
static unsigned ngroups;

static fd_upstream_shm_peer_t *peer_shm(fd_upstream_peer_t *p)
{
    return shm && p->shm >= 0 ? &shm->peer[p->shm] : NULL;
}

uint32_t fd_upstream_request_hash(fd_request_t *r, const fd_upstream_t *up)
{
    char tmp[FD_VAR_TMP];
    fd_str_t v;
    fd_sbuf_t sb;

    if (up->key.n == 1) { /* one variable: no copy */
        v = fd_var_value(r, &up->key.ops[0], NULL, tmp);
        return fd_upstream_hash(v.data ? v.data : "", v.len);
    }
    if (fd_sbuf_init(&sb, r->pool, 128) != FD_OK)
        return 0;
    fd_var_eval(r, &up->key, NULL, FD_VAR_ESC_NONE, &sb);
    return fd_sbuf_failed(&sb) ? 0 : fd_upstream_hash(sb.start,
                                                      fd_sbuf_len(&sb));
}

uint32_t fd_upstream_hash(const void *data, size_t n)
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

/* resolver = IP[:PORT] or [IPv6]:PORT, into "IP:PORT,..." for c-ares */
static int parse_resolvers(fd_conf_t *cf, fd_upstream_t *up)
{
    char csv[8 * (INET6_ADDRSTRLEN + 9)];
    size_t len = 0;
    int line = cf->line;
    unsigned i;

    if (up->resolver.n == 0)
        return FD_OK;
    if (up->resolver.n > 8) {
        cf->line = key_line(cf, "resolver", 8);
        return fd_conf_error(cf, "more than 8 \"resolver\" lines");
    }
    for (i = 0; i < up->resolver.n; i++) {
        const char *v = up->resolver.items[i], *port = NULL, *end;
        char host[INET6_ADDRSTRLEN + 1];
        unsigned char bin[16];
        size_t hl;
        int v6;

        cf->line = key_line(cf, "resolver", i);
        if (v[0] == '[') {
            end = strchr(v, ']');
            if (end == NULL || (end[1] != '\0' && end[1] != ':'))
                goto bad;
            hl = (size_t)(end - v - 1);
            v++;
            port = end[1] == ':' ? end + 2 : NULL;
            v6 = 1;
        } else {
            end = strchr(v, ':');
            if (end && strchr(end + 1, ':'))
                end = NULL; /* a bare IPv6 address, no port */
            hl = end ? (size_t)(end - v) : strlen(v);
            port = end ? end + 1 : NULL;
            v6 = strchr(v, ':') != NULL && end == NULL;
        }
        if (hl == 0 || hl >= sizeof(host))
            goto bad;
        memcpy(host, v, hl);
        host[hl] = '\0';
        if (inet_pton(v6 ? AF_INET6 : AF_INET, host, bin) != 1)
            goto bad;
        if (port && (*port == '\0' ||
                     strspn(port, "0123456789") != strlen(port) ||
                     atoi(port) < 1 || atoi(port) > 65535))
            goto bad;
        len += (size_t)snprintf(csv + len, sizeof(csv) - len, "%s%s%s%s:%s",
                                i ? "," : "", v6 ? "[" : "", host,
                                v6 ? "]" : "", port ? port : "53");
    }
    if ((up->resolvers = fd_pstrdup(cf->pool, csv, len)) == NULL)
        return fd_conf_error(cf, "out of memory");
    cf->line = line;
    return FD_OK;
bad:
    return fd_conf_error(cf, "bad \"resolver\" \"%s\" (an IP address, "
                         "IP:PORT or [IPv6]:PORT: a resolver is not looked "
                         "up by name)", up->resolver.items[i]);
}

static fd_upstream_peer_t *peer_add(fd_conf_t *cf, fd_upstream_t *up)
{
    fd_upstream_peer_t *np = fd_pcalloc(cf->pool, (up->npeers + 1) *
                                                      sizeof(*np));

    if (np == NULL)
        return NULL;
    if (up->npeers)
        memcpy(np, up->peers, up->npeers * sizeof(fd_upstream_peer_t));
    up->peers = np;
    np[up->npeers].index = up->npeers;
    np[up->npeers].up = up;
    np[up->npeers].shm = -1;
    np[up->npeers].health = -1;
    return &np[up->npeers++];
}

/*
 * Resolve "HOST[:PORT]" or "unix:/path" into servers of up with the given
 * options; HOST may be a name (every address it has is a server). With
 * resolve, HOST is a name whose addresses change (fd_upstream_resolve.c).
 */
static int resolve_servers(fd_conf_t *cf, fd_upstream_t *up,
                           const char *addr, const fd_upstream_peer_t *opt,
                           int resolve)
{
    char host[256];
    const char *port = "80", *colon;
    struct addrinfo hints, *res, *ai;
    unsigned first = up->npeers;
    int rc;

    if (resolve && strncmp(addr, "unix:", 5) == 0)
        return fd_conf_error(cf, "\"%s\": resolve needs a host name, not "
                             "a unix socket", addr);
    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un *sun;
        fd_upstream_peer_t *p;
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
    if (resolve) {
        unsigned char bin[16];
        if (inet_pton(AF_INET, host, bin) == 1 ||
            inet_pton(AF_INET6, host, bin) == 1)
            return fd_conf_error(cf, "\"%s\": resolve needs a host name, "
                                 "not an address", addr);
        if (up->resolvers == NULL)
            return fd_conf_error(cf, "\"%s\" resolve needs a \"resolver\" "
                                 "in [upstream %s] (resolver = IP[:PORT])",
                                 addr, up->name);
        for (unsigned i = 0; i < FD_UPSTREAM_RESOLVE_MAX; i++)
            if (peer_add(cf, up) == NULL)
                return fd_conf_error(cf, "out of memory");
        if (fd_upstream_resolve_add(cf, up, host, (unsigned)atoi(port),
                                    first) != FD_OK)
            return FD_ERROR;
        goto options;
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return fd_conf_error(cf, "host not found in \"%s\": %s", addr,
                             gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
        fd_upstream_peer_t *p;
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
        fd_upstream_peer_t *p = &up->peers[i];
        p->weight = opt->weight;
        p->max_fails = opt->max_fails;
        p->fail_timeout = opt->fail_timeout;
        p->backup = opt->backup;
        p->down = opt->down;
    }
    return FD_OK;
}

/* One server option (weight=, max_fails=, fail_timeout=, backup, down);
 * the pass shorthand takes only the failure ones. */
static int server_option(fd_conf_t *cf, const char *tok,
                         fd_upstream_peer_t *opt, int shorthand)
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
                             "max_fails=, fail_timeout=, backup, down, "
                             "resolve, h2)", tok);
    }
    return FD_OK;
}

static int parse_server(fd_conf_t *cf, fd_upstream_t *up, const char *text)
{
    char *s = fd_pstrdup(cf->pool, text, strlen(text)), *save, *tok, *addr;
    fd_upstream_peer_t opt = {.weight = 1, .max_fails = 1,
                              .fail_timeout = 10000};
    int resolve = 0, h2 = 0;

    addr = strtok_r(s, " \t", &save);
    if (addr == NULL)
        return fd_conf_error(cf, "\"server\" needs an address");
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
        if (strcmp(tok, "resolve") == 0)
            resolve = 1;
        else if (strcmp(tok, "h2") == 0)
            h2 = 1;
        else if (server_option(cf, tok, &opt, 0) != FD_OK)
            return FD_ERROR;
    }
    /* one protocol per group: a request is mapped before a server is
     * picked, and a retry may go to any of them */
    if (up->npeers && h2 != up->h2)
        return fd_conf_error(cf, "[upstream %s]: every \"server\" says h2, "
                             "or none", up->name);
    up->h2 = h2;
    return resolve_servers(cf, up, addr, &opt, resolve);
}

/* A group whose only server failed has nowhere else to send a request:
 * as nginx, such a server is never taken out (its failures still count
 * in the status figures). */
static void upstream_finish(fd_upstream_t *up)
{
    if (up->npeers == 1)
        up->peers[0].max_fails = 0;
    fd_upstream_count_live(up);
}

/* nlive, and nscan: the balancers look at peers[0 .. nscan), past the
 * empty resolve slots at the end (most of a name's 16 are) */
void fd_upstream_count_live(fd_upstream_t *up)
{
    unsigned i;

    up->nlive = up->nscan = 0;
    for (i = 0; i < up->npeers; i++) {
        if (up->peers[i].absent)
            continue;
        up->nlive++;
        up->nscan = i + 1;
    }
}

static int ring_cmp(const void *a, const void *b)
{
    uint32_t x = ((const fd_upstream_point_t *)a)->point;
    uint32_t y = ((const fd_upstream_point_t *)b)->point;

    return x < y ? -1 : x > y;
}

/*
 * Consistent hashing: every primary server owns RING_POINTS points per
 * unit of weight, placed by hashing its name; a key goes to the owner of
 * the first point at or after the key's hash. The points of the other
 * servers do not depend on a server being there, so removing one moves
 * only the keys it owned.
 */
static unsigned ring_points(const fd_upstream_t *up)
{
    unsigned i, n = 0;

    for (i = 0; i < up->npeers; i++)
        if (!up->peers[i].backup && !up->peers[i].absent)
            n += RING_POINTS * (unsigned)fd_min(up->peers[i].weight, 100);
    return n;
}

/* A resolved server's points hash its address, as a fixed one's: the
 * keys of the addresses that stay do not move when another one goes. */
static void ring_fill(fd_upstream_t *up, fd_upstream_point_t *ring)
{
    unsigned i, k;
    char buf[128];

    up->ring = ring;
    up->nring = 0;
    for (i = 0; i < up->npeers; i++) {
        fd_upstream_peer_t *p = &up->peers[i];
        unsigned pts = RING_POINTS * (unsigned)fd_min(p->weight, 100);
        if (p->backup || p->absent)
            continue;
        for (k = 0; k < pts; k++) {
            int len = snprintf(buf, sizeof(buf), "%s-%u", p->name, k);
            up->ring[up->nring].point = fd_upstream_hash(buf, (size_t)len);
            up->ring[up->nring].peer = p;
            up->nring++;
        }
    }
    qsort(up->ring, up->nring, sizeof(fd_upstream_point_t), ring_cmp);
}

static int ring_build(fd_conf_t *cf, fd_upstream_t *up)
{
    unsigned n = ring_points(up);
    fd_upstream_point_t *ring = fd_palloc(cf->pool, (n ? n : 1) *
                                                        sizeof(*ring));

    if (ring == NULL)
        return fd_conf_error(cf, "out of memory");
    ring_fill(up, ring);
    return FD_OK;
}

int fd_upstream_ring_update(fd_upstream_t *up)
{
    unsigned n = ring_points(up);
    fd_upstream_point_t *ring;

    if (up->balance != FD_UPSTREAM_HASH)
        return FD_OK;
    if ((ring = malloc((n ? n : 1) * sizeof(*ring))) == NULL)
        return FD_ERROR;
    if (up->ring_own)
        free(up->ring);
    ring_fill(up, ring);
    up->ring_own = 1;
    return FD_OK;
}

int fd_upstream_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    fd_upstream_t *up = conf;
    int line = cf->line;
    unsigned i;

    up->name = (char *)name;
    up->file = cf->file;
    up->line = cf->line;
    if (up->server.n == 0)
        return fd_conf_error(cf, "[upstream %s] has no \"server\"", name);
    if (parse_resolvers(cf, up) != FD_OK)
        return FD_ERROR;
    for (i = 0; i < up->server.n; i++) {
        cf->line = key_line(cf, "server", i);
        if (parse_server(cf, up, up->server.items[i]) != FD_OK)
            return FD_ERROR;
    }
    cf->line = line;
    if (up->hash_key && up->balance != FD_UPSTREAM_HASH)
        return fd_conf_error(cf, "[upstream %s]: hash_key needs balance = "
                             "hash", name);
    if (up->hash_key == NULL &&
        fd_var_compile(cf, &up->key, "$remote_addr", 12, 0, "hash_key"))
        return FD_ERROR;
    for (i = 0; i < up->npeers && up->peers[i].backup; i++)
        ;
    if (i == up->npeers)
        return fd_conf_error(cf, "[upstream %s]: every server is a backup",
                             name);
    if (up->proxy_protocol && up->keepalive > 0) {
        cf->line = key_line(cf, "keepalive", 0);
        return fd_conf_error(cf, "[upstream %s]: keepalive with "
                             "proxy_protocol = on: a connection's PROXY "
                             "header names one client, and a kept "
                             "connection would carry another's requests",
                             name);
    }
    if (up->balance == FD_UPSTREAM_HASH && ring_build(cf, up) != FD_OK)
        return FD_ERROR;
    upstream_finish(up);
    if (up->health_check) {
        cf->line = key_line(cf, "health_check", 0);
        if (fd_upstream_health_parse(cf, up, up->health_check) != FD_OK ||
            fd_upstream_health_bind(cf, up) != FD_OK)
            return FD_ERROR;
        cf->line = line;
    }
    return FD_OK;
}

/* hash_key: a script of the registry ("$host$uri", "$cookie_sid", ...),
 * compiled here, evaluated per request by the proxy */
static int set_hash_key(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *v)
{
    fd_upstream_t *up = conf;

    (void)d;
    if (*v == '\0')
        return fd_conf_error(cf, "\"hash_key\" needs a value, e.g. "
                             "$remote_addr");
    if (fd_var_compile(cf, &up->key, v, strlen(v), 0, "hash_key") != FD_OK)
        return FD_ERROR;
    up->hash_key = fd_pstrdup(cf->pool, v, strlen(v));
    return FD_OK;
}

/* pass = http://HOST:PORT[/uri] [max_fails=N] [fail_timeout=T]: a group of
 * its own per address and options, shared by the locations naming both */
fd_upstream_t *fd_upstream_implicit(fd_conf_t *cf, const char *hostport,
                                    const char *opts)
{
    fd_upstream_t *up;
    fd_upstream_peer_t opt = {.weight = 1, .max_fails = 1,
                              .fail_timeout = 10000};
    char *s = fd_pstrdup(cf->pool, opts, strlen(opts)), *save, *tok;

    /* the cycle's list: a reload's new groups are not the old ones */
    for (up = cf->cycle->upstream_implicit; up; up = up->next_implicit)
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
    if (fd_conf_defaults(cf, fd_upstream_directives, up) != FD_OK)
        return NULL;
    up->name = fd_pstrdup(cf->pool, hostport, strlen(hostport));
    up->implicit_opts = fd_pstrdup(cf->pool, opts, strlen(opts));
    up->file = cf->file;
    up->line = cf->line;
    if (resolve_servers(cf, up, hostport, &opt, 0) != FD_OK)
        return NULL;
    upstream_finish(up);
    up->next_implicit = cf->cycle->upstream_implicit;
    cf->cycle->upstream_implicit = up;
    return up;
}

/* --- balancing ----------------------------------------------------------- */

/* The peers a balancer looks at: up to the last with an address (a group
 * made without upstream_finish(), nscan 0: all of them). */
static inline unsigned scan_end(const fd_upstream_t *up)
{
    return up->nscan ? up->nscan : up->npeers;
}

/* A resolving group down to one address never takes it out either. */
static int peer_max_fails(const fd_upstream_peer_t *p)
{
    return p->up->nlive == 1 ? 0 : (int)p->max_fails;
}

int fd_upstream_peer_usable(const fd_upstream_peer_t *p)
{
    if (p->down || p->absent || !fd_upstream_health_ok(p))
        return 0;
    if (peer_max_fails(p) && p->fails >= (unsigned)p->max_fails &&
        fd_current_msec - p->checked <= p->fail_timeout)
        return 0;
    return 1;
}

static int candidate(const uint64_t *tried, const fd_upstream_peer_t *p,
                     int backup)
{
    return (int)p->backup == backup && !fd_upstream_tried(tried, p) &&
           fd_upstream_peer_usable(p);
}

/* Smooth weighted round robin (nginx's): over the candidates, raise each
 * current weight by its weight, take the highest, lower it by the total. */
static fd_upstream_peer_t *pick_rr(fd_upstream_t *up, const uint64_t *tried,
                                   int backup, int least)
{
    fd_upstream_peer_t *best = NULL;
    int64_t total = 0;
    unsigned i;
    uint64_t min_a = 0, min_w = 1;

    if (least) {
        /* fewest active per weight; ties go round robin */
        int any = 0;
        for (i = 0; i < scan_end(up); i++) {
            fd_upstream_peer_t *p = &up->peers[i];
            if (!candidate(tried, p, backup))
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
    for (i = 0; i < scan_end(up); i++) {
        fd_upstream_peer_t *p = &up->peers[i];
        if (!candidate(tried, p, backup))
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

static fd_upstream_peer_t *pick_hash(fd_upstream_t *up, const uint64_t *tried,
                                     uint32_t hash)
{
    unsigned lo = 0, hi = up->nring, i;

    if (up->nring == 0)
        return NULL;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (up->ring[mid].point < hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* the owner, or walking on (clockwise) the next usable server */
    for (i = 0; i < up->nring; i++) {
        fd_upstream_peer_t *p = up->ring[(lo + i) % up->nring].peer;
        if (candidate(tried, p, 0))
            return p;
    }
    return NULL;
}

fd_upstream_peer_t *fd_upstream_pick(fd_upstream_t *up, const uint64_t *tried,
                                     uint32_t hash)
{
    fd_upstream_peer_t *p;

    if (up->resolve)
        fd_upstream_resolve_sync(up);
    switch (up->balance) {
    case FD_UPSTREAM_HASH:
        p = pick_hash(up, tried, hash);
        break;
    case FD_UPSTREAM_LEAST_CONN:
        p = pick_rr(up, tried, 0, 1);
        break;
    default:
        p = pick_rr(up, tried, 0, 0);
    }
    if (p == NULL) /* backups only when no primary can be used */
        p = pick_rr(up, tried, 1, up->balance == FD_UPSTREAM_LEAST_CONN);
    return p;
}

int fd_upstream_has_candidate(const fd_upstream_t *up, const uint64_t *tried)
{
    unsigned i;

    for (i = 0; i < scan_end(up); i++)
        if (!fd_upstream_tried(tried, &up->peers[i]) &&
            fd_upstream_peer_usable(&up->peers[i]))
            return 1;
    return 0;
}

/* --- passive health and counters ----------------------------------------- */

/* max_fails failures within fail_timeout of each other take the server
 * out until fail_timeout after the last one. */
void fd_upstream_peer_failed(fd_upstream_peer_t *p)
{
    fd_upstream_shm_peer_t *s = peer_shm(p);

    if (s)
        s->fails++;
    if (peer_max_fails(p) == 0)
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

void fd_upstream_peer_ok(fd_upstream_peer_t *p)
{
    fd_upstream_shm_peer_t *s = peer_shm(p);

    p->fails = 0;
    if (s)
        s->healthy = 1;
}

static void peer_active(fd_upstream_peer_t *p, int d)
{
    fd_upstream_shm_peer_t *s = peer_shm(p);

    p->active += (unsigned)d;
    if (s)
        s->active += (uint64_t)(int64_t)d;
}

void fd_upstream_peer_acquire(fd_upstream_peer_t *p)
{
    fd_upstream_shm_peer_t *s = peer_shm(p);

    peer_active(p, 1);
    if (s)
        s->requests++;
}

void fd_upstream_peer_release(fd_upstream_peer_t *p)
{
    peer_active(p, -1);
}

void fd_upstream_peer_response(fd_upstream_peer_t *p, fd_msec_t msec)
{
    fd_upstream_shm_peer_t *s = peer_shm(p);

    if (s) {
        s->responses++;
        s->response_msec += msec;
    }
}

/* --- connections and the keep-alive pool --------------------------------- */

/* Closed connections wait one loop turn before their memory is reused: an
 * event for them may still be in the batch epoll_wait returned. */
static fd_upstream_conn_t *conn_free_list, *conn_zombies;
static int zombies_posted;

static void zombies_free(void *data)
{
    (void)data;
    zombies_posted = 0;
    while (conn_zombies) {
        fd_upstream_conn_t *uc = conn_zombies;
        conn_zombies = uc->lnext;
        uc->lnext = conn_free_list;
        conn_free_list = uc;
    }
}

static fd_posted_t zombie_post = {.handler = zombies_free};

static void conn_event(fd_event_t *ev, uint32_t events)
{
    fd_upstream_conn_t *uc = (fd_upstream_conn_t *)ev;

    if (uc->s.ev.fd < 0)
        return; /* closed earlier in this turn */
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        uc->s.eof = 1;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        uc->s.readable = 1;
    if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        uc->s.writable = 1;
    if (uc->data == NULL) {
        /* idle: the upstream closed it, or sent what nobody asked for */
        if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            fd_upstream_conn_close(uc);
        return;
    }
    uc->on_event(uc);
}

static void conn_timer(fd_timer_t *t)
{
    fd_upstream_conn_t *uc = (fd_upstream_conn_t *)((char *)t -
                                                    offsetof(fd_upstream_conn_t,
                                                             s.timer));
    int32_t left;

    if (uc->s.ev.fd < 0 || uc->s.deadline == 0)
        return;
    left = fd_msec32_diff(uc->s.deadline, (uint32_t)fd_current_msec);
    if (left > 0) {
        fd_timer_add(&uc->s.timer, (fd_msec_t)left);
        return;
    }
    if (uc->data == NULL) {
        fd_upstream_conn_close(uc); /* keepalive_timeout */
        return;
    }
    uc->on_timeout(uc);
}

static fd_upstream_conn_t *conn_alloc(void)
{
    fd_upstream_conn_t *uc = conn_free_list;

    if (uc)
        conn_free_list = uc->lnext;
    else if ((uc = malloc(sizeof(*uc))) == NULL)
        return NULL;
    memset(uc, 0, sizeof(*uc));
    uc->s.ev.fd = -1;
    uc->s.tp = &fd_transport_tcp;
    uc->s.et = 1;
    uc->s.ev.handler = conn_event;
    uc->s.timer.handler = conn_timer;
    return uc;
}

static void idle_unlink(fd_upstream_conn_t *uc)
{
    fd_upstream_peer_t *p = uc->peer;
    fd_upstream_t *up = p->up;

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

int fd_upstream_conn_connected(fd_upstream_conn_t *uc, int *err)
{
    socklen_t len = sizeof(*err);

    *err = 0;
    if (!uc->s.writable && !uc->s.eof)
        return FD_AGAIN;
    if (getsockopt(uc->s.ev.fd, SOL_SOCKET, SO_ERROR, err, &len) < 0)
        *err = errno;
    if (*err)
        return FD_ERROR;
    if (!uc->s.writable)
        return FD_AGAIN;
    uc->connecting = 0;
    return FD_OK;
}

void fd_upstream_conn_close(fd_upstream_conn_t *uc)
{
    if (uc->idle)
        idle_unlink(uc);
    fd_timer_del(&uc->s.timer);
    if (uc->s.ev.fd >= 0) {
        fd_stream_close_transport(&uc->s); /* TLS: close_notify, free */
        fd_event_close(&uc->s.ev);
    }
    uc->s.ev.fd = -1;
    uc->data = NULL;
    uc->lnext = conn_zombies;
    conn_zombies = uc;
    if (!zombies_posted) {
        zombies_posted = 1;
        fd_event_post(&zombie_post);
    }
}

/* Lazy (fd_stream_set_deadline): the timer re-arms when early. */
void fd_upstream_conn_deadline(fd_upstream_conn_t *uc, fd_msec_t ms)
{
    fd_stream_set_deadline(&uc->s, ms);
}

void fd_upstream_keepalive_close_peer(fd_upstream_peer_t *p)
{
    while (p->idle)
        fd_upstream_conn_close(p->idle);
}

void fd_upstream_keepalive_put(fd_upstream_conn_t *uc)
{
    fd_upstream_peer_t *p = uc->peer;
    fd_upstream_t *up = p->up;

    uc->data = NULL;
    uc->s.deadline = 0;
    /* a resolved address that went away drains: what is in flight
     * finishes, and its connections close instead of waiting idle */
    if (up->keepalive == 0 || uc->s.eof || fd_worker->quitting ||
        uc->requests >= (unsigned)up->keepalive_requests || p->absent ||
        uc->peer_gen != p->gen) {
        fd_upstream_conn_close(uc);
        return;
    }
    if (up->nidle >= (unsigned)up->keepalive)
        fd_upstream_conn_close(up->lru_tail);
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
    if (uc->s.tp->idle)
        uc->s.tp->idle(&uc->s); /* TLS: its buffers go back */
    fd_upstream_conn_deadline(uc, up->keepalive_timeout);
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
fd_upstream_conn_t *fd_upstream_keepalive_get(fd_upstream_peer_t *p,
                                              const void *key, int careful)
{
    fd_upstream_conn_t *uc, *next;
    char ch;

    for (uc = p->idle; uc; uc = next) {
        ssize_t n = -1;
        next = uc->pnext;
        if (uc->key != key)
            continue;
        idle_unlink(uc);
        errno = EAGAIN;
        if (fd_event_uring && fd_uring_pending(&uc->s.ev))
            n = 0; /* the ring holds its end, or bytes nobody asked for */
        else if (careful || fd_current_msec - uc->idle_since >= 1000)
            n = recv(uc->s.ev.fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            uc->reused = 1;
            uc->s.deadline = 0;
            uc->s.readable = 0;
            return uc;
        }
        fd_upstream_conn_close(uc);
    }
    return NULL;
}

int fd_upstream_proxy_protocol(fd_upstream_conn_t *uc, const fd_addr_t *src,
                               const fd_addr_t *dst)
{
    fd_upstream_t *up = uc->peer->up;
    uint8_t buf[FD_PROXY_PROTOCOL_V1_MAX + 1];
    size_t n;
    ssize_t k;

    if (!up->proxy_protocol || uc->pp_sent || uc->reused)
        return FD_OK;
    n = fd_proxy_protocol_write(buf, sizeof(buf),
                                (int)up->proxy_protocol_version, src, dst);
    /* a new connection's send buffer is empty: it takes these ~100 bytes
     * whole, or the connection is broken */
    k = send(uc->s.ev.fd, buf, n, MSG_NOSIGNAL);
    if (k != (ssize_t)n) {
        if (k >= 0)
            errno = EAGAIN;
        return FD_ERROR;
    }
    uc->pp_sent = 1;
    return FD_OK;
}

fd_upstream_conn_t *fd_upstream_conn_add(fd_upstream_peer_t *p, int fd,
                                         int connecting)
{
    fd_upstream_conn_t *uc = conn_alloc();
    int err;

    if (uc == NULL) {
        close(fd);
        errno = ENOMEM;
        return NULL;
    }
    uc->s.ev.fd = fd;
    uc->s.ev.stream = 1;
    uc->peer = p;
    uc->peer_gen = p->gen;
    uc->connecting = connecting != 0;
    uc->s.writable = !connecting;
    if (fd_event_add(&uc->s.ev,
                     EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) < 0) {
        err = errno;
        fd_upstream_conn_close(uc);
        errno = err;
        return NULL;
    }
    return uc;
}

fd_upstream_conn_t *fd_upstream_conn_open(fd_upstream_peer_t *p)
{
    int fd, err, one = 1, connecting = 0;

    fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0)
        return NULL;
    if (p->sa.ss_family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)&p->sa, p->salen) < 0) {
        if (errno != EINPROGRESS) {
            err = errno == EAGAIN ? ECONNREFUSED : errno; /* unix: backlog */
            close(fd);
            errno = err;
            return NULL;
        }
        connecting = 1;
    }
    return fd_upstream_conn_add(p, fd, connecting);
}

/* --- status -------------------------------------------------------------- */

static void shm_name(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size) /* keep the end: ports and socket names differ there */
        src += n - (size - 1);
    snprintf(dst, size, "%s", src);
}

void fd_upstream_init_worker(fd_upstream_t **ups, unsigned n,
                             fd_upstream_shm_t *area)
{
    unsigned i, k, slot = 0, fixed = 0, nfixed = 0;

    shm = area;
    if (shm)
        memset(shm, 0, sizeof(*shm));
    free(groups);
    groups = NULL;
    ngroups = 0;
    if (n && (groups = malloc(n * sizeof(*groups))) != NULL) {
        memcpy(groups, ups, n * sizeof(*groups));
        ngroups = n;
    }
    fd_upstream_health_start(ups, n);
    /* Fixed servers first: a resolve name's 16 slots, mostly empty, take
     * what is left. The slots go in configuration order, which /status
     * keeps. */
    for (i = 0; i < n; i++)
        for (k = 0; k < ups[i]->npeers; k++)
            nfixed += ups[i]->peers[k].resolve == NULL;
    nfixed = fd_min(nfixed, FD_UPSTREAM_SHM_PEERS);
    for (i = 0; i < n; i++) {
        for (k = 0; k < ups[i]->npeers; k++) {
            fd_upstream_peer_t *p = &ups[i]->peers[k];
            p->shm = -1;
            if (shm == NULL || slot == FD_UPSTREAM_SHM_PEERS)
                continue;
            if (p->resolve == NULL) {
                if (fixed == nfixed)
                    continue;
                fixed++;
            } else if (slot - fixed == FD_UPSTREAM_SHM_PEERS - nfixed) {
                continue; /* what the fixed ones left is taken */
            }
            p->shm = (int)slot++;
            if (p->absent)
                continue; /* named when it gets an address */
            shm_name(shm->peer[p->shm].upstream,
                     sizeof(shm->peer[0].upstream), ups[i]->name);
            shm_name(shm->peer[p->shm].server,
                     sizeof(shm->peer[0].server), p->name);
            shm->peer[p->shm].healthy = !p->down;
        }
    }
    if (slot == FD_UPSTREAM_SHM_PEERS && n)
        fd_log_error(FD_LOG_INFO, 0, "upstream: status counters for the first "
                     "%d servers only", FD_UPSTREAM_SHM_PEERS);
    fd_upstream_resolve_start(ups, n);
}

/* A resolve slot's entry now counts for its new address (a new series:
 * the old address's figures are not carried over to another server), or
 * shows it gone. */
void fd_upstream_peer_renamed(fd_upstream_peer_t *p)
{
    fd_upstream_shm_peer_t *s = peer_shm(p);

    if (s == NULL)
        return;
    if (p->absent) { /* gone: its figures stay until the slot is reused */
        s->healthy = 0;
        return;
    }
    memset(s, 0, sizeof(*s));
    shm_name(s->upstream, sizeof(s->upstream), p->up->name);
    shm_name(s->server, sizeof(s->server), p->name);
    s->healthy = !p->down;
    s->active = p->active;
}

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

void fd_upstream_status_labels(char *dst, size_t size, const char *up,
                               const char *server)
{
    char u[80], s[112];

    label_escape(u, sizeof(u), up, strlen(up));
    label_escape(s, sizeof(s), server, strlen(server));
    snprintf(dst, size, "upstream=\"%s\",server=\"%s\"", u, s);
}

/* The health and resolve tables are every worker's: their figures, in
 * this worker's configuration order. */
void fd_upstream_status_shared(fd_status_t *st)
{
    fd_upstream_health_status(st, groups, ngroups);
    fd_upstream_resolve_status(st, groups, ngroups);
}

void fd_upstream_status(fd_status_t *st, const void *area, unsigned worker)
{
    const fd_upstream_shm_t *a = area;
    char labels[256], u[80], s[112];
    unsigned i;

    if (a == NULL)
        return;
    for (i = 0; i < FD_UPSTREAM_SHM_PEERS; i++) {
        const fd_upstream_shm_peer_t *e = &a->peer[i];
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
                          "Time to the response header, summed over the "
                          "responses.",
                          labels, e->response_msec);
    }
}

/* Fold an exited worker's counters, matched by name (indexes may differ
 * between configurations). */
void fd_upstream_retire(void *retired_area, const void *area)
{
    fd_upstream_shm_t *d = retired_area;
    const fd_upstream_shm_t *a = area;
    unsigned i, j;

    for (i = 0; i < FD_UPSTREAM_SHM_PEERS; i++) {
        const fd_upstream_shm_peer_t *e = &a->peer[i];
        fd_upstream_shm_peer_t *x = NULL;
        if (e->upstream[0] == '\0')
            continue;
        for (j = 0; j < FD_UPSTREAM_SHM_PEERS; j++) {
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
