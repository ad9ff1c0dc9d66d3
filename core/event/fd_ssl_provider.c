/*
 * Certificates a module provides (fastd_tls.h): ssl_certificate =
 * SCHEME:NAME. The master gives the server's new context what the
 * provider has at load; a cert callback compares the provider's
 * generation at each full handshake (one call, an atomic load behind it)
 * and, when it moved, parses the new certificate once in this process and
 * puts it in the context and in this handshake. ALPN protocols a
 * provider answers itself (tls-alpn-01) are offered to it first.
 */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "fastd_tls.h"
#include "fd_core.h"
#include "fd_http.h"
#include "fd_module.h"
#include "fd_ssl.h"

#define PROVIDERS_MAX 4

static const fd_api_tls_provider_t *providers[PROVIDERS_MAX];

/* What a context serves: its provider's certificate and the generation
 * this process put in it. */
typedef struct {
    const fd_api_tls_provider_t *p;
    void *cert;
    uint64_t gen;
    int refuse;               /* none yet: handshakes fail */
    const char *what;         /* "acme:NAME" for the log */
} ctx_cert_t;

static int ctx_index = -1;

static const char scheme_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789_-";

int fd_ssl_provider_add(const fd_api_tls_provider_t *p, int check_only)
{
    unsigned i;

    for (i = 0; i < PROVIDERS_MAX && providers[i]; i++)
        if (strcmp(providers[i]->scheme, p->scheme) == 0)
            return FD_DECLINED;
    if (i == PROVIDERS_MAX || p->scheme == NULL || p->scheme[0] == '\0' ||
        p->scheme[strspn(p->scheme, scheme_chars)] != '\0' ||
        p->attach == NULL || p->generation == NULL || p->get == NULL)
        return FD_ERROR;
    if (!check_only)
        providers[i] = p;
    return FD_OK;
}

int fd_ssl_provider_path(const char *path)
{
    size_t n = strspn(path, scheme_chars);

    return n > 0 && path[n] == ':';
}

static const fd_api_tls_provider_t *provider_of(const char *path)
{
    size_t n = strcspn(path, ":");
    unsigned i;

    for (i = 0; i < PROVIDERS_MAX && providers[i]; i++)
        if (strlen(providers[i]->scheme) == n &&
            memcmp(providers[i]->scheme, path, n) == 0)
            return providers[i];
    return NULL;
}

/* The chain, then the key, of pem into ctx (and ssl, in a handshake) */
static int use_pem(SSL_CTX *ctx, SSL *ssl, const fd_api_tls_pem_t *pem,
                   int chain_too)
{
    STACK_OF(X509) *chain = sk_X509_new_null();
    BIO *b = NULL;
    X509 *x = NULL, *c;
    EVP_PKEY *pkey = NULL;
    int ok = 0;

    if (chain == NULL || pem->cert_len > INT_MAX || pem->key_len > INT_MAX ||
        (b = BIO_new_mem_buf(pem->pem, (int)pem->cert_len)) == NULL ||
        (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) == NULL)
        goto done;
    while (chain_too && (c = PEM_read_bio_X509(b, NULL, NULL, NULL)))
        if (!sk_X509_push(chain, c)) {
            X509_free(c);
            goto done;
        }
    ERR_clear_error();
    BIO_free(b);
    if ((b = BIO_new_mem_buf(pem->pem + pem->cert_len, (int)pem->key_len)) ==
            NULL ||
        (pkey = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL)) == NULL)
        goto done;
    ok = (ctx == NULL || SSL_CTX_use_cert_and_key(ctx, x, pkey, chain, 1)) &&
         (ssl == NULL || SSL_use_cert_and_key(ssl, x, pkey, chain, 1));
done:
    BIO_free(b);
    X509_free(x);
    EVP_PKEY_free(pkey);
    sk_X509_pop_free(chain, X509_free);
    ERR_clear_error();
    return ok ? FD_OK : FD_ERROR;
}

/* Take the provider's certificate into ctx (and ssl) if it is newer than
 * what ctx holds. */
static void refresh(SSL_CTX *ctx, SSL *ssl, ctx_cert_t *cc)
{
    fd_api_tls_pem_t pem;
    uint64_t gen = cc->gen;
    int rc;

    rc = cc->p->get(cc->cert, &pem, &gen);
    if (rc == FD_DECLINED) {
        cc->refuse = 1;
        cc->gen = gen;
        return;
    }
    if (rc != FD_OK) {
        cc->gen = gen;
        return;
    }
    if (use_pem(ctx, ssl, &pem, 1) != FD_OK) {
        fd_log_error(FD_LOG_ALERT, 0, "ssl_certificate \"%s\": generation "
                     "%llu cannot be parsed or does not match its key, "
                     "keeping the certificate served", cc->what,
                     (unsigned long long)gen);
        cc->gen = gen;
        return;
    }
    if (cc->gen != 0 || cc->refuse)
        fd_log_error(FD_LOG_INFO, 0, "ssl_certificate \"%s\": serving "
                     "generation %llu", cc->what, (unsigned long long)gen);
    cc->gen = gen;
    cc->refuse = 0;
}

/* Every full handshake: a newer certificate is taken here, for this
 * handshake and every one after; a connection keeps the one it got. */
static int cert_cb(SSL *ssl, void *arg)
{
    SSL_CTX *ctx = SSL_get_SSL_CTX(ssl);
    ctx_cert_t *cc = SSL_CTX_get_ex_data(ctx, ctx_index);
    const unsigned char *sel;
    unsigned len;

    (void)arg;
    if (cc == NULL)
        return 1;
    SSL_get0_alpn_selected(ssl, &sel, &len);
    if (len && cc->p->alpn && strlen(cc->p->alpn) == len &&
        memcmp(sel, cc->p->alpn, len) == 0)
        return 1; /* alpn_cert gave this connection its certificate */
    if (cc->p->generation(cc->cert) != cc->gen)
        refresh(ctx, ssl, cc);
    return cc->refuse ? 0 : 1;
}

int fd_ssl_provider_attach(fd_cycle_t *cycle, SSL_CTX *ctx,
                           fd_http_server_t *srv, const fd_ssl_path_t *path,
                           char *err, size_t errlen)
{
    const fd_api_tls_provider_t *p = provider_of(path->path);
    const char *name = path->path + strcspn(path->path, ":") + 1;
    fd_conf_t cf, *load;
    ctx_cert_t *cc;

    if (p == NULL) {
        snprintf(err, errlen, "%s:%d: ssl_certificate \"%s\": no module "
                 "provides %.*s: certificates (its module is not built in "
                 "or loaded, or the configuration lacks its section)",
                 path->file, path->line, path->path,
                 (int)strcspn(path->path, ":"), path->path);
        return FD_ERROR;
    }
    if (ctx_index < 0 &&
        (ctx_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL)) <
            0) {
        snprintf(err, errlen, "SSL_CTX_get_ex_new_index() failed");
        return FD_ERROR;
    }
    if ((cc = fd_pcalloc(cycle->pool, sizeof(*cc))) == NULL) {
        snprintf(err, errlen, "out of memory");
        return FD_ERROR;
    }
    cc->p = p;
    cc->what = path->path;
    /* the module's hook runs in the load (fd_cycle_load entered it: its
     * prefix, its pools), its errors at the ssl_certificate line */
    if ((load = fd_dso_conf()) != NULL)
        cf = *load;
    else
        cf = (fd_conf_t){.pool = cycle->pool, .cycle = cycle};
    cf.file = path->file;
    cf.line = path->line;
    cf.err[0] = '\0';
    fd_dso_conf_enter(&cf);
    cc->cert = p->attach(name, (const char *const *)srv->names.items,
                         srv->names.n);
    fd_dso_conf_enter(load);
    if (cc->cert == NULL) {
        if (cf.err[0] == '\0')
            fd_conf_error(&cf, "ssl_certificate \"%s\": refused by its "
                          "module", path->path);
        snprintf(err, errlen, "%s", cf.err);
        return FD_ERROR;
    }
    if (!SSL_CTX_set_ex_data(ctx, ctx_index, cc)) {
        snprintf(err, errlen, "SSL_CTX_set_ex_data() failed");
        return FD_ERROR;
    }
    SSL_CTX_set_cert_cb(ctx, cert_cb, NULL);
    refresh(ctx, NULL, cc);
    return FD_OK;
}

int fd_ssl_provider_alpn(SSL *ssl, const unsigned char **out,
                         unsigned char *outlen, const unsigned char *in,
                         unsigned inlen)
{
    const unsigned char *p, *end = in + inlen;
    fd_api_tls_pem_t pem;
    const char *sni;
    unsigned i;
    size_t n;

    for (i = 0; i < PROVIDERS_MAX && providers[i]; i++) {
        if (providers[i]->alpn == NULL || providers[i]->alpn_cert == NULL)
            continue;
        n = strlen(providers[i]->alpn);
        for (p = in; p < end && p + 1 + *p <= end; p += 1 + *p)
            if (*p == n && memcmp(p + 1, providers[i]->alpn, n) == 0)
                break;
        if (p >= end || p + 1 + *p > end)
            continue;
        sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        if (sni == NULL || providers[i]->alpn_cert(sni, &pem) != FD_OK)
            continue;
        if (use_pem(NULL, ssl, &pem, 0) != FD_OK) {
            fd_log_error(FD_LOG_ALERT, 0, "%s for \"%s\": the certificate "
                         "cannot be parsed", providers[i]->alpn, sni);
            continue;
        }
        *out = p + 1;
        *outlen = *p;
        return 1;
    }
    return 0;
}
