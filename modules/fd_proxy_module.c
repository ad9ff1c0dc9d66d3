/*
 * handler = proxy: a reverse proxy to upstream groups, on the upstream
 * engine's public face (fastd_upstream.h: the engine picks the server,
 * keeps its health and the idle connections to it, retries, and speaks
 * HTTP/2 and gRPC itself); HTTP/1.1's framing and parser are here. The
 * request's side (its fields, the response's) is still the engine's
 * structures, and the cache reaches the engine's request (fd_proxy_eu()):
 * they move to the public API next (issue 41).
 *
 * The file reads in the order a request goes through it:
 *   1. worker setup (the location keys are fd_proxy_conf.c's);
 *   2. the request: its header is built once in the handler; a try picks
 *      a server and a connection, a failed one counts against its server
 *      and goes to the next (next_upstream) or the error page; the body is
 *      pulled from the client only while the upstream takes it
 *      (back-pressure), Content-Length passed on, chunked re-chunked;
 *   3. the response: a strict parser (status line, header fields, framing),
 *      then the body streamed through fd_http_output(), which stops us at
 *      its high-water mark until r->on_drain (back-pressure); chunked is
 *      decoded here and framed again by the engine; client aborts;
 *   4. events and timeouts, and the handler;
 *   5. the module's variable ($upstream_cache_status; $upstream_addr,
 *      $upstream_status and $upstream_response_time are the upstream
 *      engine's, for every protocol: core/http/fd_upstream_module.c).
 * After a 101 (WebSocket) the request becomes the engine's tunnel
 * (fd_api_upstream_tunnel); the handshake over HTTP/2 is fd_proxy_tunnel.c.
 *
 * Everything runs on the worker's loop thread; state is per worker (each
 * worker has its own copy of the configuration, whose runtime fields it
 * alone writes). Memory per request: the request header in r->pool and at
 * most two 16k blocks (response and request body), whatever the size of
 * the bodies.
 *
 * Variables, in the registry (fd_var.h) for every script (empty when the
 * request was not proxied; one entry per server tried, ", "-separated as
 * nginx): $upstream_addr "127.0.0.1:3000, 127.0.0.1:3001",
 * $upstream_status "502, 200", $upstream_response_time (seconds with
 * milliseconds) "0.002, 0.013".
 */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_proxy.h"
#include "fd_var.h"

#define MAX_RESP_HEADERS 128
#define MAX_INTERIM 8         /* 1xx responses before a final one */

/* --- 1. worker setup ----------------------------------------------------- */

static fd_block_cache_t bufs;  /* 16k blocks: response, request body */

static int proxy_init_worker(fd_worker_t *w)
{
    bufs.size = BUF_SIZE;
    bufs.keep = 64;
    fd_proxy_cache_init_worker(w, fd_stats ? fd_stats_area(fd_stats,
                                                           &fd_proxy_module)
                                           : NULL);
    return FD_OK;
}

static void proxy_exit_worker(fd_worker_t *w)
{
    (void)w;
    fd_proxy_cache_exit_worker();
}

/* --- 2. the request ------------------------------------------------------ */

static int request_build(fd_api_upstream_req_t *u, void *data,
                         fd_str_t *out);
static int frame_body(fd_api_upstream_req_t *u, void *data, char *buf,
                      size_t n, size_t *len);
static int resp_process(fd_api_upstream_req_t *u, void *data, const char *in,
                        size_t len, int eof);
static void resp_retry(fd_api_upstream_req_t *u, void *data);
static int proxy_fail_hook(fd_api_upstream_req_t *u, void *data, int status);
static void proxy_release(fd_api_upstream_req_t *u, void *data);
static int h2_fields(fd_api_upstream_req_t *u, void *data, int status,
                     const fd_api_field_t *f, unsigned nf);

/*
 * On the upstream engine (fastd_upstream.h): HTTP/1.1, the module's own
 * framing and parser; HTTP/2 and gRPC, the engine's transport, which
 * carries the same request header (mapped to HTTP/2 fields there) and
 * gives the response's fields decoded.
 */
#define H2_PROTO(w, grpc)                                                    \
    {.what = w, .flags = FD_API_UPSTREAM_H2 | (grpc), .build = request_build, \
     .fail = proxy_fail_hook, .release = proxy_release, .fields = h2_fields}

const fd_api_upstream_proto_t fd_proxy_protos[3] = {
    [PROXY_H1] = {
        .what = "upstream",
        .body_head = 16,      /* room for a chunk's size line */
        .body_room = 24,      /* ... and its CRLF, and "0\r\n\r\n" */
        .build = request_build,
        .frame_body = frame_body,
        .process = resp_process,
        .retry = resp_retry,
        .fail = proxy_fail_hook,
        .release = proxy_release,
    },
    [PROXY_H2] = H2_PROTO("upstream", 0),
    [PROXY_GRPC] = H2_PROTO("gRPC upstream", FD_API_UPSTREAM_GRPC),
};

/* What a request header line becomes upstream. */
enum { H_PASS, H_DROP, H_XFF };

static int header_kind(fd_str_t n)
{
    switch (n.len) {
    case 2:
        return fd_str_caseeq_lit(n, "te") ? H_DROP : H_PASS;
    case 4:
        return fd_str_caseeq_lit(n, "host") ? H_DROP : H_PASS;
    case 6:
        return fd_str_caseeq_lit(n, "expect") ? H_DROP : H_PASS;
    case 7:
        return fd_str_caseeq_lit(n, "trailer") ||
                       fd_str_caseeq_lit(n, "upgrade")
                   ? H_DROP
                   : H_PASS;
    case 9:
        return fd_str_caseeq_lit(n, "x-real-ip") ? H_DROP : H_PASS;
    case 10:
        return fd_str_caseeq_lit(n, "connection") ||
                       fd_str_caseeq_lit(n, "keep-alive")
                   ? H_DROP
                   : H_PASS;
    case 14:
        return fd_str_caseeq_lit(n, "content-length") ? H_DROP : H_PASS;
    case 15:
        return fd_str_caseeq_lit(n, "x-forwarded-for") ? H_XFF : H_PASS;
    case 16:
        return fd_str_caseeq_lit(n, "proxy-connection") ||
                       fd_str_caseeq_lit(n, "x-forwarded-host")
                   ? H_DROP
                   : H_PASS;
    case 17:
        return fd_str_caseeq_lit(n, "transfer-encoding") ||
                       fd_str_caseeq_lit(n, "x-forwarded-proto")
                   ? H_DROP
                   : H_PASS;
    }
    return H_PASS;
}

/* The tokens of every Connection header: the headers they name are
 * hop-by-hop too. */
static unsigned connection_tokens(fd_request_t *r, fd_str_t *tok,
                                  unsigned max)
{
    unsigned i, n = 0;

    for (i = 0; i < r->in.nheaders; i++)
        if (fd_str_caseeq_lit(r->in.headers[i].name, "connection"))
            fd_http_tokens(r->in.headers[i].value, tok, &n, max);
    return n;
}

static int named_in(fd_str_t name, const fd_str_t *list, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++)
        if (fd_str_caseeq(name, list[i].data, list[i].len))
            return 1;
    return 0;
}

static int replaced_by_set_header(proxy_loc_conf_t *lc, fd_str_t name)
{
    unsigned i;

    for (i = 0; i < lc->nhdrs; i++)
        if (fd_str_caseeq(name, lc->hdrs[i].name.data, lc->hdrs[i].name.len))
            return 1;
    return 0;
}

/*
 * The URI sent upstream, as nginx's proxy_pass:
 * - pass without a URI, request URI unchanged: the client's target as it
 *   came (origin form; path and query of an absolute-form target);
 * - pass with a URI: the location's matched part of the normalised path
 *   replaced by it, the rest re-encoded. The client's raw bytes are never
 *   pasted after the prefix, so "..", "%2e%2e", "//" or "%2f" cannot climb
 *   out of it: they were resolved before the location matched;
 * - a URI a rewrite changed: the new (normalised) path, encoded, whatever
 *   pass holds, so a confinement written as a rewrite holds upstream too.
 */
static void request_uri(fd_sbuf_t *sb, fd_request_t *r, proxy_loc_conf_t *lc)
{
    fd_http_loc_t *loc = r->loc;
    fd_str_t q = r->in.query, path = r->path;

    if (!r->uri_changed && !lc->has_uri) {
        if (r->in.target.len && r->in.target.data[0] == '/') {
            fd_sbuf_add_str(sb, r->in.target);
            return;
        }
        fd_sbuf_add_str(sb, r->in.path_raw); /* absolute-form */
        goto query;
    }
    if (!r->uri_changed) {
        fd_sbuf_add_str(sb, lc->uri);
        if (loc->kind == FD_LOC_EXACT)
            path.len = 0;
        else if (path.len >= loc->match.len)
            path = (fd_str_t){path.len - loc->match.len,
                              path.data + loc->match.len};
    }
    fd_sbuf_add_escaped_path(sb, path.data, path.len);
    if (q.len == 0)
        return; /* "/x?" from a rewrite that drops the arguments */
query:
    if (q.data) {
        /* a query a rewrite or try_files made may hold what a decoded
         * $uri gave it: no byte a request-target may not have (CR, LF,
         * SP...) reaches the request line, whatever the query's origin */
        fd_sbuf_addc(sb, '?');
        fd_var_add_escaped(sb, q, FD_VAR_ESC_TARGET);
    }
}

/*
 * The upstream request header, built once (the client's header slices
 * point into its read buffer, which moves once the body streams). Every
 * attempt sends the same bytes. The builder grows as it goes: the size
 * below is only a first guess.
 */
static int request_build(fd_api_upstream_req_t *u, void *data,
                         fd_str_t *out)
{
    proxy_req_t *px = data;
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    fd_upstream_t *up = px->up;
    fd_str_t tok[16], host, a;
    char addr[INET6_ADDRSTRLEN];
    unsigned ntok = connection_tokens(r, tok, fd_nelems(tok)), i;
    int keep_xff = !(lc->gen_replaced & GEN_XFF);
    size_t mark;
    fd_sbuf_t sb;

    a.len = fd_request_addr_text(r, addr, sizeof(addr));
    a.data = addr;
    if (lc->proxy_host == HOST_PASS && r->in.host.len)
        host = r->in.host;
    else
        host = (fd_str_t){strlen(up->name), up->name};
    if (fd_sbuf_init(&sb, r->pool, 512 + r->in.target.len) != FD_OK)
        return FD_ERROR;

    fd_sbuf_add_str(&sb, r->in.method);
    fd_sbuf_addc(&sb, ' ');
    request_uri(&sb, r, lc);
    fd_sbuf_add_lit(&sb, " HTTP/1.1\r\n");
    if (!(lc->gen_replaced & GEN_HOST))
        fd_sbuf_add_header(&sb, fd_string("Host"), host);
    for (i = 0; i < r->in.nheaders; i++) {
        fd_http_header_t *h = &r->in.headers[i];
        if (header_kind(h->name) != H_PASS || named_in(h->name, tok, ntok) ||
            (r->in.ext_connect && fd_proxy_tunnel_own_field(h->name)) ||
            replaced_by_set_header(lc, h->name) ||
            (px->cache_fields && fd_proxy_cache_drops_field(h->name)))
            continue;
        fd_sbuf_add_header(&sb, h->name, h->value);
    }
    if (px->cr)
        fd_proxy_cache_request_fields(px, &sb);
    if (keep_xff) {
        /* every X-Forwarded-For the client sent, joined, then the client */
        fd_sbuf_add_lit(&sb, "X-Forwarded-For: ");
        for (i = 0; i < r->in.nheaders; i++) {
            fd_http_header_t *h = &r->in.headers[i];
            if (header_kind(h->name) != H_XFF || h->value.len == 0)
                continue;
            fd_sbuf_add_str(&sb, h->value);
            fd_sbuf_add_lit(&sb, ", ");
        }
        fd_sbuf_add_str(&sb, a);
        fd_sbuf_add_crlf(&sb);
    }
    if (!(lc->gen_replaced & GEN_XRIP))
        fd_sbuf_add_header(&sb, fd_string("X-Real-IP"), a);
    if (!(lc->gen_replaced & GEN_XFP))
        fd_sbuf_add_header(&sb, fd_string("X-Forwarded-Proto"),
                           r->c->s.tls ? fd_string("https")
                                       : fd_string("http"));
    if (!(lc->gen_replaced & GEN_XFH) && r->in.host.len)
        fd_sbuf_add_header(&sb, fd_string("X-Forwarded-Host"), r->in.host);
    for (i = 0; i < lc->nhdrs; i++) {
        /* Name: value, unless the value comes out empty */
        size_t at = fd_sbuf_len(&sb);
        fd_sbuf_add_str(&sb, lc->hdrs[i].name);
        fd_sbuf_add_lit(&sb, ": ");
        mark = fd_sbuf_len(&sb);
        fd_var_eval(r, &lc->hdrs[i].script, NULL, FD_VAR_ESC_HEADER, &sb);
        if (fd_sbuf_len(&sb) == mark && !fd_sbuf_failed(&sb))
            sb.pos = sb.start + at;
        else
            fd_sbuf_add_crlf(&sb);
    }
    if (r->in.chunked) {
        fd_sbuf_add_lit(&sb, "Transfer-Encoding: chunked\r\n");
    } else if (r->in.content_length >= 0) {
        fd_sbuf_add_lit(&sb, "Content-Length: ");
        fd_sbuf_add_uint(&sb, (uint64_t)r->in.content_length);
        fd_sbuf_add_crlf(&sb);
    }
    if (px->upgrade) {
        fd_sbuf_add_lit(&sb, "Connection: upgrade\r\nUpgrade: websocket\r\n");
        if (r->in.ext_connect) {
            /* RFC 8441 has no key: the handshake to the upstream is
             * fastd's own (its answer is checked: fd_proxy_tunnel.c) */
            fd_sbuf_add_lit(&sb, "Sec-WebSocket-Version: 13\r\n");
            fd_sbuf_add_header(&sb, fd_string("Sec-WebSocket-Key"),
                               (fd_str_t){sizeof(px->ws_key), px->ws_key});
        }
    } else if (up->keepalive)
        fd_sbuf_add_lit(&sb, "Connection: keep-alive\r\n");
    else
        fd_sbuf_add_lit(&sb, "Connection: close\r\n");
    fd_sbuf_add_crlf(&sb);
    (void)u;
    if (fd_sbuf_failed(&sb))
        return 500;
    *out = fd_sbuf_str(&sb);
    return FD_OK;
}

/* n body bytes at buf + 16 as a chunk (n == 0: the last chunk); a body
 * of known length goes as it is (fd_api_upstream_body_raw) */
static int frame_body(fd_api_upstream_req_t *u, void *data, char *buf,
                      size_t n, size_t *len)
{
    proxy_req_t *px = data;
    char hex[20];
    int k;

    if (n == 0) {
        memcpy(buf, "0\r\n\r\n", 5);
        *len = 5;
        return FD_DONE;
    }
    px->body_bytes += (int64_t)n;
    if (px->body_bytes > (int64_t)px->r->loc->max_body_size) {
        fd_log_error(FD_LOG_INFO, 0, "client body over max_body_size");
        return 413;
    }
    /* the size line right before the bytes: the frame is one run */
    k = snprintf(hex, sizeof(hex), "%zx\r\n", n);
    memcpy(buf + 16 - (size_t)k, hex, (size_t)k);
    memcpy(buf + 16 + n, "\r\n", 2);
    fd_api_upstream_frame_at(u, 16 - (size_t)k);
    *len = (size_t)k + n + 2;
    return FD_OK;
}

/* The request ends: the cache's fill. */
static void proxy_release(fd_api_upstream_req_t *u, void *data)
{
    proxy_req_t *px = data;

    (void)u;
    fd_proxy_cache_abandon(px);
}

/* proxy_cache_use_stale error, timeout, invalid_header: the stale entry
 * answers instead of the error page */
static int proxy_fail_hook(fd_api_upstream_req_t *u, void *data, int status)
{
    proxy_req_t *px = data;
    unsigned cond;

    if (px->cr == NULL || (status != 502 && status != 504))
        return status;
    cond = status == 504 ? FD_PROXY_STALE_TIMEOUT
           : fd_api_upstream_failure(u) == FD_API_UPSTREAM_INVALID
               ? FD_PROXY_STALE_INVALID
               : FD_PROXY_STALE_ERROR;
    return fd_proxy_cache_stale(px, cond) == FD_OK ? FD_OK : status;
}

int fd_proxy_fail(proxy_req_t *px, int status)
{
    return fd_api_upstream_fail(px->au, status);
}

/* --- 3. the response ----------------------------------------------------- */

/* proxy_pass_header names n */
static int passed(const proxy_loc_conf_t *lc, fd_str_t n)
{
    return lc->npass_hdr && named_in(n, lc->pass_hdr, lc->npass_hdr);
}

/*
 * proxy_redirect: a Location (or the URL after "url=" in a Refresh) that
 * starts with a rule's FROM gets its TO instead; the first rule that
 * matches applies. v as it is when none does (or out of memory).
 */
static fd_str_t redirect_apply(fd_request_t *r, const proxy_loc_conf_t *lc,
                               fd_str_t v, int refresh)
{
    size_t off = 0, k;
    unsigned i;
    fd_sbuf_t sb;

    if (refresh) {
        for (k = 0; k + 4 <= v.len; k++)
            if (fd_str_caseeq((fd_str_t){4, v.data + k}, "url=", 4))
                break;
        if (k + 4 > v.len)
            return v;
        off = k + 4;
    }
    for (i = 0; i < lc->nredirects; i++) {
        const redirect_t *rd = &lc->redirects[i];
        fd_str_t url = {v.len - off, v.data + off};
        if (rd->from.len == 0 || url.len < rd->from.len ||
            !fd_str_caseeq((fd_str_t){rd->from.len, url.data},
                           rd->from.data, rd->from.len))
            continue;
        if (fd_sbuf_init(&sb, r->pool, v.len + 64) != FD_OK)
            return v;
        fd_sbuf_add(&sb, v.data, off);
        if (rd->dflt) {
            /* the client's view: its scheme and Host, port and all */
            fd_str_t host = r->in.host;
            if (host.len == 0 && r->server && r->server->names.n)
                host = (fd_str_t){strlen(r->server->names.items[0]),
                                  r->server->names.items[0]};
            if (r->c->s.tls)
                fd_sbuf_add_lit(&sb, "https://");
            else
                fd_sbuf_add_lit(&sb, "http://");
            fd_sbuf_add_str(&sb, host);
            fd_sbuf_add_str(&sb, rd->to_rest);
        } else {
            fd_var_eval(r, &rd->to, NULL, FD_VAR_ESC_HEADER, &sb);
        }
        fd_sbuf_add(&sb, url.data + rd->from.len, url.len - rd->from.len);
        return fd_sbuf_failed(&sb) ? v : fd_sbuf_str(&sb);
    }
    return v;
}

/*
 * The upstream's response fields into r: what the client must not see
 * dropped (hop-by-hop, those the engine makes, proxy_hide_header, the
 * Connection tokens'), proxy_redirect applied. HTTP/1.1's and HTTP/2's.
 */
static int resp_fields(proxy_req_t *px, const fd_api_field_t *f,
                       unsigned nf, const fd_str_t *conn_tok, unsigned ntok)
{
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    unsigned i;

    for (i = 0; i < nf; i++) {
        fd_str_t n = f[i].name, v = f[i].value;
        if (lc->nhide && named_in(n, lc->hide, lc->nhide))
            continue; /* proxy_hide_header */
        switch (n.len) {
        case 2:
            if (fd_str_caseeq_lit(n, "te"))
                continue;
            break;
        case 4:
            if (fd_str_caseeq_lit(n, "date"))
                continue; /* the engine's own */
            break;
        case 5:
            if (fd_str_caseeq_lit(n, "x-pad") && !passed(lc, n))
                continue;
            break;
        case 6:
            if (fd_str_caseeq_lit(n, "server")) {
                if (!passed(lc, n))
                    continue;
                r->server_passed = 1; /* it replaces the engine's */
            }
            break;
        case 7:
            if (fd_str_caseeq_lit(n, "trailer") ||
                fd_str_caseeq_lit(n, "upgrade"))
                continue;
            if (fd_str_caseeq_lit(n, "refresh"))
                v = redirect_apply(r, lc, v, 1);
            break;
        case 8:
            if (fd_str_caseeq_lit(n, "location"))
                v = redirect_apply(r, lc, v, 0);
            break;
        case 10:
            if (fd_str_caseeq_lit(n, "connection") ||
                fd_str_caseeq_lit(n, "keep-alive"))
                continue;
            break;
        case 12:
            if (fd_str_caseeq_lit(n, "content-type")) {
                if (r->content_type.len == 0)
                    r->content_type = f[i].value;
                continue;
            }
            break;
        case 14:
            if (fd_str_caseeq_lit(n, "content-length"))
                continue;
            break;
        case 16:
            if (fd_str_caseeq_lit(n, "proxy-connection"))
                continue;
            break;
        case 17:
            if (fd_str_caseeq_lit(n, "transfer-encoding"))
                continue;
            break;
        }
        if (ntok && named_in(n, conn_tok, ntok))
            continue;
        /* X-Accel-*: meant for the proxy (nginx's), not the client */
        if (n.len > 8 && fd_str_caseeq((fd_str_t){8, n.data}, "x-accel-", 8) &&
            !passed(lc, n))
            continue;
        if (fd_http_header_add(r, n, v) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

/* An HTTP/2 upstream's response header (the mux's fields hook) */
static int h2_fields(fd_api_upstream_req_t *u, void *data, int status,
                     const fd_api_field_t *f, unsigned nf)
{
    proxy_req_t *px = data;

    (void)u;
    px->r->status = status;
    if (resp_fields(px, f, nf, NULL, 0) != FD_OK)
        return 500;
    return FD_OK;
}

/*
 * The response header at ibuf + ipos, once complete: check it strictly
 * (fd_http_parse_response), then either fail over (next_upstream
 * http_5xx), or set the client's response and the body framing. PX_OK
 * (body follows), PX_MORE (incomplete), PX_INTERIM (a 1xx was skipped),
 * PX_WAIT (a new attempt or a tunnel began), PX_DONE.
 */
static int resp_header(proxy_req_t *px, const char **pp, const char *end)
{
    fd_request_t *r = px->r;
    fd_api_upstream_req_t *u = px->au;
    const char *buf = *pp, *err;
    size_t len = (size_t)(end - buf);
    char *h;
    size_t hlen;
    fd_http_header_t f[MAX_RESP_HEADERS];
    fd_http_resp_t rs = {.fields = f, .max_fields = MAX_RESP_HEADERS};
    unsigned nf, ntok, i;
    int status, rc;
    struct {
        int status;
        fd_http_header_out_t *headers_out, **headers_out_last;
        fd_str_t content_type;
        int64_t content_length;
        unsigned server_passed;
    } saved = {0};

    switch (fd_http_parse_response_end(buf, len, &px->hscan, &hlen, &err)) {
    case FD_AGAIN:
        return PX_MORE;
    case FD_ERROR:
        return fd_api_upstream_invalid(u, err);
    }
    /* the fields outlive the buffer, which the body reuses */
    h = fd_pnalloc(r->pool, hlen);
    if (h == NULL)
        return fd_proxy_fail(px, 500);
    memcpy(h, buf, hlen);
    if (fd_http_parse_response(&rs, h, hlen, &err) != FD_OK)
        return fd_api_upstream_invalid(u, err);
    status = rs.status;
    nf = rs.nfields;
    ntok = rs.ntok;

    if (status >= 100 && status < 200 && status != 101) {
        /* 100 Continue, 102, 103: interim, not forwarded; each was copied
         * into the request's pool, so an upstream gets a handful */
        if (++px->ninterim > MAX_INTERIM)
            return fd_api_upstream_invalid(u, "sent too many 1xx responses");
        fd_api_upstream_consume(u, hlen);
        *pp += hlen;
            return PX_INTERIM;
    }

    /* logged, timed, passive health; next_upstream http_5xx */
    rc = fd_api_upstream_header(u, status);
    if (rc != FD_OK)
        return rc;

    if (px->cr) {
        /* a revalidation's 304, or a status proxy_cache_use_stale names:
         * the entry answers */
        int crc = fd_proxy_cache_response(px, status, f, nf);
        if (crc == FD_ERROR) {
            /* the upstream was right: the entry went meanwhile (evicted,
             * replaced). 502, and the server is not blamed for it */
            fd_api_upstream_log(u, FD_API_LOG_WARN, 0, " answered 304 to a "
                                "revalidation of an entry that is gone "
                                "meanwhile");
            return fd_proxy_fail(px, 502);
        }
        if (crc == FD_OK) {
            fd_api_upstream_consume(u, hlen);
        *pp += hlen;
            return fd_api_upstream_end(u, FD_OK);
        }
    }

    if (status == 101) {
        if (!px->upgrade)
            return fd_api_upstream_invalid(u, "sent 101 to a request without "
                                 "Upgrade");
        if (rs.upgrade.data && !fd_str_caseeq_lit(rs.upgrade, "websocket"))
            return fd_api_upstream_invalid(u, "sent 101 switching to another "
                                 "protocol than websocket");
        if (r->in.ext_connect && !fd_proxy_tunnel_accepted(px, f, nf))
            return fd_api_upstream_invalid(u, "sent a 101 whose "
                                 "Sec-WebSocket-Accept does not answer its key");
        fd_api_upstream_consume(u, hlen);
        *pp += hlen;
        r->status = 101;
        for (i = 0; i < nf; i++) {
            fd_str_t n = f[i].name;
            if (r->in.ext_connect &&
                fd_str_caseeq_lit(n, "sec-websocket-accept"))
                continue;
            if (fd_str_caseeq_lit(n, "connection") ||
                fd_str_caseeq_lit(n, "upgrade") ||
                fd_str_caseeq_lit(n, "keep-alive") ||
                fd_str_caseeq_lit(n, "transfer-encoding") ||
                fd_str_caseeq_lit(n, "content-length") ||
                fd_str_caseeq_lit(n, "server") ||
                fd_str_caseeq_lit(n, "date") ||
                named_in(n, rs.conn_tok, ntok))
                continue;
            fd_http_header_add(r, n, f[i].value);
        }
        if (r->in.ext_connect) {
            r->status = 200; /* the stream is the tunnel: RFC 8441 5 */
        } else {
            fd_http_header_add(r, fd_string("Upgrade"), fd_string("websocket"));
            fd_http_header_add(r, fd_string("Connection"),
                               fd_string("upgrade"));
        }
        return fd_api_upstream_tunnel(u, px->lc->websocket_idle_timeout);
    }

    if (px->bg) {
        /* a background update: r's response went out already; what the
         * upstream says is built in r for the cache alone, then r's own
         * fields come back */
        saved.status = r->status;
        saved.headers_out = r->headers_out;
        saved.headers_out_last = r->headers_out_last;
        saved.content_type = r->content_type;
        saved.content_length = r->content_length;
        saved.server_passed = r->server_passed;
        r->headers_out = NULL;
        r->headers_out_last = &r->headers_out;
        r->content_type = fd_null_string;
    }
    r->status = status;
    if (resp_fields(px, (const fd_api_field_t *)f, nf, rs.conn_tok, ntok) !=
        FD_OK)
        return fd_proxy_fail(px, 500);
    fd_api_upstream_consume(u, hlen);
    *pp += hlen;
    px->keepalive = (rs.version == 11 ? !rs.conn_close
                                      : rs.conn_keepalive && !rs.conn_close) &&
                    !px->upgrade;
    if (r->header_only || status == 204 || status == 304) {
        px->framing = FR_NONE;
        r->content_length = rs.content_length >= 0 && r->header_only
                                ? rs.content_length
                                : -1;
    } else if (rs.chunked) {
        px->framing = FR_CHUNKED;
        memset(&px->ck, 0, sizeof(px->ck));
        r->content_length = -1;
    } else if (rs.content_length >= 0) {
        px->framing = FR_LENGTH;
        px->rest = rs.content_length;
        fd_api_upstream_rest(u, px->rest);
        r->content_length = rs.content_length;
    } else {
        px->framing = FR_CLOSE;
        fd_api_upstream_until_close(u);
        px->keepalive = 0;
        r->content_length = -1;
    }
    px->header_done = 1;
    if (px->cr)
        fd_proxy_cache_header(px, f, nf, rs.content_length);
    if (px->bg) {
        r->status = saved.status;
        r->headers_out = saved.headers_out;
        r->headers_out_last = saved.headers_out_last;
        r->content_type = saved.content_type;
        r->content_length = saved.content_length;
        r->server_passed = saved.server_passed;
        return PX_OK;
    }
    if (!px->lc->u.buffering && !r->c->s.nodelay) {
        int one = 1;
        setsockopt(r->c->s.ev.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        r->c->s.nodelay = 1;
    }
    return PX_OK;
}

/*
 * Hand the body bytes in[0, len) to the engine (which copies them),
 * decoding chunked framing. Ends the request when the body is complete.
 */
static int resp_body(proxy_req_t *px, const char **pp, const char *end,
                     int eof)
{
    fd_api_upstream_req_t *u = px->au;
    fd_api_piece_t b[16]; /* slices of the input: the engine copies */
    unsigned nb = 0;
    const char *p = *pp;
    size_t len = (size_t)(end - p);
    int done = 0, rc;

    switch (px->framing) {
    case FR_NONE:
        done = 1;
        break;
    case FR_LENGTH: {
        size_t n = (size_t)fd_min((int64_t)len, px->rest);
        if (n)
            b[nb++] = (fd_api_piece_t){.data = p, .len = n, .fd = -1};
        p += n;
        px->rest -= (int64_t)n;
        done = px->rest == 0;
        if (!done)
            fd_api_upstream_rest(u, px->rest);
        break;
    }
    case FR_CLOSE:
        if (p < end)
            b[nb++] = (fd_api_piece_t){.data = p, .len = len, .fd = -1};
        p = end;
        done = eof;
        break;
    case FR_CHUNKED:
        while (nb < fd_nelems(b)) {
            const char *data;
            size_t n;
            rc = fd_http_parse_chunked(&px->ck, &p, end, &data, &n);
            if (rc == FD_OK) {
                if (n)
                    b[nb++] = (fd_api_piece_t){.data = data, .len = n,
                                               .fd = -1};
                continue;
            }
            if (rc == FD_DONE) {
                done = 1;
                break;
            }
            if (rc == FD_AGAIN)
                break;
            if (!px->r->header_sent)
                return fd_api_upstream_invalid(u, "sent an invalid chunked "
                                                  "body");
            fd_api_upstream_log(u, FD_API_LOG_ERR, 0,
                                ": sent an invalid chunked body");
            return fd_proxy_fail(px, FD_ERROR);
        }
        break;
    }
    fd_api_upstream_consume(u, (size_t)(p - *pp));
    *pp = p;
    if (px->cr && nb)
        fd_proxy_cache_body(px, b, nb);

    if (done) {
        /* bytes after the response: the upstream does not frame as we
         * read it, never reuse that connection */
        int whole = p == end;
        if (!whole)
            fd_api_upstream_log(u, FD_API_LOG_WARN, 0,
                                " sent data after the response");
        if (px->cr)
            fd_proxy_cache_end(px, whole);
        return fd_api_upstream_last(u, b, nb,
                                    px->keepalive &&
                                        px->framing != FR_CLOSE && whole);
    }
    return fd_api_upstream_output(u, b, nb);
}

/* Work through what the server sent (the engine's process). */
static int resp_process(fd_api_upstream_req_t *u, void *data, const char *in,
                        size_t len, int eof)
{
    proxy_req_t *px = data;
    const char *p = in, *end = in + len;

    (void)u;
    for (;;) {
        int rc;

        if (!px->header_done) {
            if (p == end)
                return PX_OK;
            rc = resp_header(px, &p, end);
            if (rc == PX_MORE)
                return PX_OK;
            if (rc == PX_INTERIM)
                continue;
            if (rc != PX_OK)
                return rc;
        }
        rc = resp_body(px, &p, end, eof);
        if (rc != PX_OK || p == end)
            return rc;
        /* more chunks than one output call takes: go on */
    }
}

/* A new try: the response's parse from its start. */
static void resp_retry(fd_api_upstream_req_t *u, void *data)
{
    proxy_req_t *px = data;

    (void)u;
    px->hscan = 0;
    px->header_done = 0;
}

/* --- the handler --- */

static int proxy_handler(fd_request_t *r)
{
    proxy_loc_conf_t *lc = fd_loc_conf(r->loc, &fd_proxy_module);
    fd_api_upstream_req_t *u;
    proxy_req_t *px;
    int m = r->in.method_id;

    u = fd_api_upstream_req(r, lc->uc, sizeof(*px));
    if (u == NULL)
        return 500;
    px = fd_api_upstream_data(u);
    px->au = u;
    px->r = r;
    px->lc = lc;
    px->up = lc->up;
    /* only WebSocket, only where the location allows it: any other token
     * (h2c above all) would open a tunnel past every location rule */
    px->upgrade = lc->websocket && lc->h2 == PROXY_H1 &&
                  r->in.conn_upgrade &&
                  (r->in.version == 11 || r->in.ext_connect) &&
                  m == FD_HTTP_GET &&
                  fd_str_caseeq_lit(r->in.upgrade, "websocket");
    if (r->in.ext_connect &&
        (!px->upgrade || fd_proxy_tunnel_key(px) != FD_OK))
        return px->upgrade ? 500 : 501; /* websocket = off: no tunnel */
    if (px->upgrade)
        fd_api_upstream_careful(u);
    px->chunked_body = r->in.chunked;
    if (r->in.content_length > 0)
        fd_api_upstream_body_raw(u); /* kept for a retry when short */
    if (lc->cache) {
        int rc = fd_proxy_cache_lookup(px);
        if (rc == FD_PROXY_CACHE_BACKGROUND) {
            /* proxy_cache_background_update: the stale entry answers
             * now, the request goes on upstream for the cache alone */
            px->bg = 1;
            fd_api_upstream_background(u);
            fd_http_respond_early(r);
        } else if (rc != FD_DECLINED) {
            return rc;
        }
    }
    return fd_proxy_start(px);
}

int fd_proxy_start(proxy_req_t *px)
{
    return fd_api_upstream_start(px->au);
}

/* --- 5. variables ------------------------------------------------------ */

static proxy_req_t *request_px(fd_request_t *r)
{
    if (r == NULL || r->loc == NULL || r->loc->handler != &fd_proxy_module)
        return NULL;
    return fd_proxy_req(r);
}

/* $upstream_cache_status: MISS, HIT, EXPIRED, STALE, UPDATING,
 * REVALIDATED, BYPASS; empty when the location does not cache (or the
 * method is not cached) */
static fd_str_t v_cache_status(fd_request_t *r, const fd_var_op_t *op,
                               char *tmp)
{
    proxy_req_t *px = request_px(r);
    const char *t;

    (void)op;
    (void)tmp;
    if (px == NULL || px->cache_status == FD_PROXY_CACHE_NONE)
        return fd_null_string;
    t = fd_proxy_cache_status_text(px->cache_status);
    return (fd_str_t){strlen(t), (char *)t};
}

static const fd_var_t proxy_vars[] = {
    {"upstream_cache_status", v_cache_status, 0, 0},
    FD_VAR_END}; /* $upstream_addr and its kin are the core's (any
                    protocol's tries): core/http/fd_upstream_module.c */

fd_module_t fd_proxy_module = {
    .name = "proxy",
    .directives = fd_proxy_directives,
    .conf_size = sizeof(proxy_loc_conf_t),
    .init_conf = fd_proxy_init_conf,
    .init_worker = proxy_init_worker,
    .exit_worker = proxy_exit_worker,
    .handler = proxy_handler,
    .flags = FD_MODULE_STREAM_BODY | FD_MODULE_TUNNEL,
    .methods = FD_METHODS_ANY, /* the backend decides, but TRACE/CONNECT */
    .shm_size = FD_PROXY_CACHE_SHM_SIZE,
    .also = &fd_proxy_cache_section,
    .init_cycle = fd_proxy_cache_init_cycle,
    .status = fd_proxy_cache_status,
    .status_shared = fd_proxy_cache_status_shared,
    .retire = fd_proxy_cache_retire,
    .vars = proxy_vars,
};
