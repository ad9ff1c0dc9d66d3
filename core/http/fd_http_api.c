/*
 * The public API's request, response, loop and log functions
 * (core/api/fastd.h), over the engine's. A module built against fastd.h
 * sees a request only through these; they cost a call each, and copy what
 * a module hands them (names, values, bodies) into the request's pool, so
 * that a module may pass its stack or reuse its buffers at once.
 */
#include <strings.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"

fd_str_t fd_req_method(fd_request_t *r)
{
    return r->in.method;
}

fd_str_t fd_req_target(fd_request_t *r)
{
    return r->in.target;
}

fd_str_t fd_req_path(fd_request_t *r)
{
    return r->path;
}

fd_str_t fd_req_query(fd_request_t *r)
{
    return r->in.query;
}

fd_str_t fd_req_header(fd_request_t *r, const char *name)
{
    size_t n = strlen(name);
    unsigned i;

    for (i = 0; i < r->in.nheaders; i++) {
        const fd_http_header_t *h = &r->in.headers[i];
        if (h->name.len == n && strncasecmp(h->name.data, name, n) == 0)
            return h->value;
    }
    return fd_null_string;
}

fd_str_t fd_req_arg(fd_request_t *r, const char *name)
{
    const char *p = r->in.query.data, *end = p + r->in.query.len, *amp, *eq;
    size_t n = strlen(name);

    for (; p && p < end; p = amp + 1) {
        amp = memchr(p, '&', (size_t)(end - p));
        if (amp == NULL)
            amp = end;
        eq = memchr(p, '=', (size_t)(amp - p));
        if ((size_t)((eq ? eq : amp) - p) == n && memcmp(p, name, n) == 0)
            return eq ? (fd_str_t){(size_t)(amp - eq - 1), eq + 1}
                      : (fd_str_t){0, amp};
    }
    return fd_null_string;
}

fd_str_t fd_req_var(fd_request_t *r, const char *name)
{
    size_t n = strlen(name);
    const fd_var_t *v;
    fd_var_op_t op;
    char *tmp;

    /* the prefix families by their own ways */
    if (n > 5 && memcmp(name, "http_", 5) == 0) {
        char h[128];
        size_t i;
        if (n - 5 >= sizeof(h))
            return fd_null_string;
        for (i = 5; i <= n; i++)
            h[i - 5] = name[i] == '_' ? '-' : name[i];
        return fd_req_header(r, h);
    }
    if (n > 4 && memcmp(name, "arg_", 4) == 0)
        return fd_req_arg(r, name + 4);
    v = fd_var_find(name, n);
    if (v == NULL || (v->flags & FD_VAR_PREFIX) ||
        (tmp = fd_palloc(r->pool, FD_VAR_TMP)) == NULL)
        return fd_null_string;
    op = (fd_var_op_t){.kind = FD_VAR_OP_VAR, .flags = v->flags, .var = v,
                       .text = {n, name}, .name = {n, name}};
    return fd_var_value(r, &op, NULL, tmp);
}

fd_str_t fd_req_body(fd_request_t *r)
{
    return (fd_str_t){r->body ? r->body_len : 0, r->body};
}

void *fd_req_conf(fd_request_t *r)
{
    return fd_loc_conf(r->loc, r->loc->handler);
}

void *fd_req_alloc(fd_request_t *r, size_t size)
{
    return fd_palloc(r->pool, size);
}

void *fd_req_get_ctx(fd_request_t *r)
{
    return r->ctx;
}

void fd_req_set_ctx(fd_request_t *r, void *ctx)
{
    r->ctx = ctx;
}

/* --- the response --- */

static fd_str_t copy(fd_request_t *r, const char *data, size_t len)
{
    char *p = fd_pnalloc(r->pool, len + 1);

    if (p == NULL)
        return fd_null_string;
    memcpy(p, data, len);
    p[len] = '\0';
    return (fd_str_t){len, p};
}

void fd_resp_status(fd_request_t *r, int status)
{
    r->status = status;
}

int fd_resp_header(fd_request_t *r, const char *name, fd_str_t value)
{
    fd_str_t n = copy(r, name, strlen(name)), v = copy(r, value.data,
                                                       value.len);

    if (n.data == NULL || v.data == NULL)
        return FD_ERROR;
    return fd_http_header_add(r, n, v) == FD_OK ? FD_OK : FD_ERROR;
}

int fd_resp_content_type(fd_request_t *r, fd_str_t type)
{
    fd_str_t t = copy(r, type.data, type.len);

    if (t.data == NULL)
        return FD_ERROR;
    r->content_type = t;
    return FD_OK;
}

int fd_resp_body(fd_request_t *r, const void *data, size_t len)
{
    return fd_http_body_copy(r, data, len) == FD_OK ? FD_OK : FD_ERROR;
}

int fd_resp_send_header(fd_request_t *r)
{
    if (r->status == 0)
        r->status = 200;
    r->content_length = -1;
    return fd_http_send_header(r) == FD_ERROR ? FD_ERROR : FD_OK;
}

int fd_resp_write(fd_request_t *r, const void *data, size_t len, int last)
{
    fd_buf_t *b = NULL;

    if (len && (b = fd_buf_copy(r->pool, data, len)) == NULL)
        return FD_ERROR;
    return fd_http_output(r, b, last);
}

void fd_resp_on_drain(fd_request_t *r, void (*on_drain)(fd_request_t *r))
{
    r->on_drain = on_drain;
}

void fd_api_finish(fd_request_t *r, int rc)
{
    if (r->in_offload && fd_offload_on_pool_thread()) {
        /* from the handler itself, on its pool thread (a blocking
         * handler's database answered inline): the loop ends the request
         * when the handler returns (offload_work) */
        r->handler_rc = rc;
        r->api_finished = 1;
        return;
    }
    fd_request_finish(r, rc);
}

/* --- the loop --- */

struct fd_api_timer_s {
    fd_timer_t t; /* first: the engine's handler gets its address */
    void (*handler)(void *data);
    void *data;
};

static void api_timer_fire(fd_timer_t *t)
{
    fd_api_timer_t *at = (fd_api_timer_t *)t;
    void (*handler)(void *) = at->handler;
    void *data = at->data;

    free(at);
    handler(data);
}

fd_api_timer_t *fd_api_timer(uint64_t ms, void (*handler)(void *data),
                             void *data)
{
    fd_api_timer_t *at = calloc(1, sizeof(*at));

    if (at == NULL)
        return NULL;
    at->t.handler = api_timer_fire;
    at->handler = handler;
    at->data = data;
    fd_timer_add(&at->t, ms);
    return at;
}

void fd_api_timer_cancel(fd_api_timer_t *at)
{
    if (at == NULL)
        return;
    if (fd_timer_armed(&at->t))
        fd_timer_del(&at->t);
    free(at);
}

/* --- logging --- */

void fd_api_log(int level, int err, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;

    if (level < FD_LOG_ERR)
        level = FD_LOG_ERR; /* a module cannot speak for the server */
    if (level > fd_log->level)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fd_log_write(fd_log, level, err, "%s", buf);
}
