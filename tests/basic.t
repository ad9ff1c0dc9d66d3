#!/usr/bin/perl
# plaintext, json, Date, HEAD, keep-alive rules for HTTP/1.0 and 1.1, 404.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);

my $t = FastdTest->new(conf => FastdTest::base_conf());
$t->start;

# --- plaintext -------------------------------------------------------------
my $r = $t->get('/plaintext');
ok($r, 'GET /plaintext answered') or BAIL_OUT('no response');
is($r->{status}, 200, 'plaintext: 200');
is($r->{body}, 'Hello, World!', 'plaintext: body');
like($r->header('content-type') // '', qr{^text/plain\b}i,
     'plaintext: Content-Type text/plain');
is($r->header('content-length'), 13, 'plaintext: Content-Length 13');
ok(defined $r->header('server') && length $r->header('server'),
   'plaintext: Server present');
ok(FastdTest::is_http_date($r->header('date')),
   'plaintext: Date is RFC 1123') or diag('Date: ' . ($r->header('date') // 'none'));
is(scalar $r->header_all('date'), 1, 'plaintext: one Date header');
ok(!defined $r->header('transfer-encoding'), 'plaintext: not chunked');

# --- json ------------------------------------------------------------------
$r = $t->get('/json');
is($r->{status}, 200, 'json: 200');
like($r->header('content-type') // '', qr{^application/json\b}i,
     'json: Content-Type application/json');
my $obj = eval { JSON::PP->new->decode($r->{body}) };
is_deeply($obj, { message => 'Hello, World!' }, 'json: body decodes')
    or diag("body: $r->{body}");
is($r->header('content-length'), length $r->{body},
   'json: Content-Length matches the body');
ok(FastdTest::is_http_date($r->header('date')), 'json: Date is RFC 1123');
ok(defined $r->header('server'), 'json: Server present');

# --- Date moves on ---------------------------------------------------------
{
    my $d1 = $t->get('/plaintext')->header('date');
    my $d2;
    my $changed = FastdTest::wait_for(sub {
        my $x = $t->get('/plaintext');
        $d2 = $x && $x->header('date');
        defined $d2 && $d2 ne $d1;
    }, 4, 0.2);
    ok($changed, 'Date changes within 4 s') or diag("still $d1");
    ok(FastdTest::is_http_date($d2), 'the new Date is RFC 1123');
}

# --- HEAD --------------------------------------------------------------------
{
    my $c = $t->connect;
    # HEAD then GET on one connection: the GET parses only if HEAD sent no body
    $c->send("HEAD /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"
           . "GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
    my ($h, $g) = $c->read_responses(2, head => [1, 0]);
    ok($h, 'HEAD answered');
    is($h && $h->{status}, 200, 'HEAD: 200');
    is($h && $h->header('content-length'), 13, 'HEAD: Content-Length 13');
    is($h && $h->{body}, '', 'HEAD: no body');
    ok($g && $g->{status} == 200 && $g->{body} =~ /^\{.*Hello, World!.*\}$/s,
       'GET after HEAD on the same connection parses (no stray HEAD body)')
        or diag('raw: ' . $c->{raw});
    $c->close;
}

# --- HTTP/1.0 ----------------------------------------------------------------
{
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.0\r\n\r\n");
    my $x = $c->read_response;
    is($x && $x->{status}, 200, 'HTTP/1.0: 200 without Host');
    is($x && $x->{body}, 'Hello, World!', 'HTTP/1.0: body');
    unlike($x ? ($x->header('connection') // '') : '', qr/keep-alive/i,
           'HTTP/1.0: no keep-alive offered');
    ok($c->wait_eof(5), 'HTTP/1.0: server closes after the response');
    is($c->{buf}, '', 'HTTP/1.0: nothing after the response');
    $c->close;
}
{
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    my $x = $c->read_response;
    is($x && $x->{status}, 200, 'HTTP/1.0 keep-alive: 200');
    like($x ? ($x->header('connection') // '') : '', qr/^keep-alive$/i,
         'HTTP/1.0 keep-alive: Connection: keep-alive in the response');
    ok(!$c->wait_eof(0.5), 'HTTP/1.0 keep-alive: connection stays open');
    $c->send("GET /json HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    $x = $c->read_response;
    is($x && $x->{status}, 200, 'HTTP/1.0 keep-alive: second request answered');
    $c->send("GET /plaintext HTTP/1.0\r\n\r\n");
    $x = $c->read_response;
    is($x && $x->{status}, 200, 'HTTP/1.0: third request without keep-alive');
    ok($c->wait_eof(5), 'HTTP/1.0: ... and then the server closes');
    $c->close;
}

# --- HTTP/1.1 keep-alive -----------------------------------------------------
{
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    my $a = $c->read_response;
    is($a && $a->{status}, 200, 'HTTP/1.1: first request');
    unlike($a ? ($a->header('connection') // '') : '', qr/close/i,
           'HTTP/1.1: no Connection: close');
    ok(!$c->wait_eof(0.5), 'HTTP/1.1: connection stays open');
    $c->send("GET /json HTTP/1.1\r\nHost: x\r\n\r\n");
    my $b = $c->read_response;
    is($b && $b->{status}, 200, 'HTTP/1.1: second request on the same connection');
    like($b ? $b->{body} : '', qr/Hello, World!/, 'HTTP/1.1: second body');
    $c->close;
}
{
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    my $x = $c->read_response;
    is($x && $x->{status}, 200, 'Connection: close: 200');
    like($x ? ($x->header('connection') // '') : '', qr/^close$/i,
         'Connection: close echoed');
    ok($c->wait_eof(5), 'Connection: close: server closes');
    is($c->{buf}, '', 'Connection: close: nothing after the response');
    $c->close;
}

# --- static and 404 ----------------------------------------------------------
$r = $t->get('/no/such/file.html');
is($r && $r->{status}, 404, 'unknown path under root: 404');
like($r ? ($r->header('content-type') // '') : '', qr{^text/html}i,
     '404 page is html');
ok($r && FastdTest::is_http_date($r->header('date')), '404 carries a Date');

$r = $t->get('/');
is($r && $r->{status}, 200, 'GET / serves the index page');
like($r ? ($r->header('content-type') // '') : '', qr{^text/html}i,
     'index page is text/html');

# --- targets -------------------------------------------------------------------
$r = $t->get('/plaintext?x=1&y=%41');
is($r && $r->{status}, 200, 'a query string does not change the location');
is($r && $r->{body}, 'Hello, World!', '... plaintext body');
$r = $t->get('/plain%74ext');
is($r && $r->{body}, 'Hello, World!', 'percent-encoded path is decoded before routing');
$r = $t->get('/x/../plaintext');
is($r && $r->{body}, 'Hello, World!', 'dot segments are normalised before routing');

# The server keeps serving after all of the above
is($t->get('/plaintext')->{status}, 200, 'still serving');

$t->stop;
$t->no_alerts;
done_testing;
