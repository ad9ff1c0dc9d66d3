/*
 * The ACME helper process (fd_acme.h): forked by the master, it talks to
 * the CAs of every [acme NAME] in use and keeps each certificate current.
 * It may block (libcurl's easy interface, sleep between polls): no
 * worker waits on it, and the master only reaps it.
 *
 * RFC 8555: the directory, nonces (a badNonce answer is retried with the
 * nonce it carries, up to 5 times), the account (ES256 or RS256, External
 * Account Binding), the order, its authorizations and their challenges
 * (http-01, tls-alpn-01, published in the shared zone for the workers),
 * finalize with a CSR, the download. The chain served is the one the CA
 * gives first, or with preferred_chain the first (of it and the
 * alternates its Link headers name) whose root has that common name. Every answer is checked
 * before it is used: its size (max_response), its content type, its JSON;
 * a certificate is taken only if it covers the names asked for and
 * matches the key made for it. Renewal: at two thirds of the lifetime
 * less a random part of a thirtieth, or in the window the CA's ACME
 * Renewal Information (RFC 9773) suggests when its directory has
 * renewalInfo; failures are retried after retry_interval, doubled each
 * time up to retry_max, and the certificate served stays.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <sys/random.h>

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "fd_acme.h"

#define NONCE_RETRIES 5
#define POLL_MAX 60 /* a challenge or an order: 60 polls of 1 to 5 s */

typedef struct {
    char *data;
    size_t len, max;
    int too_big;
} body_t;

#define ALT_MAX 4

typedef struct {
    long status;
    char ctype[128];
    char location[1024];
    long retry_after;
    char alt[ALT_MAX][1024];   /* Link: <URL>;rel="alternate" (chains) */
    unsigned nalt;
    body_t body;
} resp_t;

typedef struct {
    fd_acme_issuer_t *is;
    CURL *curl;
    fd_acme_store_t st;
    char nonce[512];
    json_t *dir;
    EVP_PKEY *akey;
    char *jwk;                  /* the account key's JWK, compact JSON */
    char thumb[64];             /* its RFC 7638 thumbprint, base64url */
    char kid[1024];             /* the account URL */
    char err[512];              /* why the last step failed */
} acme_t;

/* --- encodings ----------------------------------------------------------- */

/* "fastd/VERSION", as the CA sees the client */
static const char *user_agent(void)
{
    static char ua[64];

    if (ua[0] == '\0')
        snprintf(ua, sizeof(ua), "fastd/%s", fd_api_fastd_version());
    return ua;
}

static char *b64url(const unsigned char *p, size_t n)
{
    char *out = malloc(4 * ((n + 2) / 3) + 1), *s;
    int len;

    if (out == NULL)
        return NULL;
    len = EVP_EncodeBlock((unsigned char *)out, p, (int)n);
    out[len] = '\0';
    for (s = out; *s; s++)
        if (*s == '+')
            *s = '-';
        else if (*s == '/')
            *s = '_';
        else if (*s == '=') {
            *s = '\0';
            break;
        }
    return out;
}

static int b64url_decode(const char *in, unsigned char *out, size_t size,
                         size_t *n)
{
    size_t len = strlen(in), i, pad = (4 - len % 4) % 4;
    char *t = malloc(len + pad + 1);
    int r;

    if (t == NULL || (len + pad) / 4 * 3 > size) {
        free(t);
        return FD_ERROR;
    }
    for (i = 0; i < len; i++)
        t[i] = in[i] == '-' ? '+' : in[i] == '_' ? '/' : in[i];
    for (; i < len + pad; i++)
        t[i] = '=';
    t[i] = '\0';
    r = EVP_DecodeBlock(out, (unsigned char *)t, (int)(len + pad));
    free(t);
    if (r < 0)
        return FD_ERROR;
    *n = (size_t)r - pad;
    return FD_OK;
}

/* --- keys and the JWS ---------------------------------------------------- */

static EVP_PKEY *key_new(int type)
{
    return type == FD_ACME_KEY_RSA ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
}

static char *key_pem(EVP_PKEY *k)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *p, *out = NULL;
    long n;

    if (b && PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) &&
        (n = BIO_get_mem_data(b, &p)) > 0 && (out = malloc((size_t)n + 1))) {
        memcpy(out, p, (size_t)n);
        out[n] = '\0';
    }
    BIO_free(b);
    return out;
}

static char *bn_b64(EVP_PKEY *k, const char *param)
{
    BIGNUM *bn = NULL;
    unsigned char buf[1024];
    int n;
    char *s;

    if (!EVP_PKEY_get_bn_param(k, param, &bn) ||
        (n = BN_num_bytes(bn)) > (int)sizeof(buf)) {
        BN_free(bn);
        return NULL;
    }
    BN_bn2bin(bn, buf);
    BN_free(bn);
    s = b64url(buf, (size_t)n);
    return s;
}

/* The account key's JWK (members in RFC 7638's order) and thumbprint. */
static int jwk_make(acme_t *a)
{
    char *x = NULL, *y = NULL, buf[2048];
    unsigned char pub[65], md[32];
    size_t n;
    char *t;

    if (EVP_PKEY_is_a(a->akey, "EC")) {
        if (!EVP_PKEY_get_octet_string_param(a->akey,
                                             OSSL_PKEY_PARAM_PUB_KEY, pub,
                                             sizeof(pub), &n) ||
            n != 65)
            return FD_ERROR;
        x = b64url(pub + 1, 32);
        y = b64url(pub + 33, 32);
        if (x == NULL || y == NULL)
            goto failed;
        snprintf(buf, sizeof(buf),
                 "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"%s\","
                 "\"y\":\"%s\"}", x, y);
    } else {
        x = bn_b64(a->akey, OSSL_PKEY_PARAM_RSA_E);
        y = bn_b64(a->akey, OSSL_PKEY_PARAM_RSA_N);
        if (x == NULL || y == NULL)
            goto failed;
        snprintf(buf, sizeof(buf),
                 "{\"e\":\"%s\",\"kty\":\"RSA\",\"n\":\"%s\"}", x, y);
    }
    free(x);
    free(y);
    if ((a->jwk = strdup(buf)) == NULL)
        return FD_ERROR;
    SHA256((unsigned char *)buf, strlen(buf), md);
    if ((t = b64url(md, sizeof(md))) == NULL)
        return FD_ERROR;
    snprintf(a->thumb, sizeof(a->thumb), "%s", t);
    free(t);
    return FD_OK;
failed:
    free(x);
    free(y);
    return FD_ERROR;
}

/* sign input with the account key: ES256 (r || s) or RS256 */
static char *sign(EVP_PKEY *k, const char *input)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char sig[1024], raw[64];
    size_t n = sizeof(sig);
    char *out = NULL;

    if (md == NULL || !EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, k) ||
        !EVP_DigestSign(md, sig, &n, (const unsigned char *)input,
                        strlen(input)))
        goto done;
    if (EVP_PKEY_is_a(k, "EC")) {
        const unsigned char *p = sig;
        ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)n);
        const BIGNUM *r, *s;
        if (es == NULL)
            goto done;
        ECDSA_SIG_get0(es, &r, &s);
        BN_bn2binpad(r, raw, 32);
        BN_bn2binpad(s, raw + 32, 32);
        ECDSA_SIG_free(es);
        out = b64url(raw, 64);
    } else {
        out = b64url(sig, n);
    }
done:
    EVP_MD_CTX_free(md);
    return out;
}

/* A flattened JWS (RFC 7515) of payload ("" for POST-as-GET). */
static char *jws(acme_t *a, const char *url, const char *payload)
{
    json_t *prot;
    char *ph = NULL, *pb = NULL, *pp = NULL, *input = NULL, *sig = NULL;
    char *out = NULL;
    const char *alg = EVP_PKEY_is_a(a->akey, "EC") ? "ES256" : "RS256";

    prot = json_pack("{s:s, s:s, s:s}", "alg", alg, "nonce", a->nonce,
                     "url", url);
    if (prot == NULL)
        return NULL;
    if (a->kid[0])
        json_object_set_new(prot, "kid", json_string(a->kid));
    else
        json_object_set_new(prot, "jwk", json_loads(a->jwk, 0, NULL));
    ph = json_dumps(prot, JSON_COMPACT);
    json_decref(prot);
    if (ph == NULL || (pb = b64url((unsigned char *)ph, strlen(ph))) == NULL ||
        (pp = b64url((const unsigned char *)payload, strlen(payload))) ==
            NULL ||
        (input = malloc(strlen(pb) + strlen(pp) + 2)) == NULL)
        goto done;
    sprintf(input, "%s.%s", pb, pp);
    if ((sig = sign(a->akey, input)) == NULL)
        goto done;
    prot = json_pack("{s:s, s:s, s:s}", "protected", pb, "payload", pp,
                     "signature", sig);
    if (prot) {
        out = json_dumps(prot, JSON_COMPACT);
        json_decref(prot);
    }
done:
    free(ph);
    free(pb);
    free(pp);
    free(input);
    free(sig);
    return out;
}

/* --- HTTP ---------------------------------------------------------------- */

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    body_t *b = ud;
    size_t n = size * nmemb;
    char *d;

    if (b->len + n > b->max) {
        b->too_big = 1;
        return 0; /* curl stops: CURLE_WRITE_ERROR */
    }
    if ((d = realloc(b->data, b->len + n + 1)) == NULL)
        return 0;
    memcpy(d + b->len, p, n);
    b->len += n;
    d[b->len] = '\0';
    b->data = d;
    return n;
}

static void header_value(char *dst, size_t size, const char *p, size_t n)
{
    while (n && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    while (n && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' '))
        n--;
    if (n >= size)
        n = size - 1;
    memcpy(dst, p, n);
    dst[n] = '\0';
}

typedef struct {
    acme_t *a;
    resp_t *r;
} hdr_ctx_t;

/* Link: <URL>;rel="alternate", <URL2>;rel="index": the alternates */
static void link_alternates(resp_t *r, const char *p, size_t n)
{
    const char *end = p + n, *lt, *gt, *next;

    for (; p < end && (lt = memchr(p, '<', (size_t)(end - p))) != NULL;
         p = next) {
        if ((gt = memchr(lt, '>', (size_t)(end - lt))) == NULL)
            return;
        next = memchr(gt, ',', (size_t)(end - gt));
        next = next ? next + 1 : end;
        /* the parameters up to the next link */
        if (r->nalt < ALT_MAX && (size_t)(gt - lt - 1) < sizeof(r->alt[0]) &&
            (memmem(gt, (size_t)(next - gt), "rel=\"alternate\"", 15) ||
             memmem(gt, (size_t)(next - gt), "rel=alternate", 13))) {
            memcpy(r->alt[r->nalt], lt + 1, (size_t)(gt - lt - 1));
            r->alt[r->nalt][gt - lt - 1] = '\0';
            r->nalt++;
        }
    }
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    hdr_ctx_t *h = ud;
    size_t n = size * nmemb;
    char v[64];

    if (n > 13 && strncasecmp(p, "Replay-Nonce:", 13) == 0)
        header_value(h->a->nonce, sizeof(h->a->nonce), p + 13, n - 13);
    else if (n > 9 && strncasecmp(p, "Location:", 9) == 0)
        header_value(h->r->location, sizeof(h->r->location), p + 9, n - 9);
    else if (n > 13 && strncasecmp(p, "Content-Type:", 13) == 0)
        header_value(h->r->ctype, sizeof(h->r->ctype), p + 13, n - 13);
    else if (n > 5 && strncasecmp(p, "Link:", 5) == 0)
        link_alternates(h->r, p + 5, n - 5);
    else if (n > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
        header_value(v, sizeof(v), p + 12, n - 12);
        h->r->retry_after = atol(v);
    }
    return n;
}

static void resp_free(resp_t *r)
{
    free(r->body.data);
    memset(r, 0, sizeof(*r));
}

/* One request: GET (body NULL), HEAD (head) or a JOSE POST. */
static int http(acme_t *a, const char *url, const char *body, int head,
                resp_t *r)
{
    struct curl_slist *hl = NULL;
    hdr_ctx_t hc = {a, r};
    CURLcode rc;

    resp_free(r);
    r->body.max = (size_t)a->is->max_response;
    curl_easy_reset(a->curl);
    curl_easy_setopt(a->curl, CURLOPT_URL, url);
    curl_easy_setopt(a->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(a->curl, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(a->curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(a->curl, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(a->curl, CURLOPT_USERAGENT, user_agent());
    curl_easy_setopt(a->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(a->curl, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(a->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(a->curl, CURLOPT_HEADERDATA, &hc);
    if (a->is->ca_certificate)
        curl_easy_setopt(a->curl, CURLOPT_CAINFO, a->is->ca_certificate);
    if (head)
        curl_easy_setopt(a->curl, CURLOPT_NOBODY, 1L);
    if (body) {
        hl = curl_slist_append(NULL, "Content-Type: application/jose+json");
        curl_easy_setopt(a->curl, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(a->curl, CURLOPT_POSTFIELDS, body);
    }
    rc = curl_easy_perform(a->curl);
    curl_slist_free_all(hl);
    if (rc != CURLE_OK) {
        if (r->body.too_big)
            snprintf(a->err, sizeof(a->err), "%s: the CA's answer is over "
                     "max_response (%ld bytes): refused", url,
                     (long)a->is->max_response);
        else
            snprintf(a->err, sizeof(a->err), "%s: %s", url,
                     curl_easy_strerror(rc));
        return FD_ERROR;
    }
    curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &r->status);
    return FD_OK;
}

static int ctype_is(const resp_t *r, const char *type)
{
    size_t n = strlen(type);

    return strncasecmp(r->ctype, type, n) == 0 &&
           (r->ctype[n] == '\0' || r->ctype[n] == ';' || r->ctype[n] == ' ');
}

/* The answer's JSON object, or NULL after a->err says why (a problem
 * document is quoted: its type and detail). *bad_nonce: it was one. */
static json_t *resp_json(acme_t *a, resp_t *r, const char *what,
                         int *bad_nonce)
{
    json_t *j;
    json_error_t je;

    if (bad_nonce)
        *bad_nonce = 0;
    if (r->status >= 400 && ctype_is(r, "application/problem+json") &&
        (j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0,
                        &je)) != NULL) {
        const char *type = json_string_value(json_object_get(j, "type"));
        const char *detail = json_string_value(json_object_get(j, "detail"));
        if (bad_nonce && type && strstr(type, ":badNonce"))
            *bad_nonce = 1;
        snprintf(a->err, sizeof(a->err), "%s: HTTP %ld, problem %s: %s",
                 what, r->status, type ? type : "(no type)",
                 detail ? detail : "");
        json_decref(j);
        return NULL;
    }
    if (r->status >= 400) {
        snprintf(a->err, sizeof(a->err), "%s: HTTP %ld (%s)", what,
                 r->status, r->ctype[0] ? r->ctype : "no content type");
        return NULL;
    }
    if (!ctype_is(r, "application/json")) {
        snprintf(a->err, sizeof(a->err), "%s: the CA answered with content "
                 "type \"%s\", not application/json: refused", what,
                 r->ctype);
        return NULL;
    }
    j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
    if (j == NULL || !json_is_object(j)) {
        snprintf(a->err, sizeof(a->err), "%s: the CA's JSON is malformed "
                 "(%s, line %d): refused", what,
                 j ? "not an object" : je.text, je.line);
        json_decref(j);
        return NULL;
    }
    return j;
}

static const char *dir_url(acme_t *a, const char *name)
{
    return json_string_value(json_object_get(a->dir, name));
}

static int new_nonce(acme_t *a)
{
    resp_t r = {0};
    const char *url = dir_url(a, "newNonce");
    int rc;

    a->nonce[0] = '\0';
    rc = url ? http(a, url, NULL, 1, &r) : FD_ERROR;
    resp_free(&r);
    if (rc == FD_OK && a->nonce[0] == '\0')
        snprintf(a->err, sizeof(a->err), "newNonce: no Replay-Nonce");
    return rc == FD_OK && a->nonce[0] ? FD_OK : FD_ERROR;
}

/* A signed POST (payload NULL: POST-as-GET), retried on badNonce. For a
 * JSON answer (json != NULL) the parsed object, else the raw response. */
static int post(acme_t *a, const char *url, const char *payload, resp_t *r,
                json_t **json, const char *what)
{
    int i, bad;
    char *body;

    for (i = 0; i <= NONCE_RETRIES; i++) {
        if (a->nonce[0] == '\0' && new_nonce(a) != FD_OK)
            return FD_ERROR;
        if ((body = jws(a, url, payload ? payload : "")) == NULL) {
            snprintf(a->err, sizeof(a->err), "%s: signing failed", what);
            return FD_ERROR;
        }
        a->nonce[0] = '\0'; /* used: the answer brings the next */
        if (http(a, url, body, 0, r) != FD_OK) {
            free(body);
            return FD_ERROR;
        }
        free(body);
        if (json == NULL && r->status < 400)
            return FD_OK;
        if (json == NULL && !ctype_is(r, "application/problem+json")) {
            snprintf(a->err, sizeof(a->err), "%s: HTTP %ld", what,
                     r->status);
            return FD_ERROR;
        }
        if ((*(json ? json : &(json_t *){NULL}) =
                 resp_json(a, r, what, &bad)) != NULL)
            return FD_OK;
        if (!bad)
            return FD_ERROR;
        fd_api_log(FD_API_LOG_INFO, 0, "acme: %s: badNonce, retrying with "
                   "the CA's new nonce", what);
    }
    return FD_ERROR;
}

/* --- account ------------------------------------------------------------- */

static int directory(acme_t *a)
{
    resp_t r = {0};

    if (a->dir)
        return FD_OK;
    if (http(a, a->is->directory, NULL, 0, &r) != FD_OK)
        return FD_ERROR;
    a->dir = resp_json(a, &r, "directory", NULL);
    resp_free(&r);
    if (a->dir == NULL)
        return FD_ERROR;
    if (!dir_url(a, "newNonce") || !dir_url(a, "newAccount") ||
        !dir_url(a, "newOrder")) {
        snprintf(a->err, sizeof(a->err), "directory %s: no newNonce, "
                 "newAccount or newOrder", a->is->directory);
        json_decref(a->dir);
        a->dir = NULL;
        return FD_ERROR;
    }
    return FD_OK;
}

static char *eab(acme_t *a, const char *url)
{
    unsigned char key[256], mac[32];
    unsigned maclen = 0;
    size_t klen;
    json_t *prot, *j;
    char *ph, *pb = NULL, *pp = NULL, *input = NULL, *sig = NULL, *out = NULL;

    if (b64url_decode(a->is->eab_hmac, key, sizeof(key), &klen) != FD_OK) {
        snprintf(a->err, sizeof(a->err), "eab_hmac_key is not base64url");
        return NULL;
    }
    prot = json_pack("{s:s, s:s, s:s}", "alg", "HS256", "kid",
                     a->is->eab_kid, "url", url);
    ph = prot ? json_dumps(prot, JSON_COMPACT) : NULL;
    json_decref(prot);
    if (ph == NULL || (pb = b64url((unsigned char *)ph, strlen(ph))) == NULL ||
        (pp = b64url((unsigned char *)a->jwk, strlen(a->jwk))) == NULL ||
        (input = malloc(strlen(pb) + strlen(pp) + 2)) == NULL)
        goto done;
    sprintf(input, "%s.%s", pb, pp);
    if (HMAC(EVP_sha256(), key, (int)klen, (unsigned char *)input,
             strlen(input), mac, &maclen) == NULL ||
        (sig = b64url(mac, maclen)) == NULL)
        goto done;
    j = json_pack("{s:s, s:s, s:s}", "protected", pb, "payload", pp,
                  "signature", sig);
    if (j) {
        out = json_dumps(j, JSON_COMPACT);
        json_decref(j);
    }
done:
    free(ph);
    free(pb);
    free(pp);
    free(input);
    free(sig);
    return out;
}

static int account(acme_t *a)
{
    char key[128], *data = NULL, *payload;
    size_t len;
    json_t *p, *contact, *j = NULL;
    resp_t r = {0};
    unsigned i;

    if (a->kid[0])
        return FD_OK;
    if (a->akey == NULL) {
        snprintf(key, sizeof(key), "account-%s.key", a->is->name);
        if (a->st.get(&a->st, key, &data, &len, NULL) == FD_OK) {
            BIO *b = BIO_new_mem_buf(data, (int)len);
            a->akey = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
            BIO_free(b);
            free(data);
            if (a->akey == NULL) {
                snprintf(a->err, sizeof(a->err), "%.200s/%s cannot be read",
                         a->st.dir, key);
                return FD_ERROR;
            }
        } else {
            char *pem;
            a->akey = key_new(a->is->key_type);
            pem = a->akey ? key_pem(a->akey) : NULL;
            if (pem == NULL ||
                a->st.put(&a->st, key, pem, strlen(pem)) != FD_OK) {
                snprintf(a->err, sizeof(a->err), "the account key cannot "
                         "be made or written in %.200s: %s", a->st.dir,
                         strerror(errno));
                free(pem);
                EVP_PKEY_free(a->akey);
                a->akey = NULL;
                return FD_ERROR;
            }
            free(pem);
            fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: new account key %s/%s",
                       a->is->name, a->st.dir, key);
        }
        if (jwk_make(a) != FD_OK) {
            snprintf(a->err, sizeof(a->err), "the account key's JWK");
            return FD_ERROR;
        }
    }
    p = json_pack("{s:b}", "termsOfServiceAgreed", 1);
    contact = json_array();
    for (i = 0; i < a->is->contact.n; i++)
        json_array_append_new(contact, json_string(a->is->contact.items[i]));
    json_object_set_new(p, "contact", contact);
    if (a->is->eab_kid) {
        char *e = eab(a, dir_url(a, "newAccount"));
        if (e == NULL) {
            json_decref(p);
            return FD_ERROR;
        }
        json_object_set_new(p, "externalAccountBinding",
                            json_loads(e, 0, NULL));
        free(e);
    }
    payload = json_dumps(p, JSON_COMPACT);
    json_decref(p);
    if (payload == NULL)
        return FD_ERROR;
    if (post(a, dir_url(a, "newAccount"), payload, &r, &j, "newAccount") !=
        FD_OK) {
        free(payload);
        resp_free(&r);
        return FD_ERROR;
    }
    free(payload);
    json_decref(j);
    if (r.location[0] == '\0') {
        snprintf(a->err, sizeof(a->err), "newAccount: no Location");
        resp_free(&r);
        return FD_ERROR;
    }
    snprintf(a->kid, sizeof(a->kid), "%s", r.location);
    resp_free(&r);
    return FD_OK;
}

/* --- challenges in the shared zone --------------------------------------- */

static int chal_publish(int type, const char *token, const char *keyauth,
                        const char *name, int key_type)
{
    fd_acme_chal_t tmp, *ch;
    unsigned i;

    memset(&tmp, 0, sizeof(tmp));
    tmp.type = (uint32_t)type;
    snprintf(tmp.token, sizeof(tmp.token), "%s", token);
    snprintf(tmp.keyauth, sizeof(tmp.keyauth), "%s", keyauth);
    snprintf(tmp.name, sizeof(tmp.name), "%s", name);
    if (type == FD_ACME_TLSALPN01 &&
        fd_acme_self_signed(name, keyauth, key_type, tmp.pem, &tmp.cert_len,
                            &tmp.key_len, sizeof(tmp.pem)) != FD_OK)
        return FD_ERROR;
    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++) {
        ch = &fd_acme_shm->chal[i];
        if (ch->type == 0) {
            *ch = tmp;
            break;
        }
    }
    fd_api_shm_unlock(&fd_acme_shm->lock);
    return i < FD_ACME_CHAL_MAX ? FD_OK : FD_ERROR;
}

static void chal_remove(const char *token)
{
    unsigned i;

    fd_api_shm_lock(&fd_acme_shm->lock);
    for (i = 0; i < FD_ACME_CHAL_MAX; i++)
        if (fd_acme_shm->chal[i].type &&
            strcmp(fd_acme_shm->chal[i].token, token) == 0)
            fd_acme_shm->chal[i].type = 0;
    fd_api_shm_unlock(&fd_acme_shm->lock);
}

static void poll_wait(const resp_t *r)
{
    long s = r->retry_after;

    sleep((unsigned)(s < 1 ? 1 : s > 5 ? 5 : s));
}

/* One authorization: valid already, or its challenge answered. */
static int authorize(acme_t *a, const char *url)
{
    const char *want = a->is->challenge == FD_ACME_HTTP01 ? "http-01"
                                                          : "tls-alpn-01";
    resp_t r = {0};
    json_t *az = NULL, *ch, *c = NULL;
    const char *status, *token = NULL, *curl = NULL, *name;
    char keyauth[256], tok[128], what[300];
    size_t i;
    int n, rc = FD_ERROR;

    if (post(a, url, NULL, &r, &az, "authorization") != FD_OK)
        goto done;
    status = json_string_value(json_object_get(az, "status"));
    name = json_string_value(
        json_object_get(json_object_get(az, "identifier"), "value"));
    if (status && strcmp(status, "valid") == 0) {
        rc = FD_OK;
        goto done;
    }
    ch = json_object_get(az, "challenges");
    for (i = 0; i < json_array_size(ch); i++) {
        c = json_array_get(ch, i);
        if (json_is_string(json_object_get(c, "type")) &&
            strcmp(json_string_value(json_object_get(c, "type")), want) ==
                0) {
            token = json_string_value(json_object_get(c, "token"));
            curl = json_string_value(json_object_get(c, "url"));
            break;
        }
    }
    if (name == NULL || token == NULL || curl == NULL ||
        strlen(token) >= sizeof(tok) || strspn(token,
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
            "0123456789-_") != strlen(token)) {
        snprintf(a->err, sizeof(a->err), "authorization %s: no usable %s "
                 "challenge", url, want);
        goto done;
    }
    snprintf(tok, sizeof(tok), "%s", token);
    snprintf(keyauth, sizeof(keyauth), "%s.%s", tok, a->thumb);
    snprintf(what, sizeof(what), "%s challenge for %s", want, name);
    if (chal_publish(a->is->challenge, tok, keyauth, name,
                     a->is->key_type) != FD_OK) {
        snprintf(a->err, sizeof(a->err), "%s: cannot be published (%d "
                 "under way at most)", what, FD_ACME_CHAL_MAX);
        goto done;
    }
    if (a->st.share) {
        /* the CA may reach any instance: every one's worker 0 copies the
         * fleet's challenges once a second; give them two */
        if (a->st.share(&a->st, a->is->challenge, name, tok, keyauth) !=
            FD_OK) {
            snprintf(a->err, sizeof(a->err), "%s: cannot be told to the "
                     "fleet (Redis)", what);
            goto unpublish;
        }
        sleep(2);
    }
    {
        json_t *j = NULL;
        resp_t cr = {0};
        int prc = post(a, curl, "{}", &cr, &j, what);
        json_decref(j);
        resp_free(&cr);
        if (prc != FD_OK)
            goto unpublish;
    }
    for (n = 0; n < POLL_MAX; n++) {
        poll_wait(&r);
        json_decref(az);
        az = NULL;
        if (post(a, url, NULL, &r, &az, "authorization") != FD_OK)
            goto unpublish;
        status = json_string_value(json_object_get(az, "status"));
        if (status && strcmp(status, "valid") == 0) {
            rc = FD_OK;
            goto unpublish;
        }
        if (status && strcmp(status, "pending") != 0) {
            json_t *e = NULL;
            ch = json_object_get(az, "challenges");
            for (i = 0; i < json_array_size(ch); i++)
                if ((e = json_object_get(json_array_get(ch, i), "error")))
                    break;
            snprintf(a->err, sizeof(a->err), "%s: %s, problem %s: %s", what,
                     status,
                     e ? json_string_value(json_object_get(e, "type")) : "?",
                     e ? json_string_value(json_object_get(e, "detail")) :
                         "");
            goto unpublish;
        }
    }
    snprintf(a->err, sizeof(a->err), "%s: still pending after %d polls",
             what, POLL_MAX);
unpublish:
    chal_remove(tok);
    if (a->st.unshare)
        a->st.unshare(&a->st, tok);
done:
    json_decref(az);
    resp_free(&r);
    return rc;
}

/* --- the order ----------------------------------------------------------- */

static int is_ip(const char *s)
{
    unsigned char b[16];

    return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

static char *csr_der_b64(fd_acme_cert_t *c, EVP_PKEY *k)
{
    X509_REQ *req = X509_REQ_new();
    X509_NAME *nm = X509_NAME_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    X509_EXTENSION *ext = NULL;
    char san[8192];
    unsigned char *der = NULL;
    size_t n = 0;
    unsigned i;
    int len;
    char *out = NULL;

    if (req == NULL || nm == NULL || exts == NULL)
        goto done;
    for (i = 0; i < c->nnames && n < sizeof(san); i++)
        n += (size_t)snprintf(san + n, sizeof(san) - n, "%s%s:%s",
                              i ? "," : "", is_ip(c->names[i]) ? "IP" : "DNS",
                              c->names[i]);
    if (!X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC,
                                    (unsigned char *)c->names[0], -1, -1, 0) ||
        !X509_REQ_set_subject_name(req, nm) ||
        (ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san)) ==
            NULL ||
        !sk_X509_EXTENSION_push(exts, ext) ||
        !X509_REQ_add_extensions(req, exts) || !X509_REQ_set_pubkey(req, k) ||
        !X509_REQ_sign(req, k, EVP_sha256()) ||
        (len = i2d_X509_REQ(req, &der)) <= 0)
        goto done;
    out = b64url(der, (size_t)len);
done:
    OPENSSL_free(der);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_NAME_free(nm);
    X509_REQ_free(req);
    return out;
}

/* Does leaf (with k) cover every name? */
static int cert_fits(X509 *leaf, EVP_PKEY *k, fd_acme_cert_t *c)
{
    unsigned i;

    if (k && X509_check_private_key(leaf, k) != 1) {
        ERR_clear_error();
        return 0;
    }
    for (i = 0; i < c->nnames; i++)
        if ((is_ip(c->names[i])
                 ? X509_check_ip_asc(leaf, c->names[i], 0)
                 : X509_check_host(leaf, c->names[i], 0, 0, NULL)) != 1)
            return 0;
    return 1;
}

/* A PEM chain into its certificates (re-encoded: nothing else passes),
 * leaf first. */
static char *chain_parse(const char *pem, size_t len, X509 **leaf)
{
    BIO *in = BIO_new_mem_buf(pem, (int)len), *out = BIO_new(BIO_s_mem());
    X509 *x;
    char *p, *s = NULL;
    long n;
    int count = 0;

    *leaf = NULL;
    while (in && out && (x = PEM_read_bio_X509(in, NULL, NULL, NULL))) {
        PEM_write_bio_X509(out, x);
        if (count++ == 0)
            *leaf = x;
        else
            X509_free(x);
    }
    ERR_clear_error();
    if (count && (n = BIO_get_mem_data(out, &p)) > 0 &&
        (s = malloc((size_t)n + 1))) {
        memcpy(s, p, (size_t)n);
        s[n] = '\0';
    }
    BIO_free(in);
    BIO_free(out);
    return s;
}

/* The common name of the issuer of a chain's topmost certificate: the
 * root it leads to (certbot's --preferred-chain, Caddy's
 * root_common_name) */
static int chain_root_cn(const char *pem, char *cn, size_t size)
{
    BIO *in = BIO_new_mem_buf(pem, -1);
    X509 *x, *top = NULL;
    int n = -1;

    while (in && (x = PEM_read_bio_X509(in, NULL, NULL, NULL)) != NULL) {
        X509_free(top);
        top = x;
    }
    ERR_clear_error();
    if (top)
        n = X509_NAME_get_text_by_NID(X509_get_issuer_name(top),
                                      NID_commonName, cn, (int)size);
    X509_free(top);
    BIO_free(in);
    return n > 0 ? FD_OK : FD_ERROR;
}

/* preferred_chain: the CA's first chain when its root is the one named,
 * else the first alternate (Link rel="alternate") whose is, else the
 * first; each alternate must hold the same certificate. */
static void choose_chain(acme_t *a, const resp_t *first, char **chain,
                         X509 *leaf)
{
    const char *want = a->is->preferred_chain;
    char cn[256];
    unsigned i;

    if (want == NULL || (chain_root_cn(*chain, cn, sizeof(cn)) == FD_OK &&
                         strcmp(cn, want) == 0))
        return;
    for (i = 0; i < first->nalt; i++) {
        resp_t r = {0};
        X509 *l = NULL;
        char *alt = NULL;
        if (post(a, first->alt[i], NULL, &r, NULL, "an alternate chain") ==
                FD_OK &&
            ctype_is(&r, "application/pem-certificate-chain") &&
            r.body.data &&
            (alt = chain_parse(r.body.data, r.body.len, &l)) != NULL &&
            l && X509_cmp(l, leaf) == 0 &&
            chain_root_cn(alt, cn, sizeof(cn)) == FD_OK &&
            strcmp(cn, want) == 0) {
            free(*chain);
            *chain = alt;
            X509_free(l);
            resp_free(&r);
            fd_api_log(FD_API_LOG_INFO, 0, "acme: the chain to \"%s\" (an "
                       "alternate), as preferred_chain asks", want);
            return;
        }
        free(alt);
        X509_free(l);
        resp_free(&r);
    }
    fd_api_log(FD_API_LOG_WARN, 0, "acme: no chain of the CA's leads to "
               "\"%s\" (preferred_chain): serving its first", want);
}

static int order(acme_t *a, fd_acme_cert_t *c, char **chain, X509 **leaf,
                 EVP_PKEY **key)
{
    json_t *p, *ids, *o = NULL, *j = NULL;
    resp_t r = {0};
    char *payload = NULL, *csr = NULL, ourl[1024], *fin = NULL;
    const char *status, *cert_url;
    EVP_PKEY *k = NULL;
    size_t i;
    int n, rc = FD_ERROR;

    *chain = NULL;
    *leaf = NULL;
    *key = NULL;
    ids = json_array();
    for (i = 0; i < c->nnames; i++)
        json_array_append_new(ids, json_pack("{s:s, s:s}", "type",
                                             is_ip(c->names[i]) ? "ip"
                                                                : "dns",
                                             "value", c->names[i]));
    p = json_pack("{s:o}", "identifiers", ids);
    if (a->is->profile) {
        json_t *profiles = json_object_get(json_object_get(a->dir, "meta"),
                                           "profiles");
        if (json_object_get(profiles, a->is->profile))
            json_object_set_new(p, "profile",
                                json_string(a->is->profile));
        else
            fd_api_log(FD_API_LOG_WARN, 0, "acme: %s: the CA offers no "
                       "profile \"%s\"; ordering without one",
                       a->is->name, a->is->profile);
    }
    payload = json_dumps(p, JSON_COMPACT);
    json_decref(p);
    if (payload == NULL ||
        post(a, dir_url(a, "newOrder"), payload, &r, &o, "newOrder") != FD_OK)
        goto done;
    snprintf(ourl, sizeof(ourl), "%s", r.location);
    {
        json_t *az = json_object_get(o, "authorizations");
        if (!json_is_array(az) || json_array_size(az) == 0 ||
            !json_is_string(json_object_get(o, "finalize")) ||
            ourl[0] == '\0') {
            snprintf(a->err, sizeof(a->err), "newOrder: no authorizations, "
                     "finalize or Location: refused");
            goto done;
        }
        for (i = 0; i < json_array_size(az); i++)
            if (!json_is_string(json_array_get(az, i)) ||
                authorize(a, json_string_value(json_array_get(az, i))) !=
                    FD_OK)
                goto done;
        fin = strdup(json_string_value(json_object_get(o, "finalize")));
    }
    if (fin == NULL || (k = key_new(a->is->key_type)) == NULL ||
        (csr = csr_der_b64(c, k)) == NULL) {
        snprintf(a->err, sizeof(a->err), "the key or CSR cannot be made");
        goto done;
    }
    free(payload);
    payload = malloc(strlen(csr) + 16);
    if (payload == NULL)
        goto done;
    sprintf(payload, "{\"csr\":\"%s\"}", csr);
    json_decref(o);
    o = NULL;
    if (post(a, fin, payload, &r, &o, "finalize") != FD_OK)
        goto done;
    for (n = 0; n < POLL_MAX; n++) {
        status = json_string_value(json_object_get(o, "status"));
        if (status && strcmp(status, "valid") == 0)
            break;
        if (status == NULL || (strcmp(status, "processing") != 0 &&
                               strcmp(status, "pending") != 0 &&
                               strcmp(status, "ready") != 0)) {
            json_t *e = json_object_get(o, "error");
            snprintf(a->err, sizeof(a->err), "order %.200s: %s%s%s", ourl,
                     status ? status : "no status",
                     e ? ", problem " : "",
                     e ? json_string_value(json_object_get(e, "type")) : "");
            goto done;
        }
        poll_wait(&r);
        json_decref(o);
        o = NULL;
        if (post(a, ourl, NULL, &r, &o, "order") != FD_OK)
            goto done;
    }
    cert_url = json_string_value(json_object_get(o, "certificate"));
    if (cert_url == NULL) {
        snprintf(a->err, sizeof(a->err), "order %.200s: never valid", ourl);
        goto done;
    }
    if (post(a, cert_url, NULL, &r, NULL, "certificate") != FD_OK)
        goto done;
    if (!ctype_is(&r, "application/pem-certificate-chain")) {
        snprintf(a->err, sizeof(a->err), "certificate: content type \"%s\", "
                 "not application/pem-certificate-chain: refused", r.ctype);
        goto done;
    }
    *chain = r.body.data ? chain_parse(r.body.data, r.body.len, leaf) : NULL;
    if (*chain == NULL || *leaf == NULL) {
        snprintf(a->err, sizeof(a->err), "certificate: no PEM certificate "
                 "in the CA's answer: refused");
        goto done;
    }
    if (!cert_fits(*leaf, k, c)) {
        snprintf(a->err, sizeof(a->err), "certificate: the CA's certificate "
                 "is not for %s%s or not for the key asked for: refused",
                 c->names[0], c->nnames > 1 ? " and the other names" : "");
        goto done;
    }
    choose_chain(a, &r, chain, *leaf);
    *key = k;
    k = NULL;
    rc = FD_OK;
done:
    if (rc != FD_OK) {
        free(*chain);
        *chain = NULL;
        X509_free(*leaf);
        *leaf = NULL;
    }
    EVP_PKEY_free(k);
    json_decref(o);
    json_decref(j);
    resp_free(&r);
    free(payload);
    free(csr);
    free(fin);
    return rc;
}

/* --- self-signed: the placeholder, the tls-alpn-01 certificate ----------- */

int fd_acme_self_signed(const char *name, const char *keyauth, int key_type,
                        char *pem, uint32_t *cert_len, uint32_t *key_len,
                        size_t size)
{
    EVP_PKEY *k = key_new(key_type);
    X509 *x = X509_new();
    X509_NAME *nm;
    X509_EXTENSION *ext;
    X509V3_CTX v3;
    BIO *b = BIO_new(BIO_s_mem());
    char san[300], *p;
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    long n;
    int rc = FD_ERROR;

    if (k == NULL || x == NULL || b == NULL ||
        RAND_bytes(serial, sizeof(serial)) != 1)
        goto done;
    serial[0] &= 0x7f;
    bn = BN_bin2bn(serial, sizeof(serial), NULL);
    nm = X509_get_subject_name(x);
    snprintf(san, sizeof(san), "%s:%s", is_ip(name) ? "IP" : "DNS", name);
    if (bn == NULL || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
        !X509_set_version(x, 2) ||
        !X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC,
                                    (const unsigned char *)name, -1, -1, 0) ||
        !X509_set_issuer_name(x, nm) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), 7 * 86400) ||
        !X509_set_pubkey(x, k))
        goto done;
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    if ((ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san)) ==
            NULL ||
        !X509_add_ext(x, ext, -1)) {
        X509_EXTENSION_free(ext);
        goto done;
    }
    X509_EXTENSION_free(ext);
    if (keyauth) {
        /* RFC 8737 3: id-pe-acmeIdentifier, critical, the DER OCTET
         * STRING of SHA-256(key authorization) */
        unsigned char v[34];
        ASN1_OBJECT *obj = OBJ_txt2obj("1.3.6.1.5.5.7.1.31", 1);
        ASN1_OCTET_STRING *os = ASN1_OCTET_STRING_new();
        v[0] = 0x04;
        v[1] = 32;
        SHA256((const unsigned char *)keyauth, strlen(keyauth), v + 2);
        ext = obj && os && ASN1_OCTET_STRING_set(os, v, sizeof(v))
                  ? X509_EXTENSION_create_by_OBJ(NULL, obj, 1, os)
                  : NULL;
        ASN1_OBJECT_free(obj);
        ASN1_OCTET_STRING_free(os);
        if (ext == NULL || !X509_add_ext(x, ext, -1)) {
            X509_EXTENSION_free(ext);
            goto done;
        }
        X509_EXTENSION_free(ext);
    }
    if (!X509_sign(x, k, EVP_sha256()) || !PEM_write_bio_X509(b, x))
        goto done;
    *cert_len = (uint32_t)BIO_pending(b);
    if (!PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL))
        goto done;
    n = BIO_get_mem_data(b, &p);
    if (n <= 0 || (size_t)n > size)
        goto done;
    memcpy(pem, p, (size_t)n);
    *key_len = (uint32_t)n - *cert_len;
    rc = FD_OK;
done:
    ERR_clear_error();
    BN_free(bn);
    BIO_free(b);
    X509_free(x);
    EVP_PKEY_free(k);
    return rc;
}

/* --- the helper's loop --------------------------------------------------- */

typedef struct {
    fd_acme_cert_t *c;
    acme_t *a;                 /* its issuer's client */
    time_t next;               /* when to order */
    unsigned fails;
    time_t seen;               /* the stored file's mtime we took */
    X509 *leaf;                /* the certificate served, for ARI */
    time_t ari_next;           /* when to ask renewalInfo again */
} job_t;

#define ARI_DEFAULT_RETRY (6 * 3600)

static time_t asn1_time(const ASN1_TIME *t)
{
    struct tm tm;

    if (!ASN1_TIME_to_tm(t, &tm))
        return 0;
    return timegm(&tm);
}

static uint64_t rnd(uint64_t n)
{
    uint64_t v = 0;

    if (n == 0)
        return 0;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v))
        v = (uint64_t)rand();
    return v % n;
}

/* RFC 3339 to Unix time; 0 on error */
static time_t rfc3339(const char *s)
{
    struct tm tm;
    const char *e;

    memset(&tm, 0, sizeof(tm));
    if (s == NULL || (e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)) == NULL)
        return 0;
    return timegm(&tm);
}

/* ARI (RFC 9773): a time in the CA's window, when it has renewalInfo
 * (0: none); *retry: when to ask again (its Retry-After, else 6 h). */
static time_t ari(acme_t *a, X509 *leaf, long *retry, time_t keep)
{
    const char *base = dir_url(a, "renewalInfo");
    AUTHORITY_KEYID *akid;
    const ASN1_INTEGER *sn;
    unsigned char *der = NULL;
    char *k = NULL, *s = NULL, url[2048];
    resp_t r = {0};
    json_t *j = NULL, *w;
    time_t start, end, t = 0;
    int len;

    *retry = ARI_DEFAULT_RETRY;
    if (base == NULL)
        return 0;
    akid = X509_get_ext_d2i(leaf, NID_authority_key_identifier, NULL, NULL);
    sn = X509_get0_serialNumber(leaf);
    if (akid == NULL || akid->keyid == NULL ||
        (len = i2d_ASN1_INTEGER(sn, &der)) <= 2 || der[1] >= 0x80)
        goto done;
    /* the INTEGER's content octets: a serial is at most 20 */
    k = b64url(akid->keyid->data, (size_t)akid->keyid->length);
    s = b64url(der + 2, (size_t)len - 2);
    if (k == NULL || s == NULL)
        goto done;
    snprintf(url, sizeof(url), "%s%s%s.%s", base,
             base[strlen(base) - 1] == '/' ? "" : "/", k, s);
    if (http(a, url, NULL, 0, &r) != FD_OK ||
        (j = resp_json(a, &r, "renewalInfo", NULL)) == NULL) {
        fd_api_log(FD_API_LOG_WARN, 0, "acme: %s: %s", a->is->name, a->err);
        goto done;
    }
    if (r.retry_after > 0)
        *retry = FD_ACME_MIN(r.retry_after, 86400);
    w = json_object_get(j, "suggestedWindow");
    start = rfc3339(json_string_value(json_object_get(w, "start")));
    end = rfc3339(json_string_value(json_object_get(w, "end")));
    if (start == 0 || end < start) {
        fd_api_log(FD_API_LOG_WARN, 0, "acme: %s: renewalInfo %s has no "
                   "valid suggestedWindow: ignored", a->is->name, url);
        goto done;
    }
    /* a time already chosen in the same window stays */
    t = keep >= start && keep <= end
            ? keep
            : start + (time_t)rnd((uint64_t)(end - start) + 1);
    if (t == 0)
        t = 1;
done:
    AUTHORITY_KEYID_free(akid);
    OPENSSL_free(der);
    free(k);
    free(s);
    json_decref(j);
    resp_free(&r);
    return t;
}

/* When to renew leaf: ARI's window, else 2/3 of its life less jitter. */
static time_t renew_at(acme_t *a, X509 *leaf, int ask_ari, long *retry)
{
    time_t nb = asn1_time(X509_get0_notBefore(leaf));
    time_t na = asn1_time(X509_get0_notAfter(leaf));
    time_t life = na - nb, t;

    *retry = ARI_DEFAULT_RETRY;
    if (ask_ari && (t = ari(a, leaf, retry, 0)) != 0)
        return t;
    if (life <= 0)
        return time(NULL);
    return nb + life * 2 / 3 - (time_t)rnd((uint64_t)life / 30 + 1);
}

/* Put a chain and key into the certificate's slot, for the workers. */
static void publish(job_t *j, const char *chain, const char *key, X509 *leaf)
{
    fd_acme_slot_t *s = &fd_acme_shm->slot[j->c->slot];
    size_t cl = strlen(chain), kl = strlen(key);

    if (cl + kl > sizeof(s->pem)) {
        fd_api_log(FD_API_LOG_ERR, 0, "acme: %s: the chain and key are over "
                   "%d bytes: not served", j->c->names[0], FD_ACME_PEM_MAX);
        return;
    }
    fd_api_shm_lock(&s->lock);
    if (s->cert_len == cl && s->key_len == kl &&
        memcmp(s->pem, chain, cl) == 0 && memcmp(s->pem + cl, key, kl) == 0) {
        fd_api_shm_unlock(&s->lock);
        return; /* the workers have it */
    }
    memcpy(s->pem, chain, cl);
    memcpy(s->pem + cl, key, kl);
    s->cert_len = (uint32_t)cl;
    s->key_len = (uint32_t)kl;
    s->not_after = asn1_time(X509_get0_notAfter(leaf));
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_RELEASE);
    fd_api_shm_unlock(&s->lock);
}

static void set_error(job_t *j, const char *err)
{
    fd_acme_slot_t *s = &fd_acme_shm->slot[j->c->slot];

    fd_api_shm_lock(&s->lock);
    snprintf(s->error, sizeof(s->error), "%s", err);
    fd_api_shm_unlock(&s->lock);
}

/* The stored certificate, if it fits: published, and its renewal time in
 * *at. FD_OK, FD_DECLINED (none or not fitting). */
static int load_stored(job_t *j, time_t *at, int ask_ari)
{
    char key[300], *data = NULL, *kb, *chain = NULL, *kp;
    size_t len;
    time_t mt = 0;
    X509 *leaf = NULL;
    EVP_PKEY *k = NULL;
    BIO *b;
    int rc = FD_DECLINED;

    snprintf(key, sizeof(key), "%s.pem", j->c->names[0]);
    if (j->a->st.get(&j->a->st, key, &data, &len, &mt) != FD_OK)
        return FD_DECLINED;
    j->seen = mt;
    if ((kb = strstr(data, "-----BEGIN PRIVATE KEY")) == NULL)
        goto done;
    chain = chain_parse(data, (size_t)(kb - data), &leaf);
    b = BIO_new_mem_buf(kb, (int)(len - (size_t)(kb - data)));
    k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (chain == NULL || leaf == NULL || k == NULL ||
        !cert_fits(leaf, k, j->c)) {
        fd_api_log(FD_API_LOG_WARN, 0, "acme: %s/%s does not hold a "
                   "certificate and key for %s: ordering a new one",
                   j->a->st.dir, key, j->c->names[0]);
        goto done;
    }
    if ((kp = key_pem(k)) == NULL)
        goto done;
    publish(j, chain, kp, leaf);
    free(kp);
    {
        long retry;
        *at = renew_at(j->a, leaf, ask_ari, &retry);
    }
    X509_free(j->leaf);
    j->leaf = X509_dup(leaf);
    rc = FD_OK;
done:
    free(data);
    free(chain);
    X509_free(leaf);
    EVP_PKEY_free(k);
    return rc;
}

static void schedule(job_t *j, time_t at)
{
    fd_acme_slot_t *s = &fd_acme_shm->slot[j->c->slot];

    j->next = at;
    s->next_renewal = at;
}

static int stored_changed(job_t *j)
{
    char key[300];
    time_t mt = 0;

    snprintf(key, sizeof(key), "%s.pem", j->c->names[0]);
    return j->a->st.mtime(&j->a->st, key, &mt) == FD_OK && mt != j->seen;
}

static void renew(job_t *j, int forced)
{
    acme_t *a = j->a;
    char key[300], *chain = NULL, *kp = NULL, *data = NULL;
    X509 *leaf = NULL;
    EVP_PKEY *k = NULL;
    time_t at, now = time(NULL);
    int lock;
    uint64_t wait;

    snprintf(key, sizeof(key), "%s.pem", j->c->names[0]);
    lock = a->st.lock(&a->st, j->c->names[0]);
    if (lock < 0) {
        snprintf(a->err, sizeof(a->err), "the lock %.200s/%.100s.lock: %s",
                 a->st.dir, j->c->names[0], strerror(errno));
        goto failed;
    }
    /* another fastd sharing state_path may have renewed it meanwhile
     * (the file is not the one this helper took last) */
    if (!forced && stored_changed(j) && load_stored(j, &at, 0) == FD_OK &&
        at > now) {
        a->st.unlock(&a->st, lock);
        fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: a current certificate is "
                   "in %s (another fastd ordered it): serving it",
                   j->c->names[0], a->st.dir);
        j->fails = 0;
        schedule(j, at);
        return;
    }
    fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: ordering a certificate from "
               "%s", j->c->names[0], a->is->directory);
    /* each order reads the directory afresh: a CA's meta (profiles, terms)
     * may have changed since the last, weeks ago */
    json_decref(a->dir);
    a->dir = NULL;
    if (directory(a) != FD_OK || account(a) != FD_OK ||
        order(a, j->c, &chain, &leaf, &k) != FD_OK ||
        (kp = key_pem(k)) == NULL) {
        a->st.unlock(&a->st, lock);
        goto failed;
    }
    if ((data = malloc(strlen(chain) + strlen(kp) + 1)) == NULL) {
        a->st.unlock(&a->st, lock);
        goto failed;
    }
    sprintf(data, "%s%s", chain, kp);
    if (a->st.put(&a->st, key, data, strlen(data)) != FD_OK)
        fd_api_log(FD_API_LOG_ERR, errno, "acme: %s: cannot store %s/%s "
                   "(served, but ordered again at the next start)",
                   j->c->names[0], a->st.dir, key);
    else {
        char *back = NULL;
        size_t blen;
        if (a->st.get(&a->st, key, &back, &blen, &j->seen) != FD_OK)
            j->seen = 0;
        free(back);
    }
    a->st.unlock(&a->st, lock);
    publish(j, chain, kp, leaf);
    {
        long retry;
        at = renew_at(a, leaf, 1, &retry);
        j->ari_next = time(NULL) + retry;
    }
    X509_free(j->leaf);
    j->leaf = X509_dup(leaf);
    {
        fd_acme_slot_t *s = &fd_acme_shm->slot[j->c->slot];
        char na[64];
        time_t t = asn1_time(X509_get0_notAfter(leaf));
        struct tm tm;
        strftime(na, sizeof(na), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        __atomic_add_fetch(&s->renewals, 1, __ATOMIC_RELAXED);
        fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: new certificate, valid "
                   "until %s, renewal in %lds", j->c->names[0], na,
                   (long)(at - time(NULL)));
    }
    set_error(j, "");
    j->fails = 0;
    schedule(j, at);
    goto done;

failed:
    j->fails++;
    wait = a->is->retry;
    for (unsigned i = 1; i < j->fails && wait < a->is->retry_max; i++)
        wait *= 2;
    wait = FD_ACME_MIN(wait, a->is->retry_max);
    __atomic_add_fetch(&fd_acme_shm->slot[j->c->slot].failures, 1,
                       __ATOMIC_RELAXED);
    set_error(j, a->err);
    fd_api_log(FD_API_LOG_ERR, 0, "acme: %s: %s; the certificate served "
               "stays, retrying in %llus (failure %u)", j->c->names[0],
               a->err, (unsigned long long)(wait / 1000), j->fails);
    schedule(j, now + (time_t)(wait / 1000));
    /* a nonce or directory may be what went wrong: start afresh */
    json_decref(a->dir);
    a->dir = NULL;
    a->nonce[0] = '\0';
    a->kid[0] = '\0';
done:
    free(data);
    free(chain);
    free(kp);
    X509_free(leaf);
    EVP_PKEY_free(k);
}

/* Ask the CA's renewalInfo again: a window moved (earlier: a revoked
 * certificate, an incident) reschedules the renewal. */
static void ari_check(job_t *j)
{
    long retry = ARI_DEFAULT_RETRY;
    time_t t = 0;

    if (directory(j->a) == FD_OK && dir_url(j->a, "renewalInfo"))
        t = ari(j->a, j->leaf, &retry, j->next);
    j->ari_next = time(NULL) + (retry > 0 ? retry : 1);
    if (t == 0 || t == j->next || j->fails)
        return; /* no window, the same, or a failure's retry under way */
    fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: the CA's renewal window "
               "(ARI) moves the renewal %s, in %lds", j->c->names[0],
               t < j->next ? "earlier" : "later", (long)(t - time(NULL)));
    schedule(j, t);
}

/* The helper's state: one job a certificate */
static job_t jobs[FD_ACME_CERT_MAX];
static unsigned njobs;

static void helper_issuer(const char *name, void *conf, void *data)
{
    fd_acme_issuer_t *is = conf;
    fd_acme_cert_t *c;
    acme_t *a;

    (void)data;
    if (is->certs == NULL)
        return;
    if ((a = calloc(1, sizeof(*a))) == NULL ||
        (a->curl = curl_easy_init()) == NULL)
        _exit(2);
    a->is = is;
    if ((is->storage == FD_ACME_STORE_REDIS
             ? fd_acme_store_redis(&a->st, is->state_path, name)
             : fd_acme_store_files(&a->st, is->state_path, 1)) != FD_OK) {
        fd_api_log(FD_API_LOG_ERR, errno, "acme: state_path \"%s\" cannot "
                   "be made", is->state_path);
        _exit(2);
    }
    for (c = is->certs; c && njobs < FD_ACME_CERT_MAX; c = c->next) {
        job_t *j = &jobs[njobs++];
        time_t at;
        memset(j, 0, sizeof(*j));
        j->c = c;
        j->a = a;
        if (load_stored(j, &at, 0) == FD_OK) {
            schedule(j, at);
        } else {
            /* said here too: the master said it before its error log
             * was open (on stderr) */
            fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: no certificate "
                       "yet, %s until the first arrives", c->names[0],
                       is->placeholder ? "serving a self-signed "
                                         "placeholder"
                                       : "refusing handshakes");
            schedule(j, time(NULL));
        }
    }
}

static int helper_init(void *data)
{
    (void)data;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fd_api_log(FD_API_LOG_ERR, 0, "acme: curl_global_init() failed");
        return FD_ERROR;
    }
    njobs = 0;
    fd_api_section_each("acme", helper_issuer, NULL);
    fd_api_log(FD_API_LOG_NOTICE, 0, "acme: helper started, %u "
               "certificate%s", njobs, njobs == 1 ? "" : "s");
    return FD_OK;
}

/* Once a second: the renewals asked for, the certificates another fastd
 * stored, the CA's renewal windows, and the renewals due */
static void helper_tick(void *data)
{
    time_t now = time(NULL);
    unsigned i;

    (void)data;
    for (i = 0; i < njobs; i++) {
        job_t *j = &jobs[i];
        char key[300], *d = NULL;
        size_t l;
        time_t mt = 0, at;
        int forced = 0;

        snprintf(key, sizeof(key), "%s.renew-%ld", j->c->names[0],
                 (long)getppid());
        /* this instance's own request: in its own files */
        if (j->a->st.local->get(j->a->st.local, key, &d, &l, NULL) ==
            FD_OK) {
            j->a->st.local->del(j->a->st.local, key);
            fd_api_log(FD_API_LOG_NOTICE, 0, "acme: %s: renewal asked for "
                       "(fastd -s renew)", j->c->names[0]);
            forced = 1;
        }
        free(d);
        /* what another fastd sharing the store stored */
        snprintf(key, sizeof(key), "%s.pem", j->c->names[0]);
        if (!forced && j->a->st.mtime(&j->a->st, key, &mt) == FD_OK &&
            mt != j->seen && load_stored(j, &at, 0) == FD_OK) {
            j->fails = 0;
            schedule(j, at);
        }
        if (!forced && j->leaf && now >= j->ari_next)
            ari_check(j);
        if (forced || now >= j->next)
            renew(j, forced);
    }
}

const fd_api_helper_t fd_acme_helper = {
    .title = "acme helper",
    .interval_msec = 1000,
    .init = helper_init,
    .tick = helper_tick,
};
