/*
 * handler = plaintext: TechEmpower's plaintext test. The body is a static
 * string (a cached body buffer is allowed); the response header is built
 * per request by the engine with the cached Date.
 */
#include "fd_core.h"
#include "fd_http.h"

static int plaintext_handler(fd_request_t *r)
{
    static const char body[] = "Hello, World!";

    r->status = 200;
    r->content_type = fd_string("text/plain");
    return fd_http_body_set(r, body, sizeof(body) - 1) == FD_OK ? FD_OK
                                                                : 500;
}

fd_module_t fd_plaintext_module = {
    .name = "plaintext",
    .handler = plaintext_handler,
    .flags = FD_MODULE_THREAD_SAFE,
    .methods = FD_METHODS_GET | FD_METHOD(FD_HTTP_POST), /* a body sink */
};
