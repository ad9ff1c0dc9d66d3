/*
 * The worker process: one epoll loop, its listening sockets, accepted
 * connections and timers. The protocol of each listening address (an
 * fd_proto_t: HTTP/1.1, fd_http.c) does the rest.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "fd_core.h"
#include "fd_proctitle.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_module.h"
#include "fd_offload.h"
#include "fd_sendq.h"
#include "fd_ssl.h"
#include "fd_realip.h"
#include "fd_http.h"
#include "fd_uring.h"
#ifdef FD_HTTP3
#include "fd_quic.h"
#endif

fd_worker_t *fd_worker;
static fd_worker_t worker;
/* the socket's peer of a connection whose address a PROXY header gave
 * (c->proxied), indexed by fd; reserved whole, a page is touched only by
 * a connection that came with a header, so that fd_connection_t stays
 * small */
static fd_addr_t *hop_mem;

static void pp_event(fd_event_t *ev, uint32_t events);
static fd_timer_t accept_timer;
static int accept_paused;
/*
 * An episode of accept4() failing for want of descriptors or memory: it
 * is logged when it starts and when it ends, with the count, not at each
 * retry (one every ACCEPT_RETRY_MSEC while it lasts). It ends when the
 * backlog is empty (EAGAIN), not at the first accept that works: as
 * connections close, the waiting ones take the descriptors again at once,
 * and that is the same shortage.
 */
static struct {
    unsigned long failures; /* 0: no episode */
    fd_msec_t start;
    fd_msec_t logged;       /* last line about it */
} accept_episode;
#define ACCEPT_RETRY_MSEC 100
/* a long episode says it is still on this often */
#define ACCEPT_REMIND_MSEC (60 * 1000)
static uint32_t conn_ids;

/* Exit code of a worker that cannot start: the master does not respawn
 * it (it would fail the same way, in a loop). */
#define FD_WORKER_FATAL 2

volatile sig_atomic_t fd_sig_quit, fd_sig_terminate, fd_sig_reopen;

/* --- connections --- */

/*
 * The connection structs: one table, reserved whole, whose pages are
 * touched as they are used. Under epoll it is indexed by descriptor.
 * Under io_uring an idle keep-alive connection parks (below) and gives
 * its struct back, so the table is a pool there, reused last-freed first
 * (the warmest in cache), and holds as many as are busy, not as are open.
 * A closed connection's struct stays as it was left (descriptor -1,
 * state FREE) until it is handed out again, at an accept or a wake in the
 * loop, never inside another connection's handler.
 */
static fd_connection_t *conn_mem;
static uint32_t *conn_free; /* io_uring: the pool's free structs, a stack */
static unsigned conn_nfree, conn_top; /* ... and its used part */

static void conn_timer(fd_timer_t *t);

/*
 * A struct for a connection on fd (< max_conns), its stream set up over
 * plain TCP. The pool never runs out: a struct in use holds a descriptor
 * of its own below max_conns, and the table has max_conns of them.
 */
static fd_connection_t *conn_new(int fd, unsigned ls_index)
{
    fd_connection_t *c;

    if (!fd_event_uring)
        c = &conn_mem[fd];
    else if (conn_nfree)
        c = &conn_mem[conn_free[--conn_nfree]];
    else
        c = &conn_mem[conn_top++];
    {
        /* epoll: an event for the struct's last user, later in the same
         * batch, is told apart by this bit (fd_event_turn) */
        unsigned instance = c->s.ev.instance;
        memset(c, 0, sizeof(*c));
        c->s.ev.instance = !instance;
    }
    c->s.ev.stream = 1;
    c->s.ev.fd = fd;
    c->s.tp = &fd_transport_tcp;
    c->s.et = fd_worker->cycle->events.edge_triggered != 0;
    c->s.writable = 1; /* a new socket takes output */
    c->s.timer.handler = conn_timer;
    c->ls_index = (uint16_t)ls_index;
    return c;
}

static void conn_put(fd_connection_t *c)
{
    if (fd_event_uring)
        conn_free[conn_nfree++] = (uint32_t)(c - conn_mem);
}

void fd_connection_set_state(fd_connection_t *c, int state)
{
    static const size_t gauge[] = {
        [FD_CONN_IDLE] = offsetof(fd_stats_t, conn_idle),
        [FD_CONN_READING] = offsetof(fd_stats_t, conn_reading),
        [FD_CONN_BUSY] = offsetof(fd_stats_t, conn_writing),
        [FD_CONN_LINGER] = offsetof(fd_stats_t, conn_writing),
    };

    if (c->state == state)
        return;
    if (c->state != FD_CONN_FREE)
        (*(uint64_t *)((char *)fd_stats + gauge[c->state]))--;
    if (state != FD_CONN_FREE)
        (*(uint64_t *)((char *)fd_stats + gauge[state]))++;
    c->state = (uint8_t)state;
}

/* Lazy, as every stream's (fd_stream_set_deadline): conn_timer re-arms
 * when it fires before the deadline. */
void fd_connection_set_timeout(fd_connection_t *c, fd_msec_t ms)
{
    fd_stream_set_deadline(&c->s, ms);
}

static void conn_timer(fd_timer_t *t)
{
    fd_connection_t *c = (fd_connection_t *)((char *)t -
                                             offsetof(fd_connection_t, s.timer));
    int32_t left;

    if (c->s.deadline == 0)
        return;
    left = fd_msec32_diff(c->s.deadline, (uint32_t)fd_current_msec);
    if (left > 0) {
        fd_timer_add(&c->s.timer, (fd_msec_t)left);
        return;
    }
    fd_log_conn_id = c->id;
    if (c->s.ev.handler == pp_event) {
        fd_log_error(FD_LOG_INFO, 0, "client timed out sending the PROXY "
                     "protocol header");
        fd_connection_close(c);
    } else {
        fd_conn_listening(c)->proto->timeout(c);
    }
    fd_log_conn_id = 0;
}

/*
 * Open connections per client address (max_conns_per_ip): a chained hash
 * table, kept only when some server sets the limit. A connection counts
 * from accept to close, idle keep-alive included; the limit is checked
 * per request against the server the request reached (fd_http.c).
 */
typedef struct ip_count_s {
    struct ip_count_s *next;
    uint32_t n;
    uint8_t family;
    uint8_t addr[16];
} ip_count_t;

#define IP_BUCKETS 4096
static ip_count_t **ip_table;
static ip_count_t *ip_free;

static ip_count_t **ip_slot_of(unsigned family, const uint8_t *a)
{
    size_t k = family == AF_INET6 ? 16 : 4;
    ip_count_t **p;

    for (p = &ip_table[fd_hash(a, k) & (IP_BUCKETS - 1)]; *p;
         p = &(*p)->next)
        if ((*p)->family == family && memcmp((*p)->addr, a, k) == 0)
            break;
    return p;
}

static ip_count_t **ip_slot(const fd_connection_t *c)
{
    return ip_slot_of(c->family, c->addr);
}

static void ip_count_add(fd_connection_t *c)
{
    ip_count_t **p, *e;

    if (ip_table == NULL) {
        ip_table = calloc(IP_BUCKETS, sizeof(*ip_table));
        if (ip_table == NULL)
            return;
    }
    p = ip_slot(c);
    if (*p == NULL) {
        if (ip_free) {
            e = ip_free;
            ip_free = e->next;
        } else if ((e = malloc(sizeof(*e))) == NULL) {
            return; /* not counted: never limited */
        }
        e->next = NULL;
        e->n = 0;
        e->family = c->family;
        memcpy(e->addr, c->addr, sizeof(e->addr));
        *p = e;
    }
    (*p)->n++;
    c->ip_counted = 1;
}

static void ip_count_drop(ip_count_t **p)
{
    ip_count_t *e = *p;

    if (e == NULL || --e->n > 0)
        return;
    *p = e->next;
    e->next = ip_free;
    ip_free = e;
}

static void ip_count_del(fd_connection_t *c)
{
    c->ip_counted = 0;
    ip_count_drop(ip_slot(c));
}

void *fd_connection_ip_take(fd_connection_t *c)
{
    if (!c->ip_counted)
        return NULL;
    c->ip_counted = 0;
    return *ip_slot(c); /* its count stays >= 1 until fd_ip_release() */
}

void fd_ip_release(void *ref)
{
    ip_count_t *e = ref;

    if (e)
        ip_count_drop(ip_slot_of(e->family, e->addr));
}

unsigned fd_connection_ip_count(fd_connection_t *c)
{
    ip_count_t *e;

    if (!c->ip_counted)
        return 0;
    e = *ip_slot(c);
    return e ? e->n : 0;
}

/* The end of c's struct: counted out, given back; its socket is closed
 * (fd_connection_close) or has moved to a module (fd_connection_detach) */
static void conn_end(fd_connection_t *c, int detached)
{
    fd_timer_del(&c->s.timer);
    c->s.deadline = 0;
    fd_conn_listening(c)->proto->release(c);
    fd_connection_set_state(c, FD_CONN_FREE);
    if (c->ip_counted)
        ip_count_del(c);
    if (!detached) {
        fd_stream_close_transport(&c->s);
        fd_event_close(&c->s.ev);
    }
    conn_put(c);
    fd_worker->nconns--;
    fd_stats->conn_active--;
    if (fd_worker->quitting && fd_worker->nconns + fd_worker->nheld == 0)
        fd_sig_terminate = 1;
}

void fd_connection_close(fd_connection_t *c)
{
    if (c->s.ev.fd < 0) {
        /* a second close would corrupt the connection count */
        fd_log_error(FD_LOG_ALERT, 0, "connection closed twice");
        return;
    }
    conn_end(c, 0);
}

void fd_connection_detach(fd_connection_t *c)
{
    conn_end(c, 1);
}

/*
 * Parking (io_uring): an idle keep-alive connection over plain TCP,
 * with nothing held (no request state, no TLS, no bytes unread), gives
 * its struct back to the pool and keeps what it needs to go on in its
 * ring slot: 64 bytes in all for an idle connection, where the struct
 * and the slot took 160. The ring's multishot receive stays armed; its
 * next completion wakes the connection (park_wake) into a fresh struct,
 * the same connection to everything above (id, address, request count,
 * deadline). Connections park at the end of the loop turn in which they
 * went idle (fd_connection_park only notes them): nothing up the stack
 * of the handler that made one idle sees its struct go.
 *
 * The keep-alive timeout is one value for every connection, so parked
 * connections are in the order of their deadlines: a list by slot, whose
 * head one timer waits for. A graceful stop wakes them all first.
 */
typedef struct {
    uint32_t requests, id, deadline;
    uint32_t prev, next;       /* the parked list, by slot; 0: none */
    uint8_t addr[16];
    uint16_t port;
    uint8_t ls_index;
    uint8_t family:4;
    uint8_t ip_counted:1;
    uint8_t proxied:1;
    uint8_t nodelay:1;
} parked_t;

_Static_assert(sizeof(parked_t) <= FD_URING_PARK,
               "a parked connection outgrew its slot's room");

static uint32_t park_head, park_tail;
static fd_timer_t park_timer;
static struct {
    fd_connection_t *c;
    uint32_t id;
} *to_park;
static unsigned nto_park, to_park_cap;
static fd_posted_t park_post;

static parked_t *park_rec(uint32_t slot)
{
    int fd;

    return fd_uring_parked(slot, &fd);
}

static void park_unlink(uint32_t slot, parked_t *p)
{
    if (p->prev)
        park_rec(p->prev)->next = p->next;
    else
        park_head = p->next;
    if (p->next)
        park_rec(p->next)->prev = p->prev;
    else
        park_tail = p->prev;
}

static int park_ok(const fd_connection_t *c)
{
    return c->s.ev.fd >= 0 && c->state == FD_CONN_IDLE && c->h == NULL &&
           !c->closing && !c->linger && !c->h2 && c->s.tls == NULL &&
           c->s.tp == &fd_transport_tcp && c->s.registered && !c->s.eof &&
           !c->s.error && c->s.deadline != 0 && c->ls_index <= 255 &&
           c->family <= 15 &&
           c->s.ev.handler == fd_conn_listening(c)->proto->handler;
}

static void park(fd_connection_t *c)
{
    uint32_t slot;
    parked_t *p;

    if (!park_ok(c) || (p = fd_uring_park(&c->s.ev, &slot)) == NULL)
        return;
    p->requests = c->requests;
    p->id = c->id;
    p->deadline = c->s.deadline;
    memcpy(p->addr, c->addr, sizeof(p->addr));
    p->port = c->port;
    p->ls_index = (uint8_t)c->ls_index;
    p->family = c->family & 15;
    p->ip_counted = c->ip_counted;
    p->proxied = c->proxied;
    p->nodelay = c->s.nodelay;
    p->prev = park_tail;
    if (park_tail)
        park_rec(park_tail)->next = slot;
    else
        park_head = slot;
    park_tail = slot;
    fd_stats->conn_parked++;
    fd_timer_del(&c->s.timer);
    /* still idle in the gauges; the struct is free */
    c->state = FD_CONN_FREE;
    c->s.ev.fd = -1;
    conn_put(c);
    if (!fd_timer_armed(&park_timer)) {
        int32_t left = fd_msec32_diff(p->deadline, (uint32_t)fd_current_msec);
        fd_timer_add(&park_timer, left > 0 ? (fd_msec_t)left : 0);
    }
}

static void park_noted(void *data)
{
    unsigned i;

    (void)data;
    for (i = 0; i < nto_park; i++)
        if (to_park[i].c->id == to_park[i].id && !fd_worker->quitting)
            park(to_park[i].c);
    nto_park = 0;
}

void fd_connection_park(fd_connection_t *c)
{
    /* the rest is for the end of the turn: the stream registers with the
     * ring after its handler made it idle (fd_http.c) */
    if (!fd_event_uring || fd_worker->quitting ||
        c->s.tp != &fd_transport_tcp || c->h2)
        return;
    if (nto_park == to_park_cap) {
        unsigned cap = to_park_cap ? to_park_cap * 2 : 256;
        void *p = realloc(to_park, cap * sizeof(*to_park));
        if (p == NULL)
            return; /* it stays as it is */
        to_park = p;
        to_park_cap = cap;
    }
    to_park[nto_park].c = c;
    to_park[nto_park].id = c->id;
    if (nto_park++ == 0) {
        park_post.handler = park_noted;
        park_post.data = NULL;
        fd_event_post(&park_post);
    }
}

/* A parked connection back in a struct (NULL: the slot is not parked). */
static fd_connection_t *park_wake(uint32_t slot)
{
    fd_connection_t *c;
    int fd;
    parked_t *p = fd_uring_parked(slot, &fd), rec;

    if (p == NULL)
        return NULL;
    rec = *p;
    park_unlink(slot, p);
    fd_stats->conn_parked--;
    c = conn_new(fd, rec.ls_index);
    c->s.ev.handler = fd_conn_listening(c)->proto->handler;
    c->s.registered = 1;
    c->s.handshaken = 1;
    c->s.nodelay = rec.nodelay;
    c->s.deadline = rec.deadline;
    c->requests = rec.requests;
    c->id = rec.id;
    c->family = rec.family;
    c->port = rec.port;
    memcpy(c->addr, rec.addr, sizeof(c->addr));
    c->ip_counted = rec.ip_counted;
    c->proxied = rec.proxied;
    c->state = FD_CONN_IDLE; /* counted so all along */
    fd_uring_unpark(slot, &c->s.ev);
    {
        int32_t left = fd_msec32_diff(rec.deadline, (uint32_t)fd_current_msec);
        fd_timer_add(&c->s.timer, left > 0 ? (fd_msec_t)left : 0);
    }
    return c;
}

static void park_wake_hook(uint32_t slot)
{
    (void)park_wake(slot);
}

/* the oldest parked connections' keep-alive timeouts */
static void park_expire(fd_timer_t *t)
{
    (void)t;
    while (park_head) {
        parked_t *p = park_rec(park_head);
        int32_t left = fd_msec32_diff(p->deadline, (uint32_t)fd_current_msec);
        fd_connection_t *c;

        if (left > 0) {
            fd_timer_add(&park_timer, (fd_msec_t)left);
            return;
        }
        c = park_wake(park_head);
        conn_timer(&c->s.timer);
    }
}

/* every parked connection back in a struct (a graceful stop) */
static void park_wake_all(void)
{
    while (park_head)
        (void)park_wake(park_head);
    fd_timer_del(&park_timer);
}

void fd_worker_hold(int delta)
{
    fd_worker->nheld += (unsigned)delta;
    if (fd_worker->quitting && fd_worker->nconns + fd_worker->nheld == 0)
        fd_sig_terminate = 1;
}

size_t fd_connection_addr_text(fd_connection_t *c, char *buf, size_t size)
{
    fd_addr_t a;

    fd_connection_addr(c, &a);
    return fd_addr_text(&a, buf, size);
}

void fd_connection_addr(const fd_connection_t *c, fd_addr_t *a)
{
    a->family = c->family;
    a->port = c->port;
    memcpy(a->addr, c->addr, sizeof(a->addr));
}

void fd_connection_hop(const fd_connection_t *c, fd_addr_t *a)
{
    if (c->proxied)
        *a = hop_mem[c->s.ev.fd];
    else
        fd_connection_addr(c, a);
}

/*
 * The PROXY protocol (listen ... proxy_protocol): its header comes first,
 * before the TLS handshake or the HTTP/2 preface. It is peeked at, and
 * only its own bytes are taken from the socket once it is whole: what
 * follows stays there for the transport and the protocol, as if the
 * header had never been. So the stage waits on readiness, not on the
 * ring's receives (a copy of plain TCP that the ring does not take for
 * its own), and leaves the loop before the protocol starts.
 */
static fd_transport_t pp_transport;

static void pp_done(fd_connection_t *c, const fd_addr_t *src)
{
    fd_listening_t *ls = fd_conn_listening(c);

    if (c->s.registered) {
        fd_event_del(&c->s.ev);
        c->s.registered = 0;
    }
    if (c->s.tp == &pp_transport)
        c->s.tp = &fd_transport_tcp;
    c->s.ev.handler = NULL;
    if (src->family) {
        /* counted (max_conns_per_ip) and known as the real client */
        int counted = c->ip_counted;
        if (counted)
            ip_count_del(c);
        hop_mem[c->s.ev.fd].family = c->family;
        hop_mem[c->s.ev.fd].port = c->port;
        memcpy(hop_mem[c->s.ev.fd].addr, c->addr, sizeof(c->addr));
        c->family = src->family;
        c->port = src->port;
        memcpy(c->addr, src->addr, sizeof(c->addr));
        c->proxied = 1;
        if (counted)
            ip_count_add(c);
    }
    ls->proto->init(c);
}

static void pp_event(fd_event_t *ev, uint32_t events)
{
    fd_connection_t *c = (fd_connection_t *)ev;
    uint8_t buf[FD_PROXY_PROTOCOL_MAX];
    fd_addr_t src;
    ssize_t n;
    int len;

    fd_log_conn_id = c->id;
    fd_stream_events(&c->s, events);
    n = recv(c->s.ev.fd, buf, sizeof(buf), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EINTR) && !c->s.error) {
        len = FD_AGAIN;
    } else if (n <= 0) {
        fd_log_error(FD_LOG_INFO, n < 0 ? errno : 0, "client closed the "
                     "connection before the PROXY protocol header");
        goto close;
    } else {
        len = fd_proxy_protocol_parse(buf, (size_t)n, &src);
    }
    if (len == FD_AGAIN) {
        if (n > 0 && c->s.eof) {
            fd_log_error(FD_LOG_INFO, 0, "client sent a truncated PROXY "
                         "protocol header");
            goto close;
        }
        if (!c->s.registered) {
            if (fd_event_add(&c->s.ev, EPOLLIN | EPOLLRDHUP | EPOLLET) < 0) {
                fd_log_error(FD_LOG_ALERT, errno, "epoll_ctl() failed");
                goto close;
            }
            c->s.registered = 1;
        }
        fd_log_conn_id = 0;
        return;
    }
    if (len < 0) {
        fd_log_error(FD_LOG_INFO, 0, "client sent a bad PROXY protocol "
                     "header");
        goto close;
    }
    /* the header's bytes, exactly: they are in the socket already */
    if (recv(c->s.ev.fd, buf, (size_t)len, 0) != len) {
        fd_log_error(FD_LOG_INFO, errno, "recv() of the PROXY protocol "
                     "header failed");
        goto close;
    }
    pp_done(c, &src);
    fd_log_conn_id = 0;
    return;
close:
    fd_connection_close(c);
    fd_log_conn_id = 0;
}

static void pp_start(fd_connection_t *c, fd_listening_t *ls)
{
    if (ls->ssl) {
        if (fd_ssl_accept(&c->s, ls) != FD_OK) {
            fd_connection_close(c);
            return;
        }
    } else {
        c->s.tp = &pp_transport;
    }
    c->s.ev.handler = pp_event;
    fd_connection_set_state(c, FD_CONN_READING);
    fd_connection_set_timeout(c, ls->servers[0]->proxy_protocol_timeout);
    pp_event(&c->s.ev, 0); /* TCP_DEFER_ACCEPT: it is usually here */
}

/*
 * Listening sockets leave epoll while accepts are paused: they stay
 * readable (the backlog is full of connections we cannot take), and a
 * level-triggered socket would wake the loop at once, every turn.
 */
static void accept_events(int on)
{
    fd_listening_t *ls;

    for (ls = fd_worker->cycle->listening; ls; ls = ls->next) {
        if (ls->ev.fd < 0)
            continue;
        if (!on)
            fd_event_del(&ls->ev);
        else if (fd_event_add(&ls->ev, EPOLLIN |
                              (fd_worker->cycle->events.accept ==
                                       FD_ACCEPT_EXCLUSIVE
                                   ? EPOLLEXCLUSIVE
                                   : 0)) < 0)
            fd_log_error(FD_LOG_ALERT, errno, "epoll_ctl(%s) failed",
                         ls->text);
    }
}

static void accept_failed(int err)
{
    if (accept_episode.failures++ == 0) {
        accept_episode.start = accept_episode.logged = fd_current_msec;
        fd_log_error(FD_LOG_ERR, err, "accept4() failed, accepting paused");
    } else if (fd_current_msec - accept_episode.logged >=
               ACCEPT_REMIND_MSEC) {
        accept_episode.logged = fd_current_msec;
        fd_log_error(FD_LOG_ERR, err, "accept4() still failing: %lu "
                     "failed calls over %lu ms, accepting paused",
                     accept_episode.failures,
                     (unsigned long)(fd_current_msec - accept_episode.start));
    }
}

/* the backlog is empty: an episode is over */
static void accept_episode_end(void)
{
    if (fd_likely(accept_episode.failures == 0))
        return;
    fd_log_error(FD_LOG_ERR, 0, "accepting resumed after %lu failed "
                 "accept4() call%s over %lu ms", accept_episode.failures,
                 accept_episode.failures == 1 ? "" : "s",
                 (unsigned long)(fd_current_msec - accept_episode.start));
    accept_episode.failures = 0;
}

static void accept_resume(fd_timer_t *t)
{
    fd_listening_t *ls;

    (void)t;
    if (!accept_paused)
        return;
    accept_paused = 0;
    if (fd_worker->quitting)
        return;
    accept_events(1);
    for (ls = fd_worker->cycle->listening; ls; ls = ls->next)
        if (ls->ev.fd >= 0 && !accept_paused)
            ls->ev.handler(&ls->ev, EPOLLIN);
}

static void accept_some(fd_listening_t *ls, unsigned max);

static void accept_handler(fd_event_t *ev, uint32_t events)
{
    (void)events;
    /* io_uring: a connection the ring took before accepting stopped is
     * served (Connection: close), as the drain serves the backlog's */
    if (accept_paused || (fd_worker->quitting && !fd_event_uring))
        return;
    accept_some((fd_listening_t *)ev, 64);
}

/* What waits in a socket's backlog as this worker stops (bounded). */
static void accept_drain(fd_listening_t *ls)
{
    accept_some(ls, 1024);
}

static void accept_some(fd_listening_t *ls, unsigned max)
{
    fd_event_t *ev = &ls->ev;
    fd_worker_t *w = fd_worker;
    unsigned i;

    for (i = 0; i < max; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        fd_connection_t *c;
        int fd = fd_event_accept(ev, (struct sockaddr *)&ss, &len);

        if (fd < 0) {
            int err = errno;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS ||
                err == ENOMEM) {
                /* out of descriptors: stop accepting for a while instead
                 * of spinning on a readable listening socket */
                accept_failed(err);
                accept_paused = 1;
                accept_events(0);
                fd_timer_add(&accept_timer, ACCEPT_RETRY_MSEC);
                return;
            }
            if (err == EAGAIN)
                accept_episode_end();
            if (err == EAGAIN || err == EINTR || err == ECONNABORTED)
                return;
            fd_log_error(FD_LOG_ERR, err, "accept4() failed");
            return;
        }
        if ((unsigned)fd >= w->max_conns ||
            w->nconns >= (unsigned)w->cycle->events.max_connections) {
            fd_log_error(FD_LOG_WARN, 0, "max_connections %ld reached, "
                         "closing new connection",
                         (long)w->cycle->events.max_connections);
            close(fd);
            continue;
        }
        c = conn_new(fd, ls->index);
        c->id = ++conn_ids;
        c->family = (uint8_t)ss.ss_family;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            memcpy(c->addr, &sin->sin_addr, 4);
            c->port = ntohs(sin->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            memcpy(c->addr, &sin6->sin6_addr, 16);
            c->port = ntohs(sin6->sin6_port);
        }
        if (w->cycle->conns_per_ip)
            ip_count_add(c);
        w->nconns++;
        fd_stats->conn_active++;
        fd_stats->conn_accepted++;
        fd_stats->conn_handled++;
        fd_log_conn_id = c->id;
        /* the transport, then what it carries */
        if (ls->proxy_protocol)
            pp_start(c, ls);
        else if (ls->ssl && fd_ssl_accept(&c->s, ls) != FD_OK)
            fd_connection_close(c);
        else
            ls->proto->init(c);
        fd_log_conn_id = 0;
        if (w->cycle->events.accept != FD_ACCEPT_REUSEPORT && i >= 8)
            return; /* share a common socket with the other workers */
    }
}

uint32_t fd_worker_conn_id(void)
{
    return ++conn_ids;
}

static int listen_start(fd_worker_t *w)
{
    fd_listening_t *ls;

    for (ls = w->cycle->listening; ls; ls = ls->next) {
        uint32_t ev = EPOLLIN;
        if (ls->udp)
            continue; /* its owner reads it (fd_stream_module.c) */
        if (ls->quic) {
            /* its own event (fd_quic.c); ls->ev.fd stays -1 */
#ifdef FD_HTTP3
            if (fd_quic_listen(ls, w) != FD_OK)
                return FD_ERROR;
#endif
            continue;
        }
        ls->ev.fd = ls->fds[ls->nfds > 1 ? w->index % ls->nfds : 0];
        ls->ev.handler = accept_handler;
        ls->ev.listen = 1;
        if (w->cycle->events.accept == FD_ACCEPT_EXCLUSIVE)
            ev |= EPOLLEXCLUSIVE;
        if (fd_event_add(&ls->ev, ev) < 0) {
            fd_log_error(FD_LOG_EMERG, errno, "epoll_ctl(%s) failed",
                         ls->text);
            return FD_ERROR;
        }
    }
    return FD_OK;
}

void fd_worker_stop_accepting(void)
{
    fd_listening_t *ls;

    /*
     * With reuseport this socket is this worker's alone: closing it resets
     * the connections still in its backlog (the kernel does not move them
     * to the other sockets of the group unless net.ipv4.tcp_migrate_req
     * is on). Take them first; they are answered with Connection: close.
     */
#ifdef FD_HTTP3
    fd_quic_quit(); /* GOAWAY, no new connections; the old ones finish */
#endif
    for (ls = fd_worker->cycle->listening; ls; ls = ls->next)
        if (ls->ev.fd >= 0 && !accept_paused)
            fd_event_del(&ls->ev); /* io_uring: accept4() from here */
    /* io_uring: the ring stops accepting now (not at the next turn, with
     * the socket still in its reuseport group), and what it accepted
     * before is served */
    fd_event_flush();
    if (fd_worker->cycle->events.accept == FD_ACCEPT_REUSEPORT &&
        !accept_paused)
        for (ls = fd_worker->cycle->listening; ls; ls = ls->next)
            if (ls->ev.fd >= 0)
                accept_drain(ls);
    for (ls = fd_worker->cycle->listening; ls; ls = ls->next)
        ls->ev.fd = -1;
    /* close the copies this process holds; the master keeps its own */
    for (ls = fd_worker->cycle->listening; ls; ls = ls->next)
        for (unsigned i = 0; i < ls->nfds; i++)
            close(ls->fds[i]);
}

/*
 * Graceful stop: an idle keep-alive connection is not cut at once (its
 * client may be sending a request right now, and would see an error); it
 * gets one more second, and a request that arrives is answered with
 * "Connection: close".
 */
#define FD_QUIT_IDLE_MSEC 1000

static void close_idle_soon(void)
{
    unsigned i;

    park_wake_all();
    for (i = 0; i < (fd_event_uring ? conn_top : fd_worker->max_conns); i++) {
        fd_connection_t *c = &conn_mem[i];
        const fd_proto_t *proto;
        int idle;

        if (c->s.ev.fd < 0 || c->state == FD_CONN_FREE)
            continue;
        proto = fd_conn_listening(c)->proto;
        if (proto->quit)
            proto->quit(c);
        if (c->s.ev.fd < 0)
            continue; /* it closed at once */
        idle = c->state == FD_CONN_IDLE ||
                   (c->state == FD_CONN_READING &&
                    fd_conn_listening(c)->proto->idle(c));
        if (idle && c->s.ev.fd >= 0 &&
            (c->s.deadline == 0 ||
             fd_msec32_diff(c->s.deadline, (uint32_t)fd_current_msec) >
                 FD_QUIT_IDLE_MSEC))
            fd_connection_set_timeout(c, FD_QUIT_IDLE_MSEC);
    }
}

static void quit_timer_handler(fd_timer_t *t)
{
    (void)t;
    fd_log_error(FD_LOG_NOTICE, 0, "shutdown_timeout expired with %u "
                 "connections and %u tunnels open", fd_worker->nconns,
                 fd_worker->nheld);
    fd_sig_terminate = 1;
}

static void worker_sig(int signo)
{
    switch (signo) {
    case SIGQUIT: fd_sig_quit = 1; break;
    case SIGTERM:
    case SIGINT: fd_sig_terminate = 1; break;
    case SIGUSR1: fd_sig_reopen = 1; break;
    }
}

/*
 * What the loop needs before its first turn: the descriptor limit, the
 * connection table, epoll, timers, buffers, the modules, batched sends and
 * the offload pool (listening comes after, in listen_start()).
 */
static int worker_init(fd_worker_t *w, fd_cycle_t *cycle)
{
    struct rlimit rl;
    unsigned m;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = cycle->main.rlimit_nofile
                          ? (rlim_t)cycle->main.rlimit_nofile
                          : (rlim_t)cycle->events.max_connections * 2 + 64;
        /* an explicit rlimit_nofile is the limit, lower or higher; the
         * default only ever raises it */
        if (rl.rlim_cur < want ||
            (cycle->main.rlimit_nofile && rl.rlim_cur > want)) {
            struct rlimit nl = {fd_min(want, rl.rlim_max), rl.rlim_max};
            if (geteuid() == 0 && rl.rlim_max < want)
                nl.rlim_cur = nl.rlim_max = want;
            if (setrlimit(RLIMIT_NOFILE, &nl) == 0)
                rl = nl;
        }
        w->max_conns = (unsigned)fd_min(rl.rlim_cur, (rlim_t)1 << 22);
    } else {
        w->max_conns = 65536;
    }
    conn_mem = mmap(NULL, (size_t)w->max_conns * sizeof(fd_connection_t),
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                    MAP_NORESERVE, -1, 0);
    conn_free = mmap(NULL, (size_t)w->max_conns * sizeof(*conn_free),
                     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                     MAP_NORESERVE, -1, 0);
    if (conn_mem == MAP_FAILED || conn_free == MAP_FAILED) {
        fd_log_error(FD_LOG_EMERG, errno, "mmap() of connections failed");
        return FD_ERROR;
    }
    /* the hops' addresses behind PROXY headers: mapped whatever this
     * cycle's listeners say (reserved, not used: a page is touched only
     * by a connection that came with a header), so a later cycle's
     * proxy_protocol listener finds it (the fuzz harness switches cycles
     * in one worker) */
    hop_mem = mmap(NULL, (size_t)w->max_conns * sizeof(fd_addr_t),
                   PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (hop_mem == MAP_FAILED) {
        fd_log_error(FD_LOG_EMERG, errno, "mmap() failed");
        return FD_ERROR;
    }
    pp_transport = fd_transport_tcp;
    pp_transport.name = "tcp+proxy";
    /* the PROXY header is peeked at in the socket (pp_event): the ring
     * must not take its bytes first */
    pp_transport.ring_rx = 0;
    if (fd_event_init(cycle->events.backend) != FD_OK ||
        fd_timer_init() != FD_OK) {
        fd_log_error(FD_LOG_EMERG, errno, "epoll_create1() failed");
        return FD_ERROR;
    }
    /* completions are edges: the level-triggered mode is epoll's */
    if (fd_event_uring)
        cycle->events.edge_triggered = 1;
    w->rbufs.size = cycle->http.max_header_size;
    w->rbufs.keep = 1024;
    w->wbufs.size = 16384;
    w->wbufs.keep = 1024;
    accept_timer.handler = accept_resume;
    park_timer.handler = park_expire;
    fd_uring_wake = park_wake_hook;
    fd_time_update();

    fd_http_early_on = 0;
    for (m = 0; m < fd_nmodules; m++)
        if (fd_modules[m]->init_worker &&
            fd_modules[m]->init_worker(w) != FD_OK)
            return FD_ERROR;
    /* after the cluster module: ssl_session_ticket_keys = redis asks it */
    fd_ssl_tickets_init_worker(cycle, w->index);
    if (fd_sendq_init(cycle->events.batch_sends) != FD_OK ||
        fd_offload_init_worker(w) != FD_OK)
        return FD_ERROR;
    return FD_OK;
}

int fd_worker_run(fd_cycle_t *cycle, unsigned index, unsigned slot)
{
    fd_worker_t *w = &worker;
    struct epoll_event *events;
    struct sigaction sa;
    sigset_t set, waitset;
    fd_timer_t quit_timer = {.handler = quit_timer_handler};
    unsigned m;

    fd_worker = w;
    w->cycle = cycle;
    w->index = index;
    w->slot = slot;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = worker_sig;
    sigaction(SIGQUIT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigemptyset(&set);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &waitset);
    sigdelset(&waitset, SIGQUIT);
    sigdelset(&waitset, SIGTERM);
    sigdelset(&waitset, SIGINT);
    sigdelset(&waitset, SIGUSR1);

    if (worker_init(w, cycle) != FD_OK || listen_start(w) != FD_OK)
        return FD_WORKER_FATAL;

    events = malloc(sizeof(*events) * (size_t)cycle->events.max_events);
    if (events == NULL) {
        fd_log_error(FD_LOG_EMERG, errno, "malloc() of events failed");
        return FD_WORKER_FATAL;
    }
    for (;;) {
        if (fd_sig_terminate)
            break;
        if (fd_sig_quit && !w->quitting) {
            fd_sig_quit = 0;
            w->quitting = 1;
            fd_proctitle_set("worker process is shutting down");
            fd_worker_stop_accepting();
            close_idle_soon();
            fd_timer_add(&quit_timer, cycle->main.shutdown_timeout);
            if (w->nconns + w->nheld == 0)
                break;
        }
#ifdef FD_HTTP3
        if (fd_sig_quit) {
            /* again, while stopping: the master stops every worker, or
             * a newer reload the one this worker's sockets were left to */
            fd_sig_quit = 0;
            fd_quic_quit_again();
        }
#endif
        if (fd_sig_reopen) {
            fd_sig_reopen = 0;
            fd_log_reopen(fd_log);
            for (m = 0; m < fd_nmodules; m++)
                if (fd_modules[m]->reopen)
                    fd_modules[m]->reopen(w);
        }
        if (fd_event_turn(events, (int)cycle->events.max_events, &waitset,
                          -1) != FD_OK)
            break;
    }
    fd_ssl_tickets_exit_worker(); /* before the cluster's client stops */
    for (m = 0; m < fd_nmodules; m++)
        if (fd_modules[m]->exit_worker)
            fd_modules[m]->exit_worker(w);
    fd_offload_exit_worker(w);
    fd_sendq_exit();
    fd_event_exit();
    free(events);
    return 0;
}

#ifdef FD_FUZZ
/*
 * For tests/fuzz/fuzz_request.c, which runs this loop inside the fuzzer's
 * process, one configuration after another and one turn at a time. The
 * first call sets the worker up as fd_worker_run() does (no signals);
 * later ones start the modules' work for cycle and listen on its
 * sockets, or (NULL) end the modules' work for the current one, before
 * it is freed.
 */
int fd_worker_fuzz_cycle(fd_cycle_t *cycle)
{
    fd_worker_t *w = &worker;
    unsigned m;

    if (fd_worker == NULL) {
        fd_worker = w;
        w->cycle = cycle;
        return worker_init(w, cycle) == FD_OK ? listen_start(w) : FD_ERROR;
    }
    if (cycle == NULL) {
        accept_events(0);
        for (m = 0; m < fd_nmodules; m++)
            if (fd_modules[m]->exit_worker)
                fd_modules[m]->exit_worker(w);
        return FD_OK;
    }
    w->cycle = cycle;
    fd_http_early_on = 0;
    for (m = 0; m < fd_nmodules; m++)
        if (fd_modules[m]->init_worker &&
            fd_modules[m]->init_worker(w) != FD_OK)
            return FD_ERROR;
    return listen_start(w);
}

/* One turn, waiting at most max_wait ms. */
int fd_worker_fuzz_turn(int max_wait)
{
    static struct epoll_event events[64];

    return fd_event_turn(events, (int)fd_nelems(events), NULL, max_wait);
}
#endif
