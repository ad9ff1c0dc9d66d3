#ifndef FD_HTTP_PARSE_H
#define FD_HTTP_PARSE_H

/*
 * Strict incremental HTTP/1.1 request parser (RFC 9112).
 *
 * The parser works a line at a time: it looks for the next LF with memchr
 * from where the last call stopped, so no byte is scanned twice and a call
 * can resume after any split of the input. Slices point into the caller's
 * buffer, which must not move while a request is being parsed (restart
 * with fd_http_parse_init() after moving it).
 */

enum {
    FD_HTTP_UNKNOWN = 0,
    FD_HTTP_GET,
    FD_HTTP_HEAD,
    FD_HTTP_POST,
    FD_HTTP_PUT,
    FD_HTTP_DELETE,
    FD_HTTP_OPTIONS,
    FD_HTTP_PATCH,
    FD_HTTP_TRACE,
    FD_HTTP_CONNECT
};

typedef struct {
    fd_str_t name;
    fd_str_t value;
} fd_http_header_t;

typedef struct {
    /* request line */
    fd_str_t method;
    int method_id;
    fd_str_t target;          /* raw request-target */
    fd_str_t path_raw;        /* target up to '?', still percent-encoded */
    fd_str_t query;           /* after '?', without it */
    int version;              /* 10, 11, or 20 (HTTP/2) */

    fd_http_header_t *headers;
    unsigned nheaders;
    unsigned headers_cap;

    /* indexed while parsing */
    fd_str_t host;            /* the absolute-form authority, else Host:
                               * valid and normal (fd_http_parse_host) */
    fd_str_t connection;
    fd_str_t upgrade;
    fd_str_t expect;
    fd_str_t if_modified_since;
    fd_str_t if_none_match;
    fd_str_t range;
    fd_str_t accept_encoding;
    fd_str_t user_agent;
    fd_str_t referer;
    fd_str_t content_type;
    int64_t content_length;   /* -1: none */
    unsigned chunked:1;       /* Transfer-Encoding ends in chunked */
    unsigned te_seen:1;
    unsigned conn_close:1;
    unsigned conn_keepalive:1;
    unsigned conn_upgrade:1;
    unsigned expect_continue:1;
    unsigned host_seen:1;
    unsigned host_from_target:1;
    unsigned path_plain:1;    /* path_raw is already normal: no '%', "//",
                               * "/." (fd_http_normalize_path copies it) */
    unsigned preconditions:1; /* If-Match or If-Unmodified-Since came (a
                               * file's response looks them up) */
    unsigned ext_connect:1;   /* HTTP/2's extended CONNECT with :protocol
                               * websocket (RFC 8441), made a GET with
                               * Upgrade: websocket for a handler that
                               * tunnels (FD_MODULE_TUNNEL) */
    unsigned host_headers;
    unsigned te_flags;

    /* parser state */
    unsigned state;           /* 0 request line, 1 headers, 2 done */
    size_t line_start;        /* offset from the request start */
    size_t scanned;           /* offset up to which no LF was found */
    size_t header_len;        /* bytes of request line + headers when done */
    const char *start;        /* request start in the buffer */
    size_t max_header_size;
    unsigned max_headers;
    fd_pool_t *pool;
} fd_http_req_t;

void fd_http_parse_init(fd_http_req_t *p, fd_pool_t *pool,
                        size_t max_header_size, unsigned max_headers);
/* The same for a p that is all zero already (a fresh fd_pcalloc()). */
static inline void fd_http_parse_init_zeroed(fd_http_req_t *p, fd_pool_t *pool,
                                             size_t max_header_size,
                                             unsigned max_headers)
{
    p->content_length = -1;
    p->pool = pool;
    p->max_header_size = max_header_size;
    p->max_headers = max_headers;
}
/*
 * Parse [start, start + len): FD_OK when the header section is complete
 * (p->header_len bytes), FD_AGAIN when more input is needed, or an HTTP
 * status: 400, 414, 431, 501, 505.
 */
int fd_http_parse_request(fd_http_req_t *p, const char *start, size_t len);

/*
 * HTTP/2 requests (fd_http2.c) come as decoded fields, not lines: the
 * method, the :path (origin-form, or "*") and each regular field, whose
 * bytes the caller keeps (the request's pool). FD_OK or an HTTP status,
 * as fd_http_parse_request() would answer the same request.
 */
int fd_http_req_method(fd_http_req_t *p, const char *s, size_t n);
int fd_http_req_path(fd_http_req_t *p, const char *s, size_t n);
int fd_http_req_header(fd_http_req_t *p, fd_str_t name, fd_str_t value);

/* Re-point slices from a copy of the header at from..from+len to to. */
void fd_http_req_rebase(fd_http_req_t *p, const char *from, size_t len,
                        const char *to);
/* p becomes a copy of src whose slices (its own and its header fields')
 * are all in pool: FD_OK, or FD_ERROR out of memory. No raw header
 * (p->start is NULL). */
int fd_http_req_copy(fd_http_req_t *p, const fd_http_req_t *src,
                     fd_pool_t *pool);

/* Chunked transfer coding decoder, resumable at any byte. */
#define FD_HTTP_CK_DATA 3 /* state: inside chunk data (size bytes left) */
typedef struct {
    unsigned state;
    uint64_t size;            /* bytes left in the current chunk */
    unsigned ext_len;
    unsigned trailer_len;
    unsigned size_digits;
} fd_http_chunked_t;

/*
 * Decode from *pos up to last. FD_OK with a body slice in (*data, *len)
 * (may be 0 bytes when only framing was consumed), FD_AGAIN when the input
 * is used up, FD_DONE after the last chunk and trailers, or 400 on a
 * framing error. *pos advances over what was consumed.
 */
int fd_http_parse_chunked(fd_http_chunked_t *ck, const char **pos,
                          const char *last, const char **data, size_t *len);

/* Add the tokens of a list value such as Connection's (split at ',', SP
 * and HTAB, empty ones skipped) to tok[*n], up to max in all. */
void fd_http_tokens(fd_str_t v, fd_str_t *tok, unsigned *n, unsigned max);

/*
 * Upstream response header (RFC 9112), parsed whole once its blank line
 * arrived. The caller sets fields and max_fields; the rest is filled in.
 * Slices point into the header, which must outlive them.
 */
#define FD_HTTP_RESP_MAX_TOKENS 16
typedef struct {
    fd_http_header_t *fields; /* the caller's array */
    unsigned max_fields;      /* more fields is an error */
    unsigned nfields;
    int version;              /* 10 or 11 */
    int status;               /* 100..599 */
    /* framing, left unset for an interim 1xx (not 101): it has no body */
    int64_t content_length;   /* -1: none */
    unsigned chunked:1;       /* Transfer-Encoding: chunked */
    unsigned conn_close:1;
    unsigned conn_keepalive:1;
    /* tokens of every Connection field (names of hop-by-hop fields),
     * the first FD_HTTP_RESP_MAX_TOKENS */
    fd_str_t conn_tok[FD_HTTP_RESP_MAX_TOKENS];
    unsigned ntok;
    fd_str_t upgrade;         /* the last Upgrade value, or {0, NULL} */
} fd_http_resp_t;

/*
 * Look for the end of a response header in buf[0, len), which grows
 * between calls from the same buf (*scan, 0 at first, remembers how far
 * it was checked). FD_OK with *hlen (through the blank line), FD_AGAIN,
 * or FD_ERROR with *err when a bare LF came first.
 */
int fd_http_parse_response_end(const char *buf, size_t len, size_t *scan,
                               size_t *hlen, const char **err);
/*
 * Parse the header h[0, hlen), which ends with its first CRLF CRLF (as
 * found by fd_http_parse_response_end()). FD_OK, or FD_ERROR with *err
 * telling what the upstream "sent ...", for the error log.
 */
int fd_http_parse_response(fd_http_resp_t *rs, const char *h, size_t hlen,
                           const char **err);

/*
 * A Host field value or an absolute-form authority, as RFC 9110 7.2 and
 * RFC 3986 3.2.2 define it: uri-host [ ":" port ], where uri-host is an
 * IP-literal ("[" IPv6address or IPvFuture "]"), an IPv4address or a
 * reg-name of unreserved and sub-delims characters (no pct-encoded, no
 * empty label, and a name that ends in a number must be an IPv4address),
 * and port is at most 5 digits, at most 65535. FD_OK with *out the
 * normalised value: one trailing dot and an empty port removed, the case
 * kept; a slice of in, or (only for "name.:port") a copy in pool. 400 for
 * anything else, 500 when the pool is out of memory.
 */
int fd_http_parse_host(fd_str_t in, fd_str_t *out, fd_pool_t *pool);

/* Decode %XX and normalise "." and ".." segments and "//" into dst (at
 * least src.len + 1 bytes); FD_ERROR if the path escapes "/" or holds NUL
 * or an encoded '/' that would change segments. */
int fd_http_normalize_path(fd_str_t src, char *dst, size_t *dst_len);

/* Is the byte a token char (RFC 9110 tchar)? */
extern const uint8_t fd_http_tchar[256];

#endif
