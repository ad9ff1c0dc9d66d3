/*
 * libFuzzer harness: the chunked transfer-coding decoder
 * (fd_http_parse_chunked), as the engine and the proxy use it.
 *
 * 1. Decoded whole, then fed in random prefixes with a small, random
 *    output room (the engine's body_decode() trick of giving back the part
 *    of a chunk that did not fit): same bytes, same verdict, same end.
 * 2. Against a strict reference decoder written from RFC 9112 7.1: what
 *    the reference accepts, fastd must accept with the same body and end
 *    (fastd may be more lenient about extensions and trailers, never about
 *    sizes and CRLFs: those are what a smuggler plays with).
 *
 * Input: byte 0 the output room, bytes 1-4 the split seed, then the body.
 */
#include <assert.h>

#include "fd_core.h"
#include "fd_http_parse.h"
#include "fuzz_rng.h"

typedef struct {
    int rc;          /* FD_DONE, FD_AGAIN or 400 */
    size_t end;      /* consumed bytes at FD_DONE */
    size_t out_len;
} result_t;

/* Whole input, unbounded output. */
static void decode_whole(const char *d, size_t n, char *out, result_t *res)
{
    fd_http_chunked_t ck;
    const char *pos = d, *data;
    size_t len;
    int rc;

    memset(&ck, 0, sizeof(ck));
    res->out_len = 0;
    for (;;) {
        rc = fd_http_parse_chunked(&ck, &pos, d + n, &data, &len);
        assert(pos >= d && pos <= d + n);
        if (rc != FD_OK)
            break;
        assert(len == 0 || (data >= d && data + len <= pos));
        memcpy(out + res->out_len, data, len);
        res->out_len += len;
    }
    assert(rc == FD_DONE || rc == FD_AGAIN || rc == 400);
    res->rc = rc;
    res->end = rc == FD_DONE ? (size_t)(pos - d) : 0;
}

/*
 * Random prefixes and a bounded destination, as core/http/fd_http.c
 * body_decode() does: when a slice does not fit, the rest of the chunk is
 * left in the input by winding the decoder back.
 */
static void decode_split(const char *d, size_t n, size_t room, char *out,
                         result_t *res)
{
    fd_http_chunked_t ck;
    size_t have = 0, rpos = 0;
    int rc = FD_AGAIN;

    memset(&ck, 0, sizeof(ck));
    res->out_len = 0;
    for (;;) {
        const char *pos, *data;
        size_t len, got = 0;

        if (rc == FD_AGAIN) {
            if (have == n)
                break;
            size_t step = 1 + rng() % (rng() & 1 ? 4 : n);
            have = fd_min(n, have + step); /* a macro: no rng() in it */
        }
        while (got < room) {
            pos = d + rpos;
            rc = fd_http_parse_chunked(&ck, &pos, d + have, &data, &len);
            if (rc == FD_OK && len > room - got) {
                size_t extra = len - (room - got);
                ck.size += extra;
                ck.state = FD_HTTP_CK_DATA;
                pos -= extra;
                len = room - got;
            }
            rpos = (size_t)(pos - d);
            if (rc != FD_OK)
                break;
            memcpy(out + res->out_len, data, len);
            res->out_len += len;
            got += len;
        }
        if (rc == FD_DONE || (rc != FD_OK && rc != FD_AGAIN))
            break;
    }
    res->rc = rc;
    res->end = rc == FD_DONE ? rpos : 0;
}

/* --- the reference: RFC 9112 7.1, strict --- */

static int tchar(uint8_t c)
{
    return fd_http_tchar[c];
}

static int hex(uint8_t c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

static int ws(uint8_t c)
{
    return c == ' ' || c == '\t';
}

/*
 * chunked-body = *chunk last-chunk trailer-section CRLF
 * chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 * chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )
 * Returns 1 with *end and the body in out, 0 when invalid or incomplete.
 * Bounds are tighter than fastd's (15 hex digits, 4096 extension bytes,
 * 8192 trailer bytes) so that what it accepts, fastd must.
 */
static int reference(const uint8_t *d, size_t n, char *out, size_t *out_len,
                     size_t *end)
{
    size_t i = 0, trailer = 0;

    *out_len = 0;
    for (;;) {
        uint64_t size = 0;
        size_t digits = 0, ext_start;

        while (i < n && hex(d[i])) {
            if (++digits > 15)
                return 0;
            size = size * 16 + (uint64_t)(d[i] <= '9' ? d[i] - '0'
                                                      : (d[i] | 0x20) - 'a' + 10);
            i++;
        }
        if (digits == 0)
            return 0;
        ext_start = i;
        for (;;) {
            size_t j = i;
            while (j < n && ws(d[j]))
                j++;
            if (j >= n || d[j] != ';')
                break;
            j++;
            while (j < n && ws(d[j]))
                j++;
            if (j >= n || !tchar(d[j]))
                return 0;
            while (j < n && tchar(d[j]))
                j++;
            {
                size_t k = j;
                while (k < n && ws(d[k]))
                    k++;
                if (k < n && d[k] == '=') {
                    k++;
                    while (k < n && ws(d[k]))
                        k++;
                    if (k < n && d[k] == '"') {
                        k++;
                        while (k < n && d[k] != '"') {
                            if (d[k] == '\\') {
                                k++;
                                if (k >= n || (d[k] < 0x20 && d[k] != '\t') ||
                                    d[k] == 0x7f)
                                    return 0;
                            } else if ((d[k] < 0x20 && d[k] != '\t') ||
                                       d[k] == 0x7f) {
                                return 0;
                            }
                            k++;
                        }
                        if (k >= n)
                            return 0;
                        k++;
                    } else {
                        if (k >= n || !tchar(d[k]))
                            return 0;
                        while (k < n && tchar(d[k]))
                            k++;
                    }
                    j = k;
                }
            }
            i = j;
        }
        if (i - ext_start > 4000)
            return 0;
        if (i + 1 >= n || d[i] != '\r' || d[i + 1] != '\n')
            return 0;
        i += 2;
        if (size == 0)
            break;
        if (size > n - i)
            return 0;
        memcpy(out + *out_len, d + i, (size_t)size);
        *out_len += (size_t)size;
        i += (size_t)size;
        if (i + 1 >= n || d[i] != '\r' || d[i + 1] != '\n')
            return 0;
        i += 2;
    }
    /* trailer-section = *( field-line CRLF ) */
    for (;;) {
        size_t s = i, j;
        if (i + 1 < n && d[i] == '\r' && d[i + 1] == '\n') {
            *end = i + 2;
            return 1;
        }
        j = i;
        while (j < n && tchar(d[j]))
            j++;
        if (j == i || j >= n || d[j] != ':')
            return 0;
        j++;
        while (j < n && d[j] != '\r') {
            if ((d[j] < 0x20 && d[j] != '\t') || d[j] == 0x7f)
                return 0;
            j++;
        }
        if (j + 1 >= n || d[j + 1] != '\n')
            return 0;
        i = j + 2;
        trailer += i - s;
        if (trailer > 8000)
            return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    result_t whole, split;
    char *buf, *o1, *o2, *o3;
    size_t room, ref_len = 0, ref_end = 0;
    uint32_t seed;

    if (size < 5)
        return 0;
    room = 1 + (data[0] % 64) * ((data[0] & 0x80) ? 64 : 1);
    memcpy(&seed, data + 1, 4);
    data += 5;
    size -= 5;
    buf = malloc(size ? size : 1);
    o1 = malloc(size + 1);
    o2 = malloc(size + 1);
    o3 = malloc(size + 1);
    assert(buf && o1 && o2 && o3);
    memcpy(buf, data, size);

    decode_whole(buf, size, o1, &whole);
    rng_state = seed;
    decode_split(buf, size, room, o2, &split);

    assert(whole.rc == split.rc);
    assert(whole.end == split.end);
    if (whole.rc == FD_DONE) {
        assert(whole.out_len == split.out_len);
        assert(memcmp(o1, o2, whole.out_len) == 0);
    }
    if (reference((const uint8_t *)buf, size, o3, &ref_len, &ref_end)) {
        if (whole.rc != FD_DONE || whole.end != ref_end ||
            whole.out_len != ref_len || memcmp(o1, o3, ref_len) != 0) {
            fprintf(stderr, "reference accepts (end %zu, %zu bytes), fastd "
                    "rc %d end %zu, %zu bytes\n", ref_end, ref_len, whole.rc,
                    whole.end, whole.out_len);
            abort();
        }
    }
    free(buf);
    free(o1);
    free(o2);
    free(o3);
    return 0;
}
