#!/usr/bin/perl
# conf/examples/static-https.conf as shipped (tests/lib/Examples.pm): port
# 80 answers 301 to the same URL on https:// (path and query kept, for
# each server_name), but for the ACME challenges, which it serves; port 443
# serves the files over TLS, HTTP/2 by ALPN, with HSTS on every answer
# (the 404 page too), gzip, and the 30-day lifetime on /assets/.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Examples;
use Test::More;

my $ex = Examples->new('static-https');
my $www = $ex->www;
my $page = "<!doctype html><title>home</title>\n"
         . ("<p>the static site's home page</p>\n" x 20);
FastdTest::spew("$www/example.com/index.html", $page);
my $about = "<!doctype html><title>about</title>\n"
          . ("<p>who we are, at some length</p>\n" x 20);
FastdTest::spew("$www/example.com/about.html", $about);
FastdTest::spew("$www/example.com/404.html", "<h1>not here</h1>\n");
mkdir "$www/example.com/assets" or die;
FastdTest::spew("$www/example.com/assets/site.3f2a.css", "body{margin:0}\n");
mkdir "$www/letsencrypt/.well-known" or die;
mkdir "$www/letsencrypt/.well-known/acme-challenge" or die;
FastdTest::spew("$www/letsencrypt/.well-known/acme-challenge/Tk9xQ",
                "Tk9xQ.thumbprint");
$ex->start;
my $t = $ex->t;
my ($http, $https) = ($ex->port(80), $ex->port(443));

# --- port 80 ---------------------------------------------------------------

for my $c (['example.com', '/docs/intro.html?lang=fr&x=1'],
           ['www.example.com', '/'],
           ['example.com', '/assets/site.3f2a.css']) {
    my ($host, $uri) = @$c;
    my $r = $ex->get(80, $uri, Host => $host);
    ok($r && $r->status == 301, "http://$host$uri: 301")
        or diag($r ? $r->status : 'no response');
    is($r && $r->header('location'), "https://$host$uri",
       '  to the same URL on https://');
}
my $r = $ex->get(80, '/a', method => 'HEAD', Host => 'example.com');
is($r && $r->header('location'), 'https://example.com/a',
   'a HEAD is redirected too');

$r = $ex->get(80, '/.well-known/acme-challenge/Tk9xQ', Host => 'example.com');
ok($r && $r->status == 200 && $r->body eq 'Tk9xQ.thumbprint',
   'an ACME challenge is answered over plain HTTP, not redirected');
$r = $ex->get(80, '/.well-known/acme-challenge/none', Host => 'example.com');
is($r && $r->status, 404, 'a missing challenge: 404');

# --- port 443 --------------------------------------------------------------

my @tls = ('--cacert', $ex->dir . '/example.com.crt',
           '--resolve', "example.com:$https:127.0.0.1",
           '--resolve', "www.example.com:$https:127.0.0.1");
my $base = "https://example.com:$https";

$r = $ex->curl(@tls, '--http2', "$base/");
ok($r && $r->status == 200 && $r->body eq $page,
   'https://example.com/: index.html over TLS') or diag($ex->{curl_error});
is($r && $r->{version}, '2', '  HTTP/2 by ALPN');
is($r && $r->header('strict-transport-security'), 'max-age=31536000',
   '  with HSTS');

is($r && $r->header('content-type'), 'text/html', '  as text/html');

$r = $ex->curl(@tls, '--http1.1', '-H', 'Accept-Encoding: gzip',
               "$base/about.html");
ok($r && $r->status == 200 && ($r->header('content-encoding') // '') eq 'gzip'
   && FastdTest::unzip($r->body) eq $about, 'text is gzip-compressed');

{
    # the second request for a directory, its index from the open file
    # cache: static_handler's "no index file" branch ran on a cache hit
    # (e set, fd == -1, err == ENOENT), so the type was that of "/"
    # (application/octet-stream) and gzip skipped it
    $r = $ex->curl(@tls, '--http1.1', '-H', 'Accept-Encoding: gzip',
                   "$base/");
    is($r && $r->header('content-type'), 'text/html',
       '/ again (its index.html from the open file cache): text/html');
    is($r && $r->header('content-encoding'), 'gzip', '  gzip-compressed');
}

$r = $ex->curl(@tls, "https://www.example.com:$https/assets/site.3f2a.css");
ok($r && $r->status == 200 && $r->body eq "body{margin:0}\n",
   'www.example.com is served too');
is($r && $r->header('cache-control'), 'max-age=2592000',
   '  /assets/: kept 30 days');

$r = $ex->curl(@tls, "$base/missing.html");
is($r && $r->status, 404, 'a missing file: 404');
is($r && $r->body, "<h1>not here</h1>\n", '  with the 404 page');
is($r && $r->header('strict-transport-security'), 'max-age=31536000',
   '  and HSTS (always)');

$r = $ex->get(443, '/');
is($r && $r->status, 400, 'plain HTTP on the HTTPS port: 400');

$t->no_alerts;
done_testing;
