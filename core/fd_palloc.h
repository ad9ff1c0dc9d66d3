#ifndef FD_PALLOC_H
#define FD_PALLOC_H

/*
 * Region allocator. A pool is a chain of blocks; allocations bump a pointer
 * and are freed all at once by fd_pool_reset()/fd_pool_destroy(). Large
 * allocations get their own malloc and are freed with the pool. Cleanup
 * handlers run when the pool is reset or destroyed (closing files, freeing
 * library objects).
 */

typedef struct fd_pool_block_s fd_pool_block_t;
typedef struct fd_pool_large_s fd_pool_large_t;
typedef struct fd_pool_cleanup_s fd_pool_cleanup_t;

struct fd_pool_block_s {
    fd_pool_block_t *next;
    char *pos;
    char *end;
};

struct fd_pool_large_s {
    fd_pool_large_t *next;
};

struct fd_pool_cleanup_s {
    void (*handler)(void *data);
    void *data;
    fd_pool_cleanup_t *next;
};

struct fd_pool_s {
    fd_pool_block_t *current;
    fd_pool_block_t *first;
    fd_pool_large_t *large;
    fd_pool_cleanup_t *cleanup;
    size_t block_size;
};

fd_pool_t *fd_pool_create(size_t block_size);
void fd_pool_destroy(fd_pool_t *p);
void fd_pool_reset(fd_pool_t *p);  /* frees all but the first block */
void fd_pool_clear(fd_pool_t *p);  /* keeps every block for reuse */
/* Blocks the pool holds, counted up to max + 1: whether it grew past max
 * (a pool kept for reuse gives big ones back). */
unsigned fd_pool_blocks(const fd_pool_t *p, unsigned max);
/* the general case: later blocks, a new block, a large allocation */
void *fd_palloc_slow(fd_pool_t *p, size_t size, size_t align);

/* Bump the current block's pointer, inline (a few per request). */
static inline void *fd_palloc_align(fd_pool_t *p, size_t size, size_t align)
{
    fd_pool_block_t *b = p->current;
    char *m = (char *)(((uintptr_t)b->pos + align - 1) & ~(uintptr_t)(align - 1));

#if defined(FD_FUZZ) && !defined(FD_FUZZ_POOL_BLOCKS)
    /* fuzz builds: every allocation is its own malloc, so ASan knows the
     * bounds of each one (an overrun inside a block is otherwise silent)
     * and sees a use after the pool's reset */
    (void)m;
    return fd_palloc_slow(p, size, align);
#endif

    if (__builtin_expect(size <= p->block_size / 2 && m + size <= b->end,
                         1)) {
        b->pos = m + size;
        return m;
    }
    return fd_palloc_slow(p, size, align);
}

/* aligned to 16 */
static inline void *fd_palloc(fd_pool_t *p, size_t size)
{
    return fd_palloc_align(p, size, 16);
}

/* unaligned, for strings */
static inline void *fd_pnalloc(fd_pool_t *p, size_t size)
{
    return fd_palloc_align(p, size, 1);
}

static inline void *fd_pcalloc(fd_pool_t *p, size_t size)
{
    void *m = fd_palloc_align(p, size, 16);

    if (m)
        memset(m, 0, size);
    return m;
}
char *fd_pstrdup(fd_pool_t *p, const char *s, size_t n);

/*
 * An array that grows by appends (a repeated config key): elts with n
 * elements of size bytes and room for *cap. Returns elts while there is
 * room for one more, else a copy with twice the room (*cap updated), or
 * NULL. The old array stays in the pool, so a list of N costs under 4N
 * elements and N appends O(N) copies, where growing by one costs N^2/2.
 * *cap 0 with n > 0 (a static default array) copies on the first append.
 */
void *fd_parray_reserve(fd_pool_t *p, void *elts, unsigned n, unsigned *cap,
                        size_t size);
fd_pool_cleanup_t *fd_pool_cleanup_add(fd_pool_t *p,
                                       void (*handler)(void *), void *data);

#endif
