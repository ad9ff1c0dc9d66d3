#!/usr/bin/perl
# Host (RFC 9110 7.2, RFC 3986 3.2.2): one grammar for the Host field and
# an absolute-form authority. A value outside it is 400 before any server
# is chosen, so no spelling of a protected name reaches the default
# server; a valid one is normalised (one trailing dot, an empty port
# dropped) and that form is what the upstream is sent.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;
use File::Path qw(make_path);

my $be = Backend->new;   # echoes the request it got
my $bp = $be->port;

my $conf = FastdTest::main_section() . <<"C";
[server]
listen = 127.0.0.1:%%PORT%%
server_name = default.example
root = %%DIR%%/default

[location /up]
handler = proxy
upstream = be

[server]
listen = 127.0.0.1:%%PORT%%
server_name = admin.example
root = %%DIR%%/admin
deny = all

[server]
listen = 127.0.0.1:%%PORT2%%

[location /]
handler = proxy
upstream = be

[upstream be]
server = 127.0.0.1:$bp
C

my $t = FastdTest->new(conf => $conf);
my $d = $t->dir;
for (['default', 'default'], ['admin', 'admin']) {
    make_path("$d/$_->[0]");
    FastdTest::spew("$d/$_->[0]/who", $_->[1]);
}
$t->start;

# The status (and the body on 200) of one request, on its own connection.
sub answer {
    my ($req, %o) = @_;
    my $r = $t->http($req, timeout => 5, %o);
    return 'none' unless $r;
    return $r->status == 200 ? $r->body : $r->status;
}
sub with_host { answer("GET /who HTTP/1.1\r\nHost: $_[0]\r\nConnection: close\r\n\r\n") }

# the guard: the protected server is chosen, and refuses
is(with_host('admin.example'), 403, 'admin.example: the admin server (403)');
is(with_host('ADMIN.Example'), 403, 'Host is case-insensitive');
is(with_host('admin.example.'), 403, 'one trailing dot is the same name');
is(with_host('admin.example.:80'), 403, 'a trailing dot before the port');
is(with_host('admin.example:8080'), 403, 'a port');
is(with_host('admin.example:'), 403, 'an empty port (RFC 3986: allowed)');
is(with_host('elsewhere.example'), 'default', 'another name: the default server');

# spellings of admin.example that are not a host: 400, never the default
for my $h ('admin.example:abc', 'admin.example:80:80', 'admin.example..',
           '[admin.example]', 'admin.example%00', 'admin%2eexample',
           'admin.example:99999', 'admin.example:65536', 'admin.example:000080',
           '.admin.example', 'admin..example', 'admin.example:+80',
           'admin.example:-1', "admin.example\xc3\xa9", 'admin.example:8 0',
           '[::1', '::1', '[::1]x', '[::g]', '[fe80::1%25eth0]', '1.2.3.256',
           '01.2.3.4', '1.2.3', '0x7f.1', ':80', '.') {
    (my $name = $h) =~ s/([^\x21-\x7e])/sprintf '\\x%02x', ord $1/ge;
    is(with_host($h), 400, "Host: $name is 400");
}
# valid forms of other grammars reach the default server
for my $h ('127.0.0.1', '127.0.0.1:8080', '[::1]', '[::1]:80',
           '[::ffff:1.2.3.4]', '[v1.x]', 'a-b_c~d.example', 'x.example:65535',
           "sub!\$&'()*+,;=.example", '1.2.3.4.') {
    is(with_host($h), 'default', "Host: $h reaches the default server");
}

# the absolute-form authority: the same grammar, and it wins over Host
is(answer("GET http://admin.example./who HTTP/1.1\r\nHost: elsewhere\r\n\r\n"),
   403, 'absolute-form authority with a trailing dot picks admin');
is(answer("GET http://elsewhere/who HTTP/1.1\r\nHost: admin.example\r\n\r\n"),
   'default', 'the absolute-form authority wins over Host (RFC 9112 3.2.2)');
for my $a ('admin.example:abc', 'admin.example:99999', 'admin.example..',
           '[admin.example]', 'admin%2eexample', 'admin.example:80:80') {
    is(answer("GET http://$a/who HTTP/1.1\r\nHost: elsewhere\r\n\r\n"), 400,
       "absolute-form authority $a is 400");
}
is(answer("GET http://elsewhere/who HTTP/1.1\r\nHost: admin.example:abc\r\n\r\n"),
   400, 'an invalid Host is 400 even when the authority wins');
is(answer("GET /who HTTP/1.1\r\nHost: elsewhere\r\nHost: admin.example\r\n\r\n"),
   400, 'two Host fields: 400');

# what the upstream gets is the normalised value
sub seen {
    my ($req, %o) = @_;
    my $r = $t->http($req, timeout => 5, %o);
    return $r && $r->status == 200 ? $r->body : 'status ' . ($r ? $r->status : 'none');
}
my $s = seen("GET /up/x HTTP/1.1\r\nHost: Elsewhere.Example.:8080\r\n\r\n");
like($s, qr/^Host: Elsewhere\.Example:8080$/m, 'upstream Host: the trailing dot stripped');
like($s, qr/^X-Forwarded-Host: Elsewhere\.Example:8080$/m,
     'X-Forwarded-Host: the same normalised value');
$s = seen("GET /up/x HTTP/1.1\r\nHost: elsewhere.example:\r\n\r\n");
like($s, qr/^Host: elsewhere\.example$/m, 'upstream Host: an empty port dropped');
$s = seen("GET http://abs.example.:81/up/x HTTP/1.1\r\nHost: other\r\n\r\n");
like($s, qr/^Host: abs\.example:81$/m, 'upstream Host: the absolute-form authority, normalised');
like($s, qr{^GET /up/x HTTP/1\.1$}m, 'upstream request line: origin-form');

# absolute-form with no path but a query: the path is "/", the query kept
$s = seen("GET http://abs.example?x=1 HTTP/1.1\r\nHost: other\r\n\r\n", port => $t->port2);
like($s, qr{^GET /\?x=1 HTTP/1\.1$}m, 'http://host?x=1: path "/", query kept');
like($s, qr/^Host: abs\.example$/m, 'http://host?x=1: the host');
$s = seen("GET http://abs.example:8080?x=1&y HTTP/1.1\r\nHost: other\r\n\r\n",
          port => $t->port2);
like($s, qr{^GET /\?x=1&y HTTP/1\.1$}m, 'http://host:8080?x=1: path "/", query kept');
like($s, qr/^Host: abs\.example:8080$/m, 'http://host:8080?x=1: the host and port');
$s = seen("GET http://abs.example:?x=1 HTTP/1.1\r\nHost: other\r\n\r\n",
          port => $t->port2);
like($s, qr{^GET /\?x=1 HTTP/1\.1$}m, 'http://host:?x=1: an empty port, then a query');

$t->no_alerts;
done_testing();
