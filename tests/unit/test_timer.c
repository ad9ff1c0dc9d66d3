/* Unit tests: the timer heap and the time caches. */
#include "fd_core.h"
#include "fd_event.h"
#include "tap.h"

#include <time.h>

static int fired[64], nfired;
static fd_timer_t *order[64];

static void on_timer(fd_timer_t *t)
{
    order[nfired] = t;
    fired[nfired++] = (int)t->when;
}

int main(void)
{
    fd_timer_t t[64];
    unsigned i;
    int prev, sorted = 1;
    char buf[40];

    fd_timer_init();
    fd_current_msec = 1000;
    for (i = 0; i < 64; i++) {
        t[i].idx = 0;
        t[i].handler = on_timer;
        fd_timer_add(&t[i], (i * 37) % 64 + 1);
    }
    ok(fd_timer_armed(&t[5]), "armed");
    fd_timer_del(&t[5]);
    ok(!fd_timer_armed(&t[5]), "deleted");
    fd_timer_add(&t[6], 500); /* move later */
    fd_timer_add(&t[7], 0);   /* move earlier */
    is_int(fd_timer_expire(), 1, "one due now; the next is 1ms away");
    is_int(nfired, 1, "the timer moved earlier fired first");
    fd_current_msec = 1100;
    fd_timer_expire();
    is_int(nfired, 62, "all but the deleted and the moved-later fired");
    for (i = 1, prev = fired[0]; i < (unsigned)nfired; i++) {
        if (fired[i] < prev)
            sorted = 0;
        prev = fired[i];
    }
    ok(sorted, "timers fire in expiry order");
    is_int(fd_timer_expire(), 400, "next timer in 400ms");
    fd_current_msec = 1500;
    fd_timer_expire();
    is_int(nfired, 63, "the moved-later timer fired at its new time");
    is_int(fd_timer_expire(), -1, "heap empty");

    /* deadlines are 32-bit serial numbers: across the wrap of the low 32
     * bits of fd_current_msec the order still holds */
    nfired = 0;
    fd_current_msec = 0x1fffffff0ULL; /* 16 ms before a wrap */
    for (i = 0; i < 8; i++)
        fd_timer_add(&t[i], 40 - i * 5); /* 40, 35, .. 5: half past the wrap */
    is_int(fd_timer_expire(), 5, "before the wrap: the nearest is 5ms away");
    fd_current_msec += 20;
    fd_timer_expire();
    is_int(nfired, 4, "the four due by +20ms fired (two of them past the wrap)");
    ok(nfired == 4 && order[0] == &t[7] && order[3] == &t[4],
       "... in expiry order");
    is_int(fd_timer_expire(), 5, "the next is 5ms away, past the wrap");
    fd_current_msec += 100;
    fd_timer_expire();
    is_int(nfired, 8, "the rest fired");
    fd_timer_add(&t[0], (fd_msec_t)1 << 40);
    is_int(fd_timer_expire(), 60000, "a huge timeout is capped, not wrapped into the past");
    fd_timer_del(&t[0]);

    is_int(fd_http_time(buf, 0), 29, "RFC 1123 length");
    is_str(buf, "Thu, 01 Jan 1970 00:00:00 GMT", "epoch");
    fd_http_time(buf, 1796030128);
    is_str(buf, "Mon, 30 Nov 2026 09:15:28 GMT", "a known date");
    {
        /* against gmtime_r + strftime, 1900..2200, every 7 days and an
         * hour and 7 s (every weekday, hour and minute come round) */
        long long at, bad = 0, n = 0;
        char want[64];
        struct tm tm;
        for (at = -2208988800LL; at < 7258118400LL; at += 608407, n++) {
            time_t tt = (time_t)at;
            gmtime_r(&tt, &tm);
            strftime(want, sizeof(want), "%a, %d %b %Y %H:%M:%S GMT", &tm);
            fd_http_time(buf, tt);
            if (strcmp(buf, want) != 0 && bad++ == 0)
                diag("%lld: got %s, want %s", at, buf, want);
        }
        is_int(bad, 0, "the same as gmtime_r at %lld times", n);
    }
    fd_http_time(buf, 951782400);
    is_str(buf, "Tue, 29 Feb 2000 00:00:00 GMT", "a leap day (400-year rule)");
    fd_http_time(buf, 4107542399LL);
    is_str(buf, "Sun, 28 Feb 2100 23:59:59 GMT", "2100 has no 29 February");
    fd_http_time(buf, 4107542400LL);
    is_str(buf, "Mon, 01 Mar 2100 00:00:00 GMT", "... the next day is 1 March");
    fd_http_time(buf, -1);
    is_str(buf, "Wed, 31 Dec 1969 23:59:59 GMT", "one second before the epoch");
    fd_http_time(buf, (time_t)1 << 62);
    is_str(buf, "Fri, 31 Dec 9999 23:59:59 GMT", "far future: clamped to 9999");
    fd_http_time(buf, -((time_t)1 << 62));
    is_str(buf, "Sat, 01 Jan 0000 00:00:00 GMT", "far past: clamped to year 0");
    fd_http_time(buf, 0); /* the last value is kept: a repeat, then a new one */
    fd_http_time(buf, 0);
    is_str(buf, "Thu, 01 Jan 1970 00:00:00 GMT", "the same time twice");
    fd_http_time(buf, 1796030128);
    is_str(buf, "Mon, 30 Nov 2026 09:15:28 GMT", "then another");
    fd_time_update();
    ok(fd_http_date[0] && strlen(fd_http_date) == 29, "Date cache filled");
    return done_testing();
}
