/*
 * static, autoindex = on: the listing of a directory without an index
 * file, in HTML or JSON. fastd reads the directory (fd_req_file_list:
 * directories first, then files, sorted by name; dot-files hidden, and
 * symlinks unless follow_symlinks is on, as they could not be served; at
 * most AUTOINDEX_MAX_ENTRIES entries and AUTOINDEX_MAX_NAMES bytes of
 * names, the rest counted in X-Autoindex-Cut). Here names are escaped for
 * HTML, for links and for JSON (bytes that are not UTF-8 show as U+FFFD),
 * with mtime (UTC, or local time in HTML with autoindex_localtime) and
 * size (in HTML rounded to K, M, G unless autoindex_exact_size).
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "fd_static.h"

#define AUTOINDEX_MAX_ENTRIES 50000
#define AUTOINDEX_MAX_NAMES (4 * 1024 * 1024)

#define add_lit(sb, s) fd_api_sbuf_add(sb, s, sizeof(s) - 1)

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
static void add_text(fd_api_sbuf_t *sb, const char *s, size_t n, int json)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + n;

    while (p < e) {
        size_t k = utf8_len(p, (size_t)(e - p));

        if (k == 0) {
            fd_api_sbuf_add(sb, json ? "\\ufffd" : "&#xfffd;", json ? 6 : 8);
            p++;
            continue;
        }
        if (json) {
            fd_api_sbuf_add_json(sb, (const char *)p, k);
        } else if (*p == '<') {
            add_lit(sb, "&lt;");
        } else if (*p == '>') {
            add_lit(sb, "&gt;");
        } else if (*p == '&') {
            add_lit(sb, "&amp;");
        } else if (*p == '"') {
            add_lit(sb, "&quot;");
        } else if (*p == '\'') {
            add_lit(sb, "&#39;");
        } else if (*p < 0x20 || *p == 0x7f) {
            add_lit(sb, "&#xfffd;");
        } else {
            fd_api_sbuf_add(sb, p, k);
        }
        p += k;
    }
}

/* A relative link to a name: every byte but RFC 3986's unreserved as
 * %XX (a ':' would make it a scheme, a '?' or '#' cut it). */
static void add_href(fd_api_sbuf_t *sb, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            fd_api_sbuf_addc(sb, (char)c);
        } else {
            fd_api_sbuf_addc(sb, '%');
            fd_api_sbuf_addc(sb, hex[c >> 4]);
            fd_api_sbuf_addc(sb, hex[c & 15]);
        }
    }
}

static void add_time(fd_api_sbuf_t *sb, time_t t, const char *fmt, int local)
{
    char buf[64];
    struct tm tm;
    size_t n;

    if ((local ? localtime_r(&t, &tm) : gmtime_r(&t, &tm)) == NULL)
        return;
    n = strftime(buf, sizeof(buf), fmt, &tm);
    fd_api_sbuf_add(sb, buf, n);
}

/*
 * autoindex_exact_size = off, nginx's rounding: bytes up to 9999, then
 * the nearest K, M or G (half up), 1024-based.
 */
static void add_size_rounded(fd_api_sbuf_t *sb, uint64_t n)
{
    static const struct {
        uint64_t unit;
        char scale;
    } s[] = {{1024ULL * 1024 * 1024, 'G'}, {1024 * 1024, 'M'}, {1024, 'K'}};
    unsigned i;

    for (i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
        /* K only above 9999: four digits of bytes are shown as they are */
        if (n >= (s[i].unit == 1024 ? 10000 : s[i].unit)) {
            fd_api_sbuf_add_uint(sb, n / s[i].unit +
                                     (n % s[i].unit >= s[i].unit / 2));
            fd_api_sbuf_addc(sb, s[i].scale);
            return;
        }
    }
    fd_api_sbuf_add_uint(sb, n);
}

int fd_static_autoindex(fd_request_t *r, fd_str_t path, unsigned flags)
{
    static const fd_str_t json_type = {16, "application/json"};
    static const fd_str_t html_type = {24, "text/html; charset=utf-8"};
    int json = (flags & FD_AUTOINDEX_JSON) != 0;
    int local = (flags & FD_AUTOINDEX_LOCALTIME) != 0;
    const fd_api_dirent_t *v;
    fd_api_sbuf_t *sb;
    fd_api_dir_t d;
    size_t i;
    int rc;

    rc = fd_req_file_list(r, path, AUTOINDEX_MAX_ENTRIES, AUTOINDEX_MAX_NAMES,
                          &d);
    if (rc != FD_OK)
        return rc;
    v = d.entries;
    if ((sb = fd_req_sbuf(r, 512 + d.n * 160)) == NULL)
        return 500;
    if (json) {
        fd_api_sbuf_addc(sb, '[');
        for (i = 0; i < d.n; i++) {
            if (i)
                fd_api_sbuf_addc(sb, ',');
            add_lit(sb, "\n{\"name\":\"");
            add_text(sb, v[i].name.data, v[i].name.len, 1);
            add_lit(sb, "\",\"type\":\"");
            if (v[i].dir)
                add_lit(sb, "directory");
            else
                add_lit(sb, "file");
            add_lit(sb, "\",\"mtime\":\"");
            add_time(sb, (time_t)v[i].mtime, "%a, %d %b %Y %H:%M:%S GMT", 0);
            fd_api_sbuf_addc(sb, '"');
            if (!v[i].dir) {
                add_lit(sb, ",\"size\":");
                fd_api_sbuf_add_uint(sb, (uint64_t)v[i].size);
            }
            fd_api_sbuf_addc(sb, '}');
        }
        add_lit(sb, "\n]\n");
        fd_resp_content_type_static(r, json_type);
    } else {
        add_lit(sb, "<!DOCTYPE html>\n<html><head><meta "
                    "charset=\"utf-8\"><title>Index of ");
        add_text(sb, path.data, path.len, 0);
        add_lit(sb, "</title></head>\n<body>\n<h1>Index of ");
        add_text(sb, path.data, path.len, 0);
        add_lit(sb, "</h1><hr><pre>\n");
        if (path.len > 1)
            add_lit(sb, "<a href=\"../\">../</a>\n");
        for (i = 0; i < d.n; i++) {
            add_lit(sb, "<a href=\"");
            add_href(sb, v[i].name.data, v[i].name.len);
            if (v[i].dir)
                fd_api_sbuf_addc(sb, '/');
            add_lit(sb, "\">");
            add_text(sb, v[i].name.data, v[i].name.len, 0);
            if (v[i].dir)
                fd_api_sbuf_addc(sb, '/');
            add_lit(sb, "</a> ");
            add_time(sb, (time_t)v[i].mtime, "%d-%b-%Y %H:%M", local);
            fd_api_sbuf_addc(sb, ' ');
            if (v[i].dir)
                fd_api_sbuf_addc(sb, '-');
            else if (flags & FD_AUTOINDEX_EXACT)
                fd_api_sbuf_add_uint(sb, (uint64_t)v[i].size);
            else
                add_size_rounded(sb, (uint64_t)v[i].size);
            fd_api_sbuf_addc(sb, '\n');
        }
        add_lit(sb, "</pre><hr>");
        if (d.cut) {
            add_lit(sb, "<p>");
            fd_api_sbuf_add_uint(sb, (uint64_t)d.cut);
            add_lit(sb, " more entries not listed</p>");
        }
        add_lit(sb, "</body></html>\n");
        fd_resp_content_type_static(r, html_type);
    }
    if (d.cut) {
        fd_api_sbuf_t *h = fd_req_sbuf(r, 24);

        if (h == NULL)
            return 500;
        fd_api_sbuf_add_uint(h, (uint64_t)d.cut);
        if (fd_api_sbuf_failed(h) ||
            fd_resp_header(r, "X-Autoindex-Cut", fd_api_sbuf_str(h)) !=
                FD_OK)
            return 500;
    }
    if (fd_api_sbuf_failed(sb))
        return 500;
    fd_resp_status(r, 200);
    {
        fd_str_t body = fd_api_sbuf_str(sb);

        return fd_resp_body_static(r, body.data, body.len) == FD_OK ? FD_OK
                                                                    : 500;
    }
}
