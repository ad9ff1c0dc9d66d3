/*
 * handler = fastcgi: requests to a FastCGI application (php-fpm), a
 * backend protocol on the upstream engine's public face
 * (core/api/fastd_upstream.h), written on the public API alone: built in,
 * or as objs/fd_fastcgi.so with ./configure --with-fastcgi=dynamic.
 * pass = fastcgi://ADDR names an [upstream NAME] group, HOST:PORT or
 * unix:/path; the balancer, passive health and the keep-alive pool are
 * the engine's, the pool keyed by this protocol so that no other ever
 * takes its connections.
 *
 * The file reads in the order a request goes through it:
 *   1. the location keys and their checks at load;
 *   2. the request: BEGIN_REQUEST and the PARAMS (nginx's default set, the
 *      fastcgi_param ones, every request header as HTTP_*) built once; the
 *      body framed as STDIN records as the engine pulls it from the client,
 *      only while the application takes it;
 *   3. the response: records parsed (fd_fastcgi_record.c), the CGI header
 *      (Status, Location, fields) checked, the body handed to the engine
 *      with its back-pressure; STDERR lines to the error log (warn,
 *      bounded); END_REQUEST ends it and, with FCGI_KEEP_CONN, gives the
 *      connection back to the pool;
 *   4. the handler and the variables ($fastcgi_script_name ...).
 * Connect, send and read timeouts are 504, a broken record or an early
 * close 502: the engine's.
 *
 * Memory per request: the records of the request header and the response
 * header (at most 16k) in the request's memory, and the engine's two 16k
 * blocks (response, request body), whatever the size of the bodies.
 */
#include <strings.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "fastd_upstream.h"
#include "fd_fastcgi.h"

#define HEADER_MAX 16384 /* the response header's limit */
#define STDERR_LINE 512  /* bytes of one stderr line logged */
#define STDERR_LINES 32  /* stderr lines logged per request */
#define PARTS 8          /* a value's parts evaluated at once */

#define min(a, b) ((a) < (b) ? (a) : (b))
#define lit_eq(s, lit)                                                       \
    ((s).len == sizeof(lit) - 1 && strncasecmp((s).data, lit, (s).len) == 0)

/* --- 1. configuration ---------------------------------------------------- */

typedef struct param_s {
    fd_str_t name;
    const fd_api_script_t *value;
    fd_str_t text;             /* a value that is text alone */
    unsigned nparts;           /* else its parts */
    unsigned if_not_empty:1;
    unsigned literal:1;
    struct param_s *next;      /* fastcgi_param lines, as written */
} param_t;

typedef struct {
    const char *index;
    uint64_t connect_timeout, send_timeout, read_timeout;

    /* set by set() */
    fd_api_upstream_t *up;
    pcre2_code *split;
    param_t *lines, **last;

    /* built */
    fd_api_upstream_conf_t *ucf;
    const fd_api_cvar_t *http_host;
    param_t *p;
    unsigned np;
    unsigned http_params:1;    /* a param is HTTP_*: it replaces the
                                * request header of that name */
} fcgi_conf_t;

#define CONF(f) offsetof(fcgi_conf_t, f)

static const fd_api_key_t fastcgi_keys[] = {
    {.name = "pass", .type = FD_API_CUSTOM,
     .doc = "handler = fastcgi: fastcgi://NAME where NAME is an [upstream "
            "NAME] group (its keepalive > 0 keeps connections open with "
            "FCGI_KEEP_CONN), HOST:PORT (resolved at load; may be followed "
            "by max_fails=N and fail_timeout=T) or unix:/path/to.sock"},
    {.name = "fastcgi_param", .type = FD_API_LIST,
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
    {.name = "fastcgi_index", .type = FD_API_STRING, .offset = CONF(index),
     .doc = "a file name appended to $fastcgi_script_name when the URI "
            "ends with \"/\" (fastcgi_index = index.php)"},
    {.name = "fastcgi_split_path_info", .type = FD_API_CUSTOM,
     .doc = "a regex with two captures matched against the decoded path: "
            "the first is $fastcgi_script_name, the second "
            "$fastcgi_path_info (PATH_INFO). E.g. ^(.+\\.php)(/.*)$. "
            "Without it, or when it does not match, the script name is "
            "the whole path and the path info is empty"},
    {.name = "fastcgi_connect_timeout", .type = FD_API_MSEC,
     .offset = CONF(connect_timeout), .def = "60s",
     .doc = "connecting to a FastCGI server; 504 on expiry"},
    {.name = "fastcgi_send_timeout", .type = FD_API_MSEC,
     .offset = CONF(send_timeout), .def = "60s",
     .doc = "between two writes of the request to the FastCGI server; 504 "
            "on expiry"},
    {.name = "fastcgi_read_timeout", .type = FD_API_MSEC,
     .offset = CONF(read_timeout), .def = "60s",
     .doc = "between two reads of the response from the FastCGI server; "
            "504 on expiry before the response header, a cut response "
            "after it"},
    {.name = NULL}};

/* fastcgi://NAME | fastcgi://HOST:PORT [opts] | fastcgi://unix:/path */
static int set_pass(fcgi_conf_t *lc, const char *value)
{
    const char *addr, *end, *opts, *colon;
    char name[256];
    size_t n;

    if (strncmp(value, "fastcgi://", 10) != 0) {
        fd_api_conf_error("\"pass\" of handler = fastcgi must be "
                          "fastcgi://NAME, HOST:PORT or unix:/path, not "
                          "\"%s\"", value);
        return FD_ERROR;
    }
    addr = value + 10;
    end = addr + strcspn(addr, " \t");
    for (opts = end; *opts == ' ' || *opts == '\t'; opts++)
        ;
    n = (size_t)(end - addr);
    if (n == 0 || n >= sizeof(name)) {
        fd_api_conf_error("\"pass\": bad address in \"%s\"", value);
        return FD_ERROR;
    }
    memcpy(name, addr, n);
    name[n] = '\0';
    lc->up = fd_api_upstream_group(name);
    if (lc->up) {
        if (*opts == '\0')
            return FD_OK;
        fd_api_conf_error("\"pass\": options for [upstream %s] go on its "
                          "\"server\" lines", name);
        return FD_ERROR;
    }
    if (strncmp(name, "unix:", 5) != 0) {
        colon = name[0] == '[' ? strstr(name, "]:") : strrchr(name, ':');
        if (colon == NULL || memchr(name, '/', n)) {
            fd_api_conf_error("\"pass\": \"%s\" is no [upstream] group, and "
                              "HOST:PORT needs its port (a FastCGI server "
                              "has no default)", name);
            return FD_ERROR;
        }
    }
    lc->up = fd_api_upstream_server(name, opts);
    return lc->up ? FD_OK : FD_ERROR;
}

static void split_free(void *re)
{
    pcre2_code_free(re);
}

static int set_split(fcgi_conf_t *lc, const char *value)
{
    PCRE2_SIZE off;
    uint32_t caps = 0;
    int err;

    lc->split = pcre2_compile((PCRE2_SPTR)value, PCRE2_ZERO_TERMINATED, 0,
                              &err, &off, NULL);
    if (lc->split == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        fd_api_conf_error("\"fastcgi_split_path_info\": regex \"%s\" at "
                          "offset %zu: %s", value, (size_t)off, (char *)msg);
        return FD_ERROR;
    }
    if (fd_api_conf_cleanup(split_free, lc->split) != FD_OK) {
        pcre2_code_free(lc->split);
        lc->split = NULL;
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    pcre2_pattern_info(lc->split, PCRE2_INFO_CAPTURECOUNT, &caps);
    if (caps != 2) {
        fd_api_conf_error("\"fastcgi_split_path_info\" needs two captures "
                          "(script name, path info), \"%s\" has %u", value,
                          caps);
        return FD_ERROR;
    }
    pcre2_jit_compile(lc->split, PCRE2_JIT_COMPLETE);
    return FD_OK;
}

/* "NAME VALUE [if_not_empty]", compiled into *p */
static int param_parse(param_t *p, const char *s)
{
    const char *v, *e;
    size_t n = strcspn(s, " \t"), k, vlen;
    fd_api_part_t part;
    char *name;

    for (k = 0; k < n; k++)
        if ((uint8_t)s[k] <= 0x20 || (uint8_t)s[k] >= 0x7f)
            break;
    if (n == 0 || k < n) {
        fd_api_conf_error("\"fastcgi_param\" must be \"NAME VALUE\", not "
                          "\"%s\"", s);
        return FD_ERROR;
    }
    for (v = s + n; *v == ' ' || *v == '\t'; v++)
        ;
    vlen = strlen(v);
    while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
        vlen--;
    memset(p, 0, sizeof(*p));
    if ((name = fd_api_conf_alloc(n)) == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    memcpy(name, s, n);
    p->name = (fd_str_t){n, name};
    e = v + vlen;
    if (vlen >= 12 && memcmp(e - 12, "if_not_empty", 12) == 0 &&
        (vlen == 12 || e[-13] == ' ' || e[-13] == '\t')) {
        p->if_not_empty = 1;
        vlen -= 12;
        while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
            vlen--;
    }
    for (k = 0; k < vlen; k++)
        if ((uint8_t)v[k] < 0x20 && v[k] != '\t') {
            fd_api_conf_error("\"fastcgi_param\": control character in "
                              "\"%s\"", s);
            return FD_ERROR;
        }
    p->value = fd_api_script_compile(v, vlen, 0, "fastcgi_param");
    if (p->value == NULL)
        return FD_ERROR;
    /* text alone (CGI/1.1, an empty value) is written as it is */
    p->nparts = fd_api_script_parts(p->value);
    if (p->nparts == 0 || (p->nparts == 1 &&
                           fd_api_script_part(p->value, 0, &part) == FD_OK &&
                           part.kind == FD_API_PART_TEXT)) {
        p->literal = 1;
        p->text = p->nparts ? part.name : (fd_str_t){0, ""};
    }
    return FD_OK;
}

static int fastcgi_set(void *conf, const char *key, const char *value,
                       int own)
{
    fcgi_conf_t *lc = conf;
    param_t *p;

    (void)own;
    if (strcmp(key, "pass") == 0)
        return set_pass(lc, value);
    if (strcmp(key, "fastcgi_split_path_info") == 0)
        return set_split(lc, value);
    /* fastcgi_param: checked at its line, kept in order */
    if ((p = fd_api_conf_alloc(sizeof(*p))) == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    if (param_parse(p, value) != FD_OK)
        return FD_ERROR;
    if (lc->last == NULL)
        lc->last = &lc->lines;
    *lc->last = p;
    lc->last = &p->next;
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

/* p into lc->p, replacing one of the same name */
static void param_add(fcgi_conf_t *lc, const param_t *p)
{
    unsigned i;

    for (i = 0; i < lc->np; i++)
        if (lc->p[i].name.len == p->name.len &&
            memcmp(lc->p[i].name.data, p->name.data, p->name.len) == 0)
            break;
    if (i == lc->np)
        lc->np++;
    lc->p[i] = *p;
    lc->p[i].next = NULL;
    if (p->name.len > 5 && memcmp(p->name.data, "HTTP_", 5) == 0)
        lc->http_params = 1;
}

static const fd_api_upstream_proto_t fcgi_proto;

static int fastcgi_init_conf(void *conf)
{
    fcgi_conf_t *lc = conf;
    unsigned i, max = sizeof(default_params) / sizeof(default_params[0]);
    param_t d;
    const param_t *l;

    if (lc->up == NULL) {
        fd_api_conf_error("handler = fastcgi needs \"pass = "
                          "fastcgi://ADDRESS\"");
        return FD_ERROR;
    }
    for (l = lc->lines; l; l = l->next)
        max++;
    lc->ucf = fd_api_upstream_conf(lc->up, &fcgi_proto);
    lc->p = fd_api_conf_alloc(max * sizeof(param_t));
    lc->http_host = fd_api_var_compile("http_host");
    if (lc->ucf == NULL || lc->p == NULL || lc->http_host == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    /* a failed connect or send, or a timeout before the response: the
     * next server, while the request can be sent again (the default) */
    fd_api_upstream_conf_set(lc->ucf, FD_API_UPSTREAM_CONNECT_TIMEOUT,
                             (int64_t)lc->connect_timeout);
    fd_api_upstream_conf_set(lc->ucf, FD_API_UPSTREAM_SEND_TIMEOUT,
                             (int64_t)lc->send_timeout);
    fd_api_upstream_conf_set(lc->ucf, FD_API_UPSTREAM_READ_TIMEOUT,
                             (int64_t)lc->read_timeout);
    for (i = 0; i < sizeof(default_params) / sizeof(default_params[0]);
         i++) {
        if (param_parse(&d, default_params[i]) != FD_OK)
            return FD_ERROR;
        param_add(lc, &d);
    }
    for (l = lc->lines; l; l = l->next)
        param_add(lc, l);
    return FD_OK;
}

/* --- 2. the request ------------------------------------------------------ */

/* What the module writes (the PARAMS, the CGI header) goes through a
 * window in a string builder of the request's (fd_api_out_t). */

typedef struct {
    fd_request_t *r;
    fd_api_upstream_req_t *u;
    const fcgi_conf_t *lc;
    fd_str_t script_name;      /* $fastcgi_script_name */
    fd_str_t path_info;        /* $fastcgi_path_info */
    int64_t body_length;       /* the client's Content-Length */
    int64_t body_bytes;        /* of it, framed as STDIN */

    /* from the application */
    fd_fcgi_parser_t ps;
    fd_api_out_t hb;           /* the CGI header until its blank line */
    size_t hscan;              /* hb: where the scan for its end resumes */
    size_t held_at;            /* hb: where the held body begins */
    uint64_t out_bytes;        /* body bytes handed to the engine */
    unsigned nstderr;

    unsigned header_done:1;
    unsigned discard:1;        /* HEAD, 204, 304: the body is not sent */
    unsigned streaming:1;      /* the header left: the body streams */
} fcgi_req_t;

static pcre2_match_data *split_md; /* fastcgi_split_path_info's */

static void fastcgi_exit_worker(void)
{
    pcre2_match_data_free(split_md);
    split_md = NULL;
}

/* fastcgi_split_path_info and fastcgi_index on the decoded path */
static void split_path(fcgi_req_t *fx)
{
    const fcgi_conf_t *lc = fx->lc;
    fd_str_t path = fd_req_path(fx->r);
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
        s = fd_req_alloc(fx->r, fx->script_name.len + ilen + 1);
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
static void pair_begin(fd_api_out_t *o, const char *name, size_t n,
                       size_t *lat)
{
    char *p = fd_api_out_room(o, 8 + n);

    if (p == NULL)
        return;
    p += fd_fcgi_len(p, n);
    *lat = (size_t)(p - o->base);
    memcpy(p + 4, name, n);
    o->p = p + 4 + n;
}

static void pair_end(fd_api_out_t *o, size_t lat, size_t n)
{
    char *l;
    size_t vlen;

    if (o->p == NULL)
        return;
    l = o->base + lat;
    vlen = (size_t)(o->p - (l + 4)) - n;
    if (vlen < 128) {
        l[0] = (char)vlen;
        memmove(l + 1, l + 4, n + vlen);
        o->p -= 3;
    } else {
        fd_fcgi_len(l, vlen);
    }
}

/* HTTP_NAME for a request header, or 0 when it is not passed */
static int header_param(const fcgi_conf_t *lc, fd_str_t h, char *name)
{
    unsigned i;
    size_t k;

    if (h.len == 0 || h.len > 250)
        return 0;
    if (lit_eq(h, "content-type") || lit_eq(h, "content-length") ||
        lit_eq(h, "proxy"))
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
            if (lc->p[i].name.len == h.len + 5 &&
                memcmp(lc->p[i].name.data, name, h.len + 5) == 0)
                return 0;
    return 1;
}

/* A parameter's value for r, part by part, appended */
static void param_value(fd_api_out_t *b, fd_request_t *r, const param_t *pm)
{
    char tmp[FD_API_VAR_TMP];
    unsigned i;

    if (pm->literal) {
        fd_api_out_add(b, pm->text.data, pm->text.len);
        return;
    }
    for (i = 0; i < pm->nparts; i++) {
        fd_str_t v = fd_req_script_value(r, pm->value, i, NULL, tmp);
        fd_api_out_add(b, v.data, v.len);
    }
}

/*
 * BEGIN_REQUEST, the PARAMS records and their end, built once: every
 * attempt sends the same bytes. The pairs go right after a PARAMS header
 * that is filled in when they fit one record (they nearly always do).
 */
static int fcgi_build(fd_api_upstream_req_t *u, void *data, fd_str_t *out)
{
    fcgi_req_t *fx = data;
    fd_request_t *r = fx->r;
    const fcgi_conf_t *lc = fx->lc;
    char name[256], tmp[FD_API_VAR_TMP], *o, *p;
    size_t lat = 0, len;
    fd_str_t hn, hv, host;
    unsigned i;
    fd_api_out_t b;

    (void)u;
    if (fd_api_out_init(&b, r, 2048) != FD_OK)
        return 500;
    fd_fcgi_begin(b.p, fd_api_upstream_keepalive(lc->up) > 0);
    b.p += 24;
    for (i = 0; i < lc->np; i++) {
        const param_t *pm = &lc->p[i];
        size_t at = fd_api_out_len(&b);
        pair_begin(&b, pm->name.data, pm->name.len, &lat);
        param_value(&b, r, pm);
        if (pm->if_not_empty && b.p &&
            fd_api_out_len(&b) == lat + 4 + pm->name.len) {
            b.p = b.base + at;
            continue;
        }
        pair_end(&b, lat, pm->name.len);
    }
    for (i = 0; fd_req_header_line(r, i, &hn, &hv) == FD_OK; i++) {
        /* Host: the one routed on, below */
        if (lit_eq(hn, "host") || !header_param(lc, hn, name))
            continue;
        pair_begin(&b, name, hn.len + 5, &lat);
        fd_api_out_add(&b, hv.data, hv.len);
        pair_end(&b, lat, hn.len + 5);
    }
    /* HTTP_HOST is the host fastd routed on, not the Host field as
     * sent: with an absolute-form target its authority, the field being
     * ignored (RFC 9112 3.2.2; an application building links from
     * HTTP_HOST must not get one the client chose beside it), over
     * HTTP/2 :authority (a host field differing from it is a 400) */
    host = fd_req_var_value(r, lc->http_host, tmp);
    if (host.len && header_param(lc, (fd_str_t){4, "Host"}, name)) {
        pair_begin(&b, name, 9, &lat);
        fd_api_out_add(&b, host.data, host.len);
        pair_end(&b, lat, 9);
    }
    if ((p = fd_api_out_room(&b, 16)) == NULL)
        return 500;
    len = fd_api_out_len(&b) - 24;
    if (len <= FD_FCGI_MAX_CONTENT) {
        /* in place: the PARAMS header, then the empty one after */
        fd_fcgi_header(b.base + 16, FD_FCGI_PARAMS, len);
        fd_fcgi_header(p, FD_FCGI_PARAMS, 0);
        o = b.base;
        p += 8;
    } else {
        o = fd_req_alloc(r, 16 + fd_fcgi_params_size(len) + 8);
        if (o == NULL)
            return 500;
        memcpy(o, b.base, 16);
        p = fd_fcgi_params(o + 16, b.base + 24, len);
    }
    if (fx->body_length == 0) {
        fd_fcgi_header(p, FD_FCGI_STDIN, 0);
        p += 8;
    }
    *out = (fd_str_t){(size_t)(p - o), o};
    return FD_OK;
}

/* One STDIN record of n body bytes at buf + 8 (and the empty one that
 * ends them, once the body is complete); n == 0: that one alone. */
static int fcgi_frame_body(fd_api_upstream_req_t *u, void *data, char *buf,
                           size_t n, size_t *len)
{
    fcgi_req_t *fx = data;

    (void)u;
    if (n == 0) {
        fd_fcgi_header(buf, FD_FCGI_STDIN, 0);
        *len = 8;
        return FD_OK;
    }
    fd_fcgi_header(buf, FD_FCGI_STDIN, n);
    *len = 8 + n;
    fx->body_bytes += (int64_t)n;
    if (fx->body_bytes >= fx->body_length) {
        fd_fcgi_header(buf + 8 + n, FD_FCGI_STDIN, 0);
        *len += 8;
        return FD_DONE;
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
                fd_api_upstream_log(fx->u, FD_API_LOG_WARN, 0, ": further "
                                    "stderr of this request not logged");
            } else if (fx->nstderr < STDERR_LINES) {
                m = min(len, sizeof(line));
                for (k = 0; k < m; k++)
                    line[k] = (uint8_t)s[k] < 0x20 || s[k] == 0x7f ? ' '
                                                                   : s[k];
                fd_api_upstream_log(fx->u, FD_API_LOG_WARN, 0,
                                    " sent in stderr: %.*s%s", (int)m, line,
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

/* RFC 9110's tchar */
static int tchar(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The CGI header in hb[0, len): fields into r, then the engine's verb */
static int cgi_header(fcgi_req_t *fx, size_t len)
{
    fd_request_t *r = fx->r;
    char *p = fx->hb.base, *end = p + len;
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
            return fd_api_upstream_invalid(fx->u, "sent a header line "
                                                  "without a name");
        for (k = 0; p + k < colon; k++)
            if (!tchar((uint8_t)p[k]))
                return fd_api_upstream_invalid(fx->u, "sent an invalid "
                                                      "header name");
        for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++)
            ;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (k = 0; v + k < ve; k++)
            if (((uint8_t)v[k] < 0x20 && v[k] != '\t') || v[k] == 0x7f)
                return fd_api_upstream_invalid(fx->u, "sent a control "
                                               "character in a header value");
        n = (fd_str_t){(size_t)(colon - p), p};
        val = (fd_str_t){(size_t)(ve - v), v};
        p = nl ? nl + 1 : end;
        switch (n.len) {
        case 4:
            if (lit_eq(n, "date"))
                continue; /* the engine's own */
            break;
        case 6:
            if (lit_eq(n, "status")) {
                if (val.len < 3 || val.data[0] < '1' || val.data[0] > '5' ||
                    val.data[1] < '0' || val.data[1] > '9' ||
                    val.data[2] < '0' || val.data[2] > '9' ||
                    (val.len > 3 && val.data[3] != ' '))
                    return fd_api_upstream_invalid(fx->u, "sent an invalid "
                                                          "Status");
                status = (val.data[0] - '0') * 100 +
                         (val.data[1] - '0') * 10 + (val.data[2] - '0');
                if (status < 200)
                    return fd_api_upstream_invalid(fx->u, "sent a 1xx "
                                                          "Status");
                continue;
            }
            if (lit_eq(n, "server"))
                continue;
            break;
        case 7:
            if (lit_eq(n, "trailer") || lit_eq(n, "upgrade"))
                continue;
            break;
        case 8:
            if (lit_eq(n, "location"))
                location = 1;
            break;
        case 10:
            if (lit_eq(n, "connection") || lit_eq(n, "keep-alive"))
                continue;
            break;
        case 12:
            if (lit_eq(n, "content-type")) {
                fd_resp_content_type_static(r, val);
                continue;
            }
            break;
        case 14:
            /* the body is framed by the records, not by what it says */
            if (lit_eq(n, "content-length"))
                continue;
            break;
        case 17:
            if (lit_eq(n, "transfer-encoding"))
                continue;
            break;
        }
        if (fd_resp_header_static(r, n, val) != FD_OK)
            return fd_api_upstream_fail(fx->u, 500);
    }
    status = status ? status : location ? 302 : 200;
    fd_resp_status(r, status);
    fx->discard = fd_resp_is_header_only(r) || status == 204 ||
                  status == 304;
    fd_resp_content_length(r, -1);
    fx->header_done = 1;
    /* logged, timed, passive health */
    return fd_api_upstream_header(fx->u, status);
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

    if (fd_api_out_len(&fx->hb) + n > HEADER_MAX)
        return fd_api_upstream_invalid(fx->u, "sent a response header over "
                                              "16k");
    fd_api_out_add(&fx->hb, s, n);
    if (fx->hb.p == NULL)
        return fd_api_upstream_fail(fx->u, 500);
    h = fx->hb.base;
    len = fd_api_out_len(&fx->hb);
    /* "\n\n" or "\n\r\n" ends it; a first line that is blank too */
    for (i = fx->hscan; i < len; i++) {
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
        fx->hscan = len;
        return FD_OK;
    }
    fx->held_at = hend; /* the body's first bytes are held after it */
    return cgi_header(fx, hend);
}

/* Parse in[0, len), at most 16 pieces, and hand the body on; *used: the
 * bytes taken (consumed before any verb that hands the body on). */
static int process_some(fcgi_req_t *fx, const char *in, size_t len,
                        size_t *used)
{
    fd_api_piece_t b[17], *chain = b + 1;
    const char *p = in, *end = in + len, *why;
    unsigned nb = 0;
    uint64_t bytes = 0;
    int ended = 0, reuse = 0, rc;
    fd_fcgi_piece_t pc;

    while (nb < 16) {
        rc = fd_fcgi_parse(&fx->ps, &p, end, &pc, &why);
        if (rc == FD_AGAIN)
            break;
        if (rc == FD_ERROR)
            return fd_api_upstream_invalid(fx->u, why);
        if (pc.type == FD_FCGI_STDERR) {
            log_stderr(fx, pc.data, pc.len);
            continue;
        }
        if (pc.type == FD_FCGI_END_REQUEST) {
            if (!fx->header_done)
                return fd_api_upstream_invalid(fx->u, "ended the request "
                                               "without a response header");
            ended = 1;
            if (p != end)
                return fd_api_upstream_invalid(fx->u, "sent data after "
                                                      "END_REQUEST");
            reuse = fd_api_upstream_keepalive(fx->lc->up) > 0 &&
                    pc.protocol_status == FD_FCGI_REQUEST_COMPLETE;
            break;
        }
        if (!fx->header_done) {
            rc = header_feed(fx, pc.data, pc.len);
            if (rc != FD_OK)
                return rc;
            continue;
        }
        if (fx->discard || pc.len == 0)
            continue;
        chain[nb++] = (fd_api_piece_t){.data = pc.data, .len = pc.len,
                                       .fd = -1};
        bytes += pc.len;
    }
    *used = (size_t)(p - in);
    fd_api_upstream_consume(fx->u, *used);
    if (!fx->header_done)
        return FD_OK;

    /*
     * The header leaves with the first 16k of body, or with END_REQUEST:
     * until then the body is held in hb, so a response that fails early
     * (a broken record, a close) is still a clean 502, and a small one
     * goes with its Content-Length instead of chunked.
     */
    if (!fx->streaming && !fx->discard) {
        size_t held = fd_api_out_len(&fx->hb) - fx->held_at;
        unsigned k;
        if (!ended && held + bytes <= HEADER_MAX) {
            for (k = 0; k < nb; k++)
                fd_api_out_add(&fx->hb, chain[k].data, chain[k].len);
            if (fx->hb.p == NULL)
                return fd_api_upstream_fail(fx->u, 500);
            return FD_OK;
        }
        if (held) {
            b[0] = (fd_api_piece_t){.data = fx->hb.base + fx->held_at,
                                    .len = held, .fd = -1};
            chain = b;
            nb++;
            bytes += held;
        }
        fx->streaming = 1;
    }

    if (ended) {
        /* the whole body is here before the header left: say its length
         * rather than chunk it */
        if (fx->out_bytes == 0 && !fx->discard)
            fd_resp_content_length(fx->r, (int64_t)bytes);
        return fd_api_upstream_last(fx->u, chain, nb, reuse);
    }
    if (nb == 0)
        return FD_OK;
    fx->out_bytes += bytes;
    return fd_api_upstream_output(fx->u, chain, nb);
}

/* The engine's process: every piece in holds (more than one output call
 * takes: go on) while the client keeps up. */
static int fcgi_process(fd_api_upstream_req_t *u, void *data, const char *in,
                        size_t len, int eof)
{
    size_t used;
    int rc;

    (void)u;
    (void)eof; /* END_REQUEST ends a response, never the close */
    do {
        used = 0;
        rc = process_some(data, in, len, &used);
        in += used;
        len -= used;
    } while (rc == FD_OK && len && used);
    return rc;
}

/* A new try: the last one's records and header are forgotten */
static void fcgi_retry(fd_api_upstream_req_t *u, void *data)
{
    fcgi_req_t *fx = data;

    (void)u;
    fd_fcgi_parser_init(&fx->ps);
    fd_api_out_init(&fx->hb, fx->r, 512); /* a failure shows at the next byte */
    fx->hscan = 0;
    fx->held_at = 0;
    fx->nstderr = 0;
}

/* FastCGI on the upstream engine: STDIN records out, records in */
static const fd_api_upstream_proto_t fcgi_proto = {
    .what = "FastCGI upstream",
    .body_head = 8,            /* the STDIN record's header */
    .body_room = 16,           /* ... and the empty one that ends them */
    .flags = FD_API_UPSTREAM_BODY_AFTER, /* STDIN after the PARAMS' end */
    .build = fcgi_build,
    .frame_body = fcgi_frame_body,
    .process = fcgi_process,
    .retry = fcgi_retry,
};

/* --- 4. the handler and the variables ------------------------------------ */

static int fastcgi_handler(fd_request_t *r)
{
    fcgi_conf_t *lc = fd_req_conf(r);
    fd_api_upstream_req_t *u;
    fcgi_req_t *fx;
    int64_t clen = fd_req_content_length(r);

    /* FastCGI needs CONTENT_LENGTH before the body: a chunked one would
     * have to be buffered whole first, which this handler does not do */
    if (clen < 0)
        return 411;
    u = fd_api_upstream_req(r, lc->ucf, sizeof(fcgi_req_t));
    if (u == NULL)
        return 500;
    fx = fd_api_upstream_data(u);
    fx->r = r;
    fx->u = u;
    fx->lc = lc;
    fx->body_length = clen;
    fd_fcgi_parser_init(&fx->ps);
    split_path(fx);
    if (fd_api_out_init(&fx->hb, r, 512) != FD_OK)
        return 500;
    return fd_api_upstream_start(u);
}

/* $fastcgi_script_name, $fastcgi_path_info: the request's split, or,
 * before the handler (try_files, rewrite, the access phase), the split
 * made now, as nginx's variables are (try_files = $fastcgi_script_name
 * =404 is the usual guard); its slices are the path's or the request's
 * memory, not early's */
static fcgi_req_t *split_of(fd_request_t *r, fcgi_req_t *early)
{
    fd_api_upstream_req_t *u = fd_api_upstream_of(r, &fcgi_proto);
    const fcgi_conf_t *lc;

    if (u)
        return fd_api_upstream_data(u);
    lc = r ? fd_req_conf_of(r, FD_API_SELF) : NULL;
    if (lc == NULL || lc->ucf == NULL) /* not a fastcgi location */
        return NULL;
    memset(early, 0, sizeof(*early));
    early->r = r;
    early->lc = lc;
    split_path(early);
    return early;
}

static fd_str_t v_script_name(fd_request_t *r, char *tmp)
{
    fcgi_req_t early, *fx = split_of(r, &early);

    (void)tmp;
    return fx ? fx->script_name : (fd_str_t){0, NULL};
}

static fd_str_t v_path_info(fd_request_t *r, char *tmp)
{
    fcgi_req_t early, *fx = split_of(r, &early);

    (void)tmp;
    return fx ? fx->path_info : (fd_str_t){0, NULL};
}

static const fd_api_var_t fastcgi_vars[] = {
    {.name = "fastcgi_script_name", .get = v_script_name},
    {.name = "fastcgi_path_info", .get = v_path_info},
    {.name = NULL}};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "fastcgi",
    .handler = fastcgi_handler,
    .flags = FD_API_STREAM_BODY,
    .methods = FD_API_ANY, /* the application decides */
    .vars = fastcgi_vars,
    /* its keys, the parser of those it parses, and their check */
    .keys = fastcgi_keys,
    .set = fastcgi_set,
    .conf_size = sizeof(fcgi_conf_t),
    .init_conf = fastcgi_init_conf,
    .exit_worker = fastcgi_exit_worker,
};
