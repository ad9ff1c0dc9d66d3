/*
 * rateload: requests at a fixed rate, and their latency (the load of
 * tests/bench/limit_req_redis). wrk and h2load send as fast as the
 * server answers, so their latency at saturation is the server's queue;
 * the latency a feature adds is seen below saturation, at a rate the
 * server keeps up with. One epoll loop, no threads.
 *
 *   rateload PORT PATH CONNS RATE SECONDS
 *
 * CONNS keep-alive connections share RATE requests a second: each sends
 * one request every CONNS/RATE seconds, at a phase of its own. A request
 * is timed from when it was due, not from when it left: a response that
 * comes late delays the next request, and that wait is counted (wrk2's
 * correction of "coordinated omission"); a timerfd wakes the loop when the
 * next one is due. Prints the requests answered
 * 200, the failures, and the latency percentiles in microseconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;
    int busy;          /* a request is out */
    double due;        /* when the next request is due */
    double sent_due;   /* when the request out was due */
    size_t have;
    char in[4096];
} conn_t;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* a whole response in c->in: its length; 0: not yet; -1: not HTTP/1.1
 * 200 with a Content-Length */
static long complete(conn_t *c)
{
    char *end, *cl;
    long len;

    c->in[c->have] = '\0';
    end = strstr(c->in, "\r\n\r\n");
    if (end == NULL)
        return c->have < sizeof(c->in) - 1 ? 0 : -1;
    if (strncmp(c->in, "HTTP/1.1 200 ", 13) != 0)
        return -1;
    cl = strcasestr(c->in, "\r\ncontent-length:");
    if (cl == NULL || cl > end)
        return -1;
    len = strtol(cl + 17, NULL, 10) + (end + 4 - c->in);
    return (size_t)len <= c->have ? len : 0;
}

int main(int argc, char **argv)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    struct epoll_event evs[256];
    char req[512];
    double *lat, interval, start, end, t, next;
    long n = 0, failed = 0, cap, len;
    int conns, ep, tfd, one = 1, reqlen, i, k;
    conn_t *cs;

    if (argc != 6) {
        fprintf(stderr, "usage: rateload PORT PATH CONNS RATE SECONDS\n");
        return 2;
    }
    a.sin_port = htons((unsigned short)atoi(argv[1]));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    conns = atoi(argv[3]);
    interval = conns / atof(argv[4]);
    cap = (long)(atof(argv[4]) * atof(argv[5]) * 1.1) + 16;
    reqlen = snprintf(req, sizeof(req),
                      "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", argv[2]);
    lat = malloc(cap * sizeof(double));
    cs = calloc(conns, sizeof(conn_t));
    ep = epoll_create1(0);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (lat == NULL || cs == NULL || ep < 0 || tfd < 0) {
        perror("rateload");
        return 1;
    }
    start = now() + 0.2;
    for (i = 0; i < conns; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};

        cs[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (cs[i].fd < 0
            || connect(cs[i].fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
            perror("connect");
            return 1;
        }
        setsockopt(cs[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
        cs[i].due = start + interval * i / conns;
    }
    {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)-1};

        epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    }
    end = start + atof(argv[5]);
    for (;;) {
        t = now();
        if (t >= end)
            break;
        for (i = 0; i < conns; i++) {
            conn_t *c = &cs[i];

            if (c->busy || c->due > t)
                continue;
            if (write(c->fd, req, reqlen) != reqlen) {
                failed++;
                c->due += interval;
                continue;
            }
            c->busy = 1;
            c->sent_due = c->due;
            c->due += interval;
        }
        /* the timer for the next request due, to the nanosecond (an
         * epoll_wait timeout has milliseconds) */
        next = end;
        for (i = 0; i < conns; i++)
            if (!cs[i].busy && cs[i].due < next)
                next = cs[i].due;
        {
            struct itimerspec at = {{0, 0}, {0, 0}};
            struct timespec ts;
            double d = next - now();

            clock_gettime(CLOCK_MONOTONIC, &ts);
            if (d < 1e-6)
                d = 1e-6;
            at.it_value.tv_sec = ts.tv_sec + (time_t)d;
            at.it_value.tv_nsec = ts.tv_nsec + (long)((d - (time_t)d) * 1e9);
            if (at.it_value.tv_nsec >= 1000000000L) {
                at.it_value.tv_sec++;
                at.it_value.tv_nsec -= 1000000000L;
            }
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &at, NULL);
        }
        k = epoll_wait(ep, evs, 256, 100);
        for (i = 0; i < k; i++) {
            conn_t *c;
            ssize_t got;

            if (evs[i].data.u32 == (uint32_t)-1) {
                uint64_t x;

                if (read(tfd, &x, sizeof(x)) < 0 && errno != EAGAIN)
                    perror("timerfd");
                continue;
            }
            c = &cs[evs[i].data.u32];
            got = read(c->fd, c->in + c->have, sizeof(c->in) - 1 - c->have);
            if (got <= 0) {
                fprintf(stderr, "rateload: connection %u closed\n",
                        evs[i].data.u32);
                return 1;
            }
            c->have += (size_t)got;
            len = complete(c);
            if (len == 0)
                continue;
            if (len < 0 || !c->busy) {
                fprintf(stderr, "rateload: unexpected response: %.80s\n",
                        c->in);
                return 1;
            }
            if (c->sent_due >= start && n < cap)
                lat[n++] = now() - c->sent_due;
            c->busy = 0;
            c->have -= (size_t)len;
            memmove(c->in, c->in + len, c->have);
        }
    }
    qsort(lat, n, sizeof(double), cmp);
    printf("requests %ld failed %ld", n, failed);
    if (n > 0)
        printf(" p50 %.0f p90 %.0f p99 %.0f p999 %.0f max %.0f",
               lat[n / 2] * 1e6, lat[n * 9 / 10] * 1e6, lat[n * 99 / 100] * 1e6,
               lat[n * 999 / 1000] * 1e6, lat[n - 1] * 1e6);
    printf(" (usec)\n");
    return 0;
}
