#!/usr/bin/perl
# Active health checks: health_check = URI in [upstream]. A server whose
# probes fail is taken out for every worker and comes back once they
# pass; one probe per interval per server for the whole fastd (two
# workers here), a dead server is taken out without a user's request
# failing on it, the state outlives a reload, a group's only server is
# taken out too (502), /status shows it, and bad lines are config errors
# naming file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);

my $t = FastdTest->new;
my $dir = $t->dir;

# each backend answers /healthz 200, or 503 while its flag file exists;
# every other request with its name
sub backend {
    my ($name) = @_;
    return Backend->new(name => $name, handler => sub {
        my ($req) = @_;
        if ($req->{path} eq '/healthz') {
            return Backend::response(-e "$dir/$name.sick" ? 503 : 200, 'ok');
        }
        return Backend::response(200, "from $name");
    });
}
my ($a, $b, $solo) = map { backend($_) } qw(a b solo);
my $dead = FastdTest::dead_port();

$t->write_conf(FastdTest::base_conf(
    main => { workers => 2 },
    locations => "[location /]\nhandler = proxy\nupstream = pool\n\n"
               . "[location /solo]\nhandler = proxy\nupstream = solo\n\n"
               . "[location = /status]\nhandler = status\n\n",
    # max_fails=0: no passive health, the probes alone take servers out
    extra => "[upstream pool]\nserver = " . $a->addr . " max_fails=0\n"
           . "server = " . $b->addr . " max_fails=0\n"
           . "server = 127.0.0.1:$dead max_fails=0\n"
           # probes get generous time: a busy machine must not fail a
           . "health_check = /healthz interval=500ms timeout=500ms fails=3 "
           . "passes=2\n\n"
           . "[upstream solo]\nserver = " . $solo->addr . "\n"
           . "health_check = /healthz interval=500ms fails=1 passes=1\n"));

# the error log from $mark on (a position: what came after an action)
sub log_has {
    my ($re, $mark, $secs) = @_;
    return FastdTest::wait_for(sub { substr($t->error_log, $mark // 0) =~ $re },
                               $secs // 15);
}
sub mark { length $t->error_log }
sub spread {
    my ($n) = @_;
    my %from;
    for (1 .. $n) {
        my $r = $t->get("/x$_");
        my $who = $r && $r->status == 200 && $r->body =~ /^from (\w+)/
                ? $1 : 'error:' . ($r ? $r->status : 'none');
        $from{$who}++;
    }
    return \%from;
}
my $bname = qr/server \Q${\ $b->addr}\E/;

# --- b sick from the start, the dead one never answers ----------------------
FastdTest::spew("$dir/b.sick", '');
$t->start;
ok(log_has(qr/$bname failed its health check \(status 503, not 200-399\): taken out/),
   'a server whose probes get 503 is taken out, the log says the status and what passes');
ok(log_has(qr/server 127\.0\.0\.1:$dead failed its health check \(connect\(\): Connection refused\)/),
   'and a server that refuses the connection, the log names the call and the error');
my $from = spread(40);
is_deeply($from, { a => 40 }, 'every request goes to the healthy one, '
          . 'from both workers, and none fails on the others')
    or diag(explain($from));

# --- one probe per interval for the whole fastd ----------------------------
$a->reset_log;
my $t0 = time;
sleep 4;
my $probes = grep { m{ GET /healthz$} } $a->log_lines;
my $expect = (time - $t0) / 0.5;
ok($probes >= 2 && $probes <= $expect + 3,
   sprintf('%d probes of a in %.1f s at interval=500ms with 2 workers '
           . '(one prober at a time: at most %.0f)', $probes, time - $t0,
           $expect + 3));

# --- /status -------------------------------------------------------------------
my $pm = $t->get('/status?format=prometheus');
my $prom = $pm ? $pm->body : '';
like($prom, qr/^fastd_upstream_check_up\{upstream="pool",server="\Q${\ $b->addr}\E"\} 0$/m,
     '/status: b is down');
like($prom, qr/^fastd_upstream_check_up\{upstream="pool",server="\Q${\ $a->addr}\E"\} 1$/m,
     '... a is up');
like($prom, qr/^fastd_upstream_check_status\{upstream="pool",server="\Q${\ $b->addr}\E"\} 503$/m,
     "... with b's last probe's status");

my $j = $t->get('/status');
my $doc = $j ? eval { JSON::PP::decode_json($j->body) } : undef;
my ($row) = grep { ($_->{server} // '') eq $b->addr }
            @{ $doc->{modules}{upstream} || [] };
ok($row && defined $row->{check_up} && $row->{check_up} == 0 &&
   $row->{check_status} == 503,
   "/status JSON (the dashboard's table): b's row shows check_up 0, status 503")
    or diag(explain($row // $doc));

# --- a reload keeps what the probes found ---------------------------------
my %old = map { $_ => 1 } $t->workers;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    my @w = $t->workers;
    @w == 2 && !grep { $old{$_} } @w;
}, 15), 'reload: two new workers');
$from = spread(20);
is_deeply($from, { a => 20 }, 'after the reload b is still out, at once')
    or diag(explain($from));

# --- b recovers ---------------------------------------------------------------
my $m = mark();
unlink "$dir/b.sick";
ok(log_has(qr/$bname passed its health check: back in the group/, $m),
   'b passes twice in a row: back in the group');
$from = spread(40);
ok(($from->{a} // 0) > 0 && ($from->{b} // 0) > 0 && keys %$from == 2,
   'requests go to a and b again, and still never to the dead one')
    or diag(explain($from));

# --- a group's only server ----------------------------------------------------
my $r = $t->get('/solo');
is($r && $r->status, 200, 'the only server of a group serves while it passes');
$m = mark();
FastdTest::spew("$dir/solo.sick", '');
ok(log_has(qr/server \Q${\ $solo->addr}\E failed its health check \(status 503, not 200-399\)/, $m),
   'then fails its probe');
$r = $t->get('/solo');
is($r && $r->status, 502, 'taken out even as the only server: 502');
$m = mark();
unlink "$dir/solo.sick";
ok(log_has(qr/server \Q${\ $solo->addr}\E passed its health check/, $m),
   'and back when it passes');
$r = $t->get('/solo');
is($r && $r->status, 200, 'served again');

ok($t->running, 'fastd still running');
$t->no_alerts;
$t->stop;

# --- bad lines -------------------------------------------------------------------
for my $bad (['healthz', qr/needs a URI that starts with \//],
             ['/h interval=banana', qr/bad "interval=banana"/],
             ['/h fails=0', qr/bad "fails=0"/],
             ['/h status=300-200', qr/bad "status=300-200"/],
             ['/h port=70000', qr/bad "port=70000"/],
             ['/h every=2s', qr/unknown option "every=2s"/]) {
    my ($v, $re) = @$bad;
    my $conf = FastdTest::base_conf(
        locations => "[location /]\nhandler = proxy\nupstream = u\n\n",
        extra => "[upstream u]\nserver = 127.0.0.1:1\nhealth_check = $v\n");
    my $file = "$dir/bad.conf";
    (my $text = $conf) =~ s/%%(\w+)%%/$1 eq 'DIR' ? $dir : $1 eq 'PORT' ? $t->port : $1 eq 'HTML' ? $dir : "%%$1%%"/ge;
    FastdTest::spew($file, $text);
    my $line = FastdTest::line_of($text, qr/^health_check = /);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re && $out =~ /bad\.conf:$line\b/,
       "health_check = $v: a config error at bad.conf:$line")
        or diag($out);
}

done_testing();
