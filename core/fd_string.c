#include "fd_core.h"

int fd_str_caseeq(fd_str_t a, const char *b, size_t n)
{
    size_t i;

    if (a.len != n)
        return 0;
    for (i = 0; i < n; i++)
        if (fd_tolower(a.data[i]) != fd_tolower(b[i]))
            return 0;
    return 1;
}

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
