/* Unit tests: the variable registry (fd_var): compiling scripts,
 * evaluating them against a request, unknown names, escaping, a value
 * longer than a fixed builder. */
#include <sys/socket.h>

#include "fd_core.h"
#include "fd_connection.h"
#include "fd_http.h"
#include "fd_var.h"
#include "tap.h"

static fd_pool_t *pool;
static fd_conf_t cf;

static int compile(fd_var_script_t *s, const char *src, unsigned flags)
{
    cf.err[0] = '\0';
    return fd_var_compile(&cf, s, src, strlen(src), flags, "test");
}

static const char *eval(fd_request_t *r, const char *src, int esc)
{
    static char out[8192];
    fd_var_script_t s;
    fd_str_t v;

    if (compile(&s, src, 0) != FD_OK)
        return cf.err;
    if (fd_var_eval_str(r, &s, esc, &v) != FD_OK)
        return "(failed)";
    snprintf(out, sizeof(out), "%.*s", (int)v.len, v.data);
    return out;
}

int main(void)
{
    fd_connection_t c;
    fd_request_t r;
    fd_http_header_t h[4];
    fd_var_script_t s;
    fd_sbuf_t sb;
    char fixed[32], big[5000];
    const char *e;
    fd_str_t v;

    pool = fd_pool_create(4096);
    cf.pool = pool;
    cf.file = "t.conf";
    cf.line = 7;

    memset(&c, 0, sizeof(c));
    c.family = AF_INET;
    memcpy(c.addr, "\x0a\x00\x00\x07", 4);
    c.port = 40000;
    c.id = 42;
    c.requests = 3;
    memset(&r, 0, sizeof(r));
    r.c = &c;
    r.pool = pool;
    r.status = 404;
    r.in.method = fd_string("GET");
    r.in.target = fd_string("/a%20b?x=1&Key=v2");
    r.in.query = fd_string("x=1&Key=v2");
    r.in.version = 11;
    r.in.host = fd_string("Example.COM:8080");
    r.path = fd_string("/a b");
    r.in.referer = fd_string("http://ref/");
    r.in.user_agent = fd_string("ua/1");
    h[0] = (fd_http_header_t){fd_string("X-Trace-Id"), fd_string("t-1")};
    h[1] = (fd_http_header_t){fd_string("Cookie"),
                              fd_string("a=1; sid=abc; z=")};
    h[2] = (fd_http_header_t){fd_string("X-Evil"),
                              fd_string("ok")};
    r.in.headers = h;
    r.in.nheaders = 3;

    /* compile */
    ok(compile(&s, "plain text", 0) == FD_OK && s.n == 1 &&
           fd_var_is_literal(&s),
       "literal text is one op");
    ok(compile(&s, "a $host-${uri}b $$ $", 0) == FD_OK && s.n == 5,
       "text, $name, ${name}, a lone $ as text: %u ops", s.n);
    ok(s.ops[1].kind == FD_VAR_OP_VAR && s.ops[1].var == fd_var_find("host", 4),
       "an op points at its variable (no lookup per request)");
    ok(compile(&s, "$1$2x", FD_VAR_CAPTURES) == FD_OK && s.n == 3 &&
           s.ops[0].kind == FD_VAR_OP_CAP && s.ops[0].n == 1 &&
           s.ops[2].kind == FD_VAR_OP_LIT,
       "captures: $1foo is $1 then text");
    ok(compile(&s, "$name", FD_VAR_CAPTURES) == FD_OK &&
           s.ops[0].kind == FD_VAR_OP_NAMED,
       "with captures an unknown name is a named capture");

    /* unknown names */
    ok(compile(&s, "x $nosuch y", 0) == FD_ERROR, "unknown variable fails");
    is_str(cf.err, "t.conf:7: test: unknown variable \"$nosuch\"",
           "error names file:line");
    compile(&s, "$hots", 0);
    is_str(cf.err, "t.conf:7: test: unknown variable \"$hots\"; did you "
                   "mean \"$host\"?", "did you mean");
    compile(&s, "$request_uir", 0);
    ok(strstr(cf.err, "did you mean \"$request_uri\"") != NULL,
       "did you mean, a swap: %s", cf.err);
    ok(compile(&s, "${host", 0) == FD_ERROR &&
           strstr(cf.err, "bad variable") != NULL,
       "an unclosed brace");
    ok(compile(&s, "$http_", 0) == FD_ERROR, "a prefix alone is unknown");
    ok(compile(&s, "$1", 0) == FD_ERROR, "$1 without captures is unknown");

    /* evaluate */
    is_str(eval(&r, "$host", 0), "example.com", "$host: no port, lower case");
    is_str(eval(&r, "$uri|$request_uri|$args|$is_args", 0),
           "/a b|/a%20b?x=1&Key=v2|x=1&Key=v2|?", "uri and friends");
    is_str(eval(&r, "$arg_key,$arg_x,$arg_none.", 0), "v2,1,.", "$arg_NAME");
    is_str(eval(&r, "$cookie_sid,$cookie_z,$cookie_A", 0), "abc,,1",
           "$cookie_NAME");
    is_str(eval(&r, "$http_x_trace_id $http_X_TRACE_ID", 0), "t-1 t-1",
           "$http_NAME, any case");
    is_str(eval(&r, "$http_referer $http_user_agent", 0), "http://ref/ ua/1",
           "the indexed headers");
    is_str(eval(&r, "$remote_addr:$remote_port", 0), "10.0.0.7:40000",
           "remote address and port");
    is_str(eval(&r, "$request_method $server_protocol $status", 0),
           "GET HTTP/1.1 404", "method, protocol, status");
    is_str(eval(&r, "$request", 0), "GET /a%20b?x=1&Key=v2 HTTP/1.1",
           "$request");
    /* three requests done before this one: it is the 4th, as nginx
     * counts */
    is_str(eval(&r, "$connection/$connection_requests", 0), "42/4",
           "connection numbers");
    is_str(eval(&r, "$scheme $https.", 0), "http .", "scheme, no TLS");
    e = eval(&r, "$request_id", 0);
    ok(strlen(e) == 32 && strspn(e, "0123456789abcdef") == 32,
       "$request_id: 32 hex digits");
    ok(strcmp(e, eval(&r, "$request_id", 0)) == 0,
       "$request_id: stable within a request");
    e = eval(&r, "$time_iso8601", 0);
    ok(strlen(e) == 25 && e[10] == 'T' && e[22] == ':', "$time_iso8601: %s",
       e);

    /* escaping: a decoded value with CR LF cannot split a header */
    r.path = fd_string("/x\r\nSet-Cookie: y");
    is_str(eval(&r, "<$uri>", FD_VAR_ESC_HEADER),
           "</x%0D%0ASet-Cookie: y>", "header escaping of values");
    is_str(eval(&r, "<$uri>", FD_VAR_ESC_NONE), "</x\r\nSet-Cookie: y>",
           "no escaping asked: as it is");

    /* a long value: grows in the pool, fails in a fixed builder */
    memset(big, 'v', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    h[2].value = fd_string("");
    h[2].value = (fd_str_t){sizeof(big) - 1, big};
    compile(&s, "[$http_x_evil]", 0);
    ok(fd_var_eval_str(&r, &s, FD_VAR_ESC_HEADER, &v) == FD_OK &&
           v.len == sizeof(big) + 1 && v.data[v.len] == '\0',
       "a 5000-byte value in the pool");
    memset(fixed, 0, sizeof(fixed));
    fd_sbuf_init_fixed(&sb, fixed, 16);
    fd_var_eval(&r, &s, NULL, FD_VAR_ESC_NONE, &sb);
    ok(fd_sbuf_failed(&sb) && fixed[16] == '\0',
       "a fixed builder fails, nothing written past its capacity");

    fd_pool_destroy(pool);
    return done_testing();
}
