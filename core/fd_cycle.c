/*
 * A cycle is one loaded configuration: typed sections, servers with their
 * locations, listening addresses and module sections. fd_cycle_load()
 * reads the file, applies the profile and every entry, and checks the
 * result; any error names file:line. The keys it reads the core's
 * sections through are fd_cycle_keys.c's.
 */
#include <libgen.h>
#include <limits.h>
#include <pwd.h>
#include <strings.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_ssl.h"
#include "fd_var.h"

/* --- helpers --- */

typedef struct {
    fd_conf_t *cf;
    fd_cycle_t *cycle;
    fd_conf_entry_t *e;
    unsigned n;
    fd_conf_list_t http_loc;      /* indexes of [http] location keys */
    /* sets()' last answers: each inherited line of a replace key asks
     * about the same key and range */
    struct {
        const char *key;
        unsigned from, to;
        int set;
    } sets_memo[4];
    unsigned sets_next;
} load_t;

static int unknown_key(load_t *ld, const fd_conf_entry_t *e,
                       const fd_directive_t *own, int loc_keys);

static int is_named(const char *section, const char *type, const char **name)
{
    size_t n = strlen(type);

    if (strncmp(section, type, n) != 0 || (section[n] != ' ' &&
                                           section[n] != '\t'))
        return 0;
    section += n;
    while (*section == ' ' || *section == '\t')
        section++;
    *name = section;
    return 1;
}

static void at(load_t *ld, fd_conf_entry_t *e)
{
    ld->cf->file = e->file;
    ld->cf->line = e->line;
}

/* item at the end of list l, in pool (an entry or its index) */
static int list_add(fd_conf_t *cf, fd_pool_t *pool, fd_conf_list_t *l,
                    void *item)
{
    char **items = fd_parray_reserve(pool, l->items, l->n, &l->cap,
                                     sizeof(char *));

    if (items == NULL)
        return fd_conf_error(cf, "out of memory");
    items[l->n++] = item;
    l->items = items;
    return FD_OK;
}

/* Apply entries [from, to) of one section instance through a table. */
static int apply_simple(load_t *ld, unsigned from, unsigned to,
                        const fd_directive_t *dirs, void *conf)
{
    unsigned i, j;

    for (i = from; i < to; i++) {
        fd_conf_entry_t *e = &ld->e[i];
        const fd_directive_t *d;

        if (e->key[0] == '\0')
            continue; /* section marker */
        d = fd_conf_find(dirs, e->key);
        at(ld, e);
        if (d == NULL)
            return unknown_key(ld, e, dirs, 0);
        if (d->type != FD_CONF_LIST)
            for (j = from; j < i; j++)
                if (strcmp(ld->e[j].key, e->key) == 0)
                    return fd_conf_error(ld->cf, "duplicate key \"%s\" "
                                         "(first at line %d)", e->key,
                                         ld->e[j].line);
        if (fd_conf_set(ld->cf, d, conf, e->value) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

/* Which table takes a location key: the core's or a module's. */
static const fd_directive_t *find_loc_key(const char *key, unsigned *mod)
{
    const fd_directive_t *d = fd_conf_find(fd_http_loc_directives, key);
    unsigned i;

    *mod = UINT_MAX;
    if (d)
        return d;
    for (i = 0; i < fd_nmodules; i++) {
        d = fd_conf_find(fd_modules[i]->directives, key);
        if (d) {
            *mod = i;
            return d;
        }
    }
    return NULL;
}

/* Section types: module i / 2's own (even i) or its also (odd i), NULL
 * when it has none. */
static const fd_module_t *section_module(unsigned i)
{
    const fd_module_t *m = fd_modules[i / 2];

    if (i % 2)
        m = m->also;
    return m && m->section ? m : NULL;
}

/* Where a key is valid, for an error about it used elsewhere. */
static const char *key_home(const char *key, char *buf, size_t n)
{
    static const struct {
        const char *level;
        const fd_directive_t *d;
    } homes[] = {{"[main]", fd_main_directives},
                 {"[events]", fd_events_directives},
                 {"[http]", fd_http_directives},
                 {"[offload]", fd_offload_directives},
                 {"[server]", fd_http_server_directives},
                 {"[server]", fd_ssl_server_directives}};
    unsigned i, mod;
    const fd_directive_t *d;

    for (i = 0; i < fd_nelems(homes); i++)
        if ((d = fd_conf_find(homes[i].d, key)) && d->renamed == NULL)
            return homes[i].level;
    if (find_loc_key(key, &mod))
        return "[location] (or [http] and [server] as defaults)";
    for (i = 0; i < 2 * fd_nmodules; i++) {
        const fd_module_t *m = section_module(i);
        if (m && fd_conf_find(m->section_directives, key)) {
            snprintf(buf, n, m->section_unnamed ? "[%s]" : "[%s NAME]",
                     m->section);
            return buf;
        }
    }
    return NULL;
}

/*
 * An unknown key: say where it belongs if it is valid elsewhere, else the
 * nearest key valid here (own, and every location key with loc_keys).
 */
static int unknown_key(load_t *ld, const fd_conf_entry_t *e,
                       const fd_directive_t *own, int loc_keys)
{
    fd_conf_near_t nr;
    const char *home;
    char buf[80], hint[96];
    unsigned i;

    static const struct {
        const char *name, *meant;
    } nginx[] = {
        {"limit_conn_zone", "a [limit_conn NAME] section (key = "
                            "$binary_remote_addr, size = 10m)"},
    };
    size_t w;

    at(ld, (fd_conf_entry_t *)e);
    /* "listen 127.0.0.1:8080": inih took the ':' for the '=' the line
     * lacks; a key is one word, so a known first word is what was meant */
    w = strcspn(e->key, " \t");
    if (e->key[w] != '\0') {
        snprintf(buf, sizeof(buf), "%.*s", (int)fd_min(w, 64), e->key);
        if (key_home(buf, hint, sizeof(hint)))
            return fd_conf_error(ld->cf, "unknown key \"%s\" in [%s]: "
                                 "missing \"=\" after \"%s\"?", e->key,
                                 e->section, buf);
    }
    /* nginx's name for what fastd calls otherwise */
    for (i = 0; i < fd_nelems(nginx); i++)
        if (strcmp(e->key, nginx[i].name) == 0)
            return fd_conf_error(ld->cf, "unknown key \"%s\" in [%s]: "
                                 "fastd's is %s", e->key, e->section,
                                 nginx[i].meant);
    home = key_home(e->key, buf, sizeof(buf));
    if (home)
        return fd_conf_error(ld->cf, "unknown key \"%s\" in [%s]: it "
                             "belongs in %s", e->key, e->section, home);
    fd_conf_near_init(&nr, e->key);
    fd_conf_near_table(&nr, own);
    if (own == fd_http_server_directives)
        fd_conf_near_table(&nr, fd_ssl_server_directives);
    if (loc_keys) {
        fd_conf_near_table(&nr, fd_http_loc_directives);
        for (i = 0; i < fd_nmodules; i++)
            fd_conf_near_table(&nr, fd_modules[i]->directives);
    }
    return fd_conf_error(ld->cf, "unknown key \"%s\" in [%s]%s", e->key,
                         e->section,
                         fd_conf_near_hint(&nr, hint, sizeof(hint)));
}

/* e is a line of loc's [location] itself, not one it inherits (the
 * server's implicit location is named "server", as its lines' section) */
static int own_line(const fd_http_loc_t *loc, const fd_conf_entry_t *e)
{
    return loc != loc->server->root_loc && strcmp(loc->name, "server") != 0 &&
           strcmp(e->section, loc->name) == 0;
}

static int apply_loc_entry(load_t *ld, fd_http_loc_t *loc, fd_conf_entry_t *e)
{
    unsigned mod;
    const fd_directive_t *d;
    int rc;

    if (e->key[0] == '\0')
        return FD_OK; /* section marker */
    d = find_loc_key(e->key, &mod);

    at(ld, e);
    if (d == NULL)
        return FD_DECLINED;
    /* its meaning is the handler's, maybe not known yet; an old name
     * (renamed) is refused whatever the handler, at once */
    if (d->handler_key && !d->renamed)
        return list_add(ld->cf, ld->cf->temp, &loc->handler_keys, e);
    ld->cf->own_line = own_line(loc, e);
    rc = fd_conf_set(ld->cf, d, mod == UINT_MAX ? (void *)loc
                                                : loc->mconf[mod],
                     e->value);
    ld->cf->own_line = 0;
    return rc;
}

/*
 * The handler keys of loc, in the order they were met ([http], [server],
 * then the location's own), to its handler's declarations. One the
 * handler does not take is an error in the location's own section (it
 * would mean nothing there) and skipped when inherited (a default for
 * the locations whose handler takes it).
 */
static int loc_handler_keys(load_t *ld, fd_http_loc_t *loc)
{
    const fd_module_t *h = loc->handler;
    char names[160];
    unsigned i, k;
    size_t n;

    for (i = 0; i < loc->handler_keys.n; i++) {
        fd_conf_entry_t *e = (fd_conf_entry_t *)loc->handler_keys.items[i];
        const fd_directive_t *d = fd_conf_find(h->directives, e->key);

        at(ld, e);
        if (d && d->handler_key) {
            int rc;
            ld->cf->own_line = own_line(loc, e);
            rc = fd_conf_set(ld->cf, d, loc->mconf[h->index], e->value);
            ld->cf->own_line = 0;
            if (rc != FD_OK)
                return FD_ERROR;
            continue;
        }
        if (strcmp(e->section, loc->name) != 0)
            continue;
        names[0] = '\0';
        for (k = 0, n = 0; k < fd_nmodules; k++)
            if (fd_modules[k]->handler &&
                (d = fd_conf_find(fd_modules[k]->directives, e->key)) &&
                d->handler_key && n < sizeof(names))
                n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
                                      n ? ", " : "", fd_modules[k]->name);
        return fd_conf_error(ld->cf, "\"%s\" is a key of handler = %s, "
                             "not of handler = %s", e->key, names, h->name);
    }
    /* the entries die with the load */
    loc->handler_keys = (fd_conf_list_t){.items = NULL};
    return FD_OK;
}

/* whether entries [from, to) set key */
static int sets(load_t *ld, unsigned from, unsigned to, const char *key)
{
    unsigned i, k;

    for (i = 0; i < fd_nelems(ld->sets_memo); i++)
        if (ld->sets_memo[i].key && ld->sets_memo[i].from == from &&
            ld->sets_memo[i].to == to &&
            strcmp(ld->sets_memo[i].key, key) == 0)
            return ld->sets_memo[i].set;
    i = ld->sets_next++ % fd_nelems(ld->sets_memo);
    ld->sets_memo[i].key = key;
    ld->sets_memo[i].from = from;
    ld->sets_memo[i].to = to;
    ld->sets_memo[i].set = 0;
    for (k = from; k < to; k++)
        if (strcmp(ld->e[k].key, key) == 0) {
            ld->sets_memo[i].set = 1;
            break;
        }
    return ld->sets_memo[i].set;
}

/* whether an inherited entry gives way to lines of its key in [from, to)
 * (fd_directive_t.replace) */
static int replaced(load_t *ld, const fd_conf_entry_t *e, unsigned from,
                    unsigned to)
{
    unsigned mod;
    const fd_directive_t *d = find_loc_key(e->key, &mod);

    return d && d->replace && sets(ld, from, to, e->key);
}

/* A location of srv whose own entries are [from, to); the server's are
 * [sfrom, sto) (the same for the server's implicit location). */
static fd_http_loc_t *loc_create(load_t *ld, fd_http_server_t *srv,
                                 const char *name, unsigned from, unsigned to,
                                 unsigned sfrom, unsigned sto)
{
    fd_conf_t *cf = ld->cf;
    fd_http_loc_t *loc = fd_pcalloc(cf->pool, sizeof(*loc));
    unsigned i;

    if (loc == NULL)
        return NULL;
    loc->server = srv;
    loc->name = fd_pstrdup(cf->pool, name, strlen(name));
    loc->mconf = fd_pcalloc(cf->pool, (fd_nmodules + 1) * sizeof(void *));
    if (fd_conf_defaults(cf, fd_http_loc_directives, loc) != FD_OK)
        return NULL;
    for (i = 0; i < fd_nmodules; i++) {
        const fd_module_t *m = fd_modules[i];
        loc->mconf[i] = fd_pcalloc(cf->pool, m->conf_size ? m->conf_size : 1);
        if (fd_conf_defaults(cf, m->directives, loc->mconf[i]) != FD_OK)
            return NULL;
    }
    /* [http] defaults, then the server's own, then the location's */
    for (i = 0; i < ld->http_loc.n; i++) {
        fd_conf_entry_t *e = &ld->e[(uintptr_t)ld->http_loc.items[i]];
        if (replaced(ld, e, from, to) || replaced(ld, e, sfrom, sto))
            continue;
        if (apply_loc_entry(ld, loc, e) != FD_OK)
            return NULL;
    }
    fd_http_loc_headers_mark(loc); /* the server's own add_header begin */
    return loc;
}

static int loc_match_parse(load_t *ld, fd_http_loc_t *loc, const char *spec)
{
    fd_conf_t *cf = ld->cf;
    const char *p = spec;
    int caseless = 0;

    while (*p == ' ')
        p++;
    if (p[0] == '@') {
        /* reached only by an internal redirect (try_files), never by a
         * request's path: no '/' can begin one */
        for (const char *c = p + 1; *c; c++)
            if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') &&
                !(*c >= '0' && *c <= '9') && *c != '_' && *c != '-' &&
                *c != '.')
                return fd_conf_error(cf, "[location %s]: a named location "
                                     "is @ then letters, digits, '_', '-' "
                                     "or '.'", p);
        if (p[1] == '\0')
            return fd_conf_error(cf, "[location @] needs a name");
        loc->kind = FD_LOC_NAMED;
        loc->match.data = fd_pstrdup(cf->pool, p, strlen(p));
        loc->match.len = strlen(p);
        return FD_OK;
    }
    if (p[0] == '=' && (p[1] == ' ' || p[1] == '/')) {
        loc->kind = FD_LOC_EXACT;
        p++;
    } else if (p[0] == '^' && p[1] == '~') {
        loc->kind = FD_LOC_PREFIX_STOP;
        p += 2;
    } else if (p[0] == '~') {
        loc->kind = FD_LOC_REGEX;
        p++;
        if (*p == '*') {
            caseless = 1;
            loc->kind = FD_LOC_REGEX_CASELESS;
            p++;
        }
    } else {
        loc->kind = FD_LOC_PREFIX;
    }
    while (*p == ' ')
        p++;
    if (*p == '\0')
        return fd_conf_error(cf, "[location] needs a path or a regex");
    loc->match.data = fd_pstrdup(cf->pool, p, strlen(p));
    loc->match.len = strlen(p);
    if (loc->kind == FD_LOC_EXACT || loc->kind == FD_LOC_PREFIX ||
        loc->kind == FD_LOC_PREFIX_STOP) {
        if (*p != '/')
            return fd_conf_error(cf, "location path \"%s\" must start with "
                                 "\"/\" (use \"~ regex\" for a regex)", p);
        return FD_OK;
    }
    {
        int err;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED,
                                       caseless ? PCRE2_CASELESS : 0, &err,
                                       &off, NULL);
        if (re == NULL) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            return fd_conf_error(cf, "regex \"%s\" at offset %zu: %s", p,
                                 (size_t)off, (char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        fd_pool_cleanup_add(cf->pool, (void (*)(void *))pcre2_code_free, re);
        loc->regex = re;
    }
    return FD_OK;
}

static void loc_link(fd_http_server_t *srv, fd_http_loc_t *loc)
{
    fd_http_loc_t **pp;

    switch (loc->kind) {
    case FD_LOC_EXACT:
        loc->next = srv->exact;
        srv->exact = loc;
        return;
    case FD_LOC_NAMED:
        loc->next = srv->named;
        srv->named = loc;
        return;
    case FD_LOC_PREFIX:
    case FD_LOC_PREFIX_STOP:
        /* longest first, so the first match is the longest */
        for (pp = &srv->prefix; *pp && (*pp)->match.len >= loc->match.len;
             pp = &(*pp)->next)
            ;
        loc->next = *pp;
        *pp = loc;
        return;
    default:
        for (pp = &srv->regex; *pp; pp = &(*pp)->next)
            ;
        loc->next = NULL;
        *pp = loc;
    }
}

/* default "html" under the prefix; missing is fine (404s) */
static void loc_default_root(load_t *ld, fd_http_loc_t *loc)
{
    char real[PATH_MAX], *p = fd_conf_path(ld->cf, "html");

    if (realpath(p, real))
        p = fd_pstrdup(ld->cf->pool, real, strlen(real));
    loc->root = p;
    loc->root_len = strlen(p);
}

static int loc_finish(load_t *ld, fd_http_loc_t *loc)
{
    const char *file = ld->cf->file;
    int line = ld->cf->line;
    unsigned i;

    if (loc->handler == NULL) {
        loc->handler = fd_module_find("static");
        if (loc->handler == NULL)
            return fd_conf_error(ld->cf, "%s has no handler", loc->name);
        loc->handler_fn = loc->handler->handler;
        loc->handler_flags = loc->handler->flags;
        loc->handler_methods = loc->handler->methods;
    }
    if (loc->blocking) {
        if (!(loc->handler_flags & (FD_MODULE_THREAD_SAFE |
                                    FD_MODULE_BLOCKING)))
            return fd_conf_error(ld->cf, "%s: blocking = on, but handler %s "
                                 "cannot run on the offload pool", loc->name,
                                 loc->handler->name);
        loc->handler_flags |= FD_MODULE_BLOCKING;
    }
    if (loc_handler_keys(ld, loc) != FD_OK)
        return FD_ERROR;
    ld->cf->file = file;
    ld->cf->line = line;
    if (loc->root == NULL)
        loc_default_root(ld, loc);
    if (loc->alias && fd_http_alias_init(ld->cf, loc) != FD_OK)
        return FD_ERROR;
    fd_http_loc_headers_finish(loc);
    loc->realip_own = !fd_realip_conf_eq(&loc->realip,
                                         &loc->server->root_loc->realip);
    if (loc->index.n == 0) {
        static char *def_index[] = {"index.html"};
        loc->index.items = def_index;
        loc->index.n = 1;
    }
    for (i = 0; i < fd_nmodules; i++) {
        const fd_module_t *m = fd_modules[i];
        /* each module starts from the section's position; it may move it
         * to its key with fd_conf_at_key() */
        ld->cf->file = file;
        ld->cf->line = line;
        if (m->init_conf && m->init_conf(ld->cf, loc, loc->mconf[i]) != FD_OK)
            return FD_ERROR;
    }
    /* the hooks this location runs: a request pays only for those */
    loc->access = fd_palloc(ld->cf->pool, (fd_nmodules + 1) * sizeof(void *));
    loc->filter = fd_palloc(ld->cf->pool, (fd_nmodules + 1) * sizeof(void *));
    if (loc->access == NULL || loc->filter == NULL)
        return fd_conf_error(ld->cf, "out of memory");
    {
        unsigned na = 0, nf = 0;
        for (i = 0; i < fd_nmodules; i++) {
            const fd_module_t *m = fd_modules[i];
            if (m->loc_active && !m->loc_active(loc))
                continue;
            if (m->access)
                loc->access[na++] = m;
            if (m->filter)
                loc->filter[nf++] = m;
        }
        loc->access[na] = NULL;
        loc->filter[nf] = NULL;
    }
    return FD_OK;
}

/* The host name a.b.example, or "" for a server without server_name. */
static int shares_name(const fd_http_server_t *a, const fd_http_server_t *b,
                       const char **name)
{
    unsigned i, j;

    if (a->names.n == 0 && b->names.n == 0) {
        *name = "";
        return 1;
    }
    for (i = 0; i < a->names.n; i++)
        for (j = 0; j < b->names.n; j++)
            if (strcmp(a->names.items[i], b->names.items[j]) == 0) {
                *name = a->names.items[i];
                return 1;
            }
    return 0;
}

/*
 * Another [server] on this address with the same name (or, like srv, no
 * name) is chosen first: srv can then never be reached under that name.
 * As nginx ("conflicting server name"), a warning naming both, not an
 * error: the configuration still works as it did.
 */
static void shadowed_names(const fd_listening_t *ls,
                           const fd_http_server_t *srv, int first)
{
    const fd_http_server_t *lost, *won;
    const char *name;
    unsigned i;

    for (i = 0; i < ls->nservers; i++) {
        const fd_http_server_t *o = ls->servers[i];
        if (o == srv || !shares_name(o, srv, &name))
            continue;
        /* a "default" one goes before the others */
        lost = first ? o : srv;
        won = first ? srv : o;
        fd_log_error(FD_LOG_WARN, 0, "%s:%d: [server] on %s %s%s%s is "
                     "never chosen: the one at %s:%d takes it first",
                     lost->file, lost->line, ls->text,
                     *name ? "with server_name \"" : "without server_name",
                     name, *name ? "\"" : "", won->file, won->line);
    }
}

/*
 * server_name matching, for Host and SNI alike: per server in order, any
 * of its names, exact (any case), "*.suffix" or "prefix.*". One trailing
 * dot of name means the same name.
 */
fd_http_server_t *fd_listening_server(const fd_listening_t *ls,
                                      fd_str_t name)
{
    unsigned i, j;

    if (name.len > 1 && name.data[name.len - 1] == '.')
        name.len--;
    for (i = 0; i < ls->nservers; i++) {
        fd_http_server_t *s = ls->servers[i];
        for (j = 0; j < s->names.n; j++) {
            const char *n = s->names.items[j];
            size_t nl = strlen(n);
            if (fd_str_caseeq(name, n, nl))
                return s;
            if (n[0] == '*' && n[1] == '.' && name.len > nl - 1 &&
                strncasecmp(name.data + name.len - (nl - 1), n + 1,
                            nl - 1) == 0)
                return s;
            if (nl > 2 && n[nl - 1] == '*' && n[nl - 2] == '.' &&
                name.len > nl - 1 && strncasecmp(name.data, n, nl - 1) == 0)
                return s;
        }
    }
    return NULL;
}

/* The listen = lines of a [server] (entries [from, to)), in order. */
static int server_listen(load_t *ld, fd_http_server_t *srv, unsigned from,
                         unsigned to)
{
    fd_conf_t *cf = ld->cf;
    unsigned i, k = from;

    if (srv->listen.n == 0) {
        static char *def[] = {"0.0.0.0:8080"};
        srv->listen.items = def;
        srv->listen.n = 1;
    }
    for (i = 0; i < srv->listen.n; i++) {
        char addr[300];
        struct sockaddr_storage ss;
        socklen_t len;
        unsigned opts;
        fd_listening_t *ls;
        fd_http_server_t **servers;

        /* errors name the line of this listen (the implicit one: the
         * [server] header) */
        while (k < to && strcmp(ld->e[k].key, "listen") != 0)
            k++;
        if (k < to)
            at(ld, &ld->e[k++]);
        if (fd_cycle_listen_parse(cf, srv->listen.items[i], &ss, &len,
                                  addr, &opts) != FD_OK)
            return FD_ERROR;
        if (opts & FD_LISTEN_UDP)
            return fd_conf_error(cf, "listen %s udp: plain UDP is for a "
                                 "[stream] (HTTP/3 over UDP: quic)", addr);
        if (opts & FD_LISTEN_QUIC) {
#ifndef FD_HTTP3
            /* the default config has a quic listener: a build without
             * the libraries serves the rest */
            fd_log_error(FD_LOG_WARN, 0, "%s:%d: listen %s quic ignored: "
                         "fastd was built without HTTP/3 (./configure "
                         "--with-http3)", cf->file, cf->line, addr);
            continue;
#else
            char *as = fd_pnalloc(cf->pool, 32);
            unsigned port = ntohs(ss.ss_family == AF_INET6
                                      ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                      : ((struct sockaddr_in *)&ss)->sin_port);
            if (as == NULL)
                return fd_conf_error(cf, "out of memory");
            srv->alt_svc.len = (size_t)snprintf(as, 32, "h3=\":%u\"; ma=86400",
                                                port);
            srv->alt_svc.data = as;
#endif
        }
        for (ls = ld->cycle->listening; ls; ls = ls->next)
            if (ls->addrlen == len && memcmp(&ls->addr, &ss, len) == 0 &&
                ls->quic == ((opts & FD_LISTEN_QUIC) != 0) && !ls->udp)
                break;
        if (ls && ls->owner)
            return fd_conf_error(cf, "listen %s: a [stream] listens on "
                                 "it", addr);
        if (ls == NULL) {
            ls = fd_pcalloc(cf->pool, sizeof(*ls));
            ls->addr = ss;
            ls->addrlen = len;
            ls->text = fd_pstrdup(cf->pool, addr, strlen(addr));
            ls->ev.fd = -1;
            ls->proto = &fd_http_proto;
            ls->ssl = (opts & FD_LISTEN_SSL) != 0;
            ls->proxy_protocol = (opts & FD_LISTEN_PROXY) != 0;
            ls->quic = (opts & FD_LISTEN_QUIC) != 0;
            ls->index = ld->cycle->nlistening++;
            ls->next = ld->cycle->listening;
            ld->cycle->listening = ls;
        } else if (ls->ssl != ((opts & FD_LISTEN_SSL) != 0)) {
            /* one socket speaks one thing */
            const fd_http_server_t *o = ls->servers[0];
            return fd_conf_error(cf, "listen %s %s ssl, but the [server] "
                                 "at %s:%d listens on it %s ssl", addr,
                                 ls->ssl ? "without" : "with", o->file,
                                 o->line, ls->ssl ? "with" : "without");
        }
        if (ls->proxy_protocol != ((opts & FD_LISTEN_PROXY) != 0)) {
            const fd_http_server_t *o = ls->servers[0];
            return fd_conf_error(cf, "listen %s %s proxy_protocol, but the "
                                 "[server] at %s:%d listens on it %s it",
                                 addr, ls->proxy_protocol ? "without" : "with",
                                 o->file, o->line,
                                 ls->proxy_protocol ? "with" : "without");
        }
        if (opts & FD_LISTEN_HTTP2)
            ls->http2 = 1; /* for the address, as nginx's listen http2 */
        shadowed_names(ls, srv, (opts & FD_LISTEN_DEFAULT) != 0);
        servers = fd_palloc(cf->pool, (ls->nservers + 1) * sizeof(*servers));
        if (ls->nservers)
            memcpy(servers, ls->servers, ls->nservers * sizeof(*servers));
        if (opts & FD_LISTEN_DEFAULT) { /* default server goes first */
            memmove(servers + 1, servers, ls->nservers * sizeof(*servers));
            servers[0] = srv;
        } else {
            servers[ls->nservers] = srv;
        }
        ls->servers = servers;
        ls->nservers++;
    }
    return FD_OK;
}

fd_listening_t *fd_cycle_listening_add(fd_conf_t *cf, const char *value,
                                       const struct fd_proto_s *proto,
                                       void *owner)
{
    char addr[300];
    struct sockaddr_storage ss;
    socklen_t len;
    unsigned opts;
    fd_listening_t *ls;

    if (fd_cycle_listen_parse(cf, value, &ss, &len, addr, &opts) != FD_OK)
        return NULL;
    if (opts & ~FD_LISTEN_UDP)
        return fd_conf_error(cf, "listen %s: no options here but udp",
                             addr),
               NULL;
    /* the [server]s' listen lines come later in the load: they check
     * this list too (server_listen); TCP and UDP on one port are two */
    for (ls = cf->cycle->listening; ls; ls = ls->next)
        if (ls->addrlen == len && memcmp(&ls->addr, &ss, len) == 0 &&
            (ls->quic || ls->udp) == ((opts & FD_LISTEN_UDP) != 0))
            return fd_conf_error(cf, "listen %s%s: the address is already "
                                 "listened on", addr,
                                 opts & FD_LISTEN_UDP ? " udp" : ""),
                   NULL;
    ls = fd_pcalloc(cf->pool, sizeof(*ls));
    if (ls == NULL)
        return fd_conf_error(cf, "out of memory"), NULL;
    ls->addr = ss;
    ls->addrlen = len;
    ls->text = fd_pstrdup(cf->pool, addr, strlen(addr));
    ls->ev.fd = -1;
    ls->proto = proto;
    ls->owner = owner;
    ls->udp = (opts & FD_LISTEN_UDP) != 0;
    ls->index = cf->cycle->nlistening++;
    ls->next = cf->cycle->listening;
    cf->cycle->listening = ls;
    return ls;
}

/* --- error pages (read once per load) --- */

static int server_error_pages(load_t *ld, fd_http_server_t *srv,
                              fd_conf_entry_t *e)
{
    fd_conf_t *cf = ld->cf;
    char *v = fd_pstrdup(cf->pool, e->value, strlen(e->value));
    char *tok, *save, *uri = NULL, *path;
    int codes[32], ncodes = 0, i;
    FILE *fp;
    long sz;
    char *body;

    for (tok = strtok_r(v, " \t", &save); tok; tok = strtok_r(NULL, " \t",
                                                              &save)) {
        if (*tok == '/') {
            uri = tok;
            break;
        }
        codes[ncodes] = (int)fd_conf_parse_uint(tok, 999);
        if (codes[ncodes] < 300 || codes[ncodes] > 599 || ncodes == 31)
            return fd_conf_error(cf, "error_page: bad status \"%s\"", tok);
        ncodes++;
    }
    if (uri == NULL || ncodes == 0)
        return fd_conf_error(cf, "error_page needs CODE... /file.html");
    if (srv->root_loc->root == NULL) /* no root key: the default one */
        loc_default_root(ld, srv->root_loc);
    path = fd_pnalloc(cf->pool, srv->root_loc->root_len + strlen(uri) + 1);
    sprintf(path, "%s%s", srv->root_loc->root, uri);
    fp = fopen(path, "r");
    if (fp == NULL)
        return fd_conf_error(cf, "error_page \"%s\": %s", path,
                             strerror(errno));
    fseek(fp, 0, SEEK_END);
    sz = ftell(fp);
    rewind(fp);
    if (sz < 0 || sz > 1024 * 1024) {
        fclose(fp);
        return fd_conf_error(cf, "error_page \"%s\": too large", path);
    }
    body = fd_pnalloc(cf->pool, (size_t)sz + 1);
    sz = (long)fread(body, 1, (size_t)sz, fp);
    fclose(fp);
    for (i = 0; i < ncodes; i++) {
        fd_error_page_t *ep = fd_palloc(cf->pool, sizeof(*ep));
        ep->status = codes[i];
        ep->body = body;
        ep->len = (size_t)sz;
        ep->next = srv->error_pages;
        srv->error_pages = ep;
    }
    return FD_OK;
}

/* --- the load --- */

static unsigned section_end(load_t *ld, unsigned i)
{
    unsigned seq = ld->e[i].section_seq, j = i;

    while (j < ld->n && ld->e[j].section_seq == seq)
        j++;
    return j;
}

static int apply_profile(load_t *ld, const char *profile)
{
    fd_conf_t *cf = ld->cf;
    unsigned i, j, found = 0, n = ld->n;
    const char *name;

    for (i = 0; i < n; i++) {
        fd_conf_entry_t pe = ld->e[i];
        char *dot, target[512];
        int k = -1;

        if (!is_named(pe.section, "profile", &name) || strcmp(name, profile))
            continue;
        found = 1;
        if (pe.key[0] == '\0')
            continue;
        at(ld, &pe);
        dot = strrchr(pe.key, '.');
        if (dot == NULL || dot == pe.key)
            return fd_conf_error(cf, "profile key \"%s\" must be "
                                 "section.key (like events.accept)", pe.key);
        snprintf(target, sizeof(target), "%.*s", (int)(dot - pe.key),
                 pe.key);
        /* "queue.api" names [queue api] */
        for (char *p = target; *p; p++)
            if (*p == '.')
                *p = ' ';
        if (strcmp(target, "server") == 0 ||
            strncmp(target, "location", 8) == 0 ||
            strncmp(target, "profile", 7) == 0)
            return fd_conf_error(cf, "a profile cannot override [%s] keys",
                                 target);
        for (j = 0; j < ld->n; j++)
            if (strcmp(ld->e[j].section, target) == 0 &&
                strcmp(ld->e[j].key, dot + 1) == 0)
                k = (int)j;
        if (k >= 0) {
            ld->e[k].value = pe.value;
            ld->e[k].file = pe.file;
            ld->e[k].line = pe.line;
            continue;
        }
        /* a new key: append to the section's instance, or a new one */
        {
            unsigned seq = 0;
            fd_conf_entry_t *ne;
            for (j = 0; j < ld->n; j++)
                if (strcmp(ld->e[j].section, target) == 0)
                    seq = ld->e[j].section_seq;
            ne = realloc(ld->e, (ld->n + 1) * sizeof(*ne));
            if (ne == NULL)
                return fd_conf_error(cf, "out of memory");
            ld->e = ne;
            if (seq == 0) {
                seq = 1000000 + ld->n;
                j = ld->n;
            } else {
                /* insert after the last entry of that section instance */
                for (j = ld->n; j > 0 && ld->e[j - 1].section_seq != seq; j--)
                    ;
                memmove(&ld->e[j + 1], &ld->e[j],
                        (ld->n - j) * sizeof(*ne));
                if (j <= i)
                    i++;
                n++;
            }
            ld->e[j] = pe;
            ld->e[j].section = fd_pstrdup(cf->pool, target, strlen(target));
            ld->e[j].key = dot + 1;
            ld->e[j].section_seq = seq;
            ld->n++;
        }
    }
    if (!found) {
        cf->file = ld->cycle->conf_file;
        cf->line = 0;
        for (i = 0; i < ld->n; i++)
            if (strcmp(ld->e[i].section, "main") == 0 &&
                strcmp(ld->e[i].key, "profile") == 0) {
                at(ld, &ld->e[i]);
                break;
            }
        if (cf->line == 0)
            cf->file = NULL;
        return fd_conf_error(cf, "profile \"%s\" not found (no [profile %s] "
                             "section)", profile, profile);
    }
    return FD_OK;
}

static int apply_module_section(load_t *ld, unsigned from, unsigned to,
                                const fd_module_t *m, const char *name)
{
    fd_conf_t *cf = ld->cf;
    fd_conf_section_t *s;

    for (s = ld->cycle->sections; s; s = s->next)
        if (s->module == m && strcmp(s->name, name) == 0) {
            at(ld, &ld->e[from]);
            return fd_conf_error(cf, "duplicate [%s%s%s] (first at %s:%d)",
                                 m->section, *name ? " " : "", name,
                                 s->file, s->line);
        }
    s = fd_pcalloc(cf->pool, sizeof(*s));
    s->module = m;
    s->name = fd_pstrdup(cf->pool, name, strlen(name));
    s->conf = fd_pcalloc(cf->pool, m->section_size ? m->section_size : 1);
    s->file = ld->e[from].file;
    s->line = ld->e[from].line;
    if (fd_conf_defaults(cf, m->section_directives, s->conf) != FD_OK)
        return FD_ERROR;
    if (apply_simple(ld, from, to, m->section_directives, s->conf) != FD_OK)
        return FD_ERROR;
    at(ld, &ld->e[from]);
    if (m->init_section && m->init_section(cf, s->name, s->conf) != FD_OK)
        return FD_ERROR;
    s->next = ld->cycle->sections;
    ld->cycle->sections = s;
    return FD_OK;
}

/* Before pass 1: the $variables sections declare (fd_module_t
 * .declare_section), so that any section may use them. */
static int declare_sections(load_t *ld)
{
    const char *name;
    unsigned i, k;

    for (i = 0; i < ld->n; i++) {
        fd_conf_entry_t *e = &ld->e[i];
        if (e->key[0] != '\0') {
            unsigned mod;
            const fd_directive_t *d = find_loc_key(e->key, &mod);
            const char *v = e->value;
            size_t n = 0;
            if (d == NULL || !d->declares)
                continue;
            at(ld, e);
            while (*v == ' ' || *v == '\t')
                v++;
            if (*v == '$')
                while (v[1 + n] && v[1 + n] != ' ' && v[1 + n] != '\t')
                    n++;
            if (n == 0)
                return fd_conf_error(ld->cf, "%s needs $VARIABLE VALUE, not "
                                     "\"%s\"", e->key, e->value);
            {
                const fd_var_t *had = fd_var_declared(v + 1, n);
                if (had && had->get == fd_var_get_set)
                    continue; /* set in another place too */
            }
            if (fd_var_declare(ld->cf, v + 1, n, fd_var_get_set) != FD_OK)
                return FD_ERROR;
            continue;
        }
        for (k = 0; k < 2 * fd_nmodules; k++) {
            const fd_module_t *m = section_module(k);
            if (m && m->declare_section &&
                is_named(e->section, m->section, &name)) {
                at(ld, e);
                if (m->declare_section(ld->cf, name) != FD_OK)
                    return FD_ERROR;
                break;
            }
        }
    }
    return FD_OK;
}

/* Pass 1: every section except [server] and [location]. */
static int apply_globals(load_t *ld)
{
    fd_conf_t *cf = ld->cf;
    fd_cycle_t *cy = ld->cycle;
    unsigned i, j, k;
    const char *name;
    static const char *singletons[] = {"main", "events", "http", "offload"};

    for (i = 0; i < ld->n; i = j) {
        fd_conf_entry_t *e = &ld->e[i];
        j = section_end(ld, i);
        at(ld, e);
        /* a second [http] continues the first, as in nginx */
        for (k = 0; k < 4; k++)
            if (strcmp(e->section, singletons[k]) == 0)
                break;
        if (k == 0 && apply_simple(ld, i, j, fd_main_directives, &cy->main))
            return FD_ERROR;
        if (k == 1 && apply_simple(ld, i, j, fd_events_directives, &cy->events))
            return FD_ERROR;
        if (k == 3 &&
            apply_simple(ld, i, j, fd_offload_directives, &cy->offload))
            return FD_ERROR;
        if (k == 2) {
            for (; i < j; i++) {
                unsigned mod;
                const fd_directive_t *d;
                e = &ld->e[i];
                if (e->key[0] == '\0')
                    continue;
                at(ld, e);
                d = fd_conf_find(fd_http_directives, e->key);
                for (unsigned q = 0; q < i && d; q++)
                    if (strcmp(ld->e[q].section, "http") == 0 &&
                        strcmp(ld->e[q].key, e->key) == 0)
                        return fd_conf_error(cf, "duplicate key \"%s\" "
                                             "(first at line %d)", e->key,
                                             ld->e[q].line);
                if (d) {
                    if (fd_conf_set(cf, d, &cy->http, e->value) != FD_OK)
                        return FD_ERROR;
                    continue;
                }
                if (find_loc_key(e->key, &mod) == NULL)
                    return unknown_key(ld, e, fd_http_directives, 1);
                if (list_add(cf, cf->pool, &ld->http_loc,
                             (void *)(uintptr_t)i) != FD_OK)
                    return FD_ERROR;
            }
        }
        if (k < 4)
            continue;
        if (strcmp(e->section, "server") == 0 ||
            is_named(e->section, "location", &name) ||
            is_named(e->section, "profile", &name))
            continue;
        for (k = 0; k < 2 * fd_nmodules; k++) {
            const fd_module_t *m = section_module(k);
            if (m && is_named(e->section, m->section, &name)) {
                if (m->section_unnamed)
                    return fd_conf_error(cf, "[%s] takes no name",
                                         m->section);
                if (apply_module_section(ld, i, j, m, name) != FD_OK)
                    return FD_ERROR;
                break;
            }
            if (m && strcmp(e->section, m->section) == 0) {
                if (!m->section_unnamed)
                    return fd_conf_error(cf, "[%s] needs a name: [%s NAME]",
                                         m->section, m->section);
                if (apply_module_section(ld, i, j, m, "") != FD_OK)
                    return FD_ERROR;
                break;
            }
        }
        if (k == 2 * fd_nmodules) {
            fd_conf_near_t nr;
            const char *best;
            char type[64];
            static const char *const known[] = {
                "main", "events", "http", "offload", "server", "location",
                "profile"};
            /* nginx's blocks with no module here: a spelling
             * suggestion ([stream] -> [upstream]) would mislead */
            static const struct {
                const char *name, *why;
            } absent[] = {
                {"stream", "this build has no stream module (auto/modules)"},
                {"mail", "fastd has no mail proxy"},
            };

            /* [locaton /x]: the type is the word to correct */
            snprintf(type, sizeof(type), "%.*s",
                     (int)strcspn(e->section, " \t"), e->section);
            for (k = 0; k < fd_nelems(absent); k++)
                if (strcmp(type, absent[k].name) == 0)
                    return fd_conf_error(cf, "[%s] is not supported: %s",
                                         e->section, absent[k].why);
            fd_conf_near_init(&nr, type);
            for (k = 0; k < fd_nelems(known); k++)
                fd_conf_near_add(&nr, known[k]);
            for (k = 0; k < 2 * fd_nmodules; k++)
                if (section_module(k))
                    fd_conf_near_add(&nr, section_module(k)->section);
            best = fd_conf_near_best(&nr);
            return fd_conf_error(cf, "unknown section [%s]%s%s%s",
                                 e->section, best ? "; did you mean [" : "",
                                 best ? best : "", best ? "]?" : "");
        }
    }
    return FD_OK;
}

/* Pass 2: servers and their locations, in file order. */
static int apply_servers(load_t *ld)
{
    fd_conf_t *cf = ld->cf;
    fd_cycle_t *cy = ld->cycle;
    fd_http_server_t *srv = NULL, **last = &cy->servers;
    unsigned i, j, k, srv_from = 0, srv_to = 0;
    const char *name;

    for (i = 0; i < ld->n; i = j) {
        fd_conf_entry_t *e = &ld->e[i];
        j = section_end(ld, i);
        at(ld, e);
        if (strcmp(e->section, "server") == 0) {
            srv = fd_pcalloc(cf->pool, sizeof(*srv));
            srv->seq = e->section_seq;
            srv->file = cf->file;
            srv->line = cf->line;
            *last = srv;
            last = &srv->next;
            srv_from = i;
            srv_to = j;
            /* the [server] keys' defaults first (proxy_protocol_timeout
             * was 0 without it: a PROXY header later than the accept's
             * turn found the connection closed) */
            if (fd_conf_defaults(cf, fd_http_server_directives, srv) !=
                FD_OK)
                return FD_ERROR;
            srv->root_loc = loc_create(ld, srv, "server", i, j, i, j);
            srv->ssl = fd_ssl_conf_create(cf);
            if (srv->root_loc == NULL || srv->ssl == NULL)
                return FD_ERROR;
            srv->root_loc->kind = FD_LOC_PREFIX;
            srv->root_loc->match = fd_string("/");
            for (k = i; k < j; k++) {
                fd_conf_entry_t *se = &ld->e[k];
                const fd_directive_t *d;
                int rc;
                if (se->key[0] == '\0')
                    continue;
                at(ld, se);
                if (strcmp(se->key, "error_page") == 0)
                    continue; /* after root is known */
                d = fd_conf_find(fd_http_server_directives, se->key);
                if (d) {
                    if (fd_conf_set(cf, d, srv, se->value) != FD_OK)
                        return FD_ERROR;
                    continue;
                }
                d = fd_conf_find(fd_ssl_server_directives, se->key);
                if (d) {
                    if (fd_conf_set(cf, d, srv->ssl, se->value) != FD_OK)
                        return FD_ERROR;
                    continue;
                }
                rc = apply_loc_entry(ld, srv->root_loc, se);
                if (rc == FD_DECLINED)
                    return unknown_key(ld, se, fd_http_server_directives, 1);
                if (rc != FD_OK)
                    return FD_ERROR;
            }
            for (k = i; k < j; k++)
                if (strcmp(ld->e[k].key, "error_page") == 0) {
                    at(ld, &ld->e[k]);
                    if (server_error_pages(ld, srv, &ld->e[k]) != FD_OK)
                        return FD_ERROR;
                }
            at(ld, e);
            if (server_listen(ld, srv, i, j) != FD_OK)
                return FD_ERROR;
            continue;
        }
        if (!is_named(e->section, "location", &name))
            continue;
        if (srv == NULL)
            return fd_conf_error(cf, "[%s] before any [server]", e->section);
        {
            fd_http_loc_t *loc = loc_create(ld, srv, e->section, i, j,
                                             srv_from, srv_to);
            char tmp[64];
            if (loc == NULL)
                return FD_ERROR;
            /* the server's location keys are this location's defaults */
            for (k = srv_from; k < srv_to; k++)
                if (ld->e[k].key[0] != '\0' &&
                    fd_conf_find(fd_http_server_directives,
                                 ld->e[k].key) == NULL &&
                    fd_conf_find(fd_ssl_server_directives,
                                 ld->e[k].key) == NULL &&
                    !replaced(ld, &ld->e[k], i, j) &&
                    apply_loc_entry(ld, loc, &ld->e[k]) != FD_OK)
                    return FD_ERROR;
            loc->try_files = NULL; /* the one key not inherited */
            fd_http_loc_headers_mark(loc); /* the location's own begin */
            at(ld, e);
            if (loc_match_parse(ld, loc, name) != FD_OK)
                return FD_ERROR;
            for (k = i; k < j; k++) {
                int rc;
                unsigned m;
                fd_conf_entry_t *le = &ld->e[k];
                const fd_directive_t *d;
                if (le->key[0] == '\0')
                    continue;
                d = find_loc_key(le->key, &m);
                if (d && d->type != FD_CONF_LIST) {
                    unsigned q;
                    for (q = i; q < k; q++)
                        if (strcmp(ld->e[q].key, le->key) == 0) {
                            at(ld, le);
                            snprintf(tmp, sizeof(tmp), "%d", ld->e[q].line);
                            return fd_conf_error(cf, "duplicate key \"%s\" "
                                                 "(first at line %s)",
                                                 le->key, tmp);
                        }
                }
                rc = apply_loc_entry(ld, loc, le);
                if (rc == FD_DECLINED)
                    return unknown_key(ld, le, NULL, 1);
                if (rc != FD_OK)
                    return FD_ERROR;
            }
            at(ld, e);
            if (loc->kind == FD_LOC_NAMED &&
                fd_http_named_location(srv, loc->match.data) != NULL)
                return fd_conf_error(cf, "[location %s] twice in one "
                                     "[server]", loc->match.data);
            if (loc_finish(ld, loc) != FD_OK)
                return FD_ERROR;
            loc_link(srv, loc);
        }
    }
    for (srv = cy->servers; srv; srv = srv->next) {
        /* the implicit location's checks name its [server] header */
        for (i = 0; i < ld->n; i++)
            if (ld->e[i].section_seq == srv->seq) {
                at(ld, &ld->e[i]);
                break;
            }
        if (loc_finish(ld, srv->root_loc) != FD_OK)
            return FD_ERROR;
    }
    /* try_files = ... @name: the server is read whole, so a named
     * location may come after its users */
    for (srv = cy->servers; srv; srv = srv->next) {
        fd_http_loc_t *lists[] = {srv->exact, srv->prefix, srv->regex,
                                  srv->named, srv->root_loc};
        fd_http_loc_t *loc;

        for (i = 0; i < fd_nelems(lists); i++)
            for (loc = lists[i]; loc; loc = loc->next) /* root_loc: none */
                if (fd_http_try_files_resolve(cf, loc) != FD_OK)
                    return FD_ERROR;
    }
    /* and a module's keys that name one (mirror = @name) */
    return fd_http_named_checks(cf, cy);
}

static char *make_prefix(fd_pool_t *pool, const char *file)
{
    char real[PATH_MAX], *d;

    if (realpath(file, real) == NULL)
        return NULL;
    d = dirname(real);      /* .../conf */
    d = dirname(d);         /* ... */
    return fd_pstrdup(pool, d, strlen(d));
}

/* Whether the workers' user may read the directory dir (and so serve its
 * files), by the modes on the way to it (not ACLs): what the workers of a
 * root master cannot enter gets 403 for every file, which the master can
 * say at load (a checkout under /root, with the nobody fallback). */
static int user_may_read(const fd_main_conf_t *mc, const char *dir)
{
    char path[PATH_MAX];
    struct stat st;
    size_t i, n = strlen(dir);

    if (n == 0 || n >= sizeof(path))
        return 1;
    memcpy(path, dir, n + 1);
    for (i = 1; i <= n; i++) {
        mode_t want;
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (stat(path, &st) < 0)
            return 1; /* missing: the request's own error, not this one */
        want = i == n ? 05 : 01; /* the last: read and enter; else enter */
        if (st.st_uid == mc->uid)
            want <<= 6;
        else if (st.st_gid == mc->gid)
            want <<= 3;
        if ((st.st_mode & want) != want)
            return 0;
        if (i < n)
            path[i] = '/';
    }
    return 1;
}

/* A static location's root the workers' user cannot read: a warning,
 * once a directory in the process (-t loads the file per profile). */
static void check_root(fd_http_loc_t *loc, void *data)
{
    static char warned[8][PATH_MAX];
    static unsigned nwarned;
    const fd_cycle_t *cy = data;
    unsigned w;

    if (loc->root == NULL ||
        (loc->handler && strcmp(loc->handler->name, "static") != 0))
        return;
    for (w = 0; w < nwarned; w++)
        if (strcmp(warned[w], loc->root) == 0)
            return;
    if (user_may_read(&cy->main, loc->root))
        return;
    if (nwarned < fd_nelems(warned))
        snprintf(warned[nwarned++], PATH_MAX, "%s", loc->root);
    fd_log_error(FD_LOG_WARN, 0, "root \"%s\" (%s) is not readable by user "
                 "\"%s\", the workers' user: its files will be 403 (set "
                 "[main] user, or let that user in)", loc->root, loc->name,
                 cy->main.user);
}

void fd_http_each_loc(fd_cycle_t *cy, void (*fn)(fd_http_loc_t *, void *),
                      void *data)
{
    fd_http_server_t *s;
    fd_http_loc_t *loc;
    unsigned k;

    for (s = cy->servers; s; s = s->next) {
        fd_http_loc_t *lists[] = {s->exact, s->prefix, s->regex, s->named};
        fn(s->root_loc, data);
        for (k = 0; k < fd_nelems(lists); k++)
            for (loc = lists[k]; loc; loc = loc->next)
                fn(loc, data);
    }
}

fd_cycle_t *fd_cycle_load(const char *file, const char *profile, char *err,
                          size_t errlen)
{
    static int keys_checked;
    fd_pool_t *pool = fd_pool_create(16384);
    fd_cycle_t *cy;
    fd_conf_t cf = {0};
    load_t ld = {0};
    fd_var_decl_t *serving_vars;
    unsigned i;
    int rc;

    if (pool == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* the tables are constant: once a process (startup, -t, tests) */
    if (!keys_checked) {
        if (fd_cycle_check_keys(err, errlen) != FD_OK) {
            fd_pool_destroy(pool);
            return NULL;
        }
        keys_checked = 1;
    }
    cy = fd_pcalloc(pool, sizeof(*cy));
    cy->pool = pool;
    cy->conf_file = fd_pstrdup(pool, file, strlen(file));
    cf.pool = pool;
    cf.temp = fd_pool_create(16384);
    cf.cycle = cy;
    /* a configuration built in memory has no directory of its own: its
     * relative paths (the default mime.types) are the installed fastd's */
    if (fd_conf_memory_name() && strcmp(file, fd_conf_memory_name()) == 0)
        cf.prefix = FD_PREFIX;
    else
        cf.prefix = make_prefix(pool, file);
    ld.cf = &cf;
    ld.cycle = cy;
    /* the $variables this file declares; the serving ones come back if
     * it fails */
    serving_vars = fd_var_declared_swap(NULL);

    if (fd_conf_read(&cf, cy->conf_file, &ld.e, &ld.n) != FD_OK)
        goto failed;
    /* modules loaded at run time first: their keys and handler names are
     * the rest of the file's (fd_dso.c) */
    for (i = 0; i < ld.n; i++)
        if (strcmp(ld.e[i].section, "main") == 0 &&
            strcmp(ld.e[i].key, "load_module") == 0) {
            const char *so;
            at(&ld, &ld.e[i]);
            if ((so = fd_conf_path(&cf, ld.e[i].value)) == NULL) {
                fd_conf_error(&cf, "out of memory");
                goto failed;
            }
            if (fd_dso_load(&cf, so) != FD_OK)
                goto failed;
        }
    if (fd_conf_defaults(&cf, fd_main_directives, &cy->main) != FD_OK ||
        fd_conf_defaults(&cf, fd_events_directives, &cy->events) != FD_OK ||
        fd_conf_defaults(&cf, fd_http_directives, &cy->http) != FD_OK ||
        fd_conf_defaults(&cf, fd_offload_directives, &cy->offload) != FD_OK)
        goto failed;

    /* the profile: -p wins over [main] profile = */
    if (profile == NULL)
        for (i = 0; i < ld.n; i++)
            if (strcmp(ld.e[i].section, "main") == 0 &&
                strcmp(ld.e[i].key, "profile") == 0)
                profile = ld.e[i].value;
    if (profile && *profile) {
        if (apply_profile(&ld, profile) != FD_OK)
            goto failed;
        cy->profile = fd_pstrdup(pool, profile, strlen(profile));
    }
    if (declare_sections(&ld) != FD_OK || apply_globals(&ld) != FD_OK ||
        apply_servers(&ld) != FD_OK)
        goto failed;

    /* from here on errors are about the file as a whole */
    cf.file = NULL;
    /* a file of [stream] sections alone is a whole L4 proxy */
    if (cy->servers == NULL && cy->listening == NULL) {
        fd_conf_error(&cf, "no [server] section (nor a [stream])");
        goto failed;
    }
    if (cy->nlistening > UINT16_MAX) {
        fd_conf_error(&cf, "more than %u listen addresses", UINT16_MAX);
        goto failed;
    }
    cy->ls_array = fd_palloc(pool, cy->nlistening * sizeof(*cy->ls_array));
    if (cy->ls_array == NULL) {
        fd_conf_error(&cf, "out of memory");
        goto failed;
    }
    {
        fd_listening_t *ls;
        fd_http_server_t *s;
        for (ls = cy->listening; ls; ls = ls->next)
            cy->ls_array[ls->index] = ls;
        for (s = cy->servers; s; s = s->next)
            if (s->max_conns_per_ip > 0)
                cy->conns_per_ip = 1;
    }
    if (cy->events.max_connections < 1)
        cy->events.max_connections = 1;
    if (cy->http.server_tokens && strcmp(cy->http.server_header, "fastd") == 0)
        cy->http.server_header = "fastd/" FASTD_VERSION;

    cy->nworkers = cy->main.workers ? cy->main.workers
                                    : sysconf(_SC_NPROCESSORS_ONLN);
    if (cy->nworkers < 1)
        cy->nworkers = 1;
    if (cy->offload.max_threads < cy->offload.threads)
        cy->offload.max_threads = cy->offload.threads;
    /* A root master without user = would serve requests as root: its
     * workers run as nobody, as nginx's do, and user = root keeps root on
     * purpose. Before init_cycle: what the master makes for the workers
     * (a [cache] path, the error log) goes to this user too. */
    if (cy->main.user == NULL && geteuid() == 0) {
        if (getpwnam(FD_DEFAULT_USER) == NULL) {
            cf.file = NULL;
            fd_conf_error(&cf, "no [main] user, and no user \"%s\" for "
                          "the workers of a root master: set user (user = "
                          "root keeps them root)", FD_DEFAULT_USER);
            goto failed;
        }
        cy->main.user = fd_pstrdup(pool, FD_DEFAULT_USER,
                                   sizeof(FD_DEFAULT_USER) - 1);
        if (cy->main.user == NULL) {
            fd_conf_error(&cf, "out of memory");
            goto failed;
        }
        cy->main.user_default = 1;
    }
    if (cy->main.user && geteuid() == 0) {
        const struct passwd *pw = getpwnam(cy->main.user);
        if (pw == NULL) {
            cf.file = NULL;
            fd_conf_error(&cf, "user \"%s\" does not exist", cy->main.user);
            goto failed;
        }
        cy->main.uid = pw->pw_uid;
        cy->main.gid = pw->pw_gid;
        cy->main.drop = pw->pw_uid != 0;
    }
    if (cy->main.drop)
        fd_http_each_loc(cy, check_root, cy);
    for (i = 0; i < fd_nmodules; i++) {
        const fd_module_t *m = fd_modules[i];
        cf.file = NULL;
        if (m->init_cycle && m->init_cycle(&cf, cy) != FD_OK)
            goto failed;
    }
    fd_dso_give_files(cy);
    cf.file = NULL;
    if (fd_dso_give_dirs(&cf, cy) != FD_OK)
        goto failed;
    /* certificates and keys: read now, so that -t and a reload that
     * would fail to serve them fail here (a module's, fastd_tls.h's
     * attach, in this load) */
    fd_dso_conf_enter(&cf);
    rc = fd_ssl_init_cycle(cy, cf.err, sizeof(cf.err));
    fd_dso_conf_enter(NULL);
    if (rc != FD_OK)
        goto failed;
#ifdef FD_HTTP3
    if (fd_quic_tls_init_cycle(cy, cf.err, sizeof(cf.err)) != FD_OK)
        goto failed;
#endif
    free(ld.e);
    if (cf.temp)
        fd_pool_destroy(cf.temp);
    /* the serving configuration's stay until this one serves
     * (fd_cycle_use) */
    cy->vars = fd_var_declared_swap(serving_vars);
    return cy;

failed:
    fd_var_declared_swap(serving_vars);
    snprintf(err, errlen, "%s", cf.err);
    free(ld.e);
    if (cf.temp)
        fd_pool_destroy(cf.temp);
    fd_ssl_free_cycle(cy);
#ifdef FD_HTTP3
    fd_quic_tls_free_cycle(cy);
#endif
    fd_pool_destroy(pool);
    return NULL;
}

void fd_cycle_use(fd_cycle_t *cy)
{
    fd_var_declared_swap(cy->vars);
}

int fd_cycle_test_profiles(const char *file, const char *skip, char *err,
                           size_t errlen)
{
    fd_pool_t *pool = fd_pool_create(4096);
    fd_conf_t cf = {0};
    fd_conf_entry_t *e = NULL;
    unsigned n = 0, i, j;
    const char *name, *other;
    int rc = FD_OK;

    if (pool == NULL) {
        snprintf(err, errlen, "out of memory");
        return FD_ERROR;
    }
    cf.pool = pool;
    if (fd_conf_read(&cf, file, &e, &n) != FD_OK) {
        snprintf(err, errlen, "%s", cf.err);
        rc = FD_ERROR;
        goto done;
    }
    for (i = 0; i < n && rc == FD_OK; i++) {
        fd_cycle_t *cy;

        /* each profile once: at its first header */
        if (e[i].key[0] != '\0' || !is_named(e[i].section, "profile", &name))
            continue;
        if (skip && strcmp(name, skip) == 0)
            continue;
        for (j = 0; j < i; j++)
            if (e[j].key[0] == '\0' &&
                is_named(e[j].section, "profile", &other) &&
                strcmp(name, other) == 0)
                break;
        if (j < i)
            continue;
        cy = fd_cycle_load(file, name, err, errlen);
        if (cy == NULL) {
            size_t l = strlen(err);
            snprintf(err + l, errlen > l ? errlen - l : 0,
                     " (with [profile %s])", name);
            rc = FD_ERROR;
        }
        fd_cycle_free(cy);
    }
done:
    free(e);
    fd_pool_destroy(pool);
    return rc;
}

int fd_cycle_check_keys(char *err, size_t errlen)
{
    unsigned n = 3 + fd_nmodules, i;
    fd_conf_level_t *lv = calloc(n, sizeof(*lv));
    const fd_directive_t **tabs = calloc(n * 3, sizeof(*tabs));
    char (*names)[64] = calloc(n, sizeof(*names));
    int rc;

    if (lv == NULL || tabs == NULL || names == NULL) {
        snprintf(err, errlen, "out of memory");
        rc = FD_ERROR;
        goto done;
    }
    /* the levels that inherit from each other: [http] keys are defaults
     * of [server] and [location] keys, so one name there must be one
     * declaration; [main], [events], [offload] and module sections are
     * their own (a profile names them section.key) */
    tabs[0] = fd_http_directives;
    tabs[3] = fd_http_server_directives;
    tabs[4] = fd_ssl_server_directives;
    tabs[6] = fd_http_loc_directives;
    lv[0].level = "[http]";
    lv[1].level = "[server]";
    lv[2].level = "[location]";
    for (i = 0; i < fd_nmodules; i++) {
        snprintf(names[3 + i], sizeof(names[0]), "[location] (module %s)",
                 fd_modules[i]->name);
        lv[3 + i].level = names[3 + i];
        tabs[3 * (3 + i)] = fd_modules[i]->directives;
    }
    /* each level's tables, NULL-ended: three slots a level */
    for (i = 0; i < n; i++) {
        static const fd_directive_t none[] = {FD_CONF_END};
        if (tabs[3 * i] == NULL)
            tabs[3 * i] = none;
        lv[i].tables = &tabs[3 * i];
    }
    rc = fd_conf_check_levels(lv, n, err, errlen);
done:
    free(lv);
    free(tabs);
    free(names);
    return rc;
}

void fd_cycle_free(fd_cycle_t *cycle)
{
    if (cycle) {
        fd_ssl_free_cycle(cycle);
#ifdef FD_HTTP3
        fd_quic_tls_free_cycle(cycle);
#endif
        fd_pool_destroy(cycle->pool);
    }
}

void *fd_cycle_section(fd_cycle_t *cycle, const char *type, const char *name)
{
    fd_conf_section_t *s;

    for (s = cycle->sections; s; s = s->next)
        if (strcmp(s->module->section, type) == 0 &&
            strcmp(s->name, name) == 0)
            return s->conf;
    return NULL;
}

int fd_cycle_section_name(fd_conf_t *cf, const char *type, const char *name,
                          size_t max)
{
    size_t i, n = strlen(name);

    if (n == 0 || n >= max || strcmp(name, "off") == 0)
        return fd_conf_error(cf, "[%s %s]: a name of 1 to %zu characters "
                             "(not \"off\") is needed", type, name, max - 1);
    for (i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') ||
              (name[i] >= 'A' && name[i] <= 'Z') ||
              (name[i] >= '0' && name[i] <= '9') || name[i] == '_' ||
              name[i] == '-' || name[i] == '.'))
            return fd_conf_error(cf, "[%s %s]: names take letters, digits, "
                                 "'_', '-' and '.'", type, name);
    return FD_OK;
}

int fd_cycle_number_sections(fd_conf_t *cf, fd_cycle_t *cycle,
                             const fd_module_t *m, unsigned max,
                             size_t index_offset)
{
    fd_conf_section_t *s;
    unsigned n = 0;

    for (s = cycle->sections; s; s = s->next) {
        if (s->module != m)
            continue;
        if (n == max) {
            cf->file = s->file;
            cf->line = s->line;
            return fd_conf_error(cf, "more than %u [%s] sections", max,
                                 m->section);
        }
        *(unsigned *)((char *)s->conf + index_offset) = n++;
    }
    return FD_OK;
}

static const char *type_name(const fd_directive_t *d)
{
    static const char *names[] = {"flag", "integer", "size", "duration",
                                  "enum", "string", "list", "custom"};
    return names[d->type];
}

static void dump_table(FILE *fp, const char *title, const fd_directive_t *d)
{
    if (d == NULL || d->name == NULL)
        return;
    fprintf(fp, "\n#### %s\n\n| key | type | default | meaning |\n"
                "|---|---|---|---|\n", title);
    for (; d->name; d++) {
        const char *c;
        if (d->renamed)
            continue; /* not a key: README.md says what it became */
        fprintf(fp, "| `%s` | %s | %s%s%s | ", d->name, type_name(d),
                d->def ? "`" : "", d->def ? d->def : "-", d->def ? "`" : "");
        for (c = d->doc ? d->doc : ""; *c; c++)
            fputs(*c == '|' ? "\\|" : (char[2]){*c, 0}, fp);
        fputs(" |\n", fp);
    }
}

/* fastd -k: every key with its type, default and documentation, as
 * Markdown; README.md's reference is this output. */
void fd_conf_dump_keys(FILE *fp)
{
    unsigned i;
    char title[128];

    dump_table(fp, "[main]", fd_main_directives);
    dump_table(fp, "[events]", fd_events_directives);
    dump_table(fp, "[http]", fd_http_directives);
    dump_table(fp, "[server]", fd_http_server_directives);
    dump_table(fp, "[server] TLS (on listen ... ssl addresses)",
               fd_ssl_server_directives);
    dump_table(fp, "[location] (also in [http] and [server] as defaults)",
               fd_http_loc_directives);
    dump_table(fp, "[offload]", fd_offload_directives);
    for (i = 0; i < fd_nmodules; i++) {
        const fd_module_t *m = fd_modules[i];
        snprintf(title, sizeof(title), "module %s: location keys", m->name);
        dump_table(fp, title, m->directives);
        if (m->section) {
            snprintf(title, sizeof(title),
                     m->section_unnamed ? "module %s: [%s]"
                                        : "module %s: [%s NAME]",
                     m->name, m->section);
            dump_table(fp, title, m->section_directives);
        }
        if (m->also) {
            snprintf(title, sizeof(title), "module %s: [%s NAME]", m->name,
                     m->also->section);
            dump_table(fp, title, m->also->section_directives);
        }
    }
}

const fd_module_t *fd_module_find(const char *name)
{
    unsigned i;

    for (i = 0; i < fd_nmodules; i++)
        if (strcmp(fd_modules[i]->name, name) == 0)
            return fd_modules[i];
    return NULL;
}
