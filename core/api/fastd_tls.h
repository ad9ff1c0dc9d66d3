/*
 * fastd_tls.h: certificates a module provides (API 1.8). Include it
 * instead of fastd.h where a module serves TLS certificates of its own:
 *
 *     #include <fastd_tls.h>           (it includes fastd.h)
 *
 * A [server] that says ssl_certificate = SCHEME:NAME (acme:letsencrypt)
 * gets its certificate from the module that provides SCHEME (its
 * descriptor's tls, below), instead of files. The engine builds the
 * server's TLS context as for files (its protocols, ciphers, tickets,
 * client verification) and asks the provider for the certificate to put
 * in it:
 *
 *   attach      at load, in the master: the server's certificate by
 *               NAME and its server_names, a handle of the module's;
 *   generation  at each full handshake, on a worker's loop: a number
 *               that moves when the certificate changes (one atomic
 *               load: it is on every handshake);
 *   get         when it moved (and once at load): the certificate and
 *               key, PEM, which the engine parses and serves from that
 *               handshake on. A connection keeps the certificate it was
 *               made with; no reload, no connection closed.
 *
 * And a protocol the module answers in the handshake itself (ACME's
 * tls-alpn-01, RFC 8737): when a client offers alpn and names a server
 * (SNI), alpn_cert gives the certificate that connection gets instead,
 * and the protocol is selected; nothing else is served on it.
 *
 * The provider's calls run on the loop (generation, get, alpn_cert) and
 * must not block. C11; names no engine type nor OpenSSL's.
 */
#ifndef FASTD_TLS_H
#define FASTD_TLS_H

#include "fastd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A certificate and its key, PEM: the chain (the leaf first), then the
 * private key, in the provider's memory until its next call. */
typedef struct {
    const char *pem;
    size_t cert_len;                /* the chain: pem[0, cert_len) */
    size_t key_len;                 /* the key: what follows, key_len */
} fd_api_tls_pem_t;

typedef struct fd_api_tls_provider_s {
    const char *scheme;             /* "acme": ssl_certificate = acme:NAME */
    /*
     * A server's ssl_certificate = SCHEME:NAME, in the master as it loads
     * a configuration (and at -t), after every section's init and
     * configured(): the server's names (server_name, in order; n of
     * them). The module's handle of that certificate, kept with the
     * server's TLS context (fd_api_conf_alloc() memory lives as long);
     * NULL after fd_api_conf_error() (at the ssl_certificate line)
     * refuses the configuration. What a section's init may call, attach
     * may: fd_api_section(), fd_api_conf_path(), fd_api_shm_zone(),
     * fd_api_helper().
     */
    void *(*attach)(const char *name, const char *const *names,
                    unsigned n);
    /* The certificate's generation now: get() is asked again when it is
     * not the one last got. */
    uint64_t (*generation)(void *cert);
    /* The certificate to serve, and its generation: FD_OK; FD_DECLINED:
     * none yet, handshakes fail until there is one; FD_ERROR: the one
     * served stays (the module logged why). */
    int (*get)(void *cert, fd_api_tls_pem_t *pem, uint64_t *gen);
    /* An ALPN protocol the module answers ("acme-tls/1"), or NULL. */
    const char *alpn;
    /* A client offered alpn for sni: FD_OK, pem the certificate this
     * connection gets (alone: no chain); FD_DECLINED: the protocol is
     * not selected, the handshake goes on as usual. */
    int (*alpn_cert)(const char *sni, fd_api_tls_pem_t *pem);
} fd_api_tls_provider_t;
/* A module provides one scheme: FD_API_MODULE = {..., .tls = &provider},
 * kept, not copied (a static const); a scheme another module provides is
 * refused when the module is loaded. A later minor version adds fields
 * at the end of fd_api_tls_provider_t only. */

#ifdef __cplusplus
}
#endif

#endif /* FASTD_TLS_H */
