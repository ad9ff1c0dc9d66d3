/*
 * handler = proxy, a WebSocket's side of it: after the upstream's 101 the
 * engine splices the client and the upstream (fastd_upstream.h's
 * fd_api_upstream_tunnel(), core/http/fd_upstream_tunnel.c); what is the
 * proxy's is the handshake over HTTP/2 (RFC 8441): the answer a 200
 * instead of the 101, and the WebSocket handshake to the upstream fastd's
 * own, a key of its making, the 101's Sec-WebSocket-Accept checked
 * against it.
 */
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "fd_proxy.h"

/* --- WebSocket over HTTP/2: fastd's handshake with the upstream --- */

int fd_proxy_tunnel_key(proxy_req_t *px)
{
    unsigned char raw[16], b64[25];

    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return FD_ERROR;
    EVP_EncodeBlock(b64, raw, sizeof(raw)); /* 24 characters and a NUL */
    memcpy(px->ws_key, b64, sizeof(px->ws_key));
    return FD_OK;
}

int fd_proxy_tunnel_own_field(fd_str_t name)
{
    return lit_eq(name, "sec-websocket-key") ||
           lit_eq(name, "sec-websocket-version");
}

int fd_proxy_tunnel_accepted(proxy_req_t *px, const fd_api_field_t *f,
                             unsigned nf)
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char in[sizeof(px->ws_key) + sizeof(guid) - 1];
    unsigned char md[SHA_DIGEST_LENGTH], want[29];
    unsigned i, seen = 0;
    int ok = 0;

    /* RFC 6455 4.2.2: base64(SHA-1(key . GUID)), one field */
    memcpy(in, px->ws_key, sizeof(px->ws_key));
    memcpy(in + sizeof(px->ws_key), guid, sizeof(guid) - 1);
    SHA1(in, sizeof(in), md);
    EVP_EncodeBlock(want, md, sizeof(md)); /* 28 characters and a NUL */
    for (i = 0; i < nf; i++) {
        if (!lit_eq(f[i].name, "sec-websocket-accept"))
            continue;
        seen++;
        ok = f[i].value.len == 28 && memcmp(f[i].value.data, want, 28) == 0;
    }
    return seen == 1 && ok;
}
