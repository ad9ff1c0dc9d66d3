/*
 * acme: automatic HTTPS (fd_acme.h). This file is what runs in the
 * master and the workers: the [acme NAME] sections, the certificates of
 * the servers that say ssl_certificate = acme:NAME, the helper process
 * the master forks to talk to the CA (fd_acme_client.c), the workers'
 * certificate swap and challenge answers, /status and fastd -s renew.
 *
 * Nothing here blocks a worker: a handshake reads the shared zone (one
 * atomic load, and a parse once per new certificate and worker); an
 * http-01 answer is a lookup in the same zone.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "fd_acme.h"
#include "fd_cluster.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_http_int.h"
#include "fd_ssl.h"
#include "fd_status.h"

fd_module_t fd_acme_module;
fd_acme_shm_t *fd_acme_shm;

static fd_cycle_t *loading;    /* the cycle fd_ssl_init_cycle attaches to */
static pid_t helper_pid;
static int have_challenges;    /* this worker's cycle has an [acme] */

/* --- configuration ------------------------------------------------------- */

#define IOFF(f) offsetof(fd_acme_issuer_t, f)

static const fd_conf_enum_t challenge_enums[] = {
    {"http-01", FD_ACME_HTTP01}, {"tls-alpn-01", FD_ACME_TLSALPN01},
    {NULL, 0}};
static const fd_conf_enum_t key_enums[] = {
    {"ecdsa-p256", FD_ACME_KEY_EC}, {"rsa-2048", FD_ACME_KEY_RSA},
    {NULL, 0}};
static const fd_conf_enum_t placeholder_enums[] = {
    {"self-signed", 1}, {"refuse", 0}, {NULL, 0}};
static const fd_conf_enum_t storage_enums[] = {
    {"files", FD_ACME_STORE_FILES}, {"redis", FD_ACME_STORE_REDIS},
    {NULL, 0}};

/* a path resolved against the prefix */
static int set_path(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    char **p = (char **)((char *)conf + d->offset);

    if ((*p = fd_conf_path(cf, v)) == NULL)
        return fd_conf_error(cf, "out of memory");
    return FD_OK;
}

static const fd_directive_t acme_directives[] = {
    {.name = "directory", .type = FD_CONF_STR, .offset = IOFF(directory),
     .doc = "the CA's ACME directory URL (https://), e.g. "
            "https://acme-v02.api.letsencrypt.org/directory"},
    {.name = "contact", .type = FD_CONF_LIST, .offset = IOFF(contact),
     .doc = "an account contact, mailto:admin@example.com; repeatable"},
    {.name = "accept_terms", .type = FD_CONF_FLAG,
     .offset = IOFF(accept_terms), .def = "off",
     .doc = "on: agree to the CA's terms of service (required: no account "
            "is made without it)"},
    {.name = "eab_kid", .type = FD_CONF_STR, .offset = IOFF(eab_kid),
     .doc = "External Account Binding: the key id the CA gave"},
    {.name = "eab_hmac_key", .type = FD_CONF_STR, .offset = IOFF(eab_hmac),
     .doc = "External Account Binding: the HMAC key the CA gave "
            "(base64url)"},
    {.name = "ca_certificate", .type = FD_CONF_CUSTOM,
     .offset = IOFF(ca_certificate), .set = set_path,
     .doc = "PEM CA certificates that the CA's own HTTPS is verified "
            "against, for a private CA; default: the system's"},
    {.name = "challenge", .type = FD_CONF_ENUM, .offset = IOFF(challenge),
     .enums = challenge_enums, .def = "http-01",
     .doc = "http-01 (answered on every plain-HTTP listener, which port 80 "
            "must reach) or tls-alpn-01 (answered in the TLS handshake on "
            "the ssl listener, which port 443 must reach)"},
    {.name = "key_type", .type = FD_CONF_ENUM, .offset = IOFF(key_type),
     .enums = key_enums, .def = "ecdsa-p256",
     .doc = "the account's and the certificates' keys: ecdsa-p256 "
            "(ES256) or rsa-2048 (RS256)"},
    {.name = "profile", .type = FD_CONF_STR, .offset = IOFF(profile),
     .doc = "the certificate profile to ask for, where the CA's directory "
            "offers profiles (ignored, with a warning, where it does not)"},
    {.name = "state_path", .type = FD_CONF_CUSTOM,
     .offset = IOFF(state_path), .set = set_path,
     .def = "acme",
     .doc = "the directory of the account key, certificates and keys "
            "(0700; files 0600, written atomically); fastd processes "
            "sharing it order a name once"},
    {.name = "preferred_chain", .type = FD_CONF_STR,
     .offset = IOFF(preferred_chain),
     .doc = "the common name of the root to chain to, where the CA offers "
            "several chains (Link rel=\"alternate\"): the first chain whose "
            "topmost certificate that root issued is served, else the CA's "
            "first (certbot's --preferred-chain)"},
    {.name = "storage", .type = FD_CONF_ENUM, .offset = IOFF(storage),
     .enums = storage_enums, .def = "files",
     .doc = "files: state_path alone; redis: the account key and the "
            "certificates shared by a fleet through the [cluster]'s Redis "
            "(state_path keeps this instance's copy), with a lease so that "
            "one instance orders a name and the others take it; while "
            "Redis does not answer, nothing is ordered and the "
            "certificates in service stay"},
    {.name = "placeholder", .type = FD_CONF_ENUM,
     .offset = IOFF(placeholder), .enums = placeholder_enums,
     .def = "self-signed",
     .doc = "until the first certificate arrives: self-signed (answer "
            "handshakes with a self-signed certificate, logged) or refuse "
            "(fail them)"},
    {.name = "retry_interval", .type = FD_CONF_MSEC, .offset = IOFF(retry),
     .def = "1m", .min = 1000, .max = 86400000,
     .doc = "the wait after a failed order; it doubles with each further "
            "failure, up to retry_max"},
    {.name = "retry_max", .type = FD_CONF_MSEC, .offset = IOFF(retry_max),
     .def = "1d", .min = 1000, .max = 7 * 86400000LL,
     .doc = "the longest wait between two tries"},
    {.name = "max_response", .type = FD_CONF_SIZE,
     .offset = IOFF(max_response), .def = "1m", .min = 4096,
     .max = 16 << 20,
     .doc = "the largest answer taken from the CA; a larger one is "
            "refused"},
    FD_CONF_END};

static int issuer_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    fd_acme_issuer_t *is = conf;

    if (fd_cycle_section_name(cf, "acme", name, 64) != FD_OK)
        return FD_ERROR;
    if ((is->name = fd_pstrdup(cf->pool, name, strlen(name))) == NULL)
        return fd_conf_error(cf, "out of memory");
    if (is->directory == NULL)
        return fd_conf_error(cf, "[acme %s] has no \"directory\" (the CA's "
                             "ACME directory URL)", name);
    if (strncmp(is->directory, "https://", 8) != 0)
        return fd_conf_error(cf, "[acme %s]: directory \"%s\" is not an "
                             "https:// URL", name, is->directory);
    if (!is->accept_terms)
        return fd_conf_error(cf, "[acme %s] needs accept_terms = on (the "
                             "CA's terms of service)", name);
    if ((is->eab_kid == NULL) != (is->eab_hmac == NULL))
        return fd_conf_error(cf, "[acme %s]: eab_kid and eab_hmac_key go "
                             "together", name);
    if (is->retry_max < is->retry)
        is->retry_max = is->retry;
    is->file = cf->file;
    is->line = cf->line;
    if (fd_acme_shm == NULL &&
        (fd_acme_shm = fd_shm_zone("acme", "acme", sizeof(fd_acme_shm_t),
                                   NULL)) == NULL)
        return fd_conf_error(cf, "[acme %s]: out of memory (the shared "
                             "zone)", name);
    return FD_OK;
}

static int acme_init_cycle(fd_conf_t *cf, fd_cycle_t *cycle)
{
    fd_conf_section_t *s;

    for (s = cycle->sections; s; s = s->next) {
        const fd_acme_issuer_t *is = s->conf;
        if (s->module == &fd_acme_module &&
            is->storage == FD_ACME_STORE_REDIS &&
            !fd_cluster_configured(cycle)) {
            cf->file = s->file;
            cf->line = s->line;
            return fd_conf_error(cf, "[acme %s]: storage = redis needs a "
                                 "[cluster] section (redis = ...)", s->name);
        }
    }
    loading = cycle; /* fd_ssl_init_cycle comes next, with attach() */
    return FD_OK;
}

/* The slot of id, found again after a reload, else a free one. */
static int slot_of(const char *id)
{
    int i, free_i = -1;

    for (i = 0; i < FD_ACME_CERT_MAX; i++) {
        if (strcmp(fd_acme_shm->slot[i].id, id) == 0)
            return i;
        if (free_i < 0 && fd_acme_shm->slot[i].id[0] == '\0')
            free_i = i;
    }
    if (free_i >= 0)
        snprintf(fd_acme_shm->slot[free_i].id, sizeof(fd_acme_shm->slot[0].id),
                 "%s", id);
    return free_i;
}

/* --- the certificate a handshake gets ------------------------------------ */

/* What a context serves: its slot, and the generation it holds. */
typedef struct {
    fd_acme_slot_t *slot;
    uint64_t gen;             /* this process's copy in the SSL_CTX */
    int refuse;               /* placeholder = refuse, and none yet */
} ctx_cert_t;

static int ctx_index = -1;

/* Parse a chain-then-key PEM into x, chain and pkey. */
static int pem_parse(const char *pem, size_t cert_len, size_t key_len,
                     X509 **x, STACK_OF(X509) **chain, EVP_PKEY **pkey)
{
    BIO *b = BIO_new_mem_buf(pem, (int)cert_len);
    X509 *c;

    *x = NULL;
    *chain = sk_X509_new_null();
    *pkey = NULL;
    if (b == NULL || *chain == NULL)
        goto failed;
    if ((*x = PEM_read_bio_X509(b, NULL, NULL, NULL)) == NULL)
        goto failed;
    while ((c = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
        if (!sk_X509_push(*chain, c)) {
            X509_free(c);
            goto failed;
        }
    ERR_clear_error();
    BIO_free(b);
    b = BIO_new_mem_buf(pem + cert_len, (int)key_len);
    if (b == NULL ||
        (*pkey = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL)) == NULL)
        goto failed;
    BIO_free(b);
    return FD_OK;
failed:
    BIO_free(b);
    X509_free(*x);
    sk_X509_pop_free(*chain, X509_free);
    EVP_PKEY_free(*pkey);
    *x = NULL;
    *chain = NULL;
    *pkey = NULL;
    ERR_clear_error();
    return FD_ERROR;
}

/* Take the slot's certificate into ctx (and ssl, when a handshake is
 * under way) if it is newer than what ctx holds. */
static int ctx_refresh(SSL_CTX *ctx, SSL *ssl, ctx_cert_t *cc)
{
    static char pem[FD_ACME_PEM_MAX]; /* one loop, one user */
    fd_acme_slot_t *s = cc->slot;
    uint32_t cl, kl;
    uint64_t gen;
    X509 *x;
    STACK_OF(X509) *chain;
    EVP_PKEY *pkey;
    int ok;

    if (__atomic_load_n(&s->gen, __ATOMIC_ACQUIRE) == cc->gen)
        return FD_OK;
    fd_shm_lock(&s->lock);
    gen = s->gen;
    cl = s->cert_len;
    kl = s->key_len;
    if (cl + kl <= sizeof(pem))
        memcpy(pem, s->pem, cl + kl);
    fd_shm_unlock(&s->lock);
    if (cl == 0 || cl + kl > sizeof(pem) ||
        pem_parse(pem, cl, kl, &x, &chain, &pkey) != FD_OK) {
        fd_log_error(FD_LOG_ALERT, 0, "acme: certificate %s (generation "
                     "%llu) cannot be parsed, keeping the one served",
                     s->id, (unsigned long long)gen);
        cc->gen = gen;
        return FD_ERROR;
    }
    ok = SSL_CTX_use_cert_and_key(ctx, x, pkey, chain, 1) &&
         (ssl == NULL || SSL_use_cert_and_key(ssl, x, pkey, chain, 1));
    X509_free(x);
    EVP_PKEY_free(pkey);
    sk_X509_pop_free(chain, X509_free);
    if (!ok) {
        ERR_clear_error();
        fd_log_error(FD_LOG_ALERT, 0, "acme: certificate %s does not match "
                     "its key, keeping the one served", s->id);
        cc->gen = gen;
        return FD_ERROR;
    }
    if (cc->gen != 0 || cc->refuse)
        fd_log_error(FD_LOG_INFO, 0, "acme: serving certificate %s "
                     "generation %llu", s->id, (unsigned long long)gen);
    cc->gen = gen;
    cc->refuse = 0;
    return FD_OK;
}

/* Every full handshake: a newer certificate is taken here, for this
 * handshake and every one after; a connection keeps the one it got. */
static int cert_cb(SSL *ssl, void *arg)
{
    SSL_CTX *ctx = SSL_get_SSL_CTX(ssl);
    ctx_cert_t *cc = SSL_CTX_get_ex_data(ctx, ctx_index);

    const unsigned char *p;
    unsigned len;

    (void)arg;
    SSL_get0_alpn_selected(ssl, &p, &len);
    if (cc == NULL || (len == 10 && memcmp(p, "acme-tls/1", 10) == 0))
        return 1; /* tls-alpn-01 set its own certificate */
    ctx_refresh(ctx, ssl, cc);
    return cc->refuse ? 0 : 1;
}

static int attach(SSL_CTX *ctx, const char *name, fd_http_server_t *srv,
                  const char *file, int line, char *err, size_t errlen)
{
    fd_acme_issuer_t *is;
    fd_acme_cert_t *c;
    ctx_cert_t *cc;
    char id[256];
    unsigned i;
    int slot;

    is = loading ? fd_cycle_section(loading, "acme", name) : NULL;
    if (is == NULL) {
        snprintf(err, errlen, "%s:%d: ssl_certificate \"acme:%s\": no "
                 "[acme %s] section", file, line, name, name);
        return FD_ERROR;
    }
    if (srv->names.n == 0 || srv->names.n > 64) {
        snprintf(err, errlen, "%s:%d: ssl_certificate \"acme:%s\" needs "
                 "the server's server_name (1 to 64 names)", file, line,
                 name);
        return FD_ERROR;
    }
    for (i = 0; i < srv->names.n; i++) {
        unsigned char ip[16];
        const char *nm = srv->names.items[i];
        /* an IP address is an identifier of its own (RFC 8738) */
        if (inet_pton(AF_INET6, nm, ip) == 1)
            continue;
        if (strchr(nm, '*') || nm[0] == '~' || strchr(nm, '.') == NULL) {
            snprintf(err, errlen, "%s:%d: ssl_certificate \"acme:%s\": "
                     "server_name \"%s\" is no name a CA certifies over "
                     "%s (a full DNS name)", file, line, name,
                     srv->names.items[i],
                     is->challenge == FD_ACME_HTTP01 ? "http-01"
                                                     : "tls-alpn-01");
            return FD_ERROR;
        }
    }
    snprintf(id, sizeof(id), "%s/%s", name, srv->names.items[0]);
    if ((slot = slot_of(id)) < 0) {
        snprintf(err, errlen, "%s:%d: more than %d ACME certificates", file,
                 line, FD_ACME_CERT_MAX);
        return FD_ERROR;
    }
    if (ctx_index < 0 &&
        (ctx_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL)) <
            0) {
        snprintf(err, errlen, "SSL_CTX_get_ex_new_index() failed");
        return FD_ERROR;
    }
    c = fd_pcalloc(loading->pool, sizeof(*c));
    cc = fd_pcalloc(loading->pool, sizeof(*cc));
    if (c == NULL || cc == NULL) {
        snprintf(err, errlen, "out of memory");
        return FD_ERROR;
    }
    c->issuer = is;
    c->slot = (unsigned)slot;
    for (i = 0; i < srv->names.n; i++)
        c->names[c->nnames++] = srv->names.items[i];
    cc->slot = &fd_acme_shm->slot[slot];
    cc->refuse = !is->placeholder;
    SSL_CTX_set_ex_data(ctx, ctx_index, cc);
    SSL_CTX_set_cert_cb(ctx, cert_cb, NULL);
    snprintf(cc->slot->issuer, sizeof(cc->slot->issuer), "%s", name);

    if (ctx_refresh(ctx, NULL, cc) != FD_OK || cc->gen == 0) {
        /* the files a helper left (the master may read them), else a
         * placeholder, so the context has something to serve */
        fd_acme_store_t st;
        char key[300], *data = NULL;
        size_t len;
        X509 *x = NULL;
        STACK_OF(X509) *chain = NULL;
        EVP_PKEY *pkey = NULL;
        char *kb;

        snprintf(key, sizeof(key), "%s.pem", srv->names.items[0]);
        if (fd_acme_store_files(&st, is->state_path, 0) == FD_OK &&
            st.get(&st, key, &data, &len, NULL) == FD_OK &&
            (kb = strstr(data, "-----BEGIN PRIVATE KEY")) != NULL &&
            pem_parse(data, (size_t)(kb - data), len - (size_t)(kb - data),
                      &x, &chain, &pkey) == FD_OK) {
            int ok = SSL_CTX_use_cert_and_key(ctx, x, pkey, chain, 1);
            X509_free(x);
            EVP_PKEY_free(pkey);
            sk_X509_pop_free(chain, X509_free);
            if (ok) {
                cc->refuse = 0;
                free(data);
                goto done;
            }
            ERR_clear_error();
        }
        free(data);
        {
            static char pem[8192];
            uint32_t cl, kl;
            int ok = fd_acme_self_signed(srv->names.items[0], NULL,
                                         is->key_type, pem, &cl, &kl,
                                         sizeof(pem)) == FD_OK &&
                     pem_parse(pem, cl, kl, &x, &chain, &pkey) == FD_OK;
            ok = ok && SSL_CTX_use_cert_and_key(ctx, x, pkey, chain, 1);
            X509_free(x);
            EVP_PKEY_free(pkey);
            sk_X509_pop_free(chain, X509_free);
            if (!ok) {
                ERR_clear_error();
                snprintf(err, errlen, "%s:%d: acme:%s: the placeholder "
                         "certificate cannot be made", file, line, name);
                return FD_ERROR;
            }
            if (!fd_conf_test)
                fd_log_error(FD_LOG_NOTICE, 0, "acme: %s: no certificate "
                             "yet, %s until the first arrives",
                             srv->names.items[0],
                             is->placeholder ? "serving a self-signed "
                                               "placeholder"
                                             : "refusing handshakes");
        }
    }
done:
    {
        fd_acme_cert_t **pp = &is->certs; /* the file's order */
        while (*pp)
            pp = &(*pp)->next;
        *pp = c;
    }
    return FD_OK;
}

/* --- tls-alpn-01 (RFC 8737): the challenge certificate, in the handshake */

static int alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                const unsigned char *in, unsigned inlen)
{
    static const unsigned char proto[] = "\x0a"
                                         "acme-tls/1";
    static char pem[sizeof(fd_acme_shm->chal[0].pem)];
    const char *sni;
    unsigned char *sel;
    uint32_t cl = 0, kl = 0;
    X509 *x;
    STACK_OF(X509) *chain;
    EVP_PKEY *pkey;
    unsigned i;
    int ok;

    if (fd_acme_shm == NULL || !have_challenges ||
        SSL_select_next_proto(&sel, outlen, proto, sizeof(proto) - 1, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return 0;
    sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (sni == NULL)
        return 0;
    fd_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        fd_acme_chal_t *ch = &fd_acme_shm->chal[i];
        if (ch->type == FD_ACME_TLSALPN01 && strcasecmp(ch->name, sni) == 0 &&
            ch->cert_len + ch->key_len <= sizeof(pem)) {
            cl = ch->cert_len;
            kl = ch->key_len;
            memcpy(pem, ch->pem, cl + kl);
            break;
        }
    }
    fd_shm_unlock(&fd_acme_shm->lock);
    if (cl == 0) {
        fd_log_error(FD_LOG_INFO, 0, "acme: acme-tls/1 for \"%s\", which "
                     "has no challenge under way", sni);
        return 0;
    }
    if (pem_parse(pem, cl, kl, &x, &chain, &pkey) != FD_OK)
        return 0;
    ok = SSL_use_cert_and_key(ssl, x, pkey, NULL, 1);
    X509_free(x);
    EVP_PKEY_free(pkey);
    sk_X509_pop_free(chain, X509_free);
    if (!ok) {
        ERR_clear_error();
        return 0;
    }
    fd_log_error(FD_LOG_INFO, 0, "acme: answered the tls-alpn-01 challenge "
                 "for \"%s\"", sni);
    *out = sel;
    return 1;
}

static const fd_ssl_cert_provider_t provider = {
    .attach = attach,
    .alpn = alpn,
};

/* --- http-01: before any location ---------------------------------------- */

static int early(fd_request_t *r)
{
    static const char pfx[] = "/.well-known/acme-challenge/";
    size_t n = sizeof(pfx) - 1, tlen;
    const char *token;
    char *body = NULL;
    size_t blen = 0;
    unsigned i;

    if (!have_challenges || r->path.len <= n ||
        memcmp(r->path.data, pfx, n) != 0 || r->c->s.tls != NULL)
        return FD_DECLINED;
    token = r->path.data + n;
    tlen = r->path.len - n;
    fd_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        fd_acme_chal_t *ch = &fd_acme_shm->chal[i];
        if (ch->type == FD_ACME_HTTP01 && strlen(ch->token) == tlen &&
            memcmp(ch->token, token, tlen) == 0) {
            blen = strlen(ch->keyauth);
            if ((body = fd_pnalloc(r->pool, blen)) != NULL)
                memcpy(body, ch->keyauth, blen);
            break;
        }
    }
    fd_shm_unlock(&fd_acme_shm->lock);
    if (body == NULL)
        return FD_DECLINED; /* not ours: the locations may serve it */
    fd_log_error(FD_LOG_INFO, 0, "acme: answered the http-01 challenge "
                 "%.*s", (int)tlen, token);
    r->status = 200;
    r->content_type = fd_string("text/plain");
    fd_http_body_set(r, body, blen);
    return FD_OK;
}

/* --- the fleet's challenges (storage = redis): worker 0's copy ----------- */

static fd_timer_t chals_timer;
static fd_redis_cmd_t *chals_cmd;

/* One line "AT TYPE NAME TOKEN KEYAUTH" into the zone, unless there */
static void chal_take(const char *line, size_t len, time_t now)
{
    char buf[1024], name[256], token[128], keyauth[256];
    long long at;
    int type, i, free_i = -1;
    fd_acme_chal_t tmp;

    if (len >= sizeof(buf))
        return;
    memcpy(buf, line, len);
    buf[len] = '\0';
    if (sscanf(buf, "%lld %d %255s %127s %255s", &at, &type, name, token,
               keyauth) != 5 ||
        (type != FD_ACME_HTTP01 && type != FD_ACME_TLSALPN01) ||
        now - at > FD_ACME_CHAL_TTL)
        return;
    fd_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        fd_acme_chal_t *ch = &fd_acme_shm->chal[i];
        if (ch->type && strcmp(ch->token, token) == 0) {
            ch->remote |= 2; /* still listed */
            fd_shm_unlock(&fd_acme_shm->lock);
            return;
        }
        if (ch->type == 0 && free_i < 0)
            free_i = i;
    }
    fd_shm_unlock(&fd_acme_shm->lock);
    if (free_i < 0)
        return;
    memset(&tmp, 0, sizeof(tmp));
    tmp.type = (uint32_t)type;
    tmp.remote = 1 | 2;
    snprintf(tmp.token, sizeof(tmp.token), "%s", token);
    snprintf(tmp.keyauth, sizeof(tmp.keyauth), "%s", keyauth);
    snprintf(tmp.name, sizeof(tmp.name), "%s", name);
    /* tls-alpn-01: the challenge certificate, an EC key (fast to make
     * on the loop, whatever key_type the orderer uses) */
    if (type == FD_ACME_TLSALPN01 &&
        fd_acme_self_signed(name, keyauth, FD_ACME_KEY_EC, tmp.pem,
                            &tmp.cert_len, &tmp.key_len,
                            sizeof(tmp.pem)) != FD_OK)
        return;
    fd_shm_lock(&fd_acme_shm->lock);
    if (fd_acme_shm->chal[free_i].type == 0)
        fd_acme_shm->chal[free_i] = tmp;
    fd_shm_unlock(&fd_acme_shm->lock);
    fd_log_error(FD_LOG_INFO, 0, "acme: took another instance's %s "
                 "challenge for %s", type == FD_ACME_HTTP01 ? "http-01"
                                                           : "tls-alpn-01",
                 name);
}

static void chals_done(void *data, const fd_redis_reply_t *re)
{
    const char *p, *end, *nl;
    time_t now = time(NULL);
    unsigned i;

    (void)data;
    chals_cmd = NULL;
    if (re->type != FD_REDIS_STR)
        return; /* Redis away: the copies stay until it answers */
    fd_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++)
        fd_acme_shm->chal[i].remote &= ~2u;
    fd_shm_unlock(&fd_acme_shm->lock);
    for (p = re->str.data, end = p + re->str.len; p < end; p = nl + 1) {
        if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
            nl = end;
        chal_take(p, (size_t)(nl - p), now);
    }
    /* those no longer listed: answered, or given up */
    fd_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++)
        if (fd_acme_shm->chal[i].remote == 1)
            memset(&fd_acme_shm->chal[i], 0, sizeof(fd_acme_chal_t));
    fd_shm_unlock(&fd_acme_shm->lock);
}

static void chals_ask(fd_timer_t *t)
{
    static const char *argv[] = {
        "EVAL", "return table.concat(redis.call('HVALS', KEYS[1]), '\\n')",
        "1", FD_ACME_CHALS_KEY};
    size_t len[4];
    unsigned i;

    fd_timer_add(t, 1000);
    if (chals_cmd || fd_cluster == NULL || fd_acme_shm == NULL)
        return;
    for (i = 0; i < 4; i++)
        len[i] = strlen(argv[i]);
    chals_cmd = fd_cluster->command(4, argv, len, chals_done, NULL);
}

static int acme_init_worker(fd_worker_t *w)
{
    fd_conf_section_t *s;
    int shared = 0;

    have_challenges = 0;
    chals_cmd = NULL;
    for (s = w->cycle->sections; s; s = s->next)
        if (s->module == &fd_acme_module) {
            have_challenges = 1;
            shared |= ((fd_acme_issuer_t *)s->conf)->storage ==
                      FD_ACME_STORE_REDIS;
        }
    if (have_challenges)
        fd_http_early_on = 1;
    if (shared && w->index == 0) {
        chals_timer.handler = chals_ask;
        fd_timer_add(&chals_timer, 1);
    }
    return FD_OK;
}

static void acme_exit_worker(fd_worker_t *w)
{
    (void)w;
    if (fd_timer_armed(&chals_timer))
        fd_timer_del(&chals_timer);
    if (chals_cmd && fd_cluster)
        fd_cluster->cancel(chals_cmd);
    chals_cmd = NULL;
}

/* --- the helper process -------------------------------------------------- */

static fd_cycle_t *helper_cycle;
static time_t helper_started;

static int cycle_has_certs(fd_cycle_t *cycle)
{
    fd_conf_section_t *s;

    for (s = cycle->sections; s; s = s->next)
        if (s->module == &fd_acme_module &&
            ((fd_acme_issuer_t *)s->conf)->certs)
            return 1;
    return 0;
}

static void helper_spawn(void)
{
    sigset_t set;
    pid_t pid;

    pid = fork();
    if (pid < 0) {
        fd_log_error(FD_LOG_ALERT, errno, "acme: fork() failed");
        return;
    }
    if (pid > 0) {
        helper_pid = pid;
        helper_started = time(NULL);
        return;
    }
    /* the helper: the master's signals back to their defaults */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGALRM, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigprocmask(SIG_SETMASK, &set, NULL);
    /* its copies of the listening sockets go: it accepts nothing, and a
     * copy would keep a socket a reload drops open (plain close(): the
     * sockets and their reuseport group stay the master's) */
    fd_listening_forget_retired();
    for (fd_listening_t *ls = helper_cycle->listening; ls; ls = ls->next)
        for (unsigned i = 0; i < ls->nfds; i++)
            close(ls->fds[i]);
    fd_acme_helper(helper_cycle);
    _exit(0);
}

static void acme_master_start(fd_cycle_t *cycle)
{
    if (helper_pid > 0) {
        /* a reload: the new configuration's helper takes over (an order
         * under way is left; its lock dies with the process) */
        kill(helper_pid, SIGTERM);
        helper_pid = -helper_pid; /* reaped quietly */
    }
    helper_cycle = cycle;
    if (fd_acme_shm == NULL || !cycle_has_certs(cycle))
        return;
    helper_spawn();
}

static int acme_master_reap(pid_t pid, int status)
{
    if (pid == -helper_pid) {
        helper_pid = 0;
        return 1;
    }
    if (pid != helper_pid || pid <= 0)
        return 0;
    helper_pid = 0;
    fd_log_error(FD_LOG_ALERT, 0, "acme: helper process %d exited (%s %d)",
                 (int)pid, WIFSIGNALED(status) ? "signal" : "code",
                 WIFSIGNALED(status) ? WTERMSIG(status)
                                     : WEXITSTATUS(status));
    if (time(NULL) - helper_started < 2) {
        fd_log_error(FD_LOG_ALERT, 0, "acme: the helper died at once; not "
                     "starting it again until a reload");
        return 1;
    }
    helper_spawn();
    return 1;
}

/* SIGUSR1 (fastd -s reopen): the helper writes the error log too */
static void acme_reopen_master(fd_cycle_t *cycle)
{
    (void)cycle;
    if (helper_pid > 0)
        kill(helper_pid, SIGUSR1);
}

/* --- fastd -s renew NAME ------------------------------------------------- */

static int acme_command(fd_cycle_t *cycle, const char *cmd, const char *arg)
{
    fd_conf_section_t *s;
    fd_acme_cert_t *c;
    fd_acme_store_t st;
    char key[300];
    unsigned i, n = 0;
    long master = 0;

    if (strcmp(cmd, "renew") != 0)
        return FD_DECLINED;
    if (arg == NULL) {
        fprintf(stderr, "fastd: renew needs a NAME: a certificate's first "
                "server_name, or an [acme NAME] (all of its certificates)\n");
        return FD_ERROR;
    }
    /* the request names the master (its pid file's): another fastd
     * sharing state_path leaves it alone */
    {
        FILE *fp = cycle->main.pid ? fopen(cycle->main.pid, "r") : NULL;
        if (fp == NULL || fscanf(fp, "%ld", &master) != 1 || master <= 0) {
            fprintf(stderr, "fastd: cannot read pid file \"%s\"\n",
                    cycle->main.pid ? cycle->main.pid : "");
            if (fp)
                fclose(fp);
            return FD_ERROR;
        }
        fclose(fp);
    }
    for (s = cycle->sections; s; s = s->next) {
        fd_acme_issuer_t *is = s->conf;
        if (s->module != &fd_acme_module)
            continue;
        for (c = is->certs; c; c = c->next) {
            int match = strcmp(is->name, arg) == 0;
            for (i = 0; i < c->nnames && !match; i++)
                match = strcasecmp(c->names[i], arg) == 0;
            if (!match)
                continue;
            snprintf(key, sizeof(key), "%s.renew-%ld", c->names[0], master);
            if (fd_acme_store_files(&st, is->state_path, 1) != FD_OK ||
                st.put(&st, key, "renew\n", 6) != FD_OK) {
                fprintf(stderr, "fastd: cannot write \"%s/%s\": %s\n",
                        is->state_path, key, strerror(errno));
                return FD_ERROR;
            }
            fprintf(stderr, "fastd: renewal of %s asked for (the helper "
                    "takes it within a second)\n", c->names[0]);
            n++;
        }
    }
    if (n == 0) {
        fprintf(stderr, "fastd: no ACME certificate \"%s\" (a first "
                "server_name, or an [acme NAME] in use)\n", arg);
        return FD_ERROR;
    }
    return FD_OK;
}

/* --- /status ------------------------------------------------------------- */

/* a label's value: no quote, backslash or control character */
static void label_text(char *dst, size_t size, const char *src)
{
    size_t i;

    for (i = 0; i + 1 < size && src[i]; i++)
        dst[i] = (src[i] == '"' || src[i] == '\\' ||
                  (unsigned char)src[i] < 0x20)
                     ? '\''
                     : src[i];
    dst[i] = '\0';
}

static void acme_status_shared(fd_status_t *st)
{
    fd_conf_section_t *s;
    fd_acme_cert_t *c;
    char labels[2048], names[FD_ACME_NAMES_MAX], error[256];
    unsigned i;

    if (fd_acme_shm == NULL || fd_worker == NULL)
        return;
    for (s = fd_worker->cycle->sections; s; s = s->next) {
        fd_acme_issuer_t *is = s->conf;
        if (s->module != &fd_acme_module)
            continue;
        for (c = is->certs; c; c = c->next) {
            fd_acme_slot_t *sl = &fd_acme_shm->slot[c->slot];
            size_t n = 0;
            names[0] = '\0';
            for (i = 0; i < c->nnames && n < sizeof(names); i++)
                n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
                                      i ? " " : "", c->names[i]);
            fd_shm_lock(&sl->lock);
            label_text(error, sizeof(error), sl->error);
            fd_shm_unlock(&sl->lock);
            snprintf(labels, sizeof(labels),
                     "certificate=\"%s\",issuer=\"%s\",names=\"%s\","
                     "last_error=\"%s\"", c->names[0], is->name, names,
                     error);
            fd_status_gauge(st, "acme_not_after_msec",
                            "the certificate's notAfter (Unix time; 0: "
                            "none yet)", labels,
                            (uint64_t)sl->not_after * 1000);
            fd_status_gauge(st, "acme_next_renewal_msec",
                            "when the helper orders it next (Unix time)",
                            labels, (uint64_t)sl->next_renewal * 1000);
            fd_status_counter(st, "acme_renewals",
                              "certificates obtained", labels,
                              sl->renewals);
            fd_status_counter(st, "acme_failures", "orders that failed",
                              labels, sl->failures);
        }
    }
}

fd_module_t fd_acme_module = {
    .name = "acme",
    .section = "acme",
    .section_directives = acme_directives,
    .section_size = sizeof(fd_acme_issuer_t),
    .init_section = issuer_init_section,
    .init_cycle = acme_init_cycle,
    .init_worker = acme_init_worker,
    .exit_worker = acme_exit_worker,
    .status_shared = acme_status_shared,
    .early = early,
    .master_start = acme_master_start,
    .master_reap = acme_master_reap,
    .reopen_master = acme_reopen_master,
    .command = acme_command,
};

/* The provider is there from the start: fd_ssl.c asks it at load. */
__attribute__((constructor)) static void acme_register(void)
{
    fd_ssl_cert_provider = &provider;
}
