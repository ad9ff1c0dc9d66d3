#!/usr/bin/perl
# HTTP/3 with four workers: each worker has its own UDP socket, and the
# group's BPF program steers a datagram by its connection ID to the worker
# that owns the connection. ngtcp2's client moves to a new local port in
# the middle of a (rate-limited) download, three times over: each
# download completes byte for byte (without the steering, a new port
# reaches another worker three times in four, and the download stalls).
# New connections are served before and after a reload.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Digest::SHA qw(sha256_hex);
use File::Path qw(make_path);
use JSON::PP;
use Test::More;

my $root = FastdTest::root();
my $cfg = FastdTest::slurp("$root/objs/fd_auto_config.h") // '';
plan skip_all => 'fastd built without HTTP/3 (./configure --with-http3)'
    unless $cfg =~ /^#define FD_HTTP3 1/m;
my $gtls = '/usr/bin/gtlsclient';
plan skip_all => 'ngtcp2-client (gtlsclient) is not installed' unless -x $gtls;
my $py = '/usr/bin/python3';
plan skip_all => 'python3-pycurl on libcurl with HTTP/3 is not installed'
    unless system($py, '-c', 'import pycurl, sys; '
                . 'sys.exit(0 if "nghttp3" in pycurl.version else 1)') == 0;
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
make_path("$dir/dl");
my ($file, $server) = TLS::quic_rated_file($dir, $cert, 375_000, # 1.5 MB
                                           '500k');
my $conf = FastdTest::main_section(workers => 4) . $server;
$t->write_conf($conf);
$t->start;
my $port = $t->port;

sub h3_ok {
    my $out = `$py $FindBin::Bin/lib/h3get.py localhost:$port:127.0.0.1 https://localhost:$port/f.bin`;
    my ($j) = grep { /^\{/ } split /\n/, $out;
    my $r = $j ? decode_json($j) : {};
    return ($r->{status} // 0) == 200 && ($r->{sha256} // '') eq sha256_hex($file);
}

for my $i (1 .. 3) {
    unlink "$dir/dl/f.bin";
    # about 3 s at 500 KB/s; the client moves to a new port after 1 s
    my $rc = system("timeout 60 $gtls -q --exit-on-all-streams-close "
                  . "--change-local-addr=1s --download=$dir/dl 127.0.0.1 "
                  . "$port https://localhost:$port/rated/f.bin "
                  . ">/dev/null 2>&1");
    is($rc, 0, "migration $i: the client ends normally");
    my $got = FastdTest::slurp("$dir/dl/f.bin") // '';
    ok(length $got == length $file && $got eq $file,
       "migration $i: the download is whole after the client's port "
       . "changed (" . length($got) . " bytes)");
}

ok(h3_ok(), 'a new connection before the reload');
my @old = $t->workers;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    my %o = map { $_ => 1 } @old;
    my @new = grep { !$o{$_} } $t->workers;
    @new >= 4;
}, 15), 'the reload started four new workers');
ok(h3_ok(), 'a new connection after the reload');
ok(h3_ok(), 'and another');

$t->stop;
$t->no_alerts;
done_testing;
