#ifndef FD_UPSTREAM_PROTO_H
#define FD_UPSTREAM_PROTO_H

#include "fd_core.h"
#include "fd_http.h"
#include "fd_sendq.h"
#include "fd_upstream.h"

/*
 * The upstream engine's interface for a backend protocol module: the
 * life of one request to an upstream group (fd_upstream_req.c) is the
 * engine's, what goes on the wire is the module's. See fd_upstream_req.c
 * for the design and why it is not nginx's callback set as such.
 *
 * The engine: choosing a server (fd_upstream_pick), connecting (TCP,
 * unix sockets, the PROXY header, TLS), the keep-alive pool, writing the
 * request header the module built and the client's body as the upstream
 * takes it (back-pressure both ways), reading into ibuf, the timeouts,
 * next_upstream retries, passive health, the streamed response's
 * back-pressure (fd_http_output's high water) and the client's abort.
 *
 * The module: builds u->hdr once (every attempt sends the same bytes),
 * frames body bytes (frame_body), and parses what ibuf holds (process):
 * the response header into r, then the body handed on with
 * fd_upstream_req_output() and ended with fd_upstream_req_last().
 *
 * Results of the steps: FD_OK (go on), FD_AGAIN (stop here: an event
 * resumes it; a new attempt began, or the client's output is full),
 * FD_DONE (it is over and u may be gone: touch nothing).
 */

#define FD_UPSTREAM_BUF 16384 /* response header limit, I/O block */
#define FD_UPSTREAM_LOG_TRIES 8 /* servers remembered for the log */

/* next_upstream: when a try goes on to the next server */
#define FD_UPSTREAM_NEXT_ERROR 0x01
#define FD_UPSTREAM_NEXT_TIMEOUT 0x02
#define FD_UPSTREAM_NEXT_502 0x04
#define FD_UPSTREAM_NEXT_503 0x08
#define FD_UPSTREAM_NEXT_504 0x10
#define FD_UPSTREAM_NEXT_NON_IDEMPOTENT 0x20 /* 1 << i: next_upstream's
                                              * i-th word */

/* next_upstream = VALUE (error timeout http_502 http_503 http_504
 * non_idempotent off) into *mask: FD_OK, or FD_ERROR after fd_conf_error */
int fd_upstream_parse_next(fd_conf_t *cf, const char *value, unsigned *mask);

/* What a location says of its upstream requests (in the module's
 * location conf, its keys' offsets pointing into it). */
typedef struct {
    fd_msec_t connect_timeout;  /* the TLS handshake too, as nginx */
    fd_msec_t send_timeout;
    fd_msec_t read_timeout;
    unsigned next_upstream;     /* FD_UPSTREAM_NEXT_* */
    fd_int_t next_upstream_tries; /* 0: no bound */
    int buffering;              /* gather up to 16k before handing on */
    void *ssl;                  /* fd_ssl_client_t: TLS; NULL: plain */
} fd_upstream_opts_t;

typedef struct fd_upstream_req_s fd_upstream_req_t;

/*
 * A protocol whose connections many requests share (HTTP/2: streams on a
 * few connections per server, fd_upstream_h2.c). The engine still picks
 * the server, counts the tries, retries and fails; the mux owns the
 * connections, their I/O and the timers of its streams, and calls back
 * the engine's verbs (fd_upstream_req_header, _output, _last, _fail,
 * _next, _refused) from its own events.
 */
typedef struct {
    /* A try on u->peer: take a stream (FD_OK; it goes on from events) or
     * fail over (FD_DONE: the engine's verbs were called). */
    int (*attach)(fd_upstream_req_t *u);
    /* The try ends: let go of the stream (reset it unless it ended). */
    void (*detach)(fd_upstream_req_t *u);
    /* The client took output (paused no more), or sent more body. */
    void (*resume)(fd_upstream_req_t *u);
} fd_upstream_mux_t;

/* HTTP/2, multiplexed (fd_upstream_h2.c) */
extern const fd_upstream_mux_t fd_upstream_h2_mux;

typedef struct {
    const char *what;           /* in log lines: "upstream", "FastCGI
                                 * upstream" */
    size_t body_head;           /* obuf bytes before the pulled body bytes */
    size_t body_room;           /* obuf bytes frame_body may add in all */
    /* n body bytes were pulled at obuf + body_head (n == 0: the body is
     * complete): frame them, setting opos, olen (and body_done once the
     * last frame is in). FD_OK, or the status the request fails with. */
    int (*frame_body)(fd_upstream_req_t *u, size_t n);
    /* Parse ibuf[ipos, ilast) (eof: the upstream closed after a
     * close-delimited body): FD_OK, FD_AGAIN, FD_DONE. */
    int (*process)(fd_upstream_req_t *u, int eof);
    /* Optional: the request is about to fail with status (502, 504...):
     * what it answers instead (FD_OK: the module answered, the cache's
     * stale entry). */
    int (*fail)(fd_upstream_req_t *u, int status);
    /* Optional: the request ends, whatever way: the module's state. */
    void (*release)(fd_upstream_req_t *u);
    /* Optional: a new try begins after a failed one (before the response
     * header was taken): the module's parse state back to its start. */
    void (*retry)(fd_upstream_req_t *u);
    /* A shared-connection protocol (frame_body and process unused): */
    const fd_upstream_mux_t *mux;
    /* its response header (the mux decoded it): into r as the module
     * wants it (FD_OK, or a status to fail with) */
    int (*fields)(fd_upstream_req_t *u, int status,
                  const fd_http_header_t *f, unsigned nf);
    unsigned grpc:1;            /* te: trailers; grpc-timeout */
} fd_upstream_proto_t;

typedef struct {
    fd_upstream_peer_t *peer;
    int status;                 /* 0: no response header */
    fd_msec_t msec;
} fd_upstream_try_t;

/* A request's upstream side: first in the module's request struct. */
struct fd_upstream_req_s {
    fd_request_t *r;
    const fd_upstream_proto_t *proto;
    const fd_upstream_opts_t *o;
    fd_upstream_t *up;
    const void *key;            /* the pool's: whose connections (TLS
                                 * client, module) */
    fd_upstream_conn_t *uc;
    fd_upstream_peer_t *peer;   /* of uc, counted active */
    uint64_t *tried;            /* bitmap over up->peers */
    uint32_t hash;
    unsigned tries;

    /* to the upstream */
    char *hdr;                  /* built once by the module */
    size_t hdr_len, hdr_sent;
    char *obuf;                 /* framed body bytes */
    size_t opos, olen;
    int64_t body_bytes;
    fd_sendop_t sop;            /* the first write, batched (fd_sendq.h) */

    /* from the upstream */
    char *ibuf;
    size_t ipos, ilast;
    size_t hscan;               /* the module's: where its scan of the
                                 * header resumes (0 at each try) */
    int64_t rest;               /* body bytes still to come, when the
                                 * module knows (-1: it does not) */
    fd_msec_t start;
    int rc;                     /* the handler's result when sync */

    unsigned sync:1;            /* inside the handler */
    unsigned done:1;
    unsigned paused:1;          /* the client's output is above high water */
    unsigned wait_body:1;       /* the client's body is late */
    unsigned has_body:1;
    unsigned body_done:1;       /* all of the body is framed in obuf */
    unsigned body_kept:1;       /* obuf holds all the body pulled so far
                                 * (sent again on a retry) */
    unsigned body_after_hdr:1;  /* pull the body once the header left */
    unsigned req_sent:1;        /* this attempt wrote all of the request */
    unsigned written:1;         /* some attempt wrote some of it */
    unsigned pulled:1;          /* body bytes were taken from the client */
    unsigned got:1;             /* this attempt received a byte */
    unsigned idempotent:1;
    unsigned careful:1;         /* an idle connection is checked first */
    unsigned header_done:1;     /* the response header was taken */
    unsigned close_delimited:1; /* the body ends with the connection */
    unsigned timed_out:1;       /* the last failed try timed out */
    unsigned invalid:1;         /* the last failed try sent nonsense */
    unsigned bg:1;              /* the client has its response: retries
                                 * are still allowed (a cache update) */

    void *stream;               /* the mux's stream, while a try has one */
    void *tunnel;               /* after a 101, until the client's socket
                                 * is taken (fd_upstream_tunnel.c) */
    unsigned refused;           /* tries not processed (bounded) */
    fd_msec_t read_timeout;     /* 0: o's (gRPC: the client's deadline
                                 * may shorten it) */

    fd_upstream_try_t log[FD_UPSTREAM_LOG_TRIES];
    unsigned nlog;
};

/* The handler's: u (zeroed, in r->pool, tried words after the module's
 * struct) set up for r, up, o, proto; its method's idempotence and body
 * known. Then the module builds u->hdr. */
int fd_upstream_req_init(fd_upstream_req_t *u, fd_request_t *r,
                         fd_upstream_t *up, const fd_upstream_opts_t *o,
                         const fd_upstream_proto_t *proto, uint64_t *tried);
/* Bytes for n tried words after a module's struct of size. */
#define fd_upstream_req_size(size, up)                                       \
    ((size) + fd_upstream_tried_words(up) * sizeof(uint64_t))
/* The first try: the handler's result (FD_AGAIN, or a status). */
int fd_upstream_req_start(fd_upstream_req_t *u);

/* The module's calls while it parses the response. */
/* The response header came (status): logged, timed, passive health;
 * next_upstream http_5xx tried here: FD_AGAIN when a new try began. */
int fd_upstream_req_header(fd_upstream_req_t *u, int status);
/* Body bytes for the client: FD_OK, FD_AGAIN (paused until the output
 * drains), FD_DONE (the client is gone). */
int fd_upstream_req_output(fd_upstream_req_t *u, fd_buf_t *chain);
/* The last of the body (chain may be NULL); reuse: the connection goes
 * back to the pool. FD_DONE. */
int fd_upstream_req_last(fd_upstream_req_t *u, fd_buf_t *chain, int reuse);
/* The upstream broke the protocol: logged, counted, 502 (or a cut). */
int fd_upstream_req_invalid(fd_upstream_req_t *u, const char *why);
/* The request fails: an error page with status, or a cut connection
 * once the header left (the module's fail hook first). FD_DONE. */
int fd_upstream_req_fail(fd_upstream_req_t *u, int status);
/* The upstream side is over: the request ends with rc. FD_DONE. */
int fd_upstream_req_end(fd_upstream_req_t *u, int rc);
/* u, never started, ends without a try (fd_api_upstream_cancel) */
void fd_upstream_req_cancel(fd_upstream_req_t *u);
/* A mux's try failed (ft: FD_UPSTREAM_NEXT_ERROR or _TIMEOUT): counted
 * against the server, then the next one or the error page. FD_DONE when
 * the request is over. */
int fd_upstream_req_next(fd_upstream_req_t *u, unsigned ft, int err,
                         const char *what);
/* A mux's try the server did not process (REFUSED_STREAM, a GOAWAY
 * above it): again, on a new stream, uncounted when the body can go
 * again; else as fd_upstream_req_next. */
int fd_upstream_req_refused(fd_upstream_req_t *u, const char *what);
/* A mux's stream wants body bytes for the upstream at buf: n, 0 (the
 * body is over), FD_AGAIN (r->on_body resumes the mux), or FD_ERROR with
 * the status the request must fail with (the caller fails it outside the
 * mux's library callbacks). */
ssize_t fd_upstream_req_body(fd_upstream_req_t *u, char *buf, size_t size,
                             int *status);
/* After a 101 whose response the module set in r: the server's stream
 * (and what it sent past the header) and the client's are spliced both
 * ways, until both ended, one failed, or idle passed with no byte (0:
 * an hour). FD_AGAIN while the response is written (the request waits),
 * FD_DONE (a tunnel; or it failed). */
int fd_upstream_req_tunnel(fd_upstream_req_t *u, fd_msec_t idle);
/* A tunnel whose client side was not yet taken (the request ended). */
void fd_upstream_tunnel_free(void *tunnel);
/* Let go of the connection (into the pool when reuse) and its server. */
void fd_upstream_req_release_conn(fd_upstream_req_t *u, int reuse);
/* Give back the I/O blocks. */
void fd_upstream_req_release_bufs(fd_upstream_req_t *u);

#ifdef FASTD_UPSTREAM_H
/* The engine's request under fastd_upstream.h's (fd_api_upstream.c), for
 * the proxy's cache, which is not on the API yet. */
fd_upstream_req_t *fd_upstream_api_engine(fd_api_upstream_req_t *u);
#endif

#endif
