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
    int version;              /* 10 or 11 */

    fd_http_header_t *headers;
    unsigned nheaders;
    unsigned headers_cap;

    /* indexed while parsing */
    fd_str_t host;
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
/*
 * Parse [start, start + len): FD_OK when the header section is complete
 * (p->header_len bytes), FD_AGAIN when more input is needed, or an HTTP
 * status: 400, 414, 431, 501, 505.
 */
int fd_http_parse_request(fd_http_req_t *p, const char *start, size_t len);

/* Re-point slices from a copy of the header at from..from+len to to. */
void fd_http_req_rebase(fd_http_req_t *p, const char *from, size_t len,
                        const char *to);

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

/* Decode %XX and normalise "." and ".." segments and "//" into dst (at
 * least src.len + 1 bytes); FD_ERROR if the path escapes "/" or holds NUL
 * or an encoded '/' that would change segments. */
int fd_http_normalize_path(fd_str_t src, char *dst, size_t *dst_len);

/* Is the byte a token char (RFC 9110 tchar)? */
extern const uint8_t fd_http_tchar[256];

#endif
