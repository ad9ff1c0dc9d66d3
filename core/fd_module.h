#ifndef FD_MODULE_H
#define FD_MODULE_H

#include "fd_conf.h"

typedef struct fd_status_s fd_status_t;

typedef int (*fd_handler_pt)(fd_request_t *r);
/*
 * Header filter: called for every response of a location where the module
 * is active (loc_active) before its header is written;
 * may rewrite status and headers. A complete response (r->streamed = 0)
 * holds its whole body in r->out, which the filter may replace, or hand
 * to a body filter (r->body_filter, with r->content_length = -1): the
 * engine then sends it as a streamed one, chunked (close-delimited for
 * HTTP/1.0), and feeds r->out through the filter in pieces as the output
 * drains, a bounded amount a loop turn over all such responses. A
 * streamed one (fd_http_send_header / fd_http_output) has no body yet:
 * the filter may set r->body_filter to transform the pieces as they come.
 */
typedef int (*fd_filter_pt)(fd_request_t *r);
/*
 * Body filter (r->body_filter): takes each piece handed to
 * fd_http_output() (or fed by the engine from a complete body) and queues
 * what it makes of it with fd_http_output_body(); last = 1 ends the body.
 * A streamed response's every call is a flush point: what the producer
 * gave must be on its way (queued) when the filter returns; the pieces of
 * a complete body need not be. FD_OK or FD_ERROR (the response is cut).
 */
typedef int (*fd_body_filter_pt)(fd_request_t *r, fd_buf_t *in, int last);

/* Module flags */
#define FD_MODULE_THREAD_SAFE 0x1  /* handler may run on an offload thread */
#define FD_MODULE_STREAM_BODY 0x2  /* handler pulls the request body itself */
#define FD_MODULE_BLOCKING 0x4     /* handler may block: always on the pool */
#define FD_MODULE_TUNNEL 0x8       /* handler may answer an HTTP/2 extended
                                    * CONNECT (r->in.ext_connect) with a
                                    * tunnel; other handlers never see one */

/*
 * The methods a handler implements (fd_module_t.methods): one bit per
 * method id of fd_http_parse.h, and FD_METHOD_OTHER for every other token
 * method. The engine checks them after the access phase, for the final
 * location, before the body is read: a method the handler does not take
 * is answered for it, 405 with an Allow header listing the mask, or 501
 * for a method fastd does not know (RFC 9110 15.5.6, 15.6.2). TRACE and
 * CONNECT are 405 before routing whatever a handler says, as in nginx.
 * 0 means FD_METHODS_GET.
 */
#define FD_METHOD(id) (1u << (id))
#define FD_METHOD_OTHER FD_METHOD(FD_HTTP_UNKNOWN)
#define FD_METHODS_GET (FD_METHOD(FD_HTTP_GET) | FD_METHOD(FD_HTTP_HEAD))
#define FD_METHODS_ANY                                                       \
    (FD_METHODS_GET | FD_METHOD(FD_HTTP_POST) | FD_METHOD(FD_HTTP_PUT) |     \
     FD_METHOD(FD_HTTP_DELETE) | FD_METHOD(FD_HTTP_OPTIONS) |                \
     FD_METHOD(FD_HTTP_PATCH) | FD_METHOD_OTHER)

/*
 * A module is one file and one descriptor; the core never names a module.
 * Location keys (directives) get a per-location conf block of conf_size,
 * found with fd_loc_conf(loc, &module). A module may also own a named
 * section type ([upstream NAME], [queue NAME]).
 */
/* The location-config part of a module's descriptor, in one line:
 * fd_module_t fd_x_module = {FD_MODULE_LOC(x, x_conf_t), ...}; needs
 * x_directives and x_init_conf. */
#define FD_MODULE_LOC(nm, conf_type)                                         \
    .name = #nm, .directives = nm##_directives,                              \
    .conf_size = sizeof(conf_type), .init_conf = nm##_init_conf

struct fd_module_s {
    const char *name;                 /* "proxy": the handler = value */
    const fd_directive_t *directives; /* location keys, with types */
    size_t conf_size;                 /* its per-location config */
    int (*init_conf)(fd_conf_t *cf, fd_http_loc_t *loc, void *conf);
    int (*init_worker)(fd_worker_t *w);
    void (*exit_worker)(fd_worker_t *w);
    /* produces the response: FD_OK, FD_AGAIN, an HTTP status, or
     * FD_DECLINED after fd_http_internal_redirect() (the new location's
     * access phase and handler then run) */
    fd_handler_pt handler;
    fd_filter_pt filter;              /* optional: rewrites responses */
    unsigned flags;
    unsigned methods;                 /* FD_METHOD() bits the handler takes */

    const char *section;              /* "upstream": owns [upstream NAME] */
    const fd_directive_t *section_directives;
    size_t section_size;
    int (*init_section)(fd_conf_t *cf, const char *name, void *conf);
    /* Optional: called for each of its [section NAME] headers before any
     * section is applied, to declare the $variables it makes
     * (fd_var_declare): every section may then use them, whatever their
     * order in the file. */
    int (*declare_section)(fd_conf_t *cf, const char *name);
    /* A second section type of this module ([cache NAME] beside the
     * proxy's [upstream NAME]): a descriptor of which only section,
     * section_directives, section_size and init_section are read. Its
     * sections' ->module is that descriptor. */
    const struct fd_module_s *also;
    /* The section is one, without a name ([cluster]): found as "" */
    unsigned section_unnamed;
    /* After the whole file is applied (resolve names, check references). */
    int (*init_cycle)(fd_conf_t *cf, fd_cycle_t *cycle);

    size_t shm_size;                  /* bytes of each worker stats slot */
    /* Report the module's figures of one worker slot (see fd_status.h). */
    void (*status)(fd_status_t *st, const void *area, unsigned worker);
    /* Report the figures of what all workers share, once (fd_status.h). */
    void (*status_shared)(fd_status_t *st);
    /* Master: fold an exited worker's monotonic counters into retired. */
    void (*retire)(void *retired_area, const void *area);
    /* Called on the loop once per finished request (access log). */
    void (*log)(fd_request_t *r);
    /* Worker, on SIGUSR1 (fastd -s reopen): reopen the module's files. */
    void (*reopen)(fd_worker_t *w);
    /*
     * Access phase: called for every request, in module order, before the
     * location's handler runs and before a buffered request body is read
     * (fd_http_run_handler() reads it first). FD_OK: go on; FD_AGAIN:
     * the module holds the request and later calls fd_http_run_handler(r)
     * (or fd_request_finish() to answer it) from the loop; FD_DONE: the
     * module set the response in r; an HTTP status >= 400: that error
     * page.
     */
    int (*access)(fd_request_t *r);
    /*
     * Whether the access and filter hooks have anything to do in a
     * location (its conf after init_conf): the engine runs, per location,
     * only the hooks of the modules that say so. NULL: always.
     */
    int (*loc_active)(const fd_http_loc_t *loc);
    /* Its $variables (fd_var.h), FD_VAR_END-ended; NULL: none. */
    const struct fd_var_s *vars;
    /*
     * Before routing (after the path is normalised), for every request on
     * every server: FD_DECLINED goes on to the locations; FD_OK: the
     * module set the whole response in r (ACME's http-01 answers, which
     * no location may shadow). NULL: none. Called only in a worker where
     * some module's init_worker set fd_http_early_on (below): requests
     * pay nothing for a hook with no work.
     */
    int (*early)(fd_request_t *r);
    /* fastd -s CMD ARG for a command no signal names ("renew NAME"):
     * FD_OK done, FD_DECLINED not this module's, FD_ERROR (said on
     * stderr). Runs in the fastd that was asked, not the master. */
    int (*command)(fd_cycle_t *cycle, const char *cmd, const char *arg);

    unsigned index;                   /* set at startup: position in list */
};

/* Cleared before the modules' init_worker; set by one whose early hook
 * has work in this worker (fd_http.c). */
extern int fd_http_early_on;

/* objs/fd_modules.c's built-in ones, then those [main] load_module adds
 * (fd_dso.c, at most FD_DSO_MAX): NULL-ended */
extern fd_module_t **fd_modules;
extern fd_module_t *fd_builtin_modules[];
/* [main] load_module = FILE: load the module in FILE (fd_dso.c). FD_OK,
 * or FD_ERROR after fd_conf_error() naming the load_module line. */
int fd_dso_load(fd_conf_t *cf, const char *file);
/* The modules of the tree written on the public API (objs/fd_modules.c),
 * NULL-ended; fd_modules_init() adds them to fd_modules as loaded ones. */
extern const fd_api_module_t *const fd_builtin_api_modules[];
/* where each goes in fd_modules: how many engine modules auto/modules
 * lists before it */
extern const unsigned fd_builtin_api_at[];
/* Once, before anything reads fd_modules: numbers the built-in modules
 * and registers those on the public API. FD_ERROR (said on stderr) when
 * one is refused: a build that cannot run. */
int fd_modules_init(void);
/* handler = name, for one of a public-API module's further handlers
 * (fd_api_module_t.handlers): its module, with its function, flags
 * (FD_MODULE_BLOCKING) and methods (FD_METHOD bits); NULL: no such. */
const fd_module_t *fd_dso_handler_find(const char *name, fd_handler_pt *fn,
                                       unsigned *flags, unsigned *methods);
/* The configuration a public-API module runs in outside the workers and
 * the loads: a helper process's (fd_helper.c), fastd -s CMD's; NULL */
extern fd_cycle_t *fd_dso_cycle;
/* The modules' helper processes (fd_api_helper), in the master: start
 * cy's once its workers run (stopping the previous configuration's);
 * reap: 1 when pid was a helper (started again if it should be); reopen:
 * SIGUSR1 to each. */
void fd_helper_start(fd_cycle_t *cy);
int fd_helper_reap(pid_t pid, int status);
void fd_helper_reopen(void);
/* The load whose public-API module's init_conf runs now (a module's
 * fd_db_get() there reads its sections), else NULL */
fd_conf_t *fd_dso_conf(void);
/* cf is the load a public-API module's hook runs in from now (NULL: none
 * after): a hook the engine calls at load outside the modules' own
 * (fastd_tls.h's attach, from fd_ssl_init_cycle) */
void fd_dso_conf_enter(fd_conf_t *cf);
/* ... and the location it configures (1.4: fd_api_conf_regex) */
const fd_http_loc_t *fd_dso_conf_loc(void);
/* m is a public-API module's (built in or loaded) */
int fd_dso_module(const fd_module_t *m);
/* path is a file the workers append to (an access log): a root master
 * makes it for their user (fd_dso_give_files). FD_OK, or out of memory */
int fd_dso_worker_file(fd_conf_t *cf, const char *path);
/* 1.9: path is a directory the workers write in: made now (0700, with
 * its parents), and those made are given to their user
 * (fd_dso_give_dirs). FD_OK, or FD_ERROR with the error in cf */
int fd_dso_worker_dir(fd_conf_t *cf, const char *path);
/* A root master gives the directories fd_dso_worker_dir made to the
 * workers' user, once cy is read (at -t too: a start after it makes them
 * no more). FD_OK, or FD_ERROR with the error in cf */
int fd_dso_give_dirs(fd_conf_t *cf, fd_cycle_t *cy);
/* A root master makes the files the workers of cy append to
 * (fd_api_conf_worker_file) and gives them to their user: at load and
 * before a reopen. Not at -t. */
void fd_dso_give_files(fd_cycle_t *cy);
/* Those handler names, for a "did you mean" hint */
void fd_dso_handler_names(fd_conf_near_t *nr);
/* modules on the public API, built in and loaded: the tree has 23, so a
 * user has 25 (the 64 modules in all of fd_req_first's bits bound it) */
#define FD_DSO_MAX 48
extern unsigned fd_nmodules;

const fd_module_t *fd_module_find(const char *name);

#endif
