/*
 * static: serves files under the location root (or alias).
 *
 * Index files, MIME types from an nginx-format mime.types, Last-Modified /
 * If-Modified-Since, ETag / If-None-Match, byte ranges (If-Range), and
 * bodies that fastd sends with sendfile. Open descriptors are kept per
 * worker and location for the next requests (open_file_cache).
 *
 * On the public API only (fastd.h, 1.7's files): fastd maps a request's
 * path onto the location's root or alias and opens it confined beneath
 * that directory (no "..", no symlink unless follow_symlinks), through the
 * open file cache this module makes; it finds the index, the
 * precompressed variants (gzip_static: FILE.br / FILE.gz in FILE's stead)
 * and a directory's entries (autoindex), and answers a file with its
 * conditionals and ranges. What is the module's: its keys, the types by
 * extension, and the listing's HTML and JSON (fd_static_autoindex.c).
 *
 * The handler touches only the request and makes blocking file syscalls
 * (through fastd), so it may run on an offload thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fastd.h"
#include "fd_static.h"

#define MIME_DEFAULT_PATH "conf/mime.types"
#define MIME_MAX_FILE (1024 * 1024)

/* Open-addressing hash table, extension -> type. A file's table is
 * shared by every location, and every loaded configuration, that names
 * it while the file stays the same; each configuration holds a reference
 * and drops it when it is freed. */
typedef struct {
    fd_str_t ext;  /* lower case */
    fd_str_t type;
} mime_slot_t;

typedef struct mime_table_s mime_table_t;

struct mime_table_s {
    mime_slot_t *slots;
    size_t mask;
    size_t n;
    char *text;        /* the file, which ext and type point into */
    char *path;        /* NULL: the built-in table */
    struct stat st;    /* the file's, when read */
    unsigned refs;
    mime_table_t *next;
};

enum { GZIP_STATIC_OFF, GZIP_STATIC_ON, GZIP_STATIC_ALWAYS };

typedef struct {
    const char *mime_types;
    int etag;
    int64_t open_file_cache;       /* entries per worker, 0: off */
    uint64_t open_file_cache_valid;
    int64_t max_ranges;
    const char *gzip_static_text;
    int autoindex;
    const char *autoindex_format;
    int autoindex_exact_size;
    int autoindex_localtime;
    /* made by init_conf */
    int gzip_static;               /* GZIP_STATIC_* */
    unsigned autoindex_flags;      /* FD_AUTOINDEX_* */
    const mime_table_t *types;
    /* this worker's, made on first use on the loop */
    fd_api_file_cache_t *cache;
} static_conf_t;

static const fd_api_key_t static_keys[] = {
    {.name = "autoindex",
     .type = FD_API_FLAG,
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
     .type = FD_API_STRING,
     .offset = offsetof(static_conf_t, autoindex_format),
     .def = "html",
     .doc = "html (as nginx: links, dates in UTC, sizes in bytes) or json "
            "(as nginx: [{\"name\", \"type\": \"file\" | \"directory\", "
            "\"mtime\" as an HTTP date, \"size\" for files}])"},
    {.name = "autoindex_exact_size",
     .type = FD_API_FLAG,
     .offset = offsetof(static_conf_t, autoindex_exact_size),
     .def = "on",
     .doc = "on: the HTML listing gives sizes in bytes; off: as nginx, "
            "rounded to the nearest K, M or G (1024-based) above 9999 "
            "bytes (10240 is 10K, 1572864 is 2M). The JSON form always "
            "has bytes"},
    {.name = "autoindex_localtime",
     .type = FD_API_FLAG,
     .offset = offsetof(static_conf_t, autoindex_localtime),
     .def = "off",
     .doc = "on: the HTML listing's dates are in the server's local time "
            "zone (TZ, else /etc/localtime); off: "
            "UTC. The JSON form's are HTTP dates, always GMT"},
    {.name = "gzip_static",
     .type = FD_API_STRING,
     .offset = offsetof(static_conf_t, gzip_static_text),
     .def = "off",
     .doc = "on: serve FILE.br or FILE.gz (br first) instead of FILE when "
            "the client's Accept-Encoding takes it and the compressed file "
            "exists and is not older than FILE, with Content-Encoding, "
            "Vary: Accept-Encoding and its own length, ETag and ranges; "
            "always: FILE.gz whatever the client says (as nginx)"},
    {.name = "mime_types",
     .type = FD_API_STRING,
     .offset = offsetof(static_conf_t, mime_types),
     .def = MIME_DEFAULT_PATH,
     .doc = "nginx-format file mapping file extensions to Content-Type "
            "(types { text/html html htm; ... }), relative to the prefix; "
            "a file extension not listed is application/octet-stream. "
            "When the default file is absent a built-in table is used"},
    {.name = "etag",
     .type = FD_API_FLAG,
     .offset = offsetof(static_conf_t, etag),
     .def = "on",
     .doc = "send an ETag (\"mtime-size\" in hex, as nginx) with static "
            "files and answer If-None-Match"},
    {.name = "open_file_cache",
     .type = FD_API_INT,
     .offset = offsetof(static_conf_t, open_file_cache),
     .def = "128",
     .doc = "open descriptors each worker keeps per location, so that a "
            "file served again costs at most one fstat() instead of open + "
            "fstat + close; the first hit in a loop turn checks it with "
            "fstat() and the turn's other hits use that (size, mtime and "
            "ETag are those of the file when the turn began; a deleted or "
            "renamed-over file is opened again). 0: off"},
    {.name = "open_file_cache_valid",
     .type = FD_API_MSEC,
     .offset = offsetof(static_conf_t, open_file_cache_valid),
     .def = "1s",
     .doc = "how long a cached descriptor is used before the path is "
            "opened again (bounds what fstat() cannot see: a renamed "
            "directory on the path, changed permissions); unused ones are "
            "closed then"},
    {.name = "max_ranges",
     .type = FD_API_INT,
     .offset = offsetof(static_conf_t, max_ranges),
     .def = "16",
     .doc = "ranges one request may ask for (several are sent as "
            "multipart/byteranges); more, or ranges that add up to more "
            "than the file, get the whole file with 200. 0: no ranges"},
    {.name = NULL}};

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

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
}

static int ext_eq(fd_str_t ext, const char *s, size_t len)
{
    if (ext.len != len)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (ext.data[i] != lower(s[i]))
            return 0;
    return 1;
}

static uint32_t mime_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)lower(s[i]);
        h *= 16777619u;
    }
    return h;
}

/* Insert or replace (a later line wins, as in nginx); ext is lower case. */
static void mime_insert(mime_table_t *t, fd_str_t ext, fd_str_t type)
{
    size_t i = mime_hash(ext.data, ext.len) & t->mask;

    while (t->slots[i].ext.len) {
        if (ext_eq(t->slots[i].ext, ext.data, ext.len)) {
            t->slots[i].type = type;
            return;
        }
        i = (i + 1) & t->mask;
    }
    t->slots[i].ext = ext;
    t->slots[i].type = type;
    t->n++;
}

static mime_table_t *mime_table_new(size_t n)
{
    mime_table_t *t = calloc(1, sizeof(*t));
    size_t size = 64;

    if (t == NULL)
        return NULL;
    while (size < n * 2)
        size <<= 1;
    t->slots = calloc(size, sizeof(mime_slot_t));
    if (t->slots == NULL) {
        free(t);
        return NULL;
    }
    t->mask = size - 1;
    return t;
}

static void mime_table_free(mime_table_t *t)
{
    if (t) {
        free(t->slots);
        free(t->text);
        free(t->path);
        free(t);
    }
}

static fd_str_t mime_lookup(const mime_table_t *t, const char *ext,
                            size_t len)
{
    static const fd_str_t def = {24, "application/octet-stream"};
    size_t i;

    if (t == NULL || len == 0)
        return def;
    i = mime_hash(ext, len) & t->mask;
    while (t->slots[i].ext.len) {
        if (ext_eq(t->slots[i].ext, ext, len))
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

static int word_is(fd_str_t w, const char *s)
{
    return w.len == strlen(s) && memcmp(w.data, s, w.len) == 0;
}

static int mime_grow(mime_table_t *t)
{
    size_t size = (t->mask + 1) * 2;
    mime_slot_t *old = t->slots;
    size_t oldsize = t->mask + 1;

    t->slots = calloc(size, sizeof(mime_slot_t));
    if (t->slots == NULL) {
        t->slots = old;
        return FD_ERROR;
    }
    t->mask = size - 1;
    t->n = 0;
    for (size_t i = 0; i < oldsize; i++) {
        if (old[i].ext.len)
            mime_insert(t, old[i].ext, old[i].type);
    }
    free(old);
    return FD_OK;
}

/*
 * Parse nginx's "types { type ext ...; ... }" blocks ('#' comments) from
 * text (len bytes, which the table then owns and points into): the table,
 * or NULL after fd_api_conf_error() naming path:line.
 */
static mime_table_t *mime_parse(const char *path, char *text, size_t len)
{
    mime_lexer_t lx = {.p = text, .end = text + len, .line = 1};
    mime_table_t *t = mime_table_new(0);
    fd_str_t w, type;

    if (t == NULL) {
        free(text);
        goto nomem;
    }
    t->text = text;
    while (mime_word(&lx, &w)) {
        if (!word_is(w, "types"))
            goto unexpected;
        if (!mime_word(&lx, &w) || !word_is(w, "{")) {
            fd_api_conf_error("%s:%d: \"{\" expected after \"types\"", path,
                              lx.line);
            goto failed;
        }
        for (;;) {
            if (!mime_word(&lx, &type)) {
                fd_api_conf_error("%s:%d: unexpected end of file, \"}\" "
                                  "expected", path, lx.line);
                goto failed;
            }
            if (word_is(type, "}"))
                break;
            if (word_is(type, "{") || word_is(type, ";")) {
                w = type;
                goto unexpected;
            }
            while (mime_word(&lx, &w) && !word_is(w, ";")) {
                if (word_is(w, "{") || word_is(w, "}"))
                    goto unexpected;
                for (size_t k = 0; k < w.len; k++)
                    ((char *)w.data)[k] = lower(w.data[k]);
                if ((t->n + 1) * 2 > t->mask + 1 && mime_grow(t) != FD_OK)
                    goto nomem;
                mime_insert(t, w, type);
            }
            if (!word_is(w, ";")) {
                fd_api_conf_error("%s:%d: \";\" expected after \"%.*s\"",
                                  path, lx.line, (int)type.len, type.data);
                goto failed;
            }
        }
    }
    return t;

unexpected:
    fd_api_conf_error("%s:%d: unexpected \"%.*s\"", path, lx.line,
                      (int)w.len, w.data);
    goto failed;
nomem:
    fd_api_conf_error("%s: out of memory", path);
failed:
    mime_table_free(t);
    return NULL;
}

/* The file at path (open at fd, st its fstat()) read and parsed; NULL
 * after fd_api_conf_error(). */
static mime_table_t *mime_load_file(const char *path, int fd,
                                    const struct stat *st)
{
    size_t got = 0, size = (size_t)st->st_size;
    char *text = malloc(size + 1);

    if (text == NULL) {
        fd_api_conf_error("mime_types: out of memory");
        return NULL;
    }
    while (got < size) {
        ssize_t n = read(fd, text + got, size - got);

        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0) {
            fd_api_conf_error("cannot read mime_types file \"%s\": %s",
                              path, n == 0 ? strerror(EIO)
                                           : strerror(errno));
            free(text);
            return NULL;
        }
        got += (size_t)n;
    }
    text[got] = '\0';
    return mime_parse(path, text, got);
}

static mime_table_t *mime_builtin_table(void)
{
    static mime_table_t *t;
    size_t i, n = sizeof(mime_builtin) / sizeof(mime_builtin[0]);

    if (t || (t = mime_table_new(n)) == NULL)
        return t;
    for (i = 0; i < n; i++) {
        fd_str_t ext = {strlen(mime_builtin[i][0]), mime_builtin[i][0]};
        fd_str_t type = {strlen(mime_builtin[i][1]), mime_builtin[i][1]};

        mime_insert(t, ext, type);
    }
    return t;
}

/* Tables read, shared while their file stays the same. Configurations
 * are loaded on one thread, the master's. */
static mime_table_t *mime_tables;

static void mime_unref(void *data)
{
    mime_table_t *t = data, **pp;

    if (--t->refs)
        return;
    for (pp = &mime_tables; *pp; pp = &(*pp)->next)
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    mime_table_free(t);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The table of mime_types = name for the configuration being loaded;
 * NULL after fd_api_conf_error(). */
static const mime_table_t *mime_get(const char *name)
{
    const char *path = fd_api_conf_path(name);
    mime_table_t *t;
    struct stat st;
    int fd, err;

    if (path == NULL) {
        fd_api_conf_error("mime_types \"%s\": out of memory", name);
        return NULL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1 || fstat(fd, &st) == -1) {
        err = errno;
        if (fd != -1)
            close(fd);
        if (err == ENOENT && strcmp(name, MIME_DEFAULT_PATH) == 0) {
            if ((t = mime_builtin_table()) == NULL)
                fd_api_conf_error("mime_types: out of memory");
            return t;
        }
        fd_api_conf_error("cannot read mime_types file \"%s\": %s", path,
                          strerror(err));
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > MIME_MAX_FILE) {
        close(fd);
        fd_api_conf_error("cannot read mime_types file \"%s\": not a "
                          "regular file or too large", path);
        return NULL;
    }
    for (t = mime_tables; t; t = t->next)
        if (strcmp(t->path, path) == 0 && same_file(&t->st, &st))
            break;
    if (t == NULL) {
        t = mime_load_file(path, fd, &st);
        if (t && (t->path = strdup(path)) == NULL) {
            mime_table_free(t);
            t = NULL;
            fd_api_conf_error("mime_types: out of memory");
        }
        if (t) {
            t->st = st;
            t->next = mime_tables;
            mime_tables = t;
        }
    }
    close(fd);
    if (t == NULL)
        return NULL;
    t->refs++;
    if (fd_api_conf_cleanup(mime_unref, t) != FD_OK) {
        mime_unref(t);
        fd_api_conf_error("mime_types: out of memory");
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------------- */
/* The handler                                                            */

static int static_init_conf(void *conf)
{
    static const char *const gzip_static[] = {"off", "on", "always", NULL};
    static const char *const formats[] = {"html", "json", NULL};
    static_conf_t *scf = conf;
    int format;

    if ((scf->gzip_static = fd_api_conf_enum(scf, "gzip_static",
                                             scf->gzip_static_text,
                                             gzip_static)) < 0 ||
        (format = fd_api_conf_enum(scf, "autoindex_format",
                                   scf->autoindex_format, formats)) < 0 ||
        fd_api_conf_bounds(scf, "open_file_cache", scf->open_file_cache, 0,
                           65536, 0) != FD_OK ||
        fd_api_conf_bounds(scf, "max_ranges", scf->max_ranges, 0, 64, 0) !=
            FD_OK)
        return FD_ERROR;
    scf->autoindex_flags =
        (format == 1 ? FD_AUTOINDEX_JSON : 0) |
        (scf->autoindex_exact_size ? FD_AUTOINDEX_EXACT : 0) |
        (scf->autoindex_localtime ? FD_AUTOINDEX_LOCALTIME : 0);
    fd_api_conf_at_key(conf, "mime_types"); /* errors name its line */
    scf->types = mime_get(scf->mime_types);
    return scf->types ? FD_OK : FD_ERROR;
}

static int static_handler(fd_request_t *r)
{
    static const fd_str_t vary = {4, "Vary"};
    static const fd_str_t accept_encoding = {15, "Accept-Encoding"};
    static_conf_t *scf = fd_req_conf(r);
    fd_api_file_cache_t *cache = scf->cache;
    fd_str_t path = fd_req_path(r);
    const char *ext, *end;
    fd_api_file_t f;
    int rc;

    /* the cache is the loop's: made there, on first use */
    if (cache == NULL && scf->open_file_cache && !fd_api_on_pool_thread())
        cache = scf->cache =
            fd_api_file_cache((unsigned)scf->open_file_cache,
                              scf->open_file_cache_valid);
    if (path.data[path.len - 1] == '/' &&
        (rc = fd_req_file_index(r, cache)) != FD_OK)
        return rc;
    if ((rc = fd_req_file_open(r, cache, path, &f)) != FD_OK)
        return rc;
    if (f.type == FD_API_FILE_DIR) {
        if (path.data[path.len - 1] != '/')
            return fd_resp_redirect_slash(r);
        /* no index: the listing, or 403 */
        return scf->autoindex ? fd_static_autoindex(r, path,
                                                    scf->autoindex_flags)
                              : 403;
    }

    /* the type comes from the file's name (a variant's is FILE's): the
     * extension after its last '.' */
    end = f.path.data + f.path.len;
    for (ext = end; ext > f.path.data && ext[-1] != '/' && ext[-1] != '.';
         ext--)
        ;
    fd_resp_content_type_static(
        r, mime_lookup(scf->types, ext,
                       ext > f.path.data && ext[-1] == '.'
                           ? (size_t)(end - ext)
                           : 0));

    if (scf->gzip_static != GZIP_STATIC_OFF) {
        int always = scf->gzip_static == GZIP_STATIC_ALWAYS;

        /* the answer depends on Accept-Encoding, whichever is sent */
        if (!always &&
            fd_resp_header_static(r, vary, accept_encoding) != FD_OK)
            return 500;
        if (fd_req_file_variant(r, cache, &f,
                                always ? FD_API_ENC_GZIP
                                       : FD_API_ENC_BR | FD_API_ENC_GZIP,
                                always) == FD_ERROR)
            return 500;
    }
    return fd_resp_file_send(r, &f, scf->etag ? FD_API_FILE_ETAG : 0,
                             (unsigned)scf->max_ranges);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "static",
    .keys = static_keys,
    .conf_size = sizeof(static_conf_t),
    .init_conf = static_init_conf,
    .handler = static_handler,
    .flags = FD_API_THREAD_SAFE,
    .methods = FD_API_GET | FD_API_HEAD,
};
