#!/usr/bin/perl
# brotli: complete and streamed responses compressed with br and decoded
# equal by curl (built with brotli); br chosen over gzip at equal q, gzip
# when preferred, identity for q=0; brotli_types, brotli_min_length,
# HEAD, a 1 MB file in pieces; a 10 MB proxied stream to a slow client
# with the worker's peak RSS bounded; brotli_level = 12 refused.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Digest::MD5 qw(md5_hex);
use Test::More;

my $asan = `$FastdTest::BIN -v 2>&1` =~ /--with-sanitizers/;
plan skip_all => 'curl without brotli' unless `curl -V` =~ /\bbrotli\b/;

srand(7);
my @vocab = map { join '', map { chr(97 + int rand 26) } 1 .. 2 + int rand 8 } 1 .. 3000;
my $block = '';
$block .= $vocab[rand @vocab] . (rand() < 0.1 ? "\n" : ' ') while length $block < (1 << 20);
$block = substr($block, 0, 1 << 20);
my $stream_size = 10 << 20;

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    return Backend::response(404, "no\n") unless $req->{path} =~ m{/stream$};
    $c->write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
              . "Transfer-Encoding: chunked\r\n\r\n") or return undef;
    for (my $left = $stream_size; $left > 0; $left -= length $block) {
        $c->write(sprintf("%x\r\n", length $block) . $block . "\r\n") or return undef;
    }
    $c->write("0\r\n\r\n");
    return '';
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => '%%DIR%%/www', mime_types => '%%CONF%%/mime.types' },
    locations => <<"L",
[location /b/]
brotli = on

[location /bg/]
brotli = on
gzip = on

[location /g/]
gzip = on

[location /types/]
brotli = on
brotli_types = application/octet-stream

[location /min/]
brotli = on
brotli_min_length = 64k

[location /l1/]
brotli = on
brotli_level = 1

[location /p]
handler = proxy
upstream = be
brotli = on
L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\n"));
my $www = $t->dir . '/www';
mkdir $www;
mkdir "$www/$_" for qw(b bg g types min l1);
my $text = join(' ', map { "word$_" } 1 .. 2000) . "\n";    # ~18 KB
my $big = substr($block, 0, 1 << 20);
for my $d (qw(b bg g types min l1)) {
    FastdTest::spew("$www/$d/t.txt", $text);
    FastdTest::spew("$www/$d/big.txt", $big);
    FastdTest::spew("$www/$d/x.bin", $text);
}
FastdTest::spew("$www/b/app.js", "function f(x) { return x; }\n" x 200);
$t->start;
my $port = $t->port;

# curl --compressed (Accept-Encoding: deflate, gzip, br, zstd): headers
# and the decoded body
sub curl {
    my ($path, @args) = @_;
    my $hf = $t->dir . '/h.txt';
    my $body = `curl -s -D $hf @args http://127.0.0.1:$port$path`;
    my %h;
    for (split /\r?\n/, FastdTest::slurp($hf) // '') {
        $h{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
    }
    $h{status} = $1 if (FastdTest::slurp($hf) // '') =~ m{^HTTP/\S+ (\d+)};
    return ($body, \%h);
}

my ($b, $h) = curl('/b/t.txt', '--compressed');
is($h->{'content-encoding'}, 'br', 'complete body: Content-Encoding: br');
ok(defined $h->{'content-length'} && $h->{'content-length'} < length($text) / 2,
   "complete body: a length, compressed ($h->{'content-length'} bytes)");
ok($b eq $text, 'complete body: curl decodes it equal');
is($h->{vary}, 'Accept-Encoding', 'Vary: Accept-Encoding');
ok(($h->{etag} // '') =~ m{^W/"}, 'the ETag becomes weak');
ok(!defined $h->{'accept-ranges'}, 'no Accept-Ranges on the encoded body');

($b, $h) = curl('/b/big.txt', '--compressed');
is($h->{'content-encoding'}, 'br', '1 MB file: br');
is($h->{'transfer-encoding'}, 'chunked', '1 MB file: compressed in pieces, chunked');
ok($b eq $big, '1 MB file: decoded equal');

($b, $h) = curl('/l1/big.txt', '--compressed');
ok($h->{'content-encoding'} eq 'br' && $b eq $big, 'brotli_level = 1: decoded equal');

# --- negotiation ------------------------------------------------------------------------
sub enc { my ($p, $ae) = @_; my $r = $t->get($p, 'Accept-Encoding' => $ae);
          return $r->header('content-encoding') // 'identity' }
is(enc('/bg/t.txt', 'gzip, br'), 'br', 'gzip, br: br (equal q)');
is(enc('/bg/t.txt', 'br;q=0.8, gzip;q=0.8'), 'br', 'equal q below 1: br');
is(enc('/bg/t.txt', 'br;q=0.5, gzip'), 'gzip', 'gzip at a higher q: gzip');
is(enc('/bg/t.txt', 'br;q=0, gzip'), 'gzip', 'br;q=0: gzip');
is(enc('/bg/t.txt', 'br;q=0, gzip;q=0'), 'identity', 'both q=0: identity');
is(enc('/bg/t.txt', '*'), 'br', '"*": br');
is(enc('/bg/t.txt', 'identity'), 'identity', 'identity only');
is(enc('/b/t.txt', 'br;q=0.1, identity'), 'identity', 'identity preferred');
is(enc('/b/t.txt', 'gzip'), 'identity', 'brotli only here, client takes gzip: identity');
is(enc('/g/t.txt', 'br'), 'identity', 'gzip only here, client takes br: identity');
is(enc('/g/t.txt', 'gzip, br'), 'gzip', 'gzip only here: gzip');
my $r = $t->get('/bg/t.txt', 'Accept-Encoding' => 'gzip');
is(FastdTest::unzip($r->body), $text, 'gzip beside brotli still decodes');

# --- types, length, HEAD --------------------------------------------------------------------
is(enc('/b/x.bin', 'br'), 'identity', 'octet-stream not in the default types');
is(enc('/b/app.js', 'br'), 'br', 'a .js file (text/javascript): br by default');
is(enc('/types/x.bin', 'br'), 'br', 'brotli_types adds one');
is(enc('/types/t.txt', 'br'), 'br', '... and keeps the defaults');
is(enc('/min/t.txt', 'br'), 'identity', 'below brotli_min_length: identity');
is(enc('/min/big.txt', 'br'), 'br', 'above brotli_min_length: br');
$r = $t->http("HEAD /b/t.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: br\r\n\r\n");
ok($r->status == 200 && $r->header('content-encoding') eq 'br'
   && !defined $r->header('content-length') && $r->body eq '',
   'HEAD: Content-Encoding: br, no length, no body');
$r = $t->get('/b/t.txt', 'Accept-Encoding' => 'br', Range => 'bytes=0-9');
is($r->status, 206, 'a range is served from the file as it is');
ok(!defined $r->header('content-encoding'), '... not compressed');

# --- 10 MB streamed from the upstream to a slow client -----------------------------------------
$t->no_alerts;
$t->stop;
# a fresh worker: its peak RSS so far is only what starting cost
$t = FastdTest->new(conf => FastdTest::base_conf(
    locations => "[location /p]\nhandler = proxy\nupstream = be\nbrotli = on\n",
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\n"));
$t->start;
$port = $t->port;
is(enc('/p/none', 'br'), 'identity', 'a small proxied 404 is left alone');
{
    my ($worker) = $t->workers;
    my $hwm = sub { (FastdTest::slurp("/proc/$worker/status") // '') =~ /^VmHWM:\s+(\d+)/m ? $1 : 0 };
    my $before = $hwm->();
    my $hf = $t->dir . '/h.txt';
    # 1.5 MB/s: the compressed stream (~3.5 MB) takes a few seconds, so
    # fastd pauses the upstream while the client lags
    my $md5 = `curl -s --compressed --limit-rate 1500k -D $hf http://127.0.0.1:$port/p/stream | md5sum`;
    my $hd = FastdTest::slurp($hf) // '';
    my $want = Digest::MD5->new;
    $want->add($block) for 1 .. $stream_size / length $block;
    like($hd, qr/^Content-Encoding: br\r?$/mi, '10 MB stream: br');
    is((split ' ', $md5)[0], $want->hexdigest, '10 MB stream: decoded, checksum equal');
    my $grow = $hwm->() - $before;
    SKIP: {
        skip 'RSS is not meaningful under AddressSanitizer', 1 if $asan;
        ok($grow < 8192, "10 MB br stream to a slow client: worker peak RSS grew by $grow kB");
    }
}

$t->no_alerts;
$t->stop;

# --- bad values ---------------------------------------------------------------------------
for my $bad (['brotli_level = 12', qr/brotli_level/], ['brotli_level = -1', qr/brotli_level/],
             ['brotli = maybe', qr/brotli/], ['brotli_min_length = lots', qr/brotli_min_length/]) {
    my ($line_text, $re) = @$bad;
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        locations => "[location /x/]\n$line_text\n"));
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    my $line = FastdTest::line_of(FastdTest::slurp($c->conf_file), qr/^\Q$line_text\E$/);
    is($code, 1, "$line_text: config error");
    like($out, qr/fastd\.conf:$line: .*$re/, "$line_text: names file:line") or diag($out);
}

done_testing;
