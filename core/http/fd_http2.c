/*
 * HTTP/2 for clients (RFC 9113): a second protocol on the same client
 * stream, beside HTTP/1.1 (fd_http.c). libnghttp2 does the framing, HPACK
 * and the protocol's state machines; this file owns the rest: the streams,
 * the requests they carry, flow control against fastd's own buffers,
 * scheduling, timeouts and the limits that answer the known attacks.
 *
 * A stream's request is the same fd_request_t HTTP/1.1 makes, routed and
 * run by the same engine: the handlers and modules do not know which
 * protocol carried it. Where HTTP/1.1 writes into the connection's output
 * queue, the response side calls in here (fd_http_int.h: fd_h2_*):
 *
 *   header  -> nghttp2_submit_response(), with a data source when a body
 *              follows;
 *   body    -> the stream's own queue (st->oq: copied bytes, referenced
 *              memory, file ranges), taken by the data source one DATA
 *              frame at a time (NGHTTP2_DATA_FLAG_NO_COPY): the frame
 *              header is copied into the connection's queue and the
 *              payload moved there (memory referenced, a file range read
 *              into the buffer, a frame's worth at a time: never whole in
 *              memory), so the frames of many streams leave in one write
 *              (one SSL_write under TLS) rather than a sendfile() each;
 *   flush   -> the connection is sent at the end of the loop turn, so the
 *              frames of every stream that answered in a turn leave in one
 *              write.
 *
 * A request's memory lives until its stream is closed and the connection
 * has written every byte queued for it (st->mark): the DATA payloads point
 * into it. A request a module still holds when its stream goes (a reset, a
 * closed connection) is aborted through r->on_abort, or, when the module
 * cannot be stopped (an offloaded handler), freed when it finishes.
 *
 * Request bodies: DATA goes into the stream's input buffer, which the
 * stream window bounds (the window is opened again only as the body is
 * taken: NO_AUTO_WINDOW_UPDATE), so a streamed upload (the proxy) is paced
 * by its reader; a buffered one is copied into r->body as it comes, up to
 * max_body_size.
 *
 * WebSocket over HTTP/2 (RFC 8441): SETTINGS_ENABLE_CONNECT_PROTOCOL is
 * sent, and a CONNECT with :protocol websocket becomes a GET with Upgrade:
 * websocket for a handler that tunnels (the proxy); other handlers never
 * see one (501). Once its 200 is submitted, the stream is one side of a
 * splice (fd_stream.h) through a transport of its own (tunnel_*): DATA
 * from the client is read out of the stream's input buffer (its window
 * opens as the splice takes it), bytes for the client go to the stream's
 * queue, at most H2_TUNNEL_OUT of them (the client's window is the
 * back-pressure: past that the splice stops reading the upstream).
 */
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <sys/epoll.h>

#include "fd_core.h"
#include "fd_http_stream.h"

#define H2_OUT_MAX (256 * 1024)  /* framed, unsent bytes: ask nghttp2 for
                                  * more only below it */
#define H2_CONN_WINDOW (1 << 20) /* request body bytes a connection may
                                  * hold unread over all its streams */
#define H2_EMPTY_DATA_MAX 256    /* empty DATA frames without END_STREAM */
/* PING and SETTINGS frames a connection may send beyond what its answered
 * requests earn (H2_CTL_EARN each): a flood of them is cut at this count,
 * however fast fastd answers and whether or not the client reads (the
 * ACKs a client leaves unread are nghttp2's max_outbound_ack) */
#define H2_CTL_MAX 1000
#define H2_CTL_EARN 4
#define H2_RUN_ROUNDS 8          /* stream jobs and sends in one event */
#define H2_POOL_KEEP 64          /* request pools kept for reuse */
#define H2_TUNNEL_OUT (64 * 1024) /* a tunnel's bytes queued for the
                                   * client: the splice waits past it */

typedef struct fd_h2_stream_s h2s_t;
typedef struct fd_h2_conn_s h2c_t;

struct fd_h2_stream_s {
    /* first: r->h2 is its address; when the struct is reused, its ib
     * keeps its memory (pos and len cleared) */
    fd_http_shead_t sh;
    h2c_t *hc;                 /* NULL: the connection is gone */
    uint64_t mark;             /* hc->queued after its last frame */
    unsigned job_tunnel:1;     /* in hc->run for its tunnel */
    fd_str_t protocol;         /* :protocol (extended CONNECT) */
    fd_stream_t *tunnel;       /* the splice side it carries, or NULL */
    /* kept when the struct is reused (stream_new clears up to here) */
    fd_outq_t oq;              /* body bytes not yet framed */
};

/* the stream whose head sh is (its first member) */
#define H2S(sh) ((h2s_t *)(void *)(sh))

struct fd_h2_conn_s {
    nghttp2_session *ss;
    fd_connection_t *c;
    fd_http_conn_t *h;
    fd_http_shead_t *streams;  /* open */
    fd_http_shead_t *zombies;  /* closed, their last frames not yet sent */
    fd_http_shead_t *orphans;  /* closed, a module still holds the request */
    fd_http_srun_t run;
    unsigned nstreams;         /* open (streams list) */
    unsigned nrequests;        /* taken on this connection */
    int rst_budget;            /* resets of unanswered streams it may
                                * still send (rapid reset) */
    unsigned empty_data;
    int ctl_budget;            /* PING and SETTINGS it may still send */
    uint64_t queued;           /* bytes ever put in h->out */
    uint64_t sent_seen;        /* queued - h->out.bytes, last look */
    uint64_t received;         /* bytes ever read */
    uint64_t recv_seen;        /* received, last look */
    fd_posted_t post;
    unsigned posted:1;
    unsigned goaway:1;         /* GOAWAY submitted: no new streams */
    unsigned closing:1;        /* close once the output is written (the
                                * client's end, an error) */
    unsigned terminated:1;     /* a GOAWAY for an error is on its way */
    /* the client's frame boundaries, read beside nghttp2 (frames_check) */
    uint32_t fr_skip;          /* bytes before the next frame header */
    uint32_t fr_len;           /* the length of the last header read */
    unsigned fr_have;          /* bytes of the next header so far */
    unsigned fr_pad:1;         /* the next byte is a DATA's pad length */
    uint8_t fr_hdr[9];
};

/* A connection error fastd decides: GOAWAY (once), nothing more read. */
static void h2_terminate(h2c_t *hc, uint32_t code, const char *why)
{
    if (hc->terminated)
        return;
    hc->terminated = 1;
    fd_log_error(FD_LOG_INFO, 0, "%s", why);
    nghttp2_session_terminate_session(hc->ss, code);
}

/*
 * RFC 9113 6.1: a DATA frame whose padding is as long as its payload or
 * longer is a connection error PROTOCOL_ERROR, whether or not its stream
 * is still open. nghttp2 checks it only on a stream it still knows: a
 * DATA for one answered and reset before is skipped unread. So fastd
 * reads the frame boundaries of what it feeds nghttp2 (each header, and
 * a padded DATA's pad length, never the payloads). Returns how many of
 * the n bytes at p may go to nghttp2: n, or the bytes before the frame
 * with bad padding (the connection is ended; nghttp2 never sees it).
 */
static size_t frames_check(h2c_t *hc, const uint8_t *p, size_t n)
{
    size_t i = 0, start = 0, k;
    const uint8_t *hd = hc->fr_hdr;

    if (!nghttp2_session_want_read(hc->ss))
        return n; /* ended already: nghttp2 reads nothing more */
    while (i < n) {
        if (hc->fr_skip) {
            k = fd_min((size_t)hc->fr_skip, n - i);
            hc->fr_skip -= (uint32_t)k;
            i += k;
            continue;
        }
        if (hc->fr_pad) {
            hc->fr_pad = 0;
            if (p[i] >= hc->fr_len)
                goto bad;
            hc->fr_skip = hc->fr_len; /* this byte and the rest */
            continue;
        }
        if (hc->fr_have == 0)
            start = i;
        hc->fr_hdr[hc->fr_have++] = p[i++];
        if (hc->fr_have < 9)
            continue;
        hc->fr_have = 0;
        hc->fr_len = (uint32_t)hd[0] << 16 | (uint32_t)hd[1] << 8 | hd[2];
        if (hd[3] == NGHTTP2_DATA && (hd[4] & NGHTTP2_FLAG_PADDED)) {
            if (hc->fr_len == 0)
                goto bad; /* no room for the pad length */
            hc->fr_pad = 1;
        } else {
            hc->fr_skip = hc->fr_len;
        }
    }
    return n;

bad:
    /* a header begun in an earlier read: start is 0, nothing more goes */
    h2_terminate(hc, NGHTTP2_PROTOCOL_ERROR,
                 "client sent a DATA frame with invalid padding");
    return start;
}

/* Bytes the client sent, to nghttp2 once their frames are checked. */
static ssize_t h2_feed(h2c_t *hc, const uint8_t *p, size_t n)
{
    return nghttp2_session_mem_recv(hc->ss, p, frames_check(hc, p, n));
}

static nghttp2_session_callbacks *callbacks;
static nghttp2_option *options;
static fd_http_sfree_t free_streams = {NULL, 0, 1024};
static fd_pool_t *pools_kept[H2_POOL_KEEP];
static fd_http_pools_t free_pools = {pools_kept, 0, H2_POOL_KEEP};

static void h2_event(fd_event_t *ev, uint32_t events);
static void h2_posted(void *data);
static void h2_send(h2c_t *hc);
static void h2_after(h2c_t *hc);

/* --- streams --- */

/* A stream struct back to the free list (its queue and buffer kept), or
 * freed. */
static void stream_put(h2s_t *st)
{
    if (fd_http_sfree_put(&free_streams, &st->sh))
        return;
    free(st->sh.ib.data);
    fd_outq_free(&st->oq);
    free(st);
}

static h2s_t *stream_new(h2c_t *hc, int32_t id)
{
    h2s_t *st = H2S(fd_http_sfree_get(&free_streams));
    fd_http_sbuf_t ib = {NULL, 0, 0, 0};

    if (st) {
        ib = st->sh.ib;
    } else {
        st = malloc(sizeof(*st));
        if (st == NULL)
            return NULL;
        fd_outq_init(&st->oq);
    }
    memset(st, 0, offsetof(h2s_t, oq));
    st->sh.ib.data = ib.data;
    st->sh.ib.cap = ib.cap;
    if (fd_http_shead_init(&st->sh, hc->c, &free_pools, id, 20) != FD_OK) {
        stream_put(st);
        return NULL;
    }
    st->hc = hc;
    FD_LIST_LINK(&hc->streams, &st->sh);
    hc->nstreams++;
    return st;
}

/* Its request and memory go back. */
static void stream_free(h2s_t *st)
{
    fd_request_t *r = st->sh.r;

    FD_LIST_UNLINK(&st->sh);
    if (r)
        fd_http_stream_release(r, &free_pools);
    fd_outq_clear(&st->oq);
    if (fd_timer_armed(&st->sh.rate_timer))
        fd_timer_del(&st->sh.rate_timer);
    st->sh.r = NULL;
    if (st->sh.ib.cap > 16384) {
        free(st->sh.ib.data);
        st->sh.ib.data = NULL;
        st->sh.ib.cap = 0;
    }
    stream_put(st);
}

/* Sent bytes went past some closed streams' last frames: free them. */
static void reap(h2c_t *hc)
{
    uint64_t sent = hc->queued - hc->h->out.bytes;
    fd_http_shead_t *sh, *next;

    for (sh = hc->zombies; sh; sh = next) {
        next = sh->next;
        if (H2S(sh)->mark <= sent)
            stream_free(H2S(sh));
    }
}

/* A job for the stream, run after the frames in hand (h2_run). */
static void stream_job(h2s_t *st)
{
    if (st->hc)
        fd_http_srun_add(&st->hc->run, &st->sh);
}

static void conn_post(h2c_t *hc)
{
    if (hc->posted)
        return;
    hc->posted = 1;
    fd_event_post(&hc->post);
}

/* Closed: freed once the connection has written past its last frame. */
static void zombie_add(h2c_t *hc, h2s_t *st)
{
    st->mark = hc->queued;
    FD_LIST_LINK(&hc->zombies, &st->sh);
}

/* flow-control credit for fd_http_stream.h's calls: the stream's and
 * the connection's window, or (consume_conn) the connection's alone */
static void consume_stream(fd_http_shead_t *sh, size_t n)
{
    nghttp2_session_consume(H2S(sh)->hc->ss, (int32_t)sh->id, n);
}

static void consume_conn(fd_http_shead_t *sh, size_t n)
{
    nghttp2_session_consume_connection(H2S(sh)->hc->ss, n);
}

/*
 * nghttp2 closed the stream (its end, a reset either way, GOAWAY). The
 * request is stopped if a module still runs it; its memory waits for the
 * bytes that point into it.
 */
static void stream_closed(h2s_t *st)
{
    h2c_t *hc = st->hc;
    int orphan = fd_http_shead_closed(&st->sh, consume_conn);

    hc->nstreams--;
    if (st->tunnel) {
        /* after fastd's END_STREAM the tunnel's end; else a reset (the
         * client's, or the connection went) */
        fd_stream_t *s = st->tunnel;
        st->tunnel = NULL;
        s->tls = NULL;
        if (st->sh.out_end)
            s->eof = s->readable = 1;
        else
            s->error = 1;
        fd_splice_kick(s);
    }
    if (orphan)
        /* freed when its module lets go (fd_h2_finish); listed, so that
         * a connection that goes first lets it know */
        FD_LIST_LINK(&hc->orphans, &st->sh);
    else
        zombie_add(hc, st);
}

/* --- the request side --- */

/*
 * RFC 9113 5.1.1: a new stream's id is above every one the client opened
 * before; a HEADERS below them on no stream nghttp2 still knows is a
 * connection error PROTOCOL_ERROR (nghttp2 would skip the block).
 */
static int on_begin_frame(nghttp2_session *ss, const nghttp2_frame_hd *hd,
                          void *ud)
{
    h2c_t *hc = ud;

    if (hd->type == NGHTTP2_HEADERS && (hd->stream_id & 1) &&
        hd->stream_id <= nghttp2_session_get_last_proc_stream_id(ss) &&
        nghttp2_session_find_stream(ss, hd->stream_id) == NULL)
        h2_terminate(hc, NGHTTP2_PROTOCOL_ERROR,
                     "client sent HEADERS on a stream id below the last");
    return 0;
}

static int on_begin_headers(nghttp2_session *ss, const nghttp2_frame *frame,
                            void *ud)
{
    h2c_t *hc = ud;
    h2s_t *st;

    if (frame->hd.type != NGHTTP2_HEADERS ||
        frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    st = stream_new(hc, frame->hd.stream_id);
    if (st == NULL) {
        nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
        return 0;
    }
    nghttp2_session_set_stream_user_data(ss, frame->hd.stream_id, st);
    hc->nrequests++;
    hc->c->requests = hc->nrequests; /* $connection_requests */
    fd_stats->h2_streams++;
    if (hc->nrequests >= (unsigned)fd_worker->cycle->http.keepalive_requests
        && !hc->goaway) {
        /* this one is the last: the client opens a new connection */
        nghttp2_submit_goaway(ss, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_NO_ERROR, NULL, 0);
        hc->goaway = 1;
    }
    return 0;
}

static int on_header(nghttp2_session *ss, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
    h2s_t *st = nghttp2_session_get_stream_user_data(ss, frame->hd.stream_id);

    (void)flags;
    (void)ud;
    /* trailers are not kept: they never become request fields (in the
     * same read as the request's HEADERS they would, before routing and
     * realip saw them) */
    if (st == NULL || frame->hd.type != NGHTTP2_HEADERS ||
        frame->headers.cat != NGHTTP2_HCAT_REQUEST || st->sh.started)
        return 0;
    fd_http_stream_field(st->sh.r, &st->sh.sq, name, namelen, value,
                         valuelen, &st->protocol);
    return 0;
}

/* The header block is complete: the request goes to the engine. */
static void request_begin(fd_http_shead_t *sh)
{
    h2s_t *st = H2S(sh);
    fd_http_req_t *in = &sh->r->in;

    if (st->sh.sq.bad == 0 && st->protocol.len) {
        /* RFC 8441: an extended CONNECT (nghttp2 checked :protocol came
         * with CONNECT, :scheme and :path); WebSocket is the one protocol
         * fastd tunnels, as the GET with Upgrade it stands for */
        if (!fd_str_caseeq_lit(st->protocol, "websocket"))
            st->sh.sq.bad = 501;
        else if (in->content_length >= 0)
            st->sh.sq.bad = 400;
        else {
            fd_http_req_method(in, "GET", 3);
            in->upgrade = fd_string("websocket");
            in->conn_upgrade = 1;
            in->ext_connect = 1;
        }
    }
    fd_http_shead_begin(sh);
}

/* DATA or its end came: for the tunnel, or for the request's body. */
static void data_job(h2s_t *st)
{
    if (st->tunnel) {
        st->tunnel->readable = 1;
        st->job_tunnel = 1;
        stream_job(st);
    } else if (fd_http_shead_body_job(&st->sh)) {
        stream_job(st);
    }
}

static int on_data_chunk(nghttp2_session *ss, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *ud)
{
    h2s_t *st = nghttp2_session_get_stream_user_data(ss, id);

    (void)flags;
    (void)ud;
    if (st == NULL || st->sh.r == NULL || (st->sh.r->done && !st->tunnel)) {
        /* nobody reads it any more: the window opens again at once */
        nghttp2_session_consume(ss, id, len);
        return 0;
    }
    if (fd_http_sbuf_add(&st->sh.ib, data, len) != FD_OK)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    data_job(st);
    return 0;
}

/* END_STREAM from the client: its body is complete. */
static void body_ended(h2s_t *st)
{
    st->sh.in_ended = 1;
    data_job(st);
}

static int on_frame_recv(nghttp2_session *ss, const nghttp2_frame *frame,
                         void *ud)
{
    h2c_t *hc = ud;
    h2s_t *st = frame->hd.stream_id
                    ? nghttp2_session_get_stream_user_data(
                          ss, frame->hd.stream_id)
                    : NULL;

    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        if (st && frame->headers.cat != NGHTTP2_HCAT_REQUEST &&
            (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            /* trailers (not kept) that end the body, as a DATA would */
            body_ended(st);
            break;
        }
        if (st == NULL || st->sh.started ||
            frame->headers.cat != NGHTTP2_HCAT_REQUEST)
            break;
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            st->sh.in_ended = st->sh.no_body = 1;
        st->sh.job_start = 1;
        stream_job(st);
        break;
    case NGHTTP2_DATA:
        if (frame->hd.length == 0 &&
            !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
            ++hc->empty_data > H2_EMPTY_DATA_MAX) {
            h2_terminate(hc, NGHTTP2_ENHANCE_YOUR_CALM,
                         "client sent too many empty DATA frames");
            return 0;
        }
        if (st && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            body_ended(st);
        break;
    case NGHTTP2_PING:
    case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && --hc->ctl_budget < 0) {
            h2_terminate(hc, NGHTTP2_ENHANCE_YOUR_CALM,
                         "client sent too many PING or SETTINGS frames");
            return 0;
        }
        break;
    case NGHTTP2_RST_STREAM:
        fd_stats->h2_resets++;
        if (st && st->sh.r && !st->sh.r->done && --hc->rst_budget < 0) {
            /* CVE-2023-44487: streams opened and reset faster than they
             * can be answered */
            h2_terminate(hc, NGHTTP2_ENHANCE_YOUR_CALM,
                         "client reset too many streams");
        }
        break;
    }
    return 0;
}

static int on_stream_close(nghttp2_session *ss, int32_t id, uint32_t err,
                           void *ud)
{
    h2s_t *st = nghttp2_session_get_stream_user_data(ss, id);

    (void)err;
    (void)ud;
    if (st == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(ss, id, NULL);
    stream_closed(st);
    return 0;
}

/* A GOAWAY for an error is counted. A response that ended while the
 * request's body still comes: the rest is not wanted (RFC 9113 8.1). */
static int on_frame_send(nghttp2_session *ss, const nghttp2_frame *frame,
                         void *ud)
{
    h2s_t *st;

    (void)ud;
    if (frame->hd.type == NGHTTP2_GOAWAY &&
        frame->goaway.error_code != NGHTTP2_NO_ERROR) {
        /* fastd's limits and nghttp2's protocol errors alike */
        fd_stats->h2_goaways++;
        return 0;
    }
    if ((frame->hd.type != NGHTTP2_DATA &&
         frame->hd.type != NGHTTP2_HEADERS) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    st = nghttp2_session_get_stream_user_data(ss, frame->hd.stream_id);
    if (st && !st->sh.in_ended)
        nghttp2_submit_rst_stream(ss, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
    return 0;
}

/* --- the response side --- */

static void resume_data(h2s_t *st)
{
    if (st->sh.deferred && st->hc && !st->sh.closed) {
        st->sh.deferred = 0;
        nghttp2_session_resume_data(st->hc->ss, st->sh.id);
    }
}

static void rate_wake(fd_timer_t *t)
{
    h2s_t *st = H2S((char *)t - offsetof(fd_http_shead_t, rate_timer));

    if (st->hc && !st->sh.closed) {
        resume_data(st);
        conn_post(st->hc);
    }
}

/* The response's trailer fields (a proxied upstream's, gRPC's status) as
 * a HEADERS frame that ends the stream after the last DATA: 0 when it is
 * submitted. Names go lower case; nghttp2 copies them. */
static int send_trailers(nghttp2_session *ss, h2s_t *st)
{
    fd_request_t *r = st->sh.r;
    fd_http_header_out_t *t;
    nghttp2_nv *nv;
    size_t n = 0, i;
    char *name;

    for (t = r->trailers_out; t; t = t->next)
        n++;
    nv = fd_palloc(r->pool, n * sizeof(*nv));
    if (nv == NULL)
        return -1;
    n = 0;
    for (t = r->trailers_out; t; t = t->next) {
        if (t->name.len == 0 || t->name.data[0] == ':' ||
            fd_http_stream_hop_field(t->name) ||
            fd_http_field_bad(t->name.data, t->name.len) ||
            fd_http_field_bad(t->value.data, t->value.len) ||
            (name = fd_pnalloc(r->pool, t->name.len)) == NULL)
            continue;
        for (i = 0; i < t->name.len; i++)
            name[i] = fd_tolower(t->name.data[i]);
        nv[n].name = (uint8_t *)name;
        nv[n].namelen = t->name.len;
        nv[n].value = (uint8_t *)t->value.data;
        nv[n].valuelen = t->value.len;
        nv[n++].flags = NGHTTP2_NV_FLAG_NONE;
    }
    if (n == 0)
        return -1;
    return nghttp2_submit_trailer(ss, st->sh.id, nv, n) == 0 ? 0 : -1;
}

static ssize_t data_read(nghttp2_session *ss, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    h2s_t *st = src->ptr;
    size_t n = fd_min(len, st->oq.bytes);

    (void)ss;
    (void)id;
    (void)buf;
    (void)ud;
    if (fd_unlikely(st->sh.rate.rate) && n) {
        size_t allow = fd_http_stream_rate(&st->sh.rate, &st->sh.rate_timer,
                                           rate_wake);
        if (allow == 0) {
            /* limit_rate: the stream waits, the others go on */
            st->sh.deferred = 1;
            return NGHTTP2_ERR_DEFERRED;
        }
        n = fd_min(n, allow);
        st->sh.rate.sent += n;
    }
    if (n == 0 && !st->sh.out_end) {
        st->sh.deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (st->sh.out_end && n == st->oq.bytes) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (st->sh.r && st->sh.r->trailers_out && send_trailers(ss, st) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
    return (ssize_t)n;
}

static int send_data(nghttp2_session *ss, nghttp2_frame *frame,
                     const uint8_t *framehd, size_t length,
                     nghttp2_data_source *src, void *ud)
{
    h2c_t *hc = ud;
    h2s_t *st = src->ptr;
    fd_outq_t *out = &hc->h->out;

    (void)ss;
    (void)frame; /* no padding is asked for */
    if (fd_outq_append(out, framehd, 9) != FD_OK ||
        fd_outq_move(out, &st->oq, length) != FD_OK)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    hc->queued += 9 + length;
    st->mark = hc->queued;
    if (st->sh.r && !st->sh.r->done && st->sh.r->on_drain &&
        st->oq.bytes < OUT_HIGH_WATER) {
        st->sh.job_drain = 1;
        stream_job(st);
    }
    if (st->tunnel && !st->tunnel->writable &&
        st->oq.bytes < H2_TUNNEL_OUT / 2) {
        st->tunnel->writable = 1;
        st->job_tunnel = 1;
        stream_job(st);
    }
    return 0;
}

/* the shared fields are nghttp2's (fd_http_stream.h) */
FD_HTTP_NV_IS(nghttp2_nv, NGHTTP2_NV_FLAG_NO_COPY_NAME,
              NGHTTP2_NV_FLAG_NO_COPY_VALUE);

/* nghttp2 encodes the HEADERS frame later in the turn (h2_send), not in
 * nghttp2_submit_response(): fd_http_stream_fields() says what it copies */
int fd_h2_header(fd_request_t *r)
{
    h2s_t *st = H2S(r->h2);
    nghttp2_data_provider prd;
    fd_http_nv_t *nv;
    size_t n;
    int rv;

    FD_H3_PASS(r, fd_h3_header(r));
    if (st == NULL || st->sh.closed || st->hc == NULL ||
        (nv = fd_http_shead_header(&st->sh, &n)) == NULL)
        return FD_ERROR;
    prd.source.ptr = st;
    prd.read_callback = data_read;
    rv = nghttp2_submit_response(st->hc->ss, st->sh.id,
                                 (const nghttp2_nv *)(const void *)nv, n,
                                 st->sh.provider ? &prd : NULL);
    if (rv != 0) {
        fd_log_error(FD_LOG_ERR, 0, "nghttp2_submit_response() failed: %s",
                     nghttp2_strerror(rv));
        return FD_ERROR;
    }
    conn_post(st->hc);
    return FD_OK;
}

int fd_h2_body(fd_request_t *r, fd_buf_t *b, int copy)
{
    h2s_t *st = H2S(r->h2);
    size_t n = fd_buf_size(b);
    int rc;

    FD_H3_PASS(r, fd_h3_body(r, b, copy));
    if (st == NULL || st->sh.closed || st->hc == NULL || !st->sh.provider)
        return st && !st->sh.closed && st->hc ? FD_OK : FD_ERROR;
    if (b->file_fd >= 0)
        rc = fd_outq_file(&st->oq, b->file_fd, b->file_pos, n);
    else if (copy)
        rc = fd_outq_append(&st->oq, b->pos, n);
    else
        rc = fd_outq_ref(&st->oq, b->pos, n);
    if (rc != FD_OK)
        return FD_ERROR;
    resume_data(st);
    conn_post(st->hc);
    return FD_OK;
}

void fd_h2_end(fd_request_t *r)
{
    h2s_t *st = H2S(r->h2);

    FD_H3_PASS(r, fd_h3_end(r));
    if (st == NULL || st->hc == NULL)
        return;
    st->sh.out_end = 1;
    if (!st->sh.closed)
        /* a body the handler did not read: its window opens again (the
         * stream ends with RST_STREAM NO_ERROR once answered) */
        fd_http_shead_drop(&st->sh, consume_stream);
    if (st->hc->rst_budget < 2 * (int)fd_worker->cycle->http
                                     .http2_max_concurrent_streams)
        st->hc->rst_budget++;
    if (st->hc->ctl_budget < H2_CTL_MAX)
        st->hc->ctl_budget += H2_CTL_EARN;
    resume_data(st);
    conn_post(st->hc);
}

int fd_h2_flush(fd_request_t *r)
{
    h2s_t *st = H2S(r->h2);

    FD_H3_PASS(r, fd_h3_flush(r));
    if (st == NULL || st->sh.closed || st->hc == NULL)
        return FD_ERROR;
    conn_post(st->hc);
    return FD_OK;
}

size_t fd_h2_pending(fd_request_t *r)
{
    FD_H3_PASS(r, fd_h3_pending(r));
    return r->h2 ? H2S(r->h2)->oq.bytes : 0;
}

void fd_h2_cut(fd_request_t *r)
{
    h2s_t *st = H2S(r->h2);

    FD_H3_PASS(r, fd_h3_cut(r));
    if (st == NULL || st->sh.closed || st->hc == NULL)
        return;
    nghttp2_submit_rst_stream(st->hc->ss, NGHTTP2_FLAG_NONE, st->sh.id,
                              NGHTTP2_INTERNAL_ERROR);
    conn_post(st->hc);
}

void fd_h2_resume(fd_request_t *r)
{
    h2s_t *st = H2S(r->h2);

    FD_H3_PASS(r, fd_h3_resume(r));
    if (st == NULL || st->hc == NULL || st->sh.closed)
        return;
    st->sh.job_body = 1;
    stream_job(st);
    conn_post(st->hc);
}

/* HTTP/3's as well: the stream's head says */
int fd_h2_gone(fd_request_t *r)
{
    return r->h2 && r->h2->closed;
}

void fd_h2_finish(fd_request_t *r, int rc)
{
    h2s_t *st = H2S(r->h2);

    FD_H3_PASS(r, fd_h3_finish(r, rc));
    if (fd_http_shead_finish(&st->sh, rc)) {
        FD_LIST_UNLINK(&st->sh); /* from hc->orphans */
        if (st->hc) {
            st->sh.orphan = 0;
            zombie_add(st->hc, st);
            conn_post(st->hc);
        } else {
            stream_free(st);
        }
        return;
    }
    conn_post(st->hc);
}

ssize_t fd_h2_body_pull(fd_request_t *r, char *buf, size_t size)
{
    h2s_t *st = H2S(r->h2);
    ssize_t n;

    FD_H3_PASS(r, fd_h3_body_pull(r, buf, size));
    if (st == NULL || st->hc == NULL || st->sh.closed)
        return FD_ERROR;
    n = fd_http_shead_pull(&st->sh, buf, size, consume_stream);
    if (n > 0)
        conn_post(st->hc);
    return n;
}

/* HTTP/3's as well: the stream's head says */
unsigned fd_http_stream_id(fd_request_t *r)
{
    return r->h2 ? (unsigned)r->h2->id : 0;
}

/* --- a tunnel on a stream (RFC 8441) --- */

/* The client's DATA, as a socket's bytes: 0 once it sent END_STREAM. */
static ssize_t tunnel_recv(fd_stream_t *s, char *buf, size_t size)
{
    h2s_t *st = s->tls;
    ssize_t n;

    if (st == NULL) {
        /* the stream closed (stream_closed() said how) */
        if (s->eof)
            return 0;
        s->error = 1;
        return FD_ERROR;
    }
    n = fd_http_shead_pull(&st->sh, buf, size, consume_stream);
    if (n == FD_AGAIN)
        s->readable = 0; /* on_data_chunk() says when */
    else if (n > 0)
        conn_post(st->hc);
    return n;
}

/* Bytes for the client: into the stream's queue, framed as its window
 * allows; a full queue waits (send_data() says when it drained). */
static ssize_t tunnel_send(fd_stream_t *s, const struct iovec *iov, int niov,
                           int more)
{
    h2s_t *st = s->tls;
    size_t room, n = 0;
    int i;

    (void)more;
    if (st == NULL || st->sh.out_end) {
        s->error = 1;
        return FD_ERROR;
    }
    if (st->oq.bytes >= H2_TUNNEL_OUT) {
        s->writable = 0;
        return FD_AGAIN;
    }
    room = H2_TUNNEL_OUT - st->oq.bytes;
    for (i = 0; i < niov && room; i++) {
        size_t k = fd_min(room, iov[i].iov_len);
        if (fd_outq_append(&st->oq, iov[i].iov_base, k) != FD_OK) {
            s->error = 1;
            return FD_ERROR;
        }
        n += k;
        room -= k;
    }
    resume_data(st);
    conn_post(st->hc);
    return (ssize_t)n;
}

static ssize_t tunnel_sendfile(fd_stream_t *s, int fd, off_t off, size_t len)
{
    (void)fd;
    (void)off;
    (void)len;
    s->error = 1; /* a splice sends memory only */
    return FD_ERROR;
}

/* The upstream's end: END_STREAM after what is queued (the client's half
 * may still send; the stream then closes with RST_STREAM NO_ERROR, as
 * any answered stream does: on_frame_send). */
static void tunnel_shutdown(fd_stream_t *s)
{
    h2s_t *st = s->tls;

    if (st == NULL || st->sh.out_end)
        return;
    st->sh.out_end = 1;
    resume_data(st);
    conn_post(st->hc);
}

/* The splice is over: a stream not ended both ways is reset
 * (CONNECT_ERROR, RFC 9113 8.5: the tunnel failed or timed out). */
static void tunnel_close(fd_stream_t *s)
{
    h2s_t *st = s->tls;

    if (st == NULL)
        return;
    s->tls = NULL;
    st->tunnel = NULL;
    if (!(st->sh.out_end && st->sh.in_ended)) {
        st->sh.out_end = 1;
        nghttp2_submit_rst_stream(st->hc->ss, NGHTTP2_FLAG_NONE, st->sh.id,
                                  NGHTTP2_CONNECT_ERROR);
    }
    resume_data(st);
    conn_post(st->hc);
}

static const fd_transport_t tunnel_transport = {
    .name = "h2-stream",
    .recv = tunnel_recv,
    .send = tunnel_send,
    .sendfile = tunnel_sendfile,
    .shutdown = tunnel_shutdown,
    .close = tunnel_close,
};

int fd_h2_detach(fd_request_t *r, fd_stream_t *to)
{
    h2s_t *st = H2S(r->h2);

    /* an HTTP/3 stream (r->h2 is its h3s_t) carries no tunnel: RFC 9220
     * is not spoken; never read it as an HTTP/2 one */
    FD_H3_PASS(r, FD_ERROR);

    if (st == NULL || st->hc == NULL || st->sh.closed || !r->in.ext_connect ||
        !st->sh.provider || st->sh.out_end)
        return FD_ERROR;
    to->tp = &tunnel_transport;
    to->tls = st;
    to->ev.fd = -1;
    st->tunnel = to;
    /* the request is over for the engine (logged with its 200); its
     * memory stays with the stream until that closes */
    r->on_drain = NULL;
    r->on_abort = NULL;
    r->on_body = NULL;
    r->async = 0;
    r->phase = PH_RESPONSE;
    fd_http_access_count(r);
    r->done = 1;
    conn_post(st->hc);
    return FD_OK;
}

/* --- the connection --- */

/* The streams' jobs: start requests, feed bodies, tell producers the
 * output drained. */
static void h2_run(h2c_t *hc)
{
    fd_http_shead_t *sh;

    while ((sh = fd_http_srun_take(&hc->run)) != NULL) {
        h2s_t *st = H2S(sh);

        if (sh->closed || sh->r == NULL)
            continue;
        if (st->job_tunnel) {
            /* the splice moves what the stream now has room or bytes for
             * (it may end, and let the stream go) */
            st->job_tunnel = 0;
            if (st->tunnel)
                fd_splice_kick(st->tunnel);
            continue;
        }
        fd_http_shead_run(sh, request_begin, consume_stream);
    }
}

static void h2_fatal(h2c_t *hc, int rv)
{
    uint32_t code = NGHTTP2_PROTOCOL_ERROR;

    if (rv == NGHTTP2_ERR_FLOODED
#ifdef NGHTTP2_ERR_TOO_MANY_CONTINUATIONS
        || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS
#endif
    )
        code = NGHTTP2_ENHANCE_YOUR_CALM;
    else if (rv == NGHTTP2_ERR_NOMEM || rv == NGHTTP2_ERR_CALLBACK_FAILURE)
        code = NGHTTP2_INTERNAL_ERROR;
    fd_log_error(FD_LOG_INFO, 0, "HTTP/2 connection ended: %s",
                 nghttp2_strerror(rv));
    fd_stats->h2_goaways++;
    /* a session past a fatal error frames nothing more: the GOAWAY is
     * written by hand (9-byte header, last stream id, error code) */
    {
        uint8_t f[17] = {0, 0, 8, NGHTTP2_GOAWAY, 0, 0, 0, 0, 0};
        uint32_t last = (uint32_t)nghttp2_session_get_last_proc_stream_id(
            hc->ss);
        f[9] = (uint8_t)(last >> 24 & 0x7f);
        f[10] = (uint8_t)(last >> 16);
        f[11] = (uint8_t)(last >> 8);
        f[12] = (uint8_t)last;
        f[13] = (uint8_t)(code >> 24);
        f[14] = (uint8_t)(code >> 16);
        f[15] = (uint8_t)(code >> 8);
        f[16] = (uint8_t)code;
        if (fd_outq_append(&hc->h->out, f, sizeof(f)) == FD_OK)
            hc->queued += sizeof(f);
    }
    hc->closing = 1;
}

/* Read and hand the bytes to nghttp2 until the socket is empty, or the
 * output is too far behind to take more work on. */
static void h2_read(h2c_t *hc)
{
    fd_connection_t *c = hc->c;
    fd_http_conn_t *h = hc->h;
    size_t size = fd_worker->rbufs.size;

    while (c->s.readable && !hc->closing && !hc->terminated &&
           h->out.bytes < H2_OUT_MAX) {
        ssize_t n;
        ssize_t rv;

        if (h->rbuf == NULL &&
            (h->rbuf = fd_block_get(&fd_worker->rbufs)) == NULL) {
            hc->closing = 1;
            return;
        }
        n = fd_stream_recv(&c->s, h->rbuf, size);

        if (n <= 0) {
            c->s.readable = 0;
            if (n == 0 || c->s.error)
                hc->closing = 1;
            return;
        }
        fd_stats->bytes_in += (uint64_t)n;
        hc->received += (uint64_t)n;
        rv = h2_feed(hc, (const uint8_t *)h->rbuf, (size_t)n);
        if (rv < 0) {
            h2_fatal(hc, (int)rv);
            return;
        }
        h2_run(hc);
        if ((size_t)n < size && c->s.tp->short_read_drains)
            c->s.readable = 0;
    }
}

/* Frame what nghttp2 has into the connection's queue and write it. */
static void h2_send(h2c_t *hc)
{
    fd_http_conn_t *h = hc->h;

    while (!hc->closing && h->out.bytes < H2_OUT_MAX) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(hc->ss, &data);
        if (n < 0) {
            h2_fatal(hc, (int)n);
            break;
        }
        if (n == 0)
            break;
        if (fd_outq_append(&h->out, data, (size_t)n) != FD_OK) {
            h2_fatal(hc, NGHTTP2_ERR_NOMEM);
            break;
        }
        hc->queued += (uint64_t)n;
    }
    if (!fd_outq_empty(&h->out) && fd_http_flush(hc->c) == FD_ERROR)
        hc->closing = 1;
}

/* What the open streams wait for: H2_STUCK, response bytes the client's
 * window holds back; H2_OWED, bytes the client owes (a header block not
 * ended, a buffered body not all here). */
enum { H2_STUCK = 1, H2_OWED = 2 };

static int streams_wait(const h2c_t *hc)
{
    const fd_http_shead_t *sh;
    int w = 0;

    for (sh = hc->streams; sh; sh = sh->next) {
        const h2s_t *st = H2S(sh);
        if (st->sh.provider && !st->sh.deferred &&
            (st->oq.bytes || st->sh.out_end))
            w |= H2_STUCK;
        if (!st->sh.in_ended &&
            (!st->sh.started || (st->sh.r && st->sh.r->phase == PH_BODY)))
            w |= H2_OWED;
    }
    return w;
}

/* Close, or wait: for the socket, the streams, or the idle timeout. */
static void h2_after(h2c_t *hc)
{
    fd_connection_t *c = hc->c;
    fd_http_conn_t *h = hc->h;
    uint64_t sent = hc->queued - h->out.bytes;
    const fd_http_conf_t *conf = &fd_worker->cycle->http;

    reap(hc);
    if (fd_worker->quitting && !hc->goaway) {
        /* a graceful stop: streams in flight finish, no new ones */
        nghttp2_submit_goaway(hc->ss, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(hc->ss),
                              NGHTTP2_NO_ERROR, NULL, 0);
        hc->goaway = 1;
        h2_send(hc);
    }
    if (c->s.error ||
        (hc->closing && (fd_outq_empty(&h->out) || c->s.eof)) ||
        (!nghttp2_session_want_read(hc->ss) &&
         !nghttp2_session_want_write(hc->ss) && fd_outq_empty(&h->out))) {
        fd_connection_close(c);
        return;
    }
    if (hc->nstreams == 0 && !hc->closing) {
        if (h->rbuf && fd_outq_empty(&h->out) && hc->zombies == NULL) {
            /* idle now: the buffers go back until the next frame */
            fd_outq_clear(&h->out);
            if (h->rbuf) {
                fd_block_put(&fd_worker->rbufs, h->rbuf);
                h->rbuf = NULL;
            }
            if (c->s.tp->idle)
                c->s.tp->idle(&c->s);
        }
        if (c->state != FD_CONN_IDLE || sent != hc->sent_seen) {
            fd_connection_set_state(c, FD_CONN_IDLE);
            fd_connection_set_timeout(c, fd_worker->quitting
                                             ? fd_min(conf->http2_idle_timeout,
                                                      1000)
                                             : conf->http2_idle_timeout);
        }
    } else {
        fd_connection_set_state(c, FD_CONN_BUSY);
        if (!fd_outq_empty(&h->out)) {
            /* a client that reads nothing (or opens no window) has
             * send_timeout from the last byte it took */
            if (sent != hc->sent_seen || c->s.deadline == 0)
                fd_connection_set_timeout(c, conf->send_timeout);
        } else if (hc->closing) {
            fd_connection_set_timeout(c, conf->send_timeout);
        } else {
            int w = streams_wait(hc);
            if (w & H2_STUCK) {
                if (sent != hc->sent_seen || c->s.deadline == 0)
                    fd_connection_set_timeout(c, conf->send_timeout);
            } else if (w & H2_OWED) {
                /* body_timeout from the last bytes the client sent */
                if (hc->recv_seen != hc->received || c->s.deadline == 0)
                    fd_connection_set_timeout(c, conf->body_timeout);
            } else {
                c->s.deadline = 0; /* the modules' own timers rule */
            }
        }
    }
    hc->sent_seen = sent;
    hc->recv_seen = hc->received;
}

static void h2_work(h2c_t *hc)
{
    unsigned i;

    fd_log_conn_id = hc->c->id;
    for (i = 0; i < H2_RUN_ROUNDS; i++) {
        h2_run(hc);
        h2_send(hc);
        if (hc->run.head == NULL)
            break;
    }
    if (hc->run.head)
        conn_post(hc); /* the rest after a look at the other clients */
    h2_after(hc);
    fd_log_conn_id = 0;
}

static void h2_event(fd_event_t *ev, uint32_t events)
{
    fd_connection_t *c = (fd_connection_t *)ev;
    h2c_t *hc = c->h->h2;

    fd_stream_events(&c->s, events);
    if (c->s.error) {
        fd_connection_close(c);
        return;
    }
    fd_log_conn_id = c->id;
    h2_read(hc);
    h2_work(hc);
}

static void h2_posted(void *data)
{
    h2c_t *hc = data;

    hc->posted = 0;
    if (hc->c == NULL)
        free(hc); /* the connection closed after posting */
    else
        h2_work(hc);
}

static int h2_global_init(void)
{
    nghttp2_session_callbacks *cb;

    if (callbacks)
        return FD_OK;
    if (nghttp2_session_callbacks_new(&cb) != 0 ||
        nghttp2_option_new(&options) != 0)
        return FD_ERROR;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                            on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb,
                                                              on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb,
                                                           on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, send_data);
    nghttp2_option_set_no_auto_window_update(options, 1);
    /* the floods nghttp2 counts itself: queued PING/SETTINGS ACKs, the
     * number of SETTINGS entries, CONTINUATION frames per header block */
    nghttp2_option_set_max_outbound_ack(options, 1000);
    nghttp2_option_set_max_settings(options, 32);
    nghttp2_option_set_max_continuations(options, 8);
    callbacks = cb;
    return FD_OK;
}

int fd_h2_start(fd_connection_t *c)
{
    const fd_http_conf_t *conf = &fd_worker->cycle->http;
    fd_http_conn_t *h = c->h;
    nghttp2_settings_entry set[4];
    h2c_t *hc;
    uint32_t mask = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

    if (h2_global_init() != FD_OK)
        return FD_ERROR;
    hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return FD_ERROR;
    if (nghttp2_session_server_new2(&hc->ss, callbacks, hc, options) != 0) {
        free(hc);
        return FD_ERROR;
    }
    hc->c = c;
    hc->h = h;
    hc->run.last = &hc->run.head;
    hc->rst_budget = 2 * (int)conf->http2_max_concurrent_streams;
    hc->ctl_budget = H2_CTL_MAX;
    hc->fr_skip = NGHTTP2_CLIENT_MAGIC_LEN; /* the preface: no frame */
    hc->post.handler = h2_posted;
    hc->post.data = hc;
    h->h2 = hc;
    c->h2 = 1;
    /* each stream has a pool of its own: the connection's is not used */
    if (h->pool) {
        fd_pool_destroy(h->pool);
        h->pool = NULL;
    }
    fd_stats->h2_conns++;
    fd_stats->h2_active++;
    set[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
    set[0].value = (uint32_t)conf->http2_max_concurrent_streams;
    set[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    set[1].value = (uint32_t)conf->http2_initial_window;
    set[2].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
    set[2].value = (uint32_t)conf->http2_max_header_size;
    /* RFC 8441: WebSocket over a stream (request_begin) */
    set[3].settings_id = NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL;
    set[3].value = 1;
    if (nghttp2_submit_settings(hc->ss, NGHTTP2_FLAG_NONE, set, 4) != 0 ||
        nghttp2_session_set_local_window_size(hc->ss, NGHTTP2_FLAG_NONE, 0,
                                              H2_CONN_WINDOW) != 0)
        return FD_ERROR;
    /* every event from here, edge-triggered: the session reads and writes
     * as it goes */
    c->s.ev.handler = h2_event;
    c->s.et = 1;
    if ((c->s.registered ? fd_event_mod(&c->s.ev, mask)
                         : fd_event_add(&c->s.ev, mask)) < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "epoll_ctl() failed");
        return FD_ERROR;
    }
    c->s.registered = 1;
    if (!c->s.nodelay) {
        int one = 1;
        setsockopt(c->s.ev.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->s.nodelay = 1;
    }
    fd_connection_set_state(c, FD_CONN_BUSY);
    /* what the HTTP/1.1 side read already: the preface, maybe more */
    if (h->rlast > h->rpos) {
        ssize_t rv;
        rv = h2_feed(hc, (const uint8_t *)h->rbuf + h->rpos,
                     h->rlast - h->rpos);
        h->rpos = h->rlast = 0;
        if (rv < 0)
            h2_fatal(hc, (int)rv);
    }
    c->s.readable = 1;
    h2_read(hc);
    h2_work(hc);
    return FD_OK;
}

void fd_h2_timeout(fd_connection_t *c)
{
    h2c_t *hc = c->h->h2;

    if (hc->nstreams == 0 && !hc->closing && !hc->goaway) {
        /* idle (or a graceful stop): GOAWAY, and the connection closes
         * once it is written (h2_after), or at send_timeout */
        nghttp2_submit_goaway(hc->ss, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(hc->ss),
                              NGHTTP2_NO_ERROR, NULL, 0);
        hc->goaway = 1;
        h2_work(hc);
        if (c->s.ev.fd >= 0 && c->h && c->h->h2 == hc)
            fd_connection_set_timeout(c, fd_worker->cycle->http.send_timeout);
        return;
    }
    if (hc->nstreams)
        fd_log_error(FD_LOG_INFO, 0, "client timed out %s",
                     streams_wait(hc) & H2_STUCK ? "reading the response"
                                                 : "sending the request");
    fd_connection_close(c);
}

void fd_h2_quit(fd_connection_t *c)
{
    conn_post(c->h->h2); /* h2_after sends the GOAWAY */
}

int fd_h2_idle(fd_connection_t *c)
{
    return c->h == NULL || c->h->h2 == NULL || c->h->h2->nstreams == 0;
}

/* The connection closes: every stream goes with it. */
void fd_h2_release(fd_connection_t *c)
{
    h2c_t *hc = c->h->h2;
    h2s_t *st;

    while ((st = H2S(hc->streams)) != NULL) {
        nghttp2_session_set_stream_user_data(hc->ss, (int32_t)st->sh.id,
                                             NULL);
        stream_closed(st);
    }
    /* orphans, of before or just now: freed when their module lets go */
    while ((st = H2S(hc->orphans)) != NULL) {
        FD_LIST_UNLINK(&st->sh);
        st->hc = NULL;
    }
    while ((st = H2S(hc->zombies)) != NULL)
        stream_free(st);
    /* orphans (a module still holds the request) keep their stream */
    nghttp2_session_del(hc->ss);
    c->h->h2 = NULL;
    c->h2 = 0;
    fd_stats->h2_active--;
    hc->c = NULL;
    if (!hc->posted)
        free(hc);
}
