/*
 * QUIC's TLS 1.3 on GnuTLS (ngtcp2's crypto-gnutls): Debian 12's OpenSSL
 * 3.0 has no QUIC API, so the QUIC side alone uses GnuTLS while TCP keeps
 * OpenSSL (fd_ssl.c). Everything GnuTLS is in this file, so that moving to
 * OpenSSL's own QUIC stack (3.5+) is a change here and in fd_quic.c's
 * calls to it, nothing else.
 *
 * Each [server] of a quic address gets its own credentials, built by the
 * master at load from the very files its ssl address reads: its
 * ssl_certificate/ssl_certificate_key pairs and its ssl_client_certificate
 * CAs. As on TCP (fd_ssl.c's client_hello_cb), the client's SNI name
 * chooses the [server] by server_name at the ClientHello (no name, or one
 * no server has: the address's default), and that server's certificates
 * and client verification make the handshake; the connection belongs to
 * it (fd_quic_tls_server(), fd_http.c's find_server: a request for a
 * server with other terms gets 421).
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <openssl/x509.h>

#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_quic_tls.h"
#include "fd_ssl.h"

/* TLS 1.3 only (RFC 9001 4.2), the AEADs QUIC defines, no middlebox
 * compatibility mode (RFC 9001 8.4) */
#define QUIC_PRIORITY                                                        \
    "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"             \
    "-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:+AES-128-CCM:" \
    "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:"           \
    "+GROUP-SECP521R1"

/* What a quic address holds: per server (ls->servers[i]), its
 * credentials and how it verifies clients */
typedef struct {
    gnutls_certificate_credentials_t cred;
    gnutls_certificate_request_t request;
    int tickets;                /* ssl_session_tickets */
    unsigned timeout;           /* ssl_session_timeout, seconds */
    unsigned char id[FD_SSL_SERVER_ID_LEN]; /* fd_ssl_server_id() */
} quic_server_t;

typedef struct {
    unsigned n;
    quic_server_t srv[];
} quic_creds_t;

/* A connection's session, behind gnutls_session_get_ptr(): the conn ref
 * first, as ngtcp2's callbacks take the pointer to be */
typedef struct {
    ngtcp2_crypto_conn_ref ref;
    const fd_listening_t *ls;
    fd_http_server_t *srv;      /* the handshake's, once the hello came */
    unsigned verified:1;        /* verify_status holds the peer's chain's */
    unsigned offered:1;         /* the ClientHello offers a ticket: */
    unsigned char ticket[16];   /* the name of the key that made it */
    unsigned verify_status;     /* gnutls_certificate_verify_peers's */
} quic_session_t;

/* The purpose a client certificate must have, as OpenSSL's server checks */
static gnutls_typed_vdata_st client_purpose = {
    .type = GNUTLS_DT_KEY_PURPOSE_OID,
    .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT,
};

/* ssl_verify_client = on: a certificate that does not verify fails the
 * handshake (none at all is GNUTLS_CERT_REQUIRE's refusal) */
static int verify_strict(gnutls_session_t s)
{
    unsigned status;

    if (gnutls_certificate_verify_peers(s, &client_purpose, 1, &status) < 0 ||
        status != 0)
        return GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR;
    return 0;
}

static int server_creds(quic_server_t *q, const fd_listening_t *ls,
                        const fd_http_server_t *srv, char *err, size_t errlen)
{
    fd_ssl_terms_t terms;
    const char *cert, *key;
    unsigned k, n;
    int rv;

    fd_ssl_server_terms(srv, &terms);
    if (!terms.tls13) {
        snprintf(err, errlen, "%s:%d: [server] listens on %s quic, which is "
                 "TLS 1.3, but its ssl_protocols has no TLSv1.3", srv->file,
                 srv->line, ls->text);
        return FD_ERROR;
    }
    if (terms.verify != FD_SSL_VERIFY_OFF && terms.client_ca == NULL) {
        snprintf(err, errlen, "%s:%d: ssl_verify_client needs "
                 "ssl_client_certificate", terms.verify_file,
                 terms.verify_line);
        return FD_ERROR;
    }
    if (gnutls_certificate_allocate_credentials(&q->cred) < 0) {
        snprintf(err, errlen, "gnutls_certificate_allocate_credentials()"
                 " failed");
        return FD_ERROR;
    }
    for (k = 0, n = 1; k < n; k++) {
        n = fd_ssl_server_certs(srv, k, &cert, &key);
        if (n == 0) {
            snprintf(err, errlen, "%s:%d: [server] listens on %s quic but "
                     "has no ssl_certificate", srv->file, srv->line,
                     ls->text);
            return FD_ERROR;
        }
        rv = gnutls_certificate_set_x509_key_file2(q->cred, cert, key,
                                                   GNUTLS_X509_FMT_PEM,
                                                   NULL, 0);
        if (rv < 0) {
            snprintf(err, errlen, "%s:%d: GnuTLS cannot load ssl_certificate"
                     " \"%s\" with its key \"%s\" for %s quic: %s",
                     srv->file, srv->line, cert, key, ls->text,
                     gnutls_strerror(rv));
            return FD_ERROR;
        }
    }
    q->tickets = terms.session_tickets;
    q->timeout = (unsigned)(terms.session_timeout / 1000);
    if (!fd_ssl_server_id(srv, q->id)) {
        snprintf(err, errlen, "%s:%d: the server's TLS id could not be "
                 "made", srv->file, srv->line);
        return FD_ERROR;
    }
    q->request = GNUTLS_CERT_IGNORE;
    if (terms.client_ca) {
        rv = gnutls_certificate_set_x509_trust_file(q->cred, terms.client_ca,
                                                    GNUTLS_X509_FMT_PEM);
        if (rv <= 0) {
            snprintf(err, errlen, "%s:%d: GnuTLS cannot load "
                     "ssl_client_certificate \"%s\" for %s quic: %s",
                     srv->file, srv->line, terms.client_ca, ls->text,
                     rv < 0 ? gnutls_strerror(rv) : "no certificate");
            return FD_ERROR;
        }
    }
    if (terms.verify == FD_SSL_VERIFY_ON) {
        q->request = GNUTLS_CERT_REQUIRE;
        gnutls_certificate_set_verify_function(q->cred, verify_strict);
    } else if (terms.verify == FD_SSL_VERIFY_OPTIONAL) {
        /* asked for, whatever comes is accepted: $ssl_client_verify
         * says what it was */
        q->request = GNUTLS_CERT_REQUEST;
    }
    return FD_OK;
}

int fd_quic_tls_init_cycle(fd_cycle_t *cycle, char *err, size_t errlen)
{
    fd_listening_t *ls;
    gnutls_priority_t prio;
    const char *where;

    /* the priority string is checked once, so a GnuTLS that refuses it
     * fails -t rather than every handshake */
    if (gnutls_priority_init(&prio, QUIC_PRIORITY, &where) < 0) {
        snprintf(err, errlen, "GnuTLS refuses the QUIC priority string "
                 "at \"%s\"", where);
        return FD_ERROR;
    }
    gnutls_priority_deinit(prio);
    for (ls = cycle->listening; ls; ls = ls->next) {
        quic_creds_t *qs;
        unsigned i;

        if (!ls->quic)
            continue;
        qs = fd_pcalloc(cycle->pool,
                        sizeof(*qs) + ls->nservers * sizeof(qs->srv[0]));
        if (qs == NULL) {
            snprintf(err, errlen, "out of memory");
            return FD_ERROR;
        }
        ls->quic_tls = qs; /* freed with the cycle from now on */
        for (i = 0; i < ls->nservers; i++) {
            qs->n = i + 1;
            if (server_creds(&qs->srv[i], ls, ls->servers[i], err,
                             errlen) != FD_OK)
                return FD_ERROR;
        }
    }
    return FD_OK;
}

void fd_quic_tls_free_cycle(fd_cycle_t *cycle)
{
    fd_listening_t *ls;
    unsigned i;

    for (ls = cycle->listening; ls; ls = ls->next) {
        quic_creds_t *qs = ls->quic_tls;
        if (qs == NULL)
            continue;
        for (i = 0; i < qs->n; i++)
            if (qs->srv[i].cred)
                gnutls_certificate_free_credentials(qs->srv[i].cred);
        ls->quic_tls = NULL;
    }
}

/*
 * TLS 1.3 session tickets, as over TCP (fd_ssl_tickets.c): from the keys
 * every worker shares (made by the master, kept across reloads, the
 * fleet's with ssl_session_ticket_key or Redis), one key per server, so
 * a ticket resumes only on the server it was made for (a server that
 * verifies clients never resumes another's session).
 *
 * GnuTLS takes one key for a session, encrypting and decrypting, and
 * derives from it a key per period of three ssl_session_timeouts (the
 * time step T, lib/stek.c: SHA3-512 of T, big-endian, and the key),
 * whose first 16 bytes name it at the head of each ticket; it decrypts
 * under T's and T - 1's. So that a ticket made before the shared key
 * rotated (ssl_session_ticket_rotate) resumes, as over TCP, the
 * session takes the previous shared key when the ticket the client
 * offers names a key derived from it; its new ticket is then made with
 * that key too, and lives until the next rotation (TCP's gets the new
 * key). A GnuTLS that derived otherwise would only lose that: no name
 * would match, and the current key makes a full handshake, as before.
 */
static int server_key(const quic_server_t *q, unsigned which,
                      unsigned char key[64])
{
    unsigned char shared[80];
    int rv;

    if (!fd_ssl_ticket_secret(which, shared))
        return GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE;
    rv = gnutls_hmac_fast(GNUTLS_MAC_SHA512, shared, sizeof(shared), q->id,
                          sizeof(q->id), key);
    gnutls_memset(shared, 0, sizeof(shared));
    return rv;
}

/* Does the ticket name a key GnuTLS derives from this one, now? */
static int names_key(const unsigned char name[16], const unsigned char key[64],
                     unsigned timeout)
{
    unsigned char in[8 + 64], out[64];
    uint64_t t = (uint64_t)time(NULL) / (3 * (uint64_t)fd_max(timeout, 1));
    unsigned i, step;
    int found = 0;

    memcpy(in + 8, key, 64);
    for (step = 0; step < 2 && !found && t > step; step++) {
        for (i = 0; i < 8; i++)
            in[i] = (unsigned char)((t - step) >> (56 - 8 * i));
        if (gnutls_hash_fast(GNUTLS_DIG_SHA3_512, in, sizeof(in), out) == 0)
            found = memcmp(out, name, 16) == 0;
    }
    gnutls_memset(in, 0, sizeof(in));
    gnutls_memset(out, 0, sizeof(out));
    return found;
}

static int tickets_on(gnutls_session_t s, const quic_server_t *q)
{
    const quic_session_t *qss = gnutls_session_get_ptr(s);
    unsigned char key[64];
    gnutls_datum_t k = {key, sizeof(key)};
    int rv;

    if (!q->tickets)
        return 0;
    if (!qss->offered || server_key(q, 1, key) != 0 ||
        !names_key(qss->ticket, key, q->timeout)) {
        rv = server_key(q, 0, key);
        if (rv == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
            return 0; /* no keys made: no tickets */
        if (rv < 0)
            return rv;
    }
    gnutls_db_set_cache_expiration(s, (int)q->timeout);
    rv = gnutls_session_ticket_enable_server(s, &k);
    gnutls_memset(key, 0, sizeof(key));
    return rv;
}

/* pre_shared_key (RFC 8446 4.2.11): identities<7..2^16-1>, each an
 * identity<1..2^16-1> and a 4-byte age; the first's head is the name */
static int hello_ext(void *ctx, unsigned id, const unsigned char *p,
                     unsigned n)
{
    quic_session_t *qss = ctx;

    if (id == 41 && n >= 4 + 16 && ((unsigned)p[2] << 8 | p[3]) >= 16) {
        memcpy(qss->ticket, p + 4, 16);
        qss->offered = 1;
    }
    return 0;
}

/* The ClientHello as it came, before GnuTLS reads it: the ticket it
 * offers, for tickets_on */
static int hello_hook(gnutls_session_t s, unsigned type, unsigned when,
                      unsigned incoming, const gnutls_datum_t *msg)
{
    quic_session_t *qss = gnutls_session_get_ptr(s);

    (void)type;
    (void)when;
    (void)incoming;
    qss->offered = 0;
    gnutls_ext_raw_parse(qss, hello_ext, msg,
                         GNUTLS_EXT_RAW_FLAG_TLS_CLIENT_HELLO);
    return 0;
}

/*
 * The ClientHello came: its SNI name chooses the server, whose
 * certificates, client verification and ticket key make the handshake
 * (GnuTLS takes them here, before it looks at a ticket the client offers
 * or picks a certificate).
 */
static int client_hello(gnutls_session_t s)
{
    quic_session_t *qss = gnutls_session_get_ptr(s);
    const fd_listening_t *ls = qss->ls;
    const quic_creds_t *qs = ls->quic_tls;
    fd_http_server_t *srv = NULL;
    char name[256];
    size_t len = fd_quic_tls_server_name(s, name, sizeof(name));
    unsigned i = 0;

    if (len)
        srv = fd_listening_server(ls, (fd_str_t){len, name});
    if (srv)
        while (ls->servers[i] != srv)
            i++;
    qss->srv = ls->servers[i];
    if (gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE,
                               qs->srv[i].cred) < 0)
        return GNUTLS_E_INTERNAL_ERROR;
    gnutls_certificate_server_set_request(s, qs->srv[i].request);
    if (tickets_on(s, &qs->srv[i]) < 0)
        return GNUTLS_E_INTERNAL_ERROR;
    return 0;
}

int fd_quic_tls_new(fd_quic_tls_t *t, const fd_listening_t *ls,
                    ngtcp2_crypto_conn_ref *ref)
{
    static const gnutls_datum_t h3 = {(unsigned char *)"h3", 2};
    const quic_creds_t *qs = ls->quic_tls;
    quic_session_t *qss;
    gnutls_session_t s;

    qss = malloc(sizeof(*qss));
    if (qss == NULL)
        return FD_ERROR;
    qss->ref = *ref;
    qss->ls = ls;
    qss->srv = NULL;
    qss->verified = 0;
    qss->offered = 0;
    /* no GNUTLS_ENABLE_EARLY_DATA: 0-RTT stays off (it needs an
     * anti-replay store all workers share) */
    if (gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA) < 0) {
        free(qss);
        return FD_ERROR;
    }
    gnutls_session_set_ptr(s, qss);
    if (gnutls_priority_set_direct(s, QUIC_PRIORITY, NULL) < 0 ||
        ngtcp2_crypto_gnutls_configure_server_session(s) != 0 ||
        gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE,
                               qs->srv[0].cred) < 0 ||
        gnutls_alpn_set_protocols(s, &h3, 1,
                                  GNUTLS_ALPN_MANDATORY |
                                      GNUTLS_ALPN_SERVER_PRECEDENCE) < 0) {
        fd_quic_tls_free(s);
        return FD_ERROR;
    }
    gnutls_handshake_set_hook_function(s, GNUTLS_HANDSHAKE_CLIENT_HELLO,
                                       GNUTLS_HOOK_PRE, hello_hook);
    gnutls_handshake_set_post_client_hello_function(s, client_hello);
    *t = s;
    return FD_OK;
}

void fd_quic_tls_free(fd_quic_tls_t t)
{
    if (t) {
        free(gnutls_session_get_ptr(t));
        gnutls_deinit(t);
    }
}

size_t fd_quic_tls_server_name(fd_quic_tls_t t, char *buf, size_t size)
{
    size_t len = size;
    unsigned type;

    if (gnutls_server_name_get(t, buf, &len, &type, 0) < 0 ||
        type != GNUTLS_NAME_DNS)
        return 0;
    return len;
}

/* --- the connection's facts, as fd_ssl.c's for TCP --- */

fd_http_server_t *fd_quic_tls_server(fd_quic_tls_t t)
{
    return ((quic_session_t *)gnutls_session_get_ptr(t))->srv;
}

static fd_str_t pool_copy(fd_pool_t *pool, const char *a, size_t la,
                          const char *b, size_t lb)
{
    char *p = fd_pnalloc(pool, la + lb + 1);

    if (p == NULL)
        return fd_string("");
    memcpy(p, a, la);
    memcpy(p + la, b, lb);
    p[la + lb] = '\0';
    return (fd_str_t){la + lb, p};
}

fd_str_t fd_quic_tls_protocol(fd_quic_tls_t t)
{
    /* OpenSSL's name for it, as $ssl_protocol says over TCP */
    return gnutls_protocol_get_version(t) == GNUTLS_TLS1_3
               ? fd_string("TLSv1.3")
               : fd_string("");
}

fd_str_t fd_quic_tls_cipher(fd_quic_tls_t t)
{
    /* the IANA name ("TLS_AES_128_GCM_SHA256"), OpenSSL's for TLS 1.3 */
    const char *p = gnutls_ciphersuite_get(t);

    return p ? (fd_str_t){strlen(p), p} : fd_string("");
}

fd_str_t fd_quic_tls_server_name_var(fd_quic_tls_t t, fd_pool_t *pool)
{
    char name[256];
    size_t len = fd_quic_tls_server_name(t, name, sizeof(name));

    return len ? pool_copy(pool, name, len, "", 0) : fd_string("");
}

int fd_quic_tls_session_reused(fd_quic_tls_t t)
{
    return gnutls_session_is_resumed(t) != 0;
}

/* The client's certificate, or 0 */
static int peer_cert(fd_quic_tls_t t, gnutls_x509_crt_t *crt)
{
    const gnutls_datum_t *certs;
    unsigned n = 0;

    certs = gnutls_certificate_get_peers(t, &n);
    if (certs == NULL || n == 0 || gnutls_x509_crt_init(crt) < 0)
        return 0;
    if (gnutls_x509_crt_import(*crt, &certs[0], GNUTLS_X509_FMT_DER) < 0) {
        gnutls_x509_crt_deinit(*crt);
        return 0;
    }
    return 1;
}

/*
 * GnuTLS's verdict as OpenSSL's error code, so that FAILED:reason reads
 * the same over QUIC as over TCP: OpenSSL stops at the first error on
 * its way up the chain (an issuer it cannot find before the dates).
 */
static int verify_error(fd_quic_tls_t t, unsigned status)
{
    static const struct {
        unsigned status;
        int error;
    } verdicts[] = {
        {GNUTLS_CERT_SIGNER_NOT_CA, X509_V_ERR_INVALID_CA},
        {GNUTLS_CERT_SIGNATURE_FAILURE, X509_V_ERR_CERT_SIGNATURE_FAILURE},
        {GNUTLS_CERT_INSECURE_ALGORITHM, X509_V_ERR_CA_MD_TOO_WEAK},
        {GNUTLS_CERT_NOT_ACTIVATED, X509_V_ERR_CERT_NOT_YET_VALID},
        {GNUTLS_CERT_EXPIRED, X509_V_ERR_CERT_HAS_EXPIRED},
        {GNUTLS_CERT_REVOKED, X509_V_ERR_CERT_REVOKED},
        {GNUTLS_CERT_PURPOSE_MISMATCH, X509_V_ERR_INVALID_PURPOSE},
    };
    gnutls_x509_crt_t crt;
    unsigned i;
    int self = 0;

    if (status & GNUTLS_CERT_SIGNER_NOT_FOUND) {
        unsigned n = 0;
        /* a certificate alone: OpenSSL says "self-signed" or "unable to
         * verify the first", of a chain "unable to get local issuer" */
        if (gnutls_certificate_get_peers(t, &n) == NULL || n > 1)
            return X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY;
        if (peer_cert(t, &crt)) {
            self = gnutls_x509_crt_check_issuer(crt, crt);
            gnutls_x509_crt_deinit(crt);
        }
        return self ? X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT
                    : X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE;
    }
    for (i = 0; i < fd_nelems(verdicts); i++)
        if (status & verdicts[i].status)
            return verdicts[i].error;
    return X509_V_ERR_UNSPECIFIED;
}

fd_str_t fd_quic_tls_client_verify(fd_quic_tls_t t, fd_pool_t *pool)
{
    const char *why;
    unsigned n = 0, status;

    quic_session_t *qss = gnutls_session_get_ptr(t);

    if (gnutls_certificate_get_peers(t, &n) == NULL || n == 0)
        return fd_string("NONE");
    /* the chain is the connection's: verified once, not per request */
    if (!qss->verified) {
        if (gnutls_certificate_verify_peers(t, &client_purpose, 1,
                                            &qss->verify_status) < 0)
            qss->verify_status = GNUTLS_CERT_INVALID;
        qss->verified = 1;
    }
    status = qss->verify_status;
    if (status == 0)
        return fd_string("SUCCESS");
    why = X509_verify_cert_error_string(verify_error(t, status));
    return pool_copy(pool, "FAILED:", 7, why, strlen(why));
}

fd_str_t fd_quic_tls_client_s_dn(fd_quic_tls_t t, fd_pool_t *pool)
{
    gnutls_x509_crt_t crt;
    gnutls_datum_t dn = {NULL, 0};
    fd_str_t r = fd_string("");

    if (!peer_cert(t, &crt))
        return r;
    /* RFC 4514 (RFC 2253's successor): the order and escaping of
     * OpenSSL's XN_FLAG_RFC2253, which TCP's $ssl_client_s_dn uses */
    if (gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
        r = pool_copy(pool, (const char *)dn.data, dn.size, "", 0);
        gnutls_free(dn.data);
    }
    gnutls_x509_crt_deinit(crt);
    return r;
}

#endif
