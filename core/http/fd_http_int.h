#ifndef FD_HTTP_INT_H
#define FD_HTTP_INT_H

/*
 * Private to the HTTP engine (fd_http.c, the request side and the
 * connection state machine; fd_http_output.c, the response side): the
 * per-connection state and the calls between the two. Modules use
 * fd_http.h only.
 */
#include "fd_connection.h"
#include "fd_http.h"

#define OUT_HIGH_WATER (64 * 1024)   /* stop producing above it */

enum {
    PH_HEADER = 0,    /* parsing the request header */
    PH_BODY,          /* reading a buffered body */
    PH_HANDLER,       /* the handler owns it (async or offloaded) */
    PH_STREAM,        /* the handler pulls the body itself */
    PH_RESPONSE       /* streaming the response (header sent) */
};

/*
 * limit_rate: a response's bytes leave at rate bytes/s once `after` of
 * them have; the credit starts at one quantum (a tenth of a second's
 * worth, 1 to 64 KB) so the header and the first piece go at once, and a
 * sender that used its credit waits for a quantum more: at most about ten
 * wake-ups a second, each one a full segment or more.
 */
typedef struct {
    uint64_t rate;           /* bytes per second; 0: no limit */
    uint64_t after;
    uint64_t sent;           /* since start */
    fd_msec_t start;
} fd_http_rate_t;

/* From r's location (rate 0 when it has no limit_rate). */
void fd_http_rate_start(fd_http_rate_t *rt, const fd_request_t *r);
/* Bytes that may leave now. */
size_t fd_http_rate_allow(const fd_http_rate_t *rt);
/* ms until another quantum may leave (at least 1). */
fd_msec_t fd_http_rate_delay(const fd_http_rate_t *rt);

struct fd_http_conn_s {
    fd_pool_t *pool;
    char *rbuf;
    size_t rpos;             /* start of unparsed input */
    size_t rlast;            /* end of input */
    fd_request_t *r;         /* the request in progress */
    fd_outq_t out;
    fd_posted_t resume;
    unsigned resume_posted;  /* resume is in the posted list */
    fd_connection_t *c;
    fd_http_conn_t *next_free;
    struct fd_h2_conn_s *h2;  /* HTTP/2 on this connection (fd_http2.c) */
    fd_http_rate_t rate;      /* HTTP/1.1: the response's limit_rate */
    fd_timer_t rate_timer;    /* a limited flush goes on */
};

/* fd_http.c */
int fd_http_flush(fd_connection_t *c);
/* The header is in r->in: route, then the access phase and the handler. */
void fd_http_request_start(fd_request_t *r);
/* A new request on c, in pool (HTTP/2: one pool per stream). */
fd_request_t *fd_http_request_new(fd_connection_t *c, fd_pool_t *pool);
/* A routed request's access phase, then its handler. */
void fd_http_request_run(fd_request_t *r);
/* r's header slices copied out of the read buffer into r->pool. */
int fd_http_request_pin(fd_request_t *r);

/* fd_http_sub.c: a subrequest's response ended (rc: FD_OK, or the status
 * it failed with); its parent hears of it at the end of the turn. */
void fd_http_sub_end(fd_request_t *sr, int rc);

/*
 * fd_http2.c: a request an HTTP/2 stream carries (r->h2). The response
 * side calls these where HTTP/1.1 writes into the connection's queue.
 */
int fd_h2_start(fd_connection_t *c);       /* the connection speaks h2 now */
int fd_h2_header(fd_request_t *r);         /* HEADERS (the body follows) */
/* Body bytes for the stream's DATA frames: copied (the caller reuses
 * them), or referenced (memory or a file range valid until the request
 * is freed, which waits for the frames to leave). */
int fd_h2_body(fd_request_t *r, fd_buf_t *b, int copy);
void fd_h2_end(fd_request_t *r);           /* no more body: END_STREAM */
int fd_h2_flush(fd_request_t *r);          /* FD_OK, FD_ERROR: it is gone */
size_t fd_h2_pending(fd_request_t *r);     /* queued, not yet framed */
void fd_h2_cut(fd_request_t *r);           /* RST_STREAM INTERNAL_ERROR */
void fd_h2_resume(fd_request_t *r);        /* go on at the end of the turn */
void fd_h2_finish(fd_request_t *r, int rc);  /* fd_request_finish() */
int fd_h2_gone(fd_request_t *r);           /* its stream closed meanwhile */
ssize_t fd_h2_body_pull(fd_request_t *r, char *buf, size_t size);
void fd_h2_timeout(fd_connection_t *c);
void fd_h2_release(fd_connection_t *c);
int fd_h2_idle(fd_connection_t *c);
void fd_h2_quit(fd_connection_t *c);    /* a graceful stop: GOAWAY */
/* An extended CONNECT's stream (RFC 8441) becomes the side `to` of a
 * splice once its 200 is submitted: fd_http_detach() */
int fd_h2_detach(fd_request_t *r, fd_stream_t *to);

#ifdef FD_HTTP3
/* fd_http3.c: the same for a request an HTTP/3 stream carries (r->h3);
 * each fd_h2_* call above passes r on to its fd_h3_* twin, but for
 * fd_h2_gone() and fd_http_stream_id(), which read the stream's head
 * (fd_http_stream.h), the same for both */
int fd_h3_header(fd_request_t *r);
int fd_h3_body(fd_request_t *r, fd_buf_t *b, int copy);
void fd_h3_end(fd_request_t *r);
int fd_h3_flush(fd_request_t *r);
size_t fd_h3_pending(fd_request_t *r);
void fd_h3_cut(fd_request_t *r);
void fd_h3_resume(fd_request_t *r);
void fd_h3_finish(fd_request_t *r, int rc);
ssize_t fd_h3_body_pull(fd_request_t *r, char *buf, size_t size);
/* the QUIC connection's TLS session (fd_quic_tls_t), for the $ssl_*
 * variables and the handshake's server */
void *fd_h3_tls(const fd_request_t *r);
#define FD_H3_PASS(r, call) \
    if (fd_unlikely((r)->h3)) \
        return call
#else
#define FD_H3_PASS(r, call)
#endif

/* fd_http_output.c */
int fd_http_error_detail(fd_request_t *r, int status, const char *detail);
void fd_http_access_count(fd_request_t *r);
void fd_http_finalize(fd_request_t *r, int rc);
void fd_http_feed_unlink(fd_request_t *r);

/* Any CR, LF or NUL in s[0..n)? A response field holding one (say, a
 * decoded %0d%0a a module copied from the request) would end its line
 * and start one of the client's choosing: it is dropped, never sent. 8
 * bytes at a time: only a word with a byte below 0x20 is looked at byte
 * by byte. */
static inline int fd_http_field_bad(const char *s, size_t n)
{
    size_t i = 0, j;

    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        if (((x - 0x2020202020202020ULL) & ~x) & 0x8080808080808080ULL)
            for (j = i; j < i + 8; j++)
                if (s[j] == '\r' || s[j] == '\n' || s[j] == '\0')
                    return 1;
    }
    for (; i < n; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            return 1;
    return 0;
}

/* Post the connection's resume once: a posted entry is a list node, and
 * posting it twice in one turn would corrupt the list. */
static inline void post_resume(fd_http_conn_t *h)
{
    if (h->resume_posted)
        return;
    h->resume_posted = 1;
    fd_event_post(&h->resume);
}

/* Bytes copied into the connection's output queue. */
static inline int out_append(fd_http_conn_t *h, const void *data, size_t n)
{
    return fd_outq_append(&h->out, data, n);
}

/* The request r on c is over: it is counted and logged, the connection
 * closes after it unless kept alive, and may take the next. */
static inline void request_done(fd_connection_t *c, fd_http_conn_t *h,
                                fd_request_t *r)
{
    if (r->held && !r->response_done) {
        /* fd_http_respond_early(): the response is whole, the request
         * goes on until fd_request_finish() */
        r->response_done = 1;
        if (r->h2)
            fd_h2_end(r);
        return;
    }
    fd_http_access_count(r);
    r->done = 1;
    if (r->h2) {
        if (!r->response_done)
            fd_h2_end(r);
        return;
    }
    c->requests++;
    if (!r->keepalive)
        c->closing = 1;
    if (h->r == r)
        h->r = NULL;
}

#endif
