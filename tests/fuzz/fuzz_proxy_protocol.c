/*
 * libFuzzer harness: the PROXY protocol header parser
 * (fd_proxy_protocol_parse), as a proxy_protocol listener peeks at it.
 *
 * 1. A verdict never reads past what it was given, and a whole header is
 *    never longer than the input nor than its version's maximum.
 * 2. Prefixes: every prefix of a whole header, or of an input still
 *    FD_AGAIN, is FD_AGAIN (a header split across reads is read as one);
 *    once a prefix is FD_ERROR, every longer input is too (a connection
 *    is closed for bytes that could never become a header, and only
 *    then).
 * 3. A source address read from it, written back as v1 and v2 by
 *    fd_proxy_protocol_write, reads back the same.
 */
#include <assert.h>

#include "fd_core.h"
#include "fd_realip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fd_addr_t src, again, dst;
    uint8_t out[FD_PROXY_PROTOCOL_V1_MAX + 64];
    uint8_t *copy;
    size_t k, n;
    int rc, r2, v;

    if (size > 2 * FD_PROXY_PROTOCOL_MAX)
        return 0;
    /* an exact-size copy: ASan catches a read past the end */
    copy = malloc(size ? size : 1);
    assert(copy);
    memcpy(copy, data, size);
    rc = fd_proxy_protocol_parse(copy, size, &src);
    assert(rc == FD_AGAIN || rc == FD_ERROR || rc > 0);
    if (rc > 0) {
        assert((size_t)rc <= size && rc >= 15);
        assert(copy[0] == 'P' ? rc <= FD_PROXY_PROTOCOL_V1_MAX
                              : rc <= FD_PROXY_PROTOCOL_MAX);
        assert(src.family == 0 || src.family == 2 /* AF_INET */ ||
               src.family == 10 /* AF_INET6 */);
    }
    /* prefixes */
    for (k = 0; k < size; k++) {
        fd_addr_t tmp;
        r2 = fd_proxy_protocol_parse(copy, k, &tmp);
        if (rc > 0 && k < (size_t)rc)
            assert(r2 == FD_AGAIN);
        if (rc == FD_AGAIN)
            assert(r2 == FD_AGAIN);
        if (r2 == FD_ERROR)
            assert(rc == FD_ERROR);
        if (r2 > 0)
            assert(r2 == rc); /* the same header, found earlier */
    }
    /* written back, read back */
    if (rc > 0 && src.family) {
        memset(&dst, 0, sizeof(dst));
        dst.family = src.family;
        dst.port = 80;
        for (v = 1; v <= 2; v++) {
            n = fd_proxy_protocol_write(out, sizeof(out), v, &src, &dst);
            assert(n > 0);
            assert(fd_proxy_protocol_parse(out, n, &again) == (int)n);
            assert(again.family == src.family && again.port == src.port);
            assert(memcmp(again.addr, src.addr,
                          src.family == 2 ? 4 : 16) == 0);
        }
    }
    free(copy);
    return 0;
}
