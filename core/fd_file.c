/*
 * Files and directories the configuration names: what the master (or a
 * worker, for a cache removed while it runs) makes for them.
 */
#include <sys/stat.h>

#include "fd_core.h"

/* See fd_core.h. */
int fd_mkdirs(char *p, size_t from, mode_t mode, long *made)
{
    long first = -1;
    int rc;

    for (size_t i = from; p[i]; i++) {
        if (p[i] != '/' || i == 0)
            continue;
        p[i] = '\0';
        rc = mkdir(p, mode);
        p[i] = '/';
        if (rc == 0 && first < 0)
            first = (long)i;
        if (rc == -1 && errno != EEXIST)
            return FD_ERROR;
    }
    rc = mkdir(p, mode);
    if (rc == 0 && first < 0)
        first = (long)strlen(p);
    if (made)
        *made = first;
    if (rc == -1 && errno != EEXIST)
        return FD_ERROR;
    return FD_OK;
}
