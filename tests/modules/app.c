/*
 * An application module built outside fastd's tree, against the installed
 * public API only (fastd.h, pkg-config fastd), as a user builds one:
 *
 *   cc -shared -fPIC $(pkg-config --cflags fastd jansson) app.c \
 *      $(pkg-config --libs jansson) -o app.so
 *
 * and loads it with [main] load_module = app.so. A small JSON API, a route
 * per method: GET /items, POST /items {"name": "..."} (201), DELETE
 * /items/N (204, 404), GET /hello (app_greeting), GET /stream (five
 * server-sent events, 10 ms apart, from timers on the loop), GET /slow
 * (sleeps app_delay: the stand-in for a slow library call), POST /upload
 * (the body taken in pieces as it comes, never whole: its size and a
 * checksum), GET /file?off=N&len=N (bytes of the file app_file names,
 * sent with sendfile). The request bodies are read with fd_req_read(),
 * which the module's FD_API_STREAM_BODY makes a stream. Built with
 * -DAPP_BLOCKING it is the module "app_blocking", the same handler
 * declared blocking: it runs on the worker's offload pool, never on the
 * loop. The items live in each worker (this is an example, not a store).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fastd.h>
#include <jansson.h>

typedef struct {
    const char *greeting;
    uint64_t delay; /* ms */
    const char *file;
} app_conf_t;

static const fd_api_key_t app_keys[] = {
#ifndef APP_BLOCKING
    {.name = "app_greeting", .type = FD_API_STRING,
     .offset = offsetof(app_conf_t, greeting), .def = "hello",
     .doc = "handler = app: what GET /hello answers"},
    {.name = "app_delay", .type = FD_API_MSEC,
     .offset = offsetof(app_conf_t, delay), .def = "100ms",
     .doc = "handler = app: how long GET /slow sleeps"},
    {.name = "app_file", .type = FD_API_STRING,
     .offset = offsetof(app_conf_t, file), .def = NULL,
     .doc = "handler = app: the file GET /file sends bytes of"},
#else
    {.name = "app_blocking_delay", .type = FD_API_MSEC,
     .offset = offsetof(app_conf_t, delay), .def = "100ms",
     .doc = "handler = app_blocking: how long GET /slow sleeps"},
#endif
    {.name = NULL}};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *items;  /* [{"id": N, "name": "..."}] */
static long next_id = 1;

static int app_init_conf(void *conf)
{
    app_conf_t *c = conf;

    if (c->delay > 10000) {
        fd_api_conf_error("app_delay: at most 10s");
        return FD_ERROR;
    }
    return FD_OK;
}

static int app_init_worker(void)
{
    items = json_array();
    return items ? FD_OK : FD_ERROR;
}

static void app_exit_worker(void)
{
    json_decref(items);
}

static int json_reply(fd_request_t *r, int status, json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    int rc;

    json_decref(j);
    if (text == NULL)
        return 500;
    fd_resp_status(r, status);
    fd_resp_content_type(r, (fd_str_t){16, "application/json"});
    rc = fd_resp_body(r, text, strlen(text));
    free(text);
    return rc == FD_OK ? FD_OK : 500;
}

static int eq(fd_str_t s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.data, lit, s.len) == 0;
}

#ifndef APP_BLOCKING
/* --- /stream: server-sent events from the loop's timers --- */

typedef struct {
    fd_request_t *r;
    int n;
} stream_t;

static void tick(void *data)
{
    stream_t *s = data;
    char ev[64];
    int len = snprintf(ev, sizeof(ev), "data: event %d\n\n", s->n);

    s->n++;
    if (fd_resp_write(s->r, ev, (size_t)len, s->n == 5) == FD_ERROR) {
        fd_api_finish(s->r, FD_ERROR); /* the client left */
        return;
    }
    if (s->n < 5 && fd_api_timer(10, tick, s) == NULL)
        fd_resp_write(s->r, NULL, 0, 1);
}

static int stream(fd_request_t *r)
{
    stream_t *s = fd_req_alloc(r, sizeof(*s));

    if (s == NULL)
        return 500;
    s->r = r;
    s->n = 0;
    fd_resp_status(r, 200);
    fd_resp_content_type(r, (fd_str_t){17, "text/event-stream"});
    fd_resp_header(r, "Cache-Control", (fd_str_t){8, "no-cache"});
    if (fd_resp_send_header(r) != FD_OK || fd_api_timer(10, tick, s) == NULL)
        return 500;
    return FD_AGAIN; /* the last fd_resp_write() ends it */
}
#endif

/* --- request bodies, in pieces --- */

/*
 * A body is taken as it comes: piece() sees each piece, end() answers
 * once it is all in. With FD_API_STREAM_BODY fd_req_read() says FD_AGAIN
 * when the client has sent nothing more yet, and on_readable runs when it
 * has; what the module does not read waits in the socket (back-pressure).
 * Without it (the blocking twin) the same loop gets the body from memory.
 */
typedef struct reader_s reader_t;
struct reader_s {
    int (*piece)(fd_request_t *r, reader_t *rd, const char *p, size_t n);
    int (*end)(fd_request_t *r, reader_t *rd);
    char *data;               /* what items_add keeps */
    size_t len, cap;
    uint64_t bytes;           /* what /upload counts */
    uint32_t sum;
};

static int pump(fd_request_t *r)
{
    reader_t *rd = fd_req_get_ctx(r);
    char buf[16384];
    ssize_t n;
    int rc;

    while ((n = fd_req_read(r, buf, sizeof(buf))) > 0)
        if ((rc = rd->piece(r, rd, buf, (size_t)n)) != FD_OK)
            return rc;
    if (n == FD_AGAIN || n == FD_ERROR)
        return (int)n; /* FD_ERROR: fastd answers 413, 400 or 408 */
    return rd->end(r, rd);
}

static void readable(fd_request_t *r)
{
    int rc = pump(r);

    if (rc != FD_AGAIN)
        fd_api_finish(r, rc);
}

static int read_body(fd_request_t *r, reader_t *rd)
{
    fd_req_set_ctx(r, rd);
    fd_req_on_readable(r, readable);
    return pump(r);
}

/* the pieces kept in request memory, for a body parsed whole */
static int keep(fd_request_t *r, reader_t *rd, const char *p, size_t n)
{
    if (rd->len + n > rd->cap) {
        size_t cap = (rd->len + n) * 2;
        char *d = fd_req_alloc(r, cap);
        if (d == NULL)
            return 500;
        if (rd->len)
            memcpy(d, rd->data, rd->len);
        rd->data = d;
        rd->cap = cap;
    }
    memcpy(rd->data + rd->len, p, n);
    rd->len += n;
    return FD_OK;
}

/* POST /upload: counted and summed, never held */
static int count(fd_request_t *r, reader_t *rd, const char *p, size_t n)
{
    (void)r;
    rd->bytes += n;
    while (n--)
        rd->sum += (unsigned char)*p++;
    return FD_OK;
}

static int counted(fd_request_t *r, reader_t *rd)
{
    return json_reply(r, 200, json_pack("{s:I,s:I}", "bytes",
                                        (json_int_t)rd->bytes, "sum",
                                        (json_int_t)rd->sum));
}

static int upload(fd_request_t *r)
{
    reader_t *rd = fd_req_alloc(r, sizeof(*rd));

    if (rd == NULL)
        return 500;
    *rd = (reader_t){.piece = count, .end = counted};
    return read_body(r, rd);
}

#ifndef APP_BLOCKING
/* GET /file?off=N&len=N: bytes of app_file, not copied (sendfile) */
static int file(fd_request_t *r, app_conf_t *c)
{
    fd_str_t off = fd_req_arg(r, "off"), len = fd_req_arg(r, "len");

    if (c->file == NULL)
        return 404;
    fd_resp_content_type_static(r, (fd_str_t){24, "application/octet-stream"});
    return fd_resp_file(r, c->file, off.data ? strtoll(off.data, NULL, 10) : 0,
                        len.data ? strtoll(len.data, NULL, 10) : -1);
}
#endif

/* --- the routes --- */

static int items_list(fd_request_t *r)
{
    json_t *copy;

    pthread_mutex_lock(&lock);
    copy = json_deep_copy(items);
    pthread_mutex_unlock(&lock);
    return json_reply(r, 200, copy);
}

static int items_added(fd_request_t *r, reader_t *rd)
{
    json_error_t err;
    json_t *in = json_loadb(rd->data, rd->len, 0, &err), *name, *item;

    name = in ? json_object_get(in, "name") : NULL;
    if (!json_is_string(name)) {
        json_decref(in);
        return json_reply(r, 400, json_pack("{s:s}", "error",
                                            "want {\"name\": \"...\"}"));
    }
    pthread_mutex_lock(&lock);
    item = json_pack("{s:I,s:O}", "id", (json_int_t)next_id++, "name", name);
    json_array_append(items, item);
    pthread_mutex_unlock(&lock);
    json_decref(in);
    return json_reply(r, 201, item);
}

static int items_add(fd_request_t *r)
{
    reader_t *rd = fd_req_alloc(r, sizeof(*rd));

    if (rd == NULL)
        return 500;
    *rd = (reader_t){.piece = keep, .end = items_added, .data = ""};
    return read_body(r, rd);
}

static int items_delete(fd_request_t *r, const char *id)
{
    long want = strtol(id, NULL, 10);
    size_t i;
    json_t *it;
    int found = 0;

    pthread_mutex_lock(&lock);
    json_array_foreach(items, i, it) {
        if (json_integer_value(json_object_get(it, "id")) == want) {
            json_array_remove(items, i);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (!found)
        return 404;
    fd_resp_status(r, 204);
    return FD_OK;
}

static int app_handler(fd_request_t *r)
{
    app_conf_t *c = fd_req_conf(r);
    fd_str_t m = fd_req_method(r), p = fd_req_path(r);
    const char *sub = p.data;
    size_t n = p.len;

    /* the routes are below the location's prefix (/app/, or any): what
     * follows the path's first segment */
    const char *second = n > 1 ? memchr(sub + 1, '/', n - 1) : NULL;
    if (second) {
        n -= (size_t)(second - sub);
        sub = second;
    }
    fd_str_t path = {n, sub};

    if (eq(path, "/hello")) {
#ifndef APP_BLOCKING
        const char *g = c->greeting;
#else
        const char *g = "hello";
#endif
        /* the greeting lives as long as the configuration: nothing to
         * copy (fd_resp_*_static) */
        fd_resp_status(r, 200);
        fd_resp_content_type_static(r, (fd_str_t){10, "text/plain"});
        return fd_resp_body_static(r, g, strlen(g)) == FD_OK ? FD_OK : 500;
    }
    if (eq(path, "/slow")) {
        struct timespec ts = {(time_t)(c->delay / 1000),
                              (long)(c->delay % 1000) * 1000000};
        nanosleep(&ts, NULL); /* a slow library call: blocking */
        fd_resp_status(r, 200);
        return fd_resp_body(r, "slept\n", 6) == FD_OK ? FD_OK : 500;
    }
    if (eq(path, "/items") && eq(m, "GET"))
        return items_list(r);
    if (eq(path, "/items") && eq(m, "POST"))
        return items_add(r);
    if (n > 7 && memcmp(sub, "/items/", 7) == 0 && eq(m, "DELETE")) {
        char id[24];
        snprintf(id, sizeof(id), "%.*s", (int)(n - 7), sub + 7);
        return items_delete(r, id);
    }
    if (eq(path, "/upload") && eq(m, "POST"))
        return upload(r);
#ifndef APP_BLOCKING
    if (eq(path, "/file"))
        return file(r, c);
#endif
    if (eq(path, "/stream")) {
#ifdef APP_BLOCKING
        return 501; /* streaming is the loop's: not from a pool thread */
#else
        return stream(r);
#endif
    }
    if (eq(path, "/var")) {
        fd_str_t v = fd_req_var(r, "remote_addr"), a = fd_req_arg(r, "x"),
                 h = fd_req_header(r, "x-test");
        char out[256];
        int len = snprintf(out, sizeof(out), "%.*s %.*s %.*s\n", (int)v.len,
                           v.data, (int)a.len, a.data, (int)h.len, h.data);
        fd_resp_status(r, 200);
        return fd_resp_body(r, out, (size_t)len) == FD_OK ? FD_OK : 500;
    }
    fd_api_log(FD_API_LOG_INFO, 0, "app: no route for %.*s", (int)p.len,
               p.data);
    return FD_DECLINED;
}

FD_API_MODULE = {
    FD_API_HEADER,
#ifndef APP_BLOCKING
    .name = "app",
    .flags = FD_API_STREAM_BODY, /* fd_req_read() as the body comes */
#else
    .name = "app_blocking",
    .flags = FD_API_BLOCKING,
#endif
    .keys = app_keys,
    .conf_size = sizeof(app_conf_t),
    .init_conf = app_init_conf,
    .init_worker = app_init_worker,
    .exit_worker = app_exit_worker,
    .handler = app_handler,
    .methods = FD_API_GET | FD_API_HEAD | FD_API_POST | FD_API_DELETE,
};
