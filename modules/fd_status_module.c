/*
 * handler = status: the server's figures, summed over every worker slot of
 * the shared-memory segment (plus the folded counters of exited workers),
 * with per-worker detail. GET or HEAD only; never cached.
 *
 * JSON (the default; written with the API's string builder):
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
 *     "quic": {"connections", "active_connections", "closed_connections",
 *              "streams", "retries", "retries_validated", "lost_packets",
 *              "migrations", "stateless_resets", "dropped_initials",
 *              "forwarded_datagrams", "forward_dropped_datagrams",
 *              "gso_sends"},
 *     "workers": [{"slot", "pid", "generation", "alive", "uptime_s",
 *                  "connections": {...}, "requests",
 *                  "responses": {...}, "bytes": {...}, "tls": {...},
 *                  "http2": {...}, "quic": {...}, "modules": {...}}],
 *     "modules": {GROUP: [{LABEL: "value", ..., FIELD: N, ...}]}
 *   }
 * "modules" holds what the modules report through their status hook (see
 * core/http/fd_status.h): metric "queue_waiting" with labels queue="api" is
 * modules.queue[{"queue": "api", "waiting": N}]. "quic" is there when
 * fastd is built with HTTP/3: fastd's own figures that the API's struct
 * has no place for, found by their names (quic_connections, ...).
 *
 * A module on the public API (fastd.h, 1.6): fd_req_figures() gathers the
 * figures, this file only writes them.
 *
 * Prometheus text exposition 0.0.4, for ?format=prometheus or an Accept
 * header asking for text/plain;version=0.0.4: every figure as fastd_NAME
 * (counters fastd_NAME_total, times in seconds) summed over workers, and
 * again per worker as fastd_worker_NAME{worker="SLOT"}, for every live
 * worker, except the figures all workers share (health checks, resolved
 * addresses, cache indexes); the totals include exited workers.
 */

#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "fastd.h"

static const char *const classes[6] = {"other", "1xx", "2xx",
                                       "3xx",   "4xx", "5xx"};

/*
 * The metrics, read once a request into a table (fd_api_metric_* is a call
 * a field, and the documents look at each metric many times: a family is
 * the metrics of one name, found by comparing names).
 */
typedef struct {
    const fd_api_metric_t *m;
    const char *name;
    const char *labels;
    unsigned flags;          /* FD_API_METRIC_* */
    int sampled;             /* a live worker reported it */
    uint64_t total;
    uint64_t per_second;     /* a time (fd_status.h): how many a second */
    size_t base;             /* the name's length before its unit (both
                                for Prometheus only) */
} metric_t;

typedef struct {
    metric_t *v;
    unsigned n;
} metrics_t;

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

    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        k = strlen(units[i].suffix);
        if (n > k && strcmp(name + n - k, units[i].suffix) == 0) {
            *base = n - k;
            return units[i].per_second;
        }
    }
    *base = n;
    return 0;
}

static int metrics_load(fd_request_t *r, const fd_api_figures_t *f,
                        metrics_t *ms)
{
    const fd_api_metric_t *m;
    unsigned n = 0, worker;
    uint64_t v;
    metric_t *e;

    for (m = fd_api_figures_metrics(f); m != NULL; m = fd_api_metric_next(m))
    {
        n++;
    }
    ms->n = n;
    ms->v = fd_req_alloc(r, (n ? n : 1) * sizeof(metric_t));
    if (ms->v == NULL) {
        return FD_ERROR;
    }
    for (m = fd_api_figures_metrics(f), e = ms->v; m != NULL;
         m = fd_api_metric_next(m), e++)
    {
        e->m = m;
        e->name = fd_api_metric_name(m);
        e->labels = fd_api_metric_labels(m);
        e->flags = fd_api_metric_flags(m);
        e->sampled = fd_api_metric_sample(m, NULL, &worker, &v) != NULL;
        e->total = fd_api_metric_total(m);
    }
    return FD_OK;
}

/*
 * JSON, written straight into the request's string builder, laid out as
 * one member per line with one space of indent per level. The writer keeps
 * only the depth and whether the open object or array has a member yet.
 */

typedef struct {
    fd_request_t *r;
    fd_api_sbuf_t *sb;
    unsigned depth;
    int empty; /* the innermost open object or array has no member yet */
    int failed; /* out of request memory outside the builder */
} json_w_t;

static void jw_indent(json_w_t *w)
{
    static const char nl[] = "\n                                ";
    unsigned d = w->depth, n;

    n = d < sizeof(nl) - 2 ? d : (unsigned)sizeof(nl) - 2;
    fd_api_sbuf_add(w->sb, nl, n + 1);
    for (d -= n; d > 0; d -= n) {
        n = d < sizeof(nl) - 2 ? d : (unsigned)sizeof(nl) - 2;
        fd_api_sbuf_add(w->sb, nl + 1, n);
    }
}

/* The comma and the new line and indent before a member or an element,
 * into buf (2 + depth bytes): their length. */
#define JW_DEPTH_MAX 32
static size_t jw_prefix(json_w_t *w, char *buf)
{
    size_t n = 0;

    if (!w->empty) {
        buf[n++] = ',';
    }
    w->empty = 0;
    buf[n++] = '\n';
    memset(buf + n, ' ', w->depth);
    return n + w->depth;
}

/* Before a member or an element: the comma, the new line and the indent,
 * and a member's opening quote (quote), in one append. */
static void jw_next_quote(json_w_t *w, int quote)
{
    char buf[2 + JW_DEPTH_MAX + 1];
    size_t n;

    if (w->depth > JW_DEPTH_MAX) { /* deeper than any document here */
        fd_api_sbuf_add(w->sb, ",", !w->empty);
        w->empty = 0;
        jw_indent(w);
        fd_api_sbuf_add(w->sb, "\"", quote ? 1 : 0);
        return;
    }
    n = jw_prefix(w, buf);
    if (quote) {
        buf[n++] = '"';
    }
    fd_api_sbuf_add(w->sb, buf, n);
}

static void jw_next(json_w_t *w)
{
    jw_next_quote(w, 0);
}

static void jw_key_n(json_w_t *w, const char *k, size_t n)
{
    jw_next_quote(w, 1);
    fd_api_sbuf_add_json(w->sb, k, n);
    fd_api_sbuf_add(w->sb, "\": ", 3);
}

/* A member's key that needs no escaping (this file's names, fastd's TLS
 * failure names), with what goes before it, in one append. */
static void jw_key_plain(json_w_t *w, const char *k)
{
    char buf[2 + JW_DEPTH_MAX + 64 + 4];
    size_t kn = strlen(k), n;

    if (w->depth > JW_DEPTH_MAX || kn > 64) {
        jw_key_n(w, k, kn);
        return;
    }
    n = jw_prefix(w, buf);
    buf[n++] = '"';
    memcpy(buf + n, k, kn);
    memcpy(buf + n + kn, "\": ", 3);
    fd_api_sbuf_add(w->sb, buf, n + kn + 3);
}

static void jw_key(json_w_t *w, const char *k)
{
    jw_key_n(w, k, strlen(k));
}

static void jw_open(json_w_t *w, char c)
{
    fd_api_sbuf_addc(w->sb, c);
    w->depth++;
    w->empty = 1;
}

static void jw_close(json_w_t *w, char c)
{
    w->depth--;
    if (!w->empty) {
        jw_indent(w);
    }
    fd_api_sbuf_addc(w->sb, c);
    w->empty = 0;
}

/* A number member, its key one of jw_key_plain()'s. */
static void jw_uint(json_w_t *w, const char *k, uint64_t v)
{
    jw_key_plain(w, k);
    fd_api_sbuf_add_uint(w->sb, v);
}

static void jw_string(json_w_t *w, const char *k, const char *s)
{
    jw_key(w, k);
    fd_api_sbuf_addc(w->sb, '"');
    fd_api_sbuf_add_json(w->sb, s, strlen(s));
    fd_api_sbuf_addc(w->sb, '"');
}

static void jw_literal(json_w_t *w, const char *k, const char *lit)
{
    jw_key(w, k);
    fd_api_sbuf_add(w->sb, lit, strlen(lit));
}

static void json_stats(json_w_t *w, const fd_api_core_figures_t *s)
{
    const char *name;
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
        jw_uint(w, classes[k % 6], s->responses[k % 6]);
    }
    jw_close(w, '}');

    jw_key(w, "bytes");
    jw_open(w, '{');
    jw_uint(w, "in", s->bytes_in);
    jw_uint(w, "out", s->bytes_out);
    jw_close(w, '}');

    jw_key(w, "tls");
    jw_open(w, '{');
    jw_uint(w, "handshakes", s->tls12 + s->tls13);
    jw_uint(w, "resumed", s->tls_resumed);
    jw_key(w, "protocols");
    jw_open(w, '{');
    jw_uint(w, "TLSv1.2", s->tls12);
    jw_uint(w, "TLSv1.3", s->tls13);
    jw_close(w, '}');
    jw_key(w, "failures");
    jw_open(w, '{');
    for (k = 0; k < FD_API_TLS_FAILURES_MAX
                && (name = fd_api_tls_failure_name(k)) != NULL;
         k++)
    {
        jw_uint(w, name, s->tls_failed[k]);
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
        fd_api_sbuf_addc(w->sb, '"');
        for (v = k + kn + 2, end = v + vn; v < end; v++) {
            char c = *v;

            if (c == '\\') {
                c = *++v == 'n' ? '\n' : *v;
            }
            fd_api_sbuf_add_json(w->sb, &c, 1);
        }
        fd_api_sbuf_addc(w->sb, '"');
        p = end + 1;
        if (*p == ',') {
            p++;
        }
    }
}

/*
 * The modules' view, {GROUP: [entity, ...]}: one entity per group and
 * label set, in the order first reported, with the labels as strings and
 * the fields as numbers. Built as lists in the request's memory, then
 * written.
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

/* The value of metric m for worker slot i: 1 and *v, or 0 if none. */
static int worker_value(const metric_t *m, unsigned i, uint64_t *v)
{
    const fd_api_sample_t *s = NULL;
    unsigned worker;

    if (!m->sampled) {
        return 0;
    }
    while ((s = fd_api_metric_sample(m->m, s, &worker, v)) != NULL) {
        if (worker == i) {
            return 1;
        }
    }
    return 0;
}

/* fastd's own figures of group (the metrics named group_FIELD) as an
 * object {FIELD: N}, of a worker slot or FD_API_FIGURES_TOTAL; nothing
 * when there are none. */
static void json_core_group(json_w_t *w, const metrics_t *ms, unsigned worker,
                            const char *group)
{
    size_t len = strlen(group);
    const metric_t *m;
    int open = 0;
    uint64_t v;

    for (m = ms->v; m < ms->v + ms->n; m++) {
        if (!(m->flags & FD_API_METRIC_CORE) ||
            strncmp(m->name, group, len) != 0 || m->name[len] != '_') {
            continue;
        }
        if (worker == FD_API_FIGURES_TOTAL) {
            v = m->total;
        } else if (!worker_value(m, worker, &v)) {
            continue;
        }
        if (!open) {
            jw_key(w, group);
            jw_open(w, '{');
            open = 1;
        }
        jw_uint(w, m->name + len + 1, v);
    }
    if (open) {
        jw_close(w, '}');
    }
}

/* worker: a slot for the per-worker detail, or FD_API_FIGURES_TOTAL for
 * the totals. */
static void json_modules(json_w_t *w, const metrics_t *ms, unsigned worker)
{
    status_group_t *groups = NULL, **groups_last = &groups, *g;
    status_entity_t *e;
    status_field_t *f;
    const metric_t *m;
    const char *name, *labels, *us;
    size_t len;
    uint64_t v;

    for (m = ms->v; m < ms->v + ms->n; m++) {
        if (m->flags & FD_API_METRIC_CORE) {
            continue;
        }
        if (worker == FD_API_FIGURES_TOTAL) {
            v = m->total;
        } else if (!worker_value(m, worker, &v)) {
            continue;
        }

        name = m->name;
        labels = m->labels;
        us = strchr(name, '_');
        len = us ? (size_t)(us - name) : strlen(name);

        for (g = groups; g != NULL; g = g->next) {
            if (g->len == len && memcmp(g->name, name, len) == 0) {
                break;
            }
        }
        if (g == NULL) {
            g = fd_req_alloc(w->r, sizeof(status_group_t));
            if (g == NULL) {
                goto failed;
            }
            g->name = name;
            g->len = len;
            g->entities = NULL;
            g->entities_last = &g->entities;
            g->next = NULL;
            *groups_last = g;
            groups_last = &g->next;
        }

        for (e = g->entities; e != NULL; e = e->next) {
            if (strcmp(e->labels, labels) == 0) {
                break;
            }
        }
        if (e == NULL) {
            e = fd_req_alloc(w->r, sizeof(status_entity_t));
            if (e == NULL) {
                goto failed;
            }
            e->labels = labels;
            e->fields = NULL;
            e->fields_last = &e->fields;
            e->next = NULL;
            *g->entities_last = e;
            g->entities_last = &e->next;
        }

        f = fd_req_alloc(w->r, sizeof(status_field_t));
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
                jw_key(w, f->name);
                fd_api_sbuf_add_uint(w->sb, f->v);
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

static void json_worker(json_w_t *w, const fd_api_figures_t *f,
                        const metrics_t *ms, const fd_api_server_info_t *srv,
                        unsigned i, const fd_api_worker_info_t *wi)
{
    fd_api_core_figures_t c;
    uint64_t up =
        srv->now_msec > wi->started_msec ? srv->now_msec - wi->started_msec
                                         : 0;

    jw_next(w);
    jw_open(w, '{');
    jw_uint(w, "slot", i);
    jw_uint(w, "pid", wi->pid);
    jw_uint(w, "generation", wi->generation);
    jw_literal(w, "alive", wi->alive ? "true" : "false");
    jw_uint(w, "uptime_s", up / 1000);
    fd_api_figures_core(f, i, &c, sizeof(c));
    json_stats(w, &c);
    json_core_group(w, ms, i, "quic");
    json_modules(w, ms, i);
    jw_close(w, '}');
}

static int render_json(fd_request_t *r, const fd_api_figures_t *f)
{
    json_w_t w = {.r = r};
    metrics_t ms;
    fd_api_server_info_t srv;
    fd_api_worker_info_t wi;
    fd_api_core_figures_t c;
    uint64_t up;
    unsigned i;
    fd_str_t doc;

    if ((w.sb = fd_req_sbuf(r, 16384)) == NULL
        || metrics_load(r, f, &ms) != FD_OK)
    {
        return FD_ERROR;
    }
    fd_api_figures_server(f, &srv, sizeof(srv));
    up = srv.now_msec > srv.started_msec ? srv.now_msec - srv.started_msec
                                         : 0;

    jw_open(&w, '{');
    jw_string(&w, "version", fd_api_fastd_version());
    jw_uint(&w, "pid", srv.master_pid);
    jw_uint(&w, "time_msec", srv.now_msec);
    jw_uint(&w, "uptime_s", up / 1000);
    jw_uint(&w, "generation", srv.generation);
    if (srv.profile[0] != '\0') {
        jw_string(&w, "profile", srv.profile);
    } else {
        jw_literal(&w, "profile", "null");
    }
    fd_api_figures_core(f, FD_API_FIGURES_TOTAL, &c, sizeof(c));
    json_stats(&w, &c);
    json_core_group(&w, &ms, FD_API_FIGURES_TOTAL, "quic");

    jw_key(&w, "workers");
    jw_open(&w, '[');
    for (i = 0; i < srv.slots; i++) {
        if (fd_api_figures_worker(f, i, &wi, sizeof(wi)) == FD_OK) {
            json_worker(&w, f, &ms, &srv, i, &wi);
        }
    }
    jw_close(&w, ']');

    json_modules(&w, &ms, FD_API_FIGURES_TOTAL);
    jw_close(&w, '}');
    fd_api_sbuf_addc(w.sb, '\n');

    if (fd_api_sbuf_failed(w.sb) || w.failed) {
        return FD_ERROR;
    }
    fd_resp_content_type_static(r, (fd_str_t){16, "application/json"});
    doc = fd_api_sbuf_str(w.sb);
    return fd_resp_body_static(r, doc.data, doc.len);
}

/* Prometheus text exposition 0.0.4, into the request's string builder */

/* s with '\\' and newlines escaped (HELP text); also '"' for a label value */
static void prom_escape(fd_api_sbuf_t *sb, const char *s, int label)
{
    const char *run = s;

    for (; *s != '\0'; s++) {
        if (*s == '\\' || (label && *s == '"') || *s == '\n') {
            fd_api_sbuf_add(sb, run, (size_t)(s - run));
            fd_api_sbuf_addc(sb, '\\');
            fd_api_sbuf_addc(sb, *s == '\n' ? 'n' : *s);
            run = s + 1;
        }
    }
    fd_api_sbuf_add(sb, run, (size_t)(s - run));
}

/* fastd_NAME, times in seconds, counters with _total */
static void prom_name(fd_api_sbuf_t *sb, const metric_t *m, int per_worker)
{
    if (per_worker) {
        fd_api_sbuf_add(sb, "fastd_worker_", 13);
    } else {
        fd_api_sbuf_add(sb, "fastd_", 6);
    }
    fd_api_sbuf_add(sb, m->name, m->base);
    if (m->per_second != 0) {
        fd_api_sbuf_add(sb, "_seconds", 8);
    }
    if (!(m->flags & FD_API_METRIC_GAUGE)) {
        fd_api_sbuf_add(sb, "_total", 6);
    }
}

/* A sample's value: a time in seconds as an exact decimal, or as it is. */
static void prom_value(fd_api_sbuf_t *sb, const metric_t *m, uint64_t v)
{
    uint64_t per = m->per_second;

    if (per == 0) {
        fd_api_sbuf_add_uint(sb, v);
        return;
    }
    fd_api_sbuf_add_uint(sb, v / per);
    fd_api_sbuf_printf(sb, per == 1000 ? ".%03u" : ".%06u",
                       (unsigned)(v % per));
}

/* A family without labels, from a figure of the server. */
static void prom_gauge(fd_api_sbuf_t *sb, const char *name, const char *help,
                       uint64_t v)
{
    fd_api_sbuf_printf(sb, "# HELP %s %s\n# TYPE %s gauge\n%s ", name, help,
                       name, name);
    fd_api_sbuf_add_uint(sb, v);
    fd_api_sbuf_addc(sb, '\n');
}

/* Has a worker a sample of the family named like m? Not of a shared
 * figure, nor of one only exited workers had. */
static int prom_per_worker(const metrics_t *ms, const metric_t *m)
{
    const metric_t *e;

    for (e = m; e < ms->v + ms->n; e++) {
        if (e->sampled && strcmp(e->name, m->name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* One family: the metrics named like m (all label sets), totals or per
 * worker. */
static void prom_family(fd_api_sbuf_t *sb, const metrics_t *ms,
                        const metric_t *m, int per_worker)
{
    const fd_api_sample_t *s;
    const metric_t *e;
    unsigned worker;
    uint64_t v;

    fd_api_sbuf_add(sb, "# HELP ", 7);
    prom_name(sb, m, per_worker);
    fd_api_sbuf_addc(sb, ' ');
    prom_escape(sb, fd_api_metric_help(m->m), 0);
    if (per_worker) {
        fd_api_sbuf_add(sb, " (per worker)", 13);
    }
    fd_api_sbuf_add(sb, "\n# TYPE ", 8);
    prom_name(sb, m, per_worker);
    if (m->flags & FD_API_METRIC_GAUGE) {
        fd_api_sbuf_add(sb, " gauge\n", 7);
    } else {
        fd_api_sbuf_add(sb, " counter\n", 9);
    }

    for (e = m; e < ms->v + ms->n; e++) {
        size_t ln;

        if (strcmp(e->name, m->name) != 0) {
            continue;
        }
        ln = strlen(e->labels);
        if (!per_worker) {
            prom_name(sb, e, 0);
            if (ln) {
                fd_api_sbuf_addc(sb, '{');
                fd_api_sbuf_add(sb, e->labels, ln);
                fd_api_sbuf_addc(sb, '}');
            }
            fd_api_sbuf_addc(sb, ' ');
            prom_value(sb, e, e->total);
            fd_api_sbuf_addc(sb, '\n');
            continue;
        }
        for (s = fd_api_metric_sample(e->m, NULL, &worker, &v); s != NULL;
             s = fd_api_metric_sample(e->m, s, &worker, &v))
        {
            prom_name(sb, e, 1);
            fd_api_sbuf_add(sb, "{worker=\"", 9);
            fd_api_sbuf_add_uint(sb, worker);
            fd_api_sbuf_addc(sb, '"');
            if (ln) {
                fd_api_sbuf_addc(sb, ',');
                fd_api_sbuf_add(sb, e->labels, ln);
            }
            fd_api_sbuf_add(sb, "} ", 2);
            prom_value(sb, e, v);
            fd_api_sbuf_addc(sb, '\n');
        }
    }
}

static int render_prometheus(fd_request_t *r, const fd_api_figures_t *f)
{
    static const char ct[] = "text/plain; version=0.0.4; charset=utf-8";
    const metric_t *m, *e;
    metric_t *u;
    fd_api_server_info_t srv;
    fd_api_sbuf_t *sb;
    metrics_t ms;
    int per_worker;
    fd_str_t doc;

    if ((sb = fd_req_sbuf(r, 16384)) == NULL
        || metrics_load(r, f, &ms) != FD_OK)
    {
        return FD_ERROR;
    }
    fd_api_figures_server(f, &srv, sizeof(srv));

    fd_api_sbuf_printf(sb,
                       "# HELP fastd_info Build and configuration.\n"
                       "# TYPE fastd_info gauge\n"
                       "fastd_info{version=\"%s\",profile=\"",
                       fd_api_fastd_version());
    prom_escape(sb, srv.profile, 1);
    fd_api_sbuf_add(sb, "\"} 1\n", 5);
    prom_gauge(sb, "fastd_start_time_seconds", "Master start time.",
               srv.started_msec / 1000);
    prom_gauge(sb, "fastd_uptime_seconds", "Seconds since start.",
               srv.now_msec > srv.started_msec
                   ? (srv.now_msec - srv.started_msec) / 1000
                   : 0);
    prom_gauge(sb, "fastd_master_pid", "Process id of the master.",
               srv.master_pid);
    prom_gauge(sb, "fastd_generation",
               "Configuration generation, incremented on each reload.",
               srv.generation);
    prom_gauge(sb, "fastd_workers", "Worker processes running.",
               srv.workers);

    /* the totals, then the per-worker families; each family once */
    for (u = ms.v; u < ms.v + ms.n; u++) {
        u->per_second = prom_unit(u->name, &u->base);
    }
    for (per_worker = 0; per_worker <= 1; per_worker++) {
        for (m = ms.v; m < ms.v + ms.n; m++) {
            for (e = ms.v; e != m; e++) {
                if (strcmp(e->name, m->name) == 0) {
                    break;
                }
            }
            if (e == m && (!per_worker || prom_per_worker(&ms, m))) {
                prom_family(sb, &ms, m, per_worker);
            }
        }
    }

    if (fd_api_sbuf_failed(sb)) {
        return FD_ERROR;
    }
    fd_resp_content_type_static(r, (fd_str_t){sizeof(ct) - 1, ct});
    doc = fd_api_sbuf_str(sb);
    return fd_resp_body_static(r, doc.data, doc.len);
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
    fd_str_t q = fd_req_query(r), a;
    unsigned i;

    if (has_param(q, "format=prometheus")) {
        return 1;
    }
    if (has_param(q, "format=json")) {
        return 0;
    }
    for (i = 0; (a = fd_req_header_at(r, "Accept", i)).data != NULL; i++) {
        if (accepts_prometheus(a)) {
            return 1;
        }
    }
    return 0;
}

static int status_handler(fd_request_t *r)
{
    const fd_api_figures_t *f;
    int rc;

    /* GET and HEAD only: the engine answers the others (.methods) */
    rc = fd_req_figures(r, &f);
    if (rc != FD_OK) {
        return rc; /* 503: no shared memory; 500 */
    }

    rc = want_prometheus(r) ? render_prometheus(r, f) : render_json(r, f);
    if (rc != FD_OK) {
        return 500;
    }

    fd_resp_status(r, 200);
    if (fd_resp_header_static(r, (fd_str_t){13, "Cache-Control"},
                              (fd_str_t){8, "no-store"})
        != FD_OK)
    {
        return 500;
    }
    return FD_OK;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "status",
    .handler = status_handler,
    .flags = FD_API_THREAD_SAFE,
    .methods = FD_API_GET | FD_API_HEAD,
};
