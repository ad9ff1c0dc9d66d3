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
 * registry ($host, $request_uri, $uri, $args, $is_args,
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
#include <string.h>

#include "fastd.h"

#define RW_OVECTOR 32
#define RW_MAX_URI 256 /* of a bad URI, logged */

enum { F_NONE, F_LAST, F_BREAK, F_REDIRECT, F_PERMANENT };
enum { OP_RETURN, OP_REWRITE };

/* A script, and for each of its parts whether it goes as it is (text,
 * URL-safe variables) rather than escaped: read once, not per request. */
typedef struct {
    const fd_api_script_t *s;
    unsigned n;
    unsigned char *raw;
} rw_script_t;

typedef struct {
    int type;
    int code;           /* return */
    int flag;           /* rewrite */
    int redirect;       /* rewrite to http://, https://, $scheme */
    int has_args;       /* the replacement has "?" */
    int keep_args;      /* ... not at its end: append the request's */
    int has_text;
    rw_script_t text;   /* URL or body, or the replacement up to "?" */
    rw_script_t args;   /* the replacement after "?" */
    pcre2_code *re;
    fd_api_conf_pos_t pos; /* where it was written, for init_conf */
} rw_op_t;

typedef struct {
    rw_op_t *ops;       /* [http] and [server] ones first, then own */
    unsigned nops;
    unsigned nsrv;      /* how many are [http]/[server] ones */
} rw_conf_t;

typedef struct {
    fd_api_captures_t caps; /* of the last regex that matched */
    const fd_api_loc_t *settled;
    unsigned server_done:1;
    unsigned redirects; /* fd_req_redirects() when settled */
} rw_ctx_t;

static pcre2_match_data *md; /* the worker's, reused by every match */

/* --- configuration --- */

/* fd_api_conf_error(), then FD_ERROR */
#define CONF_ERROR(...) (fd_api_conf_error(__VA_ARGS__), FD_ERROR)

/* [src, end) into s: a script with captures */
static int script_compile(rw_script_t *s, const char *src, const char *end,
                          const char *what)
{
    fd_api_part_t part;
    unsigned i;

    s->s = fd_api_script_compile(src, (size_t)(end - src),
                                 FD_API_SCRIPT_CAPTURES, what);
    if (s->s == NULL)
        return FD_ERROR;
    s->n = fd_api_script_parts(s->s);
    if (s->n && (s->raw = fd_api_conf_alloc(s->n)) == NULL)
        return CONF_ERROR("out of memory");
    for (i = 0; i < s->n; i++) {
        fd_api_script_part(s->s, i, &part);
        s->raw[i] = part.kind == FD_API_PART_TEXT ||
                    (part.flags & FD_API_VAR_URLSAFE);
    }
    return FD_OK;
}

static rw_op_t *op_new(rw_conf_t *rc, int own)
{
    rw_op_t *ops = fd_api_conf_alloc((rc->nops + 1) * sizeof(*ops));

    if (ops == NULL) {
        fd_api_conf_error("out of memory");
        return NULL;
    }
    if (rc->nops)
        memcpy(ops, rc->ops, rc->nops * sizeof(*ops));
    rc->ops = ops;
    memset(&ops[rc->nops], 0, sizeof(*ops));
    fd_api_conf_pos(&ops[rc->nops].pos);
    /* inherited lines ([http], [server]) come first, before own ones */
    if (!own)
        rc->nsrv++;
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

static int set_return(rw_conf_t *rc, const char *v, int own)
{
    rw_op_t *op;
    const char *p, *end;
    char *e;
    long code;

    while (*v == ' ' || *v == '\t')
        v++;
    if ((op = op_new(rc, own)) == NULL)
        return FD_ERROR;
    op->type = OP_RETURN;
    if (starts_url(v)) {
        code = 302; /* return = URL */
        p = v;
    } else {
        code = strtol(v, &e, 10);
        if (e == v || (*e && *e != ' ' && *e != '\t') || code < 200 ||
            code > 599)
            return CONF_ERROR("return needs a status 200..599 and an "
                              "optional URL or text, not \"%s\"", v);
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
    if (is_redirect_code(op->code) && !op->has_text) {
        fd_api_conf_error("return %ld needs a URL", code);
        return FD_ERROR;
    }
    if (op->has_text && script_compile(&op->text, p, end, "return") != FD_OK)
        return FD_ERROR;
    return FD_OK;
}

static void re_free(void *re)
{
    pcre2_code_free(re);
}

static int set_rewrite(rw_conf_t *rc, const char *v, int own)
{
    size_t len = strlen(v);
    char *copy = fd_api_conf_alloc(len + 1), *save;
    char *re_src, *rep, *flag;
    const char *q, *end;
    rw_op_t *op;
    PCRE2_SIZE off;
    int err;

    if (copy == NULL)
        return CONF_ERROR("out of memory");
    memcpy(copy, v, len + 1);
    re_src = strtok_r(copy, " \t", &save);
    rep = strtok_r(NULL, " \t", &save);
    flag = strtok_r(NULL, " \t", &save);
    if (re_src == NULL || rep == NULL || strtok_r(NULL, " \t", &save))
        return CONF_ERROR("rewrite needs REGEX REPLACEMENT [last | break | "
                          "redirect | permanent], not \"%s\"", v);
    if ((op = op_new(rc, own)) == NULL)
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
        return CONF_ERROR("rewrite: unknown flag \"%s\" (last, break, "
                          "redirect or permanent)", flag);
    op->re = pcre2_compile((PCRE2_SPTR)re_src, PCRE2_ZERO_TERMINATED, 0,
                           &err, &off, NULL);
    if (op->re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        fd_api_conf_error("rewrite: regex \"%s\" at offset %zu: %s", re_src,
                          (size_t)off, (char *)msg);
        return FD_ERROR;
    }
    if (fd_api_conf_cleanup(re_free, op->re) != FD_OK) {
        pcre2_code_free(op->re);
        return CONF_ERROR("out of memory");
    }
    pcre2_jit_compile(op->re, PCRE2_JIT_COMPLETE); /* when available */
    op->redirect = starts_url(rep) || op->flag == F_REDIRECT ||
                   op->flag == F_PERMANENT;
    if (!starts_url(rep) && rep[0] != '/' && rep[0] != '$')
        return CONF_ERROR("rewrite: replacement \"%s\" must start with /, "
                          "http://, https:// or a variable", rep);
    /* the arguments follow the first "?" (no variable name holds one) */
    end = rep + strlen(rep);
    if ((q = strchr(rep, '?')) == NULL)
        q = end;
    if (script_compile(&op->text, rep, q, "rewrite") != FD_OK)
        return FD_ERROR;
    if (q < end) {
        op->has_args = 1;
        /* a last "?" drops the request's arguments: "/x?" adds none,
         * "/x?a=1?" adds a=1 (the "?" right after q is both) */
        op->keep_args = q + 1 < end && end[-1] != '?';
        if (script_compile(&op->args, q + 1,
                           end[-1] == '?' && end - 1 > q ? end - 1 : end,
                           "rewrite") != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

static int rewrite_set(void *conf, const char *key, const char *value,
                       int own)
{
    return strcmp(key, "return") == 0 ? set_return(conf, value, own)
                                      : set_rewrite(conf, value, own);
}

static int name_in(const pcre2_code *re, const char *name)
{
    return re && pcre2_substring_number_from_name(re, (PCRE2_SPTR)name) > 0;
}

/* Every $name must be a named group of a regex that can match first. */
static int check_names(const rw_conf_t *rc, const rw_op_t *op,
                       const rw_script_t *s)
{
    fd_api_part_t part;
    char hint[96];
    unsigned i, j;

    for (i = 0; i < s->n; i++) {
        int found = 0;
        if (fd_api_script_part(s->s, i, &part) != FD_OK ||
            part.kind != FD_API_PART_NAMED)
            continue;
        if (op->type == OP_REWRITE) {
            found = name_in(op->re, part.name.data);
        } else {
            found = name_in(fd_api_conf_regex(), part.name.data);
            for (j = 0; j < rc->nops && !found; j++)
                found = name_in(rc->ops[j].re, part.name.data);
        }
        if (!found) {
            fd_api_conf_at(&op->pos);
            return CONF_ERROR("unknown variable \"$%s\" (not a known "
                              "variable nor a named capture)%s",
                              part.name.data,
                              fd_api_var_hint(part.name.data, hint,
                                              sizeof(hint)));
        }
    }
    return FD_OK;
}

static int rewrite_init_conf(void *conf)
{
    rw_conf_t *rc = conf;
    unsigned i;

    for (i = 0; i < rc->nops; i++) {
        rw_op_t *op = &rc->ops[i];
        if (check_names(rc, op, &op->text) != FD_OK ||
            check_names(rc, op, &op->args) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

static int rewrite_init_worker(void)
{
    md = pcre2_match_data_create(RW_OVECTOR, NULL);
    if (md == NULL) {
        fd_api_log(FD_API_LOG_ERR, 0, "rewrite: out of memory");
        return FD_ERROR;
    }
    return FD_OK;
}

static void rewrite_exit_worker(void)
{
    pcre2_match_data_free(md);
    md = NULL;
}

/* --- strings built per request, in its memory --- */

typedef struct {
    fd_request_t *r;
    char *p;
    size_t len, cap;
    int failed;
} rw_buf_t;

static inline int buf_room(rw_buf_t *b, size_t n)
{
    char *p;
    size_t cap;

    if (b->failed)
        return 0;
    if (b->len + n <= b->cap)
        return 1;
    cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n + 64;
    if ((p = fd_req_alloc(b->r, cap)) == NULL) {
        b->failed = 1;
        return 0;
    }
    if (b->len)
        memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    return 1;
}

static inline void buf_add(rw_buf_t *b, const char *s, size_t n)
{
    if (n && buf_room(b, n)) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

/* The bytes, NUL-ended, as *out; FD_ERROR if out of memory. */
static int buf_done(rw_buf_t *b, fd_str_t *out)
{
    buf_add(b, "", 1);
    if (b->failed)
        return FD_ERROR;
    *out = (fd_str_t){b->len - 1, b->p};
    return FD_OK;
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

/* v into b, the bytes esc says escaped as %XX */
static void escape_add(rw_buf_t *b, fd_str_t v, int esc)
{
    static const char hex[] = "0123456789ABCDEF";
    char *p;
    size_t j;

    if (!buf_room(b, 3 * v.len)) /* at most */
        return;
    p = b->p + b->len;
    for (j = 0; j < v.len; j++) {
        unsigned char c = (unsigned char)v.data[j];
        if (must_escape(c, esc)) {
            *p++ = '%';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    b->len = (size_t)(p - b->p);
}

/* Run a script into r's memory; values escaped as esc says. */
static int script_run(fd_request_t *r, rw_ctx_t *x, const rw_script_t *s,
                      int esc, fd_str_t *out)
{
    char tmp[FD_API_VAR_TMP];
    rw_buf_t b = {.r = r};
    unsigned i;

    if (!buf_room(&b, 128))
        return FD_ERROR;
    for (i = 0; i < s->n; i++) {
        fd_str_t v = fd_req_script_value(r, s->s, i, &x->caps, tmp);
        /* literals and URL-safe variables as they are; captures and
         * other values escaped */
        if (esc == ESC_NONE || s->raw[i])
            buf_add(&b, v.data, v.len);
        else
            escape_add(&b, v, esc);
    }
    return buf_done(&b, out);
}

/* a "?" b into r's memory */
static int join(fd_request_t *r, fd_str_t a, char sep, fd_str_t b,
                fd_str_t *out)
{
    rw_buf_t sb = {.r = r};

    if (!buf_room(&sb, a.len + 1 + b.len + 1))
        return FD_ERROR;
    buf_add(&sb, a.data, a.len);
    buf_add(&sb, &sep, 1);
    buf_add(&sb, b.data, b.len);
    return buf_done(&sb, out);
}

/* The arguments after a rewrite: new ones, then the request's own. */
static int new_args(fd_request_t *r, rw_ctx_t *x, const rw_op_t *op,
                    fd_str_t *args)
{
    fd_str_t a, q = fd_req_query(r);

    if (!op->has_args) {
        *args = q;
        return FD_OK;
    }
    if (script_run(r, x, &op->args, ESC_ARGS, &a) != FD_OK)
        return FD_ERROR;
    if (!op->keep_args || q.len == 0) {
        *args = a;
        return FD_OK;
    }
    return join(r, a, '&', q, args);
}

/* Answer with status and a Location; FD_DONE. */
static int redirect(fd_request_t *r, int status, fd_str_t path,
                    fd_str_t args)
{
    static const fd_str_t location = {8, "Location"};

    if (args.len && join(r, path, '?', args, &path) != FD_OK)
        return 500;
    if (fd_resp_error(r, status) != FD_OK ||
        fd_resp_header_static(r, location, path) != FD_OK)
        return 500;
    return FD_DONE;
}

static int run_return(fd_request_t *r, rw_ctx_t *x, const rw_op_t *op)
{
    static const fd_str_t text_plain = {10, "text/plain"};
    fd_str_t text;

    if (is_redirect_code(op->code)) {
        if (script_run(r, x, &op->text, ESC_PATH, &text) != FD_OK)
            return 500;
        /* the URL's own "?" and arguments are part of the text */
        return redirect(r, op->code, text, (fd_str_t){0, NULL});
    }
    if (!op->has_text) {
        if (op->code >= 400)
            return op->code; /* the engine's (or error_page) page */
        fd_resp_status(r, op->code);
        return fd_resp_body_static(r, "", 0) == FD_OK ? FD_DONE : 500;
    }
    if (script_run(r, x, &op->text, ESC_NONE, &text) != FD_OK)
        return 500;
    fd_resp_status(r, op->code);
    fd_resp_content_type_static(r, text_plain);
    return fd_resp_body_static(r, text.data, text.len) == FD_OK ? FD_DONE
                                                                : 500;
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
        fd_str_t subj = fd_req_path(r), path, args;
        PCRE2_SIZE *ov;
        size_t *kept;
        int rc, k;

        if (op->type == OP_RETURN)
            return run_return(r, x, op);
        rc = pcre2_match(op->re, (PCRE2_SPTR)subj.data, subj.len, 0, 0, md,
                         NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            continue;
        if (rc < 0) {
            fd_api_log(FD_API_LOG_ERR, 0, "rewrite: pcre2_match() failed: "
                       "%d", rc);
            return 500;
        }
        if (rc == 0)
            rc = RW_OVECTOR; /* more groups than kept */
        ov = pcre2_get_ovector_pointer(md);
        kept = fd_req_alloc(r, 2 * (size_t)rc * sizeof(size_t));
        if (kept == NULL)
            return 500;
        for (k = 0; k < 2 * rc; k++)
            kept[k] = ov[k];
        x->caps = (fd_api_captures_t){.subject = subj.data, .ovector = kept,
                                      .n = rc, .regex = op->re};
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
        if ((rc = fd_req_set_uri(r, path, args)) != FD_OK)
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

static int rewrite_access(fd_request_t *r)
{
    const rw_conf_t *rc = fd_req_conf_of(r, FD_API_SELF);
    rw_ctx_t *x;
    int how, changed, rv;

    if (rc->nops == 0)
        return FD_OK;
    x = fd_req_get_ctx_of(r, FD_API_SELF);
    if (x == NULL) {
        x = fd_req_alloc(r, sizeof(*x));
        if (x == NULL || fd_req_set_ctx_of(r, FD_API_SELF, x) != FD_OK)
            return 500;
        memset(x, 0, sizeof(*x));
        fd_req_captures(r, &x->caps);
    }
    if (x->redirects != fd_req_redirects(r)) {
        /* an internal redirect (try_files) restarted the access phase:
         * the new URI's rules run, as nginx's, the server's too unless
         * it went to a named location */
        x->redirects = fd_req_redirects(r);
        x->settled = NULL;
        x->server_done = fd_req_loc_named(r);
        fd_req_captures(r, &x->caps);
    }
    if (x->settled == fd_req_loc(r))
        return FD_OK; /* called again after the location changed */
    if (!x->server_done) {
        /* the [http]/[server] rules, once, as nginx's server rewrites */
        x->server_done = 1;
        changed = 0;
        rv = run_ops(r, x, rc->ops, rc->nsrv, &how, &changed);
        if (rv != FD_OK)
            return rv;
        if (changed) {
            fd_req_reroute(r, 0);
            fd_req_captures(r, &x->caps);
            rc = fd_req_conf_of(r, FD_API_SELF);
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
        if ((rv = fd_req_reroute(r, 1)) != FD_OK)
            return rv;
        fd_req_captures(r, &x->caps);
        rc = fd_req_conf_of(r, FD_API_SELF);
    }
    x->settled = fd_req_loc(r);
    return FD_OK;
}

static const fd_api_key_t rewrite_keys[] = {
    {.name = "return", .type = FD_API_LIST,
     .doc = "CODE [URL | TEXT], or URL (302): answer at once; for 301, 302, "
            "303, 307 and 308 the URL is the Location, otherwise TEXT is a "
            "text/plain body; $variables and captures are expanded"},
    {.name = "rewrite", .type = FD_API_LIST,
     .doc = "REGEX REPLACEMENT [last | break | redirect | permanent], "
            "repeatable, run in order; $1..$9 and named captures"},
    {.name = NULL}};

static int rewrite_active(const void *conf)
{
    return ((const rw_conf_t *)conf)->nops > 0;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "rewrite",
    .keys = rewrite_keys,
    .conf_size = sizeof(rw_conf_t),
    .init_conf = rewrite_init_conf,
    .init_worker = rewrite_init_worker,
    .exit_worker = rewrite_exit_worker,
    .set = rewrite_set,
    .access = rewrite_access,
    .active = rewrite_active,
};
