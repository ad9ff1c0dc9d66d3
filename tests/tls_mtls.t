#!/usr/bin/perl
# Client certificates: ssl_verify_client = on refuses a client without a
# certificate (a failed handshake, or nginx's 400 "No required SSL
# certificate was sent") and one whose certificate another CA signed;
# with the CA's client certificate the request is served and the access
# log has $ssl_client_verify SUCCESS and the subject in $ssl_client_s_dn.
# ssl_verify_client = optional serves both, NONE without a certificate.

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
my $cert = $pki->server('a.test');
my $client = $pki->client('client.test');
# a second CA and a client certificate of its own
mkdir $t->dir . '/other' or die;
my $other = TLS->new($t->dir . '/other');
my $stranger = $other->client('stranger.test');

my $ca = $pki->ca;
$t->write_conf(TLS::conf(
    certs => [$cert], names => 'a.test',
    more => "ssl_client_certificate = $ca\nssl_verify_client = on\n",
    http => { log_format => 'tls $ssl_client_verify|$ssl_client_s_dn|$request_uri' },
    locations => "[location /]\naccess_log = %%DIR%%/access.log format=tls buffer=0\n"
               . "return = 200 verify=\$ssl_client_verify\n\n",
    extra => "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$cert],
                              names => 'a.test',
                              more => "ssl_client_certificate = $ca\n"
                                    . "ssl_verify_client = optional\n")
           . "\n[location /]\naccess_log = %%DIR%%/access.log format=tls buffer=0\n"
           . "return = 200 verify=\$ssl_client_verify\n\n"));
$t->start;

# One request; (exit code, output, status or 0, body).
sub req {
    my ($port, $path, %o) = @_;
    my ($rc, $out) = $pki->s_client(port => $port, name => 'a.test', %o,
        in => "GET $path HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    my $r = TLS::response($out);
    return ($rc, $out, $r ? $r->status : 0, $r && $r->body);
}

sub log_lines { split /\n/, FastdTest::slurp($t->dir . '/access.log') // '' }

# --- on ---------------------------------------------------------------------
my ($rc, $out, $st, $body) = req($t->port, '/on-cert', cert => $client);
is($st, 200, 'verify on, the CA\'s client certificate: 200') or diag($out);
is($body, 'verify=SUCCESS', '$ssl_client_verify SUCCESS in a response');
my ($line) = grep { /on-cert/ } log_lines();
like($line // '', qr/^SUCCESS\|[^|]*CN=client\.test[^|]*\|\/on-cert$/,
     'the access log: SUCCESS and the subject DN') or diag($line);
like($line // '', qr/O=fastd tests/, 'the whole DN (RFC 2253)');

($rc, $out, $st) = req($t->port, '/on-none');
isnt($st, 200, 'verify on, no client certificate: not served') or diag($out);
# nginx answers 400 "No required SSL certificate was sent"; a handshake
# alert (certificate_required) is as good: either way no 200
ok($st == 0 || ($st == 400 && $out =~ /No required SSL certificate was sent/),
   'a failed handshake or nginx\'s 400') or diag($out);

($rc, $out, $st) = req($t->port, '/on-stranger', cert => $stranger);
is($st, 0, 'verify on, a certificate of another CA: the handshake fails')
    or diag($out);
ok(!grep({ /on-stranger|on-none/ && /SUCCESS/ } log_lines()),
   'neither is logged as verified');

# --- optional -----------------------------------------------------------------
($rc, $out, $st, $body) = req($t->port2, '/opt-none');
is($st, 200, 'verify optional, no certificate: 200') or diag($out);
is($body, 'verify=NONE', '$ssl_client_verify NONE');
($rc, $out, $st, $body) = req($t->port2, '/opt-cert', cert => $client);
is($st, 200, 'verify optional, the client certificate: 200') or diag($out);
is($body, 'verify=SUCCESS', '$ssl_client_verify SUCCESS');
($line) = grep { /opt-none/ } log_lines();
like($line // '', qr/^NONE\|-?\|\/opt-none$/, 'logged NONE, no DN')
    or diag($line);

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
