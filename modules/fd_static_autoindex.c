/*
 * static, autoindex = on: the listing of a directory without an index
 * file, in HTML or JSON. Names are escaped for HTML, for links and for
 * JSON (bytes that are not UTF-8 show as U+FFFD); directories first, then
 * files, sorted by name, with mtime (UTC, or local time in HTML with
 * autoindex_localtime) and size (in HTML rounded to K, M, G unless
 * autoindex_exact_size); dot-files hidden, and
 * symlinks unless follow_symlinks is on (they could not be served). At
 * most AUTOINDEX_MAX_ENTRIES entries and AUTOINDEX_MAX_NAMES bytes of
 * names: the rest is counted in X-Autoindex-Cut.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_static.h"


#define AUTOINDEX_MAX_ENTRIES 50000
#define AUTOINDEX_MAX_NAMES (4 * 1024 * 1024)

typedef struct {
    char *name;
    size_t len;
    int dir;
    int64_t size;
    time_t mtime;
} dirent_t;

static int dirent_cmp(const void *a, const void *b)
{
    const dirent_t *x = a, *y = b;
    int c;

    if (x->dir != y->dir)
        return y->dir - x->dir;
    c = memcmp(x->name, y->name, fd_min(x->len, y->len));
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k, i;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        k = 2, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        k = 3, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        k = 4, cp = s[0] & 0x07;
    else
        return 0;
    if (n < k)
        return 0;
    for (i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (k == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return k;
}

/* Text for HTML or JSON: escaped, and a byte that is not UTF-8 becomes
 * U+FFFD, so no name can break the page or the document. */
static void add_text(fd_sbuf_t *sb, const char *s, size_t n, int json)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + n;

    while (p < e) {
        size_t k = utf8_len(p, (size_t)(e - p));

        if (k == 0) {
            fd_sbuf_add(sb, json ? "\\ufffd" : "&#xfffd;", json ? 6 : 8);
            p++;
            continue;
        }
        if (json) {
            fd_sbuf_add_json(sb, (const char *)p, k);
        } else if (*p == '<') {
            fd_sbuf_add_lit(sb, "&lt;");
        } else if (*p == '>') {
            fd_sbuf_add_lit(sb, "&gt;");
        } else if (*p == '&') {
            fd_sbuf_add_lit(sb, "&amp;");
        } else if (*p == '"') {
            fd_sbuf_add_lit(sb, "&quot;");
        } else if (*p == '\'') {
            fd_sbuf_add_lit(sb, "&#39;");
        } else if (*p < 0x20 || *p == 0x7f) {
            fd_sbuf_add_lit(sb, "&#xfffd;");
        } else {
            fd_sbuf_add(sb, p, k);
        }
        p += k;
    }
}

/* A relative link to a name: every byte but RFC 3986's unreserved as
 * %XX (a ':' would make it a scheme, a '?' or '#' cut it). */
static void add_href(fd_sbuf_t *sb, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            fd_sbuf_addc(sb, (char)c);
        } else {
            fd_sbuf_addc(sb, '%');
            fd_sbuf_addc(sb, hex[c >> 4]);
            fd_sbuf_addc(sb, hex[c & 15]);
        }
    }
}

static void add_time(fd_sbuf_t *sb, time_t t, const char *fmt, int local)
{
    char buf[64];
    struct tm tm;
    size_t n;

    if ((local ? localtime_r(&t, &tm) : gmtime_r(&t, &tm)) == NULL)
        return;
    n = strftime(buf, sizeof(buf), fmt, &tm);
    fd_sbuf_add(sb, buf, n);
}

/*
 * autoindex_exact_size = off, nginx's rounding: bytes up to 9999, then
 * the nearest K, M or G (half up), 1024-based.
 */
static void add_size_rounded(fd_sbuf_t *sb, uint64_t n)
{
    static const struct {
        uint64_t unit;
        char scale;
    } s[] = {{1024ULL * 1024 * 1024, 'G'}, {1024 * 1024, 'M'}, {1024, 'K'}};
    unsigned i;

    for (i = 0; i < fd_nelems(s); i++) {
        /* K only above 9999: four digits of bytes are shown as they are */
        if (n >= (s[i].unit == 1024 ? 10000 : s[i].unit)) {
            fd_sbuf_add_uint(sb, n / s[i].unit +
                                     (n % s[i].unit >= s[i].unit / 2));
            fd_sbuf_addc(sb, s[i].scale);
            return;
        }
    }
    fd_sbuf_add_uint(sb, n);
}

/* Read the directory open at dfd (closed here) into the pool: NULL and
 * *n = 0 with errno on failure. */
static dirent_t *read_dir(fd_request_t *r, int dfd, int follow, size_t *n,
                          int *cut)
{
    dirent_t *v = NULL, *nv;
    size_t cap = 0, names = 0;
    struct dirent *de;
    struct stat st;
    DIR *d = fdopendir(dfd);

    *n = 0;
    *cut = 0;
    if (d == NULL) {
        close(dfd);
        return NULL;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);

        if (de->d_name[0] == '.')
            continue; /* ".", ".." and the hidden ones */
        if (*n >= AUTOINDEX_MAX_ENTRIES || names + len > AUTOINDEX_MAX_NAMES) {
            (*cut)++;
            continue; /* counted, not kept */
        }
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1)
            continue;
        if (S_ISLNK(st.st_mode) &&
            (!follow || fstatat(dirfd(d), de->d_name, &st, 0) == -1))
            continue; /* it could not be served */
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
            continue;
        if (*n == cap) {
            /* the pool keeps the old arrays: at most as much again */
            cap = cap ? cap * 2 : 64;
            nv = fd_palloc(r->pool, cap * sizeof(*v));
            if (nv == NULL)
                goto nomem;
            if (*n)
                memcpy(nv, v, *n * sizeof(*v));
            v = nv;
        }
        v[*n].name = fd_pnalloc(r->pool, len);
        if (v[*n].name == NULL)
            goto nomem;
        memcpy(v[*n].name, de->d_name, len);
        v[*n].len = len;
        v[*n].dir = S_ISDIR(st.st_mode);
        v[*n].size = st.st_size;
        v[*n].mtime = st.st_mtime;
        names += len;
        (*n)++;
    }
    if (errno) {
        int err = errno;

        closedir(d);
        errno = err;
        *n = 0;
        return NULL;
    }
    closedir(d);
    if (v == NULL)
        v = fd_palloc(r->pool, sizeof(*v)); /* empty: not a failure */
    return v;

nomem:
    closedir(d);
    *n = 0;
    errno = ENOMEM;
    return NULL;
}

int fd_static_autoindex(fd_request_t *r, int dfd, const char *path,
                        unsigned flags)
{
    int json = (flags & FD_AUTOINDEX_JSON) != 0;
    int local = (flags & FD_AUTOINDEX_LOCALTIME) != 0;
    int cut;
    dirent_t *v;
    size_t n, i;
    fd_sbuf_t sb;

    v = read_dir(r, dfd, r->loc->follow_symlinks, &n, &cut);
    if (v == NULL) {
        int err = errno;

        if (err == EACCES)
            return 403;
        fd_log_error(FD_LOG_ERR, err, "autoindex: reading \"%s\" failed",
                     path);
        return 500;
    }
    qsort(v, n, sizeof(*v), dirent_cmp);
    if (fd_sbuf_init(&sb, r->pool, 512 + n * 160) != FD_OK)
        return 500;
    if (json) {
        fd_sbuf_addc(&sb, '[');
        for (i = 0; i < n; i++) {
            if (i)
                fd_sbuf_addc(&sb, ',');
            fd_sbuf_add_lit(&sb, "\n{\"name\":\"");
            add_text(&sb, v[i].name, v[i].len, 1);
            fd_sbuf_add_lit(&sb, "\",\"type\":\"");
            fd_sbuf_add_str(&sb, v[i].dir ? fd_string("directory")
                                          : fd_string("file"));
            fd_sbuf_add_lit(&sb, "\",\"mtime\":\"");
            add_time(&sb, v[i].mtime, "%a, %d %b %Y %H:%M:%S GMT", 0);
            fd_sbuf_addc(&sb, '"');
            if (!v[i].dir) {
                fd_sbuf_add_lit(&sb, ",\"size\":");
                fd_sbuf_add_uint(&sb, (uint64_t)v[i].size);
            }
            fd_sbuf_addc(&sb, '}');
        }
        fd_sbuf_add_lit(&sb, "\n]\n");
        r->content_type = fd_string("application/json");
    } else {
        fd_sbuf_add_lit(&sb, "<!DOCTYPE html>\n<html><head><meta "
                             "charset=\"utf-8\"><title>Index of ");
        add_text(&sb, r->path.data, r->path.len, 0);
        fd_sbuf_add_lit(&sb, "</title></head>\n<body>\n<h1>Index of ");
        add_text(&sb, r->path.data, r->path.len, 0);
        fd_sbuf_add_lit(&sb, "</h1><hr><pre>\n");
        if (r->path.len > 1)
            fd_sbuf_add_lit(&sb, "<a href=\"../\">../</a>\n");
        for (i = 0; i < n; i++) {
            fd_sbuf_add_lit(&sb, "<a href=\"");
            add_href(&sb, v[i].name, v[i].len);
            if (v[i].dir)
                fd_sbuf_addc(&sb, '/');
            fd_sbuf_add_lit(&sb, "\">");
            add_text(&sb, v[i].name, v[i].len, 0);
            if (v[i].dir)
                fd_sbuf_addc(&sb, '/');
            fd_sbuf_add_lit(&sb, "</a> ");
            add_time(&sb, v[i].mtime, "%d-%b-%Y %H:%M", local);
            fd_sbuf_addc(&sb, ' ');
            if (v[i].dir)
                fd_sbuf_addc(&sb, '-');
            else if (flags & FD_AUTOINDEX_EXACT)
                fd_sbuf_add_uint(&sb, (uint64_t)v[i].size);
            else
                add_size_rounded(&sb, (uint64_t)v[i].size);
            fd_sbuf_addc(&sb, '\n');
        }
        fd_sbuf_add_lit(&sb, "</pre><hr>");
        if (cut) {
            fd_sbuf_add_lit(&sb, "<p>");
            fd_sbuf_add_uint(&sb, (uint64_t)cut);
            fd_sbuf_add_lit(&sb, " more entries not listed</p>");
        }
        fd_sbuf_add_lit(&sb, "</body></html>\n");
        r->content_type = fd_string("text/html; charset=utf-8");
    }
    if (fd_sbuf_failed(&sb))
        return 500;
    if (cut) {
        fd_sbuf_t h;

        if (fd_sbuf_init(&h, r->pool, 24) != FD_OK)
            return 500;
        fd_sbuf_add_uint(&h, (uint64_t)cut);
        if (fd_sbuf_failed(&h) ||
            fd_http_header_add(r, fd_string("X-Autoindex-Cut"),
                               fd_sbuf_str(&h)) != FD_OK)
            return 500;
    }
    r->status = 200;
    r->content_length = (int64_t)fd_sbuf_len(&sb);
    if (r->in.method_id == FD_HTTP_GET &&
        fd_http_body_set(r, sb.start, fd_sbuf_len(&sb)) != FD_OK)
        return 500;
    return FD_OK;
}
