#!/usr/bin/perl
# A fleet: three fastd instances in three network namespaces, a real
# redis-server in a fourth, all on a bridge the test makes (as root) and
# always removes; the clients (wrk) in the root namespace. Checked:
#   - a TLS 1.3 session made on A resumes on B and C (openssl s_client
#     -sess_out / -sess_in: "Reused"; the same ssl_session_ticket_key
#     file), and still after a rotation of the key files and reloads;
#     then with ssl_session_ticket_keys = redis (no files: the pair kept
#     in Redis);
#   - a 20 r/s limit_req (store = redis) with 3 clients hammering the 3
#     instances admits 20 r/s in total, within 10%;
#   - redis-server killed under load: every request answered (on_error =
#     local) without waiting for it, no socket errors, no hang; restarted:
#     the instances reconnect within seconds and the limit is shared again;
#   - the Redis namespace's link cut (a partition), then restored: the same;
#   - one instance reloaded, then one killed, while the others serve: the
#     shared limit holds (nothing shared lived in the instance).
# Bounded: each load is a few seconds; each wait has a deadline.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Redis;
use TLS;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => 'needs root (network namespaces)' if $> != 0;
plan skip_all => Redis::missing() if Redis::missing();
plan skip_all => 'needs ip (iproute2) and wrk'
    unless -x '/usr/bin/wrk' && (-x '/usr/sbin/ip' || -x '/sbin/ip'
                                 || -x '/usr/bin/ip' || -x '/bin/ip');

# names and a subnet of this run's own (two runs side by side differ)
my $id = $$ % 10000;
my $net = "10.233." . ($$ % 250 + 1);
my $br = "fdbr$id";
my @ns = map { "fd$id$_" } qw(a b c r);
my %ip = (map({ $ns[$_] => "$net." . ($_ + 2) } 0 .. 3), root => "$net.1");
my @made;   # what to remove, in reverse order

sub sh {
    my $cmd = join ' ', @_;
    my $out = `$cmd 2>&1`;
    return $? == 0 ? 1 : do { diag("$cmd: $out"); 0 };
}

sub cleanup {
    for my $what (reverse @made) {
        my ($kind, $name) = @$what;
        system("ip netns del $name 2>/dev/null") if $kind eq 'ns';
        system("ip link del $name 2>/dev/null") if $kind eq 'link';
    }
    @made = ();
}
END { cleanup() }
$SIG{$_} = sub { cleanup(); exit 1 } for qw(INT TERM HUP);

sub setup {
    sh("ip link add $br type bridge") or return 0;
    push @made, [link => $br];
    sh("ip addr add $ip{root}/24 dev $br") && sh("ip link set $br up")
        or return 0;
    for my $i (0 .. $#ns) {
        my $n = $ns[$i];
        sh("ip netns add $n") or return 0;
        push @made, [ns => $n];
        my $v = "fdv$id$i";
        sh("ip link add $v type veth peer name eth0 netns $n") or return 0;
        push @made, [link => $v];
        sh("ip link set $v master $br") && sh("ip link set $v up")
            && sh("ip netns exec $n ip addr add $ip{$n}/24 dev eth0")
            && sh("ip netns exec $n ip link set eth0 up")
            && sh("ip netns exec $n ip link set lo up") or return 0;
    }
    return 1;
}

setup() or plan skip_all => 'cannot make network namespaces here';

my $redis_ns = $ns[3];
my $tmp = FastdTest->new;    # the directory for Redis's files
my $redis = Redis->new(dir => $tmp->dir, host => $ip{$redis_ns},
                       port => 6379, netns => $redis_ns)
    or BAIL_OUT('redis-server did not start in its namespace');
ok(1, "redis-server in $redis_ns at $ip{$redis_ns}:6379");

my $pki = TLS->new($tmp->dir);
my $cert = $pki->server('a.test');
my @tk = map { my $f = $tmp->dir . "/ticket$_.key";
               system("openssl rand 80 > '$f'") == 0 or die; $f } 1 .. 2;

sub fleet_conf {
    my ($i, $port, $tport, $keys) = @_;
    return FastdTest::base_conf(
        main => { workers => 1 },
        http => $keys eq 'redis' ? { ssl_session_ticket_keys => 'redis' }
                                 : { ssl_session_ticket_key => $keys },
        server => { listen => "$ip{$ns[$i]}:$port" },
        locations => <<"L",
[location /api]
handler = plaintext
limit_req = fleet nodelay

[location = /status]
handler = status

[server]
listen = $ip{$ns[$i]}:$tport ssl
server_name = a.test
ssl_certificate = $cert->{crt}
ssl_certificate_key = $cert->{key}

[location /plaintext]
handler = plaintext
L
        extra => <<"E");
[cluster]
redis = redis://$ip{$redis_ns}:6379/0
timeout = 200ms

[limit_req fleet]
rate = 20r/s
store = redis
on_error = local
E
}

my @f;
for my $i (0 .. 2) {
    my $t = FastdTest->new;
    my $port = $t->port;
    $t->{tport} = $t->another_port;
    $t->{i} = $i;
    $t->write_conf(fleet_conf($i, $port, $t->{tport}, $tk[0]));
    $t->start({ wrap => ['ip', 'netns', 'exec', $ns[$i]], nowait => 1 });
    $t->{addr} = "$ip{$ns[$i]}:$port";
    $t->{taddr} = "$ip{$ns[$i]}:$t->{tport}";
    push @f, $t;
}

sub up_at {
    my ($addr) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => $addr, Timeout => 1);
    return $s ? (close($s), 1)[1] : 0;
}
for my $t (@f) {
    ok(FastdTest::wait_for(sub { up_at($t->{addr}) }, 15),
       "fastd listening at $t->{addr}") or BAIL_OUT('an instance did not start');
}

sub metric {
    my ($t, $name) = @_;
    my $body = `curl -s -m 2 http://$t->{addr}/status?format=prometheus`;
    my $sum;
    $sum += $1 while $body =~ /^fastd_\Q$name\E(?:_total)?(?:\{[^}]*\})? (\d+)/mg;
    return $sum;
}

sub all_up {
    my @t = @_;
    return FastdTest::wait_for(sub {
        !grep { (metric($_, 'redis_up') // 0) != 1 } @t }, 15, 0.1);
}
ok(all_up(@f), 'each instance\'s worker is connected to Redis');

# --- TLS sessions resume across the fleet ------------------------------
# one s_client connection: "New" or "Reused" (a request with Connection:
# close, so the TLS 1.3 ticket that follows the handshake is read)
sub tls {
    my ($t, @args) = @_;
    my $out = `printf 'GET /plaintext HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n' | timeout 10 openssl s_client -connect $t->{taddr} -servername a.test -tls1_3 -ign_eof -CAfile $pki->{dir}/ca.crt @args 2>&1`;
    return $out =~ /^(New|Reused), TLSv1\.3/m ? $1 : "none: $out";
}
for my $t (@f) {
    FastdTest::wait_for(sub { up_at($t->{taddr}) }, 15);
}
my $sess = $tmp->dir . '/sess.pem';
is(tls($f[0], '-sess_out', $sess), 'New', 'TLS 1.3: a new session on A');
is(tls($f[1], '-sess_in', $sess), 'Reused', 'resumed on B');
is(tls($f[2], '-sess_in', $sess), 'Reused', 'and on C');

# a rotation: every instance takes the new file, the old still decrypts
for my $t (@f) {
    my ($port) = $t->{addr} =~ /:(\d+)$/;
    $t->write_conf(fleet_conf($t->{i}, $port, $t->{tport}, "$tk[1] $tk[0]"));
    my @old = $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub {
        my %o = map { $_ => 1 } @old;
        my @w = $t->workers;
        @w == 1 && !grep { $o{$_} } @w;
    }, 15), 'reloaded with the next ticket key');
}
is(tls($f[2], '-sess_in', $sess), 'Reused', 'after the rotation: the old '
   . 'ticket still resumes on C');
my $sess2 = $tmp->dir . '/sess2.pem';
is(tls($f[1], '-sess_out', $sess2), 'New', 'a new session on B');
is(tls($f[0], '-sess_in', $sess2), 'Reused', 'resumed on A');
ok(all_up(@f), 'the reloads reconnected to Redis');

# no files: ssl_session_ticket_keys = redis, the pair kept in Redis
for my $t (@f) {
    my ($port) = $t->{addr} =~ /:(\d+)$/;
    $t->write_conf(fleet_conf($t->{i}, $port, $t->{tport}, 'redis'));
    my @old = $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub {
        my %o = map { $_ => 1 } @old;
        my @w = $t->workers;
        @w == 1 && !grep { $o{$_} } @w;
    }, 15), 'reloaded with ssl_session_ticket_keys = redis');
}
my $sess3 = $tmp->dir . '/sess3.pem';
# each instance takes the fleet's pair within a second of its start
ok(FastdTest::wait_for(sub {
    tls($f[0], '-sess_out', $sess3) eq 'New'
        && tls($f[1], '-sess_in', $sess3) eq 'Reused'
        && tls($f[2], '-sess_in', $sess3) eq 'Reused' }, 15, 0.5),
   'keys in Redis: a session made on A resumes on B and C');
ok(all_up(@f), 'connected to Redis');

# wrk against each instance at once, for $secs: the 200s, the others,
# the socket errors and the longest latency (s) of all
sub hammer {
    my ($secs, @t) = @_;
    my @pids;
    my $dir = $tmp->dir;
    for my $i (0 .. $#t) {
        my $pid = fork // die;
        if (!$pid) {
            open STDOUT, '>', "$dir/wrk$i.out";
            open STDERR, '>&', \*STDOUT;
            { no warnings 'exec'; exec { 'wrk' } 'wrk', '-t1', '-c4', "-d${secs}s", '--timeout', '5s',
                "http://$t[$i]{addr}/api"; }
            POSIX::_exit(127);
        }
        push @pids, $pid;
    }
    waitpid($_, 0) for @pids;
    my %r = (ok => 0, other => 0, errors => 0, max => 0);
    for my $i (0 .. $#t) {
        my $out = FastdTest::slurp("$dir/wrk$i.out") // '';
        my ($n) = $out =~ /(\d+) requests in/;
        my ($non) = $out =~ /Non-2xx or 3xx responses: (\d+)/;
        my ($e) = $out =~ /Socket errors: (.*)/;
        my ($max, $unit) = $out =~ /Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)/;
        $unit //= 's';
        $max = ($max // 99) / ($unit eq 'us' ? 1e6 : $unit eq 'ms' ? 1e3 : 1);
        $r{ok} += ($n // 0) - ($non // 0);
        $r{other} += $non // 0;
        $r{errors}++ if $e && $e =~ /[1-9]/;
        $r{errors}++ unless defined $n;
        $r{max} = $max if $max > $r{max};
    }
    return \%r;
}

# --- one limit for the fleet ---------------------------------------------
my $secs = 4;
my $r = hammer($secs, @f);
my $rate = $r->{ok} / $secs;
ok($rate >= 18 && $rate <= 22, sprintf('3 clients on 3 instances: %.1f r/s '
   . 'admitted in all (20 r/s, 10%%), %d refused', $rate, $r->{other}));
ok($r->{other} > $r->{ok}, 'the clients did ask for more');
is($r->{errors}, 0, 'no socket errors');
is(metric($f[0], 'limit_req_fallbacks') // 0, 0, 'no fallback taken');

# --- Redis killed under load ----------------------------------------------
my $pid = fork // die;
if (!$pid) {
    sleep 1;
    $redis->kill9;
    POSIX::_exit(0);
}
$r = hammer(3, @f);
waitpid($pid, 0);
waitpid($redis->pid, 0);   # the child killed it; ours to reap
$redis->{pid} = undef;
is($r->{errors}, 0, 'Redis killed under load: every request answered');
ok($r->{max} < 1.5, sprintf('none waited for it (the longest %.3f s; '
   . 'timeout 200 ms)', $r->{max}));
ok((metric($f[0], 'limit_req_fallbacks') // 0) > 0,
   'on_error = local answered (fallbacks counted)');
$rate = $r->{ok} / 3;
ok($rate <= 3 * 20 * 1.1 + 1, sprintf('the local tables limit each '
   . 'instance meanwhile (%.1f r/s in all, 3 x 20 at most)', $rate));

$redis->start or BAIL_OUT('redis-server did not start again');
ok(all_up(@f), 'restarted: every instance reconnects within seconds');
my $fb = metric($f[0], 'limit_req_fallbacks') // 0;
$r = hammer(3, @f);
$rate = $r->{ok} / 3;
note('fallbacks meanwhile: ' . ((metric($f[0], 'limit_req_fallbacks') // 0) - $fb));
ok($rate >= 18 && $rate <= 22, sprintf('and the limit is the fleet\'s '
   . 'again (%.1f r/s)', $rate));

# --- a partition: Redis's link cut, then back -----------------------------
my $redis_link = "fdv${id}3";
$pid = fork // die;
if (!$pid) {
    sleep 1;
    system("ip link set $redis_link down");
    POSIX::_exit(0);
}
$r = hammer(3, @f);
waitpid($pid, 0);
is($r->{errors}, 0, 'partition: every request answered');
ok($r->{max} < 1.5, sprintf('none waited past the bound (the longest '
   . '%.3f s)', $r->{max}));
ok(FastdTest::wait_for(sub { (metric($f[0], 'redis_up') // 1) == 0 }, 10),
   'the connection is given up (no reply within a second past the '
   . 'timeout)');
sh("ip link set $redis_link up");
ok(all_up(@f), 'link back: reconnected within seconds');

# --- an instance reloaded, then one killed --------------------------------
# What proves the limit is still shared is the ceiling (not 40 r/s from two
# instances on their own). Below it, a busy machine only lowers the rate:
# a gap in the clients' requests longer than 50 ms is an admission lost
# for good (one killed instance's share fell to 17 r/s on a loaded 2-core
# machine), so the floor here says only "not refusing everything".
$fb = metric($f[0], 'limit_req_fallbacks') // 0;
$f[0]->signal('HUP');
$r = hammer(3, @f);
$rate = $r->{ok} / 3;
note('reload: fallbacks meanwhile: ' . ((metric($f[0], 'limit_req_fallbacks') // 0) - $fb));
ok($rate >= 14 && $rate <= 22, sprintf('instance A reloaded under load: '
   . 'the limit holds (%.1f r/s)', $rate));
is($r->{errors}, 0, 'no request lost');

kill 'KILL', $f[2]->pid, map { FastdTest::children_of($_) } $f[2]->pid;
$f[2]->_reap;
$r = hammer(3, @f[0, 1]);
$rate = $r->{ok} / 3;
ok($rate >= 14 && $rate <= 22, sprintf('instance C killed: A and B still '
   . 'share the limit (%.1f r/s, not 40)', $rate));

for my $t (@f[0, 1]) {
    $t->no_alerts;
    $t->stop;
}
$redis->stop;
cleanup();
ok(!grep({ system("ip netns pids $_ >/dev/null 2>&1") == 0 } @ns),
   'the namespaces are gone');

done_testing();
