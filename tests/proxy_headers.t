#!/usr/bin/perl
# The proxy's response headers: proxy_hide_header, proxy_pass_header
# (Server, X-Accel-*), proxy_redirect (default, off, FROM TO with a
# variable, Refresh too), set_header and hash_key with variables,
# add_header and expires on a proxied response (HTTP/1.1 and HTTP/2),
# and the config errors, each naming file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $be = Backend->new(handler => sub {
    my ($req) = @_;
    my $p = $req->{path};
    my $self = "http://127.0.0.1:$req->{port}";
    my @common = ('Server' => 'backend/1', 'X-Powered-By' => 'perl',
                  'X-Accel-Redirect' => '/internal', 'X-Pad' => 'pad',
                  'X-Keep' => 'k', 'Cache-Control' => 'private');
    return Backend::response(302, '', @common,
                             Location => "$self/two/next?a=1",
                             Refresh => "3; url=$self/two/r")
        if $p =~ m{^/two/redir};
    return Backend::response(302, '', @common,
                             Location => "$self/there",
                             Refresh => "0; URL=$self/r")
        if $p =~ m{^/(root|off|custom)/redir} || $p eq '/redir';
    return Backend::response(302, '', Location => "http://elsewhere/x")
        if $p =~ m{/foreign};
    return Backend::response(404, 'no', @common) if $p =~ m{/missing};
    # the request as seen: the set_header values come back
    my $h = $req->{headers};
    return Backend::response(200, "ok", @common,
        'X-Seen-Id' => $h->{'x-req-uri'} // '-',
        'X-Seen-Host' => $h->{'x-client'} // '-');
});
my $bp = $be->port;

my $locations = <<"EOF";
[location /one/]
handler = proxy
pass = http://127.0.0.1:$bp/two/
add_header = X-Added a-\$upstream_status
expires = 10m

[location /root/]
handler = proxy
pass = http://127.0.0.1:$bp
proxy_hide_header = X-Powered-By
proxy_hide_header = cache-control
proxy_pass_header = Server
proxy_pass_header = X-Accel-Redirect
set_header = X-Req-Uri: \$request_uri
set_header = X-Client: \$remote_addr:\$arg_p
set_header = X-Gone: \$arg_none

[location /off/]
handler = proxy
pass = http://127.0.0.1:$bp
proxy_redirect = off

[location /custom/]
handler = proxy
pass = http://127.0.0.1:$bp
proxy_redirect = http://127.0.0.1:$bp/ https://\$host/app/
proxy_redirect = default

[location /hashed/]
handler = proxy
upstream = hashed

[upstream hashed]
server = 127.0.0.1:$bp
balance = hash
hash_key = \$cookie_sid\$uri

EOF
my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => {
        listen => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% http2",
    },
    locations => $locations));
$t->start;
my $port = $t->port;

# --- hide and pass ------------------------------------------------------------
my $r = $t->get('/one/x');
is($r->status, 200, 'proxied');
like($r->header('server') // '', qr/^fastd/, 'the upstream Server is dropped by default');
ok(!defined $r->header('x-accel-redirect') && !defined $r->header('x-pad'),
   'X-Accel-* and X-Pad are dropped by default');
is($r->header('x-powered-by'), 'perl', 'other upstream headers pass');

$r = $t->get('/root/x?p=9');
ok(!defined $r->header('x-powered-by'), 'proxy_hide_header X-Powered-By');
ok(!defined $r->header('cache-control'), 'proxy_hide_header: any case');
is($r->header('x-keep'), 'k', 'the others stay');
my @server = grep { /^server:/i } split /\r\n/, $t->raw(
    "GET /root/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") // '';
is_deeply(\@server, ['Server: backend/1'],
          'proxy_pass_header Server: the upstream\'s, and only it');
is($r->header('x-accel-redirect'), '/internal', 'proxy_pass_header X-Accel-Redirect');

# --- set_header with variables -----------------------------------------------
is($r->header('x-seen-id'), '/root/x?p=9', 'set_header with $request_uri');
is($r->header('x-seen-host'), '127.0.0.1:9', 'set_header with two variables');
like($be->log_lines, qr/./, 'the backend saw requests');

# --- proxy_redirect -------------------------------------------------------------
$r = $t->get('/one/redir');
is($r->status, 302, 'a redirect through a pass with a URI');
is($r->header('location'), "http://localhost/one/next?a=1",
   'default: the pass URL becomes the client\'s view and the location prefix');
is($r->header('refresh'), "3; url=http://localhost/one/r", 'default: Refresh too');
$r = $t->http("GET /root/redir HTTP/1.1\r\nHost: Site.example:8443\r\n\r\n");
is($r->header('location'), 'http://Site.example:8443/there',
   'default without a URI: the client\'s scheme, host and port');
is($r->header('refresh'), '0; URL=http://Site.example:8443/r',
   'Refresh: URL= in any case');
$r = $t->get('/root/foreign');
is($r->header('location'), 'http://elsewhere/x', 'another host is left alone');
$r = $t->get('/off/redir');
is($r->header('location'), "http://127.0.0.1:$bp/there", 'proxy_redirect = off');
$r = $t->http("GET /custom/redir HTTP/1.1\r\nHost: app.example\r\n\r\n");
is($r->header('location'), 'https://app.example/app/there',
   'FROM TO with a variable in TO');

# --- add_header / expires on a proxied response --------------------------------
$r = $t->get('/one/x');
is($r->header('x-added'), 'a-200', 'add_header on a proxied response, $upstream_status');
is($r->header('cache-control'), 'max-age=600', 'expires replaces the upstream Cache-Control');
$r = $t->get('/one/missing');
is($r->status, 404, 'an upstream 404');
ok(!defined $r->header('x-added') && !defined $r->header('expires'),
   'no add_header nor expires on a 404 without always');

SKIP: {
    skip 'curl without HTTP/2', 2 unless `curl --version 2>/dev/null` =~ /HTTP2/;
    my $head = `curl -sS -o /dev/null -D - --http2-prior-knowledge "http://127.0.0.1:@{[$t->port2]}/one/x"`;
    like($head, qr{^HTTP/2 200}m, 'HTTP/2 through the proxy');
    like($head, qr{^x-added: a-200\r?$}m, 'HTTP/2: the added header');
}

# --- hash_key with variables ---------------------------------------------------
$r = $t->get('/hashed/x', Cookie => 'sid=abc');
is($r->status, 200, 'hash_key = $cookie_sid$uri balances');

$t->stop;
$t->no_alerts;

# --- config errors ------------------------------------------------------------
sub conf_error {
    my ($body, $needle) = @_;
    my $text = FastdTest::base_conf(locations =>
        "[location /p/]\nhandler = proxy\npass = http://127.0.0.1:$bp\n$body\n");
    my $path = $t->write_conf($text, 'bad.conf');
    my $line = FastdTest::line_of(FastdTest::slurp($path), qr/\Q$needle\E/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "\"$body\" fails the config test");
    return ($out, $line);
}

my ($out, $line) = conf_error("proxy_hide_header = X Y", 'X Y');
like($out, qr/bad\.conf:$line: "proxy_hide_header" needs one header NAME/,
     'proxy_hide_header with two words') or diag($out);
($out, $line) = conf_error("proxy_pass_header = Transfer-Encoding", 'Transfer');
like($out, qr/bad\.conf:$line: "proxy_pass_header": Transfer-Encoding is never passed/,
     'proxy_pass_header of a hop-by-hop field') or diag($out);
($out, $line) = conf_error("proxy_redirect = http://a/", 'http://a/');
like($out, qr/bad\.conf:$line: "proxy_redirect" must be default, off or FROM TO/,
     'proxy_redirect with FROM only') or diag($out);
($out, $line) = conf_error("proxy_redirect = http://a/ \$nosuch/", 'nosuch');
like($out, qr/bad\.conf:$line: proxy_redirect: unknown variable "\$nosuch"/,
     'proxy_redirect with an unknown variable') or diag($out);
# set_header's checks name its own line (the first of two here)
($out, $line) = conf_error("set_header = X-A: \$hots\nset_header = X-Ok: 1",
                           'hots');
like($out, qr/bad\.conf:$line: set_header: unknown variable "\$hots"; did you mean "\$host"/,
     'set_header with an unknown variable, at its line') or diag($out);
($out, $line) = conf_error("set_header = Connection: x\nset_header = X-Ok: 1",
                           'Connection');
like($out, qr/bad\.conf:$line: "set_header": Connection is the proxy's to set/,
     'set_header of a framing field, at its line') or diag($out);
($out, $line) = conf_error("[upstream h]\nserver = 127.0.0.1:1\nbalance = hash\n"
                           . "hash_key = \$uri\$nope", 'nope');
like($out, qr/bad\.conf:$line: hash_key: unknown variable "\$nope"/,
     'hash_key with an unknown variable') or diag($out);

done_testing;
