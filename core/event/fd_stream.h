#ifndef FD_STREAM_H
#define FD_STREAM_H

#include <sys/types.h>
#include <sys/uio.h>

#include "fd_core.h"
#include "fd_event.h"
#include "fd_sendq.h"

/*
 * A stream: one socket's event, deadline, readiness flags and transport.
 * Client connections, upstream connections and tunnel sides are streams;
 * what they carry (HTTP/1.1, later HTTP/2, a tunnel) is the protocol on
 * top. A stream moves bytes; it does not know what they mean.
 *
 * The transport is how bytes cross the socket: plain TCP (recv, writev,
 * sendfile) or TLS (OpenSSL over the same socket: fd_ssl.c). Protocols
 * call fd_stream_recv(), fd_stream_send() and fd_stream_sendfile() and
 * never the socket, so TLS, and later an io_uring backend, sit under them
 * with no special case above.
 *
 * Calls return the bytes moved (recv: 0 is the peer's end of stream),
 * FD_AGAIN (the socket would block: the stream's readable or writable flag
 * is cleared and an event will say when to try again), or FD_ERROR (the
 * stream's error flag is set; errno says why when the socket said so).
 *
 * The struct starts with the event, so an fd_event_t * from the loop is
 * an fd_stream_t * and, for a client connection, an fd_connection_t *.
 */
typedef struct fd_stream_s fd_stream_t;

typedef struct fd_transport_s {
    const char *name; /* "tcp", "tls" */
    ssize_t (*recv)(fd_stream_t *s, char *buf, size_t size);
    /* more: further bytes follow at once (MSG_MORE) */
    ssize_t (*send)(fd_stream_t *s, const struct iovec *iov, int niov,
                    int more);
    ssize_t (*sendfile)(fd_stream_t *s, int fd, off_t off, size_t len);
    /* Before the protocol starts (TLS: the handshake): FD_OK when done,
     * FD_AGAIN, FD_ERROR. NULL: nothing to do. */
    int (*handshake)(fd_stream_t *s);
    /* The end of the stream's use: best-effort close_notify, free the
     * transport's state. The socket itself is closed by the owner. */
    void (*close)(fd_stream_t *s);
    /* An idle stream gives back what it can (TLS buffers). */
    void (*idle)(fd_stream_t *s);
    /* Half-close: no more output (TLS: close_notify); reading goes on.
     * The socket's own shutdown(SHUT_WR) follows. NULL: nothing to add. */
    void (*shutdown)(fd_stream_t *s);
    /* The stream struct was copied to s (fd_stream_move): the transport's
     * state that points at the stream follows it. NULL: none does. */
    void (*move)(fd_stream_t *s);
    /* recv() leaves no buffered data behind it when it reads less than
     * asked (plain TCP: the socket is drained). TLS may hold decrypted
     * bytes, so a short read says nothing there; it clears the stream's
     * readable flag itself when it knows the socket is empty. */
    unsigned short_read_drains:1;
    /* Under io_uring, its reads take the bytes the ring received
     * (fd_uring_recv): plain TCP, and TLS through fastd's read BIO. Not
     * kernel TLS or an upstream's SSL_set_fd(): OpenSSL reads the socket
     * itself there, and the ring must not take the bytes first. */
    unsigned ring_rx:1;
} fd_transport_t;

extern const fd_transport_t fd_transport_tcp;

struct fd_stream_s {
    fd_event_t ev;             /* first: the loop's pointer is the stream */
    fd_timer_t timer;
    const fd_transport_t *tp;
    void *tls;                 /* the transport's state (SSL *), or NULL */
    uint32_t deadline;         /* the real timeout (fd_msec32_after), 0:
                                * none; the timer may fire earlier */
    uint8_t eof:1;             /* the peer sent FIN (read 0 or RDHUP) */
    uint8_t readable:1;        /* ET: data may be left in the socket */
    uint8_t writable:1;        /* ET: the socket can take more output */
    uint8_t error:1;
    uint8_t registered:1;      /* added to epoll (lazily, when it waits) */
    uint8_t nodelay:1;         /* TCP_NODELAY set */
    uint8_t lt_out:1;          /* level-triggered: EPOLLOUT registered */
    uint8_t lt_noin:1;         /* level-triggered: EPOLLIN not registered */
    uint8_t lt_hup:1;          /* level-triggered: only EPOLLRDHUP */
    uint8_t et:1;              /* registered edge-triggered whatever
                                * [events] says (TLS: the transport may
                                * need to read to write, and back) */
    uint8_t handshaken:1;      /* the transport's handshake is done */
    uint8_t drained:1;         /* the transport's last socket read was
                                * short: nothing is left in the socket */
    uint8_t last_out:1;        /* what is queued is the last before the
                                * stream closes: the transport may hold
                                * it for its own end (TLS: the response
                                * and close_notify in one segment) */
    uint8_t tp_mark:1;         /* the transport's own (TLS: its wire
                                * buffer grew past what an idle stream
                                * keeps) */
};

static inline ssize_t fd_stream_recv(fd_stream_t *s, char *buf, size_t size)
{
    return s->tp->recv(s, buf, size);
}

static inline ssize_t fd_stream_send(fd_stream_t *s, const struct iovec *iov,
                                     int niov, int more)
{
    return s->tp->send(s, iov, niov, more);
}

static inline ssize_t fd_stream_sendfile(fd_stream_t *s, int fd, off_t off,
                                         size_t len)
{
    return s->tp->sendfile(s, fd, off, len);
}

/* A send would block: not writable until an event says so (epoll's
 * EPOLLET registration does by itself; io_uring is asked: fd_uring.c). */
void fd_stream_wait_out(fd_stream_t *s);
/* A batched send of s completed (op->res): the bytes it took; a short or
 * full send waits for writability, an error marks s. */
size_t fd_stream_batch_sent(fd_stream_t *s, const fd_sendop_t *op);

/* The stream's deadline ms from now. Deadlines move on every read and
 * write: the timer heap is touched only when the new one is earlier than
 * the armed timer, which re-arms itself when it fires early (the owner's
 * timer handler checks s->deadline). */
void fd_stream_set_deadline(fd_stream_t *s, fd_msec_t ms);
/* Run the transport's handshake, if any: FD_OK, FD_AGAIN, FD_ERROR. */
int fd_stream_handshake(fd_stream_t *s);
/* Let the transport go (TLS close_notify and free); the fd stays open. */
void fd_stream_close_transport(fd_stream_t *s);
/* Pending readiness into the flags (from epoll's mask). */
void fd_stream_events(fd_stream_t *s, uint32_t events);
/* No more output: the transport's end (TLS close_notify), then FIN. */
void fd_stream_shutdown(fd_stream_t *s);
/*
 * Hand a stream's socket and transport to another struct (a connection's
 * to a tunnel): to takes from's descriptor, transport state and readiness
 * flags (registered too: the descriptor may still be in epoll under from's
 * pointer, for the new owner to fd_event_mod; io_uring's registration,
 * with what its ring received, follows to); from is left with no
 * descriptor (-1) and plain TCP, so closing it frees nothing of to's.
 * Neither timer moves: to's is left unarmed.
 */
void fd_stream_move(fd_stream_t *to, fd_stream_t *from);

/*
 * A splice: two streams joined, each one's bytes sent on to the other
 * (a tunnel after a 101). Each side has its own transport (a TLS client,
 * a plain upstream); each direction one bounded buffer, and a side is read
 * only while the buffer towards its peer is empty, so a slow reader stops
 * its writer instead of growing memory. One side's end of stream becomes
 * a half-close of the other (fd_stream_shutdown) while the other direction
 * goes on. The splice is over when both directions ended, when a side
 * fails, or when idle passed with no byte moved; then both streams are
 * closed (transports and descriptors) and done() runs, once.
 *
 * fd_splice_init(), then give each side a socket (fd_stream_move() or
 * s.ev.fd and s.tp), optionally bytes already owed to it (side[i].buf,
 * len), then fd_stream_splice(). The struct must stay until the end of
 * the loop turn in which done() ran: an event for a side may still be in
 * that turn's batch (fd_event_post() a free).
 *
 * A side may have no socket (ev.fd -1) but a transport over another
 * protocol's stream: an HTTP/2 stream carrying an extended CONNECT (RFC
 * 8441, fd_http2.c). The loop never sees it; its transport sets the
 * side's readable, writable, eof and error flags and calls
 * fd_splice_kick() when they change, and its close() lets the stream go.
 */
typedef struct fd_splice_s fd_splice_t;

enum { FD_SPLICE_END = 1, FD_SPLICE_ERROR, FD_SPLICE_TIMEOUT };
/* what failed on err_side: its socket (an error event), a read, a write */
enum { FD_SPLICE_OP_SOCKET, FD_SPLICE_OP_RECV, FD_SPLICE_OP_SEND };

typedef struct {
    fd_stream_t s;             /* first: the loop's event is the side */
    fd_splice_t *sp;
    char *buf;                 /* from the other side, to be sent here */
    size_t pos, len;
    uint64_t sent;             /* bytes sent to this side */
    unsigned ended:1;          /* its end of stream was read */
    unsigned shut:1;           /* its write half is shut */
    unsigned watched:1;        /* registered with the splice's handler */
} fd_splice_side_t;

struct fd_splice_s {
    fd_splice_side_t side[2];
    size_t size;               /* of each side's buf */
    fd_msec_t idle;            /* > 0 */
    fd_timer_t timer;
    uint32_t deadline;         /* fd_msec32_after(idle) at the last byte */
    void (*done)(fd_splice_t *sp);
    void *data;                /* the owner's */
    uint64_t log_id;           /* fd_log_conn_id while it runs */
    int reason;                /* FD_SPLICE_*: why it is over */
    int err;                   /* FD_SPLICE_ERROR: the errno, or 0 */
    unsigned char err_side;    /* FD_SPLICE_ERROR: the side that failed */
    unsigned char err_op;      /* FD_SPLICE_ERROR: FD_SPLICE_OP_* */
    unsigned started:1;
    unsigned over:1;
};

/* Empty sides (no descriptor, plain TCP), buf[0] and buf[1] of size bytes
 * each for the bytes owed to side 0 and side 1. */
void fd_splice_init(fd_splice_t *sp, char *buf0, char *buf1, size_t size);
/* Register side i with the loop before the splice starts (its socket is
 * in the splice, the other side is not there yet): its events are
 * remembered until then. FD_OK, or FD_ERROR (errno). */
int fd_splice_watch(fd_splice_t *sp, unsigned i);
/* Start pumping. From here the splice owns both streams and done() runs
 * once when it is over, maybe before this returns (a side had failed). */
void fd_stream_splice(fd_splice_t *sp);
/* Close both sides now (a splice that is not to start, or not to go on);
 * done() does not run. */
void fd_splice_close(fd_splice_t *sp);
/* A side with no socket (s is side[i].s) may move bytes now: the splice
 * runs at once (done() may run: call it where its owner may end it). */
void fd_splice_kick(fd_stream_t *s);

/*
 * The output queue: what a stream still has to send, in order. Bytes
 * copied into its buffer (headers, small bodies), memory that stays put
 * until sent (a module's body), and file ranges (sent with sendfile, or
 * read and encrypted in bounded pieces under TLS). Held only while there
 * is something to send: an idle connection has none.
 */
typedef struct fd_outseg_s fd_outseg_t;
typedef struct fd_outq_s fd_outq_t;
struct fd_outq_s {
    char *buf;                 /* copied bytes */
    size_t cap, head, tail;
    fd_outseg_t *segs, **last, *free;
    size_t bytes;              /* queued, not yet sent */
    /*
     * Batched sends ([events] batch_sends, fd_sendq.h): with ->sent set,
     * a flush over plain TCP queues its first bytes in the loop turn's
     * batch (one io_uring_enter for all of them) and returns FD_AGAIN;
     * ->sent(q) runs when they have left, and the owner goes on as after
     * a writable event.
     */
    void (*sent)(fd_outq_t *q);
    fd_stream_t *stream;       /* of the batched send */
    fd_sendop_t op;
};

void fd_outq_init(fd_outq_t *q);
/* Room for n more copied bytes: write there, then fd_outq_commit(). */
char *fd_outq_reserve(fd_outq_t *q, size_t n);
void fd_outq_commit(fd_outq_t *q, size_t n);
int fd_outq_append(fd_outq_t *q, const void *data, size_t n);
/* Memory that stays valid until sent (copied when small). */
int fd_outq_mem(fd_outq_t *q, const void *data, size_t n);
/* Memory that stays valid until sent, never copied, however small. */
int fd_outq_ref(fd_outq_t *q, const void *data, size_t n);
int fd_outq_file(fd_outq_t *q, int fd, off_t off, size_t n);
/* The first n bytes of from go to the end of to (copied bytes copied,
 * memory referenced as it was, file ranges read into to's buffer: n is
 * a frame's payload, at most 16 KB) and leave from, unsent and
 * uncounted: a stream's queue framed into its connection's (HTTP/2).
 * FD_OK, or FD_ERROR (out of memory, a failed read: to may hold a
 * part). */
int fd_outq_move(fd_outq_t *to, fd_outq_t *from, size_t n);
static inline int fd_outq_empty(const fd_outq_t *q) { return q->segs == NULL; }
static inline int fd_outq_batched(const fd_outq_t *q) { return q->op.slot != 0; }
/* Everything queued is copied bytes: nothing points into the caller's
 * memory (its pool may be reused). */
int fd_outq_copied(const fd_outq_t *q);
/* Send what is queued: FD_OK when empty, FD_AGAIN (the socket is full,
 * or the bytes wait in the turn's batch: fd_outq_batched()), FD_ERROR. */
int fd_outq_flush(fd_outq_t *q, fd_stream_t *s);
/* The same, sending at most max bytes: FD_DONE when it sent them and more
 * is queued (a rate limit: the owner waits for a timer, not the socket). */
int fd_outq_flush_max(fd_outq_t *q, fd_stream_t *s, size_t max);
/* Drop what is queued and give the buffer back; segments are kept. */
void fd_outq_clear(fd_outq_t *q);
/* Free everything (the owner goes away). */
void fd_outq_free(fd_outq_t *q);

#endif
