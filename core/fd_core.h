/*
 * fastd core: common types, return codes and the small helpers every file
 * uses. Include this first in every .c file.
 */
#ifndef FD_CORE_H
#define FD_CORE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "fd_auto_config.h"
#include "fastd.h"

#define FASTD_VERSION "0.1.0"
#define FASTD_NAME "fastd"

/* Return codes, and the counted string fd_str_t: the public API's
 * (fastd.h), which the engine shares rather than repeats. */
#define FD_DONE -4

/*
 * mkdir -p: every directory of the path p from byte from on (0: all),
 * with mode; p is restored. FD_OK, or FD_ERROR with errno. made, when not
 * NULL: where the first directory made ends in p (-1: none was made).
 */
int fd_mkdirs(char *p, size_t from, mode_t mode, long *made);

#define fd_likely(x) __builtin_expect(!!(x), 1)
#define fd_unlikely(x) __builtin_expect(!!(x), 0)
#define fd_nelems(a) (sizeof(a) / sizeof((a)[0]))
#define fd_align(n, a) (((n) + ((a)-1)) & ~((size_t)(a)-1))
#define fd_min(a, b) ((a) < (b) ? (a) : (b))
#define fd_max(a, b) ((a) > (b) ? (a) : (b))
#define FD_CACHELINE 64

typedef intptr_t fd_int_t;
typedef uintptr_t fd_uint_t;
typedef uint64_t fd_msec_t;

#define fd_string(s) ((fd_str_t){sizeof(s) - 1, (s)})
#define fd_null_string ((fd_str_t){0, NULL})

static inline int fd_str_eq(fd_str_t a, const char *lit, size_t n)
{
    return a.len == n && memcmp(a.data, lit, n) == 0;
}

#define fd_str_eq_lit(a, lit) fd_str_eq(a, lit, sizeof(lit) - 1)

/* 8 bytes with 'A'..'Z' folded to lower case, the others unchanged */
static inline uint64_t fd_lower8(uint64_t x)
{
    uint64_t h = x & 0x7f7f7f7f7f7f7f7fULL;
    uint64_t ge_a = h + 0x3f3f3f3f3f3f3f3fULL; /* high bit: >= 'A' */
    uint64_t gt_z = h + 0x2525252525252525ULL; /* high bit: > 'Z' */

    return x | (((ge_a & ~gt_z & ~x) & 0x8080808080808080ULL) >> 2);
}

static inline char fd_tolower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c | 0x20) : c;
}

/* ASCII case-insensitive equality of a and b[0..n), 8 bytes at a time */
static inline int fd_str_caseeq(fd_str_t a, const char *b, size_t n)
{
    size_t i = 0;
    uint64_t x, y;

    if (a.len != n)
        return 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&x, a.data + i, 8);
        memcpy(&y, b + i, 8);
        if (fd_lower8(x) != fd_lower8(y))
            return 0;
    }
    for (; i < n; i++)
        if (fd_tolower(a.data[i]) != fd_tolower(b[i]))
            return 0;
    return 1;
}
#define fd_str_caseeq_lit(a, lit) fd_str_caseeq(a, lit, sizeof(lit) - 1)

/* Decimal formatting without printf; returns the end of what was written. */
char *fd_fmt_uint(char *p, uint64_t v);
/* Lower-case hex without printf (chunk sizes); returns the end. */
char *fd_fmt_hex(char *p, uint64_t v);
/* FNV-1a over n bytes: the hash of the per-worker tables (cheap, and good
 * for keys that differ in their last bytes; mix it for consistent
 * hashing). */
uint32_t fd_hash(const void *data, size_t n);
/* SipHash-2-4 under key: for tables keyed by what clients send */
uint64_t fd_siphash(const uint64_t key[2], const void *data, size_t n);

typedef struct fd_pool_s fd_pool_t;
typedef struct fd_buf_s fd_buf_t;
typedef struct fd_log_s fd_log_t;
typedef struct fd_conf_s fd_conf_t;
typedef struct fd_cycle_s fd_cycle_t;
typedef struct fd_worker_s fd_worker_t;
typedef struct fd_connection_s fd_connection_t;
typedef struct fd_request_s fd_request_t;
typedef struct fd_module_s fd_module_t;
typedef struct fd_timer_s fd_timer_t;
typedef struct fd_event_s fd_event_t;
typedef struct fd_listening_s fd_listening_t;
typedef struct fd_http_server_s fd_http_server_t;
typedef struct fd_http_loc_s fd_http_loc_t;

#include "fd_log.h"
#include "fd_palloc.h"
#include "fd_buf.h"
#include "fd_sbuf.h"

#endif
