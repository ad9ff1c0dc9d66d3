/*
 * Unit tests: splices (core/event/fd_stream.c) over socketpairs on a real
 * epoll. Each test joins two pairs: the test holds one end of each (a, b),
 * the splice the other two, so what is written on a must come out of b and
 * back. Bytes both ways, bytes owed before the start, a large transfer
 * into a reader that stops (back-pressure), half-close, the idle timeout,
 * a side that resets, and fd_stream_move().
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_stream.h"
#include "fd_uring.h"
#include "tap.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define SIZE 4096 /* each direction's buffer */

static fd_worker_t worker;

typedef struct {
    fd_splice_t sp;
    int a, b;        /* the test's ends: a talks to side 0, b to side 1 */
    int ndone;
    char mem[2][SIZE];
} pair_t;

static void on_done(fd_splice_t *sp)
{
    ((pair_t *)sp->data)->ndone++;
}

static void nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Two socketpairs, the splice's ends non-blocking; 0 when it failed. */
static int pair_open(pair_t *p, fd_msec_t idle)
{
    int x[2], y[2];

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, x) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, y) < 0) {
        diag("socketpair(): %s", strerror(errno));
        return 0;
    }
    memset(p, 0, sizeof(*p));
    fd_splice_init(&p->sp, p->mem[0], p->mem[1], SIZE);
    p->sp.idle = idle;
    p->sp.done = on_done;
    p->sp.data = p;
    p->a = x[0];
    p->b = y[0];
    p->sp.side[0].s.ev.fd = x[1];
    p->sp.side[1].s.ev.fd = y[1];
    nonblock(x[1]);
    nonblock(y[1]);
    return 1;
}

static void pair_close(pair_t *p)
{
    if (!p->sp.over)
        fd_splice_close(&p->sp);
    close(p->a);
    close(p->b);
}

/* test() on a splice started at once with this idle timeout */
static void run(void (*test)(pair_t *p), fd_msec_t idle)
{
    pair_t p;

    if (!pair_open(&p, idle))
        return;
    fd_stream_splice(&p.sp);
    test(&p);
    pair_close(&p);
}

/* The loop's epoll (or ring) turns until nothing more happens. */
static void settle(void)
{
    struct epoll_event ev[16];
    int n, i, k;

    if (fd_event_uring) {
        /* a completion may arm more (a re-armed receive): a few empty
         * turns in a row say it is over */
        for (k = 0; k < 3; k++)
            if (fd_uring_wait(NULL, 0) > 0)
                k = -1;
        return;
    }
    while ((n = epoll_wait(worker.epfd, ev, 16, 0)) > 0) {
        for (i = 0; i < n; i++) {
            fd_event_t *e = (fd_event_t *)((uintptr_t)ev[i].data.ptr &
                                           ~(uintptr_t)1);
            if (e->fd >= 0)
                e->handler(e, ev[i].events);
        }
    }
}

static void put(int fd, const char *s)
{
    if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
        diag("write(): %s", strerror(errno));
}

/* What fd holds now, up to size (the test's ends block: poll first). */
static ssize_t take(int fd, char *buf, size_t size)
{
    ssize_t n = recv(fd, buf, size, MSG_DONTWAIT);

    return n < 0 && errno == EAGAIN ? FD_AGAIN : n;
}

/* The splice is over, once, for reason, with both its sides closed. */
static void is_over(pair_t *p, int reason, const char *what)
{
    is_int(p->ndone, 1, "%s: over, once", what);
    is_int(p->sp.reason, reason, "%s: for the reason", what);
    ok(p->sp.side[0].s.ev.fd < 0 && p->sp.side[1].s.ev.fd < 0,
       "%s: both sides closed", what);
}

/* fd holds exp now, nothing more, nothing less */
static void is_read(int fd, const char *exp, const char *what)
{
    char buf[64];
    ssize_t n = take(fd, buf, sizeof(buf));

    is_strn(buf, n > 0 ? n : 0, exp, "%s", what);
}

/* str written on one end comes out of the other */
static void relay(int from, int to, const char *str, const char *what)
{
    put(from, str);
    settle();
    is_read(to, str, what);
}

/* fd is at its end: the splice sent a FIN or closed */
static void is_eof(int fd, const char *what)
{
    char buf[8];

    is_int(take(fd, buf, sizeof(buf)), 0, "%s", what);
}

static void test_both_ways(void)
{
    pair_t p;

    if (!pair_open(&p, 60000))
        return;
    /* owed before the start: the rest of a 101 for a, a request's tail
     * for b */
    memcpy(p.sp.side[0].buf, "owed-a", 6);
    p.sp.side[0].len = 6;
    memcpy(p.sp.side[1].buf, "owed-b", 6);
    p.sp.side[1].len = 6;
    fd_stream_splice(&p.sp);
    settle();
    is_read(p.a, "owed-a", "the bytes owed to side 0 first");
    is_read(p.b, "owed-b", "the bytes owed to side 1 first");

    relay(p.a, p.b, "ping", "a to b");
    relay(p.b, p.a, "pong!", "b to a");
    is_int(p.sp.side[1].sent, 10, "counted: 10 bytes sent to side 1");
    is_int(p.sp.side[0].sent, 11, "counted: 11 bytes sent to side 0");
    is_int(p.ndone, 0, "not over while both are open");
    pair_close(&p);
}

static unsigned char pattern(uint64_t i)
{
    return (unsigned char)(i * 7 + (i >> 11));
}

/* The pattern's next piece (from *wrote, up to total) written into fd:
 * write()'s result, and *wrote moved on */
static ssize_t feed(int fd, uint64_t *wrote, uint64_t total)
{
    unsigned char out[16384];
    size_t k = (size_t)fd_min(sizeof(out), total - *wrote), i;
    ssize_t n;

    for (i = 0; i < k; i++)
        out[i] = pattern(*wrote + i);
    n = write(fd, out, k);
    if (n > 0)
        *wrote += (uint64_t)n;
    return n;
}

/*
 * 8 MiB into a, while b reads nothing at first: the splice stops taking
 * from a once b's socket is full, so a's writer blocks with most of the
 * bytes unsent (memory stays at one buffer). Then b reads in small bites
 * while a writes on, and every byte arrives, in order.
 */
static void test_back_pressure(void)
{
    const uint64_t total = 8u << 20;
    uint64_t wrote = 0, got = 0, bad = 0;
    unsigned char in[1000];
    int small = 16384, blocked, turns = 0;
    pair_t p;
    ssize_t n;

    if (!pair_open(&p, 60000))
        return;
    setsockopt(p.b, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    setsockopt(p.sp.side[1].s.ev.fd, SOL_SOCKET, SO_SNDBUF, &small,
               sizeof(small));
    nonblock(p.a);
    fd_stream_splice(&p.sp);

    for (blocked = 0; !blocked && wrote < total;) {
        n = feed(p.a, &wrote, total);
        settle();
        /* a full write after the splice settled: still taking */
        blocked = n < 0 && errno == EAGAIN;
    }
    ok(blocked && wrote < total / 4,
       "a's writer blocks while b does not read (%llu of %llu bytes in)",
       (unsigned long long)wrote, (unsigned long long)total);
    ok(p.sp.side[1].len <= SIZE, "the splice holds at most one buffer");

    while (got < total && turns++ < 1000000) {
        if (wrote < total)
            feed(p.a, &wrote, total);
        settle();
        n = take(p.b, (char *)in, sizeof(in));
        if (n > 0) {
            ssize_t i;
            for (i = 0; i < n; i++)
                bad += in[i] != pattern(got + (uint64_t)i);
            got += (uint64_t)n;
        } else if (n == 0) {
            break;
        }
    }
    is_int(got, total, "every byte reached the slow reader");
    is_int(bad, 0, "in order, unchanged");
    is_int(p.ndone, 0, "and the splice goes on");
    pair_close(&p);
}

static void test_half_close(pair_t *p)
{
    put(p->a, "last");
    shutdown(p->a, SHUT_WR);
    settle();
    is_read(p->b, "last", "a's last bytes reach b");
    is_eof(p->b, "then a's FIN: b reads the end");
    is_int(p->ndone, 0, "half-closed: not over");

    relay(p->b, p->a, "reply", "b still talks to a");
    shutdown(p->b, SHUT_WR);
    settle();
    is_eof(p->a, "b's FIN reaches a");
    is_over(p, FD_SPLICE_END, "both ended");
}

static void test_timeout(pair_t *p)
{
    fd_current_msec += 60;
    relay(p->a, p->b, "x", "a byte through");
    fd_current_msec += 60; /* 120 after the start, 60 after the byte */
    fd_timer_expire();
    is_int(p->ndone, 0, "a byte 60ms ago: not idle yet");
    fd_current_msec += 50;
    fd_timer_expire();
    is_over(p, FD_SPLICE_TIMEOUT, "idle 110ms past a 100ms timeout");
    settle(); /* io_uring: the close takes effect with the next enter */
    is_eof(p->a, "a sees the close");
    is_eof(p->b, "b sees the close");
}

/* A Unix socket closed with unread data resets its peer (ECONNRESET). */
static void test_reset(pair_t *p)
{
    put(p->b, "unread");
    settle();
    close(p->a);
    p->a = -1;
    settle();
    is_over(p, FD_SPLICE_ERROR, "a side reset");
    /* what failed is told, for the owner's log line */
    is_int(p->sp.err_side, 0, "the failed side is the reset one");
    is_int(p->sp.err, ECONNRESET, "with ECONNRESET");
    is_eof(p->b, "the other side is closed");
}

static void test_move(void)
{
    fd_stream_t from, to;

    memset(&from, 0, sizeof(from));
    memset(&to, 0, sizeof(to));
    from.ev.fd = 42;
    from.tp = &fd_transport_tcp;
    from.readable = 1;
    from.eof = 1;
    from.registered = 1;
    fd_timer_add(&from.timer, 1000);
    fd_stream_move(&to, &from);
    ok(to.ev.fd == 42 && to.tp == &fd_transport_tcp && to.readable &&
           to.eof && to.registered,
       "move: the descriptor, transport and flags go");
    ok(from.ev.fd == -1 && from.tls == NULL && !from.registered,
       "move: nothing is left to close twice");
    ok(!fd_timer_armed(&to.timer), "move: the timer stays behind");
    fd_timer_del(&from.timer);
}

int main(void)
{
    worker.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (worker.epfd < 0 || fd_timer_init() != FD_OK) {
        perror("setup");
        return 1;
    }
    fd_worker = &worker;
    fd_current_msec = 1000;
    signal(SIGPIPE, SIG_IGN); /* as in the worker: a reset is EPIPE */

    test_both_ways();
    test_back_pressure();
    run(test_half_close, 60000);
    run(test_timeout, 100);
    run(test_reset, 60000);
    test_move();

    /* the same splices over the io_uring backend: the ring receives for
     * both sides, and pauses for a reader that stops */
    if (fd_uring_init() != FD_OK) {
        diag("io_uring: %s: not tested", strerror(errno));
        return done_testing();
    }
    test_both_ways();
    test_back_pressure();
    run(test_half_close, 60000);
    run(test_timeout, 100);
    run(test_reset, 60000);
    fd_uring_exit();
    return done_testing();
}
