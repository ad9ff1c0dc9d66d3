/*
 * QUIC's TLS 1.3 on GnuTLS (ngtcp2's crypto-gnutls): Debian 12's OpenSSL
 * 3.0 has no QUIC API, so the QUIC side alone uses GnuTLS while TCP keeps
 * OpenSSL (fd_ssl.c). Everything GnuTLS is in this file, so that moving to
 * OpenSSL's own QUIC stack (3.5+) is a change here and in fd_quic.c's
 * calls to it, nothing else.
 *
 * Each quic address gets one credentials object, built by the master at
 * load from the ssl_certificate/ssl_certificate_key files of every
 * [server] on it (the very files the ssl address reads): GnuTLS picks
 * the certificate whose names the client's SNI matches, and the request
 * is routed by that name as over TCP (fd_quic_tls_server_name).
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

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
        gnutls_certificate_credentials_t cred;
        unsigned i, k, n;
        int rv;

        if (!ls->quic)
            continue;
        if (gnutls_certificate_allocate_credentials(&cred) < 0) {
            snprintf(err, errlen, "gnutls_certificate_allocate_credentials()"
                     " failed");
            return FD_ERROR;
        }
        ls->quic_tls = cred; /* freed with the cycle from now on */
        for (i = 0; i < ls->nservers; i++) {
            const fd_http_server_t *srv = ls->servers[i];
            const char *cert, *key;
            for (k = 0, n = 1; k < n; k++) {
                n = fd_ssl_server_certs(srv, k, &cert, &key);
                if (n == 0) {
                    snprintf(err, errlen, "%s:%d: [server] listens on %s "
                             "quic but has no ssl_certificate", srv->file,
                             srv->line, ls->text);
                    return FD_ERROR;
                }
                rv = gnutls_certificate_set_x509_key_file2(
                    cred, cert, key, GNUTLS_X509_FMT_PEM, NULL, 0);
                if (rv < 0) {
                    snprintf(err, errlen, "%s:%d: GnuTLS cannot load "
                             "ssl_certificate \"%s\" with its key \"%s\" "
                             "for %s quic: %s", srv->file, srv->line, cert,
                             key, ls->text, gnutls_strerror(rv));
                    return FD_ERROR;
                }
            }
        }
    }
    return FD_OK;
}

void fd_quic_tls_free_cycle(fd_cycle_t *cycle)
{
    fd_listening_t *ls;

    for (ls = cycle->listening; ls; ls = ls->next)
        if (ls->quic_tls) {
            gnutls_certificate_free_credentials(ls->quic_tls);
            ls->quic_tls = NULL;
        }
}

int fd_quic_tls_new(fd_quic_tls_t *t, const fd_listening_t *ls,
                    ngtcp2_crypto_conn_ref *ref)
{
    static const gnutls_datum_t h3 = {(unsigned char *)"h3", 2};
    gnutls_session_t s;

    /* no GNUTLS_ENABLE_EARLY_DATA: 0-RTT stays off (it needs an
     * anti-replay store all workers share) */
    if (gnutls_init(&s, GNUTLS_SERVER | GNUTLS_NO_END_OF_EARLY_DATA) < 0)
        return FD_ERROR;
    if (gnutls_priority_set_direct(s, QUIC_PRIORITY, NULL) < 0 ||
        ngtcp2_crypto_gnutls_configure_server_session(s) != 0 ||
        gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, ls->quic_tls) < 0 ||
        gnutls_alpn_set_protocols(s, &h3, 1,
                                  GNUTLS_ALPN_MANDATORY |
                                      GNUTLS_ALPN_SERVER_PRECEDENCE) < 0) {
        gnutls_deinit(s);
        return FD_ERROR;
    }
    gnutls_session_set_ptr(s, ref);
    *t = s;
    return FD_OK;
}

void fd_quic_tls_free(fd_quic_tls_t t)
{
    if (t)
        gnutls_deinit(t);
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

#endif
