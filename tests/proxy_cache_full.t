#!/usr/bin/perl
# proxy_cache on a disk that fills up: the cache's path is a 256 KB tmpfs
# (mounted by the test; skipped where mounting is not allowed), responses
# of 40 KB fill it. Every client still gets its whole response; what could
# not be written is counted (store_failed) and removed, never served half;
# what was stored before keeps answering; a [warn] at most once a second,
# no alert.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Temp ();
use Test::More;

plan skip_all => 'mounting a tmpfs needs root' if $> != 0;
my $mnt = File::Temp->newdir;
system("mount -t tmpfs -o size=256k tmpfs $mnt 2>/dev/null") == 0
    or plan skip_all => 'cannot mount a tmpfs here';
my $mounted = 1;
END { system("umount $mnt 2>/dev/null") if $mounted }

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my ($n) = $req->{path} =~ m{/(\d+)$};
    $n //= 0;
    return Backend::response(200, sprintf("%06d", $n) x (40 * 1024 / 6),
                             'Cache-Control' => 'max-age=600');
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    locations => <<"L",
[location = /status]
handler = status

[location /]
handler = proxy
upstream = be
proxy_cache = full
add_header = X-Cache-Status \$upstream_cache_status always
L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\n\n"
           . "[cache full]\npath = $mnt/cache\nkeys_zone = 64k\n\n"));
$t->start;

sub cs { my ($r) = @_; return $r ? ($r->header('x-cache-status') // '') : 'none' }
my $want = sub { sprintf("%06d", $_[0]) x (40 * 1024 / 6) };

my $whole = 1;
for my $i (1 .. 12) {
    my $r = $t->get("/big/$i");
    $whole &&= $r && $r->status == 200 && $r->body eq $want->($i);
}
ok($whole, '12 responses of 40 KB into 256 KB: every one whole');

my @tmp = grep { /\.tmp$/ } glob("$mnt/cache/*");
is(scalar(@tmp), 0, 'no temporary file left behind');
my ($hits, $misses, $good) = (0, 0, 1);
for my $i (1 .. 12) {
    my $r = $t->get("/big/$i");
    $good &&= $r && $r->status == 200 && $r->body eq $want->($i);
    $hits++ if cs($r) eq 'HIT';
    $misses++ if cs($r) eq 'MISS';
}
ok($good, 'asked again: every one whole');
cmp_ok($hits, '>=', 1, "what was stored answers ($hits HITs)");
cmp_ok($misses, '>=', 1, "what did not fit goes upstream ($misses MISSes)");
for my $f (glob("$mnt/cache/*")) {
    next if $f =~ /\.tmp$/;
    cmp_ok(-s $f, '>', 40 * 1024, "stored file " . substr($f, -8)
           . " is whole");
}

my $st = $t->get('/status?format=prometheus');
like($st->body, qr/proxy_cache_store_failed(?:_total)?\{[^\n]*cache="full"[^\n]* [1-9]/,
     'store_failed counted');
like($t->error_log, qr/\[warn\].*cache "full": write\(\)|\[warn\].*cache "full"/,
     'the failed writes are a [warn]');
$t->stop;
ok($t->no_alerts, 'no alerts');
done_testing;
