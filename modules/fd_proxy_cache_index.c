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
 *
 * After a start (not a reload: the zone keeps the index) a loader on one
 * worker at a time indexes the files found on disk, in slices, while
 * requests are served; it removes partial and orphaned temporary files
 * (see "the loader" below).
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>

#include "fd_proxy_cache_int.h"

cache_shm_t *fd_proxy_cache_area;
/* the running configuration's [cache NAME] sections (init_worker) */
static fd_proxy_cache_t *caches;

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

/* --- the shared index ---------------------------------------------------- */

static void lock(bucket_t *b)
{
    fd_api_shm_lock(&b->lock);
}

static void unlock(bucket_t *b)
{
    fd_api_shm_unlock(&b->lock);
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

void fd_proxy_cache_unlink(fd_proxy_cache_t *c, const uint8_t md5[16])
{
    char p[PATH_MAX];
    size_t dl;

    if (fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            md5, &dl) &&
        unlink(p) == -1 && errno != ENOENT)
        fd_api_log(FD_API_LOG_WARN, errno, "unlink(\"%s\") failed", p);
}

/* A place for md5 in b (locked): a free entry, else the least recently
 * used ready one (whose md5 goes to *evicted), else NULL (all filling). */
static entry_t *make_room(fd_proxy_cache_t *c, bucket_t *b, uint8_t evicted[16],
                          int *was)
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

/*
 * Look md5 up. L_HIT: fresh and ready (its use is recorded). L_WAIT:
 * another request fills or updates it and lock_ms says to wait. L_STALE:
 * expired, another request updates it, and stale says to answer from it.
 * L_FILL: missing, and we are now its filler (lock_ms > 0 and fill).
 * L_MISS / L_EXPIRED: go upstream; | 0x10 for an expired one we now
 * update (lock_ms or stale, and fill). gen: the file generation of a
 * HIT, a STALE and an EXPIRED entry (which stays ready, for
 * proxy_cache_use_stale and revalidation, until a new file replaces it);
 * until: the filler's deadline. evicted is set when room was made.
 *
 * An expired entry being updated is a ready one with fill_pid set and
 * fill_until ahead: its file still answers.
 */
int fd_proxy_cache_index_lookup(fd_proxy_cache_t *c, const uint8_t md5[16],
                                uint64_t now, uint64_t lock_ms,
                                uint64_t stale_ms, int fill,
                                uint64_t *until, uint64_t *gen, int *evict,
                                uint8_t evicted[16])
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
    if (e && e->state == E_READY) {
        *gen = e->gen;
        if (e->fill_pid && now < e->fill_until) {
            /* another request updates it */
            *until = e->fill_until;
            rc = stale_ms ? L_STALE : lock_ms ? L_WAIT : L_EXPIRED;
            if (rc == L_STALE)
                e->used = now;
            unlock(b);
            return rc;
        }
        if ((lock_ms || stale_ms) && fill) {
            e->fill_pid = (uint32_t)getpid();
            e->fill_until = now + (lock_ms > stale_ms ? lock_ms : stale_ms);
            e->used = now;
            unlock(b);
            return L_EXPIRED | 0x10;
        }
        unlock(b);
        return L_EXPIRED;
    }
    if (e && e->state == E_FILLING && now < e->fill_until) {
        *until = e->fill_until;
        unlock(b);
        return lock_ms ? L_WAIT : L_MISS;
    }
    rc = L_MISS;
    if (lock_ms && fill) {
        if (e == NULL)
            e = make_room(c, b, evicted, evict);
        if (e) {
            memcpy(e->md5, md5, 16);
            e->state = E_FILLING;
            e->fill_pid = (uint32_t)getpid();
            e->fill_until = now + lock_ms;
            e->used = now;
            rc = L_FILL;
        }
    }
    unlock(b);
    return rc;
}

/* A 304 confirmed the entry of generation gen: fresh until expires. */
int fd_proxy_cache_index_refresh(fd_proxy_cache_t *c, const uint8_t md5[16],
                                 uint64_t gen, uint64_t now,
                                 uint64_t expires)
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e;
    int ok = 0;

    lock(b);
    e = find(b, md5);
    if (e && e->state == E_READY && e->gen == gen) {
        e->expires = expires;
        e->used = now;
        e->fill_pid = 0;
        ok = 1;
    }
    unlock(b);
    return ok;
}

/* The file is in place: the entry is ready until expires. */
void fd_proxy_cache_index_commit(fd_proxy_cache_t *c, const uint8_t md5[16], uint64_t now,
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
        e->fill_pid = 0;
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
        fd_proxy_cache_unlink(c, ev);
    }
}

/* The filler gave up: waiters go on without it. */
void fd_proxy_cache_index_unfill(fd_proxy_cache_t *c, const uint8_t md5[16])
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e;

    lock(b);
    e = find(b, md5);
    if (e && e->fill_pid == (uint32_t)getpid()) {
        if (e->state == E_FILLING)
            drop(c, e);
        else if (e->state == E_READY)
            e->fill_pid = 0; /* expired, not updated: others may try */
    }
    unlock(b);
}

/* A file that is gone or not what the index said: forget the entry. */
void fd_proxy_cache_index_forget(fd_proxy_cache_t *c, const uint8_t md5[16],
                                 uint64_t gen)
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e;

    lock(b);
    e = find(b, md5);
    /* only the file that was found missing: a newer one committed since
     * (another request's refetch) stays */
    if (e && e->state == E_READY && e->gen == gen)
        drop(c, e);
    unlock(b);
}

/*
 * An entry found on disk by the loader: made ready unless md5 is there
 * already (a request stored or fills it meanwhile, and its file is the
 * newer) or its bucket is full (the loader makes no room: what requests
 * put in since the start stays). LOAD_ADDED, LOAD_PRESENT or LOAD_FULL.
 */
int fd_proxy_cache_index_load(fd_proxy_cache_t *c, const uint8_t md5[16],
                              uint64_t now, uint64_t expires, uint64_t size)
{
    bucket_t *b = bucket_of(c, md5);
    entry_t *e = NULL;
    int rc = LOAD_PRESENT;

    lock(b);
    if (find(b, md5) == NULL) {
        rc = LOAD_FULL;
        for (unsigned i = 0; i < WAYS && e == NULL; i++)
            if (b->e[i].state == E_FREE)
                e = &b->e[i];
    }
    if (e) {
        memcpy(e->md5, md5, 16);
        e->state = E_READY;
        e->fill_pid = 0; /* a free slot may keep a dead filler's */
        e->expires = expires;
        e->used = now;
        e->size = size;
        e->gen = __atomic_add_fetch(&c->head->gen, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->head->size, size, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->head->entries, 1, __ATOMIC_RELAXED);
        rc = LOAD_ADDED;
    }
    unlock(b);
    return rc;
}

/*
 * A file's expires (unix seconds) as the index keeps it (monotonic ms).
 * One already past stays past by as much, down to 0, so that stale
 * serving sees how stale it is; a century bounds both ways.
 */
uint64_t fd_proxy_cache_expires_msec(int64_t expires, int64_t now_sec,
                                     uint64_t now_msec)
{
    const int64_t century = FD_PROXY_CACHE_SEC_MAX;
    int64_t d;

    if (expires > now_sec + century)
        d = century;
    else if (expires < now_sec - century)
        d = -century;
    else
        d = expires - now_sec;
    if (d >= 0)
        return now_msec + (uint64_t)d * 1000;
    return (uint64_t)-d * 1000 < now_msec ? now_msec - (uint64_t)-d * 1000
                                          : 0;
}

/* 32 lowercase hex digits (a file's name, as fd_proxy_cache_file()
 * writes it) into md5: FD_OK, or FD_ERROR when s does not begin so. */
int fd_proxy_cache_hex(const char *s, uint8_t md5[16])
{
    for (unsigned i = 0; i < 32; i++) {
        int v = s[i] >= '0' && s[i] <= '9'   ? s[i] - '0'
                : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10
                                             : -1;
        if (v < 0)
            return FD_ERROR;
        if (i & 1)
            md5[i / 2] = (uint8_t)(md5[i / 2] | v);
        else
            md5[i / 2] = (uint8_t)(v << 4);
    }
    return FD_OK;
}

/* --- the cache manager --------------------------------------------------- */

/*
 * Remove entries unused for inactive, then, while above max_size, the
 * least recently used, oldest first.
 *
 * Each removal is an unlink() on the worker's loop, so one run removes
 * MANAGER_FILES at most and returns 1 when there may be more: the next
 * run is MANAGER_SLEEP_MS later (nginx's manager_files and
 * manager_sleep). The LRU's candidates are the MANAGER_FILES oldest
 * entries, found in one walk of the table. It used to take one clock tick
 * per walk, 64 walks a run: entries stored at distinct ticks went at 64 a
 * second, so a cache filling faster grew past max_size without bound, and
 * a run that was behind held the loop for 64 walks and 4,096 unlinks.
 */
#define MANAGER_FILES 100
#define MANAGER_SLEEP_MS 50

typedef struct {
    uint64_t used;
    size_t bucket;
    uint8_t md5[16];
} lru_cand_t;

/* h[0..n) is a max-heap on used: the newest of the oldest n at h[0] */
static void lru_sift(lru_cand_t *h, unsigned n, unsigned i)
{
    for (;;) {
        unsigned l = 2 * i + 1, m = i;
        lru_cand_t t;
        if (l < n && h[l].used > h[m].used)
            m = l;
        if (l + 1 < n && h[l + 1].used > h[m].used)
            m = l + 1;
        if (m == i)
            return;
        t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* the MANAGER_FILES least recently used ready entries, oldest first */
static unsigned lru_oldest(fd_proxy_cache_t *c, lru_cand_t *h)
{
    unsigned n = 0, i;

    for (size_t b = 0; b < c->nbuckets; b++) {
        bucket_t *bk = &c->table[b];
        lock(bk);
        for (unsigned k = 0; k < WAYS; k++) {
            const entry_t *e = &bk->e[k];
            if (e->state != E_READY || (n == MANAGER_FILES &&
                                        e->used >= h[0].used))
                continue;
            if (n < MANAGER_FILES) {
                h[n].used = e->used;
                h[n].bucket = b;
                memcpy(h[n].md5, e->md5, 16);
                /* a heap once full: built bottom-up then */
                if (++n == MANAGER_FILES)
                    for (i = n / 2; i-- > 0;)
                        lru_sift(h, n, i);
                continue;
            }
            h[0].used = e->used;
            h[0].bucket = b;
            memcpy(h[0].md5, e->md5, 16);
            lru_sift(h, n, 0);
        }
        unlock(bk);
    }
    if (n < MANAGER_FILES)
        for (i = n / 2; i-- > 0;)
            lru_sift(h, n, i);
    /* heap sort: the newest to the back */
    for (i = n; i > 1; i--) {
        lru_cand_t t = h[0];
        h[0] = h[i - 1];
        h[i - 1] = t;
        lru_sift(h, i - 1, 0);
    }
    return n;
}

static int over_max(const fd_proxy_cache_t *c)
{
    return c->max_size &&
           __atomic_load_n(&c->head->size, __ATOMIC_RELAXED) > c->max_size;
}

static void gone_unlink(fd_proxy_cache_t *c, uint8_t (*gone)[16],
                        unsigned *n)
{
    for (unsigned k = 0; k < *n; k++) {
        fd_proxy_cache_unlink(c, gone[k]);
        COUNT(c, evicted);
    }
    *n = 0;
}

static int manage(fd_proxy_cache_t *c, uint64_t now)
{
    uint64_t idle = now > c->inactive ? now - c->inactive : 0;
    uint8_t gone[64][16];
    lru_cand_t cand[MANAGER_FILES];
    unsigned ngone = 0, removed = 0, n, j;

    /* unused for inactive; workers that died while filling */
    for (size_t i = 0; i < c->nbuckets && removed < MANAGER_FILES; i++) {
        bucket_t *b = &c->table[i];
        lock(b);
        for (unsigned k = 0; k < WAYS; k++) {
            entry_t *e = &b->e[k];
            if (e->state == E_READY && e->used < idle &&
                removed < MANAGER_FILES) {
                memcpy(gone[ngone++], e->md5, 16);
                removed++;
                drop(c, e);
            } else if (e->state == E_FILLING && now > e->fill_until &&
                       now - e->fill_until > 60000) {
                drop(c, e);
            }
        }
        unlock(b);
        if (ngone > 64 - WAYS)
            gone_unlink(c, gone, &ngone);
    }
    gone_unlink(c, gone, &ngone);
    if (removed == MANAGER_FILES)
        return 1;
    if (!over_max(c))
        return 0;
    /* above max_size: the oldest, while still above (each one is looked
     * for again under its lock: a hit since the walk keeps it) */
    n = lru_oldest(c, cand);
    for (j = 0; j < n && removed < MANAGER_FILES && over_max(c); j++) {
        bucket_t *b = &c->table[cand[j].bucket];
        lock(b);
        for (unsigned k = 0; k < WAYS; k++) {
            entry_t *e = &b->e[k];
            if (e->state == E_READY && e->used == cand[j].used &&
                memcmp(e->md5, cand[j].md5, 16) == 0) {
                memcpy(gone[ngone++], e->md5, 16);
                removed++;
                drop(c, e);
                break;
            }
        }
        unlock(b);
        if (ngone == 64)
            gone_unlink(c, gone, &ngone);
    }
    gone_unlink(c, gone, &ngone);
    return over_max(c) && n == MANAGER_FILES;
}

static fd_api_timer_t *manager_timer;

static void manager_run(void *data)
{
    fd_proxy_cache_t *c;
    uint64_t now = fd_api_now_msec();
    int more = 0;

    (void)data;
    for (c = caches; c; c = c->next) {
        uint64_t at;
        at = __atomic_load_n(&c->head->manager_at, __ATOMIC_RELAXED);
        if (now >= at &&
            __atomic_compare_exchange_n(&c->head->manager_at, &at,
                                        now + MANAGER_MS, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED) &&
            manage(c, now)) {
            /* more to remove: this worker goes on soon */
            __atomic_store_n(&c->head->manager_at, now + MANAGER_SLEEP_MS,
                             __ATOMIC_RELAXED);
            more = 1;
        }
    }
    fd_api_timer_set(manager_timer, more ? MANAGER_SLEEP_MS : MANAGER_MS);
}

/* --- the loader ---------------------------------------------------------- */

/*
 * After a start the index is empty while the files are on disk: the
 * loader, on one worker at a time, walks path and its levels in slices
 * (LOADER_FILES names or LOADER_SLICE_MS, whichever first, then
 * LOADER_SLEEP_MS of the loop's other work) and indexes each whole file
 * from its header (fstat() and one pread()). Requests are served
 * meanwhile: an entry is a HIT once the loader has reached it, and one a
 * request stored first keeps its own (newer) file.
 *
 * What can never be served is removed: a file that is not a whole entry
 * (cut short by hand or a full disk, another format), one whose bucket is
 * full (the loader takes no room from entries requests put in), and a
 * temporary file whose writer is gone: its pid (NAME.PID.SEQ.tmp) is no
 * process, or it was not written for LOADER_TMP_SEC (the pid is another
 * process's now; a live writer writes as the body comes).
 *
 * The role is a lease on head->loader_at, claimed by a CAS as the
 * manager's and renewed each slice: when its worker dies or retires on
 * a reload mid-walk, another walks again from the start (indexing what is
 * there is a no-op). head->loaded stays with the zone, so a reload that
 * keeps the index does not walk again.
 */
#define LOADER_FILES 100
#define LOADER_SLICE_MS 5
#define LOADER_SLEEP_MS 10
#define LOADER_LEASE_MS 5000
#define LOADER_TMP_SEC 60
#define LOADER_LOG 10         /* removals logged one by one, then counted */

typedef struct {
    fd_proxy_cache_t *c;      /* the cache this worker loads, or NULL */
    DIR *dir[4];              /* path, then each level's directory */
    size_t len[4];            /* p's length at each depth */
    unsigned depth;
    char p[PATH_MAX];         /* the directory being read */
    uint64_t started, entries, bytes, removed, tmp, full, failed;
} loader_t;

static loader_t loader;
static fd_api_timer_t *loader_timer;

/* fd_api_now_msec() stands still within a slice */
static uint64_t loader_msec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void loader_close(loader_t *l)
{
    for (unsigned i = 0; i < NELEMS(l->dir); i++)
        if (l->dir[i]) {
            closedir(l->dir[i]);
            l->dir[i] = NULL;
        }
    l->c = NULL;
}

/* name (the file st was) removed from the directory being read, unless
 * it is another file now (a request stored the key again). */
static int loader_remove(loader_t *l, const char *name,
                         const struct stat *st, const char *why)
{
    int dfd = dirfd(l->dir[l->depth]);
    uint64_t n = l->removed + l->tmp + l->full;
    struct stat now;

    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == -1 ||
        now.st_ino != st->st_ino || now.st_dev != st->st_dev)
        return 0;
    if (unlinkat(dfd, name, 0) == -1) {
        /* a read-only cache fails for every file: a few lines, then the
         * count at the end */
        if (errno != ENOENT && l->failed++ < LOADER_LOG)
            fd_api_log(FD_API_LOG_WARN, errno,
                       "cache \"%s\": unlink(\"%s/%s\") failed",
                       l->c->name, l->p, name);
        return 0;
    }
    if (n < LOADER_LOG)
        fd_api_log(FD_API_LOG_NOTICE, 0,
                   "cache \"%s\": \"%s/%s\" %s: removed%s", l->c->name, l->p,
                   name, why,
                   n + 1 == LOADER_LOG ? " (more are counted at the end of "
                                         "the load)"
                                       : "");
    return 1;
}

/* MD5HEX.PID.SEQ.tmp (rest: ".PID.SEQ.tmp") */
static void loader_tmp(loader_t *l, const char *name, const char *rest)
{
    struct stat st;
    char *end;
    long pid;

    if (rest[0] != '.' || rest[1] < '0' || rest[1] > '9')
        return;
    pid = strtol(rest + 1, &end, 10);
    if (end[0] != '.' || end[1] < '0' || end[1] > '9')
        return;
    (void)strtoul(end + 1, &end, 10);
    if (strcmp(end, ".tmp") != 0 ||
        fstatat(dirfd(l->dir[l->depth]), name, &st, AT_SYMLINK_NOFOLLOW) ==
            -1 ||
        !S_ISREG(st.st_mode))
        return;
    /* EPERM: a live process, of another user */
    if (pid > 0 && pid <= INT_MAX &&
        !(kill((pid_t)pid, 0) == -1 && errno == ESRCH) &&
        st.st_mtime + LOADER_TMP_SEC >= fd_api_unix_sec())
        return;
    if (loader_remove(l, name, &st, "is a temporary file whose writer is "
                      "gone"))
        l->tmp++;
}

static void loader_file(loader_t *l, const char *name, uint64_t now)
{
    fd_proxy_cache_t *c = l->c;
    size_t n = strlen(name), dl, at = l->len[l->depth];
    char want[PATH_MAX];
    uint8_t md5[16];
    file_head_t fh;
    struct stat st;
    ssize_t got;
    int fd;

    if (n < 32 || fd_proxy_cache_hex(name, md5) != FD_OK)
        return; /* not the cache's */
    if (n > 32) {
        loader_tmp(l, name, name + 32);
        return;
    }
    /* not where its name puts it (levels were changed): not ours to
     * judge, and never found */
    if (fd_proxy_cache_file(want, sizeof(want), c->path, c->levels,
                            c->nlevels, md5, &dl) == 0 ||
        dl != at + 1 || memcmp(want, l->p, at) != 0)
        return;
    fd = openat(dirfd(l->dir[l->depth]), name,
                O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd == -1)
        return; /* gone meanwhile */
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
        close(fd);
        return;
    }
    got = pread(fd, &fh, sizeof(fh), 0);
    close(fd);
    if (got != (ssize_t)sizeof(fh) || fh.magic != FILE_MAGIC ||
        fh.body_len > (uint64_t)st.st_size ||
        (uint64_t)st.st_size != sizeof(fh) + fh.key_len + fh.fields_len +
                                    fh.body_len) {
        if (loader_remove(l, name, &st, "is not a whole entry"))
            l->removed++;
        return;
    }
    switch (fd_proxy_cache_index_load(
        c, md5, now,
        fd_proxy_cache_expires_msec(fh.expires, fd_api_unix_sec(), now),
        (uint64_t)st.st_size)) {
    case LOAD_ADDED:
        l->entries++;
        l->bytes += (uint64_t)st.st_size;
        break;
    case LOAD_FULL:
        /* never found without an entry: only its disk space is left */
        if (loader_remove(l, name, &st, "has no room in keys_zone"))
            l->full++;
        break;
    default:
        break;
    }
}

/* A level's directory (as many hex digits as the level has): entered. */
static void loader_enter(loader_t *l, const char *name)
{
    size_t n = strlen(name), at = l->len[l->depth];
    DIR *d;
    int fd;

    if (n != l->c->levels[l->depth] || at + 1 + n >= sizeof(l->p))
        return;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= '0' && name[i] <= '9') ||
              (name[i] >= 'a' && name[i] <= 'f')))
            return;
    fd = openat(dirfd(l->dir[l->depth]), name,
                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd == -1)
        return;
    if ((d = fdopendir(fd)) == NULL) {
        close(fd);
        return;
    }
    l->p[at] = '/';
    memcpy(l->p + at + 1, name, n + 1);
    l->depth++;
    l->len[l->depth] = at + 1 + n;
    l->dir[l->depth] = d;
}

/* One slice of the walk: 1 when it is over. */
static int loader_slice(loader_t *l, uint64_t now)
{
    uint64_t t0 = loader_msec();
    struct dirent *de;
    unsigned n = 0;

    while (n < LOADER_FILES) {
        errno = 0;
        if ((de = readdir(l->dir[l->depth])) == NULL) {
            if (errno)
                fd_api_log(FD_API_LOG_WARN, errno,
                           "cache \"%s\": readdir(\"%s\") failed",
                           l->c->name, l->p);
            closedir(l->dir[l->depth]);
            l->dir[l->depth] = NULL;
            if (l->depth == 0)
                return 1;
            l->depth--;
            l->p[l->len[l->depth]] = '\0';
            continue;
        }
        if (de->d_name[0] == '.')
            continue; /* ".", "..", and nothing the cache writes */
        n++;
        if (l->depth < l->c->nlevels)
            loader_enter(l, de->d_name);
        else
            loader_file(l, de->d_name, now);
        if (loader_msec() - t0 >= LOADER_SLICE_MS)
            break;
    }
    return 0;
}

static int loader_open(loader_t *l, fd_proxy_cache_t *c)
{
    memset(l, 0, sizeof(*l));
    l->c = c;
    l->started = loader_msec();
    l->len[0] = strlen(c->path);
    memcpy(l->p, c->path, l->len[0] + 1);
    if ((l->dir[0] = opendir(c->path)) == NULL) {
        fd_api_log(FD_API_LOG_WARN, errno,
                   "cache \"%s\": opendir(\"%s\") failed: the index "
                   "starts empty",
                   c->name, c->path);
        return FD_ERROR;
    }
    return FD_OK;
}

static void loader_done(loader_t *l)
{
    head_t *h = l->c->head;

    fd_api_log(FD_API_LOG_NOTICE, 0,
               "cache \"%s\": %" PRIu64 " entries (%" PRIu64
               " bytes) indexed from disk in %" PRIu64 " ms; "
               "removed: %" PRIu64 " not whole, %" PRIu64 " temporary, %" PRIu64
               " without room in keys_zone; %" PRIu64 " could not "
               "be removed",
               l->c->name, l->entries, l->bytes, loader_msec() - l->started,
               l->removed, l->tmp, l->full, l->failed);
    __atomic_store_n(&h->loaded, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&h->loader_at, 0, __ATOMIC_RELEASE);
    loader_close(l);
}

/* A cache not loaded whose loader's lease lapsed, claimed: NULL if none
 * (*pending: some are not loaded yet, another worker loads them). */
static fd_proxy_cache_t *loader_claim(uint64_t now, int *pending)
{
    fd_proxy_cache_t *c;

    *pending = 0;
    for (c = caches; c; c = c->next) {
        uint64_t at;
        if (__atomic_load_n(&c->head->loaded, __ATOMIC_ACQUIRE))
            continue;
        *pending = 1;
        at = __atomic_load_n(&c->head->loader_at, __ATOMIC_ACQUIRE);
        if (now < at ||
            !__atomic_compare_exchange_n(&c->head->loader_at, &at,
                                         now + LOADER_LEASE_MS, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue;
        if (__atomic_load_n(&c->head->loaded, __ATOMIC_ACQUIRE)) {
            /* its loader finished between the two loads */
            __atomic_store_n(&c->head->loader_at, 0, __ATOMIC_RELEASE);
            continue;
        }
        __atomic_store_n(&c->head->loader_pid, (uint32_t)getpid(),
                         __ATOMIC_RELEASE);
        return c;
    }
    return NULL;
}

static void loader_run(void *data)
{
    fd_api_timer_t *t = loader_timer;
    uint64_t now = fd_api_now_msec();
    fd_proxy_cache_t *c;
    head_t *h;
    int pending;

    (void)data;
    if (loader.c == NULL) {
        if ((c = loader_claim(now, &pending)) == NULL) {
            /* another loads: take over if it dies; none left: done */
            if (pending)
                fd_api_timer_set(t, MANAGER_MS);
            return;
        }
        if (loader_open(&loader, c) != FD_OK) {
            loader_done(&loader);
            fd_api_timer_set(t, 1);
            return;
        }
    }
    h = loader.c->head;
    if (__atomic_load_n(&h->loader_pid, __ATOMIC_ACQUIRE) !=
            (uint32_t)getpid() ||
        __atomic_load_n(&h->loaded, __ATOMIC_ACQUIRE)) {
        /* a slice so late that the lease lapsed, and another took it */
        loader_close(&loader);
        fd_api_timer_set(t, MANAGER_MS);
        return;
    }
    __atomic_store_n(&h->loader_at, now + LOADER_LEASE_MS, __ATOMIC_RELEASE);
    if (loader_slice(&loader, now)) {
        loader_done(&loader);
        fd_api_timer_set(t, 1); /* the next cache's turn */
        return;
    }
    fd_api_timer_set(t, LOADER_SLEEP_MS);
}

/* A worker that exits mid-walk hands the role on at once. */
static void loader_exit(void)
{
    uint32_t me = (uint32_t)getpid();

    if (loader.c) {
        head_t *h = loader.c->head;
        if (__atomic_compare_exchange_n(&h->loader_pid, &me, 0, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            __atomic_store_n(&h->loader_at, 0, __ATOMIC_RELEASE);
        fd_api_log(FD_API_LOG_NOTICE, 0,
                   "cache \"%s\": the worker exits with "
                   "%" PRIu64 " entries indexed from disk: another walks "
                   "again",
                   loader.c->name, loader.entries);
        loader_close(&loader);
    }
    fd_api_timer_cancel(loader_timer);
    loader_timer = NULL;
}

/* --- configuration ------------------------------------------------------- */

#define COFF(f) offsetof(fd_proxy_cache_t, f)

static const fd_api_key_t cache_keys[] = {
    {.name = "path", .type = FD_API_STRING, .offset = COFF(path),
     .doc = "the directory of the cache's files (made if missing, and "
            "again if removed while running); the workers' user must be "
            "able to write it"},
    {.name = "levels", .type = FD_API_STRING, .offset = COFF(levels_text),
     .doc = "subdirectories by the end of the key's MD5, as nginx: up to 3 "
            "levels of 1 or 2 hex digits, e.g. 1:2 (path/c/29/...); "
            "default: none (every file in path)"},
    {.name = "keys_zone", .type = FD_API_SIZE, .offset = COFF(keys_zone),
     .def = "1m",
     .doc = "the shared index, 64k to 4g: 520 bytes per 8 entries (1m "
            "holds about 16,000 entries); a full bucket gives its least "
            "recently used entry's place (and file) to a new one"},
    {.name = "max_size", .type = FD_API_SIZE, .offset = COFF(max_size),
     .def = "0",
     .doc = "above this many bytes of files the cache manager removes the "
            "least recently used entries (checked each second, 100 files "
            "a run and a run every 50 ms while above, as nginx's "
            "manager_files and manager_sleep; 0: no limit)"},
    {.name = "inactive", .type = FD_API_MSEC, .offset = COFF(inactive),
     .def = "10m",
     .doc = "an entry not used for this long (1s to 365d) is removed, "
            "fresh or not"},
    {NULL, 0, 0, NULL, NULL}};

static int cache_init(const char *name, void *conf, unsigned index)
{
    fd_proxy_cache_t *c = conf;
    size_t n, size;
    char *base;

    if (c->path == NULL || c->path[0] != '/') {
        fd_api_conf_error("[cache %s] needs \"path\", an absolute "
                          "directory", name);
        return FD_ERROR;
    }
    n = strlen(c->path);
    while (n > 1 && c->path[n - 1] == '/')
        c->path[--n] = '\0';
    if (n + 64 > PATH_MAX) {
        fd_api_conf_error("[cache %s]: path too long", name);
        return FD_ERROR;
    }
    if (fd_proxy_cache_levels(c->levels_text, c->levels, &c->nlevels) !=
        FD_OK) {
        fd_api_conf_at_key(c, "levels");
        fd_api_conf_error("[cache %s]: bad levels \"%s\" (up to 3 of 1 or "
                          "2, e.g. 1:2)", name, c->levels_text);
        return FD_ERROR;
    }
    if (c->keys_zone < 65536 || c->keys_zone > (size_t)1 << 32) {
        fd_api_conf_at_key(c, "keys_zone");
        fd_api_conf_error("[cache %s]: keys_zone must be 64k to 4g", name);
        return FD_ERROR;
    }
    if (c->inactive < 1000 || c->inactive > (uint64_t)365 * 86400 * 1000) {
        fd_api_conf_at_key(c, "inactive");
        fd_api_conf_error("[cache %s]: inactive must be 1s to 365d", name);
        return FD_ERROR;
    }
    /* made now (0700), and those made are the workers' user's once the
     * whole file is read */
    if (fd_api_conf_worker_dir(c->path) != FD_OK)
        return FD_ERROR;
    c->name = fd_api_conf_alloc(strlen(name) + 1);
    c->index = index < FD_PROXY_CACHE_MAX ? index : FD_PROXY_CACHE_MAX - 1;
    c->nbuckets = c->keys_zone / sizeof(bucket_t);
    size = sizeof(head_t) + c->nbuckets * sizeof(bucket_t);
    base = fd_api_shm_zone(FD_API_SELF, name, size, NULL);
    if (c->name == NULL || base == NULL) {
        fd_api_conf_error("[cache %s]: out of memory (the %zu byte index)",
                          name, size);
        return FD_ERROR;
    }
    memcpy(c->name, name, strlen(name) + 1);
    c->head = (head_t *)base;
    c->table = (bucket_t *)(base + sizeof(head_t));
    return FD_OK;
}

const fd_api_section_t fd_proxy_cache_section = {
    .type = "cache",
    .keys = cache_keys,
    .conf_size = sizeof(fd_proxy_cache_t),
    .name_max = sizeof(((cache_shm_t *)0)->name),
    .init = cache_init,
};

/* --- status -------------------------------------------------------------- */

static void cache_add(const char *name, void *conf, void *data)
{
    fd_proxy_cache_t *c = conf, ***tail = data;

    (void)name;
    c->next = NULL;
    **tail = c;
    *tail = &c->next;
}

int fd_proxy_cache_init_worker(void)
{
    fd_proxy_cache_t *c, **tail = &caches;

    caches = NULL;
    fd_api_section_each("cache", cache_add, &tail);
    fd_proxy_cache_area = fd_api_status_area(FD_API_SELF);
    if (fd_proxy_cache_area) {
        memset(fd_proxy_cache_area, 0,
               FD_PROXY_CACHE_MAX * sizeof(*fd_proxy_cache_area));
        for (c = caches; c; c = c->next)
            if (fd_proxy_cache_area[c->index].name[0] == '\0')
                snprintf(fd_proxy_cache_area[c->index].name,
                         sizeof(fd_proxy_cache_area->name), "%s", c->name);
    }
    if (caches == NULL)
        return FD_OK;
    manager_timer = fd_api_timer_new(manager_run, NULL);
    loader_timer = fd_api_timer_new(loader_run, NULL);
    if (manager_timer == NULL || loader_timer == NULL) {
        fd_api_log(FD_API_LOG_ERR, 0, "proxy_cache: out of memory");
        return FD_ERROR;
    }
    fd_api_timer_set(manager_timer, MANAGER_MS);
    fd_api_timer_set(loader_timer, 1);
    return FD_OK;
}

void fd_proxy_cache_exit_worker(void)
{
    fd_api_timer_cancel(manager_timer);
    manager_timer = NULL;
    loader_exit();
    fd_proxy_cache_open_drop();
}

#ifdef FD_FUZZ
void fd_proxy_cache_fuzz_reset(void)
{
    fd_proxy_cache_t *c;

    for (c = caches; c; c = c->next) {
        if (c->table == NULL)
            continue;
        memset(c->table, 0, c->nbuckets * sizeof(bucket_t));
        c->head->size = 0;
        c->head->entries = 0;
    }
    fd_proxy_cache_open_drop();
}
#endif

_Static_assert(FD_PROXY_CACHE_MAX * sizeof(cache_shm_t) <=
                   FD_PROXY_CACHE_SHM_SIZE,
               "the caches' part of the proxy's stats slot");

/* a slot's counters, each a metric labelled with its cache */
static const struct {
    const char *name;
    const char *help;
    size_t off;
} counters[] = {
    {"proxy_cache_hits", "Responses served from the cache.",
     offsetof(cache_shm_t, hit)},
    {"proxy_cache_misses", "Cacheable requests not found in the cache.",
     offsetof(cache_shm_t, miss)},
    {"proxy_cache_expired", "Requests whose entry was stale.",
     offsetof(cache_shm_t, expired)},
    {"proxy_cache_bypass", "Requests proxy_cache_bypass sent upstream.",
     offsetof(cache_shm_t, bypass)},
    {"proxy_cache_stored", "Responses written to the cache.",
     offsetof(cache_shm_t, stored)},
    {"proxy_cache_store_failed",
     "Responses not stored for a write error or a wrong length.",
     offsetof(cache_shm_t, store_failed)},
    {"proxy_cache_evicted", "Entries removed for inactive, max_size or room.",
     offsetof(cache_shm_t, evicted)},
    {"proxy_cache_stale",
     "Stale entries served for an upstream's failure "
     "(proxy_cache_use_stale).",
     offsetof(cache_shm_t, stale)},
    {"proxy_cache_updating",
     "Stale entries served while another request updated them.",
     offsetof(cache_shm_t, updating)},
    {"proxy_cache_revalidated",
     "Expired entries the upstream confirmed with 304 "
     "(proxy_cache_revalidate).",
     offsetof(cache_shm_t, revalidated)}};

void fd_proxy_cache_status(fd_api_status_t *st, const void *a, unsigned worker)
{
    const cache_shm_t *e = a;
    char labels[64];
    unsigned i, k;

    (void)worker;
    for (i = 0; e && i < FD_PROXY_CACHE_MAX; i++, e++) {
        if (e->name[0] == '\0')
            continue;
        snprintf(labels, sizeof(labels), "cache=\"%s\"", e->name);
        for (k = 0; k < NELEMS(counters); k++)
            fd_api_status_counter(
                st, counters[k].name, counters[k].help, labels,
                *(const uint64_t *)(const void *)((const char *)e +
                                                  counters[k].off));
    }
}

/* The indexes are every worker's: their figures, labelled as the slots'
 * counters (the name cut as there). */
void fd_proxy_cache_status_shared(fd_api_status_t *st)
{
    fd_proxy_cache_t *c;
    char name[sizeof(((cache_shm_t *)0)->name)], labels[64];

    for (c = caches; c; c = c->next) {
        if (c->head == NULL)
            continue;
        snprintf(name, sizeof(name), "%s", c->name);
        snprintf(labels, sizeof(labels), "cache=\"%s\"", name);
        fd_api_status_gauge(st, "proxy_cache_entries",
                            "Entries in the index.", labels,
                            __atomic_load_n(&c->head->entries,
                                            __ATOMIC_RELAXED));
        fd_api_status_gauge(st, "proxy_cache_bytes",
                            "Bytes of the entries' files.", labels,
                            __atomic_load_n(&c->head->size,
                                            __ATOMIC_RELAXED));
        fd_api_status_gauge(st, "proxy_cache_loaded",
                            "1 once the files on disk at the start are "
                            "indexed, 0 while the loader reads them.",
                            labels,
                            __atomic_load_n(&c->head->loaded,
                                            __ATOMIC_RELAXED));
    }
}

void fd_proxy_cache_retire(void *retired, const void *a)
{
    _Static_assert(sizeof(cache_shm_t) % 8 == 0 &&
                       sizeof(((cache_shm_t *)0)->name) % 8 == 0,
                   "a name, then counters alone (fd_api_status_fold)");
    fd_api_status_fold(retired, a, sizeof(cache_shm_t), FD_PROXY_CACHE_MAX,
                       sizeof(((cache_shm_t *)0)->name));
}
