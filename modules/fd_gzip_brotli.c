/*
 * The gzip module's brotli encoder (libbrotlienc), for Content-Encoding:
 * br. A state holds a window of 2^BROTLI_WINDOW bytes and the hash
 * tables and block buffers of its quality, allocated by the library as it
 * needs them and freed when the response ends (brotli has no reset to
 * keep one for the next response). Measured peak of one state fed 1 MB in
 * 64 KB pieces (the allocator counted): quality 5 with a 64 KB window
 * 1.9 MB, 256 KB 4.4 MB, 1 MB 10 MB, brotli's default 4 MB 16 MB.
 */
#include <brotli/encode.h>
#include <stdint.h>

#include "fd_gzip.h"

/* 64 KB (deflate's is 32 KB): each response being compressed holds its
 * state until it ends, and the state grows with the window (above) */
#define BROTLI_WINDOW 16

static void *br_open(int level, size_t size_hint)
{
    BrotliEncoderState *s = BrotliEncoderCreateInstance(NULL, NULL, NULL);

    if (s == NULL)
        return NULL;
    if (!BrotliEncoderSetParameter(s, BROTLI_PARAM_QUALITY,
                                   (uint32_t)level) ||
        !BrotliEncoderSetParameter(s, BROTLI_PARAM_LGWIN, BROTLI_WINDOW) ||
        (size_hint && !BrotliEncoderSetParameter(
                          s, BROTLI_PARAM_SIZE_HINT,
                          (uint32_t)(size_hint < ((size_t)1 << 30) ? size_hint
                                                    : (size_t)1 << 30)))) {
        BrotliEncoderDestroyInstance(s);
        return NULL;
    }
    return s;
}

static void br_close(void *st, int reuse)
{
    (void)reuse;
    BrotliEncoderDestroyInstance(st);
}

static int br_feed(void *st, const void *data, size_t len, int op,
                   fd_gzip_out_t *out)
{
    BrotliEncoderOperation bop = op == FD_GZIP_FINISH ? BROTLI_OPERATION_FINISH
                                 : op == FD_GZIP_FLUSH ? BROTLI_OPERATION_FLUSH
                                                       : BROTLI_OPERATION_PROCESS;
    const uint8_t *in = data;
    size_t avail_in = len;

    for (;;) {
        uint8_t *next = (uint8_t *)fd_gzip_scratch;
        size_t avail = FD_GZIP_OUT_SIZE;

        if (!BrotliEncoderCompressStream(st, bop, &avail_in, &in, &avail,
                                         &next, NULL))
            return FD_ERROR;
        if (avail < FD_GZIP_OUT_SIZE &&
            fd_gzip_emit(out, fd_gzip_scratch, FD_GZIP_OUT_SIZE - avail) !=
                FD_OK)
            return FD_ERROR;
        if (avail_in == 0 && !BrotliEncoderHasMoreOutput(st) &&
            (bop != BROTLI_OPERATION_FINISH || BrotliEncoderIsFinished(st)))
            return FD_OK;
    }
}

static size_t br_bound(void *st, size_t len)
{
    (void)st;
    /* 0 for inputs it cannot bound (huge): the caller streams those */
    return BrotliEncoderMaxCompressedSize(len);
}

const fd_gzip_encoder_t fd_gzip_brotli = {
    .coding = {2, "br"},
    .open = br_open,
    .close = br_close,
    .feed = br_feed,
    .bound = br_bound,
};
