/*
 * Process titles, as nginx sets them: "fastd: master process ARGS",
 * "fastd: worker process", "fastd: worker process is shutting down", so
 * ps and top tell the processes (and an old generation) apart.
 *
 * Linux shows /proc/PID/cmdline, which is the memory argv points into, and
 * environ follows it. fd_proctitle_init() moves every argv string and the
 * environment elsewhere, so the whole area can hold the title; it runs
 * first in main(), before anything keeps a pointer into argv.
 */
#include "fd_core.h"
#include "fd_proctitle.h"

extern char **environ;

static char *area, *area_end;
static char args[512];         /* the command line, for the master's title */

int fd_proctitle_init(int argc, char **argv)
{
    char *start, *end, **env;
    size_t n, len = 0, k;
    int i;

    if (argc < 1 || argv[0] == NULL)
        return FD_OK;
    start = end = argv[0];
    for (i = 0; i < argc && argv[i] == end; i++)
        end = argv[i] + strlen(argv[i]) + 1;
    for (n = 0; environ[n]; n++)
        if (environ[n] == end)
            end = environ[n] + strlen(environ[n]) + 1;
    env = malloc((n + 1) * sizeof(char *));
    if (env == NULL)
        return FD_ERROR;
    for (k = 0; k < n; k++)
        if ((env[k] = strdup(environ[k])) == NULL)
            return FD_ERROR;
    env[n] = NULL;
    environ = env;
    for (i = 0; i < argc; i++) {
        k = strlen(argv[i]);
        if (len + k + 2 < sizeof(args)) {
            if (len)
                args[len++] = ' ';
            memcpy(args + len, argv[i], k);
            len += k;
        }
        if ((argv[i] = strdup(argv[i])) == NULL)
            return FD_ERROR;
    }
    args[len] = '\0';
    area = start;
    area_end = end;
    return FD_OK;
}

void fd_proctitle_set(const char *what)
{
    size_t cap, n;

    if (area == NULL)
        return;
    cap = (size_t)(area_end - area);
    n = (size_t)snprintf(area, cap, "fastd: %s%s%s", what,
                         strcmp(what, "master process") ? "" : " ",
                         strcmp(what, "master process") ? "" : args);
    if (n < cap) /* ps reads up to the end: no old bytes after the title */
        memset(area + n, 0, cap - n);
}
