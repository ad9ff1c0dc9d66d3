/*
 * The database module's own header: what its three files share
 * (fd_database_module.c: sections, the public fd_db_* calls, dispatch,
 * figures; fd_database_pg.c: PostgreSQL; fd_database_sqlite.c: SQLite).
 * Modules use the public API (fastd.h), never this.
 */
#ifndef FD_DATABASE_H
#define FD_DATABASE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastd.h"

#define DB_MAX 16           /* [database] sections per configuration */
#define DB_NAME_MAX 32      /* name bytes, with the NUL */
#define DB_MAX_PARAMS 64

#define db_min(a, b) ((a) < (b) ? (a) : (b))
#define db_max(a, b) ((a) > (b) ? (a) : (b))
/* fd_api_conf_error(), then FD_ERROR */
#define CONF_ERROR(...) (fd_api_conf_error(__VA_ARGS__), FD_ERROR)

enum { DB_PG = 1, DB_SQLITE };

/* fd_db_res_t.status */
#define DB_UNAVAILABLE 503
#define DB_TIMEOUT 504
#define DB_FAILED 500

/* A named statement, and its parameters' count ($1 .. $n) */
typedef struct {
    char *name;
    char *sql;
    int nparams;
} db_stmt_t;

/* One database's figures in the worker's status slot */
typedef struct {
    char name[DB_NAME_MAX];
    uint64_t open;             /* gauges: connections open */
    uint64_t busy;             /* ... with queries in flight */
    uint64_t waiting;          /* queries waiting for room */
    uint64_t queries;          /* counters */
    uint64_t errors_unavailable;
    uint64_t errors_timeout;
    uint64_t errors_other;
    uint64_t rejected;         /* 503 at once: down, or max_waiting */
    uint64_t query_usec_sum;
} db_shm_t;

struct fd_db_res_s {
    int status;                /* 0 or DB_* */
    const char *error;
    int rows, cols;
    int64_t changes;
    void *pg;                  /* PGresult *, PostgreSQL */
    fd_str_t *cells;           /* rows * cols, SQLite (malloc'd) */
};

typedef struct db_q_s db_q_t;
typedef struct db_conn_s db_conn_t;
typedef struct db_batch_s db_batch_t;

enum { Q_QUERY = 1, Q_TXN, Q_PART, Q_SYNC, Q_PREPARE };

/* A query (or a transaction, or a connection's own step) on its way */
struct db_q_s {
    db_q_t *next;
    int kind;                  /* Q_* */
    fd_request_t *r;
    fd_db_t *db;
    const db_stmt_t *stmt;
    int nparams;
    const char **params;       /* in the same allocation */
    int *lens;
    fd_db_done_pt done;
    void *data;
    db_q_t *parts, **parts_last; /* Q_TXN: its statements (Q_PART) */
    unsigned nparts;
    db_q_t *txn;               /* Q_PART: its transaction */
    unsigned left;             /* Q_TXN: parts whose results are owed */
    unsigned tries;            /* sends: an aborted read goes again */
    unsigned aborted:1;        /* PGRES_PIPELINE_ABORTED: not run */
    uint64_t start_usec;
    fd_db_res_t res;
};

/* [database NAME]: its keys, then this worker's state (a worker's cycle
 * is its own after fork) */
struct fd_db_s {
    const char *url;
    int64_t pool;
    uint64_t connect_timeout;
    uint64_t statement_timeout;
    int64_t max_waiting;
    int64_t pipeline;
    const char *init;
    const char **prepare;      /* prepare = lines, in order */
    unsigned nprepare;

    const char *name;
    fd_api_conf_pos_t pos;     /* the section's line, for configured */
    int kind;                  /* DB_PG, DB_SQLITE */
    const char *path;          /* SQLite: the file, resolved */
    const char *init_path;
    void *pg_params;           /* PostgreSQL: its connection keywords */
    db_stmt_t *stmts;
    unsigned nstmts, stmts_cap; /* in the configuration's memory */
    unsigned index;            /* entry in the status area */

    /* the worker's */
    db_shm_t *shm;
    db_conn_t *conns;          /* PostgreSQL: pool of them */
    unsigned ready;            /* connections that take queries */
    unsigned failed_once:1;    /* a connection failed since the last up:
                                  with none ready, 503 at once */
    unsigned up_logged:1;
    db_q_t *wait_head, **wait_tail;
    unsigned waiting;
    fd_api_posted_t *flush;    /* the end of the turn: syncs, batches */
    db_batch_t *batch;         /* SQLite: this turn's queries */
    unsigned inflight;         /* SQLite: queries on the pool */
};

/* fd_database_module.c */
uint64_t db_now_usec(void);
/* A query's end: figures, then its done (or its transaction's), then
 * it is freed. */
void db_complete(db_q_t *q);
void db_free_q(db_q_t *q);
const db_stmt_t *db_stmt(const fd_db_t *db, const char *name);
void db_set_error(fd_db_res_t *res, int status, const char *msg);
void db_post_flush(fd_db_t *db);
/* The database's state changed for the logs: up (1) or down (0), msg */
void db_state(fd_db_t *db, int up, const char *msg);
void db_dispatch_waiting(fd_db_t *db);
/* atomic: a blocking handler counts from its pool thread */
#define DB_INC(db, f, v)                                                     \
    __atomic_fetch_add(&(db)->shm->f, (uint64_t)(v), __ATOMIC_RELAXED)
#define DB_SET(db, f, v)                                                     \
    __atomic_store_n(&(db)->shm->f, (uint64_t)(v), __ATOMIC_RELAXED)

/* A pool thread's connection to one database: each driver's begins with
 * this. The module keeps a thread's list (one thread-specific key for
 * every driver) and closes them, by ->close, when the thread ends. */
typedef struct db_tconn_s {
    fd_db_t *db;
    void (*close)(struct db_tconn_s *t);
    struct db_tconn_s *next;
} db_tconn_t;
db_tconn_t *db_tconn_find(fd_db_t *db); /* this thread's for db, or NULL */
void db_tconn_add(db_tconn_t *t);

/* A driver's synchronous steps, on a pool thread: its connection of
 * that thread's, one statement, and a statement of no parameters */
typedef struct {
    void *(*conn)(fd_db_t *db, fd_db_res_t *res);
    int (*exec)(void *conn, db_q_t *q, fd_db_res_t *res);
    void (*simple)(void *conn, const char *sql, fd_db_res_t *res);
    const char *begin;         /* what opens a transaction */
} db_sync_t;
/* q (a query or a transaction) run now with d's steps */
void db_run_sync(const db_sync_t *d, fd_db_t *db, db_q_t *q);

/* fd_database_pg.c */
int db_pg_conf(fd_db_t *db);
int db_pg_init_worker(fd_db_t *db);
void db_pg_exit_worker(fd_db_t *db);
/* Sends q (a query or a transaction) on a ready connection with room:
 * FD_OK, or FD_AGAIN when every one is full (the caller queues it). */
int db_pg_send(fd_db_t *db, db_q_t *q);
void db_pg_flush(fd_db_t *db);
/* On a pool thread: q run now on that thread's own connection */
void db_pg_run_blocking(fd_db_t *db, db_q_t *q);
void db_pg_res_free(fd_db_res_t *res);
fd_str_t db_pg_value(const fd_db_res_t *res, int row, int col);

/* fd_database_sqlite.c */
int db_sqlite_conf(fd_db_t *db);
int db_sqlite_send(fd_db_t *db, db_q_t *q);
void db_sqlite_flush(fd_db_t *db);
void db_sqlite_run_blocking(fd_db_t *db, db_q_t *q);

#endif
