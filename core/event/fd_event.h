#ifndef FD_EVENT_H
#define FD_EVENT_H

#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>

/*
 * Everything registered with the worker's epoll starts with an fd_event_t;
 * epoll's data.ptr points at it and the loop calls its handler.
 */
struct fd_event_s {
    int fd;
    /* flipped each time the struct is reused for a new fd: an event that
     * epoll returned for the previous user in the same batch is dropped
     * (the low bit of data.ptr carries it) */
    unsigned instance:1;
    /* the event is an fd_stream_t's: over plain TCP, the io_uring backend
     * receives into its own buffers and fd_stream_recv() takes from them */
    unsigned stream:1;
    /* a listening socket: io_uring accepts on it (fd_event_accept) */
    unsigned listen:1;
    /* io_uring: the registration's slot + 1 (fd_uring.c); 0: none */
    unsigned slot:29;
    void (*handler)(fd_event_t *ev, uint32_t events);
};

/*
 * One timer structure for every timeout: a binary min-heap of fd_timer_t
 * ordered by expiry, O(log n) add/delete, O(1) peek. Users that push a
 * deadline forward on every request (keep-alive, header) should not re-sift:
 * keep their own deadline and re-arm when the timer fires early (see
 * fd_connection.c).
 */
struct fd_timer_s {
    uint32_t when; /* fd_current_msec's low 32 bits: see fd_msec32_after */
    unsigned idx;  /* position in the heap + 1; 0 when not armed */
    void (*handler)(fd_timer_t *t);
};

/*
 * Deadlines kept in 32 bits (a timer is 16 bytes, an idle connection 80):
 * the low 32 bits of fd_current_msec, compared as serial numbers, which is
 * exact while the deadlines in use lie within 2^31 ms (24 days) of each
 * other and of now. Timeouts are capped at FD_TIMER_MAX (12 days).
 */
#define FD_TIMER_MAX ((fd_msec_t)1 << 30)
static inline int32_t fd_msec32_diff(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b);
}

extern volatile fd_msec_t fd_current_msec; /* cached, per loop iteration */

static inline uint32_t fd_msec32_after(fd_msec_t ms)
{
    return (uint32_t)(fd_current_msec + (ms < FD_TIMER_MAX ? ms
                                                           : FD_TIMER_MAX));
}

void fd_timer_add(fd_timer_t *t, fd_msec_t after);
void fd_timer_del(fd_timer_t *t);
static inline int fd_timer_armed(const fd_timer_t *t) { return t->idx != 0; }
/* Run expired timers; returns ms until the next one or -1. */
int fd_timer_expire(void);
#ifdef FD_FUZZ
fd_timer_t *fd_timer_fuzz_first(void);
#endif
int fd_timer_init(void);

/* Time caches, refreshed by fd_time_update() at most once per loop turn. */
void fd_time_update(void);
extern char fd_http_date[sizeof("Mon, 28 Sep 1970 06:00:00 GMT")];
extern volatile time_t fd_current_sec;
/* RFC 1123 date for any time into buf (30 bytes). */
size_t fd_http_time(char *buf, time_t t);
/* An HTTP date's seconds since the epoch, or -1 if p is not one. */
time_t fd_http_parse_time(const char *p, size_t len);
/* 28/Sep/1970:12:00:00 +0000 style for logs (27 bytes) */
extern char fd_log_time[sizeof("28/Sep/1970:12:00:00 +0000")];

/*
 * Registration with the current worker's loop (fd_event.c). Two backends
 * behind one interface ([events] backend): epoll, and io_uring
 * (fd_uring.c), where a plain TCP stream's bytes arrive in the ring's
 * buffers, a listening socket accepts in the ring, sends of a turn go
 * with its wait in one io_uring_enter(), and everything else is a poll
 * (multishot for EPOLLET, one-shot and armed again after the handler
 * otherwise). The events mean what epoll's do under both: level-
 * triggered unless EPOLLET is asked for.
 *
 * Under io_uring a registration holds the socket open until it is
 * cancelled: a registered descriptor is closed with fd_event_close()
 * (or fd_event_del() first), never with a bare close().
 */
enum { FD_BACKEND_EPOLL, FD_BACKEND_URING };
extern int fd_event_uring; /* the io_uring backend runs this worker */
/* The worker's backend: FD_BACKEND_URING falls back to epoll (one
 * [warn]) when the kernel or a seccomp filter refuses it. */
int fd_event_init(int backend);
void fd_event_exit(void);
int fd_event_add(fd_event_t *ev, uint32_t events);
int fd_event_mod(fd_event_t *ev, uint32_t events);
int fd_event_del(fd_event_t *ev);
/* io_uring: submit what is queued (a cancel takes effect) and run what
 * has completed, without waiting: a turn of the loop, never from inside
 * one's batch (a handler); epoll: nothing to do. */
void fd_event_flush(void);
/* io_uring: submit what is queued (a cancel takes effect) and run
 * nothing: what a handler may call; epoll: nothing to do. */
void fd_event_submit(void);
/* Leave the loop and close ev->fd; ev->fd is -1 after. */
void fd_event_close(fd_event_t *ev);
/* A stream's registration follows it to another struct (fd_stream_move) */
void fd_event_move(fd_event_t *to, fd_event_t *from);
/* accept4() on a listening socket's event: under io_uring, what the ring
 * accepted for this event (or -1, EAGAIN) */
int fd_event_accept(fd_event_t *ev, struct sockaddr *sa, socklen_t *len);

/* Run fn on the loop at the end of this turn (used by async completions). */
typedef struct fd_posted_s {
    void (*handler)(void *data);
    void *data;
    struct fd_posted_s *next;
} fd_posted_t;
void fd_event_post(fd_posted_t *p);

/* fn runs before each wait, after the timers: where output a layer
 * batched over the turn leaves (QUIC's datagrams). Per process, a few. */
void fd_event_before_wait(void (*fn)(void));

/*
 * One turn of the loop: the batched sends and the timers, one wait of at
 * most the next timer (and at most max_wait ms when that is >= 0), the
 * events (nevents at most; io_uring: every completion there is, and the
 * sends go with the wait), then what was posted. FD_ERROR when the wait
 * fails.
 */
struct epoll_event;
int fd_event_turn(struct epoll_event *events, int nevents,
                  const sigset_t *waitset, int max_wait);

#endif
