#!/usr/bin/perl
# ssl_ecdh_curve, the key exchange groups: by default X25519, prime256v1
# and secp384r1 (Mozilla's intermediate list), so a client offering only a
# finite-field group (ffdhe2048, OpenSSL's default list has it) fails the
# handshake while X25519 and secp384r1 are served; a configured list is
# honoured, on its own address and for the server SNI chooses on a shared
# one; a name OpenSSL does not know is a configuration error at file:line.

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
my $a = $pki->server('a.test');
my $b = $pki->server('b.test');
my $who = sub { "[location /who]\nreturn = 200 $_[0]\n\n" };

$t->write_conf(TLS::conf(
    certs => [$a], names => 'a.test', locations => $who->('a'),
    extra => "[server]\n"
           . TLS::server_keys(certs => [$b], names => 'b.test',
                              more => "ssl_ecdh_curve = ffdhe2048\n")
           . "\n" . $who->('b') . "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$a],
                              names => 'a.test',
                              more => "ssl_ecdh_curve = secp384r1:ffdhe2048\n")
           . "\n" . $who->('a2')));
$t->start;
my ($port, $port2) = ($t->port, $t->port2);

# One request over a TLS 1.3 handshake offering only these groups:
# (the body or '', the key exchange s_client reports, its output).
sub try {
    my ($p, $groups, $name) = @_;
    $name //= 'a.test';
    my ($rc, $out) = $pki->s_client(port => $p, name => $name,
        args => [ '-tls1_3', '-groups', $groups ],
        in => "GET /who HTTP/1.1\r\nHost: $name\r\nConnection: close\r\n\r\n");
    my $r = TLS::response($out);
    my ($key) = $out =~ /^(?:Server|Peer) Temp Key: ([^\n]+)/m;
    return ($r && $r->status == 200 ? $r->body : '', $key // '', $out);
}

# --- the default ----------------------------------------------------------------
my ($body, $key, $out) = try($port, 'ffdhe2048');
is($body, '', 'default: a client offering only ffdhe2048 is refused');
like($out, qr/alert|handshake failure|no suitable/i,
     'by a failed handshake') or diag($out);
($body, $key, $out) = try($port, 'X25519');
is($body, 'a', 'default: X25519 is served') or diag($out);
like($key, qr/X25519/, 'over X25519') or diag($out);
($body, $key, $out) = try($port, 'secp384r1');
is($body, 'a', 'default: secp384r1 is served') or diag($out);
($body, $key, $out) = try($port, 'ffdhe2048:X25519');
like($key, qr/X25519/, 'a client offering ffdhe2048 first gets X25519')
    or diag($out);
($body, $key, $out) = try($port, 'X448');
is($body, '', 'X448 is not in the default list');

# TLS 1.2 (ECDHE suites; the P-256 certificate needs prime256v1 offered):
# of X448 and prime256v1, the client's order, the server takes the one
# its list has (OpenSSL's own list would take X448)
{
    my ($rc, $o) = $pki->s_client(port => $port, name => 'a.test',
                                  args => [ '-tls1_2', '-groups',
                                            'X448:prime256v1' ]);
    is($rc, 0, 'TLS 1.2 offering X448:prime256v1: handshake') or diag($o);
    like($o, qr/^(?:Server|Peer) Temp Key: ECDH, prime256v1/m,
         'over prime256v1, not X448') or diag($o);
}

# --- a configured list ----------------------------------------------------------
($body, $key, $out) = try($port2, 'X25519');
is($body, '', 'ssl_ecdh_curve = secp384r1:ffdhe2048: X25519 is refused');
($body, $key, $out) = try($port2, 'secp384r1');
is($body, 'a2', 'secp384r1 is served') or diag($out);
like($key, qr/secp384r1|384/, 'over secp384r1') or diag($out);
($body, $key, $out) = try($port2, 'ffdhe2048');
is($body, 'a2', 'and ffdhe2048, which it lists') or diag($out);

# --- the server SNI chooses -----------------------------------------------------
($body, $key, $out) = try($port, 'ffdhe2048', 'b.test');
is($body, 'b', 'SNI b.test (ssl_ecdh_curve = ffdhe2048): ffdhe2048 served')
    or diag($out);
($body, $key, $out) = try($port, 'X25519', 'b.test');
is($body, '', 'SNI b.test: X25519 refused (its list, not the default '
   . 'server\'s)') or diag($out);

# --- configuration errors -------------------------------------------------------
{
    my $text = TLS::conf(certs => [$a], names => 'a.test',
                         more => "ssl_ecdh_curve = X25519:nosuchcurve\n");
    my $file = $t->write_conf($text, 'bad.conf');
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $file);
    my $line = FastdTest::line_of($t->subst($text), 'ssl_ecdh_curve');
    is($rc, 1, 'an unknown group: -t fails');
    like($o, qr/\Q$file\E:$line\b.*ssl_ecdh_curve/, "naming $file:$line")
        or diag($o);
}

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
