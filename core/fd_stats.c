/*
 * The shared-memory stats segment: one anonymous shared mapping made by the
 * master before it forks, laid out as
 *
 *   [fd_shm_header_t][slot 0] ... [slot FD_MAX_WORKER_SLOTS - 1]
 *   [retired slot][tail: retire seqlock]
 *
 * Each part starts on a cache line. A slot is an fd_stats_t followed by
 * every module's ->shm_size area (each 64-aligned); a worker writes only
 * its own slot, so the request path shares no line with another process.
 * The retired slot holds the modules' folded counters of exited workers
 * (the core ones fold into fd_shm->retired).
 */

#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_module.h"
#include "fd_status.h"

typedef struct {
    uint64_t seq; /* odd while fd_stats_retire() rewrites the segment */
} fd_shm_tail_t;

fd_shm_header_t *fd_shm;
fd_stats_t *fd_stats;

static size_t shm_total;
static size_t header_size;
static size_t tail_offset;
static size_t *module_off; /* [fd_nmodules], offset inside a slot */

static fd_shm_tail_t *shm_tail(fd_shm_header_t *shm)
{
    return (fd_shm_tail_t *)((char *)shm + tail_offset);
}

uint64_t fd_stats_wall_msec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int fd_shm_init(void)
{
    size_t slot_size, off;
    unsigned i, n;
    void *p;

    if (fd_shm != NULL) {
        return FD_OK;
    }

    for (n = 0; fd_modules[n] != NULL; n++) {
        /* nothing */
    }

    module_off = calloc(n ? n : 1, sizeof(size_t));
    if (module_off == NULL) {
        fd_log_error(FD_LOG_EMERG, errno, "calloc() failed");
        return FD_ERROR;
    }

    off = fd_align(sizeof(fd_stats_t), FD_CACHELINE);
    for (i = 0; i < n; i++) {
        const fd_module_t *m = fd_modules[i];

        if (m->index >= n) {
            fd_log_error(FD_LOG_EMERG, 0, "module \"%s\": bad index %u",
                         m->name, m->index);
            goto failed;
        }
        module_off[m->index] = off;
        off += fd_align(m->shm_size, FD_CACHELINE);
    }
    slot_size = fd_align(off, FD_CACHELINE);

    header_size = fd_align(sizeof(fd_shm_header_t), FD_CACHELINE);
    /* the slots, then the retired slot */
    tail_offset = header_size + slot_size * (FD_MAX_WORKER_SLOTS + 1);
    shm_total = tail_offset + fd_align(sizeof(fd_shm_tail_t), FD_CACHELINE);

    p = mmap(NULL, shm_total, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fd_log_error(FD_LOG_EMERG, errno, "mmap(%zu) failed", shm_total);
        goto failed;
    }

    /* the mapping is zero-filled */
    fd_shm = p;
    fd_shm->slot_size = slot_size;
    fd_shm->started_msec = fd_stats_wall_msec();
    fd_shm->master_pid = (uint64_t)getpid();

    return FD_OK;

failed:
    free(module_off);
    module_off = NULL;
    return FD_ERROR;
}

void fd_shm_set_cycle(const fd_cycle_t *cycle)
{
    const char *profile = cycle->profile ? cycle->profile : "";

    if (fd_shm == NULL) {
        return;
    }
    __atomic_store_n(&fd_shm->generation, cycle->generation,
                     __ATOMIC_RELAXED);
    snprintf(fd_shm->profile, sizeof(fd_shm->profile), "%s", profile);
}

fd_stats_t *fd_shm_slot(fd_shm_header_t *shm, unsigned i)
{
    return (fd_stats_t *)((char *)shm + header_size + shm->slot_size * i);
}

fd_stats_t *fd_stats_slot(unsigned i)
{
    return fd_shm_slot(fd_shm, i);
}

void *fd_stats_area(fd_stats_t *slot, const fd_module_t *m)
{
    if (m->shm_size == 0) {
        return NULL;
    }
    return (char *)slot + module_off[m->index];
}

void *fd_shm_retired_area(fd_shm_header_t *shm, const fd_module_t *m)
{
    return fd_stats_area(fd_shm_slot(shm, FD_MAX_WORKER_SLOTS), m);
}

fd_stats_t *fd_stats_worker_init(unsigned i, uint64_t generation,
                                 unsigned index)
{
    fd_stats_t *s = fd_stats_slot(i);
    uint64_t used = __atomic_load_n(&fd_shm->slots_used, __ATOMIC_RELAXED);

    memset(s, 0, fd_shm->slot_size);
    s->pid = (uint64_t)getpid();
    s->generation = generation;
    s->index = index;
    s->started_msec = fd_stats_wall_msec();
    __atomic_store_n(&s->alive, 1, __ATOMIC_RELEASE);
    /* workers start side by side: raise the high-water mark, never lower */
    while (used < i + 1
           && !__atomic_compare_exchange_n(&fd_shm->slots_used, &used, i + 1,
                                           1, __ATOMIC_RELEASE,
                                           __ATOMIC_RELAXED))
    {
        /* used is reloaded */
    }
    fd_stats = s;
    return s;
}

static void fold(uint64_t *dst, const uint64_t *src)
{
    __atomic_store_n(dst, *dst + *src, __ATOMIC_RELAXED);
}

void fd_stats_retire(unsigned i)
{
    fd_shm_tail_t *tail;
    fd_stats_t *s, *d;
    uint64_t seq;
    unsigned k;

    if (fd_shm == NULL || i >= FD_MAX_WORKER_SLOTS) {
        return;
    }
    s = fd_stats_slot(i);
    if (s->pid == 0) {
        return; /* never started, or already retired */
    }
    d = &fd_shm->retired;
    tail = shm_tail(fd_shm);

    seq = tail->seq;
    __atomic_store_n(&tail->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);

    fold(&d->conn_accepted, &s->conn_accepted);
    fold(&d->conn_handled, &s->conn_handled);
    fold(&d->requests, &s->requests);
    for (k = 0; k < fd_nelems(s->status); k++) {
        fold(&d->status[k], &s->status[k]);
    }
    fold(&d->bytes_in, &s->bytes_in);
    fold(&d->bytes_out, &s->bytes_out);
    fold(&d->ssl_resumed, &s->ssl_resumed);
    fold(&d->ssl_tls12, &s->ssl_tls12);
    fold(&d->ssl_tls13, &s->ssl_tls13);
    for (k = 0; k < FD_SSL_FAIL_N; k++) {
        fold(&d->ssl_failed[k], &s->ssl_failed[k]);
    }
    /* h2_active and quic_active are gauges: they end with the worker */
    fold(&d->h2_conns, &s->h2_conns);
    fold(&d->h2_streams, &s->h2_streams);
    fold(&d->h2_resets, &s->h2_resets);
    fold(&d->h2_goaways, &s->h2_goaways);
    fold(&d->quic_conns, &s->quic_conns);
    fold(&d->quic_closed, &s->quic_closed);
    fold(&d->quic_streams, &s->quic_streams);
    fold(&d->quic_retries, &s->quic_retries);
    fold(&d->quic_validated, &s->quic_validated);
    fold(&d->quic_lost, &s->quic_lost);
    fold(&d->quic_migrations, &s->quic_migrations);
    fold(&d->quic_resets, &s->quic_resets);
    fold(&d->quic_dropped, &s->quic_dropped);
    fold(&d->quic_forwarded, &s->quic_forwarded);
    fold(&d->quic_forward_dropped, &s->quic_forward_dropped);
    fold(&d->quic_gso_sends, &s->quic_gso_sends);

    for (k = 0; fd_modules[k] != NULL; k++) {
        const fd_module_t *m = fd_modules[k];

        if (m->retire != NULL && m->shm_size != 0) {
            m->retire(fd_shm_retired_area(fd_shm, m), fd_stats_area(s, m));
        }
    }

    memset(s, 0, fd_shm->slot_size);

    __atomic_store_n(&tail->seq, seq + 2, __ATOMIC_RELEASE);
}

size_t fd_shm_size(void)
{
    return shm_total;
}

static void copy_words(void *dst, const void *src, size_t size)
{
    const uint64_t *from = src;
    uint64_t *to = dst;
    size_t i;

    for (i = 0; i < size / sizeof(uint64_t); i++) {
        to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
    }
}

fd_shm_header_t *fd_shm_snapshot(void *dst)
{
    fd_shm_header_t *copy = dst;
    /* where the retired slot begins: it and the tail are always copied */
    size_t retired = (size_t)((char *)fd_shm_slot(fd_shm, FD_MAX_WORKER_SLOTS) -
                              (char *)fd_shm);
    size_t used;
    uint64_t seq;
    unsigned tries;

    /* Workers keep counting while we copy; only a retire must not be seen
     * half done. After many tries take what we have rather than spin.
     * Only the slots that ever held a worker are copied (of 128, most
     * are never used), then the retired slot and the tail in their place;
     * the rest of dst is left as it is and never read. */
    for (tries = 0;; tries++) {
        seq = __atomic_load_n(&shm_tail(fd_shm)->seq, __ATOMIC_ACQUIRE);
        if ((seq & 1) && tries < 1000) {
            sched_yield();
            continue;
        }
        used = __atomic_load_n(&fd_shm->slots_used, __ATOMIC_ACQUIRE);
        used = fd_min(used, FD_MAX_WORKER_SLOTS);
        copy_words(dst, fd_shm, header_size + fd_shm->slot_size * used);
        copy_words((char *)dst + retired, (char *)fd_shm + retired,
                   shm_total - retired);
        copy->slots_used = used;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&shm_tail(fd_shm)->seq, __ATOMIC_RELAXED) == seq
            || tries >= 1000)
        {
            break;
        }
    }

    return copy;
}
