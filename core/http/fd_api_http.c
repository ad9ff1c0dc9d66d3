/*
 * API 1.8, an HTTP proxy's own (core/api/fastd_upstream.h's last block):
 * the client's request as a proxy reads it, the HTTP/1.1 response-head
 * parser and chunked decoder the engine uses, escaping, and the few
 * response calls a proxy needs. Thin: each is the engine's own function
 * or fields, the API's types laid out as the engine's (checked below),
 * so that the proxied request costs a call more, not a copy.
 */
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_var.h"
#include "fastd_upstream.h"

#define SAME(a, b, f) (offsetof(a, f) == offsetof(b, f))

_Static_assert(sizeof(fd_api_field_t) == sizeof(fd_http_header_t) &&
                   SAME(fd_api_field_t, fd_http_header_t, name) &&
                   SAME(fd_api_field_t, fd_http_header_t, value),
               "fd_api_field_t is fd_http_header_t");
_Static_assert(sizeof(fd_api_http_resp_t) == sizeof(fd_http_resp_t) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, fields) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, max_fields) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, nfields) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, version) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, status) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t,
                        content_length) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, conn_tok) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, ntok) &&
                   SAME(fd_api_http_resp_t, fd_http_resp_t, upgrade) &&
                   FD_API_HTTP_RESP_TOKENS == FD_HTTP_RESP_MAX_TOKENS,
               "fd_api_http_resp_t is fd_http_resp_t");
_Static_assert(sizeof(fd_api_http_chunked_t) >= sizeof(fd_http_chunked_t) &&
                   _Alignof(fd_api_http_chunked_t) >=
                       _Alignof(fd_http_chunked_t),
               "fd_api_http_chunked_t holds an fd_http_chunked_t");

/* FD_HTTP_* as the API's method bits (1.9: fd_api_http_req_t.method) */
static const unsigned method_bit[] = {
    [FD_HTTP_UNKNOWN] = FD_API_OTHER, [FD_HTTP_GET] = FD_API_GET,
    [FD_HTTP_HEAD] = FD_API_HEAD,     [FD_HTTP_POST] = FD_API_POST,
    [FD_HTTP_PUT] = FD_API_PUT,       [FD_HTTP_DELETE] = FD_API_DELETE,
    [FD_HTTP_OPTIONS] = FD_API_OPTIONS, [FD_HTTP_PATCH] = FD_API_PATCH,
    [FD_HTTP_TRACE] = FD_API_OTHER,   [FD_HTTP_CONNECT] = FD_API_OTHER};

void fd_req_http(fd_request_t *r, fd_api_http_req_t *h, size_t size)
{
    fd_api_http_req_t v = {
        .fields = (const fd_api_field_t *)r->in.headers,
        .nfields = r->in.nheaders,
        .version = (unsigned)r->in.version,
        .host = r->in.host,
        .path_raw = r->in.path_raw,
        .upgrade = r->in.upgrade,
        .path_rest = r->path,
        .content_length = r->in.content_length,
        .max_body = r->loc->max_body_size,
        .chunked = r->in.chunked,
        .conn_upgrade = r->in.conn_upgrade,
        .ext_connect = r->in.ext_connect,
        .tls = r->c->s.tls != NULL || r->h3, /* QUIC is TLS */
        .uri_changed = r->uri_changed,
        .method = method_bit[r->in.method_id],
    };
    const fd_http_loc_t *loc = r->loc;

    if (loc->kind == FD_LOC_EXACT)
        v.path_rest.len = 0;
    else if ((loc->kind == FD_LOC_PREFIX || loc->kind == FD_LOC_PREFIX_STOP) &&
             v.path_rest.len >= loc->match.len)
        v.path_rest = (fd_str_t){v.path_rest.len - loc->match.len,
                                 v.path_rest.data + loc->match.len};
    memcpy(h, &v, size < sizeof(v) ? size : sizeof(v));
}

size_t fd_req_client_text(fd_request_t *r, char *buf, size_t size)
{
    return fd_request_addr_text(r, buf, size);
}

void fd_api_http_tokens(fd_str_t v, fd_str_t *tok, unsigned *n,
                        unsigned max)
{
    fd_http_tokens(v, tok, n, max);
}

void fd_api_sbuf_add_escaped(fd_api_sbuf_t *sb, const char *s, size_t n,
                             int esc)
{
    fd_sbuf_t *b = (fd_sbuf_t *)(void *)sb;

    if (esc == FD_API_ESC_PATH)
        fd_sbuf_add_escaped_path(b, s, n);
    else
        fd_var_add_escaped(b, (fd_str_t){n, (char *)s},
                           esc == FD_API_ESC_TARGET ? FD_VAR_ESC_TARGET
                                                    : FD_VAR_ESC_HEADER);
}

void fd_req_script_add(fd_request_t *r, const fd_api_script_t *s, int esc,
                       fd_api_sbuf_t *sb)
{
    fd_var_eval(r, (const fd_var_script_t *)s, NULL,
                esc == FD_API_ESC_HEADER ? FD_VAR_ESC_HEADER
                                         : FD_VAR_ESC_NONE,
                (fd_sbuf_t *)(void *)sb);
}

int fd_api_http_response_end(const char *buf, size_t len, size_t *scan,
                             size_t *hlen, const char **err)
{
    return fd_http_parse_response_end(buf, len, scan, hlen, err);
}

int fd_api_http_response(fd_api_http_resp_t *rs, const char *h, size_t hlen,
                         const char **err)
{
    return fd_http_parse_response((fd_http_resp_t *)(void *)rs, h, hlen,
                                  err);
}

int fd_api_http_chunked(fd_api_http_chunked_t *ck, const char **pos,
                        const char *end, const char **data, size_t *n)
{
    int rc = fd_http_parse_chunked((fd_http_chunked_t *)(void *)ck, pos, end,
                                   data, n);

    return rc == FD_OK || rc == FD_AGAIN || rc == FD_DONE ? rc : FD_ERROR;
}

void fd_resp_own_server(fd_request_t *r)
{
    r->server_passed = 1;
}

int fd_resp_header_sent(fd_request_t *r)
{
    return r->header_sent;
}

void fd_resp_send_early(fd_request_t *r)
{
    fd_http_respond_early(r);
}

void fd_req_nodelay(fd_request_t *r)
{
    int one = 1;

    if (r->c->s.nodelay)
        return;
    setsockopt(r->c->s.ev.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    r->c->s.nodelay = 1;
}

struct fd_api_resp_s {
    int status;
    fd_http_header_out_t *headers_out, **headers_out_last;
    fd_str_t content_type;
    int64_t content_length;
    unsigned server_passed;
};

fd_api_resp_t *fd_resp_set_aside(fd_request_t *r)
{
    fd_api_resp_t *s = fd_palloc(r->pool, sizeof(*s));

    if (s == NULL)
        return NULL;
    *s = (fd_api_resp_t){
        .status = r->status,
        .headers_out = r->headers_out,
        .headers_out_last = r->headers_out_last,
        .content_type = r->content_type,
        .content_length = r->content_length,
        .server_passed = r->server_passed,
    };
    r->headers_out = NULL;
    r->headers_out_last = &r->headers_out;
    r->content_type = fd_null_string;
    r->server_passed = 0;
    return s;
}

void fd_resp_put_back(fd_request_t *r, fd_api_resp_t *s)
{
    r->status = s->status;
    r->headers_out = s->headers_out;
    r->headers_out_last = s->headers_out_last;
    r->content_type = s->content_type;
    r->content_length = s->content_length;
    r->server_passed = s->server_passed;
}

/* --- fd_api_out_t: a window in a string builder --- */

static char *window(fd_api_out_t *o, size_t n)
{
    size_t room = 0;

    o->p = fd_api_sbuf_reserve(o->sb, n, &room);
    o->base = fd_api_sbuf_data(o->sb);
    o->end = o->p ? o->p + room : NULL;
    return o->p;
}

char *fd_api_out_resume(fd_api_out_t *o, size_t n)
{
    return o->p ? window(o, n) : NULL;
}

void fd_api_out_sync(fd_api_out_t *o)
{
    if (o->p)
        fd_api_sbuf_commit(o->sb, o->p);
}

char *fd_api_out_grow(fd_api_out_t *o, size_t n)
{
    fd_api_out_sync(o);
    return fd_api_out_resume(o, n);
}

int fd_api_out_init(fd_api_out_t *o, fd_request_t *r, size_t n)
{
    o->p = o->end = NULL;
    o->sb = fd_req_sbuf(r, n);
    return o->sb && window(o, n) ? FD_OK : FD_ERROR;
}
