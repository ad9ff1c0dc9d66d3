#!/usr/bin/perl
# [cluster] and limit_req's store = redis against a real redis-server of
# the test's own: two fastd instances share one limit (burst + 1 through
# across both, not twice that); the keys are the zone's and expire once
# drained; a Redis that lost the script (SCRIPT FLUSH) is given it again;
# a Redis that is slow (DEBUG SLEEP), killed or restarted: each request
# answered by on_error (local, allow, deny) within a bound far under the
# outage, one log line per change, the figures in /status; the shared
# limit back once Redis is; bad [cluster] lines as errors naming
# file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Redis;
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => Redis::missing() if Redis::missing();

my $t1 = FastdTest->new;
my $redis = Redis->new(dir => $t1->dir) or BAIL_OUT('redis-server did not start');
my $t2 = FastdTest->new;

sub conf {
    my ($url) = @_;
    return FastdTest::base_conf(
        main => { workers => 2 },
        locations => <<"L",
[location /shared]
handler = plaintext
limit_req = shared burst=3 nodelay

[location /local]
handler = plaintext
limit_req = onlocal burst=2 nodelay

[location /allow]
handler = plaintext
limit_req = onallow nodelay

[location /deny]
handler = plaintext
limit_req = ondeny nodelay
limit_req_status = 429

[location /wait]
handler = plaintext
limit_req = waits burst=2

[location = /status]
handler = status
L
        extra => <<"E");
[cluster]
redis = $url
timeout = 200ms

[limit_req shared]
rate = 1r/m
store = redis

[limit_req onlocal]
rate = 1r/m
store = redis
on_error = local

[limit_req onallow]
rate = 1r/m
store = redis
on_error = allow

[limit_req ondeny]
rate = 1r/m
store = redis
on_error = deny

[limit_req waits]
rate = 5r/s
store = redis
E
}

$t1->write_conf(conf($redis->url));
$t2->write_conf(conf($redis->url));
$t1->start;
$t2->start;

sub metric {
    my ($t, $name) = @_;
    my $r = $t->get('/status?format=prometheus') or return undef;
    my ($sum, $body) = (undef, $r->body // '');
    while ($body =~ /^fastd_\Q$name\E(?:_total)?(?:\{[^}]*\})? (\d+)/mg) {
        $sum += $1;
    }
    return $sum;
}

ok(FastdTest::wait_for(sub { (metric($t1, 'redis_up') // 0) == 2 &&
                             (metric($t2, 'redis_up') // 0) == 2 }, 10),
   'both instances\' workers connect (redis_up 2 each)');

# --- one limit across two instances -------------------------------------
my @s;
for my $i (1 .. 10) {
    my $r = ($i % 2 ? $t1 : $t2)->get('/shared');
    push @s, $r ? $r->status : 0;
}
is(scalar(grep { $_ == 200 } @s), 4,
   "burst=3 at 1r/m across two instances: 4 through, not 8 (@s)");
is(metric($t1, 'limit_req_fallbacks') // 0, 0, 'no fallback taken');

my @keys = grep { length } split /\n/, $redis->cli('KEYS', 'fastd:limit_req:*');
is_deeply([map { /^fastd:limit_req:(\w+):/ ? $1 : $_ } @keys], ['shared'],
          'one key, named for its zone');
# (the key holds the address's 4 bytes, a NUL among them: asked in Lua)
my $ttl = $redis->cli('EVAL', "return redis.call('PTTL', "
    . "redis.call('KEYS', 'fastd:limit_req:shared:*')[1])", '0') // -1;
chomp $ttl;
ok($ttl > 0 && $ttl <= 5 * 60 * 1000, "it expires once drained ($ttl ms)");

# the delay: within the burst a request waits for the rate, in Redis's
# count (5r/s: the third of three at once waits 2 x 200 ms)
my $t0 = time;
my @w = map { $_->status } grep { $_ } map { $t1->get('/wait') } 1 .. 3;
my $took = time - $t0;
is("@w", '200 200 200', 'within the burst: served');
ok($took >= 0.3, sprintf('and waited for the rate (%.2f s)', $took));
ok(FastdTest::wait_for(sub {
       !grep { /waits/ } split /\n/, $redis->cli('KEYS', '*waits*') }, 5),
   'an idle key vanishes');

# the script gone (a restart, SCRIPT FLUSH, a failover): sent again
$redis->cli('SCRIPT', 'FLUSH');
$redis->cli('FLUSHALL');
@s = map { $_->status } grep { $_ } map { $t2->get('/shared') } 1 .. 5;
is("@s", '200 200 200 200 503', 'NOSCRIPT: the script is sent whole, the '
   . 'limit holds');
is(metric($t2, 'limit_req_fallbacks') // 0, 0, 'and no fallback taken');

# --- a slow Redis: no request waits for it past the timeout ---------------
my $sleeper = fork // die;
if (!$sleeper) {
    $redis->cli('DEBUG', 'SLEEP', '6');
    POSIX::_exit(0);
}
# Redis is asleep once a request is answered by the timeout (a fallback)
my $fb0 = metric($t1, 'limit_req_fallbacks') // 0;
ok(FastdTest::wait_for(sub {
    $t1->get('/allow');
    (metric($t1, 'limit_req_fallbacks') // 0) > $fb0
}, 5, 0.01), 'Redis asleep (DEBUG SLEEP): a request answered by on_error');
my ($max, $n, @st) = (0, 0);
for (1 .. 6) {
    my $t = time;
    my $r = $t1->get('/allow');
    my $d = time - $t;
    $max = $d if $d > $max;
    push @st, $r ? $r->status : 0;
}
waitpid($sleeper, 0);
is("@st", '200 200 200 200 200 200', 'a Redis asleep: on_error = allow lets '
   . 'each through');
ok($max < 1.2, sprintf('none waited for Redis\'s 6 s (the longest %.3f s, '
   . 'timeout 200 ms)', $max));
ok((metric($t1, 'redis_timeouts') // 0) >= 1, 'redis_timeouts counted');

# --- Redis killed: each request answered by its policy --------------------
$redis->kill9;
ok(FastdTest::wait_for(sub { (metric($t1, 'redis_up') // 1) == 0 }, 10),
   'redis_up goes to 0');
my %got;
for my $loc (qw(local allow deny)) {
    my ($max, @st) = (0);
    for (1 .. 5) {
        my $t = time;
        my $r = $t1->get("/$loc");
        my $d = time - $t;
        $max = $d if $d > $max;
        push @st, $r ? $r->status : 0;
    }
    $got{$loc} = "@st";
    ok($max < 1, sprintf("%s: answered without a wait (the longest "
       . "%.3f s)", $loc, $max));
}
like($got{local}, qr/^(200 ){1,4}\d+/, "on_error = local: the local table "
     . "limits ($got{local})");
ok(scalar(grep { $_ == 200 } split / /, $got{local}) <= 2 * 3,
   'local: at most each worker\'s burst');
is($got{allow}, '200 200 200 200 200', 'on_error = allow: all through');
is($got{deny}, '429 429 429 429 429', 'on_error = deny: limit_req_status');
ok((metric($t1, 'limit_req_fallbacks') // 0) >= 15, 'fallbacks counted');
ok((metric($t1, 'redis_refused') // 0) >= 1,
   'while down, commands are refused at once (redis_refused)');
my @down = $t1->error_log =~ /redis \S+: down/g;
ok(@down >= 1 && @down <= 4, scalar(@down) . ' "down" lines for 2 workers\' '
   . 'connections and 15+ requests: one per change, not per request');

# --- back -----------------------------------------------------------------
$redis->start or BAIL_OUT('redis-server did not start again');
ok(FastdTest::wait_for(sub { (metric($t1, 'redis_up') // 0) == 2 &&
                             (metric($t2, 'redis_up') // 0) == 2 }, 10),
   'reconnected within seconds');
like($t1->error_log, qr/redis \S+: up/, 'and said so');
@s = ();
for my $i (1 .. 10) {
    my $r = ($i % 2 ? $t1 : $t2)->get('/shared');
    push @s, $r ? $r->status : 0;
}
is(scalar(grep { $_ == 200 } @s), 4, "the shared limit is back (@s)")
    or diag('fallbacks ' . (metric($t1, 'limit_req_fallbacks') // 0) . ' '
            . (metric($t2, 'limit_req_fallbacks') // 0) . ' timeouts '
            . (metric($t1, 'redis_timeouts') // 0) . ' errors '
            . (metric($t1, 'redis_errors') // 0) . ' ' . $t1->error_log);

$t1->no_alerts;
$t2->no_alerts;
$t1->stop;
$t2->stop;

# --- bad lines --------------------------------------------------------------
my $dir = $t1->dir;
for my $bad (
    ["[limit_req z]\nrate = 1r/s\nstore = redis\n", qr/^\[limit_req z\]/,
     qr/store = redis needs a \[cluster\]/],
    ["[cluster]\ntimeout = 10ms\n", qr/^\[cluster\]/, qr/has no "redis"/],
    ["[cluster]\nredis = rediss://h:1/0\n", qr/^redis = /, qr/no TLS/],
    ["[cluster]\nredis = redis://127.0.0.1:99999/0\n", qr/^redis = /,
     qr/bad port/],
    ["[cluster]\nredis = redis://127.0.0.1:6379/x\n", qr/^redis = /,
     qr/bad database/],
    ["[cluster x]\nredis = redis://127.0.0.1:6379/0\n", qr/^\[cluster x\]/,
     qr/takes no name/],
    ["[cluster]\nredis = redis://127.0.0.1/0\n[cluster]\nredis = unix:/x\n",
     qr/^\[cluster\]$/, qr/duplicate \[cluster\]|\[cluster\]/],
    ["[limit_req z]\nrate = 1r/s\non_error = maybe\n", qr/^on_error = /,
     qr/on_error/]) {
    my ($extra, $line_re, $re) = @$bad;
    (my $text = FastdTest::base_conf(extra => $extra))
        =~ s/%%(\w+)%%/$1 eq 'PORT' ? $t1->port : $dir/ge;
    my $file = "$dir/bad.conf";
    FastdTest::spew($file, $text);
    my $line = FastdTest::line_of($text, $line_re);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re && $out =~ /bad\.conf:\d+\b/,
       "bad: " . (split /\n/, $extra)[-1]) or diag($out);
}

done_testing();
