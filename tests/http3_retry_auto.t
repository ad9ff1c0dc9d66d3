#!/usr/bin/perl
# quic_retry = auto (the default): no Retry while handshakes are few; an
# Initial flood (Initials that start a ClientHello and never finish it,
# tests/lib/quic_flood.py) past 128 half-open connections in the worker
# gets a Retry for each further Initial; once those connections time out
# (ssl_handshake_timeout), clients get none again.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use JSON::PP;
use Test::More;

my $root = FastdTest::root();
my $cfg = FastdTest::slurp("$root/objs/fd_auto_config.h") // '';
plan skip_all => 'fastd built without HTTP/3 (./configure --with-http3)'
    unless $cfg =~ /^#define FD_HTTP3 1/m;
my $py = '/usr/bin/python3';
plan skip_all => 'python3-pycurl on libcurl with HTTP/3 is not installed'
    unless system($py, '-c', 'import pycurl, sys; '
                . 'sys.exit(0 if "nghttp3" in pycurl.version else 1)') == 0;
plan skip_all => 'python3-cryptography is not installed'
    unless system($py, '-c', 'import cryptography') == 0;
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
mkdir "$dir/www";
FastdTest::spew("$dir/www/index.html", "hello\n");
$t->write_conf(<<"CONF");
@{[ FastdTest::main_section(level => 'debug') ]}
[server]
@{[ TLS::quic_server_keys($cert) ]}ssl_handshake_timeout = 5s
root = %%DIR%%/www
CONF
$t->start;
my $port = $t->port;

sub h3_ok {
    my $out = `$py $FindBin::Bin/lib/h3get.py localhost:$port:127.0.0.1 https://localhost:$port/index.html`;
    my ($j) = grep { /^\{/ } split /\n/, $out;
    my $r = $j ? decode_json($j) : {};
    return ($r->{status} // 0) == 200 && ($r->{body} // '') eq "hello\n";
}

sub retries { scalar(() = $t->error_log =~ /QUIC Retry sent/g) }

ok(h3_ok(), 'a client is served');
is(retries(), 0, 'without a Retry');

my $out = `$py $FindBin::Bin/lib/quic_flood.py 127.0.0.1 $port 140`;
my $r = eval { decode_json($out) } // {};
is($r->{retries}, 12, '140 Initials that never finish their handshake: '
                    . 'the last 12 get a Retry');
is($r->{first}, 128, 'from the 129th on');

ok(FastdTest::wait_for(sub {
    my $n = retries();
    h3_ok() && retries() == $n;
}, 30, 0.5), 'once they time out, a client is served without a Retry');

$t->stop;
$t->no_alerts;
done_testing;
