/*
 * The upstream engine's tunnels (fastd_upstream.h's
 * fd_api_upstream_tunnel(); the proxy's WebSocket): after a server's 101
 * the request becomes a splice (fd_stream.h) of the client's stream,
 * taken out of the HTTP engine with its transport (TLS stays TLS;
 * HTTP/2's extended CONNECT, RFC 8441: the request's stream), and the
 * server's, taken out of its connection with its transport too (TLS to
 * an https upstream). The splice moves the bytes until both sides ended,
 * one failed, or the idle time passed with no byte; the module only asks
 * for it. Memory: two 16k buffers, whatever the traffic.
 */
#include <stdlib.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_upstream_proto.h"

enum { CLIENT, UPSTREAM }; /* the splice's sides */

typedef struct {
    fd_splice_t sp;
    fd_upstream_peer_t *peer;  /* still counted active on its server */
    void *ipref;               /* the client's place in max_conns_per_ip */
    fd_posted_t free_post;
    char mem[2][FD_UPSTREAM_BUF];
} tunnel_t;

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

void fd_upstream_tunnel_free(void *tunnel)
{
    tunnel_t *t = tunnel;

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

static int tunnel_detach(fd_upstream_req_t *u);

/* r->on_drain: the 101 left; the client's socket can go */
static void tunnel_drain(fd_request_t *r)
{
    fd_upstream_req_t *u = r->ctx;

    r->on_drain = NULL;
    if (u == NULL || u->done || !u->paused || u->tunnel == NULL)
        return;
    u->paused = 0;
    tunnel_detach(u);
}

/*
 * The server answered 101 (the module set the response in r): take its
 * socket into a tunnel, send the response to the client, then take the
 * client's stream out of the HTTP engine.
 */
int fd_upstream_req_tunnel(fd_upstream_req_t *u, fd_msec_t idle)
{
    fd_request_t *r = u->r;
    fd_upstream_conn_t *uc = u->uc;
    fd_splice_side_t *us;
    tunnel_t *t;
    size_t left = u->ilast - u->ipos;

    if (uc == NULL) /* HTTP/2's streams are not spliced */
        return fd_upstream_req_fail(u, 502);
    t = malloc(sizeof(*t));
    if (t == NULL)
        return fd_upstream_req_fail(u, 500);
    fd_splice_init(&t->sp, t->mem[CLIENT], t->mem[UPSTREAM],
                   FD_UPSTREAM_BUF);
    t->sp.idle = idle ? idle : 3600000; /* the splice's is > 0 */
    t->sp.done = tunnel_done;
    t->sp.data = t;
    t->sp.log_id = r->c->id;
    t->peer = NULL;
    t->ipref = NULL;
    /* what the upstream sent after the 101 goes to the client first */
    if (left > FD_UPSTREAM_BUF)
        left = FD_UPSTREAM_BUF;
    memcpy(t->sp.side[CLIENT].buf, u->ibuf + u->ipos, left);
    t->sp.side[CLIENT].len = left;
    /* the upstream stream moves into the tunnel with its transport; its
     * events are the tunnel's from now, while the 101 is written */
    us = &t->sp.side[UPSTREAM];
    fd_stream_move(&us->s, &uc->s);
    us->s.registered = 1;
    if (fd_splice_watch(&t->sp, UPSTREAM) != FD_OK) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        fd_upstream_tunnel_free(t);
        return fd_upstream_req_fail(u, 500);
    }
    /* the request keeps counting as active on the server until the end */
    t->peer = u->peer;
    u->peer = NULL;
    fd_upstream_req_release_conn(u, 0);
    /* what ibuf held past the 101 is in the tunnel */
    fd_upstream_req_release_bufs(u);
    u->tunnel = t;

    r->content_length = -1;
    if (fd_http_send_header(r) != FD_OK) {
        u->tunnel = NULL;
        fd_upstream_tunnel_free(t);
        return fd_upstream_req_fail(u, FD_ERROR);
    }
    return tunnel_detach(u) == FD_DONE ? FD_DONE : FD_AGAIN;
}

static int tunnel_detach(fd_upstream_req_t *u)
{
    tunnel_t *t = u->tunnel;
    fd_splice_side_t *us = &t->sp.side[UPSTREAM];
    int rc;

    rc = fd_http_detach(u->r, &t->sp.side[CLIENT].s, us->buf,
                        FD_UPSTREAM_BUF, &us->len, &t->ipref);
    if (rc == FD_AGAIN) {
        u->paused = 1;
        u->r->on_drain = tunnel_drain;
        return FD_AGAIN;
    }
    if (rc != FD_OK) {
        u->tunnel = NULL;
        fd_upstream_tunnel_free(t);
        return fd_upstream_req_fail(u, FD_ERROR);
    }
    /* r and u are gone now */
    fd_worker_hold(1); /* a graceful stop waits for the tunnel */
    fd_stream_splice(&t->sp);
    return FD_DONE;
}
