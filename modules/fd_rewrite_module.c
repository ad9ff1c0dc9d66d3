/*
 * rewrite and return (PCRE2), run in the access phase before the handler.
 *
 *   return  = CODE [URL | TEXT]      3xx: Location; others: a text/plain
 *                                    body; or return = URL (302)
 *   rewrite = REGEX REPLACEMENT [last | break | redirect | permanent]
 *
 * Both are location keys, repeatable, run in the order written. As in
 * nginx, the [http] and [server] ones run first, once per request, on the
 * request's URI before the location's own; then the location's. The regex
 * is matched against the decoded, normalised path; the replacement may
 * use $1..$9, named captures ($name or ${name}) and every variable of the
 * registry (fd_var.h: $host, $request_uri, $uri, $args, $is_args,
 * $scheme, $remote_addr, $http_NAME, ...). A `return` sees the captures of the
 * last regex that matched: a rewrite's, or the [location ~ regex]'s own.
 *
 * Flags: last: stop, route the new URI to its location (whose own rules
 * then run); break: stop, keep the location; redirect (302) / permanent
 * (301): answer with Location. No flag: go on with the next rule, and
 * route the new URI at the end if it changed. A replacement starting with
 * http://, https:// or $scheme redirects. New arguments (REPLACEMENT with
 * "?") come before the request's own, unless it ends with "?". More than
 * 10 routings of one request is a loop: 500.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_var.h"

#define RW_OVECTOR 32

enum { F_NONE, F_LAST, F_BREAK, F_REDIRECT, F_PERMANENT };
enum { OP_RETURN, OP_REWRITE };

typedef struct {
    int type;
    int code;           /* return */
    int flag;           /* rewrite */
    int redirect;       /* rewrite to http://, https://, $scheme */
    int has_args;       /* the replacement has "?" */
    int keep_args;      /* ... not at its end: append the request's */
    int has_text;
    fd_var_script_t text; /* URL or body, or the replacement up to "?" */
    fd_var_script_t args; /* the replacement after "?" */
    pcre2_code *re;
    const char *file;   /* where it was written, for errors at init_conf */
    int line;
} rw_op_t;

typedef struct {
    rw_op_t *ops;       /* [http] and [server] ones first, then own */
    unsigned nops;
    unsigned nsrv;      /* how many are [http]/[server] ones */
} rw_conf_t;

typedef struct {
    fd_var_caps_t caps; /* of the last regex that matched */
    fd_http_loc_t *settled;
    unsigned server_done:1;
    unsigned redirects; /* r->redirects when settled */
} rw_ctx_t;

fd_module_t fd_rewrite_module;

static pcre2_match_data *md; /* the worker's, reused by every match */

/* --- configuration --- */

/* [src, end) into s: a script with captures */
static int script_compile(fd_conf_t *cf, fd_var_script_t *s,
                          const char *src, const char *end, const char *what)
{
    return fd_var_compile(cf, s, src, (size_t)(end - src), FD_VAR_CAPTURES,
                          what);
}

static rw_op_t *op_new(fd_conf_t *cf, rw_conf_t *rc)
{
    rw_op_t *ops = fd_palloc(cf->pool, (rc->nops + 1) * sizeof(*ops));

    if (ops == NULL) {
        fd_conf_error(cf, "out of memory");
        return NULL;
    }
    if (rc->nops)
        memcpy(ops, rc->ops, rc->nops * sizeof(*ops));
    rc->ops = ops;
    memset(&ops[rc->nops], 0, sizeof(*ops));
    ops[rc->nops].file = cf->file;
    ops[rc->nops].line = cf->line;
    return &ops[rc->nops++];
}

static int is_redirect_code(int code)
{
    return code == 301 || code == 302 || code == 303 || code == 307 ||
           code == 308;
}

static int starts_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0 ||
           strncmp(s, "$scheme", 7) == 0 || strncmp(s, "${scheme}", 9) == 0;
}

static int set_return(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                      const char *v)
{
    rw_op_t *op;
    const char *p, *end;
    char *e;
    long code;

    (void)d;
    while (*v == ' ' || *v == '\t')
        v++;
    if ((op = op_new(cf, conf)) == NULL)
        return FD_ERROR;
    op->type = OP_RETURN;
    if (starts_url(v)) {
        code = 302; /* return = URL */
        p = v;
    } else {
        code = strtol(v, &e, 10);
        if (e == v || (*e && *e != ' ' && *e != '\t') || code < 200 ||
            code > 599)
            return fd_conf_error(cf, "return needs a status 200..599 and "
                                 "an optional URL or text, not \"%s\"", v);
        p = e;
    }
    op->code = (int)code;
    while (*p == ' ' || *p == '\t')
        p++;
    end = p + strlen(p);
    if (end - p >= 2 && *p == '"' && end[-1] == '"') {
        p++;
        end--;
    }
    op->has_text = p < end;
    if (is_redirect_code(op->code) && !op->has_text)
        return fd_conf_error(cf, "return %ld needs a URL", code);
    if (op->has_text &&
        script_compile(cf, &op->text, p, end, "return") != FD_OK)
        return FD_ERROR;
    return FD_OK;
}

static int set_rewrite(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                       const char *v)
{
    char *copy = fd_pstrdup(cf->pool, v, strlen(v)), *save;
    char *re_src = strtok_r(copy, " \t", &save);
    char *rep = strtok_r(NULL, " \t", &save);
    char *flag = strtok_r(NULL, " \t", &save);
    const char *q, *end;
    rw_op_t *op;
    PCRE2_SIZE off;
    int err;

    (void)d;
    if (re_src == NULL || rep == NULL || strtok_r(NULL, " \t", &save))
        return fd_conf_error(cf, "rewrite needs REGEX REPLACEMENT [last | "
                             "break | redirect | permanent], not \"%s\"", v);
    if ((op = op_new(cf, conf)) == NULL)
        return FD_ERROR;
    op->type = OP_REWRITE;
    if (flag == NULL)
        op->flag = F_NONE;
    else if (strcmp(flag, "last") == 0)
        op->flag = F_LAST;
    else if (strcmp(flag, "break") == 0)
        op->flag = F_BREAK;
    else if (strcmp(flag, "redirect") == 0)
        op->flag = F_REDIRECT;
    else if (strcmp(flag, "permanent") == 0)
        op->flag = F_PERMANENT;
    else
        return fd_conf_error(cf, "rewrite: unknown flag \"%s\" (last, "
                             "break, redirect or permanent)", flag);
    op->re = pcre2_compile((PCRE2_SPTR)re_src, PCRE2_ZERO_TERMINATED, 0,
                           &err, &off, NULL);
    if (op->re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return fd_conf_error(cf, "rewrite: regex \"%s\" at offset %zu: %s",
                             re_src, (size_t)off, (char *)msg);
    }
    fd_pool_cleanup_add(cf->pool, (void (*)(void *))pcre2_code_free, op->re);
    pcre2_jit_compile(op->re, PCRE2_JIT_COMPLETE); /* when available */
    op->redirect = starts_url(rep) || op->flag == F_REDIRECT ||
                   op->flag == F_PERMANENT;
    if (!starts_url(rep) && rep[0] != '/' && rep[0] != '$')
        return fd_conf_error(cf, "rewrite: replacement \"%s\" must start "
                             "with /, http://, https:// or a variable",
                             rep);
    /* the arguments follow the first "?" (no variable name holds one) */
    end = rep + strlen(rep);
    if ((q = strchr(rep, '?')) == NULL)
        q = end;
    if (script_compile(cf, &op->text, rep, q, "rewrite") != FD_OK)
        return FD_ERROR;
    if (q < end) {
        op->has_args = 1;
        /* a last "?" drops the request's arguments: "/x?" adds none,
         * "/x?a=1?" adds a=1 (the "?" right after q is both) */
        op->keep_args = q + 1 < end && end[-1] != '?';
        if (script_compile(cf, &op->args, q + 1,
                           end[-1] == '?' && end - 1 > q ? end - 1 : end,
                           "rewrite") != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

static int name_in(const pcre2_code *re, const char *name)
{
    return re && pcre2_substring_number_from_name(re, (PCRE2_SPTR)name) > 0;
}

/* Every $name must be a named group of a regex that can match first. */
static int check_names(fd_conf_t *cf, fd_http_loc_t *loc, rw_conf_t *rc,
                       const rw_op_t *op, const fd_var_script_t *s)
{
    char hint[96];
    unsigned i, j;

    for (i = 0; i < s->n; i++) {
        const char *name = s->ops[i].text.data;
        int found = 0;
        if (s->ops[i].kind != FD_VAR_OP_NAMED)
            continue;
        if (op->type == OP_REWRITE) {
            found = name_in(op->re, name);
        } else {
            found = name_in(loc->regex, name);
            for (j = 0; j < rc->nops && !found; j++)
                found = name_in(rc->ops[j].re, name);
        }
        if (!found) {
            cf->file = op->file;
            cf->line = op->line;
            return fd_conf_error(cf, "unknown variable \"$%s\" (not a "
                                 "known variable nor a named capture)%s",
                                 name, fd_var_hint(name, strlen(name), hint,
                                                   sizeof(hint)));
        }
    }
    return FD_OK;
}

static int rewrite_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    rw_conf_t *rc = conf;
    const char *file = cf->file;
    int line = cf->line;
    unsigned i;

    /* the server's implicit location holds the [http] and [server] rules,
     * already applied when its [location]s are loaded */
    if (loc == loc->server->root_loc)
        rc->nsrv = rc->nops;
    else
        rc->nsrv = ((rw_conf_t *)fd_loc_conf(loc->server->root_loc,
                                             &fd_rewrite_module))
                       ->nops;
    for (i = 0; i < rc->nops; i++) {
        rw_op_t *op = &rc->ops[i];
        if (check_names(cf, loc, rc, op, &op->text) != FD_OK ||
            check_names(cf, loc, rc, op, &op->args) != FD_OK)
            return FD_ERROR;
    }
    cf->file = file;
    cf->line = line;
    return FD_OK;
}

static int rewrite_init_worker(fd_worker_t *w)
{
    (void)w;
    md = pcre2_match_data_create(RW_OVECTOR, NULL);
    if (md == NULL) {
        fd_log_error(FD_LOG_ALERT, 0, "rewrite: out of memory");
        return FD_ERROR;
    }
    return FD_OK;
}

static void rewrite_exit_worker(fd_worker_t *w)
{
    (void)w;
    pcre2_match_data_free(md);
    md = NULL;
}

/* --- scripts at run time --- */

enum { ESC_NONE, ESC_PATH, ESC_ARGS, ESC_INTERNAL };

static int must_escape(unsigned char c, int esc)
{
    if (esc == ESC_INTERNAL)
        return c == '%';
    if (c <= 0x20 || c >= 0x7f)
        return 1;
    switch (c) {
    case '"': case '#': case '%': case '<': case '>': case '\\':
    case '^': case '`': case '{': case '|': case '}': case '?':
        return 1;
    case '&': case '+':
        return esc == ESC_ARGS;
    }
    return 0;
}

/* v into sb, the bytes esc says escaped as %XX */
static void escape_add(fd_sbuf_t *sb, fd_str_t v, int esc)
{
    size_t j;

    for (j = 0; j < v.len; j++) {
        unsigned char c = (unsigned char)v.data[j];
        if (must_escape(c, esc))
            fd_var_add_pct(sb, c);
        else
            fd_sbuf_addc(sb, (char)c);
    }
}

/* The builder's bytes, NUL-ended, as *out; FD_ERROR if it failed. */
static int sbuf_done(fd_sbuf_t *sb, fd_str_t *out)
{
    fd_sbuf_addc(sb, '\0');
    if (fd_sbuf_failed(sb))
        return FD_ERROR;
    *out = (fd_str_t){fd_sbuf_len(sb) - 1, sb->start};
    return FD_OK;
}

static int escape(fd_request_t *r, fd_str_t v, int esc, fd_str_t *out)
{
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, v.len + 1) != FD_OK)
        return FD_ERROR;
    escape_add(&sb, v, esc);
    return sbuf_done(&sb, out);
}

/* Run a script into r->pool; values escaped as esc says. */
static int script_run(fd_request_t *r, rw_ctx_t *x,
                      const fd_var_script_t *s, int esc, fd_str_t *out)
{
    char tmp[FD_VAR_TMP];
    fd_sbuf_t sb;
    unsigned i;

    if (fd_sbuf_init(&sb, r->pool, 128) != FD_OK)
        return FD_ERROR;
    for (i = 0; i < s->n; i++) {
        const fd_var_op_t *op = &s->ops[i];
        fd_str_t v = fd_var_value(r, op, &x->caps, tmp);
        /* literals and URL-safe variables as they are; captures and
         * other values escaped */
        if (esc == ESC_NONE || op->kind == FD_VAR_OP_LIT ||
            (op->flags & FD_VAR_URLSAFE))
            fd_sbuf_add_str(&sb, v);
        else
            escape_add(&sb, v, esc);
    }
    return sbuf_done(&sb, out);
}

/* The arguments after a rewrite: new ones, then the request's own. */
static int new_args(fd_request_t *r, rw_ctx_t *x, const rw_op_t *op,
                    fd_str_t *args)
{
    fd_str_t a;
    fd_sbuf_t sb;

    if (!op->has_args) {
        *args = r->in.query;
        return FD_OK;
    }
    if (script_run(r, x, &op->args, ESC_ARGS, &a) != FD_OK)
        return FD_ERROR;
    if (!op->keep_args || r->in.query.len == 0) {
        *args = a;
        return FD_OK;
    }
    if (fd_sbuf_init(&sb, r->pool, a.len + 1 + r->in.query.len) != FD_OK)
        return FD_ERROR;
    fd_sbuf_add_str(&sb, a);
    fd_sbuf_addc(&sb, '&');
    fd_sbuf_add_str(&sb, r->in.query);
    if (fd_sbuf_failed(&sb))
        return FD_ERROR;
    *args = fd_sbuf_str(&sb);
    return FD_OK;
}

/* Answer with status and a Location; FD_DONE. */
static int redirect(fd_request_t *r, int status, fd_str_t path,
                    fd_str_t args)
{
    if (args.len) {
        fd_sbuf_t sb;
        if (fd_sbuf_init(&sb, r->pool, path.len + 1 + args.len) != FD_OK)
            return 500;
        fd_sbuf_add_str(&sb, path);
        fd_sbuf_addc(&sb, '?');
        fd_sbuf_add_str(&sb, args);
        if (fd_sbuf_failed(&sb))
            return 500;
        path = fd_sbuf_str(&sb);
    }
    if (fd_http_error_page(r, status) != FD_OK ||
        fd_http_header_add(r, fd_string("Location"), path) != FD_OK)
        return 500;
    return FD_DONE;
}

static int run_return(fd_request_t *r, rw_ctx_t *x, const rw_op_t *op)
{
    fd_str_t text;

    if (is_redirect_code(op->code)) {
        if (script_run(r, x, &op->text, ESC_PATH, &text) != FD_OK)
            return 500;
        /* the URL's own "?" and arguments are part of the text */
        return redirect(r, op->code, text, fd_null_string);
    }
    if (!op->has_text) {
        if (op->code >= 400)
            return op->code; /* the engine's (or error_page) page */
        r->status = op->code;
        return fd_http_body_set(r, "", 0) == FD_OK ? FD_DONE : 500;
    }
    if (script_run(r, x, &op->text, ESC_NONE, &text) != FD_OK)
        return 500;
    r->status = op->code;
    r->content_type = fd_string("text/plain");
    return fd_http_body_set(r, text.data, text.len) == FD_OK ? FD_DONE : 500;
}

/* Set the request's URI to path?args (path built by a rewrite). */
static int set_uri(fd_request_t *r, fd_str_t path, fd_str_t args)
{
    char *norm = fd_pnalloc(r->pool, path.len + 2);
    size_t n;

    if (norm == NULL)
        return 500;
    if (path.len == 0 || path.data[0] != '/' ||
        fd_http_normalize_path(path, norm, &n) != FD_OK) {
        fd_log_error(FD_LOG_ERR, 0, "rewrite: bad new URI \"%.*s\"",
                     (int)fd_min(path.len, 256), path.data);
        return 500;
    }
    norm[n] = '\0';
    r->path = (fd_str_t){n, norm};
    /* the encoded form too, for handlers that forward the URI */
    if (escape(r, r->path, ESC_PATH, &r->in.path_raw) != FD_OK)
        return 500;
    r->in.query = args;
    r->uri_changed = 1;
    return FD_OK;
}

enum { RUN_END, RUN_LAST, RUN_BREAK };

/*
 * Run ops [from, to): an answer (FD_DONE or a status), or FD_OK with
 * *how (RUN_END, RUN_LAST, RUN_BREAK) and *changed.
 */
static int run_ops(fd_request_t *r, rw_ctx_t *x, const rw_op_t *ops,
                   unsigned n, int *how, int *changed)
{
    unsigned i;

    *how = RUN_END;
    for (i = 0; i < n; i++) {
        const rw_op_t *op = &ops[i];
        PCRE2_SIZE *ov;
        size_t *kept;
        fd_str_t path, args;
        int rc, k;

        if (op->type == OP_RETURN)
            return run_return(r, x, op);
        rc = pcre2_match(op->re, (PCRE2_SPTR)r->path.data, r->path.len, 0, 0,
                         md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            continue;
        if (rc < 0) {
            fd_log_error(FD_LOG_ERR, 0, "rewrite: pcre2_match() failed: %d",
                         rc);
            return 500;
        }
        if (rc == 0)
            rc = RW_OVECTOR; /* more groups than kept */
        ov = pcre2_get_ovector_pointer(md);
        kept = fd_palloc(r->pool, 2 * (size_t)rc * sizeof(size_t));
        if (kept == NULL)
            return 500;
        for (k = 0; k < 2 * rc; k++)
            kept[k] = ov[k];
        x->caps = (fd_var_caps_t){.subj = r->path.data, .ov = kept,
                                  .n = rc, .re = op->re};
        if (op->redirect) {
            if (script_run(r, x, &op->text, ESC_PATH, &path) != FD_OK ||
                new_args(r, x, op, &args) != FD_OK)
                return 500;
            return redirect(r, op->flag == F_PERMANENT ? 301 : 302, path,
                            args);
        }
        if (script_run(r, x, &op->text, ESC_INTERNAL, &path) != FD_OK ||
            new_args(r, x, op, &args) != FD_OK)
            return 500;
        if ((rc = set_uri(r, path, args)) != FD_OK)
            return rc;
        *changed = 1;
        if (op->flag == F_LAST) {
            *how = RUN_LAST;
            return FD_OK;
        }
        if (op->flag == F_BREAK) {
            *how = RUN_BREAK;
            return FD_OK;
        }
    }
    return FD_OK;
}

/* Route the (new) URI; its location's captures become the current. */
static void reroute(fd_request_t *r, rw_ctx_t *x)
{
    r->ncaptures = 0;
    r->captures = NULL;
    r->loc = fd_http_find_location(r);
    x->caps = (fd_var_caps_t){.subj = r->path.data, .ov = r->captures,
                              .n = r->ncaptures,
                              .re = r->captures ? r->loc->regex : NULL};
}

static int rewrite_access(fd_request_t *r)
{
    rw_conf_t *rc = fd_loc_conf(r->loc, &fd_rewrite_module);
    void **slot;
    rw_ctx_t *x;
    int how, changed, rv;

    if (rc->nops == 0)
        return FD_OK;
    slot = fd_request_ctx(r, &fd_rewrite_module);
    if (slot == NULL)
        return 500;
    x = *slot;
    if (x == NULL) {
        x = *slot = fd_pcalloc(r->pool, sizeof(*x));
        if (x == NULL)
            return 500;
        x->caps = (fd_var_caps_t){.subj = r->path.data,
                                  .ov = r->captures,
                                  .n = r->captures ? r->ncaptures : 0,
                                  .re = r->captures ? r->loc->regex : NULL};
    }
    if (x->redirects != r->redirects) {
        /* an internal redirect (try_files) restarted the access phase:
         * the new URI's rules run, as nginx's, the server's too unless
         * it went to a named location */
        x->redirects = r->redirects;
        x->settled = NULL;
        x->server_done = r->loc->kind == FD_LOC_NAMED;
        x->caps = (fd_var_caps_t){.subj = r->path.data, .ov = r->captures,
                                  .n = r->captures ? r->ncaptures : 0,
                                  .re = r->captures ? r->loc->regex : NULL};
    }
    if (x->settled == r->loc)
        return FD_OK; /* called again after the location changed */
    if (!x->server_done) {
        /* the [http]/[server] rules, once, as nginx's server rewrites */
        x->server_done = 1;
        changed = 0;
        rv = run_ops(r, x, rc->ops, rc->nsrv, &how, &changed);
        if (rv != FD_OK)
            return rv;
        if (changed) {
            reroute(r, x);
            rc = fd_loc_conf(r->loc, &fd_rewrite_module);
        }
    }
    for (;;) {
        changed = 0;
        if (rc->nops == rc->nsrv)
            break; /* no rules of the location's own: ops may be NULL */
        rv = run_ops(r, x, rc->ops + rc->nsrv, rc->nops - rc->nsrv, &how,
                     &changed);
        if (rv != FD_OK)
            return rv;
        if (!changed || how == RUN_BREAK)
            break;
        if ((rv = fd_http_redirect_count(r, r->path)) != FD_OK)
            return rv;
        reroute(r, x);
        rc = fd_loc_conf(r->loc, &fd_rewrite_module);
    }
    x->settled = r->loc;
    return FD_OK;
}

static const fd_directive_t rewrite_directives[] = {
    {.name = "return", .type = FD_CONF_LIST, .offset = 0, .set = set_return,
     .doc = "CODE [URL | TEXT], or URL (302): answer at once; for 301, 302, "
            "303, 307 and 308 the URL is the Location, otherwise TEXT is a "
            "text/plain body; $variables and captures are expanded"},
    {.name = "rewrite", .type = FD_CONF_LIST, .offset = 0,
     .set = set_rewrite,
     .doc = "REGEX REPLACEMENT [last | break | redirect | permanent], "
            "repeatable, run in order; $1..$9 and named captures"},
    FD_CONF_END};

static int rewrite_loc_active(const fd_http_loc_t *loc)
{
    return ((rw_conf_t *)fd_loc_conf(loc, &fd_rewrite_module))->nops > 0;
}

fd_module_t fd_rewrite_module = {
    FD_MODULE_LOC(rewrite, rw_conf_t),
    .init_worker = rewrite_init_worker,
    .exit_worker = rewrite_exit_worker,
    .access = rewrite_access,
    .loc_active = rewrite_loc_active,
};
