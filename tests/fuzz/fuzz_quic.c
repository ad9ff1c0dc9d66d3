/*
 * libFuzzer harness: QUIC and HTTP/3 through fastd's own receive path. A
 * configuration with two quic addresses (the second with quic_retry = on)
 * and a certificate made at start is loaded through the real reader, the
 * worker's loop runs it (fd_worker_fuzz_cycle, fd_worker_fuzz_turn), and
 * the harness sends datagrams over loopback UDP to the worker's sockets:
 * each reaches the function a worker runs per datagram (fd_quic.c:
 * recvmmsg(), the connection ID table, ngtcp2's server connection, the
 * GnuTLS handshake, nghttp3 and fastd's HTTP/3 request mapping, the
 * handlers and the access log), as in a worker, under ASan and UBSan.
 * Its locations: static files with gzip and add_header, plaintext,
 * status, the proxy to a port that refuses and to the harness's upstream
 * (which answers /echo/ at once and /hold/ never, read_timeout = 2h),
 * plaintext with
 * max_body_size = 64 (a buffered body) and limit_rate.
 *
 * Byte 0's bits 0-1 pick the mode (3 is 2), its other bits options;
 * bytes 1-4 seed the random bytes; then records:
 *
 *  0 raw: each record [len:2][bytes] is one datagram, as it is (header
 *    parsing, Version Negotiation, tokens, stateless resets, Initials
 *    that do not decrypt). Bit 6: a short header's ID bytes 1-2 become
 *    the worker's index and generation, which a stateless reset needs.
 *  1 Initial: the first record [len:2][bytes] is the Destination
 *    Connection ID (up to 20 bytes), each next [len:2][frames] the
 *    plaintext of an Initial packet the harness protects with the keys
 *    RFC 9001 5.2 derives from that ID, padded to 1200 bytes (bit 4: not),
 *    packet numbers 0, 1, ...: fuzzed CRYPTO, ACK, PADDING, PING,
 *    CONNECTION_CLOSE frames reach ngtcp2 and the TLS handshake. Bit 3
 *    puts a real ClientHello (GnuTLS's, in CRYPTO frames, captured at
 *    start) first, with the IDs it was made for (no ID record then). A
 *    Retry from the
 *    quic_retry address is obeyed: the next Initials carry its token to
 *    its ID (the token's real check); bit 6 gives the first Initials a
 *    NEW_TOKEN token made with the worker's key for the harness's
 *    address, as the worker sends one after a handshake.
 *  2 HTTP/3: an ngtcp2 client in the harness completes the handshake (and
 *    a Retry, bit 2), then each record [op][len:2][bytes] is stream data
 *    it sends: op bits 0-1 the stream (0 a request stream, bits 3-4 which
 *    of four; 1 the control stream, 2 the QPACK encoder's, 3 its
 *    decoder's; the harness opens them and writes their type byte), bit 2
 *    a FIN after the bytes, bit 5 the bytes are "name: value" lines the
 *    harness makes a HEADERS frame of (QPACK literals, no dynamic table),
 *    bit 6 the client resets the stream after them, bit 7 the worker
 *    begins a graceful stop (fd_quic_quit: GOAWAY) after them. Bit 6 of
 *    byte 0: after the records the client closes the connection
 *    (CONNECTION_CLOSE) instead of going silent.
 *
 * Bit 2 in modes 0 and 1: the quic_retry address. Bit 5: the debug log
 * (to /dev/null: the formatting runs). After the records, the harness
 * moves its clock on by an hour a few times: every connection must end
 * (idle timeout, closing period) and nothing stay held, or it aborts.
 *
 * Deterministic: CLOCK_MONOTONIC (and _COARSE) and getrandom() are the
 * harness's own in its thread while an input runs (the clock stands
 * still but for those jumps, an hour's step before each input and, when
 * nothing else moves, a jump to a timer due within 30 ms: pacing,
 * delayed ACKs, loss detection; the
 * bytes come from the input's seed), so an input replays the same way:
 * the connection IDs fastd and ngtcp2 pick, the tokens' timestamps, every
 * timer. GnuTLS's generator, seeded once, is its own: key shares differ
 * between runs, which changes the ciphertexts, not what they carry.
 * Loopback UDP is delivered at once and nothing is lost: a packet sent
 * again is sent by a timer, on the harness's clock.
 *
 * FUZZ_QUIC_TRACE=1: the worker's log (debug level) and a line of counts
 * after each input on stderr. FUZZ_QUIC_CAPTURE=FILE: the harness's
 * client's first Initial, as a mode 0 input (the committed seed in
 * tests/fuzz/corpus/fuzz_quic/ is one).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include "../lib/quic_client.h"

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_module.h"
#define FD_QUIC_PRIVATE /* fd_quic_keys: a NEW_TOKEN token of the worker's */
#include "fd_quic.h"
#include "fd_status.h"
#include "fuzz_rng.h"

#define MAX_STEPS 400 /* turns of the loop per settle, a bound on work */
#define IDLE_STEPS 2  /* turns in a row with nothing moving: settled */
#define JUMPS 6       /* an hour each, for the connections to end */
#define SHORT_TIMER (30 * NGTCP2_MILLISECONDS) /* run within a settle */
#define MAX_DGRAM 1500
#define ARENA (1 << 18) /* HEADERS the harness encodes, for one input */

static char dir[] = "/dev/shm/fd-fuzz-quic-XXXXXX";
static int srv[2] = {-1, -1}, cli = -1;
static struct sockaddr_in srv_addr[2], cli_addr;
static unsigned refused_port, up_port;
static int refused = -1, up_ls = -1;
static fd_cycle_t *cycle;
static fd_log_t quiet_log = {.fd = -1, .level = FD_LOG_EMERG};
static gnutls_certificate_credentials_t client_cred;
static int trace;
/* for the trace: datagrams sent and answered, stream bytes the client
 * read */
static unsigned long long sent, answers, stream_bytes;

/* --- the input's clock and random bytes ---------------------------------- */

static __thread int faking; /* in the harness's thread, in an input */
static uint64_t fake_ns = 1000 * NGTCP2_SECONDS;

int clock_gettime(clockid_t id, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);

    if (faking && (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE)) {
        ts->tv_sec = (time_t)(fake_ns / NGTCP2_SECONDS);
        ts->tv_nsec = (long)(fake_ns % NGTCP2_SECONDS);
        return 0;
    }
    if (real == NULL)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT,
                                                            "clock_gettime");
    return real(id, ts);
}

ssize_t getrandom(void *buf, size_t n, unsigned flags)
{
    static ssize_t (*real)(void *, size_t, unsigned);
    uint8_t *p = buf;
    size_t i;

    if (faking) {
        for (i = 0; i < n; i++)
            p[i] = (uint8_t)rng();
        return (ssize_t)n;
    }
    if (real == NULL)
        real =
            (ssize_t(*)(void *, size_t, unsigned))dlsym(RTLD_NEXT, "getrandom");
    return real(buf, n, flags);
}

static ngtcp2_tstamp now(void)
{
    return fake_ns;
}

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "quarantine_size_mb=32";
}

/* --- setup ----------------------------------------------------------------- */

static int remove_one(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void cleanup(void)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void put(const char *name, const void *data, size_t len)
{
    char path[sizeof(dir) + 64];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((fp = fopen(path, "w")) == NULL || fwrite(data, 1, len, fp) != len)
        abort();
    fclose(fp);
}

/* A self-signed P-256 certificate for localhost: key.pem, cert.pem */
static void make_cert(void)
{
    gnutls_x509_privkey_t key;
    gnutls_x509_crt_t crt;
    gnutls_datum_t pem;
    time_t t = time(NULL);
    unsigned char serial[] = {1};

    if (gnutls_x509_privkey_init(&key) < 0 ||
        gnutls_x509_privkey_generate(
            key, GNUTLS_PK_ECDSA,
            GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0) < 0 ||
        gnutls_x509_crt_init(&crt) < 0 ||
        gnutls_x509_crt_set_version(crt, 3) < 0 ||
        gnutls_x509_crt_set_serial(crt, serial, sizeof(serial)) < 0 ||
        gnutls_x509_crt_set_activation_time(crt, t - 3600) < 0 ||
        gnutls_x509_crt_set_expiration_time(crt, t + 30 * 86400) < 0 ||
        gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0,
                                      "localhost", 9) < 0 ||
        gnutls_x509_crt_set_subject_alt_name(
            crt, GNUTLS_SAN_DNSNAME, "localhost", 9, GNUTLS_FSAN_SET) < 0 ||
        gnutls_x509_crt_set_key(crt, key) < 0 ||
        gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0) < 0)
        abort();
    if (gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &pem) < 0)
        abort();
    put("key.pem", pem.data, pem.size);
    gnutls_free(pem.data);
    if (gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &pem) < 0)
        abort();
    put("cert.pem", pem.data, pem.size);
    gnutls_free(pem.data);
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
}

/* A loopback socket on an ephemeral port */
static int loopback(int type, struct sockaddr_in *sin)
{
    socklen_t len = sizeof(*sin);
    int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    *sin = (struct sockaddr_in){.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (struct sockaddr *)sin, sizeof(*sin)) < 0 ||
        getsockname(fd, (struct sockaddr *)sin, &len) < 0)
        abort();
    return fd;
}

static void load(void)
{
    char text[8192], err[1200], path[sizeof(dir) + 32];
    struct sockaddr_in r;
    fd_listening_t *ls;
    int n, i;

    n = snprintf(
        text, sizeof(text),
        "[main]\ndaemon = off\npid = off\nerror_log = stderr\n"
        "[offload]\nthreads = 1\n"
        "[http]\nlog_format = h3 $remote_addr \"$request\" $status "
        "$body_bytes_sent $server_protocol $http_user_agent $request_time\n"
        "access_log = /dev/null format=h3\n"
        "[server]\nlisten = 127.0.0.1:%u quic\n"
        "ssl_certificate = %s/cert.pem\nssl_certificate_key = %s/key.pem\n"
        "root = %s/html\nopen_file_cache = 0\ngzip = on\n"
        "gzip_min_length = 0\ngzip_types = *\n"
        "add_header = X-Uri \"$uri|$args|$host\"\n"
        "[location /plaintext]\nhandler = plaintext\n"
        "[location = /status]\nhandler = status\n"
        "[location /up/]\nhandler = proxy\npass = http://127.0.0.1:%u\n"
        "[location /echo/]\nhandler = proxy\npass = http://127.0.0.1:%u\n"
        "[location /hold/]\nhandler = proxy\npass = http://127.0.0.1:%u\n"
        "read_timeout = 2h\n"
        "[location /small/]\nhandler = plaintext\nmax_body_size = 64\n"
        "[location /rated/]\nalias = %s/html/\nlimit_rate = 16k\n"
        "[server]\nlisten = 127.0.0.1:%u quic\nquic_retry = on\n"
        "server_name = retry.example\n"
        "ssl_certificate = %s/cert.pem\nssl_certificate_key = %s/key.pem\n"
        "root = %s/html\n",
        ntohs(srv_addr[0].sin_port), dir, dir, dir, refused_port, up_port,
        up_port, dir, ntohs(srv_addr[1].sin_port), dir, dir, dir);
    if (n < 0 || (size_t)n >= sizeof(text))
        abort();
    put("fuzz.conf", text, (size_t)n);
    snprintf(path, sizeof(path), "%s/fuzz.conf", dir);
    cycle = fd_cycle_load(path, NULL, err, sizeof(err));
    if (cycle == NULL) {
        fprintf(stderr, "fuzz_quic: config refused: %s\n%s", err, text);
        abort();
    }
    /* the harness's sockets stand in for the master's */
    for (ls = cycle->listening; ls; ls = ls->next) {
        memcpy(&r, &ls->addr, sizeof(r));
        for (i = 0; i < 2; i++)
            if (ls->quic && r.sin_port == srv_addr[i].sin_port)
                break;
        if (i == 2)
            abort();
        ls->fds = fd_palloc(cycle->pool, sizeof(int));
        ls->fds[0] = srv[i];
        ls->nfds = 1;
    }
}

static void client_hello(void);

static void setup(void)
{
    char path[sizeof(dir) + 16];
    int one = 1, i;

    if (fd_modules_init() != FD_OK)
        abort();
    signal(SIGPIPE, SIG_IGN);
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(cleanup);
    snprintf(path, sizeof(path), "%s/html", dir);
    mkdir(path, 0755);
    put("html/index.html", "<h1>index</h1>\n", 15);
    put("html/a.txt", "text to compress, text to compress\n", 35);
    {
        /* past the client's stream window (16 KB) and its connection's */
        static char big[80 * 1024];
        size_t i;
        for (i = 0; i < sizeof(big); i++)
            big[i] = (char)('a' + i * 7 % 26);
        put("html/big.txt", big, sizeof(big));
    }
    make_cert();

    for (i = 0; i < 2; i++) {
        srv[i] = loopback(SOCK_DGRAM, &srv_addr[i]);
        setsockopt(srv[i], IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
    }
    cli = loopback(SOCK_DGRAM, &cli_addr);
    {
        struct sockaddr_in r;
        refused = loopback(SOCK_STREAM, &r); /* bound, not listening */
        refused_port = ntohs(r.sin_port);
        up_ls = loopback(SOCK_STREAM, &r); /* the harness's upstream */
        if (listen(up_ls, 64) < 0)
            abort();
        up_port = ntohs(r.sin_port);
    }
    /* FUZZ_QUIC_TRACE=1: the worker's debug log on stderr, to see what
     * an input did */
    trace = getenv("FUZZ_QUIC_TRACE") != NULL;
    quiet_log.fd = trace ? 2 : open("/dev/null", O_WRONLY | O_CLOEXEC);
    fd_log = &quiet_log;
    if (fd_shm_init() != FD_OK || fd_quic_shm_init() != FD_OK)
        abort();
    fd_stats_worker_init(0, 1, 0);
    load();
    if (fd_worker_fuzz_cycle(cycle) != FD_OK)
        abort();
    if (gnutls_certificate_allocate_credentials(&client_cred) < 0)
        abort();
    client_hello();
}

/* --- Initial packets (RFC 9001 5) ------------------------------------------- */

typedef struct {
    gnutls_aead_cipher_hd_t aead;
    gnutls_cipher_hd_t hp;
    uint8_t iv[12];
} keys_t;

/* HKDF-Expand-Label (RFC 8446 7.1), empty context */
static void expand_label(const uint8_t *secret, const char *label, uint8_t *out,
                         size_t n)
{
    uint8_t info[64];
    size_t l = strlen(label), i = 0;
    gnutls_datum_t key = {(unsigned char *)secret, 32}, in = {info, 0};

    info[i++] = (uint8_t)(n >> 8);
    info[i++] = (uint8_t)n;
    info[i++] = (uint8_t)(6 + l);
    memcpy(info + i, "tls13 ", 6);
    memcpy(info + i + 6, label, l);
    i += 6 + l;
    info[i++] = 0;
    in.size = (unsigned)i;
    if (gnutls_hkdf_expand(GNUTLS_MAC_SHA256, &key, &in, out, n) < 0)
        abort();
}

/* QUIC v1's Initial keys for one side, from the client's first DCID */
static void keys_init(keys_t *k, const uint8_t *dcid, size_t dcidlen,
                      const char *side)
{
    static const uint8_t salt[] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34,
                                   0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8,
                                   0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};
    uint8_t initial[32], secret[32], key[16], hp[16], zero[16] = {0};
    gnutls_datum_t d = {(unsigned char *)dcid, (unsigned)dcidlen},
                   s = {(unsigned char *)salt, sizeof(salt)}, kd = {key, 16},
                   hd = {hp, 16}, iv = {zero, 16};

    if (gnutls_hkdf_extract(GNUTLS_MAC_SHA256, &d, &s, initial) < 0)
        abort();
    expand_label(initial, side, secret, 32);
    expand_label(secret, "quic key", key, 16);
    expand_label(secret, "quic iv", k->iv, 12);
    expand_label(secret, "quic hp", hp, 16);
    /* header protection is AES-ECB on one block: CBC from a zero IV,
     * reset before each */
    if (gnutls_aead_cipher_init(&k->aead, GNUTLS_CIPHER_AES_128_GCM, &kd) < 0 ||
        gnutls_cipher_init(&k->hp, GNUTLS_CIPHER_AES_128_CBC, &hd, &iv) < 0)
        abort();
}

static void keys_free(keys_t *k)
{
    gnutls_aead_cipher_deinit(k->aead);
    gnutls_cipher_deinit(k->hp);
}

static void hp_mask(keys_t *k, const uint8_t *sample, uint8_t *mask)
{
    uint8_t zero[16] = {0};

    gnutls_cipher_set_iv(k->hp, zero, 16);
    if (gnutls_cipher_encrypt2(k->hp, sample, 16, mask, 16) < 0)
        abort();
}

static void nonce(const keys_t *k, uint64_t pn, uint8_t *n)
{
    int i;

    memcpy(n, k->iv, 12);
    for (i = 0; i < 8; i++)
        n[11 - i] ^= (uint8_t)(pn >> (8 * i));
}

/* An Initial to dcid from scid with token around the plaintext frames,
 * packet number pn in 4 bytes; its length */
static size_t protect(uint8_t *out, size_t size, const ngtcp2_cid *dcid,
                      const ngtcp2_cid *scid, const uint8_t *token,
                      size_t tokenlen, uint64_t pn, const uint8_t *frames,
                      size_t n)
{
    keys_t k;
    uint8_t nc[12], mask[16];
    size_t h = 0, pnoff, ctlen, len = 4 + n + 16;
    int i;

    out[h++] = 0xc3; /* long, fixed bit, Initial, 4-byte packet number */
    out[h++] = 0, out[h++] = 0, out[h++] = 0, out[h++] = 1;
    out[h++] = (uint8_t)dcid->datalen;
    memcpy(out + h, dcid->data, dcid->datalen);
    h += dcid->datalen;
    out[h++] = (uint8_t)scid->datalen;
    memcpy(out + h, scid->data, scid->datalen);
    h += scid->datalen;
    out[h++] = (uint8_t)(0x40 | tokenlen >> 8); /* 2-byte varints */
    out[h++] = (uint8_t)tokenlen;
    memcpy(out + h, token, tokenlen);
    h += tokenlen;
    out[h++] = (uint8_t)(0x40 | len >> 8);
    out[h++] = (uint8_t)len;
    pnoff = h;
    for (i = 3; i >= 0; i--)
        out[h++] = (uint8_t)(pn >> (8 * i));
    if (h + n + 16 > size)
        abort();
    ctlen = size - h;
    keys_init(&k, dcid->data, dcid->datalen, "client in");
    nonce(&k, pn, nc);
    if (gnutls_aead_cipher_encrypt(k.aead, nc, 12, out, h, 16, frames, n,
                                   out + h, &ctlen) < 0)
        abort();
    hp_mask(&k, out + pnoff + 4, mask);
    out[0] ^= mask[0] & 0x0f;
    for (i = 0; i < 4; i++)
        out[pnoff + i] ^= mask[1 + i];
    keys_free(&k);
    return h + ctlen;
}

static size_t varint(const uint8_t *p, size_t n, uint64_t *v)
{
    size_t len, i;

    if (n == 0 || (len = (size_t)1 << (p[0] >> 6)) > n)
        return 0;
    *v = p[0] & 0x3f;
    for (i = 1; i < len; i++)
        *v = *v << 8 | p[i];
    return len;
}

/* A client's Initial's plaintext frames (into out), with its IDs; 0 if it
 * is not one */
static size_t unprotect(const uint8_t *pkt, size_t n, ngtcp2_cid *dcid,
                        ngtcp2_cid *scid, uint8_t *out)
{
    keys_t k;
    uint8_t p[MAX_DGRAM], nc[12], mask[16];
    uint64_t tl, len, pn = 0;
    size_t h = 5, m, pnlen, i, outlen = MAX_DGRAM;

    if (n > sizeof(p) || n < 7 || (pkt[0] & 0xf0) != 0xc0)
        return 0;
    memcpy(p, pkt, n);
    ngtcp2_cid_init(dcid, p + h + 1, p[h]);
    h += 1 + p[h];
    ngtcp2_cid_init(scid, p + h + 1, p[h]);
    h += 1 + p[h];
    if ((m = varint(p + h, n - h, &tl)) == 0)
        return 0;
    h += m + tl;
    if (h > n || (m = varint(p + h, n - h, &len)) == 0)
        return 0;
    h += m;
    if (h + len > n || len < 20)
        return 0;
    keys_init(&k, dcid->data, dcid->datalen, "client in");
    hp_mask(&k, p + h + 4, mask);
    p[0] ^= mask[0] & 0x0f;
    pnlen = (p[0] & 3) + 1;
    for (i = 0; i < pnlen; i++) {
        p[h + i] ^= mask[1 + i];
        pn = pn << 8 | p[h + i];
    }
    nonce(&k, pn, nc);
    if (gnutls_aead_cipher_decrypt(k.aead, nc, 12, p, h + pnlen, 16,
                                   p + h + pnlen, len - pnlen, out,
                                   &outlen) < 0)
        outlen = 0;
    keys_free(&k);
    return outlen;
}

/* --- the harness's client (mode 2, and the ClientHello) ---------------------- */

typedef struct {
    ngtcp2_conn *conn;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    ngtcp2_path_storage ps;
    int64_t bidi[4], uni[3];
    /* what it still has to send on one stream */
    int64_t sid;
    const uint8_t *data;
    size_t len;
    int fin, writing;
    int dead;
} client_t;

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((client_t *)ref->user_data)->conn;
}

/* fastd's responses: read and let go (the windows move on) */
static int c_recv_stream_data(ngtcp2_conn *conn, uint32_t flags, int64_t id,
                              uint64_t off, const uint8_t *data, size_t len,
                              void *ud, void *sud)
{
    (void)flags, (void)off, (void)data, (void)ud, (void)sud;
    stream_bytes += len;
    ngtcp2_conn_extend_max_stream_offset(conn, id, len);
    ngtcp2_conn_extend_max_offset(conn, len);
    return 0;
}

static void client_new(client_t *q, const struct sockaddr_in *to,
                       const ngtcp2_cid *dcid, const ngtcp2_cid *scid)
{
    static const ngtcp2_callbacks cb = {
        QUIC_CLIENT_CALLBACKS,
        .recv_stream_data = c_recv_stream_data,
    };
    ngtcp2_settings s;
    ngtcp2_transport_params p;
    unsigned i;

    memset(q, 0, sizeof(*q));
    for (i = 0; i < 4; i++)
        q->bidi[i] = -1;
    for (i = 0; i < 3; i++)
        q->uni[i] = -1;
    ngtcp2_path_storage_init(&q->ps, (struct sockaddr *)&cli_addr,
                             sizeof(cli_addr), (struct sockaddr *)to,
                             sizeof(*to), NULL);
    /* small windows, moved on as it reads: the worker's streams block on
     * them and resume (big.txt is five times one) */
    quic_client_params(&s, &p, now(), 16 << 10, 64 << 10);
    q->ref.get_conn = get_conn;
    q->ref.user_data = q;
    if (ngtcp2_conn_client_new(&q->conn, dcid, scid, &q->ps.path,
                               NGTCP2_PROTO_VER_V1, &cb, &s, &p, NULL,
                               q) != 0 ||
        quic_client_tls(&q->tls, client_cred, "localhost", &q->ref, q->conn) !=
            0)
        abort();
}

static void client_free(client_t *q)
{
    ngtcp2_conn_del(q->conn);
    gnutls_deinit(q->tls);
}

static void send_to(const struct sockaddr_in *to, const uint8_t *p, size_t n)
{
    sent++;
    if (sendto(cli, p, n, 0, (const struct sockaddr *)to, sizeof(*to)) < 0 &&
        errno != EAGAIN)
        abort();
}

/* Its packets: the stream data it has, then ACKs and the rest. Whether
 * it sent any. */
static int client_write(client_t *q)
{
    uint8_t buf[MAX_DGRAM];
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n, nd;
    int moved = 0;

    if (q->dead)
        return 0;
    if (ngtcp2_conn_get_expiry(q->conn) <= now() &&
        ngtcp2_conn_handle_expiry(q->conn, now()) != 0) {
        q->dead = 1;
        return 0;
    }
    for (;;) {
        ngtcp2_vec v = {(uint8_t *)q->data, q->len};
        uint32_t flags =
            q->writing && q->fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0;

        n = ngtcp2_conn_writev_stream(
            q->conn, &q->ps.path, &pi, buf, sizeof(buf), &nd, flags,
            q->writing ? q->sid : -1, &v, q->writing ? 1 : 0, now());
        if (n < 0) {
            if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED ||
                n == NGTCP2_ERR_STREAM_SHUT_WR ||
                n == NGTCP2_ERR_STREAM_NOT_FOUND) {
                q->writing = 0; /* the rest is not sent */
                continue;
            }
            q->dead = 1;
            return moved;
        }
        if (q->writing && nd >= 0) {
            q->data += nd;
            q->len -= (size_t)nd;
            if (q->len == 0)
                q->writing = 0;
        }
        if (n == 0)
            return moved;
        send_to((const struct sockaddr_in *)q->ps.path.remote.addr, buf,
                (size_t)n);
        moved = 1;
    }
}

static void client_read(client_t *q, const uint8_t *p, size_t n)
{
    ngtcp2_pkt_info pi = {0};
    ngtcp2_path path = q->ps.path;

    int rv;

    if (!q->dead &&
        (rv = ngtcp2_conn_read_pkt(q->conn, &path, &pi, p, n, now())) != 0) {
        if (trace)
            fprintf(stderr, "fuzz_quic: the client: %s\n", ngtcp2_strerror(rv));
        q->dead = 1;
    }
}

/* --- the loop ---------------------------------------------------------------- */

/* mode 1: the token its Initials carry (a Retry's, or a NEW_TOKEN one),
 * and a Retry's ID to send them to */
static uint8_t token[256];
static size_t tokenlen;
static ngtcp2_cid retry_scid;
static int retried;

static void retry_seen(const uint8_t *p, size_t n)
{
    ngtcp2_pkt_hd hd;
    ngtcp2_ssize h = ngtcp2_pkt_decode_hd_long(&hd, p, n);

    /* the token: between the header and the 16-byte integrity tag */
    if (h <= 0 || hd.type != NGTCP2_PKT_RETRY || (size_t)h + 16 > n ||
        n - (size_t)h - 16 > sizeof(token) || retried)
        return;
    tokenlen = n - (size_t)h - 16;
    memcpy(token, p + h, tokenlen);
    retry_scid = hd.scid;
    retried = 1;
}

/*
 * The upstream of /echo/ and /hold/: it reads what the proxy sends and
 * answers a request line for /echo/ at once (a short body, chunked), one
 * for /hold/ never: that request waits while the client resets its
 * stream, the connection ends or the worker stops. The harness closes
 * what is left at the input's end.
 */
#define MAX_UP 16

static struct {
    int fd;
    unsigned answered : 1;
} ups[MAX_UP];
static unsigned nups;

static int upstream(void)
{
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain"
                                 "\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 "b\r\nhello world\r\n0\r\n\r\n";
    char buf[16384];
    unsigned i;
    ssize_t n;
    int fd, moved = 0;

    while ((fd = accept4(up_ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
           0) {
        moved = 1;
        if (nups == MAX_UP) {
            close(fd);
            continue;
        }
        ups[nups].fd = fd;
        ups[nups++].answered = 0;
    }
    for (i = 0; i < nups;) {
        n = recv(ups[i].fd, buf, sizeof(buf), 0);
        if (n > 0) {
            moved = 1;
            /* the request line starts what it reads first */
            if (!ups[i].answered &&
                memmem(buf, (size_t)n, " /hold/", 7) == NULL &&
                send(ups[i].fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL) < 0)
                n = 0;
            ups[i].answered = 1;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
            moved = 1;
            close(ups[i].fd);
            ups[i] = ups[--nups];
            continue;
        }
        i++;
    }
    return moved;
}

static void upstream_close(void)
{
    while (nups)
        close(ups[--nups].fd);
}

/* When the next timer of the worker's or the client's is due (ns on the
 * harness's clock), UINT64_MAX for none */
static uint64_t next_timer(client_t *q)
{
    fd_timer_t *t = fd_timer_fuzz_first();
    uint64_t due = UINT64_MAX, c;

    if (t) {
        int32_t left = fd_msec32_diff(t->when, (uint32_t)fd_current_msec);
        due = fake_ns + (uint64_t)(left > 0 ? left : 0) * NGTCP2_MILLISECONDS;
    }
    if (q && !q->dead && (c = ngtcp2_conn_get_expiry(q->conn)) < due)
        due = c;
    return due;
}

/*
 * Turns of the loop, and the client's part, until nothing moves and no
 * timer is due within SHORT_TIMER: the clock jumps to the next one
 * (pacing, delayed ACKs, loss detection), which runs; the idle timeouts
 * are left for the end of the input.
 */
static void settle(client_t *q, int mode1)
{
    uint8_t buf[65536];
    unsigned steps, idle = 0;
    uint64_t due;
    ssize_t n;

    for (steps = 0; steps < MAX_STEPS; steps++) {
        int moved = q ? client_write(q) : 0;
        if (fd_worker_fuzz_turn(0) != FD_OK)
            abort();
        moved |= upstream();
        while ((n = recv(cli, buf, sizeof(buf), 0)) > 0) {
            moved = 1;
            answers++;
            if (q)
                client_read(q, buf, (size_t)n);
            else if (mode1)
                retry_seen(buf, (size_t)n);
        }
        idle = moved ? 0 : idle + 1;
        if (idle < IDLE_STEPS)
            continue;
        if ((due = next_timer(q)) > fake_ns + SHORT_TIMER)
            break;
        if (due > fake_ns)
            fake_ns = due;
        idle = 0;
    }
}

/* --- the ClientHello of mode 1 ------------------------------------------------ */

static uint8_t hello[MAX_DGRAM];
static size_t hello_len;
static ngtcp2_cid hello_dcid, hello_scid;

/* GnuTLS's ClientHello in the CRYPTO frames of a real client's first
 * Initial, decrypted (its padding off): its transport parameters name
 * the client's SCID, so mode 1 sends it with the same IDs */
static void client_hello(void)
{
    static const uint8_t d[] = "fuzz-quic-hello-dcid", s[] = "fuzz-scid";
    uint8_t buf[MAX_DGRAM];
    ngtcp2_pkt_info pi;
    ngtcp2_ssize n;
    client_t q;
    const char *path;

    ngtcp2_cid_init(&hello_dcid, d, 18);
    ngtcp2_cid_init(&hello_scid, s, 8);
    client_new(&q, &srv_addr[0], &hello_dcid, &hello_scid);
    n = ngtcp2_conn_write_pkt(q.conn, &q.ps.path, &pi, buf, sizeof(buf), now());
    if (n <= 0)
        abort();
    if ((path = getenv("FUZZ_QUIC_CAPTURE")) != NULL) {
        /* the datagram, as a mode 0 input: a seed */
        FILE *fp = fopen(path, "w");
        uint8_t head[] = {0, 0, 0, 0, 0, (uint8_t)(n >> 8), (uint8_t)n};
        if (fp == NULL || fwrite(head, 1, 7, fp) != 7 ||
            fwrite(buf, 1, (size_t)n, fp) != (size_t)n)
            abort();
        fclose(fp);
    }
    hello_len = unprotect(buf, (size_t)n, &hello_dcid, &hello_scid, hello);
    while (hello_len && hello[hello_len - 1] == 0)
        hello_len--;
    if (hello_len == 0)
        abort();
    client_free(&q);
}

/* --- the modes ------------------------------------------------------------------ */

static size_t record(const uint8_t **p, const uint8_t *end, size_t head,
                     const uint8_t **rec)
{
    size_t n;

    *rec = *p;
    if ((size_t)(end - *p) < head)
        return (*p = end, 0);
    n = (size_t)(*p)[head - 2] << 8 | (*p)[head - 1];
    *rec = *p + head;
    n = fd_min(n, (size_t)(end - *rec));
    *p = *rec + n;
    return n;
}

static void raw(uint8_t opt, const uint8_t *p, const uint8_t *end)
{
    const struct sockaddr_in *to = &srv_addr[(opt >> 2) & 1];
    uint8_t d[MAX_DGRAM];
    const uint8_t *rec;
    size_t n;

    while (p < end) {
        n = record(&p, end, 2, &rec);
        n = fd_min(n, sizeof(d)); /* a macro: record() once */
        memcpy(d, rec, n);
        /* a short header naming this worker's generation */
        if ((opt & 0x40) && n >= 3 && !(d[0] & 0x80)) {
            d[1] = (uint8_t)fd_worker->index;
            d[2] = (uint8_t)fd_worker->cycle->generation;
        }
        send_to(to, d, n);
        settle(NULL, 0);
    }
}

static void initial(uint8_t opt, const uint8_t *p, const uint8_t *end)
{
    const struct sockaddr_in *to = &srv_addr[(opt >> 2) & 1];
    /* a packet: the header (IDs, token) and its frames */
    uint8_t frames[MAX_DGRAM], pkt[MAX_DGRAM + 512];
    ngtcp2_cid dcid = hello_dcid, scid = hello_scid;
    const uint8_t *rec;
    uint64_t pn = 0;
    size_t n, room;
    int due = opt & 0x08; /* the ClientHello goes first */

    retried = 0;
    tokenlen = 0;
    if (opt & 0x40) {
        /* what the worker gives a client at the end of a handshake */
        ngtcp2_ssize t = ngtcp2_crypto_generate_regular_token(
            token, fd_quic_keys->secrets.retry,
            sizeof(fd_quic_keys->secrets.retry),
            (const struct sockaddr *)&cli_addr, sizeof(cli_addr), now());
        tokenlen = t > 0 ? (size_t)t : 0;
    }
    if (!due) {
        /* the first record is the Destination Connection ID */
        n = record(&p, end, 2, &rec);
        ngtcp2_cid_init(&dcid, rec, fd_min(n, NGTCP2_MAX_CIDLEN));
    }
    while (p < end || due) {
        const ngtcp2_cid *d = retried ? &retry_scid : &dcid;
        int had = retried;
        /* room for the header, the token and the tag in 1200 bytes */
        room = 1200 -
               (6 + d->datalen + 1 + scid.datalen + 2 + tokenlen + 2 + 4 + 16);
        n = 0;
        if (due) {
            memcpy(frames, hello, hello_len);
            n = hello_len;
            due = 0;
        }
        if (p < end) {
            size_t m = record(&p, end, 2, &rec);
            m = fd_min(m, sizeof(frames) - 64 - n);
            memcpy(frames + n, rec, m);
            n += m;
        }
        if (!(opt & 0x10) && n < room) {
            memset(frames + n, 0, room - n); /* PADDING */
            n = room;
        }
        n = protect(pkt, sizeof(pkt), d, &scid, token, tokenlen, pn++, frames,
                    fd_min(n, sizeof(frames) - 64));
        send_to(to, pkt, n);
        settle(NULL, 1);
        /* after a Retry, the ClientHello again, with its token */
        if (!had && retried && (opt & 0x08))
            due = 1;
    }
}

static uint8_t arena[ARENA];
static size_t arena_used;

/* "name: value" lines as a HEADERS frame: each a literal field line
 * with a literal name (RFC 9204 4.5.6), no Huffman; in the arena */
static const uint8_t *headers(const uint8_t *p, size_t n, size_t *len)
{
    uint8_t f[8192 + 64], *out = arena + arena_used;
    const uint8_t *end = p + n, *eol, *colon;
    size_t m = 0, room = ARENA - arena_used;

    f[m++] = 0, f[m++] = 0; /* Required Insert Count 0, Base 0 */
    while (p < end && m + 3 * 8 < sizeof(f) - 64) {
        eol = memchr(p, '\n', (size_t)(end - p));
        eol = eol ? eol : end;
        colon = p < eol ? memchr(p + 1, ':', (size_t)(eol - p - 1)) : NULL;
        if (colon) {
            size_t nl = (size_t)(colon - p), vl = (size_t)(eol - colon - 1);
            const uint8_t *v = colon + 1;
            if (vl && *v == ' ')
                v++, vl--;
            if (m + nl + vl + 16 > sizeof(f) - 64)
                break;
            m += qpack_int(f + m, 0x20, 3, nl);
            memcpy(f + m, p, nl), m += nl;
            m += qpack_int(f + m, 0x00, 7, vl);
            memcpy(f + m, v, vl), m += vl;
        }
        p = eol < end ? eol + 1 : end;
    }
    if (room < m + 16)
        return (*len = 0, out);
    out[0] = 0x01; /* HEADERS, its length in a 4-byte varint */
    out[1] = (uint8_t)(0x80 | m >> 24), out[2] = (uint8_t)(m >> 16);
    out[3] = (uint8_t)(m >> 8), out[4] = (uint8_t)m;
    *len = 5;
    memcpy(out + *len, f, m);
    *len += m;
    arena_used += *len;
    return out;
}

static void h3(uint8_t opt, const uint8_t *p, const uint8_t *end)
{
    static const uint8_t types[3] = {0x00, 0x02, 0x03};
    const struct sockaddr_in *to = &srv_addr[(opt >> 2) & 1];
    ngtcp2_cid dcid, scid;
    const uint8_t *rec;
    client_t q;
    size_t n;
    int64_t *sid;
    unsigned i;

    dcid.datalen = 18;
    scid.datalen = 8;
    getrandom(dcid.data, dcid.datalen, 0);
    getrandom(scid.data, scid.datalen, 0);
    client_new(&q, to, &dcid, &scid);
    /* a settle ends when nothing moved for two turns: again, should the
     * kernel of a busy machine have kept a datagram back that long */
    for (i = 0;
         i < 50 && !q.dead && !ngtcp2_conn_get_handshake_completed(q.conn); i++)
        settle(&q, 0);
    if (!ngtcp2_conn_get_handshake_completed(q.conn)) {
        fprintf(stderr, "fuzz_quic: no handshake with the worker\n");
        abort();
    }
    arena_used = 0;
    while (p < end && !q.dead) {
        uint8_t op = *p;
        n = record(&p, end, 3, &rec);
        if ((op & 3) == 0)
            sid = &q.bidi[(op >> 3) & 3];
        else
            sid = &q.uni[(op & 3) - 1];
        if (*sid < 0) {
            int rv = (op & 3) == 0
                         ? ngtcp2_conn_open_bidi_stream(q.conn, sid, NULL)
                         : ngtcp2_conn_open_uni_stream(q.conn, sid, NULL);
            if (rv != 0) {
                *sid = -1;
                continue;
            }
            if (op & 3) {
                q.sid = *sid;
                q.data = &types[(op & 3) - 1];
                q.len = 1;
                q.fin = 0;
                q.writing = 1;
                settle(&q, 0);
            }
        }
        if (op & 0x20)
            rec = headers(rec, n, &n);
        q.sid = *sid;
        q.data = rec;
        q.len = n;
        q.fin = (op & 4) != 0;
        q.writing = 1;
        settle(&q, 0);
        if ((op & 0x40) && !q.dead) {
            ngtcp2_conn_shutdown_stream(q.conn, 0, *sid, 0x10c);
            settle(&q, 0);
        }
        if (op & 0x80) {
            /* a graceful stop's first step: GOAWAY, the connection ends
             * with its last stream (the worker itself goes on) */
            fd_quic_quit();
            settle(&q, 0);
        }
    }
    if ((opt & 0x40) && !q.dead) {
        /* the client ends it: CONNECTION_CLOSE, while the worker may
         * still hold a request (the proxy's, waiting on /hold/) */
        uint8_t buf[MAX_DGRAM];
        ngtcp2_pkt_info pi;
        ngtcp2_ccerr ce;
        ngtcp2_ssize n;

        ngtcp2_ccerr_set_application_error(&ce, 0x100, NULL, 0);
        n = ngtcp2_conn_write_connection_close(q.conn, &q.ps.path, &pi, buf,
                                               sizeof(buf), &ce, now());
        if (n > 0)
            send_to(to, buf, (size_t)n);
    }
    client_free(&q);
    settle(NULL, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t seed;
    unsigned i;

    faking = 1;
    if (cycle == NULL)
        setup();
    if (size < 5)
        return (faking = 0);
    memcpy(&seed, data + 1, 4);
    rng_state = seed;
    /* an hour since the last input: nothing it did (a token's age, the
     * stateless resets' budget for the second) reaches this one */
    fake_ns += 3600 * NGTCP2_SECONDS;
    quiet_log.level = trace || (data[0] & 0x20) ? FD_LOG_DEBUG : FD_LOG_EMERG;
    switch (data[0] & 3) {
    case 0: raw(data[0], data + 5, data + size); break;
    case 1: initial(data[0], data + 5, data + size); break;
    default: h3(data[0], data + 5, data + size); break;
    }
    /* every connection ends (idle timeouts, then closing periods), and
     * after the first hour the held requests (the proxy sees its
     * upstream close; /hold/'s read_timeout is longer): a connection
     * freed under a request the proxy still holds (qc->refs) */
    for (i = 0; i < JUMPS; i++) {
        if (fd_stats->quic_active == 0 && fd_worker->nheld == 0 && nups == 0)
            break;
        fake_ns += 3600 * NGTCP2_SECONDS;
        settle(NULL, 0);
        upstream_close();
        settle(NULL, 0);
    }
    faking = 0;
    if (trace) {
        fd_stats_t *st = fd_stats;
        fprintf(stderr,
                "fuzz_quic: so far %llu datagrams sent, %llu answers, "
                "%llu stream bytes read\n",
                sent, answers, stream_bytes);
        fprintf(stderr,
                "fuzz_quic: so far %llu QUIC connections, %llu TLS 1.3 "
                "handshakes, %llu HTTP/3 requests (%llu 2xx, %llu 4xx, %llu "
                "5xx), %llu Retries, %llu validated, %llu Initials dropped, "
                "%llu stateless resets\n",
                (unsigned long long)st->quic_conns,
                (unsigned long long)st->ssl_tls13,
                (unsigned long long)st->quic_streams,
                (unsigned long long)st->status[2],
                (unsigned long long)st->status[4],
                (unsigned long long)st->status[5],
                (unsigned long long)st->quic_retries,
                (unsigned long long)st->quic_validated,
                (unsigned long long)st->quic_dropped,
                (unsigned long long)st->quic_resets);
    }
    if (fd_stats->quic_active || fd_worker->nheld) {
        fprintf(stderr,
                "fuzz_quic: %llu QUIC connections open and %u "
                "held %d hours after the input\n",
                (unsigned long long)fd_stats->quic_active, fd_worker->nheld,
                JUMPS);
        abort();
    }
    quiet_log.level = FD_LOG_EMERG;
    return 0;
}
