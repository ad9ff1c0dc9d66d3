/*
 * The access log: one line per finished request, written through a
 * per-worker buffer.
 *
 *   access_log = PATH [format=NAME] [buffer=SIZE] [flush=TIME] | off
 *   log_format = NAME FORMAT...          (repeatable)
 *   log_format = NAME json $var...       (one JSON object per line)
 *
 * Both are location keys: [http], [server] or [location]; the innermost
 * access_log wins. Formats are scripts of the variable registry
 * (fd_var.h), compiled once at load.
 * Each worker opens every log file itself (O_APPEND) in init_worker, so a
 * reopen (SIGUSR1, fastd -s reopen) is per worker (a root master makes
 * each file first, for the workers' user: give_files); the buffer is written
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
#include "fd_var.h"

typedef struct al_format_s {
    char *name;
    int json;              /* ops are variables only, keyed by name */
    fd_var_script_t script;
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
/* the same without the proxy's variables, when it is not built in */
static const char json_noproxy_src[] =
    "json $remote_addr $time_local $request $status $body_bytes_sent "
    "$http_referer $http_user_agent $request_time $host $uri $args $method";

/* --- configuration --- */

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

/* Compile FORMAT (text with variables, or "json $var...") into f. */
static int format_compile(fd_conf_t *cf, al_format_t *f, const char *src)
{
    const char *p = src;
    unsigned i, k;

    while (*p == ' ' || *p == '\t')
        p++;
    if (!(strncmp(p, "json", 4) == 0 && (p[4] == ' ' || p[4] == '\t')))
        return fd_var_compile(cf, &f->script, src, strlen(src), 0,
                              "log_format");
    f->json = 1;
    if (fd_var_compile(cf, &f->script, p + 4, strlen(p + 4), 0,
                       "log_format json") != FD_OK)
        return FD_ERROR;
    /* $a $b ...: variables with blanks between them, the blanks dropped */
    for (i = 0, k = 0; i < f->script.n; i++) {
        fd_var_op_t *op = &f->script.ops[i];
        if (op->kind == FD_VAR_OP_VAR) {
            if (i && f->script.ops[i - 1].kind == FD_VAR_OP_VAR)
                return fd_conf_error(cf, "log_format json: variables are "
                                     "separated by spaces");
            f->script.ops[k++] = *op;
            continue;
        }
        if (strspn(op->text.data, " \t") != op->text.len)
            return fd_conf_error(cf, "log_format json: \"%.*s\" is not a "
                                 "$variable", (int)op->text.len,
                                 op->text.data);
    }
    f->script.n = k;
    if (k == 0)
        return fd_conf_error(cf, "log_format json needs variables");
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
        src = fd_var_find("upstream_addr", 13) ? json_src
                                                : json_noproxy_src;
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
static void loc_file(fd_http_loc_t *loc, void *data)
{
    (void)data;
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

/*
 * A root master's workers (user =, or nobody) open the files themselves
 * and could not create one in a directory of root's (logs/): the master
 * makes each file and gives it to them, as nginx does, at load and before
 * a reopen. A failure is the worker's to report, when it opens the file.
 */
static void give_file(fd_http_loc_t *loc, void *data)
{
    const al_file_t *f =
        ((al_conf_t *)fd_loc_conf(loc, &fd_access_log_module))->file;
    const fd_main_conf_t *mc = data;
    struct stat st;
    int fd;

    if (f == NULL)
        return;
    /* O_NOFOLLOW, a regular file: never /dev/stdout's terminal or pipe */
    fd = open(f->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
              0644);
    if (fd < 0)
        return; /* the worker's own open() reports it */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid != mc->uid &&
        fchown(fd, mc->uid, mc->gid) < 0)
        fd_log_error(FD_LOG_WARN, errno, "access_log \"%s\": fchown() to "
                     "user \"%s\" failed", f->path, mc->user);
    close(fd);
}

static void give_files(fd_cycle_t *cy)
{
    if (!fd_conf_test && cy->main.drop)
        fd_http_each_loc(cy, give_file, &cy->main);
}

static int access_log_init_cycle(fd_conf_t *cf, fd_cycle_t *cy)
{
    (void)cf;
    give_files(cy);
    return FD_OK;
}

static int access_log_init_worker(fd_worker_t *w)
{
    al_file_t *f;

    wfiles = NULL;
    fd_http_each_loc(w->cycle, loc_file, NULL);
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

static const char hex[] = "0123456789ABCDEF";

/* nginx's escaping: ", \ and bytes outside printable ASCII as \xHH;
 */
static inline size_t text_width(unsigned char c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? 1 : 4;
}

static inline char *text_byte(char *q, unsigned char c)
{
    if (text_width(c) == 1) {
        *q++ = (char)c;
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

static inline char *json_byte(char *q, unsigned char c)
{
    switch (json_width(c)) {
    case 1:
        *q++ = (char)c;
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
escape_run(fd_sbuf_t *sb, fd_str_t v, size_t max,
           size_t (*width)(unsigned char),
           char *(*byte)(char *, unsigned char))
{
    const unsigned char *s = (const unsigned char *)v.data;
    size_t i = 0, n;
    char *q;

    while (i < v.len) {
        n = fd_min(v.len - i, fd_sbuf_avail(sb) / max);
        if (n == 0) {
            if ((q = fd_sbuf_reserve(sb, width(s[i]))) == NULL)
                return;
            fd_sbuf_commit(sb, byte(q, s[i++]));
            continue;
        }
        if ((q = fd_sbuf_reserve(sb, max * n)) == NULL)
            return;
        n += i;
        for (; i + 8 <= n; i += 8) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            if (special8(x))
                break;
            memcpy(q, &x, 8);
            q += 8;
        }
        for (; i < n; i++)
            q = byte(q, s[i]);
        fd_sbuf_commit(sb, q);
    }
}

static void escape_text(fd_sbuf_t *sb, fd_str_t v)
{
    escape_run(sb, v, 4, text_width, text_byte);
}

static void escape_json(fd_sbuf_t *sb, fd_str_t v)
{
    escape_run(sb, v, 6, json_width, json_byte);
}

/* The line for r, appended to sb (which may run out: the caller checks).
 * An empty value is "-" (as nginx). */
static void line_build(fd_request_t *r, const al_format_t *f, fd_sbuf_t *sb)
{
    char tmp[FD_VAR_TMP];
    unsigned i;

    for (i = 0; i < f->script.n; i++) {
        const fd_var_op_t *op = &f->script.ops[i];
        fd_str_t v;

        if (op->kind == FD_VAR_OP_LIT) {
            fd_sbuf_add_str(sb, op->text);
            continue;
        }
        v = fd_var_value(r, op, NULL, tmp);
        if (f->json) {
            fd_sbuf_addc(sb, i ? ',' : '{');
            fd_sbuf_addc(sb, '"');
            fd_sbuf_add_str(sb, op->name);
            fd_sbuf_add_lit(sb, "\":");
            if ((op->flags & FD_VAR_NUMBER) && v.len) {
                fd_sbuf_add_str(sb, v);
            } else {
                fd_sbuf_addc(sb, '"');
                if (v.len == 0)
                    fd_sbuf_addc(sb, '-');
                escape_json(sb, v);
                fd_sbuf_addc(sb, '"');
            }
        } else if (v.len == 0) {
            fd_sbuf_addc(sb, '-');
        } else {
            escape_text(sb, v);
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
     .doc = "NAME FORMAT..., repeatable: text with $variables (any of the "
            "registry's, e.g. $remote_addr $time_local $request $status "
            "$body_bytes_sent $http_referer $http_user_agent $request_time "
            "$upstream_addr $upstream_status $upstream_response_time $host "
            "$uri $args $request_id $http_NAME; an empty value is \"-\"), "
            "or \"json $var...\" for one JSON object per line"},
    FD_CONF_END};

fd_module_t fd_access_log_module = {
    FD_MODULE_LOC(access_log, al_conf_t),
    .init_cycle = access_log_init_cycle,
    .reopen_master = give_files,
    .init_worker = access_log_init_worker,
    .exit_worker = access_log_exit_worker,
    .reopen = access_log_reopen,
    .log = access_log_log,
};
