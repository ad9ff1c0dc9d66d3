#ifndef FD_UPSTREAM_H
#define FD_UPSTREAM_H

#include <sys/socket.h>

#include "fd_core.h"
#include "fd_module.h"
#include "fd_event.h"
#include "fd_stream.h"
#include "fd_var.h"

/*
 * Upstream groups: the servers a request may go to, how one is picked,
 * which are healthy, and the idle connections kept to them. What a
 * connection carries (an HTTP request, a tunnel) is its user's business:
 * the proxy module is one.
 *
 *   configuration: an [upstream NAME] section is parsed through
 *       fd_upstream_directives and fd_upstream_init_section (the core's
 *       fd_upstream_module owns the section type), and
 *       pass = http://HOST:PORT makes an implicit group with
 *       fd_upstream_implicit(). Servers are resolved at load time and
 *       the hash ring is built once, except for server = NAME:PORT
 *       resolve: such a name owns FD_UPSTREAM_RESOLVE_MAX slots of
 *       up->peers, filled and emptied as its DNS answers change
 *       (fd_upstream_resolve.c), and the ring is rebuilt each time.
 *   balancing: smooth weighted round robin, least connections (per
 *       weight), consistent hashing; backups only when no primary is
 *       usable. A request's tried set is a bitmap over up->peers.
 *   passive health: max_fails failures within fail_timeout take a
 *       server out for fail_timeout; a group's only server never.
 *   keep-alive pool: idle connections per server, bounded per group
 *       (least recently used out first), each with its idle timer; an
 *       idle one that turns readable is closed.
 *   status: per server counters in the worker's stats slot
 *       (fd_upstream_module's shm area), reported by
 *       fd_upstream_status(); the shared health and resolve tables by
 *       fd_upstream_status_shared().
 *
 * Everything runs on the worker's loop thread. The configuration's
 * fields marked "per worker" are written by each worker in its own copy.
 */

enum { FD_UPSTREAM_RR, FD_UPSTREAM_LEAST_CONN, FD_UPSTREAM_HASH };

typedef struct fd_upstream_s fd_upstream_t;
typedef struct fd_upstream_peer_s fd_upstream_peer_t;
typedef struct fd_upstream_conn_s fd_upstream_conn_t;
typedef struct fd_upstream_resolve_s fd_upstream_resolve_t;

/* The addresses one "server = NAME:PORT resolve" may have at a time. */
#define FD_UPSTREAM_RESOLVE_MAX 16

/* health_check = URI ...: what a probe asks, how often, what passes */
typedef struct {
    char *uri;
    fd_msec_t interval, timeout;
    unsigned fails, passes;    /* in a row, to go out / to come back */
    unsigned status_lo, status_hi;
    unsigned port;             /* 0: the server's own */
    unsigned grpc:1;           /* type=grpc: the gRPC health protocol */
    int grpc_status;           /* grpc_status=N passes too; -1: none */
    char *grpc_service;        /* grpc_service=NAME; "" the server's */
} fd_upstream_health_t;

struct fd_upstream_peer_s {
    char *name;                /* "127.0.0.1:3000", "[::1]:80", "unix:/x" */
    struct sockaddr_storage sa;
    socklen_t salen;
    fd_int_t weight;
    fd_int_t max_fails;
    fd_msec_t fail_timeout;
    unsigned backup:1;
    unsigned down:1;
    unsigned absent:1;         /* a resolve slot without an address now:
                                * never picked (per worker) */
    unsigned index;            /* in up->peers */
    unsigned gen;              /* per worker: bumps when a resolve slot
                                * changes address (its connections to the
                                * old one are not pooled again) */
    fd_upstream_resolve_t *resolve; /* the name it comes from, or NULL */
    int shm;                   /* status entry, -1: none */
    int health;                /* health_check entry, -1: none */
    fd_upstream_t *up;
    /* per worker */
    int64_t current;           /* smooth weighted round robin */
    unsigned fails;            /* in the current fail_timeout window */
    fd_msec_t checked;         /* time of the last failure */
    unsigned active;           /* requests (and tunnels) using it */
    fd_upstream_conn_t *idle;  /* keep-alive connections, newest first */
    void *ssl_session;         /* TLS: the last session (fd_ssl.h) */
    void *mux;                 /* per worker: the HTTP/2 connections to it
                                * (fd_upstream_h2.c), or NULL */
};

typedef struct {
    uint32_t point;
    fd_upstream_peer_t *peer;
} fd_upstream_point_t;

struct fd_upstream_s {
    /* keys of [upstream NAME] */
    fd_conf_list_t server;
    int balance;
    char *hash_key;
    fd_int_t keepalive;
    fd_msec_t keepalive_timeout;
    fd_int_t keepalive_requests;
    int proxy_protocol;        /* a PROXY header on each new connection */
    fd_int_t proxy_protocol_version;
    char *health_check;
    fd_conf_list_t resolver;   /* IP[:PORT] of DNS servers */
    fd_msec_t resolver_timeout;
    fd_msec_t resolve_interval; /* 0: the answer's TTL */
    fd_int_t h2_connections;   /* HTTP/2: connections per server, worker */
    fd_msec_t h2_ping_interval; /* HTTP/2: PING on an idle connection */

    unsigned h2:1;             /* its server lines say h2 */

    char *name;
    const char *file;
    int line;
    fd_upstream_peer_t *peers;
    unsigned npeers;
    fd_upstream_point_t *ring;
    unsigned nring;
    fd_var_script_t key;       /* hash_key, compiled (fd_var.h) */
    fd_upstream_t *next_implicit; /* pass = http://host:port/ groups */
    char *implicit_opts;       /* ... and the options pass gave them */
    fd_upstream_health_t *health; /* NULL: no active checks */
    void *health_ssl;          /* fd_ssl_client_t of the first location
                                * passing here with https://: its probes
                                * speak TLS as its requests do */
    unsigned health_h2:1;      /* a location passes here with h2:// or
                                * grpc://: probes speak HTTP/2 too */
    char *resolvers;           /* "IP:PORT,..." for c-ares, or NULL */
    fd_upstream_resolve_t *resolve; /* its server = ... resolve lines */
    void *resolver_state;      /* per worker: the c-ares channel */
    unsigned nlive;            /* per worker: servers with an address
                                * (1: never taken out) */
    unsigned nscan;            /* per worker: peers[nscan ..] are empty
                                * resolve slots (fd_upstream_count_live) */
    unsigned ring_own:1;       /* per worker: ring is malloc()ed */

    /* per worker: every idle connection, newest first (eviction order) */
    fd_upstream_conn_t *lru_head, *lru_tail;
    unsigned nidle;
};

/* --- configuration --- */

/* The core's module that owns [upstream NAME] (fd_upstream_module.c), and
 * every group of cy: [upstream] sections in file order, then the implicit
 * ones of pass = in the order they were made; at most max. */
extern fd_module_t fd_upstream_module;
unsigned fd_upstream_groups(fd_cycle_t *cy, fd_upstream_t **out,
                            unsigned max);
/* The keys of an [upstream NAME] section (conf: an fd_upstream_t). */
extern const fd_directive_t fd_upstream_directives[];
int fd_upstream_init_section(fd_conf_t *cf, const char *name, void *conf);
/* pass = http://HOST:PORT [max_fails=N] [fail_timeout=T]: the group of
 * that address and options in the configuration being loaded, made on
 * first use; NULL after fd_conf_error(). */
fd_upstream_t *fd_upstream_implicit(fd_conf_t *cf, const char *hostport,
                                    const char *opts);

/* --- balancing and passive health --- */

/* A request's tried set: one bit per server, words of 64. */
#define fd_upstream_tried_words(up) (((up)->npeers + 63) / 64)

static inline int fd_upstream_tried(const uint64_t *tried,
                                    const fd_upstream_peer_t *p)
{
    return (tried[p->index / 64] >> (p->index % 64)) & 1;
}

static inline void fd_upstream_set_tried(uint64_t *tried,
                                         const fd_upstream_peer_t *p, int on)
{
    if (on)
        tried[p->index / 64] |= 1ull << (p->index % 64);
    else
        tried[p->index / 64] &= ~(1ull << (p->index % 64));
}

/* The key hash for balance = hash (FNV, mixed: a ring needs spread). */
uint32_t fd_upstream_hash(const void *data, size_t n);
/* hash_key evaluated for r, hashed (0 when it cannot be built). */
uint32_t fd_upstream_request_hash(struct fd_request_s *r,
                                  const fd_upstream_t *up);
/* The next server for a request that tried those in tried; hash is the
 * key's for balance = hash. NULL: none is usable. */
fd_upstream_peer_t *fd_upstream_pick(fd_upstream_t *up, const uint64_t *tried,
                                     uint32_t hash);
/* Whether a server not yet tried is usable (a retry has somewhere to go). */
int fd_upstream_has_candidate(const fd_upstream_t *up, const uint64_t *tried);
int fd_upstream_peer_usable(const fd_upstream_peer_t *p);
void fd_upstream_peer_failed(fd_upstream_peer_t *p);
void fd_upstream_peer_ok(fd_upstream_peer_t *p);

/* A request (or tunnel) starts using p, and stops; a response header
 * came after msec. They count in p's status entry too. */
void fd_upstream_peer_acquire(fd_upstream_peer_t *p);
void fd_upstream_peer_release(fd_upstream_peer_t *p);
void fd_upstream_peer_response(fd_upstream_peer_t *p, fd_msec_t msec);

/* --- connections and the keep-alive pool --- */

/*
 * An upstream connection: a non-blocking socket on the worker's epoll
 * (edge-triggered, registered once) and one timer. While a user holds it
 * (data != NULL), events and the deadline go to its callbacks; idle in
 * the pool, the pool handles them (an event or the keepalive_timeout
 * closes it). A user that takes the socket away (a tunnel) sets ev.fd to
 * -1 before it lets the connection go.
 */
typedef void (*fd_upstream_conn_pt)(fd_upstream_conn_t *uc);

struct fd_upstream_conn_s {
    fd_stream_t s;             /* first: epoll's data.ptr; the event, the
                                * deadline (0: none; the timer may fire
                                * early), readable, writable, eof (the
                                * upstream closed, or failed) and the
                                * transport (TCP, or TLS to the upstream) */
    fd_msec_t idle_since;
    fd_upstream_peer_t *peer;
    void *data;                /* the user's; NULL while idle */
    const void *key;           /* what the user set it up for (the proxy:
                                * its TLS client, NULL for plain TCP): the
                                * pool gives it back only for the same */
    fd_upstream_conn_pt on_event;   /* the flags below changed */
    fd_upstream_conn_pt on_timeout; /* the deadline passed */
    fd_upstream_conn_t *pnext, *pprev; /* the server's idle list */
    fd_upstream_conn_t *lnext, *lprev; /* the group's idle LRU; free lists */
    unsigned requests;         /* the user counts what it sent on it */
    unsigned peer_gen;         /* peer->gen when it was opened */
    unsigned idle:1;
    unsigned connecting:1;
    unsigned reused:1;         /* came from the keep-alive pool */
    unsigned pp_sent:1;        /* its PROXY header is written */
};

/* A new connection to p: connecting, or connected; NULL with errno set. */
fd_upstream_conn_t *fd_upstream_conn_open(fd_upstream_peer_t *p);
/* fd, a socket connected (or connecting) to p, as a connection registered
 * with the loop; NULL with errno set, fd closed. */
fd_upstream_conn_t *fd_upstream_conn_add(fd_upstream_peer_t *p, int fd,
                                         int connecting);
/* proxy_protocol = on: write the PROXY header (src: the client, dst: the
 * address it reached) before anything else on a new connection, TLS
 * included. FD_OK (also when there is nothing to write), or FD_ERROR
 * with errno. */
struct fd_addr_s;
int fd_upstream_proxy_protocol(fd_upstream_conn_t *uc,
                               const struct fd_addr_s *src,
                               const struct fd_addr_s *dst);
/* Close it (out of the pool if idle); its memory is reused a turn later. */
void fd_upstream_conn_close(fd_upstream_conn_t *uc);
/* A connect in progress, after an event: FD_AGAIN while it still is,
 * FD_OK once done (uc->connecting cleared), FD_ERROR with *err (the
 * socket's error) when it failed. */
int fd_upstream_conn_connected(fd_upstream_conn_t *uc, int *err);
/* Move its deadline to ms from now (the heap is touched only when that
 * is earlier than the armed timer). */
void fd_upstream_conn_deadline(fd_upstream_conn_t *uc, fd_msec_t ms);

/* Into the pool, or closed (no keepalive, eof, keepalive_requests, the
 * worker stops); a full pool closes its least recently used first. */
void fd_upstream_keepalive_put(fd_upstream_conn_t *uc);
/* An idle connection to p made for key, newest first; careful: peek at
 * each first (a request that cannot be retried once sent). NULL: none. */
fd_upstream_conn_t *fd_upstream_keepalive_get(fd_upstream_peer_t *p,
                                              const void *key, int careful);
/* Close p's idle connections (one died: its siblings likely too). */
void fd_upstream_keepalive_close_peer(fd_upstream_peer_t *p);

/* --- active health checks (fd_upstream_health.c) --- */

/* Load (the master): parse health_check, and give each server of the
 * group its entry in the table every process shares. */
int fd_upstream_health_parse(fd_conf_t *cf, fd_upstream_t *up,
                             const char *text);
int fd_upstream_health_bind(fd_conf_t *cf, fd_upstream_t *up);
/* 0 while the server's health check has taken it out */
int fd_upstream_health_ok(const fd_upstream_peer_t *p);
/* Worker start: the probes of these groups' servers (they end with the
 * worker). */
void fd_upstream_health_start(fd_upstream_t **ups, unsigned n);
void fd_upstream_health_status(fd_status_t *st, fd_upstream_t **ups,
                               unsigned n);

/* --- server = NAME:PORT resolve (fd_upstream_resolve.c) --- */

/* Load (the master): the FD_UPSTREAM_RESOLVE_MAX slots up->peers[first
 * ..] that fd_upstream.c added for NAME:PORT become its, empty, bound to
 * its entry in the address table every process shares (found again
 * after a reload: the addresses go on). */
int fd_upstream_resolve_add(fd_conf_t *cf, fd_upstream_t *up,
                            const char *host, unsigned port, unsigned first);
/* Worker start: a c-ares channel per resolving group, its queries (one
 * per name and interval for the whole fastd) and each group's slots
 * filled from the table. */
void fd_upstream_resolve_start(fd_upstream_t **ups, unsigned n);
/* Bring up's slots to the table's current addresses, when they changed
 * (an atomic load per name otherwise): fd_upstream_pick() calls it. */
void fd_upstream_resolve_sync(fd_upstream_t *up);
void fd_upstream_resolve_status(fd_status_t *st, fd_upstream_t **ups,
                                unsigned n);

/* One address of a resolved name, as the shared table keeps it. */
typedef struct {
    uint8_t family;            /* AF_INET, AF_INET6; 0: an empty slot */
    uint8_t addr[16];
    uint64_t vacated;          /* when it was last emptied (ms) */
} fd_upstream_addr_t;

/* The slots after a new answer got[0..n): addresses still in it keep
 * their slot, gone ones are emptied, new ones take the empty slot
 * emptied longest ago (so a slot whose old address may still have
 * requests in flight is reused last). 1 when anything changed. */
int fd_upstream_resolve_merge(fd_upstream_addr_t *slots, unsigned nslots,
                              const fd_upstream_addr_t *got, unsigned n,
                              uint64_t now);

/* Used by fd_upstream_resolve.c: the hash ring again after the servers
 * changed (FD_ERROR: out of memory, the old ring stays), and a slot's
 * status entry for its new address (counters from 0) or its absence. */
int fd_upstream_ring_update(fd_upstream_t *up);
void fd_upstream_count_live(fd_upstream_t *up);
void fd_upstream_peer_renamed(fd_upstream_peer_t *p);

/* --- status --- */

/* upstream="U",server="S", escaped for the status writer */
void fd_upstream_status_labels(char *dst, size_t size, const char *up,
                               const char *server);

#define FD_UPSTREAM_SHM_PEERS 64 /* servers with counters, all groups */

typedef struct {
    char upstream[32];
    char server[48];
    uint64_t healthy;          /* gauge */
    uint64_t active;           /* gauge */
    uint64_t requests;
    uint64_t fails;
    uint64_t responses;        /* response headers received */
    uint64_t response_msec;    /* sum of their times */
} fd_upstream_shm_peer_t;

/* The status area of one worker slot (the owning module's shm_size). */
typedef struct {
    fd_upstream_shm_peer_t peer[FD_UPSTREAM_SHM_PEERS];
} fd_upstream_shm_t;

/* Worker start: the groups of the configuration, in the order their
 * servers get status entries, and this worker's area (NULL: none). */
void fd_upstream_init_worker(fd_upstream_t **ups, unsigned n,
                             fd_upstream_shm_t *area);
/* The module hooks of fd_status.h for an fd_upstream_shm_t area. */
void fd_upstream_status(fd_status_t *st, const void *area, unsigned worker);
void fd_upstream_status_shared(fd_status_t *st);
void fd_upstream_retire(void *retired_area, const void *area);

#endif
