#!/usr/bin/perl
# A request is judged by the [server] whose TLS settings made its
# connection's handshake (issue 34): on one ssl address a public server
# (the default) and an admin server with ssl_verify_client = on. A Host
# (or HTTP/2 :authority) naming the admin server on a connection whose
# handshake was the public server's is 421 Misdirected Request, whether
# the client sent no SNI, a name no server has, or the public name; over
# HTTP/1.1 and HTTP/2; a proxied location there never reaches its
# upstream. The same for a server that is TLS 1.3 only: a TLS 1.2
# handshake with the default server does not reach it. Two servers with
# the same TLS settings (one certificate for both names) share a
# connection: the Host's server answers (a browser coalesces them).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
plan skip_all => 'curl is not installed' unless TLS::curl();

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $pub = $pki->server('public.test');
my $adm = $pki->server('admin.test');
my $new = $pki->server('new.test');
my $both = $pki->server('one.test', names => ['one.test', 'two.test']);
my $client = $pki->client('client.test');
my $ca = $pki->ca;

my $be = Backend->new(handler => sub {
    Backend::response(200, "upstream verify=$_[0]{headers}{'x-verify'}");
});

my $who = sub { "[location /who]\nreturn = 200 $_[0] \$ssl_client_verify\n\n" };
$t->write_conf(TLS::conf(
    certs => [$pub], names => 'public.test', listen_opt => 'ssl http2',
    locations => $who->('public'),
    extra => "[server]\n"
           . TLS::server_keys(certs => [$adm], names => 'admin.test',
                              listen_opt => 'ssl http2',
                              more => "ssl_client_certificate = $ca\n"
                                    . "ssl_verify_client = on\n")
           . "\n" . $who->('admin')
           . "[location /api/]\nhandler = proxy\npass = http://"
           . $be->addr . "/\nset_header = X-Verify: \$ssl_client_verify\n\n"
           . "[server]\n"
           . TLS::server_keys(certs => [$new], names => 'new.test',
                              listen_opt => 'ssl http2',
                              more => "ssl_protocols = TLSv1.3\n")
           . "\n" . $who->('new')
           # one certificate for two names, two servers with it
           . "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$both],
                              names => 'one.test')
           . "\n" . $who->('one')
           . "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$both],
                              names => 'two.test')
           . "\n" . $who->('two')));
$t->start;
my $port = $t->port;

# One HTTP/1.1 request on a fresh connection: the response, or undef.
sub ask {
    my (%o) = @_;
    my $c = $pki->connect(port => $o{port} // $port, name => $o{sni},
                          cert => $o{cert}, args => $o{args});
    $c->send("GET " . ($o{path} // '/who') . " HTTP/1.1\r\n"
             . "Host: $o{host}\r\nConnection: close\r\n\r\n");
    my $r = $c->read_response;
    $c->close;
    return $r;
}

# --- HTTP/1.1 ------------------------------------------------------------------
my $r = ask(sni => 'admin.test', host => 'admin.test', cert => $client);
is($r && $r->status, 200, 'SNI admin.test with a client certificate: 200');
is($r && $r->body, 'admin SUCCESS', 'the admin server, verified');

$r = ask(sni => 'public.test', host => 'public.test');
is($r && $r->body, 'public NONE', 'SNI public.test, Host public.test: public');

$r = ask(sni => undef, host => 'admin.test');
is($r && $r->status, 421, 'no SNI, Host admin.test: 421 (the handshake '
   . 'was the default server\'s, without a client certificate)');
unlike($r ? $r->body : '', qr/admin/, 'nothing of the admin server');

$r = ask(sni => 'unknown.test', host => 'admin.test');
is($r && $r->status, 421, 'unknown SNI, Host admin.test: 421');

$r = ask(sni => 'public.test', host => 'admin.test:' . $port);
is($r && $r->status, 421, 'SNI public.test, Host admin.test:PORT: 421');

$r = ask(sni => undef, host => 'nobody.test');
is($r && $r->body, 'public NONE',
   'no SNI, a Host no server has: the default server, as before');

# the absolute form names the server as Host does
{
    my $c = $pki->connect(port => $port, name => undef);
    $c->send("GET https://admin.test/who HTTP/1.1\r\nHost: public.test\r\n"
             . "Connection: close\r\n\r\n");
    my $x = $c->read_response;
    $c->close;
    is($x && $x->status, 421, 'no SNI, absolute-form https://admin.test/: 421');
}

# a proxied location on the admin server: the upstream is never asked
$be->reset_log;
$r = ask(sni => undef, host => 'admin.test', path => '/api/x');
is($r && $r->status, 421, 'no SNI, a proxied location of admin.test: 421');
$r = ask(sni => 'admin.test', host => 'admin.test', path => '/api/x',
         cert => $client);
is($r && $r->body, 'upstream verify=SUCCESS',
   'with the admin handshake the proxy serves, the upstream told SUCCESS');
is($be->requests, 1, 'the upstream saw only the verified request');

# a TLS 1.3-only server is not reached through a TLS 1.2 handshake
$r = ask(sni => 'new.test', host => 'new.test', args => ['-tls1_3']);
is($r && $r->body, 'new NONE', 'SNI new.test over TLS 1.3: served');
$r = ask(sni => undef, host => 'new.test', args => ['-tls1_2']);
is($r && $r->status, 421, 'TLS 1.2 without SNI, Host new.test: 421');
$r = ask(sni => 'public.test', host => 'new.test', args => ['-tls1_2']);
is($r && $r->status, 421, 'TLS 1.2 with SNI public.test, Host new.test: 421');

# --- HTTP/2 ----------------------------------------------------------------------
# curl: no SNI for an IP address; :authority from the Host header
sub h2 {
    my (@args) = @_;
    my $d = $t->dir;
    my ($rc, $out) = TLS::run([ TLS::curl(), qw(-sk --http2 --max-time 20),
                                '-w', '\n%{http_code} %{http_version}', @args ],
                              timeout => 30);
    my ($body, $code, $ver) = $out =~ /^(.*)\n(\d+) (\S+)$/s;
    return { code => $code // 0, version => $ver // '', body => $body // '',
             out => $out };
}

my $h = h2('-H', 'Host: admin.test', "https://127.0.0.1:$port/who");
is($h->{version}, '2', 'curl --http2 without SNI: HTTP/2') or diag($h->{out});
is($h->{code}, 421, 'HTTP/2, no SNI, :authority admin.test: 421');
unlike($h->{body}, qr/admin/, 'nothing of the admin server');

$h = h2('--resolve', "public.test:$port:127.0.0.1", '-H', 'Host: admin.test',
        "https://public.test:$port/api/x");
is($h->{code}, 421, 'HTTP/2, SNI public.test, :authority admin.test, '
   . 'a proxied location: 421');
is($be->requests, 1, 'the upstream was not asked');

$h = h2('--resolve', "public.test:$port:127.0.0.1",
        "https://public.test:$port/who");
is($h->{code} . ' ' . $h->{body}, '200 public NONE',
   'HTTP/2, SNI public.test: the public server');

# --- one certificate, two servers ---------------------------------------------
$r = ask(port => $t->port2, sni => 'one.test', host => 'two.test');
is($r && $r->status, 200, 'the same TLS settings: SNI one.test, Host '
   . 'two.test is served');
is($r && $r->body, 'two NONE', 'by the Host\'s server');
$h = h2('--http1.1', '--resolve', "one.test:" . $t->port2 . ":127.0.0.1",
        '-H', 'Host: two.test', "https://one.test:" . $t->port2 . "/who");
is($h->{code} . ' ' . $h->{body}, '200 two NONE', 'with curl too');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
