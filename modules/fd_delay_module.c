/*
 * handler = delay: answers 200 text/plain "delayed NNms\n" after sleeping
 * `delay` on an offload pool thread. A stand-in for blocking work (a slow
 * disk, a database) in queue and pool tests and demos: it always goes
 * through the pool, whatever http.inline_completions says, and never blocks
 * the loop.
 */
#include <time.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"

typedef struct {
    fd_msec_t delay;
} delay_conf_t;

fd_module_t fd_delay_module;

static const fd_directive_t delay_directives[] = {
    {.name = "delay", .type = FD_CONF_MSEC,
     .offset = offsetof(delay_conf_t, delay), .def = "50ms",
     .doc = "handler = delay: how long each request sleeps in the offload "
            "pool"},
    FD_CONF_END};

static void delay_sleep(fd_request_t *r)
{
    delay_conf_t *dc = fd_loc_conf(r->loc, &fd_delay_module);
    struct timespec ts = {.tv_sec = (time_t)(dc->delay / 1000),
                          .tv_nsec = (long)(dc->delay % 1000) * 1000000};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        /* the rest of it */
    }
}

static int delay_respond(fd_request_t *r)
{
    delay_conf_t *dc = fd_loc_conf(r->loc, &fd_delay_module);
    char *body = fd_pnalloc(r->pool, 40);
    int n;

    if (body == NULL)
        return 500;
    n = snprintf(body, 40, "delayed %llums\n", (unsigned long long)dc->delay);
    r->status = 200;
    r->content_type = fd_string("text/plain");
    return fd_http_body_set(r, body, (size_t)n) == FD_OK ? FD_OK : 500;
}

static void delay_done(fd_request_t *r)
{
    fd_request_finish(r, delay_respond(r));
}

static int delay_handler(fd_request_t *r)
{
    if (fd_offload(r, delay_sleep, delay_done) != FD_OK)
        return 503; /* no pool thread could be had */
    return FD_AGAIN;
}

fd_module_t fd_delay_module = {
    .name = "delay",
    .directives = delay_directives,
    .conf_size = sizeof(delay_conf_t),
    .handler = delay_handler,
    .methods = FD_METHODS_GET | FD_METHOD(FD_HTTP_POST),
};
