/*
 * proxy_cache, a request's part: the key, the lookup and what follows
 * from it (HIT, wait on another's fill, go upstream), serving an entry,
 * and storing a response as it streams to the client. The shared index
 * and the [cache] section are in fd_proxy_cache_index.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <ctype.h>
#include <stdlib.h>

#include "fd_proxy_cache_int.h"

/* --- freshness (unit tested) ------------------------------------------- */

/* A Vary value's next field name from *i: 0 at the end. */
static int vary_name(fd_str_t v, size_t *i, fd_str_t *name)
{
    size_t s;

    while (*i < v.len && (v.data[*i] == ' ' || v.data[*i] == '\t' ||
                          v.data[*i] == ','))
        (*i)++;
    s = *i;
    while (*i < v.len && v.data[*i] != ',' && v.data[*i] != ' ' &&
           v.data[*i] != '\t')
        (*i)++;
    *name = (fd_str_t){*i - s, v.data + s};
    return name->len > 0;
}

/* "Vary: *": it varies on what a cache cannot see */
static int vary_any(fd_str_t v)
{
    fd_str_t n;
    size_t i = 0;

    while (vary_name(v, &i, &n))
        if (n.len == 1 && n.data[0] == '*')
            return 1;
    return 0;
}

/* v's token "name" or "name=N" (N into *arg, -1 without): found */
static int cc_token(fd_str_t v, const char *name, int64_t *arg)
{
    size_t nl = strlen(name), i = 0;

    while (i < v.len) {
        size_t s, e;
        while (i < v.len && (v.data[i] == ' ' || v.data[i] == '\t' ||
                             v.data[i] == ','))
            i++;
        s = i;
        while (i < v.len && v.data[i] != ',' && v.data[i] != '=' &&
               v.data[i] != ' ' && v.data[i] != '\t')
            i++;
        e = i;
        int match = e - s == nl &&
                    (strncasecmp(v.data + s, name, nl) == 0);
        int64_t n = -1;
        if (i < v.len && v.data[i] == '=') {
            i++;
            if (i < v.len && v.data[i] == '"')
                i++;
            if (i < v.len && v.data[i] >= '0' && v.data[i] <= '9') {
                n = 0;
                while (i < v.len && v.data[i] >= '0' && v.data[i] <= '9') {
                    if (n < INT64_MAX / 20)
                        n = n * 10 + (v.data[i] - '0');
                    i++;
                }
            }
            while (i < v.len && v.data[i] != ',')
                i++;
        }
        if (match) {
            if (arg)
                *arg = n;
            return 1;
        }
    }
    return 0;
}

static int64_t parse_sec(fd_str_t v)
{
    int64_t n = 0;
    size_t i = 0;

    while (i < v.len && (v.data[i] == ' ' || v.data[i] == '\t'))
        i++;
    if (i == v.len || v.data[i] < '0' || v.data[i] > '9')
        return -1;
    for (; i < v.len && v.data[i] >= '0' && v.data[i] <= '9'; i++)
        if (n < INT64_MAX / 20)
            n = n * 10 + (v.data[i] - '0');
    return n;
}

/*
 * How long the response may be kept (seconds, > 0), or 0: not stored.
 * X-Accel-Expires first (seconds, or @ and a unix time; 0: not
 * cached; it overrides what Cache-Control says), then Cache-Control
 * (no-store, no-cache, private: not stored; s-maxage, then max-age),
 * then Expires, then proxy_cache_valid by status.
 * Set-Cookie and "Vary: *" are never stored (another Vary keeps a variant
 * per value set: see variants below); with auth (the
 * request had Authorization) only what says public or s-maxage is.
 * ignore (proxy_ignore_headers) drops fields from the decision.
 */
static int64_t valid_for(const fd_api_field_t *f, unsigned nf, int status,
                         const fd_proxy_cache_valid_t *valid, unsigned nvalid,
                         time_t now, int auth, unsigned ignore)
{
    int64_t xae = -2, age = -1, exp = -1, n;
    int shared = 0, refused = 0;
    unsigned i;

    if (status < 200 || status == 204 || status == 206 || status == 304)
        return 0;
    for (i = 0; i < nf; i++) {
        fd_str_t nm = f[i].name, v = f[i].value;
        if ((lit_eq(nm, "set-cookie") &&
             !(ignore & FD_PROXY_IGNORE_COOKIE)) ||
            (lit_eq(nm, "vary") && vary_any(v) &&
             !(ignore & FD_PROXY_IGNORE_VARY)))
            return 0;
        if (lit_eq(nm, "x-accel-expires") &&
            !(ignore & FD_PROXY_IGNORE_XAE)) {
            if (v.len && v.data[0] == '@') {
                n = parse_sec((fd_str_t){v.len - 1, v.data + 1});
                xae = n > now ? n - now : 0;
            } else {
                xae = parse_sec(v);
            }
            if (xae < 0)
                xae = -2; /* unreadable: as if absent */
        } else if (lit_eq(nm, "cache-control") &&
                   !(ignore & FD_PROXY_IGNORE_CC)) {
            if (cc_token(v, "no-store", NULL) ||
                cc_token(v, "no-cache", NULL) ||
                cc_token(v, "private", NULL))
                refused = 1;
            if (cc_token(v, "public", NULL))
                shared = 1;
            if (cc_token(v, "s-maxage", &n) && n >= 0) {
                age = n;
                shared = 1;
            } else if (age < 0 && cc_token(v, "max-age", &n) && n >= 0) {
                age = n;
            }
        } else if (lit_eq(nm, "expires") &&
                   !(ignore & FD_PROXY_IGNORE_EXPIRES)) {
            time_t t = (time_t)fd_api_http_time(v.data, v.len);
            exp = t > now ? t - now : 0; /* a bad date: already expired */
        }
    }
    if (auth && !shared)
        return 0;
    if (xae != -2) /* it overrides Cache-Control and Expires, as nginx */
        return xae;
    if (refused)
        return 0;
    if (age >= 0)
        return age;
    if (exp >= 0)
        return exp;
    for (i = 0; i < nvalid; i++)
        if (valid[i].status == status || valid[i].status == 0)
            return valid[i].sec;
    return 0;
}

/* As valid_for(), at most FD_PROXY_CACHE_SEC_MAX (the loader's bound
 * too): a larger max-age made the deadline in ms wrap, and the entry was
 * born expired. */
int64_t fd_proxy_cache_valid_for(const fd_api_field_t *f, unsigned nf,
                                 int status,
                                 const fd_proxy_cache_valid_t *valid,
                                 unsigned nvalid, time_t now, int auth,
                                 unsigned ignore)
{
    int64_t sec = valid_for(f, nf, status, valid, nvalid, now, auth, ignore);

    return sec < FD_PROXY_CACHE_SEC_MAX ? sec : FD_PROXY_CACHE_SEC_MAX;
}

/* a value to cut in words, in the configuration's memory */
static char *conf_copy(const char *s)
{
    return fd_api_conf_strndup(s, strlen(s));
}

/* a status code: digits, at most 599; -1 otherwise */
static int parse_code(const char *s)
{
    char *end;
    long v;

    if (*s < '0' || *s > '9')
        return -1;
    v = strtol(s, &end, 10);
    return *end || v > 599 ? -1 : (int)v;
}

/* proxy_cache_valid = [CODE...|any] TIME */
static int parse_valid(proxy_loc_conf_t *lc, const char *v)
{
    char *s = conf_copy(v), *save, *tok, *last = NULL;
    int codes[32], nc = 0;
    int64_t sec;
    fd_proxy_cache_valid_t *a;

    if (s == NULL)
        return FD_ERROR;
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if (last) {
            int code = strcmp(last, "any") == 0 ? 0 : parse_code(last);
            if (code != 0 && code < 200) {
                fd_api_conf_error("\"proxy_cache_valid\": bad code \"%s\" "
                                  "(200 to 599 or any)", last);
                return FD_ERROR;
            }
            if (nc == (int)NELEMS(codes)) {
                fd_api_conf_error("\"proxy_cache_valid\": too many codes");
                return FD_ERROR;
            }
            codes[nc++] = code;
        }
        last = tok;
    }
    if (last == NULL || (sec = fd_api_parse_msec(last)) < 0) {
        fd_api_conf_error("\"proxy_cache_valid\" must be [CODE...] TIME, "
                          "not \"%s\"", v);
        return FD_ERROR;
    }
    if (nc == 0) {
        codes[nc++] = 200;
        codes[nc++] = 301;
        codes[nc++] = 302;
    }
    a = fd_api_conf_alloc((lc->nvalid + (unsigned)nc) * sizeof(*a));
    if (a == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    if (lc->nvalid)
        memcpy(a, lc->valid, lc->nvalid * sizeof(*a));
    for (int i = 0; i < nc; i++)
        a[lc->nvalid + (unsigned)i] =
            (fd_proxy_cache_valid_t){codes[i], sec / 1000};
    lc->valid = a;
    lc->nvalid += (unsigned)nc;
    return FD_OK;
}

/* proxy_cache_bypass, proxy_no_cache = $variables: compiled */
static int add_script(const fd_api_script_t ***list, unsigned *n,
                      const char *v, const char *what)
{
    const fd_api_script_t **l = fd_api_conf_grow(*list, *n, sizeof(*l));

    if (l == NULL)
        return FD_ERROR;
    if ((l[*n] = fd_api_script_compile(v, strlen(v), 0, what)) == NULL)
        return FD_ERROR;
    *list = l;
    (*n)++;
    return FD_OK;
}

/* a word's flag in t[0 .. n) (caseless: a field's name), or -1 */
typedef struct {
    const char *name;
    unsigned flag;
} word_flag_t;

static int64_t word_flag(const word_flag_t *t, size_t n, const char *w,
                         int caseless)
{
    for (size_t k = 0; k < n; k++)
        if ((caseless ? strcasecmp(w, t[k].name) : strcmp(w, t[k].name)) ==
            0)
            return t[k].flag;
    return -1;
}

/* proxy_ignore_headers = NAME... */
static int parse_ignore(proxy_loc_conf_t *lc, const char *value)
{
    static const word_flag_t names[] = {
        {"X-Accel-Expires", FD_PROXY_IGNORE_XAE},
        {"Expires", FD_PROXY_IGNORE_EXPIRES},
        {"Cache-Control", FD_PROXY_IGNORE_CC},
        {"Set-Cookie", FD_PROXY_IGNORE_COOKIE},
        {"Vary", FD_PROXY_IGNORE_VARY}};
    char *v = conf_copy(value), *save, *tok;
    int64_t f;

    if (v == NULL)
        return FD_ERROR;
    for (tok = strtok_r(v, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        if ((f = word_flag(names, NELEMS(names), tok, 1)) < 0) {
            fd_api_conf_error("\"proxy_ignore_headers\": \"%s\" is not "
                              "X-Accel-Expires, Expires, Cache-Control, "
                              "Set-Cookie or Vary", tok);
            return FD_ERROR;
        }
        lc->cache_ignore |= (unsigned)f;
    }
    return FD_OK;
}

int fd_proxy_cache_set(proxy_loc_conf_t *lc, const char *key,
                       const char *value)
{
    if (strcmp(key, "proxy_cache_valid") == 0)
        return parse_valid(lc, value);
    if (strcmp(key, "proxy_cache_bypass") == 0)
        return add_script(&lc->bypass, &lc->nbypass, value,
                          "proxy_cache_bypass");
    if (strcmp(key, "proxy_no_cache") == 0)
        return add_script(&lc->no_cache, &lc->nno_cache, value,
                          "proxy_no_cache");
    if (strcmp(key, "proxy_ignore_headers") == 0)
        return parse_ignore(lc, value);
    return FD_DECLINED;
}

int fd_proxy_cache_init_conf(proxy_loc_conf_t *lc)
{
    /* proxy_cache_key always has a value: its default is proxy_conf's
     * (why $http_host: there) */
    const char *key = lc->cache_key_src;
    char *s, *save, *tok;

    if (lc->cache_name == NULL || strcmp(lc->cache_name, "off") == 0)
        return FD_OK;
    fd_api_conf_at_key(lc, "proxy_cache");
    lc->cache = fd_api_section("cache", lc->cache_name);
    if (lc->cache == NULL) {
        fd_api_conf_error("unknown cache \"%s\" (no [cache %s] section)",
                          lc->cache_name, lc->cache_name);
        return FD_ERROR;
    }
    fd_api_conf_at_key(lc, "proxy_cache_key");
    if ((lc->cache_key = fd_api_script_compile(key, strlen(key), 0,
                                               "proxy_cache_key")) == NULL)
        return FD_ERROR;
    fd_api_conf_at_key(lc, "proxy_cache_lock_timeout");
    if (lc->cache_lock_timeout < 1 || lc->cache_lock_timeout > 3600000) {
        fd_api_conf_error("\"proxy_cache_lock_timeout\" must be 1ms to 1h");
        return FD_ERROR;
    }
    lc->cache_methods = 0;
    fd_api_conf_at_key(lc, "proxy_cache_methods");
    if ((s = conf_copy(lc->cache_methods_src)) == NULL)
        return FD_ERROR;
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        static const word_flag_t m[] = {
            {"GET", FD_API_GET}, {"HEAD", FD_API_HEAD}, {"POST", FD_API_POST}};
        int64_t f = word_flag(m, NELEMS(m), tok, 0);
        if (f < 0) {
            fd_api_conf_error("\"proxy_cache_methods\": \"%s\" is not GET, "
                              "HEAD or POST", tok);
            return FD_ERROR;
        }
        lc->cache_methods |= (unsigned)f;
    }
    /* as nginx: GET and HEAD are always cached */
    lc->cache_methods |= FD_API_GET | FD_API_HEAD;
    lc->use_stale = 0;
    fd_api_conf_at_key(lc, "proxy_cache_use_stale");
    if ((s = conf_copy(lc->use_stale_src)) == NULL)
        return FD_ERROR;
    for (tok = strtok_r(s, " \t", &save); tok;
         tok = strtok_r(NULL, " \t", &save)) {
        static const word_flag_t st[] = {
            {"off", 0},
            {"error", FD_PROXY_STALE_ERROR},
            {"timeout", FD_PROXY_STALE_TIMEOUT},
            {"invalid_header", FD_PROXY_STALE_INVALID},
            {"updating", FD_PROXY_STALE_UPDATING},
            {"http_500", FD_PROXY_STALE_500},
            {"http_502", FD_PROXY_STALE_502},
            {"http_503", FD_PROXY_STALE_503},
            {"http_504", FD_PROXY_STALE_504},
            {"http_403", FD_PROXY_STALE_403},
            {"http_404", FD_PROXY_STALE_404},
            {"http_429", FD_PROXY_STALE_429}};
        int64_t f = word_flag(st, NELEMS(st), tok, 0);
        if (f < 0) {
            fd_api_conf_error("\"proxy_cache_use_stale\": \"%s\" is not "
                              "off, error, timeout, invalid_header, "
                              "updating or http_500, 502, 503, 504, 403, "
                              "404, 429", tok);
            return FD_ERROR;
        }
        if (f == 0 && (lc->use_stale || strtok_r(NULL, " \t", &save))) {
            fd_api_conf_error("\"proxy_cache_use_stale\": off stands "
                              "alone");
            return FD_ERROR;
        }
        lc->use_stale |= (unsigned)f;
    }
    return FD_OK;
}

/* --- a request: lookup and HIT ------------------------------------------- */

/* any value non-empty and not "0" */
static int any_true(fd_request_t *r, const fd_api_script_t *const *s,
                    unsigned n)
{
    char tmp[FD_API_VAR_TMP];
    fd_str_t v;

    for (unsigned i = 0; i < n; i++)
        if (fd_req_script_eval(r, s[i], NULL, tmp, &v) == FD_OK &&
            v.len && !(v.len == 1 && v.data[0] == '0'))
            return 1;
    return 0;
}

/*
 * Variants. A response with Vary is stored with its key followed by a
 * NUL and its variant: "name:value\n" for each field Vary names (the
 * name lowercased, the request's values of it joined by commas, empty
 * when it sent none). The first one stored is found under the key's MD5
 * (the primary entry); a request whose variant differs looks under the
 * MD5 of key, NUL, its own variant (a secondary entry, whose file holds
 * that same key), and the response it gets is stored there. So one
 * entry exists per value set, each found by two lookups at most.
 */
static void variant_line(const fd_api_http_req_t *in, fd_str_t name,
                         fd_api_sbuf_t *sb)
{
    int first = 1;

    for (size_t k = 0; k < name.len; k++)
        fd_api_sbuf_addc(sb, (char)tolower((unsigned char)name.data[k]));
    fd_api_sbuf_addc(sb, ':');
    for (unsigned i = 0; i < in->nfields; i++)
        if (in->fields[i].name.len == name.len &&
            strncasecmp(in->fields[i].name.data, name.data, name.len) == 0) {
            if (!first)
                fd_api_sbuf_addc(sb, ',');
            fd_api_sbuf_add(sb, in->fields[i].value.data,
                            in->fields[i].value.len);
            first = 0;
        }
    fd_api_sbuf_addc(sb, '\n');
}

/* key NUL variant, the variant of r for the names of the Vary fields in
 * f (from_vary), or of an entry's variant v: its NULL string on failure */
static fd_str_t variant_key(fd_proxy_cache_req_t *cr, const fd_api_field_t *f,
                            unsigned nf, fd_str_t v)
{
    fd_api_sbuf_t *sb = fd_req_sbuf(cr->r, cr->key.len + 128);
    fd_str_t n;
    size_t i;

    if (sb == NULL)
        return ((fd_str_t){0, NULL});
    fd_api_sbuf_add(sb, cr->key.data, cr->key.len);
    fd_api_sbuf_addc(sb, '\0');
    if (f) {
        for (unsigned k = 0; k < nf; k++)
            if (lit_eq(f[k].name, "vary"))
                for (i = 0; vary_name(f[k].value, &i, &n);)
                    variant_line(&cr->px->in, n, sb);
    } else {
        for (i = 0; i < v.len;) {
            const char *colon = memchr(v.data + i, ':', v.len - i);
            const char *nl = colon ? memchr(colon, '\n',
                                            v.len - (size_t)(colon - v.data))
                                   : NULL;
            if (nl == NULL)
                return ((fd_str_t){0, NULL});
            variant_line(&cr->px->in, (fd_str_t){(size_t)(colon - (v.data + i)),
                                       v.data + i}, sb);
            i = (size_t)(nl - v.data) + 1;
        }
    }
    return fd_api_sbuf_failed(sb) ? ((fd_str_t){0, NULL}) : fd_api_sbuf_str(sb);
}

/* The entry's key is this request's: the key itself, the vkey of a
 * secondary lookup, or, on the primary, the key and some variant. */
static int entry_key_ok(const fd_proxy_cache_req_t *cr, const char *k,
                        size_t n)
{
    if (cr->secondary)
        return n == cr->vkey.len && memcmp(k, cr->vkey.data, n) == 0;
    return n >= cr->key.len && memcmp(k, cr->key.data, cr->key.len) == 0 &&
           (n == cr->key.len || k[cr->key.len] == '\0');
}

/*
 * The worker's open entries: a file it served, open, with its header read,
 * kept while the index gives the entry the same generation (a new file
 * is a new one) and the file still has a name (checked with fstat() at
 * most once a second: only a hand that removes files under the cache
 * unlinks one the index still has, and what the descriptor reads is
 * still that whole entry). A request sending from one holds a reference;
 * the slot holds one.
 */
#define OPEN_SLOTS 1024

typedef struct {
    uint8_t md5[16];
    const head_t *head;       /* which cache (the same across reloads) */
    uint64_t gen;
    int fd;
    unsigned refs;
    time_t checked;           /* when fstat() last saw it linked */
    file_head_t fh;
    char *buf;                /* the key, then the fields */
} open_entry_t;

static open_entry_t *open_slots[OPEN_SLOTS];

static void open_release(void *data)
{
    open_entry_t *oe = data;

    if (--oe->refs == 0) {
        close(oe->fd);
        free(oe->buf);
        free(oe);
    }
}

/* The entry's file, open and read: NULL (forgotten) when it is missing or
 * not whole. */
static open_entry_t *open_entry(fd_proxy_cache_req_t *cr, uint64_t gen)
{
    fd_proxy_cache_t *c = cr->cache;
    open_entry_t *oe;
    char p[PATH_MAX];
    struct stat st;
    size_t dl, n;
    int fd;

    if (fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            cr->md5, &dl) == 0)
        return NULL;
    fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        if (errno != ENOENT)
            fd_api_log(FD_API_LOG_ERR, errno, "open(\"%s\") failed", p);
        fd_proxy_cache_index_forget(c, cr->md5, gen);
        return NULL;
    }
    if ((oe = calloc(1, sizeof(*oe))) == NULL) {
        close(fd);
        return NULL;
    }
    oe->fd = fd;
    oe->refs = 1;
    if (pread(fd, &oe->fh, sizeof(oe->fh), 0) != (ssize_t)sizeof(oe->fh) ||
        oe->fh.magic != FILE_MAGIC || fstat(fd, &st) == -1 ||
        (uint64_t)st.st_size != sizeof(oe->fh) + oe->fh.key_len +
                                    oe->fh.fields_len + oe->fh.body_len)
        goto bad;
    n = (size_t)oe->fh.key_len + oe->fh.fields_len;
    if ((oe->buf = malloc(n + 1)) == NULL) {
        open_release(oe); /* out of memory: the file is whole, it stays */
        return NULL;
    }
    if (pread(fd, oe->buf, n, sizeof(oe->fh)) != (ssize_t)n)
        goto bad;
    memcpy(oe->md5, cr->md5, 16);
    oe->head = c->head;
    oe->gen = gen;
    return oe;

bad:
    fd_api_log(FD_API_LOG_WARN, 0, "cache \"%s\": \"%s\" is not a whole "
               "entry: removed", c->name, p);
    fd_proxy_cache_index_forget(c, cr->md5, gen);
    unlink(p);
    open_release(oe);
    return NULL;
}

/* The worker ends: its open entries are closed (a request that still
 * sends from one keeps it until it ends). */
void fd_proxy_cache_open_drop(void)
{
    for (unsigned i = 0; i < OPEN_SLOTS; i++)
        if (open_slots[i]) {
            open_release(open_slots[i]);
            open_slots[i] = NULL;
        }
}

/* The entry (generation gen), open and read in this worker's slot; NULL
 * when the file is missing or not the entry (then the index forgets it). */
static open_entry_t *entry_get(fd_proxy_cache_req_t *cr, uint64_t gen)
{
    fd_proxy_cache_t *c = cr->cache;
    open_entry_t **slot, *oe;
    struct stat st;
    uint32_t h;

    memcpy(&h, cr->md5 + 8, 4);
    slot = &open_slots[h % OPEN_SLOTS];
    oe = *slot;
    if (oe && (oe->gen != gen || oe->head != c->head ||
               memcmp(oe->md5, cr->md5, 16) != 0)) {
        *slot = NULL;
        open_release(oe);
        oe = NULL;
    }
    if (oe && oe->checked != fd_api_unix_sec() &&
        (fstat(oe->fd, &st) == -1 || st.st_nlink == 0)) {
        /* unlinked under us (the directory removed): a miss */
        *slot = NULL;
        open_release(oe);
        fd_proxy_cache_index_forget(c, cr->md5, gen);
        return NULL;
    }
    if (oe == NULL) {
        if ((oe = open_entry(cr, gen)) == NULL)
            return NULL;
        *slot = oe;
    }
    oe->checked = fd_api_unix_sec();
    if (!entry_key_ok(cr, oe->buf, oe->fh.key_len))
        return NULL; /* an MD5 collision: served from upstream */
    return oe;
}

/* The open entry answers this request: it does not vary, or varies as
 * the request does. Else *vkey (when wanted) is the request's own. */
static int variant_ok(fd_proxy_cache_req_t *cr, const open_entry_t *oe,
                      fd_str_t *vkey)
{
    fd_str_t stored = {oe->fh.key_len, oe->buf}, mine;

    if (stored.len == cr->key.len || cr->secondary)
        return 1; /* a secondary's key is the variant: checked above */
    mine = variant_key(cr, NULL, 0,
                       (fd_str_t){stored.len - cr->key.len - 1,
                                  stored.data + cr->key.len + 1});
    if (mine.data && mine.len == stored.len &&
        memcmp(mine.data, stored.data, stored.len) == 0)
        return 1;
    if (vkey)
        *vkey = mine;
    return 0;
}

/* Look for the request's own variant under its own MD5 from now on. */
static int go_secondary(fd_proxy_cache_req_t *cr, fd_str_t vkey)
{
    if (vkey.data == NULL)
        return FD_ERROR;
    if (cr->filler) {
        fd_proxy_cache_index_unfill(cr->cache, cr->md5);
        cr->filler = 0;
    }
    cr->vkey = vkey;
    cr->secondary = 1;
    cr->stale_gen = 0;
    fd_proxy_cache_hash(vkey.data, vkey.len, cr->md5);
    return FD_OK;
}

/* The next "Name: value" line of an entry's fields from *q: 0 at the end
 * (or on a malformed line). */
static int entry_field(char **q, char *end, fd_str_t *name, fd_str_t *value)
{
    char *colon, *eol;

    if (*q >= end || (colon = memchr(*q, ':', (size_t)(end - *q))) == NULL ||
        (eol = memchr(colon, '\r', (size_t)(end - colon))) == NULL ||
        eol + 1 >= end || eol[1] != '\n' || eol < colon + 2)
        return 0;
    *name = (fd_str_t){(size_t)(colon - *q), *q};
    *value = (fd_str_t){(size_t)(eol - colon - 2), colon + 2};
    *q = eol + 2;
    return 1;
}

/* "Name: value\r\n" */
static void add_field(fd_api_sbuf_t *sb, fd_str_t name, fd_str_t value)
{
    fd_api_sbuf_add(sb, name.data, name.len);
    fd_api_sbuf_add(sb, ": ", 2);
    fd_api_sbuf_add(sb, value.data, value.len);
    fd_api_sbuf_add(sb, "\r\n", 2);
}

/*
 * Serve the entry (generation gen) into r, on the API's calls for a
 * stored response: FD_OK, or FD_DECLINED when the file is missing or not
 * the entry (then the index forgets it; the caller undoes what was set,
 * fd_resp_reset).
 */
static int serve(fd_proxy_cache_req_t *cr, uint64_t gen)
{
    fd_request_t *r = cr->r;
    open_entry_t *oe = entry_get(cr, gen);
    char *q, *end;
    fd_str_t name, value, etag = ((fd_str_t){0, NULL});
    int64_t last_modified = -1;
    off_t body_off;

    if (oe == NULL || !variant_ok(cr, oe, NULL))
        return FD_DECLINED;
    if (fd_req_cleanup(r, open_release, oe) != FD_OK)
        return FD_DECLINED;
    oe->refs++;
    body_off = (off_t)(sizeof(oe->fh) + oe->fh.key_len + oe->fh.fields_len);
    fd_resp_status(r, (int)oe->fh.status);
    for (q = oe->buf + oe->fh.key_len, end = q + oe->fh.fields_len;
         q < end;) {
        if (!entry_field(&q, end, &name, &value))
            return FD_DECLINED;
        if (lit_eq(name, "content-type")) {
            fd_resp_content_type_static(r, value);
        } else if (lit_eq(name, "server")) {
            /* stored by proxy_pass_header = Server: it replaces ours */
            fd_resp_own_server(r);
            if (fd_resp_header_static(r, name, value) != FD_OK)
                return FD_DECLINED;
        } else if (oe->fh.status == 200 && lit_eq(name, "etag")) {
            etag = value; /* fastd writes it, 304 too */
        } else if (oe->fh.status == 200 &&
                   lit_eq(name, "last-modified")) {
            last_modified = fd_api_http_time(value.data, value.len);
            if (last_modified == -1 &&
                fd_resp_header_static(r, name, value) != FD_OK)
                return FD_DECLINED;
        } else if (oe->fh.status == 200 &&
                   lit_eq(name, "accept-ranges")) {
            continue; /* fd_resp_fd_send() says bytes */
        } else if (fd_resp_header_static(r, name, value) != FD_OK) {
            return FD_DECLINED;
        }
    }
    if (oe->fh.status == 200) {
        /* the client's conditionals and ranges, as for a static file */
        int rc;
        fd_resp_validators(r, etag, last_modified);
        rc = fd_resp_fd_send(r, oe->fd, body_off, (int64_t)oe->fh.body_len,
                             MAX_RANGES);
        if (rc == 412) {
            /* If-Match or If-Unmodified-Since failed against the entry:
             * the answer is the cache's, none of the entry's fields */
            fd_resp_reset(r);
            rc = fd_resp_error(r, 412);
        }
        return rc == FD_OK ? FD_OK : FD_DECLINED;
    }
    return fd_resp_fd_body(r, oe->fd, body_off, (int64_t)oe->fh.body_len) ==
                   FD_OK
               ? FD_OK
               : FD_DECLINED;
}

static void wait_cleanup(void *data)
{
    fd_proxy_cache_req_t *cr = data;

    fd_api_timer_cancel(cr->timer);
    cr->timer = NULL;
}

/* The client left while the request waited on another's fill: the
 * upstream request it never started ends with it. */
static void wait_abort(fd_request_t *r)
{
    proxy_req_t *px = fd_proxy_req(r);

    if (px == NULL)
        return;
    if (px->cr)
        wait_cleanup(px->cr);
    fd_api_upstream_cancel(px->au);
}

static int decide(fd_proxy_cache_req_t *cr, uint64_t lock_ms);
static void store_warn(fd_proxy_cache_req_t *cr, int err, const char *what);
static void store_abandon(fd_proxy_cache_req_t *cr);

/*
 * An expired entry (generation gen) may still answer: for
 * proxy_cache_use_stale, and, with proxy_cache_revalidate, its ETag and
 * Last-Modified go upstream as validators. Copied: the open entry may be
 * replaced before the response comes.
 */
static void stale_keep(fd_proxy_cache_req_t *cr, uint64_t gen)
{
    proxy_loc_conf_t *lc = cr->px->lc;
    open_entry_t *oe;
    fd_str_t name, value;
    char *q, *end;

    if (lc->use_stale == 0 && !lc->cache_revalidate)
        return;
    cr->stale_gen = gen;
    if (!lc->cache_revalidate || (oe = entry_get(cr, gen)) == NULL)
        return;
    cr->stale_status = (int)oe->fh.status;
    if (oe->fh.status != 200)
        return; /* nginx revalidates 200s only: a 304 has no other */
    for (q = oe->buf + oe->fh.key_len, end = q + oe->fh.fields_len;
         entry_field(&q, end, &name, &value);) {
        fd_str_t *to = lit_eq(name, "etag") ? &cr->etag
                     : lit_eq(name, "last-modified")
                         ? &cr->last_modified
                         : NULL;
        char *d;
        if (to && value.len && (d = fd_req_alloc(cr->r, value.len))) {
            memcpy(d, value.data, value.len);
            *to = (fd_str_t){value.len, d};
        }
    }
}

/* Waiting on another's fill: look again. */
static void wait_poll(void *data)
{
    fd_proxy_cache_req_t *cr = data;
    fd_request_t *r = cr->r;
    proxy_req_t *px = cr->px;
    int rc;

    fd_req_on_abort(r, NULL);
    if (fd_api_now_msec() >= cr->wait_until) {
        /* the lock timed out: upstream, and nothing stored (nginx) */
        cr->no_store = 1;
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        rc = fd_proxy_start(px);
    } else {
        rc = decide(cr, px->lc->cache_lock_timeout);
        if (rc == FD_DECLINED)
            rc = fd_proxy_start(px);
        else if (rc == FD_PROXY_CACHE_BACKGROUND)
            rc = FD_OK; /* a waiter never updates: not reached */
    }
    if (rc != FD_AGAIN)
        fd_api_finish(r, rc);
}

/* The lookup and what follows from it: FD_OK (a HIT is in r), FD_AGAIN
 * (waiting), FD_DECLINED (go upstream). */
static int decide(fd_proxy_cache_req_t *cr, uint64_t lock_ms)
{
    proxy_req_t *px = cr->px;
    fd_request_t *r = cr->r;
    uint8_t ev[16];
    uint64_t until = 0, gen = 0;
    int evict, rc;

    /* a HEAD waits for nobody and fills nothing: it is answered from a
     * GET's entry or passed. One that waited does not fill: when the
     * filler stored nothing, the waiters go upstream side by side rather
     * than one after another. */
    if (px->in.method == FD_API_HEAD)
        lock_ms = 0;
    rc = fd_proxy_cache_index_lookup(
        cr->cache, cr->md5, fd_api_now_msec(), lock_ms,
        px->lc->use_stale & FD_PROXY_STALE_UPDATING
            ? px->lc->cache_lock_timeout
            : 0,
        !cr->waited && px->in.method == FD_API_GET, &until, &gen, &evict,
        ev);
    if (evict) {
        COUNT(cr->cache, evicted);
        fd_proxy_cache_unlink(cr->cache, ev);
    }
    if (rc & 0x10) {
        cr->filler = 1;
        rc &= ~0x10;
    }
    if (!cr->secondary && (rc == L_HIT || rc == L_STALE || rc == L_EXPIRED)) {
        /* the primary entry of a key that varies: this request's own
         * variant may be elsewhere */
        open_entry_t *oe = entry_get(cr, gen);
        fd_str_t vkey = ((fd_str_t){0, NULL});
        if (oe && !variant_ok(cr, oe, &vkey) &&
            go_secondary(cr, vkey) == FD_OK)
            return decide(cr, lock_ms);
    }
    switch (rc) {
    case L_HIT:
        if (serve(cr, gen) == FD_OK) {
            px->cache_status = FD_PROXY_CACHE_HIT;
            COUNT(cr->cache, hit);
            return FD_OK;
        }
        /* gone, not whole, or another key's: upstream, and stored */
        fd_resp_reset(r);
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    case L_STALE:
        /* another request updates it: the old file answers */
        if (serve(cr, gen) == FD_OK) {
            px->cache_status = FD_PROXY_CACHE_UPDATING;
            COUNT(cr->cache, updating);
            return FD_OK;
        }
        fd_resp_reset(r);
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    case L_WAIT:
        if (cr->wait_until == 0)
            cr->wait_until = fd_api_now_msec() + lock_ms;
        if (until < cr->wait_until)
            cr->wait_until = until; /* the filler's own deadline */
        /* one timer for the whole wait, set again at each look */
        if (cr->timer == NULL &&
            (cr->timer = fd_api_timer_new(wait_poll, cr)) == NULL) {
            px->cache_status = FD_PROXY_CACHE_MISS;
            COUNT(cr->cache, miss);
            return 500;
        }
        fd_api_timer_set(cr->timer, POLL_MS);
        fd_req_on_abort(r, wait_abort);
        cr->waited = 1;
        return FD_AGAIN;
    case L_FILL:
        cr->filler = 1;
        /* fall through */
    case L_MISS:
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    default: /* L_EXPIRED */
        if (cr->filler && px->lc->cache_background_update &&
            (px->lc->use_stale & FD_PROXY_STALE_UPDATING) &&
            px->in.method == FD_API_GET) {
            /* answered from it now, updated in the background */
            if (serve(cr, gen) == FD_OK) {
                px->cache_status = FD_PROXY_CACHE_STALE;
                COUNT(cr->cache, stale);
                stale_keep(cr, gen); /* and its validators, revalidating */
                fd_resp_send_early(r);
                return FD_PROXY_CACHE_BACKGROUND;
            }
            fd_resp_reset(r);
        }
        px->cache_status = FD_PROXY_CACHE_EXPIRED;
        COUNT(cr->cache, expired);
        stale_keep(cr, gen);
        return FD_DECLINED;
    }
}

/* The client sent Authorization: on a lookup's hot path, the fields the
 * handler has, compared inline (fd_req_header()'s strlen and strncasecmp
 * calls cost a HIT some 60 instructions more) */
static int authorized(const fd_api_http_req_t *in)
{
    for (unsigned i = 0; i < in->nfields; i++)
        if (lit_eq(in->fields[i].name, "authorization"))
            return 1;
    return 0;
}

int fd_proxy_cache_lookup(proxy_req_t *px)
{
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    fd_proxy_cache_req_t *cr;
    fd_api_sbuf_t *sb;

    /* a WebSocket upgrade is a tunnel, never an entry */
    if (!(lc->cache_methods & px->in.method) || px->upgrade)
        return FD_DECLINED;
    cr = fd_req_alloc(r, sizeof(*cr));
    if (cr == NULL)
        return 500;
    memset(cr, 0, sizeof(*cr));
    if (fd_req_cleanup(r, wait_cleanup, cr) != FD_OK)
        return 500;
    cr->cache = lc->cache;
    cr->r = r;
    cr->px = px;
    cr->tmp_fd = -1;
    if ((sb = fd_req_sbuf(r, 128)) == NULL)
        return 500;
    fd_req_script_add(r, lc->cache_key, 0, sb);
    if (fd_api_sbuf_failed(sb))
        return 500;
    cr->key = fd_api_sbuf_str(sb);
    fd_proxy_cache_hash(cr->key.data, cr->key.len, cr->md5);
    px->cr = cr;
    cr->no_store = lc->nno_cache && any_true(r, lc->no_cache, lc->nno_cache);
    /* a shared cache answers no credentialed request from what another
     * client stored (RFC 9111 3.5); only what said public is stored. The
     * upstream then answers its conditionals and ranges (as a POST's):
     * they go. */
    if (px->in.method != FD_API_GET && px->in.method != FD_API_HEAD) {
        /* POST (proxy_cache_methods): counted, not answered from an entry
         * (a HIT with the request's body unread stalls: see README) */
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    }
    if (authorized(&px->in)) {
        px->cache_status = FD_PROXY_CACHE_MISS;
        COUNT(cr->cache, miss);
        return FD_DECLINED;
    }
    /* from here the cache may answer: it answers If-* and Range too (a
     * bypass stores a whole response, so it sends them neither) */
    px->cache_fields = 1;
    if (lc->nbypass && any_true(r, lc->bypass, lc->nbypass)) {
        px->cache_status = FD_PROXY_CACHE_BYPASS;
        COUNT(cr->cache, bypass);
        return FD_DECLINED;
    }
    return decide(cr, lc->cache_lock ? lc->cache_lock_timeout : 0);
}

/* --- a request: stale entries and revalidation --------------------------- */

/* The client's fields a cacheable request does not send upstream: the
 * cache answers conditionals and ranges from the entry (as nginx). */
int fd_proxy_cache_drops_field(fd_str_t n)
{
    return (n.len > 3 && strncasecmp(n.data, "if-", 3) == 0) ||
           lit_eq(n, "range");
}

/* The validators of an expired entry, when revalidating (see stale_keep). */
void fd_proxy_cache_request_fields(proxy_req_t *px, fd_api_out_t *o)
{
    fd_proxy_cache_req_t *cr = px->cr;

    if (cr == NULL || cr->stale_gen == 0 ||
        (cr->etag.len == 0 && cr->last_modified.len == 0))
        return;
    if (cr->etag.len)
        fd_proxy_out_field(o, STR("If-None-Match"), cr->etag);
    if (cr->last_modified.len)
        fd_proxy_out_field(o, STR("If-Modified-Since"),
                           cr->last_modified);
    cr->revalidating = 1;
}

/*
 * The upstream failed (cond: FD_PROXY_STALE_*) before a response header
 * reached the client: the expired entry answers instead when
 * proxy_cache_use_stale says so. FD_OK: r holds it (STALE).
 */
int fd_proxy_cache_stale(proxy_req_t *px, unsigned cond)
{
    fd_proxy_cache_req_t *cr = px->cr;
    fd_request_t *r = px->r;

    if (cr == NULL || cr->stale_gen == 0 || fd_resp_header_sent(r) ||
        !(px->lc->use_stale & cond))
        return FD_DECLINED;
    fd_resp_reset(r);
    if (serve(cr, cr->stale_gen) != FD_OK) {
        fd_resp_reset(r);
        return FD_DECLINED;
    }
    px->cache_status = FD_PROXY_CACHE_STALE;
    COUNT(cr->cache, stale);
    store_abandon(cr);
    return FD_OK;
}

/* The file's own record of its freshness, for an index rebuilt from disk
 * after a restart. */
static void refresh_file(fd_proxy_cache_req_t *cr, int64_t expires)
{
    fd_proxy_cache_t *c = cr->cache;
    char p[PATH_MAX];
    size_t dl;
    int fd;

    if (fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            cr->md5, &dl) == 0 ||
        (fd = open(p, O_WRONLY | O_CLOEXEC)) == -1)
        return;
    if (pwrite(fd, &expires, sizeof(expires),
               offsetof(file_head_t, expires)) != (ssize_t)sizeof(expires))
        store_warn(cr, errno, "pwrite() of");
    close(fd);
}

/*
 * The upstream's response header (status, fields f): FD_OK when the cache
 * answers instead, in r: the 304 to a revalidation (REVALIDATED: the
 * entry is fresh again), or the expired entry for a status
 * proxy_cache_use_stale names (STALE). FD_ERROR: a 304 came and the entry
 * is gone (the client asked nothing conditional: 502). FD_DECLINED: the
 * response goes on to the client.
 */
int fd_proxy_cache_response(proxy_req_t *px, int status,
                            const fd_api_field_t *f, unsigned nf)
{
    static const struct {
        int status;
        unsigned cond;
    } st[] = {{500, FD_PROXY_STALE_500}, {502, FD_PROXY_STALE_502},
              {503, FD_PROXY_STALE_503}, {504, FD_PROXY_STALE_504},
              {403, FD_PROXY_STALE_403}, {404, FD_PROXY_STALE_404},
              {429, FD_PROXY_STALE_429}};
    fd_proxy_cache_req_t *cr = px->cr;
    proxy_loc_conf_t *lc = px->lc;
    fd_request_t *r = px->r;
    int64_t sec;

    if (cr == NULL || cr->stale_gen == 0)
        return FD_DECLINED;
    if (px->bg && status >= 500) {
        /* a background update that failed: the expired entry stays
         * (the client had it), another request tries again */
        store_abandon(cr);
        return FD_OK;
    }
    if (status == 304 && cr->revalidating) {
        /* fresh again for what the 304 says, else proxy_cache_valid for
         * the entry's status */
        sec = fd_proxy_cache_valid_for(f, nf, cr->stale_status, lc->valid,
                                       lc->nvalid, fd_api_unix_sec(), 0,
                                       lc->cache_ignore);
        if (sec < 0)
            sec = 0;
        if (fd_proxy_cache_index_refresh(cr->cache, cr->md5, cr->stale_gen,
                                         fd_api_now_msec(),
                                         fd_api_now_msec() +
                                             (uint64_t)sec * 1000))
            refresh_file(cr, fd_api_unix_sec() + sec);
        store_abandon(cr);
        if (px->bg)
            return FD_OK; /* the client had the entry already */
        fd_resp_reset(r);
        if (serve(cr, cr->stale_gen) != FD_OK) {
            fd_resp_reset(r);
            return FD_ERROR;
        }
        px->cache_status = FD_PROXY_CACHE_REVALIDATED;
        COUNT(cr->cache, revalidated);
        return FD_OK;
    }
    for (unsigned i = 0; i < NELEMS(st); i++)
        if (st[i].status == status)
            return fd_proxy_cache_stale(px, st[i].cond);
    return FD_DECLINED;
}

/* --- a request: storing the response ------------------------------------- */

static time_t last_warn;

/* Write errors are logged at most once a second a worker: a removed or
 * full disk must not flood the log. */
static void store_warn(fd_proxy_cache_req_t *cr, int err, const char *what)
{
    if (fd_api_unix_sec() == last_warn)
        return;
    last_warn = fd_api_unix_sec();
    fd_api_log(FD_API_LOG_WARN, err, "cache \"%s\": %s \"%s\" failed",
               cr->cache->name, what, cr->tmp_path ? cr->tmp_path : "");
}

static void store_abandon(fd_proxy_cache_req_t *cr)
{
    if (cr->storing) {
        close(cr->tmp_fd);
        cr->tmp_fd = -1;
        unlink(cr->tmp_path);
        cr->storing = 0;
    }
    if (cr->filler) {
        fd_proxy_cache_index_unfill(cr->cache, cr->md5);
        cr->filler = 0;
    }
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return FD_ERROR;
        }
        p += w;
        n -= (size_t)w;
    }
    return FD_OK;
}

/* p's directories after from's byte, then p, made (0700) where missing */
static int mkdirs(char *p, size_t from)
{
    for (size_t i = from; p[i]; i++) {
        if (p[i] != '/' || i == 0)
            continue;
        p[i] = '\0';
        if (mkdir(p, 0700) == -1 && errno != EEXIST) {
            p[i] = '/';
            return FD_ERROR;
        }
        p[i] = '/';
    }
    return mkdir(p, 0700) == -1 && errno != EEXIST ? FD_ERROR : FD_OK;
}

static int open_tmp(fd_proxy_cache_req_t *cr)
{
    static unsigned seq;
    fd_proxy_cache_t *c = cr->cache;
    fd_request_t *r = cr->r;
    char p[PATH_MAX];
    size_t dl, n;
    int fd;

    n = fd_proxy_cache_file(p, sizeof(p), c->path, c->levels, c->nlevels,
                            cr->md5, &dl);
    if (n == 0 || (cr->final_path = fd_req_alloc(r, n + 1)) == NULL ||
        (cr->tmp_path = fd_req_alloc(r, n + 32)) == NULL)
        return FD_ERROR;
    memcpy(cr->final_path, p, n + 1);
    snprintf(cr->tmp_path, n + 32, "%s.%d.%u.tmp", p, (int)getpid(), ++seq);
    fd = open(cr->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd == -1 && errno == ENOENT) {
        /* a level (or the cache itself) is missing: made again */
        p[dl - 1] = '\0';
        if (mkdirs(p, strlen(c->path)) != FD_OK &&
            mkdirs(p, 0) != FD_OK) {
            store_warn(cr, errno, "mkdir for");
            return FD_ERROR;
        }
        fd = open(cr->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                  0600);
    }
    if (fd == -1) {
        store_warn(cr, errno, "open()");
        return FD_ERROR;
    }
    cr->tmp_fd = fd;
    cr->storing = 1;
    return FD_OK;
}

/*
 * The key a response is stored with, and where: a response that varies
 * (Vary, unless ignored) has its variant after the key; on a secondary
 * lookup it goes under that variant's MD5 (recomputed: the upstream may
 * vary on other fields than the entry that sent us there), and one that
 * no longer varies goes back to the primary.
 */
static int store_key(fd_proxy_cache_req_t *cr, const fd_api_field_t *f,
                     unsigned nf, fd_str_t *key)
{
    uint8_t md5[16];
    int varies = 0;

    if (!(cr->px->lc->cache_ignore & FD_PROXY_IGNORE_VARY))
        for (unsigned i = 0; i < nf; i++)
            varies |= lit_eq(f[i].name, "vary");
    *key = cr->key;
    if (varies) {
        *key = variant_key(cr, f, nf, ((fd_str_t){0, NULL}));
        if (key->data == NULL)
            return FD_ERROR;
    }
    if (!cr->secondary)
        return FD_OK;
    fd_proxy_cache_hash(key->data, key->len, md5);
    if (memcmp(md5, cr->md5, 16) != 0) {
        if (cr->filler) {
            fd_proxy_cache_index_unfill(cr->cache, cr->md5);
            cr->filler = 0;
        }
        memcpy(cr->md5, md5, 16);
    }
    return FD_OK;
}

/*
 * The response header is in r (and its raw fields in f): store it when
 * it may be kept. Its fields as the client gets them (hidden and
 * hop-by-hop ones are gone; add_header comes at sending time).
 */
void fd_proxy_cache_header(proxy_req_t *px, const fd_api_field_t *f,
                           unsigned nf, int64_t content_length)
{
    fd_proxy_cache_req_t *cr = px->cr;
    fd_request_t *r = px->r;
    proxy_loc_conf_t *lc = px->lc;
    const void *it = NULL;
    file_head_t fh = {.magic = FILE_MAGIC};
    fd_str_t key, ct, name, value, head;
    fd_api_sbuf_t *sb;
    int auth = 0, status = fd_resp_get_status(r);

    if (cr == NULL)
        return;
    auth = authorized(&px->in);
    if (cr->no_store || px->in.method != FD_API_GET ||
        px->framing == FR_NONE ||
        (cr->valid_sec = fd_proxy_cache_valid_for(
             f, nf, status, lc->valid, lc->nvalid, fd_api_unix_sec(),
             auth, lc->cache_ignore)) <= 0) {
        store_abandon(cr);
        return;
    }
    cr->want_len = content_length >= 0 ? (uint64_t)content_length
                                       : UINT64_MAX;
    if (store_key(cr, f, nf, &key) != FD_OK)
        goto failed;
    if ((sb = fd_req_sbuf(r, 512 + key.len)) == NULL)
        goto failed;
    fd_api_sbuf_add(sb, &fh, sizeof(fh));
    fd_api_sbuf_add(sb, key.data, key.len);
    ct = fd_resp_get_content_type(r);
    if (ct.len)
        add_field(sb, STR("Content-Type"), ct);
    while (fd_resp_field_next(r, &it, &name, &value))
        add_field(sb, name, value);
    if (fd_api_sbuf_failed(sb))
        goto failed;
    head = fd_api_sbuf_str(sb);
    fh.status = (uint32_t)status;
    fh.key_len = (uint32_t)key.len;
    fh.fields_len = (uint32_t)(head.len - sizeof(fh) - key.len);
    fh.date = fd_api_unix_sec();
    fh.expires = fd_api_unix_sec() + cr->valid_sec;
    memcpy(fd_api_sbuf_data(sb), &fh, sizeof(fh));
    if (open_tmp(cr) != FD_OK)
        goto failed;
    cr->head_len = head.len;
    if (write_all(cr->tmp_fd, head.data, head.len) != FD_OK) {
        store_warn(cr, errno, "write()");
        goto failed;
    }
    return;

failed:
    COUNT(cr->cache, store_failed);
    store_abandon(cr);
}

/* Body bytes on their way to the client: into the file too. */
void fd_proxy_cache_body(proxy_req_t *px, const fd_api_piece_t *p,
                         unsigned np)
{
    fd_proxy_cache_req_t *cr = px->cr;

    if (cr == NULL || !cr->storing)
        return;
    for (; np; p++, np--) {
        size_t n = p->len;
        if (write_all(cr->tmp_fd, p->data, n) != FD_OK) {
            store_warn(cr, errno, "write()");
            COUNT(cr->cache, store_failed);
            store_abandon(cr);
            return;
        }
        cr->body_len += n;
    }
}

/* The body ended; whole: it came as framed, nothing after it. */
void fd_proxy_cache_end(proxy_req_t *px, int whole)
{
    fd_proxy_cache_req_t *cr = px->cr;
    uint64_t bl;

    if (cr == NULL)
        return;
    if (!cr->storing) {
        store_abandon(cr);
        return;
    }
    bl = cr->body_len;
    if (!whole || (cr->want_len != UINT64_MAX && bl != cr->want_len)) {
        /* not the length announced: a proxy passes it, a cache does not */
        COUNT(cr->cache, store_failed);
        store_abandon(cr);
        return;
    }
    if (pwrite(cr->tmp_fd, &bl, sizeof(bl),
               offsetof(file_head_t, body_len)) != (ssize_t)sizeof(bl)) {
        store_warn(cr, errno, "pwrite()");
        goto failed;
    }
    if (close(cr->tmp_fd) == -1) {
        cr->tmp_fd = -1;
        store_warn(cr, errno, "close()");
        goto failed_closed;
    }
    cr->tmp_fd = -1;
    if (rename(cr->tmp_path, cr->final_path) == -1) {
        store_warn(cr, errno, "rename()");
        goto failed_closed;
    }
    cr->storing = 0;
    cr->filler = 0; /* commit() turns the filling entry ready */
    fd_proxy_cache_index_commit(cr->cache, cr->md5, fd_api_now_msec(),
           fd_api_now_msec() + (uint64_t)cr->valid_sec * 1000,
           cr->head_len + bl);
    COUNT(cr->cache, stored);
    return;

failed_closed:
    unlink(cr->tmp_path);
    cr->storing = 0;
failed:
    COUNT(cr->cache, store_failed);
    store_abandon(cr);
}

/* The request ends without its response stored (an error, an abort). */
void fd_proxy_cache_abandon(proxy_req_t *px)
{
    if (px->cr)
        store_abandon(px->cr);
}

const char *fd_proxy_cache_status_text(int s)
{
    static const char *const t[] = {"",      "MISS",     "HIT",
                                    "EXPIRED", "BYPASS", "STALE",
                                    "UPDATING", "REVALIDATED"};

    return s >= 0 && s < (int)NELEMS(t) ? t[s] : "";
}
