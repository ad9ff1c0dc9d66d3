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

static int parse_digits(const char **pp, const char *e, int n, int *v)
{
    const char *p = *pp;
    int x = 0;

    if (e - p < n)
        return -1;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        x = x * 10 + (p[i] - '0');
    }
    *pp = p + n;
    *v = x;
    return 0;
}

static int parse_month(const char **pp, const char *e)
{
    static const char mnames[] = "janfebmaraprmayjunjulaugsepoctnovdec";
    const char *p = *pp;

    if (e - p < 3)
        return -1;
    for (int m = 0; m < 12; m++) {
        if (fd_tolower(p[0]) == mnames[m * 3] &&
            fd_tolower(p[1]) == mnames[m * 3 + 1] &&
            fd_tolower(p[2]) == mnames[m * 3 + 2]) {
            *pp = p + 3;
            return m + 1;
        }
    }
    return -1;
}

static int parse_hms(const char **pp, const char *e, int *h, int *mi, int *s)
{
    if (parse_digits(pp, e, 2, h) || *pp >= e || *(*pp)++ != ':' ||
        parse_digits(pp, e, 2, mi) || *pp >= e || *(*pp)++ != ':' ||
        parse_digits(pp, e, 2, s))
        return -1;
    return 0;
}

static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* HTTP dates (RFC 9110 5.6.7): IMF-fixdate, RFC 850 and asctime; moved
 * here from the static module, which the proxy cache shares it with. */
time_t fd_http_parse_time(const char *p, size_t len)
{
    static const uint8_t mdays[] = {31, 29, 31, 30, 31, 30,
                                    31, 31, 30, 31, 30, 31};
    const char *e = p + len;
    int day, mon, year, h, mi, s;

    while (p < e && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
        p++;
    if (p >= e)
        return -1;

    if (*p == ',') {
        char sep;

        /* "Sun, 06 Nov 1994 08:49:37 GMT" or "Sunday, 06-Nov-94 ..." */
        if (++p >= e || *p++ != ' ' || parse_digits(&p, e, 2, &day) ||
            p >= e)
            return -1;
        sep = *p++;
        if ((sep != ' ' && sep != '-') || (mon = parse_month(&p, e)) < 0 ||
            p >= e || *p++ != sep)
            return -1;
        if (sep == ' ') {
            if (parse_digits(&p, e, 4, &year))
                return -1;
        } else {
            if (parse_digits(&p, e, 2, &year))
                return -1;
            year += year < 70 ? 2000 : 1900;
        }
        if (p >= e || *p++ != ' ' || parse_hms(&p, e, &h, &mi, &s) ||
            e - p < 4 || memcmp(p, " GMT", 4) != 0)
            return -1;
        p += 4;
    } else if (*p == ' ') {
        /* "Sun Nov  6 08:49:37 1994" */
        p++;
        if ((mon = parse_month(&p, e)) < 0 || p >= e || *p++ != ' ' ||
            p >= e)
            return -1;
        if (*p == ' ') {
            p++;
            if (parse_digits(&p, e, 1, &day))
                return -1;
        } else if (parse_digits(&p, e, 2, &day)) {
            return -1;
        }
        if (p >= e || *p++ != ' ' || parse_hms(&p, e, &h, &mi, &s) ||
            p >= e || *p++ != ' ' || parse_digits(&p, e, 4, &year))
            return -1;
    } else {
        return -1;
    }

    /* old browsers append "; length=N" */
    if (p < e && *p != ';')
        return -1;
    if (day < 1 || day > mdays[mon - 1] || h > 23 || mi > 59 || s > 60 ||
        year < 1970)
        return -1;
    if (mon == 2 && day == 29 &&
        !((year % 4 == 0 && year % 100 != 0) || year % 400 == 0))
        return -1;

    return (time_t)(days_from_civil(year, mon, day) * 86400 + h * 3600 +
                    mi * 60 + s);
}
