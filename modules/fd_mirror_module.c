/*
 * mirror = /path (repeatable): nginx's mirror module. Each request of the
 * location is copied, just before its handler runs, to each path: a
 * background subrequest (fd_http_background) with the request's method,
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
#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_module.h"
#include "fd_status.h"

fd_module_t fd_mirror_module;

/* mirror = /path or @name */
typedef struct {
    fd_str_t uri;
    fd_http_loc_t *named;      /* @name: its location (init_cycle) */
    const char *file;          /* where the line is, for init_cycle */
    int line;
} mirror_to_t;

typedef struct {
    mirror_to_t *uris;         /* none: off */
    unsigned nuris, cap;
    int body;                  /* mirror_request_body */
    fd_int_t max_in_flight;
    fd_msec_t timeout;
} mirror_conf_t;

/* this worker's figures, in its status slot */
typedef struct {
    uint64_t sent;             /* copies started */
    uint64_t dropped;          /* over mirror_max_in_flight, or no memory */
    uint64_t failed;           /* answered 5xx, or stopped at the timeout */
    uint64_t active;           /* in flight (a gauge) */
} mirror_shm_t;

/* one copy in flight; lives in the copy's pool */
typedef struct {
    fd_request_t *sr;
    fd_timer_t timer;          /* mirror_timeout */
    unsigned timed_out:1;
} copy_t;

static mirror_shm_t local_stats;
static mirror_shm_t *stats = &local_stats;
static unsigned in_flight;
static fd_msec_t drop_logged; /* when a drop was last logged */

static int mirror_set(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    mirror_conf_t *mc = conf;
    mirror_to_t *us;

    (void)d;
    if (strcmp(v, "off") == 0) {
        mc->nuris = 0;
        return FD_OK;
    }
    if (v[0] == '@' ? v[1] == '\0' || strpbrk(v, " \t") != NULL
                    : v[0] != '/' || strpbrk(v, "?# \t") != NULL ||
                          strstr(v, "/../") || strstr(v, "/./") ||
                          strstr(v, "//"))
        return fd_conf_error(cf, "mirror: \"%s\" is not a path (a normal "
                             "one, from \"/\", without a query), an @name "
                             "nor off", v);
    us = fd_parray_reserve(cf->pool, mc->uris, mc->nuris, &mc->cap,
                           sizeof(*us));
    if (us == NULL)
        return fd_conf_error(cf, "out of memory");
    mc->uris = us;
    us += mc->nuris;
    us->uri.len = strlen(v);
    us->uri.data = fd_pstrdup(cf->pool, v, strlen(v));
    us->named = NULL;
    us->file = cf->file;
    us->line = cf->line;
    if (us->uri.data == NULL)
        return fd_conf_error(cf, "out of memory");
    mc->nuris++;
    return FD_OK;
}

static int mirror_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    (void)cf;
    (void)loc;
    (void)conf;
    return FD_OK;
}

/* mirror = @name: each location's own @names, found in its server once
 * the file is read (a named location may come after its users) */
typedef struct {
    fd_conf_t *cf;
    int rc;
} resolve_t;

static void resolve_loc(fd_http_loc_t *loc, void *data)
{
    resolve_t *rs = data;
    mirror_conf_t *mc = fd_loc_conf(loc, &fd_mirror_module);
    unsigned k;

    for (k = 0; k < mc->nuris && rs->rc == FD_OK; k++) {
        mirror_to_t *to = &mc->uris[k];
        if (to->uri.data[0] != '@' ||
            (to->named = fd_http_named_location(loc->server, to->uri.data)))
            continue;
        rs->cf->file = to->file;
        rs->cf->line = to->line;
        rs->rc = fd_conf_error(rs->cf, "mirror: no [location %s] in this "
                               "[server]", to->uri.data);
    }
}

static int mirror_init_cycle(fd_conf_t *cf, fd_cycle_t *cy)
{
    resolve_t rs = {cf, FD_OK};

    fd_http_each_loc(cy, resolve_loc, &rs);
    return rs.rc;
}

static int mirror_active(const fd_http_loc_t *loc)
{
    const mirror_conf_t *mc = fd_loc_conf(loc, &fd_mirror_module);

    return mc->nuris > 0;
}

/* The copy's pool is freed: whatever ended it, it is out of flight */
static void copy_end(void *data)
{
    copy_t *x = data;
    int st = x->sr->status;

    fd_timer_del(&x->timer);
    in_flight--;
    stats->active = in_flight;
    if (x->timed_out || !x->sr->done || st >= 500 || st == 0)
        stats->failed++;
    fd_worker_hold(-1);
}

static void copy_timeout(fd_timer_t *t)
{
    copy_t *x = (copy_t *)((char *)t - offsetof(copy_t, timer));
    uint64_t id = fd_log_conn_id;

    fd_log_conn_id = x->sr->c->id;
    x->timed_out = 1;
    fd_log_error(FD_LOG_INFO, 0, "mirror \"%.*s\" still running at "
                 "mirror_timeout: stopped", (int)x->sr->path.len,
                 x->sr->path.data);
    /* frees it now (copy_end), or when its handler ends */
    fd_http_subrequest_abort(x->sr);
    fd_log_conn_id = id;
}

static void copy_start(fd_request_t *r, const mirror_conf_t *mc,
                       const mirror_to_t *to)
{
    fd_str_t uri = to->uri;
    fd_request_t *sr;
    copy_t *x;

    if (in_flight >= (unsigned)mc->max_in_flight) {
        stats->dropped++;
        /* once a second at most: a slow shadow drops a copy per request */
        if (drop_logged == 0 || fd_current_msec - drop_logged >= 1000) {
            drop_logged = fd_current_msec;
            fd_log_error(FD_LOG_INFO, 0, "mirror \"%.*s\": %u copies in "
                         "flight (mirror_max_in_flight): this one is dropped "
                         "(/status counts them all)", (int)uri.len, uri.data,
                         in_flight);
        }
        return;
    }
    sr = fd_http_background(r, uri, to->named, mc->body ? FD_SUB_BODY : 0);
    if (sr == NULL || (x = fd_pcalloc(sr->pool, sizeof(*x))) == NULL ||
        fd_pool_cleanup_add(sr->pool, copy_end, x) == NULL) {
        if (sr)
            fd_pool_destroy(sr->pool);
        stats->dropped++;
        fd_log_error(FD_LOG_ERR, 0, "mirror \"%.*s\": out of memory",
                     (int)uri.len, uri.data);
        return;
    }
    x->sr = sr;
    x->timer.handler = copy_timeout;
    in_flight++;
    stats->active = in_flight;
    stats->sent++;
    /* a graceful stop lets it finish (up to shutdown_timeout) */
    fd_worker_hold(1);
    fd_timer_add(&x->timer, mc->timeout);
    fd_http_background_run(sr);
}

/* r->pre_handler: the body is read (mirror_request_body), the handler is
 * next. The final location's mirrors (a rewrite may have moved r). */
static void mirror_start(fd_request_t *r)
{
    const mirror_conf_t *mc = fd_loc_conf(r->loc, &fd_mirror_module);
    void **done = fd_request_ctx(r, &fd_mirror_module);
    unsigned i;

    if (done == NULL || *done || mc->nuris == 0)
        return;
    /* once a request: a handler that moves it (static's index) runs the
     * new location's access phase and handler again */
    *done = (void *)mc;
    for (i = 0; i < mc->nuris; i++)
        copy_start(r, mc, &mc->uris[i]);
}

static int mirror_access(fd_request_t *r)
{
    const mirror_conf_t *mc = fd_loc_conf(r->loc, &fd_mirror_module);

    if (r->sub_post || mc->nuris == 0 ||
        (r->mctx && r->mctx[fd_mirror_module.index]))
        return FD_OK; /* a copy is not copied again, nor a request twice */
    if (mc->body)
        r->body_whole = 1;
    r->pre_handler = mirror_start;
    return FD_OK;
}

static int mirror_init_worker(fd_worker_t *w)
{
    mirror_shm_t *a = fd_stats ? fd_stats_area(fd_stats, &fd_mirror_module)
                               : NULL;

    (void)w;
    in_flight = 0;
    stats = a ? a : &local_stats;
    return FD_OK;
}

static void mirror_status(fd_status_t *st, const void *area, unsigned worker)
{
    const mirror_shm_t *e = area;

    if (e == NULL)
        return;
    fd_status_counter(st, "mirror_sent", "requests copied to a mirror",
                      NULL, e->sent);
    fd_status_counter(st, "mirror_dropped", "copies not made: "
                      "mirror_max_in_flight reached, or no memory", NULL,
                      e->dropped);
    fd_status_counter(st, "mirror_failed", "copies answered 5xx (the "
                      "mirror service down, slow) or stopped at "
                      "mirror_timeout", NULL, e->failed);
    if (worker != FD_STATUS_RETIRED)
        fd_status_gauge(st, "mirror_active", "copies in flight", NULL,
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

static const fd_directive_t mirror_directives[] = {
    {.name = "mirror", .type = FD_CONF_LIST, .set = mirror_set,
     .replace = 1,
     .doc = "repeatable: PATH | @NAME | off: a copy of each request (its "
            "method, target, header and body) goes, just before the handler, "
            "to the location PATH routes to, or to [location @NAME] (which "
            "no client can reach), usually one that proxies to a shadow "
            "service; a pass without a URI sends the client's target "
            "(nginx's proxy_pass http://shadow$request_uri). Its answer is "
            "dropped and the client never waits for it. A section's own "
            "lines replace the inherited ones; off: none"},
    {.name = "mirror_request_body", .type = FD_CONF_FLAG,
     .offset = offsetof(mirror_conf_t, body), .def = "on",
     .doc = "on: the copies carry the request body, read whole before the "
            "handler runs (also for the proxy, which otherwise streams it; "
            "as nginx); off: they have none, and the body is not waited "
            "for"},
    {.name = "mirror_max_in_flight", .type = FD_CONF_INT,
     .offset = offsetof(mirror_conf_t, max_in_flight), .def = "64",
     .min = 1, .max = 1000000,
     .doc = "copies in flight at most, per worker (all locations'); a "
            "copy over it is dropped and counted (/status: mirror_dropped)"},
    {.name = "mirror_timeout", .type = FD_CONF_MSEC,
     .offset = offsetof(mirror_conf_t, timeout), .def = "30s", .min = 1,
     .max = 86400000,
     .doc = "a copy still running after this is stopped (its upstream "
            "connection closed, its memory freed) and counted as failed"},
    FD_CONF_END};

fd_module_t fd_mirror_module = {
    FD_MODULE_LOC(mirror, mirror_conf_t),
    .access = mirror_access,
    .loc_active = mirror_active,
    .init_cycle = mirror_init_cycle,
    .init_worker = mirror_init_worker,
    .shm_size = sizeof(mirror_shm_t),
    .status = mirror_status,
    .retire = mirror_retire,
};
