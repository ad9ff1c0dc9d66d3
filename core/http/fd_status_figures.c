/*
 * The server's figures for a reader (fastd.h, 1.6: fd_req_figures and the
 * fd_api_figures_*, fd_api_metric_* accessors): a copy of the shared
 * segment, fastd's own figures and the modules' (their status hooks)
 * gathered from it through the metric writer (fd_status.c), and what the
 * slots add up to. The status module renders them; nothing here knows a
 * document's format.
 */

#include "fd_core.h"
#include "fd_http.h"
#include "fd_ssl.h"
#include "fd_status.h"

_Static_assert(FD_SSL_FAIL_N <= FD_API_TLS_FAILURES_MAX,
               "every TLS failure reason has a place in the API's figures");

fd_status_figures_t *fd_status_figures_take(fd_pool_t *pool)
{
    fd_status_figures_t *f = fd_pcalloc(pool, sizeof(*f));
    void *copy = fd_palloc(pool, fd_shm_size());

    if (f == NULL || copy == NULL) {
        return NULL;
    }
    f->shm = fd_shm_snapshot(copy);
    f->shm->profile[sizeof(f->shm->profile) - 1] = '\0'; /* torn by a reload */
    f->now = fd_stats_wall_msec();
    fd_status_init(&f->st, pool);
    return f;
}

#ifdef FD_HTTP3
/* Core figures a reader finds by name (fd_api_core_figures_t has no
 * place for them): the status module writes the group as JSON "quic". */
static void quic_metrics(fd_status_t *st, const fd_stats_t *s, int alive)
{
    fd_status_counter(st, "quic_connections", "QUIC connections made.", NULL,
                      s->quic_conns);
    if (alive) {
        fd_status_gauge(st, "quic_active_connections", "Open QUIC connections.",
                        NULL, s->quic_active);
    }
    fd_status_counter(st, "quic_closed_connections", "QUIC connections ended.",
                      NULL, s->quic_closed);
    fd_status_counter(st, "quic_streams", "Requests carried by HTTP/3 streams.",
                      NULL, s->quic_streams);
    fd_status_counter(st, "quic_retries",
                      "Retry packets sent (address validation).", NULL,
                      s->quic_retries);
    fd_status_counter(st, "quic_retries_validated",
                      "Client addresses a Retry token validated.", NULL,
                      s->quic_validated);
    fd_status_counter(st, "quic_lost_packets",
                      "Packets with stream data declared lost, once for "
                      "each stream in them.",
                      NULL, s->quic_lost);
    fd_status_counter(st, "quic_migrations",
                      "Connections moved to the client's new address.", NULL,
                      s->quic_migrations);
    fd_status_counter(st, "quic_stateless_resets", "Stateless resets sent.",
                      NULL, s->quic_resets);
    fd_status_counter(st, "quic_dropped_initials",
                      "Client Initials that made no connection: "
                      "malformed, undecryptable, with a bad token, or "
                      "while stopping.",
                      NULL, s->quic_dropped);
    fd_status_counter(st, "quic_forwarded_datagrams",
                      "Datagrams handed to the worker that owns their "
                      "connection (another generation's after a reload).",
                      NULL, s->quic_forwarded);
    fd_status_counter(st, "quic_forward_dropped_datagrams",
                      "Datagrams to hand to another worker that were "
                      "dropped: its queue stayed full.",
                      NULL, s->quic_forward_dropped);
    fd_status_counter(st, "quic_gso_sends",
                      "Sends that carried several datagrams at once (UDP "
                      "GSO, quic_gso).",
                      NULL, s->quic_gso_sends);
}
#endif

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
#ifdef FD_HTTP3
    quic_metrics(st, s, alive);
#endif
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
        d->quic_conns += s->quic_conns;
        d->quic_closed += s->quic_closed;
        d->quic_streams += s->quic_streams;
        d->quic_retries += s->quic_retries;
        d->quic_validated += s->quic_validated;
        d->quic_lost += s->quic_lost;
        d->quic_migrations += s->quic_migrations;
        d->quic_resets += s->quic_resets;
        d->quic_dropped += s->quic_dropped;
        d->quic_forwarded += s->quic_forwarded;
        d->quic_forward_dropped += s->quic_forward_dropped;
        d->quic_gso_sends += s->quic_gso_sends;
    }
    if (gauges) {
        d->conn_active += s->conn_active;
        d->h2_active += s->h2_active;
        d->quic_active += s->quic_active;
        d->conn_reading += s->conn_reading;
        d->conn_writing += s->conn_writing;
        d->conn_idle += s->conn_idle;
        d->conn_parked += s->conn_parked;
    }
}

void fd_status_figures_gather(fd_status_figures_t *f)
{
    fd_status_t *st = &f->st;
    fd_stats_t *s;
    unsigned i, k;

    f->generation = f->shm->generation;

    for (i = 0; i < f->shm->slots_used; i++) {
        s = fd_shm_slot(f->shm, i);
        if (s->pid == 0) {
            continue; /* free, or retired */
        }
        /* an exited worker not yet retired still counts, but only the
         * live ones have connections */
        add_stats(&f->total, s, 1, s->alive != 0);
        f->workers += s->alive != 0;
        f->generation = fd_max(f->generation, s->generation);

        st->worker = i;
        core_metrics(st, s, s->alive != 0);
        for (k = 0; fd_modules[k] != NULL; k++) {
            const fd_module_t *m = fd_modules[k];

            if (m->status != NULL) {
                m->status(st, fd_stats_area(s, m), i);
            }
        }
    }

    add_stats(&f->total, &f->shm->retired, 1, 0);
    st->worker = FD_STATUS_RETIRED;
    core_metrics(st, &f->shm->retired, 0);
    for (k = 0; fd_modules[k] != NULL; k++) {
        const fd_module_t *m = fd_modules[k];

        if (m->status != NULL) {
            m->status(st, fd_shm_retired_area(f->shm, m), FD_STATUS_RETIRED);
        }
    }

    st->worker = FD_STATUS_SHARED;
    for (k = 0; fd_modules[k] != NULL; k++) {
        if (fd_modules[k]->status_shared != NULL) {
            fd_modules[k]->status_shared(st);
        }
    }
}

/* --- the public API's accessors --- */

int fd_req_figures(fd_request_t *r, const fd_api_figures_t **out)
{
    fd_status_figures_t *f;

    if (fd_shm == NULL) {
        return 503;
    }
    f = fd_status_figures_take(r->pool);
    if (f == NULL) {
        return 500;
    }
    fd_status_figures_gather(f);
    if (f->st.failed) {
        return 500;
    }
    *out = f;
    return FD_OK;
}

/* What fastd fills of a struct of the API's, up to the module's size:
 * one built for an older minor version has a shorter one. */
static void fill(void *dst, size_t size, const void *src, size_t n)
{
    memcpy(dst, src, fd_min(size, n));
}

void fd_api_figures_server(const fd_api_figures_t *f,
                           fd_api_server_info_t *info, size_t size)
{
    fd_api_server_info_t i = {
        .master_pid = f->shm->master_pid,
        .started_msec = f->shm->started_msec,
        .now_msec = f->now,
        .generation = f->generation,
        .profile = f->shm->profile,
        .slots = (unsigned)f->shm->slots_used,
        .workers = f->workers,
    };

    fill(info, size, &i, sizeof(i));
}

/* Slot i of the copy, or NULL for a free one and one past the used. */
static const fd_stats_t *figures_slot(const fd_api_figures_t *f, unsigned i)
{
    const fd_stats_t *s;

    if (i >= f->shm->slots_used) {
        return NULL;
    }
    s = fd_shm_slot(f->shm, i);
    return s->pid != 0 ? s : NULL;
}

int fd_api_figures_worker(const fd_api_figures_t *f, unsigned slot,
                          fd_api_worker_info_t *info, size_t size)
{
    const fd_stats_t *s = figures_slot(f, slot);
    fd_api_worker_info_t i;

    if (s == NULL) {
        return FD_DECLINED;
    }
    i = (fd_api_worker_info_t){
        .pid = s->pid,
        .generation = s->generation,
        .started_msec = s->started_msec,
        .alive = s->alive != 0,
    };
    fill(info, size, &i, sizeof(i));
    return FD_OK;
}

int fd_api_figures_core(const fd_api_figures_t *f, unsigned slot,
                        fd_api_core_figures_t *c, size_t size)
{
    const fd_stats_t *s =
        slot == FD_API_FIGURES_TOTAL ? &f->total : figures_slot(f, slot);
    fd_api_core_figures_t k;
    unsigned i;

    if (s == NULL) {
        return FD_DECLINED;
    }
    memset(&k, 0, sizeof(k));
    k.conn_active = s->conn_active;
    k.conn_reading = s->conn_reading;
    k.conn_writing = s->conn_writing;
    k.conn_idle = s->conn_idle;
    k.conn_parked = s->conn_parked;
    k.conn_accepted = s->conn_accepted;
    k.conn_handled = s->conn_handled;
    k.requests = s->requests;
    memcpy(k.responses, s->status, sizeof(k.responses));
    k.bytes_in = s->bytes_in;
    k.bytes_out = s->bytes_out;
    k.tls12 = s->ssl_tls12;
    k.tls13 = s->ssl_tls13;
    k.tls_resumed = s->ssl_resumed;
    for (i = 0; i < FD_SSL_FAIL_N; i++) {
        k.tls_failed[i] = s->ssl_failed[i];
    }
    k.h2_conns = s->h2_conns;
    k.h2_active = s->h2_active;
    k.h2_streams = s->h2_streams;
    k.h2_resets = s->h2_resets;
    k.h2_goaways = s->h2_goaways;
    fill(c, size, &k, sizeof(k));
    return FD_OK;
}

const char *fd_api_tls_failure_name(unsigned k)
{
    return k < FD_SSL_FAIL_N ? fd_ssl_failure_names[k] : NULL;
}

/* The public handles are the writer's own structs. */
#define METRIC(m) ((const fd_status_metric_t *)(const void *)(m))

const fd_api_metric_t *fd_api_figures_metrics(const fd_api_figures_t *f)
{
    return (const fd_api_metric_t *)(const void *)f->st.metrics;
}

const fd_api_metric_t *fd_api_metric_next(const fd_api_metric_t *m)
{
    return (const fd_api_metric_t *)(const void *)METRIC(m)->next;
}

const char *fd_api_metric_name(const fd_api_metric_t *m)
{
    return METRIC(m)->name;
}

const char *fd_api_metric_help(const fd_api_metric_t *m)
{
    return METRIC(m)->help;
}

const char *fd_api_metric_labels(const fd_api_metric_t *m)
{
    return METRIC(m)->labels;
}

unsigned fd_api_metric_flags(const fd_api_metric_t *m)
{
    return (METRIC(m)->gauge ? FD_API_METRIC_GAUGE : 0)
           | (METRIC(m)->core ? FD_API_METRIC_CORE : 0);
}

uint64_t fd_api_metric_total(const fd_api_metric_t *m)
{
    return METRIC(m)->total;
}

const fd_api_sample_t *fd_api_metric_sample(const fd_api_metric_t *m,
                                            const fd_api_sample_t *prev,
                                            unsigned *worker, uint64_t *v)
{
    const fd_status_sample_t *s =
        prev ? ((const fd_status_sample_t *)(const void *)prev)->next
             : METRIC(m)->samples;

    if (s == NULL) {
        return NULL;
    }
    *worker = s->worker;
    *v = s->v;
    return (const fd_api_sample_t *)(const void *)s;
}
