/*
 * h3load: an HTTP/3 load client for tests/bench/run's h3 profile (Debian's
 * h2load has no HTTP/3), on ngtcp2 (GnuTLS crypto) and nghttp3. One
 * epoll loop, no threads; a connected UDP socket per connection.
 *
 *   h3load [-c CONNS] [-m STREAMS] [-D SECONDS | -n REQUESTS] [-v] URL
 *
 * CONNS connections (1), each with STREAMS GETs of URL in flight (1),
 * for SECONDS (5) or until REQUESTS responses came. A request counts
 * as done when its response has ended: "ok" only when it was complete,
 * a 200 whose body is as long as its Content-Length (when it has one)
 * and its stream closed without an error; every other end is an error.
 * The clock starts once every connection's handshake is over. Prints,
 * like h2load:
 *
 *   finished in 5.00s, 123456.78 req/s
 *   requests: N done, N ok, N errors, N connections failed
 *   status codes: N 2xx, N 3xx, N 4xx, N 5xx
 *
 * -v prints each response's status and body on stdout (for checks, with
 * -n). The certificate is not verified: this is a benchmark.
 *
 * -A CASE: one connection misbehaves (tests/http3_attacks.t), and what
 * ended it is printed: "closed: application 0x107" (the server's
 * CONNECTION_CLOSE), "idle" (it went silent), with "received N bytes".
 *   unexpected  a request stream starting with DATA (H3_FRAME_UNEXPECTED)
 *   nosettings  a control stream whose first frame is not SETTINGS
 *   push        a push stream, which only servers open
 *   frame       a SETTINGS frame cut inside a value (H3_FRAME_ERROR)
 *   qpack       an encoder stream setting a table over the server's
 *   blocked     120 request streams each waiting on a QPACK insert that
 *               never comes, past the server's blocked-streams limit
 *   reset       requests reset as soon as sent (rapid reset)
 *   noack       a GET of URL, then not one packet more: no ACKs
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp3/nghttp3.h>

#include "../lib/quic_client.h"
#define MAX_PKT 1452
#define GSO_PKTS 32

typedef struct conn_s conn_t;

typedef struct {
    int64_t id;
    int status;
    int64_t clen; /* Content-Length, -1 without */
    int64_t got;  /* body bytes */
    int ended;    /* nghttp3's end_stream */
} req_t;

struct conn_s {
    int fd;
    ngtcp2_conn *q;
    nghttp3_conn *h;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    ngtcp2_path_storage ps;
    struct sockaddr_storage local, remote;
    socklen_t locallen, remotelen;
    unsigned inflight;
    int ready; /* handshake over, h3 streams bound */
    int dead;
};

static struct {
    unsigned conns, streams;
    double seconds;
    uint64_t max_requests;
    int verbose;
    const char *host, *port, *path;
    char authority[300];
    const char *attack;
} opt = {1, 1, 5.0, 0, 0, NULL, NULL, NULL, "", NULL};

/* -A: raw stream bytes to send, in order, and the attack's state */
typedef struct {
    int64_t id;
    uint8_t data[64];
    size_t len, off;
    int fin;
} raw_t;

static raw_t raws[256];
static unsigned nraw, rawi;
static int64_t resets[256];
static unsigned nresets;
static uint64_t rx_bytes;
static int muted;

static int attack(const char *name)
{
    return opt.attack && strcmp(opt.attack, name) == 0;
}

static struct {
    uint64_t done, ok, errors, failed_conns, issued;
    uint64_t codes[6];
} st;

static conn_t *conns;
static gnutls_certificate_credentials_t cred;
static int ep;
static int measuring, stopping;
static uint64_t t_start, t_end;
static unsigned nready, ndead;
static uint8_t txbuf[GSO_PKTS * MAX_PKT];

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "h3load: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void conn_fail(conn_t *c, const char *why);
static int submit(conn_t *c);

/* --- a request's end --- */

static void req_end(conn_t *c, req_t *r, int clean)
{
    int k = r->status / 100;

    /* with -n, every response counts: one that ended before the last
     * handshake (the clock's start) was issued all the same */
    if ((measuring || opt.max_requests) && !stopping) {
        st.done++;
        st.codes[k >= 1 && k <= 5 ? k : 0]++;
        if (clean && r->ended && r->status == 200 &&
            (r->clen < 0 || r->clen == r->got))
            st.ok++;
        else
            st.errors++;
    }
    c->inflight--;
    free(r);
}

/* --- nghttp3 --- */

static int h_recv_header(nghttp3_conn *h, int64_t id, int32_t token,
                         nghttp3_rcbuf *name, nghttp3_rcbuf *value,
                         uint8_t flags, void *ud, void *sud)
{
    nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
    req_t *r = sud;
    char num[24];

    (void)h, (void)id, (void)name, (void)flags, (void)ud;
    if (r == NULL || v.len >= sizeof(num))
        return 0;
    memcpy(num, v.base, v.len);
    num[v.len] = '\0';
    if (token == NGHTTP3_QPACK_TOKEN__STATUS)
        r->status = atoi(num);
    else if (token == NGHTTP3_QPACK_TOKEN_CONTENT_LENGTH)
        r->clen = strtoll(num, NULL, 10);
    if (opt.verbose && token == NGHTTP3_QPACK_TOKEN__STATUS)
        printf("status %s\n", num);
    return 0;
}

static int h_recv_data(nghttp3_conn *h, int64_t id, const uint8_t *data,
                       size_t len, void *ud, void *sud)
{
    conn_t *c = ud;
    req_t *r = sud;

    (void)h;
    if (r)
        r->got += (int64_t)len;
    if (opt.verbose)
        fwrite(data, 1, len, stdout);
    ngtcp2_conn_extend_max_stream_offset(c->q, id, len);
    ngtcp2_conn_extend_max_offset(c->q, len);
    return 0;
}

static int h_deferred_consume(nghttp3_conn *h, int64_t id, size_t n, void *ud,
                              void *sud)
{
    conn_t *c = ud;

    (void)h, (void)sud;
    ngtcp2_conn_extend_max_stream_offset(c->q, id, n);
    ngtcp2_conn_extend_max_offset(c->q, n);
    return 0;
}

static int h_end_stream(nghttp3_conn *h, int64_t id, void *ud, void *sud)
{
    req_t *r = sud;

    (void)h, (void)id, (void)ud;
    if (r)
        r->ended = 1;
    if (opt.verbose)
        printf("\nend\n");
    return 0;
}

static int h_stream_close(nghttp3_conn *h, int64_t id, uint64_t code, void *ud,
                          void *sud)
{
    conn_t *c = ud;
    req_t *r = sud;

    (void)h, (void)id;
    if (r == NULL)
        return 0;
    req_end(c, r, code == NGHTTP3_H3_NO_ERROR);
    return 0;
}

static int h_acked_stream_data(nghttp3_conn *h, int64_t id, uint64_t n,
                               void *ud, void *sud)
{
    (void)h, (void)id, (void)n, (void)ud, (void)sud;
    return 0;
}

static int h_stop_sending(nghttp3_conn *h, int64_t id, uint64_t code, void *ud,
                          void *sud)
{
    conn_t *c = ud;

    (void)h, (void)sud;
    return ngtcp2_conn_shutdown_stream_read(c->q, 0, id, code) == 0
               ? 0
               : NGHTTP3_ERR_CALLBACK_FAILURE;
}

static int h_reset_stream(nghttp3_conn *h, int64_t id, uint64_t code, void *ud,
                          void *sud)
{
    conn_t *c = ud;

    (void)h, (void)sud;
    return ngtcp2_conn_shutdown_stream_write(c->q, 0, id, code) == 0
               ? 0
               : NGHTTP3_ERR_CALLBACK_FAILURE;
}

static int h3_setup(conn_t *c)
{
    static const nghttp3_callbacks cb = {
        .acked_stream_data = h_acked_stream_data,
        .stream_close = h_stream_close,
        .recv_data = h_recv_data,
        .deferred_consume = h_deferred_consume,
        .recv_header = h_recv_header,
        .end_stream = h_end_stream,
        .stop_sending = h_stop_sending,
        .reset_stream = h_reset_stream,
    };
    nghttp3_settings s;
    int64_t ctrl, enc, dec;

    nghttp3_settings_default(&s);
    s.qpack_max_dtable_capacity = 4096;
    s.qpack_blocked_streams = 100;
    if (nghttp3_conn_client_new(&c->h, &cb, &s, NULL, c) != 0)
        return -1;
    if (ngtcp2_conn_open_uni_stream(c->q, &ctrl, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(c->q, &enc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(c->q, &dec, NULL) != 0 ||
        nghttp3_conn_bind_control_stream(c->h, ctrl) != 0 ||
        nghttp3_conn_bind_qpack_streams(c->h, enc, dec) != 0)
        return -1;
    return 0;
}

/* Keep opt.streams requests in flight while there is time (and a stream
 * ngtcp2 lets us open). */
static int submit(conn_t *c)
{
    nghttp3_nv nva[] = {
        {(uint8_t *)":method", (uint8_t *)"GET", 7, 3, 0},
        {(uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0},
        {(uint8_t *)":authority", (uint8_t *)opt.authority, 10,
         strlen(opt.authority), 0},
        {(uint8_t *)":path", (uint8_t *)opt.path, 5, strlen(opt.path), 0},
        {(uint8_t *)"user-agent", (uint8_t *)"h3load", 10, 6, 0},
    };

    if (c->h == NULL)
        return 0; /* a raw case's */
    while (c->ready && !c->dead && !stopping && c->inflight < opt.streams &&
           (opt.max_requests == 0 || st.issued < opt.max_requests)) {
        req_t *r;
        int64_t id;
        int rv = ngtcp2_conn_open_bidi_stream(c->q, &id, NULL);

        if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED)
            break; /* extend_max_local_streams_bidi brings us back */
        if (rv != 0)
            return -1;
        if ((r = calloc(1, sizeof(*r))) == NULL)
            die("out of memory");
        r->id = id;
        r->clen = -1;
        if (nghttp3_conn_submit_request(
                c->h, id, nva, sizeof(nva) / sizeof(nva[0]), NULL, r) != 0) {
            free(r);
            return -1;
        }
        c->inflight++;
        st.issued++;
        if (attack("reset") && nresets < 256)
            resets[nresets++] = id; /* reset once its HEADERS are out */
        if (attack("noack"))
            break; /* one request */
    }
    return 0;
}

/* --- ngtcp2 --- */

static void raw_add(int64_t id, const void *data, size_t len, int fin)
{
    raw_t *w = &raws[nraw++];

    w->id = id;
    memcpy(w->data, data, len);
    w->len = len;
    w->off = 0;
    w->fin = fin;
}

/* The raw cases: streams of our own bytes, no nghttp3 */
static int attack_raw(conn_t *c)
{
    int64_t id;
    unsigned i;

    if (attack("unexpected")) {
        /* DATA before HEADERS on a request stream */
        if (ngtcp2_conn_open_bidi_stream(c->q, &id, NULL) != 0)
            return -1;
        raw_add(id, "\x00\x01x", 3, 1);
    } else if (attack("nosettings") || attack("frame") || attack("push")) {
        if (ngtcp2_conn_open_uni_stream(c->q, &id, NULL) != 0)
            return -1;
        if (attack("nosettings")) /* control, GOAWAY first */
            raw_add(id, "\x00\x07\x01\x00", 4, 0);
        else if (attack("frame")) /* control, SETTINGS of 1 byte: half
                                   * of a 2-byte varint */
            raw_add(id, "\x00\x04\x01\x40", 4, 0);
        else /* a push stream (type 1), push ID 0 */
            raw_add(id, "\x01\x00", 2, 0);
    } else if (attack("qpack")) {
        uint8_t b[16] = {0x02}; /* the encoder stream */
        size_t n = 1;
        if (ngtcp2_conn_open_uni_stream(c->q, &id, NULL) != 0)
            return -1;
        /* Set Dynamic Table Capacity 1 MB: over the server's 4 KB */
        n += qpack_int(b + n, 0x20, 5, 1 << 20);
        raw_add(id, b, n, 0);
    } else if (attack("blocked")) {
        /* each: HEADERS whose field line is dynamic entry 0, with a
         * Required Insert Count of 1 (encoded 2) the encoder stream never
         * brings */
        for (i = 0; i < 120; i++) {
            if (ngtcp2_conn_open_bidi_stream(c->q, &id, NULL) != 0)
                break;
            raw_add(id, "\x01\x03\x02\x00\x80", 5, 1);
        }
    } else {
        return 1; /* an nghttp3 case */
    }
    return 0;
}

static int q_handshake_completed(ngtcp2_conn *q, void *ud)
{
    conn_t *c = ud;
    int rv;

    (void)q;
    if (opt.attack && (rv = attack_raw(c)) <= 0) {
        c->ready = 1;
        nready++;
        measuring = 1;
        t_start = now_ns();
        return rv == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
    }
    if (h3_setup(c) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    c->ready = 1;
    if (++nready == opt.conns) {
        measuring = 1;
        t_start = now_ns();
    }
    return submit(c) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_recv_stream_data(ngtcp2_conn *q, uint32_t flags, int64_t id,
                              uint64_t off, const uint8_t *data, size_t len,
                              void *ud, void *sud)
{
    conn_t *c = ud;
    nghttp3_ssize n;

    if (c->h == NULL)
        return 0; /* -A: a raw case's streams */
    (void)off, (void)sud;
    n = nghttp3_conn_read_stream(c->h, id, data, len,
                                 flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (n < 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    ngtcp2_conn_extend_max_stream_offset(q, id, (uint64_t)n);
    ngtcp2_conn_extend_max_offset(q, (uint64_t)n);
    return 0;
}

static int q_acked(ngtcp2_conn *q, int64_t id, uint64_t off, uint64_t len,
                   void *ud, void *sud)
{
    conn_t *c = ud;

    if (c->h == NULL)
        return 0; /* -A: a raw case's streams */
    (void)q, (void)off, (void)sud;
    return nghttp3_conn_add_ack_offset(c->h, id, len) == 0
               ? 0
               : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_stream_close(ngtcp2_conn *q, uint32_t flags, int64_t id,
                          uint64_t code, void *ud, void *sud)
{
    conn_t *c = ud;
    int rv;

    if (c->h == NULL)
        return 0; /* -A: a raw case's streams */
    (void)q, (void)sud;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = NGHTTP3_H3_NO_ERROR;
    rv = nghttp3_conn_close_stream(c->h, id, code);
    if (rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int q_stream_reset(ngtcp2_conn *q, int64_t id, uint64_t size,
                          uint64_t code, void *ud, void *sud)
{
    conn_t *c = ud;

    if (c->h == NULL)
        return 0; /* -A: a raw case's streams */
    (void)q, (void)size, (void)code, (void)sud;
    return nghttp3_conn_shutdown_stream_read(c->h, id) == 0
               ? 0
               : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_stop_sending(ngtcp2_conn *q, int64_t id, uint64_t code, void *ud,
                          void *sud)
{
    conn_t *c = ud;

    if (c->h == NULL)
        return 0; /* -A: a raw case's streams */
    (void)q, (void)code, (void)sud;
    return nghttp3_conn_shutdown_stream_read(c->h, id) == 0
               ? 0
               : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_extend_max_streams(ngtcp2_conn *q, uint64_t max, void *ud)
{
    (void)q, (void)max;
    return submit(ud) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int q_extend_max_stream_data(ngtcp2_conn *q, int64_t id, uint64_t max,
                                    void *ud, void *sud)
{
    conn_t *c = ud;

    if (c->h == NULL)
        return 0; /* -A: a raw case's streams */
    (void)q, (void)max, (void)sud;
    return nghttp3_conn_unblock_stream(c->h, id) == 0
               ? 0
               : NGTCP2_ERR_CALLBACK_FAILURE;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((conn_t *)ref->user_data)->q;
}

/* --- a connection --- */

static void conn_open(conn_t *c, const struct addrinfo *ai)
{
    static const ngtcp2_callbacks cb = {
        QUIC_CLIENT_CALLBACKS,
        .handshake_completed = q_handshake_completed,
        .recv_stream_data = q_recv_stream_data,
        .acked_stream_data_offset = q_acked,
        .stream_close = q_stream_close,
        .stream_reset = q_stream_reset,
        .stream_stop_sending = q_stop_sending,
        .extend_max_local_streams_bidi = q_extend_max_streams,
        .extend_max_stream_data = q_extend_max_stream_data,
    };
    ngtcp2_settings s;
    ngtcp2_transport_params p;
    ngtcp2_cid dcid, scid;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    int buf = 4 << 20;

    c->fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0 || connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("socket/connect: %s", strerror(errno));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    c->locallen = sizeof(c->local);
    getsockname(c->fd, (struct sockaddr *)&c->local, &c->locallen);
    memcpy(&c->remote, ai->ai_addr, ai->ai_addrlen);
    c->remotelen = ai->ai_addrlen;
    ngtcp2_path_storage_init(&c->ps, (struct sockaddr *)&c->local, c->locallen,
                             (struct sockaddr *)&c->remote, c->remotelen, NULL);
    dcid.datalen = 18;
    scid.datalen = 8;
    if (getrandom(dcid.data, dcid.datalen, 0) != 18 ||
        getrandom(scid.data, scid.datalen, 0) != 8)
        die("getrandom() failed");
    quic_client_params(&s, &p, now_ns(), 1 << 20, 16 << 20);
    s.max_window = 24 << 20;
    s.max_stream_window = 16 << 20;
    if (ngtcp2_conn_client_new(&c->q, &dcid, &scid, &c->ps.path,
                               NGTCP2_PROTO_VER_V1, &cb, &s, &p, NULL, c) != 0)
        die("ngtcp2_conn_client_new() failed");
    c->ref.get_conn = get_conn;
    c->ref.user_data = c;
    if (quic_client_tls(&c->tls, cred, opt.host, &c->ref, c->q) != 0)
        die("GnuTLS session setup failed");
    if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
}

/* One send of len bytes: packets of gso bytes but the last (UDP GSO). */
static void send_batch(conn_t *c, const uint8_t *data, size_t len, size_t gso)
{
    struct iovec iov = {(void *)data, len};
    char cbuf[CMSG_SPACE(sizeof(uint16_t))];
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    if (len > gso) {
        struct cmsghdr *cm;
        uint16_t seg = (uint16_t)gso;

        memset(cbuf, 0, sizeof(cbuf));
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof(cbuf);
        cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(seg));
        memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    }
    do
        n = sendmsg(c->fd, &msg, 0);
    while (n < 0 && errno == EINTR);
    /* EAGAIN and the like: QUIC takes it as a loss */
}

/* Frame what ngtcp2 and nghttp3 have; packets of one size go out
 * together. */
static void conn_write(conn_t *c)
{
    ngtcp2_tstamp ts = now_ns();
    size_t npkts = 0, gso = 0;
    uint8_t *p = txbuf;

    if (c->dead || muted)
        return;
again:
    for (;;) {
        int64_t sid = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize nvec = 0;
        ngtcp2_ssize n, ndatalen;
        ngtcp2_pkt_info pi;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
        raw_t *w = rawi < nraw ? &raws[rawi] : NULL;

        if (w) {
            sid = w->id;
            vec[0].base = w->data + w->off;
            vec[0].len = w->len - w->off;
            nvec = 1;
            fin = w->fin;
        } else if (c->h && ngtcp2_conn_get_max_data_left(c->q)) {
            nvec = nghttp3_conn_writev_stream(c->h, &sid, &fin, vec, 16);
            if (nvec < 0) {
                conn_fail(c, nghttp3_strerror((int)nvec));
                return;
            }
        }
        if (fin)
            flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        n = ngtcp2_conn_writev_stream(
            c->q, &c->ps.path, &pi, p, MAX_PKT, &ndatalen, flags, sid,
            (const ngtcp2_vec *)vec, (size_t)nvec, ts);
        if (w && ndatalen >= 0 && (w->off += (size_t)ndatalen) == w->len)
            rawi++;
        if (w && n < 0) {
            if (n == NGTCP2_ERR_WRITE_MORE)
                continue;
            rawi++; /* blocked or shut: that stream's bytes are dropped */
            if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED ||
                n == NGTCP2_ERR_STREAM_SHUT_WR)
                continue;
        }
        if (w)
            sid = -1; /* nghttp3 knows nothing of it */
        if (n < 0) {
            if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
                nghttp3_conn_block_stream(c->h, sid);
                continue;
            }
            if (n == NGTCP2_ERR_STREAM_SHUT_WR) {
                nghttp3_conn_shutdown_stream_write(c->h, sid);
                continue;
            }
            if (n == NGTCP2_ERR_WRITE_MORE) {
                if (nghttp3_conn_add_write_offset(c->h, sid,
                                                  (size_t)ndatalen) != 0) {
                    conn_fail(c, "nghttp3_conn_add_write_offset()");
                    return;
                }
                continue;
            }
            conn_fail(c, ngtcp2_strerror((int)n));
            return;
        }
        if (ndatalen >= 0 && sid >= 0 &&
            nghttp3_conn_add_write_offset(c->h, sid, (size_t)ndatalen) != 0) {
            conn_fail(c, "nghttp3_conn_add_write_offset()");
            return;
        }
        if (n == 0)
            break;
        if (npkts && (size_t)n > gso) {
            /* longer than the batch's: it starts the next one */
            send_batch(c, txbuf, (size_t)(p - txbuf), gso);
            memmove(txbuf, p, (size_t)n);
            p = txbuf;
            npkts = 0;
        }
        if (npkts++ == 0)
            gso = (size_t)n;
        p += n;
        if (npkts == GSO_PKTS || (size_t)n < gso) {
            send_batch(c, txbuf, (size_t)(p - txbuf), gso);
            p = txbuf;
            npkts = 0;
        }
    }
    if (npkts)
        send_batch(c, txbuf, (size_t)(p - txbuf), gso);
    ngtcp2_conn_update_pkt_tx_time(c->q, ts);
    if (attack("noack") && c->inflight && st.issued)
        muted = 1; /* the request is out: not a packet more */
    if (nresets) {
        /* rapid reset: the HEADERS went; RESET_STREAM each now */
        unsigned i;
        for (i = 0; i < nresets; i++)
            ngtcp2_conn_shutdown_stream(c->q, 0, resets[i],
                                        NGHTTP3_H3_REQUEST_CANCELLED);
        nresets = 0;
        npkts = 0;
        p = txbuf;
        goto again;
    }
}

static void conn_fail(conn_t *c, const char *why)
{
    if (c->dead)
        return;
    if (!stopping || !measuring)
        fprintf(stderr, "h3load: a connection failed: %s\n", why);
    c->dead = 1;
    ndead++;
    if (measuring && !stopping) {
        st.failed_conns++;
        st.done += c->inflight;
        st.errors += c->inflight;
    }
    if (!c->ready && ++nready == opt.conns) {
        measuring = 1;
        t_start = now_ns();
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
}

static void conn_read(conn_t *c)
{
    static uint8_t rbuf[65536];
    ngtcp2_pkt_info pi = {0};
    ssize_t n;
    int rv;

    while (!c->dead) {
        n = recv(c->fd, rbuf, sizeof(rbuf), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        rx_bytes += (uint64_t)n;
        rv = ngtcp2_conn_read_pkt(c->q, &c->ps.path, &pi, rbuf, (size_t)n,
                                  now_ns());
        if (rv == NGTCP2_ERR_DRAINING && opt.attack) {
            const ngtcp2_ccerr *ce = ngtcp2_conn_get_ccerr(c->q);
            printf("closed: %s 0x%llx\n",
                   ce->type == NGTCP2_CCERR_TYPE_APPLICATION ? "application"
                                                             : "transport",
                   (unsigned long long)ce->error_code);
        }
        if (rv != 0) {
            conn_fail(c, ngtcp2_strerror(rv));
            return;
        }
    }
    submit(c);
    conn_write(c);
}

static void parse_url(const char *url)
{
    static char buf[1024];
    char *p, *slash, *colon;

    if (strncmp(url, "https://", 8) != 0 || strlen(url) >= sizeof(buf))
        die("URL must be https://HOST[:PORT]/PATH");
    strcpy(buf, url + 8);
    slash = strchr(buf, '/');
    opt.path = slash ? strdup(slash) : "/";
    if (slash)
        *slash = '\0';
    snprintf(opt.authority, sizeof(opt.authority), "%s", buf);
    p = buf;
    if (*p == '[') {
        opt.host = ++p;
        if ((p = strchr(p, ']')) == NULL)
            die("bad URL");
        *p++ = '\0';
        opt.port = *p == ':' ? p + 1 : "443";
    } else {
        opt.host = p;
        colon = strrchr(p, ':');
        opt.port = colon ? (*colon = '\0', colon + 1) : "443";
    }
}

int main(int argc, char **argv)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai;
    struct epoll_event evs[256];
    uint64_t deadline = 0;
    unsigned i;
    int ch, rv;
    double secs;

    while ((ch = getopt(argc, argv, "c:m:D:n:vA:")) != -1) {
        switch (ch) {
        case 'A': opt.attack = optarg; break;
        case 'c': opt.conns = (unsigned)atoi(optarg); break;
        case 'm': opt.streams = (unsigned)atoi(optarg); break;
        case 'D': opt.seconds = atof(optarg); break;
        case 'n': opt.max_requests = strtoull(optarg, NULL, 10); break;
        case 'v': opt.verbose = 1; break;
        default:
            die("usage: h3load [-c CONNS] [-m STREAMS] [-D SECONDS | -n "
                "REQUESTS] [-v] URL");
        }
    }
    if (optind != argc - 1 || opt.conns == 0 || opt.streams == 0)
        die("usage: h3load [-c CONNS] [-m STREAMS] [-D SECONDS | -n "
            "REQUESTS] [-v] URL");
    parse_url(argv[optind]);
    if ((rv = getaddrinfo(opt.host, opt.port, &hints, &ai)) != 0)
        die("%s: %s", opt.host, gai_strerror(rv));
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        die("gnutls_certificate_allocate_credentials() failed");
    if ((ep = epoll_create1(0)) < 0)
        die("epoll_create1: %s", strerror(errno));
    if ((conns = calloc(opt.conns, sizeof(*conns))) == NULL)
        die("out of memory");
    for (i = 0; i < opt.conns; i++) {
        conn_open(&conns[i], ai);
        conn_write(&conns[i]);
    }
    freeaddrinfo(ai);

    for (;;) {
        uint64_t now = now_ns(), next = now + 100000000u;
        int n, timeout;

        if (measuring && deadline == 0 && opt.max_requests == 0)
            deadline = t_start + (uint64_t)(opt.seconds * 1e9);
        if ((deadline && now >= deadline) ||
            (opt.max_requests && st.done >= opt.max_requests) ||
            ndead == opt.conns) {
            t_end = now;
            break;
        }
        /* ngtcp2's timers: losses, ACK delays, pacing, idle */
        for (i = 0; i < opt.conns; i++) {
            conn_t *c = &conns[i];
            ngtcp2_tstamp exp;

            if (c->dead)
                continue;
            exp = ngtcp2_conn_get_expiry(c->q);
            if (exp <= now) {
                if ((rv = ngtcp2_conn_handle_expiry(c->q, now)) != 0) {
                    conn_fail(c, ngtcp2_strerror(rv));
                    continue;
                }
                conn_write(c);
                exp = ngtcp2_conn_get_expiry(c->q);
            }
            if (exp < next)
                next = exp;
        }
        if (deadline && deadline < next)
            next = deadline;
        now = now_ns();
        timeout = next <= now ? 0 : (int)((next - now + 999999) / 1000000);
        n = epoll_wait(ep, evs, 256, timeout);
        for (ch = 0; ch < n; ch++)
            conn_read(evs[ch].data.ptr);
    }

    stopping = 1;
    secs = (double)(t_end - t_start) / 1e9;
    for (i = 0; i < opt.conns; i++) {
        conn_t *c = &conns[i];
        uint8_t buf[MAX_PKT];
        ngtcp2_ccerr ce;
        ngtcp2_pkt_info pi;
        ngtcp2_ssize w;

        if (!c->dead) {
            ngtcp2_ccerr_default(&ce);
            ngtcp2_ccerr_set_application_error(&ce, NGHTTP3_H3_NO_ERROR, NULL,
                                               0);
            w = ngtcp2_conn_write_connection_close(c->q, &c->ps.path, &pi, buf,
                                                   sizeof(buf), &ce, now_ns());
            if (w > 0 && send(c->fd, buf, (size_t)w, 0) < 0) {
                /* the server times it out instead */
            }
        }
    }
    if (opt.attack) {
        if (ndead == 0)
            printf("idle\n");
        printf("received %llu bytes\n", (unsigned long long)rx_bytes);
        return 0;
    }
    if (opt.verbose)
        fflush(stdout);
    printf("finished in %.2fs, %.2f req/s\n", secs,
           secs > 0 ? (double)st.done / secs : 0.0);
    printf("requests: %llu done, %llu ok, %llu errors, %llu connections "
           "failed\n",
           (unsigned long long)st.done, (unsigned long long)st.ok,
           (unsigned long long)st.errors, (unsigned long long)st.failed_conns);
    printf("status codes: %llu 2xx, %llu 3xx, %llu 4xx, %llu 5xx\n",
           (unsigned long long)st.codes[2], (unsigned long long)st.codes[3],
           (unsigned long long)st.codes[4], (unsigned long long)st.codes[5]);
    return st.ok ? 0 : 1;
}
