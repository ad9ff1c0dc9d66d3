#ifndef FD_STATUS_H
#define FD_STATUS_H

/*
 * Status and metrics: the parts of the shared-memory stats that are not in
 * fd_cycle.h (worker slot life cycle, retiring a dead worker's counters)
 * and the metric writer through which modules describe their shm area.
 *
 * A module that reserves ->shm_size bytes of each worker slot reports them
 * with two hooks in its fd_module_t:
 *
 *   void (*status)(fd_status_t *st, const void *area, unsigned worker);
 *       Called by the status handler once per worker slot in use (worker =
 *       the slot number) and once with worker = FD_STATUS_RETIRED for the
 *       folded area of exited workers. It calls fd_status_counter() and
 *       fd_status_gauge() for each figure; the writer sums them across
 *       workers and keeps the per-worker detail. Gauges reported for
 *       FD_STATUS_RETIRED are ignored. area is NULL when shm_size is 0.
 *
 *   void (*retire)(void *retired_area, const void *area);
 *       Called by the master when a worker has exited: add the monotonic
 *       counters of area into retired_area, so totals never go backwards.
 *       Gauges are not retired. The slot is zeroed afterwards.
 *
 * A figure of state every worker shares (a table in shared memory: the
 * health checks, the resolver, a cache's index) is no one worker's: the
 * module reports it from a third hook,
 *
 *   void (*status_shared)(fd_status_t *st);
 *       Called once per answer, after the slots (st->worker is
 *       FD_STATUS_SHARED). Its figures go in the totals only: no worker
 *       has a series of them, so no answer names only the worker that
 *       gave it.
 *
 * Metric names: lowercase [a-z0-9_], without the "fastd_" prefix and
 * without "_total" (the writer adds both for Prometheus). The part before
 * the first '_' is the group, the rest the field, e.g. "upstream_requests"
 * with labels "upstream=\"app\",server=\"10.0.0.1:80\"" becomes
 *   Prometheus: fastd_upstream_requests_total{upstream="app",server="..."}
 *   JSON:       "modules": {"upstream": [{"upstream": "app",
 *                                          "server": "...", "requests": N}]}
 * A time is an integer in the unit its name ends with, "_msec" or "_usec"
 * (or "_msec_sum", "_usec_sum": a counter of times added up); JSON shows
 * it so, Prometheus in seconds, its base unit: "queue_wait_usec_sum" is
 * fastd_queue_wait_seconds_total, a decimal.
 * labels is NULL or `k="v"` pairs joined by ',', values escaped as
 * Prometheus wants (\\, \", \n). Well-known groups the dashboard shows:
 *   upstream: labels upstream, server; fields requests, fails, active,
 *             healthy (gauge 1/0), ...
 *   queue:    label queue; fields active, waiting, max_concurrent,
 *             queue_limit, admitted, rejected, timeouts, ...
 *   offload:  no labels; fields threads, busy, pending, completed, ...
 */

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_module.h"


#define FD_STATUS_RETIRED ((unsigned)-1)
#define FD_STATUS_SHARED ((unsigned)-2)

/* For retire hooks over named entries (queues, limit_req zones): in n
 * entries of size bytes, each beginning with a NUL-ended name of
 * name_size bytes, the one named name, else the first free one (named
 * now), else NULL (more names over time than entries). */
void *fd_status_named_entry(void *entries, size_t size, unsigned n,
                            const char *name, size_t name_size);

/*
 * The metric writer lives in core (core/http/fd_status.c), not in the status
 * module: every module's status hook calls it, and each module must build
 * and link whether or not the status handler is compiled in. A reader
 * takes the figures with fd_status_figures_take() and _gather() (below),
 * which set one up with fd_status_init() and run the hooks; the status
 * module renders them through the public API (fd_req_figures()).
 */
typedef struct fd_status_sample_s {
    unsigned worker;
    uint64_t v;
    struct fd_status_sample_s *next;
} fd_status_sample_t;

typedef struct fd_status_metric_s {
    const char *name;
    const char *help;
    const char *labels; /* "" when none */
    int gauge;
    int core;           /* a core figure: not under JSON "modules" */
    uint64_t total;     /* every worker, exited ones included */
    fd_status_sample_t *samples; /* per live worker, in report order;
                                    none for a shared figure */
    fd_status_sample_t **samples_last;
    struct fd_status_metric_s *next;
} fd_status_metric_t;

struct fd_status_s {
    fd_pool_t *pool;
    fd_status_metric_t *metrics; /* in the order first reported */
    fd_status_metric_t **last;
    unsigned worker;             /* the slot being reported, RETIRED or
                                    SHARED */
    int core;                    /* set while the core reports its own */
    int failed;                  /* out of memory: the figures are partial */
};

void fd_status_init(fd_status_t *st, fd_pool_t *pool);
void fd_status_counter(fd_status_t *st, const char *name, const char *help,
                       const char *labels, uint64_t v);
void fd_status_gauge(fd_status_t *st, const char *name, const char *help,
                     const char *labels, uint64_t v);
/* The figure of metric m for one worker slot: 1 and *v, or 0 if none. */
int fd_status_worker_value(const fd_status_metric_t *m, unsigned worker,
                           uint64_t *v);

/*
 * The figures a reader renders (fastd.h's fd_api_figures_t, behind
 * fd_req_figures()): a copy of the segment, the metrics gathered from it
 * (fastd's own, then the modules'), and what the copy's slots add up to.
 * core/http/fd_status_figures.c.
 */
struct fd_api_figures_s {
    fd_status_t st;
    fd_shm_header_t *shm;      /* the copy */
    uint64_t now;              /* wall clock (ms) when it was taken */
    uint64_t generation;       /* the newest of the master's and slots' */
    unsigned workers;          /* live workers */
    fd_stats_t total;          /* counters of every slot + retired; gauges
                                  of the live workers */
};
typedef struct fd_api_figures_s fd_status_figures_t;

/* A copy of the segment in pool, nothing gathered yet (NULL: out of
 * memory); then fd_status_figures_gather() reports every figure of it. */
fd_status_figures_t *fd_status_figures_take(fd_pool_t *pool);
void fd_status_figures_gather(fd_status_figures_t *f);

/* Wall-clock milliseconds (fd_stats_t.started_msec, uptime). */
uint64_t fd_stats_wall_msec(void);

/*
 * Master, after fd_cycle_load() of each generation: copy the generation
 * and the profile name into the shm header.
 */
void fd_shm_set_cycle(const fd_cycle_t *cycle);

/*
 * Worker, right after fork: take slot i as fd_stats (zeroed, pid,
 * generation, started_msec, alive = 1).
 */
fd_stats_t *fd_stats_worker_init(unsigned i, uint64_t generation,
                                 unsigned index);

/*
 * Master, once the worker of slot i has been reaped: fold its monotonic
 * counters (and the modules' ones, through ->retire) into the retired
 * totals, then zero the slot for reuse.
 */
void fd_stats_retire(unsigned i);

/*
 * Readers (the status handler) work on a copy of the segment (its slots
 * [0, slots_used), the retired one, the tail), taken
 * consistently with fd_stats_retire() (a seqlock), so a counter never shows
 * twice or not at all while a worker is being retired.
 */
size_t fd_shm_size(void);
fd_shm_header_t *fd_shm_snapshot(void *dst); /* fd_shm_size() bytes */
fd_stats_t *fd_shm_slot(fd_shm_header_t *shm, unsigned i);
/* The modules' folded areas of exited workers, NULL when shm_size is 0. */
void *fd_shm_retired_area(fd_shm_header_t *shm, const fd_module_t *m);

#endif
