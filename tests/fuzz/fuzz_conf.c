/*
 * libFuzzer harness: the configuration reader (fd_cycle_load: inih, the
 * typed keys, sections, profiles, includes, every module's keys).
 *
 * The input is written to DIR/conf/fuzz.conf in a private directory on
 * tmpfs (through a descriptor kept open: two system calls an input) and
 * loaded; a cycle that loads is freed again. It must never crash, hang or
 * leak (libFuzzer's leak check runs after every input), and a refusal must
 * come with an error message.
 *
 * The reader may touch the file system (include, error_page, mime_types,
 * [database] url = sqlite:) and resolve names (upstream servers): the harness keeps it
 * in its directory by interposing glob() and fopen(), resolves numeric
 * addresses only, and skips inputs that would create SQLite databases.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <netdb.h>
#include <sys/stat.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_module.h"

static char dir[] = "/dev/shm/fd-fuzz-conf-XXXXXX"; /* tmpfs: no disk I/O */
static char conf_path[sizeof(dir) + 32];
static int conf_fd = -1;

/* glob(): patterns outside the private directory match nothing */
int glob(const char *pattern, int flags, int (*errfunc)(const char *, int),
         glob_t *pglob)
{
    static int (*real)(const char *, int, int (*)(const char *, int),
                       glob_t *);

    if (real == NULL)
        real = (int (*)(const char *, int, int (*)(const char *, int),
                        glob_t *))dlsym(RTLD_NEXT, "glob");
    if (strncmp(pattern, dir, strlen(dir)) != 0 || strstr(pattern, "..")) {
        memset(pglob, 0, sizeof(*pglob));
        return GLOB_NOMATCH;
    }
    return real(pattern, flags, errfunc, pglob);
}

/* fopen(): regular files only (no /dev/zero, FIFOs or /proc to block on) */
FILE *fopen(const char *path, const char *mode)
{
    static FILE *(*real)(const char *, const char *);
    struct stat st;

    if (real == NULL)
        real = (FILE * (*)(const char *, const char *))dlsym(RTLD_NEXT,
                                                             "fopen");
    if ((strncmp(path, dir, strlen(dir)) != 0 &&
         (strncmp(path, "/proc", 5) == 0 || strncmp(path, "/sys", 4) == 0 ||
          strncmp(path, "/dev", 4) == 0)) ||
        (stat(path, &st) == 0 && !S_ISREG(st.st_mode))) {
        errno = EACCES;
        return NULL;
    }
    return real(path, mode);
}

/* getaddrinfo(): numeric addresses only, no DNS from a fuzzer */
int getaddrinfo(const char *node, const char *service,
                const struct addrinfo *hints, struct addrinfo **res)
{
    static int (*real)(const char *, const char *, const struct addrinfo *,
                       struct addrinfo **);
    struct addrinfo h = {0};

    if (real == NULL)
        real = (int (*)(const char *, const char *, const struct addrinfo *,
                        struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
    if (hints)
        h = *hints;
    h.ai_flags |= AI_NUMERICHOST | AI_NUMERICSERV;
    return real(node, service, &h, res);
}

static void put(const char *name, const char *text)
{
    char path[sizeof(dir) + 64];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "w");
    if (fp == NULL)
        abort();
    fputs(text, fp);
    fclose(fp);
}

static int remove_one(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* libFuzzer ends with exit(): leave nothing in /dev/shm */
static void cleanup(void)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
    char path[sizeof(dir) + 16];

    if (fd_modules_init() != FD_OK) /* as main() does */
        abort();

    if (mkdtemp(dir) == NULL)
        abort();
    atexit(cleanup);
    snprintf(path, sizeof(path), "%s/conf", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/html", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/conf/conf.d", dir);
    mkdir(path, 0755);
    put("html/404.html", "<h1>not here</h1>\n");
    put("conf/inc.conf", "[location /inc]\nhandler = plaintext\n");
    put("conf/conf.d/a.conf", "keepalive_timeout = 5s\n");
    put("conf/mime.types", "types {\n text/html html;\n text/plain txt;\n}\n");
    snprintf(conf_path, sizeof(conf_path), "%s/conf/fuzz.conf", dir);
    conf_fd = open(conf_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (conf_fd == -1)
        abort();
    fd_log->level = FD_LOG_EMERG; /* the fuzzer's output is its own */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    fd_cycle_t *cy;

    if (conf_path[0] == '\0')
        setup();
    /* SQLite files are created at load: not in a fuzzing loop */
    if (memmem(data, size, "sqlite", 6))
        return 0;
    if ((size && pwrite(conf_fd, data, size, 0) != (ssize_t)size) ||
        ftruncate(conf_fd, (off_t)size) == -1)
        abort();

    err[0] = '\0';
    cy = fd_cycle_load(conf_path, NULL, err, sizeof(err));
    if (cy == NULL) {
        /* a refusal says why */
        if (err[0] == '\0')
            abort();
    } else {
        fd_cycle_free(cy);
    }
    return 0;
}
