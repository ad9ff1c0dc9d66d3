#!/usr/bin/perl
# The dashboard over https in headless Chromium: /status.html loads from a
# TLS server (the test CA is not Chromium's: --ignore-certificate-errors),
# polls /status over https, shows no fetch error, and its TLS card shows
# the handshakes /status counts.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use JSON::PP;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
plan skip_all => 'curl is not installed' unless TLS::curl();
plan skip_all => 'chromium is not installed (apt-get install chromium)'
    unless FastdTest::chromium();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
$t->write_conf(TLS::conf(certs => [$cert],
                         locations => "[location = /status]\nhandler = status\n\n"));
$t->start;
my $port = $t->port;

# five handshakes to count (each curl run is a new connection)
for my $i (1 .. 5) {
    my $r = $pki->curl_get("/plaintext?$i", port => $port);
    is($r->{code}, 200, "https request $i") or diag($r->{err});
}

my $dom = FastdTest::browse($dir, '--ignore-certificate-errors',
                            '--virtual-time-budget=6000', '--dump-dom',
                            "https://127.0.0.1:$port/status.html");
my ($polls) = $dom =~ /data-polls="(\d+)"/;
ok(defined $polls && $polls >= 2, 'the page polled /status over https')
    or diag(substr($dom, 0, 2000));
unlike($dom, qr/<[^>]*id="state"[^>]*class="err"|<[^>]*class="err"[^>]*id="state"/,
       'no fetch error shown on the page');

my $r = $pki->curl_get('/status', port => $port);
my $st = eval { decode_json($r->{body}) } || {};
my $hs = $st->{tls} && $st->{tls}{handshakes};
cmp_ok($hs // 0, '>=', 5, "/status counts the TLS handshakes ($hs)");

my ($shown) = $dom =~ m{id="tls-handshakes"[^>]*>\s*([^<]*?)\s*<};
ok(defined $shown, 'the page has the TLS handshake count')
    or diag(substr($dom, 0, 3000));
(my $n = $shown // '') =~ s/\D//g;
ok($n ne '' && $n >= 5, "it shows the handshakes ($shown)");

my $console = FastdTest::slurp("$dir/console.log") // '';
my @errors = grep { /CONSOLE/ && /(Uncaught|Error|error)/ } split /\n/, $console;
is(scalar @errors, 0, 'no console error') or diag(join "\n", @errors);

$t->no_alerts;
done_testing();
