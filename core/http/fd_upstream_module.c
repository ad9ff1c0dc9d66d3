/*
 * The core's own module: it owns the [upstream NAME] section type, so
 * every protocol module (proxy, fastcgi, and those to come) finds its
 * groups with fd_cycle_section(cycle, "upstream", NAME) whichever of them
 * are built. It also starts each worker's groups (status entries, active
 * health checks, DNS) and reports their figures in /status: a group is
 * the core's whatever carries requests to it.
 *
 * It is listed first in objs/fd_modules.c (auto/config's core modules),
 * before every module of auto/modules, and cannot be left out.
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_module.h"
#include "fd_sbuf.h"
#include "fd_ssl.h"
#include "fd_upstream.h"
#include "fd_upstream_proto.h"
#include "fd_var.h"

#define MAX_GROUPS 256

fd_module_t fd_upstream_module;

unsigned fd_upstream_groups(fd_cycle_t *cy, fd_upstream_t **out,
                            unsigned max)
{
    fd_conf_section_t *s;
    fd_upstream_t *up;
    unsigned n = 0, i;

    for (s = cy->sections; s; s = s->next)
        if (s->module == &fd_upstream_module && n < max)
            out[n++] = s->conf;
    for (i = 0; i < n / 2; i++) { /* the list is newest first */
        fd_upstream_t *t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    /* then the implicit ones of pass = ..., in the order they were made */
    i = n;
    for (up = cy->upstream_implicit; up && n < max; up = up->next_implicit)
        out[n++] = up;
    for (unsigned k = 0; k < (n - i) / 2; k++) {
        fd_upstream_t *t = out[i + k];
        out[i + k] = out[n - 1 - k];
        out[n - 1 - k] = t;
    }
    return n;
}

static int upstream_init_worker(fd_worker_t *w)
{
    fd_upstream_t *ups[MAX_GROUPS];
    unsigned n = fd_upstream_groups(w->cycle, ups, MAX_GROUPS);

    fd_upstream_init_worker(ups, n, fd_stats ? fd_stats_area(fd_stats,
                                                             &fd_upstream_module)
                                             : NULL);
    return FD_OK;
}

/* The TLS sessions the worker kept for its upstream servers. */
static void upstream_exit_worker(fd_worker_t *w)
{
    fd_upstream_t *ups[MAX_GROUPS];
    unsigned n = fd_upstream_groups(w->cycle, ups, MAX_GROUPS), i, k;

    for (i = 0; i < n; i++)
        for (k = 0; k < ups[i]->npeers; k++)
            fd_ssl_session_free(&ups[i]->peers[k].ssl_session);
}

/* --- $upstream_addr, $upstream_status, $upstream_response_time --- */

enum { TRY_ADDR, TRY_STATUS, TRY_TIME };

/* One value per server tried, ", " between them (nginx's form), in
 * r->pool, whichever protocol tried them; op->var->data says which. */
static fd_str_t v_tries(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    const fd_upstream_req_t *u = r ? r->upstream : NULL;
    uintptr_t what = op->var->data;
    fd_sbuf_t sb;
    unsigned i;

    (void)tmp;
    if (u == NULL || u->nlog == 0 ||
        fd_sbuf_init(&sb, r->pool, u->nlog * 24) != FD_OK)
        return fd_null_string;
    for (i = 0; i < u->nlog; i++) {
        const fd_upstream_try_t *t = &u->log[i];
        if (i)
            fd_sbuf_add_lit(&sb, ", ");
        if (what == TRY_ADDR) {
            fd_sbuf_add(&sb, t->peer->name, strlen(t->peer->name));
        } else if (what == TRY_STATUS) {
            if (t->status)
                fd_sbuf_add_uint(&sb, (uint64_t)t->status);
            else
                fd_sbuf_addc(&sb, '-');
        } else {
            fd_sbuf_add_uint(&sb, t->msec / 1000);
            fd_sbuf_addc(&sb, '.');
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 1000 / 100));
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 100 / 10));
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 10));
        }
    }
    return fd_sbuf_failed(&sb) ? fd_null_string : fd_sbuf_str(&sb);
}

static const fd_var_t upstream_vars[] = {
    {"upstream_addr", v_tries, TRY_ADDR, 0},
    {"upstream_status", v_tries, TRY_STATUS, 0},
    {"upstream_response_time", v_tries, TRY_TIME, 0},
    FD_VAR_END};

fd_module_t fd_upstream_module = {
    .vars = upstream_vars,
    .name = "upstream",
    .init_worker = upstream_init_worker,
    .exit_worker = upstream_exit_worker,
    .section = "upstream",
    .section_directives = fd_upstream_directives,
    .section_size = sizeof(fd_upstream_t),
    .init_section = fd_upstream_init_section,
    .shm_size = sizeof(fd_upstream_shm_t),
    .status = fd_upstream_status,
    .status_shared = fd_upstream_status_shared,
    .retire = fd_upstream_retire,
};
