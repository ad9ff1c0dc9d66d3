/*
 * A test module on the public API's databases (tests/database.t): runs
 * the statement ?s=NAME of the location's database with ?p1= and ?p2= as
 * its parameters (as sent, not decoded: the tests send plain values) and
 * answers its rows as JSON arrays of strings ([["1","2"],...]), or the
 * status fd_db_status() gave with the error as text.
 *
 *   [location /q]
 *   handler = dbq
 *   dbq_database = NAME
 */
#include <fastd.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *database;
    fd_db_t *db;
} dbq_conf_t;

static const fd_api_key_t keys[] = {
    {.name = "dbq_database", .type = FD_API_STRING,
     .offset = offsetof(dbq_conf_t, database), .def = "test",
     .doc = "handler = dbq: its [database NAME]"},
    {.name = NULL}};

static int init_conf(void *conf)
{
    dbq_conf_t *c = conf;

    c->db = fd_db_get(c->database);
    return c->db ? FD_OK : FD_ERROR;
}

static void done(fd_request_t *r, const fd_db_res_t *res, void *data)
{
    size_t cap = 64, len = 0;
    char *out;
    int i, j;

    (void)data;
    if (fd_db_status(res)) {
        const char *e = fd_db_error(res);
        fd_resp_status(r, fd_db_status(res));
        fd_resp_body(r, e, strlen(e));
        fd_api_finish(r, FD_OK);
        return;
    }
    for (i = 0; i < fd_db_rows(res); i++)
        for (j = 0; j < fd_db_cols(res); j++)
            cap += fd_db_value(res, i, j).len + 8;
    if ((out = fd_req_alloc(r, cap)) == NULL) {
        fd_api_finish(r, 500);
        return;
    }
    out[len++] = '[';
    for (i = 0; i < fd_db_rows(res); i++) {
        out[len++] = i ? ',' : ' ';
        out[len++] = '[';
        for (j = 0; j < fd_db_cols(res); j++) {
            fd_str_t v = fd_db_value(res, i, j);
            if (j)
                out[len++] = ',';
            out[len++] = '"';
            memcpy(out + len, v.data ? v.data : "", v.len);
            len += v.len;
            out[len++] = '"';
        }
        out[len++] = ']';
    }
    out[len++] = ']';
    fd_resp_content_type(r, (fd_str_t){16, "application/json"});
    fd_resp_body(r, out, len);
    fd_api_finish(r, FD_OK);
}

static int handler(fd_request_t *r)
{
    dbq_conf_t *c = fd_req_conf(r);
    fd_str_t s = fd_req_arg(r, "s"), p[2];
    char name[64];
    int n = 0, rc;

    if (s.data == NULL || s.len >= sizeof(name))
        return 400;
    memcpy(name, s.data, s.len);
    name[s.len] = '\0';
    p[0] = fd_req_arg(r, "p1");
    p[1] = fd_req_arg(r, "p2");
    n = p[1].data ? 2 : p[0].data ? 1 : 0;
    rc = fd_db_query(r, c->db, name, n, p, done, NULL);
    return rc == FD_OK ? FD_AGAIN : rc;
}

FD_API_MODULE = {
    FD_API_HEADER,
    .name = "dbq",
    .keys = keys,
    .conf_size = sizeof(dbq_conf_t),
    .init_conf = init_conf,
    .handler = handler,
    .flags = FD_API_THREAD_SAFE,
};
