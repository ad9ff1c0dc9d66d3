/*
 * TechEmpower's database tests, written on the public API (fastd.h) as a
 * module of a user's would be: it includes nothing else.
 *
 *   handler = db               one random World row: {"id":1,"randomNumber":2}
 *   handler = queries          ?queries=N rows (1..500; missing or bad: 1)
 *   handler = updates          ?queries=N rows read, each given a new
 *                              random number and written back
 *   handler = fortunes         the Fortune table, one row added, sorted,
 *                              as an HTML table
 *   handler = cached-queries   ?count=N rows from a copy of World kept in
 *                              each worker, filled at its start
 *   database = NAME            the [database NAME] they read (default
 *                              world)
 *
 * Every row is its own query (no IN lists), with an id drawn at random
 * from 1..10000; the updates of a request go in one transaction, ordered
 * by id so that two requests never wait on each other's rows. The
 * statements are the module's, prepared on every connection of the
 * database. On the loop the handlers return FD_AGAIN and answer from the
 * last query's done; with offload = on they run on the pool, where the
 * same calls are synchronous.
 */
#include <fastd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORLD_ROWS 10000
#define MAX_QUERIES 500
#define MAX_CACHES 4

typedef struct {
    const char *database;
    fd_db_t *db;
} te_conf_t;

static const fd_api_key_t te_keys[] = {
    {.name = "database", .type = FD_API_STRING,
     .offset = offsetof(te_conf_t, database), .def = "world",
     .doc = "handler = db, queries, updates, fortunes, cached-queries: "
            "the [database NAME] they read"},
    {.name = NULL}};

static const struct {
    const char *name, *sql;
} statements[] = {
    {"te_world", "SELECT id, randomNumber FROM World WHERE id = $1"},
    {"te_update", "UPDATE World SET randomNumber = $2 WHERE id = $1"},
    {"te_fortunes", "SELECT id, message FROM Fortune"},
    {"te_world_all", "SELECT id, randomNumber FROM World"},
};

/* The databases cached-queries may read: their copy of World. Known by
 * name: a reload's init_conf finds its entry again (the master keeps
 * this table across configurations; a worker uses the current ones). */
static struct {
    char name[64];
    fd_db_t *db;
    int *rn;                   /* [WORLD_ROWS + 1] randomNumber by id */
    int state;                 /* 0, LOADING, READY */
    fd_request_t **parked;     /* requests waiting for it */
    size_t nparked, capparked;
} caches[MAX_CACHES];
static unsigned ncaches;
enum { C_LOADING = 1, C_READY };

static int te_init_conf(void *conf)
{
    te_conf_t *c = conf;
    unsigned i;

    c->db = fd_db_get(c->database);
    if (c->db == NULL)
        return FD_ERROR; /* fd_db_get() said why */
    for (i = 0; i < sizeof(statements) / sizeof(statements[0]); i++)
        if (fd_db_prepare(c->db, statements[i].name, statements[i].sql) !=
            FD_OK)
            return FD_ERROR;
    for (i = 0; i < ncaches && strcmp(caches[i].name, c->database); i++)
        ;
    if (i == ncaches && ncaches < MAX_CACHES &&
        strlen(c->database) < sizeof(caches[i].name))
        strcpy(caches[ncaches++].name, c->database);
    if (i < ncaches)
        caches[i].db = c->db;
    return FD_OK;
}

/* --- small tools --- */

static _Thread_local uint64_t seed;

static int random_id(void)
{
    if (seed == 0)
        seed = ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid() ^
               (uint64_t)(uintptr_t)&seed;
    seed ^= seed << 13; /* xorshift64 */
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (int)(seed % WORLD_ROWS) + 1;
}

/* ?name=N as the benchmark wants it: 1..500, and 1 when missing or bad */
static int count_arg(fd_request_t *r, const char *name)
{
    fd_str_t v = fd_req_arg(r, name);
    size_t i;
    int n = 0;

    if (v.data == NULL || v.len == 0)
        return 1;
    for (i = 0; i < v.len; i++) {
        if (v.data[i] < '0' || v.data[i] > '9')
            return 1;
        if (n <= MAX_QUERIES)
            n = n * 10 + (v.data[i] - '0');
    }
    return n < 1 ? 1 : n > MAX_QUERIES ? MAX_QUERIES : n;
}

static int answer(fd_request_t *r, const char *type, const char *body,
                  size_t len)
{
    fd_resp_status(r, 200);
    if (fd_resp_content_type(r, (fd_str_t){strlen(type), type}) != FD_OK ||
        fd_resp_body(r, body, len) != FD_OK)
        return 500;
    return FD_OK;
}

#define JSON "application/json"

typedef struct {
    int id, rn;
} row_t;

/* [{"id":1,"randomNumber":2},...] (one object without the brackets) */
static int answer_rows(fd_request_t *r, const row_t *rows, int n, int array)
{
    size_t cap = (size_t)n * 40 + 4, len = 0;
    char *buf = fd_req_alloc(r, cap);
    int i;

    if (buf == NULL)
        return 500;
    if (array)
        buf[len++] = '[';
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "%s{\"id\":%d,\"randomNumber\":%d}",
                                i ? "," : "", rows[i].id, rows[i].rn);
    if (array)
        buf[len++] = ']';
    return answer(r, JSON, buf, len);
}

static fd_str_t int_text(char *buf, size_t size, int v)
{
    return (fd_str_t){(size_t)snprintf(buf, size, "%d", v), buf};
}

/* --- /db, /queries, /updates --- */

typedef struct {
    fd_db_t *db;
    int n, pending, status, update, single;
    row_t rows[];
} world_t;

static void updated(fd_request_t *r, const fd_db_res_t *res, void *data)
{
    world_t *w = data;

    if (fd_db_status(res))
        fd_api_finish(r, fd_db_status(res));
    else
        fd_api_finish(r, answer_rows(r, w->rows, w->n, 1));
}

static int by_id(const void *a, const void *b)
{
    return ((const row_t *)a)->id - ((const row_t *)b)->id;
}

/* every row read: new numbers, written back in one transaction */
static int write_back(fd_request_t *r, world_t *w)
{
    row_t *sorted = fd_req_alloc(r, (size_t)w->n * sizeof(row_t));
    fd_db_txn_t *t = fd_db_begin(r, w->db);
    char a[16], b[16];
    fd_str_t p[2];
    int i, rc;

    if (sorted == NULL || t == NULL) {
        if (t)
            fd_db_commit(t, NULL, NULL); /* empty: dropped */
        return 500;
    }
    for (i = 0; i < w->n; i++)
        w->rows[i].rn = random_id();
    memcpy(sorted, w->rows, (size_t)w->n * sizeof(row_t));
    qsort(sorted, (size_t)w->n, sizeof(row_t), by_id);
    for (i = 0; i < w->n; i++) {
        /* a row drawn twice: its last number is the one the answer says */
        if (i + 1 < w->n && sorted[i + 1].id == sorted[i].id)
            continue;
        p[0] = int_text(a, sizeof(a), sorted[i].id);
        p[1] = int_text(b, sizeof(b), sorted[i].rn);
        fd_db_txn_query(t, "te_update", 2, p);
    }
    rc = fd_db_commit(t, updated, w);
    return rc == FD_OK ? FD_AGAIN : rc;
}

typedef struct {
    world_t *w;
    int i;
} slot_t;

/* every row is in: the answer, or the updates (FD_AGAIN) */
static int world_next(fd_request_t *r, world_t *w)
{
    if (w->status)
        return w->status;
    if (w->update)
        return write_back(r, w);
    return answer_rows(r, w->rows, w->n, !w->single);
}

static void world_done(fd_request_t *r, const fd_db_res_t *res, void *data)
{
    slot_t *s = data;
    world_t *w = s->w;
    int rc;

    if (fd_db_status(res) && !w->status)
        w->status = fd_db_status(res);
    else if (fd_db_rows(res) == 1)
        w->rows[s->i].rn = (int)fd_db_int(res, 0, 1);
    else if (!w->status)
        w->status = 500; /* no such row: the table is not the benchmark's */
    if (--w->pending)
        return;
    rc = world_next(r, w);
    if (rc != FD_AGAIN)
        fd_api_finish(r, rc);
}

/* n random rows; update: then written back; single: /db's one object */
static int world(fd_request_t *r, int n, int update, int single)
{
    const te_conf_t *c = fd_req_conf(r);
    world_t *w = fd_req_alloc(r, sizeof(world_t) + (size_t)n * sizeof(row_t));
    slot_t *slots = fd_req_alloc(r, (size_t)n * sizeof(slot_t));
    char buf[16];
    fd_str_t id;
    int i, rc;

    if (w == NULL || slots == NULL)
        return 500;
    memset(w, 0, sizeof(*w));
    w->db = c->db;
    w->n = n;
    w->update = update;
    w->single = single;
    /* one count of our own while we send: a query answered at once (on a
     * pool thread) cannot end the request under us */
    w->pending = 1;
    for (i = 0; i < n; i++) {
        w->rows[i].id = random_id();
        w->rows[i].rn = 0;
        slots[i] = (slot_t){w, i};
        id = int_text(buf, sizeof(buf), w->rows[i].id);
        w->pending++;
        rc = fd_db_query(r, c->db, "te_world", 1, &id, world_done,
                         &slots[i]);
        if (rc != FD_OK) {
            /* the ones sent answer first; then this status */
            w->pending--;
            w->status = rc;
            break;
        }
    }
    if (--w->pending)
        return FD_AGAIN; /* world_done() goes on */
    return world_next(r, w);
}

static int db_handler(fd_request_t *r)
{
    return world(r, 1, 0, 1);
}

static int queries_handler(fd_request_t *r)
{
    return world(r, count_arg(r, "queries"), 0, 0);
}

static int updates_handler(fd_request_t *r)
{
    return world(r, count_arg(r, "queries"), 1, 0);
}

/* --- /fortunes --- */

typedef struct {
    int id;
    const char *msg;
    size_t len;
} fortune_t;

static int by_message(const void *a, const void *b)
{
    const fortune_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int d = memcmp(x->msg, y->msg, n);

    return d ? d : (x->len > y->len) - (x->len < y->len);
}

static size_t escaped(char *out, const char *s, size_t n)
{
    size_t i, len = 0;

    for (i = 0; i < n; i++) {
        const char *e = NULL;
        switch (s[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&quot;"; break;
        case '\'': e = "&#39;"; break;
        }
        if (e) {
            memcpy(out + len, e, strlen(e));
            len += strlen(e);
        } else {
            out[len++] = s[i];
        }
    }
    return len;
}

#define PAGE_HEAD "<!DOCTYPE html><html><head><title>Fortunes</title></head>" \
                  "<body><table><tr><th>id</th><th>message</th></tr>"
#define PAGE_TAIL "</table></body></html>"
#define EXTRA "Additional fortune added at request time."

static void fortunes_done(fd_request_t *r, const fd_db_res_t *res,
                          void *data)
{
    int n = fd_db_rows(res), i;
    fortune_t *f;
    size_t cap, len;
    char *page;

    (void)data;
    if (fd_db_status(res)) {
        fd_api_finish(r, fd_db_status(res));
        return;
    }
    f = fd_req_alloc(r, ((size_t)n + 1) * sizeof(*f));
    if (f == NULL) {
        fd_api_finish(r, 500);
        return;
    }
    cap = sizeof(PAGE_HEAD) + sizeof(PAGE_TAIL) + sizeof(EXTRA) + 64;
    for (i = 0; i < n; i++) {
        /* the values live until we return: copied with the page below */
        fd_str_t m = fd_db_value(res, i, 1);
        f[i] = (fortune_t){(int)fd_db_int(res, i, 0), m.data ? m.data : "",
                           m.len};
        cap += 6 * m.len + 48;
    }
    f[n] = (fortune_t){0, EXTRA, sizeof(EXTRA) - 1};
    qsort(f, (size_t)n + 1, sizeof(*f), by_message);
    if ((page = fd_req_alloc(r, cap)) == NULL) {
        fd_api_finish(r, 500);
        return;
    }
    memcpy(page, PAGE_HEAD, sizeof(PAGE_HEAD) - 1);
    len = sizeof(PAGE_HEAD) - 1;
    for (i = 0; i <= n; i++) {
        len += (size_t)snprintf(page + len, cap - len, "<tr><td>%d</td><td>",
                                f[i].id);
        len += escaped(page + len, f[i].msg, f[i].len);
        memcpy(page + len, "</td></tr>", 10);
        len += 10;
    }
    memcpy(page + len, PAGE_TAIL, sizeof(PAGE_TAIL) - 1);
    len += sizeof(PAGE_TAIL) - 1;
    fd_api_finish(r, answer(r, "text/html; charset=utf-8", page, len));
}

static int fortunes_handler(fd_request_t *r)
{
    const te_conf_t *c = fd_req_conf(r);
    int rc = fd_db_query(r, c->db, "te_fortunes", 0, NULL, fortunes_done,
                         NULL);

    return rc == FD_OK ? FD_AGAIN : rc;
}

/* --- /cached-queries --- */

static int cached_answer(fd_request_t *r, const int *rn)
{
    int n = count_arg(r, "count"), i;
    row_t *rows = fd_req_alloc(r, (size_t)n * sizeof(row_t));

    if (rows == NULL)
        return 500;
    for (i = 0; i < n; i++) {
        rows[i].id = random_id();
        rows[i].rn = rn[rows[i].id];
    }
    return answer_rows(r, rows, n, 1);
}

static void cache_filled(fd_request_t *none, const fd_db_res_t *res,
                         void *data)
{
    unsigned k = (unsigned)(uintptr_t)data;
    int i, id, n = fd_db_rows(res), ok = !fd_db_status(res);
    size_t j;

    (void)none;
    if (ok && caches[k].rn == NULL &&
        (caches[k].rn = calloc(WORLD_ROWS + 1, sizeof(int))) == NULL)
        ok = 0;
    for (i = 0; ok && i < n; i++) {
        id = (int)fd_db_int(res, i, 0);
        if (id >= 1 && id <= WORLD_ROWS)
            caches[k].rn[id] = (int)fd_db_int(res, i, 1);
    }
    caches[k].state = ok ? C_READY : 0;
    if (!ok)
        fd_api_log(FD_API_LOG_ERR, 0, "cached-queries: World could not be "
                   "read: %s", fd_db_error(res) ? fd_db_error(res)
                                                : "out of memory");
    for (j = 0; j < caches[k].nparked; j++) {
        fd_request_t *r = caches[k].parked[j];
        fd_api_finish(r, ok ? cached_answer(r, caches[k].rn) : 503);
    }
    caches[k].nparked = 0;
}

static int cache_fill(unsigned k)
{
    int rc;

    caches[k].state = C_LOADING;
    rc = fd_db_query(NULL, caches[k].db, "te_world_all", 0, NULL,
                     cache_filled, (void *)(uintptr_t)k);
    if (rc != FD_OK)
        caches[k].state = 0;
    return rc;
}

static int cached_handler(fd_request_t *r)
{
    const te_conf_t *c = fd_req_conf(r);
    fd_request_t **more;
    unsigned k;
    int rc;

    for (k = 0; k < ncaches && strcmp(caches[k].name, c->database); k++)
        ;
    if (k == ncaches)
        return 500;
    if (caches[k].db != c->db) { /* a configuration of before a reload */
        caches[k].db = c->db;
        if (caches[k].state == C_READY)
            caches[k].state = 0;
    }
    if (caches[k].state == C_READY)
        return cached_answer(r, caches[k].rn);
    /* not filled yet (the start, or the database was down): wait for it,
     * on the loop only (a pool thread's request cannot be parked) */
    if (caches[k].state == 0 && (rc = cache_fill(k)) != FD_OK)
        return rc;
    if (caches[k].state == C_READY) /* filled inline (on the pool) */
        return cached_answer(r, caches[k].rn);
    if (caches[k].nparked == caches[k].capparked) {
        size_t cap = caches[k].capparked ? 2 * caches[k].capparked : 64;
        more = realloc(caches[k].parked, cap * sizeof(*more));
        if (more == NULL)
            return 503;
        caches[k].parked = more;
        caches[k].capparked = cap;
    }
    caches[k].parked[caches[k].nparked++] = r;
    return FD_AGAIN;
}

static int te_init_worker(void)
{
    unsigned k;

    for (k = 0; k < ncaches; k++)
        if (fd_db_get(caches[k].name) == caches[k].db) /* in use now */
            cache_fill(k);
    return FD_OK;
}

#define TE_FLAGS FD_API_THREAD_SAFE

static const fd_api_handler_t te_handlers[] = {
    {.name = "db", .handler = db_handler, .flags = TE_FLAGS},
    {.name = "queries", .handler = queries_handler, .flags = TE_FLAGS},
    {.name = "updates", .handler = updates_handler, .flags = TE_FLAGS},
    {.name = "fortunes", .handler = fortunes_handler, .flags = TE_FLAGS},
    {.name = "cached-queries", .handler = cached_handler},
    {.name = NULL}};

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "techempower",
    .keys = te_keys,
    .conf_size = sizeof(te_conf_t),
    .init_conf = te_init_conf,
    .init_worker = te_init_worker,
    .handlers = te_handlers,
};
