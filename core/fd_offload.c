/*
 * The worker's offload pool: threads that run blocking work for the loop.
 *
 * Hand-off. The loop appends an item to the pending list under the pool
 * mutex and, if a thread is idle, wakes exactly one: idle threads form a
 * LIFO stack, each asleep on its own condition variable, so the most
 * recently idle (warm) thread gets the work and the ones at the bottom stay
 * asleep long enough to time out. The mutex is held only to push or pop,
 * never while work runs. A thread that finishes takes the next pending item
 * before going idle, so a burst costs no wake-ups. Idle threads sleep in
 * pthread_cond_(timed)wait: an idle pool burns no CPU (no spinning).
 *
 * Completion. A thread pushes its finished item on a lock-free stack and
 * writes the eventfd only when the stack was empty; the loop takes the whole
 * stack at once, restores submission order and runs done() on the loop.
 *
 * Figures. Each thread slot counts its completed items and their queue
 * wait in its own cache lines; readers sum the slots (a slot keeps its
 * counts when its thread exits, so the sum never goes back). threads, busy
 * and pending are gauges kept under the mutex. All are published to the
 * area given by fd_offload_publish_to() (the "pool" module's part of the
 * worker's status slot).
 *
 * Sizing ([offload]).
 *   adaptive = off: exactly `threads` threads (at least 1), for stable
 *     benchmarks; max_threads and idle_timeout are not used.
 *   adaptive = on: between `threads` and `max_threads`, decided on the
 *     loop every TICK_MSEC while the pool has work, and only while items
 *     wait in the queue:
 *     - blocked threads: when the process used less CPU over the tick than
 *       half of min(busy threads, CPUs it may run on), and most busy
 *       threads are asleep in the kernel (state S or D in
 *       /proc/self/task/TID/stat, not R: waiting for a CPU is not
 *       blocking), the work waits on sleeps, disks or a database: a thread
 *       is added at once, every tick. This is what the pool is for.
 *     - otherwise hill-climbing on the completion rate: the rate at the
 *       current size (over at least WINDOW_MSEC) is the base and one thread
 *       is added (a trial). After at least WINDOW_MSEC and as many
 *       completions as threads (or TRIAL_MSEC) the trial's rate is
 *       compared: up by 5% or more, the thread stays, its rate is the next
 *       base and the next thread is tried at once; otherwise it is retired
 *       again and no trial starts for HOLD_MSEC (CPU-bound work stops
 *       growing there, re-probing every ~2 s under load).
 *     Threads above `threads` exit after idle_timeout without work (idle
 *     threads are woken newest first, so the surplus ones really idle).
 *     The timer runs only while there is work: an idle worker sleeps.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"

#define TICK_MSEC 50
#define WINDOW_MSEC 200
#define TRIAL_MSEC 1000
#define HOLD_MSEC 2000
#define STACK_SIZE (512 * 1024)
#define ITEMS_KEEP 1024

typedef struct item_s {
    struct item_s *next;
    fd_request_t *r;
    fd_offload_pt work;        /* a request's (fd_offload) */
    fd_offload_pt done;
    void *data;                /* or any job's (fd_offload_call) */
    void (*work_data)(void *data);
    void (*done_data)(void *data);
    uint64_t queued_usec;
} item_t;

/* One thread's place; counters first, on their own cache line. */
typedef struct slot_s {
    uint64_t completed;          /* written by its thread only */
    uint64_t wait_usec;
    char pad[FD_CACHELINE - 2 * sizeof(uint64_t)];
    pthread_cond_t cond;         /* the rest is under the pool mutex */
    struct slot_s *idle_next, *idle_prev;
    pid_t tid;
    int busy;
    int used;
    int woken;
    int idle;
} __attribute__((aligned(FD_CACHELINE))) slot_t;

typedef struct {
    fd_event_t ev;               /* the eventfd; first: pool_event's cast */
    pthread_mutex_t lock;
    item_t *head, **tail;        /* pending */
    slot_t *idle_top;            /* LIFO of idle threads */
    slot_t *slots;               /* [nslots] */
    unsigned nslots;
    unsigned threads, busy, pending, retire;
    unsigned min, max;
    fd_msec_t idle_timeout;
    int adaptive;
    int stop;
    fd_offload_stats_t *area;    /* published figures */

    /* lock-free stack, threads -> loop; its own cache line */
    item_t *finished __attribute__((aligned(FD_CACHELINE)));

    /* loop only */
    fd_posted_t kick;            /* wake threads once per loop turn */
    int kick_posted;
    unsigned unkicked;           /* items queued since the last kick */
    item_t *free_items;
    unsigned nfree;
    uint64_t done_count;
    fd_timer_t tick;
    int trial, have_base;
    unsigned ncpu;               /* CPUs the threads may run on */
    fd_msec_t tick_t0;           /* previous tick, and the CPU time then */
    uint64_t tick_cpu;
    fd_msec_t trial_t0, hold_until, win_t0;
    uint64_t trial_c0, win_c0;
    double base_rate;
} pool_t;

static pool_t pool = {.ev.fd = -1};
static fd_offload_stats_t private_area;
static __thread int on_pool_thread;

static uint64_t cpu_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static uint64_t now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

#define STORE(f, v) __atomic_store_n(&pool.area->f, (uint64_t)(v), \
                                     __ATOMIC_RELAXED)

/* Under the lock. */
static void publish_gauges(pool_t *p)
{
    STORE(threads, p->threads);
    STORE(busy, p->busy);
    STORE(pending, p->pending);
}

static void idle_push(pool_t *p, slot_t *s)
{
    s->idle_prev = NULL;
    s->idle_next = p->idle_top;
    if (p->idle_top)
        p->idle_top->idle_prev = s;
    p->idle_top = s;
    s->idle = 1;
}

static void idle_remove(pool_t *p, slot_t *s)
{
    if (!s->idle)
        return;
    if (s->idle_prev)
        s->idle_prev->idle_next = s->idle_next;
    else
        p->idle_top = s->idle_next;
    if (s->idle_next)
        s->idle_next->idle_prev = s->idle_prev;
    s->idle = 0;
}

/* Under the lock: wake the most recently idle thread, if any. */
static void wake_one(pool_t *p)
{
    slot_t *s = p->idle_top;

    if (s == NULL)
        return;
    idle_remove(p, s);
    s->woken = 1;
    pthread_cond_signal(&s->cond);
}

static void finished_push(pool_t *p, item_t *it)
{
    item_t *old = __atomic_load_n(&p->finished, __ATOMIC_RELAXED);
    uint64_t one = 1;

    do {
        it->next = old;
    } while (!__atomic_compare_exchange_n(&p->finished, &old, it, 1,
                                          __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
    /* the loop takes the whole stack: only the first item needs a wake */
    if (old == NULL && write(p->ev.fd, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is saturated, the loop is awake anyway */
    }
}

static void *thread_main(void *arg)
{
    slot_t *s = arg;
    pool_t *p = &pool;
    struct timespec deadline;
    item_t *it;
    int rc, timed;

    on_pool_thread = 1;
    pthread_mutex_lock(&p->lock);
    s->tid = gettid();
    for (;;) {
        if (p->stop)
            break;
        if (p->retire > 0) {
            if (p->threads > p->min) {
                p->retire--;
                break;
            }
            p->retire = 0; /* idle_timeout got there first */
        }
        if (p->head) {
            it = p->head;
            p->head = it->next;
            if (p->head == NULL)
                p->tail = &p->head;
            p->pending--;
            p->busy++;
            s->busy = 1;
            publish_gauges(p);
            pthread_mutex_unlock(&p->lock);

            __atomic_store_n(&s->wait_usec,
                             s->wait_usec + (now_usec() - it->queued_usec),
                             __ATOMIC_RELAXED);
            if (it->work)
                it->work(it->r);
            else
                it->work_data(it->data);
            __atomic_store_n(&s->completed, s->completed + 1,
                             __ATOMIC_RELAXED);
            finished_push(p, it);

            pthread_mutex_lock(&p->lock);
            p->busy--;
            s->busy = 0;
            publish_gauges(p);
            continue;
        }

        /* idle: threads above the minimum may time out */
        timed = p->adaptive && p->idle_timeout > 0;
        if (timed) {
            clock_gettime(CLOCK_MONOTONIC, &deadline);
            deadline.tv_sec += (time_t)(p->idle_timeout / 1000);
            deadline.tv_nsec += (long)(p->idle_timeout % 1000) * 1000000;
            if (deadline.tv_nsec >= 1000000000) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000;
            }
        }
        s->woken = 0;
        idle_push(p, s);
        rc = 0;
        while (!s->woken && !p->stop && rc != ETIMEDOUT)
            rc = timed ? pthread_cond_timedwait(&s->cond, &p->lock,
                                                &deadline)
                       : pthread_cond_wait(&s->cond, &p->lock);
        idle_remove(p, s);
        if (!s->woken && !p->stop && p->threads > p->min && p->head == NULL)
            break; /* idle_timeout */
    }
    p->threads--;
    s->used = 0;
    publish_gauges(p);
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Under the lock. */
static int start_thread(pool_t *p)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    slot_t *s = NULL;
    unsigned i;
    int rc;

    for (i = 0; i < p->nslots; i++)
        if (!p->slots[i].used) {
            s = &p->slots[i];
            break;
        }
    if (s == NULL)
        return FD_ERROR;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, STACK_SIZE);
    /* signals are the loop's business */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&t, &attr, thread_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        fd_log_error(FD_LOG_ERR, rc, "offload: pthread_create() failed");
        return FD_ERROR;
    }
    s->used = 1;
    s->woken = 0;
    s->idle = 0;
    p->threads++;
    publish_gauges(p);
    return FD_OK;
}

static void publish_counters(void)
{
    fd_offload_stats_t st;

    fd_offload_stats(&st);
    STORE(completed, st.completed);
    STORE(wait_usec_sum, st.wait_usec_sum);
}

/* The eventfd: run the done() of finished items, in submission order. */
static void pool_event(fd_event_t *ev, uint32_t events)
{
    pool_t *p = (pool_t *)ev;
    item_t *list, *rev = NULL, *it;
    fd_request_t *r;
    fd_offload_pt done;
    void (*done_data)(void *);
    void *data;
    uint64_t n;

    (void)events;
    if (read(ev->fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        fd_log_error(FD_LOG_ALERT, errno, "offload: eventfd read() failed");
    list = __atomic_exchange_n(&p->finished, NULL, __ATOMIC_ACQUIRE);
    if (list == NULL)
        return;
    while (list) {
        it = list;
        list = it->next;
        it->next = rev;
        rev = it;
    }
    while (rev) {
        it = rev;
        rev = it->next;
        r = it->r;
        done = it->done;
        done_data = it->done_data;
        data = it->data;
        if (p->nfree < ITEMS_KEEP) {
            it->next = p->free_items;
            p->free_items = it;
            p->nfree++;
        } else {
            free(it);
        }
        p->done_count++;
        if (done)
            done(r);
        else
            done_data(data);
    }
    publish_counters();
}

/* Are most busy threads asleep in the kernel (not running or runnable)? */
static int threads_asleep(pool_t *p)
{
    pid_t tids[32];
    unsigned i, n = 0, asleep = 0;
    char path[64], buf[256], *st;
    ssize_t len;
    int fd;

    pthread_mutex_lock(&p->lock);
    for (i = 0; i < p->nslots && n < fd_nelems(tids); i++)
        if (p->slots[i].used && p->slots[i].busy && p->slots[i].tid > 0)
            tids[n++] = p->slots[i].tid;
    pthread_mutex_unlock(&p->lock);
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tids[i]);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        len = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        st = strrchr(buf, ')');
        if (st && (st[2] == 'S' || st[2] == 'D'))
            asleep++;
    }
    return n > 0 && asleep * 2 > n;
}

/* Adaptive sizing (see the top of the file); on the loop. */
static void pool_tick(fd_timer_t *t)
{
    pool_t *p = &pool;
    fd_msec_t now = fd_current_msec, elapsed;
    uint64_t n, cpu, wall;
    unsigned threads, pending, busy;
    int blocked;
    double rate;

    (void)t;
    pthread_mutex_lock(&p->lock);
    threads = p->threads;
    pending = p->pending;
    busy = p->busy;
    pthread_mutex_unlock(&p->lock);

    cpu = cpu_usec();
    wall = (now - p->tick_t0) * 1000;
    blocked = busy > 0 && wall > 0 &&
              (cpu - p->tick_cpu) * 2 < wall * fd_min(busy, p->ncpu);
    p->tick_t0 = now;
    p->tick_cpu = cpu;
    if (blocked && pending > 0 && !p->trial && threads < p->max &&
        threads_asleep(p)) {
        pthread_mutex_lock(&p->lock);
        start_thread(p);
        pthread_mutex_unlock(&p->lock);
        p->have_base = 0;
        p->hold_until = 0;
        p->win_t0 = now;
        p->win_c0 = p->done_count;
        fd_timer_add(&p->tick, TICK_MSEC);
        return;
    }

    if (p->trial) {
        elapsed = now - p->trial_t0;
        n = p->done_count - p->trial_c0;
        if ((elapsed >= WINDOW_MSEC && n >= threads) ||
            elapsed >= TRIAL_MSEC) {
            rate = (double)n * 1000.0 / (double)elapsed;
            p->trial = 0;
            if (rate >= p->base_rate * 1.05 && (n > 0 || p->base_rate == 0)) {
                /* climbed: keep the thread; its rate is the next base */
                p->base_rate = rate;
                p->have_base = 1;
            } else {
                pthread_mutex_lock(&p->lock);
                if (p->threads > p->min) {
                    p->retire++;
                    wake_one(p);
                }
                pthread_mutex_unlock(&p->lock);
                p->hold_until = now + HOLD_MSEC;
                p->have_base = 0;
                fd_log_error(FD_LOG_DEBUG, 0, "offload: %u threads did not "
                             "raise the rate (%.0f/s, before %.0f/s)",
                             threads, rate, p->base_rate);
            }
            p->win_t0 = now;
            p->win_c0 = p->done_count;
        }
    }
    if (!p->trial && pending > 0 && threads < p->max && now >= p->hold_until)
    {
        elapsed = now - p->win_t0;
        if (!p->have_base && elapsed >= WINDOW_MSEC) {
            /* the rate at the current size, before the step */
            p->base_rate = (double)(p->done_count - p->win_c0) * 1000.0 /
                           (double)elapsed;
            p->have_base = 1;
        }
        if (p->have_base) {
            pthread_mutex_lock(&p->lock);
            if (start_thread(p) == FD_OK) {
                p->trial = 1;
                p->trial_t0 = now;
                p->trial_c0 = p->done_count;
                p->have_base = 0;
            }
            pthread_mutex_unlock(&p->lock);
        }
    }
    /* no work: no timer (an idle worker is not woken); fd_offload() arms
     * it again and starts a new measuring window */
    if (pending || busy || p->trial)
        fd_timer_add(&p->tick, TICK_MSEC);
}

static int offload(item_t *job);

int fd_offload(fd_request_t *r, fd_offload_pt work, fd_offload_pt done)
{
    return offload(&(item_t){.r = r, .work = work, .done = done});
}

int fd_offload_call(void *data, void (*work)(void *data),
                    void (*done)(void *data))
{
    return offload(&(item_t){.data = data, .work_data = work,
                             .done_data = done});
}

static int offload(item_t *job)
{
    pool_t *p = &pool;
    item_t *it;

    if (p->ev.fd < 0 || on_pool_thread)
        return FD_ERROR;
    it = p->free_items;
    if (it) {
        p->free_items = it->next;
        p->nfree--;
    } else if ((it = malloc(sizeof(*it))) == NULL) {
        return FD_ERROR;
    }
    *it = *job;
    it->next = NULL;
    it->queued_usec = now_usec();

    pthread_mutex_lock(&p->lock);
    if (p->threads == 0 && start_thread(p) != FD_OK) {
        pthread_mutex_unlock(&p->lock);
        it->next = p->free_items;
        p->free_items = it;
        p->nfree++;
        return FD_ERROR;
    }
    *p->tail = it;
    p->tail = &it->next;
    p->pending++;
    publish_gauges(p);
    pthread_mutex_unlock(&p->lock);

    /* wake threads at the end of this loop turn, once for the whole batch
     * (a thread woken per item would ping-pong with the loop) */
    p->unkicked++;
    if (!p->kick_posted) {
        p->kick_posted = 1;
        fd_event_post(&p->kick);
    }

    if (p->adaptive && !fd_timer_armed(&p->tick)) {
        /* a busy period starts: measure it from here */
        p->win_t0 = p->tick_t0 = fd_current_msec;
        p->win_c0 = p->done_count;
        p->tick_cpu = cpu_usec();
        p->have_base = 0;
        fd_timer_add(&p->tick, TICK_MSEC);
    }
    return FD_OK;
}

/* End of a loop turn: one idle thread per item queued in it (busy threads
 * take more before they go idle). */
static void pool_kick(void *data)
{
    pool_t *p = data;
    unsigned n = p->unkicked;

    p->kick_posted = 0;
    p->unkicked = 0;
    pthread_mutex_lock(&p->lock);
    n = fd_min(n, p->pending);
    while (n-- > 0 && p->idle_top)
        wake_one(p);
    pthread_mutex_unlock(&p->lock);
}

int fd_offload_on_pool_thread(void)
{
    return on_pool_thread;
}

void fd_offload_publish_to(fd_offload_stats_t *area)
{
    pool.area = area;
}

int fd_offload_init_worker(fd_worker_t *w)
{
    fd_offload_conf_t *oc = &w->cycle->offload;
    pthread_condattr_t ca;
    pool_t *p = &pool;
    unsigned i;

    p->adaptive = oc->adaptive;
    p->idle_timeout = oc->idle_timeout;
    p->min = (unsigned)fd_max(oc->threads, 0);
    p->max = (unsigned)fd_max(oc->max_threads, oc->threads);
    if (!p->adaptive || p->max < 1) {
        p->min = fd_max(p->min, 1u);
        p->max = p->adaptive ? fd_max(p->max, p->min) : p->min;
    }
    p->nslots = p->max;
    if (p->area == NULL)
        p->area = &private_area;
    STORE(min_threads, p->min);
    STORE(max_threads, p->max);

    p->slots = aligned_alloc(FD_CACHELINE, p->nslots * sizeof(slot_t));
    if (p->slots == NULL) {
        fd_log_error(FD_LOG_EMERG, errno, "offload: out of memory");
        return FD_ERROR;
    }
    memset(p->slots, 0, p->nslots * sizeof(slot_t));
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (i = 0; i < p->nslots; i++)
        pthread_cond_init(&p->slots[i].cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&p->lock, NULL);
    p->tail = &p->head;
    p->tick.handler = pool_tick;
    p->kick.handler = pool_kick;
    p->kick.data = p;
    {
        cpu_set_t set;
        p->ncpu = sched_getaffinity(0, sizeof(set), &set) == 0
                      ? (unsigned)CPU_COUNT(&set)
                      : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
        p->ncpu = fd_max(p->ncpu, 1u);
    }

    p->ev.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->ev.handler = pool_event;
    if (p->ev.fd < 0 || fd_event_add(&p->ev, EPOLLIN) < 0) {
        fd_log_error(FD_LOG_EMERG, errno, "offload: eventfd setup failed");
        return FD_ERROR;
    }
    w->offload = p;

    pthread_mutex_lock(&p->lock);
    for (i = 0; i < p->min; i++)
        if (start_thread(p) != FD_OK)
            break;
    pthread_mutex_unlock(&p->lock);
    return FD_OK;
}

void fd_offload_exit_worker(fd_worker_t *w)
{
    pool_t *p = &pool;
    unsigned i;

    (void)w;
    if (p->slots == NULL)
        return;
    if (fd_timer_armed(&p->tick))
        fd_timer_del(&p->tick);
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    for (i = 0; i < p->nslots; i++)
        pthread_cond_signal(&p->slots[i].cond);
    pthread_mutex_unlock(&p->lock);
}

void fd_offload_stats(fd_offload_stats_t *st)
{
    pool_t *p = &pool;
    unsigned i;

    memset(st, 0, sizeof(*st));
    for (i = 0; i < p->nslots; i++) {
        st->completed += __atomic_load_n(&p->slots[i].completed,
                                         __ATOMIC_RELAXED);
        st->wait_usec_sum += __atomic_load_n(&p->slots[i].wait_usec,
                                             __ATOMIC_RELAXED);
    }
    if (p->area) {
        st->threads = __atomic_load_n(&p->area->threads, __ATOMIC_RELAXED);
        st->busy = __atomic_load_n(&p->area->busy, __ATOMIC_RELAXED);
        st->pending = __atomic_load_n(&p->area->pending, __ATOMIC_RELAXED);
    }
    st->min_threads = p->min;
    st->max_threads = p->max;
}
