/*
 * limit_conn: requests in progress per key, shared by every worker, as
 * nginx's limit_conn_zone and limit_conn.
 *
 *   [limit_conn addr]
 *   key = $binary_remote_addr
 *   size = 1m
 *
 *   [location /download/]
 *   limit_conn = addr 10
 *
 * A request counts from its access phase to its end, as nginx counts: an
 * HTTP/1.1 connection counts while it has a request in progress (an idle
 * keep-alive connection does not), every HTTP/2 stream counts on its own.
 * Past the number the request gets limit_conn_status (503). A location
 * may name several zones (one line each); a request is counted once per
 * zone, whatever locations a rewrite moves it to.
 *
 * The counts live in a table every process maps (mapped by the master at
 * load; a reload with the same name and size keeps it and its counts), of
 * 4-entry buckets each behind a spin lock held for a few loads and
 * stores. An entry is free again when its count falls to 0. A key whose
 * bucket is full of keys in progress is refused (the zone is too small:
 * logged), as nginx refuses when its zone is exhausted.
 *
 * A count is given back when the request ends (the log hook), or when
 * its memory goes if it never ended (a client that left mid-handler: a
 * cleanup of the request's pool), once. A worker that crashes cannot give
 * its counts back: those keys stay counted until a reload with another
 * size starts a new table (as in nginx).
 */
#include <stdio.h>
#include <string.h>

#include "fastd.h"

#define ZONE_MAX 16
#define ZONE_NAME_MAX 32
#define KEY_MAX 42            /* key bytes kept; longer ones: the hash */
#define WAYS 4
#define LIMITS_MAX 4          /* limit_conn lines of one location */

typedef struct {
    uint64_t hash;
    uint32_t count;           /* requests in progress; 0: free */
    uint16_t len;
    char key[KEY_MAX];
} entry_t;

typedef struct {
    uint32_t lock;
    uint32_t pad;
    entry_t e[WAYS];
} bucket_t;

_Static_assert(sizeof(bucket_t) == 232, "the reference says 232 bytes");

typedef struct {
    uint64_t seed[2];
    uint64_t pad[6];
    bucket_t buckets[];
} table_t;

/* [limit_conn NAME] */
typedef struct {
    const char *key;
    uint64_t size;
    const char *name;
    unsigned index;           /* in the status area */
    const fd_api_script_t *script;
    bucket_t *table;
    size_t nbuckets;
    uint64_t seed[2];
} zone_t;

typedef struct {
    zone_t *zone;
    uint32_t max;
} limit_t;

/* a location's limit_conn lines */
typedef struct {
    const char **specs;       /* its lines, off included */
    unsigned nspecs, cap;
    int64_t status;
    int dry_run;
    limit_t limit[LIMITS_MAX];
    unsigned n;
} limit_loc_t;

/* what a request holds */
typedef struct held_s {
    bucket_t *b;
    entry_t *e;
    uint64_t hash;
    struct held_s *next;
} held_t;

typedef struct {
    held_t *held;
    const zone_t *counted[LIMITS_MAX * 2]; /* zones it was counted in */
    unsigned ncounted;
    const char *status;       /* $limit_conn_status */
} req_t;

typedef struct {
    char name[ZONE_NAME_MAX];
    uint64_t passed, rejected, dry_run, full;
} zone_shm_t;

static zone_shm_t *area;

#define COUNT(z, f) \
    (area ? (void)__atomic_add_fetch(&area[(z)->index].f, 1, \
                                     __ATOMIC_RELAXED) : (void)0)

/* --- configuration ------------------------------------------------------- */

static const fd_api_key_t zone_keys[] = {
    {.name = "key", .type = FD_API_STRING, .offset = offsetof(zone_t, key),
     .def = "$binary_remote_addr",
     .doc = "what the requests in progress are counted by: text and "
            "$variables; a request whose key is empty is not counted. The "
            "default is the client's address as 4 or 16 bytes"},
    {.name = "size", .type = FD_API_SIZE, .offset = offsetof(zone_t, size),
     .def = "1m",
     .doc = "the table shared by every worker: 232 bytes per 4 keys in "
            "progress (1m holds about 18,000); a key whose bucket is full "
            "is refused"},
    {.name = NULL}};

static int zone_init(const char *name, void *conf, unsigned index)
{
    zone_t *z = conf;
    table_t *t;
    int fresh;

    if (fd_api_conf_bounds(z, "size", (int64_t)z->size, 65536, 1 << 30,
                           FD_API_SIZE) != FD_OK)
        return FD_ERROR;
    fd_api_conf_at_key(z, "key");
    z->script = fd_api_script_compile(z->key, strlen(z->key), 0, "key");
    if (z->script == NULL)
        return FD_ERROR;
    z->name = name;
    z->index = index;
    z->nbuckets = z->size / sizeof(bucket_t);
    /* kept by a reload with the same name and size: the requests in
     * progress across it are still counted, and given back */
    t = fd_api_shm_zone(FD_API_SELF, name,
                        sizeof(table_t) + z->nbuckets * sizeof(bucket_t),
                        &fresh);
    if (t == NULL) {
        fd_api_conf_error("[limit_conn %s]: out of memory (the %zu byte "
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
    .type = "limit_conn",
    .keys = zone_keys,
    .conf_size = sizeof(zone_t),
    .name_max = ZONE_NAME_MAX,
    .max = ZONE_MAX,
    .init = zone_init,
};

#define LOFF(f) offsetof(limit_loc_t, f)

static const fd_api_key_t limit_keys[] = {
    {.name = "limit_conn", .type = FD_API_LIST_REPLACE,
     .doc = "NAME NUMBER, repeatable (one line a zone): at most NUMBER "
            "requests of a key of [limit_conn NAME] in progress at once "
            "(HTTP/1.1 connections with a request, HTTP/2 streams); off: "
            "none. Example: limit_conn = addr 10"},
    {.name = "limit_conn_status", .type = FD_API_INT, .offset = LOFF(status),
     .def = "503", .doc = "the status of a request over the number"},
    {.name = "limit_conn_dry_run", .type = FD_API_FLAG,
     .offset = LOFF(dry_run), .def = "off",
     .doc = "on: count and log what would be refused, but let every "
            "request through"},
    {.name = NULL}};

/* a limit_conn line, checked once the sections are known (init_conf) */
static int limit_set(void *conf, const char *key, const char *value, int own)
{
    limit_loc_t *lc = conf;
    size_t n = strlen(value) + 1;
    const char **specs = lc->specs;
    char *v;

    (void)key;
    (void)own;
    if (lc->nspecs == lc->cap) {
        lc->cap = lc->cap ? lc->cap * 2 : 4;
        specs = fd_api_conf_alloc(lc->cap * sizeof(*specs));
        if (specs && lc->nspecs)
            memcpy(specs, lc->specs, lc->nspecs * sizeof(*specs));
    }
    if (specs == NULL || (v = fd_api_conf_alloc(n)) == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    memcpy(v, value, n);
    lc->specs = specs;
    lc->specs[lc->nspecs++] = v;
    return FD_OK;
}

static int limit_init_conf(void *conf)
{
    limit_loc_t *lc = conf;
    unsigned i, k;

    if (fd_api_conf_bounds(lc, "limit_conn_status", lc->status, 400, 599,
                           0) != FD_OK)
        return FD_ERROR;
    for (i = 0; i < lc->nspecs; i++) {
        char name[ZONE_NAME_MAX + 1], extra;
        long long max;
        zone_t *z;

        if (strcmp(lc->specs[i], "off") == 0) {
            lc->n = 0;
            continue;
        }
        fd_api_conf_at_key(lc, "limit_conn");
        if (sscanf(lc->specs[i], "%32s %lld %c", name, &max, &extra) != 2 ||
            max < 1 || max > 1000000) {
            fd_api_conf_error("limit_conn needs NAME NUMBER (1 to 1000000) "
                              "or off, not \"%s\"", lc->specs[i]);
            return FD_ERROR;
        }
        if ((z = fd_api_section("limit_conn", name)) == NULL) {
            fd_api_conf_error("unknown limit_conn \"%s\" (no [limit_conn "
                              "%s] section)", name, name);
            return FD_ERROR;
        }
        for (k = 0; k < lc->n; k++)
            if (lc->limit[k].zone == z) {
                fd_api_conf_error("limit_conn \"%s\" twice in one location",
                                  name);
                return FD_ERROR;
            }
        if (lc->n == LIMITS_MAX) {
            fd_api_conf_error("more than %d limit_conn lines in one "
                              "location", LIMITS_MAX);
            return FD_ERROR;
        }
        lc->limit[lc->n].zone = z;
        lc->limit[lc->n].max = (uint32_t)max;
        lc->n++;
    }
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
    fd_api_section_each("limit_conn", zone_name, NULL);
    return FD_OK;
}

/* --- the table ----------------------------------------------------------- */

enum { TAKEN, OVER, FULL };

/* One more request of key k: TAKEN (*held the entry), OVER (max in
 * progress already), FULL (its bucket has no room). */
static int take(const zone_t *z, uint32_t max, const char *k, size_t n,
                held_t *held)
{
    uint64_t h = fd_api_siphash(z->seed, k, n);
    bucket_t *b = &z->table[(size_t)(((h >> 32) * (uint64_t)z->nbuckets) >>
                                     32)];
    size_t kept = n < KEY_MAX ? n : KEY_MAX;
    uint16_t len = n < 0xffff ? (uint16_t)n : 0xffff;
    entry_t *e = NULL, *free_e = NULL;
    unsigned i;
    int rc = TAKEN;

    fd_api_shm_lock(&b->lock);
    for (i = 0; i < WAYS; i++) {
        entry_t *x = &b->e[i];
        if (x->count == 0) {
            if (free_e == NULL)
                free_e = x;
            continue;
        }
        if (x->hash == h && x->len == len && memcmp(x->key, k, kept) == 0) {
            e = x;
            break;
        }
    }
    if (e == NULL && (e = free_e) != NULL) {
        e->hash = h;
        e->len = len;
        memcpy(e->key, k, kept);
    }
    if (e == NULL)
        rc = FULL;
    else if (e->count >= max)
        rc = OVER;
    else
        e->count++;
    fd_api_shm_unlock(&b->lock);
    held->b = b;
    held->e = e;
    held->hash = h;
    return rc;
}

static void give_back(held_t *held)
{
    fd_api_shm_lock(&held->b->lock);
    /* the entry is still the key's: it is not free while counted */
    if (held->e->hash == held->hash && held->e->count)
        held->e->count--;
    fd_api_shm_unlock(&held->b->lock);
}

static void release_all(req_t *x)
{
    held_t *h;

    for (h = x->held; h; h = h->next)
        give_back(h);
    x->held = NULL;
}

/* the request's memory goes: what it still holds (it never ended) */
static void req_cleanup(void *data)
{
    release_all(data);
}

/* --- the access phase, the end ------------------------------------------- */

static int counted(const req_t *x, const zone_t *z)
{
    unsigned i;

    for (i = 0; i < x->ncounted; i++)
        if (x->counted[i] == z)
            return 1;
    return 0;
}

/* r's state, made once; NULL: out of memory */
static req_t *req_of(fd_request_t *r)
{
    req_t *x = fd_req_get_ctx_of(r, FD_API_SELF);

    if (x)
        return x;
    if ((x = fd_req_alloc(r, sizeof(*x))) == NULL)
        return NULL;
    memset(x, 0, sizeof(*x));
    if (fd_req_cleanup(r, req_cleanup, x) != FD_OK ||
        fd_req_set_ctx_of(r, FD_API_SELF, x) != FD_OK)
        return NULL;
    return x;
}

static int limit_access(fd_request_t *r)
{
    const limit_loc_t *lc = fd_req_conf_of(r, FD_API_SELF);
    char kb[FD_API_VAR_TMP];
    req_t *x;
    unsigned i;

    if ((x = req_of(r)) == NULL)
        return 500;
    for (i = 0; i < lc->n; i++) {
        const zone_t *z = lc->limit[i].zone;
        fd_str_t key;
        held_t *h;
        int rc;

        if (counted(x, z) ||
            x->ncounted == sizeof(x->counted) / sizeof(x->counted[0]))
            continue; /* once a zone, whatever location it moved to */
        x->counted[x->ncounted++] = z;
        if (fd_req_script_eval(r, z->script, NULL, kb, &key) != FD_OK)
            return 500;
        if (key.len == 0)
            continue; /* nothing to count by */
        if ((h = fd_req_alloc(r, sizeof(*h))) == NULL)
            return 500;
        rc = take(z, lc->limit[i].max, key.data, key.len, h);
        if (rc == TAKEN) {
            h->next = x->held;
            x->held = h;
            COUNT(z, passed);
            x->status = "PASSED";
            continue;
        }
        if (rc == FULL) {
            COUNT(z, full);
            fd_api_log(FD_API_LOG_ERR, 0, "limit_conn zone \"%s\" is full "
                       "(its bucket of this key has %d keys in progress): "
                       "make size larger", z->name, WAYS);
        }
        if (lc->dry_run) {
            COUNT(z, dry_run);
            x->status = "REJECTED_DRY_RUN";
            fd_api_log(FD_API_LOG_WARN, 0, "limiting connections, dry run, "
                       "by zone \"%s\"", z->name);
            continue;
        }
        COUNT(z, rejected);
        x->status = "REJECTED";
        fd_api_log(FD_API_LOG_WARN, 0, "limiting connections by zone "
                   "\"%s\"", z->name);
        release_all(x); /* what the zones before took */
        fd_resp_refused(r);
        return (int)lc->status;
    }
    return FD_OK;
}

/* the request ended: its counts go back now, not when its memory goes */
static void limit_log(fd_request_t *r)
{
    req_t *x = fd_req_get_ctx_of(r, FD_API_SELF);

    if (x)
        release_all(x);
}

static int limit_active(const void *conf)
{
    const limit_loc_t *lc = conf;

    return lc->n > 0;
}

static fd_str_t v_status(fd_request_t *r, char *tmp)
{
    const req_t *x = fd_req_get_ctx_of(r, FD_API_SELF);

    (void)tmp;
    if (x == NULL || x->status == NULL)
        return (fd_str_t){0, NULL};
    return (fd_str_t){strlen(x->status), x->status};
}

static const fd_api_var_t limit_vars[] = {
    {.name = "limit_conn_status", .get = v_status},
    {.name = NULL}};

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
        fd_api_status_counter(st, "limit_conn_passed", "Requests counted "
                              "in progress within the number.", labels,
                              e->passed);
        fd_api_status_counter(st, "limit_conn_rejected", "Requests refused "
                              "over the number.", labels, e->rejected);
        fd_api_status_counter(st, "limit_conn_dry_run", "Requests a dry "
                              "run would have refused.", labels, e->dry_run);
        fd_api_status_counter(st, "limit_conn_full", "Requests whose key "
                              "found no room in the zone.", labels, e->full);
    }
}

static void limit_retire(void *retired, const void *a)
{
    fd_api_status_fold(retired, a, sizeof(zone_shm_t), ZONE_MAX,
                       ZONE_NAME_MAX);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "limit_conn",
    .keys = limit_keys,
    .conf_size = sizeof(limit_loc_t),
    .init_conf = limit_init_conf,
    .init_worker = limit_init_worker,
    .set = limit_set,
    .access = limit_access,
    .active = limit_active,
    .log = limit_log,
    .vars = limit_vars,
    .shm_size = ZONE_MAX * sizeof(zone_shm_t),
    .status = limit_status,
    .retire = limit_retire,
    .section = &zone_section,
};
