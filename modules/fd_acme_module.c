/*
 * acme: automatic HTTPS (fd_acme.h), on the public API (fastd.h,
 * fastd_tls.h). This file is what runs in the master and the workers:
 * the [acme NAME] sections, the certificates of the servers that say
 * ssl_certificate = acme:NAME (its fd_api_tls_provider_t), the helper
 * process that talks to the CA (fd_api_helper, fd_acme_client.c), the
 * challenge answers, /status and fastd -s renew.
 *
 * Nothing here blocks a worker: a handshake reads the shared zone (one
 * atomic load, and a parse once per new certificate and worker, which
 * fastd does); an http-01 answer is a lookup in the same zone.
 */
#include <arpa/inet.h>

#include "fd_acme.h"

fd_acme_shm_t *fd_acme_shm;

static int have_challenges;    /* this worker's configuration has [acme] */

/* --- configuration ------------------------------------------------------- */

#define IOFF(f) offsetof(fd_acme_issuer_t, f)

static const char *const challenge_names[] = {"http-01", "tls-alpn-01",
                                              NULL};
static const char *const key_names[] = {"ecdsa-p256", "rsa-2048", NULL};
static const char *const placeholder_names[] = {"refuse", "self-signed",
                                                NULL};
static const char *const storage_names[] = {"files", "redis", NULL};

static const fd_api_key_t acme_keys[] = {
    {.name = "directory", .type = FD_API_STRING, .offset = IOFF(directory),
     .doc = "the CA's ACME directory URL (https://), e.g. "
            "https://acme-v02.api.letsencrypt.org/directory"},
    {.name = "contact", .type = FD_API_LIST,
     .doc = "an account contact, mailto:admin@example.com; repeatable"},
    {.name = "accept_terms", .type = FD_API_FLAG,
     .offset = IOFF(accept_terms), .def = "off",
     .doc = "on: agree to the CA's terms of service (required: no account "
            "is made without it)"},
    {.name = "eab_kid", .type = FD_API_STRING, .offset = IOFF(eab_kid),
     .doc = "External Account Binding: the key id the CA gave"},
    {.name = "eab_hmac_key", .type = FD_API_STRING, .offset = IOFF(eab_hmac),
     .doc = "External Account Binding: the HMAC key the CA gave "
            "(base64url)"},
    {.name = "ca_certificate", .type = FD_API_STRING,
     .offset = IOFF(ca_certificate),
     .doc = "PEM CA certificates that the CA's own HTTPS is verified "
            "against, for a private CA; default: the system's"},
    {.name = "challenge", .type = FD_API_STRING, .offset = IOFF(challenge_s),
     .def = "http-01",
     .doc = "http-01 (answered on every plain-HTTP listener, which port 80 "
            "must reach) or tls-alpn-01 (answered in the TLS handshake on "
            "the ssl listener, which port 443 must reach)"},
    {.name = "key_type", .type = FD_API_STRING, .offset = IOFF(key_type_s),
     .def = "ecdsa-p256",
     .doc = "the account's and the certificates' keys: ecdsa-p256 "
            "(ES256) or rsa-2048 (RS256)"},
    {.name = "profile", .type = FD_API_STRING, .offset = IOFF(profile),
     .doc = "the certificate profile to ask for, where the CA's directory "
            "offers profiles (ignored, with a warning, where it does not)"},
    {.name = "state_path", .type = FD_API_STRING,
     .offset = IOFF(state_path), .def = "acme",
     .doc = "the directory of the account key, certificates and keys "
            "(0700; files 0600, written atomically); fastd processes "
            "sharing it order a name once"},
    {.name = "preferred_chain", .type = FD_API_STRING,
     .offset = IOFF(preferred_chain),
     .doc = "the common name of the root to chain to, where the CA offers "
            "several chains (Link rel=\"alternate\"): the first chain whose "
            "topmost certificate that root issued is served, else the CA's "
            "first (certbot's --preferred-chain)"},
    {.name = "storage", .type = FD_API_STRING, .offset = IOFF(storage_s),
     .def = "files",
     .doc = "files: state_path alone; redis: the account key and the "
            "certificates shared by a fleet through the [cluster]'s Redis "
            "(state_path keeps this instance's copy), with a lease so that "
            "one instance orders a name and the others take it; while "
            "Redis does not answer, nothing is ordered and the "
            "certificates in service stay"},
    {.name = "placeholder", .type = FD_API_STRING,
     .offset = IOFF(placeholder_s), .def = "self-signed",
     .doc = "until the first certificate arrives: self-signed (answer "
            "handshakes with a self-signed certificate, logged) or refuse "
            "(fail them)"},
    {.name = "retry_interval", .type = FD_API_MSEC, .offset = IOFF(retry),
     .def = "1m",
     .doc = "the wait after a failed order; it doubles with each further "
            "failure, up to retry_max"},
    {.name = "retry_max", .type = FD_API_MSEC, .offset = IOFF(retry_max),
     .def = "1d", .doc = "the longest wait between two tries"},
    {.name = "max_response", .type = FD_API_SIZE,
     .offset = IOFF(max_response), .def = "1m",
     .doc = "the largest answer taken from the CA; a larger one is "
            "refused"},
    {.name = NULL}};

/* contact = ..., one line at a time */
static int issuer_set(void *conf, const char *key, const char *value,
                      int own)
{
    fd_acme_issuer_t *is = conf;
    char **items;

    (void)key;
    (void)own;
    items = fd_api_conf_alloc((is->contact.n + 1) * sizeof(*items));
    if (items == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    if (is->contact.n)
        memcpy(items, is->contact.items, is->contact.n * sizeof(*items));
    if ((items[is->contact.n] = fd_api_conf_alloc(strlen(value) + 1)) ==
        NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    strcpy(items[is->contact.n], value);
    is->contact.items = items;
    is->contact.n++;
    return FD_OK;
}

/* key's value among names, its index; else the error, at its line */
static int issuer_enum(fd_acme_issuer_t *is, const char *key,
                       const char *value, const char *const *names)
{
    return fd_api_conf_enum(is, key, value, names);
}

static int issuer_init(const char *name, void *conf, unsigned index)
{
    fd_acme_issuer_t *is = conf;
    int v;

    (void)index;
    is->name = name;
    fd_api_conf_pos(&is->pos);
    if (is->directory == NULL) {
        fd_api_conf_error("[acme %s] has no \"directory\" (the CA's ACME "
                          "directory URL)", name);
        return FD_ERROR;
    }
    if (strncmp(is->directory, "https://", 8) != 0) {
        fd_api_conf_at_key(is, "directory");
        fd_api_conf_error("[acme %s]: directory \"%s\" is not an https:// "
                          "URL", name, is->directory);
        return FD_ERROR;
    }
    if (!is->accept_terms) {
        fd_api_conf_error("[acme %s] needs accept_terms = on (the CA's "
                          "terms of service)", name);
        return FD_ERROR;
    }
    if ((is->eab_kid == NULL) != (is->eab_hmac == NULL)) {
        fd_api_conf_error("[acme %s]: eab_kid and eab_hmac_key go "
                          "together", name);
        return FD_ERROR;
    }
    if ((v = issuer_enum(is, "challenge", is->challenge_s,
                         challenge_names)) < 0)
        return FD_ERROR;
    is->challenge = v == 0 ? FD_ACME_HTTP01 : FD_ACME_TLSALPN01;
    if ((is->key_type = issuer_enum(is, "key_type", is->key_type_s,
                                    key_names)) < 0 ||
        (is->storage = issuer_enum(is, "storage", is->storage_s,
                                   storage_names)) < 0 ||
        (is->placeholder = issuer_enum(is, "placeholder",
                                       is->placeholder_s,
                                       placeholder_names)) < 0)
        return FD_ERROR;
    if (fd_api_conf_bounds(is, "retry_interval", (int64_t)is->retry, 1000,
                           86400000, 1) != FD_OK ||
        fd_api_conf_bounds(is, "retry_max", (int64_t)is->retry_max, 1000,
                           7 * 86400000LL, 1) != FD_OK ||
        fd_api_conf_bounds(is, "max_response", (int64_t)is->max_response,
                           4096, 16 << 20, FD_API_SIZE) != FD_OK)
        return FD_ERROR;
    if (is->retry_max < is->retry)
        is->retry_max = is->retry;
    if ((is->state_path = fd_api_conf_path(is->state_path)) == NULL ||
        (is->ca_certificate &&
         (is->ca_certificate = fd_api_conf_path(is->ca_certificate)) ==
             NULL)) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    if (fd_acme_shm == NULL &&
        (fd_acme_shm = fd_api_shm_zone(FD_API_SELF, "acme",
                                       sizeof(fd_acme_shm_t), NULL)) ==
            NULL) {
        fd_api_conf_error("[acme %s]: out of memory (the shared zone)",
                          name);
        return FD_ERROR;
    }
    return FD_OK;
}

static void redis_check(const char *name, void *conf, void *data)
{
    const fd_acme_issuer_t *is = conf;
    int *rc = data;

    (void)name;
    if (*rc == FD_OK && is->storage == FD_ACME_STORE_REDIS &&
        !fd_api_cluster_configured()) {
        fd_api_conf_at(&is->pos);
        fd_api_conf_error("[acme %s]: storage = redis needs a [cluster] "
                          "section (redis = ...)", is->name);
        *rc = FD_ERROR;
    }
}

static int acme_configured(void)
{
    int rc = FD_OK;

    fd_api_section_each("acme", redis_check, &rc);
    return rc;
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

/* --- the certificate a handshake gets (fastd_tls.h) -------------------- */

static uint64_t cert_generation(void *cert)
{
    const fd_acme_cert_t *c = cert;

    return __atomic_load_n(&fd_acme_shm->slot[c->slot].gen,
                           __ATOMIC_ACQUIRE);
}

/* The slot's certificate once the helper put one there, else what the
 * master found at load (the stored one, or the placeholder) */
static int cert_get(void *cert, fd_api_tls_pem_t *pem, uint64_t *gen)
{
    static char buf[FD_ACME_PEM_MAX]; /* one loop, one user */
    fd_acme_cert_t *c = cert;
    fd_acme_slot_t *s = &fd_acme_shm->slot[c->slot];
    uint32_t cl, kl;

    fd_api_shm_lock(&s->lock);
    *gen = s->gen;
    cl = s->cert_len;
    kl = s->key_len;
    if (*gen != 0 && cl + kl <= sizeof(buf))
        memcpy(buf, s->pem, cl + kl);
    fd_api_shm_unlock(&s->lock);
    if (*gen == 0) {
        if (c->pem == NULL || c->refuse)
            return FD_DECLINED;
        pem->pem = c->pem;
        pem->cert_len = c->cert_len;
        pem->key_len = c->key_len;
        return FD_OK;
    }
    if (cl == 0 || cl + kl > sizeof(buf)) {
        fd_api_log(FD_API_LOG_ERR, 0, "acme: certificate %s (generation "
                   "%llu) cannot be parsed, keeping the one served", s->id,
                   (unsigned long long)*gen);
        return FD_ERROR;
    }
    pem->pem = buf;
    pem->cert_len = cl;
    pem->key_len = kl;
    return FD_OK;
}

/* What a server serves until the helper's first certificate: the one a
 * helper left in state_path (the master may read it), else a self-signed
 * placeholder, which placeholder = refuse keeps for its handshakes */
static int cert_initial(fd_acme_cert_t *c, const fd_acme_issuer_t *is)
{
    static char pem[8192];
    fd_acme_store_t st;
    char key[300], *data = NULL, *kb;
    size_t len;

    snprintf(key, sizeof(key), "%s.pem", c->names[0]);
    if (fd_acme_store_files(&st, is->state_path, 0) == FD_OK &&
        st.get(&st, key, &data, &len, NULL) == FD_OK &&
        (kb = strstr(data, "-----BEGIN PRIVATE KEY")) != NULL &&
        (c->pem = fd_api_conf_alloc(len)) != NULL) {
        memcpy(c->pem, data, len);
        c->cert_len = (uint32_t)(kb - data);
        c->key_len = (uint32_t)(len - c->cert_len);
        free(data);
        return FD_OK;
    }
    free(data);
    c->refuse = !is->placeholder;
    if (!fd_api_conf_test())
        fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: no certificate yet, %s "
                   "until the first arrives", c->names[0],
                   is->placeholder ? "serving a self-signed placeholder"
                                   : "refusing handshakes");
    if (c->refuse)
        return FD_OK;
    if (fd_acme_self_signed(c->names[0], NULL, is->key_type, pem,
                            &c->cert_len, &c->key_len,
                            sizeof(pem)) != FD_OK ||
        (c->pem = fd_api_conf_alloc(c->cert_len + c->key_len)) == NULL) {
        fd_api_conf_error("acme:%s: the placeholder certificate cannot be "
                          "made", is->name);
        return FD_ERROR;
    }
    memcpy(c->pem, pem, c->cert_len + c->key_len);
    return FD_OK;
}

static void *cert_attach(const char *name, const char *const *names,
                         unsigned n)
{
    fd_acme_issuer_t *is = fd_api_section("acme", name);
    fd_acme_cert_t *c, **pp;
    char id[256];
    unsigned i;
    int slot;

    if (is == NULL) {
        fd_api_conf_error("ssl_certificate \"acme:%s\": no [acme %s] "
                          "section", name, name);
        return NULL;
    }
    if (n == 0 || n > 64) {
        fd_api_conf_error("ssl_certificate \"acme:%s\" needs the server's "
                          "server_name (1 to 64 names)", name);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        unsigned char ip[16];
        /* an IP address is an identifier of its own (RFC 8738) */
        if (inet_pton(AF_INET6, names[i], ip) == 1)
            continue;
        if (strchr(names[i], '*') || names[i][0] == '~' ||
            strchr(names[i], '.') == NULL) {
            fd_api_conf_error("ssl_certificate \"acme:%s\": server_name "
                              "\"%s\" is no name a CA certifies over %s (a "
                              "full DNS name)", name, names[i],
                              is->challenge == FD_ACME_HTTP01
                                  ? "http-01"
                                  : "tls-alpn-01");
            return NULL;
        }
    }
    snprintf(id, sizeof(id), "%s/%s", name, names[0]);
    if ((slot = slot_of(id)) < 0) {
        fd_api_conf_error("more than %d ACME certificates",
                          FD_ACME_CERT_MAX);
        return NULL;
    }
    if ((c = fd_api_conf_alloc(sizeof(*c))) == NULL) {
        fd_api_conf_error("out of memory");
        return NULL;
    }
    c->issuer = is;
    c->slot = (unsigned)slot;
    for (i = 0; i < n; i++)
        c->names[c->nnames++] = names[i];
    snprintf(fd_acme_shm->slot[slot].issuer,
             sizeof(fd_acme_shm->slot[0].issuer), "%s", name);
    if (fd_acme_shm->slot[slot].gen == 0 && cert_initial(c, is) != FD_OK)
        return NULL;
    for (pp = &is->certs; *pp; pp = &(*pp)->next) /* the file's order */
        ;
    *pp = c;
    /* a configuration with certificates has the helper that gets them */
    if (!fd_api_conf_test() &&
        fd_api_helper(FD_API_SELF, &fd_acme_helper) != FD_OK)
        return NULL;
    return c;
}

/* --- tls-alpn-01 (RFC 8737): the challenge certificate, in the handshake */

static int alpn_cert(const char *sni, fd_api_tls_pem_t *pem)
{
    static char buf[sizeof(fd_acme_shm->chal[0].pem)];
    uint32_t cl = 0, kl = 0;
    unsigned i;

    if (fd_acme_shm == NULL || !have_challenges)
        return FD_DECLINED;
    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        fd_acme_chal_t *ch = &fd_acme_shm->chal[i];
        if (ch->type == FD_ACME_TLSALPN01 && strcasecmp(ch->name, sni) == 0 &&
            ch->cert_len + ch->key_len <= sizeof(buf)) {
            cl = ch->cert_len;
            kl = ch->key_len;
            memcpy(buf, ch->pem, cl + kl);
            break;
        }
    }
    fd_api_shm_unlock(&fd_acme_shm->lock);
    if (cl == 0) {
        fd_api_log(FD_API_LOG_INFO, 0, "acme: acme-tls/1 for \"%s\", which "
                   "has no challenge under way", sni);
        return FD_DECLINED;
    }
    pem->pem = buf;
    pem->cert_len = cl;
    pem->key_len = kl;
    fd_api_log(FD_API_LOG_INFO, 0, "acme: answered the tls-alpn-01 "
               "challenge for \"%s\"", sni);
    return FD_OK;
}

static const fd_api_tls_provider_t provider = {
    .scheme = "acme",
    .attach = cert_attach,
    .generation = cert_generation,
    .get = cert_get,
    .alpn = "acme-tls/1",
    .alpn_cert = alpn_cert,
};

/* --- http-01: before any location ---------------------------------------- */

static int early(fd_request_t *r)
{
    static const char pfx[] = "/.well-known/acme-challenge/";
    static const fd_str_t text_plain = {10, "text/plain"};
    size_t n = sizeof(pfx) - 1, tlen, blen = 0;
    fd_str_t path = fd_req_path(r), scheme;
    const char *token;
    char *body = NULL;
    unsigned i;

    if (!have_challenges || path.len <= n ||
        memcmp(path.data, pfx, n) != 0)
        return FD_DECLINED;
    scheme = fd_req_var(r, "scheme");
    if (scheme.len != 4) /* "https": a plain-HTTP listener's only */
        return FD_DECLINED;
    token = path.data + n;
    tlen = path.len - n;
    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        fd_acme_chal_t *ch = &fd_acme_shm->chal[i];
        if (ch->type == FD_ACME_HTTP01 && strlen(ch->token) == tlen &&
            memcmp(ch->token, token, tlen) == 0) {
            blen = strlen(ch->keyauth);
            if ((body = fd_req_alloc(r, blen + 1)) != NULL)
                memcpy(body, ch->keyauth, blen);
            break;
        }
    }
    fd_api_shm_unlock(&fd_acme_shm->lock);
    if (body == NULL)
        return FD_DECLINED; /* not ours: the locations may serve it */
    fd_api_log(FD_API_LOG_INFO, 0, "acme: answered the http-01 challenge "
               "%.*s", (int)tlen, token);
    fd_resp_status(r, 200);
    fd_resp_content_type_static(r, text_plain);
    return fd_resp_body_static(r, body, blen) == FD_OK ? FD_OK : 500;
}

/* --- the fleet's challenges (storage = redis): worker 0's copy ----------- */

static fd_api_timer_t *chals_timer;
static fd_api_redis_cmd_t *chals_cmd;

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
    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        fd_acme_chal_t *ch = &fd_acme_shm->chal[i];
        if (ch->type && strcmp(ch->token, token) == 0) {
            ch->remote |= 2; /* still listed */
            fd_api_shm_unlock(&fd_acme_shm->lock);
            return;
        }
        if (ch->type == 0 && free_i < 0)
            free_i = i;
    }
    fd_api_shm_unlock(&fd_acme_shm->lock);
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
    fd_api_shm_lock(&fd_acme_shm->lock);
    if (fd_acme_shm->chal[free_i].type == 0)
        fd_acme_shm->chal[free_i] = tmp;
    fd_api_shm_unlock(&fd_acme_shm->lock);
    fd_api_log(FD_API_LOG_INFO, 0, "acme: took another instance's %s "
               "challenge for %s", type == FD_ACME_HTTP01 ? "http-01"
                                                           : "tls-alpn-01",
               name);
}

static void chals_done(void *data, const fd_api_redis_reply_t *re)
{
    const char *p, *end, *nl;
    time_t now = time(NULL);
    unsigned i;

    (void)data;
    chals_cmd = NULL;
    if (re->type != FD_API_REDIS_STR)
        return; /* Redis away: the copies stay until it answers */
    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++)
        fd_acme_shm->chal[i].remote &= ~2u;
    fd_api_shm_unlock(&fd_acme_shm->lock);
    for (p = re->str.data, end = p + re->str.len; p < end; p = nl + 1) {
        if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
            nl = end;
        chal_take(p, (size_t)(nl - p), now);
    }
    /* those no longer listed: answered, or given up */
    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++)
        if (fd_acme_shm->chal[i].remote == 1)
            memset(&fd_acme_shm->chal[i], 0, sizeof(fd_acme_chal_t));
    fd_api_shm_unlock(&fd_acme_shm->lock);
}

static void chals_ask(void *data)
{
    static const char *argv[] = {
        "EVAL", "return table.concat(redis.call('HVALS', KEYS[1]), '\\n')",
        "1", FD_ACME_CHALS_KEY};
    size_t len[4];
    unsigned i;

    (void)data;
    fd_api_timer_set(chals_timer, 1000);
    if (chals_cmd || fd_acme_shm == NULL)
        return;
    for (i = 0; i < 4; i++)
        len[i] = strlen(argv[i]);
    chals_cmd = fd_api_redis_command(4, argv, len, chals_done, NULL);
}

static void issuer_seen(const char *name, void *conf, void *data)
{
    int *shared = data;

    (void)name;
    have_challenges = 1;
    *shared |= ((fd_acme_issuer_t *)conf)->storage == FD_ACME_STORE_REDIS;
}

static int acme_init_worker(void)
{
    int shared = 0;

    have_challenges = 0;
    chals_cmd = NULL;
    fd_api_section_each("acme", issuer_seen, &shared);
    if (have_challenges)
        fd_api_early_on();
    if (shared && fd_api_worker_number() == 0) {
        if ((chals_timer = fd_api_timer_new(chals_ask, NULL)) == NULL)
            return FD_ERROR;
        fd_api_timer_set(chals_timer, 1);
    }
    return FD_OK;
}

static void acme_exit_worker(void)
{
    if (chals_timer)
        fd_api_timer_cancel(chals_timer);
    chals_timer = NULL;
    fd_api_redis_cancel(chals_cmd);
    chals_cmd = NULL;
}

/* --- fastd -s renew NAME ------------------------------------------------- */

typedef struct {
    const char *arg;
    long master;
    unsigned n;
    int rc;
} renew_t;

static void renew_issuer(const char *name, void *conf, void *data)
{
    fd_acme_issuer_t *is = conf;
    renew_t *rn = data;
    fd_acme_cert_t *c;
    fd_acme_store_t st;
    char key[300];
    unsigned i;

    for (c = is->certs; c && rn->rc == FD_OK; c = c->next) {
        int match = strcmp(name, rn->arg) == 0;
        for (i = 0; i < c->nnames && !match; i++)
            match = strcasecmp(c->names[i], rn->arg) == 0;
        if (!match)
            continue;
        snprintf(key, sizeof(key), "%s.renew-%ld", c->names[0], rn->master);
        if (fd_acme_store_files(&st, is->state_path, 1) != FD_OK ||
            st.put(&st, key, "renew\n", 6) != FD_OK) {
            fprintf(stderr, "fastd: cannot write \"%s/%s\": %s\n",
                    is->state_path, key, strerror(errno));
            rn->rc = FD_ERROR;
            return;
        }
        fprintf(stderr, "fastd: renewal of %s asked for (the helper takes "
                "it within a second)\n", c->names[0]);
        rn->n++;
    }
}

static int acme_command(const char *cmd, const char *arg)
{
    renew_t rn = {.arg = arg, .rc = FD_OK};

    if (strcmp(cmd, "renew") != 0)
        return FD_DECLINED;
    if (arg == NULL) {
        fprintf(stderr, "fastd: renew needs a NAME: a certificate's first "
                "server_name, or an [acme NAME] (all of its certificates)\n");
        return FD_ERROR;
    }
    /* the request names the master (its pid file's): another fastd
     * sharing state_path leaves it alone */
    if ((rn.master = fd_api_master_pid()) <= 0) {
        fprintf(stderr, "fastd: cannot read the pid file: %s\n",
                strerror(errno));
        return FD_ERROR;
    }
    fd_api_section_each("acme", renew_issuer, &rn);
    if (rn.rc == FD_OK && rn.n == 0) {
        fprintf(stderr, "fastd: no ACME certificate \"%s\" (a first "
                "server_name, or an [acme NAME] in use)\n", arg);
        return FD_ERROR;
    }
    return rn.rc;
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

static void status_issuer(const char *name, void *conf, void *data)
{
    fd_acme_issuer_t *is = conf;
    fd_api_status_t *st = data;
    fd_acme_cert_t *c;
    char labels[2048], names[FD_ACME_NAMES_MAX], error[256];
    unsigned i;

    for (c = is->certs; c; c = c->next) {
        fd_acme_slot_t *sl = &fd_acme_shm->slot[c->slot];
        size_t n = 0;
        names[0] = '\0';
        for (i = 0; i < c->nnames && n < sizeof(names); i++)
            n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
                                  i ? " " : "", c->names[i]);
        fd_api_shm_lock(&sl->lock);
        label_text(error, sizeof(error), sl->error);
        fd_api_shm_unlock(&sl->lock);
        snprintf(labels, sizeof(labels),
                 "certificate=\"%s\",issuer=\"%s\",names=\"%s\","
                 "last_error=\"%s\"", c->names[0], name, names, error);
        fd_api_status_gauge(st, "acme_not_after_msec",
                            "the certificate's notAfter (Unix time; 0: "
                            "none yet)", labels,
                            (uint64_t)sl->not_after * 1000);
        fd_api_status_gauge(st, "acme_next_renewal_msec",
                            "when the helper orders it next (Unix time)",
                            labels, (uint64_t)sl->next_renewal * 1000);
        fd_api_status_counter(st, "acme_renewals", "certificates obtained",
                              labels, sl->renewals);
        fd_api_status_counter(st, "acme_failures", "orders that failed",
                              labels, sl->failures);
    }
}

static void acme_status_shared(fd_api_status_t *st)
{
    if (fd_acme_shm != NULL)
        fd_api_section_each("acme", status_issuer, st);
}

static const fd_api_section_t acme_section = {
    .type = "acme",
    .keys = acme_keys,
    .conf_size = sizeof(fd_acme_issuer_t),
    .name_max = 64,
    .init = issuer_init,
    .set = issuer_set,
};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "acme",
    .section = &acme_section,
    .configured = acme_configured,
    .init_worker = acme_init_worker,
    .exit_worker = acme_exit_worker,
    .early = early,
    .status_shared = acme_status_shared,
    .command = acme_command,
    .tls = &provider,
};
