/*
 * auth_request = /internal/path: nginx's auth_request. In the access
 * phase, a subrequest (fd_http_sub.c: a GET of the path, r's header, no
 * body) goes to that location, usually proxied to an auth service
 * (oauth2-proxy, Authelia); its answer decides:
 *
 *   2xx       the request goes on (the next access check, the handler);
 *   401, 403  that answer to the client (401 with the service's
 *             WWW-Authenticate);
 *   else      500: the service failed (down: the proxy's 502; slow: its
 *             504), and a request is never let through on a failure.
 *
 * auth_request_set = $var VALUE (repeatable) sets $var for the rest of
 * the request from the subrequest's answer, whatever it was: VALUE is
 * evaluated in the subrequest, so $upstream_http_x_user is the auth
 * service's X-User header, $status its status. $var is declared by the
 * key (fd_directive_t.declares): any key of the file may read it.
 *
 * A core module (auto/config's FD_CORE_MODULES): subrequests are the
 * engine's. The subrequest's location needs nothing special; a location
 * reachable only this way is one no client path matches, or one an acl
 * closes to clients (the subrequest is not checked by the parent's
 * auth_request again).
 */
#include "fd_core.h"
#include "fd_http.h"
#include "fd_module.h"
#include "fd_sbuf.h"
#include "fd_var.h"

fd_module_t fd_auth_request_module;

typedef struct {
    const fd_var_t *var;
    fd_var_script_t value;
} ar_set_t;

typedef struct {
    fd_str_t uri;              /* empty: off */
    ar_set_t *sets;
    unsigned nsets, cap;
} ar_conf_t;

typedef struct {
    fd_request_t *r;
    fd_request_t *sr;          /* under way, or NULL */
    int status;                /* the subrequest's, once it ended */
    fd_str_t www_auth;         /* its WWW-Authenticate (a 401's) */
    unsigned done:1;
    void (*prev_abort)(fd_request_t *r);
} ar_ctx_t;

static int ar_set_uri(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    ar_conf_t *ac = conf;

    (void)d;
    if (strcmp(v, "off") == 0) {
        ac->uri = fd_null_string;
        return FD_OK;
    }
    if (v[0] != '/' || strpbrk(v, "?# \t") != NULL || strstr(v, "/../") ||
        strstr(v, "/./") || strstr(v, "//"))
        return fd_conf_error(cf, "auth_request: \"%s\" is not a path (a "
                             "normal one, from \"/\", without a query) nor "
                             "off", v);
    ac->uri = (fd_str_t){strlen(v), fd_pstrdup(cf->pool, v, strlen(v))};
    return ac->uri.data ? FD_OK : fd_conf_error(cf, "out of memory");
}

/* auth_request_set = $var VALUE */
static int ar_set_var(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    ar_conf_t *ac = conf;
    const char *name = v + 1, *val;
    ar_set_t *ss;
    size_t n = 0;

    (void)d;
    while (name[n] && name[n] != ' ' && name[n] != '\t')
        n++;
    for (val = name + n; *val == ' ' || *val == '\t'; val++)
        ;
    if (v[0] != '$' || n == 0 || *val == '\0')
        return fd_conf_error(cf, "auth_request_set needs $VARIABLE VALUE, "
                             "not \"%s\"", v);
    ss = fd_parray_reserve(cf->pool, ac->sets, ac->nsets, &ac->cap,
                           sizeof(*ss));
    if (ss == NULL)
        return fd_conf_error(cf, "out of memory");
    ac->sets = ss;
    /* declared before the file was applied (fd_cycle.c) */
    ss[ac->nsets].var = fd_var_declared(name, n);
    if (ss[ac->nsets].var == NULL ||
        ss[ac->nsets].var->get != fd_var_get_set)
        return fd_conf_error(cf, "auth_request_set: $%.*s is fastd's own "
                             "variable or another section's", (int)n, name);
    if (fd_var_compile(cf, &ss[ac->nsets].value, val, strlen(val), 0,
                       "auth_request_set") != FD_OK)
        return FD_ERROR;
    ac->nsets++;
    return FD_OK;
}

static int auth_request_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    (void)cf;
    (void)loc;
    (void)conf;
    return FD_OK;
}

static int ar_active(const fd_http_loc_t *loc)
{
    const ar_conf_t *ac = fd_loc_conf(loc, &fd_auth_request_module);

    return ac->uri.len > 0;
}

/* What the answer means for r: FD_OK (in), FD_DONE (r holds the 401
 * page), or the status r gets. */
static int ar_verdict(fd_request_t *r, const ar_ctx_t *x)
{
    if (x->status >= 200 && x->status <= 299)
        return FD_OK;
    if (x->status == 403)
        return 403;
    if (x->status != 401)
        return 500;
    if (fd_http_error_page(r, 401) != FD_OK ||
        (x->www_auth.len &&
         fd_http_header_add(r, fd_string("WWW-Authenticate"), x->www_auth) !=
             FD_OK))
        return 500;
    return FD_DONE;
}

/* r->on_abort while the subrequest runs: the client left */
static void ar_abort(fd_request_t *r)
{
    ar_ctx_t *x = *fd_request_ctx(r, &fd_auth_request_module);
    void (*prev)(fd_request_t *) = x->prev_abort;

    if (x->sr) {
        fd_http_subrequest_abort(x->sr);
        x->sr = NULL;
    }
    r->on_abort = prev;
    if (prev)
        prev(r);
}

static fd_str_t header_of(const fd_request_t *sr, const char *name,
                          size_t n)
{
    const fd_http_header_out_t *h;

    for (h = sr->headers_out; h; h = h->next)
        if (fd_str_caseeq(h->name, name, n) && h->name.len == n)
            return h->value;
    return fd_null_string;
}

/* The subrequest ended (end of a loop turn): its answer for r */
static void ar_done(fd_request_t *sr)
{
    ar_ctx_t *x = sr->sub_data;
    fd_request_t *r = x->r;
    ar_conf_t *ac = fd_loc_conf(r->loc, &fd_auth_request_module);
    fd_str_t wa;
    unsigned i;
    int rc;

    x->sr = NULL;
    x->done = 1;
    x->status = sr->status;
    r->on_abort = x->prev_abort;
    if (x->status == 401 &&
        (wa = header_of(sr, "www-authenticate", 16)).len &&
        (x->www_auth.data = fd_pstrdup(r->pool, wa.data, wa.len)) != NULL)
        x->www_auth.len = wa.len;
    for (i = 0; i < ac->nsets; i++) {
        /* read in the subrequest, kept in r */
        fd_sbuf_t sb;
        if (fd_sbuf_init(&sb, r->pool, 64) != FD_OK)
            break;
        fd_var_eval(sr, &ac->sets[i].value, NULL, FD_VAR_ESC_NONE, &sb);
        if (fd_sbuf_failed(&sb) ||
            fd_var_set(r, ac->sets[i].var, fd_sbuf_str(&sb)) != FD_OK)
            break;
    }
    if (x->status < 200 || x->status > 299)
        fd_log_error(x->status == 401 || x->status == 403 ? FD_LOG_INFO
                                                          : FD_LOG_ERR,
                     0, "auth_request \"%.*s\" answered %d%s",
                     (int)ac->uri.len, ac->uri.data, x->status,
                     x->status == 401 || x->status == 403
                         ? ""
                         : ": the request is refused (500)");
    rc = i < ac->nsets ? 500 : ar_verdict(r, x);
    if (rc == FD_OK)
        fd_http_access_continue(r, &fd_auth_request_module);
    else
        fd_request_finish(r, rc == FD_DONE ? FD_OK : rc);
}

static int ar_access(fd_request_t *r)
{
    ar_conf_t *ac = fd_loc_conf(r->loc, &fd_auth_request_module);
    void **slot;
    ar_ctx_t *x;

    if (r->sub_post || ac->uri.len == 0)
        return FD_OK; /* a subrequest is not checked again */
    if ((slot = fd_request_ctx(r, &fd_auth_request_module)) == NULL)
        return 500;
    if ((x = *slot) != NULL && x->done)
        return ar_verdict(r, x); /* moved on after it: the same answer */
    if ((x = fd_pcalloc(r->pool, sizeof(*x))) == NULL)
        return 500;
    *slot = x;
    x->r = r;
    x->prev_abort = r->on_abort;
    r->on_abort = ar_abort;
    if ((x->sr = fd_http_subrequest(r, ac->uri, ar_done, x)) == NULL) {
        r->on_abort = x->prev_abort;
        return 500;
    }
    return FD_AGAIN;
}

static const fd_directive_t auth_request_directives[] = {
    {.name = "auth_request", .type = FD_CONF_CUSTOM, .set = ar_set_uri,
     .doc = "PATH | off: before the handler, a subrequest (GET PATH with "
            "the request's header, no body) to the location PATH routes "
            "to; its 2xx lets the request in, 401 and 403 are the answer "
            "(a 401 with its WWW-Authenticate), anything else (the auth "
            "service down: 502, slow: 504) is 500"},
    {.name = "auth_request_set", .type = FD_CONF_LIST, .set = ar_set_var,
     .declares = 1,
     .doc = "repeatable: $VARIABLE VALUE, set once the subrequest ended, "
            "VALUE read in it: $upstream_http_x_user is the auth service's "
            "X-User header; $VARIABLE is then usable by every key (a "
            "header for the upstream, the access log)"},
    FD_CONF_END};

fd_module_t fd_auth_request_module = {
    FD_MODULE_LOC(auth_request, ar_conf_t),
    .access = ar_access,
    .loc_active = ar_active,
};
