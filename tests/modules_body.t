#!/usr/bin/perl
# The public API's request body in pieces and its responses from files
# (API 1.1), through tests/modules/app.c built as a user builds it:
# POST /upload takes its body with fd_req_read() as it comes
# (FD_API_STREAM_BODY) and answers its size and byte sum, over HTTP/1.1
# with Content-Length and chunked and over HTTP/2 (with and without a
# length); max_body_size still answers 413 (up front for a length, by
# count for a body without one); a client that stops sending gets 408
# after body_timeout; the blocking twin reads the same way from memory.
# GET /file sends bytes of a file (fd_resp_file): whole, a range, a
# length past the end (clipped), an offset past the end (416), and a
# client's Range within the bytes given, over HTTP/1.1 and HTTP/2.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use H2;
use Time::HiRes qw(time);
use Test::More;

my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
ApiModule::install($dir);
my $app = FastdTest::root() . '/tests/modules/app.c';
is(ApiModule::build("$dir/app.so", $app), '', 'app.so builds');
is(ApiModule::build("$dir/app_blocking.so", $app, '-DAPP_BLOCKING'), '',
   'app_blocking.so builds');

# a file of known bytes: 0..255 repeated, 100,000 bytes
my $data = join '', map { chr($_ % 256) } 0 .. 99_999;
FastdTest::spew("$dir/data.bin", $data);

$t->write_conf(FastdTest::base_conf(
    main => { load_module => [ "$dir/app.so", "$dir/app_blocking.so" ] },
    http => { body_timeout => '1s' },
    server => { listen => '127.0.0.1:%%PORT%% http2' },
    locations => "[location /app/]\nhandler = app\nmax_body_size = 8m\n"
               . "app_file = $dir/data.bin\n\n"
               . "[location /small/]\nhandler = app\nmax_body_size = 1k\n\n"
               . "[location /b/]\nhandler = app_blocking\n\n"));
$t->start;
my $p = $t->port;

sub sum { my ($s) = @_; my $n = 0; $n += ord for split //, $s; $n % 2**32 }
sub counted { my ($s) = @_; sprintf '{"bytes":%d,"sum":%d}', length $s, sum($s) }

my $big = 'abcdefghij' x 400_000; # 4 MB: many pieces, many reads

# --- HTTP/1.1 -----------------------------------------------------------------
my $r = $t->http("POST /app/upload HTTP/1.1\r\nHost: x\r\nContent-Length: "
                 . length($big) . "\r\n\r\n$big", timeout => 20);
is($r && "$r->{status} $r->{body}", '200 ' . counted($big),
   'HTTP/1.1, Content-Length: 4 MB streamed through fd_req_read()');

{
    # chunked, in pieces with pauses: the module waits (FD_AGAIN) between
    my @pieces = ("POST /app/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                  "5\r\nhello\r\n", "6\r\n world\r\n", "0\r\n\r\n");
    my $raw = $t->raw(\@pieces, delay => 0.1, responses => 1);
    my ($resp) = FastdTest::parse_responses($raw, eof => 0);
    is($resp && "$resp->{status} $resp->{body}", '200 ' . counted('hello world'),
       'HTTP/1.1, chunked, in three pauses: every piece');
}

$r = $t->http("POST /small/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n"
              . ('x' x 2000));
is($r && $r->{status}, 413, 'Content-Length over max_body_size: 413');
{
    my $chunk = sprintf("%x\r\n%s\r\n", 600, 'y' x 600);
    my $raw = $t->raw("POST /small/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                      . $chunk x 3 . "0\r\n\r\n", responses => 1);
    like($raw, qr{^HTTP/1.1 413 }, 'chunked past max_body_size: 413, counted as it came');
    $raw = $t->raw("POST /small/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   . "zz\r\nabc\r\n", responses => 1);
    like($raw, qr{^HTTP/1.1 400 }, 'broken chunked framing: 400');
}

{
    # the client stops sending: 408 after body_timeout (1s), then close
    my $start = time;
    my ($raw, $eof) = $t->raw("POST /app/upload HTTP/1.1\r\nHost: x\r\n"
                              . "Content-Length: 100\r\n\r\n0123456789", timeout => 10);
    like($raw, qr{^HTTP/1.1 408 }, 'a client that stops sending: 408');
    ok($eof, '... and the connection closed');
    cmp_ok(time - $start, '>=', 0.9, '... not before body_timeout');
    like($t->error_log, qr/client timed out sending the request body/,
         '... logged at info');
}

$r = $t->http("POST /b/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world");
is($r && "$r->{status} $r->{body}", '200 ' . counted('hello world'),
   'the blocking twin: the same fd_req_read() loop, from memory');
$r = $t->http("POST /app/items HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n{\"name\":\"pear\"}");
is($r && $r->{status}, 201, 'POST /items: a JSON body collected with fd_req_read()');

# --- HTTP/2 ---------------------------------------------------------------------
SKIP: {
    my $curl = '/usr/bin/curl';
    skip 'curl is not installed', 4 unless -x $curl;
    my $v = `$curl --version`;
    skip 'curl has no HTTP2', 4 unless $v =~ /^Features:.*\bHTTP2\b/m;
    FastdTest::spew("$dir/big.txt", $big);
    my $o = `$curl -s --http2-prior-knowledge --data-binary \@$dir/big.txt http://127.0.0.1:$p/app/upload`;
    is($o, counted($big), 'HTTP/2 with content-length: 4 MB streamed');
    # -T - : no length, DATA frames until END_STREAM
    $o = `$curl -s --http2-prior-knowledge -X POST -T - http://127.0.0.1:$p/app/upload < $dir/big.txt`;
    is($o, counted($big), 'HTTP/2 without a length: 4 MB streamed');
    $o = `$curl -s --http2-prior-knowledge 'http://127.0.0.1:$p/app/file?off=1000&len=300'`;
    is($o, substr($data, 1000, 300), 'HTTP/2: GET /file, a range');
    $o = `$curl -s --http2-prior-knowledge http://127.0.0.1:$p/app/file`;
    ok($o eq $data, 'HTTP/2: GET /file, whole');
}

# HTTP/2 without a length, past max_body_size: frames of our own (curl,
# still uploading when the 413 and RST_STREAM NO_ERROR come, may report a
# failed transfer instead of the answer it got)
SKIP: {
    skip H2::why_not(), 2 if H2::why_not();
    my $o = H2::py($t, <<'PY');
c = Raw()
c.until(lambda: c.settings, 5)
c.req(1, '/small/upload', method='POST', end_stream=False)
c.data(1, b'z' * 600)
c.data(1, b'z' * 600)
c.data(1, b'z' * 600, end_stream=True)
r = c.response(1, timeout=5)
done(status=r['status'], rst=r['rst'])
PY
    is($o->{status}, 413, 'HTTP/2 without a length, past max_body_size: 413')
        or diag(H2::explain($o));
    ok(!defined $o->{rst} || $o->{rst} == 0, '... the stream ended or reset with NO_ERROR');
}

# --- files ------------------------------------------------------------------------
$r = $t->get('/app/file');
ok($r && $r->{status} == 200 && $r->{body} eq $data, 'GET /file: the whole file');
is($r && $r->{headers}{'content-type'}, 'application/octet-stream',
   '... with the content type the module gave, not copied');
ok($r && FastdTest::is_http_date($r->{headers}{'last-modified'} // ''),
   '... Last-Modified: the file\'s time');
$r = $t->get('/app/file?off=5&len=10');
is($r && $r->{body}, substr($data, 5, 10), 'a range of it: off=5 len=10');
is($r && $r->{headers}{'content-length'}, 10, '... Content-Length 10');
$r = $t->get('/app/file?off=99990&len=1000');
is($r && $r->{body}, substr($data, 99990), 'a length past the end: to the end');
is($t->get('/app/file?off=100000')->{status}, 200, 'an offset at the end: empty 200');
is($t->get('/app/file?off=100001')->{status}, 416, 'an offset past the end: 416');
$r = $t->get('/app/file?off=1000&len=100', Range => 'bytes=10-19');
is($r && "$r->{status} $r->{body}", '206 ' . substr($data, 1010, 10),
   'a client\'s Range, within the bytes the module gave: 206');
is($r && $r->{headers}{'content-range'}, 'bytes 10-19/100', '... Content-Range');
is($t->get('/app/file', 'If-Modified-Since' => $t->get('/app/file')->{headers}{'last-modified'})->{status},
   304, 'If-Modified-Since the file\'s time: 304');

$t->no_alerts;
$t->stop;
done_testing;
