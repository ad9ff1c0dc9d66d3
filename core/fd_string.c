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
