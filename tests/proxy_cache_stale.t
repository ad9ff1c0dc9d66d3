#!/usr/bin/perl
# proxy_cache_use_stale and proxy_cache_revalidate: an expired entry
# answers (STALE) when the upstream fails as the location names (a 5xx,
# a refused or cut connection, a time-out), and while another request
# updates it (UPDATING); with revalidation the entry's ETag and
# Last-Modified go upstream and a 304 makes it fresh again (REVALIDATED).
# A cacheable request goes upstream without the client's own If-* and
# Range fields. proxy_cache_background_update: the first request past
# expiry gets the old entry at once and the update goes on without it
# (over HTTP/1.1 its connection's next request waits for it; over HTTP/2
# only the stream; either way the update outlives a client that leaves). Two workers: the
# update mark is in the shared index.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Temp ();
use Test::More;
use Time::HiRes qw(sleep time);

# what the backend does next, by path prefix: a file the test writes
my $ctl = File::Temp->newdir;
sub mode {
    my ($name, $v) = @_;
    my $f = "$ctl/$name";
    if (defined $v) {
        open my $fh, '>', "$f.tmp" or die;
        print $fh $v;
        close $fh;
        rename "$f.tmp", $f or die;
        return $v;
    }
    open my $fh, '<', $f or return 'ok';
    local $/;
    return <$fh>;
}

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    my ($group) = $p =~ m{^/(\w+)/};
    my $m = mode($group // 'x');
    my %h = %{ $req->{headers} };
    my $seen = join ' ', map { "$_=" . ($h{$_} // '-') }
                         qw(if-none-match if-modified-since range);
    return undef if $m eq 'close';
    return Backend::response(500, "upstream 500") if $m eq '500';
    return Backend::response(502, "upstream 502") if $m eq '502';
    return Backend::response(404, "upstream 404") if $m eq '404';
    sleep 3 if $m eq 'hang';
    sleep 1 if $m eq 'slow';
    my $etag = $m =~ /^etag=(.*)/ ? "\"$1\"" : '"v1"';
    if ($group && $group eq 'r' && ($h{'if-none-match'} // '') eq $etag) {
        return "HTTP/1.1 304 Not Modified\r\nETag: $etag\r\n"
             . "Cache-Control: max-age=1\r\n\r\n";
    }
    return Backend::response(200, "body of $p #$req->{n} " . time,
                             'Cache-Control' => 'max-age=1',
                             'ETag' => $etag, 'X-Seen' => $seen,
                             'Last-Modified' =>
                                 'Sun, 06 Nov 1994 08:49:37 GMT');
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    server => { listen => '127.0.0.1:%%PORT%% http2' },
    locations => <<"L",
[location = /status]
handler = status

[location /s/]
handler = proxy
upstream = be
proxy_cache = one
read_timeout = 1s
proxy_cache_use_stale = error timeout invalid_header http_500 http_502
add_header = X-Cache-Status \$upstream_cache_status always

[location /n/]
handler = proxy
upstream = be
proxy_cache = one
add_header = X-Cache-Status \$upstream_cache_status always

[location /u/]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_use_stale = updating
add_header = X-Cache-Status \$upstream_cache_status always

[location /r/]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_revalidate = on
add_header = X-Cache-Status \$upstream_cache_status always

[location /b/]
handler = proxy
upstream = be
proxy_cache = one
proxy_cache_use_stale = updating
proxy_cache_background_update = on
add_header = X-Cache-Status \$upstream_cache_status always

[location /d/]
handler = proxy
pass = http://be2/s/
proxy_cache = one
proxy_cache_use_stale = error
add_header = X-Cache-Status \$upstream_cache_status always
L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\nkeepalive = 8\n\n"
           . "[upstream be2]\nserver = 127.0.0.1:$bp\n\n"
           . "[cache one]\npath = %%DIR%%/cache\nkeys_zone = 1m\n\n"));
$t->start;

sub get { my ($p, %h) = @_; return $t->get($p, %h) }
sub cs  { my ($r) = @_; return $r ? ($r->header('x-cache-status') // '') : 'none' }

# an entry, then past its max-age=1
sub expired_entry {
    my ($path) = @_;
    my $r = get($path);
    is(cs($r), 'MISS', "$path: stored (MISS)");
    my $until = time + 10;
    my $s;
    do { sleep 0.2; $s = get($path) } while (cs($s) eq 'HIT' && time < $until);
    return $r;
}

# --- the upstream fails: the expired entry answers ---------------------------

{
    mode('s', 'ok');
    my $first = expired_entry('/s/a');
    # the look above went upstream once expired: that fetch is the entry now
    my $cur = get('/s/a');
    my $body = $cur->body;
    for my $case (['500', 'a 500'], ['502', 'a 502'], ['close',
                  'a connection closed before the header'],
                  ['hang', 'a read time-out']) {
        my ($m, $what) = @$case;
        sleep 1.1;   # expired again
        mode('s', $m);
        $be->reset_log;
        my $r = get('/s/a', timeout => 10);
        is($r && $r->status, 200, "$what: 200 from the cache");
        is(cs($r), 'STALE', "$what: STALE");
        is($r && $r->body, $body, "$what: the expired entry's body");
        cmp_ok($be->requests, '>=', 1, "$what: the upstream was asked");
    }
    # the backend down: connections refused
    sleep 1.1;
    $be->stop;
    my $r = get('/s/a');
    is(cs($r), 'STALE', 'the backend down: STALE');
    is($r && $r->body, $body, '... with the entry');
    $be->start;
    mode('s', 'ok');
    $r = get('/s/a');
    is(cs($r), 'EXPIRED', 'the backend back: EXPIRED, fetched');
    isnt($r->body, $body, '... a new body');
    my $h = get('/s/a');
    is(cs($h), 'HIT', 'then a HIT');
    is($h->body, $r->body, '... of the new one');

    # no entry at all: the upstream's answer goes through
    mode('s', '502');
    $r = get('/s/never-stored');
    is($r->status, 502, 'nothing stored: the 502 goes through');
    mode('s', 'ok');
}

# a status the location does not name goes through
{
    mode('s', 'ok');
    expired_entry('/s/b');
    sleep 1.1;
    mode('s', '404');
    my $r = get('/s/b');
    is($r->status, 404, 'http_404 not named: the 404 goes through');
    is(cs($r), 'EXPIRED', '... EXPIRED');
    mode('s', 'ok');
}

# without proxy_cache_use_stale the error goes through
{
    mode('n', 'ok');
    expired_entry('/n/a');
    sleep 1.1;
    mode('n', '500');
    my $r = get('/n/a');
    is($r->status, 500, 'no use_stale: the 500 goes through');
    is(cs($r), 'EXPIRED', '... EXPIRED');
    mode('n', 'ok');
}

# error alone: a refused connection (an upstream of its own, down)
{
    mode('s', 'ok');
    my $r = get('/d/x');
    is(cs($r), 'MISS', 'use_stale error: stored');
    my $body = $r->body;
    sleep 1.2;
    mode('s', '500');
    $r = get('/d/x');
    is($r->status, 500, 'use_stale error: a 500 is not an error, it goes '
       . 'through');
    mode('s', 'ok');
}

# --- updating: the others get the old entry while one fetches -------------

{
    mode('u', 'ok');
    expired_entry('/u/a');
    my $old = get('/u/a');
    is(cs($old), 'HIT', 'updating: a fresh entry');
    sleep 1.1;
    mode('u', 'slow');   # the update takes a second
    $be->reset_log;
    my $c = $t->connect;
    $c->send("GET /u/a HTTP/1.1\r\nHost: localhost\r\n\r\n");
    # the updater's request reached the backend: the entry is marked
    FastdTest::wait_for(sub { $be->requests >= 1 }, 10, 0.02);
    my @answers = map { get('/u/a') } 1 .. 5;
    is(scalar(grep { cs($_) eq 'UPDATING' } @answers), 5,
       'while one request updates the entry, 5 others get UPDATING');
    is(scalar(grep { $_->body eq $old->body } @answers), 5,
       '... with the old entry');
    my $u = $c->read_response(timeout => 10);
    is($u && $u->{status}, 200, 'the updater: 200');
    is($be->requests, 1, 'one request went upstream');
    mode('u', 'ok');
    my $n = get('/u/a');
    is(cs($n), 'HIT', 'then a HIT');
    isnt($n->body, $old->body, '... of the new entry');
}

# --- background update: the first past expiry gets the old entry at once --

{
    mode('b', 'ok');
    my $first = get('/b/a');
    is(cs($first), 'MISS', 'background update: stored');
    sleep 1.1;
    mode('b', 'slow');   # the update takes a second
    $be->reset_log;
    my $c = $t->connect;
    my $t0 = time;
    $c->send("GET /b/a HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $r = $c->read_response(timeout => 10);
    my $took = time - $t0;
    is($r && $r->{status}, 200, 'expired: 200');
    is($r && $r->{headers}{'x-cache-status'}, 'STALE', '... STALE');
    is($r && $r->{body}, $first->body, '... the old entry');
    cmp_ok($took, '<', 0.9, sprintf('... at once (%.2f s), before the '
           . 'one-second update', $took));
    # the same connection's next request waits for the update (nginx's
    # way): it finds the new entry
    $c->send("GET /b/a HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $n = $c->read_response(timeout => 10);
    is($n && $n->{headers}{'x-cache-status'}, 'HIT',
       'the next request on that connection: a HIT');
    isnt($n && $n->{body}, $first->body, '... of the updated entry');
    is($be->requests, 1, 'one update went upstream');
    $c->close;
    mode('b', 'ok');
}

# an HTTP/1.1 client that closes at once (curl, most API clients) does
# not abandon the update, as with nginx: the update went on, and the
# next request finds the new entry (it was abandoned: every request past
# expiry went upstream again and the entry stayed old)
{
    mode('b', 'ok');
    my $first = get('/b/close');
    sleep 1.1;
    mode('b', 'slow');
    $be->reset_log;
    my $c = $t->connect;
    $c->send("GET /b/close HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $r = $c->read_response(timeout => 10);
    is($r && $r->{headers}{'x-cache-status'}, 'STALE',
       'HTTP/1.1, the client closes after its STALE answer');
    $c->close;
    mode('b', 'ok');
    ok(FastdTest::wait_for(sub { my $n = get('/b/close');
                                 cs($n) eq 'HIT' && $n->body ne $first->body },
                           10, 0.1),
       '... the update went on without it: a HIT of the new entry');
    is($be->requests, 1, '... after one request upstream');
}

# over HTTP/2 the stream ends at once; the update outlives the client
SKIP: {
    skip 'curl not installed', 4 unless -x '/usr/bin/curl';
    mode('b', 'ok');
    my $first = get('/b/h2');
    sleep 1.1;
    mode('b', 'slow');
    $be->reset_log;
    my $t0 = time;
    my $out = `curl -s --http2-prior-knowledge -H 'Host: localhost' -D - -o /dev/null --max-time 10 http://127.0.0.1:${\ $t->port}/b/h2`;
    my $took = time - $t0;
    like($out, qr{^HTTP/2 200}m, 'h2: expired: 200');
    like($out, qr{^x-cache-status: STALE}mi, '... STALE');
    cmp_ok($took, '<', 0.9, sprintf('... at once (%.2f s)', $took));
    ok(FastdTest::wait_for(sub { cs(get('/b/h2')) eq 'HIT' &&
                                 get('/b/h2')->body ne $first->body }, 10, 0.1),
       '... and the update, after curl left, is stored: a HIT of the new entry');
    mode('b', 'ok');
}

# --- revalidation ----------------------------------------------------------

{
    mode('r', 'ok');
    my $first = get('/r/a');
    is(cs($first), 'MISS', 'revalidate: stored');
    like($first->header('x-seen'), qr/if-none-match=- if-modified-since=- /,
         'the first fetch had no validators');
    sleep 1.1;
    $be->reset_log;
    my $r = get('/r/a');
    is(cs($r), 'REVALIDATED', 'expired, the upstream said 304: '
       . 'REVALIDATED');
    is($r->status, 200, '... 200 to the client');
    is($r->body, $first->body, '... the stored body');
    is($be->requests, 1, '... one request upstream');
    my $h = get('/r/a');
    is(cs($h), 'HIT', 'fresh again: HIT');
    # the client's own conditional, answered from the entry
    my $c304 = get('/r/a', 'If-None-Match' => '"v1"');
    is($c304->status, 304, 'a client If-None-Match on the entry: 304');
    sleep 1.1;
    mode('r', 'etag=v2');
    $r = get('/r/a');
    is(cs($r), 'EXPIRED', 'a changed ETag: EXPIRED, a 200 fetched');
    isnt($r->body, $first->body, '... the new body');
    like($r->header('x-seen'), qr/if-none-match="v1" if-modified-since=Sun, 06 Nov 1994/,
         '... the validators sent were the entry\'s');
    mode('r', 'ok');
}

# the client's conditionals and ranges stay home
{
    mode('s', 'ok');
    my $r = get('/s/cond', 'If-None-Match' => '"zzz"',
                'If-Modified-Since' => 'Sun, 06 Nov 1994 08:49:37 GMT',
                'Range' => 'bytes=0-3');
    is($r->status, 200, 'a conditional, ranged MISS: the whole 200');
    is($r->header('x-seen'), 'if-none-match=- if-modified-since=- range=-',
       '... the upstream saw none of If-None-Match, If-Modified-Since, '
       . 'Range');
    my $rr = get('/s/cond', 'Range' => 'bytes=0-3');
    is($rr->status, 206, 'then the range from the entry: 206');
    is($rr->body, 'body', '... its bytes');
}

# --- counters ----------------------------------------------------------------

{
    my $r = get('/status?format=prometheus');
    for my $c (qw(stale updating revalidated)) {
        like($r->body, qr/proxy_cache_${c}(?:_total)?\{[^\n]*cache="one"[^\n]* [1-9]/,
             "/status: proxy_cache_$c counted");
    }
}

$t->stop;
ok($t->no_alerts, 'no alerts');
done_testing;
