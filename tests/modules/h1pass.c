/*
 * handler = h1pass: the smallest HTTP/1.1 proxy on the public API (1.8),
 * built outside the tree against the installed fastd_upstream.h by
 * tests/modules_http.t: what modules/fd_proxy_module.c's request side is
 * written with, in a module loaded at run time. The client's request
 * (fd_req_http) goes to h1pass_to with its own header lines but
 * Connection, X-Client naming the client (fd_req_client_text) and the
 * path escaped (fd_api_sbuf_add_escaped) behind h1pass_prefix; the
 * response head is parsed strictly (fd_api_http_response_end,
 * fd_api_http_response), its fields passed but the framing ones and a
 * Connection's tokens, the body by Content-Length, chunked
 * (fd_api_http_chunked) or until the server closes. With
 * h1pass_tls_name, over TLS (fd_api_upstream_conf_tls), the server's
 * certificate checked for that name against h1pass_tls_trusted
 * (fd_api_tls_client_set). It takes an HTTP/2 extended CONNECT
 * (FD_API_TUNNEL) and, tunnelling nothing, refuses it with its own 403.
 */
#include <string.h>
#include <strings.h>

#include <fastd_upstream.h>

typedef struct {
    const char *to;                   /* HOST:PORT */
    const char *prefix;               /* what the path goes behind */
    const char *tls_name;             /* TLS, the certificate's name */
    fd_api_tls_client_t *tls;         /* its options (h1pass_tls_*) */
    fd_api_upstream_conf_t *ucf;
} h1_conf_t;

typedef struct {
    fd_request_t *r;
    size_t scan;
    int header_done, chunked;
    int64_t rest;                     /* Content-Length's; -1: until close */
    fd_api_http_chunked_t ck;
} h1_req_t;

static const fd_api_key_t h1_keys[] = {
    {.name = "h1pass_to", .type = FD_API_STRING,
     .offset = offsetof(h1_conf_t, to),
     .doc = "handler = h1pass: the HTTP/1.1 server, HOST:PORT"},
    {.name = "h1pass_prefix", .type = FD_API_STRING,
     .offset = offsetof(h1_conf_t, prefix), .def = "",
     .doc = "what the client's path goes behind, upstream"},
    {.name = "h1pass_tls_name", .type = FD_API_STRING,
     .offset = offsetof(h1_conf_t, tls_name),
     .doc = "TLS to the server, whose certificate must be valid for "
            "this name"},
    {.name = "h1pass_tls_trusted", .type = FD_API_CUSTOM,
     .doc = "PEM CA certificates the server's is verified against"},
    {.name = NULL}};

static int h1_set(void *conf, const char *key, const char *value, int own)
{
    h1_conf_t *c = conf;

    (void)own;
    if (strcmp(key, "h1pass_tls_trusted") == 0)
        return fd_api_tls_client_set(&c->tls, FD_API_TLS_TRUSTED, key,
                                     value);
    return FD_ERROR;
}

static const fd_api_upstream_proto_t h1_proto;

static int h1_init_conf(void *conf)
{
    h1_conf_t *c = conf;
    fd_api_upstream_t *up;

    if (c->to == NULL) {
        fd_api_conf_error("handler = h1pass needs h1pass_to");
        return FD_ERROR;
    }
    if ((up = fd_api_upstream_server(c->to, "")) == NULL)
        return FD_ERROR;
    c->ucf = fd_api_upstream_conf(up, &h1_proto);
    if (c->ucf == NULL)
        return FD_ERROR;
    return c->tls_name ? fd_api_upstream_conf_tls(c->ucf, c->tls, c->tls_name)
                       : FD_OK;
}

#define LIT(o, s) fd_api_out_add(o, s, sizeof(s) - 1)
#define lit_eq(s, lit)                                                       \
    ((s).len == sizeof(lit) - 1 && strncasecmp((s).data, lit, (s).len) == 0)

static void field(fd_api_out_t *o, fd_str_t n, fd_str_t v)
{
    fd_api_out_add(o, n.data, n.len);
    LIT(o, ": ");
    fd_api_out_add(o, v.data, v.len);
    LIT(o, "\r\n");
}

static int h1_build(fd_api_upstream_req_t *u, void *data, fd_str_t *out)
{
    fd_request_t *r = ((h1_req_t *)data)->r;
    const h1_conf_t *c = fd_req_conf(r);
    fd_api_http_req_t in;
    fd_api_out_t o;
    fd_str_t m = fd_req_method(r), path = fd_req_path(r), q;
    char addr[48];
    unsigned i;

    (void)u;
    fd_req_http(r, &in, sizeof(in));
    if (fd_api_out_init(&o, r, 256) != FD_OK)
        return 500;
    fd_api_out_add(&o, m.data, m.len);
    LIT(&o, " ");
    fd_api_out_add(&o, c->prefix, strlen(c->prefix));
    fd_api_out_sync(&o);
    fd_api_sbuf_add_escaped(o.sb, path.data, path.len, FD_API_ESC_PATH);
    q = fd_req_query(r);
    if (q.len) {
        fd_api_sbuf_addc(o.sb, '?');
        fd_api_sbuf_add_escaped(o.sb, q.data, q.len, FD_API_ESC_TARGET);
    }
    fd_api_out_resume(&o, 256);
    LIT(&o, " HTTP/1.1\r\n");
    for (i = 0; i < in.nfields; i++)
        if (!lit_eq(in.fields[i].name, "connection"))
            field(&o, in.fields[i].name, in.fields[i].value);
    field(&o, (fd_str_t){8, "X-Client"},
          (fd_str_t){fd_req_client_text(r, addr, sizeof(addr)), addr});
    LIT(&o, "Connection: close\r\n\r\n");
    if (o.p == NULL)
        return 500;
    fd_api_out_sync(&o);
    *out = fd_api_sbuf_str(o.sb);
    return fd_api_sbuf_failed(o.sb) ? 500 : FD_OK;
}

/* The response head at in[0, len): taken (*hlen) and announced, FD_OK;
 * FD_AGAIN (more is needed); or what a verb returned. */
static int h1_head(fd_api_upstream_req_t *u, h1_req_t *h, const char *in,
                   size_t len, size_t *hlen)
{
    fd_api_field_t f[32];
    fd_api_http_resp_t rs = {.fields = f, .max_fields = 32};
    const char *err;
    char *copy;
    unsigned i, k;
    int rc;

    rc = fd_api_http_response_end(in, len, &h->scan, hlen, &err);
    if (rc != FD_OK)
        return rc == FD_AGAIN ? FD_AGAIN : fd_api_upstream_invalid(u, err);
    if ((copy = fd_req_alloc(h->r, *hlen)) == NULL)
        return fd_api_upstream_fail(u, 500);
    memcpy(copy, in, *hlen); /* the fields outlive the input */
    if (fd_api_http_response(&rs, copy, *hlen, &err) != FD_OK)
        return fd_api_upstream_invalid(u, err);
    fd_api_upstream_consume(u, *hlen);
    fd_resp_status(h->r, rs.status);
    for (i = 0; i < rs.nfields; i++) {
        fd_str_t n = f[i].name;
        if (lit_eq(n, "content-length") || lit_eq(n, "transfer-encoding") ||
            lit_eq(n, "connection") || lit_eq(n, "date"))
            continue;
        for (k = 0; k < rs.ntok; k++)
            if (n.len == rs.conn_tok[k].len &&
                strncasecmp(n.data, rs.conn_tok[k].data, n.len) == 0)
                break;
        if (k < rs.ntok)
            continue; /* hop-by-hop: Connection names it */
        if (lit_eq(n, "content-type"))
            fd_resp_content_type_static(h->r, f[i].value);
        else
            fd_resp_header_static(h->r, n, f[i].value);
    }
    h->chunked = rs.chunked;
    h->rest = rs.chunked ? -1 : rs.content_length;
    if (rs.status == 204 || rs.status == 304 || fd_resp_is_header_only(h->r))
        h->chunked = 0, h->rest = 0;
    fd_resp_content_length(h->r, h->chunked ? -1 : h->rest);
    if (h->rest < 0 && !h->chunked)
        fd_api_upstream_until_close(u);
    return fd_api_upstream_header(u, rs.status);
}

static int h1_process(fd_api_upstream_req_t *u, void *data, const char *in,
                      size_t len, int eof)
{
    h1_req_t *h = data;
    fd_api_piece_t b[8];
    const char *p = in, *end = in + len, *d;
    unsigned nb = 0;
    size_t n;
    int rc;

    if (!h->header_done) {
        rc = h1_head(u, h, in, len, &n);
        if (rc == FD_AGAIN)
            return FD_OK;
        if (rc != FD_OK)
            return rc;
        h->header_done = 1;
        p += n;
    }
    if (!h->chunked) {
        n = h->rest >= 0 && (int64_t)(end - p) > h->rest ? (size_t)h->rest
                                                       : (size_t)(end - p);
        fd_api_upstream_consume(u, n);
        b[0] = (fd_api_piece_t){.data = p, .len = n, .fd = -1};
        if (h->rest >= 0)
            h->rest -= (int64_t)n;
        if (h->rest == 0 || (h->rest < 0 && eof))
            return fd_api_upstream_last(u, b, n ? 1 : 0, 0);
        return fd_api_upstream_output(u, b, n ? 1 : 0);
    }
    for (;;) {
        const char *at = p;
        rc = fd_api_http_chunked(&h->ck, &p, end, &d, &n);
        fd_api_upstream_consume(u, (size_t)(p - at));
        if (rc == FD_ERROR)
            return fd_api_upstream_invalid(u, "sent a bad chunked body");
        if (rc == FD_OK && n)
            b[nb++] = (fd_api_piece_t){.data = d, .len = n, .fd = -1};
        if (rc == FD_DONE)
            return fd_api_upstream_last(u, b, nb, 0);
        if (rc == FD_AGAIN || nb == 8) {
            rc = fd_api_upstream_output(u, b, nb);
            if (rc != FD_OK || p == end)
                return rc;
            nb = 0; /* more chunks than one call takes */
        }
    }
}

static void h1_retry(fd_api_upstream_req_t *u, void *data)
{
    h1_req_t *h = data;

    (void)u;
    h->scan = 0;
    h->header_done = 0;
    memset(&h->ck, 0, sizeof(h->ck));
}

static const fd_api_upstream_proto_t h1_proto = {
    .what = "h1pass upstream",
    .build = h1_build,
    .process = h1_process,
    .retry = h1_retry,
};

static int h1_handler(fd_request_t *r)
{
    const h1_conf_t *c = fd_req_conf(r);
    fd_api_upstream_req_t *u;
    fd_api_http_req_t in;

    fd_req_http(r, &in, sizeof(in));
    if (in.ext_connect)
        return 403;
    u = fd_api_upstream_req(r, c->ucf, sizeof(h1_req_t));
    if (u == NULL)
        return 500;
    ((h1_req_t *)fd_api_upstream_data(u))->r = r;
    return fd_api_upstream_start(u);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "h1pass",
    .keys = h1_keys,
    .conf_size = sizeof(h1_conf_t),
    .init_conf = h1_init_conf,
    .handler = h1_handler,
    .flags = FD_API_TUNNEL,
    .set = h1_set,
};
