#!/usr/bin/perl
# [upstream] server = NAME:PORT resolve: the servers follow DNS answers
# from a resolver on loopback (tests/lib/TestDNS.pm, TTL 1 s) while traffic
# flows: a new address gets requests within a few TTLs, a removed one
# finishes what it has in flight, closes its kept-alive connections and
# gets nothing new, and no request fails. SERVFAIL, NXDOMAIN and a dead
# resolver keep the last addresses (logged once); a name that does not
# resolve at load is no error (502 until it does); one query per TTL for
# the whole fastd (two workers); /status lists the addresses; bad lines
# are config errors naming file:line.
#
# The backends share one port on 127.0.0.2 .. 127.0.0.4 (a DNS answer has
# no port) and answer with their address.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TestDNS;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep time);

my $port = FastdTest::free_port();
my $t = FastdTest->new(conf => '');
my $dir = $t->dir;
our $sick = "$dir/sick"; # a file name: while "$sick-ADDR" exists, ADDR fails /healthz
my $handler = sub {
    my ($req) = @_;
    sleep 2 if $req->{path} =~ m{/slow$};
    my $h = $req->{backend}->host;
    return Backend::response(-e "$sick-$h" ? 503 : 200, 'health')
        if $req->{path} eq '/healthz';
    return Backend::response(200, "id=$h", 'X-Id' => $h);
};
my %be = map { ($_ => Backend->new(host => $_, port => $port,
                                   handler => $handler)) }
         map { "127.0.0.$_" } 2 .. 4;
# health_check's group has backends of its own (its probes are requests)
my $hport = FastdTest::free_port();
$hport = FastdTest::free_port() while $hport == $port;
my %hbe = map { ($_ => Backend->new(host => $_, port => $hport,
                                    handler => $handler)) }
          map { "127.0.0.$_" } 2 .. 4;
my $A2 = "127.0.0.2:$port";
my $A3 = "127.0.0.3:$port";
my $A4 = "127.0.0.4:$port";

my %zone = (app => [qw(127.0.0.2 127.0.0.3)], late => [],
            hc => [qw(127.0.0.2 127.0.0.3)]);
our $delay; # seconds the answers are late
my $dns = TestDNS->new(table => "$dir/zone", log => "$dir/dns.log");
sub zone {
    my (%z) = @_;
    %zone = (%zone, %z);
    my $text = '';
    for my $n (sort keys %zone) {
        my $v = $zone{$n};
        $text .= ref $v ? join('', map { "$n.test A $_\n" } @$v)
                        : "$n.test $v\n";
        $text .= "$n.test DELAY $delay\n" if $delay && ref $v;
    }
    $dns->set($text);
}
zone();

my $up = sub {
    my ($name, $extra, $p) = @_;
    $p //= $port;
    return "[upstream $name]\nresolver = ${\ $dns->addr}\n"
         . "resolver_timeout = 1s\nserver = $name.test:$p resolve\n"
         . ($extra // '') . "\n";
};
$t->write_conf(FastdTest::base_conf(
    main => { workers => 2 },
    locations => FastdTest::proxy_locations(qw(app late hc))
        . "[location /h/]\nhandler = proxy\nupstream = h\n\n"
        . "[location = /status]\nhandler = status\n\n",
    extra => $up->('app', "keepalive = 8\n") . $up->('late')
        . $up->('hc', "keepalive = 8\nhealth_check = /healthz "
                      . "interval=300ms timeout=1s\n", $hport)
        . "[upstream h]\nresolver = ${\ $dns->addr}\n"
        . "server = app.test:$port resolve\nbalance = hash\n"
        . "hash_key = \$uri\n\n"));
$t->start;

# The addresses /status lists for a group's resolve server.
sub addresses {
    my ($g) = @_;
    my $r = $t->get('/status?format=prometheus');
    return '' unless $r && $r->status == 200;
    return join ' ', sort $r->body =~
        /^fastd_resolve_address_info\{upstream="$g",server="[^"]*",address="([^"]+)"\} 1$/mg;
}
sub figure {
    my ($g, $name) = @_;
    my $r = $t->get('/status?format=prometheus');
    return undef unless $r && $r->status == 200;
    return $r->body =~ /^fastd_resolve_$name\{upstream="$g",server="[^"]*"\} (\d+)$/m
        ? $1 : undef;
}
sub wait_addresses {
    my ($g, $want) = @_;
    return FastdTest::wait_for(sub { addresses($g) eq $want }, 15, 0.05);
}
# who answered: the backend's address, or "status N" / "none"
sub who {
    my ($path) = @_;
    my $r = $t->get($path, timeout => 10);
    return 'none' unless $r;
    return $r->status == 200 ? ($r->header('X-Id') // '?')
                             : 'status ' . $r->status;
}
# lines of the error log matching $re, from byte $from on
sub log_count {
    my ($re, $from) = @_;
    return scalar grep { $_ =~ $re } split /\n/,
        substr($t->error_log, $from // 0);
}

# --- at load ------------------------------------------------------------------
ok(wait_addresses('app', "$A2 $A3"), '/status lists the two addresses')
    or diag(addresses('app'));
my %n;
$n{ who("/app/$_") }++ for 1 .. 40;
ok($n{'127.0.0.2'} && $n{'127.0.0.3'} &&
   $n{'127.0.0.2'} + $n{'127.0.0.3'} == 40,
   'both addresses serve, every request answered')
    or diag(explain \%n);
is(who('/late/x'), 'status 502',
   'a name that does not resolve at load is no error: its group answers 502');
ok(log_count(qr/upstream "late" server late\.test:\d+: DNS query failed \(Domain name not found\)/) >= 1,
   '... and says why (a warning)');
zone(late => ['127.0.0.4']);
ok(wait_addresses('late', $A4), 'it resolves later');
is(FastdTest::wait_for(sub { my $w = who('/late/x'); $w eq '127.0.0.4' ? $w : undef }, 10, 0.05),
   '127.0.0.4', '... and then serves');

# --- health checks on resolved addresses -----------------------------------------
sub check_up {
    my ($addr) = @_;
    my $r = $t->get('/status?format=prometheus');
    return undef unless $r && $r->status == 200;
    return $r->body =~ /^fastd_upstream_check_up\{upstream="hc",server="\Q$addr\E"\} (\d+)$/m
        ? $1 : undef;
}
my ($H2, $H3, $H4) = map { "127.0.0.$_:$hport" } 2 .. 4;
ok(wait_addresses('hc', "$H2 $H3"), 'health_check with resolve: two addresses');
$t->write_file("sick-127.0.0.3", '');
ok(FastdTest::wait_for(sub { (check_up($H3) // 1) == 0 }, 15, 0.05),
   'the one that fails its check is taken out (/status)');
%n = ();
$n{ who("/hc/$_") }++ for 1 .. 10;
is($n{'127.0.0.2'}, 10, '... and gets no request');
zone(hc => [qw(127.0.0.2 127.0.0.4)]);
ok(FastdTest::wait_for(sub { (check_up($H4) // 0) == 1 }, 15, 0.05),
   'a new address is probed and passes');
ok(!defined check_up($H3), 'the removed one is no longer reported');
%n = ();
$n{ who("/hc/$_") }++ for 1 .. 10;
ok($n{'127.0.0.2'} && $n{'127.0.0.4'} && !$n{'127.0.0.3'},
   '... and serves beside the other') or diag(explain \%n);

# --- one query per name and TTL for the whole fastd (two workers) -----------
# answers 0.3 s late: a worker that asked whenever the time had come
# would ask beside the other one's query in flight
{
    local $delay = 0.3;
    zone();
    sleep 1.5;
    my $q0 = $dns->queries;
    my $t0 = time;
    sleep 4;
    my $q = $dns->queries - $q0;
    my $secs = time - $t0;
    # four names, A and AAAA each, every 1.3 s (a TTL after the late
    # answer): under 8 a second for the whole fastd, about twice that if
    # each worker asked
    my $max = int(9 * $secs);
    ok($q >= 8 && $q <= $max,
       "$q queries in ${\ sprintf '%.1f', $secs } s: one per name and TTL "
       . "for the whole fastd (at most $max)");
}
zone();

# --- the answer changes while traffic flows -----------------------------------
# requests in flight on the address that goes away
my @slow = map { my $c = $t->connect(timeout => 20);
                 $c->send("GET /app/slow HTTP/1.1\r\nHost: x\r\n\r\n"); $c }
           1 .. 4;
FastdTest::wait_for(sub { $be{'127.0.0.2'}->requests + $be{'127.0.0.3'}->requests
                          >= 44 }, 10, 0.02);

# a client loop on one kept-alive connection, bounded
my $loop_log = "$dir/loop.log";
my $stop = "$dir/loop.stop";
my $loop = fork // die "fork: $!";
if ($loop == 0) {
    open my $out, '>>', $loop_log or POSIX::_exit(1);
    $out->autoflush(1);
    my ($c, $deadline) = (undef, time + 60);
    while (!-e $stop && time < $deadline) {
        $c ||= $t->connect(timeout => 10);
        my $ok = $c && $c->send("GET /app/loop HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $ok ? $c->read_response(timeout => 10) : undef;
        if (!$r) {
            print $out "none\n";
            $c = undef;
            next;
        }
        print $out $r->status, ' ', ($r->header('X-Id') // '-'), "\n";
        sleep 0.01;
    }
    POSIX::_exit(0);
}
# the loop's results so far (their number in scalar context)
sub loop_lines {
    open my $fh, '<', $loop_log or return wantarray ? () : 0;
    my @l = <$fh>;
    chomp @l;
    return wantarray ? @l : scalar @l;
}
FastdTest::wait_for(sub { loop_lines() >= 10 }, 10, 0.02);

my $t_change = time;
zone(app => [qw(127.0.0.3 127.0.0.4)]);
ok(wait_addresses('app', "$A3 $A4"), '/status follows the new answer');
ok(FastdTest::wait_for(sub { grep { /127\.0\.0\.4/ } loop_lines() }, 10, 0.05),
   sprintf('the new address receives traffic within a few TTLs (%.1f s '
           . 'after the change, TTL 1 s)', time - $t_change));
my @got = map { $_->read_response(timeout => 20) } @slow;
my @ids = map { $_ && $_->status == 200 ? $_->header('X-Id') : 'failed' } @got;
ok(!(grep { $_ eq 'failed' } @ids) && (grep { $_ eq '127.0.0.2' } @ids),
   'requests in flight on the removed address finish (200)')
    or diag("@ids");
$_->close for @slow;
my $gone = $be{'127.0.0.2'};
ok(FastdTest::wait_for(sub { $gone->connections == $gone->closed }, 10, 0.05),
   'its kept-alive connections are closed')
    or diag($gone->connections . ' connections, ' . $gone->closed . ' closed');
my $before = $gone->requests;
my $l0 = loop_lines();
FastdTest::wait_for(sub { loop_lines() >= $l0 + 30 }, 15, 0.05);
$n{$_} = 0 for keys %n;
$n{ who("/app/$_") }++ for 1 .. 20;
is($gone->requests, $before, 'the removed address gets no new requests');
ok($n{'127.0.0.3'} && $n{'127.0.0.4'}, '... the two others get them');
isnt(who('/h/a'), 'status 502', 'balance = hash follows the new set too');
open my $sfh, '>', $stop;
close $sfh;
waitpid($loop, 0);
my @lines = loop_lines();
my @bad = grep { !/^200 / } @lines;
ok(@lines >= 40 && !@bad,
   scalar(@lines) . ' requests in the loop while the answer changed: none failed')
    or diag(join "\n", @bad[0 .. ($#bad < 5 ? $#bad : 5)]);
ok(log_count(qr/upstream "app" server app\.test:\d+ resolves to \Q$A3 $A4\E$/) == 1,
   'the change is logged once');

# --- failures keep the last addresses -------------------------------------------
for my $what ('SERVFAIL', 'NXDOMAIN', 'resolver down') {
    my $f0 = figure('app', 'failures_total');
    my $from = length $t->error_log;
    if ($what eq 'resolver down') {
        $dns->stop;
    } elsif ($what eq 'NXDOMAIN') {
        zone(app => 'NXDOMAIN');
    } else {
        zone(app => $what);
    }
    ok(FastdTest::wait_for(sub { (figure('app', 'failures_total') // 0) >= $f0 + 2 }, 15, 0.1),
       "$what: queries fail (twice or more)");
    is(figure('app', 'ok'), 0, "$what: /status shows the failure");
    is(addresses('app'), "$A3 $A4", "$what: the last addresses stay");
    my %m;
    $m{ who("/app/f$_") }++ for 1 .. 10;
    is(($m{'127.0.0.3'} // 0) + ($m{'127.0.0.4'} // 0), 10,
       "$what: and serve");
    is(log_count(qr/upstream "app" server app\.test:\d+: DNS query failed \(.*?\): it keeps its 2 addresses/, $from), 1,
       "$what: a warning once, not per query")
        or diag($t->error_log);
    # the next case is a change: it warns again
    if ($what ne 'resolver down') {
        zone(app => [qw(127.0.0.3 127.0.0.4)]);
        ok(FastdTest::wait_for(sub { figure('app', 'ok') }, 15, 0.05),
           "$what: answers again");
        ok(log_count(qr/"app" server app\.test:\d+ resolves again/, $from)
           == 1, '... logged once');
    }
}

# --- a reload starts with the addresses it had ---------------------------------
# the resolver still down: what the new workers serve comes from the table
{
    my %old = map { $_ => 1 } $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { (grep { !$old{$_} } $t->workers) >= 2 }, 20,
                           0.05),
       'reload: two new workers');
    my %m;
    $m{ who("/app/r$_") }++ for 1 .. 10;
    is(($m{'127.0.0.3'} // 0) + ($m{'127.0.0.4'} // 0), 10,
       'reload with the resolver down: the new workers serve the addresses '
       . 'the old ones had') or diag(explain \%m);
}

zone(app => ['127.0.0.2']);
$dns->start;
ok(wait_addresses('app', $A2), 'the resolver back: the new answer is taken');
%n = ();
$n{ who("/app/$_") }++ for 1 .. 10;
is($n{'127.0.0.2'}, 10, '... and only its address serves');

$t->stop;
$t->no_alerts;

# --- configuration errors --------------------------------------------------------
my @bad_conf = (
    ["resolver = dns.example\nserver = app.test:80 resolve\n",
     qr/bad "resolver" "dns\.example"/, qr/^resolver/],
    ["resolver = 127.0.0.1:99999\nserver = app.test:80 resolve\n",
     qr/bad "resolver"/, qr/^resolver/],
    ["server = 127.0.0.1:81\nserver = app.test:80 resolve\n",
     qr/resolve needs a "resolver"/, qr/^server = app/],
    ["resolver = 127.0.0.1\nserver = 127.0.0.1:80 resolve\n",
     qr/resolve needs a host name/, qr/^server = 127/],
    ["resolver = 127.0.0.1\nserver = unix:/tmp/x.sock resolve\n",
     qr/resolve needs a host name/, qr/^server = unix/],
);
for my $case (@bad_conf) {
    my ($body, $re, $line_re) = @$case;
    my $text = FastdTest::base_conf(
        locations => FastdTest::proxy_locations('u'),
        extra => "[upstream u]\n$body\n");
    my $file = $t->write_conf($text, 'bad.conf');
    my $line = FastdTest::line_of($text, $line_re);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    my $first = (split /\n/, $body)[0];
    ok($rc != 0 && $out =~ $re && $out =~ /bad\.conf:$line\b/,
       "\"$first\": a config error at bad.conf:$line") or diag($out);
}

done_testing();
