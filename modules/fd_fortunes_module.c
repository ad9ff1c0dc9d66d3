/*
 * handler = fortunes: TechEmpower's Fortunes on an embedded SQLite file.
 *
 * Per request, on an offload pool thread: read every row of the fortune
 * table (id, message), add id 0 "Additional fortune added at request
 * time.", sort by message (byte order) in the application, and render the
 * HTML table of the benchmark's template with every message escaped
 * (& < > " '), as text/html; charset=utf-8. Each pool thread keeps its own
 * read-only connection (SQLITE_OPEN_NOMUTEX) and prepared statement; they
 * close when the thread exits. The page is built in r->pool: while the
 * request is in the pool, the loop does not touch that pool.
 *
 * fortunes_db: the database file, relative to the prefix. Created with
 * its directory and seeded with the benchmark's 12 rows when the
 * configuration is loaded and the file does not exist (so `fastd -t` may
 * create it too); an existing file is only checked for the table.
 */
#include <libgen.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"

typedef struct {
    char *db;                  /* as configured */
    char *path;                /* resolved against the prefix */
} fortunes_conf_t;

typedef struct {
    int id;
    const char *msg;
    size_t len;
} fortune_t;

/* One pool thread's connection to one database file. */
typedef struct fortunes_conn_s {
    const char *path;
    sqlite3 *db;
    sqlite3_stmt *select;
    struct fortunes_conn_s *next;
} fortunes_conn_t;

fd_module_t fd_fortunes_module;

static pthread_key_t conn_key;
static pthread_once_t conn_once = PTHREAD_ONCE_INIT;

static const char select_sql[] = "SELECT id, message FROM fortune";
static const char extra_msg[] = "Additional fortune added at request time.";

static const fd_directive_t fortunes_directives[] = {
    {.name = "fortunes_db", .type = FD_CONF_STR,
     .offset = offsetof(fortunes_conf_t, db), .def = "logs/fortunes.db",
     .doc = "handler = fortunes: the SQLite file (created and seeded with "
            "the 12 benchmark rows if missing)"},
    FD_CONF_END};

/* The benchmark's rows, as its verifier expects them. */
static const char *const seed_rows[] = {
    "fortune: No such file or directory",
    "A computer scientist is someone who fixes things that aren't broken.",
    "After enough decimal places, nobody gives a damn.",
    "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1",
    "A computer program does what you tell it to do, not what you want it "
    "to do.",
    "Emacs is a nice operating system, but I prefer UNIX. "
    "\xe2\x80\x94 Tom Christaensen",
    "Any program that runs right is obsolete.",
    "A list is only as strong as its weakest link. \xe2\x80\x94 Donald Knuth",
    "Feature: A bug with seniority.",
    "Computers make very fast, very accurate mistakes.",
    "<script>alert(\"This should not be displayed in a browser alert "
    "box.\");</script>",
    "\xe3\x83\x95\xe3\x83\xac\xe3\x83\xbc\xe3\x83\xa0\xe3\x83\xaf\xe3\x83\xbc"
    "\xe3\x82\xaf\xe3\x81\xae\xe3\x83\x99\xe3\x83\xb3\xe3\x83\x81\xe3\x83\x9e"
    "\xe3\x83\xbc\xe3\x82\xaf", /* フレームワークのベンチマーク */
};

/* --- configuration: create and seed, or check --- */

static int seed(fd_conf_t *cf, const char *path)
{
    char dir[4096];
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    unsigned i;
    int rc;

    snprintf(dir, sizeof(dir), "%s", path);
    if (fd_mkdirs(dirname(dir), 0, 0755, NULL) != FD_OK)
        return fd_conf_error(cf, "fortunes_db \"%s\": mkdir(%s) failed: %s",
                             path, dir, strerror(errno));
    rc = sqlite3_open_v2(path, &db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK)
        goto failed;
    sqlite3_busy_timeout(db, 5000);
    rc = sqlite3_exec(db, "BEGIN IMMEDIATE;"
                          "CREATE TABLE IF NOT EXISTS fortune ("
                          "id INTEGER PRIMARY KEY, message TEXT NOT NULL)",
                      NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        goto failed;
    rc = sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO fortune (id, message)"
                                " VALUES (?, ?)", -1, &st, NULL);
    if (rc != SQLITE_OK)
        goto failed;
    for (i = 0; i < fd_nelems(seed_rows); i++) {
        sqlite3_bind_int(st, 1, (int)i + 1);
        sqlite3_bind_text(st, 2, seed_rows[i], -1, SQLITE_STATIC);
        if ((rc = sqlite3_step(st)) != SQLITE_DONE)
            goto failed;
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    st = NULL;
    rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        goto failed;
    sqlite3_close(db);
    fd_log_error(FD_LOG_NOTICE, 0, "fortunes_db \"%s\" created with %u rows",
                 path, (unsigned)fd_nelems(seed_rows));
    return FD_OK;

failed:
    fd_conf_error(cf, "fortunes_db \"%s\": cannot create it: %s", path,
                  db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_finalize(st);
    sqlite3_close(db);
    unlink(path);
    return FD_ERROR;
}

/* fastd -t: the file is missing; would the start create it? The nearest
 * directory that exists must be writable (the start makes the rest). */
static int could_create(fd_conf_t *cf, const char *path)
{
    char dir[4096], *slash;
    struct stat sb;

    if (strlen(path) >= sizeof(dir))
        return fd_conf_error(cf, "fortunes_db \"%s\": path too long", path);
    strcpy(dir, path);
    for (;;) {
        slash = strrchr(dir, '/');
        if (slash == NULL)
            strcpy(dir, ".");
        else if (slash == dir)
            dir[1] = '\0';
        else
            *slash = '\0';
        if (access(dir, F_OK) == 0 || slash == NULL || slash == dir)
            break;
    }
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        errno = ENOTDIR;
    else if (access(dir, W_OK | X_OK) == 0)
        return FD_OK;
    return fd_conf_error(cf, "fortunes_db \"%s\": cannot be created (%s: "
                         "%s)", path, dir, strerror(errno));
}

static int check(fd_conf_t *cf, const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int rc;

    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, select_sql, -1, &st, NULL);
    if (rc != SQLITE_OK) {
        fd_conf_error(cf, "fortunes_db \"%s\": %s", path,
                      db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return FD_ERROR;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return FD_OK;
}

static int fortunes_init_conf(fd_conf_t *cf, fd_http_loc_t *loc, void *conf)
{
    fortunes_conf_t *fc = conf;
    struct stat sb;

    if (loc->handler != &fd_fortunes_module)
        return FD_OK;
    if (!sqlite3_threadsafe())
        return fd_conf_error(cf, "handler = fortunes needs a thread-safe "
                             "SQLite build");
    fc->path = fd_conf_path(cf, fc->db);
    if (fc->path == NULL)
        return fd_conf_error(cf, "out of memory");
    if (stat(fc->path, &sb) < 0 && (errno == ENOENT || errno == ENOTDIR))
        return fd_conf_test ? could_create(cf, fc->path)
                            : seed(cf, fc->path);
    return check(cf, fc->path);
}

/* --- per-thread connections --- */

static void conns_close(void *data)
{
    fortunes_conn_t *c = data, *next;

    for (; c; c = next) {
        next = c->next;
        sqlite3_finalize(c->select);
        sqlite3_close(c->db);
        free(c);
    }
}

static void conn_key_create(void)
{
    if (pthread_key_create(&conn_key, conns_close) != 0)
        fd_log_error(FD_LOG_ALERT, errno, "pthread_key_create() failed");
}

static fortunes_conn_t *conn_get(const char *path)
{
    fortunes_conn_t *head, *c;
    int rc;

    pthread_once(&conn_once, conn_key_create);
    head = pthread_getspecific(conn_key);
    for (c = head; c; c = c->next)
        if (strcmp(c->path, path) == 0)
            return c;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->path = path;
    rc = sqlite3_open_v2(path, &c->db,
                         SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(c->db, 1000);
        rc = sqlite3_prepare_v3(c->db, select_sql, -1,
                                SQLITE_PREPARE_PERSISTENT, &c->select, NULL);
    }
    if (rc != SQLITE_OK) {
        fd_log_error(FD_LOG_ERR, 0, "fortunes_db \"%s\": %s", path,
                     c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        sqlite3_close(c->db);
        free(c);
        return NULL;
    }
    c->next = head;
    pthread_setspecific(conn_key, c);
    return c;
}

/* --- the page --- */

static int by_message(const void *a, const void *b)
{
    const fortune_t *x = a, *y = b;

    return strcmp(x->msg, y->msg);
}

/* HTML text: the five characters that could start markup, escaped */
static void add_escaped(fd_sbuf_t *sb, const char *s, size_t n)
{
    size_t i, run = 0;

    for (i = 0; i < n; i++) {
        const char *e;
        switch (s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&quot;"; break;
        case '\'': e = "&#39;"; break;
        default: continue;
        }
        fd_sbuf_add(sb, s + run, i - run);
        fd_sbuf_add(sb, e, strlen(e));
        run = i + 1;
    }
    fd_sbuf_add(sb, s + run, n - run);
}

#define PAGE_HEAD "<!DOCTYPE html><html><head><title>Fortunes</title></head>" \
                  "<body><table><tr><th>id</th><th>message</th></tr>"
#define PAGE_TAIL "</table></body></html>"
#define ROW_OPEN "<tr><td>"
#define ROW_MID "</td><td>"
#define ROW_CLOSE "</td></tr>"

/* Query, sort and render into r (blocking: a pool thread). */
static int fortunes_render(fd_request_t *r)
{
    fortunes_conf_t *fc = fd_loc_conf(r->loc, &fd_fortunes_module);
    fortunes_conn_t *c = conn_get(fc->path);
    fortune_t *rows, *more;
    size_t n = 0, cap = 32, len, i;
    fd_sbuf_t sb;
    int rc;

    if (c == NULL)
        return 500;
    rows = fd_palloc(r->pool, cap * sizeof(*rows));
    if (rows == NULL)
        return 500;
    rows[n++] = (fortune_t){0, extra_msg, sizeof(extra_msg) - 1};
    while ((rc = sqlite3_step(c->select)) == SQLITE_ROW) {
        const char *m = (const char *)sqlite3_column_text(c->select, 1);
        int mlen = sqlite3_column_bytes(c->select, 1);

        if (n == cap) {
            more = fd_palloc(r->pool, 2 * cap * sizeof(*rows));
            if (more == NULL)
                break;
            memcpy(more, rows, n * sizeof(*rows));
            rows = more;
            cap *= 2;
        }
        rows[n].id = sqlite3_column_int(c->select, 0);
        rows[n].len = (size_t)mlen;
        rows[n].msg = fd_pstrdup(r->pool, m ? m : "", (size_t)mlen);
        if (rows[n].msg == NULL)
            break;
        n++;
    }
    sqlite3_reset(c->select);
    if (rc != SQLITE_DONE) {
        fd_log_error(FD_LOG_ERR, 0, "fortunes_db \"%s\": %s", fc->path,
                     rc == SQLITE_ROW ? "out of memory"
                                      : sqlite3_errmsg(c->db));
        return 500;
    }
    qsort(rows, n, sizeof(*rows), by_message);

    /* a first capacity that fits the benchmark's rows unescaped */
    len = sizeof(PAGE_HEAD) + sizeof(PAGE_TAIL);
    for (i = 0; i < n; i++)
        len += sizeof(ROW_OPEN ROW_MID ROW_CLOSE) + 24 + rows[i].len;
    if (fd_sbuf_init(&sb, r->pool, len) != FD_OK)
        return 500;
    fd_sbuf_add_lit(&sb, PAGE_HEAD);
    for (i = 0; i < n; i++) {
        fd_sbuf_add_lit(&sb, ROW_OPEN);
        if (rows[i].id < 0)
            fd_sbuf_addc(&sb, '-');
        fd_sbuf_add_uint(&sb, rows[i].id < 0 ? (uint64_t)-(int64_t)rows[i].id
                                             : (uint64_t)rows[i].id);
        fd_sbuf_add_lit(&sb, ROW_MID);
        add_escaped(&sb, rows[i].msg, rows[i].len);
        fd_sbuf_add_lit(&sb, ROW_CLOSE);
    }
    fd_sbuf_add_lit(&sb, PAGE_TAIL);
    if (fd_sbuf_failed(&sb))
        return 500;

    r->status = 200;
    r->content_type = fd_string("text/html; charset=utf-8");
    return fd_http_body_set(r, sb.start, fd_sbuf_len(&sb)) == FD_OK ? FD_OK
                                                                    : 500;
}

static void fortunes_work(fd_request_t *r)
{
    *(int *)r->ctx = fortunes_render(r);
}

static void fortunes_done(fd_request_t *r)
{
    fd_request_finish(r, *(int *)r->ctx);
}

static int fortunes_handler(fd_request_t *r)
{
    /* GET and HEAD only: the engine answers the others (.methods) */
    /* dispatched to the pool by the engine (inline_completions = off) */
    if (fd_offload_on_pool_thread())
        return fortunes_render(r);
    r->ctx = fd_palloc(r->pool, sizeof(int));
    if (r->ctx == NULL)
        return 500;
    if (fd_offload(r, fortunes_work, fortunes_done) != FD_OK)
        return 503;
    return FD_AGAIN;
}

fd_module_t fd_fortunes_module = {
    FD_MODULE_LOC(fortunes, fortunes_conf_t),
    .handler = fortunes_handler,
    .flags = FD_MODULE_THREAD_SAFE,
    .methods = FD_METHODS_GET,
};
