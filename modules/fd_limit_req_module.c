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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/sha.h>

#include "fastd.h"

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

enum { STORE_LOCAL, STORE_REDIS };
enum { ON_ERROR_LOCAL, ON_ERROR_ALLOW, ON_ERROR_DENY };

static const char *const stores[] = {"local", "redis", NULL};
static const char *const on_errors[] = {"local", "allow", "deny", NULL};

/* [limit_req NAME] */
typedef struct {
    const char *key;
    const char *rate_text;
    uint64_t size;
    const char *store_text;
    const char *on_error_text;

    int store;                /* STORE_LOCAL, STORE_REDIS */
    int on_error;             /* ON_ERROR_* */
    const char *name;
    unsigned index;           /* in the status area */
    fd_api_conf_pos_t pos;    /* its [limit_req NAME] line */
    const fd_api_script_t *script;
    int64_t rate;             /* milli-requests per second */
    char rate_s[24];          /* ... in decimal, for the Redis script */
    size_t rate_n;
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
    const char *spec;
    int64_t status;
    int dry_run;
    fd_api_conf_pos_t pos;    /* the limit_req line */
    zone_t *zone;
    int64_t burst, delay;     /* milli-requests */
    char burst_s[24], delay_s[24]; /* ... in decimal (the Redis script) */
    size_t burst_n, delay_n;
} limit_loc_t;

typedef struct {
    char name[ZONE_NAME_MAX];
    uint64_t passed, delayed, rejected, dry_run;
    uint64_t fallbacks;       /* store = redis: answered by on_error */
} zone_shm_t;

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

static zone_shm_t *area; /* this worker's status slot */

/* --- configuration ------------------------------------------------------- */

#define ZOFF(f) offsetof(zone_t, f)

static const fd_api_key_t zone_keys[] = {
    {.name = "key", .type = FD_API_STRING, .offset = ZOFF(key),
     .def = "$binary_remote_addr",
     .doc = "what a limit counts by: text and $variables, e.g. "
            "$http_x_api_key; requests whose key is empty are not "
            "limited. The default, $binary_remote_addr, is the client's "
            "address as 4 or 16 bytes"},
    {.name = "rate", .type = FD_API_STRING, .offset = ZOFF(rate_text),
     .doc = "the rate each key may keep up: Nr/s or Nr/m (10r/s, 30r/m)"},
    {.name = "size", .type = FD_API_SIZE, .offset = ZOFF(size), .def = "1m",
     .doc = "the table shared by every worker: 264 bytes per 4 keys "
            "(1m holds about 15,800 keys); a full bucket gives a new "
            "key the place of the one with the least excess left"},
    {.name = "store", .type = FD_API_STRING, .offset = ZOFF(store_text),
     .def = "local",
     .doc = "local: the table above, this machine's; redis: the buckets "
            "are kept in the [cluster]'s Redis, one limit for a whole "
            "fleet (a request waits at most [cluster] timeout for it)"},
    {.name = "on_error", .type = FD_API_STRING,
     .offset = ZOFF(on_error_text), .def = "local",
     .doc = "store = redis, when Redis does not answer in time: local "
            "(this machine's table decides), allow (the request passes) "
            "or deny (limit_req_status)"},
    {.name = NULL}};

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

static int zone_init(const char *name, void *conf, unsigned index)
{
    zone_t *z = conf;
    table_t *t;
    int fresh;

    fd_api_conf_pos(&z->pos);
    if (fd_api_conf_bounds(z, "size", (int64_t)z->size, 65536, 1 << 30,
                           FD_API_SIZE) != FD_OK ||
        (z->store = fd_api_conf_enum(z, "store", z->store_text, stores)) < 0 ||
        (z->on_error = fd_api_conf_enum(z, "on_error", z->on_error_text,
                                        on_errors)) < 0)
        return FD_ERROR;
    fd_api_conf_at(&z->pos);
    if (z->rate_text == NULL) {
        fd_api_conf_error("[limit_req %s] has no \"rate\" (rate = 10r/s)",
                          name);
        return FD_ERROR;
    }
    if (parse_rate(z->rate_text, &z->rate) != FD_OK) {
        fd_api_conf_error("[limit_req %s]: bad rate \"%s\" (Nr/s or Nr/m, N "
                          "from 1 to 1000000)", name, z->rate_text);
        return FD_ERROR;
    }
    /* the script's numbers, made once (not at each request) */
    z->rate_n = (size_t)snprintf(z->rate_s, sizeof(z->rate_s), "%lld",
                                 (long long)z->rate);
    fd_api_conf_at_key(z, "key");
    z->script = fd_api_script_compile(z->key, strlen(z->key), 0, "key");
    if (z->script == NULL)
        return FD_ERROR;
    fd_api_conf_at(&z->pos);
    z->name = name;
    z->index = index;
    z->nbuckets = z->size / sizeof(bucket_t);
    /* the table outlives a configuration: a reload with the same name
     * and size finds its buckets again (the rates go on) */
    t = fd_api_shm_zone(FD_API_SELF, name,
                        sizeof(table_t) + z->nbuckets * sizeof(bucket_t),
                        &fresh);
    if (t == NULL) {
        fd_api_conf_error("[limit_req %s]: out of memory (the %zu byte "
                          "table)", name, (size_t)z->size);
        return FD_ERROR;
    }
    if (fresh)
        fd_api_random(t->seed, sizeof(t->seed));
    memcpy(z->seed, t->seed, sizeof(z->seed));
    z->table = t->buckets;
    return FD_OK;
}

static const fd_api_section_t zone_section = {
    .type = "limit_req",
    .keys = zone_keys,
    .conf_size = sizeof(zone_t),
    .name_max = ZONE_NAME_MAX,
    .max = ZONE_MAX,
    .init = zone_init,
};

/* limit_req: kept with its line, parsed once the sections are known */
static int limit_set(void *conf, const char *key, const char *value, int own)
{
    limit_loc_t *lc = conf;
    size_t n = strlen(value) + 1;
    char *spec = fd_api_conf_alloc(n);

    (void)key;
    (void)own;
    if (spec == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    memcpy(spec, value, n);
    lc->spec = spec;
    fd_api_conf_pos(&lc->pos);
    return FD_OK;
}

#define LOFF(f) offsetof(limit_loc_t, f)

static const fd_api_key_t limit_keys[] = {
    {.name = "limit_req", .type = FD_API_CUSTOM,
     .doc = "NAME [burst=N] [nodelay | delay=N]: count the request in "
            "[limit_req NAME]; past its rate up to burst requests wait "
            "(none with nodelay; the first N without waiting with "
            "delay=N), past burst it is rejected; off: none. Example: "
            "limit_req = per_ip burst=20 nodelay"},
    {.name = "limit_req_status", .type = FD_API_INT, .offset = LOFF(status),
     .def = "503", .doc = "the status of a rejected request"},
    {.name = "limit_req_dry_run", .type = FD_API_FLAG,
     .offset = LOFF(dry_run), .def = "off",
     .doc = "on: count and log what would be rejected or delayed, but let "
            "every request through"},
    {.name = NULL}};

/* N of burst=N, delay=N: digits, at most max; -1 when it is not */
static int64_t parse_count(const char *s, int64_t max)
{
    int64_t v = 0;

    if (*s == '\0')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++)
        if ((v = v * 10 + (*s - '0')) > max)
            return -1;
    return *s == '\0' ? v : -1;
}

static int limit_init_conf(void *conf)
{
    limit_loc_t *lc = conf;
    char *s, *save, *tok;
    int nodelay = 0, has_delay = 0;
    int64_t burst = 0, delay = 0, v;
    size_t n;

    if (fd_api_conf_bounds(lc, "limit_req_status", lc->status, 400, 599,
                           0) != FD_OK)
        return FD_ERROR;
    if (lc->spec == NULL || strcmp(lc->spec, "off") == 0)
        return FD_OK;
    fd_api_conf_at(&lc->pos);
    n = strlen(lc->spec) + 1;
    if ((s = fd_api_conf_alloc(n)) == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    memcpy(s, lc->spec, n);
    tok = strtok_r(s, " \t", &save);
    lc->zone = tok ? fd_api_section("limit_req", tok) : NULL;
    if (lc->zone == NULL) {
        fd_api_conf_error("unknown limit_req \"%s\" (no [limit_req %s] "
                          "section)", tok ? tok : "", tok ? tok : "NAME");
        return FD_ERROR;
    }
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
        if (strncmp(tok, "burst=", 6) == 0 &&
            (v = parse_count(tok + 6, 1000000)) >= 0) {
            burst = v;
        } else if (strncmp(tok, "delay=", 6) == 0 &&
                   (v = parse_count(tok + 6, 1000000)) >= 0) {
            delay = v;
            has_delay = 1;
        } else if (strcmp(tok, "nodelay") == 0) {
            nodelay = 1;
        } else {
            fd_api_conf_error("\"limit_req\": bad \"%s\" (burst=N, nodelay "
                              "or delay=N, N from 0 to 1000000)", tok);
            return FD_ERROR;
        }
    }
    if (nodelay && has_delay) {
        fd_api_conf_error("\"limit_req\": nodelay and delay= together");
        return FD_ERROR;
    }
    lc->burst = burst * 1000;
    lc->delay = nodelay ? lc->burst : (delay < burst ? delay : burst) * 1000;
    lc->burst_n = (size_t)snprintf(lc->burst_s, sizeof(lc->burst_s), "%lld",
                                   (long long)lc->burst);
    lc->delay_n = (size_t)snprintf(lc->delay_s, sizeof(lc->delay_s), "%lld",
                                   (long long)lc->delay);
    return FD_OK;
}

static int configured_failed;

static void zone_check(const char *name, void *conf, void *data)
{
    zone_t *z = conf;

    (void)data;
    if (configured_failed || z->store != STORE_REDIS ||
        fd_api_cluster_configured())
        return;
    fd_api_conf_at(&z->pos);
    fd_api_conf_error("[limit_req %s]: store = redis needs a [cluster] "
                      "section (redis = redis://HOST:6379)", name);
    configured_failed = 1;
}

/* The whole configuration read: a store = redis has its [cluster]. */
static int limit_configured(void)
{
    unsigned char md[SHA_DIGEST_LENGTH];
    unsigned i;

    configured_failed = 0;
    fd_api_section_each("limit_req", zone_check, NULL);
    if (configured_failed)
        return FD_ERROR;
    SHA1((const unsigned char *)script, sizeof(script) - 1, md);
    for (i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(script_sha + 2 * i, 3, "%02x", md[i]);
    return FD_OK;
}

static void zone_name(const char *name, void *conf, void *data)
{
    const zone_t *z = conf;

    (void)data;
    snprintf(area[z->index].name, ZONE_NAME_MAX, "%s", name);
}

static int limit_init_worker(void)
{
    area = fd_api_status_area(FD_API_SELF);
    if (area == NULL)
        return FD_OK;
    memset(area, 0, ZONE_MAX * sizeof(*area));
    fd_api_section_each("limit_req", zone_name, NULL);
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
    fd_api_shm_lock(&b->lock);
}

static void unlock(bucket_t *b)
{
    fd_api_shm_unlock(&b->lock);
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
    uint64_t h = fd_api_siphash(z->seed, k, n);
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
    fd_request_t *r;
    fd_api_req_pt prev_abort;
    const limit_loc_t *lc;
    fd_api_timer_t *timer;    /* the wait for the rate */
    fd_api_redis_cmd_t *cmd;  /* store = redis: the question in flight */
    fd_str_t key;             /* the request's key (store = redis) */
    fd_str_t rkey;            /* its name in Redis */
    unsigned eval:1;          /* asked with the script's text */
} wait_t;

#define COUNT(z, f) \
    (area ? (void)__atomic_add_fetch(&area[(z)->index].f, 1, \
                                     __ATOMIC_RELAXED) : (void)0)

static void wait_abort(fd_request_t *r);

/* r waits (on a timer, or Redis): a client that leaves is ours to see */
static void hold(wait_t *w)
{
    fd_api_req_pt prev = fd_req_on_abort(w->r, wait_abort);

    if (prev != wait_abort)
        w->prev_abort = prev;
}

static void wait_over(void *data)
{
    wait_t *w = data;
    fd_request_t *r = w->r;

    w->timer = NULL; /* fired: freed by fastd */
    fd_req_on_abort(r, w->prev_abort);
    fd_api_continue(r, FD_API_SELF);
}

static void wait_cleanup(void *data)
{
    wait_t *w = data;

    fd_api_timer_cancel(w->timer);
    w->timer = NULL;
    if (w->cmd) {
        fd_api_redis_cancel(w->cmd);
        w->cmd = NULL;
    }
}

static void wait_abort(fd_request_t *r)
{
    wait_t *w = fd_req_get_ctx_of(r, FD_API_SELF);

    wait_cleanup(w);
    fd_req_on_abort(r, w->prev_abort);
    if (w->prev_abort)
        w->prev_abort(r);
}

/* r's wait state, made once; NULL: out of memory */
static wait_t *wait_of(fd_request_t *r, const limit_loc_t *lc)
{
    wait_t *w = fd_req_get_ctx_of(r, FD_API_SELF);

    if (w)
        return w;
    if ((w = fd_req_alloc(r, sizeof(*w))) == NULL)
        return NULL;
    memset(w, 0, sizeof(*w));
    if (fd_req_cleanup(r, wait_cleanup, w) != FD_OK ||
        fd_req_set_ctx_of(r, FD_API_SELF, w) != FD_OK)
        return NULL;
    w->r = r;
    w->lc = lc;
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
            fd_api_log(FD_API_LOG_WARN, 0, "limiting requests, dry run, by "
                       "zone \"%s\"", z->name);
            return FD_OK;
        }
        COUNT(z, rejected);
        fd_api_log(FD_API_LOG_WARN, 0, "limiting requests by zone \"%s\"",
                   z->name);
        fd_resp_refused(r);
        return (int)lc->status;
    }
    if (wait == 0 || lc->dry_run) {
        COUNT(z, passed);
        return FD_OK;
    }
    COUNT(z, delayed);
    if ((w = wait_of(r, lc)) == NULL ||
        (w->timer = fd_api_timer(wait, wait_over, w)) == NULL)
        return 500;
    hold(w);
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
        rc = account(z, lc, key.data, key.len, fd_api_now_msec(), &wait);
        return verdict(r, lc, z, rc, wait);
    }
}

static void redis_done(void *data, const fd_api_redis_reply_t *reply);

/* Ask Redis for w's key: FD_OK (asked) or FD_ERROR (not sent) */
static int redis_ask(wait_t *w)
{
    const zone_t *z = w->lc->zone;
    const char *argv[7];
    size_t len[7];

    argv[0] = w->eval ? "EVAL" : "EVALSHA";
    argv[1] = w->eval ? script : script_sha;
    argv[2] = "1";
    argv[3] = w->rkey.data;
    argv[4] = z->rate_s;
    argv[5] = w->lc->burst_s;
    argv[6] = w->lc->delay_s;
    len[0] = strlen(argv[0]);
    len[1] = w->eval ? sizeof(script) - 1 : 40;
    len[2] = 1;
    len[3] = w->rkey.len;
    len[4] = z->rate_n;
    len[5] = w->lc->burst_n;
    len[6] = w->lc->delay_n;
    w->cmd = fd_api_redis_command(7, argv, len, redis_done, w);
    return w->cmd ? FD_OK : FD_ERROR;
}

/* The request resumes with rc (verdict's) */
static void resume(wait_t *w, int rc)
{
    fd_request_t *r = w->r;

    if (rc == FD_AGAIN)
        return; /* on its timer */
    fd_req_on_abort(r, w->prev_abort);
    if (rc == FD_OK)
        fd_api_continue(r, FD_API_SELF);
    else
        fd_api_finish(r, rc);
}

static void redis_done(void *data, const fd_api_redis_reply_t *reply)
{
    wait_t *w = data;
    const limit_loc_t *lc = w->lc;
    const zone_t *z = lc->zone;

    w->cmd = NULL;
    if (reply->type == FD_API_REDIS_INT) {
        resume(w, verdict(w->r, lc, z, reply->integer < 0 ? FD_DECLINED
                                                          : FD_OK,
                          reply->integer < 0 ? 0
                                             : (uint64_t)reply->integer));
        return;
    }
    if (reply->type == FD_API_REDIS_ERR && !w->eval && reply->str.len >= 8 &&
        memcmp(reply->str.data, "NOSCRIPT", 8) == 0) {
        /* a Redis that has not seen the script (new, restarted, failed
         * over): its text, once; later requests find it by its SHA */
        w->eval = 1;
        if (redis_ask(w) == FD_OK)
            return;
    } else if (reply->type == FD_API_REDIS_ERR) {
        fd_api_log(FD_API_LOG_ERR, 0, "limit_req zone \"%s\": redis: %.*s",
                   z->name, (int)(reply->str.len < 200 ? reply->str.len : 200),
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

    if ((w = wait_of(r, lc)) == NULL)
        return 500;
    w->rkey.len = sizeof(prefix) - 1 + zn + 1 + key.len;
    if ((p = fd_req_alloc(r, w->rkey.len + key.len)) == NULL)
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
        return fallback(r, lc, z, w->key); /* no [cluster], or down */
    hold(w);
    return FD_AGAIN;
}

static int limit_access(fd_request_t *r)
{
    const limit_loc_t *lc = fd_req_conf_of(r, FD_API_SELF);
    const zone_t *z = lc->zone;
    char kb[FD_API_VAR_TMP];
    fd_str_t key;
    uint64_t wait;
    int rc;

    /* counted once: not again after a rewrite, nor once it waited */
    if (z == NULL || !fd_req_first(r, FD_API_SELF))
        return FD_OK;
    if (fd_req_script_eval(r, z->script, NULL, kb, &key) != FD_OK)
        return 500;
    if (key.len == 0)
        return FD_OK; /* nothing to count by: not limited */
    if (z->store == STORE_REDIS)
        return redis_start(r, lc, z, key);
    rc = account(z, lc, key.data, key.len, fd_api_now_msec(), &wait);
    return verdict(r, lc, z, rc, wait);
}

static int limit_active(const void *conf)
{
    const limit_loc_t *lc = conf;

    return lc->zone != NULL;
}

/* --- status -------------------------------------------------------------- */

static void limit_status(fd_api_status_t *st, const void *a, unsigned worker)
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
        fd_api_status_counter(st, "limit_req_passed", "Requests within the "
                              "rate.", labels, e->passed);
        fd_api_status_counter(st, "limit_req_delayed", "Requests that "
                              "waited for the rate.", labels, e->delayed);
        fd_api_status_counter(st, "limit_req_rejected", "Requests rejected "
                              "past the burst.", labels, e->rejected);
        fd_api_status_counter(st, "limit_req_dry_run", "Requests a dry run "
                              "would have rejected.", labels, e->dry_run);
        fd_api_status_counter(st, "limit_req_fallbacks", "Requests on_error "
                              "answered (store = redis without an "
                              "answer).", labels, e->fallbacks);
    }
}

static void limit_retire(void *retired, const void *a)
{
    fd_api_status_fold(retired, a, sizeof(zone_shm_t), ZONE_MAX,
                       ZONE_NAME_MAX);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "limit_req",
    .keys = limit_keys,
    .conf_size = sizeof(limit_loc_t),
    .init_conf = limit_init_conf,
    .init_worker = limit_init_worker,
    .set = limit_set,
    .access = limit_access,
    .active = limit_active,
    .shm_size = ZONE_MAX * sizeof(zone_shm_t),
    .status = limit_status,
    .retire = limit_retire,
    .section = &zone_section,
    .configured = limit_configured,
};
