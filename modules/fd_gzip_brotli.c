/*
 * The gzip module's brotli encoder (libbrotlienc), for Content-Encoding:
 * br. A state holds a window of 2^BROTLI_WINDOW bytes and the hash
 * tables of its quality: at quality 5 about 1.3 MB, allocated by the
 * library as it needs them, freed when the response ends (brotli has no
 * reset to keep one for the next response).
 */
#include <brotli/encode.h>

#include "fd_gzip.h"

/* 256 KB: on-the-fly responses gain little from brotli's default 4 MB
 * window, and each stream holds its window until it ends */
#define BROTLI_WINDOW 18

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
                          (uint32_t)fd_min(size_hint, (size_t)1 << 30)))) {
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
    .coding = fd_string("br"),
    .open = br_open,
    .close = br_close,
    .feed = br_feed,
    .bound = br_bound,
};
