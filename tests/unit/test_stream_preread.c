/* Unit tests: ssl_preread's ClientHello reader (modules/fd_stream_preread.c)
 * on real ClientHellos made by OpenSSL's client (memory BIOs): whole,
 * every prefix (more is needed), the handshake split over many records,
 * without SNI or ALPN, not TLS at all, and every byte of one flipped and
 * every length field truncated (no read past the end: the sanitizer
 * stage runs this too). */
#include <openssl/ssl.h>
#include <stdlib.h>

#include "fd_core.h"
#include "fd_stream_preread.h"
#include "tap.h"

/* A ClientHello from OpenSSL's client: its record bytes into out. */
static size_t client_hello(const char *sni, const char *alpn, uint8_t *out,
                           size_t size)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = SSL_new(ctx);
    BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
    int n;

    SSL_set_bio(ssl, rb, wb);
    if (sni)
        SSL_set_tlsext_host_name(ssl, sni);
    if (alpn)
        SSL_set_alpn_protos(ssl, (const unsigned char *)alpn,
                            (unsigned)strlen(alpn));
    SSL_connect(ssl); /* WANT_READ: the hello is in wb */
    n = BIO_read(wb, out, (int)size);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return n > 0 ? (size_t)n : 0;
}

/* The same handshake message re-framed in records of at most k bytes */
static size_t reframe(const uint8_t *in, size_t len, size_t k, uint8_t *out)
{
    size_t body = (size_t)in[3] << 8 | in[4], at = 0, o = 0;

    (void)len;
    in += 5;
    while (at < body) {
        size_t n = body - at < k ? body - at : k;
        out[o++] = 22;
        out[o++] = 3;
        out[o++] = 1;
        out[o++] = (uint8_t)(n >> 8);
        out[o++] = (uint8_t)n;
        memcpy(out + o, in + at, n);
        o += n;
        at += n;
    }
    return o;
}

int main(void)
{
    uint8_t h[4096], r[8192], m[4096];
    fd_preread_t p;
    size_t n, k, i, again = 0;
    int rc, bad;

    /* "\x02h2\x08http/1.1" */
    n = client_hello("App.Example.COM", "\x02h2\x08http/1.1", h, sizeof(h));
    ok(n > 100 && h[0] == 22, "OpenSSL made a ClientHello (%zu bytes)", n);
    rc = fd_preread_parse(h, n, &p);
    is_int(rc, FD_OK, "a whole ClientHello");
    is_str(p.sni, "app.example.com", "its server_name, lowercased");
    is_str(p.alpn, "h2,http/1.1", "its ALPN list");
    for (k = 0; k < n; k++)
        again += fd_preread_parse(h, k, &p) == FD_AGAIN;
    is_int(again, n, "every prefix asks for more");

    k = reframe(h, n, 40, r);
    rc = fd_preread_parse(r, k, &p);
    ok(rc == FD_OK && strcmp(p.sni, "app.example.com") == 0,
       "the handshake over records of 40 bytes");
    again = 0;
    for (i = 0; i < k; i++)
        again += fd_preread_parse(r, i, &p) == FD_AGAIN;
    is_int(again, k, "... and each of its prefixes asks for more");

    n = client_hello(NULL, NULL, h, sizeof(h));
    rc = fd_preread_parse(h, n, &p);
    ok(rc == FD_OK && p.sni[0] == '\0' && p.alpn[0] == '\0',
       "no SNI, no ALPN: whole, and nothing named");

    rc = fd_preread_parse((const uint8_t *)"GET / HTTP/1.1\r\n", 16, &p);
    is_int(rc, FD_DECLINED, "HTTP is not TLS");
    rc = fd_preread_parse((const uint8_t *)"G", 1, &p);
    is_int(rc, FD_DECLINED, "one byte tells");
    rc = fd_preread_parse((const uint8_t *)"\x16\x03\x01\x00\x00", 5, &p);
    is_int(rc, FD_DECLINED, "an empty record");
    rc = fd_preread_parse((const uint8_t *)"\x16\x03\x01\x00\x04\x02\x00\x00\x00",
                          9, &p);
    is_int(rc, FD_DECLINED, "a handshake that is not a ClientHello");

    /* every byte flipped, every length cut: an answer, never a crash */
    n = client_hello("x.test", "\x02h2", h, sizeof(h));
    bad = 0;
    for (i = 0; i < n; i++) {
        memcpy(m, h, n);
        m[i] ^= 0xff;
        rc = fd_preread_parse(m, n, &p);
        if (rc != FD_OK && rc != FD_AGAIN && rc != FD_DECLINED)
            bad++;
        if (rc == FD_OK && strlen(p.sni) >= sizeof(p.sni))
            bad++;
        memcpy(m, h, n);
        m[i] = 0;
        rc = fd_preread_parse(m, n, &p);
        if (rc != FD_OK && rc != FD_AGAIN && rc != FD_DECLINED)
            bad++;
    }
    is_int(bad, 0, "%zu bytes flipped and zeroed one by one: sane answers",
           n);
    return done_testing();
}
