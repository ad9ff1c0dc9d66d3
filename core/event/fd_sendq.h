#ifndef FD_SENDQ_H
#define FD_SENDQ_H

#include <sys/types.h>
#include <sys/uio.h>

/*
 * Sends deferred to the end of the loop turn and made there in one
 * io_uring_enter(): [events] batch_sends. Under the io_uring backend, the
 * same enter as the loop's wait.
 *
 * Why: on one CPU shared with its peer (a backend on the same host), each
 * send() that wakes the peer lets the peer preempt the worker when the
 * syscall returns, so the peer runs once per request. The sends of a whole
 * loop turn in one syscall wake it once, and it finds them all.
 *
 * A module fills op->fd, op->iov/niov and op->handler and calls
 * fd_sendq_add(). FD_DECLINED (batching off, no io_uring here, the queue
 * full): send it yourself, now. Later the handler runs with op->res, the
 * bytes sent or -errno (-EAGAIN: the socket buffer was full), on the loop
 * thread, outside any other handler. Until then the buffers must stay put;
 * fd_sendq_cancel() takes back a queued op (safe to call on one that is
 * not queued). Loop thread only.
 */
typedef struct fd_sendop_s fd_sendop_t;
struct fd_sendop_s {
    int fd;
    int niov; /* 1 or 2 */
    struct iovec iov[2];
    ssize_t res;
    void (*handler)(fd_sendop_t *op);
    unsigned slot; /* queue index + 1; 0: not queued */
};

/*
 * The loop flushes early, between two events, once this many wait: a
 * backend on another CPU then starts on them while the turn goes on, and
 * one wake-up per this many requests is still next to nothing.
 */
#define FD_SENDQ_EARLY 32

int fd_sendq_init(int enabled); /* per worker; FD_OK even without io_uring */
void fd_sendq_exit(void);
int fd_sendq_add(fd_sendop_t *op);
void fd_sendq_cancel(fd_sendop_t *op);
/* Make every queued send and run the handlers (they may queue more). */
void fd_sendq_flush(void);
unsigned fd_sendq_pending(void); /* sends queued */
int fd_sendq_active(void); /* batching is on and io_uring works here */

/*
 * Under the io_uring event backend the sends share the loop's ring and go
 * with its wait (fd_uring.c): prepare puts the queued ones in the ring,
 * result records what each did, waiting counts those with no result yet,
 * finish runs their handlers. fd_sendq_flush() does nothing there.
 */
void fd_sendq_prepare(void);
void fd_sendq_result(unsigned index, int res);
unsigned fd_sendq_waiting(void);
void fd_sendq_finish(void);

#endif
