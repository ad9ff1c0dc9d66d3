#!/usr/bin/perl
# proxy_cache: responses kept on disk and answered from there by every
# worker (2 here: the index is shared). Freshness from X-Accel-Expires,
# Cache-Control, Expires and proxy_cache_valid; what is never stored
# (Set-Cookie, no-store, private, Authorization, a body shorter or longer
# than its Content-Length); $upstream_cache_status; HEAD from a GET's
# entry; bypass and no_cache; proxy_cache_lock with 100 concurrent misses
# against a slow backend; inactive and max_size; the cache directory
# removed while it runs; a 64 KB key; the counters in /status.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use JSON::PP;
use Test::More;
use IO::Socket::INET;
use File::Path qw(remove_tree);
use POSIX ();
use Time::HiRes qw(sleep time);

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    my $n = $req->{n};
    my $body = "body of $p #" . time . " $$ $n";
    return Backend::response(200, $body, 'Cache-Control' => 'max-age=60',
                             'ETag' => '"e1"', 'X-Up' => 'yes',
                             'Accept-Ranges' => 'bytes',
                             'Last-Modified' => 'Sun, 06 Nov 1994 08:49:37 GMT')
        if $p =~ m{^/c/};
    return Backend::response(200, $body) if $p =~ m{^/valid/};
    return Backend::response(404, $body) if $p =~ m{^/v404/};
    return Backend::response(200, $body, 'Cache-Control' => 'no-store')
        if $p =~ m{^/nostore/};
    return Backend::response(200, $body, 'Cache-Control' => 'private, max-age=60')
        if $p =~ m{^/private/};
    return Backend::response(200, $body, 'Cache-Control' => 'max-age=60',
                             'Set-Cookie' => 'a=1')
        if $p =~ m{^/cookie/};
    return Backend::response(200, $body, 'X-Accel-Expires' => '0',
                             'Cache-Control' => 'max-age=60')
        if $p =~ m{^/xae0/};
    return Backend::response(200, $body, 'X-Accel-Expires' => '60',
                             'Cache-Control' => 'no-cache')
        if $p =~ m{^/xae60/};
    return Backend::response(200, $body, 'Cache-Control' => 'max-age=1')
        if $p =~ m{^/short-lived/};
    return Backend::response(200, $body,
                             'Expires' => POSIX::strftime(
                                 "%a, %d %b %Y %H:%M:%S GMT",
                                 gmtime(time + 3600)))
        if $p =~ m{^/expires/};
    return Backend::response(200, $body, 'Cache-Control' => 'public, max-age=60')
        if $p =~ m{^/public/};
    if ($p =~ m{^/slow/}) {
        sleep 0.3;
        return Backend::response(200, $body, 'Cache-Control' =>
                                 $p =~ /nostore/ ? 'no-store' : 'max-age=60');
    }
    if ($p =~ m{^/chunked/}) {
        my $b = "chunked $n";
        return "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n"
             . "Transfer-Encoding: chunked\r\n\r\n"
             . sprintf("%x\r\n%s\r\n0\r\n\r\n", length $b, $b);
    }
    if ($p =~ m{^/shortbody/}) {
        $c->write("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n"
                  . "Content-Length: 100\r\n\r\nonly this");
        return undef; # closes after 9 of 100 bytes
    }
    if ($p =~ m{^/longbody/}) {
        return "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n"
             . "Content-Length: 5\r\n\r\nhelloEXTRA";
    }
    if ($p =~ m{^/(?:psrv/)?huge/}) {
        return Backend::response(200, "huge $n", 'Server' => 'upstream/1',
                                 'Cache-Control' => 'max-age=18446744073709552');
    }
    if ($p =~ m{/echoh/}) {
        return Backend::response(200, "range=" . ($req->{headers}{range} // '')
                                 . " inm=" . ($req->{headers}{'if-none-match'} // ''),
                                 'Cache-Control' => 'max-age=60');
    }
    if ($p =~ m{^/hostecho/}) {
        # an application that builds absolute URLs from the Host it got
        my $h = $req->{headers}{host} // '';
        return Backend::response(302, "see http://$h/login",
                                 'Location' => "http://$h/login",
                                 'Cache-Control' => 'max-age=60');
    }
    if ($p =~ m{^/big/}) {
        return Backend::response(200, ('x' x 4000) . " $n",
                                 'Cache-Control' => 'max-age=600');
    }
    return Backend::response(200, $body);
});
my $bp = $be->port;

my $cdir;
my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    http => { max_header_size => '128k' },
    server => { listen => '127.0.0.1:%%PORT%% http2' },
    locations => <<"L",
[location = /status]
handler = status

[location /]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_valid = 200 1m
proxy_cache_valid = 404 30s
proxy_cache_bypass = \$http_x_bypass
proxy_no_cache = \$arg_nocache
add_header = X-Cache-Status \$upstream_cache_status always

[location /cookie-ok/]
handler = proxy
pass = http://be/cookie/
proxy_cache = one
proxy_ignore_headers = Set-Cookie
add_header = X-Cache-Status \$upstream_cache_status always

[location /nocache/]
handler = proxy
pass = http://be/c/
add_header = X-Cache-Status "[\$upstream_cache_status]"

[location /slow/]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_lock = on
proxy_cache_lock_timeout = 20s
add_header = X-Cache-Status \$upstream_cache_status always

[location /bigkey/]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_key = \$request_uri\$http_x_k
proxy_cache_valid = 1m
add_header = X-Cache-Status \$upstream_cache_status always

[location /psrv/]
handler = proxy
upstream = be
proxy_cache = one
proxy_pass_header = Server
add_header = X-Cache-Status \$upstream_cache_status always

[location /postc/]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_methods = GET HEAD POST
proxy_cache_valid = 200 1m
add_header = X-Cache-Status \$upstream_cache_status always

[location /big/]
handler = proxy
upstream = be
proxy_cache = small
add_header = X-Cache-Status \$upstream_cache_status always

L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\nkeepalive = 8\n\n"
           . "[cache one]\npath = %%DIR%%/cache\nlevels = 1:2\n"
           . "keys_zone = 1m\ninactive = 3s\n\n"
           . "[cache small]\npath = %%DIR%%/small\nkeys_zone = 64k\n"
           . "max_size = 20k\n\n"));
$t->start;
$cdir = $t->dir . '/cache';

sub get { my ($p, %h) = @_; return $t->get($p, %h) }
sub cs  { my ($r) = @_; return $r ? ($r->header('x-cache-status') // '') : 'none' }

# --- a MISS, then HITs in whichever worker answers --------------------------

$be->reset_log;
my $r1 = get('/c/a');
is($r1->status, 200, 'first request: 200');
is(cs($r1), 'MISS', 'first request: MISS');
my $hit_ok = 1;
for (1 .. 20) {
    my $r = get('/c/a');
    $hit_ok &&= $r->status == 200 && cs($r) eq 'HIT' && $r->body eq $r1->body
                && ($r->header('x-up') // '') eq 'yes'
                && ($r->header('etag') // '') eq '"e1"'
                && ($r->header('content-type') // '') eq 'text/plain';
}
ok($hit_ok, '20 more: HIT with the same body and headers, in both workers');
is($be->requests, 1, 'the backend saw one request');
my @files = glob("$cdir/*/*/*");
is(scalar(@files), 1, 'one file under path/levels (1:2)');
like($files[0] // '', qr{/cache/[0-9a-f]/[0-9a-f]{2}/[0-9a-f]{32}$},
     'named by the MD5 of the key, levels from its end');

# the client's conditionals and ranges, answered from the entry
{
    $be->reset_log;
    my $r = get('/c/a', 'If-None-Match' => '"e1"');
    is($r->status, 304, 'HIT: If-None-Match of the stored ETag: 304');
    is($r->header('etag'), '"e1"', '304 keeps the ETag');
    is(cs($r), 'HIT', '... from the cache');
    $r = get('/c/a', 'If-None-Match' => 'W/"e1"');
    is($r->status, 304, 'a weak tag matches too (weak comparison)');
    $r = get('/c/a', 'If-None-Match' => '"other"');
    is($r->status, 200, 'another tag: 200');
    $r = get('/c/a', 'If-Match' => '"other"');
    is($r->status, 412, 'If-Match of another tag on a HIT: 412');
    is(cs($r), 'HIT', '... from the cache');
    $r = get('/c/a', 'If-Match' => '"e1"');
    is($r->status, 200, 'If-Match of the stored ETag: 200');
    $r = get('/c/a', 'If-Unmodified-Since' => 'Sat, 05 Nov 1994 08:49:37 GMT');
    is($r->status, 412, 'If-Unmodified-Since before the stored Last-Modified: 412');
    $r = get('/c/a', 'If-Modified-Since' => 'Sun, 06 Nov 1994 08:49:37 GMT');
    is($r->status, 304, 'If-Modified-Since the stored Last-Modified: 304');
    $r = get('/c/a', 'If-Modified-Since' => 'Sat, 05 Nov 1994 08:49:37 GMT');
    is($r->status, 200, 'an older If-Modified-Since: 200');
    is($r->header('last-modified'), 'Sun, 06 Nov 1994 08:49:37 GMT',
       'Last-Modified as stored');
    $r = get('/c/a', Range => 'bytes=0-3');
    is($r->status, 206, 'Range on a HIT: 206');
    is($r->body, substr($r1->body, 0, 4), 'the first 4 bytes of the entry');
    is($r->header('content-range'), 'bytes 0-3/' . length($r1->body),
       'Content-Range');
    $r = get('/c/a', Range => 'bytes=1-1,3-3');
    like($r->header('content-type') // '', qr{^multipart/byteranges},
         'two ranges: multipart/byteranges');
    $r = get('/c/a', Range => 'bytes=9999-');
    is($r->status, 416, 'a range past the end: 416');
    my @ar = grep { lc $_->[0] eq 'accept-ranges' } @{ get('/c/a')->{hlist} };
    is(scalar(@ar), 1, 'one Accept-Ranges');
    is($be->requests, 0, 'none of these went upstream');
}

# a HIT over HTTP/2 (h2c, prior knowledge): the same file range
SKIP: {
    my $curl = `curl --version 2>/dev/null`;
    skip 'curl without HTTP/2', 2 unless $curl =~ /HTTP2/;
    my $port = $t->port;
    my $out = `curl -s --http2-prior-knowledge -H "Host: localhost" -D - http://127.0.0.1:$port/c/a`;
    like($out, qr{^HTTP/2 200.*x-cache-status: HIT}si, 'HTTP/2: a HIT');
    like($out, qr{\Q@{[ $r1->body ]}\E$}, 'HTTP/2: the entry\'s body');
}

# HEAD from the GET's entry
my $rh = $t->http("HEAD /c/a HTTP/1.1\r\nHost: localhost\r\n\r\n");
is(cs($rh), 'HIT', 'HEAD is answered from the GET entry');
is($rh->header('content-length'), length($r1->body),
   'HEAD: the entry\'s Content-Length, no body');
is($be->requests, 0, 'HEAD did not go upstream');

# HEAD miss goes upstream and stores nothing
$be->reset_log;
$rh = $t->http("HEAD /c/headonly HTTP/1.1\r\nHost: localhost\r\n\r\n");
is(cs($rh), 'MISS', 'HEAD of a missing key: MISS');
is(cs(get('/c/headonly')), 'MISS', 'the HEAD stored nothing');

# key: $host is part of it
is(cs($t->http("GET /c/a HTTP/1.1\r\nHost: other\r\n\r\n")), 'MISS',
   'another Host is another key');

# a location without proxy_cache: empty variable
is(get('/nocache/a')->header('x-cache-status'), '[]',
   '$upstream_cache_status is empty where nothing is cached');

# --- freshness --------------------------------------------------------------

sub twice {
    my ($path) = @_;
    my $a = get($path);
    my $b = get($path);
    return (cs($a) . ' ' . cs($b), $a, $b);
}
is((twice('/valid/x'))[0], 'MISS HIT', 'proxy_cache_valid 200 1m: stored');
is((twice('/v404/x'))[0], 'MISS HIT', 'proxy_cache_valid 404 30s: stored');
is((twice('/nostore/x'))[0], 'MISS MISS', 'Cache-Control: no-store: not stored');
is((twice('/private/x'))[0], 'MISS MISS', 'Cache-Control: private: not stored');
is((twice('/cookie/x'))[0], 'MISS MISS', 'Set-Cookie: not stored');
{
    my (undef, $a, $b) = twice('/cookie-ok/x');
    is(cs($a) . ' ' . cs($b), 'MISS HIT',
       'proxy_ignore_headers = Set-Cookie: stored');
    is($b->header('set-cookie'), 'a=1', '... cookie and all');
}
is((twice('/xae0/x'))[0], 'MISS MISS', 'X-Accel-Expires: 0 wins over max-age');
is((twice('/xae60/x'))[0], 'MISS HIT', 'X-Accel-Expires: 60 wins over no-cache');
is((twice('/expires/x'))[0], 'MISS HIT', 'Expires in the future: stored');
is((twice('/chunked/x'))[0], 'MISS HIT', 'a chunked body is stored');
{
    my (undef, $a, $b) = twice('/chunked/y');
    is($b->body, $a->body, 'the chunked body comes back decoded');
}
is((twice('/c/q?nocache=1'))[0], 'MISS MISS', 'proxy_no_cache: not stored');
{
    my $a = get('/c/bp');
    my $b = get('/c/bp', 'X-Bypass' => '1');
    my $c = get('/c/bp', 'X-Bypass' => '0');
    is(cs($a) . ' ' . cs($b) . ' ' . cs($c), 'MISS BYPASS HIT',
       'proxy_cache_bypass: "1" bypasses, "0" does not');
    isnt($b->body, $a->body, 'the bypass went upstream');
    is(cs(get('/c/bp')), 'HIT', 'and stored its response');
    is(get('/c/bp')->body, $b->body, 'the bypass\'s response replaced the entry');
}
{
    my $a = get('/c/auth', Authorization => 'Basic eDp5');
    my $b = get('/c/auth');
    is(cs($a) . ' ' . cs($b), 'MISS MISS',
       'a response to Authorization is not stored (max-age alone)');
    $a = get('/public/auth', Authorization => 'Basic eDp5');
    $b = get('/public/auth');
    is(cs($a) . ' ' . cs($b), 'MISS HIT', '... unless it says public');
}
{
    my $a = get('/short-lived/x');
    is(cs(get('/short-lived/x')), 'HIT', 'max-age=1: HIT at once');
    sleep 1.2;
    my $b = get('/short-lived/x');
    is(cs($b), 'EXPIRED', 'and EXPIRED after a second');
    isnt($b->body, $a->body, 'EXPIRED went upstream');
    is(cs(get('/short-lived/x')), 'HIT', 'the new response was stored');
}

# --- bodies not as announced --------------------------------------------------

{
    $be->reset_log;
    my $raw = $t->raw("GET /shortbody/x HTTP/1.1\r\nHost: localhost\r\n\r\n",
                      timeout => 10);
    like($raw, qr{^HTTP/1.1 200}, 'short body: the client gets the 200 header');
    unlike($raw, qr{only this.{91}}s, 'and not 100 bytes');
    my $raw2 = $t->raw("GET /shortbody/x HTTP/1.1\r\nHost: localhost\r\n\r\n",
                       timeout => 10);
    like($raw2, qr{X-Cache-Status: MISS}, 'a body shorter than Content-Length is not stored');
    is($be->requests, 2, 'both went upstream');

    my $a = get('/longbody/x');
    is($a->body, 'hello', 'long body: the client gets Content-Length bytes');
    is(cs(get('/longbody/x')), 'MISS', 'a body longer than Content-Length is not stored');
}
my @tmp = grep { /\.tmp$/ } glob("$cdir/*/*/*"), glob("$cdir/*");
is(scalar(@tmp), 0, 'no temporary file is left behind');

# --- a 64 KB key ------------------------------------------------------------

{
    my $k = 'k' x 65536;
    my $a = get('/bigkey/x', 'X-K' => $k);
    my $b = get('/bigkey/x', 'X-K' => $k);
    my $c = get('/bigkey/x', 'X-K' => $k . 'z');
    is(cs($a) . ' ' . cs($b) . ' ' . cs($c), 'MISS HIT MISS',
       'a 64 KB key is stored, found, and told from a longer one');
}

# --- the Host's port is in the default key: no poisoning through it --------

{
    # Host: localhost:1 reaches the same server as Host: localhost, and the
    # upstream sees (and reflects) the port; with $host in the key, the
    # redirect to port 1 was stored for every client of localhost
    my $evil = $t->http("GET /hostecho/a HTTP/1.1\r\nHost: localhost:1\r\n\r\n");
    like($evil ? $evil->header('location') // '' : '', qr{^http://localhost:1/login$},
         'Host with a port: the upstream saw it');
    my $good = get('/hostecho/a');
    is($good ? $good->header('location') // '' : '', 'http://localhost/login',
       'then Host without it: not the entry stored for the other');
    is(cs($good), 'MISS', '... which is a different key (MISS)');
    is(cs(get('/hostecho/a')), 'HIT', 'and its own entry is kept (HIT)');
    my $again = $t->http("GET /hostecho/a HTTP/1.1\r\nHost: localhost:1\r\n\r\n");
    is(($again ? cs($again) : '') . ' ' . ($again ? $again->header('location') // '' : ''),
       'HIT http://localhost:1/login', 'the port-1 request has its own HIT');
}

# --- requests the cache does not answer keep their conditionals ------------

{
    # with Authorization the cache never answers (RFC 9111 3.5): the
    # upstream must get the client's Range and If-None-Match
    my $r = get('/echoh/a', Authorization => 'Basic eDp5', Range => 'bytes=0-3',
                'If-None-Match' => '"x"');
    like($r ? $r->body : '', qr{^range=bytes=0-3 inm="x"$},
         'Authorization: Range and If-None-Match reach the upstream')
        or diag($r ? $r->body : 'no response');
    $r = get('/echoh/b', Range => 'bytes=0-3');
    like($r ? $r->body : '', qr{^range= inm=$},
         'without: the cache answers them, the upstream gets none');
}

# --- a max-age past a century; the upstream's Server kept --------------------

{
    # max-age=18446744073709552 s: x 1000 wrapped, the entry was born
    # expired (a MISS each time); clamped to a century, it is kept
    # (the wrapped deadline was 384 ms after the store: look after it)
    my $first = cs(get('/huge/a'));
    sleep 0.6;
    is($first . ' ' . cs(get('/huge/a')), 'MISS HIT',
       'a max-age past a century is kept (clamped), not born expired');
    # proxy_pass_header = Server: its Server is stored, and a HIT sends
    # that one alone, not ours too
    get('/psrv/huge/b');
    my $raw = $t->raw("GET /psrv/huge/b HTTP/1.1\r\nHost: localhost\r\n"
                      . "Connection: close\r\n\r\n");
    my @srv = $raw =~ /^Server: (.*?)\r$/mig;
    like($raw, qr/X-Cache-Status: HIT/, '(a HIT)');
    is("@srv", 'upstream/1', 'proxy_pass_header = Server: one Server on a HIT');
}

# --- proxy_cache_methods = POST: counted, passed with its fields ------------

{
    is(cs(get('/postc/x')), 'MISS', 'POST location: a GET stores');
    my $p = $t->http("POST /postc/x HTTP/1.1\r\nHost: localhost\r\n"
                     . "Content-Length: 2\r\n\r\nhi");
    is($p ? cs($p) : '', 'MISS', 'a POST goes upstream (MISS)');
    $p = $t->http("POST /postc/echoh/p HTTP/1.1\r\nHost: localhost\r\n"
                  . "If-None-Match: \"p\"\r\nContent-Length: 2\r\n\r\nhi");
    like($p ? $p->body : '', qr{inm="p"$}, '... with its conditionals');
    $p = $t->http("POST /postc/y HTTP/1.1\r\nHost: localhost\r\n"
                  . "Content-Length: 2\r\n\r\nhi");
    is(($p ? cs($p) : '') . ' ' . cs(get('/postc/y')), 'MISS MISS',
       'a POST stores nothing');
}

# --- proxy_cache_lock: 100 concurrent misses, one upstream request ---------

sub concurrent {
    my ($path, $n) = @_;
    my @socks;
    for (1 .. $n) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                      Proto => 'tcp') or die "connect: $!";
        push @socks, $s;
    }
    syswrite($_, "GET $path HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        for @socks;
    my %status;
    my %bodies;
    my $deadline = time + 60;
    for my $s (@socks) {
        my $buf = '';
        while (time < $deadline) {
            my $rin = '';
            vec($rin, fileno($s), 1) = 1;
            last unless select($rin, undef, undef, $deadline - time);
            my $got = sysread($s, $buf, 65536, length $buf);
            last unless $got;
        }
        my ($code) = $buf =~ m{^HTTP/1.1 (\d+)};
        my ($st) = $buf =~ m{X-Cache-Status: (\w+)};
        $status{($code // 'none') . ' ' . ($st // '-')}++;
        my (undef, $body) = split /\r\n\r\n/, $buf, 2;
        $bodies{$body // ''}++;
        close $s;
    }
    return (\%status, \%bodies);
}
{
    $be->reset_log;
    my ($st, $bodies) = concurrent('/slow/x', 100);
    is($be->requests, 1, 'proxy_cache_lock: 100 concurrent misses, one upstream request')
        or diag explain $st;
    is(($st->{'200 MISS'} // 0) + ($st->{'200 HIT'} // 0), 100, 'all 100 got 200');
    is($st->{'200 MISS'}, 1, 'one MISS, the rest HIT after waiting');
    is(scalar(keys %$bodies), 1, 'every client got the same body');
}
{
    # the filler stores nothing: the waiters go upstream side by side
    $be->reset_log;
    my $t0 = time;
    my ($st) = concurrent('/slow/nostore', 10);
    my $took = time - $t0;
    is($st->{'200 MISS'}, 10, 'an uncacheable response: all 10 get it (MISS)')
        or diag explain $st;
    is($be->requests, 10, 'each went upstream');
    cmp_ok($took, '<', 2.7, 'side by side after the first, not one after '
           . 'another (10 x 0.3 s would be 3 s)');
}
{
    # a waiter's client leaves while the fill goes on: the upstream request
    # it never started ends with it (fd_api_upstream_cancel), and the fill
    # is stored for the next one
    $be->reset_log;
    my $f = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                  Proto => 'tcp') or die "connect: $!";
    syswrite($f, "GET /slow/left HTTP/1.1\r\nHost: localhost\r\n"
                 . "Connection: close\r\n\r\n");
    my $deadline = time + 10;
    sleep 0.02 while $be->requests < 1 && time < $deadline;
    my $w = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port,
                                  Proto => 'tcp') or die "connect: $!";
    syswrite($w, "GET /slow/left HTTP/1.1\r\nHost: localhost\r\n\r\n");
    sleep 0.1; # at the worker's by then; a waiter still for 0.2 s
    close $w;
    my $buf = '';
    while (time < $deadline) {
        my $rin = '';
        vec($rin, fileno($f), 1) = 1;
        last unless select($rin, undef, undef, $deadline - time);
        last unless sysread($f, $buf, 65536, length $buf);
    }
    close $f;
    like($buf, qr{^HTTP/1.1 200.*X-Cache-Status: MISS}s,
         'the filler is answered after its waiter left');
    is(cs(get('/slow/left')), 'HIT', '... the fill stored');
    is($be->requests, 1, '... and the waiter that left never went upstream');
}
{
    # without the lock (location /), two workers fill the same key at once
    $be->reset_log;
    my ($st, $bodies) = concurrent('/c/race', 20);
    is($st->{'200 MISS'} + ($st->{'200 HIT'} // 0), 20, 'without the lock: all 200');
    my $r = get('/c/race');
    is(cs($r), 'HIT', 'the key is stored once the fills ended');
    ok($bodies->{$r->body}, 'its body is one of those sent whole');
}

# --- the cache directory removed under load ----------------------------------

{
    is(cs(get('/c/gone')), 'MISS', 'a key stored ...');
    is(cs(get('/c/gone')), 'HIT', '... and found');
    remove_tree($cdir);
    # a worker may answer from the entry it holds open for up to a second
    # (its fstat() check), then it is a miss and stored again
    my ($ok, $bad, $miss) = (0, 0, 0);
    my $deadline = time + 15;
    while (time < $deadline && !$miss) {
        my $r = get("/c/gone");
        $r && $r->status == 200 ? $ok++ : $bad++;
        $miss++ if cs($r) eq 'MISS';
        sleep 0.02;
    }
    is($bad, 0, "path removed: every request still gets 200 (no 500; $ok)");
    ok($miss, 'then a miss ...');
    ok(-d $cdir, 'the directories were made again');
    is(cs(get('/c/gone')), 'HIT', 'and the key is stored again');
    my $warns = () = $t->error_log =~ /cache "one"/g;
    cmp_ok($warns, '<=', 4, 'at most a few lines about it in the error log');
}

# --- inactive removes entries; max_size keeps the least recently used out ----

{
    is(cs(get('/c/idle')), 'MISS', 'an entry for inactive');
    my $f = scalar(() = glob("$cdir/*/*/*"));
    ok(FastdTest::wait_for(sub { cs(get('/c/idle2')) eq 'HIT' && 0 }, 0.1, 0.1) || 1,
       'another one');
    my $gone = FastdTest::wait_for(sub {
        my $n = () = grep { -f } glob("$cdir/*/*/*");
        return $n == 0 ? 1 : undef;
    }, 15, 0.2);
    ok($gone, 'inactive = 3s: the manager removed every file unused for 3 s');
    is(cs(get('/c/idle')), 'MISS', 'and its entry');
}
{
    my $sdir = $t->dir . '/small';
    # the index orders uses by clock tick (CLOCK_MONOTONIC_COARSE: 1 to
    # 10 ms): a store and the touch after it share none, or the manager
    # may take /big/1 among the entries of its last tick
    for my $i (1 .. 12) {
        get("/big/$i");
        sleep 0.025;
        get('/big/1'); # kept recently used
        sleep 0.025;
    }
    my $under = FastdTest::wait_for(sub {
        my $sum = 0;
        $sum += -s $_ for glob("$sdir/*");
        return $sum <= 20 * 1024 ? 1 : undef;
    }, 15, 0.2);
    ok($under, 'max_size = 20k: the files shrink below it');
    is(cs(get('/big/1')), 'HIT', 'the recently used entry stayed');
    is(cs(get('/big/2')), 'MISS', 'an old one was evicted');
}

# --- status ----------------------------------------------------------------

{
    my $r = get('/status?format=prometheus');
    $r = get('/status') unless $r && $r->body =~ /proxy_cache/;
    like($r->body, qr/proxy_cache_hits\{?[^\n]*cache="one"[^\n]* [1-9]/,
         '/status: proxy_cache_hits counted');
    like($r->body, qr/proxy_cache_misses[^\n]*cache="one"/,
         '/status: proxy_cache_misses');
}

# --- configuration errors ------------------------------------------------------

sub conf_error {
    my ($extra, $loc) = @_;
    my $t2 = FastdTest->new(conf => FastdTest::base_conf(
        locations => "[location /]\nhandler = proxy\nupstream = be\n$loc\n",
        extra => "[upstream be]\nserver = 127.0.0.1:$bp\n\n$extra"));
    my $out = `$FastdTest::BIN -t -c @{[ $t2->conf_file ]} 2>&1`;
    return ($? >> 8, $out);
}
{
    my ($rc, $out) = conf_error('', 'proxy_cache = nope');
    isnt($rc, 0, 'unknown cache: an error');
    like($out, qr/unknown cache "nope"/, '... that says so');
    ($rc, $out) = conf_error("[cache c]\npath = /tmp/fastd-cache-$$\nlevels = 3\n", '');
    like($out, qr/bad levels "3"/, 'levels = 3: an error');
    ($rc, $out) = conf_error("[cache c]\nlevels = 1\n", '');
    like($out, qr/needs "path"/, 'a cache without path: an error');
    ($rc, $out) = conf_error("[cache c]\npath = /tmp/fastd-cache-$$\n",
                             "proxy_cache = c\nproxy_cache_valid = 1xx 1m");
    like($out, qr/proxy_cache_valid/, 'a bad proxy_cache_valid: an error');
    ($rc, $out) = conf_error("[cache c]\npath = /tmp/fastd-cache-$$\n",
                             "proxy_cache = c\nproxy_ignore_headers = Server");
    like($out, qr/"Server" is not X-Accel-Expires/, 'proxy_ignore_headers = Server: an error');
    ($rc, $out) = conf_error("[cache c]\npath = /tmp/fastd-cache-$$\n",
                             "proxy_cache = c\nproxy_cache_methods = PUT");
    like($out, qr/"PUT" is not GET, HEAD or POST/, 'proxy_cache_methods = PUT: an error');
    remove_tree("/tmp/fastd-cache-$$");
}

# a root master gives the directories it made for a [cache] (at -t too:
# a start after it makes them no more) to the workers' user, and leaves a
# parent that was there as it is
SKIP: {
    my $nobody = getpwnam('nobody');
    skip 'needs a root master and user nobody', 3
        unless $> == 0 && defined $nobody;
    my $base = "/tmp/fastd-cache-own-$$";
    mkdir $base, 0755 or die "mkdir $base: $!";
    my $path = $t->write_conf(FastdTest::base_conf(
        main => { user => 'nobody' },
        locations => "[location /own/]\nhandler = proxy\n"
            . "pass = http://127.0.0.1:" . $be->port . "/\nproxy_cache = own\n",
        extra => "[cache own]\npath = $base/x/y\n"), 'own.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    is($rc, 0, 'user = nobody, a [cache] path to make: -t passes')
        or diag($out);
    is(join(' ', map { (stat $_)[4] // -1 } "$base/x", "$base/x/y"),
       "$nobody $nobody", '... the directories it made are nobody\'s');
    is((stat $base)[4], 0, '... the one that was there is still root\'s');
    remove_tree($base);
}

$t->no_alerts;
$t->stop;
done_testing();
