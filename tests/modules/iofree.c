/*
 * A test module for fd_api_io_free (tests/modules_io_free.t): ?do=arm
 * makes two pipes, watches each read end and writes a byte into both, so
 * that the loop's next wait reports the two in one batch; whichever
 * handler runs first frees both watches (a pool closing a connection and
 * its sibling). The other's event, in the same batch, must then be
 * dropped, never run on freed memory. ?do=count answers "ARMED FIRED":
 * equal when each arm ran one handler.
 *
 * ?do=nest makes three pipes and a fourth that stays quiet, watches the
 * four and writes a byte into the three: their events come in one batch,
 * and the first handler to run stops the quiet one's watch
 * (fd_api_io_stop). The stop must not run a turn of the loop inside the
 * handler: under io_uring that turn took new completions into the batch
 * the loop was still running, and an event of the three was lost (its
 * watch never fired again). Each handler reads its byte and counts;
 * ?do=hits answers the three counts, "1 1 1" when each ran once.
 */
#include <fastd.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

typedef struct {
    fd_api_io_t *io;
    int fd[2];
} pipe_io_t;

static pipe_io_t pipes[2];
static unsigned armed, fired;

static pipe_io_t nest[4];     /* three written, the fourth quiet */
static unsigned hits[3], stopped;

static void pipe_free(pipe_io_t *p)
{
    if (p->io == NULL)
        return;
    fd_api_io_stop(p->io);
    fd_api_io_free(p->io);
    p->io = NULL;
    close(p->fd[0]);
    close(p->fd[1]);
}

/* a pipe, its read end watched by handler */
static int pipe_watch(pipe_io_t *p, void (*handler)(void *, unsigned))
{
    if (pipe(p->fd) != 0)
        return 500;
    p->io = fd_api_io_new(handler, p);
    return p->io && fd_api_io_watch(p->io, p->fd[0], FD_API_IO_IN) == FD_OK
               ? 200
               : 500;
}

static void on_read(void *data, unsigned events)
{
    (void)data;
    (void)events;
    fired++;
    pipe_free(&pipes[0]);
    pipe_free(&pipes[1]);
}

static int arm(void)
{
    int i;

    if (pipes[0].io || pipes[1].io)
        return 409; /* the last arm has not fired yet */
    for (i = 0; i < 2; i++)
        if (pipe_watch(&pipes[i], on_read) != 200)
            return 500;
    for (i = 0; i < 2; i++)
        if (write(pipes[i].fd[1], "x", 1) != 1)
            return 500;
    armed++;
    return 200;
}

static void on_nest(void *data, unsigned events)
{
    pipe_io_t *p = data;
    char c;

    (void)events;
    if (read(p->fd[0], &c, 1) == 1)
        hits[p - nest]++;
    if (!stopped) {
        stopped = 1;
        fd_api_io_stop(nest[3].io);
    }
}

static int nest_arm(void)
{
    int i;

    for (i = 0; i < 4; i++)
        pipe_free(&nest[i]);
    stopped = 0;
    hits[0] = hits[1] = hits[2] = 0;
    for (i = 0; i < 4; i++)
        if (pipe_watch(&nest[i], on_nest) != 200)
            return 500;
    for (i = 0; i < 3; i++)
        if (write(nest[i].fd[1], "x", 1) != 1)
            return 500;
    return 200;
}

static int handler(fd_request_t *r)
{
    fd_str_t what = fd_req_arg(r, "do");
    char out[64];
    int n, status;

    if (what.len == 4 && what.data[0] == 'n') {
        if ((status = nest_arm()) != 200)
            return status;
        return fd_resp_body(r, "armed", 5) == FD_OK ? FD_OK : 500;
    }
    if (what.len == 4 && what.data[0] == 'h') {
        n = snprintf(out, sizeof(out), "%u %u %u", hits[0], hits[1],
                     hits[2]);
        return fd_resp_body(r, out, (size_t)n) == FD_OK ? FD_OK : 500;
    }
    if (what.len == 3 && what.data[0] == 'a') {
        if ((status = arm()) != 200)
            return status;
        return fd_resp_body(r, "armed", 5) == FD_OK ? FD_OK : 500;
    }
    n = snprintf(out, sizeof(out), "%u %u", armed, fired);
    return fd_resp_body(r, out, (size_t)n) == FD_OK ? FD_OK : 500;
}

static void exit_worker(void)
{
    int i;

    pipe_free(&pipes[0]);
    pipe_free(&pipes[1]);
    for (i = 0; i < 4; i++)
        pipe_free(&nest[i]);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "iofree",
    .handler = handler,
    .exit_worker = exit_worker,
};
