/*
 * Unit tests: TLS to upstreams (core/event/fd_ssl_client.c). A
 * throw-away CA signs the upstream's certificate (up.test, 127.0.0.1) and
 * a client certificate; a second CA trusts nothing here. Each connection
 * is a socketpair: fastd's stream connects on one end, an OpenSSL server
 * answers on the other, both non-blocking, driven in turns.
 * Checked: file:line for bad files, shared clients, a verified handshake
 * with SNI, an IP address, a wrong name, an untrusted CA, verify off, SNI
 * off, a client certificate, and session reuse (only with the context and
 * name that verified it).
 */
#include <signal.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "fd_core.h"
#include "fd_ssl.h"
#include "tap.h"

static char dir[] = "/tmp/fd-unit-sslc-XXXXXX";

static const char *path_of(const char *name)
{
    static char path[4][256];
    static unsigned i;
    char *p = path[i++ % 4];

    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX v3;
    X509_EXTENSION *e;

    X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
    e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
}

static void save(const char *name, X509 *x, EVP_PKEY *key)
{
    char file[64];
    FILE *fp;

    snprintf(file, sizeof(file), "%s.key", name);
    fp = fopen(path_of(file), "w");
    PEM_write_PrivateKey(fp, key, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    snprintf(file, sizeof(file), "%s.crt", name);
    fp = fopen(path_of(file), "w");
    PEM_write_X509(fp, x);
    fclose(fp);
}

/* NAME.crt/.key for cn, signed by ca (NULL: a CA of its own, kept in
 * *cax and *cakey); san: subjectAltName, or NULL */
static void make_cert(const char *name, const char *cn, const char *san,
                      X509 **cax, EVP_PKEY **cakey)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    static long serial;

    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), ++serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_pubkey(x, key);
    if (san == NULL) {
        X509_set_issuer_name(x, X509_get_subject_name(x));
        add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
        add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign");
        X509_sign(x, key, EVP_sha256());
        save(name, x, key);
        *cax = x;
        *cakey = key;
        return;
    }
    X509_set_issuer_name(x, X509_get_subject_name(*cax));
    add_ext(x, *cax, NID_basic_constraints, "CA:FALSE");
    add_ext(x, *cax, NID_subject_alt_name, san);
    X509_sign(x, *cakey, EVP_sha256());
    save(name, x, key);
    X509_free(x);
    EVP_PKEY_free(key);
}

/* --- client contexts --- */

static fd_conf_t cf;

static fd_ssl_path_t path(const char *key, const char *file)
{
    static int line;

    return (fd_ssl_path_t){.path = file ? (char *)path_of(file) : NULL,
                           .key = key, .file = "t.conf", .line = ++line};
}

static fd_ssl_client_conf_t conf(int verify, const char *trusted)
{
    return (fd_ssl_client_conf_t){
        .verify = verify,
        .trusted = path("proxy_ssl_trusted_certificate", trusted),
        .protocols = {TLS1_2_VERSION, TLS1_3_VERSION},
        .ciphers = "DEFAULT",
        .server_name = 1,
        .session_reuse = 1};
}

static int err_at(const fd_ssl_path_t *p, const char *why)
{
    char want[64];

    snprintf(want, sizeof(want), "t.conf:%d: %s", p->line, p->key);
    return strstr(cf.err, want) == cf.err && strstr(cf.err, why) != NULL;
}

static void test_contexts(void)
{
    fd_ssl_client_conf_t c = conf(1, "none.crt");
    fd_ssl_client_t *a, *b;

    ok(fd_ssl_client(&cf, &c, "up.test") == NULL &&
           err_at(&c.trusted, "No such file"),
       "a missing trusted certificate: file:line and why");
    if (!err_at(&c.trusted, "No such file"))
        diag("%s", cf.err);

    c = conf(1, "ca.crt");
    c.certificate = path("proxy_ssl_certificate", "client.crt");
    ok(fd_ssl_client(&cf, &c, "up.test") == NULL &&
           err_at(&c.certificate, "needs both"),
       "a client certificate without its key");
    c.certificate_key = path("proxy_ssl_certificate_key", "up.key");
    ok(fd_ssl_client(&cf, &c, "up.test") == NULL &&
           err_at(&c.certificate_key, "does not match"),
       "a client key that does not match: file:line");
    if (!err_at(&c.certificate_key, "does not match"))
        diag("%s", cf.err);

    c = conf(1, "ca.crt");
    a = fd_ssl_client(&cf, &c, "up.test");
    c = conf(1, "ca.crt"); /* the same, from another location */
    b = fd_ssl_client(&cf, &c, "up.test");
    ok(a != NULL && a == b, "the same settings and name: one client");
    ok(fd_ssl_client(&cf, &c, "127.0.0.1") != a, "another name: another");
    c.server_name = 0;
    ok(fd_ssl_client(&cf, &c, "up.test") != a, "other settings: another");
    c = conf(1, NULL);
    if (!ok(fd_ssl_client(&cf, &c, "up.test") != NULL,
            "the system's CA store"))
        diag("%s", cf.err);
}

/* --- connections --- */

static fd_stream_t cli_s;
static SSL *srv;
static int sfd = -1;

static int conn_open(fd_ssl_client_t *cl, void **slot, SSL_CTX *srv_ctx)
{
    int sv[2], rc;

    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv);
    memset(&cli_s, 0, sizeof(cli_s));
    cli_s.ev.fd = sv[0];
    cli_s.tp = &fd_transport_tcp;
    sfd = sv[1];
    srv = SSL_new(srv_ctx);
    SSL_set_fd(srv, sfd);
    SSL_set_accept_state(srv);
    rc = fd_ssl_connect(&cli_s, cl, slot);
    return rc == FD_OK && cli_s.tp == &fd_transport_tls_client &&
           cli_s.tls != NULL && cli_s.et;
}

static void conn_close(void)
{
    fd_stream_close_transport(&cli_s);
    SSL_free(srv);
    close(cli_s.ev.fd);
    close(sfd);
}

/* Both sides in turns until the client's handshake ends: its result. */
static int handshake(void)
{
    int rc = FD_AGAIN, i;

    for (i = 0; i < 100 && rc == FD_AGAIN; i++) {
        rc = fd_stream_handshake(&cli_s);
        SSL_do_handshake(srv);
    }
    return rc;
}

static const char *sni(void)
{
    const char *n = SSL_get_servername(srv, TLSEXT_NAMETYPE_host_name);

    return n ? n : "";
}

/* The server says something; the client reads it (and the tickets that
 * came before it). */
static int echo(void)
{
    char buf[64];
    ssize_t n = FD_AGAIN;
    int i;

    SSL_write(srv, "pong", 4);
    for (i = 0; i < 10 && n == FD_AGAIN; i++)
        n = fd_stream_recv(&cli_s, buf, sizeof(buf));
    return n == 4 && memcmp(buf, "pong", 4) == 0;
}

static void test_connections(SSL_CTX *srv_ctx)
{
    fd_ssl_client_conf_t c = conf(1, "ca.crt");
    fd_ssl_client_t *up = fd_ssl_client(&cf, &c, "up.test"), *other;
    void *slot = NULL;
    struct iovec iov[2] = {{"GET / HTTP/1.1\r\n", 16}, {"\r\n", 2}};
    const char *e;
    char buf[64];
    int r;

    ok(conn_open(up, &slot, srv_ctx),
       "fd_ssl_connect: the TLS client transport, edge-triggered");
    is_int(handshake(), FD_OK, "verified: the CA's certificate for up.test");
    is_str(sni(), "up.test", "SNI up.test");
    ok(!fd_ssl_session_reused(&cli_s), "a full handshake");
    is_int(fd_stream_send(&cli_s, iov, 2, 0), 18, "send");
    r = SSL_read(srv, buf, sizeof(buf));
    ok(r == 18 && memcmp(buf, "GET / HTTP/1.1\r\n\r\n", 18) == 0,
       "the upstream reads the request");
    ok(echo(), "the client reads the response");
    ok(slot != NULL, "the upstream's session is kept in the slot");
    conn_close();

    ok(conn_open(up, &slot, srv_ctx), "again");
    is_int(handshake(), FD_OK, "second handshake");
    ok(fd_ssl_session_reused(&cli_s) && SSL_session_reused(srv),
       "the session is reused");
    ok(echo(), "and carries data");
    conn_close();

    /* the same peer under another name: its session is not offered */
    other = fd_ssl_client(&cf, &c, "127.0.0.1");
    ok(conn_open(other, &slot, srv_ctx), "an IP address");
    is_int(handshake(), FD_OK, "verified against the IP address SAN");
    is_str(sni(), "", "no SNI for an IP address");
    ok(!fd_ssl_session_reused(&cli_s),
       "up.test's session is not offered for 127.0.0.1");
    conn_close();

    other = fd_ssl_client(&cf, &c, "wrong.test");
    ok(conn_open(other, &slot, srv_ctx), "a wrong name");
    is_int(handshake(), FD_ERROR, "a wrong name fails");
    e = fd_ssl_connect_error(&cli_s);
    if (!ok(strstr(e, "certificate verify failed: hostname mismatch"),
            "with the reason"))
        diag("%s", e);
    conn_close();

    c = conf(1, "other.crt");
    other = fd_ssl_client(&cf, &c, "up.test");
    ok(conn_open(other, &slot, srv_ctx), "an untrusted CA");
    is_int(handshake(), FD_ERROR, "an untrusted CA fails");
    e = fd_ssl_connect_error(&cli_s);
    if (!ok(strstr(e, "certificate verify failed: unable to get local "
                      "issuer certificate"),
            "with the reason"))
        diag("%s", e); /* resumed, it would have skipped verification */
    conn_close();

    c = conf(0, "other.crt");
    c.server_name = 0;
    other = fd_ssl_client(&cf, &c, "wrong.test");
    ok(conn_open(other, &slot, srv_ctx), "verify off");
    is_int(handshake(), FD_OK, "verify off: any certificate, any name");
    is_str(sni(), "", "proxy_ssl_server_name off: no SNI");
    conn_close();

    c = conf(1, "ca.crt");
    c.session_reuse = 0;
    other = fd_ssl_client(&cf, &c, "up.test");
    fd_ssl_session_free(&slot);
    ok(slot == NULL, "fd_ssl_session_free empties the slot");
    ok(conn_open(other, &slot, srv_ctx), "session reuse off");
    is_int(handshake(), FD_OK, "handshake");
    ok(echo() && slot == NULL, "no session is kept");
    conn_close();

    /* the upstream closes at once */
    ok(conn_open(up, &slot, srv_ctx), "an upstream that closes");
    shutdown(sfd, SHUT_RDWR);
    is_int(handshake(), FD_ERROR, "fails");
    e = fd_ssl_connect_error(&cli_s);
    if (!ok(strstr(e, "closed") || strstr(e, "Broken pipe") ||
                strstr(e, "reset"),
            "the reason is the socket's"))
        diag("%s", e);
    conn_close();
    fd_ssl_session_free(&slot);
}

/* The upstream requires a certificate from the CA */
static void test_client_cert(SSL_CTX *srv_ctx)
{
    fd_ssl_client_conf_t c = conf(1, "ca.crt");
    fd_ssl_client_t *cl;
    void *slot = NULL;
    char cn[64] = "";
    X509 *x;

    SSL_CTX_set_verify(srv_ctx,
                       SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       NULL);
    SSL_CTX_load_verify_locations(srv_ctx, path_of("ca.crt"), NULL);
    SSL_CTX_set_session_id_context(srv_ctx, (const unsigned char *)"t", 1);

    cl = fd_ssl_client(&cf, &c, "up.test");
    ok(conn_open(cl, &slot, srv_ctx), "no client certificate");
    handshake();
    /* TLS 1.3: the client is done first; the refusal comes after */
    ok(!echo() && cli_s.error, "the upstream refuses the connection");
    conn_close();

    c.certificate = path("proxy_ssl_certificate", "client.crt");
    c.certificate_key = path("proxy_ssl_certificate_key", "client.key");
    cl = fd_ssl_client(&cf, &c, "up.test");
    if (!ok(cl != NULL, "a client certificate and its key"))
        diag("%s", cf.err);
    ok(conn_open(cl, &slot, srv_ctx), "with the certificate");
    is_int(handshake(), FD_OK, "handshake");
    ok(echo(), "the upstream accepts it");
    x = SSL_get0_peer_certificate(srv);
    if (x)
        X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName,
                                  cn, sizeof(cn));
    is_str(cn, "client.test", "the upstream saw client.test");
    is_int(SSL_get_verify_result(srv), X509_V_OK, "and verified it");
    conn_close();
    fd_ssl_session_free(&slot);
}

int main(void)
{
    X509 *ca, *other;
    EVP_PKEY *cakey, *otherkey;
    SSL_CTX *srv_ctx;

    signal(SIGPIPE, SIG_IGN); /* as in a worker: OpenSSL write()s */
    if (mkdtemp(dir) == NULL)
        return 1;
    make_cert("ca", "fastd test CA", NULL, &ca, &cakey);
    make_cert("other", "another CA", NULL, &other, &otherkey);
    make_cert("up", "up.test", "DNS:up.test,IP:127.0.0.1", &ca, &cakey);
    make_cert("client", "client.test", "DNS:client.test", &ca, &cakey);

    cf.pool = fd_pool_create(4096);
    test_contexts();

    srv_ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate_file(srv_ctx, path_of("up.crt"), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(srv_ctx, path_of("up.key"), SSL_FILETYPE_PEM);
    test_connections(srv_ctx);
    test_client_cert(srv_ctx);
    SSL_CTX_free(srv_ctx);
    fd_pool_destroy(cf.pool); /* frees the client contexts */

    X509_free(ca);
    X509_free(other);
    EVP_PKEY_free(cakey);
    EVP_PKEY_free(otherkey);
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            diag("could not remove %s", dir);
    }
    return done_testing();
}
