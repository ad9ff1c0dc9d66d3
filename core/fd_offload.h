#ifndef FD_OFFLOAD_H
#define FD_OFFLOAD_H

/*
 * The worker's thread pool. fd_offload(r, work, done) runs work(r) on a
 * pool thread (it may block; it must touch only r and its own data) and
 * then done(r) back on the worker's loop, woken by an eventfd. No lock is
 * held while work runs.
 */
typedef void (*fd_offload_pt)(fd_request_t *r);

int fd_offload(fd_request_t *r, fd_offload_pt work, fd_offload_pt done);
int fd_offload_init_worker(fd_worker_t *w);
void fd_offload_exit_worker(fd_worker_t *w);

/* Pool figures (this worker), for the status slot. */
typedef struct {
    uint64_t threads;
    uint64_t busy;
    uint64_t pending;
    uint64_t completed;       /* monotonic */
    uint64_t wait_usec_sum;   /* queue wait of completed items */
} fd_offload_stats_t;

void fd_offload_stats(fd_offload_stats_t *st);

#endif
