#!/usr/bin/perl
# SNI: two [server]s on one ssl address with their own certificates.
# openssl s_client -servername picks each one's certificate (checked by
# its subject); a client without SNI, or with a name no server has, gets
# the default server; a server with an ECDSA and an RSA pair serves the
# one the client's signature algorithms allow; a Host that names another
# server than the one the handshake was made for (by SNI, else the
# default) is answered 421 (RFC 9110 7.4).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $a_ec  = $pki->server('a.test');
my $a_rsa = $pki->server('a.test', type => 'rsa');
my $b     = $pki->server('b.test', names => ['b.test', '*.b.test']);
my $c     = $pki->server('c.test');

$t->write_conf(TLS::conf(
    certs => [$a_ec, $a_rsa], names => 'a.test',
    locations => "[location /who]\nreturn = 200 a \$ssl_server_name\n\n",
    extra => "[server]\n"
           . TLS::server_keys(certs => [$b], names => 'b.test *.b.test')
           . "\n[location /who]\nreturn = 200 b \$ssl_server_name\n\n"
           . "[server]\n"
           . TLS::server_keys(certs => [$c], names => 'c.test',
                              port => '%%PORT2%%', listen_opt => 'ssl default')
           . "\n[location /who]\nreturn = 200 c\n\n"));
$t->start;
my $port = $t->port;

# The certificate a handshake with this SNI name gets: (CN, s_client output).
sub cert_for {
    my (%o) = @_;
    my ($rc, $out) = $pki->s_client(port => $port, noverify => 1, %o);
    my ($cn) = $pki->peer_cert($out);
    return ($cn // '', $out);
}

my ($cn, $out) = cert_for(name => 'a.test');
is($cn, 'a.test', 'SNI a.test: the certificate of a.test') or diag($out);
($cn, $out) = cert_for(name => 'b.test');
is($cn, 'b.test', 'SNI b.test: the certificate of b.test') or diag($out);
($cn) = cert_for(name => 'B.Test');
is($cn, 'b.test', 'SNI names match without case');
($cn) = cert_for(name => 'x.b.test');
is($cn, 'b.test', 'SNI x.b.test: the *.b.test server');
($cn) = cert_for(name => undef);
is($cn, 'a.test', 'no SNI: the default (first) server');
($cn) = cert_for(name => 'nobody.test');
is($cn, 'a.test', 'a name no server has: the default server');
($cn) = cert_for(name => 'b.test', port => $t->port2);
is($cn, 'c.test', 'the other address has its own servers: SNI b.test there '
   . 'gets that address\'s default');

# verification passes with the CA for each name
my ($rc) = $pki->s_client(port => $port, name => 'b.test',
                          args => ['-verify_hostname', 'b.test']);
is($rc, 0, 'b.test verifies against the CA, hostname included');

# --- one server, an ECDSA and an RSA pair ----------------------------------
($cn, $out) = cert_for(name => 'a.test',
                       args => ['-sigalgs', 'ECDSA+SHA256']);
like($out, qr/Server public key is 256 bit/, 'ECDSA sigalgs: the P-256 certificate');
($cn, $out) = cert_for(name => 'a.test',
                       args => ['-sigalgs', 'rsa_pss_rsae_sha256:RSA+SHA256']);
is($cn, 'a.test', 'RSA sigalgs: still a.test');
like($out, qr/Server public key is 2048 bit/, 'the RSA 2048 certificate')
    or diag($out);
($cn, $out) = cert_for(name => 'a.test',
                       args => ['-tls1_2', '-cipher', 'ECDHE-RSA-AES128-GCM-SHA256']);
like($out, qr/Server public key is 2048 bit/,
     'TLS 1.2 with only an RSA suite: the RSA certificate') or diag($out);

# --- Host against the SNI name ----------------------------------------------
sub ask {
    my ($sni, $host) = @_;
    my $c = $pki->connect(port => $port, name => $sni);
    $c->send("GET /who HTTP/1.1\r\nHost: $host\r\n\r\n");
    my $r = $c->read_response;
    $c->close;
    return $r;
}

my $r = ask('a.test', 'a.test');
is($r && $r->status, 200, 'SNI a.test, Host a.test: 200');
is($r && $r->body, 'a a.test', 'from server a, $ssl_server_name a.test');
$r = ask('b.test', 'b.test:' . $port);
is($r && $r->status, 200, 'SNI b.test, Host b.test:PORT: 200');
is($r && $r->body, 'b b.test', 'from server b');
$r = ask('a.test', 'b.test');
is($r && $r->status, 421, 'SNI a.test, Host b.test: 421 Misdirected Request');
$r = ask('b.test', 'a.test');
is($r && $r->status, 421, 'SNI b.test, Host a.test: 421');
$r = ask('x.b.test', 'y.b.test');
is($r && $r->status, 200, 'SNI and Host two names of one server: 200');
is($r && $r->body, 'b x.b.test', 'server b');

# a connection without SNI, or with a name no server has, was made by
# the default server's settings: a Host naming another server (with its
# own certificate) is misdirected too, one naming none stays there
$r = ask(undef, 'b.test');
is($r && $r->status, 421, 'no SNI, Host b.test: 421');
$r = ask('nobody.test', 'b.test');
is($r && $r->status, 421, 'SNI nobody.test, Host b.test: 421');
$r = ask(undef, 'a.test');
is($r && $r->body, 'a ', 'no SNI, Host a.test: server a, '
   . '$ssl_server_name empty');
$r = ask(undef, 'nobody.test');
is($r && $r->body, 'a ', 'no SNI, a Host no server has: server a');

# on one connection: a right Host, then a wrong one
{
    my $k = $pki->connect(port => $port, name => 'a.test');
    $k->send("GET /who HTTP/1.1\r\nHost: a.test\r\n\r\n"
           . "GET /who HTTP/1.1\r\nHost: b.test\r\n\r\n");
    my @res = $k->read_responses(2);
    is_deeply([ map { $_->status } @res ], [200, 421],
              'keep-alive: 200, then 421 for the other server\'s Host');
    $k->close;
}

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
