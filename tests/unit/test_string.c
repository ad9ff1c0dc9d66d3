/* Unit tests: the string helpers (word-wise case folding, decimal, hex,
 * the table hash). */
#include "fd_core.h"
#include "tap.h"

/* 1 when fmt (fd_fmt_uint, fd_fmt_hex) writes v otherwise than printf's
 * format pf does */
static unsigned fmt_differs(char *(*fmt)(char *, uint64_t), const char *pf,
                            uint64_t v)
{
    char got[32], want[32];

    *fmt(got, v) = '\0';
    snprintf(want, sizeof(want), pf, (unsigned long long)v);
    return strcmp(got, want) != 0;
}

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
    {
        uint64_t v;
        bad = 0;
        for (v = 0; v < 200000; v++)
            bad += fmt_differs(fd_fmt_uint, "%llu", v);
        for (v = 1; v < UINT64_MAX / 7; v = v * 7 + 3) {
            uint64_t x;
            for (x = v - 1; x <= v + 1; x++)
                bad += fmt_differs(fd_fmt_uint, "%llu", x);
        }
        is_int((int)bad, 0, "fd_fmt_uint agrees with printf (0..199999, and around powers of 7)");
        *fd_fmt_uint(buf, 10000000000000000000ULL) = '\0';
        is_str(buf, "10000000000000000000", "fd_fmt_uint 10^19 (the 20-digit edge)");
    }
    {
        uint64_t v;
        bad = 0;
        for (v = 0; v < 70000; v++)
            bad += fmt_differs(fd_fmt_hex, "%llx", v);
        *fd_fmt_hex(buf, UINT64_MAX) = '\0';
        is_str(buf, "ffffffffffffffff", "fd_fmt_hex max");
        is_int((int)bad, 0, "fd_fmt_hex agrees with printf for 0..69999");
    }
    /* fd_hash is FNV-1a 32 (its published test vectors) */
    is_int(fd_hash("", 0), 0x811c9dc5, "fd_hash: empty");
    is_int(fd_hash("a", 1), 0xe40c292c, "fd_hash: \"a\"");
    is_int(fd_hash("foobar", 6), 0xbf9cf968, "fd_hash: \"foobar\"");
    is_int(fd_hash("\x7f\0\0\x01", 4), 0xdaaf40ed,
           "fd_hash: bytes with NUL (127.0.0.1)");
    {
        /* SipHash-2-4: the paper's vector (key 00..0f, message 00..0e)
         * and, for lengths 0, 7, 8 and 63, what openssl mac SIPHASH gives */
        uint8_t kb[16], msg[64];
        uint64_t key[2] = {0, 0};
        unsigned i;
        for (i = 0; i < 16; i++)
            kb[i] = (uint8_t)i;
        for (i = 0; i < 64; i++)
            msg[i] = (uint8_t)i;
        for (i = 0; i < 8; i++) {
            key[0] |= (uint64_t)kb[i] << (8 * i);
            key[1] |= (uint64_t)kb[8 + i] << (8 * i);
        }
        ok(fd_siphash(key, msg, 15) == 0xa129ca6149be45e5ULL,
           "fd_siphash: the paper's 15-byte vector");
        ok(fd_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ULL,
           "fd_siphash: empty");
        ok(fd_siphash(key, msg, 7) == 0xab0200f58b01d137ULL,
           "fd_siphash: 7 bytes");
        ok(fd_siphash(key, msg, 8) == 0x93f5f5799a932462ULL,
           "fd_siphash: 8 bytes (one whole word)");
        ok(fd_siphash(key, msg, 63) == 0x958a324ceb064572ULL,
           "fd_siphash: 63 bytes");
    }
    return done_testing();
}
