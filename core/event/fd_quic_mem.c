/*
 * The worker's allocator for nghttp3 (fd_quic.h: fd_quic_nghttp3_mem)
 * and HTTP/3's own small blocks (fd_quic_alloc).
 * nghttp3 mallocs and frees a few small blocks per request stream (its
 * ring buffers, the copied response fields, a decoded field's buffer):
 * given libc's allocator, that was 11 calls and some 1,700 instructions
 * a request (callgrind), a tenth of an HTTP/3 request's cost.
 *
 * Here a freed block goes onto a free list of its size class (19
 * classes, 32 bytes to 16 KB, 1.5x apart) and the next request takes it
 * back: a pop and a push. Blocks come from malloc() the first time;
 * larger ones go straight to libc. Each block has a 16-byte header
 * (its class; malloc's alignment kept). Workers are processes and
 * nghttp3 runs on the loop only, so the lists take no lock.
 *
 * Memory goes back to libc when the worker's last QUIC connection ends
 * (fd_quic_mem_trim) and whenever the free lists already hold
 * MEM_KEEP bytes. Sanitizer builds pass every call through to libc, so
 * ASan still sees each block's life.
 */
#include "fd_core.h"

#ifdef FD_HTTP3

#define FD_QUIC_PRIVATE
#include "fd_quic.h"

#define MEM_HDR 16            /* before each block: its class */
#define MEM_CLASSES 19        /* 32, 48, 64, 96, ... 12288, 16384 */
#define MEM_LARGE MEM_CLASSES /* a block libc sized: over 16 KB */
#define MEM_KEEP (4 << 20)    /* bytes the free lists hold at most */

#if defined(__SANITIZE_ADDRESS__)
#define MEM_PASSTHROUGH 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEM_PASSTHROUGH 1
#endif
#endif

typedef union mem_hdr_u {
    struct {
        uint32_t cls;
        uint32_t pad;
        size_t size;          /* MEM_LARGE: what was asked */
    } h;
    union mem_hdr_u *next;    /* on a free list */
} mem_hdr_t;

/* the block after it keeps malloc's 16-byte alignment */
_Static_assert(sizeof(mem_hdr_t) == MEM_HDR, "a 16-byte header");

#ifdef MEM_PASSTHROUGH

void *fd_quic_alloc(size_t size)
{
    return malloc(size);
}

void fd_quic_free(void *p)
{
    free(p);
}

const nghttp3_mem *fd_quic_nghttp3_mem(void)
{
    return NULL; /* libc's */
}

void fd_quic_mem_trim(void)
{
}

#else

static mem_hdr_t *free_list[MEM_CLASSES];
static size_t cached;         /* bytes on the free lists */

/* the size of class i, header included */
static size_t class_size(unsigned i)
{
    if (i == 0)
        return 32;
    return i & 1 ? (size_t)3 << (3 + (i + 1) / 2) : (size_t)1 << (5 + i / 2);
}

/* the smallest class that holds n bytes, header included; n > 32 falls
 * between 2^k and 2^(k+1), in the lower or upper half of which bit k-1
 * tells */
static unsigned class_of(size_t n)
{
    unsigned k;

    if (n <= 32)
        return 0;
    k = 63 - (unsigned)__builtin_clzll((unsigned long long)(n - 1));
    return 2 * (k - 5) + 1 + (unsigned)(((n - 1) >> (k - 1)) & 1);
}

void *fd_quic_alloc(size_t size)
{
    size_t n = size + MEM_HDR;
    mem_hdr_t *h;
    unsigned c;

    if (n > class_size(MEM_CLASSES - 1) || n < size) {
        if ((h = malloc(n)) == NULL)
            return NULL;
        h->h.cls = MEM_LARGE;
        h->h.size = size;
        return (char *)h + MEM_HDR;
    }
    c = class_of(n);
    if ((h = free_list[c]) != NULL) {
        free_list[c] = h->next;
        cached -= class_size(c);
        /* the class's next block, freed a round trip ago as often as
         * not: the next call reads its link, so it is fetched now */
        __builtin_prefetch(h->next);
    } else if ((h = malloc(class_size(c))) == NULL) {
        return NULL;
    }
    h->h.cls = c;
    return (char *)h + MEM_HDR;
}

void fd_quic_free(void *p)
{
    mem_hdr_t *h;
    unsigned c;

    if (p == NULL)
        return;
    h = (mem_hdr_t *)((char *)p - MEM_HDR);
    c = h->h.cls;
    if (c == MEM_LARGE || cached + class_size(c) > MEM_KEEP) {
        free(h);
        return;
    }
    h->next = free_list[c];
    free_list[c] = h;
    cached += class_size(c);
}

static void *mem_malloc(size_t size, void *ud)
{
    (void)ud;
    return fd_quic_alloc(size);
}

static void mem_free(void *p, void *ud)
{
    (void)ud;
    fd_quic_free(p);
}

static void *mem_calloc(size_t nmemb, size_t size, void *ud)
{
    void *p;

    (void)ud;
    if (size && nmemb > SIZE_MAX / size)
        return NULL;
    if ((p = fd_quic_alloc(nmemb * size)) != NULL)
        memset(p, 0, nmemb * size);
    return p;
}

static void *mem_realloc(void *p, size_t size, void *ud)
{
    mem_hdr_t *h;
    size_t have;
    void *np;

    (void)ud;
    if (p == NULL)
        return fd_quic_alloc(size);
    h = (mem_hdr_t *)((char *)p - MEM_HDR);
    have = h->h.cls == MEM_LARGE ? h->h.size
                                 : class_size(h->h.cls) - MEM_HDR;
    if (size <= have && h->h.cls != MEM_LARGE)
        return p;
    if ((np = fd_quic_alloc(size)) == NULL)
        return NULL;
    memcpy(np, p, fd_min(have, size));
    fd_quic_free(p);
    return np;
}

const nghttp3_mem *fd_quic_nghttp3_mem(void)
{
    static const nghttp3_mem mem = {
        .malloc = mem_malloc,
        .free = mem_free,
        .calloc = mem_calloc,
        .realloc = mem_realloc,
    };

    return &mem;
}

void fd_quic_mem_trim(void)
{
    unsigned c;

    for (c = 0; c < MEM_CLASSES; c++)
        while (free_list[c]) {
            mem_hdr_t *h = free_list[c];
            free_list[c] = h->next;
            free(h);
        }
    cached = 0;
}

#endif /* MEM_PASSTHROUGH */

#endif
