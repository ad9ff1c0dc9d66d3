/*
 * TLS to upstreams, the client side of fd_ssl.c: contexts shared by the
 * locations with the same settings, verification of the upstream's name
 * and certificate, session reuse per peer slot, and the connect under
 * fd_stream_t (through fd_transport_tls_client, whose I/O is the server
 * side's).
 */
#include <arpa/inet.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "fd_core.h"
#include "fd_ssl.h"
#include "fd_ssl_int.h"

/*
 * A client context and the settings it was built from: locations with the
 * same settings share it, so the system's CA store is loaded once, not per
 * location. Its clients are the names it connects to.
 */
typedef struct client_ctx_s client_ctx_t;
struct client_ctx_s {
    fd_ssl_client_conf_t conf;
    SSL_CTX *ctx;
    fd_ssl_client_t *clients;
    client_ctx_t *next;
};

struct fd_ssl_client_s {
    client_ctx_t *cc;
    char *name;
    unsigned sni:1;            /* a host name, and SNI is on */
    fd_ssl_client_t *next;
};

static client_ctx_t *client_ctxs; /* of the configuration being loaded */
static fd_pool_t *client_pool;

/* A peer's session slot (fd_ssl_connect's *session): the session and the
 * client it was made by. A resumed handshake does not verify again, so
 * only that client (its context, trust and name) may offer it. */
typedef struct {
    SSL_SESSION *sess;
    const fd_ssl_client_t *cl;
} client_session_t;

/* An upstream connection's own state: SSL ex_data, freed with the SSL. */
typedef struct {
    const fd_ssl_client_t *cl;
    void **slot;               /* NULL: session_reuse off */
    int sslerr;                /* the failed handshake's SSL_get_error() */
    int syserr;                /* errno then */
    unsigned long lib;         /* OpenSSL's error then */
} client_conn_t;

static int ex_client = -1;

static void client_conn_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad,
                             int idx, long argl, void *argp)
{
    (void)parent;
    (void)ad;
    (void)idx;
    (void)argl;
    (void)argp;
    OPENSSL_free(ptr);
}

static void client_ctx_free(void *data)
{
    SSL_CTX_free(data);
}

static void client_ctxs_reset(void *data)
{
    if (data == client_pool) {
        client_ctxs = NULL;
        client_pool = NULL;
    }
}

static int same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static int same_client_conf(const fd_ssl_client_conf_t *a,
                            const fd_ssl_client_conf_t *b)
{
    return a->verify == b->verify && a->server_name == b->server_name &&
           a->session_reuse == b->session_reuse &&
           a->alpn_h2 == b->alpn_h2 &&
           a->protocols.min == b->protocols.min &&
           a->protocols.max == b->protocols.max &&
           same_str(a->ciphers, b->ciphers) &&
           same_str(a->trusted.path, b->trusted.path) &&
           same_str(a->certificate.path, b->certificate.path) &&
           same_str(a->certificate_key.path, b->certificate_key.path);
}

/* A file of the configuration failed: its file:line and why. */
static void *client_error(fd_conf_t *cf, const fd_ssl_path_t *p,
                          const char *what)
{
    const char *why = ERR_reason_error_string(ERR_peek_last_error());

    ERR_clear_error();
    if (access(p->path, R_OK) != 0)
        why = strerror(errno);
    cf->file = p->file;
    cf->line = p->line;
    fd_conf_error(cf, "%s \"%s\" %s (%s)", p->key, p->path, what,
                  why ? why : "OpenSSL error");
    return NULL;
}

/*
 * OpenSSL has a session the peer can resume: a TLS 1.2 one at the end of
 * the handshake, a TLS 1.3 ticket whenever it comes after it (even while
 * the connection waits in the keep-alive pool). It goes into the slot,
 * which keeps the reference (1).
 */
static int client_new_session(SSL *ssl, SSL_SESSION *sess)
{
    client_conn_t *c = SSL_get_ex_data(ssl, ex_client);
    client_session_t *cs;

    if (c == NULL || c->slot == NULL)
        return 0;
    cs = *c->slot;
    if (cs == NULL) {
        cs = OPENSSL_zalloc(sizeof(*cs));
        if (cs == NULL)
            return 0;
        *c->slot = cs;
    }
    SSL_SESSION_free(cs->sess);
    cs->sess = sess;
    cs->cl = c->cl;
    return 1;
}

void fd_ssl_session_free(void **session)
{
    client_session_t *cs = *session;

    if (cs) {
        SSL_SESSION_free(cs->sess);
        OPENSSL_free(cs);
        *session = NULL;
    }
}

static SSL_CTX *client_ctx_build(fd_conf_t *cf,
                                 const fd_ssl_client_conf_t *conf)
{
    const fd_ssl_path_t *cert = &conf->certificate;
    const fd_ssl_path_t *key = &conf->certificate_key;
    SSL_CTX *ctx;

    if ((cert->path == NULL) != (key->path == NULL)) {
        const fd_ssl_path_t *p = cert->path ? cert : key;
        cf->file = p->file;
        cf->line = p->line;
        fd_conf_error(cf, "%s needs both a certificate and its key", p->key);
        return NULL;
    }
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL ||
        fd_pool_cleanup_add(cf->pool, client_ctx_free, ctx) == NULL) {
        SSL_CTX_free(ctx);
        ERR_clear_error();
        fd_conf_error(cf, "SSL_CTX_new() failed");
        return NULL;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    /* the modes too: the transport's send and idle are the server side's.
     * The groups stay OpenSSL's (no ssl_ecdh_curve here): a client sends
     * one key share, X25519's, so the longer list costs it nothing, and an
     * internal upstream may know only others (as proxy_ssl_ciphers keeps
     * DEFAULT) */
    if (fd_ssl_ctx_setup(ctx, &conf->protocols, conf->ciphers) != FD_OK) {
        ERR_clear_error();
        fd_conf_error(cf, "the TLS protocols or ciphers to upstreams are "
                      "rejected");
        return NULL;
    }
    if (conf->verify && conf->trusted.path &&
        !SSL_CTX_load_verify_locations(ctx, conf->trusted.path, NULL))
        return client_error(cf, &conf->trusted, "cannot be loaded");
    if (conf->verify && conf->trusted.path == NULL &&
        !SSL_CTX_set_default_verify_paths(ctx)) {
        ERR_clear_error();
        fd_conf_error(cf, "the system's CA certificates cannot be loaded");
        return NULL;
    }
    SSL_CTX_set_verify(ctx, conf->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
                       NULL);
    if (conf->alpn_h2 &&
        SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\2h2", 3) != 0) {
        ERR_clear_error();
        fd_conf_error(cf, "SSL_CTX_set_alpn_protos() failed");
        return NULL;
    }
    if (cert->path) {
        if (!SSL_CTX_use_certificate_chain_file(ctx, cert->path))
            return client_error(cf, cert, "cannot be loaded");
        if (!SSL_CTX_use_PrivateKey_file(ctx, key->path, SSL_FILETYPE_PEM) ||
            !SSL_CTX_check_private_key(ctx))
            return client_error(cf, key, "cannot be loaded or does not "
                                "match the certificate");
    }
    if (conf->session_reuse) {
        /* sessions go to the peers' slots, none to OpenSSL's cache */
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
                                                SSL_SESS_CACHE_NO_INTERNAL);
        SSL_CTX_sess_set_new_cb(ctx, client_new_session);
    } else {
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    }
    return ctx;
}

/* An IP address is checked against the certificate's, and is no SNI
 * name (RFC 6066 3). */
static int is_ip(const char *name)
{
    unsigned char a[16];

    return inet_pton(AF_INET, name, a) == 1 ||
           inet_pton(AF_INET6, name, a) == 1;
}

fd_ssl_client_t *fd_ssl_client(fd_conf_t *cf,
                               const fd_ssl_client_conf_t *conf,
                               const char *name)
{
    client_ctx_t *cc;
    fd_ssl_client_t *cl;

    if (*name == '\0') {
        /* SSL_set1_host("") would check no name at all */
        fd_conf_error(cf, "an empty name for the upstream's certificate");
        return NULL;
    }
    if (ex_client < 0) {
        ex_client = SSL_get_ex_new_index(0, NULL, NULL, NULL,
                                         client_conn_free);
        if (ex_client < 0) {
            fd_conf_error(cf, "SSL_get_ex_new_index() failed");
            return NULL;
        }
    }
    if (client_pool != cf->pool) {
        if (fd_pool_cleanup_add(cf->pool, client_ctxs_reset, cf->pool) ==
            NULL) {
            fd_conf_error(cf, "out of memory");
            return NULL;
        }
        client_ctxs = NULL;
        client_pool = cf->pool;
    }
    for (cc = client_ctxs; cc; cc = cc->next)
        if (same_client_conf(&cc->conf, conf))
            break;
    if (cc == NULL) {
        cc = fd_pcalloc(cf->pool, sizeof(*cc));
        if (cc == NULL) {
            fd_conf_error(cf, "out of memory");
            return NULL;
        }
        if ((cc->ctx = client_ctx_build(cf, conf)) == NULL)
            return NULL;
        cc->conf = *conf;
        cc->next = client_ctxs;
        client_ctxs = cc;
    }
    for (cl = cc->clients; cl; cl = cl->next)
        if (strcmp(cl->name, name) == 0)
            return cl;
    cl = fd_pcalloc(cf->pool, sizeof(*cl));
    if (cl == NULL ||
        (cl->name = fd_pstrdup(cf->pool, name, strlen(name))) == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    cl->cc = cc;
    cl->sni = conf->server_name && !is_ip(name);
    cl->next = cc->clients;
    cc->clients = cl;
    return cl;
}

int fd_ssl_client_handshake(fd_stream_t *s)
{
    SSL *ssl = s->tls;
    client_conn_t *c;
    int rc = SSL_do_handshake(ssl), e;

    if (rc == 1)
        return FD_OK;
    e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ) {
        s->readable = 0;
        return FD_AGAIN;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        fd_stream_wait_out(s);
        return FD_AGAIN;
    }
    c = SSL_get_ex_data(ssl, ex_client);
    c->sslerr = e;
    c->syserr = errno;
    c->lib = ERR_peek_last_error();
    ERR_clear_error();
    s->error = 1;
    s->eof = 1;
    return FD_ERROR;
}

const char *fd_ssl_connect_error(fd_stream_t *s)
{
    static char buf[160];
    client_conn_t *c = s->tls ? SSL_get_ex_data(s->tls, ex_client) : NULL;
    const char *why;
    long v;

    if (c == NULL)
        return "no TLS connection";
    if (c->sslerr == SSL_ERROR_SYSCALL)
        return c->syserr ? strerror(c->syserr)
                         : "the upstream closed the connection";
    if (c->sslerr == SSL_ERROR_ZERO_RETURN)
        return "the upstream closed the connection";
    if (ERR_GET_LIB(c->lib) == ERR_LIB_SSL &&
        ERR_GET_REASON(c->lib) == SSL_R_CERTIFICATE_VERIFY_FAILED &&
        (v = SSL_get_verify_result(s->tls)) != X509_V_OK) {
        snprintf(buf, sizeof(buf), "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
        return buf;
    }
    why = ERR_reason_error_string(c->lib);
    return why ? why : "OpenSSL error";
}

int fd_ssl_connect(fd_stream_t *s, fd_ssl_client_t *cl, void **session)
{
    const fd_ssl_client_conf_t *conf = &cl->cc->conf;
    client_session_t *cs = *session;
    SSL *ssl = SSL_new(cl->cc->ctx);
    client_conn_t *c = OPENSSL_zalloc(sizeof(*c));

    if (ssl == NULL || c == NULL)
        goto failed;
    c->cl = cl;
    if (conf->session_reuse)
        c->slot = session;
    if (!SSL_set_ex_data(ssl, ex_client, c))
        goto failed;
    c = NULL; /* freed with the SSL from here on */
    if (!SSL_set_fd(ssl, s->ev.fd) ||
        (cl->sni && !SSL_set_tlsext_host_name(ssl, cl->name)))
        goto failed;
    if (conf->verify) {
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (!SSL_set1_host(ssl, cl->name))
            goto failed;
    }
    if (conf->session_reuse && cs && cs->cl == cl &&
        SSL_SESSION_is_resumable(cs->sess) && !SSL_set_session(ssl, cs->sess))
        goto failed;
    SSL_set_connect_state(ssl);
    fd_ssl_stream_bind(s, ssl, &fd_transport_tls_client);
    return FD_OK;

failed:
    fd_log_error(FD_LOG_ALERT, 0, "TLS to upstream \"%s\": SSL_new() or "
                 "its settings failed", cl->name);
    ERR_clear_error();
    OPENSSL_free(c);
    SSL_free(ssl);
    return FD_ERROR;
}
