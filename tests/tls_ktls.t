#!/usr/bin/perl
# ssl_ktls = on: files leave by SSL_sendfile() where the kernel offers the
# tls ULP; without it (this kind of machine: tcp_available_ulp has no
# "tls") one [warn] at load says so and the read-and-encrypt path serves
# them. Either way a large file and a range of it arrive byte-exact, and
# the other responses are unchanged.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Digest::SHA qw(sha256_hex);
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
plan skip_all => 'curl is not installed' unless TLS::curl();

my $ulp = FastdTest::slurp('/proc/sys/net/ipv4/tcp_available_ulp') // '';
my $ktls = $ulp =~ /(?:^|\s)tls(?:\s|$)/;

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('localhost');

mkdir $t->dir . '/files' or die;
my $big = join '', map { sprintf("%08d", $_) x 512 } 0 .. 767;   # 3 MB
$t->write_file('files/big.bin', $big);

$t->write_conf(TLS::conf(certs => [$cert], more => "ssl_ktls = on\n",
                         locations => "[location /files/]\nroot = %%DIR%%\n"));
$t->start;
my $port = $t->port;
sub get { $pki->curl_get($_[0], port => $port, @_[1 .. $#_]) }

# said while the configuration loads: stderr, before the error log opens
my $log = join '', map { FastdTest::slurp($t->dir . "/$_") // '' }
                   qw(stderr.log error.log);
if ($ktls) {
    unlike($log, qr/ssl_ktls: the kernel offers no tls ULP/,
           'the kernel has the tls ULP: no warning');
} else {
    like($log, qr/\[warn\].*:\d+: ssl_ktls: the kernel offers no tls ULP/,
         'no tls ULP here: one [warn] naming the [server] line');
}

my $r = get('/files/big.bin');
is($r->{code}, 200, 'GET a 3 MB file with ssl_ktls = on: 200') or diag($r->{err});
is(sha256_hex($r->{body}), sha256_hex($big), 'byte-exact');
$r = get('/files/big.bin', args => ['-r', '1000000-1200000']);
is($r->{code}, 206, 'a range of it: 206');
is($r->{body}, substr($big, 1000000, 200001), 'byte-exact');
$r = get('/plaintext');
is($r->{body}, 'Hello, World!', 'a handler response');

$t->stop;
$t->no_alerts;
done_testing;
