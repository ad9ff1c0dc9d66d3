#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>

#include "fd_core.h"

static fd_log_t stderr_log = {.fd = -1, .level = FD_LOG_NOTICE};
fd_log_t *fd_log = &stderr_log;
uint64_t fd_log_conn_id;

static const char *levels[] = {"emerg", "alert", "crit", "error",
                               "warn",  "notice", "info", "debug"};

int fd_log_level_parse(const char *name)
{
    unsigned i;

    for (i = 0; i < fd_nelems(levels); i++)
        if (strcmp(name, levels[i]) == 0)
            return (int)i;
    if (strcmp(name, "err") == 0)
        return FD_LOG_ERR;
    return -1;
}

int fd_log_open(fd_log_t *log, const char *path, int level)
{
    int fd = -1;

    if (path && strcmp(path, "stderr") != 0) {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            return FD_ERROR;
    }
    if (log->fd >= 0 && fd >= 0) {
        /* keep the descriptor number: children and dup2 users hold it */
        dup2(fd, log->fd);
        close(fd);
    } else {
        if (log->fd >= 0)
            close(log->fd);
        log->fd = fd;
    }
    log->level = level;
    free((char *)log->path);
    log->path = path ? strdup(path) : NULL;
    return FD_OK;
}

int fd_log_reopen(fd_log_t *log)
{
    int fd;

    if (log->path == NULL || log->fd < 0)
        return FD_OK;
    fd = open(log->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return FD_ERROR;
    dup2(fd, log->fd); /* keeps the number other code may hold */
    close(fd);
    return FD_OK;
}

/*
 * Copy msg into dst (size bytes, at least 5) with control bytes and DEL as
 * \xHH: a message may quote request data (a decoded path, a header), and
 * a CR or LF in it must not start a line of the client's choosing.
 */
static size_t log_escape(char *dst, size_t size, const char *msg, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0, i;

    for (i = 0; i < len && n + 4 < size; i++) {
        uint8_t c = (uint8_t)msg[i];
        if (c < 0x20 || c == 0x7f) {
            dst[n++] = '\\';
            dst[n++] = 'x';
            dst[n++] = hex[c >> 4];
            dst[n++] = hex[c & 0xf];
        } else {
            dst[n++] = (char)c;
        }
    }
    return n;
}

void fd_log_write(fd_log_t *log, int level, int err, const char *fmt, ...)
{
    char buf[2048], msg[1536];
    size_t n, text;
    int m;
    va_list ap;
    time_t now = time(NULL);
    struct tm tm;

    localtime_r(&now, &tm);
    n = strftime(buf, sizeof(buf), "%Y/%m/%d %H:%M:%S", &tm);
    m = snprintf(buf + n, sizeof(buf) - n, " [%s] %d#%ld: ", levels[level],
                 (int)getpid(), (long)syscall(SYS_gettid));
    n += (size_t)m;
    if (fd_log_conn_id) {
        m = snprintf(buf + n, sizeof(buf) - n, "*%llu ",
                     (unsigned long long)fd_log_conn_id);
        n += (size_t)m;
    }
    text = n;
    va_start(ap, fmt);
    m = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (m > 0)
        n += log_escape(buf + n, sizeof(buf) - 64 - n, msg,
                        fd_min((size_t)m, sizeof(msg) - 1));
    if (err) {
        m = snprintf(buf + n, sizeof(buf) - n, " (%d: %s)", err,
                     strerror(err));
        n += (size_t)m;
    }
    buf[n++] = '\n';
    if (write(log->fd >= 0 ? log->fd : STDERR_FILENO, buf, n) < 0) {
        /* nowhere left to report it */
    }
    if (log->echo && log->fd >= 0 && level <= FD_LOG_WARN) {
        char head[32];
        m = snprintf(head, sizeof(head), "fastd: [%s] ", levels[level]);
        if (write(STDERR_FILENO, head, (size_t)m) < 0 ||
            write(STDERR_FILENO, buf + text, n - text) < 0) {
            /* the error log has it */
        }
    }
}
