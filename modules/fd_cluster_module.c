/*
 * [cluster]: the worker's client of the Redis a fleet of fastd instances
 * shares its state in (fd_cluster.h).
 *
 *   [cluster]
 *   redis = redis://:secret@10.0.0.4:6379/0
 *   redis = redis://10.0.0.5:6379/0      ; tried next when it fails
 *   timeout = 50ms
 *
 * Each worker keeps `pool` connections, sockets on its own loop (epoll or
 * io_uring, edge-triggered both ways). A command is written in RESP into
 * its connection's output as a handler asks, and at the end of the loop
 * turn one write sends all of them (the turn's pipeline); replies are
 * read to EAGAIN and matched to the commands in the order sent.
 *
 * hiredis (Debian's 0.14) parses the replies (redisReader); its
 * redisAsyncContext is not used: it asserts (aborts the process) on a
 * reply no command asked for, has no timeouts, and frees itself inside
 * its own callbacks. Here a reply nobody asked for, or bytes that are not
 * RESP, close the connection like any other failure.
 *
 * Failures: a command is answered FD_REDIS_FAIL when its `timeout`
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
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <hiredis/hiredis.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_event.h"
#include "fd_status.h"
#include "fd_cluster.h"

#define BACKOFF_MIN 50
#define BACKOFF_MAX 1000
#define STALL 1000            /* ms past a timeout: the connection is shut */
#define MAX_PENDING 8192      /* commands owed by one connection at most */
#define ADDR_MAX FD_CLUSTER_ADDRS

typedef fd_cluster_addr_t addr_t;

/* [cluster]: what others read first (fd_cluster_addrs: the addresses,
 * parsed, and the timeout), then the keys */
typedef struct {
    fd_cluster_addrs_t pub;
    fd_conf_list_t redis;
    fd_msec_t timeout;
    fd_int_t pool;
} cluster_conf_t;

/* each worker's figures */
typedef struct {
    uint64_t up;              /* gauge: connections ready */
    uint64_t commands, replies, errors, timeouts, refused;
    uint64_t connects, disconnects, latency_usec;
} cluster_shm_t;

struct fd_redis_cmd_s {
    fd_redis_cmd_t *next;
    fd_redis_done_pt done;    /* NULL: answered (timed out) or cancelled */
    void *data;
    fd_msec_t deadline;
    uint64_t sent;            /* usec */
};

enum { C_DOWN, C_CONNECTING, C_HANDSHAKE, C_READY };

typedef struct {
    fd_event_t ev;            /* first: the loop hands us its address */
    int state;
    unsigned addr;            /* the one tried or used */
    unsigned registered:1;
    unsigned blocked:1;       /* output waits for EPOLLOUT */
    unsigned posted:1;
    unsigned logged_down:1;   /* said once until it is up again */
    unsigned handshake;       /* AUTH/SELECT replies owed */
    redisReader *reader;
    char *out;
    size_t olen, osize, osent;
    fd_redis_cmd_t *head, **tail, *watch; /* watch: first not timed out */
    unsigned pending;
    fd_timer_t timer;         /* backoff, connect, the watched deadline */
    fd_msec_t backoff;
    fd_posted_t flush;
} rconn_t;

fd_module_t fd_cluster_module;

static cluster_shm_t *area;
static cluster_shm_t area_none; /* no status slot (tests) */
static const cluster_conf_t *conf;
static rconn_t *conns;
static unsigned nconns, next_conn;
static fd_redis_cmd_t *free_cmds;
static fd_cluster_t client;

/* --- configuration ------------------------------------------------------- */

/* redis://[:password@]host:port[/db] or unix:PATH; FD_OK or an error */
static int parse_addr(fd_conf_t *cf, const char *url, addr_t *a)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    char host[256], port[16] = "6379";
    const char *p, *at, *end, *colon;
    char *dbend;
    size_t n;
    int rc;

    if (strncmp(url, "unix:", 5) == 0) {
        struct sockaddr_un *un = (struct sockaddr_un *)&a->sa;
        if (url[5] == '\0' || strlen(url + 5) >= sizeof(un->sun_path))
            return fd_conf_error(cf, "[cluster] redis: a unix socket path "
                                 "of 1 to %zu bytes", sizeof(un->sun_path) -
                                 1);
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, url + 5);
        a->len = sizeof(*un);
        a->name = fd_pstrdup(cf->pool, url, strlen(url));
        return FD_OK;
    }
    if (strncmp(url, "redis://", 8) != 0)
        return fd_conf_error(cf, "[cluster] redis: \"%s\" is not "
                             "redis://[:password@]host:port/db or unix:PATH "
                             "(rediss:// is not supported: no TLS)", url);
    p = url + 8;
    end = p + strcspn(p, "/");
    at = memchr(p, '@', (size_t)(end - p));
    if (at) {
        /* the user part is ignored (Redis 6 ACLs: AUTH with one word) */
        colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL || colon + 1 == at)
            return fd_conf_error(cf, "[cluster] redis: the password goes "
                                 "as redis://:PASSWORD@host:port");
        a->password = fd_pstrdup(cf->pool, colon + 1,
                                 (size_t)(at - colon - 1));
        p = at + 1;
    }
    if (*p == '[') { /* [v6]:port */
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (close == NULL)
            return fd_conf_error(cf, "[cluster] redis: bad address in "
                                 "\"%s\"", url);
        n = (size_t)(close - p - 1);
        colon = close[1] == ':' ? close + 1 : NULL;
        p++;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        n = (size_t)((colon ? colon : end) - p);
    }
    if (n == 0 || n >= sizeof(host))
        return fd_conf_error(cf, "[cluster] redis: no host in \"%s\"", url);
    memcpy(host, p, n);
    host[n] = '\0';
    if (colon) {
        n = (size_t)(end - colon - 1);
        if (n == 0 || n >= sizeof(port))
            return fd_conf_error(cf, "[cluster] redis: bad port in \"%s\"",
                                 url);
        memcpy(port, colon + 1, n);
        port[n] = '\0';
        if (fd_conf_parse_uint(port, 65535) <= 0)
            return fd_conf_error(cf, "[cluster] redis: bad port in \"%s\"",
                                 url);
    }
    if (*end == '/' && end[1]) {
        errno = 0;
        a->db = (int)strtol(end + 1, &dbend, 10);
        if (errno || *dbend || a->db < 0 || a->db > 1000000)
            return fd_conf_error(cf, "[cluster] redis: bad database number "
                                 "in \"%s\"", url);
    }
    /* at load, where a slow resolver only delays the start: the loop
     * connects to the address */
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        return fd_conf_error(cf, "[cluster] redis: %s: %s", host,
                             gai_strerror(rc));
    memcpy(&a->sa, res->ai_addr, res->ai_addrlen);
    a->len = res->ai_addrlen;
    freeaddrinfo(res);
    n = strlen(host) + strlen(port) + 4;
    if ((a->name = fd_palloc(cf->pool, n)) == NULL)
        return fd_conf_error(cf, "out of memory");
    snprintf(a->name, n, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host,
             port);
    return FD_OK;
}

static int cluster_init_section(fd_conf_t *cf, const char *name, void *cv)
{
    cluster_conf_t *cc = cv;
    unsigned i;

    (void)name;
    if (cc->redis.n == 0)
        return fd_conf_error(cf, "[cluster] has no \"redis\" (redis = "
                             "redis://host:6379/0)");
    if (cc->redis.n > ADDR_MAX)
        return fd_conf_error(cf, "[cluster]: %d redis addresses at most",
                             ADDR_MAX);
    for (i = 0; i < cc->redis.n; i++)
        if (parse_addr(cf, cc->redis.items[i], &cc->pub.addrs[i]) != FD_OK)
            return FD_ERROR;
    cc->pub.naddrs = cc->redis.n;
    cc->pub.timeout = cc->timeout;
    return FD_OK;
}

#define COFF(f) offsetof(cluster_conf_t, f)

static const fd_directive_t cluster_directives[] = {
    {.name = "redis", .type = FD_CONF_LIST, .offset = COFF(redis),
     .doc = "redis://[:password@]host:port/db or unix:PATH: the Redis the "
            "fleet shares (no TLS); repeat it for servers to fail over to, "
            "tried in order when one fails"},
    {.name = "timeout", .type = FD_CONF_MSEC, .offset = COFF(timeout),
     .def = "50ms", .min = 1, .max = 60000,
     .doc = "the longest a request waits for Redis; past it the feature's "
            "policy answers (limit_req's on_error)"},
    {.name = "pool", .type = FD_CONF_INT, .offset = COFF(pool), .def = "1",
     .min = 1, .max = 64,
     .doc = "connections per worker (each pipelines what a loop turn "
            "asks)"},
    FD_CONF_END};

/* --- connections --------------------------------------------------------- */

static uint64_t now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void conn_event(fd_event_t *ev, uint32_t events);
static void conn_timer(fd_timer_t *t);
static void conn_flush(void *data);

static const addr_t *conn_addr(const rconn_t *c)
{
    return &conf->pub.addrs[c->addr];
}

static void cmd_free(fd_redis_cmd_t *cmd)
{
    cmd->next = free_cmds;
    free_cmds = cmd;
}

/* Answer every command c owes with FD_REDIS_FAIL (why), then close it */
static void conn_fail(rconn_t *c, const char *why)
{
    fd_redis_reply_t fail = {.type = FD_REDIS_FAIL,
                             .str = {strlen(why), (char *)why}};
    fd_redis_cmd_t *cmd, *next;
    int was_up = c->state == C_READY;

    if (was_up)
        area->up--;
    if (was_up || !c->logged_down)
        fd_log_error(FD_LOG_WARN, 0, "redis %s: down: %s",
                     conn_addr(c)->name, why);
    c->logged_down = 1;
    if (c->registered)
        fd_event_close(&c->ev);
    else if (c->ev.fd >= 0)
        close(c->ev.fd);
    c->ev.fd = -1;
    c->registered = 0;
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
    c->addr = (c->addr + 1) % conf->pub.naddrs;
    if (fd_timer_armed(&c->timer))
        fd_timer_del(&c->timer);
    fd_timer_add(&c->timer, c->backoff);
    c->backoff = fd_min(c->backoff * 2, BACKOFF_MAX);
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
 * third of a limit_req's instructions over Redis (callgrind) */
static char *resp_header(char *p, char type, size_t n)
{
    *p++ = type;
    p = fd_fmt_uint(p, n);
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
        fd_event_post(&c->flush);
    }
    return FD_OK;
}

static void watch_arm(rconn_t *c)
{
    fd_msec_t at;

    if (c->head == NULL) {
        if (fd_timer_armed(&c->timer))
            fd_timer_del(&c->timer);
        return;
    }
    at = c->watch ? c->watch->deadline : c->head->deadline + STALL;
    fd_timer_add(&c->timer, at > fd_current_msec ? at - fd_current_msec : 0);
}

static fd_redis_cmd_t *cmd_push(rconn_t *c, fd_redis_done_pt done,
                                void *data)
{
    fd_redis_cmd_t *cmd = free_cmds;

    if (cmd)
        free_cmds = cmd->next;
    else if ((cmd = malloc(sizeof(*cmd))) == NULL)
        return NULL;
    cmd->next = NULL;
    cmd->done = done;
    cmd->data = data;
    cmd->deadline = fd_current_msec + conf->timeout;
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

static void handshake_done(void *data, const fd_redis_reply_t *reply)
{
    rconn_t *c = data;
    char why[128];

    if (reply->type == FD_REDIS_FAIL)
        return; /* c failed already */
    if (reply->type == FD_REDIS_ERR) {
        snprintf(why, sizeof(why), "%.*s", (int)fd_min(reply->str.len, 100),
                 reply->str.data);
        /* after the reply is read, not under it */
        c->state = C_HANDSHAKE;
        c->handshake = (unsigned)-1;
        fd_timer_add(&c->timer, 0);
        fd_log_error(FD_LOG_ERR, 0, "redis %s: %s", conn_addr(c)->name,
                     why);
        return;
    }
    if (--c->handshake == 0) {
        c->state = C_READY;
        c->backoff = BACKOFF_MIN;
        c->logged_down = 0;
        area->up++;
        area->connects++;
        fd_log_error(FD_LOG_NOTICE, 0, "redis %s: up", conn_addr(c)->name);
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
    fd_redis_cmd_t *head = c->head, **tail = c->tail, *cmd;
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
    int fd, one = 1;

    fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0) {
        c->ev.fd = -1;
        conn_fail(c, strerror(errno));
        return;
    }
    c->ev.fd = fd;
    if (a->sa.ss_family != AF_UNIX)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if ((c->reader = redisReaderCreate()) == NULL) {
        conn_fail(c, "out of memory");
        return;
    }
    if (connect(fd, (struct sockaddr *)&a->sa, a->len) < 0 &&
        errno != EINPROGRESS && errno != EAGAIN) {
        conn_fail(c, strerror(errno));
        return;
    }
    c->ev.handler = conn_event;
    if (fd_event_add(&c->ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) < 0) {
        conn_fail(c, "cannot watch its socket");
        return;
    }
    c->registered = 1;
    c->state = C_CONNECTING;
    /* a connect gets ten timeouts, within 200 ms .. 2 s */
    fd_timer_add(&c->timer, fd_max(fd_min(conf->timeout * 10, 2000), 200));
}

static void conn_flush(void *data)
{
    rconn_t *c = data;
    ssize_t n;

    c->posted = 0;
    if (c->state < C_HANDSHAKE)
        return;
    while (c->osent < c->olen) {
        n = write(c->ev.fd, c->out + c->osent, c->olen - c->osent);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                c->blocked = 1;
                return;
            }
            conn_fail(c, strerror(errno));
            return;
        }
        c->osent += (size_t)n;
    }
    c->olen = c->osent = 0;
    c->blocked = 0;
}

static void reply_of(fd_redis_reply_t *out, const redisReply *r)
{
    memset(out, 0, sizeof(*out));
    switch (r->type) {
    case REDIS_REPLY_INTEGER:
        out->type = FD_REDIS_INT;
        out->integer = r->integer;
        break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        out->type = FD_REDIS_STR;
        out->str = (fd_str_t){r->len, r->str};
        break;
    case REDIS_REPLY_ERROR:
        out->type = FD_REDIS_ERR;
        out->str = (fd_str_t){r->len, r->str};
        break;
    case REDIS_REPLY_NIL:
        out->type = FD_REDIS_NIL;
        break;
    default:
        out->type = FD_REDIS_OTHER;
        break;
    }
}

/* Every reply that is in, each to the command it answers */
static void conn_read(rconn_t *c)
{
    char buf[16384], why[160];
    fd_redis_reply_t reply;
    fd_redis_cmd_t *cmd;
    uint64_t now = 0;
    void *r;
    ssize_t n;

    for (;;) {
        n = read(c->ev.fd, buf, sizeof(buf));
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
            if (reply.type == FD_REDIS_ERR)
                area->errors++;
            if (reply.type == FD_REDIS_ERR && reply.str.len >= 8 &&
                memcmp(reply.str.data, "READONLY", 8) == 0) {
                /* a replica (a failover demoted it): the next address;
                 * its caller answered as the others will be */
                reply.type = FD_REDIS_FAIL;
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
    }
    watch_arm(c);
    return;

broken:
    snprintf(why, sizeof(why), "protocol error: %s",
             c->reader->errstr[0] ? c->reader->errstr : "not RESP");
    conn_fail(c, why);
}

static void conn_event(fd_event_t *ev, uint32_t events)
{
    rconn_t *c = (rconn_t *)ev;
    int err = 0;
    socklen_t len = sizeof(err);

    if (c->state == C_CONNECTING) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        if (getsockopt(ev->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err || (events & (EPOLLERR | EPOLLHUP))) {
            conn_fail(c, strerror(err ? err : ECONNREFUSED));
            return;
        }
        fd_timer_del(&c->timer);
        conn_connected(c);
        if (c->state == C_DOWN)
            return;
    }
    if (c->state == C_DOWN)
        return;
    if ((events & EPOLLOUT) && c->blocked)
        conn_flush(c);
    if (c->state != C_DOWN &&
        (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
        conn_read(c);
}

static void conn_timer(fd_timer_t *t)
{
    rconn_t *c = (rconn_t *)((char *)t - offsetof(rconn_t, timer));
    fd_redis_reply_t fail = {.type = FD_REDIS_FAIL,
                             .str = fd_string("timeout")};
    fd_redis_cmd_t *cmd;

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
    while ((cmd = c->watch) && cmd->deadline <= fd_current_msec) {
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
    if (c->head && c->head->deadline + STALL <= fd_current_msec) {
        conn_fail(c, "no reply within a second past the timeout");
        return;
    }
    watch_arm(c);
}

/* --- the client ---------------------------------------------------------- */

static fd_redis_cmd_t *redis_command(int argc, const char **argv,
                                     const size_t *len,
                                     fd_redis_done_pt done, void *data)
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

static void redis_cancel(fd_redis_cmd_t *cmd)
{
    cmd->done = NULL;
}

int fd_cluster_redis_start(const void *cc)
{
    unsigned i;

    conf = cc;
    nconns = (unsigned)conf->pool;
    if ((conns = calloc(nconns, sizeof(*conns))) == NULL)
        return FD_ERROR;
    for (i = 0; i < nconns; i++) {
        rconn_t *c = &conns[i];
        c->ev.fd = -1;
        c->tail = &c->head;
        c->timer.handler = conn_timer;
        c->flush.handler = conn_flush;
        c->flush.data = c;
        c->backoff = BACKOFF_MIN;
        conn_connect(c);
    }
    client.command = redis_command;
    client.cancel = redis_cancel;
    client.timeout = conf->timeout;
    fd_cluster = &client;
    return FD_OK;
}

void fd_cluster_redis_stop(void)
{
    fd_redis_cmd_t *cmd;
    unsigned i;

    for (i = 0; i < nconns; i++) {
        rconn_t *c = &conns[i];
        c->logged_down = 1; /* an exit is not an outage */
        if (c->state == C_READY)
            area->up--;
        c->state = C_DOWN;
        conn_fail(c, "worker exits");
        if (fd_timer_armed(&c->timer))
            fd_timer_del(&c->timer);
        free(c->out);
    }
    while ((cmd = free_cmds) != NULL) {
        free_cmds = cmd->next;
        free(cmd);
    }
    free(conns);
    conns = NULL;
    nconns = 0;
    fd_cluster = NULL;
}

/* Unit tests: a client of one address, without a configuration */
int fd_cluster_redis_test(const struct sockaddr *sa, unsigned len,
                          fd_msec_t timeout, unsigned pool)
{
    static cluster_conf_t cc;
    static char name[] = "test";

    memset(&cc, 0, sizeof(cc));
    memcpy(&cc.pub.addrs[0].sa, sa, len);
    cc.pub.addrs[0].len = len;
    cc.pub.addrs[0].name = name;
    cc.pub.naddrs = 1;
    cc.timeout = timeout;
    cc.pool = pool;
    if (area == NULL)
        area = &area_none;
    return fd_cluster_redis_start(&cc);
}

/* --- the module ---------------------------------------------------------- */

static int cluster_init_worker(fd_worker_t *w)
{
    const cluster_conf_t *cc = fd_cycle_section(w->cycle, "cluster", "");

    area = fd_stats ? fd_stats_area(fd_stats, &fd_cluster_module) : NULL;
    if (area == NULL)
        area = &area_none;
    memset(area, 0, sizeof(*area));
    if (cc == NULL)
        return FD_OK;
    return fd_cluster_redis_start(cc);
}

static void cluster_exit_worker(fd_worker_t *w)
{
    (void)w;
    if (conns)
        fd_cluster_redis_stop();
}

static void cluster_status(fd_status_t *st, const void *a, unsigned worker)
{
    const cluster_shm_t *e = a;

    (void)worker;
    if (e == NULL || (e->connects == 0 && e->refused == 0 &&
                      e->disconnects == 0))
        return; /* no [cluster] */
    fd_status_gauge(st, "redis_up", "Connections to Redis that are up.",
                    NULL, e->up);
    fd_status_counter(st, "redis_commands", "Commands sent to Redis.", NULL,
                      e->commands);
    fd_status_counter(st, "redis_replies", "Replies read from Redis.", NULL,
                      e->replies);
    fd_status_counter(st, "redis_errors", "Error replies from Redis.", NULL,
                      e->errors);
    fd_status_counter(st, "redis_timeouts", "Commands answered by the "
                      "timeout.", NULL, e->timeouts);
    fd_status_counter(st, "redis_refused", "Commands not sent: no "
                      "connection up.", NULL, e->refused);
    fd_status_counter(st, "redis_connects", "Connections made to Redis.",
                      NULL, e->connects);
    fd_status_counter(st, "redis_disconnects", "Connections to Redis "
                      "lost.", NULL, e->disconnects);
    fd_status_counter(st, "redis_latency_usec_sum", "Time from a command "
                      "to its reply, added up.", NULL, e->latency_usec);
}

static void cluster_retire(void *retired, const void *a)
{
    cluster_shm_t *into = retired;
    const cluster_shm_t *e = a;

    into->commands += e->commands;
    into->replies += e->replies;
    into->errors += e->errors;
    into->timeouts += e->timeouts;
    into->refused += e->refused;
    into->connects += e->connects;
    into->disconnects += e->disconnects;
    into->latency_usec += e->latency_usec;
}

fd_module_t fd_cluster_module = {
    .name = "cluster",
    .init_worker = cluster_init_worker,
    .exit_worker = cluster_exit_worker,
    .section = "cluster",
    .section_directives = cluster_directives,
    .section_size = sizeof(cluster_conf_t),
    .init_section = cluster_init_section,
    .section_unnamed = 1,
    .shm_size = sizeof(cluster_shm_t),
    .status = cluster_status,
    .retire = cluster_retire,
};
