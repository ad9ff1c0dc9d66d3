#!/usr/bin/perl
# The complete example of conf/doc/acme.md ("Automatic HTTPS"), as
# written there, against a real pebble: only the values that name a real
# machine are replaced (ports, paths, the CA's directory and its HTTPS
# certificate, the user). Port 80 redirects to HTTPS, yet pebble's http-01
# checks are answered (before the redirect's location); port 443 serves
# the site with the certificate obtained, HSTS on, HTTP/2 offered.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;

plan skip_all => Pebble::missing() if Pebble::missing();

my $doc = FastdTest::slurp(FastdTest::root() . '/conf/doc/acme.md') // die;
my ($ini) = $doc =~ /^## A complete example\n.*?^```ini\n(.*?)^```/ms;
ok($ini, 'conf/doc/acme.md has the complete example') or BAIL_OUT('no example');

my $t = FastdTest->new;
my $dir = $t->dir;
my ($http, $https) = ($t->port, $t->port2);
my $pb = Pebble->new(dir => $dir, http_port => $http, tls_port => $https);
my ($dirurl, $ca) = ($pb->directory, $pb->ca_file);
mkdir "$dir/www" or die;
FastdTest::spew("$dir/www/index.html", "example.com home\n");

my %rewrite = (
    'user = www-data'                    => $> == 0 ? 'user = root' : '',
    'workers = auto'                     => 'workers = 1',
    'pid = /run/fastd.pid'               => "pid = $dir/fastd.pid",
    'error_log = /var/log/fastd/error.log' => "error_log = $dir/error.log",
    'state_path = /var/lib/fastd/acme'   => "state_path = $dir/acme",
    'listen = 0.0.0.0:80'                => "listen = 127.0.0.1:$http",
    'listen = 0.0.0.0:443 ssl http2'     => "listen = 127.0.0.1:$https ssl http2",
    'root = /var/www/example.com'        => "root = $dir/www",
    'directory = https://acme-v02.api.letsencrypt.org/directory'
        => "directory = $dirurl\nca_certificate = $ca",
);
my $conf = $ini;
for my $from (sort keys %rewrite) {
    my $n = $conf =~ s/^\Q$from\E(?=\s|$)/$rewrite{$from}/mg;
    is($n, 1, "the example says \"$from\" once");
}
unlike($conf, qr/0\.0\.0\.0|\/var\/|\/run\//, 'nothing of a real machine is left');
$t->write_conf($conf);
$t->start('-g');

ok(FastdTest::wait_for(sub { $t->error_log =~ /acme: example\.com: new certificate/ }, 90, 0.2),
   'the example gets its certificate over http-01 behind the redirect')
    or do { $t->diag_logs; diag($pb->log) };
like($pb->log, qr/Attempting to validate w\/ HTTP: http:\/\/www\.example\.com:$http\/\.well-known\/acme-challenge\//,
     '  pebble checked it on the example\'s port 80');

sub get80 { $t->http("GET $_[0] HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n") }
my $r = get80('/docs/?a=1');
is($r && $r->status, 301, 'port 80: 301');
is($r && $r->header('location'), 'https://example.com/docs/?a=1', '  to the same URL on https://');
$r = get80('/.well-known/acme-challenge/none');
is($r && $r->status, 301, '  a token fastd does not have is redirected too');

my $root = $pb->root;
my $out;
ok(FastdTest::wait_for(sub {
    $out = `curl -s -i --http2 --max-time 10 --cacert $root --resolve www.example.com:$https:127.0.0.1 https://www.example.com:$https/ 2>&1`;
    $? == 0 }, 10, 0.1), 'port 443: the chain verifies to pebble\'s root') or diag($out);
like($out, qr/^HTTP\/2 200/m, '  HTTP/2');
like($out, qr/^strict-transport-security: max-age=31536000/mi, '  HSTS');
like($out, qr/example\.com home/, '  the site');

$t->stop;
$t->no_alerts;
done_testing;
