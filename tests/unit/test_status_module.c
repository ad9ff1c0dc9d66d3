/*
 * Unit tests: the status documents (JSON and Prometheus) for figures no
 * fixed buffer holds: long metric names, long and escaped label values, a
 * thousand label sets, a profile name with quotes. Nothing may be cut or
 * fall back to the raw label text. Then the core figures gathered from
 * the slots: HTTP/2 per worker and in the totals, with the retired
 * workers' counters folded in and the gauge of live workers only. Then
 * times, shown to Prometheus in seconds, and a figure all workers share.
 * Then the API the module reads them through (fastd.h, 1.6): the server,
 * the workers, a short struct filled to its size, the i-th header.
 *
 * The module is included whole, under a descriptor name of its own; the
 * figures it renders are made here with the engine's writer.
 */
#define FD_API_BUILTIN fd_status_api_module_unit
#include "../../modules/fd_status_module.c"

#include "fd_core.h"
#include "fd_http.h"
#include "fd_status.h"

#include "tap.h"

/* The body of r as one NUL-terminated string. */
static char *body(fd_request_t *r)
{
    size_t n = 0;
    fd_buf_t *b;
    char *s, *p;

    for (b = r->out; b; b = b->next)
        n += (size_t)(b->last - b->pos);
    s = p = fd_pnalloc(r->pool, n + 1);
    for (b = r->out; b; b = b->next) {
        memcpy(p, b->pos, (size_t)(b->last - b->pos));
        p += b->last - b->pos;
    }
    *p = '\0';
    return s;
}

static char *repeat(fd_pool_t *p, char c, size_t n)
{
    char *s = fd_pnalloc(p, n + 1);

    memset(s, c, n);
    s[n] = '\0';
    return s;
}

int main(void)
{
    fd_pool_t *p = fd_pool_create(4096);
    fd_request_t r = {.pool = p};
    fd_status_figures_t *v;
    fd_status_t *st;
    char *up = repeat(p, 'u', 300), *srv = repeat(p, 's', 600);
    char *group = repeat(p, 'g', 300), *doc;
    static char labels[1024], name[512], want[2048];
    unsigned i, n;
    size_t len;

    if (fd_modules_init() != FD_OK) /* as main() does */
        return 1;
    if (fd_shm_init() != FD_OK)
        return 1;
    v = fd_status_figures_take(p);
    if (v == NULL)
        return 1;
    snprintf(v->shm->profile, sizeof(v->shm->profile), "a\"b\\c");
    st = &v->st;
    st->worker = 0;
    snprintf(labels, sizeof(labels), "upstream=\"%s\",server=\"%s\"", up, srv);
    fd_status_counter(st, "upstream_requests", "Requests.", labels, 7);
    fd_status_counter(st, "upstream_fails", "Fails.", "upstream=\"q\\\"x\","
                      "server=\"b\\\\s\\nl\"", 3);
    snprintf(name, sizeof(name), "%s_field", group);
    fd_status_gauge(st, name, "A long name.", NULL, 5);
    for (i = 0; i < 1000; i++) {
        char l[64];

        snprintf(l, sizeof(l), "queue=\"q%u\"", i);
        fd_status_counter(st, "queue_admitted", "Admitted.", l, i);
    }
    fd_status_counter(st, "odd_count", "Malformed labels.", "no quotes", 1);
    ok(!st->failed, "1004 figures reported");

    /* JSON */
    is_int(render_json(&r, v), FD_OK, "JSON rendered");
    doc = body(&r);
    snprintf(want, sizeof(want), "\"upstream\": \"%s\"", up);
    ok(strstr(doc, want) != NULL, "JSON: a 300-byte label value whole");
    snprintf(want, sizeof(want), "\"server\": \"%s\"", srv);
    ok(strstr(doc, want) != NULL, "JSON: a 600-byte label value whole");
    snprintf(want, sizeof(want), "\"labels\": \"upstream=");
    ok(strstr(doc, want) == NULL, "JSON: no raw-labels fallback");
    ok(strstr(doc, "\"upstream\": \"q\\\"x\"") != NULL
       && (strstr(doc, "\"server\": \"b\\\\s\\nl\"") != NULL
           || strstr(doc, "\"server\": \"b\\\\s\\u000al\"") != NULL),
       "JSON: escaped label values, re-escaped for JSON");
    snprintf(want, sizeof(want), "\"%s\": [", group);
    ok(strstr(doc, want) != NULL, "JSON: a 300-byte group name whole");
    ok(strstr(doc, "\"queue\": \"q999\"") != NULL, "JSON: the 1000th queue");
    ok(strstr(doc, "\"profile\": \"a\\\"b\\\\c\"") != NULL,
       "JSON: the profile escaped");
    ok(strstr(doc, "\"labels\": \"no quotes\",") != NULL
       && strstr(doc, "\"count\": 1") != NULL,
       "JSON: malformed labels kept as one string");
    len = strlen(doc);
    ok(len > 0 && doc[len - 1] == '\n', "JSON: ends in a newline");
    is_int((int)r.content_length, (int)len, "JSON: Content-Length");

    /* Prometheus */
    r.out = NULL;
    is_int(render_prometheus(&r, v), FD_OK, "Prometheus rendered");
    doc = body(&r);
    snprintf(want, sizeof(want),
             "\nfastd_upstream_requests_total{upstream=\"%s\",server=\"%s\"}"
             " 7\n", up, srv);
    ok(strstr(doc, want) != NULL, "Prometheus: the long labels whole");
    snprintf(want, sizeof(want),
             "\n# TYPE fastd_%s_field gauge\nfastd_%s_field 5\n", group,
             group);
    ok(strstr(doc, want) != NULL, "Prometheus: a 306-byte name whole");
    snprintf(want, sizeof(want), "\nfastd_worker_%s_field{worker=\"0\"} 5\n",
             group);
    ok(strstr(doc, want) != NULL, "Prometheus: per worker, whole");
    ok(strstr(doc, "\nfastd_queue_admitted_total{queue=\"q999\"} 999\n")
       != NULL, "Prometheus: the 1000th queue");
    ok(strstr(doc, "fastd_info{version=\"" FASTD_VERSION
                   "\",profile=\"a\\\"b\\\\c\"} 1\n") != NULL,
       "Prometheus: the profile escaped");
    for (n = 0, i = 0; doc[i]; i++)
        n += doc[i] == '\n';
    ok(n > 2000, "Prometheus: every sample (%u lines)", n);

    /* HTTP/2: a live worker, an exited one not yet retired, the retired */
    {
        fd_status_figures_t *v2 = fd_status_figures_take(p);
        fd_stats_t *w0 = fd_shm_slot(v2->shm, 0), *w1 = fd_shm_slot(v2->shm, 1);
        fd_stats_t *ret = &v2->shm->retired;

        w0->pid = 101, w0->alive = 1;
        w0->h2_conns = 10, w0->h2_active = 3, w0->h2_streams = 320;
        w0->h2_resets = 4, w0->h2_goaways = 1;
        w1->pid = 102, w1->alive = 0;
        w1->h2_conns = 5, w1->h2_active = 2, w1->h2_streams = 50;
        w1->h2_resets = 6, w1->h2_goaways = 2;
        v2->shm->slots_used = 2;
        ret->h2_conns = 1000, ret->h2_active = 7, ret->h2_streams = 9000;
        ret->h2_resets = 40, ret->h2_goaways = 20;

        fd_status_figures_gather(v2);
        ok(!v2->st.failed, "HTTP/2: gathered");

        r.out = NULL;
        is_int(render_json(&r, v2), FD_OK, "HTTP/2: JSON rendered");
        doc = body(&r);
        /* the totals: every counter summed, the gauge of w0 only */
        ok(strstr(doc, "\n \"http2\": {\n  \"connections\": 1015,\n"
                       "  \"active\": 3,\n  \"streams\": 9370,\n"
                       "  \"resets\": 50,\n  \"goaways\": 23\n }")
           != NULL, "HTTP/2: JSON totals, retired folded in, live gauge");
        ok(strstr(doc, "\"http2\": {\n    \"connections\": 10,\n"
                       "    \"active\": 3,\n    \"streams\": 320,\n"
                       "    \"resets\": 4,\n    \"goaways\": 1\n   }")
           != NULL, "HTTP/2: JSON of worker 0");
        ok(strstr(doc, "\"http2\": {\n    \"connections\": 5,\n")
           != NULL, "HTTP/2: JSON of the exited worker");

        r.out = NULL;
        is_int(render_prometheus(&r, v2), FD_OK,
               "HTTP/2: Prometheus rendered");
        doc = body(&r);
        ok(strstr(doc, "\n# TYPE fastd_http2_connections_total counter\n"
                       "fastd_http2_connections_total 1015\n") != NULL,
           "Prometheus: fastd_http2_connections_total");
        ok(strstr(doc, "\n# HELP fastd_http2_active_connections ") != NULL
           && strstr(doc, "\n# TYPE fastd_http2_active_connections gauge\n"
                          "fastd_http2_active_connections 3\n") != NULL,
           "Prometheus: fastd_http2_active_connections, live workers only");
        ok(strstr(doc, "\nfastd_http2_streams_total 9370\n") != NULL,
           "Prometheus: fastd_http2_streams_total");
        ok(strstr(doc, "\nfastd_http2_resets_total 50\n") != NULL,
           "Prometheus: fastd_http2_resets_total");
        ok(strstr(doc, "\nfastd_http2_goaways_total 23\n") != NULL,
           "Prometheus: fastd_http2_goaways_total");
        ok(strstr(doc, "\nfastd_worker_http2_streams_total{worker=\"1\"}"
                       " 50\n") != NULL
           && strstr(doc, "\nfastd_worker_http2_active_connections"
                          "{worker=\"0\"} 3\n") != NULL
           && strstr(doc, "fastd_worker_http2_active_connections"
                          "{worker=\"1\"}") == NULL,
           "Prometheus: per worker; no gauge for the exited one");
    }

    /* times in seconds, exact; a shared figure in the totals only */
    v = fd_status_figures_take(p);
    st = &v->st;
    st->worker = 0;
    fd_status_counter(st, "upstream_response_msec", "Time.", "u=\"a\"",
                      1234);
    fd_status_counter(st, "queue_wait_usec_sum", "Time.", NULL, 5);
    fd_status_gauge(st, "odd_last_msec", "A gauge.", NULL, 2000);
    st->worker = 1;
    fd_status_counter(st, "upstream_response_msec", "Time.", "u=\"a\"",
                      1000);
    st->worker = FD_STATUS_SHARED;
    fd_status_counter(st, "upstream_check_probes", "Probes.", NULL, 9);
    r.out = NULL;
    is_int(render_prometheus(&r, v), FD_OK, "times: rendered");
    doc = body(&r);
    ok(strstr(doc, "\n# TYPE fastd_upstream_response_seconds_total counter\n"
                   "fastd_upstream_response_seconds_total{u=\"a\"} 2.234\n")
       != NULL, "Prometheus: _msec counted in seconds, with _total");
    ok(strstr(doc, "\nfastd_worker_upstream_response_seconds_total"
                   "{worker=\"1\",u=\"a\"} 1.000\n") != NULL,
       "Prometheus: per worker too");
    ok(strstr(doc, "\nfastd_queue_wait_seconds_total 0.000005\n") != NULL,
       "Prometheus: _usec_sum is seconds, _total");
    ok(strstr(doc, "\n# TYPE fastd_odd_last_seconds gauge\n"
                   "fastd_odd_last_seconds 2.000\n") != NULL,
       "Prometheus: a gauge in seconds");
    ok(strstr(doc, "msec") == NULL && strstr(doc, "usec") == NULL,
       "Prometheus: no msec or usec in any name");
    ok(strstr(doc, "\nfastd_upstream_check_probes_total 9\n") != NULL
       && strstr(doc, "fastd_worker_upstream_check_probes") == NULL,
       "Prometheus: a shared figure in the totals, no per-worker family");
    r.out = NULL;
    is_int(render_json(&r, v), FD_OK, "times: JSON rendered");
    doc = body(&r);
    ok(strstr(doc, "\"response_msec\": 2234") != NULL
       && strstr(doc, "\"wait_usec_sum\": 5") != NULL,
       "JSON: times as they are counted, in their unit");

    /* the API the module reads the figures through */
    {
        fd_status_figures_t *f = fd_status_figures_take(p);
        fd_stats_t *w0 = fd_shm_slot(f->shm, 0), *w1 = fd_shm_slot(f->shm, 1);
        fd_api_server_info_t srv;
        fd_api_worker_info_t wi;
        fd_api_core_figures_t c;
        const fd_api_metric_t *m;
        const fd_api_sample_t *smp;
        unsigned core = 0, worker;
        uint64_t val;
        char pad[sizeof(c)];

        w0->pid = 201, w0->alive = 1, w0->generation = 3, w0->requests = 5;
        w0->ssl_failed[FD_SSL_FAIL_TIMEOUT] = 2;
        w1->pid = 202, w1->alive = 0, w1->requests = 7;
        f->shm->slots_used = 3; /* slot 2: free */
        f->shm->retired.requests = 100;
        f->shm->master_pid = 200;
        snprintf(f->shm->profile, sizeof(f->shm->profile), "bench");
        fd_status_figures_gather(f);

        fd_api_figures_server(f, &srv, sizeof(srv));
        ok(srv.master_pid == 200 && srv.slots == 3 && srv.workers == 1
           && strcmp(srv.profile, "bench") == 0 && srv.generation == 3,
           "API: the server (3 slots, 1 worker running, the profile)");
        ok(fd_api_figures_worker(f, 0, &wi, sizeof(wi)) == FD_OK
           && wi.pid == 201 && wi.alive && wi.generation == 3
           && fd_api_figures_worker(f, 1, &wi, sizeof(wi)) == FD_OK
           && wi.pid == 202 && !wi.alive,
           "API: a live worker and an exited one");
        ok(fd_api_figures_worker(f, 2, &wi, sizeof(wi)) == FD_DECLINED
           && fd_api_figures_worker(f, 3, &wi, sizeof(wi)) == FD_DECLINED
           && fd_api_figures_core(f, 2, &c, sizeof(c)) == FD_DECLINED,
           "API: a free slot and one past the last are declined");
        ok(fd_api_figures_core(f, FD_API_FIGURES_TOTAL, &c, sizeof(c))
               == FD_OK
           && c.requests == 112 && c.tls_failed[FD_SSL_FAIL_TIMEOUT] == 2,
           "API: the totals, the retired folded in");
        memset(pad, 0xab, sizeof(pad));
        fd_api_figures_core(f, 0, (fd_api_core_figures_t *)(void *)pad,
                            offsetof(fd_api_core_figures_t, requests) + 8);
        memcpy(&val, pad + offsetof(fd_api_core_figures_t, requests), 8);
        ok(val == 5 && (unsigned char)pad[sizeof(pad) - 1] == 0xab
           && (unsigned char)pad[offsetof(fd_api_core_figures_t, requests)
                                 + 8] == 0xab,
           "API: a struct filled up to the size the module passed");
        ok(strcmp(fd_api_tls_failure_name(0), "protocol") == 0
           && fd_api_tls_failure_name(FD_SSL_FAIL_N) == NULL,
           "API: the TLS failures' names, NULL past the last");
        for (m = fd_api_figures_metrics(f); m; m = fd_api_metric_next(m))
            if (fd_api_metric_flags(m) & FD_API_METRIC_CORE) {
                core++;
                if (strcmp(fd_api_metric_name(m), "requests") == 0) {
                    smp = fd_api_metric_sample(m, NULL, &worker, &val);
                    ok(smp && worker == 0 && val == 5
                       && (smp = fd_api_metric_sample(m, smp, &worker,
                                                      &val))
                       && worker == 1 && val == 7
                       && fd_api_metric_sample(m, smp, &worker, &val)
                              == NULL
                       && fd_api_metric_total(m) == 112,
                       "API: a metric's samples, in slot order, and total");
                }
            }
        ok(core > 20, "API: fastd's own figures are metrics (%u)", core);
    }

    /* the i-th header: Accept twice, the second asks for Prometheus */
    {
        fd_http_header_t h[3] = {
            {.name = fd_string("Accept"), .value = fd_string("text/html")},
            {.name = fd_string("Host"), .value = fd_string("x")},
            {.name = fd_string("accept"),
             .value = fd_string("text/plain;version=0.0.4")}};
        fd_request_t hr = {.pool = p};
        fd_api_sbuf_t *sb;
        fd_str_t str;

        hr.in.headers = h;
        hr.in.nheaders = 3;
        ok(fd_req_header_at(&hr, "ACCEPT", 1).len == 24
           && fd_req_header_at(&hr, "Accept", 2).data == NULL
           && fd_req_header_at(&hr, "Host", 0).len == 1,
           "fd_req_header_at: the second Accept, none past it");
        ok(want_prometheus(&hr), "Prometheus asked by the second Accept");
        hr.in.nheaders = 2;
        ok(!want_prometheus(&hr), "JSON when no Accept asks");

        sb = fd_req_sbuf(&hr, 4);
        for (i = 0; i < 100; i++)
            fd_api_sbuf_add(sb, "0123456789", 10);
        fd_api_sbuf_printf(sb, "%s|%u", repeat(p, 'x', 500), 7u);
        str = fd_api_sbuf_str(sb);
        ok(!fd_api_sbuf_failed(sb) && str.len == 1000 + 502
           && memcmp(str.data + 1000 + 500, "|7", 2) == 0,
           "fd_api_sbuf: grows past its first capacity, printf whole");
    }

    fd_pool_destroy(p);
    return done_testing();
}
