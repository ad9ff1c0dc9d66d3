/*
 * handler = status: the server's figures, summed over every worker slot of
 * the shared-memory segment (plus the folded counters of exited workers),
 * with per-worker detail. GET or HEAD only; never cached.
 *
 * JSON (jansson, the default):
 *   {
 *     "version": "0.1.0", "pid": MASTER_PID, "time_msec": NOW,
 *     "uptime_s": N, "generation": N, "profile": "name" | null,
 *     "connections": {"active", "reading", "writing", "idle",
 *                     "accepted", "handled"},
 *     "requests": N,
 *     "responses": {"1xx", "2xx", "3xx", "4xx", "5xx", "other"},
 *     "bytes": {"in": N, "out": N},
 *     "workers": [{"slot", "pid", "generation", "alive", "uptime_s",
 *                  "connections": {...}, "requests",
 *                  "responses": {...}, "bytes": {...},
 *                  "modules": {...}}],
 *     "modules": {GROUP: [{LABEL: "value", ..., FIELD: N, ...}]}
 *   }
 * "modules" holds what the modules report through their status hook (see
 * core/fd_status.h): metric "queue_waiting" with labels queue="api" is
 * modules.queue[{"queue": "api", "waiting": N}].
 *
 * Prometheus text exposition 0.0.4, for ?format=prometheus or an Accept
 * header asking for text/plain;version=0.0.4: every figure as fastd_NAME
 * (counters fastd_NAME_total) summed over workers, and again per worker as
 * fastd_worker_NAME{worker="SLOT"}; the totals include exited workers.
 */

#include <jansson.h>
#include <strings.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_status.h"

typedef struct status_sample_s {
    unsigned worker;
    uint64_t v;
    struct status_sample_s *next;
} status_sample_t;

typedef struct status_metric_s {
    const char *name;
    const char *help;
    const char *labels;        /* "" when none */
    int gauge;
    int core;                  /* a core figure: not under JSON "modules" */
    uint64_t total;
    status_sample_t *samples;
    status_sample_t **samples_last;
    struct status_metric_s *next;
} status_metric_t;

struct fd_status_s {
    fd_pool_t *pool;
    status_metric_t *metrics;
    status_metric_t **last;
    unsigned worker;           /* the slot being reported, or RETIRED */
    int core;
    int failed;                /* out of memory: answer 500 */
};

static const char *const classes[6] = {"other", "1xx", "2xx",
                                       "3xx",   "4xx", "5xx"};

/* Metric writer */

static status_metric_t *metric_get(fd_status_t *st, const char *name,
                                   const char *help, const char *labels,
                                   int gauge)
{
    status_metric_t *m;

    if (labels == NULL) {
        labels = "";
    }
    for (m = st->metrics; m != NULL; m = m->next) {
        if (strcmp(m->name, name) == 0 && strcmp(m->labels, labels) == 0) {
            return m;
        }
    }

    m = fd_pcalloc(st->pool, sizeof(status_metric_t));
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
    status_metric_t *m;
    status_sample_t *s;

    /* an exited worker's gauges mean nothing any more */
    if (gauge && st->worker == FD_STATUS_RETIRED) {
        return;
    }
    m = metric_get(st, name, help, labels, gauge);
    if (m == NULL) {
        return;
    }
    m->total += v;
    if (st->worker == FD_STATUS_RETIRED) {
        return;
    }

    for (s = m->samples; s != NULL; s = s->next) {
        if (s->worker == st->worker) {
            s->v += v;
            return;
        }
    }
    s = fd_palloc(st->pool, sizeof(status_sample_t));
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

static int metric_worker_value(const status_metric_t *m, unsigned worker,
                               uint64_t *v)
{
    const status_sample_t *s;

    for (s = m->samples; s != NULL; s = s->next) {
        if (s->worker == worker) {
            *v = s->v;
            return 1;
        }
    }
    return 0;
}

/* Gathering from a snapshot of the segment */

typedef struct {
    fd_shm_header_t *shm;
    uint64_t now;
    uint64_t generation;
    fd_stats_t total;          /* counters of every slot + retired; gauges
                                  of the live workers */
} status_view_t;

static void core_metrics(fd_status_t *st, const fd_stats_t *s, int alive)
{
    static const char *const code[6] = {
        "code=\"other\"", "code=\"1xx\"", "code=\"2xx\"",
        "code=\"3xx\"",   "code=\"4xx\"", "code=\"5xx\""};
    unsigned k;

    st->core = 1;
    fd_status_counter(st, "connections_accepted",
                      "Client connections accepted.", NULL,
                      s->conn_accepted);
    fd_status_counter(st, "connections_handled",
                      "Client connections handled to their end.", NULL,
                      s->conn_handled);
    if (alive) {
        fd_status_gauge(st, "connections_active",
                        "Open client connections.", NULL, s->conn_active);
        fd_status_gauge(st, "connections_reading",
                        "Connections reading a request.", NULL,
                        s->conn_reading);
        fd_status_gauge(st, "connections_writing",
                        "Connections writing a response.", NULL,
                        s->conn_writing);
        fd_status_gauge(st, "connections_idle",
                        "Idle keep-alive connections.", NULL, s->conn_idle);
    }
    fd_status_counter(st, "requests", "Requests received.", NULL,
                      s->requests);
    for (k = 0; k < 6; k++) {
        fd_status_counter(st, "responses", "Responses by status class.",
                          code[k], s->status[k]);
    }
    fd_status_counter(st, "received_bytes", "Bytes read from clients.", NULL,
                      s->bytes_in);
    fd_status_counter(st, "sent_bytes", "Bytes written to clients.", NULL,
                      s->bytes_out);
    st->core = 0;
}

static void add_stats(fd_stats_t *d, const fd_stats_t *s, int counters,
                      int gauges)
{
    unsigned k;

    if (counters) {
        d->conn_accepted += s->conn_accepted;
        d->conn_handled += s->conn_handled;
        d->requests += s->requests;
        for (k = 0; k < 6; k++) {
            d->status[k] += s->status[k];
        }
        d->bytes_in += s->bytes_in;
        d->bytes_out += s->bytes_out;
    }
    if (gauges) {
        d->conn_active += s->conn_active;
        d->conn_reading += s->conn_reading;
        d->conn_writing += s->conn_writing;
        d->conn_idle += s->conn_idle;
    }
}

static void gather(fd_status_t *st, status_view_t *v)
{
    fd_stats_t *s;
    unsigned i;

    v->generation = v->shm->generation;

    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++) {
        s = fd_shm_slot(v->shm, i);
        if (s->pid == 0) {
            continue; /* free, or retired */
        }
        /* an exited worker not yet retired still counts, but only the
         * live ones have connections */
        add_stats(&v->total, s, 1, s->alive != 0);
        v->generation = fd_max(v->generation, s->generation);

        st->worker = i;
        core_metrics(st, s, s->alive != 0);
#ifdef FD_MODULE_HAS_STATUS
        for (unsigned k = 0; fd_modules[k] != NULL; k++) {
            const fd_module_t *m = fd_modules[k];

            if (m->status != NULL) {
                m->status(st, fd_stats_area(s, m), i);
            }
        }
#endif
    }

    add_stats(&v->total, &v->shm->retired, 1, 0);
    st->worker = FD_STATUS_RETIRED;
    core_metrics(st, &v->shm->retired, 0);
#ifdef FD_MODULE_HAS_STATUS
    for (unsigned k = 0; fd_modules[k] != NULL; k++) {
        const fd_module_t *m = fd_modules[k];

        if (m->status != NULL) {
            m->status(st, fd_shm_retired_area(v->shm, m), FD_STATUS_RETIRED);
        }
    }
#endif
}

/* JSON */

static json_t *jint(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *json_conns(const fd_stats_t *s)
{
    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o}",
                     "active", jint(s->conn_active),
                     "reading", jint(s->conn_reading),
                     "writing", jint(s->conn_writing),
                     "idle", jint(s->conn_idle),
                     "accepted", jint(s->conn_accepted),
                     "handled", jint(s->conn_handled));
}

static json_t *json_responses(const fd_stats_t *s)
{
    json_t *o = json_object();
    unsigned k;

    for (k = 1; k <= 6; k++) {
        json_object_set_new(o, classes[k % 6], jint(s->status[k % 6]));
    }
    return o;
}

static json_t *json_bytes(const fd_stats_t *s)
{
    return json_pack("{s:o,s:o}", "in", jint(s->bytes_in), "out",
                     jint(s->bytes_out));
}

/* Parse `k="v",k2="v2"` into string members of o; FD_ERROR if malformed. */
static int json_labels(json_t *o, const char *p)
{
    char key[128], val[512];
    size_t kn, vn;

    while (*p != '\0') {
        for (kn = 0; *p != '=' && *p != '\0' && kn < sizeof(key) - 1; p++) {
            key[kn++] = *p;
        }
        key[kn] = '\0';
        if (p[0] != '=' || p[1] != '"' || kn == 0) {
            return FD_ERROR;
        }
        for (p += 2, vn = 0; *p != '"' && vn < sizeof(val) - 1; p++) {
            if (*p == '\0') {
                return FD_ERROR;
            }
            if (*p == '\\' && p[1] != '\0') {
                p++;
                val[vn++] = (*p == 'n') ? '\n' : *p;
            } else {
                val[vn++] = *p;
            }
        }
        val[vn] = '\0';
        if (*p != '"') {
            return FD_ERROR;
        }
        json_object_set_new(o, key, json_string(val));
        p++;
        if (*p == ',') {
            p++;
        }
    }
    return FD_OK;
}

/* One entity of the JSON "modules" view: a group and a label set. */
typedef struct status_entity_s {
    const char *group;         /* the metric name; group is glen bytes */
    size_t glen;
    const char *labels;
    json_t *obj;
    struct status_entity_s *next;
} status_entity_t;

/*
 * The modules' figures as {GROUP: [entity, ...]}: one entity per label
 * set, with the labels as strings and the fields as numbers. worker is a
 * slot for the per-worker detail, or FD_STATUS_RETIRED for the totals.
 */
static json_t *json_modules(fd_status_t *st, unsigned worker)
{
    json_t *modules = json_object(), *group;
    status_entity_t *entities = NULL, *e;
    status_metric_t *m;
    const char *us, *field;
    char gname[64];
    size_t glen;
    uint64_t v;

    for (m = st->metrics; m != NULL; m = m->next) {
        if (m->core) {
            continue;
        }
        if (worker == FD_STATUS_RETIRED) {
            v = m->total;
        } else if (!metric_worker_value(m, worker, &v)) {
            continue;
        }

        us = strchr(m->name, '_');
        glen = fd_min(us ? (size_t)(us - m->name) : strlen(m->name),
                      sizeof(gname) - 1);
        field = us ? us + 1 : "value";

        for (e = entities; e != NULL; e = e->next) {
            if (e->glen == glen && memcmp(e->group, m->name, glen) == 0
                && strcmp(e->labels, m->labels) == 0)
            {
                break;
            }
        }

        if (e == NULL) {
            e = fd_palloc(st->pool, sizeof(status_entity_t));
            if (e == NULL) {
                break;
            }
            memcpy(gname, m->name, glen);
            gname[glen] = '\0';
            group = json_object_get(modules, gname);
            if (group == NULL) {
                group = json_array();
                json_object_set_new(modules, gname, group);
            }
            e->group = m->name;
            e->glen = glen;
            e->labels = m->labels;
            e->obj = json_object();
            if (json_labels(e->obj, m->labels) != FD_OK) {
                json_object_set_new(e->obj, "labels",
                                    json_string(m->labels));
            }
            json_array_append_new(group, e->obj);
            e->next = entities;
            entities = e;
        }
        json_object_set_new(e->obj, field, jint(v));
    }

    return modules;
}

static json_t *json_worker(fd_status_t *st, status_view_t *v, unsigned i)
{
    fd_stats_t *s = fd_shm_slot(v->shm, i);
    uint64_t up = v->now > s->started_msec ? v->now - s->started_msec : 0;

    return json_pack("{s:i,s:o,s:o,s:b,s:o,s:o,s:o,s:o,s:o,s:o}",
                     "slot", (int)i,
                     "pid", jint(s->pid),
                     "generation", jint(s->generation),
                     "alive", s->alive != 0,
                     "uptime_s", jint(up / 1000),
                     "connections", json_conns(s),
                     "requests", jint(s->requests),
                     "responses", json_responses(s),
                     "bytes", json_bytes(s),
                     "modules", json_modules(st, i));
}

static int render_json(fd_request_t *r, fd_status_t *st, status_view_t *v)
{
    json_t *root, *workers;
    uint64_t up;
    size_t len;
    unsigned i;
    char *p;

    workers = json_array();
    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++) {
        if (fd_shm_slot(v->shm, i)->pid != 0) {
            json_array_append_new(workers, json_worker(st, v, i));
        }
    }

    up = v->now > v->shm->started_msec ? v->now - v->shm->started_msec : 0;
    root = json_pack("{s:s,s:o,s:o,s:o,s:o,s:s?,s:o,s:o,s:o,s:o,s:o,s:o}",
                     "version", FASTD_VERSION,
                     "pid", jint(v->shm->master_pid),
                     "time_msec", jint(v->now),
                     "uptime_s", jint(up / 1000),
                     "generation", jint(v->generation),
                     "profile",
                     v->shm->profile[0] ? v->shm->profile : NULL,
                     "connections", json_conns(&v->total),
                     "requests", jint(v->total.requests),
                     "responses", json_responses(&v->total),
                     "bytes", json_bytes(&v->total),
                     "workers", workers,
                     "modules", json_modules(st, FD_STATUS_RETIRED));
    if (root == NULL) {
        return FD_ERROR;
    }

    len = json_dumpb(root, NULL, 0, JSON_INDENT(1));
    p = len ? fd_pnalloc(r->pool, len + 1) : NULL;
    if (p == NULL || json_dumpb(root, p, len, JSON_INDENT(1)) != len) {
        json_decref(root);
        return FD_ERROR;
    }
    json_decref(root);
    p[len++] = '\n';

    r->content_type = fd_string("application/json");
    return fd_http_body_set(r, p, len);
}

/* Prometheus text exposition 0.0.4 */

typedef struct {
    fd_pool_t *pool;
    char *data;
    size_t len;
    size_t cap;
    int failed;
} status_text_t;

static void text_printf(status_text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void text_printf(status_text_t *t, const char *fmt, ...)
{
    va_list ap;
    size_t cap;
    char *p;
    int n;

    for (;;) {
        if (t->failed) {
            return;
        }
        va_start(ap, fmt);
        n = vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        /* grow in the pool; the old block dies with the request */
        cap = fd_max(t->cap * 2, t->len + (size_t)n + 1);
        p = fd_pnalloc(t->pool, cap);
        if (p == NULL) {
            t->failed = 1;
            return;
        }
        memcpy(p, t->data, t->len);
        t->data = p;
        t->cap = cap;
    }
}

static void text_help(status_text_t *t, const char *name, const char *help,
                      const char *note)
{
    const char *p, *from;

    text_printf(t, "# HELP %s ", name);
    for (p = from = help;; p++) {
        if (*p == '\\' || *p == '\n' || *p == '\0') {
            text_printf(t, "%.*s%s", (int)(p - from), from,
                        *p == '\\' ? "\\\\" : *p == '\n' ? "\\n" : "");
            from = p + 1;
        }
        if (*p == '\0') {
            break;
        }
    }
    text_printf(t, "%s\n", note);
}

/* One family: the metrics named like m (all label sets), totals or per
 * worker. */
static void text_family(status_text_t *t, status_metric_t *m, int per_worker)
{
    status_metric_t *e;
    status_sample_t *s;
    char name[256];

    snprintf(name, sizeof(name), "%s%s%s",
             per_worker ? "fastd_worker_" : "fastd_", m->name,
             m->gauge ? "" : "_total");
    text_help(t, name, m->help, per_worker ? " (per worker)" : "");
    text_printf(t, "# TYPE %s %s\n", name, m->gauge ? "gauge" : "counter");

    for (e = m; e != NULL; e = e->next) {
        if (strcmp(e->name, m->name) != 0) {
            continue;
        }
        if (!per_worker) {
            text_printf(t, "%s%s%s%s %llu\n", name, *e->labels ? "{" : "",
                        e->labels, *e->labels ? "}" : "",
                        (unsigned long long)e->total);
            continue;
        }
        for (s = e->samples; s != NULL; s = s->next) {
            text_printf(t, "%s{worker=\"%u\"%s%s} %llu\n", name, s->worker,
                        *e->labels ? "," : "", e->labels,
                        (unsigned long long)s->v);
        }
    }
}

static int render_prometheus(fd_request_t *r, fd_status_t *st,
                             status_view_t *v)
{
    status_text_t t = {.pool = r->pool, .cap = 16384};
    status_metric_t *m, *e;
    char profile[2 * sizeof(v->shm->profile)];
    unsigned i, n = 0;
    int per_worker, seen;
    const char *p;

    t.data = fd_pnalloc(r->pool, t.cap);
    if (t.data == NULL) {
        return FD_ERROR;
    }

    for (i = 0; i < FD_MAX_WORKER_SLOTS; i++) {
        fd_stats_t *s = fd_shm_slot(v->shm, i);
        n += s->pid != 0 && s->alive != 0;
    }

    for (i = 0, p = v->shm->profile; *p != '\0' && i < sizeof(profile) - 2;
         p++) {
        if (*p == '\\' || *p == '"') {
            profile[i++] = '\\';
        }
        profile[i++] = (*p == '\n') ? ' ' : *p;
    }
    profile[i] = '\0';

    text_printf(&t, "# HELP fastd_info Build and configuration.\n"
                    "# TYPE fastd_info gauge\n"
                    "fastd_info{version=\"%s\",profile=\"%s\"} 1\n",
                FASTD_VERSION, profile);
    text_printf(&t, "# HELP fastd_start_time_seconds Master start time.\n"
                    "# TYPE fastd_start_time_seconds gauge\n"
                    "fastd_start_time_seconds %llu\n",
                (unsigned long long)(v->shm->started_msec / 1000));
    text_printf(&t, "# HELP fastd_uptime_seconds Seconds since start.\n"
                    "# TYPE fastd_uptime_seconds gauge\n"
                    "fastd_uptime_seconds %llu\n",
                (unsigned long long)(v->now > v->shm->started_msec
                                         ? (v->now - v->shm->started_msec)
                                               / 1000
                                         : 0));
    text_printf(&t, "# HELP fastd_master_pid Process id of the master.\n"
                    "# TYPE fastd_master_pid gauge\n"
                    "fastd_master_pid %llu\n",
                (unsigned long long)v->shm->master_pid);
    text_printf(&t, "# HELP fastd_generation Configuration generation, "
                    "incremented on each reload.\n"
                    "# TYPE fastd_generation gauge\n"
                    "fastd_generation %llu\n",
                (unsigned long long)v->generation);
    text_printf(&t, "# HELP fastd_workers Worker processes running.\n"
                    "# TYPE fastd_workers gauge\n"
                    "fastd_workers %u\n", n);

    /* the totals, then the per-worker families; each family once */
    for (per_worker = 0; per_worker <= 1; per_worker++) {
        for (m = st->metrics; m != NULL; m = m->next) {
            seen = 0;
            for (e = st->metrics; e != m; e = e->next) {
                if (strcmp(e->name, m->name) == 0) {
                    seen = 1;
                    break;
                }
            }
            if (!seen) {
                text_family(&t, m, per_worker);
            }
        }
    }

    if (t.failed) {
        return FD_ERROR;
    }
    r->content_type = fd_string("text/plain; version=0.0.4; charset=utf-8");
    return fd_http_body_set(r, t.data, t.len);
}

/* The handler */

static int has_param(fd_str_t q, const char *param)
{
    size_t n = strlen(param);
    const char *p = q.data, *end, *amp;

    if (q.len == 0)
        return 0; /* no query: q.data may be NULL, and NULL + 0 is UB */
    for (end = q.data + q.len; p < end;) {
        amp = memchr(p, '&', (size_t)(end - p));
        if (amp == NULL) {
            amp = end;
        }
        if ((size_t)(amp - p) == n && memcmp(p, param, n) == 0) {
            return 1;
        }
        p = amp + 1;
    }
    return 0;
}

/* Does an Accept value list text/plain;version=0.0.4 (any case, OWS)? */
static int accepts_prometheus(fd_str_t a)
{
    const char *p = a.data, *end = a.data + a.len;
    static const char tp[] = "text/plain", ver[] = "version=0.0.4";

    for (; (size_t)(end - p) >= sizeof(tp) - 1; p++) {
        const char *q = p + sizeof(tp) - 1;

        if (strncasecmp(p, tp, sizeof(tp) - 1) != 0) {
            continue;
        }
        while (q < end && (*q == ' ' || *q == '\t')) {
            q++;
        }
        if (q == end || *q != ';') {
            continue;
        }
        for (q++; q < end && (*q == ' ' || *q == '\t'); q++) {
            /* OWS */
        }
        if ((size_t)(end - q) >= sizeof(ver) - 1
            && strncasecmp(q, ver, sizeof(ver) - 1) == 0)
        {
            return 1;
        }
    }
    return 0;
}

static int want_prometheus(fd_request_t *r)
{
    unsigned i;

    if (has_param(r->in.query, "format=prometheus")) {
        return 1;
    }
    if (has_param(r->in.query, "format=json")) {
        return 0;
    }
    for (i = 0; i < r->in.nheaders; i++) {
        fd_http_header_t *h = &r->in.headers[i];

        if (h->name.len == 6 && strncasecmp(h->name.data, "Accept", 6) == 0
            && accepts_prometheus(h->value))
        {
            return 1;
        }
    }
    return 0;
}

static int status_handler(fd_request_t *r)
{
    fd_status_t st = {.pool = r->pool};
    status_view_t v = {.now = 0};
    void *copy;
    int rc;

    if (r->in.method_id != FD_HTTP_GET && r->in.method_id != FD_HTTP_HEAD) {
        return 405;
    }
    if (fd_shm == NULL) {
        return 503;
    }

    copy = fd_palloc(r->pool, fd_shm_size());
    if (copy == NULL) {
        return 500;
    }
    v.shm = fd_shm_snapshot(copy);
    v.shm->profile[sizeof(v.shm->profile) - 1] = '\0'; /* torn by a reload */
    v.now = fd_stats_wall_msec();
    st.last = &st.metrics;

    gather(&st, &v);
    if (st.failed) {
        return 500;
    }

    rc = want_prometheus(r) ? render_prometheus(r, &st, &v)
                            : render_json(r, &st, &v);
    if (rc != FD_OK) {
        return 500;
    }

    r->status = 200;
    if (fd_http_header_add(r, fd_string("Cache-Control"),
                           fd_string("no-store"))
        != FD_OK)
    {
        return 500;
    }
    return FD_OK;
}

fd_module_t fd_status_module = {
    .name = "status",
    .handler = status_handler,
    .flags = FD_MODULE_THREAD_SAFE,
    .methods = FD_METHODS_GET,
};
