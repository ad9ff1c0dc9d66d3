/*
 * The offload pool's figures in the status slot. The pool is core
 * (core/fd_offload.c); this module only reserves its part of each worker's
 * shared-memory slot, points the pool at it, and reports it as the group
 * "offload" (no labels):
 *   threads, busy, pending, min_threads, max_threads   gauges
 *   completed, wait_usec_sum                           counters
 * No handler, no keys.
 */
#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"
#include "fd_status.h"

fd_module_t fd_pool_module;

static int pool_init_worker(fd_worker_t *w)
{
    (void)w;
    fd_offload_publish_to(fd_stats_area(fd_stats, &fd_pool_module));
    return FD_OK;
}

static uint64_t get(const uint64_t *v)
{
    return __atomic_load_n(v, __ATOMIC_RELAXED);
}

static void pool_status(fd_status_t *st, const void *area, unsigned worker)
{
    const fd_offload_stats_t *s = area;

    if (s == NULL)
        return;
    if (worker != FD_STATUS_RETIRED) {
        fd_status_gauge(st, "offload_threads", "Offload pool threads.", NULL,
                        get(&s->threads));
        fd_status_gauge(st, "offload_busy",
                        "Offload threads running work.", NULL,
                        get(&s->busy));
        fd_status_gauge(st, "offload_pending",
                        "Work items waiting for an offload thread.", NULL,
                        get(&s->pending));
        fd_status_gauge(st, "offload_min_threads",
                        "Offload pool size floor ([offload] threads).", NULL,
                        get(&s->min_threads));
        fd_status_gauge(st, "offload_max_threads",
                        "Offload pool size ceiling.", NULL,
                        get(&s->max_threads));
    }
    fd_status_counter(st, "offload_completed",
                      "Work items the offload pool completed.", NULL,
                      get(&s->completed));
    fd_status_counter(st, "offload_wait_usec_sum",
                      "Time work items waited for a thread, summed.", NULL,
                      get(&s->wait_usec_sum));
}

static void pool_retire(void *retired_area, const void *area)
{
    fd_offload_stats_t *d = retired_area;
    const fd_offload_stats_t *s = area;

    d->completed += s->completed;
    d->wait_usec_sum += s->wait_usec_sum;
}

fd_module_t fd_pool_module = {
    .name = "pool",
    .init_worker = pool_init_worker,
    .shm_size = sizeof(fd_offload_stats_t),
    .status = pool_status,
    .retire = pool_retire,
};
