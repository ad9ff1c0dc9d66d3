/* Unit tests: value parsers, config loading, errors with file:line,
 * includes, repeated keys, profiles. */
#include "fd_core.h"
#include "fd_http.h"
#include "tap.h"

static char dir[] = "/tmp/fd-unit-conf-XXXXXX";

static const char *write_file(const char *name, const char *text)
{
    static char path[256];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
    return path;
}

static fd_cycle_t *load(const char *text, const char *profile, char *err)
{
    const char *p = write_file("t.conf", text);

    err[0] = '\0';
    return fd_cycle_load(p, profile, err, 1200);
}

#define BASE "[main]\ndaemon = off\npid = off\n[server]\nlisten = 127.0.0.1:1\n"

static void test_values(void)
{
    is_int(fd_conf_parse_size("8k"), 8192, "8k");
    is_int(fd_conf_parse_size("1m"), 1048576, "1m");
    is_int(fd_conf_parse_size("12"), 12, "bytes");
    is_int(fd_conf_parse_size("1x"), -1, "bad unit");
    is_int(fd_conf_parse_size("-1"), -1, "negative size");
    is_int(fd_conf_parse_msec("75s"), 75000, "75s");
    is_int(fd_conf_parse_msec("500ms"), 500, "500ms");
    is_int(fd_conf_parse_msec("2m"), 120000, "2m");
    is_int(fd_conf_parse_msec("1m30s"), 90000, "1m30s");
    is_int(fd_conf_parse_msec("10"), 10000, "bare number is seconds");
    is_int(fd_conf_parse_msec("abc"), -1, "abc");
    is_int(fd_conf_parse_flag("on"), 1, "on");
    is_int(fd_conf_parse_flag("off"), 0, "off");
    is_int(fd_conf_parse_flag("maybe"), -1, "maybe");
}

static void error_at(const char *text, const char *want, const char *name)
{
    char err[1200];
    fd_cycle_t *c = load(text, NULL, err);

    ok(c == NULL, "%s: refused", name);
    ok(strstr(err, want) != NULL, "%s: error \"%s\" has \"%s\"", name, err,
       want);
    fd_cycle_free(c);
}

static void test_load(void)
{
    char err[1200];
    fd_cycle_t *c;
    fd_http_loc_t *loc;

    c = load(BASE "[http]\nkeepalive_timeout = 5s\nmax_header_size = 4k\n"
             "[events]\naccept = shared\nedge_triggered = off\n"
             "[location = /x]\nhandler = plaintext\nindex = a.html\n"
             "index = b.html\n[location /p]\nhandler = json\n"
             "[location ~ ^/r/(\\d+)$]\nhandler = plaintext\n",
             NULL, err);
    ok(c != NULL, "valid config loads (%s)", err);
    if (c == NULL)
        return;
    is_int(c->http.keepalive_timeout, 5000, "keepalive_timeout");
    is_int(c->http.max_header_size, 4096, "max_header_size");
    is_int(c->http.keepalive_requests, 1000, "default keepalive_requests");
    is_int(c->events.accept, FD_ACCEPT_SHARED, "accept enum");
    is_int(c->events.edge_triggered, 0, "flag off");
    loc = c->servers->exact;
    ok(loc && loc->index.n == 2, "a repeated key becomes a list");
    ok(loc && !strcmp(loc->index.items[1], "b.html"), "list order kept");
    ok(c->servers->prefix && c->servers->prefix->kind == FD_LOC_PREFIX,
       "prefix location");
    ok(c->servers->regex && c->servers->regex->regex, "regex compiled");
    fd_cycle_free(c);

    c = load(BASE "[server]\nlisten = 127.0.0.1:2\n[server]\n"
             "listen = 127.0.0.1:3\n", NULL, err);
    ok(c && c->servers && c->servers->next && c->servers->next->next,
       "[server] after [server] makes three servers");
    fd_cycle_free(c);

    error_at(BASE "[http]\nnosuch = 1\n", "t.conf:7: unknown key", "unknown key");
    error_at(BASE "[nosuch]\n", "t.conf:6: unknown section", "unknown section");
    error_at(BASE "[http]\nkeepalive_timeout = abc\n", "t.conf:7:",
             "bad duration");
    error_at(BASE "[events]\nedge_triggered = maybe\n", "t.conf:7:",
             "bad flag");
    error_at("[main]\nworkers = -3\n[server]\n", "t.conf:2:", "bad workers");
    error_at(BASE "[events]\naccept = fast\n", "one of reuseport", "bad enum");
    error_at(BASE "[http]\nkeepalive_timeout = 1s\nkeepalive_timeout = 2s\n",
             "t.conf:8: duplicate key", "duplicate scalar");
    error_at(BASE "[location ~ (]\nhandler = plaintext\n", "t.conf:6: regex",
             "bad regex");
    error_at(BASE "[location /]\nhandler = nosuch\n", "t.conf:7: unknown "
             "handler", "unknown handler");
    error_at(BASE "this is not ini\n", "t.conf:6:", "syntax error");
    error_at("[main]\npid = off\n", "no [server]", "no server");

    write_file("inc.conf", "[location /i]\nhandler = plaintext\nbad = 1\n");
    error_at(BASE "include = inc.conf\n", "inc.conf:3: unknown key",
             "error inside an include names that file");
    write_file("inc.conf", "[location /i]\nhandler = plaintext\n");
    c = load(BASE "include = inc.conf\n", NULL, err);
    ok(c && c->servers->prefix, "include adds a location (%s)", err);
    fd_cycle_free(c);
}

static void test_profiles(void)
{
    char err[1200];
    fd_cycle_t *c;
    const char *text = BASE "[events]\nread_until_eagain = on\n"
                            "[profile bench]\nevents.read_until_eagain = off\n"
                            "http.keepalive_requests = 7\n";

    c = load(text, NULL, err);
    ok(c && c->events.read_until_eagain == 1, "no profile: file values");
    fd_cycle_free(c);
    c = load(text, "bench", err);
    ok(c && c->events.read_until_eagain == 0, "profile overrides a key (%s)",
       err);
    ok(c && c->http.keepalive_requests == 7, "profile adds a key");
    ok(c && c->profile && !strcmp(c->profile, "bench"), "profile recorded");
    fd_cycle_free(c);
    c = load(text, "nosuch", err);
    ok(c == NULL && strstr(err, "profile \"nosuch\" not found"),
       "unknown profile refused: %s", err);
    fd_cycle_free(c);
    c = load(BASE "[main]\n", NULL, err);
    fd_cycle_free(c);
    error_at(BASE "[profile p]\nserver.listen = 1\n[main]\nprofile = p\n",
             "cannot override", "profile on [server] refused");
}

int main(void)
{
    unsigned i;

    for (i = 0; fd_modules[i]; i++)
        fd_modules[i]->index = i;
    if (mkdtemp(dir) == NULL)
        return 1;
    test_values();
    test_load();
    test_profiles();
    write_file("t.conf", "");
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
            diag("cleanup failed");
    }
    return done_testing();
}
