#include "fd_core.h"
#include "fd_event.h"

/* Binary min-heap of armed timers, ordered by ->when. */
static fd_timer_t **heap;
static unsigned nheap, capheap;

int fd_timer_init(void)
{
    capheap = 1024;
    nheap = 0;
    heap = malloc(capheap * sizeof(*heap));
    return heap ? FD_OK : FD_ERROR;
}

static void heap_set(unsigned i, fd_timer_t *t)
{
    heap[i] = t;
    t->idx = i + 1;
}

static void sift_up(unsigned i)
{
    fd_timer_t *t = heap[i];

    while (i > 0) {
        unsigned parent = (i - 1) / 2;
        if (fd_msec32_diff(heap[parent]->when, t->when) <= 0)
            break;
        heap_set(i, heap[parent]);
        i = parent;
    }
    heap_set(i, t);
}

static void sift_down(unsigned i)
{
    fd_timer_t *t = heap[i];

    for (;;) {
        unsigned l = 2 * i + 1, m = i;
        uint32_t mw = t->when;

        if (l < nheap && fd_msec32_diff(heap[l]->when, mw) < 0) {
            m = l;
            mw = heap[l]->when;
        }
        if (l + 1 < nheap && fd_msec32_diff(heap[l + 1]->when, mw) < 0)
            m = l + 1;
        if (m == i)
            break;
        heap_set(i, heap[m]);
        i = m;
    }
    heap_set(i, t);
}

void fd_timer_del(fd_timer_t *t)
{
    unsigned i;
    fd_timer_t *last;

    if (t->idx == 0)
        return;
    i = t->idx - 1;
    t->idx = 0;
    last = heap[--nheap];
    if (i == nheap)
        return;
    heap_set(i, last);
    if (i > 0 && fd_msec32_diff(heap[(i - 1) / 2]->when, last->when) > 0)
        sift_up(i);
    else
        sift_down(i);
}

void fd_timer_add(fd_timer_t *t, fd_msec_t after)
{
    uint32_t when = fd_msec32_after(after);

    if (t->idx) {
        int32_t d = fd_msec32_diff(when, t->when);
        t->when = when;
        if (d < 0)
            sift_up(t->idx - 1);
        else if (d > 0)
            sift_down(t->idx - 1);
        return;
    }
    if (nheap == capheap) {
        fd_timer_t **n = realloc(heap, 2 * capheap * sizeof(*heap));
        if (n == NULL) {
            fd_log_error(FD_LOG_ALERT, errno, "timer heap realloc() failed");
            return;
        }
        heap = n;
        capheap *= 2;
    }
    t->when = when;
    heap_set(nheap++, t);
    sift_up(nheap - 1);
}

int fd_timer_expire(void)
{
    while (nheap) {
        fd_timer_t *t = heap[0];
        int32_t left = fd_msec32_diff(t->when, (uint32_t)fd_current_msec);
        if (left > 0)
            return left < 60000 ? (int)left : 60000;
        fd_timer_del(t);
        t->handler(t);
    }
    return -1;
}

#ifdef FD_FUZZ
/* the next timer to fire, or NULL: what a harness names when one is left */
fd_timer_t *fd_timer_fuzz_first(void)
{
    return nheap ? heap[0] : NULL;
}
#endif
