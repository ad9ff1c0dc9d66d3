#ifndef FD_GZIP_H
#define FD_GZIP_H

/*
 * The gzip module's encoders: the filter (fd_gzip_module.c) negotiates a
 * coding, then drives one of these, the same way for both: deflate
 * (zlib) beside it, brotli in fd_gzip_brotli.c.
 */
#include <stddef.h>

#include "fastd.h"

/* Where an encoder's output goes: a streamed response's output queue in
 * pieces (r set), or one buffer sized by bound() (r NULL). */
typedef struct {
    fd_request_t *r;
    char *dst;
    size_t room;
} fd_gzip_out_t;

enum { FD_GZIP_RUN, FD_GZIP_FLUSH, FD_GZIP_FINISH };

typedef struct {
    fd_str_t coding;                      /* Content-Encoding: "gzip" */
    /* a state at level, NULL when there is no memory for one (the
     * response then goes uncompressed) */
    void *(*open)(int level, size_t size_hint);
    /* give a state back; reuse: it finished cleanly */
    void (*close)(void *st, int reuse);
    /* feed len bytes, then flush or finish as op says; FD_OK/FD_ERROR */
    int (*feed)(void *st, const void *data, size_t len, int op,
                fd_gzip_out_t *out);
    /* most bytes len input bytes become, finished */
    size_t (*bound)(void *st, size_t len);
} fd_gzip_encoder_t;

/* Pass n bytes of output on; FD_OK or FD_ERROR. */
int fd_gzip_emit(fd_gzip_out_t *out, const void *p, size_t n);

/* output pieces of an encoder: copied by the engine, or into out->dst */
#define FD_GZIP_OUT_SIZE (16 * 1024)
extern char fd_gzip_scratch[FD_GZIP_OUT_SIZE];

extern const fd_gzip_encoder_t fd_gzip_brotli;

#endif
