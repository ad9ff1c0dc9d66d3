/*
 * The worker's shared-state client, set by the cluster module when the
 * configuration has a [cluster] (fd_cluster.h).
 */
#include "fd_core.h"
#include "fd_cycle.h"
#include "fd_cluster.h"

const fd_cluster_t *fd_cluster;

int fd_cluster_configured(fd_cycle_t *cycle)
{
    return fd_cycle_section(cycle, "cluster", "") != NULL;
}

const fd_cluster_addrs_t *fd_cluster_addrs(fd_cycle_t *cycle)
{
    /* the section's configuration begins with it (fd_cluster_module.c) */
    return fd_cycle_section(cycle, "cluster", "");
}
