/*
 * Strict HTTP/1.1 request parsing (RFC 9112). See fd_http_parse.h.
 * Every rejection here closes the connection after the answer.
 */
#include <arpa/inet.h>

#include "fd_core.h"
#include "fd_http_parse.h"

/* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." /
 *         "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
const uint8_t fd_http_tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
    ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
    ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1,
    ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
    ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1,
    ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
    ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1,
    ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

/*
 * Byte classes for the per-byte checks of the request line and header
 * values: one table load per byte instead of a chain of compares (and, for
 * Host, a strchr() per punctuation byte). Filled once at startup.
 */
enum {
    CH_REG = 0x1,        /* reg-name bytes but '%': unreserved, sub-delims */
    CH_TARGET_BAD = 0x2, /* not in a request target: CTLs, SP, DEL, '#' */
    CH_VALUE_BAD = 0x4,  /* not in a field value: CTLs but HTAB, DEL */
    CH_PATH_SLOW = 0x8,  /* the path fast path stops: '%', NUL, '/' */
    CH_TARGET_NOTE = 0x10 /* a target byte parse_request_line looks at:
                           * '?', '%', '/' */
};
static uint8_t ch_class[256];

__attribute__((constructor)) static void ch_class_init(void)
{
    static const char reg_punct[] = "-._~!$&'()*+,;=";
    unsigned c;

    for (c = 0; c < 256; c++) {
        uint8_t k = 0;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || (c && strchr(reg_punct, (int)c)))
            k |= CH_REG;
        if (c <= 0x20 || c == 0x7f || c == '#')
            k |= CH_TARGET_BAD;
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            k |= CH_VALUE_BAD;
        if (c == '%' || c == '\0' || c == '/')
            k |= CH_PATH_SLOW;
        if (c == '?' || c == '%' || c == '/')
            k |= CH_TARGET_NOTE;
        ch_class[c] = k;
    }
}

/* A field value has no CTL but HTAB and no DEL. 8 bytes at a time: a
 * word with any byte < 0x20 or == 0x7f gets the exact per-byte check. */
static inline int value_valid(const char *v, size_t n)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, v + i, 8);
        y = x ^ 0x7f7f7f7f7f7f7f7fULL;
        if ((((x - 0x2020202020202020ULL) & ~x)
             | ((y - 0x0101010101010101ULL) & ~y)) & 0x8080808080808080ULL)
            for (size_t j = i; j < i + 8; j++)
                if (ch_class[(uint8_t)v[j]] & CH_VALUE_BAD)
                    return 0;
    }
    for (; i + 4 <= n; i += 4)
        if ((ch_class[(uint8_t)v[i]] | ch_class[(uint8_t)v[i + 1]] |
             ch_class[(uint8_t)v[i + 2]] | ch_class[(uint8_t)v[i + 3]]) &
            CH_VALUE_BAD)
            return 0;
    for (; i < n; i++)
        if (ch_class[(uint8_t)v[i]] & CH_VALUE_BAD)
            return 0;
    return 1;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* --- host --- */

/* IPv4address (RFC 3986 3.2.2): four dec-octets, none with a leading zero
 * (which inet_aton() and browsers would read as octal). */
static int ipv4_valid(const char *s, size_t n)
{
    unsigned parts = 0, v = 0, digits = 0;
    size_t i;

    for (i = 0; i <= n; i++) {
        if (i == n || s[i] == '.') {
            if (digits == 0 || (digits > 1 && s[i - digits] == '0') ||
                v > 255)
                return 0;
            parts++;
            v = digits = 0;
        } else if (s[i] >= '0' && s[i] <= '9' && ++digits <= 3) {
            v = v * 10 + (unsigned)(s[i] - '0');
        } else {
            return 0;
        }
    }
    return parts == 4;
}

/*
 * Does the name's last label read as a number (decimal, or 0x and hex)?
 * The WHATWG URL parser then takes the whole name as an IPv4 address in
 * one of its loose forms ("127.1", "0x7f.1", "2130706433"): a backend
 * would route such a name to a different place than we did.
 */
static int ends_in_number(const char *s, size_t n)
{
    size_t i = n, k;

    while (i > 0 && s[i - 1] != '.')
        i--;
    if (n - i >= 2 && s[i] == '0' && (s[i + 1] | 0x20) == 'x') {
        for (k = i + 2; k < n && hexval((uint8_t)s[k]) >= 0; k++)
            ;
        return k == n;
    }
    for (k = i; k < n && s[k] >= '0' && s[k] <= '9'; k++)
        ;
    return k == n;
}

/* What is between "[" and "]": IPv6address, or
 * IPvFuture = "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" ). */
static int ip_literal_valid(const char *s, size_t n)
{
    char a[INET6_ADDRSTRLEN];
    struct in6_addr in6;
    size_t i;

    if (n > 0 && (s[0] | 0x20) == 'v') {
        for (i = 1; i < n && hexval((uint8_t)s[i]) >= 0; i++)
            ;
        if (i == 1 || i + 1 >= n || s[i] != '.')
            return 0;
        for (i++; i < n; i++)
            if (!(ch_class[(uint8_t)s[i]] & CH_REG) && s[i] != ':')
                return 0;
        return 1;
    }
    /* no zone ("%25eth0", RFC 6874): it means nothing past this host */
    if (n == 0 || n >= sizeof(a))
        return 0;
    memcpy(a, s, n);
    a[n] = '\0';
    return inet_pton(AF_INET6, a, &in6) == 1;
}

int fd_http_parse_host(fd_str_t in, fd_str_t *out, fd_pool_t *pool)
{
    const char *s = in.data, *e = s + in.len, *h, *port;
    size_t hl, label = 0, plen = 0;
    unsigned v = 0;
    int dot = 0;

    if (in.len == 0)
        return 400;
    if (s[0] == '[') {
        h = memchr(s, ']', in.len);
        if (h == NULL || !ip_literal_valid(s + 1, (size_t)(h - s - 1)))
            return 400;
        hl = (size_t)(++h - s);
    } else {
        /* reg-name without pct-encoded (a name that needs decoding before
         * it can be compared is refused, as nginx does), and no empty
         * label but for one trailing dot */
        for (h = s; h < e && (ch_class[(uint8_t)*h] & CH_REG); h++) {
            if (*h != '.')
                label++;
            else if (label == 0)
                return 400; /* a leading dot, or ".." */
            else
                label = 0;
        }
        hl = (size_t)(h - s);
        if (hl == 0)
            return 400;
        if (label == 0) {
            dot = 1; /* the absolute name "a.example." is "a.example" */
            hl--;
        }
        if (ends_in_number(s, hl) && !ipv4_valid(s, hl))
            return 400;
    }
    port = h;
    if (port < e) {
        /* port = *DIGIT: at most 5 digits, at most 65535; an empty one is
         * dropped (RFC 3986 6.2.3) */
        if (*port++ != ':' || (plen = (size_t)(e - port)) > 5)
            return 400;
        for (h = port; h < e; h++) {
            if (*h < '0' || *h > '9')
                return 400;
            v = v * 10 + (unsigned)(*h - '0');
        }
        if (v > 65535)
            return 400;
    }
    if (plen == 0) {
        *out = (fd_str_t){hl, s}; /* a prefix of the value */
    } else if (!dot) {
        *out = in;
    } else {
        /* "a.example.:80": the one case that is no slice of the input */
        fd_sbuf_t sb;
        if (fd_sbuf_init(&sb, pool, hl + 1 + plen) != FD_OK)
            return 500;
        fd_sbuf_add(&sb, s, hl);
        fd_sbuf_addc(&sb, ':');
        fd_sbuf_add(&sb, port, plen);
        if (fd_sbuf_failed(&sb))
            return 500;
        *out = fd_sbuf_str(&sb);
    }
    return FD_OK;
}

/* TE parsing state kept in bits we do not expose */
#define TE_CHUNKED_LAST 0x1
#define TE_OTHER 0x2
#define TE_CHUNKED_TWICE 0x4
#define TE_CHUNKED_SEEN 0x8

void fd_http_parse_init(fd_http_req_t *p, fd_pool_t *pool,
                        size_t max_header_size, unsigned max_headers)
{
    memset(p, 0, sizeof(*p));
    fd_http_parse_init_zeroed(p, pool, max_header_size, max_headers);
}

static int parse_method(fd_http_req_t *p, const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > 32)
        return n > 32 ? 501 : 400;
    for (i = 0; i < n; i++)
        if (!fd_http_tchar[(uint8_t)s[i]])
            return 400;
    p->method.data = s;
    p->method.len = n;
    switch (n) {
    case 3:
        if (memcmp(s, "GET", 3) == 0)
            p->method_id = FD_HTTP_GET;
        else if (memcmp(s, "PUT", 3) == 0)
            p->method_id = FD_HTTP_PUT;
        break;
    case 4:
        if (memcmp(s, "HEAD", 4) == 0)
            p->method_id = FD_HTTP_HEAD;
        else if (memcmp(s, "POST", 4) == 0)
            p->method_id = FD_HTTP_POST;
        break;
    case 5:
        if (memcmp(s, "PATCH", 5) == 0)
            p->method_id = FD_HTTP_PATCH;
        else if (memcmp(s, "TRACE", 5) == 0)
            p->method_id = FD_HTTP_TRACE;
        break;
    case 6:
        if (memcmp(s, "DELETE", 6) == 0)
            p->method_id = FD_HTTP_DELETE;
        break;
    case 7:
        if (memcmp(s, "OPTIONS", 7) == 0)
            p->method_id = FD_HTTP_OPTIONS;
        else if (memcmp(s, "CONNECT", 7) == 0)
            p->method_id = FD_HTTP_CONNECT;
        break;
    }
    return FD_OK;
}

/*
 * The request target s[0..n), its bytes already checked by the caller,
 * which also found its first '?' (q, or NULL) and whether the path before
 * it is plain (no '%', "//" or "/.").
 */
static int parse_target(fd_http_req_t *p, const char *s, size_t n,
                        const char *q, int plain)
{
    if (n == 0)
        return 400;
    p->target.data = s;
    p->target.len = n;
    if (s[0] == '/') {
        /* origin-form */
        p->path_plain = plain;
    } else if (n == 1 && s[0] == '*') {
        if (p->method_id != FD_HTTP_OPTIONS)
            return 400;
    } else if (n > 7 && (strncasecmp(s, "http://", 7) == 0 ||
                         (n > 8 && strncasecmp(s, "https://", 8) == 0))) {
        /* absolute-form: the authority replaces Host. It ends at the
         * first '/' or '?' (q, the target's first '?', is past a '/' or
         * ends the authority); userinfo has an '@', which no host has */
        const char *h = s + (s[4] == ':' ? 7 : 8), *e = s + n, *end;
        int rc;
        end = memchr(h, '/', (size_t)(e - h));
        if (end == NULL || (q && q < end))
            end = q ? q : e;
        if ((rc = fd_http_parse_host((fd_str_t){(size_t)(end - h), h},
                                     &p->host, p->pool)) != FD_OK)
            return rc;
        p->host_seen = 1;
        p->host_from_target = 1;
        if (end == e || *end == '?') {
            /* no path: it is "/" (RFC 9112 3.2.2), the query stays */
            p->path_raw = fd_string("/");
            if (q) {
                p->query.data = q + 1;
                p->query.len = (size_t)(e - q - 1);
            }
            return FD_OK;
        }
        s = end;
        n = (size_t)(e - end);
    } else if (p->method_id == FD_HTTP_CONNECT) {
        /* authority-form: accepted by the parser, refused by the engine */
    } else {
        return 400;
    }
    p->path_raw.data = s;
    p->path_raw.len = q ? (size_t)(q - s) : n;
    if (q) {
        p->query.data = q + 1;
        p->query.len = n - p->path_raw.len - 1;
    }
    return FD_OK;
}

/*
 * method SP request-target SP HTTP-version, in s[0..n); s[n] is the line's
 * CR. The target is scanned once: its bytes checked, its end (the second
 * SP), its first '?' and whether its path needs normalising.
 */
static int parse_request_line(fd_http_req_t *p, const char *s, size_t n)
{
    const char *sp1, *t, *q = NULL, *v;
    size_t j;
    int rc, plain = 1;

    sp1 = memchr(s, ' ', n);
    if (sp1 == NULL)
        return 400;
    if ((rc = parse_method(p, s, (size_t)(sp1 - s))) != FD_OK)
        return rc;
    t = sp1 + 1;
    /* the CR at s[n] is CH_TARGET_BAD: the scan ends inside the line */
    for (j = 0;; j++) {
        uint8_t k = ch_class[(uint8_t)t[j]];
        if (fd_likely(!(k & (CH_TARGET_BAD | CH_TARGET_NOTE))))
            continue;
        if (k & CH_TARGET_BAD)
            break;
        if (q)
            continue; /* the query: not part of the path */
        if (t[j] == '?')
            q = t + j;
        else if (t[j] == '%' || t[j + 1] == '/' || t[j + 1] == '.')
            plain = 0; /* an escape, "//" or "/." */
    }
    if (t + j >= s + n || t[j] != ' ')
        return 400; /* no version (HTTP/0.9), or a bad byte in the target */
    if ((rc = parse_target(p, t, j, q, plain)) != FD_OK)
        return rc;
    v = t + j + 1;
    if ((size_t)(s + n - v) != 8 || memcmp(v, "HTTP/", 5) != 0 ||
        v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9')
        return 400;
    if (v[5] != '1')
        return v[5] == '0' ? 400 : 505;
    p->version = 10 + (v[7] - '0');
    if (p->version > 11)
        p->version = 11; /* HTTP/1.x, x > 1: answer as 1.1 (RFC 9110) */
    return FD_OK;
}

/* Walk a comma-separated list; calls fn for each trimmed element. */
#define LIST_EACH(val, el, body)                                             \
    do {                                                                     \
        const char *_s = (val).data, *_e = _s + (val).len;                   \
        while (_s < _e) {                                                    \
            const char *_c = memchr(_s, ',', (size_t)(_e - _s));             \
            const char *_x = _c ? _c : _e;                                   \
            fd_str_t el;                                                     \
            while (_s < _x && (*_s == ' ' || *_s == '\t'))                   \
                _s++;                                                        \
            el.data = _s;                                                    \
            el.len = (size_t)(_x - _s);                                      \
            while (el.len && (el.data[el.len - 1] == ' ' ||                  \
                              el.data[el.len - 1] == '\t'))                  \
                el.len--;                                                    \
            body;                                                            \
            _s = _x + 1;                                                     \
        }                                                                    \
    } while (0)

static int index_header(fd_http_req_t *p, fd_str_t name, fd_str_t value)
{
    switch (name.len) {
    case 4:
        if (fd_str_caseeq_lit(name, "host")) {
            if (++p->host_headers > 1)
                return 400; /* two Host fields */
            if (value.len) {
                /* checked even when the absolute-form authority wins
                 * (RFC 9112 3.2.2), as nginx does */
                fd_str_t h;
                int rc = fd_http_parse_host(value, &h, p->pool);
                if (rc != FD_OK)
                    return rc;
                if (!p->host_from_target)
                    p->host = h;
            } else if (p->version == 11) {
                return 400;
            }
            p->host_seen = 1;
        }
        break;
    case 5:
        if (fd_str_caseeq_lit(name, "range"))
            p->range = value;
        break;
    case 6:
        if (fd_str_caseeq_lit(name, "expect")) {
            if (!fd_str_caseeq_lit(value, "100-continue"))
                return 417;
            p->expect = value;
            p->expect_continue = 1;
        }
        break;
    case 7:
        if (fd_str_caseeq_lit(name, "upgrade"))
            p->upgrade = value;
        else if (fd_str_caseeq_lit(name, "referer"))
            p->referer = value;
        break;
    case 8:
        if (fd_str_caseeq_lit(name, "if-match"))
            p->preconditions = 1;
        break;
    case 10:
        if (fd_str_caseeq_lit(name, "connection")) {
            p->connection = value;
            LIST_EACH(value, el, {
                if (fd_str_caseeq_lit(el, "close"))
                    p->conn_close = 1;
                else if (fd_str_caseeq_lit(el, "keep-alive"))
                    p->conn_keepalive = 1;
                else if (fd_str_caseeq_lit(el, "upgrade"))
                    p->conn_upgrade = 1;
            });
        } else if (fd_str_caseeq_lit(name, "user-agent")) {
            p->user_agent = value;
        }
        break;
    case 12:
        if (fd_str_caseeq_lit(name, "content-type"))
            p->content_type = value;
        break;
    case 13:
        if (fd_str_caseeq_lit(name, "if-none-match"))
            p->if_none_match = value;
        break;
    case 14:
        if (fd_str_caseeq_lit(name, "content-length")) {
            int64_t v = 0;
            size_t i;
            if (p->content_length >= 0 || value.len == 0 || value.len > 18)
                return 400; /* duplicate, empty, or beyond 10^18 */
            for (i = 0; i < value.len; i++) {
                if (value.data[i] < '0' || value.data[i] > '9')
                    return 400;
                v = v * 10 + (value.data[i] - '0');
            }
            p->content_length = v;
        }
        break;
    case 15:
        if (fd_str_caseeq_lit(name, "accept-encoding"))
            p->accept_encoding = value;
        break;
    case 17:
        if (fd_str_caseeq_lit(name, "transfer-encoding")) {
            unsigned te = p->te_flags;
            p->te_seen = 1;
            LIST_EACH(value, el, {
                if (el.len == 0)
                    return 400;
                if (fd_str_caseeq_lit(el, "chunked")) {
                    if (te & TE_CHUNKED_SEEN)
                        te |= TE_CHUNKED_TWICE;
                    te |= TE_CHUNKED_SEEN | TE_CHUNKED_LAST;
                } else {
                    /* parameters: ';' and '=' with OWS / BWS, a space
                     * or a tab alike (RFC 9112 7.3): both are 501 */
                    for (size_t i = 0; i < el.len; i++)
                        if (!fd_http_tchar[(uint8_t)el.data[i]] &&
                            el.data[i] != ';' && el.data[i] != '=' &&
                            el.data[i] != ' ' && el.data[i] != '\t')
                            return 400;
                    te = (te & ~TE_CHUNKED_LAST) | TE_OTHER;
                }
            });
            p->te_flags = te;
        } else if (fd_str_caseeq_lit(name, "if-modified-since")) {
            p->if_modified_since = value;
        }
        break;
    case 19:
        if (fd_str_caseeq_lit(name, "if-unmodified-since"))
            p->preconditions = 1;
        break;
    }
    return FD_OK;
}

/* Store the field after the others (not counted yet: the caller does)
 * and index it: FD_OK, or the status index_header() or the limits give. */
static int field_add(fd_http_req_t *p, fd_str_t name, fd_str_t value)
{
    if (p->nheaders == p->headers_cap) {
        unsigned cap = p->headers_cap ? p->headers_cap * 2 : 16;
        fd_http_header_t *h;
        if (p->nheaders >= p->max_headers)
            return 431;
        h = fd_palloc(p->pool, cap * sizeof(*h));
        if (h == NULL)
            return 500;
        if (p->nheaders)
            memcpy(h, p->headers, p->nheaders * sizeof(*h));
        p->headers = h;
        p->headers_cap = cap;
    }
    if (p->nheaders >= p->max_headers)
        return 431;
    p->headers[p->nheaders].name = name;
    p->headers[p->nheaders].value = value;
    return index_header(p, name, value);
}

static int parse_header_line(fd_http_req_t *p, const char *s, size_t n)
{
    const char *colon, *v, *e;
    size_t i;
    fd_str_t name, value;
    int rc;

    if (s[0] == ' ' || s[0] == '\t')
        return 400; /* obs-fold */
    /* the name: tchar up to the colon (the line ends in CR, not a tchar,
     * so the scan stops inside it); whitespace before the colon is 400 */
    for (i = 0; fd_http_tchar[(uint8_t)s[i]]; i++)
        ;
    if (i == 0 || i >= n || s[i] != ':')
        return 400;
    colon = s + i;
    v = colon + 1;
    e = s + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    if (!value_valid(v, (size_t)(e - v)))
        return 400; /* NUL, bare CR, other controls */
    name.data = s;
    name.len = (size_t)(colon - s);
    value.data = v;
    value.len = (size_t)(e - v);
    if ((rc = field_add(p, name, value)) != FD_OK)
        return rc;
    p->nheaders++;
    return FD_OK;
}

/* --- HTTP/2 (fd_http2.c): the request's parts, decoded by HPACK --- */

int fd_http_req_method(fd_http_req_t *p, const char *s, size_t n)
{
    return parse_method(p, s, n);
}

/*
 * :path, origin-form ("/a?b") or "*" for OPTIONS. The bytes a target may
 * not hold are 400 here as on the request line (HPACK could carry a SP or
 * a CTL); the first '?' and whether the path is plain are found in the
 * same scan.
 */
int fd_http_req_path(fd_http_req_t *p, const char *s, size_t n)
{
    const char *q = NULL;
    int plain = 1;
    size_t j;

    if (n == 0 || (s[0] != '/' && !(n == 1 && s[0] == '*')))
        return 400;
    for (j = 0; j < n; j++) {
        uint8_t k = ch_class[(uint8_t)s[j]];
        if (fd_likely(!(k & (CH_TARGET_BAD | CH_TARGET_NOTE))))
            continue;
        if (k & CH_TARGET_BAD)
            return 400;
        if (q)
            continue;
        if (s[j] == '?')
            q = s + j;
        else if (s[j] == '%' ||
                 (j + 1 < n && (s[j + 1] == '/' || s[j + 1] == '.')))
            plain = 0;
    }
    return parse_target(p, s, n, q, plain);
}

/*
 * One regular header field (a copy the pool owns): stored and indexed as
 * a header line would be. HTTP/2 has no Transfer-Encoding, Connection or
 * Upgrade (nghttp2 refuses a request that carries one), so those are 400
 * here too, should they come.
 */
int fd_http_req_header(fd_http_req_t *p, fd_str_t name, fd_str_t value)
{
    int rc;

    if (!value_valid(value.data, value.len))
        return 400;
    if (fd_str_caseeq_lit(name, "transfer-encoding") ||
        fd_str_caseeq_lit(name, "connection") ||
        fd_str_caseeq_lit(name, "upgrade"))
        return 400;
    if ((rc = field_add(p, name, value)) != FD_OK)
        return rc;
    p->nheaders++;
    return FD_OK;
}

static int headers_done(fd_http_req_t *p)
{
    /* RFC 9112 3.2: an HTTP/1.1 request needs a Host field, even when
     * its target is in absolute-form (whose authority then wins) */
    if (p->version == 11 && p->host_headers == 0)
        return 400;
    if (p->te_seen) {
        unsigned te = p->te_flags;
        if (p->version == 10 || p->content_length >= 0)
            return 400;
        if (te & TE_CHUNKED_TWICE)
            return 400;
        if (!(te & TE_CHUNKED_LAST))
            return (te & TE_CHUNKED_SEEN) ? 400 : 501;
        if (te & TE_OTHER)
            return 501; /* gzip, chunked: we do not decode codings */
        p->chunked = 1;
    }
    return FD_OK;
}

int fd_http_parse_request(fd_http_req_t *p, const char *start, size_t len)
{
    p->start = start;
    for (;;) {
        size_t from = fd_max(p->line_start, p->scanned);
        const char *lf = memchr(start + from, '\n', len - from);
        const char *ls = start + p->line_start;
        size_t n;
        int rc;

        if (lf == NULL) {
            p->scanned = len;
            if (len >= p->max_header_size)
                return p->state == 0 ? 414 : 431;
            return FD_AGAIN;
        }
        if ((size_t)(lf - start) + 1 > p->max_header_size)
            return p->state == 0 ? 414 : 431;
        n = (size_t)(lf - ls);
        if (n == 0 || ls[n - 1] != '\r')
            return 400; /* bare LF */
        n--;
        p->line_start = (size_t)(lf - start) + 1;
        p->scanned = p->line_start;

        if (p->state == 0) {
            if (n == 0 && p->line_start <= 4)
                continue; /* RFC 9112 2.2: ignore a leading empty line */
            /* every byte of the line is checked there: the method as
             * tchar, the target against CH_TARGET_BAD (CR, NUL, ...),
             * the version byte for byte */
            if ((rc = parse_request_line(p, ls, n)) != FD_OK)
                return rc;
            p->state = 1;
            continue;
        }
        if (n == 0) {
            if ((rc = headers_done(p)) != FD_OK)
                return rc;
            p->state = 2;
            p->header_len = p->line_start;
            return FD_OK;
        }
        if ((rc = parse_header_line(p, ls, n)) != FD_OK)
            return rc;
    }
}

/* --- chunked --- */

enum {
    CK_SIZE = 0,
    CK_EXT,
    CK_SIZE_LF,
    CK_DATA = FD_HTTP_CK_DATA,
    CK_DATA_CR,
    CK_DATA_LF,
    CK_TRAILER,
    CK_TRAILER_LINE,
    CK_TRAILER_LF,
    CK_FINAL_LF,
    CK_DONE
};

int fd_http_parse_chunked(fd_http_chunked_t *ck, const char **pos,
                          const char *last, const char **data, size_t *len)
{
    const char *p = *pos;
    int h;

    *data = NULL;
    *len = 0;
    while (p < last) {
        uint8_t c = (uint8_t)*p;
        switch (ck->state) {
        case CK_SIZE:
            if ((h = hexval(c)) >= 0) {
                if (ck->size_digits >= 15)
                    return 400; /* over 2^60: overflow or absurd */
                ck->size = ck->size * 16 + (uint64_t)h;
                ck->size_digits++;
                p++;
                break;
            }
            if (ck->size_digits == 0)
                return 400;
            if (c == ';' || c == ' ' || c == '\t') {
                ck->state = CK_EXT;
                p++;
                break;
            }
            if (c != '\r')
                return 400;
            ck->state = CK_SIZE_LF;
            p++;
            break;
        case CK_EXT:
            /* chunk extensions are read and ignored, with a bound */
            if (c == '\r') {
                ck->state = CK_SIZE_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f ||
                       ++ck->ext_len > 4096) {
                return 400;
            }
            p++;
            break;
        case CK_SIZE_LF:
            if (c != '\n')
                return 400;
            p++;
            ck->ext_len = 0;
            ck->size_digits = 0;
            ck->state = ck->size ? CK_DATA : CK_TRAILER;
            break;
        case CK_DATA: {
            size_t n = (size_t)fd_min((uint64_t)(last - p), ck->size);
            *data = p;
            *len = n;
            p += n;
            ck->size -= n;
            if (ck->size == 0)
                ck->state = CK_DATA_CR;
            *pos = p;
            return FD_OK;
        }
        case CK_DATA_CR:
            if (c != '\r')
                return 400;
            ck->state = CK_DATA_LF;
            p++;
            break;
        case CK_DATA_LF:
            if (c != '\n')
                return 400;
            ck->state = CK_SIZE;
            p++;
            break;
        case CK_TRAILER:
            if (c == '\r') {
                ck->state = CK_FINAL_LF;
                p++;
                break;
            }
            ck->state = CK_TRAILER_LINE;
            /* fall through */
        case CK_TRAILER_LINE:
            if (c == '\r') {
                ck->state = CK_TRAILER_LF;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f ||
                       ++ck->trailer_len > 8192) {
                return 400;
            }
            p++;
            break;
        case CK_TRAILER_LF:
            if (c != '\n')
                return 400;
            ck->state = CK_TRAILER;
            p++;
            break;
        case CK_FINAL_LF:
            if (c != '\n')
                return 400;
            p++;
            ck->state = CK_DONE;
            *pos = p;
            return FD_DONE;
        case CK_DONE:
            *pos = p;
            return FD_DONE;
        }
    }
    *pos = p;
    return ck->state == CK_DONE ? FD_DONE : FD_AGAIN;
}

/* --- path --- */

int fd_http_normalize_path(fd_str_t src, char *dst, size_t *dst_len)
{
    const char *s = src.data, *e = src.data + src.len;
    char *d = dst;

    if (src.len == 0 || s[0] != '/')
        return FD_ERROR;
    {
        /* fast path: no escapes, no "//", "/." or NUL: copy as is */
        size_t i;
        for (i = 0; i < src.len; i++) {
            char ch = s[i];
            if ((ch_class[(uint8_t)ch] & CH_PATH_SLOW) &&
                (ch != '/' || (i + 1 < src.len &&
                               (s[i + 1] == '/' || s[i + 1] == '.'))))
                break;
        }
        if (i == src.len) {
            memcpy(dst, s, src.len);
            dst[src.len] = '\0';
            *dst_len = src.len;
            return FD_OK;
        }
    }
    /* decode first, then resolve segments: an encoded "/" or "." cannot
     * smuggle a ".." past the check */
    while (s < e) {
        char ch = *s++;
        if (ch == '%') {
            int hi, lo;
            if (e - s < 2 || (hi = hexval((uint8_t)s[0])) < 0 ||
                (lo = hexval((uint8_t)s[1])) < 0)
                return FD_ERROR;
            ch = (char)(hi * 16 + lo);
            s += 2;
        }
        if (ch == '\0')
            return FD_ERROR;
        *d++ = ch;
    }
    *d = '\0';
    {
        /* in place: segments */
        char *r = dst, *w = dst, *end = d;
        while (r < end) {
            char *seg, *next;
            size_t n;
            while (r < end && *r == '/')
                r++;
            seg = r;
            next = memchr(r, '/', (size_t)(end - r));
            if (next == NULL)
                next = end;
            n = (size_t)(next - seg);
            r = next;
            if (n == 0)
                break;
            if (n == 1 && seg[0] == '.')
                continue;
            if (n == 2 && seg[0] == '.' && seg[1] == '.') {
                if (w == dst)
                    return FD_ERROR; /* escapes the root */
                while (w > dst && w[-1] != '/')
                    w--;
                if (w > dst)
                    w--;
                continue;
            }
            *w++ = '/';
            memmove(w, seg, n);
            w += n;
        }
        /* keep a trailing slash: it means "directory" */
        if (w == dst || (end > dst && end[-1] == '/') ||
            (end - dst >= 2 && end[-1] == '.' && end[-2] == '/') ||
            (end - dst >= 3 && end[-1] == '.' && end[-2] == '.' &&
             end[-3] == '/'))
            *w++ = '/';
        *w = '\0';
        *dst_len = (size_t)(w - dst);
    }
    return FD_OK;
}

/*
 * Move every slice that points into [from, from + len) to the same place
 * in to (the header was copied there), so the buffer it came from can be
 * reused while the request lives on.
 */
/* Every slice of p's own fields (the header fields' are in p->headers) */
static unsigned req_slices(fd_http_req_t *p, fd_str_t **s)
{
    fd_str_t *all[] = {
        &p->method, &p->target, &p->path_raw, &p->query, &p->host,
        &p->connection, &p->upgrade, &p->expect, &p->if_modified_since,
        &p->if_none_match, &p->range, &p->accept_encoding, &p->user_agent,
        &p->referer, &p->content_type,
    };

    memcpy(s, all, sizeof(all));
    return fd_nelems(all);
}

#define REQ_SLICES_MAX 16

void fd_http_req_rebase(fd_http_req_t *p, const char *from, size_t len,
                        const char *to)
{
    fd_str_t *s[REQ_SLICES_MAX];
    unsigned i, n = req_slices(p, s);

#define REBASE(str)                                                          \
    do {                                                                     \
        if ((str)->data >= from && (str)->data < from + len)                 \
            (str)->data = to + ((str)->data - from);                         \
    } while (0)
    for (i = 0; i < n; i++)
        REBASE(s[i]);
    for (i = 0; i < p->nheaders; i++) {
        REBASE(&p->headers[i].name);
        REBASE(&p->headers[i].value);
    }
#undef REBASE
    if (p->start >= from && p->start < from + len)
        p->start = to + (p->start - from);
}

int fd_http_req_copy(fd_http_req_t *p, const fd_http_req_t *src,
                     fd_pool_t *pool)
{
    fd_str_t *s[REQ_SLICES_MAX];
    fd_http_header_t *hs;
    unsigned i, n;
    size_t len = 0;
    char *to;

    *p = *src;
    p->pool = pool;
    p->start = NULL; /* no raw header: its bytes are src's */
    n = req_slices(p, s);
    for (i = 0; i < n; i++)
        len += s[i]->len;
    for (i = 0; i < p->nheaders; i++)
        len += p->headers[i].name.len + p->headers[i].value.len;
    hs = fd_palloc(pool, (p->nheaders + 1) * sizeof(*hs));
    to = fd_pnalloc(pool, len + 1);
    if (hs == NULL || to == NULL)
        return FD_ERROR;
    memcpy(hs, src->headers, p->nheaders * sizeof(*hs));
    p->headers = hs;
    p->headers_cap = p->nheaders;

#define COPY(str)                                                            \
    do {                                                                     \
        if ((str)->len) {                                                    \
            memcpy(to, (str)->data, (str)->len);                             \
            (str)->data = to;                                                \
            to += (str)->len;                                                \
        }                                                                    \
    } while (0)
    for (i = 0; i < n; i++)
        COPY(s[i]);
    for (i = 0; i < p->nheaders; i++) {
        COPY(&hs[i].name);
        COPY(&hs[i].value);
    }
#undef COPY
    return FD_OK;
}

/* --- response ---------------------------------------------------------- */

int fd_http_parse_response_end(const char *buf, size_t len, size_t *scan,
                               size_t *hlen, const char **err)
{
    /* each LF must follow a CR; the header ends at the first CRLF that
     * follows one. One memchr() per line: the header is a few lines */
    const char *p = buf + *scan, *end = buf + len;

    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        if (p == buf || p[-1] != '\r') {
            *err = "sent a bare LF in the header";
            return FD_ERROR;
        }
        if (end - p < 3) {
            /* what follows this line end is not all here: look again */
            *scan = (size_t)(p - buf);
            return FD_AGAIN;
        }
        if (p[1] == '\r' && p[2] == '\n') {
            *scan = 0;
            *hlen = (size_t)(p + 3 - buf);
            return FD_OK;
        }
        p++;
    }
    *scan = len;
    return FD_AGAIN;
}

void fd_http_tokens(fd_str_t v, fd_str_t *tok, unsigned *n, unsigned max)
{
    size_t k = 0;

    while (k < v.len && *n < max) {
        size_t s;
        while (k < v.len &&
               (v.data[k] == ',' || v.data[k] == ' ' || v.data[k] == '\t'))
            k++;
        s = k;
        while (k < v.len && v.data[k] != ',' && v.data[k] != ' ' &&
               v.data[k] != '\t')
            k++;
        if (k > s)
            tok[(*n)++] = (fd_str_t){k - s, v.data + s};
    }
}

/* Content-Length, Transfer-Encoding, Connection, Upgrade. */
static int resp_framing(fd_http_resp_t *rs, const char **err)
{
    unsigned i, k, from;
    int te = 0;

    for (i = 0; i < rs->nfields; i++) {
        fd_str_t n = rs->fields[i].name, v = rs->fields[i].value;
        if (fd_str_caseeq_lit(n, "content-length")) {
            int64_t x = 0;
            if (v.len == 0 || v.len > 18) {
                *err = "sent an invalid Content-Length";
                return FD_ERROR;
            }
            for (k = 0; k < v.len; k++) {
                if (v.data[k] < '0' || v.data[k] > '9') {
                    *err = "sent an invalid Content-Length";
                    return FD_ERROR;
                }
                x = x * 10 + (v.data[k] - '0');
            }
            if (rs->content_length >= 0 && rs->content_length != x) {
                *err = "sent two different Content-Length";
                return FD_ERROR;
            }
            rs->content_length = x;
        } else if (fd_str_caseeq_lit(n, "transfer-encoding")) {
            /* chunked alone, once: the only coding the engine can frame
             * again (gzip, chunked would reach the client without its
             * gzip) */
            if (te || !fd_str_caseeq(v, "chunked", 7)) {
                *err = "sent a Transfer-Encoding other than chunked";
                return FD_ERROR;
            }
            te = 1;
            rs->chunked = 1;
        } else if (fd_str_caseeq_lit(n, "connection")) {
            from = rs->ntok;
            fd_http_tokens(v, rs->conn_tok, &rs->ntok,
                           FD_HTTP_RESP_MAX_TOKENS);
            for (k = from; k < rs->ntok; k++) {
                if (fd_str_caseeq(rs->conn_tok[k], "close", 5))
                    rs->conn_close = 1;
                else if (fd_str_caseeq(rs->conn_tok[k], "keep-alive", 10))
                    rs->conn_keepalive = 1;
            }
        } else if (fd_str_caseeq_lit(n, "upgrade")) {
            rs->upgrade = v;
        }
    }
    if (te && rs->content_length >= 0) {
        *err = "sent both Content-Length and Transfer-Encoding";
        return FD_ERROR;
    }
    return FD_OK;
}

int fd_http_parse_response(fd_http_resp_t *rs, const char *h, size_t hlen,
                           const char **err)
{
    const char *p, *eol, *end;

    rs->nfields = 0;
    rs->version = 0;
    rs->status = 0;
    rs->content_length = -1;
    rs->chunked = rs->conn_close = rs->conn_keepalive = 0;
    rs->ntok = 0;
    rs->upgrade = (fd_str_t){0, NULL};

    if (hlen < 4 || memcmp(h + hlen - 4, "\r\n\r\n", 4) != 0) {
        *err = "sent an incomplete header";
        return FD_ERROR;
    }
    end = h + hlen - 2;

    /* status line: HTTP/1.x SP 3DIGIT [SP reason] CRLF */
    eol = memchr(h, '\n', (size_t)(end - h));
    if (eol == NULL || eol - h < 13 || eol[-1] != '\r' ||
        memcmp(h, "HTTP/1.", 7) != 0 || (h[7] != '0' && h[7] != '1') ||
        h[8] != ' ' || h[9] < '1' || h[9] > '5' || h[10] < '0' ||
        h[10] > '9' || h[11] < '0' || h[11] > '9' ||
        (h[12] != ' ' && h[12] != '\r')) {
        *err = "sent an invalid status line";
        return FD_ERROR;
    }
    if (!value_valid(h + 12, (size_t)(eol - 1 - (h + 12)))) {
        *err = "sent an invalid status line";
        return FD_ERROR;
    }
    rs->version = h[7] == '1' ? 11 : 10;
    rs->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');

    for (p = eol + 1; p < end; p = eol + 1) {
        const char *colon, *v, *ve;
        eol = memchr(p, '\n', (size_t)(end - p) + 1);
        if (eol == NULL || eol == p || eol[-1] != '\r') {
            *err = "sent a bare LF in the header";
            return FD_ERROR;
        }
        if (*p == ' ' || *p == '\t') {
            *err = "sent an obsolete folded header line";
            return FD_ERROR;
        }
        /* the line ends in CR, not a tchar: the scan stops by itself */
        for (colon = p; fd_http_tchar[(uint8_t)*colon]; colon++)
            ;
        if (colon == p || *colon != ':') {
            *err = "sent an invalid header name";
            return FD_ERROR;
        }
        /* the line ends in CR: both loops stop before the LF */
        for (v = colon + 1; *v == ' ' || *v == '\t'; v++)
            ;
        for (ve = eol - 1; ve > v && (ve[-1] == ' ' || ve[-1] == '\t'); ve--)
            ;
        if (!value_valid(v, (size_t)(ve - v))) {
            *err = "sent a control character in a header";
            return FD_ERROR;
        }
        if (rs->nfields == rs->max_fields) {
            *err = "sent too many header lines";
            return FD_ERROR;
        }
        rs->fields[rs->nfields].name = (fd_str_t){(size_t)(colon - p), p};
        rs->fields[rs->nfields].value = (fd_str_t){(size_t)(ve - v), v};
        rs->nfields++;
    }

    if (rs->status < 200 && rs->status != 101)
        return FD_OK; /* interim: no body, its framing fields mean nothing */
    return resp_framing(rs, err);
}
