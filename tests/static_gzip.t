#!/usr/bin/perl
# gzip_static: FILE.br / FILE.gz served instead of FILE when the client
# takes it and the variant is not older; Content-Encoding, Vary, its own
# length, ETag, ranges and conditionals; a missing or stale variant falls
# back to FILE; "always"; with the gzip filter on; a bad value.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use IO::Compress::Gzip qw(gzip $GzipError);
use Test::More;

my $locations = <<'EOF2';
[location /s/]
root = %%DIR%%/www
gzip_static = on

[location /a/]
alias = %%DIR%%/www/s/
gzip_static = always

[location /z/]
alias = %%DIR%%/www/s/
gzip_static = on
gzip = on
gzip_min_length = 1

[location /off/]
alias = %%DIR%%/www/s/

EOF2

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => '%%DIR%%/www' }, locations => $locations));
my $dir = $t->dir;
my $s = "$dir/www/s";
make_path($s);
my $plain = join(' ', map { "line $_" } 1 .. 2000) . "\n";
my $gz;
gzip(\$plain => \$gz) or die $GzipError;
my $br = "BROTLI-BYTES:" . ('b' x 100);    # served as it is, never decoded here
FastdTest::spew("$s/both.txt", $plain);
FastdTest::spew("$s/both.txt.gz", $gz);
FastdTest::spew("$s/both.txt.br", $br);
FastdTest::spew("$s/gz.txt", $plain);
FastdTest::spew("$s/gz.txt.gz", $gz);
FastdTest::spew("$s/none.txt", $plain);
FastdTest::spew("$s/old.txt", $plain);
FastdTest::spew("$s/old.txt.gz", $gz);
FastdTest::spew("$s/index.html", "<p>index</p>\n");
FastdTest::spew("$s/index.html.gz", $gz);
FastdTest::spew("$s/link.txt", $plain);
FastdTest::spew("$dir/elsewhere.gz", $gz);
symlink("../../elsewhere.gz", "$s/link.txt.gz") or die "symlink: $!";
my $now = time;
utime $now - 100, $now - 100, "$s/$_" for qw(both.txt gz.txt old.txt.gz index.html);
utime $now, $now, "$s/$_" for qw(both.txt.gz both.txt.br gz.txt.gz old.txt index.html.gz);
$t->start;

sub get { my ($p, %h) = @_; return $t->get($p, %h) }

# --- choosing the variant -----------------------------------------------------------
my $r = get('/s/gz.txt', 'Accept-Encoding' => 'gzip');
is($r->status, 200, '.gz: 200');
is($r->header('content-encoding'), 'gzip', '.gz: Content-Encoding: gzip');
is($r->header('content-length'), length $gz, '.gz: its own length');
ok($r->body eq $gz, '.gz: its bytes, as they are on disk');
is(FastdTest::unzip($r->body), $plain, '.gz: decompresses to FILE');
is($r->header('content-type'), 'text/plain', '.gz: the type of FILE');
is($r->header('vary'), 'Accept-Encoding', '.gz: Vary: Accept-Encoding');
my $etag_gz = $r->header('etag');
my $lm_gz = $r->header('last-modified');

$r = get('/s/gz.txt');
FastdTest::is_plain($r, $plain, 'no Accept-Encoding: FILE');
is($r->header('vary'), 'Accept-Encoding', 'FILE: Vary too (the answer depends on it)');
my $etag_plain = $r->header('etag');
ok($etag_gz && $etag_plain && $etag_gz ne $etag_plain,
   ".gz ETag ($etag_gz) differs from FILE's ($etag_plain)");

FastdTest::is_plain(get('/s/gz.txt', 'Accept-Encoding' => 'gzip;q=0'), $plain,
                    'gzip;q=0: FILE');
FastdTest::is_plain(get('/s/gz.txt', 'Accept-Encoding' => 'br'), $plain,
                    'br only, no .br: FILE');
FastdTest::is_plain(get('/s/gz.txt', 'Accept-Encoding' => 'gzip;q=0.5, identity'),
                    $plain, 'identity preferred: FILE');
is(get('/s/gz.txt', 'Accept-Encoding' => 'br, gzip')->header('content-encoding'),
   'gzip', 'br, gzip with only .gz: gzip');
is(get('/s/gz.txt', 'Accept-Encoding' => '*')->header('content-encoding'),
   'gzip', '"*": gzip');

$r = get('/s/both.txt', 'Accept-Encoding' => 'gzip, deflate, br');
is($r->header('content-encoding'), 'br', 'both: br preferred at equal q');
ok($r->body eq $br, 'both: the .br bytes');
is($r->header('content-length'), length $br, 'both: the .br length');
my $etag_br = $r->header('etag');
ok($etag_br && $etag_br ne $etag_gz, '.br ETag is its own');
is(get('/s/both.txt', 'Accept-Encoding' => 'br;q=0.5, gzip')
       ->header('content-encoding'), 'gzip', 'gzip at a higher q: gzip');
is(get('/s/both.txt', 'Accept-Encoding' => 'br;q=0, gzip')
       ->header('content-encoding'), 'gzip', 'br;q=0: gzip');
is(get('/s/both.txt', 'Accept-Encoding' => 'gzip')->header('content-encoding'),
   'gzip', 'gzip only: gzip');
is(get('/s/both.txt', 'Accept-Encoding' => '*')->header('content-encoding'),
   'br', '"*": br');

FastdTest::is_plain(get('/s/none.txt', 'Accept-Encoding' => 'gzip, br'), $plain,
                    'no .gz: FILE');
FastdTest::is_plain(get('/s/old.txt', 'Accept-Encoding' => 'gzip'), $plain,
                    '.gz older than FILE: FILE');
FastdTest::is_plain(get('/s/link.txt', 'Accept-Encoding' => 'gzip'), $plain,
                    '.gz a symlink out: refused, FILE');
$r = get('/s/', 'Accept-Encoding' => 'gzip');
is($r->header('content-encoding'), 'gzip', 'index file: its .gz');
is($r->header('content-type'), 'text/html', 'index file: its type');
FastdTest::is_plain(get('/off/gz.txt', 'Accept-Encoding' => 'gzip'), $plain,
                    'gzip_static off (default): FILE');
ok(!defined get('/off/gz.txt')->header('vary'), 'gzip_static off: no Vary');

# --- HEAD, ranges, conditionals on the variant -----------------------------------------
$r = $t->http("HEAD /s/gz.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
ok($r->status == 200 && $r->header('content-length') == length($gz) &&
   $r->header('content-encoding') eq 'gzip' && $r->body eq '',
   'HEAD: the .gz header, no body');

$r = get('/s/gz.txt', 'Accept-Encoding' => 'gzip', Range => 'bytes=0-9');
is($r->status, 206, 'range on the .gz: 206');
ok($r->body eq substr($gz, 0, 10), 'range on the .gz: its first 10 bytes');
is($r->header('content-range'), 'bytes 0-9/' . length($gz),
   'range: Content-Range of the .gz');
is($r->header('content-encoding'), 'gzip', 'range: still gzip');
$r = get('/s/gz.txt', 'Accept-Encoding' => 'gzip', Range => 'bytes=-5');
ok($r->body eq substr($gz, -5), 'suffix range on the .gz');
is(get('/s/gz.txt', 'Accept-Encoding' => 'gzip', Range => 'bytes=0-9',
       'If-Range' => $etag_gz)->status, 206, 'If-Range with the .gz ETag: 206');
is(get('/s/gz.txt', 'Accept-Encoding' => 'gzip', Range => 'bytes=0-9',
       'If-Range' => $etag_plain)->status, 200, 'If-Range with FILE\'s ETag: 200');

$r = get('/s/gz.txt', 'Accept-Encoding' => 'gzip', 'If-None-Match' => $etag_gz);
is($r->status, 304, 'If-None-Match with the .gz ETag: 304');
is($r->header('etag'), $etag_gz, '304 keeps the .gz ETag');
is(get('/s/gz.txt', 'Accept-Encoding' => 'gzip', 'If-None-Match' => $etag_plain)
       ->status, 200, 'If-None-Match with FILE\'s ETag, gzip taken: 200');
is(get('/s/gz.txt', 'If-None-Match' => $etag_gz)->status, 200,
   'If-None-Match with the .gz ETag, plain client: 200');
is(get('/s/gz.txt', 'Accept-Encoding' => 'gzip',
       'If-Modified-Since' => $lm_gz)->status, 304,
   'If-Modified-Since the .gz mtime: 304');

# --- always, and with the gzip filter -------------------------------------------------
$r = get('/a/gz.txt');
is($r->header('content-encoding'), 'gzip', 'always: .gz without Accept-Encoding');
ok($r->body eq $gz, 'always: the .gz bytes');
is(get('/a/both.txt', 'Accept-Encoding' => 'br')->header('content-encoding'),
   'gzip', 'always: .gz, not .br');
FastdTest::is_plain(get('/a/none.txt'), $plain, 'always without .gz: FILE');

$r = get('/z/gz.txt', 'Accept-Encoding' => 'gzip');
ok($r->body eq $gz, 'with gzip = on: the .gz as it is, not compressed again');
$r = get('/z/none.txt', 'Accept-Encoding' => 'gzip');
is($r->header('content-encoding'), 'gzip', 'no .gz, gzip = on: compressed on the fly');
is(FastdTest::unzip($r->body), $plain, 'on the fly: decompresses to FILE');
is(scalar(() = $r->header_all('vary')), 1, 'one Vary header');

# --- a stale variant that becomes fresh, through the open file cache --------------------
utime $now + 10, $now + 10, "$s/old.txt.gz";
is(get('/s/old.txt', 'Accept-Encoding' => 'gzip')->header('content-encoding'),
   'gzip', '.gz touched newer: served');

$t->no_alerts;
$t->stop;

# --- a bad value ---------------------------------------------------------------------------
{
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        locations => "[location /x/]\ngzip_static = maybe\n"));
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    my $line = FastdTest::line_of(FastdTest::slurp($c->conf_file), qr/^gzip_static/);
    is($code, 1, 'gzip_static = maybe: config error');
    like($out, qr/fastd\.conf:$line: .*gzip_static/, 'names file:line') or diag($out);
}

done_testing;
