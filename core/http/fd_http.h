#ifndef FD_HTTP_H
#define FD_HTTP_H

#include <sys/stat.h>

#include "fd_cycle.h"
#include "fd_module.h"
#include "fd_http_parse.h"
#include "fd_realip.h"
#include "fd_stream.h"
#include "fd_var.h"

/*
 * Lists whose entries hold next and **prev (the address of whatever
 * points at them; NULL: in no list): HTTP/2 and HTTP/3's streams, the
 * upstream HTTP/2 client's. Link e at the head of *list; unlink e from
 * whichever it is in (none: nothing).
 */
#define FD_LIST_LINK(list, e) \
    do { \
        (e)->next = *(list); \
        if ((e)->next) \
            (e)->next->prev = &(e)->next; \
        (e)->prev = (list); \
        *(list) = (e); \
    } while (0)

#define FD_LIST_UNLINK(e) \
    do { \
        if ((e)->prev) { \
            *(e)->prev = (e)->next; \
            if ((e)->next) \
                (e)->next->prev = (e)->prev; \
            (e)->next = NULL; \
            (e)->prev = NULL; \
        } \
    } while (0)

typedef struct fd_error_page_s {
    int status;
    char *body;
    size_t len;
    struct fd_error_page_s *next;
} fd_error_page_t;

/* quic_retry: when a client's first Initial gets a Retry (fd_quic.c);
 * auto is 0, the default: [server] keys' defaults are their zeroes */
enum { FD_QUIC_RETRY_AUTO, FD_QUIC_RETRY_ON, FD_QUIC_RETRY_OFF };

/* [server] */
struct fd_http_server_s {
    fd_conf_list_t listen;
    fd_conf_list_t names;      /* server_name: Host values, "*.x" "x.*" ok */
    int is_default;            /* listen ... default */
    fd_http_loc_t *exact;      /* = /x */
    fd_http_loc_t *prefix;     /* /x, sorted longest first */
    fd_http_loc_t *regex;      /* ~ re, file order */
    fd_http_loc_t *named;      /* @name: reached only internally */
    fd_http_loc_t *root_loc;   /* implicit location for [server] keys */
    fd_error_page_t *error_pages;
    fd_int_t max_conns_per_ip; /* 0: no limit */
    fd_msec_t proxy_protocol_timeout;
    int quic_retry;            /* FD_QUIC_RETRY_*: the default server's
                                * of a quic address applies */
    void *ssl;                 /* the ssl_* keys and context (fd_ssl.c) */
    fd_str_t alt_svc;          /* h3=":PORT"; ma=86400 when it listens on
                                * QUIC: sent on its TCP responses */
    fd_http_server_t *next;
    unsigned seq;
    const char *file;          /* where its [server] line is */
    int line;
};

enum {
    FD_LOC_EXACT,          /* = /x */
    FD_LOC_PREFIX,         /* /x */
    FD_LOC_PREFIX_STOP,    /* ^~ /x: when it is the longest, no regexes */
    FD_LOC_REGEX,          /* ~ re */
    FD_LOC_REGEX_CASELESS, /* ~* re */
    FD_LOC_NAMED           /* @name: never matched, only redirected to */
};

typedef struct fd_http_try_files_s fd_http_try_files_t;
typedef struct fd_pre_s fd_pre_t; /* fd_api_bg.c */

/* add_header = NAME VALUE [always] */
typedef struct {
    fd_str_t name;
    fd_var_script_t value;
    unsigned always:1;         /* error responses too */
} fd_http_add_header_t;

enum { FD_EXPIRES_OFF = 0, FD_EXPIRES_EPOCH, FD_EXPIRES_MAX,
       FD_EXPIRES_TIME };

/* [location ...]: core keys plus one conf block per module */
struct fd_http_loc_s {
    int kind;
    fd_str_t match;            /* path or regex source */
    void *regex;               /* pcre2_code * */
    fd_http_server_t *server;
    /* handler = NAME: its module (keys, configuration: fd_loc_conf), and
     * what runs, which is the module's own handler, or one of a public-API
     * module's further ones (fd_dso_handler_find) */
    const fd_module_t *handler;
    fd_handler_pt handler_fn;
    unsigned handler_flags;    /* FD_MODULE_* */
    unsigned handler_methods;  /* FD_METHOD() bits; 0: FD_METHODS_GET */
    char *handler_name;
    char *root;
    size_t root_len;
    /* alias = PATH (fd_api_file.c): files beneath alias_base, at
     * alias_tail ($1..$9 a regex location's captures) followed, in a
     * prefix location, by what of the path its prefix did not match */
    char *alias;
    char *alias_base;
    size_t alias_base_len;
    char *alias_tail;
    /* this worker's O_PATH descriptor of root (or alias_base), opened on
     * first use and kept: 0 not yet, else fd + 1 */
    int rootfd1;
    fd_conf_list_t index;
    int follow_symlinks;
    size_t max_body_size;
    int offload;               /* run a thread-safe handler on the pool */
    int blocking;              /* ... always: it may block (503 when the
                                  pool has no thread) */
    /* response headers (fd_http_add_header.c): [http]'s, the server's,
     * then the location's own from add_headers_own on */
    fd_http_add_header_t *add_headers;
    unsigned nadd_headers;
    unsigned add_headers_cap;
    unsigned add_headers_own;
    int add_header_inherit;    /* off: only this section's own */
    int expires_mode;          /* FD_EXPIRES_* */
    int64_t expires;           /* FD_EXPIRES_TIME: seconds, may be < 0 */
    size_t limit_rate;         /* response bytes/s, 0: none */
    size_t limit_rate_after;   /* sent before limit_rate applies */
    /* set_real_ip_from, real_ip_header, real_ip_recursive: the server's
     * (root_loc's) decide before routing; realip_own: this location's
     * differ, so they decide again once a request is routed here */
    fd_realip_conf_t realip;
    unsigned realip_own;
    fd_http_try_files_t *try_files; /* fd_http_try_files.c, or NULL */
    char *name;                /* "location /x" for logs */
    void **mconf;              /* [fd_nmodules] */
    /* the modules whose access / filter hook acts here, NULL-ended */
    const fd_module_t **access;
    const fd_module_t **filter;
    /* handler keys (fd_directive_t.handler_key) met while loading, in
     * order: their entries (fd_conf_entry_t *), applied by the loader to
     * the handler's module once it is known */
    fd_conf_list_t handler_keys;
    fd_http_loc_t *next;
};

static inline void *fd_loc_conf(const fd_http_loc_t *loc, const fd_module_t *m)
{
    return loc->mconf[m->index];
}

typedef struct fd_http_header_out_s {
    fd_str_t name;
    fd_str_t value;
    struct fd_http_header_out_s *next;
} fd_http_header_out_t;

struct fd_request_s {
    fd_connection_t *c;
    fd_pool_t *pool;           /* freed after the response is written */
    fd_http_server_t *server;
    fd_http_loc_t *loc;
    fd_http_req_t in;          /* parsed request line and headers */
    fd_str_t path;             /* decoded, normalised, NUL-terminated */
    fd_msec_t start_msec;
    /* the client's address a trusted hop's header gave (real_ip_header),
     * or NULL: the connection's (fd_request_addr) */
    fd_addr_t *realip;

    /* regex location captures: offsets into in.path_raw (as pcre2) */
    int ncaptures;
    size_t *captures;

    /* request body (buffered unless the module streams it) */
    char *body;
    size_t body_len;
    size_t body_pulled;        /* body_whole: what fd_http_body_pull gave */
    /* called once each just before the handler runs, the buffered body
     * read (an access module's fd_req_before_handler: mirror starts its
     * copies there, as nginx's precontent phase); NULL: none */
    fd_pre_t *pre;

    /* response */
    int status;
    fd_str_t content_type;
    int64_t content_length;    /* -1: sum of r->out, or chunked */
    time_t last_modified;      /* -1: none */
    fd_str_t etag;
    fd_http_header_out_t *headers_out;
    fd_http_header_out_t **headers_out_last;
    fd_buf_t *out;             /* body chain */
    fd_buf_t **out_last;
    /* trailer fields after a streamed body (a proxied HTTP/2 upstream's,
     * gRPC's grpc-status): a trailing HEADERS to an HTTP/2 client, the
     * last chunk's trailer to a chunked HTTP/1.1 one, else dropped */
    fd_http_header_out_t *trailers_out;

    unsigned keepalive:1;
    unsigned header_only:1;    /* HEAD, 204, 304 */
    unsigned header_sent:1;
    unsigned chunked_out:1;    /* stream: framing added by fd_http_output */
    unsigned streamed:1;       /* the body follows the header in pieces */
    unsigned done:1;           /* response complete */
    unsigned async:1;          /* handler returned FD_AGAIN */
    unsigned body_wanted:1;    /* a buffered body, read after access */
    unsigned in_offload:1;
    unsigned continue_sent:1;
    unsigned body_read:1;      /* the request body was consumed entirely */
    unsigned header_pinned:1;  /* r->in slices copied out of the buffer */
    unsigned length_unknown:1; /* HEAD of an encoded body: no length */
    unsigned uri_changed:1;    /* a rewrite set path, path_raw and query:
                                  in.target is no longer what is served */
    unsigned server_passed:1;  /* headers_out has a Server of its own
                                  (proxy_pass_header): none of the engine's */
    unsigned refused:1;        /* a limit refused it (limit_req,
                                  limit_conn, queue):
                                  a gRPC client is told RESOURCE_EXHAUSTED
                                  whatever the status */
    unsigned try_done:1;       /* try_files ran for r->loc */
    unsigned held:1;           /* fd_http_respond_early(): the handler
                                * goes on after its response */
    unsigned response_done:1;  /* ... and that response is whole */
    unsigned moved:1;          /* an offloaded handler redirected it */
    unsigned api_finished:1;   /* fd_api_finish() from the handler's own
                                  pool thread: handler_rc holds its rc */
    unsigned body_whole:1;     /* an access module (mirror) wants the body
                                  read whole before the handler, even one
                                  that streams it: its fd_http_body_pull()
                                  then reads r->body */
    unsigned redirects;        /* internal redirects so far (try_files):
                                  a module's per-location state compares
                                  it to know the access phase restarted */

    uint64_t bytes_sent;       /* body bytes, for logs */
    void *ctx;                 /* the handler module's request state */
    void **mctx;               /* other modules' state, fd_request_ctx() */
    uint64_t first_done;       /* fd_req_first(): a bit a module (index) */

    /* streaming: called on the loop when the connection's output drained
     * below the low-water mark after fd_http_output() returned FD_AGAIN */
    void (*on_drain)(fd_request_t *r);
    /* called when the client connection closes before the request ends */
    void (*on_abort)(fd_request_t *r);
    /* streaming request body: called when more body bytes are readable */
    void (*on_body)(fd_request_t *r);
    /* streamed response: set by a header filter to transform the body
     * (gzip); NULL passes it as it is (see fd_module.h) */
    fd_body_filter_pt body_filter;

    /* engine-private */
    /* the multiplexed stream carrying it, or NULL (HTTP/1.1): the head
     * (fd_http_stream.h) of HTTP/2's, or with h3 set HTTP/3's
     * (fd_http3.c), whose fd_h2_* calls go to fd_h3_*: the engine takes
     * both one way */
    struct fd_http_shead_s *h2;
    unsigned h3;
    fd_request_t *feed_next, **feed_prev; /* in the body filter's queue */
    unsigned feed_queued;
    unsigned phase;
    int handler_rc;            /* from an offloaded handler */
    /* the upstream engine's request for r (proxy, FastCGI), NULL when
     * none ran: $upstream_addr and its kin read its log of tries */
    struct fd_upstream_req_s *upstream;
    unsigned retry_after;      /* seconds: the error page, when one is
                                  made, says Retry-After (a database's 503
                                  from under the handler) */
    int64_t body_rest;         /* Content-Length bytes still to read */
    fd_http_chunked_t ck;
    size_t body_cap;
    /* the public API's reader of the body (fd_http_api.c), or NULL */
    struct fd_api_body_s *api_body;
    /* the public-API modules' body filters, behind the engine's
     * body_filter, in the order their response filters set them
     * (fd_resp_body_filter, 1.4), or NULL */
    struct fd_api_filters_s *api_filters;
    /* what reading a streamed body failed with (400, 408, 413): the
     * status a handler's FD_ERROR answers, rather than 500 */
    int body_error;
    /* variables set for this request (auth_request_set: fd_var_set) */
    struct fd_var_val_s *vals;
    /* a subrequest (fd_http_sub.c): the request it works for, and what
     * hears of its end (its status and header in it) */
    fd_request_t *parent;
    void (*sub_done)(fd_request_t *sr);
    void *sub_data;
    struct fd_posted_s *sub_post;
};

/* Response construction (handlers) */
int fd_http_header_add(fd_request_t *r, fd_str_t name, fd_str_t value);
int fd_http_body_set(fd_request_t *r, const void *data, size_t len); /* no copy */
int fd_http_body_copy(fd_request_t *r, const void *data, size_t len);
void fd_http_body_append(fd_request_t *r, fd_buf_t *b);
void **fd_request_ctx(fd_request_t *r, const fd_module_t *m);
/* $http_NAME: the first request header named NAME (lower case, '_' for
 * '-'), or a NULL slice */
fd_str_t fd_http_var_header(fd_request_t *r, fd_str_t name);

/* Run the location's handler now (after the access phase), reading a
 * buffered request body first; an access module that returned FD_AGAIN
 * calls it from the loop to let r in. */
void fd_http_run_handler(fd_request_t *r);
/* An access module that held the request (FD_AGAIN) lets it go on: the
 * access checks after m in the location's list, then the handler. */
void fd_http_access_continue(fd_request_t *r, const fd_module_t *m);

/*
 * The response in r goes out now, whole, and the handler goes on with r
 * (the proxy cache's background update): r ends at fd_request_finish(),
 * which sends nothing more. Over HTTP/1.1 the connection takes its next
 * request only then; over HTTP/2 the stream ends at once and the request
 * outlives it.
 */
void fd_http_respond_early(fd_request_t *r);

/*
 * A subrequest for r (fd_http_sub.c): a GET of path (decoded, normal)
 * without a body, with r's header, routed among r's server's locations
 * and run at once; its response is not sent. done(sr) is called at the
 * end of the loop turn its response ended, with sr->status and
 * sr->headers_out set and sr->sub_data = data (sr is freed after). NULL:
 * out of memory. If r ends first, fd_http_subrequest_abort(sr) stops it
 * (done is not called).
 */
fd_request_t *fd_http_subrequest(fd_request_t *r, fd_str_t path,
                                 void (*done)(fd_request_t *sr), void *data);
void fd_http_subrequest_abort(fd_request_t *sr);

/*
 * A background subrequest (mirror): a copy of r that owns everything it
 * reads, so that it outlives r, r's connection and r's stream. Its pool
 * holds a copy of r's method, target's query ($args), header, client
 * address and, with FD_SUB_BODY, r's buffered body (r->body); a
 * connection struct of its own stands for r's (no socket, no TLS state:
 * its $scheme reads "http"). Its path ($uri, what routes it) is path
 * (decoded, normal), or with a location `to` (a named one: [location
 * @name]) r's path, and it goes to `to`; its target is r's ($request_uri,
 * and what a proxy
 * without a URI in pass sends: nginx's proxy_pass ...$request_uri), its
 * query r's ($args). It is made but not run: the caller sets its
 * clean-ups (fd_pool_cleanup_add(sr->pool, ...): they run whenever it
 * ends, on its own or by fd_http_subrequest_abort()) and then calls
 * fd_http_background_run(sr). No done callback: nobody waits for it.
 * NULL: out of memory.
 */
#define FD_SUB_BODY 0x1
fd_request_t *fd_http_background(fd_request_t *r, fd_str_t path,
                                 fd_http_loc_t *to, unsigned flags);
void fd_http_background_run(fd_request_t *sr);

/* fd_api_bg.c: the request's fd_req_before_handler() calls, in order;
 * the configuration's fd_api_conf_named_location() checks, once every
 * server is read (fd_cycle.c): FD_OK, or FD_ERROR with cf's error. */
void fd_http_run_pre(fd_request_t *r);
int fd_http_named_checks(fd_conf_t *cf, fd_cycle_t *cy);

/* Finish a request that returned FD_AGAIN: FD_OK (response set in r) or an
 * HTTP status >= 400 for an error page. Runs on the loop. */
void fd_request_finish(fd_request_t *r, int rc);

/*
 * Streaming (proxy): send the header now, then body pieces as they come.
 * Returns FD_OK, FD_AGAIN when the output is above the high-water mark
 * (r->on_drain is called later), or FD_ERROR when the client is gone.
 * last = 1 ends the response. With r->content_length = -1 the body is
 * chunk-encoded for HTTP/1.1 clients (or close-delimited for 1.0). The
 * header filters run before the header is queued; a body filter they set
 * sees each piece (and may drop r->content_length: gzip).
 */
int fd_http_send_header(fd_request_t *r);
int fd_http_output(fd_request_t *r, fd_buf_t *chain, int last);
/*
 * For body filters: frame (chunked) and queue the pieces of chain as body
 * bytes, copying memory (the caller may reuse it at once). FD_OK or
 * FD_ERROR. It does not write: fd_http_output() does, after the filter.
 */
int fd_http_output_body(fd_request_t *r, fd_buf_t *chain);

/*
 * Tunnels (a 101 response, e.g. WebSocket): after fd_http_send_header()
 * of the 101, take the client's socket out of the engine. FD_OK: *to has
 * the socket and its transport (fd_stream_move(): under TLS the SSL
 * state, which the caller now closes with fd_stream_close_transport();
 * still registered with the loop, for the caller's handler; the
 * descriptor itself changes owner, no copy is left behind, and the
 * caller closes it), and the client's bytes already read past the
 * request are copied to buf (*n, at most size: FD_ERROR if more). FD_AGAIN while the header is still being
 * written (r->on_drain is called when it is), or FD_ERROR. On success the
 * request is over (counted and logged) and the connection closed: r and
 * its pool are gone. The tunnel is no longer counted in the connection
 * figures, but still in its address's max_conns_per_ip count: *ipref, for
 * fd_ip_release() when the tunnel ends.
 *
 * Over HTTP/2 (an extended CONNECT, RFC 8441: r->in.ext_connect, and a
 * 200 rather than the 101) the connection stays: *to becomes a side with
 * no socket whose transport is the request's stream (fd_stream.h, splices),
 * nothing is copied (*n 0) and *ipref is NULL. r is over for its module
 * as well; its memory stays with the stream.
 */
int fd_http_detach(fd_request_t *r, fd_stream_t *to, char *buf, size_t size,
                   size_t *n, void **ipref);

/*
 * Streaming request body (FD_MODULE_STREAM_BODY): copy up to size decoded
 * body bytes into buf. Returns bytes (> 0), 0 at the end of the body,
 * FD_AGAIN (r->on_body is called when more arrives), or FD_ERROR (bad
 * chunked framing: the handler answers 400; the connection will close).
 * The engine reads the body while the request is in this phase, but
 * applies no body timeout and no max_body_size to a chunked body: the
 * handler does (the proxy: body_timeout while it waits, 413).
 */
ssize_t fd_http_body_pull(fd_request_t *r, char *buf, size_t size);

/*
 * A file as r's response (fd_http_file.c): bytes [off, off + size) of fd,
 * which lives as long as r. r->etag and r->last_modified (-1: none) are
 * the representation's: a failed If-Match / If-Unmodified-Since makes
 * it a 412, If-None-Match / If-Modified-Since a 304;
 * a Range of a GET (at most max_ranges; 0: none) a 206 or a 416; else a
 * 200 (a body only for GET). FD_OK, or an HTTP status.
 */
int fd_http_send_file(fd_request_t *r, int fd, off_t off, int64_t size,
                      unsigned max_ranges);
/* Its parts, for tests: If-None-Match's list against etag (weak
 * comparison); If-Range (strong tag, or an exact date); Range against
 * size: FD_RANGE_OK with rg[0..*n), _UNSATISFIABLE, or _NONE (ignored:
 * malformed, more than max, or more bytes than the file). */
typedef struct {
    int64_t start, end; /* inclusive */
} fd_http_range_t;
enum { FD_RANGE_NONE, FD_RANGE_OK, FD_RANGE_UNSATISFIABLE };
int fd_http_etag_match(fd_str_t list, fd_str_t etag);
int fd_http_if_range(fd_str_t h, fd_str_t etag, time_t mtime);
int fd_http_parse_ranges(fd_str_t h, int64_t size, fd_http_range_t *rg,
                         unsigned max, unsigned *n);

/* Error page for status (html/50x.html-style), into r. */
int fd_http_error_page(fd_request_t *r, int status);
fd_str_t fd_http_status_line(int status);

/* Resolve "file" relative to the location root; NUL-terminated in pool. */
fd_str_t fd_http_map_path(fd_request_t *r, fd_str_t uri);

/*
 * The connection's variables, for the registry's getters (fd_var.c):
 * $scheme, $https, $http2 and the TLS facts.
 * fd_http_conn_var_id() at load time (0: not one of them), then
 * fd_http_conn_var() per request ("" when the connection is not TLS;
 * pool: room for values made on demand, such as the client's DN).
 */
int fd_http_conn_var_id(const char *name, size_t len);
fd_str_t fd_http_conn_var(fd_request_t *r, int id);

/*
 * The client's address ($remote_addr): the one real_ip_header took from a
 * trusted hop for this request, else the connection's (which a listen
 * ... proxy_protocol address took from the PROXY header). And the hop's
 * ($realip_remote_addr): the socket's peer, before either changed it.
 * Text into buf (INET6_ADDRSTRLEN); returns its length.
 */
void fd_request_addr(fd_request_t *r, fd_addr_t *a);
size_t fd_request_addr_text(fd_request_t *r, char *buf, size_t size);
size_t fd_request_hop_text(fd_request_t *r, char *buf, size_t size);

/* The HTTP/2 stream id that carries r ($http2_stream_id), 0 over
 * HTTP/1.x. */
unsigned fd_http_stream_id(fd_request_t *r);

/*
 * add_header and expires (fd_http_add_header.c): the keys' parsers; the
 * loader marks where a section's own add_header lines begin (_mark) and
 * applies add_header_inherit once it is loaded (_finish); the writer adds
 * the headers r's location asks for, for r->status (FD_OK / FD_ERROR).
 */
int fd_http_set_add_header(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *v);
int fd_http_set_expires(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *v);
void fd_http_loc_headers_mark(fd_http_loc_t *loc);
void fd_http_loc_headers_finish(fd_http_loc_t *loc);
int fd_http_add_headers(fd_request_t *r);

/* Routing */
fd_http_loc_t *fd_http_find_location(fd_request_t *r);
/* The server's [location @name] (name with its '@'), or NULL. */
/* fn(loc, data) for every location of cy: each server's own keys
 * (root_loc), then its exact, prefix, regex and named locations */
void fd_http_each_loc(fd_cycle_t *cy, void (*fn)(fd_http_loc_t *loc, void *),
                      void *data);
fd_http_loc_t *fd_http_named_location(const fd_http_server_t *s,
                                      const char *name);

/*
 * Internal redirects (fd_http_try_files.c). Move r to the location of the
 * URI path?args (a decoded path; args NULL: r's own are kept) or to the
 * named location loc, counting the redirect: FD_OK, or 500 past the
 * eleventh (a cycle, logged). The caller then runs the access phase of
 * r->loc from its first hook (fd_http_run_handler does).
 */
int fd_http_internal_redirect(fd_request_t *r, fd_str_t path,
                              const fd_str_t *args);
int fd_http_named_redirect(fd_request_t *r, fd_http_loc_t *loc);
/* Count one change of r's URI towards to (rewrite ... last counts here
 * too, as nginx's uri_changes: one limit for both): FD_OK, or 500 past
 * the limit (logged). The new location's try_files and captures are
 * reset. */
int fd_http_redirect_count(fd_request_t *r, fd_str_t to);
/*
 * try_files, run once per location after its access phase, before the
 * handler: FD_OK (serve r->path here), FD_DECLINED (r moved: to the file
 * found when it is another path, or to the last argument; run the
 * access phase of r->loc, chosen again), or
 * an HTTP status. The key's parser and the load-time check: _set and
 * _resolve (@names, once the server is read). The loader does not let a
 * location inherit it.
 */
int fd_http_try_files(fd_request_t *r);
int fd_http_set_try_files(fd_conf_t *cf, const fd_directive_t *d,
                          void *conf, const char *v);
int fd_http_try_files_resolve(fd_conf_t *cf, fd_http_loc_t *loc);

/*
 * A location's files (fd_api_file.c, with the API's fd_req_file_*).
 * _alias_init: at the end of a [location] with alias =, its checks and
 * its split into the directory and the tail (FD_ERROR after
 * fd_conf_error()). _file_test: try_files' test, would uri (decoded,
 * normalised; dir: as a directory) be a file of r's location, under the
 * same confinement and symlink policy as its handler's: 1 yes, 0 no, or
 * 500. fd_file_open_beneath: rel (no leading '/'; "" the directory
 * itself) opened beneath rootfd with no symlink and no ".." out of it:
 * the descriptor, or -1 with errno (ELOOP, EXDEV: refused).
 */
int fd_http_alias_init(fd_conf_t *cf, fd_http_loc_t *loc);
int fd_http_file_test(fd_request_t *r, fd_str_t uri, int dir);
int fd_file_open_beneath(int rootfd, const char *rel, int flags);
/* set once the kernel said ENOSYS to openat2() (a test sets it: the walk
 * one component at a time is used from then on) */
extern int fd_file_no_openat2;

/* Used by the cycle: core http keys */
extern const fd_directive_t fd_http_loc_directives[];
extern const fd_directive_t fd_http_server_directives[];

/* The protocol of HTTP listening addresses (fd_connection.h): the
 * worker's loop reaches the engine only through it. */
struct fd_proto_s;
extern const struct fd_proto_s fd_http_proto;

#endif
