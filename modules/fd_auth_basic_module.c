/*
 * auth_basic: HTTP Basic authentication against an htpasswd file.
 *
 *   auth_basic = "Staff only"
 *   auth_basic_user_file = conf/htpasswd
 *
 * The file holds NAME:HASH lines (# comments); a hash is one the system's
 * crypt() checks and that is worth checking: bcrypt ($2y$, $2b$, $2a$),
 * SHA-crypt ($5$, $6$), yescrypt ($y$, $gy$) or scrypt ($7$). A plaintext,
 * DES, MD5 or Apache $apr1$ line is refused at load, naming file:line.
 * The file is looked at again at most once a second and re-read when it
 * changed; a bad file then keeps the last good one serving.
 *
 * Hashes are slow on purpose (bcrypt: tens of ms), so crypt_r() runs on
 * the offload pool and never stalls the worker; a small cache of recent
 * successes (a SHA-256 of the credentials and the hash, kept a minute)
 * spares a client that sends the same credentials with every request. An
 * unknown user costs a crypt() too, against the file's first hash (the
 * same scheme and cost as a known user's, where the file keeps to one),
 * so timing does not tell which names exist; digests are compared in
 * constant time; no password is logged.
 *
 * Written on the public API (core/api/fastd.h) alone: its access hook is
 * active only where a realm is set, the check goes to the pool with
 * fd_api_offload(), a 401 is fd_resp_error() with a header of its own
 * (FD_DONE), its figures are in its status area.
 */
#include <crypt.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "fastd.h"

#define CACHE_SLOTS 64
#define CACHE_TTL 60000       /* ms */
#define CRED_MAX 1024         /* decoded user:password */
#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
    char *name;
    char *hash;
} user_t;

/* a block of a re-read file's memory (the config's is the config's) */
typedef struct blk_s {
    struct blk_s *next;
    max_align_t data[];
} blk_t;

typedef struct {
    user_t *users;
    unsigned n;
    int heap;                 /* re-read: its memory is blocks, freed */
    blk_t *blocks;
} users_t;

typedef struct {
    char *realm;
    const char *file;         /* auth_basic_user_file */

    fd_str_t challenge;       /* Basic realm="...", charset="UTF-8" */
    /* per worker */
    users_t *users;
    struct timespec mtime;
    off_t size;
    ino_t ino;
    uint64_t checked;
} auth_loc_t;

typedef struct {
    uint64_t verified, cached, failed;
} auth_shm_t;

typedef struct {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    uint64_t until;
} cache_t;

typedef struct {
    char cred[CRED_MAX + 1];  /* user:password, NUL-ended */
    size_t ulen;
    const char *hash;         /* the user's (a copy in the request's
                               * memory: a re-read of the file frees the
                               * table while a pool thread checks), or the
                               * dummy's */
    int known;
    int ok;                   /* set by the pool thread */
    unsigned char digest[SHA256_DIGEST_LENGTH];
} check_t;

static auth_shm_t *area;
static cache_t cache[CACHE_SLOTS];

/* for unknown users when the file holds none (a bcrypt hash of nothing
 * anyone knows) */
static const char dummy_hash[] =
    "$2b$10$abcdefghijklmnopqrstuuKIk3m7Nbj/qX6UFcBL4UErVRuKHZMqm";

#define COUNT(f) \
    (area ? (void)__atomic_add_fetch(&area->f, 1, __ATOMIC_RELAXED) : (void)0)

/* --- the user file ------------------------------------------------------- */

static int hash_ok(const char *h)
{
    static const char *const good[] = {"$2y$", "$2b$", "$2a$", "$5$",
                                       "$6$",  "$y$",  "$gy$", "$7$"};
    size_t i;

    for (i = 0; i < NELEMS(good); i++)
        if (strncmp(h, good[i], strlen(good[i])) == 0)
            return 1;
    return 0;
}

/* Zeroed memory for u: the configuration's when the file is read at load,
 * a block of u's own (freed with it) when it is re-read in a worker. */
static void *ualloc(users_t *u, size_t n)
{
    blk_t *b;

    if (!u->heap)
        return fd_api_conf_alloc(n);
    b = calloc(1, sizeof(*b) + n);
    if (b == NULL)
        return NULL;
    b->next = u->blocks;
    u->blocks = b;
    return b->data;
}

static char *ustrdup(users_t *u, const char *s)
{
    size_t n = strlen(s);
    char *d = ualloc(u, n + 1);

    if (d)
        memcpy(d, s, n);
    return d;
}

static void users_free(users_t *u)
{
    blk_t *b, *next;

    if (u == NULL || !u->heap)
        return;
    for (b = u->blocks; b; b = next) {
        next = b->next;
        free(b);
    }
    free(u);
}

/* Parse path into u: FD_OK, or FD_ERROR with a message in err ("line N:
 * ..."), *bad_line set. */
static int users_load(const char *path, users_t *u, char *err,
                      size_t errlen, int *bad_line, struct stat *st)
{
    FILE *fp = fopen(path, "r");
    char line[4096];
    int ln = 0;
    unsigned cap = 0;

    *bad_line = 0;
    if (fp == NULL) {
        snprintf(err, errlen, "cannot open \"%s\": %s", path,
                 strerror(errno));
        return FD_ERROR;
    }
    if (fstat(fileno(fp), st) < 0)
        memset(st, 0, sizeof(*st));
    u->users = NULL;
    u->n = 0;
    while (fgets(line, sizeof(line), fp)) {
        char *p = line, *colon, *end;
        ln++;
        end = p + strcspn(p, "\r\n");
        if (*end == '\0' && !feof(fp)) {
            snprintf(err, errlen, "%s:%d: a line over %zu bytes", path, ln,
                     sizeof(line) - 2);
            goto bad;
        }
        *end = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        colon = strchr(p, ':');
        if (colon == NULL || colon == p) {
            snprintf(err, errlen, "%s:%d: not NAME:HASH", path, ln);
            goto bad;
        }
        *colon++ = '\0';
        /* htpasswd may add :comment fields after the hash */
        colon[strcspn(colon, ":")] = '\0';
        if (!hash_ok(colon)) {
            snprintf(err, errlen, "%s:%d: user \"%.64s\": not a hash worth "
                     "checking (plaintext, DES, MD5 or $apr1$ are "
                     "refused; use bcrypt: htpasswd -B, or openssl passwd "
                     "-6)", path, ln, p);
            goto bad;
        }
        if (u->n == cap) {
            unsigned ncap = cap ? cap * 2 : 16;
            user_t *nu = ualloc(u, ncap * sizeof(*nu));
            if (nu == NULL)
                goto oom;
            if (u->n)
                memcpy(nu, u->users, u->n * sizeof(*nu));
            u->users = nu;
            cap = ncap;
        }
        u->users[u->n].name = ustrdup(u, p);
        u->users[u->n].hash = ustrdup(u, colon);
        if (u->users[u->n].name == NULL || u->users[u->n].hash == NULL)
            goto oom;
        u->n++;
    }
    fclose(fp);
    return FD_OK;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
bad:
    *bad_line = ln;
    fclose(fp);
    return FD_ERROR;
}

/* Look at the file at most once a second; re-read it when it changed. */
static void users_refresh(auth_loc_t *lc)
{
    uint64_t now = fd_api_now_msec();
    struct stat st;
    users_t *nu;
    char err[512];
    int bad;

    if (now - lc->checked < 1000)
        return;
    lc->checked = now;
    if (stat(lc->file, &st) < 0 ||
        (st.st_mtim.tv_sec == lc->mtime.tv_sec &&
         st.st_mtim.tv_nsec == lc->mtime.tv_nsec && st.st_size == lc->size &&
         st.st_ino == lc->ino))
        return;
    if ((nu = calloc(1, sizeof(*nu))) == NULL)
        return;
    nu->heap = 1;
    if (users_load(lc->file, nu, err, sizeof(err), &bad, &st) != FD_OK) {
        fd_api_log(FD_API_LOG_ERR, 0, "auth_basic_user_file: %s; the last "
                   "good file stays in use", err);
        users_free(nu);
        lc->mtime = st.st_mtim; /* said once per change */
        lc->size = st.st_size;
        lc->ino = st.st_ino;
        return;
    }
    users_free(lc->users);
    lc->users = nu;
    lc->mtime = st.st_mtim;
    lc->size = st.st_size;
    lc->ino = st.st_ino;
    fd_api_log(FD_API_LOG_NOTICE, 0, "auth_basic_user_file \"%s\" re-read: "
               "%u users", lc->file, nu->n);
}

/* --- configuration ------------------------------------------------------- */

static int auth_set(void *conf, const char *key, const char *v, int own)
{
    auth_loc_t *lc = conf;
    size_t n = strlen(v), i;

    (void)key;
    (void)own;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    for (i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f || v[i] == '"' ||
            v[i] == '\\') {
            fd_api_conf_error("\"auth_basic\": the realm may not hold "
                              "control characters, '\"' or '\\'");
            return FD_ERROR;
        }
    if ((lc->realm = fd_api_conf_alloc(n + 1)) == NULL) {
        fd_api_conf_error("out of memory");
        return FD_ERROR;
    }
    memcpy(lc->realm, v, n);
    return FD_OK;
}

static const fd_api_key_t auth_keys[] = {
    {.name = "auth_basic", .type = FD_API_CUSTOM,
     .doc = "\"REALM\" or off: ask for a user and password (HTTP Basic, "
            "RFC 7617), checked against auth_basic_user_file; 401 with "
            "WWW-Authenticate otherwise. Basic sends the password in the "
            "clear: use it over TLS"},
    {.name = "auth_basic_user_file", .type = FD_API_STRING,
     .offset = offsetof(auth_loc_t, file),
     .doc = "an htpasswd file of NAME:HASH lines, HASH bcrypt (htpasswd "
            "-B), $5$/$6$ (openssl passwd -6) or yescrypt; re-read when "
            "it changes (looked at once a second); a relative path is "
            "the prefix's"},
    {.name = NULL}};

static int auth_init_conf(void *conf)
{
    auth_loc_t *lc = conf;
    users_t *u;
    struct stat st;
    char err[512], *ch;
    int bad, len;

    if (lc->realm && strcmp(lc->realm, "off") == 0)
        lc->realm = NULL;
    if (lc->realm == NULL)
        return FD_OK;
    fd_api_conf_at_key(conf, "auth_basic");
    if (lc->file == NULL) {
        fd_api_conf_error("\"auth_basic\" needs auth_basic_user_file");
        return FD_ERROR;
    }
    /* relative: the prefix's, as every path of the configuration */
    if (lc->file[0] != '/' && (lc->file = fd_api_conf_path(lc->file)) == NULL)
        goto oom;
    if ((u = fd_api_conf_alloc(sizeof(*u))) == NULL)
        goto oom;
    if (users_load(lc->file, u, err, sizeof(err), &bad, &st) != FD_OK) {
        fd_api_conf_error("auth_basic_user_file: %s", err);
        return FD_ERROR;
    }
    lc->users = u;
    lc->mtime = st.st_mtim;
    lc->size = st.st_size;
    lc->ino = st.st_ino;
    lc->checked = 0;
    len = (int)strlen(lc->realm) + 40;
    if ((ch = fd_api_conf_alloc((size_t)len)) == NULL)
        goto oom;
    lc->challenge.len = (size_t)snprintf(ch, (size_t)len,
                                         "Basic realm=\"%s\", "
                                         "charset=\"UTF-8\"", lc->realm);
    lc->challenge.data = ch;
    return FD_OK;
oom:
    fd_api_conf_error("out of memory");
    return FD_ERROR;
}

static int auth_init_worker(void)
{
    area = fd_api_status_area(FD_API_SELF);
    if (area)
        memset(area, 0, sizeof(*area));
    return FD_OK;
}

/* --- checking ------------------------------------------------------------ */

/* the 401, with the challenge (the configuration's: not copied) */
static int challenge(fd_request_t *r, const auth_loc_t *lc)
{
    if (fd_resp_error(r, 401) != FD_OK ||
        fd_resp_header_static(r, (fd_str_t){16, "WWW-Authenticate"},
                              lc->challenge) != FD_OK)
        return 500;
    return FD_DONE;
}

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict base64 (padding optional): the decoded length, or -1. */
static ssize_t b64_decode(const char *s, size_t n, char *out, size_t max)
{
    size_t i, o = 0;
    unsigned acc = 0, bits = 0;

    while (n && s[n - 1] == '=')
        n--;
    for (i = 0; i < n; i++) {
        int v = b64val((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == max)
                return -1;
            out[o++] = (char)(acc >> bits);
        }
    }
    return (ssize_t)o;
}

static void digest_of(const check_t *x, unsigned char *d)
{
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    unsigned len = 0;

    if (m && EVP_DigestInit_ex(m, EVP_sha256(), NULL) &&
        EVP_DigestUpdate(m, x->cred, strlen(x->cred) + 1) &&
        EVP_DigestUpdate(m, x->hash, strlen(x->hash)) &&
        EVP_DigestFinal_ex(m, d, &len))
        ;
    else
        memset(d, 0, SHA256_DIGEST_LENGTH);
    EVP_MD_CTX_free(m);
}

static int cache_hit(const unsigned char *d)
{
    uint64_t now = fd_api_now_msec();
    unsigned i;
    int hit = 0;

    for (i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].until > now &&
            CRYPTO_memcmp(cache[i].digest, d, SHA256_DIGEST_LENGTH) == 0)
            hit = 1;
    return hit;
}

static void cache_put(const unsigned char *d)
{
    unsigned i, old = 0;

    for (i = 0; i < CACHE_SLOTS; i++)
        if (cache[i].until < cache[old].until)
            old = i;
    memcpy(cache[old].digest, d, SHA256_DIGEST_LENGTH);
    cache[old].until = fd_api_now_msec() + CACHE_TTL;
}

/* On a pool thread: the slow part. */
static void check_work(fd_request_t *r)
{
    check_t *x = fd_req_get_ctx_of(r, FD_API_SELF);
    struct crypt_data *cd = calloc(1, sizeof(*cd));
    const char *h;

    x->ok = 0;
    if (cd == NULL)
        return;
    h = crypt_r(x->cred + x->ulen + 1, x->hash, cd);
    x->ok = x->known && h && h[0] != '*' && strlen(h) == strlen(x->hash) &&
            CRYPTO_memcmp(h, x->hash, strlen(h)) == 0;
    OPENSSL_cleanse(cd, sizeof(*cd));
    free(cd);
}

/* The check's verdict: FD_OK (in) or the 401 (FD_DONE), counted and, when
 * refused, logged without the password. */
static int check_verdict(fd_request_t *r, check_t *x, const auth_loc_t *lc)
{
    int ok = x->ok;

    COUNT(verified);
    if (ok) {
        cache_put(x->digest);
    } else {
        COUNT(failed);
        x->cred[x->ulen] = '\0';
        fd_api_log(FD_API_LOG_INFO, 0,
                   x->known ? "user \"%s\": password mismatch"
                            : "user \"%s\" was not found in \"%s\"",
                   x->cred, lc->file);
    }
    OPENSSL_cleanse(x->cred, sizeof(x->cred));
    return ok ? FD_OK : challenge(r, lc);
}

/* Back on the loop. */
static void check_done(fd_request_t *r)
{
    check_t *x = fd_req_get_ctx_of(r, FD_API_SELF);
    const auth_loc_t *lc = fd_req_conf_of(r, FD_API_SELF);
    int rc = check_verdict(r, x, lc);

    if (rc == FD_OK)
        fd_api_continue(r, FD_API_SELF);
    else
        fd_api_finish(r, rc); /* FD_DONE: the 401 is set */
}

static int auth_access(fd_request_t *r)
{
    auth_loc_t *lc = fd_req_conf_of(r, FD_API_SELF);
    fd_str_t a = fd_req_header(r, "Authorization");
    check_t *x;
    ssize_t n;
    char *colon;
    const char *hash;
    unsigned i;

    if (lc->realm == NULL)
        return FD_OK;
    users_refresh(lc);
    /* "Basic" (any case), spaces, the credentials */
    if (a.len < 6 || strncasecmp(a.data, "basic ", 6) != 0)
        return challenge(r, lc);
    a.data += 6;
    a.len -= 6;
    while (a.len && (a.data[0] == ' ' || a.data[0] == '\t')) {
        a.data++;
        a.len--;
    }
    while (a.len && (a.data[a.len - 1] == ' ' || a.data[a.len - 1] == '\t'))
        a.len--;
    x = fd_req_alloc(r, sizeof(*x));
    if (x == NULL || fd_req_set_ctx_of(r, FD_API_SELF, x) != FD_OK)
        return 500;
    x->ulen = 0;
    x->known = 0;
    x->ok = 0;
    n = b64_decode(a.data, a.len, x->cred, CRED_MAX);
    if (n <= 0 || memchr(x->cred, '\0', (size_t)n) ||
        (colon = memchr(x->cred, ':', (size_t)n)) == NULL) {
        COUNT(failed);
        return challenge(r, lc);
    }
    x->cred[n] = '\0';
    x->ulen = (size_t)(colon - x->cred);
    /* an unknown user is checked against the first user's hash (known
     * stays 0, so it fails): a fixed dummy of another cost would tell the
     * names apart by the time the 401 takes */
    hash = lc->users->n ? lc->users->users[0].hash : dummy_hash;
    for (i = 0; i < lc->users->n; i++) {
        const user_t *u = &lc->users->users[i];
        if (strlen(u->name) == x->ulen &&
            memcmp(u->name, x->cred, x->ulen) == 0) {
            hash = u->hash;
            x->known = 1;
            break;
        }
    }
    {
        size_t hl = strlen(hash);
        char *copy = fd_req_alloc(r, hl + 1);
        if (copy == NULL)
            return 500;
        memcpy(copy, hash, hl + 1);
        x->hash = copy;
    }
    digest_of(x, x->digest);
    if (x->known && cache_hit(x->digest)) {
        COUNT(cached);
        OPENSSL_cleanse(x->cred, sizeof(x->cred));
        return FD_OK;
    }
    if (fd_api_offload(r, check_work, check_done) != FD_OK) {
        /* no pool thread: inline, as a handler without a pool would */
        check_work(r);
        return check_verdict(r, x, lc);
    }
    return FD_AGAIN;
}

/* a request of a location without a realm pays nothing */
static int auth_active(const void *conf)
{
    return ((const auth_loc_t *)conf)->realm != NULL;
}

/* --- status -------------------------------------------------------------- */

static void auth_status(fd_api_status_t *st, const void *a, unsigned worker)
{
    const auth_shm_t *e = a;

    (void)worker;
    if (e == NULL)
        return;
    fd_api_status_counter(st, "auth_basic_verified", "Passwords checked by "
                          "crypt() (on the offload pool).", NULL,
                          e->verified);
    fd_api_status_counter(st, "auth_basic_cached", "Credentials accepted "
                          "from the cache of recent successes.", NULL,
                          e->cached);
    fd_api_status_counter(st, "auth_basic_failed", "Requests refused with "
                          "401 for bad credentials.", NULL, e->failed);
}

static void auth_retire(void *retired, const void *a)
{
    auth_shm_t *d = retired;
    const auth_shm_t *s = a;

    d->verified += s->verified;
    d->cached += s->cached;
    d->failed += s->failed;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "auth_basic",
    .keys = auth_keys,
    .conf_size = sizeof(auth_loc_t),
    .set = auth_set,
    .init_conf = auth_init_conf,
    .init_worker = auth_init_worker,
    .access = auth_access,
    .active = auth_active,
    .shm_size = sizeof(auth_shm_t),
    .status = auth_status,
    .retire = auth_retire,
};
