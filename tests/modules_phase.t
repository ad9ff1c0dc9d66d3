#!/usr/bin/perl
# API 1.2: a phase module loaded at run time (tests/modules/gate.c, built
# as a user builds one): its access hook refuses with a status and a
# header of its own, or holds a request on a timer and lets it go on
# (fd_api_continue); its FD_API_LIST key is inherited from [server] and
# replaced by a location's own lines; its $variable is expanded by
# add_header; its log hook's count is in /status's Prometheus text; a
# module built for 1.1 (a descriptor that ends before set) still loads.
# API 1.3: a variable compiled once by name (fd_api_var_compile, from
# init_conf) and read per request by its handle (fd_req_var_value): a
# plain one, one of the $http_NAME family, a number; an unknown name is
# refused at -t with a "did you mean"; the reopen hook runs in each
# worker on SIGUSR1; a module built for 1.2 (a descriptor that ends
# before reopen) still loads.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use Time::HiRes qw(time);
use Test::More;

my $root = FastdTest::root();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $prefix = ApiModule::install($dir);

is(ApiModule::build("$dir/gate.so", "$root/tests/modules/gate.c"), '',
   'gate.so (API 1.2) builds against the installed API');
FastdTest::spew("$dir/v11.c", qq{#include <fastd.h>
#include <stddef.h>
static int h(fd_request_t *r) { fd_resp_body(r, "v11", 3); return 0; }
FD_API_MODULE = { FD_API_HEADER, .api_minor = 1,
                  .size = offsetof(fd_api_module_t, set),
                  .name = "v11", .handler = h };\n});
is(ApiModule::build("$dir/v11.so", "$dir/v11.c", '-Wno-override-init'), '',
   'a module built for API 1.1');
FastdTest::spew("$dir/v12.c", qq{#include <fastd.h>
#include <stddef.h>
static int h(fd_request_t *r) { fd_resp_body(r, "v12", 3); return 0; }
FD_API_MODULE = { FD_API_HEADER, .api_minor = 2,
                  .size = offsetof(fd_api_module_t, reopen),
                  .name = "v12", .handler = h };\n});
is(ApiModule::build("$dir/v12.so", "$dir/v12.c", '-Wno-override-init'), '',
   'a module built for API 1.2');

$t->write_conf(FastdTest::base_conf(
    main => { load_module => ["$dir/gate.so", "$dir/v11.so", "$dir/v12.so"] },
    server => { gate_deny => '/s' },
    locations => "[location /own/]\nhandler = plaintext\ngate_deny = /own/x\n"
        . "add_header = X-Seen \$gate_seen\n\n"
        . "[location /held/]\nhandler = plaintext\ngate_hold = 150ms\n"
        . "add_header = X-Seen \$gate_seen\n\n"
        . "[location = /v11]\nhandler = v11\n\n"
        . "[location = /v12]\nhandler = v12\n\n"
        . "[location = /status]\nhandler = status\n\n"
        . "[location = /echo/method]\nhandler = gate_echo\n"
        . "gate_echo = request_method\n\n"
        . "[location = /echo/header]\nhandler = gate_echo\n"
        . "gate_echo = http_x_thing\n\n"
        . "[location = /echo/port]\nhandler = gate_echo\n"
        . "gate_echo = server_port\n\n"));
$t->start;

my $r = $t->get('/v11');
is($r && $r->status . ' ' . $r->body, '200 v11', 'the 1.1 module answers');
$r = $t->get('/v12');
is($r && $r->status . ' ' . $r->body, '200 v12', 'the 1.2 module answers');
$r = $t->get('/s');
is($r && $r->status, 451, "[server]'s gate_deny: the access hook's status");
is($r && $r->header('X-Gate'), 'no', '... with the header it added');
$r = $t->get('/own/x');
is($r && $r->status, 451, "a location's own gate_deny");
$r = $t->get('/own/s');
is($r && $r->status, 200, "... replaces the inherited one")
    or diag($r && $r->status);
is($r && $r->header('X-Seen'), 'passed', '$gate_seen: the module\'s variable');
my $t0 = time;
$r = $t->get('/held/');
my $took = time - $t0;
ok($r && $r->status != 451 && $r->status < 500, 'a held request goes on after fd_api_continue')
    or diag($r && $r->status);
is($r && $r->header('X-Seen'), 'held', '... from the timer that released it');
cmp_ok($took, '>=', 0.14, '... held gate_hold long');

# the log hook ran for each request that ended: the five above, and each
# /status asked since (a request's hook runs as it ends, which may be
# after its client has the answer: ask until the count is there)
my ($n, $body) = (0, '');
for (1 .. 50) {
    $r = $t->get('/status?format=prometheus');
    $body = $r ? $r->body : '';
    ($n) = $body =~ /^fastd_gate_logged_total(?:\{[^}]*\})?\s+(\d+)/m;
    last if defined $n && $n >= 5;
}
ok(defined $n && $n >= 5, 'the log hook counted the ended requests in /status')
    or diag(join "\n", $body =~ /(.*gate.*)/g);

# 1.3: variables compiled once
$r = $t->get('/echo/method', method => 'HEAD');
is($r && $r->status, 200, 'a compiled variable: HEAD answered');
$r = $t->get('/echo/method');
is($r && $r->body, 'GET', 'fd_req_var_value: $request_method by its handle');
$r = $t->get('/echo/header', 'X-Thing' => 'hello');
is($r && $r->body, 'hello', '... $http_x_thing, of the $http_ family');
$r = $t->get('/echo/header');
is($r && $r->status . ' [' . $r->body . ']', '200 []', '... not set: empty');
$r = $t->get('/echo/port');
is($r && $r->body, $t->port . ' (number)',
   '... $server_port, and fd_api_var_flags says it is a number');

# 1.3: the reopen hook, in the worker, on SIGUSR1
unlike($t->error_log, qr/gate: reopen/, 'no reopen before the signal');
$t->signal('USR1');
ok(FastdTest::wait_for(sub { $t->error_log =~ /gate: reopen/ }, 10),
   "SIGUSR1: the module's reopen hook ran");
$t->stop;

my $bad = FastdTest::base_conf(
    main => { load_module => ["$dir/gate.so"] },
    locations => "[location = /e]\nhandler = gate_echo\n"
        . "gate_echo = request_metod\n\n");
$t->write_conf($bad, 'bad.conf');
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', "$dir/bad.conf");
ok($rc != 0 && $out =~ /unknown variable "\$request_metod"/
       && $out =~ /did you mean "\$request_method"/
       && $out =~ /bad\.conf:\d+/,
   'fd_api_var_compile: an unknown name is refused at -t, with a hint')
    or diag($out);

done_testing();
