/*
 * fastd.h: the public API of fastd modules, version 1.10.
 *
 * Everything a module built outside the tree needs: its descriptor and
 * keys, the request, the response, asynchronous completion and logging;
 * from 1.2 also the access and log phases, its own $variables, its
 * figures for /status, the client's address and the offload pool; from
 * 1.3 variables compiled once and read without a lookup by name; from
 * 1.4 sections of a module's own, response and body filters, scripts
 * with regex captures, the request's URI rewritten and routed again,
 * descriptors on the loop, and what logs and databases need; from 1.5
 * shared memory every worker maps, scripts evaluated whole, and the
 * [cluster]'s Redis; from 1.6 the server's figures, read as a status
 * page shows them, and a string builder; from 1.7 files served as
 * static serves them, copies of a request run in the background,
 * backend protocols of a module's own (fastd_upstream.h), and the
 * fleet's Redis client; from 1.8 (fastd_upstream.h) what an HTTP proxy
 * reads and writes of the request, and a helper process beside the
 * workers, a hook before routing, commands of fastd -s, figures of what
 * the workers share, certificates a module provides (fastd_tls.h), and
 * connections below HTTP, a layer-4 proxy's (fastd_stream.h); from 1.9
 * what a cache of the module's needs: a directory the workers write in,
 * a key's old name, the location's match text, a stored response
 * answered again; from 1.10 the wall clock, a default of a key the
 * module parses, and strings and growing arrays in the configuration's
 * memory (what the proxy's descriptor needed).
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
#define FD_API_VERSION_MINOR 10
/* What must match besides the version: the size of a pointer and of the
 * structs below, which a module and fastd lay out alike only if built
 * for the same ABI (checked at load). */
#define FD_API_ABI_TAG "fastd-api-1/lp" FD_API_STR_(__SIZEOF_POINTER__)
#define FD_API_STR_(x) FD_API_STR__(x)
#define FD_API_STR__(x) #x

/* Return codes; anything >= 100 a handler returns is an HTTP status. */
#define FD_OK 0
#define FD_ERROR -1
#define FD_AGAIN -2
#define FD_DECLINED -3
#define FD_DONE -4 /* 1.2: an access hook set the response (fd_resp_error) */

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
typedef struct fd_api_status_s fd_api_status_t; /* 1.2, below */

/* --- the module ---------------------------------------------------------- */

/* The type of a key: how its value is parsed into the module's
 * per-location configuration, at conf + offset. */
enum {
    FD_API_STRING = 1, /* const char *, NUL-terminated */
    FD_API_INT,        /* int64_t, digits only */
    FD_API_FLAG,       /* int, on | off */
    FD_API_MSEC,       /* uint64_t milliseconds: 500ms, 75s, 1m30s */
    FD_API_SIZE,       /* uint64_t bytes: 512, 8k, 1m */
    /* 1.2: parsed by the module's set() (fd_api_module_t.set); nothing
     * is stored at offset, which is ignored. 1.10: a CUSTOM key's def,
     * when it has one, is given to set() (own 0) before its lines */
    FD_API_CUSTOM,     /* once a section */
    FD_API_LIST,       /* repeatable: one set() a line, lines add up */
    /* 1.5: repeatable, and the nearest section's lines replace the
     * others': a [location]'s own lines are all it has, else its
     * [server]'s, else [http]'s (set() sees only those) */
    FD_API_LIST_REPLACE,
    /* 1.9: a key's old name, kept to say what replaced it: a line that
     * uses it is refused with "use \"DEF\" (DOC)", def being the new key
     * (or what to write instead) and doc why; offset is ignored, and
     * fastd -k lists it no more */
    FD_API_RENAMED
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

    /* --- 1.2: the request's phases, variables, figures (see below) --- */

    /* An FD_API_CUSTOM or FD_API_LIST key's value, key its name: FD_OK,
     * or FD_ERROR after fd_api_conf_error() (the line's file:line). own:
     * 1 for a line of the [location] itself, 0 for one it inherits from
     * [http] or [server] (applied first, in that order). */
    int (*set)(void *conf, const char *key, const char *value, int own);
    /*
     * The access phase: called for each request of a location where the
     * module is active (active below), in module order, after routing and
     * before the body is read and the handler runs. FD_OK: go on;
     * FD_AGAIN: the module holds the request and later, from the loop,
     * lets it go on with fd_api_continue() or ends it with
     * fd_api_finish(r, status); an HTTP status >= 400: that error page;
     * FD_DONE: the response is set (fd_resp_error(), then fd_resp_header()
     * for headers of its own: a 401's WWW-Authenticate).
     *
     * A module with an access or a log hook is a phase module: its keys
     * are keys of every [location] (and [http], [server] as defaults),
     * whatever its handler, and its init_conf runs for every location.
     */
    int (*access)(fd_request_t *r);
    /* Whether the access hook has work in a location, given the
     * module's configuration there (after init_conf); a request pays only
     * for the hooks of its location. NULL: everywhere. */
    int (*active)(const void *conf);
    /* The log phase: once for each request that ends (answered, refused
     * before routing, or cut), on the loop; what it sent is in its
     * variables (fd_req_var: "status", "body_bytes_sent",
     * "request_time", ...). */
    void (*log)(fd_request_t *r);
    /* Its $variables, ended by one with a NULL name; NULL: none. */
    const struct fd_api_var_s *vars;
    /* Its figures for /status and /metrics: shm_size bytes of each
     * worker's shared slot (fd_api_status_area), reported by status();
     * retire() folds an exited worker's counters into the retired area. */
    size_t shm_size;
    void (*status)(fd_api_status_t *st, const void *area, unsigned worker);
    void (*retire)(void *retired_area, const void *area);
    /* Set by fastd when it registers the module: what FD_API_SELF
     * names. Leave it 0. */
    unsigned id;

    /* --- 1.3 --- */

    /* In each worker, on SIGUSR1 (fastd -s reopen), after fastd's own
     * logs: reopen the module's own files (a log it writes, moved away
     * by logrotate). NULL: none. */
    void (*reopen)(void);

    /* --- 1.4 --- */

    /* A section type of the module's own, [TYPE NAME] (see
     * fd_api_section_t below); NULL: none. */
    const struct fd_api_section_s *section;
    /* In the master, once the whole configuration is read (every
     * location's init_conf run), at -t too, before any worker starts:
     * what needs all of it (a database's statements, which modules
     * prepare from their init_conf, checked against its schema). FD_OK,
     * or FD_ERROR after fd_api_conf_error() (fd_api_conf_at() names a
     * line). NULL: none. */
    int (*configured)(void);
    /* A response filter: for each response of a location where the module
     * is active (active above), in module order, before its header is
     * written; it reads the response (fd_resp_get_*) and may change its
     * headers, replace a complete body (fd_resp_body_static) or set a body
     * filter (fd_resp_body_filter) that transforms the body as it goes.
     * FD_OK, or FD_ERROR (a 500). NULL: none. */
    int (*filter)(fd_request_t *r);

    /* --- 1.8 (a module beside the workers: acme) --- */

    /* Before routing, on every server, for the requests of a worker where
     * the module called fd_api_early_on() (from init_worker): FD_DECLINED
     * goes on to the locations; FD_OK: the module set the whole response
     * (fd_resp_status, fd_resp_body...), which no location may shadow
     * (ACME's http-01 answers). NULL: none. */
    int (*early)(fd_request_t *r);
    /* Figures of what the workers share (a shared zone's), reported once
     * by /status and /metrics, not once a worker. NULL: none. */
    void (*status_shared)(fd_api_status_t *st);
    /* fastd -s CMD ARG, for a CMD no signal names ("renew NAME"), in the
     * fastd that was asked (the configuration is read; fd_api_section()
     * finds its sections; fd_api_master_pid() is the master's): FD_OK
     * done, FD_DECLINED not the module's, FD_ERROR (said on stderr).
     * NULL: none. */
    int (*command)(const char *cmd, const char *arg);
    /* The certificates of ssl_certificate = SCHEME:NAME that the module
     * provides (fastd_tls.h). NULL: none. */
    const struct fd_api_tls_provider_s *tls;
} fd_api_module_t;

/*
 * 1.4: named sections, [TYPE NAME] ([queue api], [database world]): the
 * keys of a section are parsed into a conf_size struct of its own (its
 * FD_API_CUSTOM and FD_API_LIST keys by the section's set()), and
 * init(name, conf, index) runs after them, index being the
 * section's number among the module's of this configuration (0, 1, ...,
 * in file order): FD_OK, or FD_ERROR after fd_api_conf_error(). A name is
 * checked before: with name_max, 1 to name_max - 1 letters, digits, '_',
 * '-' and '.', not "off" (a name that labels figures); max: more sections
 * than that are refused (0: any number). The same name twice is refused.
 * A module finds a section's struct by its name with fd_api_section(),
 * and walks them all with fd_api_section_each() (init_worker).
 */
typedef struct fd_api_section_s {
    const char *type;
    const fd_api_key_t *keys;  /* ended by an entry with a NULL name */
    size_t conf_size;
    size_t name_max;
    unsigned max;
    int (*init)(const char *name, void *conf, unsigned index);
    /* its FD_API_CUSTOM and FD_API_LIST keys' lines, as the module's set
     * has them (own is 1); NULL: the section has none */
    int (*set)(void *conf, const char *key, const char *value, int own);
} fd_api_section_t;

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
/* 1.2: the module's own descriptor, for the calls that take it (a phase
 * hook reads its configuration and keeps its state by it). */
#ifdef FD_API_BUILTIN
extern fd_api_module_t FD_API_BUILTIN;
#define FD_API_SELF (&FD_API_BUILTIN)
#else
extern fd_api_module_t fastd_module;
#define FD_API_SELF (&fastd_module)
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
 * 1.8 (the proxy's WebSockets over HTTP/2): one more handler flag.
 * FD_API_TUNNEL: the handler is given an HTTP/2 extended CONNECT (RFC
 * 8441, fd_req_http()'s ext_connect), which it answers with a tunnel
 * (fastd_upstream.h's fd_api_upstream_tunnel after its server's 101, the
 * client getting 200) or a status of its own. Without it fastd answers
 * such a request 501 before any handler runs.
 */
#define FD_API_TUNNEL 0x8

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
 * absolute, or relative to the location's root (not alias), and opened
 * as it is: nothing confines it to root, so a path made from the
 * request's goes through fd_req_file_open() (1.7) instead, which does;
 * fastd opens it and closes it when the request ends. Set the content type, headers and any
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

/* --- 1.2: phase modules --------------------------------------------------- */

/*
 * A phase module (one with an access or log hook, fd_api_module_t) reads
 * its own configuration and keeps its own per-request state by its
 * descriptor, FD_API_SELF: fd_req_conf() and fd_req_get_ctx() are the
 * location's handler's.
 *
 * fd_req_conf_of: the module's configuration for the request's location
 * (NULL when the request was refused before it had one: a log hook's
 * 400). fd_req_get_ctx_of / fd_req_set_ctx_of: its per-request pointer
 * (FD_OK, or FD_ERROR when out of memory).
 */
void *fd_req_conf_of(fd_request_t *r, const fd_api_module_t *self);
void *fd_req_get_ctx_of(fd_request_t *r, const fd_api_module_t *self);
int fd_req_set_ctx_of(fd_request_t *r, const fd_api_module_t *self,
                      void *ctx);

/* An access hook that returned FD_AGAIN lets the request go on: the
 * next module's access hook, then the body and the handler. From the
 * loop. (fd_api_finish(r, status) ends it instead, with that error page;
 * fd_api_finish(r, FD_DONE) with the response set by fd_resp_error()
 * and the headers added after it: a 401 and its WWW-Authenticate.) */
void fd_api_continue(fd_request_t *r, const fd_api_module_t *self);

/* The response of status as fastd's error page (the location's
 * error_page, or fastd's own); headers added after it go with it, and the
 * access hook then returns FD_DONE. FD_OK or FD_ERROR (out of memory). */
int fd_resp_error(fd_request_t *r, int status);

/* From init_conf: move the position fd_api_conf_error() names to the
 * line that set key in conf (a check made later than the key was
 * read). 1 if found, 0 if not (it stays the section's). */
int fd_api_conf_at_key(const void *conf, const char *key);
/* From init_conf or set: a path of the configuration (relative: to the
 * prefix, as fastd's own), in memory that lives as long as it. */
const char *fd_api_conf_path(const char *path);
/* From init_conf or set: memory that lives as long as the loaded
 * configuration (NULL when out of memory). */
void *fd_api_conf_alloc(size_t size);
/* 1.10, from the same places: n bytes of s then a NUL, and a copy of an
 * array of n elements of size bytes with room for one more (zeroed, at
 * the end: a repeatable key's next value), in that memory. NULL after
 * fd_api_conf_error("out of memory") when out of memory. */
char *fd_api_conf_strndup(const char *s, size_t n);
void *fd_api_conf_grow(const void *array, size_t n, size_t size);

/* --- 1.2: the client ------------------------------------------------------- */

/* An IPv4 (the first 4 bytes of addr) or IPv6 address; family is the
 * system's AF_INET or AF_INET6 (0: none). */
typedef struct fd_addr_s {
    uint8_t family;
    uint16_t port;           /* 0: none known */
    uint8_t addr[16];
} fd_api_addr_t;

/* A network, ADDR/BITS: an IPv4 one also matches IPv4-mapped IPv6
 * addresses (::ffff:10.1.2.3 of a [::] listener). */
typedef struct {
    uint8_t family;          /* AF_INET, AF_INET6 */
    uint8_t bits;
    uint8_t addr[16];
} fd_api_cidr_t;

/* The client's address, after real_ip (the one $remote_addr says). */
void fd_req_client(fd_request_t *r, fd_api_addr_t *a);
/* Whether a is in one of set[0 .. n). */
int fd_api_cidr_match(const fd_api_cidr_t *set, unsigned n,
                      const fd_api_addr_t *a);

/* --- 1.2: variables --------------------------------------------------------- */

/* A $variable of the module's (fd_api_module_t.vars): get returns its
 * value for r, in memory that lives as long as r (tmp: FD_API_VAR_TMP
 * bytes of scratch it may use); len 0 when it is not set (the access
 * log writes "-"). Usable wherever fastd expands variables. */
#define FD_API_VAR_TMP 64
#define FD_API_VAR_NUMBER 0x2 /* a JSON number in a json access log */
typedef struct fd_api_var_s {
    const char *name;        /* without the "$" */
    fd_str_t (*get)(fd_request_t *r, char *tmp);
    unsigned flags;          /* FD_API_VAR_NUMBER */
} fd_api_var_t;

/* --- 1.2: the offload pool ------------------------------------------------- */

/*
 * work(r) on a thread of the worker's offload pool (it may block; it
 * touches r's data and its own only, and calls no fd_* function but
 * fd_req_get_ctx*, fd_req_conf*), then done(r) back on the loop, which
 * ends the request (fd_api_finish) or lets it go on (fd_api_continue).
 * FD_OK, or FD_ERROR when no pool thread can be had (from a pool thread,
 * or the pool is full): do it inline, or answer 503.
 */
int fd_api_offload(fd_request_t *r, void (*work)(fd_request_t *r),
                   void (*done)(fd_request_t *r));

/* The pool's figures of one worker, as the pool keeps them in a status
 * area given to fd_api_pool_publish_to() (gauges, and counters that only
 * grow). */
typedef struct {
    uint64_t threads;
    uint64_t busy;
    uint64_t pending;
    uint64_t completed;      /* counter */
    uint64_t wait_usec_sum;  /* counter: the queue wait of what it took */
    uint64_t min_threads;    /* [offload] threads */
    uint64_t max_threads;
} fd_api_pool_stats_t;
/* From init_worker: where this worker's pool keeps its figures. */
void fd_api_pool_publish_to(fd_api_pool_stats_t *area);

/* --- 1.2: figures for /status and /metrics --------------------------------- */

/*
 * A module with shm_size reports from status(st, area, worker): once for
 * each live worker's slot (worker is its number) and once with worker =
 * FD_API_STATUS_RETIRED for the folded figures of exited workers, where
 * gauges are ignored. A figure is a counter (it only grows) or a gauge;
 * name is its metric name (fastd_ is prefixed), help one line, labels
 * NULL or k="v" pairs joined by ','. The worker's own slot is
 * fd_api_status_area(FD_API_SELF), from init_worker on (NULL without
 * one); update it with atomic adds: /status reads it from another
 * worker.
 */
#define FD_API_STATUS_RETIRED ((unsigned)-1)
void fd_api_status_counter(fd_api_status_t *st, const char *name,
                           const char *help, const char *labels,
                           uint64_t v);
void fd_api_status_gauge(fd_api_status_t *st, const char *name,
                         const char *help, const char *labels, uint64_t v);
void *fd_api_status_area(const fd_api_module_t *self);

/* 1.4, for retire(): in an area of n entries of size bytes, each beginning
 * with a NUL-ended name of name_size bytes (a queue's, a zone's), the
 * entry named name, or the first free one (then named name), or NULL. */
void *fd_api_status_named_entry(void *entries, size_t size, unsigned n,
                                const char *name, size_t name_size);

/* --- 1.2: the clock ------------------------------------------------------- */

/* The loop's clock: milliseconds since some fixed time, as of this loop
 * turn (no system call): for ages and intervals. */
uint64_t fd_api_now_msec(void);
/* 1.10: the wall clock, Unix seconds, as of this loop turn (no system
 * call): for dates (a stored response's age and expiry). */
int64_t fd_api_unix_sec(void);

/* --- 1.3: variables compiled once ------------------------------------------ */

/*
 * fd_req_var() finds a variable by its name at each call. A module that
 * reads the same ones for every request (a log format) compiles each name
 * once, from init_conf or set: fd_api_var_compile("status") (without the
 * "$"; the $http_NAME, $arg_NAME, ... families too) returns a handle that
 * lives as long as the configuration, or NULL when there is no such
 * variable: the error, with a "did you mean", is then set (return
 * FD_ERROR). fd_req_var_value(r, v, tmp) is its value for r, with no
 * lookup by name: in memory that lives as long as r, or in tmp
 * (FD_API_VAR_TMP bytes of the caller's, which a number may be written
 * into); len 0 when not set. fd_api_var_flags(v): FD_API_VAR_NUMBER when
 * its value is a number (a JSON log writes it unquoted).
 */
typedef struct fd_api_cvar_s fd_api_cvar_t;
const fd_api_cvar_t *fd_api_var_compile(const char *name);
fd_str_t fd_req_var_value(fd_request_t *r, const fd_api_cvar_t *v,
                          char *tmp);
unsigned fd_api_var_flags(const fd_api_cvar_t *v);

/* --- 1.4: scripts, captures, the URI routed again --------------------------- */

/*
 * A script is text with $variables in it ("/x/$1?id=$arg_id"), compiled
 * once, from init_conf or set: fd_api_script_compile(src, len, flags,
 * what) returns a handle that lives as long as the configuration, or NULL
 * with the error set (what prefixes it: "rewrite"). With
 * FD_API_SCRIPT_CAPTURES it also takes $1..$9 and named captures ($name,
 * ${name}) of a regex, checked by the module (a name no variable has is
 * such a part). Per request the module reads it part by part, so that it
 * escapes each as it needs: fd_api_script_part() says what part i is,
 * fd_req_script_value() its value for r (in memory that lives as long as
 * r, or in tmp: FD_API_VAR_TMP bytes of the caller's).
 */
typedef struct fd_api_script_s fd_api_script_t;
#define FD_API_SCRIPT_CAPTURES 0x1
#define FD_API_VAR_URLSAFE 0x4 /* already URL-encoded: never escape it */
enum {
    FD_API_PART_TEXT,        /* literal text */
    FD_API_PART_VAR,         /* a variable */
    FD_API_PART_CAPTURE,     /* $1..$9 */
    FD_API_PART_NAMED        /* a named capture: name is its name */
};
typedef struct {
    unsigned kind;           /* FD_API_PART_* */
    unsigned flags;          /* FD_API_VAR_NUMBER, FD_API_VAR_URLSAFE */
    fd_str_t name;           /* TEXT: the text; NAMED: the capture's
                                name, NUL-ended; VAR: the name as
                                written, without the "$" */
} fd_api_part_t;
/* What a regex matched, as pcre2 says it: subject, ovector (2 * n
 * offsets) and the regex (a pcre2_code *, for named captures; NULL: none
 * named). n 0: no captures. */
typedef struct {
    const char *subject;
    const size_t *ovector;
    int n;
    const void *regex;
} fd_api_captures_t;
const fd_api_script_t *fd_api_script_compile(const char *src, size_t len,
                                             unsigned flags,
                                             const char *what);
unsigned fd_api_script_parts(const fd_api_script_t *s);
/* FD_OK, or FD_ERROR when i is past the last part */
int fd_api_script_part(const fd_api_script_t *s, unsigned i,
                       fd_api_part_t *part);
fd_str_t fd_req_script_value(fd_request_t *r, const fd_api_script_t *s,
                             unsigned i, const fd_api_captures_t *caps,
                             char *tmp);
/* "; did you mean \"$NAME\"?" for an unknown variable's name, in buf,
 * or "" */
const char *fd_api_var_hint(const char *name, char *buf, size_t size);

/* From init_conf: the regex of the location being configured ([location
 * ~ RE]: a pcre2_code *), or NULL. */
const void *fd_api_conf_regex(void);
/* Where a line of the configuration is: fd_api_conf_pos() from set (the
 * line being parsed), fd_api_conf_at() from init_conf, so that the next
 * fd_api_conf_error() names that line (a check made later than the line
 * was read). */
typedef struct {
    const char *file;
    int line;
} fd_api_conf_pos_t;
void fd_api_conf_pos(fd_api_conf_pos_t *pos);
void fd_api_conf_at(const fd_api_conf_pos_t *pos);
/* From init_conf or set: fn(data) when the configuration is freed (a
 * reload, or the end): what the module allocated outside it (a compiled
 * regex). FD_OK or FD_ERROR (out of memory). */
int fd_api_conf_cleanup(void (*fn)(void *data), void *data);

/*
 * The request's location: a handle to compare (the same location or
 * not), and whether it is a named one ([location @name]: reached only by
 * an internal redirect). fd_req_redirects() counts the request's internal
 * redirects so far (try_files, rewrite ... last): an access hook that sees
 * it grow knows the access phase began again. fd_req_captures() are the
 * captures of the location's own regex ([location ~ RE]; n 0: none).
 */
typedef struct fd_api_loc_s fd_api_loc_t;
const fd_api_loc_t *fd_req_loc(fd_request_t *r);
int fd_req_loc_named(fd_request_t *r);
unsigned fd_req_redirects(fd_request_t *r);
void fd_req_captures(fd_request_t *r, fd_api_captures_t *caps);
/*
 * From an access hook: the request's URI becomes path?args (path as a
 * request line has it, starting with "/": %XX is decoded, so write a
 * '%' as %25, and it is normalised and encoded again for a handler that
 * forwards the URI; args as sent, without the "?", in memory that lives
 * as long as the request: its own query, or fd_req_alloc()'s) and
 * fd_req_reroute() finds its location again (its captures are then
 * fd_req_captures()). count = 1 counts it as an internal redirect (a
 * rewrite ... last): past ten, a cycle, logged, and 500. FD_OK, or the
 * HTTP status to return (500: a bad path, logged). The access hook that
 * returns FD_OK after a reroute makes the new location's access phase
 * run, from its first hook (its own included: fd_req_loc() tells it).
 */
int fd_req_set_uri(fd_request_t *r, fd_str_t path, fd_str_t args);
int fd_req_reroute(fd_request_t *r, int count);

/* --- 1.4: sections, clean-ups, aborts, posted calls ------------------------- */

/* The struct of [type name], a section of a module on this API: from
 * init_conf, set or a section's init, the configuration's being loaded;
 * from anywhere else, the running one's. NULL when there is none (and
 * for fastd's own sections: [upstream NAME] is not a module's to see). */
void *fd_api_section(const char *type, const char *name);
/* fn(name, conf, data) for each [type NAME] of the running configuration
 * (from init_worker on). */
void fd_api_section_each(const char *type,
                         void (*fn)(const char *name, void *conf,
                                    void *data),
                         void *data);

/* fn(data) when the request's memory is freed: it ends, or its connection
 * goes away (also while a handler works on the pool). FD_OK or FD_ERROR
 * (out of memory). */
int fd_req_cleanup(fd_request_t *r, void (*fn)(void *data), void *data);

/* on_abort(r) runs when the client goes away while the request is held
 * (FD_AGAIN): the module drops what it keeps for r, and fastd ends it.
 * Returns the one there was (NULL: none): call it from yours, and put it
 * back when you stop holding the request. */
typedef void (*fd_api_req_pt)(fd_request_t *r);
fd_api_req_pt fd_req_on_abort(fd_request_t *r, fd_api_req_pt on_abort);

/* A call at the end of the loop's turn, after the events of this one (a
 * request released then never runs inside another one's end). new, from
 * init_worker: NULL when out of memory; post: once until it runs, however
 * many times it is posted. free, from exit_worker: fn is not called
 * after it, even when it was posted (NULL is fine). */
typedef struct fd_api_posted_s fd_api_posted_t;
fd_api_posted_t *fd_api_posted_new(void (*fn)(void *data), void *data);
void fd_api_post(fd_api_posted_t *p);
void fd_api_posted_free(fd_api_posted_t *p);

/* --- 1.4: the loop's descriptors, timers that are kept, the pool ----------- */

/*
 * A descriptor of the module's own on the worker's loop (a database's
 * socket): fd_api_io_new(handler, data) from init_worker on (NULL: out of
 * memory), then fd_api_io_watch(io, fd, events) to watch fd (again: other
 * events, or another fd); handler(data, events) runs on the loop when fd
 * is ready (FD_API_IO_ERR: an error or a hang-up, with IN). Stop before
 * closing fd (fd_api_io_stop: the loop lets go of it at once), and free
 * it when done, from any handler (its own, or another watch's whose event
 * came in the same batch): its handler is not called after, and its
 * memory goes at the end of the loop turn. A watch is level-triggered on both event backends: it
 * fires again on the next loop turn while the descriptor stays ready, so
 * a handler may read once (not to EAGAIN).
 */
#define FD_API_IO_IN 0x1
#define FD_API_IO_OUT 0x2
#define FD_API_IO_ERR 0x4
typedef struct fd_api_io_s fd_api_io_t;
fd_api_io_t *fd_api_io_new(void (*handler)(void *data, unsigned events),
                           void *data);
int fd_api_io_watch(fd_api_io_t *io, int fd, unsigned events); /* FD_OK */
void fd_api_io_stop(fd_api_io_t *io);
void fd_api_io_free(fd_api_io_t *io);

/* A timer kept and set again (a connection's): fd_api_timer_new() makes
 * it, unset (NULL: out of memory); fd_api_timer_set() sets it to fire in
 * ms (again: later or sooner), fd_api_timer_unset() unsets it,
 * fd_api_timer_is_set() says whether it is; fd_api_timer_cancel() frees
 * it. It does not free itself when it fires. */
fd_api_timer_t *fd_api_timer_new(void (*handler)(void *data), void *data);
void fd_api_timer_set(fd_api_timer_t *t, uint64_t ms);
void fd_api_timer_unset(fd_api_timer_t *t);
int fd_api_timer_is_set(const fd_api_timer_t *t);

/* work(data) on a thread of the worker's offload pool, then done(data)
 * on the loop: work of the module's own, not a request's. FD_OK, or
 * FD_ERROR when no pool thread can be had. */
int fd_api_offload_call(void *data, void (*work)(void *data),
                        void (*done)(void *data));
/* Whether the caller runs on a pool thread (a blocking handler's). */
int fd_api_on_pool_thread(void);
/* A 503 the request gets carries Retry-After (the database is down). */
void fd_resp_retry_after(fd_request_t *r);
/* The answer is a limit's refusal (a queue full, a rate): a gRPC client
 * reads RESOURCE_EXHAUSTED whatever its status. */
void fd_resp_refused(fd_request_t *r);

/* fastd -t: the configuration is checked, nothing is made on disk. */
int fd_api_conf_test(void);
/* From init_conf, a section's init or configured: 1 when the workers of
 * this configuration run as another user than the master (a root
 * master's user =), whose uid and gid are set then; 0 when they run as
 * the master. What the master makes for them (a database's file) is given
 * to that user. */
int fd_api_conf_user(uid_t *uid, gid_t *gid, const char **name);
/* mkdir -p path (mode): FD_OK, or FD_ERROR with errno. *made: the offset
 * in path of the first directory it made, -1 when none. */
int fd_api_mkdirs(const char *path, mode_t mode, long *made);

/* --- 1.4: response filters --------------------------------------------------- */

/* The response as it stands, for a filter: its status; its type; the
 * i-th header named name (0: the first; data NULL past the last); whether
 * the body is streamed (it follows the header in pieces: a proxied one)
 * rather than complete; whether it has no body (a HEAD, 204, 304: the
 * length says what a GET would send); its length (-1: not known). */
int fd_resp_get_status(fd_request_t *r);
fd_str_t fd_resp_get_content_type(fd_request_t *r);
fd_str_t fd_resp_get_header(fd_request_t *r, const char *name, unsigned i);
int fd_resp_is_streamed(fd_request_t *r);
int fd_resp_is_header_only(fd_request_t *r);
int64_t fd_resp_get_length(fd_request_t *r);
/* The headers named name taken away (the number taken). */
unsigned fd_resp_remove_header(fd_request_t *r, const char *name);
/* The body is transformed (compressed): its validator becomes weak, "W/"
 * before a strong ETag, fastd's own or a header's. FD_OK or FD_ERROR. */
int fd_resp_weaken_etag(fd_request_t *r);
/* The length becomes unknown: no Content-Length is sent (a HEAD of what
 * only a GET would know the length of, once compressed). */
void fd_resp_length_unknown(fd_request_t *r);

/* A piece of a body: bytes in memory, or a file's range (fd >= 0: len
 * bytes at offset; data NULL). */
typedef struct {
    const char *data;
    size_t len;
    int fd;
    int64_t offset;
} fd_api_piece_t;
/* A complete body's pieces, the first max into p: how many there are. */
unsigned fd_resp_get_pieces(fd_request_t *r, fd_api_piece_t *p,
                            unsigned max);
/*
 * A body filter: filter(r, in, n, last) gets each call's pieces of the
 * body (a streamed one's fd_resp_write()s, the proxy's reads; or a
 * complete one the engine feeds from memory and files as the client takes
 * it) and passes on what it makes of them with fd_resp_filter_output()
 * (copied); last = 1 ends the body. A streamed body's every call is a
 * flush point: what came must be on its way when filter returns (a
 * complete one's need not). FD_OK, or FD_ERROR (the response is cut).
 * fd_resp_body_filter() from a response filter sets it: the length then
 * is unknown (chunked over HTTP/1.1). Body filters chain, up to four, in
 * the order the response filters set them (module order: sub_filter's
 * before gzip's): what one passes on is gathered and given to the next as
 * one piece when it returns, one call for one call. FD_OK, or
 * FD_DECLINED when the chain is full or the engine transforms the body
 * itself. fd_resp_has_body_filter(): one is set (the body will not be
 * the one fd_resp_get_pieces() shows).
 */
typedef int (*fd_api_body_filter_pt)(fd_request_t *r,
                                     const fd_api_piece_t *in, unsigned n,
                                     int last);
int fd_resp_body_filter(fd_request_t *r, fd_api_body_filter_pt filter);
int fd_resp_has_body_filter(fd_request_t *r);
int fd_resp_filter_output(fd_request_t *r, const void *data, size_t len);
/* Drops the response's validators, Last-Modified and ETag (the body is
 * another than the one they name: sub_filter). */
void fd_resp_remove_validators(fd_request_t *r);

/* The content codings the client takes among offered (FD_API_ENC_*), the
 * one it prefers (br before gzip at equal q), or 0 for none. */
#define FD_API_ENC_GZIP 0x1
#define FD_API_ENC_BR 0x2
unsigned fd_req_accept_encoding(fd_request_t *r, unsigned offered);

/* --- 1.4: logs of a module's own -------------------------------------------- */

/* The module's configuration for the request's location, or, for a
 * request refused before it was routed (a 400), its server's: the
 * [http] and [server] keys (fd_req_conf_of() is NULL then). For a log
 * hook. */
void *fd_req_log_conf_of(fd_request_t *r, const fd_api_module_t *self);
/* Whether fastd has the variable name (without the "$"): a module's
 * default format names the proxy's only when it is built in. */
int fd_api_var_exists(const char *name);
/* fn(conf, data) for the module's configuration of every location of the
 * running configuration (each server's own keys, then its locations),
 * from init_worker: the files a log hook writes, say. */
void fd_api_loc_each(const fd_api_module_t *self,
                     void (*fn)(void *conf, void *data), void *data);
/* From init_conf or set: path (absolute, as fd_api_conf_path() makes it)
 * is a file the workers open to append to. A root master whose workers
 * run as another user creates it and gives it to that user, at start, at
 * a reload and before each reopen (SIGUSR1), so that a worker can open it
 * in a directory of root's (logs/); a failure is the worker's to report
 * when it opens the file. Never a terminal or a pipe (O_NOFOLLOW, a
 * regular file only). FD_OK or FD_ERROR (out of memory). */
int fd_api_conf_worker_file(const char *path);
/* From init_conf or a section's init: key's value v (in conf) within
 * [min, max], or the error fastd's own keys give, at the key's line
 * ("pool" must be 1 .. 1024, not "0"); msec: v is a duration in ms;
 * 1.5: msec = FD_API_SIZE, v is a size in bytes, written as fastd's own
 * size keys write it ("size" must be 64k .. 1g, not "32k"). FD_OK or
 * FD_ERROR. */
int fd_api_conf_bounds(const void *conf, const char *key, int64_t v,
                       int64_t min, int64_t max, int msec);
/* A size (512, 8k, 1m) or a duration (500ms, 75s, 1m30s, in ms) as keys
 * take them, for a key the module parses: -1 when it is none. */
int64_t fd_api_parse_size(const char *s);
int64_t fd_api_parse_msec(const char *s);

/* --- 1.5: shared memory, hashing, scripts whole, enums, Redis ------------- */

/*
 * A zone of shared memory every worker maps (a table of counters all of
 * them update: limit_req's buckets). From init_conf, set or a section's
 * init, in the master while it loads a configuration: the workers it
 * forks then inherit it. size bytes, zeroed when new (*fresh = 1); a
 * reload that asks again for the module's zone of the same name and size
 * gets the same memory, its contents kept (*fresh = 0): the state goes
 * on across the reload, shared by old and new workers while the old ones
 * finish. Another size is another zone, zeroed. A zone is never unmapped
 * (one a reload drops stays with the master, found whole if a later
 * reload asks for it again): a few a module, not one a request. NULL,
 * with errno, when it cannot be mapped. fresh may be NULL.
 *
 * The workers touch it concurrently: atomics, or a spin lock of the
 * zone's (a uint32_t, 0 when free, as a fresh zone's are) held for a few
 * loads and stores, never across a call that may wait;
 * fd_api_shm_lock() spins, and yields the CPU now and then (the holder
 * was preempted). A worker that dies holding one leaves it held: keep
 * the locked code to plain memory accesses.
 */
void *fd_api_shm_zone(const fd_api_module_t *self, const char *name,
                      size_t size, int *fresh);
void fd_api_shm_lock_slow(uint32_t *lock);
static inline void fd_api_shm_lock(uint32_t *lock)
{
    if (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
        fd_api_shm_lock_slow(lock);
}
static inline void fd_api_shm_unlock(uint32_t *lock)
{
    __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

/* SipHash-2-4 of data with a 128-bit key (random, kept with the table it
 * places keys in, so that a client cannot aim its keys at one bucket). */
uint64_t fd_api_siphash(const uint64_t key[2], const void *data, size_t n);

/* n random bytes (getrandom(); should the kernel have none, bytes made
 * of the time, the pid and buf's address): a hash's key, kept with the
 * table it places keys in (fd_api_shm_zone's fresh). */
void fd_api_random(void *buf, size_t n);

/* For retire(): folds area's n entries of size bytes, each a NUL-ended
 * name of name_size bytes (a multiple of 8) then uint64_t counters to the
 * entry's end, into retired's entries of the same names
 * (fd_api_status_named_entry); an entry with an empty name is skipped.
 * For entries of counters only: a gauge is not to be added up. */
void fd_api_status_fold(void *retired, const void *area, size_t size,
                        unsigned n, size_t name_size);

/* A script's whole value for r (fd_api_script_compile): its parts one
 * after the other, none escaped; a script of one variable gives that
 * variable's value as fd_req_script_value() does (in memory of r's or in
 * tmp, FD_API_VAR_TMP bytes of the caller's), others are made in memory
 * that lives as long as r, however long. FD_OK, or FD_ERROR when out of
 * memory. A key a request is counted by (limit_req's key =). */
int fd_req_script_eval(fd_request_t *r, const fd_api_script_t *s,
                       const fd_api_captures_t *caps, char *tmp,
                       fd_str_t *out);

/* 1 the first time the module asks about r, 0 after: whatever locations
 * a rewrite moves r to and however often its access phase runs, what the
 * module does once a request (limit_req counts a request once). A bit of
 * the request's: no memory, a few instructions. */
int fd_req_first(fd_request_t *r, const fd_api_module_t *self);

/* From init_conf or a section's init: key's value (in conf) among names
 * (ended by NULL): its index, or FD_ERROR after the error fastd's own
 * keys give, at the key's line ("store" must be one of local | redis,
 * not "x", with a "did you mean"). */
int fd_api_conf_enum(const void *conf, const char *key, const char *value,
                     const char *const *names);

/*
 * The [cluster]'s Redis, the store a fleet of fastd instances shares
 * (modules/fd_cluster_module.c keeps the worker's client): a feature that
 * keeps its state there sends commands and is answered on the loop, once,
 * within [cluster] timeout, by a reply or by FD_API_REDIS_FAIL (down,
 * busy, timed out, a broken connection), whereupon it applies its own
 * policy. fd_api_cluster_configured(), from configured(): whether the
 * configuration being loaded has a [cluster]. fd_api_redis_command()
 * queues argv (argc strings of len bytes) as one command, sent with the
 * others of this loop turn in one write; NULL when it is not sent (no
 * [cluster], no connection up, too many waiting), and done is not called:
 * answer by the policy now. done(data, reply): the reply lives until it
 * returns. fd_api_redis_cancel(): done will not be called (the request
 * that waited is gone).
 */
enum {
    FD_API_REDIS_FAIL = 0,   /* no answer: str says why */
    FD_API_REDIS_INT,
    FD_API_REDIS_STR,        /* a bulk or status string */
    FD_API_REDIS_NIL,
    FD_API_REDIS_ERR,        /* an error reply: "NOSCRIPT ...", "ERR ..." */
    FD_API_REDIS_OTHER       /* an array */
};
typedef struct {
    int type;
    long long integer;       /* INT */
    fd_str_t str;            /* STR, ERR, and FAIL's reason */
} fd_api_redis_reply_t;
typedef struct fd_api_redis_cmd_s fd_api_redis_cmd_t;
int fd_api_cluster_configured(void);
fd_api_redis_cmd_t *fd_api_redis_command(
    int argc, const char **argv, const size_t *len,
    void (*done)(void *data, const fd_api_redis_reply_t *reply),
    void *data);
void fd_api_redis_cancel(fd_api_redis_cmd_t *c);

/* --- 1.6: the server's figures, a string builder ---------------------------- */

/* The version of the running fastd ("0.1.0"), not the API's. */
const char *fd_api_fastd_version(void);

/* The i-th request header named name (any case; 0: the first), as
 * fd_req_header() the first: data NULL past the last (a request may
 * carry several Accept headers). */
fd_str_t fd_req_header_at(fd_request_t *r, const char *name, unsigned i);

/*
 * A string builder in the request's memory, what a document of any length
 * is written with: fd_req_sbuf(r, cap) makes one (cap: a first capacity,
 * a hint; it grows, doubling; NULL when out of memory). The appends never
 * fail one by one: once memory runs out they do nothing, and
 * fd_api_sbuf_failed() says so once, at the end. fd_api_sbuf_str() is
 * what was written, in memory that lives as long as the request: a body
 * for fd_resp_body_static(), not copied. add_json writes a JSON string's
 * contents (no quotes: '"', '\\' and controls escaped); printf is for
 * cold paths.
 */
typedef struct fd_api_sbuf_s fd_api_sbuf_t;
fd_api_sbuf_t *fd_req_sbuf(fd_request_t *r, size_t cap);
void fd_api_sbuf_add(fd_api_sbuf_t *sb, const void *data, size_t n);
void fd_api_sbuf_addc(fd_api_sbuf_t *sb, char c);
void fd_api_sbuf_add_uint(fd_api_sbuf_t *sb, uint64_t v);
void fd_api_sbuf_add_json(fd_api_sbuf_t *sb, const char *s, size_t n);
void fd_api_sbuf_printf(fd_api_sbuf_t *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int fd_api_sbuf_failed(const fd_api_sbuf_t *sb);
fd_str_t fd_api_sbuf_str(const fd_api_sbuf_t *sb);

/*
 * The server's figures, what a status page shows (the status module's
 * /status): fd_req_figures(r, &f) takes a consistent copy of every
 * worker's slot of the shared memory, with the folded counters of exited
 * workers, and gathers fastd's own figures and every module's (their
 * status hooks), in memory that lives as long as the request. FD_OK, 503
 * when there is no shared memory (fastd -t, a test), 500 when out of
 * memory: the status to answer.
 *
 * The structs below are filled by fastd up to size bytes (pass
 * sizeof(yours)): a later minor version adds fields at their ends only,
 * which a module built for this one does not see.
 */
typedef struct fd_api_figures_s fd_api_figures_t;
int fd_req_figures(fd_request_t *r, const fd_api_figures_t **f);

/* The server: its master, when the copy was taken, its configuration. */
typedef struct {
    uint64_t master_pid;
    uint64_t started_msec;   /* the master's start, wall clock (ms) */
    uint64_t now_msec;       /* when the copy was taken, wall clock (ms) */
    uint64_t generation;     /* configuration generation: +1 a reload */
    const char *profile;     /* the profile applied; "" when none */
    unsigned slots;          /* worker slots 0 .. slots - 1 to look at */
    unsigned workers;        /* worker processes running */
} fd_api_server_info_t;
void fd_api_figures_server(const fd_api_figures_t *f,
                           fd_api_server_info_t *info, size_t size);

/* A worker slot: FD_OK, or FD_DECLINED for a free one (never used, or its
 * worker exited and was folded into the totals) and one past slots. */
typedef struct {
    uint64_t pid;
    uint64_t generation;     /* the configuration it serves */
    uint64_t started_msec;   /* wall clock (ms) */
    int alive;               /* 0: exited, not yet folded */
} fd_api_worker_info_t;
int fd_api_figures_worker(const fd_api_figures_t *f, unsigned slot,
                          fd_api_worker_info_t *info, size_t size);

/*
 * fastd's own figures, of a worker slot or, with FD_API_FIGURES_TOTAL, of
 * all: every counter summed over the slots and the exited workers, the
 * gauges (conn_active .. conn_parked, h2_active) over the live workers.
 * An exited worker's gauges are its last. FD_OK, or FD_DECLINED as
 * fd_api_figures_worker().
 */
#define FD_API_FIGURES_TOTAL ((unsigned)-1)
#define FD_API_TLS_FAILURES_MAX 16
typedef struct {
    uint64_t conn_active;    /* gauges: open client connections, */
    uint64_t conn_reading;   /* reading a request, */
    uint64_t conn_writing;   /* writing a response, */
    uint64_t conn_idle;      /* idle keep-alive ones, */
    uint64_t conn_parked;    /* of the idle, parked in the io_uring ring */
    uint64_t conn_accepted;
    uint64_t conn_handled;   /* handled to their end */
    uint64_t requests;
    uint64_t responses[6];   /* [1] .. [5]: 1xx .. 5xx; [0]: other */
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t tls12;          /* TLS handshakes completed, by version */
    uint64_t tls13;
    uint64_t tls_resumed;    /* of those, resumed sessions */
    /* failed TLS handshakes, by reason: fd_api_tls_failure_name(k) */
    uint64_t tls_failed[FD_API_TLS_FAILURES_MAX];
    uint64_t h2_conns;       /* HTTP/2 connections taken (h2 and h2c) */
    uint64_t h2_active;      /* gauge: of those, open */
    uint64_t h2_streams;     /* requests carried by HTTP/2 */
    uint64_t h2_resets;      /* streams the client reset */
    uint64_t h2_goaways;     /* connections ended with GOAWAY for an error */
} fd_api_core_figures_t;
int fd_api_figures_core(const fd_api_figures_t *f, unsigned slot,
                        fd_api_core_figures_t *c, size_t size);
/* The name of TLS failure reason k ("protocol", "no_shared_cipher", ...),
 * NULL past the last. */
const char *fd_api_tls_failure_name(unsigned k);

/*
 * Every figure as a metric, fastd's own (FD_API_METRIC_CORE) and then the
 * modules' (what their status hooks report, fd_api_status_counter()), in
 * the order first reported: fd_api_figures_metrics() is the first,
 * fd_api_metric_next() the one after (NULL after the last). A metric is
 * a name (without "fastd_" and "_total") and a label set (labels "" or
 * k="v" pairs joined by ',', escaped as Prometheus wants); several
 * metrics of one name and other labels make a family. Its total is every
 * worker's, exited ones included; its samples, one a live worker that
 * reported it, in report order: fd_api_metric_sample(m, NULL, ...) is the
 * first, fd_api_metric_sample(m, s, ...) the one after s, each with its
 * worker slot and value (NULL after the last, and for a figure all
 * workers share, which has its total only).
 */
#define FD_API_METRIC_GAUGE 0x1  /* else a counter: it only grows */
#define FD_API_METRIC_CORE 0x2   /* fastd's own: fd_api_figures_core() */
typedef struct fd_api_metric_s fd_api_metric_t;
typedef struct fd_api_sample_s fd_api_sample_t;
const fd_api_metric_t *fd_api_figures_metrics(const fd_api_figures_t *f);
const fd_api_metric_t *fd_api_metric_next(const fd_api_metric_t *m);
const char *fd_api_metric_name(const fd_api_metric_t *m);
const char *fd_api_metric_help(const fd_api_metric_t *m);
const char *fd_api_metric_labels(const fd_api_metric_t *m);
unsigned fd_api_metric_flags(const fd_api_metric_t *m);
uint64_t fd_api_metric_total(const fd_api_metric_t *m);
const fd_api_sample_t *fd_api_metric_sample(const fd_api_metric_t *m,
                                            const fd_api_sample_t *prev,
                                            unsigned *worker, uint64_t *v);

/* --- 1.7: copies of a request in the background (mirror) ---------------- */

/*
 * From an access hook: fn(r) runs once just before r's handler (after an
 * internal redirect, before the new location's handler), every access
 * hook done and, with FD_API_WHOLE_BODY, the request body read whole into
 * memory first, also for a handler that would stream it (it then reads
 * it from there, as usual). fn must not end r. Calls run in the order
 * they were asked for. FD_OK, or FD_ERROR (out of memory).
 */
#define FD_API_WHOLE_BODY 0x1
int fd_req_before_handler(fd_request_t *r, void (*fn)(fd_request_t *r),
                          unsigned flags);
/* Whether r is a subrequest (auth_request's check, a background copy) */
int fd_req_is_subrequest(fd_request_t *r);

/*
 * A copy of r run in the background (nginx's mirror): r's method, target,
 * header, client address and, with FD_API_BG_BODY, its body (read whole:
 * FD_API_WHOLE_BODY above), routed to `to`: a path ("/shadow": the
 * location it matches among r's server's, r's target kept for a proxy
 * that passes it on) or "@name" (that named location of r's server). Its
 * response is read and dropped. The copy owns all it reads, so r may end
 * first, or it may; a graceful stop waits for it (up to
 * shutdown_timeout). done(data, status) runs once when it ends, however
 * it ends: status is its response's, 0 when it ended without one (it was
 * stopped, or failed); the handle is gone after. *bg is set before the
 * copy starts (done may run before this returns, a copy answered at
 * once). FD_OK; FD_DECLINED: no such named location; FD_ERROR: out of
 * memory (done is not called).
 */
typedef struct fd_api_bg_s fd_api_bg_t;
#define FD_API_BG_BODY 0x1
int fd_req_background(fd_request_t *r, fd_str_t to, unsigned flags,
                      void (*done)(void *data, int status), void *data,
                      fd_api_bg_t **bg);
/* Stop a copy (a timeout of the module's): done runs now, or when a
 * handler that cannot be stopped at once ends. why: NULL, or a line
 * logged at info as the copy's (its connection's id). */
void fd_api_bg_stop(fd_api_bg_t *bg, const char *why);

/* From init_conf: name ("@name") must be a [location @name] of the
 * server this location is in. It is checked once every server is read
 * (a named location may come after its users): a missing one refuses
 * the configuration at the line fd_api_conf_at() last named, with
 * "WHAT: no [location @name] in this [server]". FD_OK or FD_ERROR. */
int fd_api_conf_named_location(const char *what, const char *name);

/* --- 1.7: upstream protocols (fastd_upstream.h), and what FastCGI needs --- */

/* Methods a handler takes (fd_api_module_t.methods): those fastd does not
 * name (PROPFIND, ...), and every one (an application behind a gateway
 * decides: FastCGI). */
#define FD_API_OTHER 0x80
#define FD_API_ANY 0xff

/* The request body's length as the client declared it: -1 when it is not
 * known ahead (chunked, or HTTP/2 without content-length), 0 for none. */
int64_t fd_req_content_length(fd_request_t *r);
/* The i-th request header as it came (0: the first): FD_OK with its name
 * and value, or FD_DECLINED past the last. */
int fd_req_header_line(fd_request_t *r, unsigned i, fd_str_t *name,
                       fd_str_t *value);
/* The response's Content-Length (-1: not known, chunked over HTTP/1.1),
 * for a streamed response whose header has not left. */
void fd_resp_content_length(fd_request_t *r, int64_t n);

/*
 * Writing into a string builder (fd_req_sbuf) in place, as protocol bytes
 * are written: fd_api_sbuf_reserve(sb, n, &room) is where at least n bytes
 * may be written at its end (room: how many, >= n: a writer keeps that
 * window and asks again only when it is used up), NULL once out of memory;
 * fd_api_sbuf_commit(sb, end) says what was written there ends at end.
 * fd_api_sbuf_data() is what was written so far, to change in place (a
 * length known once what it counts is written): it moves when the builder
 * grows, at a reserve.
 */
char *fd_api_sbuf_reserve(fd_api_sbuf_t *sb, size_t n, size_t *room);
void fd_api_sbuf_commit(fd_api_sbuf_t *sb, char *end);
char *fd_api_sbuf_data(fd_api_sbuf_t *sb);
/* --- 1.7: files (static) --- */

/*
 * The location's files, as fastd's static files are served. A path of the
 * request's kind (decoded, normalised, "/a/b.html": fd_req_path()) names
 * a file under the location's root, or under its alias; it is opened
 * confined beneath that directory (no "..", no symlink unless
 * follow_symlinks = on), and try_files tests files the same way.
 *
 * fd_api_file_cache(max, valid_ms): an open file cache of this worker's,
 * max descriptors, each used valid_ms before its path is opened again
 * (the first use in a loop turn checks it with fstat(): a file deleted or
 * replaced is opened again). Make one a location, from the handler on the
 * loop (NULL on a pool thread, for max 0, or out of memory), and keep it
 * for the worker's life; the calls below use it on the loop only.
 *
 * fd_req_file_open(r, cache, path, &f): the file path names, open for
 * reading, closed by fastd when r ends: FD_OK with f filled (a regular
 * file or a directory: f.type), or the HTTP status to answer: 404 (none,
 * or a ".." out of an alias), 403 (refused: a symlink, no permission,
 * neither a file nor a directory), 500 (logged).
 *
 * fd_req_file_index(r, cache): for a path ending in '/', the location's
 * index files (index =) in that directory: the first that exists is an
 * internal redirect to path + its name, and FD_DECLINED is returned,
 * which the handler returns (its location is chosen again: an index.php
 * runs where PHP runs). FD_OK: none exists, or the path is no directory's;
 * else an HTTP status (403: the index is not a regular file).
 *
 * fd_req_file_variant(r, cache, &f, codings, always): a precompressed
 * variant of the regular file f (as fd_req_file_open() filled it: its
 * path has room for the suffix), FILE.br or FILE.gz (codings:
 * FD_API_ENC_BR | FD_API_ENC_GZIP), in the order the client's
 * Accept-Encoding prefers (always: whatever it says, .gz first), that is
 * a regular file not older than FILE: f becomes it (f.path stays FILE's,
 * for its type; f.coding says which) and the coding is returned; 0: none
 * (f unchanged); FD_ERROR: out of memory. Add Vary: Accept-Encoding
 * yourself when the answer depends on the client's.
 *
 * fd_resp_file_send(r, &f, flags, max_ranges): f as the response, with
 * its Content-Encoding (a variant's), Last-Modified, with FD_API_FILE_ETAG
 * an ETag ("mtime-size" in hex as nginx's, a variant's with "-coding"),
 * and what the client's If-Match, If-None-Match, If-Modified-Since,
 * If-Unmodified-Since, Range and If-Range make of it (304, 412, 206 with
 * up to max_ranges ranges, several as multipart/byteranges, at most 64;
 * 0: none; 416), sent with sendfile(). Set the content type before.
 * FD_OK or an HTTP status.
 *
 * fd_resp_redirect_slash(r): 301 to the request's path with a '/' added,
 * the query kept (a directory asked for without it). FD_OK or 500.
 *
 * fd_req_file_list(r, path, max, max_names, &d): the directory path
 * names, read into r's memory: its entries but the hidden ones (a name
 * beginning with '.') and those that could not be served (a symlink,
 * unless follow_symlinks; neither a file nor a directory), directories
 * first, then files, each sorted by name (bytes); past max entries or
 * max_names bytes of names the rest is counted in d.cut, not listed.
 * FD_OK, or an HTTP status (404, 403, 500).
 *
 * fd_api_file_t, fd_api_dirent_t and fd_api_dir_t are fastd's to fill
 * and laid out for good in major version 1: a later minor version does
 * not grow them (it adds calls), so that a module's own stay as large.
 */
#define FD_API_FILE_REG 1
#define FD_API_FILE_DIR 2
#define FD_API_FILE_ETAG 0x1
typedef struct fd_api_file_cache_s fd_api_file_cache_t;
typedef struct {
    int fd;
    unsigned type;           /* FD_API_FILE_REG, FD_API_FILE_DIR */
    int64_t size;
    int64_t mtime;           /* seconds since the epoch */
    unsigned coding;         /* a variant's: FD_API_ENC_*; 0: the file */
    fd_str_t path;           /* on disk, NUL-ended, in r's memory */
    size_t base;             /* path's first base bytes: root or alias */
} fd_api_file_t;
typedef struct {
    fd_str_t name;           /* not NUL-ended */
    int dir;                 /* a directory, else a regular file */
    int64_t size;
    int64_t mtime;
} fd_api_dirent_t;
typedef struct {
    fd_api_dirent_t *entries;
    size_t n;
    size_t cut;              /* entries past the limits, not listed */
} fd_api_dir_t;
fd_api_file_cache_t *fd_api_file_cache(unsigned max, uint64_t valid_ms);
int fd_req_file_open(fd_request_t *r, fd_api_file_cache_t *cache,
                     fd_str_t path, fd_api_file_t *f);
int fd_req_file_index(fd_request_t *r, fd_api_file_cache_t *cache);
int fd_req_file_variant(fd_request_t *r, fd_api_file_cache_t *cache,
                        fd_api_file_t *f, unsigned codings, int always);
int fd_resp_file_send(fd_request_t *r, const fd_api_file_t *f,
                      unsigned flags, unsigned max_ranges);
int fd_resp_redirect_slash(fd_request_t *r);
int fd_req_file_list(fd_request_t *r, fd_str_t path, size_t max,
                     size_t max_names, fd_api_dir_t *d);

/* --- 1.7: the fleet's Redis client as a module (cluster) --- */

/*
 * A section without a name, [TYPE] alone and at most once (the fleet's
 * [cluster]): fd_api_section_t.name_max = FD_API_SECTION_UNNAMED. [TYPE
 * NAME] is then refused ("takes no name"), a second [TYPE] too, and the
 * section's name is "" (init's, fd_api_section(type, ""),
 * fd_api_section_each()). Read so for a module built for 1.7 or later; an
 * older module's name_max keeps its meaning.
 */
#define FD_API_SECTION_UNNAMED ((size_t)-1)

/*
 * The client behind fd_api_redis_command(), which a module provides (the
 * cluster module's, one a worker): from init_worker,
 * fd_api_redis_provide(&ops) makes ops what fastd's own features (TLS
 * session ticket keys, ACME's challenges) and every module's
 * fd_api_redis_command() and fd_api_redis_cancel() call, with their
 * contract (above: NULL when not sent, done once, within the timeout);
 * from exit_worker, fd_api_redis_provide(NULL) takes it back. ops is kept,
 * not copied (a static const), and this struct never grows: a later
 * version adds a call, not a field. FD_OK; FD_DECLINED: another client is
 * provided already. The provider defines struct fd_api_redis_cmd_s.
 */
typedef struct {
    fd_api_redis_cmd_t *(*command)(
        int argc, const char **argv, const size_t *len,
        void (*done)(void *data, const fd_api_redis_reply_t *reply),
        void *data);
    void (*cancel)(fd_api_redis_cmd_t *c);
} fd_api_redis_ops_t;
int fd_api_redis_provide(const fd_api_redis_ops_t *ops);

/*
 * The Redis servers, in the order they are tried, and the timeout: from a
 * section's init, fd_api_redis_addrs_set() hands them to the configuration
 * being loaded (copied into its memory), where fastd's processes that
 * talk to Redis off the loop find them (ACME's helper, with a blocking
 * client of its own), and it is what fd_api_cluster_configured() says.
 * At most FD_API_REDIS_ADDRS, each a resolved address (sa, len bytes: a
 * struct sockaddr_in, _in6 or _un). Once a configuration. FD_OK, or
 * FD_ERROR after fd_api_conf_error().
 */
#define FD_API_REDIS_ADDRS 8
typedef struct {
    const void *sa;          /* a struct sockaddr of len bytes */
    unsigned len;
    const char *password;    /* AUTH, or NULL */
    int db;                  /* SELECT, when not 0 */
    const char *name;        /* for the log: host:port, unix:PATH */
} fd_api_redis_addr_t;
int fd_api_redis_addrs_set(const fd_api_redis_addr_t *addrs, unsigned n,
                           uint64_t timeout_msec);

/* --- 1.8: a helper process, the worker's number, the master (acme) --- */

/*
 * A process of the module's beside the workers, for work that may block
 * and must be done once an instance, not once a worker (ACME's orders).
 * From a section's init, configured() or fastd_tls.h's attach, in the
 * master while it loads a configuration (not at -t: fd_api_conf_test()):
 * when that configuration's workers run, the
 * master forks the helper; h->init(h->data) runs in it, then h->tick(
 * h->data) every h->interval_msec (it may block: the helper has no
 * loop to keep, nor requests). The helper has the master's user, its
 * name in ps is h->title, it holds no listening socket, and SIGUSR1
 * (fastd -s reopen) reopens its error log between two ticks. A reload
 * stops it (SIGTERM) and forks the new configuration's; one that exits
 * is forked again, unless it exits within 2 s of its start (logged: not
 * again until a reload). fd_api_log() writes to the error log. h and
 * what h->data points to must live as long as the configuration (its
 * memory: fd_api_conf_alloc, a section's struct, or a static const). One
 * a module and configuration: asked again with the same *h, FD_OK and
 * nothing more. FD_OK, or FD_ERROR after fd_api_conf_error().
 */
typedef struct {
    const char *title;              /* "acme helper" */
    uint64_t interval_msec;         /* between two ticks (0: 1000) */
    int (*init)(void *data);        /* FD_OK; else it exits (code 2) */
    void (*tick)(void *data);
    void *data;
} fd_api_helper_t;
int fd_api_helper(const fd_api_module_t *self, const fd_api_helper_t *h);

/* From init_worker: this worker's requests go through the modules' early
 * hooks (fd_api_module_t.early); a worker where no module asks pays
 * nothing for them. */
void fd_api_early_on(void);

/* This worker's number, 0 to workers - 1 (a respawned worker has its
 * predecessor's): the one worker that does a thing for all (copies the
 * fleet's state into a shared zone). -1 outside a worker. */
int fd_api_worker_number(void);

/* The running master's process id as the pid file has it ([main] pid),
 * for fastd -s's command(); -1 (errno set) when it cannot be read. */
long fd_api_master_pid(void);

/* The [cluster]'s Redis servers of the configuration the caller runs in
 * (the helper's, a worker's, the one loading), for a client of its own
 * off the loop (a helper's blocking one): up to max of them into addrs,
 * in the order they are tried, and the timeout. How many there are; 0:
 * no [cluster]. What addrs points to lives as long as the
 * configuration. */
unsigned fd_api_redis_addrs(fd_api_redis_addr_t *addrs, unsigned max,
                            uint64_t *timeout_msec);

/* --- 1.9: what a cache of the module's needs (the proxy's, issue 41) --- */

/*
 * The [location] being configured, from init_conf: its text as written
 * after the modifier ("/app/" of [location /app/], "\.php$" of
 * [location ~ \.php$], "@fallback" of [location @fallback]) into *match,
 * which lives as long as the configuration, and its kind, FD_API_LOC_*;
 * a [server]'s own configuration (what answers the requests none of its
 * locations takes) is the prefix "/". FD_OK, or FD_DECLINED outside an
 * init_conf.
 */
enum {
    FD_API_LOC_EXACT = 1,      /* = /x */
    FD_API_LOC_PREFIX,         /* /x */
    FD_API_LOC_PREFIX_STOP,    /* ^~ /x */
    FD_API_LOC_REGEX,          /* ~ re */
    FD_API_LOC_REGEX_CASELESS, /* ~* re */
    FD_API_LOC_NAMED           /* @name */
};
int fd_api_conf_location(fd_str_t *match, int *kind);

/*
 * A directory the workers write in (a cache's files), from init_conf, set
 * or a section's init: path (absolute) is made, with its missing parents,
 * mode 0700, at -t too; when the master runs as root and its workers as
 * [main] user, those it made are given to that user once the whole
 * configuration is read, before a worker starts (so that -t followed by a
 * start, or a reload, leaves none of them root's). A directory that was
 * there already keeps its owner: it is the administrator's. FD_OK, or
 * FD_ERROR after fd_api_conf_error() (the mkdir's errno said).
 */
int fd_api_conf_worker_dir(const char *path);

/*
 * A response the module stored (a cache's entry: its status, its fields,
 * then its body in a file), answered again; from a handler, or what goes
 * on from it on the loop, before the header is sent.
 *
 * fd_resp_validators(r, etag, last_modified): the representation's ETag
 * (as stored, quotes and all; not copied: it lives as long as r; len 0:
 * none) and Last-Modified (seconds since the epoch; -1: none), which
 * fastd writes (a 304's too) and checks the client's conditionals
 * against.
 *
 * fd_resp_fd_send(r, fd, offset, size, max_ranges): bytes [offset,
 * offset + size) of fd as a 200, with what the client's If-Match,
 * If-None-Match, If-Modified-Since, If-Unmodified-Since and, for a GET,
 * Range (at most max_ranges, at most 64; 0: none) make of it, as
 * fd_resp_file_send() does for a file: 304, 206, 416, Accept-Ranges;
 * sent with sendfile(), a body for a GET only. FD_OK, or an HTTP status
 * the module answers (412: fd_resp_reset() first, the entry's fields are
 * not the answer's; 500).
 *
 * fd_resp_fd_body(r, fd, offset, size): those bytes as the body of the
 * status set (a stored 404's), Content-Length size, no conditionals; no
 * body for a response that has none (HEAD). FD_OK or FD_ERROR.
 *
 * fd sends from the loop after the handler returns: keep it open until r
 * ends (fd_req_cleanup).
 *
 * fd_resp_reset(r): the response set so far, not sent, undone: status,
 * fields and trailers, type, length, validators, body and
 * fd_resp_own_server() (an entry that turned out unusable halfway, and
 * the request goes on elsewhere).
 *
 * fd_resp_field_next(r, &it, &name, &value): the response's fields as
 * set so far, in order (not its type nor its length: fd_resp_get_*), to
 * store it; it NULL to begin, 1 with the next one in name and value, 0
 * after the last.
 *
 * fd_api_http_time(s, n): an HTTP date (RFC 9110 5.6.7: IMF-fixdate, RFC
 * 850 or asctime) in seconds since the epoch, -1 when it is none (an
 * Expires, a Last-Modified of the stored response's).
 */
void fd_resp_validators(fd_request_t *r, fd_str_t etag,
                        int64_t last_modified);
int fd_resp_fd_send(fd_request_t *r, int fd, int64_t offset, int64_t size,
                    unsigned max_ranges);
int fd_resp_fd_body(fd_request_t *r, int fd, int64_t offset, int64_t size);
void fd_resp_reset(fd_request_t *r);
int fd_resp_field_next(fd_request_t *r, const void **it, fd_str_t *name,
                       fd_str_t *value);
int64_t fd_api_http_time(const char *s, size_t n);

/* --- 1.9: a response sent before the request ends (the proxy's cache) --- */

/*
 * fd_resp_send_early(r): the response set so far goes to the client now,
 * whole, and the request goes on (a cache's stale entry answered while
 * the module updates it): the module ends r later, from the loop, with
 * fd_api_finish(), whose result sends nothing more. Over HTTP/1.1 the
 * connection takes its next request only then; over HTTP/2 and HTTP/3
 * the stream ends at once and the request outlives it. From a handler
 * that then returns FD_AGAIN, before the header is sent; nothing for a
 * subrequest (its response is its end).
 */
void fd_resp_send_early(fd_request_t *r);

/* 1 when r's location is handled by the module self (handler = its name,
 * or one of its handlers' names), 0 otherwise: a module's variable or
 * hook that reads its handler's per-request state asks first. A compare,
 * no lookup. */
int fd_req_handler_is(fd_request_t *r, const fd_api_module_t *self);

#ifdef __cplusplus
}
#endif

#endif /* FASTD_H */
