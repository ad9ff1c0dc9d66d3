/*
 * The worker's event loop: registration, one turn of waiting and
 * dispatching, and the events posted to the end of a turn. What an event
 * means is its handler's business: a listening socket, a stream, a pipe.
 * The waiting is epoll's, or io_uring's (fd_uring.c): one test of a flag
 * per call picks it.
 */
#include <sys/epoll.h>
#include <unistd.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_connection.h" /* fd_sig_terminate */
#include "fd_sendq.h"
#include "fd_uring.h"

static fd_posted_t *posted;
static void (*before_wait[4])(void);
static unsigned nbefore_wait;

/* the low bit of data.ptr carries the event's instance (fd_event.h) */
#define EV_PTR(ev) ((void *)((uintptr_t)(ev) | ((ev)->instance & 1)))

int fd_event_init(int backend)
{
    if (backend == FD_BACKEND_URING) {
        if (fd_uring_init() == FD_OK)
            return FD_OK;
        fd_log_error(FD_LOG_WARN, errno, "backend = io_uring: io_uring is "
                     "not available here (the kernel, io_uring_disabled or "
                     "a seccomp filter), using epoll");
    }
    fd_worker->epfd = epoll_create1(EPOLL_CLOEXEC);
    return fd_worker->epfd < 0 ? FD_ERROR : FD_OK;
}

void fd_event_exit(void)
{
    fd_uring_exit();
}

int fd_event_add(fd_event_t *ev, uint32_t events)
{
    struct epoll_event ee = {.events = events, .data.ptr = EV_PTR(ev)};

    if (fd_event_uring)
        return fd_uring_add(ev, events);
    return epoll_ctl(fd_worker->epfd, EPOLL_CTL_ADD, ev->fd, &ee);
}

int fd_event_mod(fd_event_t *ev, uint32_t events)
{
    struct epoll_event ee = {.events = events, .data.ptr = EV_PTR(ev)};

    if (fd_event_uring)
        return fd_uring_mod(ev, events);
    return epoll_ctl(fd_worker->epfd, EPOLL_CTL_MOD, ev->fd, &ee);
}

int fd_event_del(fd_event_t *ev)
{
    if (fd_event_uring)
        return fd_uring_del(ev);
    return epoll_ctl(fd_worker->epfd, EPOLL_CTL_DEL, ev->fd, NULL);
}

void fd_event_close(fd_event_t *ev)
{
    /* epoll forgets a closed descriptor by itself; a ring's armed
     * request would hold the socket open */
    if (fd_event_uring)
        fd_uring_del(ev);
    close(ev->fd);
    ev->fd = -1;
}

void fd_event_flush(void)
{
    if (fd_event_uring)
        (void)fd_uring_wait(NULL, 0);
}

void fd_event_submit(void)
{
    if (fd_event_uring)
        fd_uring_submit();
}

void fd_event_move(fd_event_t *to, fd_event_t *from)
{
    if (fd_event_uring)
        fd_uring_move(to, from);
}

int fd_event_accept(fd_event_t *ev, struct sockaddr *sa, socklen_t *len)
{
    if (fd_event_uring)
        return fd_uring_accept(ev, sa, len);
    return accept4(ev->fd, sa, len, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

void fd_event_post(fd_posted_t *p)
{
    p->next = posted;
    posted = p;
}

void fd_event_before_wait(void (*fn)(void))
{
    unsigned i;

    for (i = 0; i < nbefore_wait; i++)
        if (before_wait[i] == fn)
            return;
    if (nbefore_wait < fd_nelems(before_wait))
        before_wait[nbefore_wait++] = fn;
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
     * arm timers, and a timer may queue a send (a retry); under io_uring
     * they go with the wait */
    do {
        fd_sendq_flush();
        timeout = fd_timer_expire();
        for (i = 0; i < (int)nbefore_wait; i++)
            before_wait[i]();
    } while (fd_sendq_pending() && !fd_event_uring);
    if (fd_sig_terminate)
        return FD_OK; /* a timer closed the last connection of a drain */
    if (posted)
        timeout = 0;
    if (max_wait >= 0 && (timeout < 0 || timeout > max_wait))
        timeout = max_wait;
    if (fd_event_uring) {
        if (fd_uring_wait(waitset, timeout) < 0)
            return FD_ERROR;
        run_posted();
        return FD_OK;
    }
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
