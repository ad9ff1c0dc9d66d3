#include "fd_core.h"

char *fd_fmt_uint(char *p, uint64_t v)
{
    char tmp[20];
    size_t n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}
