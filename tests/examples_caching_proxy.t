#!/usr/bin/perl
# conf/examples/caching-proxy.conf as shipped (tests/lib/Examples.pm), in
# front of a real origin: a page is a MISS, then a HIT the origin never
# sees (X-Cache-Status), a HEAD is answered from it, a 404 is kept too, a
# response that sets a cookie is not kept; ten clients missing a slow page
# at once make one origin request; an expired page is answered STALE
# while the new copy is fetched behind it; a visitor with a session cookie
# always goes to the origin (BYPASS) and what he gets is not stored for
# the others; with the origin down the pages kept are still answered, and
# expired ones too (STALE).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Examples;
use Test::More;
use Time::HiRes ();

my $origin = Backend->new(handler => sub {
    my ($req) = @_;
    my $who = ($req->{headers}{cookie} // '') =~ /session=(\w+)/
            ? "for $1" : 'for everyone';
    return Backend::response(404, 'no such page') if $req->{path} eq '/gone';
    return Backend::response(200, 'prices', 'Cache-Control' => 'max-age=1')
        if $req->{path} eq '/prices';
    if ($req->{path} eq '/slow') {
        Time::HiRes::sleep(0.5);
        return Backend::response(200, 'slow page');
    }
    # a new version each time the origin is asked
    return Backend::response(200, 'ticker ' . scalar(grep { /ticker/ }
                             $req->{backend}->log_lines),
                             'Cache-Control' => 'max-age=1')
        if $req->{path} eq '/ticker';
    return Backend::response(200, "cart $who", 'Set-Cookie' => 'cart=1')
        if $req->{path} eq '/cart';
    return Backend::response(200, "page $req->{target} $who",
                             'Content-Type' => 'text/html');
});
my $ex = Examples->new('caching-proxy',
                       backends => { '10.0.2.10:8080' => $origin->addr });
$ex->start;
my $t = $ex->t;
sub get { $ex->get(80, shift, Host => 'www.example.com', @_) }
sub cache_status { my ($r) = @_; $r ? $r->header('x-cache-status') // '' : 'none' }

my $r = get('/news/today');
ok($r && $r->status == 200 && $r->body eq 'page /news/today for everyone',
   'a page from the origin');
is(cache_status($r), 'MISS', '  X-Cache-Status: MISS');
$r = get('/news/today');
ok($r && $r->status == 200 && $r->body eq 'page /news/today for everyone',
   'again: the same page');
is(cache_status($r), 'HIT', '  X-Cache-Status: HIT');
is($origin->requests, 1, '  the origin was asked once');
$r = get('/news/today', method => 'HEAD');
is(cache_status($r), 'HIT', 'a HEAD: a HIT too');

is(cache_status(get('/gone')), 'MISS', 'a 404: MISS');
$r = get('/gone');
ok($r && $r->status == 404 && cache_status($r) eq 'HIT', '  then a HIT (kept a minute)');

get('/cart');
$r = get('/cart');
is(cache_status($r), 'MISS', 'a response that sets a cookie is not kept');

$origin->reset_log;
$r = get('/news/today', Cookie => 'session=ann');
ok($r && $r->body eq 'page /news/today for ann' && cache_status($r) eq 'BYPASS',
   'a logged-in visitor goes to the origin (BYPASS)');
$r = get('/news/today');
ok($r && $r->body eq 'page /news/today for everyone' && cache_status($r) eq 'HIT',
   '  and what he got is not what the others get');
is($origin->requests, 1, '  one request reached the origin');

# ten clients miss one slow page at once: one request reaches the origin
$origin->reset_log;
my @c = map { $t->connect(port => $ex->port(80)) } 1 .. 10;
$_->send("GET /slow HTTP/1.1\r\nHost: www.example.com\r\n\r\n") for @c;
my @slow = map { $_->read_response(timeout => 10) } @c;
is(scalar(grep { $_ && $_->status == 200 && $_->body eq 'slow page' } @slow),
   10, 'ten clients missing one slow page at once all get it');
is($origin->requests, 1, '  from one request to the origin (proxy_cache_lock)');

# expired while the origin is up: answered at once from the old copy
# (STALE), while one request fetches the new one behind it. As a browser
# does, the client keeps its connection: its next request is taken once
# the update is done (one that closes first abandons the update)
$r = get('/ticker');
ok($r && $r->body eq 'ticker 1' && cache_status($r) eq 'MISS',
   'a page fresh for 1 s: MISS');
my ($old, $new);
FastdTest::wait_for(sub {
    my $c = $t->connect(port => $ex->port(80));
    $c->send("GET /ticker HTTP/1.1\r\nHost: www.example.com\r\n\r\n");
    $old = $c->read_response;
    if ($old && cache_status($old) eq 'STALE') {
        $c->send("GET /ticker HTTP/1.1\r\nHost: www.example.com\r\n\r\n");
        $new = $c->read_response;
    }
    $c->close;
    return defined $new;
}, 10, 0.1);
is($old && $old->body, 'ticker 1', '  once expired: the old copy, STALE');
ok($new && $new->body eq 'ticker 2' && cache_status($new) eq 'HIT',
   '  and the new one, fetched behind it, a HIT on the next request')
    or diag($new ? cache_status($new) . ' ' . $new->body : 'none');

$r = get('/prices');
is(cache_status($r), 'MISS', 'a page the origin keeps fresh for 1 s: MISS');

$origin->stop;
$r = get('/news/today');
ok($r && $r->status == 200 && $r->body eq 'page /news/today for everyone'
   && cache_status($r) eq 'HIT', 'the origin down: a kept page is still answered');
$r = get('/news/yesterday');
is($r && $r->status, 502, '  a page never kept: 502');
# fresh for a second (HIT), then expired: the kept copy rather than an error
my $stale = FastdTest::wait_for(sub {
    my $r = get('/prices');
    return $r && $r->status == 200 && $r->body eq 'prices'
        && cache_status($r) eq 'STALE';
}, 10, 0.1);
ok($stale, '  an expired page is answered STALE rather than an error');

$t->no_alerts;
done_testing;
