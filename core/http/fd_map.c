/*
 * Variables made from other variables, as nginx's map, geo and
 * split_clients make them:
 *
 *   [map SOURCE $target]            a table of exact names, hostname
 *                                   wildcards and regexes (with
 *                                   captures in the value)
 *   [geo [SOURCE] $target]          networks (CIDR) to values; SOURCE
 *                                   defaults to $remote_addr
 *   [split_clients SOURCE $target]  percentages of MurmurHash2(SOURCE)
 *
 * SOURCE is any text with $variables ("${remote_addr}AAA"), quoted when
 * it holds a space. The target is declared before any section is applied
 * (declare_section), so it may be used anywhere a variable is, in any
 * section, before or after its own in the file; a map may read another's
 * target. A value is computed when it is first read and kept for the rest
 * of the request (volatile = on: computed at each read); a map that reads
 * itself, directly or through others, is empty for the request and
 * logged.
 *
 * Three core modules own the three section types (auto/config's core
 * modules): they have no location keys and no handler.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <pcre2.h>
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_module.h"
#include "fd_realip.h"
#include "fd_sbuf.h"
#include "fd_var.h"

fd_module_t fd_map_module;
fd_module_t fd_geo_module;
fd_module_t fd_split_clients_module;

/* --- what the three share: the header, the text, the request's cache --- */

/* One word of s (quoted with "" or '' when it holds a space; an empty
 * quoted word is the empty text) into *w in cf->pool; s moves past it.
 * FD_OK, FD_DECLINED at the end, FD_ERROR (an unended quote). */
static int word(fd_conf_t *cf, const char **s, fd_str_t *w)
{
    const char *p = *s, *e;
    char q;

    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0')
        return FD_DECLINED;
    if (*p == '"' || *p == '\'') {
        q = *p++;
        if ((e = strchr(p, q)) == NULL)
            return fd_conf_error(cf, "unended %c in \"%s\"", q, *s);
        *s = e + 1;
    } else {
        e = p + strcspn(p, " \t");
        *s = e;
    }
    w->len = (size_t)(e - p);
    if ((w->data = fd_pstrdup(cf->pool, p, w->len)) == NULL)
        return fd_conf_error(cf, "out of memory");
    return FD_OK;
}

/* The rest of s as one value: trimmed; quoted, without its quotes. */
static int rest(fd_conf_t *cf, const char *s, fd_str_t *v)
{
    size_t n;

    while (*s == ' ' || *s == '\t')
        s++;
    n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) {
        s++;
        n -= 2;
    }
    v->len = n;
    if ((v->data = fd_pstrdup(cf->pool, s, n)) == NULL)
        return fd_conf_error(cf, "out of memory");
    return FD_OK;
}

/* "[type SOURCE $target]": the target's name (without "$") and the
 * source's text (NULL when the header has only the target: geo). */
static int header(fd_conf_t *cf, const char *type, const char *name,
                  fd_str_t *source, fd_str_t *target)
{
    const char *s = name;
    fd_str_t w[3];
    unsigned n = 0;
    int rc;

    while (n < 3 && (rc = word(cf, &s, &w[n])) == FD_OK)
        n++;
    if (rc == FD_ERROR)
        return FD_ERROR;
    if (n == 0 || n == 3 || (n == 1 && strcmp(type, "geo") != 0))
        return fd_conf_error(cf, "[%s %s] needs %s$target: [%s SOURCE "
                             "$target]%s", type, name,
                             strcmp(type, "geo") ? "a source and " : "",
                             type, strcmp(type, "geo") ? "" :
                             " or [geo $target] (SOURCE: $remote_addr)");
    *target = w[n - 1];
    if (target->len < 2 || target->data[0] != '$')
        return fd_conf_error(cf, "[%s]: \"%s\" is not a $variable", type,
                             target->data);
    target->data++;
    target->len--;
    if (n == 2)
        *source = w[0];
    else
        *source = (fd_str_t){0, NULL};
    return FD_OK;
}

static int declare(fd_conf_t *cf, const char *type, const char *name,
                   fd_var_get_pt get)
{
    fd_str_t src, t;

    if (header(cf, type, name, &src, &t) != FD_OK)
        return FD_ERROR;
    return fd_var_declare(cf, t.data, t.len, get);
}

/* The module of a section type that declares a variable read by get */
#define VAR_SECTION_MODULE(nm, conf_type, get)                               \
    static int nm##_declare(fd_conf_t *cf, const char *name)                 \
    {                                                                        \
        return declare(cf, #nm, name, get);                                  \
    }                                                                        \
    fd_module_t fd_##nm##_module = {                                         \
        .name = #nm,                                                         \
        .section = #nm,                                                      \
        .section_directives = nm##_directives,                               \
        .section_size = sizeof(conf_type),                                   \
        .init_section = nm##_init_section,                                   \
        .declare_section = nm##_declare,                                     \
    }

/* The section's variable, declared at load: its data is now conf. */
/* plain (when not NULL): 1 when the source is dflt itself */
static int section_bind(fd_conf_t *cf, const char *type, const char *name,
                        void *conf, fd_var_script_t *source, const char *dflt,
                        int *plain)
{
    fd_str_t src, t;
    fd_var_t *v;

    if (header(cf, type, name, &src, &t) != FD_OK)
        return FD_ERROR;
    if (src.data == NULL) {
        src.data = (char *)dflt;
        src.len = strlen(dflt);
    }
    if (plain)
        *plain = src.len == strlen(dflt) && memcmp(src.data, dflt,
                                                   src.len) == 0;
    if (fd_var_compile(cf, source, src.data, src.len, 0, type) != FD_OK)
        return FD_ERROR;
    if ((v = fd_var_declared(t.data, t.len)) == NULL)
        return fd_conf_error(cf, "[%s %s]: not declared", type, name);
    v->data = (uintptr_t)conf;
    return FD_OK;
}

/* What a request computed, newest first (fd_request_ctx of the map
 * module: one list for the three kinds). */
typedef struct cached_s {
    const void *conf;
    fd_str_t value;
    int busy;                  /* being computed: a read of itself */
    struct cached_s *next;
} cached_t;

/* The request's entry for conf: found (its value in *v: return 1), or
 * begun (return 0: compute, then done()), or NULL: a loop or no memory
 * (*v empty). */
static cached_t *cache_find(fd_request_t *r, const void *conf,
                            const char *target, int volatile_, fd_str_t *v,
                            int *hit)
{
    void **slot = fd_request_ctx(r, &fd_map_module);
    cached_t *c;

    *hit = 0;
    *v = fd_null_string;
    if (slot == NULL)
        return NULL;
    for (c = *slot; c; c = c->next)
        if (c->conf == conf)
            break;
    if (c && c->busy) {
        fd_log_error(FD_LOG_ERR, 0, "$%s reads itself (through the sources "
                     "of [map], [geo] or [split_clients]): empty for this "
                     "request", target);
        return NULL;
    }
    if (c && !volatile_) {
        *v = c->value;
        *hit = 1;
        return c;
    }
    if (c == NULL) {
        if ((c = fd_pcalloc(r->pool, sizeof(*c))) == NULL)
            return NULL;
        c->conf = conf;
        c->next = *slot;
        *slot = c;
    }
    c->busy = 1;
    return c;
}

static fd_str_t done(cached_t *c, fd_str_t v)
{
    c->busy = 0;
    c->value = v;
    return v;
}

/* s's value with caps (NULL: none), in r->pool unless it is a literal */
static fd_str_t eval(fd_request_t *r, const fd_var_script_t *s,
                     const fd_var_caps_t *caps)
{
    fd_sbuf_t sb;

    if (fd_var_is_literal(s))
        return s->n ? s->ops[0].text : fd_string("");
    if (fd_sbuf_init(&sb, r->pool, 64) != FD_OK)
        return fd_null_string;
    fd_var_eval(r, s, caps, FD_VAR_ESC_NONE, &sb);
    return fd_sbuf_failed(&sb) ? fd_null_string : fd_sbuf_str(&sb);
}

/* --- [map SOURCE $target] --- */

enum { M_EXACT, M_HEAD, M_TAIL, M_REGEX };

typedef struct {
    unsigned kind;             /* M_* */
    fd_str_t key;              /* lower case with hostnames; M_HEAD: the
                                * suffix (".example.com"), M_TAIL: the
                                * prefix ("www.example.") */
    int dot;                   /* M_HEAD from ".example.com": also the
                                * name itself */
    pcre2_code *re;
    fd_var_script_t value;
    const char *file;
    int line;
} map_entry_t;

typedef struct {
    fd_var_script_t source;
    fd_var_script_t dflt;
    int hostnames;
    int volatile_;
    map_entry_t *e;            /* as written; sorted by init (below) */
    unsigned n, cap;
    map_entry_t **exact;       /* by length, then bytes */
    unsigned nexact;
    map_entry_t **wild;        /* M_HEAD then M_TAIL, longest first */
    unsigned nhead, ntail;
    map_entry_t **regex;       /* as written */
    unsigned nregex;
} map_conf_t;

static int name_in(const pcre2_code *re, const char *name)
{
    return re && pcre2_substring_number_from_name(re, (PCRE2_SPTR)name) > 0;
}

/* match = PATTERN VALUE */
static int map_set_match(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v)
{
    map_conf_t *m = conf;
    map_entry_t *e, *es;
    const char *s = v;
    fd_str_t pat, val;
    int rc, caseless = 0;
    size_t i;

    (void)d;
    if ((rc = word(cf, &s, &pat)) != FD_OK || *s == '\0')
        return rc == FD_ERROR ? FD_ERROR
                              : fd_conf_error(cf, "match needs PATTERN VALUE "
                                              "(\"\" for an empty one), not "
                                              "\"%s\"", v);
    if (rest(cf, s, &val) != FD_OK)
        return FD_ERROR;
    es = fd_parray_reserve(cf->pool, m->e, m->n, &m->cap, sizeof(*es));
    if (es == NULL)
        return fd_conf_error(cf, "out of memory");
    m->e = es;
    e = &es[m->n];
    memset(e, 0, sizeof(*e));
    e->file = cf->file;
    e->line = cf->line;
    if (pat.len && pat.data[0] == '~') {
        int err;
        PCRE2_SIZE off;
        const char *p = pat.data + 1;
        if (*p == '*') {
            caseless = 1;
            p++;
        }
        e->kind = M_REGEX;
        e->re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED,
                              caseless ? PCRE2_CASELESS : 0, &err, &off,
                              NULL);
        if (e->re == NULL) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            return fd_conf_error(cf, "match: regex \"%s\" at offset %zu: %s",
                                 p, (size_t)off, (char *)msg);
        }
        pcre2_jit_compile(e->re, PCRE2_JIT_COMPLETE);
        fd_pool_cleanup_add(cf->pool, (void (*)(void *))pcre2_code_free,
                            e->re);
    } else {
        if (pat.len && pat.data[0] == '\\') { /* "\~x": the text ~x */
            pat.data++;
            pat.len--;
        }
        e->kind = M_EXACT;
        e->key = pat;
        /* names match case-insensitively, as nginx's */
        for (i = 0; i < pat.len; i++)
            ((char *)pat.data)[i] = fd_tolower(pat.data[i]); /* word()'s */
        if (m->hostnames) {
            if (pat.len > 1 && pat.data[0] == '*' && pat.data[1] == '.') {
                e->kind = M_HEAD;
                e->key = (fd_str_t){pat.len - 1, pat.data + 1};
            } else if (pat.len > 1 && pat.data[0] == '.') {
                e->kind = M_HEAD;
                e->dot = 1;
            } else if (pat.len > 1 && pat.data[pat.len - 1] == '*' &&
                       pat.data[pat.len - 2] == '.') {
                e->kind = M_TAIL;
                e->key.len--;
            }
            if (e->kind != M_EXACT &&
                memchr(e->key.data, '*', e->key.len) != NULL)
                return fd_conf_error(cf, "match: \"%s\": a hostname has "
                                     "one '*', at its start or end", pat.data);
        }
    }
    if (fd_var_compile(cf, &e->value, val.data, val.len,
                       e->re ? FD_VAR_CAPTURES : 0, "match") != FD_OK)
        return FD_ERROR;
    for (i = 0; i < e->value.n; i++) {
        const fd_var_op_t *op = &e->value.ops[i];
        char hint[96];
        if (op->kind == FD_VAR_OP_NAMED && !name_in(e->re, op->text.data))
            return fd_conf_error(cf, "match: unknown variable \"$%s\" (not a "
                                 "known variable nor a named capture of "
                                 "its regex)%s", op->text.data,
                                 fd_var_hint(op->text.data, op->text.len,
                                             hint, sizeof(hint)));
    }
    m->n++;
    return FD_OK;
}

static int map_set_default(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *v)
{
    map_conf_t *m = conf;
    fd_str_t val;

    (void)d;
    if (rest(cf, v, &val) != FD_OK)
        return FD_ERROR;
    return fd_var_compile(cf, &m->dflt, val.data, val.len, 0, "default");
}

static int hostnames_set(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v)
{
    map_conf_t *m = conf;
    int f = fd_conf_parse_flag(v);

    (void)d;
    if (f < 0)
        return fd_conf_error(cf, "hostnames: on or off, not \"%s\"", v);
    if (m->n)
        return fd_conf_error(cf, "hostnames must come before the first "
                             "match (it says how they are read)");
    m->hostnames = f;
    return FD_OK;
}

static int by_key(const void *a, const void *b)
{
    const map_entry_t *x = *(map_entry_t *const *)a;
    const map_entry_t *y = *(map_entry_t *const *)b;

    if (x->key.len != y->key.len)
        return x->key.len < y->key.len ? -1 : 1;
    return memcmp(x->key.data, y->key.data, x->key.len);
}

/* wildcards: M_HEAD before M_TAIL, longer before shorter */
static int by_wild(const void *a, const void *b)
{
    const map_entry_t *x = *(map_entry_t *const *)a;
    const map_entry_t *y = *(map_entry_t *const *)b;

    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->key.len != y->key.len)
        return x->key.len > y->key.len ? -1 : 1;
    return 0;
}

static int map_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    map_conf_t *m = conf;
    unsigned i;

    if (section_bind(cf, "map", name, m, &m->source, "", NULL) != FD_OK)
        return FD_ERROR;
    if (m->source.n == 0)
        return fd_conf_error(cf, "[map %s]: an empty source", name);
    m->exact = fd_palloc(cf->pool, (m->n + 1) * sizeof(*m->exact));
    m->wild = fd_palloc(cf->pool, (m->n + 1) * sizeof(*m->wild));
    m->regex = fd_palloc(cf->pool, (m->n + 1) * sizeof(*m->regex));
    if (m->exact == NULL || m->wild == NULL || m->regex == NULL)
        return fd_conf_error(cf, "out of memory");
    for (i = 0; i < m->n; i++) {
        map_entry_t *e = &m->e[i];
        if (e->kind == M_EXACT)
            m->exact[m->nexact++] = e;
        else if (e->kind == M_REGEX)
            m->regex[m->nregex++] = e;
        else
            m->wild[m->nhead + m->ntail] = e,
            *(e->kind == M_HEAD ? &m->nhead : &m->ntail) += 1;
    }
    qsort(m->exact, m->nexact, sizeof(*m->exact), by_key);
    qsort(m->wild, m->nhead + m->ntail, sizeof(*m->wild), by_wild);
    for (i = 1; i < m->nexact; i++)
        if (by_key(&m->exact[i - 1], &m->exact[i]) == 0) {
            const map_entry_t *a = m->exact[i - 1], *b = m->exact[i];
            if (a->line > b->line) {
                a = b;
                b = m->exact[i - 1];
            }
            cf->file = b->file;
            cf->line = b->line;
            return fd_conf_error(cf, "match \"%s\" twice in [map %s] (first "
                                 "at line %d)", b->key.data, name, a->line);
        }
    return FD_OK;
}

static map_entry_t *map_exact(const map_conf_t *m, fd_str_t v)
{
    unsigned lo = 0, hi = m->nexact;

    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        const map_entry_t *e = m->exact[mid];
        int c = e->key.len != v.len ? (e->key.len < v.len ? -1 : 1)
                                    : memcmp(e->key.data, v.data, v.len);
        if (c == 0)
            return m->exact[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static map_entry_t *map_wild(const map_conf_t *m, fd_str_t v)
{
    unsigned i;

    for (i = 0; i < m->nhead; i++) {
        map_entry_t *e = m->wild[i];
        if ((v.len > e->key.len &&
             memcmp(v.data + v.len - e->key.len, e->key.data,
                    e->key.len) == 0) ||
            (e->dot && v.len == e->key.len - 1 &&
             memcmp(v.data, e->key.data + 1, v.len) == 0))
            return e;
    }
    for (; i < m->nhead + m->ntail; i++) {
        map_entry_t *e = m->wild[i];
        if (v.len > e->key.len && memcmp(v.data, e->key.data, e->key.len) == 0)
            return e;
    }
    return NULL;
}

static fd_str_t v_map(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    static __thread pcre2_match_data *md;
    const map_conf_t *m = (const map_conf_t *)op->var->data;
    fd_str_t src, key;
    fd_var_caps_t caps;
    map_entry_t *e = NULL;
    cached_t *c;
    unsigned i;
    int hit, rc;

    (void)tmp;
    if (r == NULL || m == NULL ||
        (c = cache_find(r, m, op->var->name, m->volatile_, &src, &hit)) ==
            NULL)
        return fd_null_string;
    if (hit)
        return src;
    src = eval(r, &m->source, NULL);
    if (src.data == NULL)
        src = fd_string("");
    key = src;
    if (m->hostnames && key.len && key.data[key.len - 1] == '.')
        key.len--;
    if (m->nexact + m->nhead + m->ntail) {
        char *low;
        for (i = 0; i < key.len && !(key.data[i] >= 'A' &&
                                     key.data[i] <= 'Z'); i++)
            ;
        if (i < key.len && (low = fd_pnalloc(r->pool, key.len)) != NULL) {
            for (i = 0; i < key.len; i++)
                low[i] = fd_tolower(key.data[i]);
            key.data = low;
        }
    }
    if ((e = map_exact(m, key)) == NULL && m->hostnames)
        e = map_wild(m, key);
    if (e)
        return done(c, eval(r, &e->value, NULL));
    if (m->nregex && md == NULL)
        md = pcre2_match_data_create(32, NULL);
    for (i = 0; i < m->nregex && md; i++) {
        e = m->regex[i];
        rc = pcre2_match(e->re, (PCRE2_SPTR)src.data, src.len, 0, 0, md,
                         NULL);
        if (rc == 0)
            rc = 32;
        if (rc > 0) {
            caps = (fd_var_caps_t){src.data, pcre2_get_ovector_pointer(md),
                                   rc, e->re};
            /* the value is made before another match reuses md */
            return done(c, eval(r, &e->value, &caps));
        }
    }
    return done(c, eval(r, &m->dflt, NULL));
}

static const fd_directive_t map_directives[] = {
    {.name = "match", .type = FD_CONF_LIST, .set = map_set_match,
     .doc = "repeatable: PATTERN VALUE. PATTERN is a name (matched in full, "
            "case-insensitive, as nginx's), ~REGEX or "
            "~*REGEX (case-insensitive), or with hostnames *.example.com, "
            ".example.com (the name too) or www.example.*; \"\" is the "
            "empty text, \\~ a name beginning with ~. Names first, then "
            "the longest wildcard, then regexes in order. VALUE may hold "
            "$variables and, after a regex, its captures ($1, $name). "
            "E.g. match = ~^/api/v(?<ver>\\d+)/ api-v$ver"},
    {.name = "default", .type = FD_CONF_CUSTOM, .set = map_set_default,
     .doc = "the value when nothing matches (empty when not set); may hold "
            "$variables"},
    {.name = "hostnames", .type = FD_CONF_CUSTOM, .set = hostnames_set,
     .def = NULL,
     .doc = "on: patterns may be host name wildcards, and a trailing dot "
            "of the source is ignored; before the first match"},
    {.name = "volatile", .type = FD_CONF_FLAG,
     .offset = offsetof(map_conf_t, volatile_), .def = "off",
     .doc = "on: computed at each read instead of once a request (for a "
            "source that changes during it, as $status or $upstream_*)"},
    FD_CONF_END};

VAR_SECTION_MODULE(map, map_conf_t, v_map);

/* --- [geo [SOURCE] $target] --- */

/* The networks of one family and one prefix length, sorted */
typedef struct {
    unsigned bits;
    unsigned n, cap;
    struct geo_net_s *nets;
} geo_len_t;

typedef struct geo_net_s {
    uint8_t addr[16];          /* masked to bits */
    fd_str_t value;
    int line;
    const char *file;          /* ... of the file it is in (include) */
} geo_net_t;

typedef struct {
    fd_var_script_t source;
    fd_str_t dflt;
    fd_cidr_t *proxy;
    unsigned nproxy, proxycap;
    int recursive;
    geo_len_t len4[33], len6[129];
    unsigned char order4[33], order6[129]; /* lengths present, longest
                                            * first */
    unsigned n4, n6;
    int remote;                /* the source is $remote_addr: read in
                                * binary, not formatted and parsed */
} geo_conf_t;

static int geo_set_match(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v)
{
    geo_conf_t *g = conf;
    const char *s = v;
    fd_str_t net, val;
    fd_cidr_t c;
    geo_len_t *l;
    geo_net_t *ns;
    char buf[64];
    int rc;

    (void)d;
    if ((rc = word(cf, &s, &net)) != FD_OK || *s == '\0')
        return rc == FD_ERROR ? FD_ERROR
                              : fd_conf_error(cf, "match needs ADDR[/BITS] "
                                              "VALUE, not \"%s\"", v);
    if (rest(cf, s, &val) != FD_OK)
        return FD_ERROR;
    if (net.len >= sizeof(buf))
        return fd_conf_error(cf, "match: bad network \"%s\"", net.data);
    memcpy(buf, net.data, net.len + 1);
    if (fd_cidr_parse(buf, &c) != FD_OK)
        return fd_conf_error(cf, "match: bad network \"%s\" (ADDR or "
                             "ADDR/BITS with no bits set past BITS)",
                             net.data);
    /* a network twice is found once they are sorted (init_section):
     * a scan here made a table of 100,000 load in seconds */
    l = c.family == AF_INET ? &g->len4[c.bits] : &g->len6[c.bits];
    ns = fd_parray_reserve(cf->pool, l->nets, l->n, &l->cap, sizeof(*ns));
    if (ns == NULL)
        return fd_conf_error(cf, "out of memory");
    l->nets = ns;
    l->bits = c.bits;
    memset(&ns[l->n], 0, sizeof(*ns));
    memcpy(ns[l->n].addr, c.addr, 16);
    ns[l->n].value = val;
    ns[l->n].line = cf->line;
    ns[l->n].file = cf->file;
    l->n++;
    return FD_OK;
}

static int geo_set_default(fd_conf_t *cf, const fd_directive_t *d,
                           void *conf, const char *v)
{
    (void)d;
    return rest(cf, v, &((geo_conf_t *)conf)->dflt);
}

static int geo_set_proxy(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                         const char *v)
{
    geo_conf_t *g = conf;
    fd_cidr_t *cs;

    (void)d;
    cs = fd_parray_reserve(cf->pool, g->proxy, g->nproxy, &g->proxycap,
                           sizeof(*cs));
    if (cs == NULL)
        return fd_conf_error(cf, "out of memory");
    g->proxy = cs;
    if (fd_cidr_parse(v, &cs[g->nproxy]) != FD_OK)
        return fd_conf_error(cf, "proxy: bad network \"%s\"", v);
    g->nproxy++;
    return FD_OK;
}

/* by address, then by line: the first of two equal ones is first */
static int by_addr(const void *a, const void *b)
{
    const geo_net_t *x = a, *y = b;
    int d = memcmp(x->addr, y->addr, 16);

    return d ? d : (x->line > y->line) - (x->line < y->line);
}

/* One prefix length's networks sorted; a network twice is an error at
 * its second line. */
static int geo_sort(fd_conf_t *cf, geo_len_t *l, int family)
{
    char text[INET6_ADDRSTRLEN];
    unsigned i;

    qsort(l->nets, l->n, sizeof(geo_net_t), by_addr);
    for (i = 1; i < l->n; i++)
        if (memcmp(l->nets[i].addr, l->nets[i - 1].addr, 16) == 0) {
            inet_ntop(family, l->nets[i].addr, text, sizeof(text));
            cf->file = l->nets[i].file;
            cf->line = l->nets[i].line;
            return fd_conf_error(cf, "match: network %s/%u twice (first "
                                 "at line %d)", text, l->bits,
                                 l->nets[i - 1].line);
        }
    return FD_OK;
}

static int geo_init_section(fd_conf_t *cf, const char *name, void *conf)
{
    geo_conf_t *g = conf;
    int b;

    if (section_bind(cf, "geo", name, g, &g->source, "$remote_addr",
                     &g->remote) != FD_OK)
        return FD_ERROR;
    for (b = 32; b >= 0; b--)
        if (g->len4[b].n) {
            if (geo_sort(cf, &g->len4[b], AF_INET) != FD_OK)
                return FD_ERROR;
            g->order4[g->n4++] = (unsigned char)b;
        }
    for (b = 128; b >= 0; b--)
        if (g->len6[b].n) {
            if (geo_sort(cf, &g->len6[b], AF_INET6) != FD_OK)
                return FD_ERROR;
            g->order6[g->n6++] = (unsigned char)b;
        }
    return FD_OK;
}

static const geo_net_t *geo_find(const geo_len_t *l, const uint8_t *a)
{
    uint8_t key[16] = {0};
    unsigned lo = 0, hi = l->n, full = l->bits / 8;

    memcpy(key, a, full);
    if (l->bits % 8)
        key[full] = a[full] & (uint8_t)(0xff << (8 - l->bits % 8));
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        int c = memcmp(l->nets[mid].addr, key, 16);
        if (c == 0)
            return &l->nets[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* IPv4: the first 4 bytes as one number (big-endian: the same order as
 * memcmp's), compared without a call */
static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static const geo_net_t *geo_find4(const geo_len_t *l, const uint8_t *a)
{
    uint32_t key = be32(a), k;
    unsigned lo = 0, hi = l->n;

    if (l->bits < 32)
        key &= l->bits ? ~(uint32_t)0 << (32 - l->bits) : 0;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        k = be32(l->nets[mid].addr);
        if (k == key)
            return &l->nets[mid];
        if (k < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The value of the longest network holding a (NULL: none). */
static const fd_str_t *geo_lookup(const geo_conf_t *g, const fd_addr_t *a)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0xff, 0xff};
    const geo_net_t *n;
    fd_addr_t v4 = {.family = AF_INET};
    unsigned i;

    if (a->family == AF_INET6 && memcmp(a->addr, mapped, 12) == 0) {
        memcpy(v4.addr, a->addr + 12, 4); /* ::ffff:10.1.2.3 is 10.1.2.3 */
        a = &v4;
    }
    if (a->family == AF_INET) {
        for (i = 0; i < g->n4; i++)
            if ((n = geo_find4(&g->len4[g->order4[i]], a->addr)) != NULL)
                return &n->value;
    } else if (a->family == AF_INET6) {
        for (i = 0; i < g->n6; i++)
            if ((n = geo_find(&g->len6[g->order6[i]], a->addr)) != NULL)
                return &n->value;
    }
    return NULL;
}

static fd_str_t v_geo(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    const geo_conf_t *g = (const geo_conf_t *)op->var->data;
    const fd_str_t *found;
    fd_str_t src, one[4], *vals = one;
    fd_addr_t a;
    cached_t *c;
    unsigned i, n = 0;
    int hit;

    (void)tmp;
    if (r == NULL || g == NULL ||
        (c = cache_find(r, g, op->var->name, 0, &src, &hit)) == NULL)
        return fd_null_string;
    if (hit)
        return src;
    if (g->remote) {
        fd_request_addr(r, &a); /* the client after real_ip */
    } else {
        src = eval(r, &g->source, NULL);
        if (src.len == 0 || fd_addr_parse(src.data, src.len, &a) != FD_OK)
            return done(c, g->dflt); /* not an address: nginx's default */
    }
    if (g->nproxy && fd_cidr_match(g->proxy, g->nproxy, &a)) {
        /* from a trusted proxy: the client its X-Forwarded-For names */
        for (i = 0; i < r->in.nheaders; i++)
            n += fd_str_caseeq_lit(r->in.headers[i].name, "x-forwarded-for");
        if (n > fd_nelems(one) &&
            (vals = fd_palloc(r->pool, n * sizeof(*vals))) == NULL)
            return done(c, g->dflt);
        for (i = 0, n = 0; i < r->in.nheaders; i++)
            if (fd_str_caseeq_lit(r->in.headers[i].name, "x-forwarded-for"))
                vals[n++] = r->in.headers[i].value;
        if (n)
            (void)fd_realip_forwarded(vals, n, g->proxy, g->nproxy,
                                      g->recursive, &a);
    }
    found = geo_lookup(g, &a);
    return done(c, found ? *found : g->dflt);
}

static const fd_directive_t geo_directives[] = {
    {.name = "match", .type = FD_CONF_LIST, .set = geo_set_match,
     .doc = "repeatable: ADDR[/BITS] VALUE, an IPv4 or IPv6 network and "
            "its value; the longest network holding the address wins (an "
            "IPv4 one also holds the IPv4-mapped IPv6 address). E.g. match "
            "= 10.0.0.0/8 internal"},
    {.name = "default", .type = FD_CONF_CUSTOM, .set = geo_set_default,
     .doc = "the value for an address in no network, or a source that is "
            "not an address (empty when not set)"},
    {.name = "proxy", .type = FD_CONF_LIST, .set = geo_set_proxy,
     .doc = "repeatable: a trusted proxy's network; for an address in one, "
            "the address X-Forwarded-For gives is looked up instead (its "
            "last; with proxy_recursive the last one not trusted)"},
    {.name = "proxy_recursive", .type = FD_CONF_FLAG,
     .offset = offsetof(geo_conf_t, recursive), .def = "off",
     .doc = "on: walk X-Forwarded-For from its end past every trusted "
            "address, as real_ip_recursive"},
    FD_CONF_END};

VAR_SECTION_MODULE(geo, geo_conf_t, v_geo);

/* --- [split_clients SOURCE $target] --- */

typedef struct {
    uint32_t upto;             /* hashes below it (0: the rest, "*") */
    fd_str_t value;
} split_part_t;

typedef struct {
    fd_var_script_t source;
    split_part_t *parts;
    unsigned n, cap;
    unsigned sum;              /* in hundredths of a percent */
    uint32_t upto;             /* the last part's bound */
    int rest;                  /* a "*" part was given */
} split_conf_t;

/* MurmurHash2 (Austin Appleby's, 32-bit, seed 0), as nginx's
 * split_clients hashes its key: the same clients land in the same parts */
uint32_t fd_murmur_hash2(const void *key, size_t len)
{
    const uint8_t *p = key;
    uint32_t h = (uint32_t)len, k;
    const uint32_t m = 0x5bd1e995;

    while (len >= 4) {
        k = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
            (uint32_t)p[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
        p += 4;
        len -= 4;
    }
    switch (len) {
    case 3:
        h ^= (uint32_t)p[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)p[1] << 8;
        /* fall through */
    case 1:
        h ^= p[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* part = PERCENT% VALUE, or * VALUE */
static int split_set_part(fd_conf_t *cf, const fd_directive_t *d, void *conf,
                          const char *v)
{
    split_conf_t *sc = conf;
    split_part_t *ps;
    const char *s = v;
    fd_str_t pct, val;
    unsigned hundredths = 0, frac = 0;
    size_t i = 0;
    int rc;

    (void)d;
    if ((rc = word(cf, &s, &pct)) != FD_OK || *s == '\0')
        return rc == FD_ERROR ? FD_ERROR
                              : fd_conf_error(cf, "part needs PERCENT%% VALUE "
                                              "or * VALUE, not \"%s\"", v);
    if (sc->rest)
        return fd_conf_error(cf, "part after \"*\" (the rest comes last)");
    if (rest(cf, s, &val) != FD_OK)
        return FD_ERROR;
    if (strcmp(pct.data, "*") == 0) {
        sc->rest = 1;
    } else {
        /* PERCENT with at most two decimals, as nginx reads it */
        for (; i < pct.len && pct.data[i] >= '0' && pct.data[i] <= '9' &&
               hundredths <= 10000; i++)
            hundredths = hundredths * 10 + (unsigned)(pct.data[i] - '0');
        hundredths *= 100;
        if (i < pct.len && pct.data[i] == '.')
            for (i++, frac = 10; i < pct.len && pct.data[i] >= '0' &&
                                 pct.data[i] <= '9' && frac; i++, frac /= 10)
                hundredths += frac * (unsigned)(pct.data[i] - '0');
        if (i == 0 || i + 1 != pct.len || pct.data[i] != '%' ||
            hundredths == 0)
            return fd_conf_error(cf, "part: \"%s\" is not a percentage "
                                 "(like 12.5%%, two decimals at most)",
                                 pct.data);
        if (sc->sum + hundredths > 10000)
            return fd_conf_error(cf, "part: the parts add up to more than "
                                 "100%%");
        sc->sum += hundredths;
    }
    ps = fd_parray_reserve(cf->pool, sc->parts, sc->n, &sc->cap, sizeof(*ps));
    if (ps == NULL)
        return fd_conf_error(cf, "out of memory");
    sc->parts = ps;
    /* each part's share of 2^32 - 1, rounded down, added to the bound
     * before it: nginx's bounds, to the hash */
    if (!sc->rest)
        sc->upto += (uint32_t)((uint64_t)hundredths * 0xffffffffu / 10000);
    ps[sc->n].upto = sc->rest ? 0 : sc->upto;
    ps[sc->n].value = val;
    sc->n++;
    return FD_OK;
}

static int split_clients_init_section(fd_conf_t *cf, const char *name,
                                      void *conf)
{
    split_conf_t *sc = conf;

    if (section_bind(cf, "split_clients", name, sc, &sc->source, "",
                     NULL) != FD_OK)
        return FD_ERROR;
    if (sc->n == 0)
        return fd_conf_error(cf, "[split_clients %s] has no part", name);
    return FD_OK;
}

static fd_str_t v_split(fd_request_t *r, const fd_var_op_t *op, char *tmp)
{
    const split_conf_t *sc = (const split_conf_t *)op->var->data;
    fd_str_t src;
    uint32_t h;
    cached_t *c;
    unsigned i;
    int hit;

    (void)tmp;
    if (r == NULL || sc == NULL ||
        (c = cache_find(r, sc, op->var->name, 0, &src, &hit)) == NULL)
        return fd_null_string;
    if (hit)
        return src;
    src = eval(r, &sc->source, NULL);
    h = fd_murmur_hash2(src.data ? src.data : "", src.len);
    for (i = 0; i < sc->n; i++)
        if (h < sc->parts[i].upto || sc->parts[i].upto == 0)
            return done(c, sc->parts[i].value);
    return done(c, fd_null_string);
}

static const fd_directive_t split_clients_directives[] = {
    {.name = "part", .type = FD_CONF_LIST, .set = split_set_part,
     .doc = "repeatable, in order: PERCENT% VALUE (two decimals at most), "
            "or * VALUE for the rest, last; the parts add up to 100% at "
            "most (a key past them is empty without \"*\"). E.g. part = "
            "0.5% .one"},
    FD_CONF_END};

VAR_SECTION_MODULE(split_clients, split_conf_t, v_split);
