#include "fd_core.h"

/* Digits counted first, then written from the end two at a time. */
char *fd_fmt_uint(char *p, uint64_t v)
{
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930313233"
        "34353637383940414243444546474849505152535455565758596061626364656667"
        "68697071727374757677787980818283848586878889909192939495969798"
        "99";
    unsigned n = 1;
    uint64_t t = 10;
    char *e;

    while (n < 20 && v >= t) {
        n++;
        t *= 10;
    }
    e = p + n;
    p = e;
    while (v >= 100) {
        unsigned k = (unsigned)(v % 100) * 2;
        v /= 100;
        p -= 2;
        p[0] = pairs[k];
        p[1] = pairs[k + 1];
    }
    if (v >= 10) {
        p -= 2;
        p[0] = pairs[v * 2];
        p[1] = pairs[v * 2 + 1];
    } else {
        *--p = (char)('0' + v);
    }
    return e;
}

uint32_t fd_hash(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint32_t h = 2166136261u;

    while (n--)
        h = (h ^ *p++) * 16777619u;
    return h;
}

/*
 * SipHash-2-4 (Aumasson and Bernstein, 2012) of n bytes under a 128-bit
 * key: a hash an outsider who does not know the key cannot aim, for
 * tables whose keys come from clients.
 */
#define SIP_ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND(v0, v1, v2, v3) \
    do { \
        v0 += v1; v1 = SIP_ROTL(v1, 13); v1 ^= v0; v0 = SIP_ROTL(v0, 32); \
        v2 += v3; v3 = SIP_ROTL(v3, 16); v3 ^= v2; \
        v0 += v3; v3 = SIP_ROTL(v3, 21); v3 ^= v0; \
        v2 += v1; v1 = SIP_ROTL(v1, 17); v1 ^= v2; v2 = SIP_ROTL(v2, 32); \
    } while (0)

uint64_t fd_siphash(const uint64_t key[2], const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t v0 = key[0] ^ 0x736f6d6570736575ULL;
    uint64_t v1 = key[1] ^ 0x646f72616e646f6dULL;
    uint64_t v2 = key[0] ^ 0x6c7967656e657261ULL;
    uint64_t v3 = key[1] ^ 0x7465646279746573ULL;
    uint64_t m, last = (uint64_t)n << 56;
    size_t i;

    for (; n >= 8; p += 8, n -= 8) {
        m = 0;
        for (i = 0; i < 8; i++) /* little-endian, whatever the host */
            m |= (uint64_t)p[i] << (8 * i);
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    for (i = 0; i < n; i++)
        last |= (uint64_t)p[i] << (8 * i);
    v3 ^= last;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= last;
    v2 ^= 0xff;
    for (i = 0; i < 4; i++)
        SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

char *fd_fmt_hex(char *p, uint64_t v)
{
    static const char digits[] = "0123456789abcdef";
    unsigned n = 1;
    char *e;

    while (n < 16 && (v >> (4 * n)) != 0)
        n++;
    e = p + n;
    while (n--) {
        p[n] = digits[v & 0xf];
        v >>= 4;
    }
    return e;
}
