#!/usr/bin/perl
# Reloads that change "workers", up and down, in both accept modes, under
# wrk traffic: the listening sockets a reload no longer uses are closed
# (a new worker once inherited the master's copy of a dropped reuseport
# socket, so the kernel kept routing a share of new connections to a
# socket nobody accepted on), and no request fails or times out: a
# dropped reuseport socket is retired, not closed, until the old workers
# have taken its backlog (fd_listen.c; closing it at once reset a few of
# wrk's connections on most runs).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Faults;
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => 'wrk not installed' unless Faults::wrk_path();

# LISTEN sockets on our port, whoever holds them
sub listeners {
    my ($port) = @_;
    my $hex = sprintf '%04X', $port;
    my $n = 0;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        for (split /\n/, FastdTest::slurp($f) // '') {
            my @c = split ' ';
            $n++ if @c > 3 && $c[1] =~ /:$hex$/ && $c[3] eq '0A';
        }
    }
    return $n;
}

for my $mode ('reuseport', 'exclusive') {
    my $conf = sub {
        FastdTest::base_conf(main   => { workers => $_[0] },
                             events => { accept => $mode });
    };
    my $t = FastdTest->new(conf => $conf->(2));
    $t->start;
    my @w;
    FastdTest::wait_for(sub { @w = $t->workers; @w == 2 }, 10);
    my $want = sub { $mode eq 'reuseport' ? $_[0] : 1 };
    is(listeners($t->port), $want->(2), "$mode: listening sockets at start");

    my $wrk = Faults::wrk_start(url => 'http://127.0.0.1:' . $t->port
                                . '/plaintext', conns => 8, duration => 60,
                                timeout => 3);
    sleep 0.3;

    for my $n (3, 2, 1, 3, 2) {
        my %old = map { $_ => 1 } $t->workers;
        $t->write_conf($conf->($n));
        $t->signal('HUP');
        # the new generation is up and the old one has drained
        my $ok = FastdTest::wait_for(sub {
            my @now = $t->workers;
            @now == $n && !grep { $old{$_} } @now;
        }, 20, 0.05);
        ok($ok, "$mode: workers = $n after a reload");
        # a dropped reuseport socket closes once the master has reaped the
        # last old worker
        FastdTest::wait_for(sub { listeners($t->port) == $want->($n) }, 10,
                            0.05);
        is(listeners($t->port), $want->($n),
           "$mode: workers = $n: listening sockets");
        my $fail = 0;
        for (1 .. 30) {
            my $r = $t->http("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n",
                             timeout => 3);
            $fail++ unless $r && $r->{status} == 200;
        }
        is($fail, 0, "$mode: workers = $n: 30 new connections answered");
    }

    my $w = $wrk->stop;
    my $report = $w->{text};
    my $reqs = $w->{requests};
    cmp_ok($reqs // 0, '>', 100, "$mode: wrk completed requests")
        or diag($report);
    unlike($report, qr/Socket errors/, "$mode: no socket errors or "
           . "time-outs under wrk") or diag($report);
    unlike($report, qr/Non-2xx/, "$mode: no non-2xx under wrk")
        or diag($report);
    $t->stop;
    ok($t->no_alerts, "$mode: no alerts");
}
done_testing;
