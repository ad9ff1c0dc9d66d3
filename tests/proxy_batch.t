#!/usr/bin/perl
# proxy with [events] batch_sends: the upstream requests of a loop turn
# leave through the worker's io_uring (its submission count grows by one
# per request), and with many clients asking at once, GETs and POSTs with
# bodies, each response reaches the client that asked. batch_sends = off
# keeps no ring and answers the same. A bad value is a config error that
# names file:line. This is the epoll backend's separate send ring
# (backend = epoll, whatever FASTD_TEST_BACKEND says); under io_uring the
# sends share the loop's ring (tests/uring.t, test_uring).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $be = Backend->new(handler => sub {
    my ($req) = @_;
    return Backend::response(200, "$req->{method} $req->{path} $req->{body}");
});
my $bp = $be->port;

my $locations = <<"C";
[location /p/]
handler = proxy
upstream = be

[upstream be]
server = 127.0.0.1:$bp
keepalive = 64
C

# The worker's io_uring counters: sends submitted (SqTail) and completions
# fastd consumed (CqHead); () without a ring.
sub ring_counts {
    my ($t) = @_;
    my ($w) = $t->workers;
    return () unless $w;
    my $links = FastdTest::fd_links($w);
    for my $fd (keys %$links) {
        next unless $links->{$fd} eq 'anon_inode:[io_uring]';
        my $info = FastdTest::slurp("/proc/$w/fdinfo/$fd") // next;
        my ($sq) = $info =~ /^SqTail:\s*(\d+)/m;
        my ($cq) = $info =~ /^CqHead:\s*(\d+)/m;
        return ($sq, $cq);
    }
    return ();
}

# $n clients send at once (every 4th a POST with a body), then each reads
# its answer: returns how many got their own.
sub burst {
    my ($t, $n, $round) = @_;
    my (@c, @want);
    for my $i (1 .. $n) {
        push @c, FastdTest::Conn->new($t->port, timeout => 10) // return 0;
    }
    for my $i (0 .. $#c) {
        my $path = "/p/r$round-c$i";
        if ($i % 4 == 0) {
            my $body = "body-$round-$i";
            $c[$i]->send("POST $path HTTP/1.1\r\nHost: x\r\nContent-Length: "
                         . length($body) . "\r\n\r\n$body") or return 0;
            push @want, "POST $path $body";
        } else {
            $c[$i]->send("GET $path HTTP/1.1\r\nHost: x\r\n\r\n") or return 0;
            push @want, "GET $path ";
        }
    }
    my $good = 0;
    for my $i (0 .. $#c) {
        my $r = $c[$i]->read_response;
        if ($r && $r->status == 200 && $r->body eq $want[$i]) {
            $good++;
        } else {
            diag("client $i: " . ($r ? $r->status . ' ' . $r->body
                                     : 'no answer'));
        }
    }
    $_->close for @c;
    return $good;
}

# --- on (the default) -------------------------------------------------------
my $t = FastdTest->new(conf => FastdTest::base_conf(
    events => { backend => 'epoll' }, locations => $locations));
$t->start;
# a first answer through the proxy: the worker is past its start-up
is($t->get('/p/first')->body, 'GET /p/first ', 'a first request');
my @ring = ring_counts($t);
SKIP: {
    if (!@ring) {
        like($t->error_log, qr/batch_sends: io_uring is not available/,
             'no io_uring here: the worker says it sends at once');
        skip 'io_uring is not available here', 2;
    }
    pass('the worker holds an io_uring');
    is(burst($t, 64, 1), 64, '64 clients at once: each got its own answer');
    is(burst($t, 64, 2), 64, 'again, on kept-alive upstream connections');
    my @after = ring_counts($t);
    cmp_ok($after[0] - $ring[0], '>=', 128,
           'each request went through the ring (' . ($after[0] - $ring[0])
           . ' sends for 128 requests)');
    is($after[1], $after[0], 'every completion was taken (CqHead = SqTail)');
}
is(burst($t, 16, 3), 16, 'smaller bursts too');
$t->no_alerts;
$t->stop;

# --- off ---------------------------------------------------------------------
$t = FastdTest->new(conf => FastdTest::base_conf(
    events => { batch_sends => 'off', backend => 'epoll' },
    locations => $locations));
$t->start;
is($t->get('/p/first')->body, 'GET /p/first ', 'off: a first request');
is(scalar(() = ring_counts($t)), 0, 'batch_sends = off: no io_uring');
is(burst($t, 64, 4), 64, 'off: 64 clients at once, each got its own answer');
$t->no_alerts;
$t->stop;

# --- a bad value ----------------------------------------------------------------
my $bad = FastdTest->new(conf => FastdTest::base_conf(
    events => { batch_sends => 'maybe' }));
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $bad->conf_file);
is($rc, 1, 'batch_sends = maybe: -t fails');
like($out, qr/\Q${\ $bad->conf_file }\E:\d+/, 'names the file and line')
    or diag($out);

done_testing();
