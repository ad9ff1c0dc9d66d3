/*
 * Unit tests: the [cluster] Redis client (modules/fd_cluster_module.c) on
 * the worker's loop, epoll and then io_uring, against a fake Redis (a
 * forked child that reads commands with hiredis's reader and answers as
 * each asks): replies in one piece and in pieces, a turn's hundred
 * commands answered in order, an error reply (the connection stays), a
 * slow reply past the timeout (answered FAIL at the timeout, the late
 * reply dropped, the next command answered by its own), garbage and a
 * reply no command asked for (the connection closes, no abort, and comes
 * back after the backoff), a close, a cancel, and a server gone (commands
 * refused at once, nothing kept).
 *
 * The module is included whole, under a descriptor name of its own: its
 * client is started without a configuration, and is reached as fastd's
 * own features reach it (fd_cluster, which it provides).
 */
#define FD_API_BUILTIN fd_cluster_api_module_unit
#include "../../modules/fd_cluster_module.c"

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_event.h"
#include "fd_cluster.h"
#include "tap.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

static fd_worker_t worker;

/* A client of one address, without a configuration */
static int fd_cluster_redis_test(const struct sockaddr *sa, unsigned len,
                                 fd_msec_t timeout, unsigned pool)
{
    static cluster_conf_t cc;
    static char name[] = "test";

    memset(&cc, 0, sizeof(cc));
    memcpy(&cc.sa[0], sa, len);
    cc.addrs[0].sa = &cc.sa[0];
    cc.addrs[0].len = len;
    cc.addrs[0].name = name;
    cc.naddrs = 1;
    cc.timeout = timeout;
    cc.pool = pool;
    area = &area_none;
    return redis_start(&cc);
}

/* --- the fake Redis ------------------------------------------------------ */

static void say(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* One command: PING, INT n, SLOW ms REPLY, PIECES REPLY, ERR, GARBAGE,
 * EXTRA, CLOSE. 0: the connection ends. */
static int answer(int fd, redisReply *c)
{
    const char *a0 = c->element[0]->str;
    char buf[64];

    if (strcmp(a0, "PING") == 0) {
        say(fd, "+PONG\r\n", 7);
    } else if (strcmp(a0, "INT") == 0) {
        say(fd, buf, (size_t)snprintf(buf, sizeof(buf), ":%s\r\n",
                                      c->element[1]->str));
    } else if (strcmp(a0, "SLOW") == 0) {
        usleep((useconds_t)atoi(c->element[1]->str) * 1000);
        say(fd, c->element[2]->str, c->element[2]->len);
    } else if (strcmp(a0, "PIECES") == 0) {
        /* three bytes a write, apart: the client reads each alone */
        for (size_t i = 0; i < c->element[1]->len; i += 3) {
            say(fd, c->element[1]->str + i,
                fd_min(c->element[1]->len - i, 3));
            usleep(2000);
        }
    } else if (strcmp(a0, "ERR") == 0) {
        say(fd, "-ERR boom\r\n", 11);
    } else if (strcmp(a0, "GARBAGE") == 0) {
        say(fd, "?garbage\r\n", 10);
    } else if (strcmp(a0, "EXTRA") == 0) {
        say(fd, ":1\r\n:2\r\n", 8);
    } else {
        return 0; /* CLOSE */
    }
    return 1;
}

static void fake_redis(int ls)
{
    char buf[4096];
    ssize_t n;
    int fd;

    while ((fd = accept(ls, NULL, NULL)) >= 0) {
        redisReader *rd = redisReaderCreate();
        int open = 1, one = 1;

        /* as Redis: no Nagle wait behind a reply the client has not
         * acknowledged yet */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        void *r;
        while (open && (n = read(fd, buf, sizeof(buf))) > 0) {
            redisReaderFeed(rd, buf, (size_t)n);
            while (open && redisReaderGetReply(rd, &r) == REDIS_OK && r) {
                open = answer(fd, r);
                freeReplyObject(r);
            }
        }
        redisReaderFree(rd);
        close(fd);
    }
    _exit(0);
}

static pid_t fake_start(struct sockaddr_in *sa)
{
    socklen_t len = sizeof(*sa);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    pid_t pid;

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ls < 0 || bind(ls, (struct sockaddr *)sa, sizeof(*sa)) < 0 ||
        listen(ls, 16) < 0 || getsockname(ls, (struct sockaddr *)sa, &len))
        return -1;
    if ((pid = fork()) == 0)
        fake_redis(ls);
    close(ls);
    return pid;
}

/* --- the client's side --------------------------------------------------- */

typedef struct {
    int calls;
    fd_redis_reply_t r;
    char str[64];
    fd_msec_t at;
} answer_t;

static void done(void *data, const fd_redis_reply_t *reply)
{
    answer_t *a = data;

    a->calls++;
    a->r = *reply;
    snprintf(a->str, sizeof(a->str), "%.*s", (int)reply->str.len,
             reply->str.data ? reply->str.data : "");
    a->at = fd_current_msec;
}

static void turn(int ms)
{
    struct epoll_event ev[64];

    fd_event_turn(ev, 64, NULL, ms);
}

/* turns until *calls is at least n, or ms pass */
static void wait_for(const int *calls, int n, fd_msec_t ms)
{
    fd_msec_t end;

    turn(0);
    end = fd_current_msec + ms;
    while (*calls < n && fd_current_msec < end)
        turn(10);
}

static fd_redis_cmd_t *send1(answer_t *a, const char *a0, const char *a1,
                             const char *a2)
{
    const char *argv[3] = {a0, a1, a2};
    size_t len[3] = {strlen(a0), a1 ? strlen(a1) : 0, a2 ? strlen(a2) : 0};

    memset(a, 0, sizeof(*a));
    return fd_cluster->command(a2 ? 3 : a1 ? 2 : 1, argv, len, done, a);
}

/* until a command is taken (the connection is up): 1, or 0 */
static int up(fd_msec_t ms)
{
    fd_msec_t end;
    answer_t a;

    turn(0);
    end = fd_current_msec + ms;
    while (fd_current_msec < end) {
        if (send1(&a, "PING", NULL, NULL)) {
            wait_for(&a.calls, 1, 2000);
            return a.calls == 1 && a.r.type == FD_REDIS_STR;
        }
        turn(10);
    }
    return 0;
}

static void test_client(const char *backend)
{
    struct sockaddr_in sa;
    answer_t a, b, many[100];
    fd_msec_t t0;
    pid_t pid = fake_start(&sa);
    char n[16];
    int i, good, calls;

    if (pid < 0) {
        ok(0, "%s: the fake Redis starts", backend);
        return;
    }
    ok(fd_cluster_redis_test((struct sockaddr *)&sa, sizeof(sa), 500, 1) ==
           FD_OK, "%s: the client starts", backend);
    ok(up(2000), "%s: connected (PING answered +PONG)", backend);

    send1(&a, "INT", "5", NULL);
    wait_for(&a.calls, 1, 1000);
    ok(a.calls == 1 && a.r.type == FD_REDIS_INT && a.r.integer == 5,
       "%s: an integer reply", backend);

    /* a turn's commands, one write; answered in order */
    for (i = 0; i < 100; i++) {
        snprintf(n, sizeof(n), "%d", i * 7);
        memset(&many[i], 0, sizeof(many[i]));
        const char *argv[2] = {"INT", n};
        size_t len[2] = {3, strlen(n)};
        fd_cluster->command(2, argv, len, done, &many[i]);
    }
    wait_for(&many[99].calls, 1, 2000);
    for (i = 0, good = 0; i < 100; i++)
        good += many[i].calls == 1 && many[i].r.integer == i * 7;
    is_int(good, 100, "%s: 100 pipelined commands, each its own reply",
           backend);

    send1(&a, "PIECES", ":123456789\r\n", NULL);
    wait_for(&a.calls, 1, 2000);
    ok(a.calls == 1 && a.r.integer == 123456789,
       "%s: a reply that comes in pieces", backend);
    send1(&a, "PIECES", "$5\r\nhello\r\n", NULL);
    wait_for(&a.calls, 1, 2000);
    ok(a.calls == 1 && a.r.type == FD_REDIS_STR &&
           strcmp(a.str, "hello") == 0,
       "%s: a bulk string in pieces", backend);

    send1(&a, "ERR", NULL, NULL);
    wait_for(&a.calls, 1, 1000);
    ok(a.calls == 1 && a.r.type == FD_REDIS_ERR &&
           strcmp(a.str, "ERR boom") == 0,
       "%s: an error reply is the caller's", backend);
    send1(&a, "INT", "6", NULL);
    wait_for(&a.calls, 1, 1000);
    ok(a.r.integer == 6, "%s: the connection stays after it", backend);

    /* slower than the timeout (500 ms): answered at the timeout, not
     * by the reply (800 ms: well before the connection is given up, a
     * second past the timeout, even on a loaded machine). No upper bound
     * on when: "timeout" says which answered, and a busy machine only
     * delays the loop. */
    t0 = fd_current_msec;
    send1(&a, "SLOW", "800", ":7\r\n");
    wait_for(&a.calls, 1, 2000);
    ok(a.calls == 1 && a.r.type == FD_REDIS_FAIL &&
           strcmp(a.str, "timeout") == 0,
       "%s: a slow reply: FAIL \"%s\"", backend, a.str);
    ok(a.at - t0 >= 500, "%s: not before the timeout (%u ms)", backend,
       (unsigned)(a.at - t0));
    /* the late :7 comes in while nothing else is asked */
    for (t0 = fd_current_msec; fd_current_msec - t0 < 1400;)
        turn(10);
    send1(&b, "INT", "8", NULL);
    wait_for(&b.calls, 1, 2000);
    ok(b.calls == 1 && b.r.integer == 8 && a.calls == 1,
       "%s: the late reply is dropped, the next one is its own (%d %d "
       "%lld %s)", backend, b.calls, b.r.type, b.r.integer, b.str);

    /* garbage: the connection is closed, the client lives on */
    send1(&a, "GARBAGE", NULL, NULL);
    wait_for(&a.calls, 1, 1000);
    ok(a.calls == 1 && a.r.type == FD_REDIS_FAIL &&
           strncmp(a.str, "protocol error", 14) == 0,
       "%s: garbage: FAIL \"%s\"", backend, a.str);
    ok(send1(&b, "INT", "1", NULL) == NULL,
       "%s: refused at once while it reconnects", backend);
    ok(up(3000), "%s: back after the backoff", backend);

    /* ":1" answers it, ":2" nobody: the connection closes */
    send1(&a, "EXTRA", NULL, NULL);
    wait_for(&a.calls, 1, 1000);
    ok(a.calls == 1 && a.r.integer == 1, "%s: EXTRA answered", backend);
    ok(send1(&b, "INT", "2", NULL) == NULL, "%s: a reply no command asked "
       "for: the connection is closed (no abort)", backend);
    ok(up(3000), "%s: and back", backend);

    /* a cancel: done is not called, the reply is dropped */
    memset(&a, 0, sizeof(a));
    {
        const char *argv[3] = {"SLOW", "20", ":4\r\n"};
        size_t len[3] = {4, 2, 4};
        fd_redis_cmd_t *c = fd_cluster->command(3, argv, len, done, &a);
        fd_cluster->cancel(c);
    }
    send1(&b, "INT", "5", NULL);
    wait_for(&b.calls, 1, 1000);
    ok(a.calls == 0 && b.r.integer == 5, "%s: a cancelled command is not "
       "answered (%d %d %lld %s)", backend, a.calls, b.r.type, b.r.integer,
       b.str);

    send1(&a, "CLOSE", NULL, NULL);
    wait_for(&a.calls, 1, 1000);
    ok(a.calls == 1 && a.r.type == FD_REDIS_FAIL,
       "%s: closed by the server: FAIL \"%s\" (%d %d)", backend, a.str,
       a.calls, a.r.type);

    /* the server gone: refused at once, nothing waits */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    ok(up(100) == 0, "%s: no server: no PING is answered", backend);
    for (i = 0, calls = 0; i < 1000; i++)
        calls += send1(&a, "INT", "1", NULL) != NULL;
    is_int(calls, 0, "%s: 1000 commands while it is down: none kept",
           backend);
    redis_stop();
    ok(fd_cluster == NULL, "%s: stopped", backend);
}

int main(void)
{
    fd_worker = &worker;
    fd_log->level = FD_LOG_ERR; /* its up and down lines: what is tested */
    signal(SIGPIPE, SIG_IGN);
    if (fd_timer_init() != FD_OK || fd_event_init(FD_BACKEND_EPOLL) != FD_OK) {
        perror("setup");
        return 1;
    }
    fd_time_update();
    test_client("epoll");
    close(worker.epfd);
    if (fd_event_init(FD_BACKEND_URING) == FD_OK && fd_event_uring) {
        test_client("io_uring");
        fd_event_exit();
    } else {
        ok(1, "# SKIP io_uring not available");
    }
    return done_testing();
}
