/*
 * handler = fastcgi: requests to a FastCGI application (php-fpm) over the
 * upstream machinery of core/http/fd_upstream.h: pass = fastcgi://ADDR
 * names an [upstream NAME] group, HOST:PORT or unix:/path; the balancer,
 * passive health and the keep-alive pool are the proxy's, the pool keyed
 * by this module so neither ever takes the other's connections.
 *
 * The file reads in the order a request goes through it:
 *   1. the location keys and their checks at load;
 *   2. the request: BEGIN_REQUEST and the PARAMS (nginx's default set, the
 *      fastcgi_param ones, every request header as HTTP_*) built once in
 *      the handler; the body streamed as STDIN records as the client sends
 *      it, only while the application takes it;
 *   3. the response: records parsed (fd_fastcgi_record.c), the CGI header
 *      (Status, Location, fields) checked, the body streamed through
 *      fd_http_output() with its back-pressure; STDERR lines to the error
 *      log (warn, bounded); END_REQUEST ends it and, with FCGI_KEEP_CONN,
 *      gives the connection back to the pool;
 *   4. events and timeouts: connect, send and read timeouts are 504, a
 *      broken record or an early close 502;
 *   5. the handler and the variables ($fastcgi_script_name ...).
 *
 * Memory per request: the records of the request header in r->pool, the
 * response header (at most 16k) in r->pool, and at most two 16k blocks
 * (response, request body), whatever the size of the bodies.
 */
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_fastcgi.h"
#include "fd_http.h"
#include "fd_upstream_proto.h"
#include "fd_var.h"

#define BUF_SIZE FD_UPSTREAM_BUF /* response header limit */
#define STDERR_LINE 512       /* bytes of one stderr line logged */
#define STDERR_LINES 32       /* stderr lines logged per request */

extern fd_module_t fd_fastcgi_module;

/* --- 1. configuration ---------------------------------------------------- */

typedef struct {
    fd_str_t name;
    fd_var_script_t value;
    unsigned if_not_empty:1;
} param_t;

typedef struct {
    fd_conf_list_t params;     /* fastcgi_param, as written */
    char *index;
    pcre2_code *split;
    fd_upstream_opts_t u;      /* the timeouts: the engine's */

    /* built */
    fd_upstream_t *up;
    param_t *p;
    unsigned np;
    unsigned http_params:1;    /* a param is HTTP_*: it replaces the
                                * request header of that name */
} fcgi_loc_conf_t;

static int set_pass(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *value);
static int set_split(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *value);

#define LOC(f) offsetof(fcgi_loc_conf_t, f)

static const fd_directive_t fastcgi_directives[] = {
    {.name = "pass", .type = FD_CONF_CUSTOM, .set = set_pass,
     .handler_key = 1,
     .doc = "handler = fastcgi: fastcgi://NAME where NAME is an [upstream "
            "NAME] group (its keepalive > 0 keeps connections open with "
            "FCGI_KEEP_CONN), HOST:PORT (resolved at load; may be followed "
            "by max_fails=N and fail_timeout=T) or unix:/path/to.sock"},
    {.name = "fastcgi_param", .type = FD_CONF_LIST, .offset = LOC(params),
     .doc = "\"NAME VALUE [if_not_empty]\", repeatable: a FastCGI parameter; "
            "VALUE may hold $variables and may be empty; if_not_empty: not "
            "sent when VALUE comes out empty. Sent by default, as nginx's "
            "fastcgi_params plus SCRIPT_FILENAME and PATH_INFO (a "
            "fastcgi_param of the same NAME replaces one): SCRIPT_FILENAME "
            "$document_root$fastcgi_script_name, QUERY_STRING, "
            "REQUEST_METHOD, CONTENT_TYPE, CONTENT_LENGTH, SCRIPT_NAME, "
            "REQUEST_URI, DOCUMENT_URI, DOCUMENT_ROOT, SERVER_PROTOCOL, "
            "REQUEST_SCHEME, HTTPS (if on), GATEWAY_INTERFACE CGI/1.1, "
            "SERVER_SOFTWARE fastd, REMOTE_ADDR, REMOTE_PORT, SERVER_ADDR, "
            "SERVER_PORT, SERVER_NAME, REDIRECT_STATUS 200, PATH_INFO (if "
            "not empty); and each request header as HTTP_NAME, but "
            "Content-Type, Content-Length, Proxy (httpoxy) and names with "
            "\"_\" (HTTP_X_A would be ambiguous)"},
    {.name = "fastcgi_index", .type = FD_CONF_STR, .offset = LOC(index),
     .doc = "a file name appended to $fastcgi_script_name when the URI "
            "ends with \"/\" (fastcgi_index = index.php)"},
    {.name = "fastcgi_split_path_info", .type = FD_CONF_CUSTOM,
     .set = set_split,
     .doc = "a regex with two captures matched against the decoded path: "
            "the first is $fastcgi_script_name, the second "
            "$fastcgi_path_info (PATH_INFO). E.g. ^(.+\\.php)(/.*)$. "
            "Without it, or when it does not match, the script name is "
            "the whole path and the path info is empty"},
    {.name = "fastcgi_connect_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(u.connect_timeout), .def = "60s",
     .doc = "connecting to a FastCGI server; 504 on expiry"},
    {.name = "fastcgi_send_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(u.send_timeout), .def = "60s",
     .doc = "between two writes of the request to the FastCGI server; 504 "
            "on expiry"},
    {.name = "fastcgi_read_timeout", .type = FD_CONF_MSEC,
     .offset = LOC(u.read_timeout), .def = "60s",
     .doc = "between two reads of the response from the FastCGI server; "
            "504 on expiry before the response header, a cut response "
            "after it"},
    FD_CONF_END};

/* fastcgi://NAME | fastcgi://HOST:PORT [opts] | fastcgi://unix:/path */
static int set_pass(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                    const char *value)
{
    fcgi_loc_conf_t *lc = conf;
    const char *addr, *end, *opts, *colon;
    char name[256];
    size_t n;

    (void)d;
    if (strncmp(value, "fastcgi://", 10) != 0)
        return fd_conf_error(cf, "\"pass\" of handler = fastcgi must be "
                             "fastcgi://NAME, HOST:PORT or unix:/path, not "
                             "\"%s\"", value);
    addr = value + 10;
    end = addr + strcspn(addr, " \t");
    for (opts = end; *opts == ' ' || *opts == '\t'; opts++)
        ;
    n = (size_t)(end - addr);
    if (n == 0 || n >= sizeof(name))
        return fd_conf_error(cf, "\"pass\": bad address in \"%s\"", value);
    memcpy(name, addr, n);
    name[n] = '\0';
    lc->up = fd_cycle_section(cf->cycle, "upstream", name);
    if (lc->up) {
        if (*opts)
            return fd_conf_error(cf, "\"pass\": options for [upstream %s] "
                                 "go on its \"server\" lines", name);
        return FD_OK;
    }
    if (strncmp(name, "unix:", 5) != 0) {
        colon = name[0] == '[' ? strstr(name, "]:") : strrchr(name, ':');
        if (colon == NULL || memchr(name, '/', n))
            return fd_conf_error(cf, "\"pass\": \"%s\" is no [upstream] "
                                 "group, and HOST:PORT needs its port (a "
                                 "FastCGI server has no default)", name);
    }
    lc->up = fd_upstream_implicit(cf, name, opts);
    return lc->up ? FD_OK : FD_ERROR;
}

static int set_split(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                     const char *value)
{
    fcgi_loc_conf_t *lc = conf;
    PCRE2_SIZE off;
    uint32_t caps = 0;
    int err;

    (void)d;
    lc->split = pcre2_compile((PCRE2_SPTR)value, PCRE2_ZERO_TERMINATED, 0,
                              &err, &off, NULL);
    if (lc->split == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return fd_conf_error(cf, "\"fastcgi_split_path_info\": regex \"%s\" "
                             "at offset %zu: %s", value, (size_t)off,
                             (char *)msg);
    }
    fd_pool_cleanup_add(cf->pool, (void (*)(void *))pcre2_code_free,
                        lc->split);
    pcre2_pattern_info(lc->split, PCRE2_INFO_CAPTURECOUNT, &caps);
    if (caps != 2)
        return fd_conf_error(cf, "\"fastcgi_split_path_info\" needs two "
                             "captures (script name, path info), \"%s\" "
                             "has %u", value, caps);
    pcre2_jit_compile(lc->split, PCRE2_JIT_COMPLETE);
    return FD_OK;
}

/* nginx's fastcgi_params, SCRIPT_FILENAME and PATH_INFO */
static const char *const default_params[] = {
    "SCRIPT_FILENAME $document_root$fastcgi_script_name",
    "QUERY_STRING $query_string",
    "REQUEST_METHOD $request_method",
    "CONTENT_TYPE $content_type",
    "CONTENT_LENGTH $content_length",
    "SCRIPT_NAME $fastcgi_script_name",
    "REQUEST_URI $request_uri",
    "DOCUMENT_URI $document_uri",
    "DOCUMENT_ROOT $document_root",
    "SERVER_PROTOCOL $server_protocol",
    "REQUEST_SCHEME $scheme",
    "HTTPS $https if_not_empty",
    "GATEWAY_INTERFACE CGI/1.1",
    "SERVER_SOFTWARE fastd",
    "REMOTE_ADDR $remote_addr",
    "REMOTE_PORT $remote_port",
    "SERVER_ADDR $server_addr",
    "SERVER_PORT $server_port",
    "SERVER_NAME $server_name",
    "REDIRECT_STATUS 200",
    "PATH_INFO $fastcgi_path_info if_not_empty",
};

/* "NAME VALUE [if_not_empty]" into p (replacing one of the same name) */
static int param_add(fd_conf_t *cf, fcgi_loc_conf_t *lc, const char *s,
                     unsigned max)
{
    const char *v, *e;
    size_t n = strcspn(s, " \t"), k, vlen;
    param_t *p;
    unsigned i;

    for (k = 0; k < n; k++)
        if ((uint8_t)s[k] <= 0x20 || (uint8_t)s[k] >= 0x7f)
            break;
    if (n == 0 || k < n)
        return fd_conf_error(cf, "\"fastcgi_param\" must be \"NAME VALUE\", "
                             "not \"%s\"", s);
    for (v = s + n; *v == ' ' || *v == '\t'; v++)
        ;
    vlen = strlen(v);
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    for (i = 0; i < lc->np && !fd_str_eq(lc->p[i].name, s, n); i++)
        ;
    if (i == lc->np) {
        if (lc->np == max)
            return fd_conf_error(cf, "out of memory");
        lc->np++;
    }
    p = &lc->p[i];
    memset(p, 0, sizeof(*p));
    p->name = (fd_str_t){n, fd_pstrdup(cf->pool, s, n)};
    e = v + vlen;
    if (vlen >= 12 && memcmp(e - 12, "if_not_empty", 12) == 0 &&
        (vlen == 12 || e[-13] == ' ' || e[-13] == '\t')) {
        p->if_not_empty = 1;
        vlen -= 12;
        while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
            vlen--;
    }
    for (k = 0; k < vlen; k++)
        if ((uint8_t)v[k] < 0x20 && v[k] != '\t')
            return fd_conf_error(cf, "\"fastcgi_param\": control character "
                                 "in \"%s\"", s);
    if (n > 5 && memcmp(s, "HTTP_", 5) == 0)
        lc->http_params = 1;
    return fd_var_compile(cf, &p->value, v, vlen, 0, "fastcgi_param");
}

static int fastcgi_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    fcgi_loc_conf_t *lc = conf;
    unsigned i, max;

    if (loc->handler != &fd_fastcgi_module)
        return FD_OK;
    if (lc->up == NULL)
        return fd_conf_error(cf, "%s: handler = fastcgi needs \"pass = "
                             "fastcgi://ADDRESS\"", loc->name);
    /* a failed connect or send, or a timeout before the response: the
     * next server, while the request can be sent again */
    lc->u.next_upstream = FD_UPSTREAM_NEXT_ERROR | FD_UPSTREAM_NEXT_TIMEOUT;
    max = fd_nelems(default_params) + lc->params.n;
    lc->p = fd_pcalloc(cf->pool, max * sizeof(param_t));
    if (lc->p == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < fd_nelems(default_params); i++)
        if (param_add(cf, lc, default_params[i], max) != FD_OK)
            return FD_ERROR;
    if (lc->params.n)
        fd_conf_at_key(cf, conf, "fastcgi_param");
    for (i = 0; i < lc->params.n; i++)
        if (param_add(cf, lc, lc->params.items[i], max) != FD_OK)
            return FD_ERROR;
    return FD_OK;
}

/* --- 2. the request ------------------------------------------------------ */

typedef struct {
    fd_upstream_req_t u;       /* first: the engine's (fd_upstream_proto.h) */
    fd_request_t *r;
    fcgi_loc_conf_t *lc;
    fd_upstream_t *up;
    fd_str_t script_name;      /* $fastcgi_script_name */
    fd_str_t path_info;        /* $fastcgi_path_info */

    /* from the application */
    fd_fcgi_parser_t ps;
    fd_sbuf_t hb;              /* the CGI header until its blank line */
    size_t held_at;            /* hb: where the held body begins */
    uint64_t out_bytes;        /* body bytes handed to the engine */
    unsigned nstderr;

    unsigned discard:1;        /* HEAD, 204, 304: the body is not sent */
    unsigned streaming:1;      /* the header left: the body streams */
} fcgi_req_t;

static int frame_body(fd_upstream_req_t *u, size_t n);
static int resp_process(fd_upstream_req_t *u, int eof);

/* FastCGI on the upstream engine: STDIN records out, records in */
static const fd_upstream_proto_t fcgi_proto = {
    .what = "FastCGI upstream",
    .body_head = 8,            /* the STDIN record's header */
    .body_room = 16,           /* ... and the empty one that ends them */
    .frame_body = frame_body,
    .process = resp_process,
};

static pcre2_match_data *split_md; /* fastcgi_split_path_info's */

static void fastcgi_exit_worker(fd_worker_t *w)
{
    (void)w;
    pcre2_match_data_free(split_md);
    split_md = NULL;
}


/* fastcgi_split_path_info and fastcgi_index on the decoded path */
static void split_path(fcgi_req_t *fx)
{
    fd_request_t *r = fx->r;
    fcgi_loc_conf_t *lc = fx->lc;
    fd_str_t path = r->path;
    size_t ilen;
    char *s;

    fx->script_name = path;
    fx->path_info = (fd_str_t){0, ""};
    /* one match block for the worker (every split regex has 2 captures),
     * made once: nothing is allocated per request */
    if (lc->split && split_md == NULL)
        split_md = pcre2_match_data_create(3, NULL);
    if (lc->split && split_md &&
        pcre2_match(lc->split, (PCRE2_SPTR)path.data, path.len, 0, 0,
                    split_md, NULL) >= 3) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(split_md);
        if (ov[2] != PCRE2_UNSET && ov[4] != PCRE2_UNSET) {
            fx->script_name = (fd_str_t){ov[3] - ov[2], path.data + ov[2]};
            fx->path_info = (fd_str_t){ov[5] - ov[4], path.data + ov[4]};
        }
    }
    if (lc->index && fx->script_name.len &&
        fx->script_name.data[fx->script_name.len - 1] == '/') {
        ilen = strlen(lc->index);
        s = fd_pnalloc(r->pool, fx->script_name.len + ilen + 1);
        if (s == NULL)
            return;
        memcpy(s, fx->script_name.data, fx->script_name.len);
        memcpy(s + fx->script_name.len, lc->index, ilen + 1);
        fx->script_name = (fd_str_t){fx->script_name.len + ilen, s};
    }
}

/*
 * One name-value pair: the two lengths, the name, then the value appended
 * by the caller (a script's, of a length known only once evaluated). The
 * value's length is written as 4 bytes first; pair_end() moves the name
 * and value down 3 bytes when 1 suffices (nearly always: they are short).
 */
static void pair_begin(fd_sbuf_t *sb, const char *name, size_t n,
                       size_t *lat)
{
    char *p = fd_sbuf_reserve(sb, 8);

    if (p == NULL)
        return;
    p += fd_fcgi_len(p, n);
    *lat = (size_t)(p - sb->start);
    fd_sbuf_commit(sb, p + 4);
    fd_sbuf_add(sb, name, n);
}

static void pair_end(fd_sbuf_t *sb, size_t lat, size_t n)
{
    char *l;
    size_t vlen;

    if (fd_sbuf_failed(sb))
        return;
    l = sb->start + lat;
    vlen = (size_t)(sb->pos - (l + 4)) - n;
    if (vlen < 128) {
        l[0] = (char)vlen;
        memmove(l + 1, l + 4, n + vlen);
        sb->pos -= 3;
    } else {
        fd_fcgi_len(l, vlen);
    }
}

/* HTTP_NAME for a request header, or 0 when it is not passed */
static int header_param(fcgi_loc_conf_t *lc, fd_str_t h, char *name)
{
    unsigned i;
    size_t k;

    if (h.len == 0 || h.len > 250)
        return 0;
    if (fd_str_caseeq_lit(h, "content-type") ||
        fd_str_caseeq_lit(h, "content-length") ||
        fd_str_caseeq_lit(h, "proxy"))
        return 0;
    memcpy(name, "HTTP_", 5);
    for (k = 0; k < h.len; k++) {
        char c = h.data[k];
        if (c == '_')
            return 0;
        name[5 + k] = c == '-' ? '_' : c >= 'a' && c <= 'z' ? c - 32 : c;
    }
    if (lc->http_params)
        for (i = 0; i < lc->np; i++)
            if (fd_str_eq(lc->p[i].name, name, h.len + 5))
                return 0;
    return 1;
}

/*
 * BEGIN_REQUEST, the PARAMS records and their end, built once: every
 * attempt sends the same bytes. The pairs go right after a PARAMS header
 * that is filled in when they fit one record (they nearly always do).
 */
static int request_build(fcgi_req_t *fx)
{
    fd_request_t *r = fx->r;
    fcgi_loc_conf_t *lc = fx->lc;
    char name[256], *out, *p;
    size_t lat = 0, len;
    unsigned i;
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, 1024 + r->in.header_len) != FD_OK)
        return FD_ERROR;
    p = fd_sbuf_reserve(&sb, 24);
    if (p == NULL)
        return FD_ERROR;
    fd_fcgi_begin(p, fx->up->keepalive > 0);
    fd_sbuf_commit(&sb, p + 24);
    for (i = 0; i < lc->np; i++) {
        param_t *pm = &lc->p[i];
        size_t at = fd_sbuf_len(&sb);
        pair_begin(&sb, pm->name.data, pm->name.len, &lat);
        fd_var_eval(r, &pm->value, NULL, FD_VAR_ESC_NONE, &sb);
        if (pm->if_not_empty && !fd_sbuf_failed(&sb) &&
            fd_sbuf_len(&sb) == lat + 4 + pm->name.len) {
            sb.pos = sb.start + at;
            continue;
        }
        pair_end(&sb, lat, pm->name.len);
    }
    for (i = 0; i < r->in.nheaders; i++) {
        fd_http_header_t *h = &r->in.headers[i];
        /* Host: the one routed on, below */
        if (fd_str_caseeq_lit(h->name, "host") ||
            !header_param(lc, h->name, name))
            continue;
        pair_begin(&sb, name, h->name.len + 5, &lat);
        fd_sbuf_add_str(&sb, h->value);
        pair_end(&sb, lat, h->name.len + 5);
    }
    /* HTTP_HOST is the host fastd routed on, not the Host field as
     * sent: with an absolute-form target its authority, the field being
     * ignored (RFC 9112 3.2.2; an application building links from
     * HTTP_HOST must not get one the client chose beside it), over
     * HTTP/2 :authority (a host field differing from it is a 400) */
    if (r->in.host.len &&
        header_param(lc, fd_string("Host"), name)) {
        pair_begin(&sb, name, 9, &lat);
        fd_sbuf_add_str(&sb, r->in.host);
        pair_end(&sb, lat, 9);
    }
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    len = fd_sbuf_len(&sb) - 24;
    out = fd_pnalloc(r->pool, 16 + fd_fcgi_params_size(len) + 8);
    if (out == NULL)
        return FD_ERROR;
    if (len <= FD_FCGI_MAX_CONTENT) {
        /* in place: the PARAMS header, then the empty one after */
        fd_fcgi_header(sb.start + 16, FD_FCGI_PARAMS, len);
        p = fd_sbuf_reserve(&sb, 16);
        if (p == NULL)
            return FD_ERROR;
        fd_fcgi_header(p, FD_FCGI_PARAMS, 0);
        fd_sbuf_commit(&sb, p + 8);
        out = sb.start;
        p = sb.pos;
    } else {
        memcpy(out, sb.start, 16);
        p = fd_fcgi_params(out + 16, sb.start + 24, len);
    }
    if (!fx->u.has_body) {
        fd_fcgi_header(p, FD_FCGI_STDIN, 0);
        p += 8;
    }
    fx->u.hdr = out;
    fx->u.hdr_len = (size_t)(p - out);
    return FD_OK;
}

/* Let go of the connection (into the pool when reuse). */

/* One STDIN record of n body bytes at obuf + 8 (and the empty one that
 * ends them, once the body is complete); n == 0: that one alone. */
static int frame_body(fd_upstream_req_t *u, size_t n)
{
    if (n == 0) {
        fd_fcgi_header(u->obuf, FD_FCGI_STDIN, 0);
        u->opos = 0;
        u->olen = 8;
        return FD_OK;
    }
    fd_fcgi_header(u->obuf, FD_FCGI_STDIN, n);
    u->opos = 0;
    u->olen = 8 + n;
    if (u->body_bytes >= u->r->in.content_length) {
        fd_fcgi_header(u->obuf + u->olen, FD_FCGI_STDIN, 0);
        u->olen += 8;
        u->body_done = 1;
    }
    return FD_OK;
}

/* --- 3. the response ----------------------------------------------------- */

/* STDERR content: one warning per line, bounded per request */
static void log_stderr(fcgi_req_t *fx, const char *s, size_t n)
{
    char line[STDERR_LINE];

    while (n) {
        const char *nl = memchr(s, '\n', n);
        size_t len = nl ? (size_t)(nl - s) : n, k, m;

        if (len && !(len == 1 && s[0] == '\r')) {
            if (fx->nstderr == STDERR_LINES) {
                fd_log_error(FD_LOG_WARN, 0, "FastCGI upstream \"%s\": "
                             "further stderr of this request not logged",
                             fx->up->name);
            } else if (fx->nstderr < STDERR_LINES) {
                m = fd_min(len, sizeof(line));
                for (k = 0; k < m; k++)
                    line[k] = (uint8_t)s[k] < 0x20 || s[k] == 0x7f ? ' '
                                                                   : s[k];
                fd_log_error(FD_LOG_WARN, 0, "FastCGI upstream \"%s\" server "
                             "%s sent in stderr: %.*s%s", fx->up->name,
                             fx->u.peer ? fx->u.peer->name : "-", (int)m, line,
                             m < len ? "..." : "");
            }
            fx->nstderr++;
        }
        if (nl == NULL)
            break;
        n -= len + 1;
        s = nl + 1;
    }
}

/* The CGI header in hb[0, len): fields into r. FD_OK or FD_DONE. */
static int cgi_header(fcgi_req_t *fx, size_t len)
{
    fd_request_t *r = fx->r;
    char *p = fx->hb.start, *end = p + len;
    int status = 0, location = 0;

    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *colon, *v, *ve;
        fd_str_t n, val;
        size_t k;

        ve = nl ? nl : end;
        if (ve > p && ve[-1] == '\r')
            ve--;
        if (ve == p)
            break; /* the blank line */
        colon = memchr(p, ':', (size_t)(ve - p));
        if (colon == NULL || colon == p)
            return fd_upstream_req_invalid(&fx->u, "sent a header line without a name");
        for (k = 0; p + k < colon; k++)
            if (!fd_http_tchar[(uint8_t)p[k]])
                return fd_upstream_req_invalid(&fx->u, "sent an invalid header name");
        for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++)
            ;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (k = 0; v + k < ve; k++)
            if (((uint8_t)v[k] < 0x20 && v[k] != '\t') || v[k] == 0x7f)
                return fd_upstream_req_invalid(&fx->u, "sent a control character in a "
                                    "header value");
        n = (fd_str_t){(size_t)(colon - p), p};
        val = (fd_str_t){(size_t)(ve - v), v};
        p = nl ? nl + 1 : end;
        switch (n.len) {
        case 4:
            if (fd_str_caseeq_lit(n, "date"))
                continue; /* the engine's own */
            break;
        case 6:
            if (fd_str_caseeq_lit(n, "status")) {
                if (val.len < 3 || val.data[0] < '1' || val.data[0] > '5' ||
                    val.data[1] < '0' || val.data[1] > '9' ||
                    val.data[2] < '0' || val.data[2] > '9' ||
                    (val.len > 3 && val.data[3] != ' '))
                    return fd_upstream_req_invalid(&fx->u, "sent an invalid Status");
                status = (val.data[0] - '0') * 100 +
                         (val.data[1] - '0') * 10 + (val.data[2] - '0');
                if (status < 200)
                    return fd_upstream_req_invalid(&fx->u, "sent a 1xx Status");
                continue;
            }
            if (fd_str_caseeq_lit(n, "server"))
                continue;
            break;
        case 7:
            if (fd_str_caseeq_lit(n, "trailer") ||
                fd_str_caseeq_lit(n, "upgrade"))
                continue;
            break;
        case 8:
            if (fd_str_caseeq_lit(n, "location"))
                location = 1;
            break;
        case 10:
            if (fd_str_caseeq_lit(n, "connection") ||
                fd_str_caseeq_lit(n, "keep-alive"))
                continue;
            break;
        case 12:
            if (fd_str_caseeq_lit(n, "content-type")) {
                r->content_type = val;
                continue;
            }
            break;
        case 14:
            /* the body is framed by the records, not by what it says */
            if (fd_str_caseeq_lit(n, "content-length"))
                continue;
            break;
        case 17:
            if (fd_str_caseeq_lit(n, "transfer-encoding"))
                continue;
            break;
        }
        if (fd_http_header_add(r, n, val) != FD_OK)
            return fd_upstream_req_fail(&fx->u, 500);
    }
    r->status = status ? status : location ? 302 : 200;
    fx->discard = r->header_only || r->status == 204 || r->status == 304;
    r->content_length = -1;
    fx->u.header_done = 1;
    /* logged, timed, passive health */
    return fd_upstream_req_header(&fx->u, r->status);
}

/*
 * STDOUT bytes while the header is incomplete: gather them (at most 16k)
 * until the blank line; what follows it is the body's first bytes, held
 * in hb from held_at on.
 */
static int header_feed(fcgi_req_t *fx, const char *s, size_t n)
{
    size_t len, i, hend = 0;
    char *h;

    if (fd_sbuf_len(&fx->hb) + n > BUF_SIZE)
        return fd_upstream_req_invalid(&fx->u, "sent a response header over 16k");
    fd_sbuf_add(&fx->hb, s, n);
    if (fd_sbuf_failed(&fx->hb))
        return fd_upstream_req_fail(&fx->u, 500);
    h = fx->hb.start;
    len = fd_sbuf_len(&fx->hb);
    /* "\n\n" or "\n\r\n" ends it; a first line that is blank too */
    for (i = fx->u.hscan; i < len; i++) {
        if (h[i] != '\n')
            continue;
        if (i == 0 || (i == 1 && h[0] == '\r')) {
            hend = i + 1;
            break;
        }
        if (h[i - 1] == '\n' || (h[i - 1] == '\r' && i >= 2 &&
                                 h[i - 2] == '\n')) {
            hend = i + 1;
            break;
        }
    }
    if (hend == 0) {
        fx->u.hscan = len;
        return FD_OK;
    }
    if (cgi_header(fx, hend) != FD_OK)
        return FD_DONE;
    fx->held_at = hend; /* the body's first bytes are held after it */
    return FD_OK;
}

/* Parse what ibuf holds, at most 16 pieces, and hand the body on. */
static int process_some(fcgi_req_t *fx)
{
    fd_request_t *r = fx->r;
    fd_buf_t b[16], hold, *chain = NULL;
    const char *p = fx->u.ibuf + fx->u.ipos, *end = fx->u.ibuf + fx->u.ilast;
    const char *why;
    unsigned nb = 0, k;
    uint64_t bytes = 0;
    int ended = 0, reuse = 0, rc;
    fd_fcgi_piece_t pc;

    while (nb < fd_nelems(b)) {
        rc = fd_fcgi_parse(&fx->ps, &p, end, &pc, &why);
        if (rc == FD_AGAIN)
            break;
        if (rc == FD_ERROR) {
            if (!r->header_sent)
                return fd_upstream_req_invalid(&fx->u, why);
            fd_log_error(FD_LOG_ERR, 0, "FastCGI upstream \"%s\" server %s: "
                         "%s", fx->up->name, fx->u.peer->name, why);
            fd_upstream_peer_failed(fx->u.peer);
            return fd_upstream_req_fail(&fx->u, FD_ERROR);
        }
        if (pc.type == FD_FCGI_STDERR) {
            log_stderr(fx, pc.data, pc.len);
            continue;
        }
        if (pc.type == FD_FCGI_END_REQUEST) {
            if (!fx->u.header_done)
                return fd_upstream_req_invalid(&fx->u, "ended the request without a "
                                    "response header");
            ended = 1;
            if (p != end)
                return fd_upstream_req_invalid(&fx->u, "sent data after END_REQUEST");
            reuse = fx->up->keepalive > 0 &&
                    pc.protocol_status == FD_FCGI_REQUEST_COMPLETE;
            break;
        }
        if (!fx->u.header_done) {
            if (header_feed(fx, pc.data, pc.len) != FD_OK)
                return FD_DONE;
            continue;
        }
        if (fx->discard || pc.len == 0)
            continue;
        b[nb++] = (fd_buf_t){.pos = (char *)pc.data,
                             .last = (char *)pc.data + pc.len,
                             .file_fd = -1};
        bytes += pc.len;
    }
    fx->u.ipos = (size_t)(p - fx->u.ibuf);
    for (k = 0; k + 1 < nb; k++)
        b[k].next = &b[k + 1];
    if (nb)
        chain = &b[0];
    if (!fx->u.header_done)
        return FD_OK;

    /*
     * The header leaves with the first 16k of body, or with END_REQUEST:
     * until then the body is held in hb, so a response that fails early
     * (a broken record, a close) is still a clean 502, and a small one
     * goes with its Content-Length instead of chunked.
     */
    if (!fx->streaming && !fx->discard) {
        size_t held = fd_sbuf_len(&fx->hb) - fx->held_at;
        if (!ended && held + bytes <= BUF_SIZE) {
            for (k = 0; k < nb; k++)
                fd_sbuf_add(&fx->hb, b[k].pos, (size_t)(b[k].last -
                                                        b[k].pos));
            if (fd_sbuf_failed(&fx->hb))
                return fd_upstream_req_fail(&fx->u, 500);
            return FD_OK;
        }
        if (held) {
            hold = (fd_buf_t){.pos = fx->hb.start + fx->held_at,
                              .last = fx->hb.pos, .file_fd = -1,
                              .next = chain};
            chain = &hold;
            bytes += held;
        }
        fx->streaming = 1;
    }

    if (ended) {
        /* the whole body is here before the header left: say its length
         * rather than chunk it */
        if (!r->header_sent && fx->out_bytes == 0 && !fx->discard)
            r->content_length = (int64_t)bytes;
        return fd_upstream_req_last(&fx->u, chain, reuse);
    }
    if (chain == NULL)
        return FD_OK;
    fx->out_bytes += bytes;
    return fd_upstream_req_output(&fx->u, chain);
}

/* The engine's process: every piece ibuf holds (more than one output
 * call takes: go on) while the client keeps up. */
static int resp_process(fd_upstream_req_t *u, int eof)
{
    fcgi_req_t *fx = (fcgi_req_t *)u;
    int rc;

    (void)eof; /* END_REQUEST ends a response, never the close */
    do {
        rc = process_some(fx);
    } while (rc == FD_OK && u->ipos < u->ilast);
    return rc;
}

/* --- 5. the handler and the variables ------------------------------------ */

static int fastcgi_handler(fd_request_t *r)
{
    fcgi_loc_conf_t *lc = fd_loc_conf(r->loc, &fd_fastcgi_module);
    fd_upstream_t *up = lc->up;
    fcgi_req_t *fx;

    /* FastCGI needs CONTENT_LENGTH before the body: a chunked one would
     * have to be buffered whole first, which this handler does not do */
    if (r->in.chunked)
        return 411;
    fx = fd_pcalloc(r->pool, fd_upstream_req_size(sizeof(*fx), up));
    if (fx == NULL)
        return 500;
    fd_upstream_req_init(&fx->u, r, up, &lc->u, &fcgi_proto,
                         (uint64_t *)(fx + 1));
    fx->u.key = &fd_fastcgi_module; /* the pool: never the proxy's */
    fx->u.body_after_hdr = 1;       /* STDIN after the PARAMS' end */
    fx->r = r;
    fx->lc = lc;
    fx->up = up;
    fd_fcgi_parser_init(&fx->ps);
    r->ctx = fx;
    split_path(fx);
    if (request_build(fx) != FD_OK ||
        fd_sbuf_init(&fx->hb, r->pool, 512) != FD_OK)
        return 500;
    return fd_upstream_req_start(&fx->u);
}

static fcgi_req_t *request_fx(fd_request_t *r)
{
    if (r == NULL || r->loc == NULL || r->loc->handler != &fd_fastcgi_module)
        return NULL;
    return r->ctx;
}

enum { V_SCRIPT, V_PATH_INFO, V_ROOT, V_CTYPE, V_CLEN, V_SERVER_NAME };

static fd_str_t v_fastcgi(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    fcgi_req_t *fx, early;

    switch (op->var->data) {
    case V_SCRIPT:
    case V_PATH_INFO:
        fx = request_fx(r);
        if (fx == NULL && r && r->loc &&
            r->loc->handler == &fd_fastcgi_module) {
            /* before the handler (try_files, rewrite, the access phase):
             * the split made now, as nginx's variables are (try_files =
             * $fastcgi_script_name =404 is the usual guard); its slices
             * are r->path's or the pool's, not early's */
            memset(&early, 0, sizeof(early));
            early.r = r;
            early.lc = fd_loc_conf(r->loc, &fd_fastcgi_module);
            split_path(&early);
            fx = &early;
        }
        if (fx == NULL)
            return fd_null_string;
        return op->var->data == V_SCRIPT ? fx->script_name : fx->path_info;
    case V_ROOT:
        if (r->loc == NULL || r->loc->root == NULL)
            return fd_null_string;
        return (fd_str_t){r->loc->root_len, r->loc->root};
    case V_CTYPE:
        return r->in.content_type;
    case V_CLEN:
        if (r->in.content_length < 0)
            return fd_null_string;
        return (fd_str_t){(size_t)(fd_fmt_uint(tmp, (uint64_t)
                                               r->in.content_length) -
                                   tmp),
                          tmp};
    }
    if (r->server == NULL || r->server->names.n == 0)
        return fd_null_string;
    return (fd_str_t){strlen(r->server->names.items[0]),
                      r->server->names.items[0]};
}

/* $document_root, $content_type, $content_length and $server_name are
 * nginx's core variables; they live here, their first user */
static const fd_var_t fastcgi_vars[] = {
    {"fastcgi_script_name", v_fastcgi, V_SCRIPT, 0},
    {"fastcgi_path_info", v_fastcgi, V_PATH_INFO, 0},
    {"document_root", v_fastcgi, V_ROOT, 0},
    {"content_type", v_fastcgi, V_CTYPE, 0},
    {"content_length", v_fastcgi, V_CLEN, FD_VAR_NUMBER},
    {"server_name", v_fastcgi, V_SERVER_NAME, 0},
    FD_VAR_END};

fd_module_t fd_fastcgi_module = {
    FD_MODULE_LOC(fastcgi, fcgi_loc_conf_t),
    .exit_worker = fastcgi_exit_worker,
    .handler = fastcgi_handler,
    .flags = FD_MODULE_STREAM_BODY,
    .methods = FD_METHODS_ANY, /* the application decides */
    .vars = fastcgi_vars,
};
