#ifndef FD_OFFLOAD_H
#define FD_OFFLOAD_H

/*
 * The worker's thread pool. fd_offload(r, work, done) runs work(r) on a
 * pool thread (it may block; it must touch only r, r->pool and its own
 * data) and then done(r) back on the worker's loop, woken by an eventfd.
 * No lock is held while work runs. Call it from the loop only (FD_ERROR
 * from a pool thread: do the blocking part inline there instead, see
 * fd_offload_on_pool_thread()).
 *
 * [offload] threads, max_threads, idle_timeout, adaptive: see
 * fd_offload.c for how the pool sizes itself.
 */
typedef void (*fd_offload_pt)(fd_request_t *r);

int fd_offload(fd_request_t *r, fd_offload_pt work, fd_offload_pt done);
/* The same for a job of no request's: work(data) on a pool thread, then
 * done(data) on the loop. */
int fd_offload_call(void *data, void (*work)(void *data),
                    void (*done)(void *data));
int fd_offload_init_worker(fd_worker_t *w);
void fd_offload_exit_worker(fd_worker_t *w);
/* True on a pool thread (a handler the engine dispatched to the pool). */
int fd_offload_on_pool_thread(void);

/* Pool figures (this worker), for the status slot: the public API's
 * (fastd.h), which the pool module reports. */
typedef fd_api_pool_stats_t fd_offload_stats_t;

/* Sums the per-thread counters now (on the loop). */
void fd_offload_stats(fd_offload_stats_t *st);

/*
 * Where the pool publishes its figures (a module's shm area in the
 * worker's status slot); set before fd_offload_init_worker(), i.e. from a
 * module's init_worker. Gauges are stored when they change, the counters
 * after each batch of completions. NULL: figures stay private.
 */
void fd_offload_publish_to(fd_offload_stats_t *area);

#endif
