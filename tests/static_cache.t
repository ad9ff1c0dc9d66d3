#!/usr/bin/perl
# static: the open file cache (open_file_cache, open_file_cache_valid).
# A cached descriptor is used again (the worker holds it between requests),
# but every answer is that of the file now: changed in place, replaced by
# rename, deleted; what fstat() cannot see (a renamed directory) ends with
# open_file_cache_valid; expired descriptors are closed; a response being
# sent keeps its descriptor when the entry is evicted or replaced; off and
# offloaded handlers keep nothing; bad values are config errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use IO::Socket::INET;
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Test::More;
use Time::HiRes qw(time);

my $locations = <<'EOF';
[location /c/]
root = %%DIR%%/www
open_file_cache_valid = 60s

[location /short/]
root = %%DIR%%/www
open_file_cache_valid = 300ms

[location /one/]
root = %%DIR%%/www
open_file_cache = 1

[location /off/]
root = %%DIR%%/www
open_file_cache = 0
open_file_cache_valid = 60s

[location /pool/]
root = %%DIR%%/www
offload = on
open_file_cache_valid = 60s

EOF

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http      => { inline_completions => 'on' },
    locations => $locations,
));
my $dir = $t->dir;
my $www = "$dir/www";
make_path(map { "$www/$_" } qw(c short short/d one off pool));

# Descriptors the worker holds on files under $www (path => count).
sub held {
    my ($worker) = @_;
    my %h;
    $h{$_}++ for grep { index($_, $www) == 0 }
                 values %{ FastdTest::fd_links($worker) };
    return \%h;
}

FastdTest::spew("$www/c/a.txt", "first\n");
$t->start;
my ($worker) = $t->workers;
ok($worker, 'worker running');

# --- a hit is the same descriptor, and the answer is the file's now -------
my $r = $t->get('/c/a.txt');
is($r && $r->body, "first\n", 'first answer');
my $etag1 = $r && $r->header('etag');
is(held($worker)->{"$www/c/a.txt"}, 1,
   'the worker keeps the descriptor after the response');
for (1 .. 3) { $t->get('/c/a.txt') }
is(held($worker)->{"$www/c/a.txt"}, 1, 'answers from it: still one descriptor');

FastdTest::spew("$www/c/a.txt", "changed in place, longer\n");
$r = $t->get('/c/a.txt');
is($r && $r->body, "changed in place, longer\n", 'a file rewritten in place: new body');
is($r && $r->header('content-length'), 25, '... and its length');
isnt($r && $r->header('etag'), $etag1, '... and a new ETag');

FastdTest::spew("$www/c/a.txt.new", "renamed over\n");
rename("$www/c/a.txt.new", "$www/c/a.txt") or die "rename: $!";
$r = $t->get('/c/a.txt');
is($r && $r->body, "renamed over\n", 'a file replaced by rename: the new one at once');
ok(FastdTest::wait_for(sub { !grep(/deleted/, keys %{ held($worker) }) },
                       3, 0.01),
   'the replaced inode is not held');

unlink "$www/c/a.txt" or die "unlink: $!";
$r = $t->get('/c/a.txt');
is($r && $r->status, 404, 'a deleted file: 404 at once');
FastdTest::spew("$www/c/a.txt", "back\n");
$r = $t->get('/c/a.txt');
is($r && $r->body, "back\n", 'created again: served');

# conditional requests see the fresh stat too
$r = $t->get('/c/a.txt');
my $etag = $r && $r->header('etag');
$r = $t->get('/c/a.txt', 'If-None-Match' => $etag);
is($r && $r->status, 304, 'If-None-Match with the current ETag: 304');
FastdTest::spew("$www/c/a.txt", "back again\n");
$r = $t->get('/c/a.txt', 'If-None-Match' => $etag);
is($r && $r->status, 200, 'after a change the old ETag no longer matches');

# --- what fstat cannot see ends with open_file_cache_valid ----------------
FastdTest::spew("$www/short/d/f.txt", "in d\n");
$r = $t->get('/short/d/f.txt');
is($r && $r->body, "in d\n", 'served from a directory');
rename("$www/short/d", "$www/short/e") or die "rename: $!";
my $gone = FastdTest::wait_for(sub {
    my $x = $t->get('/short/d/f.txt');
    $x && $x->status == 404;
}, 10, 0.05);
ok($gone, 'a renamed directory: 404 once the entry expired (300ms)');
$r = $t->get('/short/e/f.txt');
is($r && $r->body, "in d\n", 'and the file is served at its new path');
unlink "$www/short/e/f.txt";
ok(FastdTest::wait_for(sub { !grep(/short/, keys %{ held($worker) }) }, 10, 0.05),
   'expired descriptors are closed by the timer (no deleted file held)');

# --- open_file_cache = 0 and offloaded handlers keep nothing --------------
FastdTest::spew("$www/off/x.txt", "off\n");
FastdTest::spew("$www/pool/x.txt", "pool\n");
is($t->get('/off/x.txt')->body, "off\n", 'open_file_cache = 0 serves');
is($t->get('/pool/x.txt')->body, "pool\n", 'an offloaded handler serves');
# (a request's own descriptor closes as the request ends, just after the
# response left: wait for that, not for the cache's)
ok(FastdTest::wait_for(sub { !held($worker)->{"$www/off/x.txt"} }, 3, 0.01),
   'open_file_cache = 0: no descriptor kept');
ok(FastdTest::wait_for(sub { !held($worker)->{"$www/pool/x.txt"} }, 3, 0.01),
   'offloaded handler: no descriptor kept');

# --- an evicted or replaced entry stays open for the response using it ----
my $size = 16 * 1024 * 1024;
my $old = join '', map { pack('N', $_) } 0 .. $size / 4 - 1;
FastdTest::spew("$www/one/big.bin", $old);
FastdTest::spew("$www/one/small.txt", "small\n");

my $s = IO::Socket::INET->new(Proto => 'tcp') or die "socket: $!";
setsockopt($s, SOL_SOCKET, SO_RCVBUF, 4096);
$s->connect(Socket::pack_sockaddr_in($t->port, Socket::inet_aton('127.0.0.1')))
    or die "connect: $!";
binmode $s;
print {$s} "GET /one/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n";
$s->flush;
my $got = '';
sysread($s, $got, 4096);
ok(length $got, 'a slow client started reading 16 MB');

# evict it (capacity 1), then replace the file: the response keeps its inode
is($t->get('/one/small.txt')->body, "small\n", 'another file evicts the entry');
FastdTest::spew("$www/one/big.bin.new", 'x' x 100);
rename("$www/one/big.bin.new", "$www/one/big.bin") or die "rename: $!";
is($t->get('/one/big.bin')->body, 'x' x 100, 'the new file is served to others');

my $deadline = time + 60;
while (time < $deadline) {
    my $n = sysread($s, my $chunk, 1 << 20);
    last unless $n;
    $got .= $chunk;
    last if length($got) >= $size + 100;
}
close $s;
my ($head, $body) = split /\r\n\r\n/, $got, 2;
like($head, qr/\r\nContent-Length: $size\b/, 'the slow response: its length');
ok(defined $body && length($body) == $size && $body eq $old,
   'the slow response got the old file whole, after eviction and rename');

# --- bad values -------------------------------------------------------------
for my $bad (['open_file_cache = -1', qr/non-negative integer/],
             ['open_file_cache = lots', qr/non-negative integer/],
             ['open_file_cache = 100000', qr/at most 65536/],
             ['open_file_cache_valid = soon', qr/open_file_cache_valid/]) {
    my $conf = $t->write_conf(FastdTest::base_conf(
        locations => "[location /z/]\nroot = %%DIR%%/www\n$bad->[0]\n"),
        'bad.conf');
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $conf);
    isnt($code, 0, "rejected: $bad->[0]");
    like($out, $bad->[1], '... with the reason');
    like($out, qr/bad\.conf:\d+/, '... naming file:line');
}

$t->no_alerts;
done_testing;
