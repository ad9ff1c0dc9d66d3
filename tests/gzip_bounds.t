#!/usr/bin/perl
# gzip of a large static file is bounded: 20 clients that ask for a 16 MB
# text file and then read nothing add at most 32 MB to the worker's RSS
# (VmHWM, the peak, against VmRSS before), and a /plaintext request sent
# right behind their 20 requests is answered at once (the bound asserted
# is a generous 1 s for a busy CI box; the time measured is printed).
# Then four of the bodies are read to their end and decompress equal to
# the file, and their connections serve another request (keep-alive after
# a chunked compressed body); the other clients leave part way. The peak
# RSS is checked again at the end.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use Digest::MD5 qw(md5_hex);
use IO::Uncompress::Gunzip qw(gunzip $GunzipError);
use Test::More;
use Time::HiRes qw(time);

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http   => { gzip => 'on' },
    server => { root => '%%DIR%%/www', mime_types => '%%CONF%%/mime.types' },
));
my $www = $t->dir . '/www';
mkdir $www or die "$www: $!";

# 16 MB of words and numbers from an LCG: about 2.6:1 at gzip level 1
my $size = 16 * 1024 * 1024;
my @w = qw(alpha bravo charlie delta echo foxtrot golf hotel india juliet
           kilo lima mike november oscar papa quebec romeo sierra tango
           uniform victor whiskey xray yankee zulu);
my ($x, $text) = (12345, '');
while (length $text < $size) {
    my $l = '';
    for (1 .. 8) {
        $x = ($x * 1103515245 + 12345) & 0x7fffffff;
        $l .= $w[$x % 26] . ($x % 1000) . ' ';
    }
    $text .= "$l\n";
}
substr($text, $size) = '';
FastdTest::spew("$www/big.txt", $text);
my $md5 = md5_hex($text);
$t->start;

my ($w) = $t->workers;
ok($w, 'worker ' . ($w // 'missing'));
my $r = $t->get('/plaintext');
is($r && $r->status, 200, 'warm: /plaintext');
my $base = Faults::rss_kb($w);
ok($base, "worker RSS before: $base kB");

my $N = 20;
my $GET = "GET /big.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n";
my @c = map { $t->connect(timeout => 60) } 1 .. $N;
is(scalar(grep { defined } @c), $N, "$N connections");
$_->send($GET) for @c;

# right behind them: the loop must not be held by the 20 compressions
my $t0 = time;
$r = $t->http("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 120);
my $ms = 1000 * (time - $t0);
is($r && $r->status, 200, '/plaintext while 20 clients start a 16 MB gzip');
cmp_ok($ms, '<', 1000, sprintf('... answered in %.1f ms', $ms));

# every client has its header (the response is under way), and reads no
# more: what the worker holds for them now is all it holds
my $started = 0;
for my $c (@c) {
    $started++ if $c->wait_for_bytes(qr/\r\n\r\n/, 120);
}
is($started, $N, "$N responses started");
my ($hwm) = (Faults::slurp("/proc/$w/status") // '') =~ /^VmHWM:\s+(\d+)/m;
my $now = Faults::rss_kb($w);
my $grow = ($hwm // $now) - $base;
cmp_ok($grow, '<=', 32 * 1024, "$N stalled gzip clients of a 16 MB file: "
       . "the worker's peak RSS grew by $grow kB (now "
       . ($now - $base) . " kB over $base kB)");

$t0 = time;
$r = $t->http("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 60);
$ms = 1000 * (time - $t0);
is($r && $r->status, 200, '/plaintext with 20 stalled gzip responses');
cmp_ok($ms, '<', 1000, sprintf('... answered in %.1f ms', $ms));

# four read to the end, the others leave
my ($ok, $chunked, $kept) = (0, 0, 0);
my $full = 4;
for my $c (@c[0 .. $full - 1]) {
    my $resp = $c->read_response(timeout => 300);
    next unless $resp && $resp->status == 200
        && ($resp->header('content-encoding') // '') eq 'gzip';
    $chunked++ if ($resp->header('transfer-encoding') // '') eq 'chunked'
        && !defined $resp->header('content-length');
    my $out;
    gunzip(\$resp->{body} => \$out) or diag("gunzip: $GunzipError");
    $ok++ if defined $out && length $out == $size && md5_hex($out) eq $md5;
    # the same connection goes on
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    my $next = $c->read_response(timeout => 10);
    $kept++ if $next && $next->status == 200;
    $c->close;
}
is($ok, $full, "$full bodies read to the end decompress equal to the file");
is($chunked, $full, '... sent chunked, without Content-Length');
is($kept, $full, '... and each connection serves the next request');
$_->close for @c[$full .. $N - 1];
$r = $t->get('/plaintext');
is($r && $r->status, 200, 'served after ' . ($N - $full) . ' clients left '
   . 'mid-body');
($hwm) = (Faults::slurp("/proc/$w/status") // '') =~ /^VmHWM:\s+(\d+)/m;
cmp_ok(($hwm // 0) - $base, '<=', 32 * 1024, 'the peak RSS over the whole '
       . 'run: ' . (($hwm // 0) - $base) . " kB over $base kB");

$t->stop;
$t->no_alerts;
done_testing;
