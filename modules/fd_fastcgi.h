/*
 * FastCGI records (the FastCGI 1.0 specification): what the module's files
 * share. fd_fastcgi_record.c encodes the request's records and parses the
 * application's, and knows nothing of requests or sockets, so the unit
 * test (tests/unit/test_fastcgi.c) and the fuzzer (tests/fuzz/
 * fuzz_fastcgi.c) drive it alone; fd_fastcgi_module.c is the handler.
 */
#ifndef FD_FASTCGI_H
#define FD_FASTCGI_H

#include <string.h>

#include "fastd.h"

#define FD_FCGI_VERSION 1
#define FD_FCGI_HEADER_LEN 8
#define FD_FCGI_MAX_CONTENT 65535

enum {
    FD_FCGI_BEGIN_REQUEST = 1,
    FD_FCGI_ABORT_REQUEST = 2,
    FD_FCGI_END_REQUEST = 3,
    FD_FCGI_PARAMS = 4,
    FD_FCGI_STDIN = 5,
    FD_FCGI_STDOUT = 6,
    FD_FCGI_STDERR = 7
};

#define FD_FCGI_RESPONDER 1
#define FD_FCGI_KEEP_CONN 1
#define FD_FCGI_REQUEST_COMPLETE 0 /* END_REQUEST protocolStatus */

/* A record header for request 1 (the only one a connection carries). */
static inline void fd_fcgi_header(char *h, unsigned type, size_t len)
{
    h[0] = FD_FCGI_VERSION;
    h[1] = (char)type;
    h[2] = 0;
    h[3] = 1;
    h[4] = (char)(len >> 8);
    h[5] = (char)len;
    h[6] = 0; /* no padding */
    h[7] = 0;
}

/* The BEGIN_REQUEST record, 16 bytes, role responder. */
void fd_fcgi_begin(char *dst, int keep_conn);

/* One name-value pair's length prefix: 1 byte below 128, else 4. Writes
 * at most 4 bytes; returns how many. */
size_t fd_fcgi_len(char *dst, size_t n);

/*
 * Frame pairs (len bytes of encoded name-value pairs) as PARAMS records
 * of at most FD_FCGI_MAX_CONTENT each, then the empty PARAMS record that
 * ends them, into dst: fd_fcgi_params_size(len) bytes. Returns the end.
 */
size_t fd_fcgi_params_size(size_t len);
char *fd_fcgi_params(char *dst, const char *pairs, size_t len);

/*
 * The response parser: resumable at any byte, zero-copy. Each call takes
 * bytes from *pos (moving it) and returns
 *   FD_OK     one piece in *out: content of an STDOUT or STDERR record
 *             (a record may come in several pieces: data points into the
 *             caller's buffer), or END_REQUEST (app and protocol status);
 *   FD_AGAIN  every byte was taken, the next piece needs more;
 *   FD_ERROR  the stream is not a valid response to request 1 (*why).
 * After END_REQUEST any further byte is an error: the application sent
 * more than its response (the caller sees it as bytes left at *pos).
 */
typedef struct {
    unsigned type;
    const char *data;
    size_t len;
    uint32_t app_status;       /* END_REQUEST */
    unsigned protocol_status;
} fd_fcgi_piece_t;

typedef struct {
    unsigned state;
    unsigned type;
    size_t need;               /* content bytes left in this record */
    size_t pad;                /* padding bytes left */
    unsigned hlen;             /* header (or END_REQUEST body) bytes held */
    unsigned char h[8];
    unsigned ended:1;
} fd_fcgi_parser_t;

static inline void fd_fcgi_parser_init(fd_fcgi_parser_t *p)
{
    memset(p, 0, sizeof(*p));
}

int fd_fcgi_parse(fd_fcgi_parser_t *p, const char **pos, const char *end,
                  fd_fcgi_piece_t *out, const char **why);

#endif
