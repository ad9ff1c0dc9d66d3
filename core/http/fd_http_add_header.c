/*
 * Response headers a location adds: add_header and expires. The keys
 * are core location keys (fd_cycle_keys.c declares them); their values
 * are registry scripts (fd_var.h), compiled at load and evaluated when
 * the response header is written, for every handler and both protocols
 * (fd_http_output.c calls fd_http_add_headers() before either writer).
 *
 * Inheritance: a location's add_header lines ADD to the server's (and
 * the server's to [http]'s), unlike nginx, where one add_header in a
 * location silently drops all of the server's. add_header_inherit = off
 * in a section keeps only that section's own.
 */
#include "fd_core.h"
#include "fd_http.h"
#include "fd_var.h"

/* nginx's: the statuses add_header (without always) and expires apply to */
static int status_applies(int s)
{
    switch (s) {
    case 200: case 201: case 204: case 206: case 301: case 302: case 303:
    case 304: case 307: case 308:
        return 1;
    }
    return 0;
}

/* --- configuration --- */

/* framing and hop-by-hop fields: the engine's (and HTTP/2's) to write */
static int reserved_name(fd_str_t n)
{
    return fd_str_caseeq_lit(n, "content-length") ||
           fd_str_caseeq_lit(n, "transfer-encoding") ||
           fd_str_caseeq_lit(n, "connection") ||
           fd_str_caseeq_lit(n, "keep-alive") ||
           fd_str_caseeq_lit(n, "upgrade") || fd_str_caseeq_lit(n, "te") ||
           fd_str_caseeq_lit(n, "trailer");
}

/* add_header = NAME VALUE [always]; VALUE may be "quoted" (to keep
 * spaces at its ends, or to be a lone word "always") */
int fd_http_set_add_header(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *v)
{
    fd_http_loc_t *loc = conf;
    fd_http_add_header_t *hs, *h;
    const char *name = v, *val, *end;
    size_t n, k;

    (void)d;
    for (n = 0; name[n] && name[n] != ' ' && name[n] != '\t'; n++)
        if (!fd_http_tchar[(uint8_t)name[n]])
            return fd_conf_error(cf, "add_header: bad header name \"%.*s\" "
                                 "(a space, a control character or a "
                                 "separator)", (int)strcspn(name, " \t"),
                                 name);
    for (val = name + n; *val == ' ' || *val == '\t'; val++)
        ;
    if (n == 0 || *val == '\0')
        return fd_conf_error(cf, "add_header needs NAME VALUE [always], "
                             "not \"%s\"", v);
    hs = fd_parray_reserve(cf->pool, loc->add_headers, loc->nadd_headers,
                           &loc->add_headers_cap, sizeof(*hs));
    if (hs == NULL)
        return fd_conf_error(cf, "out of memory");
    h = &hs[loc->nadd_headers];
    memset(h, 0, sizeof(*h));
    h->name = (fd_str_t){n, fd_pstrdup(cf->pool, name, n)};
    end = val + strlen(val);
    while (end > val && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end - val > 7 && memcmp(end - 6, "always", 6) == 0 &&
        (end[-7] == ' ' || end[-7] == '\t')) {
        h->always = 1;
        for (end -= 7; end > val && (end[-1] == ' ' || end[-1] == '\t');)
            end--;
    }
    if (end - val >= 2 && *val == '"' && end[-1] == '"') {
        val++;
        end--;
    }
    for (k = 0; val + k < end; k++)
        if (((uint8_t)val[k] < 0x20 && val[k] != '\t') || val[k] == 0x7f)
            return fd_conf_error(cf, "add_header: control character in "
                                 "the value of %.*s", (int)n, name);
    if (reserved_name(h->name))
        return fd_conf_error(cf, "add_header: %.*s is the server's to set "
                             "(framing and hop-by-hop)", (int)n, name);
    if (fd_var_compile(cf, &h->value, val, (size_t)(end - val), 0,
                       "add_header") != FD_OK)
        return FD_ERROR;
    loc->add_headers = hs;
    loc->nadd_headers++;
    return FD_OK;
}

/* expires = off | epoch | max | [-]DURATION */
int fd_http_set_expires(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                        const char *v)
{
    fd_http_loc_t *loc = conf;
    int neg = *v == '-';
    int64_t ms;

    (void)d;
    if (strcmp(v, "off") == 0) {
        loc->expires_mode = FD_EXPIRES_OFF;
        return FD_OK;
    }
    if (strcmp(v, "epoch") == 0) {
        loc->expires_mode = FD_EXPIRES_EPOCH;
        return FD_OK;
    }
    if (strcmp(v, "max") == 0) {
        loc->expires_mode = FD_EXPIRES_MAX;
        return FD_OK;
    }
    ms = fd_conf_parse_msec(v + neg);
    if (ms < 0 || ms / 1000 > 100LL * 365 * 86400)
        return fd_conf_error(cf, "expires must be off, epoch, max or a "
                             "duration (1h, 30d, -1), not \"%s\"", v);
    loc->expires_mode = FD_EXPIRES_TIME;
    loc->expires = neg ? -(ms / 1000) : ms / 1000;
    return FD_OK;
}

void fd_http_loc_headers_mark(fd_http_loc_t *loc)
{
    loc->add_headers_own = loc->nadd_headers;
    loc->add_header_inherit = 1;
}

void fd_http_loc_headers_finish(fd_http_loc_t *loc)
{
    if (loc->add_header_inherit || loc->add_headers_own == 0)
        return;
    loc->add_headers += loc->add_headers_own;
    loc->nadd_headers -= loc->add_headers_own;
    loc->add_headers_cap = 0; /* no room counted from the new start */
    loc->add_headers_own = 0;
}

/* --- per response --- */

/* Drop the handler's (or upstream's) fields named name: expires wins. */
static void headers_drop(fd_request_t *r, const char *name, size_t n)
{
    fd_http_header_out_t **pp = &r->headers_out;

    while (*pp) {
        if (fd_str_caseeq((*pp)->name, name, n)) {
            *pp = (*pp)->next;
            continue;
        }
        pp = &(*pp)->next;
    }
    for (r->headers_out_last = &r->headers_out; *r->headers_out_last;)
        r->headers_out_last = &(*r->headers_out_last)->next;
}

static int expires_add(fd_request_t *r, const fd_http_loc_t *loc)
{
    time_t t;
    int64_t age;
    char *p = fd_pnalloc(r->pool, 32 + 32);
    fd_str_t cc;

    if (p == NULL)
        return FD_ERROR;
    headers_drop(r, "Expires", 7);
    headers_drop(r, "Cache-Control", 13);
    switch (loc->expires_mode) {
    case FD_EXPIRES_EPOCH:
        t = 1;
        age = -1;
        break;
    case FD_EXPIRES_MAX:
        t = 2145916555; /* Thu, 31 Dec 2037 23:55:55 GMT, as nginx */
        age = 315360000;
        break;
    default:
        t = fd_current_sec + loc->expires;
        age = loc->expires;
    }
    if (fd_http_header_add(r, fd_string("Expires"),
                           (fd_str_t){fd_http_time(p, t), p}) != FD_OK)
        return FD_ERROR;
    if (age < 0) {
        cc = fd_string("no-cache");
    } else {
        char *q = p + 32, *e = q;
        memcpy(e, "max-age=", 8);
        e = fd_fmt_uint(e + 8, (uint64_t)age);
        cc = (fd_str_t){(size_t)(e - q), q};
    }
    return fd_http_header_add(r, fd_string("Cache-Control"), cc);
}

int fd_http_add_headers(fd_request_t *r)
{
    const fd_http_loc_t *loc = r->loc;
    int applies;
    unsigned i;

    if (loc == NULL && r->server)
        loc = r->server->root_loc; /* refused before routing */
    if (loc == NULL ||
        (loc->nadd_headers == 0 && loc->expires_mode == FD_EXPIRES_OFF))
        return FD_OK;
    applies = status_applies(r->status);
    if (applies && loc->expires_mode != FD_EXPIRES_OFF &&
        expires_add(r, loc) != FD_OK)
        return FD_ERROR;
    for (i = 0; i < loc->nadd_headers; i++) {
        const fd_http_add_header_t *h = &loc->add_headers[i];
        fd_str_t v;
        if (!applies && !h->always)
            continue;
        if (fd_var_eval_str(r, &h->value, FD_VAR_ESC_HEADER, &v) != FD_OK)
            return FD_ERROR;
        /* as nginx: a value that comes out empty adds nothing */
        if (v.len && fd_http_header_add(r, h->name, v) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}
