/*
 * The core's keys: the tables [main], [events], [http], [offload],
 * [server] and [location] are read through, with their setters and
 * documentation (fastd -k, the README reference). fd_cycle.c loads a
 * configuration through them; modules bring their own tables.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <pwd.h>

#include "fd_core.h"
#include "fd_http.h"

#define MAIN(f) offsetof(fd_main_conf_t, f)
#define EVENTS(f) offsetof(fd_events_conf_t, f)
#define HTTP(f) offsetof(fd_http_conf_t, f)
#define OFFLOAD(f) offsetof(fd_offload_conf_t, f)
#define LOC(f) offsetof(fd_http_loc_t, f)
#define SRV(f) offsetof(fd_http_server_t, f)

static int set_workers(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                       const char *v)
{
    fd_int_t *w = (fd_int_t *)((char *)conf + d->offset);
    int64_t n;

    if (strcmp(v, "auto") == 0) {
        *w = 0;
        return FD_OK;
    }
    n = fd_conf_parse_uint(v, FD_MAX_WORKER_SLOTS);
    if (n < 1 || n > FD_MAX_WORKER_SLOTS / 2)
        return fd_conf_error(cf, "\"workers\" must be auto or 1..%d, not "
                             "\"%s\"", FD_MAX_WORKER_SLOTS / 2, v);
    *w = (fd_int_t)n;
    return FD_OK;
}

static int set_level(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *v)
{
    int l = fd_log_level_parse(v);

    if (l < 0)
        return fd_conf_error(cf, "\"%s\" must be one of debug info notice "
                             "warn error crit alert emerg", d->name);
    *(int *)((char *)conf + d->offset) = l;
    return FD_OK;
}

static int set_path(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    char **p = (char **)((char *)conf + d->offset);

    *p = (*v == '\0' || strcmp(v, "off") == 0 || strcmp(v, "stderr") == 0)
             ? fd_pstrdup(cf->pool, v, strlen(v))
             : fd_conf_path(cf, v);
    return FD_OK;
}

/* load_module: the modules are loaded before any key is applied
 * (fd_cycle_load, fd_dso.c); here the line has nothing more to do */
static int set_load_module(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *v)
{
    (void)cf, (void)d, (void)conf, (void)v;
    return FD_OK;
}

/* ssl_session_ticket_key = FILE [OLD]: 80 bytes from each, read at load
 * (so -t checks them) */
static int set_ticket_key(fd_conf_t *cf, const fd_directive_t *d,
                          void *conf, const char *v)
{
    fd_http_conf_t *h = conf;
    unsigned char *keys = fd_palloc(cf->pool, 160);
    char *names = fd_pstrdup(cf->pool, v, strlen(v)), *save, *name, *path;
    char extra;
    unsigned n = 0;
    FILE *f;
    size_t got;

    (void)d;
    if (keys == NULL || names == NULL)
        return fd_conf_error(cf, "out of memory");
    for (name = strtok_r(names, " \t", &save); name;
         name = strtok_r(NULL, " \t", &save), n++) {
        if (n == 2)
            return fd_conf_error(cf, "ssl_session_ticket_key: two files at "
                                 "most (the key that encrypts, one that "
                                 "still decrypts)");
        path = fd_conf_path(cf, name);
        if (path == NULL || (f = fopen(path, "rb")) == NULL)
            return fd_conf_error(cf, "ssl_session_ticket_key: cannot open "
                                 "\"%s\": %s", name, strerror(errno));
        got = fread(keys + 80 * n, 1, 80, f);
        if (got == 80 && fread(&extra, 1, 1, f) == 1)
            got++;
        fclose(f);
        if (got != 80)
            return fd_conf_error(cf, "ssl_session_ticket_key: \"%s\" is "
                                 "not 80 bytes (openssl rand 80 > FILE; the "
                                 "48-byte form is not taken)", name);
    }
    if (n == 0)
        return fd_conf_error(cf, "ssl_session_ticket_key: FILE [OLD]");
    h->ssl_ticket_keys = keys;
    h->ssl_session_ticket_key.n = n;
    return FD_OK;
}

static int set_user(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    if (getpwnam(v) == NULL)
        return fd_conf_error(cf, "user \"%s\" does not exist", v);
    *(char **)((char *)conf + d->offset) = fd_pstrdup(cf->pool, v, strlen(v));
    return FD_OK;
}

const fd_directive_t fd_main_directives[] = {
    {.name = "daemon", .type = FD_CONF_FLAG, .offset = MAIN(daemon),
     .def = "on", .doc = "off: stay in the foreground (as -g)"},
    {.name = "workers", .type = FD_CONF_CUSTOM, .offset = MAIN(workers),
     .def = "auto", .set = set_workers,
     .doc = "number of worker processes, or auto (one per online CPU)"},
    {.name = "cpu_affinity", .type = FD_CONF_FLAG,
     .offset = MAIN(cpu_affinity), .def = "off",
     .doc = "pin worker N to CPU N mod online CPUs"},
    {.name = "user", .type = FD_CONF_CUSTOM, .offset = MAIN(user),
     .set = set_user,
     .doc = "user (and its group) the workers run as; needs root. A root "
            "master without it runs its workers as nobody (as nginx); "
            "user = root keeps them root"},
    {.name = "load_module", .type = FD_CONF_LIST, .set = set_load_module,
     .doc = "PATH.so, repeatable: a module built against the public API "
            "(fastd.h; pkg-config fastd) loaded before the rest of the file "
            "is read, so its keys and handler = name can be used; relative "
            "to the prefix. A module built for another API major version, or "
            "a newer minor, is refused. A reload may load more; a loaded "
            "module stays until fastd restarts, and a reload is refused if "
            "its file changed"},
    {.name = "pid", .type = FD_CONF_CUSTOM, .offset = MAIN(pid),
     .def = "logs/fastd.pid", .set = set_path,
     .doc = "pid file of the master"},
    {.name = "error_log", .type = FD_CONF_CUSTOM, .offset = MAIN(error_log),
     .def = "logs/error.log", .set = set_path,
     .doc = "error log path, or stderr"},
    {.name = "error_log_level", .type = FD_CONF_CUSTOM,
     .offset = MAIN(error_log_level), .def = "notice", .set = set_level,
     .doc = "debug | info | notice | warn | error | crit | alert | emerg"},
    {.name = "profile", .type = FD_CONF_STR, .offset = MAIN(profile),
     .doc = "the [profile NAME] to apply (fastd -p NAME overrides)"},
    {.name = "rlimit_nofile", .type = FD_CONF_INT,
     .offset = MAIN(rlimit_nofile), .def = "0",
     .doc = "RLIMIT_NOFILE for workers; 0: max_connections * 2 + 64"},
    {.name = "shutdown_timeout", .type = FD_CONF_MSEC,
     .offset = MAIN(shutdown_timeout), .def = "30s",
     .doc = "graceful stop: longest wait for in-flight requests"},
    FD_CONF_END};

static const fd_conf_enum_t accept_enums[] = {
    {"reuseport", FD_ACCEPT_REUSEPORT},
    {"exclusive", FD_ACCEPT_EXCLUSIVE},
    {"shared", FD_ACCEPT_SHARED},
    {NULL, 0}};

static const fd_conf_enum_t ticket_keys_enums[] = {
    {"local", FD_SSL_TICKETS_LOCAL},
    {"redis", FD_SSL_TICKETS_REDIS},
    {NULL, 0}};

static const fd_conf_enum_t backend_enums[] = {
    {"epoll", FD_BACKEND_EPOLL},
    {"io_uring", FD_BACKEND_URING},
    {NULL, 0}};

const fd_directive_t fd_events_directives[] = {
    {.name = "backend", .type = FD_CONF_ENUM, .offset = EVENTS(backend),
     .def = "epoll", .enums = backend_enums,
     .doc = "epoll, or io_uring: receives, accepts and the turn's sends "
            "in one ring, one io_uring_enter() per loop turn (falls back "
            "to epoll, with a warning, where io_uring is refused)"},
    {.name = "max_connections", .type = FD_CONF_INT,
     .offset = EVENTS(max_connections), .def = "65536",
     .doc = "connections per worker; more are refused"},
    {.name = "accept", .type = FD_CONF_ENUM, .offset = EVENTS(accept),
     .def = "reuseport", .enums = accept_enums,
     .doc = "reuseport: a socket per worker (kernel balances); exclusive: "
            "one socket, EPOLLEXCLUSIVE; shared: one socket, all woken"},
    {.name = "edge_triggered", .type = FD_CONF_FLAG,
     .offset = EVENTS(edge_triggered), .def = "on",
     .doc = "EPOLLET on connections (off: level-triggered)"},
    {.name = "read_until_eagain", .type = FD_CONF_FLAG,
     .offset = EVENTS(read_until_eagain), .def = "off",
     .doc = "on: read until EAGAIN; off: a short read means drained (saves "
            "a read per request; EPOLLRDHUP is remembered, so a peer's FIN "
            "is never missed)"},
    {.name = "backlog", .type = FD_CONF_INT, .offset = EVENTS(backlog),
     .def = "4096", .doc = "listen() backlog"},
    {.name = "max_events", .type = FD_CONF_INT, .offset = EVENTS(max_events),
     .def = "512", .doc = "events taken per epoll_wait()"},
    {.name = "batch_sends", .type = FD_CONF_FLAG,
     .offset = EVENTS(batch_sends), .def = "on",
     .doc = "on: the first write of every client response (over TLS, its "
            "records) and upstream request of one loop turn leaves in one "
            "io_uring_enter() (one "
            "syscall per turn, not per response; a backend on the same CPU "
            "is woken once per turn); off, or no io_uring: one send() each"},
    FD_CONF_END};

/* the Server: value: a string of at most FD_SERVER_HEADER_MAX bytes */
static int set_server_header(fd_conf_t *cf, const fd_directive_t *d,
                             void *conf, const char *v)
{
    fd_directive_t str = *d;

    if (strlen(v) > FD_SERVER_HEADER_MAX)
        return fd_conf_error(cf, "\"%s\" is longer than %d bytes", d->name,
                             FD_SERVER_HEADER_MAX);
    str.type = FD_CONF_STR;
    str.set = NULL;
    return fd_conf_set(cf, &str, conf, v);
}

const fd_directive_t fd_http_directives[] = {
    /* named for what it sets: [server] server_name is the host names */
    {.name = "server_header", .type = FD_CONF_CUSTOM,
     .offset = HTTP(server_header), .set = set_server_header, .def = "fastd",
     .doc = "the Server: header value (empty: none; at most 256 bytes)"},
    /* the key's old name: refused, so that no file that sets it is read
     * as meaning something else */
    {.name = "server_name", .renamed = "server_header",
     .doc = "the Server: response header is [http] server_header; host "
            "names are [server] server_name"},
    {.name = "server_tokens", .type = FD_CONF_FLAG,
     .offset = HTTP(server_tokens), .def = "on",
     .doc = "on: the default Server: value and error pages carry the "
            "version (fastd/" FASTD_VERSION "); off: \"fastd\" alone"},
    {.name = "keepalive_timeout", .type = FD_CONF_MSEC,
     .offset = HTTP(keepalive_timeout), .def = "75s",
     .doc = "idle keep-alive connections are closed after it"},
    {.name = "keepalive_requests", .type = FD_CONF_INT,
     .offset = HTTP(keepalive_requests), .def = "1000",
     .doc = "requests per connection; the last one gets Connection: close"},
    {.name = "header_timeout", .type = FD_CONF_MSEC,
     .offset = HTTP(header_timeout), .def = "60s",
     .doc = "a request header must arrive within it (else 408, close)"},
    {.name = "body_timeout", .type = FD_CONF_MSEC,
     .offset = HTTP(body_timeout), .def = "60s",
     .doc = "longest wait between two reads of a request body (408)"},
    {.name = "send_timeout", .type = FD_CONF_MSEC,
     .offset = HTTP(send_timeout), .def = "60s",
     .doc = "longest wait between two writes to a client (close)"},
    {.name = "max_header_size", .type = FD_CONF_SIZE,
     .offset = HTTP(max_header_size), .def = "8k", .min = 256,
     .max = 1024 * 1024,
     .doc = "request line + headers; over it: 414 (line) or 431"},
    {.name = "max_headers", .type = FD_CONF_INT, .offset = HTTP(max_headers),
     .def = "100", .doc = "header fields per request; over it: 431"},
    {.name = "inline_completions", .type = FD_CONF_FLAG,
     .offset = HTTP(inline_completions), .def = "on",
     .doc = "off: thread-safe handlers run on the offload pool"},
    {.name = "ssl_session_ticket_rotate", .type = FD_CONF_MSEC,
     .offset = HTTP(ssl_session_ticket_rotate), .def = "1h", .min = 1000,
     .max = 7 * 86400000LL,
     .doc = "the master replaces the session ticket key this often; the "
            "key before it still decrypts, so a ticket lives one to two "
            "periods (and never longer than ssl_session_timeout). The "
            "keys are shared by every worker and outlive reloads"},
    {.name = "ssl_session_ticket_keys", .type = FD_CONF_ENUM,
     .offset = HTTP(ssl_session_ticket_keys), .def = "local",
     .enums = ticket_keys_enums,
     .doc = "local: the master makes and rotates them; redis: the "
            "fleet's, kept in the [cluster]'s Redis and rotated there every "
            "ssl_session_ticket_rotate by whichever instance asks first, so "
            "a session resumes on every instance (each reads them every "
            "second; while Redis does not answer, the keys in use stay)"},
    {.name = "ssl_session_ticket_key", .type = FD_CONF_CUSTOM,
     .set = set_ticket_key,
     .doc = "FILE [OLD]: session ticket keys of nginx's format (80 random "
            "bytes: name, HMAC and AES-256 keys; openssl rand 80 > FILE), "
            "so every instance of a fleet given the same files resumes "
            "the others' sessions. FILE encrypts, OLD still decrypts "
            "(rotate by hand: a new FILE, the old one as OLD, reload); "
            "ssl_session_ticket_rotate does not apply. Relative: to the "
            "prefix. The 48-byte form (AES-128) is not taken"},
    {.name = "http2_max_concurrent_streams", .type = FD_CONF_INT,
     .offset = HTTP(http2_max_concurrent_streams), .def = "128", .min = 1,
     .max = 65536,
     .doc = "streams one HTTP/2 connection may have open at once "
            "(SETTINGS_MAX_CONCURRENT_STREAMS); one more is refused "
            "with RST_STREAM REFUSED_STREAM"},
    {.name = "http2_max_header_size", .type = FD_CONF_SIZE,
     .offset = HTTP(http2_max_header_size), .def = "16k", .min = 256,
     .max = 1024 * 1024,
     .doc = "a request's header fields after HPACK decoding (names, "
            "values and 32 bytes each, as SETTINGS_MAX_HEADER_LIST_SIZE "
            "counts them); over it: 431"},
    {.name = "http2_initial_window", .type = FD_CONF_SIZE,
     .offset = HTTP(http2_initial_window), .def = "64k", .min = 1024,
     .max = 16 * 1024 * 1024,
     .doc = "request body bytes a client may send on a stream before "
            "fastd reads them (SETTINGS_INITIAL_WINDOW_SIZE): the "
            "buffer a stream may hold, and the back-pressure of a body "
            "streamed to an upstream"},
    {.name = "http2_idle_timeout", .type = FD_CONF_MSEC,
     .offset = HTTP(http2_idle_timeout), .def = "75s",
     .doc = "an HTTP/2 connection with no open stream is closed after it "
            "(with GOAWAY); keepalive_requests bounds its streams"},
    {.name = "http3_max_concurrent_streams", .type = FD_CONF_INT,
     .offset = HTTP(http3_max_concurrent_streams), .def = "128", .min = 1,
     .max = 65536,
     .doc = "requests one HTTP/3 connection may have open at once (QUIC's "
            "initial_max_streams_bidi; as nginx's); a client that opens "
            "more breaks QUIC's stream limit (STREAM_LIMIT_ERROR)"},
    {.name = "http3_stream_buffer_size", .type = FD_CONF_SIZE,
     .offset = HTTP(http3_stream_buffer_size), .def = "256k",
     .min = 4096, .max = 16 * 1024 * 1024,
     .doc = "request body bytes a client may send on an HTTP/3 stream "
            "before fastd reads them (QUIC's initial_max_stream_data): "
            "the buffer a stream may hold, and the back-pressure of a "
            "body streamed to an upstream (nginx's default is 64k)"},
    {.name = "quic_gso", .type = FD_CONF_FLAG,
     .offset = HTTP(quic_gso), .def = "on",
     .doc = "send a connection's packets of one size in one message with "
            "UDP_SEGMENT (GSO), split by the kernel; off: one datagram a "
            "message (nginx's default), for a route whose device mangles "
            "GSO without refusing it (fastd falls back by itself where "
            "the kernel says EIO)"},
    FD_CONF_END};

const fd_directive_t fd_offload_directives[] = {
    {.name = "threads", .type = FD_CONF_INT, .offset = OFFLOAD(threads),
     .def = "4", .doc = "pool threads per worker (adaptive = off: exactly "
                        "this many; on: the minimum)"},
    {.name = "max_threads", .type = FD_CONF_INT,
     .offset = OFFLOAD(max_threads), .def = "64",
     .doc = "adaptive = on: upper bound of pool threads per worker"},
    {.name = "idle_timeout", .type = FD_CONF_MSEC,
     .offset = OFFLOAD(idle_timeout), .def = "60s",
     .doc = "adaptive = on: threads above `threads` exit after this idle "
            "time (0: never)"},
    {.name = "adaptive", .type = FD_CONF_FLAG, .offset = OFFLOAD(adaptive),
     .def = "off", .doc = "on: add threads while blocked work waits, "
                          "hill-climb on the completion rate otherwise; "
                          "off: a fixed pool, for stable benchmarks"},
    FD_CONF_END};

static int set_root(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *v)
{
    fd_http_loc_t *loc = conf;
    char real[PATH_MAX], *p = fd_conf_path(cf, v);
    size_t n;

    (void)d;
    /* resolve once: the static module checks containment against it */
    if (realpath(p, real) == NULL)
        return fd_conf_error(cf, "root \"%s\": %s", p, strerror(errno));
    n = strlen(real);
    while (n > 1 && real[n - 1] == '/')
        n--;
    loc->root = fd_pstrdup(cf->pool, real, n);
    loc->root_len = n;
    return FD_OK;
}

static int set_handler(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                       const char *v)
{
    fd_http_loc_t *loc = conf;
    const fd_module_t *m = fd_module_find(v);

    (void)d;
    if (m && m->handler) {
        loc->handler = m;
        loc->handler_fn = m->handler;
        loc->handler_flags = m->flags;
        loc->handler_methods = m->methods;
        return FD_OK;
    }
    m = fd_dso_handler_find(v, &loc->handler_fn, &loc->handler_flags,
                            &loc->handler_methods);
    if (m == NULL) {
        fd_conf_near_t nr;
        char hint[96];
        unsigned i;

        fd_conf_near_init(&nr, v);
        for (i = 0; i < fd_nmodules; i++)
            if (fd_modules[i]->handler)
                fd_conf_near_add(&nr, fd_modules[i]->name);
        fd_dso_handler_names(&nr);
        return fd_conf_error(cf, "unknown handler \"%s\" (not a module "
                             "built into this fastd)%s", v,
                             fd_conf_near_hint(&nr, hint, sizeof(hint)));
    }
    loc->handler = m;
    return FD_OK;
}

/* Location keys: allowed in [http], [server] (defaults) and [location]. */
const fd_directive_t fd_http_loc_directives[] = {
    {.name = "handler", .type = FD_CONF_CUSTOM, .offset = 0,
     .set = set_handler,
     .doc = "the module that answers (static when not given)"},
    {.name = "root", .type = FD_CONF_CUSTOM, .offset = 0,
     .set = set_root, .doc = "document root for static files"},
    {.name = "alias", .type = FD_CONF_STR, .offset = LOC(alias),
     .doc = "[location] only, instead of root: the directory (or file) "
            "that stands for the location's prefix, so /i/a.gif in "
            "[location /i/] with alias = /data/img/ is /data/img/a.gif; "
            "in a regex location the whole path, with $1..$9 its "
            "captures ([location ~ ^/u/(.+)$], alias = /data/$1). Files "
            "are confined beneath the alias's directory as they are "
            "beneath root (no .., no symlink unless follow_symlinks); "
            "root and alias in one location is an error"},
    {.name = "index", .type = FD_CONF_LIST, .offset = LOC(index),
     .doc = "index file names, repeatable (default index.html): a "
            "request for a directory (path ending in /) is internally "
            "redirected to the first that exists, its location chosen "
            "again (so an index.php runs in the PHP location)"},
    {.name = "follow_symlinks", .type = FD_CONF_FLAG,
     .offset = LOC(follow_symlinks), .def = "off",
     .doc = "off: a symlink anywhere under root is refused with 403"},
    {.name = "max_body_size", .type = FD_CONF_SIZE,
     .offset = LOC(max_body_size), .def = "1m",
     .doc = "largest request body; over it: 413"},
    {.name = "offload", .type = FD_CONF_FLAG, .offset = LOC(offload),
     .def = "off",
     .doc = "on: this location's handler runs on the worker's offload pool "
            "(static: open/stat on slow disks), whatever inline_completions "
            "says; only for thread-safe handlers"},
    /* the fortunes module's file key, before databases: refused with
     * the way to say it now */
    {.name = "fortunes_db", .renamed = "[database world] url = sqlite:PATH",
     .doc = "handler = fortunes reads its location's database = NAME "
            "(default world): see conf/doc/database.md"},
    {.name = "blocking", .type = FD_CONF_FLAG, .offset = LOC(blocking),
     .def = "off",
     .doc = "on: this location's handler may block: it always runs on the "
            "worker's offload pool, never on the loop (503 when no pool "
            "thread is free); only for thread-safe handlers"},
    {.name = "add_header", .type = FD_CONF_LIST, .offset = 0,
     .set = fd_http_set_add_header,
     .doc = "NAME VALUE [always], repeatable: a response header, on 200, "
            "201, 204, 206, 301, 302, 303, 304, 307 and 308 (with always: "
            "on every status); VALUE may hold $variables and be \"quoted\"; "
            "one that comes out empty adds nothing. A location's add to "
            "the server's (not as nginx, where they replace them); see "
            "add_header_inherit. E.g. add_header = Strict-Transport-Security "
            "\"max-age=31536000\" always"},
    {.name = "add_header_inherit", .type = FD_CONF_FLAG,
     .offset = LOC(add_header_inherit), .def = "on",
     .doc = "off: this [server]'s or [location]'s add_header lines replace "
            "the ones it would inherit (nginx's rule) instead of adding to "
            "them; applies to the section it is written in. E.g. "
            "add_header_inherit = off"},
    {.name = "expires", .type = FD_CONF_CUSTOM, .offset = 0,
     .set = fd_http_set_expires,
     .doc = "off (default), epoch, max or a duration (1h, 30d; negative: "
            "-1): sets Expires and Cache-Control: max-age=N (no-cache for "
            "epoch and a negative one), replacing the handler's, on the "
            "statuses add_header applies to. E.g. expires = 30d"},
    {.name = "limit_rate", .type = FD_CONF_SIZE, .offset = LOC(limit_rate),
     .def = "0",
     .doc = "bytes per second a response is sent at (k, m: 100k), per "
            "request as nginx (HTTP/1.1: the connection's response; "
            "HTTP/2 and HTTP/3: the stream's DATA); 0 (the default): no "
            "limit. The header and about a tenth of a second of body leave at once. "
            "E.g. limit_rate = 500k"},
    {.name = "limit_rate_after", .type = FD_CONF_SIZE,
     .offset = LOC(limit_rate_after), .def = "0",
     .doc = "bytes of a response sent at full speed before limit_rate "
            "applies. E.g. limit_rate_after = 1m"},
    {.name = "set_real_ip_from", .type = FD_CONF_LIST, .offset = LOC(realip),
     .set = fd_realip_set_from, .replace = 1,
     .doc = "CIDR, repeatable: trusted hops (IPv4 or IPv6, ADDR or "
            "ADDR/BITS), whose real_ip_header is believed. A request from "
            "one of them takes the client's address from that header "
            "($remote_addr for acl, access_log, hash_key, the "
            "X-Forwarded-For sent upstream). A header from any other "
            "address changes nothing. A section's own lines replace the "
            "list it inherits ([http] -> [server] -> [location]); the "
            "[server]'s keys decide before routing (for errors found "
            "then), a [location]'s for the requests its URI routes to "
            "it. Example: set_real_ip_from = 10.0.0.0/8"},
    {.name = "real_ip_header", .type = FD_CONF_CUSTOM,
     .offset = LOC(realip.header), .def = "X-Real-IP",
     .set = fd_realip_set_header,
     .doc = "X-Real-IP | X-Forwarded-For | proxy_protocol: where a trusted "
            "hop's client address is. X-Real-IP: one address (a port may "
            "follow: 1.2.3.4:80, [::1]:80). X-Forwarded-For: the list's "
            "last element (several headers read as one list); an element "
            "that is not an address (garbage, a bad port, spaces inside) "
            "stops the walk, empty ones are skipped. proxy_protocol: only "
            "the PROXY header (listen ... proxy_protocol) gives it; no "
            "request header is read"},
    {.name = "real_ip_recursive", .type = FD_CONF_FLAG,
     .offset = LOC(realip.recursive), .def = "off",
     .doc = "on: X-Forwarded-For is walked right to left past every "
            "trusted address (set_real_ip_from) and the first untrusted one "
            "is the client; off: its last element is, whatever it is"},
    {.name = "try_files", .type = FD_CONF_CUSTOM, .offset = 0,
     .set = fd_http_set_try_files,
     .doc = "FILE... URI | @name | =CODE, after the access phase: the first "
            "FILE ($variables expanded; a trailing / means a directory) "
            "that exists under the location's root or alias (confined and "
            "symlinks judged as static does) is served by this location if "
            "it is the request's path, else the request is routed again as "
            "that path (unlike nginx); none: the URI is routed again (its "
            "location's rewrite and access checks run; ?args replace the "
            "request's), @name goes to [location @name] with the URI "
            "untouched, =CODE answers CODE. 10 internal redirects of one "
            "request are a cycle: 500. Not inherited: in [http] or "
            "[server] it applies to requests no [location] matches. E.g. "
            "try_files = $uri $uri/ /index.html"},
    FD_CONF_END};

/* server_name = a.example www.a.example: one list item per name */
static int set_names(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *v)
{
    fd_directive_t one = *d;
    char *copy = fd_pstrdup(cf->pool, v, strlen(v)), *tok, *save;

    one.type = FD_CONF_LIST;
    one.set = NULL;
    for (tok = strtok_r(copy, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        size_t n = strlen(tok);
        for (char *c = tok; *c; c++)
            *c = fd_tolower(*c);
        /* as a request's Host: one trailing dot means the same name */
        if (n > 1 && tok[n - 1] == '.')
            tok[n - 1] = '\0';
        if (fd_conf_set(cf, &one, conf, tok) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

static int parse_addr(const char *text, struct sockaddr_storage *ss,
                      socklen_t *len)
{
    char host[256];
    const char *colon;
    int64_t port;
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (text[0] == '[') {
        const char *rb = strchr(text, ']');
        if (rb == NULL || rb[1] != ':' || (size_t)(rb - text) >= sizeof(host))
            return FD_ERROR;
        memcpy(host, text + 1, (size_t)(rb - text - 1));
        host[rb - text - 1] = '\0';
        colon = rb + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL) {
            strcpy(host, "0.0.0.0");
            colon = text - 1;
        } else {
            if ((size_t)(colon - text) >= sizeof(host))
                return FD_ERROR;
            memcpy(host, text, (size_t)(colon - text));
            host[colon - text] = '\0';
            if (strcmp(host, "*") == 0 || host[0] == '\0')
                strcpy(host, "0.0.0.0");
        }
    }
    port = fd_conf_parse_uint(colon + 1, 65535);
    if (port < 1)
        return FD_ERROR;
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        *len = sizeof(*sin);
        return FD_OK;
    }
    if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*sin6);
        return FD_OK;
    }
    if (strcmp(host, "localhost") == 0) {
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sin->sin_port = htons((uint16_t)port);
        *len = sizeof(*sin);
        return FD_OK;
    }
    return FD_ERROR;
}

/* "ADDR:PORT [default] [ssl] [http2] [proxy_protocol] [quic]", in any
 * order, each once: FD_OK with the address and the FD_LISTEN_* bits, or
 * FD_ERROR. quic goes with default alone: it is UDP, and HTTP/3. */
int fd_cycle_listen_parse(fd_conf_t *cf, const char *v,
                          struct sockaddr_storage *ss, socklen_t *len,
                          char addr[300], unsigned *opts)
{
    char opt[4][64], extra[2];
    int n = sscanf(v, "%299s %63s %63s %63s %63s %1s", addr, opt[0], opt[1],
                   opt[2], opt[3], extra);
    unsigned bit;
    int i;

    if (n < 1 || parse_addr(addr, ss, len) != FD_OK)
        return fd_conf_error(cf, "bad listen address \"%s\" (expected "
                             "ADDR:PORT, [IPv6]:PORT or PORT)", v);
    if (n == 6)
        return fd_conf_error(cf, "listen \"%s\": four options at most "
                             "(default, ssl, http2, proxy_protocol)", v);
    *opts = 0;
    for (i = 0; i < n - 1; i++) {
        if (strcmp(opt[i], "default") == 0)
            bit = FD_LISTEN_DEFAULT;
        else if (strcmp(opt[i], "ssl") == 0)
            bit = FD_LISTEN_SSL;
        else if (strcmp(opt[i], "http2") == 0)
            bit = FD_LISTEN_HTTP2;
        else if (strcmp(opt[i], "proxy_protocol") == 0)
            bit = FD_LISTEN_PROXY;
        else if (strcmp(opt[i], "quic") == 0)
            bit = FD_LISTEN_QUIC;
        else if (strcmp(opt[i], "udp") == 0)
            bit = FD_LISTEN_UDP; /* a [stream]'s: its caller says */
        else
            return fd_conf_error(cf, "unknown listen option \"%s\" "
                                 "(default, ssl, http2, proxy_protocol, "
                                 "quic)", opt[i]);
        if (*opts & bit)
            return fd_conf_error(cf, "listen \"%s\": \"%s\" twice", v,
                                 opt[i]);
        *opts |= bit;
    }
    if ((*opts & FD_LISTEN_QUIC) &&
        (*opts & (FD_LISTEN_SSL | FD_LISTEN_HTTP2 | FD_LISTEN_PROXY)))
        return fd_conf_error(cf, "listen \"%s\": quic is HTTP/3 over UDP, "
                             "with TLS 1.3 built in: it takes no ssl, http2 "
                             "or proxy_protocol (listen on the same port "
                             "with ssl for TCP beside it)", v);
    return FD_OK;
}

/* Checked here, so that an error names its line */
static int set_listen(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    fd_directive_t list = *d;
    char addr[300];
    struct sockaddr_storage ss;
    socklen_t len;
    unsigned opts;

    if (fd_cycle_listen_parse(cf, v, &ss, &len, addr, &opts) != FD_OK)
        return FD_ERROR;
    list.set = NULL;
    return fd_conf_set(cf, &list, conf, v);
}

static const fd_conf_enum_t quic_retry_enums[] = {
    {"off", FD_QUIC_RETRY_OFF},
    {"on", FD_QUIC_RETRY_ON},
    {"auto", FD_QUIC_RETRY_AUTO},
    {NULL, 0}};

const fd_directive_t fd_http_server_directives[] = {
    {.name = "listen", .type = FD_CONF_LIST, .offset = SRV(listen),
     .set = set_listen,
     .doc = "ADDR:PORT [default] [ssl] [http2] [proxy_protocol] [quic], "
            "repeatable; [::]:PORT for "
            "IPv6. ssl: TLS on that address (every [server] on it says "
            "ssl, and has an ssl_certificate). http2: HTTP/2 beside "
            "HTTP/1.1, by ALPN (h2) with ssl, by the client's preface "
            "(h2c, prior knowledge) without; Upgrade: h2c is never "
            "honoured. One [server] saying http2 turns it on for the "
            "address. proxy_protocol: every connection starts with a PROXY "
            "protocol header (v1 or v2, before the TLS handshake or the h2 "
            "preface) whose source address becomes the client's ($remote_addr,"
            " acl, max_conns_per_ip, logs); only balancers must reach such an "
            "address. A missing, malformed or truncated header, or none "
            "within proxy_protocol_timeout, closes the connection (logged at "
            "info); v2 LOCAL keeps the peer's address. Every [server] on the "
            "address says it. quic: HTTP/3 over QUIC on that UDP address "
            "(alone or with default), with the server's ssl_certificate "
            "(TLS 1.3, ALPN h3, SNI); its TCP responses then carry Alt-Svc: "
            "h3=\":PORT\"; ma=86400 (conf/doc/http3.md). A build without "
            "HTTP/3 ignores a quic listen, with a warning"},
    {.name = "server_name", .type = FD_CONF_CUSTOM, .offset = SRV(names),
     .set = set_names,
     .doc = "Host names this server answers, space-separated, repeatable "
            "(exact, *.suffix, prefix.*; case and one trailing dot do not "
            "matter). A [server] on the same address with a name (or no "
            "name) an earlier one has is never chosen: a warning names "
            "both"},
    {.name = "error_page", .type = FD_CONF_LIST, .offset = 0,
     .doc = "CODE... /file.html under the server's root, repeatable"},
    {.name = "max_conns_per_ip", .type = FD_CONF_INT,
     .offset = SRV(max_conns_per_ip), .def = "0",
     .doc = "open connections one client address may hold in a worker "
            "(idle keep-alive and WebSocket tunnels included); a request "
            "on a connection beyond it gets 503 and the connection is "
            "closed (0: no limit). It counts connections by their address: "
            "behind a balancer that is the PROXY header's source (listen ... "
            "proxy_protocol), but not an X-Forwarded-For or X-Real-IP "
            "address, which is a request's, not a connection's"},
    {.name = "proxy_protocol_timeout", .type = FD_CONF_MSEC,
     .offset = SRV(proxy_protocol_timeout), .def = "30s", .min = 1,
     .max = 3600000,
     .doc = "how long a connection to a listen ... proxy_protocol address "
            "may take to send its PROXY header (the address's default "
            "server's value)"},
    {.name = "quic_retry", .type = FD_CONF_ENUM, .offset = SRV(quic_retry),
     .def = "auto", .enums = quic_retry_enums,
     .doc = "on: a client's first Initial on a quic address gets a Retry, "
            "and only an Initial bringing back its token (bound to the "
            "client's address, valid 3s, known to every worker and across "
            "reloads) makes a connection: the client's address is proven "
            "before the server spends a handshake on it, for one more "
            "round trip. auto: Retry only while the worker has more than "
            "128 connections whose handshake has not ended (an Initial "
            "flood); off: never. A forged or expired token ends the "
            "attempt with INVALID_TOKEN. The address's default server's "
            "value applies (as nginx's quic_retry)"},
    FD_CONF_END};
