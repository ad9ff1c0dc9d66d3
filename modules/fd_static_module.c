/*
 * static: serves files under the location root.
 *
 * Index files, MIME types from an nginx-format mime.types, Last-Modified /
 * If-Modified-Since, ETag / If-None-Match, byte ranges (If-Range),
 * and bodies as file buffers that the engine sends with sendfile. Open
 * descriptors are kept per worker for the next requests (the open file
 * cache below).
 *
 * No path escapes the root: the engine hands us a decoded, normalised path
 * (no "." or ".." segments, no NUL), and unless follow_symlinks is on the
 * file is opened beneath a descriptor of the root with openat2()
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, on kernels without openat2,
 * one component at a time with O_NOFOLLOW.
 *
 * alias maps a location onto another directory, confined by the same
 * mechanism beneath it; gzip_static serves FILE.br / FILE.gz in FILE's
 * stead, opened beneath the same root; autoindex lists a directory that
 * has no index file, read whole into the request pool (bounded).
 *
 * The handler touches only the request and makes blocking file syscalls,
 * so it may run on an offload thread.
 */
#include "fd_core.h"
#include "fd_http.h"
#include "fd_http_accept.h"
#include "fd_static.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <time.h>

#define MIME_DEFAULT_PATH "conf/mime.types"
#define MIME_MAX_FILE (1024 * 1024)

typedef struct {
    fd_str_t ext;  /* lower case */
    fd_str_t type;
} mime_slot_t;

/* Open-addressing hash table, extension -> type, in the config pool. */
typedef struct {
    mime_slot_t *slots;
    size_t mask;
    size_t n;
} mime_table_t;

typedef struct ofc_s ofc_t;

typedef struct {
    char *mime_types;
    int etag;
    fd_int_t open_file_cache;      /* entries per worker, 0: off */
    fd_msec_t open_file_cache_valid;
    fd_int_t max_ranges;
    char *alias;                   /* as configured */
    /* alias, resolved at load: files open beneath base (a directory,
     * realpath()'d as root is) at the path tail expands to ($1..$9 from
     * a regex location) followed, in a prefix location, by what of the
     * request path its prefix did not match */
    char *alias_base;
    size_t alias_base_len;
    char *alias_tail;
    int gzip_static;
    int autoindex;
    int autoindex_format;
    int autoindex_exact_size;
    int autoindex_localtime;
    const mime_table_t *types;
    ofc_t *cache; /* this worker's, made on first use (loop thread only) */
    /* this worker's descriptor of the root (O_PATH), opened on first use
     * and kept: files open beneath it without a path walk of the root per
     * request. 0: not yet (the conf is zeroed), else fd + 1. The root was
     * resolved with realpath() at load, so caching changes nothing a
     * reload would not. */
    int rootfd1;
} static_conf_t;

static int static_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf);
static int static_handler(fd_request_t *r);
static int static_try_file(fd_request_t *r, fd_str_t uri, int dir);

enum { GZIP_STATIC_OFF, GZIP_STATIC_ON, GZIP_STATIC_ALWAYS };

static const fd_conf_enum_t gzip_static_enums[] = {
    {"off", GZIP_STATIC_OFF},
    {"on", GZIP_STATIC_ON},
    {"always", GZIP_STATIC_ALWAYS},
    {NULL, 0}};

enum { AUTOINDEX_HTML, AUTOINDEX_JSON };

static const fd_conf_enum_t autoindex_enums[] = {
    {"html", AUTOINDEX_HTML},
    {"json", AUTOINDEX_JSON},
    {NULL, 0}};

static const fd_directive_t static_directives[] = {
    {.name = "autoindex",
     .type = FD_CONF_FLAG,
     .offset = offsetof(static_conf_t, autoindex),
     .def = "off",
     .doc = "on: a directory request (path ending in /) with no index file "
            "lists the directory: directories first, then files, each "
            "sorted by name (bytes), with mtime and size; dot-files "
            "hidden, symlinks too unless follow_symlinks; names escaped "
            "for HTML, URLs and JSON (bytes that are not UTF-8 show as "
            "U+FFFD). At most 50000 entries or 4 MB of names are listed "
            "(the rest is cut, and said so). off: 403"},
    {.name = "autoindex_format",
     .type = FD_CONF_ENUM,
     .offset = offsetof(static_conf_t, autoindex_format),
     .def = "html", .enums = autoindex_enums,
     .doc = "html (as nginx: links, dates in UTC, sizes in bytes) or json "
            "(as nginx: [{\"name\", \"type\": \"file\" | \"directory\", "
            "\"mtime\" as an HTTP date, \"size\" for files}])"},
    {.name = "autoindex_exact_size",
     .type = FD_CONF_FLAG,
     .offset = offsetof(static_conf_t, autoindex_exact_size),
     .def = "on",
     .doc = "on: the HTML listing gives sizes in bytes; off: as nginx, "
            "rounded to the nearest K, M or G (1024-based) above 9999 "
            "bytes (10240 is 10K, 1572864 is 2M). The JSON form always "
            "has bytes"},
    {.name = "autoindex_localtime",
     .type = FD_CONF_FLAG,
     .offset = offsetof(static_conf_t, autoindex_localtime),
     .def = "off",
     .doc = "on: the HTML listing's dates are in the server's local time "
            "zone (TZ, else /etc/localtime); off: "
            "UTC. The JSON form's are HTTP dates, always GMT"},
    {.name = "alias",
     .type = FD_CONF_STR,
     .offset = offsetof(static_conf_t, alias),
     .doc = "[location] only, instead of root: the directory (or file) "
            "that stands for the location's prefix, so /i/a.gif in "
            "[location /i/] with alias = /data/img/ is /data/img/a.gif; "
            "in a regex location the whole path, with $1..$9 its "
            "captures ([location ~ ^/u/(.+)$], alias = /data/$1). Files "
            "are confined beneath the alias's directory as they are "
            "beneath root (no .., no symlink unless follow_symlinks); "
            "root and alias in one location is an error"},
    {.name = "gzip_static",
     .type = FD_CONF_ENUM,
     .offset = offsetof(static_conf_t, gzip_static),
     .def = "off", .enums = gzip_static_enums,
     .doc = "on: serve FILE.br or FILE.gz (br first) instead of FILE when "
            "the client's Accept-Encoding takes it and the compressed file "
            "exists and is not older than FILE, with Content-Encoding, "
            "Vary: Accept-Encoding and its own length, ETag and ranges; "
            "always: FILE.gz whatever the client says (as nginx)"},
    {.name = "mime_types",
     .type = FD_CONF_STR,
     .offset = offsetof(static_conf_t, mime_types),
     .def = MIME_DEFAULT_PATH,
     .doc = "nginx-format file mapping file extensions to Content-Type "
            "(types { text/html html htm; ... }), relative to the prefix; "
            "a file extension not listed is application/octet-stream. "
            "When the default file is absent a built-in table is used"},
    {.name = "etag",
     .type = FD_CONF_FLAG,
     .offset = offsetof(static_conf_t, etag),
     .def = "on",
     .doc = "send an ETag (\"mtime-size\" in hex, as nginx) with static "
            "files and answer If-None-Match"},
    {.name = "open_file_cache",
     .type = FD_CONF_INT,
     .offset = offsetof(static_conf_t, open_file_cache),
     .def = "128", .max = 65536,
     .doc = "open descriptors each worker keeps per location, so that a "
            "file served again costs at most one fstat() instead of open + "
            "fstat + close; the first hit in a loop turn checks it with "
            "fstat() and the turn's other hits use that (size, mtime and "
            "ETag are those of the file when the turn began; a deleted or "
            "renamed-over file is opened again). 0: off"},
    {.name = "open_file_cache_valid",
     .type = FD_CONF_MSEC,
     .offset = offsetof(static_conf_t, open_file_cache_valid),
     .def = "1s",
     .doc = "how long a cached descriptor is used before the path is "
            "opened again (bounds what fstat() cannot see: a renamed "
            "directory on the path, changed permissions); unused ones are "
            "closed then"},
    {.name = "max_ranges",
     .type = FD_CONF_INT,
     .offset = offsetof(static_conf_t, max_ranges),
     .def = "16", .max = 64,
     .doc = "ranges one request may ask for (several are sent as "
            "multipart/byteranges); more, or ranges that add up to more "
            "than the file, get the whole file with 200. 0: no ranges"},
    FD_CONF_END};

fd_module_t fd_static_module = {
    FD_MODULE_LOC(static, static_conf_t),
    .handler = static_handler,
    .try_file = static_try_file,
    .flags = FD_MODULE_THREAD_SAFE,
    .methods = FD_METHODS_GET,
};

/* ---------------------------------------------------------------------- */
/* MIME types                                                             */

/* Used when conf/mime.types (the default) does not exist, e.g. for a
 * config written outside the install tree. */
static const char *const mime_builtin[][2] = {
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"xml", "text/xml"},
    {"txt", "text/plain"},
    {"js", "text/javascript"},
    {"mjs", "text/javascript"},
    {"json", "application/json"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"ico", "image/x-icon"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"pdf", "application/pdf"},
    {"wasm", "application/wasm"},
    {"zip", "application/zip"},
    {"gz", "application/gzip"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
};

static uint32_t mime_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)fd_tolower(s[i]);
        h *= 16777619u;
    }
    return h;
}

/* Insert or replace (a later line wins, as in nginx). */
static void mime_insert(mime_table_t *t, fd_str_t ext, fd_str_t type)
{
    size_t i = mime_hash(ext.data, ext.len) & t->mask;

    while (t->slots[i].ext.len) {
        if (fd_str_caseeq(t->slots[i].ext, ext.data, ext.len)) {
            t->slots[i].type = type;
            return;
        }
        i = (i + 1) & t->mask;
    }
    t->slots[i].ext = ext;
    t->slots[i].type = type;
    t->n++;
}

static mime_table_t *mime_table_new(fd_pool_t *pool, size_t n)
{
    mime_table_t *t = fd_pcalloc(pool, sizeof(*t));
    size_t size = 64;

    if (t == NULL)
        return NULL;
    while (size < n * 2)
        size <<= 1;
    t->slots = fd_pcalloc(pool, size * sizeof(mime_slot_t));
    if (t->slots == NULL)
        return NULL;
    t->mask = size - 1;
    return t;
}

static fd_str_t mime_lookup(const mime_table_t *t, const char *ext,
                            size_t len)
{
    static const fd_str_t def = fd_string("application/octet-stream");
    size_t i;

    if (t == NULL || len == 0)
        return def;
    i = mime_hash(ext, len) & t->mask;
    while (t->slots[i].ext.len) {
        if (fd_str_caseeq(t->slots[i].ext, ext, len))
            return t->slots[i].type;
        i = (i + 1) & t->mask;
    }
    return def;
}

typedef struct {
    char *p;
    char *end;
    int line;
} mime_lexer_t;

/* Next word; "{", "}" and ";" are words of their own. 0 at the end. */
static int mime_word(mime_lexer_t *lx, fd_str_t *w)
{
    char *p = lx->p;

    for (;;) {
        while (p < lx->end && (*p == ' ' || *p == '\t' || *p == '\r' ||
                               *p == '\n'))
            lx->line += *p++ == '\n';
        if (p >= lx->end || *p != '#')
            break;
        while (p < lx->end && *p != '\n')
            p++;
    }
    if (p >= lx->end) {
        lx->p = p;
        return 0;
    }
    w->data = p;
    if (*p == '{' || *p == '}' || *p == ';') {
        p++;
    } else {
        while (p < lx->end && !strchr(" \t\r\n{};#", *p))
            p++;
    }
    w->len = (size_t)(p - w->data);
    lx->p = p;
    return 1;
}

static int mime_grow(fd_pool_t *pool, mime_table_t *t)
{
    size_t size = (t->mask + 1) * 2;
    mime_slot_t *old = t->slots;
    size_t oldsize = t->mask + 1;

    t->slots = fd_pcalloc(pool, size * sizeof(mime_slot_t));
    if (t->slots == NULL)
        return FD_ERROR;
    t->mask = size - 1;
    t->n = 0;
    for (size_t i = 0; i < oldsize; i++) {
        if (old[i].ext.len)
            mime_insert(t, old[i].ext, old[i].type);
    }
    return FD_OK;
}

/*
 * Parse nginx's "types { type ext ...; ... }" blocks ('#' comments) from
 * text, which lives in cf->pool: the table points into it.
 */
static int mime_parse(fd_conf_t *cf, const char *path, char *text, size_t len,
                      mime_table_t **out)
{
    mime_lexer_t lx = {.p = text, .end = text + len, .line = 1};
    mime_table_t *t = mime_table_new(cf->pool, 0);
    fd_str_t w, type;

    if (t == NULL)
        goto nomem;
    while (mime_word(&lx, &w)) {
        if (!fd_str_eq_lit(w, "types"))
            goto unexpected;
        if (!mime_word(&lx, &w) || !fd_str_eq_lit(w, "{"))
            return fd_conf_error(cf, "%s:%d: \"{\" expected after \"types\"",
                                 path, lx.line);
        for (;;) {
            if (!mime_word(&lx, &type))
                return fd_conf_error(cf, "%s:%d: unexpected end of file, "
                                     "\"}\" expected", path, lx.line);
            if (fd_str_eq_lit(type, "}"))
                break;
            if (fd_str_eq_lit(type, "{") || fd_str_eq_lit(type, ";")) {
                w = type;
                goto unexpected;
            }
            while (mime_word(&lx, &w) && !fd_str_eq_lit(w, ";")) {
                if (fd_str_eq_lit(w, "{") || fd_str_eq_lit(w, "}"))
                    goto unexpected;
                for (size_t k = 0; k < w.len; k++)
                    ((char *)w.data)[k] = fd_tolower(w.data[k]);
                if ((t->n + 1) * 2 > t->mask + 1 &&
                    mime_grow(cf->pool, t) != FD_OK)
                    goto nomem;
                mime_insert(t, w, type);
            }
            if (!fd_str_eq_lit(w, ";"))
                return fd_conf_error(cf, "%s:%d: \";\" expected after "
                                     "\"%.*s\"", path, lx.line,
                                     (int)type.len, type.data);
        }
    }
    *out = t;
    return FD_OK;

unexpected:
    return fd_conf_error(cf, "%s:%d: unexpected \"%.*s\"", path, lx.line,
                         (int)w.len, w.data);
nomem:
    return fd_conf_error(cf, "%s: out of memory", path);
}

static int mime_load_file(fd_conf_t *cf, const char *path, mime_table_t **out)
{
    struct stat st;
    char *text;
    size_t got = 0;
    int fd, rc;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1)
        return -errno;
    if (fstat(fd, &st) == -1) {
        rc = -errno;
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MIME_MAX_FILE) {
        close(fd);
        return -EINVAL;
    }
    text = fd_pnalloc(cf->pool, (size_t)st.st_size + 1);
    if (text == NULL) {
        close(fd);
        return -ENOMEM;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n == 0 ? -EIO : -errno;
            close(fd);
            return rc;
        }
        got += (size_t)n;
    }
    close(fd);
    text[got] = '\0';

    return mime_parse(cf, path, text, got, out) == FD_OK ? 0 : 1;
}

static mime_table_t *mime_builtin_table(fd_pool_t *pool)
{
    mime_table_t *t = mime_table_new(pool, fd_nelems(mime_builtin));

    if (t == NULL)
        return NULL;
    for (size_t i = 0; i < fd_nelems(mime_builtin); i++) {
        fd_str_t ext = {strlen(mime_builtin[i][0]), mime_builtin[i][0]};
        fd_str_t type = {strlen(mime_builtin[i][1]), mime_builtin[i][1]};

        mime_insert(t, ext, type);
    }
    return t;
}

/*
 * Tables already loaded, by resolved path, for the configuration being
 * loaded: every location shares one table per file. Entries die with the
 * config pool (a cleanup unlinks them). Config loading is single-threaded.
 */
typedef struct mime_cache_s {
    fd_pool_t *pool;
    char *path;
    mime_table_t *table;
    struct mime_cache_s *next;
} mime_cache_t;

static mime_cache_t *mime_cache;

static void mime_cache_drop(void *data)
{
    fd_pool_t *pool = data;
    mime_cache_t **pp = &mime_cache;

    while (*pp) {
        if ((*pp)->pool == pool)
            *pp = (*pp)->next;
        else
            pp = &(*pp)->next;
    }
}

static const mime_table_t *mime_get(fd_conf_t *cf, const char *name)
{
    mime_cache_t *c;
    mime_table_t *t = NULL;
    int pool_known = 0, rc;
    char *path = fd_conf_path(cf, name);

    if (path == NULL) {
        fd_conf_error(cf, "mime_types \"%s\": out of memory", name);
        return NULL;
    }
    for (c = mime_cache; c; c = c->next) {
        if (c->pool != cf->pool)
            continue;
        pool_known = 1;
        if (strcmp(c->path, path) == 0)
            return c->table;
    }

    rc = mime_load_file(cf, path, &t);
    if (rc == 1)
        return NULL; /* parse error, cf->err is set */
    if (rc < 0) {
        if (rc == -ENOENT && strcmp(name, MIME_DEFAULT_PATH) == 0) {
            t = mime_builtin_table(cf->pool);
        } else {
            fd_conf_error(cf, "cannot read mime_types file \"%s\": %s", path,
                          rc == -EINVAL ? "not a regular file or too large"
                                        : strerror(-rc));
            return NULL;
        }
        if (t == NULL) {
            fd_conf_error(cf, "mime_types: out of memory");
            return NULL;
        }
    }

    c = fd_palloc(cf->pool, sizeof(*c));
    if (c == NULL) {
        fd_conf_error(cf, "mime_types: out of memory");
        return NULL;
    }
    if (!pool_known &&
        fd_pool_cleanup_add(cf->pool, mime_cache_drop, cf->pool) == NULL) {
        fd_conf_error(cf, "mime_types: out of memory");
        return NULL;
    }
    c->pool = cf->pool;
    c->path = path;
    c->table = t;
    c->next = mime_cache;
    mime_cache = c;
    return t;
}

/* Was key set in this location's own section (not inherited from the
 * server or [http])? Its entries follow the section header in its file. */
static int set_here(fd_conf_t *cf, const void *conf, const char *key,
                    const char *file, int line)
{
    return fd_conf_at_key(cf, conf, key) && cf->file && file &&
           strcmp(cf->file, file) == 0 && cf->line > line;
}

/*
 * alias: check where it is, then split it into the directory files are
 * confined beneath (the literal text up to the last '/' before the first
 * capture, or all of it when that is a directory) and the tail expanded
 * per request. Errors name the alias line.
 */
static int alias_init(fd_conf_t *cf, fd_http_loc_t *loc, static_conf_t *scf)
{
    const char *file = cf->file, *a = scf->alias, *var, *cut;
    int line = cf->line, regex;
    char real[PATH_MAX], *base;
    struct stat st;

    regex = loc->kind == FD_LOC_REGEX || loc->kind == FD_LOC_REGEX_CASELESS;
    if (loc == loc->server->root_loc || !set_here(cf, scf, "alias", file,
                                                    line)) {
        fd_conf_at_key(cf, scf, "alias");
        return fd_conf_error(cf, "\"alias\" is only valid in a [location]");
    }
    if (set_here(cf, loc, "root", file, line))
        return fd_conf_error(cf, "\"root\" and \"alias\" in one "
                             "location: use one");
    fd_conf_at_key(cf, scf, "alias");
    if (a[0] == '\0')
        return fd_conf_error(cf, "\"alias\" needs a path");
    /* as nginx: an alias stands for a path prefix a named location has
     * not, and try_files' paths are not the ones a regex captured from */
    if (loc->kind == FD_LOC_NAMED)
        return fd_conf_error(cf, "\"alias\" in a named location: use "
                             "\"root\"");
    if (regex && loc->try_files)
        return fd_conf_error(cf, "\"alias\" with try_files in a regex "
                             "location: use \"root\"");
    for (var = a; (var = strchr(var, '$')); var += 2) {
        if (var[1] < '1' || var[1] > '9')
            return fd_conf_error(cf, "alias \"%s\": only $1..$9 (the "
                                 "regex location's captures) may follow "
                                 "a \"$\"", a);
        if (!regex)
            return fd_conf_error(cf, "alias \"%s\": $%c needs a regex "
                                 "location", a, var[1]);
    }
    var = strchr(a, '$');
    base = fd_conf_path(cf, a);
    if (base == NULL)
        return fd_conf_error(cf, "out of memory");
    if (var == NULL && stat(base, &st) == 0 && S_ISDIR(st.st_mode)) {
        cut = a + strlen(a);
    } else {
        size_t n = var ? (size_t)(var - a) : strlen(a);

        for (cut = a + n; cut > a && cut[-1] != '/'; cut--)
            ;
        base = fd_pstrdup(cf->pool, a, (size_t)(cut - a));
        base = base ? fd_conf_path(cf, base[0] ? base : ".") : NULL;
        if (base == NULL)
            return fd_conf_error(cf, "out of memory");
    }
    if (realpath(base, real) == NULL)
        return fd_conf_error(cf, "alias \"%s\": %s: %s", a, base,
                             strerror(errno));
    scf->alias_base_len = strlen(real);
    while (scf->alias_base_len > 0 && real[scf->alias_base_len - 1] == '/')
        scf->alias_base_len--; /* "/" becomes "" as root's does */
    scf->alias_base = fd_pstrdup(cf->pool, real, scf->alias_base_len);
    while (*cut == '/')
        cut++;
    scf->alias_tail = fd_pstrdup(cf->pool, cut, strlen(cut));
    if (scf->alias_base == NULL || scf->alias_tail == NULL)
        return fd_conf_error(cf, "out of memory");
    return FD_OK;
}

static int static_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    static_conf_t *scf = conf;

    if (scf->alias && alias_init(cf, loc, scf) != FD_OK)
        return FD_ERROR;
    /* A location served by another handler never looks types up. */
    if (loc->handler != NULL && loc->handler != &fd_static_module)
        return FD_OK;
    fd_conf_at_key(cf, conf, "mime_types"); /* errors name its line */
    scf->types = mime_get(cf, scf->mime_types ? scf->mime_types
                                              : MIME_DEFAULT_PATH);
    return scf->types ? FD_OK : FD_ERROR;
}

/* ---------------------------------------------------------------------- */
/* Opening files beneath the root                                         */

static int openat2_missing; /* set once the kernel said ENOSYS */

static void close_fd(void *data)
{
    close((int)(intptr_t)data);
}

/* Component by component with O_NOFOLLOW: the fallback for old kernels. */
static int open_walk(int rootfd, const char *rel, int flags)
{
    char name[NAME_MAX + 1];
    const char *p = rel, *slash;
    int dir = rootfd, fd;
    struct stat st;

    for (;;) {
        size_t n;

        slash = strchr(p, '/');
        n = slash ? (size_t)(slash - p) : strlen(p);
        if (n > NAME_MAX) {
            fd = -1;
            errno = ENAMETOOLONG;
            break;
        }
        memcpy(name, p, n);
        name[n] = '\0';

        if (slash == NULL || slash[1] == '\0') {
            /* last component; "dir/" must be a directory */
            fd = openat(dir, n ? name : ".",
                        flags | O_NOFOLLOW | (slash ? O_DIRECTORY : 0));
            break;
        }
        fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd == -1)
            break;
        if (fstat(fd, &st) == -1 || S_ISLNK(st.st_mode) ||
            !S_ISDIR(st.st_mode)) {
            int err = S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR;

            close(fd);
            fd = -1;
            errno = err;
            break;
        }
        if (dir != rootfd)
            close(dir);
        dir = fd;
        p = slash + 1;
    }

    if (dir != rootfd) {
        int err = errno;

        close(dir);
        errno = err;
    }
    return fd;
}

/*
 * Open root + "/" + rel (rel has no leading '/', "" means the root itself).
 * Returns the fd, or -1 with errno: ELOOP/EXDEV for a refused symlink.
 */
static int open_beneath(int rootfd, const char *rel, int flags)
{
    if (*rel == '\0')
        rel = ".";
    if (!__atomic_load_n(&openat2_missing, __ATOMIC_RELAXED)) {
        struct open_how how = {
            .flags = (uint64_t)flags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                       RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));

        if (fd >= 0 || errno != ENOSYS)
            return (int)fd;
        __atomic_store_n(&openat2_missing, 1, __ATOMIC_RELAXED);
    }
    return open_walk(rootfd, rel, flags);
}

static int open_error(fd_request_t *r, const char *path, int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
        return 404;
    case EACCES:
    case EPERM:
    case ELOOP:
    case EXDEV:
    case EMLINK:
        return 403;
    default:
        fd_log_error(FD_LOG_ERR, err, "open(\"%s\") failed (%s %.*s)", path,
                     r->loc->name ? r->loc->name : "location",
                     (int)r->path.len, r->path.data);
        return 500;
    }
}

/* ---------------------------------------------------------------------- */
/* Open file cache                                                        */

/*
 * Per worker and location: full path -> open descriptor, so that a file
 * served again costs at most an fstat() instead of openat2() + fstat() +
 * close(). The first hit in a loop turn checks the cached descriptor with
 * fstat() and the turn's other hits use that (as h2o, whose cache lives
 * one loop iteration): a turn serves what was ready when it began, so
 * size, mtime and ETag are those of the file when the request was seen,
 * and a file deleted or replaced by rename (its old inode has no link
 * left) is opened again. At 256 connections a turn serves tens of
 * requests: the fstat() was one of the four syscalls of a small file's
 * request. What fstat()
 * cannot see (a directory on the path renamed, permissions changed) is
 * seen when the entry expires, open_file_cache_valid after it was opened;
 * a timer closes expired entries, so an idle worker holds no descriptor
 * (and no deleted file's blocks) for long. Only regular files are kept.
 *
 * The loop thread alone touches it: an offloaded handler opens and closes
 * as without a cache. An entry is reference counted (the table's reference
 * and one per response that sends from it), so eviction never closes a
 * descriptor that a slow client's response still reads.
 */
typedef struct ofc_entry_s ofc_entry_t;

struct ofc_entry_s {
    ofc_entry_t *hnext;        /* hash chain */
    ofc_entry_t *prev, *next;  /* in opening order: oldest first */
    unsigned refs;
    uint32_t hash;
    uint32_t expires;          /* fd_msec32_after() */
    int fd;
    unsigned checked;          /* the cache's turn of st */
    struct stat st;
    size_t len;
    char path[];
};

struct ofc_s {
    ofc_entry_t **buckets;
    uint32_t mask;
    unsigned n;
    unsigned max;
    fd_msec_t valid;
    ofc_entry_t *oldest, *newest;
    fd_timer_t timer;
    unsigned turn;             /* + 1 at the end of each turn it was used */
    unsigned turn_posted;
    fd_posted_t turn_end;
};

static void ofc_turn_end(void *data)
{
    ofc_t *c = data;

    c->turn++;
    c->turn_posted = 0;
}

/* st was taken in this turn: the turn's next hits use it */
static void ofc_checked(ofc_t *c, ofc_entry_t *e)
{
    e->checked = c->turn;
    if (!c->turn_posted) {
        c->turn_posted = 1;
        fd_event_post(&c->turn_end);
    }
}

static void ofc_release(void *data)
{
    ofc_entry_t *e = data;

    if (--e->refs == 0) {
        close(e->fd);
        free(e);
    }
}

/* Out of the table; responses still holding it keep it open. */
static void ofc_remove(ofc_t *c, ofc_entry_t *e)
{
    ofc_entry_t **pp = &c->buckets[e->hash & c->mask];

    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->oldest = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->newest = e->prev;
    c->n--;
    ofc_release(e);
}

static void ofc_expire(fd_timer_t *t)
{
    ofc_t *c = (ofc_t *)(void *)((char *)t - offsetof(ofc_t, timer));

    while (c->oldest &&
           fd_msec32_diff(c->oldest->expires,
                          (uint32_t)fd_current_msec) <= 0)
        ofc_remove(c, c->oldest);
    if (c->oldest)
        fd_timer_add(&c->timer,
                     (fd_msec_t)fd_msec32_diff(c->oldest->expires,
                                               (uint32_t)fd_current_msec));
}

static ofc_t *ofc_get(static_conf_t *scf)
{
    ofc_t *c = scf->cache;
    uint32_t size = 16;

    if (c || scf->open_file_cache == 0)
        return c;
    while (size < (uint64_t)scf->open_file_cache * 2)
        size <<= 1;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->buckets = calloc(size, sizeof(*c->buckets));
    if (c->buckets == NULL) {
        free(c);
        return NULL;
    }
    c->mask = size - 1;
    c->max = (unsigned)scf->open_file_cache;
    c->valid = scf->open_file_cache_valid ? scf->open_file_cache_valid : 1;
    c->timer.handler = ofc_expire;
    c->turn_end.handler = ofc_turn_end;
    c->turn_end.data = c;
    scf->cache = c;
    return c;
}

/*
 * The cached descriptor of path, its fstat() of this turn into *st, with
 * a reference taken for the request; NULL when there is none usable.
 */
static ofc_entry_t *ofc_lookup(ofc_t *c, const char *path, size_t len,
                               uint32_t hash, struct stat *st)
{
    ofc_entry_t *e;

    for (e = c->buckets[hash & c->mask]; e; e = e->hnext) {
        if (e->hash == hash && e->len == len &&
            memcmp(e->path, path, len) == 0)
            break;
    }
    if (e == NULL)
        return NULL;
    if (fd_msec32_diff(e->expires, (uint32_t)fd_current_msec) <= 0) {
        ofc_remove(c, e);
        return NULL;
    }
    if (e->checked != c->turn) {
        if (fstat(e->fd, &e->st) == -1 || e->st.st_nlink == 0 ||
            !S_ISREG(e->st.st_mode)) {
            ofc_remove(c, e);
            return NULL;
        }
        ofc_checked(c, e);
    }
    *st = e->st;
    e->refs++;
    return e;
}

/* Keep fd (a regular file the request holds, st its fstat() just now)
 * for the next requests; the request's reference is the entry's. NULL:
 * not kept, fd stays the caller's. */
static ofc_entry_t *ofc_insert(ofc_t *c, const char *path, size_t len,
                               uint32_t hash, int fd, const struct stat *st)
{
    ofc_entry_t *e = malloc(sizeof(*e) + len);

    if (e == NULL)
        return NULL;
    if (c->n >= c->max)
        ofc_remove(c, c->oldest);
    e->refs = 2;
    e->hash = hash;
    e->expires = fd_msec32_after(c->valid);
    e->fd = fd;
    e->st = *st;
    ofc_checked(c, e);
    e->len = len;
    memcpy(e->path, path, len);
    e->hnext = c->buckets[hash & c->mask];
    c->buckets[hash & c->mask] = e;
    e->next = NULL;
    e->prev = c->newest;
    if (c->newest)
        c->newest->next = e;
    else
        c->oldest = e;
    c->newest = e;
    if (c->n++ == 0)
        fd_timer_add(&c->timer, c->valid);
    return e;
}

/* ---------------------------------------------------------------------- */
/* The handler                                                            */

/* 301 to path + "/": the decoded path is re-encoded, so nothing decoded
 * (CR, LF, spaces) reaches the header. */
static int redirect_dir(fd_request_t *r)
{
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, r->path.len + 2 + r->in.query.len) !=
        FD_OK)
        return 500;
    fd_sbuf_add_escaped_path(&sb, r->path.data, r->path.len);
    fd_sbuf_addc(&sb, '/');
    if (r->in.query.len) {
        fd_sbuf_addc(&sb, '?');
        fd_sbuf_add_str(&sb, r->in.query);
    }
    if (fd_sbuf_failed(&sb) ||
        fd_http_header_add(r, fd_string("Location"), fd_sbuf_str(&sb)) !=
            FD_OK)
        return 500;
    r->status = 301;
    r->content_length = 0;
    return FD_OK;
}

/* 405 with our own Allow (the error page may have added a generic one). */
static int method_not_allowed(fd_request_t *r)
{
    static const fd_str_t allow = fd_string("GET, HEAD");
    fd_http_header_out_t *h;

    if (fd_http_error_page(r, 405) != FD_OK)
        return 405;
    for (h = r->headers_out; h; h = h->next) {
        if (fd_str_caseeq_lit(h->name, "Allow")) {
            h->value = allow;
            return FD_OK;
        }
    }
    if (fd_http_header_add(r, fd_string("Allow"), allow) != FD_OK)
        return 500;
    return FD_OK;
}

/* "mtime-size" in hex, as nginx; by hand: snprintf cost ~750
 * instructions a request here */
static fd_str_t make_etag(fd_pool_t *pool, const struct stat *st)
{
    char *p = fd_pnalloc(pool, 2 + 16 + 1 + 16), *e = p;

    if (p == NULL)
        return fd_null_string;
    *e++ = '"';
    e = fd_fmt_hex(e, (uint64_t)(unsigned long)st->st_mtime);
    *e++ = '-';
    e = fd_fmt_hex(e, (uint64_t)(unsigned long)st->st_size);
    *e++ = '"';
    return (fd_str_t){(size_t)(e - p), p};
}

/* A ".." segment in s (an alias tail and the rest of the path): the
 * engine's path has none, but a capture or the part after a prefix that
 * ends inside a segment ("/i" and "/i../x") may begin one. */
static int has_dotdot(const char *s, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '.' && s[i + 1] == '.' && (i == 0 || s[i - 1] == '/') &&
            (i + 2 == n || s[i + 2] == '/'))
            return 1;
    return 0;
}

/* Capture i of the regex location, set and within the path (a rewrite
 * with break may have made the path shorter than the one matched). */
static int capture_ok(const fd_request_t *r, int i)
{
    return i < r->ncaptures && r->captures &&
           r->captures[2 * i] != (size_t)-1 &&
           r->captures[2 * i] <= r->captures[2 * i + 1] &&
           r->captures[2 * i + 1] <= r->path.len;
}

/*
 * The file an alias location names for r, into full (pool): base + "/" +
 * the tail with its captures + what the location's prefix left of the
 * path. *base_len: where the part beneath base starts. NULL: 404 (a ".."),
 * or out of memory (*base_len = 0).
 */
static char *alias_path(fd_request_t *r, const static_conf_t *scf,
                        size_t extra, size_t *base_len, size_t *len)
{
    const fd_http_loc_t *loc = r->loc;
    const char *rest = "", *t;
    size_t n = scf->alias_base_len, restn = 0, cap = n + 5 + extra;
    char *full, *p;

    *base_len = n;
    if (loc->kind == FD_LOC_PREFIX || loc->kind == FD_LOC_PREFIX_STOP ||
        loc->kind == FD_LOC_EXACT) {
        rest = r->path.data + fd_min(loc->match.len, r->path.len);
        restn = r->path.len - fd_min(loc->match.len, r->path.len);
    }
    for (t = scf->alias_tail; *t; t++) {
        if (t[0] == '$' && t[1] >= '1' && t[1] <= '9') {
            int i = t[1] - '0';

            t++;
            if (capture_ok(r, i))
                cap += r->captures[2 * i + 1] - r->captures[2 * i];
        } else {
            cap++;
        }
    }
    cap += restn;
    if ((full = fd_pnalloc(r->pool, cap)) == NULL)
        return NULL;
    memcpy(full, scf->alias_base, n);
    p = full + n;
    *p++ = '/';
    for (t = scf->alias_tail; *t; t++) {
        if (t[0] == '$' && t[1] >= '1' && t[1] <= '9') {
            int i = *++t - '0';

            if (capture_ok(r, i)) {
                size_t a = r->captures[2 * i], b = r->captures[2 * i + 1];

                memcpy(p, r->path.data + a, b - a);
                p += b - a;
            }
        } else {
            *p++ = *t;
        }
    }
    /* "/i/" + "a.gif" and "/i" + "/a.gif" alike: one '/' between */
    if (p[-1] == '/')
        while (restn && *rest == '/')
            rest++, restn--;
    memcpy(p, rest, restn);
    p += restn;
    *p = '\0';
    /* "/i" itself: the directory without the '/', so that it redirects */
    if (p == full + n + 1 && r->path.data[r->path.len - 1] != '/' && n > 0)
        *--p = '\0';
    if (has_dotdot(full + n, (size_t)(p - full - n))) {
        *base_len = 1;
        return NULL;
    }
    *len = (size_t)(p - full);
    return full;
}


/*
 * gzip_static: the precompressed variant of the file full (flen bytes,
 * stat *st) the client takes, FILE.br then FILE.gz, if it is a regular
 * file not older than FILE: its descriptor (a cached one, or a new one
 * given to the request's pool), its stat in *st and its coding in *enc.
 * -1: none (the file goes as it is); -2: out of memory.
 */
static int open_precompressed(fd_request_t *r, const static_conf_t *scf,
                              int rootfd, char *full, size_t flen,
                              const char *rel, ofc_t *cache,
                              struct stat *st, fd_str_t *enc)
{
    static const struct {
        unsigned bit;
        char suffix[4];
        fd_str_t coding;
    } v[] = {{FD_ENC_BR, ".br", fd_string("br")},
             {FD_ENC_GZIP, ".gz", fd_string("gzip")}};
    const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    unsigned offered = FD_ENC_BR | FD_ENC_GZIP, want;
    struct stat vst;
    int fd = -1;

    for (;;) {
        unsigned i;
        uint32_t hash = 0;
        ofc_entry_t *e = NULL;

        want = scf->gzip_static == GZIP_STATIC_ALWAYS
                   ? offered & FD_ENC_GZIP
                   : fd_http_accept_encoding(r->in.accept_encoding, offered);
        if (want == 0) {
            full[flen] = '\0';
            return -1;
        }
        offered &= ~want;
        i = want == FD_ENC_BR ? 0 : 1;
        memcpy(full + flen, v[i].suffix, 4);
        if (cache) {
            hash = fd_hash(full, flen + 3);
            e = ofc_lookup(cache, full, flen + 3, hash, &vst);
        }
        if (e) {
            fd = e->fd;
            if (vst.st_mtime < st->st_mtime) {
                ofc_release(e);
                continue;
            }
            if (fd_pool_cleanup_add(r->pool, ofc_release, e) == NULL) {
                ofc_release(e);
                goto failed;
            }
        } else {
            fd_pool_cleanup_t *cl;

            fd = rootfd == -1 ? open(full, flags)
                              : open_beneath(rootfd, rel, flags);
            if (fd == -1)
                continue; /* missing, or refused as FILE would be */
            if (fstat(fd, &vst) == -1 || !S_ISREG(vst.st_mode) ||
                vst.st_mtime < st->st_mtime) {
                close(fd);
                continue; /* older than FILE: stale, not served */
            }
            cl = fd_pool_cleanup_add(r->pool, close_fd,
                                     (void *)(intptr_t)fd);
            if (cl == NULL) {
                close(fd);
                goto failed;
            }
            if (cache &&
                (e = ofc_insert(cache, full, flen + 3, hash, fd, &vst))) {
                cl->handler = ofc_release;
                cl->data = e;
            }
        }
        full[flen] = '\0';
        *st = vst;
        *enc = v[i].coding;
        return fd;
    }

failed:
    full[flen] = '\0';
    return -2;
}

/* ETag of a precompressed variant: its own "mtime-size" and the coding,
 * never equal to FILE's even were size and mtime the same. */
static fd_str_t variant_etag(fd_pool_t *pool, fd_str_t etag, fd_str_t enc)
{
    char *p;

    if (etag.len < 2 || (p = fd_pnalloc(pool, etag.len + 1 + enc.len)) ==
                            NULL)
        return fd_null_string;
    memcpy(p, etag.data, etag.len - 1);
    p[etag.len - 1] = '-';
    memcpy(p + etag.len, enc.data, enc.len);
    p[etag.len + enc.len] = '"';
    return (fd_str_t){etag.len + 1 + enc.len, p};
}

/*
 * Where r's path is on disk: *full (in the pool, with room for extra
 * more bytes), n its length, *rel the part beneath the root or alias
 * directory, and *rootfd that directory's descriptor, or -1 when
 * follow_symlinks lets full be opened as it is. FD_OK or an HTTP status.
 * The handler and try_files' test both go through it: a file try_files
 * finds is one the handler would open.
 */
static int map_file(fd_request_t *r, const static_conf_t *scf, size_t extra,
                    char **full, size_t *n, char **rel, int *rootfd)
{
    const fd_http_loc_t *loc = r->loc;
    size_t root_len = loc->root_len;
    const char *root = loc->root;
    char *f;
    int err;

    *rootfd = -1;
    if (scf->alias) {
        root = scf->alias_base;
        f = alias_path(r, scf, extra, &root_len, n);
        if (f == NULL)
            return root_len ? 404 : 500;
        *rel = *n > root_len ? f + root_len + 1 : (char *)"";
    } else {
        if (root == NULL)
            return 404;
        /* no trailing slash: root "/" becomes "" and paths keep their own */
        while (root_len > 0 && root[root_len - 1] == '/')
            root_len--;
        f = fd_pnalloc(r->pool, root_len + r->path.len + extra + 4);
        if (f == NULL)
            return 500;
        memcpy(f, root, root_len);
        memcpy(f + root_len, r->path.data, r->path.len);
        *n = root_len + r->path.len;
        f[*n] = '\0';
        *rel = f + root_len + 1;
    }
    *full = f;

    if (!loc->follow_symlinks) {
        static_conf_t *mcf = (static_conf_t *)scf;
        int cached = __atomic_load_n(&mcf->rootfd1, __ATOMIC_ACQUIRE);

        if (cached) {
            *rootfd = cached - 1;
        } else {
            char save = f[root_len];
            int expect = 0, fd;

            f[root_len] = '\0';
            fd = open(root_len ? f : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
            err = errno;
            f[root_len] = save;
            if (fd == -1)
                return open_error(r, root, err);
            /* pool threads may race here: one descriptor wins */
            if (!__atomic_compare_exchange_n(&mcf->rootfd1, &expect, fd + 1,
                                             0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE)) {
                close(fd);
                fd = expect - 1;
            }
            *rootfd = fd;
        }
    }
    return FD_OK;
}

/*
 * try_files' test: uri as the path, mapped and opened (O_PATH, no read)
 * exactly as the handler would, then one fstat(): a regular file, or
 * with dir a directory. A refused symlink or a ".." out of an alias is
 * not there.
 */
static int static_try_file(fd_request_t *r, fd_str_t uri, int dir)
{
    const static_conf_t *scf = fd_loc_conf(r->loc, &fd_static_module);
    const fd_http_loc_t *loc = r->loc;
    fd_str_t path = r->path;
    char *full, *rel;
    size_t n;
    int rootfd, fd, rc;
    struct stat st;

    /* an alias stands for the location's prefix: a path outside it has
     * no file there */
    if (scf->alias && loc->kind != FD_LOC_NAMED &&
        (uri.len < loc->match.len ||
         memcmp(uri.data, loc->match.data, loc->match.len) != 0))
        return 0;
    r->path = uri;
    rc = map_file(r, scf, 0, &full, &n, &rel, &rootfd);
    r->path = path;
    if (rc != FD_OK)
        return rc == 500 ? 500 : 0;
    fd = rootfd == -1 ? open(full, O_PATH | O_CLOEXEC)
                      : open_beneath(rootfd, rel, O_PATH | O_CLOEXEC);
    if (fd == -1)
        return 0;
    rc = fstat(fd, &st);
    close(fd);
    if (rc == -1)
        return 0;
    return dir ? S_ISDIR(st.st_mode) != 0 : S_ISREG(st.st_mode) != 0;
}

/*
 * The index file name (found: fd open, or e from the cache) of the
 * directory r->path: as nginx's index module, an internal redirect to
 * r->path + name, whose location is chosen again, so that
 * "/dir/index.php" runs where "\.php$" sends it instead of being served
 * here as a file (its source). The new location serves it, this one
 * again for a plain file. An index name that is a directory stays 403.
 */
static int index_redirect(fd_request_t *r, const char *name, int fd,
                          ofc_entry_t *e)
{
    struct stat st;
    size_t nl = strlen(name);
    char *p;
    int rc;

    if (e) {
        ofc_release(e); /* the cache keeps only regular files */
    } else {
        rc = fstat(fd, &st);
        close(fd);
        if (rc == -1)
            return 500;
        if (!S_ISREG(st.st_mode))
            return 403;
    }
    if ((p = fd_pnalloc(r->pool, r->path.len + nl + 1)) == NULL)
        return 500;
    memcpy(p, r->path.data, r->path.len);
    memcpy(p + r->path.len, name, nl + 1);
    rc = fd_http_internal_redirect(r, (fd_str_t){r->path.len + nl, p}, NULL);
    return rc == FD_OK ? FD_DECLINED : rc;
}

static int static_handler(fd_request_t *r)
{
    const fd_http_loc_t *loc = r->loc;
    const static_conf_t *scf = fd_loc_conf(loc, &fd_static_module);
    size_t maxidx = 0, n;
    const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    char *full, *rel, *name, *dot;
    int rootfd = -1, fd = -1, err = 0, rc;
    ofc_t *cache = NULL;
    ofc_entry_t *e = NULL;
    fd_pool_cleanup_t *cl;
    uint32_t hash = 0;
    size_t flen; /* of full: with the index name, once there is one */
    struct stat st;

    if (r->in.method_id != FD_HTTP_GET && r->in.method_id != FD_HTTP_HEAD)
        return method_not_allowed(r);

    /* root + path [+ index]: room for the longest index name (the core
     * gives every location at least one, index.html by default) */
    if (r->path.data[r->path.len - 1] == '/' || scf->alias) {
        for (unsigned i = 0; i < loc->index.n; i++)
            maxidx = fd_max(maxidx, strlen(loc->index.items[i]));
    }
    if ((rc = map_file(r, scf, maxidx, &full, &n, &rel, &rootfd)) != FD_OK)
        return rc;
    flen = n;

    /* the cache is the loop's: an offloaded handler does without */
    if (!r->in_offload)
        cache = ofc_get((static_conf_t *)scf);

    if (full[n - 1] == '/') {
        /* a directory: the first index file that exists */
        err = ENOENT;
        for (unsigned i = 0; i < loc->index.n; i++) {
            const char *ix = loc->index.items[i];
            size_t il = strlen(ix);

            if (il == 0 || ix[0] == '/' || strstr(ix, ".."))
                continue;
            memcpy(full + n, ix, il + 1);
            flen = n + il;
            if (cache) {
                hash = fd_hash(full, flen);
                if ((e = ofc_lookup(cache, full, flen, hash, &st)))
                    break;
            }
            fd = rootfd == -1 ? open(full, flags)
                              : open_beneath(rootfd, rel, flags);
            if (fd >= 0)
                break;
            err = errno;
            if (err != ENOENT)
                break;
        }
        if (e == NULL && fd == -1 && err == ENOENT) {
            /* no index: the listing, or 403 for an existing directory */
            const int dflags = O_DIRECTORY | O_CLOEXEC |
                               (scf->autoindex ? O_RDONLY : O_PATH);

            full[n] = '\0';
            fd = rootfd == -1 ? open(full, dflags)
                              : open_beneath(rootfd, rel, dflags);
            if (fd >= 0 && scf->autoindex)
                return fd_static_autoindex(
                    r, fd, full,
                    (scf->autoindex_format == AUTOINDEX_JSON
                         ? FD_AUTOINDEX_JSON : 0) |
                        (scf->autoindex_exact_size ? FD_AUTOINDEX_EXACT
                                                   : 0) |
                        (scf->autoindex_localtime ? FD_AUTOINDEX_LOCALTIME
                                                  : 0));
            err = fd == -1 ? errno : EACCES;
            if (fd >= 0)
                close(fd);
            fd = -1;
        } else if (fd >= 0 || e) {
            return index_redirect(r, full + n, fd, e);
        }
    } else {
        if (cache) {
            hash = fd_hash(full, flen);
            e = ofc_lookup(cache, full, flen, hash, &st);
        }
        if (e == NULL) {
            fd = rootfd == -1 ? open(full, flags)
                              : open_beneath(rootfd, rel, flags);
            err = errno;
        }
    }

    if (e) {
        /* a cached descriptor, checked by this turn's fstat() */
        fd = e->fd;
        if (fd_pool_cleanup_add(r->pool, ofc_release, e) == NULL) {
            ofc_release(e);
            return 500;
        }
    } else {
        if (fd == -1)
            return open_error(r, full, err);
        cl = fd_pool_cleanup_add(r->pool, close_fd, (void *)(intptr_t)fd);
        if (cl == NULL) {
            close(fd);
            return 500;
        }
        if (fstat(fd, &st) == -1) {
            fd_log_error(FD_LOG_ERR, errno, "fstat(\"%s\") failed", full);
            return 500;
        }
        if (S_ISDIR(st.st_mode)) {
            if (full[n - 1] != '/')
                return redirect_dir(r);
            return 403; /* an index name that is a directory */
        }
        if (!S_ISREG(st.st_mode))
            return 403;
        if (cache && (e = ofc_insert(cache, full, flen, hash, fd, &st))) {
            cl->handler = ofc_release;
            cl->data = e;
        }
    }

    /* the type comes from the file actually served (index files too) */
    name = strrchr(full, '/');
    dot = strrchr(name, '.');
    r->content_type = dot ? mime_lookup(scf->types, dot + 1, strlen(dot + 1))
                          : mime_lookup(scf->types, NULL, 0);

    if (scf->gzip_static) {
        fd_str_t enc;
        int vfd;

        /* the answer depends on Accept-Encoding, whichever is sent */
        if (scf->gzip_static == GZIP_STATIC_ON &&
            fd_http_header_add(r, fd_string("Vary"),
                               fd_string("Accept-Encoding")) != FD_OK)
            return 500;
        vfd = open_precompressed(r, scf, rootfd, full, flen,
                                 full + (rel - full), cache, &st, &enc);
        if (vfd == -2)
            return 500;
        if (vfd >= 0) {
            fd = vfd;
            if (fd_http_header_add(r, fd_string("Content-Encoding"), enc) !=
                FD_OK)
                return 500;
            if (scf->etag)
                r->etag = variant_etag(r->pool, make_etag(r->pool, &st),
                                       enc);
        }
    }
    r->last_modified = st.st_mtime;
    if (scf->etag && r->etag.len == 0)
        r->etag = make_etag(r->pool, &st);

    return fd_http_send_file(r, fd, 0, st.st_size,
                             (unsigned)fd_min(scf->max_ranges, (fd_int_t)64));
}
