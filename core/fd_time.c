#include <time.h>

#include "fd_core.h"
#include "fd_event.h"

volatile fd_msec_t fd_current_msec;
volatile time_t fd_current_sec;
char fd_http_date[sizeof("Mon, 28 Sep 1970 06:00:00 GMT")];
char fd_log_time[sizeof("28/Sep/1970:12:00:00 +0000")];

static const char *wdays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char *months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static char *two(char *p, int v)
{
    *p++ = (char)('0' + v / 10);
    *p++ = (char)('0' + v % 10);
    return p;
}

size_t fd_http_time(char *buf, time_t t)
{
    struct tm tm;
    char *p = buf;

    gmtime_r(&t, &tm);
    memcpy(p, wdays[tm.tm_wday], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    p = two(p, tm.tm_mday);
    *p++ = ' ';
    memcpy(p, months[tm.tm_mon], 3);
    p += 3;
    *p++ = ' ';
    p = two(p, (tm.tm_year + 1900) / 100);
    p = two(p, (tm.tm_year + 1900) % 100);
    *p++ = ' ';
    p = two(p, tm.tm_hour);
    *p++ = ':';
    p = two(p, tm.tm_min);
    *p++ = ':';
    p = two(p, tm.tm_sec);
    memcpy(p, " GMT", 4);
    p += 4;
    *p = '\0';
    return (size_t)(p - buf);
}

/*
 * Called once per loop turn: one clock_gettime (vDSO, no syscall); the
 * Date header and the log time are formatted only when the second changes.
 */
void fd_time_update(void)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    fd_current_msec = (fd_msec_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    if (ts.tv_sec == fd_current_sec)
        return;
    fd_current_sec = ts.tv_sec;
    fd_http_time(fd_http_date, ts.tv_sec);
    localtime_r(&ts.tv_sec, &tm);
    strftime(fd_log_time, sizeof(fd_log_time), "%d/%b/%Y:%H:%M:%S %z", &tm);
}
