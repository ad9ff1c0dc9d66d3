#ifndef FD_URING_H
#define FD_URING_H

/*
 * The io_uring backend (fd_uring.c), behind fd_event.h's interface. Only
 * fd_event.c, fd_stream.c and fd_sendq.c call these, and fd_worker.c the
 * parking below.
 */
#include <sys/types.h>

#include "fd_core.h"
#include "fd_event.h"

struct io_uring_sqe;
typedef struct fd_stream_s fd_stream_t;

int fd_uring_init(void); /* FD_ERROR (errno): use epoll */
void fd_uring_exit(void);
int fd_uring_add(fd_event_t *ev, uint32_t events);
int fd_uring_mod(fd_event_t *ev, uint32_t events);
int fd_uring_del(fd_event_t *ev);
void fd_uring_move(fd_event_t *to, fd_event_t *from);
int fd_uring_accept(fd_event_t *ev, struct sockaddr *sa, socklen_t *len);
/* A stream's bytes the ring received (fd_transport_tcp's recv under
 * io_uring): the transport's contract (fd_stream.h) */
ssize_t fd_uring_recv(fd_stream_t *s, char *buf, size_t size);
/* Those bytes, left for fd_uring_recv() (MSG_PEEK through the ring). */
ssize_t fd_uring_peek(fd_stream_t *s, char *buf, size_t size);
/* A plain stream's send would block: a poll says when it can go on. */
void fd_uring_want_out(fd_event_t *ev);
/* Bytes, an end or an error the ring holds for ev, not yet read. */
int fd_uring_pending(fd_event_t *ev);
/* The stream's transport reads the socket itself now (a TLS transport
 * without ring_rx was bound): the ring stops receiving for it. */
void fd_uring_unring(fd_event_t *ev);
/* Submit what is queued (a cancel takes effect, and the file a
 * cancelled request held is let go), running no completion: safe from a
 * handler, in the middle of a batch. */
void fd_uring_submit(void);
/* Submit what is queued, wait at most timeout ms (-1: no bound) with
 * waitset as the signal mask, run what completed: how many did, or
 * FD_ERROR. */
int fd_uring_wait(const sigset_t *waitset, int timeout);
/* A submission entry for fd_sendq.c (NULL: the ring is full even after
 * a submit) and its completion tag */
struct io_uring_sqe *fd_uring_sqe(void);
uint64_t fd_uring_send_tag(unsigned index);

/*
 * Parking: an idle plain stream whose bytes come by the ring gives its
 * event up, and its owner keeps FD_URING_PARK bytes of its own in the
 * slot instead (fd_worker.c: an idle keep-alive connection costs the
 * slot and nothing else). fd_uring_park() returns that room (zeroed) and
 * the slot's index, or NULL when the stream holds something (bytes, an
 * end, a write poll) and cannot park. When the ring receives for a
 * parked slot, fd_uring_wake(slot) runs first: it is to give the slot an
 * event again with fd_uring_unpark() (reading its record before, which
 * that clears), and the completion then reaches that event as usual. A
 * parked slot leaves the ring only that way: it is woken before it is
 * closed. fd_uring_parked(): the record and descriptor of a parked slot,
 * NULL for any other.
 */
#define FD_URING_PARK 40
void *fd_uring_park(fd_event_t *ev, uint32_t *slot);
void *fd_uring_parked(uint32_t slot, int *fd);
void fd_uring_unpark(uint32_t slot, fd_event_t *ev);
extern void (*fd_uring_wake)(uint32_t slot);

#endif
