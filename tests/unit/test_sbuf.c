/* Unit tests: the bounds-checked builder (fd_sbuf). */
#include "fd_core.h"
#include "tap.h"

int main(void)
{
    fd_pool_t *p = fd_pool_create(1024);
    fd_sbuf_t sb;
    char fixed[16], big[7000];
    char *q;
    size_t i;

    ok(fd_sbuf_init(&sb, p, 4) == FD_OK, "pool builder");
    fd_sbuf_add_lit(&sb, "GET ");
    fd_sbuf_add_str(&sb, fd_string("/x"));
    fd_sbuf_addc(&sb, ' ');
    fd_sbuf_add_uint(&sb, 18446744073709551615ULL);
    fd_sbuf_add_crlf(&sb);
    ok(!fd_sbuf_failed(&sb), "grew, no failure");
    is_int((int)fd_sbuf_len(&sb), 29, "length");
    ok(memcmp(sb.start, "GET /x 18446744073709551615\r\n", 29) == 0,
       "bytes");

    memset(big, 'a', sizeof(big));
    fd_sbuf_add(&sb, big, sizeof(big));
    ok(!fd_sbuf_failed(&sb) && fd_sbuf_len(&sb) == 29 + sizeof(big),
       "7000 bytes appended in one go");

    fd_sbuf_init_fixed(&sb, fixed, 8);
    fd_sbuf_add_lit(&sb, "12345");
    ok(!fd_sbuf_failed(&sb), "fixed: fits");
    fd_sbuf_add_lit(&sb, "6789");
    ok(fd_sbuf_failed(&sb), "fixed: an append past capacity fails");
    is_int((int)fd_sbuf_len(&sb), 5, "fixed: nothing of it written");
    fd_sbuf_addc(&sb, 'x');
    is_int((int)fd_sbuf_len(&sb), 5, "fixed: the failure is sticky");
    ok(fd_sbuf_reserve(&sb, 1) == NULL, "fixed: no reservation once failed");

    fd_sbuf_init_fixed(&sb, fixed, sizeof(fixed));
    q = fd_sbuf_reserve(&sb, 20);
    ok(q == NULL && fd_sbuf_failed(&sb), "fixed: reserve past capacity");

    fd_sbuf_init(&sb, p, 2);
    fd_sbuf_printf(&sb, "%s-%d", "status", 12345);
    fd_sbuf_printf(&sb, "%.*s", 3, "abcdef");
    ok(fd_sbuf_len(&sb) == 15 && memcmp(sb.start, "status-12345abc", 15) == 0,
       "printf grows and appends");

    fd_sbuf_init(&sb, p, 1);
    fd_sbuf_add_escaped_path(&sb, "/a b/%\r\n;x", 10);
    ok(fd_sbuf_len(&sb) == 18 &&
           memcmp(sb.start, "/a%20b/%25%0D%0A;x", 18) == 0,
       "escaped path");
    fd_sbuf_init(&sb, p, 1);
    fd_sbuf_add_json(&sb, "a\"\\\n", 4);
    ok(fd_sbuf_len(&sb) == 11 && memcmp(sb.start, "a\\\"\\\\\\u000a", 11) == 0,
       "json escape");

    fd_sbuf_init(&sb, p, 1);
    for (i = 0; i < 1000; i++)
        fd_sbuf_add_header(&sb, fd_string("X-A"), fd_string("b"));
    ok(!fd_sbuf_failed(&sb) && fd_sbuf_len(&sb) == 8000, "headers");
    fd_pool_destroy(p);
    return done_testing();
}
