/*
 * Unit tests: the batched send queue (fd_sendq), over socketpairs: with
 * io_uring and without (batch_sends = off declines every send).
 */
#include "fd_core.h"
#include "fd_sendq.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#define N 300 /* more than the queue holds */

static unsigned calls;
static fd_sendop_t *requeue;  /* a handler queues this one again */
static fd_sendop_t *to_cancel; /* a handler cancels this one */

static void handler(fd_sendop_t *op)
{
    calls++;
    if (to_cancel) {
        fd_sendq_cancel(to_cancel);
        to_cancel = NULL;
    }
    if (requeue == op) {
        requeue = NULL;
        op->iov[0].iov_base = "again";
        op->iov[0].iov_len = 5;
        fd_sendq_add(op);
    }
}

static ssize_t drain(int fd, char *buf, size_t size)
{
    ssize_t n = recv(fd, buf, size, MSG_DONTWAIT);
    return n < 0 ? -errno : n;
}

static void pair(int sv[2])
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0) {
        perror("socketpair");
        _exit(1);
    }
}

static void op_init(fd_sendop_t *op, int fd, const char *a, const char *b)
{
    memset(op, 0, sizeof(*op));
    op->fd = fd;
    op->handler = handler;
    op->iov[0].iov_base = (void *)a;
    op->iov[0].iov_len = strlen(a);
    op->niov = 1;
    if (b) {
        op->iov[1].iov_base = (void *)b;
        op->iov[1].iov_len = strlen(b);
        op->niov = 2;
    }
}

int main(void)
{
    static fd_sendop_t ops[N];
    static int sv[N][2];
    fd_sendop_t a, b, c, full;
    int s1[2], s2[2], s3[2], s4[2], queued = 0, declined = 0, good = 0;
    char buf[256], *big;
    unsigned i;

    /* off: every send declined, nothing pending */
    fd_sendq_init(0);
    pair(s1);
    op_init(&a, s1[0], "x", NULL);
    is_int(fd_sendq_add(&a), FD_DECLINED, "off: add declines");
    ok(!fd_sendq_active() && !fd_sendq_pending(), "off: nothing pending");

    fd_sendq_init(1);
    if (!fd_sendq_active()) {
        diag("io_uring is not available here: the rest is skipped");
        return done_testing();
    }

    /* one and two buffers; a cancelled op is not sent */
    pair(s2);
    pair(s3);
    op_init(&a, s1[0], "GET / HTTP/1.1\r\n\r\n", NULL);
    op_init(&b, s2[0], "POST / HTTP/1.1\r\n", "Content-Length: 0\r\n\r\n");
    op_init(&c, s3[0], "never", NULL);
    is_int(fd_sendq_add(&a), FD_OK, "add one buffer");
    is_int(fd_sendq_add(&b), FD_OK, "add two buffers");
    is_int(fd_sendq_add(&c), FD_OK, "add a third");
    ok(fd_sendq_pending(), "pending");
    fd_sendq_cancel(&c);
    fd_sendq_cancel(&c); /* twice is harmless */
    ok(c.slot == 0, "cancelled op is not queued");
    is_int(drain(s1[1], buf, sizeof(buf)), -EAGAIN, "nothing left before "
           "the flush");
    calls = 0;
    fd_sendq_flush();
    is_int(calls, 2, "two handlers ran");
    ok(!fd_sendq_pending() && a.slot == 0 && b.slot == 0, "queue empty");
    is_int(a.res, 18, "res: bytes of one buffer");
    is_int(b.res, 17 + 21, "res: bytes of two buffers");
    is_int(drain(s1[1], buf, sizeof(buf)), 18, "first socket got them");
    is_int(drain(s2[1], buf, sizeof(buf)), 38, "second socket got both "
           "buffers");
    ok(memcmp(buf, "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 38) == 0,
       "in order");
    is_int(drain(s3[1], buf, sizeof(buf)), -EAGAIN, "the cancelled send "
           "was not made");

    /* a handler that queues again is flushed in the same call; one that
     * cancels an op of the same batch keeps it from its handler */
    op_init(&a, s1[0], "one", NULL);
    op_init(&b, s2[0], "two", NULL);
    fd_sendq_add(&a);
    fd_sendq_add(&b);
    requeue = &a;
    to_cancel = &b;
    calls = 0;
    fd_sendq_flush();
    is_int(calls, 2, "a's handler twice, b's cancelled before it ran");
    is_int(drain(s1[1], buf, sizeof(buf)), 8, "requeued send made");
    ok(memcmp(buf, "oneagain", 8) == 0, "both writes, in order");
    is_int(drain(s2[1], buf, sizeof(buf)), 3, "b was sent (cancelled "
           "after the enter)");

    /* errors come back as -errno: a full buffer, a closed peer */
    pair(s4);
    big = malloc(1 << 22);
    memset(big, 'z', 1 << 22);
    op_init(&full, s4[0], "", NULL);
    full.iov[0].iov_base = big;
    full.iov[0].iov_len = 1 << 22;
    fd_sendq_add(&full);
    fd_sendq_flush();
    ok(full.res > 0 && full.res < (1 << 22), "a short write (%zd bytes)",
       full.res);
    full.iov[0].iov_len = 1 << 22;
    fd_sendq_add(&full);
    fd_sendq_flush();
    is_int(full.res, -EAGAIN, "full socket buffer: -EAGAIN, no wait");
    close(s3[1]);
    op_init(&c, s3[0], "to nobody", NULL);
    fd_sendq_add(&c);
    fd_sendq_flush();
    is_int(c.res, -EPIPE, "closed peer: -EPIPE, no SIGPIPE");

    /* more than the queue holds: the rest decline, the queue stays good */
    for (i = 0; i < N; i++) {
        pair(sv[i]);
        op_init(&ops[i], sv[i][0], "hello", NULL);
        if (fd_sendq_add(&ops[i]) == FD_OK)
            queued++;
        else
            declined++;
    }
    ok(queued >= 64 && declined == N - queued, "%d queued, %d declined",
       queued, declined);
    fd_sendq_flush();
    for (i = 0; i < (unsigned)queued; i++)
        good += ops[i].res == 5 && drain(sv[i][1], buf, sizeof(buf)) == 5;
    is_int(good, queued, "every queued send made");

    fd_sendq_exit();
    ok(!fd_sendq_active(), "exit closes the ring");
    free(big);
    return done_testing();
}
