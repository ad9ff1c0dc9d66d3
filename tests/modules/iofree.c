/*
 * A test module for fd_api_io_free (tests/modules_io_free.t): ?do=arm
 * makes two pipes, watches each read end and writes a byte into both, so
 * that the loop's next wait reports the two in one batch; whichever
 * handler runs first frees both watches (a pool closing a connection and
 * its sibling). The other's event, in the same batch, must then be
 * dropped, never run on freed memory. ?do=count answers "ARMED FIRED":
 * equal when each arm ran one handler.
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
    for (i = 0; i < 2; i++) {
        pipe_io_t *p = &pipes[i];
        if (pipe(p->fd) != 0)
            return 500;
        p->io = fd_api_io_new(on_read, p);
        if (p->io == NULL ||
            fd_api_io_watch(p->io, p->fd[0], FD_API_IO_IN) != FD_OK)
            return 500;
    }
    for (i = 0; i < 2; i++)
        if (write(pipes[i].fd[1], "x", 1) != 1)
            return 500;
    armed++;
    return 200;
}

static int handler(fd_request_t *r)
{
    fd_str_t what = fd_req_arg(r, "do");
    char out[64];
    int n, status;

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
    pipe_free(&pipes[0]);
    pipe_free(&pipes[1]);
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "iofree",
    .handler = handler,
    .exit_worker = exit_worker,
};
