#!/usr/bin/perl
# conf/examples/spa-api.conf as shipped (tests/lib/Examples.pm), with a
# real API server: client routes and / get index.html (no-cache), files
# are files, /assets/ are kept for long and a missing one is a 404, /api/
# reaches the API with the client's path and query, and the API's own
# answers (a 404, a POST's 201) pass unchanged; text is gzip-compressed.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Examples;
use File::Path qw(make_path);
use Test::More;

my $api = Backend->new(handler => sub {
    my ($req) = @_;
    return Backend::response(404, '{"error":"no such user"}',
                             'Content-Type' => 'application/json')
        if $req->{path} eq '/api/users/0';
    return Backend::response(201, "created: $req->{body}",
                             'Location' => '/api/users/7')
        if $req->{method} eq 'POST';
    return Backend::response(200, "api $req->{method} $req->{target}");
});
my $ex = Examples->new('spa-api',
                       backends => { '127.0.0.1:8000' => $api->addr });
my $dist = $ex->www . '/app/dist';
make_path("$dist/assets");
my $index = "<!doctype html><div id=app></div>"
          . "<script type=module src=/assets/index-4f2c1a.js></script>\n"
          . ("<!-- padding so that gzip takes it -->\n" x 10);
my $js = "import{a}from'./x.js';" . ("console.log('app');" x 30) . "\n";
FastdTest::spew("$dist/index.html", $index);
FastdTest::spew("$dist/assets/index-4f2c1a.js", $js);
FastdTest::spew("$dist/favicon.ico", "\0\0\1\0");
$ex->start;
my $t = $ex->t;
sub get { $ex->get(80, shift, Host => 'app.example.com', @_) }

for my $p ('/', '/users/42', '/settings/profile?tab=2', '/deep/link/') {
    my $r = get($p);
    ok($r && $r->status == 200 && $r->body eq $index,
       "$p: the application's index.html")
        or diag($r ? $r->status . ' ' . $r->body : 'no response');
    like($r && $r->header('cache-control') // '', qr/^no-cache$/,
         '  Cache-Control: no-cache');
}
my $r = get('/users/42', 'Accept-Encoding' => 'gzip');
ok($r && ($r->header('content-encoding') // '') eq 'gzip'
   && FastdTest::unzip($r->body) eq $index, '  gzip-compressed when asked');

$r = get('/favicon.ico');
ok($r && $r->status == 200 && $r->body eq "\0\0\1\0", 'a file is a file');
$r = get('/assets/index-4f2c1a.js');
ok($r && $r->status == 200 && $r->body eq $js, 'an asset is served');
like($r && $r->header('cache-control') // '', qr/^max-age=\d{8,}$/,
     '  kept for years');
$r = get('/assets/index-0000.js');
is($r && $r->status, 404, 'a missing asset: 404, not index.html');

$r = get('/api/users?page=2');
ok($r && $r->status == 200 && $r->body eq 'api GET /api/users?page=2',
   '/api/ reaches the API with the path and query as sent')
    or diag($r ? $r->status . ' ' . $r->body : 'no response');
$r = get('/api/users/0');
ok($r && $r->status == 404 && $r->body eq '{"error":"no such user"}',
   'the API\'s 404 passes as it is (not index.html)');
$r = $t->http("POST /api/users HTTP/1.1\r\nHost: app.example.com\r\n"
              . "Content-Type: application/json\r\nContent-Length: 12\r\n\r\n"
              . '{"name":"a"}', port => $ex->port(80));
ok($r && $r->status == 201 && $r->body eq 'created: {"name":"a"}'
   && $r->header('location') eq '/api/users/7', 'a POST to the API: its 201');

$t->no_alerts;
done_testing;
