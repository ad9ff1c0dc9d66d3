/*
 * quicraw: a QUIC client that breaks the rules on purpose, one frame at a
 * time (tests/http3_frames.t). ngtcp2's client (GnuTLS) does the
 * handshake; once it is confirmed, ngtcp2 is put aside and the case's
 * frames go out in 1-RTT packets made here, protected with the keys of
 * the TLS secrets GnuTLS logs (RFC 9001 5), with packet numbers far above
 * ngtcp2's. Every 1-RTT packet the server sends is opened here too: its
 * NEW_CONNECTION_ID, ACK and CONNECTION_CLOSE frames are what the cases
 * look for.
 *
 *   quicraw HOST PORT CASE
 *
 * prints "closed: transport 0xN" or "closed: application 0xN" (the
 * server's CONNECTION_CLOSE), "idle" (nothing within 3 s), or for
 * "retire", "cycled N" (N connection IDs retired, each packet sent to the
 * next acknowledged). A case that is a stream's error prints the server's
 * first "reset: stream N 0xC" (or "stop_sending: ..."), then "alive" when
 * a PING after it is acknowledged. The cases:
 *
 *   params          prints the server's stream limits and exits:
 *                   "params: streams N stream_data M"
 *   streams         a bidi stream past the server's MAX_STREAMS
 *   uni_streams     a uni stream past it
 *   stream_data     a stream's bytes past its MAX_STREAM_DATA
 *   max_data        streams within their limit, together past MAX_DATA
 *   final_size      a FIN at 10, then a FIN at 5 on the same stream
 *   reset_size      a FIN at 10, then RESET_STREAM with final size 5
 *   cid_limit       NEW_CONNECTION_IDs past active_connection_id_limit
 *   retire_current  RETIRE_CONNECTION_ID of the ID the packet is sent to
 *   retire_unissued RETIRE_CONNECTION_ID of an ID never issued
 *   retire          retiring each ID in turn, moving to the next, 3
 *                   times the server's pool (legal: nothing may end)
 *   migrate         the same, each packet from a new port: the server
 *                   validates each path (its PATH_CHALLENGE answered)
 *   server_stream   STREAM on the server's control stream (send-only)
 *   handshake_done  HANDSHAKE_DONE, which only servers send
 *   new_token       NEW_TOKEN, which only servers send
 *   unknown_frame   a frame type RFC 9000 does not have
 *   truncated       a STREAM frame longer than its packet
 *   cid_length      NEW_CONNECTION_ID with a 21-byte ID
 *   max_streams     MAX_STREAMS over 2^60
 * HTTP/3 (RFC 9114, 9204) on raw streams:
 *   empty_request   a request stream ended before HEADERS (a stream's
 *                   error: H3_REQUEST_INCOMPLETE)
 *   empty_flood     empty request streams, as many as MAX_STREAMS lets
 *                   in, till it is 3 times the first (5 s at most):
 *                   "N streams, MAX_STREAMS M (from FIRST)"
 *   reset_flood     the same, each stream opened by its RESET_STREAM
 *   stop_flood      the same, each a GET (HEADERS, FIN) and STOP_SENDING
 *   no_method       a request without :method (a stream's: H3_MESSAGE_ERROR)
 *   qpack_static    a field line of static entry 200 (there are 99)
 *   control2        a second control stream
 *   settings2       SETTINGS twice
 *   h2frame         an HTTP/2 frame type (PING, 0x06) on the control stream
 *   h2setting       an HTTP/2 setting (ENABLE_PUSH) in SETTINGS
 *   goaway          a GOAWAY with an ID above the previous one's
 *   max_push_id     a MAX_PUSH_ID below the previous one's
 *   close_control   the control stream ended (FIN)
 *   reset_control   the control stream reset
 *   qpack_ref       an encoder stream duplicating an entry not in the table
 *
 * The certificate is not verified. AES-128-GCM only (QUIC_CLIENT_PRIORITY
 * asks for nothing else). Exits 2 when there was no handshake.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/crypto.h>

#include "quic_client.h"

#define MAX_PKT 1452
#define PN_BASE 0x100000 /* ours: far above ngtcp2's */
#define CIDLEN 8         /* our connection IDs' */
#define POOL 8           /* our active_connection_id_limit */

/* one direction's 1-RTT keys (AES-128-GCM) */
typedef struct {
    int ready;
    gnutls_aead_cipher_hd_t aead;
    gnutls_cipher_hd_t hp;
    uint8_t iv[12];
} keys_t;

/* a connection ID the server issued */
typedef struct {
    uint64_t seq;
    ngtcp2_cid cid;
    int retired;
} scid_t;

static int fd = -1;
static ngtcp2_conn *q;
static gnutls_session_t tls;
static ngtcp2_crypto_conn_ref ref;
static ngtcp2_path_storage ps;
static keys_t tx, rx;
static int confirmed;
static uint64_t pn = PN_BASE;        /* our next packet number */
static int64_t rx_largest = -1;      /* the server's largest, decoded */
static scid_t scids[64];             /* seq 0: the handshake's */
static unsigned nscids;
static uint64_t cur_seq;             /* the ID we send to */
static uint64_t max_bidi;            /* the server's MAX_STREAMS */
static const char *reset;           /* the server's first RESET_STREAM */
static uint64_t reset_stream, reset_code; /* or STOP_SENDING */
static int closed;
static uint64_t close_code;
static int close_app;
static uint8_t our_retired[256];     /* our IDs the server retired */
static unsigned nour_retired;
static uint8_t challenge[8];         /* the last PATH_CHALLENGE's */
static int challenged;
static struct sockaddr_storage server;
static socklen_t serverlen;
static uint8_t rx_seen[4096];        /* the server's packet numbers */
static uint64_t acked[64][2];        /* the last ACK ranges seen, */
                                     /* [low, high] */
static unsigned nacked;

static void die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "quicraw: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- varints (RFC 9000 16) --- */

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    if (v < 64) {
        *p++ = (uint8_t)v;
    } else if (v < 16384) {
        *p++ = (uint8_t)(0x40 | v >> 8);
        *p++ = (uint8_t)v;
    } else if (v < 1073741824) {
        *p++ = (uint8_t)(0x80 | v >> 24);
        *p++ = (uint8_t)(v >> 16);
        *p++ = (uint8_t)(v >> 8);
        *p++ = (uint8_t)v;
    } else {
        int i;
        *p++ = (uint8_t)(0xc0 | v >> 56);
        for (i = 48; i >= 0; i -= 8)
            *p++ = (uint8_t)(v >> i);
    }
    return p;
}

/* 0 when the varint does not fit before end */
static int get_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    size_t n, i;

    if (p >= end)
        return 0;
    n = (size_t)1 << (*p >> 6);
    if ((size_t)(end - p) < n)
        return 0;
    *v = *p & 0x3f;
    for (i = 1; i < n; i++)
        *v = *v << 8 | p[i];
    *pp = p + n;
    return 1;
}

/* --- 1-RTT keys from a TLS secret (RFC 9001 5.1) --- */

static void expand_label(const gnutls_datum_t *secret, const char *label,
                         uint8_t *out, size_t len)
{
    uint8_t info[64];
    size_t n = strlen(label), k = 0;
    gnutls_datum_t key = *secret, in = {info, 0};

    info[k++] = (uint8_t)(len >> 8);
    info[k++] = (uint8_t)len;
    info[k++] = (uint8_t)(6 + n);
    memcpy(info + k, "tls13 ", 6);
    memcpy(info + k + 6, label, n);
    k += 6 + n;
    info[k++] = 0; /* no context */
    in.size = (unsigned)k;
    if (gnutls_hkdf_expand(GNUTLS_MAC_SHA256, &key, &in, out, len) < 0)
        die("gnutls_hkdf_expand() failed");
}

static void keys_set(keys_t *k, const gnutls_datum_t *secret)
{
    uint8_t key[16], hp[16];
    gnutls_datum_t dk = {key, 16}, dhp = {hp, 16};

    expand_label(secret, "quic key", key, 16);
    expand_label(secret, "quic iv", k->iv, 12);
    expand_label(secret, "quic hp", hp, 16);
    /* one block of AES-CBC with a zero IV is AES-ECB (RFC 9001 5.4.3) */
    if (gnutls_aead_cipher_init(&k->aead, GNUTLS_CIPHER_AES_128_GCM, &dk) <
            0 ||
        gnutls_cipher_init(&k->hp, GNUTLS_CIPHER_AES_128_CBC, &dhp, NULL) < 0)
        die("gnutls cipher init failed");
    k->ready = 1;
}

static void hp_mask(keys_t *k, const uint8_t *sample, uint8_t *mask)
{
    uint8_t zero[16] = {0};

    gnutls_cipher_set_iv(k->hp, zero, 16);
    if (gnutls_cipher_encrypt2(k->hp, sample, 16, mask, 16) < 0)
        die("gnutls_cipher_encrypt2() failed");
}

static void nonce(const keys_t *k, uint64_t n, uint8_t *out)
{
    int i;

    memcpy(out, k->iv, 12);
    for (i = 0; i < 8; i++)
        out[11 - i] ^= (uint8_t)(n >> (8 * i));
}

static int keylog(gnutls_session_t s, const char *label,
                  const gnutls_datum_t *secret)
{
    (void)s;
    if (strcmp(label, "CLIENT_TRAFFIC_SECRET_0") == 0)
        keys_set(&tx, secret);
    else if (strcmp(label, "SERVER_TRAFFIC_SECRET_0") == 0)
        keys_set(&rx, secret);
    return 0;
}

/* --- the server's packets --- */

static scid_t *scid_find(uint64_t seq)
{
    unsigned i;

    for (i = 0; i < nscids; i++)
        if (scids[i].seq == seq)
            return &scids[i];
    return NULL;
}

static void acked_add(uint64_t lo, uint64_t hi)
{
    acked[nacked % 64][0] = lo;
    acked[nacked % 64][1] = hi;
    nacked++;
}

/* The frames of a packet the server sent: what the cases look for is
 * kept, the rest skipped. */
static void frames(const uint8_t *p, const uint8_t *end)
{
    uint64_t t, a, b, c, n, i;

    while (p < end) {
        if (!get_varint(&p, end, &t))
            return;
        switch (t) {
        case 0x00: /* PADDING */
        case 0x01: /* PING */
        case 0x1e: /* HANDSHAKE_DONE */
            break;
        case 0x02:
        case 0x03: /* ACK */
            if (!get_varint(&p, end, &a) || !get_varint(&p, end, &b) ||
                !get_varint(&p, end, &n) || !get_varint(&p, end, &c))
                return;
            /* a: largest, c: first range */
            if (c > a)
                return;
            acked_add(a - c, a);
            a -= c;
            for (i = 0; i < n; i++) {
                if (!get_varint(&p, end, &b) || !get_varint(&p, end, &c) ||
                    a < b + 2 + c)
                    return;
                a -= b + 2; /* the gap; then c more below */
                acked_add(a - c, a);
                a -= c;
            }
            if (t == 0x03 && (!get_varint(&p, end, &a) ||
                              !get_varint(&p, end, &a) ||
                              !get_varint(&p, end, &a)))
                return;
            break;
        case 0x04: /* RESET_STREAM */
        case 0x05: /* STOP_SENDING */
            if (!get_varint(&p, end, &a) || !get_varint(&p, end, &b) ||
                (t == 0x04 && !get_varint(&p, end, &c)))
                return;
            if (!reset) {
                reset = t == 0x04 ? "reset" : "stop_sending";
                reset_stream = a;
                reset_code = b;
            }
            break;
        case 0x11: /* MAX_STREAM_DATA */
        case 0x15: /* STREAM_DATA_BLOCKED */
            if (!get_varint(&p, end, &a) || !get_varint(&p, end, &a))
                return;
            break;
        case 0x06: /* CRYPTO */
            if (!get_varint(&p, end, &a) || !get_varint(&p, end, &n) ||
                n > (uint64_t)(end - p))
                return;
            p += n;
            break;
        case 0x07: /* NEW_TOKEN */
            if (!get_varint(&p, end, &n) || n > (uint64_t)(end - p))
                return;
            p += n;
            break;
        case 0x12: /* MAX_STREAMS (bidi) */
            if (!get_varint(&p, end, &a))
                return;
            if (a > max_bidi)
                max_bidi = a;
            break;
        case 0x10: /* MAX_DATA */
        case 0x13: /* MAX_STREAMS (uni) */
        case 0x14: /* DATA_BLOCKED */
        case 0x16:
        case 0x17: /* STREAMS_BLOCKED */
            if (!get_varint(&p, end, &a))
                return;
            break;
        case 0x19: /* RETIRE_CONNECTION_ID: of one of ours */
            if (!get_varint(&p, end, &a))
                return;
            if (a < sizeof(our_retired) && !our_retired[a]) {
                our_retired[a] = 1;
                nour_retired++;
            }
            break;
        case 0x18: /* NEW_CONNECTION_ID */
            if (!get_varint(&p, end, &a) || !get_varint(&p, end, &b) ||
                p >= end || *p > NGTCP2_MAX_CIDLEN ||
                (size_t)(end - p) < 1u + *p + 16)
                return;
            if (scid_find(a) == NULL && nscids < 64) {
                scid_t *s = &scids[nscids++];
                s->seq = a;
                ngtcp2_cid_init(&s->cid, p + 1, *p);
                s->retired = 0;
            }
            p += 1 + *p + 16;
            break;
        case 0x1a:
        case 0x1b: /* PATH_CHALLENGE, PATH_RESPONSE */
            if (end - p < 8)
                return;
            if (t == 0x1a) {
                memcpy(challenge, p, 8);
                challenged = 1;
            }
            p += 8;
            break;
        case 0x1c:
        case 0x1d: /* CONNECTION_CLOSE */
            if (!get_varint(&p, end, &a) ||
                (t == 0x1c && !get_varint(&p, end, &b)) ||
                !get_varint(&p, end, &n) || n > (uint64_t)(end - p))
                return;
            if (!closed) {
                closed = 1;
                close_code = a;
                close_app = t == 0x1d;
                if (n)
                    fprintf(stderr, "quicraw: reason: %.*s\n", (int)n, p);
            }
            p += n;
            break;
        default:
            if (t >= 0x08 && t <= 0x0f) { /* STREAM */
                if (!get_varint(&p, end, &a))
                    return;
                if ((t & 0x04) && !get_varint(&p, end, &b))
                    return;
                if (!(t & 0x02))
                    return; /* to the packet's end */
                if (!get_varint(&p, end, &n) || n > (uint64_t)(end - p))
                    return;
                p += n;
                break;
            }
            return; /* not ours to know */
        }
    }
}

/* A 1-RTT packet of the server's, decrypted on a copy; the datagram's
 * long-header packets (the handshake's) are skipped. */
static void open_datagram(const uint8_t *d, size_t len)
{
    const uint8_t *p = d, *end = d + len;
    uint8_t pkt[MAX_PKT * 2], mask[16], nc[12], plain[MAX_PKT * 2];
    size_t hl, pnl, i;
    uint64_t v, trunc, expected, win, cand;
    size_t plen;

    while (p < end && (*p & 0x80)) { /* long header: skip it */
        uint64_t type = (*p >> 4) & 3;
        if (end - p < 7)
            return;
        p += 5;
        p += 1 + *p;       /* DCID */
        if (p >= end)
            return;
        p += 1 + *p;       /* SCID */
        if (type == 0) {   /* Initial: a token */
            if (!get_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return;
            p += v;
        }
        if (!get_varint(&p, end, &v) || v > (uint64_t)(end - p))
            return;
        p += v;
    }
    if (p >= end || !rx.ready || (size_t)(end - p) > sizeof(pkt))
        return;
    len = (size_t)(end - p);
    hl = 1 + CIDLEN; /* one of our IDs */
    if (len < hl + 4 + 16)
        return;
    memcpy(pkt, p, len);
    hp_mask(&rx, pkt + hl + 4, mask);
    pkt[0] ^= mask[0] & 0x1f;
    pnl = (pkt[0] & 3) + 1;
    trunc = 0;
    for (i = 0; i < pnl; i++) {
        pkt[hl + i] ^= mask[1 + i];
        trunc = trunc << 8 | pkt[hl + i];
    }
    /* RFC 9000 A.3 */
    expected = (uint64_t)(rx_largest + 1);
    win = (uint64_t)1 << (pnl * 8);
    cand = (expected & ~(win - 1)) | trunc;
    if (cand + win / 2 <= expected && cand + win < ((uint64_t)1 << 62))
        cand += win;
    else if (cand > expected + win / 2 && cand >= win)
        cand -= win;
    nonce(&rx, cand, nc);
    plen = sizeof(plain);
    if (gnutls_aead_cipher_decrypt(rx.aead, nc, 12, pkt, hl + pnl, 16,
                                   pkt + hl + pnl, len - hl - pnl, plain,
                                   &plen) < 0)
        return; /* not 1-RTT, or a key update: not for us */
    if ((int64_t)cand > rx_largest)
        rx_largest = (int64_t)cand;
    if (cand < sizeof(rx_seen))
        rx_seen[cand] = 1;
    frames(plain, plain + plen);
}

/* --- our packets --- */

/* One 1-RTT packet of these frames to the server's ID of sequence seq. */
static uint64_t send_frames(uint64_t seq, const uint8_t *f, size_t flen)
{
    uint8_t pkt[MAX_PKT], plain[MAX_PKT], mask[16], nc[12];
    scid_t *s = scid_find(seq);
    size_t hl, outlen;
    uint64_t n = pn++;
    int i;

    if (s == NULL || flen + 64 > sizeof(pkt))
        die("no connection ID %llu, or too many frames",
            (unsigned long long)seq);
    /* short header, key phase 0, a 4-byte packet number */
    pkt[0] = 0x40 | 0x03;
    memcpy(pkt + 1, s->cid.data, s->cid.datalen);
    hl = 1 + s->cid.datalen;
    for (i = 0; i < 4; i++)
        pkt[hl + i] = (uint8_t)(n >> (24 - 8 * i));
    memcpy(plain, f, flen);
    if (flen < 4) { /* room for the sample: PADDING */
        memset(plain + flen, 0, 4 - flen);
        flen = 4;
    }
    nonce(&tx, n, nc);
    outlen = sizeof(pkt) - hl - 4;
    if (gnutls_aead_cipher_encrypt(tx.aead, nc, 12, pkt, hl + 4, 16, plain,
                                   flen, pkt + hl + 4, &outlen) < 0)
        die("gnutls_aead_cipher_encrypt() failed");
    hp_mask(&tx, pkt + hl + 4, mask);
    pkt[0] ^= mask[0] & 0x1f;
    for (i = 0; i < 4; i++)
        pkt[hl + i] ^= mask[1 + i];
    if (send(fd, pkt, hl + 4 + outlen, 0) < 0)
        die("send: %s", strerror(errno));
    return n;
}

static int is_acked(uint64_t n)
{
    unsigned i;

    for (i = 0; i < nacked && i < 64; i++)
        if (acked[i][0] <= n && n <= acked[i][1])
            return 1;
    return 0;
}

/* Read the server for up to ms, or until done() */
static void wait_for(int (*done)(void), int ms)
{
    static uint8_t buf[65536];
    uint64_t end = now_ns() + (uint64_t)ms * 1000000u;
    ssize_t n;

    while (!done() && !closed) {
        uint64_t now = now_ns();
        struct pollfd pfd = {fd, POLLIN, 0};

        if (now >= end)
            return;
        if (poll(&pfd, 1, (int)((end - now) / 1000000u) + 1) <= 0)
            continue;
        while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
            open_datagram(buf, (size_t)n);
    }
}

/* --- the handshake, by ngtcp2 --- */

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *r)
{
    (void)r;
    return q;
}

static int q_confirmed(ngtcp2_conn *c, void *ud)
{
    (void)c, (void)ud;
    confirmed = 1;
    return 0;
}

static void q_write(void)
{
    uint8_t buf[MAX_PKT];
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n;

    for (;;) {
        n = ngtcp2_conn_write_pkt(q, &ps.path, &pi, buf, sizeof(buf),
                                  now_ns());
        if (n < 0)
            die("handshake: %s", ngtcp2_strerror((int)n));
        if (n == 0)
            break;
        if (send(fd, buf, (size_t)n, 0) < 0)
            die("send: %s", strerror(errno));
    }
    ngtcp2_conn_update_pkt_tx_time(q, now_ns());
}

/* a socket to the server from a port of its own */
static void new_socket(void)
{
    if (fd >= 0)
        close(fd);
    fd = socket(server.ss_family, SOCK_DGRAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&server, serverlen) < 0)
        die("socket/connect: %s", strerror(errno));
}

static void handshake(const char *host, const struct addrinfo *ai)
{
    static const ngtcp2_callbacks cb = {
        QUIC_CLIENT_CALLBACKS,
        .handshake_confirmed = q_confirmed,
    };
    gnutls_certificate_credentials_t cred;
    struct sockaddr_storage local;
    socklen_t locallen = sizeof(local);
    ngtcp2_settings s;
    ngtcp2_transport_params p;
    ngtcp2_cid dcid, scid;
    static uint8_t buf[65536];
    uint64_t deadline = now_ns() + 5000000000u;
    ngtcp2_pkt_info pi = {0};
    struct {
        uint8_t *data;
        size_t len;
    } pending[16];
    unsigned npending = 0, i;
    uint8_t *d;
    ssize_t n;
    int rv;

    memcpy(&server, ai->ai_addr, ai->ai_addrlen);
    serverlen = ai->ai_addrlen;
    new_socket();
    getsockname(fd, (struct sockaddr *)&local, &locallen);
    ngtcp2_path_storage_init(&ps, (struct sockaddr *)&local, locallen,
                             ai->ai_addr, ai->ai_addrlen, NULL);
    dcid.datalen = 18;
    scid.datalen = CIDLEN;
    if (getrandom(dcid.data, dcid.datalen, 0) != 18 ||
        getrandom(scid.data, scid.datalen, 0) != CIDLEN)
        die("getrandom() failed");
    quic_client_params(&s, &p, now_ns(), 1 << 20, 1 << 20);
    p.active_connection_id_limit = POOL; /* the server's IDs to walk */
    if (ngtcp2_conn_client_new(&q, &dcid, &scid, &ps.path,
                               NGTCP2_PROTO_VER_V1, &cb, &s, &p, NULL,
                               NULL) != 0)
        die("ngtcp2_conn_client_new() failed");
    ref.get_conn = get_conn;
    if (gnutls_certificate_allocate_credentials(&cred) < 0 ||
        quic_client_tls(&tls, cred, host, &ref, q) != 0)
        die("GnuTLS session setup failed");
    gnutls_session_set_keylog_function(tls, keylog);

    /* until HANDSHAKE_DONE: every 1-RTT packet to ngtcp2 and to us */
    q_write();
    while (!confirmed) {
        uint64_t now = now_ns(), exp = ngtcp2_conn_get_expiry(q);
        struct pollfd pfd = {fd, POLLIN, 0};
        int ms;

        if (now >= deadline)
            die("no handshake within 5 s");
        if (exp <= now) {
            if ((rv = ngtcp2_conn_handle_expiry(q, now)) != 0)
                die("handshake: %s", ngtcp2_strerror(rv));
            q_write();
            continue;
        }
        ms = (int)(((exp < deadline ? exp : deadline) - now) / 1000000) + 1;
        if (poll(&pfd, 1, ms) <= 0)
            continue;
        while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
            rv = ngtcp2_conn_read_pkt(q, &ps.path, &pi, buf, (size_t)n,
                                      now_ns());
            if (rv != 0)
                die("handshake: %s", ngtcp2_strerror(rv));
            /* the server's first 1-RTT packets come before its Finished
             * gives us their key: kept till then */
            if (npending < 16 && (d = malloc((size_t)n)) != NULL) {
                memcpy(d, buf, (size_t)n);
                pending[npending].data = d;
                pending[npending++].len = (size_t)n;
            }
            for (i = 0; rx.ready && i < npending; i++) {
                open_datagram(pending[i].data, pending[i].len);
                free(pending[i].data);
            }
            if (rx.ready)
                npending = 0;
        }
        q_write(); /* ACKs, the client's Finished */
    }
    if (!tx.ready || !rx.ready)
        die("no 1-RTT secrets logged");
    /* seq 0: the ID the server chose in the handshake */
    if (scid_find(0) == NULL) {
        scids[nscids].seq = 0;
        scids[nscids++].cid = *ngtcp2_conn_get_dcid(q);
    }
}

/* --- the cases --- */

static uint8_t fb[MAX_PKT];
static uint8_t *fp;

static void stream(int64_t id, uint64_t off, const void *data, size_t len,
                   int fin)
{
    *fp++ = (uint8_t)(0x08 | 0x04 | 0x02 | (fin ? 1 : 0));
    fp = put_varint(fp, (uint64_t)id);
    fp = put_varint(fp, off);
    fp = put_varint(fp, len);
    memcpy(fp, data, len);
    fp += len;
}

static void new_cid(uint64_t seq, size_t len)
{
    *fp++ = 0x18;
    fp = put_varint(fp, seq);
    fp = put_varint(fp, 0); /* retire prior to */
    *fp++ = (uint8_t)len;
    if (getrandom(fp, len + 16, 0) != (ssize_t)(len + 16))
        die("getrandom() failed");
    fp += len + 16;
}

static void retire(uint64_t seq)
{
    *fp++ = 0x19;
    fp = put_varint(fp, seq);
}

/* an ACK of what the server sent (the first 4096 packets), as a client
 * that keeps its ID pool moving would: NEW_CONNECTION_IDs in flight
 * count against the pool */
static void ack(void)
{
    int64_t hi = rx_largest, lo;
    uint8_t *nranges;
    unsigned n = 0;

    if (hi < 0 || hi >= (int64_t)sizeof(rx_seen))
        return;
    *fp++ = 0x02;
    fp = put_varint(fp, (uint64_t)hi);
    fp = put_varint(fp, 0); /* delay */
    nranges = fp++;         /* below 64: one byte */
    for (;;) {
        for (lo = hi; lo > 0 && rx_seen[lo - 1]; lo--)
            ;
        fp = put_varint(fp, (uint64_t)(hi - lo)); /* the range */
        /* the next received below lo - 1 */
        for (hi = lo - 2; hi >= 0 && !rx_seen[hi]; hi--)
            ;
        if (hi < 0 || n == 63)
            break;
        fp = put_varint(fp, (uint64_t)(lo - hi - 2)); /* gap */
        n++;
    }
    *nranges = (uint8_t)n;
}

static int never(void)
{
    return 0;
}

static uint64_t last_sent;

static int last_acked(void)
{
    return is_acked(last_sent);
}

/* an unretired ID other than the one in use */
static scid_t *spare(void)
{
    unsigned i;

    for (i = 0; i < nscids; i++)
        if (!scids[i].retired && scids[i].seq != cur_seq)
            return &scids[i];
    return NULL;
}

static int have_spare(void)
{
    return spare() != NULL;
}

static int last_acked_challenged(void)
{
    return challenged && is_acked(last_sent);
}

/* legal: retire the ID in use from a packet to another, 3 times over the
 * pool the server keeps; each packet (a PING in it) must be
 * acknowledged, so fastd routes each new ID to the connection. With
 * migrate, each from a new port too, a datagram of 1200 bytes (a
 * PATH_CHALLENGE's answer needs room: RFC 9000 8.2.1), and the server's
 * PATH_CHALLENGE is answered. */
static int walk_ids(int migrate)
{
    const ngtcp2_transport_params *sp =
        ngtcp2_conn_get_remote_transport_params(q);
    uint64_t our_seq = ngtcp2_conn_get_scid(q, NULL); /* 0 to n - 1 out */
    unsigned i, rounds = 3 * POOL;
    scid_t *s;

    for (i = 0; i < rounds; i++) {
        wait_for(have_spare, 2000);
        if (closed)
            return 0;
        if ((s = spare()) == NULL) {
            printf("no new connection ID after %u retired\n", i);
            return 1;
        }
        fp = fb;
        ack();
        retire(cur_seq);
        *fp++ = 0x01; /* PING: to be acknowledged */
        scid_find(cur_seq)->retired = 1;
        cur_seq = s->seq;
        if (migrate) {
            /* the server moves to an unused ID of ours with each path:
             * one more when its limit has room */
            if (our_seq - nour_retired < sp->active_connection_id_limit)
                new_cid(our_seq++, CIDLEN);
            new_socket();
            memset(fp, 0, (size_t)(fb + 1200 - 64 - fp)); /* PADDING */
            fp = fb + 1200 - 64;
            challenged = 0;
        }
        last_sent = send_frames(cur_seq, fb, (size_t)(fp - fb));
        wait_for(migrate ? last_acked_challenged : last_acked, 2000);
        if (closed)
            return 0;
        if (!last_acked() || (migrate && !challenged)) {
            printf("packet to connection ID %llu not acknowledged%s after "
                   "%u retired\n",
                   (unsigned long long)cur_seq,
                   migrate && !challenged ? " or path not challenged" : "",
                   i);
            return 1;
        }
        if (migrate) {
            fp = fb;
            ack();
            *fp++ = 0x1b; /* PATH_RESPONSE */
            memcpy(fp, challenge, 8);
            fp += 8;
            memset(fp, 0, (size_t)(fb + 1200 - 64 - fp));
            fp = fb + 1200 - 64;
            last_sent = send_frames(cur_seq, fb, (size_t)(fp - fb));
            wait_for(last_acked, 2000);
            if (closed)
                return 0;
            if (!last_acked()) {
                printf("PATH_RESPONSE not acknowledged after %u retired\n",
                       i);
                return 1;
            }
        }
    }
    printf("cycled %u\n", rounds);
    return 1;
}

static int64_t seen;

static int new_packet(void)
{
    return rx_largest != seen;
}

/* a GET / of localhost: HEADERS (QPACK: no dynamic table; :method GET,
 * :scheme https, :path / from the static table, :authority's value) */
static const char get_req[] = "\x01\x10\x00\x00\xd1\xd7\xc1\x50\x09"
                              "localhost";

/* request streams ended empty (or reset unseen: 'r', or a GET stopped:
 * 's') as fast as MAX_STREAMS allows, the server's packets acknowledged,
 * for 5 s at most or until the server has granted more than want */
static void flood(int how, uint64_t want)
{
    uint64_t next = 0, end = now_ns() + 5000000000u, first;

    first = max_bidi = ngtcp2_conn_get_remote_transport_params(q)
                           ->initial_max_streams_bidi;
    while (!closed && now_ns() < end && max_bidi <= want) {
        fp = fb;
        ack();
        while (next < max_bidi && fp - fb < 1100) {
            if (how == 'r') {
                *fp++ = 0x04; /* RESET_STREAM, H3_REQUEST_CANCELLED, 0 */
                fp = put_varint(fp, 4 * next);
                fp = put_varint(fp, 0x10c);
                *fp++ = 0;
            } else if (how == 's') {
                stream((int64_t)(4 * next), 0, get_req, sizeof(get_req) - 1,
                       1);
                *fp++ = 0x05; /* STOP_SENDING, H3_REQUEST_CANCELLED */
                fp = put_varint(fp, 4 * next);
                fp = put_varint(fp, 0x10c);
            } else {
                stream((int64_t)(4 * next), 0, "", 0, 1);
            }
            next++;
        }
        send_frames(cur_seq, fb, (size_t)(fp - fb));
        seen = rx_largest;
        wait_for(new_packet, 500);
    }
    printf("%llu streams, MAX_STREAMS %llu (from %llu)\n",
           (unsigned long long)next, (unsigned long long)max_bidi,
           (unsigned long long)first);
    fp = fb; /* all out */
}

static int got_reset(void)
{
    return reset != NULL;
}

static const uint8_t settings[] = {0x00, 0x04, 0x00}; /* control, SETTINGS */

int main(int argc, char **argv)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai;
    const ngtcp2_transport_params *sp;
    const char *c;
    uint64_t i, k;
    int rv, stream_error = 0;

    if (argc != 4)
        die("usage: quicraw HOST PORT CASE");
    c = argv[3];
    if ((rv = getaddrinfo(argv[1], argv[2], &hints, &ai)) != 0)
        die("%s: %s", argv[1], gai_strerror(rv));
    handshake(argv[1], ai);
    freeaddrinfo(ai);
    sp = ngtcp2_conn_get_remote_transport_params(q);
    if (sp == NULL)
        die("no transport parameters");

    fp = fb;
    if (strcmp(c, "params") == 0) {
        printf("params: streams %llu stream_data %llu\n",
               (unsigned long long)sp->initial_max_streams_bidi,
               (unsigned long long)sp->initial_max_stream_data_bidi_remote);
        return 0;
    }
    if (strcmp(c, "streams") == 0) {
        stream((int64_t)(4 * sp->initial_max_streams_bidi), 0, "", 0, 0);
    } else if (strcmp(c, "uni_streams") == 0) {
        stream((int64_t)(4 * sp->initial_max_streams_uni + 2), 0, "", 0, 0);
    } else if (strcmp(c, "stream_data") == 0) {
        stream(0, sp->initial_max_stream_data_bidi_remote, "x", 1, 0);
    } else if (strcmp(c, "max_data") == 0) {
        /* the last byte each stream may have, on enough streams */
        k = sp->initial_max_data / sp->initial_max_stream_data_bidi_remote + 1;
        if (k > sp->initial_max_streams_bidi)
            die("MAX_DATA is over what the streams may have");
        for (i = 0; i < k; i++)
            stream((int64_t)(4 * i),
                   sp->initial_max_stream_data_bidi_remote - 1, "x", 1, 0);
    } else if (strcmp(c, "final_size") == 0) {
        stream(0, 10, "", 0, 1);
        stream(0, 5, "", 0, 1);
    } else if (strcmp(c, "reset_size") == 0) {
        stream(0, 10, "", 0, 1);
        *fp++ = 0x04; /* RESET_STREAM 0, H3_REQUEST_CANCELLED, final 5 */
        fp = put_varint(fp, 0);
        fp = put_varint(fp, 0x10c);
        fp = put_varint(fp, 5);
    } else if (strcmp(c, "cid_limit") == 0) {
        /* sequence numbers far from the ones ngtcp2 gave */
        for (i = 0; i < sp->active_connection_id_limit; i++)
            new_cid(1000 + i, 8);
    } else if (strcmp(c, "retire_current") == 0) {
        retire(cur_seq);
    } else if (strcmp(c, "retire_unissued") == 0) {
        retire(1000);
    } else if (strcmp(c, "retire") == 0 || strcmp(c, "migrate") == 0) {
        if (walk_ids(strcmp(c, "migrate") == 0))
            return 0;
        fp = fb; /* closed: said below */
    } else if (strcmp(c, "server_stream") == 0) {
        stream(3, 0, "x", 1, 0); /* the server's control stream */
    } else if (strcmp(c, "handshake_done") == 0) {
        *fp++ = 0x1e;
    } else if (strcmp(c, "new_token") == 0) {
        *fp++ = 0x07;
        fp = put_varint(fp, 4);
        memcpy(fp, "abcd", 4);
        fp += 4;
    } else if (strcmp(c, "unknown_frame") == 0) {
        fp = put_varint(fp, 0x1f); /* after HANDSHAKE_DONE: none */
    } else if (strcmp(c, "truncated") == 0) {
        *fp++ = 0x0a; /* STREAM 0 with a length, 100 of 3 bytes */
        fp = put_varint(fp, 0);
        fp = put_varint(fp, 100);
        memcpy(fp, "abc", 3);
        fp += 3;
    } else if (strcmp(c, "cid_length") == 0) {
        new_cid(1000, 21);
    } else if (strcmp(c, "max_streams") == 0) {
        *fp++ = 0x12;
        fp = put_varint(fp, ((uint64_t)1 << 60) + 1);
    } else if (strcmp(c, "empty_request") == 0) {
        stream(0, 0, "", 0, 1);
        stream_error = 1;
    } else if (strcmp(c, "empty_flood") == 0 ||
               strcmp(c, "reset_flood") == 0 ||
               strcmp(c, "stop_flood") == 0) {
        /* three times the streams the server lets open at once */
        flood(c[0], 3 * sp->initial_max_streams_bidi);
    } else if (strcmp(c, "no_method") == 0) {
        /* HEADERS: :path /, :scheme https (static 1, 23) */
        stream(0, 0, "\x01\x04\x00\x00\xc1\xd7", 6, 1);
        stream_error = 1;
    } else if (strcmp(c, "qpack_static") == 0) {
        /* HEADERS: static entry 200 (there are 99) */
        stream(0, 0, "\x01\x05\x00\x00\xff\x89\x01", 7, 1);
    } else if (strcmp(c, "control2") == 0) {
        stream(2, 0, settings, sizeof(settings), 0);
        stream(6, 0, settings, sizeof(settings), 0);
    } else if (strcmp(c, "settings2") == 0) {
        stream(2, 0, "\x00\x04\x00\x04\x00", 5, 0);
    } else if (strcmp(c, "h2frame") == 0) {
        stream(2, 0, "\x00\x04\x00\x06\x00", 5, 0);
    } else if (strcmp(c, "h2setting") == 0) {
        /* SETTINGS_ENABLE_PUSH (0x2) = 0 */
        stream(2, 0, "\x00\x04\x02\x02\x00", 5, 0);
    } else if (strcmp(c, "goaway") == 0) {
        /* GOAWAY 0, then 4 */
        stream(2, 0, "\x00\x04\x00\x07\x01\x00\x07\x01\x04", 9, 0);
    } else if (strcmp(c, "max_push_id") == 0) {
        /* MAX_PUSH_ID 10, then 5 */
        stream(2, 0, "\x00\x04\x00\x0d\x01\x0a\x0d\x01\x05", 9, 0);
    } else if (strcmp(c, "close_control") == 0) {
        stream(2, 0, settings, sizeof(settings), 1);
    } else if (strcmp(c, "reset_control") == 0) {
        stream(2, 0, settings, sizeof(settings), 0);
        *fp++ = 0x04;
        fp = put_varint(fp, 2);
        fp = put_varint(fp, 0x10c);
        fp = put_varint(fp, sizeof(settings));
    } else if (strcmp(c, "qpack_ref") == 0) {
        /* the encoder stream: capacity 100, then Duplicate of relative
         * index 0 in an empty table */
        stream(2, 0, settings, sizeof(settings), 0);
        stream(6, 0, "\x02\x3f\x45\x00", 4, 0);
    } else {
        die("unknown case %s", c);
    }
    if (fp > fb) {
        send_frames(cur_seq, fb, (size_t)(fp - fb));
        wait_for(stream_error ? got_reset : never, 3000);
    }
    if (reset)
        printf("%s: stream %llu 0x%llx\n", reset,
               (unsigned long long)reset_stream,
               (unsigned long long)reset_code);
    if (stream_error && reset && !closed) {
        /* the stream's error: the connection lives on */
        fp = fb;
        ack();
        *fp++ = 0x01; /* PING */
        last_sent = send_frames(cur_seq, fb, (size_t)(fp - fb));
        wait_for(last_acked, 2000);
        if (last_acked())
            printf("alive\n");
    }
    if (closed)
        printf("closed: %s 0x%llx\n", close_app ? "application" : "transport",
               (unsigned long long)close_code);
    else if (!reset)
        printf("idle\n");
    return 0;
}
