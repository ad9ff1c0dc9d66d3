#!/usr/bin/perl
# API 1.9 and 1.10 from outside the tree, what a cache of a module's
# needs (the proxy's [cache NAME]), and what the proxy's descriptor
# needed (1.10: a key the module parses with a default given to set()
# first, fd_api_unix_sec): tests/modules/spool.c, built against a make
# install, has a directory its workers write in (fd_api_conf_worker_dir:
# made with its parents, and those made given to [main] user by a root
# master, at -t too; one that was there keeps its owner), a key's old
# name refused with the new one (FD_API_RENAMED), and each location's
# match text and kind (fd_api_conf_location), and a stored response
# answered again (fd_resp_fd_send with the validators and the client's
# conditionals and range, fd_resp_fd_body, fd_resp_reset, the fields
# walked with fd_resp_field_next, HTTP dates read by fd_api_http_time,
# fd_api_http_req_t.method, the method as FD_API_* bits). A
# module built for 1.8 that uses FD_API_RENAMED is refused: its type is
# unknown there.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use File::Temp qw(tempdir);
use Test::More;
use IO::Socket::INET;
use Time::HiRes qw(time);

my $root = FastdTest::root();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
ApiModule::install($dir);

is(ApiModule::build("$dir/spool.so", "$root/tests/modules/spool.c"), '',
   'spool.so (API 1.9) builds against the installed API');
FastdTest::spew("$dir/v18.c", qq{#include <fastd.h>
static const fd_api_key_t k[] = {
    {.name = "old", .type = FD_API_RENAMED, .def = "new"}, {.name = NULL}};
static int h(fd_request_t *r) { return fd_resp_body(r, "v18", 3); }
FD_API_MODULE = { FD_API_HEADER, .api_minor = 8, .name = "v18", .keys = k,
                  .handler = h };\n});
is(ApiModule::build("$dir/v18.so", "$dir/v18.c", '-Wno-override-init'), '',
   'a module built for API 1.8 with a key of 1.9\'s type');

# the spool's directory: outside the test's (0700) directory, so that the
# workers' user may reach it
my $base = tempdir('fastd-api19-XXXXXX', TMPDIR => 1, CLEANUP => 1);
chmod 0755, $base;

sub conf {
    my (%o) = @_;
    return FastdTest::base_conf(
        main => { load_module => "$dir/spool.so", %{ $o{main} // {} } },
        locations => "[location = /exact]\nhandler = where\n\n"
            . "[location /pre/]\nhandler = where\n\n"
            . "[location ^~ /stop/]\nhandler = where\n\n"
            . "[location ~ ^/re(x)\$]\nhandler = where\n\n"
            . "[location ~* \\.CI\$]\nhandler = where\n\n"
            . "[location /put/]\nhandler = spool\nspool = up\n\n"
            . "[location /stored]\nhandler = stored\nspool = up\n\n"
            . "[location = /fields]\nhandler = fields\n"
            . "add_header = X-Spool \$spool_handled always\n\n"
            . "[location = /other]\nhandler = plaintext\n"
            . "add_header = X-Spool \$spool_handled always\n\n"
            . "[location = /early]\nhandler = early\n\n"
            . "[location = /mode]\nhandler = mode\n\n"
            . "[location = /mode-own]\nhandler = mode\nspool_mode = move\n\n"
            . ($o{locations} // ''),
        extra => "[spool up]\npath = " . ($o{path} // "$base/a/b/c") . "\n");
}

sub conf_error {
    my ($name, $text) = @_;
    my $path = $t->write_conf($text, "$name.conf");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "$name: -t fails");
    return $out;
}

like(conf_error('relative', conf(path => 'rel/dir')),
     qr/relative\.conf:\d+: "rel\/dir": not an absolute directory/,
     'fd_api_conf_worker_dir: a relative path is refused');
ok(!-e "$base/a", '... and nothing was made on the way');
like(conf_error('renamed', conf(locations =>
                    "[location /old/]\nhandler = spool\nspool_section = up\n")),
     qr/renamed\.conf:\d+: "spool_section" is not a key here any more: use "spool" \(one name for one thing\)/,
     'FD_API_RENAMED: the old name is refused with the new one, at its line');
like(conf_error('v18', FastdTest::base_conf(
                    main => { load_module => "$dir/v18.so" })),
     qr/key "old" has an unknown type/,
     'a 1.8 module\'s FD_API_RENAMED is an unknown type');

SKIP: {
    skip 'giving directories to [main] user needs a root master', 9
        unless $> == 0;
    my $nobody = getpwnam('nobody');
    skip 'no user nobody', 9 unless defined $nobody;
    my $owner = sub { (stat $_[0])[4] // -1 };

    $t->write_conf(conf(main => { user => 'nobody' }, path => "$base/n/b/c"));
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
    is($rc, 0, 'user = nobody: -t passes') or diag($out);
    ok(-d "$base/n/b/c", '-t made the directory and its parents');
    is(join(' ', map { $owner->($_) } "$base/n", "$base/n/b", "$base/n/b/c"),
       join(' ', ($nobody) x 3), '... and gave each it made to nobody');
    is($owner->($base), 0, '... not the parent that was there (root\'s)');
    is((stat "$base/n/b/c")[2] & 07777, 0700, '... mode 0700');

    $t->start;
    my $r = $t->get('/put/');
    is($r && $r->status . ' ' . $r->body, "201 written\n",
       'a worker (nobody) writes in it');
    is($owner->("$base/n/b/c/by-worker"), $nobody, '... as nobody');
    $t->stop;

    # a directory that was there is the administrator's: kept as it is
    mkdir "$base/admin", 0700 or die "mkdir: $!";
    $t->write_conf(conf(main => { user => 'nobody' }, path => "$base/admin"));
    $t->start;
    $r = $t->get('/put/');
    is($r && $r->status, 500, 'a directory root had made stays root\'s: the '
       . 'worker may not write there');
    is($owner->("$base/admin"), 0, '... its owner unchanged');
    $t->stop;
}

# each location as init_conf saw it (FD_API_LOC_*: 1 exact, 2 prefix, 3
# prefix_stop, 4 regex, 5 regex caseless)
$t->write_conf(conf());
$t->start;
for (['/exact', '1 /exact'], ['/pre/x', '2 /pre/'], ['/stop/x', '3 /stop/'],
     ['/rex', '4 ^/re(x)$'], ['/a.ci', '5 \\.CI$']) {
    my ($path, $want) = @$_;
    my $r = $t->get($path);
    is($r && $r->body, "$want\n", "fd_api_conf_location: $path is $want");
}

# 1.10: a key the module parses gets its def first (own 0), then its
# lines; fd_api_unix_sec is the wall clock
{
    my $r = $t->get('/mode');
    my ($mode, $sets, $now) = split ' ', ($r && $r->body) // '';
    is("$mode $sets", 'copy 1', 'FD_API_CUSTOM def: set() gets "copy" alone');
    ok(defined $now && abs($now - time) <= 2,
       'fd_api_unix_sec: the wall clock') or diag($now);
    $r = $t->get('/mode-own');
    ($mode, $sets) = split ' ', ($r && $r->body) // '';
    is("$mode $sets", 'move 2', '... then the location\'s own line');
}

# a stored response answered again: bytes of an open file after a header
# of the module's, its validators, the client's conditionals and range
my $lm = 'Sun, 06 Nov 1994 08:49:37 GMT';
my $r = $t->get('/stored');
is($r && $r->status . ' ' . $r->body, '200 0123456789',
   'fd_resp_fd_send: the entry\'s body, from its offset');
is($r && join('|', map { $r->header($_) // '-' }
                  qw(etag last-modified accept-ranges content-length)),
   qq{"v1"|$lm|bytes|10}, '... its validators written, ranges offered');
$r = $t->get('/stored', 'If-None-Match' => '"v1"');
is($r && $r->status, 304, '... If-None-Match: 304');
is($r && $r->header('etag'), '"v1"', '... which keeps the ETag');
$r = $t->get('/stored', 'If-Modified-Since' => $lm);
is($r && $r->status, 304, '... If-Modified-Since: 304');
$r = $t->get('/stored', 'If-Match' => '"other"');
is($r && $r->status, 412, '... If-Match another: 412');
$r = $t->get('/stored', Range => 'bytes=2-4');
is($r && $r->status . ' ' . $r->body, '206 234', '... a range: 206');
is($r && $r->header('content-range'), 'bytes 2-4/10', '... of the entry');
$r = $t->get('/stored', method => 'HEAD');
is($r && $r->status . ' ' . ($r->header('content-length') // '-') . ' '
       . length($r->body // ''), '200 10 0', '... HEAD: the length, no body');
$r = $t->get('/stored?404');
is($r && $r->status . ' ' . $r->body, '404 0123456789',
   'fd_resp_fd_body: the body of a stored 404');
ok($r && !defined $r->header('etag') && !defined $r->header('accept-ranges'),
   '... no validators, no ranges');
$r = $t->get('/stored?reset');
is($r && $r->status, 412, 'fd_resp_reset, then a 412 of the module\'s');
ok($r && !defined $r->header('x-gone'), '... without the field set before');

$r = $t->http("GET /fields HTTP/1.1\r\nHost: x\r\n"
              . "X-Date: $lm\r\n"
              . "X-Date: Sunday, 06-Nov-94 08:49:37 GMT\r\n"
              . "X-Date: Sun Nov  6 08:49:37 1994\r\n"
              . "X-Date: yesterday\r\n\r\n");
is($r && $r->body, "A: 1\nB: 2\nA: 3\n784111777\n784111777\n784111777\n-1\n"
                   . "method 1\n",
   'fd_resp_field_next walks the fields in order; fd_api_http_time reads '
   . 'the three forms, -1 for none');
for (['POST', 4], ['HEAD', 2], ['PATCH', 64], ['PROPFIND', 128]) {
    my ($m, $bit) = @$_;
    $r = $t->http("$m /fields HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    is($r && $r->header('x-method'), $bit,
       "fd_api_http_req_t.method: $m is $bit");
}

# fd_req_handler_is: the module's variable where its handler answers (a
# handler of its by name) and where another's does
$r = $t->get('/fields');
is($r && $r->header('x-spool'), 'yes', 'fd_req_handler_is: the module\'s');
$r = $t->get('/other');
is($r && $r->header('x-spool'), 'no', '... another module\'s: no');

# fd_resp_send_early: the answer leaves at once, the request ends 3 s
# later, and only then does the connection take its next request
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $t->port) or die "connect: $!";
    my $t0 = time;
    syswrite($s, "GET /early HTTP/1.1\r\nHost: x\r\n\r\n"
                 . "GET /fields HTTP/1.1\r\nHost: x\r\n"
                 . "Connection: close\r\n\r\n");
    my ($buf, $first) = ('', undef);
    while (time < $t0 + 30) {
        my $rin = '';
        vec($rin, fileno($s), 1) = 1;
        last unless select($rin, undef, undef, $t0 + 30 - time);
        last unless sysread($s, $buf, 65536, length $buf);
        $first //= time - $t0 if $buf =~ /\r\n\r\nearly\n/;
    }
    my $all = time - $t0;
    close $s;
    like($buf, qr{^HTTP/1.1 200.*?\r\n\r\nearly\nHTTP/1.1 200}s,
         'fd_resp_send_early: the answer, then the next request\'s');
    cmp_ok($first // 99, '<', 2.5, '... the first before its request ended');
    cmp_ok($all, '>=', 2.9, '... the second after it');
}
$t->stop;

done_testing;
