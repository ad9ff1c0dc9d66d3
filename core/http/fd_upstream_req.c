/*
 * The upstream engine: the life of one request to an upstream group,
 * whatever protocol carries it (fd_upstream_proto.h is the interface).
 *
 * nginx's ngx_http_upstream is the model, with a narrower seam: where
 * nginx asks a module to create_request, reinit_request, process_header,
 * input_filter_init, input_filter, finalize_request and abort_request,
 * here the module builds its request bytes once before the first try
 * (every try sends them again: there is nothing to reinit), frames body
 * bytes the engine pulled (frame_body), and parses whatever the engine
 * read (process): the header and the body are one parser's states in
 * every protocol we speak (HTTP/1.1's framing, FastCGI's records, h2's
 * frames), so one callback sees both and calls back the engine's verbs
 * (fd_upstream_req_header, _output, _last, _invalid, _fail). Retries,
 * timeouts, health and back-pressure never reach the module, so a new
 * protocol (HTTP/2, gRPC) is a framer and a parser.
 *
 * The file reads in the order a request goes through it:
 *   1. start and end: init, release, fail, end;
 *   2. a try: pick a server, a connection (pool or new), the PROXY
 *      header and TLS handshake, the timer; a failed try counts against
 *      its server and goes to the next (next_upstream) or the error page;
 *   3. the request: the module's header, then the body pulled from the
 *      client only while the upstream takes it (back-pressure), framed;
 *   4. the response: read into ibuf as long as the client keeps up,
 *      handed to the module; its output paused at the engine's high water
 *      (r->on_drain resumes it);
 *   5. events and timeouts.
 *
 * Everything runs on the worker's loop thread. Memory per request: the
 * module's request bytes in r->pool and at most two 16k blocks (response,
 * request body), whatever the size of the bodies.
 */
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_ssl.h"
#include "fd_upstream_proto.h"

static fd_block_cache_t bufs = {.size = FD_UPSTREAM_BUF, .keep = 64};

static int req_connect(fd_upstream_req_t *u);
static int req_send(fd_upstream_req_t *u);
static int req_read(fd_upstream_req_t *u);
static void req_arm(fd_upstream_req_t *u);
static void conn_event(fd_upstream_conn_t *uc);
static void conn_timeout(fd_upstream_conn_t *uc);
static void req_on_body(fd_request_t *r);
static void req_drain(fd_request_t *r);
static void req_abort(fd_request_t *r);

/* --- 1. start and end ---------------------------------------------------- */

int fd_upstream_req_init(fd_upstream_req_t *u, fd_request_t *r,
                         fd_upstream_t *up, const fd_upstream_opts_t *o,
                         const fd_upstream_proto_t *proto, uint64_t *tried)
{
    int m = r->in.method_id;

    u->r = r;
    r->upstream = u;
    u->up = up;
    u->o = o;
    u->proto = proto;
    u->tried = tried;
    u->key = o->ssl;
    u->idempotent = m == FD_HTTP_GET || m == FD_HTTP_HEAD ||
                    m == FD_HTTP_PUT || m == FD_HTTP_DELETE ||
                    m == FD_HTTP_OPTIONS;
    u->careful = !u->idempotent;
    u->has_body = r->in.chunked || r->in.content_length > 0;
    return FD_OK;
}

int fd_upstream_req_start(fd_upstream_req_t *u)
{
    fd_request_t *r = u->r;

    if (u->up->balance == FD_UPSTREAM_HASH)
        u->hash = fd_upstream_request_hash(r, u->up);
    r->on_abort = req_abort;
    if (u->has_body)
        r->on_body = req_on_body;
    u->sync = 1;
    req_connect(u);
    u->sync = 0;
    return u->done ? u->rc : FD_AGAIN;
}

void fd_upstream_req_release_conn(fd_upstream_req_t *u, int reuse)
{
    fd_upstream_conn_t *uc = u->uc;

    fd_sendq_cancel(&u->sop);
    if (u->stream)
        u->proto->mux->detach(u); /* clears u->stream */
    if (uc) {
        u->uc = NULL;
        if (reuse)
            fd_upstream_keepalive_put(uc);
        else
            fd_upstream_conn_close(uc);
    }
    if (u->peer) {
        fd_upstream_peer_release(u->peer);
        u->peer = NULL;
    }
}

void fd_upstream_req_release_bufs(fd_upstream_req_t *u)
{
    if (u->ibuf) {
        fd_block_put(&bufs, u->ibuf);
        u->ibuf = NULL;
    }
    if (u->obuf) {
        fd_block_put(&bufs, u->obuf);
        u->obuf = NULL;
    }
}

static void req_release(fd_upstream_req_t *u, int reuse)
{
    fd_request_t *r = u->r;

    fd_upstream_req_release_conn(u, reuse);
    fd_upstream_req_release_bufs(u);
    if (u->tunnel) { /* the 101 did not leave */
        fd_upstream_tunnel_free(u->tunnel);
        u->tunnel = NULL;
    }
    if (u->proto->release)
        u->proto->release(u);
    r->on_abort = NULL;
    r->on_drain = NULL;
    r->on_body = NULL;
}

int fd_upstream_req_end(fd_upstream_req_t *u, int rc)
{
    req_release(u, 0);
    u->done = 1;
    if (u->sync)
        u->rc = rc;
    else
        fd_request_finish(u->r, rc);
    return FD_DONE;
}

int fd_upstream_req_fail(fd_upstream_req_t *u, int status)
{
    if (u->proto->fail && status != FD_ERROR)
        status = u->proto->fail(u, status);
    return fd_upstream_req_end(u, u->r->header_sent ? FD_ERROR : status);
}

int fd_upstream_req_invalid(fd_upstream_req_t *u, const char *why)
{
    fd_upstream_peer_t *p = u->peer;

    fd_log_error(FD_LOG_ERR, 0, "%s \"%s\" server %s: %s", u->proto->what,
                 u->up->name, p ? p->name : "-", why);
    if (p)
        fd_upstream_peer_failed(p);
    if (u->nlog && u->log[u->nlog - 1].status == 0)
        u->log[u->nlog - 1].status = 502;
    u->invalid = 1;
    return fd_upstream_req_fail(u, 502);
}

/* next_upstream = ... as nginx's proxy_next_upstream, into *mask: the
 * words name the bits FD_UPSTREAM_NEXT_* in their order */
int fd_upstream_parse_next(fd_conf_t *cf, const char *value, unsigned *mask)
{
    static const char *const names[] = {"error", "timeout", "http_502",
                                        "http_503", "http_504",
                                        "non_idempotent"};
    char *s = fd_pstrdup(cf->pool, value, strlen(value)), *save, *tok;
    unsigned i, m = 0;

    if (s == NULL)
        return fd_conf_error(cf, "out of memory");
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (strcmp(tok, "off") == 0) {
            m = 0;
            continue;
        }
        for (i = 0; i < fd_nelems(names); i++)
            if (strcmp(tok, names[i]) == 0)
                break;
        if (i == fd_nelems(names))
            return fd_conf_error(cf, "\"next_upstream\": unknown \"%s\" "
                                 "(error timeout http_502 http_503 http_504 "
                                 "non_idempotent off)", tok);
        m |= 1u << i;
    }
    *mask = m;
    return FD_OK;
}

/* --- 2. a try ------------------------------------------------------------ */

static int retry_allowed(fd_upstream_req_t *u)
{
    const fd_upstream_opts_t *o = u->o;

    if ((u->r->header_sent && !u->bg) || (u->pulled && !u->body_kept))
        return 0; /* the body read from the client cannot be sent again */
    if (u->written && !u->idempotent &&
        !(o->next_upstream & FD_UPSTREAM_NEXT_NON_IDEMPOTENT))
        return 0;
    if (o->next_upstream_tries &&
        u->tries >= (unsigned)o->next_upstream_tries)
        return 0;
    return 1;
}

/*
 * This try failed (ft: FD_UPSTREAM_NEXT_ERROR or _TIMEOUT): log it, count
 * it against the server, then the next server or the error response.
 */
static int req_next(fd_upstream_req_t *u, unsigned ft, int err,
                    const char *what)
{
    fd_upstream_peer_t *p = u->peer;
    fd_upstream_conn_t *uc = u->uc;
    /* a kept-alive connection the upstream closed before it saw the
     * request is not the server's failure: retry on a new connection */
    int stale = uc && uc->reused && ft == FD_UPSTREAM_NEXT_ERROR && !u->got;

    if (stale && !(u->pulled && !u->body_kept) &&
        (!u->written || u->idempotent ||
         (u->o->next_upstream & FD_UPSTREAM_NEXT_NON_IDEMPOTENT))) {
        fd_log_error(FD_LOG_INFO, err, "%s \"%s\" server %s: kept-alive "
                     "connection closed: %s", u->proto->what, u->up->name,
                     p->name, what);
        /* its siblings in the pool are likely dead too (a restart) */
        fd_upstream_keepalive_close_peer(p);
        fd_upstream_req_release_conn(u, 0);
        fd_upstream_set_tried(u->tried, p, 0);
        u->tries--;
        if (u->nlog)
            u->nlog--;
        u->written = 0;
        return req_connect(u);
    }
    fd_log_error(FD_LOG_ERR, err, "%s \"%s\" server %s: %s%s",
                 u->proto->what, u->up->name, p ? p->name : "-", what,
                 stale ? " (a kept-alive connection)" : "");
    if (p && !stale)
        fd_upstream_peer_failed(p);
    if (u->nlog && u->log[u->nlog - 1].status == 0)
        u->log[u->nlog - 1].status = ft == FD_UPSTREAM_NEXT_TIMEOUT ? 504
                                                                    : 502;
    fd_upstream_req_release_conn(u, 0);
    u->ipos = u->ilast = u->hscan = 0;
    u->timed_out = ft == FD_UPSTREAM_NEXT_TIMEOUT;
    if ((u->o->next_upstream & ft) && retry_allowed(u))
        return req_connect(u);
    return fd_upstream_req_fail(u, ft == FD_UPSTREAM_NEXT_TIMEOUT ? 504
                                                                  : 502);
}

int fd_upstream_req_next(fd_upstream_req_t *u, unsigned ft, int err,
                         const char *what)
{
    return req_next(u, ft, err, what);
}

int fd_upstream_req_refused(fd_upstream_req_t *u, const char *what)
{
    fd_upstream_peer_t *p = u->peer;

    /* a server that refuses every stream is failing: a bound */
    if (p == NULL || (u->pulled && !u->body_kept) || ++u->refused > 4)
        return req_next(u, FD_UPSTREAM_NEXT_ERROR, 0, what);
    fd_log_error(FD_LOG_INFO, 0, "%s \"%s\" server %s: %s, again",
                 u->proto->what, u->up->name, p->name, what);
    fd_upstream_req_release_conn(u, 0);
    fd_upstream_set_tried(u->tried, p, 0);
    u->tries--;
    if (u->nlog)
        u->nlog--;
    u->written = 0;
    return req_connect(u);
}

/* the PROXY header of a new connection: the client, the address it
 * reached */
static int proxy_header(fd_upstream_req_t *u)
{
    fd_addr_t src, dst = {0};
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    fd_request_addr(u->r, &src);
    if (getsockname(u->r->c->s.ev.fd, (struct sockaddr *)&ss, &len) == 0) {
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
    return fd_upstream_proxy_protocol(u->uc, &src, &dst);
}

/*
 * A new connection's transport handshake (TLS to an https upstream; none
 * for TCP), under connect_timeout. FD_OK: done, the request can go;
 * FD_AGAIN: an event goes on with it; FD_DONE: it failed and the request
 * went on to the next server or the error page.
 */
static int req_handshake(fd_upstream_req_t *u)
{
    fd_upstream_conn_t *uc = u->uc;
    char why[200];
    int rc;

    if (uc->s.handshaken)
        return FD_OK;
    if (u->up->proxy_protocol && !uc->pp_sent && proxy_header(u) != FD_OK)
        return req_next(u, FD_UPSTREAM_NEXT_ERROR, errno, "send() of the "
                        "PROXY header failed") == FD_DONE ? FD_DONE
                                                          : FD_AGAIN;
    rc = fd_stream_handshake(&uc->s);
    if (rc == FD_OK)
        return FD_OK;
    if (rc == FD_AGAIN)
        return FD_AGAIN;
    snprintf(why, sizeof(why), "SSL handshake failed: %s",
             fd_ssl_connect_error(&uc->s));
    return req_next(u, FD_UPSTREAM_NEXT_ERROR, 0, why) == FD_DONE ? FD_DONE
                                                                  : FD_AGAIN;
}

/*
 * Pick a server and get a connection to it: from the pool (then the
 * request is written at once), or a new one. Servers that refuse at once
 * are failed over here.
 */
static int req_connect(fd_upstream_req_t *u)
{
    fd_upstream_peer_t *p = fd_upstream_pick(u->up, u->tried, u->hash);
    fd_upstream_conn_t *uc;
    int rc;

    if (p == NULL) {
        if (u->tries == 0) /* else the last failure was logged */
            fd_log_error(FD_LOG_ERR, 0, "%s \"%s\": no live servers",
                         u->proto->what, u->up->name);
        return fd_upstream_req_fail(u, u->timed_out ? 504 : 502);
    }
    if (u->tries && u->proto->retry)
        u->proto->retry(u);
    fd_upstream_set_tried(u->tried, p, 1);
    u->tries++;
    u->peer = p;
    fd_upstream_peer_acquire(p);
    if (u->nlog < FD_UPSTREAM_LOG_TRIES)
        u->log[u->nlog++] = (fd_upstream_try_t){.peer = p};
    u->start = fd_current_msec;
    u->hdr_sent = 0;
    u->req_sent = 0;
    u->header_done = 0;
    u->got = 0;
    u->wait_body = 0;
    u->ipos = u->ilast = u->hscan = 0;
    u->rest = -1;
    u->close_delimited = 0;
    if (u->body_kept) {
        u->opos = 0; /* the whole body is still in obuf: again */
    } else {
        u->opos = u->olen = 0;
        u->body_done = !u->has_body;
    }

    if (u->proto->mux)
        return u->proto->mux->attach(u);
    uc = fd_upstream_keepalive_get(p, u->key, u->careful);
    if (uc == NULL) {
        uc = fd_upstream_conn_open(p); /* errno set when NULL */
        if (uc == NULL)
            return req_next(u, FD_UPSTREAM_NEXT_ERROR, errno,
                            "connect() failed");
        uc->key = u->key;
        if (u->o->ssl &&
            fd_ssl_connect(&uc->s, u->o->ssl, &p->ssl_session) != FD_OK) {
            fd_upstream_conn_close(uc);
            return req_next(u, FD_UPSTREAM_NEXT_ERROR, 0,
                            "SSL_new() failed");
        }
    }
    uc->data = u;
    uc->on_event = conn_event;
    uc->on_timeout = conn_timeout;
    uc->requests++;
    u->uc = uc;
    req_arm(u);
    if (uc->connecting)
        return FD_OK;
    rc = req_handshake(u);
    if (rc != FD_OK)
        return rc == FD_DONE ? FD_DONE : FD_OK;
    return req_send(u);
}

/* The timer for what the request waits on now. */
static void req_arm(fd_upstream_req_t *u)
{
    fd_upstream_conn_t *uc = u->uc;
    const fd_upstream_opts_t *o = u->o;
    fd_msec_t ms;

    if (uc == NULL)
        return;
    if (u->paused) {
        uc->s.deadline = 0; /* the client's send timeout rules */
        return;
    }
    if (uc->connecting || !uc->s.handshaken)
        ms = o->connect_timeout; /* the TLS handshake too, as nginx */
    else if (u->header_done || u->req_sent)
        ms = o->read_timeout;
    else if (u->wait_body)
        ms = fd_worker->cycle->http.body_timeout;
    else
        ms = o->send_timeout;
    fd_upstream_conn_deadline(uc, ms);
}

/* --- 3. the request ------------------------------------------------------ */

/* Refill obuf from the client's body: FD_OK (maybe none yet: wait_body),
 * FD_DONE */
static int body_fill(fd_upstream_req_t *u)
{
    fd_request_t *r = u->r;
    size_t head = u->proto->body_head;
    ssize_t n;
    int rc;

    if (u->obuf == NULL && (u->obuf = fd_block_get(&bufs)) == NULL)
        return fd_upstream_req_fail(u, 500);
    if (u->body_kept) {
        /* a small body accumulates, to be sent again on a retry */
        n = fd_http_body_pull(r, u->obuf + u->olen,
                              FD_UPSTREAM_BUF - u->olen);
        if (n > 0) {
            u->pulled = 1;
            u->body_bytes += n;
            u->wait_body = 0;
            u->olen += (size_t)n;
            return FD_OK;
        }
    } else {
        n = fd_http_body_pull(r, u->obuf + head,
                              FD_UPSTREAM_BUF - u->proto->body_room);
    }
    if (n > 0) {
        u->pulled = 1;
        u->body_bytes += n;
        u->wait_body = 0;
        rc = u->proto->frame_body(u, (size_t)n);
        return rc == FD_OK ? FD_OK : fd_upstream_req_fail(u, rc);
    }
    if (n == 0) {
        u->wait_body = 0;
        if (u->body_kept) {
            u->body_done = 1;
            return FD_OK;
        }
        rc = u->proto->frame_body(u, 0);
        u->body_done = 1;
        return rc == FD_OK ? FD_OK : fd_upstream_req_fail(u, rc);
    }
    if (n == FD_AGAIN) {
        u->wait_body = 1;
        return FD_OK;
    }
    return fd_upstream_req_fail(u, 400); /* bad framing of the client's */
}

static void req_sent(fd_sendop_t *op);

/* w bytes of the request left: first the header, then obuf */
static void sent_bytes(fd_upstream_req_t *u, size_t w)
{
    size_t k;

    u->written = 1;
    if (u->hdr_sent < u->hdr_len) {
        k = fd_min(w, u->hdr_len - u->hdr_sent);
        u->hdr_sent += k;
        w -= k;
    }
    u->opos += w;
    if (u->opos == u->olen && !u->body_kept)
        u->opos = u->olen = 0;
}

/*
 * Write the request (header, then body as the client sends it). A try's
 * first write goes into the turn's batch when it can (events.batch_sends);
 * req_sent() goes on from there.
 */
static int req_send(fd_upstream_req_t *u)
{
    if (u->sop.slot)
        return FD_OK; /* the batch has it */
    for (;;) {
        fd_upstream_conn_t *uc = u->uc;
        struct iovec iov[2];
        int niov = 0;
        ssize_t w;

        if (u->opos == u->olen && !u->body_done &&
            !(u->body_after_hdr && u->hdr_sent < u->hdr_len) &&
            body_fill(u) == FD_DONE)
            return FD_DONE;
        if (u->hdr_sent < u->hdr_len) {
            iov[niov].iov_base = u->hdr + u->hdr_sent;
            iov[niov++].iov_len = u->hdr_len - u->hdr_sent;
        }
        if (u->opos < u->olen) {
            iov[niov].iov_base = u->obuf + u->opos;
            iov[niov++].iov_len = u->olen - u->opos;
        }
        if (niov == 0) {
            if (u->body_done) {
                u->req_sent = 1;
                u->wait_body = 0;
            }
            req_arm(u);
            return FD_OK;
        }
        if (u->hdr_sent == 0 && uc->s.tp == &fd_transport_tcp) {
            u->sop.fd = uc->s.ev.fd;
            u->sop.niov = niov;
            u->sop.iov[0] = iov[0];
            u->sop.iov[1] = iov[1];
            u->sop.handler = req_sent;
            if (fd_sendq_add(&u->sop) == FD_OK)
                return FD_OK;
        }
        w = fd_stream_send(&uc->s, iov, niov, 0);
        if (w == FD_AGAIN) { /* the transport cleared the flag to wait on */
            req_arm(u);
            return FD_OK;
        }
        if (w < 0)
            return req_next(u, FD_UPSTREAM_NEXT_ERROR, errno,
                            "send() failed");
        sent_bytes(u, (size_t)w);
    }
}

/* The batched first write was made: go on as req_send() would. */
static void req_sent(fd_sendop_t *op)
{
    fd_upstream_req_t *u = (fd_upstream_req_t *)((char *)op -
                                                 offsetof(fd_upstream_req_t,
                                                          sop));
    ssize_t w = op->res;

    fd_log_conn_id = u->r->c->id;
    if (w == -EAGAIN || w == -EWOULDBLOCK) {
        fd_stream_wait_out(&u->uc->s);
        req_arm(u);
    } else if (w < 0) {
        req_next(u, FD_UPSTREAM_NEXT_ERROR, (int)-w, "send() failed");
    } else {
        sent_bytes(u, (size_t)w);
        if (req_send(u) != FD_DONE && u->uc && u->uc->s.readable &&
            !u->paused)
            req_read(u);
    }
    fd_log_conn_id = 0;
}

/* r->on_body: more of the client's body arrived */
static void req_on_body(fd_request_t *r)
{
    fd_upstream_req_t *u = r->ctx;

    if (u && !u->done && u->stream) {
        u->proto->mux->resume(u);
        return;
    }
    if (u == NULL || u->done || u->uc == NULL || u->uc->connecting ||
        !u->uc->s.handshaken || u->req_sent || !u->uc->s.writable)
        return;
    req_send(u);
}

ssize_t fd_upstream_req_body(fd_upstream_req_t *u, char *buf, size_t size,
                             int *status)
{
    fd_request_t *r = u->r;
    ssize_t n;

    *status = 400; /* bad framing of the client's */
    if (u->body_kept) {
        /* a small body accumulates in obuf, to go again on a retry */
        if (u->obuf == NULL && (u->obuf = fd_block_get(&bufs)) == NULL) {
            *status = 500;
            return FD_ERROR;
        }
        if (u->opos == u->olen && !u->body_done) {
            n = fd_http_body_pull(r, u->obuf + u->olen,
                                  FD_UPSTREAM_BUF - u->olen);
            if (n == FD_AGAIN) {
                u->wait_body = 1;
                return FD_AGAIN;
            }
            if (n < 0)
                return FD_ERROR;
            if (n == 0)
                u->body_done = 1;
            u->pulled = 1;
            u->body_bytes += n;
            u->olen += (size_t)n;
        }
        u->wait_body = 0;
        n = (ssize_t)fd_min(size, u->olen - u->opos);
        memcpy(buf, u->obuf + u->opos, (size_t)n);
        u->opos += (size_t)n;
        return n;
    }
    if (u->body_done)
        return 0;
    n = fd_http_body_pull(r, buf, size);
    if (n == FD_AGAIN) {
        u->wait_body = 1;
        return FD_AGAIN;
    }
    u->wait_body = 0;
    if (n < 0)
        return FD_ERROR;
    if (n == 0) {
        u->body_done = 1;
        return 0;
    }
    u->pulled = 1;
    u->body_bytes += n;
    if (r->in.chunked && u->body_bytes > (int64_t)r->loc->max_body_size) {
        fd_log_error(FD_LOG_INFO, 0, "client body over max_body_size");
        *status = 413;
        return FD_ERROR;
    }
    return n;
}

/* --- 4. the response ----------------------------------------------------- */

int fd_upstream_req_header(fd_upstream_req_t *u, int status)
{
    unsigned ft;

    if (u->nlog) {
        u->log[u->nlog - 1].status = status;
        u->log[u->nlog - 1].msec = fd_current_msec - u->start;
    }
    if (u->peer)
        fd_upstream_peer_response(u->peer, fd_current_msec - u->start);

    /* next_upstream http_502/503/504: only while another server remains */
    ft = status == 502 ? FD_UPSTREAM_NEXT_502
       : status == 503 ? FD_UPSTREAM_NEXT_503
       : status == 504 ? FD_UPSTREAM_NEXT_504 : 0;
    if (ft && (u->o->next_upstream & ft) && retry_allowed(u) &&
        fd_upstream_has_candidate(u->up, u->tried)) {
        fd_log_error(FD_LOG_WARN, 0, "%s \"%s\" server %s answered %d, "
                     "trying the next", u->proto->what, u->up->name,
                     u->peer->name, status);
        fd_upstream_peer_failed(u->peer);
        fd_upstream_req_release_conn(u, 0);
        return req_connect(u) == FD_DONE ? FD_DONE : FD_AGAIN;
    }
    if (ft && (u->o->next_upstream & ft))
        fd_upstream_peer_failed(u->peer); /* passed on (the last) */
    else if (u->peer)
        fd_upstream_peer_ok(u->peer);
    return FD_OK;
}

int fd_upstream_req_output(fd_upstream_req_t *u, fd_buf_t *chain)
{
    fd_request_t *r = u->r;
    int rc;

    if (u->bg)
        return FD_OK; /* the body goes to the cache alone */
    if (chain == NULL) {
        if (!r->header_sent && fd_http_send_header(r) != FD_OK)
            return fd_upstream_req_fail(u, FD_ERROR);
        return FD_OK;
    }
    rc = fd_http_output(r, chain, 0);
    if (rc == FD_ERROR)
        return fd_upstream_req_fail(u, FD_ERROR);
    if (rc == FD_AGAIN) {
        /* above the engine's high water: read on once it drained */
        u->paused = 1;
        r->on_drain = req_drain;
        req_arm(u);
        return FD_AGAIN;
    }
    return FD_OK;
}

int fd_upstream_req_last(fd_upstream_req_t *u, fd_buf_t *chain, int reuse)
{
    fd_upstream_req_release_conn(u, reuse && u->req_sent);
    if (u->bg) /* the response went before */
        return fd_upstream_req_end(u, FD_OK);
    (void)fd_http_output(u->r, chain, 1); /* it ends the request anyway */
    req_release(u, 0);
    u->done = 1;
    return FD_DONE;
}

/* The upstream closed (or reset) its side. */
static int resp_eof(fd_upstream_req_t *u, int err)
{
    if (!u->header_done)
        return req_next(u, FD_UPSTREAM_NEXT_ERROR, err,
                        err ? "recv() failed while reading the response "
                              "header"
                            : "closed the connection before the response "
                              "header");
    if (u->close_delimited && !err)
        return u->proto->process(u, 1);
    fd_log_error(FD_LOG_ERR, err, "%s \"%s\" server %s: closed the "
                 "connection in the middle of the response body",
                 u->proto->what, u->up->name, u->peer->name);
    if (u->peer)
        fd_upstream_peer_failed(u->peer);
    /* a module may hold the header back (FastCGI, a short body): 502 */
    return fd_upstream_req_fail(u, u->r->header_sent ? FD_ERROR : 502);
}

/* Read what the upstream sent, as long as the client keeps up. */
static int req_read(fd_upstream_req_t *u)
{
    int pending = 0, rc, err;

    for (;;) {
        fd_upstream_conn_t *uc = u->uc;
        ssize_t n;
        size_t room;

        if (u->paused)
            return FD_AGAIN;
        if (u->ibuf == NULL && (u->ibuf = fd_block_get(&bufs)) == NULL)
            return fd_upstream_req_fail(u, 500);
        if (u->ipos == u->ilast && u->header_done)
            u->ipos = u->ilast = 0;
        if (u->ilast == FD_UPSTREAM_BUF) {
            if (u->ipos == 0 && !u->header_done)
                return fd_upstream_req_invalid(u, "sent a response header "
                                               "over 16k");
            if (u->ipos == 0) { /* full of unprocessed body: hand it on */
                rc = u->proto->process(u, 0);
                if (rc != FD_OK)
                    return rc;
                pending = 0;
                continue;
            }
            memmove(u->ibuf, u->ibuf + u->ipos, u->ilast - u->ipos);
            u->ilast -= u->ipos;
            u->ipos = 0;
        }
        room = FD_UPSTREAM_BUF - u->ilast;
        n = fd_stream_recv(&uc->s, u->ibuf + u->ilast, room);
        if (n > 0) {
            u->ilast += (size_t)n;
            u->got = 1;
            /* buffering on: gather what is there before handing it on
             * (unless that is the end of a body of known length) */
            if (u->o->buffering && u->header_done &&
                u->ilast < FD_UPSTREAM_BUF &&
                !(u->rest >= 0 && (int64_t)(u->ilast - u->ipos) >= u->rest)) {
                pending = 1;
                continue;
            }
            pending = 0;
            rc = u->proto->process(u, 0);
            if (rc != FD_OK)
                return rc;
            continue;
        }
        if (n == 0) {
            uc->s.eof = 1;
            uc->s.readable = 0;
            if (pending && !u->close_delimited) {
                rc = u->proto->process(u, 0);
                if (rc != FD_OK)
                    return rc;
            }
            return resp_eof(u, 0);
        }
        if (n == FD_AGAIN) { /* the transport cleared the flag to wait on */
            if (pending) {
                rc = u->proto->process(u, 0);
                if (rc != FD_OK)
                    return rc;
            }
            req_arm(u);
            return FD_OK;
        }
        /* FD_ERROR; TLS logged its reason, and errno is not it */
        err = uc->s.tls ? EPROTO : errno ? errno : ECONNRESET;
        uc->s.eof = 1;
        uc->s.readable = 0;
        if (pending && u->header_done) {
            rc = u->proto->process(u, 0);
            if (rc != FD_OK)
                return rc;
        }
        return resp_eof(u, err);
    }
}

/* r->on_drain: the client took the output; read on. */
static void req_drain(fd_request_t *r)
{
    fd_upstream_req_t *u = r->ctx;

    r->on_drain = NULL;
    if (u == NULL || u->done || !u->paused)
        return;
    u->paused = 0;
    if (u->stream) {
        u->proto->mux->resume(u);
        return;
    }
    req_arm(u);
    /* what ibuf still holds first: the upstream may have sent it all */
    if (u->header_done && u->ipos < u->ilast &&
        (u->proto->process(u, 0) != FD_OK || u->paused))
        return;
    if (u->uc->s.readable || u->uc->s.eof)
        req_read(u);
}

/* fd_api_upstream_cancel(): a request never started ends with its client */
void fd_upstream_req_cancel(fd_upstream_req_t *u)
{
    if (u->done)
        return;
    req_release(u, 0);
    u->done = 1;
}

/* r->on_abort: the client closed; drop the upstream connection. */
static void req_abort(fd_request_t *r)
{
    fd_upstream_req_t *u = r->ctx;

    if (u == NULL || u->done)
        return;
    fd_log_error(FD_LOG_INFO, 0, "client closed the connection while "
                 "proxying to %s \"%s\"", u->proto->what, u->up->name);
    req_release(u, 0);
    u->done = 1;
}

/* --- 5. events and timeouts ---------------------------------------------- */

static void req_run(fd_upstream_req_t *u)
{
    fd_upstream_conn_t *uc = u->uc;

    if (uc->connecting) {
        int err, rc = fd_upstream_conn_connected(uc, &err);
        if (rc == FD_AGAIN)
            return;
        if (rc == FD_ERROR) {
            req_next(u, FD_UPSTREAM_NEXT_ERROR, err, "connect() failed");
            return;
        }
        req_arm(u);
    }
    if (req_handshake(u) != FD_OK)
        return;
    if (!u->req_sent && uc->s.writable &&
        (!u->wait_body || u->hdr_sent < u->hdr_len || u->opos < u->olen)) {
        if (req_send(u) == FD_DONE || u->uc != uc)
            return; /* over, or failed over to another server */
    }
    if (uc->s.readable && !u->paused)
        req_read(u);
}

/* uc->on_event: the upstream connection's flags changed */
static void conn_event(fd_upstream_conn_t *uc)
{
    fd_upstream_req_t *u = uc->data;

    fd_log_conn_id = u->r->c->id;
    req_run(u);
    fd_log_conn_id = 0;
}

static void req_timeout(fd_upstream_req_t *u)
{
    fd_upstream_conn_t *uc = u->uc;

    if (uc->connecting) {
        req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                 "connect() timed out");
    } else if (!uc->s.handshaken) {
        req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                 "SSL handshake timed out");
    } else if (u->header_done) {
        fd_log_error(FD_LOG_ERR, ETIMEDOUT, "%s \"%s\" server %s: timed "
                     "out reading the response body", u->proto->what,
                     u->up->name, u->peer->name);
        fd_upstream_peer_failed(u->peer);
        fd_upstream_req_fail(u, u->r->header_sent ? FD_ERROR : 504);
    } else if (u->req_sent) {
        req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                 "timed out reading the response header");
    } else if (u->wait_body) {
        fd_log_error(FD_LOG_INFO, 0, "client timed out sending the request "
                     "body");
        fd_upstream_req_fail(u, 408);
    } else {
        req_next(u, FD_UPSTREAM_NEXT_TIMEOUT, ETIMEDOUT,
                 "timed out sending the request");
    }
}

/* uc->on_timeout: its deadline passed */
static void conn_timeout(fd_upstream_conn_t *uc)
{
    fd_upstream_req_t *u = uc->data;

    fd_log_conn_id = u->r->c->id;
    req_timeout(u);
    fd_log_conn_id = 0;
}
