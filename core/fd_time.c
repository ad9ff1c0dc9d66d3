#include <stdint.h>
#include <string.h>
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

/*
 * The civil date of a time, by arithmetic: days since the epoch, shifted
 * to years that start on 1 March (the leap day ends a year), split into
 * 400-year eras of 146097 days. gmtime_r() costs a lock and ~300
 * instructions, and this runs for every Last-Modified. Times outside
 * years 0..9999 are clamped (the header has four digits for the year).
 */
#define FD_TIME_MIN (-62167219200LL) /* 0000-01-01 00:00:00 */
#define FD_TIME_MAX 253402300799LL   /* 9999-12-31 23:59:59 */

static size_t format_time(char *buf, time_t t)
{
    int64_t s = fd_min(fd_max((int64_t)t, FD_TIME_MIN), FD_TIME_MAX);
    int64_t days = s >= 0 ? s / 86400 : (s - 86399) / 86400;
    int64_t secs = s - days * 86400, z = days + 719468; /* from 0000-03-01 */
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);            /* 0..146096 */
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100); /* 0..365 */
    unsigned mp = (5 * doy + 2) / 153;                      /* 0: March */
    unsigned mday = doy - (153 * mp + 2) / 5 + 1;
    unsigned mon = mp < 10 ? mp + 2 : mp - 10;              /* 0: January */
    int year = (int)(era * 400 + yoe) + (mon < 2);
    unsigned wday = (unsigned)(((days + 4) % 7 + 7) % 7);  /* 1970: Thu */
    char *p = buf;

    memcpy(p, wdays[wday], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    p = two(p, (int)mday);
    *p++ = ' ';
    memcpy(p, months[mon], 3);
    p += 3;
    *p++ = ' ';
    p = two(p, year / 100);
    p = two(p, year % 100);
    *p++ = ' ';
    p = two(p, (int)(secs / 3600));
    *p++ = ':';
    p = two(p, (int)(secs / 60 % 60));
    *p++ = ':';
    p = two(p, (int)(secs % 60));
    memcpy(p, " GMT", 4);
    p += 4;
    *p = '\0';
    return (size_t)(p - buf);
}

size_t fd_http_time(char *buf, time_t t)
{
    /* the last one this thread formatted: a hot file's Last-Modified */
    static __thread time_t last_t;
    static __thread char last[sizeof("Mon, 28 Sep 1970 06:00:00 GMT")];

    if (t != last_t || last[0] == '\0') {
        format_time(last, t);
        last_t = t;
    }
    memcpy(buf, last, sizeof(last));
    return sizeof(last) - 1;
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
