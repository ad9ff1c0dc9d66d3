/* Unit tests: the CIDR matcher, the header address parser, the
 * X-Forwarded-For walk and the PROXY protocol header (v1, v2), parsed
 * whole, byte by byte and truncated, and written and read back. */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "fd_core.h"
#include "fd_realip.h"
#include "tap.h"

static fd_addr_t A(const char *text)
{
    fd_addr_t a;

    if (fd_addr_parse(text, strlen(text), &a) != FD_OK)
        memset(&a, 0, sizeof(a));
    return a;
}

static const char *T(const fd_addr_t *a)
{
    static char buf[2][INET6_ADDRSTRLEN];
    static int i;

    i ^= 1;
    fd_addr_text(a, buf[i], sizeof(buf[i]));
    return buf[i];
}

/* the walk over one header value, from peer */
static const char *xff(const char *v, const fd_cidr_t *from, unsigned n,
                       int rec, const char *peer)
{
    fd_str_t s = {strlen(v), v};
    fd_addr_t a = A(peer);

    fd_realip_forwarded(&s, 1, from, n, rec, &a);
    return T(&a);
}

static int pp(const char *p, size_t n, fd_addr_t *src)
{
    return fd_proxy_protocol_parse((const uint8_t *)p, n, src);
}

int main(void)
{
    fd_cidr_t c[4];
    fd_addr_t a, b;
    unsigned i;
    static const char *bad_cidr[] = {"", "x", "10.0.0.0/33", "10.1.0.0/8",
                                     "10.0.0.0/", "/8", "10.0.0.0/-1",
                                     "10.0.0.0/8x", "::1/129", "2001:db8::1/32",
                                     "10.0.0.0/1000", " 10.0.0.0/8"};
    static const char *bad_addr[] = {"", " 1.2.3.4", "1.2.3.4 ", "1.2.3",
                                     "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:65536",
                                     "1.2.3.4:80x", "[1.2.3.4]:80",
                                     "[::1]", "[::1]:", "[::1]x80",
                                     "::1:80:", "garbage", "1.2.3.4:-1",
                                     "1.2.3.4:1234567"};

    /* --- CIDR --- */
    ok(fd_cidr_parse("10.0.0.0/8", &c[0]) == FD_OK, "10.0.0.0/8");
    ok(fd_cidr_parse("192.0.2.1", &c[1]) == FD_OK, "a single IPv4 address");
    ok(fd_cidr_parse("2001:db8::/32", &c[2]) == FD_OK, "2001:db8::/32");
    ok(fd_cidr_parse("0.0.0.0/0", &c[3]) == FD_OK, "0.0.0.0/0");
    for (i = 0; i < fd_nelems(bad_cidr); i++) {
        fd_cidr_t x;
        ok(fd_cidr_parse(bad_cidr[i], &x) == FD_ERROR, "bad CIDR \"%s\"",
           bad_cidr[i]);
    }
    a = A("10.200.3.4");
    ok(fd_cidr_match(c, 3, &a), "10.200.3.4 in 10.0.0.0/8");
    a = A("11.0.0.1");
    ok(!fd_cidr_match(c, 3, &a), "11.0.0.1 in none");
    ok(fd_cidr_match(c, 4, &a), "... but in 0.0.0.0/0");
    a = A("192.0.2.1");
    ok(fd_cidr_match(c, 3, &a), "an exact /32");
    a = A("192.0.2.2");
    ok(!fd_cidr_match(c, 3, &a), "its neighbour is not");
    a = A("::ffff:10.1.1.1");
    ok(fd_cidr_match(c, 3, &a), "an IPv4-mapped address matches IPv4 rules");
    a = A("2001:db8:ffff::1");
    ok(fd_cidr_match(c, 3, &a), "2001:db8:ffff::1 in 2001:db8::/32");
    a = A("2001:db9::1");
    ok(!fd_cidr_match(c, 4, &a), "2001:db9::1: IPv4 rules never match it");
    ok(fd_cidr_parse("10.128.0.0/9", &c[0]) == FD_OK, "a /9");
    a = A("10.127.255.255");
    ok(!fd_cidr_match(c, 1, &a), "/9: the bit below the byte is checked");

    /* --- header addresses --- */
    a = A("1.2.3.4:8080");
    is_str(T(&a), "1.2.3.4", "an address with a port");
    is_int(a.port, 8080, "... and its port");
    a = A("[2001:db8::1]:443");
    is_str(T(&a), "2001:db8::1", "[IPv6]:port");
    is_int(a.port, 443, "... its port");
    a = A("2001:db8::1");
    is_str(T(&a), "2001:db8::1", "bare IPv6");
    for (i = 0; i < fd_nelems(bad_addr); i++)
        ok(fd_addr_parse(bad_addr[i], strlen(bad_addr[i]), &b) == FD_ERROR,
           "bad address \"%s\"", bad_addr[i]);
    ok(fd_addr_parse("1.2.3.4\0", 8, &b) == FD_ERROR, "a NUL inside");

    /* --- X-Forwarded-For --- */
    fd_cidr_parse("127.0.0.0/8", &c[0]);
    fd_cidr_parse("10.0.0.0/8", &c[1]);
    is_str(xff("1.2.3.4, 10.0.0.1", c, 2, 0, "127.0.0.1"), "10.0.0.1",
           "recursive off: the last element");
    is_str(xff("1.2.3.4, 10.0.0.1", c, 2, 1, "127.0.0.1"), "1.2.3.4",
           "recursive on: past trusted hops");
    is_str(xff("1.2.3.4, 10.0.0.1", c, 2, 1, "8.8.8.8"), "8.8.8.8",
           "an untrusted peer: nothing changes");
    is_str(xff("1.2.3.4, junk, 10.0.0.1", c, 2, 1, "127.0.0.1"), "10.0.0.1",
           "junk stops the walk at the last good address");
    is_str(xff("junk", c, 2, 1, "127.0.0.1"), "127.0.0.1",
           "junk alone: the peer");
    is_str(xff(" , ,,", c, 2, 1, "127.0.0.1"), "127.0.0.1",
           "only separators: the peer");
    is_str(xff("10.0.0.9,10.0.0.1", c, 2, 1, "127.0.0.1"), "10.0.0.9",
           "all trusted: the leftmost");
    {
        fd_str_t v[2] = {fd_string("1.2.3.4"), fd_string("10.0.0.1")};
        a = A("127.0.0.1");
        ok(fd_realip_forwarded(v, 2, c, 2, 1, &a) == FD_OK &&
               strcmp(T(&a), "1.2.3.4") == 0,
           "two headers are one list, the last header last");
        a = A("127.0.0.1");
        ok(fd_realip_forwarded(v, 0, c, 2, 1, &a) == FD_DECLINED,
           "no header: declined");
    }

    /* --- PROXY v1 --- */
    {
        const char *h = "PROXY TCP4 192.0.2.1 198.51.100.2 51234 443\r\nGET";
        size_t hl = strlen(h) - 3, k;
        is_int(pp(h, strlen(h), &a), (int)hl, "v1 TCP4: its length");
        is_str(T(&a), "192.0.2.1", "... the source");
        is_int(a.port, 51234, "... the source port");
        for (k = 0; k < hl; k++)
            if (pp(h, k, &a) != FD_AGAIN)
                break;
        is_int((int)k, (int)hl, "every prefix is FD_AGAIN");
        h = "PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n";
        is_int(pp(h, strlen(h), &a), (int)strlen(h), "v1 TCP6");
        is_str(T(&a), "2001:db8::1", "... the source");
        h = "PROXY UNKNOWN\r\n";
        is_int(pp(h, strlen(h), &a), 15, "v1 UNKNOWN");
        is_int(a.family, 0, "... keeps the peer");
    }
    {
        static const char *bad[] = {
            "GET / HTTP/1.1\r\n", "PROXY\r\n", "PROXY TCP4\r\n",
            "PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",
            "PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",
            "PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
            "PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n",
            "PROXY TCP4 1.2.3.4 1.2.3.4 1 65536\r\n",
            "PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n",
            "PROXY TCP4 ::1 1.2.3.4 1 2\r\n",
            "PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n",
            "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rX\n",
            "proxy TCP4 1.2.3.4 1.2.3.4 1 2\r\n"};
        for (i = 0; i < fd_nelems(bad); i++)
            ok(pp(bad[i], strlen(bad[i]), &a) == FD_ERROR, "bad v1 \"%.*s\"",
               (int)strcspn(bad[i], "\r\n"), bad[i]);
        char longh[200];
        memset(longh, 'A', sizeof(longh));
        memcpy(longh, "PROXY ", 6);
        ok(pp(longh, sizeof(longh), &a) == FD_ERROR,
           "v1 without CRLF in 107 bytes");
    }

    /* --- PROXY v2, written and read back --- */
    {
        uint8_t buf[128];
        fd_addr_t s = A("[2001:db8::7]:1000"), d = A("[2001:db8::8]:443");
        size_t n = fd_proxy_protocol_write(buf, sizeof(buf), 2, &s, &d), k;
        is_int((int)n, 52, "v2 TCP6 is 52 bytes");
        is_int(fd_proxy_protocol_parse(buf, n, &a), 52, "... and parses");
        is_str(T(&a), "2001:db8::7", "... its source");
        is_int(a.port, 1000, "... its port");
        for (k = 0; k < n; k++)
            if (fd_proxy_protocol_parse(buf, k, &a) != FD_AGAIN)
                break;
        is_int((int)k, 52, "every prefix of it is FD_AGAIN");
        s = A("192.0.2.5:9");
        d = A("192.0.2.6:80");
        n = fd_proxy_protocol_write(buf, sizeof(buf), 2, &s, &d);
        is_int((int)n, 28, "v2 TCP4 is 28 bytes");
        /* a TLV after the addresses */
        buf[15] += 5;
        memcpy(buf + 28, "\x04\x00\x02hi", 5);
        is_int(fd_proxy_protocol_parse(buf, 33, &a), 33, "v2 with a TLV");
        is_str(T(&a), "192.0.2.5", "... the source");
        buf[12] = 0x20;
        is_int(fd_proxy_protocol_parse(buf, 33, &a), 33, "v2 LOCAL");
        is_int(a.family, 0, "... keeps the peer");
        buf[12] = 0x22;
        ok(fd_proxy_protocol_parse(buf, 33, &a) == FD_ERROR,
           "v2 command 2: bad");
        buf[12] = 0x31;
        ok(fd_proxy_protocol_parse(buf, 33, &a) == FD_ERROR,
           "v2 version 3: bad");
        buf[12] = 0x21;
        buf[13] = 0x41;
        ok(fd_proxy_protocol_parse(buf, 33, &a) == FD_ERROR,
           "v2 family 4: bad");
        buf[13] = 0x21; /* IPv6, 17 bytes of payload */
        ok(fd_proxy_protocol_parse(buf, 33, &a) == FD_ERROR,
           "v2 TCP6 with too short a payload: bad");
        buf[14] = 0xff;
        ok(fd_proxy_protocol_parse(buf, 33, &a) == FD_ERROR,
           "v2 longer than FD_PROXY_PROTOCOL_MAX: bad");
        buf[0] = 'X';
        ok(fd_proxy_protocol_parse(buf, 1, &a) == FD_ERROR,
           "neither signature: bad at the first byte");
        /* v1, written and read back */
        s = A("192.0.2.5:9");
        n = fd_proxy_protocol_write(buf, sizeof(buf), 1, &s, &d);
        is_int((int)n, (int)strlen("PROXY TCP4 192.0.2.5 192.0.2.6 9 80\r\n"),
               "v1 written");
        ok(memcmp(buf, "PROXY TCP4 192.0.2.5 192.0.2.6 9 80\r\n", n) == 0,
           "... as it should read");
        is_int(fd_proxy_protocol_parse(buf, n, &a), (int)n, "... and parses");
        memset(&s, 0, sizeof(s));
        n = fd_proxy_protocol_write(buf, sizeof(buf), 1, &s, &d);
        ok(n == 15 && memcmp(buf, "PROXY UNKNOWN\r\n", 15) == 0,
           "no source: v1 UNKNOWN");
        n = fd_proxy_protocol_write(buf, sizeof(buf), 2, &s, &d);
        ok(n == 16 && buf[12] == 0x20, "no source: v2 LOCAL");
    }
    return done_testing();
}
