/*
 * handler = proxy: a reverse proxy to upstream groups (core/http/fd_upstream.c
 * picks the server, keeps its health and the idle connections to it).
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
 *   5. the module's variables ($upstream_addr ...).
 * After a 101 (WebSocket) the request becomes a tunnel: fd_proxy_tunnel.c.
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

static int proxy_connect(proxy_req_t *px);
static int proxy_handshake(proxy_req_t *px);
static int proxy_send(proxy_req_t *px);
static int proxy_read(proxy_req_t *px);
static void proxy_arm(proxy_req_t *px);
static void conn_event(fd_upstream_conn_t *uc);
static void conn_timeout(fd_upstream_conn_t *uc);

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
static int request_build(proxy_req_t *px)
{
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
    if (px->upgrade)
        fd_sbuf_add_lit(&sb, "Connection: upgrade\r\nUpgrade: websocket\r\n");
    else if (up->keepalive)
        fd_sbuf_add_lit(&sb, "Connection: keep-alive\r\n");
    else
        fd_sbuf_add_lit(&sb, "Connection: close\r\n");
    fd_sbuf_add_crlf(&sb);
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    px->hdr = sb.start;
    px->hdr_len = fd_sbuf_len(&sb);
    return FD_OK;
}

/* Let go of the upstream connection (into the pool when reuse). */
void fd_proxy_conn_release(proxy_req_t *px, int reuse)
{
    fd_upstream_conn_t *uc = px->uc;

    fd_sendq_cancel(&px->sop);
    if (uc) {
        px->uc = NULL;
        if (reuse)
            fd_upstream_keepalive_put(uc);
        else
            fd_upstream_conn_close(uc);
    }
    if (px->peer) {
        fd_upstream_peer_release(px->peer);
        px->peer = NULL;
    }
}

void fd_proxy_bufs_release(proxy_req_t *px)
{
    if (px->ibuf) {
        fd_block_put(&bufs, px->ibuf);
        px->ibuf = NULL;
    }
    if (px->obuf) {
        fd_block_put(&bufs, px->obuf);
        px->obuf = NULL;
    }
}

static void proxy_release(proxy_req_t *px, int reuse)
{
    fd_request_t *r = px->r;

    fd_proxy_conn_release(px, reuse);
    fd_proxy_bufs_release(px);
    fd_proxy_cache_abandon(px);
    r->on_abort = NULL;
    r->on_drain = NULL;
    r->on_body = NULL;
}

/* The upstream side is over: the request ends with rc (the handler's
 * result while it runs, else fd_request_finish()'s). */
static int proxy_end(proxy_req_t *px, int rc)
{
    proxy_release(px, 0);
    px->done = 1;
    if (px->sync)
        px->rc = rc;
    else
        fd_request_finish(px->r, rc);
    return PX_DONE;
}

/* The request ends without a (complete) response: an error page, or a
 * cut connection once the header left. */
int fd_proxy_fail(proxy_req_t *px, int status)
{
    fd_request_t *r = px->r;

    /* proxy_cache_use_stale error, timeout, invalid_header */
    if (px->cr && (status == 502 || status == 504) &&
        fd_proxy_cache_stale(px, status == 504 ? FD_PROXY_STALE_TIMEOUT
                                 : px->invalid ? FD_PROXY_STALE_INVALID
                                               : FD_PROXY_STALE_ERROR) ==
            FD_OK)
        status = FD_OK;
    return proxy_end(px, r->header_sent ? FD_ERROR : status);
}

static void log_try(proxy_req_t *px, fd_upstream_peer_t *p)
{
    if (px->nlog < LOG_TRIES) {
        px->log[px->nlog].peer = p;
        px->log[px->nlog].status = 0;
        px->log[px->nlog].msec = 0;
        px->nlog++;
    }
}

static int retry_allowed(proxy_req_t *px)
{
    proxy_loc_conf_t *lc = px->lc;

    if ((px->r->header_sent && !px->bg) || (px->pulled && !px->body_kept))
        return 0; /* the body read from the client cannot be sent again */
    if (px->written && !px->idempotent &&
        !(lc->next_upstream & NEXT_NON_IDEMPOTENT))
        return 0;
    if (lc->next_upstream_tries && px->tries >= (unsigned)
                                                lc->next_upstream_tries)
        return 0;
    return 1;
}

/*
 * This attempt failed (ft: NEXT_ERROR or NEXT_TIMEOUT): log it, count it
 * against the server, then the next server or the error response.
 */
static int proxy_next(proxy_req_t *px, unsigned ft, int err, const char *what)
{
    fd_upstream_peer_t *p = px->peer;
    fd_upstream_conn_t *uc = px->uc;
    /* a kept-alive connection the upstream closed before it saw the
     * request is not the server's failure: retry on a new connection */
    int stale = uc && uc->reused && ft == NEXT_ERROR && px->ilast == 0 &&
                px->rstate == RS_HEADER;

    if (stale && !(px->pulled && !px->body_kept) &&
        (!px->written || px->idempotent ||
         (px->lc->next_upstream & NEXT_NON_IDEMPOTENT))) {
        fd_log_error(FD_LOG_INFO, err, "upstream \"%s\" server %s: kept-alive "
                     "connection closed: %s", px->up->name, p->name, what);
        /* its siblings in the pool are likely dead too (a restart) */
        fd_upstream_keepalive_close_peer(p);
        fd_proxy_conn_release(px, 0);
        fd_upstream_set_tried(px->tried, p, 0);
        px->tries--;
        if (px->nlog)
            px->nlog--;
        px->written = 0;
        return proxy_connect(px);
    }
    fd_log_error(FD_LOG_ERR, err, "upstream \"%s\" server %s: %s%s",
                 px->up->name, p ? p->name : "-", what,
                 stale ? " (a kept-alive connection)" : "");
    if (p && !stale)
        fd_upstream_peer_failed(p);
    if (px->nlog && px->log[px->nlog - 1].status == 0)
        px->log[px->nlog - 1].status = ft == NEXT_TIMEOUT ? 504 : 502;
    fd_proxy_conn_release(px, 0);
    px->ipos = px->ilast = px->hscan = 0;
    px->timed_out = ft == NEXT_TIMEOUT;
    if ((px->lc->next_upstream & ft) && retry_allowed(px))
        return proxy_connect(px);
    return fd_proxy_fail(px, ft == NEXT_TIMEOUT ? 504 : 502);
}

/*
 * Pick a server and get a connection to it: from the pool (then the
 * request is written at once), or a new one. Servers that refuse at once
 * are failed over here.
 */
static int proxy_connect(proxy_req_t *px)
{
    fd_upstream_peer_t *p = fd_upstream_pick(px->up, px->tried, px->hash);
    proxy_loc_conf_t *lc = px->lc;
    fd_upstream_conn_t *uc;
    int rc;

    if (p == NULL) {
        if (px->tries == 0) /* else the last failure was logged */
            fd_log_error(FD_LOG_ERR, 0, "upstream \"%s\": no live servers",
                         px->up->name);
        return fd_proxy_fail(px, px->timed_out ? 504 : 502);
    }
    fd_upstream_set_tried(px->tried, p, 1);
    px->tries++;
    px->peer = p;
    fd_upstream_peer_acquire(p);
    log_try(px, p);
    px->start = fd_current_msec;
    px->hdr_sent = 0;
    px->req_sent = 0;
    px->rstate = RS_HEADER;
    px->wait_body = 0;
    px->ipos = px->ilast = px->hscan = 0;
    if (px->body_kept) {
        px->opos = 0; /* the whole body is still in obuf: again */
    } else {
        px->opos = px->olen = 0;
        px->body_done = 0;
    }

    uc = fd_upstream_keepalive_get(p, lc->ssl_client,
                                   !px->idempotent || px->upgrade);
    if (uc == NULL) {
        uc = fd_upstream_conn_open(p); /* errno set when NULL */
        if (uc == NULL)
            return proxy_next(px, NEXT_ERROR, errno, "connect() failed");
        uc->key = lc->ssl_client;
        if (lc->ssl_client &&
            fd_ssl_connect(&uc->s, lc->ssl_client, &p->ssl_session) !=
                FD_OK) {
            fd_upstream_conn_close(uc);
            return proxy_next(px, NEXT_ERROR, 0, "SSL_new() failed");
        }
    }
    uc->data = px;
    uc->on_event = conn_event;
    uc->on_timeout = conn_timeout;
    uc->requests++;
    px->uc = uc;
    proxy_arm(px);
    if (uc->connecting)
        return PX_OK;
    rc = proxy_handshake(px);
    if (rc != PX_OK)
        return rc == PX_DONE ? PX_DONE : PX_OK;
    return proxy_send(px);
}

/* The timer for what the request waits on now. */
static void proxy_arm(proxy_req_t *px)
{
    fd_upstream_conn_t *uc = px->uc;
    proxy_loc_conf_t *lc = px->lc;
    fd_msec_t ms;

    if (uc == NULL)
        return;
    if (px->paused) {
        uc->s.deadline = 0; /* the client's send timeout rules */
        return;
    }
    if (uc->connecting || !uc->s.handshaken)
        ms = lc->connect_timeout; /* the TLS handshake too, as nginx */
    else if (px->rstate == RS_BODY || px->req_sent)
        ms = lc->read_timeout;
    else if (px->wait_body)
        ms = fd_worker->cycle->http.body_timeout;
    else
        ms = lc->send_timeout;
    fd_upstream_conn_deadline(uc, ms);
}

/*
 * A new connection's transport handshake (TLS to an https upstream; none
 * for TCP), under connect_timeout. PX_OK: done, the request can go;
 * PX_WAIT: an event goes on with it; PX_DONE: it failed and the request
 * went on to the next server or the error page (px->uc is another).
 */
static int proxy_handshake(proxy_req_t *px)
{
    fd_upstream_conn_t *uc = px->uc;
    char why[200];
    int rc;

    if (uc->s.handshaken)
        return PX_OK;
    if (px->up->proxy_protocol && !uc->pp_sent) {
        /* the client as its PROXY header: the address it reached */
        fd_addr_t src, dst = {0};
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        fd_request_addr(px->r, &src);
        if (getsockname(px->r->c->s.ev.fd, (struct sockaddr *)&ss,
                        &len) == 0) {
            dst.family = (uint8_t)ss.ss_family;
            if (ss.ss_family == AF_INET) {
                struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
                memcpy(dst.addr, &sin->sin_addr, 4);
                dst.port = ntohs(sin->sin_port);
            } else if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
                memcpy(dst.addr, &sin6->sin6_addr, 16);
                dst.port = ntohs(sin6->sin6_port);
            }
        }
        if (fd_upstream_proxy_protocol(uc, &src, &dst) != FD_OK)
            return proxy_next(px, NEXT_ERROR, errno, "send() of the PROXY "
                              "header failed") == PX_DONE ? PX_DONE : PX_WAIT;
    }
    rc = fd_stream_handshake(&uc->s);
    if (rc == FD_OK)
        return PX_OK;
    if (rc == FD_AGAIN)
        return PX_WAIT;
    snprintf(why, sizeof(why), "SSL handshake failed: %s",
             fd_ssl_connect_error(&uc->s));
    return proxy_next(px, NEXT_ERROR, 0, why) == PX_DONE ? PX_DONE : PX_WAIT;
}

/* Refill obuf from the client's body: PX_OK, PX_WAIT (none yet), PX_DONE */
static int body_fill(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    size_t head = px->chunked_body ? 16 : 0;
    ssize_t n;

    if (px->obuf == NULL && (px->obuf = fd_block_get(&bufs)) == NULL)
        return fd_proxy_fail(px, 500);
    if (px->body_kept) {
        /* a small body accumulates, to be sent again on a retry */
        n = fd_http_body_pull(r, px->obuf + px->olen, BUF_SIZE - px->olen);
        if (n > 0) {
            px->pulled = 1;
            px->body_bytes += n;
            px->wait_body = 0;
            px->olen += (size_t)n;
            return PX_OK;
        }
    } else {
        n = fd_http_body_pull(r, px->obuf + head, BUF_SIZE - head - 8);
    }
    if (n > 0) {
        px->pulled = 1;
        px->body_bytes += n;
        px->wait_body = 0;
        if (px->chunked_body) {
            char hex[20];
            int k;
            if (px->body_bytes > (int64_t)r->loc->max_body_size) {
                fd_log_error(FD_LOG_INFO, 0, "client body over "
                             "max_body_size");
                return fd_proxy_fail(px, 413);
            }
            k = snprintf(hex, sizeof(hex), "%zx\r\n", (size_t)n);
            memcpy(px->obuf + head - (size_t)k, hex, (size_t)k);
            px->opos = head - (size_t)k;
            px->olen = head + (size_t)n;
            memcpy(px->obuf + px->olen, "\r\n", 2);
            px->olen += 2;
        } else {
            px->opos = 0;
            px->olen = (size_t)n;
        }
        return PX_OK;
    }
    if (n == 0) {
        px->body_done = 1;
        px->wait_body = 0;
        if (px->chunked_body) {
            memcpy(px->obuf, "0\r\n\r\n", 5);
            px->opos = 0;
            px->olen = 5;
        }
        return PX_OK;
    }
    if (n == FD_AGAIN) {
        px->wait_body = 1;
        return PX_WAIT;
    }
    return fd_proxy_fail(px, 400); /* bad framing of the client's body */
}

static void proxy_sent(fd_sendop_t *op);

/* w bytes of the request left: first the header, then obuf */
static void sent_bytes(proxy_req_t *px, size_t w)
{
    size_t k;

    px->written = 1;
    if (px->hdr_sent < px->hdr_len) {
        k = fd_min(w, px->hdr_len - px->hdr_sent);
        px->hdr_sent += k;
        w -= k;
    }
    px->opos += w;
    if (px->opos == px->olen && !px->body_kept)
        px->opos = px->olen = 0;
}

/*
 * Write the request (header, then body as the client sends it). An
 * attempt's first write goes into the turn's batch when it can
 * (events.batch_sends); proxy_sent() goes on from there.
 */
static int proxy_send(proxy_req_t *px)
{
    if (px->sop.slot)
        return PX_OK; /* the batch has it */
    for (;;) {
        fd_upstream_conn_t *uc = px->uc;
        struct iovec iov[2];
        int niov = 0, rc;
        ssize_t w;

        if (px->opos == px->olen && px->has_body && !px->body_done) {
            rc = body_fill(px);
            if (rc == PX_DONE)
                return PX_DONE;
        }
        if (px->hdr_sent < px->hdr_len) {
            iov[niov].iov_base = px->hdr + px->hdr_sent;
            iov[niov++].iov_len = px->hdr_len - px->hdr_sent;
        }
        if (px->opos < px->olen) {
            iov[niov].iov_base = px->obuf + px->opos;
            iov[niov++].iov_len = px->olen - px->opos;
        }
        if (niov == 0) {
            if (!px->has_body || px->body_done) {
                px->req_sent = 1;
                px->wait_body = 0;
            }
            proxy_arm(px);
            return PX_OK;
        }
        if (px->hdr_sent == 0 && uc->s.tp == &fd_transport_tcp) {
            px->sop.fd = uc->s.ev.fd;
            px->sop.niov = niov;
            px->sop.iov[0] = iov[0];
            px->sop.iov[1] = iov[1];
            px->sop.handler = proxy_sent;
            if (fd_sendq_add(&px->sop) == FD_OK)
                return PX_OK;
        }
        w = fd_stream_send(&uc->s, iov, niov, 0);
        if (w == FD_AGAIN) { /* the transport cleared the flag to wait on */
            proxy_arm(px);
            return PX_OK;
        }
        if (w < 0)
            return proxy_next(px, NEXT_ERROR, errno, "send() failed");
        sent_bytes(px, (size_t)w);
    }
}

/* The batched first write was made: go on as proxy_send() would. */
static void proxy_sent(fd_sendop_t *op)
{
    proxy_req_t *px = (proxy_req_t *)((char *)op -
                                      offsetof(proxy_req_t, sop));
    ssize_t w = op->res;

    fd_log_conn_id = px->r->c->id;
    if (w == -EAGAIN || w == -EWOULDBLOCK) {
        fd_stream_wait_out(&px->uc->s);
        proxy_arm(px);
    } else if (w < 0) {
        proxy_next(px, NEXT_ERROR, (int)-w, "send() failed");
    } else {
        sent_bytes(px, (size_t)w);
        if (proxy_send(px) != PX_DONE && px->uc && px->uc->s.readable &&
            !px->paused)
            proxy_read(px);
    }
    fd_log_conn_id = 0;
}

/* r->on_body: more of the client's body arrived */
static void proxy_on_body(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    if (px == NULL || px->done || px->uc == NULL || px->uc->connecting ||
        !px->uc->s.handshaken || px->req_sent || !px->uc->s.writable)
        return;
    proxy_send(px);
}

/* --- 3. the response ----------------------------------------------------- */

static int proxy_invalid(proxy_req_t *px, const char *why)
{
    fd_upstream_peer_t *p = px->peer;

    fd_log_error(FD_LOG_ERR, 0, "upstream \"%s\" server %s: %s",
                 px->up->name, p ? p->name : "-", why);
    if (p)
        fd_upstream_peer_failed(p);
    if (px->nlog && px->log[px->nlog - 1].status == 0)
        px->log[px->nlog - 1].status = 502;
    px->invalid = 1;
    return fd_proxy_fail(px, 502);
}


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
 * The response header at ibuf + ipos, once complete: check it strictly
 * (fd_http_parse_response), then either fail over (next_upstream
 * http_5xx), or set the client's response and the body framing. PX_OK
 * (body follows), PX_MORE (incomplete), PX_INTERIM (a 1xx was skipped),
 * PX_WAIT (a new attempt or a tunnel began), PX_DONE.
 */
static int resp_header(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    const char *buf = px->ibuf + px->ipos, *err;
    char *h;
    size_t hlen;
    fd_http_header_t f[MAX_RESP_HEADERS];
    fd_http_resp_t rs = {.fields = f, .max_fields = MAX_RESP_HEADERS};
    unsigned nf, ntok, i, ft;
    int status;
    struct {
        int status;
        fd_http_header_out_t *headers_out, **headers_out_last;
        fd_str_t content_type;
        int64_t content_length;
        unsigned server_passed;
    } saved = {0};

    switch (fd_http_parse_response_end(buf, px->ilast - px->ipos, &px->hscan,
                                       &hlen, &err)) {
    case FD_AGAIN:
        return PX_MORE;
    case FD_ERROR:
        return proxy_invalid(px, err);
    }
    /* the fields outlive the buffer, which the body reuses */
    h = fd_pnalloc(r->pool, hlen);
    if (h == NULL)
        return fd_proxy_fail(px, 500);
    memcpy(h, buf, hlen);
    if (fd_http_parse_response(&rs, h, hlen, &err) != FD_OK)
        return proxy_invalid(px, err);
    status = rs.status;
    nf = rs.nfields;
    ntok = rs.ntok;

    if (status >= 100 && status < 200 && status != 101) {
        /* 100 Continue, 102, 103: interim, not forwarded; each was copied
         * into the request's pool, so an upstream gets a handful */
        if (++px->ninterim > MAX_INTERIM)
            return proxy_invalid(px, "sent too many 1xx responses");
        px->ipos += hlen;
        return PX_INTERIM;
    }

    if (px->nlog) {
        px->log[px->nlog - 1].status = status;
        px->log[px->nlog - 1].msec = fd_current_msec - px->start;
    }
    if (px->peer)
        fd_upstream_peer_response(px->peer, fd_current_msec - px->start);

    /* next_upstream http_502/503/504: only while another server remains */
    ft = status == 502 ? NEXT_502 : status == 503 ? NEXT_503
       : status == 504 ? NEXT_504 : 0;
    if (ft && (px->lc->next_upstream & ft) && retry_allowed(px) &&
        fd_upstream_has_candidate(px->up, px->tried)) {
        fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s answered %d, "
                     "trying the next", px->up->name, px->peer->name,
                     status);
        fd_upstream_peer_failed(px->peer);
        fd_proxy_conn_release(px, 0);
        return proxy_connect(px) == PX_DONE ? PX_DONE : PX_WAIT;
    }
    if (ft && (px->lc->next_upstream & ft))
        fd_upstream_peer_failed(px->peer); /* passed on (the last): counted */
    else
        fd_upstream_peer_ok(px->peer);

    if (px->cr) {
        /* a revalidation's 304, or a status proxy_cache_use_stale names:
         * the entry answers */
        int crc = fd_proxy_cache_response(px, status, f, nf);
        if (crc == FD_ERROR) {
            /* the upstream was right: the entry went meanwhile (evicted,
             * replaced). 502, and the server is not blamed for it */
            fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s "
                         "answered 304 to a revalidation of an entry that "
                         "is gone meanwhile", px->up->name, px->peer->name);
            return fd_proxy_fail(px, 502);
        }
        if (crc == FD_OK) {
            px->ipos += hlen;
            return proxy_end(px, FD_OK);
        }
    }

    if (status == 101) {
        if (!px->upgrade)
            return proxy_invalid(px, "sent 101 to a request without "
                                 "Upgrade");
        if (rs.upgrade.data && !fd_str_caseeq_lit(rs.upgrade, "websocket"))
            return proxy_invalid(px, "sent 101 switching to another "
                                 "protocol than websocket");
        px->ipos += hlen;
        r->status = 101;
        for (i = 0; i < nf; i++) {
            fd_str_t n = f[i].name;
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
        return fd_proxy_tunnel_begin(px, fd_string("websocket"));
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
        if (ntok && named_in(n, rs.conn_tok, ntok))
            continue;
        /* X-Accel-*: meant for the proxy (nginx's), not the client */
        if (n.len > 8 && fd_str_caseeq((fd_str_t){8, n.data}, "x-accel-", 8) &&
            !passed(lc, n))
            continue;
        if (fd_http_header_add(r, n, v) != FD_OK)
            return fd_proxy_fail(px, 500);
    }
    px->ipos += hlen;
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
        r->content_length = rs.content_length;
    } else {
        px->framing = FR_CLOSE;
        px->keepalive = 0;
        r->content_length = -1;
    }
    px->rstate = RS_BODY;
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
    if (!px->lc->buffering && !r->c->s.nodelay) {
        int one = 1;
        setsockopt(r->c->s.ev.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        r->c->s.nodelay = 1;
    }
    return PX_OK;
}

/* The client is gone or the response cannot go on. */
static int proxy_abort_response(proxy_req_t *px)
{
    return fd_proxy_fail(px, FD_ERROR);
}


/*
 * Hand the body bytes in ibuf to the engine (which copies them), decoding
 * chunked framing. Ends the request when the body is complete.
 */
static int resp_body(proxy_req_t *px, int eof)
{
    fd_request_t *r = px->r;
    fd_buf_t b[16], *chain = NULL; /* slices of ibuf: the engine copies */
    unsigned nb = 0;
    char *p = px->ibuf + px->ipos, *end = px->ibuf + px->ilast;
    int done = 0, rc;

    switch (px->framing) {
    case FR_NONE:
        done = 1;
        break;
    case FR_LENGTH: {
        size_t n = (size_t)fd_min((int64_t)(end - p), px->rest);
        if (n)
            b[nb++] = (fd_buf_t){.pos = p, .last = p + n, .file_fd = -1};
        p += n;
        px->rest -= (int64_t)n;
        done = px->rest == 0;
        break;
    }
    case FR_CLOSE:
        if (p < end)
            b[nb++] = (fd_buf_t){.pos = p, .last = end, .file_fd = -1};
        p = end;
        done = eof;
        break;
    case FR_CHUNKED:
        while (nb < fd_nelems(b)) {
            const char *pos = p, *data;
            size_t len;
            rc = fd_http_parse_chunked(&px->ck, &pos, end, &data, &len);
            p = (char *)pos;
            if (rc == FD_OK) {
                if (len)
                    b[nb++] = (fd_buf_t){.pos = (char *)data,
                                         .last = (char *)data + len,
                                         .file_fd = -1};
                continue;
            }
            if (rc == FD_DONE) {
                done = 1;
                break;
            }
            if (rc == FD_AGAIN)
                break;
            if (!r->header_sent)
                return proxy_invalid(px, "sent an invalid chunked body");
            fd_log_error(FD_LOG_ERR, 0, "upstream \"%s\" server %s: sent an "
                         "invalid chunked body", px->up->name,
                         px->peer->name);
            return proxy_abort_response(px);
        }
        break;
    }
    for (unsigned k = 0; k + 1 < nb; k++)
        b[k].next = &b[k + 1];
    if (nb)
        chain = &b[0];
    px->ipos = (size_t)(p - px->ibuf);
    if (px->cr && chain)
        fd_proxy_cache_body(px, chain);

    if (done) {
        /* bytes after the response: the upstream does not frame as we
         * read it, never reuse that connection */
        int reuse = px->keepalive && px->req_sent && px->framing != FR_CLOSE &&
                    px->ipos == px->ilast;
        if (px->ipos != px->ilast)
            fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s sent "
                         "data after the response", px->up->name,
                         px->peer->name);
        if (px->cr)
            fd_proxy_cache_end(px, px->ipos == px->ilast);
        fd_proxy_conn_release(px, reuse);
        if (px->bg) /* the update is stored; the response went before */
            return proxy_end(px, FD_OK);
        rc = fd_http_output(r, chain, 1);
        proxy_release(px, 0);
        px->done = 1;
        (void)rc; /* the engine ends the request either way */
        return PX_DONE;
    }
    if (px->bg)
        return PX_OK; /* the body goes to the cache alone */
    if (chain == NULL) {
        if (!r->header_sent && fd_http_send_header(r) != FD_OK)
            return proxy_abort_response(px);
        return PX_OK;
    }
    rc = fd_http_output(r, chain, 0);
    if (rc == FD_ERROR)
        return proxy_abort_response(px);
    if (rc == FD_AGAIN) {
        /* above the engine's high water: read on once it drained */
        px->paused = 1;
        r->on_drain = fd_proxy_drain;
        proxy_arm(px);
        return PX_WAIT;
    }
    return PX_OK;
}

/* Work through what ibuf holds. */
static int resp_process(proxy_req_t *px, int eof)
{
    for (;;) {
        int rc;

        if (px->rstate == RS_HEADER) {
            if (px->ipos == px->ilast)
                return PX_OK;
            rc = resp_header(px);
            if (rc == PX_MORE)
                return PX_OK;
            if (rc == PX_INTERIM)
                continue;
            if (rc != PX_OK)
                return rc;
        }
        rc = resp_body(px, eof);
        if (rc != PX_OK)
            return rc;
        if (px->ipos == px->ilast)
            return PX_OK;
        /* more chunks than one output call takes: go on */
    }
}

/* The upstream closed (or reset) its side. */
static int resp_eof(proxy_req_t *px, int err)
{
    if (px->rstate == RS_HEADER)
        return proxy_next(px, NEXT_ERROR, err,
                          err ? "recv() failed while reading the response "
                                "header"
                              : "closed the connection before the response "
                                "header");
    if (px->framing == FR_CLOSE && !err)
        return resp_process(px, 1);
    fd_log_error(FD_LOG_ERR, err, "upstream \"%s\" server %s: closed the "
                 "connection in the middle of the response body",
                 px->up->name, px->peer->name);
    if (px->peer)
        fd_upstream_peer_failed(px->peer);
    return proxy_abort_response(px);
}

/* Read what the upstream sent, as long as the client keeps up. */
static int proxy_read(proxy_req_t *px)
{
    int pending = 0, rc, err;

    for (;;) {
        fd_upstream_conn_t *uc = px->uc;
        ssize_t n;
        size_t room;

        if (px->paused)
            return PX_WAIT;
        if (px->ibuf == NULL && (px->ibuf = fd_block_get(&bufs)) == NULL)
            return fd_proxy_fail(px, 500);
        if (px->ipos == px->ilast && px->rstate == RS_BODY)
            px->ipos = px->ilast = 0;
        if (px->ilast == BUF_SIZE) {
            if (px->ipos == 0 && px->rstate == RS_HEADER)
                return proxy_invalid(px, "sent a response header over 16k");
            if (px->ipos == 0) { /* full of unprocessed body: hand it on */
                rc = resp_process(px, 0);
                if (rc != PX_OK)
                    return rc;
                pending = 0;
                continue;
            }
            memmove(px->ibuf, px->ibuf + px->ipos, px->ilast - px->ipos);
            px->ilast -= px->ipos;
            px->ipos = 0;
        }
        room = BUF_SIZE - px->ilast;
        n = fd_stream_recv(&uc->s, px->ibuf + px->ilast, room);
        if (n > 0) {
            px->ilast += (size_t)n;
            /* buffering on: gather what is there before handing it on
             * (unless that is the end of a body of known length) */
            if (px->lc->buffering && px->rstate == RS_BODY &&
                px->ilast < BUF_SIZE &&
                !(px->framing == FR_LENGTH &&
                  (int64_t)(px->ilast - px->ipos) >= px->rest)) {
                pending = 1;
                continue;
            }
            pending = 0;
            rc = resp_process(px, 0);
            if (rc != PX_OK)
                return rc;
            continue;
        }
        if (n == 0) {
            uc->s.eof = 1;
            uc->s.readable = 0;
            if (pending && px->framing != FR_CLOSE) {
                rc = resp_process(px, 0);
                if (rc != PX_OK)
                    return rc;
            }
            return resp_eof(px, 0);
        }
        if (n == FD_AGAIN) { /* the transport cleared the flag to wait on */
            if (pending) {
                rc = resp_process(px, 0);
                if (rc != PX_OK)
                    return rc;
            }
            proxy_arm(px);
            return PX_OK;
        }
        /* FD_ERROR; TLS logged its reason, and errno is not it */
        err = uc->s.tls ? EPROTO : errno ? errno : ECONNRESET;
        uc->s.eof = 1;
        uc->s.readable = 0;
        if (pending && px->rstate == RS_BODY) {
            rc = resp_process(px, 0);
            if (rc != PX_OK)
                return rc;
        }
        return resp_eof(px, err);
    }
}

/* r->on_drain: the client took the output; read on. */

void fd_proxy_drain(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    r->on_drain = NULL;
    if (px == NULL || px->done || !px->paused)
        return;
    px->paused = 0;
    if (px->tunnel) {
        fd_proxy_tunnel_detach(px);
        return;
    }
    proxy_arm(px);
    if (px->uc->s.readable || px->uc->s.eof)
        proxy_read(px);
}

/* r->on_abort: the client closed; drop the upstream connection. */
static void proxy_abort(fd_request_t *r)
{
    proxy_req_t *px = r->ctx;

    if (px == NULL || px->done)
        return;
    fd_log_error(FD_LOG_INFO, 0, "client closed the connection while "
                 "proxying to upstream \"%s\"", px->up->name);
    if (px->tunnel) {
        fd_proxy_tunnel_free(px->tunnel);
        px->tunnel = NULL;
    }
    proxy_release(px, 0);
    px->done = 1;
}

/* --- 4. events and timeouts ---------------------------------------------- */

static void proxy_run(proxy_req_t *px)
{
    fd_upstream_conn_t *uc = px->uc;

    if (uc->connecting) {
        int err, rc = fd_upstream_conn_connected(uc, &err);
        if (rc == FD_AGAIN)
            return;
        if (rc == FD_ERROR) {
            proxy_next(px, NEXT_ERROR, err, "connect() failed");
            return;
        }
        proxy_arm(px);
    }
    if (proxy_handshake(px) != PX_OK)
        return;
    if (!px->req_sent && uc->s.writable &&
        (!px->wait_body || px->hdr_sent < px->hdr_len ||
         px->opos < px->olen)) {
        if (proxy_send(px) == PX_DONE)
            return;
        if (px->uc != uc) /* failed over to another server */
            return;
    }
    if (uc->s.readable && !px->paused)
        proxy_read(px);
}

/* uc->on_event: the upstream connection's flags changed */
static void conn_event(fd_upstream_conn_t *uc)
{
    proxy_req_t *px = uc->data;

    fd_log_conn_id = px->r->c->id;
    proxy_run(px);
    fd_log_conn_id = 0;
}

static void proxy_timeout(proxy_req_t *px)
{
    fd_upstream_conn_t *uc = px->uc;

    if (uc->connecting) {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT, "connect() timed out");
    } else if (!uc->s.handshaken) {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT, "SSL handshake timed out");
    } else if (px->rstate == RS_BODY) {
        fd_log_error(FD_LOG_ERR, ETIMEDOUT, "upstream \"%s\" server %s: "
                     "timed out reading the response body", px->up->name,
                     px->peer->name);
        fd_upstream_peer_failed(px->peer);
        proxy_abort_response(px);
    } else if (px->req_sent) {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT,
                   "timed out reading the response header");
    } else if (px->wait_body) {
        fd_log_error(FD_LOG_INFO, 0, "client timed out sending the request "
                     "body");
        fd_proxy_fail(px, 408);
    } else {
        proxy_next(px, NEXT_TIMEOUT, ETIMEDOUT,
                   "timed out sending the request");
    }
}

/* uc->on_timeout: its deadline passed */
static void conn_timeout(fd_upstream_conn_t *uc)
{
    proxy_req_t *px = uc->data;

    fd_log_conn_id = px->r->c->id;
    proxy_timeout(px);
    fd_log_conn_id = 0;
}

/* --- the handler --- */

static int proxy_handler(fd_request_t *r)
{
    proxy_loc_conf_t *lc = fd_loc_conf(r->loc, &fd_proxy_module);
    fd_upstream_t *up = lc->up;
    size_t words = (up->npeers + 63) / 64;
    proxy_req_t *px;
    int m = r->in.method_id;

    px = fd_pcalloc(r->pool, sizeof(*px) + words * sizeof(uint64_t));
    if (px == NULL)
        return 500;
    px->tried = (uint64_t *)(px + 1);
    px->r = r;
    px->lc = lc;
    px->up = up;
    px->idempotent = m == FD_HTTP_GET || m == FD_HTTP_HEAD ||
                     m == FD_HTTP_PUT || m == FD_HTTP_DELETE ||
                     m == FD_HTTP_OPTIONS;
    /* only WebSocket, only where the location allows it: any other token
     * (h2c above all) would open a tunnel past every location rule */
    px->upgrade = lc->websocket && r->in.conn_upgrade &&
                  r->in.version == 11 && m == FD_HTTP_GET &&
                  fd_str_caseeq_lit(r->in.upgrade, "websocket");
    px->has_body = r->in.chunked || r->in.content_length > 0;
    px->chunked_body = r->in.chunked;
    px->body_kept = px->has_body && !px->chunked_body &&
                    r->in.content_length <= BUF_SIZE;
    r->ctx = px;
    if (lc->cache) {
        int rc = fd_proxy_cache_lookup(px);
        if (rc == FD_PROXY_CACHE_BACKGROUND) {
            /* proxy_cache_background_update: the stale entry answers
             * now, the request goes on upstream for the cache alone */
            px->bg = 1;
            fd_http_respond_early(r);
        } else if (rc != FD_DECLINED) {
            return rc;
        }
    }
    return fd_proxy_start(px);
}

int fd_proxy_start(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    fd_upstream_t *up = px->up;

    if (request_build(px) != FD_OK)
        return 500;
    if (up->balance == FD_UPSTREAM_HASH)
        px->hash = fd_upstream_request_hash(r, up);
    r->on_abort = proxy_abort;
    if (px->has_body)
        r->on_body = proxy_on_body;
    px->sync = 1;
    proxy_connect(px);
    px->sync = 0;
    return px->done ? px->rc : FD_AGAIN;
}


/* --- 5. variables ------------------------------------------------------ */

static proxy_req_t *request_px(fd_request_t *r)
{
    if (r == NULL || r->loc == NULL || r->loc->handler != &fd_proxy_module)
        return NULL;
    return r->ctx;
}

enum { TRY_ADDR, TRY_STATUS, TRY_TIME };

/* One value per server tried, ", " between them (nginx's form), in
 * r->pool; op->var->data says which. */
static fd_str_t v_tries(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    proxy_req_t *px = request_px(r);
    uintptr_t what = op->var->data;
    fd_sbuf_t sb;
    unsigned i;

    (void)tmp;
    if (px == NULL || px->nlog == 0 ||
        fd_sbuf_init(&sb, r->pool, px->nlog * 24) != FD_OK)
        return fd_null_string;
    for (i = 0; i < px->nlog; i++) {
        try_log_t *t = &px->log[i];
        if (i)
            fd_sbuf_add_lit(&sb, ", ");
        if (what == TRY_ADDR) {
            fd_sbuf_add(&sb, t->peer->name, strlen(t->peer->name));
        } else if (what == TRY_STATUS) {
            if (t->status)
                fd_sbuf_add_uint(&sb, (uint64_t)t->status);
            else
                fd_sbuf_addc(&sb, '-');
        } else {
            fd_sbuf_add_uint(&sb, t->msec / 1000);
            fd_sbuf_addc(&sb, '.');
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 1000 / 100));
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 100 / 10));
            fd_sbuf_addc(&sb, (char)('0' + t->msec % 10));
        }
    }
    return fd_sbuf_failed(&sb) ? fd_null_string : fd_sbuf_str(&sb);
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
    {"upstream_addr", v_tries, TRY_ADDR, 0},
    {"upstream_status", v_tries, TRY_STATUS, 0},
    {"upstream_response_time", v_tries, TRY_TIME, 0},
    FD_VAR_END};

fd_module_t fd_proxy_module = {
    .name = "proxy",
    .directives = fd_proxy_directives,
    .conf_size = sizeof(proxy_loc_conf_t),
    .init_conf = fd_proxy_init_conf,
    .init_worker = proxy_init_worker,
    .exit_worker = proxy_exit_worker,
    .handler = proxy_handler,
    .flags = FD_MODULE_STREAM_BODY,
    .methods = FD_METHODS_ANY, /* the backend decides, but TRACE/CONNECT */
    .shm_size = FD_PROXY_CACHE_SHM_SIZE,
    .also = &fd_proxy_cache_section,
    .init_cycle = fd_proxy_cache_init_cycle,
    .status = fd_proxy_cache_status,
    .status_shared = fd_proxy_cache_status_shared,
    .retire = fd_proxy_cache_retire,
    .vars = proxy_vars,
};
