#ifndef FD_EVENT_H
#define FD_EVENT_H

#include <signal.h>
#include <stdint.h>

/*
 * Everything registered with the worker's epoll starts with an fd_event_t;
 * epoll's data.ptr points at it and the loop calls its handler.
 */
struct fd_event_s {
    int fd;
    /* flipped each time the struct is reused for a new fd: an event that
     * epoll returned for the previous user in the same batch is dropped
     * (the low bit of data.ptr carries it) */
    unsigned instance;
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
int fd_timer_init(void);

/* Time caches, refreshed by fd_time_update() at most once per loop turn. */
void fd_time_update(void);
extern char fd_http_date[sizeof("Mon, 28 Sep 1970 06:00:00 GMT")];
extern volatile time_t fd_current_sec;
/* RFC 1123 date for any time into buf (30 bytes). */
size_t fd_http_time(char *buf, time_t t);
/* 28/Sep/1970:12:00:00 +0000 style for logs (27 bytes) */
extern char fd_log_time[sizeof("28/Sep/1970:12:00:00 +0000")];

/* epoll registration of the current worker's loop (fd_event.c) */
int fd_event_init(void); /* the worker's epoll */
int fd_event_add(fd_event_t *ev, uint32_t events);
int fd_event_mod(fd_event_t *ev, uint32_t events);
int fd_event_del(fd_event_t *ev);

/* Run fn on the loop at the end of this turn (used by async completions). */
typedef struct fd_posted_s {
    void (*handler)(void *data);
    void *data;
    struct fd_posted_s *next;
} fd_posted_t;
void fd_event_post(fd_posted_t *p);

/*
 * One turn of the loop: the batched sends and the timers, one wait of at
 * most the next timer (and at most max_wait ms when that is >= 0), the
 * events (nevents at most), then what was posted. FD_ERROR when epoll
 * fails.
 */
struct epoll_event;
int fd_event_turn(struct epoll_event *events, int nevents,
                  const sigset_t *waitset, int max_wait);

#endif
