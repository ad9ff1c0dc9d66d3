/*
 * FastCGI records: the request's encoding (BEGIN_REQUEST, PARAMS with
 * name-value pairs) and the strict, resumable parser of the application's
 * records (STDOUT, STDERR, END_REQUEST for request 1). See fd_fastcgi.h.
 */
#include "fd_fastcgi.h"

#define min(a, b) ((a) < (b) ? (a) : (b))

void fd_fcgi_begin(char *dst, int keep_conn)
{
    fd_fcgi_header(dst, FD_FCGI_BEGIN_REQUEST, 8);
    dst[8] = 0;
    dst[9] = FD_FCGI_RESPONDER;
    dst[10] = keep_conn ? FD_FCGI_KEEP_CONN : 0;
    memset(dst + 11, 0, 5);
}

size_t fd_fcgi_len(char *dst, size_t n)
{
    if (n < 128) {
        dst[0] = (char)n;
        return 1;
    }
    dst[0] = (char)(0x80 | ((n >> 24) & 0x7f));
    dst[1] = (char)(n >> 16);
    dst[2] = (char)(n >> 8);
    dst[3] = (char)n;
    return 4;
}

size_t fd_fcgi_params_size(size_t len)
{
    size_t records = (len + FD_FCGI_MAX_CONTENT - 1) / FD_FCGI_MAX_CONTENT;

    return len + (records + 1) * FD_FCGI_HEADER_LEN;
}

char *fd_fcgi_params(char *dst, const char *pairs, size_t len)
{
    /* a pair may straddle two records: the application reassembles the
     * stream of PARAMS content, as the specification says */
    while (len) {
        size_t n = len < FD_FCGI_MAX_CONTENT ? len : FD_FCGI_MAX_CONTENT;
        fd_fcgi_header(dst, FD_FCGI_PARAMS, n);
        memcpy(dst + FD_FCGI_HEADER_LEN, pairs, n);
        dst += FD_FCGI_HEADER_LEN + n;
        pairs += n;
        len -= n;
    }
    fd_fcgi_header(dst, FD_FCGI_PARAMS, 0);
    return dst + FD_FCGI_HEADER_LEN;
}

enum { S_HEADER, S_CONTENT, S_END_BODY, S_PAD };

/* the 8-byte header in p->h is read: check it and pick the next state */
static int header_done(fd_fcgi_parser_t *p, const char **why)
{
    const unsigned char *h = p->h;

    if (h[0] != FD_FCGI_VERSION) {
        *why = "sent a FastCGI record of an unknown version";
        return FD_ERROR;
    }
    if (((unsigned)h[2] << 8 | h[3]) != 1) {
        *why = "sent a FastCGI record for another request";
        return FD_ERROR;
    }
    if (p->ended) {
        *why = "sent a FastCGI record after END_REQUEST";
        return FD_ERROR;
    }
    p->type = h[1];
    p->need = (size_t)h[4] << 8 | h[5];
    p->pad = h[6];
    p->hlen = 0;
    switch (p->type) {
    case FD_FCGI_STDOUT:
    case FD_FCGI_STDERR:
        p->state = S_CONTENT;
        return FD_OK;
    case FD_FCGI_END_REQUEST:
        if (p->need != 8) {
            *why = "sent an END_REQUEST record of a wrong length";
            return FD_ERROR;
        }
        p->state = S_END_BODY;
        return FD_OK;
    }
    *why = "sent a FastCGI record of an unexpected type";
    return FD_ERROR;
}

int fd_fcgi_parse(fd_fcgi_parser_t *p, const char **pos, const char *end,
                  fd_fcgi_piece_t *out, const char **why)
{
    const char *s = *pos;
    size_t n;

    for (;;) {
        switch (p->state) {
        case S_HEADER:
            if (s == end) {
                *pos = s;
                return FD_AGAIN;
            }
            if (p->ended) {
                *pos = s;
                *why = "sent data after END_REQUEST";
                return FD_ERROR;
            }
            n = min((size_t)(end - s), (size_t)(8 - p->hlen));
            memcpy(p->h + p->hlen, s, n);
            p->hlen += (unsigned)n;
            s += n;
            if (p->hlen < 8)
                break;
            if (header_done(p, why) != FD_OK) {
                *pos = s;
                return FD_ERROR;
            }
            break;
        case S_CONTENT:
            if (p->need == 0) {
                p->state = S_PAD;
                break;
            }
            if (s == end) {
                *pos = s;
                return FD_AGAIN;
            }
            n = min((size_t)(end - s), p->need);
            out->type = p->type;
            out->data = s;
            out->len = n;
            p->need -= n;
            *pos = s + n;
            return FD_OK;
        case S_END_BODY:
            n = min((size_t)(end - s), (size_t)(8 - p->hlen));
            memcpy(p->h + p->hlen, s, n);
            p->hlen += (unsigned)n;
            s += n;
            if (p->hlen < 8) {
                *pos = s;
                return FD_AGAIN;
            }
            /* given once its padding is read too: what follows it (the
             * caller checks for nothing) is the next record's */
            p->need = 0;
            p->ended = 1;
            p->state = S_PAD;
            break;
        case S_PAD:
            n = min((size_t)(end - s), p->pad);
            p->pad -= n;
            s += n;
            if (p->pad) {
                *pos = s;
                return FD_AGAIN;
            }
            p->state = S_HEADER;
            p->hlen = 0;
            if (p->ended && p->type == FD_FCGI_END_REQUEST) {
                p->type = 0; /* given once */
                out->type = FD_FCGI_END_REQUEST;
                out->data = NULL;
                out->len = 0;
                out->app_status = (uint32_t)p->h[0] << 24 |
                                  (uint32_t)p->h[1] << 16 |
                                  (uint32_t)p->h[2] << 8 | p->h[3];
                out->protocol_status = p->h[4];
                *pos = s;
                return FD_OK;
            }
            break;
        }
    }
}
