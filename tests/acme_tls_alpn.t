#!/usr/bin/perl
# tls-alpn-01 (RFC 8737) against a real pebble: no plain listener at all;
# pebble's validation connects to fastd's ssl listener with ALPN
# acme-tls/1 and gets the challenge certificate (id-pe-acmeIdentifier),
# answered in the handshake. The account and certificate keys are
# rsa-2048 here (RS256), so both signature paths run against pebble, and
# pebble requires External Account Binding (eab_kid, eab_hmac_key).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;

plan skip_all => Pebble::missing() if Pebble::missing();

my $t = FastdTest->new;
my $dir = $t->dir;
my $https = $t->port;
# pebble requires External Account Binding here (its example key)
my $hmac = 'zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W';
my $pb = Pebble->new(dir => $dir, http_port => $t->port2, tls_port => $https,
                     eab => { 'kid-1' => $hmac });
my ($dirurl, $ca) = ($pb->directory, $pb->ca_file);
mkdir "$dir/www" or die;
FastdTest::spew("$dir/www/index.html", "tls-alpn-01\n");

$t->write_conf(FastdTest::main_section() . <<"EOF");
[server]
listen = 127.0.0.1:$https ssl
server_name = alpn.test
ssl_certificate = acme:pebble
root = %%DIR%%/www

[acme pebble]
directory = $dirurl
accept_terms = on
ca_certificate = $ca
challenge = tls-alpn-01
key_type = rsa-2048
eab_kid = kid-1
eab_hmac_key = $hmac
state_path = %%DIR%%/acme
retry_interval = 1s
EOF
$t->start;

ok(FastdTest::wait_for(sub { $t->error_log =~ /acme: alpn\.test: new certificate/ }, 90, 0.2),
   'a certificate is obtained over tls-alpn-01')
    or do { $t->diag_logs; diag($pb->log) };
like($t->error_log, qr/answered the tls-alpn-01 challenge for "alpn\.test"/,
     'the worker answered in the handshake');
unlike($pb->log, qr/Attempting to validate w\/ HTTP:/, 'pebble never tried http-01');

my $root = $pb->root;
my $out;
ok(FastdTest::wait_for(sub {
    $out = `curl -s --max-time 10 --cacert $root --resolve alpn.test:$https:127.0.0.1 https://alpn.test:$https/ 2>&1`;
    $? == 0 }, 10, 0.1), 'curl verifies the chain to pebble\'s root') or diag($out);
is($out, "tls-alpn-01\n", '  and gets the page');
my $key = `openssl x509 -noout -text -in $dir/acme/alpn.test.pem 2>&1`;
like($key, qr/Public-Key: \(2048 bit\)/, 'an RSA 2048 certificate key');
like(FastdTest::slurp("$dir/acme/account-pebble.key") // '', qr/BEGIN PRIVATE KEY/,
     'the account key is stored');

# acme-tls/1 for a name with no challenge under way: not answered with a
# challenge certificate (the handshake goes on with the site's)
my $s = `echo | openssl s_client -connect 127.0.0.1:$https -servername alpn.test -alpn acme-tls/1 2>&1`;
unlike($s, qr/ALPN protocol: acme-tls\/1/, 'acme-tls/1 without a challenge is not selected');
like($t->error_log, qr/acme-tls\/1 for "alpn\.test", which has no challenge/, '  and logged');

$t->stop;
$t->no_alerts;
done_testing;
