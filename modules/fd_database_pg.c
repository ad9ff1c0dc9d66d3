/*
 * PostgreSQL for [database NAME], through libpq, on the worker's loop.
 *
 * Each connection is a socket on the loop (epoll or io_uring), opened
 * with PQconnectStartParams/PQconnectPoll and then put in pipeline mode:
 * queries are PQsendQueryPrepared() into libpq's buffer as handlers ask,
 * and at the end of the loop turn one PQpipelineSync() per connection
 * sends them all in one write. Results are read as the socket becomes
 * readable and matched to the queries in the order sent (c->head).
 *
 * Between two syncs the server runs statements as one implicit
 * transaction; an error there aborts the rest up to the sync. So a
 * transaction (fd_db_begin/commit) goes alone between two syncs, all or
 * none; and a read aborted by another query's error (a statement
 * timeout) has not run, and is sent again (twice at most).
 *
 * A statement's prepare (every prepare = line, and those the modules
 * made) goes first on each new connection, in the same pipeline.
 *
 * On a pool thread (a blocking handler) a query runs synchronously on a
 * connection of that thread's own (PQexecPrepared), opened on first use
 * and closed when the thread ends.
 */
#include <sys/epoll.h>
#include <libpq-fe.h>

#include "fd_core.h"
#include "fd_event.h"
#include "fd_database.h"

#define BACKOFF_MIN 100
#define BACKOFF_MAX 5000
#define RETRIES 2             /* an aborted read is sent again so often */

enum { C_DOWN, C_CONNECTING, C_READY, C_BROKEN };

struct db_conn_s {
    fd_event_t ev;             /* first: the loop hands us its address */
    fd_db_t *db;
    PGconn *pg;
    int state;                 /* C_* */
    uint32_t events;           /* registered for */
    unsigned registered:1;
    unsigned fatal:1;          /* the server ended it (an answer of class
                                  08 or 57P): what follows will not run */
    unsigned sync_due:1;       /* queries sent since the last sync */
    unsigned inflight;         /* queries and transactions sent, open */
    db_q_t *head, **tail;      /* sent, in order, syncs included */
    fd_timer_t timer;          /* connect, backoff, stall */
    fd_msec_t progress;        /* when it last answered, or got its first
                                  query after none (pick) */
    fd_msec_t backoff;
    const char *why;           /* C_BROKEN: the error */
};

/* the keywords of a connection: the url (expanded), then ours */
typedef struct {
    const char *kw[4];
    const char *val[4];
    char options[64];
} db_pg_params_t;

/* --- configuration --- */

int db_pg_conf(fd_conf_t *cf, fd_db_t *db)
{
    PQconninfoOption *o;
    char *err = NULL;
    db_pg_params_t *p;

    o = PQconninfoParse(db->url, &err);
    if (o == NULL) {
        if (err)
            err[strcspn(err, "\n")] = '\0'; /* libpq ends it with one */
        fd_conf_error(cf, "[database %s]: url: %s", db->name,
                      err ? err : "out of memory");
        PQfreemem(err);
        return FD_ERROR;
    }
    PQconninfoFree(o);
    p = fd_pcalloc(cf->pool, sizeof(*p));
    if (p == NULL)
        return fd_conf_error(cf, "out of memory");
    p->kw[0] = "dbname";
    p->val[0] = db->url;
    p->kw[1] = "fallback_application_name";
    p->val[1] = "fastd";
    if (db->statement_timeout) {
        /* the server cancels a statement past it (SQLSTATE 57014) */
        snprintf(p->options, sizeof(p->options), "-c statement_timeout=%lu",
                 (unsigned long)db->statement_timeout);
        p->kw[2] = "options";
        p->val[2] = p->options;
    }
    db->pg_params = p;
    return FD_OK;
}

/* --- results --- */

void db_pg_res_free(fd_db_res_t *res)
{
    PQclear(res->pg);
    res->pg = NULL;
}

fd_str_t db_pg_value(const fd_db_res_t *res, int row, int col)
{
    if (PQgetisnull(res->pg, row, col))
        return fd_null_string;
    return (fd_str_t){(size_t)PQgetlength(res->pg, row, col),
                      PQgetvalue(res->pg, row, col)};
}

/* A result (TUPLES_OK or COMMAND_OK) into res, which keeps it */
static void take(fd_db_res_t *res, PGresult *pr)
{
    const char *n;

    if (res->pg) {
        PQclear(pr);
        return;
    }
    res->pg = pr;
    res->rows = PQntuples(pr);
    res->cols = PQnfields(pr);
    n = PQcmdTuples(pr);
    res->changes = n && *n ? strtoll(n, NULL, 10) : 0;
}

/* An error result as a status: the class of its SQLSTATE */
static void error_of(fd_db_res_t *res, const PGresult *pr)
{
    const char *state = PQresultErrorField(pr, PG_DIAG_SQLSTATE);
    int status = DB_FAILED;

    if (state && strcmp(state, "57014") == 0)
        status = DB_TIMEOUT;            /* query_canceled: the timeout */
    else if (state && (strncmp(state, "08", 2) == 0 ||  /* connection */
                       strncmp(state, "57P", 3) == 0 || /* shutdown */
                       strncmp(state, "53", 2) == 0))   /* resources */
        status = DB_UNAVAILABLE;
    db_set_error(res, status, PQresultErrorMessage(pr));
}

/* --- connections --- */

static void conn_event(fd_event_t *ev, uint32_t events);
static void conn_timer(fd_timer_t *t);
static void conn_connect(db_conn_t *c);

/* The socket's registration: level-triggered on both backends, so what
 * libpq leaves (PQconsumeInput reads once, not to EAGAIN) fires again */
static void conn_register(db_conn_t *c, uint32_t events)
{
    int fd = PQsocket(c->pg);

    if (c->registered && c->ev.fd != fd) {
        /* libpq opened another socket (a next host, sslmode=prefer) */
        fd_event_del(&c->ev);
        c->registered = 0;
    }
    c->ev.fd = fd;
    if (!c->registered) {
        if (fd < 0 || fd_event_add(&c->ev, events) != 0)
            return;
        c->registered = 1;
    } else if (c->events != events) {
        fd_event_mod(&c->ev, events);
    }
    c->events = events;
}

static void conn_close(db_conn_t *c)
{
    if (c->registered) {
        /* out of the loop before libpq closes the socket (io_uring holds
         * a registered one open) */
        fd_event_del(&c->ev);
        fd_event_flush();
        c->registered = 0;
    }
    c->ev.fd = -1;
    if (c->pg) {
        PQfinish(c->pg);
        c->pg = NULL;
        DB_INC(c->db, open, -1);
    }
}

static void q_push(db_conn_t *c, db_q_t *q)
{
    q->next = NULL;
    *c->tail = q;
    c->tail = &q->next;
}

static db_q_t *q_pop(db_conn_t *c)
{
    db_q_t *q = c->head;

    c->head = q->next;
    if (c->head == NULL)
        c->tail = &c->head;
    q->next = NULL;
    return q;
}

static db_q_t *marker(fd_db_t *db, int kind)
{
    db_q_t *q = calloc(1, sizeof(*q));

    if (q) {
        q->kind = kind;
        q->db = db;
    }
    return q;
}

static void busy_update(db_conn_t *c, unsigned before)
{
    if (!before != !c->inflight)
        DB_INC(c->db, busy, c->inflight ? 1 : -1);
}

/* A query (or transaction) whose results are all in */
static void finish(db_conn_t *c, db_q_t *q)
{
    fd_db_t *db = c->db;
    unsigned before = c->inflight;

    c->inflight--;
    busy_update(c, before);
    if (q->aborted && q->res.status == 0 && q->tries <= RETRIES) {
        /* not run (another statement's error aborted it): again, first */
        q->aborted = 0;
        if (q->res.pg)
            db_pg_res_free(&q->res);
        q->next = db->wait_head;
        db->wait_head = q;
        if (db->wait_tail == &db->wait_head)
            db->wait_tail = &q->next;
        db->waiting++;
        return;
    }
    if (q->aborted)
        db_set_error(&q->res, DB_UNAVAILABLE, "aborted in its pipeline");
    db_complete(q);
}

/* A transaction's part is in (m, its marker in the pipe): the
 * transaction ends with its last, whose result is the transaction's */
static void part_done(db_conn_t *c, db_q_t *m)
{
    db_q_t *t = m->txn;

    if (m->res.status)
        db_set_error(&t->res, m->res.status,
                     m->res.error ? m->res.error : "failed");
    if (m->aborted)
        t->aborted = 1;
    if (--t->left == 0) {
        if (m->res.pg && !t->res.status) {
            t->res.pg = m->res.pg;
            t->res.rows = m->res.rows;
            t->res.cols = m->res.cols;
            t->res.changes = m->res.changes;
            m->res.pg = NULL;
        }
        db_free_q(m);
        finish(c, t);
        return;
    }
    db_free_q(m);
}

/* Every query on c fails (the connection is gone); then back off */
static void conn_fail(db_conn_t *c, const char *why)
{
    fd_db_t *db = c->db;
    int was_ready = c->state == C_READY || c->state == C_BROKEN;
    unsigned before = c->inflight;
    db_q_t *q, *t, *again = NULL, **again_last = &again;
    char msg[256];

    snprintf(msg, sizeof(msg), "%s", why ? why : "connection lost");
    msg[strcspn(msg, "\n")] = '\0';
    conn_close(c);
    c->state = C_DOWN;
    while (c->head) {
        q = q_pop(c);
        t = q;
        if (q->kind == Q_PART) {
            t = q->txn;
            db_free_q(q);
            if (--t->left)
                continue;
        } else if (q->kind != Q_QUERY) {
            db_free_q(q);
            continue;
        }
        if (c->fatal && !t->res.status && t->tries <= RETRIES) {
            /* behind the server's last word: never run; again, in order,
             * on another connection */
            t->aborted = 0;
            t->next = NULL;
            *again_last = t;
            again_last = &t->next;
            continue;
        }
        db_set_error(&t->res, DB_UNAVAILABLE, msg);
        db_complete(t);
    }
    if (again) {
        unsigned n = 0;
        for (q = again; q; q = q->next)
            n++;
        *again_last = db->wait_head;
        if (db->wait_head == NULL)
            db->wait_tail = again_last;
        db->wait_head = again;
        db->waiting += n;
    }
    c->fatal = 0;
    c->inflight = 0;
    busy_update(c, before);
    if (was_ready && db->ready)
        db->ready--;
    c->backoff = c->backoff ? fd_min(2 * c->backoff, BACKOFF_MAX)
                            : BACKOFF_MIN;
    fd_timer_add(&c->timer, c->backoff);
    if (db->ready == 0)
        db_state(db, 0, msg); /* fails what waits, the queries above too */
    else if (again)
        db_dispatch_waiting(db);
}

/* Send c's prepares; it then takes queries (they follow in the pipe) */
static int conn_ready(db_conn_t *c)
{
    fd_db_t *db = c->db;
    db_q_t *q;
    unsigned i;

    if (PQsetnonblocking(c->pg, 1) != 0 || !PQenterPipelineMode(c->pg))
        return FD_ERROR;
    for (i = 0; i < db->nstmts; i++) {
        if ((q = marker(db, Q_PREPARE)) == NULL)
            return FD_ERROR;
        q->stmt = &db->stmts[i];
        if (!PQsendPrepare(c->pg, q->stmt->name, q->stmt->sql, 0, NULL)) {
            free(q);
            return FD_ERROR;
        }
        q_push(c, q);
    }
    if (db->nstmts)
        c->sync_due = 1;
    c->state = C_READY;
    c->backoff = 0;
    if (fd_timer_armed(&c->timer))
        fd_timer_del(&c->timer);
    db->ready++;
    db_state(db, 1, NULL);
    conn_register(c, EPOLLIN);
    db_post_flush(db);
    return FD_OK;
}

static void conn_connect(db_conn_t *c)
{
    db_pg_params_t *p = c->db->pg_params;

    c->pg = PQconnectStartParams(p->kw, p->val, 1);
    if (c->pg == NULL) {
        conn_fail(c, "out of memory");
        return;
    }
    DB_INC(c->db, open, 1);
    if (PQstatus(c->pg) == CONNECTION_BAD) {
        conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    c->state = C_CONNECTING;
    conn_register(c, EPOLLOUT);
    if (!c->registered) {
        conn_fail(c, "cannot watch its socket");
        return;
    }
    fd_timer_add(&c->timer, c->db->connect_timeout);
}

static void conn_poll(db_conn_t *c)
{
    switch (PQconnectPoll(c->pg)) {
    case PGRES_POLLING_READING:
        conn_register(c, EPOLLIN);
        break;
    case PGRES_POLLING_WRITING:
        conn_register(c, EPOLLOUT);
        break;
    case PGRES_POLLING_OK:
        if (conn_ready(c) != FD_OK)
            conn_fail(c, PQerrorMessage(c->pg));
        else
            db_dispatch_waiting(c->db);
        return;
    default:
        conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    if (!c->registered)
        conn_fail(c, "cannot watch its socket");
}

/* The results that are in, matched to what was sent */
static void conn_read(db_conn_t *c)
{
    PGresult *pr;
    db_q_t *q;

    c->progress = fd_current_msec;
    if (!PQconsumeInput(c->pg)) {
        conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    while (c->head && !PQisBusy(c->pg)) {
        q = c->head;
        pr = PQgetResult(c->pg);
        if (q->kind == Q_SYNC) {
            if (pr == NULL)
                break; /* not in yet */
            PQclear(pr);
            db_free_q(q_pop(c));
            continue;
        }
        if (pr == NULL) { /* q's results end */
            q_pop(c);
            if (q->kind == Q_QUERY)
                finish(c, q);
            else if (q->kind == Q_PART)
                part_done(c, q);
            else
                db_free_q(q);
            continue;
        }
        switch (PQresultStatus(pr)) {
        case PGRES_TUPLES_OK:
        case PGRES_COMMAND_OK:
            if (q->kind == Q_PREPARE)
                PQclear(pr);
            else
                take(&q->res, pr);
            break;
        case PGRES_PIPELINE_ABORTED:
            q->aborted = 1;
            PQclear(pr);
            break;
        default:
            if (q->kind == Q_PREPARE)
                fd_log_error(FD_LOG_ERR, 0, "database %s: prepare %s: %s",
                             c->db->name, q->stmt->name,
                             PQresultErrorMessage(pr));
            else
                error_of(&q->res, pr);
            if (q->res.status == DB_UNAVAILABLE)
                c->fatal = 1; /* the server is closing it */
            PQclear(pr);
            break;
        }
    }
    if (PQstatus(c->pg) == CONNECTION_BAD) {
        conn_fail(c, PQerrorMessage(c->pg));
        return;
    }
    if (c->head == NULL && fd_timer_armed(&c->timer))
        fd_timer_del(&c->timer); /* nothing owed: no stall to watch */
    else if (c->head && c->db->statement_timeout)
        /* progress: the stall clock starts again */
        fd_timer_add(&c->timer, c->db->statement_timeout + 2000);
    if (c->db->wait_head)
        db_dispatch_waiting(c->db);
}

static void conn_write(db_conn_t *c)
{
    int rc = PQflush(c->pg);

    if (rc < 0)
        conn_fail(c, PQerrorMessage(c->pg));
    else
        conn_register(c, rc ? EPOLLIN | EPOLLOUT : EPOLLIN);
}

static void conn_event(fd_event_t *ev, uint32_t events)
{
    db_conn_t *c = (db_conn_t *)ev;

    if (c->state == C_CONNECTING) {
        conn_poll(c);
        return;
    }
    if (c->state != C_READY || c->pg == NULL)
        return;
    if (events & EPOLLOUT) {
        conn_write(c);
        if (c->state != C_READY)
            return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        conn_read(c);
}

static void conn_timer(fd_timer_t *t)
{
    db_conn_t *c = (db_conn_t *)((char *)t - offsetof(db_conn_t, timer));

    switch (c->state) {
    case C_DOWN:
        conn_connect(c);
        break;
    case C_CONNECTING:
        conn_fail(c, "connect_timeout");
        break;
    case C_BROKEN:
        conn_fail(c, c->why);
        break;
    default:
        conn_fail(c, "no answer within statement_timeout");
        break;
    }
}

int db_pg_init_worker(fd_db_t *db)
{
    fd_int_t i;

    db->conns = calloc((size_t)db->pool, sizeof(db_conn_t));
    if (db->conns == NULL)
        return FD_ERROR;
    for (i = 0; i < db->pool; i++) {
        db_conn_t *c = &db->conns[i];
        c->db = db;
        c->ev.fd = -1;
        c->ev.handler = conn_event;
        c->timer.handler = conn_timer;
        c->tail = &c->head;
        conn_connect(c);
    }
    return FD_OK;
}

void db_pg_exit_worker(fd_db_t *db)
{
    fd_int_t i;

    for (i = 0; db->conns && i < db->pool; i++) {
        db_conn_t *c = &db->conns[i];
        if (fd_timer_armed(&c->timer))
            fd_timer_del(&c->timer);
        conn_close(c);
    }
}

/* --- sending --- */

/* The first ready connection with room: queries pack onto as few
 * connections as the load needs (each a server process to wake: on a
 * shared CPU the fewest is the fastest, measured), and spill onto the
 * next only when one has pipeline queries in flight. One that owes
 * answers and gave none for PICK_STUCK ms (a slow statement at the head
 * of its pipe) is passed over while another has room: what follows it
 * would wait behind it. */
#define PICK_STUCK 20

static db_conn_t *pick(fd_db_t *db)
{
    db_conn_t *stuck = NULL;
    fd_int_t i;

    for (i = 0; i < db->pool; i++) {
        db_conn_t *c = &db->conns[i];
        if (c->state != C_READY || c->fatal ||
            c->inflight >= (unsigned)db->pipeline)
            continue;
        if (c->inflight && fd_current_msec - c->progress > PICK_STUCK) {
            if (stuck == NULL)
                stuck = c;
            continue;
        }
        return c;
    }
    return stuck;
}

static int send_one(db_conn_t *c, db_q_t *q)
{
    return PQsendQueryPrepared(c->pg, q->stmt->name, q->nparams, q->params,
                               q->lens, NULL, 0);
}

static int sync_now(db_conn_t *c)
{
    db_q_t *s = marker(c->db, Q_SYNC);

    if (s == NULL || !PQpipelineSync(c->pg)) {
        free(s);
        return FD_ERROR;
    }
    q_push(c, s);
    c->sync_due = 0;
    return FD_OK;
}

/* c cannot send: it fails at the next timer (not under the caller, who
 * may be walking the waiting list) */
static void conn_break(db_conn_t *c)
{
    c->state = C_BROKEN;
    c->why = "send failed";
    fd_timer_add(&c->timer, 0);
}

/* FD_OK: sent and tracked on c; FD_DECLINED: tracked, but c cannot go
 * on (it fails, and q with it); FD_ERROR: not sent, c cannot go on */
static int send_q(db_conn_t *c, db_q_t *q)
{
    db_q_t *p, *ms = NULL, **ml = &ms, *m;

    q->tries++;
    if (q->kind == Q_QUERY) {
        if (!send_one(c, q))
            return FD_ERROR;
        q_push(c, q);
        c->sync_due = 1;
        return FD_OK;
    }
    /* a transaction, alone between two syncs; its parts' markers first,
     * so that nothing goes that could not be tracked */
    for (p = q->parts; p; p = p->next) {
        if ((m = marker(c->db, Q_PART)) == NULL)
            goto failed;
        m->txn = q;
        m->stmt = p->stmt;
        *ml = m;
        ml = &m->next;
    }
    if (c->sync_due && sync_now(c) != FD_OK)
        goto failed;
    for (p = q->parts; p; p = p->next)
        if (!send_one(c, p))
            goto failed;
    q->left = q->nparts;
    q->aborted = 0;
    *c->tail = ms;
    c->tail = ml;
    return sync_now(c) == FD_OK ? FD_OK : FD_DECLINED;

failed:
    while ((m = ms) != NULL) {
        ms = m->next;
        free(m);
    }
    return FD_ERROR;
}

int db_pg_send(fd_db_t *db, db_q_t *q)
{
    db_conn_t *c;
    unsigned before;
    int rc;

    while ((c = pick(db)) != NULL) {
        rc = send_q(c, q);
        if (rc != FD_ERROR) {
            if (c->inflight == 0)
                c->progress = fd_current_msec;
            before = c->inflight++;
            busy_update(c, before);
            if (db->statement_timeout && !fd_timer_armed(&c->timer))
                fd_timer_add(&c->timer, db->statement_timeout + 2000);
            if (rc == FD_DECLINED)
                conn_break(c);
            db_post_flush(db);
            return FD_OK;
        }
        conn_break(c);
    }
    return FD_AGAIN;
}

void db_pg_flush(fd_db_t *db)
{
    fd_int_t i;

    for (i = 0; i < db->pool; i++) {
        db_conn_t *c = &db->conns[i];
        if (c->state != C_READY)
            continue;
        if (c->sync_due && sync_now(c) != FD_OK) {
            conn_fail(c, PQerrorMessage(c->pg));
            continue;
        }
        conn_write(c);
    }
}

/* --- on a pool thread --- */

typedef struct {
    db_tconn_t c;              /* first */
    PGconn *pg;                /* NULL after a failed connect */
} tconn_t;

static void tconn_close(db_tconn_t *c)
{
    tconn_t *t = (tconn_t *)c;

    if (t->pg) {
        PQfinish(t->pg);
        DB_INC(c->db, open, -1);
    }
    free(t);
}

/* a void * for db_sync_t: the thread's PGconn */
static void *tconn(fd_db_t *db, fd_db_res_t *res)
{
    db_pg_params_t *p = db->pg_params;
    tconn_t *t = (tconn_t *)db_tconn_find(db);
    const char *kw[5], *val[5];
    char ct[24];
    unsigned i, n = 0;
    PGresult *pr;

    if (t && t->pg && PQstatus(t->pg) == CONNECTION_OK)
        return t->pg;
    if (t && t->pg) { /* lost: a new one */
        PQfinish(t->pg);
        DB_INC(db, open, -1);
        t->pg = NULL;
    }
    for (i = 0; i < 3 && p->kw[i]; i++, n++) {
        kw[n] = p->kw[i];
        val[n] = p->val[i];
    }
    snprintf(ct, sizeof(ct), "%lu",
             (unsigned long)((db->connect_timeout + 999) / 1000));
    kw[n] = "connect_timeout";
    val[n++] = ct;
    kw[n] = NULL;
    val[n] = NULL;
    if (t == NULL) {
        if ((t = calloc(1, sizeof(*t))) == NULL) {
            db_set_error(res, DB_UNAVAILABLE, "out of memory");
            return NULL;
        }
        t->c.db = db;
        t->c.close = tconn_close;
        db_tconn_add(&t->c);
    }
    t->pg = PQconnectdbParams(kw, val, 1);
    if (t->pg == NULL || PQstatus(t->pg) != CONNECTION_OK) {
        db_set_error(res, DB_UNAVAILABLE,
                     t->pg ? PQerrorMessage(t->pg) : "out of memory");
        PQfinish(t->pg);
        t->pg = NULL;
        return NULL;
    }
    DB_INC(db, open, 1); /* a connection of a pool thread's */
    for (i = 0; i < db->nstmts; i++) {
        pr = PQprepare(t->pg, db->stmts[i].name, db->stmts[i].sql, 0, NULL);
        if (PQresultStatus(pr) != PGRES_COMMAND_OK)
            fd_log_error(FD_LOG_ERR, 0, "database %s: prepare %s: %s",
                         db->name, db->stmts[i].name,
                         PQresultErrorMessage(pr));
        PQclear(pr);
    }
    return t->pg;
}

static int exec_one(void *conn, db_q_t *q, fd_db_res_t *res)
{
    PGconn *pg = conn;
    PGresult *pr = PQexecPrepared(pg, q->stmt->name, q->nparams, q->params,
                                  q->lens, NULL, 0);
    ExecStatusType st = PQresultStatus(pr);

    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        if (res->pg)
            db_pg_res_free(res);
        take(res, pr);
        return FD_OK;
    }
    if (pr == NULL || PQstatus(pg) == CONNECTION_BAD)
        db_set_error(res, DB_UNAVAILABLE, PQerrorMessage(pg));
    else
        error_of(res, pr);
    PQclear(pr);
    return FD_ERROR;
}

static void exec_simple(void *conn, const char *sql, fd_db_res_t *res)
{
    PGconn *pg = conn;
    PGresult *pr = PQexec(pg, sql);

    if (PQresultStatus(pr) != PGRES_COMMAND_OK)
        db_set_error(res, PQstatus(pg) == CONNECTION_BAD ? DB_UNAVAILABLE
                                                         : DB_FAILED,
                     PQerrorMessage(pg));
    PQclear(pr);
}

void db_pg_run_blocking(fd_db_t *db, db_q_t *q)
{
    static const db_sync_t pg = {tconn, exec_one, exec_simple,
                                 "BEGIN"};

    db_run_sync(&pg, db, q);
}
