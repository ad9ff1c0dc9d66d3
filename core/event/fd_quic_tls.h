#ifndef FD_QUIC_TLS_H
#define FD_QUIC_TLS_H

/*
 * The TLS side of QUIC (fd_quic_tls.c, on GnuTLS today): what fd_quic.c
 * asks of it. The handle is opaque beyond this file pair, but for
 * ngtcp2_conn_set_tls_native_handle().
 */
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

typedef void *fd_quic_tls_t; /* gnutls_session_t */

/* A server session for one connection on ls: TLS 1.3, ALPN h3, the
 * address's certificates (SNI picks), ref for ngtcp2's crypto callbacks */
int fd_quic_tls_new(fd_quic_tls_t *t, const fd_listening_t *ls,
                    ngtcp2_crypto_conn_ref *ref);
void fd_quic_tls_free(fd_quic_tls_t t);
/* The client's SNI name into buf (not terminated): its length, 0: none */
size_t fd_quic_tls_server_name(fd_quic_tls_t t, char *buf, size_t size);

/* After the handshake, as fd_ssl.h's for TCP: the server whose settings
 * made it (SNI's choice, or the address's default), and the connection's
 * facts for the $ssl_* variables, in OpenSSL's words ("TLSv1.3",
 * "TLS_AES_128_GCM_SHA256", "FAILED:certificate has expired") */
fd_http_server_t *fd_quic_tls_server(fd_quic_tls_t t);
fd_str_t fd_quic_tls_protocol(fd_quic_tls_t t);
fd_str_t fd_quic_tls_cipher(fd_quic_tls_t t);
fd_str_t fd_quic_tls_server_name_var(fd_quic_tls_t t, fd_pool_t *pool);
int fd_quic_tls_session_reused(fd_quic_tls_t t);
fd_str_t fd_quic_tls_client_verify(fd_quic_tls_t t, fd_pool_t *pool);
fd_str_t fd_quic_tls_client_s_dn(fd_quic_tls_t t, fd_pool_t *pool);

#endif
