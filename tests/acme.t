#!/usr/bin/perl
# Automatic HTTPS against a real ACME server (tests/lib/Pebble.pm): a
# [server] with ssl_certificate = acme:NAME gets a certificate over
# http-01, answered by the worker on the plain listener before any
# location (a location that would answer 403 there does not shadow it);
# the chain verifies against pebble's root with curl and openssl; the
# state files are 0600; /status shows the certificate; fastd -s renew
# swaps the certificate without a reload while a download over the old
# one finishes; bad configuration is refused.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;
use IO::Socket::INET;

plan skip_all => Pebble::missing() if Pebble::missing();

my $t = FastdTest->new;
my $dir = $t->dir;
my ($http, $https) = ($t->port, $t->port2);
my $pb = Pebble->new(dir => $dir, http_port => $http, tls_port => $https);
my $dirurl = $pb->directory;
my $ca = $pb->ca_file;

# a large file for the download that spans the swap
mkdir "$dir/www" or die;
my $big = 'x' x (8 << 20);
FastdTest::spew("$dir/www/big.bin", $big);
FastdTest::spew("$dir/www/index.html", "hello over acme\n");

my $conf = FastdTest::main_section() . <<"EOF";
[server]
listen = 127.0.0.1:$http
server_name = acme.test
root = %%DIR%%/www

[location /.well-known/]
return = 403

[location = /status]
handler = status

[server]
listen = 127.0.0.1:$https ssl
server_name = acme.test
server_name = www.acme.test
ssl_certificate = acme:pebble
root = %%DIR%%/www

[acme pebble]
directory = $dirurl
contact = mailto:admin\@acme.test
accept_terms = on
ca_certificate = $ca
state_path = %%DIR%%/acme
retry_interval = 1s
EOF
$t->write_conf($conf);
$t->start;

ok(FastdTest::wait_for(sub { $t->error_log =~ /acme: acme\.test: new certificate/ }, 90, 0.2),
   'a certificate is obtained over http-01')
    or do { $t->diag_logs; diag($pb->log) };
like($t->error_log . $t->stderr_log, qr/serving a self-signed placeholder/,
     'until then, a self-signed placeholder (logged)');
like($t->error_log, qr/answered the http-01 challenge/,
     'the worker answered pebble\'s http-01 check');

my $root = $pb->root;
sub fetch {
    my ($name, $path) = @_;
    my $out = `curl -s --max-time 20 --cacert $root --resolve $name:$https:127.0.0.1 https://$name:$https$path 2>&1`;
    return ($? >> 8, $out);
}
my ($rc, $out);
ok(FastdTest::wait_for(sub { ($rc, $out) = fetch('acme.test', '/'); $rc == 0 }, 10, 0.1),
   'curl --cacert pebble\'s root verifies the served chain')
    or diag("curl $rc: $out");
is($out, "hello over acme\n", '  and gets the page');
($rc, $out) = fetch('www.acme.test', '/');
is($rc, 0, 'the second server_name is on the certificate too');

my $pem = "$dir/acme/acme.test.pem";
ok(-f $pem, 'the certificate is stored under state_path');
is(sprintf('%o', (stat $pem)[2] & 07777), '600', '  mode 0600');
is(sprintf('%o', (stat "$dir/acme")[2] & 07777), '700', '  in a 0700 directory');
ok(-f "$dir/acme/account-pebble.key", 'the account key is stored');
is(sprintf('%o', (stat "$dir/acme/account-pebble.key")[2] & 07777), '600', '  mode 0600');
{
    my $text = FastdTest::slurp($pem);
    my @certs = $text =~ /(-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n)/sg;
    FastdTest::spew("$dir/leaf.pem", $certs[0]);
    FastdTest::spew("$dir/chain.pem", join('', @certs[1 .. $#certs]));
    my $v = `openssl verify -CAfile $root -untrusted $dir/chain.pem $dir/leaf.pem 2>&1`;
    like($v, qr/leaf\.pem: OK/, 'openssl verify: the stored chain goes to pebble\'s root');
}

# the challenge path on port 80: only known tokens are fastd's
my $r = $t->get('/.well-known/acme-challenge/unknown');
is($r && $r->status, 403, 'an unknown token goes on to the locations');

# /status: the certificate, its issuer, not-after, next renewal
$r = $t->get('/status', Accept => 'text/plain;version=0.0.4');
like($r && $r->body, qr/fastd_acme_not_after_seconds\{certificate="acme\.test",issuer="pebble",names="acme\.test www\.acme\.test",last_error=""\} [1-9]/,
     'Prometheus: not-after per certificate');
like($r && $r->body, qr/fastd_acme_next_renewal_seconds\{certificate="acme\.test"[^}]*\} [1-9]/,
     '  and the next renewal');
like($r && $r->body, qr/fastd_acme_renewals_total\{certificate="acme\.test"[^}]*\} 1/,
     '  and the renewals');

# --- a forced renewal: swapped without a reload, a download over the old
# certificate finishes ---------------------------------------------------
sub serial {
    my $s = `echo | openssl s_client -connect 127.0.0.1:$https -servername acme.test 2>/dev/null | openssl x509 -noout -serial 2>/dev/null`;
    chomp $s;
    return $s;
}
my $before = serial();
like($before, qr/^serial=/, 'the served certificate has a serial');
my $workers = join ',', sort $t->workers;

# a slow reader over the old certificate: curl limited to 1 MB/s
my $dl = "$dir/download.out";
my $curl = fork // die;
if ($curl == 0) {
    exec('curl', '-s', '--max-time', '60', '--limit-rate', '1M', '--cacert', $root,
         '--resolve', "acme.test:$https:127.0.0.1", '-o', $dl,
         "https://acme.test:$https/big.bin");
    exit 127;
}
FastdTest::wait_for(sub { -s $dl && -s $dl > 100000 }, 20, 0.05);

my ($src, $sout) = FastdTest::run_fastd('-c', $t->conf_file, '-s', 'renew', 'acme.test');
is($src, 0, 'fastd -s renew acme.test') or diag($sout);
ok(FastdTest::wait_for(sub { my $n = () = $t->error_log =~ /acme: acme\.test: new certificate/g; $n >= 2 }, 90, 0.2),
   'a second certificate is obtained') or $t->diag_logs;
my $after;
ok(FastdTest::wait_for(sub { $after = serial(); $after ne $before && $after =~ /^serial=/ }, 10, 0.1),
   'new handshakes get the new certificate') or diag("$before / $after");
waitpid($curl, 0);
is($? >> 8, 0, 'the download over the old certificate finished');
is(-s $dl, length $big, '  whole');
is(join(',', sort $t->workers), $workers, 'no reload: the same workers');
($rc, $out) = fetch('acme.test', '/');
is($rc, 0, 'the new chain verifies too');

# a reload: a new helper, the stored certificate served by the new
# workers, nothing ordered
my $orders = () = $t->error_log =~ /ordering a certificate/g;
$t->signal('HUP');
ok(FastdTest::wait_for(sub { my $n = () = $t->error_log =~ /acme: helper started/g; $n >= 2 }, 20, 0.1),
   'a reload starts a new helper') or $t->diag_logs;
ok(FastdTest::wait_for(sub { join(',', sort $t->workers) ne $workers }, 20, 0.1), '  and new workers');
is(serial(), $after, '  which serve the stored certificate');
my $orders2 = () = $t->error_log =~ /ordering a certificate/g;
is($orders2, $orders, '  without ordering');
sub helpers { scalar grep { (FastdTest::slurp("/proc/$_/cmdline") // '') =~ /acme helper/ } $t->workers }
ok(FastdTest::wait_for(sub { helpers() == 1 }, 10, 0.1), '  one helper: the old one is gone')
    or diag(helpers() . ' helpers');

# the helper holds no listening socket (the workers' copies are those)
{
    my ($helper) = grep { (FastdTest::slurp("/proc/$_/cmdline") // '') =~ /acme helper/ } $t->workers;
    my ($worker) = grep { (FastdTest::slurp("/proc/$_/cmdline") // '') =~ /worker process/ } $t->workers;
    my %w = map { $_ => 1 } grep { /^socket:/ } values %{ FastdTest::fd_links($worker) };
    my @shared = grep { $w{$_} } values %{ FastdTest::fd_links($helper) };
    is(scalar(@shared), 0, 'the helper holds none of the listening sockets')
        or diag("@shared");
}

my ($bad, $bout) = FastdTest::run_fastd('-c', $t->conf_file, '-s', 'renew', 'nosuch.test');
isnt($bad, 0, 'renew of an unknown certificate fails');
like($bout, qr/no ACME certificate "nosuch\.test"/, '  saying so');

$t->stop;
$t->no_alerts;

# --- configuration errors ------------------------------------------------
my @bad = (
    ["[server]\nlisten = 127.0.0.1:$https ssl\nserver_name = a.test\nssl_certificate = acme:none\n",
     qr/no \[acme none\] section/],
    ["[server]\nlisten = 127.0.0.1:$https ssl\nserver_name = a.test\nssl_certificate = acme:x\n[acme x]\ndirectory = $dirurl\n",
     qr/needs accept_terms = on/],
    ["[server]\nlisten = 127.0.0.1:$https ssl\nserver_name = *.a.test\nssl_certificate = acme:x\n[acme x]\ndirectory = $dirurl\naccept_terms = on\nstate_path = %%DIR%%/acme\n",
     qr/server_name "\*\.a\.test" is no name/],
    ["[acme x]\ndirectory = http://insecure/dir\naccept_terms = on\n",
     qr/is not an https:\/\/ URL/],
    ["[acme x]\ndirectory = $dirurl\naccept_terms = on\nchallenge = dns-01\n",
     qr/challenge/],
);
for my $b (@bad) {
    $t->write_conf(FastdTest::main_section() . $b->[0], 'bad.conf');
    my ($code, $msg) = FastdTest::run_fastd('-t', '-c', "$dir/bad.conf");
    isnt($code, 0, "refused: $b->[1]");
    like($msg, $b->[1], '  with the reason');
}

done_testing;
