/*
 * handler = proxy, after the upstream's 101 (WebSocket): a tunnel moves
 * bytes both ways between the client's socket, taken out of the engine,
 * and the upstream's, taken out of its connection, until both sides
 * ended, one failed, or websocket_idle_timeout passed with no byte.
 * Memory: two 16k buffers, whatever the traffic.
 */
#include <sys/epoll.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_cycle.h"
#include "fd_http.h"
#include "fd_proxy.h"

typedef struct tside_s {
    fd_event_t ev;             /* first: epoll's data.ptr */
    tunnel_t *t;
    char *buf;                 /* read from the other side, to write here */
    size_t pos, len;
    unsigned readable:1;
    unsigned writable:1;
    unsigned eof:1;            /* this side sent its FIN */
    unsigned shut:1;           /* we shut this side's write half */
} tside_t;

struct tunnel_s {
    tside_t side[2];           /* 0: the client, 1: the upstream */
    fd_timer_t timer;
    fd_msec_t deadline;
    fd_msec_t idle;
    fd_upstream_peer_t *peer;
    uint64_t conn_id;
    void *ipref;               /* the client's place in max_conns_per_ip */
    fd_posted_t free_post;
    unsigned started:1;
    unsigned closed:1;
    char mem[2][BUF_SIZE];
};

static void tunnel_event(fd_event_t *ev, uint32_t events);
static void tunnel_timer(fd_timer_t *t);
static void tunnel_run(tunnel_t *t);

static void tunnel_release(void *data)
{
    free(data);
}

/* Close both sides; the memory goes at the end of the turn (events). */
void fd_proxy_tunnel_free(tunnel_t *t)
{
    unsigned i;

    if (t->closed)
        return;
    t->closed = 1;
    fd_timer_del(&t->timer);
    for (i = 0; i < 2; i++) {
        if (t->side[i].ev.fd >= 0)
            close(t->side[i].ev.fd);
        t->side[i].ev.fd = -1;
    }
    if (t->peer)
        fd_upstream_peer_release(t->peer);
    if (t->started)
        fd_worker_hold(-1);
    fd_ip_release(t->ipref);
    t->ipref = NULL;
    t->free_post.handler = tunnel_release;
    t->free_post.data = t;
    fd_event_post(&t->free_post);
}

/*
 * The upstream answered 101: take its socket into a tunnel, send the 101
 * to the client, then take the client's socket out of the engine.
 */
int fd_proxy_tunnel_begin(proxy_req_t *px, fd_str_t upgrade)
{
    fd_request_t *r = px->r;
    fd_upstream_conn_t *uc = px->uc;
    tunnel_t *t;
    size_t left = px->ilast - px->ipos;
    unsigned i;

    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return fd_proxy_fail(px, 500);
    for (i = 0; i < 2; i++) {
        t->side[i].ev.fd = -1;
        t->side[i].ev.handler = tunnel_event;
        t->side[i].t = t;
        t->side[i].buf = t->mem[i];
    }
    t->timer.handler = tunnel_timer;
    t->idle = px->lc->websocket_idle_timeout;
    t->conn_id = r->c->id;
    /* what the upstream sent after the 101 goes to the client first */
    if (left > BUF_SIZE)
        left = BUF_SIZE;
    memcpy(t->side[0].buf, px->ibuf + px->ipos, left);
    t->side[0].len = left;
    /* the upstream socket moves into the tunnel */
    t->side[1].ev.fd = uc->ev.fd;
    t->side[1].writable = uc->writable;
    t->side[1].readable = 1;
    uc->ev.fd = -1;
    if (fd_event_mod(&t->side[1].ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP |
                                         EPOLLET) < 0) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        t->peer = NULL;
        fd_proxy_tunnel_free(t);
        return fd_proxy_fail(px, 500);
    }
    /* the request keeps counting as active on the server until the end */
    t->peer = px->peer;
    px->peer = NULL;
    fd_proxy_conn_release(px, 0);
    /* what ibuf held past the 101 is in the tunnel */
    fd_proxy_bufs_release(px);
    px->tunnel = t;

    fd_http_header_add(r, fd_string("Upgrade"), upgrade);
    fd_http_header_add(r, fd_string("Connection"), fd_string("upgrade"));
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
    fd_request_t *r = px->r;
    tunnel_t *t = px->tunnel;
    size_t n = 0;
    int fd;

    fd = fd_http_detach(r, t->side[1].buf, BUF_SIZE, &n, &t->ipref);
    if (fd == FD_AGAIN) {
        px->paused = 1;
        r->on_drain = fd_proxy_drain;
        return PX_WAIT;
    }
    if (fd < 0) {
        px->tunnel = NULL;
        fd_proxy_tunnel_free(t);
        return fd_proxy_fail(px, FD_ERROR);
    }
    /* r and px are gone now */
    t->side[1].len = n;
    t->side[0].ev.fd = fd;
    t->side[0].readable = 1;
    t->side[0].writable = 1;
    if (fd_event_add(&t->side[0].ev, EPOLLIN | EPOLLOUT | EPOLLRDHUP |
                                         EPOLLET) < 0) {
        fd_log_error(FD_LOG_ERR, errno, "epoll_ctl() failed");
        fd_proxy_tunnel_free(t);
        return PX_DONE;
    }
    t->started = 1;
    fd_worker_hold(1); /* a graceful stop waits for the tunnel */
    t->deadline = fd_current_msec + t->idle;
    fd_timer_add(&t->timer, t->idle);
    tunnel_run(t);
    return PX_DONE;
}

/* Move bytes from one side to the other: 1 moved some, 0 none, -1 error */
static int tunnel_pump(tside_t *from, tside_t *to)
{
    int moved = 0;

    for (;;) {
        if (to->pos < to->len) {
            ssize_t w;
            if (!to->writable)
                return moved;
            w = send(to->ev.fd, to->buf + to->pos, to->len - to->pos,
                     MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    to->writable = 0;
                    return moved;
                }
                return -1;
            }
            to->pos += (size_t)w;
            moved = 1;
            if (to->pos == to->len)
                to->pos = to->len = 0;
            continue;
        }
        if (from->eof) {
            if (!to->shut) {
                shutdown(to->ev.fd, SHUT_WR);
                to->shut = 1;
            }
            return moved;
        }
        if (!from->readable)
            return moved;
        {
            ssize_t n = recv(from->ev.fd, to->buf, BUF_SIZE, 0);
            if (n > 0) {
                to->len = (size_t)n;
                to->pos = 0;
                moved = 1;
                continue;
            }
            if (n == 0) {
                from->eof = 1;
                from->readable = 0;
                continue;
            }
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                from->readable = 0;
                return moved;
            }
            return -1;
        }
    }
}

static void tunnel_run(tunnel_t *t)
{
    int a, b;

    if (!t->started || t->closed)
        return;
    fd_log_conn_id = t->conn_id;
    a = tunnel_pump(&t->side[0], &t->side[1]);
    b = tunnel_pump(&t->side[1], &t->side[0]);
    if (a < 0 || b < 0) {
        fd_log_error(FD_LOG_INFO, errno, "tunnel closed on an error");
        fd_proxy_tunnel_free(t);
    } else if (t->side[0].eof && t->side[1].eof && t->side[0].shut &&
               t->side[1].shut) {
        fd_proxy_tunnel_free(t); /* both directions ended */
    } else if (a || b) {
        t->deadline = fd_current_msec + t->idle;
    }
    fd_log_conn_id = 0;
}

static void tunnel_event(fd_event_t *ev, uint32_t events)
{
    tside_t *s = (tside_t *)ev;

    if (s->ev.fd < 0)
        return;
    if (events & EPOLLERR) {
        fd_proxy_tunnel_free(s->t);
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
        s->readable = 1;
    if (events & (EPOLLOUT | EPOLLHUP))
        s->writable = 1;
    tunnel_run(s->t);
}

static void tunnel_timer(fd_timer_t *tm)
{
    tunnel_t *t = (tunnel_t *)((char *)tm - offsetof(tunnel_t, timer));

    if (t->closed)
        return;
    if (t->deadline > fd_current_msec) {
        fd_timer_add(&t->timer, t->deadline - fd_current_msec);
        return;
    }
    fd_log_conn_id = t->conn_id;
    fd_log_error(FD_LOG_INFO, 0, "tunnel idle for %llums, closed",
                 (unsigned long long)t->idle);
    fd_log_conn_id = 0;
    fd_proxy_tunnel_free(t);
}
