#ifndef FD_QUIC_H
#define FD_QUIC_H

/*
 * QUIC for clients (fd_quic.c): a listen ... quic address is one UDP
 * socket per worker on the worker's loop; each QUIC connection is an
 * ngtcp2 server connection whose TLS is fd_quic_tls.c's and whose streams
 * carry HTTP/3 (core/http/fd_http3.c, on nghttp3).
 */
#include "fd_connection.h"

/* The worker's socket for a quic address, on its loop. */
int fd_quic_listen(fd_listening_t *ls, fd_worker_t *w);
/* A graceful stop began: GOAWAY on every connection, no new ones; the
 * worker waits for them (fd_worker_hold) up to shutdown_timeout. */
void fd_quic_quit(void);
/* SIGQUIT again during a graceful stop: read the sockets left to a newer
 * generation again (fd_quic_fwd_in), which may be stopping too. */
void fd_quic_quit_again(void);
/* Send the datagrams the connections framed this turn (sendmmsg()); the
 * loop calls it before each wait. */
void fd_quic_flush(void);
/* The master, before the first fork: the secrets every worker shares and
 * that survive reloads (fd_quic_keys.c); FD_OK without HTTP/3. */
int fd_quic_shm_init(void);

#ifdef FD_QUIC_PRIVATE
/* fd_quic.c and fd_http3.c only */
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <nghttp3/nghttp3.h>

#include "fd_quic_tls.h"

#define FD_QUIC_SCID_LEN 18   /* our connection IDs; byte 0: the worker,
                               * 1: its generation, 2-3: a tag (cid_new) */
#define FD_QUIC_RESETS_PER_SEC 1024 /* stateless resets, all workers */
#define FD_QUIC_MAX_CIDS 10   /* ours (active_connection_id_limit) + the
                               * client's first DCID */

typedef struct fd_quic_sock_s fd_quic_sock_t;
typedef struct fd_quic_conn_s fd_quic_conn_t;
typedef struct fd_h3_conn_s fd_h3_conn_t;

struct fd_quic_conn_s {
    /* first: the engine's view of it, r->c of every request it carries
     * (address, server choice, log id); no socket of its own: s.ev.fd
     * is -1, and nothing but this file closes it */
    fd_connection_t c;
    ngtcp2_conn *conn;
    fd_quic_tls_t tls;
    ngtcp2_crypto_conn_ref ref;
    fd_quic_sock_t *qs;
    ngtcp2_path_storage ps;       /* the path of our last packet */
    ngtcp2_sockaddr_union remote; /* the client's address ngtcp2 sends
                                   * to: a move counts a migration */
    ngtcp2_socklen remotelen;
    fd_timer_t timer;           /* ngtcp2's expiry */
    fd_posted_t post;           /* write at the end of the turn */
    fd_h3_conn_t *h3;           /* fd_http3.c, once streams come */
    nghttp3_conn *h3conn;       /* h3's session, for the write loop */
    ngtcp2_ccerr ccerr;         /* why it closes, once it does */
    uint8_t *close_pkt;         /* CONNECTION_CLOSE, sent again on input
                                 * during the closing period */
    size_t close_len;
    unsigned close_sent;
    ngtcp2_cid cids[FD_QUIC_MAX_CIDS]; /* in the worker's table */
    unsigned ncids;
    unsigned refs;              /* requests a module still holds after
                                 * the connection ended (fd_http3.c) */
    unsigned posted:1;
    unsigned closing:1;         /* closing or draining: only the timer */
    unsigned dead:1;            /* freed once refs drop to 0 */
    unsigned goaway:1;
    unsigned handshaked:1;      /* no longer half-open (quic_retry auto) */
};

/* fd_quic_keys.c: made by the master, read by every worker */
typedef struct {
    struct {
        uint8_t reset[32];      /* stateless reset tokens' static key */
        uint8_t retry[32];      /* Retry and NEW_TOKEN tokens' key */
        uint8_t cid[16];        /* our connection IDs' tag (fd_quic.c) */
    } secrets;
    uint64_t reset_sec;         /* the second resets are counted in */
    uint32_t resets;            /* sent in it, by all workers */
} fd_quic_keys_t;

extern fd_quic_keys_t *fd_quic_keys;
/* One more stateless reset in second now_sec: 0 once the budget is out */
int fd_quic_reset_allowed(uint64_t now_sec);

/* fd_quic_fwd.c: a datagram read by one worker for a connection of
 * another (a reload's generations read the same sockets), handed to its
 * owner as it came: the address of its listening socket, the local one
 * it was sent to, the client's; its bytes follow */
typedef struct {
    ngtcp2_sockaddr_union bound, local, remote;
    uint32_t len;
    uint8_t boundlen, locallen, remotelen;
} fd_quic_fwd_rec_t;

enum {
    FD_QUIC_READ,               /* read from the UDP socket */
    FD_QUIC_FWD_PEER,           /* forwarded to this worker, the owner */
    FD_QUIC_FWD_NEWER,          /* the same, by a running worker of a
                                 * newer generation */
    FD_QUIC_FWD_ORPHAN          /* its owner is gone: back to the reader */
};

/* The worker's forwarding socket (before it reads its UDP ones). */
int fd_quic_fwd_init(void);
/* Hand a datagram read on ls to the worker index of the generation
 * whose low byte is generation; it leaves before the loop waits. */
void fd_quic_fwd(unsigned generation, unsigned index,
                 const fd_listening_t *ls, const ngtcp2_path *path,
                 const uint8_t *data, size_t len);
void fd_quic_fwd_flush(void);
/* fd_quic.c: a forwarded datagram (from: FD_QUIC_FWD_*) */
void fd_quic_fwd_in(const fd_quic_fwd_rec_t *rec, const uint8_t *data,
                    int from);

/* fd_quic_mem.c: the worker's free lists of small blocks, for nghttp3
 * (passed to nghttp3_conn_server_new; NULL in sanitizer builds: libc's)
 * and HTTP/3's own; trimmed when the worker's last connection ends */
const nghttp3_mem *fd_quic_nghttp3_mem(void);
void *fd_quic_alloc(size_t size);
void fd_quic_free(void *p);
void fd_quic_mem_trim(void);

ngtcp2_tstamp fd_quic_now(void);
/* Write what ngtcp2 and nghttp3 have, at the end of this turn. */
void fd_quic_post(fd_quic_conn_t *qc);
/* An error ends the connection: CONNECTION_CLOSE with the error. */
void fd_quic_fail(fd_quic_conn_t *qc, uint64_t app_error, const char *why);
/* A request released its hold on an ended connection. */
void fd_quic_unref(fd_quic_conn_t *qc);

/* fd_http3.c: ngtcp2's stream callbacks, and the connection's end */
int fd_h3_recv_stream_data(ngtcp2_conn *conn, uint32_t flags,
                           int64_t stream_id, uint64_t offset,
                           const uint8_t *data, size_t datalen,
                           void *user_data, void *stream_user_data);
int fd_h3_acked_stream_data_offset(ngtcp2_conn *conn, int64_t stream_id,
                                   uint64_t offset, uint64_t datalen,
                                   void *user_data, void *stream_user_data);
int fd_h3_stream_close(ngtcp2_conn *conn, uint32_t flags, int64_t stream_id,
                       uint64_t app_error_code, void *user_data,
                       void *stream_user_data);
int fd_h3_stream_reset(ngtcp2_conn *conn, int64_t stream_id,
                       uint64_t final_size, uint64_t app_error_code,
                       void *user_data, void *stream_user_data);
int fd_h3_stream_stop_sending(ngtcp2_conn *conn, int64_t stream_id,
                              uint64_t app_error_code, void *user_data,
                              void *stream_user_data);
int fd_h3_extend_max_remote_streams_bidi(ngtcp2_conn *conn,
                                         uint64_t max_streams,
                                         void *user_data);
int fd_h3_extend_max_stream_data(ngtcp2_conn *conn, int64_t stream_id,
                                 uint64_t max_data, void *user_data,
                                 void *stream_user_data);
/* the streams' jobs (start requests, feed bodies, drains): before each
 * write */
void fd_h3_run(fd_quic_conn_t *qc);
/* graceful: GOAWAY, then the connection ends when its streams have */
void fd_h3_shutdown(fd_quic_conn_t *qc);
/* streams still open (a graceful stop waits for them) */
unsigned fd_h3_nstreams(fd_quic_conn_t *qc);
void fd_h3_release(fd_quic_conn_t *qc);
#endif

#endif
