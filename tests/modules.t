#!/usr/bin/perl
# Modules loaded at run time, built as a user builds one: make install
# into a scratch prefix, then tests/modules/app.c compiled outside the tree
# against the installed fastd.h and pkg-config file (and jansson), loaded
# with [main] load_module. The example answers its routes over HTTP/1.1,
# HTTP/2 and TLS; its blocking twin runs on the offload pool, so 200 slow
# requests behind a [queue] never stall /plaintext on the same worker; a
# module built for another API version, or with another ABI, or whose
# configuration check fails, or whose key another table has, is refused
# at -t naming the load_module line; a module that crashes takes down its
# worker only, which is respawned; a reload may load one more, and is
# refused when a loaded module's file changed.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use IO::Socket::INET;
use Time::HiRes qw(time sleep);
use Test::More;

my $root = FastdTest::root();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;

# --- make install: the header and the pkg-config file ----------------------
my $prefix = ApiModule::install($dir);
my $cflags = ApiModule::cflags();
like($cflags, qr{-I\Q$prefix\E/include/fastd}, 'pkg-config --cflags fastd');

# the public headers alone, strictly (fastd_upstream.h: a backend
# protocol's, 1.7; fastd_tls.h: certificates a module provides, 1.8;
# fastd_stream.h: connections below HTTP, 1.8)
for my $h (qw(fastd.h fastd_upstream.h fastd_tls.h fastd_stream.h)) {
    my $out = `cc -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -x c '$prefix/include/fastd/$h' 2>&1`;
    is($?, 0, "$h compiles alone with -std=c11 -Wall -Wextra -Werror -pedantic")
        or diag($out);
    unlike(FastdTest::slurp("$prefix/include/fastd/$h"),
           qr/fd_connection_t|fd_http_loc_t|fd_pool_t|fd_cycle_t|fd_buf_t|fd_upstream_(?:req_|peer_|opts_|proto_|conn_)?t\b|fd_sendop_t|fd_splice_t|fd_stream_t|fd_listening_t|\bSSL(?:_CTX)?\b|X509|EVP_PKEY/,
           '... and names no engine type (nor OpenSSL\'s)');
}

sub build { ApiModule::build(@_) }
my $app = "$root/tests/modules/app.c";
is(build("$dir/app.so", $app), '', 'app.so builds against the installed API');
is(build("$dir/app_blocking.so", $app, '-DAPP_BLOCKING'), '',
   'app_blocking.so (the same handler, declared blocking)');
is(build("$dir/scgi.so", "$root/tests/modules/scgi.c"), '',
   'scgi.so (a backend protocol on fastd_upstream.h, the guide\'s example) builds');

FastdTest::self_signed("$dir/cert", 'localhost');
my $tls_port = $t->another_port;
sub conf {
    my (%o) = @_;
    return FastdTest::base_conf(
        main => { load_module => [ "$dir/app.so", "$dir/app_blocking.so",
                                   @{ $o{more} || [] } ],
                  workers => $o{workers} // 1 },
        # two listen lines: the second rides on the first's value
        server => { listen => "127.0.0.1:%%PORT%% http2\n"
                            . "listen = 127.0.0.1:$tls_port ssl http2",
                    ssl_certificate => "$dir/cert.crt",
                    ssl_certificate_key => "$dir/cert.key" },
        locations => "[location /app/]\nhandler = app\n"
                   . "app_greeting = hi there\n\n"
                   . "[location /b/]\nhandler = app_blocking\n"
                   . "app_blocking_delay = 300ms\nqueue = slow\n\n"
                   . ($o{locations} // ''),
        extra => "[queue slow]\nmax_concurrent = 16\nqueue_limit = 1000\n\n");
}
$t->write_conf(conf());
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
is($rc, 0, 'fastd -t with both modules loaded') or diag($out);

$t->start;
my $p = $t->port;
sub body { my $r = $t->get(@_); $r ? "$r->{status} " . ($r->{body} // '') : 'none' }

is(body('/app/hello'), '200 hi there', 'GET /hello: its key, app_greeting');
my $r = $t->http("POST /app/items HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               . "Content-Length: 16\r\n\r\n{\"name\":\"apple\"}");
is($r && $r->{status}, 201, 'POST /items: 201');
is($r && $r->{body}, '{"id":1,"name":"apple"}', '... the item, from the JSON body it parsed');
$r = $t->http("POST /app/items HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nxyz");
is($r && $r->{status}, 400, 'POST /items with a body that is not JSON: 400');
is(body('/app/items'), '200 [{"id":1,"name":"apple"}]', 'GET /items lists it');
is($t->get('/app/items/1', method => 'DELETE')->{status}, 204, 'DELETE /items/1: 204');
is($t->get('/app/items/1', method => 'DELETE')->{status}, 404, 'again: 404');
is($t->get('/app/items', method => 'PUT')->{status}, 405,
   'PUT, a method the module does not take: 405 from the engine');
is(body('/app/var?x=7', 'X-Test' => 'yes'), "200 127.0.0.1 7 yes\n",
   'a variable, an argument and a header, through the API');
is($t->get('/app/nothing')->{status}, 404, 'no route: FD_DECLINED is 404');

# the stream: five events from the loop's timers, chunked
{
    my $c = $t->connect;
    $c->send("GET /app/stream HTTP/1.1\r\nHost: x\r\n\r\n");
    my $s = $c->read_response(timeout => 5);
    is($s && $s->{headers}{'transfer-encoding'}, 'chunked',
       'GET /stream over HTTP/1.1: chunked');
    is($s && $s->{headers}{'content-type'}, 'text/event-stream', '... text/event-stream');
    is($s && $s->{body}, join('', map { "data: event $_\n\n" } 0 .. 4),
       '... five events');
    $c->send("GET /app/hello HTTP/1.1\r\nHost: x\r\n\r\n");
    my $n = $c->read_response(timeout => 5);
    is($n && $n->{body}, 'hi there', '... and the connection goes on');
    $c->close;
}

# HTTP/2 and TLS, with curl
SKIP: {
    skip 'curl is not installed', 4 unless -x '/usr/bin/curl';
    my $o = `curl -s --http2-prior-knowledge http://127.0.0.1:$p/app/hello`;
    is($o, 'hi there', 'HTTP/2 (h2c): GET /hello');
    $o = `curl -s --http2-prior-knowledge http://127.0.0.1:$p/app/stream`;
    is($o, join('', map { "data: event $_\n\n" } 0 .. 4), 'HTTP/2: the stream, as DATA frames');
    $o = `curl -sk https://127.0.0.1:$tls_port/app/hello`;
    is($o, 'hi there', 'TLS (h2 by ALPN): GET /hello');
    $o = `curl -sk --http1.1 https://127.0.0.1:$tls_port/b/hello`;
    is($o, 'hello', 'TLS, HTTP/1.1: the blocking module');
}

# the blocking handler: 200 requests of 300 ms behind the queue, while
# /plaintext on the same (single) worker stays quick: the loop never waits
{
    my @socks;
    for (1 .. 200) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p)
            or last;
        print $s "GET /b/slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        push @socks, $s;
    }
    is(scalar @socks, 200, '200 slow requests sent to the blocking module');
    sleep 0.2;
    my @ms;
    for (1 .. 9) {
        my $t0 = time;
        my $pr = $t->get('/plaintext');
        push @ms, 1000 * (time - $t0) if $pr && $pr->{status} == 200;
    }
    @ms = sort { $a <=> $b } @ms;
    is(scalar @ms, 9, '/plaintext answers meanwhile');
    # a loop blocked by the handler would hold each for 300 ms or more
    cmp_ok($ms[4] // 1e9, '<', 150, sprintf('... its median %.1f ms (a '
           . 'blocked loop: 300 ms and more)', $ms[4] // -1));
    my $done = 0;
    for my $s (@socks) {
        local $/;
        $s->timeout(30);
        my $resp = <$s> // '';
        $done++ if $resp =~ m{^HTTP/1\.1 200 .*slept\n\z}s;
    }
    is($done, 200, '... and every slow request ends with its answer');
}

# the tutorial in modules/README.md builds, loads and answers as it says
{
    my ($src) = (FastdTest::slurp("$root/modules/README.md") // '')
        =~ /## Your own module in ten minutes.*?```c\n(.*?)```/s;
    ok(defined $src, "modules/README.md's tutorial has its hello.c");
    FastdTest::spew("$dir/hello.c", $src // '');
    is(build("$dir/hello.so", "$dir/hello.c"), '', '... which builds');
    my $h = FastdTest->new(conf => FastdTest::base_conf(
        main => { load_module => "$dir/hello.so" },
        locations => "[location /hello]\nhandler = hello\nhello_greeting = Hi!\n\n"));
    $h->start;
    my $hr = $h->get('/hello');
    is($hr && "$hr->{status} $hr->{body}", '200 Hi!', '... and answers Hi!');
    $h->stop;
}

# --- refusals at -t -------------------------------------------------------------
sub refused {
    my ($what, $so_or_conf, $re, %o) = @_;
    my $text = $o{conf} // conf(more => [$so_or_conf]);
    my $file = $t->write_conf($text, 'bad.conf');
    my ($rc2, $o2) = FastdTest::run_fastd('-t', '-c', $file);
    my $line = FastdTest::line_of($t->subst($text),
                                  $o{line} // qr/^load_module = \Q$so_or_conf\E/);
    is($rc2, 1, "$what: -t fails");
    like($o2, qr/\Q$file\E:$line: .*$re/, "$what: says why, at $file:$line")
        or diag($o2);
}

FastdTest::spew("$dir/v2.c", qq{#include <fastd.h>
static int h(fd_request_t *r) { (void)r; return 200; }
FD_API_MODULE = { FD_API_HEADER, .api_major = 2, .api_minor = 3,
                  .name = "v2", .handler = h };\n});
is(build("$dir/v2.so", "$dir/v2.c", '-Wno-override-init'), '', 'a module built for API 2.3');
my ($minor) = FastdTest::slurp('core/api/fastd.h') =~ /FD_API_VERSION_MINOR (\d+)/;
refused('API 2.3', "$dir/v2.so",
        qr/built for fastd API 2\.3, this fastd has API 1\.$minor .*rebuild it against this fastd's headers/);
# a minor version only adds: a module built for 1.0 (a shorter descriptor,
# without .handlers) loads into a newer 1.x
FastdTest::spew("$dir/old.c", qq{#include <fastd.h>
#include <stddef.h>
static int h(fd_request_t *r) { fd_resp_body(r, "old", 3); return 0; }
FD_API_MODULE = { FD_API_HEADER, .api_minor = 0,
                  .size = offsetof(fd_api_module_t, handlers),
                  .name = "old", .handler = h };\n});
is(build("$dir/old.so", "$dir/old.c", '-Wno-override-init'), '', 'a module built for API 1.0');
# 1.1: one module, several handler names sharing its keys
FastdTest::spew("$dir/multi.c", qq{#include <fastd.h>
typedef struct { const char *word; } m_t;
static const fd_api_key_t k[] = {{.name = "multi_word", .type = FD_API_STRING,
    .offset = 0, .def = "w"}, {.name = 0}};
static int one(fd_request_t *r) { const m_t *c = fd_req_conf(r);
    fd_resp_body(r, c->word, 1); return 0; }
static int two(fd_request_t *r) { const m_t *c = fd_req_conf(r);
    fd_resp_body(r, c->word, 2); return 0; }
static const fd_api_handler_t hs[] = {{.name = "multi_one", .handler = one},
    {.name = "multi_two", .handler = two, .methods = FD_API_POST}, {.name = 0}};
FD_API_MODULE = { FD_API_HEADER, .name = "multi", .keys = k,
                  .conf_size = sizeof(m_t), .handlers = hs };\n});
is(build("$dir/multi.so", "$dir/multi.c"), '', 'a module with two handlers');
{
    my $m = FastdTest->new(conf => FastdTest::base_conf(
        main => { load_module => ["$dir/old.so", "$dir/multi.so"] },
        locations => "[location = /old]\nhandler = old\n\n" .
                     "[location = /one]\nhandler = multi_one\nmulti_word = xy\n\n" .
                     "[location = /two]\nhandler = multi_two\nmulti_word = xy\n\n"));
    $m->start;
    my $r = $m->get('/old');
    is($r && "$r->{status} $r->{body}", '200 old', 'the 1.0 module answers');
    $r = $m->get('/one');
    is($r && "$r->{status} $r->{body}", '200 x', 'handler multi_one, with the module\'s key');
    $r = $m->http("POST /two HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n\r\nb");
    is($r && "$r->{status} $r->{body}", '200 xy', 'handler multi_two takes its methods');
    $r = $m->get('/two');
    is($r && $r->{status}, 405, '... and only those');
    $m->stop;
}
FastdTest::spew("$dir/dup.c", qq{#include <fastd.h>
static int h(fd_request_t *r) { (void)r; return 200; }
static const fd_api_handler_t hs[] = {{.name = "static", .handler = h}, {.name = 0}};
FD_API_MODULE = { FD_API_HEADER, .name = "dup", .handlers = hs };\n});
is(build("$dir/dup.so", "$dir/dup.c"), '', 'a module with a handler named static');
refused('a handler name taken', "$dir/dup.so", qr/handler named "static" is already there/);
FastdTest::spew("$dir/abi.c", qq{#include <fastd.h>
static int h(fd_request_t *r) { (void)r; return 200; }
FD_API_MODULE = { FD_API_HEADER, .abi = "fastd-api-1/lp4",
                  .name = "abi", .handler = h };\n});
is(build("$dir/abi.so", "$dir/abi.c", '-Wno-override-init'), '', 'a module for another ABI');
refused('another ABI', "$dir/abi.so", qr/ABI \(fastd-api-1\/lp4.*is not this fastd's/);
FastdTest::spew("$dir/nosym.c", "int nothing_here;\n");
is(build("$dir/nosym.so", "$dir/nosym.c"), '', 'a shared object that is no module');
refused('no fastd_module', "$dir/nosym.so", qr/no fastd_module in it/);
refused('a missing file', "$dir/missing.so", qr/No such file/);
FastdTest::spew("$dir/clash.c", qq{#include <fastd.h>
typedef struct { const char *r; } c_t;
static const fd_api_key_t k[] = {{.name = "root", .type = FD_API_STRING}, {.name = 0}};
static int h(fd_request_t *r) { (void)r; return 200; }
FD_API_MODULE = { FD_API_HEADER, .name = "clash", .keys = k,
                  .conf_size = sizeof(c_t), .handler = h };\n});
is(build("$dir/clash.so", "$dir/clash.c"), '', 'a module with a key named root');
refused('a key another table has', "$dir/clash.so", qr/root/);
# the module's own check of its configuration
refused('init_conf refuses', undef, qr/app_delay: at most 10s/,
        conf => conf(locations => "[location /c/]\nhandler = app\napp_delay = 20s\n\n"),
        line => qr/^\[location \/c\/\]/);

# --- a crash takes its worker only ------------------------------------------------
FastdTest::spew("$dir/crash.c", qq{#include <fastd.h>
#include <stdlib.h>
static int h(fd_request_t *r) { (void)r; abort(); }
FD_API_MODULE = { FD_API_HEADER, .name = "crash", .handler = h };\n});
is(build("$dir/crash.so", "$dir/crash.c"), '', 'a module that crashes');
$t->write_conf(conf(more => ["$dir/crash.so"],
                    locations => "[location = /crash]\nhandler = crash\n\n"));
ok($t->signal('HUP'), 'reload: load one more module');
ok(FastdTest::wait_for(sub { my $x = $t->get('/crash'); !$x || $x->{status} != 404 }, 10, 0.1),
   '... its location answers (by crashing)');
my $x = $t->get('/crash');
ok(!$x || !$x->{status}, 'the crash cuts the connection');
ok(FastdTest::wait_for(sub { body('/app/hello') eq '200 hi there' }, 10, 0.1),
   'a new worker is there and the other modules serve');
like($t->error_log, qr/worker \d+ exited on signal 6/, 'the dead worker is logged');

# --- a loaded module's file changed: the reload is refused ------------------------
{
    my $before = $t->error_log;
    utime(undef, undef, "$dir/app_blocking.so");
    sleep 0.02;
    system('touch', "$dir/app_blocking.so");
    ok($t->signal('HUP'), 'reload after app_blocking.so changed');
    ok(FastdTest::wait_for(sub { $t->error_log =~ /app_blocking\.so": the file changed since it was loaded/ },
                           10, 0.1), '... refused: the file changed since it was loaded');
    is(body('/app/hello'), '200 hi there', '... the old configuration serves');
}

$t->stop;
$t->no_alerts(allow => qr/exited on signal 6|the file changed/);
done_testing();
