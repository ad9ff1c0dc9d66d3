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
#include <stdio.h>
#include <strings.h>
#include <time.h>

#include "fd_database.h"

#define DOFF(f) offsetof(fd_db_t, f)

static const fd_api_key_t database_section_keys[] = {
    {.name = "url", .type = FD_API_STRING, .offset = DOFF(url),
     .doc = "postgresql://user:pass@host:port/db?... (or postgres://), or "
            "sqlite:PATH (relative to the prefix)"},
    {.name = "pool", .type = FD_API_INT, .offset = DOFF(pool), .def = "4",
     .doc = "PostgreSQL: connections per worker (each pipelines its "
            "queries); SQLite: the offload pool's threads each have one"},
    {.name = "connect_timeout", .type = FD_API_MSEC,
     .offset = DOFF(connect_timeout), .def = "5s",
     .doc = "PostgreSQL: longest a connection may take to open"},
    {.name = "statement_timeout", .type = FD_API_MSEC,
     .offset = DOFF(statement_timeout), .def = "10s",
     .doc = "a statement running longer is cancelled and answered 504; "
            "0: no limit"},
    {.name = "max_waiting", .type = FD_API_INT,
     .offset = DOFF(max_waiting), .def = "8192",
     .doc = "queries that may wait for room (per worker); the next gets "
            "503 with Retry-After"},
    {.name = "pipeline", .type = FD_API_INT, .offset = DOFF(pipeline),
     .def = "128",
     .doc = "PostgreSQL: queries in flight on one connection at most"},
    {.name = "prepare", .type = FD_API_LIST,
     .doc = "NAME SQL: a named statement ($1, $2, ... its parameters), "
            "prepared on every connection (repeatable)"},
    {.name = "init", .type = FD_API_STRING, .offset = DOFF(init),
     .doc = "SQLite: an SQL file run when the database file does not "
            "exist yet (it is created; relative to the prefix)"},
    {.name = NULL}};

/* The bounds of the integer keys, as the engine's keys say theirs */
static const struct {
    const char *key;
    size_t offset;
    int msec;
    int64_t min, max;
} bounds[] = {{"pool", DOFF(pool), 0, 1, 1024},
              {"connect_timeout", DOFF(connect_timeout), 1, 1, 3600000},
              {"pipeline", DOFF(pipeline), 0, 1, 65536}};

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
        n = db_max(n, v);
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

/* FD_OK or FD_ERROR after fd_api_conf_error() */
static int stmt_add(fd_db_t *db, const char *name, size_t nlen,
                    const char *sql)
{
    const db_stmt_t *old;
    db_stmt_t *more;
    unsigned i;

    if (nlen == 0 || nlen >= 64)
        return CONF_ERROR("[database %s]: a statement name is 1 to "
                             "63 characters", db->name);
    for (i = 0; i < nlen; i++)
        if (!(name[i] == '_' || (name[i] >= 'a' && name[i] <= 'z') ||
              (name[i] >= 'A' && name[i] <= 'Z') ||
              (i && name[i] >= '0' && name[i] <= '9')))
            return CONF_ERROR("[database %s]: statement name \"%.*s\""
                                 ": letters, digits and _ only", db->name,
                                 (int)nlen, name);
    while (*sql == ' ' || *sql == '\t')
        sql++;
    if (*sql == '\0')
        return CONF_ERROR("[database %s]: statement \"%.*s\" has no "
                             "SQL", db->name, (int)nlen, name);
    for (i = 0; i < db->nstmts; i++) {
        old = &db->stmts[i];
        if (strlen(old->name) != nlen || memcmp(old->name, name, nlen) != 0)
            continue;
        if (strcmp(old->sql, sql) == 0)
            return FD_OK;
        return CONF_ERROR("[database %s]: statement \"%.*s\" is "
                             "prepared twice, with two texts", db->name,
                             (int)nlen, name);
    }
    if (db->nstmts == db->stmts_cap) {
        unsigned cap = db->stmts_cap ? 2 * db->stmts_cap : 8;
        more = fd_api_conf_alloc(cap * sizeof(*more));
        if (more == NULL)
            return CONF_ERROR("out of memory");
        if (db->nstmts)
            memcpy(more, db->stmts, db->nstmts * sizeof(*more));
        db->stmts = more;
        db->stmts_cap = cap;
    }
    more = &db->stmts[db->nstmts];
    more->name = fd_api_conf_alloc(nlen + 1);
    more->sql = fd_api_conf_alloc(strlen(sql) + 1);
    if (more->name == NULL || more->sql == NULL)
        return CONF_ERROR("out of memory");
    memcpy(more->name, name, nlen);
    strcpy(more->sql, sql);
    more->nparams = count_params(sql);
    if (more->nparams > DB_MAX_PARAMS)
        return CONF_ERROR("[database %s]: statement \"%s\" has more "
                             "than %d parameters", db->name, more->name,
                             DB_MAX_PARAMS);
    db->nstmts++;
    return FD_OK;
}

/* --- configuration --- */

/* a prepare = line, kept for init (which knows the section's name) */
static int database_set(void *conf, const char *key, const char *value,
                        int own)
{
    fd_db_t *db = conf;
    const char **more = fd_api_conf_alloc((db->nprepare + 1) *
                                          sizeof(*more));

    (void)key;
    (void)own;
    if (more == NULL)
        return CONF_ERROR("out of memory");
    if (db->nprepare)
        memcpy(more, db->prepare, db->nprepare * sizeof(*more));
    more[db->nprepare++] = value;
    db->prepare = more;
    return FD_OK;
}

static int database_init_section(const char *name, void *conf,
                                 unsigned index)
{
    fd_db_t *db = conf;
    unsigned i;

    db->name = name;
    db->index = index;
    fd_api_conf_pos(&db->pos);
    for (i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
        if (fd_api_conf_bounds(db, bounds[i].key,
                               *(int64_t *)((char *)db + bounds[i].offset),
                               bounds[i].min, bounds[i].max,
                               bounds[i].msec) != FD_OK)
            return FD_ERROR;
    if (db->url == NULL)
        return CONF_ERROR("[database %s] has no url", name);
    if (strncmp(db->url, "sqlite:", 7) == 0) {
        db->kind = DB_SQLITE;
        if (db->url[7] == '\0')
            return CONF_ERROR("[database %s]: url = sqlite:PATH needs a "
                              "path", name);
        db->path = fd_api_conf_path(db->url + 7);
        if (db->init && (db->init_path = fd_api_conf_path(db->init)) == NULL)
            return CONF_ERROR("out of memory");
        if (db->path == NULL)
            return CONF_ERROR("out of memory");
    } else if (strncmp(db->url, "postgresql:", 11) == 0 ||
               strncmp(db->url, "postgres:", 9) == 0) {
        db->kind = DB_PG;
        if (db->init)
            return CONF_ERROR("[database %s]: init is for SQLite (create a "
                              "PostgreSQL schema with psql)", name);
    } else {
        return CONF_ERROR("[database %s]: url \"%s\" is neither "
                          "postgresql://... nor sqlite:PATH", name, db->url);
    }
    for (i = 0; i < db->nprepare; i++) {
        const char *v = db->prepare[i];
        size_t n = strcspn(v, " \t");
        fd_api_conf_at_key(db, "prepare");
        if (v[n] == '\0')
            return CONF_ERROR("[database %s]: prepare = NAME SQL", name);
        if (stmt_add(db, v, n, v + n) != FD_OK)
            return FD_ERROR;
    }
    return db->kind == DB_PG ? db_pg_conf(db) : FD_OK;
}

static const fd_api_section_t database_section = {
    .type = "database",
    .keys = database_section_keys,
    .conf_size = sizeof(fd_db_t),
    .name_max = DB_NAME_MAX,
    .max = DB_MAX,
    .init = database_init_section,
    .set = database_set,
};

static void sqlite_conf(const char *name, void *conf, void *data)
{
    fd_db_t *db = conf;
    int *rc = data;

    (void)name;
    if (*rc != FD_OK || db->kind != DB_SQLITE)
        return;
    fd_api_conf_at(&db->pos);
    *rc = db_sqlite_conf(db);
}

/* SQLite files are made (or checked) once the whole configuration is
 * read: the workers' user is known, and every module has prepared its
 * statements. */
static int database_configured(void)
{
    int rc = FD_OK;

    fd_api_section_each("database", sqlite_conf, &rc);
    return rc;
}

static void database_flush(void *data);

static int start_failed;

static void db_start(const char *name, void *conf, void *data)
{
    db_shm_t *area = data;
    fd_db_t *db = conf;

    (void)name;
    db->shm = &area[db->index];
    memset(db->shm, 0, sizeof(*db->shm));
    snprintf(db->shm->name, sizeof(db->shm->name), "%s", db->name);
    db->wait_tail = &db->wait_head;
    db->flush = fd_api_posted_new(database_flush, db);
    if (db->flush == NULL ||
        (db->kind == DB_PG && db_pg_init_worker(db) != FD_OK)) {
        fd_api_log(FD_API_LOG_ERR, 0, "database %s: out of memory",
                   db->name);
        start_failed = 1;
    }
}

static int database_init_worker(void)
{
    db_shm_t *area = fd_api_status_area(FD_API_SELF);

    if (area == NULL)
        return FD_OK; /* no status slots: nothing runs (fastd -t) */
    start_failed = 0;
    fd_api_section_each("database", db_start, area);
    return start_failed ? FD_ERROR : FD_OK;
}

static void db_stop(const char *name, void *conf, void *data)
{
    fd_db_t *db = conf;

    (void)name;
    (void)data;
    if (db->kind == DB_PG)
        db_pg_exit_worker(db);
    fd_api_posted_free(db->flush);
    db->flush = NULL;
}

static void database_exit_worker(void)
{
    fd_api_section_each("database", db_stop, NULL);
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
    fd_api_post(db->flush);
}

static void database_flush(void *data)
{
    fd_db_t *db = data;

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
        fd_api_log(FD_API_LOG_ERR, 0, "database %s: %s: %s", db->name,
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
        fd_resp_retry_after(q->r); /* on the 503 the handler answers */
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
    if (fd_api_on_pool_thread()) {
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
            fd_api_log(FD_API_LOG_NOTICE, 0, "database %s: up again",
                         db->name);
        }
        return;
    }
    db->failed_once = 1;
    if (!db->up_logged) {
        db->up_logged = 1;
        fd_api_log(FD_API_LOG_ERR, 0, "database %s: down: %s (queries get "
                     "503 until a connection is back)", db->name, msg);
    }
    fail_waiting(db, "the database is unreachable");
}

/* --- the public API --- */

fd_db_t *fd_db_get(const char *name)
{
    fd_db_t *db = fd_api_section("database", name);

    /* (the error is said only while a configuration loads) */
    if (db == NULL)
        fd_api_conf_error("unknown database \"%s\" (no [database %s] "
                          "section)", name, name);
    return db;
}

int fd_db_prepare(fd_db_t *db, const char *name, const char *sql)
{
    if (stmt_add(db, name, strlen(name), sql) == FD_OK)
        return FD_OK;
    /* the configuration's memory is had only while it loads */
    if (fd_api_conf_alloc(1) == NULL)
        fd_api_log(FD_API_LOG_ERR, 0, "fd_db_prepare(\"%s\") outside "
                   "init_conf", name);
    return FD_ERROR;
}

/* The statement name and parameters, checked: NULL after a log line */
static const db_stmt_t *checked(fd_db_t *db, const char *name, int n)
{
    const db_stmt_t *st = db_stmt(db, name);

    if (st == NULL)
        fd_api_log(FD_API_LOG_ERR, 0, "database %s: no statement \"%s\" "
                     "(prepare = %s SQL)", db->name, name, name);
    else if (n != st->nparams)
        fd_api_log(FD_API_LOG_ERR, 0, "database %s: statement \"%s\" takes "
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
        fd_api_log(FD_API_LOG_ERR, 0, "database %s: a query before the "
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
        return (fd_str_t){0, NULL};
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

static void database_status(fd_api_status_t *st, const void *area,
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
        if (worker != FD_API_STATUS_RETIRED) {
            fd_api_status_gauge(st, "database_connections",
                            "Connections open.", labels, e->open);
            fd_api_status_gauge(st, "database_busy",
                            "Connections with queries in flight.", labels,
                            e->busy);
            fd_api_status_gauge(st, "database_waiting",
                            "Queries waiting for room on a connection.",
                            labels, e->waiting);
        }
        fd_api_status_counter(st, "database_queries",
                          "Queries and transactions answered.", labels,
                          e->queries);
        fd_api_status_counter(st, "database_errors_unavailable",
                          "Answered 503: unreachable, or connection lost.",
                          labels, e->errors_unavailable);
        fd_api_status_counter(st, "database_errors_timeout",
                          "Answered 504: past statement_timeout.", labels,
                          e->errors_timeout);
        fd_api_status_counter(st, "database_errors_other",
                          "Answered with another error.", labels,
                          e->errors_other);
        fd_api_status_counter(st, "database_rejected",
                          "Refused at once: down, or max_waiting.", labels,
                          e->rejected);
        fd_api_status_counter(st, "database_query_usec_sum",
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
            (into = fd_api_status_named_entry(retired_area, sizeof(*s), DB_MAX,
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

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "database",
    .init_worker = database_init_worker,
    .exit_worker = database_exit_worker,
    .shm_size = DB_MAX * sizeof(db_shm_t),
    .status = database_status,
    .retire = database_retire,
    .section = &database_section,
    .configured = database_configured,
};
