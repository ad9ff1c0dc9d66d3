/*
 * The variable registry and its scripts (see fd_var.h). Core's variables
 * are the request's and the connection's; a module's come from its
 * descriptor (fd_module_t.vars). Names are looked up only here, at load.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <time.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_var.h"

/* --- core's getters --- */

static fd_str_t num(char *tmp, uint64_t v)
{
    return (fd_str_t){(size_t)(fd_fmt_uint(tmp, v) - tmp), tmp};
}

/* seconds with milliseconds: "12.345" */
static fd_str_t msec_text(char *tmp, fd_msec_t ms)
{
    char *p = fd_fmt_uint(tmp, ms / 1000);

    *p++ = '.';
    *p++ = (char)('0' + ms % 1000 / 100);
    *p++ = (char)('0' + ms % 100 / 10);
    *p++ = (char)('0' + ms % 10);
    return (fd_str_t){(size_t)(p - tmp), tmp};
}

/* $host: the Host without its port, lower case; else the server's first
 * name (nginx's order, the request line's host being r->in.host too) */
static fd_str_t v_host(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    fd_str_t h = r->in.host;
    size_t i;
    char *p;

    (void)op;
    (void)tmp;
    for (i = h.len; i > 0; i--) {
        if (h.data[i - 1] == ':') {
            h.len = i - 1;
            break;
        }
        if (h.data[i - 1] < '0' || h.data[i - 1] > '9')
            break;
    }
    if (h.len == 0) {
        if (r->server && r->server->names.n)
            return (fd_str_t){strlen(r->server->names.items[0]),
                              r->server->names.items[0]};
        return fd_null_string;
    }
    for (i = 0; i < h.len && !(h.data[i] >= 'A' && h.data[i] <= 'Z'); i++)
        ;
    if (i == h.len || (p = fd_pnalloc(r->pool, h.len)) == NULL)
        return h;
    for (i = 0; i < h.len; i++)
        p[i] = fd_tolower(h.data[i]);
    return (fd_str_t){h.len, p};
}

/* the fd_str_t at offset data of the request */
static fd_str_t v_field(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)tmp;
    return *(fd_str_t *)((char *)r + op->var->data);
}

/* the client's target: a subrequest's is its parent's, as nginx's */
static fd_str_t v_request_uri(fd_request_t *r, const fd_var_op_t *op,
                              char *tmp)
{
    (void)op;
    (void)tmp;
    while (r->parent)
        r = r->parent;
    return r->in.target;
}

static fd_str_t v_is_args(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)op;
    (void)tmp;
    return r->in.query.len ? fd_string("?") : fd_null_string;
}

/* "name=value" pairs separated by sep in s: the first value of name
 * (case-insensitive, as nginx) */
static fd_str_t pair_find(fd_str_t s, fd_str_t name, char sep)
{
    const char *p = s.data, *end;

    if (s.len == 0)
        return fd_null_string; /* no query: its data may be NULL */
    end = s.data + s.len;
    while (p < end) {
        const char *e = memchr(p, sep, (size_t)(end - p)), *eq;
        if (e == NULL)
            e = end;
        while (p < e && sep == ';' && *p == ' ')
            p++;
        eq = memchr(p, '=', (size_t)(e - p));
        if (eq && (size_t)(eq - p) == name.len &&
            fd_str_caseeq((fd_str_t){name.len, p}, name.data, name.len))
            return (fd_str_t){(size_t)(e - eq - 1), eq + 1};
        p = e + 1;
    }
    return fd_null_string;
}

static fd_str_t v_arg(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)tmp;
    return pair_find(r->in.query, op->text, '&');
}

static fd_str_t v_cookie(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    unsigned i;
    fd_str_t v;

    (void)tmp;
    for (i = 0; i < r->in.nheaders; i++)
        if (fd_str_caseeq_lit(r->in.headers[i].name, "cookie") &&
            (v = pair_find(r->in.headers[i].value, op->text, ';')).data)
            return v;
    return fd_null_string;
}

static fd_str_t v_http(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)tmp;
    return fd_http_var_header(r, op->text);
}

/* $sent_http_NAME: a response header (the argument is lower case, '_'
 * for '-'), Content-Type from r's own field */
static fd_str_t v_sent_http(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    const fd_http_header_out_t *h;
    size_t i;

    (void)tmp;
    if (r == NULL)
        return fd_null_string;
    if (op->text.len == 12 && memcmp(op->text.data, "content_type", 12) == 0)
        return r->content_type;
    for (h = r->headers_out; h; h = h->next) {
        if (h->name.len != op->text.len)
            continue;
        for (i = 0; i < h->name.len; i++) {
            char c = h->name.data[i] == '-' ? '_' : fd_tolower(h->name.data[i]);
            if (c != op->text.data[i])
                break;
        }
        if (i == h->name.len)
            return h->value;
    }
    return fd_null_string;
}

/* $upstream_http_NAME: a header of the upstream's response (as passed on:
 * what proxy_hide_header hides is not there) */
static fd_str_t v_upstream_http(fd_request_t *r, const fd_var_op_t *op,
                                char *tmp)
{
    return r && r->upstream ? v_sent_http(r, op, tmp) : fd_null_string;
}

static fd_str_t v_remote_addr(fd_request_t *r, const fd_var_op_t *op,
                              char *tmp)
{
    (void)op;
    return (fd_str_t){fd_request_addr_text(r, tmp, FD_VAR_TMP), tmp};
}

/* the balancer's, when real_ip or a PROXY header gave another */
static fd_str_t v_realip_remote_addr(fd_request_t *r, const fd_var_op_t *op,
                                     char *tmp)
{
    (void)op;
    return (fd_str_t){fd_request_hop_text(r, tmp, FD_VAR_TMP), tmp};
}

/* the address's 4 or 16 bytes: a compact key (limit_req, hash_key) */
static fd_str_t v_binary_remote_addr(fd_request_t *r, const fd_var_op_t *op,
                                     char *tmp)
{
    (void)op;
    (void)tmp;
    if (r->realip)
        return (fd_str_t){r->realip->family == AF_INET6 ? 16 : 4,
                          (char *)r->realip->addr};
    return (fd_str_t){r->c->family == AF_INET6 ? 16 : 4,
                      (char *)r->c->addr};
}

static fd_str_t v_remote_port(fd_request_t *r, const fd_var_op_t *op,
                              char *tmp)
{
    (void)op;
    return num(tmp, r->realip && r->realip->port ? r->realip->port
                                                   : r->c->port);
}

/* The listening address is the local end unless it is a wildcard: no
 * getsockname() per request then (fastcgi sends both on every one). */
static int listen_specific(const fd_listening_t *ls)
{
    static const uint8_t any6[16];

    if (ls->addr.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&ls->addr)->sin_addr.s_addr !=
               htonl(INADDR_ANY);
    if (ls->addr.ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)&ls->addr)->sin6_addr,
                      any6, 16) != 0;
    return 0;
}

/* $server_addr (data 0) and $server_port (1): the connection's local
 * end, the listening address's or asked of the kernel */
static fd_str_t v_server(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    const fd_listening_t *ls = fd_conn_listening(r->c);
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    const void *a;
    unsigned port;

    if (listen_specific(ls))
        memcpy(&ss, &ls->addr, sizeof(ss));
    else if (getsockname(r->c->s.ev.fd, (struct sockaddr *)&ss, &len) != 0)
        return fd_null_string;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        a = &in->sin_addr;
        port = ntohs(in->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        a = &in6->sin6_addr;
        port = ntohs(in6->sin6_port);
    } else {
        return fd_null_string;
    }
    if (op->var->data)
        return num(tmp, port);
    if (inet_ntop(ss.ss_family, a, tmp, FD_VAR_TMP) == NULL)
        return fd_null_string;
    return (fd_str_t){strlen(tmp), tmp};
}

/* $scheme, $https, $ssl_*, $http2...: fd_http_conn_var(), data its id */
static fd_str_t v_conn(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)tmp;
    return fd_http_conn_var(r, (int)op->var->data);
}

static fd_str_t v_protocol(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)op;
    (void)tmp;
    if (r->in.method.len == 0)
        return fd_null_string;
    return r->in.version == 10   ? fd_string("HTTP/1.0")
           : r->in.version == 20 ? fd_string("HTTP/2.0")
           : r->in.version == 30 ? fd_string("HTTP/3.0")
                                 : fd_string("HTTP/1.1");
}

/* $request: the request line as received */
static fd_str_t v_request(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    fd_str_t proto = v_protocol(r, op, tmp);
    fd_sbuf_t sb;

    if (proto.len == 0 ||
        fd_sbuf_init(&sb, r->pool, r->in.method.len + r->in.target.len +
                                        proto.len + 2) != FD_OK)
        return fd_null_string;
    fd_sbuf_add_str(&sb, r->in.method);
    fd_sbuf_addc(&sb, ' ');
    fd_sbuf_add_str(&sb, r->in.target);
    fd_sbuf_addc(&sb, ' ');
    fd_sbuf_add_str(&sb, proto);
    return fd_sbuf_failed(&sb) ? fd_null_string : fd_sbuf_str(&sb);
}

static fd_str_t v_status(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    (void)op;
    return num(tmp, (uint64_t)r->status);
}

static fd_str_t v_bytes_sent(fd_request_t *r, const fd_var_op_t *op,
                             char *tmp)
{
    (void)op;
    return num(tmp, r->bytes_sent);
}

static fd_str_t v_request_time(fd_request_t *r, const fd_var_op_t *op,
                               char *tmp)
{
    (void)op;
    return msec_text(tmp, fd_current_msec >= r->start_msec
                              ? fd_current_msec - r->start_msec
                              : 0);
}

static fd_str_t v_msec(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    struct timespec ts;

    (void)r;
    (void)op;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return msec_text(tmp, (fd_msec_t)ts.tv_sec * 1000 +
                              (fd_msec_t)ts.tv_nsec / 1000000);
}

static fd_str_t v_time_local(fd_request_t *r, const fd_var_op_t *op,
                             char *tmp)
{
    (void)r;
    (void)op;
    (void)tmp;
    return (fd_str_t){sizeof(fd_log_time) - 1, fd_log_time};
}

/* $time_iso8601, local time: formatted once a second per thread */
static fd_str_t v_time_iso(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    static __thread char buf[sizeof("1970-09-28T12:00:00+00:00")];
    static __thread time_t at = -1;
    static __thread size_t len;
    time_t now = fd_current_sec;

    (void)r;
    (void)op;
    (void)tmp;
    if (now != at) {
        struct tm tm;
        char z[8];
        localtime_r(&now, &tm);
        strftime(z, sizeof(z), "%z", &tm); /* +hhmm: nginx writes +hh:mm */
        len = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        if (len && len + 6 < sizeof(buf) && strlen(z) == 5) {
            memcpy(buf + len, z, 3);
            buf[len + 3] = ':';
            memcpy(buf + len + 4, z + 3, 2);
            len += 6;
        }
        at = now;
    }
    return (fd_str_t){len, buf};
}

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/*
 * $request_id: 32 hex digits, the same for every use in one request and
 * unique across requests: a keyed mix of the process, the connection,
 * its request count and the request's address and start. The key is
 * random per process, so ids cannot be predicted from outside.
 */
static fd_str_t v_request_id(fd_request_t *r, const fd_var_op_t *op,
                             char *tmp)
{
    static uint64_t key[2];
    static const char hex[] = "0123456789abcdef";
    uint64_t h[2], in;
    unsigned i, k;

    (void)op;
    if (key[0] == 0 && getrandom(key, sizeof(key), 0) != sizeof(key))
        key[0] = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL | 1;
    key[0] |= 1;
    in = (uint64_t)getpid() << 32 ^ r->c->id;
    h[0] = mix64(key[0] ^ in);
    h[0] = mix64(h[0] ^ r->c->requests ^ (uint64_t)r->start_msec << 20);
    h[1] = mix64(key[1] ^ h[0] ^ (uint64_t)(uintptr_t)r);
    for (k = 0; k < 2; k++)
        for (i = 0; i < 16; i++)
            tmp[k * 16 + i] = hex[(h[k] >> (60 - 4 * i)) & 15];
    return (fd_str_t){32, tmp};
}

static fd_str_t v_connection(fd_request_t *r, const fd_var_op_t *op,
                             char *tmp)
{
    (void)op;
    return num(tmp, r->c->id);
}

static fd_str_t v_conn_requests(fd_request_t *r, const fd_var_op_t *op,
                                char *tmp)
{
    (void)op;
    /* this request's number on its connection, 1 for the first, as
     * nginx counts: HTTP/1.1 counts the requests done, HTTP/2 the
     * streams taken (this one among them) */
    return num(tmp, r->c->requests + !r->h2);
}

/* $document_root, $content_length, $server_name: nginx's core
 * variables (what a FastCGI request's parameters say) */
static fd_str_t v_document_root(fd_request_t *r, const fd_var_op_t *op,
                                char *tmp)
{
    (void)op;
    (void)tmp;
    if (r->loc == NULL || r->loc->root == NULL)
        return fd_null_string;
    return (fd_str_t){r->loc->root_len, r->loc->root};
}

static fd_str_t v_content_length(fd_request_t *r, const fd_var_op_t *op,
                                 char *tmp)
{
    (void)op;
    if (r->in.content_length < 0)
        return fd_null_string;
    return num(tmp, (uint64_t)r->in.content_length);
}

static fd_str_t v_server_name(fd_request_t *r, const fd_var_op_t *op,
                              char *tmp)
{
    (void)op;
    (void)tmp;
    if (r->server == NULL || r->server->names.n == 0)
        return fd_null_string;
    return (fd_str_t){strlen(r->server->names.items[0]),
                      r->server->names.items[0]};
}

#define RQ(f) offsetof(fd_request_t, f)
#define CONN 0 /* data: fd_http_conn_var_id(name), set at first use */

static fd_var_t core_vars[] = {
    {"host", v_host, 0, 0},
    {"uri", v_field, RQ(path), 0},
    {"document_uri", v_field, RQ(path), 0},
    {"request_uri", v_request_uri, 0, FD_VAR_URLSAFE},
    {"args", v_field, RQ(in.query), FD_VAR_URLSAFE},
    {"query_string", v_field, RQ(in.query), FD_VAR_URLSAFE},
    {"is_args", v_is_args, 0, FD_VAR_URLSAFE},
    {"request_method", v_field, RQ(in.method), FD_VAR_URLSAFE},
    {"method", v_field, RQ(in.method), FD_VAR_URLSAFE},
    {"server_protocol", v_protocol, 0, 0},
    {"document_root", v_document_root, 0, 0},
    {"content_type", v_field, RQ(in.content_type), 0},
    {"content_length", v_content_length, 0, FD_VAR_NUMBER},
    {"server_name", v_server_name, 0, 0},
    {"request", v_request, 0, 0},
    /* the host as the request gave it (Host, :authority or the
     * absolute-form target), port and case kept: what the proxy forwards
     * (proxy_host = pass, X-Forwarded-Host) and writes into Location */
    {"http_host", v_field, RQ(in.host), 0},
    {"http_referer", v_field, RQ(in.referer), 0},
    {"http_user_agent", v_field, RQ(in.user_agent), 0},
    {"remote_addr", v_remote_addr, 0, FD_VAR_URLSAFE},
    {"binary_remote_addr", v_binary_remote_addr, 0, 0},
    {"realip_remote_addr", v_realip_remote_addr, 0, FD_VAR_URLSAFE},
    {"remote_port", v_remote_port, 0, FD_VAR_NUMBER | FD_VAR_URLSAFE},
    {"server_addr", v_server, 0, FD_VAR_URLSAFE},
    {"server_port", v_server, 1, FD_VAR_NUMBER | FD_VAR_URLSAFE},
    {"status", v_status, 0, FD_VAR_NUMBER},
    {"body_bytes_sent", v_bytes_sent, 0, FD_VAR_NUMBER},
    {"request_time", v_request_time, 0, FD_VAR_NUMBER},
    {"msec", v_msec, 0, FD_VAR_NUMBER},
    {"time_local", v_time_local, 0, 0},
    {"time_iso8601", v_time_iso, 0, 0},
    {"request_id", v_request_id, 0, FD_VAR_URLSAFE},
    {"connection", v_connection, 0, FD_VAR_NUMBER},
    {"connection_requests", v_conn_requests, 0, FD_VAR_NUMBER},
    {"scheme", v_conn, CONN, FD_VAR_URLSAFE},
    {"https", v_conn, CONN, FD_VAR_URLSAFE},
    {"ssl_protocol", v_conn, CONN, 0},
    {"ssl_cipher", v_conn, CONN, 0},
    {"ssl_server_name", v_conn, CONN, 0},
    {"ssl_session_reused", v_conn, CONN, 0},
    {"ssl_client_verify", v_conn, CONN, 0},
    {"ssl_client_s_dn", v_conn, CONN, 0},
    {"http2", v_conn, CONN, 0},
    {"http2_stream_id", v_conn, CONN, FD_VAR_NUMBER},
    /* prefixes: $http_NAME (a request header), $arg_NAME, $cookie_NAME */
    {"http_", v_http, 0, FD_VAR_PREFIX},
    {"sent_http_", v_sent_http, 0, FD_VAR_PREFIX},
    {"upstream_http_", v_upstream_http, 0, FD_VAR_PREFIX},
    {"arg_", v_arg, 0, FD_VAR_PREFIX},
    {"cookie_", v_cookie, 0, FD_VAR_PREFIX},
    FD_VAR_END};

/* --- the registry --- */

static int is_name_char(char c);

static void core_init(void)
{
    static int done;
    fd_var_t *v;

    if (done)
        return;
    done = 1;
    for (v = core_vars; v->name; v++)
        if (v->get == v_conn)
            v->data = (uintptr_t)fd_http_conn_var_id(v->name,
                                                     strlen(v->name));
}

static const fd_var_t *table_find(const fd_var_t *t, const char *name,
                                  size_t n, int prefix)
{
    for (; t && t->name; t++) {
        size_t l = strlen(t->name);
        if (!!(t->flags & FD_VAR_PREFIX) != prefix)
            continue;
        if (prefix ? n > l && memcmp(t->name, name, l) == 0
                   : n == l && memcmp(t->name, name, n) == 0)
            return t;
    }
    return NULL;
}

/* Exact names first (core's, the modules', the configuration's), then
 * prefixes. */
const fd_var_t *fd_var_find(const char *name, size_t n)
{
    const fd_var_t *v;
    int prefix;
    unsigned i;

    core_init();
    for (prefix = 0; prefix < 2; prefix++) {
        if ((v = table_find(core_vars, name, n, prefix)) != NULL)
            return v;
        for (i = 0; fd_modules[i]; i++)
            if ((v = table_find(fd_modules[i]->vars, name, n, prefix)))
                return v;
        if (!prefix && (v = fd_var_declared(name, n)) != NULL)
            return v;
    }
    return NULL;
}

/* --- variables a request sets (auth_request_set) --- */

struct fd_var_val_s {
    const fd_var_t *var;
    fd_str_t value;
    struct fd_var_val_s *next;
};

fd_str_t fd_var_get_set(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    const fd_var_val_t *v;

    (void)tmp;
    for (v = r ? r->vals : NULL; v; v = v->next)
        if (v->var == op->var)
            return v->value;
    return fd_null_string;
}

int fd_var_set(fd_request_t *r, const fd_var_t *var, fd_str_t value)
{
    fd_var_val_t *v;

    for (v = r->vals; v; v = v->next)
        if (v->var == var)
            break;
    if (v == NULL) {
        if ((v = fd_palloc(r->pool, sizeof(*v))) == NULL)
            return FD_ERROR;
        v->var = var;
        v->next = r->vals;
        r->vals = v;
    }
    v->value = value;
    return FD_OK;
}

/* --- variables a configuration declares --- */

/* Each in a block of its own in the configuration's pool: a script
 * compiled before the section that declares it was applied points at it,
 * and its data is set then. */
struct fd_var_decl_s {
    fd_var_t var;
    struct fd_var_decl_s *next;
};

static fd_var_decl_t *declared; /* the loading configuration's, then the
                                 * serving one's */

fd_var_decl_t *fd_var_declared_swap(fd_var_decl_t *list)
{
    fd_var_decl_t *old = declared;

    declared = list;
    return old;
}

fd_var_t *fd_var_declared(const char *name, size_t n)
{
    fd_var_decl_t *d;

    for (d = declared; d; d = d->next)
        if (strlen(d->var.name) == n && memcmp(d->var.name, name, n) == 0)
            return &d->var;
    return NULL;
}

int fd_var_declare(fd_conf_t *cf, const char *name, size_t n,
                   fd_var_get_pt get)
{
    fd_var_decl_t *d;
    size_t i;

    for (i = 0; i < n; i++)
        if (!is_name_char(name[i]))
            break;
    if (n == 0 || i < n || (name[0] >= '0' && name[0] <= '9'))
        return fd_conf_error(cf, "\"$%.*s\" is not a variable name (letters, "
                             "digits and '_')", (int)n, name);
    if (fd_var_declared(name, n))
        return fd_conf_error(cf, "$%.*s is declared twice", (int)n, name);
    if (fd_var_find(name, n))
        return fd_conf_error(cf, "$%.*s is fastd's own variable: choose "
                             "another name", (int)n, name);
    if ((d = fd_pcalloc(cf->pool, sizeof(*d))) == NULL ||
        (d->var.name = fd_pstrdup(cf->pool, name, n)) == NULL)
        return fd_conf_error(cf, "out of memory");
    d->var.get = get;
    d->next = declared;
    declared = d;
    return FD_OK;
}

static void near_table(fd_conf_near_t *nr, const fd_var_t *t)
{
    for (; t && t->name; t++)
        if (!(t->flags & FD_VAR_PREFIX))
            fd_conf_near_add(nr, t->name);
}

const char *fd_var_hint(const char *name, size_t n, char *buf, size_t size)
{
    char want[64];
    fd_conf_near_t nr;
    const char *best;
    unsigned i;

    if (n >= sizeof(want) || size == 0)
        return "";
    memcpy(want, name, n);
    want[n] = '\0';
    fd_conf_near_init(&nr, want);
    near_table(&nr, core_vars);
    for (i = 0; fd_modules[i]; i++)
        near_table(&nr, fd_modules[i]->vars);
    for (const fd_var_decl_t *d = declared; d; d = d->next)
        fd_conf_near_add(&nr, d->var.name);
    if ((best = fd_conf_near_best(&nr)) == NULL)
        return "";
    snprintf(buf, size, "; did you mean \"$%s\"?", best);
    return buf;
}

/* --- compiling --- */

static int is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

static fd_var_op_t *op_add(fd_conf_t *cf, fd_var_script_t *s, unsigned kind,
                           const char *text, size_t len)
{
    fd_var_op_t *ops = fd_palloc(cf->pool, (s->n + 1) * sizeof(*ops));
    char *t = fd_pstrdup(cf->pool, text, len);

    if (ops == NULL || t == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    if (s->n)
        memcpy(ops, s->ops, s->n * sizeof(*ops));
    ops[s->n] = (fd_var_op_t){.kind = kind, .text = {len, t},
                              .name = {len, t}};
    s->ops = ops;
    return &ops[s->n++];
}

/* $name (var found) as an op: a prefix variable's argument is the rest,
 * in the form its getter compares */
static int var_op(fd_conf_t *cf, fd_var_script_t *s, const fd_var_t *v,
                  const char *name, size_t n)
{
    fd_var_op_t *op = op_add(cf, s, FD_VAR_OP_VAR, name, n);
    size_t l, i;
    char *a;

    if (op == NULL)
        return FD_ERROR;
    op->var = v;
    op->flags = v->flags;
    if (!(v->flags & FD_VAR_PREFIX))
        return FD_OK;
    l = strlen(v->name);
    if ((a = fd_pstrdup(cf->pool, name + l, n - l)) == NULL)
        return fd_conf_error(cf, "out of memory");
    op->text = (fd_str_t){n - l, a};
    if (v->get == v_http || v->get == v_cookie || v->get == v_sent_http ||
        v->get == v_upstream_http)
        for (i = 0; i < op->text.len; i++)
            a[i] = v->get != v_cookie && a[i] == '-' ? '_' : fd_tolower(a[i]);
    return FD_OK;
}

int fd_var_compile(fd_conf_t *cf, fd_var_script_t *s, const char *src,
                   size_t len, unsigned flags, const char *what)
{
    const char *p = src, *end = src + len, *lit = src;
    char hint[96];

    s->ops = NULL;
    s->n = 0;
    while (p < end) {
        const char *name;
        const fd_var_t *v;
        size_t n = 0;
        int brace;

        if (*p != '$' || p + 1 == end ||
            !(is_name_char(p[1]) || p[1] == '{')) {
            p++;
            continue;
        }
        if (p > lit &&
            op_add(cf, s, FD_VAR_OP_LIT, lit, (size_t)(p - lit)) == NULL)
            return FD_ERROR;
        brace = p[1] == '{';
        name = p + 1 + brace;
        if ((flags & FD_VAR_CAPTURES) && name < end && *name >= '0' &&
            *name <= '9') {
            n = 1; /* $1foo is $1 then "foo", as in nginx */
        } else {
            while (name + n < end && is_name_char(name[n]))
                n++;
        }
        if (n == 0 || (brace && (name + n >= end || name[n] != '}')))
            return fd_conf_error(cf, "%s: bad variable at \"%.*s\"", what,
                                 (int)fd_min((size_t)(end - p), 20), p);
        p = name + n + brace;
        lit = p;
        if ((flags & FD_VAR_CAPTURES) && *name >= '0' && *name <= '9') {
            fd_var_op_t *op = op_add(cf, s, FD_VAR_OP_CAP, name, 1);
            if (op == NULL)
                return FD_ERROR;
            op->n = *name - '0';
            continue;
        }
        if ((v = fd_var_find(name, n)) != NULL) {
            if (var_op(cf, s, v, name, n) != FD_OK)
                return FD_ERROR;
        } else if (flags & FD_VAR_CAPTURES) {
            /* a named capture: the caller checks that a regex has it */
            if (op_add(cf, s, FD_VAR_OP_NAMED, name, n) == NULL)
                return FD_ERROR;
        } else {
            return fd_conf_error(cf, "%s: unknown variable \"$%.*s\"%s",
                                 what, (int)n, name,
                                 fd_var_hint(name, n, hint, sizeof(hint)));
        }
    }
    if (p > lit &&
        op_add(cf, s, FD_VAR_OP_LIT, lit, (size_t)(p - lit)) == NULL)
        return FD_ERROR;
    return FD_OK;
}

/* --- evaluating --- */

fd_str_t fd_var_value(fd_request_t *r, const fd_var_op_t *op,
                      const fd_var_caps_t *caps, char *tmp)
{
    int n;

    switch (op->kind) {
    case FD_VAR_OP_LIT:
        return op->text;
    case FD_VAR_OP_VAR:
        return op->var->get(r, op, tmp);
    case FD_VAR_OP_NAMED:
        if (caps == NULL || caps->re == NULL)
            return fd_null_string;
        n = pcre2_substring_number_from_name(caps->re,
                                             (PCRE2_SPTR)op->text.data);
        if (n <= 0)
            return fd_null_string;
        break;
    default:
        n = op->n;
    }
    if (caps == NULL || n >= caps->n || caps->ov[2 * n] == PCRE2_UNSET)
        return fd_null_string;
    return (fd_str_t){caps->ov[2 * n + 1] - caps->ov[2 * n],
                      caps->subj + caps->ov[2 * n]};
}

void fd_var_add_pct(fd_sbuf_t *sb, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";
    char *p = fd_sbuf_reserve(sb, 3);

    if (p) {
        p[0] = '%';
        p[1] = hex[c >> 4];
        p[2] = hex[c & 15];
        fd_sbuf_commit(sb, p + 3);
    }
}

/* c must go as %XX in a value escaped as esc says */
static int must_pct(unsigned char c, int esc)
{
    switch (esc) {
    case FD_VAR_ESC_HEADER:
        return (c < 0x20 && c != '\t') || c == 0x7f;
    case FD_VAR_ESC_ARGS:
        return c <= 0x20 || c >= 0x7f ||
               strchr("\"#%&+<>?\\^`{|}", c) != NULL;
    default: /* FD_VAR_ESC_TARGET */
        return c <= 0x20 || c >= 0x7f;
    }
}

void fd_var_add_escaped(fd_sbuf_t *sb, fd_str_t v, int esc)
{
    size_t i, from = 0;

    if (v.len == 0)
        return; /* an empty variable's data may be NULL */
    for (i = 0; i < v.len; i++) {
        unsigned char c = (unsigned char)v.data[i];
        if (!must_pct(c, esc))
            continue;
        fd_sbuf_add(sb, v.data + from, i - from);
        fd_var_add_pct(sb, c);
        from = i + 1;
    }
    fd_sbuf_add(sb, v.data + from, v.len - from);
}

void fd_var_eval(fd_request_t *r, const fd_var_script_t *s,
                 const fd_var_caps_t *caps, int esc, fd_sbuf_t *sb)
{
    char tmp[FD_VAR_TMP];
    unsigned i;

    for (i = 0; i < s->n; i++) {
        const fd_var_op_t *op = &s->ops[i];
        fd_str_t v = fd_var_value(r, op, caps, tmp);
        if (op->kind == FD_VAR_OP_LIT || esc == FD_VAR_ESC_NONE ||
            (esc == FD_VAR_ESC_ARGS && (op->flags & FD_VAR_URLSAFE)))
            fd_sbuf_add_str(sb, v);
        else
            fd_var_add_escaped(sb, v, esc);
    }
}

int fd_var_eval_str(fd_request_t *r, const fd_var_script_t *s, int esc,
                    fd_str_t *out)
{
    fd_sbuf_t sb;

    if (fd_var_is_literal(s)) {
        *out = s->n ? s->ops[0].text : fd_string("");
        return FD_OK;
    }
    if (fd_sbuf_init(&sb, r->pool, 64) != FD_OK)
        return FD_ERROR;
    fd_var_eval(r, s, NULL, esc, &sb);
    fd_sbuf_addc(&sb, '\0');
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    *out = (fd_str_t){fd_sbuf_len(&sb) - 1, sb.start};
    return FD_OK;
}
