#!/usr/bin/perl
# /status with two workers and every kind of figure: upstreams (fixed,
# resolved, health-checked), a cache, a queue, the offload pool.
#
# Prometheus, checked strictly (promtool is not at hand): each family has
# one HELP and one TYPE, before its samples, which are together; counters
# end in _total and gauges do not; times are seconds (no _msec, _usec);
# every per-worker family names every live worker, and the figures all
# workers share (health checks, resolved addresses, cache indexes) have
# no per-worker series (they named only the worker that answered).
#
# JSON: the upstreams' rows and their fields come in configuration order
# whichever worker answers (the answering worker's health figures came
# first, and resolved servers after the fixed ones).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TestDNS;
use JSON::PP ();
use Test::More;

my $be = Backend->new(name => 'be', handler => sub {
    Backend::response(200, 'ok');
});
my $t = FastdTest->new(conf => '');
my $dir = $t->dir;
my $dns = TestDNS->new(table => "$dir/zone", log => "$dir/dns.log");
$dns->set("res.test A 127.0.0.1\n");

# configuration order, not sorted, a resolved one among fixed ones
my @order = qw(zeta res alpha mid beta);
my $check = "health_check = /healthz interval=200ms timeout=1s\n";
my %extra = (res => "resolver = ${\ $dns->addr}\nresolver_timeout = 1s\n",
             alpha => $check, beta => $check);
my $ups = join '', map {
    my $server = $_ eq 'res' ? "res.test:${\ $be->port} resolve"
                             : $be->addr;
    "[upstream $_]\n" . ($extra{$_} // '') . "server = $server\n\n"
} @order;

$t->write_conf(FastdTest::base_conf(
    main => { workers => 2 },
    locations => FastdTest::proxy_locations(@order)
        . "[location /cached/]\nhandler = proxy\nupstream = zeta\n"
        . "proxy_cache = c1\n\n"
        . "[location /q]\nhandler = delay\ndelay = 1ms\nqueue = q1\n\n"
        . "[location = /status]\nhandler = status\n\n",
    extra => $ups . "[cache c1]\npath = %%DIR%%/cache\n\n"
        . "[queue q1]\nmax_concurrent = 4\nqueue_limit = 4\n\n"
        . "[offload]\nthreads = 1\n\n"));
$t->start;

# some traffic everywhere, so every figure has something in it
# (res.test resolves after the start, off the request path: until then
# its upstream has no server, 502; a loaded machine takes longer)
FastdTest::wait_for(sub { my $r = $t->get('/res/x'); $r && $r->status == 200 }, 10);
for my $p ((map { "/$_/x" } @order), '/cached/x', '/q') {
    my $r = $t->get($p);
    ok($r && $r->status == 200, "GET $p: 200")
        or diag($r ? $r->status : 'no response');
}

sub json {
    my $r = $t->get('/status');
    return undef unless $r && $r->status == 200;
    my $s = eval { JSON::PP->new->decode($r->body) } or return undef;
    return wantarray ? ($s, $r->body) : $s;
}
sub alive { grep { $_->{alive} } @{ $_[0]{workers} || [] } }
sub rows { @{ $_[0]{modules}{upstream} || [] } }

# ready: two workers, both checked servers probed, the name resolved and
# its address in each worker's servers (a worker looks at the resolver's
# table within a second)
my $s = FastdTest::wait_for(sub {
    my $s = json() or return undef;
    my %checked = map { ($_->{upstream} => 1) }
                  grep { defined $_->{check_up} } rows($s);
    my $synced = grep {
        grep { $_->{upstream} eq 'res' } @{ $_->{modules}{upstream} || [] }
    } alive($s);
    return alive($s) == 2 && $synced == 2 && $checked{alpha}
        && $checked{beta} ? $s : undef;
}, 15, 0.05);
ok($s, 'two workers, the health checks and the resolver reported');
$s //= json() // {};
my @slots = sort { $a <=> $b } map { $_->{slot} } alive($s);

# --- Prometheus ---------------------------------------------------------------
my $r = $t->get('/status?format=prometheus');
my $text = $r ? $r->body : '';
my (%help, %type, %samples, @bad, $cur, %done);
for my $l (split /\n/, $text) {
    if ($l =~ /^# HELP (\S+) \S/) {
        push @bad, "HELP twice: $1" if $help{$1}++;
    } elsif ($l =~ /^# TYPE (\S+) (counter|gauge)$/) {
        push @bad, "TYPE twice: $1" if $type{$1};
        push @bad, "TYPE before HELP: $1" unless $help{$1};
        $type{$1} = $2;
    } elsif ($l =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)((?:\{[a-zA-Z_]\w*="(?:[^"\\]|\\.)*"(?:,[a-zA-Z_]\w*="(?:[^"\\]|\\.)*")*\})?) (\d+(?:\.\d+)?)$/) {
        my ($name, $labels, $v) = ($1, $2, $3);
        push @bad, "sample without a TYPE: $l" unless $type{$name};
        if (!defined $cur || $cur ne $name) {
            push @bad, "family $name in two places" if $done{$name}++;
            $cur = $name;
        }
        push @{ $samples{$name} }, [$labels, $v];
    } else {
        push @bad, "bad line: $l";
    }
}
ok(!@bad && keys %type > 40, 'text exposition 0.0.4: ' . keys(%type)
   . ' families, each with one HELP and one TYPE, its samples together')
    or diag(join "\n", @bad);

my @misnamed;
for my $f (sort keys %type) {
    push @misnamed, "counter without _total: $f"
        if $type{$f} eq 'counter' && $f !~ /_total$/;
    push @misnamed, "gauge with _total: $f"
        if $type{$f} eq 'gauge' && $f =~ /_total$/;
    push @misnamed, "a unit not in seconds: $f"
        if $f =~ /_(?:msec|usec|ms|us|millis\w*|micro\w*)(?:_|$)/;
    push @misnamed, "not fastd_: $f" unless $f =~ /^fastd_/;
    push @misnamed, "HELP without samples: $f" unless $samples{$f};
}
ok(!@misnamed, 'counters end in _total, gauges do not, times in seconds')
    or diag(join "\n", @misnamed);

# what changed name (README: "Prometheus names")
for (['fastd_upstream_response_seconds_total', 'counter'],
     ['fastd_upstream_check_up', 'gauge'],
     ['fastd_upstream_check_status', 'gauge'],
     ['fastd_upstream_check_probes_total', 'counter'],
     ['fastd_upstream_check_failed_total', 'counter'],
     ['fastd_resolve_address_info', 'gauge'],
     ['fastd_resolve_addresses', 'gauge'],
     ['fastd_resolve_changes_total', 'counter'],
     ['fastd_resolve_queries_total', 'counter'],
     ['fastd_resolve_failures_total', 'counter'],
     ['fastd_queue_wait_seconds_total', 'counter'],
     ['fastd_offload_wait_seconds_total', 'counter'],
     ['fastd_proxy_cache_entries', 'gauge'],
     ['fastd_worker_upstream_response_seconds_total', 'counter']) {
    my ($f, $want) = @$_;
    is($type{$f} // 'absent', $want, "$f: $want");
}
ok(!(grep { $_->[1] !~ /^\d+\.\d{3}$/ }
     @{ $samples{fastd_upstream_response_seconds_total} || [['', 'absent']] }),
   'upstream response times: seconds with their milliseconds');
ok(!(grep { $_->[1] !~ /^\d+\.\d{6}$/ }
     @{ $samples{fastd_queue_wait_seconds_total} || [['', 'absent']] }),
   'queue waits: seconds with their microseconds');
my @probes = grep { $_->[0] =~ /upstream="alpha"/ }
             @{ $samples{fastd_upstream_check_probes_total} || [] };
ok(@probes == 1 && $probes[0][1] >= 1, 'alpha\'s probes counted, once');

# per worker: every live worker in every family and label set, and no
# series of what the workers share
my (@missing, @shared);
for my $f (grep { /^fastd_worker_/ } sort keys %type) {
    my %by;
    for (@{ $samples{$f} }) {
        my ($labels) = @$_;
        my ($w) = $labels =~ /\bworker="(\d+)"/;
        (my $rest = $labels) =~ s/worker="\d+",?//;
        push @missing, "$f$labels: no worker label" unless defined $w;
        $by{$rest}{$w // ''} = 1;
    }
    for my $set (sort keys %by) {
        my @have = sort { $a <=> $b } keys %{ $by{$set} };
        push @missing, "$f$set: workers @have of @slots"
            unless "@have" eq "@slots";
    }
    push @shared, $f
        if $f =~ /^fastd_worker_(?:upstream_check|resolve|proxy_cache_(?:entries|bytes|loaded))/;
}
is(scalar @slots, 2, 'two live workers');
ok(!@missing, 'every per-worker series for each of the workers ('
   . "@slots)") or diag(join "\n", @missing);
ok(!@shared, 'no per-worker series of the shared figures')
    or diag(join "\n", @shared);
ok($type{fastd_worker_requests_total} && $type{fastd_worker_queue_admitted_total},
   'the per-worker families are there');

# --- JSON: configuration order, whoever answers -------------------------------
# The top-level "modules" object's upstream group as written: its labels
# and field names in order (the values change from one answer to the next).
sub layout {
    my ($body) = @_;
    my ($group) = $body =~ /\n "modules": \{.*?\n  "upstream": \[(.*?)\n  \]/s;
    return '' unless defined $group;
    my @l;
    while ($group =~ /"(\w+)": (?:("[^"]*")|\d+)/g) {
        push @l, defined $2 ? "$1=$2" : $1;
    }
    return join ' ', @l;
}

# Only these requests reach fastd now: a worker whose request count grew
# from the first answer to the last answered one of them.
my (%was, %orders, %layouts, $both, $answers);
while (!$both && ++$answers <= 300) {
    my ($cur, $body) = json();
    next unless $cur;
    my %seen;
    $orders{ join ' ', grep { !$seen{$_}++ }
                       map { $_->{upstream} } rows($cur) }++;
    $layouts{layout($body)}++;
    %was = map { ($_->{slot} => $_->{requests}) } alive($cur) unless %was;
    $both = 2 == grep { $_->{requests} > $was{ $_->{slot} } } alive($cur);
}
ok($both, "both workers answered ($answers answers)");
is(join(' | ', sort keys %orders), "@order",
   'the upstreams in configuration order in every answer');
is(scalar keys %layouts, 1, 'the same rows and fields in the same order '
   . 'from either worker') or diag(join "\n", keys %layouts);
my ($alpha) = grep { $_->{upstream} eq 'alpha' } rows($s);
ok($alpha && defined $alpha->{check_up} && defined $alpha->{response_msec},
   'JSON keeps its names: check_up, response_msec');

my ($addr) = @{ $s->{modules}{resolve} || [] };
ok($addr && ($addr->{address} // '') =~ /^127\.0\.0\.1:\d+$/
   && $addr->{address_info} == 1,
   'JSON: a resolved address beside its address_info (one "address" key)')
    or diag(explain $addr);

$t->stop;
$t->no_alerts;
done_testing();
