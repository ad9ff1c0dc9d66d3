/*
 * libFuzzer harness: the FastCGI response-record parser (fd_fcgi_parse,
 * modules/fd_fastcgi_record.c), as the fastcgi handler drives it.
 *
 * The input parsed whole, then again in random splits (a read may end
 * anywhere in a header, a content or padding): every piece lies within
 * the bytes it was given, and both runs give the same STDOUT and STDERR
 * bytes, the same END_REQUEST and the same verdict. Once END_REQUEST was
 * seen, no further piece may come.
 *
 * Input: bytes 0-3 the split seed, then the records.
 */
#include <assert.h>

#include "fd_core.h"
#include "fd_fastcgi.h"
#include "fuzz_rng.h"

typedef struct {
    int rc;                    /* FD_AGAIN (incomplete), FD_ERROR */
    int ended;
    uint32_t app;
    unsigned proto;
    size_t nout, nerr;
    uint32_t hout, herr;       /* FNV of the bytes */
} result_t;

static uint32_t fnv(uint32_t h, const char *p, size_t n)
{
    while (n--)
        h = (h ^ (uint8_t)*p++) * 16777619u;
    return h;
}

static void run(const char *d, size_t n, int split, result_t *res)
{
    fd_fcgi_parser_t p;
    fd_fcgi_piece_t pc;
    const char *why;
    size_t off = 0;

    memset(res, 0, sizeof(*res));
    res->hout = res->herr = 2166136261u;
    fd_fcgi_parser_init(&p);
    res->rc = FD_AGAIN;
    while (off < n) {
        size_t k = n - off;
        const char *pos, *end;
        if (split)
            k = 1 + rng() % (k < 64 ? k : 64);
        pos = d + off;
        end = pos + k;
        for (;;) {
            int rc = fd_fcgi_parse(&p, &pos, end, &pc, &why);
            assert(pos >= d + off && pos <= end);
            if (rc == FD_AGAIN) {
                assert(pos == end);
                break;
            }
            if (rc == FD_ERROR) {
                assert(why != NULL);
                res->rc = FD_ERROR;
                return;
            }
            assert(rc == FD_OK);
            assert(!res->ended);
            if (pc.type == FD_FCGI_END_REQUEST) {
                res->ended = 1;
                res->app = pc.app_status;
                res->proto = pc.protocol_status;
                continue;
            }
            assert(pc.type == FD_FCGI_STDOUT || pc.type == FD_FCGI_STDERR);
            assert(pc.len > 0 && pc.data >= d + off && pc.data + pc.len <= pos);
            if (pc.type == FD_FCGI_STDOUT) {
                res->nout += pc.len;
                res->hout = fnv(res->hout, pc.data, pc.len);
            } else {
                res->nerr += pc.len;
                res->herr = fnv(res->herr, pc.data, pc.len);
            }
        }
        off += k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    result_t whole, parts;

    if (size < 4)
        return 0;
    rng_state = (uint32_t)data[0] | (uint32_t)data[1] << 8 |
                (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    run((const char *)data + 4, size - 4, 0, &whole);
    run((const char *)data + 4, size - 4, 1, &parts);
    assert(whole.rc == parts.rc && whole.ended == parts.ended);
    if (whole.rc != FD_ERROR) {
        assert(whole.nout == parts.nout && whole.hout == parts.hout);
        assert(whole.nerr == parts.nerr && whole.herr == parts.herr);
        assert(whole.app == parts.app && whole.proto == parts.proto);
    }
    return 0;
}
