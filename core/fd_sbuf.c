#include "fd_core.h"

int fd_sbuf_init(fd_sbuf_t *sb, fd_pool_t *p, size_t cap)
{
    if (cap == 0)
        cap = 64;
    sb->start = sb->pos = fd_pnalloc(p, cap);
    sb->end = sb->start ? sb->start + cap : NULL;
    sb->pool = p;
    sb->failed = sb->start == NULL;
#if FD_DEBUG
    sb->reserved = sb->start;
#endif
    return sb->failed ? FD_ERROR : FD_OK;
}

void fd_sbuf_overrun(const fd_sbuf_t *sb, const char *last)
{
    fd_log_error(FD_LOG_ALERT, 0,
                 "a writer went %zd bytes past its reservation "
                 "(%zu of %zu used)",
                 last - sb->pos, fd_sbuf_len(sb),
                 (size_t)(sb->end - sb->start));
    abort();
}

int fd_sbuf_grow(fd_sbuf_t *sb, size_t n)
{
    size_t used = fd_sbuf_len(sb), cap = (size_t)(sb->end - sb->start);
    char *m;

    if (sb->failed)
        return FD_ERROR;
    if ((size_t)(sb->end - sb->pos) >= n)
        return FD_OK;
    if (sb->pool == NULL || n > SIZE_MAX / 4 - used)
        goto failed;
    cap = fd_max(cap * 2, used + n);
    m = fd_pnalloc(sb->pool, cap);
    if (m == NULL)
        goto failed;
    if (used)
        memcpy(m, sb->start, used);
    sb->start = m;
    sb->pos = m + used;
    sb->end = m + cap;
    return FD_OK;

failed:
    /* no room left: fd_sbuf_room() sends every later append here */
    sb->failed = 1;
    sb->end = sb->pos;
    return FD_ERROR;
}

void fd_sbuf_vprintf(fd_sbuf_t *sb, const char *fmt, va_list ap)
{
    va_list again;
    int n;

    if (sb->failed)
        return;
    va_copy(again, ap);
    n = vsnprintf(sb->pos, (size_t)(sb->end - sb->pos), fmt, ap);
    if (n < 0) {
        va_end(again);
        sb->failed = 1;
        sb->end = sb->pos;
        return;
    }
    if ((size_t)n >= (size_t)(sb->end - sb->pos)) {
        /* did not fit (vsnprintf wrote a truncated copy): again, in room
         * for all of it and its NUL */
        if (fd_sbuf_grow(sb, (size_t)n + 1) != FD_OK) {
            va_end(again);
            return;
        }
        vsnprintf(sb->pos, (size_t)(sb->end - sb->pos), fmt, again);
    }
    va_end(again);
    sb->pos += n;
}

void fd_sbuf_printf(fd_sbuf_t *sb, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fd_sbuf_vprintf(sb, fmt, ap);
    va_end(ap);
}

/* RFC 3986 pchar and '/': what a path may hold unescaped */
static int path_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || (c && strchr("-._~/!$&'()*+,;=:@", c));
}

void fd_sbuf_add_escaped_path(fd_sbuf_t *sb, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (path_char(c)) {
            fd_sbuf_addc(sb, (char)c);
        } else if (fd_sbuf_room(sb, 3)) {
            sb->pos[0] = '%';
            sb->pos[1] = hex[c >> 4];
            sb->pos[2] = hex[c & 15];
            sb->pos += 3;
        }
    }
}

void fd_sbuf_add_json(fd_sbuf_t *sb, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fd_sbuf_addc(sb, '\\');
            fd_sbuf_addc(sb, (char)c);
        } else if (c < 0x20 || c == 0x7f) {
            char *p = fd_sbuf_reserve(sb, 6);
            if (p == NULL)
                return;
            memcpy(p, "\\u00", 4);
            p[4] = hex[c >> 4];
            p[5] = hex[c & 15];
            fd_sbuf_commit(sb, p + 6);
        } else {
            fd_sbuf_addc(sb, (char)c);
        }
    }
}
