/*
 * proxy_cache internals: the key's MD5, levels and file names, freshness
 * (X-Accel-Expires, Cache-Control, Expires, proxy_cache_valid, what is
 * never stored), and the shared index: lookups, the filling flag of
 * proxy_cache_lock, commits, eviction from a full bucket, and the
 * manager's inactive and max_size passes, and the loader that indexes
 * the files on disk after a start. Both files are included whole,
 * their global names renamed so that they do not clash with the ones
 * linked into the test.
 */
/* FD_API_SELF: the proxy's descriptor, linked in with the module */
#define FD_API_BUILTIN fd_proxy_api_module
#define fd_proxy_cache_section fd_proxy_cache_section_unit
#define fd_proxy_cache_set fd_proxy_cache_set_unit
#define fd_proxy_cache_hash fd_proxy_cache_hash_unit
#define fd_proxy_cache_levels fd_proxy_cache_levels_unit
#define fd_proxy_cache_file fd_proxy_cache_file_unit
#define fd_proxy_cache_valid_for fd_proxy_cache_valid_for_unit
#define fd_proxy_cache_init_conf fd_proxy_cache_init_conf_unit
#define fd_proxy_cache_init_worker fd_proxy_cache_init_worker_unit
#define fd_proxy_cache_exit_worker fd_proxy_cache_exit_worker_unit
#define fd_proxy_cache_status fd_proxy_cache_status_unit
#define fd_proxy_cache_status_shared fd_proxy_cache_status_shared_unit
#define fd_proxy_cache_retire fd_proxy_cache_retire_unit
#define fd_proxy_cache_lookup fd_proxy_cache_lookup_unit
#define fd_proxy_cache_header fd_proxy_cache_header_unit
#define fd_proxy_cache_body fd_proxy_cache_body_unit
#define fd_proxy_cache_end fd_proxy_cache_end_unit
#define fd_proxy_cache_abandon fd_proxy_cache_abandon_unit
#define fd_proxy_cache_status_text fd_proxy_cache_status_text_unit
#define fd_proxy_cache_area fd_proxy_cache_area_unit
#define fd_proxy_cache_unlink fd_proxy_cache_unlink_unit
#define fd_proxy_cache_index_lookup lookup_stale
#define fd_proxy_cache_index_commit commit
#define fd_proxy_cache_index_unfill unfill
#define fd_proxy_cache_index_forget forget
#define fd_proxy_cache_index_refresh refresh
#define fd_proxy_cache_drops_field fd_proxy_cache_drops_field_unit
#define fd_proxy_cache_request_fields fd_proxy_cache_request_fields_unit
#define fd_proxy_cache_stale fd_proxy_cache_stale_unit
#define fd_proxy_cache_response fd_proxy_cache_response_unit
#define fd_proxy_cache_index_load load
#define fd_proxy_cache_expires_msec expires_msec
#define fd_proxy_cache_hex parse_hex
#define fd_proxy_cache_open_drop fd_proxy_cache_open_drop_unit
#include "../../modules/fd_proxy_cache_index.c"
#include "../../modules/fd_proxy_cache.c"
#include "fd_core.h"  /* the test's own: fd_mkdirs */
#include "fd_event.h" /* fd_time_update, fd_current_sec */

/* the lookup without proxy_cache_use_stale updating */
static int lookup(fd_proxy_cache_t *c, const uint8_t md5[16], uint64_t now,
                  uint64_t lock_ms, int fill, uint64_t *until, uint64_t *gen,
                  int *evict, uint8_t evicted[16])
{
    return lookup_stale(c, md5, now, lock_ms, 0, fill, until, gen, evict,
                        evicted);
}

#include "tap.h"

static const char *hex(const uint8_t md5[16])
{
    static char buf[33];

    for (int i = 0; i < 16; i++)
        snprintf(buf + 2 * i, 3, "%02x", md5[i]);
    return buf;
}

static void keys(void)
{
    uint8_t m[16], lv[3];
    unsigned n;
    char p[256];
    size_t dl, len;

    fd_proxy_cache_hash("", 0, m);
    is_str(hex(m), "d41d8cd98f00b204e9800998ecf8427e", "MD5 of \"\"");
    fd_proxy_cache_hash("httplocalhost/c/a", 17, m);
    is_str(hex(m), "c2fe72ee91d950251565e727418421f3",
           "MD5 of httplocalhost/c/a");

    ok(fd_proxy_cache_levels("1:2", lv, &n) == FD_OK && n == 2 &&
           lv[0] == 1 && lv[1] == 2, "levels 1:2");
    ok(fd_proxy_cache_levels("2:2:1", lv, &n) == FD_OK && n == 3,
       "levels 2:2:1");
    ok(fd_proxy_cache_levels(NULL, lv, &n) == FD_OK && n == 0,
       "no levels");
    static const char *bad[] = {"3", "1:", ":1", "1:2:1:1", "1::2", "a",
                                "12"};
    for (unsigned i = 0; i < fd_nelems(bad); i++)
        ok(fd_proxy_cache_levels(bad[i], lv, &n) == FD_ERROR,
           "bad levels \"%s\"", bad[i]);

    fd_proxy_cache_hash("", 0, m);
    fd_proxy_cache_levels("1:2", lv, &n);
    len = fd_proxy_cache_file(p, sizeof(p), "/var/c", lv, n, m, &dl);
    is_str(p, "/var/c/e/27/d41d8cd98f00b204e9800998ecf8427e",
           "path/L1/L2/HEX, the levels from the end of HEX (as nginx)");
    is_int(len, strlen(p), "its length");
    is_int(dl, strlen("/var/c/e/27/"), "where the name begins");
    ok(fd_proxy_cache_file(p, 20, "/var/c", lv, n, m, &dl) == 0,
       "a buffer too small: 0");
}

#define H(n, v) {{sizeof(n) - 1, n}, {sizeof(v) - 1, v}}

static unsigned ignore;

static int64_t fresh(const fd_api_field_t *f, unsigned nf, int status,
                     int auth)
{
    static const fd_proxy_cache_valid_t valid[] = {{200, 600}, {0, 5}};

    return fd_proxy_cache_valid_for(f, nf, status, valid, 2, 1000000, auth,
                                    ignore);
}

static void freshness(void)
{
    fd_api_field_t none[1] = {H("X-A", "1")};
    fd_api_field_t ma[] = {H("Cache-Control", "public, max-age=30")};
    fd_api_field_t sma[] = {H("cache-control", "max-age=30, s-maxage=90")};
    fd_api_field_t ns[] = {H("Cache-Control", "no-store")};
    fd_api_field_t nc[] = {H("Cache-Control", "max-age=30,no-cache")};
    fd_api_field_t pr[] = {H("Cache-Control", "private")};
    fd_api_field_t ma0[] = {H("Cache-Control", "max-age=0")};
    fd_api_field_t xae[] = {H("Cache-Control", "no-store"),
                              H("X-Accel-Expires", "7")};
    fd_api_field_t xae0[] = {H("X-Accel-Expires", "0"),
                               H("Cache-Control", "max-age=30")};
    fd_api_field_t xaeat[] = {H("X-Accel-Expires", "@1000100")};
    fd_api_field_t ck[] = {H("Set-Cookie", "a=1"),
                             H("Cache-Control", "max-age=30")};
    fd_api_field_t vary[] = {H("Vary", "Accept-Encoding")};
    /* 1000000 is Mon, 12 Jan 1970 13:46:40 GMT */
    fd_api_field_t ex[] = {H("Expires", "Mon, 12 Jan 1970 13:47:40 GMT")};
    fd_api_field_t expast[] = {H("Expires", "Mon, 12 Jan 1970 13:45:40 GMT")};
    fd_api_field_t exbad[] = {H("Expires", "0")};
    fd_api_field_t exma[] = {H("Expires", "Mon, 12 Jan 1970 13:47:40 GMT"),
                               H("Cache-Control", "max-age=5")};
    fd_api_field_t pub[] = {H("Cache-Control", "public")};
    fd_api_field_t maq[] = {H("Cache-Control", "max-age=\"40\"")};
    fd_api_field_t nomatch[] = {H("Cache-Control", "max-ages=40")};

    is_int(fresh(none, 1, 200, 0), 600, "nothing said: proxy_cache_valid 200");
    is_int(fresh(none, 1, 404, 0), 5, "... any, for a 404");
    is_int(fresh(none, 1, 204, 0), 0, "204: never stored");
    is_int(fresh(none, 1, 206, 0), 0, "206: never stored");
    is_int(fresh(none, 1, 304, 0), 0, "304: never stored");
    is_int(fresh(ma, 1, 200, 0), 30, "max-age=30");
    is_int(fresh(sma, 1, 200, 0), 90, "s-maxage wins over max-age");
    is_int(fresh(ns, 1, 200, 0), 0, "no-store");
    is_int(fresh(nc, 1, 200, 0), 0, "no-cache");
    is_int(fresh(pr, 1, 200, 0), 0, "private");
    is_int(fresh(ma0, 1, 200, 0), 0, "max-age=0");
    is_int(fresh(maq, 1, 200, 0), 40, "max-age=\"40\"");
    is_int(fresh(nomatch, 1, 200, 0), 600, "max-ages is not max-age");
    is_int(fresh(xae, 2, 200, 0), 7, "X-Accel-Expires wins over no-store");
    is_int(fresh(xae0, 2, 200, 0), 0, "X-Accel-Expires: 0 wins over max-age");
    is_int(fresh(xaeat, 1, 200, 0), 100, "X-Accel-Expires: @unix time");
    is_int(fresh(ck, 2, 200, 0), 0, "Set-Cookie: never stored");
    is_int(fresh(vary, 1, 200, 0), 600, "Vary: stored (a variant)");
    {
        fd_api_field_t star[] = {H("Vary", "Accept-Encoding, *")};
        is_int(fresh(star, 1, 200, 0), 0, "Vary: * never stored");
    }
    is_int(fresh(ex, 1, 200, 0), 60, "Expires in 60 s");
    is_int(fresh(expast, 1, 200, 0), 0, "Expires in the past");
    is_int(fresh(exbad, 1, 200, 0), 0, "Expires: 0 (already expired)");
    is_int(fresh(exma, 2, 200, 0), 5, "max-age wins over Expires");
    is_int(fresh(ma, 1, 200, 1), 30, "Authorization and public: stored");
    is_int(fresh(sma, 1, 200, 1), 90, "Authorization and s-maxage: stored");
    is_int(fresh(none, 1, 200, 1), 0, "Authorization alone: not stored");
    is_int(fresh(pub, 1, 200, 1), 600,
           "Authorization and public without an age: proxy_cache_valid");

    ignore = FD_PROXY_IGNORE_COOKIE;
    is_int(fresh(ck, 2, 200, 0), 30, "ignore Set-Cookie: stored");
    ignore = FD_PROXY_IGNORE_CC;
    is_int(fresh(ns, 1, 200, 0), 600, "ignore Cache-Control: no-store "
           "does not count, proxy_cache_valid does");
    is_int(fresh(exma, 2, 200, 0), 60, "ignore Cache-Control: Expires");
    ignore = FD_PROXY_IGNORE_XAE;
    is_int(fresh(xae, 2, 200, 0), 0, "ignore X-Accel-Expires: no-store");
    ignore = FD_PROXY_IGNORE_EXPIRES;
    is_int(fresh(ex, 1, 200, 0), 600, "ignore Expires: proxy_cache_valid");
    ignore = FD_PROXY_IGNORE_VARY;
    is_int(fresh(vary, 1, 200, 0), 600, "ignore Vary: stored");
    ignore = 0;
}

static fd_proxy_cache_t *cache_new(size_t nbuckets)
{
    static fd_proxy_cache_t c;
    static char *base;

    free(base);
    memset(&c, 0, sizeof(c));
    base = calloc(1, sizeof(head_t) + nbuckets * sizeof(bucket_t));
    c.head = (head_t *)base;
    c.table = (bucket_t *)(base + sizeof(head_t));
    c.nbuckets = nbuckets;
    c.path = "/nonexistent-fastd-cache";
    c.name = "t";
    c.inactive = 10000;
    return &c;
}

static void key(uint8_t m[16], int i)
{
    char k[16];

    snprintf(k, sizeof(k), "key%d", i);
    fd_proxy_cache_hash(k, strlen(k), m);
}

static void index_ops(void)
{
    fd_proxy_cache_t *c = cache_new(1); /* one bucket: 8 entries */
    uint8_t m[16], m2[16], ev[16];
    uint64_t until, gen;
    int evict, rc, i;

    key(m, 1);
    is_int(lookup(c, m, 1000, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "empty: a miss");
    is_int(lookup(c, m, 1000, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "without the lock a miss marks nothing");
    is_int(lookup(c, m, 1000, 500, 1, &until, &gen, &evict, ev), L_FILL,
           "with the lock: this one fills");
    is_int(lookup(c, m, 1100, 500, 1, &until, &gen, &evict, ev), L_WAIT,
           "the next one waits");
    is_int(until, 1500, "until the filler's deadline");
    is_int(lookup(c, m, 1100, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "without the lock it does not wait");
    is_int(lookup(c, m, 1600, 500, 1, &until, &gen, &evict, ev), L_FILL,
           "past the deadline: the next one fills");
    is_int(lookup(c, m, 1650, 500, 0, &until, &gen, &evict, ev), L_WAIT,
           "one that waited before waits, but does not fill");
    unfill(c, m);
    is_int(lookup(c, m, 1700, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "the filler gave up: a miss");
    is_int(lookup(c, m, 1700, 500, 0, &until, &gen, &evict, ev), L_MISS,
           "... for one that waited too: it goes upstream, fills nothing");
    is_int(lookup(c, m, 1700, 500, 0, &until, &gen, &evict, ev), L_MISS,
           "... and so does the next waiter");

    commit(c, m, 2000, 5000, 100);
    is_int(lookup(c, m, 2001, 500, 1, &until, &gen, &evict, ev), L_HIT,
           "committed: a hit");
    is_int(c->head->size, 100, "its size is counted");
    is_int(c->head->entries, 1, "one entry");
    commit(c, m, 2002, 5000, 40);
    is_int(c->head->size, 40, "committed again: the new size replaces it");
    is_int(c->head->entries, 1, "still one entry");
    rc = lookup(c, m, 5000, 500, 1, &until, &gen, &evict, ev);
    is_int(rc & ~0x10, L_EXPIRED, "past expires: expired");
    ok(rc & 0x10, "... and with the lock this one refills it");
    is_int(c->head->size, 40, "the expired file stays until replaced");
    is_int(lookup(c, m, 5001, 500, 1, &until, &gen, &evict, ev), L_WAIT,
           "another waits on the update");
    is_int(lookup_stale(c, m, 5001, 500, 500, 1, &until, &gen, &evict, ev),
           L_STALE, "... or, with use_stale updating, is answered stale");
    is_int(lookup(c, m, 5001, 0, 0, &until, &gen, &evict, ev), L_EXPIRED,
           "without the lock it goes upstream, expired");
    unfill(c, m);
    rc = lookup_stale(c, m, 5002, 0, 500, 1, &until, &gen, &evict, ev);
    is_int(rc, L_EXPIRED | 0x10, "the updater gave up: the next one updates "
           "(use_stale updating alone marks it too)");
    ok(refresh(c, m, gen, 5003, 6000), "a 304 refreshes that generation");
    is_int(lookup(c, m, 5004, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "revalidated: a hit");
    ok(!refresh(c, m, gen + 1, 5005, 6000), "another generation is not "
       "refreshed");
    is_int(lookup(c, m, 6000, 0, 0, &until, &gen, &evict, ev), L_EXPIRED,
           "expired again at the 304's deadline");
    commit(c, m, 5001, 9000, 40);
    is_int(lookup_stale(c, m, 5002, 0, 500, 1, &until, &gen, &evict, ev),
           L_HIT, "a new file: fresh, the update mark gone");
    /* a request that found its (older) file missing forgets that file
     * only, not the one another request committed since */
    forget(c, m, gen - 1);
    is_int(lookup(c, m, 5003, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "forgetting an older generation keeps the new entry");
    forget(c, m, gen);
    is_int(lookup(c, m, 5004, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "forgetting its own generation drops it");
    commit(c, m, 5005, 9000, 40);

    /* a full bucket: the least recently used ready entry gives way */
    for (i = 2; i <= 8; i++) {
        key(m2, i);
        commit(c, m2, 6000 + (uint64_t)i, 90000, 10);
    }
    is_int(c->head->entries, 8, "8 entries fill the bucket");
    key(m2, 3);
    is_int(lookup(c, m2, 7000, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "key3 used again");
    key(m2, 9);
    is_int(lookup(c, m2, 7001, 500, 1, &until, &gen, &evict, ev), L_FILL,
           "key9 fills in a full bucket");
    ok(evict, "room was made");
    key(m, 1);
    is_str(hex(ev), hex(m), "by evicting key1, the least recently used");
    is_int(c->head->entries, 7, "7 ready entries and one filling");
    commit(c, m2, 7002, 90000, 10);

    /* every entry filling: nothing can be evicted */
    c = cache_new(1);
    for (i = 1; i <= 8; i++) {
        key(m, i);
        lookup(c, m, 1000, 500, 1, &until, &gen, &evict, ev);
    }
    key(m, 9);
    is_int(lookup(c, m, 1000, 500, 1, &until, &gen, &evict, ev), L_MISS,
           "a bucket of filling entries: a plain miss");
    ok(!evict, "and nothing evicted");
}

static void manager(void)
{
    fd_proxy_cache_t *c = cache_new(64);
    uint8_t m[16], ev[16];
    uint64_t until, gen;
    int evict, i;

    for (i = 0; i < 100; i++) {
        key(m, i);
        commit(c, m, 1000 + (uint64_t)i, 1000000, 100);
    }
    is_int(c->head->size, 10000, "100 entries of 100 bytes");
    c->inactive = 10000;
    manage(c, 11050);
    is_int(c->head->entries, 50, "inactive: the 50 unused for 10 s went");
    key(m, 49);
    is_int(lookup(c, m, 11060, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "key49 is gone");
    key(m, 50);
    is_int(lookup(c, m, 11060, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "key50 stayed");

    c->max_size = 2000;
    manage(c, 11070);
    is_int(c->head->size, 2000, "max_size: down to 2000 bytes");
    key(m, 50);
    is_int(lookup(c, m, 11080, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "key50, used last, stayed");
    key(m, 51);
    is_int(lookup(c, m, 11080, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "key51, the least recently used, went");
    key(m, 99);
    is_int(lookup(c, m, 11080, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "key99, the newest, stayed");
}

/* one run removes MANAGER_FILES at most (each an unlink on the loop), and
 * says when it stopped there: the rest goes in the runs after */
static void manager_bounded(void)
{
    fd_proxy_cache_t *c = cache_new(256);
    int i, runs = 0, more = 1;
    uint64_t n;

    for (i = 0; i < 300; i++) {
        uint8_t m[16];
        key(m, i);
        commit(c, m, 1000 + (uint64_t)i, 1000000, 100);
    }
    n = c->head->entries;
    ok(n > 250, "300 keys in 2048 places: most indexed (%d)", (int)n);
    c->max_size = 1000;
    is_int(manage(c, 2000), 1, "max_size: the first run stops with more left");
    is_int(c->head->entries, n - MANAGER_FILES, "having removed 100");
    while (more && runs++ < 10)
        more = manage(c, 2000);
    is_int(more, 0, "the runs after take the rest");
    is_int(c->head->size, 1000, "down to max_size");
    c->inactive = 500;
    c->max_size = 0;
    is_int(manage(c, 5000), 0, "10 entries unused for inactive: one run");
    is_int(c->head->entries, 0, "all went");
}

/* the loader's insertion: only into a free place, never over an entry */
static void loading(void)
{
    fd_proxy_cache_t *c = cache_new(1); /* one bucket: 8 entries */
    uint8_t m[16], ev[16], got[16];
    uint64_t until, gen, gen2;
    int evict, i;

    key(m, 1);
    is_int(load(c, m, 1000, 5000, 100), LOAD_ADDED, "empty: added");
    is_int(c->head->size, 100, "its size is counted");
    is_int(c->head->entries, 1, "one entry");
    is_int(lookup(c, m, 1001, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "a loaded entry is a hit");
    is_int(load(c, m, 1002, 9000, 300), LOAD_PRESENT,
           "loaded again: present, left alone");
    is_int(c->head->size, 100, "the size as it was");
    is_int(lookup(c, m, 1003, 0, 0, &until, &gen2, &evict, ev), L_HIT,
           "still a hit");
    is_int(gen2, gen, "of the same generation");
    is_int(lookup(c, m, 6000, 0, 0, &until, &gen2, &evict, ev), L_EXPIRED,
           "the first expires stayed");

    /* one a request stores (or fills) meanwhile wins */
    key(m, 2);
    commit(c, m, 1000, 90000, 40);
    is_int(load(c, m, 1001, 5000, 50), LOAD_PRESENT,
           "committed by a request: not replaced");
    is_int(c->head->size, 140, "the committed size counts, once");
    key(m, 3);
    is_int(lookup(c, m, 1000, 500, 1, &until, &gen, &evict, ev), L_FILL,
           "a request fills key3");
    is_int(load(c, m, 1001, 5000, 50), LOAD_PRESENT,
           "a filling entry is not replaced");
    is_int(c->head->entries, 2, "two ready entries, one filling");

    key(m, 4);
    is_int(load(c, m, 1000, 0, 10), LOAD_ADDED, "an expired one is added");
    is_int(lookup(c, m, 1001, 0, 0, &until, &gen, &evict, ev), L_EXPIRED,
           "... as expired");
    for (i = 5; i <= 8; i++) {
        key(m, i);
        load(c, m, 1000, 90000, 10);
    }
    is_int(c->head->entries, 7, "7 ready and one filling fill the bucket");
    key(m, 9);
    is_int(load(c, m, 1000, 90000, 10), LOAD_FULL,
           "a full bucket: skipped");
    is_int(c->head->entries, 7, "nothing evicted for it");
    is_int(c->head->size, 190, "the sizes of the 7");
    key(m, 1);
    is_int(lookup(c, m, 1001, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "key1 is still there");
    ok(c->head->gen >= 7, "each entry got a new generation");

    /* a file's unix expires as monotonic ms */
    is_int(expires_msec(1060, 1000, 50000), 110000, "60 s ahead");
    is_int(expires_msec(1000, 1000, 50000), 50000, "now");
    is_int(expires_msec(990, 1000, 50000), 40000, "10 s ago: still past");
    is_int(expires_msec(900, 1000, 50000), 0, "before the clock: 0");
    ok(expires_msec(INT64_MAX, 0, 1) > 1 &&
           expires_msec(INT64_MIN, 0, 1) == 0, "no overflow either way");

    /* the file's name */
    fd_proxy_cache_hash("", 0, m);
    ok(parse_hex("d41d8cd98f00b204e9800998ecf8427e", got) == FD_OK &&
           memcmp(got, m, 16) == 0, "a name's 32 hex digits: its MD5");
    ok(parse_hex("D41D8CD98F00B204E9800998ECF8427E", got) == FD_ERROR,
       "upper case is not a name the cache writes");
    ok(parse_hex("d41d8cd98f00b204e9800998ecf8427", got) == FD_ERROR,
       "31 digits: not a name");
}

static void spew_file(const char *p, const void *d, size_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (fd != -1) {
        if (write(fd, d, n) != (ssize_t)n)
            fprintf(stderr, "write %s failed\n", p);
        close(fd);
    }
}

/* an entry's file for key k: whole, or cut by cut bytes */
static void entry_file(fd_proxy_cache_t *c, const char *k, int64_t expires,
                       size_t cut, char *p, size_t size)
{
    char buf[256];
    file_head_t fh = {.magic = FILE_MAGIC, .status = 200};
    uint8_t m[16];
    size_t dl, n;

    fd_proxy_cache_hash(k, strlen(k), m);
    fd_proxy_cache_file(p, size, c->path, c->levels, c->nlevels, m, &dl);
    p[dl - 1] = '\0';
    fd_mkdirs(p, 0, 0700, NULL);
    p[dl - 1] = '/';
    fh.key_len = (uint32_t)strlen(k);
    fh.fields_len = 0;
    fh.body_len = 5;
    fh.date = fd_current_sec;
    fh.expires = expires;
    memcpy(buf, &fh, sizeof(fh));
    memcpy(buf + sizeof(fh), k, fh.key_len);
    memcpy(buf + sizeof(fh) + fh.key_len, "hello", 5);
    n = sizeof(fh) + fh.key_len + 5;
    spew_file(p, buf, n - cut);
}

/* the walk over a directory: what it indexes and what it removes */
static void walk(void)
{
    fd_proxy_cache_t *c = cache_new(64);
    char dir[] = "/tmp/fastd-unit-cache-XXXXXX", p[PATH_MAX], q[PATH_MAX + 64];
    uint8_t m[16], ev[16];
    uint64_t until, gen;
    struct stat st;
    int evict, slices = 0;

    fd_time_update();
    if (mkdtemp(dir) == NULL) {
        ok(0, "mkdtemp");
        return;
    }
    c->path = dir;
    fd_proxy_cache_levels("1:2", c->levels, &c->nlevels);
    entry_file(c, "fresh", fd_current_sec + 600, 0, p, sizeof(p));
    entry_file(c, "stale", fd_current_sec - 10, 0, p, sizeof(p));
    entry_file(c, "cut", fd_current_sec + 600, 3, p, sizeof(p));
    snprintf(q, sizeof(q), "%s.99999999.1.tmp", p);
    spew_file(q, "x", 1);
    snprintf(q, sizeof(q), "%s.%d.1.tmp", p, (int)getpid());
    spew_file(q, "x", 1);
    snprintf(q, sizeof(q), "%s/README", dir);
    spew_file(q, "not the cache's", 15);

    ok(loader_open(&loader, c) == FD_OK, "the walk begins");
    while (!loader_slice(&loader, 1000) && slices < 1000)
        slices++;
    loader_close(&loader);
    is_int(loader.entries, 2, "two whole entries indexed");
    is_int(loader.removed, 1, "the cut one removed");
    is_int(loader.tmp, 1, "one temporary file removed");
    is_int(c->head->entries, 2, "the index has two");
    fd_proxy_cache_hash("fresh", 5, m);
    is_int(lookup(c, m, 1001, 0, 0, &until, &gen, &evict, ev), L_HIT,
           "the fresh one: a hit");
    fd_proxy_cache_hash("stale", 5, m);
    is_int(lookup(c, m, 1001, 0, 0, &until, &gen, &evict, ev), L_EXPIRED,
           "the stale one: expired");
    fd_proxy_cache_hash("cut", 3, m);
    is_int(lookup(c, m, 1001, 0, 0, &until, &gen, &evict, ev), L_MISS,
           "the cut one: a miss");
    ok(stat(p, &st) == -1 && errno == ENOENT, "and its file is gone");
    snprintf(q, sizeof(q), "%s.99999999.1.tmp", p);
    ok(stat(q, &st) == -1, "a dead writer's temporary file is gone");
    snprintf(q, sizeof(q), "%s.%d.1.tmp", p, (int)getpid());
    ok(stat(q, &st) == 0, "a live writer's is kept");
    unlink(q);
    snprintf(q, sizeof(q), "%s/README", dir);
    ok(stat(q, &st) == 0, "what is not the cache's is left alone");
    unlink(q);

    /* again over the same files: nothing new, nothing counted twice */
    ok(loader_open(&loader, c) == FD_OK, "a second walk");
    while (!loader_slice(&loader, 2000) && slices < 2000)
        slices++;
    loader_close(&loader);
    is_int(loader.entries, 0, "adds nothing");
    is_int(c->head->entries, 2, "still two entries");
    snprintf(q, sizeof(q), "rm -rf '%s'", dir);
    if (system(q) != 0)
        fprintf(stderr, "%s failed\n", q);
}

int main(void)
{
    keys();
    freshness();
    index_ops();
    manager();
    manager_bounded();
    loading();
    walk();
    return done_testing();
}
