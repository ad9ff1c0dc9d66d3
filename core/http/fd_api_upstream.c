/*
 * The public face of the upstream engine (core/api/fastd_upstream.h): a
 * backend protocol of a module's own on fd_upstream_req.c, as FastCGI is.
 *
 * An adapter, not a second engine. A location's fd_api_upstream_conf_t
 * holds the engine's fd_upstream_proto_t made from the module's table
 * (its framing sizes, and callbacks that call the module's) and its
 * fd_upstream_opts_t; a request's fd_api_upstream_req_t is the engine's
 * fd_upstream_req_t with the module's table and state after it. The
 * engine calls its proto as for any protocol; each call costs one call
 * more (this file's to the module's), a few instructions a response.
 */
#include <stdarg.h>

#include <openssl/ssl.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_ssl.h"
#include "fastd_upstream.h"
#include "fd_upstream_proto.h"

struct fd_api_upstream_conf_s {
    fd_upstream_proto_t proto;  /* the engine's, calling the module's */
    fd_upstream_opts_t o;
    fd_upstream_t *up;
    const fd_api_upstream_proto_t *api;
};

typedef struct {
    fd_upstream_req_t u;        /* first: the engine's */
    const fd_api_upstream_proto_t *api;
    void *data;                 /* the module's */
    size_t fpos;                /* frame_body's frame begins here */
    unsigned raw:1;             /* the body goes as it is */
} api_req_t;

#define A(u) ((api_req_t *)(u))
#define U(a) ((fd_api_upstream_req_t *)(a))

_Static_assert(FD_API_UPSTREAM_NEXT_ERROR == FD_UPSTREAM_NEXT_ERROR &&
                   FD_API_UPSTREAM_NEXT_TIMEOUT == FD_UPSTREAM_NEXT_TIMEOUT &&
                   FD_API_UPSTREAM_NEXT_502 == FD_UPSTREAM_NEXT_502 &&
                   FD_API_UPSTREAM_NEXT_503 == FD_UPSTREAM_NEXT_503 &&
                   FD_API_UPSTREAM_NEXT_504 == FD_UPSTREAM_NEXT_504 &&
                   FD_API_UPSTREAM_NEXT_NON_IDEMPOTENT ==
                       FD_UPSTREAM_NEXT_NON_IDEMPOTENT,
               "the API's next_upstream bits are the engine's");

/* --- the engine's callbacks, calling the module's ------------------------ */

static int api_frame_body(fd_upstream_req_t *u, size_t n)
{
    api_req_t *a = A(u);
    size_t len = 0;
    int rc;

    if (a->api->frame_body == NULL || a->raw) { /* as it is */
        u->opos = u->proto->body_head;
        u->olen = u->opos + n;
        return FD_OK;
    }
    rc = a->api->frame_body(U(a), a->data, u->obuf, n, &len);
    u->opos = a->fpos;
    u->olen = a->fpos + len;
    a->fpos = 0;
    if (rc == FD_DONE) {
        u->body_done = 1;
        return FD_OK;
    }
    return rc;
}

static int api_process(fd_upstream_req_t *u, int eof)
{
    api_req_t *a = A(u);

    return a->api->process(U(a), a->data, u->ibuf + u->ipos,
                           u->ilast - u->ipos, eof);
}

static void api_retry(fd_upstream_req_t *u)
{
    api_req_t *a = A(u);

    if (a->api->retry)
        a->api->retry(U(a), a->data);
}

static int api_fail(fd_upstream_req_t *u, int status)
{
    api_req_t *a = A(u);

    return a->api->fail ? a->api->fail(U(a), a->data, status) : status;
}

static void api_release(fd_upstream_req_t *u)
{
    api_req_t *a = A(u);

    if (a->api->release)
        a->api->release(U(a), a->data);
}

_Static_assert(sizeof(fd_api_field_t) == sizeof(fd_http_header_t) &&
                   offsetof(fd_api_field_t, value) ==
                       offsetof(fd_http_header_t, value),
               "the API's field is the engine's");

static int api_fields(fd_upstream_req_t *u, int status,
                      const fd_http_header_t *f, unsigned nf)
{
    api_req_t *a = A(u);

    return a->api->fields(U(a), a->data, status, (const fd_api_field_t *)f,
                          nf);
}

/* --- configuration ------------------------------------------------------- */

fd_api_upstream_t *fd_api_upstream_group(const char *name)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_cycle_section(cf->cycle, "upstream", name) : NULL;
}

fd_api_upstream_t *fd_api_upstream_server(const char *addr, const char *opts)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? (fd_api_upstream_t *)fd_upstream_implicit(cf, addr, opts)
              : NULL;
}

int fd_api_upstream_is_h2(const fd_api_upstream_t *up)
{
    return ((const fd_upstream_t *)up)->h2;
}

const char *fd_api_upstream_name(const fd_api_upstream_t *up)
{
    return ((const fd_upstream_t *)up)->name;
}

unsigned fd_api_upstream_keepalive(const fd_api_upstream_t *up)
{
    return (unsigned)((const fd_upstream_t *)up)->keepalive;
}

fd_api_upstream_conf_t *fd_api_upstream_conf(
    fd_api_upstream_t *up, const fd_api_upstream_proto_t *proto)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_api_upstream_conf_t *c;

    if (cf == NULL || (c = fd_pcalloc(cf->pool, sizeof(*c))) == NULL)
        return NULL;
    c->proto = (fd_upstream_proto_t){
        .what = proto->what, .body_head = proto->body_head,
        .body_room = proto->body_room, .frame_body = api_frame_body,
        .process = api_process, .retry = api_retry,
        .fail = proto->fail ? api_fail : NULL, .release = api_release};
    if (proto->flags & FD_API_UPSTREAM_H2) {
        /* the engine's transport: it speaks HTTP/2 (probes too) */
        c->proto.mux = &fd_upstream_h2_mux;
        c->proto.fields = api_fields;
        c->proto.grpc = (proto->flags & FD_API_UPSTREAM_GRPC) != 0;
        ((fd_upstream_t *)up)->health_h2 = 1;
    }
    c->o = (fd_upstream_opts_t){
        .connect_timeout = 60000, .send_timeout = 60000,
        .read_timeout = 60000,
        .next_upstream = FD_UPSTREAM_NEXT_ERROR | FD_UPSTREAM_NEXT_TIMEOUT};
    c->up = (fd_upstream_t *)up;
    c->api = proto;
    return c;
}

/* option opt of o: *v into it (set), or it into *v */
static int conf_opt(fd_upstream_opts_t *o, int opt, int64_t *v, int set)
{
#define OPT(f, type)                                                         \
    if (set)                                                                 \
        o->f = (type)*v;                                                     \
    else                                                                     \
        *v = (int64_t)o->f;                                                  \
    return FD_OK

    switch (opt) {
    case FD_API_UPSTREAM_CONNECT_TIMEOUT:
        OPT(connect_timeout, fd_msec_t);
    case FD_API_UPSTREAM_SEND_TIMEOUT:
        OPT(send_timeout, fd_msec_t);
    case FD_API_UPSTREAM_READ_TIMEOUT:
        OPT(read_timeout, fd_msec_t);
    case FD_API_UPSTREAM_NEXT:
        OPT(next_upstream, unsigned);
    case FD_API_UPSTREAM_NEXT_TRIES:
        OPT(next_upstream_tries, fd_int_t);
    case FD_API_UPSTREAM_BUFFERING:
        OPT(buffering, int);
    }
    return FD_ERROR;
#undef OPT
}

int fd_api_upstream_conf_set(fd_api_upstream_conf_t *c, int opt, int64_t v)
{
    return conf_opt(&c->o, opt, &v, 1);
}

int64_t fd_api_upstream_conf_get(const fd_api_upstream_conf_t *c, int opt)
{
    int64_t v;

    return conf_opt((fd_upstream_opts_t *)&c->o, opt, &v, 0) == FD_OK
               ? v
               : FD_ERROR;
}

int fd_api_upstream_parse_next(const char *value, unsigned *next)
{
    fd_conf_t *cf = fd_dso_conf();

    return cf ? fd_upstream_parse_next(cf, value, next) : FD_ERROR;
}

/* --- a request ----------------------------------------------------------- */

/*
 * gRPC: the client's deadline (grpc-timeout: up to 8 digits and a unit,
 * H M S m u n) bounds how long the upstream may stay silent; the header
 * itself goes on upstream, so the server knows it too. A second's grace:
 * the client ends the call at its deadline itself (DEADLINE_EXCEEDED),
 * fastd's bound only frees what a client that went silent left.
 */
#define GRPC_GRACE 1000
static fd_msec_t grpc_timeout(fd_request_t *r, fd_msec_t read_timeout)
{
    fd_str_t v = fd_http_var_header(r, fd_string("grpc_timeout"));
    uint64_t n = 0, ms;
    size_t i;

    if (v.len < 2 || v.len > 9)
        return read_timeout;
    for (i = 0; i + 1 < v.len; i++) {
        if (v.data[i] < '0' || v.data[i] > '9')
            return read_timeout;
        n = n * 10 + (uint64_t)(v.data[i] - '0');
    }
    switch (v.data[v.len - 1]) {
    case 'H': ms = n * 3600000; break;
    case 'M': ms = n * 60000; break;
    case 'S': ms = n * 1000; break;
    case 'm': ms = n; break;
    case 'u': ms = (n + 999) / 1000; break;
    case 'n': ms = (n + 999999) / 1000000; break;
    default: return read_timeout;
    }
    ms += GRPC_GRACE;
    return ms < read_timeout ? (fd_msec_t)ms : read_timeout;
}

fd_api_upstream_req_t *fd_api_upstream_req(fd_request_t *r,
                                           const fd_api_upstream_conf_t *c,
                                           size_t size)
{
    size_t at = fd_upstream_req_size(sizeof(api_req_t), c->up);
    api_req_t *a;

    /* the engine's, the tried bitmap, the module's: one block */
    size = (size + 7) & ~(size_t)7;
    a = fd_pcalloc(r->pool, at + size);
    if (a == NULL)
        return NULL;
    fd_upstream_req_init(&a->u, r, c->up, &c->o, &c->proto,
                         (uint64_t *)(a + 1));
    /* the pool: a TLS client's own connections, else HTTP/2's (h2 and
     * gRPC share them, as before the proxy was on this), else the
     * protocol's own */
    a->u.key = c->o.ssl       ? c->o.ssl
               : c->proto.mux ? (const void *)c->proto.mux
                              : (const void *)c->api;
    if (c->proto.grpc)
        a->u.read_timeout = grpc_timeout(r, c->o.read_timeout);
    a->u.body_after_hdr = (c->api->flags & FD_API_UPSTREAM_BODY_AFTER) != 0;
    a->api = c->api;
    a->data = (char *)a + at;
    r->ctx = a; /* the engine's callbacks find u there */
    return U(a);
}

void *fd_api_upstream_data(fd_api_upstream_req_t *u)
{
    return A(u)->data;
}

fd_upstream_req_t *fd_upstream_api_engine(fd_api_upstream_req_t *u)
{
    return &A(u)->u;
}

void fd_api_upstream_cancel(fd_api_upstream_req_t *u)
{
    fd_upstream_req_cancel(&A(u)->u);
}

int fd_api_upstream_body_raw(fd_api_upstream_req_t *au)
{
    fd_upstream_req_t *u = &A(au)->u;
    fd_request_t *r = u->r;

    A(au)->raw = 1;
    u->body_kept = u->has_body && !r->in.chunked &&
                   r->in.content_length <= FD_UPSTREAM_BUF;
    return u->body_kept;
}

void fd_api_upstream_background(fd_api_upstream_req_t *u)
{
    A(u)->u.bg = 1;
}

void fd_api_upstream_careful(fd_api_upstream_req_t *u)
{
    A(u)->u.careful = 1;
}

int fd_api_upstream_start(fd_api_upstream_req_t *au)
{
    api_req_t *a = A(au);
    fd_str_t out = {0, NULL};
    int rc = a->api->build(au, a->data, &out);
    uint64_t id = fd_log_conn_id;

    if (rc != FD_OK)
        return rc;
    a->u.hdr = (char *)out.data;
    a->u.hdr_len = out.len;
    /* from a module's timer (a cache waiter's): what it logs names the
     * client's connection, as the lines of a handler do */
    if (id == 0 && a->u.r->c)
        fd_log_conn_id = a->u.r->c->id;
    rc = fd_upstream_req_start(&a->u);
    fd_log_conn_id = id;
    return rc;
}

fd_api_upstream_req_t *fd_api_upstream_of(fd_request_t *r,
                                          const fd_api_upstream_proto_t *proto)
{
    fd_upstream_req_t *u = r ? r->upstream : NULL;

    /* ours: its proto is an adapter's, inside a conf made for proto */
    if (u == NULL || u->proto->process != api_process ||
        A(u)->api != proto)
        return NULL;
    return U(u);
}

void fd_api_upstream_log(fd_api_upstream_req_t *au, int level, int err,
                         const char *fmt, ...)
{
    fd_upstream_req_t *u = &A(au)->u;
    char buf[1024];
    va_list ap;

    if (level > fd_log->level)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fd_log_write(fd_log, level, err, "%s \"%s\" server %s%s",
                 u->proto->what, u->up->name, u->peer ? u->peer->name : "-",
                 buf);
}

/* --- process's verbs ----------------------------------------------------- */

void fd_api_upstream_consume(fd_api_upstream_req_t *u, size_t n)
{
    A(u)->u.ipos += n;
}

int fd_api_upstream_header(fd_api_upstream_req_t *u, int status)
{
    A(u)->u.header_done = 1;
    return fd_upstream_req_header(&A(u)->u, status);
}

void fd_api_upstream_frame_at(fd_api_upstream_req_t *u, size_t off)
{
    A(u)->fpos = off;
}

void fd_api_upstream_rest(fd_api_upstream_req_t *u, int64_t n)
{
    A(u)->u.rest = n;
}

void fd_api_upstream_until_close(fd_api_upstream_req_t *u)
{
    A(u)->u.close_delimited = 1;
}

/* The pieces as the engine's chain (the output copies what it keeps):
 * on the caller's stack, or in the request's memory for a long one */
#define CHAIN_MAX 32

static fd_buf_t *chain_of(fd_upstream_req_t *u, fd_buf_t *b,
                          const fd_api_piece_t *p, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++)
        if (p[i].data == NULL && p[i].len)
            return NULL; /* a file's range: memory only here */
    if (n > CHAIN_MAX &&
        (b = fd_palloc(u->r->pool, n * sizeof(fd_buf_t))) == NULL)
        return NULL;
    for (i = 0; i < n; i++)
        b[i] = (fd_buf_t){.pos = (char *)p[i].data,
                          .last = (char *)p[i].data + p[i].len,
                          .file_fd = -1, .next = &b[i + 1]};
    b[n - 1].next = NULL;
    return b;
}

/* one piece, the usual response: no loop, no call (a file's range, data
 * NULL, goes to chain_of, which refuses it) */
#define CHAIN(u, b, p, n)                                                    \
    ((n) == 0   ? NULL                                                       \
     : (n) == 1 && (p)->data ? (b[0] = (fd_buf_t){.pos = (char *)(p)->data,               \
                                     .last = (char *)(p)->data + (p)->len,   \
                                     .file_fd = -1},                         \
                   b)                                                        \
                : chain_of(u, b, p, n))

int fd_api_upstream_output(fd_api_upstream_req_t *au,
                           const fd_api_piece_t *p, unsigned n)
{
    fd_upstream_req_t *u = &A(au)->u;
    fd_buf_t b[CHAIN_MAX], *chain = CHAIN(u, b, p, n);

    if (chain == NULL && n)
        return fd_upstream_req_fail(u, 500);
    return fd_upstream_req_output(u, chain);
}

int fd_api_upstream_last(fd_api_upstream_req_t *au, const fd_api_piece_t *p,
                         unsigned n, int reuse)
{
    fd_upstream_req_t *u = &A(au)->u;
    fd_buf_t b[CHAIN_MAX], *chain = CHAIN(u, b, p, n);

    if (chain == NULL && n)
        return fd_upstream_req_fail(u, 500);
    return fd_upstream_req_last(u, chain, reuse);
}

int fd_api_upstream_tunnel(fd_api_upstream_req_t *u, uint64_t idle_ms)
{
    return fd_upstream_req_tunnel(&A(u)->u, (fd_msec_t)idle_ms);
}

unsigned fd_api_upstream_failure(const fd_api_upstream_req_t *au)
{
    const fd_upstream_req_t *u = &((const api_req_t *)au)->u;

    return u->invalid     ? FD_API_UPSTREAM_INVALID
           : u->timed_out ? FD_API_UPSTREAM_NEXT_TIMEOUT
                          : FD_API_UPSTREAM_NEXT_ERROR;
}

int fd_api_upstream_invalid(fd_api_upstream_req_t *u, const char *why)
{
    return fd_upstream_req_invalid(&A(u)->u, why);
}

int fd_api_upstream_fail(fd_api_upstream_req_t *u, int status)
{
    return fd_upstream_req_fail(&A(u)->u, status);
}

int fd_api_upstream_end(fd_api_upstream_req_t *u, int rc)
{
    return fd_upstream_req_end(&A(u)->u, rc);
}

/* --- 1.8: TLS to the group's servers ------------------------------------- */

/* The options are the engine's, parsed by its setters (as the ssl_* keys
 * of a [server] are: the same errors, the files' lines kept for the
 * errors of reading them later) */
struct fd_api_tls_client_s {
    fd_ssl_client_conf_t c;
};

static const fd_ssl_client_conf_t tls_defaults = {
    .verify = 1, .protocols = {TLS1_2_VERSION, TLS1_3_VERSION},
    .ciphers = "DEFAULT", .server_name = 1, .session_reuse = 1};

#define TLS_OFF(f) offsetof(fd_ssl_client_conf_t, f)

/* FD_API_TLS_* as the engine's keys of fd_ssl_client_conf_t */
static const struct {
    fd_conf_type_t type;
    size_t offset;
    int (*set)(fd_conf_t *cf, const fd_directive_t *d, void *conf,
               const char *value);
} tls_opts[] = {
    [FD_API_TLS_VERIFY] = {FD_CONF_FLAG, TLS_OFF(verify), NULL},
    [FD_API_TLS_TRUSTED] = {FD_CONF_CUSTOM, TLS_OFF(trusted),
                            fd_ssl_set_path},
    [FD_API_TLS_CERTIFICATE] = {FD_CONF_CUSTOM, TLS_OFF(certificate),
                                fd_ssl_set_path},
    [FD_API_TLS_CERTIFICATE_KEY] = {FD_CONF_CUSTOM, TLS_OFF(certificate_key),
                                    fd_ssl_set_path},
    [FD_API_TLS_PROTOCOLS] = {FD_CONF_CUSTOM, TLS_OFF(protocols),
                              fd_ssl_set_protocols},
    [FD_API_TLS_CIPHERS] = {FD_CONF_CUSTOM, TLS_OFF(ciphers),
                            fd_ssl_set_ciphers},
    [FD_API_TLS_SERVER_NAME] = {FD_CONF_FLAG, TLS_OFF(server_name), NULL},
    [FD_API_TLS_SESSION_REUSE] = {FD_CONF_FLAG, TLS_OFF(session_reuse),
                                  NULL}};

int fd_api_tls_client_set(fd_api_tls_client_t **t, int opt, const char *key,
                          const char *value)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_directive_t d;

    if (cf == NULL)
        return FD_ERROR;
    if (opt < FD_API_TLS_VERIFY || (size_t)opt >= fd_nelems(tls_opts))
        return fd_conf_error(cf, "\"%s\": no TLS option %d", key, opt);
    d = (fd_directive_t){.name = key, .type = tls_opts[opt].type,
                         .offset = tls_opts[opt].offset,
                         .set = tls_opts[opt].set};
    /* the default needs no scratch context to be known good */
    if (opt == FD_API_TLS_CIPHERS && strcmp(value, tls_defaults.ciphers) == 0)
        d.def = value;
    if (*t == NULL) {
        if ((*t = fd_pcalloc(cf->pool, sizeof(**t))) == NULL)
            return fd_conf_error(cf, "out of memory");
        (*t)->c = tls_defaults;
    }
    return fd_conf_set(cf, &d, &(*t)->c, value);
}

int fd_api_upstream_conf_tls(fd_api_upstream_conf_t *c,
                             const fd_api_tls_client_t *t, const char *name)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_ssl_client_conf_t sc = t ? t->c : tls_defaults;
    fd_ssl_client_t *cl;

    if (cf == NULL)
        return FD_ERROR;
    sc.alpn_h2 = (c->api->flags & FD_API_UPSTREAM_H2) != 0;
    if ((cl = fd_ssl_client(cf, &sc, name)) == NULL)
        return FD_ERROR;
    /* probes speak TLS (and HTTP/2) as the first location here does */
    if (c->up->health_ssl == NULL)
        c->up->health_ssl = cl;
    c->o.ssl = cl;
    return FD_OK;
}

int fd_api_upstream_proxy_protocol(const fd_api_upstream_t *up)
{
    return ((const fd_upstream_t *)up)->proxy_protocol != 0;
}
