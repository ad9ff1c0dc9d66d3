#ifndef FD_CLUSTER_H
#define FD_CLUSTER_H

/*
 * State shared by a fleet of fastd instances: the worker's client of the
 * store named by [cluster] (Redis; modules/fd_cluster_module.c). A
 * feature that keeps its state there (limit_req's store = redis) sends
 * commands through fd_cluster (a module on the public API: through
 * fd_api_redis_command) and is answered on the loop, once, within
 * [cluster] timeout: by a reply, or by FD_REDIS_FAIL (down, busy, timed
 * out, a broken connection), whereupon it applies its own policy. The
 * core only holds the pointer, so a build without the cluster module
 * links, and a feature asks fd_cluster_configured() at load.
 */

#include <sys/socket.h>

#include "fd_core.h"

enum {
    FD_REDIS_FAIL = 0,   /* no answer: see fd_redis_reply_t.str */
    FD_REDIS_INT,
    FD_REDIS_STR,        /* a bulk or status string */
    FD_REDIS_NIL,
    FD_REDIS_ERR,        /* an error reply: "NOSCRIPT ...", "ERR ..." */
    FD_REDIS_OTHER       /* an array: not read by anything yet */
};

typedef struct {
    int type;
    long long integer;
    fd_str_t str;        /* STR, ERR, and FAIL's reason */
} fd_redis_reply_t;

typedef struct fd_redis_cmd_s fd_redis_cmd_t;
/* The answer to a command; the reply lives until the call returns */
typedef void (*fd_redis_done_pt)(void *data, const fd_redis_reply_t *reply);

typedef struct {
    /* Queue argv as one command, sent with the others of this loop turn
     * in one write. NULL: not sent (no connection up, too many waiting),
     * and done is not called: the caller answers by its policy now. */
    fd_redis_cmd_t *(*command)(int argc, const char **argv,
                               const size_t *len, fd_redis_done_pt done,
                               void *data);
    /* done will not be called (the request that waited is gone) */
    void (*cancel)(fd_redis_cmd_t *c);
    fd_msec_t timeout;
} fd_cluster_t;

/* The worker's client (init_worker of the cluster module); NULL: none */
extern const fd_cluster_t *fd_cluster;

/* At load (init_cycle): whether the configuration has a [cluster] */
int fd_cluster_configured(fd_cycle_t *cycle);

/* One redis = line of [cluster], parsed (the cluster module's) */
#define FD_CLUSTER_ADDRS 8
typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
    char *password;           /* AUTH, or NULL */
    int db;                   /* SELECT, when not 0 */
    char *name;               /* for the log: host:port, unix:PATH */
} fd_cluster_addr_t;

/* The addresses, in the order they are tried, and the timeout: what a
 * process that talks to Redis off the loop reads (the ACME helper's
 * blocking client). The cluster module's [cluster] configuration begins
 * with it. NULL: no [cluster]. */
typedef struct {
    fd_cluster_addr_t addrs[FD_CLUSTER_ADDRS];
    unsigned naddrs;
    fd_msec_t timeout;
} fd_cluster_addrs_t;
const fd_cluster_addrs_t *fd_cluster_addrs(fd_cycle_t *cycle);

/* The cluster module's client: started by its init_worker (conf: its
 * [cluster]), stopped by exit_worker; the unit tests start one for an
 * address and read its figures */
int fd_cluster_redis_start(const void *conf);
void fd_cluster_redis_stop(void);
struct sockaddr;
int fd_cluster_redis_test(const struct sockaddr *sa, unsigned len,
                          fd_msec_t timeout, unsigned pool);

#endif
