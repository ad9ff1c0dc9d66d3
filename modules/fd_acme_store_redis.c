/*
 * The ACME store in the [cluster]'s Redis ([acme NAME] storage = redis),
 * for a fleet: the helper processes of every instance share the account
 * key and the certificates, and a lease in Redis lets one of them order
 * a name while the others wait and then take what it stored.
 *
 * It wraps the files store (fd_acme_store.c), which stays the instance's
 * own copy: put() writes the file and then Redis (HSET KEY data, mtime),
 * get() reads Redis and brings the file up to it (the file when Redis
 * does not answer: what this instance took last), del() both. lock() is a lease: SET KEY.lock TOKEN
 * NX PX 30000, tried every second while another holds it, and kept alive
 * by a thread of its own that extends it every 10 s while held; a holder
 * that dies lets it go within 30 s. When Redis does not answer, lock()
 * fails: the helper keeps the certificate in service and tries again
 * later (its backoff), and never orders a name without the fleet's lease.
 *
 * The helper is a process of its own, off every loop, so the client is
 * hiredis's blocking one (a connection per call site: the helper's and
 * the lease thread's), with [cluster] timeout on connect and on each
 * reply, trying the [cluster] addresses in order.
 */
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <sys/un.h>
#include <netinet/in.h>

#include <openssl/rand.h>

#include "fd_acme.h"

#define LEASE_MS 30000
#define RENEW_MS 10000
#define LOCK_POLL_MS 1000

typedef struct {
    fd_acme_store_t files;     /* first: the local copy */
    fd_api_redis_addr_t addrs[FD_API_REDIS_ADDRS]; /* the [cluster]'s */
    unsigned naddrs;
    uint64_t timeout;
    char prefix[160];          /* fastd:acme:ISSUER: */
    redisContext *rc;
    /* the lease held, and its keeper */
    char token[33];
    char lock_key[512];
    pthread_t keeper;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int keeping, stop;
} rstore_t;

static rstore_t *of(fd_acme_store_t *st)
{
    return st->redis;
}

/* A connection to the first address that answers PING (AUTH, SELECT) */
static redisContext *connect_one(const rstore_t *rs)
{
    struct timeval tv = {.tv_sec = (time_t)(rs->timeout / 1000),
                         .tv_usec = (suseconds_t)(rs->timeout % 1000) *
                                    1000};
    unsigned i;

    for (i = 0; i < rs->naddrs; i++) {
        const fd_api_redis_addr_t *a = &rs->addrs[i];
        const struct sockaddr *sa = a->sa;
        redisContext *c = NULL;
        redisReply *r;
        char host[INET6_ADDRSTRLEN];

        if (sa->sa_family == AF_UNIX) {
            c = redisConnectUnixWithTimeout(
                ((const struct sockaddr_un *)a->sa)->sun_path, tv);
        } else if (sa->sa_family == AF_INET) {
            const struct sockaddr_in *s4 = a->sa;
            inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
            c = redisConnectWithTimeout(host, ntohs(s4->sin_port), tv);
        } else {
            const struct sockaddr_in6 *s6 = a->sa;
            inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
            c = redisConnectWithTimeout(host, ntohs(s6->sin6_port), tv);
        }
        if (c == NULL || c->err) {
            if (c)
                redisFree(c);
            continue;
        }
        redisSetTimeout(c, tv);
        r = a->password ? redisCommand(c, "AUTH %s", a->password) : NULL;
        if (a->password && (r == NULL || r->type == REDIS_REPLY_ERROR)) {
            fd_api_log(FD_API_LOG_ERR, 0, "acme: Redis %s: AUTH failed",
                       a->name);
            freeReplyObject(r);
            redisFree(c);
            continue;
        }
        freeReplyObject(r);
        if (a->db) {
            r = redisCommand(c, "SELECT %d", a->db);
            if (r == NULL || r->type == REDIS_REPLY_ERROR) {
                freeReplyObject(r);
                redisFree(c);
                continue;
            }
            freeReplyObject(r);
        }
        return c;
    }
    return NULL;
}

/* A command on the store's connection, made again once if it broke */
static redisReply *command(rstore_t *rs, const char *fmt, ...)
{
    redisReply *r = NULL;
    int attempt;
    va_list ap;

    for (attempt = 0; attempt < 2 && r == NULL; attempt++) {
        if (rs->rc == NULL && (rs->rc = connect_one(rs)) == NULL)
            break;
        va_start(ap, fmt);
        r = redisvCommand(rs->rc, fmt, ap);
        va_end(ap);
        if (r == NULL) { /* broken, or timed out: a new connection */
            redisFree(rs->rc);
            rs->rc = NULL;
        }
    }
    if (r == NULL)
        errno = ECONNREFUSED;
    return r;
}

static int redis_get(fd_acme_store_t *st, const char *key, char **data,
                     size_t *len, time_t *mtime)
{
    rstore_t *rs = of(st);
    redisReply *r = command(rs, "HMGET %s%s data mtime", rs->prefix, key);

    *data = NULL;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        /* Redis away: this instance's copy */
        return rs->files.get(&rs->files, key, data, len, mtime);
    }
    if (r->element[0]->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return FD_DECLINED;
    }
    if ((*data = malloc(r->element[0]->len + 1)) == NULL) {
        freeReplyObject(r);
        return FD_ERROR;
    }
    memcpy(*data, r->element[0]->str, r->element[0]->len);
    (*data)[r->element[0]->len] = '\0';
    *len = r->element[0]->len;
    if (mtime)
        *mtime = r->element[1]->type == REDIS_REPLY_STRING
                     ? (time_t)strtoll(r->element[1]->str, NULL, 10)
                     : 0;
    freeReplyObject(r);
    /* this instance's copy follows what the fleet holds: a restart (the
     * master serves state_path at load) or Redis away finds it */
    {
        char *mine = NULL;
        size_t mlen = 0;
        if (rs->files.get(&rs->files, key, &mine, &mlen, NULL) != FD_OK ||
            mlen != *len || memcmp(mine, *data, mlen) != 0)
            rs->files.put(&rs->files, key, *data, *len);
        free(mine);
    }
    return FD_OK;
}

static int redis_mtime(fd_acme_store_t *st, const char *key, time_t *mtime)
{
    rstore_t *rs = of(st);
    redisReply *r = command(rs, "HGET %s%s mtime", rs->prefix, key);
    int rc;

    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        freeReplyObject(r);
        return rs->files.mtime(&rs->files, key, mtime);
    }
    rc = r->type == REDIS_REPLY_STRING ? FD_OK : FD_DECLINED;
    if (rc == FD_OK)
        *mtime = (time_t)strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return rc;
}

static int redis_put(fd_acme_store_t *st, const char *key, const char *data,
                     size_t len)
{
    rstore_t *rs = of(st);
    int local = rs->files.put(&rs->files, key, data, len);
    redisReply *r = command(rs, "HSET %s%s data %b mtime %lld", rs->prefix,
                            key, data, len, (long long)time(NULL));
    int ok = r && r->type != REDIS_REPLY_ERROR;

    freeReplyObject(r);
    if (!ok) {
        fd_api_log(FD_API_LOG_WARN, 0, "acme: %s%s not stored in Redis: the "
                   "other instances do not see it", rs->prefix, key);
        errno = ECONNREFUSED;
    }
    return ok && local == FD_OK ? FD_OK : ok || local == FD_OK ? FD_OK
                                                             : FD_ERROR;
}

static int redis_del(fd_acme_store_t *st, const char *key)
{
    rstore_t *rs = of(st);
    redisReply *r = command(rs, "DEL %s%s", rs->prefix, key);

    freeReplyObject(r);
    return rs->files.del(&rs->files, key);
}

/* The lease's keeper: extends it while held (its own connection) */
static void *keeper(void *arg)
{
    rstore_t *rs = arg;
    redisContext *c = NULL;
    struct timespec at;

    pthread_mutex_lock(&rs->mu);
    while (!rs->stop) {
        clock_gettime(CLOCK_REALTIME, &at);
        at.tv_sec += RENEW_MS / 1000;
        pthread_cond_timedwait(&rs->cv, &rs->mu, &at);
        if (rs->stop)
            break;
        pthread_mutex_unlock(&rs->mu);
        if (c == NULL)
            c = connect_one(rs);
        if (c) {
            redisReply *r = redisCommand(
                c, "EVAL %s 1 %s %s %d",
                "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
                "return 0",
                rs->lock_key, rs->token, LEASE_MS);
            if (r == NULL) {
                redisFree(c);
                c = NULL;
            }
            freeReplyObject(r);
        }
        pthread_mutex_lock(&rs->mu);
    }
    pthread_mutex_unlock(&rs->mu);
    if (c)
        redisFree(c);
    return NULL;
}

static int redis_lock(fd_acme_store_t *st, const char *key)
{
    rstore_t *rs = of(st);
    unsigned char rnd[16];
    unsigned i;

    if (rs->keeping) { /* one lease at a time: the helper orders one name */
        errno = EDEADLK;
        return -1;
    }
    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        errno = EIO;
        return -1;
    }
    for (i = 0; i < sizeof(rnd); i++)
        snprintf(rs->token + 2 * i, 3, "%02x", rnd[i]);
    snprintf(rs->lock_key, sizeof(rs->lock_key), "%s%s.lock", rs->prefix,
             key);
    for (;;) {
        redisReply *r = command(rs, "SET %s %s NX PX %d", rs->lock_key,
                                rs->token, LEASE_MS);
        int got;
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            freeReplyObject(r);
            errno = ECONNREFUSED; /* never order without the lease */
            return -1;
        }
        got = r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
        if (got)
            break;
        usleep(LOCK_POLL_MS * 1000); /* another instance holds it */
    }
    rs->stop = 0;
    if (pthread_create(&rs->keeper, NULL, keeper, rs) != 0) {
        redisReply *r = command(rs, "DEL %s", rs->lock_key);
        freeReplyObject(r);
        errno = EAGAIN;
        return -1;
    }
    rs->keeping = 1;
    return 0;
}

static void redis_unlock(fd_acme_store_t *st, int handle)
{
    rstore_t *rs = of(st);
    redisReply *r;

    if (handle < 0 || !rs->keeping)
        return;
    pthread_mutex_lock(&rs->mu);
    rs->stop = 1;
    pthread_cond_signal(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
    pthread_join(rs->keeper, NULL);
    rs->keeping = 0;
    r = command(rs, "EVAL %s 1 %s %s",
                "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                "return redis.call('DEL', KEYS[1]) end return 0",
                rs->lock_key, rs->token);
    freeReplyObject(r); /* not answered: the lease ends by itself */
}

static int redis_share(fd_acme_store_t *st, int type, const char *name,
                       const char *token, const char *keyauth)
{
    rstore_t *rs = of(st);
    char line[1024];
    redisReply *r;
    int ok;

    snprintf(line, sizeof(line), "%lld %d %s %s %s", (long long)time(NULL),
             type, name, token, keyauth);
    r = command(rs, "HSET %s %s %s", FD_ACME_CHALS_KEY, token, line);
    ok = r && r->type != REDIS_REPLY_ERROR;
    freeReplyObject(r);
    return ok ? FD_OK : FD_ERROR;
}

static void redis_unshare(fd_acme_store_t *st, const char *token)
{
    rstore_t *rs = of(st);
    redisReply *r = command(rs, "HDEL %s %s", FD_ACME_CHALS_KEY, token);

    freeReplyObject(r);
}

int fd_acme_store_redis(fd_acme_store_t *st, const char *dir,
                        const char *issuer)
{
    rstore_t *rs;

    if ((rs = calloc(1, sizeof(*rs))) == NULL)
        return FD_ERROR;
    rs->naddrs = fd_api_redis_addrs(rs->addrs, FD_API_REDIS_ADDRS,
                                    &rs->timeout);
    if (rs->naddrs == 0) {
        free(rs);
        errno = ENOENT;
        return FD_ERROR;
    }
    if (fd_acme_store_files(&rs->files, dir, 1) != FD_OK) {
        free(rs);
        return FD_ERROR;
    }
    snprintf(rs->prefix, sizeof(rs->prefix), "fastd:acme:%s:", issuer);
    pthread_mutex_init(&rs->mu, NULL);
    pthread_cond_init(&rs->cv, NULL);
    snprintf(st->dir, sizeof(st->dir), "%s", dir);
    st->redis = rs;
    st->local = &rs->files;
    st->mtime = redis_mtime;
    st->share = redis_share;
    st->unshare = redis_unshare;
    st->get = redis_get;
    st->put = redis_put;
    st->del = redis_del;
    st->lock = redis_lock;
    st->unlock = redis_unlock;
    return FD_OK;
}
