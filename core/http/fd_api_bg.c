/*
 * The public API's copies of a request run in the background, its calls
 * just before the handler, and the named locations a module's key names
 * (fastd.h, 1.7): what the mirror module is written with.
 *
 * A copy is fd_http_background()'s subrequest (fd_http_sub.c): it owns
 * all it reads, so it outlives its request. Its handle lives in its own
 * pool, and the pool's clean-up is its one end: whatever ends it (its
 * response, a stop, no memory), the module's done() runs once there and
 * the handle is gone after.
 */
#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_module.h"

struct fd_api_bg_s {
    fd_request_t *sr;
    void (*done)(void *data, int status);
    void *data;
};

typedef struct fd_named_check_s fd_named_check_t;

/* [location @name] checks of the configuration being loaded (the server
 * is read whole first: a named location may come after its users) */
struct fd_named_check_s {
    fd_named_check_t *next;
    const fd_http_loc_t *loc;
    const char *what, *name;
    const char *file;
    int line;
};

/* --- before the handler ------------------------------------------------ */

struct fd_pre_s {
    fd_pre_t *next;
    void (*fn)(fd_request_t *r);
};

int fd_req_before_handler(fd_request_t *r, void (*fn)(fd_request_t *r),
                          unsigned flags)
{
    fd_pre_t *p = fd_palloc(r->pool, sizeof(*p)), **end;

    if (p == NULL)
        return FD_ERROR;
    p->fn = fn;
    p->next = NULL;
    for (end = &r->pre; *end; end = &(*end)->next)
        ;
    *end = p;
    if (flags & FD_API_WHOLE_BODY)
        r->body_whole = 1;
    return FD_OK;
}

void fd_http_run_pre(fd_request_t *r)
{
    while (r->pre) {
        fd_pre_t *p = r->pre;

        r->pre = p->next;
        p->fn(r);
    }
}

int fd_req_is_subrequest(fd_request_t *r)
{
    return r->sub_post != NULL;
}

/* --- copies in the background ----------------------------------------- */

static void bg_end(void *data)
{
    fd_api_bg_t *bg = data;
    fd_request_t *sr = bg->sr;

    fd_worker_hold(-1);
    bg->done(bg->data, sr->done ? sr->status : 0);
}

int fd_req_background(fd_request_t *r, fd_str_t to, unsigned flags,
                      void (*done)(void *data, int status), void *data,
                      fd_api_bg_t **bgp)
{
    fd_http_loc_t *named = NULL;
    fd_request_t *sr;
    fd_api_bg_t *bg;

    if (to.len > 1 && to.data[0] == '@') {
        char name[256];

        if (to.len >= sizeof(name))
            return FD_DECLINED;
        memcpy(name, to.data, to.len);
        name[to.len] = '\0';
        if ((named = fd_http_named_location(r->loc->server, name)) == NULL)
            return FD_DECLINED;
    }
    sr = fd_http_background(r, to, named,
                            (flags & FD_API_BG_BODY) ? FD_SUB_BODY : 0);
    if (sr == NULL)
        return FD_ERROR;
    if ((bg = fd_palloc(sr->pool, sizeof(*bg))) == NULL ||
        fd_pool_cleanup_add(sr->pool, bg_end, bg) == NULL) {
        fd_pool_destroy(sr->pool);
        return FD_ERROR;
    }
    bg->sr = sr;
    bg->done = done;
    bg->data = data;
    *bgp = bg;
    /* a graceful stop lets it finish (up to shutdown_timeout) */
    fd_worker_hold(1);
    fd_http_background_run(sr);
    return FD_OK;
}

void fd_api_bg_stop(fd_api_bg_t *bg, const char *why)
{
    fd_request_t *sr = bg->sr;

    if (why) {
        uint64_t id = fd_log_conn_id;

        fd_log_conn_id = sr->c->id;
        fd_log_error(FD_LOG_INFO, 0, "%s", why);
        fd_log_conn_id = id;
    }
    /* frees it now (bg_end), or when its handler ends */
    fd_http_subrequest_abort(sr);
}

/* --- named locations a key names ------------------------------------------ */

int fd_api_conf_named_location(const char *what, const char *name)
{
    fd_conf_t *cf = fd_dso_conf();
    const fd_http_loc_t *loc = fd_dso_conf_loc();
    fd_named_check_t *k, **end;

    if (cf == NULL || loc == NULL)
        return FD_ERROR;
    k = fd_palloc(cf->temp, sizeof(*k));
    if (k == NULL || (k->what = fd_pstrdup(cf->temp, what, strlen(what)))
                         == NULL ||
        (k->name = fd_pstrdup(cf->temp, name, strlen(name))) == NULL)
        return FD_ERROR;
    k->loc = loc;
    k->file = cf->file;
    k->line = cf->line;
    k->next = NULL;
    for (end = &cf->cycle->http.named_checks; *end; end = &(*end)->next)
        ;
    *end = k; /* in file order: the first missing one is reported */
    return FD_OK;
}

int fd_http_named_checks(fd_conf_t *cf, fd_cycle_t *cy)
{
    fd_named_check_t *k;

    for (k = cy->http.named_checks; k; k = k->next) {
        if (fd_http_named_location(k->loc->server, k->name))
            continue;
        cf->file = k->file;
        cf->line = k->line;
        return fd_conf_error(cf, "%s: no [location %s] in this [server]",
                             k->what, k->name);
    }
    cy->http.named_checks = NULL; /* cf->temp is freed after the load */
    return FD_OK;
}
