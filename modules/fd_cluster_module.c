/*
 * [cluster]: the worker's client of the Redis a fleet of fastd instances
 * shares its state in, on the public API alone (fastd.h): it provides
 * fd_api_redis_command() to fastd and every module (fd_api_redis_provide)
 * and hands the configuration the servers' addresses, which ACME's helper
 * reads (fd_api_redis_addrs_set).
 *
 *   [cluster]
 *   redis = redis://:secret@10.0.0.4:6379/0
 *   redis = redis://10.0.0.5:6379/0      ; tried next when it fails
 *   timeout = 50ms
 *
 * Each worker keeps `pool` connections, sockets on its own loop (epoll or
 * io_uring; a watch is level-triggered, output watched only while a
 * connect or a write waits). A command is written in RESP into its
 * connection's output as a handler asks, and at the end of the loop turn
 * (a posted call) one write sends all of them (the turn's pipeline);
 * replies are read until a short read and matched to the commands in the
 * order sent.
 *
 * hiredis (Debian's 0.14) parses the replies (redisReader); its
 * redisAsyncContext is not used: it asserts (aborts the process) on a
 * reply no command asked for, has no timeouts, and frees itself inside
 * its own callbacks. Here a reply nobody asked for, or bytes that are not
 * RESP, close the connection like any other failure.
 *
 * Failures: a command is answered FD_API_REDIS_FAIL when its `timeout`
 * passes (the connection stays: its reply is read and dropped), and a
 * connection that owes a reply for a second past that is closed. A
 * closed connection answers what it owes at once, reconnects after a
 * backoff (50 ms doubling to 1 s), to the next address of the list if
 * there is one; while no connection is up a command is refused at once
 * (NULL: the feature's policy answers), so nothing waits or piles up for
 * a Redis that is away. One log line per connection when it goes down
 * and when it comes back, not per command.
 *
 * No TLS (hiredis 0.14 has none): Redis on a private network, or behind
 * stunnel, as conf/doc/fleet.md says. A host name is resolved at load;
 * the loop only connects to addresses.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>

#include "fastd.h"

#define BACKOFF_MIN 50
#define BACKOFF_MAX 1000
#define STALL 1000            /* ms past a timeout: the connection is shut */
#define MAX_PENDING 8192      /* commands owed by one connection at most */
#define ADDR_MAX FD_API_REDIS_ADDRS

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

typedef fd_api_redis_addr_t addr_t;

/* [cluster] */
typedef struct {
    addr_t addrs[ADDR_MAX];   /* the redis lines, parsed as they come */
    struct sockaddr_storage sa[ADDR_MAX]; /* theirs */
    unsigned naddrs;
    uint64_t timeout;
    int64_t pool;
} cluster_conf_t;

/* each worker's figures */
typedef struct {
    uint64_t up;              /* gauge: connections ready */
    uint64_t commands, replies, errors, timeouts, refused;
    uint64_t connects, disconnects, latency_usec;
} cluster_shm_t;

struct fd_api_redis_cmd_s {
    fd_api_redis_cmd_t *next;
    /* NULL: answered (timed out) or cancelled */
    void (*done)(void *data, const fd_api_redis_reply_t *reply);
    void *data;
    uint64_t deadline;        /* ms, the loop's clock */
    uint64_t sent;            /* usec */
};
typedef fd_api_redis_cmd_t cmd_t;
typedef void (*done_pt)(void *data, const fd_api_redis_reply_t *reply);

enum { C_DOWN, C_CONNECTING, C_HANDSHAKE, C_READY };

typedef struct {
    int fd;
    int state;
    unsigned addr;            /* the one tried or used */
    unsigned blocked:1;       /* output waits for the socket */
    unsigned posted:1;
    unsigned logged_down:1;   /* said once until it is up again */
    unsigned handshake;       /* AUTH/SELECT replies owed */
    redisReader *reader;
    char *out;
    size_t olen, osize, osent;
    cmd_t *head, **tail, *watch; /* watch: first not timed out */
    unsigned pending;
    fd_api_io_t *io;
    fd_api_timer_t *timer;    /* backoff, connect, the watched deadline */
    uint64_t backoff;
    fd_api_posted_t *flush;
} rconn_t;

static cluster_shm_t *area;
static cluster_shm_t area_none; /* no status slot (tests) */
static const cluster_conf_t *conf;
static rconn_t *conns;
static unsigned nconns, next_conn;
static cmd_t *free_cmds;

/* --- configuration ------------------------------------------------------- */

static char *conf_strdup(const char *s, size_t n)
{
    char *p = fd_api_conf_alloc(n + 1);

    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* redis://[:password@]host:port[/db] or unix:PATH; FD_OK or an error */
static int parse_addr(const char *url, addr_t *a, struct sockaddr_storage *ss)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    char host[256], port[16] = "6379", *name;
    const char *p, *at, *end, *colon;
    unsigned long num;
    size_t n;
    int rc;

    if (strncmp(url, "unix:", 5) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;
        if (url[5] == '\0' || strlen(url + 5) >= sizeof(un->sun_path)) {
            fd_api_conf_error("[cluster] redis: a unix socket path of 1 to "
                              "%zu bytes", sizeof(un->sun_path) - 1);
            return FD_ERROR;
        }
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, url + 5);
        a->sa = un;
        a->len = sizeof(*un);
        a->name = conf_strdup(url, strlen(url));
        return a->name ? FD_OK : FD_ERROR;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        fd_api_conf_error("[cluster] redis: \"%s\" is not "
                          "redis://[:password@]host:port/db or unix:PATH "
                          "(rediss:// is not supported: no TLS)", url);
        return FD_ERROR;
    }
    p = url + 8;
    end = p + strcspn(p, "/");
    at = memchr(p, '@', (size_t)(end - p));
    if (at) {
        /* the user part is ignored (Redis 6 ACLs: AUTH with one word) */
        colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL || colon + 1 == at) {
            fd_api_conf_error("[cluster] redis: the password goes as "
                              "redis://:PASSWORD@host:port");
            return FD_ERROR;
        }
        a->password = conf_strdup(colon + 1, (size_t)(at - colon - 1));
        if (a->password == NULL)
            return FD_ERROR;
        p = at + 1;
    }
    if (*p == '[') { /* [v6]:port */
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (close == NULL) {
            fd_api_conf_error("[cluster] redis: bad address in \"%s\"", url);
            return FD_ERROR;
        }
        n = (size_t)(close - p - 1);
        colon = close[1] == ':' ? close + 1 : NULL;
        p++;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        n = (size_t)((colon ? colon : end) - p);
    }
    if (n == 0 || n >= sizeof(host)) {
        fd_api_conf_error("[cluster] redis: no host in \"%s\"", url);
        return FD_ERROR;
    }
    memcpy(host, p, n);
    host[n] = '\0';
    if (colon) {
        n = (size_t)(end - colon - 1);
        if (n == 0 || n >= sizeof(port) ||
            strspn(colon + 1, "0123456789") < n ||
            (num = strtoul(colon + 1, NULL, 10)) == 0 || num > 65535) {
            fd_api_conf_error("[cluster] redis: bad port in \"%s\"", url);
            return FD_ERROR;
        }
        memcpy(port, colon + 1, n);
        port[n] = '\0';
    }
    if (*end == '/' && end[1]) {
        n = strlen(end + 1);
        if (n > 7 || strspn(end + 1, "0123456789") < n ||
            (num = strtoul(end + 1, NULL, 10)) > 1000000) {
            fd_api_conf_error("[cluster] redis: bad database number in "
                              "\"%s\"", url);
            return FD_ERROR;
        }
        a->db = (int)num;
    }
    /* at load, where a slow resolver only delays the start: the loop
     * connects to the address */
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        fd_api_conf_error("[cluster] redis: %s: %s", host, gai_strerror(rc));
        return FD_ERROR;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    a->sa = ss;
    a->len = res->ai_addrlen;
    freeaddrinfo(res);
    n = strlen(host) + strlen(port) + 4;
    if ((name = fd_api_conf_alloc(n)) == NULL)
        return FD_ERROR;
    snprintf(name, n, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
    a->name = name;
    return FD_OK;
}

/* a redis = line, at its line */
static int cluster_set(void *cv, const char *key, const char *value, int own)
{
    cluster_conf_t *cc = cv;

    (void)key;
    (void)own;
    if (cc->naddrs == ADDR_MAX) {
        fd_api_conf_error("[cluster]: %d redis addresses at most", ADDR_MAX);
        return FD_ERROR;
    }
    if (parse_addr(value, &cc->addrs[cc->naddrs], &cc->sa[cc->naddrs]) !=
        FD_OK)
        return FD_ERROR;
    cc->naddrs++;
    return FD_OK;
}

static int cluster_init_section(const char *name, void *cv, unsigned index)
{
    cluster_conf_t *cc = cv;

    (void)name;
    (void)index;
    if (cc->naddrs == 0) {
        fd_api_conf_error("[cluster] has no \"redis\" (redis = "
                          "redis://host:6379/0)");
        return FD_ERROR;
    }
    if (fd_api_conf_bounds(cc, "timeout", (int64_t)cc->timeout, 1, 60000,
                           1) != FD_OK ||
        fd_api_conf_bounds(cc, "pool", cc->pool, 1, 64, 0) != FD_OK)
        return FD_ERROR;
    return fd_api_redis_addrs_set(cc->addrs, cc->naddrs, cc->timeout);
}

#define COFF(f) offsetof(cluster_conf_t, f)

static const fd_api_key_t cluster_keys[] = {
    {.name = "redis", .type = FD_API_LIST,
     .doc = "redis://[:password@]host:port/db or unix:PATH: the Redis the "
            "fleet shares (no TLS); repeat it for servers to fail over to, "
            "tried in order when one fails"},
    {.name = "timeout", .type = FD_API_MSEC, .offset = COFF(timeout),
     .def = "50ms",
     .doc = "the longest a request waits for Redis; past it the feature's "
            "policy answers (limit_req's on_error)"},
    {.name = "pool", .type = FD_API_INT, .offset = COFF(pool), .def = "1",
     .doc = "connections per worker (each pipelines what a loop turn "
            "asks)"},
    {.name = NULL}};

static const fd_api_section_t cluster_section = {
    .type = "cluster",
    .keys = cluster_keys,
    .conf_size = sizeof(cluster_conf_t),
    .name_max = FD_API_SECTION_UNNAMED, /* [cluster], once */
    .init = cluster_init_section,
    .set = cluster_set,
};

/* --- connections --------------------------------------------------------- */

static uint64_t now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void conn_event(void *data, unsigned events);
static void conn_timer(void *data);
static void conn_flush(void *data);

static const addr_t *conn_addr(const rconn_t *c)
{
    return &conf->addrs[c->addr];
}

static void cmd_free(cmd_t *cmd)
{
    cmd->next = free_cmds;
    free_cmds = cmd;
}

/* Answer every command c owes with FD_API_REDIS_FAIL (why), then close */
static void conn_fail(rconn_t *c, const char *why)
{
    fd_api_redis_reply_t fail = {.type = FD_API_REDIS_FAIL,
                                 .str = {strlen(why), why}};
    cmd_t *cmd, *next;
    int was_up = c->state == C_READY;

    if (was_up)
        area->up--;
    if (was_up || !c->logged_down)
        fd_api_log(FD_API_LOG_WARN, 0, "redis %s: down: %s",
                   conn_addr(c)->name, why);
    c->logged_down = 1;
    if (c->fd >= 0) {
        fd_api_io_stop(c->io);
        close(c->fd);
        c->fd = -1;
    }
    c->state = C_DOWN;
    if (c->reader) {
        redisReaderFree(c->reader);
        c->reader = NULL;
    }
    c->olen = c->osent = 0;
    c->blocked = 0;
    c->handshake = 0;
    if (was_up || c->pending)
        area->disconnects++;
    /* detached first: a done may send again (to another connection) */
    cmd = c->head;
    c->head = c->watch = NULL;
    c->tail = &c->head;
    c->pending = 0;
    for (; cmd; cmd = next) {
        next = cmd->next;
        if (cmd->done)
            cmd->done(cmd->data, &fail);
        cmd_free(cmd);
    }
    /* the next address, if there is another: a failover */
    c->addr = (c->addr + 1) % conf->naddrs;
    fd_api_timer_set(c->timer, c->backoff);
    c->backoff = MIN(c->backoff * 2, BACKOFF_MAX);
}

static int out_reserve(rconn_t *c, size_t more)
{
    size_t size;
    char *p;

    if (c->olen + more <= c->osize)
        return FD_OK;
    for (size = c->osize ? c->osize : 4096; size < c->olen + more;)
        size *= 2;
    if ((p = realloc(c->out, size)) == NULL)
        return FD_ERROR;
    c->out = p;
    c->osize = size;
    return FD_OK;
}

/* "<type>N\r\n" at p (RESP's headers): its end. Not sprintf: it was a
 * third of a limit_req's instructions over Redis (callgrind). N is mostly
 * a count or a short argument's length: one or two digits. */
static char *resp_header(char *p, char type, size_t n)
{
    char digits[20];
    unsigned i = 0;

    *p++ = type;
    if (n < 10) {
        *p++ = (char)('0' + n);
    } else if (n < 100) {
        *p++ = (char)('0' + n / 10);
        *p++ = (char)('0' + n % 10);
    } else {
        do
            digits[i++] = (char)('0' + n % 10);
        while ((n /= 10) != 0);
        while (i)
            *p++ = digits[--i];
    }
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* argv in RESP, at the end of c's output: FD_OK or FD_ERROR (memory) */
static int out_command(rconn_t *c, int argc, const char **argv,
                       const size_t *len)
{
    size_t need = 16;
    int i;

    for (i = 0; i < argc; i++)
        need += len[i] + 32;
    if (out_reserve(c, need) != FD_OK)
        return FD_ERROR;
    c->olen = (size_t)(resp_header(c->out + c->olen, '*', (size_t)argc) -
                       c->out);
    for (i = 0; i < argc; i++) {
        c->olen = (size_t)(resp_header(c->out + c->olen, '$', len[i]) -
                           c->out);
        memcpy(c->out + c->olen, argv[i], len[i]);
        c->olen += len[i];
        c->out[c->olen++] = '\r';
        c->out[c->olen++] = '\n';
    }
    if (!c->posted && !c->blocked) {
        /* the turn's commands go together when it ends */
        c->posted = 1;
        fd_api_post(c->flush);
    }
    return FD_OK;
}

static void watch_arm(rconn_t *c)
{
    uint64_t at, now;

    if (c->head == NULL) {
        fd_api_timer_unset(c->timer);
        return;
    }
    at = c->watch ? c->watch->deadline : c->head->deadline + STALL;
    now = fd_api_now_msec();
    fd_api_timer_set(c->timer, at > now ? at - now : 0);
}

static cmd_t *cmd_push(rconn_t *c, done_pt done, void *data)
{
    cmd_t *cmd = free_cmds;

    if (cmd)
        free_cmds = cmd->next;
    else if ((cmd = malloc(sizeof(*cmd))) == NULL)
        return NULL;
    cmd->next = NULL;
    cmd->done = done;
    cmd->data = data;
    cmd->deadline = fd_api_now_msec() + conf->timeout;
    cmd->sent = now_usec();
    *c->tail = cmd;
    c->tail = &cmd->next;
    c->pending++;
    if (c->watch == NULL && done) {
        /* the first not timed out: its deadline is the next */
        c->watch = cmd;
        watch_arm(c);
    }
    return cmd;
}

static void handshake_done(void *data, const fd_api_redis_reply_t *reply)
{
    rconn_t *c = data;
    char why[128];

    if (reply->type == FD_API_REDIS_FAIL)
        return; /* c failed already */
    if (reply->type == FD_API_REDIS_ERR) {
        snprintf(why, sizeof(why), "%.*s", (int)MIN(reply->str.len, 100),
                 reply->str.data);
        /* after the reply is read, not under it */
        c->state = C_HANDSHAKE;
        c->handshake = (unsigned)-1;
        fd_api_timer_set(c->timer, 0);
        fd_api_log(FD_API_LOG_ERR, 0, "redis %s: %s", conn_addr(c)->name,
                   why);
        return;
    }
    if (--c->handshake == 0) {
        c->state = C_READY;
        c->backoff = BACKOFF_MIN;
        c->logged_down = 0;
        area->up++;
        area->connects++;
        fd_api_log(FD_API_LOG_NOTICE, 0, "redis %s: up", conn_addr(c)->name);
    }
}

/* The socket connected: AUTH and SELECT first, then ready */
static void conn_connected(rconn_t *c)
{
    const addr_t *a = conn_addr(c);
    const char *argv[2];
    size_t len[2];
    char db[16];
    /* what was asked while it connected goes after the handshake */
    char *out = c->out;
    size_t olen = c->olen;
    cmd_t *head = c->head, **tail = c->tail, *cmd;
    unsigned pending = c->pending;

    c->out = NULL;
    c->olen = c->osize = 0;
    c->head = c->watch = NULL;
    c->tail = &c->head;
    c->pending = 0;
    c->state = C_HANDSHAKE;
    c->handshake = 1;
    if (a->password) {
        argv[0] = "AUTH";
        argv[1] = a->password;
        len[0] = 4;
        len[1] = strlen(a->password);
        if (out_command(c, 2, argv, len) != FD_OK ||
            cmd_push(c, handshake_done, c) == NULL)
            goto failed;
        c->handshake++;
    }
    if (a->db) {
        argv[0] = "SELECT";
        argv[1] = db;
        len[0] = 6;
        len[1] = (size_t)snprintf(db, sizeof(db), "%d", a->db);
        if (out_command(c, 2, argv, len) != FD_OK ||
            cmd_push(c, handshake_done, c) == NULL)
            goto failed;
        c->handshake++;
    }
    /* the first reply read proves a Redis is there: a PING when nothing
     * else is asked */
    if (c->handshake == 1) {
        argv[0] = "PING";
        len[0] = 4;
        if (out_command(c, 1, argv, len) != FD_OK ||
            cmd_push(c, handshake_done, c) == NULL)
            goto failed;
        c->handshake++;
    }
    c->handshake--;
    if (head) {
        /* the handshake is owed by when they are */
        for (cmd = c->head; cmd; cmd = cmd->next)
            cmd->deadline = head->deadline;
        if (out_reserve(c, olen) != FD_OK)
            goto failed;
        memcpy(c->out + c->olen, out, olen);
        c->olen += olen;
        *c->tail = head;
        c->tail = tail;
        c->pending += pending;
        head = NULL;
        watch_arm(c);
    }
    free(out);
    return;

failed:
    free(out);
    if (head) { /* answered by the failure */
        *c->tail = head;
        c->tail = tail;
        c->pending += pending;
    }
    conn_fail(c, "out of memory");
}

static void conn_connect(rconn_t *c)
{
    const addr_t *a = conn_addr(c);
    int family = ((const struct sockaddr *)a->sa)->sa_family, fd, one = 1;

    fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        conn_fail(c, strerror(errno));
        return;
    }
    c->fd = fd;
    if (family != AF_UNIX)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if ((c->reader = redisReaderCreate()) == NULL) {
        conn_fail(c, "out of memory");
        return;
    }
    if (connect(fd, a->sa, a->len) < 0 &&
        errno != EINPROGRESS && errno != EAGAIN) {
        conn_fail(c, strerror(errno));
        return;
    }
    if (fd_api_io_watch(c->io, fd, FD_API_IO_IN | FD_API_IO_OUT) != FD_OK) {
        conn_fail(c, "cannot watch its socket");
        return;
    }
    c->state = C_CONNECTING;
    /* a connect gets ten timeouts, within 200 ms .. 2 s */
    fd_api_timer_set(c->timer, MAX(MIN(conf->timeout * 10, 2000), 200));
}

/* Output watched while a write waits for room, not otherwise: a watch
 * is level-triggered, and a writable socket would fire at every turn */
static int conn_watch_out(rconn_t *c, int out)
{
    c->blocked = out != 0;
    if (fd_api_io_watch(c->io, c->fd, FD_API_IO_IN |
                                          (out ? FD_API_IO_OUT : 0)) == FD_OK)
        return FD_OK;
    conn_fail(c, "cannot watch its socket");
    return FD_ERROR;
}

static void conn_flush(void *data)
{
    rconn_t *c = data;
    ssize_t n;

    c->posted = 0;
    if (c->state < C_HANDSHAKE)
        return;
    while (c->osent < c->olen) {
        n = write(c->fd, c->out + c->osent, c->olen - c->osent);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                if (!c->blocked)
                    (void)conn_watch_out(c, 1);
                return;
            }
            conn_fail(c, strerror(errno));
            return;
        }
        c->osent += (size_t)n;
    }
    c->olen = c->osent = 0;
    if (c->blocked)
        (void)conn_watch_out(c, 0);
}

static void reply_of(fd_api_redis_reply_t *out, const redisReply *r)
{
    memset(out, 0, sizeof(*out));
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        out->type = FD_API_REDIS_INT;
        out->integer = r->integer;
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        out->type = FD_API_REDIS_STR;
        out->str = (fd_str_t){r->len, r->str};
        break;
    case REDIS_REPLY_ERROR:
        out->type = FD_API_REDIS_ERR;
        out->str = (fd_str_t){r->len, r->str};
        break;
    case REDIS_REPLY_NIL:
        out->type = FD_API_REDIS_NIL;
        break;
    default:
        out->type = FD_API_REDIS_OTHER;
        break;
    }
}

/* Every reply that is in, each to the command it answers. A short read
 * took all there was; more fires the watch again. */
static void conn_read(rconn_t *c)
{
    char buf[16384], why[160];
    fd_api_redis_reply_t reply;
    cmd_t *cmd;
    uint64_t now = 0;
    void *r;
    ssize_t n;

    do {
        n = read(c->fd, buf, sizeof(buf));
        if (n == 0) {
            conn_fail(c, "closed by Redis");
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            conn_fail(c, strerror(errno));
            return;
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
            goto broken;
        for (;;) {
            if (redisReaderGetReply(c->reader, &r) != REDIS_OK)
                goto broken;
            if (r == NULL)
                break;
            if ((cmd = c->head) == NULL) {
                freeReplyObject(r);
                conn_fail(c, "a reply to no command");
                return;
            }
            c->head = cmd->next;
            if (c->head == NULL)
                c->tail = &c->head;
            if (c->watch == cmd)
                c->watch = cmd->next;
            while (c->watch && c->watch->done == NULL)
                c->watch = c->watch->next;
            c->pending--;
            if (now == 0)
                now = now_usec();
            area->replies++;
            area->latency_usec += now > cmd->sent ? now - cmd->sent : 0;
            reply_of(&reply, r);
            if (reply.type == FD_API_REDIS_ERR)
                area->errors++;
            if (reply.type == FD_API_REDIS_ERR && reply.str.len >= 8 &&
                memcmp(reply.str.data, "READONLY", 8) == 0) {
                /* a replica (a failover demoted it): the next address;
                 * its caller answered as the others will be */
                reply.type = FD_API_REDIS_FAIL;
                if (cmd->done)
                    cmd->done(cmd->data, &reply);
                freeReplyObject(r);
                cmd_free(cmd);
                conn_fail(c, "a read-only replica");
                return;
            }
            if (cmd->done)
                cmd->done(cmd->data, &reply);
            freeReplyObject(r);
            cmd_free(cmd);
            if (c->state == C_DOWN)
                return;
        }
    } while (n < 0 || (size_t)n == sizeof(buf));
    watch_arm(c);
    return;

broken:
    snprintf(why, sizeof(why), "protocol error: %s",
             c->reader->errstr[0] ? c->reader->errstr : "not RESP");
    conn_fail(c, why);
}

static void conn_event(void *data, unsigned events)
{
    rconn_t *c = data;
    int err = 0;
    socklen_t len = sizeof(err);

    if (c->state == C_CONNECTING) {
        if (!(events & (FD_API_IO_OUT | FD_API_IO_ERR)))
            return;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err || (events & FD_API_IO_ERR)) {
            conn_fail(c, strerror(err ? err : ECONNREFUSED));
            return;
        }
        fd_api_timer_unset(c->timer);
        if (conn_watch_out(c, 0) != FD_OK)
            return;
        conn_connected(c);
        if (c->state == C_DOWN)
            return;
    }
    if (c->state == C_DOWN)
        return;
    if ((events & FD_API_IO_OUT) && c->blocked)
        conn_flush(c);
    if (c->state != C_DOWN && (events & (FD_API_IO_IN | FD_API_IO_ERR)))
        conn_read(c);
}

static void conn_timer(void *data)
{
    rconn_t *c = data;
    fd_api_redis_reply_t fail = {.type = FD_API_REDIS_FAIL,
                                 .str = {7, "timeout"}};
    uint64_t now = fd_api_now_msec();
    cmd_t *cmd;

    switch (c->state) {
    case C_DOWN:
        conn_connect(c);
        return;
    case C_CONNECTING:
        conn_fail(c, "connect timed out");
        return;
    default:
        break;
    }
    if (c->handshake == (unsigned)-1) {
        conn_fail(c, "refused AUTH or SELECT");
        return;
    }
    /* the commands past their timeout are answered; their replies, when
     * they come, are dropped */
    while ((cmd = c->watch) && cmd->deadline <= now) {
        c->watch = cmd->next;
        if (cmd->done) {
            area->timeouts++;
            cmd->done(cmd->data, &fail);
            cmd->done = NULL;
            if (c->state == C_DOWN)
                return;
        }
    }
    while (c->watch && c->watch->done == NULL)
        c->watch = c->watch->next;
    if (c->head && c->head->deadline + STALL <= now) {
        conn_fail(c, "no reply within a second past the timeout");
        return;
    }
    watch_arm(c);
}

/* --- the client ---------------------------------------------------------- */

static cmd_t *redis_command(int argc, const char **argv, const size_t *len,
                            done_pt done, void *data)
{
    rconn_t *c = NULL;
    unsigned i;

    for (i = 0; i < nconns; i++) {
        c = &conns[next_conn++ % nconns];
        if (c->state == C_READY && c->pending < MAX_PENDING)
            break;
    }
    /* a worker's first connect (a start, a reload): the command waits for
     * it, within its timeout, rather than be refused; after a failure a
     * connect is no promise, and commands are refused until one is up */
    if (i == nconns)
        for (i = 0; i < nconns; i++) {
            c = &conns[i];
            if (c->state != C_DOWN && !c->logged_down &&
                c->pending < MAX_PENDING)
                break;
        }
    if (i == nconns || out_command(c, argc, argv, len) != FD_OK) {
        area->refused++;
        return NULL;
    }
    area->commands++;
    return cmd_push(c, done, data);
}

static void redis_cancel(cmd_t *cmd)
{
    cmd->done = NULL;
}

static const fd_api_redis_ops_t client = {
    .command = redis_command,
    .cancel = redis_cancel,
};

static void redis_stop(void);

/* The client of cc's servers: each connection starts connecting */
static int redis_start(const cluster_conf_t *cc)
{
    unsigned i;

    conf = cc;
    nconns = (unsigned)conf->pool;
    if ((conns = calloc(nconns, sizeof(*conns))) == NULL)
        return FD_ERROR;
    for (i = 0; i < nconns; i++) {
        rconn_t *c = &conns[i];
        c->fd = -1;
        c->tail = &c->head;
        c->backoff = BACKOFF_MIN;
        c->io = fd_api_io_new(conn_event, c);
        c->timer = fd_api_timer_new(conn_timer, c);
        c->flush = fd_api_posted_new(conn_flush, c);
        if (c->io == NULL || c->timer == NULL || c->flush == NULL) {
            nconns = i + 1;
            redis_stop();
            return FD_ERROR;
        }
    }
    for (i = 0; i < nconns; i++)
        conn_connect(&conns[i]);
    if (fd_api_redis_provide(&client) != FD_OK) {
        fd_api_log(FD_API_LOG_ERR, 0, "[cluster]: another module provides "
                   "the Redis client");
        redis_stop();
        return FD_ERROR;
    }
    return FD_OK;
}

static void redis_stop(void)
{
    cmd_t *cmd;
    unsigned i;

    for (i = 0; i < nconns; i++) {
        rconn_t *c = &conns[i];
        c->logged_down = 1; /* an exit is not an outage */
        if (c->state == C_READY)
            area->up--;
        c->state = C_DOWN;
        if (c->io && c->timer) {
            conn_fail(c, "worker exits");
            fd_api_timer_unset(c->timer);
        }
        fd_api_io_free(c->io);
        fd_api_timer_cancel(c->timer);
        fd_api_posted_free(c->flush);
        free(c->out);
    }
    while ((cmd = free_cmds) != NULL) {
        free_cmds = cmd->next;
        free(cmd);
    }
    free(conns);
    conns = NULL;
    nconns = 0;
    (void)fd_api_redis_provide(NULL);
}

/* --- the module ---------------------------------------------------------- */

static int cluster_init_worker(void)
{
    const cluster_conf_t *cc = fd_api_section("cluster", "");

    area = fd_api_status_area(FD_API_SELF);
    if (area == NULL)
        area = &area_none;
    memset(area, 0, sizeof(*area));
    if (cc == NULL)
        return FD_OK;
    return redis_start(cc);
}

static void cluster_exit_worker(void)
{
    if (conns)
        redis_stop();
}

/* its counters, as /status reports them (after redis_up, a gauge) */
static const struct {
    const char *name, *help;
    size_t off;
} counters[] = {
#define FIG(f) offsetof(cluster_shm_t, f)
    {"redis_commands", "Commands sent to Redis.", FIG(commands)},
    {"redis_replies", "Replies read from Redis.", FIG(replies)},
    {"redis_errors", "Error replies from Redis.", FIG(errors)},
    {"redis_timeouts", "Commands answered by the timeout.", FIG(timeouts)},
    {"redis_refused", "Commands not sent: no connection up.", FIG(refused)},
    {"redis_connects", "Connections made to Redis.", FIG(connects)},
    {"redis_disconnects", "Connections to Redis lost.", FIG(disconnects)},
    {"redis_latency_usec_sum", "Time from a command to its reply, added up.",
     FIG(latency_usec)},
#undef FIG
};

static uint64_t counter(const void *area, unsigned i)
{
    return *(const uint64_t *)(const void *)((const char *)area +
                                             counters[i].off);
}

static void cluster_status(fd_api_status_t *st, const void *a,
                           unsigned worker)
{
    const cluster_shm_t *e = a;
    unsigned i;

    (void)worker;
    if (e == NULL || (e->connects == 0 && e->refused == 0 &&
                      e->disconnects == 0))
        return; /* no [cluster] */
    fd_api_status_gauge(st, "redis_up", "Connections to Redis that are up.",
                        NULL, e->up);
    for (i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
        fd_api_status_counter(st, counters[i].name, counters[i].help, NULL,
                              counter(e, i));
}

static void cluster_retire(void *retired, const void *a)
{
    unsigned i;

    for (i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
        *(uint64_t *)(void *)((char *)retired + counters[i].off) +=
            counter(a, i);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "cluster",
    .init_worker = cluster_init_worker,
    .exit_worker = cluster_exit_worker,
    .shm_size = sizeof(cluster_shm_t),
    .status = cluster_status,
    .retire = cluster_retire,
    .section = &cluster_section,
};
