/*
 * server = NAME:PORT resolve ([upstream] with resolver = IP[:PORT]):
 * servers that follow DNS. The name is queried again at its TTL (or
 * resolve_interval); new addresses join the group, removed ones take no
 * new requests and drain (what is in flight finishes, their kept-alive
 * connections close instead of going idle).
 *
 * One query per name and interval for the whole fastd, not per worker,
 * and one set of addresses every worker sees: the set lives in a table
 * shared by every process, mapped by the master at the first load that
 * needs it (before any worker is forked) and kept across reloads, so a
 * reload starts with the addresses it had. Each worker keeps a timer per
 * name; when the query is due, the worker that moves the entry's next
 * time forward (compare-and-swap on the monotonic clock every process
 * shares, as fd_upstream_health.c) asks, on its own c-ares channel whose
 * sockets and timeouts run on the worker's loop. A worker that dies with
 * a query in flight only delays it: its claim expires.
 *
 * The answer is merged into the entry's FD_UPSTREAM_RESOLVE_MAX slots
 * under a sequence lock (a writer at a time, readers retry): an address
 * keeps its slot while it stays, so slot i is the same address in every
 * worker, and a generation counter tells the workers to look. A worker
 * mirrors the slots in up->peers (fixed at load: a request's tried set
 * and the peers it holds stay valid), on its next pick or its next timer
 * (a second at most), and rebuilds its hash ring when they change.
 *
 * A failed query (timeout, SERVFAIL, NXDOMAIN, no address) keeps the last
 * good addresses and is retried after 1 to 5 s; each change between
 * answering and failing is logged once, by the worker that saw it.
 */
#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_ssl.h"
#include "fd_status.h"
#include "fd_upstream.h"

#define RESOLVE_ENTRIES 64    /* resolved names, all groups, all loads */
#define RESOLVE_SOCKS 16      /* a channel's sockets open at once */
#define TTL_MIN 1000          /* ms: the answer's TTL is kept within */
#define TTL_MAX 300000
#define RETRY_MIN 1000        /* ms: a failed query is asked again after */
#define RETRY_MAX 5000
#define SYNC_MAX 1000         /* ms: a worker looks at the table at least */

/* One name's addresses, shared by every process. */
typedef struct {
    char upstream[32];
    char server[64];           /* "host:port" */
    uint32_t used;             /* claimed by a configuration */
    uint32_t seq;              /* odd while the slots are written */
    uint64_t gen;              /* changes of the set */
    uint64_t next_at;          /* monotonic ms of the next query (CAS) */
    uint32_t naddr;
    uint32_t failing;          /* the last query failed (logged once) */
    int32_t last_err;          /* its c-ares status */
    uint32_t ttl;              /* the last answer's, in seconds */
    uint64_t queries, failures;
    fd_upstream_addr_t addr[FD_UPSTREAM_RESOLVE_MAX];
} resolve_entry_t;

static resolve_entry_t *table;

struct fd_upstream_resolve_s {
    fd_timer_t timer;          /* first: the handler's argument */
    fd_upstream_resolve_t *next;
    fd_upstream_t *up;
    char *host;
    char *server;              /* "host:port": logs, status */
    unsigned port;
    unsigned first;            /* its slots: up->peers[first ..] */
    int entry;                 /* in table */
    /* per worker */
    uint64_t gen;              /* the set its slots hold */
    unsigned querying:1;
    char names[FD_UPSTREAM_RESOLVE_MAX][INET6_ADDRSTRLEN + 8];
};

/* A group's c-ares channel in one worker, driven by the loop. */
typedef struct chan_s chan_t;

typedef struct {
    fd_event_t ev;             /* first: the loop's pointer */
    chan_t *chan;
} sock_t;

struct chan_s {
    fd_timer_t timer;          /* first: c-ares' next timeout */
    ares_channel ch;
    sock_t socks[RESOLVE_SOCKS];
};

/* --- the slots of one name ----------------------------------------------- */

static int addr_eq(const fd_upstream_addr_t *a, const fd_upstream_addr_t *b)
{
    return a->family == b->family &&
           memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

int fd_upstream_resolve_merge(fd_upstream_addr_t *slots, unsigned nslots,
                              const fd_upstream_addr_t *got, unsigned n,
                              uint64_t now)
{
    unsigned i, k;
    int changed = 0;

    for (i = 0; i < nslots; i++) {
        if (slots[i].family == 0)
            continue;
        for (k = 0; k < n && !addr_eq(&slots[i], &got[k]); k++)
            ;
        if (k == n) {
            slots[i].family = 0;
            slots[i].vacated = now;
            changed = 1;
        }
    }
    for (k = 0; k < n; k++) {
        int free_slot = -1;
        for (i = 0; i < nslots; i++) {
            if (slots[i].family == 0) {
                if (free_slot < 0 ||
                    slots[i].vacated < slots[free_slot].vacated)
                    free_slot = (int)i;
            } else if (addr_eq(&slots[i], &got[k])) {
                break;
            }
        }
        if (i < nslots || free_slot < 0)
            continue; /* kept, or no room (the caller gives at most nslots) */
        slots[free_slot].family = got[k].family;
        memcpy(slots[free_slot].addr, got[k].addr, sizeof(got[k].addr));
        changed = 1;
    }
    return changed;
}

static size_t addr_text(char *buf, size_t size, const fd_upstream_addr_t *a,
                        unsigned port)
{
    char host[INET6_ADDRSTRLEN];
    int n;

    inet_ntop(a->family, a->addr, host, sizeof(host));
    n = snprintf(buf, size, a->family == AF_INET6 ? "[%s]:%u" : "%s:%u",
                 host, port);
    return n < 0 ? 0 : fd_min((size_t)n, size - 1);
}

/* The slots as they are between two writes; FD_AGAIN: a writer is busy
 * (the caller looks again later). */
static int snapshot(resolve_entry_t *e, fd_upstream_addr_t *a, uint64_t *gen)
{
    unsigned tries;

    for (tries = 0; tries < 64; tries++) {
        uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        if (s & 1)
            continue;
        memcpy(a, e->addr, sizeof(e->addr));
        *gen = __atomic_load_n(&e->gen, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s)
            return FD_OK;
    }
    return FD_AGAIN;
}

/* The answer into the entry; 1 when the set changed. Another worker
 * writing at the same moment has the same answer: this one gives way. */
static int publish(resolve_entry_t *e, const fd_upstream_addr_t *got,
                   unsigned n, uint64_t now)
{
    fd_upstream_addr_t a[FD_UPSTREAM_RESOLVE_MAX];
    uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    int changed;

    if ((s & 1) || !__atomic_compare_exchange_n(&e->seq, &s, s + 1, 0,
                                                __ATOMIC_ACQUIRE,
                                                __ATOMIC_RELAXED))
        return 0;
    memcpy(a, e->addr, sizeof(a));
    changed = fd_upstream_resolve_merge(a, FD_UPSTREAM_RESOLVE_MAX, got, n,
                                        now);
    if (changed) {
        memcpy(e->addr, a, sizeof(a));
        e->naddr = n;
        __atomic_add_fetch(&e->gen, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
    return changed;
}

/* --- configuration (the master, at load) --------------------------------- */

static void name_copy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size) /* keep the end: ports differ there */
        src += n - (size - 1);
    memcpy(dst, src, fd_min(n, size - 1) + 1);
}

int fd_upstream_resolve_add(fd_conf_t *cf, fd_upstream_t *up,
                            const char *host, unsigned port, unsigned first)
{
    fd_upstream_resolve_t *rs = fd_pcalloc(cf->pool, sizeof(*rs)), **last;
    char un[32], sn[64], buf[300];
    int free_slot = -1, len;
    unsigned i, k;

    if (rs == NULL)
        return fd_conf_error(cf, "out of memory");
    if (table == NULL &&
        (table = fd_shm_zone("resolve", "", RESOLVE_ENTRIES * sizeof(resolve_entry_t),
                             NULL)) == NULL)
        return fd_conf_error(cf, "resolve: mmap() failed: %s",
                             strerror(errno));
    len = snprintf(buf, sizeof(buf), "%s:%u", host, port);
    rs->host = fd_pstrdup(cf->pool, host, strlen(host));
    rs->server = fd_pstrdup(cf->pool, buf, (size_t)len);
    if (rs->host == NULL || rs->server == NULL)
        return fd_conf_error(cf, "out of memory");
    rs->up = up;
    rs->port = port;
    rs->first = first;
    for (i = 0; i < FD_UPSTREAM_RESOLVE_MAX; i++) {
        up->peers[first + i].name = rs->server;
        up->peers[first + i].resolve = rs;
        up->peers[first + i].absent = 1;
    }
    name_copy(un, sizeof(un), up->name);
    name_copy(sn, sizeof(sn), rs->server);
    rs->entry = -1;
    for (k = 0; k < RESOLVE_ENTRIES; k++) {
        resolve_entry_t *e = &table[k];
        if (!e->used) {
            if (free_slot < 0)
                free_slot = (int)k;
            continue;
        }
        if (strcmp(e->upstream, un) == 0 && strcmp(e->server, sn) == 0) {
            rs->entry = (int)k;
            break;
        }
    }
    if (rs->entry < 0) {
        resolve_entry_t *e;
        if (free_slot < 0)
            return fd_conf_error(cf, "more than %d resolve servers (in all "
                                 "the configurations loaded since the "
                                 "start)", RESOLVE_ENTRIES);
        e = &table[free_slot];
        memset(e, 0, sizeof(*e));
        memcpy(e->upstream, un, sizeof(un));
        memcpy(e->server, sn, sizeof(sn));
        e->used = 1;
        rs->entry = free_slot;
    }
    for (last = &up->resolve; *last; last = &(*last)->next)
        ;
    *last = rs;
    return FD_OK;
}

/* --- a worker's slots ---------------------------------------------------- */

static void slot_vacate(fd_upstream_peer_t *p)
{
    p->absent = 1;
    p->gen++;
    fd_upstream_keepalive_close_peer(p);
    fd_ssl_session_free(&p->ssl_session);
    fd_upstream_peer_renamed(p);
}

static void slot_fill(fd_upstream_resolve_t *rs, unsigned i,
                      const fd_upstream_addr_t *a)
{
    fd_upstream_peer_t *p = &rs->up->peers[rs->first + i];

    memset(&p->sa, 0, sizeof(p->sa));
    if (a->family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&p->sa;
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)rs->port);
        memcpy(&sin->sin_addr, a->addr, 4);
        p->salen = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&p->sa;
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)rs->port);
        memcpy(&sin6->sin6_addr, a->addr, 16);
        p->salen = sizeof(*sin6);
    }
    addr_text(rs->names[i], sizeof(rs->names[i]), a, rs->port);
    p->name = rs->names[i];
    p->absent = 0;
    p->gen++;
    p->current = 0;
    p->fails = 0;
    p->checked = 0;
    fd_upstream_peer_renamed(p);
}

static int same_addr(const fd_upstream_peer_t *p, const fd_upstream_addr_t *a)
{
    if (p->sa.ss_family != a->family)
        return 0;
    if (a->family == AF_INET)
        return memcmp(&((const struct sockaddr_in *)&p->sa)->sin_addr,
                      a->addr, 4) == 0;
    return memcmp(&((const struct sockaddr_in6 *)&p->sa)->sin6_addr, a->addr,
                  16) == 0;
}

/* 1 when the slots changed */
static int sync_one(fd_upstream_resolve_t *rs)
{
    resolve_entry_t *e = &table[rs->entry];
    fd_upstream_addr_t a[FD_UPSTREAM_RESOLVE_MAX];
    uint64_t gen;
    unsigned i;

    if (__atomic_load_n(&e->gen, __ATOMIC_RELAXED) == rs->gen ||
        snapshot(e, a, &gen) != FD_OK)
        return 0;
    for (i = 0; i < FD_UPSTREAM_RESOLVE_MAX; i++) {
        fd_upstream_peer_t *p = &rs->up->peers[rs->first + i];
        if (!p->absent && a[i].family && same_addr(p, &a[i]))
            continue;
        if (!p->absent)
            slot_vacate(p);
        if (a[i].family)
            slot_fill(rs, i, &a[i]);
    }
    rs->gen = gen;
    return 1;
}

void fd_upstream_resolve_sync(fd_upstream_t *up)
{
    fd_upstream_resolve_t *rs;
    int changed = 0;

    if (table == NULL)
        return;
    for (rs = up->resolve; rs; rs = rs->next)
        changed |= sync_one(rs);
    if (!changed)
        return;
    fd_upstream_count_live(up);
    if (fd_upstream_ring_update(up) != FD_OK)
        fd_log_error(FD_LOG_ALERT, ENOMEM, "upstream \"%s\": the hash ring "
                     "keeps its old servers", up->name);
}

/* --- c-ares on the loop -------------------------------------------------- */

static void chan_arm(chan_t *c)
{
    struct timeval tv, *t = ares_timeout(c->ch, NULL, &tv);

    if (t == NULL) {
        fd_timer_del(&c->timer);
        return;
    }
    fd_timer_add(&c->timer, (fd_msec_t)t->tv_sec * 1000 +
                                (fd_msec_t)(t->tv_usec + 999) / 1000);
}

static void chan_timer(fd_timer_t *t)
{
    chan_t *c = (chan_t *)t;

    ares_process_fd(c->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    chan_arm(c);
}

static void sock_event(fd_event_t *ev, uint32_t events)
{
    sock_t *s = (sock_t *)ev;
    chan_t *c = s->chan;
    ares_socket_t fd = ev->fd;
    unsigned rounds = 0;
    int n;

    ares_process_fd(c->ch,
                    events & (EPOLLIN | EPOLLERR | EPOLLHUP) ? fd
                                                             : ARES_SOCKET_BAD,
                    events & (EPOLLOUT | EPOLLERR) ? fd : ARES_SOCKET_BAD);
    /* io_uring's polls are edge-triggered, and c-ares reads a TCP answer
     * a piece per call: read on while bytes wait */
    while (s->ev.fd == fd && ioctl(fd, FIONREAD, &n) == 0 && n > 0 &&
           rounds++ < 64)
        ares_process_fd(c->ch, fd, ARES_SOCKET_BAD);
    chan_arm(c);
}

static void sock_state(void *data, ares_socket_t fd, int readable,
                       int writable)
{
    chan_t *c = data;
    sock_t *s = NULL, *spare = NULL;
    uint32_t events = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
    unsigned i;

    for (i = 0; i < RESOLVE_SOCKS; i++) {
        if (c->socks[i].ev.fd == fd)
            s = &c->socks[i];
        else if (c->socks[i].ev.fd < 0 && spare == NULL)
            spare = &c->socks[i];
    }
    if (events == 0) { /* c-ares closes it next */
        if (s) {
            fd_event_del(&s->ev);
            s->ev.fd = -1;
        }
        return;
    }
    if (s) {
        if (fd_event_mod(&s->ev, events) < 0)
            fd_log_error(FD_LOG_ALERT, errno, "resolver: epoll_ctl() failed");
        return;
    }
    if (spare == NULL) {
        fd_log_error(FD_LOG_ALERT, 0, "resolver: more than %d sockets, "
                     "its queries time out", RESOLVE_SOCKS);
        return;
    }
    spare->ev.fd = fd;
    spare->ev.instance ^= 1;
    if (fd_event_add(&spare->ev, events) < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "resolver: epoll_ctl() failed");
        spare->ev.fd = -1;
    }
}

static int chan_open(fd_upstream_t *up)
{
    struct ares_options o;
    chan_t *c = calloc(1, sizeof(*c));
    int rc;
    unsigned i;

    if (c == NULL) {
        fd_log_error(FD_LOG_ALERT, ENOMEM, "upstream \"%s\": no resolver",
                     up->name);
        return FD_ERROR;
    }
    memset(&o, 0, sizeof(o));
    o.sock_state_cb = sock_state;
    o.sock_state_cb_data = c;
    o.timeout = (int)up->resolver_timeout;
    o.tries = 1;
    o.lookups = (char *)"b"; /* DNS only: not /etc/hosts */
    o.domains = NULL;        /* the name as given: no search list */
    o.ndomains = 0;
    /* EDNS: 16 AAAA records fit a datagram (no TCP) */
    o.flags = ARES_FLAG_EDNS;
    o.ednspsz = 1232;
    rc = ares_init_options(&c->ch, &o,
                           ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS |
                               ARES_OPT_TRIES | ARES_OPT_LOOKUPS |
                               ARES_OPT_DOMAINS | ARES_OPT_FLAGS |
                               ARES_OPT_EDNSPSZ);
    if (rc != ARES_SUCCESS) {
        fd_log_error(FD_LOG_ALERT, 0, "upstream \"%s\": ares_init_options() "
                     "failed: %s", up->name, ares_strerror(rc));
        free(c);
        return FD_ERROR;
    }
    rc = ares_set_servers_ports_csv(c->ch, up->resolvers);
    if (rc != ARES_SUCCESS) {
        fd_log_error(FD_LOG_ALERT, 0, "upstream \"%s\": resolver \"%s\": %s",
                     up->name, up->resolvers, ares_strerror(rc));
        ares_destroy(c->ch);
        free(c);
        return FD_ERROR;
    }
    for (i = 0; i < RESOLVE_SOCKS; i++) {
        c->socks[i].ev.fd = -1;
        c->socks[i].ev.handler = sock_event;
        c->socks[i].chan = c;
    }
    c->timer.handler = chan_timer;
    up->resolver_state = c;
    return FD_OK;
}

/* --- queries ------------------------------------------------------------- */

static void rs_arm(fd_upstream_resolve_t *rs);

static fd_msec_t interval(const fd_upstream_resolve_t *rs, uint32_t ttl)
{
    if (rs->up->resolve_interval)
        return fd_max(rs->up->resolve_interval, (fd_msec_t)TTL_MIN);
    return fd_min(fd_max((fd_msec_t)ttl * 1000, (fd_msec_t)TTL_MIN),
                  (fd_msec_t)TTL_MAX);
}

static void answered(fd_upstream_resolve_t *rs, const fd_upstream_addr_t *got,
                     unsigned n, uint32_t ttl, int more)
{
    resolve_entry_t *e = &table[rs->entry];
    uint64_t now = fd_current_msec;

    if (publish(e, got, n, now)) {
        char list[FD_UPSTREAM_RESOLVE_MAX * (INET6_ADDRSTRLEN + 9)];
        size_t len = 0;
        unsigned i;
        for (i = 0; i < n; i++) {
            if (i)
                list[len++] = ' ';
            len += addr_text(list + len, sizeof(list) - len, &got[i],
                             rs->port);
        }
        list[len] = '\0';
        fd_log_error(FD_LOG_NOTICE, 0, "upstream \"%s\" server %s resolves "
                     "to %s%s", rs->up->name, rs->server, list,
                     more ? " (and more: the first 16 are used)" : "");
    }
    if (__atomic_exchange_n(&e->failing, 0, __ATOMIC_RELAXED))
        fd_log_error(FD_LOG_NOTICE, 0, "upstream \"%s\" server %s resolves "
                     "again", rs->up->name, rs->server);
    e->ttl = ttl;
    __atomic_store_n(&e->next_at, now + interval(rs, ttl), __ATOMIC_RELAXED);
}

static void failed(fd_upstream_resolve_t *rs, int status)
{
    resolve_entry_t *e = &table[rs->entry];
    fd_msec_t retry = fd_min(fd_max(interval(rs, e->ttl),
                                    (fd_msec_t)RETRY_MIN),
                             (fd_msec_t)RETRY_MAX);

    __atomic_add_fetch(&e->failures, 1, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&e->failing, 1, __ATOMIC_RELAXED) ||
        e->last_err != status)
        fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s: DNS query "
                     "failed (%s): it keeps its %u address%s", rs->up->name,
                     rs->server, ares_strerror(status), e->naddr,
                     e->naddr == 1 ? "" : "es");
    e->last_err = status;
    __atomic_store_n(&e->next_at, fd_current_msec + retry, __ATOMIC_RELAXED);
}

static void resolved(void *arg, int status, int timeouts,
                     struct ares_addrinfo *res)
{
    fd_upstream_resolve_t *rs = arg;
    fd_upstream_addr_t got[FD_UPSTREAM_RESOLVE_MAX];
    struct ares_addrinfo_node *ai;
    unsigned n = 0, k;
    uint32_t ttl = UINT32_MAX;
    int more = 0;

    (void)timeouts;
    if (status == ARES_EDESTRUCTION)
        return;
    rs->querying = 0;
    for (ai = status == ARES_SUCCESS && res ? res->nodes : NULL; ai;
         ai = ai->ai_next) {
        fd_upstream_addr_t a;
        memset(&a, 0, sizeof(a));
        if (ai->ai_family == AF_INET) {
            a.family = AF_INET;
            memcpy(a.addr, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, 4);
        } else if (ai->ai_family == AF_INET6) {
            a.family = AF_INET6;
            memcpy(a.addr, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr,
                   16);
        } else {
            continue;
        }
        for (k = 0; k < n && !addr_eq(&got[k], &a); k++)
            ;
        if (k < n)
            continue;
        if (n == FD_UPSTREAM_RESOLVE_MAX) {
            more = 1;
            continue;
        }
        got[n++] = a;
        if (ai->ai_ttl >= 0 && (uint32_t)ai->ai_ttl < ttl)
            ttl = (uint32_t)ai->ai_ttl;
    }
    if (res)
        ares_freeaddrinfo(res);
    if (n)
        answered(rs, got, n, ttl, more);
    else
        failed(rs, status == ARES_SUCCESS ? ARES_ENODATA : status);
    fd_upstream_resolve_sync(rs->up);
    rs_arm(rs);
}

static void query(fd_upstream_resolve_t *rs, chan_t *c)
{
    struct ares_addrinfo_hints h = {.ai_flags = ARES_AI_NOSORT,
                                    .ai_family = AF_UNSPEC,
                                    .ai_socktype = SOCK_STREAM};

    __atomic_add_fetch(&table[rs->entry].queries, 1, __ATOMIC_RELAXED);
    rs->querying = 1;
    /* the callback may run at once (a bad name) */
    ares_getaddrinfo(c->ch, rs->host, NULL, &h, resolved, rs);
    chan_arm(c);
}

/* Due: sync, and the worker that moves the entry's time on asks. */
static void rs_timer(fd_timer_t *t)
{
    fd_upstream_resolve_t *rs = (fd_upstream_resolve_t *)t;
    resolve_entry_t *e = &table[rs->entry];
    chan_t *c = rs->up->resolver_state;
    uint64_t now = fd_current_msec, at;
    /* the claim outlives every server's timeout: a query at a time */
    fd_msec_t claim = (fd_msec_t)rs->up->resolver.n *
                          rs->up->resolver_timeout + 1000;

    if (fd_worker && fd_worker->quitting)
        return; /* the new workers ask */
    fd_upstream_resolve_sync(rs->up);
    at = __atomic_load_n(&e->next_at, __ATOMIC_RELAXED);
    if (c && !rs->querying && now >= at &&
        __atomic_compare_exchange_n(&e->next_at, &at, now + claim, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        query(rs, c);
    rs_arm(rs);
}

static void rs_arm(fd_upstream_resolve_t *rs)
{
    uint64_t now = fd_current_msec,
             at = __atomic_load_n(&table[rs->entry].next_at,
                                  __ATOMIC_RELAXED);
    fd_msec_t wait = at > now ? (fd_msec_t)(at - now) : 0;

    /* a little after it is due (whoever is first asks), and at least
     * every SYNC_MAX: removed addresses drain without traffic too */
    fd_timer_add(&rs->timer, fd_min(wait, (fd_msec_t)SYNC_MAX) + 1 +
                                 (fd_msec_t)(getpid() % 7));
}

void fd_upstream_resolve_start(fd_upstream_t **ups, unsigned n)
{
    static int lib;
    fd_upstream_resolve_t *rs;
    unsigned i;

    for (i = 0; i < n; i++) {
        fd_upstream_t *up = ups[i];
        if (up->resolve == NULL || table == NULL)
            continue;
        if (!lib) {
            int rc = ares_library_init(ARES_LIB_INIT_ALL);
            if (rc != ARES_SUCCESS) {
                fd_log_error(FD_LOG_ALERT, 0, "ares_library_init() failed: "
                             "%s", ares_strerror(rc));
                return;
            }
            lib = 1;
        }
        /* without a channel the slots still follow the other workers */
        (void)chan_open(up);
        fd_upstream_resolve_sync(up);
        for (rs = up->resolve; rs; rs = rs->next) {
            rs->timer.handler = rs_timer;
            fd_timer_add(&rs->timer, 0);
        }
    }
}

/* --- status -------------------------------------------------------------- */

void fd_upstream_resolve_status(fd_status_t *st, fd_upstream_t **ups,
                                unsigned n)
{
    fd_upstream_addr_t a[FD_UPSTREAM_RESOLVE_MAX];
    fd_upstream_resolve_t *rs;
    char labels[256], alabels[320], text[INET6_ADDRSTRLEN + 8];
    uint64_t gen;
    unsigned i, k;

    if (table == NULL)
        return;
    for (i = 0; i < n; i++) {
        for (rs = ups[i]->resolve; rs; rs = rs->next) {
            resolve_entry_t *e = &table[rs->entry];
            if (snapshot(e, a, &gen) != FD_OK)
                continue;
            fd_upstream_status_labels(labels, sizeof(labels), ups[i]->name,
                                      rs->server);
            for (k = 0; k < FD_UPSTREAM_RESOLVE_MAX; k++) {
                if (a[k].family == 0)
                    continue;
                addr_text(text, sizeof(text), &a[k], rs->port);
                snprintf(alabels, sizeof(alabels), "%s,address=\"%s\"",
                         labels, text);
                fd_status_gauge(st, "resolve_address_info", "1 for each "
                                "address a resolve server has now", alabels,
                                1);
            }
            fd_status_gauge(st, "resolve_addresses", "Addresses the resolve "
                            "server has now", labels, e->naddr);
            fd_status_gauge(st, "resolve_ok", "1 while its last DNS query "
                            "answered, 0 while they fail (the addresses "
                            "stay)", labels, !e->failing);
            fd_status_counter(st, "resolve_changes", "Changes of its address "
                              "set", labels, gen);
            fd_status_counter(st, "resolve_queries", "DNS queries sent for "
                              "it (by all workers)", labels, e->queries);
            fd_status_counter(st, "resolve_failures", "DNS queries that "
                              "failed", labels, e->failures);
        }
    }
}
