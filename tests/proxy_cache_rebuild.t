#!/usr/bin/perl
# proxy_cache after a restart: the index is rebuilt from the files on disk
# by the loader while fastd serves. A few entries are stored; fastd stops
# gracefully; one file is cut short and temporary files are left as a
# crash would (a dead writer's, and one of a live process, which stays);
# a new fastd on the same path serves the stored entries as HIT without
# the backend, the cut one as a MISS (and stores it again), an entry past
# its freshness as EXPIRED. /status has the index's gauges; a reload does
# not walk the disk again; the dashboard shows the cache.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use JSON::PP;
use Test::More;
use File::Find ();
use Time::HiRes qw(sleep time);

my $be = Backend->new(handler => sub {
    my ($req) = @_;
    my $p = $req->{path};
    my $body = "body of $p #$req->{n}";
    return Backend::response(200, $body, 'Cache-Control' => 'max-age=1')
        if $p =~ m{^/short/};
    return Backend::response(200, $body, 'Cache-Control' => 'max-age=600');
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    locations => <<"L",
[location = /status]
handler = status

[location = /status.html]
root = %%HTML%%

[location /]
handler = proxy
upstream = be
proxy_cache = one
add_header = X-Cache-Status \$upstream_cache_status always

L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\nkeepalive = 4\n\n"
           . "[cache one]\npath = %%DIR%%/cache\nlevels = 1:2\n"
           . "keys_zone = 1m\ninactive = 10m\n\n"));
$t->start;
my $cdir = $t->dir . '/cache';

sub cs { my ($r) = @_; return $r ? ($r->header('x-cache-status') // '') : 'none' }

# every file under the cache: { path => key } (undef key: not an entry)
sub files {
    my %f;
    File::Find::find({ no_chdir => 1, wanted => sub {
        return unless -f $_;
        my $d = FastdTest::slurp($_) // '';
        my $key;
        if (length $d >= 40) {
            my ($magic, $st, $kl) = unpack('L L L', $d);
            $key = substr($d, 40, $kl) if $magic == 0x32434446;
        }
        $f{$_} = $key;
    } }, $cdir);
    return \%f;
}
sub file_of {
    my ($uri) = @_;
    my $f = files();
    my @p = grep { defined $f->{$_} && $f->{$_} =~ m{\Q$uri\E$} } keys %$f;
    return $p[0];
}
# a whole entry: its size is the header's sum
sub whole {
    my ($p) = @_;
    my $d = FastdTest::slurp($p) // return 0;
    return 0 if length $d < 40;
    my ($magic, $st, $kl, $fl, $bl) = unpack('L L L L Q', $d);
    return $magic == 0x32434446 && length $d == 40 + $kl + $fl + $bl;
}
# /status JSON: the cache's entry in modules.proxy
sub cache_status {
    my $r = $t->get('/status');
    return undef unless $r && $r->status == 200;
    my $j = eval { decode_json($r->body) } or return undef;
    my ($e) = grep { ($_->{cache} // '') eq 'one' }
              @{ $j->{modules}{proxy} // [] };
    return $e;
}

# --- fill the cache ----------------------------------------------------------

my @urls = ('/c/alpha', '/c/beta', '/c/cut');
for my $u (@urls, '/short/x') {
    is(cs($t->get($u)), 'MISS', "$u: MISS");
}
my $stored_at = time;
for my $u (@urls) {
    is(cs($t->get($u)), 'HIT', "$u: then HIT");
}
my %body = map { $_ => $t->get($_)->body } @urls;
my $cut = file_of('/c/cut');
ok($cut && whole($cut), 'the file of /c/cut is a whole entry');
my $n_before = $be->requests;
is($n_before, 4, 'the backend saw one request per URL');

ok($t->signal('QUIT'), 'graceful stop');
ok(defined $t->wait_exit(20), 'fastd exited');

# what a crash and a careless hand leave
truncate($cut, (-s $cut) - 3) or die "truncate: $!";
my $alpha = file_of('/c/alpha');
my $dead_tmp = "$alpha.99999999.1.tmp";
my $live_tmp = "$alpha.$$.1.tmp";
FastdTest::spew($_, 'half an entry') for $dead_tmp, $live_tmp;

# /short/x must be past its max-age=1 when asked again: wait out the
# rest of it (a bound, not a guess: the file says when it expires)
my $left = $stored_at + 2.5 - time;
sleep $left if $left > 0;

# --- a new fastd on the same path -------------------------------------------

$t->start;
my $st;
ok(FastdTest::wait_for(sub {
    $st = cache_status();
    return $st && $st->{cache_loaded} ? 1 : 0;
}, 10, 0.05), '/status: the loader finished (cache_loaded 1) within 10 s')
    or diag(explain($st));
is($st && $st->{cache_entries}, 3,
   '/status: 3 entries indexed (alpha, beta, short; the cut one is not)');
my $bytes = 0;
$bytes += -s $_ for grep { whole($_) } keys %{ files() };
is($st && $st->{cache_bytes}, $bytes, '/status: cache_bytes is their files\' size');

for my $u ('/c/alpha', '/c/beta') {
    my $r = $t->get($u);
    is(cs($r), 'HIT', "$u: HIT after the restart");
    is($r->body, $body{$u}, "$u: the stored body");
}
is($be->requests, $n_before, 'the backend was not asked for them');

ok(!-e $cut, 'the cut file was removed by the loader');
my $r = $t->get('/c/cut');
is(cs($r), 'MISS', '/c/cut (cut short on disk): MISS, not served');
like($r->body, qr{^body of /c/cut #\d+$}, '... a whole body');
is($be->requests, $n_before + 1, '... from the backend');
my $cut2 = file_of('/c/cut');
ok($cut2 && whole($cut2), '... and its file is whole again');
is(cs($t->get('/c/cut')), 'HIT', '/c/cut: then HIT');

is(cs($t->get('/short/x')), 'EXPIRED', '/short/x, stale on disk: EXPIRED, not HIT');

ok(!-e $dead_tmp, 'the temporary file of a dead pid is gone');
ok(-e $live_tmp, 'the one of a live process is left alone');
unlink $live_tmp;

like($t->error_log, qr/cache "one": "[^"]*" is not a whole entry: removed/,
     'the cut file\'s removal is logged');
like($t->error_log, qr/cache "one": 3 entries \(\d+ bytes\) indexed from disk/,
     'the load is logged once done');

# --- a reload keeps the index: no second walk --------------------------------

my %old = map { $_ => 1 } $t->workers;
my $log_at = length $t->error_log;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    my @w = $t->workers;
    return @w == 2 && !grep { $old{$_} } @w;
}, 20), 'reload: two new workers, the old ones gone');
is(cs($t->get('/c/beta')), 'HIT', 'after the reload: HIT');
$st = cache_status();
ok($st && $st->{cache_loaded}, 'after the reload: still loaded');
my $loads = () = substr($t->error_log, $log_at)
                 =~ /cache "one": \d+ entries .* indexed from disk/g;
is($loads, 0, 'the disk was not walked again (the reload kept the index)');

# --- the dashboard's Cache panel ---------------------------------------------

SKIP: {
    skip 'chromium is not installed', 3 unless FastdTest::chromium();
    my $dom = FastdTest::browse($t->dir, '--virtual-time-budget=4000',
        '--dump-dom', 'http://127.0.0.1:' . $t->port . '/status.html');
    my ($panel) = $dom =~ m{(<section[^>]*id="cache-panel".*?</section>)}s;
    ok($panel && $panel !~ /<section[^>]*hidden/,
       'dashboard: the Cache panel is shown')
        or diag(substr($dom, 0, 2000));
    like($panel // '', qr{<td>one</td><td>\d+\.\d%</td><td class="n">[1-9]},
         'dashboard: cache "one" with its hit ratio and hits');
    like($panel // '', qr{<td>loaded</td>}, 'dashboard: its index is loaded');
}

$t->no_alerts;
$t->stop;
done_testing();
