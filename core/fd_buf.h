#ifndef FD_BUF_H
#define FD_BUF_H

#include <sys/types.h>

/*
 * A buffer is either memory [pos, last) inside [start, end), or a file range
 * [file_pos, file_last) of file_fd. Buffers chain through ->next to form a
 * response body.
 */
struct fd_buf_s {
    char *start;
    char *pos;
    char *last;
    char *end;
    int file_fd;     /* -1 when the buffer is memory */
    off_t file_pos;
    off_t file_last;
    fd_buf_t *next;
};

static inline size_t fd_buf_size(const fd_buf_t *b)
{
    return b->file_fd >= 0 ? (size_t)(b->file_last - b->file_pos)
                           : (size_t)(b->last - b->pos);
}

/* A memory buffer in pool p that points at existing bytes (no copy). */
fd_buf_t *fd_buf_wrap(fd_pool_t *p, const void *data, size_t len);
/* A memory buffer in pool p with a fresh copy of the bytes. */
fd_buf_t *fd_buf_copy(fd_pool_t *p, const void *data, size_t len);
/* A file range buffer; the fd is closed by the caller's pool cleanup. */
fd_buf_t *fd_buf_file(fd_pool_t *p, int fd, off_t pos, off_t last);

/*
 * Per-worker cache of fixed-size I/O blocks (read and write buffers), so
 * that a busy connection takes one without malloc and an idle one gives it
 * back. Blocks above `keep` are returned to the allocator.
 */
typedef struct fd_block_cache_s {
    void *free;
    size_t size;
    unsigned nfree;
    unsigned keep;
} fd_block_cache_t;

void *fd_block_get(fd_block_cache_t *bc);
void fd_block_put(fd_block_cache_t *bc, void *block);

#endif
