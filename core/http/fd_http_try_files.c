/*
 * try_files and internal redirects.
 *
 *   try_files = FILE... (URI | @name | =CODE)
 *
 * As nginx's: after the location's access phase and before its handler,
 * each FILE (variables expanded; a trailing '/' means a directory) is
 * looked up under the location's root or alias; the first that exists is
 * served by this location when it is the request's path, else it becomes
 * the request's path and is routed again (unlike nginx, which serves it
 * in the location that tried it: there a "$uri/index.php" found in a
 * static location is sent as a file, its source). When none does, the
 * last argument decides: a URI
 * is routed again, as rewrite ... last does, and its location runs its
 * access phase from the first hook (rewrite, acl, auth_basic, ...); @name
 * moves the request, URI and arguments untouched, to [location @name];
 * =CODE answers with that status.
 *
 * It is core, not the static module's, because it routes: its last
 * argument names locations and chooses one, and it applies whatever the
 * location's handler is (a proxy location may try files first). A file
 * is tested by the code that maps and opens a location's files for its
 * handler (fd_http_file_test), so it is confined and its symlinks judged
 * as they would be when served.
 *
 * Unlike the location keys around it, try_files is not inherited: given
 * in [http] or [server] it applies to requests no [location] matches (as
 * in nginx), so a location (a named one above all) never tries files it
 * was not asked to.
 */
#include "fd_core.h"
#include "fd_http.h"

/* as nginx's NGX_HTTP_MAX_URI_CHANGES */
#define FD_HTTP_MAX_REDIRECTS 10

enum { TF_URI, TF_NAMED, TF_CODE };

typedef struct {
    fd_var_script_t path;
    unsigned dir:1;    /* "$uri/": a directory */
    unsigned is_uri:1; /* exactly "$uri": r->path itself, no copy */
} tf_file_t;

struct fd_http_try_files_s {
    tf_file_t *files;
    unsigned nfiles;
    int last;                   /* TF_* */
    fd_var_script_t uri;        /* TF_URI: up to its first '?' */
    fd_var_script_t args;       /* TF_URI: after it */
    unsigned has_args:1;
    int code;                   /* TF_CODE */
    char *name;                 /* TF_NAMED: "@name" */
    fd_http_loc_t *named;       /* ... found once the server is read */
    const char *file;           /* where the key is */
    int line;
};

/* --- configuration --- */

static int name_ok(const char *n)
{
    if (n[0] != '@' || n[1] == '\0')
        return 0;
    for (n++; *n; n++)
        if (!(*n >= 'a' && *n <= 'z') && !(*n >= 'A' && *n <= 'Z') &&
            !(*n >= '0' && *n <= '9') && *n != '_' && *n != '-' && *n != '.')
            return 0;
    return 1;
}

static int script(fd_conf_t *cf, fd_var_script_t *s, const char *src,
                  size_t n)
{
    return fd_var_compile(cf, s, src, n, 0, "try_files");
}

int fd_http_set_try_files(fd_conf_t *cf, const fd_directive_t *d,
                          void *conf, const char *v)
{
    fd_http_loc_t *loc = conf;
    fd_http_try_files_t *tf;
    char *copy, *w[64], *save;
    unsigned n = 0, i;

    (void)d;
    copy = fd_pstrdup(cf->pool, v, strlen(v));
    tf = fd_pcalloc(cf->pool, sizeof(*tf));
    if (copy == NULL || tf == NULL)
        return fd_conf_error(cf, "out of memory");
    for (char *t = strtok_r(copy, " \t", &save); t;
         t = strtok_r(NULL, " \t", &save)) {
        if (n == fd_nelems(w))
            return fd_conf_error(cf, "try_files: more than %u arguments",
                                 (unsigned)fd_nelems(w));
        w[n++] = t;
    }
    if (n < 2)
        return fd_conf_error(cf, "try_files needs FILE... and a last URI, "
                             "@name or =CODE, not \"%s\"", v);
    tf->nfiles = n - 1;
    tf->files = fd_pcalloc(cf->pool, tf->nfiles * sizeof(tf_file_t));
    if (tf->files == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < tf->nfiles; i++) {
        tf_file_t *f = &tf->files[i];
        size_t len = strlen(w[i]);

        if (w[i][0] != '/' && w[i][0] != '$')
            return fd_conf_error(cf, "try_files: \"%s\" must be a path "
                                 "(\"/...\" or \"$uri...\")", w[i]);
        if (script(cf, &f->path, w[i], len) != FD_OK)
            return FD_ERROR;
        f->dir = w[i][len - 1] == '/';
        f->is_uri = strcmp(w[i], "$uri") == 0;
    }
    v = w[n - 1];
    if (v[0] == '@') {
        if (!name_ok(v))
            return fd_conf_error(cf, "try_files: bad location name \"%s\" "
                                 "(@ then letters, digits, '_', '-', '.')",
                                 v);
        tf->last = TF_NAMED;
        tf->name = (char *)v;
    } else if (v[0] == '=') {
        int64_t code = fd_conf_parse_uint(v + 1, 999);

        if (code < 200 || code > 599)
            return fd_conf_error(cf, "try_files: \"%s\" must be =CODE, "
                                 "200 to 599", v);
        tf->last = TF_CODE;
        tf->code = (int)code;
    } else if (v[0] == '/' || v[0] == '$') {
        const char *q = strchr(v, '?');

        tf->last = TF_URI;
        if (script(cf, &tf->uri, v, q ? (size_t)(q - v) : strlen(v)) !=
            FD_OK)
            return FD_ERROR;
        if (q) {
            tf->has_args = 1;
            if (script(cf, &tf->args, q + 1, strlen(q + 1)) != FD_OK)
                return FD_ERROR;
        }
    } else {
        return fd_conf_error(cf, "try_files: the last argument \"%s\" must "
                             "be a URI, @name or =CODE", v);
    }
    tf->file = cf->file;
    tf->line = cf->line;
    loc->try_files = tf;
    return FD_OK;
}

int fd_http_try_files_resolve(fd_conf_t *cf, fd_http_loc_t *loc)
{
    fd_http_try_files_t *tf = loc->try_files;

    if (tf == NULL || tf->last != TF_NAMED)
        return FD_OK;
    tf->named = fd_http_named_location(loc->server, tf->name);
    if (tf->named == NULL) {
        cf->file = tf->file;
        cf->line = tf->line;
        return fd_conf_error(cf, "try_files: no [location %s] in this "
                             "[server]", tf->name);
    }
    return FD_OK;
}

/* --- requests --- */

int fd_http_redirect_count(fd_request_t *r, fd_str_t to)
{
    if (++r->redirects > FD_HTTP_MAX_REDIRECTS) {
        fd_log_error(FD_LOG_ERR, 0, "rewrite or internal redirection cycle "
                     "while internally redirecting to \"%.*s\"",
                     (int)fd_min(to.len, 256), to.data);
        return 500;
    }
    /* the new location's: its try_files, its regex's captures */
    r->try_done = 0;
    r->ncaptures = 0;
    r->captures = NULL;
    return FD_OK;
}

/* r's path becomes path (decoded, normalised, NUL-ended, in r->pool);
 * the encoded form follows, for handlers that forward the URI */
static int set_path(fd_request_t *r, fd_str_t path)
{
    fd_sbuf_t sb;

    if (fd_sbuf_init(&sb, r->pool, path.len + 16) != FD_OK)
        return 500;
    fd_sbuf_add_escaped_path(&sb, path.data, path.len);
    if (fd_sbuf_failed(&sb))
        return 500;
    r->path = path;
    r->in.path_raw = fd_sbuf_str(&sb);
    r->uri_changed = 1;
    return FD_OK;
}

int fd_http_internal_redirect(fd_request_t *r, fd_str_t path,
                              const fd_str_t *args)
{
    int rc;

    if ((rc = fd_http_redirect_count(r, path)) != FD_OK ||
        (rc = set_path(r, path)) != FD_OK)
        return rc;
    if (args)
        r->in.query = *args;
    r->loc = fd_http_find_location(r);
    return FD_OK;
}

int fd_http_named_redirect(fd_request_t *r, fd_http_loc_t *loc)
{
    fd_str_t name = {strlen(loc->name), loc->name};
    int rc;

    if ((rc = fd_http_redirect_count(r, name)) != FD_OK)
        return rc;
    r->loc = loc;
    return FD_OK;
}

/*
 * s's value for r as a path under "/": "." and ".." segments and "//"
 * resolved, but nothing decoded (a variable's "%41" stays "%41", as
 * $uri is decoded already). FD_OK; FD_DECLINED when it is no such path
 * (relative, a NUL, above "/"); 500.
 */
static int eval_path(fd_request_t *r, const fd_var_script_t *s,
                     fd_str_t *out)
{
    fd_sbuf_t sb;
    fd_str_t v;
    char *norm;
    size_t n, i;

    if (fd_sbuf_init(&sb, r->pool, r->path.len + 32) != FD_OK)
        return 500;
    fd_var_eval(r, s, NULL, FD_VAR_ESC_NONE, &sb);
    if (fd_sbuf_failed(&sb))
        return 500;
    v = fd_sbuf_str(&sb);
    if (v.len == 0 || v.data[0] != '/')
        return FD_DECLINED;
    if (memchr(v.data, '%', v.len)) {
        /* the normaliser decodes: hand it each '%' as "%25" */
        fd_sbuf_t esc;

        if (fd_sbuf_init(&esc, r->pool, v.len + 16) != FD_OK)
            return 500;
        for (i = 0; i < v.len; i++) {
            if (v.data[i] == '%')
                fd_sbuf_add(&esc, "%25", 3);
            else
                fd_sbuf_addc(&esc, v.data[i]);
        }
        if (fd_sbuf_failed(&esc))
            return 500;
        v = fd_sbuf_str(&esc);
    }
    if ((norm = fd_pnalloc(r->pool, v.len + 2)) == NULL)
        return 500;
    if (fd_http_normalize_path(v, norm, &n) != FD_OK)
        return FD_DECLINED;
    *out = (fd_str_t){n, norm};
    return FD_OK;
}

int fd_http_try_files(fd_request_t *r)
{
    const fd_http_try_files_t *tf = r->loc->try_files;
    fd_str_t path, args;
    unsigned i;
    int rc;

    for (i = 0; i < tf->nfiles; i++) {
        const tf_file_t *f = &tf->files[i];

        if (f->is_uri) {
            path = r->path;
        } else if ((rc = eval_path(r, &f->path, &path)) != FD_OK) {
            if (rc == FD_DECLINED)
                continue; /* no path under the root: not there */
            return rc;
        }
        rc = fd_http_file_test(r, path, f->dir);
        if (rc == 0)
            continue;
        if (rc != 1)
            return rc;
        if (path.len == r->path.len &&
            memcmp(path.data, r->path.data, path.len) == 0)
            return FD_OK; /* the request's own path: served here */
        /* another path: routed again, as the index does, so that a
         * "$uri/index.php" found runs where "\.php$" sends it instead of
         * being served here as a file (its source) */
        rc = fd_http_internal_redirect(r, path, NULL);
        return rc == FD_OK ? FD_DECLINED : rc;
    }

    switch (tf->last) {
    case TF_CODE:
        if (tf->code >= 400)
            return tf->code;
        r->status = tf->code;
        return fd_http_body_set(r, "", 0) == FD_OK ? FD_DONE : 500;
    case TF_NAMED:
        rc = fd_http_named_redirect(r, tf->named);
        return rc == FD_OK ? FD_DECLINED : rc;
    }
    rc = eval_path(r, &tf->uri, &path);
    if (rc == FD_DECLINED) {
        fd_log_error(FD_LOG_ERR, 0, "try_files in %s: the last argument "
                     "is no path under \"/\"", r->loc->name);
        return 500;
    }
    if (rc != FD_OK)
        return rc;
    /* $uri is decoded: its "&", "%", CR or LF must not make the query
     * say more than it did ($args, already encoded, goes as it is) */
    if (tf->has_args && fd_var_eval_str(r, &tf->args, FD_VAR_ESC_ARGS,
                                        &args) != FD_OK)
        return 500;
    rc = fd_http_internal_redirect(r, path, tf->has_args ? &args : NULL);
    return rc == FD_OK ? FD_DECLINED : rc;
}
