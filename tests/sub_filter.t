#!/usr/bin/perl
# sub_filter: literal replacements in static and proxied text responses,
# streamed: a FROM split across chunks by a backend that writes it a byte
# at a time, sub_filter_once on/off, sub_filter_types, any case, $variables
# in TO, gzip after it (decompressed and checked), HTTP/2, a compressed
# upstream answer passed as it is, Content-Length and validators dropped,
# and a 50 MB body streamed with the worker's memory bounded.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Path qw(make_path);
use IO::Socket::INET;
use Test::More;

my $asan = `$FastdTest::BIN -v 2>&1` =~ /--with-sanitizers/;

my $page = "<html><p>Hello World</p><p>hello world</p><p>HELLO WORLD</p>"
         . "<a href=\"http://old.example/x\">old.example</a></html>\n";

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    my $ct = 'text/html; charset=utf-8';
    if ($p =~ m{/bytes$}) {
        # the page a byte a chunk: every FROM crosses pieces
        $c->write("HTTP/1.1 200 OK\r\nContent-Type: $ct\r\n"
                  . "Transfer-Encoding: chunked\r\n\r\n") or return undef;
        for my $b (split //, $page) {
            $c->write("1\r\n$b\r\n") or return undef;
        }
        $c->write("0\r\n\r\n");
        return '';
    }
    if ($p =~ m{/big/(\d+)$}) {
        # N MB, each 64 KB block ending with a FROM
        my $blk = ('x' x (65536 - 11)) . 'Hello World';
        $c->write("HTTP/1.1 200 OK\r\nContent-Type: $ct\r\n"
                  . "Content-Length: " . ($1 << 20) . "\r\n\r\n") or return undef;
        for (1 .. $1 * 16) { $c->write($blk) or return undef }
        return '';
    }
    if ($p =~ m{/encoded$}) {
        return Backend::response(200, $page, 'Content-Type' => $ct,
                                 'Content-Encoding' => 'gzip');
    }
    if ($p =~ m{/plain$}) {
        return Backend::response(200, $page, 'Content-Type' => 'text/plain');
    }
    return Backend::response(200, $page, 'Content-Type' => $ct,
                             'Last-Modified' => 'Mon, 01 Jan 2024 00:00:00 GMT',
                             'ETag' => '"p1"');
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { listen => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% http2" },
    locations => <<"L",
[location /p/]
handler = proxy
upstream = be
sub_filter = 'hello world' 'Bye \$request_method'
sub_filter = old.example new.example

[location /all/]
handler = proxy
upstream = be
sub_filter = 'hello world' 'bye'
sub_filter_once = off
sub_filter_last_modified = on

[location /types/]
handler = proxy
upstream = be
sub_filter = 'hello world' 'bye'
sub_filter_once = off
sub_filter_types = text/plain

[location /gz/]
handler = proxy
upstream = be
sub_filter = 'hello world' 'bye'
sub_filter_once = off
gzip = on
gzip_min_length = 1

[location /s/]
root = %%DIR%%/www
sub_filter = 'hello world' 'bye'
sub_filter_once = off

[location /sgz/]
alias = %%DIR%%/www/s/
sub_filter = 'hello world' 'bye'
sub_filter_once = off
gzip = on
L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\n"));
my $dir = $t->dir;
make_path("$dir/www/s");
# 300 KB: the engine feeds it in pieces, and FROMs fall across them
my $static = join '', map { sprintf "<p>%06d Hello World</p>\n", $_ } 1 .. 12000;
FastdTest::spew("$dir/www/s/big.html", $static);
FastdTest::spew("$dir/www/s/page.html", $page);
FastdTest::spew("$dir/www/s/page.txt", $page);
$t->start;
my ($worker) = $t->workers;

sub get { $t->get(@_, timeout => 20) }

(my $once = $page) =~ s/hello world/Bye GET/i;
$once =~ s/old\.example/new.example/i;
(my $all = $page) =~ s/hello world/bye/gi;

my $r = get('/p/page');
is($r->status, 200, 'proxied: 200');
is($r->body, $once, 'once on: the first of each FROM replaced, any case, '
   . 'TO with a $variable');
ok(!defined $r->header('content-length'), 'no Content-Length');
is($r->header('transfer-encoding'), 'chunked', '... chunked');
ok(!defined $r->header('last-modified') && !defined $r->header('etag'),
   'Last-Modified and ETag dropped (sub_filter_last_modified off)');
$r = $t->http("POST /p/page HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
             timeout => 20);
like($r->body, qr{Bye POST}, '$request_method in TO is the request\'s');

is(get('/p/bytes')->body, $once, 'a backend writing a byte a chunk: FROMs '
   . 'found across pieces');
is(get('/all/bytes')->body, $all, 'once off, a byte a chunk: every FROM');
$r = get('/all/page');
is($r->body, $all, 'once off: every FROM, any case');
is($r->header('last-modified'), 'Mon, 01 Jan 2024 00:00:00 GMT',
   'sub_filter_last_modified on: Last-Modified kept');
is($r->header('etag'), 'W/"p1"', '... and the ETag weak');

is(get('/all/plain')->body, $page, 'text/plain is not in the default types');
is(get('/types/plain')->body, $all, 'sub_filter_types = text/plain: rewritten');
is(get('/types/page')->body, $all, '... and text/html still is');

$r = get('/p/encoded', 'Accept-Encoding' => 'gzip');
ok($r->body eq $page && $r->header('content-encoding') eq 'gzip'
   && $r->header('content-length') == length $page,
   'a compressed upstream answer passes as it is');

$r = get('/gz/bytes', 'Accept-Encoding' => 'gzip');
is($r->header('content-encoding'), 'gzip', 'gzip after sub_filter: compressed');
is(FastdTest::unzip($r->body), $all, '... the substituted text (proxied)');

(my $sall = $static) =~ s/hello world/bye/gi;
$r = get('/s/big.html');
ok($r->body eq $sall, 'static 300 KB: every FROM replaced across pieces');
ok(!defined $r->header('content-length'), '... no Content-Length');
is(get('/s/page.txt')->body, $page, 'static text/plain: unchanged');
$r = get('/sgz/big.html', 'Accept-Encoding' => 'gzip');
is($r->header('content-encoding'), 'gzip', 'static with gzip: compressed');
ok(FastdTest::unzip($r->body) eq $sall, '... the substituted text');
$r = get('/sgz/page.html', 'Accept-Encoding' => 'gzip');
is(FastdTest::unzip($r->body), $all, 'a short static page with gzip: '
   . 'substituted, then compressed');
$r = get('/s/page.html', method => 'HEAD');
ok($r->status == 200 && !defined $r->header('content-length'),
   'HEAD: no Content-Length');

SKIP: {
    my $curl = `curl --version 2>/dev/null`;
    skip 'curl without HTTP/2', 3 unless $curl =~ /HTTP2/;
    my $base = "http://127.0.0.1:" . $t->port2;
    my $out = `curl -sS --max-time 20 --http2-prior-knowledge $base/p/bytes`;
    is($out, $once, 'HTTP/2: proxied, byte by byte');
    $out = `curl -sS --max-time 20 --http2-prior-knowledge $base/s/big.html`;
    ok($out eq $sall, 'HTTP/2: static 300 KB');
    $out = `curl -sS --max-time 20 --http2-prior-knowledge --compressed $base/sgz/big.html`;
    ok($out eq $sall, 'HTTP/2: static with gzip');
}

# 50 MB through it: streamed, the worker's memory stays small
{
    my $rss0 = FastdTest::rss_kb($worker);
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                  Timeout => 10) or die "connect: $!";
    print $s "GET /all/big/50 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    my ($n, $hits, $tail, $max, $buf) = (0, 0, '', 0);
    while (sysread($s, $buf, 65536)) {
        $n += length $buf;
        my $w = $tail . $buf;
        $hits++ while $w =~ /bye/g;
        $tail = substr($w, -2);
        my $rss = FastdTest::rss_kb($worker);
        $max = $rss if $rss > $max;
    }
    is($hits, 50 * 16, '50 MB: every FROM replaced');
    my $grown = $max - $rss0;
    ok($asan || $grown < 20000, "50 MB streamed with bounded memory "
       . "(worker grew $grown kB)");
}

$t->stop;
$t->no_alerts;
$be->stop;

# the configuration's checks
{
    my $bad = FastdTest->new(conf => FastdTest::base_conf(locations =>
        "[location /x/]\nsub_filter = 'only-one'\n"));
    my $out = `$FastdTest::BIN -t -c @{[$bad->conf_file]} 2>&1`;
    like($out, qr{fastd.conf:\d+: "sub_filter" takes two words}, 'one word: refused at -t, file:line');
}

done_testing();
