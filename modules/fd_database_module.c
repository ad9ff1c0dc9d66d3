/*
 * [database NAME]: databases for handlers, through the public API's
 * fd_db_* calls (core/api/fastd.h).
 *
 *   url = postgresql://user:pass@host:port/db?sslmode=...   (or postgres://,
 *         or a socket directory: postgresql:///db?host=/run/postgresql)
 *   url = sqlite:PATH                                        (prefix-relative)
 *
 * PostgreSQL runs on the worker's loop (fd_database_pg.c): pool
 * connections per worker, each a socket on the loop in libpq's pipeline
 * mode, so the queries of a loop turn, one request's and many's, go in
 * one write and come back in one read. SQLite runs on the worker's
 * offload pool (fd_database_sqlite.c), a turn's queries in one job. A
 * handler that runs on the pool itself (blocking) gets synchronous calls
 * on a connection of its thread's, done called before fd_db_query()
 * returns: the same handler either way.
 *
 * Failure is an answer: with no connection up after one failed, queries
 * get 503 at once, not a wait each; a connection comes back with backoff
 * (100 ms doubling to 5 s); a statement past statement_timeout is
 * cancelled by the server (PostgreSQL's statement_timeout, SQLite's
 * progress handler) and answered 504; past max_waiting queries wait for
 * room, the next gets 503; a lost connection fails the queries on it
 * only. The figures per database are in the worker's status slot.
 */
#include <pthread.h>
#include <strings.h>
#include <time.h>

#include "fd_core.h"
#include "fd_http.h"
#include "fd_offload.h"
#include "fd_status.h"
#include "fd_database.h"

#define DOFF(f) offsetof(fd_db_t, f)

static const fd_directive_t database_section_directives[] = {
    {.name = "url", .type = FD_CONF_STR, .offset = DOFF(url),
     .doc = "postgresql://user:pass@host:port/db?... (or postgres://), or "
            "sqlite:PATH (relative to the prefix)"},
    {.name = "pool", .type = FD_CONF_INT, .offset = DOFF(pool), .def = "4",
     .min = 1, .max = 1024,
     .doc = "PostgreSQL: connections per worker (each pipelines its "
            "queries); SQLite: the offload pool's threads each have one"},
    {.name = "connect_timeout", .type = FD_CONF_MSEC,
     .offset = DOFF(connect_timeout), .def = "5s", .min = 1, .max = 3600000,
     .doc = "PostgreSQL: longest a connection may take to open"},
    {.name = "statement_timeout", .type = FD_CONF_MSEC,
     .offset = DOFF(statement_timeout), .def = "10s",
     .doc = "a statement running longer is cancelled and answered 504; "
            "0: no limit"},
    {.name = "max_waiting", .type = FD_CONF_INT,
     .offset = DOFF(max_waiting), .def = "8192",
     .doc = "queries that may wait for room (per worker); the next gets "
            "503 with Retry-After"},
    {.name = "pipeline", .type = FD_CONF_INT, .offset = DOFF(pipeline),
     .def = "128", .min = 1, .max = 65536,
     .doc = "PostgreSQL: queries in flight on one connection at most"},
    {.name = "prepare", .type = FD_CONF_LIST, .offset = DOFF(prepare),
     .doc = "NAME SQL: a named statement ($1, $2, ... its parameters), "
            "prepared on every connection (repeatable)"},
    {.name = "init", .type = FD_CONF_STR, .offset = DOFF(init),
     .doc = "SQLite: an SQL file run when the database file does not "
            "exist yet (it is created; relative to the prefix)"},
    FD_CONF_END};

/* --- statements --- */

/* $n parameters of sql, outside quotes: the highest n */
static int count_params(const char *sql)
{
    const char *p = sql;
    int n = 0, v;
    char quote = 0;

    for (; *p; p++) {
        if (quote) {
            if (*p == quote)
                quote = 0;
            continue;
        }
        if (*p == '\'' || *p == '"') {
            quote = *p;
            continue;
        }
        if (*p != '$' || p[1] < '1' || p[1] > '9')
            continue;
        for (v = 0, p++; *p >= '0' && *p <= '9' && v < 100000; p++)
            v = v * 10 + (*p - '0');
        p--;
        n = fd_max(n, v);
    }
    return n;
}

const db_stmt_t *db_stmt(const fd_db_t *db, const char *name)
{
    unsigned i;

    for (i = 0; i < db->nstmts; i++)
        if (strcmp(db->stmts[i].name, name) == 0)
            return &db->stmts[i];
    return NULL;
}

/* FD_OK or FD_ERROR after fd_conf_error() */
static int stmt_add(fd_conf_t *cf, fd_db_t *db, const char *name,
                    size_t nlen, const char *sql)
{
    const db_stmt_t *old;
    db_stmt_t *more;
    unsigned i;

    if (nlen == 0 || nlen >= 64)
        return fd_conf_error(cf, "[database %s]: a statement name is 1 to "
                             "63 characters", db->name);
    for (i = 0; i < nlen; i++)
        if (!(name[i] == '_' || (name[i] >= 'a' && name[i] <= 'z') ||
              (name[i] >= 'A' && name[i] <= 'Z') ||
              (i && name[i] >= '0' && name[i] <= '9')))
            return fd_conf_error(cf, "[database %s]: statement name \"%.*s\""
                                 ": letters, digits and _ only", db->name,
                                 (int)nlen, name);
    while (*sql == ' ' || *sql == '\t')
        sql++;
    if (*sql == '\0')
        return fd_conf_error(cf, "[database %s]: statement \"%.*s\" has no "
                             "SQL", db->name, (int)nlen, name);
    for (i = 0; i < db->nstmts; i++) {
        old = &db->stmts[i];
        if (strlen(old->name) != nlen || memcmp(old->name, name, nlen) != 0)
            continue;
        if (strcmp(old->sql, sql) == 0)
            return FD_OK;
        return fd_conf_error(cf, "[database %s]: statement \"%.*s\" is "
                             "prepared twice, with two texts", db->name,
                             (int)nlen, name);
    }
    if (db->nstmts == db->stmts_cap) {
        unsigned cap = db->stmts_cap ? 2 * db->stmts_cap : 8;
        more = fd_palloc(db->cpool, cap * sizeof(*more));
        if (more == NULL)
            return fd_conf_error(cf, "out of memory");
        if (db->nstmts)
            memcpy(more, db->stmts, db->nstmts * sizeof(*more));
        db->stmts = more;
        db->stmts_cap = cap;
    }
    more = &db->stmts[db->nstmts];
    more->name = fd_pstrdup(db->cpool, name, nlen);
    more->sql = fd_pstrdup(db->cpool, sql, strlen(sql));
    if (more->name == NULL || more->sql == NULL)
        return fd_conf_error(cf, "out of memory");
    more->nparams = count_params(sql);
    if (more->nparams > DB_MAX_PARAMS)
        return fd_conf_error(cf, "[database %s]: statement \"%s\" has more "
                             "than %d parameters", db->name, more->name,
                             DB_MAX_PARAMS);
    db->nstmts++;
    return FD_OK;
}

/* --- configuration --- */

static int database_init_section(fd_conf_t *cf, const char *name,
                                 void *conf)
{
    fd_db_t *db = conf;
    unsigned i;

    if (fd_cycle_section_name(cf, "database", name, DB_NAME_MAX) != FD_OK)
        return FD_ERROR;
    db->name = (char *)name;
    db->cpool = cf->pool;
    if (db->url == NULL)
        return fd_conf_error(cf, "[database %s] has no url", name);
    if (strncmp(db->url, "sqlite:", 7) == 0) {
        db->kind = DB_SQLITE;
        if (db->url[7] == '\0')
            return fd_conf_error(cf, "[database %s]: url = sqlite:PATH "
                                 "needs a path", name);
        db->path = fd_conf_path(cf, db->url + 7);
        if (db->init && (db->init_path = fd_conf_path(cf, db->init)) == NULL)
            return fd_conf_error(cf, "out of memory");
        if (db->path == NULL)
            return fd_conf_error(cf, "out of memory");
    } else if (strncmp(db->url, "postgresql:", 11) == 0 ||
               strncmp(db->url, "postgres:", 9) == 0) {
        db->kind = DB_PG;
        if (db->init)
            return fd_conf_error(cf, "[database %s]: init is for SQLite "
                                 "(create a PostgreSQL schema with psql)",
                                 name);
    } else {
        return fd_conf_error(cf, "[database %s]: url \"%s\" is neither "
                             "postgresql://... nor sqlite:PATH", name,
                             db->url);
    }
    for (i = 0; i < db->prepare.n; i++) {
        const char *v = db->prepare.items[i];
        size_t n = strcspn(v, " \t");
        fd_conf_at_key(cf, db, "prepare");
        if (v[n] == '\0')
            return fd_conf_error(cf, "[database %s]: prepare = NAME SQL",
                                 name);
        if (stmt_add(cf, db, v, n, v + n) != FD_OK)
            return FD_ERROR;
    }
    return db->kind == DB_PG ? db_pg_conf(cf, db) : FD_OK;
}

/* Number the databases; SQLite files are made (or checked) now, when the
 * workers' user is known and every module has prepared its statements. */
static int database_init_cycle(fd_conf_t *cf, fd_cycle_t *cycle)
{
    fd_conf_section_t *s;

    if (fd_cycle_number_sections(cf, cycle, &fd_database_module, DB_MAX,
                                 offsetof(fd_db_t, index)) != FD_OK)
        return FD_ERROR;
    for (s = cycle->sections; s; s = s->next) {
        fd_db_t *db = s->conf;
        if (s->module != &fd_database_module || db->kind != DB_SQLITE)
            continue;
        cf->file = s->file;
        cf->line = s->line;
        if (db_sqlite_conf(cf, db, cycle) != FD_OK)
            return FD_ERROR;
    }
    cf->file = NULL;
    return FD_OK;
}

static void database_flush(void *data);

static int database_init_worker(fd_worker_t *w)
{
    db_shm_t *area = fd_stats_area(fd_stats, &fd_database_module);
    fd_conf_section_t *s;

    for (s = w->cycle->sections; s; s = s->next) {
        fd_db_t *db = s->conf;
        if (s->module != &fd_database_module)
            continue;
        db->shm = &area[db->index];
        memset(db->shm, 0, sizeof(*db->shm));
        snprintf(db->shm->name, sizeof(db->shm->name), "%s", db->name);
        db->wait_tail = &db->wait_head;
        db->flush.handler = database_flush;
        db->flush.data = db;
        if (db->kind == DB_PG && db_pg_init_worker(db) != FD_OK)
            return FD_ERROR;
    }
    return FD_OK;
}

static void database_exit_worker(fd_worker_t *w)
{
    fd_conf_section_t *s;

    for (s = w->cycle->sections; s; s = s->next)
        if (s->module == &fd_database_module &&
            ((fd_db_t *)s->conf)->kind == DB_PG)
            db_pg_exit_worker(s->conf);
}

/* --- queries --- */

uint64_t db_now_usec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void db_set_error(fd_db_res_t *res, int status, const char *msg)
{
    size_t n = strlen(msg);

    if (res->status)
        return; /* the first error is the one said */
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        n--; /* libpq ends its messages with a newline */
    res->status = status;
    res->error = strndup(msg, n); /* NULL: fd_db_error() says "failed" */
}

void db_post_flush(fd_db_t *db)
{
    if (!db->flush_posted) {
        db->flush_posted = 1;
        fd_event_post(&db->flush);
    }
}

static void database_flush(void *data)
{
    fd_db_t *db = data;

    db->flush_posted = 0;
    if (db->kind == DB_PG)
        db_pg_flush(db);
    else
        db_sqlite_flush(db);
}

/* A query with its parameters copied, in one allocation */
static db_q_t *q_new(fd_request_t *r, fd_db_t *db, int kind,
                     const db_stmt_t *st, int n, const fd_str_t *params)
{
    size_t size = sizeof(db_q_t) + (size_t)n * (sizeof(char *) + sizeof(int));
    db_q_t *q;
    char *p;
    int i;

    for (i = 0; i < n; i++)
        size += params[i].len + 1;
    q = malloc(size);
    if (q == NULL)
        return NULL;
    memset(q, 0, sizeof(*q));
    q->kind = kind;
    q->r = r;
    q->db = db;
    q->stmt = st;
    q->nparams = n;
    q->params = (const char **)(q + 1);
    q->lens = (int *)(q->params + n);
    p = (char *)(q->lens + n);
    for (i = 0; i < n; i++) {
        if (params[i].len)
            memcpy(p, params[i].data, params[i].len);
        p[params[i].len] = '\0';
        q->params[i] = p;
        q->lens[i] = (int)params[i].len;
        p += params[i].len + 1;
    }
    q->parts_last = &q->parts;
    return q;
}

void db_free_q(db_q_t *q)
{
    db_q_t *p, *next;

    for (p = q->parts; p; p = next) {
        next = p->next;
        db_free_q(p);
    }
    if (q->res.pg)
        db_pg_res_free(&q->res);
    free(q->res.cells);
    free((char *)q->res.error);
    free(q);
}

void db_complete(db_q_t *q)
{
    fd_db_t *db = q->db;

    DB_INC(db, queries, 1);
    DB_INC(db, query_usec_sum, db_now_usec() - q->start_usec);
    switch (q->res.status) {
    case 0: break;
    case DB_UNAVAILABLE: DB_INC(db, errors_unavailable, 1); break;
    case DB_TIMEOUT: DB_INC(db, errors_timeout, 1); break;
    default: DB_INC(db, errors_other, 1); break;
    }
    if (q->res.status && q->res.status != DB_UNAVAILABLE)
        fd_log_error(FD_LOG_ERR, 0, "database %s: %s: %s", db->name,
                     q->stmt ? q->stmt->name : "transaction",
                     q->res.error ? q->res.error : "failed");
    if (q->done)
        q->done(q->r, &q->res, q->data);
    db_free_q(q);
}

/* --- pool threads' connections --- */

static pthread_key_t tkey;
static pthread_once_t tonce = PTHREAD_ONCE_INIT;

static void tconns_close(void *data)
{
    db_tconn_t *t = data, *next;

    for (; t; t = next) {
        next = t->next;
        t->close(t);
    }
}

static void tkey_create(void)
{
    pthread_key_create(&tkey, tconns_close);
}

db_tconn_t *db_tconn_find(fd_db_t *db)
{
    db_tconn_t *t;

    pthread_once(&tonce, tkey_create);
    for (t = pthread_getspecific(tkey); t; t = t->next)
        if (t->db == db)
            return t;
    return NULL;
}

void db_tconn_add(db_tconn_t *t)
{
    pthread_once(&tonce, tkey_create);
    t->next = pthread_getspecific(tkey);
    pthread_setspecific(tkey, t);
}

void db_run_sync(const db_sync_t *d, fd_db_t *db, db_q_t *q)
{
    void *conn = d->conn(db, &q->res);
    db_q_t *p;

    if (conn == NULL)
        return;
    if (q->kind == Q_QUERY) {
        d->exec(conn, q, &q->res);
        return;
    }
    d->simple(conn, d->begin, &q->res);
    for (p = q->parts; p && !q->res.status; p = p->next)
        d->exec(conn, p, &q->res);
    /* after an error the first one stays the answer (db_set_error) */
    d->simple(conn, q->res.status ? "ROLLBACK" : "COMMIT", &q->res);
}

/* 503 at once, with a Retry-After for the client */
static int reject(fd_db_t *db, db_q_t *q)
{
    DB_INC(db, rejected, 1);
    if (q->r)
        q->r->retry_after = 1; /* on the 503 the handler answers */
    db_free_q(q);
    return DB_UNAVAILABLE;
}

/* A query or a transaction on its way: FD_OK (done follows, or ran) or a
 * status, q freed */
static int submit(fd_db_t *db, db_q_t *q)
{
    q->start_usec = db_now_usec();
    /* down (the loop's connections say so): 503 now, not after a wait
     * each; a pool thread reads the loop's word for it, racy but only
     * ever a query early or late */
    if (db->kind == DB_PG &&
        __atomic_load_n(&db->ready, __ATOMIC_RELAXED) == 0 &&
        db->failed_once)
        return reject(db, q);
    if (fd_offload_on_pool_thread()) {
        if (db->kind == DB_PG)
            db_pg_run_blocking(db, q);
        else
            db_sqlite_run_blocking(db, q);
        db_complete(q);
        return FD_OK;
    }
    if (db->kind == DB_SQLITE)
        return db->inflight < (unsigned)db->max_waiting &&
                       db_sqlite_send(db, q) == FD_OK
                   ? FD_OK
                   : reject(db, q);
    if (db->wait_head == NULL && db_pg_send(db, q) == FD_OK)
        return FD_OK;
    if (db->waiting >= (unsigned)db->max_waiting)
        return reject(db, q);
    q->next = NULL;
    *db->wait_tail = q;
    db->wait_tail = &q->next;
    db->waiting++;
    DB_SET(db, waiting, db->waiting);
    return FD_OK;
}

/* Room on a connection: the waiting queries go, oldest first */
void db_dispatch_waiting(fd_db_t *db)
{
    db_q_t *q;

    while ((q = db->wait_head) != NULL) {
        db->wait_head = q->next;
        if (db_pg_send(db, q) != FD_OK) {
            db->wait_head = q; /* no room: it stays first */
            break;
        }
        db->waiting--;
    }
    if (db->wait_head == NULL)
        db->wait_tail = &db->wait_head;
    DB_SET(db, waiting, db->waiting);
}

/* Fail every waiting query (the database went down) */
static void fail_waiting(fd_db_t *db, const char *why)
{
    db_q_t *q;

    while ((q = db->wait_head) != NULL) {
        db->wait_head = q->next;
        db->waiting--;
        db_set_error(&q->res, DB_UNAVAILABLE, why);
        db_complete(q);
    }
    db->wait_tail = &db->wait_head;
    DB_SET(db, waiting, 0);
}

void db_state(fd_db_t *db, int up, const char *msg)
{
    if (up) {
        db->failed_once = 0;
        if (db->up_logged) {
            db->up_logged = 0;
            fd_log_error(FD_LOG_NOTICE, 0, "database %s: up again",
                         db->name);
        }
        return;
    }
    db->failed_once = 1;
    if (!db->up_logged) {
        db->up_logged = 1;
        fd_log_error(FD_LOG_ERR, 0, "database %s: down: %s (queries get "
                     "503 until a connection is back)", db->name, msg);
    }
    fail_waiting(db, "the database is unreachable");
}

/* --- the public API --- */

fd_db_t *fd_db_get(const char *name)
{
    fd_conf_t *cf = fd_dso_conf();
    fd_cycle_t *cy = cf ? cf->cycle : fd_worker ? fd_worker->cycle : NULL;
    fd_db_t *db = cy ? fd_cycle_section(cy, "database", name) : NULL;

    if (db == NULL && cf)
        fd_api_conf_error("unknown database \"%s\" (no [database %s] "
                          "section)", name, name);
    return db;
}

int fd_db_prepare(fd_db_t *db, const char *name, const char *sql)
{
    fd_conf_t *cf = fd_dso_conf();

    if (cf == NULL) {
        fd_log_error(FD_LOG_ALERT, 0, "fd_db_prepare(\"%s\") outside "
                     "init_conf", name);
        return FD_ERROR;
    }
    return stmt_add(cf, db, name, strlen(name), sql);
}

/* The statement name and parameters, checked: NULL after a log line */
static const db_stmt_t *checked(fd_db_t *db, const char *name, int n)
{
    const db_stmt_t *st = db_stmt(db, name);

    if (st == NULL)
        fd_log_error(FD_LOG_ERR, 0, "database %s: no statement \"%s\" "
                     "(prepare = %s SQL)", db->name, name, name);
    else if (n != st->nparams)
        fd_log_error(FD_LOG_ERR, 0, "database %s: statement \"%s\" takes "
                     "%d parameters, not %d", db->name, name, st->nparams,
                     n);
    else
        return st;
    return NULL;
}

int fd_db_query(fd_request_t *r, fd_db_t *db, const char *stmt,
                int nparams, const fd_str_t *params, fd_db_done_pt done,
                void *data)
{
    const db_stmt_t *st = checked(db, stmt, nparams);
    db_q_t *q;

    if (st == NULL)
        return 500;
    if (db->shm == NULL) { /* before the worker started its databases */
        fd_log_error(FD_LOG_ALERT, 0, "database %s: a query before the "
                     "worker started it (a module's init_worker that runs "
                     "before the database module's)", db->name);
        return 503;
    }
    if ((q = q_new(r, db, Q_QUERY, st, nparams, params)) == NULL)
        return 500;
    q->done = done;
    q->data = data;
    return submit(db, q);
}

fd_db_txn_t *fd_db_begin(fd_request_t *r, fd_db_t *db)
{
    return (fd_db_txn_t *)q_new(r, db, Q_TXN, NULL, 0, NULL);
}

int fd_db_txn_query(fd_db_txn_t *t, const char *stmt, int nparams,
                    const fd_str_t *params)
{
    db_q_t *txn = (db_q_t *)t, *q;
    const db_stmt_t *st = checked(txn->db, stmt, nparams);

    if (st == NULL ||
        (q = q_new(txn->r, txn->db, Q_PART, st, nparams, params)) == NULL) {
        txn->res.status = DB_FAILED; /* commit says so */
        return FD_ERROR;
    }
    q->txn = txn;
    *txn->parts_last = q;
    txn->parts_last = &q->next;
    txn->nparts++;
    return FD_OK;
}

int fd_db_commit(fd_db_txn_t *t, fd_db_done_pt done, void *data)
{
    db_q_t *txn = (db_q_t *)t;

    if (txn->res.status || txn->nparts == 0 || txn->db->shm == NULL) {
        db_free_q(txn);
        return 500;
    }
    txn->done = done;
    txn->data = data;
    return submit(txn->db, txn);
}

int fd_db_status(const fd_db_res_t *res)
{
    return res->status;
}

const char *fd_db_error(const fd_db_res_t *res)
{
    return res->status ? (res->error ? res->error : "failed") : NULL;
}

int fd_db_rows(const fd_db_res_t *res)
{
    return res->rows;
}

int fd_db_cols(const fd_db_res_t *res)
{
    return res->cols;
}

fd_str_t fd_db_value(const fd_db_res_t *res, int row, int col)
{
    if (row < 0 || col < 0 || row >= res->rows || col >= res->cols)
        return fd_null_string;
    if (res->pg)
        return db_pg_value(res, row, col);
    return res->cells[(size_t)row * (size_t)res->cols + (size_t)col];
}

int64_t fd_db_int(const fd_db_res_t *res, int row, int col)
{
    fd_str_t v = fd_db_value(res, row, col);
    int64_t n = 0;
    size_t i = 0;
    int neg = 0;

    if (v.data == NULL)
        return 0;
    if (v.len && (v.data[0] == '-' || v.data[0] == '+'))
        neg = v.data[i++] == '-';
    for (; i < v.len && v.data[i] >= '0' && v.data[i] <= '9'; i++)
        n = n * 10 + (v.data[i] - '0');
    return i == v.len ? (neg ? -n : n) : 0;
}

int64_t fd_db_changes(const fd_db_res_t *res)
{
    return res->changes;
}

/* --- status --- */

static void database_status(fd_status_t *st, const void *area,
                            unsigned worker)
{
    const db_shm_t *e = area;
    char labels[DB_NAME_MAX + 32];
    unsigned i;

    if (e == NULL)
        return;
    for (i = 0; i < DB_MAX; i++, e++) {
        if (e->name[0] == '\0')
            continue;
        snprintf(labels, sizeof(labels), "database=\"%.*s\"",
                 DB_NAME_MAX - 1, e->name);
        if (worker != FD_STATUS_RETIRED) {
            fd_status_gauge(st, "database_connections",
                            "Connections open.", labels, e->open);
            fd_status_gauge(st, "database_busy",
                            "Connections with queries in flight.", labels,
                            e->busy);
            fd_status_gauge(st, "database_waiting",
                            "Queries waiting for room on a connection.",
                            labels, e->waiting);
        }
        fd_status_counter(st, "database_queries",
                          "Queries and transactions answered.", labels,
                          e->queries);
        fd_status_counter(st, "database_errors_unavailable",
                          "Answered 503: unreachable, or connection lost.",
                          labels, e->errors_unavailable);
        fd_status_counter(st, "database_errors_timeout",
                          "Answered 504: past statement_timeout.", labels,
                          e->errors_timeout);
        fd_status_counter(st, "database_errors_other",
                          "Answered with another error.", labels,
                          e->errors_other);
        fd_status_counter(st, "database_rejected",
                          "Refused at once: down, or max_waiting.", labels,
                          e->rejected);
        fd_status_counter(st, "database_query_usec_sum",
                          "Time from query to answer, summed.", labels,
                          e->query_usec_sum);
    }
}

static void database_retire(void *retired_area, const void *area)
{
    const db_shm_t *s = area;
    db_shm_t *into;
    unsigned i;

    for (i = 0; i < DB_MAX; i++, s++) {
        if (s->name[0] == '\0' ||
            (into = fd_status_named_entry(retired_area, sizeof(*s), DB_MAX,
                                          s->name, sizeof(s->name))) == NULL)
            continue;
        into->queries += s->queries;
        into->errors_unavailable += s->errors_unavailable;
        into->errors_timeout += s->errors_timeout;
        into->errors_other += s->errors_other;
        into->rejected += s->rejected;
        into->query_usec_sum += s->query_usec_sum;
    }
}

fd_module_t fd_database_module = {
    .name = "database",
    .init_worker = database_init_worker,
    .exit_worker = database_exit_worker,
    .section = "database",
    .section_directives = database_section_directives,
    .section_size = sizeof(fd_db_t),
    .init_section = database_init_section,
    .init_cycle = database_init_cycle,
    .shm_size = DB_MAX * sizeof(db_shm_t),
    .status = database_status,
    .retire = database_retire,
};
