/*
 * Reading and typed parsing of the INI configuration. See fd_conf.h for the
 * three steps; fd_cycle.c applies the entries.
 */
#include <ctype.h>
#include <fcntl.h>
#include <glob.h>
#include <ini.h>
#include <libgen.h>
#include <sys/stat.h>

#include "fd_core.h"
#include "fd_conf.h"

int fd_conf_test;

#define FD_CONF_MAX_INCLUDE_DEPTH 8
/* A configuration file, main or included, is at most this big: a larger
 * one is a mistake (include = /var/log/...), and reading it whole would
 * only take the memory of a -t or a reload. 100,000 allow/deny lines are
 * about 2.5 MB. */
#define FD_CONF_MAX_FILE_SIZE (16 * 1024 * 1024)
#define TOO_BIG "is larger than 16m, the most a configuration file may be"

struct fd_conf_pos_s {
    const void *conf;
    const char *key;
    const char *file;
    int line;
    fd_conf_pos_t *next;
};

int fd_conf_error(fd_conf_t *cf, const char *fmt, ...)
{
    va_list ap;
    int n = 0;

    if (cf->file)
        n = snprintf(cf->err, sizeof(cf->err), "%s:%d: ", cf->file, cf->line);
    else if (cf->main_file)
        n = snprintf(cf->err, sizeof(cf->err), "%s: ", cf->main_file);
    if (n < 0 || (size_t)n >= sizeof(cf->err))
        n = 0;
    va_start(ap, fmt);
    vsnprintf(cf->err + n, sizeof(cf->err) - (size_t)n, fmt, ap);
    va_end(ap);
    return FD_ERROR;
}

int fd_conf_at_key(fd_conf_t *cf, const void *conf, const char *key)
{
    const fd_conf_pos_t *p;

    for (p = cf->set; p; p = p->next)
        if (p->conf == conf && strcmp(p->key, key) == 0) {
            cf->file = p->file;
            cf->line = p->line;
            return 1;
        }
    return 0;
}

static void remember(fd_conf_t *cf, const fd_directive_t *d, const void *conf)
{
    fd_conf_pos_t *p;

    if (cf->file == NULL || cf->temp == NULL)
        return; /* a default: nothing in the file to point at */
    p = fd_palloc(cf->temp, sizeof(*p));
    if (p == NULL)
        return; /* only a less precise position for a later error */
    p->conf = conf;
    p->key = d->name;
    p->file = cf->file;
    p->line = cf->line;
    p->next = cf->set;
    cf->set = p;
}

char *fd_conf_path(fd_conf_t *cf, const char *path)
{
    size_t pl, n;
    char *p;

    if (path[0] == '/' || cf->prefix == NULL)
        return fd_pstrdup(cf->pool, path, strlen(path));
    pl = strlen(cf->prefix);
    n = strlen(path);
    p = fd_pnalloc(cf->pool, pl + n + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, cf->prefix, pl);
    p[pl] = '/';
    memcpy(p + pl + 1, path, n + 1);
    return p;
}

/* --- values --- */

int fd_conf_parse_flag(const char *s)
{
    if (!strcmp(s, "on") || !strcmp(s, "yes") || !strcmp(s, "true") ||
        !strcmp(s, "1"))
        return 1;
    if (!strcmp(s, "off") || !strcmp(s, "no") || !strcmp(s, "false") ||
        !strcmp(s, "0"))
        return 0;
    return -1;
}

/* Leading digits of s, at most max; -1 without a digit or past max. */
static int64_t parse_number(const char *s, const char **end, int64_t max)
{
    int64_t v = 0;

    if (!isdigit((unsigned char)*s))
        return -1;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > (max - (*s - '0')) / 10)
            return -1;
        v = v * 10 + (*s - '0');
    }
    *end = s;
    return v;
}

int64_t fd_conf_parse_uint(const char *s, int64_t max)
{
    const char *e;
    int64_t v = parse_number(s, &e, max);

    return v < 0 || *e != '\0' ? -1 : v;
}

int64_t fd_conf_parse_size(const char *s)
{
    const char *e;
    int64_t v = parse_number(s, &e, FD_CONF_VALUE_MAX), m = 1;

    if (v < 0)
        return -1;
    switch (*e) {
    case '\0': break;
    case 'k': case 'K': m = 1024; e++; break;
    case 'm': case 'M': m = 1024 * 1024; e++; break;
    case 'g': case 'G': m = 1024 * 1024 * 1024; e++; break;
    default: return -1;
    }
    if (*e != '\0' || v > FD_CONF_VALUE_MAX / m)
        return -1;
    return v * m;
}

/* "75s", "500ms", "2m", "1h", "1d", "1m30s"; a bare number is seconds. */
int64_t fd_conf_parse_msec(const char *s)
{
    int64_t total = 0;

    if (*s == '\0')
        return -1;
    while (*s) {
        const char *e;
        int64_t v = parse_number(s, &e, FD_CONF_VALUE_MAX), m;

        if (v < 0)
            return -1;
        if (e[0] == 'm' && e[1] == 's') {
            m = 1;
            e += 2;
        } else if (*e == 's' || *e == '\0') {
            m = 1000;
            e += *e == 's';
        } else if (*e == 'm') {
            m = 60000;
            e++;
        } else if (*e == 'h') {
            m = 3600000;
            e++;
        } else if (*e == 'd') {
            m = 86400000;
            e++;
        } else {
            return -1;
        }
        /* the total, not only each part, stays within the bound: three
         * parts each just under it would overflow the sum */
        if (v > (FD_CONF_VALUE_MAX - total) / m)
            return -1;
        total += v * m;
        s = e;
    }
    return total;
}

const fd_directive_t *fd_conf_find(const fd_directive_t *d, const char *key)
{
    for (; d && d->name; d++)
        if (strcmp(d->name, key) == 0)
            return d;
    return NULL;
}

/* A bound as the user would write it: 1m rather than 1048576. */
void fd_conf_fmt_bound(char *buf, size_t n, fd_conf_type_t type, int64_t v)
{
    static const struct {
        int64_t m;
        const char *unit;
    } size[] = {{1024 * 1024 * 1024, "g"}, {1024 * 1024, "m"}, {1024, "k"}},
      msec[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    unsigned i;

    if (v > 0 && type == FD_CONF_SIZE)
        for (i = 0; i < fd_nelems(size); i++)
            if (v % size[i].m == 0) {
                snprintf(buf, n, "%lld%s", (long long)(v / size[i].m),
                         size[i].unit);
                return;
            }
    if (v > 0 && type == FD_CONF_MSEC)
        for (i = 0; i < fd_nelems(msec); i++)
            if (v % msec[i].m == 0) {
                snprintf(buf, n, "%lld%s", (long long)(v / msec[i].m),
                         msec[i].unit);
                return;
            }
    snprintf(buf, n, "%lld%s", (long long)v,
             type == FD_CONF_MSEC ? "ms" : "");
}

static int check_range(fd_conf_t *cf, const fd_directive_t *d, int64_t v,
                       const char *value)
{
    char lo[32], hi[32];

    if ((d->min == 0 && d->max == 0) || (v >= d->min && v <= d->max))
        return FD_OK;
    fd_conf_fmt_bound(lo, sizeof(lo), d->type, d->min);
    fd_conf_fmt_bound(hi, sizeof(hi), d->type, d->max);
    if (d->min == 0)
        return fd_conf_error(cf, "\"%s\" is at most %s, not \"%s\"",
                             d->name, hi, value);
    return fd_conf_error(cf, "\"%s\" must be %s .. %s, not \"%s\"", d->name,
                         lo, hi, value);
}

int fd_conf_parse_enum(fd_conf_t *cf, const char *key,
                       const fd_conf_enum_t *enums, const char *value,
                       int *out)
{
    const fd_conf_enum_t *e;
    char opts[256] = "";
    size_t n = 0;
    fd_conf_near_t nr;
    char hint[96];

    fd_conf_near_init(&nr, value);
    for (e = enums; e->name; e++) {
        if (strcmp(e->name, value) == 0) {
            *out = e->value;
            return FD_OK;
        }
        fd_conf_near_add(&nr, e->name);
    }
    for (e = enums; e->name && n < sizeof(opts) - 32; e++)
        n += (size_t)snprintf(opts + n, sizeof(opts) - n, "%s%s",
                              n ? " | " : "", e->name);
    return fd_conf_error(cf, "\"%s\" must be one of %s, not \"%s\"%s", key,
                         opts, value,
                         fd_conf_near_hint(&nr, hint, sizeof(hint)));
}

static int set_value(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *value)
{
    char *field = (char *)conf + d->offset;
    int64_t v;
    int f;
    fd_conf_list_t *l;
    char **items;

    if (d->renamed)
        return fd_conf_error(cf, "\"%s\" is not a key here any more: use "
                             "\"%s\" (%s)", d->name, d->renamed,
                             d->doc ? d->doc : "renamed");
    switch (d->type) {
    case FD_CONF_FLAG:
        if ((f = fd_conf_parse_flag(value)) < 0)
            return fd_conf_error(cf, "\"%s\" must be on or off, not \"%s\"",
                                 d->name, value);
        *(int *)field = f;
        return FD_OK;
    case FD_CONF_INT:
        v = fd_conf_parse_uint(value, INTPTR_MAX);
        if (v < 0)
            return fd_conf_error(cf, "\"%s\" needs a non-negative integer, "
                                 "not \"%s\"", d->name, value);
        if (check_range(cf, d, v, value) != FD_OK)
            return FD_ERROR;
        *(fd_int_t *)field = (fd_int_t)v;
        return FD_OK;
    case FD_CONF_SIZE:
        if ((v = fd_conf_parse_size(value)) < 0)
            return fd_conf_error(cf, "\"%s\" needs a size (like 8k or 1m), "
                                 "not \"%s\"", d->name, value);
        if (check_range(cf, d, v, value) != FD_OK)
            return FD_ERROR;
        *(size_t *)field = (size_t)v;
        return FD_OK;
    case FD_CONF_MSEC:
        if ((v = fd_conf_parse_msec(value)) < 0)
            return fd_conf_error(cf, "\"%s\" needs a duration (like 75s or "
                                 "500ms), not \"%s\"", d->name, value);
        if (check_range(cf, d, v, value) != FD_OK)
            return FD_ERROR;
        *(fd_msec_t *)field = (fd_msec_t)v;
        return FD_OK;
    case FD_CONF_ENUM:
        return fd_conf_parse_enum(cf, d->name, d->enums, value,
                                  (int *)field);
    case FD_CONF_STR:
        *(char **)field = fd_pstrdup(cf->pool, value, strlen(value));
        return FD_OK;
    case FD_CONF_LIST:
        if (d->set) /* a repeatable key the module parses itself */
            return d->set(cf, d, conf, value);
        l = (fd_conf_list_t *)field;
        items = fd_parray_reserve(cf->pool, l->items, l->n, &l->cap,
                                  sizeof(char *));
        if (items == NULL)
            return fd_conf_error(cf, "out of memory");
        items[l->n++] = fd_pstrdup(cf->pool, value, strlen(value));
        l->items = items;
        return FD_OK;
    case FD_CONF_CUSTOM:
        return d->set(cf, d, conf, value);
    }
    return fd_conf_error(cf, "bad directive type for \"%s\"", d->name);
}

int fd_conf_set(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                const char *value)
{
    if (set_value(cf, d, conf, value) != FD_OK)
        return FD_ERROR;
    remember(cf, d, conf);
    return FD_OK;
}

/* --- did you mean --- */

#define NEAR_MAX_LEN 64

/* Optimal string alignment distance (Levenshtein plus the swap of two
 * neighbours), three rows; names longer than NEAR_MAX_LEN are far. */
unsigned fd_conf_distance(const char *a, const char *b)
{
    unsigned rows[3][NEAR_MAX_LEN + 1], *pp, *p, *c;
    size_t la = strlen(a), lb = strlen(b), i, j;

    if (la > NEAR_MAX_LEN || lb > NEAR_MAX_LEN)
        return UINT32_MAX;
    pp = rows[0];
    p = rows[1];
    c = rows[2];
    for (j = 0; j <= lb; j++)
        p[j] = (unsigned)j;
    for (i = 1; i <= la; i++) {
        unsigned *t;
        c[0] = (unsigned)i;
        for (j = 1; j <= lb; j++) {
            unsigned cost = a[i - 1] != b[j - 1], v = p[j - 1] + cost;
            if (p[j] + 1 < v)
                v = p[j] + 1;
            if (c[j - 1] + 1 < v)
                v = c[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && pp[j - 2] + 1 < v)
                v = pp[j - 2] + 1;
            c[j] = v;
        }
        t = pp;
        pp = p;
        p = c;
        c = t;
    }
    return p[lb];
}

void fd_conf_near_init(fd_conf_near_t *nr, const char *name)
{
    nr->name = name;
    nr->best = NULL;
    nr->dist = UINT32_MAX;
}

void fd_conf_near_add(fd_conf_near_t *nr, const char *candidate)
{
    unsigned d = fd_conf_distance(nr->name, candidate);

    if (d < nr->dist) {
        nr->dist = d;
        nr->best = candidate;
    }
}

void fd_conf_near_table(fd_conf_near_t *nr, const fd_directive_t *d)
{
    for (; d && d->name; d++)
        if (d->renamed == NULL)
            fd_conf_near_add(nr, d->name);
}

const char *fd_conf_near_best(const fd_conf_near_t *nr)
{
    size_t n = strlen(nr->name);

    /* two edits in a long name are a typo; in "ab" they are another word */
    if (nr->best == NULL || nr->dist == 0 || nr->dist > 2 ||
        (n < 5 && nr->dist > 1) || n < 3)
        return NULL;
    return nr->best;
}

const char *fd_conf_near_hint(const fd_conf_near_t *nr, char *buf, size_t n)
{
    const char *best = fd_conf_near_best(nr);

    if (best == NULL || n == 0)
        return "";
    snprintf(buf, n, "; did you mean \"%s\"?", best);
    return buf;
}

/* --- one name, one meaning --- */

int fd_conf_check_levels(const fd_conf_level_t *levels, unsigned n,
                         char *err, size_t errlen)
{
    unsigned li, ti, lj, tj;

    for (li = 0; li < n; li++)
        for (ti = 0; levels[li].tables[ti]; ti++)
            for (const fd_directive_t *d = levels[li].tables[ti]; d->name;
                 d++) {
                if (d->renamed)
                    continue;
                for (lj = li; lj < n; lj++)
                    for (tj = 0; levels[lj].tables[tj]; tj++)
                        for (const fd_directive_t *e = levels[lj].tables[tj];
                             e->name; e++) {
                            if (e == d || e->renamed ||
                                strcmp(d->name, e->name) != 0 ||
                                (d->handler_key && e->handler_key))
                                continue;
                            snprintf(err, errlen, "key \"%s\" is declared "
                                     "twice, with two meanings: in %s and "
                                     "in %s", d->name, levels[li].level,
                                     levels[lj].level);
                            return FD_ERROR;
                        }
            }
    return FD_OK;
}

int fd_conf_defaults(fd_conf_t *cf, const fd_directive_t *d, void *conf)
{
    const char *file = cf->file;
    int line = cf->line;

    cf->file = NULL;
    for (; d && d->name; d++) {
        if (d->def && fd_conf_set(cf, d, conf, d->def) != FD_OK) {
            cf->file = file;
            return FD_ERROR;
        }
    }
    cf->file = file;
    cf->line = line;
    return FD_OK;
}

/* --- reading: INI and includes into a flat list of entries --- */

typedef struct {
    fd_conf_t *cf;
    FILE *fp;
    const char *file;
    int line;
    int partial;               /* the last fgets() ended mid-line */
    size_t bytes;              /* read so far (FD_CONF_MAX_FILE_SIZE) */
    int too_big;
    char head[72];             /* the start of the last line read */
    char *section;        /* current section as the reader saw it */
    unsigned seq;
    fd_conf_entry_t **entries;
    unsigned *n;
    unsigned *cap;
    unsigned *seq_counter;
    int depth;
    int failed;
} reader_t;

static int read_file(fd_conf_t *cf, const char *path, const char *section,
                     unsigned seq, fd_conf_entry_t **entries, unsigned *n,
                     unsigned *cap, unsigned *seq_counter, int depth);

static int add_entry(reader_t *rd, const char *key, const char *value);

static char *trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/*
 * inih hands us each line through this reader. Section headers are taken
 * from the raw line here (inih cuts a header at the first ']', which a
 * regex location may contain), and every header starts a new section
 * instance, so two [server] in a row stay two servers.
 */
static char *conf_reader(char *str, int num, void *stream)
{
    reader_t *rd = stream;
    char *s, *end;

    size_t len;
    int line_start = !rd->partial;

    if (rd->failed || fgets(str, num, rd->fp) == NULL)
        return NULL;
    /* inih asks again, with a bigger buffer, for the rest of a line
     * longer than its buffer: that is not a new line */
    len = strlen(str);
    /* the size seen at open may grow while it is read */
    rd->bytes += len;
    if (rd->bytes > FD_CONF_MAX_FILE_SIZE) {
        rd->too_big = 1;
        rd->failed = 1;
        return NULL;
    }
    rd->partial = len > 0 && str[len - 1] != '\n';
    if (!line_start)
        return str;
    rd->line++;
    s = str;
    while (isspace((unsigned char)*s))
        s++;
    snprintf(rd->head, sizeof(rd->head), "%s", s);
    if (*s == '[') {
        char tmp[1024];
        end = strrchr(s, ']');
        if (end == NULL || (size_t)(end - s) >= sizeof(tmp)) {
            if (!rd->failed) {
                rd->cf->file = rd->file;
                rd->cf->line = rd->line;
                fd_conf_error(rd->cf, "section header without \"]\"");
                rd->failed = 1;
            }
            return str;
        }
        memcpy(tmp, s + 1, (size_t)(end - s - 1));
        tmp[end - s - 1] = '\0';
        rd->section = fd_pstrdup(rd->cf->pool, trim(tmp), strlen(trim(tmp)));
        rd->seq = ++*rd->seq_counter;
        /* a marker entry (empty key): the section exists even without
         * keys, and errors about it name its header line */
        if (add_entry(rd, "", "") != FD_OK)
            rd->failed = 1;
        /* hand inih a header it cannot misread */
        snprintf(str, (size_t)num, "[s]\n");
    }
    return str;
}

/* The first control byte in s (a tab is fine), or -1. A CR or LF in a
 * value would end a header line where it is sent (server_name, set_header,
 * return): such a value is refused, never sent. */
static int control_byte(const char *s)
{
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return (unsigned char)*s;
    return -1;
}

static int add_entry(reader_t *rd, const char *key, const char *value)
{
    fd_conf_entry_t *e;
    int b;

    if ((b = control_byte(rd->section)) >= 0 || (b = control_byte(key)) >= 0 ||
        (b = control_byte(value)) >= 0) {
        rd->cf->file = rd->file;
        rd->cf->line = rd->line;
        return fd_conf_error(rd->cf, "control character 0x%02x in %s%s%s",
                             b, key[0] ? "\"" : "the section header",
                             key, key[0] ? "\"" : "");
    }
    if (*rd->n == *rd->cap) {
        unsigned nc = *rd->cap ? *rd->cap * 2 : 64;
        fd_conf_entry_t *ne = realloc(*rd->entries, nc * sizeof(*ne));
        if (ne == NULL)
            return fd_conf_error(rd->cf, "out of memory");
        *rd->entries = ne;
        *rd->cap = nc;
    }
    e = &(*rd->entries)[(*rd->n)++];
    e->section = rd->section;
    e->key = fd_pstrdup(rd->cf->pool, key, strlen(key));
    e->value = fd_pstrdup(rd->cf->pool, value, strlen(value));
    e->file = rd->file;
    e->line = rd->line;
    e->section_seq = rd->seq;
    return FD_OK;
}

static int do_include(reader_t *rd, const char *pattern)
{
    char *path, *dir, *tmp;
    glob_t g;
    size_t i;
    int rc;

    if (pattern[0] == '/') {
        path = fd_pstrdup(rd->cf->pool, pattern, strlen(pattern));
    } else {
        tmp = fd_pstrdup(rd->cf->pool, rd->file, strlen(rd->file));
        dir = dirname(tmp);
        path = fd_pnalloc(rd->cf->pool, strlen(dir) + strlen(pattern) + 2);
        sprintf(path, "%s/%s", dir, pattern);
    }
    rc = glob(path, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        /* a pattern may match nothing (empty conf.d); a plain name must */
        if (strpbrk(pattern, "*?[") == NULL)
            return fd_conf_error(rd->cf, "include \"%s\": no such file",
                                 path);
        return FD_OK;
    }
    if (rc != 0)
        return fd_conf_error(rd->cf, "include \"%s\" failed", path);
    for (i = 0; i < g.gl_pathc; i++) {
        char *f = fd_pstrdup(rd->cf->pool, g.gl_pathv[i],
                             strlen(g.gl_pathv[i]));
        if (read_file(rd->cf, f, rd->section, rd->seq, rd->entries, rd->n,
                      rd->cap, rd->seq_counter, rd->depth + 1) != FD_OK) {
            globfree(&g);
            return FD_ERROR;
        }
    }
    globfree(&g);
    return FD_OK;
}

static int conf_handler(void *user, const char *section, const char *name,
                        const char *value)
{
    reader_t *rd = user;

    (void)section;
    if (rd->failed)
        return 0;
    rd->cf->file = rd->file;
    rd->cf->line = rd->line;
    if (rd->section == NULL) {
        fd_conf_error(rd->cf, "\"%s\" outside of any section", name);
        rd->failed = 1;
        return 0;
    }
    if (strcmp(name, "include") == 0) {
        if (do_include(rd, value) != FD_OK) {
            rd->failed = 1;
            return 0;
        }
        return 1;
    }
    if (add_entry(rd, name, value) != FD_OK) {
        rd->failed = 1;
        return 0;
    }
    return 1;
}

/* "root html": a word, a space and more, and no "=" (inih found none):
 * the word is a key missing its "=" */
static const char *missing_equals(const char *line, char *buf, size_t n)
{
    const char *rest;
    size_t w = 0;

    while (isalnum((unsigned char)line[w]) || line[w] == '_' ||
           line[w] == '.')
        w++;
    if (w == 0 || w > 64 || (line[w] != ' ' && line[w] != '\t'))
        return "";
    rest = line + w;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    if (*rest == '\0' || *rest == '\n' || *rest == '\r' || *rest == ';' ||
        *rest == '#')
        return "";
    snprintf(buf, n, "; missing \"=\" after \"%.*s\"?", (int)w, line);
    return buf;
}

static const char *memory_name, *memory_text;

void fd_conf_memory(const char *name, const char *text)
{
    memory_name = name;
    memory_text = text;
}

const char *fd_conf_memory_name(void)
{
    return memory_name;
}

static int read_file(fd_conf_t *cf, const char *path, const char *section,
                     unsigned seq, fd_conf_entry_t **entries, unsigned *n,
                     unsigned *cap, unsigned *seq_counter, int depth)
{
    reader_t rd = {
        .cf = cf, .file = path, .section = (char *)section, .seq = seq,
        .entries = entries, .n = n, .cap = cap, .seq_counter = seq_counter,
        .depth = depth,
    };
    const char *at_file = cf->file, *why = NULL;
    int at_line = cf->line, fd, rc, err = 0;
    struct stat st;

    if (depth > FD_CONF_MAX_INCLUDE_DEPTH)
        return fd_conf_error(cf, "includes nested too deep at \"%s\"", path);
    if (depth == 0)
        cf->file = NULL; /* the main file: its name is the prefix */
    if (depth == 0 && memory_name && strcmp(path, memory_name) == 0) {
        /* a one-line command's configuration (fd_cli.c) */
        rd.fp = fmemopen((void *)memory_text, strlen(memory_text), "r");
        if (rd.fp == NULL)
            return fd_conf_error(cf, "cannot open: %s", strerror(errno));
        goto parse;
    }
    /* O_NONBLOCK: a FIFO's open() would wait for a writer (a regular
     * file's reads ignore it) */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0)
        err = errno;
    else if (!S_ISREG(st.st_mode))
        why = S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file";
    else if (st.st_size > FD_CONF_MAX_FILE_SIZE)
        why = TOO_BIG;
    else if ((rd.fp = fdopen(fd, "r")) == NULL)
        err = errno;
    if (err || why) {
        if (fd >= 0)
            close(fd);
        goto failed;
    }
parse:
    rc = ini_parse_stream(conf_reader, &rd, conf_handler, &rd);
    fclose(rd.fp);
    if (rd.too_big) {
        /* the file's own position is its last line: name the include */
        cf->file = at_file;
        cf->line = at_line;
        why = TOO_BIG;
        goto failed;
    }
    if (rd.failed)
        return FD_ERROR;
    if (rc != 0) {
        char hint[96];
        cf->file = path;
        cf->line = rc > 0 ? rc : rd.line;
        return fd_conf_error(cf, "syntax error (expected \"key = value\" "
                             "or \"[section]\")%s",
                             rc == rd.line ? missing_equals(rd.head, hint,
                                                            sizeof(hint))
                                           : "");
    }
    return FD_OK;

failed:
    if (depth == 0)
        return err ? fd_conf_error(cf, "cannot open: %s", strerror(err))
                   : fd_conf_error(cf, "%s", why);
    return err ? fd_conf_error(cf, "cannot open \"%s\": %s", path,
                               strerror(err))
               : fd_conf_error(cf, "include \"%s\" %s", path, why);
}

int fd_conf_read(fd_conf_t *cf, const char *path, fd_conf_entry_t **entries,
                 unsigned *n)
{
    unsigned cap = 0, seq = 0;

    /* long lines (log formats, regexes) and no configparser continuations */
    ini_use_stack = false;
    ini_allow_realloc = true;
    ini_max_line = 64 * 1024;
    ini_allow_multiline = false;
    ini_stop_on_first_error = true;
    *entries = NULL;
    *n = 0;
    if (cf->main_file == NULL)
        cf->main_file = path;
    return read_file(cf, path, NULL, 0, entries, n, &cap, &seq, 0);
}
