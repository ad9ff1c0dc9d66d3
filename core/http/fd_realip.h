#ifndef FD_REALIP_H
#define FD_REALIP_H

/*
 * The client behind a load balancer: the address a trusted hop says the
 * client has, from a request header (X-Forwarded-For, X-Real-IP) or from
 * a PROXY protocol header in front of the connection's bytes.
 *
 * The parsers and the address matcher here are pure (no connection, no
 * request): tests/unit/test_realip.c and tests/fuzz/fuzz_proxy_protocol.c
 * drive them directly.
 */
#include "fd_core.h"

struct fd_conf_s;
struct fd_directive_s;

/* An IPv4 (first 4 bytes) or IPv6 address and a port (0: none known):
 * the public API's (fastd.h), which modules read with fd_req_client. */
typedef fd_api_addr_t fd_addr_t;

/* ADDR/BITS; an IPv4 rule also matches IPv4-mapped IPv6 addresses. The
 * public API's (fastd.h), which modules match with fd_api_cidr_match. */
typedef fd_api_cidr_t fd_cidr_t;

/* "ADDR" or "ADDR/BITS" (no bits set below BITS): FD_OK or FD_ERROR. */
int fd_cidr_parse(const char *text, fd_cidr_t *out);
/* Is a in one of set[0..n)? */
int fd_cidr_match(const fd_cidr_t *set, unsigned n, const fd_addr_t *a);

/*
 * One address as a header gives it (RFC 3986, as nginx reads it):
 * "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]:80" (a port is
 * 1..65535). Anything else, spaces and empty text included: FD_ERROR.
 */
int fd_addr_parse(const char *p, size_t n, fd_addr_t *out);
/* Text of a into buf (INET6_ADDRSTRLEN bytes); returns its length. */
size_t fd_addr_text(const fd_addr_t *a, char *buf, size_t size);

/*
 * X-Forwarded-For, walked from its right end: vals[0..n) are the header's
 * values in the order they came (several headers read as one list).
 * *a is the peer on entry. Only a trusted address is replaced: by the
 * last element; with recursive, again while the new address is trusted.
 * Elements are split on ',' and ' ' (empty ones are skipped); an element
 * that is not an address stops the walk, and *a stays what it was last.
 * FD_OK when *a changed, FD_DECLINED when it did not.
 */
int fd_realip_forwarded(const fd_str_t *vals, unsigned n,
                        const fd_cidr_t *from, unsigned nfrom, int recursive,
                        fd_addr_t *a);

/*
 * A PROXY protocol header (v1 text, v2 binary) at the start of p[0..n):
 * its length (> 0) once whole, with *src the client's address (family 0:
 * keep the peer's: v1 UNKNOWN, v2 LOCAL or an unspecified or unix
 * family); FD_AGAIN while what came so far is a beginning of one;
 * FD_ERROR when it cannot be one. v2 TLVs are skipped. A v2 header is
 * at most FD_PROXY_PROTOCOL_MAX bytes (longer: FD_ERROR).
 */
#define FD_PROXY_PROTOCOL_V1_MAX 107
#define FD_PROXY_PROTOCOL_MAX 1024
int fd_proxy_protocol_parse(const uint8_t *p, size_t n, fd_addr_t *src);

/* The header a client would send: v1 ("PROXY TCP4 ...\r\n") or v2, from
 * src to dst (family 0: v1 UNKNOWN, v2 LOCAL). Bytes written (at most
 * FD_PROXY_PROTOCOL_V1_MAX, or 52 for v2), into buf of size bytes. */
size_t fd_proxy_protocol_write(uint8_t *buf, size_t size, int version,
                               const fd_addr_t *src, const fd_addr_t *dst);

/* the keys set_real_ip_from, real_ip_header, real_ip_recursive */
enum {
    FD_REALIP_X_REAL_IP = 0,
    FD_REALIP_X_FORWARDED_FOR,
    FD_REALIP_PROXY_PROTOCOL
};

typedef struct {
    fd_cidr_t *from;
    unsigned nfrom, fromcap;
    int header;                /* FD_REALIP_* */
    int recursive;
} fd_realip_conf_t;

/* whether a and b take the same address from the same request */
int fd_realip_conf_eq(const fd_realip_conf_t *a, const fd_realip_conf_t *b);

int fd_realip_set_from(struct fd_conf_s *cf, const struct fd_directive_s *d,
                       void *conf, const char *v);
int fd_realip_set_header(struct fd_conf_s *cf,
                         const struct fd_directive_s *d, void *conf,
                         const char *v);

#endif
