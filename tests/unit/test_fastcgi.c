/* Unit tests: FastCGI records (modules/fd_fastcgi_record.c): the request's
 * encoding, and the response parser fed whole and byte by byte. */
#include "fd_core.h"
#include "fd_fastcgi.h"
#include "tap.h"

static size_t rec(char *dst, unsigned type, const char *data, size_t len,
                  unsigned pad)
{
    fd_fcgi_header(dst, type, len);
    dst[6] = (char)pad;
    memcpy(dst + 8, data, len);
    memset(dst + 8 + len, 0, pad);
    return 8 + len + pad;
}

typedef struct {
    char out[70000], err[256];
    size_t nout, nerr;
    int ended, rc;
    uint32_t app;
    const char *why;
    size_t left;               /* bytes after END_REQUEST */
} result_t;

/* Parse d[0, n) in pieces of step bytes (0: whole). */
static void parse(const char *d, size_t n, size_t step, result_t *res)
{
    fd_fcgi_parser_t p;
    fd_fcgi_piece_t pc;
    size_t off = 0;

    memset(res, 0, sizeof(*res));
    fd_fcgi_parser_init(&p);
    while (off < n) {
        size_t k = step && step < n - off ? step : n - off;
        const char *pos = d + off, *end = pos + k;
        for (;;) {
            int rc = fd_fcgi_parse(&p, &pos, end, &pc, &res->why);
            if (rc == FD_AGAIN)
                break;
            if (rc == FD_ERROR) {
                res->rc = FD_ERROR;
                return;
            }
            if (pc.type == FD_FCGI_STDOUT) {
                memcpy(res->out + res->nout, pc.data, pc.len);
                res->nout += pc.len;
            } else if (pc.type == FD_FCGI_STDERR) {
                memcpy(res->err + res->nerr, pc.data, pc.len);
                res->nerr += pc.len;
            } else {
                res->ended = 1;
                res->app = pc.app_status;
                res->left = (size_t)(end - pos);
            }
        }
        off += k;
    }
    res->rc = FD_OK;
}

int main(void)
{
    static char buf[200000], big[70000];
    static result_t res;
    char b[16], l[4];
    size_t n, steps[] = {0, 1, 3, 7, 8, 9};
    unsigned i;

    /* BEGIN_REQUEST */
    fd_fcgi_begin(b, 1);
    ok(memcmp(b, "\1\1\0\1\0\10\0\0\0\1\1\0\0\0\0\0", 16) == 0,
       "BEGIN_REQUEST: version 1, request 1, responder, keep-conn");
    fd_fcgi_begin(b, 0);
    is_int(b[10], 0, "BEGIN_REQUEST without keep-conn");

    /* name-value lengths */
    is_int((int)fd_fcgi_len(l, 127), 1, "127: one byte");
    is_int((uint8_t)l[0], 127, "... its value");
    is_int((int)fd_fcgi_len(l, 128), 4, "128: four bytes");
    ok(memcmp(l, "\x80\0\0\x80", 4) == 0, "... high bit set, big-endian");
    fd_fcgi_len(l, 0x12345678);
    ok(memcmp(l, "\x92\x34\x56\x78", 4) == 0, "a large length");

    /* PARAMS framing: one record, then several past 65535 */
    n = (size_t)(fd_fcgi_params(buf, "\1\1ab", 4) - buf);
    is_int((int)n, 8 + 4 + 8, "small PARAMS: one record and the empty one");
    ok(memcmp(buf, "\1\4\0\1\0\4\0\0\1\1ab\1\4\0\1\0\0\0\0", 20) == 0,
       "... bytes");
    memset(big, 'x', sizeof(big));
    n = (size_t)(fd_fcgi_params(buf, big, sizeof(big)) - buf);
    is_int((int)n, (int)fd_fcgi_params_size(sizeof(big)), "size as said");
    is_int((int)n, 70000 + 3 * 8, "70000 bytes: two records and the end");
    ok((uint8_t)buf[4] == 0xff && (uint8_t)buf[5] == 0xff,
       "first record full (65535)");

    /* a response: stderr, stdout in two records with padding, end */
    n = rec(buf, FD_FCGI_STDERR, "oops\n", 5, 3);
    n += rec(buf + n, FD_FCGI_STDOUT, "Status: 200\r\n\r\n", 15, 1);
    n += rec(buf + n, FD_FCGI_STDOUT, "hello", 5, 0);
    n += rec(buf + n, FD_FCGI_STDOUT, "", 0, 0);
    n += rec(buf + n, FD_FCGI_END_REQUEST, "\0\0\0\7\0\0\0\0", 8, 0);
    for (i = 0; i < fd_nelems(steps); i++) {
        parse(buf, n, steps[i], &res);
        ok(res.rc == FD_OK && res.ended && res.app == 7 &&
               res.nout == 20 &&
               memcmp(res.out, "Status: 200\r\n\r\nhello", 20) == 0 &&
               res.nerr == 5 && memcmp(res.err, "oops\n", 5) == 0,
           "response parsed in steps of %zu", steps[i]);
    }

    /* END_REQUEST with padding (the specification allows it on every
     * record): given after its padding, nothing left over */
    n = rec(buf, FD_FCGI_STDOUT, "Status: 200\r\n\r\nhi", 17, 7);
    n += rec(buf + n, FD_FCGI_END_REQUEST, "\0\0\0\0\0\0\0\0", 8, 8);
    for (i = 0; i < fd_nelems(steps); i++) {
        parse(buf, n, steps[i], &res);
        ok(res.rc == FD_OK && res.ended && res.nout == 17 && res.left == 0,
           "a padded END_REQUEST in steps of %zu: ended, nothing after it",
           steps[i]);
    }

    /* a 65535-byte record, zero-copy pieces */
    memset(big, 'y', 65535);
    n = rec(buf, FD_FCGI_STDOUT, big, 65535, 0);
    n += rec(buf + n, FD_FCGI_END_REQUEST, "\0\0\0\0\0\0\0\0", 8, 0);
    parse(buf, n, 1000, &res);
    ok(res.rc == FD_OK && res.ended && res.nout == 65535,
       "a full-size record across reads");

    /* broken input */
    n = rec(buf, FD_FCGI_STDOUT, "x", 1, 0);
    buf[0] = 2;
    parse(buf, n, 0, &res);
    ok(res.rc == FD_ERROR && strstr(res.why, "version"), "version 2: error");
    n = rec(buf, FD_FCGI_STDOUT, "x", 1, 0);
    buf[3] = 2;
    parse(buf, n, 0, &res);
    ok(res.rc == FD_ERROR && strstr(res.why, "another request"),
       "request id 2: error");
    n = rec(buf, 11, "\0\0\0\0\0\0\0\0", 8, 0);
    parse(buf, n, 0, &res);
    ok(res.rc == FD_ERROR && strstr(res.why, "type"), "unknown type: error");
    n = rec(buf, FD_FCGI_BEGIN_REQUEST, "\0\0\0\0\0\0\0\0", 8, 0);
    parse(buf, n, 0, &res);
    ok(res.rc == FD_ERROR, "a request's record type from the app: error");
    n = rec(buf, FD_FCGI_END_REQUEST, "\0\0\0\0\0\0\0", 7, 0);
    parse(buf, n, 0, &res);
    ok(res.rc == FD_ERROR && strstr(res.why, "length"),
       "END_REQUEST of 7 bytes: error");
    n = rec(buf, FD_FCGI_END_REQUEST, "\0\0\0\0\0\0\0\0", 8, 0);
    n += rec(buf + n, FD_FCGI_STDOUT, "late", 4, 0);
    parse(buf, n, 0, &res);
    ok(res.ended && res.left == 12, "bytes after END_REQUEST are left over");
    parse(buf, n, 1, &res);
    ok(res.rc == FD_ERROR && strstr(res.why, "after END_REQUEST"),
       "... and an error when parsed on");
    n = rec(buf, FD_FCGI_STDOUT, "abc", 3, 0);
    buf[5] = 10; /* says 10 bytes, 3 come */
    parse(buf, n, 0, &res);
    ok(res.rc == FD_OK && !res.ended && res.nout == 3,
       "a record longer than its content: waits for more, never ends");

    done_testing();
    return 0;
}
