#ifndef FD_HTTP_ACCEPT_H
#define FD_HTTP_ACCEPT_H

#include "fd_core.h"

/* Content codings a response may be sent in (bits of a set). */
#define FD_ENC_GZIP 1u
#define FD_ENC_BR   2u

/*
 * Which of the offered codings Accept-Encoding prefers (RFC 9110
 * 12.5.3): the highest q > 0 ("*" stands for a coding not named), br
 * before gzip at equal q, and none that "identity" beats with a higher
 * q. 0: send the body as it is (also without the header).
 */
unsigned fd_http_accept_encoding(fd_str_t ae, unsigned offered);

#endif
