/*
 * Named shared memory zones: state every worker must see (limit_req's
 * buckets, a cache's index, resolved addresses). The master maps a zone
 * while it loads a configuration, so every worker forked after inherits
 * it, and finds it again by kind, name and size on a reload, so the state
 * in it goes on. A zone is never unmapped: one that a reload drops stays
 * with the master (a few zones a lifetime; a reload that brings it back
 * finds it whole).
 */
#include <sched.h>
#include <sys/mman.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_log.h"

typedef struct zone_s {
    struct zone_s *next;
    const char *kind;          /* a literal: the owner's */
    char *name;
    size_t size;
    void *addr;
} zone_t;

static zone_t *zones;

void *fd_shm_zone(const char *kind, const char *name, size_t size,
                  int *fresh)
{
    zone_t *z;
    void *p;

    for (z = zones; z; z = z->next)
        if (z->size == size && strcmp(z->kind, kind) == 0 &&
            strcmp(z->name, name) == 0) {
            if (fresh)
                *fresh = 0;
            return z->addr;
        }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if ((z = calloc(1, sizeof(*z))) == NULL ||
        (z->name = strdup(name)) == NULL) {
        free(z);
        munmap(p, size);
        errno = ENOMEM;
        return NULL;
    }
    z->kind = kind;
    z->size = size;
    z->addr = p;
    z->next = zones;
    zones = z;
    if (fresh)
        *fresh = 1;
    return p;
}

void fd_api_shm_lock_slow(uint32_t *l)
{
    unsigned spins = 0;

    do {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
            if (++spins % 64 == 0)
                sched_yield();
            else
                __builtin_ia32_pause();
        }
    } while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE));
}
