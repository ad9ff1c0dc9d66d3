/*
 * Unit tests: TLS (core/event/fd_ssl.c) without the worker's loop. Certificates
 * are made here with OpenSSL; a configuration is loaded as the master
 * does; each connection is a socketpair with fastd's transport on one end
 * and an OpenSSL client on the other, both non-blocking, driven in turns.
 * Checked: errors naming file:line, SNI choosing the [server], one record
 * for several pieces of output, sendfile in bounded pieces, reads, plain
 * HTTP on the TLS port, a garbage ClientHello, resumption by ticket, and
 * the counters.
 */
#include <fcntl.h>
#include <sys/socket.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_ssl.h"
#include "tap.h"

static char dir[] = "/tmp/fd-unit-ssl-XXXXXX";

static const char *path_of(const char *name)
{
    static char path[4][256];
    static unsigned i;
    char *p = path[i++ % 4];

    snprintf(p, 256, "%s/%s", dir, name);
    return p;
}

static void write_file(const char *name, const char *text)
{
    FILE *fp = fopen(path_of(name), "w");

    fputs(text, fp);
    fclose(fp);
}

/* A P-256 key and a self-signed certificate for cn, as NAME.key/.crt */
static void make_cert(const char *name, const char *cn)
{
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    char file[64];
    FILE *fp;

    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                               (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, X509_get_subject_name(x));
    X509_set_pubkey(x, key);
    X509_sign(x, key, EVP_sha256());
    snprintf(file, sizeof(file), "%s.key", name);
    fp = fopen(path_of(file), "w");
    PEM_write_PrivateKey(fp, key, NULL, NULL, 0, NULL, NULL);
    fclose(fp);
    snprintf(file, sizeof(file), "%s.crt", name);
    fp = fopen(path_of(file), "w");
    PEM_write_X509(fp, x);
    fclose(fp);
    X509_free(x);
    EVP_PKEY_free(key);
}

static fd_cycle_t *load(const char *text, char *err)
{
    write_file("t.conf", text);
    err[0] = '\0';
    return fd_cycle_load(path_of("t.conf"), NULL, err, 1200);
}

/* Which line of text holds needle (1-based) */
static int line_of(const char *text, const char *needle)
{
    const char *p = strstr(text, needle), *q;
    int line = 1;

    for (q = text; p && q < p; q++)
        line += *q == '\n';
    return p ? line : -1;
}

static int has_at(const char *err, int line)
{
    char want[300];

    snprintf(want, sizeof(want), "%s:%d: ", path_of("t.conf"), line);
    return strstr(err, want) != NULL;
}

#define CONF_HEAD "[main]\ndaemon = off\npid = off\n"

static char conf[4096];

static const char *server_conf(const char *extra)
{
    snprintf(conf, sizeof(conf),
             CONF_HEAD
             "[server]\nlisten = 127.0.0.1:1 default ssl\n"
             "server_name = a.test\n"
             "ssl_certificate = %s/a.crt\nssl_certificate_key = %s/a.key\n"
             "%s"
             "[server]\nlisten = 127.0.0.1:1 ssl\n"
             "server_name = b.test *.b.test\n"
             "ssl_certificate = %s/b.crt\nssl_certificate_key = %s/b.key\n",
             dir, dir, extra, dir, dir);
    return conf;
}

static void test_config(void)
{
    char err[1200], text[4096];
    fd_cycle_t *cy;

    cy = load(server_conf(""), err);
    if (!ok(cy != NULL, "two ssl servers on one address load"))
        diag("%s", err);
    fd_cycle_free(cy);

    /* b.key beside a.crt */
    snprintf(text, sizeof(text),
             CONF_HEAD "[server]\nlisten = 127.0.0.1:1 ssl\n"
             "ssl_certificate = %s/a.crt\nssl_certificate_key = %s/b.key\n",
             dir, dir);
    cy = load(text, err);
    if (!ok(cy == NULL && has_at(err, line_of(text, "ssl_certificate_key")) &&
           strstr(err, "does not match"),
       "a key that does not match: its file:line"))
        diag("%s", err);

    snprintf(text, sizeof(text),
             CONF_HEAD "[server]\nlisten = 127.0.0.1:1 ssl\n"
             "ssl_certificate = %s/none.crt\n"
             "ssl_certificate_key = %s/a.key\n", dir, dir);
    cy = load(text, err);
    if (!ok(cy == NULL && has_at(err, line_of(text, "none.crt")) &&
           strstr(err, "No such file"),
       "a missing certificate: file:line and why"))
        diag("%s", err);

    snprintf(text, sizeof(text),
             CONF_HEAD "[server]\nlisten = 127.0.0.1:1 ssl\n");
    cy = load(text, err);
    if (!ok(cy == NULL && has_at(err, line_of(text, "[server]")) &&
           strstr(err, "no ssl_certificate"),
       "an ssl address without a certificate"))
        diag("%s", err);

    cy = load(server_conf("ssl_protocols = TLSv1 TLSv1.2\n"), err);
    if (!ok(cy == NULL && has_at(err, line_of(conf, "ssl_protocols")) &&
           strstr(err, "TLSv1 is not supported"),
       "TLSv1 is refused"))
        diag("%s", err);
    cy = load(server_conf("ssl_protocols = TLSv9\n"), err);
    if (!ok(cy == NULL && has_at(err, line_of(conf, "ssl_protocols")),
       "an unknown protocol"))
        diag("%s", err);
    cy = load(server_conf("ssl_ciphers = NO-SUCH-CIPHER\n"), err);
    if (!ok(cy == NULL && has_at(err, line_of(conf, "ssl_ciphers")),
       "a cipher list that selects nothing"))
        diag("%s", err);
    cy = load(server_conf("ssl_verify_client = on\n"), err);
    if (!ok(cy == NULL && has_at(err, line_of(conf, "ssl_verify_client")) &&
           strstr(err, "ssl_client_certificate"),
       "ssl_verify_client without a CA"))
        diag("%s", err);
    snprintf(text, sizeof(text), "ssl_stapling_file = %s\n", path_of("t.conf"));
    cy = load(server_conf(text), err);
    if (!ok(cy == NULL && has_at(err, line_of(conf, "ssl_stapling_file")) &&
           strstr(err, "OCSP"),
       "a stapling file that is not an OCSP response"))
        diag("%s", err);
    cy = load(server_conf("ssl_session_cache = lots\n"), err);
    if (!ok(cy == NULL && has_at(err, line_of(conf, "ssl_session_cache")),
       "a bad session cache size"))
        diag("%s", err);

    snprintf(text, sizeof(text),
             CONF_HEAD "[server]\nlisten = 127.0.0.1:1 ssl\n"
             "ssl_certificate = %s/a.crt\nssl_certificate_key = %s/a.key\n"
             "[server]\nlisten = 127.0.0.1:1\nserver_name = x\n", dir, dir);
    cy = load(text, err);
    if (!ok(cy == NULL && has_at(err, line_of(text, "listen = 127.0.0.1:1\n")) &&
           strstr(err, "without ssl"),
       "ssl and plain on one address: the second listen line"))
        diag("%s", err);
    cy = load(CONF_HEAD "[server]\nlisten = 127.0.0.1:1 ssl ssl\n", err);
    if (!ok(cy == NULL && has_at(err, 5), "an option twice"))
        diag("%s", err);
}

/* --- connections --- */

static fd_stream_t srv_s;
static SSL *cli;
static SSL_CTX *cli_ctx;
static int cfd = -1;

static void conn_open(fd_listening_t *ls, const char *sni, SSL_SESSION *sess)
{
    int sv[2];

    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv);
    memset(&srv_s, 0, sizeof(srv_s));
    srv_s.ev.fd = sv[0];
    srv_s.tp = &fd_transport_tcp;
    cfd = sv[1];
    ok(fd_ssl_accept(&srv_s, ls) == FD_OK && srv_s.tp == &fd_transport_tls &&
           srv_s.tls != NULL && srv_s.et,
       "fd_ssl_accept: the TLS transport, edge-triggered");
    cli = SSL_new(cli_ctx);
    SSL_set_fd(cli, cfd);
    SSL_set_connect_state(cli);
    if (sni)
        SSL_set_tlsext_host_name(cli, sni);
    if (sess)
        SSL_set_session(cli, sess);
}

static void conn_close(void)
{
    if (srv_s.tp->close)
        srv_s.tp->close(&srv_s);
    SSL_shutdown(cli); /* else OpenSSL no longer resumes its session */
    SSL_free(cli);
    close(srv_s.ev.fd);
    close(cfd);
}

/* Both sides in turns until the server's handshake ends: its result. */
static int handshake(void)
{
    int rc = FD_AGAIN, i;

    for (i = 0; i < 100 && rc == FD_AGAIN; i++) {
        SSL_do_handshake(cli);
        rc = srv_s.tp->handshake(&srv_s);
    }
    SSL_do_handshake(cli); /* the client's last flight */
    return rc;
}

static ssize_t cli_read_all(char *buf, size_t n)
{
    size_t got = 0;
    int r, i;

    for (i = 0; i < 1000 && got < n; i++) {
        r = SSL_read(cli, buf + got, (int)(n - got));
        if (r > 0)
            got += (size_t)r;
    }
    return (ssize_t)got;
}

static void test_connections(fd_cycle_t *cy)
{
    fd_listening_t *ls = cy->listening;
    fd_stats_t stats = {0};
    struct iovec iov[3] = {{"HTTP/1.1 200 OK\r\n", 17},
                           {"Content-Length: 5\r\n\r\n", 21},
                           {"hello", 5}};
    char buf[65536], file[50000];
    SSL_SESSION *sess;
    ssize_t n;
    off_t off;
    int fd, r;
    size_t i;

    fd_stats = &stats;
    cli_ctx = SSL_CTX_new(TLS_client_method());

    /* SNI b.test: the second server and its certificate */
    conn_open(ls, "www.b.test", NULL);
    is_int(handshake(), FD_OK, "handshake with SNI www.b.test");
    ok(fd_ssl_server(&srv_s) == ls->servers[1], "SNI chose *.b.test");
    {
        X509 *x = SSL_get0_peer_certificate(cli);
        char cn[64] = "";
        X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName,
                                  cn, sizeof(cn));
        is_str(cn, "b.test", "b.test's certificate was served");
    }
    ok(fd_str_eq_lit(fd_ssl_protocol(&srv_s), "TLSv1.3"), "TLSv1.3");
    ok(fd_str_eq_lit(fd_ssl_server_name(&srv_s), "www.b.test"),
       "$ssl_server_name");
    ok(fd_ssl_cipher(&srv_s).len > 0, "$ssl_cipher");
    ok(fd_str_eq_lit(fd_ssl_client_verify(&srv_s, cy->pool), "NONE"),
       "$ssl_client_verify without a client certificate");

    /* three pieces, one SSL_write: the client reads them as one record */
    n = srv_s.tp->send(&srv_s, iov, 3, 0);
    is_int(n, 43, "send: all three pieces");
    r = SSL_read(cli, buf, sizeof(buf));
    is_int(r, 43, "they arrive as one record");
    ok(r == 43 && memcmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0 &&
           memcmp(buf + 38, "hello", 5) == 0,
       "in order");

    /* reads: what the client wrote, then FD_AGAIN and readable cleared */
    SSL_write(cli, "GET / HTTP/1.1\r\n\r\n", 18);
    srv_s.readable = 1;
    n = srv_s.tp->recv(&srv_s, buf, sizeof(buf));
    is_int(n, 18, "recv: the request");
    n = srv_s.tp->recv(&srv_s, buf, sizeof(buf));
    ok(n == FD_AGAIN && !srv_s.readable, "then FD_AGAIN, readable cleared");

    /* a file in bounded pieces */
    for (i = 0; i < sizeof(file); i++)
        file[i] = (char)('a' + i % 26);
    fd = open(path_of("file"), O_RDWR | O_CREAT | O_TRUNC, 0600);
    r = (int)write(fd, file, sizeof(file));
    for (off = 0; off < (off_t)sizeof(file);) {
        n = srv_s.tp->sendfile(&srv_s, fd, off, sizeof(file) - (size_t)off);
        if (n <= 0)
            break;
        ok(n <= 16384, "sendfile: at most one record (%zd)", n);
        off += n;
        if (cli_read_all(buf, (size_t)n) != n ||
            memcmp(buf, file + off - n, (size_t)n) != 0)
            break;
    }
    is_int(off, sizeof(file), "sendfile: the whole file, intact");
    /* past the end: the file shrank */
    n = srv_s.tp->sendfile(&srv_s, fd, (off_t)sizeof(file), 10);
    ok(n == FD_ERROR && srv_s.error, "a file that shrank is an error");
    close(fd);
    sess = SSL_get1_session(cli); /* its ticket came with the data */
    srv_s.error = 0;
    conn_close();

    /* the ticket resumes the session, on b.test again */
    conn_open(ls, "www.b.test", sess);
    is_int(handshake(), FD_OK, "second handshake");
    ok(fd_ssl_session_reused(&srv_s) && SSL_session_reused(cli),
       "resumed with the session ticket");
    conn_close();
    SSL_SESSION_free(sess);

    /* without SNI, or with a name no server has: the default server, the
     * one a request's Host is judged against (fd_http.c, find_server) */
    conn_open(ls, NULL, NULL);
    is_int(handshake(), FD_OK, "handshake without SNI");
    ok(fd_ssl_server(&srv_s) == ls->servers[0],
       "the handshake's server is the default one");
    conn_close();
    conn_open(ls, "nobody.test", NULL);
    is_int(handshake(), FD_OK, "handshake with an unknown SNI name");
    ok(fd_ssl_server(&srv_s) == ls->servers[0], "the default server too");
    conn_close();

    /* plain HTTP on the TLS port */
    conn_open(ls, NULL, NULL);
    r = (int)write(cfd, "GET / HTTP/1.1\r\n", 16);
    is_int(srv_s.tp->handshake(&srv_s), FD_DECLINED,
           "plain HTTP: FD_DECLINED");
    ok(srv_s.tp == &fd_transport_tcp && srv_s.tls == NULL,
       "and the transport is plain TCP again");
    n = recv(srv_s.ev.fd, buf, sizeof(buf), 0);
    is_int(n, 16, "the request is still there to answer");
    conn_close();

    /* a ClientHello that is not one */
    conn_open(ls, NULL, NULL);
    r = (int)write(cfd, "\x16\x03\x01\x00\x08garbage!", 13);
    ok(srv_s.tp->handshake(&srv_s) == FD_ERROR && srv_s.error,
       "garbage ClientHello: FD_ERROR");
    conn_close();

    /* nothing yet: wait */
    conn_open(ls, NULL, NULL);
    srv_s.readable = 1;
    ok(srv_s.tp->handshake(&srv_s) == FD_AGAIN && !srv_s.readable,
       "no ClientHello yet: FD_AGAIN, readable cleared");
    fd_ssl_handshake_timeout(&srv_s);
    conn_close();
    (void)r;

    is_int(stats.ssl_resumed, 1, "1 resumed");
    is_int(stats.ssl_tls13, 4, "all TLSv1.3");
    is_int(stats.ssl_failed[FD_SSL_FAIL_PLAIN_HTTP], 1, "1 plain HTTP");
    is_int(stats.ssl_failed[FD_SSL_FAIL_PROTOCOL] +
               stats.ssl_failed[FD_SSL_FAIL_OTHER],
           1, "1 garbage");
    is_int(stats.ssl_failed[FD_SSL_FAIL_TIMEOUT], 1, "1 timeout");
    fd_stats = NULL;
    SSL_CTX_free(cli_ctx);
}

/* Client certificates: a.crt is its own CA; b.crt is not trusted */
static void test_client_certs(void)
{
    char err[1200], text[4096];
    fd_stats_t stats = {0};
    fd_cycle_t *cy;
    fd_listening_t *ls;
    fd_str_t v;

    snprintf(text, sizeof(text),
             CONF_HEAD "[server]\nlisten = 127.0.0.1:1 ssl\n"
             "ssl_certificate = %s/a.crt\nssl_certificate_key = %s/a.key\n"
             "ssl_client_certificate = %s/a.crt\n"
             "ssl_verify_client = optional\n"
             "[server]\nlisten = 127.0.0.1:1 ssl\nserver_name = on.test\n"
             "ssl_certificate = %s/a.crt\nssl_certificate_key = %s/a.key\n"
             "ssl_client_certificate = %s/a.crt\nssl_verify_client = on\n",
             dir, dir, dir, dir, dir, dir);
    cy = load(text, err);
    if (!ok(cy != NULL, "ssl_verify_client optional and on load"))
        diag("%s", err);
    if (cy == NULL)
        return;
    ls = cy->listening;
    fd_stats = &stats;
    cli_ctx = SSL_CTX_new(TLS_client_method());

    conn_open(ls, NULL, NULL);
    is_int(handshake(), FD_OK, "optional: no certificate, handshake done");
    ok(fd_str_eq_lit(fd_ssl_client_verify(&srv_s, cy->pool), "NONE"),
       "optional, none sent: NONE");
    conn_close();

    SSL_CTX_use_certificate_file(cli_ctx, path_of("a.crt"), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(cli_ctx, path_of("a.key"), SSL_FILETYPE_PEM);
    conn_open(ls, NULL, NULL);
    is_int(handshake(), FD_OK, "optional: a trusted certificate");
    ok(fd_str_eq_lit(fd_ssl_client_verify(&srv_s, cy->pool), "SUCCESS"),
       "$ssl_client_verify SUCCESS");
    v = fd_ssl_client_s_dn(&srv_s, cy->pool);
    ok(fd_str_eq_lit(v, "CN=a.test"), "$ssl_client_s_dn CN=a.test");
    conn_close();

    SSL_CTX_use_certificate_file(cli_ctx, path_of("b.crt"), SSL_FILETYPE_PEM);
    SSL_CTX_use_PrivateKey_file(cli_ctx, path_of("b.key"), SSL_FILETYPE_PEM);
    conn_open(ls, NULL, NULL);
    is_int(handshake(), FD_OK, "optional: an untrusted certificate");
    v = fd_ssl_client_verify(&srv_s, cy->pool);
    ok(v.len > 7 && memcmp(v.data, "FAILED:", 7) == 0,
       "$ssl_client_verify FAILED:reason");
    conn_close();

    /* on: the SNI server that requires one refuses the untrusted one */
    conn_open(ls, "on.test", NULL);
    is_int(handshake(), FD_ERROR, "on: an untrusted certificate fails");
    conn_close();
    SSL_CTX_free(cli_ctx);
    cli_ctx = SSL_CTX_new(TLS_client_method());
    conn_open(ls, "on.test", NULL);
    is_int(handshake(), FD_ERROR, "on: no certificate fails");
    conn_close();
    is_int(stats.ssl_failed[FD_SSL_FAIL_CLIENT_CERT], 2,
           "both counted as client_certificate");

    fd_stats = NULL;
    SSL_CTX_free(cli_ctx);
    fd_cycle_free(cy);
}

int main(void)
{
    char err[1200];
    fd_cycle_t *cy;

    if (fd_modules_init() != FD_OK) /* as main() does */
        return 1;
    if (mkdtemp(dir) == NULL)
        return 1;
    make_cert("a", "a.test");
    make_cert("b", "b.test");
    ok(fd_ssl_shm_init() == FD_OK, "ticket keys");

    test_config();
    cy = load(server_conf(""), err);
    if (cy) {
        test_connections(cy);
        fd_cycle_free(cy);
    }
    test_client_certs();

    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            diag("could not remove %s", dir);
    }
    return done_testing();
}
