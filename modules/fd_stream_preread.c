/*
 * The ClientHello's server_name and ALPN list (RFC 8446 4.1.2, RFC 6066
 * 3, RFC 7301 3.1), read without TLS: records of type handshake (22) are
 * joined until the handshake message is whole, then walked with bounds
 * checked at every step. See fd_stream_preread.h.
 */
#include <string.h>

#include "fastd.h"
#include "fd_stream_preread.h"

/* A cursor over [p, end): every read checks what is left. */
typedef struct {
    const uint8_t *p, *end;
} cur_t;

static int take(cur_t *c, size_t n, const uint8_t **out)
{
    if ((size_t)(c->end - c->p) < n)
        return 0;
    if (out)
        *out = c->p;
    c->p += n;
    return 1;
}

static int u8(cur_t *c, unsigned *v)
{
    const uint8_t *b;

    if (!take(c, 1, &b))
        return 0;
    *v = b[0];
    return 1;
}

static int u16(cur_t *c, unsigned *v)
{
    const uint8_t *b;

    if (!take(c, 2, &b))
        return 0;
    *v = (unsigned)b[0] << 8 | b[1];
    return 1;
}

/* A vector with a length prefix of n bytes (1 or 2): its body as a cursor */
static int vec(cur_t *c, int n, cur_t *body)
{
    unsigned len;
    const uint8_t *b;

    if (!(n == 1 ? u8(c, &len) : u16(c, &len)) || !take(c, len, &b))
        return 0;
    body->p = b;
    body->end = b + len;
    return 1;
}

static int sni(cur_t e, fd_preread_t *p)
{
    cur_t list, name;
    unsigned type;
    size_t i, n;

    if (!vec(&e, 2, &list))
        return 0;
    while (list.p < list.end) {
        if (!u8(&list, &type) || !vec(&list, 2, &name))
            return 0;
        n = (size_t)(name.end - name.p);
        if (type != 0) /* host_name is the only type */
            continue;
        if (n == 0 || n >= sizeof(p->sni))
            return 0;
        for (i = 0; i < n; i++) {
            unsigned char ch = name.p[i];
            /* a DNS name: letters, digits, '-', '.', '_' */
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
                  ch == '_'))
                return 0;
            p->sni[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        }
        p->sni[n] = '\0';
        return 1;
    }
    return 1;
}

static int alpn(cur_t e, fd_preread_t *p)
{
    cur_t list, proto;
    size_t at = 0, i, n;

    if (!vec(&e, 2, &list))
        return 0;
    while (list.p < list.end) {
        if (!vec(&list, 1, &proto))
            return 0;
        n = (size_t)(proto.end - proto.p);
        if (at + n + 2 > sizeof(p->alpn))
            break; /* the first ones are kept */
        if (at)
            p->alpn[at++] = ',';
        for (i = 0; i < n; i++) {
            unsigned char ch = proto.p[i];
            p->alpn[at++] = ch > ' ' && ch < 0x7f && ch != ',' ? (char)ch
                                                                : '?';
        }
    }
    p->alpn[at] = '\0';
    return 1;
}

/* The ClientHello's body (after the 4-byte handshake header). */
static int hello(cur_t c, fd_preread_t *p)
{
    cur_t skip, exts, e;
    unsigned type;

    if (!take(&c, 2 + 32, NULL) || !vec(&c, 1, &skip) ||
        !vec(&c, 2, &skip) || !vec(&c, 1, &skip))
        return 0;
    if (c.p == c.end)
        return 1; /* no extensions: no name */
    if (!vec(&c, 2, &exts))
        return 0;
    while (exts.p < exts.end) {
        if (!u16(&exts, &type) || !vec(&exts, 2, &e))
            return 0;
        if ((type == 0 && !sni(e, p)) || (type == 16 && !alpn(e, p)))
            return 0;
    }
    return 1;
}

int fd_preread_parse(const uint8_t *buf, size_t len, fd_preread_t *p)
{
    uint8_t msg[16384 + 4];
    size_t got = 0, need = 0, at = 0;

    p->sni[0] = p->alpn[0] = '\0';
    /* the records' payloads, joined until the handshake message is whole */
    for (;;) {
        size_t rlen, n;
        if (len - at < 5) {
            /* the first byte already tells TLS from anything else */
            if (len > at && buf[at] != 22)
                return FD_DECLINED;
            return FD_AGAIN;
        }
        if (buf[at] != 22 || buf[at + 1] != 3)
            return FD_DECLINED;
        rlen = (size_t)buf[at + 3] << 8 | buf[at + 4];
        if (rlen == 0 || rlen > 16384)
            return FD_DECLINED;
        at += 5;
        n = rlen < len - at ? rlen : len - at;
        if (got + n > sizeof(msg))
            return FD_DECLINED;
        memcpy(msg + got, buf + at, n);
        got += n;
        at += n;
        if (need == 0 && got >= 4) {
            if (msg[0] != 1) /* not a ClientHello */
                return FD_DECLINED;
            need = 4 + ((size_t)msg[1] << 16 | (size_t)msg[2] << 8 | msg[3]);
            if (need > sizeof(msg))
                return FD_DECLINED;
        }
        if (need && got >= need)
            break;
        if (n < rlen)
            return FD_AGAIN; /* this record goes on past len */
    }
    cur_t c = {msg + 4, msg + need};
    if (!hello(c, p)) {
        p->sni[0] = p->alpn[0] = '\0';
        return FD_DECLINED;
    }
    return FD_OK;
}
