/*
 * handler = delay: answers 200 text/plain "delayed NNms\n" after sleeping
 * `delay` on an offload pool thread. A stand-in for blocking work (a slow
 * disk, a database) in queue and pool tests and demos: it always goes
 * through the pool, whatever http.inline_completions says, and never blocks
 * the loop. Written on the public API (core/api/fastd.h) alone: the pool
 * through fd_api_offload().
 */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "fastd.h"

typedef struct {
    uint64_t delay;
} delay_conf_t;

static const fd_api_key_t delay_keys[] = {
    {.name = "delay", .type = FD_API_MSEC,
     .offset = offsetof(delay_conf_t, delay), .def = "50ms",
     .doc = "handler = delay: how long each request sleeps in the offload "
            "pool"},
    {.name = NULL}};

/* on a pool thread */
static void delay_sleep(fd_request_t *r)
{
    const delay_conf_t *dc = fd_req_conf(r);
    struct timespec ts = {.tv_sec = (time_t)(dc->delay / 1000),
                          .tv_nsec = (long)(dc->delay % 1000) * 1000000};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        /* the rest of it */
    }
}

static int delay_respond(fd_request_t *r)
{
    const delay_conf_t *dc = fd_req_conf(r);
    char body[40];
    int n;

    n = snprintf(body, sizeof(body), "delayed %llums\n",
                 (unsigned long long)dc->delay);
    fd_resp_status(r, 200);
    fd_resp_content_type_static(r, (fd_str_t){10, "text/plain"});
    return fd_resp_body(r, body, (size_t)n) == FD_OK ? FD_OK : 500;
}

/* back on the loop */
static void delay_done(fd_request_t *r)
{
    fd_api_finish(r, delay_respond(r));
}

static int delay_handler(fd_request_t *r)
{
    if (fd_api_offload(r, delay_sleep, delay_done) != FD_OK)
        return 503; /* no pool thread could be had */
    return FD_AGAIN;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "delay",
    .keys = delay_keys,
    .conf_size = sizeof(delay_conf_t),
    .handler = delay_handler,
    .methods = FD_API_GET | FD_API_HEAD | FD_API_POST,
};
