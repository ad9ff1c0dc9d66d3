/*
 * handler = plaintext: TechEmpower's plaintext test. The body is a static
 * string (a cached body buffer is allowed); the response header is built
 * per request by the engine with the cached Date. Written on the public
 * API (core/api/fastd.h) alone: built in, or as objs/fd_plaintext.so with
 * ./configure --with-plaintext=dynamic, the same file. Nothing is copied
 * (fd_resp_*_static), so it costs what a handler on the engine's own
 * structures does.
 */
#include "fastd.h"

/* handler = NAME: the bench builds the same file as a loaded twin beside
 * the built-in one (conf/profiles/api.bench), under another name */
#ifndef FD_PLAINTEXT_NAME
#define FD_PLAINTEXT_NAME "plaintext"
#endif

static int plaintext_handler(fd_request_t *r)
{
    static const char body[] = "Hello, World!";

    fd_resp_status(r, 200);
    fd_resp_content_type_static(r, (fd_str_t){10, "text/plain"});
    return fd_resp_body_static(r, body, sizeof(body) - 1) == FD_OK ? FD_OK
                                                                   : 500;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = FD_PLAINTEXT_NAME,
    .handler = plaintext_handler,
    .flags = FD_API_THREAD_SAFE,
    .methods = FD_API_GET | FD_API_HEAD | FD_API_POST, /* a body sink */
};
