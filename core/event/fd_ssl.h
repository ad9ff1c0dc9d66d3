#ifndef FD_SSL_H
#define FD_SSL_H

#include "fd_core.h"
#include "fd_conf.h"
#include "fd_stream.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

/*
 * TLS with OpenSSL 3: the per-[server] contexts, SNI, session tickets
 * shared by every worker, and the TLS transport under fd_stream_t.
 *
 * The master builds every SSL_CTX while it loads a configuration (before
 * privileges drop; a reload builds them again, so a renewed certificate is
 * served by the new workers); the workers inherit them.
 */

/* A file named in the configuration, with where: errors found when it is
 * read name that file:line. */
typedef struct {
    char *path;
    const char *key;           /* the directive's name */
    const char *file;
    int line;
} fd_ssl_path_t;

typedef struct {
    int min, max;              /* TLS1_2_VERSION, TLS1_3_VERSION */
} fd_ssl_protocols_t;

/* Directive setters for keys of those types, for the tables of fd_ssl.c
 * and of modules (d->offset locates the field; errors name d->name):
 * "TLSv1.2 TLSv1.3" into an fd_ssl_protocols_t; an OpenSSL cipher list
 * that selects something into a char *; a path resolved against the
 * prefix into an fd_ssl_path_t. */
int fd_ssl_set_protocols(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v);
int fd_ssl_set_ciphers(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                       const char *v);
int fd_ssl_set_path(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v);

/* The [server] ssl_* keys (fd_cycle.c applies them to srv->ssl, which
 * fd_ssl_conf_create() makes, with the defaults, for every server). */
extern const fd_directive_t fd_ssl_server_directives[];
void *fd_ssl_conf_create(fd_conf_t *cf);

/*
 * ssl_certificate = SCHEME:NAME (acme:NAME): a certificate a module
 * provides (fastd_tls.h, fd_ssl_provider.c). fd_ssl_provider_path():
 * whether a value names one (SCHEME: lowercase letters, digits, '_', '-').
 * attach(): the provider's certificate into a server's new context, and
 * the callback that keeps it current: FD_OK, or FD_ERROR with err naming
 * path's file:line. alpn(), from the ALPN callback of every ssl address:
 * 1 when a provider answered the handshake itself (tls-alpn-01), with
 * *out the protocol chosen.
 */
int fd_ssl_provider_path(const char *path);
/* A module's provider (fd_api_module_t.tls), when the module is added:
 * FD_OK; FD_DECLINED: its scheme is another's; FD_ERROR: a provider
 * without its calls, a scheme not made of a-z 0-9 _ -, or too many.
 * check_only: says so, and adds nothing. */
struct fd_api_tls_provider_s;
int fd_ssl_provider_add(const struct fd_api_tls_provider_s *p,
                        int check_only);
int fd_ssl_provider_attach(fd_cycle_t *cycle, SSL_CTX *ctx,
                           fd_http_server_t *srv, const fd_ssl_path_t *path,
                           char *err, size_t errlen);
int fd_ssl_provider_alpn(SSL *ssl, const unsigned char **out,
                         unsigned char *outlen, const unsigned char *in,
                         unsigned inlen);

/* Load time, in the master: the contexts of every server that listens on
 * an "ssl" address. FD_OK, or FD_ERROR with err naming file:line. Part of
 * fd_cycle_load(), so -t and a reload check the files too. */
int fd_ssl_init_cycle(fd_cycle_t *cycle, char *err, size_t errlen);
void fd_ssl_free_cycle(fd_cycle_t *cycle);
/* The i-th ssl_certificate of srv and its key (paths): how many it has,
 * 0 when i is past them. QUIC's TLS (fd_quic_tls.c) reads the same. */
unsigned fd_ssl_server_certs(const fd_http_server_t *srv, unsigned i,
                             const char **cert, const char **key);
/* The rest of srv's TLS terms QUIC's TLS holds a client to: the
 * protocols (QUIC is TLS 1.3 alone), the client verification and the
 * session settings */
enum { FD_SSL_VERIFY_OFF, FD_SSL_VERIFY_ON, FD_SSL_VERIFY_OPTIONAL };
typedef struct {
    int tls13;                 /* ssl_protocols has TLSv1.3 */
    int verify;                /* ssl_verify_client: FD_SSL_VERIFY_* */
    const char *client_ca;     /* ssl_client_certificate, NULL: none */
    const char *verify_file;   /* where ssl_verify_client was set */
    int verify_line;
    int session_tickets;
    fd_msec_t session_timeout;
} fd_ssl_terms_t;
void fd_ssl_server_terms(const fd_http_server_t *srv, fd_ssl_terms_t *t);
/* What sets srv apart from the other servers in its TLS terms (SHA-256
 * of its names, certificate files and client verification): OpenSSL's
 * session id context, and what QUIC's ticket keys are derived with, so a
 * session resumes only on the server it was made for. 0: failed. */
#define FD_SSL_SERVER_ID_LEN 32
int fd_ssl_server_id(const fd_http_server_t *srv,
                     unsigned char id[FD_SSL_SERVER_ID_LEN]);
#ifdef FD_HTTP3
/* fd_quic_tls.c: the GnuTLS credentials of each quic address, built by
 * the master at load as fd_ssl_init_cycle() builds OpenSSL's */
int fd_quic_tls_init_cycle(fd_cycle_t *cycle, char *err, size_t errlen);
void fd_quic_tls_free_cycle(fd_cycle_t *cycle);
#endif

/*
 * Session ticket keys: a shared mapping the master makes once, before the
 * first fork (it outlives reloads, so a ticket resumes with the next
 * generation's workers). fd_ssl_ticket_rotate() is the master's clock: it
 * rotates when [http] ssl_session_ticket_rotate has passed (the previous
 * key still decrypts) and returns the seconds until the next rotation,
 * 0 when the cycle has no ssl address (nothing to wake up for).
 */
int fd_ssl_shm_init(void);
/* OpenSSL's allocator (keeps a few record buffers for reuse): first thing
 * in main(), before OpenSSL allocates anything; no-op if it already has */
void fd_ssl_mem_init(void);
unsigned fd_ssl_ticket_rotate(const fd_cycle_t *cycle);
/* Worker: the session ticket key that encrypts now (which 0) or the
 * previous one, which still decrypts (which 1), in nginx's 80-byte
 * order, for QUIC's tickets to derive theirs from; 0 before
 * fd_ssl_shm_init() made the keys. */
int fd_ssl_ticket_secret(unsigned which, unsigned char key[80]);
/* Worker: with ssl_session_ticket_keys = redis, worker 0 (index) keeps
 * the mapping to the fleet's pair in Redis (after the cluster module's
 * init_worker started the client); a no-op otherwise. */
void fd_ssl_tickets_init_worker(const fd_cycle_t *cycle, unsigned index);
void fd_ssl_tickets_exit_worker(void);
/* At load: ssl_session_ticket_keys = redis has a [cluster], no files */
int fd_ssl_tickets_check(fd_cycle_t *cycle, char *err, size_t errlen);

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
/* A module's own server context (a [stream] listen ... ssl): the chain
 * and key files, protocols p, TLS 1.2 ciphers; NULL with err written.
 * Built by the master at load; freed with fd_ssl_server_ctx_free. */
void *fd_ssl_server_ctx(const char *cert, const char *key,
                        const fd_ssl_protocols_t *p, const char *ciphers,
                        char *err, size_t errlen);
void fd_ssl_server_ctx_free(void *ctx);
/* As fd_ssl_accept, on such a context: the handshake runs from
 * fd_stream_handshake() */
int fd_ssl_accept_ctx(fd_stream_t *s, void *ctx);
void fd_ssl_handshake_timeout(fd_stream_t *s);
extern const fd_transport_t fd_transport_tls;

/* After the handshake: the server whose settings made it (the one the
 * client's SNI name chose; without a name, or with one no server has, the
 * address's default), and the connection's facts for variables. */
fd_http_server_t *fd_ssl_server(fd_stream_t *s);
/* Whether two servers hold a client to the same TLS terms (certificates,
 * protocols, ciphers, groups, client verification): a connection made
 * for one may serve the other's requests (fd_http.c, find_server). */
int fd_ssl_same_tls(const fd_http_server_t *a, const fd_http_server_t *b);
fd_str_t fd_ssl_protocol(fd_stream_t *s);    /* "TLSv1.3" */
fd_str_t fd_ssl_cipher(fd_stream_t *s);      /* "TLS_AES_128_GCM_SHA256" */
fd_str_t fd_ssl_server_name(fd_stream_t *s); /* SNI, "" without */
int fd_ssl_session_reused(fd_stream_t *s);
/* The protocol ALPN chose, "" when none (the server offers h2 only on
 * http2 addresses, then http/1.1). */
fd_str_t fd_ssl_alpn(fd_stream_t *s);
/* mTLS: "SUCCESS", "FAILED:reason", "NONE"; the subject DN (RFC 2253) */
fd_str_t fd_ssl_client_verify(fd_stream_t *s, fd_pool_t *pool);
fd_str_t fd_ssl_client_s_dn(fd_stream_t *s, fd_pool_t *pool);

/*
 * TLS to upstreams, the client side. A module keeps an
 * fd_ssl_client_conf_t in its location conf, fills it with its own keys
 * (the proxy's proxy_ssl_*, through the setters above) and, at
 * init_conf, asks for the client of those settings and the name the
 * upstream's certificate must be valid for (a host name, then also sent
 * as SNI, or an IP address). Locations with the same settings share one
 * SSL_CTX, and with the same name one client: a pointer that says what a
 * connection was made for (a pooled one is reused only by the same).
 * Both live as long as the configuration (freed with cf->pool).
 */
typedef struct {
    int verify;                /* the peer's certificate and name */
    fd_ssl_path_t trusted;     /* CA certificates; no path: the system's */
    fd_ssl_path_t certificate; /* a client certificate, and its key */
    fd_ssl_path_t certificate_key;
    fd_ssl_protocols_t protocols;
    char *ciphers;
    int server_name;           /* send SNI */
    int session_reuse;         /* offer the last session of a peer */
    int alpn_h2;               /* offer ALPN h2 alone (HTTP/2 upstreams) */
} fd_ssl_client_conf_t;

typedef struct fd_ssl_client_s fd_ssl_client_t;

/* NULL after fd_conf_error() (file:line of the key whose file failed). */
fd_ssl_client_t *fd_ssl_client(fd_conf_t *cf,
                               const fd_ssl_client_conf_t *conf,
                               const char *name);

/*
 * A TCP connection to an upstream becomes TLS (worker): s->tp is
 * fd_transport_tls_client, s->tls its SSL in connect state, s->et set;
 * the handshake runs from fd_stream_handshake(), bounded by the caller.
 * *session is the caller's slot for the peer's session (NULL at first;
 * it outlives the connections and is released with
 * fd_ssl_session_free()): offered when the same client made it, replaced
 * by each new one the peer sends. FD_OK or FD_ERROR (logged).
 */
int fd_ssl_connect(fd_stream_t *s, fd_ssl_client_t *cl, void **session);
void fd_ssl_session_free(void **session);
extern const fd_transport_t fd_transport_tls_client;
/* Why the handshake failed, after FD_ERROR and before the transport is
 * closed: "certificate verify failed: hostname mismatch", OpenSSL's
 * reason, or the socket's error. Valid until the next call. */
const char *fd_ssl_connect_error(fd_stream_t *s);

/* fd_stats_t.ssl_failed[] by FD_SSL_FAIL_*: "protocol", ... */
extern const char *const fd_ssl_failure_names[];

#endif
