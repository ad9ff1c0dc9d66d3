#!/usr/bin/perl
# gzip: static files and in-memory bodies compressed and decompressed
# equal; Accept-Encoding with q-values, "*", identity; Vary; small bodies,
# HEAD, ranges, other types and statuses left alone; levels and types.
# Bodies up to 32 KB are compressed at once and keep a Content-Length;
# longer ones are compressed in pieces as they are sent: chunked (or
# close-delimited for HTTP/1.0), any size, and the connection goes on.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

my $long = join ' ', map { "word$_" } 1 .. 200;    # ~1.7 KB of text

my $locations = <<"EOF";
[location /mem]
return = 200 $long

[location /off/]
gzip = off

[location /l9/]
gzip_level = 9

[location /any/]
gzip_types = *

[location /plus/]
gzip_types = application/octet-stream

[location /tiny/]
gzip_min_length = 1

[location /min/]
gzip_min_length = 64k

EOF

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http      => { gzip => 'on' },
    server    => { root => '%%DIR%%/www', mime_types => '%%CONF%%/mime.types' },
    locations => $locations,
));
my $www = $t->dir . '/www';
make_path("$www/off", "$www/l9", "$www/any", "$www/tiny", "$www/min", "$www/plus");
my $page = "<html><body>\n" . join('', map { "<p>line $_ of the page</p>\n" }
                                        1 .. 400) . "</body></html>\n";
my $big = join '', map { "row $_: " . ('x' x ($_ % 50)) . "\n" } 1 .. 60000;
FastdTest::spew("$www/page.html", $page);
FastdTest::spew("$www/big.txt", $big);
FastdTest::spew("$www/small.txt", "tiny\n");
FastdTest::spew("$www/pic.png", $page);
FastdTest::spew("$www/$_/page.html", $page) for qw(off l9 any tiny);
FastdTest::spew("$www/any/data.bin", $page);
FastdTest::spew("$www/plus/data.bin", $page);
FastdTest::spew("$www/plus/page.html", $page);
FastdTest::spew("$www/tiny/small.txt", "tiny\n");
# just over and just under the 32 KB compressed at once
my $over = substr($big, 0, 32 * 1024 + 1);
my $under = substr($big, 0, 32 * 1024);
FastdTest::spew("$www/over.txt", $over);
FastdTest::spew("$www/under.txt", $under);
FastdTest::spew("$www/min/$_.txt", substr($big, 0, $_ * 1024)) for 40, 64;
# one file per extension of every text type conf/mime.types ships: each
# is compressed by default (a .js file is text/javascript there)
my %text_ext;
{
    my $types = FastdTest::slurp("$FindBin::Bin/../conf/mime.types");
    $types =~ s/#[^\n]*//g;
    while ($types =~ m{([\w.+-]+/[\w.+-]+)\s+([^;]+);}g) {
        my ($type, $exts) = ($1, $2);
        next unless $type =~ m{^text/|[/+](?:json|xml)$|javascript};
        $text_ext{$_} = $type for split ' ', $exts;
    }
}
make_path("$www/types");
FastdTest::spew("$www/types/f.$_", $page) for keys %text_ext;
$t->start;

sub get { $t->get(@_, timeout => 20) }

sub gz { my ($path, %h) = @_; return get($path, 'Accept-Encoding' => 'gzip',
                                         %h) }

# compressed and equal; up to 32 KB with a Content-Length, above chunked
sub is_gzip {
    my ($r, $want, $name, $any_size) = @_;
    my $framed = !$r ? 0 : length($want) <= 32 * 1024
        ? ($r->header('content-length') // -1) == length($r->body)
          && !defined $r->header('transfer-encoding')
        : !defined $r->header('content-length')
          && ($r->header('transfer-encoding') // '') eq 'chunked';
    my $ok = $r && $r->status == 200
        && ($r->header('content-encoding') // '') eq 'gzip'
        && $framed
        && ($any_size || length($r->body) < length($want))
        && FastdTest::unzip($r->body) eq $want;
    ok($ok, $name) or diag($r ? "status $r->{status}, encoding "
        . ($r->header('content-encoding') // 'none') . ", length "
        . ($r->header('content-length') // 'none') . ", transfer "
        . ($r->header('transfer-encoding') // 'none') . ", "
        . length($r->body) . " bytes" : 'no response');
}

# --- compressed -------------------------------------------------------------
my $r = gz('/page.html');
is_gzip($r, $page, 'static file: compressed, decompresses equal');
is($r->header('vary'), 'Accept-Encoding', 'Vary: Accept-Encoding');
ok(!defined $r->header('accept-ranges'), 'no Accept-Ranges on a gzip body');
like($r->header('etag') // '', qr{^W/"}, 'the ETag becomes weak');

is_gzip(gz('/mem'), $long, 'in-memory body (return text): compressed');
is_gzip(gz('/big.txt'), $big, 'a ' . int(length($big) / 1024)
        . ' KB file: compressed in pieces, chunked');
is_gzip(gz('/under.txt'), $under, 'a 32 KB file: at once, Content-Length');
is_gzip(gz('/over.txt'), $over, '32 KB + 1: in pieces, chunked');
{
    # HTTP/1.0: no chunked; the end of the body is the close
    my $c = $t->connect;
    $c->send("GET /big.txt HTTP/1.0\r\nHost: x\r\nAccept-Encoding: gzip\r\n"
           . "Connection: keep-alive\r\n\r\n");
    my $ok = $c->wait_eof(20);
    my ($r10) = FastdTest::parse_responses($c->{raw});
    ok($ok && $r10 && $r10->status == 200
       && ($r10->header('content-encoding') // '') eq 'gzip'
       && !defined $r10->header('content-length')
       && !defined $r10->header('transfer-encoding')
       && ($r10->header('connection') // '') eq 'close'
       && FastdTest::unzip($r10->body) eq $big,
       'HTTP/1.0: a long body compressed, close-delimited');
    $c->close;
}
is_gzip(gz('/l9/page.html'), $page, 'gzip_level = 9');
is_gzip(gz('/any/data.bin'), $page, 'gzip_types = * takes any type');
is_gzip(gz('/tiny/small.txt'), "tiny\n", 'gzip_min_length = 1: even 5 '
        . 'bytes', 1);

for my $ae ('x-gzip', 'GZIP', '*', 'deflate, gzip;q=0.8', 'gzip; q=1.0',
            'identity;q=0, gzip', 'br;q=1.0, gzip;q=0.5, *;q=0.1',
            'gzip;q=0.5, identity;q=0.5') {
    is_gzip(get('/page.html', 'Accept-Encoding' => $ae), $page,
            "Accept-Encoding: $ae -> gzip");
}

# --- not compressed ---------------------------------------------------------
for my $ae ('gzip;q=0', 'gzip; q=0.000', 'identity', 'deflate, br',
            '*;q=0', 'gzip;q=0, *', 'gzip;q=0.5, identity;q=0.9',
            'gzip;q=bogus') {
    $r = get('/page.html', 'Accept-Encoding' => $ae);
    FastdTest::is_plain($r, $page, "Accept-Encoding: $ae -> identity");
    is($r->header('vary'), 'Accept-Encoding', "... with Vary ($ae)");
}
FastdTest::is_plain(get('/page.html'), $page, 'no Accept-Encoding: identity');

$r = gz('/small.txt');
FastdTest::is_plain($r, "tiny\n", 'a body under gzip_min_length is not compressed');
ok(!defined $r->header('vary'), '... and does not vary');

# a HEAD's header is the GET's: encoded, its length unknown until
# compressed, so none (as nginx)
{
    my $g = gz('/page.html');
    $r = gz('/page.html', method => 'HEAD');
    is($r->status, 200, 'HEAD: 200');
    is($r->header('content-encoding'), 'gzip', 'HEAD: Content-Encoding: gzip, as the GET');
    is($r->header('vary'), 'Accept-Encoding', 'HEAD: Vary present');
    ok(!defined $r->header('content-length'), 'HEAD: no Content-Length (the identity one would be wrong)');
    is($r->header('etag'), $g->header('etag'), 'HEAD: the GET\'s (weak) ETag');
    is($r->body, '', 'HEAD: no body');
    my $c = $t->connect;
    $c->send("HEAD /page.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
             . "GET /small.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    my $h = $c->read_response(head => 1, timeout => 5);
    my $n = $c->read_response(timeout => 5);
    ok($h && $h->{status} == 200 && $n && $n->{body} eq "tiny\n",
       'HEAD: the connection goes on with the next request');
    $r = get('/page.html', method => 'HEAD');
    is($r && $r->header('content-length'), length $page,
       'HEAD without Accept-Encoding: the identity length');
}

ok(exists $text_ext{js} && exists $text_ext{css} && exists $text_ext{json}
   && keys %text_ext > 15, 'conf/mime.types read: ' . keys(%text_ext)
   . ' extensions of text types');
for my $ext (sort keys %text_ext) {
    is_gzip(gz("/types/f.$ext"), $page,
            ".$ext ($text_ext{$ext}): compressed by default");
}

# gzip_types adds to the defaults (the README: the lists add up)
is_gzip(gz('/plus/data.bin'), $page, 'gzip_types = application/octet-stream: compressed');
is_gzip(gz('/plus/page.html'), $page, '... and text/html, a default, still is');

$r = gz('/page.html', Range => 'bytes=0-99');
is($r->status, 206, 'range: 206');
FastdTest::is_plain($r, substr($page, 0, 100), 'range response not compressed');
$r = gz('/big.txt', Range => 'bytes=100000-299999');
ok($r && $r->status == 206 && !defined $r->header('content-encoding')
   && $r->header('content-length') == 200000
   && $r->body eq substr($big, 100000, 200000),
   'a range of a long file: 206, not compressed (as nginx)');

$r = gz('/big.txt', method => 'HEAD');
ok($r && $r->status == 200 && ($r->header('content-encoding') // '') eq 'gzip'
   && !defined $r->header('content-length') && $r->body eq '',
   'HEAD of a long file: encoded, no length, no body');

# conditional: the weak ETag and Last-Modified of the gzip response
$r = gz('/big.txt');
my ($etag, $lm) = ($r->header('etag'), $r->header('last-modified'));
like($etag // '', qr{^W/"}, 'a long gzip body has a weak ETag');
$r = gz('/big.txt', 'If-None-Match' => $etag);
ok($r && $r->status == 304 && $r->body eq ''
   && !defined $r->header('transfer-encoding'),
   'If-None-Match with it: 304, no body');
$r = gz('/big.txt', 'If-Modified-Since' => $lm);
ok($r && $r->status == 304 && $r->body eq '', 'If-Modified-Since: 304');

# gzip_min_length goes by the body's size, under or over the 32 KB
FastdTest::is_plain(gz('/min/40.txt'), substr($big, 0, 40 * 1024),
         'gzip_min_length = 64k: a 40 KB file is not compressed');
is_gzip(gz('/min/64.txt'), substr($big, 0, 64 * 1024),
        'gzip_min_length = 64k: a 64 KB file is');

$r = gz('/pic.png');
FastdTest::is_plain($r, $page, 'a type outside gzip_types is not compressed');
ok(!defined $r->header('vary'), '... and does not vary');

$r = gz('/missing.html');
is($r->status, 404, 'a missing file: 404');
FastdTest::is_plain($r, undef, 'its page, under gzip_min_length, is not compressed');
$r = gz('/tiny/missing.html');
ok($r && $r->status == 404 && ($r->header('content-encoding') // '') eq 'gzip'
   && FastdTest::unzip($r->body) =~ /404/,
   'a 404 page over gzip_min_length is compressed (200, 403, 404, as nginx)');

$r = gz('/off/page.html');
FastdTest::is_plain($r, $page, 'gzip = off: not compressed');
ok(!defined $r->header('vary'), 'gzip = off: no Vary');

FastdTest::is_plain(gz('/plaintext'), 'Hello, World!', '/plaintext (13 bytes) stays '
         . 'plain');

{
    # no upper bound: a 17 MB file (sparse, all zeros) is compressed too
    my $size = 17 * 1024 * 1024;
    open my $fh, '>', "$www/huge.txt" or die "huge.txt: $!";
    truncate $fh, $size or die "truncate: $!";
    close $fh;
    $r = gz('/huge.txt');
    is($r && $r->status, 200, 'a 17 MB file: 200');
    ok($r && ($r->header('content-encoding') // '') eq 'gzip'
       && length($r->body) < $size / 100 && FastdTest::unzip($r->body) eq "\0" x $size,
       'a 17 MB file is compressed (' . length($r->body) . ' bytes)');
}

# --- keep-alive: one connection, compressed and plain in turn -------------
{
    my $c = $t->connect;
    $c->send("GET /page.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
           . "GET /page.html HTTP/1.1\r\nHost: x\r\n\r\n"
           . "GET /mem HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    my @r = $c->read_responses(3, timeout => 10);
    is(scalar @r, 3, 'pipelined: three responses');
    is_gzip($r[0], $page, 'pipelined 1: compressed');
    FastdTest::is_plain($r[1], $page, 'pipelined 2: plain');
    is_gzip($r[2], $long, 'pipelined 3: compressed again (stream reset)');
    $c->close;
}
{
    # the same after long bodies, compressed in pieces
    my $c = $t->connect;
    $c->send("GET /big.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
           . "GET /page.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
           . "GET /big.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
           . "GET /big.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    my @r = $c->read_responses(4, timeout => 20);
    is(scalar @r, 4, 'pipelined behind long gzip bodies: four responses');
    is_gzip($r[0], $big, 'pipelined 1: long, chunked');
    is_gzip($r[1], $page, 'pipelined 2: short, Content-Length');
    is_gzip($r[2], $big, 'pipelined 3: long again');
    FastdTest::is_plain($r[3], $big, 'pipelined 4: plain');
    $c->close;
}
{
    # a client that leaves part way through a long body: the worker goes on
    my $c = $t->connect;
    $c->send("GET /huge.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    $c->wait_for_bytes(qr/\r\n\r\n/, 10);
    $c->close;
    is_gzip(gz('/big.txt'), $big, 'after a client left mid-body: served');
}

# --- config errors -------------------------------------------------------------
my $path = $t->write_conf(FastdTest::base_conf(
    locations => "[location /x]\ngzip_level = 10\n"), 'bad.conf');
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
isnt($rc, 0, 'gzip_level = 10 is a config error');
like($out, qr/bad\.conf:\d+: "gzip_level" must be 1\.\.9/, '... naming it')
    or diag($out);

$t->stop;
$t->no_alerts;
done_testing;
