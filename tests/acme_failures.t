#!/usr/bin/perl
# Failures against a real pebble:
#  1. pebble rejects the challenge (its http-01 check reaches nothing):
#     logged with the problem type, retried, and with placeholder =
#     refuse the handshakes fail until a certificate exists;
#  2. renewal with a short validity (pebble's certificateValidityPeriod,
#     30 s: renewed at two thirds, unforced); pebble down at renewal time
#     keeps the certificate served and retries; pebble back, the retry
#     gets the new one.

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
my ($http, $https) = ($t->port, $t->port2);
mkdir "$dir/www" or die;
FastdTest::spew("$dir/www/index.html", "renewed\n");

sub conf {
    my ($pb, $placeholder) = @_;
    my ($dirurl, $ca) = ($pb->directory, $pb->ca_file);
    return FastdTest::main_section() . <<"EOF";
[server]
listen = 127.0.0.1:$http
server_name = fail.test

[location = /status]
handler = status

[server]
listen = 127.0.0.1:$https ssl
server_name = fail.test
ssl_certificate = acme:pebble
root = %%DIR%%/www

[acme pebble]
directory = $dirurl
accept_terms = on
ca_certificate = $ca
state_path = %%DIR%%/acme
retry_interval = 1s
retry_max = 2s
placeholder = $placeholder
EOF
}

sub served {
    my $s = `echo | openssl s_client -connect 127.0.0.1:$https -servername fail.test 2>&1`;
    return $s =~ /(-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----)/s ? $1 : '';
}
sub count { my $re = $_[0]; my $n = () = $t->error_log =~ /$re/g; $n }

# --- 1. the challenge rejected ---------------------------------------------
{
    my $closed = $t->another_port; # nothing listens there
    mkdir "$dir/p1" or die;
    my $pb = Pebble->new(dir => "$dir/p1", http_port => $closed, tls_port => $https);
    $t->write_conf(conf($pb, 'refuse'));
    $t->start;
    ok(FastdTest::wait_for(sub { count(qr/acme: fail\.test: http-01 challenge for fail\.test: invalid, problem urn:ietf:params:acme:error:connection: .*retrying in/) >= 2 }, 15, 0.1),
       'a rejected challenge is logged with the problem type, and retried')
        or $t->diag_logs;
    like($t->error_log . $t->stderr_log, qr/no certificate yet, refusing handshakes/,
         'placeholder = refuse: said at start');
    is(served(), '', '  and handshakes fail meanwhile');
    my $r = $t->get('/status', Accept => 'text/plain;version=0.0.4');
    like($r && $r->body, qr/fastd_acme_failures_total\{certificate="fail\.test"[^\n]*last_error="http-01 challenge for fail\.test: invalid, problem urn:ietf:params:acme:error:connection[^\n]*\} [1-9]/,
         '  /status: failures and the problem');
    $t->stop;
    $pb->stop;
    $t->no_alerts;
}

# --- 2. renewal at two thirds; the CA down at renewal time ---------------
rename("$dir/error.log", "$dir/error1.log");
mkdir "$dir/p2" or die;
my $pb = Pebble->new(dir => "$dir/p2", http_port => $http, tls_port => $https,
                     validity => 30);
$t->write_conf(conf($pb, 'self-signed'));
$t->start;
ok(FastdTest::wait_for(sub { count(qr/acme: fail\.test: new certificate/) >= 1 }, 60, 0.1),
   'a 30-second certificate') or $t->diag_logs;
like($t->error_log, qr/new certificate, valid until \S+, renewal in (1\d|20)s/,
     '  renewal planned at two thirds of its life, less jitter');
my $first;
ok(FastdTest::wait_for(sub { ($first = served()) =~ /BEGIN/ && FastdTest::slurp("$dir/acme/fail.test.pem") =~ /\Q$first\E/ }, 10, 0.1),
   '  served');

# renewed unforced
ok(FastdTest::wait_for(sub { count(qr/acme: fail\.test: new certificate/) >= 2 }, 40, 0.2),
   'renewed by itself') or $t->diag_logs;
my $second;
ok(FastdTest::wait_for(sub { ($second = served()) ne $first && $second =~ /BEGIN/ }, 10, 0.1),
   '  and the new one served');

# pebble down when the next renewal comes
$pb->stop;
ok(FastdTest::wait_for(sub { $t->error_log =~ /acme: fail\.test: directory|acme: fail\.test: https:\/\/127\.0\.0\.1:\d+\/dir: .*(connect|Connection refused).*retrying in/ }, 40, 0.2),
   'pebble down at renewal time: the failure is logged') or $t->diag_logs;
is(served(), $second, '  the certificate served stays');
my $fails = count(qr/acme: fail\.test: .*retrying in/);
ok(FastdTest::wait_for(sub { count(qr/acme: fail\.test: .*retrying in/) > $fails }, 20, 0.2),
   '  and it is retried');

$pb->start;
ok(FastdTest::wait_for(sub { count(qr/acme: fail\.test: new certificate/) >= 3 }, 40, 0.2),
   'pebble back: the retry gets a certificate') or $t->diag_logs;
my $root = $pb->root;
my $out;
ok(FastdTest::wait_for(sub {
    $out = `curl -s --max-time 10 --cacert $root --resolve fail.test:$https:127.0.0.1 https://fail.test:$https/ 2>&1`;
    $out eq "renewed\n" }, 10, 0.1), '  served, and verified to the new root') or diag($out);

$t->stop;
$t->no_alerts;
done_testing;
