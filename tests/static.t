#!/usr/bin/perl
# static: files, index, MIME types, redirects, 403/404/405, conditional
# requests, ranges, HEAD, path escapes and symlinks (follow_symlinks).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

my $locations = <<'EOF';
[location /f/]
root = %%DIR%%/www
follow_symlinks = on
mime_types = %%CONF%%/mime.types

[location /noetag/]
root = %%DIR%%/www
etag = off
mime_types = %%CONF%%/mime.types

[location /idx/]
root = %%DIR%%/www
index = missing.html
index = second.html
mime_types = %%CONF%%/mime.types

EOF

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => '%%DIR%%/www', mime_types => '%%CONF%%/mime.types' },
    locations => $locations,
));
my $dir = $t->dir;
my $www = "$dir/www";

# --- the tree ---------------------------------------------------------------
make_path("$www/sub", "$www/emptydir", "$www/f", "$www/noetag", "$www/idx",
          "$www/d d", "$www/p%\"<\x01\xff" . ('L' x 200));
my $small = join '', map { chr(32 + $_ % 95) } 0 .. 1023;            # 1 KB
my $big   = join '', map { chr(($_ * 7 + ($_ >> 8)) % 256) } 0 .. 102399; # 100 KB
my $huge  = join '', map { pack('N', $_) } 0 .. (4 * 1024 * 1024 / 4 - 1); # 4 MB
my $index = "<html><body>sub index</body></html>\n";
FastdTest::spew("$www/small.txt", $small);
FastdTest::spew("$www/big.PNG", $big);
FastdTest::spew("$www/huge.bin", $huge);
FastdTest::spew("$www/README", "no extension\n");
FastdTest::spew("$www/style.css", "body{}\n");
FastdTest::spew("$www/empty.txt", '');
FastdTest::spew("$www/sub/index.html", $index);
FastdTest::spew("$www/a b.txt", "space\n");
FastdTest::spew("$www/noetag/x.txt", "no etag\n");
FastdTest::spew("$www/idx/second.html", "second\n");
FastdTest::spew("$dir/secret.txt", "TOP SECRET\n");
symlink("../secret.txt", "$www/out.txt") or die "symlink: $!";
symlink("small.txt", "$www/in.txt") or die "symlink: $!";
symlink("sub", "$www/linkdir") or die "symlink: $!";
symlink("../../secret.txt", "$www/f/out.txt") or die "symlink: $!";
symlink("../small.txt", "$www/f/in.txt") or die "symlink: $!";
my $t0 = 784111777;    # Sun, 06 Nov 1994 08:49:37 GMT
utime $t0, $t0, "$www/small.txt" or die "utime: $!";

$t->start;

my $secret_re = qr/TOP SECRET|root:.*:0:0:/;
my $etag_small = sprintf('"%x-%x"', $t0, 1024);

sub get { my ($p, %h) = @_; return $t->get($p, %h) }

# --- plain files ---------------------------------------------------------------
my $r = get('/small.txt');
is($r->status, 200, '1 KB file: 200');
is($r->header('content-type'), 'text/plain', '1 KB file: text/plain');
is($r->header('content-length'), 1024, '1 KB file: Content-Length');
ok($r->body eq $small, '1 KB file: body identical');
is($r->header('accept-ranges'), 'bytes', 'Accept-Ranges: bytes');
is($r->header('last-modified'), 'Sun, 06 Nov 1994 08:49:37 GMT',
   'Last-Modified is the file mtime');
is($r->header('etag'), $etag_small, 'ETag is "mtime-size" in hex');

$r = get('/big.PNG');
is($r->status, 200, '100 KB file: 200');
is($r->header('content-type'), 'image/png',
   'extension matched case-insensitively');
is($r->header('content-length'), 102400, '100 KB file: Content-Length');
ok($r->body eq $big, '100 KB file: body identical');

$r = $t->http("GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 20);
is($r && $r->status, 200, '4 MB file: 200');
ok($r && $r->body eq $huge, '4 MB file: body identical (sendfile)');

is(get('/README')->header('content-type'), 'application/octet-stream',
   'no extension: application/octet-stream');
is(get('/style.css')->header('content-type'), 'text/css', 'css: text/css');
$r = get('/empty.txt');
is($r->status, 200, 'empty file: 200');
is($r->header('content-length'), 0, 'empty file: Content-Length 0');
is(get('/a%20b.txt')->body, "space\n", 'percent-encoded name');

# --- directories -------------------------------------------------------------
$r = get('/sub/');
is($r->status, 200, 'directory with index.html: 200');
is($r->body, $index, 'index.html served');
is($r->header('content-type'), 'text/html', 'index: text/html');

$r = get('/sub');
is($r->status, 301, 'directory without slash: 301');
is($r->header('location'), '/sub/', 'Location: /sub/');
is(get('/sub?a=1&b=2')->header('location'), '/sub/?a=1&b=2',
   'redirect keeps the query');
is(get('/d%20d')->header('location'), '/d%20d/', 'redirect re-encodes');
my $q = 'q=' . ('%0d%0a' x 1000);
is(get('/p%25%22%3c%01%ff' . ('L' x 200) . "?$q")->header('location'),
   '/p%25%22%3C%01%FF' . ('L' x 200) . "/?$q",
   'redirect: %, quote, <, controls and high bytes escaped; a 6k query '
   . 'kept as sent');

is(get('/emptydir/')->status, 403, 'directory without index: 403');
is(get('/emptydir')->status, 301, 'directory without index, no slash: 301');
is(get('/')->status, 403, 'root without index: 403');
is(get('/idx/')->body, "second\n", 'index list: first existing item');

# --- 404 / 405 ----------------------------------------------------------------
is(get('/nope.txt')->status, 404, 'missing file: 404');
is(get('/nope/x.txt')->status, 404, 'missing directory: 404');
is(get('/small.txt/')->status, 404, 'file with a trailing slash: 404');

$r = $t->http("POST /small.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
              . "\r\nabc");
is($r->status, 405, 'POST: 405');
is($r->header('allow'), 'GET, HEAD', 'POST: Allow: GET, HEAD');
is($t->http("DELETE /small.txt HTTP/1.1\r\nHost: x\r\n\r\n")->status, 405,
   'DELETE: 405');

# --- conditional requests ------------------------------------------------------
my %ims_304 = (
    'Sun, 06 Nov 1994 08:49:37 GMT'   => 'IMF-fixdate, equal',
    'Sunday, 06-Nov-94 08:49:37 GMT'  => 'RFC 850 date',
    'Sun Nov  6 08:49:37 1994'        => 'asctime date',
    'Mon, 07 Nov 1994 00:00:00 GMT'   => 'later date',
    'Sun, 06 Nov 1994 08:49:37 GMT; length=1024' => 'old IE suffix',
);
for my $d (sort keys %ims_304) {
    $r = get('/small.txt', 'If-Modified-Since' => $d);
    is($r->status, 304, "If-Modified-Since ($ims_304{$d}): 304");
}
is($r->body, '', '304: no body');
is($r->header('etag'), $etag_small, '304 keeps ETag');
is($r->header('last-modified'), 'Sun, 06 Nov 1994 08:49:37 GMT',
   '304 keeps Last-Modified');
for my $d ('Sun, 06 Nov 1994 08:49:36 GMT', 'garbage', '') {
    is(get('/small.txt', 'If-Modified-Since' => $d)->status, 200,
       "If-Modified-Since '$d': 200");
}

for my $inm ($etag_small, "W/$etag_small", qq{"nope", $etag_small}, '*') {
    is(get('/small.txt', 'If-None-Match' => $inm)->status, 304,
       "If-None-Match $inm: 304");
}
is(get('/small.txt', 'If-None-Match' => '"nope"')->status, 200,
   'If-None-Match other tag: 200');
is(get('/small.txt', 'If-None-Match' => '"nope"',
       'If-Modified-Since' => 'Sun, 06 Nov 1994 08:49:37 GMT')->status, 200,
   'If-None-Match wins over If-Modified-Since');

# If-Match (strong comparison) and If-Unmodified-Since: 412 when they fail
# (RFC 9110 13.1.1, 13.1.4), checked before If-None-Match
for my $im ($etag_small, qq{"nope", $etag_small}, '*') {
    is(get('/small.txt', 'If-Match' => $im)->status, 200, "If-Match $im: 200");
}
for my $im ('"nope"', "W/$etag_small") {
    $r = get('/small.txt', 'If-Match' => $im);
    is($r->status, 412, "If-Match $im: 412 (a weak tag never matches strongly)");
}
is(get('/small.txt', 'If-Match' => '"nope"', 'If-None-Match' => $etag_small)->status,
   412, 'If-Match before If-None-Match');
is(get('/small.txt', 'If-Unmodified-Since' => 'Sat, 05 Nov 1994 08:49:37 GMT')->status,
   412, 'If-Unmodified-Since before Last-Modified: 412');
for my $d ('Sun, 06 Nov 1994 08:49:37 GMT', 'Mon, 07 Nov 1994 00:00:00 GMT', 'garbage') {
    is(get('/small.txt', 'If-Unmodified-Since' => $d)->status, 200,
       "If-Unmodified-Since '$d': 200");
}
is(get('/small.txt', 'If-Match' => $etag_small,
       'If-Unmodified-Since' => 'Sat, 05 Nov 1994 08:49:37 GMT')->status, 200,
   'If-Match wins over If-Unmodified-Since');

# 304 and HEAD carry no body: the next response on the connection parses
{
    my $c = $t->connect;
    $c->send("GET /small.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: $etag_small\r\n\r\n"
             . "HEAD /small.txt HTTP/1.1\r\nHost: x\r\n\r\n"
             . "GET /README HTTP/1.1\r\nHost: x\r\n\r\n");
    my @r = $c->read_responses(3, head => [0, 1, 0]);
    is(scalar @r, 3, 'pipelined 304, HEAD, GET: three responses');
    is($r[0] && $r[0]->status, 304, 'first: 304');
    is($r[1] && $r[1]->status, 200, 'HEAD: 200');
    is($r[1] && $r[1]->header('content-length'), 1024,
       'HEAD: Content-Length of the file');
    is($r[2] && $r[2]->body, "no extension\n",
       'the GET after 304 and HEAD parses: neither sent a body');
    $c->close;
}

$r = get('/noetag/x.txt');
is($r->status, 200, 'etag = off: 200');
ok(!defined $r->header('etag'), 'etag = off: no ETag');

# --- ranges ---------------------------------------------------------------------
$r = get('/small.txt', Range => 'bytes=0-9');
is($r->status, 206, 'bytes=0-9: 206');
is($r->header('content-range'), 'bytes 0-9/1024', 'bytes=0-9: Content-Range');
is($r->header('content-length'), 10, 'bytes=0-9: Content-Length');
is($r->body, substr($small, 0, 10), 'bytes=0-9: body');

$r = get('/small.txt', Range => 'bytes=-5');
is($r->status, 206, 'bytes=-5: 206');
is($r->header('content-range'), 'bytes 1019-1023/1024', 'bytes=-5: range');
is($r->body, substr($small, -5), 'bytes=-5: body');

$r = get('/small.txt', Range => 'bytes=95-');
is($r->status, 206, 'bytes=95-: 206');
is($r->header('content-range'), 'bytes 95-1023/1024', 'bytes=95-: range');
is($r->body, substr($small, 95), 'bytes=95-: body');

$r = get('/big.PNG', Range => 'bytes=50000-50099');
is($r->body, substr($big, 50000, 100), 'range in the middle of 100 KB');

$r = get('/small.txt', Range => 'bytes=1000-99999');
is($r->header('content-range'), 'bytes 1000-1023/1024', 'end clamped');

$r = get('/small.txt', Range => 'bytes=-99999');
is($r->header('content-range'), 'bytes 0-1023/1024',
   'suffix longer than the file: all of it');

$r = get('/small.txt', Range => 'bytes=99999-');
is($r->status, 416, 'bytes=99999-: 416');
is($r->header('content-range'), 'bytes */1024', '416: Content-Range */size');
is(get('/small.txt', Range => 'bytes=1024-')->status, 416,
   'start at the size: 416');
is(get('/empty.txt', Range => 'bytes=-1')->status, 416,
   'suffix of an empty file: 416');

# several ranges: multipart/byteranges (RFC 9110 14.6)
{
    $r = get('/small.txt', Range => 'bytes=0-4,10-14');
    is($r->status, 206, 'bytes=0-4,10-14: 206');
    my ($bd) = ($r->header('content-type') // '')
        =~ m{^multipart/byteranges; boundary=(\S+)$};
    ok($bd, 'Content-Type: multipart/byteranges with a boundary')
        or diag($r->header('content-type'));
    $bd //= 'none';
    my $want = "\r\n--$bd\r\nContent-Type: text/plain\r\n"
             . "Content-Range: bytes 0-4/1024\r\n\r\n" . substr($small, 0, 5)
             . "\r\n--$bd\r\nContent-Type: text/plain\r\n"
             . "Content-Range: bytes 10-14/1024\r\n\r\n" . substr($small, 10, 5)
             . "\r\n--$bd--\r\n";
    is($r->body, $want, 'the two parts, each with its Content-Range');
    is($r->header('content-length'), length $want, 'Content-Length of the whole');
    ok(!defined $r->header('content-range'), 'no Content-Range on the whole');
    $r = get('/small.txt', Range => 'bytes=0-4,5000-6000');
    is($r->status . ' ' . ($r->header('content-range') // ''),
       '206 bytes 0-4/1024', 'one satisfiable range of two: a single part');
    $r = get('/small.txt', Range => 'bytes=5000-,6000-');
    is($r->status, 416, 'none satisfiable: 416');
    my $many = 'bytes=' . join(',', map { "$_-$_" } 0 .. 16);
    $r = get('/small.txt', Range => $many);
    is($r->status, 200, '17 ranges (over max_ranges = 16): 200, the whole file');
    $r = get('/small.txt', Range => 'bytes=0-1023,0-1023');
    is($r->status, 200, 'ranges adding up to more than the file: 200');
    $many = 'bytes=' . join(',', map { "$_-$_" } 0 .. 15);
    $r = get('/small.txt', Range => $many);
    is($r->status, 206, '16 ranges: 206');
    is(scalar(() = $r->body =~ /Content-Range: /g), 16, '... 16 parts');
}

for my $h ('bytes=0-1,x', 'bytes=abc', 'bytes=5-2', 'items=0-1', 'bytes=') {
    $r = get('/small.txt', Range => $h);
    is($r->status, 200, "Range '$h': ignored, 200");
    is(length $r->body, 1024, "Range '$h': whole file");
}

is(get('/small.txt', Range => 'bytes=0-9', 'If-Range' => $etag_small)->status,
   206, 'If-Range with the ETag: 206');
is(get('/small.txt', Range => 'bytes=0-9', 'If-Range' => '"old"')->status,
   200, 'If-Range with another ETag: 200');
is(get('/small.txt', Range => 'bytes=0-9',
       'If-Range' => 'Sun, 06 Nov 1994 08:49:37 GMT')->status,
   206, 'If-Range with the date: 206');
is(get('/small.txt', Range => 'bytes=0-9',
       'If-Range' => 'Sun, 06 Nov 1994 08:49:36 GMT')->status,
   200, 'If-Range with another date: 200');

$r = $t->http("HEAD /small.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\n\r\n");
is($r->status, 200, 'HEAD ignores Range');

# --- escapes ---------------------------------------------------------------------
for my $p ('/../etc/passwd', '/%2e%2e/%2e%2e/etc/passwd',
           '/..%2f..%2fetc/passwd', '/a/../../etc/passwd',
           '/../secret.txt', '/%2e%2e/secret.txt', '/..%2fsecret.txt',
           '/sub/..%2f..%2fsecret.txt', '/sub/%2E%2E/%2E%2E/secret.txt',
           '/.%2e/secret.txt', '//../secret.txt', '/..\\secret.txt',
           '/small.txt%00.html', '/%00', '/sub%2f..%2f..%2fsecret.txt') {
    my $raw = $t->raw("GET $p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    my ($status) = $raw =~ m{^HTTP/1\.1 (\d{3})};
    ok(defined $status && $status =~ /^(400|403|404)$/,
       "escape $p: refused") or diag("got: " . substr($raw, 0, 200));
    unlike($raw, $secret_re, "escape $p: nothing outside the root");
}

# --- symlinks ----------------------------------------------------------------------
is(get('/out.txt')->status, 403, 'symlink out of root: 403');
is(get('/in.txt')->status, 403, 'symlink inside root: 403 (follow off)');
is(get('/linkdir/index.html')->status, 403, 'symlinked directory: 403');
is(get('/linkdir/')->status, 403, 'symlinked directory index: 403');
$r = get('/f/out.txt');
is($r->status, 200, 'follow_symlinks = on: symlink out of root served');
is($r->body, "TOP SECRET\n", 'follow_symlinks = on: target body');
is(get('/f/in.txt')->body, $small, 'follow_symlinks = on: inside link');

$t->no_alerts;
$t->stop;

# --- on the offload pool (static is thread-safe) ----------------------------------
{
    my $o = FastdTest->new(conf => FastdTest::base_conf(
        http   => { inline_completions => 'off' },
        server => { root => $www, mime_types => '%%CONF%%/mime.types' }));
    $o->start;
    my $r = $o->get('/big.PNG');
    ok($r->status == 200 && $r->body eq $big, 'offload: 100 KB file');
    $r = $o->get('/small.txt', Range => 'bytes=-5');
    is($r->body, substr($small, -5), 'offload: range');
    is($o->get('/small.txt', 'If-None-Match' => $etag_small)->status, 304,
       'offload: 304');
    is($o->get('/sub')->header('location'), '/sub/', 'offload: redirect');
    is($o->get('/out.txt')->status, 403, 'offload: symlink refused');
    is($o->get('/nope')->status, 404, 'offload: 404');
    $o->no_alerts;
}

# --- configuration errors -------------------------------------------------------------
{
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        server => { mime_types => '%%DIR%%/missing.types' }));
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    is($code, 1, 'missing mime_types file: config error');
    like($out, qr{missing\.types}, 'the error names the file') or diag($out);

    $c->write_file('bad.types', "types {\n  text/html html;\n  text/css css\n");
    $c->write_conf(FastdTest::base_conf(
        server => { mime_types => '%%DIR%%/bad.types' }));
    ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    is($code, 1, 'malformed mime_types file: config error');
    like($out, qr{bad\.types:\d+}, 'the error names file:line') or diag($out);

    $c->write_file('ok.types', "# comment\ntypes {\n  text/x-foo foo FOO2;\n}\n");
    $c->write_conf(FastdTest::base_conf(
        server => { mime_types => '%%DIR%%/ok.types', root => '%%DIR%%' }));
    FastdTest::spew($c->dir . '/a.foo2', 'foo');
    $c->start;
    is($c->get('/a.foo2')->header('content-type'), 'text/x-foo',
       'custom mime_types file');
    is($c->get('/fastd.conf')->header('content-type'),
       'application/octet-stream', 'unknown extension: default type');
    $c->no_alerts;
}

done_testing();
