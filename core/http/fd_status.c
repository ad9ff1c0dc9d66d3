/*
 * The metric writer: what the modules' status hooks report through
 * (fd_status_counter, fd_status_gauge), kept as a list of metrics with
 * their total and per-worker samples, in the request's pool. It is core,
 * not part of the status handler, so that a module with a status hook
 * builds and links in a fastd configured --without-status. See fd_status.h.
 */

#include "fd_core.h"
#include "fd_status.h"

void fd_status_init(fd_status_t *st, fd_pool_t *pool)
{
    memset(st, 0, sizeof(*st));
    st->pool = pool;
    st->last = &st->metrics;
}

static fd_status_metric_t *metric_get(fd_status_t *st, const char *name,
                                      const char *help, const char *labels,
                                      int gauge)
{
    fd_status_metric_t *m;

    if (labels == NULL) {
        labels = "";
    }
    for (m = st->metrics; m != NULL; m = m->next) {
        if (strcmp(m->name, name) == 0 && strcmp(m->labels, labels) == 0) {
            return m;
        }
    }

    m = fd_pcalloc(st->pool, sizeof(fd_status_metric_t));
    if (m == NULL) {
        st->failed = 1;
        return NULL;
    }
    m->name = fd_pstrdup(st->pool, name, strlen(name));
    m->help = fd_pstrdup(st->pool, help ? help : "", help ? strlen(help) : 0);
    m->labels = fd_pstrdup(st->pool, labels, strlen(labels));
    if (m->name == NULL || m->help == NULL || m->labels == NULL) {
        st->failed = 1;
        return NULL;
    }
    m->gauge = gauge;
    m->core = st->core;
    m->samples_last = &m->samples;
    *st->last = m;
    st->last = &m->next;
    return m;
}

static void metric_add(fd_status_t *st, const char *name, const char *help,
                       const char *labels, uint64_t v, int gauge)
{
    fd_status_metric_t *m;
    fd_status_sample_t *s;

    /* an exited worker's gauges mean nothing any more */
    if (gauge && st->worker == FD_STATUS_RETIRED) {
        return;
    }
    m = metric_get(st, name, help, labels, gauge);
    if (m == NULL) {
        return;
    }
    m->total += v;
    if (st->worker == FD_STATUS_RETIRED || st->worker == FD_STATUS_SHARED) {
        return;
    }

    for (s = m->samples; s != NULL; s = s->next) {
        if (s->worker == st->worker) {
            s->v += v;
            return;
        }
    }
    s = fd_palloc(st->pool, sizeof(fd_status_sample_t));
    if (s == NULL) {
        st->failed = 1;
        return;
    }
    s->worker = st->worker;
    s->v = v;
    s->next = NULL;
    *m->samples_last = s;
    m->samples_last = &s->next;
}

void fd_status_counter(fd_status_t *st, const char *name, const char *help,
                       const char *labels, uint64_t v)
{
    metric_add(st, name, help, labels, v, 0);
}

void fd_status_gauge(fd_status_t *st, const char *name, const char *help,
                     const char *labels, uint64_t v)
{
    metric_add(st, name, help, labels, v, 1);
}

int fd_status_worker_value(const fd_status_metric_t *m, unsigned worker,
                           uint64_t *v)
{
    const fd_status_sample_t *s;

    for (s = m->samples; s != NULL; s = s->next) {
        if (s->worker == worker) {
            *v = s->v;
            return 1;
        }
    }
    return 0;
}

void *fd_status_named_entry(void *entries, size_t size, unsigned n,
                            const char *name, size_t name_size)
{
    char *free_one = NULL;
    unsigned i;

    for (i = 0; i < n; i++) {
        char *e = (char *)entries + (size_t)i * size;
        if (e[0] == '\0') {
            if (free_one == NULL)
                free_one = e;
        } else if (strncmp(e, name, name_size) == 0) {
            return e;
        }
    }
    if (free_one)
        snprintf(free_one, name_size, "%s", name);
    return free_one;
}
