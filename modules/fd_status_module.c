/*
 * handler = status: the server's figures, summed over every worker slot of
 * the shared-memory segment (plus the folded counters of exited workers),
 * with per-worker detail. GET or HEAD only; never cached.
 *
 * JSON (the default; written with fd_sbuf like every document here):
 *   {
 *     "version": "0.1.0", "pid": MASTER_PID, "time_msec": NOW,
 *     "uptime_s": N, "generation": N, "profile": "name" | null,
 *     "connections": {"active", "reading", "writing", "idle",
 *                     "accepted", "handled"},
 *     "requests": N,
 *     "responses": {"1xx", "2xx", "3xx", "4xx", "5xx", "other"},
 *     "bytes": {"in": N, "out": N},
 *     "tls": {"handshakes", "resumed",
 *             "protocols": {"TLSv1.2", "TLSv1.3"},
 *             "failures": {"protocol", "no_shared_cipher",
 *                          "client_certificate", "plain_http", "closed",
 *                          "timeout", "other"}},
 *     "http2": {"connections", "active", "streams", "resets", "goaways"},
 *     "workers": [{"slot", "pid", "generation", "alive", "uptime_s",
 *                  "connections": {...}, "requests",
 *                  "responses": {...}, "bytes": {...}, "tls": {...},
 *                  "http2": {...}, "modules": {...}}],
 *     "modules": {GROUP: [{LABEL: "value", ..., FIELD: N, ...}]}
 *   }
 * "modules" holds what the modules report through their status hook (see
 * core/http/fd_status.h): metric "queue_waiting" with labels queue="api" is
 * modules.queue[{"queue": "api", "waiting": N}].
 *
 * Prometheus text exposition 0.0.4, for ?format=prometheus or an Accept
 * header asking for text/plain;version=0.0.4: every figure as fastd_NAME
 * (counters fastd_NAME_total, times in seconds) summed over workers, and
 * again per worker as fastd_worker_NAME{worker="SLOT"}, for every live
 * worker, except the figures all workers share (health checks, resolved
 * addresses, cache indexes); the totals include exited workers.
 */

#include <strings.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_ssl.h"
#include "fd_status.h"

static const char *const classes[6] = {"other", "1xx", "2xx",
                                       "3xx",   "4xx", "5xx"};

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
        fd_status_gauge(st, "connections_parked",
                        "Of the idle, those parked in the io_uring ring.",
                        NULL, s->conn_parked);
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
    fd_status_counter(st, "tls_handshakes",
                      "TLS handshakes completed, by protocol version.",
                      "protocol=\"TLSv1.2\"", s->ssl_tls12);
    fd_status_counter(st, "tls_handshakes",
                      "TLS handshakes completed, by protocol version.",
                      "protocol=\"TLSv1.3\"", s->ssl_tls13);
    fd_status_counter(st, "tls_resumed",
                      "TLS handshakes that resumed a session.", NULL,
                      s->ssl_resumed);
    for (k = 0; k < FD_SSL_FAIL_N; k++) {
        char label[64];

        snprintf(label, sizeof(label), "reason=\"%s\"",
                 fd_ssl_failure_names[k]);
        fd_status_counter(st, "tls_failures",
                          "TLS handshakes that failed, by reason.", label,
                          s->ssl_failed[k]);
    }
    fd_status_counter(st, "http2_connections",
                      "HTTP/2 connections taken (h2 and h2c).", NULL,
                      s->h2_conns);
    if (alive) {
        fd_status_gauge(st, "http2_active_connections",
                        "Open HTTP/2 connections.", NULL, s->h2_active);
    }
    fd_status_counter(st, "http2_streams",
                      "Requests carried by HTTP/2 streams.", NULL,
                      s->h2_streams);
    fd_status_counter(st, "http2_resets", "HTTP/2 streams the client reset.",
                      NULL, s->h2_resets);
    fd_status_counter(st, "http2_goaways",
                      "HTTP/2 connections ended with GOAWAY for an error.",
                      NULL, s->h2_goaways);
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
        d->ssl_resumed += s->ssl_resumed;
        d->ssl_tls12 += s->ssl_tls12;
        d->ssl_tls13 += s->ssl_tls13;
        for (k = 0; k < FD_SSL_FAIL_N; k++) {
            d->ssl_failed[k] += s->ssl_failed[k];
        }
        d->h2_conns += s->h2_conns;
        d->h2_streams += s->h2_streams;
        d->h2_resets += s->h2_resets;
        d->h2_goaways += s->h2_goaways;
    }
    if (gauges) {
        d->conn_active += s->conn_active;
        d->h2_active += s->h2_active;
        d->conn_reading += s->conn_reading;
        d->conn_writing += s->conn_writing;
        d->conn_idle += s->conn_idle;
        d->conn_parked += s->conn_parked;
    }
}

static void gather(fd_status_t *st, status_view_t *v)
{
    fd_stats_t *s;
    unsigned i;

    v->generation = v->shm->generation;

    for (i = 0; i < v->shm->slots_used; i++) {
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
        for (unsigned k = 0; fd_modules[k] != NULL; k++) {
            const fd_module_t *m = fd_modules[k];

            if (m->status != NULL) {
                m->status(st, fd_stats_area(s, m), i);
            }
        }
    }

    add_stats(&v->total, &v->shm->retired, 1, 0);
    st->worker = FD_STATUS_RETIRED;
    core_metrics(st, &v->shm->retired, 0);
    for (unsigned k = 0; fd_modules[k] != NULL; k++) {
        const fd_module_t *m = fd_modules[k];

        if (m->status != NULL) {
            m->status(st, fd_shm_retired_area(v->shm, m), FD_STATUS_RETIRED);
        }
    }

    st->worker = FD_STATUS_SHARED;
    for (unsigned k = 0; fd_modules[k] != NULL; k++) {
        if (fd_modules[k]->status_shared != NULL) {
            fd_modules[k]->status_shared(st);
        }
    }
}

/*
 * JSON, written straight into an fd_sbuf in the request pool, laid out as
 * one member per line with one space of indent per level. The writer keeps
 * only the depth and whether the open object or array has a member yet.
 */

typedef struct {
    fd_sbuf_t *sb;
    unsigned depth;
    int empty; /* the innermost open object or array has no member yet */
    int failed; /* out of pool memory outside the builder */
} json_w_t;

static void jw_indent(json_w_t *w)
{
    char *p = fd_sbuf_reserve(w->sb, w->depth + 1);

    if (p == NULL) {
        return;
    }
    *p = '\n';
    memset(p + 1, ' ', w->depth);
    fd_sbuf_commit(w->sb, p + 1 + w->depth);
}

/* Before a member or an element: the comma, the new line and the indent. */
static void jw_next(json_w_t *w)
{
    if (!w->empty) {
        fd_sbuf_addc(w->sb, ',');
    }
    w->empty = 0;
    jw_indent(w);
}

static void jw_key_n(json_w_t *w, const char *k, size_t n)
{
    jw_next(w);
    fd_sbuf_addc(w->sb, '"');
    fd_sbuf_add_json(w->sb, k, n);
    fd_sbuf_add_lit(w->sb, "\": ");
}

static void jw_key(json_w_t *w, const char *k)
{
    jw_key_n(w, k, strlen(k));
}

static void jw_open(json_w_t *w, char c)
{
    fd_sbuf_addc(w->sb, c);
    w->depth++;
    w->empty = 1;
}

static void jw_close(json_w_t *w, char c)
{
    w->depth--;
    if (!w->empty) {
        jw_indent(w);
    }
    fd_sbuf_addc(w->sb, c);
    w->empty = 0;
}

static void jw_uint(json_w_t *w, const char *k, uint64_t v)
{
    jw_key(w, k);
    fd_sbuf_add_uint(w->sb, v);
}

static void jw_string(json_w_t *w, const char *k, const char *s)
{
    jw_key(w, k);
    fd_sbuf_addc(w->sb, '"');
    fd_sbuf_add_json(w->sb, s, strlen(s));
    fd_sbuf_addc(w->sb, '"');
}

static void json_stats(json_w_t *w, const fd_stats_t *s)
{
    unsigned k;

    jw_key(w, "connections");
    jw_open(w, '{');
    jw_uint(w, "active", s->conn_active);
    jw_uint(w, "reading", s->conn_reading);
    jw_uint(w, "writing", s->conn_writing);
    jw_uint(w, "idle", s->conn_idle);
    jw_uint(w, "parked", s->conn_parked);
    jw_uint(w, "accepted", s->conn_accepted);
    jw_uint(w, "handled", s->conn_handled);
    jw_close(w, '}');

    jw_uint(w, "requests", s->requests);

    /* 1xx .. 5xx, then other */
    jw_key(w, "responses");
    jw_open(w, '{');
    for (k = 1; k <= 6; k++) {
        jw_uint(w, classes[k % 6], s->status[k % 6]);
    }
    jw_close(w, '}');

    jw_key(w, "bytes");
    jw_open(w, '{');
    jw_uint(w, "in", s->bytes_in);
    jw_uint(w, "out", s->bytes_out);
    jw_close(w, '}');

    jw_key(w, "tls");
    jw_open(w, '{');
    jw_uint(w, "handshakes", s->ssl_tls12 + s->ssl_tls13);
    jw_uint(w, "resumed", s->ssl_resumed);
    jw_key(w, "protocols");
    jw_open(w, '{');
    jw_uint(w, "TLSv1.2", s->ssl_tls12);
    jw_uint(w, "TLSv1.3", s->ssl_tls13);
    jw_close(w, '}');
    jw_key(w, "failures");
    jw_open(w, '{');
    for (k = 0; k < FD_SSL_FAIL_N; k++) {
        jw_uint(w, fd_ssl_failure_names[k], s->ssl_failed[k]);
    }
    jw_close(w, '}');
    jw_close(w, '}');

    jw_key(w, "http2");
    jw_open(w, '{');
    jw_uint(w, "connections", s->h2_conns);
    jw_uint(w, "active", s->h2_active);
    jw_uint(w, "streams", s->h2_streams);
    jw_uint(w, "resets", s->h2_resets);
    jw_uint(w, "goaways", s->h2_goaways);
    jw_close(w, '}');
}

/*
 * Labels `k="v",k2="v2"` (values escaped as Prometheus wants: \\, \", \n):
 * the length of the first value's text up to its closing quote, or -1 if
 * p does not start a well-formed pair. *key and *klen give the key.
 */
static ssize_t label_pair(const char *p, const char **key, size_t *klen)
{
    const char *q = p, *v;

    while (*q != '=' && *q != '\0' && *q != '"' && *q != ',') {
        q++;
    }
    if (q == p || q[0] != '=' || q[1] != '"') {
        return -1;
    }
    *key = p;
    *klen = (size_t)(q - p);
    for (v = q + 2; *v != '"'; v++) {
        if (*v == '\0' || (*v == '\\' && *++v == '\0')) {
            return -1;
        }
    }
    return v - (q + 2);
}

static int labels_valid(const char *p)
{
    const char *k;
    size_t kn;
    ssize_t vn;

    while (*p != '\0') {
        if ((vn = label_pair(p, &k, &kn)) < 0) {
            return 0;
        }
        p = k + kn + 2 + vn + 1;
        if (*p == ',') {
            p++;
        } else if (*p != '\0') {
            return 0;
        }
    }
    return 1;
}

/* The labels of a well-formed set as string members. */
static void json_labels(json_w_t *w, const char *p)
{
    const char *k, *v, *end;
    size_t kn;
    ssize_t vn;

    while (*p != '\0' && (vn = label_pair(p, &k, &kn)) >= 0) {
        jw_key_n(w, k, kn);
        fd_sbuf_addc(w->sb, '"');
        for (v = k + kn + 2, end = v + vn; v < end; v++) {
            char c = *v;

            if (c == '\\') {
                c = *++v == 'n' ? '\n' : *v;
            }
            fd_sbuf_add_json(w->sb, &c, 1);
        }
        fd_sbuf_addc(w->sb, '"');
        p = end + 1;
        if (*p == ',') {
            p++;
        }
    }
}

/*
 * The modules' view, {GROUP: [entity, ...]}: one entity per group and
 * label set, in the order first reported, with the labels as strings and
 * the fields as numbers. Built as lists in the pool, then written.
 */
typedef struct status_field_s {
    const char *name;
    uint64_t v;
    struct status_field_s *next;
} status_field_t;

typedef struct status_entity_s {
    const char *labels;
    status_field_t *fields, **fields_last;
    struct status_entity_s *next;
} status_entity_t;

typedef struct status_group_s {
    const char *name;          /* the metric name; the group is len bytes */
    size_t len;
    status_entity_t *entities, **entities_last;
    struct status_group_s *next;
} status_group_t;

/* worker: a slot for the per-worker detail, or FD_STATUS_RETIRED for the
 * totals. */
static void json_modules(json_w_t *w, fd_status_t *st, unsigned worker)
{
    status_group_t *groups = NULL, **groups_last = &groups, *g;
    status_entity_t *e;
    status_field_t *f;
    fd_status_metric_t *m;
    const char *us;
    size_t len;
    uint64_t v;

    for (m = st->metrics; m != NULL; m = m->next) {
        if (m->core) {
            continue;
        }
        if (worker == FD_STATUS_RETIRED) {
            v = m->total;
        } else if (!fd_status_worker_value(m, worker, &v)) {
            continue;
        }

        us = strchr(m->name, '_');
        len = us ? (size_t)(us - m->name) : strlen(m->name);

        for (g = groups; g != NULL; g = g->next) {
            if (g->len == len && memcmp(g->name, m->name, len) == 0) {
                break;
            }
        }
        if (g == NULL) {
            g = fd_pcalloc(st->pool, sizeof(status_group_t));
            if (g == NULL) {
                goto failed;
            }
            g->name = m->name;
            g->len = len;
            g->entities_last = &g->entities;
            *groups_last = g;
            groups_last = &g->next;
        }

        for (e = g->entities; e != NULL; e = e->next) {
            if (strcmp(e->labels, m->labels) == 0) {
                break;
            }
        }
        if (e == NULL) {
            e = fd_pcalloc(st->pool, sizeof(status_entity_t));
            if (e == NULL) {
                goto failed;
            }
            e->labels = m->labels;
            e->fields_last = &e->fields;
            *g->entities_last = e;
            g->entities_last = &e->next;
        }

        f = fd_palloc(st->pool, sizeof(status_field_t));
        if (f == NULL) {
            goto failed;
        }
        f->name = us ? us + 1 : "value";
        f->v = v;
        f->next = NULL;
        *e->fields_last = f;
        e->fields_last = &f->next;
    }

    jw_key(w, "modules");
    jw_open(w, '{');
    for (g = groups; g != NULL; g = g->next) {
        jw_key_n(w, g->name, g->len);
        jw_open(w, '[');
        for (e = g->entities; e != NULL; e = e->next) {
            jw_next(w);
            jw_open(w, '{');
            if (labels_valid(e->labels)) {
                json_labels(w, e->labels);
            } else {
                jw_string(w, "labels", e->labels);
            }
            for (f = e->fields; f != NULL; f = f->next) {
                jw_uint(w, f->name, f->v);
            }
            jw_close(w, '}');
        }
        jw_close(w, ']');
    }
    jw_close(w, '}');
    return;

failed:
    w->failed = 1;
}

static void json_worker(json_w_t *w, fd_status_t *st, status_view_t *v,
                        unsigned i)
{
    fd_stats_t *s = fd_shm_slot(v->shm, i);
    uint64_t up = v->now > s->started_msec ? v->now - s->started_msec : 0;

    jw_next(w);
    jw_open(w, '{');
    jw_uint(w, "slot", i);
    jw_uint(w, "pid", s->pid);
    jw_uint(w, "generation", s->generation);
    jw_key(w, "alive");
    if (s->alive != 0) {
        fd_sbuf_add_lit(w->sb, "true");
    } else {
        fd_sbuf_add_lit(w->sb, "false");
    }
    jw_uint(w, "uptime_s", up / 1000);
    json_stats(w, s);
    json_modules(w, st, i);
    jw_close(w, '}');
}

static int render_json(fd_request_t *r, fd_status_t *st, status_view_t *v)
{
    fd_sbuf_t sb;
    json_w_t w = {.sb = &sb};
    uint64_t up;
    unsigned i;

    if (fd_sbuf_init(&sb, r->pool, 16384) != FD_OK) {
        return FD_ERROR;
    }
    up = v->now > v->shm->started_msec ? v->now - v->shm->started_msec : 0;

    jw_open(&w, '{');
    jw_string(&w, "version", FASTD_VERSION);
    jw_uint(&w, "pid", v->shm->master_pid);
    jw_uint(&w, "time_msec", v->now);
    jw_uint(&w, "uptime_s", up / 1000);
    jw_uint(&w, "generation", v->generation);
    if (v->shm->profile[0] != '\0') {
        jw_string(&w, "profile", v->shm->profile);
    } else {
        jw_key(&w, "profile");
        fd_sbuf_add_lit(&sb, "null");
    }
    json_stats(&w, &v->total);

    jw_key(&w, "workers");
    jw_open(&w, '[');
    for (i = 0; i < v->shm->slots_used; i++) {
        if (fd_shm_slot(v->shm, i)->pid != 0) {
            json_worker(&w, st, v, i);
        }
    }
    jw_close(&w, ']');

    json_modules(&w, st, FD_STATUS_RETIRED);
    jw_close(&w, '}');
    fd_sbuf_addc(&sb, '\n');

    if (fd_sbuf_failed(&sb) || w.failed) {
        return FD_ERROR;
    }
    r->content_type = fd_string("application/json");
    return fd_http_body_set(r, sb.start, fd_sbuf_len(&sb));
}

/* Prometheus text exposition 0.0.4, into an fd_sbuf in the request pool */

/* s with '\\' and newlines escaped (HELP text); also '"' for a label value */
static void prom_escape(fd_sbuf_t *sb, const char *s, int label)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || (label && *s == '"')) {
            fd_sbuf_addc(sb, '\\');
            fd_sbuf_addc(sb, *s);
        } else if (*s == '\n') {
            fd_sbuf_add_lit(sb, "\\n");
        } else {
            fd_sbuf_addc(sb, *s);
        }
    }
}

/* A time's unit, from the end of its name (fd_status.h): how many make a
 * second and where the unit starts, or 0. */
static uint64_t prom_unit(const char *name, size_t *base)
{
    static const struct {
        const char *suffix;
        uint64_t per_second;
    } units[] = {{"_msec", 1000},
                 {"_usec", 1000000},
                 {"_msec_sum", 1000},
                 {"_usec_sum", 1000000}};
    size_t n = strlen(name), k;
    unsigned i;

    for (i = 0; i < fd_nelems(units); i++) {
        k = strlen(units[i].suffix);
        if (n > k && strcmp(name + n - k, units[i].suffix) == 0) {
            *base = n - k;
            return units[i].per_second;
        }
    }
    *base = n;
    return 0;
}

/* fastd_NAME, times in seconds, counters with _total */
static void prom_name(fd_sbuf_t *sb, const fd_status_metric_t *m,
                      int per_worker)
{
    size_t n;
    uint64_t time = prom_unit(m->name, &n);

    if (per_worker) {
        fd_sbuf_add_lit(sb, "fastd_worker_");
    } else {
        fd_sbuf_add_lit(sb, "fastd_");
    }
    fd_sbuf_add(sb, m->name, n);
    if (time != 0) {
        fd_sbuf_add_lit(sb, "_seconds");
    }
    if (!m->gauge) {
        fd_sbuf_add_lit(sb, "_total");
    }
}

/* A sample's value: a time in seconds as an exact decimal, or as it is. */
static void prom_value(fd_sbuf_t *sb, const fd_status_metric_t *m, uint64_t v)
{
    size_t n;
    uint64_t per = prom_unit(m->name, &n);

    if (per == 0) {
        fd_sbuf_add_uint(sb, v);
        return;
    }
    fd_sbuf_add_uint(sb, v / per);
    fd_sbuf_printf(sb, per == 1000 ? ".%03u" : ".%06u", (unsigned)(v % per));
}

/* A family without labels, from a core figure of the segment. */
static void prom_gauge(fd_sbuf_t *sb, const char *name, const char *help,
                       uint64_t v)
{
    fd_sbuf_printf(sb, "# HELP %s %s\n# TYPE %s gauge\n%s ", name, help, name,
                   name);
    fd_sbuf_add_uint(sb, v);
    fd_sbuf_addc(sb, '\n');
}

/* Has a worker a sample of the family named like m? Not of a shared
 * figure, nor of one only exited workers had. */
static int prom_per_worker(const fd_status_metric_t *m)
{
    const fd_status_metric_t *e;

    for (e = m; e != NULL; e = e->next) {
        if (e->samples != NULL && strcmp(e->name, m->name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* One family: the metrics named like m (all label sets), totals or per
 * worker. */
static void prom_family(fd_sbuf_t *sb, fd_status_metric_t *m, int per_worker)
{
    fd_status_metric_t *e;
    fd_status_sample_t *s;

    fd_sbuf_add_lit(sb, "# HELP ");
    prom_name(sb, m, per_worker);
    fd_sbuf_addc(sb, ' ');
    prom_escape(sb, m->help, 0);
    if (per_worker) {
        fd_sbuf_add_lit(sb, " (per worker)");
    }
    fd_sbuf_add_lit(sb, "\n# TYPE ");
    prom_name(sb, m, per_worker);
    if (m->gauge) {
        fd_sbuf_add_lit(sb, " gauge\n");
    } else {
        fd_sbuf_add_lit(sb, " counter\n");
    }

    for (e = m; e != NULL; e = e->next) {
        size_t ln = strlen(e->labels);

        if (strcmp(e->name, m->name) != 0) {
            continue;
        }
        if (!per_worker) {
            prom_name(sb, e, 0);
            if (ln) {
                fd_sbuf_addc(sb, '{');
                fd_sbuf_add(sb, e->labels, ln);
                fd_sbuf_addc(sb, '}');
            }
            fd_sbuf_addc(sb, ' ');
            prom_value(sb, e, e->total);
            fd_sbuf_addc(sb, '\n');
            continue;
        }
        for (s = e->samples; s != NULL; s = s->next) {
            prom_name(sb, e, 1);
            fd_sbuf_add_lit(sb, "{worker=\"");
            fd_sbuf_add_uint(sb, s->worker);
            fd_sbuf_addc(sb, '"');
            if (ln) {
                fd_sbuf_addc(sb, ',');
                fd_sbuf_add(sb, e->labels, ln);
            }
            fd_sbuf_add_lit(sb, "} ");
            prom_value(sb, e, s->v);
            fd_sbuf_addc(sb, '\n');
        }
    }
}

static int render_prometheus(fd_request_t *r, fd_status_t *st,
                             status_view_t *v)
{
    fd_status_metric_t *m, *e;
    unsigned i, n = 0;
    int per_worker;
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, 16384) != FD_OK) {
        return FD_ERROR;
    }

    for (i = 0; i < v->shm->slots_used; i++) {
        fd_stats_t *s = fd_shm_slot(v->shm, i);
        n += s->pid != 0 && s->alive != 0;
    }

    fd_sbuf_add_lit(&sb, "# HELP fastd_info Build and configuration.\n"
                         "# TYPE fastd_info gauge\n"
                         "fastd_info{version=\"" FASTD_VERSION
                         "\",profile=\"");
    prom_escape(&sb, v->shm->profile, 1);
    fd_sbuf_add_lit(&sb, "\"} 1\n");
    prom_gauge(&sb, "fastd_start_time_seconds", "Master start time.",
               v->shm->started_msec / 1000);
    prom_gauge(&sb, "fastd_uptime_seconds", "Seconds since start.",
               v->now > v->shm->started_msec
                   ? (v->now - v->shm->started_msec) / 1000
                   : 0);
    prom_gauge(&sb, "fastd_master_pid", "Process id of the master.",
               v->shm->master_pid);
    prom_gauge(&sb, "fastd_generation",
               "Configuration generation, incremented on each reload.",
               v->generation);
    prom_gauge(&sb, "fastd_workers", "Worker processes running.", n);

    /* the totals, then the per-worker families; each family once */
    for (per_worker = 0; per_worker <= 1; per_worker++) {
        for (m = st->metrics; m != NULL; m = m->next) {
            for (e = st->metrics; e != m; e = e->next) {
                if (strcmp(e->name, m->name) == 0) {
                    break;
                }
            }
            if (e == m && (!per_worker || prom_per_worker(m))) {
                prom_family(&sb, m, per_worker);
            }
        }
    }

    if (fd_sbuf_failed(&sb)) {
        return FD_ERROR;
    }
    r->content_type = fd_string("text/plain; version=0.0.4; charset=utf-8");
    return fd_http_body_set(r, sb.start, fd_sbuf_len(&sb));
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
    fd_status_t st;
    status_view_t v = {.now = 0};
    void *copy;
    int rc;

    /* GET and HEAD only: the engine answers the others (.methods) */
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
    fd_status_init(&st, r->pool);

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
