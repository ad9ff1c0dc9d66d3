/*
 * mirror = /path (repeatable): nginx's mirror module. Each request of the
 * location is copied, just before its handler runs, to each path: a
 * background copy (fd_req_background) with the request's method,
 * header, query and, with mirror_request_body = on (the default), its
 * body, routed among the server's locations (usually one that proxies to
 * a shadow service). The copy's answer is read and dropped; the client's
 * request never waits for it, nor fails by it.
 *
 * Lifetime: a copy owns everything it reads (its pool holds copies of the
 * header, the body, the client's address; its connection struct is its
 * own), and the client's request keeps no pointer to it. So either may end
 * first: the client's connection may close, go on to its next request or
 * close its HTTP/2 stream while the copy runs, and nothing of the copy is
 * reached from the client's side afterwards, nor the other way round. What
 * bounds a copy is this worker's: at most mirror_max_in_flight copies at
 * once (the ones over it are dropped, and counted), and each lives at
 * most mirror_timeout (then it is stopped: its upstream connection
 * closed, its pool freed). Every end of a copy (its answer, the timeout)
 * goes through its pool's clean-up, which is where it is counted out.
 *
 * With mirror_request_body = on, the request body is read whole before
 * the handler runs (as nginx), also for a handler that would stream it
 * (the proxy): the handler then reads it from memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fastd.h"

/* mirror = /path or @name */
typedef struct {
    fd_str_t to;
    fd_api_conf_pos_t pos;     /* its line */
} mirror_to_t;

typedef struct {
    mirror_to_t *uris;         /* none: off */
    unsigned nuris, cap;
    int body;                  /* mirror_request_body */
    int64_t max_in_flight;
    uint64_t timeout;
} mirror_conf_t;

/* this worker's figures, in its status slot */
typedef struct {
    uint64_t sent;             /* copies started */
    uint64_t dropped;          /* over mirror_max_in_flight, or no memory */
    uint64_t failed;           /* answered 5xx, or stopped at the timeout */
    uint64_t active;           /* in flight (a gauge) */
} mirror_shm_t;

/* one copy in flight */
typedef struct {
    fd_api_bg_t *bg;
    fd_api_timer_t *timer;     /* mirror_timeout */
    fd_str_t to;
    unsigned timed_out:1;
} copy_t;

static mirror_shm_t local_stats;
static mirror_shm_t *stats = &local_stats;
static unsigned in_flight;
static uint64_t drop_logged; /* when a drop was last logged */

#define COUNT(f, n) __atomic_add_fetch(&stats->f, (n), __ATOMIC_RELAXED)

static int mirror_set(void *conf, const char *key, const char *v, int own)
{
    mirror_conf_t *mc = conf;
    mirror_to_t *us;
    size_t n = strlen(v);
    char *d;

    (void)key;
    (void)own;
    if (strcmp(v, "off") == 0) {
        mc->nuris = 0;
        return FD_OK;
    }
    if (v[0] == '@' ? v[1] == '\0' || strpbrk(v, " \t") != NULL
                    : v[0] != '/' || strpbrk(v, "?# \t") != NULL ||
                          strstr(v, "/../") || strstr(v, "/./") ||
                          strstr(v, "//")) {
        fd_api_conf_error("mirror: \"%s\" is not a path (a normal one, "
                          "from \"/\", without a query), an @name nor off",
                          v);
        return FD_ERROR;
    }
    if (mc->nuris == mc->cap) {
        mc->cap = mc->cap ? mc->cap * 2 : 2;
        us = fd_api_conf_alloc(mc->cap * sizeof(*us));
        if (us && mc->nuris)
            memcpy(us, mc->uris, mc->nuris * sizeof(*us));
        mc->uris = us;
    }
    if (mc->uris == NULL || (d = fd_api_conf_alloc(n + 1)) == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    memcpy(d, v, n + 1);
    us = &mc->uris[mc->nuris++];
    us->to = (fd_str_t){n, d};
    fd_api_conf_pos(&us->pos);
    return FD_OK;
}

/* mirror = @name: a named location of this location's server, checked
 * once the file is read (it may come after its users) */
static int mirror_init_conf(void *conf)
{
    mirror_conf_t *mc = conf;
    unsigned k;

    for (k = 0; k < mc->nuris; k++) {
        if (mc->uris[k].to.data[0] != '@')
            continue;
        fd_api_conf_at(&mc->uris[k].pos);
        if (fd_api_conf_named_location("mirror", mc->uris[k].to.data)
            != FD_OK) {
            fd_api_conf_error("out of memory");
            return FD_ERROR;
        }
    }
    return FD_OK;
}

static int mirror_active(const void *conf)
{
    const mirror_conf_t *mc = conf;

    return mc->nuris > 0;
}

/* The copy ended, whatever ended it: it is out of flight */
static void copy_done(void *data, int status)
{
    copy_t *x = data;

    fd_api_timer_cancel(x->timer);
    in_flight--;
    __atomic_store_n(&stats->active, in_flight, __ATOMIC_RELAXED);
    if (x->timed_out || status >= 500 || status == 0)
        COUNT(failed, 1);
    free(x);
}

static void copy_timeout(void *data)
{
    copy_t *x = data;
    char why[300];

    x->timed_out = 1;
    snprintf(why, sizeof(why), "mirror \"%.*s\" still running at "
             "mirror_timeout: stopped", (int)x->to.len, x->to.data);
    fd_api_bg_stop(x->bg, why);
}

static void copy_start(fd_request_t *r, const mirror_conf_t *mc,
                       const mirror_to_t *to)
{
    copy_t *x;
    int rc = FD_ERROR;

    if (in_flight >= (uint64_t)mc->max_in_flight) {
        COUNT(dropped, 1);
        /* once a second at most: a slow shadow drops a copy per request */
        if (drop_logged == 0 || fd_api_now_msec() - drop_logged >= 1000) {
            drop_logged = fd_api_now_msec();
            fd_api_log(FD_API_LOG_INFO, 0, "mirror \"%.*s\": %u copies in "
                       "flight (mirror_max_in_flight): this one is dropped "
                       "(/status counts them all)", (int)to->to.len,
                       to->to.data, in_flight);
        }
        return;
    }
    x = calloc(1, sizeof(*x));
    if (x && (x->timer = fd_api_timer_new(copy_timeout, x)) != NULL) {
        x->to = to->to;
        fd_api_timer_set(x->timer, mc->timeout);
        /* counted in before it starts: a copy answered at once ends
         * (copy_done) before fd_req_background returns */
        in_flight++;
        __atomic_store_n(&stats->active, in_flight, __ATOMIC_RELAXED);
        COUNT(sent, 1);
        rc = fd_req_background(r, to->to, mc->body ? FD_API_BG_BODY : 0,
                               copy_done, x, &x->bg);
        if (rc == FD_OK) {
            /* x is gone if it ended already, its timer with it */
            return;
        }
        in_flight--;
        __atomic_store_n(&stats->active, in_flight, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&stats->sent, 1, __ATOMIC_RELAXED);
        fd_api_timer_cancel(x->timer);
    }
    free(x);
    COUNT(dropped, 1);
    fd_api_log(FD_API_LOG_ERR, 0, "mirror \"%.*s\": %s", (int)to->to.len,
               to->to.data, rc == FD_DECLINED ? "no such location"
                                              : "out of memory");
}

/* before the handler: the body is read (mirror_request_body). The final
 * location's mirrors (a rewrite may have moved r). */
static void mirror_start(fd_request_t *r)
{
    const mirror_conf_t *mc = fd_req_conf_of(r, FD_API_SELF);
    unsigned i;

    if (mc == NULL || mc->nuris == 0 || fd_req_get_ctx_of(r, FD_API_SELF))
        return;
    /* once a request: a handler that moves it (static's index) runs the
     * new location's access phase and handler again */
    if (fd_req_set_ctx_of(r, FD_API_SELF, (void *)mc) != FD_OK)
        return;
    for (i = 0; i < mc->nuris; i++)
        copy_start(r, mc, &mc->uris[i]);
}

static int mirror_access(fd_request_t *r)
{
    const mirror_conf_t *mc = fd_req_conf_of(r, FD_API_SELF);

    /* a copy is not copied again, nor a request twice */
    if (mc->nuris == 0 || fd_req_is_subrequest(r) ||
        fd_req_get_ctx_of(r, FD_API_SELF))
        return FD_OK;
    if (fd_req_before_handler(r, mirror_start,
                              mc->body ? FD_API_WHOLE_BODY : 0) != FD_OK)
        return 500;
    return FD_OK;
}

static int mirror_init_worker(void)
{
    mirror_shm_t *a = fd_api_status_area(FD_API_SELF);

    in_flight = 0;
    stats = a ? a : &local_stats;
    return FD_OK;
}

static void mirror_status(fd_api_status_t *st, const void *area,
                          unsigned worker)
{
    const mirror_shm_t *e = area;

    if (e == NULL)
        return;
    fd_api_status_counter(st, "mirror_sent", "requests copied to a mirror",
                          NULL, e->sent);
    fd_api_status_counter(st, "mirror_dropped", "copies not made: "
                          "mirror_max_in_flight reached, or no memory", NULL,
                          e->dropped);
    fd_api_status_counter(st, "mirror_failed", "copies answered 5xx (the "
                          "mirror service down, slow) or stopped at "
                          "mirror_timeout", NULL, e->failed);
    if (worker != FD_API_STATUS_RETIRED)
        fd_api_status_gauge(st, "mirror_active", "copies in flight", NULL,
                            e->active);
}

static void mirror_retire(void *retired, const void *area)
{
    mirror_shm_t *d = retired;
    const mirror_shm_t *s = area;

    d->sent += s->sent;
    d->dropped += s->dropped;
    d->failed += s->failed;
}

static const fd_api_key_t mirror_keys[] = {
    {.name = "mirror", .type = FD_API_LIST_REPLACE,
     .doc = "repeatable: PATH | @NAME | off: a copy of each request (its "
            "method, target, header and body) goes, just before the handler, "
            "to the location PATH routes to, or to [location @NAME] (which "
            "no client can reach), usually one that proxies to a shadow "
            "service; a pass without a URI sends the client's target "
            "(nginx's proxy_pass http://shadow$request_uri). Its answer is "
            "dropped and the client never waits for it. A section's own "
            "lines replace the inherited ones; off: none"},
    {.name = "mirror_request_body", .type = FD_API_FLAG,
     .offset = offsetof(mirror_conf_t, body), .def = "on",
     .doc = "on: the copies carry the request body, read whole before the "
            "handler runs (also for the proxy, which otherwise streams it; "
            "as nginx); off: they have none, and the body is not waited "
            "for"},
    {.name = "mirror_max_in_flight", .type = FD_API_INT,
     .offset = offsetof(mirror_conf_t, max_in_flight), .def = "64",
     .doc = "copies in flight at most, per worker (all locations'), 1 to "
            "1000000; a copy over it is dropped and counted (/status: "
            "mirror_dropped)"},
    {.name = "mirror_timeout", .type = FD_API_MSEC,
     .offset = offsetof(mirror_conf_t, timeout), .def = "30s",
     .doc = "a copy still running after this is stopped (its upstream "
            "connection closed, its memory freed) and counted as failed; "
            "1ms to 1d"},
    {.name = NULL}};

static int mirror_check(void *conf)
{
    mirror_conf_t *mc = conf;

    if (fd_api_conf_bounds(mc, "mirror_max_in_flight", mc->max_in_flight, 1,
                           1000000, 0) != FD_OK ||
        fd_api_conf_bounds(mc, "mirror_timeout", (int64_t)mc->timeout, 1,
                           86400000, 1) != FD_OK)
        return FD_ERROR;
    return mirror_init_conf(conf);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "mirror",
    .keys = mirror_keys,
    .conf_size = sizeof(mirror_conf_t),
    .init_conf = mirror_check,
    .init_worker = mirror_init_worker,
    .set = mirror_set,
    .access = mirror_access,
    .active = mirror_active,
    .shm_size = sizeof(mirror_shm_t),
    .status = mirror_status,
    .retire = mirror_retire,
};
