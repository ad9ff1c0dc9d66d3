#ifndef FD_STREAM_PREREAD_H
#define FD_STREAM_PREREAD_H

/*
 * ssl_preread: what a TLS ClientHello names (server_name, the ALPN
 * protocols), read from the first bytes of a [stream] connection before
 * any TLS runs, to choose where the connection goes (TLS passthrough by
 * SNI). The bytes themselves go on to the server untouched.
 */
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char sni[256];             /* host_name, lowercased; "": none */
    char alpn[256];            /* the protocols offered, joined by ',' */
} fd_preread_t;

/* The first len bytes of a connection. FD_OK: a whole ClientHello (p
 * filled); FD_AGAIN: it goes on past len; FD_DECLINED: not TLS, not a
 * ClientHello, or malformed: no name (the default route). The ClientHello
 * may span records; it must fit in len's buffer (the caller's limit). */
int fd_preread_parse(const uint8_t *buf, size_t len, fd_preread_t *p);

#endif
