/*
 * The access log: one line per finished request, written through a
 * per-worker buffer.
 *
 *   access_log = PATH [format=NAME] [buffer=SIZE] [flush=TIME] | off
 *   log_format = NAME FORMAT...          (repeatable)
 *   log_format = NAME json $var...       (one JSON object per line)
 *
 * Both are location keys: [http], [server] or [location]; the innermost
 * access_log wins. Formats are compiled once at load into a list of ops.
 * Each worker opens every log file itself (O_APPEND) in init_worker, so a
 * reopen (SIGUSR1, fastd -s reopen) is per worker; the buffer is written
 * whole-lines-only with one write() when full, every `flush` interval, on
 * reopen and at worker exit. A line never straddles two write()s, so
 * workers sharing a file never interleave inside a line.
 */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"

/*
 * The proxy module provides these when it is built in (weak: absent
 * otherwise, and the variables print "-"). Each returns a NUL-terminated
 * string in r->pool, nginx style (one entry per server tried, ", "
 * between them), or NULL when the request was not proxied.
 */
const char *fd_proxy_upstream_addr(fd_request_t *r) __attribute__((weak));
const char *fd_proxy_upstream_status(fd_request_t *r) __attribute__((weak));
const char *fd_proxy_upstream_response_time(fd_request_t *r)
    __attribute__((weak));

enum {
    V_LITERAL = 0,
    V_REMOTE_ADDR,
    V_TIME_LOCAL,
    V_REQUEST,
    V_STATUS,
    V_BODY_BYTES_SENT,
    V_HTTP_REFERER,
    V_HTTP_USER_AGENT,
    V_REQUEST_TIME,
    V_UPSTREAM_ADDR,
    V_UPSTREAM_STATUS,
    V_UPSTREAM_RESPONSE_TIME,
    V_HOST,
    V_URI,
    V_ARGS,
    V_METHOD,
    V_REQUEST_URI,
    V_SERVER_PROTOCOL,
    V_MSEC,
    V_CONNECTION,
    V_HTTP_HEADER, /* $http_NAME: any request header */
    V_CONN         /* fd_http_conn_var(): $scheme, $https, $ssl_* */
};

static const struct {
    const char *name;
    int id;
    int number; /* a JSON number, not a string */
} vars[] = {
    {"remote_addr", V_REMOTE_ADDR, 0},
    {"time_local", V_TIME_LOCAL, 0},
    {"request", V_REQUEST, 0},
    {"status", V_STATUS, 1},
    {"body_bytes_sent", V_BODY_BYTES_SENT, 1},
    {"http_referer", V_HTTP_REFERER, 0},
    {"http_user_agent", V_HTTP_USER_AGENT, 0},
    {"request_time", V_REQUEST_TIME, 1},
    {"upstream_addr", V_UPSTREAM_ADDR, 0},
    {"upstream_status", V_UPSTREAM_STATUS, 0},
    {"upstream_response_time", V_UPSTREAM_RESPONSE_TIME, 0},
    {"host", V_HOST, 0},
    {"uri", V_URI, 0},
    {"args", V_ARGS, 0},
    {"query_string", V_ARGS, 0},
    {"method", V_METHOD, 0},
    {"request_method", V_METHOD, 0},
    {"request_uri", V_REQUEST_URI, 0},
    {"server_protocol", V_SERVER_PROTOCOL, 0},
    {"msec", V_MSEC, 1},
    {"connection", V_CONNECTION, 1},
};

typedef struct {
    int var;
    int number;
    int conn;      /* V_CONN: fd_http_conn_var_id() */
    fd_str_t text; /* literal, JSON key, or header name for $http_* */
} al_op_t;

typedef struct al_format_s {
    char *name;
    int json;
    al_op_t *ops;
    unsigned nops;
    struct al_format_s *next;
} al_format_t;

typedef struct al_file_s {
    char *path;
    size_t buffer;           /* 0: write every line at once */
    fd_msec_t flush;
    /* worker state: only the owner (first file with this path) is used */
    struct al_file_s *owner;
    int fd;
    char *buf;
    size_t len;
    fd_timer_t timer;
    struct al_file_s *wnext;
} al_file_t;

typedef struct {
    int set;                 /* access_log given at some level */
    al_file_t *file;         /* NULL: off */
    char *format_name;
    al_format_t *format;     /* resolved in init_conf */
    al_format_t *formats;    /* log_format entries seen by this location */
} al_conf_t;

fd_module_t fd_access_log_module;

static al_file_t *wfiles;    /* this worker's open files (owners) */

static const char combined_src[] =
    "$remote_addr - - [$time_local] \"$request\" $status $body_bytes_sent "
    "\"$http_referer\" \"$http_user_agent\"";
static const char json_src[] =
    "json $remote_addr $time_local $request $status $body_bytes_sent "
    "$http_referer $http_user_agent $request_time $upstream_addr "
    "$upstream_status $upstream_response_time $host $uri $args $method";

/* --- configuration --- */

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

static int op_add(fd_conf_t *cf, al_format_t *f, int var, int number,
                  const char *s, size_t n)
{
    al_op_t *ops = fd_palloc(cf->pool, (f->nops + 1) * sizeof(*ops));

    if (ops == NULL)
        return fd_conf_error(cf, "out of memory");
    if (f->nops)
        memcpy(ops, f->ops, f->nops * sizeof(*ops));
    ops[f->nops].var = var;
    ops[f->nops].number = number;
    ops[f->nops].text.data = fd_pstrdup(cf->pool, s, n);
    ops[f->nops].text.len = n;
    f->ops = ops;
    f->nops++;
    return FD_OK;
}

/* "$name" or "${name}" at s: the variable's op; returns bytes consumed. */
static int var_parse(fd_conf_t *cf, al_format_t *f, const char *s,
                     size_t *used)
{
    const char *p = s + 1, *name;
    size_t n = 0;
    unsigned i;
    int brace = *p == '{';

    p += brace;
    name = p;
    while (is_name_char(p[n]))
        n++;
    if (n == 0 || (brace && p[n] != '}'))
        return fd_conf_error(cf, "log_format: bad variable at \"%.20s\"", s);
    *used = 1 + (size_t)brace + n + (size_t)brace;
    for (i = 0; i < fd_nelems(vars); i++)
        if (strlen(vars[i].name) == n && memcmp(vars[i].name, name, n) == 0)
            return op_add(cf, f, vars[i].id, vars[i].number, name, n);
    if (n > 5 && memcmp(name, "http_", 5) == 0)
        return op_add(cf, f, V_HTTP_HEADER, 0, name, n);
    if ((i = (unsigned)fd_http_conn_var_id(name, n)) != 0) {
        if (op_add(cf, f, V_CONN, 0, name, n) != FD_OK)
            return FD_ERROR;
        f->ops[f->nops - 1].conn = (int)i;
        return FD_OK;
    }
    return fd_conf_error(cf, "log_format: unknown variable \"$%.*s\"",
                         (int)n, name);
}

/* Compile FORMAT (text with variables, or "json $var...") into f. */
static int format_compile(fd_conf_t *cf, al_format_t *f, const char *src)
{
    const char *p = src, *lit = src;
    size_t used;

    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "json", 4) == 0 && (p[4] == ' ' || p[4] == '\t')) {
        f->json = 1;
        for (p += 4; *p;) {
            if (*p == ' ' || *p == '\t') {
                p++;
                continue;
            }
            if (*p != '$')
                return fd_conf_error(cf, "log_format json: \"%s\" is not "
                                     "a $variable", p);
            if (var_parse(cf, f, p, &used) != FD_OK)
                return FD_ERROR;
            p += used;
            if (*p && *p != ' ' && *p != '\t')
                return fd_conf_error(cf, "log_format json: variables are "
                                     "separated by spaces");
        }
        if (f->nops == 0)
            return fd_conf_error(cf, "log_format json needs variables");
        return FD_OK;
    }
    for (p = src; *p;) {
        if (*p != '$' || !(is_name_char(p[1]) || p[1] == '{')) {
            p++;
            continue;
        }
        if (p > lit && op_add(cf, f, V_LITERAL, 0, lit,
                              (size_t)(p - lit)) != FD_OK)
            return FD_ERROR;
        if (var_parse(cf, f, p, &used) != FD_OK)
            return FD_ERROR;
        p += used;
        lit = p;
    }
    if (p > lit && op_add(cf, f, V_LITERAL, 0, lit, (size_t)(p - lit)))
        return FD_ERROR;
    return FD_OK;
}

static int set_log_format(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                          const char *v)
{
    al_conf_t *lc = conf;
    al_format_t *f, **pp;
    const char *sp;
    size_t n;

    (void)d;
    while (*v == ' ' || *v == '\t')
        v++;
    for (n = 0; is_name_char(v[n]) || v[n] == '-' || v[n] == '.'; n++)
        ;
    sp = v + n;
    if (n == 0 || (*sp != ' ' && *sp != '\t'))
        return fd_conf_error(cf, "log_format needs NAME FORMAT, not \"%s\"",
                             v);
    if ((n == 8 && memcmp(v, "combined", 8) == 0) ||
        (n == 4 && memcmp(v, "json", 4) == 0))
        return fd_conf_error(cf, "log_format \"%.*s\" is predefined",
                             (int)n, v);
    f = fd_pcalloc(cf->pool, sizeof(*f));
    if (f == NULL)
        return fd_conf_error(cf, "out of memory");
    f->name = fd_pstrdup(cf->pool, v, n);
    if (format_compile(cf, f, sp + 1) != FD_OK)
        return FD_ERROR;
    /* a later definition of the same name (inner level) replaces it */
    for (pp = &lc->formats; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->name, f->name) == 0) {
            f->next = (*pp)->next;
            *pp = f;
            return FD_OK;
        }
    *pp = f;
    return FD_OK;
}

static int set_access_log(fd_conf_t *cf, const fd_directive_t *d,
                          void *conf, const char *v)
{
    al_conf_t *lc = conf;
    al_file_t *f;
    char *copy, *tok, *save, *dir;
    struct stat st;

    (void)d;
    lc->set = 1;
    lc->file = NULL;
    lc->format_name = "combined";
    copy = fd_pstrdup(cf->pool, v, strlen(v));
    tok = strtok_r(copy, " \t", &save);
    if (tok == NULL)
        return fd_conf_error(cf, "access_log needs a path or off");
    if (strcmp(tok, "off") == 0) {
        if (strtok_r(NULL, " \t", &save))
            return fd_conf_error(cf, "access_log = off takes no options");
        return FD_OK;
    }
    f = fd_pcalloc(cf->pool, sizeof(*f));
    if (f == NULL)
        return fd_conf_error(cf, "out of memory");
    f->path = fd_conf_path(cf, tok);
    f->buffer = 64 * 1024;
    f->flush = 1000;
    f->fd = -1;
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
        int64_t n;
        if (strncmp(tok, "format=", 7) == 0 && tok[7]) {
            lc->format_name = tok + 7;
        } else if (strncmp(tok, "buffer=", 7) == 0) {
            n = fd_conf_parse_size(tok + 7);
            if (n < 0 || n > 16 * 1024 * 1024)
                return fd_conf_error(cf, "access_log: bad buffer size "
                                     "\"%s\" (0 .. 16m)", tok + 7);
            f->buffer = (size_t)n;
        } else if (strncmp(tok, "flush=", 6) == 0) {
            n = fd_conf_parse_msec(tok + 6);
            if (n <= 0)
                return fd_conf_error(cf, "access_log: bad flush interval "
                                     "\"%s\"", tok + 6);
            f->flush = (fd_msec_t)n;
        } else {
            return fd_conf_error(cf, "access_log: unknown option \"%s\" "
                                 "(format=, buffer=, flush=)", tok);
        }
    }
    /* the workers create the file; its directory must exist now */
    dir = fd_pstrdup(cf->pool, f->path, strlen(f->path));
    dir = dirname(dir);
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return fd_conf_error(cf, "access_log \"%s\": directory \"%s\" does "
                             "not exist", f->path, dir);
    lc->file = f;
    return FD_OK;
}

static int access_log_init_conf(fd_conf_t *cf, fd_http_loc_t *loc,
                                void *conf)
{
    al_conf_t *lc = conf;
    al_format_t *f;
    const char *src = NULL;

    (void)loc;
    if (lc->file == NULL)
        return FD_OK;
    for (f = lc->formats; f; f = f->next)
        if (strcmp(f->name, lc->format_name) == 0) {
            lc->format = f;
            return FD_OK;
        }
    if (strcmp(lc->format_name, "combined") == 0)
        src = combined_src;
    else if (strcmp(lc->format_name, "json") == 0)
        src = json_src;
    else {
        fd_conf_at_key(cf, conf, "access_log"); /* its line, not [section] */
        return fd_conf_error(cf, "access_log \"%s\": unknown log_format "
                             "\"%s\"", lc->file->path, lc->format_name);
    }
    f = fd_pcalloc(cf->pool, sizeof(*f));
    if (f == NULL)
        return fd_conf_error(cf, "out of memory");
    f->name = lc->format_name;
    if (format_compile(cf, f, src) != FD_OK)
        return FD_ERROR;
    lc->format = f;
    return FD_OK;
}

/* --- the files, per worker --- */

static int file_open(al_file_t *f)
{
    int fd = open(f->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

    if (fd < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "open(\"%s\") failed", f->path);
        return FD_ERROR;
    }
    if (f->fd >= 0)
        close(f->fd);
    f->fd = fd;
    return FD_OK;
}

static void file_flush(al_file_t *f)
{
    size_t off = 0;

    if (f->timer.idx)
        fd_timer_del(&f->timer);
    while (off < f->len && f->fd >= 0) {
        /* a regular file: write() does not wait on the network */
        ssize_t n = write(f->fd, f->buf + off, f->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_log_error(FD_LOG_ERR, n < 0 ? errno : 0, "write() to \"%s\" "
                         "failed, %zu bytes of access log lost", f->path,
                         f->len - off);
            break;
        }
        off += (size_t)n;
    }
    f->len = 0;
}

static void flush_timer(fd_timer_t *t)
{
    al_file_t *f = (al_file_t *)((char *)t - offsetof(al_file_t, timer));

    file_flush(f);
}

/* Give the location's file an owner: the first file with its path. */
static void loc_file(fd_http_loc_t *loc)
{
    al_conf_t *lc = fd_loc_conf(loc, &fd_access_log_module);
    al_file_t *f = lc->file, *o;

    if (f == NULL)
        return;
    for (o = wfiles; o; o = o->wnext)
        if (strcmp(o->path, f->path) == 0)
            break;
    if (o) {
        /* one buffer per path: the largest, flushed most often */
        f->owner = o;
        o->buffer = fd_max(o->buffer, f->buffer);
        o->flush = fd_min(o->flush, f->flush);
        return;
    }
    f->owner = f;
    f->fd = -1;
    f->len = 0;
    f->timer.handler = flush_timer;
    f->wnext = wfiles;
    wfiles = f;
}

static int access_log_init_worker(fd_worker_t *w)
{
    fd_http_server_t *s;
    al_file_t *f;

    wfiles = NULL;
    for (s = w->cycle->servers; s; s = s->next) {
        fd_http_loc_t *lists[] = {s->exact, s->prefix, s->regex}, *loc;
        unsigned i;
        loc_file(s->root_loc);
        for (i = 0; i < fd_nelems(lists); i++)
            for (loc = lists[i]; loc; loc = loc->next)
                loc_file(loc);
    }
    for (f = wfiles; f; f = f->wnext) {
        if (f->buffer) {
            f->buf = malloc(f->buffer);
            if (f->buf == NULL) {
                fd_log_error(FD_LOG_ALERT, errno, "access log buffer");
                return FD_ERROR;
            }
        }
        file_open(f); /* a failure is logged; reopen retries */
    }
    return FD_OK;
}

static void access_log_reopen(fd_worker_t *w)
{
    al_file_t *f;

    (void)w;
    for (f = wfiles; f; f = f->wnext) {
        /* what was logged before the signal goes to the old file */
        file_flush(f);
        file_open(f);
    }
}

static void access_log_exit_worker(fd_worker_t *w)
{
    al_file_t *f;

    (void)w;
    for (f = wfiles; f; f = f->wnext) {
        file_flush(f);
        if (f->fd >= 0)
            close(f->fd);
        f->fd = -1;
        free(f->buf);
        f->buf = NULL;
    }
    wfiles = NULL;
}

/* --- one line --- */

/* $host without the port; written lowercased (see line_build()) */
static fd_str_t host_value(fd_request_t *r)
{
    fd_str_t h = r->in.host;
    size_t i;

    for (i = h.len; i > 0; i--) {
        if (h.data[i - 1] == ':') {
            h.len = i - 1;
            break;
        }
        if (h.data[i - 1] < '0' || h.data[i - 1] > '9')
            break;
    }
    if (h.len == 0 && r->server && r->server->names.n)
        return (fd_str_t){strlen(r->server->names.items[0]),
                          r->server->names.items[0]};
    return h;
}

static fd_str_t msec_text(char *tmp, fd_msec_t ms)
{
    char *p = fd_fmt_uint(tmp, ms / 1000);

    *p++ = '.';
    *p++ = (char)('0' + ms % 1000 / 100);
    *p++ = (char)('0' + ms % 100 / 10);
    *p++ = (char)('0' + ms % 10);
    return (fd_str_t){(size_t)(p - tmp), tmp};
}

static fd_str_t upstream(fd_request_t *r,
                         const char *(*fn)(fd_request_t *))
{
    const char *v = fn ? fn(r) : NULL;

    return v ? (fd_str_t){strlen(v), v} : fd_null_string;
}

/* The value of one variable; tmp (at least 64 bytes) holds numbers. */
static fd_str_t var_value(fd_request_t *r, const al_op_t *op, char *tmp,
                          size_t tmpsize)
{
    switch (op->var) {
    case V_REMOTE_ADDR:
        return (fd_str_t){fd_request_addr_text(r, tmp, tmpsize), tmp};
    case V_TIME_LOCAL:
        return (fd_str_t){sizeof(fd_log_time) - 1, fd_log_time};
    case V_REQUEST:
        return fd_null_string; /* in parts: see line_build() */
    case V_STATUS:
        return (fd_str_t){(size_t)(fd_fmt_uint(tmp, (uint64_t)r->status) -
                                   tmp),
                          tmp};
    case V_BODY_BYTES_SENT:
        return (fd_str_t){(size_t)(fd_fmt_uint(tmp, r->bytes_sent) - tmp),
                          tmp};
    case V_HTTP_REFERER:
        return r->in.referer;
    case V_HTTP_USER_AGENT:
        return r->in.user_agent;
    case V_REQUEST_TIME:
        return msec_text(tmp, fd_current_msec >= r->start_msec
                                  ? fd_current_msec - r->start_msec
                                  : 0);
    case V_UPSTREAM_ADDR:
        return upstream(r, fd_proxy_upstream_addr);
    case V_UPSTREAM_STATUS:
        return upstream(r, fd_proxy_upstream_status);
    case V_UPSTREAM_RESPONSE_TIME:
        return upstream(r, fd_proxy_upstream_response_time);
    case V_HOST:
        return host_value(r);
    case V_URI:
        return r->path;
    case V_ARGS:
        return r->in.query;
    case V_METHOD:
        return r->in.method;
    case V_REQUEST_URI:
        return r->in.target;
    case V_SERVER_PROTOCOL:
        if (r->in.method.len == 0)
            return fd_null_string;
        return r->in.version == 10   ? fd_string("HTTP/1.0")
               : r->in.version == 20 ? fd_string("HTTP/2.0")
                                     : fd_string("HTTP/1.1");
    case V_MSEC: {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        return msec_text(tmp, (fd_msec_t)ts.tv_sec * 1000 +
                                  (fd_msec_t)ts.tv_nsec / 1000000);
    }
    case V_CONNECTION:
        return (fd_str_t){(size_t)(fd_fmt_uint(tmp, r->c->id) - tmp), tmp};
    case V_HTTP_HEADER:
        return fd_http_var_header(r, (fd_str_t){op->text.len - 5,
                                          op->text.data + 5});
    case V_CONN:
        return fd_http_conn_var(r, op->conn);
    }
    return fd_null_string;
}

static const char hex[] = "0123456789ABCDEF";

/* nginx's escaping: ", \ and bytes outside printable ASCII as \xHH;
 * lower: ASCII letters lowercased ($host) */
static inline size_t text_width(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? 1 : 4;
}

static inline char *text_byte(char *q, unsigned char c, int lower)
{
    if (text_width(c) == 1) {
        *q++ = lower ? fd_tolower((char)c) : (char)c;
        return q;
    }
    q[0] = '\\';
    q[1] = 'x';
    q[2] = hex[c >> 4];
    q[3] = hex[c & 15];
    return q + 4;
}

/* JSON string content; bytes >= 0x80 as \u00XX so every line is valid. */
static inline size_t json_width(unsigned char c)
{
    return c == '"' || c == '\\' ? 2 : c >= 0x20 && c < 0x7f ? 1 : 6;
}

static inline char *json_byte(char *q, unsigned char c, int lower)
{
    switch (json_width(c)) {
    case 1:
        *q++ = lower ? fd_tolower((char)c) : (char)c;
        return q;
    case 2:
        q[0] = '\\';
        q[1] = (char)c;
        return q + 2;
    }
    memcpy(q, "\\u00", 4);
    q[4] = hex[c >> 4];
    q[5] = hex[c & 15];
    return q + 6;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Does any of the 8 bytes in x need escaping (a control, '"', '\', DEL or
 * a byte over 0x7f; the same set for both formats)? The classic word-wise
 * tests: each is exact about whether such a byte is there. */
static inline int special8(uint64_t x)
{
    uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\'),
             d = x ^ (ONES * 0x7f);

    return ((x | ((x - ONES * 0x20) & ~x) | ((q - ONES) & ~q) |
             ((b - ONES) & ~b) | ((d - ONES) & ~d)) &
            HIGHS) != 0;
}

/*
 * v escaped into sb. A byte becomes at most max bytes: as many as surely
 * fit at that width are written under one reservation, 8 at a time when
 * none of them needs escaping (the usual case); near the end of a fixed
 * builder, or before a growth, one byte at its exact width, so a line
 * that fits is never refused. Inlined into each caller, so width() and
 * byte() are direct.
 */
static inline __attribute__((always_inline)) void
escape_run(fd_sbuf_t *sb, fd_str_t v, int lower, size_t max,
           size_t (*width)(unsigned char),
           char *(*byte)(char *, unsigned char, int))
{
    const unsigned char *s = (const unsigned char *)v.data;
    size_t i = 0, n;
    char *q;

    while (i < v.len) {
        n = fd_min(v.len - i, fd_sbuf_avail(sb) / max);
        if (n == 0) {
            if ((q = fd_sbuf_reserve(sb, width(s[i]))) == NULL)
                return;
            fd_sbuf_commit(sb, byte(q, s[i++], lower));
            continue;
        }
        if ((q = fd_sbuf_reserve(sb, max * n)) == NULL)
            return;
        n += i;
        for (; !lower && i + 8 <= n; i += 8) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            if (special8(x))
                break;
            memcpy(q, &x, 8);
            q += 8;
        }
        for (; i < n; i++)
            q = byte(q, s[i], lower);
        fd_sbuf_commit(sb, q);
    }
}

static void escape_text(fd_sbuf_t *sb, fd_str_t v, int lower)
{
    escape_run(sb, v, lower, 4, text_width, text_byte);
}

static void escape_json(fd_sbuf_t *sb, fd_str_t v, int lower)
{
    escape_run(sb, v, lower, 6, json_width, json_byte);
}

/* The value of a variable as up to 4 pieces (the request line is 4). */
static unsigned var_parts(fd_request_t *r, const al_op_t *op, char *tmp,
                          size_t size, fd_str_t *v)
{
    if (op->var == V_LITERAL) {
        v[0] = op->text;
        return 1;
    }
    if (op->var == V_REQUEST) {
        /* the request line as received, without copying it */
        if (r->in.method.len == 0)
            return 0;
        v[0] = r->in.method;
        v[1] = fd_string(" ");
        v[2] = r->in.target;
        v[3] = r->in.version == 10   ? fd_string(" HTTP/1.0")
               : r->in.version == 20 ? fd_string(" HTTP/2.0")
                                     : fd_string(" HTTP/1.1");
        return 4;
    }
    v[0] = var_value(r, op, tmp, size);
    return v[0].len ? 1 : 0;
}

/* The line for r, appended to sb (which may run out: the caller checks). */
static void line_build(fd_request_t *r, const al_format_t *f, fd_sbuf_t *sb)
{
    char tmp[64];
    unsigned i, k, nv;
    fd_str_t v[4];

    for (i = 0; i < f->nops; i++) {
        const al_op_t *op = &f->ops[i];
        int lower = op->var == V_HOST;
        size_t vlen;

        nv = var_parts(r, op, tmp, sizeof(tmp), v);
        for (k = 0, vlen = 0; k < nv; k++)
            vlen += v[k].len;
        if (nv && vlen == 0)
            nv = 0;
        if (f->json) {
            fd_sbuf_addc(sb, i ? ',' : '{');
            fd_sbuf_addc(sb, '"');
            fd_sbuf_add_str(sb, op->text);
            fd_sbuf_add_lit(sb, "\":");
            if (op->number && nv) {
                fd_sbuf_add_str(sb, v[0]);
            } else {
                fd_sbuf_addc(sb, '"');
                if (nv == 0)
                    fd_sbuf_addc(sb, '-');
                for (k = 0; k < nv; k++)
                    escape_json(sb, v[k], lower);
                fd_sbuf_addc(sb, '"');
            }
        } else if (op->var == V_LITERAL) {
            fd_sbuf_add_str(sb, v[0]);
        } else if (nv == 0) {
            fd_sbuf_addc(sb, '-');
        } else {
            for (k = 0; k < nv; k++)
                escape_text(sb, v[k], lower);
        }
    }
    if (f->json)
        fd_sbuf_addc(sb, '}');
    fd_sbuf_addc(sb, '\n');
}

static void access_log_log(fd_request_t *r)
{
    fd_http_loc_t *loc = r->loc;
    al_conf_t *lc;
    al_file_t *f;
    fd_sbuf_t sb;
    char *keep;

    if (loc == NULL) {
        /* failed before routing: the server's (or address') defaults */
        fd_http_server_t *s = r->server ? r->server : fd_conn_listening(r->c)->servers[0];
        loc = s->root_loc;
    }
    lc = fd_loc_conf(loc, &fd_access_log_module);
    if (lc->file == NULL || (f = lc->file->owner) == NULL || f->fd < 0)
        return;
    if (f->buf) {
        /* straight into the buffer's free end; a line that does not fit
         * leaves nothing there (len is not moved): flush, try again */
        fd_sbuf_init_fixed(&sb, f->buf + f->len, f->buffer - f->len);
        line_build(r, lc->format, &sb);
        if (fd_sbuf_failed(&sb) && f->len) {
            file_flush(f);
            fd_sbuf_init_fixed(&sb, f->buf, f->buffer);
            line_build(r, lc->format, &sb);
        }
        if (!fd_sbuf_failed(&sb)) {
            f->len += fd_sbuf_len(&sb);
            if (!f->timer.idx)
                fd_timer_add(&f->timer, f->flush);
            return;
        }
    }
    /* larger than the buffer (or unbuffered): built in the request's
     * pool and written alone */
    if (fd_sbuf_init(&sb, r->pool, 1024) != FD_OK)
        return;
    line_build(r, lc->format, &sb);
    if (fd_sbuf_failed(&sb)) {
        fd_log_error(FD_LOG_ERR, 0, "no memory for an access log line");
        return;
    }
    file_flush(f);
    keep = f->buf;
    f->buf = sb.start;
    f->len = fd_sbuf_len(&sb);
    file_flush(f);
    f->buf = keep;
}

static const fd_directive_t access_log_directives[] = {
    {.name = "access_log", .type = FD_CONF_CUSTOM, .offset = 0,
     .set = set_access_log,
     .doc = "PATH [format=NAME] [buffer=64k] [flush=1s], or off (default): "
            "one line per request; format combined (default), json, or a "
            "log_format; buffered per worker, reopened on SIGUSR1"},
    {.name = "log_format", .type = FD_CONF_LIST, .offset = 0,
     .set = set_log_format,
     .doc = "NAME FORMAT..., repeatable: text with $variables ($remote_addr "
            "$time_local $request $status $body_bytes_sent $http_referer "
            "$http_user_agent $request_time $upstream_addr $upstream_status "
            "$upstream_response_time $host $uri $args $method $request_uri "
            "$scheme $server_protocol $msec $connection $http_NAME), or "
            "\"json $var...\" for one JSON object per line"},
    FD_CONF_END};

fd_module_t fd_access_log_module = {
    FD_MODULE_LOC(access_log, al_conf_t),
    .init_worker = access_log_init_worker,
    .exit_worker = access_log_exit_worker,
    .reopen = access_log_reopen,
    .log = access_log_log,
};
