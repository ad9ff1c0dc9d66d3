/*
 * handler = json: TechEmpower's JSON test. An object is created and
 * serialized with jansson for every request; nothing is cached.
 */
#include <jansson.h>

#include "fd_core.h"
#include "fd_http.h"

static int json_handler(fd_request_t *r)
{
    json_t *obj = json_object();
    char tmp[256], *out;
    size_t n;

    if (obj == NULL)
        return 500;
    json_object_set_new_nocheck(obj, "message",
                                json_string_nocheck("Hello, World!"));
    /* one serialization into the stack; a larger object would take a
     * second pass into the pool */
    n = json_dumpb(obj, tmp, sizeof(tmp), JSON_COMPACT);
    out = n ? fd_pnalloc(r->pool, n) : NULL;
    if (out && n <= sizeof(tmp))
        memcpy(out, tmp, n);
    else if (out && json_dumpb(obj, out, n, JSON_COMPACT) != n)
        out = NULL;
    json_decref(obj);
    if (out == NULL)
        return 500;
    r->status = 200;
    r->content_type = fd_string("application/json");
    return fd_http_body_set(r, out, n) == FD_OK ? FD_OK : 500;
}

fd_module_t fd_json_module = {
    .name = "json",
    .handler = json_handler,
    .flags = FD_MODULE_THREAD_SAFE,
    .methods = FD_METHODS_GET | FD_METHOD(FD_HTTP_POST), /* a body sink */
};
