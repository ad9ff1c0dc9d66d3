/*
 * A file, or a range of one, as a response body with the client's
 * conditionals (If-Match, If-Unmodified-Since, If-None-Match,
 * If-Modified-Since) and ranges (Range,
 * If-Range; several as multipart/byteranges): the static module's files
 * and the proxy cache's entries are answered by the same code.
 */
#include <sys/types.h>

#include "fd_core.h"
#include "fd_http.h"

static const char *skip_ows_comma(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
        p++;
    return p;
}

/* "*" or a list of entity tags against etag: weak comparison (the opaque
 * tags, W/ dropped on both sides: If-None-Match), or strong (neither may
 * be weak: If-Match; RFC 9110 8.8.3.2). */
static int etag_list_match(fd_str_t list, fd_str_t etag, int strong)
{
    const char *p = list.data, *e = list.data + list.len;
    const char *tag;
    int weak;

    if (etag.len > 2 && etag.data[0] == 'W' && etag.data[1] == '/') {
        etag = (fd_str_t){etag.len - 2, etag.data + 2};
        if (strong)
            etag.len = 0; /* "*" alone can match */
    }
    for (;;) {
        p = skip_ows_comma(p, e);
        if (p >= e)
            return 0;
        if (*p == '*')
            return 1;
        weak = e - p >= 2 && p[0] == 'W' && p[1] == '/';
        if (weak)
            p += 2;
        if (p >= e || *p != '"')
            return 0;
        tag = p++;
        while (p < e && *p != '"')
            p++;
        if (p >= e)
            return 0;
        p++;
        if (!(strong && weak) && etag.len && (size_t)(p - tag) == etag.len &&
            memcmp(tag, etag.data, etag.len) == 0)
            return 1;
    }
}

int fd_http_etag_match(fd_str_t list, fd_str_t etag)
{
    return etag_list_match(list, etag, 0);
}

static int list_has_star(fd_str_t list)
{
    const char *p = skip_ows_comma(list.data, list.data + list.len);

    return p < list.data + list.len && *p == '*';
}

/* Non-negative decimal, saturating; -1 when there is no digit. */
static int64_t parse_off(const char **pp, const char *e)
{
    const char *p = *pp;
    int64_t v = 0;

    if (p >= e || *p < '0' || *p > '9')
        return -1;
    while (p < e && *p >= '0' && *p <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            v = INT64_MAX / 2; /* far beyond any file */
        else
            v = v * 10 + (*p - '0');
        p++;
    }
    *pp = p;
    return v;
}


static const char *skip_ows(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/*
 * "bytes=" and a list of ranges against size (RFC 9110 14.1.2): FD_RANGE_OK
 * with the satisfiable ones in rg[0..*n), FD_RANGE_UNSATISFIABLE (none is),
 * or FD_RANGE_NONE: malformed, more than max, or more bytes than the file
 * (overlapping ranges that would make a small file a large answer). The
 * whole file is then sent, as RFC 9110 14.2 allows.
 */
int fd_http_parse_ranges(fd_str_t h, int64_t size, fd_http_range_t *rg,
                          unsigned max, unsigned *n)
{
    const char *p = h.data, *e = h.data + h.len;
    int64_t a, b, total = 0;
    unsigned specs = 0;

    *n = 0;
    if (h.len < 6 || !fd_str_caseeq((fd_str_t){5, p}, "bytes", 5))
        return FD_RANGE_NONE;
    p = skip_ows(p + 5, e);
    if (p >= e || *p++ != '=')
        return FD_RANGE_NONE;
    for (;;) {
        p = skip_ows(p, e);
        if (p < e && *p == ',') { /* an empty list element */
            p++;
            continue;
        }
        if (p >= e)
            break;
        if (++specs > max)
            return FD_RANGE_NONE;
        if (*p == '-') {
            p++;
            if ((b = parse_off(&p, e)) < 0)
                return FD_RANGE_NONE;
            a = -1;
        } else {
            if ((a = parse_off(&p, e)) < 0)
                return FD_RANGE_NONE;
            p = skip_ows(p, e);
            if (p >= e || *p++ != '-')
                return FD_RANGE_NONE;
            p = skip_ows(p, e);
            b = (p < e && *p >= '0' && *p <= '9') ? parse_off(&p, e) : -1;
            if (b >= 0 && b < a)
                return FD_RANGE_NONE; /* invalid: the header is ignored */
        }
        p = skip_ows(p, e);
        if (p < e && *p++ != ',')
            return FD_RANGE_NONE; /* trailing junk */
        if (a < 0) { /* suffix: the last b bytes */
            if (b == 0 || size == 0)
                continue;
            rg[*n].start = b >= size ? 0 : size - b;
            rg[*n].end = size - 1;
        } else {
            if (a >= size)
                continue;
            rg[*n].start = a;
            rg[*n].end = (b < 0 || b >= size) ? size - 1 : b;
        }
        total += rg[*n].end - rg[*n].start + 1;
        if (total > size)
            return FD_RANGE_NONE;
        (*n)++;
    }
    if (specs == 0)
        return FD_RANGE_NONE;
    return *n ? FD_RANGE_OK : FD_RANGE_UNSATISFIABLE;
}

/* If-Range: an entity tag (strong comparison) or a date (exact match). */
int fd_http_if_range(fd_str_t h, fd_str_t etag, time_t mtime)
{
    if (h.len && (h.data[0] == '"' || (h.len > 1 && h.data[0] == 'W'
                                       && h.data[1] == '/'))) {
        return h.data[0] == '"' && etag.len && h.len == etag.len &&
               memcmp(h.data, etag.data, etag.len) == 0;
    }
    return fd_http_parse_time(h.data, h.len) == mtime;
}

static fd_str_t request_header(fd_request_t *r, const char *name, size_t n)
{
    for (unsigned i = 0; i < r->in.nheaders; i++) {
        if (fd_str_caseeq(r->in.headers[i].name, name, n))
            return r->in.headers[i].value;
    }
    return fd_null_string;
}

/*
 * RFC 9110 13.2.2, steps 1 and 2: If-Match (strong comparison; "*" holds,
 * the file being there), else If-Unmodified-Since (a date that is not
 * one is ignored, and so is a file of no known date). 1: 412.
 */
static int precondition_failed(fd_request_t *r)
{
    fd_str_t im, ius;
    time_t t;

    if (!r->in.preconditions)
        return 0;
    im = request_header(r, "If-Match", 8);
    if (im.len)
        return !etag_list_match(im, r->etag, 1);
    ius = request_header(r, "If-Unmodified-Since", 19);
    if (ius.len == 0 || r->last_modified < 0)
        return 0;
    t = fd_http_parse_time(ius.data, ius.len);
    return t != -1 && r->last_modified > t;
}

static int not_modified(fd_request_t *r)
{
    fd_str_t inm = r->in.if_none_match;

    /* RFC 9110 13.2.2: If-None-Match wins over If-Modified-Since; without
     * an ETag of ours only "*" can match. */
    if (inm.len && (r->etag.len || list_has_star(inm)))
        return fd_http_etag_match(inm, r->etag);
    if (r->in.if_modified_since.len) {
        time_t ims = fd_http_parse_time(r->in.if_modified_since.data,
                                     r->in.if_modified_since.len);

        return ims != -1 && r->last_modified >= 0 &&
               r->last_modified <= ims;
    }
    return 0;
}

/* Content-Range: "bytes START-END/SIZE", or (start < 0) "bytes *" "/SIZE" */
static fd_str_t content_range(fd_request_t *r, int64_t start, int64_t end,
                              int64_t size)
{
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, 64) != FD_OK)
        return fd_null_string;
    fd_sbuf_add_lit(&sb, "bytes ");
    if (start < 0) {
        fd_sbuf_addc(&sb, '*');
    } else {
        fd_sbuf_add_uint(&sb, (uint64_t)start);
        fd_sbuf_addc(&sb, '-');
        fd_sbuf_add_uint(&sb, (uint64_t)end);
    }
    fd_sbuf_addc(&sb, '/');
    fd_sbuf_add_uint(&sb, (uint64_t)size);
    return fd_sbuf_failed(&sb) ? fd_null_string : fd_sbuf_str(&sb);
}

/* Several ranges: one multipart/byteranges body (RFC 9110 14.6), each
 * part a small header in memory and a range of the file. */
static int send_multipart(fd_request_t *r, int fd, off_t off,
                          const fd_http_range_t *rg, unsigned n, int64_t size)
{
    static uint64_t seq;
    fd_str_t type = r->content_type;
    int64_t total = 0;
    char boundary[24], *b;
    fd_sbuf_t sb;
    fd_buf_t *m;
    unsigned i;

    if (seq == 0)
        seq = ((uint64_t)getpid() << 32) ^ (uint64_t)fd_current_msec;
    b = fd_fmt_hex(boundary, ++seq);
    *b = '\0';
    for (i = 0; i <= n; i++) {
        if (fd_sbuf_init(&sb, r->pool, 128 + type.len) != FD_OK)
            return 500;
        fd_sbuf_add_lit(&sb, "\r\n--");
        fd_sbuf_add(&sb, boundary, (size_t)(b - boundary));
        if (i == n) {
            fd_sbuf_add_lit(&sb, "--\r\n");
        } else {
            fd_sbuf_add_crlf(&sb);
            if (type.len)
                fd_sbuf_add_header(&sb, fd_string("Content-Type"), type);
            fd_sbuf_add_header(&sb, fd_string("Content-Range"),
                               content_range(r, rg[i].start, rg[i].end,
                                             size));
            fd_sbuf_add_crlf(&sb);
        }
        if (fd_sbuf_failed(&sb) ||
            (m = fd_buf_wrap(r->pool, sb.start, fd_sbuf_len(&sb))) == NULL)
            return 500;
        fd_http_body_append(r, m);
        total += (int64_t)fd_sbuf_len(&sb);
        if (i == n)
            break;
        if ((m = fd_buf_file(r->pool, fd, off + rg[i].start,
                             off + rg[i].end + 1)) == NULL)
            return 500;
        fd_http_body_append(r, m);
        total += rg[i].end - rg[i].start + 1;
    }
    if (fd_sbuf_init(&sb, r->pool, 64) != FD_OK)
        return 500;
    fd_sbuf_add_lit(&sb, "multipart/byteranges; boundary=");
    fd_sbuf_add(&sb, boundary, (size_t)(b - boundary));
    if (fd_sbuf_failed(&sb))
        return 500;
    r->content_type = fd_sbuf_str(&sb);
    r->status = 206;
    r->content_length = total;
    return FD_OK;
}

static int send_range(fd_request_t *r, int fd, off_t off, int64_t size,
                      unsigned max)
{
    fd_http_range_t rg[64];
    unsigned n;
    fd_str_t ifr, v;
    int rc;

    rc = fd_http_parse_ranges(r->in.range, size, rg, fd_min(max, 64u), &n);
    if (rc == FD_RANGE_NONE)
        return FD_DECLINED;
    ifr = request_header(r, "If-Range", 8);
    if (ifr.len && !fd_http_if_range(ifr, r->etag, r->last_modified))
        return FD_DECLINED;

    if (rc == FD_RANGE_UNSATISFIABLE) {
        v = content_range(r, -1, 0, size);
        if (fd_http_error_page(r, 416) != FD_OK)
            return 416;
        if (v.len == 0 ||
            fd_http_header_add(r, fd_string("Content-Range"), v) != FD_OK)
            return 500;
        return FD_OK;
    }
    if (n > 1)
        return send_multipart(r, fd, off, rg, n, size);
    v = content_range(r, rg[0].start, rg[0].end, size);
    if (v.len == 0 ||
        fd_http_header_add(r, fd_string("Content-Range"), v) != FD_OK)
        return 500;
    r->status = 206;
    r->content_length = rg[0].end - rg[0].start + 1;
    fd_http_body_append(r, fd_buf_file(r->pool, fd, off + rg[0].start,
                                       off + rg[0].end + 1));
    return FD_OK;
}

int fd_http_send_file(fd_request_t *r, int fd, off_t off, int64_t size,
                      unsigned max_ranges)
{
    int rc;

    if (precondition_failed(r))
        return 412;
    if (not_modified(r)) {
        /* keeps ETag and Last-Modified, as nginx */
        r->status = 304;
        r->content_type = fd_null_string;
        r->content_length = -1;
        return FD_OK;
    }
    if (fd_http_header_add(r, fd_string("Accept-Ranges"), fd_string("bytes"))
        != FD_OK)
        return 500;
    /* RFC 9110 14.2: Range is defined for GET only */
    if (r->in.range.len && r->in.method_id == FD_HTTP_GET && max_ranges > 0) {
        rc = send_range(r, fd, off, size, max_ranges);
        if (rc != FD_DECLINED)
            return rc;
    }
    r->status = 200;
    r->content_length = size;
    if (size > 0 && r->in.method_id == FD_HTTP_GET)
        fd_http_body_append(r, fd_buf_file(r->pool, fd, off, off + size));
    return FD_OK;
}
