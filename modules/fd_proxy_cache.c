/*
 * proxy_cache: proxied responses kept on disk, found through an index in
 * shared memory that every worker sees.
 *
 *   [cache pages]
 *   path = /var/cache/fastd/pages
 *   levels = 1:2
 *   keys_zone = 1m
 *   max_size = 1g
 *   inactive = 10m
 *
 *   [location /]
 *   handler = proxy
 *   upstream = app
 *   proxy_cache = pages
 *   proxy_cache_valid = 200 302 10m
 *
 * The index is a table of 8-entry buckets mapped MAP_SHARED by the master
 * before it forks (a reload with the same name and size keeps it, as
 * limit_req's): an entry is the MD5 of the key, its state (free, being
 * filled, ready), when it stops being fresh, when it was last used and
 * the size of its file. Each bucket has its own spin lock, held for a few
 * loads and stores, never across I/O.
 *
 * An entry's file is path/LEVELS/MD5HEX: a small header (the key, the
 * status, the response's header fields), then the body. It is written
 * under a temporary name in the same directory as the response streams
 * to the client, and renamed once the body is complete and of the length
 * announced, so a reader never opens half a file and a crash leaves only
 * a temporary one. A HIT is that file's body sent like a static file's
 * (sendfile); the small header is read with one pread() on the loop,
 * from the page cache in the usual case (as nginx without aio).
 *
 * proxy_cache_lock: the first miss of a key marks the entry "filling"
 * (with a deadline); the others, in any worker, look again every 10 ms
 * until it is ready, or the filler gave up (then each goes upstream
 * itself), or proxy_cache_lock_timeout passed (then it goes upstream and
 * stores nothing, as nginx).
 *
 * A cache manager on one worker at a time (elected each second by a CAS
 * on the table's header, as health checks are) removes entries unused for
 * `inactive` and, above max_size, the least recently used ones, and
 * unlinks their files.
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_proxy.h"
#include "fd_status.h"

#define WAYS 8
#define POLL_MS 10
#define MANAGER_MS 1000
#define FILE_MAGIC 0x31434446u /* "FDC1" */
#define MAX_RANGES 16          /* as the static module's max_ranges */

enum { E_FREE = 0, E_FILLING, E_READY };

typedef struct {
    uint8_t md5[16];
    uint32_t state;
    uint32_t fill_pid;        /* the filler's, so it alone clears it */
    uint64_t fill_until;      /* monotonic ms: waiters give up after */
    uint64_t expires;         /* monotonic ms: fresh until */
    uint64_t used;            /* monotonic ms of the last hit or store */
    uint64_t size;            /* bytes of the file */
    uint64_t gen;             /* which file: a new one for every commit */
} entry_t;

typedef struct {
    uint32_t lock;
    uint32_t pad;
    entry_t e[WAYS];
} bucket_t;

typedef struct {
    uint64_t size;            /* bytes of every ready entry's file */
    uint64_t entries;
    uint64_t manager_at;      /* monotonic ms of the next manager run */
    uint64_t gen;             /* the last entry_t.gen given */
    uint64_t pad[4];
} head_t;

/* [cache NAME] */
struct fd_proxy_cache_s {
    char *path;
    char *levels_text;
    size_t keys_zone;
    size_t max_size;
    fd_msec_t inactive;

    char *name;
    unsigned index;           /* in the status area */
    uint8_t levels[3];        /* hex digits per directory level; 0: none */
    unsigned nlevels;
    head_t *head;
    bucket_t *table;
    size_t nbuckets;
};

/* a file's header; the key, the fields, then the body follow it */
typedef struct {
    uint32_t magic;
    uint32_t status;
    uint32_t key_len;
    uint32_t fields_len;      /* "Name: value\r\n" lines */
    uint64_t body_len;
    int64_t date;             /* unix seconds it was stored */
} file_head_t;

/* one request's cache state */
struct fd_proxy_cache_req_s {
    fd_proxy_cache_t *cache;
    fd_request_t *r;
    proxy_req_t *px;
    fd_str_t key;
    uint8_t md5[16];
    unsigned filler:1;        /* we marked the entry filling */
    unsigned no_store:1;      /* proxy_no_cache, a lock timeout */
    unsigned storing:1;       /* tmp is open */
    unsigned waited:1;
    int tmp_fd;
    char *tmp_path;
    char *final_path;
    uint64_t head_len;        /* the file's bytes before the body */
    uint64_t body_len;
    uint64_t want_len;        /* Content-Length; UINT64_MAX: none */
    int64_t valid_sec;
    fd_timer_t timer;
    uint64_t wait_until;
};

typedef struct {
    char name[32];
    uint64_t hit, miss, expired, bypass, stored, store_failed, evicted;
} cache_shm_t;

fd_module_t fd_proxy_cache_section;
static cache_shm_t *area;     /* this worker's status entries */

#define COUNT(c, f)                                                         \
    (area ? (void)__atomic_add_fetch(&area[(c)->index].f, 1,                 \
                                     __ATOMIC_RELAXED)                       \
          : (void)0)

/* --- keys, levels, freshness (unit tested) ------------------------------ */

void fd_proxy_cache_hash(const char *key, size_t n, uint8_t md5[16])
{
    static EVP_MD_CTX *ctx;
    static EVP_MD *md;
    unsigned len = 16;

    if (md == NULL)
        md = EVP_MD_fetch(NULL, "MD5", NULL);
    if (ctx == NULL)
        ctx = EVP_MD_CTX_new();
    /* the context is reused: no allocation per request */
    if (md == NULL || ctx == NULL || EVP_DigestInit_ex(ctx, md, NULL) != 1 ||
        EVP_DigestUpdate(ctx, key, n) != 1 ||
        EVP_DigestFinal_ex(ctx, md5, &len) != 1) {
        /* no MD5 (a FIPS provider): FNV-1a twice, still 128 bits */
        uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
        for (size_t i = 0; i < n; i++) {
            h1 = (h1 ^ (uint8_t)key[i]) * 0x100000001b3ull;
            h2 = (h2 ^ (uint8_t)key[i]) * 0x100000001b3ull + 7;
        }
        memcpy(md5, &h1, 8);
        memcpy(md5 + 8, &h2, 8);
    }
}

/* "1:2" -> {1, 2}: up to 3 levels of 1 or 2 hex digits. */
int fd_proxy_cache_levels(const char *s, uint8_t lv[3], unsigned *n)
{
    *n = 0;
    memset(lv, 0, 3);
    if (s == NULL || *s == '\0')
        return FD_OK;
    for (;;) {
        if ((*s != '1' && *s != '2') || *n == 3)
            return FD_ERROR;
        lv[(*n)++] = (uint8_t)(*s++ - '0');
        if (*s == '\0')
            return FD_OK;
        if (*s++ != ':')
            return FD_ERROR;
    }
}

/* path/L1/L2/HEX (the levels from the end of HEX, as nginx); the length,
 * 0 if it does not fit. dir_len: where the file's name begins. */
size_t fd_proxy_cache_file(char *buf, size_t size, const char *path,
                           const uint8_t lv[3], unsigned nlv,
                           const uint8_t md5[16], size_t *dir_len)
{
    static const char hex[] = "0123456789abcdef";
    char h[32];
    size_t n = strlen(path), at = 32;
    unsigned i;

    for (i = 0; i < 16; i++) {
        h[2 * i] = hex[md5[i] >> 4];
        h[2 * i + 1] = hex[md5[i] & 15];
    }
    if (n + 3 * 3 + 33 + 1 > size)
        return 0;
    memcpy(buf, path, n);
    for (i = 0; i < nlv; i++) {
        at -= lv[i];
        buf[n++] = '/';
        memcpy(buf + n, h + at, lv[i]);
        n += lv[i];
    }
    buf[n++] = '/';
    *dir_len = n;
    memcpy(buf + n, h, 32);
    n += 32;
    buf[n] = '\0';
    return n;
}

/* v's token "name" or "name=N" (N into *arg, -1 without): found */
static int cc_token(fd_str_t v, const char *name, int64_t *arg)
{
    size_t nl = strlen(name), i = 0;

    while (i < v.len) {
        size_t s, e;
        while (i < v.len && (v.data[i] == ' ' || v.data[i] == '\t' ||
                             v.data[i] == ','))
            i++;
        s = i;
        while (i < v.len && v.data[i] != ',' && v.data[i] != '=' &&
               v.data[i] != ' ' && v.data[i] != '\t')
            i++;
        e = i;
        int match = e - s == nl &&
                    fd_str_caseeq((fd_str_t){nl, v.data + s}, name, nl);
        int64_t n = -1;
        if (i < v.len && v.data[i] == '=') {
            i++;
            if (i < v.len && v.data[i] == '"')
                i++;
            if (i < v.len && v.data[i] >= '0' && v.data[i] <= '9') {
                n = 0;
                while (i < v.len && v.data[i] >= '0' && v.data[i] <= '9') {
                    if (n < INT64_MAX / 20)
                        n = n * 10 + (v.data[i] - '0');
                    i++;
                }
            }
            while (i < v.len && v.data[i] != ',')
                i++;
        }
        if (match) {
            if (arg)
                *arg = n;
            return 1;
        }
    }
    return 0;
}

static int64_t parse_sec(fd_str_t v)
{
    int64_t n = 0;
    size_t i = 0;

    while (i < v.len && (v.data[i] == ' ' || v.data[i] == '\t'))
        i++;
    if (i == v.len || v.data[i] < '0' || v.data[i] > '9')
        return -1;
    for (; i < v.len && v.data[i] >= '0' && v.data[i] <= '9'; i++)
        if (n < INT64_MAX / 20)
            n = n * 10 + (v.data[i] - '0');
    return n;
}

/*
 * How long the response may be kept (seconds, > 0), or 0: not stored.
 * X-Accel-Expires first (seconds, or @ and a unix time; 0: not
 * cached; it overrides what Cache-Control says), then Cache-Control
 * (no-store, no-cache, private: not stored; s-maxage, then max-age),
 * then Expires, then proxy_cache_valid by status.
 * Set-Cookie and Vary (no variants kept) are never stored; with auth (the
 * request had Authorization) only what says public or s-maxage is.
 * ignore (proxy_ignore_headers) drops fields from the decision.
 */
int64_t fd_proxy_cache_valid_for(const fd_http_header_t *f, unsigned nf,
                                 int status,
                                 const fd_proxy_cache_valid_t *valid,
                                 unsigned nvalid, time_t now, int auth,
                                 unsigned ignore)
{
    int64_t xae = -2, age = -1, exp = -1, n;
    int shared = 0, refused = 0;
    unsigned i;

    if (status < 200 || status == 204 || status == 206 || status == 304)
        return 0;
    for (i = 0; i < nf; i++) {
        fd_str_t nm = f[i].name, v = f[i].value;
        if ((fd_str_caseeq_lit(nm, "set-cookie") &&
             !(ignore & FD_PROXY_IGNORE_COOKIE)) ||
            (fd_str_caseeq_lit(nm, "vary") &&
             !(ignore & FD_PROXY_IGNORE_VARY)))
            return 0;
        if (fd_str_caseeq_lit(nm, "x-accel-expires") &&
            !(ignore & FD_PROXY_IGNORE_XAE)) {
            if (v.len && v.data[0] == '@') {
                n = parse_sec((fd_str_t){v.len - 1, v.data + 1});
                xae = n > now ? n - now : 0;
            } else {
                xae = parse_sec(v);
            }
            if (xae < 0)
                xae = -2; /* unreadable: as if absent */
        } else if (fd_str_caseeq_lit(nm, "cache-control") &&
                   !(ignore & FD_PROXY_IGNORE_CC)) {
            if (cc_token(v, "no-store", NULL) ||
                cc_token(v, "no-cache", NULL) ||
                cc_token(v, "private", NULL))
                refused = 1;
            if (cc_token(v, "public", NULL))
                shared = 1;
            if (cc_token(v, "s-maxage", &n) && n >= 0) {
                age = n;
                shared = 1;
            } else if (age < 0 && cc_token(v, "max-age", &n) && n >= 0) {
                age = n;
            }
        } else if (fd_str_caseeq_lit(nm, "expires") &&
                   !(ignore & FD_PROXY_IGNORE_EXPIRES)) {
            time_t t = fd_http_parse_time(v.data, v.len);
            exp = t > now ? t - now : 0; /* a bad date: already expired */
        }
    }
    if (auth && !shared)
        return 0;
    if (xae != -2) /* it overrides Cache-Control and Expires, as nginx */
        return xae;
    if (refused)
        return 0;
    if (age >= 0)
        return age;
    if (exp >= 0)
        return exp;
    for (i = 0; i < nvalid; i++)
        if (valid[i].status == status || valid[i].status == 0)
            return valid[i].sec;
    return 0;
}

/* --- the shared index ---------------------------------------------------- */

static void lock(bucket_t *b)
{
    fd_shm_lock(&b->lock);
}

static void unlock(bucket_t *b)
{
    fd_shm_unlock(&b->lock);
}

static bucket_t *bucket_of(const fd_proxy_cache_t *c, const uint8_t md5[16])
{
    uint64_t h;

    memcpy(&h, md5, 8);
    return &c->table[(size_t)(((h >> 32) * (uint64_t)c->nbuckets) >> 32)];
}

static entry_t *find(bucket_t *b, const uint8_t md5[16])
{
    for (unsigned i = 0; i < WAYS; i++)
        if (b->e[i].state != E_FREE && memcmp(b->e[i].md5, md5, 16) == 0)
            return &b->e[i];
    return NULL;
}

static void drop(fd_proxy_cache_t *c, entry_t *e)
{
    if (e->state == E_READY) {
        __atomic_sub_fetch(&c->head->size, e->size, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&c->head->entries, 1, __ATOMIC_RELAXED);
    }
    e->state = E_FREE;
    e->size = 0;
}

static void unlink_entry(fd_proxy_cache_t *c, const uint8_t md5[16])
{
    char p[PATH_MAX];
    size_t dl;

    if (fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            md5, &dl) &&
        unlink(p) == -1 && errno != ENOENT)
        fd_log_error(FD_LOG_WARN, errno, "unlink(\"%s\") failed", p);
}

/* A place for md5 in b (locked): a free entry, else the least recently
 * used ready one (whose md5 goes to *evicted), else NULL (all filling). */
static entry_t *make_room(fd_proxy_cache_t *c, bucket_t *b,
                          uint8_t evicted[16], int *was)
{
    entry_t *v = NULL;

    *was = 0;
    for (unsigned i = 0; i < WAYS; i++) {
        entry_t *x = &b->e[i];
        if (x->state == E_FREE)
            return x;
        if (x->state == E_READY && (v == NULL || x->used < v->used))
            v = x;
    }
    if (v) {
        memcpy(evicted, v->md5, 16);
        *was = 1;
        drop(c, v);
    }
    return v;
}

enum { L_MISS, L_HIT, L_EXPIRED, L_WAIT, L_FILL };

/*
 * Look md5 up. L_HIT: fresh and ready (its use is recorded). L_WAIT:
 * another request fills it and lock_ms says to wait. L_FILL: missing (or
 * expired), and we are now its filler (lock_ms > 0 and fill). L_MISS /
 * L_EXPIRED: go upstream (| 0x10 for an expired one we now fill). gen:
 * a HIT's file generation; until: the filler's deadline.
 * evicted is set when room was made.
 */
static int lookup(fd_proxy_cache_t *c, const uint8_t md5[16], uint64_t now,
                  fd_msec_t lock_ms, int fill, uint64_t *until, uint64_t *gen,
                  int *evict, uint8_t evicted[16])
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e;
    int rc;

    *evict = 0;
    lock(b);
    e = find(b, md5);
    if (e && e->state == E_READY && now < e->expires) {
        e->used = now;
        *gen = e->gen;
        unlock(b);
        return L_HIT;
    }
    if (e && e->state == E_FILLING && now < e->fill_until) {
        *until = e->fill_until;
        unlock(b);
        return lock_ms ? L_WAIT : L_MISS;
    }
    rc = e && e->state == E_READY ? L_EXPIRED : L_MISS;
    if (lock_ms && fill) {
        if (e == NULL)
            e = make_room(c, b, evicted, evict);
        if (e) {
            if (e->state == E_READY)
                drop(c, e); /* expired: its file is replaced */
            memcpy(e->md5, md5, 16);
            e->state = E_FILLING;
            e->fill_pid = (uint32_t)getpid();
            e->fill_until = now + lock_ms;
            e->used = now;
            rc = rc == L_EXPIRED ? L_EXPIRED | 0x10 : L_FILL;
        }
    }
    unlock(b);
    return rc;
}

/* The file is in place: the entry is ready until expires. */
static void commit(fd_proxy_cache_t *c, const uint8_t md5[16], uint64_t now,
                   uint64_t expires, uint64_t size)
{
    bucket_t *b = bucket_of(c, md5);
    uint8_t ev[16];
    entry_t *e;
    int evict = 0;

    lock(b);
    e = find(b, md5);
    if (e == NULL)
        e = make_room(c, b, ev, &evict);
    if (e) {
        drop(c, e);
        memcpy(e->md5, md5, 16);
        e->state = E_READY;
        e->expires = expires;
        e->used = now;
        e->size = size;
        e->gen = __atomic_add_fetch(&c->head->gen, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->head->size, size, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->head->entries, 1, __ATOMIC_RELAXED);
    }
    unlock(b);
    if (evict) {
        COUNT(c, evicted);
        unlink_entry(c, ev);
    }
}

/* The filler gave up: waiters go on without it. */
static void unfill(fd_proxy_cache_t *c, const uint8_t md5[16])
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e;

    lock(b);
    e = find(b, md5);
    if (e && e->state == E_FILLING && e->fill_pid == (uint32_t)getpid())
        drop(c, e);
    unlock(b);
}

/* A file that is gone or not what the index said: forget the entry. */
static void forget(fd_proxy_cache_t *c, const uint8_t md5[16])
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e;

    lock(b);
    e = find(b, md5);
    if (e && e->state == E_READY)
        drop(c, e);
    unlock(b);
}

/* --- the cache manager --------------------------------------------------- */

/*
 * Remove entries unused for inactive, then, while above max_size, the
 * least recently used: each pass over the table takes entries used no
 * later than the oldest use found, until under max_size (an LRU by clock
 * tick: CLOCK_MONOTONIC_COARSE's few milliseconds).
 */
static void manage(fd_proxy_cache_t *c, uint64_t now)
{
    uint8_t gone[64][16];
    unsigned ngone, pass;

    for (pass = 0; pass < 64; pass++) {
        uint64_t idle = now > c->inactive ? now - c->inactive : 0;
        uint64_t oldest = UINT64_MAX, lru = 0;
        int over = c->max_size &&
                   __atomic_load_n(&c->head->size, __ATOMIC_RELAXED) >
                       c->max_size;
        size_t i;

        if (pass > 0 && !over)
            break;
        if (over) {
            for (i = 0; i < c->nbuckets; i++) {
                bucket_t *b = &c->table[i];
                for (unsigned k = 0; k < WAYS; k++)
                    if (b->e[k].state == E_READY && b->e[k].used < oldest)
                        oldest = b->e[k].used; /* racy read: a hint */
            }
            if (oldest != UINT64_MAX)
                lru = oldest + 1;
        }
        ngone = 0;
        for (i = 0; i < c->nbuckets; i++) {
            bucket_t *b = &c->table[i];
            lock(b);
            for (unsigned k = 0; k < WAYS && ngone < 64; k++) {
                entry_t *e = &b->e[k];
                /* the oldest only while still above max_size: entries of
                 * one clock tick are not all taken for one too many */
                if (e->state == E_READY &&
                    (e->used < idle || (over && e->used < lru))) {
                    memcpy(gone[ngone++], e->md5, 16);
                    drop(c, e);
                    over = over && __atomic_load_n(&c->head->size,
                                                   __ATOMIC_RELAXED) >
                                       c->max_size;
                } else if (e->state == E_FILLING && now > e->fill_until &&
                           now - e->fill_until > 60000) {
                    drop(c, e); /* its worker died while filling */
                }
            }
            unlock(b);
            if (ngone == 64) {
                for (unsigned k = 0; k < ngone; k++) {
                    unlink_entry(c, gone[k]);
                    COUNT(c, evicted);
                }
                ngone = 0;
            }
        }
        for (unsigned k = 0; k < ngone; k++) {
            unlink_entry(c, gone[k]);
            COUNT(c, evicted);
        }
    }
}

static fd_timer_t manager_timer;

static void manager_run(fd_timer_t *t)
{
    fd_conf_section_t *s;
    uint64_t now = fd_current_msec;

    for (s = fd_worker->cycle->sections; s; s = s->next) {
        fd_proxy_cache_t *c = s->conf;
        uint64_t at;
        if (s->module != &fd_proxy_cache_section)
            continue;
        at = __atomic_load_n(&c->head->manager_at, __ATOMIC_RELAXED);
        if (now >= at &&
            __atomic_compare_exchange_n(&c->head->manager_at, &at,
                                        now + MANAGER_MS, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            manage(c, now);
    }
    fd_timer_add(t, MANAGER_MS);
}

/* --- configuration ------------------------------------------------------- */

#define COFF(f) offsetof(fd_proxy_cache_t, f)

static const fd_directive_t cache_directives[] = {
    {.name = "path", .type = FD_CONF_STR, .offset = COFF(path),
     .doc = "the directory of the cache's files (made if missing, and "
            "again if removed while running); the workers' user must be "
            "able to write it"},
    {.name = "levels", .type = FD_CONF_STR, .offset = COFF(levels_text),
     .doc = "subdirectories by the end of the key's MD5, as nginx: up to 3 "
            "levels of 1 or 2 hex digits, e.g. 1:2 (path/c/29/...); "
            "default: none (every file in path)"},
    {.name = "keys_zone", .type = FD_CONF_SIZE, .offset = COFF(keys_zone),
     .def = "1m", .min = 65536, .max = (int64_t)1 << 32,
     .doc = "the shared index: 520 bytes per 8 entries (1m holds about "
            "16,000 entries); a full bucket gives its least recently used "
            "entry's place (and file) to a new one"},
    {.name = "max_size", .type = FD_CONF_SIZE, .offset = COFF(max_size),
     .def = "0",
     .doc = "above this many bytes of files the cache manager removes the "
            "least recently used entries (checked each second; 0: no "
            "limit)"},
    {.name = "inactive", .type = FD_CONF_MSEC, .offset = COFF(inactive),
     .def = "10m", .min = 1000, .max = (int64_t)365 * 86400 * 1000,
     .doc = "an entry not used for this long is removed, fresh or not"},
    FD_CONF_END};

static int mkdirs(char *p, size_t from)
{
    for (size_t i = from; p[i]; i++) {
        if (p[i] != '/' || i == 0)
            continue;
        p[i] = '\0';
        if (mkdir(p, 0700) == -1 && errno != EEXIST) {
            p[i] = '/';
            return FD_ERROR;
        }
        p[i] = '/';
    }
    if (mkdir(p, 0700) == -1 && errno != EEXIST)
        return FD_ERROR;
    return FD_OK;
}

static int cache_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    fd_proxy_cache_t *c = conf;
    size_t n, size;
    char *base;

    if (fd_cycle_section_name(cf, "cache", name, 32) != FD_OK)
        return FD_ERROR;
    if (c->path == NULL || c->path[0] != '/')
        return fd_conf_error(cf, "[cache %s] needs \"path\", an absolute "
                             "directory", name);
    n = strlen(c->path);
    while (n > 1 && c->path[n - 1] == '/')
        c->path[--n] = '\0';
    if (n + 64 > PATH_MAX)
        return fd_conf_error(cf, "[cache %s]: path too long", name);
    if (fd_proxy_cache_levels(c->levels_text, c->levels, &c->nlevels) !=
        FD_OK)
        return fd_conf_error(cf, "[cache %s]: bad levels \"%s\" (up to 3 "
                             "of 1 or 2, e.g. 1:2)", name, c->levels_text);
    {
        char *p = fd_pstrdup(cf->pool, c->path, n);
        if (p == NULL || mkdirs(p, 0) != FD_OK)
            return fd_conf_error(cf, "[cache %s]: mkdir(\"%s\") failed: "
                                 "%s", name, c->path, strerror(errno));
    }
    c->name = fd_pstrdup(cf->pool, name, strlen(name));
    c->nbuckets = c->keys_zone / sizeof(bucket_t);
    size = sizeof(head_t) + c->nbuckets * sizeof(bucket_t);
    base = fd_shm_zone("proxy_cache", name, size, NULL);
    if (c->name == NULL || base == NULL)
        return fd_conf_error(cf, "[cache %s]: out of memory (the %zu byte "
                             "index)", name, size);
    c->head = (head_t *)base;
    c->table = (bucket_t *)(base + sizeof(head_t));
    return FD_OK;
}

fd_module_t fd_proxy_cache_section = {
    .name = "proxy",
    .section = "cache",
    .section_directives = cache_directives,
    .section_size = sizeof(fd_proxy_cache_t),
    .init_section = cache_init_section,
};

/* proxy_cache_valid = [CODE...|any] TIME */
static int parse_valid(fd_conf_t *cf, proxy_loc_conf_t *lc, const char *v)
{
    char *s = fd_pstrdup(cf->pool, v, strlen(v)), *save, *tok, *last = NULL;
    int codes[32], nc = 0;
    int64_t sec;
    fd_proxy_cache_valid_t *a;

    if (s == NULL)
        return fd_conf_error(cf, "out of memory");
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (last) {
            int64_t code = strcmp(last, "any") == 0
                               ? 0
                               : fd_conf_parse_uint(last, 599);
            if (code != 0 && code < 200)
                return fd_conf_error(cf, "\"proxy_cache_valid\": bad code "
                                     "\"%s\" (200 to 599 or any)", last);
            if (nc == (int)fd_nelems(codes))
                return fd_conf_error(cf, "\"proxy_cache_valid\": too many "
                                     "codes");
            codes[nc++] = (int)code;
        }
        last = tok;
    }
    if (last == NULL || (sec = fd_conf_parse_msec(last)) < 0)
        return fd_conf_error(cf, "\"proxy_cache_valid\" must be [CODE...] "
                             "TIME, not \"%s\"", v);
    if (nc == 0) {
        codes[nc++] = 200;
        codes[nc++] = 301;
        codes[nc++] = 302;
    }
    a = fd_palloc(cf->pool, (lc->nvalid + (unsigned)nc) * sizeof(*a));
    if (a == NULL)
        return fd_conf_error(cf, "out of memory");
    if (lc->nvalid)
        memcpy(a, lc->valid, lc->nvalid * sizeof(*a));
    for (int i = 0; i < nc; i++)
        a[lc->nvalid + (unsigned)i] =
            (fd_proxy_cache_valid_t){codes[i], sec / 1000};
    lc->valid = a;
    lc->nvalid += (unsigned)nc;
    return FD_OK;
}

static int compile_list(fd_conf_t *cf, fd_conf_list_t *l,
                        fd_var_script_t **out, unsigned *n, const char *what)
{
    unsigned i;

    *n = l->n;
    if (l->n == 0)
        return FD_OK;
    if ((*out = fd_pcalloc(cf->pool, l->n * sizeof(**out))) == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < l->n; i++)
        if (fd_var_compile(cf, &(*out)[i], l->items[i], strlen(l->items[i]),
                           0, what) != FD_OK)
            return FD_ERROR;
    return FD_OK;
}

int fd_proxy_cache_init_conf(fd_conf_t *cf, proxy_loc_conf_t *lc)
{
    const char *key = lc->cache_key_src ? lc->cache_key_src
                                        : "$scheme$host$request_uri";
    char *s, *save, *tok;
    unsigned i;

    if (lc->cache_name == NULL || strcmp(lc->cache_name, "off") == 0)
        return FD_OK;
    fd_conf_at_key(cf, lc, "proxy_cache");
    lc->cache = fd_cycle_section(cf->cycle, "cache", lc->cache_name);
    if (lc->cache == NULL)
        return fd_conf_error(cf, "unknown cache \"%s\" (no [cache %s] "
                             "section)", lc->cache_name, lc->cache_name);
    if (lc->cache_key_src)
        fd_conf_at_key(cf, lc, "proxy_cache_key");
    if (fd_var_compile(cf, &lc->cache_key, key, strlen(key), 0,
                       "proxy_cache_key") != FD_OK)
        return FD_ERROR;
    fd_conf_at_key(cf, lc, "proxy_cache_valid");
    for (i = 0; i < lc->cache_valid.n; i++)
        if (parse_valid(cf, lc, lc->cache_valid.items[i]) != FD_OK)
            return FD_ERROR;
    lc->cache_methods = 0;
    fd_conf_at_key(cf, lc, "proxy_cache_methods");
    s = fd_pstrdup(cf->pool, lc->cache_methods_src,
                   strlen(lc->cache_methods_src));
    if (s == NULL)
        return fd_conf_error(cf, "out of memory");
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (strcmp(tok, "GET") == 0)
            lc->cache_methods |= FD_METHOD(FD_HTTP_GET);
        else if (strcmp(tok, "HEAD") == 0)
            lc->cache_methods |= FD_METHOD(FD_HTTP_HEAD);
        else if (strcmp(tok, "POST") == 0)
            lc->cache_methods |= FD_METHOD(FD_HTTP_POST);
        else
            return fd_conf_error(cf, "\"proxy_cache_methods\": \"%s\" is "
                                 "not GET, HEAD or POST", tok);
    }
    /* as nginx: GET and HEAD are always cached */
    lc->cache_methods |= FD_METHODS_GET;
    fd_conf_at_key(cf, lc, "proxy_cache_bypass");
    if (compile_list(cf, &lc->cache_bypass_src, &lc->bypass, &lc->nbypass,
                     "proxy_cache_bypass") != FD_OK)
        return FD_ERROR;
    fd_conf_at_key(cf, lc, "proxy_no_cache");
    if (compile_list(cf, &lc->no_cache_src, &lc->no_cache, &lc->nno_cache,
                     "proxy_no_cache") != FD_OK)
        return FD_ERROR;
    fd_conf_at_key(cf, lc, "proxy_ignore_headers");
    for (i = 0; i < lc->ignore_src.n; i++) {
        static const struct {
            const char *name;
            unsigned flag;
        } names[] = {{"X-Accel-Expires", FD_PROXY_IGNORE_XAE},
                     {"Expires", FD_PROXY_IGNORE_EXPIRES},
                     {"Cache-Control", FD_PROXY_IGNORE_CC},
                     {"Set-Cookie", FD_PROXY_IGNORE_COOKIE},
                     {"Vary", FD_PROXY_IGNORE_VARY}};
        char *v = fd_pstrdup(cf->pool, lc->ignore_src.items[i],
                             strlen(lc->ignore_src.items[i]));
        if (v == NULL)
            return fd_conf_error(cf, "out of memory");
        for (tok = strtok_r(v, " \t", &save); tok;
             tok = strtok_r(NULL, " \t", &save)) {
            unsigned k;
            for (k = 0; k < fd_nelems(names); k++)
                if (strcasecmp(tok, names[k].name) == 0)
                    break;
            if (k == fd_nelems(names))
                return fd_conf_error(cf, "\"proxy_ignore_headers\": \"%s\" "
                                     "is not X-Accel-Expires, Expires, "
                                     "Cache-Control, Set-Cookie or Vary",
                                     tok);
            lc->cache_ignore |= names[k].flag;
        }
    }
    return FD_OK;
}

/* --- status -------------------------------------------------------------- */

void fd_proxy_cache_init_worker(fd_worker_t *w, void *stats)
{
    fd_conf_section_t *s;
    unsigned n = 0;

    area = stats;
    if (area)
        memset(area, 0, FD_PROXY_CACHE_MAX * sizeof(*area));
    for (s = w->cycle->sections; s; s = s->next) {
        fd_proxy_cache_t *c = s->conf;
        if (s->module != &fd_proxy_cache_section)
            continue;
        c->index = n < FD_PROXY_CACHE_MAX ? n : FD_PROXY_CACHE_MAX - 1;
        if (area && n < FD_PROXY_CACHE_MAX)
            snprintf(area[n].name, sizeof(area[n].name), "%s", c->name);
        n++;
    }
    if (n) {
        manager_timer.handler = manager_run;
        fd_timer_add(&manager_timer, MANAGER_MS);
    }
}

void fd_proxy_cache_exit_worker(void)
{
    if (fd_timer_armed(&manager_timer))
        fd_timer_del(&manager_timer);
}

_Static_assert(FD_PROXY_CACHE_MAX * sizeof(cache_shm_t) <=
                   FD_PROXY_CACHE_SHM_SIZE,
               "the caches' part of the proxy's stats slot");

void fd_proxy_cache_status(fd_status_t *st, const void *a, unsigned worker)
{
    const cache_shm_t *e = a;
    char labels[64];
    unsigned i;

    (void)worker;
    for (i = 0; i < FD_PROXY_CACHE_MAX; i++, e++) {
        if (e->name[0] == '\0')
            continue;
        snprintf(labels, sizeof(labels), "cache=\"%s\"", e->name);
        fd_status_counter(st, "proxy_cache_hits", "Responses served from "
                          "the cache.", labels, e->hit);
        fd_status_counter(st, "proxy_cache_misses", "Cacheable requests "
                          "not found in the cache.", labels, e->miss);
        fd_status_counter(st, "proxy_cache_expired", "Requests whose "
                          "entry was stale.", labels, e->expired);
        fd_status_counter(st, "proxy_cache_bypass", "Requests "
                          "proxy_cache_bypass sent upstream.", labels,
                          e->bypass);
        fd_status_counter(st, "proxy_cache_stored", "Responses written to "
                          "the cache.", labels, e->stored);
        fd_status_counter(st, "proxy_cache_store_failed", "Responses not "
                          "stored for a write error or a wrong length.",
                          labels, e->store_failed);
        fd_status_counter(st, "proxy_cache_evicted", "Entries removed for "
                          "inactive, max_size or room.", labels, e->evicted);
    }
}

void fd_proxy_cache_retire(void *retired, const void *a)
{
    const cache_shm_t *s = a;
    cache_shm_t *into;
    unsigned i;

    for (i = 0; i < FD_PROXY_CACHE_MAX; i++, s++) {
        if (s->name[0] == '\0' ||
            (into = fd_status_named_entry(retired, sizeof(*s),
                                          FD_PROXY_CACHE_MAX, s->name,
                                          sizeof(s->name))) == NULL)
            continue;
        into->hit += s->hit;
        into->miss += s->miss;
        into->expired += s->expired;
        into->bypass += s->bypass;
        into->stored += s->stored;
        into->store_failed += s->store_failed;
        into->evicted += s->evicted;
    }
}

/* --- a request: lookup and HIT ------------------------------------------- */

/* any value non-empty and not "0" */
static int any_true(fd_request_t *r, const fd_var_script_t *s, unsigned n)
{
    fd_str_t v;

    for (unsigned i = 0; i < n; i++)
        if (fd_var_eval_str(r, &s[i], FD_VAR_ESC_NONE, &v) == FD_OK &&
            v.len && !(v.len == 1 && v.data[0] == '0'))
            return 1;
    return 0;
}

/*
 * The worker's open entries: a file it served, open, with its header read,
 * kept while the index gives the entry the same generation (a new file
 * is a new one) and the file still has a name (checked with fstat() at
 * most once a second: only a hand that removes files under the cache
 * unlinks one the index still has, and what the descriptor reads is
 * still that whole entry). A request sending from one holds a reference;
 * the slot holds one.
 */
#define OPEN_SLOTS 1024

typedef struct {
    uint8_t md5[16];
    const head_t *head;       /* which cache (the same across reloads) */
    uint64_t gen;
    int fd;
    unsigned refs;
    time_t checked;           /* when fstat() last saw it linked */
    file_head_t fh;
    char *buf;                /* the key, then the fields */
} open_entry_t;

static open_entry_t *open_slots[OPEN_SLOTS];

static void open_release(void *data)
{
    open_entry_t *oe = data;

    if (--oe->refs == 0) {
        close(oe->fd);
        free(oe->buf);
        free(oe);
    }
}

/* The entry's file, open and read: NULL (forgotten) when it is missing or
 * not whole. */
static open_entry_t *open_entry(fd_proxy_cache_req_t *cr, uint64_t gen)
{
    fd_proxy_cache_t *c = cr->cache;
    open_entry_t *oe;
    char p[PATH_MAX];
    struct stat st;
    size_t dl, n;
    int fd;

    if (fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            cr->md5, &dl) == 0)
        return NULL;
    fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        if (errno != ENOENT)
            fd_log_error(FD_LOG_ERR, errno, "open(\"%s\") failed", p);
        forget(c, cr->md5);
        return NULL;
    }
    if ((oe = calloc(1, sizeof(*oe))) == NULL) {
        close(fd);
        return NULL;
    }
    oe->fd = fd;
    oe->refs = 1;
    if (pread(fd, &oe->fh, sizeof(oe->fh), 0) != (ssize_t)sizeof(oe->fh) ||
        oe->fh.magic != FILE_MAGIC || fstat(fd, &st) == -1 ||
        (uint64_t)st.st_size != sizeof(oe->fh) + oe->fh.key_len +
                                    oe->fh.fields_len + oe->fh.body_len)
        goto bad;
    n = (size_t)oe->fh.key_len + oe->fh.fields_len;
    if ((oe->buf = malloc(n + 1)) == NULL ||
        pread(fd, oe->buf, n, sizeof(oe->fh)) != (ssize_t)n)
        goto bad;
    memcpy(oe->md5, cr->md5, 16);
    oe->head = c->head;
    oe->gen = gen;
    return oe;

bad:
    fd_log_error(FD_LOG_WARN, 0, "cache \"%s\": \"%s\" is not a whole "
                 "entry: removed", c->name, p);
    forget(c, cr->md5);
    unlink(p);
    open_release(oe);
    return NULL;
}

/*
 * Serve the entry (generation gen) into r: FD_OK, or FD_DECLINED when the
 * file is missing or not the entry (then the index forgets it).
 */
static int serve(fd_proxy_cache_req_t *cr, uint64_t gen)
{
    fd_request_t *r = cr->r;
    fd_proxy_cache_t *c = cr->cache;
    open_entry_t **slot, *oe;
    struct stat st;
    char *q, *end;
    uint32_t h;
    off_t body_off;

    memcpy(&h, cr->md5 + 8, 4);
    slot = &open_slots[h % OPEN_SLOTS];
    oe = *slot;
    if (oe && (oe->gen != gen || oe->head != c->head ||
               memcmp(oe->md5, cr->md5, 16) != 0)) {
        *slot = NULL;
        open_release(oe);
        oe = NULL;
    }
    if (oe && oe->checked != fd_current_sec &&
        (fstat(oe->fd, &st) == -1 || st.st_nlink == 0)) {
        /* unlinked under us (the directory removed): a miss */
        *slot = NULL;
        open_release(oe);
        forget(c, cr->md5);
        return FD_DECLINED;
    }
    if (oe == NULL) {
        if ((oe = open_entry(cr, gen)) == NULL)
            return FD_DECLINED;
        *slot = oe;
    }
    oe->checked = fd_current_sec;
    if (oe->fh.key_len != cr->key.len ||
        memcmp(oe->buf, cr->key.data, cr->key.len) != 0)
        return FD_DECLINED; /* an MD5 collision: served from upstream */
    if (fd_pool_cleanup_add(r->pool, open_release, oe) == NULL)
        return FD_DECLINED;
    oe->refs++;
    body_off = (off_t)(sizeof(oe->fh) + oe->fh.key_len + oe->fh.fields_len);
    r->status = (int)oe->fh.status;
    for (q = oe->buf + oe->fh.key_len, end = q + oe->fh.fields_len;
         q < end;) {
        char *colon = memchr(q, ':', (size_t)(end - q));
        char *eol = colon ? memchr(colon, '\r', (size_t)(end - colon)) : NULL;
        fd_str_t name, value;
        if (eol == NULL || eol + 1 >= end || eol[1] != '\n')
            return FD_DECLINED;
        name = (fd_str_t){(size_t)(colon - q), q};
        value = (fd_str_t){(size_t)(eol - colon - 2), colon + 2};
        q = eol + 2;
        if (fd_str_caseeq_lit(name, "content-type")) {
            r->content_type = value;
        } else if (oe->fh.status == 200 && fd_str_caseeq_lit(name, "etag")) {
            r->etag = value; /* the engine writes it, 304 too */
        } else if (oe->fh.status == 200 &&
                   fd_str_caseeq_lit(name, "last-modified")) {
            r->last_modified = fd_http_parse_time(value.data, value.len);
            if (r->last_modified == -1 &&
                fd_http_header_add(r, name, value) != FD_OK)
                return FD_DECLINED;
        } else if (oe->fh.status == 200 &&
                   fd_str_caseeq_lit(name, "accept-ranges")) {
            continue; /* fd_http_send_file() says bytes */
        } else if (fd_http_header_add(r, name, value) != FD_OK) {
            return FD_DECLINED;
        }
    }
    if (oe->fh.status == 200) {
        /* the client's conditionals and ranges, as for a static file */
        return fd_http_send_file(r, oe->fd, body_off,
                                 (int64_t)oe->fh.body_len, MAX_RANGES) ==
                       FD_OK
                   ? FD_OK
                   : FD_DECLINED;
    }
    r->content_length = (int64_t)oe->fh.body_len;
    if (oe->fh.body_len && !r->header_only) {
        fd_buf_t *b = fd_buf_file(r->pool, oe->fd, body_off,
                                  body_off + (off_t)oe->fh.body_len);
        if (b == NULL)
            return FD_DECLINED;
        fd_http_body_append(r, b);
    }
    return FD_OK;
}

/* serve() gave up: the response goes upstream from a clean slate. */
static void unserve(fd_request_t *r)
{
    r->status = 0;
    r->headers_out = NULL;
    r->headers_out_last = &r->headers_out;
    r->out = NULL;
    r->out_last = &r->out;
    r->content_type = fd_null_string;
    r->content_length = -1;
    r->etag = fd_null_string;
    r->last_modified = -1;
}

static void wait_cleanup(void *data)
{
    fd_proxy_cache_req_t *cr = data;

    if (fd_timer_armed(&cr->timer))
        fd_timer_del(&cr->timer);
}

static void wait_abort(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    if (px == NULL)
        return;
    if (px->cr && fd_timer_armed(&px->cr->timer))
        fd_timer_del(&px->cr->timer);
    px->done = 1;
}

static int decide(fd_proxy_cache_req_t *cr, fd_msec_t lock_ms);

/* Waiting on another's fill: look again. */
static void wait_poll(fd_timer_t *t)
{
    fd_proxy_cache_req_t *cr = (fd_proxy_cache_req_t *)((char *)t -
                                   offsetof(fd_proxy_cache_req_t, timer));
    fd_request_t *r = cr->r;
    proxy_req_t *px = cr->px;
    int rc;

    fd_log_conn_id = r->c->id;
    r->on_abort = NULL;
    if (fd_current_msec >= cr->wait_until) {
        /* the lock timed out: upstream, and nothing stored (nginx) */
        cr->no_store = 1;
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        rc = fd_proxy_start(px);
    } else {
        rc = decide(cr, px->lc->cache_lock_timeout);
        if (rc == FD_DECLINED)
            rc = fd_proxy_start(px);
    }
    if (rc != FD_AGAIN)
        fd_request_finish(r, rc);
    fd_log_conn_id = 0;
}

/* The lookup and what follows from it: FD_OK (a HIT is in r), FD_AGAIN
 * (waiting), FD_DECLINED (go upstream). */
static int decide(fd_proxy_cache_req_t *cr, fd_msec_t lock_ms)
{
    proxy_req_t *px = cr->px;
    fd_request_t *r = cr->r;
    uint8_t ev[16];
    uint64_t until = 0, gen = 0;
    int evict, rc;

    /* a HEAD waits for nobody and fills nothing: it is answered from a
     * GET's entry or passed. One that waited does not fill: when the
     * filler stored nothing, the waiters go upstream side by side rather
     * than one after another. */
    if (r->in.method_id == FD_HTTP_HEAD)
        lock_ms = 0;
    rc = lookup(cr->cache, cr->md5, fd_current_msec, lock_ms, !cr->waited,
                &until, &gen, &evict, ev);
    if (evict) {
        COUNT(cr->cache, evicted);
        unlink_entry(cr->cache, ev);
    }
    if (rc & 0x10) {
        cr->filler = 1;
        rc &= ~0x10;
    }
    switch (rc) {
    case L_HIT:
        if (serve(cr, gen) == FD_OK) {
            px->cache_status = FD_PROXY_CACHE_HIT;
            COUNT(cr->cache, hit);
            return FD_OK;
        }
        /* gone, not whole, or another key's: upstream, and stored */
        unserve(r);
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    case L_WAIT:
        if (cr->wait_until == 0)
            cr->wait_until = fd_current_msec + lock_ms;
        if (until < cr->wait_until)
            cr->wait_until = until; /* the filler's own deadline */
        cr->timer.handler = wait_poll;
        fd_timer_add(&cr->timer, POLL_MS);
        r->on_abort = wait_abort;
        cr->waited = 1;
        return FD_AGAIN;
    case L_FILL:
        cr->filler = 1;
        /* fall through */
    case L_MISS:
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    default: /* L_EXPIRED */
        px->cache_status = FD_PROXY_CACHE_EXPIRED;
        COUNT(cr->cache, expired);
        return FD_DECLINED;
    }
}

int fd_proxy_cache_lookup(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    fd_proxy_cache_req_t *cr;
    fd_sbuf_t sb;

    /* a WebSocket upgrade is a tunnel, never an entry */
    if (!(lc->cache_methods & FD_METHOD(r->in.method_id)) || px->upgrade)
        return FD_DECLINED;
    cr = fd_pcalloc(r->pool, sizeof(*cr));
    if (cr == NULL || fd_pool_cleanup_add(r->pool, wait_cleanup, cr) == NULL)
        return 500;
    cr->cache = lc->cache;
    cr->r = r;
    cr->px = px;
    cr->tmp_fd = -1;
    if (fd_sbuf_init(&sb, r->pool, 128) != FD_OK)
        return 500;
    fd_var_eval(r, &lc->cache_key, NULL, FD_VAR_ESC_NONE, &sb);
    if (fd_sbuf_failed(&sb))
        return 500;
    cr->key = fd_sbuf_str(&sb);
    fd_proxy_cache_hash(cr->key.data, cr->key.len, cr->md5);
    px->cr = cr;
    cr->no_store = lc->nno_cache && any_true(r, lc->no_cache, lc->nno_cache);
    if (lc->nbypass && any_true(r, lc->bypass, lc->nbypass)) {
        px->cache_status = FD_PROXY_CACHE_BYPASS;
        COUNT(cr->cache, bypass);
        return FD_DECLINED;
    }
    /* a shared cache answers no credentialed request from what another
     * client stored (RFC 9111 3.5); only what said public is stored */
    if (r->in.method_id != FD_HTTP_GET && r->in.method_id != FD_HTTP_HEAD) {
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    }
    for (unsigned i = 0; i < r->in.nheaders; i++)
        if (fd_str_caseeq_lit(r->in.headers[i].name, "authorization")) {
            px->cache_status = FD_PROXY_CACHE_MISS;
            COUNT(cr->cache, miss);
            return FD_DECLINED;
        }
    return decide(cr, lc->cache_lock ? lc->cache_lock_timeout : 0);
}

/* --- a request: storing the response ------------------------------------- */

static time_t last_warn;

/* Write errors are logged at most once a second a worker: a removed or
 * full disk must not flood the log. */
static void store_warn(fd_proxy_cache_req_t *cr, int err, const char *what)
{
    if (fd_current_sec == last_warn)
        return;
    last_warn = fd_current_sec;
    fd_log_error(FD_LOG_WARN, err, "cache \"%s\": %s \"%s\" failed",
                 cr->cache->name, what, cr->tmp_path ? cr->tmp_path : "");
}

static void store_abandon(fd_proxy_cache_req_t *cr)
{
    if (cr->storing) {
        close(cr->tmp_fd);
        cr->tmp_fd = -1;
        unlink(cr->tmp_path);
        cr->storing = 0;
    }
    if (cr->filler) {
        unfill(cr->cache, cr->md5);
        cr->filler = 0;
    }
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return FD_ERROR;
        }
        p += w;
        n -= (size_t)w;
    }
    return FD_OK;
}

static int open_tmp(fd_proxy_cache_req_t *cr)
{
    static unsigned seq;
    fd_proxy_cache_t *c = cr->cache;
    fd_request_t *r = cr->r;
    char p[PATH_MAX];
    size_t dl, n;
    int fd;

    n = fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            cr->md5, &dl);
    if (n == 0 || (cr->final_path = fd_pstrdup(r->pool, p, n)) == NULL ||
        (cr->tmp_path = fd_pnalloc(r->pool, n + 32)) == NULL)
        return FD_ERROR;
    snprintf(cr->tmp_path, n + 32, "%s.%d.%u.tmp", p, (int)getpid(), ++seq);
    fd = open(cr->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd == -1 && errno == ENOENT) {
        /* a level (or the cache itself) is missing: made again */
        p[dl - 1] = '\0';
        if (mkdirs(p, strlen(c->path)) != FD_OK && mkdirs(p, 0) != FD_OK) {
            store_warn(cr, errno, "mkdir for");
            return FD_ERROR;
        }
        fd = open(cr->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                  0600);
    }
    if (fd == -1) {
        store_warn(cr, errno, "open()");
        return FD_ERROR;
    }
    cr->tmp_fd = fd;
    cr->storing = 1;
    return FD_OK;
}

/*
 * The response header is in r (and its raw fields in f): store it when
 * it may be kept. Its fields as the client gets them (hidden and
 * hop-by-hop ones are gone; add_header comes at sending time).
 */
void fd_proxy_cache_header(proxy_req_t *px, const fd_http_header_t *f,
                           unsigned nf, int64_t content_length)
{
    fd_proxy_cache_req_t *cr = px->cr;
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    fd_http_header_out_t *h;
    file_head_t fh = {.magic = FILE_MAGIC};
    fd_sbuf_t sb;
    int auth = 0;

    if (cr == NULL)
        return;
    for (unsigned i = 0; i < r->in.nheaders; i++)
        if (fd_str_caseeq_lit(r->in.headers[i].name, "authorization"))
            auth = 1;
    if (cr->no_store || r->in.method_id != FD_HTTP_GET ||
        px->framing == FR_NONE ||
        (cr->valid_sec = fd_proxy_cache_valid_for(
             f, nf, r->status, lc->valid, lc->nvalid, fd_current_sec,
             auth, lc->cache_ignore)) <= 0) {
        store_abandon(cr);
        return;
    }
    cr->want_len = content_length >= 0 ? (uint64_t)content_length
                                       : UINT64_MAX;
    if (fd_sbuf_init(&sb, r->pool, 512 + cr->key.len) != FD_OK)
        goto failed;
    fd_sbuf_add(&sb, (const char *)&fh, sizeof(fh));
    fd_sbuf_add_str(&sb, cr->key);
    if (r->content_type.len)
        fd_sbuf_add_header(&sb, fd_string("Content-Type"), r->content_type);
    for (h = r->headers_out; h; h = h->next)
        fd_sbuf_add_header(&sb, h->name, h->value);
    if (fd_sbuf_failed(&sb))
        goto failed;
    fh.status = (uint32_t)r->status;
    fh.key_len = (uint32_t)cr->key.len;
    fh.fields_len = (uint32_t)(fd_sbuf_len(&sb) - sizeof(fh) - cr->key.len);
    fh.date = fd_current_sec;
    memcpy(sb.start, &fh, sizeof(fh));
    if (open_tmp(cr) != FD_OK)
        goto failed;
    cr->head_len = fd_sbuf_len(&sb);
    if (write_all(cr->tmp_fd, sb.start, fd_sbuf_len(&sb)) != FD_OK) {
        store_warn(cr, errno, "write()");
        goto failed;
    }
    return;

failed:
    COUNT(cr->cache, store_failed);
    store_abandon(cr);
}

/* Body bytes on their way to the client: into the file too. */
void fd_proxy_cache_body(proxy_req_t *px, const fd_buf_t *chain)
{
    fd_proxy_cache_req_t *cr = px->cr;

    if (cr == NULL || !cr->storing)
        return;
    for (; chain; chain = chain->next) {
        size_t n = (size_t)(chain->last - chain->pos);
        if (write_all(cr->tmp_fd, chain->pos, n) != FD_OK) {
            store_warn(cr, errno, "write()");
            COUNT(cr->cache, store_failed);
            store_abandon(cr);
            return;
        }
        cr->body_len += n;
    }
}

/* The body ended; whole: it came as framed, nothing after it. */
void fd_proxy_cache_end(proxy_req_t *px, int whole)
{
    fd_proxy_cache_req_t *cr = px->cr;
    uint64_t bl;

    if (cr == NULL)
        return;
    if (!cr->storing) {
        store_abandon(cr);
        return;
    }
    bl = cr->body_len;
    if (!whole || (cr->want_len != UINT64_MAX && bl != cr->want_len)) {
        /* not the length announced: a proxy passes it, a cache does not */
        COUNT(cr->cache, store_failed);
        store_abandon(cr);
        return;
    }
    if (pwrite(cr->tmp_fd, &bl, sizeof(bl),
               offsetof(file_head_t, body_len)) != (ssize_t)sizeof(bl)) {
        store_warn(cr, errno, "pwrite()");
        goto failed;
    }
    if (close(cr->tmp_fd) == -1) {
        cr->tmp_fd = -1;
        store_warn(cr, errno, "close()");
        goto failed_closed;
    }
    cr->tmp_fd = -1;
    if (rename(cr->tmp_path, cr->final_path) == -1) {
        store_warn(cr, errno, "rename()");
        goto failed_closed;
    }
    cr->storing = 0;
    cr->filler = 0; /* commit() turns the filling entry ready */
    commit(cr->cache, cr->md5, fd_current_msec,
           fd_current_msec + (uint64_t)cr->valid_sec * 1000,
           cr->head_len + bl);
    COUNT(cr->cache, stored);
    return;

failed_closed:
    unlink(cr->tmp_path);
    cr->storing = 0;
failed:
    COUNT(cr->cache, store_failed);
    store_abandon(cr);
}

/* The request ends without its response stored (an error, an abort). */
void fd_proxy_cache_abandon(proxy_req_t *px)
{
    if (px->cr)
        store_abandon(px->cr);
}

const char *fd_proxy_cache_status_text(int s)
{
    static const char *const t[] = {"", "MISS", "HIT", "EXPIRED", "BYPASS"};

    return s >= 0 && s < (int)fd_nelems(t) ? t[s] : "";
}
