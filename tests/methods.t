#!/usr/bin/perl
# Methods (RFC 9110 9): the proxy passes every token method (WebDAV, UPnP,
# extensions) to its backend; a handler answers only the methods it
# declares, and the engine answers the rest for it: 405 with an Allow that
# lists what the handler takes, or 501 for a method fastd does not know at
# a handler that does not take unknown ones. TRACE and CONNECT are 405 and
# never reach a backend. The check comes after the access phase (a refused
# client learns nothing about the handler), and for the final location of
# a rewrite.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $be = Backend->new;   # echoes the request line, headers and body length
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(locations => <<"L"));
[location /dav]
handler = proxy
upstream = be

[location /rw]
rewrite = ^/rw/(.*)\$ /dav/\$1 last

[location /closed]
deny = all

[location = /status]
handler = status

[upstream be]
server = 127.0.0.1:$bp
L
$t->start;

sub req {
    my ($m, $path, %o) = @_;
    my $body = $o{body} // '';
    my $r = $t->http("$m $path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     . (length $body ? "Content-Length: " . length($body) . "\r\n" : '')
                     . "\r\n$body", timeout => 5);
    return $r;
}

# --- the proxy passes every method ------------------------------------------
for my $m (qw(M-SEARCH PROPFIND PROPPATCH MKCOL COPY MOVE LOCK UNLOCK REPORT
              PURGE X-Custom_1.~ GET POST PUT DELETE PATCH OPTIONS)) {
    $be->reset_log;
    my $r = req($m, '/dav/x', body => $m =~ /^(PROPFIND|PROPPATCH|X-)/
                                      ? '<propfind/>' : '');
    is($r && $r->status, 200, "$m through the proxy: 200");
    like($r ? $r->body : '', qr{^\Q$m\E /dav/x HTTP/1\.1\n}, "$m reaches the backend as $m");
    is($be->requests, 1, "$m: one request upstream");
}
{
    my $r = req('PROPFIND', '/dav/x', body => '<propfind/>');
    like($r ? $r->body : '', qr/^body-length: 11$/m, 'PROPFIND: its body goes upstream');
}
{
    $be->reset_log;
    my $r = req('PROPFIND', '/rw/y');
    like($r ? $r->body : '', qr{^PROPFIND /dav/y HTTP/1\.1\n},
         'rewritten to the proxy location: the proxy takes PROPFIND');
    is($be->requests, 1, 'rewritten PROPFIND: one request upstream');
}
for my $m (qw(TRACE CONNECT)) {
    $be->reset_log;
    my $r = req($m, '/dav/x');
    is($r && $r->status, 405, "$m /dav: 405");
    ok($r && $r->header('allow'), "$m /dav: with an Allow");
    is($be->requests, 0, "$m is never sent upstream");
}

# --- handlers that take fewer methods ----------------------------------------
my %allow = ('/index.html' => 'GET, HEAD', '/plaintext' => 'GET, HEAD, POST',
             '/json' => 'GET, HEAD, POST', '/status' => 'GET, HEAD');
for my $path (sort keys %allow) {
    for my $m (qw(PUT DELETE PATCH OPTIONS)) {
        my $r = req($m, $path);
        is($r && $r->status, 405, "$m $path: 405");
        is($r && $r->header('allow'), $allow{$path}, "$m $path: Allow: $allow{$path}");
    }
    for my $m (qw(PROPFIND M-SEARCH FOO)) {
        my $r = req($m, $path);
        is($r && $r->status, 501, "$m $path: 501 (not a method this handler knows)");
    }
    my $r = req('GET', $path);
    is($r && $r->status, 200, "GET $path: 200");
    $r = req('HEAD', $path);
    is($r && $r->status, 200, "HEAD $path: 200");
}
is(req('POST', '/plaintext', body => 'abc')->status, 200, 'POST /plaintext: 200');
is(req('POST', '/index.html', body => 'abc')->status, 405, 'POST to a file: 405');

# access first, then the method: a refused client learns nothing more
for my $m (qw(GET DELETE PROPFIND)) {
    my $r = req($m, '/closed/x');
    is($r && $r->status, 403, "$m to a denied location: 403");
}

# a 405 or 501 whose body arrived with it leaves the connection usable
for my $m (qw(PUT PROPFIND)) {
    my $c = $t->connect;
    $c->send("$m /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
             . "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    my @r = $c->read_responses(2, timeout => 5);
    is(join(' ', map { $_->{status} } @r), ($m eq 'PUT' ? 405 : 501) . ' 200',
       "$m with a body, then a GET on the same connection");
    $c->close;
}

$t->no_alerts;
done_testing();
