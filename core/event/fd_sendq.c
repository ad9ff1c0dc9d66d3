/*
 * Deferred sends, made in one io_uring_enter() at the end of the loop turn
 * (see fd_sendq.h for why and how to use it).
 *
 * The ring is the raw kernel interface, without liburing: one submission
 * ring and one completion ring, mapped once per worker. Each send goes in
 * as IORING_OP_SEND (one buffer) or IORING_OP_SENDMSG (two) with
 * MSG_DONTWAIT, so the kernel makes it inline during the enter and never
 * parks it: a full socket buffer completes with -EAGAIN, as send() would.
 * The completions are therefore all there when the enter returns; the rare
 * one that is not is waited for (IORING_ENTER_GETEVENTS).
 *
 * Without io_uring (an old kernel, io_uring_disabled, a seccomp filter),
 * or when it fails later, fd_sendq_add() declines and callers send at
 * once, as with batch_sends = off.
 */

#include "fd_core.h"
#include "fd_event.h"
#include "fd_sendq.h"
#include "fd_uring.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define QMAX 256 /* sends per turn; more are made at once by the caller */

static struct {
    int fd;
    unsigned *sq_tail, *sq_mask;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_len, cq_len, sqes_len;
} ring = {.fd = -1};

static fd_sendop_t *queue[QMAX];
static struct msghdr msgs[QMAX]; /* SENDMSG's header, alive until issued */
static unsigned nq;
static int on_loop_ring;   /* the io_uring backend's ring carries them */
static unsigned prepared;  /* queue[0..prepared) are in the loop's ring */

static int ring_enter(unsigned submit, unsigned wait, unsigned flags)
{
    return (int)syscall(__NR_io_uring_enter, ring.fd, submit, wait, flags,
                        NULL, 0);
}

static void ring_close(void)
{
    if (ring.sqes)
        munmap(ring.sqes, ring.sqes_len);
    if (ring.cq_map && ring.cq_map != ring.sq_map)
        munmap(ring.cq_map, ring.cq_len);
    if (ring.sq_map)
        munmap(ring.sq_map, ring.sq_len);
    if (ring.fd >= 0)
        close(ring.fd);
    memset(&ring, 0, sizeof(ring));
    ring.fd = -1;
}

int fd_sendq_init(int enabled)
{
    struct io_uring_params p;
    unsigned i, *array;
    char *sq;

    if (!enabled)
        return FD_OK;
    if (fd_event_uring) {
        on_loop_ring = 1;
        return FD_OK;
    }
    memset(&p, 0, sizeof(p));
    /* only the loop thread submits; completions need no interrupt */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN;
    ring.fd = (int)syscall(__NR_io_uring_setup, QMAX, &p);
    if (ring.fd < 0 && errno == EINVAL) {
        memset(&p, 0, sizeof(p)); /* a kernel before 6.0 */
        ring.fd = (int)syscall(__NR_io_uring_setup, QMAX, &p);
    }
    if (ring.fd < 0)
        goto failed;

    ring.sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    ring.cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP)
        ring.sq_len = ring.cq_len = fd_max(ring.sq_len, ring.cq_len);
    ring.sq_map = mmap(NULL, ring.sq_len, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_POPULATE, ring.fd, IORING_OFF_SQ_RING);
    if (ring.sq_map == MAP_FAILED) {
        ring.sq_map = NULL;
        goto failed;
    }
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        ring.cq_map = ring.sq_map;
    } else {
        ring.cq_map = mmap(NULL, ring.cq_len, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_POPULATE, ring.fd,
                           IORING_OFF_CQ_RING);
        if (ring.cq_map == MAP_FAILED) {
            ring.cq_map = NULL;
            goto failed;
        }
    }
    ring.sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    ring.sqes = mmap(NULL, ring.sqes_len, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_POPULATE, ring.fd, IORING_OFF_SQES);
    if (ring.sqes == MAP_FAILED) {
        ring.sqes = NULL;
        goto failed;
    }

    sq = ring.sq_map;
    ring.sq_tail = (unsigned *)(sq + p.sq_off.tail);
    ring.sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    array = (unsigned *)(sq + p.sq_off.array);
    for (i = 0; i < p.sq_entries; i++)
        array[i] = i; /* SQE i is slot i, always */
    ring.cq_head = (unsigned *)((char *)ring.cq_map + p.cq_off.head);
    ring.cq_tail = (unsigned *)((char *)ring.cq_map + p.cq_off.tail);
    ring.cq_mask = (unsigned *)((char *)ring.cq_map + p.cq_off.ring_mask);
    ring.cqes = (struct io_uring_cqe *)((char *)ring.cq_map + p.cq_off.cqes);
    return FD_OK;

failed:
    fd_log_error(FD_LOG_NOTICE, errno, "batch_sends: io_uring is not "
                 "available, sending at once");
    ring_close();
    return FD_OK;
}

void fd_sendq_exit(void)
{
    nq = prepared = 0;
    on_loop_ring = 0;
    ring_close();
}

int fd_sendq_active(void)
{
    return ring.fd >= 0 || on_loop_ring;
}

unsigned fd_sendq_pending(void)
{
    return nq;
}

int fd_sendq_add(fd_sendop_t *op)
{
    if ((ring.fd < 0 && !on_loop_ring) || nq == QMAX)
        return FD_DECLINED;
    queue[nq++] = op;
    op->slot = nq;
    return FD_OK;
}

void fd_sendq_cancel(fd_sendop_t *op)
{
    if (op->slot) {
        queue[op->slot - 1] = NULL;
        op->slot = 0;
    }
}

static ssize_t send_now(fd_sendop_t *op)
{
    struct msghdr m = {.msg_iov = op->iov, .msg_iovlen = (size_t)op->niov};
    ssize_t n;

    do
        n = op->niov == 1 ? send(op->fd, op->iov[0].iov_base,
                                 op->iov[0].iov_len, MSG_NOSIGNAL |
                                 MSG_DONTWAIT)
                          : sendmsg(op->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

/* Reap what the kernel completed; returns how many. */
static unsigned reap(void)
{
    unsigned head = *ring.cq_head, got = 0;
    unsigned tail = __atomic_load_n(ring.cq_tail, __ATOMIC_ACQUIRE);

    for (; head != tail; head++, got++) {
        struct io_uring_cqe *cqe = &ring.cqes[head & *ring.cq_mask];
        queue[cqe->user_data]->res = cqe->res;
    }
    __atomic_store_n(ring.cq_head, head, __ATOMIC_RELEASE);
    return got;
}

/* The entry for queue[i]: MSG_DONTWAIT, so the kernel makes it inline
 * (a full socket buffer completes with -EAGAIN) and never parks it. */
static void fill(struct io_uring_sqe *sqe, unsigned i, uint64_t tag)
{
    fd_sendop_t *op = queue[i];

    memset(sqe, 0, sizeof(*sqe));
    sqe->fd = op->fd;
    sqe->msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT;
    sqe->user_data = tag;
    if (op->niov == 1) {
        sqe->opcode = IORING_OP_SEND;
        sqe->addr = (uintptr_t)op->iov[0].iov_base;
        sqe->len = (unsigned)op->iov[0].iov_len;
    } else {
        msgs[i] = (struct msghdr){.msg_iov = op->iov,
                                  .msg_iovlen = (size_t)op->niov};
        sqe->opcode = IORING_OP_SENDMSG;
        sqe->addr = (uintptr_t)&msgs[i];
        sqe->len = 1;
    }
}

/* Make the sends queue[0..n): one enter for all of them. */
static void submit(unsigned n)
{
    unsigned tail = *ring.sq_tail, i, sent = 0, taken = 0, got;
    int rc;

    for (i = 0; i < n; i++) {
        fd_sendop_t *op = queue[i];
        struct io_uring_sqe *sqe;

        if (op == NULL)
            continue;
        op->res = -EINPROGRESS;
        sqe = &ring.sqes[tail++ & *ring.sq_mask];
        fill(sqe, i, i);
        sent++;
    }
    __atomic_store_n(ring.sq_tail, tail, __ATOMIC_RELEASE);

    while (taken < sent) {
        rc = ring_enter(sent - taken, 0, 0);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
        taken += (unsigned)rc;
    }
    for (got = reap(); got < taken; got += reap())
        if (ring_enter(0, taken - got, IORING_ENTER_GETEVENTS) < 0 &&
            errno != EINTR)
            break;
    if (got < sent) {
        /* the ring is broken: what it did not take is sent here, and
         * batching stops for this worker */
        fd_log_error(FD_LOG_ERR, errno, "io_uring_enter() failed, "
                     "batch_sends stops");
        for (i = 0; i < n; i++)
            if (queue[i] && queue[i]->res == -EINPROGRESS)
                queue[i]->res = send_now(queue[i]);
        ring_close();
    }
}

/* Run the handlers of queue[0..n), made; what they queue moves to the
 * front. */
static void handlers(unsigned n)
{
    unsigned i, k = 0;

    for (i = 0; i < n; i++) {
        fd_sendop_t *op = queue[i];
        if (op == NULL)
            continue;
        queue[i] = NULL;
        op->slot = 0;
        op->handler(op);
    }
    for (i = n; i < nq; i++)
        if (queue[i]) {
            queue[k] = queue[i];
            queue[k]->slot = k + 1;
            k++;
        }
    nq = k;
}

void fd_sendq_flush(void)
{
    if (on_loop_ring)
        return; /* they go with the loop's wait */
    while (nq) {
        /* nq > 0 means the ring was there when these were added; if
         * submit() finds it broken, it sends them itself */
        unsigned n = nq;
        submit(n);
        handlers(n);
    }
}

void fd_sendq_prepare(void)
{
    unsigned i;

    for (i = 0; i < nq; i++) {
        fd_sendop_t *op = queue[i];
        struct io_uring_sqe *sqe;
        if (op == NULL)
            continue;
        op->res = -EINPROGRESS;
        if ((sqe = fd_uring_sqe()) == NULL)
            op->res = send_now(op);
        else
            fill(sqe, i, fd_uring_send_tag(i));
    }
    prepared = nq;
}

void fd_sendq_result(unsigned index, int res)
{
    if (index < prepared && queue[index])
        queue[index]->res = res;
}

unsigned fd_sendq_waiting(void)
{
    unsigned i, n = 0;

    for (i = 0; i < prepared; i++)
        n += queue[i] && queue[i]->res == -EINPROGRESS;
    return n;
}

void fd_sendq_finish(void)
{
    unsigned i, n = prepared;

    /* one the ring never answered for (it failed): sent here */
    for (i = 0; i < n; i++)
        if (queue[i] && queue[i]->res == -EINPROGRESS)
            queue[i]->res = send_now(queue[i]);
    prepared = 0;
    handlers(n);
}
