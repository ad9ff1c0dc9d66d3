/*
 * Unit tests: the io_uring event backend (core/event/fd_uring.c) over
 * socketpairs and a loopback listener: bytes received into the ring and
 * read through fd_stream_recv() (what a handler leaves is kept, in order),
 * the peer's end, a reader that stops (the ring stops too, and nothing is
 * lost), a close that reaches the peer, completions for a registration
 * that is gone (dropped, their buffers back: a thousand of them do not
 * exhaust the ring), multishot accept with the peer's address, a poll,
 * a batched send, and a signal that ends a wait.
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_sendq.h"
#include "fd_stream.h"
#include "fd_uring.h"
#include "tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static fd_worker_t worker;

typedef struct {
    fd_stream_t s;             /* first: the event is the stream */
    unsigned events;           /* handler calls */
    uint32_t mask;             /* their events, or'ed */
    size_t take;               /* bytes the handler reads each time */
    char got[256 * 1024];
    size_t ngot;
} conn_t;

static void conn_handler(fd_event_t *ev, uint32_t events)
{
    conn_t *c = (conn_t *)ev;
    size_t want = c->take;

    c->events++;
    c->mask |= events;
    fd_stream_events(&c->s, events);
    while (want > 0 && c->ngot < sizeof(c->got)) {
        ssize_t n = fd_stream_recv(&c->s, c->got + c->ngot,
                                   fd_min(want, sizeof(c->got) - c->ngot));
        if (n <= 0)
            break;
        c->ngot += (size_t)n;
        want -= (size_t)n;
    }
}

static void settle(void)
{
    int k;

    for (k = 0; k < 3; k++)
        if (fd_uring_wait(NULL, 0) > 0)
            k = -1;
}

/* c on one end of a new socketpair, registered; the other end returned */
static int conn_open(conn_t *c, size_t take)
{
    int sv[2];

    memset(c, 0, sizeof(*c));
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0)
        return -1;
    c->s.ev.fd = sv[0];
    c->s.ev.stream = 1;
    c->s.ev.handler = conn_handler;
    c->s.tp = &fd_transport_tcp;
    c->take = take;
    if (fd_event_add(&c->s.ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) < 0)
        return -1;
    return sv[1];
}

static ssize_t read_all(conn_t *c, char *buf, size_t size)
{
    size_t n = 0;
    ssize_t k;

    while (n < size && (k = fd_stream_recv(&c->s, buf + n, size - n)) > 0)
        n += (size_t)k;
    return (ssize_t)n;
}

static void test_receive(void)
{
    conn_t c;
    char buf[64];
    int peer = conn_open(&c, 2);

    settle();
    ok(!fd_uring_pending(&c.s.ev), "an idle stream holds nothing");
    if (write(peer, "hello", 5) != 5)
        diag("write: %s", strerror(errno));
    settle();
    ok(c.events >= 1 && (c.mask & EPOLLIN), "bytes: the handler is called");
    is_strn(c.got, c.ngot, "he", "it read what it wanted");
    ok(fd_uring_pending(&c.s.ev), "the rest is kept for it");
    is_int(fd_stream_recv(&c.s, buf, sizeof(buf)), 3, "and read later");
    is_strn(buf, 3, "llo", "in order");
    is_int(fd_stream_recv(&c.s, buf, sizeof(buf)), FD_AGAIN,
           "then nothing: FD_AGAIN");
    ok(!c.s.readable, "and not readable");
    ok(!fd_uring_pending(&c.s.ev), "nothing held once read");

    shutdown(peer, SHUT_WR);
    settle();
    ok(c.mask & EPOLLRDHUP, "the peer's end: RDHUP");
    is_int(fd_stream_recv(&c.s, buf, sizeof(buf)), 0, "read: 0");
    fd_event_close(&c.s.ev);
    settle();
    is_int(read(peer, buf, sizeof(buf)), 0, "close: the peer sees the end");
    close(peer);
}

/* A reader that stops: the ring stops receiving for it past its bound,
 * and every byte arrives, in order, when it reads again. */
static void test_pause(void)
{
    static conn_t c;
    static char out[1 << 20], in[1 << 20];
    size_t sent = 0, got = 0, i;
    int peer = conn_open(&c, 0), rounds;
    ssize_t n;

    for (i = 0; i < sizeof(out); i++)
        out[i] = (char)(i * 7 + i / 251);
    for (rounds = 0; rounds < 2000 && got < sizeof(out); rounds++) {
        if (sent < sizeof(out) &&
            (n = write(peer, out + sent, sizeof(out) - sent)) > 0)
            sent += (size_t)n;
        settle();
        /* read only every tenth round: the rest of the time it stops */
        if (rounds % 10 == 9)
            got += (size_t)read_all(&c, in + got, sizeof(in) - got);
    }
    is_int(got, sizeof(out), "a reader that stops: every byte (1 MB)");
    ok(memcmp(in, out, sizeof(out)) == 0, "in order, unchanged");
    /* read to its end (no read after the last byte, as a response read
     * by its length): the ring receives again without being asked */
    c.take = 64;
    if (write(peer, "more", 4) != 4)
        diag("write: %s", strerror(errno));
    settle();
    is_strn(c.got, c.ngot, "more", "after a pause, the next bytes come "
            "by themselves");
    fd_event_close(&c.s.ev);
    close(peer);
}

/* A stream handed to another struct (a connection becoming a tunnel's
 * side) takes its registration along, and with it what the ring received
 * that nobody read yet. */
static void test_move(void)
{
    static conn_t a, b;
    char buf[64];
    int peer = conn_open(&a, 0);
    unsigned seen;

    settle();
    if (write(peer, "early", 5) != 5)
        diag("write: %s", strerror(errno));
    settle();
    ok(fd_uring_pending(&a.s.ev), "bytes nobody read are held");
    seen = a.events;
    memset(&b, 0, sizeof(b));
    b.s.ev.handler = conn_handler;
    b.take = 64;
    fd_stream_move(&b.s, &a.s);
    ok(a.s.ev.slot == 0 && b.s.ev.slot != 0, "the registration moved");
    is_int(fd_stream_recv(&b.s, buf, sizeof(buf)), 5, "the new owner reads "
           "them");
    is_strn(buf, 5, "early", "unchanged");
    if (write(peer, "later", 5) != 5)
        diag("write: %s", strerror(errno));
    settle();
    is_strn(b.got, b.ngot, "later", "and the next bytes reach its handler");
    ok(a.events == seen && a.ngot == 0, "none reach the old one");
    fd_event_close(&b.s.ev);
    close(peer);
}

/* Completions for a closed registration are dropped with their buffers
 * back: more closes than the ring has buffers leave it working. */
static void test_stale(void)
{
    static conn_t a, b;
    int i, pa, pb, bad = 0, reused = 0;
    unsigned seen, slot;

    for (i = 0; i < 1000; i++) {
        pa = conn_open(&a, 64);
        settle();
        seen = a.events; /* writable, at once */
        slot = a.s.ev.slot;
        if (write(pa, "stale", 5) != 5)
            bad++;
        fd_event_close(&a.s.ev); /* before its completion is seen */
        pb = conn_open(&b, 64);  /* the slot just freed: its next user */
        reused += b.s.ev.slot == slot;
        settle();
        if (b.ngot != 0 || a.events != seen || a.ngot != 0)
            bad++;
        if (write(pb, "fresh", 5) != 5)
            bad++;
        settle();
        if (b.ngot != 5 || memcmp(b.got, "fresh", 5) != 0)
            bad++;
        fd_event_close(&b.s.ev);
        close(pa);
        close(pb);
    }
    is_int(reused, 1000, "each next registration took the freed slot (so "
           "the stale completions below met a new generation)");
    is_int(bad, 0, "1000 closes with a completion on the way: none "
           "reaches the next user of the slot, and the ring keeps "
           "its buffers");
}

static int accepted[8], naccepted;
static struct sockaddr_in accepted_sa;

static void listen_handler(fd_event_t *ev, uint32_t events)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd;

    (void)events;
    while ((fd = fd_event_accept(ev, (struct sockaddr *)&ss, &len)) >= 0) {
        if (naccepted < 8)
            accepted[naccepted++] = fd;
        else
            close(fd);
        memcpy(&accepted_sa, &ss, sizeof(accepted_sa));
        len = sizeof(ss);
    }
}

static void test_accept(void)
{
    fd_event_t ls = {.listen = 1, .handler = listen_handler};
    struct sockaddr_in sa = {.sin_family = AF_INET}, me;
    socklen_t len = sizeof(sa);
    int cl, one = 1, i;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ls.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(ls.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(ls.fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(ls.fd, 16) < 0 ||
        getsockname(ls.fd, (struct sockaddr *)&sa, &len) < 0 ||
        fd_event_add(&ls, EPOLLIN) < 0) {
        diag("listen: %s", strerror(errno));
        return;
    }
    cl = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(cl, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        diag("connect: %s", strerror(errno));
    len = sizeof(me);
    getsockname(cl, (struct sockaddr *)&me, &len);
    for (i = 0; i < 100 && naccepted == 0; i++) {
        settle();
        if (naccepted == 0)
            usleep(1000);
    }
    is_int(naccepted, 1, "multishot accept: the connection");
    ok(accepted_sa.sin_family == AF_INET &&
           accepted_sa.sin_port == me.sin_port &&
           accepted_sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK),
       "with the peer's address and port");
    ok(naccepted && (fcntl(accepted[0], F_GETFL) & O_NONBLOCK),
       "non-blocking");

    /* no longer registered: accept4() itself (a drain at a stop) */
    fd_event_del(&ls);
    settle();
    close(cl);
    cl = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(cl, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        diag("connect: %s", strerror(errno));
    for (i = 0; i < 100 && naccepted < 2; i++) {
        listen_handler(&ls, EPOLLIN);
        if (naccepted < 2)
            usleep(1000);
    }
    is_int(naccepted, 2, "unregistered: fd_event_accept() is accept4()");
    close(cl);
    for (i = 0; i < naccepted; i++)
        close(accepted[i]);
    close(ls.fd);
}

static unsigned polled;

static void poll_handler(fd_event_t *ev, uint32_t events)
{
    uint64_t v;

    if ((events & EPOLLIN) && read(ev->fd, &v, sizeof(v)) == sizeof(v))
        polled++;
}

static void test_poll(void)
{
    fd_event_t ev = {.handler = poll_handler};
    uint64_t one = 1;
    int i;

    ev.fd = eventfd(0, EFD_NONBLOCK);
    fd_event_add(&ev, EPOLLIN);
    settle();
    is_int(polled, 0, "a poll: nothing yet");
    for (i = 0; i < 3; i++) {
        if (write(ev.fd, &one, sizeof(one)) != sizeof(one))
            diag("write: %s", strerror(errno));
        settle();
    }
    is_int(polled, 3, "a poll: one event per write, multishot");
    fd_event_close(&ev);
    settle();
}

static ssize_t send_res = -1;

static void sent(fd_sendop_t *op)
{
    send_res = op->res;
}

static void test_send(void)
{
    int sv[2];
    fd_sendop_t op;
    char buf[16];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0)
        return;
    memset(&op, 0, sizeof(op));
    op.fd = sv[0];
    op.niov = 2;
    op.iov[0] = (struct iovec){.iov_base = "one ", .iov_len = 4};
    op.iov[1] = (struct iovec){.iov_base = "turn", .iov_len = 4};
    op.handler = sent;
    is_int(fd_sendq_add(&op), FD_OK, "a send joins the turn's batch");
    fd_uring_wait(NULL, 0);
    is_int(send_res, 8, "made with the wait; its handler ran");
    is_strn(buf, read(sv[1], buf, sizeof(buf)), "one turn",
            "the peer has it");
    close(sv[0]);
    close(sv[1]);
}

static volatile sig_atomic_t got_usr1;

static void on_usr1(int signo)
{
    (void)signo;
    got_usr1 = 1;
}

/* A signal during a wait with no timer ends the wait: the loop sees its
 * flag (liburing enters again by itself when an enter ends with nothing
 * completed, unless it was given a timeout). */
static void test_signal(void)
{
    struct sigaction sa;
    sigset_t block, waitset;
    pid_t child;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &waitset);
    sigdelset(&waitset, SIGUSR1);
    child = fork();
    if (child == 0) {
        usleep(100 * 1000);
        kill(getppid(), SIGUSR1);
        _exit(0);
    }
    alarm(10); /* the safety net: a lost signal kills the test */
    while (!got_usr1)
        if (fd_uring_wait(&waitset, -1) < 0)
            break;
    alarm(0);
    ok(got_usr1, "a signal ends a wait that has no timeout");
    waitpid(child, NULL, 0);
    sigprocmask(SIG_UNBLOCK, &block, NULL);
}

int main(void)
{
    fd_worker = &worker;
    fd_current_msec = 1000;
    signal(SIGPIPE, SIG_IGN);
    if (fd_timer_init() != FD_OK || fd_uring_init() != FD_OK) {
        printf("1..0 # SKIP io_uring: %s\n", strerror(errno));
        return 0;
    }
    fd_sendq_init(1);
    test_receive();
    test_pause();
    test_move();
    test_stale();
    test_accept();
    test_poll();
    test_send();
    test_signal();
    fd_sendq_exit();
    fd_uring_exit();
    return done_testing();
}
