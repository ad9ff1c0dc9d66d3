#ifndef FD_SSL_INT_H
#define FD_SSL_INT_H

/* Private to fd_ssl.c (the server side and the transport) and
 * fd_ssl_client.c (to upstreams): what the two share. */
#include <openssl/ssl.h>

#include "fd_ssl.h"
#include "fd_stream.h"

/* fd_ssl.c: s reads and writes through ssl, over transport tp, from now
 * on; edge-triggered, and its socket BIO marks it drained (rbio_cb) */
void fd_ssl_stream_bind(fd_stream_t *s, SSL *ssl, const fd_transport_t *tp);

/* fd_ssl.c: what every context has, server or client: the modes the
 * transport needs, read-ahead, and the protocols and ciphers given: FD_OK,
 * or FD_ERROR when OpenSSL refuses those */
int fd_ssl_ctx_setup(SSL_CTX *ctx, const fd_ssl_protocols_t *p,
                     const char *ciphers);

/* fd_ssl_tickets.c: OpenSSL's ticket key callback (the shared keys) */
int fd_ssl_ticket_cb(SSL *ssl, unsigned char name[16], unsigned char *iv,
                     EVP_CIPHER_CTX *ectx, EVP_MAC_CTX *hctx, int enc);

/* fd_ssl_client.c: the handshake of fd_transport_tls_client */
int fd_ssl_client_handshake(fd_stream_t *s);

#endif
