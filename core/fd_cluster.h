#ifndef FD_CLUSTER_H
#define FD_CLUSTER_H

/*
 * State shared by a fleet of fastd instances: the engine's side of the
 * Redis client that a module provides (fastd.h, 1.7: the cluster module,
 * modules/fd_cluster_module.c, keeps one a worker and reads [cluster]). A
 * feature that keeps its state there (TLS session ticket keys, ACME's
 * challenges; a module on the public API through fd_api_redis_command)
 * sends commands through fd_cluster and is answered on the loop, once,
 * within [cluster] timeout: by a reply, or by FD_REDIS_FAIL (down, busy,
 * timed out, a broken connection), whereupon it applies its own policy.
 * The core only holds the pointer and the addresses, so a build without
 * the module links, and a feature asks fd_cluster_configured() at load.
 * The types are the API's, under the names the engine's users know.
 */

#include <sys/socket.h>

#include "fd_core.h"

enum {
    FD_REDIS_FAIL = FD_API_REDIS_FAIL, /* no answer: see str */
    FD_REDIS_INT = FD_API_REDIS_INT,
    FD_REDIS_STR = FD_API_REDIS_STR,   /* a bulk or status string */
    FD_REDIS_NIL = FD_API_REDIS_NIL,
    FD_REDIS_ERR = FD_API_REDIS_ERR,   /* "NOSCRIPT ...", "ERR ..." */
    FD_REDIS_OTHER = FD_API_REDIS_OTHER /* an array: read by nothing yet */
};

typedef fd_api_redis_reply_t fd_redis_reply_t;
typedef fd_api_redis_cmd_t fd_redis_cmd_t;
/* The answer to a command; the reply lives until the call returns */
typedef void (*fd_redis_done_pt)(void *data, const fd_redis_reply_t *reply);
/* command(): queue argv as one command, sent with the others of this
 * loop turn in one write; NULL: not sent (no connection up, too many
 * waiting), and done is not called: the caller answers by its policy
 * now. cancel(): done will not be called (the request that waited is
 * gone). */
typedef fd_api_redis_ops_t fd_cluster_t;

/* The worker's client (fd_api_redis_provide); NULL: none */
extern const fd_cluster_t *fd_cluster;

/* At load (init_cycle): whether the configuration has a [cluster] */
int fd_cluster_configured(fd_cycle_t *cycle);

/* One redis = line of [cluster], parsed (fd_api_redis_addrs_set) */
#define FD_CLUSTER_ADDRS FD_API_REDIS_ADDRS
typedef struct {
    struct sockaddr_storage sa;
    socklen_t len;
    char *password;           /* AUTH, or NULL */
    int db;                   /* SELECT, when not 0 */
    char *name;               /* for the log: host:port, unix:PATH */
} fd_cluster_addr_t;

/* The addresses, in the order they are tried, and the timeout: what a
 * process that talks to Redis off the loop reads (the ACME helper's
 * blocking client), in the cycle's memory. NULL: no [cluster]. */
typedef struct fd_cluster_addrs_s {
    fd_cluster_addr_t addrs[FD_CLUSTER_ADDRS];
    unsigned naddrs;
    fd_msec_t timeout;
} fd_cluster_addrs_t;
const fd_cluster_addrs_t *fd_cluster_addrs(fd_cycle_t *cycle);

#endif
