#ifndef FD_SSL_H
#define FD_SSL_H

#include "fd_core.h"
#include "fd_conf.h"
#include "fd_stream.h"

/*
 * TLS with OpenSSL 3: the per-[server] contexts, SNI, session tickets
 * shared by every worker, and the TLS transport under fd_stream_t.
 *
 * The master builds every SSL_CTX while it loads a configuration (before
 * privileges drop; a reload builds them again, so a renewed certificate is
 * served by the new workers); the workers inherit them.
 */

/* The [server] ssl_* keys (fd_cycle.c applies them to srv->ssl, which
 * fd_ssl_conf_create() makes, with the defaults, for every server). */
extern const fd_directive_t fd_ssl_server_directives[];
void *fd_ssl_conf_create(fd_conf_t *cf);

/* Load time, in the master: the contexts of every server that listens on
 * an "ssl" address. FD_OK, or FD_ERROR with err naming file:line. Part of
 * fd_cycle_load(), so -t and a reload check the files too. */
int fd_ssl_init_cycle(fd_cycle_t *cycle, char *err, size_t errlen);
void fd_ssl_free_cycle(fd_cycle_t *cycle);

/*
 * Session ticket keys: a shared mapping the master makes once, before the
 * first fork (it outlives reloads, so a ticket resumes with the next
 * generation's workers). fd_ssl_ticket_rotate() is the master's clock: it
 * rotates when [http] ssl_session_ticket_rotate has passed (the previous
 * key still decrypts) and returns the seconds until the next rotation,
 * 0 when the cycle has no ssl address (nothing to wake up for).
 */
int fd_ssl_shm_init(void);
unsigned fd_ssl_ticket_rotate(const fd_cycle_t *cycle);

/*
 * A connection accepted on an "ssl" listening address (worker): s->tp
 * becomes the TLS transport, s->tls its SSL object, s->et is set. The
 * handshake runs from fd_stream_handshake(): FD_OK, FD_AGAIN, FD_ERROR,
 * or FD_DECLINED when the first bytes are a plain HTTP request (the
 * transport is then plain TCP again, so that the protocol can answer 400
 * "The plain HTTP request was sent to HTTPS port" and close). The bound
 * on the handshake is ls->ssl_handshake_timeout; when it passes, call
 * fd_ssl_handshake_timeout() (it counts the failure) and close.
 */
int fd_ssl_accept(fd_stream_t *s, fd_listening_t *ls);
void fd_ssl_handshake_timeout(fd_stream_t *s);
extern const fd_transport_t fd_transport_tls;

/* After the handshake: the server the client's SNI name chose (NULL: no
 * name, or none matched), and the connection's facts for variables. */
fd_http_server_t *fd_ssl_server(fd_stream_t *s);
fd_str_t fd_ssl_protocol(fd_stream_t *s);    /* "TLSv1.3" */
fd_str_t fd_ssl_cipher(fd_stream_t *s);      /* "TLS_AES_128_GCM_SHA256" */
fd_str_t fd_ssl_server_name(fd_stream_t *s); /* SNI, "" without */
int fd_ssl_session_reused(fd_stream_t *s);
/* mTLS: "SUCCESS", "FAILED:reason", "NONE"; the subject DN (RFC 2253) */
fd_str_t fd_ssl_client_verify(fd_stream_t *s, fd_pool_t *pool);
fd_str_t fd_ssl_client_s_dn(fd_stream_t *s, fd_pool_t *pool);

/* fd_stats_t.ssl_failed[] by FD_SSL_FAIL_*: "protocol", ... */
extern const char *const fd_ssl_failure_names[];

#endif
