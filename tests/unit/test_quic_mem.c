/* Unit tests: the worker's allocator for nghttp3 (fd_quic_mem.c). */
#include "fd_core.h"
#include "tap.h"

#ifdef FD_HTTP3

#define FD_QUIC_PRIVATE
#include "fd_quic.h"

int main(void)
{
    static const size_t sizes[] = {0,    1,    16,   17,    31,   32,
                                   33,   48,   100,  1000,  4080, 4096,
                                   8000, 12272, 16368, 16369, 70000};
    const nghttp3_mem *m = fd_quic_nghttp3_mem();
    unsigned char *p[sizeof(sizes) / sizeof(sizes[0])], *q, *r;
    unsigned i, j, good = 1;
    size_t k;

    /* each block holds what was asked, 16-byte aligned, apart from the
     * others */
    for (i = 0; i < fd_nelems(sizes); i++) {
        p[i] = fd_quic_alloc(sizes[i]);
        if (p[i] == NULL || ((uintptr_t)p[i] & 15) != 0)
            good = 0;
        else
            memset(p[i], (int)i + 1, sizes[i]);
    }
    ok(good, "blocks of 0 bytes to 70000: given, 16-byte aligned");
    for (i = 0; i < fd_nelems(sizes); i++)
        for (k = 0; k < sizes[i]; k++)
            if (p[i][k] != i + 1)
                good = 0;
    ok(good, "each holds its bytes: the classes do not overlap");

    /* a freed block comes back for the next of its class */
    q = p[9];
    fd_quic_free(p[9]);
    p[9] = fd_quic_alloc(990);
    if (m) /* not in sanitizer builds: libc's then */
        ok(p[9] == q, "a freed block is the next one of its size class");
    for (i = 0; i < fd_nelems(sizes); i++)
        fd_quic_free(p[i]);
    fd_quic_free(NULL);

    /* nghttp3's calloc and realloc */
    q = m ? m->calloc(10, 100, m->user_data) : calloc(10, 100);
    for (k = 0, good = q != NULL; good && k < 1000; k++)
        good = q[k] == 0;
    ok(good, "calloc: zeroed");
    for (k = 0; k < 1000; k++)
        q[k] = (unsigned char)k;
    r = m ? m->realloc(q, 30000, m->user_data) : realloc(q, 30000);
    for (k = 0, good = r != NULL; good && k < 1000; k++)
        good = r[k] == (unsigned char)k;
    ok(good, "realloc to a larger block keeps the bytes");
    q = m ? m->realloc(r, 1000, m->user_data) : realloc(r, 1000);
    for (k = 0, good = q != NULL; good && k < 1000; k++)
        good = q[k] == (unsigned char)k;
    ok(good, "and back to a smaller one");
    if (m)
        m->free(q, m->user_data);
    else
        free(q);

    /* many of one class, freed, trimmed, taken again */
    for (j = 0; j < 3; j++) {
        unsigned char *v[2000];
        for (i = 0, good = 1; i < 2000; i++)
            if ((v[i] = fd_quic_alloc(200)) == NULL)
                good = 0;
        for (i = 0; i < 2000; i++)
            fd_quic_free(v[i]);
        if (j == 1)
            fd_quic_mem_trim();
        ok(good, "2000 blocks of 200 bytes, round %u", j + 1);
    }
    fd_quic_mem_trim();
    return done_testing();
}

#else

int main(void)
{
    printf("1..0 # SKIP built without HTTP/3\n");
    return 0;
}

#endif
