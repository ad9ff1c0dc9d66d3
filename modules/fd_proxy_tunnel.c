/*
 * handler = proxy, after the upstream's 101 (WebSocket): a tunnel is a
 * splice (fd_stream.h) of the client's stream, taken out of the engine
 * with its transport (TLS stays TLS), and the upstream's stream, taken out
 * of its connection with its transport too (TLS to an https upstream). The splice moves the bytes until both sides ended,
 * one failed, or websocket_idle_timeout passed with no byte; the proxy
 * only starts it and accounts for it. Memory: two 16k buffers, whatever
 * the traffic.
 *
 * Over HTTP/2 (RFC 8441) the client's side is its request's stream (a
 * side with no socket: fd_http_detach()), the answer a 200 instead of the
 * 101, and the WebSocket handshake to the upstream fastd's own: a key of
 * its making, the 101's Sec-WebSocket-Accept checked against it.
 */
#include <sys/epoll.h>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_proxy.h"

enum { CLIENT, UPSTREAM }; /* the splice's sides */

struct tunnel_s {
    fd_splice_t sp;
    fd_upstream_peer_t *peer;  /* still counted active on its server */
    void *ipref;               /* the client's place in max_conns_per_ip */
    fd_posted_t free_post;
    char mem[2][BUF_SIZE];
};

/* What the tunnel holds goes back; the memory at the end of the turn,
 * when no event of this turn can name a side any more. */
static void tunnel_release(tunnel_t *t)
{
    if (t->peer)
        fd_upstream_peer_release(t->peer);
    fd_ip_release(t->ipref);
    t->free_post.handler = free;
    t->free_post.data = t;
    fd_event_post(&t->free_post);
}

void fd_proxy_tunnel_free(tunnel_t *t)
{
    fd_splice_close(&t->sp);
    tunnel_release(t);
}

static void tunnel_done(fd_splice_t *sp)
{
    tunnel_t *t = sp->data;
    unsigned long long up = sp->side[UPSTREAM].sent,
                       down = sp->side[CLIENT].sent;

    static const char *const side[] = {"the client", "the upstream"};
    static const char *const op[] = {"on", "reading from", "sending to"};

    if (sp->reason == FD_SPLICE_TIMEOUT)
        fd_log_error(FD_LOG_INFO, 0, "tunnel idle for %llums, closed "
                     "(%llu bytes up, %llu down)",
                     (unsigned long long)sp->idle, up, down);
    else if (sp->reason == FD_SPLICE_END)
        fd_log_error(FD_LOG_INFO, 0, "tunnel closed by both sides (%llu "
                     "bytes up, %llu down)", up, down);
    else
        fd_log_error(FD_LOG_INFO, sp->err, "tunnel closed on an error %s "
                     "%s (%llu bytes up, %llu down)", op[sp->err_op],
                     side[sp->err_side], up, down);
    fd_worker_hold(-1);
    tunnel_release(t);
}

/* r->on_drain: the 101 left; the client's socket can go */
static void tunnel_drain(fd_request_t *r)
{
    proxy_req_t *px = fd_proxy_req(r);
    fd_upstream_req_t *eu = px ? fd_proxy_eu(px) : NULL;

    r->on_drain = NULL;
    if (px == NULL || eu->done || !eu->paused || px->tunnel == NULL)
        return;
    eu->paused = 0;
    fd_proxy_tunnel_detach(px);
}

/*
 * The upstream answered 101: take its socket into a tunnel, send the 101
 * to the client, then take the client's stream out of the engine.
 */
int fd_proxy_tunnel_begin(proxy_req_t *px, fd_str_t upgrade)
{
    fd_request_t *r = px->r;
    fd_upstream_req_t *eu = fd_proxy_eu(px);
    fd_upstream_conn_t *uc = eu->uc;
    fd_splice_side_t *us;
    tunnel_t *t;
    size_t left = eu->ilast - eu->ipos;

    t = malloc(sizeof(*t));
    if (t == NULL)
        return fd_proxy_fail(px, 500);
    fd_splice_init(&t->sp, t->mem[CLIENT], t->mem[UPSTREAM], BUF_SIZE);
    t->sp.idle = px->lc->websocket_idle_timeout;
    t->sp.done = tunnel_done;
    t->sp.data = t;
    t->sp.log_id = r->c->id;
    t->peer = NULL;
    t->ipref = NULL;
    /* what the upstream sent after the 101 goes to the client first */
    if (left > BUF_SIZE)
        left = BUF_SIZE;
    memcpy(t->sp.side[CLIENT].buf, eu->ibuf + eu->ipos, left);
    t->sp.side[CLIENT].len = left;
    /* the upstream stream moves into the tunnel with its transport; its
     * events are the tunnel's from now, while the 101 is written */
    us = &t->sp.side[UPSTREAM];
    fd_stream_move(&us->s, &uc->s);
    us->s.registered = 1;
    if (fd_splice_watch(&t->sp, UPSTREAM) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        fd_proxy_tunnel_free(t);
        return fd_proxy_fail(px, 500);
    }
    /* the request keeps counting as active on the server until the end */
    t->peer = eu->peer;
    eu->peer = NULL;
    fd_upstream_req_release_conn(eu, 0);
    /* what ibuf held past the 101 is in the tunnel */
    fd_upstream_req_release_bufs(eu);
    px->tunnel = t;

    if (r->in.ext_connect) {
        r->status = 200; /* the stream is the tunnel: RFC 8441 5 */
    } else {
        fd_http_header_add(r, fd_string("Upgrade"), upgrade);
        fd_http_header_add(r, fd_string("Connection"), fd_string("upgrade"));
    }
    r->content_length = -1;
    if (fd_http_send_header(r) != FD_OK) {
        px->tunnel = NULL;
        fd_proxy_tunnel_free(t);
        return fd_proxy_fail(px, FD_ERROR);
    }
    return fd_proxy_tunnel_detach(px) == PX_DONE ? PX_DONE : PX_WAIT;
}

int fd_proxy_tunnel_detach(proxy_req_t *px)
{
    tunnel_t *t = px->tunnel;
    fd_splice_side_t *us = &t->sp.side[UPSTREAM];
    int rc;

    rc = fd_http_detach(px->r, &t->sp.side[CLIENT].s, us->buf, BUF_SIZE,
                        &us->len, &t->ipref);
    if (rc == FD_AGAIN) {
        fd_proxy_eu(px)->paused = 1;
        px->r->on_drain = tunnel_drain;
        return PX_WAIT;
    }
    if (rc != FD_OK) {
        px->tunnel = NULL;
        fd_proxy_tunnel_free(t);
        return fd_proxy_fail(px, FD_ERROR);
    }
    /* r and px are gone now */
    fd_worker_hold(1); /* a graceful stop waits for the tunnel */
    fd_stream_splice(&t->sp);
    return PX_DONE;
}

/* --- WebSocket over HTTP/2: fastd's handshake with the upstream --- */

int fd_proxy_tunnel_key(proxy_req_t *px)
{
    unsigned char raw[16], b64[25];

    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return FD_ERROR;
    EVP_EncodeBlock(b64, raw, sizeof(raw)); /* 24 characters and a NUL */
    memcpy(px->ws_key, b64, sizeof(px->ws_key));
    return FD_OK;
}

int fd_proxy_tunnel_own_field(fd_str_t name)
{
    return fd_str_caseeq_lit(name, "sec-websocket-key") ||
           fd_str_caseeq_lit(name, "sec-websocket-version");
}

int fd_proxy_tunnel_accepted(proxy_req_t *px, const fd_http_header_t *f,
                             unsigned nf)
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char in[sizeof(px->ws_key) + sizeof(guid) - 1];
    unsigned char md[SHA_DIGEST_LENGTH], want[29];
    unsigned i, seen = 0;
    int ok = 0;

    /* RFC 6455 4.2.2: base64(SHA-1(key . GUID)), one field */
    memcpy(in, px->ws_key, sizeof(px->ws_key));
    memcpy(in + sizeof(px->ws_key), guid, sizeof(guid) - 1);
    SHA1(in, sizeof(in), md);
    EVP_EncodeBlock(want, md, sizeof(md)); /* 28 characters and a NUL */
    for (i = 0; i < nf; i++) {
        if (!fd_str_caseeq_lit(f[i].name, "sec-websocket-accept"))
            continue;
        seen++;
        ok = f[i].value.len == 28 && memcmp(f[i].value.data, want, 28) == 0;
    }
    return seen == 1 && ok;
}
