/*
 * QUIC datagrams handed from the worker that read them to the worker that
 * owns their connection (fd_quic.h). After a reload the new workers read
 * the same UDP sockets as the old ones (worker i of each generation reads
 * socket i, the steering's), so a packet of an old worker's connection,
 * its client migrated or not, may be read by the new worker of its index,
 * and a client's first Initial by an old one. Connection IDs name their
 * worker and generation (fd_quic.c, cid_new); a datagram that names
 * another comes here, and reaches its owner as if read from the socket.
 *
 * Each worker binds an abstract unix datagram socket named for the
 * master, its generation's low byte and its index, so any worker finds
 * any other without a registry, and a name nobody holds (its worker has
 * exited) fails at once with ECONNREFUSED (and a worker whose stats slot
 * is not alive is not sent to: owner_alive). What a loop turn forwards
 * leaves before the loop waits (fd_quic_fwd_flush), one message per
 * owner: a header, then for each datagram the address it came to (the
 * listening one and the local one, IP_PKTINFO's) and the client's. The
 * owner takes only messages from its own user's workers of this master
 * (SO_PASSCRED's uid and pid, the pid found in the stats slots): another
 * local process could otherwise have fastd send to any address.
 *
 * An owner's socket queues net.unix.max_dgram_qlen messages (10 by
 * default; a unix datagram socket has no listen() to raise it), however
 * small: an owner that falls that many of the sender's turns behind
 * refuses the next (EAGAIN). That message is kept for one more try
 * FWD_RETRY_MSEC later (what the sender forwards to that owner in the
 * meantime joins it), then dropped as UDP would drop it, and counted
 * (quic_forward_dropped: /status's forward_dropped_datagrams).
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#include <stddef.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define FD_QUIC_PRIVATE
#include "fd_cycle.h"
#include "fd_quic.h"

#define FWD_MAGIC 0x66517771u    /* a message of ours, this layout */
#define FWD_OWNERS 4             /* owners a turn forwards to, then out */
#define FWD_BUF 65536            /* one message, and the receive buffer */
#define FWD_SOCKBUF (2 * 1024 * 1024)
#define FWD_READ_BATCH 64        /* messages per event */
#define FWD_RETRY_MSEC 1         /* an owner's full queue: the next try */

typedef struct {
    uint32_t magic;
    uint16_t ndgrams;
    uint16_t stopping;           /* the sender is */
    uint64_t generation;         /* the sender's */
} fwd_hdr_t;

typedef struct {
    unsigned used:1;
    unsigned held:1;             /* the owner's queue was full: retry */
    uint8_t generation, index;   /* the owner (its connection IDs' bytes) */
    size_t len;
    unsigned ndgrams;
    uint8_t buf[FWD_BUF];       /* fwd_hdr_t, then each datagram: its
                                 * fd_quic_fwd_rec_t and bytes */
} fwd_out_t;

static fd_event_t ev = {.fd = -1};
static fd_posted_t more;
static fd_timer_t retry;
static unsigned more_posted;
static fwd_out_t out[FWD_OWNERS];
static uint8_t inbuf[FWD_BUF];
static uid_t uid;

static void fwd_retry(fd_timer_t *t);

static socklen_t fwd_name(struct sockaddr_un *sun, unsigned generation,
                          unsigned index)
{
    int n;

    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    /* abstract: sun_path[0] is 0, the name is not a file */
    n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
                 "fastd/%llu/quic/%u/%u",
                 (unsigned long long)fd_shm->master_pid, generation, index);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                       (size_t)n);
}

/* One message: its datagrams, each to fd_quic_fwd_in. */
static void msg_in(const uint8_t *p, size_t n)
{
    fwd_hdr_t h;
    fd_quic_fwd_rec_t rec;
    size_t off = sizeof(h);
    int from;

    if (n < sizeof(h))
        return;
    memcpy(&h, p, sizeof(h));
    if (h.magic != FWD_MAGIC)
        return;
    from = h.generation > fd_worker->cycle->generation && !h.stopping
               ? FD_QUIC_FWD_NEWER
               : FD_QUIC_FWD_PEER;
    while (h.ndgrams-- && n - off >= sizeof(rec)) {
        memcpy(&rec, p + off, sizeof(rec));
        off += sizeof(rec);
        if (rec.len > n - off || rec.boundlen > sizeof(rec.bound) ||
            rec.locallen > sizeof(rec.local) ||
            rec.remotelen > sizeof(rec.remote))
            return;
        fd_quic_fwd_in(&rec, p + off, from);
        off += rec.len;
    }
}

/* A worker of this master, running or stopping: the stats slots hold
 * every worker's pid (fd_stats_worker_init). Another process of the
 * workers' user (nobody, say) could otherwise have a worker answer any
 * address it names. */
static int from_worker(pid_t pid)
{
    uint64_t i, used = __atomic_load_n(&fd_shm->slots_used, __ATOMIC_ACQUIRE);
    const fd_stats_t *s;

    for (i = 0; i < used && i < FD_MAX_WORKER_SLOTS; i++) {
        s = fd_stats_slot((unsigned)i);
        if (s->pid == (uint64_t)pid &&
            __atomic_load_n(&s->alive, __ATOMIC_ACQUIRE))
            return 1;
    }
    return 0;
}

/* The worker of this generation's low byte and index runs, or stops but
 * has not been reaped: its slot is alive until the master's waitpid()
 * (fd_stats_retire). Its socket's name alone does not say so: the name
 * can outlive the process (a socket an io_uring request still holds is
 * closed by the kernel's deferred ring teardown), and what is sent to it
 * then is lost. */
static int owner_alive(uint8_t generation, uint8_t index)
{
    uint64_t i, used = __atomic_load_n(&fd_shm->slots_used, __ATOMIC_ACQUIRE);
    const fd_stats_t *s;

    for (i = 0; i < used && i < FD_MAX_WORKER_SLOTS; i++) {
        s = fd_stats_slot((unsigned)i);
        if (__atomic_load_n(&s->alive, __ATOMIC_ACQUIRE) &&
            (uint8_t)s->generation == generation && s->index == index)
            return 1;
    }
    return 0;
}

static void fwd_read(void)
{
    union {
        char buf[CMSG_SPACE(sizeof(struct ucred))];
        struct cmsghdr align;
    } cbuf;
    struct iovec iov = {inbuf, sizeof(inbuf)};
    struct msghdr msg;
    struct cmsghdr *cm;
    struct ucred cred;
    unsigned got;
    ssize_t n;
    int ok;

    for (got = 0; got < FWD_READ_BATCH; got++) {
        msg = (struct msghdr){.msg_iov = &iov,
                              .msg_iovlen = 1,
                              .msg_control = &cbuf,
                              .msg_controllen = sizeof(cbuf)};
        n = recvmsg(ev.fd, &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                fd_log_error(FD_LOG_ERR, errno,
                             "recvmsg() of forwarded QUIC datagrams failed");
            return;
        }
        ok = 0;
        for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET &&
                cm->cmsg_type == SCM_CREDENTIALS) {
                memcpy(&cred, CMSG_DATA(cm), sizeof(cred));
                ok = cred.uid == uid && from_worker(cred.pid);
            }
        if (ok && !(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
            msg_in(inbuf, (size_t)n);
    }
    /* more may wait: after the others had their turn */
    if (!more_posted) {
        more_posted = 1;
        fd_event_post(&more);
    }
}

static void fwd_more(void *data)
{
    (void)data;
    more_posted = 0;
    fwd_read();
}

static void fwd_event(fd_event_t *e, uint32_t events)
{
    (void)e;
    (void)events;
    fwd_read();
}

int fd_quic_fwd_init(void)
{
    struct sockaddr_un sun;
    socklen_t len;
    int fd, one = 1, size = FWD_SOCKBUF;

    if (ev.fd >= 0)
        return FD_OK;
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "socket(AF_UNIX) for QUIC "
                     "forwarding failed");
        return FD_ERROR;
    }
    uid = getuid(); /* what SCM_CREDENTIALS carries */
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
    /* a message waits at the owner charged to its sender */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    len = fwd_name(&sun, (uint8_t)fd_worker->cycle->generation,
                   fd_worker->index);
    ev.fd = fd;
    ev.handler = fwd_event;
    more.handler = fwd_more;
    retry.handler = fwd_retry;
    fd_event_before_wait(fd_quic_fwd_flush);
    if (bind(fd, (struct sockaddr *)&sun, len) < 0) {
        /* a worker 256 reloads older, still draining, has the name: this
         * one forwards but is not forwarded to */
        fd_log_error(FD_LOG_WARN, errno, "bind() of the QUIC forwarding "
                     "socket \"@%s\" failed", sun.sun_path + 1);
        return FD_OK;
    }
    if (fd_event_add(&ev, EPOLLIN) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "epoll_ctl(QUIC forwarding) failed");
        close(fd);
        ev.fd = -1;
        return FD_ERROR;
    }
    return FD_OK;
}

/* The owner is gone (not alive, or ECONNREFUSED: its socket closed):
 * the datagrams come back (fd_quic_fwd_in, FD_QUIC_FWD_ORPHAN). Its
 * queue is full (EAGAIN): kept for the retry timer once (may_hold: the
 * slot is not needed now), then dropped, as UDP would, and counted. */
static void out_send(fwd_out_t *o, int may_hold)
{
    struct sockaddr_un sun;
    fwd_hdr_t h = {FWD_MAGIC, (uint16_t)o->ndgrams, fd_worker->quitting,
                   fd_worker->cycle->generation};
    fd_quic_fwd_rec_t rec;
    socklen_t len = fwd_name(&sun, o->generation, o->index);
    size_t off;
    ssize_t n;

    memcpy(o->buf, &h, sizeof(h));
    if (!owner_alive(o->generation, o->index)) {
        n = -1;
        errno = ECONNREFUSED;
    } else {
        do
            n = sendto(ev.fd, o->buf, o->len, MSG_DONTWAIT,
                       (struct sockaddr *)&sun, len);
        while (n < 0 && errno == EINTR);
    }
    if (n >= 0) {
        fd_stats->quic_forwarded += o->ndgrams;
    } else if (errno == ECONNREFUSED || errno == ENOENT) {
        fd_log_debug("QUIC worker %u of generation %u is gone: %u "
                     "datagrams for it", o->index, o->generation, o->ndgrams);
        for (off = sizeof(h); off < o->len;) {
            memcpy(&rec, o->buf + off, sizeof(rec));
            off += sizeof(rec);
            fd_quic_fwd_in(&rec, o->buf + off, FD_QUIC_FWD_ORPHAN);
            off += rec.len;
        }
    } else if (errno == EAGAIN && may_hold && !o->held) {
        o->held = 1;
        if (!fd_timer_armed(&retry))
            fd_timer_add(&retry, FWD_RETRY_MSEC);
        return;
    } else {
        if (errno != EAGAIN)
            fd_log_error(FD_LOG_INFO, errno, "sendto(\"@%s\") of forwarded "
                         "QUIC datagrams failed", sun.sun_path + 1);
        fd_stats->quic_forward_dropped += o->ndgrams;
    }
    o->used = 0;
    o->held = 0;
}

/* all: the held messages too (the retry timer's) */
static void flush(int all)
{
    unsigned i;

    for (i = 0; i < FWD_OWNERS; i++)
        if (out[i].used && (all || !out[i].held))
            out_send(&out[i], 1);
}

void fd_quic_fwd_flush(void)
{
    flush(0);
}

static void fwd_retry(fd_timer_t *t)
{
    (void)t;
    flush(1);
}

void fd_quic_fwd(unsigned generation, unsigned index,
                 const fd_listening_t *ls, const ngtcp2_path *path,
                 const uint8_t *data, size_t len)
{
    fd_quic_fwd_rec_t rec = {0};
    fwd_out_t *o = NULL;
    size_t need = sizeof(rec) + len;
    unsigned i;

    if (ev.fd < 0 || sizeof(fwd_hdr_t) + need > FWD_BUF)
        return;
    for (i = 0; i < FWD_OWNERS; i++) {
        if (out[i].used && out[i].generation == (uint8_t)generation &&
            out[i].index == (uint8_t)index) {
            o = &out[i];
            break;
        }
        if (!out[i].used && o == NULL)
            o = &out[i];
    }
    if (o == NULL) {
        o = &out[0];
        out_send(o, 0);
    } else if (o->used && o->len + need > FWD_BUF) {
        out_send(o, 0);
    }
    if (!o->used) {
        o->used = 1;
        o->generation = (uint8_t)generation;
        o->index = (uint8_t)index;
        o->len = sizeof(fwd_hdr_t);
        o->ndgrams = 0;
    }
    memcpy(&rec.bound, &ls->addr, ls->addrlen);
    rec.boundlen = (uint8_t)ls->addrlen;
    memcpy(&rec.local, path->local.addr, path->local.addrlen);
    rec.locallen = (uint8_t)path->local.addrlen;
    memcpy(&rec.remote, path->remote.addr, path->remote.addrlen);
    rec.remotelen = (uint8_t)path->remote.addrlen;
    rec.len = (uint32_t)len;
    memcpy(o->buf + o->len, &rec, sizeof(rec));
    memcpy(o->buf + o->len + sizeof(rec), data, len);
    o->len += need;
    o->ndgrams++;
}

#endif
