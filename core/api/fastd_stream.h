/*
 * fastd_stream.h: connections of a module's own, below HTTP (API 1.8):
 * a layer-4 proxy, as the stream module is. Include it after fastd.h's
 * users do:
 *
 *     #include <fastd_stream.h>        (it includes fastd_upstream.h)
 *
 * A module claims a listening address from its section's init
 * (fd_api_stream_listen), as a [server]'s listen is claimed: the master
 * holds the socket, reloads keep it. Each connection accepted there is
 * an opaque fd_api_conn_t with size bytes of the module's (zeroed), given
 * to the ops' accept. From there the module says what happens, one verb
 * at a time, each ending in a hook of its own:
 *
 *   fd_api_conn_tls      TLS ends here (the handshake, bounded);
 *   fd_api_conn_preread  the client's first bytes, to look at before a
 *                        server is chosen (they go on to it untouched);
 *   fd_api_conn_pass     a server of an upstream group (fastd_upstream.h:
 *                        its balancer, max_fails, health checks; a failed
 *                        connect goes on to the next server), a PROXY
 *                        header first when asked, then the two joined:
 *                        fastd copies both ways (bounded buffers,
 *                        half-closes passed on, an idle timeout);
 *   fd_api_conn_close    the end, with a status for the module's log.
 *
 * Whatever way it goes, the ops' end runs once, when the connection is
 * over: fd_api_conn_info() says how (for an access log and counters).
 * A graceful stop waits for open connections (shutdown_timeout).
 *
 * A listener whose address says "udp" is a UDP socket per worker
 * instead, read by the module (fd_api_stream_socket, fd_api_io_watch);
 * fd_api_stream_dgram() connects a UDP socket to a server of a group.
 *
 * Everything runs on the worker's loop. C11; names no engine type.
 */
#ifndef FASTD_STREAM_H
#define FASTD_STREAM_H

#include "fastd_upstream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A listening address of the module's. */
typedef struct fd_api_stream_s fd_api_stream_t;
/* One accepted connection, and the server's side once it has one. */
typedef struct fd_api_conn_s fd_api_conn_t;
/* A TLS server context: certificates, protocols, ciphers. */
typedef struct fd_api_tls_s fd_api_tls_t;
/* A server of a group, taken (fd_api_stream_dgram) until released. */
typedef struct fd_api_peer_s fd_api_peer_t;

/* The module's hooks for a listener's connections (kept, not copied: a
 * static table, or the section's memory, which lives as long as the
 * listener). A later minor version adds fields at the end only. */
typedef struct {
    /* Log lines fastd writes for a connection begin with this: "stream
     * web". */
    const char *what;
    /* The module's bytes a connection: fd_api_conn_data(), zeroed. */
    size_t size;
    /* A connection was accepted. It goes on with a verb below:
     * fd_api_conn_tls or fd_api_conn_preread from here (the client's
     * first events are theirs), pass and close from here, from a
     * verb's hook, or later from the loop. */
    void (*accept)(fd_api_conn_t *c, void *data);
    /* It is over: fd_api_conn_info() says how; c is gone on return. */
    void (*end)(fd_api_conn_t *c, void *data);
} fd_api_stream_ops_t;

/* --- configuration: from a section's init --------------------------------- */

/* ADDR:PORT ([::]:PORT), or ADDR:PORT udp, claimed for the module: its
 * TCP connections come to ops (ctx is the module's: fd_api_conn_ctx()).
 * NULL after the error fastd reports (an address taken by another). */
fd_api_stream_t *fd_api_stream_listen(const char *addr,
                                      const fd_api_stream_ops_t *ops,
                                      void *ctx);
/* Its options (FD_API_MSEC values for the timeouts): FD_OK, or FD_ERROR
 * for an unknown one. */
enum {
    FD_API_STREAM_BUFFER_SIZE = 1, /* bytes each way (16k); preread's room */
    FD_API_STREAM_IDLE_TIMEOUT,    /* ms with no byte either way (10m) */
    FD_API_STREAM_CONNECT_TIMEOUT, /* ms to connect to a server (60s) */
    FD_API_STREAM_PROXY_PROTOCOL,  /* 1: a PROXY v1 header to the servers
                                    * of a group that says none itself */
    FD_API_STREAM_COUNT_IP         /* 1: count connections by client
                                    * address (fd_api_conn_ip_count) */
};
int fd_api_stream_set(fd_api_stream_t *l, int opt, int64_t v);
/* 1 for a listen ... udp */
int fd_api_stream_is_udp(const fd_api_stream_t *l);

/* A TLS server context, built now (the files read by the master): the
 * chain and key (PEM paths, as fd_api_conf_path() makes them), protocols
 * ("TLSv1.2 TLSv1.3") and TLS 1.2 ciphers (OpenSSL's syntax), freed with
 * the configuration. NULL after the error fastd reports, which begins
 * with what ("[stream web]"). */
fd_api_tls_t *fd_api_tls_server(const char *what, const char *cert,
                                const char *key, const char *protocols,
                                const char *ciphers);

/* --- 1.9: errors at their lines ------------------------------------------- */

/* fd_api_tls_server, with each error at the line of the key of conf it
 * is about (fd_api_conf_at_key: ssl_protocols, ssl_ciphers, then
 * ssl_certificate for the chain and key), where conf set it. */
fd_api_tls_t *fd_api_tls_server_at(const void *conf, const char *what,
                                   const char *cert, const char *key,
                                   const char *protocols,
                                   const char *ciphers);

/* --- a connection ---------------------------------------------------------- */

void *fd_api_conn_data(fd_api_conn_t *c);
void *fd_api_conn_ctx(fd_api_conn_t *c);
/* The client's address, and the one it reached (a PROXY header's
 * destination). */
void fd_api_conn_client(fd_api_conn_t *c, fd_api_addr_t *a);
void fd_api_conn_local(fd_api_conn_t *c, fd_api_addr_t *a);
/* Connections open from the client's address in this worker, c's
 * included (FD_API_STREAM_COUNT_IP; else 0). */
unsigned fd_api_conn_ip_count(fd_api_conn_t *c);

/* The verbs' hook: rc says how the step ended. */
typedef void (*fd_api_conn_pt)(fd_api_conn_t *c, void *data, int rc);

/* TLS ends here: the handshake with tls, within ms, then done(rc):
 * FD_OK (the connection carries plaintext from here), FD_ERROR (it
 * failed, or the client went), FD_DECLINED (the client spoke plain
 * HTTP), FD_AGAIN (ms passed). FD_OK, or FD_ERROR (no memory: close). */
int fd_api_conn_tls(fd_api_conn_t *c, const fd_api_tls_t *tls, uint64_t ms,
                    fd_api_conn_pt done);
/* The client's first bytes, read into the buffer that goes to the server
 * first (FD_API_STREAM_BUFFER_SIZE of them at most), each time more come:
 * more(c, data, buf, len, rc) with all of them so far, rc FD_OK (more
 * came), FD_DECLINED (the buffer is full), FD_AGAIN (ms passed) or
 * FD_ERROR (the client closed, errno 0, or failed). It returns FD_AGAIN
 * to wait for more (rc FD_OK only), or FD_OK once it called pass or
 * close. */
void fd_api_conn_preread(fd_api_conn_t *c, uint64_t ms,
                         int (*more)(fd_api_conn_t *c, void *data,
                                     const char *buf, size_t len, int rc));
/* To a server of up (a hash balancer hashes the client's address), then
 * spliced to it until both ends closed, one failed, or the idle timeout
 * passed; end runs then. No live server, or none that connects: closed
 * with 502 (logged). */
void fd_api_conn_pass(fd_api_conn_t *c, fd_api_upstream_t *up);
/* Closed now; status is what fd_api_conn_info() says (400, 502...). */
void fd_api_conn_close(fd_api_conn_t *c, int status);

/* How a connection went, for end. fd_api_conn_info_t is fastd's to fill
 * and laid out for good in major version 1: a later minor version does
 * not grow it (it adds calls). where lives until the next call. */
#define FD_API_STREAM_ENDED 1   /* both ends closed */
#define FD_API_STREAM_FAILED 2  /* a side failed: err, where */
#define FD_API_STREAM_IDLE 3    /* the idle timeout passed */
typedef struct {
    int status;                /* 200: it reached a server; 502: none
                                * took it; else fd_api_conn_close()'s */
    uint64_t sent;             /* bytes to the client */
    uint64_t received;         /* bytes from the client, to the server */
    uint64_t start_msec;       /* accepted at (fd_api_now_msec) */
    const char *server;        /* "127.0.0.1:7000", or NULL: none */
    int how;                   /* a splice's end: FD_API_STREAM_*; 0 */
    int err;                   /* FD_API_STREAM_FAILED: errno, or 0 */
    const char *where;         /* ... "reading from the client" */
    uint64_t idle_msec;        /* FD_API_STREAM_IDLE: the timeout */
} fd_api_conn_info_t;
void fd_api_conn_info(fd_api_conn_t *c, fd_api_conn_info_t *info);

/* --- UDP ------------------------------------------------------------------- */

/* In a worker: this worker's socket of a listen ... udp (fastd's: watch
 * it, never close it). -1 for a TCP listener. */
int fd_api_stream_socket(const fd_api_stream_t *l);
/* A UDP socket connected to a server of up (non-blocking, close-on-exec,
 * the module's to close), chosen as pass chooses (key: what a hash
 * balancer hashes), *peer taken until fd_api_peer_release(). -1 when no
 * server could be had (logged, what first). */
int fd_api_stream_dgram(fd_api_upstream_t *up, const void *key, size_t n,
                        const char *what, fd_api_peer_t **peer);
/* The server answered (passive health: it is up), or failed. */
void fd_api_peer_ok(fd_api_peer_t *p);
void fd_api_peer_failed(fd_api_peer_t *p);
void fd_api_peer_release(fd_api_peer_t *p);
const char *fd_api_peer_name(const fd_api_peer_t *p);

#ifdef __cplusplus
}
#endif

#endif /* FASTD_STREAM_H */
