#!/usr/bin/perl
# proxy: what a client can make the proxy send upstream. The upstream
# request is built in a bounds-checked builder (a 7000-byte authority with
# proxy_host = upstream overflowed the old hand-sized buffer); a pass URI
# confines the client to its prefix ("..", "%2e%2e", "//", "%2f", ";");
# a rewrite on a proxy location reaches the upstream; no Upgrade but an
# allowed WebSocket is ever passed (h2c never); an upstream gets a handful
# of 1xx responses, then 502.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    if ($req->{path} =~ m{/interim/(\d+)$}) {
        $c->write("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n") for 1 .. $1;
        return Backend::response(200, 'final');
    }
    if ($req->{path} =~ m{/force101$}) {
        # a backend that switches whatever it was asked
        $c->write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                  . ($req->{headers}{upgrade} // 'h2c')
                  . "\r\nConnection: Upgrade\r\n\r\n");
        return '';
    }
    return Backend::echo($req);
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => <<"L",
[location /up/]
handler = proxy
upstream = be
proxy_host = upstream

[location /app/]
handler = proxy
pass = http://127.0.0.1:$bp/internal/

[location = /exact]
handler = proxy
pass = http://127.0.0.1:$bp/other

[location /rw/]
handler = proxy
upstream = be
rewrite = ^/rw/noargs/(.*)\$ /bare/\$1? break
rewrite = ^/rw/(.*)\$ /public/\$1 break

[location /rwuri/]
handler = proxy
pass = http://127.0.0.1:$bp/internal/
rewrite = ^/rwuri/(.*)\$ /moved/\$1 break

[location /ws/]
handler = proxy
upstream = be
websocket = on

[location /nows/]
handler = proxy
upstream = be

L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp max_fails=0\n"));
$t->start;

# the request line the backend saw (Backend::echo's first line)
sub upstream_line {
    my ($req) = @_;
    my $r = $t->http($req);
    return 'no response' unless $r;
    return "status $r->{status}" unless $r->{status} == 200;
    return ($r->{body} =~ /^(\S+ \S+) HTTP/)[0];
}

sub echoed_header {
    my ($r, $name) = @_;
    return undef unless $r && $r->{status} == 200;
    return $r->{body} =~ /^\Q$name\E: (.*)$/mi ? $1 : undef;
}

# --- the upstream request builder -------------------------------------------
{
    my $long = 'a' x 7000;
    my $r = $t->http("GET http://$long/up/x HTTP/1.1\r\nHost: a\r\n\r\n");
    ok($r && $r->{status} == 200, 'absolute-form with a 7000-byte authority '
       . 'and proxy_host = upstream: 200');
    is(length(echoed_header($r, 'X-Forwarded-Host') // ''), 7000,
       'X-Forwarded-Host holds all of it');
    like(echoed_header($r, 'Host') // '', qr/^be$/, 'Host is the upstream\'s');

    # many long headers, every one of them forwarded whole
    my $req = "GET /up/y HTTP/1.1\r\nHost: h\r\n";
    $req .= "X-H$_: " . ('v' x 150) . "\r\n" for 1 .. 40;
    $r = $t->http("$req\r\n");
    is(scalar(() = ($r && $r->{body} // '') =~ /^X-H\d+: v{150}$/mg), 40,
       '40 long headers forwarded');
    ok($t->running, 'the server is alive');
}

# --- pass with a URI confines the client to its prefix ----------------------
my %confine = (
    '/app/x'                    => 'GET /internal/x',
    '/app/../app/x'             => 'GET /internal/x',
    '/app/%2e%2e/app/secret'    => 'GET /internal/secret',
    '/app/%2E%2E/app/secret'    => 'GET /internal/secret',
    '/app/./x'                  => 'GET /internal/x',
    '/app//x'                   => 'GET /internal/x',
    '/app/a/../../app/b'        => 'GET /internal/b',
    '/app/a%2fb'                => 'GET /internal/a/b',
    '/app/a;b=1'                => 'GET /internal/a;b=1',
    '/app/a%3Bb'                => 'GET /internal/a;b',
    '/app/sp%20ace'             => 'GET /internal/sp%20ace',
    '/app/q%3Fx'                => 'GET /internal/q%3Fx',
    '/app/pct%25'               => 'GET /internal/pct%25',
    '/app/x?a=%2e%2e/../y'      => 'GET /internal/x?a=%2e%2e/../y',
    '/exact'                    => 'GET /other',
    '/exact?k=v'                => 'GET /other?k=v',
);
for my $path (sort keys %confine) {
    is(upstream_line("GET $path HTTP/1.1\r\nHost: x\r\n\r\n"),
       $confine{$path}, "pass with a URI: $path");
}
# climbing above the prefix leaves the location altogether
isnt(upstream_line("GET /app/%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\n"),
     'GET /internal/../x', '/app/%2e%2e/x does not reach /internal/../x');
isnt(upstream_line("GET /app/..%2fx HTTP/1.1\r\nHost: x\r\n\r\n"),
     'GET /internal/../x', '/app/..%2fx does not reach /internal/../x');

# --- rewrite reaches the upstream ------------------------------------------
is(upstream_line("GET /rw/x?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
   'GET /public/x?q=1', 'rewrite ... break on a pass without a URI');
is(upstream_line("GET /rw/noargs/z?drop=1 HTTP/1.1\r\nHost: x\r\n\r\n"),
   'GET /bare/z', 'a rewrite that drops the arguments: no "?"');
is(upstream_line("GET /rw/a%20b HTTP/1.1\r\nHost: x\r\n\r\n"),
   'GET /public/a%20b', 'the rewritten path is sent encoded');
is(upstream_line("GET /rwuri/y HTTP/1.1\r\nHost: x\r\n\r\n"),
   'GET /moved/y', 'rewrite ... break on a pass with a URI: the new URI');
is(upstream_line("GET /up/plain%41?x HTTP/1.1\r\nHost: x\r\n\r\n"),
   'GET /up/plain%41?x', 'no rewrite, no URI: the target as the client sent it');

# --- Upgrade ---------------------------------------------------------------
for my $case (['/nows/x', 'websocket', 'a location without websocket = on'],
              ['/ws/x',   'h2c',       'h2c, even with websocket = on'],
              ['/nows/x', 'h2c',       'h2c'],
              ['/ws/x',   'foo/1',     'any other token']) {
    my ($path, $tok, $what) = @$case;
    my $r = $t->http("GET $path HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, "
                     . "HTTP2-Settings\r\nUpgrade: $tok\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n");
    ok($r && $r->{status} == 200, "$what: answered as a plain request");
    ok(!defined echoed_header($r, 'Upgrade'), "$what: no Upgrade upstream");
    unlike(echoed_header($r, 'Connection') // '', qr/upgrade/i,
           "$what: no Connection: upgrade upstream");
    ok(!defined echoed_header($r, 'HTTP2-Settings'),
       "$what: HTTP2-Settings (a Connection token) dropped");
}
{
    my $r = $t->http("GET /nows/force101 HTTP/1.1\r\nHost: x\r\nConnection: "
                     . "Upgrade\r\nUpgrade: h2c\r\n\r\n");
    is($r && $r->{status}, 502, 'a 101 nobody asked for is a bad gateway');
    my $c = $t->connect;
    $c->send("GET /ws/force101 HTTP/1.1\r\nHost: x\r\nConnection: "
             . "Upgrade\r\nUpgrade: websocket\r\n\r\n");
    ok($c->wait_for_bytes(qr{^HTTP/1\.1 101 .*\r\nUpgrade: websocket\r\n}si, 5),
       'websocket = on: a WebSocket 101 is passed');
    $c->close;
}

# --- 1xx responses ------------------------------------------------------------
{
    my $r = $t->http("GET /up/interim/3 HTTP/1.1\r\nHost: x\r\n\r\n");
    ok($r && $r->{status} == 200 && $r->{body} eq 'final',
       'three 1xx, then the response');
    is(scalar @{ $r ? $r->{interim} : [] }, 0, 'no 1xx passed to the client');
    $r = $t->http("GET /up/interim/200 HTTP/1.1\r\nHost: x\r\n\r\n");
    is($r && $r->{status}, 502, '200 1xx responses: 502');
    like($t->error_log, qr/too many 1xx/, 'logged');
}

# --- pass options: those of a server line, and only failure ones ---------------
for my $case (['weight=2', qr/"pass": unknown option "weight=2"/],
              ['max_fails=x', qr/bad "max_fails=x"/],
              ['fail_timeout=-1', qr/bad "fail_timeout=-1"/]) {
    my ($opt, $re) = @$case;
    my $conf = FastdTest::base_conf(locations =>
        "[location /p/]\nhandler = proxy\npass = http://127.0.0.1:1/ $opt\n");
    my $f = $t->write_conf($conf, 'bad-pass.conf');
    my $line = 0;
    my @l = split /\n/, $conf;
    for my $i (0 .. $#l) { $line = $i + 1 if $l[$i] =~ /^pass = / }
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $f);
    isnt($rc, 0, "pass ... $opt: -t fails");
    like($out, qr/\Q$f\E:$line: .*$re/, "pass ... $opt: named at file:line");
}
{
    my $conf = FastdTest::base_conf(locations =>
        "[location /p/]\nhandler = proxy\npass = http://be/ max_fails=3\n",
        extra => "[upstream be]\nserver = 127.0.0.1:1\n");
    my $f = $t->write_conf($conf, 'bad-pass.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $f);
    like($out, qr/options for \[upstream be\] go on its "server" lines/,
         'pass options on a named upstream: refused');
}

ok($t->running, 'still running');
$t->stop;
ok($t->no_alerts, 'no alerts');
done_testing();
