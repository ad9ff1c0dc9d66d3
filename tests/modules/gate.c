/*
 * A phase module on API 1.2, for tests/modules_phase.t: an access hook
 * that refuses the paths of its gate_deny lines (451 with a header of its
 * own: fd_resp_error, then FD_DONE) and, with gate_hold, holds each request that long on a loop
 * timer before it lets it go on; $gate_seen says what it did; its log
 * hook counts the requests that ended in its status area, reported as
 * fastd_gate_logged_total. API 1.3: handler = gate_echo answers the
 * value of the variable gate_echo names, compiled once in init_conf
 * (fd_api_var_compile) and read per request by its handle; its reopen
 * hook says so in the error log on SIGUSR1.
 */
#include <stdio.h>
#include <string.h>

#include <fastd.h>

typedef struct {
    const char *deny[8];
    unsigned n;
    int own;
    uint64_t hold;
    const char *echo;          /* gate_echo: a variable's name */
    const fd_api_cvar_t *var;  /* ... compiled */
} gate_conf_t;

typedef struct {
    uint64_t logged;
} gate_area_t;

static gate_area_t *area;

static const fd_api_key_t gate_keys[] = {
    {.name = "gate_deny", .type = FD_API_LIST, .doc = "PATH: refused"},
    {.name = "gate_hold", .type = FD_API_MSEC,
     .offset = offsetof(gate_conf_t, hold), .def = "0",
     .doc = "how long each request waits"},
    {.name = "gate_echo", .type = FD_API_STRING,
     .offset = offsetof(gate_conf_t, echo),
     .doc = "handler = gate_echo: the variable it answers"},
    {.name = NULL}};

static int gate_init_conf(void *conf)
{
    gate_conf_t *gc = conf;

    if (gc->echo == NULL)
        return FD_OK;
    gc->var = fd_api_var_compile(gc->echo);
    return gc->var ? FD_OK : FD_ERROR; /* the error says why */
}

/* the variable's value, and " (number)" when it is one */
static int gate_echo(fd_request_t *r)
{
    const gate_conf_t *gc = fd_req_conf_of(r, FD_API_SELF);
    char tmp[FD_API_VAR_TMP], body[256];
    fd_str_t v;
    int n;

    if (gc->var == NULL)
        return 404;
    v = fd_req_var_value(r, gc->var, tmp);
    n = snprintf(body, sizeof(body), "%.*s%s", (int)v.len,
                 v.data ? v.data : "",
                 fd_api_var_flags(gc->var) & FD_API_VAR_NUMBER ? " (number)"
                                                               : "");
    fd_resp_status(r, 200);
    return fd_resp_body(r, body, (size_t)n);
}

static const fd_api_handler_t gate_handlers[] = {
    {.name = "gate_echo", .handler = gate_echo}, {.name = NULL}};

static int gate_set(void *conf, const char *key, const char *value, int own)
{
    gate_conf_t *gc = conf;
    char *copy;

    if (own && !gc->own) { /* a location's own lines replace */
        gc->own = 1;
        gc->n = 0;
    }
    if (gc->n == 8 || value[0] != '/') {
        fd_api_conf_error("%s: \"%s\" is not a path, or too many", key,
                          value);
        return FD_ERROR;
    }
    copy = fd_api_conf_alloc(strlen(value) + 1);
    if (copy == NULL)
        return FD_ERROR;
    strcpy(copy, value);
    gc->deny[gc->n++] = copy;
    return FD_OK;
}

static int gate_active(const void *conf)
{
    const gate_conf_t *gc = conf;

    return gc->n > 0 || gc->hold > 0;
}

static void release(void *data)
{
    fd_request_t *r = data;

    fd_req_set_ctx_of(r, FD_API_SELF, "held");
    fd_api_continue(r, FD_API_SELF);
}

static int gate_access(fd_request_t *r)
{
    const gate_conf_t *gc = fd_req_conf_of(r, FD_API_SELF);
    fd_str_t path = fd_req_path(r);
    unsigned i;

    for (i = 0; i < gc->n; i++)
        if (strlen(gc->deny[i]) == path.len &&
            memcmp(gc->deny[i], path.data, path.len) == 0) {
            if (fd_resp_error(r, 451) != FD_OK ||
                fd_resp_header(r, "X-Gate", (fd_str_t){2, "no"}) != FD_OK)
                return 500;
            return FD_DONE;
        }
    if (gc->hold == 0) {
        fd_req_set_ctx_of(r, FD_API_SELF, "passed");
        return FD_OK;
    }
    if (fd_api_timer(gc->hold, release, r) == NULL)
        return 500;
    return FD_AGAIN;
}

static fd_str_t gate_seen(fd_request_t *r, char *tmp)
{
    const char *s = fd_req_get_ctx_of(r, FD_API_SELF);

    (void)tmp;
    return s ? (fd_str_t){strlen(s), s} : (fd_str_t){0, NULL};
}

static const fd_api_var_t gate_vars[] = {{.name = "gate_seen",
                                          .get = gate_seen},
                                         {.name = NULL}};

static void gate_log(fd_request_t *r)
{
    (void)r;
    if (area)
        __atomic_add_fetch(&area->logged, 1, __ATOMIC_RELAXED);
}

static void gate_reopen(void)
{
    fd_api_log(FD_API_LOG_NOTICE, 0, "gate: reopen");
}

static int gate_init_worker(void)
{
    area = fd_api_status_area(FD_API_SELF);
    return FD_OK;
}

static void gate_status(fd_api_status_t *st, const void *a, unsigned worker)
{
    const gate_area_t *g = a;

    (void)worker;
    if (g)
        fd_api_status_counter(st, "gate_logged", "Requests gate saw end.",
                              NULL, g->logged);
}

static void gate_retire(void *retired, const void *a)
{
    ((gate_area_t *)retired)->logged += ((const gate_area_t *)a)->logged;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "gate",
    .keys = gate_keys,
    .conf_size = sizeof(gate_conf_t),
    .init_conf = gate_init_conf,
    .init_worker = gate_init_worker,
    .handlers = gate_handlers,
    .set = gate_set,
    .access = gate_access,
    .active = gate_active,
    .log = gate_log,
    .vars = gate_vars,
    .shm_size = sizeof(gate_area_t),
    .status = gate_status,
    .retire = gate_retire,
    .reopen = gate_reopen,
};
