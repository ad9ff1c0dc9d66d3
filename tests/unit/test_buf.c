/* Unit tests: the pool allocator, buffers, the block cache. */
#include "fd_core.h"
#include "tap.h"

static int cleaned;

static void cleanup(void *data)
{
    cleaned += *(int *)data;
}

int main(void)
{
    fd_pool_t *p = fd_pool_create(1024);
    fd_block_cache_t bc = {.size = 256, .keep = 2};
    char *a, *b, *big, *s;
    void *x, *y, *z;
    fd_buf_t *buf;
    int one = 1;
    unsigned i;

    ok(p != NULL, "pool created");
    a = fd_palloc(p, 10);
    b = fd_palloc(p, 10);
    ok(((uintptr_t)a & 15) == 0 && ((uintptr_t)b & 15) == 0, "aligned");
    ok(b >= a + 10, "no overlap");
    for (i = 0; i < 100; i++)
        memset(fd_palloc(p, 100), 'x', 100); /* spans several blocks */
    big = fd_palloc(p, 100000);
    ok(big != NULL, "large allocation");
    memset(big, 1, 100000);
    s = fd_pstrdup(p, "hello", 5);
    is_str(s, "hello", "pstrdup");
    fd_pool_cleanup_add(p, cleanup, &one);
    fd_pool_clear(p);
    is_int(cleaned, 1, "clear runs cleanups");
    a = fd_palloc(p, 10);
    ok(a != NULL, "allocate after clear");
    fd_pool_cleanup_add(p, cleanup, &one);
    fd_pool_reset(p);
    is_int(cleaned, 2, "reset runs cleanups");
    ok(fd_pcalloc(p, 64) != NULL, "allocate after reset");

    buf = fd_buf_copy(p, "abc", 3);
    is_int(fd_buf_size(buf), 3, "memory buffer size");
    ok(buf->pos != NULL && memcmp(buf->pos, "abc", 3) == 0, "copied");
    buf = fd_buf_file(p, 5, 10, 30);
    is_int(fd_buf_size(buf), 20, "file buffer size");
    fd_pool_destroy(p);

    x = fd_block_get(&bc);
    y = fd_block_get(&bc);
    z = fd_block_get(&bc);
    ok(x && y && z, "blocks");
    fd_block_put(&bc, x);
    fd_block_put(&bc, y);
    fd_block_put(&bc, z); /* over keep: freed */
    is_int(bc.nfree, 2, "cache keeps at most `keep`");
    ok(fd_block_get(&bc) == y, "LIFO reuse");
    is_int(bc.nfree, 1, "taken from the cache");
    free(y);                 /* LeakSanitizer: what the test took */
    free(fd_block_get(&bc)); /* and what the cache still holds */
    return done_testing();
}
