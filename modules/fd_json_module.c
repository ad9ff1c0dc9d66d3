/*
 * handler = json: TechEmpower's JSON test. An object is created and
 * serialized with jansson for every request; nothing is cached. Written
 * on the public API (core/api/fastd.h) alone: built in, or as
 * objs/fd_json.so with ./configure --with-json=dynamic.
 */
#include <jansson.h>
#include <string.h>

#include "fastd.h"

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
     * second pass into request memory */
    n = json_dumpb(obj, tmp, sizeof(tmp), JSON_COMPACT);
    out = n ? fd_req_alloc(r, n) : NULL;
    if (out && n <= sizeof(tmp))
        memcpy(out, tmp, n);
    else if (out && json_dumpb(obj, out, n, JSON_COMPACT) != n)
        out = NULL;
    json_decref(obj);
    if (out == NULL)
        return 500;
    fd_resp_status(r, 200);
    fd_resp_content_type_static(r, (fd_str_t){16, "application/json"});
    /* request memory outlives the response: nothing more to copy */
    return fd_resp_body_static(r, out, n) == FD_OK ? FD_OK : 500;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "json",
    .handler = json_handler,
    .flags = FD_API_THREAD_SAFE,
    .methods = FD_API_GET | FD_API_HEAD | FD_API_POST, /* a body sink */
};
