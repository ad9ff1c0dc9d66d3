/*
 * The public API's request, response, loop and log functions
 * (core/api/fastd.h), over the engine's. A module built against fastd.h
 * sees a request only through these; they cost a call each, and copy what
 * a module hands them (names, values, bodies) into the request's pool, so
 * that a module may pass its stack or reuse its buffers at once.
 */
#include <fcntl.h>
#include <sys/random.h>
#include <time.h>
#include <sys/epoll.h>
#include <strings.h>
#include <sys/stat.h>

#include "fd_core.h"
#include "fd_cluster.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_http_accept.h"
#include "fd_offload.h"
#include "fd_realip.h"
#include "fd_status.h"

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

/*
 * The body in pieces (fd_req_read). A streaming handler's
 * (FD_MODULE_STREAM_BODY) is pulled from the engine as fd_http_body_pull
 * has it, which leaves what is not read in the socket or the HTTP/2
 * window; the engine applies neither max_body_size to a body of unknown
 * length nor body_timeout to such a request (its module's timers rule),
 * so both are here: the bytes are counted, and a timer runs while the
 * module waits and nothing comes. Another handler's body was read whole:
 * it is handed out from memory.
 */
struct fd_api_body_s {
    fd_timer_t timer; /* body_timeout while the module waits */
    fd_request_t *r;
    void (*on_readable)(fd_request_t *r);
    uint64_t got;     /* bytes handed out */
};

static void body_timer_drop(void *data)
{
    struct fd_api_body_s *ab = data;

    if (fd_timer_armed(&ab->timer))
        fd_timer_del(&ab->timer);
}

/* the client sent nothing for body_timeout while the module waited */
static void body_timeout(fd_timer_t *t)
{
    struct fd_api_body_s *ab = (struct fd_api_body_s *)t;
    fd_request_t *r = ab->r;

    if (r->done)
        return;
    fd_log_error(FD_LOG_INFO, 0, "client timed out sending the request "
                 "body (body_timeout)");
    r->body_error = 408;
    r->keepalive = 0;
    if (ab->on_readable)
        ab->on_readable(r);
}

static void body_on_body(fd_request_t *r)
{
    if (r->api_body && r->api_body->on_readable)
        r->api_body->on_readable(r);
}

static struct fd_api_body_s *body_state(fd_request_t *r)
{
    struct fd_api_body_s *ab = r->api_body;

    if (ab)
        return ab;
    ab = fd_pcalloc(r->pool, sizeof(*ab));
    if (ab == NULL || fd_pool_cleanup_add(r->pool, body_timer_drop, ab) ==
                          NULL)
        return NULL;
    ab->timer.handler = body_timeout;
    ab->r = r;
    r->api_body = ab;
    return ab;
}

static ssize_t body_fail(fd_request_t *r, int status)
{
    if (r->body_error == 0)
        r->body_error = status;
    r->keepalive = 0;
    return FD_ERROR;
}

ssize_t fd_req_read(fd_request_t *r, void *buf, size_t size)
{
    struct fd_api_body_s *ab = body_state(r);
    uint64_t max = r->loc->max_body_size;
    ssize_t n;

    if (ab == NULL)
        return body_fail(r, 500);
    if (r->body_error)
        return FD_ERROR;
    if (!(r->loc->handler_flags & FD_MODULE_STREAM_BODY)) {
        /* read whole before the handler ran */
        size_t left = (r->body ? r->body_len : 0) - (size_t)ab->got;
        n = (ssize_t)fd_min(left, size);
        memcpy(buf, r->body + ab->got, (size_t)n);
        ab->got += (uint64_t)n;
        return n;
    }
    if (r->in.content_length <= 0 && !r->in.chunked)
        return 0;
    /* never more than one byte past the limit: that byte says 413 */
    size = (size_t)fd_min((uint64_t)size, max + 1 - ab->got);
    n = size ? fd_http_body_pull(r, buf, size) : 0;
    if (n > 0) {
        body_timer_drop(ab);
        ab->got += (uint64_t)n;
        if (ab->got > max) {
            fd_log_error(FD_LOG_INFO, 0, "client body over max_body_size "
                         "(%zu)", r->loc->max_body_size);
            return body_fail(r, 413);
        }
        return n;
    }
    if (n == 0)
        return 0;
    if (n == FD_AGAIN) {
        if (!r->h2 && r->c->s.eof) {
            fd_log_error(FD_LOG_INFO, 0, "client closed the connection "
                         "while sending the request body");
            return body_fail(r, 400);
        }
        if (!fd_timer_armed(&ab->timer))
            fd_timer_add(&ab->timer, fd_worker->cycle->http.body_timeout);
        return FD_AGAIN;
    }
    return body_fail(r, 400); /* bad framing, or the stream is gone */
}

void fd_req_on_readable(fd_request_t *r, void (*on_readable)(fd_request_t *r))
{
    struct fd_api_body_s *ab = body_state(r);

    if (ab == NULL)
        return; /* the next fd_req_read() fails */
    ab->on_readable = on_readable;
    r->on_body = on_readable ? body_on_body : NULL;
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

static void close_fd(void *data)
{
    close((int)(intptr_t)data);
}

int fd_resp_file_fd(fd_request_t *r, int fd, int64_t offset, int64_t length,
                    int own)
{
    struct stat st;

    if (own && fd_pool_cleanup_add(r->pool, close_fd, (void *)(intptr_t)fd)
                   == NULL) {
        close(fd);
        return 500;
    }
    if (fstat(fd, &st) < 0) {
        fd_log_error(FD_LOG_ERR, errno, "fstat() of a module's file failed");
        return 500;
    }
    if (!S_ISREG(st.st_mode))
        return 403;
    if (offset < 0 || offset > st.st_size)
        return 416;
    if (length < 0 || length > st.st_size - offset)
        length = st.st_size - offset;
    if (r->last_modified == -1)
        r->last_modified = st.st_mtime;
    if (r->in.method_id == FD_HTTP_GET || r->in.method_id == FD_HTTP_HEAD)
        return fd_http_send_file(r, fd, (off_t)offset, length, 16);
    /* conditionals and ranges are a GET's: another method's answer is
     * the bytes */
    r->status = 200;
    r->content_length = length;
    if (length > 0)
        fd_http_body_append(r, fd_buf_file(r->pool, fd, (off_t)offset,
                                           (off_t)(offset + length)));
    return FD_OK;
}

int fd_resp_file(fd_request_t *r, const char *path, int64_t offset,
                 int64_t length)
{
    const char *full = path;
    int fd;

    if (path[0] != '/') {
        size_t n = strlen(path), rl = r->loc->root ? r->loc->root_len : 0;
        char *p = fd_pnalloc(r->pool, rl + n + 2);
        if (p == NULL)
            return 500;
        memcpy(p, r->loc->root, rl);
        p[rl] = '/';
        memcpy(p + rl + 1, path, n + 1);
        full = p;
    }
    fd = open(full, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 404;
        if (errno == EACCES)
            return 403;
        fd_log_error(FD_LOG_ERR, errno, "open(\"%s\") failed", full);
        return 500;
    }
    return fd_resp_file_fd(r, fd, offset, length, 1);
}

int fd_resp_body_static(fd_request_t *r, const void *data, size_t len)
{
    return fd_http_body_set(r, data, len) == FD_OK ? FD_OK : FD_ERROR;
}

void fd_resp_content_type_static(fd_request_t *r, fd_str_t type)
{
    r->content_type = type;
}

int fd_resp_header_static(fd_request_t *r, fd_str_t name, fd_str_t value)
{
    return fd_http_header_add(r, name, value) == FD_OK ? FD_OK : FD_ERROR;
}

void fd_resp_on_drain(fd_request_t *r, void (*on_drain)(fd_request_t *r))
{
    r->on_drain = on_drain;
}

void fd_api_finish(fd_request_t *r, int rc)
{
    uint64_t id = fd_log_conn_id;

    if (r->api_body)
        body_timer_drop(r->api_body);
    if (r->in_offload && fd_offload_on_pool_thread()) {
        /* from the handler itself, on its pool thread (a blocking
         * handler's database answered inline): the loop ends the request
         * when the handler returns (offload_work) */
        r->handler_rc = rc;
        r->api_finished = 1;
        return;
    }
    /* from a module's timer or I/O: the lines name the connection, as
     * a handler's do (r may be gone after: the saved id goes back) */
    if (id == 0 && r->c)
        fd_log_conn_id = r->c->id;
    fd_request_finish(r, rc);
    fd_log_conn_id = id;
}

/* --- the loop --- */

struct fd_api_timer_s {
    fd_timer_t t; /* first: the engine's handler gets its address */
    void (*handler)(void *data);
    void *data;
    int kept;     /* 1.4: fd_api_timer_new's, not freed when it fires */
};

static void api_timer_fire(fd_timer_t *t)
{
    fd_api_timer_t *at = (fd_api_timer_t *)t;
    void (*handler)(void *) = at->handler;
    void *data = at->data;

    if (!at->kept)
        free(at);
    handler(data);
}

fd_api_timer_t *fd_api_timer_new(void (*handler)(void *data), void *data)
{
    fd_api_timer_t *at = calloc(1, sizeof(*at));

    if (at == NULL)
        return NULL;
    at->t.handler = api_timer_fire;
    at->handler = handler;
    at->data = data;
    at->kept = 1;
    return at;
}

/* a one-shot timer: freed when it fires */
fd_api_timer_t *fd_api_timer(uint64_t ms, void (*handler)(void *data),
                             void *data)
{
    fd_api_timer_t *at = fd_api_timer_new(handler, data);

    if (at == NULL)
        return NULL;
    at->kept = 0;
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

/* --- 1.2: phase modules --- */

void *fd_req_conf_of(fd_request_t *r, const fd_api_module_t *self)
{
    return r->loc ? r->loc->mconf[self->id] : NULL;
}

void *fd_req_get_ctx_of(fd_request_t *r, const fd_api_module_t *self)
{
    return r->mctx ? r->mctx[self->id] : NULL;
}

int fd_req_set_ctx_of(fd_request_t *r, const fd_api_module_t *self,
                      void *ctx)
{
    void **slot = fd_request_ctx(r, fd_modules[self->id]);

    if (slot == NULL)
        return FD_ERROR;
    *slot = ctx;
    return FD_OK;
}

void fd_api_continue(fd_request_t *r, const fd_api_module_t *self)
{
    fd_http_access_continue(r, fd_modules[self->id]);
}

int fd_resp_error(fd_request_t *r, int status)
{
    return fd_http_error_page(r, status) == FD_OK ? FD_OK : FD_ERROR;
}

int fd_api_conf_at_key(const void *conf, const char *key)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_conf_at_key(cf, conf, key) : 0;
}

const char *fd_api_conf_path(const char *path)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_conf_path(cf, path) : NULL;
}

void *fd_api_conf_alloc(size_t size)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_pcalloc(cf->pool, size) : NULL;
}

char *fd_api_conf_strndup(const char *s, size_t n)
{
    char *p = fd_api_conf_alloc(n + 1);

    if (p == NULL) {
        fd_api_conf_error("out of memory");
        return NULL;
    }
    memcpy(p, s, n);
    return p; /* the pool's memory is zeroed: p[n] is the NUL */
}

void *fd_api_conf_grow(const void *array, size_t n, size_t size)
{
    void *p = fd_api_conf_alloc((n + 1) * size);

    if (p == NULL) {
        fd_api_conf_error("out of memory");
        return NULL;
    }
    if (n)
        memcpy(p, array, n * size);
    return p;
}

/* --- 1.2: the client --- */

void fd_req_client(fd_request_t *r, fd_api_addr_t *a)
{
    fd_request_addr(r, a);
}

int fd_api_cidr_match(const fd_api_cidr_t *set, unsigned n,
                      const fd_api_addr_t *a)
{
    return fd_cidr_match(set, n, a);
}

/* --- 1.2: the offload pool --- */

int fd_api_offload(fd_request_t *r, void (*work)(fd_request_t *r),
                   void (*done)(fd_request_t *r))
{
    return fd_offload(r, work, done) == FD_OK ? FD_OK : FD_ERROR;
}

void fd_api_pool_publish_to(fd_api_pool_stats_t *area)
{
    fd_offload_publish_to(area);
}

/* --- 1.2: figures --- */

void fd_api_status_counter(fd_api_status_t *st, const char *name,
                           const char *help, const char *labels, uint64_t v)
{
    fd_status_counter((fd_status_t *)st, name, help, labels, v);
}

void fd_api_status_gauge(fd_api_status_t *st, const char *name,
                         const char *help, const char *labels, uint64_t v)
{
    fd_status_gauge((fd_status_t *)st, name, help, labels, v);
}

void *fd_api_status_area(const fd_api_module_t *self)
{
    return fd_stats ? fd_stats_area(fd_stats, fd_modules[self->id]) : NULL;
}

uint64_t fd_api_now_msec(void)
{
    return fd_current_msec;
}

int64_t fd_api_unix_sec(void)
{
    return (int64_t)fd_current_sec;
}

/* --- 1.3: variables compiled once --- */

/* The handle is the engine's op for "$name": fd_var_compile() parses it
 * as every script's (the $http_ and $arg_ families, a did-you-mean for an
 * unknown name), and fd_var_value() evaluates it as the access log does. */
_Static_assert(FD_API_VAR_TMP >= FD_VAR_TMP,
               "a getter's scratch fits the module's buffer");

const fd_api_cvar_t *fd_api_var_compile(const char *name)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_var_script_t s;
    size_t n = strlen(name);
    char *src;

    if (cf == NULL)
        return NULL;
    if (n == 0 || name[0] == '$' ||
        (src = fd_pnalloc(cf->pool, n + 2)) == NULL) {
        fd_conf_error(cf, n && name[0] == '$'
                              ? "variable \"%s\": its name, without the \"$\""
                              : "variable \"%s\": no name, or out of memory",
                      name);
        return NULL;
    }
    src[0] = '$';
    memcpy(src + 1, name, n + 1);
    if (fd_var_compile(cf, &s, src, n + 1, 0, "variable") != FD_OK)
        return NULL;
    if (s.n != 1 || s.ops[0].kind != FD_VAR_OP_VAR) {
        fd_conf_error(cf, "variable \"%s\": not one variable's name", name);
        return NULL;
    }
    return (const fd_api_cvar_t *)&s.ops[0];
}

fd_str_t fd_req_var_value(fd_request_t *r, const fd_api_cvar_t *v, char *tmp)
{
    return fd_var_value(r, (const fd_var_op_t *)v, NULL, tmp);
}

unsigned fd_api_var_flags(const fd_api_cvar_t *v)
{
    return ((const fd_var_op_t *)v)->flags & FD_VAR_NUMBER;
}

/* --- 1.4: scripts, captures, the URI routed again --- */

/* The handles are the engine's: a script is an fd_var_script_t, a part
 * one of its ops, captures laid out as fd_var_caps_t (asserted). */
_Static_assert(sizeof(fd_api_captures_t) == sizeof(fd_var_caps_t) &&
                   offsetof(fd_api_captures_t, ovector) ==
                       offsetof(fd_var_caps_t, ov) &&
                   offsetof(fd_api_captures_t, n) ==
                       offsetof(fd_var_caps_t, n) &&
                   offsetof(fd_api_captures_t, regex) ==
                       offsetof(fd_var_caps_t, re),
               "the API's captures are the engine's");
_Static_assert((int)FD_API_VAR_URLSAFE == (int)FD_VAR_URLSAFE &&
                   (int)FD_API_VAR_NUMBER == (int)FD_VAR_NUMBER &&
                   (int)FD_API_PART_TEXT == (int)FD_VAR_OP_LIT &&
                   (int)FD_API_PART_VAR == (int)FD_VAR_OP_VAR &&
                   (int)FD_API_PART_CAPTURE == (int)FD_VAR_OP_CAP &&
                   (int)FD_API_PART_NAMED == (int)FD_VAR_OP_NAMED,
               "the API's part kinds and flags are the engine's");

const fd_api_script_t *fd_api_script_compile(const char *src, size_t len,
                                             unsigned flags,
                                             const char *what)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_var_script_t *s;

    if (cf == NULL || (s = fd_pcalloc(cf->pool, sizeof(*s))) == NULL)
        return NULL;
    if (fd_var_compile(cf, s, src, len,
                       flags & FD_API_SCRIPT_CAPTURES ? FD_VAR_CAPTURES : 0,
                       what) != FD_OK)
        return NULL;
    return (const fd_api_script_t *)s;
}

unsigned fd_api_script_parts(const fd_api_script_t *s)
{
    return ((const fd_var_script_t *)s)->n;
}

int fd_api_script_part(const fd_api_script_t *s, unsigned i,
                       fd_api_part_t *part)
{
    const fd_var_script_t *vs = (const fd_var_script_t *)s;

    if (i >= vs->n)
        return FD_ERROR;
    *part = (fd_api_part_t){.kind = vs->ops[i].kind,
                            .flags = vs->ops[i].flags,
                            .name = vs->ops[i].kind == FD_VAR_OP_LIT ||
                                            vs->ops[i].kind == FD_VAR_OP_NAMED
                                        ? vs->ops[i].text
                                        : vs->ops[i].name};
    return FD_OK;
}

fd_str_t fd_req_script_value(fd_request_t *r, const fd_api_script_t *s,
                             unsigned i, const fd_api_captures_t *caps,
                             char *tmp)
{
    return fd_var_value(r, &((const fd_var_script_t *)s)->ops[i],
                        (const fd_var_caps_t *)caps, tmp);
}

const char *fd_api_var_hint(const char *name, char *buf, size_t size)
{
    return fd_var_hint(name, strlen(name), buf, size);
}

const void *fd_api_conf_regex(void)
{
    const fd_http_loc_t *loc = fd_dso_conf_loc();

    return loc ? loc->regex : NULL;
}

void fd_api_conf_pos(fd_api_conf_pos_t *pos)
{
    fd_conf_t *cf = fd_dso_conf();

    *pos = cf ? (fd_api_conf_pos_t){cf->file, cf->line}
              : (fd_api_conf_pos_t){NULL, 0};
}

void fd_api_conf_at(const fd_api_conf_pos_t *pos)
{
    fd_conf_t *cf = fd_dso_conf();

    if (cf && pos->file) {
        cf->file = pos->file;
        cf->line = pos->line;
    }
}

int fd_api_conf_cleanup(void (*fn)(void *data), void *data)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf && fd_pool_cleanup_add(cf->pool, fn, data) ? FD_OK : FD_ERROR;
}

const fd_api_loc_t *fd_req_loc(fd_request_t *r)
{
    return (const fd_api_loc_t *)r->loc;
}

int fd_req_loc_named(fd_request_t *r)
{
    return r->loc && r->loc->kind == FD_LOC_NAMED;
}

unsigned fd_req_redirects(fd_request_t *r)
{
    return r->redirects;
}

void fd_req_captures(fd_request_t *r, fd_api_captures_t *caps)
{
    *caps = (fd_api_captures_t){.subject = r->path.data,
                                .ovector = r->captures,
                                .n = r->captures ? r->ncaptures : 0,
                                .regex = r->captures ? r->loc->regex : NULL};
}

int fd_req_set_uri(fd_request_t *r, fd_str_t path, fd_str_t args)
{
    char *norm = fd_pnalloc(r->pool, path.len + 2);
    fd_sbuf_t sb;
    size_t n;

    if (norm == NULL)
        return 500;
    if (path.len == 0 || path.data[0] != '/' ||
        fd_http_normalize_path(path, norm, &n) != FD_OK) {
        fd_log_error(FD_LOG_ERR, 0, "bad new URI \"%.*s\"",
                     (int)fd_min(path.len, 256), path.data);
        return 500;
    }
    norm[n] = '\0';
    /* the encoded form too, for handlers that forward the URI */
    if (fd_sbuf_init(&sb, r->pool, n + 16) != FD_OK)
        return 500;
    fd_sbuf_add_escaped_path(&sb, norm, n);
    if (fd_sbuf_failed(&sb))
        return 500;
    r->path = (fd_str_t){n, norm};
    r->in.path_raw = fd_sbuf_str(&sb);
    r->in.query = args;
    r->uri_changed = 1;
    return FD_OK;
}

int fd_req_reroute(fd_request_t *r, int count)
{
    int rc;

    if (count) {
        if ((rc = fd_http_redirect_count(r, r->path)) != FD_OK)
            return rc;
    } else {
        r->ncaptures = 0;
        r->captures = NULL;
    }
    r->loc = fd_http_find_location(r);
    return FD_OK;
}

/* --- 1.4: sections, clean-ups, aborts, posted calls --- */

/* the configuration being loaded (a module's hook runs in it), else the
 * worker's */
static fd_cycle_t *api_cycle(void)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf          ? cf->cycle
           : fd_worker ? fd_worker->cycle
                       : fd_dso_cycle; /* a helper's, fastd -s CMD's */
}

/* a [type NAME] of a public-API module's: an engine module's section
 * ([upstream]) is an engine struct, not for a module to see */
static int api_section_of(const fd_conf_section_t *s, const char *type)
{
    return s->module->section && strcmp(s->module->section, type) == 0 &&
           fd_dso_module(s->module);
}

void *fd_api_section(const char *type, const char *name)
{
    fd_cycle_t *cy = api_cycle();
    fd_conf_section_t *s;

    for (s = cy ? cy->sections : NULL; s; s = s->next)
        if (api_section_of(s, type) && strcmp(s->name, name) == 0)
            return s->conf;
    return NULL;
}

void fd_api_section_each(const char *type,
                         void (*fn)(const char *name, void *conf, void *data),
                         void *data)
{
    fd_cycle_t *cy = api_cycle();
    fd_conf_section_t *s;

    for (s = cy ? cy->sections : NULL; s; s = s->next)
        if (api_section_of(s, type))
            fn(s->name, s->conf, data);
}

int fd_req_cleanup(fd_request_t *r, void (*fn)(void *data), void *data)
{
    return fd_pool_cleanup_add(r->pool, fn, data) ? FD_OK : FD_ERROR;
}

fd_api_req_pt fd_req_on_abort(fd_request_t *r, fd_api_req_pt on_abort)
{
    fd_api_req_pt prev = r->on_abort;

    r->on_abort = on_abort;
    return prev;
}

struct fd_api_posted_s {
    fd_posted_t p;
    int posted;
    void (*fn)(void *data);
    void *data;
};

static void api_posted_run(void *data)
{
    fd_api_posted_t *ap = data;

    if (ap->fn == NULL) { /* freed while posted */
        free(ap);
        return;
    }
    ap->posted = 0;
    ap->fn(ap->data);
}

fd_api_posted_t *fd_api_posted_new(void (*fn)(void *data), void *data)
{
    fd_api_posted_t *ap = calloc(1, sizeof(*ap));

    if (ap == NULL)
        return NULL;
    ap->p = (fd_posted_t){.handler = api_posted_run, .data = ap};
    ap->fn = fn;
    ap->data = data;
    return ap;
}

/* A posted one is on the loop's list: it goes when its turn comes */
void fd_api_posted_free(fd_api_posted_t *ap)
{
    if (ap == NULL)
        return;
    if (ap->posted) {
        ap->fn = NULL;
        return;
    }
    free(ap);
}

void fd_api_post(fd_api_posted_t *ap)
{
    if (!ap->posted) {
        ap->posted = 1;
        fd_event_post(&ap->p);
    }
}

void *fd_api_status_named_entry(void *entries, size_t size, unsigned n,
                                const char *name, size_t name_size)
{
    return fd_status_named_entry(entries, size, n, name, name_size);
}

/* --- 1.4: logs of a module's own --- */

void *fd_req_log_conf_of(fd_request_t *r, const fd_api_module_t *self)
{
    const fd_http_server_t *s;

    if (r->loc)
        return r->loc->mconf[self->id];
    /* failed before routing: the server's (or the address' default) */
    s = r->server ? r->server : fd_conn_listening(r->c)->servers[0];
    return s->root_loc->mconf[self->id];
}

int fd_api_var_exists(const char *name)
{
    return fd_var_find(name, strlen(name)) != NULL;
}

struct loc_each {
    unsigned id;
    void (*fn)(void *conf, void *data);
    void *data;
};

static void loc_each_one(fd_http_loc_t *loc, void *data)
{
    struct loc_each *le = data;

    le->fn(loc->mconf[le->id], le->data);
}

void fd_api_loc_each(const fd_api_module_t *self,
                     void (*fn)(void *conf, void *data), void *data)
{
    struct loc_each le = {self->id, fn, data};
    fd_cycle_t *cy = api_cycle();

    if (cy)
        fd_http_each_loc(cy, loc_each_one, &le);
}

int fd_api_conf_worker_file(const char *path)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_dso_worker_file(cf, path) : FD_ERROR;
}

int64_t fd_api_parse_size(const char *s)
{
    return fd_conf_parse_size(s);
}

int64_t fd_api_parse_msec(const char *s)
{
    return fd_conf_parse_msec(s);
}

/* --- 1.4: the loop's descriptors, timers that are kept, the pool --- */


/* fd_timer_add moves an armed timer in the heap: no delete and insert */
void fd_api_timer_set(fd_api_timer_t *at, uint64_t ms)
{
    fd_timer_add(&at->t, ms);
}

void fd_api_timer_unset(fd_api_timer_t *at)
{
    if (fd_timer_armed(&at->t))
        fd_timer_del(&at->t);
}

int fd_api_timer_is_set(const fd_api_timer_t *at)
{
    return fd_timer_armed(&at->t);
}

struct fd_api_io_s {
    fd_event_t ev; /* first: the loop hands its address to io_event */
    void (*handler)(void *data, unsigned events);
    void *data;
    uint32_t events;
    int registered;
    fd_posted_t gone; /* fd_api_io_free: the free, after the batch */
};

static void io_event(fd_event_t *ev, uint32_t events)
{
    fd_api_io_t *io = (fd_api_io_t *)ev;

    io->handler(io->data, (events & EPOLLIN ? FD_API_IO_IN : 0) |
                              (events & EPOLLOUT ? FD_API_IO_OUT : 0) |
                              (events & (EPOLLHUP | EPOLLERR)
                                   ? FD_API_IO_ERR | FD_API_IO_IN
                                   : 0));
}

fd_api_io_t *fd_api_io_new(void (*handler)(void *data, unsigned events),
                           void *data)
{
    fd_api_io_t *io = calloc(1, sizeof(*io));

    if (io == NULL)
        return NULL;
    io->ev.fd = -1;
    io->ev.handler = io_event;
    io->handler = handler;
    io->data = data;
    return io;
}

int fd_api_io_watch(fd_api_io_t *io, int fd, unsigned events)
{
    uint32_t ev = (events & FD_API_IO_IN ? EPOLLIN : 0) |
                  (events & FD_API_IO_OUT ? EPOLLOUT : 0);

    if (io->registered && io->ev.fd != fd) {
        fd_event_del(&io->ev);
        io->registered = 0;
    }
    io->ev.fd = fd;
    if (!io->registered) {
        if (fd < 0 || fd_event_add(&io->ev, ev) != 0)
            return FD_ERROR;
        io->registered = 1;
    } else if (io->events != ev && fd_event_mod(&io->ev, ev) != 0) {
        return FD_ERROR;
    }
    io->events = ev;
    return FD_OK;
}

void fd_api_io_stop(fd_api_io_t *io)
{
    if (io->registered) {
        /* out of the loop now: io_uring holds a registered descriptor
         * open until its cancel is submitted. Submitted only: a turn of
         * the loop here (fd_event_flush) would run other handlers inside
         * this one's, and take new completions into the batch the loop
         * is running, losing its events (tests/modules_io_free.t) */
        fd_event_del(&io->ev);
        fd_event_submit();
        io->registered = 0;
    }
    io->ev.fd = -1;
}

static void io_gone(void *data)
{
    free(data);
}

/*
 * Not at once: epoll hands out a whole batch of events before it runs
 * any, so one for io may follow the handler that frees it (a pool closing
 * a connection's sibling). Stopped, its descriptor is -1, which the loop
 * reads to drop such an event (fd_event_turn), as it does for a closed
 * connection, whose struct stays until reused; io is freed where the
 * loop runs what was posted, after the batch. (io_uring drops them by
 * the slot's generation, without reading io.)
 */
void fd_api_io_free(fd_api_io_t *io)
{
    if (io == NULL)
        return;
    fd_api_io_stop(io);
    io->gone = (fd_posted_t){.handler = io_gone, .data = io};
    fd_event_post(&io->gone);
}

int fd_api_offload_call(void *data, void (*work)(void *data),
                        void (*done)(void *data))
{
    return fd_offload_call(data, work, done) == FD_OK ? FD_OK : FD_ERROR;
}

int fd_api_on_pool_thread(void)
{
    return fd_offload_on_pool_thread();
}

void fd_resp_retry_after(fd_request_t *r)
{
    r->retry_after = 1;
}

void fd_resp_refused(fd_request_t *r)
{
    r->refused = 1;
}

int fd_api_conf_test(void)
{
    return fd_conf_test;
}

int fd_api_conf_user(uid_t *uid, gid_t *gid, const char **name)
{
    fd_cycle_t *cy = api_cycle();

    if (cy == NULL || !cy->main.drop)
        return 0;
    *uid = cy->main.uid;
    *gid = cy->main.gid;
    *name = cy->main.user;
    return 1;
}

int fd_api_mkdirs(const char *path, mode_t mode, long *made)
{
    char *p = strdup(path);
    int rc, err;

    if (p == NULL)
        return FD_ERROR;
    rc = fd_mkdirs(p, 0, mode, made);
    err = errno;
    free(p);
    errno = err;
    return rc == FD_OK ? FD_OK : FD_ERROR;
}

int fd_api_conf_bounds(const void *conf, const char *key, int64_t v,
                       int64_t min, int64_t max, int msec)
{
    const char *ms = msec ? "ms" : "";
    char lo[32], hi[32], val[32];

    if (v >= min && v <= max)
        return FD_OK;
    fd_api_conf_at_key(conf, key);
    if (msec == FD_API_SIZE) { /* 1.5: as fastd's own size keys say it */
        fd_conf_fmt_bound(lo, sizeof(lo), FD_CONF_SIZE, min);
        fd_conf_fmt_bound(hi, sizeof(hi), FD_CONF_SIZE, max);
        fd_conf_fmt_bound(val, sizeof(val), FD_CONF_SIZE, v);
        if (min == 0)
            fd_api_conf_error("\"%s\" is at most %s, not \"%s\"", key, hi,
                              val);
        else
            fd_api_conf_error("\"%s\" must be %s .. %s, not \"%s\"", key,
                              lo, hi, val);
        return FD_ERROR;
    }
    if (min == 0)
        fd_api_conf_error("\"%s\" is at most %lld%s, not \"%lld%s\"", key,
                          (long long)max, ms, (long long)v, ms);
    else
        fd_api_conf_error("\"%s\" must be %lld%s .. %lld%s, not \"%lld%s\"",
                          key, (long long)min, ms, (long long)max, ms,
                          (long long)v, ms);
    return FD_ERROR;
}

/* --- 1.4: response filters --- */

_Static_assert(FD_API_ENC_GZIP == FD_ENC_GZIP && FD_API_ENC_BR == FD_ENC_BR,
               "the API's codings are the engine's");

int fd_resp_get_status(fd_request_t *r)
{
    return r->status;
}

fd_str_t fd_resp_get_content_type(fd_request_t *r)
{
    return r->content_type;
}

fd_str_t fd_resp_get_header(fd_request_t *r, const char *name, unsigned i)
{
    size_t n = strlen(name);
    const fd_http_header_out_t *h;

    for (h = r->headers_out; h; h = h->next)
        if (h->name.len == n && strncasecmp(h->name.data, name, n) == 0 &&
            i-- == 0)
            return h->value;
    return fd_null_string;
}

int fd_resp_is_streamed(fd_request_t *r)
{
    return r->streamed;
}

int fd_resp_is_header_only(fd_request_t *r)
{
    return r->header_only;
}

int64_t fd_resp_get_length(fd_request_t *r)
{
    return r->content_length;
}

unsigned fd_resp_remove_header(fd_request_t *r, const char *name)
{
    size_t n = strlen(name);
    fd_http_header_out_t **pp = &r->headers_out, *h;
    unsigned taken = 0;

    while ((h = *pp) != NULL) {
        if (h->name.len != n || strncasecmp(h->name.data, name, n) != 0) {
            pp = &h->next;
            continue;
        }
        *pp = h->next;
        if (r->headers_out_last == &h->next)
            r->headers_out_last = pp;
        taken++;
    }
    return taken;
}

/* "W/" before a strong validator v, in r's memory */
static int weaken(fd_request_t *r, fd_str_t *v)
{
    char *w;

    if (v->len == 0 || v->data[0] != '"')
        return FD_OK;
    if ((w = fd_pnalloc(r->pool, v->len + 2)) == NULL)
        return FD_ERROR;
    memcpy(w, "W/", 2);
    memcpy(w + 2, v->data, v->len);
    *v = (fd_str_t){v->len + 2, w};
    return FD_OK;
}

int fd_resp_weaken_etag(fd_request_t *r)
{
    fd_http_header_out_t *h;

    if (weaken(r, &r->etag) != FD_OK)
        return FD_ERROR;
    /* a proxied one is a header of its own */
    for (h = r->headers_out; h; h = h->next)
        if (fd_str_caseeq_lit(h->name, "ETag"))
            return weaken(r, &h->value);
    return FD_OK;
}

void fd_resp_length_unknown(fd_request_t *r)
{
    r->content_length = -1;
    if (r->header_only)
        r->length_unknown = 1;
}

static fd_api_piece_t piece_of(const fd_buf_t *b)
{
    if (b->file_fd >= 0)
        return (fd_api_piece_t){.len = (size_t)(b->file_last - b->file_pos),
                                .fd = b->file_fd,
                                .offset = (int64_t)b->file_pos};
    return (fd_api_piece_t){.data = b->pos, .len = fd_buf_size(b),
                            .fd = -1};
}

unsigned fd_resp_get_pieces(fd_request_t *r, fd_api_piece_t *p,
                            unsigned max)
{
    const fd_buf_t *b;
    unsigned n = 0;

    for (b = r->out; b; b = b->next, n++)
        if (n < max)
            p[n] = piece_of(b);
    return n;
}

/* Body filters of modules in a chain (sub_filter, then gzip): what
 * filter i passes on with fd_resp_filter_output() is gathered (copied:
 * the filter may reuse its buffer) and handed to filter i + 1 as one
 * piece when filter i returns, so that each call of one is one call of
 * the next and a flush point stays one. The gathering buffer of a link
 * grows by doubling, at most to twice the most one call has passed on. */
#define API_FILTERS_MAX 4

typedef struct {
    char *data;
    size_t len, cap;
} api_link_t;

typedef struct fd_api_filters_s {
    fd_api_body_filter_pt fn[API_FILTERS_MAX];
    api_link_t out[API_FILTERS_MAX - 1]; /* fn[i]'s output, for fn[i + 1] */
    unsigned n;                          /* filters set */
    unsigned cur;                        /* the one running */
} fd_api_filters_t;

static int api_chain(fd_request_t *r, const fd_api_piece_t *p, unsigned n,
                     int last)
{
    fd_api_filters_t *f = r->api_filters;
    fd_api_piece_t one;
    unsigned i;
    int rc;

    for (i = 0;; i++) {
        f->cur = i;
        if (i + 1 < f->n)
            f->out[i].len = 0;
        rc = f->fn[i](r, p, n, last);
        if (rc != FD_OK || i + 1 >= f->n)
            return rc;
        one = (fd_api_piece_t){.data = f->out[i].data, .len = f->out[i].len,
                               .fd = -1};
        p = &one;
        n = one.len > 0;
    }
}

/* The engine's body filter in front of the modules': the chain as pieces */
static int api_body_filter(fd_request_t *r, fd_buf_t *in, int last)
{
    fd_api_piece_t local[16], *p = local;
    const fd_buf_t *b;
    unsigned n = 0;

    for (b = in; b; b = b->next)
        n++;
    if (n > fd_nelems(local) &&
        (p = fd_palloc(r->pool, n * sizeof(*p))) == NULL)
        return FD_ERROR;
    for (b = in, n = 0; b; b = b->next)
        p[n++] = piece_of(b);
    return api_chain(r, p, n, last);
}

int fd_resp_body_filter(fd_request_t *r, fd_api_body_filter_pt filter)
{
    fd_api_filters_t *f = r->api_filters;

    /* an engine's own body filter, or a full chain */
    if ((r->body_filter && f == NULL) || (f && f->n == API_FILTERS_MAX))
        return FD_DECLINED;
    if (f == NULL) {
        if ((f = fd_pcalloc(r->pool, sizeof(*f))) == NULL)
            return FD_ERROR;
        r->api_filters = f;
    }
    f->fn[f->n++] = filter;
    r->body_filter = api_body_filter;
    r->content_length = -1;
    return FD_OK;
}

int fd_resp_has_body_filter(fd_request_t *r)
{
    return r->body_filter != NULL;
}

int fd_resp_filter_output(fd_request_t *r, const void *data, size_t len)
{
    fd_api_filters_t *f = r->api_filters;
    fd_buf_t b = {.pos = (char *)(uintptr_t)data,
                  .last = (char *)(uintptr_t)data + len, .file_fd = -1};
    api_link_t *l;
    char *more;
    size_t cap;

    if (f == NULL || f->cur + 1 >= f->n)
        return fd_http_output_body(r, &b);
    l = &f->out[f->cur];
    if (len > l->cap - l->len) {
        for (cap = l->cap ? l->cap * 2 : 16384; cap < l->len + len; cap *= 2)
            ;
        if ((more = fd_pnalloc(r->pool, cap)) == NULL)
            return FD_ERROR;
        if (l->len)
            memcpy(more, l->data, l->len);
        l->data = more;
        l->cap = cap;
    }
    memcpy(l->data + l->len, data, len);
    l->len += len;
    return FD_OK;
}

void fd_resp_remove_validators(fd_request_t *r)
{
    r->last_modified = -1;
    r->etag = fd_null_string;
    fd_resp_remove_header(r, "Last-Modified");
    fd_resp_remove_header(r, "ETag");
}

unsigned fd_req_accept_encoding(fd_request_t *r, unsigned offered)
{
    return fd_http_accept_encoding(r->in.accept_encoding, offered);
}

/* --- 1.5: shared memory, hashing, scripts whole, enums, Redis --- */

void *fd_api_shm_zone(const fd_api_module_t *self, const char *name,
                      size_t size, int *fresh)
{
    /* the kind is the module's name: its descriptor lives as long as
     * the master (a loaded module is never unloaded) */
    return fd_shm_zone(self->name, name, size, fresh);
}

void fd_api_random(void *buf, size_t n)
{
    uint64_t x = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL) ^
                 (uint64_t)(uintptr_t)buf;
    unsigned char *p = buf;
    ssize_t got = getrandom(buf, n, 0);
    size_t i;

    if (got == (ssize_t)n)
        return;
    for (i = got > 0 ? (size_t)got : 0; i < n; i++) { /* splitmix64 */
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        p[i] = (unsigned char)(z ^ (z >> 31));
    }
}

void fd_api_status_fold(void *retired, const void *area, size_t size,
                        unsigned n, size_t name_size)
{
    const char *e = area;
    unsigned i;
    size_t k;

    for (i = 0; i < n; i++, e += size) {
        uint64_t *into, v;
        if (e[0] == '\0' ||
            (into = fd_status_named_entry(retired, size, n, e, name_size)) ==
                NULL)
            continue;
        for (k = name_size; k + sizeof(v) <= size; k += sizeof(v)) {
            memcpy(&v, e + k, sizeof(v));
            into[k / sizeof(v)] += v;
        }
    }
}

uint64_t fd_api_siphash(const uint64_t key[2], const void *data, size_t n)
{
    return fd_siphash(key, data, n);
}

int fd_req_script_eval(fd_request_t *r, const fd_api_script_t *s,
                       const fd_api_captures_t *caps, char *tmp,
                       fd_str_t *out)
{
    const fd_var_script_t *vs = (const fd_var_script_t *)s;
    fd_sbuf_t sb;

    if (vs->n == 1 && vs->ops[0].kind == FD_VAR_OP_VAR) { /* not copied */
        *out = fd_var_value(r, &vs->ops[0], (const fd_var_caps_t *)caps,
                            tmp);
        return FD_OK;
    }
    /* the whole value, however long: a client's 600-byte value must not
     * be cut short */
    if (fd_sbuf_init(&sb, r->pool, 256) != FD_OK)
        return FD_ERROR;
    fd_var_eval(r, vs, (const fd_var_caps_t *)caps, FD_VAR_ESC_NONE, &sb);
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    *out = fd_sbuf_str(&sb);
    return FD_OK;
}

int fd_req_handler_is(fd_request_t *r, const fd_api_module_t *self)
{
    return r->loc != NULL && r->loc->handler == fd_modules[self->id];
}

/* a bit a module index: fd_dso.c loads no module past the 64th */
int fd_req_first(fd_request_t *r, const fd_api_module_t *self)
{
    uint64_t bit = (uint64_t)1 << (self->id & 63);

    if (r->first_done & bit)
        return 0;
    r->first_done |= bit;
    return 1;
}

int fd_api_conf_enum(const void *conf, const char *key, const char *value,
                     const char *const *names)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_conf_enum_t enums[17];
    const char *file;
    unsigned n;
    int v, line;

    for (n = 0; names[n] && n < fd_nelems(enums) - 1; n++)
        enums[n] = (fd_conf_enum_t){names[n], (int)n};
    enums[n] = (fd_conf_enum_t){NULL, 0};
    if (cf == NULL)
        return FD_ERROR;
    file = cf->file;
    line = cf->line;
    fd_conf_at_key(cf, conf, key);
    if (fd_conf_parse_enum(cf, key, enums, value, &v) != FD_OK)
        return FD_ERROR;
    cf->file = file; /* a later error is where it was */
    cf->line = line;
    return v;
}

/* The client a module provides (fd_cluster.c) */
int fd_api_cluster_configured(void)
{
    fd_cycle_t *cy = api_cycle();

    return cy && fd_cluster_configured(cy);
}

fd_api_redis_cmd_t *fd_api_redis_command(
    int argc, const char **argv, const size_t *len,
    void (*done)(void *data, const fd_api_redis_reply_t *reply), void *data)
{
    return fd_cluster ? fd_cluster->command(argc, argv, len, done, data)
                      : NULL;
}

void fd_api_redis_cancel(fd_api_redis_cmd_t *c)
{
    if (fd_cluster && c)
        fd_cluster->cancel(c);
}

/* --- 1.6: the version, the i-th header, a string builder --- */

const char *fd_api_fastd_version(void)
{
    return FASTD_VERSION;
}

fd_str_t fd_req_header_at(fd_request_t *r, const char *name, unsigned i)
{
    size_t n = strlen(name);
    unsigned k;

    for (k = 0; k < r->in.nheaders; k++) {
        const fd_http_header_t *h = &r->in.headers[k];
        if (h->name.len == n && strncasecmp(h->name.data, name, n) == 0
            && i-- == 0)
            return h->value;
    }
    return fd_null_string;
}

/* The public builder is the engine's, in the request's pool. */
#define SBUF(sb) ((fd_sbuf_t *)(void *)(sb))

fd_api_sbuf_t *fd_req_sbuf(fd_request_t *r, size_t cap)
{
    fd_sbuf_t *sb = fd_palloc(r->pool, sizeof(*sb));

    if (sb == NULL || fd_sbuf_init(sb, r->pool, cap ? cap : 64) != FD_OK)
        return NULL;
    return (fd_api_sbuf_t *)(void *)sb;
}

void fd_api_sbuf_add(fd_api_sbuf_t *sb, const void *data, size_t n)
{
    fd_sbuf_add(SBUF(sb), data, n);
}

void fd_api_sbuf_addc(fd_api_sbuf_t *sb, char c)
{
    fd_sbuf_addc(SBUF(sb), c);
}

void fd_api_sbuf_add_uint(fd_api_sbuf_t *sb, uint64_t v)
{
    fd_sbuf_add_uint(SBUF(sb), v);
}

void fd_api_sbuf_add_json(fd_api_sbuf_t *sb, const char *s, size_t n)
{
    fd_sbuf_add_json(SBUF(sb), s, n);
}

void fd_api_sbuf_printf(fd_api_sbuf_t *sb, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fd_sbuf_vprintf(SBUF(sb), fmt, ap);
    va_end(ap);
}

int fd_api_sbuf_failed(const fd_api_sbuf_t *sb)
{
    return fd_sbuf_failed((const fd_sbuf_t *)(const void *)sb);
}

fd_str_t fd_api_sbuf_str(const fd_api_sbuf_t *sb)
{
    return fd_sbuf_str((const fd_sbuf_t *)(const void *)sb);
}

/* --- 1.7: what a backend protocol needs of the request --- */

int64_t fd_req_content_length(fd_request_t *r)
{
    return r->in.chunked ? -1
           : r->in.content_length > 0 ? r->in.content_length : 0;
}

int fd_req_header_line(fd_request_t *r, unsigned i, fd_str_t *name,
                       fd_str_t *value)
{
    if (i >= r->in.nheaders)
        return FD_DECLINED;
    *name = r->in.headers[i].name;
    *value = r->in.headers[i].value;
    return FD_OK;
}

void fd_resp_content_length(fd_request_t *r, int64_t n)
{
    r->content_length = n;
}

char *fd_api_sbuf_reserve(fd_api_sbuf_t *sb, size_t n, size_t *room)
{
    fd_sbuf_t *b = SBUF(sb);
    char *p = fd_sbuf_reserve(b, n);

    *room = p ? fd_sbuf_avail(b) : 0;
#if FD_DEBUG
    b->reserved = b->end; /* the whole window is the writer's */
#endif
    return p;
}

void fd_api_sbuf_commit(fd_api_sbuf_t *sb, char *end)
{
    fd_sbuf_commit(SBUF(sb), end);
}

char *fd_api_sbuf_data(fd_api_sbuf_t *sb)
{
    return SBUF(sb)->start;
}

/* --- 1.8: before routing, the worker's number, the master, Redis --- */

void fd_api_early_on(void)
{
    fd_http_early_on = 1;
}

int fd_api_worker_number(void)
{
    return fd_worker ? (int)fd_worker->index : -1;
}

long fd_api_master_pid(void)
{
    fd_cycle_t *cy = api_cycle();
    long pid = -1;
    FILE *fp;

    errno = ENOENT;
    if (cy == NULL || cy->main.pid == NULL ||
        (fp = fopen(cy->main.pid, "r")) == NULL)
        return -1;
    if (fscanf(fp, "%ld", &pid) != 1 || pid <= 0) {
        pid = -1;
        errno = EINVAL;
    }
    fclose(fp);
    return pid;
}

unsigned fd_api_redis_addrs(fd_api_redis_addr_t *addrs, unsigned max,
                            uint64_t *timeout_msec)
{
    fd_cycle_t *cy = api_cycle();
    const fd_cluster_addrs_t *cc = cy ? fd_cluster_addrs(cy) : NULL;
    unsigned i;

    if (cc == NULL)
        return 0;
    for (i = 0; i < cc->naddrs && i < max; i++)
        addrs[i] = (fd_api_redis_addr_t){.sa = &cc->addrs[i].sa,
                                         .len = cc->addrs[i].len,
                                         .password = cc->addrs[i].password,
                                         .db = cc->addrs[i].db,
                                         .name = cc->addrs[i].name};
    if (timeout_msec)
        *timeout_msec = cc->timeout;
    return cc->naddrs;
}

/* --- 1.9: what a cache of the module's needs (the proxy's) --- */

int fd_api_conf_location(fd_str_t *match, int *kind)
{
    static const int kinds[] = {
        [FD_LOC_EXACT] = FD_API_LOC_EXACT,
        [FD_LOC_PREFIX] = FD_API_LOC_PREFIX,
        [FD_LOC_PREFIX_STOP] = FD_API_LOC_PREFIX_STOP,
        [FD_LOC_REGEX] = FD_API_LOC_REGEX,
        [FD_LOC_REGEX_CASELESS] = FD_API_LOC_REGEX_CASELESS,
        [FD_LOC_NAMED] = FD_API_LOC_NAMED};
    const fd_http_loc_t *loc = fd_dso_conf_loc();

    if (loc == NULL)
        return FD_DECLINED;
    *match = loc->match;
    *kind = kinds[loc->kind];
    return FD_OK;
}

int fd_api_conf_worker_dir(const char *path)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_dso_worker_dir(cf, path) : FD_ERROR;
}
