#ifndef FD_STATIC_H
#define FD_STATIC_H

/* The parts of the static module (modules/fd_static_*.c). */

/* autoindex: r's response is the listing of the directory open at dfd
 * (which this closes), path its name for the title; json: the JSON form.
 * FD_OK, or an HTTP status. */
int fd_static_autoindex(fd_request_t *r, int dfd, const char *path,
                        int json);

#endif
