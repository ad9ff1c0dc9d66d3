/*
 * fastd_upstream.h: a backend protocol of a module's own, on fastd's
 * upstream engine (API 1.7). Include it after fastd.h's users do:
 *
 *     #include <fastd_upstream.h>      (it includes fastd.h)
 *
 * The engine does the life of a request to an upstream group: choosing a
 * server ([upstream NAME]'s balancer, or one HOST:PORT / unix:/path),
 * connecting, the keep-alive pool (one a protocol: never another's
 * connections), writing the request and the client's body as the server
 * takes it, reading, the timeouts, next_upstream retries, passive health,
 * the response's back-pressure (the client reads slowly: reading stops)
 * and the client's abort. The module says what goes on the wire, with
 * the callbacks of an fd_api_upstream_proto_t:
 *
 *   build       the request's bytes, once: every try sends them again;
 *   frame_body  the client's body, as the engine pulls it, framed in place
 *               (NULL: the body goes as it is);
 *   process     what the server sent: the response header into the
 *               request (fd_resp_status, fd_resp_header...), announced
 *               with fd_api_upstream_header(), then the body with
 *               fd_api_upstream_output() and fd_api_upstream_last().
 *
 * tests/modules/scgi.c is a whole protocol (SCGI) in 200 lines, and
 * modules/fd_fastcgi_module.c is FastCGI on this header. From 1.8 it
 * also has what an HTTP proxy reads and writes of the request (the
 * client's header lines, the HTTP/1.1 response head's parser, the
 * chunked decoder: modules/fd_proxy_module.c), and TLS to the group's
 * servers (fd_api_upstream_conf_tls: the proxy's proxy_ssl_*).
 *
 * The verbs' results: FD_OK (go on), FD_AGAIN (stop here: the engine
 * calls process again when it can go on: a new try began, or the client's
 * output is full), FD_DONE (the request is over and u may be gone: return
 * FD_DONE at once and touch nothing). process returns what the last verb
 * it called returned, or FD_OK when it wants more bytes.
 *
 * Everything runs on the worker's loop. C11; names no engine type.
 */
#ifndef FASTD_UPSTREAM_H
#define FASTD_UPSTREAM_H

#include <string.h>

#include "fastd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An upstream group: an [upstream NAME] section, or one server's. */
typedef struct fd_api_upstream_s fd_api_upstream_t;
/* What a location says of its upstream requests: the group, the
 * protocol, the timeouts and retries. */
typedef struct fd_api_upstream_conf_s fd_api_upstream_conf_t;
/* One request's upstream side. */
typedef struct fd_api_upstream_req_s fd_api_upstream_req_t;
/* A response header field as the server sent it (the request's memory). */
typedef struct {
    fd_str_t name;
    fd_str_t value;
} fd_api_field_t;

/*
 * A protocol. data is the module's per-request state (the size given to
 * fd_api_upstream_req(), zeroed). A later minor version adds fields at
 * the end only.
 */
typedef struct {
    const char *what;          /* in log lines: "SCGI upstream" */
    /* frame_body's room: body_head bytes before the body bytes in a
     * frame, body_room bytes of framing in all (a trailer, the body's
     * end); 0 and 0 when the body goes as it is */
    size_t body_head;
    size_t body_room;
    unsigned flags;            /* FD_API_UPSTREAM_* below */
    /* The request's bytes, *out (in the request's memory: not copied),
     * once for every try. FD_OK, or the status the request fails with. */
    int (*build)(fd_api_upstream_req_t *u, void *data, fd_str_t *out);
    /* n bytes of the client's body were read at buf + body_head (n 0:
     * the body is over): frame them in place, at most body_room bytes
     * more, and say the frame's length from buf in *len. FD_OK; FD_DONE
     * when this frame ends the body (no call with n 0 follows); or the
     * status the request fails with. NULL: the body goes as it is. */
    int (*frame_body)(fd_api_upstream_req_t *u, void *data, char *buf,
                      size_t n, size_t *len);
    /* The server's bytes in[0, len), all that came and was not consumed
     * (fd_api_upstream_consume(): the bytes taken, before any verb is
     * called; what is left comes again, with more after it). eof: the
     * server closed the connection after the header, while
     * FD_API_UPSTREAM_UNTIL_CLOSE holds. FD_OK (more is needed), or what
     * the last verb returned. */
    int (*process)(fd_api_upstream_req_t *u, void *data, const char *in,
                   size_t len, int eof);
    /* Optional: a new try begins (the last failed before the response
     * header was taken): the response's parse state to its start. */
    void (*retry)(fd_api_upstream_req_t *u, void *data);
    /* Optional: the request is about to fail with status (502, 504): what
     * it fails with instead (FD_OK: the module answered, a cache's stale
     * copy). Not called for FD_ERROR (a cut response). */
    int (*fail)(fd_api_upstream_req_t *u, void *data, int status);
    /* Optional: the request's upstream side ends, whatever way. */
    void (*release)(fd_api_upstream_req_t *u, void *data);
    /* FD_API_UPSTREAM_H2's (in place of process): the response header
     * the engine decoded, status and fields f[0, nf), into the request as
     * the module wants it. FD_OK, or the status the request fails with. */
    int (*fields)(fd_api_upstream_req_t *u, void *data, int status,
                  const fd_api_field_t *f, unsigned nf);
} fd_api_upstream_proto_t;

/* proto flags: the body is pulled once the request's bytes left (not in
 * the same write) */
#define FD_API_UPSTREAM_BODY_AFTER 0x1
/* The engine speaks HTTP/2 to the group (h2c; over TLS, ALPN h2), its
 * connections shared by many requests: build's bytes are an HTTP/1.1
 * request header, which the engine sends as HTTP/2 fields, the body as
 * DATA frames, and the response comes to fields, then to the client as
 * the engine reads it (frame_body and process are not called). */
#define FD_API_UPSTREAM_H2 0x2
/* With FD_API_UPSTREAM_H2: gRPC (te: trailers; the client's grpc-timeout
 * bounds the read timeout, with a second's grace) */
#define FD_API_UPSTREAM_GRPC 0x4

/* --- configuration: from init_conf or set --------------------------------- */

/* [upstream name] of the configuration being loaded, or NULL. */
fd_api_upstream_t *fd_api_upstream_group(const char *name);
/* A group of one server: HOST:PORT (resolved at load) or unix:/path,
 * with the options of a server line (max_fails=N fail_timeout=T; opts
 * "" for none); the same address and options give the same group. NULL
 * after the error fastd reports. */
fd_api_upstream_t *fd_api_upstream_server(const char *addr,
                                          const char *opts);
const char *fd_api_upstream_name(const fd_api_upstream_t *up);
/* The group's keepalive: > 0 when connections are kept for reuse. */
unsigned fd_api_upstream_keepalive(const fd_api_upstream_t *up);
/* 1 when the group's server lines say h2 (its servers speak HTTP/2). */
int fd_api_upstream_is_h2(const fd_api_upstream_t *up);

/* A location's requests to up in protocol proto (which must outlive the
 * configuration: a static table). Options as nginx's defaults: 60s
 * timeouts, next_upstream error timeout, no bound on tries, no
 * buffering. NULL when out of memory. */
fd_api_upstream_conf_t *fd_api_upstream_conf(
    fd_api_upstream_t *up, const fd_api_upstream_proto_t *proto);
/* Its options, as the module's keys parse them (FD_API_MSEC values for
 * the timeouts). FD_OK, or FD_ERROR for an unknown option. */
enum {
    FD_API_UPSTREAM_CONNECT_TIMEOUT = 1, /* ms; the TLS handshake too */
    FD_API_UPSTREAM_SEND_TIMEOUT,        /* ms between two writes */
    FD_API_UPSTREAM_READ_TIMEOUT,        /* ms between two reads */
    FD_API_UPSTREAM_NEXT,                /* FD_API_UPSTREAM_NEXT_* */
    FD_API_UPSTREAM_NEXT_TRIES,          /* tries in all; 0: no bound */
    FD_API_UPSTREAM_BUFFERING            /* 1: gather up to 16k */
};
int fd_api_upstream_conf_set(fd_api_upstream_conf_t *c, int opt, int64_t v);
int64_t fd_api_upstream_conf_get(const fd_api_upstream_conf_t *c, int opt);
/* next_upstream: when a try goes on to the next server */
#define FD_API_UPSTREAM_NEXT_ERROR 0x01
#define FD_API_UPSTREAM_NEXT_TIMEOUT 0x02
#define FD_API_UPSTREAM_NEXT_502 0x04
#define FD_API_UPSTREAM_NEXT_503 0x08
#define FD_API_UPSTREAM_NEXT_504 0x10
#define FD_API_UPSTREAM_NEXT_NON_IDEMPOTENT 0x20
/* A next_upstream key's value as the proxy's ("error timeout http_502
 * http_503 http_504 non_idempotent", "off") into *next: FD_OK, or
 * FD_ERROR after the error fastd reports. */
int fd_api_upstream_parse_next(const char *value, unsigned *next);

/* --- a request ------------------------------------------------------------ */

/* The handler's: r's upstream side, with size bytes of the module's
 * (zeroed: fd_api_upstream_data()). The request's context (fd_req_get_ctx)
 * is the engine's from here. NULL when out of memory (answer 500). */
fd_api_upstream_req_t *fd_api_upstream_req(fd_request_t *r,
                                           const fd_api_upstream_conf_t *c,
                                           size_t size);
void *fd_api_upstream_data(fd_api_upstream_req_t *u);
/* Before start: this request's body goes as it is (frame_body is not
 * called for it; it is sent from body_head). 1 when it is also kept
 * whole, to go again on a retry after a try that took some of it (a
 * Content-Length of at most 16k; a body not kept cannot: such a try is
 * the last), 0 when not (none, chunked, longer). */
int fd_api_upstream_body_raw(fd_api_upstream_req_t *u);
/* Before start: the client has its response already (a cache's stale
 * copy): the server's response is the module's alone (output takes the
 * body and sends nothing), and retries are still allowed. */
void fd_api_upstream_background(fd_api_upstream_req_t *u);
/* Before start: a kept-alive connection is checked before it takes this
 * request (one that cannot go again once sent; a non-idempotent method's
 * are already). */
void fd_api_upstream_careful(fd_api_upstream_req_t *u);
/* build, then the first try: what the handler returns (FD_AGAIN, or a
 * status). */
int fd_api_upstream_start(fd_api_upstream_req_t *u);
/* r's upstream side when it is one of proto's, else NULL (a variable's
 * getter: is this request mine). */
fd_api_upstream_req_t *fd_api_upstream_of(fd_request_t *r,
                                          const fd_api_upstream_proto_t *proto);
/* A line in the error log that begins with the protocol, the group and
 * the server ("SCGI upstream \"app\" server 127.0.0.1:4000"), then fmt. */
void fd_api_upstream_log(fd_api_upstream_req_t *u, int level, int err,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* --- process's verbs ------------------------------------------------------ */

/* n bytes of what process was given are taken. */
void fd_api_upstream_consume(fd_api_upstream_req_t *u, size_t n);
/* The response header is in r (fd_resp_status, fd_resp_header_static):
 * logged, timed, passive health; next_upstream http_502/503/504 are tried
 * here (FD_AGAIN: a new try began, FD_DONE). FD_OK: the body follows. */
int fd_api_upstream_header(fd_api_upstream_req_t *u, int status);
/* The body's length is not known before the server closes: eof comes to
 * process (HTTP/1.0 style; without it a close is a cut response). */
void fd_api_upstream_until_close(fd_api_upstream_req_t *u);
/* frame_body's: this frame begins off bytes after buf (a head shorter
 * than body_head, as a chunk's size line), *len counted from there. */
void fd_api_upstream_frame_at(fd_api_upstream_req_t *u, size_t off);
/* The body bytes still to come, when the module knows them (-1: it does
 * not): with buffering on, the read that ends the body is handed on at
 * once, not held to fill a block. Reset to -1 at each try. */
void fd_api_upstream_rest(fd_api_upstream_req_t *u, int64_t n);
/* Body bytes for the client (pieces in memory: copied; a file's range,
 * data NULL, is not taken here: the request fails with 500; n 0: the
 * header goes now). FD_OK, FD_AGAIN (the client is slow: process is
 * called again when it took them, with what is left), FD_DONE (it went
 * away). */
int fd_api_upstream_output(fd_api_upstream_req_t *u,
                           const fd_api_piece_t *p, unsigned n);
/* The last of the body (n may be 0); reuse: the server's connection is
 * fit for another request (the pool keeps it). FD_DONE. */
int fd_api_upstream_last(fd_api_upstream_req_t *u, const fd_api_piece_t *p,
                         unsigned n, int reuse);
/* After a server's 101 (a WebSocket's), whose response the module set in
 * the request (its status, Upgrade and Connection; 200 for an HTTP/2
 * extended CONNECT, RFC 8441): the client's connection and the server's
 * (with what it sent past the header, not consumed) are spliced both
 * ways, until both ends closed, one failed, or idle_ms passed with no
 * byte either way (0: an hour). The response goes first. FD_AGAIN
 * while it is written (the request waits, process is not called), or
 * FD_DONE: the request is over (a tunnel, or it failed). */
int fd_api_upstream_tunnel(fd_api_upstream_req_t *u, uint64_t idle_ms);
/* Why the last failed try failed (the fail hook's question: a cache's
 * stale copy may answer one kind and not another): FD_API_UPSTREAM_INVALID
 * (the server broke the protocol), FD_API_UPSTREAM_NEXT_TIMEOUT, or
 * FD_API_UPSTREAM_NEXT_ERROR. */
#define FD_API_UPSTREAM_INVALID 0x40
unsigned fd_api_upstream_failure(const fd_api_upstream_req_t *u);
/* The server broke the protocol (why: "sent ..."): logged, counted
 * against it, 502 (or a cut response once the header left). FD_DONE. */
int fd_api_upstream_invalid(fd_api_upstream_req_t *u, const char *why);
/* The request fails: status's error page, or a cut response once the
 * header left (the fail hook first). FD_DONE. */
int fd_api_upstream_fail(fd_api_upstream_req_t *u, int status);
/* The upstream side is over, the request ends with rc (FD_OK: the module
 * set the response). FD_DONE. */
int fd_api_upstream_end(fd_api_upstream_req_t *u, int rc);

/* --- 1.8: an HTTP proxy's own (proxy) ------------------------------------- */

/*
 * What an HTTP proxy reads of the client's request, in one call a request
 * (its hot path): fd_req_http(r, &h, sizeof(h)) fills h up to size bytes
 * (a module built for this minor passes its own sizeof; a later one adds
 * fields at the end only). The slices are the request's memory.
 */
typedef struct {
    const fd_api_field_t *fields; /* the header lines as they came */
    unsigned nfields;
    unsigned version;         /* 10, 11, 20 (HTTP/2), 30 (HTTP/3) */
    fd_str_t host;            /* the absolute-form authority, else Host,
                               * checked and normal (len 0: none) */
    fd_str_t path_raw;        /* the target's path, still %-encoded */
    fd_str_t upgrade;         /* the Upgrade field's value */
    fd_str_t path_rest;       /* the path past what a prefix location
                               * matched ("" for an exact one) */
    int64_t content_length;   /* as the client declared it; -1: none */
    uint64_t max_body;        /* the location's max_body_size */
    unsigned chunked:1;       /* the body comes chunked (HTTP/1.1) */
    unsigned conn_upgrade:1;  /* Connection names "upgrade" */
    unsigned ext_connect:1;   /* an HTTP/2 extended CONNECT (RFC 8441) */
    unsigned tls:1;           /* the client came over TLS (or QUIC) */
    unsigned uri_changed:1;   /* a rewrite set the URI (fd_req_path) */
    /* 1.9 (the proxy's cache) */
    unsigned method;          /* FD_API_GET, FD_API_HEAD, ... FD_API_PATCH,
                               * else FD_API_OTHER */
} fd_api_http_req_t;
void fd_req_http(fd_request_t *r, fd_api_http_req_t *h, size_t size);
/* The client's address as $remote_addr says it (after real_ip) into
 * buf: its length (0: none, or size too small; 46 is enough). */
size_t fd_req_client_text(fd_request_t *r, char *buf, size_t size);

/* The tokens of a list value as Connection's (split at ',', SP and HTAB,
 * empty ones skipped) added to tok[*n], up to max in all. */
void fd_api_http_tokens(fd_str_t v, fd_str_t *tok, unsigned *n,
                        unsigned max);

/* s[0, n) into sb, the bytes esc names as %XX: FD_API_ESC_PATH, all but
 * RFC 3986's pchar and '/' (a path for a request line or a Location);
 * FD_API_ESC_TARGET, SP, controls and 8-bit (a query for a request
 * line); FD_API_ESC_HEADER, controls but HTAB (a value a $variable made
 * cannot split a header field). */
enum { FD_API_ESC_PATH = 1, FD_API_ESC_TARGET, FD_API_ESC_HEADER };
void fd_api_sbuf_add_escaped(fd_api_sbuf_t *sb, const char *s, size_t n,
                             int esc);
/* A script's value (fd_api_script_compile) into sb, its variables'
 * values escaped as esc says (0: none; literals go as written). */
void fd_req_script_add(fd_request_t *r, const fd_api_script_t *s,
                       int esc, fd_api_sbuf_t *sb);

/*
 * An HTTP/1.1 server's response header (RFC 9112), strictly: first its
 * end, fd_api_http_response_end(buf, len, &scan, &hlen, &err) on what
 * came so far (buf[0, len) grows between calls, scan 0 at first
 * remembers how far it was checked): FD_OK with hlen (through the blank
 * line), FD_AGAIN, or FD_ERROR with err ("sent ...", for
 * fd_api_upstream_invalid()). Then the header whole,
 * fd_api_http_response(rs, h, hlen, &err), rs.fields and rs.max_fields
 * set by the caller (more fields is an error): FD_OK or FD_ERROR with
 * err. The slices point into h.
 */
#define FD_API_HTTP_RESP_TOKENS 16
typedef struct {
    fd_api_field_t *fields;   /* the caller's array */
    unsigned max_fields;
    unsigned nfields;
    int version;              /* 10 or 11 */
    int status;               /* 100..599 */
    /* framing, unset for an interim 1xx (not 101): it has no body */
    int64_t content_length;   /* -1: none */
    unsigned chunked:1;       /* Transfer-Encoding: chunked */
    unsigned conn_close:1;
    unsigned conn_keepalive:1;
    /* the tokens of every Connection field (hop-by-hop fields' names),
     * the first FD_API_HTTP_RESP_TOKENS */
    fd_str_t conn_tok[FD_API_HTTP_RESP_TOKENS];
    unsigned ntok;
    fd_str_t upgrade;         /* the last Upgrade value, or {0, NULL} */
} fd_api_http_resp_t;
int fd_api_http_response_end(const char *buf, size_t len, size_t *scan,
                             size_t *hlen, const char **err);
int fd_api_http_response(fd_api_http_resp_t *rs, const char *h, size_t hlen,
                         const char **err);

/* A chunked body's decoder, resumable at any byte (zeroed to begin):
 * from *pos up to end, FD_OK with a slice of the body in (*data, *n) (0
 * bytes when only framing was taken), FD_AGAIN when the input is used
 * up, FD_DONE after the last chunk and its trailer, or FD_ERROR. *pos
 * moves past what was taken. */
typedef struct {
    uint64_t state_[6];       /* fastd's (room to grow) */
} fd_api_http_chunked_t;
int fd_api_http_chunked(fd_api_http_chunked_t *ck, const char **pos,
                        const char *end, const char **data, size_t *n);

/* The response's own Server field (a proxied one) goes to the client in
 * place of fastd's. */
void fd_resp_own_server(fd_request_t *r);
/* 1 once the response header left (a body cut after it cannot become an
 * error page). */
int fd_resp_header_sent(fd_request_t *r);
/* The client's connection sends each write at once (TCP_NODELAY): a
 * response streamed unbuffered, in small pieces. */
void fd_req_nodelay(fd_request_t *r);
/* The response so far (status, fields, type, length) set aside, the
 * request's response empty again: a background update builds another
 * in it for a cache alone, then fd_resp_put_back() brings the first one
 * back. NULL when out of memory. */
typedef struct fd_api_resp_s fd_api_resp_t;
fd_api_resp_t *fd_resp_set_aside(fd_request_t *r);
void fd_resp_put_back(fd_request_t *r, fd_api_resp_t *saved);

/*
 * Protocol bytes written into a string builder of the request's
 * (fd_req_sbuf) through a window reserved in it (fd_api_sbuf_reserve):
 * fd_api_out_add() and fd_api_out_room() write inline, and only a full
 * window costs a call (fd_api_out_grow), so that a request header is a
 * few calls, not one a piece. base is where the builder's bytes begin
 * (offsets from it stay valid when it grows); p NULL once out of memory,
 * checked once, at the end. Between fd_api_out_sync() (the window
 * committed) and fd_api_out_resume() (a new one of n bytes), o->sb takes
 * fd_api_sbuf_* calls (an escaped value, a script's).
 */
typedef struct {
    fd_api_sbuf_t *sb;
    char *base, *p, *end;
} fd_api_out_t;
/* A builder of r's with a first window of n bytes: FD_OK, FD_ERROR. */
int fd_api_out_init(fd_api_out_t *o, fd_request_t *r, size_t n);
/* The window committed, a new one of at least n bytes: where to write,
 * or NULL once out of memory. */
char *fd_api_out_grow(fd_api_out_t *o, size_t n);
void fd_api_out_sync(fd_api_out_t *o);
char *fd_api_out_resume(fd_api_out_t *o, size_t n);

static inline char *fd_api_out_room(fd_api_out_t *o, size_t n)
{
    return (size_t)(o->end - o->p) >= n ? o->p : fd_api_out_grow(o, n);
}

static inline void fd_api_out_add(fd_api_out_t *o, const void *data,
                                  size_t n)
{
    char *p = fd_api_out_room(o, n);

    if (p && n) {
        memcpy(p, data, n);
        o->p = p + n;
    }
}

#define fd_api_out_len(o) ((size_t)((o)->p - (o)->base))

/* --- 1.8: TLS to the group's servers (the proxy's proxy_ssl_*) ---------- */

/*
 * A location's TLS client options, opaque, in the configuration's memory:
 * set from the module's keys (from set, or from init_conf), then given to
 * the location's requests with fd_api_upstream_conf_tls(). *t NULL is
 * made at the first set, with the defaults nginx's proxy_ssl_* keys have
 * (verify on, the system's CA store, SNI on, TLSv1.2 TLSv1.3, OpenSSL's
 * DEFAULT ciphers, session reuse on).
 */
typedef struct fd_api_tls_client_s fd_api_tls_client_t;
enum {
    FD_API_TLS_VERIFY = 1,      /* on | off: the server's certificate and
                                 * name */
    FD_API_TLS_TRUSTED,         /* PEM CA certificates (path) */
    FD_API_TLS_CERTIFICATE,     /* PEM client certificate, then its chain */
    FD_API_TLS_CERTIFICATE_KEY, /* its PEM private key */
    FD_API_TLS_PROTOCOLS,       /* TLSv1.2 and/or TLSv1.3 */
    FD_API_TLS_CIPHERS,         /* TLS 1.2 ciphers, OpenSSL's syntax */
    FD_API_TLS_SERVER_NAME,     /* on | off: send the name as SNI */
    FD_API_TLS_SESSION_REUSE    /* on | off: offer a server its last
                                 * session */
};
/* Option opt of *t from value, as the key named key has it (a relative
 * path from the prefix; the files are read when the location's client is
 * made, their errors at this key's line). FD_OK, or FD_ERROR after the
 * error fastd reports. */
int fd_api_tls_client_set(fd_api_tls_client_t **t, int opt, const char *key,
                          const char *value);
/* c's requests go over TLS with options t (NULL: the defaults), the
 * server's certificate checked for name (a host name, also sent as SNI,
 * or an IP address); an FD_API_UPSTREAM_H2 protocol offers ALPN h2. The
 * group's health probes use the first TLS client given for it. Locations
 * with the same options and name share one client and its pooled
 * connections. FD_OK, or FD_ERROR after the error fastd reports (a file
 * that cannot be read). */
int fd_api_upstream_conf_tls(fd_api_upstream_conf_t *c,
                             const fd_api_tls_client_t *t, const char *name);
/* 1 when the group's servers are sent a PROXY protocol header first
 * ([upstream] proxy_protocol). */
int fd_api_upstream_proxy_protocol(const fd_api_upstream_t *up);

/* --- 1.9: a request that never started (the proxy's cache) --- */

/* From the module's on_abort (fd_req_on_abort) while it holds u's request
 * before fd_api_upstream_start() (a cache's wait on another request's
 * fill): the client left, u ends with it, without a try: the protocol's
 * release hook runs, and nothing of the engine's reaches u after. Nothing
 * for a request that ended already. */
void fd_api_upstream_cancel(fd_api_upstream_req_t *u);

#ifdef __cplusplus
}
#endif

#endif /* FASTD_UPSTREAM_H */
