/*
 * The io_uring event backend ([events] backend = io_uring), through
 * liburing. What the loop asks of epoll it gets here, with fewer
 * syscalls:
 *
 *   - a plain TCP stream's bytes arrive by multishot receive into a ring
 *     of provided buffers: no recv() per read, and a connection that
 *     waits holds no buffer (the kernel picks one when bytes come);
 *   - a listening socket accepts by multishot accept: no accept4() per
 *     connection;
 *   - the turn's batched sends (fd_sendq.c) go in as SEND/SENDMSG entries
 *     and are submitted with the wait: one io_uring_enter() per turn;
 *   - a plain stream's writability is a one-shot poll, armed when a send
 *     would block (fd_stream_wait_out): a socket that takes everything
 *     costs no poll at all;
 *   - everything else is a poll: a registration that asks for EPOLLET
 *     (TLS streams, whose OpenSSL reads the socket itself; HTTP/2; the
 *     splice pump) gets a multishot poll, which fires as readiness
 *     arrives, as epoll's EPOLLET does; one that does not (the offload
 *     pool's eventfd, the resolver's sockets, libpq's) gets a one-shot
 *     poll armed again after its handler ran, which fires again while
 *     the readiness lasts, as epoll's level-triggered default does (a
 *     handler that reads once, not to EAGAIN, is called again).
 *
 * A registration is a slot; every entry it submits carries the slot's
 * index, its generation and an arming sequence in user_data, so that a
 * completion for a registration that is gone (a closed connection, a
 * re-armed poll) is recognised and dropped, and the buffer it carries
 * goes back to the ring. Closing a registered descriptor cancels what
 * waits on it (fd_event_close): an armed request holds the socket open.
 *
 * Received bytes are handed to the stream's handler at once (EPOLLIN)
 * and read from the buffer by fd_stream_recv(); what the handler leaves
 * unread is copied aside (the stream's rx queue) and the buffer goes
 * back, so a ring buffer never outlives the completion that brought it.
 * A stream that stops reading (its peer is slow) stops the ring too: past
 * RX_PAUSE unread bytes its receive is cancelled, and re-armed when the
 * reader has caught up; the socket buffer and TCP's window do the rest,
 * as with epoll.
 */
#include <liburing.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fd_core.h"
#include "fd_sendq.h"
#include "fd_stream.h"
#include "fd_uring.h"

#define RING_ENTRIES 1024     /* submission entries; completions 4x */
#define CQ_BATCH 4096
#define BUF_COUNT 512         /* provided receive buffers, a power of 2 */
#define BUF_SIZE 8192
#define BGID 0
#define RX_PAUSE (64 * 1024)  /* unread bytes that stop a stream's ring */
#define RX_BLOCK (16 * 1024)  /* an rx queue is a chain of these */
#define RX_CACHE 64           /* empty blocks kept for reuse (1 MB) */
#define RX_MERGE (64 * 1024)  /* a batch's receives handed on at once */
#define SLOT_MAX (1u << 22)   /* registrations (user_data holds 24 bits) */

enum { K_IGNORE, K_POLL, K_RECV, K_ACCEPT, K_SEND };

typedef struct rxq_s {
    struct rxq_s *next;        /* in the chain, or in the cache */
    struct rxq_s *tail;        /* the head block's: the chain's last */
    size_t total;              /* the head block's: unread bytes */
    uint32_t off, len;
    char data[RX_BLOCK];
} rxq_t;

/*
 * A registration. A parked one (fd_uring_park) has no event: the union
 * holds its owner's record instead of the receive queue, and the slot is
 * all that the idle connection costs.
 */
typedef struct {
    uint32_t gen;
    int fd;
    uint32_t mask;             /* the events asked for */
    uint8_t poll:1;            /* a poll is armed */
    uint8_t recv:1;            /* a multishot receive is armed */
    uint8_t accept:1;          /* a multishot accept is armed */
    uint8_t ring_rx:1;         /* bytes come by the ring's receive */
    uint8_t eof:1;             /* the receive saw the peer's end */
    uint8_t paused:1;          /* receive stopped: rx is full */
    uint8_t on:1;              /* a listener that is accepting */
    uint8_t parked:1;          /* ev is NULL, u.park is the owner's */
    uint8_t poll_seq:4, recv_seq:4; /* user_data holds 4 bits of each */
    uint8_t err;               /* the receive's errno */
    uint8_t batch;             /* its receives in this turn's batch */
    fd_event_t *ev;            /* NULL: free, or parked */
    union {
        struct {
            rxq_t *rx;         /* bytes received and not yet read */
            uint32_t next_free;
        } a;
        unsigned char park[FD_URING_PARK];
    } u;
} slot_t;

_Static_assert(sizeof(slot_t) == 64, "an io_uring slot is 64 bytes");

int fd_event_uring;

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;
static slot_t *slots;
static uint32_t nslots, free_head;
static struct io_uring_cqe batch[CQ_BATCH];
static rxq_t *rx_cache;
static unsigned rx_ncache;

/* the receive being handed to its stream's handler */
static struct {
    uint32_t idx, gen;
    const char *buf;
    size_t off, len;
} cur;

void (*fd_uring_wake)(uint32_t slot);

/* the connection being handed to its listener's handler */
static int acc_fd = -1, acc_err, in_accept;

static uint64_t ud(uint32_t idx, unsigned kind, unsigned seq)
{
    return (uint64_t)slots[idx].gen << 32 | (uint64_t)idx << 8 |
           (seq & 15) << 4 | kind;
}

struct io_uring_sqe *fd_uring_sqe(void)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

    if (sqe == NULL) {
        /* full: what is queued goes now, in a turn's middle */
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
}

uint64_t fd_uring_send_tag(unsigned index)
{
    return (uint64_t)index << 8 | K_SEND;
}

static void cancel(uint32_t idx, unsigned kind, unsigned seq)
{
    struct io_uring_sqe *sqe = fd_uring_sqe();

    if (sqe == NULL)
        return;
    io_uring_prep_cancel64(sqe, ud(idx, kind, seq), 0);
    io_uring_sqe_set_data64(sqe, K_IGNORE);
}

static int arm_poll(uint32_t idx)
{
    slot_t *sl = &slots[idx];
    struct io_uring_sqe *sqe;
    unsigned mask = sl->mask & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI);

    if (sl->ring_rx)
        mask &= EPOLLOUT;
    if (mask == 0)
        return 0;
    if ((sqe = fd_uring_sqe()) == NULL)
        return -1;
    /* once: when a send would block (fd_uring_want_out), or level-
     * triggered (on_poll arms it again after the handler) */
    if (sl->ring_rx || !(sl->mask & EPOLLET))
        io_uring_prep_poll_add(sqe, sl->fd, mask);
    else
        io_uring_prep_poll_multishot(sqe, sl->fd, mask);
    io_uring_sqe_set_data64(sqe, ud(idx, K_POLL, ++sl->poll_seq));
    sl->poll = 1;
    return 0;
}

static int arm_recv(uint32_t idx)
{
    slot_t *sl = &slots[idx];
    struct io_uring_sqe *sqe = fd_uring_sqe();

    if (sqe == NULL)
        return -1;
    io_uring_prep_recv_multishot(sqe, sl->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    io_uring_sqe_set_data64(sqe, ud(idx, K_RECV, ++sl->recv_seq));
    sl->recv = 1;
    sl->paused = 0;
    return 0;
}

static int arm_accept(uint32_t idx)
{
    slot_t *sl = &slots[idx];
    struct io_uring_sqe *sqe = fd_uring_sqe();

    if (sqe == NULL)
        return -1;
    io_uring_prep_multishot_accept(sqe, sl->fd, NULL, NULL,
                                   SOCK_NONBLOCK | SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, ud(idx, K_ACCEPT, 0));
    sl->accept = 1;
    return 0;
}

static slot_t *slot_of(const fd_event_t *ev, uint32_t *idx)
{
    if (ev->slot == 0)
        return NULL;
    *idx = ev->slot - 1;
    return &slots[*idx];
}

static int slot_new(fd_event_t *ev, uint32_t *idx)
{
    /* the table is reserved whole and touched as it is used (pages that
     * were never written cost nothing): a slot is an idle connection's
     * whole cost when it parks, its 64 bytes */
    if (free_head) {
        *idx = free_head;
        free_head = slots[*idx].u.a.next_free;
    } else if (nslots < SLOT_MAX) {
        *idx = nslots++; /* 0 stays unused: ev->slot holds index + 1 */
    } else {
        return -1;
    }
    slots[*idx].ev = ev;
    slots[*idx].fd = ev->fd;
    ev->slot = *idx + 1;
    return 0;
}

/*
 * Receive queues come and go with every batch that brings a stream more
 * than its handler reads at once: a queue is a chain of fixed blocks, and
 * empty blocks are kept for reuse, so a long stream costs no malloc(), no
 * realloc() and no free() per loop turn, and a queue never moves.
 */
static rxq_t *rx_get(void)
{
    rxq_t *b = rx_cache;

    if (b) {
        rx_cache = b->next;
        rx_ncache--;
    } else if ((b = malloc(sizeof(*b))) == NULL) {
        return NULL;
    }
    b->next = NULL;
    b->tail = b;
    b->total = 0;
    b->off = b->len = 0;
    return b;
}

static void rx_put(rxq_t *b)
{
    if (rx_ncache < RX_CACHE) {
        b->next = rx_cache;
        rx_cache = b;
        rx_ncache++;
        return;
    }
    free(b);
}

static void rx_drop(rxq_t *rx)
{
    while (rx) {
        rxq_t *next = rx->next;
        rx_put(rx);
        rx = next;
    }
}

static size_t rx_unread(const slot_t *sl)
{
    return sl->u.a.rx ? sl->u.a.rx->total : 0;
}

static void slot_free(uint32_t idx)
{
    slot_t *sl = &slots[idx];
    uint32_t gen = sl->gen + 1;

    if (sl->poll)
        cancel(idx, K_POLL, sl->poll_seq);
    if (sl->recv)
        cancel(idx, K_RECV, sl->recv_seq);
    if (sl->accept)
        cancel(idx, K_ACCEPT, 0);
    rx_drop(sl->u.a.rx); /* never parked here: its owner woke it first */
    sl->ev->slot = 0;
    memset(sl, 0, sizeof(*sl));
    sl->gen = gen; /* completions still on their way are stale now */
    sl->u.a.next_free = free_head;
    free_head = idx;
}

/* a stream whose transport reads what the ring receives */
static int plain_stream(const fd_event_t *ev)
{
    return ev->stream && ((const fd_stream_t *)ev)->tp->ring_rx;
}

int fd_uring_add(fd_event_t *ev, uint32_t events)
{
    uint32_t idx;
    slot_t *sl;

    if (ev->slot)
        return fd_uring_mod(ev, events);
    if (slot_new(ev, &idx) < 0) {
        errno = ENOMEM;
        return -1;
    }
    sl = &slots[idx];
    sl->mask = events;
    if (ev->listen) {
        sl->on = 1;
        return arm_accept(idx);
    }
    if (plain_stream(ev)) {
        sl->ring_rx = 1;
        /* writability is asked for when a send would block. A socket
         * not writable yet is connecting: it is asked now, and receives
         * once connected (a receive would take the connect's error,
         * which SO_ERROR is to tell) */
        if (!((fd_stream_t *)ev)->writable)
            return arm_poll(idx);
        if ((events & EPOLLIN) && arm_recv(idx) < 0)
            return -1;
        return 0;
    }
    return arm_poll(idx);
}

void fd_uring_want_out(fd_event_t *ev)
{
    uint32_t idx;
    slot_t *sl = slot_of(ev, &idx);

    if (sl && sl->ring_rx && !sl->poll)
        (void)arm_poll(idx);
}

int fd_uring_mod(fd_event_t *ev, uint32_t events)
{
    uint32_t idx;
    slot_t *sl = slot_of(ev, &idx);

    if (sl == NULL)
        return fd_uring_add(ev, events);
    if (ev->listen) {
        sl->on = 1;
        return sl->accept ? 0 : arm_accept(idx);
    }
    if (sl->mask == events)
        return 0;
    sl->mask = events;
    if (sl->ring_rx && (events & EPOLLIN) && !sl->recv && !sl->paused &&
        !sl->eof && !sl->err && arm_recv(idx) < 0)
        return -1;
    if (sl->ring_rx) {
        if (!(events & EPOLLOUT) && sl->poll) {
            cancel(idx, K_POLL, sl->poll_seq);
            sl->poll = 0;
        } else if (!sl->poll && !((fd_stream_t *)ev)->writable) {
            return arm_poll(idx);
        }
        return 0;
    }
    /* a new poll with the new mask; the old one's completions are stale
     * by its sequence */
    if (sl->poll) {
        cancel(idx, K_POLL, sl->poll_seq);
        sl->poll = 0;
    }
    return arm_poll(idx);
}

int fd_uring_del(fd_event_t *ev)
{
    uint32_t idx;
    slot_t *sl = slot_of(ev, &idx);

    if (sl == NULL)
        return 0;
    if (ev->listen) {
        /* a listener's slot stays: what the ring accepted before the
         * cancel lands still reaches its handler (a drain at a stop
         * serves it), and a resume re-arms it */
        if (sl->accept)
            cancel(idx, K_ACCEPT, 0);
        sl->accept = 0;
        sl->on = 0;
        return 0;
    }
    slot_free(idx);
    return 0;
}

void fd_uring_move(fd_event_t *to, fd_event_t *from)
{
    to->slot = from->slot;
    if (from->slot)
        slots[from->slot - 1].ev = to;
    from->slot = 0;
}

void fd_uring_unring(fd_event_t *ev)
{
    uint32_t idx;
    slot_t *sl = slot_of(ev, &idx);

    if (sl == NULL || !sl->ring_rx)
        return;
    if (sl->recv)
        cancel(idx, K_RECV, sl->recv_seq);
    sl->recv = sl->ring_rx = 0;
    if (sl->poll) {
        cancel(idx, K_POLL, sl->poll_seq);
        sl->poll = 0;
    }
    (void)arm_poll(idx);
}

int fd_uring_pending(fd_event_t *ev)
{
    uint32_t idx;
    slot_t *sl = slot_of(ev, &idx);

    return sl && (rx_unread(sl) || sl->eof ||
                  sl->err || (cur.idx == idx && cur.len > cur.off));
}

/* --- parking --- */

void *fd_uring_park(fd_event_t *ev, uint32_t *slot)
{
    uint32_t idx;
    slot_t *sl = slot_of(ev, &idx);

    /* only a plain stream the ring receives for, with nothing of its own
     * held (bytes, an end, an error, a write poll) */
    if (sl == NULL || !sl->ring_rx || sl->poll || sl->paused || sl->eof ||
        sl->err || sl->batch || sl->u.a.rx ||
        (cur.idx == idx && cur.gen == sl->gen && cur.len > cur.off))
        return NULL;
    if (!sl->recv && arm_recv(idx) < 0)
        return NULL;
    ev->slot = 0;
    sl->ev = NULL;
    sl->parked = 1;
    memset(sl->u.park, 0, sizeof(sl->u.park));
    *slot = idx;
    return sl->u.park;
}

void *fd_uring_parked(uint32_t slot, int *fd)
{
    if (slot >= nslots || !slots[slot].parked)
        return NULL;
    *fd = slots[slot].fd;
    return slots[slot].u.park;
}

void fd_uring_unpark(uint32_t slot, fd_event_t *ev)
{
    slot_t *sl = &slots[slot];

    sl->parked = 0;
    memset(&sl->u, 0, sizeof(sl->u));
    sl->ev = ev;
    ev->slot = slot + 1;
}

int fd_uring_accept(fd_event_t *ev, struct sockaddr *sa, socklen_t *len)
{
    int fd;

    /* outside a completion (a drain at a stop, a retry after accepting
     * was paused): the socket itself */
    if (!in_accept)
        return accept4(ev->fd, sa, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (acc_err) {
        errno = acc_err;
        acc_err = 0;
        return -1;
    }
    if (acc_fd < 0) {
        errno = EAGAIN;
        return -1;
    }
    fd = acc_fd;
    acc_fd = -1;
    /* multishot accept gives no address: one getpeername() for it */
    if (getpeername(fd, sa, len) < 0) {
        *len = 0;
        sa->sa_family = AF_UNSPEC;
    }
    return fd;
}

/* --- receiving --- */

static void buf_recycle(unsigned bid)
{
    io_uring_buf_ring_add(br, bufs + (size_t)bid * BUF_SIZE, BUF_SIZE,
                          (unsigned short)bid,
                          io_uring_buf_ring_mask(BUF_COUNT), 0);
    io_uring_buf_ring_advance(br, 1);
}

/* What the handler left of cur goes to the slot's rx queue. */
static void rx_keep(slot_t *sl, uint32_t idx, const char *p, size_t n)
{
    while (n > 0) {
        rxq_t *t = sl->u.a.rx ? sl->u.a.rx->tail : NULL, *b;
        size_t k;

        if (t == NULL || t->len == RX_BLOCK) {
            if ((b = rx_get()) == NULL) {
                fd_log_error(FD_LOG_ERR, ENOMEM, "io_uring: received "
                             "bytes dropped");
                sl->err = ENOMEM;
                return;
            }
            if (t == NULL) {
                sl->u.a.rx = b;
            } else {
                t->next = b;
                sl->u.a.rx->tail = b;
            }
            t = b;
        }
        k = fd_min(n, (size_t)(RX_BLOCK - t->len));
        memcpy(t->data + t->len, p, k);
        t->len += (uint32_t)k;
        sl->u.a.rx->total += k;
        p += k;
        n -= k;
    }
    if (sl->u.a.rx->total > RX_PAUSE && sl->recv) {
        cancel(idx, K_RECV, sl->recv_seq);
        sl->recv = 0;
        sl->paused = 1;
    }
}

/*
 * The bytes the ring received for s, in order: what is queued, then what
 * the handler is being given (cur). peek: copied, left for the next read
 * (MSG_PEEK). Inlined in both callers: the read pays for no test of it.
 */
static inline __attribute__((always_inline)) ssize_t
ring_read(fd_stream_t *s, char *buf, size_t size, int peek)
{
    uint32_t idx;
    slot_t *sl = slot_of(&s->ev, &idx);
    size_t n = 0, k;
    rxq_t *h;

    if (sl == NULL || !sl->ring_rx) /* not registered yet (a stream
                                      * registers when it first waits):
                                      * the bytes are in the socket */
        return recv(s->ev.fd, buf, size, peek ? MSG_PEEK : 0);
    for (h = sl->u.a.rx; h && n < size; h = peek ? h->next : sl->u.a.rx) {
        k = fd_min(size - n, (size_t)(h->len - h->off));
        memcpy(buf + n, h->data + h->off, k);
        n += k;
        if (peek)
            continue;
        h->off += (uint32_t)k;
        h->total -= k;
        if (h->off == h->len) {
            sl->u.a.rx = h->next;
            if (sl->u.a.rx) {
                sl->u.a.rx->tail = h->tail;
                sl->u.a.rx->total = h->total;
            }
            rx_put(h);
        }
    }
    /* the reader caught up: the ring receives again (now, not at its
     * next read, which may not come: a response read to its end) */
    if (!peek && n && sl->paused && rx_unread(sl) < RX_PAUSE / 2)
        (void)arm_recv(idx);
    if (n < size && cur.idx == idx && cur.gen == sl->gen &&
        cur.len > cur.off) {
        k = fd_min(size - n, cur.len - cur.off);
        memcpy(buf + n, cur.buf + cur.off, k);
        if (!peek)
            cur.off += k;
        n += k;
    }
    if (n > 0 || sl->eof)
        return (ssize_t)n;
    if (sl->err) {
        errno = sl->err;
        return -1;
    }
    if (!sl->recv)
        (void)arm_recv(idx); /* caught up after a pause, or ended */
    errno = EAGAIN;
    return -1;
}

ssize_t fd_uring_recv(fd_stream_t *s, char *buf, size_t size)
{
    return ring_read(s, buf, size, 0);
}

/* The first bytes fd_uring_recv() would give, left for it: the transport's
 * MSG_PEEK (TLS: is it a handshake?). */
ssize_t fd_uring_peek(fd_stream_t *s, char *buf, size_t size)
{
    return ring_read(s, buf, size, 1);
}

/* --- completions --- */

static void on_recv(const struct io_uring_cqe *c, slot_t *sl, uint32_t idx,
                    unsigned seq)
{
    int more = (c->flags & IORING_CQE_F_MORE) != 0;
    int current = seq == (sl->recv_seq & 15u);
    uint32_t gen = sl->gen;
    fd_event_t *ev = sl->ev;

    if (current && !more)
        sl->recv = 0;
    if (c->res > 0) {
        unsigned bid = c->flags >> IORING_CQE_BUFFER_SHIFT;
        if (sl->batch > 1 && rx_unread(sl) + (size_t)c->res <= RX_MERGE) {
            /* more follow in this batch: the handler sees them all at
             * once, as it would find them in the socket under epoll
             * (one call, and a reader's limits see what really came),
             * up to RX_MERGE bytes a call */
            sl->batch--;
            rx_keep(sl, idx, bufs + (size_t)bid * BUF_SIZE, (size_t)c->res);
            buf_recycle(bid);
            if (current && !more && !sl->paused && !sl->err)
                (void)arm_recv(idx);
            return;
        }
        if (sl->batch)
            sl->batch--; /* the batch's rest, if any, merges on */
        cur.idx = idx;
        cur.gen = gen;
        cur.buf = bufs + (size_t)bid * BUF_SIZE;
        cur.off = 0;
        cur.len = (size_t)c->res;
        ev->handler(ev, EPOLLIN);
        /* the handler may have closed or moved the stream: the slot
         * knows, by its generation */
        sl = &slots[idx];
        if (sl->gen == gen && cur.len > cur.off)
            rx_keep(sl, idx, cur.buf + cur.off, cur.len - cur.off);
        cur.len = cur.off = 0;
        cur.buf = NULL;
        buf_recycle(bid);
        if (sl->gen == gen && sl->ring_rx && !sl->recv && !sl->paused &&
            !sl->eof && !sl->err && current && !more)
            (void)arm_recv(idx);
        return;
    }
    if (c->res == 0) {
        sl->eof = 1;
        ev->handler(ev, EPOLLIN | EPOLLRDHUP);
        return;
    }
    if (c->res == -ECANCELED || !current)
        return;
    if (c->res == -ENOBUFS) {
        /* every buffer was taken: they are back by now */
        if (!sl->paused)
            (void)arm_recv(idx);
        return;
    }
    /* the error is the read's to tell (fd_uring_recv): the socket's
     * pending error is this one, taken */
    sl->err = (uint8_t)fd_min(-c->res, 255);
    ev->handler(ev, EPOLLIN);
}

static void on_poll(const struct io_uring_cqe *c, slot_t *sl, uint32_t idx,
                    unsigned seq)
{
    int current = seq == (sl->poll_seq & 15u);
    int level = 0;
    uint32_t gen = sl->gen;
    fd_event_t *ev = sl->ev;

    if (current && !(c->flags & IORING_CQE_F_MORE)) {
        /* a poll that ended: a one-shot one, or a multishot one the
         * kernel ended (not cancelled, not failed) */
        sl->poll = 0;
        if (c->res >= 0 && !sl->ring_rx) {
            if (sl->mask & EPOLLET)
                (void)arm_poll(idx);
            else
                level = 1; /* after the handler: what it left fires */
        }
    }
    if (c->res > 0 && sl->ring_rx && !sl->recv && !sl->paused &&
        !sl->eof && !sl->err && (sl->mask & EPOLLIN) &&
        !(c->res & (EPOLLERR | EPOLLHUP)))
        (void)arm_recv(idx); /* connected */
    if (c->res > 0) {
        uint32_t events = (uint32_t)c->res;
        /* the socket's error is the ring's receive's to report (it may
         * have taken it already, and SO_ERROR would say 0) */
        if (sl->ring_rx && sl->recv)
            events &= ~(uint32_t)EPOLLERR;
        if (events)
            ev->handler(ev, events);
    } else if (c->res < 0 && c->res != -ECANCELED && current) {
        ev->handler(ev, EPOLLERR);
    }
    /* unless the handler let go of the registration or armed a poll of
     * its own (fd_event_mod) */
    if (level && sl->gen == gen && sl->ev == ev && !sl->poll)
        (void)arm_poll(idx);
}

static void on_accept(const struct io_uring_cqe *c, slot_t *sl, uint32_t idx)
{
    uint32_t gen = sl->gen;
    fd_event_t *ev = sl->ev;

    if (!(c->flags & IORING_CQE_F_MORE))
        sl->accept = 0;
    if (c->res == -ECANCELED)
        return;
    if (c->res >= 0)
        acc_fd = c->res;
    else
        acc_err = -c->res;
    in_accept = 1;
    ev->handler(ev, EPOLLIN);
    in_accept = 0;
    if (acc_fd >= 0) { /* not taken (accepting paused) */
        close(acc_fd);
        acc_fd = -1;
    }
    acc_err = 0;
    sl = &slots[idx];
    if (sl->gen == gen && sl->ev && sl->on && !sl->accept)
        (void)arm_accept(idx);
}

static void complete(const struct io_uring_cqe *c)
{
    uint64_t u = c->user_data;
    unsigned kind = u & 15, seq = (u >> 4) & 15;
    uint32_t idx = (uint32_t)(u >> 8) & 0xffffff, gen = (uint32_t)(u >> 32);
    slot_t *sl = idx < nslots ? &slots[idx] : NULL;

    if (kind == K_IGNORE || kind == K_SEND)
        return;
    if (sl && sl->parked && sl->gen == gen && kind == K_RECV &&
        seq == sl->recv_seq && c->res != -ECANCELED) {
        /* bytes (or an end, an error) for a parked stream: its owner
         * takes it back first (a receive without a buffer only re-arms) */
        if (c->res == -ENOBUFS) {
            if (!(c->flags & IORING_CQE_F_MORE))
                sl->recv = 0;
            if (!sl->recv)
                (void)arm_recv(idx);
            return;
        }
        if (fd_uring_wake)
            fd_uring_wake(idx);
    }
    if (sl == NULL || sl->ev == NULL || sl->gen != gen) {
        /* for a registration that is gone: what it carries goes back */
        if (kind == K_RECV && (c->flags & IORING_CQE_F_BUFFER))
            buf_recycle(c->flags >> IORING_CQE_BUFFER_SHIFT);
        if (kind == K_ACCEPT && c->res >= 0)
            close(c->res);
        return;
    }
    if (kind == K_RECV)
        on_recv(c, sl, idx, seq);
    else if (kind == K_POLL)
        on_poll(c, sl, idx, seq);
    else if (kind == K_ACCEPT)
        on_accept(c, sl, idx);
}

/* Take what completed into batch[from..): returns the new end. */
static unsigned collect(unsigned from)
{
    struct io_uring_cqe *c;
    unsigned head, n = from;

    io_uring_for_each_cqe(&ring, head, c) {
        if (n == CQ_BATCH)
            break;
        batch[n++] = *c;
    }
    io_uring_cq_advance(&ring, n - from);
    return n;
}

/* Before anything runs: the sends' results, and how many receives with
 * bytes each stream has in the batch. */
static void prescan(unsigned from, unsigned to)
{
    unsigned i;

    for (i = from; i < to; i++) {
        uint64_t u = batch[i].user_data;
        uint32_t idx = (uint32_t)(u >> 8) & 0xffffff;
        if ((u & 15) == K_SEND) {
            fd_sendq_result((unsigned)(u >> 8), batch[i].res);
        } else if ((u & 15) == K_RECV && batch[i].res > 0 && idx < nslots &&
                   slots[idx].gen == (uint32_t)(u >> 32) &&
                   (slots[idx].ev || slots[idx].parked) &&
                   slots[idx].batch < 255) {
            slots[idx].batch++;
        }
    }
}

void fd_uring_submit(void)
{
    /* GETEVENTS runs the deferred task work (DEFER_TASKRUN): a cancelled
     * poll completes now and lets go of its file; its completion waits in
     * the ring for the next turn's collect() */
    (void)io_uring_submit_and_get_events(&ring);
}

int fd_uring_wait(const sigset_t *waitset, int timeout)
{
    struct __kernel_timespec ts;
    struct io_uring_cqe *cqe;
    unsigned n, i, prev;
    int rc;

    fd_sendq_prepare();
    /* always a timeout: without one, liburing enters again when an enter
     * ends with no completion (a signal ran its handler), and the loop
     * would not see the signal's flag until the next completion */
    ts.tv_sec = timeout >= 0 ? timeout / 1000 : 86400;
    ts.tv_nsec = timeout >= 0 ? (long long)(timeout % 1000) * 1000000 : 0;
    rc = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts,
                                          (sigset_t *)waitset);
    fd_time_update();
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN &&
        rc != -EBUSY) {
        fd_log_error(FD_LOG_ALERT, -rc, "io_uring_submit_and_wait() failed");
        return FD_ERROR;
    }
    n = collect(0);
    prescan(0, n);
    /* the sends complete inline (MSG_DONTWAIT); one that has not is
     * waited for, so that its handler runs in this turn, as with epoll */
    while (fd_sendq_waiting() && n < CQ_BATCH) {
        if (io_uring_wait_cqe(&ring, &cqe) < 0)
            break;
        prev = n;
        n = collect(n);
        prescan(prev, n);
    }
    fd_sendq_finish();
    for (i = 0; i < n; i++)
        complete(&batch[i]);
    return (int)n;
}

/* --- setup --- */

int fd_uring_init(void)
{
    struct io_uring_params p;
    struct io_uring_buf_reg reg;
    unsigned i;
    int rc;

    memset(&p, 0, sizeof(p));
    /* one thread submits, and completions are taken only in the wait */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
              IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL;
    p.cq_entries = RING_ENTRIES * 4;
    /* EINVAL: a kernel before 6.1, which may lack multishot receive
     * (6.0) and buffer rings (5.19) as well: epoll there */
    rc = io_uring_queue_init_params(RING_ENTRIES, &ring, &p);
    if (rc < 0) {
        errno = -rc;
        return FD_ERROR;
    }
    if (!(p.features & IORING_FEAT_EXT_ARG) ||
        !(p.features & IORING_FEAT_NODROP)) {
        io_uring_queue_exit(&ring);
        errno = ENOSYS;
        return FD_ERROR;
    }
    slots = mmap(NULL, SLOT_MAX * sizeof(slot_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (slots == MAP_FAILED) {
        slots = NULL;
        rc = -errno;
        io_uring_queue_exit(&ring);
        errno = -rc;
        return FD_ERROR;
    }
    nslots = 1;
    free_head = 0;
    br = mmap(NULL, BUF_COUNT * sizeof(struct io_uring_buf),
              PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bufs = mmap(NULL, (size_t)BUF_COUNT * BUF_SIZE, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (br == MAP_FAILED || bufs == MAP_FAILED) {
        rc = -errno;
        goto failed;
    }
    memset(&reg, 0, sizeof(reg));
    reg.ring_addr = (uintptr_t)br;
    reg.ring_entries = BUF_COUNT;
    reg.bgid = BGID;
    rc = io_uring_register_buf_ring(&ring, &reg, 0);
    if (rc < 0) /* before 5.19: no provided buffer rings */
        goto failed;
    io_uring_buf_ring_init(br);
    for (i = 0; i < BUF_COUNT; i++)
        io_uring_buf_ring_add(br, bufs + (size_t)i * BUF_SIZE, BUF_SIZE,
                              (unsigned short)i,
                              io_uring_buf_ring_mask(BUF_COUNT), (int)i);
    io_uring_buf_ring_advance(br, BUF_COUNT);
    (void)io_uring_register_ring_fd(&ring);
    fd_event_uring = 1;
    return FD_OK;

failed:
    io_uring_queue_exit(&ring);
    munmap(slots, SLOT_MAX * sizeof(slot_t));
    slots = NULL;
    if (br != MAP_FAILED && br)
        munmap(br, BUF_COUNT * sizeof(struct io_uring_buf));
    if (bufs != MAP_FAILED && bufs)
        munmap(bufs, (size_t)BUF_COUNT * BUF_SIZE);
    br = NULL;
    bufs = NULL;
    errno = -rc;
    return FD_ERROR;
}

void fd_uring_exit(void)
{
    if (!fd_event_uring)
        return;
    io_uring_queue_exit(&ring);
    for (uint32_t i = 0; i < nslots; i++)
        if (!slots[i].parked)
            rx_drop(slots[i].u.a.rx);
    while (rx_cache) {
        rxq_t *next = rx_cache->next;
        free(rx_cache);
        rx_cache = next;
    }
    rx_ncache = 0;
    munmap(slots, SLOT_MAX * sizeof(slot_t));
    munmap(br, BUF_COUNT * sizeof(struct io_uring_buf));
    munmap(bufs, (size_t)BUF_COUNT * BUF_SIZE);
    slots = NULL;
    br = NULL;
    bufs = NULL;
    nslots = free_head = 0;
    fd_event_uring = 0;
}
