/*
 * The engine's side of the fleet's Redis client (fd_cluster.h): the
 * worker's client, provided by a module (fastd.h 1.7:
 * fd_api_redis_provide), and the [cluster]'s addresses it hands to the
 * configuration (fd_api_redis_addrs_set). fd_api_redis_command() and
 * its fellows, which call the client, are fd_http_api.c's.
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_module.h"
#include "fd_cluster.h"

const fd_cluster_t *fd_cluster;

int fd_cluster_configured(fd_cycle_t *cycle)
{
    return cycle->cluster != NULL;
}

const fd_cluster_addrs_t *fd_cluster_addrs(fd_cycle_t *cycle)
{
    return cycle->cluster;
}

int fd_api_redis_provide(const fd_api_redis_ops_t *ops)
{
    if (ops && fd_cluster && fd_cluster != ops)
        return FD_DECLINED;
    fd_cluster = ops;
    return FD_OK;
}

int fd_api_redis_addrs_set(const fd_api_redis_addr_t *addrs, unsigned n,
                           uint64_t timeout_msec)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_cluster_addrs_t *cc;
    unsigned i;

    if (cf == NULL)
        return FD_ERROR; /* not at load: nothing to say it to */
    if (cf->cycle->cluster)
        return fd_conf_error(cf, "the Redis servers are set already");
    if (n == 0 || n > FD_CLUSTER_ADDRS)
        return fd_conf_error(cf, "1 to %d Redis servers, not %u",
                             FD_CLUSTER_ADDRS, n);
    if ((cc = fd_pcalloc(cf->pool, sizeof(*cc))) == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < n; i++) {
        const fd_api_redis_addr_t *a = &addrs[i];
        fd_cluster_addr_t *to = &cc->addrs[i];
        if (a->sa == NULL || a->len == 0 || a->len > sizeof(to->sa) ||
            a->name == NULL)
            return fd_conf_error(cf, "Redis server %u: no address or name",
                                 i + 1);
        memcpy(&to->sa, a->sa, a->len);
        to->len = a->len;
        to->db = a->db;
        to->name = fd_pstrdup(cf->pool, a->name, strlen(a->name));
        to->password = a->password ? fd_pstrdup(cf->pool, a->password,
                                                strlen(a->password))
                                   : NULL;
        if (to->name == NULL || (a->password && to->password == NULL))
            return fd_conf_error(cf, "out of memory");
    }
    cc->naddrs = n;
    cc->timeout = timeout_msec;
    cf->cycle->cluster = cc;
    return FD_OK;
}
