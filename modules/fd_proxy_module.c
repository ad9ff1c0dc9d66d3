/*
 * handler = proxy: a reverse proxy to upstream groups, on the upstream
 * engine's public face (fastd_upstream.h: the engine picks the server,
 * keeps its health and the idle connections to it, retries, and speaks
 * HTTP/2 and gRPC itself); HTTP/1.1's framing is here, on the API's
 * parser. The module is on the public API alone (fastd.h, API 1.10): its
 * descriptor (the end of this file), its keys (fd_proxy_conf.c), its
 * variable, and its cache (fd_proxy_cache.c: a request's lookup, wait
 * for a fill, HIT, background update and store; fd_proxy_cache_index.c:
 * the [cache NAME] section, its index in a shared zone, the manager and
 * the loader, the figures). It builds into fastd or as fd_proxy.so
 * (./configure --with-proxy=dynamic).
 *
 * The file reads in the order a request goes through it:
 *   1. worker setup (the location keys are fd_proxy_conf.c's);
 *   2. the request: its header is built once in the handler; a try picks
 *      a server and a connection, a failed one counts against its server
 *      and goes to the next (next_upstream) or the error page; the body is
 *      pulled from the client only while the upstream takes it
 *      (back-pressure), Content-Length passed on, chunked re-chunked;
 *   3. the response: a strict parser (status line, header fields, framing:
 *      fd_api_http_response), then the body handed to the engine
 *      (fd_api_upstream_output), which stops us at the client's
 *      high-water mark (back-pressure); chunked is decoded here and
 *      framed again by the engine; client aborts;
 *   4. events and timeouts, and the handler;
 *   5. the module's variable ($upstream_cache_status; $upstream_addr,
 *      $upstream_status and $upstream_response_time are the upstream
 *      engine's, for every protocol: core/http/fd_upstream_module.c).
 * After a 101 (WebSocket) the request becomes the engine's tunnel
 * (fd_api_upstream_tunnel); the handshake over HTTP/2 is fd_proxy_tunnel.c.
 *
 * Everything runs on the worker's loop thread; state is per worker (each
 * worker has its own copy of the configuration, whose runtime fields it
 * alone writes). Memory per request: the request header in r's memory and at
 * most two 16k blocks (response and request body), whatever the size of
 * the bodies.
 *
 * Variables, in the registry for every script (empty when the
 * request was not proxied; one entry per server tried, ", "-separated as
 * nginx): $upstream_addr "127.0.0.1:3000, 127.0.0.1:3001",
 * $upstream_status "502, 200", $upstream_response_time (seconds with
 * milliseconds) "0.002, 0.013".
 */
#include <stdio.h>
#include <strings.h>

#include "fd_proxy.h"

#define MAX_RESP_HEADERS 128
#define MAX_INTERIM 8         /* 1xx responses before a final one */

/* --- 1. worker setup ----------------------------------------------------- */

static int proxy_init_worker(void)
{
    return fd_proxy_cache_init_worker();
}

static void proxy_exit_worker(void)
{
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

#define out_lit(o, lit) fd_api_out_add(o, lit, sizeof(lit) - 1)
#define out_str(o, s) fd_api_out_add(o, (s).data, (s).len)

static int name_eq(fd_str_t a, fd_str_t b)
{
    return a.len == b.len && strncasecmp(a.data, b.data, a.len) == 0;
}

/* What a request header line becomes upstream. */
enum { H_PASS, H_DROP, H_XFF };

static int header_kind(fd_str_t n)
{
    switch (n.len) {
    case 2:
        return lit_eq(n, "te") ? H_DROP : H_PASS;
    case 4:
        return lit_eq(n, "host") ? H_DROP : H_PASS;
    case 6:
        return lit_eq(n, "expect") ? H_DROP : H_PASS;
    case 7:
        return lit_eq(n, "trailer") || lit_eq(n, "upgrade") ? H_DROP : H_PASS;
    case 9:
        return lit_eq(n, "x-real-ip") ? H_DROP : H_PASS;
    case 10:
        return lit_eq(n, "connection") || lit_eq(n, "keep-alive") ? H_DROP
                                                                   : H_PASS;
    case 14:
        return lit_eq(n, "content-length") ? H_DROP : H_PASS;
    case 15:
        return lit_eq(n, "x-forwarded-for") ? H_XFF : H_PASS;
    case 16:
        return lit_eq(n, "proxy-connection") ||
                       lit_eq(n, "x-forwarded-host")
                   ? H_DROP
                   : H_PASS;
    case 17:
        return lit_eq(n, "transfer-encoding") ||
                       lit_eq(n, "x-forwarded-proto")
                   ? H_DROP
                   : H_PASS;
    }
    return H_PASS;
}

/* The tokens of every Connection header: the headers they name are
 * hop-by-hop too. */
static unsigned connection_tokens(const fd_api_http_req_t *in, fd_str_t *tok,
                                  unsigned max)
{
    unsigned i, n = 0;

    for (i = 0; i < in->nfields; i++)
        if (lit_eq(in->fields[i].name, "connection"))
            fd_api_http_tokens(in->fields[i].value, tok, &n, max);
    return n;
}

static int named_in(fd_str_t name, const fd_str_t *list, unsigned n)
{
    unsigned i;

    for (i = 0; i < n; i++)
        if (name_eq(name, list[i]))
            return 1;
    return 0;
}

static int replaced_by_set_header(proxy_loc_conf_t *lc, fd_str_t name)
{
    unsigned i;

    for (i = 0; i < lc->nhdrs; i++)
        if (name_eq(name, lc->hdrs[i].name))
            return 1;
    return 0;
}

/* s into o, the bytes esc (FD_API_ESC_*) names as %XX */
static void out_escaped(fd_api_out_t *o, fd_str_t s, int esc)
{
    fd_api_out_sync(o);
    fd_api_sbuf_add_escaped(o->sb, s.data, s.len, esc);
    fd_api_out_resume(o, 256);
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
static void request_uri(fd_api_out_t *o, proxy_req_t *px)
{
    const fd_api_http_req_t *in = &px->in;
    fd_str_t q = fd_req_query(px->r), t;

    if (!in->uri_changed && !px->lc->has_uri) {
        t = fd_req_target(px->r);
        if (t.len && t.data[0] == '/') {
            out_str(o, t);
            return;
        }
        out_str(o, in->path_raw); /* absolute-form */
    } else {
        if (!in->uri_changed)
            out_str(o, px->lc->uri);
        out_escaped(o, in->uri_changed ? fd_req_path(px->r) : in->path_rest,
                    FD_API_ESC_PATH);
        if (q.len == 0)
            return; /* "/x?" from a rewrite that drops the arguments */
    }
    if (q.data) {
        /* a query a rewrite or try_files made may hold what a decoded
         * $uri gave it: no byte a request-target may not have (CR, LF,
         * SP...) reaches the request line, whatever the query's origin */
        out_lit(o, "?");
        out_escaped(o, q, FD_API_ESC_TARGET);
    }
}

/* proxy_set_header lines: Name: value, unless the value comes out empty
 * (made in vals, a builder of the request's, then copied) */
static void set_headers(fd_api_out_t *o, proxy_req_t *px)
{
    proxy_loc_conf_t *lc = px->lc;
    fd_api_sbuf_t *vals = fd_req_sbuf(px->r, 128);
    size_t at;
    unsigned i;

    for (i = 0; vals && i < lc->nhdrs; i++) {
        at = fd_api_sbuf_str(vals).len;
        fd_req_script_add(px->r, lc->hdrs[i].script, FD_API_ESC_HEADER, vals);
        fd_str_t v = fd_api_sbuf_str(vals);
        if (v.len > at)
            fd_proxy_out_field(o, lc->hdrs[i].name,
                               (fd_str_t){v.len - at, v.data + at});
    }
    if (vals == NULL || fd_api_sbuf_failed(vals))
        o->p = NULL; /* out of memory */
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
    const fd_api_http_req_t *in = &px->in;
    proxy_loc_conf_t *lc = px->lc;
    fd_str_t tok[16], host, a, target = fd_req_target(r);
    char addr[48];
    unsigned ntok = connection_tokens(in, tok, NELEMS(tok)), i;
    int keep_xff = !(lc->gen_replaced & GEN_XFF);
    fd_api_out_t o;

    a.len = fd_req_client_text(r, addr, sizeof(addr));
    a.data = addr;
    if (lc->proxy_host == HOST_PASS && in->host.len) {
        host = in->host;
    } else {
        host.data = (char *)fd_api_upstream_name(px->up);
        host.len = strlen(host.data);
    }
    if (fd_api_out_init(&o, r, 512 + target.len) != FD_OK)
        return FD_ERROR;

    out_str(&o, fd_req_method(r));
    out_lit(&o, " ");
    request_uri(&o, px);
    out_lit(&o, " HTTP/1.1\r\n");
    if (!(lc->gen_replaced & GEN_HOST))
        fd_proxy_out_field(&o, STR("Host"), host);
    for (i = 0; i < in->nfields; i++) {
        const fd_api_field_t *h = &in->fields[i];
        if (header_kind(h->name) != H_PASS || named_in(h->name, tok, ntok) ||
            (in->ext_connect && fd_proxy_tunnel_own_field(h->name)) ||
            replaced_by_set_header(lc, h->name) ||
            (px->cache_fields && fd_proxy_cache_drops_field(h->name)))
            continue;
        fd_proxy_out_field(&o, h->name, h->value);
    }
    if (px->cr)
        fd_proxy_cache_request_fields(px, &o);
    if (keep_xff) {
        /* every X-Forwarded-For the client sent, joined, then the client */
        out_lit(&o, "X-Forwarded-For: ");
        for (i = 0; i < in->nfields; i++) {
            const fd_api_field_t *h = &in->fields[i];
            if (header_kind(h->name) != H_XFF || h->value.len == 0)
                continue;
            out_str(&o, h->value);
            out_lit(&o, ", ");
        }
        out_str(&o, a);
        out_lit(&o, "\r\n");
    }
    if (!(lc->gen_replaced & GEN_XRIP))
        fd_proxy_out_field(&o, STR("X-Real-IP"), a);
    if (!(lc->gen_replaced & GEN_XFP))
        fd_proxy_out_field(&o, STR("X-Forwarded-Proto"),
                           in->tls ? STR("https") : STR("http"));
    if (!(lc->gen_replaced & GEN_XFH) && in->host.len)
        fd_proxy_out_field(&o, STR("X-Forwarded-Host"), in->host);
    if (lc->nhdrs)
        set_headers(&o, px);
    if (in->chunked) {
        out_lit(&o, "Transfer-Encoding: chunked\r\n");
    } else if (in->content_length >= 0) {
        out_lit(&o, "Content-Length: ");
        fd_api_out_sync(&o);
        fd_api_sbuf_add_uint(o.sb, (uint64_t)in->content_length);
        fd_api_out_resume(&o, 64);
        out_lit(&o, "\r\n");
    }
    if (px->upgrade) {
        out_lit(&o, "Connection: upgrade\r\nUpgrade: websocket\r\n");
        if (in->ext_connect) {
            /* RFC 8441 has no key: the handshake to the upstream is
             * fastd's own (its answer is checked: fd_proxy_tunnel.c) */
            out_lit(&o, "Sec-WebSocket-Version: 13\r\n");
            fd_proxy_out_field(&o, STR("Sec-WebSocket-Key"),
                               (fd_str_t){sizeof(px->ws_key), px->ws_key});
        }
    } else if (fd_api_upstream_keepalive(px->up)) {
        out_lit(&o, "Connection: keep-alive\r\n");
    } else {
        out_lit(&o, "Connection: close\r\n");
    }
    out_lit(&o, "\r\n");
    (void)u;
    if (o.p == NULL)
        return 500;
    fd_api_out_sync(&o);
    if (fd_api_sbuf_failed(o.sb))
        return 500;
    *out = fd_api_sbuf_str(o.sb);
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
    if (px->body_bytes > (int64_t)px->in.max_body) {
        fd_api_log(FD_API_LOG_INFO, 0, "client body over max_body_size");
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
static fd_str_t redirect_apply(proxy_req_t *px, fd_str_t v, int refresh)
{
    const proxy_loc_conf_t *lc = px->lc;
    fd_request_t *r = px->r;
    size_t off = 0, k;
    unsigned i;
    fd_api_sbuf_t *sb;

    if (refresh) {
        for (k = 0; k + 4 <= v.len; k++)
            if (lit_eq(((fd_str_t){4, v.data + k}), "url="))
                break;
        if (k + 4 > v.len)
            return v;
        off = k + 4;
    }
    for (i = 0; i < lc->nredirects; i++) {
        const redirect_t *rd = &lc->redirects[i];
        fd_str_t url = {v.len - off, v.data + off};
        if (rd->from.len == 0 || url.len < rd->from.len ||
            !name_eq((fd_str_t){rd->from.len, url.data}, rd->from))
            continue;
        if ((sb = fd_req_sbuf(r, v.len + 64)) == NULL)
            return v;
        fd_api_sbuf_add(sb, v.data, off);
        if (rd->dflt) {
            /* the client's view: its scheme and Host, port and all */
            fd_str_t host = px->in.host;
            if (host.len == 0)
                host = fd_req_var(r, "server_name");
            if (px->in.tls)
                fd_api_sbuf_add(sb, "https://", 8);
            else
                fd_api_sbuf_add(sb, "http://", 7);
            fd_api_sbuf_add(sb, host.data, host.len);
            fd_api_sbuf_add(sb, rd->to_rest.data, rd->to_rest.len);
        } else {
            fd_req_script_add(r, rd->to, FD_API_ESC_HEADER, sb);
        }
        fd_api_sbuf_add(sb, url.data + rd->from.len, url.len - rd->from.len);
        return fd_api_sbuf_failed(sb) ? v : fd_api_sbuf_str(sb);
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
    int ctype = 0;

    for (i = 0; i < nf; i++) {
        fd_str_t n = f[i].name, v = f[i].value;
        if (lc->nhide && named_in(n, lc->hide, lc->nhide))
            continue; /* proxy_hide_header */
        switch (n.len) {
        case 2:
            if (lit_eq(n, "te"))
                continue;
            break;
        case 4:
            if (lit_eq(n, "date"))
                continue; /* the engine's own */
            break;
        case 5:
            if (lit_eq(n, "x-pad") && !passed(lc, n))
                continue;
            break;
        case 6:
            if (lit_eq(n, "server")) {
                if (!passed(lc, n))
                    continue;
                fd_resp_own_server(r); /* it replaces the engine's */
            }
            break;
        case 7:
            if (lit_eq(n, "trailer") || lit_eq(n, "upgrade"))
                continue;
            if (lit_eq(n, "refresh"))
                v = redirect_apply(px, v, 1);
            break;
        case 8:
            if (lit_eq(n, "location"))
                v = redirect_apply(px, v, 0);
            break;
        case 10:
            if (lit_eq(n, "connection") || lit_eq(n, "keep-alive"))
                continue;
            break;
        case 12:
            if (lit_eq(n, "content-type")) {
                if (!ctype++)
                    fd_resp_content_type_static(r, v);
                continue;
            }
            break;
        case 14:
            if (lit_eq(n, "content-length"))
                continue;
            break;
        case 16:
            if (lit_eq(n, "proxy-connection"))
                continue;
            break;
        case 17:
            if (lit_eq(n, "transfer-encoding"))
                continue;
            break;
        }
        if (ntok && named_in(n, conn_tok, ntok))
            continue;
        /* X-Accel-*: meant for the proxy (nginx's), not the client */
        if (n.len > 8 && lit_eq(((fd_str_t){8, n.data}), "x-accel-") &&
            !passed(lc, n))
            continue;
        if (fd_resp_header_static(r, n, v) != FD_OK)
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
    fd_resp_status(px->r, status);
    if (resp_fields(px, f, nf, NULL, 0) != FD_OK)
        return 500;
    return FD_OK;
}

/* The 101 that opens a WebSocket's tunnel, hlen bytes at *pp: checked
 * (the Upgrade, over HTTP/2 the key's answer), then the client's
 * response. What fd_api_upstream_tunnel() returns, or PX_DONE. */
static int resp_upgrade(proxy_req_t *px, const fd_api_http_resp_t *rs,
                        const char **pp, size_t hlen)
{
    fd_request_t *r = px->r;
    fd_api_upstream_req_t *u = px->au;
    const fd_api_field_t *f = rs->fields;
    unsigned i;

    if (!px->upgrade)
        return fd_api_upstream_invalid(u, "sent 101 to a request without "
                                          "Upgrade");
    if (rs->upgrade.data && !lit_eq(rs->upgrade, "websocket"))
        return fd_api_upstream_invalid(u, "sent 101 switching to another "
                                          "protocol than websocket");
    if (px->in.ext_connect && !fd_proxy_tunnel_accepted(px, f, rs->nfields))
        return fd_api_upstream_invalid(u, "sent a 101 whose "
                                          "Sec-WebSocket-Accept does not "
                                          "answer its key");
    fd_api_upstream_consume(u, hlen);
    *pp += hlen;
    fd_resp_status(r, 101);
    for (i = 0; i < rs->nfields; i++) {
        fd_str_t n = f[i].name;
        if (px->in.ext_connect && lit_eq(n, "sec-websocket-accept"))
            continue;
        if (lit_eq(n, "connection") || lit_eq(n, "upgrade") ||
            lit_eq(n, "keep-alive") || lit_eq(n, "transfer-encoding") ||
            lit_eq(n, "content-length") || lit_eq(n, "server") ||
            lit_eq(n, "date") || named_in(n, rs->conn_tok, rs->ntok))
            continue;
        fd_resp_header_static(r, n, f[i].value);
    }
    if (px->in.ext_connect) {
        fd_resp_status(r, 200); /* the stream is the tunnel: RFC 8441 5 */
    } else {
        fd_resp_header_static(r, STR("Upgrade"), STR("websocket"));
        fd_resp_header_static(r, STR("Connection"), STR("upgrade"));
    }
    return fd_api_upstream_tunnel(u, px->lc->websocket_idle_timeout);
}

/*
 * The response header at *pp, once complete: check it strictly
 * (fd_api_http_response), then either fail over (next_upstream
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
    fd_api_field_t f[MAX_RESP_HEADERS];
    fd_api_http_resp_t rs = {.fields = f, .max_fields = MAX_RESP_HEADERS};
    fd_api_resp_t *saved = NULL;
    unsigned nf;
    int status, rc, header_only;

    switch (fd_api_http_response_end(buf, len, &px->hscan, &hlen, &err)) {
    case FD_AGAIN:
        return PX_MORE;
    case FD_ERROR:
        return fd_api_upstream_invalid(u, err);
    }
    /* the fields outlive the buffer, which the body reuses */
    h = fd_req_alloc(r, hlen);
    if (h == NULL)
        return fd_proxy_fail(px, 500);
    memcpy(h, buf, hlen);
    if (fd_api_http_response(&rs, h, hlen, &err) != FD_OK)
        return fd_api_upstream_invalid(u, err);
    status = rs.status;
    nf = rs.nfields;

    if (status >= 100 && status < 200 && status != 101) {
        /* 100 Continue, 102, 103: interim, not forwarded; each was copied
         * into the request's memory, so an upstream gets a handful */
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

    if (status == 101)
        return resp_upgrade(px, &rs, pp, hlen);

    /* a background update: r's response went out already; what the
     * upstream says is built in r for the cache alone, then r's own
     * comes back */
    if (px->bg && (saved = fd_resp_set_aside(r)) == NULL)
        return fd_proxy_fail(px, 500);
    fd_resp_status(r, status);
    if (resp_fields(px, f, nf, rs.conn_tok, rs.ntok) != FD_OK)
        return fd_proxy_fail(px, 500);
    fd_api_upstream_consume(u, hlen);
    *pp += hlen;
    px->keepalive = (rs.version == 11 ? !rs.conn_close
                                      : rs.conn_keepalive && !rs.conn_close) &&
                    !px->upgrade;
    header_only = fd_resp_is_header_only(r);
    if (header_only || status == 204 || status == 304) {
        px->framing = FR_NONE;
        fd_resp_content_length(r, rs.content_length >= 0 && header_only
                                      ? rs.content_length
                                      : -1);
    } else if (rs.chunked) {
        px->framing = FR_CHUNKED;
        memset(&px->ck, 0, sizeof(px->ck));
        fd_resp_content_length(r, -1);
    } else if (rs.content_length >= 0) {
        px->framing = FR_LENGTH;
        px->rest = rs.content_length;
        fd_api_upstream_rest(u, px->rest);
        fd_resp_content_length(r, rs.content_length);
    } else {
        px->framing = FR_CLOSE;
        fd_api_upstream_until_close(u);
        px->keepalive = 0;
        fd_resp_content_length(r, -1);
    }
    px->header_done = 1;
    if (px->cr)
        fd_proxy_cache_header(px, f, nf, rs.content_length);
    if (saved) {
        fd_resp_put_back(r, saved);
        return PX_OK;
    }
    if (px->lc->nodelay)
        fd_req_nodelay(r);
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
        size_t n = (int64_t)len < px->rest ? len : (size_t)px->rest;
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
        while (nb < NELEMS(b)) {
            const char *data;
            size_t n;
            rc = fd_api_http_chunked(&px->ck, &p, end, &data, &n);
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
            if (!fd_resp_header_sent(px->r))
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
    proxy_loc_conf_t *lc = fd_req_conf(r);
    fd_api_upstream_req_t *u;
    proxy_req_t *px;
    fd_str_t m = fd_req_method(r);

    u = fd_api_upstream_req(r, lc->uc, sizeof(*px));
    if (u == NULL)
        return 500;
    px = fd_api_upstream_data(u);
    px->au = u;
    px->r = r;
    px->lc = lc;
    px->up = lc->group;
    fd_req_http(r, &px->in, sizeof(px->in));
    /* only WebSocket, only where the location allows it: any other token
     * (h2c above all) would open a tunnel past every location rule */
    px->upgrade = lc->websocket && lc->h2 == PROXY_H1 &&
                  px->in.conn_upgrade &&
                  (px->in.version == 11 || px->in.ext_connect) &&
                  m.len == 3 && memcmp(m.data, "GET", 3) == 0 &&
                  lit_eq(px->in.upgrade, "websocket");
    if (px->in.ext_connect &&
        (!px->upgrade || fd_proxy_tunnel_key(px) != FD_OK))
        return px->upgrade ? 500 : 501; /* websocket = off: no tunnel */
    if (px->upgrade)
        fd_api_upstream_careful(u);
    px->chunked_body = px->in.chunked;
    if (px->in.content_length > 0)
        fd_api_upstream_body_raw(u); /* kept for a retry when short */
    if (lc->cache) {
        int rc = fd_proxy_cache_lookup(px);
        if (rc == FD_PROXY_CACHE_BACKGROUND) {
            /* proxy_cache_background_update: the stale entry answered
             * already, the request goes on upstream for the cache alone */
            px->bg = 1;
            fd_api_upstream_background(u);
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

/* r's proxy request when its location is the proxy's: a variable is read
 * on any request */
static proxy_req_t *request_px(fd_request_t *r)
{
    if (r == NULL || !fd_req_handler_is(r, FD_API_SELF))
        return NULL;
    return fd_proxy_req(r);
}

/* $upstream_cache_status: MISS, HIT, EXPIRED, STALE, UPDATING,
 * REVALIDATED, BYPASS; empty when the location does not cache (or the
 * method is not cached) */
static fd_str_t v_cache_status(fd_request_t *r, char *tmp)
{
    proxy_req_t *px = request_px(r);
    const char *t;

    (void)tmp;
    if (px == NULL || px->cache_status == FD_PROXY_CACHE_NONE)
        return (fd_str_t){0, NULL};
    t = fd_proxy_cache_status_text(px->cache_status);
    return (fd_str_t){strlen(t), t};
}

static const fd_api_var_t proxy_vars[] = {
    {"upstream_cache_status", v_cache_status, 0},
    {NULL, NULL, 0}}; /* $upstream_addr and its kin are the core's (any
                         protocol's tries): core/http/fd_upstream_module.c */

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "proxy",
    .keys = fd_proxy_keys,
    .set = fd_proxy_set,
    .conf_size = sizeof(proxy_loc_conf_t),
    .init_conf = fd_proxy_init_conf,
    .init_worker = proxy_init_worker,
    .exit_worker = proxy_exit_worker,
    .handler = proxy_handler,
    .flags = FD_API_STREAM_BODY | FD_API_TUNNEL,
    .methods = FD_API_ANY, /* the backend decides, but TRACE/CONNECT */
    .vars = proxy_vars,
    /* the [cache NAME] sections, their figures */
    .section = &fd_proxy_cache_section,
    .shm_size = FD_PROXY_CACHE_SHM_SIZE,
    .status = fd_proxy_cache_status,
    .status_shared = fd_proxy_cache_status_shared,
    .retire = fd_proxy_cache_retire,
};
