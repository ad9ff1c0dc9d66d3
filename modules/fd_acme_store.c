/*
 * The ACME storage interface (fd_acme.h) and its local implementation:
 * files under state_path. The directory is 0700 and every file 0600,
 * owned by the master's user; a file is written to a temporary name,
 * synced and renamed, so a reader (the master at a reload, another fastd
 * sharing the directory) sees the old one whole or the new one whole.
 * lock() is flock() on KEY.lock: held by one process at a time, let go
 * if that process dies. The store shared across machines
 * (fd_acme_store_redis.c) is the same five calls over these files.
 */
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "fd_acme.h"

#define STORE_FILE_MAX (1 << 20)

static int key_ok(const char *key)
{
    /* one name in the directory: no '/', no leading '.' */
    return key[0] != '\0' && key[0] != '.' && strchr(key, '/') == NULL &&
           strlen(key) < 256;
}

static int files_get(fd_acme_store_t *st, const char *key, char **data,
                     size_t *len, time_t *mtime)
{
    char path[4400];
    struct stat sb;
    char *buf;
    ssize_t n;
    int fd;

    *data = NULL;
    if (!key_ok(key))
        return FD_ERROR;
    snprintf(path, sizeof(path), "%s/%s", st->dir, key);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? FD_DECLINED : FD_ERROR;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
        sb.st_size > STORE_FILE_MAX ||
        (buf = malloc((size_t)sb.st_size + 1)) == NULL) {
        close(fd);
        return FD_ERROR;
    }
    n = read(fd, buf, (size_t)sb.st_size);
    close(fd);
    if (n != sb.st_size) {
        free(buf);
        return FD_ERROR;
    }
    buf[n] = '\0';
    *data = buf;
    *len = (size_t)n;
    if (mtime)
        *mtime = sb.st_mtime;
    return FD_OK;
}

static int files_mtime(fd_acme_store_t *st, const char *key, time_t *mtime)
{
    char path[4400];
    struct stat sb;

    if (!key_ok(key))
        return FD_ERROR;
    snprintf(path, sizeof(path), "%s/%s", st->dir, key);
    if (stat(path, &sb) < 0)
        return errno == ENOENT ? FD_DECLINED : FD_ERROR;
    *mtime = sb.st_mtime;
    return FD_OK;
}

static int files_put(fd_acme_store_t *st, const char *key, const char *data,
                     size_t len)
{
    char path[4400], tmp[4500];
    ssize_t n;
    int fd;

    if (!key_ok(key)) {
        errno = EINVAL;
        return FD_ERROR;
    }
    snprintf(path, sizeof(path), "%s/%s", st->dir, key);
    snprintf(tmp, sizeof(tmp), "%s/.%s.%d", st->dir, key, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
              0600);
    if (fd < 0)
        return FD_ERROR;
    n = write(fd, data, len);
    if (n != (ssize_t)len || fsync(fd) < 0) {
        int e = n < 0 ? errno : EIO;
        close(fd);
        unlink(tmp);
        errno = e;
        return FD_ERROR;
    }
    close(fd);
    if (rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return FD_ERROR;
    }
    return FD_OK;
}

static int files_del(fd_acme_store_t *st, const char *key)
{
    char path[4400];

    if (!key_ok(key))
        return FD_ERROR;
    snprintf(path, sizeof(path), "%s/%s", st->dir, key);
    return unlink(path) == 0 || errno == ENOENT ? FD_OK : FD_ERROR;
}

static int files_lock(fd_acme_store_t *st, const char *key)
{
    char path[4400];
    int fd;

    if (!key_ok(key))
        return -1;
    snprintf(path, sizeof(path), "%s/%s.lock", st->dir, key);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX) < 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

static void files_unlock(fd_acme_store_t *st, int handle)
{
    (void)st;
    if (handle >= 0)
        close(handle); /* the lock goes with the descriptor */
}

int fd_acme_store_files(fd_acme_store_t *st, const char *dir, int create)
{
    struct stat sb;

    if (strlen(dir) >= sizeof(st->dir)) {
        errno = ENAMETOOLONG;
        return FD_ERROR;
    }
    snprintf(st->dir, sizeof(st->dir), "%s", dir);
    st->redis = NULL;
    st->local = st;
    st->share = NULL;
    st->unshare = NULL;
    st->mtime = files_mtime;
    st->get = files_get;
    st->put = files_put;
    st->del = files_del;
    st->lock = files_lock;
    st->unlock = files_unlock;
    if (!create)
        return FD_OK; /* reads find nothing until it exists */
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return FD_ERROR;
    if (stat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return FD_ERROR;
    }
    return FD_OK;
}
