#ifndef FD_STATIC_H
#define FD_STATIC_H

/* The parts of the static module (modules/fd_static_*.c). */

#include "fastd.h"

/* fd_static_autoindex() flags */
#define FD_AUTOINDEX_JSON 0x1      /* the JSON form */
#define FD_AUTOINDEX_EXACT 0x2     /* HTML sizes in bytes, not 12K / 3M */
#define FD_AUTOINDEX_LOCALTIME 0x4 /* HTML dates in the local time zone */

/* autoindex: r's response is the listing of the directory path (the
 * request's, ending in '/'), as flags say. FD_OK, or an HTTP status. */
int fd_static_autoindex(fd_request_t *r, fd_str_t path, unsigned flags);

#endif
