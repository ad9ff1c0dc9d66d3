/*
 * The response side of the HTTP engine: status lines, the header writer,
 * the body and error pages handlers set, the end of a request (filters,
 * framing, queueing, the log hooks), and streamed responses: chunked
 * framing and the queue that feeds a complete body through a body filter
 * (gzip). The request side and the connection state machine are
 * fd_http.c; what both share is fd_http_int.h.
 */
#include "fd_core.h"
#include "fd_build.h" /* FD_NMODULES */
#include "fd_http_int.h"

/* a complete body through a body filter goes in pieces of at most this,
 * FEED_TURN bytes a loop turn over all such bodies (see feedq) */
#define FEED_PIECE (16 * 1024)
#define FEED_TURN (32 * 1024)
#define OUT_COPY_MAX 4096            /* a body this small leaves with
                                      * the header */

static int feed_start(fd_request_t *r);

/* A buffer into the output queue as it is: memory that stays valid until
 * sent, or a file range. */
static int out_buf(fd_http_conn_t *h, fd_buf_t *b)
{
    size_t n = fd_buf_size(b);

    return b->file_fd >= 0 ? fd_outq_file(&h->out, b->file_fd, b->file_pos, n)
                           : fd_outq_mem(&h->out, b->pos, n);
}

/* --- response header --- */

static const struct {
    int code;
    const char *line;
} status_lines[] = {
    {100, "100 Continue"}, {101, "101 Switching Protocols"},
    {200, "200 OK"}, {201, "201 Created"}, {202, "202 Accepted"},
    {204, "204 No Content"}, {206, "206 Partial Content"},
    {301, "301 Moved Permanently"}, {302, "302 Found"},
    {303, "303 See Other"}, {304, "304 Not Modified"},
    {307, "307 Temporary Redirect"}, {308, "308 Permanent Redirect"},
    {400, "400 Bad Request"}, {401, "401 Unauthorized"},
    {403, "403 Forbidden"}, {404, "404 Not Found"},
    {405, "405 Method Not Allowed"}, {406, "406 Not Acceptable"},
    {408, "408 Request Timeout"}, {409, "409 Conflict"},
    {410, "410 Gone"}, {411, "411 Length Required"},
    {412, "412 Precondition Failed"}, {413, "413 Content Too Large"},
    {414, "414 URI Too Long"}, {415, "415 Unsupported Media Type"},
    {416, "416 Range Not Satisfiable"}, {417, "417 Expectation Failed"},
    {421, "421 Misdirected Request"}, {426, "426 Upgrade Required"},
    {429, "429 Too Many Requests"},
    {431, "431 Request Header Fields Too Large"},
    {500, "500 Internal Server Error"}, {501, "501 Not Implemented"},
    {502, "502 Bad Gateway"}, {503, "503 Service Unavailable"},
    {504, "504 Gateway Timeout"}, {505, "505 HTTP Version Not Supported"},
};

fd_str_t fd_http_status_line(int status)
{
    static char other[8];
    unsigned i;

    if (status == 200)
        return fd_string("200 OK");
    for (i = 0; i < fd_nelems(status_lines); i++)
        if (status_lines[i].code == status)
            return (fd_str_t){strlen(status_lines[i].line),
                              status_lines[i].line};
    snprintf(other, sizeof(other), "%03d ", status % 1000);
    return (fd_str_t){4, other};
}

#define CPY(p, lit) (memcpy(p, lit, sizeof(lit) - 1), (p) + sizeof(lit) - 1)

/*
 * "HTTP/1.1 200 OK", Server and Date: the same bytes for every 200 in a
 * second, so they are formatted once a second (or on a new cycle) and
 * copied as one block; other statuses copy the Server/Date part.
 */
static struct {
    char buf[sizeof("HTTP/1.1 200 OK\r\nServer: \r\nDate: \r\n") +
             FD_SERVER_HEADER_MAX + sizeof(fd_http_date)];
    size_t len;                 /* all of it */
    size_t common;              /* where "Server: " (or "Date: ") starts */
    size_t date;                /* where "Date: " starts */
    time_t sec;
    const fd_cycle_t *cycle;
} hdr_cache;

static void hdr_cache_fill(const fd_http_conf_t *hc)
{
    char *p = hdr_cache.buf;

    p = CPY(p, "HTTP/1.1 200 OK\r\n");
    hdr_cache.common = (size_t)(p - hdr_cache.buf);
    if (hc->server_header[0]) {
        p = CPY(p, "Server: ");
        p = stpcpy(p, hc->server_header);
        *p++ = '\r';
        *p++ = '\n';
    }
    hdr_cache.date = (size_t)(p - hdr_cache.buf);
    p = CPY(p, "Date: ");
    memcpy(p, fd_http_date, sizeof(fd_http_date) - 1);
    p += sizeof(fd_http_date) - 1;
    *p++ = '\r';
    *p++ = '\n';
    hdr_cache.len = (size_t)(p - hdr_cache.buf);
    hdr_cache.sec = fd_current_sec;
    hdr_cache.cycle = fd_worker->cycle;
}

/* Most headers (and the small body after them) fit in this much; the
 * builder may use all the room the output area has, this is a minimum. */
#define HDR_RESERVE (sizeof(hdr_cache.buf) + 256)

/* "Name: value\r\n" for a literal name: one room check, and the name is
 * a move of known size rather than a memcpy() call (the hot path). */
#define HDR_LIT(sb, name, v) hdr_lit(sb, name ": ", sizeof(name ": ") - 1, v)

static inline __attribute__((always_inline)) void
hdr_lit(fd_sbuf_t *sb, const char *name, size_t nlen, fd_str_t v)
{
    char *p = fd_sbuf_reserve(sb, nlen + v.len + 2);

    if (p) {
        memcpy(p, name, nlen);
        memcpy(p + nlen, v.data, v.len);
        p += nlen + v.len;
        fd_sbuf_commit(sb, CPY(p, "\r\n"));
    }
}

/* The header, then body (a small memory buffer, or NULL), into sb. Runs
 * again on a growing builder when the first one ran out of room, so its
 * only side effects are idempotent; log says whether to report. */
static inline __attribute__((always_inline)) void
header_build(fd_request_t *r, fd_sbuf_t *sb, fd_buf_t *body, int log)
{
    fd_http_header_out_t *ho;
    int no_body = r->status < 200 || r->status == 204 || r->status == 304;
    size_t blen;
    char *p;

    if (fd_likely(r->status == 200 && !r->server_passed)) {
        fd_sbuf_add(sb, hdr_cache.buf, hdr_cache.len);
    } else if (r->server_passed) {
        /* the response's own Server is among headers_out */
        fd_sbuf_add_lit(sb, "HTTP/1.1 ");
        fd_sbuf_add_str(sb, fd_http_status_line(r->status));
        fd_sbuf_add_crlf(sb);
        fd_sbuf_add(sb, hdr_cache.buf + hdr_cache.date,
                    hdr_cache.len - hdr_cache.date);
    } else {
        fd_sbuf_add_lit(sb, "HTTP/1.1 ");
        fd_sbuf_add_str(sb, fd_http_status_line(r->status));
        fd_sbuf_add_crlf(sb);
        fd_sbuf_add(sb, hdr_cache.buf + hdr_cache.common,
                    hdr_cache.len - hdr_cache.common);
    }
    if (r->content_type.len)
        HDR_LIT(sb, "Content-Type", r->content_type);
    if (!no_body) {
        if (r->content_length >= 0) {
            p = fd_sbuf_reserve(sb, sizeof("Content-Length: \r\n") + 20);
            if (p) {
                p = CPY(p, "Content-Length: ");
                p = fd_fmt_uint(p, (uint64_t)r->content_length);
                fd_sbuf_commit(sb, CPY(p, "\r\n"));
            }
        } else if (r->chunked_out) {
            fd_sbuf_add_lit(sb, "Transfer-Encoding: chunked\r\n");
        }
    }
    if (r->last_modified >= 0) {
        p = fd_sbuf_reserve(sb, sizeof("Last-Modified: \r\n") +
                                    sizeof(fd_http_date));
        if (p) {
            p = CPY(p, "Last-Modified: ");
            p += fd_http_time(p, r->last_modified);
            fd_sbuf_commit(sb, CPY(p, "\r\n"));
        }
    }
    if (r->etag.len)
        HDR_LIT(sb, "ETag", r->etag);
    for (ho = r->headers_out; ho; ho = ho->next) {
        if (fd_http_field_bad(ho->value.data, ho->value.len) ||
            fd_http_field_bad(ho->name.data, ho->name.len)) {
            if (log)
                fd_log_error(FD_LOG_ERR, 0, "a response header holding CR, "
                             "LF or NUL was dropped");
            continue;
        }
        fd_sbuf_add_header(sb, ho->name, ho->value);
    }
    /* a graceful stop: a request that was in flight when it began is the
     * connection's last (its caller closes after a keepalive = 0 answer) */
    if (fd_worker->quitting && r->status != 101)
        r->keepalive = 0;
    if (r->status == 101) {
        /* the module set Connection/Upgrade itself */
    } else if (!r->keepalive) {
        fd_sbuf_add_lit(sb, "Connection: close\r\n");
    } else if (r->in.version == 10) {
        fd_sbuf_add_lit(sb, "Connection: keep-alive\r\n");
    }
    /* the blank line and the body: one room check */
    blen = body ? fd_buf_size(body) : 0;
    if ((p = fd_sbuf_reserve(sb, 2 + blen)) != NULL) {
        p = CPY(p, "\r\n");
        if (blen)
            memcpy(p, body->pos, blen);
        fd_sbuf_commit(sb, p + blen);
    }
}

/* A header larger than the room in the output area: built again in the
 * request's pool, then copied there (rare: a long Location, many
 * cookies). */
static __attribute__((noinline, cold)) int header_write_large(
    fd_request_t *r, fd_buf_t *body, size_t tried)
{
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, 2 * tried) != FD_OK)
        return FD_ERROR;
    header_build(r, &sb, body, 0);
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    return out_append(r->c->h, sb.start, fd_sbuf_len(&sb));
}

/* The header, and body (a small memory buffer, or NULL) right after it:
 * built in place in the output area, one commit for a small complete
 * response; complete either way, never past the end. */
static int header_write(fd_request_t *r, fd_buf_t *body)
{
    fd_http_conn_t *h = r->c->h;
    size_t blen = body ? fd_buf_size(body) : 0;
    fd_sbuf_t sb;
    char *p;

    /* add_header and expires, for both writers */
    if (fd_unlikely(r->loc ? r->loc->nadd_headers || r->loc->expires_mode
                           : r->server != NULL) &&
        fd_http_add_headers(r) != FD_OK)
        return FD_ERROR;
    /* the server listens on QUIC too: say so over TCP (RFC 7838) */
    if (fd_unlikely(r->server && r->server->alt_svc.len) && !r->h3 &&
        fd_http_header_add(r, fd_string("Alt-Svc"), r->server->alt_svc) !=
            FD_OK)
        return FD_ERROR;
    if (r->h2) {
        /* HEADERS; the body, small or not, follows as DATA */
        if (fd_h2_header(r) != FD_OK)
            return FD_ERROR;
        r->header_sent = 1;
        return body ? fd_h2_body(r, body, 0) : FD_OK;
    }
    if (fd_unlikely(hdr_cache.sec != fd_current_sec ||
                    hdr_cache.cycle != fd_worker->cycle))
        hdr_cache_fill(&fd_worker->cycle->http);
    /* limit_rate counts from this response's header (the connection's
     * earlier ones in the queue were counted by their own) */
    if (fd_unlikely(h->rate.rate || (r->loc && r->loc->limit_rate)))
        fd_http_rate_start(&h->rate, r);
    p = fd_outq_reserve(&h->out, HDR_RESERVE + blen);
    if (p == NULL)
        return FD_ERROR;
    fd_sbuf_init_fixed(&sb, p, h->out.cap - h->out.tail);
    header_build(r, &sb, body, 1);
    if (fd_likely(!fd_sbuf_failed(&sb)))
        fd_outq_commit(&h->out, fd_sbuf_len(&sb));
    else if (header_write_large(r, body, h->out.cap - h->out.tail) != FD_OK)
        return FD_ERROR;
    r->header_sent = 1;
    return FD_OK;
}

/* --- limit_rate --- */

static uint64_t rate_quantum(uint64_t rate)
{
    return fd_min(fd_max(rate / 10, (uint64_t)1024), (uint64_t)65536);
}

void fd_http_rate_start(fd_http_rate_t *rt, const fd_request_t *r)
{
    rt->rate = r->loc ? r->loc->limit_rate : 0;
    rt->after = r->loc ? r->loc->limit_rate_after : 0;
    rt->sent = 0;
    rt->start = fd_current_msec;
}

/* what the time since start has earned, past `after` and the first
 * quantum (128 bits: rate times milliseconds) */
static uint64_t rate_credit(const fd_http_rate_t *rt)
{
    unsigned __int128 earned = (unsigned __int128)rt->rate *
                               (fd_current_msec - rt->start) / 1000;

    earned += rt->after + rate_quantum(rt->rate);
    return earned > UINT64_MAX ? UINT64_MAX : (uint64_t)earned;
}

size_t fd_http_rate_allow(const fd_http_rate_t *rt)
{
    uint64_t credit = rate_credit(rt);

    if (credit <= rt->sent)
        return 0;
    return (size_t)fd_min(credit - rt->sent, (uint64_t)(SIZE_MAX - 1));
}

fd_msec_t fd_http_rate_delay(const fd_http_rate_t *rt)
{
    /* credit reaches sent + quantum when rate * elapsed / 1000 reaches
     * sent - after */
    uint64_t owed = rt->sent > rt->after ? rt->sent - rt->after : 0;
    uint64_t at = (uint64_t)(((unsigned __int128)owed * 1000 + rt->rate - 1) /
                             rt->rate);
    uint64_t elapsed = fd_current_msec - rt->start;

    return at > elapsed ? fd_min(at - elapsed, (uint64_t)FD_TIMER_MAX) : 1;
}

/* --- response API for handlers --- */

int fd_http_header_add(fd_request_t *r, fd_str_t name, fd_str_t value)
{
    fd_http_header_out_t *ho = fd_palloc(r->pool, sizeof(*ho));

    if (ho == NULL)
        return FD_ERROR;
    ho->name = name;
    ho->value = value;
    ho->next = NULL;
    *r->headers_out_last = ho;
    r->headers_out_last = &ho->next;
    return FD_OK;
}

void fd_http_body_append(fd_request_t *r, fd_buf_t *b)
{
    b->next = NULL;
    *r->out_last = b;
    r->out_last = &b->next;
}

int fd_http_body_set(fd_request_t *r, const void *data, size_t len)
{
    fd_buf_t *b = fd_buf_wrap(r->pool, data, len);

    if (b == NULL)
        return FD_ERROR;
    r->out = NULL;
    r->out_last = &r->out;
    fd_http_body_append(r, b);
    r->content_length = (int64_t)len;
    return FD_OK;
}

int fd_http_body_copy(fd_request_t *r, const void *data, size_t len)
{
    char *m = fd_pnalloc(r->pool, len ? len : 1);

    if (m == NULL)
        return FD_ERROR;
    memcpy(m, data, len);
    return fd_http_body_set(r, m, len);
}

/*
 * gRPC requests (application/grpc, application/grpc+proto...) are not
 * answered with a page a gRPC client cannot read: an error fastd makes
 * itself is a "Trailers-Only" response (HTTP 200, grpc-status and
 * grpc-message in the only header block, no body), as gRPC's
 * PROTOCOL-HTTP2 says. gRPC-Web (application/grpc-web) is not this.
 */
static int grpc_request(const fd_request_t *r)
{
    fd_str_t ct = r->in.content_type;
    size_t n = sizeof("application/grpc") - 1;

    return ct.len >= n &&
           fd_str_caseeq((fd_str_t){n, ct.data}, "application/grpc", n) &&
           (ct.len == n || ct.data[n] == '+' || ct.data[n] == ';');
}

/* The status code for an HTTP status fastd answers with (conf/doc/
 * http2.md, gRPC clients): gRPC's "HTTP to gRPC Status Code Mapping", but for what a
 * limit refused (RESOURCE_EXHAUSTED, whatever status it was given), a
 * gateway timeout (DEADLINE_EXCEEDED) and what no handler implements. */
static unsigned grpc_code(const fd_request_t *r, int status)
{
    if (r->refused)
        return 8; /* RESOURCE_EXHAUSTED */
    switch (status) {
    case 400:
    case 500:
        return 13; /* INTERNAL */
    case 401:
        return 16; /* UNAUTHENTICATED */
    case 403:
        return 7; /* PERMISSION_DENIED */
    case 404:
    case 405:
    case 501:
        return 12; /* UNIMPLEMENTED */
    case 408:
    case 504:
        return 4; /* DEADLINE_EXCEEDED */
    case 413:
    case 429:
    case 431:
        return 8; /* RESOURCE_EXHAUSTED */
    case 502:
    case 503:
        return 14; /* UNAVAILABLE */
    default:
        return 2; /* UNKNOWN */
    }
}

static int grpc_error(fd_request_t *r, int status, const char *detail)
{
    static const char hex[] = "0123456789ABCDEF";
    fd_str_t sl = fd_http_status_line(status);
    char *code = fd_pnalloc(r->pool, 4);
    fd_sbuf_t sb;
    size_t i, n = detail ? strlen(detail) : 0;

    if (code == NULL || fd_sbuf_init(&sb, r->pool, 64 + 3 * n) != FD_OK)
        return FD_ERROR;
    /* grpc-message is percent-encoded: what is not printable ASCII, and
     * '%' itself */
    fd_sbuf_add_str(&sb, sl);
    if (n)
        fd_sbuf_add_lit(&sb, ": ");
    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)detail[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '%') {
            fd_sbuf_addc(&sb, (char)ch);
        } else {
            fd_sbuf_addc(&sb, '%');
            fd_sbuf_addc(&sb, hex[ch >> 4]);
            fd_sbuf_addc(&sb, hex[ch & 15]);
        }
    }
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    r->status = 200;
    r->content_type = fd_string("application/grpc");
    r->content_length = 0;
    return fd_http_header_add(
               r, fd_string("grpc-status"),
               (fd_str_t){(size_t)(fd_fmt_uint(code, grpc_code(r, status)) -
                                   code),
                          code}) == FD_OK &&
                   fd_http_header_add(r, fd_string("grpc-message"),
                                      fd_sbuf_str(&sb)) == FD_OK
               ? FD_OK
               : FD_ERROR;
}

int fd_http_error_detail(fd_request_t *r, int status, const char *detail)
{
    fd_error_page_t *ep;
    fd_str_t sl = fd_http_status_line(status);
    fd_sbuf_t sb;

    r->status = status;
    r->out = NULL;
    r->out_last = &r->out;
    r->headers_out = NULL;
    r->headers_out_last = &r->headers_out;
    r->trailers_out = NULL;
    r->last_modified = -1;
    r->etag.len = 0;
    if (grpc_request(r))
        return grpc_error(r, status, detail);
    r->content_type = fd_string("text/html");
    if (r->retry_after && (status == 503 || status == 429)) {
        char *v = fd_pnalloc(r->pool, 16);
        if (v == NULL ||
            fd_http_header_add(r, fd_string("Retry-After"),
                               (fd_str_t){(size_t)snprintf(v, 16, "%u",
                                                           r->retry_after),
                                          v}) != FD_OK)
            return FD_ERROR;
    }
    for (ep = r->server ? r->server->error_pages : NULL; ep; ep = ep->next)
        if (ep->status == status)
            return fd_http_body_set(r, ep->body, ep->len);
    if (fd_sbuf_init(&sb, r->pool, 256) != FD_OK)
        return FD_ERROR;
    fd_sbuf_add_lit(&sb, "<html>\r\n<head><title>");
    fd_sbuf_add_str(&sb, sl);
    fd_sbuf_add_lit(&sb, "</title></head>\r\n<body>\r\n<center><h1>");
    fd_sbuf_add_str(&sb, sl);
    fd_sbuf_add_lit(&sb, "</h1></center>\r\n");
    if (detail) {
        fd_sbuf_add_lit(&sb, "<center>");
        fd_sbuf_add(&sb, detail, strlen(detail));
        fd_sbuf_add_lit(&sb, "</center>\r\n");
    }
    fd_sbuf_add_lit(&sb, "<hr><center>");
    if (fd_worker->cycle->http.server_tokens)
        fd_sbuf_add_lit(&sb, "fastd/" FASTD_VERSION);
    else
        fd_sbuf_add_lit(&sb, "fastd");
    fd_sbuf_add_lit(&sb, "</center>\r\n</body>\r\n</html>\r\n");
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    return fd_http_body_set(r, sb.start, fd_sbuf_len(&sb));
}

int fd_http_error_page(fd_request_t *r, int status)
{
    return fd_http_error_detail(r, status, NULL);
}

/* --- the end of a request --- */

/*
 * The modules that have each hook, in module order, found once: the
 * request path walks only these instead of every module.
 */
/* the log hooks; access and filter hooks are per location (loc->access,
 * loc->filter: only the modules with work there) */
static struct {
    unsigned ready, nlog;
    const fd_module_t *log[FD_NMODULES + FD_DSO_MAX + 1]; /* every module */
} hooks;

static void hooks_init(void)
{
    unsigned i;

    for (i = 0; i < fd_nmodules; i++) {
        const fd_module_t *m = fd_modules[i];
        if (m->log)
            hooks.log[hooks.nlog++] = m;
    }
    hooks.ready = 1;
}

/* The header filters (gzip), in module order, on a complete or a streamed
 * response whose header is about to be queued: FD_OK or FD_ERROR. */
static inline int run_filters(fd_request_t *r)
{
    const fd_module_t **m;

    if (r->loc == NULL)
        return FD_OK; /* refused before routing: nothing to filter */
    for (m = r->loc->filter; *m; m++)
        if ((*m)->filter(r) != FD_OK)
            return FD_ERROR;
    return FD_OK;
}

/* The request is over: counters and the modules' log hooks. */
void fd_http_access_count(fd_request_t *r)
{
    int cls = r->status / 100;
    unsigned i;

    fd_stats->status[cls >= 1 && cls <= 5 ? cls : 0]++;
    if (fd_unlikely(!hooks.ready))
        hooks_init();
    for (i = 0; i < hooks.nlog; i++)
        hooks.log[i]->log(r);
}

/* See fd_http.h: the response goes, the request stays (request_done()
 * defers its end to fd_request_finish()). */
void fd_http_respond_early(fd_request_t *r)
{
    if (r->sub_post)
        return; /* a subrequest's response is its end (fd_request_finish) */
    r->held = 1;
    fd_http_finalize(r, FD_OK);
    if (r->h2)
        fd_h2_flush(r);
    else
        post_resume(r->c->h);
}

/* The response in r is complete (or rc is an error): queue it. */
void fd_http_finalize(fd_request_t *r, int rc)
{
    fd_connection_t *c = r->c;
    fd_http_conn_t *h = c->h;
    fd_buf_t *b;

    if (fd_unlikely(r->sub_post != NULL)) {
        fd_http_sub_end(r, rc == FD_DECLINED ? 404
                           : rc == FD_ERROR  ? (r->body_error ? r->body_error
                                                              : 500)
                                             : rc);
        return;
    }
    if (r->response_done) {
        /* answered early: whatever the handler's end, nothing more */
        request_done(c, h, r);
        return;
    }

    if (rc == FD_DECLINED)
        rc = 404;
    else if (rc == FD_ERROR)
        rc = r->body_error ? r->body_error : 500;
    if (rc >= 400 || (rc != FD_OK && rc != FD_DONE)) {
        if (r->header_sent) {
            /* too late for an error page: cut the connection (over
             * HTTP/2, the stream) */
            if (r->h2) {
                fd_h2_cut(r);
                goto done;
            }
            c->closing = 1;
            c->s.error = 1;
            goto done;
        }
        fd_http_error_page(r, rc >= 100 ? rc : 500);
    }
    if (r->status == 0)
        r->status = 200;
    if (!r->header_sent) {
        if (run_filters(r) != FD_OK) {
            r->body_filter = NULL;
            r->api_filters = NULL;
            fd_http_error_page(r, 500);
        }
        if (r->content_length < 0 && r->body_filter == NULL &&
            !r->length_unknown) {
            int64_t len = 0;
            for (b = r->out; b; b = b->next)
                len += (int64_t)fd_buf_size(b);
            r->content_length = len;
        }
        if (r->h2) {
            /* an unread body: the stream ends with RST_STREAM NO_ERROR
             * after the response (RFC 9113 8.1), nothing lingers */
        } else if (r->body_rest > 0 && r->phase != PH_HEADER &&
                   h->rlast - h->rpos >= (uint64_t)r->body_rest) {
            /* answered before its body was read (refused by the access
             * phase, a redirect): what is already here is skipped, and
             * the connection stays usable */
            h->rpos += (size_t)r->body_rest;
            r->body_rest = 0;
        }
        if (!r->h2 && (r->body_rest != 0 || r->phase == PH_HEADER)) {
            /* an unread body (or an unparsed request): framing is lost;
             * close, after letting the peer read the answer */
            r->keepalive = 0;
            c->linger = 1;
        }
        {
            int body = !r->header_only && r->status >= 200 &&
                       r->status != 204 && r->status != 304;
            if (r->body_filter && body && (r->h2 || h->r == r)) {
                /* a filter transforms the body (gzip): it is fed in
                 * pieces as the output drains, never in one go */
                if (feed_start(r) == FD_OK)
                    return;
                if (r->h2) {
                    fd_h2_cut(r);
                    goto done;
                }
                c->closing = 1;
                c->s.error = 1;
                goto done;
            }
            /* one small memory buffer goes out with the header */
            fd_buf_t *small = body && r->out && r->out->next == NULL &&
                                      r->out->file_fd < 0 &&
                                      fd_buf_size(r->out) <= OUT_COPY_MAX
                                  ? r->out
                                  : NULL;
            if (header_write(r, small) != FD_OK) {
                if (r->h2) {
                    fd_h2_cut(r);
                    goto done;
                }
                c->closing = 1;
                c->s.error = 1;
                goto done;
            }
            if (body)
                for (b = r->out; b; b = b->next) {
                    r->bytes_sent += fd_buf_size(b);
                    if (b == small)
                        continue;
                    if (r->h2)
                        fd_h2_body(r, b, 0);
                    else
                        out_buf(h, b);
                }
        }
    }
done:
    r->phase = PH_RESPONSE;
    request_done(c, h, r);
}

/* --- streaming responses --- */

/* A streamed body of unknown length: chunked, or close-delimited. */
static void stream_framing(fd_request_t *r)
{
    if (r->h2)
        return; /* DATA frames frame it, END_STREAM ends it */
    if (r->content_length < 0 && !r->header_only && r->status != 204 &&
        r->status != 304 && r->status >= 200) {
        if (r->in.version == 11)
            r->chunked_out = 1;
        else
            r->keepalive = 0; /* close-delimited */
    }
}

/* Queue the header of a streamed response (not written yet). */
static int stream_header(fd_request_t *r)
{
    if (r->status == 0)
        r->status = 200;
    /* a filter may take the length away (gzip): framing is chosen after */
    r->streamed = 1;
    if (run_filters(r) != FD_OK)
        return FD_ERROR;
    stream_framing(r);
    r->phase = r->phase == PH_STREAM ? PH_STREAM : PH_RESPONSE;
    return header_write(r, NULL);
}

/*
 * Complete responses whose header filter set a body filter (gzip) wait in
 * this FIFO for their next piece. One posted run a loop turn serves it
 * FEED_TURN bytes in order, so that however many such bodies are under
 * way, a turn spends a bounded time on them (~1 ms of deflate at level 1
 * on a loaded core) and the other connections are served in between; a
 * body is never transformed in one burst, nor held transformed.
 */
static void feed_run(void *data);

static struct {
    fd_request_t *head, **tail;
    fd_posted_t post;
    unsigned posted;
} feedq = {.tail = &feedq.head, .post = {.handler = feed_run}};

static void feed_queue(fd_request_t *r)
{
    if (r->feed_queued)
        return;
    r->feed_queued = 1;
    r->feed_next = NULL;
    r->feed_prev = feedq.tail;
    *feedq.tail = r;
    feedq.tail = &r->feed_next;
    if (!feedq.posted) {
        feedq.posted = 1;
        fd_event_post(&feedq.post);
    }
}

void fd_http_feed_unlink(fd_request_t *r)
{
    *r->feed_prev = r->feed_next;
    if (r->feed_next)
        r->feed_next->feed_prev = r->feed_prev;
    else
        feedq.tail = r->feed_prev;
    r->feed_queued = 0;
}

/* r->on_drain: the output is written, the next piece may come */
static void feed_drain(fd_request_t *r)
{
    feed_queue(r);
}

static int chain_empty(const fd_buf_t *b)
{
    for (; b; b = b->next)
        if (fd_buf_size(b))
            return 0;
    return 1;
}

/* The next FEED_PIECE of r->out through the body filter (fd_http_output);
 * back in the queue unless the output is above the high-water mark (then
 * feed_drain) or the body is done. Returns the bytes fed. */
static size_t feed_body(fd_request_t *r)
{
    fd_buf_t piece, *b;
    size_t n;
    int rc;

    while ((b = r->out) && fd_buf_size(b) == 0)
        r->out = b->next;
    if (b == NULL) {
        fd_http_output(r, NULL, 1);
        return 0;
    }
    piece = *b;
    piece.next = NULL;
    n = fd_min(fd_buf_size(b), (size_t)FEED_PIECE);
    if (b->file_fd >= 0) {
        piece.file_last = piece.file_pos + (off_t)n;
        b->file_pos += (off_t)n;
    } else {
        piece.last = piece.pos + n;
        b->pos += n;
    }
    if (chain_empty(b)) {
        fd_http_output(r, &piece, 1); /* it ends the request either way */
        return n;
    }
    rc = fd_http_output(r, &piece, 0);
    if (rc == FD_ERROR) {
        /* cut (the header is out); closed after this turn's events */
        fd_http_finalize(r, FD_ERROR);
        if (r->h2)
            fd_h2_resume(r);
        else
            post_resume(r->c->h);
    } else if (rc == FD_OK) {
        feed_queue(r);
    }
    return n;
}

static void feed_run(void *data)
{
    size_t spent = 0;

    (void)data;
    feedq.posted = 0;
    while (feedq.head && spent < FEED_TURN) {
        fd_request_t *r = feedq.head;
        fd_http_feed_unlink(r);
        if (r->on_drain != feed_drain)
            continue; /* cannot be: such a request is in no queue */
        fd_log_conn_id = r->c->id;
        spent += feed_body(r);
    }
    fd_log_conn_id = 0;
    if (feedq.head && !feedq.posted) {
        /* the rest next turn, after a look at epoll */
        feedq.posted = 1;
        fd_event_post(&feedq.post);
    }
}

/* The header of a complete response whose body goes through a body
 * filter; its pieces follow from feedq. */
static int feed_start(fd_request_t *r)
{
    r->streamed = 1;
    r->content_length = -1; /* the filter changes it: not known */
    stream_framing(r);
    r->phase = PH_RESPONSE;
    if (header_write(r, NULL) != FD_OK)
        return FD_ERROR;
    r->on_drain = feed_drain;
    feed_queue(r);
    return FD_OK;
}

/* A subrequest's header stays in it (fd_http_sub.c) */
static void sub_header(fd_request_t *r)
{
    r->header_sent = 1;
    if (r->status == 0)
        r->status = 200;
}

int fd_http_send_header(fd_request_t *r)
{
    if (r->header_sent)
        return FD_OK;
    if (fd_unlikely(r->sub_post != NULL)) {
        sub_header(r);
        return FD_OK;
    }
    if (stream_header(r) != FD_OK)
        return FD_ERROR;
    if (r->h2)
        return fd_h2_flush(r);
    return fd_http_flush(r->c) == FD_ERROR ? FD_ERROR : FD_OK;
}

int fd_http_output_body(fd_request_t *r, fd_buf_t *chain)
{
    fd_http_conn_t *h = r->c->h;
    fd_buf_t *b;

    for (b = chain; b; b = b->next) {
        size_t n = fd_buf_size(b);
        if (n == 0)
            continue;
        if (r->h2) {
            if (fd_h2_body(r, b, b->file_fd < 0) != FD_OK)
                return FD_ERROR;
            r->bytes_sent += n;
            continue;
        }
        if (r->chunked_out) {
            char size[24];
            fd_sbuf_t sb;
            fd_sbuf_init_fixed(&sb, size, sizeof(size));
            fd_sbuf_add_hex(&sb, n);
            fd_sbuf_add_crlf(&sb);
            if (fd_sbuf_failed(&sb) ||
                out_append(h, sb.start, fd_sbuf_len(&sb)) != FD_OK)
                return FD_ERROR;
        }
        if (b->file_fd >= 0)
            out_buf(h, b);
        else if (out_append(h, b->pos, n) != FD_OK) /* the caller reuses it */
            return FD_ERROR;
        if (r->chunked_out && out_append(h, "\r\n", 2) != FD_OK)
            return FD_ERROR;
        r->bytes_sent += n;
    }
    return FD_OK;
}

/* The last chunk, with the trailer fields if any (those with CR, LF or
 * NUL dropped, as in a header) */
static void last_chunk(fd_request_t *r, fd_http_conn_t *h)
{
    fd_http_header_out_t *t;

    out_append(h, "0\r\n", 3);
    for (t = r->trailers_out; t; t = t->next) {
        if (t->name.len == 0 ||
            fd_http_field_bad(t->name.data, t->name.len) ||
            fd_http_field_bad(t->value.data, t->value.len))
            continue;
        out_append(h, t->name.data, t->name.len);
        out_append(h, ": ", 2);
        out_append(h, t->value.data, t->value.len);
        out_append(h, "\r\n", 2);
    }
    out_append(h, "\r\n", 2);
}

int fd_http_output(fd_request_t *r, fd_buf_t *chain, int last)
{
    fd_connection_t *c = r->c;
    fd_http_conn_t *h = c->h;
    int rc = FD_OK;

    if (fd_unlikely(r->sub_post != NULL)) {
        /* its body goes nowhere */
        if (!r->header_sent)
            sub_header(r);
        if (last)
            fd_http_sub_end(r, FD_OK);
        return FD_OK;
    }

    if (!r->header_sent && stream_header(r) != FD_OK)
        return FD_ERROR;
    if (!r->header_only)
        rc = r->body_filter ? r->body_filter(r, chain, last)
                            : fd_http_output_body(r, chain);
    if (rc != FD_OK) {
        if (!last)
            return FD_ERROR; /* the producer cuts the response */
        /* the end, but not all of the body: the client must see that */
        r->keepalive = 0;
        r->chunked_out = 0;
    }
    if (last) {
        if (r->chunked_out && !r->header_only)
            last_chunk(r, h);
        if (r->phase == PH_STREAM && r->body_rest != 0)
            r->keepalive = 0;
        r->on_drain = NULL;
        r->on_abort = NULL;
        r->async = 0;
        request_done(c, h, r);
        if (r->h2)
            return fd_h2_flush(r);
        post_resume(h);
    }
    if (r->h2) {
        if (fd_h2_flush(r) != FD_OK)
            return FD_ERROR;
        return fd_h2_pending(r) > OUT_HIGH_WATER ? FD_AGAIN : FD_OK;
    }
    rc = fd_http_flush(c);
    if (rc == FD_ERROR)
        return FD_ERROR;
    if (!last && h->out.bytes > OUT_HIGH_WATER)
        return FD_AGAIN;
    return FD_OK;
}
