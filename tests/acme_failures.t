#!/usr/bin/perl
# Failures against a real pebble:
#  1. pebble rejects the challenge (its http-01 check reaches nothing):
#     logged with the problem type, retried, and with placeholder =
#     refuse the handshakes fail until a certificate exists;
#  2. renewal with a short validity (pebble's certificateValidityPeriod,
#     15 s: planned at two thirds of the life less its jitter, to the
#     second, and renewed then, unforced); pebble down at renewal time
#     keeps the certificate served and retries; pebble back, the retry
#     gets the new one.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;
use Time::Local qw(timegm);

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
# A 15-second certificate: renewed 10 s after its notBefore (the jitter,
# up to life/30, is 0 s here), twice, which is the time this part takes.
rename("$dir/error.log", "$dir/error1.log");
mkdir "$dir/p2" or die;
my $life = 15;
my $pb = Pebble->new(dir => "$dir/p2", http_port => $http, tls_port => $https,
                     validity => $life);
$t->write_conf(conf($pb, 'self-signed'));
$t->start;
ok(FastdTest::wait_for(sub { count(qr/acme: fail\.test: new certificate/) >= 1 }, 60, 0.1),
   "a $life-second certificate") or $t->diag_logs;
like($t->error_log, qr/new certificate, valid until \S+, renewal in \d+s/,
     '  its renewal planned, logged');
my $first;
ok(FastdTest::wait_for(sub { ($first = served()) =~ /BEGIN/ && FastdTest::slurp("$dir/acme/fail.test.pem") =~ /\Q$first\E/ }, 10, 0.1),
   '  served');

# the plan, to the second: /status's next renewal is notBefore + 2/3 of
# notAfter - notBefore, less a jitter of 0 to life/30 s
sub cert_dates {
    my ($pem) = @_;
    FastdTest::spew("$dir/dates.pem", "$pem\n");
    my %m = (Jan => 0, Feb => 1, Mar => 2, Apr => 3, May => 4, Jun => 5,
             Jul => 6, Aug => 7, Sep => 8, Oct => 9, Nov => 10, Dec => 11);
    return map {
        /=(\w{3}) +(\d+) (\d+):(\d+):(\d+) (\d{4}) GMT/
            ? timegm($5, $4, $3, $2, $m{$1}, $6) : undef
    } split /\n/, `openssl x509 -noout -startdate -enddate -in $dir/dates.pem`;
}
{
    my ($nb, $na) = cert_dates($first);
    my $r = $t->get('/status', Accept => 'text/plain;version=0.0.4');
    my ($next) = ($r && $r->body // '') =~ /^fastd_acme_next_renewal_seconds\{certificate="fail\.test"[^}]*\} (\S+)$/m;
    my $span = defined $na && defined $next ? $next - $nb : -1;
    my $two3 = int(($na - $nb) * 2 / 3);
    ok(defined $nb && $na - $nb >= $life - 1 && $span <= $two3
       && $span >= $two3 - int(($na - $nb) / 30),
       '  renewal planned at two thirds of its life, less jitter')
        or diag("notBefore $nb notAfter $na next renewal " . ($next // '?'));
}

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
