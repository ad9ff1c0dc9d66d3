/*
 * limit_req: request rate limits shared by every worker.
 *
 *   [limit_req per_ip]
 *   key = $binary_remote_addr
 *   rate = 10r/s
 *   size = 1m
 *
 *   [location /api]
 *   limit_req = per_ip burst=20 nodelay
 *
 * A leaky bucket per key, as nginx's: each request adds one to the key's
 * excess, which drains at `rate`; past `burst` a request is rejected
 * (limit_req_status, 503). Within the burst a request waits until the
 * excess above `delay` has drained (delay=0 unless given: every request
 * past the rate waits), or not at all with nodelay.
 *
 * The buckets live in a table every process maps (the master maps it at
 * load, before any worker is forked; a reload with the same name and
 * size keeps it), so a client cannot multiply its rate by the number of
 * workers. The table is an array of 4-entry buckets, each behind its own
 * spin lock held for a few loads and stores: one short lock per key. A
 * full bucket gives a new key the entry with the least excess left (the
 * first to drain), so a client refused hard keeps its place.
 *
 * In the access phase, before the queue limiter: a request first passes
 * max_conns_per_ip (at accept), then limit_req, then its [queue].
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <openssl/sha.h>

#include "fd_core.h"
#include "fd_cluster.h"
#include "fd_http.h"
#include "fd_status.h"
#include "fd_var.h"

#define ZONE_MAX 16
#define ZONE_NAME_MAX 32
#define KEY_MAX 38            /* key bytes kept; longer ones: the hash */
#define WAYS 4

typedef struct {
    uint64_t hash;
    uint64_t last;            /* ms of the last counted request */
    int64_t excess;           /* milli-requests above the rate */
    uint16_t len;             /* the key's length; 0: free */
    char key[KEY_MAX];
} entry_t;

typedef struct {
    uint32_t lock;
    uint32_t pad;
    entry_t e[WAYS];
} bucket_t;

/* [limit_req NAME] */
typedef struct {
    char *key;
    int key_line;
    char *rate_text;
    size_t size;
    int store;                /* STORE_LOCAL, STORE_REDIS */
    int on_error;             /* ON_ERROR_* */

    char *name;
    unsigned index;           /* in the status area */
    fd_var_script_t script;
    int64_t rate;             /* milli-requests per second */
    bucket_t *table;
    size_t nbuckets;
    uint64_t seed[2];         /* the hash's key, the table's (random) */
} zone_t;

/* The shared table: its hash key, then the buckets. The key is random
 * and kept with the buckets (a reload that keeps them keeps it): FNV,
 * unkeyed, put 3,000 keys like "k7-42" into 76 of 248 buckets, and let a
 * client aim keys at another's bucket. */
typedef struct {
    uint64_t seed[2];
    uint64_t pad[6];          /* the buckets start on a cache line */
    bucket_t buckets[];
} table_t;

/* the location's limit_req = NAME [burst=N] [nodelay | delay=N] */
typedef struct {
    char *spec;
    fd_int_t status;
    int dry_run;
    const char *file;
    int line;
    zone_t *zone;
    int64_t burst, delay;     /* milli-requests */
} limit_loc_t;

typedef struct {
    char name[ZONE_NAME_MAX];
    uint64_t passed, delayed, rejected, dry_run;
    uint64_t fallbacks;       /* store = redis: answered by on_error */
} zone_shm_t;

enum { STORE_LOCAL, STORE_REDIS };
enum { ON_ERROR_LOCAL, ON_ERROR_ALLOW, ON_ERROR_DENY };

static const fd_conf_enum_t stores[] = {
    {"local", STORE_LOCAL}, {"redis", STORE_REDIS}, {NULL, 0}};
static const fd_conf_enum_t on_errors[] = {
    {"local", ON_ERROR_LOCAL}, {"allow", ON_ERROR_ALLOW},
    {"deny", ON_ERROR_DENY}, {NULL, 0}};

/*
 * store = redis: the same leaky bucket, kept in Redis by a script that
 * runs atomically there, on Redis's clock (the fleet's clocks need not
 * agree). KEYS[1] the zone's key; ARGV rate, burst, delay in
 * milli-requests (per second for the rate). A hash of e (excess) and t
 * (ms of the last counted request), expiring once it has drained, so an
 * idle key vanishes. It answers the ms to wait (0: none), or -1: past
 * the burst (not counted, as the local zone).
 */
static const char script[] =
    "local t = redis.call('TIME')\n"
    "local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"
    "local rate, burst, delay = tonumber(ARGV[1]), tonumber(ARGV[2]), "
    "tonumber(ARGV[3])\n"
    "local v = redis.call('HMGET', KEYS[1], 'e', 't')\n"
    "local excess = 0\n"
    "if v[1] then\n"
    "  local ms = now - tonumber(v[2])\n"
    "  if ms < 0 then ms = 0 end\n"
    "  excess = tonumber(v[1]) + 1000 - math.floor(ms * rate / 1000)\n"
    "  if excess < 0 then excess = 0 end\n"
    "  if excess > burst then return -1 end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'e', excess, 't', now)\n"
    "redis.call('PEXPIRE', KEYS[1], "
    "math.floor((excess + 1000) * 1000 / rate) + 1)\n"
    "if excess > delay then\n"
    "  return math.floor((excess - delay) * 1000 / rate)\n"
    "end\n"
    "return 0\n";
static char script_sha[41];

fd_module_t fd_limit_req_module;

static zone_shm_t *area; /* this worker's status slot */

/* --- configuration ------------------------------------------------------- */

#define ZOFF(f) offsetof(zone_t, f)

/* key: kept with its line, for the compile's errors */
static int set_key(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                   const char *value)
{
    zone_t *z = conf;

    (void)d;
    if ((z->key = fd_pstrdup(cf->pool, value, strlen(value))) == NULL)
        return fd_conf_error(cf, "out of memory");
    z->key_line = cf->line;
    return FD_OK;
}

static const fd_directive_t zone_directives[] = {
    {.name = "key", .type = FD_CONF_CUSTOM, .set = set_key,
     .def = "$binary_remote_addr",
     .doc = "what a limit counts by: text and $variables, e.g. "
            "$http_x_api_key; requests whose key is empty are not "
            "limited. The default, $binary_remote_addr, is the client's "
            "address as 4 or 16 bytes"},
    {.name = "rate", .type = FD_CONF_STR, .offset = ZOFF(rate_text),
     .doc = "the rate each key may keep up: Nr/s or Nr/m (10r/s, 30r/m)"},
    {.name = "size", .type = FD_CONF_SIZE, .offset = ZOFF(size),
     .def = "1m", .min = 65536, .max = 1 << 30,
     .doc = "the table shared by every worker: 264 bytes per 4 keys "
            "(1m holds about 15,800 keys); a full bucket gives a new "
            "key the place of the one with the least excess left"},
    {.name = "store", .type = FD_CONF_ENUM, .offset = ZOFF(store),
     .def = "local", .enums = stores,
     .doc = "local: the table above, this machine's; redis: the buckets "
            "are kept in the [cluster]'s Redis, one limit for a whole "
            "fleet (a request waits at most [cluster] timeout for it)"},
    {.name = "on_error", .type = FD_CONF_ENUM, .offset = ZOFF(on_error),
     .def = "local", .enums = on_errors,
     .doc = "store = redis, when Redis does not answer in time: local "
            "(this machine's table decides), allow (the request passes) "
            "or deny (limit_req_status)"},
    FD_CONF_END};

static int parse_rate(const char *s, int64_t *rate)
{
    char *end;
    long long n;

    if (s == NULL || *s < '0' || *s > '9')
        return FD_ERROR;
    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno || n < 1 || n > 1000000)
        return FD_ERROR;
    if (strcmp(end, "r/s") == 0)
        *rate = n * 1000;
    else if (strcmp(end, "r/m") == 0)
        *rate = n * 1000 / 60 ? n * 1000 / 60 : 1;
    else
        return FD_ERROR;
    return FD_OK;
}

static int zone_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    zone_t *z = conf;
    size_t n = strlen(name);
    table_t *t;
    int fresh;

    if (fd_cycle_section_name(cf, "limit_req", name, ZONE_NAME_MAX) != FD_OK)
        return FD_ERROR;
    if (z->rate_text == NULL)
        return fd_conf_error(cf, "[limit_req %s] has no \"rate\" (rate = "
                             "10r/s)", name);
    if (parse_rate(z->rate_text, &z->rate) != FD_OK)
        return fd_conf_error(cf, "[limit_req %s]: bad rate \"%s\" (Nr/s or "
                             "Nr/m, N from 1 to 1000000)", name,
                             z->rate_text);
    if (z->key_line)
        cf->line = z->key_line;
    if (fd_var_compile(cf, &z->script, z->key, strlen(z->key), 0, "key") !=
        FD_OK)
        return FD_ERROR;
    z->name = fd_pstrdup(cf->pool, name, n);
    z->nbuckets = z->size / sizeof(bucket_t);
    /* the table outlives a configuration: a reload with the same name
     * and size finds its buckets again (the rates go on) */
    t = fd_shm_zone("limit_req", name,
                    sizeof(table_t) + z->nbuckets * sizeof(bucket_t), &fresh);
    if (z->name == NULL || t == NULL)
        return fd_conf_error(cf, "[limit_req %s]: out of memory (the %zu "
                             "byte table)", name, z->size);
    if (fresh && getrandom(t->seed, sizeof(t->seed), 0) != sizeof(t->seed)) {
        t->seed[0] = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
        t->seed[1] = (uint64_t)(uintptr_t)t ^ 0x9e3779b97f4a7c15ULL;
    }
    z->seed[0] = t->seed[0];
    z->seed[1] = t->seed[1];
    z->table = t->buckets;
    return FD_OK;
}

static int set_limit(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *value)
{
    limit_loc_t *lc = conf;

    (void)d;
    lc->spec = fd_pstrdup(cf->pool, value, strlen(value));
    if (lc->spec == NULL)
        return fd_conf_error(cf, "out of memory");
    lc->file = cf->file;
    lc->line = cf->line;
    return FD_OK;
}

#define LOFF(f) offsetof(limit_loc_t, f)

static const fd_directive_t limit_directives[] = {
    {.name = "limit_req", .type = FD_CONF_CUSTOM, .set = set_limit,
     .doc = "NAME [burst=N] [nodelay | delay=N]: count the request in "
            "[limit_req NAME]; past its rate up to burst requests wait "
            "(none with nodelay; the first N without waiting with "
            "delay=N), past burst it is rejected; off: none. Example: "
            "limit_req = per_ip burst=20 nodelay"},
    {.name = "limit_req_status", .type = FD_CONF_INT, .offset = LOFF(status),
     .def = "503", .min = 400, .max = 599,
     .doc = "the status of a rejected request"},
    {.name = "limit_req_dry_run", .type = FD_CONF_FLAG,
     .offset = LOFF(dry_run), .def = "off",
     .doc = "on: count and log what would be rejected or delayed, but let "
            "every request through"},
    FD_CONF_END};

static int limit_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    limit_loc_t *lc = conf;
    char *s, *save, *tok;
    int nodelay = 0, has_delay = 0;
    int64_t burst = 0, delay = 0, v;

    (void)loc;
    if (lc->spec == NULL || strcmp(lc->spec, "off") == 0)
        return FD_OK;
    cf->file = lc->file;
    cf->line = lc->line;
    s = fd_pstrdup(cf->pool, lc->spec, strlen(lc->spec));
    if (s == NULL)
        return fd_conf_error(cf, "out of memory");
    tok = strtok_r(s, " \t", &save);
    lc->zone = tok ? fd_cycle_section(cf->cycle, "limit_req", tok) : NULL;
    if (lc->zone == NULL)
        return fd_conf_error(cf, "unknown limit_req \"%s\" (no [limit_req "
                             "%s] section)", tok ? tok : "",
                             tok ? tok : "NAME");
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
        if (strncmp(tok, "burst=", 6) == 0 &&
            (v = fd_conf_parse_uint(tok + 6, 1000000)) >= 0) {
            burst = v;
        } else if (strncmp(tok, "delay=", 6) == 0 &&
                   (v = fd_conf_parse_uint(tok + 6, 1000000)) >= 0) {
            delay = v;
            has_delay = 1;
        } else if (strcmp(tok, "nodelay") == 0) {
            nodelay = 1;
        } else {
            return fd_conf_error(cf, "\"limit_req\": bad \"%s\" (burst=N, "
                                 "nodelay or delay=N, N from 0 to "
                                 "1000000)", tok);
        }
    }
    if (nodelay && has_delay)
        return fd_conf_error(cf, "\"limit_req\": nodelay and delay= "
                             "together");
    lc->burst = burst * 1000;
    lc->delay = nodelay ? lc->burst : fd_min(delay, burst) * 1000;
    return FD_OK;
}

/* Number the zones (their entries in the status area). */
static int limit_init_cycle(fd_conf_t *cf, fd_cycle_t *cycle)
{
    fd_conf_section_t *s;
    unsigned char md[SHA_DIGEST_LENGTH];
    unsigned i;

    for (s = cycle->sections; s; s = s->next) {
        zone_t *z = s->conf;
        if (s->module != &fd_limit_req_module || z->store != STORE_REDIS ||
            fd_cluster_configured(cycle))
            continue;
        cf->file = s->file;
        cf->line = s->line;
        return fd_conf_error(cf, "[limit_req %s]: store = redis needs a "
                             "[cluster] section (redis = redis://HOST:6379)",
                             z->name);
    }
    SHA1((const unsigned char *)script, sizeof(script) - 1, md);
    for (i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(script_sha + 2 * i, 3, "%02x", md[i]);
    return fd_cycle_number_sections(cf, cycle, &fd_limit_req_module,
                                    ZONE_MAX, offsetof(zone_t, index));
}

static int limit_init_worker(fd_worker_t *w)
{
    fd_conf_section_t *s;

    area = fd_stats ? fd_stats_area(fd_stats, &fd_limit_req_module) : NULL;
    if (area == NULL)
        return FD_OK;
    memset(area, 0, ZONE_MAX * sizeof(*area));
    for (s = w->cycle->sections; s; s = s->next) {
        zone_t *z = s->conf;
        if (s->module == &fd_limit_req_module)
            snprintf(area[z->index].name, ZONE_NAME_MAX, "%s", z->name);
    }
    return FD_OK;
}

/* --- the bucket of a key ------------------------------------------------- */

/* memcmp() == 0 for the short keys of a table, without the call */
static inline int key_eq(const char *a, const char *b, size_t n)
{
    uint64_t x, y;

    for (; n >= 8; a += 8, b += 8, n -= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
    }
    for (; n; n--)
        if (*a++ != *b++)
            return 0;
    return 1;
}

static void lock(bucket_t *b)
{
    fd_shm_lock(&b->lock);
}

static void unlock(bucket_t *b)
{
    fd_shm_unlock(&b->lock);
}

/* e's excess at now: what is left after draining since its last request */
static inline int64_t drained(const zone_t *z, const entry_t *e, uint64_t now)
{
    uint64_t ms = now > e->last ? now - e->last : 0, out;

    /* months at a high rate would wrap the product: all of it drained */
    if (ms > UINT64_MAX / (uint64_t)z->rate)
        return 0;
    out = ms * (uint64_t)z->rate / 1000;
    return out < (uint64_t)e->excess ? e->excess - (int64_t)out : 0;
}

/* e's excess with one more request at now: nginx's, what is left after
 * draining plus the request, at least 0 (not the drained excess, at
 * least 0, plus one: that kept a drained key a request above the rate,
 * and burst=0 let one request through, then none ever again) */
static inline int64_t next_excess(const zone_t *z, const entry_t *e,
                                  uint64_t now)
{
    uint64_t ms = now > e->last ? now - e->last : 0, out;
    uint64_t full = (uint64_t)e->excess + 1000;

    if (ms > UINT64_MAX / (uint64_t)z->rate)
        return 0;
    out = ms * (uint64_t)z->rate / 1000;
    return out < full ? (int64_t)(full - out) : 0;
}

/*
 * Count one request of key k in zone z: FD_OK with *wait (ms; 0: none),
 * or FD_DECLINED past the burst (the request is not counted, as nginx).
 */
static int account(const zone_t *z, const limit_loc_t *lc, const char *k,
                   size_t n, uint64_t now, uint64_t *wait)
{
    uint64_t h = fd_siphash(z->seed, k, n);
    /* the bucket: the hash's high half scaled to the table, no division */
    bucket_t *b = &z->table[(size_t)(((h >> 32) * (uint64_t)z->nbuckets) >>
                                     32)];
    size_t kept = n < KEY_MAX ? n : KEY_MAX;
    /* the length kept: a longer key is told by its first bytes and the
     * hash of all of it (a 65,536-byte one must not come out 0, free) */
    uint16_t len = n < 0xffff ? (uint16_t)n : 0xffff;
    entry_t *e = NULL, *victim = NULL;
    int64_t excess, least = INT64_MAX;
    unsigned i;

    lock(b);
    for (i = 0; i < WAYS; i++) {
        entry_t *x = &b->e[i];
        if (x->hash == h && x->len == len && key_eq(x->key, k, kept)) {
            e = x;
            break;
        }
        /* a free entry, else the one with the least excess left: the
         * first to drain. Not the one counted longest ago: a key past its
         * burst is not counted, so the harder a client is refused the
         * staler it looked, and the first new key in its bucket freed it */
        excess = x->len == 0 ? -1 : drained(z, x, now);
        if (excess < least) {
            least = excess;
            victim = x;
        }
    }
    if (e == NULL) {
        /* a new key: nothing to drain, nothing in excess */
        e = victim;
        e->hash = h;
        e->len = len;
        memcpy(e->key, k, kept);
        e->excess = 0;
        e->last = now;
        unlock(b);
        *wait = 0;
        return FD_OK;
    }
    excess = next_excess(z, e, now);
    if (excess > lc->burst) {
        unlock(b);
        return FD_DECLINED;
    }
    e->excess = excess;
    e->last = now;
    unlock(b);
    *wait = excess > lc->delay
                ? (uint64_t)(excess - lc->delay) * 1000 / (uint64_t)z->rate
                : 0;
    return FD_OK;
}

/* --- the access phase ---------------------------------------------------- */

typedef struct {
    fd_timer_t timer;         /* first */
    fd_request_t *r;
    void (*prev_abort)(fd_request_t *r);
    const limit_loc_t *lc;
    fd_redis_cmd_t *cmd;      /* store = redis: the question in flight */
    fd_str_t key;             /* the request's key (store = redis) */
    fd_str_t rkey;            /* its name in Redis */
    unsigned eval:1;          /* asked with the script's text */
} wait_t;

#define COUNT(z, f) \
    (area ? (void)__atomic_add_fetch(&area[(z)->index].f, 1, \
                                     __ATOMIC_RELAXED) : (void)0)

static void wait_over(fd_timer_t *t)
{
    wait_t *w = (wait_t *)t;
    fd_request_t *r = w->r;

    r->on_abort = w->prev_abort;
    fd_http_access_continue(r, &fd_limit_req_module);
}

static void wait_cleanup(void *data)
{
    wait_t *w = data;

    fd_timer_del(&w->timer);
    if (w->cmd) {
        fd_cluster->cancel(w->cmd);
        w->cmd = NULL;
    }
}

static void wait_abort(fd_request_t *r)
{
    wait_t *w = *fd_request_ctx(r, &fd_limit_req_module);

    wait_cleanup(w);
    r->on_abort = w->prev_abort;
    if (w->prev_abort)
        w->prev_abort(r);
}

/* r's wait state, made once; NULL: out of memory */
static wait_t *wait_of(fd_request_t *r, const limit_loc_t *lc)
{
    void **ctx = fd_request_ctx(r, &fd_limit_req_module);
    wait_t *w;

    if (ctx == NULL)
        return NULL;
    if (*ctx)
        return *ctx;
    w = fd_pcalloc(r->pool, sizeof(*w));
    if (w == NULL || fd_pool_cleanup_add(r->pool, wait_cleanup, w) == NULL)
        return NULL;
    *ctx = w;
    w->r = r;
    w->lc = lc;
    w->timer.handler = wait_over;
    w->prev_abort = r->on_abort;
    return w;
}

/* The answer for a count that gave rc (FD_DECLINED: past the burst) and
 * wait ms: FD_OK, FD_AGAIN (r waits on its timer) or the status */
static int verdict(fd_request_t *r, const limit_loc_t *lc, const zone_t *z,
                   int rc, uint64_t wait)
{
    wait_t *w;

    if (rc != FD_OK) {
        if (lc->dry_run) {
            COUNT(z, dry_run);
            fd_log_error(FD_LOG_WARN, 0, "limiting requests, dry run, by "
                         "zone \"%s\"", z->name);
            return FD_OK;
        }
        COUNT(z, rejected);
        fd_log_error(FD_LOG_WARN, 0, "limiting requests by zone \"%s\"",
                     z->name);
        r->refused = 1;
        return (int)lc->status;
    }
    if (wait == 0 || lc->dry_run) {
        COUNT(z, passed);
        return FD_OK;
    }
    COUNT(z, delayed);
    if ((w = wait_of(r, lc)) == NULL)
        return 500;
    r->on_abort = wait_abort;
    fd_timer_add(&w->timer, (fd_msec_t)wait);
    return FD_AGAIN;
}

/* store = redis without an answer: on_error's */
static int fallback(fd_request_t *r, const limit_loc_t *lc, const zone_t *z,
                    fd_str_t key)
{
    uint64_t wait = 0;
    int rc;

    COUNT(z, fallbacks);
    switch (z->on_error) {
    case ON_ERROR_ALLOW:
        return verdict(r, lc, z, FD_OK, 0);
    case ON_ERROR_DENY:
        return verdict(r, lc, z, FD_DECLINED, 0);
    default:
        rc = account(z, lc, key.data, key.len, fd_current_msec, &wait);
        return verdict(r, lc, z, rc, wait);
    }
}

static void redis_done(void *data, const fd_redis_reply_t *reply);

/* Ask Redis for w's key: FD_OK (asked) or FD_ERROR (not sent) */
static int redis_ask(wait_t *w)
{
    const zone_t *z = w->lc->zone;
    char rate[24], burst[24], delay[24];
    const char *argv[7];
    size_t len[7];

    argv[0] = w->eval ? "EVAL" : "EVALSHA";
    argv[1] = w->eval ? script : script_sha;
    argv[2] = "1";
    argv[3] = w->rkey.data;
    argv[4] = rate;
    argv[5] = burst;
    argv[6] = delay;
    len[0] = strlen(argv[0]);
    len[1] = w->eval ? sizeof(script) - 1 : 40;
    len[2] = 1;
    len[3] = w->rkey.len;
    len[4] = (size_t)snprintf(rate, sizeof(rate), "%lld", (long long)z->rate);
    len[5] = (size_t)snprintf(burst, sizeof(burst), "%lld",
                              (long long)w->lc->burst);
    len[6] = (size_t)snprintf(delay, sizeof(delay), "%lld",
                              (long long)w->lc->delay);
    w->cmd = fd_cluster->command(7, argv, len, redis_done, w);
    return w->cmd ? FD_OK : FD_ERROR;
}

/* The request resumes with rc (verdict's) */
static void resume(wait_t *w, int rc)
{
    fd_request_t *r = w->r;

    if (rc == FD_AGAIN)
        return; /* on its timer */
    r->on_abort = w->prev_abort;
    if (rc == FD_OK)
        fd_http_access_continue(r, &fd_limit_req_module);
    else
        fd_request_finish(r, rc);
}

static void redis_done(void *data, const fd_redis_reply_t *reply)
{
    wait_t *w = data;
    const limit_loc_t *lc = w->lc;
    const zone_t *z = lc->zone;

    w->cmd = NULL;
    if (reply->type == FD_REDIS_INT) {
        resume(w, verdict(w->r, lc, z, reply->integer < 0 ? FD_DECLINED
                                                          : FD_OK,
                          reply->integer < 0 ? 0
                                             : (uint64_t)reply->integer));
        return;
    }
    if (reply->type == FD_REDIS_ERR && !w->eval && reply->str.len >= 8 &&
        memcmp(reply->str.data, "NOSCRIPT", 8) == 0) {
        /* a Redis that has not seen the script (new, restarted, failed
         * over): its text, once; later requests find it by its SHA */
        w->eval = 1;
        if (redis_ask(w) == FD_OK)
            return;
    } else if (reply->type == FD_REDIS_ERR) {
        fd_log_error(FD_LOG_ERR, 0, "limit_req zone \"%s\": redis: %.*s",
                     z->name, (int)fd_min(reply->str.len, 200),
                     reply->str.data);
    }
    resume(w, fallback(w->r, lc, z, w->key));
}

/* store = redis: FD_AGAIN while Redis is asked, else on_error's answer */
static int redis_start(fd_request_t *r, const limit_loc_t *lc,
                       const zone_t *z, fd_str_t key)
{
    static const char prefix[] = "fastd:limit_req:";
    size_t zn = strlen(z->name);
    wait_t *w;
    char *p;

    if (fd_cluster == NULL)
        return fallback(r, lc, z, key);
    if ((w = wait_of(r, lc)) == NULL)
        return 500;
    w->rkey.len = sizeof(prefix) - 1 + zn + 1 + key.len;
    if ((p = fd_palloc(r->pool, w->rkey.len + key.len)) == NULL)
        return 500;
    /* fastd:limit_req:ZONE:KEY, and the key alone (a fallback's) */
    memcpy(p, prefix, sizeof(prefix) - 1);
    memcpy(p + sizeof(prefix) - 1, z->name, zn);
    p[sizeof(prefix) - 1 + zn] = ':';
    memcpy(p + sizeof(prefix) + zn, key.data, key.len);
    w->rkey.data = p;
    w->key.data = p + sizeof(prefix) + zn;
    w->key.len = key.len;
    if (redis_ask(w) != FD_OK)
        return fallback(r, lc, z, w->key); /* down: no wait for it */
    r->on_abort = wait_abort;
    return FD_AGAIN;
}

static int limit_access(fd_request_t *r)
{
    limit_loc_t *lc = fd_loc_conf(r->loc, &fd_limit_req_module);
    const zone_t *z = lc->zone;
    char kb[512];
    fd_sbuf_t sb;
    fd_str_t key;
    uint64_t wait;
    int rc;

    /* counted once: not again after a rewrite, nor once it waited */
    if (z == NULL || r->rate_counted)
        return FD_OK;
    r->rate_counted = 1;
    if (z->script.n == 1 && z->script.ops[0].kind == FD_VAR_OP_VAR) {
        key = fd_var_value(r, &z->script.ops[0], NULL, kb); /* one var */
    } else {
        /* the whole key, however long: a client's 600-byte first value
         * must not leave it empty (which is not limited) or cut short */
        if (fd_sbuf_init(&sb, r->pool, 256) != FD_OK)
            return 500;
        fd_var_eval(r, &z->script, NULL, FD_VAR_ESC_NONE, &sb);
        if (fd_sbuf_failed(&sb))
            return 500;
        key = fd_sbuf_str(&sb);
    }
    if (key.len == 0)
        return FD_OK; /* nothing to count by: not limited */
    if (z->store == STORE_REDIS)
        return redis_start(r, lc, z, key);
    rc = account(z, lc, key.data, key.len, fd_current_msec, &wait);
    return verdict(r, lc, z, rc, wait);
}

static int limit_loc_active(const fd_http_loc_t *loc)
{
    const limit_loc_t *lc = fd_loc_conf(loc, &fd_limit_req_module);

    return lc->zone != NULL;
}

/* --- status -------------------------------------------------------------- */

static void limit_status(fd_status_t *st, const void *a, unsigned worker)
{
    const zone_shm_t *e = a;
    char labels[ZONE_NAME_MAX + 16];
    unsigned i;

    (void)worker;
    if (e == NULL)
        return;
    for (i = 0; i < ZONE_MAX; i++, e++) {
        if (e->name[0] == '\0')
            continue;
        snprintf(labels, sizeof(labels), "zone=\"%s\"", e->name);
        fd_status_counter(st, "limit_req_passed", "Requests within the "
                          "rate.", labels, e->passed);
        fd_status_counter(st, "limit_req_delayed", "Requests that waited "
                          "for the rate.", labels, e->delayed);
        fd_status_counter(st, "limit_req_rejected", "Requests rejected "
                          "past the burst.", labels, e->rejected);
        fd_status_counter(st, "limit_req_dry_run", "Requests a dry run "
                          "would have rejected.", labels, e->dry_run);
        fd_status_counter(st, "limit_req_fallbacks", "Requests on_error "
                          "answered (store = redis without an answer).",
                          labels, e->fallbacks);
    }
}

static void limit_retire(void *retired, const void *a)
{
    const zone_shm_t *s = a;
    zone_shm_t *into;
    unsigned i;

    for (i = 0; i < ZONE_MAX; i++, s++) {
        if (s->name[0] == '\0' ||
            (into = fd_status_named_entry(retired, sizeof(*s), ZONE_MAX,
                                          s->name, sizeof(s->name))) == NULL)
            continue;
        into->passed += s->passed;
        into->delayed += s->delayed;
        into->rejected += s->rejected;
        into->dry_run += s->dry_run;
        into->fallbacks += s->fallbacks;
    }
}

fd_module_t fd_limit_req_module = {
    .name = "limit_req",
    .directives = limit_directives,
    .conf_size = sizeof(limit_loc_t),
    .init_conf = limit_init_conf,
    .init_worker = limit_init_worker,
    .section = "limit_req",
    .section_directives = zone_directives,
    .section_size = sizeof(zone_t),
    .init_section = zone_init_section,
    .init_cycle = limit_init_cycle,
    .shm_size = ZONE_MAX * sizeof(zone_shm_t),
    .status = limit_status,
    .retire = limit_retire,
    .access = limit_access,
    .loc_active = limit_loc_active,
};
