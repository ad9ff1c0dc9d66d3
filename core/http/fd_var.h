#ifndef FD_VAR_H
#define FD_VAR_H

/*
 * The variable registry: one table of $names for every module that
 * expands them (access_log formats, rewrite and return, hash_key, the
 * proxy's set_header, add_header). Core declares the request's and the
 * connection's variables; a module declares its own in its descriptor
 * (fd_module_t.vars), each with a getter.
 *
 * A script (literal text and $variables, and with FD_VAR_CAPTURES the
 * regex captures $1..$9 and $name) is compiled once at config load into
 * a list of ops that point at their getters: evaluating it per request
 * looks nothing up by name. An unknown variable is a config error naming
 * file:line, with a "did you mean".
 */

#include "fd_core.h"

#define FD_VAR_TMP 64 /* bytes of scratch a getter may use (numbers) */

typedef struct fd_var_op_s fd_var_op_t;

/* The value of op's variable for r: a slice that lives as long as r (in
 * tmp, FD_VAR_TMP bytes, in r->pool or in the request); length 0 when
 * not set (the access log writes "-"). */
typedef fd_str_t (*fd_var_get_pt)(fd_request_t *r, const fd_var_op_t *op,
                                  char *tmp);

enum {
    FD_VAR_PREFIX = 0x1,  /* "http_": $http_NAME, the rest is the argument */
    FD_VAR_NUMBER = 0x2,  /* a JSON number in the access log's json */
    FD_VAR_URLSAFE = 0x4  /* already URL-encoded: rewrite never escapes it */
};

typedef struct fd_var_s {
    const char *name;
    fd_var_get_pt get;
    uintptr_t data;       /* the getter's (op->var->data) */
    unsigned flags;
} fd_var_t;

#define FD_VAR_END {.name = NULL}

enum { FD_VAR_OP_LIT, FD_VAR_OP_VAR, FD_VAR_OP_CAP, FD_VAR_OP_NAMED };

struct fd_var_op_s {
    unsigned kind;        /* FD_VAR_OP_* */
    unsigned flags;       /* the variable's */
    const fd_var_t *var;
    int n;                /* FD_VAR_OP_CAP: the capture's number */
    /* LIT: the text; VAR: a prefix variable's argument (for $http_ and
     * $cookie_ lower case, '-' as '_' for $http_), else the name; NAMED:
     * the capture's name (NUL-ended) */
    fd_str_t text;
    fd_str_t name;        /* the variable as written, without '$' */
};

typedef struct {
    fd_var_op_t *ops;
    unsigned n;
} fd_var_script_t;

/* The captures a script's $1..$9 and $name see (pcre2 offsets). */
typedef struct {
    const char *subj;
    const size_t *ov;
    int n;                /* capture pairs in ov */
    const void *re;       /* the pcre2_code, for named captures */
} fd_var_caps_t;

/* fd_var_compile() flags */
#define FD_VAR_CAPTURES 0x1 /* $1..$9; an unknown $name is a named capture
                             * (FD_VAR_OP_NAMED) for the caller to check */

/*
 * Compile src[0..len) into s (ops in cf->pool). what prefixes errors
 * ("log_format"). FD_OK, or FD_ERROR after fd_conf_error().
 */
int fd_var_compile(fd_conf_t *cf, fd_var_script_t *s, const char *src,
                   size_t len, unsigned flags, const char *what);

/* The variable named name[0..n) (no '$'), or NULL. */
const fd_var_t *fd_var_find(const char *name, size_t n);
/*
 * Variables the configuration declares ([map], [geo], [split_clients]
 * targets: fd_module_t.declare_section), found after core's and the
 * modules'. fd_var_declare adds name with its getter (data 0, set once
 * its section is applied: fd_var_declared finds it); a name that is
 * taken is an error. The list is the loading configuration's:
 * fd_cycle_load swaps in an empty one, and back the serving one's when
 * the load fails.
 */
typedef struct fd_var_decl_s fd_var_decl_t;
int fd_var_declare(fd_conf_t *cf, const char *name, size_t n,
                   fd_var_get_pt get);
fd_var_t *fd_var_declared(const char *name, size_t n);
fd_var_decl_t *fd_var_declared_swap(fd_var_decl_t *list);

/* A declared variable whose value a request sets (auth_request_set):
 * fd_var_get_set is its getter (empty until set), fd_var_set sets it
 * for r (value in r->pool). */
typedef struct fd_var_val_s fd_var_val_t;
fd_str_t fd_var_get_set(fd_request_t *r, const fd_var_op_t *op, char *tmp);
int fd_var_set(fd_request_t *r, const fd_var_t *var, fd_str_t value);

/* "; did you mean \"$NAME\"?" for an unknown name, or "". */
const char *fd_var_hint(const char *name, size_t n, char *buf, size_t size);

/* One op's value (a literal's text, a capture, a variable). */
fd_str_t fd_var_value(fd_request_t *r, const fd_var_op_t *op,
                      const fd_var_caps_t *caps, char *tmp);

/* fd_var_eval() escaping of variable values (literals go as written) */
enum {
    FD_VAR_ESC_NONE,
    FD_VAR_ESC_HEADER,    /* a header value: controls but HTAB as %XX, so
                           * a decoded $uri cannot split a header */
    FD_VAR_ESC_ARGS,      /* a query: values not already URL-encoded
                           * (FD_VAR_URLSAFE) get SP, controls, 8-bit and
                           * "#%&+?<>\"\\^`{|} as %XX, as rewrite's */
    FD_VAR_ESC_TARGET     /* (fd_var_add_escaped only) a request line's
                           * piece: SP, controls and 8-bit as %XX */
};

/* c as "%XX" (the escapers of scripts' values share it). */
void fd_var_add_pct(fd_sbuf_t *sb, unsigned char c);
/* v into sb, the bytes esc (FD_VAR_ESC_*) names as %XX. */
void fd_var_add_escaped(fd_sbuf_t *sb, fd_str_t v, int esc);

/* Append s's value for r to sb (which may fail: the caller checks). */
void fd_var_eval(fd_request_t *r, const fd_var_script_t *s,
                 const fd_var_caps_t *caps, int esc, fd_sbuf_t *sb);
/* s's value for r in r->pool (NUL-ended); FD_ERROR: out of memory. A
 * script of one literal (or none) is its text, not copied. */
int fd_var_eval_str(fd_request_t *r, const fd_var_script_t *s, int esc,
                    fd_str_t *out);

/* The script has no variable (nothing to evaluate per request). */
static inline int fd_var_is_literal(const fd_var_script_t *s)
{
    return s->n == 0 || (s->n == 1 && s->ops[0].kind == FD_VAR_OP_LIT);
}

#endif
