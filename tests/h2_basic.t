#!/usr/bin/perl
# HTTP/2 over cleartext (h2c, prior knowledge) on a "listen ... http2"
# address: every module answers as over HTTP/1.1 (plaintext, json, static
# with Range, conditional requests and HEAD, 404, gzip, return, acl),
# response header names are lower case and never connection-specific,
# many streams share one connection, HTTP/1.1 keeps working on the same
# port, Upgrade: h2c is not honoured, an address without http2 answers
# the preface with 400; real clients: curl, nghttp, h2load; and the access
# log's $server_protocol and $http2_stream_id.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use H2;
use File::Path qw(make_path);
use JSON::PP ();
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();

my $locations = <<'EOF';
[location /moved]
return = 301 https://$host$request_uri

[location /closed]
handler = plaintext
deny = all

[location /gz/]
gzip = on

EOF
my $conf = H2::conf(
    server    => { root => '%%DIR%%/www', mime_types => '%%CONF%%/mime.types' },
    locations => $locations,
    # a second address without http2: the preface is a bad HTTP/1.1 request
    extra     => "[server]\nlisten = 127.0.0.1:%%PORT2%%\n"
               . "root = %%DIR%%/www\n\n");
my $t = FastdTest->new(conf => $conf);
my $dir = $t->dir;
my $port = $t->port;
make_path("$dir/www/gz");
my $page = "<html><body>\n" . join('', map { "<p>line $_ of the page</p>\n" }
                                        1 .. 400) . "</body></html>\n";
# bigger than the 64k windows on both sides: flow control must work
my $big = join '', map { sprintf "%07d %s\n", $_, 'y' x ($_ % 61) } 1 .. 9000;
FastdTest::spew("$dir/www/page.html", $page);
FastdTest::spew("$dir/www/gz/page.html", $page);
FastdTest::spew("$dir/www/big.txt", $big);
$t->start;

# --- curl, prior knowledge -------------------------------------------------
my $h1 = $t->get('/plaintext');
my $r = H2::curl($t, '/plaintext');
is($r->{code}, 200, 'curl h2c: /plaintext 200') or diag($r->{err});
is($r->{version}, '2', 'curl h2c: HTTP/2 was spoken');
is($r->{body}, $h1 && $h1->body, 'the same body as over HTTP/1.1');
like($r->{headers}, qr{^HTTP/2 200}, 'curl saw an HTTP/2 status line');

$r = H2::curl($t, '/json');
is($r->{code}, 200, '/json 200');
my $j = eval { JSON::PP::decode_json($r->{body}) };
is(ref $j, 'HASH', '/json decodes') or diag($r->{body});
like(H2::hval($r, 'content-type') // '', qr{^application/json}, 'json content-type');

# --- static ----------------------------------------------------------------
$r = H2::curl($t, '/page.html');
is($r->{code}, 200, 'static file 200');
ok($r->{body} eq $page, 'static body intact');
like(H2::hval($r, 'content-type') // '', qr{^text/html}, 'static content-type');
my $etag = H2::hval($r, 'etag');
my $lm = H2::hval($r, 'last-modified');

$r = H2::curl($t, '/big.txt');
is($r->{code}, 200, 'a file larger than the windows: 200');
is(length $r->{body}, length $big, 'all ' . length($big) . ' bytes arrived');
ok($r->{body} eq $big, 'and intact');

$r = H2::curl($t, '/page.html', args => [ '-H', 'Range: bytes=10-29' ]);
is($r->{code}, 206, 'Range: 206');
is($r->{body}, substr($page, 10, 20), 'the range bytes');
is(H2::hval($r, 'content-range'), "bytes 10-29/" . length($page), 'content-range');

SKIP: {
    skip 'no etag on the static response', 1 unless defined $etag;
    $r = H2::curl($t, '/page.html', args => [ '-H', "If-None-Match: $etag" ]);
    is("$r->{code}:" . length $r->{body}, '304:0', 'If-None-Match: 304, no body');
}
SKIP: {
    skip 'no last-modified on the static response', 1 unless defined $lm;
    $r = H2::curl($t, '/page.html', args => [ '-H', "If-Modified-Since: $lm" ]);
    is("$r->{code}:" . length $r->{body}, '304:0', 'If-Modified-Since: 304, no body');
}

$r = H2::curl($t, '/page.html', args => [ '-I' ]);
is($r->{code}, 200, 'HEAD 200');
is(H2::hval($r, 'content-length'), length $page, 'HEAD: the GET length');
# curl -I writes the header where the body would go: count DATA frames
my $o = H2::py($t, <<'PY');
c = Raw()
c.req(1, '/page.html', method='HEAD')
r = c.response(1)
done(status=r['status'], frames=r['data_frames'], body=r['body'], end=r['end'])
PY
is("$o->{status} $o->{frames} $o->{end}", '200 0 1', 'HEAD: no DATA frame, END_STREAM on the HEADERS')
    or diag(H2::explain($o));

$r = H2::curl($t, '/nothing-here.html');
is($r->{code}, 404, 'a missing file: 404');

# --- gzip, return, acl -----------------------------------------------------
$r = H2::curl($t, '/gz/page.html', args => [ '-H', 'Accept-Encoding: gzip' ]);
is($r->{code}, 200, 'gzip location 200');
is(H2::hval($r, 'content-encoding'), 'gzip', 'gzip: content-encoding');
ok(FastdTest::unzip($r->{body}) eq $page, 'gzip: decompresses to the page');

$h1 = $t->http("GET /moved?x=1 HTTP/1.1\r\nHost: 127.0.0.1:$port\r\n\r\n");
$r = H2::curl($t, '/moved?x=1');
is($r->{code}, 301, 'return 301');
ok(defined H2::hval($r, 'location')
   && H2::hval($r, 'location') eq ($h1 && $h1->header('location') // ''),
   'Location as over HTTP/1.1 ($host from :authority): '
   . (H2::hval($r, 'location') // 'none'));

$r = H2::curl($t, '/closed');
is($r->{code}, 403, 'acl: 403');

# --- frames: lower-case names, no connection-specific fields ---------------
$o = H2::py($t, <<'PY');
c = Raw()
paths = ['/plaintext', '/json', '/page.html', '/nothing-here', '/moved?a=b',
         '/closed', '/gz/page.html', '/big.txt']
for i, p in enumerate(paths):
    c.req(1 + 2 * i, p, headers=[('accept-encoding', 'gzip')])
out = {}
for i, p in enumerate(paths):
    r = c.response(1 + 2 * i, timeout=10)
    out[p] = {'status': r['status'], 'names': [n for n, v in r['headers']],
              'len': len(r['body']), 'end': r['end']}
done(out=out, **c.summary())
PY
my $resp = $o->{out} || {};
is(scalar keys %$resp, 8, 'eight streams at once on one connection')
    or diag(H2::explain($o));
my %want = ('/plaintext' => 200, '/json' => 200, '/page.html' => 200,
            '/nothing-here' => 404, '/moved?a=b' => 301, '/closed' => 403,
            '/gz/page.html' => 200, '/big.txt' => 200);
for my $p (sort keys %want) {
    my $x = $resp->{$p} || {};
    is($x->{status}, $want{$p}, "stream for $p: $want{$p}");
    ok($x->{end}, "stream for $p ended with END_STREAM");
    my @names = @{ $x->{names} || [] };
    is($names[0] // '', ':status', "$p: :status comes first");
    my @upper = grep { /[A-Z]/ } @names;
    ok(!@upper, "$p: header names are lower case") or diag("@upper");
    my @conn = grep { /^(connection|keep-alive|transfer-encoding|upgrade|proxy-connection)$/ }
               @names;
    ok(!@conn, "$p: no connection-specific header") or diag("@conn");
}
is($resp->{'/big.txt'}{len}, length $big, 'the big file, multiplexed, complete');
my $s = $o->{settings} || {};
is($s->{8}, 1, 'SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSocket over HTTP/2 (RFC 8441)')
    or diag(H2::explain($s));
is($s->{3}, 128, 'SETTINGS_MAX_CONCURRENT_STREAMS: the default 128');
is($s->{4}, 65536, 'SETTINGS_INITIAL_WINDOW_SIZE: the default 64k');
ok(!$o->{goaway} && !$o->{eof}, 'the connection stayed open, no GOAWAY')
    or diag(H2::explain($o));

# --- HTTP/1.1 on the same port, Upgrade: h2c, an address without http2 ---
my $x = $t->get('/plaintext');
is($x && $x->{version} . ' ' . $x->status, 'HTTP/1.1 200', 'HTTP/1.1 on the http2 port');
$x = $t->get('/plaintext', Connection => 'Upgrade, HTTP2-Settings',
             Upgrade => 'h2c', 'HTTP2-Settings' => 'AAMAAABkAARAAAAAAAIAAAAA');
is($x && $x->{version} . ' ' . $x->status, 'HTTP/1.1 200',
   'Upgrade: h2c is answered as HTTP/1.1, not 101');
ok($x && !defined $x->header('upgrade'), 'and no Upgrade header back');

my ($raw) = $t->raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", port => $t->port2,
                    timeout => 5);
like($raw, qr{^HTTP/1\.1 400 }, 'without http2 on the listen line: the preface gets 400')
    or diag(substr($raw, 0, 200));
$r = H2::curl($t, '/page.html', port => $t->port2);
isnt($r->{version}, '2', 'and curl cannot speak HTTP/2 there');

# --- nghttp ----------------------------------------------------------------
SKIP: {
    skip 'nghttp is not installed (nghttp2-client)', 5 unless H2::nghttp();
    my ($rc, $out) = TLS::run([ H2::nghttp(), '-nv',
                                "http://127.0.0.1:$port/plaintext",
                                "http://127.0.0.1:$port/page.html" ],
                              timeout => 20);
    is($rc, 0, 'nghttp -nv: exit 0') or diag($out);
    like($out, qr/recv SETTINGS frame <length=\d+, flags=0x00, stream_id=0>/,
         'nghttp: the server SETTINGS');
    like($out, qr/\[SETTINGS_MAX_CONCURRENT_STREAMS\(0x03\):128\]/,
         'nghttp: max concurrent streams 128');
    my @st = $out =~ /recv \(stream_id=(\d+)\) :status: 200/g;
    is(scalar @st, 2, 'nghttp: two 200s') or diag($out);
    my @ends = $out =~ /recv (?:DATA|HEADERS) frame <length=\d+, flags=0x0[15], stream_id=\d+>\n\s+; END_STREAM/g;
    is(scalar @ends, 2, 'nghttp: each stream ended by the server') or diag($out);
}

# --- h2load ----------------------------------------------------------------
SKIP: {
    skip 'h2load is not installed (nghttp2-client)', 2 unless H2::h2load();
    my ($rc, $out) = TLS::run([ H2::h2load(), qw(-n 2000 -c 4 -m 8),
                                "http://127.0.0.1:$port/plaintext" ],
                              timeout => 50);
    like($out, qr/^requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored, 0 timeout/m,
         'h2load -n 2000 -c 4 -m 8: all succeeded') or diag($out);
    like($out, qr/^status codes: 2000 2xx/m, 'h2load: all 2xx');
}

my @why = H2::serving($t);
ok($why[0], 'the worker serves a new HTTP/2 client') or diag($why[2]);
$t->no_alerts;
$t->stop;

# --- the access log --------------------------------------------------------
# its own server: $http2_stream_id is new, and a config that fails on it
# must not take the tests above with it
my $al = FastdTest->new(conf => H2::conf(
    http   => { log_format =>
                    'h2f $server_protocol|$http2_stream_id|$status|$method|$uri' },
    server => { access_log => '%%DIR%%/h2.log format=h2f buffer=0' }));
if (!eval { $al->start; 1 }) {
    fail('a server with $http2_stream_id in a log_format starts');
    diag($@);
} else {
    $o = H2::py($al, <<~'PY');
    c = Raw()
    c.req(1, '/plaintext')
    c.req(3, '/json')
    c.req(5, '/nothing')
    done(s=[c.response(i)['status'] for i in (1, 3, 5)])
    PY
    is_deeply($o->{s}, [200, 200, 404], 'three streams for the access log')
        or diag(H2::explain($o));
    $al->get('/plaintext');
    my @l;
    FastdTest::wait_for(sub {
        @l = split /\n/, FastdTest::slurp($al->dir . '/h2.log') // ''; @l >= 4 }, 5);
    is(scalar @l, 4, 'four lines logged') or diag(join "\n", @l);
    my @h2 = sort grep { /^HTTP\/2\.0\|/ } @l;
    is_deeply(\@h2, [ 'HTTP/2.0|1|200|GET|/plaintext', 'HTTP/2.0|3|200|GET|/json',
                      'HTTP/2.0|5|404|GET|/nothing' ],
              '$server_protocol HTTP/2.0 and $http2_stream_id per stream')
        or diag(join "\n", @l);
    my ($one) = grep { /^HTTP\/1\.1\|/ } @l;
    like($one // '', qr{^HTTP/1\.1\|(-|0|)\|200\|GET\|/plaintext$},
         'an HTTP/1.1 request: HTTP/1.1 and no stream id') or diag(join "\n", @l);
    $al->no_alerts;
}

done_testing();
