/*
 * QUIC for clients (RFC 9000) on ngtcp2: the UDP socket each worker reads
 * for a listen ... quic address, the table that maps connection IDs to
 * connections, and each connection's packets, timer and end. TLS is
 * fd_quic_tls.c's (GnuTLS); what the streams carry, HTTP/3, is
 * core/http/fd_http3.c's.
 *
 * A datagram's Destination Connection ID finds its connection. An unknown
 * one with a long header and a version ngtcp2 speaks, that is a client's
 * Initial, makes a new connection; an unknown version gets Version
 * Negotiation (only for a datagram of 1200 bytes or more: an answer never
 * outgrows the question); anything else is dropped. The IDs fastd gives
 * out carry the worker's index in their first byte, and the socket
 * group's BPF program (fd_listen.c, quic_steer) hands each datagram to
 * the worker its ID names, so a client that changes address (migration,
 * a NAT's new port) still reaches the worker that owns its connection.
 * After a reload the new workers read the same sockets: a datagram for
 * an ID of another generation (or worker) is forwarded to its owner
 * (route, fd_quic_fwd.c).
 *
 * Receiving: recvmmsg(), with UDP GRO where the kernel has it; a
 * connection's input posts it to the end of the turn (fd_quic_post).
 * Sending: at the end of a turn in which it had input or its streams
 * produced output, ngtcp2 frames packets until congestion control,
 * pacing or flow control stops it, into the turn's datagrams, which
 * leave in one sendmmsg() per socket before the loop waits
 * (fd_quic_flush); its timer wakes it for losses, pacing and the idle
 * timeout (ngtcp2_conn_get_expiry).
 *
 * The end: an error or a client's CONNECTION_CLOSE starts the closing or
 * draining period (three PTOs), during which a closing connection answers
 * input with its CONNECTION_CLOSE again (at most a few times), then it is
 * freed. Requests a module still holds keep the struct (qc->refs).
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>

#define FD_QUIC_PRIVATE
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_quic.h"

#define QUIC_READ_BATCH 256      /* datagrams per event, then the rest of
                                  * the loop gets a turn */
#define QUIC_RECV_MSGS 16       /* datagrams per recvmmsg() */
#define QUIC_RECV_BUF 65536      /* one of them: with GRO, a train of
                                  * datagrams up to 64 KB */
#define QUIC_MAX_PKT 1500        /* a packet fastd writes (ngtcp2 keeps to
                                  * the path's limit, 1200 until probed) */
#define QUIC_GSO_PKTS 64         /* packets in one send (UDP_SEGMENT) */
#define QUIC_GSO_BYTES 65000     /* and bytes: under UDP's 64 KB */
#define QUIC_TX_BYTES (4 * QUIC_GSO_BYTES) /* the turn's datagrams */
#define QUIC_TX_MSGS 64          /* and batches: one sendmmsg() */
#define QUIC_CLOSE_RESENDS 8
#define QUIC_TABLE 4096          /* buckets of the CID table */
#define QUIC_RETRY_TTL 3         /* seconds a Retry token is good for */
#define QUIC_TOKEN_TTL 600       /* and a NEW_TOKEN one (nginx's too) */
#define QUIC_HALF_OPEN 128       /* quic_retry = auto: Retry beyond this
                                  * many handshakes in progress */

struct fd_quic_sock_s {
    fd_event_t ev;               /* a dup of the worker's socket: the
                                  * worker closes its copies of listening
                                  * sockets at a graceful stop, while QUIC
                                  * connections still finish on this one */
    fd_listening_t *ls;
    fd_posted_t more;            /* the batch ended before EAGAIN */
    unsigned posted:1;
    unsigned no_gso:1;           /* quic_gso off, or UDP_SEGMENT refused */
    unsigned left:1;             /* not read any more: a newer generation
                                  * reads it (fd_quic_fwd_in) */
    fd_quic_sock_t *next;
};

typedef struct cid_ent_s {
    ngtcp2_cid cid;
    fd_quic_conn_t *qc;
    struct cid_ent_s *next;
} cid_ent_t;

static cid_ent_t *table[QUIC_TABLE];
static fd_quic_sock_t *socks;
static unsigned nconns;
static unsigned half_open;       /* connections before their handshake's end */
static ngtcp2_callbacks callbacks;
static uint8_t rbuf[QUIC_RECV_MSGS][QUIC_RECV_BUF]; /* bss: touched as
                                                     * used */

static void conn_write(fd_quic_conn_t *qc);
static void conn_free(fd_quic_conn_t *qc);

ngtcp2_tstamp fd_quic_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ngtcp2_tstamp)ts.tv_sec * NGTCP2_SECONDS +
           (ngtcp2_tstamp)ts.tv_nsec;
}

/* --- the connection ID table --- */

static unsigned cid_hash(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    size_t i;

    for (i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h % QUIC_TABLE;
}

static fd_quic_conn_t *cid_find(const uint8_t *p, size_t n)
{
    cid_ent_t *e;

    for (e = table[cid_hash(p, n)]; e; e = e->next)
        if (e->cid.datalen == n && memcmp(e->cid.data, p, n) == 0)
            return e->qc;
    return NULL;
}

static int cid_add(fd_quic_conn_t *qc, const ngtcp2_cid *cid)
{
    unsigned b = cid_hash(cid->data, cid->datalen);
    cid_ent_t *e;

    if (qc->ncids == FD_QUIC_MAX_CIDS || (e = malloc(sizeof(*e))) == NULL)
        return FD_ERROR;
    e->cid = *cid;
    e->qc = qc;
    e->next = table[b];
    table[b] = e;
    qc->cids[qc->ncids++] = *cid;
    return FD_OK;
}

static void cid_del(fd_quic_conn_t *qc, const ngtcp2_cid *cid)
{
    cid_ent_t **pe, *e;
    unsigned i;

    for (pe = &table[cid_hash(cid->data, cid->datalen)]; (e = *pe);
         pe = &e->next)
        if (e->qc == qc && ngtcp2_cid_eq(&e->cid, cid)) {
            *pe = e->next;
            free(e);
            break;
        }
    for (i = 0; i < qc->ncids; i++)
        if (ngtcp2_cid_eq(&qc->cids[i], cid)) {
            qc->cids[i] = qc->cids[--qc->ncids];
            break;
        }
}

/* The tag of an ID of ours: a keyed hash of its other bytes (FNV-1a,
 * then murmur3's finaliser), so a client's own ID (its first Initials')
 * passes for one of ours once in 65536 */
static uint16_t cid_tag(const uint8_t *p)
{
    const uint8_t *k = fd_quic_keys->secrets.cid;
    uint32_t h = 2166136261u;
    size_t i;

    for (i = 0; i < sizeof(fd_quic_keys->secrets.cid); i++)
        h = (h ^ k[i]) * 16777619u;
    for (i = 0; i < FD_QUIC_SCID_LEN; i++)
        if (i != 2 && i != 3)
            h = (h ^ p[i]) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return (uint16_t)h;
}

static int cid_ours(const uint8_t *p, size_t n)
{
    uint16_t t;

    if (n != FD_QUIC_SCID_LEN)
        return 0;
    t = cid_tag(p);
    return p[2] == (uint8_t)(t >> 8) && p[3] == (uint8_t)t;
}

/* A new ID of ours: random, but for the worker's index in byte 0 (the
 * steering's), its generation's low byte in byte 1 and the tag in bytes
 * 2-3: a worker that reads a datagram for another worker's ID (another
 * generation's after a reload) knows the owner (route) */
static int cid_new(ngtcp2_cid *cid, size_t len)
{
    uint16_t t;

    if (getrandom(cid->data, len, 0) != (ssize_t)len)
        return FD_ERROR;
    cid->data[0] = (uint8_t)fd_worker->index;
    cid->data[1] = (uint8_t)fd_worker->cycle->generation;
    t = cid_tag(cid->data);
    cid->data[2] = (uint8_t)(t >> 8);
    cid->data[3] = (uint8_t)t;
    cid->datalen = len;
    return FD_OK;
}

/* --- datagrams out --- */

typedef union {
    char v4[CMSG_SPACE(sizeof(struct in_pktinfo)) +
            CMSG_SPACE(sizeof(uint16_t))];
    char v6[CMSG_SPACE(sizeof(struct in6_pktinfo)) +
            CMSG_SPACE(sizeof(uint16_t))];
    struct cmsghdr align;
} ctl_t;

/*
 * A datagram's msghdr (its iov and name set): from the local address the
 * client wrote to (a wildcard socket), and with gso, packets of gso bytes
 * each but the last, which the kernel splits into datagrams
 * (UDP_SEGMENT: one pass down the stack for all).
 */
static void msg_ctl(struct msghdr *msg, ctl_t *cbuf,
                    const struct sockaddr *local, size_t len, size_t gso)
{
    struct cmsghdr *cm;

    memset(cbuf, 0, sizeof(*cbuf));
    msg->msg_control = cbuf;
    if (local->sa_family == AF_INET) {
        struct in_pktinfo pi = {0};
        pi.ipi_spec_dst = ((const struct sockaddr_in *)local)->sin_addr;
        msg->msg_controllen = CMSG_SPACE(sizeof(pi));
        cm = CMSG_FIRSTHDR(msg);
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(pi));
        memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    } else {
        struct in6_pktinfo pi = {0};
        pi.ipi6_addr = ((const struct sockaddr_in6 *)local)->sin6_addr;
        msg->msg_controllen = CMSG_SPACE(sizeof(pi));
        cm = CMSG_FIRSTHDR(msg);
        cm->cmsg_level = IPPROTO_IPV6;
        cm->cmsg_type = IPV6_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(pi));
        memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    }
    if (gso && len > gso) {
        uint16_t seg = (uint16_t)gso;
        msg->msg_controllen += CMSG_SPACE(sizeof(seg));
        cm = CMSG_NXTHDR(msg, cm);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(seg));
        memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    }
}

/* One sendmsg() for len bytes (gso: msg_ctl). 0, or the errno. */
static int send_dgrams(fd_quic_sock_t *qs, const ngtcp2_path *path,
                       const uint8_t *data, size_t len, size_t gso)
{
    struct iovec iov = {(void *)data, len};
    ctl_t cbuf;
    struct msghdr msg = {.msg_name = path->remote.addr,
                         .msg_namelen = path->remote.addrlen,
                         .msg_iov = &iov,
                         .msg_iovlen = 1};
    ssize_t n;

    msg_ctl(&msg, &cbuf, path->local.addr, len, gso);
    do
        n = sendmsg(qs->ev.fd, &msg, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno;
    fd_stats->bytes_out += (uint64_t)n;
    fd_stats->quic_gso_sends += gso && len > gso;
    return 0;
}

static void send_pkt(fd_quic_sock_t *qs, const ngtcp2_path *path,
                     const uint8_t *data, size_t len)
{
    int err = send_dgrams(qs, path, data, len, 0);

    /* EAGAIN: the socket buffer is full; QUIC takes it as a loss */
    if (err && err != EAGAIN)
        fd_log_error(FD_LOG_INFO, err, "sendmsg() of a QUIC packet failed");
}

/* Packets of gso bytes but the last: one send with GSO, or one each
 * where the kernel (or the device under the route) refuses it. */
static void send_batch(fd_quic_sock_t *qs, const ngtcp2_path *path,
                       const uint8_t *data, size_t len, size_t gso)
{
    size_t off;
    int err;

    if (len > gso && !qs->no_gso) {
        err = send_dgrams(qs, path, data, len, gso);
        if (err == 0 || err == EAGAIN)
            return;
        if (err != EIO && err != EINVAL && err != ENOPROTOOPT) {
            fd_log_error(FD_LOG_INFO, err, "sendmsg() of QUIC packets "
                         "failed");
            return;
        }
        qs->no_gso = 1;
        fd_log_error(FD_LOG_NOTICE, err, "UDP GSO refused on %s quic: a "
                     "sendmsg() per packet from now on", qs->ls->text);
    }
    for (off = 0; off < len; off += gso)
        send_pkt(qs, path, data + off, fd_min(gso, len - off));
}

/*
 * The turn's datagrams: what the connections' writers framed this turn,
 * in one arena, leaves in one sendmmsg() per socket before the loop
 * waits (fd_event_before_wait), or earlier when the arena or the list is
 * full. Each entry is one batch of a connection (GSO: packets of one
 * size to one address).
 */
typedef struct {
    fd_quic_sock_t *qs;
    ngtcp2_sockaddr_union remote, local;
    ngtcp2_socklen remotelen, locallen;
    size_t off, len, gso;
} tx_msg_t;

static uint8_t txbuf[QUIC_TX_BYTES];
static size_t tx_used;
static tx_msg_t txq[QUIC_TX_MSGS];
static unsigned ntx;

static void tx_add(fd_quic_sock_t *qs, const ngtcp2_path *path,
                   const uint8_t *data, size_t len, size_t gso)
{
    tx_msg_t *m = &txq[ntx++];

    m->qs = qs;
    memcpy(&m->remote, path->remote.addr, path->remote.addrlen);
    m->remotelen = path->remote.addrlen;
    memcpy(&m->local, path->local.addr, path->local.addrlen);
    m->locallen = path->local.addrlen;
    m->off = (size_t)(data - txbuf);
    m->len = len;
    m->gso = gso;
    tx_used = m->off + len;
}

/* Where sendmmsg() stopped on m: a socket without GSO sends its packets
 * one by one; EAGAIN (the socket buffer is full) loses the rest of the
 * run, as QUIC expects of UDP. 1 to go on with the next. */
static int tx_failed(tx_msg_t *m, int err)
{
    ngtcp2_path path = {
        .local = {(struct sockaddr *)&m->local, m->locallen},
        .remote = {(struct sockaddr *)&m->remote, m->remotelen}};

    if (err == EAGAIN)
        return 0;
    if (m->len > m->gso && !m->qs->no_gso &&
        (err == EIO || err == EINVAL || err == ENOPROTOOPT)) {
        send_batch(m->qs, &path, txbuf + m->off, m->len, m->gso);
        return 1;
    }
    fd_log_error(FD_LOG_INFO, err, "sendmmsg() of QUIC packets failed");
    return 1;
}

void fd_quic_flush(void)
{
    static struct mmsghdr mm[QUIC_TX_MSGS];
    static struct iovec iov[QUIC_TX_MSGS];
    static ctl_t cbuf[QUIC_TX_MSGS];
    unsigned i = 0, j, k;
    int n;

    while (i < ntx) {
        fd_quic_sock_t *qs = txq[i].qs;
        for (j = i; j < ntx && txq[j].qs == qs; j++) {
            tx_msg_t *m = &txq[j];
            iov[j] = (struct iovec){txbuf + m->off, m->len};
            mm[j].msg_hdr = (struct msghdr){.msg_name = &m->remote,
                                            .msg_namelen = m->remotelen,
                                            .msg_iov = &iov[j],
                                            .msg_iovlen = 1};
            msg_ctl(&mm[j].msg_hdr, &cbuf[j], (struct sockaddr *)&m->local,
                    m->len, m->gso);
        }
        for (k = i; k < j;) {
            n = sendmmsg(qs->ev.fd, &mm[k], j - k, 0);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (!tx_failed(&txq[k], errno))
                    break;
                k++;
                continue;
            }
            for (; n > 0; n--, k++) {
                fd_stats->bytes_out += mm[k].msg_len;
                fd_stats->quic_gso_sends +=
                    txq[k].gso && txq[k].len > txq[k].gso;
            }
        }
        i = j;
    }
    ntx = 0;
    tx_used = 0;
}

static void send_version_negotiation(fd_quic_sock_t *qs,
                                     const ngtcp2_version_cid *vc,
                                     const ngtcp2_path *path)
{
    uint8_t buf[256];
    uint32_t sv[] = {NGTCP2_PROTO_VER_V1, NGTCP2_PROTO_VER_V2};
    uint8_t unused;
    ngtcp2_ssize n;

    if (getrandom(&unused, 1, 0) != 1)
        unused = 0;
    /* to the client's IDs, swapped (RFC 9000 17.2.1) */
    n = ngtcp2_pkt_write_version_negotiation(buf, sizeof(buf), unused,
                                             vc->scid, vc->scidlen, vc->dcid,
                                             vc->dcidlen, sv, 2);
    if (n > 0)
        send_pkt(qs, path, buf, (size_t)n);
}

/*
 * A short header for no connection: one this worker closed, one from
 * before it was respawned, or (forwarded back, FD_QUIC_FWD_ORPHAN) one of
 * a worker that has exited. A stateless reset (RFC 9000 10.3) tells the
 * client at once rather than after its idle timeout, but only for an ID
 * that names this worker of this generation, or a worker gone: the
 * others' are forwarded to them (route). Never in answer to 43 bytes or
 * fewer, always shorter than what it answers (10.3.3: two endpoints
 * cannot reset each other in a loop), at most one per packet and
 * FD_QUIC_RESETS_PER_SEC a second for all workers together.
 */
static void stateless_reset(fd_quic_sock_t *qs, const ngtcp2_version_cid *vc,
                            size_t len, const ngtcp2_path *path, int from)
{
    uint8_t buf[QUIC_MAX_PKT], rnd[QUIC_MAX_PKT];
    uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN];
    ngtcp2_cid cid;
    ngtcp2_ssize w;
    size_t n;

    if (len <= 43 || vc->dcidlen != FD_QUIC_SCID_LEN ||
        (from != FD_QUIC_FWD_ORPHAN &&
         (vc->dcid[0] != (uint8_t)fd_worker->index ||
          vc->dcid[1] != (uint8_t)fd_worker->cycle->generation)) ||
        !fd_quic_reset_allowed(fd_quic_now() / NGTCP2_SECONDS))
        return;
    n = fd_min(len - 1, sizeof(buf)) - sizeof(token); /* 27 or more */
    ngtcp2_cid_init(&cid, vc->dcid, vc->dcidlen);
    /* the random part first, the token last */
    if (getrandom(rnd, n, 0) != (ssize_t)n ||
        ngtcp2_crypto_generate_stateless_reset_token(
            token, fd_quic_keys->secrets.reset,
            sizeof(fd_quic_keys->secrets.reset), &cid) != 0)
        return;
    w = ngtcp2_pkt_write_stateless_reset(buf, sizeof(buf), token, rnd, n);
    if (w <= 0)
        return;
    fd_log_debug("QUIC stateless reset sent (%zd bytes for %zu)", w, len);
    send_pkt(qs, path, buf, (size_t)w);
    fd_stats->quic_resets++;
}

/* --- connections --- */

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((fd_quic_conn_t *)ref->user_data)->conn;
}

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    if (getrandom(dest, len, 0) != (ssize_t)len)
        memset(dest, 0, len); /* getrandom() does not fail once seeded */
}

static int get_new_cid(ngtcp2_conn *conn, ngtcp2_cid *cid, uint8_t *token,
                       size_t len, void *ud)
{
    fd_quic_conn_t *qc = ud;

    (void)conn;
    if (cid_new(cid, len) != FD_OK ||
        ngtcp2_crypto_generate_stateless_reset_token(
            token, fd_quic_keys->secrets.reset,
            sizeof(fd_quic_keys->secrets.reset), cid) != 0 ||
        cid_add(qc, cid) != FD_OK)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    return 0;
}

static int remove_cid(ngtcp2_conn *conn, const ngtcp2_cid *cid, void *ud)
{
    (void)conn;
    cid_del(ud, cid);
    return 0;
}

static int handshake_completed(ngtcp2_conn *conn, void *ud)
{
    fd_quic_conn_t *qc = ud;
    uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
    const ngtcp2_path *path = ngtcp2_conn_get_path(conn);
    ngtcp2_ssize n;

    if (!qc->handshaked) {
        qc->handshaked = 1;
        half_open--;
    }
    fd_stats->ssl_tls13++;
    /* NEW_TOKEN (RFC 9000 8.1.3): the client's next connection from this
     * address skips the Retry. Sealed with the Retry key (ngtcp2 derives
     * a key of its own for each kind of token), so any worker, and the
     * next configuration's, checks it */
    n = ngtcp2_crypto_generate_regular_token(
        token, fd_quic_keys->secrets.retry, sizeof(fd_quic_keys->secrets.retry),
        path->remote.addr, path->remote.addrlen, fd_quic_now());
    if (n > 0 && ngtcp2_conn_submit_new_token(conn, token, (size_t)n) != 0)
        fd_log_error(FD_LOG_INFO, 0, "ngtcp2_conn_submit_new_token() failed");
    return 0;
}

static void conn_timer(fd_timer_t *t);
static void conn_posted(void *data);

/* odcid: the client's first DCID when a Retry token validated its
 * address (hd->dcid is then our Retry's SCID), NULL without Retry;
 * token: a NEW_TOKEN one did (no Retry) */
static fd_quic_conn_t *conn_new(fd_quic_sock_t *qs, const ngtcp2_pkt_hd *hd,
                                const ngtcp2_path *path,
                                const ngtcp2_cid *odcid, int token)
{
    const fd_cycle_t *cy = fd_worker->cycle;
    fd_quic_conn_t *qc;
    ngtcp2_settings settings;
    ngtcp2_transport_params params;
    ngtcp2_cid scid;
    const struct sockaddr *ra = path->remote.addr;

    qc = calloc(1, sizeof(*qc));
    if (qc == NULL)
        return NULL;
    ngtcp2_path_storage_init(&qc->ps, path->local.addr, path->local.addrlen,
                             path->remote.addr, path->remote.addrlen, NULL);
    memcpy(&qc->remote, path->remote.addr, path->remote.addrlen);
    qc->remotelen = path->remote.addrlen;
    qc->qs = qs;
    qc->c.s.ev.fd = -1;
    qc->c.s.nodelay = 1;     /* no TCP_NODELAY to set (the proxy looks) */
    qc->c.ls_index = (uint16_t)qs->ls->index;
    qc->c.id = fd_worker_conn_id();
    qc->c.state = FD_CONN_BUSY;
    if (ra->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ra;
        qc->c.family = AF_INET6;
        memcpy(qc->c.addr, &s6->sin6_addr, 16);
        qc->c.port = ntohs(s6->sin6_port);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ra;
        qc->c.family = AF_INET;
        memcpy(qc->c.addr, &s4->sin_addr, 4);
        qc->c.port = ntohs(s4->sin_port);
    }
    qc->timer.handler = conn_timer;
    qc->post.handler = conn_posted;
    qc->post.data = qc;
    qc->ref.get_conn = get_conn;
    qc->ref.user_data = qc;
    ngtcp2_ccerr_default(&qc->ccerr);

    ngtcp2_settings_default(&settings);
    settings.initial_ts = fd_quic_now();
    /* path MTU probing off: some paths drop what is above 1232 bytes
     * and stall rather than lose a probe */
    settings.no_pmtud = 1;
    settings.handshake_timeout =
        (ngtcp2_duration)qs->ls->ssl_handshake_timeout * NGTCP2_MILLISECONDS;
    settings.max_window = 6 * 1024 * 1024;
    settings.max_stream_window = 2 * 1024 * 1024;
    ngtcp2_transport_params_default(&params);
    params.initial_max_stream_data_bidi_remote =
        (uint64_t)cy->http.http3_stream_buffer_size;
    params.initial_max_stream_data_uni = 256 * 1024;
    params.initial_max_data = 1024 * 1024;
    params.initial_max_streams_bidi =
        (uint64_t)cy->http.http3_max_concurrent_streams;
    params.initial_max_streams_uni = 3; /* control and the two QPACK */
    params.max_idle_timeout =
        (ngtcp2_duration)cy->http.http2_idle_timeout * NGTCP2_MILLISECONDS;
    params.active_connection_id_limit = FD_QUIC_MAX_CIDS - 2;
    params.original_dcid = hd->dcid;
    params.original_dcid_present = 1;
    if (odcid) {
        /* RFC 9000 7.3: the IDs before and in the Retry, authenticated */
        params.original_dcid = *odcid;
        params.retry_scid = hd->dcid;
        params.retry_scid_present = 1;
        settings.token = hd->token;
        settings.tokenlen = hd->tokenlen;
        settings.token_type = NGTCP2_TOKEN_TYPE_RETRY;
    } else if (token) {
        /* the address is validated: no amplification limit */
        settings.token = hd->token;
        settings.tokenlen = hd->tokenlen;
        settings.token_type = NGTCP2_TOKEN_TYPE_NEW_TOKEN;
    }
    params.stateless_reset_token_present = 1;
    if (cid_new(&scid, FD_QUIC_SCID_LEN) != FD_OK ||
        ngtcp2_crypto_generate_stateless_reset_token(
            params.stateless_reset_token, fd_quic_keys->secrets.reset,
            sizeof(fd_quic_keys->secrets.reset), &scid) != 0)
        goto failed;
    if (ngtcp2_conn_server_new(&qc->conn, &hd->scid, &scid, &qc->ps.path,
                               hd->version, &callbacks, &settings, &params,
                               NULL, qc) != 0) {
        qc->conn = NULL;
        goto failed;
    }
    if (fd_quic_tls_new(&qc->tls, qs->ls, &qc->ref) != FD_OK)
        goto failed;
    ngtcp2_conn_set_tls_native_handle(qc->conn, qc->tls);
    /* the client's Initials (retransmitted too) name its own DCID */
    if (cid_add(qc, &scid) != FD_OK || cid_add(qc, &hd->dcid) != FD_OK)
        goto failed;
    nconns++;
    half_open++;
    fd_worker_hold(1); /* a graceful stop waits for it */
    fd_stats->conn_accepted++;
    fd_stats->conn_handled++;
    fd_stats->quic_conns++;
    fd_stats->quic_active++;
    return qc;

failed:
    fd_log_error(FD_LOG_ERR, 0, "a QUIC connection could not be set up");
    while (qc->ncids)
        cid_del(qc, &qc->cids[0]);
    if (qc->conn)
        ngtcp2_conn_del(qc->conn);
    fd_quic_tls_free(qc->tls);
    free(qc);
    return NULL;
}

static void conn_free(fd_quic_conn_t *qc)
{
    if (qc->dead)
        return;
    if (fd_timer_armed(&qc->timer))
        fd_timer_del(&qc->timer);
    if (qc->h3)
        fd_h3_release(qc); /* its streams; qc->refs counts the held */
    while (qc->ncids)
        cid_del(qc, &qc->cids[0]);
    ngtcp2_conn_del(qc->conn);
    qc->conn = NULL;
    fd_quic_tls_free(qc->tls);
    qc->tls = NULL;
    free(qc->close_pkt);
    qc->close_pkt = NULL;
    qc->dead = 1;
    if (--nconns == 0)
        fd_quic_mem_trim(); /* idle: nghttp3's blocks back to libc */
    if (!qc->handshaked)
        half_open--;
    fd_stats->quic_active--;
    fd_stats->quic_closed++;
    fd_worker_hold(-1);
    /* freed at the end of the turn (conn_posted), when no request holds
     * it: the caller may still look at qc->dead */
    if (!qc->posted) {
        qc->posted = 1;
        fd_event_post(&qc->post);
    }
}

static void conn_mem_free(fd_quic_conn_t *qc)
{
    free(qc->c.h); /* the engine's state for it (fd_http3.c) */
    free(qc);
}

void fd_quic_unref(fd_quic_conn_t *qc)
{
    if (--qc->refs == 0 && qc->dead && !qc->posted)
        conn_mem_free(qc);
}

static void conn_set_timer(fd_quic_conn_t *qc)
{
    ngtcp2_tstamp exp = ngtcp2_conn_get_expiry(qc->conn), now = fd_quic_now();
    fd_msec_t ms = exp <= now ? 0
                              : (fd_msec_t)((exp - now + NGTCP2_MILLISECONDS -
                                             1) / NGTCP2_MILLISECONDS);

    if (fd_timer_armed(&qc->timer))
        fd_timer_del(&qc->timer);
    fd_timer_add(&qc->timer, ms);
}

/* The closing (or draining) period: three PTOs, then freed. */
static void conn_closing(fd_quic_conn_t *qc)
{
    ngtcp2_duration pto = ngtcp2_conn_get_pto(qc->conn);

    qc->closing = 1;
    if (fd_timer_armed(&qc->timer))
        fd_timer_del(&qc->timer);
    fd_timer_add(&qc->timer, (fd_msec_t)(3 * pto / NGTCP2_MILLISECONDS) + 1);
}

/* End qc with qc->ccerr: CONNECTION_CLOSE, then the closing period. An
 * idle timeout (or a connection ngtcp2 says to drop) ends silently. */
static void conn_close(fd_quic_conn_t *qc)
{
    uint8_t buf[QUIC_MAX_PKT];
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n;

    if (qc->closing || qc->dead)
        return;
    if (qc->ccerr.type == NGTCP2_CCERR_TYPE_IDLE_CLOSE ||
        ngtcp2_conn_in_draining_period(qc->conn)) {
        conn_free(qc);
        return;
    }
    n = ngtcp2_conn_write_connection_close(qc->conn, &qc->ps.path, &pi, buf,
                                           sizeof(buf), &qc->ccerr,
                                           fd_quic_now());
    if (n <= 0) {
        conn_free(qc);
        return;
    }
    if ((qc->close_pkt = malloc((size_t)n)) != NULL) {
        memcpy(qc->close_pkt, buf, (size_t)n);
        qc->close_len = (size_t)n;
    }
    send_pkt(qc->qs, &qc->ps.path, buf, (size_t)n);
    conn_closing(qc);
}

void fd_quic_fail(fd_quic_conn_t *qc, uint64_t app_error, const char *why)
{
    if (qc->closing || qc->dead)
        return;
    fd_log_error(FD_LOG_INFO, 0, "QUIC connection closed: %s", why);
    ngtcp2_ccerr_set_application_error(&qc->ccerr, app_error, NULL, 0);
    conn_close(qc);
}

/*
 * Frame what ngtcp2 and nghttp3 have, until something stops it, into the
 * turn's datagrams (fd_quic_flush sends them). The packets go in batches
 * of the same size and path, each one message (GSO): a batch ends at
 * QUIC_GSO_PKTS, at a shorter packet (the last of its batch), before a
 * longer one or one for another path.
 */
static void conn_write(fd_quic_conn_t *qc)
{
    ngtcp2_tstamp ts = fd_quic_now();
    size_t max = fd_min(QUIC_MAX_PKT,
                        ngtcp2_conn_get_max_tx_udp_payload_size(qc->conn));
    size_t limit = qc->qs->no_gso ? 1
                                  : fd_min(QUIC_GSO_PKTS, QUIC_GSO_BYTES / max);
    size_t npkts = 0, gso = 0;
    uint8_t *p = txbuf + tx_used, *b = p; /* b: the batch's first */
    ngtcp2_path_storage bps;    /* the batch's path */

    if (qc->closing || qc->dead)
        return;
    for (;;) {
        int64_t sid = -1;
        int fin = 0, rv;
        nghttp3_vec vec[16];
        nghttp3_ssize nvec = 0;
        ngtcp2_ssize ndatalen;
        ngtcp2_ssize n;
        ngtcp2_pkt_info pi;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;

        if ((size_t)(txbuf + sizeof(txbuf) - p) < max ||
            ntx + 2 > QUIC_TX_MSGS) {
            /* the turn's datagrams are as many as they may be: out now */
            if (npkts)
                tx_add(qc->qs, &bps.path, b, (size_t)(p - b), gso);
            fd_quic_flush();
            b = p = txbuf;
            npkts = 0;
        }

        if (qc->h3conn && ngtcp2_conn_get_max_data_left(qc->conn)) {
            nvec = nghttp3_conn_writev_stream(qc->h3conn, &sid, &fin, vec,
                                              fd_nelems(vec));
            if (nvec < 0) {
                ngtcp2_ccerr_set_application_error(
                    &qc->ccerr,
                    nghttp3_err_infer_quic_app_error_code((int)nvec), NULL, 0);
                conn_close(qc);
                return;
            }
        }
        if (fin)
            flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
        n = ngtcp2_conn_writev_stream(qc->conn, &qc->ps.path, &pi, p, max,
                                      &ndatalen, flags, sid,
                                      (const ngtcp2_vec *)vec, (size_t)nvec,
                                      ts);
        if (n < 0) {
            switch (n) {
            case NGTCP2_ERR_STREAM_DATA_BLOCKED:
                nghttp3_conn_block_stream(qc->h3conn, sid);
                continue;
            case NGTCP2_ERR_STREAM_SHUT_WR:
                nghttp3_conn_shutdown_stream_write(qc->h3conn, sid);
                continue;
            case NGTCP2_ERR_WRITE_MORE:
                rv = nghttp3_conn_add_write_offset(qc->h3conn, sid,
                                                   (size_t)ndatalen);
                if (rv != 0) {
                    ngtcp2_ccerr_set_application_error(
                        &qc->ccerr, nghttp3_err_infer_quic_app_error_code(rv),
                        NULL, 0);
                    conn_close(qc);
                    return;
                }
                continue;
            }
            ngtcp2_ccerr_set_liberr(&qc->ccerr, (int)n, NULL, 0);
            conn_close(qc);
            return;
        }
        if (ndatalen >= 0 && sid >= 0 &&
            (rv = nghttp3_conn_add_write_offset(qc->h3conn, sid,
                                                (size_t)ndatalen)) != 0) {
            ngtcp2_ccerr_set_application_error(
                &qc->ccerr, nghttp3_err_infer_quic_app_error_code(rv), NULL,
                0);
            conn_close(qc);
            return;
        }
        if (n == 0)
            break;
        if (npkts && ((size_t)n > gso ||
                      !ngtcp2_path_eq(&bps.path, &qc->ps.path))) {
            /* this one starts the next batch */
            tx_add(qc->qs, &bps.path, b, (size_t)(p - b), gso);
            b = p;
            npkts = 0;
        }
        if (npkts++ == 0) {
            ngtcp2_path_storage_init(
                &bps, qc->ps.path.local.addr, qc->ps.path.local.addrlen,
                qc->ps.path.remote.addr, qc->ps.path.remote.addrlen, NULL);
            gso = (size_t)n;
        }
        p += n;
        if (npkts == limit || (size_t)n < gso) {
            tx_add(qc->qs, &bps.path, b, (size_t)(p - b), gso);
            b = p;
            npkts = 0;
        }
    }
    if (npkts)
        tx_add(qc->qs, &bps.path, b, (size_t)(p - b), gso);
    ngtcp2_conn_update_pkt_tx_time(qc->conn, ts);
    conn_set_timer(qc);
}

/* Streams' work, then the packets: the connection's turn. */
static void conn_work(fd_quic_conn_t *qc)
{
    fd_log_conn_id = qc->c.id;
    if (qc->h3)
        fd_h3_run(qc);
    if (!qc->dead)
        conn_write(qc);
    if (!qc->dead && !qc->closing && qc->goaway &&
        (qc->h3 == NULL || fd_h3_nstreams(qc) == 0)) {
        /* a graceful stop, and the last stream is done */
        ngtcp2_ccerr_set_application_error(&qc->ccerr, NGHTTP3_H3_NO_ERROR,
                                           NULL, 0);
        conn_close(qc);
    }
    fd_log_conn_id = 0;
}

static void conn_posted(void *data)
{
    fd_quic_conn_t *qc = data;

    qc->posted = 0;
    if (qc->dead) {
        if (qc->refs == 0)
            conn_mem_free(qc);
        return;
    }
    conn_work(qc);
}

void fd_quic_post(fd_quic_conn_t *qc)
{
    if (qc->posted || qc->dead)
        return;
    qc->posted = 1;
    fd_event_post(&qc->post);
}

static void conn_timer(fd_timer_t *t)
{
    fd_quic_conn_t *qc = (fd_quic_conn_t *)((char *)t -
                                            offsetof(fd_quic_conn_t, timer));
    int rv;

    if (qc->closing) {
        conn_free(qc);
        return;
    }
    rv = ngtcp2_conn_handle_expiry(qc->conn, fd_quic_now());
    if (rv != 0) {
        /* NGTCP2_ERR_IDLE_CLOSE: ends silently (conn_close) */
        ngtcp2_ccerr_set_liberr(&qc->ccerr, rv, NULL, 0);
        conn_close(qc);
        return;
    }
    conn_work(qc);
}

/* One datagram for qc. */
static void conn_read(fd_quic_conn_t *qc, const ngtcp2_path *path,
                      const uint8_t *data, size_t len)
{
    ngtcp2_pkt_info pi = {0};
    const ngtcp2_addr *cur;
    int rv;

    if (qc->closing) {
        /* answer a peer that missed our CONNECTION_CLOSE, a few times */
        if (qc->close_pkt && qc->close_sent++ < QUIC_CLOSE_RESENDS)
            send_pkt(qc->qs, &qc->ps.path, qc->close_pkt, qc->close_len);
        return;
    }
    fd_log_conn_id = qc->c.id;
    rv = ngtcp2_conn_read_pkt(qc->conn, path, &pi, data, len, fd_quic_now());
    if (rv != 0) {
        switch (rv) {
        case NGTCP2_ERR_DRAINING:
            /* the client closed: say nothing more */
            conn_closing(qc);
            break;
        case NGTCP2_ERR_DROP_CONN:
            /* before the handshake: the client's first Initial did not
             * decrypt */
            if (!qc->handshaked)
                fd_stats->quic_dropped++;
            conn_free(qc);
            break;
        case NGTCP2_ERR_CRYPTO:
            fd_log_error(FD_LOG_INFO, 0, "QUIC TLS handshake failed: %s",
                         ngtcp2_strerror(rv));
            fd_stats->ssl_failed[FD_SSL_FAIL_OTHER]++;
            ngtcp2_ccerr_set_tls_alert(
                &qc->ccerr, ngtcp2_conn_get_tls_alert(qc->conn), NULL, 0);
            conn_close(qc);
            break;
        default:
            fd_log_error(FD_LOG_INFO, 0, "QUIC connection error: %s",
                         ngtcp2_strerror(rv));
            if (qc->ccerr.error_code == 0)
                ngtcp2_ccerr_set_liberr(&qc->ccerr, rv, NULL, 0);
            conn_close(qc);
        }
        fd_log_conn_id = 0;
        return;
    }
    /* ngtcp2 moved to the client's new address (migration, a NAT's new
     * port): it validates the path, we count the move */
    cur = &ngtcp2_conn_get_path(qc->conn)->remote;
    if (cur->addrlen != qc->remotelen ||
        memcmp(cur->addr, &qc->remote, cur->addrlen) != 0) {
        fd_log_debug("QUIC connection migrated");
        fd_stats->quic_migrations++;
        memcpy(&qc->remote, cur->addr, cur->addrlen);
        qc->remotelen = cur->addrlen;
    }
    /* the path the client uses now */
    if (!ngtcp2_path_eq(path, &qc->ps.path))
        ngtcp2_path_storage_init(&qc->ps, path->local.addr,
                                 path->local.addrlen, path->remote.addr,
                                 path->remote.addrlen, NULL);
    fd_stats->bytes_in += len;
    fd_log_conn_id = 0;
}

/* --- address validation: Retry (RFC 9000 8.1.2) --- */

static void send_retry(fd_quic_sock_t *qs, const ngtcp2_pkt_hd *hd,
                       const ngtcp2_path *path)
{
    uint8_t buf[QUIC_MAX_PKT], token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN2];
    ngtcp2_cid scid;
    ngtcp2_ssize tlen, n;

    /* the client's next Initial names this ID: this worker's, steered
     * here; any worker could check the token */
    if (cid_new(&scid, FD_QUIC_SCID_LEN) != FD_OK)
        return;
    tlen = ngtcp2_crypto_generate_retry_token2(
        token, fd_quic_keys->secrets.retry, sizeof(fd_quic_keys->secrets.retry),
        hd->version, path->remote.addr, path->remote.addrlen, &scid,
        &hd->dcid, fd_quic_now());
    if (tlen < 0)
        return;
    n = ngtcp2_crypto_write_retry(buf, sizeof(buf), hd->version, &hd->scid,
                                  &scid, &hd->dcid, token, (size_t)tlen);
    if (n <= 0)
        return;
    fd_log_debug("QUIC Retry sent");
    send_pkt(qs, path, buf, (size_t)n);
    fd_stats->quic_retries++;
}

/* A Retry token that does not check: the client will not take another
 * Retry, so end the attempt at once with INVALID_TOKEN (8.1.3) */
static void send_invalid_token(fd_quic_sock_t *qs, const ngtcp2_pkt_hd *hd,
                               const ngtcp2_path *path)
{
    uint8_t buf[QUIC_MAX_PKT];
    ngtcp2_ssize n;

    n = ngtcp2_crypto_write_connection_close(buf, sizeof(buf), hd->version,
                                             &hd->scid, &hd->dcid,
                                             NGTCP2_INVALID_TOKEN, NULL, 0);
    if (n > 0)
        send_pkt(qs, path, buf, (size_t)n);
}

/*
 * A client's Initial for no connection: FD_OK to make one (*retried and
 * *odcid set when a Retry token of ours proved its address, *token when
 * a NEW_TOKEN one did), FD_DECLINED when it was answered instead (a
 * Retry, INVALID_TOKEN). Tokens are checked whatever quic_retry says
 * now: it may have been on before a reload.
 */
static int validate(fd_quic_sock_t *qs, const ngtcp2_pkt_hd *hd,
                    const ngtcp2_path *path, ngtcp2_cid *odcid, int *retried,
                    int *token)
{
    int mode = qs->ls->servers[0]->quic_retry, rv;

    *retried = 0;
    *token = 0;
    if (hd->tokenlen && hd->token[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR) {
        rv = ngtcp2_crypto_verify_regular_token(
            hd->token, hd->tokenlen, fd_quic_keys->secrets.retry,
            sizeof(fd_quic_keys->secrets.retry), path->remote.addr,
            path->remote.addrlen, QUIC_TOKEN_TTL * NGTCP2_SECONDS,
            fd_quic_now());
        if (rv == 0) {
            fd_log_debug("QUIC NEW_TOKEN token accepted");
            *token = 1;
            return FD_OK;
        }
        /* expired, another address's, not ours: as if it had none
         * (8.1.3), a Retry if quic_retry asks for one */
        fd_log_debug("QUIC NEW_TOKEN token refused");
    }
    if (hd->tokenlen && hd->token[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY2) {
        rv = ngtcp2_crypto_verify_retry_token2(
            odcid, hd->token, hd->tokenlen, fd_quic_keys->secrets.retry,
            sizeof(fd_quic_keys->secrets.retry), hd->version,
            path->remote.addr, path->remote.addrlen, &hd->dcid,
            QUIC_RETRY_TTL * NGTCP2_SECONDS, fd_quic_now());
        if (rv == 0) {
            fd_log_debug("QUIC address validated by a Retry token");
            fd_stats->quic_validated++;
            *retried = 1;
            return FD_OK;
        }
        fd_log_error(FD_LOG_INFO, 0, "QUIC Retry token refused: %s",
                     rv == NGTCP2_CRYPTO_ERR_VERIFY_TOKEN
                         ? "expired, or for another address or ID"
                         : "not one of ours");
        send_invalid_token(qs, hd, path);
        fd_stats->quic_dropped++;
        return FD_DECLINED;
    }
    /* no token, or a NEW_TOKEN one that did not check: not validated */
    if (mode == FD_QUIC_RETRY_OFF ||
        (mode == FD_QUIC_RETRY_AUTO && half_open < QUIC_HALF_OPEN))
        return FD_OK;
    send_retry(qs, hd, path);
    return FD_DECLINED;
}

/*
 * A datagram read from the socket for no connection of this worker: 1
 * when it goes on to its owner (fd_quic_fwd). An ID of ours names its
 * worker and generation; a long header with an ID of the client's (its
 * first Initials, 0-RTT) goes to the worker of this index of the current
 * generation when this one is older: new connections are the new
 * workers'. Forwarded to a worker that is gone, it comes back
 * (FD_QUIC_FWD_ORPHAN).
 */
static int route(fd_quic_sock_t *qs, const ngtcp2_version_cid *vc,
                 const uint8_t *data, size_t len, const ngtcp2_path *path)
{
    uint64_t gen = fd_worker->cycle->generation, cur;

    if (cid_ours(vc->dcid, vc->dcidlen)) {
        if (vc->dcid[0] == (uint8_t)fd_worker->index &&
            vc->dcid[1] == (uint8_t)gen)
            return 0;
        fd_quic_fwd(vc->dcid[1], vc->dcid[0], qs->ls, path, data, len);
        return 1;
    }
    if (!(data[0] & 0x80))
        return 0;
    cur = __atomic_load_n(&fd_shm->generation, __ATOMIC_RELAXED);
    if (cur <= gen)
        return 0;
    fd_quic_fwd((uint8_t)cur, fd_worker->index, qs->ls, path, data, len);
    return 1;
}

/* from: FD_QUIC_READ, or how it was forwarded here */
static void datagram(fd_quic_sock_t *qs, const uint8_t *data, size_t len,
                     const ngtcp2_path *path, int from)
{
    ngtcp2_version_cid vc;
    ngtcp2_pkt_hd hd;
    ngtcp2_cid odcid;
    fd_quic_conn_t *qc;
    int rv, retried, token;

    rv = ngtcp2_pkt_decode_version_cid(&vc, data, len, FD_QUIC_SCID_LEN);
    if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
        if (len >= 1200 && !fd_worker->quitting)
            send_version_negotiation(qs, &vc, path);
        return;
    }
    if (rv != 0)
        return; /* not QUIC: dropped */
    qc = cid_find(vc.dcid, vc.dcidlen);
    if (qc == NULL) {
        if (from == FD_QUIC_READ && route(qs, &vc, data, len, path))
            return;
        /* only a client's Initial opens a connection; a short header
         * for a connection gone may get a stateless reset, the rest is
         * dropped */
        if (!(data[0] & 0x80)) {
            stateless_reset(qs, &vc, len, path, from);
            return;
        }
        if (fd_worker->quitting || ngtcp2_accept(&hd, data, len) != 0 ||
            hd.type != NGTCP2_PKT_INITIAL) {
            fd_stats->quic_dropped++;
            return;
        }
        if (validate(qs, &hd, path, &odcid, &retried, &token) != FD_OK)
            return;
        if ((qc = conn_new(qs, &hd, path, retried ? &odcid : NULL, token)) ==
            NULL) {
            fd_stats->quic_dropped++;
            return;
        }
    }
    conn_read(qc, path, data, len);
    /* its answer at the end of the turn: one for all the datagrams the
     * batch had for it (ACKs together, its packets in one send) */
    fd_quic_post(qc);
}

/* One datagram, or with GRO a train of them (seg bytes each but the
 * last), as recvmmsg() gave it. */
static void dgram_in(fd_quic_sock_t *qs, uint8_t *data, size_t n,
                     struct msghdr *msg)
{
    struct sockaddr_storage la;
    struct cmsghdr *cm;
    ngtcp2_path path;
    size_t seg = n, off;

    /* the local address the datagram came to */
    memcpy(&la, &qs->ls->addr, qs->ls->addrlen);
    for (cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
            struct in_pktinfo pi;
            memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
            ((struct sockaddr_in *)&la)->sin_addr = pi.ipi_addr;
        } else if (cm->cmsg_level == IPPROTO_IPV6 &&
                   cm->cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo pi;
            memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
            ((struct sockaddr_in6 *)&la)->sin6_addr = pi.ipi6_addr;
        } else if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
            int g;
            memcpy(&g, CMSG_DATA(cm), sizeof(g));
            if (g > 0)
                seg = (size_t)g;
        }
    }
    path.local.addr = (struct sockaddr *)&la;
    path.local.addrlen = qs->ls->addrlen;
    path.remote.addr = msg->msg_name;
    path.remote.addrlen = msg->msg_namelen;
    path.user_data = NULL;
    for (off = 0; off < n; off += seg)
        datagram(qs, data + off, fd_min(seg, n - off), &path, FD_QUIC_READ);
}

/*
 * A datagram another worker read for this one, on the socket of the
 * same address (or its own, back: FD_QUIC_FWD_ORPHAN). Once a running
 * worker of a newer generation forwards here, that one reads the
 * address's socket (a reload): a stopping worker leaves it, and its
 * connections finish on what is forwarded (it keeps reading after a stop
 * without a reload, or a reload that dropped the address, and reads
 * again when the newer one is told to stop: fd_quic_quit_again).
 */
void fd_quic_fwd_in(const fd_quic_fwd_rec_t *rec, const uint8_t *data,
                    int from)
{
    fd_quic_sock_t *qs;
    ngtcp2_path path;

    for (qs = socks; qs; qs = qs->next)
        if (qs->ls->addrlen == rec->boundlen &&
            memcmp(&qs->ls->addr, &rec->bound, rec->boundlen) == 0)
            break;
    if (qs == NULL || rec->locallen != rec->boundlen ||
        rec->remotelen != rec->boundlen)
        return;
    if (from == FD_QUIC_FWD_NEWER && fd_worker->quitting && !qs->left) {
        fd_log_debug("QUIC socket of %s left to the new workers",
                     qs->ls->text);
        fd_event_del(&qs->ev); /* its fd still sends */
        qs->left = 1;
    }
    path.local.addr = (struct sockaddr *)&rec->local;
    path.local.addrlen = rec->locallen;
    path.remote.addr = (struct sockaddr *)&rec->remote;
    path.remote.addrlen = rec->remotelen;
    path.user_data = NULL;
    datagram(qs, data, rec->len, &path, from);
}

/*
 * Read the socket until it is empty, QUIC_READ_BATCH datagrams (or GRO
 * trains) at a time, QUIC_RECV_MSGS to a recvmmsg(). Fewer than asked
 * means it was empty: a datagram that comes later is a new event.
 */
static void sock_read(fd_quic_sock_t *qs)
{
    struct mmsghdr mm[QUIC_RECV_MSGS];
    struct iovec iov[QUIC_RECV_MSGS];
    struct sockaddr_storage ra[QUIC_RECV_MSGS];
    union {
        char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) +
                 CMSG_SPACE(sizeof(int)) + 64];
        struct cmsghdr align;
    } cbuf[QUIC_RECV_MSGS];
    unsigned got = 0;
    int i, n;

    while (got < QUIC_READ_BATCH) {
        for (i = 0; i < QUIC_RECV_MSGS; i++) {
            iov[i] = (struct iovec){rbuf[i], sizeof(rbuf[i])};
            mm[i].msg_hdr = (struct msghdr){
                .msg_name = &ra[i],
                .msg_namelen = sizeof(ra[i]),
                .msg_iov = &iov[i],
                .msg_iovlen = 1,
                .msg_control = &cbuf[i],
                .msg_controllen = sizeof(cbuf[i])};
        }
        n = recvmmsg(qs->ev.fd, mm, QUIC_RECV_MSGS, 0, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                fd_log_error(FD_LOG_ERR, errno, "recvmmsg() on %s quic failed",
                             qs->ls->text);
            return;
        }
        for (i = 0; i < n; i++)
            if (mm[i].msg_len > 0 && !(mm[i].msg_hdr.msg_flags & MSG_TRUNC))
                dgram_in(qs, rbuf[i], mm[i].msg_len, &mm[i].msg_hdr);
        got += (unsigned)n;
        if (n < QUIC_RECV_MSGS)
            return;
    }
    /* more may wait: after the others had their turn */
    if (!qs->posted) {
        qs->posted = 1;
        fd_event_post(&qs->more);
    }
}

static void sock_more(void *data)
{
    fd_quic_sock_t *qs = data;

    qs->posted = 0;
    if (!qs->left)
        sock_read(qs);
}

static void sock_event(fd_event_t *ev, uint32_t events)
{
    (void)events;
    sock_read((fd_quic_sock_t *)ev);
}

static int global_init(void)
{
    static int done;

    if (done)
        return FD_OK;
    if (fd_quic_keys == NULL) { /* the master makes them */
        fd_log_error(FD_LOG_EMERG, 0, "no QUIC keys (fd_quic_shm_init)");
        return FD_ERROR;
    }
    /* datagrams for other workers first: before reading a socket */
    if (fd_quic_fwd_init() != FD_OK)
        return FD_ERROR;
    /* the turn's datagrams leave before each wait */
    fd_event_before_wait(fd_quic_flush);
    callbacks = (ngtcp2_callbacks){
        .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
        .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
        .handshake_completed = handshake_completed,
        .encrypt = ngtcp2_crypto_encrypt_cb,
        .decrypt = ngtcp2_crypto_decrypt_cb,
        .hp_mask = ngtcp2_crypto_hp_mask_cb,
        .recv_stream_data = fd_h3_recv_stream_data,
        .acked_stream_data_offset = fd_h3_acked_stream_data_offset,
        .stream_close = fd_h3_stream_close,
        .rand = rand_cb,
        .get_new_connection_id = get_new_cid,
        .remove_connection_id = remove_cid,
        .update_key = ngtcp2_crypto_update_key_cb,
        .stream_reset = fd_h3_stream_reset,
        .extend_max_remote_streams_bidi = fd_h3_extend_max_remote_streams_bidi,
        .extend_max_stream_data = fd_h3_extend_max_stream_data,
        .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
        .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
        .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
        .stream_stop_sending = fd_h3_stream_stop_sending,
        .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
    };
    done = 1;
    return FD_OK;
}

int fd_quic_listen(fd_listening_t *ls, fd_worker_t *w)
{
    fd_quic_sock_t *qs;
    int fd;

    if (global_init() != FD_OK)
        return FD_ERROR;
    fd = fcntl(ls->fds[ls->nfds > 1 ? w->index % ls->nfds : 0],
               F_DUPFD_CLOEXEC, 0);
    if (fd < 0 || (qs = calloc(1, sizeof(*qs))) == NULL) {
        fd_log_error(FD_LOG_EMERG, errno, "the socket of %s quic", ls->text);
        if (fd >= 0)
            close(fd);
        return FD_ERROR;
    }
    /* GRO: the kernel hands a client's train of datagrams over in one
     * piece (a loopback peer's GSO send arrives whole); where it has no
     * UDP_GRO, one datagram each */
    if (setsockopt(fd, SOL_UDP, UDP_GRO, &(int){1}, sizeof(int)) < 0)
        fd_log_debug("UDP_GRO refused on %s quic: %s", ls->text,
                     strerror(errno));
    qs->ev.fd = fd;
    qs->ev.handler = sock_event;
    qs->ls = ls;
    qs->no_gso = !w->cycle->http.quic_gso;
    qs->more.handler = sock_more;
    qs->more.data = qs;
    if (fd_event_add(&qs->ev, EPOLLIN) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "epoll_ctl(%s quic) failed",
                     ls->text);
        close(fd);
        free(qs);
        return FD_ERROR;
    }
    qs->next = socks;
    socks = qs;
    /* what arrived before the worker was ready */
    sock_read(qs);
    return FD_OK;
}

void fd_quic_quit_again(void)
{
    fd_quic_sock_t *qs;

    for (qs = socks; qs; qs = qs->next) {
        if (!qs->left)
            continue;
        if (fd_event_add(&qs->ev, EPOLLIN) < 0) {
            fd_log_error(FD_LOG_ALERT, errno, "epoll_ctl(%s quic) failed",
                         qs->ls->text);
            continue;
        }
        fd_log_debug("QUIC socket of %s read again", qs->ls->text);
        qs->left = 0;
        sock_read(qs);
    }
}

void fd_quic_quit(void)
{
    unsigned b;
    cid_ent_t *e;

    /* every connection once: it is in the table under each of its IDs,
     * and goaway marks the ones done */
    for (b = 0; b < QUIC_TABLE; b++)
        for (e = table[b]; e; e = e->next) {
            fd_quic_conn_t *qc = e->qc;
            if (qc->goaway || qc->closing || qc->dead)
                continue;
            qc->goaway = 1;
            if (qc->h3)
                fd_h3_shutdown(qc);
            fd_quic_post(qc);
        }
}

#endif
