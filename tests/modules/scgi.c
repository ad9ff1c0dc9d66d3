/*
 * handler = scgi: a backend protocol of a module's own (SCGI,
 * python.ca/scgi/protocol.txt) on fastd's upstream engine, built outside
 * the tree against the installed fastd_upstream.h: the example of
 * modules/README.md ("A backend protocol of your own"), built by
 * tests/modules.t. The request is a netstring of NUL-separated headers
 * and the body as it is; the response a CGI header, then the body until
 * the server closes.
 */
#include <stdio.h>
#include <string.h>

#include <fastd_upstream.h>

typedef struct {
    const char *pass;                 /* HOST:PORT or unix:/path */
    fd_api_upstream_conf_t *ucf;
} scgi_conf_t;

typedef struct {
    fd_request_t *r;
    int header_done;
} scgi_req_t;

static const fd_api_key_t scgi_keys[] = {
    {.name = "scgi_pass", .type = FD_API_STRING,
     .offset = offsetof(scgi_conf_t, pass),
     .doc = "handler = scgi: the SCGI server, HOST:PORT or unix:/path"},
    {.name = NULL}};

static const fd_api_upstream_proto_t scgi_proto;

static int scgi_init_conf(void *conf)
{
    scgi_conf_t *c = conf;
    fd_api_upstream_t *up;

    if (c->pass == NULL) {
        fd_api_conf_error("handler = scgi needs scgi_pass");
        return FD_ERROR;
    }
    /* an [upstream NAME], or a group of one server */
    up = fd_api_upstream_group(c->pass);
    if (up == NULL && (up = fd_api_upstream_server(c->pass, "")) == NULL)
        return FD_ERROR;
    c->ucf = fd_api_upstream_conf(up, &scgi_proto);
    return c->ucf ? FD_OK : FD_ERROR;
}

/* "NAME\0VALUE\0" */
static void pair(fd_api_sbuf_t *sb, const char *name, fd_str_t v)
{
    fd_api_sbuf_add(sb, name, strlen(name) + 1);
    fd_api_sbuf_add(sb, v.data, v.len);
    fd_api_sbuf_addc(sb, '\0');
}

/* The request's bytes: the headers as a netstring, "LEN:...," */
static int scgi_build(fd_api_upstream_req_t *u, void *data, fd_str_t *out)
{
    fd_request_t *r = ((scgi_req_t *)data)->r;
    fd_api_sbuf_t *h = fd_req_sbuf(r, 512), *ns = fd_req_sbuf(r, 600);
    fd_str_t name, value, hs;
    char len[24];
    unsigned i;

    (void)u;
    if (h == NULL || ns == NULL)
        return 500;
    snprintf(len, sizeof(len), "%lld", (long long)fd_req_content_length(r));
    pair(h, "CONTENT_LENGTH", (fd_str_t){strlen(len), len}); /* first */
    pair(h, "SCGI", (fd_str_t){1, "1"});
    pair(h, "REQUEST_METHOD", fd_req_method(r));
    pair(h, "REQUEST_URI", fd_req_target(r));
    pair(h, "QUERY_STRING", fd_req_query(r));
    pair(h, "REMOTE_ADDR", fd_req_var(r, "remote_addr"));
    for (i = 0; fd_req_header_line(r, i, &name, &value) == FD_OK; i++) {
        fd_api_sbuf_add(h, "HTTP_", 5);
        for (size_t k = 0; k < name.len; k++) {
            char c = name.data[k];
            fd_api_sbuf_addc(h, c == '-' ? '_'
                                : c >= 'a' && c <= 'z' ? c - 32 : c);
        }
        fd_api_sbuf_addc(h, '\0');
        fd_api_sbuf_add(h, value.data, value.len);
        fd_api_sbuf_addc(h, '\0');
    }
    if (fd_api_sbuf_failed(h))
        return 500;
    hs = fd_api_sbuf_str(h);
    fd_api_sbuf_add_uint(ns, hs.len);
    fd_api_sbuf_addc(ns, ':');
    fd_api_sbuf_add(ns, hs.data, hs.len);
    fd_api_sbuf_addc(ns, ',');
    if (fd_api_sbuf_failed(ns))
        return 500;
    *out = fd_api_sbuf_str(ns);
    return FD_OK;
}

/* "Status: 404 Not Found", "Content-Type: text/plain", ...: copied */
static int header_line(fd_request_t *r, const char *p, size_t n,
                       int *status)
{
    const char *colon = memchr(p, ':', n), *v;
    char name[64];
    size_t k;

    if (colon == NULL || (k = (size_t)(colon - p)) == 0 || k >= sizeof(name))
        return FD_ERROR;
    for (v = colon + 1; v < p + n && *v == ' '; v++)
        ;
    memcpy(name, p, k);
    name[k] = '\0';
    if (strcmp(name, "Status") == 0)
        return sscanf(v, "%3d", status) == 1 ? FD_OK : FD_ERROR;
    if (strcmp(name, "Content-Type") == 0)
        return fd_resp_content_type(r, (fd_str_t){(size_t)(p + n - v), v});
    return fd_resp_header(r, name, (fd_str_t){(size_t)(p + n - v), v});
}

static int scgi_process(fd_api_upstream_req_t *u, void *data, const char *in,
                        size_t len, int eof)
{
    scgi_req_t *s = data;
    fd_api_piece_t body = {.data = in, .len = len, .fd = -1};
    const char *p = in, *end;
    int status = 200, rc;

    if (!s->header_done) {
        /* the whole header first: the engine keeps what is not consumed
         * (and answers 502 to one over 16k) */
        for (end = in; end + 3 < in + len && memcmp(end, "\r\n\r\n", 4);
             end++)
            ;
        if (end + 3 >= in + len)
            return FD_OK;
        while (p < end) {
            const char *nl = memchr(p, '\r', (size_t)(end - p + 1));
            if (header_line(s->r, p, (size_t)(nl - p), &status) != FD_OK)
                return fd_api_upstream_invalid(u, "sent a bad header line");
            p = nl + 2;
        }
        fd_api_upstream_consume(u, (size_t)(end + 4 - in));
        s->header_done = 1;
        fd_resp_status(s->r, status);
        fd_api_upstream_until_close(u); /* the body ends with the close */
        rc = fd_api_upstream_header(u, status);
        if (rc != FD_OK)
            return rc;
        body = (fd_api_piece_t){.data = end + 4, .len = len - (size_t)
                                (end + 4 - in), .fd = -1};
    }
    fd_api_upstream_consume(u, body.len);
    if (eof)
        return fd_api_upstream_last(u, &body, body.len ? 1 : 0, 0);
    return body.len ? fd_api_upstream_output(u, &body, 1) : FD_OK;
}

static const fd_api_upstream_proto_t scgi_proto = {
    .what = "SCGI upstream",
    .build = scgi_build,      /* the body goes as it is: no frame_body */
    .process = scgi_process,
};

static int scgi_handler(fd_request_t *r)
{
    scgi_conf_t *c = fd_req_conf(r);
    fd_api_upstream_req_t *u;

    if (fd_req_content_length(r) < 0)
        return 411; /* SCGI says CONTENT_LENGTH first */
    u = fd_api_upstream_req(r, c->ucf, sizeof(scgi_req_t));
    if (u == NULL)
        return 500;
    ((scgi_req_t *)fd_api_upstream_data(u))->r = r;
    return fd_api_upstream_start(u);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "scgi",
    .keys = scgi_keys,
    .conf_size = sizeof(scgi_conf_t),
    .init_conf = scgi_init_conf,
    .handler = scgi_handler,
    .flags = FD_API_STREAM_BODY,
    .methods = FD_API_ANY,
};
