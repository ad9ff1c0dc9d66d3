/*
 * A tiny header-only TAP producer for the C unit tests (run by prove).
 *
 *     #include "tap.h"
 *     int main(void)
 *     {
 *         plan(3);                          (or no plan: done_testing counts)
 *         ok(p != NULL, "pool created");
 *         is_int(b->last - b->pos, 5, "5 bytes buffered");
 *         is_str(name, "fastd", "name is %s", "fastd");
 *         return done_testing();
 *     }
 *
 * Test names are printf formats. Failures print got/expected on stderr as
 * Test::More does. Every ok/is_* returns whether it passed.
 */
#ifndef FD_TAP_H
#define FD_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TAP_PRINTF(f, a) __attribute__((format(printf, f, a)))

struct tap_state {
    int started;
    int planned; /* -1: no plan */
    int run;
    int failed;
};

static inline struct tap_state *tap_state(void)
{
    static struct tap_state s = {0, -1, 0, 0};
    return &s;
}

static inline void tap_start(void)
{
    struct tap_state *t = tap_state();

    if (!t->started) {
        t->started = 1;
        /* a crash must not lose the lines already printed */
        setvbuf(stdout, NULL, _IOLBF, 0);
        printf("TAP version 13\n");
    }
}

static inline void plan(int n)
{
    tap_start();
    tap_state()->planned = n;
    printf("1..%d\n", n);
}

/* Diagnostics go to stderr, after what stdout already holds. */
TAP_PRINTF(1, 2) static inline void diag(const char *fmt, ...)
{
    va_list ap;

    fflush(stdout);
    fputs("# ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static inline int tap_vresult(int pass, const char *file, int line,
                              const char *fmt, va_list ap)
{
    struct tap_state *t = tap_state();

    tap_start();
    t->run++;
    if (!pass) {
        t->failed++;
    }

    printf("%s %d - ", pass ? "ok" : "not ok", t->run);
    vprintf(fmt, ap);
    printf("\n");

    if (!pass) {
        diag("  Failed test at %s line %d.", file, line);
    }
    return pass;
}

TAP_PRINTF(5, 6)
static inline int tap_ok(int pass, const char *expr, const char *file,
                         int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tap_vresult(pass, file, line, fmt, ap);
    va_end(ap);
    if (!pass) {
        diag("  %s", expr);
    }
    return pass;
}

TAP_PRINTF(5, 6)
static inline int tap_is_int(intmax_t got, intmax_t exp, const char *file,
                             int line, const char *fmt, ...)
{
    va_list ap;
    int pass = got == exp;

    va_start(ap, fmt);
    tap_vresult(pass, file, line, fmt, ap);
    va_end(ap);
    if (!pass) {
        diag("         got: %" PRIdMAX, got);
        diag("    expected: %" PRIdMAX, exp);
    }
    return pass;
}

/* got may be a counted slice (len >= 0) or a C string (len < 0). */
TAP_PRINTF(6, 7)
static inline int tap_is_str(const char *got, long len, const char *exp,
                             const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    int pass;
    size_t n;

    if (got == NULL || exp == NULL) {
        pass = got == exp;
        n = 0;
    } else {
        n = len < 0 ? strlen(got) : (size_t) len;
        pass = n == strlen(exp) && memcmp(got, exp, n) == 0;
    }

    va_start(ap, fmt);
    tap_vresult(pass, file, line, fmt, ap);
    va_end(ap);
    if (!pass) {
        if (got == NULL) {
            diag("         got: NULL");
        } else {
            diag("         got: \"%.*s\"", (int) n, got);
        }
        diag("    expected: %s%s%s", exp ? "\"" : "", exp ? exp : "NULL",
             exp ? "\"" : "");
    }
    return pass;
}

/* Prints the plan if there was none; the exit status for main(). */
static inline int done_testing(void)
{
    struct tap_state *t = tap_state();

    tap_start();
    if (t->planned < 0) {
        printf("1..%d\n", t->run);
    } else if (t->run != t->planned) {
        diag("Planned %d tests but ran %d.", t->planned, t->run);
        return t->failed ? (t->failed < 254 ? t->failed : 254) : 255;
    }
    if (t->failed) {
        diag("Failed %d of %d tests.", t->failed, t->run);
    }
    return t->failed < 254 ? t->failed : 254;
}

#define ok(cond, ...) \
    tap_ok((cond) ? 1 : 0, #cond, __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, exp, ...) \
    tap_is_int((intmax_t) (got), (intmax_t) (exp), __FILE__, __LINE__, \
               __VA_ARGS__)
#define is_str(got, exp, ...) \
    tap_is_str((got), -1, (exp), __FILE__, __LINE__, __VA_ARGS__)
/* A counted slice against a C string: is_strn(s.data, s.len, "GET", ...) */
#define is_strn(got, len, exp, ...) \
    tap_is_str((got), (long) (len), (exp), __FILE__, __LINE__, __VA_ARGS__)

#endif
