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
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_status.h"
#include "fd_var.h"

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
    char *key;
    int key_line;
    size_t size;
    char *name;
    unsigned index;           /* in the status area */
    fd_var_script_t script;
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
    fd_conf_list_t specs;
    fd_int_t status;
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

fd_module_t fd_limit_conn_module;

static zone_shm_t *area;

#define COUNT(z, f) \
    (area ? (void)__atomic_add_fetch(&area[(z)->index].f, 1, \
                                     __ATOMIC_RELAXED) : (void)0)

/* --- configuration ------------------------------------------------------- */

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
     .doc = "what the requests in progress are counted by: text and "
            "$variables; a request whose key is empty is not counted. The "
            "default is the client's address as 4 or 16 bytes"},
    {.name = "size", .type = FD_CONF_SIZE, .offset = offsetof(zone_t, size),
     .def = "1m", .min = 65536, .max = 1 << 30,
     .doc = "the table shared by every worker: 232 bytes per 4 keys in "
            "progress (1m holds about 18,000); a key whose bucket is full "
            "is refused"},
    FD_CONF_END};

static int zone_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    zone_t *z = conf;
    table_t *t;
    int fresh;

    if (fd_cycle_section_name(cf, "limit_conn", name, ZONE_NAME_MAX) !=
        FD_OK)
        return FD_ERROR;
    if (z->key_line)
        cf->line = z->key_line;
    if (fd_var_compile(cf, &z->script, z->key, strlen(z->key), 0, "key") !=
        FD_OK)
        return FD_ERROR;
    z->name = fd_pstrdup(cf->pool, name, strlen(name));
    z->nbuckets = z->size / sizeof(bucket_t);
    /* kept by a reload with the same name and size: the requests in
     * progress across it are still counted, and given back */
    t = fd_shm_zone("limit_conn", name,
                    sizeof(table_t) + z->nbuckets * sizeof(bucket_t), &fresh);
    if (z->name == NULL || t == NULL)
        return fd_conf_error(cf, "[limit_conn %s]: out of memory (the %zu "
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

#define LOFF(f) offsetof(limit_loc_t, f)

static const fd_directive_t limit_directives[] = {
    {.name = "limit_conn", .type = FD_CONF_LIST, .offset = LOFF(specs),
     .replace = 1,
     .doc = "NAME NUMBER, repeatable (one line a zone): at most NUMBER "
            "requests of a key of [limit_conn NAME] in progress at once "
            "(HTTP/1.1 connections with a request, HTTP/2 streams); off: "
            "none. Example: limit_conn = addr 10"},
    {.name = "limit_conn_status", .type = FD_CONF_INT, .offset = LOFF(status),
     .def = "503", .min = 400, .max = 599,
     .doc = "the status of a request over the number"},
    {.name = "limit_conn_dry_run", .type = FD_CONF_FLAG,
     .offset = LOFF(dry_run), .def = "off",
     .doc = "on: count and log what would be refused, but let every "
            "request through"},
    FD_CONF_END};

static int limit_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    limit_loc_t *lc = conf;
    unsigned i, k;

    (void)loc;
    for (i = 0; i < lc->specs.n; i++) {
        char name[ZONE_NAME_MAX + 1], extra;
        long long max;
        zone_t *z;

        if (strcmp(lc->specs.items[i], "off") == 0) {
            lc->n = 0;
            continue;
        }
        fd_conf_at_key(cf, lc, "limit_conn");
        if (sscanf(lc->specs.items[i], "%32s %lld %c", name, &max, &extra) !=
                2 || max < 1 || max > 1000000)
            return fd_conf_error(cf, "limit_conn needs NAME NUMBER (1 to "
                                 "1000000) or off, not \"%s\"",
                                 lc->specs.items[i]);
        if ((z = fd_cycle_section(cf->cycle, "limit_conn", name)) == NULL)
            return fd_conf_error(cf, "unknown limit_conn \"%s\" (no "
                                 "[limit_conn %s] section)", name, name);
        for (k = 0; k < lc->n; k++)
            if (lc->limit[k].zone == z)
                return fd_conf_error(cf, "limit_conn \"%s\" twice in one "
                                     "location", name);
        if (lc->n == LIMITS_MAX)
            return fd_conf_error(cf, "more than %d limit_conn lines in one "
                                 "location", LIMITS_MAX);
        lc->limit[lc->n].zone = z;
        lc->limit[lc->n].max = (uint32_t)max;
        lc->n++;
    }
    return FD_OK;
}

static int limit_init_cycle(fd_conf_t *cf, fd_cycle_t *cycle)
{
    return fd_cycle_number_sections(cf, cycle, &fd_limit_conn_module,
                                    ZONE_MAX, offsetof(zone_t, index));
}

static int limit_init_worker(fd_worker_t *w)
{
    fd_conf_section_t *s;

    area = fd_stats ? fd_stats_area(fd_stats, &fd_limit_conn_module) : NULL;
    if (area == NULL)
        return FD_OK;
    memset(area, 0, ZONE_MAX * sizeof(*area));
    for (s = w->cycle->sections; s; s = s->next) {
        zone_t *z = s->conf;
        if (s->module == &fd_limit_conn_module)
            snprintf(area[z->index].name, ZONE_NAME_MAX, "%s", z->name);
    }
    return FD_OK;
}

/* --- the table ----------------------------------------------------------- */

enum { TAKEN, OVER, FULL };

/* One more request of key k: TAKEN (*held the entry), OVER (max in
 * progress already), FULL (its bucket has no room). */
static int take(const zone_t *z, uint32_t max, const char *k, size_t n,
                held_t *held)
{
    uint64_t h = fd_siphash(z->seed, k, n);
    bucket_t *b = &z->table[(size_t)(((h >> 32) * (uint64_t)z->nbuckets) >>
                                     32)];
    size_t kept = n < KEY_MAX ? n : KEY_MAX;
    uint16_t len = n < 0xffff ? (uint16_t)n : 0xffff;
    entry_t *e = NULL, *free_e = NULL;
    unsigned i;
    int rc = TAKEN;

    fd_shm_lock(&b->lock);
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
    fd_shm_unlock(&b->lock);
    held->b = b;
    held->e = e;
    held->hash = h;
    return rc;
}

static void give_back(held_t *held)
{
    fd_shm_lock(&held->b->lock);
    /* the entry is still the key's: it is not free while counted */
    if (held->e->hash == held->hash && held->e->count)
        held->e->count--;
    fd_shm_unlock(&held->b->lock);
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

static int limit_access(fd_request_t *r)
{
    limit_loc_t *lc = fd_loc_conf(r->loc, &fd_limit_conn_module);
    void **slot = fd_request_ctx(r, &fd_limit_conn_module);
    char kb[512];
    req_t *x;
    unsigned i;

    if (slot == NULL)
        return 500;
    if ((x = *slot) == NULL) {
        if ((x = fd_pcalloc(r->pool, sizeof(*x))) == NULL ||
            fd_pool_cleanup_add(r->pool, req_cleanup, x) == NULL)
            return 500;
        *slot = x;
    }
    for (i = 0; i < lc->n; i++) {
        const zone_t *z = lc->limit[i].zone;
        fd_sbuf_t sb;
        fd_str_t key;
        held_t *h;
        int rc;

        if (counted(x, z) || x->ncounted == fd_nelems(x->counted))
            continue; /* once a zone, whatever location it moved to */
        x->counted[x->ncounted++] = z;
        if (z->script.n == 1 && z->script.ops[0].kind == FD_VAR_OP_VAR) {
            key = fd_var_value(r, &z->script.ops[0], NULL, kb);
        } else {
            if (fd_sbuf_init(&sb, r->pool, 256) != FD_OK)
                return 500;
            fd_var_eval(r, &z->script, NULL, FD_VAR_ESC_NONE, &sb);
            if (fd_sbuf_failed(&sb))
                return 500;
            key = fd_sbuf_str(&sb);
        }
        if (key.len == 0)
            continue; /* nothing to count by */
        if ((h = fd_palloc(r->pool, sizeof(*h))) == NULL)
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
            fd_log_error(FD_LOG_ERR, 0, "limit_conn zone \"%s\" is full "
                         "(its bucket of this key has %d keys in "
                         "progress): make size larger", z->name, WAYS);
        }
        if (lc->dry_run) {
            COUNT(z, dry_run);
            x->status = "REJECTED_DRY_RUN";
            fd_log_error(FD_LOG_WARN, 0, "limiting connections, dry run, "
                         "by zone \"%s\"", z->name);
            continue;
        }
        COUNT(z, rejected);
        x->status = "REJECTED";
        fd_log_error(FD_LOG_WARN, 0, "limiting connections by zone \"%s\"",
                     z->name);
        release_all(x); /* what the zones before took */
        r->refused = 1;
        return (int)lc->status;
    }
    return FD_OK;
}

/* the request ended: its counts go back now, not when its memory goes */
static void limit_log(fd_request_t *r)
{
    req_t *x;
    void **slot;

    if (r->mctx == NULL ||
        (slot = fd_request_ctx(r, &fd_limit_conn_module)) == NULL ||
        (x = *slot) == NULL)
        return;
    release_all(x);
}

static int limit_loc_active(const fd_http_loc_t *loc)
{
    const limit_loc_t *lc = fd_loc_conf(loc, &fd_limit_conn_module);

    return lc->n > 0;
}

static fd_str_t v_status(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    void **slot;
    req_t *x;

    (void)op;
    (void)tmp;
    if (r == NULL || r->mctx == NULL ||
        (slot = fd_request_ctx(r, &fd_limit_conn_module)) == NULL ||
        (x = *slot) == NULL || x->status == NULL)
        return fd_null_string;
    return (fd_str_t){strlen(x->status), x->status};
}

static const fd_var_t limit_vars[] = {
    {"limit_conn_status", v_status, 0, 0},
    FD_VAR_END};

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
        fd_status_counter(st, "limit_conn_passed", "Requests counted in "
                          "progress within the number.", labels, e->passed);
        fd_status_counter(st, "limit_conn_rejected", "Requests refused "
                          "over the number.", labels, e->rejected);
        fd_status_counter(st, "limit_conn_dry_run", "Requests a dry run "
                          "would have refused.", labels, e->dry_run);
        fd_status_counter(st, "limit_conn_full", "Requests whose key found "
                          "no room in the zone.", labels, e->full);
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
        into->rejected += s->rejected;
        into->dry_run += s->dry_run;
        into->full += s->full;
    }
}

fd_module_t fd_limit_conn_module = {
    .name = "limit_conn",
    .directives = limit_directives,
    .conf_size = sizeof(limit_loc_t),
    .init_conf = limit_init_conf,
    .init_worker = limit_init_worker,
    .section = "limit_conn",
    .section_directives = zone_directives,
    .section_size = sizeof(zone_t),
    .init_section = zone_init_section,
    .init_cycle = limit_init_cycle,
    .shm_size = ZONE_MAX * sizeof(zone_shm_t),
    .status = limit_status,
    .retire = limit_retire,
    .log = limit_log,
    .access = limit_access,
    .loc_active = limit_loc_active,
    .vars = limit_vars,
};
