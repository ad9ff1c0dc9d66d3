/*
 * A location's files, and the public API's file functions (fastd.h 1.7):
 * what a file-serving module needs, the static module first.
 *
 * A request path (decoded, normalised: no "." or ".." segments, no NUL)
 * names a file under the location's root, or under its alias. Unless
 * follow_symlinks is on, the file is opened beneath a descriptor of that
 * directory with openat2() RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, on
 * kernels without openat2, one component at a time with O_NOFOLLOW. The
 * handler's open, the index's, a precompressed variant's, a listing's and
 * try_files' test all go through map_file(): a file try_files finds is
 * one the handler would open.
 *
 * alias maps a location onto another directory: [location /i/] with alias
 * = /data/img/ makes /i/a.gif /data/img/a.gif; in a regex location $1..$9
 * are its captures. It is core's, as root is, because try_files tests
 * files whatever the location's handler.
 *
 * An open file cache (fd_api_file_cache_t) keeps descriptors per worker
 * for the next requests; the module that serves the files makes one a
 * location (static: open_file_cache).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_http_accept.h"
#include "fd_offload.h"

/* ---------------------------------------------------------------------- */
/* alias = PATH                                                           */

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
int fd_http_alias_init(fd_conf_t *cf, fd_http_loc_t *loc)
{
    const char *file = cf->file, *a = loc->alias, *var, *cut;
    int line = cf->line, regex;
    char real[PATH_MAX], *base;
    struct stat st;

    regex = loc->kind == FD_LOC_REGEX || loc->kind == FD_LOC_REGEX_CASELESS;
    if (loc == loc->server->root_loc ||
        !set_here(cf, loc, "alias", file, line)) {
        fd_conf_at_key(cf, loc, "alias");
        return fd_conf_error(cf, "\"alias\" is only valid in a [location]");
    }
    if (set_here(cf, loc, "root", file, line))
        return fd_conf_error(cf, "\"root\" and \"alias\" in one "
                             "location: use one");
    fd_conf_at_key(cf, loc, "alias");
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
    loc->alias_base_len = strlen(real);
    while (loc->alias_base_len > 0 && real[loc->alias_base_len - 1] == '/')
        loc->alias_base_len--; /* "/" becomes "" as root's does */
    loc->alias_base = fd_pstrdup(cf->pool, real, loc->alias_base_len);
    while (*cut == '/')
        cut++;
    loc->alias_tail = fd_pstrdup(cf->pool, cut, strlen(cut));
    if (loc->alias_base == NULL || loc->alias_tail == NULL)
        return fd_conf_error(cf, "out of memory");
    return FD_OK;
}

/* ---------------------------------------------------------------------- */
/* Opening files beneath the root                                         */

int fd_file_no_openat2; /* set once the kernel said ENOSYS */

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

int fd_file_open_beneath(int rootfd, const char *rel, int flags)
{
    if (*rel == '\0')
        rel = ".";
    if (!__atomic_load_n(&fd_file_no_openat2, __ATOMIC_RELAXED)) {
        struct open_how how = {
            .flags = (uint64_t)flags,
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                       RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));

        if (fd >= 0 || errno != ENOSYS)
            return (int)fd;
        __atomic_store_n(&fd_file_no_openat2, 1, __ATOMIC_RELAXED);
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
 * request. What fstat() cannot see (a directory on the path renamed,
 * permissions changed) is seen when the entry expires, valid ms after it
 * was opened; a timer closes expired entries, so an idle worker holds no
 * descriptor (and no deleted file's blocks) for long. Only regular files
 * are kept.
 *
 * The loop thread alone touches it: a handler on the offload pool opens
 * and closes as without a cache. An entry is reference counted (the
 * table's reference and one per response that sends from it), so
 * eviction never closes a descriptor that a slow client's response still
 * reads.
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

struct fd_api_file_cache_s {
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

typedef fd_api_file_cache_t ofc_t;

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

fd_api_file_cache_t *fd_api_file_cache(unsigned max, uint64_t valid_ms)
{
    ofc_t *c;
    uint32_t size = 16;

    if (max == 0 || fd_offload_on_pool_thread())
        return NULL;
    while (size < (uint64_t)max * 2)
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
    c->max = max;
    c->valid = valid_ms ? (fd_msec_t)valid_ms : 1;
    c->timer.handler = ofc_expire;
    c->turn_end.handler = ofc_turn_end;
    c->turn_end.data = c;
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
/* A path of the location's on disk                                       */

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

/* Capture i of the regex location, set and within path (a rewrite with
 * break may have made the path shorter than the one matched). */
static int capture_ok(const fd_request_t *r, fd_str_t path, int i)
{
    return i < r->ncaptures && r->captures &&
           r->captures[2 * i] != (size_t)-1 &&
           r->captures[2 * i] <= r->captures[2 * i + 1] &&
           r->captures[2 * i + 1] <= path.len;
}

/*
 * The file an alias location names for path, into full (pool): base +
 * "/" + the tail with its captures + what the location's prefix left of
 * the path. *base_len: where the part beneath base starts. NULL: 404 (a
 * ".."), or out of memory (*base_len = 0).
 */
static char *alias_path(fd_request_t *r, fd_str_t path, size_t extra,
                        size_t *base_len, size_t *len)
{
    const fd_http_loc_t *loc = r->loc;
    const char *rest = "", *t;
    size_t n = loc->alias_base_len, restn = 0, cap = n + 5 + extra;
    char *full, *p;

    *base_len = n;
    if (loc->kind == FD_LOC_PREFIX || loc->kind == FD_LOC_PREFIX_STOP ||
        loc->kind == FD_LOC_EXACT) {
        rest = path.data + fd_min(loc->match.len, path.len);
        restn = path.len - fd_min(loc->match.len, path.len);
    }
    for (t = loc->alias_tail; *t; t++) {
        if (t[0] == '$' && t[1] >= '1' && t[1] <= '9') {
            int i = t[1] - '0';

            t++;
            if (capture_ok(r, path, i))
                cap += r->captures[2 * i + 1] - r->captures[2 * i];
        } else {
            cap++;
        }
    }
    cap += restn;
    if ((full = fd_pnalloc(r->pool, cap)) == NULL)
        return NULL;
    memcpy(full, loc->alias_base, n);
    p = full + n;
    *p++ = '/';
    for (t = loc->alias_tail; *t; t++) {
        if (t[0] == '$' && t[1] >= '1' && t[1] <= '9') {
            int i = *++t - '0';

            if (capture_ok(r, path, i)) {
                size_t a = r->captures[2 * i], b = r->captures[2 * i + 1];

                memcpy(p, path.data + a, b - a);
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
    if (p == full + n + 1 && path.data[path.len - 1] != '/' && n > 0)
        *--p = '\0';
    if (has_dotdot(full + n, (size_t)(p - full - n))) {
        *base_len = 1;
        return NULL;
    }
    *len = (size_t)(p - full);
    return full;
}

/* Where a path of the location's is on disk. */
typedef struct {
    char *full;      /* NUL-ended, in the pool, with room for extra + 4 */
    size_t n;        /* its length */
    size_t base;     /* full + base + 1: the part beneath the directory */
    int rootfd;      /* the directory's descriptor; -1: follow_symlinks
                        lets full be opened as it is */
} map_t;

static int map_file(fd_request_t *r, fd_str_t path, size_t extra, map_t *m)
{
    fd_http_loc_t *loc = r->loc;
    size_t root_len = loc->root_len;
    const char *root = loc->root;
    char *f;
    int cached, err;

    m->rootfd = -1;
    if (loc->alias) {
        root = loc->alias_base;
        f = alias_path(r, path, extra, &root_len, &m->n);
        if (f == NULL)
            return root_len ? 404 : 500;
    } else {
        if (root == NULL)
            return 404;
        /* no trailing slash: root "/" becomes "" and paths keep their own */
        while (root_len > 0 && root[root_len - 1] == '/')
            root_len--;
        f = fd_pnalloc(r->pool, root_len + path.len + extra + 5);
        if (f == NULL)
            return 500;
        memcpy(f, root, root_len);
        memcpy(f + root_len, path.data, path.len);
        m->n = root_len + path.len;
        f[m->n] = '\0';
    }
    m->full = f;
    m->base = root_len;
    if (loc->follow_symlinks)
        return FD_OK;

    /* the directory's descriptor, opened on first use and kept: files
     * open beneath it without a walk of the root per request. The root
     * was resolved with realpath() at load, so keeping it changes nothing
     * a reload would not. 0: not yet, else fd + 1. */
    cached = __atomic_load_n(&loc->rootfd1, __ATOMIC_ACQUIRE);
    if (cached) {
        m->rootfd = cached - 1;
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
        if (!__atomic_compare_exchange_n(&loc->rootfd1, &expect, fd + 1, 0,
                                         __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            close(fd);
            fd = expect - 1;
        }
        m->rootfd = fd;
    }
    return FD_OK;
}

/* a path of the request's kind, mapped */
static int map_path(fd_request_t *r, fd_str_t path, map_t *m)
{
    if (path.len == 0 || path.data[0] != '/')
        return 404;
    return map_file(r, path, 0, m);
}

static const char *map_rel(const map_t *m)
{
    return m->n > m->base ? m->full + m->base + 1 : "";
}

static int map_open(const map_t *m, int flags)
{
    return m->rootfd == -1 ? open(m->full, flags)
                           : fd_file_open_beneath(m->rootfd, map_rel(m),
                                                  flags);
}

/*
 * try_files' test: uri as the path, mapped and opened (O_PATH, no read)
 * exactly as a file of the location's is, then one fstat(): a regular
 * file, or with dir a directory. A refused symlink or a ".." out of an
 * alias is not there.
 */
int fd_http_file_test(fd_request_t *r, fd_str_t uri, int dir)
{
    const fd_http_loc_t *loc = r->loc;
    struct stat st;
    map_t m;
    int fd, rc;

    /* an alias stands for the location's prefix: a path outside it has
     * no file there */
    if (loc->alias && loc->kind != FD_LOC_NAMED &&
        (uri.len < loc->match.len ||
         memcmp(uri.data, loc->match.data, loc->match.len) != 0))
        return 0;
    if ((rc = map_file(r, uri, 0, &m)) != FD_OK)
        return rc == 500 ? 500 : 0;
    fd = map_open(&m, O_PATH | O_CLOEXEC);
    if (fd == -1)
        return 0;
    rc = fstat(fd, &st);
    close(fd);
    if (rc == -1)
        return 0;
    return dir ? S_ISDIR(st.st_mode) != 0 : S_ISREG(st.st_mode) != 0;
}

/* ---------------------------------------------------------------------- */
/* The API: opening                                                       */

static void file_set(fd_api_file_t *f, int fd, const struct stat *st)
{
    f->fd = fd;
    f->type = S_ISREG(st->st_mode)   ? FD_API_FILE_REG
              : S_ISDIR(st->st_mode) ? FD_API_FILE_DIR
                                     : 0;
    f->size = st->st_size;
    f->mtime = st->st_mtime;
}

/* the cache where r may use it: the loop's, never a pool thread's */
static ofc_t *usable(fd_request_t *r, ofc_t *c)
{
    return c && !r->in_offload ? c : NULL;
}

/*
 * The file at full (len bytes; m maps it) for r, from the cache or opened
 * (and kept in the cache when it is a regular file): FD_OK and *st, or
 * -1 with errno (missing or refused), or 500 (out of memory, a failed
 * fstat(), logged). With fdp, its descriptor, r's until r ends; without,
 * only *st is wanted (an index: its request comes next, from the cache).
 */
static int open_cached(fd_request_t *r, ofc_t *c, const char *full,
                       size_t len, const map_t *m, int *fdp, struct stat *st)
{
    const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    fd_pool_cleanup_t *cl;
    ofc_entry_t *e;
    uint32_t hash = 0;
    int fd;

    if (c) {
        hash = fd_hash(full, len);
        if ((e = ofc_lookup(c, full, len, hash, st))) {
            if (fdp == NULL) {
                ofc_release(e);
                return FD_OK;
            }
            if (fd_pool_cleanup_add(r->pool, ofc_release, e) == NULL) {
                ofc_release(e);
                return 500;
            }
            *fdp = e->fd;
            return FD_OK;
        }
    }
    if ((fd = map_open(m, flags)) == -1)
        return -1;
    if (fdp == NULL) {
        if (fstat(fd, st) == -1) {
            fd_log_error(FD_LOG_ERR, errno, "fstat(\"%s\") failed", full);
            close(fd);
            return 500;
        }
        if (c && S_ISREG(st->st_mode) &&
            (e = ofc_insert(c, full, len, hash, fd, st)))
            ofc_release(e);
        else
            close(fd);
        return FD_OK;
    }
    cl = fd_pool_cleanup_add(r->pool, close_fd, (void *)(intptr_t)fd);
    if (cl == NULL) {
        close(fd);
        return 500;
    }
    if (fstat(fd, st) == -1) {
        fd_log_error(FD_LOG_ERR, errno, "fstat(\"%s\") failed", full);
        return 500;
    }
    if (c && S_ISREG(st->st_mode) &&
        (e = ofc_insert(c, full, len, hash, fd, st))) {
        cl->handler = ofc_release;
        cl->data = e;
    }
    *fdp = fd;
    return FD_OK;
}

int fd_req_file_open(fd_request_t *r, fd_api_file_cache_t *cache,
                     fd_str_t path, fd_api_file_t *f)
{
    struct stat st;
    map_t m;
    int rc, fd;

    if ((rc = map_path(r, path, &m)) != FD_OK)
        return rc;
    rc = open_cached(r, usable(r, cache), m.full, m.n, &m, &fd, &st);
    if (rc == -1)
        return open_error(r, m.full, errno);
    if (rc != FD_OK)
        return rc;
    file_set(f, fd, &st);
    f->coding = 0;
    f->path = (fd_str_t){m.n, m.full};
    f->base = m.base;
    if (f->type == 0)
        return 403;
    return FD_OK;
}

/*
 * As nginx's index module: the first index file of the directory r's
 * path names (ending in '/') is an internal redirect to path + name,
 * whose location is chosen again, so that "/dir/index.php" runs where
 * "\.php$" sends it instead of being served here as a file (its source).
 * An index name that is a directory stays 403.
 */
int fd_req_file_index(fd_request_t *r, fd_api_file_cache_t *cache)
{
    const fd_http_loc_t *loc = r->loc;
    ofc_t *c = usable(r, cache);
    size_t maxidx = 0, il = 0;
    struct stat st;
    map_t m;
    char *p;
    int rc;
    unsigned i;

    if (r->path.len == 0 || r->path.data[r->path.len - 1] != '/')
        return FD_OK;
    /* room for the longest index name (the core gives every location at
     * least one, index.html by default) */
    for (i = 0; i < loc->index.n; i++)
        maxidx = fd_max(maxidx, strlen(loc->index.items[i]));
    if ((rc = map_file(r, r->path, maxidx, &m)) != FD_OK)
        return rc;
    if (m.full[m.n - 1] != '/')
        return FD_OK; /* an alias of a file: it has no index */
    errno = ENOENT;
    rc = -1;
    for (i = 0; i < loc->index.n; i++) {
        const char *ix = loc->index.items[i];

        il = strlen(ix);
        if (il == 0 || ix[0] == '/' || strstr(ix, ".."))
            continue;
        memcpy(m.full + m.n, ix, il + 1);
        rc = open_cached(r, c, m.full, m.n + il, &m, NULL, &st);
        if (rc != -1 || errno != ENOENT)
            break;
    }
    m.full[m.n] = '\0';
    if (rc == -1)
        return errno == ENOENT ? FD_OK : open_error(r, m.full, errno);
    if (rc != FD_OK)
        return rc;
    if (!S_ISREG(st.st_mode))
        return 403;
    if ((p = fd_pnalloc(r->pool, r->path.len + il + 1)) == NULL)
        return 500;
    memcpy(p, r->path.data, r->path.len);
    memcpy(p + r->path.len, loc->index.items[i], il + 1);
    rc = fd_http_internal_redirect(r, (fd_str_t){r->path.len + il, p}, NULL);
    return rc == FD_OK ? FD_DECLINED : rc;
}

int fd_req_file_variant(fd_request_t *r, fd_api_file_cache_t *cache,
                        fd_api_file_t *f, unsigned codings, int always)
{
    static const struct {
        unsigned coding;
        char suffix[4];
    } v[] = {{FD_API_ENC_BR, ".br"}, {FD_API_ENC_GZIP, ".gz"}};
    ofc_t *c = usable(r, cache);
    struct stat st;
    map_t m;
    char *full = (char *)f->path.data;
    size_t flen = f->path.len;
    int fd, rc;

    /* f's own mapping, for the variant's confinement: its directory is
     * the location's (the descriptor is kept; no walk again) */
    m.full = full;
    m.base = f->base;
    m.rootfd = -1;
    if (!r->loc->follow_symlinks) {
        int cached = __atomic_load_n(&r->loc->rootfd1, __ATOMIC_ACQUIRE);

        if (cached == 0)
            return 0; /* never: f was opened beneath it */
        m.rootfd = cached - 1;
    }
    codings &= FD_API_ENC_BR | FD_API_ENC_GZIP;
    while (codings) {
        unsigned want, i;

        want = always ? (codings & FD_API_ENC_GZIP ? FD_API_ENC_GZIP
                                                   : FD_API_ENC_BR)
                      : fd_http_accept_encoding(r->in.accept_encoding,
                                                codings);
        if (want == 0)
            break;
        codings &= ~want;
        i = want == FD_API_ENC_BR ? 0 : 1;
        memcpy(full + flen, v[i].suffix, 4);
        m.n = flen + 3;
        rc = open_cached(r, c, full, flen + 3, &m, &fd, &st);
        if (rc == -1)
            continue; /* missing, or refused as FILE would be */
        if (rc != FD_OK) {
            full[flen] = '\0';
            return FD_ERROR;
        }
        if (!S_ISREG(st.st_mode) || st.st_mtime < f->mtime)
            continue; /* older than FILE: stale, not served */
        full[flen] = '\0';
        file_set(f, fd, &st);
        f->coding = want;
        return (int)want;
    }
    full[flen] = '\0';
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The API: answering                                                     */

/* "mtime-size" in hex, as nginx, with a variant's "-coding"; by hand:
 * snprintf cost ~750 instructions a request here */
static fd_str_t make_etag(fd_pool_t *pool, const fd_api_file_t *f,
                          fd_str_t coding)
{
    char *p = fd_pnalloc(pool, 2 + 16 + 1 + 16 + 1 + coding.len), *e = p;

    if (p == NULL)
        return fd_null_string;
    *e++ = '"';
    e = fd_fmt_hex(e, (uint64_t)(unsigned long)f->mtime);
    *e++ = '-';
    e = fd_fmt_hex(e, (uint64_t)(unsigned long)f->size);
    if (coding.len) {
        *e++ = '-';
        memcpy(e, coding.data, coding.len);
        e += coding.len;
    }
    *e++ = '"';
    return (fd_str_t){(size_t)(e - p), p};
}

int fd_resp_file_send(fd_request_t *r, const fd_api_file_t *f,
                      unsigned flags, unsigned max_ranges)
{
    fd_str_t coding = f->coding == FD_API_ENC_BR     ? fd_string("br")
                      : f->coding == FD_API_ENC_GZIP ? fd_string("gzip")
                                                     : fd_null_string;

    if (f->type != FD_API_FILE_REG)
        return 403;
    if (coding.len &&
        fd_http_header_add(r, fd_string("Content-Encoding"), coding) !=
            FD_OK)
        return 500;
    r->last_modified = (time_t)f->mtime;
    if ((flags & FD_API_FILE_ETAG) &&
        (r->etag = make_etag(r->pool, f, coding)).len == 0)
        return 500;
    if (r->in.method_id != FD_HTTP_GET && r->in.method_id != FD_HTTP_HEAD) {
        /* conditionals and ranges are a GET's */
        r->status = 200;
        r->content_length = f->size;
        if (f->size > 0)
            fd_http_body_append(r, fd_buf_file(r->pool, f->fd, 0,
                                               (off_t)f->size));
        return FD_OK;
    }
    return fd_http_send_file(r, f->fd, 0, f->size, fd_min(max_ranges, 64u));
}

/* 301 to path + "/": the decoded path is re-encoded, so nothing decoded
 * (CR, LF, spaces) reaches the header. */
int fd_resp_redirect_slash(fd_request_t *r)
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

/* ---------------------------------------------------------------------- */
/* The API: listing a directory                                           */

static int dirent_cmp(const void *a, const void *b)
{
    const fd_api_dirent_t *x = a, *y = b;
    int c;

    if (x->dir != y->dir)
        return y->dir - x->dir;
    c = memcmp(x->name.data, y->name.data, fd_min(x->name.len, y->name.len));
    return c ? c : (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

/* Read the directory open at dfd (closed here) into the pool: -1 with
 * errno on failure. */
static int read_dir(fd_request_t *r, int dfd, fd_api_dir_t *d, size_t max,
                    size_t max_names)
{
    fd_api_dirent_t *v = NULL, *nv;
    size_t cap = 0, names = 0, n = 0;
    int follow = r->loc->follow_symlinks;
    struct dirent *de;
    struct stat st;
    DIR *dir = fdopendir(dfd);

    if (dir == NULL) {
        close(dfd);
        return -1;
    }
    while ((errno = 0, de = readdir(dir)) != NULL) {
        size_t len = strlen(de->d_name);
        char *name;

        if (de->d_name[0] == '.')
            continue; /* ".", ".." and the hidden ones */
        if (n >= max || names + len > max_names) {
            d->cut++;
            continue; /* counted, not kept */
        }
        if (fstatat(dirfd(dir), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1)
            continue;
        if (S_ISLNK(st.st_mode) &&
            (!follow || fstatat(dirfd(dir), de->d_name, &st, 0) == -1))
            continue; /* it could not be served */
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            /* the pool keeps the old arrays: at most as much again */
            cap = cap ? cap * 2 : 64;
            nv = fd_palloc(r->pool, cap * sizeof(*v));
            if (nv == NULL)
                goto nomem;
            if (n)
                memcpy(nv, v, n * sizeof(*v));
            v = nv;
        }
        if ((name = fd_pnalloc(r->pool, len)) == NULL)
            goto nomem;
        memcpy(name, de->d_name, len);
        v[n].name = (fd_str_t){len, name};
        v[n].dir = S_ISDIR(st.st_mode);
        v[n].size = st.st_size;
        v[n].mtime = st.st_mtime;
        names += len;
        n++;
    }
    if (errno) {
        int err = errno;

        closedir(dir);
        errno = err;
        return -1;
    }
    closedir(dir);
    if (n > 1)
        qsort(v, n, sizeof(*v), dirent_cmp);
    d->entries = v;
    d->n = n;
    return 0;

nomem:
    closedir(dir);
    errno = ENOMEM;
    return -1;
}

int fd_req_file_list(fd_request_t *r, fd_str_t path, size_t max,
                     size_t max_names, fd_api_dir_t *d)
{
    const int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    map_t m;
    int rc, fd;

    *d = (fd_api_dir_t){.entries = NULL};
    if ((rc = map_path(r, path, &m)) != FD_OK)
        return rc;
    if ((fd = map_open(&m, flags)) == -1)
        return open_error(r, m.full, errno);
    if (read_dir(r, fd, d, max, max_names) == -1) {
        int err = errno;

        *d = (fd_api_dir_t){.entries = NULL};
        if (err == EACCES)
            return 403;
        fd_log_error(FD_LOG_ERR, err, "reading the directory \"%s\" failed",
                     m.full);
        return 500;
    }
    return FD_OK;
}

/* ---------------------------------------------------------------------- */
/* The API (1.9): a stored response answered again (the proxy's cache)    */

void fd_resp_validators(fd_request_t *r, fd_str_t etag, int64_t last_modified)
{
    r->etag = etag;
    r->last_modified = (time_t)last_modified;
}

int fd_resp_fd_send(fd_request_t *r, int fd, int64_t offset, int64_t size,
                    unsigned max_ranges)
{
    return fd_http_send_file(r, fd, (off_t)offset, size,
                             fd_min(max_ranges, 64u));
}

int fd_resp_fd_body(fd_request_t *r, int fd, int64_t offset, int64_t size)
{
    fd_buf_t *b;

    r->content_length = size;
    if (size == 0 || r->header_only)
        return FD_OK;
    b = fd_buf_file(r->pool, fd, (off_t)offset, (off_t)(offset + size));
    if (b == NULL)
        return FD_ERROR;
    fd_http_body_append(r, b);
    return FD_OK;
}

void fd_resp_reset(fd_request_t *r)
{
    r->status = 0;
    r->headers_out = NULL;
    r->headers_out_last = &r->headers_out;
    r->trailers_out = NULL;
    r->out = NULL;
    r->out_last = &r->out;
    r->content_type = fd_null_string;
    r->content_length = -1;
    r->etag = fd_null_string;
    r->last_modified = -1;
    r->server_passed = 0; /* fd_resp_own_server() undone too */
}

int fd_resp_field_next(fd_request_t *r, const void **it, fd_str_t *name,
                       fd_str_t *value)
{
    const fd_http_header_out_t *h = *it ? ((const fd_http_header_out_t *)*it)
                                              ->next
                                        : r->headers_out;

    if (h == NULL)
        return 0;
    *name = h->name;
    *value = h->value;
    *it = h;
    return 1;
}

int64_t fd_api_http_time(const char *s, size_t n)
{
    return (int64_t)fd_http_parse_time(s, n);
}
