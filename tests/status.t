#!/usr/bin/perl
# status: the JSON and Prometheus views of the shared-memory counters,
# summed over workers, kept across a reload and a killed worker; the
# dashboard page.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

my $N = 25;

# 50 upstreams with long names (the proxy keeps the first 31 bytes of a
# name for its counters): the documents must stay whole and well-formed
my $NUP = 50;
my @up = map { sprintf 'upstream_with_a_long_name_%02d', $_ } 1 .. $NUP;
my $ups = join '', map {
    "[upstream $up[$_]]\nserver = 127.0.0.1:" . (20001 + $_) . "\n\n"
} 0 .. $#up;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main      => { workers => 2 },
    server    => { mime_types => '%%CONF%%/mime.types' },
    locations => "[location = /status]\nhandler = status\n\n"
                 . "[location /up/]\nhandler = proxy\nupstream = $up[-1]\n\n",
    extra     => $ups,
));
$t->start;
my $master = $t->pid;

# The parsed JSON status, or undef (and the reason in $why).
my $why = '';
sub status {
    my ($path, %h) = @_;
    my $r = $t->get($path // '/status', %h);
    if (!$r || $r->status != 200) {
        $why = $r ? "status " . $r->status : 'no response';
        return undef;
    }
    my $s = eval { JSON::PP->new->decode($r->body) };
    $why = $@ ? "bad JSON: $@" : '';
    return $s;
}

sub alive { my ($s) = @_; return grep { $_->{alive} } @{ $s->{workers} || [] } }

# A sample of a Prometheus family without labels, or undef.
sub sample {
    my ($text, $name) = @_;
    return $text =~ /^\Q$name\E (\d+)$/m ? $1 : undef;
}

# --- JSON -----------------------------------------------------------------------
my $ok = 0;
for (1 .. $N) {
    my $r = $t->get('/plaintext');
    $ok++ if $r && $r->status == 200;
}
is($ok, $N, "$N plaintext requests answered");

# a worker counts a response once it is written: poll, do not sleep
my $s = FastdTest::wait_for(sub {
    my $s = status();
    return $s && ($s->{responses}{'2xx'} // 0) >= $N && alive($s) == 2 ? $s
                                                                    : undef;
}, 5);
ok($s, 'GET /status gives JSON with the requests counted') or diag($why);
$s //= status() // {};

my $r = $t->get('/status');
is($r->status, 200, '/status: 200');
like($r->header('content-type'), qr{^application/json}, 'application/json');
is($r->header('cache-control'), 'no-store', 'Cache-Control: no-store');

cmp_ok($s->{requests} // 0, '>=', $N, "requests >= $N");
cmp_ok($s->{responses}{'2xx'} // 0, '>=', $N, "responses 2xx >= $N");
cmp_ok($s->{connections}{accepted} // 0, '>=', 1, 'connections accepted >= 1');
cmp_ok($s->{connections}{handled} // 0, '<=', $s->{connections}{accepted} // 0,
       'handled <= accepted');
cmp_ok($s->{connections}{active} // 0, '>=', 1,
       'the status request itself is an active connection');
is($s->{pid}, $master, 'pid is the master pid');
is($s->{version}, '0.1.0', 'version') if defined $s->{version};
ok(defined $s->{uptime_s} && $s->{uptime_s} >= 0 && $s->{uptime_s} < 60,
   'uptime_s is the seconds since start');
ok(defined $s->{generation}, 'generation present');
ok(ref $s->{bytes} eq 'HASH' && $s->{bytes}{in} > 0 && $s->{bytes}{out} > 0,
   'bytes in and out counted');
is(ref $s->{modules}, 'HASH', 'modules object present');

my @w = alive($s);
is(scalar @w, 2, 'workers = 2: two alive workers listed');
is_deeply([sort { $a <=> $b } map { $_->{pid} } @w], [$t->workers],
          'worker pids are the master\'s children');
my $sum = 0;
$sum += $_->{requests} for @{ $s->{workers} };
is($sum, $s->{requests}, 'per-worker requests add up to the total');

# the modules' view: every upstream server, its labels as strings
my @ent = @{ $s->{modules}{upstream} || [] };
is(scalar @ent, $NUP, "modules.upstream: $NUP servers");
is_deeply([sort map { $_->{upstream} // '' } @ent], [sort @up],
          'every upstream name whole');
ok(!(grep { !defined $_->{server} || !defined $_->{requests}
            || exists $_->{labels} } @ent),
   'each with its server and counters, no raw labels');
is(scalar(grep { @{ $_->{modules}{upstream} || [] } == $NUP } alive($s)), 2,
   'and again per worker');

$r = $t->http("HEAD /status HTTP/1.1\r\nHost: localhost\r\n\r\n");
is($r->status, 200, 'HEAD /status: 200');
is($r->body, '', 'HEAD /status: no body');
$r = $t->http("POST /status HTTP/1.1\r\nHost: localhost\r\n"
              . "Content-Length: 0\r\n\r\n");
is($r->status, 405, 'POST /status: 405');

# --- Prometheus -----------------------------------------------------------------
sub check_prometheus {
    my ($r, $what) = @_;
    is($r->status, 200, "$what: 200");
    is($r->header('content-type'), 'text/plain; version=0.0.4; charset=utf-8',
       "$what: exposition content type");
    my $text = $r->body;
    like($text, qr/^# TYPE fastd_requests_total counter$/m,
         "$what: # TYPE fastd_requests_total counter");
    like($text, qr/^# HELP fastd_requests_total \S/m, "$what: # HELP");
    my $v = sample($text, 'fastd_requests_total');
    ok(defined $v && $v >= $N, "$what: fastd_requests_total >= $N");
    like($text, qr/^fastd_worker_requests_total\{worker="\d+"\} \d+$/m,
         "$what: per-worker series with worker=\"N\"");
    like($text, qr/^fastd_responses_total\{code="2xx"\} \d+$/m,
         "$what: responses by class");

    # every line is a comment or a sample; each family declared once,
    # before its samples; counters end in _total
    my (%type, @bad);
    for my $l (split /\n/, $text) {
        if ($l =~ /^# TYPE (\S+) (counter|gauge)$/) {
            push @bad, "TYPE twice: $l" if $type{$1}++;
            push @bad, "counter without _total: $l"
                if $2 eq 'counter' && $1 !~ /_total$/;
        } elsif ($l =~ /^# HELP \S+ /) {
        } elsif ($l =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_]\w*="(?:[^"\\]|\\.)*"(?:,[a-zA-Z_]\w*="(?:[^"\\]|\\.)*")*\})? \d+(?:\.\d+)?$/) {
            push @bad, "sample before its TYPE: $l" unless $type{$1};
            push @bad, "not prefixed fastd_: $l" unless $1 =~ /^fastd_/;
        } else {
            push @bad, "bad line: $l";
        }
    }
    ok(!@bad, "$what: valid text exposition 0.0.4") or diag(join "\n", @bad);
    my @srv = $text =~ /^fastd_upstream_requests_total\{upstream="([^"]+)",/mg;
    is_deeply([sort @srv], [sort @up], "$what: every upstream, name whole");
    return $text;
}

check_prometheus($t->get('/status?format=prometheus'), '?format=prometheus');
check_prometheus($t->get('/status', Accept => 'text/plain;version=0.0.4'),
                 'Accept: text/plain;version=0.0.4');
check_prometheus($t->get('/status', Accept =>
    'application/openmetrics-text;version=1.0.0;q=0.5,'
    . 'text/plain; version=0.0.4;q=0.4,*/*;q=0.1'), 'Prometheus\' own Accept');
$r = $t->get('/status', Accept => 'application/json');
like($r->header('content-type'), qr{^application/json},
     'Accept: application/json gives JSON');

# --- the dashboard ----------------------------------------------------------------
$r = $t->get('/status.html');
is($r->status, 200, '/status.html: 200');
like($r->header('content-type') // '', qr{^text/html}, '/status.html: text/html');
like($r->body, qr/<canvas/, 'dashboard has its charts');
unlike($r->body, qr/(?:src|href)="(?:https?:)?\/\//,
       'dashboard loads no external assets');

# --- reload: a new generation, counters kept ------------------------------------
$s = status() or diag($why);
my $gen0 = $s->{generation} // 0;
my $req0 = $s->{requests} // 0;
my $acc0 = $s->{connections}{accepted} // 0;
my %old = map { $_->{pid} => 1 } alive($s);

$t->signal('HUP');
# done when the new workers answer and the old ones have been retired
$s = FastdTest::wait_for(sub {
    my $s = status();
    return undef unless $s && ($s->{generation} // 0) > $gen0;
    return undef if grep { $old{ $_->{pid} } } @{ $s->{workers} };
    return alive($s) == 2 ? $s : undef;
}, 10);
ok($s, 'after SIGHUP: new generation, old workers gone') or diag($why);
$s //= status() // {};
is($s->{generation}, $gen0 + 1, 'generation incremented by one');
cmp_ok($s->{requests} // 0, '>', $req0,
       'requests did not go backwards (old workers retired)');
cmp_ok($s->{connections}{accepted} // 0, '>', $acc0, 'accepted kept');
ok(!(grep { ($_->{generation} // -1) != $s->{generation} } alive($s)),
   'every alive worker runs the new generation');
$r = $t->get('/status?format=prometheus');
my $v = sample($r->body, 'fastd_requests_total') // 0;
cmp_ok($v, '>', $req0, 'Prometheus requests counter kept across the reload');

# --- a killed worker: respawned, counters kept -----------------------------------
SKIP: {
    my @kids = $t->workers;
    skip 'no worker to kill', 2 unless @kids;
    $req0 = $s->{requests} // 0;
    kill 'KILL', $kids[0];
    $s = FastdTest::wait_for(sub {
        my $s = status();
        return undef unless $s && alive($s) == 2;
        return (grep { $_->{pid} == $kids[0] } @{ $s->{workers} }) ? undef : $s;
    }, 10);
    ok($s, 'killed worker respawned and retired') or diag($why);
    cmp_ok(($s // {})->{requests} // 0, '>', $req0,
           'requests did not go backwards after a worker was killed');
}

$t->no_alerts(allow => qr/signal 9|exited on signal/);
$t->stop;

# --- the shipped conf/fastd.conf: /status and the dashboard, loopback only -----
# It runs as shipped from a prefix of its own (conf/, logs/, html/), only
# the port changed; it listens on 0.0.0.0, so a client can come from
# 127.0.0.2, which the rules do not allow, as well as from 127.0.0.1.
{
    my $d = FastdTest->new;
    my $dir = $d->dir;
    my $text = FastdTest::slurp(FastdTest::root() . '/conf/fastd.conf');
    my $port = $d->port;
    ok($text =~ s/^listen = 0\.0\.0\.0:8080\b/listen = 0.0.0.0:$port/m,
       'conf/fastd.conf listens on 0.0.0.0:8080');
    mkdir "$dir/$_" for qw(conf logs);
    symlink(FastdTest::root() . '/html', "$dir/html") or die "symlink: $!";
    # the certificate of its 8443 ssl address, as README's first command
    # makes it; that port changed too
    mkdir "$dir/conf/cert";
    FastdTest::self_signed("$dir/conf/cert/fastd", 'localhost');
    my $tls_port = FastdTest::free_port();
    ok($text =~ s/^listen = 0\.0\.0\.0:8443 ssl\b/listen = 127.0.0.1:$tls_port ssl/m,
       'conf/fastd.conf listens on 0.0.0.0:8443 ssl');
    my $conf = "$dir/conf/fastd.conf";
    FastdTest::spew($conf, $text);
    FastdTest::spew("$dir/conf/world.sqlite.sql",
                    FastdTest::slurp(FastdTest::root() . '/conf/world.sqlite.sql'));

    # each status location: allow loopback, deny the rest
    for my $loc ('/status', '/status.html') {
        # the section's lines, up to the next [section]
        my ($sec) = $text =~ /^\[location\ =\ \Q$loc\E\][^\n]*\n
                              ((?:[^[\n][^\n]*\n|\n)*)/mx;
        my @rules = grep { /^(?:allow|deny)\b/ } split /\n/, $sec // '';
        s/\s*;.*// for @rules;
        is_deeply(\@rules, ['allow = 127.0.0.1', 'allow = ::1', 'deny = all'],
                  "conf/fastd.conf: [location = $loc] allows loopback only");
    }

    my $out = `'${\FastdTest::bin()}' -t -c '$conf' 2>&1`;
    is($?, 0, 'fastd -t accepts conf/fastd.conf') or diag($out);

    $d->start('-c', $conf); # the last -c is the file loaded
    # One request from a given source address; the status code, or 0.
    my $from = sub {
        my ($src, $path) = @_;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $port, LocalAddr => $src,
                                      Proto => 'tcp', Timeout => 5)
            or return 0;
        print $s "GET $path HTTP/1.1\r\nHost: localhost\r\n"
                 . "Connection: close\r\n\r\n";
        # read to the close (Connection: close), 10 s at most
        my ($resp, $end) = ('', time + 10);
        my $sel = IO::Select->new($s);
        while (time < $end && $sel->can_read($end - time)) {
            last unless sysread($s, $resp, 4096, length $resp);
        }
        return $resp =~ m{^HTTP/1\.1 (\d{3}) } ? $1 : 0;
    };
    is($from->('127.0.0.1', '/status'), 200, '/status from 127.0.0.1: 200');
    is($from->('127.0.0.1', '/status.html'), 200,
       '/status.html from 127.0.0.1: 200');
    is($from->('127.0.0.2', '/status'), 403, '/status from 127.0.0.2: 403');
    is($from->('127.0.0.2', '/status.html'), 403,
       '/status.html from 127.0.0.2: 403');
    is($from->('127.0.0.2', '/plaintext'), 200,
       'the rest stays open: /plaintext from 127.0.0.2: 200');
    $d->stop;
    my $log = FastdTest::slurp("$dir/logs/error.log") // '';
    my @bad = grep { /\[(?:alert|emerg|crit)\]/ } split /\n/, $log;
    ok(!@bad, 'no alerts in its error log') or diag(join "\n", @bad);
}

done_testing();
