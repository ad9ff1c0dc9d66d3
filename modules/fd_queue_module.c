/*
 * Request-queue limiting: [queue NAME] sections, and `queue = NAME` on any
 * location (or [server]/[http] for all of them; `queue = off` for none).
 *
 * A request behind a queue takes one of `max_concurrent` slots before its
 * handler runs, whatever the handler (static, proxy, offloaded ones), in
 * the engine's access phase. With no free slot it waits in a queue of
 * `queue_limit`; a full queue, or `queue_timeout` spent waiting, answers
 * `reject_status` (with Retry-After when `retry_after` is set), and a
 * rejected request never holds a slot. The slot is given back when the
 * request ends, on every path: its response was produced (the log hook,
 * also for errors and upstream failures), or the connection went away
 * (a cleanup of the request's, fd_req_cleanup, which runs when the
 * connection is released, covers aborts while the handler works, also in
 * the offload pool). A client that leaves while waiting is taken out of
 * the queue at once (fd_req_on_abort, chained to whatever was there).
 *
 * order = fifo: the oldest waiter gets the next free slot; a newcomer to a
 * full queue is rejected. order = lifo: the newest waiter gets it, and a
 * newcomer to a full queue is queued while the oldest waiter is rejected
 * (fresh requests are likelier to still have a client waiting; under
 * sustained overload the oldest may never run).
 *
 * Admission is an atomic counter of the requests admitted or waiting:
 * increment; above max_concurrent + queue_limit, decrement and reject; at or
 * below max_concurrent a slot is free and the request goes on at once, with
 * no lock and no list. A freed slot is handed straight to a waiter, which
 * runs from the loop at the end of the turn.
 *
 * Limits count per worker: with workers = N a queue admits up to N times
 * max_concurrent requests in all. The figures go to the worker's status
 * slot, group "queue", label queue="NAME".
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fastd.h"

#define QUEUE_MAX 16       /* [queue] sections per configuration */
#define QUEUE_NAME_MAX 32  /* name bytes, with the NUL */

enum { Q_WAITING = 1, Q_READY, Q_ACTIVE, Q_DONE };

/* One queue's figures in the worker's status slot. */
typedef struct {
    char name[QUEUE_NAME_MAX];
    uint64_t active;           /* gauges */
    uint64_t waiting;
    uint64_t max_concurrent;
    uint64_t queue_limit;
    uint64_t admitted;         /* counters */
    uint64_t rejected_full;
    uint64_t rejected_timeout;
    uint64_t wait_usec_sum;
} queue_shm_t;

typedef struct queue_ctx_s queue_ctx_t;

/* [queue NAME]: the conf, then this worker's state (the configuration is
 * private to each worker after fork). */
typedef struct {
    int64_t max_concurrent;
    int64_t queue_limit;
    const char *order;
    uint64_t queue_timeout;
    int64_t reject_status;
    uint64_t retry_after;

    int lifo;
    const char *name;
    unsigned index;            /* entry in the status area */
    fd_str_t retry_after_text;
    char retry_after_buf[24];

    uint64_t total;            /* admitted + waiting: the admission count */
    uint64_t active;           /* slots held (running or about to) */
    uint64_t waiting;
    queue_ctx_t *head, *tail;  /* waiting, oldest first */
    queue_ctx_t *ready;        /* given a slot, handler not run yet */
    queue_ctx_t **ready_last;
    fd_api_posted_t *dispatch;
    queue_shm_t *shm;
} queue_t;

/* Per request behind a queue. */
struct queue_ctx_s {
    fd_request_t *r;
    queue_t *q;
    int state;
    queue_ctx_t *prev, *next;
    fd_api_timer_t *timer;
    uint64_t queued_usec;
    fd_api_req_pt prev_abort;
};

/* The location key. */
typedef struct {
    const char *name;
    queue_t *queue;
} queue_loc_t;

#define QS(q, f, v) __atomic_store_n(&(q)->shm->f, (uint64_t)(v), \
                                     __ATOMIC_RELAXED)
#define QINC(q, f, v) QS(q, f, (q)->shm->f + (v))

static uint64_t now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void publish(queue_t *q)
{
    QS(q, active, q->active);
    QS(q, waiting, q->waiting);
}

/* --- configuration --- */

#define QOFF(f) offsetof(queue_t, f)

static const fd_api_key_t queue_section_keys[] = {
    {.name = "max_concurrent", .type = FD_API_INT,
     .offset = QOFF(max_concurrent), .def = "100",
     .doc = "requests running at once behind this queue, per worker"},
    {.name = "queue_limit", .type = FD_API_INT, .offset = QOFF(queue_limit),
     .def = "100",
     .doc = "requests waiting for a slot, per worker; beyond: rejected"},
    {.name = "order", .type = FD_API_STRING, .offset = QOFF(order),
     .def = "fifo",
     .doc = "fifo: oldest waiter first, a newcomer to a full queue is "
            "rejected; lifo: newest first, the oldest waiter is rejected"},
    {.name = "queue_timeout", .type = FD_API_MSEC,
     .offset = QOFF(queue_timeout), .def = "0",
     .doc = "longest wait for a slot, then reject_status; 0: no limit"},
    {.name = "reject_status", .type = FD_API_INT,
     .offset = QOFF(reject_status), .def = "503",
     .doc = "status of a rejected request (400-599)"},
    {.name = "retry_after", .type = FD_API_MSEC, .offset = QOFF(retry_after),
     .def = "0",
     .doc = "Retry-After (seconds, rounded up) on rejections; 0: none"},
    {.name = NULL}};

static const fd_api_key_t queue_keys[] = {
    {.name = "queue", .type = FD_API_STRING,
     .offset = offsetof(queue_loc_t, name),
     .doc = "take a slot of [queue NAME] before the handler runs; off: none"},
    {.name = NULL}};

static int queue_init_section(const char *name, void *conf, unsigned index)
{
    queue_t *q = conf;
    int n;

    if (q->max_concurrent < 1) {
        fd_api_conf_error("[queue %s]: max_concurrent must be at least 1",
                          name);
        return FD_ERROR;
    }
    if (q->reject_status < 400 || q->reject_status > 599) {
        fd_api_conf_error("[queue %s]: reject_status must be 400 .. 599",
                          name);
        return FD_ERROR;
    }
    if (strcmp(q->order, "fifo") != 0 && strcmp(q->order, "lifo") != 0) {
        fd_api_conf_at_key(q, "order");
        fd_api_conf_error("\"order\" must be one of fifo | lifo, not "
                          "\"%s\" ([queue %s])", q->order, name);
        return FD_ERROR;
    }
    q->lifo = strcmp(q->order, "lifo") == 0;
    q->name = name;
    q->index = index;
    if (q->retry_after) {
        n = snprintf(q->retry_after_buf, sizeof(q->retry_after_buf), "%llu",
                     (unsigned long long)((q->retry_after + 999) / 1000));
        q->retry_after_text = (fd_str_t){(size_t)n, q->retry_after_buf};
    }
    return FD_OK;
}

static const fd_api_section_t queue_section = {
    .type = "queue",
    .keys = queue_section_keys,
    .conf_size = sizeof(queue_t),
    .name_max = QUEUE_NAME_MAX,
    .max = QUEUE_MAX,
    .init = queue_init_section,
};

static int queue_init_conf(void *conf)
{
    queue_loc_t *lc = conf;

    if (lc->name == NULL || strcmp(lc->name, "off") == 0)
        return FD_OK;
    lc->queue = fd_api_section("queue", lc->name);
    if (lc->queue == NULL) {
        fd_api_conf_at_key(lc, "queue");
        fd_api_conf_error("unknown queue \"%s\" (no [queue %s] section)",
                          lc->name, lc->name);
        return FD_ERROR;
    }
    return FD_OK;
}

static void queue_dispatch(void *data);

static int worker_failed;

static void queue_start(const char *name, void *conf, void *data)
{
    queue_shm_t *area = data;
    queue_t *q = conf;

    (void)name;
    q->shm = &area[q->index];
    memset(q->shm, 0, sizeof(*q->shm));
    snprintf(q->shm->name, sizeof(q->shm->name), "%s", q->name);
    QS(q, max_concurrent, q->max_concurrent);
    QS(q, queue_limit, q->queue_limit);
    q->ready_last = &q->ready;
    if ((q->dispatch = fd_api_posted_new(queue_dispatch, q)) == NULL)
        worker_failed = 1;
}

static int queue_init_worker(void)
{
    queue_shm_t *area = fd_api_status_area(FD_API_SELF);

    if (area == NULL)
        return FD_OK; /* fastd -t */
    worker_failed = 0;
    fd_api_section_each("queue", queue_start, area);
    if (worker_failed) {
        fd_api_log(FD_API_LOG_ERR, 0, "queue: out of memory");
        return FD_ERROR;
    }
    return FD_OK;
}

static void queue_stop(const char *name, void *conf, void *data)
{
    queue_t *q = conf;

    (void)name;
    (void)data;
    fd_api_posted_free(q->dispatch);
    q->dispatch = NULL;
}

static void queue_exit_worker(void)
{
    fd_api_section_each("queue", queue_stop, NULL);
}

/* --- the waiting list --- */

static void wait_unlink(queue_t *q, queue_ctx_t *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        q->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    else
        q->tail = x->prev;
    x->prev = x->next = NULL;
    q->waiting--;
    fd_api_timer_cancel(x->timer);
    x->timer = NULL;
}

static void ready_unlink(queue_t *q, queue_ctx_t *x)
{
    queue_ctx_t **pp;

    for (pp = &q->ready; *pp; pp = &(*pp)->next)
        if (*pp == x) {
            *pp = x->next;
            if (*pp == NULL)
                q->ready_last = pp;
            break;
        }
    x->next = NULL;
}

/* The rejection response: reject_status, Retry-After. */
static int reject_response(fd_request_t *r, queue_t *q)
{
    static const fd_str_t retry_after = {11, "Retry-After"};

    fd_resp_refused(r);
    if (fd_resp_error(r, (int)q->reject_status) != FD_OK)
        return 500;
    if (q->retry_after_text.len &&
        fd_resp_header_static(r, retry_after, q->retry_after_text) != FD_OK)
        return 500;
    return FD_DONE;
}

/* A waiter leaves the queue with reject_status (full under LIFO, or its
 * queue_timeout). */
static void reject_waiter(queue_ctx_t *x, int timeout)
{
    queue_t *q = x->q;
    fd_request_t *r = x->r;

    wait_unlink(q, x);
    __atomic_sub_fetch(&q->total, 1, __ATOMIC_RELAXED);
    x->state = Q_DONE;
    if (timeout)
        QINC(q, rejected_timeout, 1);
    else
        QINC(q, rejected_full, 1);
    publish(q);
    fd_req_on_abort(r, x->prev_abort);
    fd_api_finish(r, reject_response(r, q));
}

static void queue_timeout(void *data)
{
    queue_ctx_t *x = data;

    x->timer = NULL; /* fired: freed by fastd */
    reject_waiter(x, 1);
}

/* A slot is free: hand it to a waiter, or give it back. */
static void slot_release(queue_t *q)
{
    queue_ctx_t *x;

    __atomic_sub_fetch(&q->total, 1, __ATOMIC_RELAXED);
    if (q->waiting == 0) {
        q->active--;
        publish(q);
        return;
    }
    x = q->lifo ? q->tail : q->head;
    wait_unlink(q, x);
    x->state = Q_READY;
    *q->ready_last = x;
    q->ready_last = &x->next;
    QINC(q, admitted, 1);
    QINC(q, wait_usec_sum, now_usec() - x->queued_usec);
    publish(q);
    fd_api_post(q->dispatch);
}

/* Let the waiters that got a slot go on (end of a loop turn, so a handler
 * never runs inside another request's end). */
static void queue_dispatch(void *data)
{
    queue_t *q = data;
    queue_ctx_t *x;
    fd_request_t *r;

    while ((x = q->ready) != NULL) {
        q->ready = x->next;
        if (q->ready == NULL)
            q->ready_last = &q->ready;
        x->next = NULL;
        x->state = Q_ACTIVE;
        r = x->r;
        /* no on_abort of ours while the handler works: fastd keeps a
         * request it cannot cancel (offloaded) until it ends */
        fd_req_on_abort(r, x->prev_abort);
        fd_api_continue(r, FD_API_SELF);
    }
}

/* The request ends, one way or another: leave the queue or free the slot.
 * Idempotent. */
static void queue_end(queue_ctx_t *x)
{
    queue_t *q = x->q;

    switch (x->state) {
    case Q_WAITING:
        wait_unlink(q, x);
        __atomic_sub_fetch(&q->total, 1, __ATOMIC_RELAXED);
        publish(q);
        break;
    case Q_READY:
        ready_unlink(q, x);
        slot_release(q);
        break;
    case Q_ACTIVE:
        slot_release(q);
        break;
    default:
        return;
    }
    x->state = Q_DONE;
}

static void queue_cleanup(void *data)
{
    queue_end(data);
}

static void queue_abort(fd_request_t *r)
{
    queue_ctx_t *x = fd_req_get_ctx_of(r, FD_API_SELF);
    fd_api_req_pt prev = x->prev_abort;

    queue_end(x);
    if (prev)
        prev(r);
}

static void queue_log(fd_request_t *r)
{
    queue_ctx_t *x = fd_req_get_ctx_of(r, FD_API_SELF);

    if (x)
        queue_end(x);
}

/* --- the access phase --- */

static int queue_access(fd_request_t *r)
{
    const queue_loc_t *lc = fd_req_conf_of(r, FD_API_SELF);
    queue_t *q = lc->queue;
    queue_ctx_t *x;
    uint64_t n;

    /* no queue, or this request already passed (a second access phase
     * after a rewrite) */
    if (q == NULL || fd_req_get_ctx_of(r, FD_API_SELF) != NULL)
        return FD_OK;
    n = __atomic_add_fetch(&q->total, 1, __ATOMIC_RELAXED);
    if (n > (uint64_t)(q->max_concurrent + q->queue_limit)) {
        if (!q->lifo || q->waiting == 0) {
            __atomic_sub_fetch(&q->total, 1, __ATOMIC_RELAXED);
            QINC(q, rejected_full, 1);
            return reject_response(r, q);
        }
        /* LIFO: the oldest waiter gives its place to the newcomer */
        reject_waiter(q->head, 0);
    }

    x = fd_req_alloc(r, sizeof(*x));
    if (x)
        *x = (queue_ctx_t){.r = r, .q = q}; /* state 0: queue_end skips it */
    if (x == NULL || fd_req_set_ctx_of(r, FD_API_SELF, x) != FD_OK ||
        fd_req_cleanup(r, queue_cleanup, x) != FD_OK) {
        __atomic_sub_fetch(&q->total, 1, __ATOMIC_RELAXED);
        return 500;
    }

    if (n <= (uint64_t)q->max_concurrent) {
        /* a free slot (nobody can be waiting): straight in */
        x->state = Q_ACTIVE;
        q->active++;
        QINC(q, admitted, 1);
        publish(q);
        return FD_OK;
    }

    x->state = Q_WAITING;
    x->queued_usec = now_usec();
    x->prev = q->tail;
    if (q->tail)
        q->tail->next = x;
    else
        q->head = x;
    q->tail = x;
    q->waiting++;
    publish(q);
    if (q->queue_timeout)
        x->timer = fd_api_timer(q->queue_timeout, queue_timeout, x);
    x->prev_abort = fd_req_on_abort(r, queue_abort);
    return FD_AGAIN;
}

/* --- status --- */

static void queue_status(fd_api_status_t *st, const void *area,
                         unsigned worker)
{
    const queue_shm_t *e = area;
    char labels[QUEUE_NAME_MAX + 16];
    unsigned i;

    if (e == NULL)
        return;
    for (i = 0; i < QUEUE_MAX; i++, e++) {
        uint64_t full, timeout;

        if (e->name[0] == '\0')
            continue;
        snprintf(labels, sizeof(labels), "queue=\"%.*s\"",
                 QUEUE_NAME_MAX - 1, e->name);
        if (worker != FD_API_STATUS_RETIRED) {
            fd_api_status_gauge(st, "queue_active",
                                "Requests holding a slot.", labels,
                                e->active);
            fd_api_status_gauge(st, "queue_waiting",
                                "Requests waiting for a slot.", labels,
                                e->waiting);
            fd_api_status_gauge(st, "queue_max_concurrent",
                                "Slots (per worker).", labels,
                                e->max_concurrent);
            fd_api_status_gauge(st, "queue_queue_limit",
                                "Waiting places (per worker).", labels,
                                e->queue_limit);
        }
        full = __atomic_load_n(&e->rejected_full, __ATOMIC_RELAXED);
        timeout = __atomic_load_n(&e->rejected_timeout, __ATOMIC_RELAXED);
        fd_api_status_counter(st, "queue_admitted",
                              "Requests that got a slot.", labels,
                              e->admitted);
        fd_api_status_counter(st, "queue_rejected",
                              "Requests rejected (full or timed out).",
                              labels, full + timeout);
        fd_api_status_counter(st, "queue_rejected_full",
                              "Requests rejected because the queue was "
                              "full.", labels, full);
        fd_api_status_counter(st, "queue_rejected_timeout",
                              "Requests rejected after queue_timeout.",
                              labels, timeout);
        fd_api_status_counter(st, "queue_wait_usec_sum",
                              "Time admitted requests waited, summed.",
                              labels, e->wait_usec_sum);
    }
}

static void queue_retire(void *retired_area, const void *area)
{
    const queue_shm_t *s = area;
    queue_shm_t *into;
    unsigned i;

    for (i = 0; i < QUEUE_MAX; i++, s++) {
        if (s->name[0] == '\0' ||
            (into = fd_api_status_named_entry(retired_area, sizeof(*s),
                                              QUEUE_MAX, s->name,
                                              sizeof(s->name))) == NULL)
            continue;
        into->admitted += s->admitted;
        into->rejected_full += s->rejected_full;
        into->rejected_timeout += s->rejected_timeout;
        into->wait_usec_sum += s->wait_usec_sum;
    }
}

/* the queue name is resolved at init_conf: its presence is enough */
static int queue_active(const void *conf)
{
    return ((const queue_loc_t *)conf)->name != NULL;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "queue",
    .keys = queue_keys,
    .conf_size = sizeof(queue_loc_t),
    .init_conf = queue_init_conf,
    .init_worker = queue_init_worker,
    .exit_worker = queue_exit_worker,
    .access = queue_access,
    .active = queue_active,
    .log = queue_log,
    .shm_size = QUEUE_MAX * sizeof(queue_shm_t),
    .status = queue_status,
    .retire = queue_retire,
    .section = &queue_section,
};
