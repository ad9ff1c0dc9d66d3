/*
 * The access log: one line per finished request, written through a
 * per-worker buffer.
 *
 *   access_log = PATH [format=NAME] [buffer=SIZE] [flush=TIME] | off
 *   log_format = NAME FORMAT...          (repeatable)
 *   log_format = NAME json $var...       (one JSON object per line)
 *
 * Both are location keys: [http], [server] or [location]; the innermost
 * access_log wins. Formats are scripts of fastd's variables, compiled
 * once at load (fd_api_script_compile).
 * Each worker opens every log file itself (O_APPEND) in init_worker, so a
 * reopen (SIGUSR1, fastd -s reopen) is per worker (a root master makes
 * each file first, for the workers' user: fd_api_conf_worker_file); the
 * buffer is written
 * whole-lines-only with one write() when full, every `flush` interval, on
 * reopen and at worker exit. A line never straddles two write()s, so
 * workers sharing a file never interleave inside a line.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fastd.h"

/* A part of a format: its text, or a variable (its number in the
 * script; in json, text is what goes before its value: ,"name": or
 * {"name": for the first, made once here rather than per line) */
typedef struct {
    int var;
    int number;              /* FD_API_VAR_NUMBER: unquoted in json */
    unsigned index;
    fd_str_t text;
} al_part_t;

typedef struct al_format_s {
    const char *name;
    int json;              /* parts are variables only, keyed by name */
    const fd_api_script_t *script;
    al_part_t *parts;
    unsigned n;
    struct al_format_s *next;
} al_format_t;

typedef struct al_file_s {
    const char *path;
    size_t buffer;           /* 0: write every line at once */
    uint64_t flush;
    /* worker state: only the owner (first file with this path) is used */
    struct al_file_s *owner;
    int fd;
    char *buf;
    size_t len;
    fd_api_timer_t *timer;   /* armed while the buffer holds lines */
    struct al_file_s *wnext;
} al_file_t;

typedef struct {
    int set;                 /* access_log given at some level */
    al_file_t *file;         /* NULL: off */
    const char *format_name;
    al_format_t *format;     /* resolved in init_conf */
    al_format_t *formats;    /* log_format entries seen by this location */
} al_conf_t;

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

/* fd_api_conf_error(), then FD_ERROR */
#define CONF_ERROR(...) (fd_api_conf_error(__VA_ARGS__), FD_ERROR)

/* --- configuration --- */

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

/* The parts of f's script: for json, $a $b ...: variables with blanks
 * between them, the blanks dropped. */
static int format_parts(al_format_t *f)
{
    unsigned n = fd_api_script_parts(f->script), i, k;
    fd_api_part_t part;
    int prev_var = 0;

    f->parts = fd_api_conf_alloc((n ? n : 1) * sizeof(*f->parts));
    if (f->parts == NULL)
        return CONF_ERROR("out of memory");
    for (i = 0, k = 0; i < n; i++) {
        fd_api_script_part(f->script, i, &part);
        if (part.kind != FD_API_PART_TEXT) {
            if (f->json && prev_var)
                return CONF_ERROR("log_format json: variables are separated "
                                  "by spaces");
            prev_var = 1;
            f->parts[k] = (al_part_t){
                .var = 1, .number = (part.flags & FD_API_VAR_NUMBER) != 0,
                .index = i, .text = part.name};
            if (f->json) {
                size_t len = part.name.len + 4;
                char *key = fd_api_conf_alloc(len);
                if (key == NULL)
                    return CONF_ERROR("out of memory");
                key[0] = k ? ',' : '{';
                key[1] = '"';
                memcpy(key + 2, part.name.data, part.name.len);
                memcpy(key + len - 2, "\":", 2);
                f->parts[k].text = (fd_str_t){len, key};
            }
            k++;
            continue;
        }
        prev_var = 0;
        if (!f->json) {
            f->parts[k++] = (al_part_t){.index = i, .text = part.name};
            continue;
        }
        if (strspn(part.name.data, " \t") != part.name.len)
            return CONF_ERROR("log_format json: \"%.*s\" is not a "
                              "$variable", (int)part.name.len,
                              part.name.data);
    }
    f->n = k;
    if (f->json && k == 0)
        return CONF_ERROR("log_format json needs variables");
    return FD_OK;
}

/* Compile FORMAT (text with variables, or "json $var...") into f. */
static int format_compile(al_format_t *f, const char *src)
{
    const char *p = src;

    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "json", 4) == 0 && (p[4] == ' ' || p[4] == '\t')) {
        f->json = 1;
        f->script = fd_api_script_compile(p + 4, strlen(p + 4), 0,
                                          "log_format json");
    } else {
        f->script = fd_api_script_compile(src, strlen(src), 0, "log_format");
    }
    return f->script ? format_parts(f) : FD_ERROR;
}

static int set_log_format(al_conf_t *lc, const char *v)
{
    al_format_t *f, **pp;
    const char *sp;
    char *name;
    size_t n;

    while (*v == ' ' || *v == '\t')
        v++;
    for (n = 0; is_name_char(v[n]) || v[n] == '-' || v[n] == '.'; n++)
        ;
    sp = v + n;
    if (n == 0 || (*sp != ' ' && *sp != '\t'))
        return CONF_ERROR("log_format needs NAME FORMAT, not \"%s\"", v);
    if ((n == 8 && memcmp(v, "combined", 8) == 0) ||
        (n == 4 && memcmp(v, "json", 4) == 0))
        return CONF_ERROR("log_format \"%.*s\" is predefined", (int)n, v);
    f = fd_api_conf_alloc(sizeof(*f));
    name = fd_api_conf_alloc(n + 1);
    if (f == NULL || name == NULL)
        return CONF_ERROR("out of memory");
    memcpy(name, v, n);
    f->name = name;
    if (format_compile(f, sp + 1) != FD_OK)
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

static int set_access_log(al_conf_t *lc, const char *v)
{
    size_t len = strlen(v);
    char *copy = fd_api_conf_alloc(len + 1), *tok, *save, *dir;
    al_file_t *f;
    struct stat st;

    if (copy == NULL)
        return CONF_ERROR("out of memory");
    memcpy(copy, v, len + 1);
    lc->set = 1;
    lc->file = NULL;
    lc->format_name = "combined";
    tok = strtok_r(copy, " \t", &save);
    if (tok == NULL)
        return CONF_ERROR("access_log needs a path or off");
    if (strcmp(tok, "off") == 0) {
        if (strtok_r(NULL, " \t", &save))
            return CONF_ERROR("access_log = off takes no options");
        return FD_OK;
    }
    f = fd_api_conf_alloc(sizeof(*f));
    if (f == NULL || (f->path = fd_api_conf_path(tok)) == NULL)
        return CONF_ERROR("out of memory");
    f->buffer = 64 * 1024;
    f->flush = 1000;
    f->fd = -1;
    while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
        int64_t n;
        if (strncmp(tok, "format=", 7) == 0 && tok[7]) {
            lc->format_name = tok + 7;
        } else if (strncmp(tok, "buffer=", 7) == 0) {
            n = fd_api_parse_size(tok + 7);
            if (n < 0 || n > 16 * 1024 * 1024)
                return CONF_ERROR("access_log: bad buffer size \"%s\" (0 .. "
                                  "16m)", tok + 7);
            f->buffer = (size_t)n;
        } else if (strncmp(tok, "flush=", 6) == 0) {
            n = fd_api_parse_msec(tok + 6);
            if (n <= 0)
                return CONF_ERROR("access_log: bad flush interval \"%s\"",
                                  tok + 6);
            f->flush = (uint64_t)n;
        } else {
            return CONF_ERROR("access_log: unknown option \"%s\" (format=, "
                              "buffer=, flush=)", tok);
        }
    }
    /* the workers create the file; its directory must exist now */
    len = strlen(f->path);
    if ((dir = fd_api_conf_alloc(len + 1)) == NULL)
        return CONF_ERROR("out of memory");
    memcpy(dir, f->path, len + 1);
    dir = dirname(dir);
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return CONF_ERROR("access_log \"%s\": directory \"%s\" does not "
                          "exist", f->path, dir);
    /* a root master makes it for the workers' user */
    if (fd_api_conf_worker_file(f->path) != FD_OK)
        return CONF_ERROR("out of memory");
    lc->file = f;
    return FD_OK;
}

static int access_log_set(void *conf, const char *key, const char *value,
                          int own)
{
    (void)own;
    return strcmp(key, "access_log") == 0 ? set_access_log(conf, value)
                                          : set_log_format(conf, value);
}

static int access_log_init_conf(void *conf)
{
    al_conf_t *lc = conf;
    al_format_t *f;
    const char *src = NULL;

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
        src = fd_api_var_exists("upstream_addr") ? json_src
                                                 : json_noproxy_src;
    else {
        fd_api_conf_at_key(conf, "access_log"); /* its line, not [section] */
        return CONF_ERROR("access_log \"%s\": unknown log_format \"%s\"",
                          lc->file->path, lc->format_name);
    }
    f = fd_api_conf_alloc(sizeof(*f));
    if (f == NULL)
        return CONF_ERROR("out of memory");
    f->name = lc->format_name;
    if (format_compile(f, src) != FD_OK)
        return FD_ERROR;
    lc->format = f;
    return FD_OK;
}

/* --- the files, per worker --- */

static int file_open(al_file_t *f)
{
    int fd = open(f->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

    if (fd < 0) {
        fd_api_log(FD_API_LOG_ERR, errno, "open(\"%s\") failed", f->path);
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

    fd_api_timer_cancel(f->timer);
    f->timer = NULL;
    while (off < f->len && f->fd >= 0) {
        /* a regular file: write() does not wait on the network */
        ssize_t n = write(f->fd, f->buf + off, f->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_api_log(FD_API_LOG_ERR, n < 0 ? errno : 0, "write() to "
                       "\"%s\" failed, %zu bytes of access log lost",
                       f->path, f->len - off);
            break;
        }
        off += (size_t)n;
    }
    f->len = 0;
}

static void flush_timer(void *data)
{
    al_file_t *f = data;

    f->timer = NULL; /* fired: fastd frees it */
    file_flush(f);
}

/* Give the location's file an owner: the first file with its path. */
static void loc_file(void *conf, void *data)
{
    al_conf_t *lc = conf;
    al_file_t *f = lc->file, *o;

    (void)data;
    if (f == NULL)
        return;
    for (o = wfiles; o; o = o->wnext)
        if (strcmp(o->path, f->path) == 0)
            break;
    if (o) {
        /* one buffer per path: the largest, flushed most often */
        f->owner = o;
        if (o->buffer < f->buffer)
            o->buffer = f->buffer;
        if (o->flush > f->flush)
            o->flush = f->flush;
        return;
    }
    f->owner = f;
    f->fd = -1;
    f->len = 0;
    f->timer = NULL;
    f->wnext = wfiles;
    wfiles = f;
}

static int access_log_init_worker(void)
{
    al_file_t *f;

    wfiles = NULL;
    fd_api_loc_each(FD_API_SELF, loc_file, NULL);
    for (f = wfiles; f; f = f->wnext) {
        if (f->buffer) {
            f->buf = malloc(f->buffer);
            if (f->buf == NULL) {
                fd_api_log(FD_API_LOG_ERR, errno, "access log buffer");
                return FD_ERROR;
            }
        }
        file_open(f); /* a failure is logged; reopen retries */
    }
    return FD_OK;
}

static void access_log_reopen(void)
{
    al_file_t *f;

    for (f = wfiles; f; f = f->wnext) {
        /* what was logged before the signal goes to the old file */
        file_flush(f);
        file_open(f);
    }
}

static void access_log_exit_worker(void)
{
    al_file_t *f;

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

/* --- a line's bytes: in the file's buffer, or the request's memory --- */

typedef struct {
    char *start, *pos, *end;
    fd_request_t *r;         /* grows in its memory; NULL: fixed */
    int failed;
} al_sb_t;

static char *sb_grow(al_sb_t *sb, size_t n)
{
    size_t len = (size_t)(sb->pos - sb->start),
           cap = (size_t)(sb->end - sb->start) * 2;
    char *p;

    if (cap < len + n)
        cap = len + n;
    if (sb->r == NULL || (p = fd_req_alloc(sb->r, cap)) == NULL) {
        sb->failed = 1;
        return NULL;
    }
    memcpy(p, sb->start, len);
    sb->start = p;
    sb->pos = p + len;
    sb->end = p + cap;
    return sb->pos;
}

static inline size_t sb_avail(const al_sb_t *sb)
{
    return (size_t)(sb->end - sb->pos);
}

/* room for n bytes at sb->pos, or NULL (failed: what is built after is
 * dropped with it) */
static inline char *sb_reserve(al_sb_t *sb, size_t n)
{
    return __builtin_expect((size_t)(sb->end - sb->pos) >= n, 1)
               ? sb->pos
               : sb_grow(sb, n);
}

static inline void sb_add(al_sb_t *sb, const char *s, size_t n)
{
    char *q = sb_reserve(sb, n);

    if (q) {
        memcpy(q, s, n);
        sb->pos = q + n;
    }
}

static inline void sb_addc(al_sb_t *sb, char c)
{
    sb_add(sb, &c, 1);
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
escape_run(al_sb_t *sb, fd_str_t v, size_t max,
           size_t (*width)(unsigned char),
           char *(*byte)(char *, unsigned char))
{
    const unsigned char *s = (const unsigned char *)v.data;
    size_t i = 0, n;
    char *q;

    while (i < v.len) {
        n = v.len - i;
        if (n > sb_avail(sb) / max)
            n = sb_avail(sb) / max;
        if (n == 0) {
            if ((q = sb_reserve(sb, width(s[i]))) == NULL)
                return;
            sb->pos = byte(q, s[i++]);
            continue;
        }
        if ((q = sb_reserve(sb, max * n)) == NULL)
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
        sb->pos = q;
    }
}

static void escape_text(al_sb_t *sb, fd_str_t v)
{
    escape_run(sb, v, 4, text_width, text_byte);
}

static void escape_json(al_sb_t *sb, fd_str_t v)
{
    escape_run(sb, v, 6, json_width, json_byte);
}

/* The line for r, appended to sb (which may run out: the caller checks).
 * An empty value is "-" (as nginx). */
static void line_build(fd_request_t *r, const al_format_t *f, al_sb_t *sb)
{
    char tmp[FD_API_VAR_TMP];
    unsigned i;

    for (i = 0; i < f->n; i++) {
        const al_part_t *p = &f->parts[i];
        fd_str_t v;

        if (!p->var) {
            sb_add(sb, p->text.data, p->text.len);
            continue;
        }
        v = fd_req_script_value(r, f->script, p->index, NULL, tmp);
        if (f->json) {
            sb_add(sb, p->text.data, p->text.len); /* ,"name": */
            if (p->number && v.len) {
                sb_add(sb, v.data, v.len);
            } else {
                sb_addc(sb, '"');
                if (v.len == 0)
                    sb_addc(sb, '-');
                escape_json(sb, v);
                sb_addc(sb, '"');
            }
        } else if (v.len == 0) {
            sb_addc(sb, '-');
        } else {
            escape_text(sb, v);
        }
    }
    if (f->json)
        sb_addc(sb, '}');
    sb_addc(sb, '\n');
}

static void access_log_log(fd_request_t *r)
{
    const al_conf_t *lc = fd_req_log_conf_of(r, FD_API_SELF);
    al_file_t *f;
    al_sb_t sb;
    char *keep;

    if (lc->file == NULL || (f = lc->file->owner) == NULL || f->fd < 0)
        return;
    if (f->buf) {
        /* straight into the buffer's free end; a line that does not fit
         * leaves nothing there (len is not moved): flush, try again */
        sb = (al_sb_t){f->buf + f->len, f->buf + f->len, f->buf + f->buffer,
                       NULL, 0};
        line_build(r, lc->format, &sb);
        if (sb.failed && f->len) {
            file_flush(f);
            sb = (al_sb_t){f->buf, f->buf, f->buf + f->buffer, NULL, 0};
            line_build(r, lc->format, &sb);
        }
        if (!sb.failed) {
            f->len += (size_t)(sb.pos - sb.start);
            if (f->timer == NULL)
                f->timer = fd_api_timer(f->flush, flush_timer, f);
            return;
        }
    }
    /* larger than the buffer (or unbuffered): built in the request's
     * memory and written alone */
    sb = (al_sb_t){.r = r};
    if ((sb.start = fd_req_alloc(r, 1024)) == NULL)
        return;
    sb.pos = sb.start;
    sb.end = sb.start + 1024;
    line_build(r, lc->format, &sb);
    if (sb.failed) {
        fd_api_log(FD_API_LOG_ERR, 0, "no memory for an access log line");
        return;
    }
    file_flush(f);
    keep = f->buf;
    f->buf = sb.start;
    f->len = (size_t)(sb.pos - sb.start);
    file_flush(f);
    f->buf = keep;
}

static const fd_api_key_t access_log_keys[] = {
    {.name = "access_log", .type = FD_API_CUSTOM,
     .doc = "PATH [format=NAME] [buffer=64k] [flush=1s], or off (default): "
            "one line per request; format combined (default), json, or a "
            "log_format; buffered per worker, reopened on SIGUSR1"},
    {.name = "log_format", .type = FD_API_LIST,
     .doc = "NAME FORMAT..., repeatable: text with $variables (any of the "
            "registry's, e.g. $remote_addr $time_local $request $status "
            "$body_bytes_sent $http_referer $http_user_agent $request_time "
            "$upstream_addr $upstream_status $upstream_response_time $host "
            "$uri $args $request_id $http_NAME; an empty value is \"-\"), "
            "or \"json $var...\" for one JSON object per line"},
    {.name = NULL}};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "access_log",
    .keys = access_log_keys,
    .conf_size = sizeof(al_conf_t),
    .init_conf = access_log_init_conf,
    .init_worker = access_log_init_worker,
    .exit_worker = access_log_exit_worker,
    .set = access_log_set,
    .log = access_log_log,
    .reopen = access_log_reopen,
};
