/*
 * TLS with OpenSSL 3 (fd_ssl.h): the [server] ssl_* keys, one SSL_CTX per
 * server built by the master at load, SNI, the session ticket keys every
 * worker shares, and the TLS transport under fd_stream_t. The client
 * side, to upstreams, is fd_ssl_client.c.
 *
 * SNI chooses the server at the ClientHello, so its certificates,
 * protocols, ciphers, tickets and client verification apply; the session
 * cache and timeout and the handshake timeout are the address's default
 * server's (OpenSSL keeps sessions in the first context).
 */
#include <arpa/inet.h>
#include <limits.h>
#include <malloc.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "fd_uring.h"
#include "fd_core.h"
#include "fd_http.h"
#include "fd_ssl.h"
#include "fd_ssl_int.h"

/* One TLS record's plaintext: a send is at most one record */
#define SSL_SCRATCH 16384
#define OCSP_MAX (64 * 1024)
#define WIRE_IDLE_MAX 1024 /* wire queue buffer an idle connection keeps */

enum { VERIFY_OFF, VERIFY_ON, VERIFY_OPTIONAL };

typedef struct {
    fd_ssl_path_t *items;
    unsigned n;
} ssl_paths_t;

/* The ssl_* keys of one [server], and what the master built from them. */
typedef struct {
    ssl_paths_t certs;            /* ssl_certificate, in order */
    ssl_paths_t keys;             /* ssl_certificate_key, paired */
    fd_ssl_protocols_t protocols;
    char *ciphers;
    char *groups;                 /* ssl_ecdh_curve */
    int prefer_server_ciphers;
    int session_tickets;
    fd_msec_t session_timeout;
    fd_int_t session_cache;       /* entries per worker, 0: off */
    ssl_paths_t stapling;         /* at most one */
    ssl_paths_t client_ca;        /* at most one */
    int verify;
    const char *verify_file;      /* where ssl_verify_client was set */
    int verify_line;
    fd_msec_t handshake_timeout;
    int ktls;                     /* ssl_ktls */

    SSL_CTX *ctx;
    int ktls_on;                  /* ssl_ktls and the kernel has the ULP */
    unsigned char *ocsp;          /* the DER response, in the cycle pool */
    size_t ocsp_len;
} ssl_conf_t;

#define SSL_OFF(f) offsetof(ssl_conf_t, f)

/* --- configuration --- */

static int add_path(fd_conf_t *cf, const fd_directive_t *d, ssl_paths_t *l,
                    const char *value)
{
    fd_ssl_path_t *items = fd_palloc(cf->pool, (l->n + 1) * sizeof(*items));

    if (items == NULL)
        return fd_conf_error(cf, "out of memory");
    if (l->n)
        memcpy(items, l->items, l->n * sizeof(*items));
    /* ssl_certificate = acme:NAME names a module's certificate, not a
     * file */
    items[l->n].path = fd_ssl_provider_path(value)
                           ? fd_pstrdup(cf->pool, value, strlen(value))
                           : fd_conf_path(cf, value);
    items[l->n].key = d->name;
    items[l->n].file = cf->file;
    items[l->n].line = cf->line;
    if (items[l->n].path == NULL)
        return fd_conf_error(cf, "out of memory");
    l->items = items;
    l->n++;
    return FD_OK;
}

/* ssl_certificate, ssl_certificate_key: repeatable */
static int set_paths(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *v)
{
    return add_path(cf, d, (ssl_paths_t *)((char *)conf + d->offset), v);
}

/* ssl_stapling_file, ssl_client_certificate: one file, the last wins */
static int set_path(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    ssl_paths_t *l = (ssl_paths_t *)((char *)conf + d->offset);

    l->n = 0;
    return add_path(cf, d, l, v);
}

int fd_ssl_set_protocols(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v)
{
    fd_ssl_protocols_t *pr = (fd_ssl_protocols_t *)((char *)conf + d->offset);
    char *copy = fd_pstrdup(cf->pool, v, strlen(v)), *tok, *save;
    int min = 0, max = 0, ver;

    if (copy == NULL)
        return fd_conf_error(cf, "out of memory");
    for (tok = strtok_r(copy, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (strcmp(tok, "TLSv1.2") == 0)
            ver = TLS1_2_VERSION;
        else if (strcmp(tok, "TLSv1.3") == 0)
            ver = TLS1_3_VERSION;
        else if (strcmp(tok, "SSLv2") == 0 || strcmp(tok, "SSLv3") == 0 ||
                 strcmp(tok, "TLSv1") == 0 || strcmp(tok, "TLSv1.1") == 0)
            return fd_conf_error(cf, "%s: %s is not supported "
                                 "(deprecated as insecure, RFC 8996): use "
                                 "TLSv1.2 and TLSv1.3", d->name, tok);
        else
            return fd_conf_error(cf, "%s: unknown protocol \"%s\" "
                                 "(TLSv1.2, TLSv1.3)", d->name, tok);
        if (min == 0 || ver < min)
            min = ver;
        if (ver > max)
            max = ver;
    }
    if (min == 0)
        return fd_conf_error(cf, "%s needs TLSv1.2, TLSv1.3 or both",
                             d->name);
    pr->min = min;
    pr->max = max;
    return FD_OK;
}

static int set_cache(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *v)
{
    int64_t n = strcmp(v, "off") == 0 ? 0 : fd_conf_parse_uint(v, 1 << 20);

    if (n < 0 || (n == 0 && strcmp(v, "off") != 0))
        return fd_conf_error(cf, "\"%s\" must be off or 1 .. 1048576 "
                             "sessions, not \"%s\"", d->name, v);
    *(fd_int_t *)((char *)conf + d->offset) = (fd_int_t)n;
    return FD_OK;
}

static int set_verify(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    ssl_conf_t *sc = conf;

    if (strcmp(v, "off") == 0)
        sc->verify = VERIFY_OFF;
    else if (strcmp(v, "on") == 0)
        sc->verify = VERIFY_ON;
    else if (strcmp(v, "optional") == 0)
        sc->verify = VERIFY_OPTIONAL;
    else
        return fd_conf_error(cf, "\"%s\" must be one of on | optional | "
                             "off, not \"%s\"", d->name, v);
    sc->verify_file = cf->file;
    sc->verify_line = cf->line;
    return FD_OK;
}

/* A list OpenSSL must take (a scratch context's set() of it), checked
 * where it is read, so that a bad value names its file:line (the default,
 * set for every server or location, is known to be taken); then kept. */
static int set_ssl_list(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *v, int (*set)(SSL_CTX *, const char *),
                        const char *why)
{
    char **field = (char **)((char *)conf + d->offset);
    SSL_CTX *ctx;
    int ok;

    if (v != d->def) {
        ctx = SSL_CTX_new(TLS_server_method());
        if (ctx == NULL)
            return fd_conf_error(cf, "SSL_CTX_new() failed");
        ok = set(ctx, v);
        SSL_CTX_free(ctx);
        ERR_clear_error();
        if (!ok)
            return fd_conf_error(cf, "%s \"%s\" %s", d->name, v, why);
    }
    *field = fd_pstrdup(cf->pool, v, strlen(v));
    return *field ? FD_OK : fd_conf_error(cf, "out of memory");
}

/* SSL_CTX_set1_groups_list() is a macro */
static int ctx_set_groups(SSL_CTX *ctx, const char *v)
{
    return SSL_CTX_set1_groups_list(ctx, v);
}

int fd_ssl_set_ciphers(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                       const char *v)
{
    return set_ssl_list(cf, d, conf, v, SSL_CTX_set_cipher_list,
                        "selects no cipher");
}

/* ssl_ecdh_curve. No "auto" (nginx's): OpenSSL 3.0 can set a list on an
 * SSL but not give it its defaults back, which SNI needs when it moves a
 * connection to another server's context */
static int set_groups(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    return set_ssl_list(cf, d, conf, v, ctx_set_groups,
                        "names an unknown or unusable group (X25519, "
                        "prime256v1, secp384r1, X448, secp521r1, "
                        "ffdhe2048 ..., colon-separated)");
}

int fd_ssl_set_path(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    fd_ssl_path_t *p = (fd_ssl_path_t *)((char *)conf + d->offset);

    p->path = fd_conf_path(cf, v);
    p->key = d->name;
    p->file = cf->file;
    p->line = cf->line;
    return p->path ? FD_OK : fd_conf_error(cf, "out of memory");
}

const fd_directive_t fd_ssl_server_directives[] = {
    {.name = "ssl_certificate", .type = FD_CONF_LIST,
     .offset = SSL_OFF(certs), .set = set_paths,
     .doc = "PEM certificate (then its chain) served on a listen ... ssl "
            "address; repeatable, paired in order with "
            "ssl_certificate_key: an ECDSA and an RSA pair side by side, "
            "OpenSSL picks by the client's signature algorithms; "
            "acme:NAME instead: obtained and renewed from [acme NAME] "
            "for the server's server_names (then alone, with no key)"},
    {.name = "ssl_certificate_key", .type = FD_CONF_LIST,
     .offset = SSL_OFF(keys), .set = set_paths,
     .doc = "PEM private key of the ssl_certificate of the same rank; a "
            "key that does not match is a configuration error. Read by "
            "the master before privileges drop, again on reload"},
    {.name = "ssl_protocols", .type = FD_CONF_CUSTOM,
     .offset = SSL_OFF(protocols), .set = fd_ssl_set_protocols,
     .def = "TLSv1.2 TLSv1.3",
     .doc = "TLSv1.2 and/or TLSv1.3, space-separated (TLSv1 and TLSv1.1 "
            "are refused)"},
    {.name = "ssl_ciphers", .type = FD_CONF_CUSTOM,
     .offset = SSL_OFF(ciphers), .set = fd_ssl_set_ciphers,
     .def = "ECDHE+AESGCM:ECDHE+CHACHA20",
     .doc = "TLS 1.2 cipher list, OpenSSL syntax (TLS 1.3 suites are "
            "OpenSSL's defaults, all AEAD); the default is forward-secret "
            "AEAD only"},
    {.name = "ssl_ecdh_curve", .type = FD_CONF_CUSTOM,
     .offset = SSL_OFF(groups), .set = set_groups,
     .def = "X25519:prime256v1:secp384r1",
     .doc = "the key exchange groups (curves) a client may use, "
            "colon-separated OpenSSL names, as nginx's key; the default is "
            "Mozilla's intermediate list, without "
            "the finite-field groups (ffdhe2048 ...) that make a handshake "
            "dearer. A client that offers none of them fails the "
            "handshake"},
    {.name = "ssl_prefer_server_ciphers", .type = FD_CONF_FLAG,
     .offset = SSL_OFF(prefer_server_ciphers), .def = "off",
     .doc = "on: the server's order of ssl_ciphers wins over the "
            "client's"},
    {.name = "ssl_ktls", .type = FD_CONF_FLAG, .offset = SSL_OFF(ktls),
     .def = "off",
     .doc = "on: kernel TLS (SSL_OP_ENABLE_KTLS) and SSL_sendfile() for "
            "files, where the kernel offers the tls ULP "
            "(/proc/sys/net/ipv4/tcp_available_ulp); without it a [warn] "
            "at load, and files are read and encrypted 16 KB at a time"},
    {.name = "ssl_session_tickets", .type = FD_CONF_FLAG,
     .offset = SSL_OFF(session_tickets), .def = "on",
     .doc = "resumption by session tickets, with keys the master makes "
            "and every worker shares (so a session resumes on any worker "
            "and after a reload); see [http] ssl_session_ticket_rotate"},
    {.name = "ssl_session_timeout", .type = FD_CONF_MSEC,
     .offset = SSL_OFF(session_timeout), .def = "5m", .min = 1000,
     .max = 86400000,
     .doc = "how long a session (ticket or cache entry) can be resumed; "
            "the default server's of an address applies"},
    {.name = "ssl_session_cache", .type = FD_CONF_CUSTOM,
     .offset = SSL_OFF(session_cache), .set = set_cache, .def = "off",
     .doc = "off, or a server-side session cache of N sessions in each "
            "worker (a client resumes from it only on the worker that "
            "made its session: tickets are the shared way); the default "
            "server's of an address applies"},
    {.name = "ssl_stapling_file", .type = FD_CONF_CUSTOM,
     .offset = SSL_OFF(stapling), .set = set_path,
     .doc = "a DER OCSP response (openssl ocsp -respout) stapled as is to "
            "handshakes that ask for it; read at load and reload"},
    {.name = "ssl_client_certificate", .type = FD_CONF_CUSTOM,
     .offset = SSL_OFF(client_ca), .set = set_path,
     .doc = "PEM CA certificates that client certificates are verified "
            "against (their names are sent as acceptable CAs)"},
    {.name = "ssl_verify_client", .type = FD_CONF_CUSTOM, .offset = 0,
     .set = set_verify, .def = "off",
     .doc = "on: a client certificate that verifies is required (the "
            "handshake fails without one); optional: asked for, and "
            "$ssl_client_verify says SUCCESS, FAILED:reason or NONE; off"},
    {.name = "ssl_handshake_timeout", .type = FD_CONF_MSEC,
     .offset = SSL_OFF(handshake_timeout), .def = "60s", .min = 1,
     .max = 3600000,
     .doc = "the whole TLS handshake, from accept (as nginx's "
            "client_header_timeout bounds a request's header); the "
            "default server's of an address applies"},
    FD_CONF_END};

void *fd_ssl_conf_create(fd_conf_t *cf)
{
    ssl_conf_t *sc = fd_pcalloc(cf->pool, sizeof(*sc));

    if (sc == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    if (fd_conf_defaults(cf, fd_ssl_server_directives, sc) != FD_OK)
        return NULL;
    return sc;
}

/* --- contexts --- */

static int ex_listening = -1; /* SSL ex_data: the fd_listening_t */
static int ex_pending = -1;   /* SSL ex_data: taken, not yet sent (wire_flush) */
static int ex_server = -1;    /* SSL ex_data: the handshake's server */

/* "file:line: " and the message, with OpenSSL's reason appended. */
static int ssl_conf_error(char *err, size_t errlen, const char *file,
                          int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int ssl_conf_error(char *err, size_t errlen, const char *file,
                          int line, const char *fmt, ...)
{
    unsigned long e = ERR_peek_last_error();
    va_list ap;
    int n = snprintf(err, errlen, "%s:%d: ", file, line);

    if (n < 0 || (size_t)n >= errlen)
        n = 0;
    va_start(ap, fmt);
    n += vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    if (e && (size_t)n < errlen)
        snprintf(err + n, errlen - (size_t)n, " (%s)",
                 ERR_reason_error_string(e) ? ERR_reason_error_string(e)
                                            : "OpenSSL error");
    ERR_clear_error();
    return FD_ERROR;
}

/* The host_name of a server_name extension (RFC 6066 3), or 0. */
static int sni_name(SSL *ssl, fd_str_t *name)
{
    const unsigned char *p;
    size_t len, n;

    if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) ||
        len < 5 || (size_t)(p[0] << 8 | p[1]) != len - 2 ||
        p[2] != TLSEXT_NAMETYPE_host_name)
        return 0;
    n = (size_t)(p[3] << 8 | p[4]);
    if (n == 0 || n > len - 5)
        return 0;
    name->data = (const char *)p + 5;
    name->len = n;
    return 1;
}

/*
 * SNI: the [server] of this address that the name chooses, and its
 * context. Done at the ClientHello, before OpenSSL picks the version, the
 * cipher or a session to resume (whose context must be the chosen
 * server's: a servername callback would come after that), so the chosen
 * server's protocols, ciphers and verification apply.
 */
static int client_hello_cb(SSL *ssl, int *al, void *arg)
{
    fd_listening_t *ls = SSL_get_ex_data(ssl, ex_listening);
    SSL_CTX *ctx;
    fd_http_server_t *srv;
    ssl_conf_t *sc, *cur;
    fd_str_t name;

    (void)arg;
    if (ls == NULL)
        return SSL_CLIENT_HELLO_SUCCESS;
    /* the handshake's server is the connection's: no name, or one no
     * server has, is the default server's (fd_ssl_server) */
    if (!sni_name(ssl, &name) ||
        (srv = fd_listening_server(ls, name)) == NULL)
        srv = ls->servers[0];
    if (!SSL_set_ex_data(ssl, ex_server, srv)) {
        *al = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    sc = srv->ssl;
    ctx = SSL_get_SSL_CTX(ssl);
    if (sc->ctx == ctx)
        return SSL_CLIENT_HELLO_SUCCESS;
    cur = SSL_CTX_get_app_data(ctx);
    /* SSL_set_SSL_CTX takes the certificates and the session id
     * context; the rest the SSL copied from the first context at
     * SSL_new() */
    if (SSL_set_SSL_CTX(ssl, sc->ctx) == NULL ||
        !SSL_set_min_proto_version(ssl, sc->protocols.min) ||
        !SSL_set_max_proto_version(ssl, sc->protocols.max) ||
        (strcmp(cur->ciphers, sc->ciphers) != 0 &&
         !SSL_set_cipher_list(ssl, sc->ciphers)) ||
        (strcmp(cur->groups, sc->groups) != 0 &&
         !SSL_set1_groups_list(ssl, sc->groups))) {
        *al = SSL_AD_INTERNAL_ERROR;
        return SSL_CLIENT_HELLO_ERROR;
    }
    SSL_clear_options(ssl,
                      SSL_get_options(ssl) & ~SSL_CTX_get_options(sc->ctx));
    SSL_set_options(ssl, SSL_CTX_get_options(sc->ctx));
    SSL_set_verify(ssl, SSL_CTX_get_verify_mode(sc->ctx),
                   SSL_CTX_get_verify_callback(sc->ctx));
    return SSL_CLIENT_HELLO_SUCCESS;
}

/* HTTP/1.1 is all fastd speaks: say so when the client offers it. */
static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned inlen, void *arg)
{
    /* the server's preference: h2 where the address speaks it */
    static const unsigned char h2h1[] = "\x02h2\x08http/1.1";
    const fd_listening_t *ls = SSL_get_ex_data(ssl, ex_listening);
    const unsigned char *ours = h2h1 + 3;
    unsigned ourlen = sizeof(h2h1) - 4;
    unsigned char *sel;

    (void)arg;
    /* tls-alpn-01 (RFC 8737): the provider answers with the challenge's
     * certificate */
    if (fd_ssl_provider_alpn(ssl, out, outlen, in, inlen))
        return SSL_TLSEXT_ERR_OK;
    if (ls && ls->http2) {
        ours = h2h1;
        ourlen = sizeof(h2h1) - 1;
    }
    if (SSL_select_next_proto(&sel, outlen, ours, ourlen, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* The response of the server SNI chose; OpenSSL frees what it is given. */
static int status_cb(SSL *ssl, void *arg)
{
    ssl_conf_t *sc = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    unsigned char *copy;

    (void)arg;
    if (sc == NULL || sc->ocsp == NULL)
        return SSL_TLSEXT_ERR_NOACK;
    copy = OPENSSL_memdup(sc->ocsp, sc->ocsp_len);
    if (copy == NULL)
        return SSL_TLSEXT_ERR_NOACK;
    if (!SSL_set_tlsext_status_ocsp_resp(ssl, copy, (long)sc->ocsp_len)) {
        OPENSSL_free(copy);
        return SSL_TLSEXT_ERR_NOACK;
    }
    return SSL_TLSEXT_ERR_OK;
}

/* ssl_verify_client = optional: ask, accept whatever comes; the result is
 * $ssl_client_verify's */
static int verify_optional(int ok, X509_STORE_CTX *x)
{
    (void)ok;
    (void)x;
    return 1;
}

/* OpenSSL's own verdict. Set rather than left NULL: SSL_set_verify() with
 * a NULL callback keeps the SSL's, and SNI may come from an optional
 * server to one that requires a certificate. */
static int verify_strict(int ok, X509_STORE_CTX *x)
{
    (void)x;
    return ok;
}

static int load_ocsp(fd_cycle_t *cycle, ssl_conf_t *sc, char *err,
                     size_t errlen)
{
    const fd_ssl_path_t *p = &sc->stapling.items[0];
    const unsigned char *q;
    OCSP_RESPONSE *resp;
    FILE *fp = fopen(p->path, "rb");
    size_t n;

    if (fp == NULL)
        return ssl_conf_error(err, errlen, p->file, p->line,
                              "ssl_stapling_file \"%s\": %s", p->path,
                              strerror(errno));
    sc->ocsp = fd_palloc(cycle->pool, OCSP_MAX);
    n = sc->ocsp ? fread(sc->ocsp, 1, OCSP_MAX, fp) : 0;
    fclose(fp);
    if (sc->ocsp == NULL)
        return ssl_conf_error(err, errlen, p->file, p->line,
                              "out of memory");
    if (n == OCSP_MAX)
        return ssl_conf_error(err, errlen, p->file, p->line,
                              "ssl_stapling_file \"%s\": over %d bytes",
                              p->path, OCSP_MAX);
    q = sc->ocsp;
    resp = d2i_OCSP_RESPONSE(NULL, &q, (long)n);
    if (resp == NULL || q != sc->ocsp + n) {
        OCSP_RESPONSE_free(resp);
        return ssl_conf_error(err, errlen, p->file, p->line,
                              "ssl_stapling_file \"%s\" is not a DER OCSP "
                              "response", p->path);
    }
    OCSP_RESPONSE_free(resp);
    sc->ocsp_len = n;
    return FD_OK;
}

/*
 * The session id context: a session resumes only on the server it was
 * made for (another server may verify clients, or not). From what names
 * the server and what it serves, so it is the same in every worker and
 * after a reload of the same configuration. QUIC's ticket keys are
 * derived from it too (fd_quic_tls.c).
 */
int fd_ssl_server_id(const fd_http_server_t *srv,
                     unsigned char id[FD_SSL_SERVER_ID_LEN])
{
    const ssl_conf_t *sc = srv->ssl;
    unsigned mdlen, i;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    int ok = m && EVP_DigestInit_ex(m, EVP_sha256(), NULL);

    for (i = 0; ok && i < srv->names.n; i++)
        ok = EVP_DigestUpdate(m, srv->names.items[i],
                              strlen(srv->names.items[i]) + 1);
    for (i = 0; ok && i < sc->certs.n; i++)
        ok = EVP_DigestUpdate(m, sc->certs.items[i].path,
                              strlen(sc->certs.items[i].path) + 1);
    ok = ok && EVP_DigestUpdate(m, &sc->verify, sizeof(sc->verify));
    for (i = 0; ok && i < sc->client_ca.n; i++)
        ok = EVP_DigestUpdate(m, sc->client_ca.items[i].path,
                              strlen(sc->client_ca.items[i].path));
    ok = ok && EVP_DigestFinal_ex(m, id, &mdlen);
    EVP_MD_CTX_free(m);
    return ok;
}

static int set_sid_ctx(SSL_CTX *ctx, const fd_http_server_t *srv)
{
    unsigned char id[FD_SSL_SERVER_ID_LEN];

    return fd_ssl_server_id(srv, id) &&
           SSL_CTX_set_session_id_context(ctx, id, sizeof(id));
}

/* A file that cannot be read: say why (OpenSSL would say "system lib"). */
static int unreadable(const fd_ssl_path_t *p, char *err, size_t errlen)
{
    if (access(p->path, R_OK) == 0)
        return 0;
    snprintf(err, errlen, "%s:%d: %s \"%s\": %s", p->file, p->line, p->key,
             p->path, strerror(errno));
    return 1;
}

/* Kernel TLS needs the tls ULP ("modprobe tls") */
static int ktls_available(void)
{
    char buf[256];
    FILE *fp = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");
    char *tok, *save;
    int found = 0;

    if (fp == NULL)
        return 0;
    if (fgets(buf, sizeof(buf), fp))
        for (tok = strtok_r(buf, " \n", &save); tok && !found;
             tok = strtok_r(NULL, " \n", &save))
            found = strcmp(tok, "tls") == 0;
    fclose(fp);
    return found;
}

int fd_ssl_ctx_setup(SSL_CTX *ctx, const fd_ssl_protocols_t *p,
                     const char *ciphers)
{
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS |
                              SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* a record and what follows it in one recv(), not its header first */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (!SSL_CTX_set_min_proto_version(ctx, p->min) ||
        !SSL_CTX_set_max_proto_version(ctx, p->max) ||
        !SSL_CTX_set_cipher_list(ctx, ciphers))
        return FD_ERROR;
    return FD_OK;
}

static int ctx_build(fd_cycle_t *cycle, fd_http_server_t *srv,
                     const fd_listening_t *ls, char *err, size_t errlen);

/*
 * ssl_certificate = SCHEME:NAME (acme:NAME): the context is built as for
 * files, with no certificate of its own; the module that provides SCHEME
 * gives it the current one and a cert callback that takes a newer one at
 * a handshake (fd_ssl_provider.c).
 */
static int provider_build(fd_cycle_t *cycle, fd_http_server_t *srv,
                          const fd_listening_t *ls, char *err, size_t errlen)
{
    ssl_conf_t *sc = srv->ssl;
    fd_ssl_path_t *c = &sc->certs.items[0];

    if (sc->certs.n != 1 || sc->keys.n != 0)
        return ssl_conf_error(err, errlen, c->file, c->line,
                              "ssl_certificate \"%s\" is the server's only "
                              "certificate, with no ssl_certificate_key",
                              c->path);
    sc->certs.n = 0; /* ctx_build loads no file */
    if (ctx_build(cycle, srv, ls, err, errlen) != FD_OK) {
        sc->certs.n = 1;
        return FD_ERROR;
    }
    sc->certs.n = 1;
    return fd_ssl_provider_attach(cycle, sc->ctx, srv, c, err, errlen);
}

static int ctx_build(fd_cycle_t *cycle, fd_http_server_t *srv,
                     const fd_listening_t *ls, char *err, size_t errlen)
{
    ssl_conf_t *sc = srv->ssl;
    SSL_CTX *ctx;
    uint64_t opts;
    unsigned i;

    /* provider_build() comes here with certs.n = 0 on purpose */
    if (sc->certs.n == 0 &&
        !(sc->certs.items && fd_ssl_provider_path(sc->certs.items[0].path)))
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "[server] listens on %s ssl but has no "
                              "ssl_certificate", ls->text);
    if (sc->certs.n && fd_ssl_provider_path(sc->certs.items[0].path))
        return provider_build(cycle, srv, ls, err, errlen);
    if (sc->keys.n != sc->certs.n) {
        const ssl_paths_t *more = sc->keys.n > sc->certs.n ? &sc->keys
                                                            : &sc->certs;
        const fd_ssl_path_t *p = &more->items[fd_min(sc->keys.n,
                                                  sc->certs.n)];
        return ssl_conf_error(err, errlen, p->file, p->line,
                              "%s \"%s\" has no %s to pair with (one "
                              "ssl_certificate_key per ssl_certificate, "
                              "in order)", more == &sc->keys
                                               ? "ssl_certificate_key"
                                               : "ssl_certificate",
                              p->path, more == &sc->keys
                                           ? "ssl_certificate"
                                           : "ssl_certificate_key");
    }
    if (sc->verify != VERIFY_OFF && sc->client_ca.n == 0)
        return ssl_conf_error(err, errlen, sc->verify_file, sc->verify_line,
                              "ssl_verify_client needs "
                              "ssl_client_certificate");

    ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "SSL_CTX_new() failed");
    sc->ctx = ctx; /* freed with the cycle from now on */
    if (!SSL_CTX_set_app_data(ctx, sc))
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "SSL_CTX_set_app_data() failed");

    opts = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
           SSL_OP_IGNORE_UNEXPECTED_EOF;
    if (sc->prefer_server_ciphers)
        opts |= SSL_OP_CIPHER_SERVER_PREFERENCE;
    if (!sc->session_tickets)
        opts |= SSL_OP_NO_TICKET;
    sc->ktls_on = 0;
    if (sc->ktls) {
        if (ktls_available()) {
            opts |= SSL_OP_ENABLE_KTLS;
            sc->ktls_on = 1;
        } else {
            fd_log_error(FD_LOG_WARN, 0, "%s:%d: ssl_ktls: the kernel offers "
                         "no tls ULP (/proc/sys/net/ipv4/"
                         "tcp_available_ulp): files are read and encrypted",
                         srv->file, srv->line);
        }
    }
    SSL_CTX_set_options(ctx, opts);
    if (fd_ssl_ctx_setup(ctx, &sc->protocols, sc->ciphers) != FD_OK)
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "ssl_protocols or ssl_ciphers rejected");
    if (!SSL_CTX_set1_groups_list(ctx, sc->groups))
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "ssl_ecdh_curve \"%s\" rejected", sc->groups);

    for (i = 0; i < sc->certs.n; i++) {
        const fd_ssl_path_t *c = &sc->certs.items[i], *k = &sc->keys.items[i];

        if (unreadable(c, err, errlen) || unreadable(k, err, errlen))
            return FD_ERROR;
        if (!SSL_CTX_use_certificate_chain_file(ctx, c->path))
            return ssl_conf_error(err, errlen, c->file, c->line,
                                  "ssl_certificate \"%s\" cannot be "
                                  "loaded", c->path);
        if (!SSL_CTX_use_PrivateKey_file(ctx, k->path, SSL_FILETYPE_PEM) ||
            !SSL_CTX_check_private_key(ctx))
            return ssl_conf_error(err, errlen, k->file, k->line,
                                  "ssl_certificate_key \"%s\" cannot be "
                                  "loaded or does not match "
                                  "ssl_certificate \"%s\" (%s:%d)", k->path,
                                  c->path, c->file, c->line);
    }

    /* one TLS 1.3 ticket per full handshake, not OpenSSL's two: the
     * second serves a client that opens a parallel connection before its
     * first resumes, and costs every handshake an encryption and a record */
    SSL_CTX_set_num_tickets(ctx, 1);
    SSL_CTX_set_timeout(ctx, (long)(sc->session_timeout / 1000));
    if (sc->session_cache) {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        SSL_CTX_sess_set_cache_size(ctx, sc->session_cache);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    }
    if (sc->session_tickets &&
        !SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, fd_ssl_ticket_cb))
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "SSL_CTX_set_tlsext_ticket_key_evp_cb() "
                              "failed");
    if (!set_sid_ctx(ctx, srv))
        return ssl_conf_error(err, errlen, srv->file, srv->line,
                              "SSL_CTX_set_session_id_context() failed");
    SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, NULL);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, NULL);

    if (sc->stapling.n) {
        if (load_ocsp(cycle, sc, err, errlen) != FD_OK)
            return FD_ERROR;
        SSL_CTX_set_tlsext_status_cb(ctx, status_cb);
    }
    if (sc->client_ca.n) {
        const fd_ssl_path_t *p = &sc->client_ca.items[0];
        STACK_OF(X509_NAME) *names;

        if (unreadable(p, err, errlen))
            return FD_ERROR;
        if (!SSL_CTX_load_verify_locations(ctx, p->path, NULL) ||
            (names = SSL_load_client_CA_file(p->path)) == NULL)
            return ssl_conf_error(err, errlen, p->file, p->line,
                                  "ssl_client_certificate \"%s\" cannot be "
                                  "loaded", p->path);
        SSL_CTX_set_client_CA_list(ctx, names);
    }
    SSL_CTX_set_verify(ctx,
                       sc->verify == VERIFY_ON
                           ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                       : sc->verify == VERIFY_OPTIONAL ? SSL_VERIFY_PEER
                                                       : SSL_VERIFY_NONE,
                       sc->verify == VERIFY_OPTIONAL ? verify_optional
                                                     : verify_strict);
    return FD_OK;
}

int fd_ssl_init_cycle(fd_cycle_t *cycle, char *err, size_t errlen)
{
    fd_listening_t *ls;
    unsigned i;

    if (ex_listening < 0) {
        ex_listening = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
        ex_server = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
        ex_pending = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
        if (ex_listening < 0 || ex_server < 0 || ex_pending < 0) {
            snprintf(err, errlen, "SSL_get_ex_new_index() failed");
            return FD_ERROR;
        }
    }
    if (fd_ssl_tickets_check(cycle, err, errlen) != FD_OK)
        return FD_ERROR;
    for (ls = cycle->listening; ls; ls = ls->next) {
        /* a quic address's servers are checked here too: the same
         * ssl_* keys, the same files (fd_quic_tls.c reads them again) */
        if (!ls->ssl && !ls->quic)
            continue;
        for (i = 0; i < ls->nservers; i++) {
            ssl_conf_t *sc = ls->servers[i]->ssl;
            if (sc->ctx == NULL &&
                ctx_build(cycle, ls->servers[i], ls, err, errlen) != FD_OK)
                return FD_ERROR;
        }
        ls->ssl_handshake_timeout =
            ((ssl_conf_t *)ls->servers[0]->ssl)->handshake_timeout;
    }
    return FD_OK;
}

unsigned fd_ssl_server_certs(const fd_http_server_t *srv, unsigned i,
                             const char **cert, const char **key)
{
    const ssl_conf_t *sc = srv->ssl;

    if (sc == NULL || i >= sc->certs.n || i >= sc->keys.n)
        return 0;
    *cert = sc->certs.items[i].path;
    *key = sc->keys.items[i].path;
    return sc->certs.n;
}

void fd_ssl_server_terms(const fd_http_server_t *srv, fd_ssl_terms_t *t)
{
    const ssl_conf_t *sc = srv->ssl;

    t->tls13 = sc->protocols.max >= TLS1_3_VERSION;
    t->verify = sc->verify == VERIFY_ON         ? FD_SSL_VERIFY_ON
                : sc->verify == VERIFY_OPTIONAL ? FD_SSL_VERIFY_OPTIONAL
                                                : FD_SSL_VERIFY_OFF;
    t->client_ca = sc->client_ca.n ? sc->client_ca.items[0].path : NULL;
    t->verify_file = sc->verify_file;
    t->verify_line = sc->verify_line;
    t->session_tickets = sc->session_tickets;
    t->session_timeout = sc->session_timeout;
}

void fd_ssl_free_cycle(fd_cycle_t *cycle)
{
    fd_http_server_t *srv;

    for (srv = cycle->servers; srv; srv = srv->next) {
        ssl_conf_t *sc = srv->ssl;
        if (sc && sc->ctx) {
            SSL_CTX_free(sc->ctx);
            sc->ctx = NULL;
        }
    }
}

/* --- counting --- */

const char *const fd_ssl_failure_names[FD_SSL_FAIL_N] = {
    [FD_SSL_FAIL_PROTOCOL] = "protocol",
    [FD_SSL_FAIL_CIPHER] = "no_shared_cipher",
    [FD_SSL_FAIL_CLIENT_CERT] = "client_certificate",
    [FD_SSL_FAIL_PLAIN_HTTP] = "plain_http",
    [FD_SSL_FAIL_CLOSED] = "closed",
    [FD_SSL_FAIL_TIMEOUT] = "timeout",
    [FD_SSL_FAIL_OTHER] = "other"};

static void count_failure(unsigned reason)
{
    if (fd_stats)
        fd_stats->ssl_failed[reason]++;
}

void fd_ssl_handshake_timeout(fd_stream_t *s)
{
    (void)s;
    count_failure(FD_SSL_FAIL_TIMEOUT);
}

static void count_handshake(SSL *ssl)
{
    if (fd_stats == NULL)
        return;
    if (SSL_session_reused(ssl))
        fd_stats->ssl_resumed++;
    if (SSL_version(ssl) == TLS1_3_VERSION)
        fd_stats->ssl_tls13++;
    else
        fd_stats->ssl_tls12++;
}

/* Why a handshake failed, from OpenSSL's error queue. */
static unsigned failure_reason(int sslerr)
{
    unsigned long e = ERR_peek_last_error();

    if (sslerr == SSL_ERROR_SYSCALL || sslerr == SSL_ERROR_ZERO_RETURN)
        return FD_SSL_FAIL_CLOSED;
    if (ERR_GET_LIB(e) != ERR_LIB_SSL)
        return FD_SSL_FAIL_OTHER;
    switch (ERR_GET_REASON(e)) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
        return FD_SSL_FAIL_PROTOCOL;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SHARED_GROUPS:
    case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
        return FD_SSL_FAIL_CIPHER;
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
        return FD_SSL_FAIL_CLIENT_CERT;
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
        return FD_SSL_FAIL_CLOSED;
    }
    return FD_SSL_FAIL_OTHER;
}

/* --- the transport --- */

static char scratch[SSL_SCRATCH]; /* the worker's: one loop, one user */

/*
 * OpenSSL's record buffers (about 17 KB, one to read and one to write
 * while a connection is busy) go back after each record: RELEASE_BUFFERS,
 * so that an idle connection holds none. glibc's path for a block that
 * large, a malloc() and a free() each way, was ~600 instructions a
 * request; a few freed ones wait here for the next record of any
 * connection (per thread: pool threads hash too). A block is kept only
 * when it is exactly of this class's size, so any block handed out from
 * here is at least as large as asked for.
 */
#define RECBUF_MIN 16384
#define RECBUF_SIZE (17 * 1024 + 512)
#define RECBUF_KEEP 8

static __thread void *recbuf[RECBUF_KEEP];
static __thread unsigned nrecbuf;
static size_t recbuf_usable;  /* malloc_usable_size() of such a block */

static void *ssl_malloc(size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    if (n >= RECBUF_MIN && n <= RECBUF_SIZE) {
        if (nrecbuf)
            return recbuf[--nrecbuf];
        n = RECBUF_SIZE;
    }
    return malloc(n);
}

static void *ssl_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    return realloc(p, n);
}

static void ssl_free(void *p, const char *file, int line)
{
    (void)file;
    (void)line;
    if (p && nrecbuf < RECBUF_KEEP && malloc_usable_size(p) == recbuf_usable) {
        recbuf[nrecbuf++] = p;
        return;
    }
    free(p);
}

void fd_ssl_mem_init(void)
{
    void *p = malloc(RECBUF_SIZE);

    if (p == NULL)
        return;
    recbuf_usable = malloc_usable_size(p);
    free(p);
    /* fails (and changes nothing) once OpenSSL has allocated */
    if (!CRYPTO_set_mem_functions(ssl_malloc, ssl_realloc, ssl_free))
        recbuf_usable = 0;
}

/*
 * A failed SSL call: FD_AGAIN with the flag the wait is for cleared,
 * 0 at the peer's end of stream (its close_notify, or a plain FIN:
 * SSL_OP_IGNORE_UNEXPECTED_EOF makes both a clean end, as for TCP), or
 * FD_ERROR. The error queue is left empty for the next call.
 */
static ssize_t tls_fail(fd_stream_t *s, int rc, const char *what)
{
    int e = SSL_get_error(s->tls, rc);
    unsigned long q;

    switch (e) {
    case SSL_ERROR_WANT_READ:
        s->readable = 0;
        return FD_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        fd_stream_wait_out(s);
        return FD_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        s->eof = 1;
        return 0;
    case SSL_ERROR_SYSCALL:
        if (errno != EPIPE && errno != ECONNRESET && errno != 0)
            fd_log_error(FD_LOG_INFO, errno, "%s failed", what);
        break;
    default:
        q = ERR_peek_last_error();
        fd_log_error(FD_LOG_INFO, 0, "%s failed (%s)", what,
                     ERR_reason_error_string(q) ? ERR_reason_error_string(q)
                                                : "OpenSSL error");
        break;
    }
    ERR_clear_error();
    s->error = 1;
    s->eof = 1;
    return FD_ERROR;
}

/*
 * Whether the socket is drained, seen from below OpenSSL: with read-ahead
 * its read BIO asks for its whole buffer, and a read that returns less
 * left nothing in the socket. Then, with no decrypted or buffered bytes
 * left either, the stream is not readable until the next event, and the
 * engine is spared the read that would only say EAGAIN (one syscall of
 * three per keep-alive request).
 */
static long rbio_cb(BIO *b, int oper, const char *argp, size_t len,
                    int argi, long argl, int ret, size_t *processed)
{
    fd_stream_t *s = (fd_stream_t *)BIO_get_callback_arg(b);

    (void)argp, (void)argi, (void)argl;
    if (oper == (BIO_CB_READ | BIO_CB_RETURN) && ret > 0 && s)
        s->drained = *processed < len;
    return ret;
}

/*
 * A server connection's read BIO: recv() on the stream's socket, nothing
 * else, and the drained mark rbio_cb makes for a socket BIO. OpenSSL's
 * socket BIO with rbio_cb above cost a callback on each
 * side of every read and control call (eight controls a request, most of
 * them OpenSSL asking whether kernel TLS is on); this one marks the
 * stream drained itself and answers controls with a switch. (Kernel TLS
 * needs the socket BIO, and so do upstream connections, set up by
 * SSL_set_fd: they keep rbio_cb.)
 */
static BIO_METHOD *sbio_method;
static int sbio_type;

static int sbio_read(BIO *b, char *buf, size_t len, size_t *got)
{
    fd_stream_t *s = BIO_get_data(b);
    ssize_t n;

    BIO_clear_retry_flags(b);
    /* io_uring: the ring received them (fd_uring.c), as for plain TCP */
    n = fd_event_uring ? fd_uring_recv(s, buf, len)
                       : recv(s->ev.fd, buf, len, 0);
    if (n > 0) {
        s->drained = (size_t)n < len;
        *got = (size_t)n;
        return 1;
    }
    *got = 0;
    if (n == 0)
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
    else if (errno == EAGAIN || errno == EINTR)
        BIO_set_retry_read(b);
    return 0;
}

static long sbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_C_GET_FD: {
        fd_stream_t *s = BIO_get_data(b);
        if (ptr)
            *(int *)ptr = s ? s->ev.fd : -1;
        return s ? s->ev.fd : -1;
    }
    default:
        return 0;
    }
}

static int sbio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

/* A source/sink BIO method of fastd's (made once): NULL on failure */
static BIO_METHOD *bio_method(int *type, const char *name,
                              int (*rd)(BIO *, char *, size_t, size_t *),
                              int (*wr)(BIO *, const char *, size_t, size_t *),
                              long (*ctrl)(BIO *, int, long, void *),
                              int (*create)(BIO *), int (*destroy)(BIO *))
{
    int t = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK;
    BIO_METHOD *m = t > 0 ? BIO_meth_new(t, name) : NULL;

    if (m == NULL || (rd && !BIO_meth_set_read_ex(m, rd)) ||
        (wr && !BIO_meth_set_write_ex(m, wr)) ||
        !BIO_meth_set_ctrl(m, ctrl) || !BIO_meth_set_create(m, create) ||
        (destroy && !BIO_meth_set_destroy(m, destroy))) {
        BIO_meth_free(m);
        return NULL;
    }
    *type = t;
    return m;
}

static BIO *sbio_new(fd_stream_t *s)
{
    BIO *b;

    if (sbio_method == NULL &&
        (sbio_method = bio_method(&sbio_type, "fastd stream", sbio_read,
                                  NULL, sbio_ctrl, sbio_create, NULL)) ==
            NULL)
        return NULL;
    if ((b = BIO_new(sbio_method)) != NULL)
        BIO_set_data(b, s);
    return b;
}

/*
 * The wire queue's BIO (see "The wire queue" below): OpenSSL's records
 * appended to a buffer of fastd's, sent from there by wire_flush(). It
 * replaces a memory BIO, whose every write, size query and reset was a
 * BIO call (a few hundred instructions a request).
 */
typedef struct {
    char *buf;
    size_t off, len, cap;      /* [off, len) is not sent yet */
    fd_sendop_t op;            /* [off, len) in the turn's batched sends */
    fd_stream_t *s;            /* whose (the batched send's handler) */
} wire_t;

static int wire_batch(wire_t *w);
static int wire_flush_how(fd_stream_t *s, int batch);

static BIO_METHOD *wbio_method;
static int wbio_type;

static int wbio_write(BIO *b, const char *p, size_t n, size_t *done)
{
    wire_t *w = BIO_get_data(b);
    int batched = 0;

    *done = 0;
    if (w->len + n > w->cap) {
        /* a batched send points into the buffer, which moves now: it
         * leaves the batch and joins it again (it is submitted at the end
         * of the turn, not before) */
        if (w->op.slot) {
            fd_sendq_cancel(&w->op);
            batched = 1;
        }
        size_t cap = w->cap ? w->cap : WIRE_IDLE_MAX;
        char *nb;
        if (w->off) { /* what was sent goes from the front first */
            memmove(w->buf, w->buf + w->off, w->len - w->off);
            w->len -= w->off;
            w->off = 0;
        }
        while (cap < w->len + n)
            cap *= 2;
        if (cap > w->cap) {
            if ((nb = realloc(w->buf, cap)) == NULL) {
                if (batched)
                    (void)wire_batch(w);
                return 0;
            }
            w->buf = nb;
            w->cap = cap;
        }
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
    *done = n;
    if (w->op.slot) /* in place: it takes these bytes too */
        w->op.iov[0].iov_len = w->len - w->off;
    else if (batched && wire_batch(w) != FD_OK)
        (void)wire_flush_how(w->s, 0); /* the batch is full: now */
    return 1;
}

static long wbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    wire_t *w = BIO_get_data(b);

    (void)num;
    (void)ptr;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_PENDING:
    case BIO_CTRL_WPENDING:
        return (long)(w->len - w->off);
    default:
        return 0;
    }
}

static int wbio_create(BIO *b)
{
    wire_t *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return 0;
    BIO_set_data(b, w);
    BIO_set_init(b, 1);
    return 1;
}

static int wbio_destroy(BIO *b)
{
    wire_t *w = BIO_get_data(b);

    if (w) {
        fd_sendq_cancel(&w->op); /* its bytes go with the connection */
        free(w->buf);
        free(w);
        BIO_set_data(b, NULL);
    }
    return 1;
}

static BIO *wbio_new(void)
{
    if (wbio_method == NULL &&
        (wbio_method = bio_method(&wbio_type, "fastd wire", NULL, wbio_write,
                                  wbio_ctrl, wbio_create, wbio_destroy)) ==
            NULL)
        return NULL;
    return BIO_new(wbio_method);
}

/* the wire queue of ssl, or NULL (kernel TLS: the socket is the wire) */
static wire_t *wire_of(SSL *ssl)
{
    BIO *b = SSL_get_wbio(ssl);

    return b && wbio_method && BIO_method_type(b) == wbio_type
               ? BIO_get_data(b)
               : NULL;
}

/* the stream its read BIO belongs to (after a move, or a bind) */
static void rbio_set_stream(SSL *ssl, fd_stream_t *s)
{
    BIO *b = SSL_get_rbio(ssl);

    if (b == NULL)
        return;
    if (sbio_method && BIO_method_type(b) == sbio_type) {
        BIO_set_data(b, s);
        return;
    }
    BIO_set_callback_ex(b, rbio_cb);
    BIO_set_callback_arg(b, (char *)s);
}

static ssize_t tls_recv(fd_stream_t *s, char *buf, size_t size)
{
    wire_t *w = wire_of(s->tls);
    size_t unsent = w ? w->len - w->off : 0;
    int n;

    s->drained = 0;
    n = SSL_read(s->tls, buf, (int)fd_min(size, INT_MAX));
    /* records OpenSSL made inside the read (a no_renegotiation alert, a
     * TLS 1.3 KeyUpdate, a fatal alert) leave now: the engine flushes the
     * wire queue only when it writes, and an idle keep-alive connection
     * writes nothing until it closes. (What was queued before, the TLS
     * 1.3 session ticket, still waits for the first response.) */
    if (w && w->len - w->off > unsent && wire_flush_how(s, 1) == FD_ERROR) {
        ERR_clear_error();
        s->eof = 1;
        return FD_ERROR;
    }
    if (n <= 0)
        return tls_fail(s, n, "SSL_read()");
    if (s->drained && !SSL_has_pending(s->tls))
        s->readable = 0;
    return n;
}

/*
 * The wire queue. A server connection's records are written into a
 * buffer (the wire BIO above) and leave in one send() when the engine
 * flushes, or in the turn's batched sends (wire_sent below), not one
 * write() per record: the session ticket that ends a handshake goes with
 * the first response, and a response's records go together. (OpenSSL's
 * socket BIO writes each record, and each flight, as it makes it.)
 *
 * What the caller gave is taken when its bytes are encrypted; it is
 * reported sent (the return value) only when their records have left, so
 * the caller's queue holds the bytes until then, as with plain TCP. The
 * count in between is kept in the SSL (ex_pending): a retry, which passes
 * the same leading bytes again, only writes out the rest.
 */
static size_t plain_pending(SSL *ssl)
{
    return (size_t)(uintptr_t)SSL_get_ex_data(ssl, ex_pending);
}

static void plain_pending_set(SSL *ssl, size_t n)
{
    SSL_set_ex_data(ssl, ex_pending, (void *)(uintptr_t)n);
}

static int wire_queued(SSL *ssl)
{
    wire_t *w = wire_of(ssl);

    return w && w->len > w->off;
}

/*
 * [events] batch_sends: the wire queue's bytes go in the turn's batched
 * sends (one io_uring_enter for all of them, fd_sendq.h) instead of a
 * send() now. What they were encrypted from is reported sent only once
 * they have left, so the caller sees FD_AGAIN, and the stream goes on
 * when the send is done, as after a writable event (wire_sent).
 */
static void wire_sent(fd_sendop_t *op)
{
    wire_t *w = (wire_t *)((char *)op - offsetof(wire_t, op));
    fd_stream_t *s = w->s;

    w->off += fd_stream_batch_sent(s, op);
    if (w->off == w->len)
        w->off = w->len = 0;
    s->ev.handler(&s->ev, s->writable ? EPOLLOUT : 0);
}

static int wire_batch(wire_t *w)
{
    w->op.fd = w->s->ev.fd;
    w->op.niov = 1;
    w->op.iov[0].iov_base = w->buf + w->off;
    w->op.iov[0].iov_len = w->len - w->off;
    w->op.handler = wire_sent;
    return fd_sendq_add(&w->op);
}

/* Write out the wire queue: FD_OK when it is empty, FD_AGAIN, FD_ERROR.
 * batch: it may go in the turn's batched sends (FD_AGAIN then). */
static int wire_flush_how(fd_stream_t *s, int batch)
{
    wire_t *w = wire_of(s->tls);
    ssize_t k;

    if (w == NULL)
        return FD_OK;
    if (w->op.slot) {
        if (batch)
            return FD_AGAIN; /* it leaves at the end of the turn */
        fd_sendq_cancel(&w->op); /* now, ahead of what follows */
    }
    if (w->cap > WIRE_IDLE_MAX)
        s->tp_mark = 1; /* its buffer is that large now: tls_idle */
    if (batch && w->len > w->off && s->writable && !s->last_out &&
        fd_sendq_active()) {
        w->s = s;
        if (wire_batch(w) == FD_OK)
            return FD_AGAIN;
    }
    while (w->len > w->off) {
        size_t n = w->len - w->off;
        /* the last records before close_notify wait for it (MSG_MORE):
         * one segment, not two, ends the connection */
        k = send(s->ev.fd, w->buf + w->off, n,
                 MSG_NOSIGNAL | (s->last_out ? MSG_MORE : 0));
        if (k == (ssize_t)n)
            break;
        if (k > 0) { /* a part left (rare: a full socket) */
            w->off += (size_t)k;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN) {
            fd_stream_wait_out(s); /* io_uring: a poll says when */
            return FD_AGAIN;
        }
        if (errno != EPIPE && errno != ECONNRESET)
            fd_log_error(FD_LOG_INFO, errno, "send() failed");
        s->error = 1;
        return FD_ERROR;
    }
    w->off = w->len = 0;
    return FD_OK;
}

static int wire_flush(fd_stream_t *s)
{
    return wire_flush_how(s, 0);
}

static ssize_t tls_write(fd_stream_t *s, const void *p, size_t n)
{
    size_t done = plain_pending(s->tls);
    int rc;

    if (n == 0 && done == 0)
        return 0;
    if (done == 0) {
        rc = SSL_write(s->tls, p, (int)fd_min(n, INT_MAX));
        if (rc <= 0) {
            rc = (int)tls_fail(s, rc, "SSL_write()");
            if (rc == 0) { /* the peer closed its side while we write */
                s->error = 1;
                return FD_ERROR;
            }
            return rc;
        }
        done = (size_t)rc;
    }
    rc = wire_flush_how(s, 1);
    if (rc == FD_OK) {
        plain_pending_set(s->tls, 0);
        return (ssize_t)done;
    }
    plain_pending_set(s->tls, done);
    return rc;
}

/*
 * Several pieces go as one record from the scratch buffer (pipelined
 * responses leave in one SSL_write). A retry after FD_AGAIN sees the same
 * leading bytes (the queue's head stays until bytes are reported sent), at
 * the same length or more: what SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER asks.
 * No MSG_MORE for it: the record goes into the wire queue whole anyway.
 */
static ssize_t tls_send(fd_stream_t *s, const struct iovec *iov, int niov,
                        int more)
{
    size_t n = 0, k;
    int i;

    (void)more;
    if (plain_pending(s->tls))
        return tls_write(s, NULL, 0); /* its records wait to leave */
    if (niov == 1 || iov[0].iov_len >= SSL_SCRATCH)
        return tls_write(s, iov[0].iov_base, iov[0].iov_len);
    for (i = 0; i < niov && n < SSL_SCRATCH; i++) {
        k = fd_min(iov[i].iov_len, SSL_SCRATCH - n);
        memcpy(scratch + n, iov[i].iov_base, k);
        n += k;
    }
    return tls_write(s, scratch, n);
}

/* No kernel TLS here: read a record's worth and encrypt it. */
static ssize_t tls_sendfile(fd_stream_t *s, int fd, off_t off, size_t len)
{
    ssize_t n;

    if (plain_pending(s->tls))
        return tls_write(s, NULL, 0); /* its records wait to leave */
    if (BIO_get_ktls_send(SSL_get_wbio(s->tls))) {
        /* ssl_ktls: the kernel encrypts, the file never enters here */
        ossl_ssize_t k = SSL_sendfile(s->tls, fd, off,
                                      fd_min(len, (size_t)1 << 20), 0);
        return k > 0 ? (ssize_t)k : tls_fail(s, (int)k, "SSL_sendfile()");
    }
    n = pread(fd, scratch, fd_min(len, SSL_SCRATCH), off);

    if (n <= 0) {
        if (n < 0)
            fd_log_error(FD_LOG_ERR, errno, "pread() failed");
        else
            fd_log_error(FD_LOG_ERR, 0, "file shrank while sent");
        s->error = 1;
        return FD_ERROR;
    }
    return tls_write(s, scratch, (size_t)n);
}

static int tls_handshake(fd_stream_t *s)
{
    SSL *ssl = s->tls;
    unsigned reason;
    unsigned long q;
    int rc, e;

    if (wire_queued(ssl)) {
        /* the last flight did not all leave: the rest first */
        int f = wire_flush(s);
        if (f != FD_OK)
            return f;
    }
    if (SSL_in_before(ssl)) {
        /* a TLS connection starts with a handshake record (22); a
         * letter is an HTTP request sent to the wrong port */
        unsigned char c;
        ssize_t n = fd_event_uring ? fd_uring_peek(s, (char *)&c, 1)
                                   : recv(s->ev.fd, &c, 1, MSG_PEEK);

        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            s->readable = 0;
            return FD_AGAIN;
        }
        if (n <= 0) {
            count_failure(FD_SSL_FAIL_CLOSED);
            s->error = 1;
            s->eof = 1;
            return FD_ERROR;
        }
        if (c != 0x16 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
            count_failure(FD_SSL_FAIL_PLAIN_HTTP);
            SSL_free(ssl);
            s->tls = NULL;
            s->tp = &fd_transport_tcp;
            return FD_DECLINED;
        }
    }
    rc = SSL_do_handshake(ssl);
    if (rc == 1) {
        /* TLS 1.3: what is queued now is the session ticket, and it
         * leaves with the first response; TLS 1.2: the server's Finished,
         * which the client waits for */
        if (SSL_version(ssl) != TLS1_3_VERSION) {
            int f = wire_flush(s);
            if (f != FD_OK)
                return f; /* the next call flushes and finds it done */
        }
        count_handshake(ssl);
        return FD_OK;
    }
    e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ) {
        /* the flight the client waits for leaves now */
        int f = wire_flush(s);
        if (f == FD_ERROR) {
            count_failure(FD_SSL_FAIL_CLOSED);
            s->eof = 1;
            return FD_ERROR;
        }
        s->readable = 0;
        return FD_AGAIN;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        fd_stream_wait_out(s);
        return FD_AGAIN;
    }
    reason = failure_reason(e);
    count_failure(reason);
    q = ERR_peek_last_error();
    if (reason != FD_SSL_FAIL_CLOSED)
        fd_log_error(FD_LOG_INFO, 0, "SSL_do_handshake() failed (%s)",
                     ERR_reason_error_string(q) ? ERR_reason_error_string(q)
                                                : "OpenSSL error");
    ERR_clear_error();
    /* the fatal alert that says why (handshake_failure, protocol_version,
     * certificate_required) is in the wire queue: the client gets it,
     * not a bare close (best effort, as close_notify) */
    if (reason != FD_SSL_FAIL_CLOSED)
        (void)wire_flush(s);
    s->error = 1;
    s->eof = 1;
    return FD_ERROR;
}

static void tls_close(fd_stream_t *s)
{
    SSL *ssl = s->tls;

    if (ssl == NULL)
        return;
    /* close_notify once, without waiting for the peer's; it pushes what
     * MSG_MORE held */
    s->last_out = 0;
    if (SSL_is_init_finished(ssl) && !s->error) {
        SSL_shutdown(ssl);
        ERR_clear_error();
        (void)wire_flush(s); /* best effort, as the socket BIO's was */
    }
    SSL_free(ssl);
    s->tls = NULL;
}

/* A half-close: close_notify now, out of the wire queue before the FIN
 * (best effort: the socket took the last bytes just before); OpenSSL
 * reads on after it (what the peer still sends, up to its own). */
static void tls_shutdown(fd_stream_t *s)
{
    if (s->tls && SSL_is_init_finished(s->tls) && !s->error) {
        SSL_shutdown(s->tls);
        ERR_clear_error();
        (void)wire_flush(s);
    }
}

/* The read BIO marks the stream it belongs to (sbio_read, rbio_cb). */
static void tls_move(fd_stream_t *s)
{
    wire_t *w;

    if (s->tls == NULL)
        return;
    rbio_set_stream(s->tls, s);
    if ((w = wire_of(s->tls)) != NULL)
        w->s = s;
}

/* RELEASE_BUFFERS has given the record buffers back already (the write
 * one always: its records go into the wire BIO at once), so only the wire
 * BIO's buffer is left; SSL_free_buffers() here freed nothing and cost
 * 600 instructions a request (OpenSSL 3.0 walks every pipeline). */
static void tls_idle(fd_stream_t *s)
{
    wire_t *w;

    if (s->tls == NULL || !s->tp_mark)
        return;
    /* an emptied wire queue keeps its buffer: one that a large response
     * or a handshake grew past WIRE_IDLE_MAX (tp_mark) is freed; a small
     * one stays (a malloc and a free a request) */
    w = wire_of(s->tls);
    if (w && w->len == w->off) {
        free(w->buf);
        w->buf = NULL;
        w->off = w->len = w->cap = 0;
        s->tp_mark = 0;
    }
}

/* Server and client sides differ only in their handshake (the client's
 * is fd_ssl_client.c's). */
#define TLS_TRANSPORT(hs, ring)                                              \
    {                                                                        \
        .name = "tls", .recv = tls_recv, .send = tls_send,                   \
        .sendfile = tls_sendfile, .handshake = (hs), .close = tls_close,     \
        .idle = tls_idle, .shutdown = tls_shutdown, .move = tls_move,        \
        .short_read_drains = 0, .ring_rx = (ring),                           \
    }

/* a client connection's (fastd's read BIO), one with kernel TLS (the
 * socket BIO), an upstream connection's (SSL_set_fd) */
const fd_transport_t fd_transport_tls = TLS_TRANSPORT(tls_handshake, 1);
static const fd_transport_t tls_ktls = TLS_TRANSPORT(tls_handshake, 0);
const fd_transport_t fd_transport_tls_client =
    TLS_TRANSPORT(fd_ssl_client_handshake, 0);

void fd_ssl_stream_bind(fd_stream_t *s, SSL *ssl, const fd_transport_t *tp)
{
    rbio_set_stream(ssl, s);
    s->tls = ssl;
    s->tp = tp;
    s->et = 1;
    /* OpenSSL reads the socket itself: not the io_uring's receive */
    if (fd_event_uring && !tp->ring_rx)
        fd_uring_unring(&s->ev);
}

int fd_ssl_accept(fd_stream_t *s, fd_listening_t *ls)
{
    ssl_conf_t *sc = ls->servers[0]->ssl;
    SSL *ssl = SSL_new(sc->ctx);
    /* read from the socket, write into the wire queue (wire_flush); with
     * kernel TLS both are the socket, which the kernel then encrypts */
    BIO *rb = sc->ktls_on ? BIO_new_socket(s->ev.fd, BIO_NOCLOSE)
                          : sbio_new(s);
    BIO *wb = sc->ktls_on ? BIO_new_socket(s->ev.fd, BIO_NOCLOSE)
                          : wbio_new();

    if (ssl && rb && wb) {
        SSL_set_bio(ssl, rb, wb); /* the SSL owns them now */
        rb = wb = NULL;
    }
    BIO_free(rb);
    BIO_free(wb);
    if (ssl == NULL || SSL_get_wbio(ssl) == NULL ||
        !SSL_set_ex_data(ssl, ex_listening, ls)) {
        fd_log_error(FD_LOG_ALERT, 0, "SSL_new() or BIO_new() failed");
        ERR_clear_error();
        SSL_free(ssl);
        return FD_ERROR;
    }
    SSL_set_accept_state(ssl);
    fd_ssl_stream_bind(s, ssl, sc->ktls_on ? &tls_ktls : &fd_transport_tls);
    return FD_OK;
}

/* A server context of a module's own (a [stream] listen ... ssl): one
 * certificate chain and its key, TLS 1.2 and 1.3, tickets under the
 * shared keys; no SNI choice, no ALPN. */
void *fd_ssl_server_ctx(const char *cert, const char *key,
                        const fd_ssl_protocols_t *p, const char *ciphers,
                        char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    unsigned long e;

    if (ctx == NULL || fd_ssl_ctx_setup(ctx, p, ciphers) != FD_OK ||
        SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        e = ERR_peek_last_error();
        snprintf(err, errlen, "%s, %s: %s", cert, key,
                 ERR_reason_error_string(e) ? ERR_reason_error_string(e)
                                            : "OpenSSL error");
        ERR_clear_error();
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_num_tickets(ctx, 1);
    SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, fd_ssl_ticket_cb);
    return ctx;
}

void fd_ssl_server_ctx_free(void *ctx)
{
    SSL_CTX_free(ctx);
}

int fd_ssl_accept_ctx(fd_stream_t *s, void *ctx)
{
    SSL *ssl = SSL_new(ctx);
    BIO *rb = sbio_new(s), *wb = wbio_new();

    if (ssl && rb && wb) {
        SSL_set_bio(ssl, rb, wb); /* the SSL owns them now */
        rb = wb = NULL;
    }
    BIO_free(rb);
    BIO_free(wb);
    if (ssl == NULL || SSL_get_wbio(ssl) == NULL) {
        fd_log_error(FD_LOG_ALERT, 0, "SSL_new() or BIO_new() failed");
        ERR_clear_error();
        SSL_free(ssl);
        return FD_ERROR;
    }
    SSL_set_accept_state(ssl);
    fd_ssl_stream_bind(s, ssl, &fd_transport_tls);
    return FD_OK;
}

/* --- the connection's facts --- */

static fd_str_t cstr(const char *p)
{
    return p ? (fd_str_t){strlen(p), p} : fd_string("");
}

fd_http_server_t *fd_ssl_server(fd_stream_t *s)
{
    return s->tls ? SSL_get_ex_data(s->tls, ex_server) : NULL;
}

static int paths_eq(const ssl_paths_t *a, const ssl_paths_t *b)
{
    unsigned i;

    if (a->n != b->n)
        return 0;
    for (i = 0; i < a->n; i++)
        if (strcmp(a->items[i].path, b->items[i].path) != 0)
            return 0;
    return 1;
}

/*
 * What a handshake proved or enforced: the certificates the client
 * accepted, the protocols, ciphers and groups it was held to, and the
 * client verification. Not the session settings, stapling or kernel TLS:
 * they change how, not whether, a client may talk to the server.
 */
int fd_ssl_same_tls(const fd_http_server_t *a, const fd_http_server_t *b)
{
    const ssl_conf_t *x = a->ssl, *y = b->ssl;

    return a == b ||
           (paths_eq(&x->certs, &y->certs) && paths_eq(&x->keys, &y->keys) &&
            x->protocols.min == y->protocols.min &&
            x->protocols.max == y->protocols.max &&
            strcmp(x->ciphers, y->ciphers) == 0 &&
            strcmp(x->groups, y->groups) == 0 &&
            x->prefer_server_ciphers == y->prefer_server_ciphers &&
            x->verify == y->verify && paths_eq(&x->client_ca, &y->client_ca));
}

fd_str_t fd_ssl_protocol(fd_stream_t *s)
{
    return s->tls ? cstr(SSL_get_version(s->tls)) : fd_string("");
}

fd_str_t fd_ssl_cipher(fd_stream_t *s)
{
    return s->tls ? cstr(SSL_get_cipher_name(s->tls)) : fd_string("");
}

fd_str_t fd_ssl_server_name(fd_stream_t *s)
{
    return s->tls ? cstr(SSL_get_servername(s->tls,
                                            TLSEXT_NAMETYPE_host_name))
                  : fd_string("");
}

int fd_ssl_session_reused(fd_stream_t *s)
{
    return s->tls ? SSL_session_reused(s->tls) : 0;
}

fd_str_t fd_ssl_alpn(fd_stream_t *s)
{
    const unsigned char *p = NULL;
    unsigned len = 0;

    if (s->tls)
        SSL_get0_alpn_selected(s->tls, &p, &len);
    return p ? (fd_str_t){len, (const char *)p} : fd_null_string;
}

static fd_str_t pool_str(fd_pool_t *pool, const char *a, const char *b)
{
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    char *p = fd_pnalloc(pool, la + lb + 1);

    if (p == NULL)
        return fd_string("");
    memcpy(p, a, la);
    if (lb)
        memcpy(p + la, b, lb);
    p[la + lb] = '\0';
    return (fd_str_t){la + lb, p};
}

fd_str_t fd_ssl_client_verify(fd_stream_t *s, fd_pool_t *pool)
{
    long rc;

    if (s->tls == NULL || SSL_get0_peer_certificate(s->tls) == NULL)
        return fd_string("NONE");
    rc = SSL_get_verify_result(s->tls);
    if (rc == X509_V_OK)
        return fd_string("SUCCESS");
    return pool_str(pool, "FAILED:", X509_verify_cert_error_string(rc));
}

fd_str_t fd_ssl_client_s_dn(fd_stream_t *s, fd_pool_t *pool)
{
    X509 *x = s->tls ? SSL_get0_peer_certificate(s->tls) : NULL;
    BIO *b;
    char *p;
    long n;
    fd_str_t r = fd_string("");

    if (x == NULL || (b = BIO_new(BIO_s_mem())) == NULL)
        return r;
    if (X509_NAME_print_ex(b, X509_get_subject_name(x), 0,
                           XN_FLAG_RFC2253) >= 0 &&
        (n = BIO_get_mem_data(b, &p)) > 0) {
        char *d = fd_pnalloc(pool, (size_t)n);
        if (d) {
            memcpy(d, p, (size_t)n);
            r = (fd_str_t){(size_t)n, d};
        }
    }
    BIO_free(b);
    ERR_clear_error();
    return r;
}
