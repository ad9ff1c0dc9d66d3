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
 * modules/fd_fastcgi_module.c is FastCGI on this header.
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

#ifdef __cplusplus
}
#endif

#endif /* FASTD_UPSTREAM_H */
