/*
 * API 1.9, for tests/modules_api19.t: what a cache of a module's needs.
 * A [spool NAME] section names a directory its workers write in
 * (fd_api_conf_worker_dir: made, and given to [main] user); a key keeps
 * its old name to say what replaced it (FD_API_RENAMED); a location knows
 * what it matches (fd_api_conf_location).
 *
 *   [spool up]
 *   path = /var/spool/fastd/up
 *
 *   [location /put/]
 *   handler = spool
 *   spool = up          ; spool_section = up: refused, "use spool"
 *
 *   [location ~ ^/re(x)$]
 *   handler = where     ; answers "4 ^/re(x)$": its kind and match
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <fastd.h>

typedef struct {
    const char *path;
} spool_t;

typedef struct {
    const char *spool;
    const char *path;    /* its [spool]'s */
    fd_str_t match;
    int kind;
} spool_conf_t;

static const fd_api_key_t spool_keys[] = {
    {.name = "spool", .type = FD_API_STRING,
     .offset = offsetof(spool_conf_t, spool),
     .doc = "handler = spool: the [spool NAME] it writes in"},
    {.name = "spool_section", .type = FD_API_RENAMED, .def = "spool",
     .doc = "one name for one thing"},
    {.name = NULL}};

static const fd_api_key_t section_keys[] = {
    {.name = "path", .type = FD_API_STRING, .offset = offsetof(spool_t, path),
     .doc = "the directory the workers write in"},
    {.name = NULL}};

static int section_init(const char *name, void *conf, unsigned index)
{
    spool_t *s = conf;

    (void)index;
    if (s->path == NULL) {
        fd_api_conf_error("[spool %s] needs \"path\"", name);
        return FD_ERROR;
    }
    return fd_api_conf_worker_dir(s->path);
}

static const fd_api_section_t spool_section = {
    .type = "spool",
    .keys = section_keys,
    .conf_size = sizeof(spool_t),
    .name_max = 16,
    .init = section_init,
};

static int spool_init_conf(void *conf)
{
    spool_conf_t *c = conf;
    const spool_t *s;

    if (fd_api_conf_location(&c->match, &c->kind) != FD_OK) {
        fd_api_conf_error("fd_api_conf_location declined in init_conf");
        return FD_ERROR;
    }
    if (c->spool == NULL)
        return FD_OK;
    if ((s = fd_api_section("spool", c->spool)) == NULL) {
        fd_api_conf_error("no [spool %s]", c->spool);
        return FD_ERROR;
    }
    c->path = s->path;
    return FD_OK;
}

/* the worker writes path/by-worker: 201, or 500 and why */
static int spool_handler(fd_request_t *r)
{
    spool_conf_t *c = fd_req_conf(r);
    char file[4096], out[128];
    int fd, n;

    if (c->path == NULL)
        return 404;
    snprintf(file, sizeof(file), "%s/by-worker", c->path);
    fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    n = snprintf(out, sizeof(out), "%s\n",
                 fd >= 0 ? "written" : strerror(errno));
    fd_resp_status(r, fd >= 0 ? 201 : 500);
    fd_resp_content_type(r, (fd_str_t){10, "text/plain"});
    return fd_resp_body(r, out, (size_t)n);
}

/* "KIND MATCH\n": the location, as init_conf learnt it */
static int where_handler(fd_request_t *r)
{
    spool_conf_t *c = fd_req_conf(r);
    char out[256];
    int n = snprintf(out, sizeof(out), "%d %.*s\n", c->kind,
                     (int)c->match.len, c->match.data);

    fd_resp_status(r, 200);
    fd_resp_content_type(r, (fd_str_t){10, "text/plain"});
    return fd_resp_body(r, out, (size_t)n);
}

static const fd_api_handler_t spool_handlers[] = {
    {.name = "where", .handler = where_handler},
    {.name = NULL}};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "spool",
    .keys = spool_keys,
    .conf_size = sizeof(spool_conf_t),
    .init_conf = spool_init_conf,
    .handler = spool_handler,
    .handlers = spool_handlers,
    .section = &spool_section,
};
