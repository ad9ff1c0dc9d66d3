#ifndef FD_CONNECTION_H
#define FD_CONNECTION_H

#include <netinet/in.h>
#include <signal.h>

#include "fd_event.h"
#include "fd_stream.h"

/* What a connection is doing; drives the timeout and the status gauges. */
enum {
    FD_CONN_FREE = 0,
    FD_CONN_IDLE,      /* keep-alive, no buffers held */
    FD_CONN_READING,   /* header or body in progress */
    FD_CONN_BUSY,      /* a handler owns it (async), or output pending */
    FD_CONN_LINGER     /* closing: draining what the peer still sends */
};

typedef struct fd_http_conn_s fd_http_conn_t;

/*
 * A client connection: a stream (event, deadline, readiness, transport)
 * and what the protocol on it needs while it is idle. Kept small: an idle
 * keep-alive connection costs this struct (and, under TLS, its SSL
 * object), nothing else. Everything a request needs lives in ->h, taken
 * when data arrives.
 */
struct fd_connection_s {
    fd_stream_t s;             /* first: the loop's event is the connection */
    fd_http_conn_t *h;
    uint32_t requests;
    uint32_t id;               /* for log lines; wraps */
    uint16_t ls_index;         /* fd_conn_listening(c) */
    uint16_t port;
    uint8_t state;
    uint8_t family;
    uint8_t closing:1;         /* close once the output is written */
    uint8_t linger:1;          /* drain the peer before closing */
    uint8_t ip_counted:1;      /* in the worker's per-address count */
    uint8_t plain_on_tls:1;    /* a plain HTTP request on a TLS port */
    uint8_t h2:1;              /* it speaks HTTP/2 (fd_http2.c) */
    uint8_t proxied:1;         /* addr came from a PROXY header: the
                                * peer's is in the worker's side table */
    uint8_t addr[16];          /* peer address, v4 in the first 4 bytes */
};

/* an idle keep-alive connection costs this much under epoll (issue:
 * <= 100 bytes); under io_uring it parks in its ring slot instead */
_Static_assert(sizeof(struct fd_connection_s) <= 96,
               "fd_connection_t grew past 96 bytes");

/*
 * What a listening address speaks: the protocol that takes the
 * connections accepted on it (HTTP/1.1 today). The worker's loop knows
 * connections only through these.
 */
typedef struct fd_proto_s {
    const char *name;
    void (*init)(fd_connection_t *c);     /* accepted (transport ready to
                                           * start its handshake) */
    void (*timeout)(fd_connection_t *c);  /* the deadline passed */
    void (*release)(fd_connection_t *c);  /* give back per-request state */
    /* nothing in progress: a graceful stop may close it now */
    int (*idle)(fd_connection_t *c);
    /* a graceful stop began: tell the peer (HTTP/2: GOAWAY); NULL:
     * nothing to say (HTTP/1.1 answers Connection: close) */
    void (*quit)(fd_connection_t *c);
    /* the event handler of its idle connections: what a parked one gets
     * back when it wakes (fd_connection_park) */
    void (*handler)(fd_event_t *ev, uint32_t events);
} fd_proto_t;

void fd_connection_close(fd_connection_t *c);
/* c's stream was moved out (fd_stream_move: its socket is a module's
 * now): c is counted out and given back, the socket left alone. */
void fd_connection_detach(fd_connection_t *c);
/* c went idle with nothing held (keep-alive, its deadline set): under
 * io_uring it parks at the end of the loop turn, its struct given back
 * and its state kept in its ring slot, until bytes or its deadline come
 * (fd_worker.c). Any other connection, or backend, stays as it is. */
void fd_connection_park(fd_connection_t *c);
void fd_connection_set_timeout(fd_connection_t *c, fd_msec_t ms);
void fd_connection_set_state(fd_connection_t *c, int state);
/* Open connections from c's address in this worker (max_conns_per_ip);
 * 0 when they are not counted. */
unsigned fd_connection_ip_count(fd_connection_t *c);
/* A connection handed to a module (a tunnel) keeps counting for its
 * address: fd_connection_ip_take() moves c's place out of c (closing c
 * then leaves the count alone) and fd_ip_release() gives it back when the
 * module's connection ends. NULL (nothing to release) when not counted. */
void *fd_connection_ip_take(fd_connection_t *c);
void fd_ip_release(void *ref);
/* Text of the peer address into buf (INET6_ADDRSTRLEN); returns length. */
size_t fd_connection_addr_text(fd_connection_t *c, char *buf, size_t size);
/* The client's address (after a PROXY header: the one it gave), and the
 * socket's peer (the balancer; the same when there was none). */
struct fd_addr_s;
void fd_connection_addr(const fd_connection_t *c, struct fd_addr_s *a);
void fd_connection_hop(const fd_connection_t *c, struct fd_addr_s *a);

/* The worker's loop */
int fd_worker_run(fd_cycle_t *cycle, unsigned index, unsigned slot);
void fd_worker_stop_accepting(void);
/* A new connection's id (log lines, $connection): QUIC's take theirs
 * from the same count */
uint32_t fd_worker_conn_id(void);
#ifdef FD_FUZZ
/* tests/fuzz/fuzz_request.c drives the loop in its own process */
int fd_worker_fuzz_cycle(fd_cycle_t *cycle);
int fd_worker_fuzz_turn(int max_wait);
#endif
/* A module took over (+1) or let go of (-1) a connection the engine no
 * longer counts (a tunnel): a graceful stop waits for it, up to
 * shutdown_timeout. */
void fd_worker_hold(int delta);

extern volatile sig_atomic_t fd_sig_quit, fd_sig_terminate, fd_sig_reopen;

#endif
