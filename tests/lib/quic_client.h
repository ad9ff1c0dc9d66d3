/*
 * What the test clients over QUIC share (tests/bench/h3load.c,
 * tests/lib/quicraw.c, tests/fuzz/fuzz_quic.c): ngtcp2's client callbacks
 * of GnuTLS's crypto, the TLS session of a connection, and QPACK's
 * integers. Header only, static: each client is one file compiled alone.
 *
 *   static const ngtcp2_callbacks cb = {
 *       QUIC_CLIENT_CALLBACKS,
 *       .handshake_completed = ...,
 *   };
 *   quic_client_params(&s, &p, now, 1 << 20, 16 << 20);
 *   ...ngtcp2_conn_client_new(&q, ..., &s, &p, ...)...
 *   if (quic_client_tls(&tls, cred, host, &ref, q) != 0) ...
 */
#ifndef QUIC_CLIENT_H
#define QUIC_CLIENT_H

#include <string.h>
#include <stdlib.h>
#include <sys/random.h>

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

/* TLS 1.3, AES-128-GCM and X25519 only */
#define QUIC_CLIENT_PRIORITY                                                   \
    "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:+VERS-TLS1.3:"                \
    "-CIPHER-ALL:+AES-128-GCM:-GROUP-ALL:+GROUP-X25519"

static void quic_client_rand(uint8_t *dest, size_t len,
                             const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    if (getrandom(dest, len, 0) != (ssize_t)len)
        abort(); /* does not fail once seeded */
}

static int quic_client_new_cid(ngtcp2_conn *q, ngtcp2_cid *cid,
                               uint8_t *token, size_t len, void *ud)
{
    (void)q, (void)ud;
    if (getrandom(cid->data, len, 0) != (ssize_t)len ||
        getrandom(token, NGTCP2_STATELESS_RESET_TOKENLEN, 0) !=
            NGTCP2_STATELESS_RESET_TOKENLEN)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    cid->datalen = len;
    return 0;
}

/* the first members of a client's ngtcp2_callbacks */
#define QUIC_CLIENT_CALLBACKS                                                  \
    .client_initial = ngtcp2_crypto_client_initial_cb,                         \
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,                     \
    .encrypt = ngtcp2_crypto_encrypt_cb,                                       \
    .decrypt = ngtcp2_crypto_decrypt_cb,                                       \
    .hp_mask = ngtcp2_crypto_hp_mask_cb,                                       \
    .recv_retry = ngtcp2_crypto_recv_retry_cb,                                 \
    .update_key = ngtcp2_crypto_update_key_cb,                                 \
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,         \
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,     \
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,       \
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,               \
    .rand = quic_client_rand,                                                  \
    .get_new_connection_id = quic_client_new_cid

/* A client connection's settings and transport parameters, now its
 * clock's: streams it opens take stream_window bytes of response (the
 * server's uni streams too), the connection window bytes, the server
 * may open HTTP/3's three uni streams (control, QPACK encoder and
 * decoder), 30 s idle. The caller adds what is its own. */
static void quic_client_params(ngtcp2_settings *s, ngtcp2_transport_params *p,
                               ngtcp2_tstamp now, uint64_t stream_window,
                               uint64_t window)
{
    ngtcp2_settings_default(s);
    s->initial_ts = now;
    ngtcp2_transport_params_default(p);
    p->initial_max_stream_data_bidi_local = stream_window;
    p->initial_max_stream_data_uni = stream_window;
    p->initial_max_data = window;
    p->initial_max_streams_uni = 3;
    p->max_idle_timeout = 30 * NGTCP2_SECONDS;
}

/* The TLS session of client connection q, to host (SNI), ALPN h3, the
 * certificate not verified; ref->get_conn is the caller's. 0, or -1. */
static int quic_client_tls(gnutls_session_t *tls,
                           gnutls_certificate_credentials_t cred,
                           const char *host, ngtcp2_crypto_conn_ref *ref,
                           ngtcp2_conn *q)
{
    static const gnutls_datum_t h3 = {(unsigned char *)"h3", 2};

    if (gnutls_init(tls, GNUTLS_CLIENT) < 0)
        return -1;
    if (gnutls_priority_set_direct(*tls, QUIC_CLIENT_PRIORITY, NULL) < 0 ||
        ngtcp2_crypto_gnutls_configure_client_session(*tls) != 0 ||
        gnutls_credentials_set(*tls, GNUTLS_CRD_CERTIFICATE, cred) < 0 ||
        gnutls_alpn_set_protocols(*tls, &h3, 1, GNUTLS_ALPN_MANDATORY) < 0 ||
        gnutls_server_name_set(*tls, GNUTLS_NAME_DNS, host, strlen(host)) < 0)
        return -1;
    gnutls_session_set_ptr(*tls, ref);
    ngtcp2_conn_set_tls_native_handle(q, *tls);
    return 0;
}

/* a QPACK prefixed integer (RFC 9204 4.1.1) after flags in its first
 * byte */
static inline size_t qpack_int(uint8_t *p, uint8_t flags, unsigned prefix,
                               uint64_t v)
{
    uint64_t max = (1u << prefix) - 1;
    size_t n = 0;

    if (v < max) {
        p[n++] = (uint8_t)(flags | v);
        return n;
    }
    p[n++] = (uint8_t)(flags | max);
    for (v -= max; v >= 128; v >>= 7)
        p[n++] = (uint8_t)(0x80 | (v & 0x7f));
    p[n++] = (uint8_t)v;
    return n;
}

#endif
