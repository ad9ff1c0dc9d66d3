/*
 * Streams: the plain TCP transport, splices and the output queue
 * (fd_stream.h).
 */
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_stream.h"
#include "fd_uring.h"

#define OUTQ_COPY_MAX 4096 /* smaller memory pieces are copied */
#define OUTQ_MAX_IOV 64
#define SENDFILE_MAX (1 << 20)
/*
 * What one flush sends before a file's rest waits for the end of the loop
 * turn: one TSO frame (64 KB less room for the headers), the response
 * header included. See fd_outq_flush().
 */
#define OUTQ_FIRST_FRAME 64000

/* --- plain TCP --- */

static ssize_t tcp_fail(fd_stream_t *s, const char *what)
{
    if (errno == EAGAIN || errno == EINTR)
        return FD_AGAIN;
    if (errno != EPIPE && errno != ECONNRESET)
        fd_log_error(FD_LOG_INFO, errno, "%s failed", what);
    s->error = 1;
    return FD_ERROR;
}

static ssize_t tcp_recv(fd_stream_t *s, char *buf, size_t size)
{
    /* io_uring: the ring received them (fd_uring.c) */
    ssize_t n = fd_event_uring ? fd_uring_recv(s, buf, size)
                               : recv(s->ev.fd, buf, size, 0);

    if (n >= 0) {
        if (n == 0)
            s->eof = 1;
        return n;
    }
    n = tcp_fail(s, "recv()");
    if (n == FD_AGAIN)
        s->readable = 0;
    else
        s->eof = 1;
    return n;
}

static ssize_t tcp_send(fd_stream_t *s, const struct iovec *iov, int niov,
                        int more)
{
    ssize_t n;

    if (more) {
        /* a file follows: the header rides with its first bytes
         * (MSG_MORE; nginx's tcp_nopush does it with TCP_CORK) instead of
         * leaving as a packet of its own */
        struct msghdr msg = {.msg_iov = (struct iovec *)iov,
                             .msg_iovlen = (size_t)niov};
        n = sendmsg(s->ev.fd, &msg, MSG_MORE | MSG_NOSIGNAL);
    } else {
        n = niov == 1 ? write(s->ev.fd, iov[0].iov_base, iov[0].iov_len)
                      : writev(s->ev.fd, iov, niov);
    }
    if (n >= 0)
        return n;
    n = tcp_fail(s, "write()");
    if (n == FD_AGAIN)
        fd_stream_wait_out(s);
    return n;
}

static ssize_t tcp_sendfile(fd_stream_t *s, int fd, off_t off, size_t len)
{
    ssize_t n = sendfile(s->ev.fd, fd, &off, fd_min(len, SENDFILE_MAX));

    if (n > 0)
        return n;
    if (n == 0) {
        fd_log_error(FD_LOG_ERR, 0, "file shrank while sent");
        s->error = 1;
        return FD_ERROR;
    }
    n = tcp_fail(s, "sendfile()");
    if (n == FD_AGAIN)
        fd_stream_wait_out(s);
    return n;
}

const fd_transport_t fd_transport_tcp = {
    .name = "tcp",
    .recv = tcp_recv,
    .send = tcp_send,
    .sendfile = tcp_sendfile,
    .short_read_drains = 1,
    .ring_rx = 1,
};

int fd_stream_handshake(fd_stream_t *s)
{
    int rc;

    if (s->handshaken || s->tp->handshake == NULL) {
        s->handshaken = 1;
        return FD_OK;
    }
    rc = s->tp->handshake(s);
    if (rc == FD_OK)
        s->handshaken = 1;
    return rc;
}

void fd_stream_close_transport(fd_stream_t *s)
{
    if (s->tp && s->tp->close)
        s->tp->close(s);
    s->tp = &fd_transport_tcp;
    s->tls = NULL;
    s->tp_mark = 0;
}

void fd_stream_set_deadline(fd_stream_t *s, fd_msec_t ms)
{
    uint32_t when = fd_msec32_after(ms);

    s->deadline = when ? when : 1; /* 0 is "none" */
    if (!fd_timer_armed(&s->timer) ||
        fd_msec32_diff(s->timer.when, when) > 0)
        fd_timer_add(&s->timer, ms);
}

void fd_stream_events(fd_stream_t *s, uint32_t events)
{
    if (events & EPOLLERR) {
        s->error = 1;
        s->eof = 1;
    }
    /* remembered: after a short read no further event would come */
    if (events & (EPOLLRDHUP | EPOLLHUP))
        s->eof = 1;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
        s->readable = 1;
    if (events & EPOLLOUT)
        s->writable = 1;
}

void fd_stream_wait_out(fd_stream_t *s)
{
    s->writable = 0;
    if (fd_event_uring)
        fd_uring_want_out(&s->ev);
}

void fd_stream_shutdown(fd_stream_t *s)
{
    if (s->tp->shutdown)
        s->tp->shutdown(s);
    if (s->ev.fd >= 0 && shutdown(s->ev.fd, SHUT_WR) < 0 &&
        errno != ENOTCONN)
        fd_log_error(FD_LOG_INFO, errno, "shutdown() failed");
}

void fd_stream_move(fd_stream_t *to, fd_stream_t *from)
{
    fd_event_t ev = to->ev;
    fd_timer_t timer = to->timer;

    *to = *from;
    /* the handler, the instance and the timer stay the new owner's */
    ev.fd = from->ev.fd;
    ev.slot = 0;
    to->ev = ev;
    fd_event_move(&to->ev, &from->ev);
    to->timer = timer;
    to->deadline = 0;
    from->ev.fd = -1;
    from->tp = &fd_transport_tcp;
    from->tls = NULL;
    from->tp_mark = 0;
    from->registered = 0;
    if (to->tp->move)
        to->tp->move(to);
}

/* --- splices --- */

static void splice_event(fd_event_t *ev, uint32_t events);
static void splice_timer(fd_timer_t *tm);

void fd_splice_init(fd_splice_t *sp, char *buf0, char *buf1, size_t size)
{
    unsigned i;

    memset(sp, 0, sizeof(*sp));
    sp->side[0].buf = buf0;
    sp->side[1].buf = buf1;
    for (i = 0; i < 2; i++) {
        sp->side[i].s.ev.fd = -1;
        sp->side[i].s.ev.handler = splice_event;
        sp->side[i].s.ev.stream = 1;
        sp->side[i].s.tp = &fd_transport_tcp;
        sp->side[i].sp = sp;
    }
    sp->size = size;
    sp->timer.handler = splice_timer;
}

int fd_splice_watch(fd_splice_t *sp, unsigned i)
{
    fd_splice_side_t *d = &sp->side[i];
    /* edge-triggered whatever the transport: the pump runs each side
     * until it would block, and TLS may read to write */
    uint32_t mask = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

    if (d->watched || d->s.ev.fd < 0)
        return FD_OK; /* no socket: its transport says when it is ready */
    if ((d->s.registered ? fd_event_mod(&d->s.ev, mask)
                         : fd_event_add(&d->s.ev, mask)) < 0)
        return FD_ERROR;
    d->s.registered = 1;
    d->watched = 1;
    return FD_OK;
}

void fd_splice_close(fd_splice_t *sp)
{
    unsigned i;

    fd_timer_del(&sp->timer);
    for (i = 0; i < 2; i++) {
        fd_stream_t *s = &sp->side[i].s;
        if (s->ev.fd < 0) {
            /* a side over another protocol's stream lets it go */
            if (s->tls)
                fd_stream_close_transport(s);
            continue;
        }
        fd_stream_close_transport(s);
        fd_event_close(&s->ev);
    }
}

static void splice_over(fd_splice_t *sp, int reason)
{
    if (sp->over)
        return;
    sp->over = 1;
    sp->reason = reason;
    fd_splice_close(sp);
    sp->done(sp);
}

/*
 * Bytes from one side to the other until a socket would block: 1 when
 * some moved, 0 when none, FD_ERROR. The buffer towards `to` is refilled
 * only once it is empty: while `to` cannot take more, `from` is not read.
 */
/* What failed, for the owner's log line: an error event's errno is the
 * socket's pending error, a call's is errno. */
static int splice_failed(fd_splice_t *sp, fd_splice_side_t *d, int op)
{
    socklen_t len = sizeof(sp->err);

    sp->err = errno;
    if (op == FD_SPLICE_OP_SOCKET &&
        getsockopt(d->s.ev.fd, SOL_SOCKET, SO_ERROR, &sp->err, &len) < 0)
        sp->err = 0;
    sp->err_side = (unsigned char)(d - sp->side);
    sp->err_op = (unsigned char)op;
    return FD_ERROR;
}

static int splice_pump(fd_splice_t *sp, fd_splice_side_t *from,
                       fd_splice_side_t *to)
{
    int moved = 0;
    ssize_t n;

    for (;;) {
        if (to->pos < to->len) {
            struct iovec iov = {.iov_base = to->buf + to->pos,
                                .iov_len = to->len - to->pos};
            if (!to->s.writable)
                return moved;
            n = fd_stream_send(&to->s, &iov, 1, 0);
            if (n == FD_AGAIN)
                return moved;
            if (n < 0)
                return splice_failed(sp, to, FD_SPLICE_OP_SEND);
            to->pos += (size_t)n;
            to->sent += (uint64_t)n;
            moved = 1;
            if (to->pos == to->len)
                to->pos = to->len = 0;
            continue;
        }
        if (from->ended) {
            if (!to->shut) {
                fd_stream_shutdown(&to->s);
                to->shut = 1;
            }
            return moved;
        }
        if (!from->s.readable)
            return moved;
        n = fd_stream_recv(&from->s, to->buf, sp->size);
        if (n == FD_AGAIN)
            return moved;
        if (n < 0)
            return splice_failed(sp, from, FD_SPLICE_OP_RECV);
        if (n == 0) {
            from->ended = 1;
            continue;
        }
        to->len = (size_t)n;
        moved = 1;
        /* a FIN seen with the data (RDHUP) has no edge of its own left:
         * read on until the end of stream shows; without one, a short
         * read over TCP drained the socket */
        if (from->s.eof)
            from->s.readable = 1;
        else if ((size_t)n < sp->size && from->s.tp->short_read_drains)
            from->s.readable = 0;
    }
}

static void splice_run(fd_splice_t *sp)
{
    fd_splice_side_t *a = &sp->side[0], *b = &sp->side[1];
    int ab, ba;

    if (a->s.error || b->s.error) {
        splice_failed(sp, a->s.error ? a : b, FD_SPLICE_OP_SOCKET);
        splice_over(sp, FD_SPLICE_ERROR);
        return;
    }
    ab = splice_pump(sp, a, b);
    ba = splice_pump(sp, b, a);
    if (ab == FD_ERROR || ba == FD_ERROR)
        splice_over(sp, FD_SPLICE_ERROR);
    else if (a->shut && b->shut)
        splice_over(sp, FD_SPLICE_END);
    else if (ab || ba)
        sp->deadline = fd_msec32_after(sp->idle);
}

static void splice_event(fd_event_t *ev, uint32_t events)
{
    fd_splice_side_t *d = (fd_splice_side_t *)ev;
    fd_splice_t *sp = d->sp;

    fd_stream_events(&d->s, events);
    /* EPOLLHUP: both halves are down, a write fails at once */
    if (events & EPOLLHUP)
        d->s.writable = 1;
    if (!sp->started)
        return;
    fd_log_conn_id = sp->log_id;
    splice_run(sp);
    fd_log_conn_id = 0;
}

void fd_splice_kick(fd_stream_t *s)
{
    fd_splice_t *sp = ((fd_splice_side_t *)s)->sp;
    uint64_t id = fd_log_conn_id;

    if (!sp->started || sp->over)
        return;
    fd_log_conn_id = sp->log_id;
    splice_run(sp);
    fd_log_conn_id = id;
}

static void splice_timer(fd_timer_t *tm)
{
    fd_splice_t *sp = (fd_splice_t *)((char *)tm -
                                      offsetof(fd_splice_t, timer));
    int32_t left = fd_msec32_diff(sp->deadline, (uint32_t)fd_current_msec);

    /* bytes moved since it was armed: the deadline moved on */
    if (left > 0) {
        fd_timer_add(&sp->timer, (fd_msec_t)left);
        return;
    }
    fd_log_conn_id = sp->log_id;
    splice_over(sp, FD_SPLICE_TIMEOUT);
    fd_log_conn_id = 0;
}

void fd_stream_splice(fd_splice_t *sp)
{
    unsigned i;

    fd_log_conn_id = sp->log_id;
    sp->started = 1;
    for (i = 0; i < 2; i++) {
        /* each side is tried once: an edge may have passed unwatched */
        sp->side[i].s.readable = 1;
        sp->side[i].s.writable = 1;
        if (fd_splice_watch(sp, i) != FD_OK)
            break;
    }
    if (i < 2) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        splice_over(sp, FD_SPLICE_ERROR);
    } else {
        sp->deadline = fd_msec32_after(sp->idle);
        fd_timer_add(&sp->timer, sp->idle);
        splice_run(sp);
    }
    fd_log_conn_id = 0;
}

/* --- the output queue --- */

struct fd_outseg_s {
    fd_outseg_t *next;
    int kind;
    int fd;
    size_t off;       /* buf offset, or file position */
    size_t len;
    const char *mem;
    /* a file's rest, put off to the end of the turn (fd_outq_flush) */
    fd_posted_t post;
    fd_outq_t *post_q;      /* whose flush goes on; NULL: nobody's */
    fd_stream_t *post_st;
    unsigned deferred:1;    /* was put off once: the rest goes unbounded */
    unsigned posted:1;      /* post is in the loop's list */
};

enum { SEG_BUF, SEG_FILE, SEG_MEM };

static void outq_sent(fd_sendop_t *op);

void fd_outq_init(fd_outq_t *q)
{
    memset(q, 0, sizeof(*q));
    q->last = &q->segs;
    q->op.handler = outq_sent;
}

static fd_outseg_t *seg_new(fd_outq_t *q, int kind)
{
    fd_outseg_t *s = q->free;

    if (s)
        q->free = s->next;
    else if ((s = malloc(sizeof(*s))) == NULL)
        return NULL;
    s->next = NULL;
    s->kind = kind;
    s->deferred = 0;
    s->posted = 0; /* a free one never is; a new one is not set */
    *q->last = s;
    q->last = &s->next;
    return s;
}

static void buf_put(fd_outq_t *q)
{
    if (q->buf == NULL)
        return;
    if (q->cap == fd_worker->wbufs.size)
        fd_block_put(&fd_worker->wbufs, q->buf);
    else
        free(q->buf);
    q->buf = NULL;
    q->cap = q->head = q->tail = 0;
}

static int outq_batch(fd_outq_t *q, fd_stream_t *st, const struct iovec *iov,
                      int niov);

/*
 * A batched send points into buf: before buf moves, it leaves the batch,
 * and joins it again (at the end) with the new addresses. It has not been
 * submitted yet: the batch is made at the end of the turn.
 */
static void outq_rebatch(fd_outq_t *q)
{
    struct iovec iov[2];
    fd_outseg_t *s;
    int niov = 0;

    for (s = q->segs; s && niov < 2; s = s->next) {
        if (s->kind == SEG_FILE)
            return; /* not batched: the caller's flush sends it */
        iov[niov].iov_base = (void *)(s->kind == SEG_BUF ? q->buf + s->off
                                                         : s->mem);
        iov[niov++].iov_len = s->len;
    }
    if (niov && s == NULL)
        outq_batch(q, q->stream, iov, niov);
}

static char *outq_move(fd_outq_t *q, size_t n);

char *fd_outq_reserve(fd_outq_t *q, size_t n)
{
    if (q->buf && q->tail + n <= q->cap)
        return q->buf + q->tail;
    if (q->op.slot) {
        char *p;
        fd_sendq_cancel(&q->op);
        p = outq_move(q, n);
        outq_rebatch(q);
        return p;
    }
    return outq_move(q, n);
}

static char *outq_move(fd_outq_t *q, size_t n)
{
    if (q->buf == NULL) {
        q->buf = fd_block_get(&fd_worker->wbufs);
        if (q->buf == NULL)
            return NULL;
        q->cap = fd_worker->wbufs.size;
        q->head = q->tail = 0;
    }
    if (q->tail + n <= q->cap)
        return q->buf + q->tail;
    if (q->head > 0) {
        /* slide the unsent bytes to the front; segments hold offsets */
        fd_outseg_t *s;
        memmove(q->buf, q->buf + q->head, q->tail - q->head);
        for (s = q->segs; s; s = s->next)
            if (s->kind == SEG_BUF)
                s->off -= q->head;
        q->tail -= q->head;
        q->head = 0;
        if (q->tail + n <= q->cap)
            return q->buf + q->tail;
    }
    {
        size_t cap = q->cap * 2, head = q->head, tail = q->tail;
        char *nb;
        while (cap < q->tail + n)
            cap *= 2;
        nb = malloc(cap);
        if (nb == NULL)
            return NULL;
        memcpy(nb, q->buf, q->tail);
        buf_put(q);
        q->buf = nb;
        q->cap = cap;
        q->head = head;
        q->tail = tail;
    }
    return q->buf + q->tail;
}

void fd_outq_commit(fd_outq_t *q, size_t n)
{
    fd_outseg_t *last = q->segs ? (fd_outseg_t *)((char *)q->last -
                                                  offsetof(fd_outseg_t, next))
                                : NULL;

    if (n == 0)
        return;
    if (last && last->kind == SEG_BUF && last->off + last->len == q->tail) {
        last->len += n;
    } else {
        fd_outseg_t *s = seg_new(q, SEG_BUF);
        if (s == NULL)
            return;
        s->off = q->tail;
        s->len = n;
    }
    q->tail += n;
    q->bytes += n;
}

int fd_outq_append(fd_outq_t *q, const void *data, size_t n)
{
    char *p;

    if (n == 0)
        return FD_OK;
    p = fd_outq_reserve(q, n);
    if (p == NULL)
        return FD_ERROR;
    memcpy(p, data, n);
    fd_outq_commit(q, n);
    return FD_OK;
}

int fd_outq_mem(fd_outq_t *q, const void *data, size_t n)
{
    return n <= OUTQ_COPY_MAX ? fd_outq_append(q, data, n)
                              : fd_outq_ref(q, data, n);
}

int fd_outq_ref(fd_outq_t *q, const void *data, size_t n)
{
    fd_outseg_t *s;

    if (n == 0)
        return FD_OK;
    s = seg_new(q, SEG_MEM);
    if (s == NULL)
        return FD_ERROR;
    s->mem = data;
    s->len = n;
    q->bytes += n;
    return FD_OK;
}

int fd_outq_file(fd_outq_t *q, int fd, off_t off, size_t n)
{
    fd_outseg_t *s = q->segs ? (fd_outseg_t *)((char *)q->last -
                                               offsetof(fd_outseg_t, next))
                             : NULL;

    if (n == 0)
        return FD_OK;
    /* a small file after copied bytes (the header just written) joins
     * them: one write() of both instead of a write and a sendfile(), which
     * for one page costs more than the copy (a 1 KB file: 16 against 5 us
     * a call under strace). A short read leaves it to sendfile(), which
     * says what went wrong. */
    if (n <= OUTQ_COPY_MAX && s && s->kind == SEG_BUF &&
        s->off + s->len == q->tail && q->tail + n <= q->cap &&
        pread(fd, q->buf + q->tail, n, off) == (ssize_t)n) {
        fd_outq_commit(q, n); /* into s: no allocation can fail */
        return FD_OK;
    }
    s = seg_new(q, SEG_FILE);
    if (s == NULL)
        return FD_ERROR;
    s->fd = fd;
    s->off = (size_t)off;
    s->len = n;
    q->bytes += n;
    return FD_OK;
}

int fd_outq_copied(const fd_outq_t *q)
{
    const fd_outseg_t *s;

    for (s = q->segs; s && s->kind == SEG_BUF; s = s->next)
        ;
    return s == NULL;
}

/*
 * A segment whose post is still in the loop's list must not be reused
 * (posted twice, the list would loop): it is left to seg_resume(), which
 * frees it. Otherwise it joins the free ones.
 */
static void seg_free(fd_outq_t *q, fd_outseg_t *s)
{
    if (s->posted) {
        s->post_q = NULL;
        return;
    }
    s->next = q->free;
    q->free = s;
}

static void seg_done(fd_outq_t *q)
{
    fd_outseg_t *s = q->segs;

    q->segs = s->next;
    if (q->segs == NULL) {
        q->last = &q->segs;
        q->head = q->tail = 0;
    }
    seg_free(q, s);
}

/* n bytes have left: drop them from the front. */
static void outq_drop(fd_outq_t *q, size_t n);

static void outq_consume(fd_outq_t *q, size_t n)
{
    fd_stats->bytes_out += (uint64_t)n;
    outq_drop(q, n);
}

static void outq_drop(fd_outq_t *q, size_t n)
{
    q->bytes -= n;
    while (n > 0 && q->segs) {
        fd_outseg_t *s = q->segs;
        if (n < s->len) {
            s->off += n;
            s->mem += s->kind == SEG_MEM ? n : 0;
            s->len -= n;
            if (s->kind == SEG_BUF)
                q->head = s->off;
            break;
        }
        n -= s->len;
        if (s->kind == SEG_BUF)
            q->head = s->off + s->len;
        seg_done(q);
    }
}

/*
 * A file piece read into the buffer: between the frame headers around it
 * it then leaves in the same write (one writev, one SSL_write) instead of
 * a sendfile() of its own per piece. The pieces are a frame's at most.
 */
static int outq_read(fd_outq_t *q, int fd, off_t off, size_t n)
{
    char *p = fd_outq_reserve(q, n);
    size_t got = 0;

    if (p == NULL)
        return FD_ERROR;
    while (got < n) {
        ssize_t k = pread(fd, p + got, n - got, off + (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            fd_log_error(FD_LOG_ERR, k < 0 ? errno : 0, "pread() of a "
                         "response body failed%s", k == 0 ? " (the file "
                         "shrank)" : "");
            return FD_ERROR;
        }
        got += (size_t)k;
    }
    fd_outq_commit(q, n);
    return FD_OK;
}

int fd_outq_move(fd_outq_t *to, fd_outq_t *from, size_t n)
{
    size_t left = n;
    fd_outseg_t *s;
    int rc = FD_OK;

    for (s = from->segs; s && left && rc == FD_OK; s = s->next) {
        size_t k = fd_min(left, s->len);
        if (s->kind == SEG_BUF)
            rc = fd_outq_append(to, from->buf + s->off, k);
        else if (s->kind == SEG_MEM)
            rc = fd_outq_mem(to, s->mem, k);
        else
            rc = outq_read(to, s->fd, (off_t)s->off, k);
        left -= k;
    }
    if (rc != FD_OK)
        return FD_ERROR;
    outq_drop(from, n - left);
    return FD_OK;
}

size_t fd_stream_batch_sent(fd_stream_t *s, const fd_sendop_t *op)
{
    if (op->res >= 0) {
        size_t asked = op->iov[0].iov_len +
                       (op->niov == 2 ? op->iov[1].iov_len : 0);
        if ((size_t)op->res < asked)
            fd_stream_wait_out(s); /* full: the rest waits for EPOLLOUT */
        return (size_t)op->res;
    }
    if (op->res == -EAGAIN) {
        fd_stream_wait_out(s);
    } else {
        if (op->res != -EPIPE && op->res != -ECONNRESET)
            fd_log_error(FD_LOG_INFO, (int)-op->res, "send() failed");
        s->error = 1;
    }
    return 0;
}

static void outq_sent(fd_sendop_t *op)
{
    fd_outq_t *q = (fd_outq_t *)((char *)op - offsetof(fd_outq_t, op));

    outq_consume(q, fd_stream_batch_sent(q->stream, op));
    q->sent(q);
}

/* The first bytes into the turn's batch: FD_OK when queued. */
static int outq_batch(fd_outq_t *q, fd_stream_t *st, const struct iovec *iov,
                      int niov)
{
    if (niov > 2 || !st->writable || st->tp != &fd_transport_tcp)
        return FD_DECLINED;
    q->op.fd = st->ev.fd;
    q->op.niov = niov;
    q->op.iov[0] = iov[0];
    if (niov == 2)
        q->op.iov[1] = iov[1];
    q->stream = st;
    return fd_sendq_add(&q->op);
}

/* The end of the turn: the owner goes on as after a writable event. */
static void seg_resume(void *data)
{
    fd_outseg_t *s = data;
    fd_outq_t *q = s->post_q;
    fd_stream_t *st = s->post_st;

    s->posted = 0;
    if (q == NULL) {
        free(s); /* sent or dropped meanwhile (seg_free) */
        return;
    }
    s->post_q = NULL;
    if (q->sent)
        q->sent(q);
    else
        st->ev.handler(&st->ev, 0);
}

static int seg_defer(fd_outq_t *q, fd_stream_t *st, fd_outseg_t *s)
{
    s->deferred = 1;
    s->posted = 1;
    s->post_q = q;
    s->post_st = st;
    s->post.handler = seg_resume;
    s->post.data = s;
    fd_event_post(&s->post);
    return FD_AGAIN;
}

/*
 * A file longer than one frame: the header and the first frame leave now,
 * the rest at the end of the loop turn, after the other connections' first
 * frames. Sent back to back, the second frame is held by the kernel's TCP
 * pacing (BBR, or any socket with a pacing rate, without the fq qdisc):
 * an hrtimer armed and fired for nearly every response, which cost this
 * worker more than the rest of a 100 KB response together (perf, one CPU,
 * 64 connections). A turn's worth of other work later, the pacing time
 * has passed. Edge-triggered streams only: the owner then waits for
 * nothing and no epoll_ctl() changes (level-triggered, FD_AGAIN would
 * register EPOLLOUT and remove it again).
 *
 * A limited flush (max < SIZE_MAX: limit_rate) is not batched: the limit
 * counts what left, and a batched send leaves later. Inlined in both
 * callers, so the unlimited one carries no limit arithmetic.
 */
static int iov_trim(struct iovec *iov, int niov, size_t max, int *cut)
{
    int i;

    for (i = 0; i < niov; i++) {
        if (iov[i].iov_len >= max) {
            *cut = iov[i].iov_len > max || i + 1 < niov;
            iov[i].iov_len = max;
            return i + 1;
        }
        max -= iov[i].iov_len;
    }
    return niov;
}

static inline __attribute__((always_inline)) int
outq_flush(fd_outq_t *q, fd_stream_t *st, size_t max)
{
    size_t frame = st->et ? OUTQ_FIRST_FRAME : SIZE_MAX;

    if (q->op.slot)
        return FD_AGAIN; /* in the batch: ->sent() follows */
    while (q->segs) {
        fd_outseg_t *s = q->segs;
        ssize_t n;

        if (max == 0)
            return FD_DONE;
        if (s->kind == SEG_FILE) {
            size_t len = fd_min(s->len, max);
            if (!s->deferred) {
                if (frame == 0)
                    return seg_defer(q, st, s);
                len = fd_min(len, frame);
            }
            n = fd_stream_sendfile(st, s->fd, (off_t)s->off, len);
        } else {
            struct iovec iov[OUTQ_MAX_IOV];
            int niov = 0, batch = q->sent != NULL && max == SIZE_MAX, cut = 0;
            fd_outseg_t *t;
            for (t = s; t && t->kind != SEG_FILE && niov < OUTQ_MAX_IOV;
                 t = t->next) {
                iov[niov].iov_base = (void *)(t->kind == SEG_BUF
                                                  ? q->buf + t->off
                                                  : t->mem);
                iov[niov].iov_len = t->len;
                niov++;
            }
            if (max != SIZE_MAX)
                niov = iov_trim(iov, niov, max, &cut);
            if (batch && t == NULL && outq_batch(q, st, iov, niov) == FD_OK)
                return FD_AGAIN;
            /* more: a file follows at once (not past a limit: the rest
             * waits for a timer) */
            n = fd_stream_send(st, iov, niov, t && t->kind == SEG_FILE && !cut);
        }
        if (n < 0)
            return (int)n;
        frame -= fd_min(frame, (size_t)n);
        if (max != SIZE_MAX)
            max -= (size_t)n;
        outq_consume(q, (size_t)n);
    }
    return FD_OK;
}

int fd_outq_flush(fd_outq_t *q, fd_stream_t *st)
{
    return outq_flush(q, st, SIZE_MAX);
}

int fd_outq_flush_max(fd_outq_t *q, fd_stream_t *st, size_t max)
{
    return outq_flush(q, st, max);
}

void fd_outq_clear(fd_outq_t *q)
{
    fd_outseg_t *s, *sn;

    fd_sendq_cancel(&q->op); /* its buffers go now */
    /* unsent segments join the free ones: a keep-alive request then
     * costs no malloc for its segments */
    for (s = q->segs; s; s = sn) {
        sn = s->next;
        seg_free(q, s);
    }
    q->segs = NULL;
    q->last = &q->segs;
    q->bytes = 0;
    buf_put(q);
}

void fd_outq_free(fd_outq_t *q)
{
    fd_outseg_t *s, *sn;

    fd_outq_clear(q);
    for (s = q->free; s; s = sn) {
        sn = s->next;
        free(s);
    }
    q->free = NULL;
}
