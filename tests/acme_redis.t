#!/usr/bin/perl
# [acme NAME] storage = redis: two fastd with state_paths of their own
# share the account and the certificate through a Redis (a redis-server of
# the test's own). Started together over an empty Redis, pebble issues one
# certificate: the lease in Redis orders them, the second takes the
# first's certificate from Redis and serves it; a renewal by one is taken
# by the other without an order; with Redis gone a renewal fails (the
# lease cannot be had: nothing is ordered), the certificate in service
# stays, and once Redis is back the renewal goes through. pebble's
# http-01 checks go to the first fastd's plain listener only; an
# instance that cannot reach the CA answers the other's challenge, which
# it took from Redis.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Redis;
use Test::More;

plan skip_all => Pebble::missing() if Pebble::missing();

my $fa = FastdTest->new;
my $fb = FastdTest->new;
my $redis = Redis->new(dir => $fa->dir) or plan skip_all => Redis::missing();
my $pb = Pebble->new(dir => $fa->dir, http_port => $fa->port, tls_port => $fa->port2);
my ($dirurl, $ca) = ($pb->directory, $pb->ca_file);

for my $t ($fa, $fb) {
    my ($http, $https) = ($t->port, $t->port2);
    my $state = $t->dir . '/acme';
    my $url = $redis->url;
    $t->write_conf(FastdTest::main_section() . <<"EOF");
[cluster]
redis = $url
timeout = 500ms

[server]
listen = 127.0.0.1:$http
server_name = fleet.test

[server]
listen = 127.0.0.1:$https ssl
server_name = fleet.test
ssl_certificate = acme:pebble
return = 200 "ok"

[acme pebble]
directory = $dirurl
accept_terms = on
ca_certificate = $ca
state_path = $state
storage = redis
retry_interval = 1s
retry_max = 2s
EOF
}
$fb->start;
$fa->start;

sub serial {
    my ($t) = @_;
    my $p = $t->port2;
    my $s = `echo | openssl s_client -connect 127.0.0.1:$p -servername fleet.test 2>/dev/null | openssl x509 -noout -serial -issuer 2>/dev/null`;
    return $s;
}
sub issued { my $n = () = $pb->log =~ /Issued certificate serial/g; $n }
my $got = qr/acme: fleet\.test: (new certificate|a current certificate is in)/;

ok(FastdTest::wait_for(sub { $fa->error_log =~ $got && $fb->error_log =~ $got }, 90, 0.2),
   'both fastd have a certificate') or do { $fa->diag_logs; $fb->diag_logs };
is(issued(), 1, 'pebble issued one');
my $sa;
ok(FastdTest::wait_for(sub { $sa = serial($fa); $sa =~ /serial=/ && $sa eq serial($fb) }, 10, 0.1),
   'both serve it') or diag($sa . serial($fb));
like($redis->cli('HGET', 'fastd:acme:pebble:fleet.test.pem', 'data') // '',
     qr/BEGIN CERTIFICATE.*BEGIN PRIVATE KEY/s, 'the certificate and key are in Redis');
ok(-s $fb->dir . '/acme/fleet.test.pem' && -s $fa->dir . '/acme/fleet.test.pem',
   'and each instance keeps its copy in its state_path');

# a renewal by the first is taken by the second without an order
my $orders_b = () = $fb->error_log =~ /ordering a certificate/g;
my $before = issued();
my ($rc, $out) = FastdTest::run_fastd('-c', $fa->conf_file, '-s', 'renew', 'fleet.test');
is($rc, 0, 'fastd -s renew on the first') or diag($out);
ok(FastdTest::wait_for(sub { issued() > $before }, 60, 0.1), '  a new certificate is issued');
my $new;
ok(FastdTest::wait_for(sub { $new = serial($fa); $new ne $sa && $new eq serial($fb) }, 20, 0.1),
   'the second serves the new one too') or diag("$sa / $new / " . serial($fb));
my $orders_b2 = () = $fb->error_log =~ /ordering a certificate/g;
is($orders_b2, $orders_b, '  without ordering');
is(issued(), $before + 1, 'one certificate for the renewal');

# Redis gone: a renewal cannot take the lease; nothing is ordered
$redis->kill9;
$before = issued();
my $mark = length $fa->error_log;
($rc, $out) = FastdTest::run_fastd('-c', $fa->conf_file, '-s', 'renew', 'fleet.test');
ok(FastdTest::wait_for(sub { substr($fa->error_log, $mark) =~ /acme: fleet\.test:.*(lock|lease|Connection refused)/i }, 30, 0.2),
   'Redis gone: the renewal fails on the lease, logged')
    or diag(substr($fa->error_log, $mark));
is(issued(), $before, 'nothing ordered without the lease');
is(serial($fa), $new, 'the certificate in service stays');

# Redis back (empty): the retry orders, and stores it again
$redis->start;
ok(FastdTest::wait_for(sub { issued() > $before }, 60, 0.2),
   'Redis back: the renewal goes through');
ok(FastdTest::wait_for(sub {
    ($redis->cli('HGET', 'fastd:acme:pebble:fleet.test.pem', 'data') // '') =~ /BEGIN CERTIFICATE/ }, 20, 0.2),
   'and the certificate is in Redis again');

$fa->stop;
$fb->stop;
$fa->no_alerts;
$fb->no_alerts;

# The CA validates at an instance that did not order: the challenge is
# the fleet's. pebble's checks go to A, whose CA is unreachable (it can
# never order); B orders, and A answers B's challenge from Redis.
$redis->cli('FLUSHALL');
my $closed = FastdTest::dead_port();
for my $t ($fa, $fb) {
    my $text = FastdTest::slurp($t->conf_file);
    $text =~ s/fleet\.test/fleet2.test/g;
    $text =~ s{state_path = (\S+)}{state_path = $1-2};
    $text =~ s{directory = \S+}{directory = https://127.0.0.1:$closed/dir}
        if $t == $fa;
    $t->write_conf($text);
}
$before = issued();
my ($ma, $mb) = (length $fa->error_log, length $fb->error_log);
$fa->start;
$fb->start;
ok(FastdTest::wait_for(sub { substr($fb->error_log, $mb) =~ /acme: fleet2\.test: new certificate/ }, 90, 0.2),
   'B ordered (the CA validated at A)')
    or do { diag(substr($fa->error_log, $ma)); diag(substr($fb->error_log, $mb)) };
like(substr($fa->error_log, $ma), qr/took another instance's http-01 challenge for fleet2\.test/,
     "A took B's challenge from Redis");
like(substr($fa->error_log, $ma), qr/answered the http-01 challenge/, 'and answered it');
is(issued(), $before + 1, 'one certificate');
sub serial2 {
    my ($t) = @_;
    my $p = $t->port2;
    return scalar `echo | openssl s_client -connect 127.0.0.1:$p -servername fleet2.test 2>/dev/null | openssl x509 -noout -serial 2>/dev/null`;
}
my $s2;
ok(FastdTest::wait_for(sub { $s2 = serial2($fb); $s2 =~ /serial=/ && $s2 eq serial2($fa) }, 20, 0.2),
   'A serves the certificate B ordered') or diag($s2 . serial2($fa));
is(0 + ($redis->cli('HLEN', 'fastd:acme:challenges') // -1), 0, 'the challenge is gone from Redis');
$fa->stop;
$fb->stop;
$fb->no_alerts;

# storage = redis without a [cluster]
my $text = FastdTest::slurp($fa->conf_file);
$text =~ s/\[cluster\]\nredis = \S+\ntimeout = \S+\n//;
FastdTest::spew($fa->dir . '/bad.conf', $text);
($rc, $out) = FastdTest::run_fastd('-t', '-c', $fa->dir . '/bad.conf');
ok($rc != 0 && $out =~ /storage = redis needs a \[cluster\]/, 'no [cluster]: a config error')
    or diag($out);
done_testing;
