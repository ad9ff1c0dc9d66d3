/* Unit tests: the string helpers (word-wise case folding, decimal). */
#include "fd_core.h"
#include "tap.h"

int main(void)
{
    unsigned c, d, bad = 0;
    char buf[32];

    /* fd_lower8 folds exactly 'A'..'Z', in every byte position */
    for (c = 0; c < 256; c++) {
        for (d = 0; d < 8; d++) {
            uint64_t w = 0x6161616161616161ULL, want = w, got;
            ((uint8_t *)&w)[d] = (uint8_t)c;
            ((uint8_t *)&want)[d] = (uint8_t)fd_tolower((char)c);
            got = fd_lower8(w);
            if (got != want)
                bad++;
        }
    }
    is_int((int)bad, 0, "fd_lower8 matches fd_tolower for all 256 bytes in all 8 places");

    /* fd_str_caseeq: every byte pair, in the word loop and in the tail */
    bad = 0;
    for (c = 0; c < 256; c++)
        for (d = 0; d < 256; d++) {
            char a[11] = "abcdefghij", b[11] = "ABCDEFGHIJ";
            int want = fd_tolower((char)c) == fd_tolower((char)d);
            a[3] = (char)c; b[3] = (char)d;     /* in the 8-byte word */
            a[9] = 'j'; b[9] = 'J';
            if (fd_str_caseeq((fd_str_t){10, a}, b, 10) != want)
                bad++;
            a[3] = 'd'; b[3] = 'D';
            a[9] = (char)c; b[9] = (char)d;     /* in the tail */
            if (fd_str_caseeq((fd_str_t){10, a}, b, 10) != want)
                bad++;
        }
    is_int((int)bad, 0, "fd_str_caseeq agrees with a byte-wise fold for all byte pairs");
    ok(!fd_str_caseeq_lit(fd_string("Content-Length"), "content-lengt"), "length differs");
    ok(fd_str_caseeq_lit(fd_string("CONTENT-LENGTH"), "content-length"), "upper case");
    ok(!fd_str_caseeq_lit(fd_string("content-lengtH\r"), "content-length\n"), "CR is not LF");

    *fd_fmt_uint(buf, 0) = '\0';
    is_str(buf, "0", "fd_fmt_uint 0");
    *fd_fmt_uint(buf, UINT64_MAX) = '\0';
    is_str(buf, "18446744073709551615", "fd_fmt_uint max");
    return done_testing();
}
