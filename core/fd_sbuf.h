#ifndef FD_SBUF_H
#define FD_SBUF_H

/*
 * The bounds-checked builder every writer of protocol bytes uses (request
 * and response headers, redirects, log lines, status documents, error
 * pages). Appends never write past the capacity: a builder with a pool
 * grows (in that pool, doubling); a builder over a fixed area fails
 * instead. A failure is sticky: later appends do nothing, and the writer
 * checks fd_sbuf_failed() once, at the end, rather than after each call.
 *
 * No writer computes a size and then writes "what fits": the sum of
 * lengths that used to size buffers by hand is at most a hint for the
 * first capacity, never a bound anything relies on.
 *
 * A writer that formats in place (a date, a number) asks for room first:
 * p = fd_sbuf_reserve(sb, n), writes at most n bytes at p, and gives the
 * end back with fd_sbuf_commit(sb, end); a debug build asserts the end is
 * within what was reserved.
 */

typedef struct fd_sbuf_s {
    char *start;
    char *pos;       /* the next byte is written here */
    char *end;       /* capacity */
    fd_pool_t *pool; /* grows in it; NULL: fixed, fails when full */
#if FD_DEBUG
    char *reserved;  /* end of the last fd_sbuf_reserve() */
#endif
    unsigned failed;
} fd_sbuf_t;

/* A commit past its reservation: a writer's bug; aborts (debug builds). */
void fd_sbuf_overrun(const fd_sbuf_t *sb, const char *last)
    __attribute__((noreturn));

/* A growing builder in pool p, first capacity cap (a hint). */
int fd_sbuf_init(fd_sbuf_t *sb, fd_pool_t *p, size_t cap);
/* Slow path of every append: make room for n more bytes, or fail. */
int fd_sbuf_grow(fd_sbuf_t *sb, size_t n);
/* printf-style append (config-time and cold paths only). */
void fd_sbuf_printf(fd_sbuf_t *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fd_sbuf_vprintf(fd_sbuf_t *sb, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* s[0..n) with every byte outside RFC 3986's unreserved and pchar sets
 * (and '/') written as %XX: a path for a request line or a Location. */
void fd_sbuf_add_escaped_path(fd_sbuf_t *sb, const char *s, size_t n);
/* JSON string contents (no quotes): '"', '\\' and controls escaped. */
void fd_sbuf_add_json(fd_sbuf_t *sb, const char *s, size_t n);

/* A fixed builder over buf[0..cap) (inline: the response header's is set
 * up once per request). */
static inline void fd_sbuf_init_fixed(fd_sbuf_t *sb, char *buf, size_t cap)
{
    sb->start = sb->pos = buf;
    sb->end = buf + cap;
    sb->pool = NULL;
    sb->failed = 0;
#if FD_DEBUG
    sb->reserved = buf;
#endif
}

static inline int fd_sbuf_failed(const fd_sbuf_t *sb)
{
    return sb->failed != 0;
}

static inline size_t fd_sbuf_len(const fd_sbuf_t *sb)
{
    return (size_t)(sb->pos - sb->start);
}

static inline fd_str_t fd_sbuf_str(const fd_sbuf_t *sb)
{
    return (fd_str_t){fd_sbuf_len(sb), sb->start};
}

/* Bytes that fit without growing (0 once failed): lets a writer size one
 * reservation for a run, e.g. an escaper taking as many input bytes as
 * surely fit at their worst-case width. */
static inline size_t fd_sbuf_avail(const fd_sbuf_t *sb)
{
    return (size_t)(sb->end - sb->pos);
}

/* A failure also sets end = pos, so the fast path need not test failed:
 * the next append that adds a byte reaches fd_sbuf_grow(), which fails. */
static inline int fd_sbuf_room(fd_sbuf_t *sb, size_t n)
{
    if (fd_likely((size_t)(sb->end - sb->pos) >= n))
        return 1;
    return fd_sbuf_grow(sb, n) == FD_OK;
}

static inline void fd_sbuf_add(fd_sbuf_t *sb, const void *data, size_t n)
{
    if (fd_sbuf_room(sb, n)) {
        if (n)
            memcpy(sb->pos, data, n);
        sb->pos += n;
    }
}

#define fd_sbuf_add_lit(sb, lit) fd_sbuf_add(sb, lit, sizeof(lit) - 1)
#define fd_sbuf_add_str(sb, s)                                                 \
    do {                                                                       \
        fd_str_t s_ = (s);                                                     \
        fd_sbuf_add(sb, s_.data, s_.len);                                      \
    } while (0)

static inline void fd_sbuf_addc(fd_sbuf_t *sb, char c)
{
    if (fd_sbuf_room(sb, 1))
        *sb->pos++ = c;
}

static inline void fd_sbuf_add_crlf(fd_sbuf_t *sb)
{
    fd_sbuf_add(sb, "\r\n", 2);
}

/* Room for n bytes at the returned pointer (NULL once failed). */
static inline char *fd_sbuf_reserve(fd_sbuf_t *sb, size_t n)
{
    if (!fd_sbuf_room(sb, n))
        return NULL;
#if FD_DEBUG
    sb->reserved = sb->pos + n;
#endif
    return sb->pos;
}

/* The end of what was written into the last reservation. */
static inline void fd_sbuf_commit(fd_sbuf_t *sb, char *last)
{
#if FD_DEBUG
    if (last < sb->pos || last > sb->reserved || last > sb->end)
        fd_sbuf_overrun(sb, last);
#endif
    sb->pos = last;
}

static inline void fd_sbuf_add_uint(fd_sbuf_t *sb, uint64_t v)
{
    char *p = fd_sbuf_reserve(sb, 20);

    if (p)
        fd_sbuf_commit(sb, fd_fmt_uint(p, v));
}

static inline void fd_sbuf_add_hex(fd_sbuf_t *sb, uint64_t v)
{
    char *p = fd_sbuf_reserve(sb, 16);

    if (p)
        fd_sbuf_commit(sb, fd_fmt_hex(p, v));
}

/* "Name: value\r\n" */
static inline void fd_sbuf_add_header(fd_sbuf_t *sb, fd_str_t name,
                                      fd_str_t value)
{
    if (fd_sbuf_room(sb, name.len + value.len + 4)) {
        fd_sbuf_add(sb, name.data, name.len);
        fd_sbuf_add(sb, ": ", 2);
        fd_sbuf_add(sb, value.data, value.len);
        fd_sbuf_add_crlf(sb);
    }
}

#endif
