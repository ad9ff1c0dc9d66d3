#!/usr/bin/perl
# Protocol versions and suites: TLS 1.3 and 1.2 handshake by default and
# serve; TLS 1.1 and 1.0 are refused even by a client that offers them at
# OpenSSL's lowest security level; ssl_protocols = TLSv1.3 refuses 1.2;
# a refused handshake ends with the alert that says why, not a bare close;
# ssl_ciphers limits the TLS 1.2 suites; ALPN http/1.1 offered works and
# no other protocol is chosen; $ssl_protocol and $ssl_cipher say what was
# negotiated.

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
my $port3 = $t->another_port;
my $vars = "[location /vars]\nreturn = 200 \$ssl_protocol \$ssl_cipher|\n\n";

$t->write_conf(TLS::conf(
    certs => [$cert], names => 'a.test', locations => $vars,
    extra => "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$cert],
                              names => 'a.test',
                              more => "ssl_protocols = TLSv1.3\n")
           . "\n" . $vars . "[server]\n"
           . TLS::server_keys(port => $port3, certs => [$cert],
                              names => 'a.test',
                              more => "ssl_protocols = TLSv1.2\n"
                                    . "ssl_ciphers = ECDHE-ECDSA-AES128-GCM-SHA256\n"
                                    . "ssl_prefer_server_ciphers = on\n")
           . "\n$vars"));
$t->start;
my ($port, $port2) = ($t->port, $t->port2);

# One request over a handshake with these s_client options: (exit code,
# output, the response's body or undef).
sub try {
    my ($p, @args) = @_;
    my ($rc, $out) = $pki->s_client(port => $p, name => 'a.test',
        args => \@args,
        in => "GET /vars HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    my ($body) = $out =~ /\r\n\r\n(TLS\S+ [^|\s]+)\|/;
    return ($rc, $out, $body);
}

my ($rc, $out, $body) = try($port, '-tls1_3');
is($rc, 0, 'TLS 1.3 handshake');
like($out, qr/^New, TLSv1\.3, Cipher is TLS_/m, 's_client: TLSv1.3');
like($body // '',
     qr/^TLSv1\.3 TLS_(AES_128_GCM|AES_256_GCM|CHACHA20_POLY1305)_SHA(256|384)$/,
     '$ssl_protocol TLSv1.3 and a TLS 1.3 $ssl_cipher') or diag($out);

($rc, $out, $body) = try($port, '-tls1_2');
is($rc, 0, 'TLS 1.2 handshake');
like($out, qr/^New, TLSv1\.2, Cipher is ECDHE-ECDSA-/m,
     's_client: TLSv1.2, an ECDHE suite');
like($body // '', qr/^TLSv1\.2 ECDHE-ECDSA-\S+$/, '$ssl_protocol TLSv1.2 and its suite')
    or diag($out);

# a weak TLS 1.2 suite is not on by default
($rc, $out) = try($port, '-tls1_2', '-cipher',
                  'ECDHE-ECDSA-AES128-SHA:AES128-SHA:DES-CBC3-SHA@SECLEVEL=0');
isnt($rc, 0, 'TLS 1.2 offering only CBC-SHA1/3DES suites: refused');
like($out, qr/alert handshake failure/,
     'with a handshake_failure alert, not a bare close') or diag($out);

# the old versions: offered for real (security level 0 lets the client)
for my $v ([ '-tls1_1', 'TLS 1.1' ], [ '-tls1', 'TLS 1.0' ]) {
    ($rc, $out, $body) = try($port, $v->[0], '-cipher', 'DEFAULT@SECLEVEL=0');
    isnt($rc, 0, "$v->[1] refused");
    ok(!defined $body, "$v->[1]: no response") or diag($out);
}

# ssl_protocols = TLSv1.3: 1.2 refused, 1.3 served
($rc, $out) = try($port2, '-tls1_2');
isnt($rc, 0, 'ssl_protocols = TLSv1.3: a TLS 1.2 client is refused');
like($out, qr/alert protocol version/, 'with a protocol_version alert')
    or diag($out);
($rc, $out, $body) = try($port2, '-tls1_3');
like($body // '', qr/^TLSv1\.3 /, 'and a TLS 1.3 client served') or diag($out);

# ssl_ciphers: one TLS 1.2 suite
($rc, $out, $body) = try($port3);
like($body // '', qr/^TLSv1\.2 ECDHE-ECDSA-AES128-GCM-SHA256$/,
     'ssl_protocols = TLSv1.2 with ssl_ciphers: that suite') or diag($out);
($rc, $out, $body) = try($port3, '-cipher',
    'ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256');
like($body // '', qr/ECDHE-ECDSA-AES128-GCM-SHA256$/,
     'ssl_prefer_server_ciphers: the server\'s choice among the client\'s');
($rc, $out) = try($port3, '-cipher', 'ECDHE-ECDSA-CHACHA20-POLY1305');
isnt($rc, 0, 'a suite outside ssl_ciphers: refused');
($rc, $out) = try($port3, '-tls1_3');
isnt($rc, 0, 'ssl_protocols = TLSv1.2: a TLS 1.3-only client is refused');

# --- ALPN ------------------------------------------------------------------
($rc, $out, $body) = try($port, '-alpn', 'http/1.1');
is($rc, 0, 'ALPN http/1.1 offered: handshake');
like($body // '', qr/^TLSv1\.3 /, 'and served') or diag($out);
unlike($out, qr/^ALPN protocol: (?!http\/1\.1)/m, 'no other protocol chosen');
($rc, $out, $body) = try($port, '-alpn', 'h2,http/1.1');
like($body // '', qr/^TLSv1\.3 /, 'ALPN h2,http/1.1 offered: served over HTTP/1.1');
unlike($out, qr/^ALPN protocol: h2/m, 'h2 is not chosen (no HTTP/2 over TLS)');

# compression is never on
unlike($out, qr/^Compression: (?!NONE)/m, 'no TLS compression');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
