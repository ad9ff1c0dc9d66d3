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

    /* bounds: the running total of a duration, not only each part (UBSan
     * saw the signed sum overflow; a wrapped sum is a negative value, and
     * two parts just under the old per-part bound summed to a huge one) */
    is_int(fd_conf_parse_msec("4611686018427387s4611686018427387s"
                              "4611686018427387s"), -1,
           "three huge parts: refused, no overflow");
    is_int(fd_conf_parse_msec("4611686018427387s4611686018427387s"), -1,
           "two parts over the bound: refused");
    is_int(fd_conf_parse_msec("9223372036854775807ms"), -1,
           "INT64_MAX ms is over the bound");
    is_int(fd_conf_parse_msec("99999999999999999999"), -1,
           "a number past int64: refused");
    is_int(fd_conf_parse_msec("1d1d"), 2 * 86400000, "1d1d adds up");
    ok(fd_conf_parse_msec("2305843009213693951ms") == FD_CONF_VALUE_MAX,
       "the bound itself is accepted");
    is_int(fd_conf_parse_msec("2305843009213693952ms"), -1, "bound + 1");
    is_int(fd_conf_parse_msec("2305843009213693s2305843009213693s"), -1,
           "two parts under the bound, sum over it");
    is_int(fd_conf_parse_msec("-1s"), -1, "negative duration");
    is_int(fd_conf_parse_msec("+1s"), -1, "signed duration");
    is_int(fd_conf_parse_msec(" 1s"), -1, "a space is not a digit");
    is_int(fd_conf_parse_size("9223372036854775807"), -1,
           "INT64_MAX bytes is over the bound");
    is_int(fd_conf_parse_size("8589934591g"), -1, "8589934591g overflows");
    is_int(fd_conf_parse_size("2147483648g"), -1, "2^61 is over the bound");
    ok(fd_conf_parse_size("2147483647m") > 0, "2147483647m is fine");
    is_int(fd_conf_parse_uint("65535", 65535), 65535, "uint at max");
    is_int(fd_conf_parse_uint("65536", 65535), -1, "uint past max");
    is_int(fd_conf_parse_uint("-0", 32), -1, "uint: -0");
    is_int(fd_conf_parse_uint("+8", 32), -1, "uint: +8");
    is_int(fd_conf_parse_uint(" 8", 32), -1, "uint: space");
    is_int(fd_conf_parse_uint("", 32), -1, "uint: empty");
    is_int(fd_conf_parse_uint("8 ", 32), -1, "uint: trailing space");
    is_int(fd_conf_parse_uint("08", 32), 8, "uint: leading zero");
}

static void test_near(void)
{
    fd_conf_near_t nr;

    is_int(fd_conf_distance("plaintxt", "plaintext"), 1, "one deletion");
    is_int(fd_conf_distance("hanlder", "handler"), 1, "a swap counts one");
    is_int(fd_conf_distance("abc", "abc"), 0, "equal");
    is_int(fd_conf_distance("", "abc"), 3, "from empty");
    is_int(fd_conf_distance("kitten", "sitting"), 3, "kitten/sitting");
    fd_conf_near_init(&nr, "plaintxt");
    fd_conf_near_add(&nr, "json");
    fd_conf_near_add(&nr, "plaintext");
    fd_conf_near_add(&nr, "proxy");
    ok(fd_conf_near_best(&nr) && !strcmp(fd_conf_near_best(&nr), "plaintext"),
       "nearest of three");
    fd_conf_near_init(&nr, "zzzzzz");
    fd_conf_near_add(&nr, "static");
    ok(fd_conf_near_best(&nr) == NULL, "nothing close: no suggestion");
    fd_conf_near_init(&nr, "ab");
    fd_conf_near_add(&nr, "ac");
    ok(fd_conf_near_best(&nr) == NULL, "a two-letter word is no typo");
}

static void test_levels(void)
{
    char err[256];
    static const fd_directive_t a[] = {
        {.name = "send_timeout", .type = FD_CONF_MSEC}, FD_CONF_END};
    static const fd_directive_t b[] = {
        {.name = "root", .type = FD_CONF_STR},
        {.name = "send_timeout", .type = FD_CONF_MSEC, .offset = 8},
        FD_CONF_END};
    static const fd_directive_t c[] = {
        {.name = "send_timeout", .renamed = "proxy_send_timeout"},
        FD_CONF_END};
    const fd_directive_t *ta[] = {a, NULL}, *tb[] = {b, NULL},
                         *tc[] = {c, NULL};
    fd_conf_level_t clash[] = {{"[http]", ta}, {"[location]", tb}};
    fd_conf_level_t same[] = {{"[http]", tb}, {"[location]", tb}};
    fd_conf_level_t moved[] = {{"[http]", ta}, {"[location]", tc}};

    err[0] = '\0';
    is_int(fd_cycle_check_keys(err, sizeof(err)), FD_OK,
           "the built-in tables: one meaning per key (%s)", err);
    is_int(fd_conf_check_levels(clash, 2, err, sizeof(err)), FD_ERROR,
           "one name, two declarations: refused");
    ok(strstr(err, "\"send_timeout\"") && strstr(err, "[http]") &&
       strstr(err, "[location]"), "the error names the key and levels: %s",
       err);
    is_int(fd_conf_check_levels(same, 2, err, sizeof(err)), FD_OK,
           "one declaration reached from two levels: fine");
    is_int(fd_conf_check_levels(moved, 2, err, sizeof(err)), FD_OK,
           "a renamed key is a signpost, not a meaning");
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
    error_at("[main]\npid = off\n", "t.conf: no [server]", "no server");
    {
        char e2[1200];
        fd_cycle_t *c2 = fd_cycle_load("/nonexistent-fd/x.conf", NULL, e2,
                                       sizeof(e2));
        ok(c2 == NULL && !strcmp(e2, "/nonexistent-fd/x.conf: cannot open: "
                                     "No such file or directory"),
           "a missing main file is named once: %s", e2);
    }

    /* ranges are checked where the key is read: file:line of the key */
    error_at(BASE "[http]\nmax_header_size = 100\n",
             "t.conf:7: \"max_header_size\" must be 256 .. 1m, not \"100\"",
             "max_header_size below its range");
    error_at(BASE "[http]\nmax_header_size = 2m\n", "t.conf:7:",
             "max_header_size above its range");
    error_at(BASE "open_file_cache = 65537\n",
             "t.conf:6: \"open_file_cache\" is at most 65536, not \"65537\"",
             "open_file_cache bound");
    error_at(BASE "[location /x]\n\nopen_file_cache = 65537\n", "t.conf:8:",
             "open_file_cache bound in a location: the key's line");
    error_at(BASE "[http]\nkeepalive_timeout = 4611686018427387s"
             "4611686018427387s4611686018427387s\n",
             "t.conf:7: \"keepalive_timeout\" needs a duration",
             "duration overflow");
    error_at(BASE "[http]\nmax_body_size = 99999999999999999999\n",
             "t.conf:7:", "size overflow");
    error_at(BASE "[http]\nkeepalive_requests = 99999999999999999999\n",
             "t.conf:7:", "integer overflow");
    error_at(BASE "listen = 127.0.0.1:+80\n", "t.conf:6: bad listen",
             "listen port with a sign: the line of that listen");
    error_at(BASE "listen = 127.0.0.1:2 defualt\n", "t.conf:6: unknown "
             "listen option", "listen option");
    error_at(BASE "error_page = 404x /e.html\n", "t.conf:6: error_page: "
             "bad status", "error_page status with junk");
    {
        /* without a root key the server's default root is the base, as
         * for its files ("(null)/x.html" before) */
        fd_cycle_t *c2 = load(BASE "error_page = 404 /nonexist.html\n", NULL,
                              err);
        ok(c2 == NULL && strstr(err, "t.conf:6: error_page \"") &&
           strstr(err, "(null)") == NULL && strstr(err, "/html/nonexist"),
           "error_page without root: the default root (%s)", err);
        fd_cycle_free(c2);
    }
    error_at("[main]\nworkers = +2\n[server]\n", "t.conf:2:",
             "workers with a sign");
    error_at(BASE "access_log = /tmp/x.log format=nosuch\n",
             "t.conf:6: access_log", "unknown log format in [server]");
    error_at(BASE "[location /x]\nhandler = plaintext\n\n"
             "access_log = /tmp/x.log format=nosuch\n",
             "t.conf:9: access_log", "unknown log format: the key's line");

    /* the Server header has its own key; the old one says so */
    error_at(BASE "[http]\nserver_name = x\n", "t.conf:7: \"server_name\" is "
             "not a key here any more: use \"server_header\"",
             "[http] server_name");
    c = load(BASE "[http]\nserver_header = acme\nserver_tokens = off\n", NULL,
             err);
    ok(c && !strcmp(c->http.server_header, "acme"), "server_header (%s)",
       err);
    fd_cycle_free(c);
    error_at(BASE "[location /x]\nsend_timeout = 1s\n", "t.conf:7: "
             "\"send_timeout\" is not a key here any more: use "
             "\"proxy_send_timeout\"", "send_timeout in a location");
    c = load(BASE "[http]\nsend_timeout = 3s\n[location /x]\nhandler = "
             "proxy\npass = http://127.0.0.1:9/\nproxy_send_timeout = 2s\n",
             NULL, err);
    ok(c && c->http.send_timeout == 3000, "[http] send_timeout (%s)", err);
    fd_cycle_free(c);
    /* the proxy's keys are its handler's (a module on the API) */
    error_at(BASE "[location /x]\nhandler = plaintext\nproxy_send_timeout "
             "= 2s\n", "t.conf:8: \"proxy_send_timeout\" is a key of handler "
             "= proxy, not of handler = plaintext",
             "a proxy key where the handler is not the proxy");

    /* did you mean */
    error_at(BASE "[location /x]\nhandler = plaintxt\n",
             "did you mean \"plaintext\"?", "unknown handler suggestion");
    error_at(BASE "[location /x]\nhanlder = plaintext\n",
             "t.conf:7: unknown key \"hanlder\" in [location /x]; did you "
             "mean \"handler\"?", "unknown key suggestion");
    error_at(BASE "[http]\nkeepalive_timeut = 1s\n",
             "did you mean \"keepalive_timeout\"?", "[http] key suggestion");
    error_at(BASE "[events]\nmax_conections = 1\n",
             "did you mean \"max_connections\"?", "[events] key suggestion");
    error_at(BASE "[location /x]\nlisten = 1\n", "it belongs in [server]",
             "a key of another level says where it belongs");
    error_at(BASE "[sever]\n", "did you mean [server]?", "section suggestion");
    error_at(BASE "[locaton /x]\n", "did you mean [location]?",
             "section suggestion, named");
    error_at(BASE "[events]\naccept = resueport\n",
             "; did you mean \"reuseport\"?", "enum suggestion");
    {
        fd_cycle_t *c2 = load(BASE "[location /x]\nzzqqxx = 1\n", NULL, err);
        ok(c2 == NULL && strstr(err, "did you mean") == NULL,
           "nothing close: no suggestion (%s)", err);
        fd_cycle_free(c2);
    }

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

    /* fastd -t checks every profile, not only the selected one */
    {
        const char *p = write_file("t.conf", BASE "[profile ok]\n"
                                   "http.keepalive_requests = 7\n"
                                   "[profile broken]\n"
                                   "http.keepalive_timeout = 5x\n"
                                   "[profile ok]\n");

        c = fd_cycle_load(p, NULL, err, sizeof(err));
        ok(c != NULL, "no profile selected: loads (%s)", err);
        fd_cycle_free(c);
        is_int(fd_cycle_test_profiles(p, NULL, err, sizeof(err)), FD_ERROR,
               "-t: the broken profile is found");
        ok(strstr(err, "t.conf:9: \"keepalive_timeout\"") &&
           strstr(err, "[profile broken]"), "... naming file:line and the "
           "profile: %s", err);
        is_int(fd_cycle_test_profiles(p, "broken", err, sizeof(err)), FD_OK,
               "skip: the profile already checked is not loaded again");
        p = write_file("t.conf", BASE "[profile ok]\n"
                       "http.keepalive_requests = 7\n");
        is_int(fd_cycle_test_profiles(p, NULL, err, sizeof(err)), FD_OK,
               "-t: good profiles pass (%s)", err);
    }
}

int main(void)
{
    if (fd_modules_init() != FD_OK) /* as main() does */
        return 1;
    if (mkdtemp(dir) == NULL)
        return 1;
    test_values();
    test_near();
    test_levels();
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
