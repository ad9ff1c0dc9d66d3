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
    /* in feedq: a complete body waits for its next piece */
    fd_http_conn_t *feed_next, **feed_prev;
    unsigned feed_queued;
};

/* fd_http.c */
int fd_http_flush(fd_connection_t *c);

/* fd_http_output.c */
int fd_http_error_detail(fd_request_t *r, int status, const char *detail);
void fd_http_access_count(fd_request_t *r);
void fd_http_finalize(fd_request_t *r, int rc);
void fd_http_feed_unlink(fd_http_conn_t *h);

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
    fd_http_access_count(r);
    r->done = 1;
    c->requests++;
    if (!r->keepalive)
        c->closing = 1;
    if (h->r == r)
        h->r = NULL;
}

#endif
