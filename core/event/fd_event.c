/*
 * The worker's event loop: epoll registration, one turn of waiting and
 * dispatching, and the events posted to the end of a turn. What an event
 * means is its handler's business: a listening socket, a stream, a pipe.
 */
#include <sys/epoll.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_connection.h" /* fd_sig_terminate */
#include "fd_sendq.h"

static fd_posted_t *posted;

/* the low bit of data.ptr carries the event's instance (fd_event.h) */
#define EV_PTR(ev) ((void *)((uintptr_t)(ev) | ((ev)->instance & 1)))

int fd_event_init(void)
{
    fd_worker->epfd = epoll_create1(EPOLL_CLOEXEC);
    return fd_worker->epfd < 0 ? FD_ERROR : FD_OK;
}

int fd_event_add(fd_event_t *ev, uint32_t events)
{
    struct epoll_event ee = {.events = events, .data.ptr = EV_PTR(ev)};

    return epoll_ctl(fd_worker->epfd, EPOLL_CTL_ADD, ev->fd, &ee);
}

int fd_event_mod(fd_event_t *ev, uint32_t events)
{
    struct epoll_event ee = {.events = events, .data.ptr = EV_PTR(ev)};

    return epoll_ctl(fd_worker->epfd, EPOLL_CTL_MOD, ev->fd, &ee);
}

int fd_event_del(fd_event_t *ev)
{
    return epoll_ctl(fd_worker->epfd, EPOLL_CTL_DEL, ev->fd, NULL);
}

void fd_event_post(fd_posted_t *p)
{
    p->next = posted;
    posted = p;
}

/* What is posted while these run waits for the next turn, after a look
 * at epoll: work that posts itself again (a body fed in pieces) yields to
 * the other connections instead of running on. */
static void run_posted(void)
{
    fd_posted_t *p = posted, *next;

    posted = NULL;
    for (; p; p = next) {
        next = p->next;
        p->next = NULL;
        p->handler(p->data);
    }
}

int fd_event_turn(struct epoll_event *events, int nevents,
                  const sigset_t *waitset, int max_wait)
{
    int nev, i, timeout;

    /* the turn's batched sends, before the timers: their handlers
     * arm timers, and a timer may queue a send (a retry) */
    do {
        fd_sendq_flush();
        timeout = fd_timer_expire();
    } while (fd_sendq_pending());
    if (fd_sig_terminate)
        return FD_OK; /* a timer closed the last connection of a drain */
    if (posted)
        timeout = 0;
    if (max_wait >= 0 && (timeout < 0 || timeout > max_wait))
        timeout = max_wait;
    nev = epoll_pwait(fd_worker->epfd, events, nevents, timeout, waitset);
    fd_time_update();
    if (nev < 0) {
        if (errno == EINTR)
            return FD_OK;
        fd_log_error(FD_LOG_ALERT, errno, "epoll_pwait() failed");
        return FD_ERROR;
    }
    for (i = 0; i < nev; i++) {
        uintptr_t p = (uintptr_t)events[i].data.ptr;
        fd_event_t *ev = (fd_event_t *)(p & ~(uintptr_t)1);
        /* closed earlier in this batch, or closed and reused */
        if (ev->fd < 0 || (ev->instance & 1) != (p & 1))
            continue;
        ev->handler(ev, events[i].events);
        if (fd_sendq_pending() >= FD_SENDQ_EARLY)
            fd_sendq_flush();
    }
    run_posted();
    return FD_OK;
}
