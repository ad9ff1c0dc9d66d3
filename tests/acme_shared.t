#!/usr/bin/perl
# Two fastd sharing one state_path order a name once: started together
# over an empty directory, one certificate is issued by pebble (the lock
# orders them; the second finds the first's certificate and serves it);
# a renewal by one is taken by the other without ordering. pebble's
# http-01 checks go to the first fastd's plain listener only.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;

plan skip_all => Pebble::missing() if Pebble::missing();

my $fa = FastdTest->new;
my $fb = FastdTest->new;
my $state = $fa->dir . '/shared';
my $pb = Pebble->new(dir => $fa->dir, http_port => $fa->port, tls_port => $fa->port2);
my ($dirurl, $ca) = ($pb->directory, $pb->ca_file);

for my $t ($fa, $fb) {
    my ($http, $https) = ($t->port, $t->port2);
    $t->write_conf(FastdTest::main_section() . <<"EOF");
[server]
listen = 127.0.0.1:$http
server_name = shared.test

[server]
listen = 127.0.0.1:$https ssl
server_name = shared.test
ssl_certificate = acme:pebble
return = 200 "ok"

[acme pebble]
directory = $dirurl
accept_terms = on
ca_certificate = $ca
state_path = $state
retry_interval = 1s
retry_max = 2s
EOF
}
$fb->start;
$fa->start;

sub serial {
    my ($t) = @_;
    my $p = $t->port2;
    my $s = `echo | openssl s_client -connect 127.0.0.1:$p -servername shared.test 2>/dev/null | openssl x509 -noout -serial -issuer 2>/dev/null`;
    return $s;
}
sub issued { my $n = () = $pb->log =~ /Issued certificate serial/g; $n }

ok(FastdTest::wait_for(sub { $fa->error_log =~ /acme: shared\.test: (new certificate|a current certificate is in)/ &&
                             $fb->error_log =~ /acme: shared\.test: (new certificate|a current certificate is in)/ }, 90, 0.2),
   'both fastd have a certificate') or do { $fa->diag_logs; $fb->diag_logs };
is(issued(), 1, 'pebble issued one');
my $sa;
ok(FastdTest::wait_for(sub { $sa = serial($fa); $sa =~ /serial=/ && $sa eq serial($fb) }, 10, 0.1),
   'both serve it') or diag($sa . serial($fb));
like($fa->error_log . $fb->error_log, qr/a current certificate is in \Q$state\E \(another fastd ordered it\): serving it/,
     'the second found the first\'s in state_path');

# a renewal by the first is taken by the second without an order
my $orders_b = () = $fb->error_log =~ /ordering a certificate/g;
my $before = issued();
my ($rc, $out) = FastdTest::run_fastd('-c', $fa->conf_file, '-s', 'renew', 'shared.test');
is($rc, 0, 'fastd -s renew on the first') or diag($out);
ok(FastdTest::wait_for(sub { issued() > $before }, 60, 0.1), '  a new certificate is issued');
my $new;
ok(FastdTest::wait_for(sub { $new = serial($fa); $new ne $sa && $new eq serial($fb) }, 20, 0.1),
   'the second serves the new one too') or diag("$sa / $new / " . serial($fb));
my $orders_b2 = () = $fb->error_log =~ /ordering a certificate/g;
is($orders_b2, $orders_b, '  without ordering');
is(issued(), $before + 1, 'one certificate for the renewal');

$fa->stop;
$fb->stop;
$fa->no_alerts;
$fb->no_alerts;
done_testing;
