/*
 * Listening sockets belong to the master and outlive reloads: a reload
 * takes over every socket whose address is still configured, so nothing
 * queued in a backlog is dropped. reuseport opens one socket per worker.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_cycle.h"

static int open_one(fd_cycle_t *cycle, fd_listening_t *ls, int reuseport)
{
    int fd, one = 1, secs = 1;

    fd = socket(ls->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
                                         SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "socket() for %s failed", ls->text);
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "SO_REUSEPORT on %s failed",
                     ls->text);
        close(fd);
        return -1;
    }
    if (ls->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ls->addr, ls->addrlen) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "bind() to %s failed", ls->text);
        close(fd);
        return -1;
    }
    if (listen(fd, (int)cycle->events.backlog) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "listen() on %s failed", ls->text);
        close(fd);
        return -1;
    }
    /* accept() only once the request has arrived (nginx's "deferred") */
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs));
    return fd;
}

/*
 * SO_REUSEPORT lets any process of the same user bind beside another, and
 * the kernel would then split new connections between two servers. An
 * address this master does not hold yet is first bound without it: that
 * fails while anyone else listens there, as a plain bind would.
 */
static int address_free(fd_listening_t *ls)
{
    int fd, one = 1, rc, err;

    fd = socket(ls->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 1; /* the real socket() will say why */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls->addr.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    rc = bind(fd, (struct sockaddr *)&ls->addr, ls->addrlen);
    err = errno;
    close(fd);
    if (rc < 0 && err == EADDRINUSE) {
        fd_log_error(FD_LOG_EMERG, err, "bind() to %s failed: another "
                     "process listens there", ls->text);
        return 0;
    }
    return 1;
}

static int in_cycle(fd_cycle_t *cycle, int fd)
{
    fd_listening_t *ls;
    unsigned i;

    for (ls = cycle ? cycle->listening : NULL; ls; ls = ls->next)
        for (i = 0; i < ls->nfds; i++)
            if (ls->fds[i] == fd)
                return 1;
    return 0;
}

/* Does old listen on the address of ls (in either accept mode)? */
static int held(fd_cycle_t *old, fd_listening_t *ls)
{
    fd_listening_t *ol;

    for (ol = old ? old->listening : NULL; ol; ol = ol->next)
        if (ol->nfds && ol->addrlen == ls->addrlen &&
            memcmp(&ol->addr, &ls->addr, ls->addrlen) == 0)
            return 1;
    return 0;
}

/*
 * Give every address of cycle its sockets: the old cycle's where the
 * address (and the balancing mode) is unchanged, new ones otherwise. The
 * old cycle is not modified; on failure the new sockets are closed.
 */
int fd_listening_open(fd_cycle_t *cycle, fd_cycle_t *old)
{
    fd_listening_t *ls, *ol;
    int reuseport = cycle->events.accept == FD_ACCEPT_REUSEPORT;
    unsigned want = reuseport ? (unsigned)cycle->nworkers : 1, i;

    for (ls = cycle->listening; ls; ls = ls->next) {
        ls->fds = fd_palloc(cycle->pool, want * sizeof(int));
        ls->nfds = 0;
        ls->ev.fd = -1;
        ol = NULL;
        if (old && (old->events.accept == FD_ACCEPT_REUSEPORT) == reuseport)
            for (ol = old->listening; ol; ol = ol->next)
                if (ol->addrlen == ls->addrlen &&
                    memcmp(&ol->addr, &ls->addr, ls->addrlen) == 0)
                    break;
        for (i = 0; ol && i < ol->nfds && ls->nfds < want; i++)
            ls->fds[ls->nfds++] = ol->fds[i];
        if (reuseport && ls->nfds == 0 && !held(old, ls) && !address_free(ls))
            goto failed;
        while (ls->nfds < want) {
            int fd = open_one(cycle, ls, reuseport);
            if (fd < 0)
                goto failed;
            ls->fds[ls->nfds++] = fd;
        }
    }
    return FD_OK;

failed:
    for (ls = cycle->listening; ls; ls = ls->next) {
        for (i = 0; ls->fds && i < ls->nfds; i++)
            if (!in_cycle(old, ls->fds[i]))
                close(ls->fds[i]);
        ls->nfds = 0;
    }
    return FD_ERROR;
}

/* After a reload: close the old sockets the new cycle did not take. */
void fd_listening_close_unused(fd_cycle_t *cycle, fd_cycle_t *old)
{
    fd_listening_t *ol;
    unsigned i;

    if (old == NULL)
        return;
    for (ol = old->listening; ol; ol = ol->next)
        for (i = 0; i < ol->nfds; i++)
            if (!in_cycle(cycle, ol->fds[i]))
                close(ol->fds[i]);
}

void fd_listening_close(fd_cycle_t *cycle)
{
    fd_listening_t *ls;
    unsigned i;

    for (ls = cycle->listening; ls; ls = ls->next) {
        for (i = 0; i < ls->nfds; i++)
            close(ls->fds[i]);
        ls->nfds = 0;
    }
}
