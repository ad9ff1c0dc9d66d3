#include "fd_core.h"

#define FD_POOL_ALIGN 16

fd_pool_t *fd_pool_create(size_t block_size)
{
    fd_pool_t *p;
    fd_pool_block_t *b;

    if (block_size < 256)
        block_size = 256;
#if defined(FD_FUZZ) && !defined(FD_FUZZ_POOL_BLOCKS)
    /* every allocation is a malloc of its own (fd_palloc_slow) */
    p = malloc(sizeof(fd_pool_t) + sizeof(fd_pool_block_t));
#else
    p = malloc(sizeof(fd_pool_t) + sizeof(fd_pool_block_t) + block_size);
#endif
    if (p == NULL)
        return NULL;
    b = (fd_pool_block_t *)(p + 1);
    b->next = NULL;
    b->pos = (char *)(b + 1);
    b->end = b->pos + block_size;
    p->first = p->current = b;
    p->large = NULL;
    p->cleanup = NULL;
    p->block_size = block_size;
    return p;
}

static void pool_free_extra(fd_pool_t *p)
{
    fd_pool_cleanup_t *c;
    fd_pool_large_t *l, *ln;
    fd_pool_block_t *b, *bn;

    for (c = p->cleanup; c; c = c->next)
        c->handler(c->data);
    p->cleanup = NULL;
    for (l = p->large; l; l = ln) {
        ln = l->next;
        free(l);
    }
    p->large = NULL;
    for (b = p->first->next; b; b = bn) {
        bn = b->next;
        free(b);
    }
}

void fd_pool_destroy(fd_pool_t *p)
{
    if (p == NULL)
        return;
    pool_free_extra(p);
    free(p);
}

void fd_pool_clear(fd_pool_t *p)
{
    fd_pool_cleanup_t *c;
    fd_pool_large_t *l, *ln;
    fd_pool_block_t *b;

    for (c = p->cleanup; c; c = c->next)
        c->handler(c->data);
    p->cleanup = NULL;
    for (l = p->large; l; l = ln) {
        ln = l->next;
        free(l);
    }
    p->large = NULL;
    for (b = p->first; b; b = b->next)
        b->pos = (char *)(b + 1);
    p->current = p->first;
}

void fd_pool_reset(fd_pool_t *p)
{
    pool_free_extra(p);
    p->first->next = NULL;
    p->first->pos = (char *)(p->first + 1);
    p->current = p->first;
}

static void *pool_large(fd_pool_t *p, size_t size)
{
    fd_pool_large_t *l = malloc(fd_align(sizeof(*l), FD_POOL_ALIGN) + size);

    if (l == NULL)
        return NULL;
    l->next = p->large;
    p->large = l;
    return (char *)l + fd_align(sizeof(*l), FD_POOL_ALIGN);
}

void *fd_palloc_slow(fd_pool_t *p, size_t size, size_t align)
{
    fd_pool_block_t *b, *tail = p->current;
    char *m;

#if defined(FD_FUZZ) && !defined(FD_FUZZ_POOL_BLOCKS)
    (void)align; /* pool_large() aligns to FD_POOL_ALIGN, the largest */
    (void)tail;
    (void)b;
    (void)m;
    return pool_large(p, size);
#endif
    if (size > p->block_size / 2)
        return pool_large(p, size);
    for (b = p->current; b; b = b->next) {
        m = (char *)fd_align((uintptr_t)b->pos, align);
        if (m + size <= b->end) {
            b->pos = m + size;
            p->current = b; /* earlier blocks count as full */
            return m;
        }
        tail = b;
    }
    b = malloc(sizeof(fd_pool_block_t) + p->block_size);
    if (b == NULL)
        return NULL;
    b->pos = (char *)(b + 1);
    b->end = b->pos + p->block_size;
    b->next = NULL;
    tail->next = b;
    p->current = b;
    m = (char *)fd_align((uintptr_t)b->pos, align);
    b->pos = m + size;
    return m;
}

char *fd_pstrdup(fd_pool_t *p, const char *s, size_t n)
{
    char *d = fd_pnalloc(p, n + 1);

    if (d == NULL)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

fd_pool_cleanup_t *fd_pool_cleanup_add(fd_pool_t *p, void (*handler)(void *),
                                       void *data)
{
    fd_pool_cleanup_t *c = fd_palloc(p, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->handler = handler;
    c->data = data;
    c->next = p->cleanup;
    p->cleanup = c;
    return c;
}

unsigned fd_pool_blocks(const fd_pool_t *p, unsigned max)
{
    const fd_pool_block_t *b;
    unsigned n = 0;

    for (b = p->first; b && n <= max; b = b->next)
        n++;
    return n;
}

void *fd_parray_reserve(fd_pool_t *p, void *elts, unsigned n, unsigned *cap,
                        size_t size)
{
    unsigned nc;
    void *ne;

    if (n < *cap)
        return elts;
    nc = n < 4 ? 4 : n * 2;
    if (nc <= n || nc > SIZE_MAX / size)
        return NULL;
    ne = fd_palloc(p, nc * size);
    if (ne == NULL)
        return NULL;
    if (n)
        memcpy(ne, elts, n * size);
    *cap = nc;
    return ne;
}
