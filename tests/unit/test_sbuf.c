/* Unit tests: the bounds-checked builder (fd_sbuf). */
#include <signal.h>
#include <sys/wait.h>

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

    /* a failed builder has no room left: nothing after a failure is
     * written, whatever its size (the fast path tests only the room) */
    fd_sbuf_init_fixed(&sb, fixed, 8);
    fd_sbuf_add_lit(&sb, "123456789");
    ok(fd_sbuf_failed(&sb) && sb.end == sb.pos, "fixed: failed, no room");
    fd_sbuf_add(&sb, "", 0);
    fd_sbuf_add_uint(&sb, 1);
    fd_sbuf_printf(&sb, "%d", 2);
    fd_sbuf_add_escaped_path(&sb, "a", 1);
    fd_sbuf_add_json(&sb, "a", 1);
    ok(fd_sbuf_failed(&sb) && fd_sbuf_len(&sb) == 0,
       "fixed: no append of any kind after the failure");

    /* exactly full is not a failure */
    fd_sbuf_init_fixed(&sb, fixed, 8);
    fd_sbuf_add_lit(&sb, "12345678");
    ok(!fd_sbuf_failed(&sb) && fd_sbuf_len(&sb) == 8, "fixed: exactly full");
    fd_sbuf_add(&sb, "", 0);
    ok(!fd_sbuf_failed(&sb), "fixed: full, an empty append is fine");
    fd_sbuf_addc(&sb, 'x');
    ok(fd_sbuf_failed(&sb) && fd_sbuf_len(&sb) == 8, "fixed: one more fails");

    /* a pool builder that cannot grow (a size no pool gives) fails too */
    fd_sbuf_init(&sb, p, 8);
    fd_sbuf_add_lit(&sb, "abc");
    ok(fd_sbuf_reserve(&sb, SIZE_MAX / 2) == NULL && fd_sbuf_failed(&sb) &&
           fd_sbuf_len(&sb) == 3,
       "pool: an impossible reservation fails, the bytes stay");
    fd_sbuf_addc(&sb, 'd');
    is_int((int)fd_sbuf_len(&sb), 3, "pool: the failure is sticky");

#if FD_DEBUG
    {
        /* a writer that goes past its reservation is stopped, not trusted */
        pid_t pid = fork();
        int st = 0;
        if (pid == 0) {
            char *w;
            fd_sbuf_init_fixed(&sb, big, sizeof(big));
            w = fd_sbuf_reserve(&sb, 4);
            fd_sbuf_commit(&sb, w + 5);
            _exit(0);
        }
        waitpid(pid, &st, 0);
        ok(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
           "debug: a commit past the reservation aborts");
    }
#endif
    fd_pool_destroy(p);
    return done_testing();
}
