#ifndef FD_HTTP_STREAM_H
#define FD_HTTP_STREAM_H

/*
 * The request mapping every multiplexed protocol shares: HTTP/2
 * (fd_http2.c, on nghttp2) and HTTP/3 (fd_http3.c, on nghttp3) turn a
 * stream into the same fd_request_t, so the fields of its header block,
 * its DATA and its response header go through these. What differs (the
 * library's calls, flow-control credit, extended CONNECT) stays with the
 * protocol: each call here does its part and leaves the rest to it.
 * Private to the two; modules see none of it.
 */
#include "fd_http_int.h"

/* A stream's request header block, field by field. */
typedef struct {
    size_t hdr_bytes;          /* as SETTINGS_MAX_HEADER_LIST_SIZE counts */
    int bad;                   /* an HTTP status for the request, or 0 */
    fd_str_t cookie;           /* the cookie fields, joined */
    size_t cookie_cap;         /* cookie.data's size: it grows by doubling,
                                * so k fields cost O(total), not O(k^2) */
} fd_http_sreq_t;

/* DATA not yet taken by the request: data[pos, len) of cap bytes. */
typedef struct {
    char *data;
    size_t pos, len, cap;
} fd_http_sbuf_t;

/*
 * A response field as nghttp2_nv and nghttp3_nv both lay it out (their
 * public ABI: the same members in the same order, and the same NO_COPY
 * flag bits); each protocol file checks that at compile time and hands
 * the array to its library as its own type.
 */
typedef struct {
    const uint8_t *name;
    const uint8_t *value;
    size_t namelen;
    size_t valuelen;
    uint8_t flags;
} fd_http_nv_t;

#define FD_HTTP_NV_NO_COPY_NAME 0x02
#define FD_HTTP_NV_NO_COPY_VALUE 0x04

/* In the protocol's file: fd_http_nv_t is its library's nv, with these
 * flags. */
#define FD_HTTP_NV_IS(nv, no_copy_name, no_copy_value) \
    _Static_assert(sizeof(fd_http_nv_t) == sizeof(nv) && \
                   offsetof(fd_http_nv_t, name) == offsetof(nv, name) && \
                   offsetof(fd_http_nv_t, value) == offsetof(nv, value) && \
                   offsetof(fd_http_nv_t, namelen) == \
                       offsetof(nv, namelen) && \
                   offsetof(fd_http_nv_t, valuelen) == \
                       offsetof(nv, valuelen) && \
                   offsetof(fd_http_nv_t, flags) == offsetof(nv, flags) && \
                   FD_HTTP_NV_NO_COPY_NAME == (no_copy_name) && \
                   FD_HTTP_NV_NO_COPY_VALUE == (no_copy_value), \
                   "fd_http_nv_t is not " #nv)

/* A cookie field, joined to the others with "; " (RFC 9113 8.2.3, RFC
 * 9114 4.2.1); v is r's pool's copy. FD_OK, or 500. */
int fd_http_stream_cookie(fd_request_t *r, fd_http_sreq_t *sq, fd_str_t v);

static inline fd_str_t fd_http_stream_copy(fd_pool_t *pool, const uint8_t *p,
                                           size_t n)
{
    char *d = fd_pnalloc(pool, n + 1);

    if (d == NULL)
        return fd_null_string;
    memcpy(d, p, n);
    d[n] = '\0';
    return (fd_str_t){n, d};
}

/*
 * One field of the request's header block (not of trailers: they are not
 * kept): counted against http2_max_header_size, copied to r's pool, the
 * pseudo-fields (the library checked their order and set) to the request
 * line, cookies joined, a Host beside :authority checked. A field the
 * request cannot take sets sq->bad; :protocol goes to *protocol when the
 * protocol has extended CONNECT (protocol not NULL). Inline: it runs for
 * each field of each request, inside the library's callback.
 */
static inline void fd_http_stream_field(fd_request_t *r, fd_http_sreq_t *sq,
                                         const uint8_t *name, size_t nlen,
                                         const uint8_t *value, size_t vlen,
                                         fd_str_t *protocol)
{
    fd_http_req_t *in = &r->in;
    fd_str_t n, v;
    int rc = FD_OK;

    sq->hdr_bytes += nlen + vlen + 32;
    if (sq->hdr_bytes > fd_worker->cycle->http.http2_max_header_size) {
        /* the field compression keeps decoding (its table must stay
         * right); nothing more is kept, and the request is answered 431 */
        sq->bad = 431;
        return;
    }
    if (sq->bad)
        return;
    n = fd_http_stream_copy(r->pool, name, nlen);
    v = fd_http_stream_copy(r->pool, value, vlen);
    if (n.data == NULL || v.data == NULL) {
        sq->bad = 500;
        return;
    }
    if (nlen && name[0] == ':') {
        /* the library checked the pseudo-fields: each once, before the
         * rest */
        if (fd_str_eq_lit(n, ":method"))
            rc = fd_http_req_method(in, v.data, v.len);
        else if (fd_str_eq_lit(n, ":path"))
            rc = fd_http_req_path(in, v.data, v.len);
        else if (protocol && fd_str_eq_lit(n, ":protocol"))
            *protocol = v;
        else if (fd_str_eq_lit(n, ":authority")) {
            rc = fd_http_parse_host(v, &in->host, r->pool);
            in->host_seen = 1;
            in->host_from_target = 1; /* a Host field does not replace it */
        }
    } else if (fd_str_eq_lit(n, "cookie")) {
        rc = fd_http_stream_cookie(r, sq, v);
    } else if (in->host_from_target && fd_str_eq_lit(n, "host")) {
        /* RFC 9113 8.3.1: a host field beside :authority must say the
         * same host; one that differs is malformed (400, as nginx), so
         * that no module routed on one can hand on the other */
        fd_str_t h;

        rc = fd_http_parse_host(v, &h, r->pool);
        if (rc == FD_OK && !fd_str_caseeq(h, in->host.data, in->host.len))
            rc = 400;
        if (rc == FD_OK)
            rc = fd_http_req_header(in, n, v);
    } else {
        rc = fd_http_req_header(in, n, v);
    }
    if (rc != FD_OK)
        sq->bad = rc;
}

/*
 * The header block is complete (r->phase is PH_HANDLER): r is checked and
 * goes to the engine, or is answered sq->bad. no_body: the block ended
 * the stream.
 */
void fd_http_stream_start(fd_request_t *r, fd_http_sreq_t *sq, int no_body);

/* len bytes of DATA to the end of b; FD_ERROR: out of memory. */
int fd_http_sbuf_add(fd_http_sbuf_t *b, const uint8_t *data, size_t len);

/* Up to size of b's bytes into buf; how many. */
size_t fd_http_sbuf_take(fd_http_sbuf_t *b, char *buf, size_t size);

/*
 * A buffered body (PH_BODY): b's bytes go to r->body, and b is emptied.
 * Returns how many it took (the caller gives their flow-control credit
 * back), or (size_t)-1 when r was answered (413, 500) instead.
 */
size_t fd_http_stream_body_take(fd_request_t *r, fd_http_sbuf_t *b);

/* The buffered body is complete: checked against Content-Length, and the
 * handler runs. */
void fd_http_stream_body_end(fd_request_t *r);

/*
 * The stream closed under r, a request a module still runs (r->done is
 * 0): r is aborted through r->on_abort, 0; or its module cannot be
 * stopped (offloaded, async), 1: the caller keeps the stream until
 * r finishes (fd_h2_finish, fd_h3_finish).
 */
int fd_http_stream_abort(fd_request_t *r);

/* Request pools a protocol keeps for reuse: a 4 KB pool is past malloc's
 * per-thread cache, and 3200 streams in flight made malloc a fifth of
 * the worker's time (consolidating its free chunks). */
typedef struct {
    fd_pool_t **kept;
    unsigned n, max;
} fd_http_pools_t;

static inline fd_pool_t *fd_http_stream_pool(fd_http_pools_t *pp)
{
    return pp->n ? pp->kept[--pp->n] : fd_pool_create(4096);
}

/* The stream's struct is done with r: r's pool goes back to pp (or is
 * destroyed, when it grew or pp is full), and r with it. */
void fd_http_stream_release(fd_request_t *r, fd_http_pools_t *pp);

/*
 * The head of a stream's struct, one for both protocols: fd_http2.c's
 * h2s_t and fd_http3.c's h3s_t begin with it, and r->h2 points at it. Its
 * request, the header block and the DATA not yet taken, the response's
 * state, its places in the connection's lists: what handles these is
 * written once, below and in fd_http_stream.c. What needs the protocol's
 * library comes in as a function of the protocol's, a constant at each
 * call, so the inline calls below call it directly.
 */
typedef struct fd_http_shead_s fd_http_shead_t;
struct fd_http_shead_s {
    fd_request_t *r;           /* NULL once the stream let it go */
    int64_t id;
    /* request side */
    fd_http_sreq_t sq;         /* the header block */
    fd_http_sbuf_t ib;         /* DATA not yet taken by the request */
    /* the connection's lists of streams (open, closed, orphans) and its
     * run queue */
    fd_http_shead_t *next, **prev;
    fd_http_shead_t *run_next;
    /* response side */
    fd_http_rate_t rate;       /* limit_rate of the response's body */
    fd_timer_t rate_timer;     /* deferred by it: resume then */
    unsigned in_ended:1;       /* the client's body ended (END_STREAM, FIN) */
    unsigned no_body:1;        /* ... with the header block */
    unsigned started:1;        /* the request went to the engine */
    unsigned provider:1;       /* the response has a body to send */
    unsigned out_end:1;        /* the body is all queued */
    unsigned deferred:1;       /* the body's reader waits for bytes */
    unsigned closed:1;         /* the library closed the stream */
    unsigned orphan:1;         /* closed while a module holds r */
    unsigned queued:1;         /* in the run queue */
    unsigned job_start:1, job_body:1, job_drain:1; /* queued for these */
};

/* A protocol's: flow-control credit back for n bytes of sh's DATA, taken
 * by the request or read by nobody. */
typedef void (*fd_http_consume_pt)(fd_http_shead_t *sh, size_t n);

/* Stream structs kept for reuse, up to max. */
typedef struct {
    fd_http_shead_t *head;
    unsigned n, max;
} fd_http_sfree_t;

static inline fd_http_shead_t *fd_http_sfree_get(fd_http_sfree_t *f)
{
    fd_http_shead_t *sh = f->head;

    if (sh) {
        f->head = sh->next;
        f->n--;
    }
    return sh;
}

/* 0: f is full, the caller frees sh. */
static inline int fd_http_sfree_put(fd_http_sfree_t *f, fd_http_shead_t *sh)
{
    if (f->n >= f->max)
        return 0;
    sh->next = f->head;
    f->head = sh;
    f->n++;
    return 1;
}

/* sh (cleared) gets its request, on c with a pool of pp's; r->h2 is sh.
 * FD_ERROR: no memory. */
int fd_http_shead_init(fd_http_shead_t *sh, fd_connection_t *c,
                       fd_http_pools_t *pp, int64_t id, int version);

/* A connection's streams with jobs to run, in order. */
typedef struct {
    fd_http_shead_t *head, **last;
} fd_http_srun_t;

/* sh (its job_* set) joins q unless it is in it: 1 when it joined. */
static inline int fd_http_srun_add(fd_http_srun_t *q, fd_http_shead_t *sh)
{
    if (sh->queued)
        return 0;
    sh->queued = 1;
    sh->run_next = NULL;
    *q->last = sh;
    q->last = &sh->run_next;
    return 1;
}

/* The first of q, taken off it; NULL: none. */
static inline fd_http_shead_t *fd_http_srun_take(fd_http_srun_t *q)
{
    fd_http_shead_t *sh = q->head;

    if (sh == NULL)
        return NULL;
    q->head = sh->run_next;
    if (q->head == NULL)
        q->last = &q->head;
    sh->queued = 0;
    return sh;
}

/* DATA or its end came: when the request takes it now (a buffered or a
 * streamed body), sh is marked for a job_body, 1: the protocol queues
 * it. */
static inline int fd_http_shead_body_job(fd_http_shead_t *sh)
{
    if (!sh->started || sh->r == NULL ||
        (sh->r->phase != PH_BODY && sh->r->phase != PH_STREAM))
        return 0;
    sh->job_body = 1;
    return 1;
}

/* The header block is complete: the request goes to the engine (or is
 * answered sh->sq.bad). */
static inline void fd_http_shead_begin(fd_http_shead_t *sh)
{
    sh->started = 1;
    sh->r->phase = PH_HANDLER;
    fd_http_stream_start(sh->r, &sh->sq, sh->no_body);
}

/* A buffered body (PH_BODY): what came to r->body, its credit back; the
 * handler at its end. */
static inline void fd_http_shead_feed(fd_http_shead_t *sh,
                                      fd_http_consume_pt consume)
{
    size_t n = fd_http_stream_body_take(sh->r, &sh->ib);

    if (n == (size_t)-1)
        return;
    if (n)
        consume(sh, n);
    if (sh->in_ended)
        fd_http_stream_body_end(sh->r);
}

/* The DATA the request did not take goes (the response ended without it,
 * or the stream closed), its credit back. */
static inline void fd_http_shead_drop(fd_http_shead_t *sh,
                                      fd_http_consume_pt consume)
{
    if (sh->ib.len > sh->ib.pos) {
        consume(sh, sh->ib.len - sh->ib.pos);
        sh->ib.pos = sh->ib.len = 0;
    }
}

/*
 * sh's jobs, taken off the run queue (open, r set): its request starts
 * (begin: fd_http_shead_begin, or the protocol's before it), its body is
 * fed or its module told of more, its producer told the output drained;
 * each only while the stream stays open and r is not done.
 */
static inline void fd_http_shead_run(fd_http_shead_t *sh,
                                     void (*begin)(fd_http_shead_t *sh),
                                     fd_http_consume_pt consume)
{
    fd_request_t *r = sh->r;

    if (sh->job_start) {
        sh->job_start = 0;
        begin(sh);
    }
    if (sh->closed || r->done)
        return;
    if (sh->job_body) {
        sh->job_body = 0;
        if (r->phase == PH_BODY)
            fd_http_shead_feed(sh, consume);
        else if (r->phase == PH_STREAM && r->on_body)
            r->on_body(r);
    }
    if (sh->closed || r->done)
        return;
    if (sh->job_drain) {
        sh->job_drain = 0;
        if (r->on_drain)
            r->on_drain(r);
    }
}

/*
 * The library closed sh (its end, a reset, the connection gone): it is
 * unlinked, the DATA nobody will read goes back to the connection's
 * credit (give), and the request is stopped if a module still runs it.
 * 1: the module cannot be stopped (fd_http_stream_abort), sh is an
 * orphan the protocol keeps until r finishes; 0: sh may go.
 */
int fd_http_shead_closed(fd_http_shead_t *sh, fd_http_consume_pt give);

/* The response header's fields (fd_http_stream_fields) for sh's request,
 * its limit_rate started and sh->provider set; NULL: no memory. */
fd_http_nv_t *fd_http_shead_header(fd_http_shead_t *sh, size_t *n);

/* fd_request_finish() of sh's request: 1 when sh is an orphan (nothing to
 * answer: the protocol lets it go), else r is finalized, 0. */
int fd_http_shead_finish(fd_http_shead_t *sh, int rc);

/* fd_http_body_pull() on sh: up to size bytes of its DATA, their credit
 * back; 0 at the body's end, FD_AGAIN: none yet. */
ssize_t fd_http_shead_pull(fd_http_shead_t *sh, char *buf, size_t size,
                           fd_http_consume_pt consume);

/* limit_rate in a DATA source: the bytes that may leave now; 0: none, and
 * t, armed unless it is, calls wake when some may. */
size_t fd_http_stream_rate(fd_http_rate_t *rt, fd_timer_t *t,
                           void (*wake)(fd_timer_t *t));

/* Connection-specific fields, never sent over HTTP/2 or HTTP/3 (RFC 9113
 * 8.2.2, RFC 9114 4.2). */
int fd_http_stream_hop_field(fd_str_t n);

/*
 * The response header's fields for r, in r's pool: :status, then what
 * HTTP/1.1 would send in its order, names lower-cased, hop-by-hop fields
 * and ones holding CR, LF or NUL dropped. The library encodes them later
 * in the turn, so only what lives as long as the stream is left uncopied
 * (literals, the loop's Date, the pool, the configuration); a module's
 * fields (and the content type and ETag) it copies. NULL: no memory.
 */
fd_http_nv_t *fd_http_stream_fields(fd_request_t *r, size_t *n);

/* The response has a body to send as DATA (a complete empty one, or one
 * a status or HEAD forbids, needs none). */
static inline int fd_http_stream_has_body(const fd_request_t *r)
{
    return !r->header_only && r->status >= 200 && r->status != 204 &&
           r->status != 304 &&
           (r->streamed || r->body_filter || r->content_length != 0);
}

#endif
