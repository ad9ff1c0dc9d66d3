#ifndef FD_CONNECTION_H
#define FD_CONNECTION_H

#include <netinet/in.h>
#include <signal.h>

#include "fd_event.h"

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
 * The part of a connection that lives while it is idle: kept small (an idle
 * keep-alive connection costs this struct, nothing else). Everything a
 * request needs lives in ->h, taken when data arrives.
 */
struct fd_connection_s {
    fd_event_t ev;
    fd_timer_t timer;
    fd_http_conn_t *h;
    uint32_t deadline;         /* the real timeout (fd_msec32_after), 0: none;
                                * the timer may fire earlier */
    uint32_t requests;
    uint32_t id;               /* for log lines; wraps */
    uint16_t ls_index;         /* fd_conn_listening(c) */
    uint16_t port;
    uint8_t state;
    uint8_t family;
    uint8_t eof:1;             /* the peer sent FIN (read 0 or RDHUP) */
    uint8_t readable:1;        /* ET: data may be left in the socket */
    uint8_t writable:1;        /* ET: the socket can take more output */
    uint8_t nodelay:1;
    uint8_t closing:1;         /* close once the output is written */
    uint8_t error:1;
    uint8_t linger:1;          /* drain the peer before closing */
    uint8_t registered:1;      /* added to epoll (lazily, when it waits) */
    uint8_t lt_out:1;          /* level-triggered: EPOLLOUT registered */
    uint8_t lt_noin:1;         /* level-triggered: EPOLLIN not registered */
    uint8_t lt_hup:1;          /* level-triggered: only EPOLLRDHUP */
    uint8_t ip_counted:1;      /* in the worker's per-address count */
    uint8_t addr[16];          /* peer address, v4 in the first 4 bytes */
};

/* an idle keep-alive connection costs this much (issue: <= 100 bytes) */
_Static_assert(sizeof(struct fd_connection_s) <= 80,
               "fd_connection_t grew past 80 bytes");

void fd_connection_close(fd_connection_t *c);
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

/* The worker's loop */
int fd_worker_run(fd_cycle_t *cycle, unsigned index, unsigned slot);
void fd_worker_stop_accepting(void);
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
