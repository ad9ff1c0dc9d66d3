#!/usr/bin/perl
# API 1.4 from outside the tree: tests/modules/shout.c, built against a
# make install as a user builds it, has a section type of its own
# ([shout NAME], its keys, a bound checked with fastd's message), a
# configured() hook that may refuse the whole configuration, and a
# response filter that sets a body filter (upper-case, then a suffix).
# A module built for API 1.3 (a descriptor that ends before .section)
# still loads and answers.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use Test::More;

my $root = FastdTest::root();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $prefix = ApiModule::install($dir);

is(ApiModule::build("$dir/shout.so", "$root/tests/modules/shout.c"), '',
   'shout.so (API 1.4) builds against the installed API');
FastdTest::spew("$dir/v13.c", qq{#include <fastd.h>
#include <stddef.h>
static int h(fd_request_t *r) { fd_resp_body(r, "v13", 3); return 0; }
FD_API_MODULE = { FD_API_HEADER, .api_minor = 3,
                  .size = offsetof(fd_api_module_t, section),
                  .name = "v13", .handler = h };\n});
is(ApiModule::build("$dir/v13.so", "$dir/v13.c", '-Wno-override-init'), '',
   'a module built for API 1.3');

sub conf {
    my (%o) = @_;
    return FastdTest::base_conf(
        main => { load_module => ["$dir/shout.so", "$dir/v13.so"] },
        locations => "[location = /v13]\nhandler = v13\n\n"
            . "[location /loud/]\nshout = a\nreturn = 200 \"quiet words\"\n\n"
            . "[location /html/]\nshout = a\n"
            . "return = 404\n\n"
            . ($o{locations} // ''),
        extra => "[shout a]\nsuffix = !!\nlevel = 3\n\n" . ($o{extra} // ''));
}

# errors at -t, each with its file:line
sub conf_error {
    my ($name, %o) = @_;
    my $path = $t->write_conf(conf(%o), "$name.conf");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "$name: -t fails");
    return $out;
}
like(conf_error('bound', extra => "[shout b]\nlevel = 9\n"),
     qr/bound\.conf:\d+: "level" must be 1 \.\. 5, not "9"/,
     '... a section key out of bounds, in fastd\'s words');
like(conf_error('name', extra => "[shout a.very.long.name.x]\n"),
     qr/name\.conf:\d+: \[shout a\.very\.long\.name\.x\]: a name of 1 to 15/,
     '... a section name too long for name_max');
like(conf_error('unknown', locations => "[location /x/]\nshout = nosuch\n"),
     qr/unknown\.conf:\d+: no \[shout nosuch\]/,
     '... a location naming no section');
like(conf_error('configured', extra => "[shout fail]\n"),
     qr/refused once the whole configuration is read/,
     '... and configured() refusing the whole of it');
like(conf_error('twice', extra => "[shout a]\n"), qr/duplicate \[shout a\]/,
     '... the same section twice');

$t->write_conf(conf());
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
is($rc, 0, 'the configuration: -t passes') or diag($out);
$t->start;

my $r = $t->get('/v13');
is($r && $r->status . ' ' . $r->body, '200 v13', 'the 1.3 module answers');
$r = $t->get('/loud/');
is($r && $r->status . ' ' . $r->body, '200 QUIET WORDS!!',
   'the response filter set a body filter: upper-cased, and the suffix');
is($r && $r->header('x-shout'), 'a', '... with its header');
ok($r && !defined $r->header('content-length') &&
   ($r->header('transfer-encoding') // '') =~ /chunked/,
   '... of a length not known before: chunked');
$r = $t->get('/loud/', method => 'HEAD');
is($r && $r->status, 200, 'HEAD: 200');
ok($r && !defined $r->header('content-length') && $r->header('x-shout'),
   '... the header a GET gets, with no length');
$r = $t->get('/html/');
is($r && $r->status, 404, 'another status: left alone');
ok($r && !defined $r->header('x-shout'), '... no filter');
$r = $t->get('/plaintext');
is($r && $r->body, 'Hello, World!', 'a location without shout: untouched');
$t->stop;
$t->no_alerts;
done_testing;
