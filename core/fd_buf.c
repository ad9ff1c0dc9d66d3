#include "fd_core.h"

fd_buf_t *fd_buf_wrap(fd_pool_t *p, const void *data, size_t len)
{
    fd_buf_t *b = fd_palloc(p, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->start = b->pos = (char *)data;
    b->last = b->end = (char *)data + len;
    b->file_fd = -1;
    b->file_pos = b->file_last = 0;
    b->next = NULL;
    return b;
}

fd_buf_t *fd_buf_copy(fd_pool_t *p, const void *data, size_t len)
{
    char *m = fd_pnalloc(p, len ? len : 1);

    if (m == NULL)
        return NULL;
    memcpy(m, data, len);
    return fd_buf_wrap(p, m, len);
}

fd_buf_t *fd_buf_file(fd_pool_t *p, int fd, off_t pos, off_t last)
{
    fd_buf_t *b = fd_palloc(p, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->start = b->pos = b->last = b->end = NULL;
    b->file_fd = fd;
    b->file_pos = pos;
    b->file_last = last;
    b->next = NULL;
    return b;
}

void *fd_block_get(fd_block_cache_t *bc)
{
    void *b = bc->free;

    if (b) {
        bc->free = *(void **)b;
        bc->nfree--;
        return b;
    }
    return malloc(bc->size);
}

void fd_block_put(fd_block_cache_t *bc, void *block)
{
    if (bc->nfree >= bc->keep) {
        free(block);
        return;
    }
    *(void **)block = bc->free;
    bc->free = block;
    bc->nfree++;
}
