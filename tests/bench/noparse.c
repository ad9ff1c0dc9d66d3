/*
 * noparse: "a server that parses nothing", the ceiling probe of the
 * plaintext benchmarks (tests/bench/run adds it as the pseudo-peer
 * "noparse"). Not part of the main build: the runner compiles it with
 * `cc -O2 -o objs/bench/noparse tests/bench/noparse.c` when needed.
 *
 * One thread, one epoll instance, edge-triggered. Each read is searched for
 * request terminators ("\r\n\r\n", memmem, including one split across two
 * reads) and that many canned responses leave in one write. No header is
 * looked at and the Date is formatted once a second, so what it reaches is
 * the cost of the kernel's socket work plus the client: what a real server's
 * parser and handlers have to fit under.
 *
 * usage: noparse PORT [ADDR]   (ADDR defaults to 127.0.0.1)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_EVENTS 512
#define READ_SIZE 65536
#define MAX_BATCH 1024 /* responses per write; more wait for the next read */

static char resp[256];
static size_t resp_len;
static time_t resp_time;

/* The canned response, with a Date refreshed once a second. */
static void response_refresh(void)
{
    time_t now = time(NULL);
    struct tm tm;
    char date[64];

    if (now == resp_time)
        return;
    resp_time = now;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    resp_len = (size_t)snprintf(resp, sizeof(resp),
                                "HTTP/1.1 200 OK\r\n"
                                "Server: noparse\r\n"
                                "Date: %s\r\n"
                                "Content-Type: text/plain\r\n"
                                "Content-Length: 13\r\n"
                                "\r\n"
                                "Hello, World!",
                                date);
}

/* Per connection: the last 3 bytes of the previous read, so that a
 * terminator split across two reads still counts once. */
typedef struct {
    int fd;
    int tail_len;
    char tail[3];
} conn_t;

static size_t count_terminators(conn_t *c, const char *p, size_t n)
{
    size_t count = 0;
    const char *end = p + n, *q = p;

    if (c->tail_len) {
        char join[6];
        size_t jn = (size_t)c->tail_len, take = n < 3 ? n : 3;

        memcpy(join, c->tail, jn);
        memcpy(join + jn, p, take);
        /* a match that starts in the tail and ends in the new data */
        for (size_t i = 0; i < jn && i + 4 <= jn + take; i++)
            if (memcmp(join + i, "\r\n\r\n", 4) == 0)
                count++;
    }
    while ((q = memmem(q, (size_t)(end - q), "\r\n\r\n", 4)) != NULL) {
        count++;
        q += 4;
    }
    /* keep up to 3 trailing bytes not consumed by a terminator */
    c->tail_len = n < 3 ? (int)n : 3;
    memcpy(c->tail, end - c->tail_len, (size_t)c->tail_len);
    if (n >= 4 && memcmp(end - 4, "\r\n\r\n", 4) == 0)
        c->tail_len = 0;
    return count;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                /* a probe, not a server: a client that does not read is
                 * dropped rather than buffered for */
                return -1;
            }
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static char buf[READ_SIZE];
    static char out[MAX_BATCH * 256];
    struct epoll_event ev, events[MAX_EVENTS];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int ls, ep, one = 1;

    if (argc < 2) {
        fprintf(stderr, "usage: noparse PORT [ADDR]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    sa.sin_port = htons((unsigned short)atoi(argv[1]));
    if (inet_pton(AF_INET, argc > 2 ? argv[2] : "127.0.0.1", &sa.sin_addr)
        != 1) {
        fprintf(stderr, "noparse: bad address\n");
        return 2;
    }
    ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one))
        || bind(ls, (struct sockaddr *)&sa, sizeof(sa))
        || listen(ls, 4096)) {
        perror("noparse: listen");
        return 1;
    }
    ep = epoll_create1(0);
    ev.events = EPOLLIN;
    ev.data.ptr = NULL;
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev)) {
        perror("noparse: epoll");
        return 1;
    }
    response_refresh();

    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, 1000);

        if (n < 0 && errno != EINTR) {
            perror("noparse: epoll_wait");
            return 1;
        }
        response_refresh();
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;

            if (c == NULL) {
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    conn_t *nc = calloc(1, sizeof(*nc));
                    if (nc == NULL) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
                               sizeof(one));
                    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
                    ev.data.ptr = nc;
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
                        close(fd);
                        free(nc);
                    }
                }
                continue;
            }
            /* edge-triggered: read until EAGAIN, answer each read at once */
            for (;;) {
                ssize_t r = read(c->fd, buf, sizeof(buf));
                size_t k, len = 0;

                if (r < 0 && errno == EINTR)
                    continue;
                if (r < 0 && errno == EAGAIN)
                    break;
                if (r <= 0)
                    goto close;
                k = count_terminators(c, buf, (size_t)r);
                while (k) {
                    size_t batch = k < MAX_BATCH ? k : MAX_BATCH;
                    for (size_t j = 0; j < batch; j++) {
                        memcpy(out + len, resp, resp_len);
                        len += resp_len;
                    }
                    if (write_all(c->fd, out, len))
                        goto close;
                    k -= batch;
                    len = 0;
                }
                if ((size_t)r < sizeof(buf))
                    break; /* short read: drained (RDHUP checked below) */
            }
            if (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                goto close;
            continue;
        close:
            close(c->fd);
            free(c);
        }
    }
}
