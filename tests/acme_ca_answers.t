#!/usr/bin/perl
# What the CA answers, through a stub in front of pebble
# (tests/lib/acme_stub.py): malformed JSON, a wrong content type, a huge
# answer, and a certificate for another name and key are each refused
# with a log line, and what is served does not change; the failures are
# retried (backoff, capped by retry_max) and counted in /status with the
# last error. Then ARI (RFC 9773, which pebble 2.4 lacks): the stub adds
# renewalInfo; the renewal follows the suggested window, the certID asked
# is the certificate's (AKI keyIdentifier . serial), and a window moved
# into the past renews the certificate early. profile: asked for in
# newOrder once the directory's meta.profiles offers it, a warning before.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;
use MIME::Base64 qw(encode_base64);

plan skip_all => Pebble::missing() if Pebble::missing();

my $t = FastdTest->new;
my $dir = $t->dir;
my ($http, $https) = ($t->port, $t->port2);
my $pb = Pebble->new(dir => $dir, http_port => $http, tls_port => $https);
$pb->stub;
$pb->stub_set(mode => 'bad_json');
my ($dirurl, $ca) = ($pb->stub_directory, $pb->ca_file);
mkdir "$dir/www" or die;
FastdTest::spew("$dir/www/index.html", "through the stub\n");

$t->write_conf(FastdTest::main_section() . <<"EOF");
[server]
listen = 127.0.0.1:$http
server_name = bad.test

[location = /status]
handler = status

[server]
listen = 127.0.0.1:$https ssl
server_name = bad.test
ssl_certificate = acme:stub
root = %%DIR%%/www

[acme stub]
directory = $dirurl
accept_terms = on
ca_certificate = $ca
state_path = %%DIR%%/acme
retry_interval = 1s
retry_max = 2s
max_response = 1m
profile = shortlived
EOF
$t->start;

sub served {
    my $s = `echo | openssl s_client -connect 127.0.0.1:$https -servername bad.test 2>/dev/null | openssl x509 -noout -serial -issuer 2>/dev/null`;
    return $s;
}
sub logged {
    my ($re, $what) = @_;
    ok(FastdTest::wait_for(sub { $t->error_log =~ $re }, 60, 0.1), $what)
        or $t->diag_logs;
}

logged(qr/the CA's JSON is malformed .*: refused/, 'malformed JSON: refused, logged');
my $placeholder = served();
like($placeholder, qr/issuer=CN ?= ?bad\.test/, '  the self-signed placeholder is still served');
my $r = $t->get('/status', Accept => 'text/plain;version=0.0.4');
like($r && $r->body, qr/fastd_acme_failures_total\{certificate="bad\.test",issuer="stub",names="bad\.test",last_error="directory: the CA's JSON is malformed[^"]*"\} [1-9]/,
     '  /status: the failures and the last error');
like($r && $r->body, qr/fastd_acme_not_after_seconds\{certificate="bad\.test"[^\n]*\} 0(\.0+)?\n/,
     '  and no certificate yet');

$pb->stub_set(mode => 'bad_ctype');
logged(qr/content type "text\/html", not application\/json: refused/, 'a wrong content type: refused, logged');
$pb->stub_set(mode => 'huge');
logged(qr/over max_response \(1048576 bytes\): refused/, 'a huge answer: refused, logged');
is(served(), $placeholder, '  the placeholder is still served');
like($t->error_log, qr/retrying in 2s \(failure [3-9]\)/, 'retries back off, capped by retry_max');

$pb->stub_set(mode => 'pass');
logged(qr/acme: bad\.test: new certificate/, 'a good answer: a certificate');
like($t->error_log, qr/acme: stub: the CA offers no profile "shortlived"; ordering without one/,
     'a profile the directory does not offer: a warning');
unlike($pb->stub_file('orders.log'), qr/"profile"/, '  and none asked for');
my $root = $pb->root;
my $first;
ok(FastdTest::wait_for(sub { $first = served(); $first ne $placeholder }, 10, 0.1),
   '  served at the next handshake');
my $out = `curl -s --max-time 10 --cacert $root --resolve bad.test:$https:127.0.0.1 https://bad.test:$https/ 2>&1`;
is($out, "through the stub\n", '  and verifies to pebble\'s root');

# a certificate for another name and key; from here on the directory
# offers the profile and renewalInfo (ARI, below: each order reads the
# directory afresh, and the refused certificate's retry may start its
# order as soon as the refusal is logged)
$pb->stub_set(profiles => "classic shortlived\n");
my $now = time;
$pb->stub_set(ari => "* @{[ $now + 7200 ]} @{[ $now + 7201 ]} 1\n");
system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=other.test -addext subjectAltName=DNS:other.test -keyout $dir/other.key -out $dir/other.pem 2>/dev/null") == 0 or die;
$pb->stub_set('other.pem', FastdTest::slurp("$dir/other.pem"));
$pb->stub_set(mode => 'other_cert');
my ($rc, $msg) = FastdTest::run_fastd('-c', $t->conf_file, '-s', 'renew', 'bad.test');
is($rc, 0, 'fastd -s renew bad.test') or diag($msg);
logged(qr/the CA's certificate is not for bad\.test or not for the key asked for: refused/,
       'a certificate for another name and key: refused, logged');
is(served(), $first, '  the certificate served stays');
my $stored = `openssl x509 -noout -serial -issuer -in $dir/acme/bad.test.pem 2>/dev/null`;
is($stored, $first, '  and the one stored too');

# --- ARI ---------------------------------------------------------------
# the refused certificate's retry (every 2s at most) is the next order:
# no "fastd -s renew" here, which could make a second one as the first
# ends and race the certID below. The window was set before the refusal
# (at most a minute ago, then 7200 s ahead)
$pb->stub_set(mode => 'pass');
logged(qr/acme: bad\.test: new certificate, valid until \S+, renewal in 7(1\d\d|20\d)s/,
       'ARI: renewed in the window renewalInfo suggests');
like($pb->stub_file('orders.log'), qr/"profile":"shortlived"/,
     'a profile the directory offers is asked for in newOrder');

# the certID: base64url(AKI keyIdentifier) . base64url(serial's octets)
my $leaf = (FastdTest::slurp("$dir/acme/bad.test.pem") =~ /(-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n)/s)[0];
FastdTest::spew("$dir/leaf.pem", $leaf);
my $text = `openssl x509 -noout -text -in $dir/leaf.pem`;
my ($aki) = $text =~ /Authority Key Identifier:\s*\n\s*(?:keyid:)?([0-9A-F:]+)/;
my ($serial) = `openssl x509 -noout -serial -in $dir/leaf.pem` =~ /serial=([0-9A-F]+)/;
sub b64u { my $b = encode_base64($_[0], ''); $b =~ tr{+/}{-_}; $b =~ s/=+$//; $b }
$aki =~ s/://g;
$serial = "0$serial" if length($serial) % 2;
my $octets = pack('H*', $serial);
$octets = "\0$octets" if ord($octets) & 0x80;
my $cid = b64u(pack('H*', $aki)) . '.' . b64u($octets);
ok(FastdTest::wait_for(sub { $pb->stub_file('ari.log') =~ /^\Q$cid\E$/m }, 10, 0.1),
   'renewalInfo is asked with the certificate\'s certID') or diag($pb->stub_file('ari.log') . " want $cid");

# the window moves into the past (a revocation, an incident): renewed early
my $n1 = () = $t->error_log =~ /acme: bad\.test: new certificate/g;
$now = time;
$pb->stub_set(ari => "$cid @{[ $now - 20 ]} @{[ $now - 10 ]} 1\n* @{[ $now + 7200 ]} @{[ $now + 7201 ]} 1\n");
logged(qr/the CA's renewal window \(ARI\) moves the renewal earlier/, 'ARI: a window moved earlier is seen');
ok(FastdTest::wait_for(sub { my $n = () = $t->error_log =~ /acme: bad\.test: new certificate/g; $n > $n1 }, 60, 0.1),
   '  and the certificate is renewed early');

$t->stop;
$t->no_alerts;
done_testing;
