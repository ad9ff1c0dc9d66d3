/*
 * SQLite for [database NAME] url = sqlite:PATH: embedded, no server.
 *
 * SQLite calls block (the file, its locks), so they run on the worker's
 * offload pool: the queries handlers ask for in one loop turn go to the
 * pool as one job (a batch), and their done run on the loop when it is
 * back. Each pool thread keeps its own connection per database (read and
 * write, SQLITE_OPEN_NOMUTEX, write-ahead log) with the statements
 * prepared once; it closes when the thread ends. A blocking handler's
 * queries run at once on its own thread's connection.
 *
 * The file is made when the configuration is loaded and it does not
 * exist (with its directory, owned by the workers' user, who must write
 * there: SQLite writes its journal beside the file), and init = FILE.sql
 * is run in it once. The statements are prepared then too, so that -t
 * finds an error in their SQL.
 *
 * statement_timeout: a progress handler interrupts a statement past it
 * (504); a lock held longer by another writer is 503 (busy).
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd_database.h"

#define BATCH_MAX 64

struct db_batch_s {
    fd_db_t *db;
    db_q_t *head, **tail;
    unsigned n;
    db_batch_t *next;
};

/* --- configuration (the master) --- */

static char *slurp(const char *path, char *err, size_t errlen)
{
    struct stat sb;
    char *text = NULL;
    FILE *f = fopen(path, "r");

    if (f == NULL || fstat(fileno(f), &sb) < 0 || !S_ISREG(sb.st_mode) ||
        sb.st_size > 64 * 1024 * 1024 ||
        (text = malloc((size_t)sb.st_size + 1)) == NULL ||
        fread(text, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        snprintf(err, errlen, "%s", f && !S_ISREG(sb.st_mode)
                                        ? "not a regular file"
                                        : strerror(errno ? errno : EIO));
        free(text);
        text = NULL;
    } else {
        text[sb.st_size] = '\0';
    }
    if (f)
        fclose(f);
    return text;
}

/* path's directory, in place ("/a/b" -> "/a", "b" -> ".") */
static void dir_of(char *path)
{
    char *slash = strrchr(path, '/');

    if (slash == NULL)
        strcpy(path, ".");
    else if (slash == path)
        path[1] = '\0';
    else
        *slash = '\0';
}

/* the workers' user may write in dir? (as root, by the bits) */
static int user_writes(const struct stat *sb, const char **user)
{
    uid_t uid;
    gid_t gid;

    if (!fd_api_conf_user(&uid, &gid, user))
        return 1;
    if (sb->st_uid == uid)
        return (sb->st_mode & S_IWUSR) != 0;
    if (sb->st_gid == gid)
        return (sb->st_mode & S_IWGRP) != 0;
    return (sb->st_mode & S_IWOTH) != 0;
}

static int create(fd_db_t *db)
{
    char dir[4096], err[256];
    const char *user;
    uid_t uid;
    gid_t gid;
    int drop = fd_api_conf_user(&uid, &gid, &user);
    sqlite3 *s = NULL;
    char *text = NULL, *msg = NULL;
    long made = -1;
    int rc;

    if (strlen(db->path) >= sizeof(dir))
        return CONF_ERROR("[database %s]: path too long", db->name);
    strcpy(dir, db->path);
    dir_of(dir);
    if (fd_api_mkdirs(dir, 0755, &made) != FD_OK)
        return CONF_ERROR("[database %s]: mkdir %s: %s", db->name,
                             dir, strerror(errno));
    if (made >= 0 && drop)
        /* the directory is the database's: its journal goes there */
        if (chown(dir, uid, gid) < 0)
            fd_api_log(FD_API_LOG_WARN, errno, "chown(%s)", dir);
    if (db->init_path && (text = slurp(db->init_path, err, sizeof(err))) ==
                             NULL)
        return CONF_ERROR("[database %s]: init \"%s\": %s", db->name,
                             db->init_path, err);
    rc = sqlite3_open_v2(db->path, &s,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(s, "PRAGMA journal_mode=WAL", NULL, NULL, &msg);
    if (rc == SQLITE_OK && text)
        rc = sqlite3_exec(s, text, NULL, NULL, &msg);
    free(text);
    if (rc != SQLITE_OK) {
        fd_api_conf_error("[database %s]: creating %s%s%s: %s", db->name,
                      db->path, db->init_path ? " from " : "",
                      db->init_path ? db->init_path : "",
                      msg ? msg : s ? sqlite3_errmsg(s) : sqlite3_errstr(rc));
        sqlite3_free(msg);
        sqlite3_close(s);
        unlink(db->path);
        return FD_ERROR;
    }
    sqlite3_close(s);
    if (drop && chown(db->path, uid, gid) < 0)
        fd_api_log(FD_API_LOG_WARN, errno, "chown(%s)", db->path);
    fd_api_log(FD_API_LOG_NOTICE, 0, "database %s: %s created%s%s", db->name,
                 db->path, db->init_path ? " from " : "",
                 db->init_path ? db->init_path : "");
    return FD_OK;
}

/* fastd -t and the file is missing: could the start make it? The
 * nearest ancestor that exists must be a directory we may write in. */
static int could_create(fd_db_t *db)
{
    struct stat sb;
    char dir[4096];
    char *slash;

    if (strlen(db->path) >= sizeof(dir))
        return CONF_ERROR("[database %s]: path too long", db->name);
    strcpy(dir, db->path);
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
        errno = 0;
    if (errno)
        return CONF_ERROR("[database %s]: %s cannot be created (%s: "
                             "%s)", db->name, db->path, dir,
                             strerror(errno));
    if (db->init_path && access(db->init_path, R_OK) != 0)
        return CONF_ERROR("[database %s]: init \"%s\": %s", db->name,
                             db->init_path, strerror(errno));
    return FD_OK;
}

/* The statements, prepared against the schema of s: FD_OK, or FD_ERROR
 * after fd_conf_error() naming the first that fails */
static int check_stmts(fd_db_t *db, sqlite3 *s)
{
    sqlite3_stmt *st;
    unsigned i;

    for (i = 0; i < db->nstmts; i++) {
        if (sqlite3_prepare_v2(s, db->stmts[i].sql, -1, &st, NULL) !=
            SQLITE_OK)
            return CONF_ERROR("[database %s]: statement %s: %s",
                                 db->name, db->stmts[i].name,
                                 sqlite3_errmsg(s));
        sqlite3_finalize(st);
    }
    return FD_OK;
}

/* fastd -t, the file missing: the statements against what init would
 * make, in memory */
static int check_in_memory(fd_db_t *db)
{
    char err[256], *text = NULL, *msg = NULL;
    sqlite3 *s = NULL;
    int rc;

    if (db->init_path && (text = slurp(db->init_path, err, sizeof(err))) ==
                             NULL)
        return CONF_ERROR("[database %s]: init \"%s\": %s", db->name,
                             db->init_path, err);
    rc = sqlite3_open(":memory:", &s);
    if (rc == SQLITE_OK && text)
        rc = sqlite3_exec(s, text, NULL, NULL, &msg);
    free(text);
    if (rc != SQLITE_OK)
        fd_api_conf_error("[database %s]: init \"%s\": %s", db->name,
                      db->init_path ? db->init_path : "",
                      msg ? msg : s ? sqlite3_errmsg(s) : sqlite3_errstr(rc));
    else
        rc = check_stmts(db, s) == FD_OK ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_free(msg);
    sqlite3_close(s);
    return rc == SQLITE_OK ? FD_OK : FD_ERROR;
}

int db_sqlite_conf(fd_db_t *db)
{
    const char *user = NULL;
    struct stat sb;
    sqlite3 *s = NULL;
    char dir[4096];
    int rc;

    if (!sqlite3_threadsafe())
        return CONF_ERROR("[database %s]: SQLite is not built "
                             "thread-safe", db->name);
    if (stat(db->path, &sb) < 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return CONF_ERROR("[database %s]: %s: %s", db->name,
                                 db->path, strerror(errno));
        if (fd_api_conf_test())
            return could_create(db) == FD_OK ? check_in_memory(db)
                                             : FD_ERROR;
        if (create(db) != FD_OK)
            return FD_ERROR;
    }
    snprintf(dir, sizeof(dir), "%s", db->path);
    dir_of(dir);
    if (stat(dir, &sb) == 0 && !user_writes(&sb, &user))
        fd_api_log(FD_API_LOG_WARN, 0, "database %s: the workers' user %s "
                   "cannot write in %s, where SQLite keeps its journal: "
                   "writes will fail", db->name, user, dir);
    rc = sqlite3_open_v2(db->path, &s, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        fd_api_conf_error("[database %s]: %s: %s", db->name, db->path,
                      s ? sqlite3_errmsg(s) : sqlite3_errstr(rc));
        sqlite3_close(s);
        return FD_ERROR;
    }
    rc = check_stmts(db, s);
    sqlite3_close(s);
    return rc;
}

/* --- a pool thread's connections --- */

typedef struct {
    db_tconn_t c;              /* first */
    sqlite3 *s;
    sqlite3_stmt **st;         /* [db->nstmts], prepared on first use */
    uint64_t deadline_usec;    /* the statement running now */
} tconn_t;

static void tconn_close(db_tconn_t *c)
{
    tconn_t *t = (tconn_t *)c;
    unsigned i;

    for (i = 0; i < c->db->nstmts; i++)
        sqlite3_finalize(t->st[i]);
    sqlite3_close(t->s);
    DB_INC(c->db, open, -1);
    free(t);
}

/* statement_timeout: past the deadline, the statement is interrupted */
static int progress(void *data)
{
    tconn_t *t = data;

    return t->deadline_usec && db_now_usec() > t->deadline_usec;
}

/* a void * for db_sync_t: the thread's tconn_t */
static void *tconn(fd_db_t *db, fd_db_res_t *res)
{
    tconn_t *t = (tconn_t *)db_tconn_find(db);
    int rc;

    if (t)
        return t;
    t = calloc(1, sizeof(*t) + db->nstmts * sizeof(sqlite3_stmt *));
    if (t == NULL) {
        db_set_error(res, DB_UNAVAILABLE, "out of memory");
        return NULL;
    }
    t->c.db = db;
    t->c.close = tconn_close;
    t->st = (sqlite3_stmt **)(t + 1);
    rc = sqlite3_open_v2(db->path, &t->s,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        db_set_error(res, DB_UNAVAILABLE,
                     t->s ? sqlite3_errmsg(t->s) : sqlite3_errstr(rc));
        sqlite3_close(t->s);
        free(t);
        return NULL;
    }
    sqlite3_busy_timeout(t->s, db->statement_timeout
                                   ? (int)db_min(db->statement_timeout,
                                                 INT32_MAX)
                                   : 5000);
    sqlite3_progress_handler(t->s, 1000, progress, t);
    DB_INC(db, open, 1); /* a connection of a pool thread's */
    db_tconn_add(&t->c);
    return t;
}

/* rc of a failed step or prepare as a status */
static void error_of(tconn_t *t, int rc, fd_db_res_t *res)
{
    int status = DB_FAILED;

    if (rc == SQLITE_INTERRUPT)
        status = DB_TIMEOUT;
    else if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
        status = DB_UNAVAILABLE;
    db_set_error(res, status, rc == SQLITE_INTERRUPT
                                  ? "canceled: past statement_timeout"
                                  : sqlite3_errmsg(t->s));
}

/* The rows of a statement into res: values in one buffer, then cells
 * pointing into it (res->cells is the one allocation) */
static int rows(tconn_t *t, sqlite3_stmt *st, fd_db_res_t *res)
{
    size_t ncells = 0, cap = 0, blen = 0, bcap = 0, i;
    struct { size_t off, len; int null; } *cell = NULL, *more;
    char *buf = NULL, *nb;
    int rc, cols = sqlite3_column_count(st), c, nrows = 0;

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (c = 0; c < cols; c++) {
            const unsigned char *v = sqlite3_column_text(st, c);
            size_t n = (size_t)sqlite3_column_bytes(st, c);
            if (ncells == cap) {
                cap = cap ? 2 * cap : 16;
                if ((more = realloc(cell, cap * sizeof(*cell))) == NULL)
                    goto nomem;
                cell = (void *)more;
            }
            cell[ncells].null = v == NULL;
            cell[ncells].off = blen;
            cell[ncells].len = n;
            if (blen + n + 1 > bcap) {
                bcap = db_max(2 * bcap, blen + n + 1 + 256);
                if ((nb = realloc(buf, bcap)) == NULL)
                    goto nomem;
                buf = nb;
            }
            if (n)
                memcpy(buf + blen, v, n);
            buf[blen + n] = '\0';
            blen += n + 1;
            ncells++;
        }
        nrows++;
    }
    if (rc != SQLITE_DONE) {
        error_of(t, rc, res);
        free(cell);
        free(buf);
        return FD_ERROR;
    }
    free(res->cells);
    res->cells = malloc(ncells * sizeof(fd_str_t) + blen + 1);
    if (res->cells == NULL)
        goto nomem;
    nb = (char *)(res->cells + ncells);
    if (blen)
        memcpy(nb, buf, blen);
    for (i = 0; i < ncells; i++)
        res->cells[i] = cell[i].null ? (fd_str_t){0, NULL}
                                     : (fd_str_t){cell[i].len,
                                                  nb + cell[i].off};
    res->rows = nrows;
    res->cols = cols;
    res->changes = sqlite3_changes(t->s);
    free(cell);
    free(buf);
    return FD_OK;

nomem:
    free(cell);
    free(buf);
    db_set_error(res, DB_FAILED, "out of memory");
    return FD_ERROR;
}

static int exec_one(void *conn, db_q_t *q, fd_db_res_t *res)
{
    tconn_t *t = conn;
    unsigned i = (unsigned)(q->stmt - t->c.db->stmts);
    sqlite3_stmt *st = t->st[i];
    char name[16];
    int rc, k, idx;

    if (st == NULL) {
        rc = sqlite3_prepare_v3(t->s, q->stmt->sql, -1,
                                SQLITE_PREPARE_PERSISTENT, &st, NULL);
        if (rc != SQLITE_OK) {
            error_of(t, rc, res);
            return FD_ERROR;
        }
        t->st[i] = st;
    }
    for (k = 0; k < q->nparams; k++) {
        snprintf(name, sizeof(name), "$%d", k + 1);
        idx = sqlite3_bind_parameter_index(st, name);
        if (idx > 0)
            sqlite3_bind_text(st, idx, q->params[k], q->lens[k],
                              SQLITE_STATIC);
    }
    t->deadline_usec = t->c.db->statement_timeout
                           ? db_now_usec() + t->c.db->statement_timeout * 1000
                           : 0;
    rc = rows(t, st, res);
    t->deadline_usec = 0;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

static void exec_simple(void *conn, const char *sql, fd_db_res_t *res)
{
    tconn_t *t = conn;
    int rc = sqlite3_exec(t->s, sql, NULL, NULL, NULL);

    if (rc != SQLITE_OK)
        error_of(t, rc, res);
}

static void run(fd_db_t *db, db_q_t *q)
{
    static const db_sync_t lite = {tconn, exec_one, exec_simple,
                                   "BEGIN IMMEDIATE"};

    db_run_sync(&lite, db, q);
}

void db_sqlite_run_blocking(fd_db_t *db, db_q_t *q)
{
    run(db, q);
}

/* --- batches: the loop's queries of a turn, one job on the pool --- */

static void batch_work(void *data)
{
    db_batch_t *b = data;
    db_q_t *q;

    for (q = b->head; q; q = q->next)
        run(b->db, q);
}

static void batch_done(void *data)
{
    db_batch_t *b = data;
    db_q_t *q, *next;

    for (q = b->head; q; q = next) {
        next = q->next;
        b->db->inflight--;
        db_complete(q);
    }
    DB_SET(b->db, waiting, b->db->inflight);
    free(b);
}

int db_sqlite_send(fd_db_t *db, db_q_t *q)
{
    db_batch_t *b = db->batch;

    if (b == NULL || b->n == BATCH_MAX) {
        if ((b = calloc(1, sizeof(*b))) == NULL)
            return FD_ERROR;
        b->db = db;
        b->tail = &b->head;
        b->next = db->batch; /* the full ones behind it */
        db->batch = b;
    }
    q->next = NULL;
    *b->tail = q;
    b->tail = &q->next;
    b->n++;
    db->inflight++;
    DB_SET(db, waiting, db->inflight);
    db_post_flush(db);
    return FD_OK;
}

void db_sqlite_flush(fd_db_t *db)
{
    db_batch_t *b, *next;
    db_q_t *q;

    for (b = db->batch, db->batch = NULL; b; b = next) {
        next = b->next;
        b->next = NULL;
        if (fd_api_offload_call(b, batch_work, batch_done) == FD_OK)
            continue;
        for (q = b->head; q; q = q->next)
            db_set_error(&q->res, DB_UNAVAILABLE, "no offload thread");
        batch_done(b);
    }
}
