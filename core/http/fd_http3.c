/*
 * HTTP/3 for clients (RFC 9114) on nghttp3, over fd_quic.c's connections:
 * framing and QPACK are nghttp3's; this file turns each request stream
 * into the same fd_request_t HTTP/1.1 and HTTP/2 make, routed and run by
 * the same engine, so every handler and module serves it unchanged. It
 * follows fd_http2.c's shape: the engine's response side calls fd_h2_*,
 * which pass a request with r->h3 set to the fd_h3_* twins here.
 *
 *   header  -> nghttp3_conn_submit_response(), with a data reader when a
 *              body follows;
 *   body    -> the stream's queue of pieces (copied bytes, referenced
 *              memory, file ranges read a piece at a time: never whole in
 *              memory), handed to nghttp3 by the reader and kept until
 *              the client acknowledges them (QUIC retransmits from them);
 *              at most H3_UNACKED_MAX unacknowledged per stream;
 *   flush   -> the connection writes at the end of the loop turn.
 *
 * Request bodies: DATA goes into the stream's input buffer; QUIC's flow
 * control credit is given back only as the request takes the bytes, so
 * a streamed upload (the proxy) is paced by its reader, as over HTTP/2.
 *
 * A request a module still holds when its stream or connection goes is
 * aborted through r->on_abort, or, when the module cannot be stopped,
 * kept (with the connection struct: qc->refs) until it finishes.
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#define FD_QUIC_PRIVATE
#include "fd_http_stream.h"
#include "fd_quic.h"

#define H3_UNACKED_MAX (1024 * 1024) /* handed to QUIC, not yet acked */
#define H3_FILE_PIECE (64 * 1024)     /* a file range is read this much at
                                       * a time */
#define H3_POOL_KEEP 256              /* request pools kept for reuse */
#define H3_STREAM_KEEP 1024           /* and stream structs */

typedef struct h3buf_s h3buf_t;
struct h3buf_s {
    h3buf_t *next;
    const uint8_t *pos;      /* memory: its bytes; NULL: a file range */
    size_t len;
    int fd;                  /* a file range: len bytes at off */
    off_t off;
    uint8_t *own;            /* a copy of ours, freed once acked */
};

typedef struct fd_h3_stream_s h3s_t;

struct fd_h3_stream_s {
    fd_http_shead_t sh;        /* first: r->h2 is its address */
    fd_h3_conn_t *hc;          /* NULL: the connection is gone */
    /* response side */
    h3buf_t *pend, **pend_last; /* not yet handed to nghttp3 */
    h3buf_t *sent, **sent_last; /* handed, not yet acknowledged */
    size_t pend_bytes, sent_bytes;
    fd_quic_conn_t *held;      /* an orphan's connection, gone: its
                                * struct waits for this request */
    unsigned rst_spent:1;      /* its reset counted (rst_spend) */
};

/* the stream whose head sh is (its first member) */
#define H3S(sh) ((h3s_t *)(void *)(sh))

struct fd_h3_conn_s {
    nghttp3_conn *h3;
    fd_quic_conn_t *qc;
    fd_http_shead_t *streams, *orphans; /* open; closed, a module's */
    fd_http_srun_t run;
    unsigned nstreams;
    unsigned nrequests;
    int rst_budget;            /* resets of unanswered requests the
                                * client may still send (rapid reset) */
};

static const nghttp3_callbacks h3_callbacks;

/* A stream's struct and its request's pool are taken from these and go
 * back to them, as HTTP/2's: a 4 KB pool is past malloc's per-thread
 * cache, and 3200 streams in flight made malloc a fifth of the worker's
 * time (consolidating its free chunks) */
static fd_http_sfree_t free_streams = {NULL, 0, H3_STREAM_KEEP};
static fd_pool_t *pools_kept[H3_POOL_KEEP];
static fd_http_pools_t free_pools = {pools_kept, 0, H3_POOL_KEEP};

/* --- pieces of a response body --- */

static void buf_free_list(h3buf_t *b)
{
    while (b) {
        h3buf_t *n = b->next;
        fd_quic_free(b->own);
        fd_quic_free(b);
        b = n;
    }
}

static int buf_add(h3s_t *st, const uint8_t *pos, size_t len, int fd,
                   off_t off, int copy)
{
    h3buf_t *b = fd_quic_alloc(sizeof(*b));

    if (b == NULL)
        return FD_ERROR;
    b->next = NULL;
    b->own = NULL;
    b->fd = fd;
    b->off = off;
    b->len = len;
    b->pos = pos;
    if (copy) {
        if ((b->own = fd_quic_alloc(len)) == NULL) {
            fd_quic_free(b);
            return FD_ERROR;
        }
        memcpy(b->own, pos, len);
        b->pos = b->own;
    }
    *st->pend_last = b;
    st->pend_last = &b->next;
    st->pend_bytes += len;
    return FD_OK;
}

/* --- streams --- */

static void stream_job(h3s_t *st)
{
    if (st->hc && fd_http_srun_add(&st->hc->run, &st->sh))
        fd_quic_post(st->hc->qc);
}

static void stream_put(h3s_t *st)
{
    if (!fd_http_sfree_put(&free_streams, &st->sh))
        free(st);
}

static h3s_t *stream_new(fd_h3_conn_t *hc, int64_t id)
{
    h3s_t *st = H3S(fd_http_sfree_get(&free_streams));

    if (st)
        memset(st, 0, sizeof(*st));
    else if ((st = calloc(1, sizeof(*st))) == NULL)
        return NULL;
    if (fd_http_shead_init(&st->sh, &hc->qc->c, &free_pools, id, 30) !=
        FD_OK) {
        stream_put(st);
        return NULL;
    }
    st->sh.r->h3 = 1;
    st->hc = hc;
    st->pend_last = &st->pend;
    st->sent_last = &st->sent;
    FD_LIST_LINK(&hc->streams, &st->sh);
    hc->nstreams++;
    return st;
}

static void stream_free(h3s_t *st)
{
    fd_request_t *r = st->sh.r;
    fd_quic_conn_t *held = st->hc ? NULL : st->held;

    FD_LIST_UNLINK(&st->sh);
    if (r)
        fd_http_stream_release(r, &free_pools);
    buf_free_list(st->pend);
    buf_free_list(st->sent);
    if (fd_timer_armed(&st->sh.rate_timer))
        fd_timer_del(&st->sh.rate_timer);
    free(st->sh.ib.data);
    stream_put(st);
    if (held)
        fd_quic_unref(held);
}

/* Flow control credit for n body bytes the request took (or nobody
 * will read). */
static void consume(fd_h3_conn_t *hc, int64_t id, size_t n, int stream)
{
    if (n == 0 || hc == NULL)
        return;
    if (stream)
        ngtcp2_conn_extend_max_stream_offset(hc->qc->conn, id, n);
    ngtcp2_conn_extend_max_offset(hc->qc->conn, n);
    fd_quic_post(hc->qc);
}

/* the same for fd_http_stream.h's calls: the stream's and the
 * connection's credit, or (consume_conn) the connection's alone */
static void consume_stream(fd_http_shead_t *sh, size_t n)
{
    consume(H3S(sh)->hc, sh->id, n, 1);
}

static void consume_conn(fd_http_shead_t *sh, size_t n)
{
    consume(H3S(sh)->hc, sh->id, n, 0);
}

/*
 * nghttp3 closed the stream (its end, a reset either way, the connection
 * gone). The request is stopped if a module still runs it, or kept until
 * the module finishes it (freed then: fd_h3_finish).
 */
static void stream_closed(h3s_t *st)
{
    st->hc->nstreams--;
    if (fd_http_shead_closed(&st->sh, consume_conn))
        FD_LIST_LINK(&st->hc->orphans, &st->sh);
    else
        stream_free(st);
}

/* --- the request side --- */

static int begin_headers(nghttp3_conn *conn, int64_t id, void *ud, void *sud)
{
    fd_h3_conn_t *hc = ud;
    h3s_t *st;

    (void)sud;
    st = stream_new(hc, id);
    if (st == NULL) {
        ngtcp2_conn_shutdown_stream(hc->qc->conn, 0, id,
                                    NGHTTP3_H3_INTERNAL_ERROR);
        return 0;
    }
    nghttp3_conn_set_stream_user_data(conn, id, st);
    /* ngtcp2's too: a RESET_STREAM names its request (rapid reset) */
    ngtcp2_conn_set_stream_user_data(hc->qc->conn, id, st);
    fd_stats->quic_streams++;
    hc->nrequests++;
    hc->qc->c.requests = hc->nrequests; /* $connection_requests */
    return 0;
}

static int recv_header(nghttp3_conn *conn, int64_t id, int32_t token,
                       nghttp3_rcbuf *name, nghttp3_rcbuf *value,
                       uint8_t flags, void *ud, void *sud)
{
    h3s_t *st = sud;
    nghttp3_vec nb = nghttp3_rcbuf_get_buf(name);
    nghttp3_vec vb = nghttp3_rcbuf_get_buf(value);

    (void)conn;
    (void)id;
    (void)token;
    (void)flags;
    (void)ud;
    if (st == NULL || st->sh.started)
        return 0;
    fd_http_stream_field(st->sh.r, &st->sh.sq, nb.base, nb.len, vb.base,
                         vb.len, NULL);
    return 0;
}

static int end_headers(nghttp3_conn *conn, int64_t id, int fin, void *ud,
                       void *sud)
{
    h3s_t *st = sud;

    (void)conn;
    (void)id;
    (void)ud;
    if (st == NULL || st->sh.started)
        return 0;
    if (fin)
        st->sh.in_ended = st->sh.no_body = 1;
    st->sh.job_start = 1;
    stream_job(st);
    return 0;
}

static int recv_data(nghttp3_conn *conn, int64_t id, const uint8_t *data,
                     size_t len, void *ud, void *sud)
{
    fd_h3_conn_t *hc = ud;
    h3s_t *st = sud;

    (void)conn;
    if (st == NULL || st->sh.r == NULL || st->sh.r->done) {
        consume(hc, id, len, 1); /* nobody reads it */
        return 0;
    }
    if (fd_http_sbuf_add(&st->sh.ib, data, len) != FD_OK)
        return NGHTTP3_ERR_CALLBACK_FAILURE;
    if (fd_http_shead_body_job(&st->sh))
        stream_job(st);
    return 0;
}

static int end_stream(nghttp3_conn *conn, int64_t id, void *ud, void *sud)
{
    h3s_t *st = sud;

    (void)conn;
    (void)id;
    (void)ud;
    if (st == NULL)
        return 0;
    st->sh.in_ended = 1;
    if (fd_http_shead_body_job(&st->sh))
        stream_job(st);
    return 0;
}

static int deferred_consume(nghttp3_conn *conn, int64_t id, size_t n,
                            void *ud, void *sud)
{
    (void)conn;
    (void)sud;
    consume(ud, id, n, 1);
    return 0;
}

static int h3_stream_close(nghttp3_conn *conn, int64_t id, uint64_t code,
                           void *ud, void *sud)
{
    fd_h3_conn_t *hc = ud;
    h3s_t *st = sud;

    (void)conn;
    (void)code;
    /* a request stream ended: the client may open one more */
    if (ngtcp2_is_bidi_stream(id))
        ngtcp2_conn_extend_max_streams_bidi(hc->qc->conn, 1);
    if (st)
        stream_closed(st);
    return 0;
}

static int stop_sending(nghttp3_conn *conn, int64_t id, uint64_t code,
                        void *ud, void *sud)
{
    fd_h3_conn_t *hc = ud;

    (void)conn;
    (void)sud;
    ngtcp2_conn_shutdown_stream_read(hc->qc->conn, 0, id, code);
    return 0;
}

static int reset_stream(nghttp3_conn *conn, int64_t id, uint64_t code,
                        void *ud, void *sud)
{
    fd_h3_conn_t *hc = ud;
    h3s_t *st = sud;

    (void)conn;
    if (st)
        st->rst_spent = 1; /* ours, not the client's */
    ngtcp2_conn_shutdown_stream_write(hc->qc->conn, 0, id, code);
    return 0;
}

/* The client acknowledged len more bytes of the stream's body. */
static int acked_stream_data(nghttp3_conn *conn, int64_t id, uint64_t len,
                             void *ud, void *sud)
{
    h3s_t *st = sud;

    (void)conn;
    (void)id;
    (void)ud;
    if (st == NULL)
        return 0;
    while (len && st->sent) {
        h3buf_t *b = st->sent;
        size_t k = (size_t)fd_min((uint64_t)b->len, len);
        b->pos += k;
        b->len -= k;
        st->sent_bytes -= k;
        len -= k;
        if (b->len == 0) {
            st->sent = b->next;
            if (st->sent == NULL)
                st->sent_last = &st->sent;
            fd_quic_free(b->own);
            fd_quic_free(b);
        }
    }
    if (st->sh.deferred && st->sent_bytes < H3_UNACKED_MAX / 2 &&
        (st->pend || st->sh.out_end)) {
        st->sh.deferred = 0;
        nghttp3_conn_resume_stream(conn, st->sh.id);
    }
    return 0;
}

/* --- the response side --- */

static void resume_data(h3s_t *st)
{
    if (st->sh.deferred && st->hc && !st->sh.closed &&
        st->sent_bytes < H3_UNACKED_MAX) {
        st->sh.deferred = 0;
        nghttp3_conn_resume_stream(st->hc->h3, st->sh.id);
    }
}

static void rate_wake(fd_timer_t *t)
{
    h3s_t *st = H3S((char *)t - offsetof(fd_http_shead_t, rate_timer));

    if (st->hc && !st->sh.closed) {
        resume_data(st);
        fd_quic_post(st->hc->qc);
    }
}

/* nghttp3 asks for body bytes: the pending pieces, a file range read a
 * piece at a time, while the unacknowledged stay under H3_UNACKED_MAX. */
static nghttp3_ssize read_data(nghttp3_conn *conn, int64_t id,
                               nghttp3_vec *vec, size_t veccnt,
                               uint32_t *pflags, void *ud, void *sud)
{
    h3s_t *st = sud;
    size_t k = 0, allow = SIZE_MAX;

    (void)conn;
    (void)id;
    (void)ud;
    if (fd_unlikely(st->sh.rate.rate) && st->pend &&
        (allow = fd_http_stream_rate(&st->sh.rate, &st->sh.rate_timer,
                                     rate_wake)) == 0) {
        /* limit_rate: the stream waits, the others go on */
        st->sh.deferred = 1;
        return NGHTTP3_ERR_WOULDBLOCK;
    }
    while (k < veccnt && st->pend && st->sent_bytes < H3_UNACKED_MAX &&
           allow) {
        h3buf_t *b = st->pend, *s;
        if (b->pos == NULL) {
            /* a file range: the next piece into memory of our own */
            size_t want = fd_min(fd_min(b->len, (size_t)H3_FILE_PIECE),
                                 allow);
            ssize_t n;
            if ((s = fd_quic_alloc(sizeof(*s))) == NULL ||
                (s->own = fd_quic_alloc(want)) == NULL) {
                fd_quic_free(s);
                return NGHTTP3_ERR_CALLBACK_FAILURE;
            }
            n = pread(b->fd, s->own, want, b->off);
            if (n <= 0) {
                fd_log_error(FD_LOG_ERR, n < 0 ? errno : 0,
                             "pread() of a response body failed");
                fd_quic_free(s->own);
                fd_quic_free(s);
                return NGHTTP3_ERR_CALLBACK_FAILURE;
            }
            s->pos = s->own;
            s->len = (size_t)n;
            s->fd = -1;
            b->off += n;
            b->len -= (size_t)n;
            if (b->len == 0) {
                st->pend = b->next;
                fd_quic_free(b);
            }
        } else if (b->len > allow) {
            /* limit_rate: a part now; the rest keeps the memory (it is
             * acknowledged after this part) */
            if ((s = fd_quic_alloc(sizeof(*s))) == NULL)
                return NGHTTP3_ERR_CALLBACK_FAILURE;
            s->pos = b->pos;
            s->len = allow;
            s->fd = -1;
            s->own = NULL;
            b->pos += allow;
            b->len -= allow;
        } else {
            s = b;
            st->pend = b->next;
        }
        if (allow != SIZE_MAX) {
            allow -= s->len;
            st->sh.rate.sent += s->len;
        }
        if (st->pend == NULL)
            st->pend_last = &st->pend;
        s->next = NULL;
        *st->sent_last = s;
        st->sent_last = &s->next;
        st->pend_bytes -= s->len;
        st->sent_bytes += s->len;
        vec[k].base = (uint8_t *)s->pos;
        vec[k].len = s->len;
        k++;
    }
    if (st->sh.r && !st->sh.r->done && st->sh.r->on_drain && k &&
        st->pend_bytes < OUT_HIGH_WATER) {
        st->sh.job_drain = 1;
        stream_job(st);
    }
    if (st->pend == NULL && st->sh.out_end) {
        *pflags |= NGHTTP3_DATA_FLAG_EOF;
        return (nghttp3_ssize)k;
    }
    if (k == 0) {
        st->sh.deferred = 1;
        return NGHTTP3_ERR_WOULDBLOCK;
    }
    return (nghttp3_ssize)k;
}

/* the shared fields are nghttp3's (fd_http_stream.h) */
FD_HTTP_NV_IS(nghttp3_nv, NGHTTP3_NV_FLAG_NO_COPY_NAME,
              NGHTTP3_NV_FLAG_NO_COPY_VALUE);

/* a HEADERS frame is encoded when the connection writes, at the end of
 * the turn or later: fd_http_stream_fields() says what nghttp3 copies */
int fd_h3_header(fd_request_t *r)
{
    h3s_t *st = H3S(r->h2);
    nghttp3_data_reader dr = {.read_data = read_data};
    fd_http_nv_t *nv;
    size_t n;
    int rv;

    if (st->sh.closed || st->hc == NULL ||
        (nv = fd_http_shead_header(&st->sh, &n)) == NULL)
        return FD_ERROR;
    rv = nghttp3_conn_submit_response(st->hc->h3, st->sh.id,
                                      (const nghttp3_nv *)(const void *)nv,
                                      n, st->sh.provider ? &dr : NULL);
    if (rv != 0) {
        fd_log_error(FD_LOG_ERR, 0, "nghttp3_conn_submit_response() failed: "
                     "%s", nghttp3_strerror(rv));
        return FD_ERROR;
    }
    fd_quic_post(st->hc->qc);
    return FD_OK;
}

int fd_h3_body(fd_request_t *r, fd_buf_t *b, int copy)
{
    h3s_t *st = H3S(r->h2);
    size_t n = fd_buf_size(b);
    int rc;

    if (st->sh.closed || st->hc == NULL)
        return FD_ERROR;
    if (!st->sh.provider || n == 0)
        return FD_OK;
    if (b->file_fd >= 0)
        rc = buf_add(st, NULL, n, b->file_fd, b->file_pos, 0);
    else
        rc = buf_add(st, (const uint8_t *)b->pos, n, -1, 0, copy);
    if (rc != FD_OK)
        return FD_ERROR;
    resume_data(st);
    fd_quic_post(st->hc->qc);
    return FD_OK;
}

void fd_h3_end(fd_request_t *r)
{
    h3s_t *st = H3S(r->h2);

    if (st->hc == NULL)
        return;
    st->sh.out_end = 1;
    if (st->hc->rst_budget <
        2 * (int)fd_worker->cycle->http.http3_max_concurrent_streams)
        st->hc->rst_budget++;
    if (!st->sh.closed && !st->sh.in_ended) {
        /* answered before the body came: the rest is not wanted (RFC
         * 9114 4.1) */
        ngtcp2_conn_shutdown_stream_read(st->hc->qc->conn, 0, st->sh.id,
                                         NGHTTP3_H3_NO_ERROR);
    }
    if (!st->sh.closed)
        fd_http_shead_drop(&st->sh, consume_stream);
    resume_data(st);
    fd_quic_post(st->hc->qc);
}

int fd_h3_flush(fd_request_t *r)
{
    h3s_t *st = H3S(r->h2);

    if (st->sh.closed || st->hc == NULL)
        return FD_ERROR;
    fd_quic_post(st->hc->qc);
    return FD_OK;
}

size_t fd_h3_pending(fd_request_t *r)
{
    return H3S(r->h2)->pend_bytes;
}

void fd_h3_cut(fd_request_t *r)
{
    h3s_t *st = H3S(r->h2);

    if (st->sh.closed || st->hc == NULL)
        return;
    st->rst_spent = 1; /* ours, not the client's */
    nghttp3_conn_shutdown_stream_write(st->hc->h3, st->sh.id);
    ngtcp2_conn_shutdown_stream(st->hc->qc->conn, 0, st->sh.id,
                                NGHTTP3_H3_INTERNAL_ERROR);
    fd_quic_post(st->hc->qc);
}

void fd_h3_resume(fd_request_t *r)
{
    h3s_t *st = H3S(r->h2);

    if (st->hc == NULL || st->sh.closed)
        return;
    st->sh.job_body = 1;
    stream_job(st);
}

void fd_h3_finish(fd_request_t *r, int rc)
{
    h3s_t *st = H3S(r->h2);

    if (fd_http_shead_finish(&st->sh, rc))
        stream_free(st);
    else if (st->hc)
        fd_quic_post(st->hc->qc);
}

ssize_t fd_h3_body_pull(fd_request_t *r, char *buf, size_t size)
{
    h3s_t *st = H3S(r->h2);

    if (st->hc == NULL || st->sh.closed)
        return FD_ERROR;
    return fd_http_shead_pull(&st->sh, buf, size, consume_stream);
}

void *fd_h3_tls(const fd_request_t *r)
{
    return ((fd_quic_conn_t *)(void *)r->c)->tls;
}

/* --- the connection --- */

static int h3_setup(fd_quic_conn_t *qc)
{
    const fd_http_conf_t *conf = &fd_worker->cycle->http;
    const ngtcp2_transport_params *tp;
    fd_h3_conn_t *hc;
    nghttp3_settings settings;
    int64_t ctrl, enc, dec;

    if (ngtcp2_conn_get_streams_uni_left(qc->conn) < 3)
        return FD_ERROR;
    if ((hc = calloc(1, sizeof(*hc))) == NULL)
        return FD_ERROR;
    if (qc->c.h == NULL) {
        fd_http_conn_t *h = calloc(1, sizeof(*h));
        if (h == NULL) {
            free(hc);
            return FD_ERROR;
        }
        h->c = &qc->c;
        qc->c.h = h;
    }
    hc->qc = qc;
    hc->run.last = &hc->run.head;
    hc->rst_budget = 2 * (int)conf->http3_max_concurrent_streams;
    nghttp3_settings_default(&settings);
    settings.max_field_section_size = conf->http2_max_header_size;
    settings.qpack_max_dtable_capacity = 4096;
    settings.qpack_blocked_streams = 100;
    /* responses' fields by the static table and literals, as nginx:
     * no encoder stream to feed, no acknowledgements to read back;
     * some 40 bytes more a response head (a dynamic table would hold
     * the Server and Date lines) for 5% fewer instructions a request */
    settings.qpack_encoder_max_dtable_capacity = 0;
    if (nghttp3_conn_server_new(&hc->h3, &h3_callbacks, &settings,
                                fd_quic_nghttp3_mem(), hc) != 0) {
        free(hc);
        return FD_ERROR;
    }
    tp = ngtcp2_conn_get_local_transport_params(qc->conn);
    nghttp3_conn_set_max_client_streams_bidi(hc->h3,
                                             tp->initial_max_streams_bidi);
    if (ngtcp2_conn_open_uni_stream(qc->conn, &ctrl, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(hc->h3, ctrl) != 0 ||
        ngtcp2_conn_open_uni_stream(qc->conn, &enc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(qc->conn, &dec, NULL) != 0 ||
        nghttp3_conn_bind_qpack_streams(hc->h3, enc, dec) != 0) {
        nghttp3_conn_del(hc->h3);
        free(hc);
        return FD_ERROR;
    }
    qc->h3 = hc;
    qc->h3conn = hc->h3;
    if (qc->goaway)
        fd_h3_shutdown(qc);
    return FD_OK;
}

static int h3_error(fd_quic_conn_t *qc, int rv)
{
    ngtcp2_ccerr_set_application_error(
        &qc->ccerr, nghttp3_err_infer_quic_app_error_code(rv), NULL, 0);
    fd_log_error(FD_LOG_INFO, 0, "HTTP/3 connection error: %s",
                 nghttp3_strerror(rv));
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

/*
 * A request stream the client gave up before its request was answered:
 * reset (RESET_STREAM) or stopped (STOP_SENDING) with its request
 * unanswered, or before a request began on it, or ended empty. Each
 * frees one of the client's MAX_STREAMS at once, so each spends one of
 * rapid reset's budget (CVE-2023-44487), HTTP/2's: 2 x
 * http3_max_concurrent_streams, each answer earning one back
 * (fd_h3_end). Past it the connection ends, H3_EXCESSIVE_LOAD.
 */
static int rst_spend(fd_quic_conn_t *qc)
{
    if (qc->h3 == NULL || --qc->h3->rst_budget >= 0)
        return 0;
    fd_log_error(FD_LOG_INFO, 0, "HTTP/3 client reset too many streams");
    ngtcp2_ccerr_set_application_error(&qc->ccerr, NGHTTP3_H3_EXCESSIVE_LOAD,
                                       NULL, 0);
    return NGTCP2_ERR_CALLBACK_FAILURE;
}

/* Request stream st reset, or closed otherwise (NULL: no request began
 * on it): once, if its request was not answered */
static int rst_request(fd_quic_conn_t *qc, h3s_t *st)
{
    if (st == NULL)
        return rst_spend(qc);
    if (st->rst_spent || st->sh.r == NULL || st->sh.r->done)
        return 0;
    st->rst_spent = 1; /* a client cancelling a request sends both */
    return rst_spend(qc);
}

int fd_h3_recv_stream_data(ngtcp2_conn *conn, uint32_t flags,
                           int64_t stream_id, uint64_t offset,
                           const uint8_t *data, size_t datalen,
                           void *user_data, void *stream_user_data)
{
    fd_quic_conn_t *qc = user_data;
    nghttp3_ssize n;

    (void)stream_user_data;
    if (qc->h3 == NULL && h3_setup(qc) != FD_OK) {
        ngtcp2_ccerr_set_application_error(&qc->ccerr,
                                           NGHTTP3_H3_INTERNAL_ERROR, NULL, 0);
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    if (offset == 0 && datalen == 0 &&
        (flags & NGTCP2_STREAM_DATA_FLAG_FIN) &&
        ngtcp2_is_bidi_stream(stream_id)) {
        /* a request stream ended before its first byte: RFC 9114 4.1
         * makes it the stream's error, H3_REQUEST_INCOMPLETE (nghttp3
         * would end the connection, H3_FRAME_UNEXPECTED); like a stream
         * reset before its HEADERS, counted against rst_budget */
        ngtcp2_conn_shutdown_stream(conn, 0, stream_id,
                                    NGHTTP3_H3_REQUEST_INCOMPLETE);
        return rst_spend(qc);
    }
    n = nghttp3_conn_read_stream(qc->h3->h3, stream_id, data, datalen,
                                 flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (n < 0)
        return h3_error(qc, (int)n);
    /* what nghttp3 consumed itself (frames, QPACK): its credit back now;
     * a body's comes as the request takes it */
    ngtcp2_conn_extend_max_stream_offset(conn, stream_id, (uint64_t)n);
    ngtcp2_conn_extend_max_offset(conn, (uint64_t)n);
    return 0;
}

int fd_h3_acked_stream_data_offset(ngtcp2_conn *conn, int64_t stream_id,
                                   uint64_t offset, uint64_t datalen,
                                   void *user_data, void *stream_user_data)
{
    fd_quic_conn_t *qc = user_data;
    int rv;

    (void)conn;
    (void)offset;
    (void)stream_user_data;
    if (qc->h3 &&
        (rv = nghttp3_conn_add_ack_offset(qc->h3->h3, stream_id, datalen)) !=
            0)
        return h3_error(qc, rv);
    return 0;
}

int fd_h3_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id,
                       uint64_t app_error_code, void *user_data,
                       void *stream_user_data)
{
    fd_quic_conn_t *qc = user_data;
    h3s_t *st = stream_user_data; /* a request stream's (begin_headers) */
    int rv;

    /* ngtcp2 1.11 counts losses per stream only: read before it goes */
    fd_stats->quic_lost += ngtcp2_conn_get_stream_loss_count(conn, stream_id);
    rv = NGHTTP3_ERR_STREAM_NOT_FOUND;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        app_error_code = NGHTTP3_H3_NO_ERROR;
    /* closed under a request not answered, not by fastd: the client
     * stopped it (STOP_SENDING, which ngtcp2 answers itself) */
    if (st && ngtcp2_is_bidi_stream(stream_id) &&
        (rv = rst_request(qc, st)) != 0)
        return rv;
    if (qc->h3)
        rv = nghttp3_conn_close_stream(qc->h3->h3, stream_id, app_error_code);
    if (rv == NGHTTP3_ERR_STREAM_NOT_FOUND) {
        /* a request stream nghttp3 never saw (reset before its first
         * byte, or ended empty): its credit back here, not in
         * h3_stream_close */
        if (ngtcp2_is_bidi_stream(stream_id))
            ngtcp2_conn_extend_max_streams_bidi(conn, 1);
        return 0;
    }
    if (rv != 0)
        return h3_error(qc, rv);
    return 0;
}

int fd_h3_stream_reset(ngtcp2_conn *conn, int64_t stream_id,
                       uint64_t final_size, uint64_t app_error_code,
                       void *user_data, void *stream_user_data)
{
    fd_quic_conn_t *qc = user_data;
    h3s_t *st = stream_user_data; /* a request stream's (begin_headers) */
    int rv;

    (void)final_size;
    (void)app_error_code;
    if (st == NULL && ngtcp2_is_bidi_stream(stream_id))
        /* reset before a request began on it: nothing is to be
         * answered, so our side ends too, or the stream (one of the
         * client's MAX_STREAMS) stays open for good */
        ngtcp2_conn_shutdown_stream_write(conn, 0, stream_id,
                                          NGHTTP3_H3_REQUEST_CANCELLED);
    if (qc->h3 == NULL && h3_setup(qc) != FD_OK) {
        ngtcp2_ccerr_set_application_error(&qc->ccerr,
                                           NGHTTP3_H3_INTERNAL_ERROR, NULL, 0);
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    if (ngtcp2_is_bidi_stream(stream_id) && (rv = rst_request(qc, st)) != 0)
        return rv;
    if ((rv = nghttp3_conn_shutdown_stream_read(qc->h3->h3, stream_id)) != 0)
        return h3_error(qc, rv);
    return 0;
}

int fd_h3_stream_stop_sending(ngtcp2_conn *conn, int64_t stream_id,
                              uint64_t app_error_code, void *user_data,
                              void *stream_user_data)
{
    fd_quic_conn_t *qc = user_data;
    int rv;

    (void)conn;
    (void)app_error_code;
    (void)stream_user_data;
    if (qc->h3 &&
        (rv = nghttp3_conn_shutdown_stream_read(qc->h3->h3, stream_id)) != 0)
        return h3_error(qc, rv);
    return 0;
}

int fd_h3_extend_max_remote_streams_bidi(ngtcp2_conn *conn,
                                         uint64_t max_streams,
                                         void *user_data)
{
    fd_quic_conn_t *qc = user_data;

    (void)conn;
    if (qc->h3)
        nghttp3_conn_set_max_client_streams_bidi(qc->h3->h3, max_streams);
    return 0;
}

int fd_h3_extend_max_stream_data(ngtcp2_conn *conn, int64_t stream_id,
                                 uint64_t max_data, void *user_data,
                                 void *stream_user_data)
{
    fd_quic_conn_t *qc = user_data;
    int rv;

    (void)conn;
    (void)max_data;
    (void)stream_user_data;
    if (qc->h3 && (rv = nghttp3_conn_unblock_stream(qc->h3->h3, stream_id)) !=
                      0)
        return h3_error(qc, rv);
    return 0;
}

/* The streams' jobs: start requests, feed bodies, tell producers the
 * output drained. */
void fd_h3_run(fd_quic_conn_t *qc)
{
    fd_h3_conn_t *hc = qc->h3;
    fd_http_shead_t *sh;

    while (!qc->dead && (sh = fd_http_srun_take(&hc->run)) != NULL)
        if (!sh->closed && sh->r)
            fd_http_shead_run(sh, fd_http_shead_begin, consume_stream);
}

void fd_h3_shutdown(fd_quic_conn_t *qc)
{
    if (qc->h3)
        nghttp3_conn_submit_shutdown_notice(qc->h3->h3);
}

unsigned fd_h3_nstreams(fd_quic_conn_t *qc)
{
    return qc->h3 ? qc->h3->nstreams : 0;
}

/* The connection ends: every stream with it. */
void fd_h3_release(fd_quic_conn_t *qc)
{
    fd_h3_conn_t *hc = qc->h3;
    h3s_t *st;

    while ((st = H3S(hc->streams)) != NULL) {
        nghttp3_conn_set_stream_user_data(hc->h3, st->sh.id, NULL);
        stream_closed(st);
    }
    /* orphans: freed when their module lets go; the connection struct
     * (their r->c) waits for them */
    while ((st = H3S(hc->orphans)) != NULL) {
        FD_LIST_UNLINK(&st->sh);
        st->hc = NULL;
        st->held = qc;
        qc->refs++;
    }
    nghttp3_conn_del(hc->h3);
    qc->h3 = NULL;
    qc->h3conn = NULL;
    free(hc);
}

static const nghttp3_callbacks h3_callbacks = {
    .acked_stream_data = acked_stream_data,
    .stream_close = h3_stream_close,
    .recv_data = recv_data,
    .deferred_consume = deferred_consume,
    .begin_headers = begin_headers,
    .recv_header = recv_header,
    .end_headers = end_headers,
    .stop_sending = stop_sending,
    .end_stream = end_stream,
    .reset_stream = reset_stream,
};

#endif
