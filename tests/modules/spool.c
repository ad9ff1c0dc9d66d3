/*
 * API 1.9, for tests/modules_api19.t: what a cache of a module's needs
 * (and 1.10's two additions: a key it parses with a default, the wall
 * clock).
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
 *
 *   [location /stored]
 *   handler = stored    ; a stored response answered again
 *   spool = up
 *
 * handler = stored keeps path/stored, a header of its own then the body
 * "0123456789", and answers its body with fd_resp_fd_send() (ETag "v1",
 * Last-Modified 784111777: the client's conditionals and one range), or
 * ?404 as a 404's body (fd_resp_fd_body); ?reset sets a field, then undoes
 * it (fd_resp_reset) for a 412 of its own. handler = fields sets three
 * fields and answers them as fd_resp_field_next() walks them, then what
 * fd_api_http_time() makes of its X-Date request fields, and the
 * method's bit (fd_api_http_req_t.method).
 *
 * $spool_handled is "yes" where the location's handler is the module's
 * (spool, where, stored, fields, early), "no" elsewhere
 * (fd_req_handler_is); handler = early answers "early\n" at once
 * (fd_resp_send_early) and ends the request 3 s later (fd_api_finish from
 * a timer).
 *
 * 1.10: spool_mode = WORD, a key the module parses (FD_API_CUSTOM) whose
 * def "copy" reaches set() first (own 0); handler = mode answers "MODE
 * SETS NOW", SETS how many lines set() saw for the location and NOW
 * fd_api_unix_sec().
 */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <fastd_upstream.h>

typedef struct {
    const char *path;
} spool_t;

typedef struct {
    const char *spool;
    const char *path;    /* its [spool]'s */
    fd_str_t match;
    int kind;
    const char *mode;    /* spool_mode's last value */
    int sets;            /* and how many set() calls it had */
} spool_conf_t;

static const fd_api_key_t spool_keys[] = {
    {.name = "spool", .type = FD_API_STRING,
     .offset = offsetof(spool_conf_t, spool),
     .doc = "handler = spool: the [spool NAME] it writes in"},
    {.name = "spool_section", .type = FD_API_RENAMED, .def = "spool",
     .doc = "one name for one thing"},
    {.name = "spool_mode", .type = FD_API_CUSTOM, .def = "copy",
     .doc = "a word set() takes, \"copy\" when not given"},
    {.name = NULL}};

/* spool_mode = WORD (its def first, with own 0) */
static int spool_set(void *conf, const char *key, const char *value, int own)
{
    spool_conf_t *c = conf;
    size_t n = strlen(value);
    char *v = fd_api_conf_alloc(n + 1);

    (void)key;
    if (v == NULL || (c->sets == 0 && own) || strchr(value, ' ')) {
        fd_api_conf_error("spool_mode: one word, after its default");
        return FD_ERROR;
    }
    memcpy(v, value, n + 1);
    c->mode = v;
    c->sets++;
    return FD_OK;
}

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

/* 1.10: spool_mode as set() left it, and the wall clock */
static int mode_handler(fd_request_t *r)
{
    spool_conf_t *c = fd_req_conf(r);
    char out[256];
    int n = snprintf(out, sizeof(out), "%s %d %lld\n",
                     c->mode ? c->mode : "-", c->sets,
                     (long long)fd_api_unix_sec());

    fd_resp_status(r, 200);
    fd_resp_content_type(r, (fd_str_t){10, "text/plain"});
    return fd_resp_body(r, out, (size_t)n);
}

static void close_fd(void *data)
{
    close((int)(intptr_t)data);
}

#define STORED_HEAD "a header of the entry's own\n"
#define STORED_BODY "0123456789"

static int stored_handler(fd_request_t *r)
{
    spool_conf_t *c = fd_req_conf(r);
    fd_str_t q = fd_req_query(r);
    const size_t off = sizeof(STORED_HEAD) - 1, len = sizeof(STORED_BODY) - 1;
    char file[4096];
    int fd;

    if (c->path == NULL)
        return 404;
    snprintf(file, sizeof(file), "%s/stored", c->path);
    fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 ||
        write(fd, STORED_HEAD STORED_BODY, off + len) != (ssize_t)(off + len)) {
        if (fd >= 0)
            close(fd);
        return 500;
    }
    if (fd_req_cleanup(r, close_fd, (void *)(intptr_t)fd) != FD_OK) {
        close(fd);
        return 500;
    }
    fd_resp_content_type(r, (fd_str_t){10, "text/plain"});
    if (q.len == 3 && memcmp(q.data, "404", 3) == 0) {
        fd_resp_status(r, 404);
        return fd_resp_fd_body(r, fd, (int64_t)off, (int64_t)len);
    }
    if (q.len == 5 && memcmp(q.data, "reset", 5) == 0) {
        fd_resp_header(r, "X-Gone", (fd_str_t){3, "yes"});
        fd_resp_reset(r);
        return fd_resp_error(r, 412) == FD_OK ? FD_OK : 500;
    }
    fd_resp_validators(r, (fd_str_t){4, "\"v1\""}, 784111777);
    return fd_resp_fd_send(r, fd, (int64_t)off, (int64_t)len, 1);
}

/* the fields set, as the walk finds them, then X-Date's times */
static int fields_handler(fd_request_t *r)
{
    const void *it = NULL;
    fd_str_t name, value, d;
    char out[1024];
    size_t n = 0;
    unsigned i;

    fd_api_http_req_t in;

    fd_req_http(r, &in, sizeof(in));
    fd_resp_header(r, "A", (fd_str_t){1, "1"});
    fd_resp_header(r, "B", (fd_str_t){1, "2"});
    fd_resp_header(r, "A", (fd_str_t){1, "3"});
    while (fd_resp_field_next(r, &it, &name, &value) && n < 512)
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%.*s: %.*s\n",
                              (int)name.len, name.data, (int)value.len,
                              value.data);
    for (i = 0; (d = fd_req_header_at(r, "X-Date", i)).data && n < 900; i++)
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%lld\n",
                              (long long)fd_api_http_time(d.data, d.len));
    n += (size_t)snprintf(out + n, sizeof(out) - n, "method %u\n",
                          in.method);
    {
        char m[16];
        int k = snprintf(m, sizeof(m), "%u", in.method);
        fd_resp_header(r, "X-Method", (fd_str_t){(size_t)k, m});
    }
    fd_resp_status(r, 200);
    fd_resp_content_type(r, (fd_str_t){10, "text/plain"});
    return fd_resp_body(r, out, n);
}

static void early_end(void *data)
{
    fd_api_finish(data, FD_OK);
}

static int early_handler(fd_request_t *r)
{
    fd_resp_status(r, 200);
    fd_resp_content_type(r, (fd_str_t){10, "text/plain"});
    if (fd_resp_body(r, "early\n", 6) != FD_OK)
        return 500;
    fd_resp_send_early(r);
    return fd_api_timer(3000, early_end, r) ? FD_AGAIN : FD_OK;
}

static fd_str_t v_handled(fd_request_t *r, char *tmp)
{
    (void)tmp;
    return fd_req_handler_is(r, FD_API_SELF) ? (fd_str_t){3, "yes"}
                                             : (fd_str_t){2, "no"};
}

static const fd_api_var_t spool_vars[] = {
    {.name = "spool_handled", .get = v_handled},
    {.name = NULL}};

static const fd_api_handler_t spool_handlers[] = {
    {.name = "where", .handler = where_handler},
    {.name = "stored", .handler = stored_handler},
    {.name = "fields", .handler = fields_handler, .methods = FD_API_ANY},
    {.name = "early", .handler = early_handler},
    {.name = "mode", .handler = mode_handler},
    {.name = NULL}};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "spool",
    .keys = spool_keys,
    .set = spool_set,
    .conf_size = sizeof(spool_conf_t),
    .init_conf = spool_init_conf,
    .handler = spool_handler,
    .handlers = spool_handlers,
    .section = &spool_section,
    .vars = spool_vars,
};
