#ifndef FD_LOG_H
#define FD_LOG_H

/* Error log levels, nginx's names and order. */
enum {
    FD_LOG_EMERG = 0,
    FD_LOG_ALERT,
    FD_LOG_CRIT,
    FD_LOG_ERR,
    FD_LOG_WARN,
    FD_LOG_NOTICE,
    FD_LOG_INFO,
    FD_LOG_DEBUG
};

struct fd_log_s {
    int fd;          /* -1: stderr */
    int level;       /* messages above it are dropped */
    const char *path; /* NULL: stderr */
    int echo;        /* a file log: warn and worse go to stderr too (the
                      * master's start, where a user waits for them) */
};

extern fd_log_t *fd_log; /* the process' error log */
extern uint64_t fd_log_conn_id; /* connection id printed with each line */

int fd_log_open(fd_log_t *log, const char *path, int level);
int fd_log_reopen(fd_log_t *log);
int fd_log_level_parse(const char *name);
void fd_log_write(fd_log_t *log, int level, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define fd_log_error(lvl, err, ...)                                          \
    do {                                                                     \
        if ((lvl) <= fd_log->level)                                          \
            fd_log_write(fd_log, lvl, err, __VA_ARGS__);                     \
    } while (0)

#define fd_log_debug(...) fd_log_error(FD_LOG_DEBUG, 0, __VA_ARGS__)

#endif
