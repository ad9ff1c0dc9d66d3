/*
 * Active health checks ([upstream] health_check = URI ...): fastd asks
 * each server for URI every interval and takes a server that fails
 * `fails` probes in a row out of the group until it passes `passes` in a
 * row.
 *
 * One probe per interval per server for the whole fastd, not one per
 * worker, and one verdict every worker sees: the state lives in a table
 * shared by every process (mapped by the master at the first
 * configuration load, before any worker is forked, and kept across
 * reloads, so a reload neither forgets a server's health nor probes it
 * twice as often). Each worker keeps a timer per checked server; when it
 * fires, the worker that moves the entry's next probe time forward
 * (compare-and-swap on a monotonic clock every process shares) sends the
 * probe, and the others look again when the next one is due. A worker
 * that exits leaves nothing to take over: the others were waiting on
 * the same entry.
 *
 * A probe is a plain HTTP/1.1 GET with Connection: close on a connection
 * of its own (never a pooled one), bounded by timeout; a status in the
 * status= range is a pass, anything else (a refused or reset connection,
 * a timeout, another status, garbage) a failure. A group that locations
 * pass to with h2:// or grpc:// is probed over HTTP/2 (the GET on a
 * libnghttp2 client session of its own: prior knowledge, or ALPN h2 over
 * TLS); type=grpc asks the gRPC health protocol's
 * /grpc.health.v1.Health/Check instead, and passes on grpc-status 0 with
 * SERVING (or on grpc_status=N).
 *
 * A slot of server = NAME resolve (fd_upstream_resolve.c) has an entry of
 * its own, and the entry remembers the address it judged: a slot that
 * changed address is healthy until its new address has been probed (a
 * verdict on the old one says nothing of it), and an empty slot is not
 * probed.
 */
#include <netinet/in.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "fd_core.h"
#include "fd_realip.h"
#include "fd_ssl.h"
#include "fd_status.h"
#include "fd_upstream.h"

#define HEALTH_ENTRIES 256

/* One server's state, shared by every process. */
typedef struct {
    char upstream[32];
    char server[48];
    uint64_t next_at;          /* monotonic ms of the next probe (CAS) */
    uint32_t used;             /* claimed by a configuration */
    uint32_t healthy;          /* what every worker's balancer reads */
    uint32_t fails, passes;    /* in a row */
    uint32_t last_status;      /* the last probe's HTTP status; 0: none */
    uint32_t last_ok;
    uint64_t probes, failed;   /* counters */
    uint32_t salen;            /* resolve slots: the address judged */
    uint8_t sa[sizeof(struct sockaddr_in6)];
    char addr[48];             /* ... as text (server is NAME:PORT#i) */
} health_entry_t;

static health_entry_t *table;

typedef struct probe_s {
    fd_timer_t timer;
    fd_upstream_peer_t *peer;
    fd_upstream_conn_t *uc;
    size_t sent, got;
    unsigned gen;              /* the peer's when the probe started */
    char buf[64];
    /* HTTP/2 probes */
    nghttp2_session *ss;
    const uint8_t *out;        /* what mem_send gave, not sent yet */
    size_t outlen;
    int32_t stream;
    unsigned status;           /* :status of the final answer */
    int grpc_status;           /* -1: none yet */
    unsigned closed:1;         /* the stream ended */
    uint32_t reset;            /* its RST_STREAM code */
    uint8_t msg[16];           /* the gRPC answer's first bytes */
    size_t msglen;
} probe_t;

static health_entry_t *entry_of(const fd_upstream_peer_t *p)
{
    return table && p->health >= 0 ? &table[p->health] : NULL;
}

/* A resolve slot's entry judged another address (or none yet). */
static int other_addr(const health_entry_t *e, const fd_upstream_peer_t *p)
{
    return p->resolve && (e->salen != p->salen || p->salen > sizeof(e->sa) ||
                          memcmp(e->sa, &p->sa, p->salen) != 0);
}

int fd_upstream_health_ok(const fd_upstream_peer_t *p)
{
    const health_entry_t *e = entry_of(p);

    return e == NULL || other_addr(e, p) ||
           __atomic_load_n(&e->healthy, __ATOMIC_RELAXED);
}

/* --- configuration (the master, at load) --------------------------------- */

static int parse_uint(const char *s, uint64_t max, uint64_t *v)
{
    char *end;
    unsigned long long n;

    if (*s < '0' || *s > '9')
        return FD_ERROR;
    errno = 0;
    n = strtoull(s, &end, 10);
    if (errno || *end || n > max)
        return FD_ERROR;
    *v = n;
    return FD_OK;
}

/* health_check = URI [interval=T] [timeout=T] [fails=N] [passes=N]
 * [status=LO-HI] [port=N] */
int fd_upstream_health_parse(fd_conf_t *cf, fd_upstream_t *up,
                             const char *text)
{
    char *s = fd_pstrdup(cf->pool, text, strlen(text)), *save, *tok;
    fd_upstream_health_t *hc = fd_pcalloc(cf->pool, sizeof(*hc));
    uint64_t v, w;
    size_t i;

    if (hc == NULL)
        return fd_conf_error(cf, "out of memory");
    hc->interval = 5000;
    hc->timeout = 2000;
    hc->fails = 1;
    hc->passes = 1;
    hc->status_lo = 200;
    hc->status_hi = 399;
    hc->grpc_status = -1;
    tok = strtok_r(s, " \t", &save);
    if (tok && tok[0] == '/') {
        for (i = 0; tok[i]; i++)
            if ((unsigned char)tok[i] <= ' ' || tok[i] == 0x7f)
                return fd_conf_error(cf, "\"health_check\": a control "
                                     "character in the URI");
        hc->uri = tok;
        tok = strtok_r(NULL, " \t", &save);
    }
    for (; tok; tok = strtok_r(NULL, " \t", &save)) {
        int64_t ms;
        if (tok[0] == '/') {
            return fd_conf_error(cf, "\"health_check\": the URI (%s) goes "
                                 "first", tok);
        } else if (strchr(tok, '=') == NULL) {
            return fd_conf_error(cf, "\"health_check\" needs a URI that "
                                 "starts with / first, not \"%s\" "
                                 "(health_check = /healthz interval=2s)",
                                 tok);
        } else if (strcmp(tok, "type=grpc") == 0) {
            hc->grpc = 1;
        } else if (strncmp(tok, "type=", 5) == 0) {
            return fd_conf_error(cf, "\"health_check\": bad \"%s\" "
                                 "(type=grpc, or a URI for HTTP)", tok);
        } else if (strncmp(tok, "grpc_service=", 13) == 0) {
            /* HealthCheckRequest's service: one byte of length */
            for (i = 13; tok[i]; i++)
                if ((unsigned char)tok[i] <= ' ' || tok[i] == 0x7f)
                    break;
            if (tok[i] || i - 13 > 100)
                return fd_conf_error(cf, "\"health_check\": bad \"%s\" "
                                     "(a service name, at most 100 "
                                     "characters)", tok);
            hc->grpc_service = tok + 13;
        } else if (strncmp(tok, "grpc_status=", 12) == 0) {
            if (parse_uint(tok + 12, 16, &v) != FD_OK)
                return fd_conf_error(cf, "\"health_check\": bad \"%s\" "
                                     "(a gRPC status code, 0..16)", tok);
            hc->grpc_status = (int)v;
        } else if (strncmp(tok, "interval=", 9) == 0 ||
            strncmp(tok, "timeout=", 8) == 0) {
            int iv = tok[0] == 'i';
            ms = fd_conf_parse_msec(tok + (iv ? 9 : 8));
            if (ms < 100 || ms > 86400000)
                return fd_conf_error(cf, "\"health_check\": bad \"%s\" (a "
                                     "duration from 100ms to 1d)", tok);
            if (iv)
                hc->interval = (fd_msec_t)ms;
            else
                hc->timeout = (fd_msec_t)ms;
        } else if (strncmp(tok, "fails=", 6) == 0 ||
                   strncmp(tok, "passes=", 7) == 0) {
            int f = tok[0] == 'f';
            if (parse_uint(tok + (f ? 6 : 7), 1000, &v) != FD_OK || v == 0)
                return fd_conf_error(cf, "\"health_check\": bad \"%s\" "
                                     "(1..1000)", tok);
            if (f)
                hc->fails = (unsigned)v;
            else
                hc->passes = (unsigned)v;
        } else if (strncmp(tok, "status=", 7) == 0) {
            char *dash = strchr(tok + 7, '-');
            if (dash) {
                *dash = '\0';
                if (parse_uint(tok + 7, 599, &v) != FD_OK ||
                    parse_uint(dash + 1, 599, &w) != FD_OK || v < 100 ||
                    w < v)
                    return fd_conf_error(cf, "\"health_check\": bad "
                                         "\"status=%s-%s\" (LO-HI within "
                                         "100-599)", tok + 7, dash + 1);
            } else if (parse_uint(tok + 7, 599, &v) != FD_OK || v < 100) {
                return fd_conf_error(cf, "\"health_check\": bad \"%s\" (a "
                                     "status, or LO-HI)", tok);
            } else {
                w = v;
            }
            hc->status_lo = (unsigned)v;
            hc->status_hi = (unsigned)w;
        } else if (strncmp(tok, "port=", 5) == 0) {
            if (parse_uint(tok + 5, 65535, &v) != FD_OK || v == 0)
                return fd_conf_error(cf, "\"health_check\": bad \"%s\" "
                                     "(1..65535)", tok);
            hc->port = (unsigned)v;
        } else {
            return fd_conf_error(cf, "\"health_check\": unknown option "
                                 "\"%s\" (interval=, timeout=, fails=, "
                                 "passes=, status=, port=, type=grpc, "
                                 "grpc_service=, grpc_status=)", tok);
        }
    }
    if (hc->grpc && hc->uri)
        return fd_conf_error(cf, "\"health_check\": type=grpc asks "
                             "/grpc.health.v1.Health/Check, not %s (name "
                             "the service with grpc_service=)", hc->uri);
    if (!hc->grpc && hc->uri == NULL)
        return fd_conf_error(cf, "\"health_check\" needs a URI that starts "
                             "with / (health_check = /healthz interval=2s), "
                             "or type=grpc");
    if (!hc->grpc && (hc->grpc_service || hc->grpc_status >= 0))
        return fd_conf_error(cf, "\"health_check\": grpc_service= and "
                             "grpc_status= go with type=grpc");
    if (hc->grpc_service == NULL)
        hc->grpc_service = "";
    if (hc->timeout > hc->interval)
        hc->timeout = hc->interval;
    up->health = hc;
    return FD_OK;
}

static void name_copy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (n >= size) /* keep the end: ports and socket names differ there */
        src += n - (size - 1);
    memcpy(dst, src, fd_min(n, size - 1) + 1);
}

/* Each server of a checked group gets its entry, found again by name
 * after a reload (its state goes on) or taken new. */
int fd_upstream_health_bind(fd_conf_t *cf, fd_upstream_t *up)
{
    unsigned i, k;

    if (up->health == NULL)
        return FD_OK;
    if (table == NULL &&
        (table = fd_shm_zone("health", "", HEALTH_ENTRIES * sizeof(health_entry_t),
                             NULL)) == NULL)
        return fd_conf_error(cf, "health_check: mmap() failed: %s",
                             strerror(errno));
    for (i = 0; i < up->npeers; i++) {
        fd_upstream_peer_t *p = &up->peers[i];
        char un[32], sn[48], slot[64];
        int free_slot = -1;

        name_copy(un, sizeof(un), up->name);
        if (p->resolve) { /* NAME:PORT#INDEX: an entry per slot */
            snprintf(slot, sizeof(slot), "%s#%u", p->name, p->index);
            name_copy(sn, sizeof(sn), slot);
        } else {
            name_copy(sn, sizeof(sn), p->name);
        }
        p->health = -1;
        for (k = 0; k < HEALTH_ENTRIES; k++) {
            health_entry_t *e = &table[k];
            if (!e->used) {
                if (free_slot < 0)
                    free_slot = (int)k;
                continue;
            }
            if (strcmp(e->upstream, un) == 0 && strcmp(e->server, sn) == 0) {
                p->health = (int)k;
                break;
            }
        }
        if (p->health >= 0)
            continue;
        if (free_slot < 0) {
            fd_log_error(FD_LOG_WARN, 0, "health_check: more than %d "
                         "servers: \"%s\" server %s is not checked",
                         HEALTH_ENTRIES, up->name, p->name);
            continue;
        }
        health_entry_t *e = &table[free_slot];
        memset(e, 0, sizeof(*e));
        memcpy(e->upstream, un, sizeof(un));
        memcpy(e->server, sn, sizeof(sn));
        e->healthy = 1; /* until probes say otherwise, as passive health */
        e->used = 1;
        p->health = free_slot;
    }
    return FD_OK;
}

/* --- probing (each worker) ----------------------------------------------- */

static void probe_arm(probe_t *pr);

/* The probe's end: pass or not, with why it failed (NULL: the status
 * was out of range). */
static void judge(probe_t *pr, unsigned status, int pass, const char *why)
{
    fd_upstream_peer_t *p = pr->peer;
    const fd_upstream_health_t *hc = p->up->health;
    health_entry_t *e = entry_of(p);
    char got[64];

    if (pr->ss) {
        nghttp2_session_del(pr->ss);
        pr->ss = NULL;
    }
    if (pr->uc) {
        pr->uc->data = NULL;
        fd_upstream_conn_close(pr->uc);
        pr->uc = NULL;
    }
    /* a resolve slot that changed address under the probe: its verdict
     * is the old address's */
    if (e == NULL || p->gen != pr->gen)
        return;
    if (other_addr(e, p)) { /* a new address: judged from the start */
        e->healthy = 1;
        e->fails = e->passes = 0;
        e->salen = p->salen;
        memcpy(e->sa, &p->sa, p->salen);
        name_copy(e->addr, sizeof(e->addr), p->name);
    }
    __atomic_add_fetch(&e->probes, 1, __ATOMIC_RELAXED);
    e->last_status = status;
    e->last_ok = (uint32_t)pass;
    if (pass) {
        e->fails = 0;
        if (!e->healthy && ++e->passes >= hc->passes) {
            e->passes = 0;
            __atomic_store_n(&e->healthy, 1, __ATOMIC_RELAXED);
            fd_log_error(FD_LOG_NOTICE, 0, "upstream \"%s\" server %s "
                         "passed its health check: back in the group",
                         p->up->name, p->name);
        }
        return;
    }
    __atomic_add_fetch(&e->failed, 1, __ATOMIC_RELAXED);
    e->passes = 0;
    /* a response that failed: what it said, against what passes */
    if (why == NULL) {
        snprintf(got, sizeof(got), "status %u, not %u-%u", status,
                 hc->status_lo, hc->status_hi);
        why = got;
    }
    if (e->healthy && ++e->fails >= hc->fails) {
        e->fails = 0;
        __atomic_store_n(&e->healthy, 0, __ATOMIC_RELAXED);
        fd_log_error(FD_LOG_WARN, 0, "upstream \"%s\" server %s failed its "
                     "health check (%s): taken out of the group",
                     p->up->name, p->name, why);
    } else {
        fd_log_error(FD_LOG_INFO, 0, "upstream \"%s\" server %s: health "
                     "check failed (%s)", p->up->name, p->name, why);
    }
}

static void verdict(probe_t *pr, unsigned status, const char *why)
{
    const fd_upstream_health_t *hc = pr->peer->up->health;

    judge(pr, status, status >= hc->status_lo && status <= hc->status_hi,
          status ? NULL : why);
}

/* A failure of a call, named with its error: "connect(): Connection
 * refused" */
static void verdict_errno(probe_t *pr, const char *call, int err)
{
    char why[128];

    snprintf(why, sizeof(why), "%s: %s", call, strerror(err));
    verdict(pr, 0, why);
}

/* --- HTTP/2 and gRPC probes ---------------------------------------------- */

static nghttp2_session_callbacks *h2_callbacks;

static int h2_on_header(nghttp2_session *ss, const nghttp2_frame *f,
                        const uint8_t *name, size_t namelen,
                        const uint8_t *value, size_t valuelen, uint8_t flags,
                        void *data)
{
    probe_t *pr = data;
    unsigned v = 0;
    size_t i;

    (void)ss;
    (void)flags;
    if (f->hd.stream_id != pr->stream || valuelen == 0 || valuelen > 3)
        return 0;
    for (i = 0; i < valuelen; i++) {
        if (value[i] < '0' || value[i] > '9')
            return 0;
        v = v * 10 + (unsigned)(value[i] - '0');
    }
    if (namelen == 7 && memcmp(name, ":status", 7) == 0 && v >= 200)
        pr->status = v; /* 1xx: an interim answer, not the one */
    else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        pr->grpc_status = (int)v;
    return 0;
}

static int h2_on_data(nghttp2_session *ss, uint8_t flags, int32_t stream,
                      const uint8_t *data, size_t len, void *user)
{
    probe_t *pr = user;
    size_t n = fd_min(len, sizeof(pr->msg) - pr->msglen);

    (void)ss;
    (void)flags;
    if (stream == pr->stream) {
        memcpy(pr->msg + pr->msglen, data, n);
        pr->msglen += n;
    }
    return 0;
}

static int h2_on_close(nghttp2_session *ss, int32_t stream, uint32_t code,
                       void *data)
{
    probe_t *pr = data;

    (void)ss;
    if (stream == pr->stream) {
        pr->closed = 1;
        pr->reset = code;
    }
    return 0;
}

/* The request's body (type=grpc): one length-prefixed HealthCheckRequest,
 * its only field the service name. */
static ssize_t h2_body(nghttp2_session *ss, int32_t stream, uint8_t *buf,
                       size_t len, uint32_t *flags, nghttp2_data_source *src,
                       void *data)
{
    probe_t *pr = data;
    const char *svc = pr->peer->up->health->grpc_service;
    size_t n = strlen(svc), m = n ? n + 2 : 0;

    (void)ss;
    (void)stream;
    (void)src;
    if (len < 5 + m) /* never: nghttp2 offers 16 KB */
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    buf[0] = 0; /* not compressed */
    buf[1] = buf[2] = buf[3] = 0;
    buf[4] = (uint8_t)m;
    if (n) {
        buf[5] = 0x0a; /* field 1, length-delimited */
        buf[6] = (uint8_t)n;
        memcpy(buf + 7, svc, n);
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)(5 + m);
}

static int h2_begin(probe_t *pr)
{
    const fd_upstream_health_t *hc = pr->peer->up->health;
    fd_upstream_conn_t *uc = pr->uc;
    const char *host = pr->peer->sa.ss_family == AF_UNIX ? "localhost"
                                                          : pr->peer->name;
    nghttp2_data_provider body = {.read_callback = h2_body};
    nghttp2_settings_entry set[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    /* name, value: nghttp2_nv wants them writable, and copies them */
    char *h[][2] = {
        {":method", hc->grpc ? "POST" : "GET"},
        {":scheme", uc->s.tls ? "https" : "http"},
        {":path", hc->grpc ? "/grpc.health.v1.Health/Check" : hc->uri},
        {":authority", (char *)host},
        {"user-agent", "fastd health check"},
        {"content-type", "application/grpc"},
        {"te", "trailers"},
    };
    nghttp2_nv nv[fd_nelems(h)];
    size_t i, n = hc->grpc ? fd_nelems(h) : fd_nelems(h) - 2;

    if (uc->s.tls && !fd_str_eq_lit(fd_ssl_alpn(&uc->s), "h2")) {
        verdict(pr, 0, "the server did not choose h2 (ALPN)");
        return FD_ERROR;
    }
    if (h2_callbacks == NULL) {
        if (nghttp2_session_callbacks_new(&h2_callbacks) != 0) {
            verdict(pr, 0, "out of memory");
            return FD_ERROR;
        }
        nghttp2_session_callbacks_set_on_header_callback(h2_callbacks,
                                                         h2_on_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
            h2_callbacks, h2_on_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks,
                                                               h2_on_close);
    }
    for (i = 0; i < n; i++)
        nv[i] = (nghttp2_nv){(uint8_t *)h[i][0], (uint8_t *)h[i][1],
                             strlen(h[i][0]), strlen(h[i][1]),
                             NGHTTP2_NV_FLAG_NONE};
    pr->status = 0;
    pr->grpc_status = -1;
    pr->closed = 0;
    pr->reset = 0;
    pr->msglen = 0;
    pr->outlen = 0;
    if (nghttp2_session_client_new(&pr->ss, h2_callbacks, pr) != 0 ||
        nghttp2_submit_settings(pr->ss, NGHTTP2_FLAG_NONE, set,
                                fd_nelems(set)) != 0 ||
        (pr->stream = nghttp2_submit_request(pr->ss, NULL, nv, n,
                                             hc->grpc ? &body : NULL,
                                             pr)) < 0) {
        verdict(pr, 0, "nghttp2 could not make the request");
        return FD_ERROR;
    }
    return FD_OK;
}

/* A gRPC answer that ended: grpc-status 0 and SERVING pass, as does the
 * status grpc_status= names. */
static void h2_grpc_verdict(probe_t *pr)
{
    const fd_upstream_health_t *hc = pr->peer->up->health;
    char why[96];
    unsigned serving = 0;

    if (pr->status != 200) {
        snprintf(why, sizeof(why), "HTTP status %u, not 200", pr->status);
        judge(pr, pr->status, 0, pr->status ? why
                                            : "closed without a response");
        return;
    }
    if (pr->grpc_status < 0) {
        judge(pr, 200, 0, "no grpc-status");
        return;
    }
    if (pr->grpc_status == hc->grpc_status) {
        judge(pr, 200, 1, NULL);
        return;
    }
    if (pr->grpc_status != 0) {
        snprintf(why, sizeof(why), "grpc-status %d", pr->grpc_status);
        judge(pr, 200, 0, why);
        return;
    }
    /* HealthCheckResponse after the 5-byte prefix: field 1 (status), a
     * varint; absent is UNKNOWN (0) */
    if (pr->msglen >= 7 && pr->msg[5] == 0x08)
        serving = pr->msg[6];
    if (serving == 1) {
        judge(pr, 200, 1, NULL);
        return;
    }
    snprintf(why, sizeof(why), "%s", serving == 2 ? "NOT_SERVING"
                                     : serving == 3 ? "SERVICE_UNKNOWN"
                                                    : "status UNKNOWN");
    judge(pr, 200, 0, why);
}

/* Writes what the session has, reads what came, and judges once the
 * answer's status (HTTP) or its end (gRPC) is in. */
static void h2_io(probe_t *pr)
{
    fd_upstream_conn_t *uc = pr->uc;
    const fd_upstream_health_t *hc = pr->peer->up->health;
    char why[96], rb[2048];

    if (pr->ss == NULL && h2_begin(pr) != FD_OK)
        return;
    for (;;) {
        while (uc->s.writable) {
            if (pr->outlen == 0) {
                ssize_t m = nghttp2_session_mem_send(pr->ss, &pr->out);
                if (m < 0) {
                    verdict(pr, 0, nghttp2_strerror((int)m));
                    return;
                }
                if (m == 0)
                    break;
                pr->outlen = (size_t)m;
            }
            struct iovec iov = {.iov_base = (void *)pr->out,
                                .iov_len = pr->outlen};
            ssize_t n = fd_stream_send(&uc->s, &iov, 1, 0);
            if (n == FD_AGAIN)
                break;
            if (n < 0) {
                verdict(pr, 0, "send() failed");
                return;
            }
            pr->out += n;
            pr->outlen -= (size_t)n;
        }
        if (!uc->s.readable)
            return;
        ssize_t n = fd_stream_recv(&uc->s, rb, sizeof(rb));
        if (n == FD_AGAIN)
            return;
        if (n <= 0) {
            if (hc->grpc || pr->status == 0)
                verdict(pr, 0, pr->status ? "closed before the gRPC status"
                                          : "closed without a response");
            else
                verdict(pr, pr->status, NULL);
            return;
        }
        ssize_t rv = nghttp2_session_mem_recv(pr->ss, (uint8_t *)rb,
                                              (size_t)n);
        if (rv < 0) {
            snprintf(why, sizeof(why), "not an HTTP/2 response: %s",
                     nghttp2_strerror((int)rv));
            verdict(pr, 0, why);
            return;
        }
        if (!hc->grpc && pr->status) {
            verdict(pr, pr->status, NULL);
            return;
        }
        if (pr->closed) {
            if (pr->reset && (pr->status == 0 || hc->grpc)) {
                snprintf(why, sizeof(why), "stream reset: %s",
                         nghttp2_http2_strerror(pr->reset));
                verdict(pr, 0, why);
            } else if (hc->grpc) {
                h2_grpc_verdict(pr);
            } else {
                verdict(pr, pr->status, "closed without a response");
            }
            return;
        }
    }
}

static void probe_event(fd_upstream_conn_t *uc)
{
    probe_t *pr = uc->data;
    const fd_upstream_health_t *hc = pr->peer->up->health;
    char req[512];
    int len;

    if (uc->connecting) {
        int err, rc = fd_upstream_conn_connected(uc, &err);
        if (rc == FD_ERROR)
            verdict_errno(pr, "connect()", err);
        if (rc != FD_OK)
            return;
    }
    if (!uc->s.handshaken) {
        /* an upstream behind the PROXY protocol gets its header (LOCAL:
         * no client); TLS as the group's https:// locations speak it */
        static const fd_addr_t none;
        int rc;
        if (fd_upstream_proxy_protocol(uc, &none, &none) != FD_OK) {
            verdict(pr, 0, "send() of the PROXY header failed");
            return;
        }
        rc = fd_stream_handshake(&uc->s);
        if (rc == FD_AGAIN)
            return;
        if (rc != FD_OK) {
            char why[200];
            snprintf(why, sizeof(why), "SSL handshake failed: %s",
                     fd_ssl_connect_error(&uc->s));
            verdict(pr, 0, why);
            return;
        }
    }
    if (pr->peer->up->health_h2 || hc->grpc) {
        h2_io(pr);
        return;
    }
    len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n"
                   "User-Agent: fastd health check\r\n"
                   "Connection: close\r\n\r\n", hc->uri,
                   pr->peer->sa.ss_family == AF_UNIX ? "localhost"
                                                      : pr->peer->name);
    if (len < 0 || (size_t)len >= sizeof(req)) {
        verdict(pr, 0, "the request is too long");
        return;
    }
    while (pr->sent < (size_t)len && uc->s.writable) {
        struct iovec iov = {.iov_base = req + pr->sent,
                            .iov_len = (size_t)len - pr->sent};
        ssize_t n = fd_stream_send(&uc->s, &iov, 1, 0);
        if (n == FD_AGAIN)
            break;
        if (n < 0) {
            verdict(pr, 0, "send() failed");
            return;
        }
        pr->sent += (size_t)n;
    }
    while (uc->s.readable && pr->got < sizeof(pr->buf) - 1) {
        ssize_t n = fd_stream_recv(&uc->s, pr->buf + pr->got,
                                   sizeof(pr->buf) - 1 - pr->got);
        if (n == FD_AGAIN)
            break;
        if (n <= 0)
            break; /* the end, or an error: judged by what came */
        pr->got += (size_t)n;
    }
    pr->buf[pr->got] = '\0';
    /* "HTTP/1.x NNN" is all a probe reads */
    if (pr->got >= 12 || uc->s.eof) {
        const char *b = pr->buf;
        if (pr->got >= 12 && memcmp(b, "HTTP/1.", 7) == 0 &&
            (b[7] == '0' || b[7] == '1') && b[8] == ' ' && b[9] >= '1' &&
            b[9] <= '5' && b[10] >= '0' && b[10] <= '9' && b[11] >= '0' &&
            b[11] <= '9' && (pr->got == 12 || b[12] == ' ' ||
                             b[12] == '\r'))
            verdict(pr, (unsigned)((b[9] - '0') * 100 + (b[10] - '0') * 10 +
                                   (b[11] - '0')),
                    NULL);
        else
            verdict(pr, 0, pr->got ? "not an HTTP response"
                                   : "closed without a response");
    }
}

static void probe_timeout(fd_upstream_conn_t *uc)
{
    verdict(uc->data, 0, "timed out");
}

static void probe_start(probe_t *pr)
{
    fd_upstream_peer_t *p = pr->peer;
    const fd_upstream_health_t *hc = p->up->health;
    struct sockaddr_storage sa = p->sa;
    int fd, connecting = 0;

    pr->gen = p->gen;
    if (hc->port && sa.ss_family == AF_INET)
        ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)hc->port);
    else if (hc->port && sa.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)hc->port);
    fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        verdict_errno(pr, "socket()", errno);
        return;
    }
    if (connect(fd, (struct sockaddr *)&sa, p->salen) < 0) {
        if (errno != EINPROGRESS) {
            int err = errno == EAGAIN ? ECONNREFUSED : errno;
            close(fd);
            verdict_errno(pr, "connect()", err);
            return;
        }
        connecting = 1;
    }
    pr->uc = fd_upstream_conn_add(p, fd, connecting);
    if (pr->uc == NULL) {
        verdict_errno(pr, "the probe's connection", errno);
        return;
    }
    /* a separate port= is plain HTTP; else the group's own TLS */
    if (p->up->health_ssl && !hc->port &&
        fd_ssl_connect(&pr->uc->s, p->up->health_ssl, &p->ssl_session) !=
            FD_OK) {
        verdict(pr, 0, "SSL_new() failed");
        return;
    }
    pr->sent = pr->got = 0;
    pr->ss = NULL;
    pr->uc->data = pr;
    pr->uc->on_event = probe_event;
    pr->uc->on_timeout = probe_timeout;
    fd_upstream_conn_deadline(pr->uc, hc->timeout);
    if (!connecting)
        probe_event(pr->uc);
}

/* Due: the worker that moves the entry's time on probes. */
static void probe_timer(fd_timer_t *t)
{
    probe_t *pr = (probe_t *)t;
    health_entry_t *e = entry_of(pr->peer);
    uint64_t now = fd_current_msec, at;

    if (e == NULL)
        return;
    if (pr->peer->resolve)
        fd_upstream_resolve_sync(pr->peer->up);
    at = __atomic_load_n(&e->next_at, __ATOMIC_RELAXED);
    if (pr->uc == NULL && now >= at && !pr->peer->absent &&
        __atomic_compare_exchange_n(&e->next_at, &at,
                                    now + pr->peer->up->health->interval, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        probe_start(pr);
    probe_arm(pr);
}

static void probe_arm(probe_t *pr)
{
    health_entry_t *e = entry_of(pr->peer);
    uint64_t now = fd_current_msec, at;

    if (e == NULL)
        return;
    at = __atomic_load_n(&e->next_at, __ATOMIC_RELAXED);
    /* a little after it is due: whoever is first takes it */
    fd_timer_add(&pr->timer, (at > now ? at - now : 0) + 1 +
                                 (fd_msec_t)(getpid() % 7));
}

static probe_t *probes;
static unsigned nprobes;

void fd_upstream_health_start(fd_upstream_t **ups, unsigned n)
{
    unsigned i, k, total = 0;

    for (i = 0; i < n; i++)
        if (ups[i]->health)
            total += ups[i]->npeers;
    if (total == 0 || table == NULL)
        return;
    probes = calloc(total, sizeof(*probes));
    if (probes == NULL) {
        fd_log_error(FD_LOG_ALERT, ENOMEM, "health_check: no probes");
        return;
    }
    for (i = 0; i < n; i++) {
        if (ups[i]->health == NULL)
            continue;
        for (k = 0; k < ups[i]->npeers; k++) {
            probe_t *pr = &probes[nprobes];
            if (ups[i]->peers[k].health < 0)
                continue;
            pr->peer = &ups[i]->peers[k];
            pr->timer.handler = probe_timer;
            nprobes++;
            probe_arm(pr);
        }
    }
}

/* --- status -------------------------------------------------------------- */

void fd_upstream_health_status(fd_status_t *st, fd_upstream_t **ups,
                               unsigned n)
{
    char labels[256];
    unsigned i, k;

    if (table == NULL)
        return;
    for (i = 0; i < n; i++) {
        if (ups[i]->health == NULL)
            continue;
        for (k = 0; k < ups[i]->npeers; k++) {
            const fd_upstream_peer_t *p = &ups[i]->peers[k];
            const health_entry_t *e = entry_of(p);
            if (e == NULL || p->absent || other_addr(e, p))
                continue; /* an empty slot, or its address not probed yet */
            fd_upstream_status_labels(labels, sizeof(labels), e->upstream,
                                      p->resolve ? e->addr : e->server);
            fd_status_gauge(st, "upstream_check_up", "1 while the server passes its "
                            "health check, 0 while it is taken out", labels,
                            e->healthy);
            fd_status_gauge(st, "upstream_check_status", "The last probe's "
                            "HTTP status (0: no response)", labels,
                            e->last_status);
            fd_status_counter(st, "upstream_check_probes", "Health probes "
                              "sent to the server (by all workers)", labels,
                              e->probes);
            fd_status_counter(st, "upstream_check_failed", "Health probes "
                              "that failed", labels, e->failed);
        }
    }
}
