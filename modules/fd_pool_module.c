/*
 * The offload pool's figures in the status slot. The pool is core
 * (core/fd_offload.c); this module only reserves its part of each worker's
 * shared-memory slot, points the pool at it, and reports it as the group
 * "offload" (no labels):
 *   threads, busy, pending, min_threads, max_threads   gauges
 *   completed, wait_usec_sum                           counters
 * No handler, no keys. Written on the public API (core/api/fastd.h) alone.
 */
#include "fastd.h"

static int pool_init_worker(void)
{
    fd_api_pool_publish_to(fd_api_status_area(FD_API_SELF));
    return FD_OK;
}

static uint64_t get(const uint64_t *v)
{
    return __atomic_load_n(v, __ATOMIC_RELAXED);
}

static void pool_status(fd_api_status_t *st, const void *area,
                        unsigned worker)
{
    const fd_api_pool_stats_t *s = area;

    if (s == NULL)
        return;
    if (worker != FD_API_STATUS_RETIRED) {
        fd_api_status_gauge(st, "offload_threads", "Offload pool threads.",
                            NULL, get(&s->threads));
        fd_api_status_gauge(st, "offload_busy",
                            "Offload threads running work.", NULL,
                            get(&s->busy));
        fd_api_status_gauge(st, "offload_pending",
                            "Work items waiting for an offload thread.",
                            NULL, get(&s->pending));
        fd_api_status_gauge(st, "offload_min_threads",
                            "Offload pool size floor ([offload] threads).",
                            NULL, get(&s->min_threads));
        fd_api_status_gauge(st, "offload_max_threads",
                            "Offload pool size ceiling.", NULL,
                            get(&s->max_threads));
    }
    fd_api_status_counter(st, "offload_completed",
                          "Work items the offload pool completed.", NULL,
                          get(&s->completed));
    fd_api_status_counter(st, "offload_wait_usec_sum",
                          "Time work items waited for a thread, summed.",
                          NULL, get(&s->wait_usec_sum));
}

static void pool_retire(void *retired_area, const void *area)
{
    fd_api_pool_stats_t *d = retired_area;
    const fd_api_pool_stats_t *s = area;

    d->completed += s->completed;
    d->wait_usec_sum += s->wait_usec_sum;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "pool",
    .init_worker = pool_init_worker,
    .shm_size = sizeof(fd_api_pool_stats_t),
    .status = pool_status,
    .retire = pool_retire,
};
