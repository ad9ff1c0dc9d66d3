/* Unit tests: the error log's line format and its escaping of control
 * bytes (request data quoted in a message must not start a line). */
#include <fcntl.h>

#include "fd_core.h"
#include "tap.h"

int main(void)
{
    char path[] = "/tmp/fastd-test-log-XXXXXX", buf[8192];
    fd_log_t log = {.fd = -1, .level = FD_LOG_INFO, .path = NULL};
    int fd = mkstemp(path);
    ssize_t n;
    char *nl;

    ok(fd >= 0, "a temporary log file");
    log.fd = fd;
    fd_log_write(&log, FD_LOG_ERR, 0, "open(\"%s\") failed",
                 "/a\r\n2026/11/30 00:00:00 [emerg] forged\x1b[31m\x7f");
    fd_log_write(&log, FD_LOG_WARN, 2, "plain %d", 42);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    ok(n > 0, "lines written");
    buf[n > 0 ? n : 0] = '\0';
    nl = strchr(buf, '\n');
    ok(nl && strchr(nl + 1, '\n') && !strchr(strchr(nl + 1, '\n') + 1, '\n'),
       "two messages, two lines");
    ok(strstr(buf, "open(\"/a\\x0D\\x0A2026/11/30 00:00:00 [emerg] forged"
                   "\\x1B[31m\\x7F\") failed\n") != NULL,
       "CR, LF, ESC and DEL are written as \\xHH");
    ok(strstr(buf, " [error] ") && strstr(buf, " [warn] "), "level names");
    ok(strstr(buf, "plain 42 (2: No such file or directory)\n") != NULL,
       "errno text follows the message");
    {
        /* a message longer than the buffer is cut, still one line */
        char big[4000];
        memset(big, '\n', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
            return 1;
        fd_log_write(&log, FD_LOG_ERR, 0, "%s", big);
        n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
        ok(n > 0 && strchr(buf, '\n') == buf + n - 1,
           "a long message of LFs: one escaped line, cut (%zd bytes)", n);
    }
    close(fd);
    unlink(path);
    return done_testing();
}
