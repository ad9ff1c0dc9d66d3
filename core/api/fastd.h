/*
 * fastd.h: the public API of fastd modules, version 1.1.
 *
 * Everything a module built outside the tree needs: its descriptor and
 * keys, the request, the response, asynchronous completion and logging.
 * A module is a shared object that defines
 *
 *     FD_API_MODULE = { FD_API_HEADER, .name = "hello",
 *                       .handler = hello_handler };
 *
 * and is loaded with [main] load_module = PATH.so. Build it with
 *
 *     cc -shared -fPIC $(pkg-config --cflags fastd) app.c -o app.so
 *
 * Requests and everything engine-side are opaque here: a module reaches
 * them through these functions only, so that the engine may change its
 * structures without breaking a module built for the same major version.
 * A minor version only adds (functions, and fields at the end of the
 * structs below, which an older module leaves zero); a major version may
 * break, and fastd refuses a module built for another major, or for a
 * newer minor than its own. This header is C11 and names no engine type.
 */
#ifndef FASTD_H
#define FASTD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FD_API_VERSION_MAJOR 1
#define FD_API_VERSION_MINOR 1
/* What must match besides the version: the size of a pointer and of the
 * structs below, which a module and fastd lay out alike only if built
 * for the same ABI (checked at load). */
#define FD_API_ABI_TAG "fastd-api-1/lp" FD_API_STR_(__SIZEOF_POINTER__)
#define FD_API_STR_(x) FD_API_STR__(x)
#define FD_API_STR__(x) #x

/* Return codes; anything >= 100 a handler returns is an HTTP status
 * (the engine's own are these, and FD_DONE, -4, for its access phase). */
#define FD_OK 0
#define FD_ERROR -1
#define FD_AGAIN -2
#define FD_DECLINED -3

/* Error log levels, nginx's names and order (fd_api_log). */
#define FD_API_LOG_ERR 3
#define FD_API_LOG_WARN 4
#define FD_API_LOG_NOTICE 5
#define FD_API_LOG_INFO 6

/* Counted string slice; data is not NUL-terminated unless said so. */
typedef struct {
    size_t len;
    const char *data;
} fd_str_t;

typedef struct fd_request_s fd_request_t;

/* --- the module ---------------------------------------------------------- */

/* The type of a key: how its value is parsed into the module's
 * per-location configuration, at conf + offset. */
enum {
    FD_API_STRING = 1, /* const char *, NUL-terminated */
    FD_API_INT,        /* int64_t, digits only */
    FD_API_FLAG,       /* int, on | off */
    FD_API_MSEC,       /* uint64_t milliseconds: 500ms, 75s, 1m30s */
    FD_API_SIZE        /* uint64_t bytes: 512, 8k, 1m */
};

typedef struct {
    const char *name;  /* its key in [http], [server] or [location] */
    int type;          /* FD_API_* */
    size_t offset;     /* in the module's configuration struct */
    const char *def;   /* the default, parsed as a value; NULL: none */
    const char *doc;   /* one line, as fastd -k prints it */
} fd_api_key_t;

/* Handler flags */
#define FD_API_BLOCKING 0x1 /* the handler may block: it always runs on
                               the worker's offload pool, never the loop */
#define FD_API_THREAD_SAFE 0x2 /* 1.1: it may also run on the pool when its
                               location says offload = on (or [http]
                               inline_completions = off): it then touches
                               only its request and thread-safe data, and
                               its database calls are synchronous */

/* Methods a handler takes (0: GET and HEAD); the engine answers the
 * others with 405 and Allow */
#define FD_API_GET 0x1
#define FD_API_HEAD 0x2
#define FD_API_POST 0x4
#define FD_API_PUT 0x8
#define FD_API_DELETE 0x10
#define FD_API_OPTIONS 0x20
#define FD_API_PATCH 0x40

/* 1.1: one more handler name of the module's (fd_api_module_t.handlers):
 * handler = NAME runs it, with the module's keys and configuration */
typedef struct {
    const char *name;
    int (*handler)(fd_request_t *r);
    unsigned flags;           /* FD_API_BLOCKING */
    unsigned methods;         /* FD_API_GET | ... (0: GET and HEAD) */
} fd_api_handler_t;

typedef struct {
    /* filled by FD_API_MODULE: what it was built for */
    uint32_t api_major, api_minor;
    const char *abi;          /* FD_API_ABI_TAG */
    size_t size;              /* sizeof(fd_api_module_t) */

    const char *name;         /* handler = NAME */
    const fd_api_key_t *keys; /* ended by an entry with a NULL name */
    size_t conf_size;         /* its per-location configuration */
    /* After a location's keys are set (defaults included): FD_OK, or
     * FD_ERROR after fd_api_conf_error() to refuse the configuration. */
    int (*init_conf)(void *conf);
    /* In each worker, before its first request, and when it exits. */
    int (*init_worker)(void);
    void (*exit_worker)(void);
    /* Answers a request: FD_OK (the response is set), FD_AGAIN (it
     * answers later with fd_api_finish(), from the loop), FD_DECLINED
     * (404), or an HTTP status >= 400 (the error page). */
    int (*handler)(fd_request_t *r); /* handler = the module's name */
    unsigned flags;           /* FD_API_BLOCKING */
    unsigned methods;         /* FD_API_GET | ... */
    /* 1.1: more handlers, ended by one with a NULL name; NULL: none. A
     * module has a handler, handlers, or both. */
    const fd_api_handler_t *handlers;
} fd_api_module_t;

/* The module's descriptor, the one symbol fastd looks for in its file:
 *     FD_API_MODULE = { FD_API_HEADER, .name = "hello", ... };
 * FD_API_HEADER records the version and ABI it is built for. A module of
 * the tree built into the binary is compiled with FD_API_BUILTIN set to
 * a name of its own (auto/make), so that several can be linked in. */
#ifdef FD_API_BUILTIN
#define FD_API_MODULE fd_api_module_t FD_API_BUILTIN
#else
#define FD_API_MODULE fd_api_module_t fastd_module
#endif
#define FD_API_HEADER                                                        \
    .api_major = FD_API_VERSION_MAJOR, .api_minor = FD_API_VERSION_MINOR,   \
    .abi = FD_API_ABI_TAG, .size = sizeof(fd_api_module_t)

/* From init_conf: the error fastd reports, with the location's file:line */
void fd_api_conf_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* --- the request --------------------------------------------------------- */

fd_str_t fd_req_method(fd_request_t *r);   /* "GET" */
fd_str_t fd_req_target(fd_request_t *r);   /* as sent: "/a%20b?x=1" */
fd_str_t fd_req_path(fd_request_t *r);     /* decoded, normalised: "/a b" */
fd_str_t fd_req_query(fd_request_t *r);    /* "x=1", without the "?" */
/* A request header by name (any case), the first of that name; len 0
 * and data NULL when there is none. */
fd_str_t fd_req_header(fd_request_t *r, const char *name);
/* A query argument as sent (not decoded); data NULL when absent. */
fd_str_t fd_req_arg(fd_request_t *r, const char *name);
/* Any $variable of fastd's ("remote_addr", "host", "request_id", ...,
 * without the "$"); data NULL when there is no such variable. */
fd_str_t fd_req_var(fd_request_t *r, const char *name);
/* The request body, read whole before the handler runs (up to the
 * location's max_body_size: 413 past it); len 0 when there is none. */
fd_str_t fd_req_body(fd_request_t *r);
/* The module's configuration for the request's location. */
void *fd_req_conf(fd_request_t *r);
/* Memory that lives as long as the request. NULL when out of memory. */
void *fd_req_alloc(fd_request_t *r, size_t size);
/* The module's own per-request pointer (NULL until set). */
void *fd_req_get_ctx(fd_request_t *r);
void fd_req_set_ctx(fd_request_t *r, void *ctx);

/* --- the response -------------------------------------------------------- */

void fd_resp_status(fd_request_t *r, int status);
/* Both are copied. FD_OK or FD_ERROR. */
int fd_resp_header(fd_request_t *r, const char *name, fd_str_t value);
int fd_resp_content_type(fd_request_t *r, fd_str_t type);
/* The whole body, copied. FD_OK or FD_ERROR. */
int fd_resp_body(fd_request_t *r, const void *data, size_t len);
/*
 * A streamed body: fd_resp_send_header() sends the status and headers
 * (no Content-Length: chunked over HTTP/1.1, DATA frames over HTTP/2),
 * then fd_resp_write() each piece (copied); last = 1 ends the response.
 * FD_OK; FD_AGAIN when the client is slow (the piece is queued; wait for
 * on_drain before the next); FD_ERROR when the client is gone (end the
 * request with fd_api_finish(r, FD_ERROR)). Server-sent events are such a
 * stream of "data: ...\n\n" pieces with Content-Type text/event-stream.
 */
int fd_resp_send_header(fd_request_t *r);
int fd_resp_write(fd_request_t *r, const void *data, size_t len, int last);
void fd_resp_on_drain(fd_request_t *r, void (*on_drain)(fd_request_t *r));

/* A handler that returned FD_AGAIN ends the request: FD_OK (the response
 * is set, or was streamed to its end) or an HTTP status >= 400. From the
 * loop: a timer, a drain, an I/O callback of the module's. */
void fd_api_finish(fd_request_t *r, int rc);

/* --- the loop ------------------------------------------------------------- */

typedef struct fd_api_timer_s fd_api_timer_t;
/* A one-shot timer on the worker's loop: handler(data) after ms. NULL
 * when out of memory. Cancel a pending one with fd_api_timer_cancel()
 * (the timer is freed either way: after it fires, or when cancelled). */
fd_api_timer_t *fd_api_timer(uint64_t ms, void (*handler)(void *data),
                             void *data);
void fd_api_timer_cancel(fd_api_timer_t *t);

/* --- databases (1.1) ------------------------------------------------------ */

/*
 * A [database NAME] section: PostgreSQL (url = postgresql://...) spoken on
 * the worker's loop, pipelined, or SQLite (url = sqlite:PATH) run on the
 * worker's offload pool. The same calls serve both.
 *
 * A statement is named: a prepare = NAME SQL line of the section, or one
 * the module prepares from its init_conf with fd_db_prepare(). Its
 * parameters are $1, $2, ... and are always sent apart from the SQL
 * (text, copied): no SQL is ever built from a request's data.
 *
 * fd_db_query() queues one statement and returns FD_OK; done(r, res,
 * data) runs later, from the loop, once its rows are in (the handler
 * returned FD_AGAIN and ends the request from done with fd_api_finish()).
 * Several queries of one request, and of many, share a connection's round
 * trips. A handler running on the offload pool (FD_API_BLOCKING, or
 * offload = on) gets done called before fd_db_query() returns, on a
 * connection of that thread's: the same code, blocking, and fd_api_finish()
 * from there ends the request when the handler returns. Anything else
 * fd_db_query() returns is the HTTP status to answer at once (503: the
 * database is down or too many queries wait; done is not called).
 *
 * res and its values live until done returns: copy what you keep.
 * r may be NULL (work of the module's own, from init_worker or a timer).
 */
typedef struct fd_db_s fd_db_t;
typedef struct fd_db_res_s fd_db_res_t;
typedef void (*fd_db_done_pt)(fd_request_t *r, const fd_db_res_t *res,
                              void *data);

/* The [database name] section: from init_conf (fd_api_conf_error() says
 * why when NULL) or later; NULL when there is none. */
fd_db_t *fd_db_get(const char *name);
/* From init_conf: a statement of the module's, prepared on every
 * connection as a prepare = line is. The same name twice is fine if the
 * SQL is the same. FD_OK, or FD_ERROR after fd_api_conf_error(). */
int fd_db_prepare(fd_db_t *db, const char *name, const char *sql);
int fd_db_query(fd_request_t *r, fd_db_t *db, const char *stmt,
                int nparams, const fd_str_t *params, fd_db_done_pt done,
                void *data);

/* A transaction: statements queued with fd_db_txn_query() go together at
 * fd_db_commit() and take effect all or none. Their results are not
 * returned, only the outcome: res of done is the last statement's, or
 * the first error. Reads whose rows decide what to write come before. */
typedef struct fd_db_txn_s fd_db_txn_t;
fd_db_txn_t *fd_db_begin(fd_request_t *r, fd_db_t *db); /* NULL: no memory */
int fd_db_txn_query(fd_db_txn_t *t, const char *stmt, int nparams,
                    const fd_str_t *params);       /* FD_OK or FD_ERROR */
/* As fd_db_query(): FD_OK (done follows), or a status (the transaction
 * is dropped, done is not called). */
int fd_db_commit(fd_db_txn_t *t, fd_db_done_pt done, void *data);

/* The outcome: 0, or the HTTP status it maps to: 503 the database is
 * unreachable or the connection was lost, 504 the statement ran past
 * statement_timeout, 500 any other error (fd_db_error() says which). */
int fd_db_status(const fd_db_res_t *res);
const char *fd_db_error(const fd_db_res_t *res);  /* NULL when none */
int fd_db_rows(const fd_db_res_t *res);
int fd_db_cols(const fd_db_res_t *res);
/* A value as text; data NULL for SQL NULL (and out of range). */
fd_str_t fd_db_value(const fd_db_res_t *res, int row, int col);
/* A value as an integer (0 for NULL or text that is not one). */
int64_t fd_db_int(const fd_db_res_t *res, int row, int col);
/* Rows an UPDATE, INSERT or DELETE changed. */
int64_t fd_db_changes(const fd_db_res_t *res);

/* --- logging -------------------------------------------------------------- */

/* A line in the error log at level (FD_API_LOG_*); err: an errno to
 * append, or 0. */
void fd_api_log(int level, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The API version of the running fastd: major * 1000 + minor. */
unsigned fd_api_version(void);

/* --- 1.1: the body in pieces, files, memory that is not copied --------- */

/*
 * One more handler flag (fd_api_module_t.flags, fd_api_handler_t.flags),
 * 1.1. FD_API_STREAM_BODY: the handler takes the request body itself,
 * piece by piece, with fd_req_read() as it arrives, rather than whole
 * before it runs (fd_req_body() is then empty). Not with FD_API_BLOCKING
 * or FD_API_THREAD_SAFE (refused at load): a handler on the pool gets its
 * body whole.
 */
#define FD_API_STREAM_BODY 0x4

/*
 * The body, pulled: up to size bytes of it into buf. Returns the number
 * of bytes (> 0); 0 at its end (or when there is none); FD_AGAIN when
 * nothing more has arrived yet: on_readable (fd_req_on_readable) is
 * called when more has, or when the wait failed; FD_ERROR when the body
 * cannot be had: over the location's max_body_size, a broken chunked
 * framing, no byte from the client for http.body_timeout, or a client
 * gone. End the request then with FD_ERROR (the handler's return, or
 * fd_api_finish(r, FD_ERROR)): fastd answers what the fault calls for,
 * 413, 400 or 408, and closes the connection.
 *
 * Why a pull: it is what nginx's unbuffered request body
 * (ngx_http_read_unbuffered_request_body() from a read event handler) and
 * Kestrel's Request.BodyReader (PipeReader.ReadAsync) are. The module
 * reads at its own pace, and what it has not read stays in the socket,
 * or unacknowledged in the HTTP/2 stream's window: that is the
 * back-pressure, with no pause and resume to call. A module that cannot
 * take more (its upstream is slow) stops reading and calls fd_req_read()
 * again when it can; on_readable is only the news that waiting is over.
 *
 * Without FD_API_STREAM_BODY, fd_req_read() hands out the body read
 * whole in the same pieces (no FD_AGAIN), so code written for one works
 * for both. From the loop only (never from a blocking handler's thread).
 */
ssize_t fd_req_read(fd_request_t *r, void *buf, size_t size);
void fd_req_on_readable(fd_request_t *r, void (*on_readable)(fd_request_t *r));

/*
 * A file's bytes [offset, offset + length) as the response (length < 0,
 * or past the file's end: to its end), sent with sendfile() over plain
 * HTTP/1.1 as fastd's static files are. The response is 200, or what the
 * client's If-None-Match / If-Modified-Since (by the file's time) and
 * Range (within the bytes given) make of it: 304, 206, 416. path is
 * absolute, or relative to the location's root; fastd opens it and closes
 * it when the request ends. Set the content type, headers and any
 * Last-Modified or ETag of your own before. FD_OK, or an HTTP status to
 * return: 404 (no such file), 403 (not a regular file, or not readable),
 * 416 (offset past the file's end), 500.
 */
int fd_resp_file(fd_request_t *r, const char *path, int64_t offset,
                 int64_t length);
/* The same from a descriptor the module opened: own = 1 gives it to
 * fastd, which closes it when the request ends (also when the call
 * fails); own = 0 leaves it the module's, open at least until then. */
int fd_resp_file_fd(fd_request_t *r, int fd, int64_t offset, int64_t length,
                    int own);

/*
 * Responses from memory that outlives the request (a static const, what
 * init_worker built): nothing is copied, so such a response costs what
 * fastd's own handlers' does. The data must not change until the
 * request ends. FD_OK or FD_ERROR (out of memory).
 */
int fd_resp_body_static(fd_request_t *r, const void *data, size_t len);
void fd_resp_content_type_static(fd_request_t *r, fd_str_t type);
int fd_resp_header_static(fd_request_t *r, fd_str_t name, fd_str_t value);

#ifdef __cplusplus
}
#endif

#endif /* FASTD_H */
