/*
 * The client behind a load balancer: address matching, the header walk
 * (X-Forwarded-For), the PROXY protocol header (v1 and v2) both ways, and
 * the [server] keys. See fd_realip.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_realip.h"

/* --- addresses --- */

int fd_cidr_parse(const char *text, fd_cidr_t *out)
{
    char buf[INET6_ADDRSTRLEN + 8];
    const char *slash = strchr(text, '/');
    size_t n = slash ? (size_t)(slash - text) : strlen(text), i;
    unsigned max, bits, keep;

    if (n == 0 || n >= INET6_ADDRSTRLEN)
        return FD_ERROR;
    memcpy(buf, text, n);
    buf[n] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
        max = 128;
    } else {
        return FD_ERROR;
    }
    bits = max;
    if (slash) {
        const char *p = slash + 1;
        if (*p == '\0' || strlen(p) > 3)
            return FD_ERROR;
        for (bits = 0; *p; p++) {
            if (*p < '0' || *p > '9')
                return FD_ERROR;
            bits = bits * 10 + (unsigned)(*p - '0');
        }
        if (bits > max)
            return FD_ERROR;
    }
    /* 10.1.2.3/8 is a mistake (which network was meant?), as in acl */
    for (i = 0; i < max / 8; i++) {
        keep = bits > i * 8 ? fd_min(bits - (unsigned)i * 8, 8u) : 0;
        if (out->addr[i] & (uint8_t)~(0xff00 >> keep))
            return FD_ERROR;
    }
    out->bits = (uint8_t)bits;
    return FD_OK;
}

static int prefix_match(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    unsigned full = bits / 8, rest = bits % 8;

    if (memcmp(a, net, full) != 0)
        return 0;
    return rest == 0 ||
           ((a[full] ^ net[full]) & (uint8_t)(0xff00 >> rest)) == 0;
}

int fd_cidr_match(const fd_cidr_t *set, unsigned n, const fd_addr_t *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0,
                                       0, 0, 0, 0, 0xff, 0xff};
    const uint8_t *v4 = NULL;
    unsigned i;

    if (a->family == AF_INET)
        v4 = a->addr;
    else if (a->family == AF_INET6 && memcmp(a->addr, mapped, 12) == 0)
        v4 = a->addr + 12;
    for (i = 0; i < n; i++) {
        if (set[i].family == AF_INET ? v4 && prefix_match(v4, set[i].addr,
                                                          set[i].bits)
                                     : a->family == AF_INET6 &&
                                           prefix_match(a->addr, set[i].addr,
                                                        set[i].bits))
            return 1;
    }
    return 0;
}

/* the address alone, no port: inet_pton() on a NUL-ended copy */
static int addr_only(const char *p, size_t n, fd_addr_t *out)
{
    char buf[INET6_ADDRSTRLEN];

    if (n == 0 || n >= sizeof(buf))
        return FD_ERROR;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (memchr(p, '\0', n) != NULL)
        return FD_ERROR;
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        memset(out->addr + 4, 0, 12);
    } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
    } else {
        return FD_ERROR;
    }
    out->port = 0;
    return FD_OK;
}

int fd_addr_parse(const char *p, size_t n, fd_addr_t *out)
{
    const char *colon, *end = p + n;
    fd_addr_t a;
    unsigned port = 0;

    if (addr_only(p, n, &a) == FD_OK) {
        *out = a;
        return FD_OK;
    }
    if (n > 0 && p[0] == '[') {
        const char *rb = memchr(p, ']', n);
        if (rb == NULL || rb + 1 == end || rb[1] != ':')
            return FD_ERROR;
        if (addr_only(p + 1, (size_t)(rb - p - 1), &a) != FD_OK ||
            a.family != AF_INET6)
            return FD_ERROR;
        colon = rb + 1;
    } else {
        colon = memchr(p, ':', n);
        if (colon == NULL ||
            addr_only(p, (size_t)(colon - p), &a) != FD_OK ||
            a.family != AF_INET)
            return FD_ERROR;
    }
    if (colon + 1 == end || end - colon > 6)
        return FD_ERROR;
    for (colon++; colon < end; colon++) {
        if (*colon < '0' || *colon > '9')
            return FD_ERROR;
        port = port * 10 + (unsigned)(*colon - '0');
    }
    if (port < 1 || port > 65535)
        return FD_ERROR;
    a.port = (uint16_t)port;
    *out = a;
    return FD_OK;
}

size_t fd_addr_text(const fd_addr_t *a, char *buf, size_t size)
{
    if (a->family == AF_INET && size >= 16) {
        /* per proxied request (X-Forwarded-For, X-Real-IP) and log line:
         * inet_ntop() goes through sprintf(), some 1700 instructions */
        char *p = buf;
        unsigned i;
        for (i = 0; i < 4; i++) {
            p = fd_fmt_uint(p, a->addr[i]);
            *p++ = i < 3 ? '.' : '\0';
        }
        return (size_t)(p - 1 - buf);
    }
    if (size == 0)
        return 0;
    if (a->family == 0 ||
        inet_ntop(a->family, a->addr, buf, (socklen_t)size) == NULL) {
        buf[0] = '\0';
        return 0;
    }
    return strlen(buf);
}

/* --- X-Forwarded-For --- */

int fd_realip_forwarded(const fd_str_t *vals, unsigned n,
                        const fd_cidr_t *from, unsigned nfrom, int recursive,
                        fd_addr_t *a)
{
    int found = 0;

    /* right to left: the last header first, each from its end */
    while (n-- > 0) {
        const char *s = vals[n].data, *e = s + vals[n].len, *b;
        for (;;) {
            fd_addr_t next;
            while (e > s && (e[-1] == ' ' || e[-1] == ','))
                e--;
            if (e == s)
                break; /* this header is used up: the one before it */
            if (!fd_cidr_match(from, nfrom, a))
                return found ? FD_OK : FD_DECLINED;
            for (b = e; b > s && b[-1] != ' ' && b[-1] != ','; b--)
                ;
            if (fd_addr_parse(b, (size_t)(e - b), &next) != FD_OK)
                return found ? FD_OK : FD_DECLINED;
            *a = next;
            found = 1;
            if (!recursive)
                return FD_OK;
            e = b;
        }
    }
    return found ? FD_OK : FD_DECLINED;
}

/* --- the PROXY protocol --- */

static const uint8_t v2_sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d,
                                   0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

/* "PROXY TCP4 1.2.3.4 5.6.7.8 1234 80\r\n" (the CRLF included in n) */
static int v1_parse(const char *p, size_t n, fd_addr_t *src)
{
    const char *end = p + n - 2, *f[5];
    size_t len[5];
    unsigned i, port;
    int family;
    fd_addr_t dst;

    p += 6;
    if (end - p >= 7 && memcmp(p, "UNKNOWN", 7) == 0) {
        src->family = 0; /* whatever follows: the peer's address stays */
        return FD_OK;
    }
    if (end - p < 5 || (memcmp(p, "TCP4 ", 5) != 0 &&
                        memcmp(p, "TCP6 ", 5) != 0))
        return FD_ERROR;
    family = p[3] == '4' ? AF_INET : AF_INET6;
    p += 5;
    /* four fields, one space apart, nothing around them */
    for (i = 0; i < 4; i++) {
        const char *sp = i < 3 ? memchr(p, ' ', (size_t)(end - p)) : end;
        if (sp == NULL || sp == p)
            return FD_ERROR;
        f[i] = p;
        len[i] = (size_t)(sp - p);
        p = sp + 1;
    }
    if (addr_only(f[0], len[0], src) != FD_OK || src->family != family ||
        addr_only(f[1], len[1], &dst) != FD_OK || dst.family != family)
        return FD_ERROR;
    for (i = 2; i < 4; i++) {
        size_t k;
        if (len[i] > 5 || (len[i] > 1 && f[i][0] == '0'))
            return FD_ERROR;
        for (k = 0, port = 0; k < len[i]; k++) {
            if (f[i][k] < '0' || f[i][k] > '9')
                return FD_ERROR;
            port = port * 10 + (unsigned)(f[i][k] - '0');
        }
        if (port > 65535)
            return FD_ERROR;
        if (i == 2)
            src->port = (uint16_t)port;
    }
    return FD_OK;
}

int fd_proxy_protocol_parse(const uint8_t *p, size_t n, fd_addr_t *src)
{
    size_t i, len;

    memset(src, 0, sizeof(*src));
    if (n == 0)
        return FD_AGAIN;
    if (p[0] == 'P') {
        static const char v1[] = "PROXY ";
        if (memcmp(p, v1, fd_min(n, sizeof(v1) - 1)) != 0)
            return FD_ERROR;
        for (i = 0; i < n && i < FD_PROXY_PROTOCOL_V1_MAX; i++) {
            if (p[i] == '\n')
                return i > 0 && p[i - 1] == '\r' &&
                               v1_parse((const char *)p, i + 1, src) ==
                                   FD_OK
                           ? (int)(i + 1)
                           : FD_ERROR;
            if ((p[i] < 0x20 || p[i] > 0x7e) && p[i] != '\r')
                return FD_ERROR;
            if (p[i] == '\r' && i + 1 < n && p[i + 1] != '\n')
                return FD_ERROR;
        }
        return n < FD_PROXY_PROTOCOL_V1_MAX ? FD_AGAIN : FD_ERROR;
    }
    if (memcmp(p, v2_sig, fd_min(n, sizeof(v2_sig))) != 0)
        return FD_ERROR;
    if (n >= 13 && (p[12] & 0xf0) != 0x20)
        return FD_ERROR; /* version 2 only */
    if (n >= 13 && (p[12] & 0x0f) > 1)
        return FD_ERROR; /* LOCAL or PROXY */
    if (n < 16)
        return FD_AGAIN;
    len = (size_t)p[14] << 8 | p[15];
    if (16 + len > FD_PROXY_PROTOCOL_MAX)
        return FD_ERROR;
    if (n < 16 + len)
        return FD_AGAIN;
    if ((p[12] & 0x0f) == 0)
        return (int)(16 + len); /* LOCAL: the balancer's own (health) */
    switch (p[13]) {
    case 0x11: /* TCP over IPv4 */
    case 0x12: /* UDP over IPv4 */
        if (len < 12)
            return FD_ERROR;
        src->family = AF_INET;
        memcpy(src->addr, p + 16, 4);
        src->port = (uint16_t)(p[24] << 8 | p[25]);
        break;
    case 0x21:
    case 0x22:
        if (len < 36)
            return FD_ERROR;
        src->family = AF_INET6;
        memcpy(src->addr, p + 16, 16);
        src->port = (uint16_t)(p[48] << 8 | p[49]);
        break;
    case 0x00: /* UNSPEC */
    case 0x31: /* unix stream, dgram: no address of ours to take */
    case 0x32:
        if (p[13] == 0x31 || p[13] == 0x32) {
            if (len < 216)
                return FD_ERROR;
        }
        break;
    default:
        return FD_ERROR;
    }
    /* what follows the addresses is TLVs (PP2_TYPE_*): skipped */
    return (int)(16 + len);
}

size_t fd_proxy_protocol_write(uint8_t *buf, size_t size, int version,
                               const fd_addr_t *src, const fd_addr_t *dst)
{
    int v6 = src->family == AF_INET6;
    size_t alen = v6 ? 16 : 4, n;

    if (src->family == 0 || src->family != dst->family) {
        if (version == 2) {
            if (size < 16)
                return 0;
            memcpy(buf, v2_sig, 12);
            buf[12] = 0x20; /* LOCAL */
            buf[13] = 0;
            buf[14] = buf[15] = 0;
            return 16;
        }
        if (size < 15)
            return 0;
        memcpy(buf, "PROXY UNKNOWN\r\n", 15);
        return 15;
    }
    if (version == 2) {
        n = 16 + 2 * alen + 4;
        if (size < n)
            return 0;
        memcpy(buf, v2_sig, 12);
        buf[12] = 0x21; /* PROXY */
        buf[13] = v6 ? 0x21 : 0x11;
        buf[14] = 0;
        buf[15] = (uint8_t)(n - 16);
        memcpy(buf + 16, src->addr, alen);
        memcpy(buf + 16 + alen, dst->addr, alen);
        buf[16 + 2 * alen] = (uint8_t)(src->port >> 8);
        buf[17 + 2 * alen] = (uint8_t)src->port;
        buf[18 + 2 * alen] = (uint8_t)(dst->port >> 8);
        buf[19 + 2 * alen] = (uint8_t)dst->port;
        return n;
    }
    {
        char t[FD_PROXY_PROTOCOL_V1_MAX + 1], s[INET6_ADDRSTRLEN],
            d[INET6_ADDRSTRLEN];
        int k;
        fd_addr_text(src, s, sizeof(s));
        fd_addr_text(dst, d, sizeof(d));
        k = snprintf(t, sizeof(t), "PROXY TCP%c %s %s %u %u\r\n",
                     v6 ? '6' : '4', s, d, src->port, dst->port);
        if (k < 0 || (size_t)k >= sizeof(t) || (size_t)k > size)
            return 0;
        memcpy(buf, t, (size_t)k);
        return (size_t)k;
    }
}

/* --- the keys --- */

int fd_realip_conf_eq(const fd_realip_conf_t *a, const fd_realip_conf_t *b)
{
    if (a->nfrom != b->nfrom)
        return 0;
    if (a->nfrom == 0) /* no trusted hop: nothing else matters */
        return 1;
    return a->header == b->header && a->recursive == b->recursive &&
           memcmp(a->from, b->from, a->nfrom * sizeof(*a->from)) == 0;
}

int fd_realip_set_from(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                       const char *v)
{
    fd_realip_conf_t *rc = (fd_realip_conf_t *)((char *)conf + d->offset);
    fd_cidr_t cidr, *from;

    if (fd_cidr_parse(v, &cidr) != FD_OK)
        return fd_conf_error(cf, "\"%s\": bad address \"%s\" (expected "
                             "ADDR or ADDR/BITS, IPv4 or IPv6, with no "
                             "bits set below BITS)", d->name, v);
    from = fd_parray_reserve(cf->pool, rc->from, rc->nfrom, &rc->fromcap,
                             sizeof(*from));
    if (from == NULL)
        return fd_conf_error(cf, "out of memory");
    from[rc->nfrom++] = cidr;
    rc->from = from;
    return FD_OK;
}

int fd_realip_set_header(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v)
{
    int *header = (int *)((char *)conf + d->offset);

    if (strcasecmp(v, "X-Real-IP") == 0)
        *header = FD_REALIP_X_REAL_IP;
    else if (strcasecmp(v, "X-Forwarded-For") == 0)
        *header = FD_REALIP_X_FORWARDED_FOR;
    else if (strcmp(v, "proxy_protocol") == 0)
        *header = FD_REALIP_PROXY_PROTOCOL;
    else
        return fd_conf_error(cf, "\"%s\": unknown value \"%s\" (expected "
                             "X-Forwarded-For, X-Real-IP or "
                             "proxy_protocol)", d->name, v);
    return FD_OK;
}
