/*
 * streamload: the load and the backend of tests/bench/stream (L4 proxies
 * compared per server CPU-second). One epoll loop, no threads.
 *
 *   streamload serve PORT echo|sink|source BYTES
 *       echo: every byte back; sink: reads to EOF; source: BYTES to each
 *       connection, then closes. Prints "READY" once listening.
 *   streamload rate PORT CONNS SECONDS
 *       CONNS connections at a time, each: connect, 16 bytes out, 16 back,
 *       close. Prints the connections completed and failed.
 *   streamload get PORT     reads to EOF; prints bytes
 *   streamload put PORT BYTES
 *       sends BYTES, shuts the write half, reads to EOF; prints bytes
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536

static char buf[1 << 18];

static struct {
    long long left;   /* source: bytes still to send */
    int state;        /* rate: 0 connecting, 1 waiting for the echo */
    int got;
} conn[MAXFD];

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static struct sockaddr_in addr_of(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((unsigned short)port)};

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void add(int ep, int fd, unsigned events)
{
    struct epoll_event ev = {.events = events, .data.fd = fd};

    if (fd >= MAXFD || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl");
}

static void serve(int port, const char *mode, long long bytes)
{
    struct sockaddr_in a = addr_of(port);
    struct epoll_event evs[256];
    int one = 1, ls, ep = epoll_create1(0);

    ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 4096) < 0)
        die("bind");
    add(ep, ls, EPOLLIN);
    memset(buf, 'x', sizeof(buf));
    printf("READY\n");
    fflush(stdout);
    for (;;) {
        int i, n = epoll_wait(ep, evs, 256, -1);
        for (i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXFD) {
                        close(c);
                        continue;
                    }
                    conn[c].left = bytes;
                    add(ep, c, mode[1] == 'o' ? EPOLLOUT : EPOLLIN);
                }
                continue;
            }
            if (mode[1] == 'o') { /* source */
                while (conn[fd].left > 0) {
                    size_t w = conn[fd].left < (long long)sizeof(buf)
                                   ? (size_t)conn[fd].left : sizeof(buf);
                    ssize_t k = send(fd, buf, w, MSG_NOSIGNAL);
                    if (k < 0) {
                        if (errno == EAGAIN)
                            break;
                        conn[fd].left = 0;
                        break;
                    }
                    conn[fd].left -= k;
                }
                if (conn[fd].left <= 0)
                    close(fd);
                continue;
            }
            for (;;) { /* echo, sink */
                ssize_t k = recv(fd, buf, sizeof(buf), 0);
                if (k > 0) {
                    if (mode[0] == 'e' &&
                        send(fd, buf, (size_t)k, MSG_NOSIGNAL) != k) {
                        close(fd);
                        break;
                    }
                    continue;
                }
                if (k < 0 && errno == EAGAIN)
                    break;
                close(fd);
                break;
            }
        }
    }
}

static int rate_open(int ep, struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;

    if (fd < 0)
        return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (struct sockaddr *)a, sizeof(*a)) < 0 &&
        errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    conn[fd].state = 0;
    conn[fd].got = 0;
    add(ep, fd, EPOLLOUT);
    return fd;
}

static int rate(int port, int conns, double secs)
{
    struct sockaddr_in a = addr_of(port);
    struct epoll_event evs[256];
    int ep = epoll_create1(0), i, open_ = 0;
    long long done = 0, failed = 0;
    double end = now() + secs;

    for (i = 0; i < conns; i++)
        if (rate_open(ep, &a) >= 0)
            open_++;
    while (open_ > 0) {
        int n = epoll_wait(ep, evs, 256, 100);
        int stop = now() >= end;
        for (i = 0; i < n; i++) {
            int fd = evs[i].data.fd, ok = -1;
            if (evs[i].events & (EPOLLERR | EPOLLHUP) &&
                !(evs[i].events & EPOLLIN)) {
                ok = 0;
            } else if (conn[fd].state == 0) {
                struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
                if (send(fd, "0123456789abcdef", 16, MSG_NOSIGNAL) != 16)
                    ok = 0;
                else {
                    conn[fd].state = 1;
                    epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
                }
            } else {
                ssize_t k = recv(fd, buf, sizeof(buf), 0);
                if (k > 0 && (conn[fd].got += (int)k) >= 16)
                    ok = 1;
                else if (k == 0 || (k < 0 && errno != EAGAIN))
                    ok = 0;
            }
            if (ok < 0)
                continue;
            close(fd);
            open_--;
            if (ok)
                done++;
            else
                failed++;
            if (!stop && rate_open(ep, &a) >= 0)
                open_++;
        }
        if (stop && n == 0)
            break;
    }
    printf("%lld %lld\n", done, failed);
    return 0;
}

static int transfer(int port, long long put)
{
    struct sockaddr_in a = addr_of(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    long long got = 0;
    ssize_t k;

    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        die("connect");
    memset(buf, 'y', sizeof(buf));
    if (put == 0) /* get: the server's bytes, the client quiet */
        goto read;
    while (put > 0) {
        k = send(fd, buf, put < (long long)sizeof(buf) ? (size_t)put
                                                       : sizeof(buf),
                 MSG_NOSIGNAL);
        if (k <= 0)
            die("send");
        put -= k;
    }
    shutdown(fd, SHUT_WR);
read:
    while ((k = recv(fd, buf, sizeof(buf), 0)) > 0)
        got += k;
    printf("%lld\n", got);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "serve") == 0)
        serve(atoi(argv[2]), argv[3],
                     argc > 4 ? atoll(argv[4]) : 0);
    if (argc == 5 && strcmp(argv[1], "rate") == 0)
        return rate(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
    if (argc == 3 && strcmp(argv[1], "get") == 0)
        return transfer(atoi(argv[2]), 0);
    if (argc == 4 && strcmp(argv[1], "put") == 0)
        return transfer(atoi(argv[2]), atoll(argv[3]));
    fprintf(stderr, "usage: see the comment at the top of streamload.c\n");
    return 2;
}
