#!/usr/bin/perl
# [events] backend = io_uring: the worker runs on a ring (its descriptors
# show one), serves keep-alive, pipelined, Connection: close and large
# responses, closes what it closes (no socket is held open by a request
# left armed in the ring), and falls back to epoll with one [warn] per
# worker where a seccomp filter refuses io_uring_setup(). An idle
# keep-alive connection parks in its ring slot and wakes as itself. The rest
# of the suite runs on io_uring too in CI (FASTD_TEST_BACKEND=io_uring).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new;
# a 2 MB file: several sends, EAGAIN and writable edges on the way
my $big = join('', map { sprintf "%07d\n", $_ } 0 .. 262143);
$t->write_file('big.txt', $big);
my $conf = FastdTest::base_conf(
    main   => { workers => 2 },
    events => { backend => 'io_uring' },
    server => { root => '%%DIR%%' });
$t->write_conf($conf);
$t->start;

sub ring_fds {
    my ($pid) = @_;
    opendir my $dh, "/proc/$pid/fd" or return (0, 0);
    my ($ring, $all) = (0, 0);
    for my $f (readdir $dh) {
        next unless $f =~ /^\d+$/;
        my $l = readlink("/proc/$pid/fd/$f") // next;
        $all++;
        $ring++ if $l eq 'anon_inode:[io_uring]';
    }
    return ($ring, $all);
}

my @w = $t->workers;
is(scalar @w, 2, 'two workers');
# the master listens before a worker has made its ring (a loaded machine,
# a sanitizer build): wait for both, not for the first look
is(FastdTest::wait_for(sub { scalar(grep { (ring_fds($_))[0] >= 1 } @w) == 2
                             ? 2 : 0 }, 10) || 1, 2, 'each runs on a ring');
unlike($t->error_log, qr/io_uring is not available/, 'no fallback');

# keep-alive: many requests on one connection
{
    my $c = $t->connect;
    my $ok = 0;
    for my $i (1 .. 200) {
        $c->send("GET /plaintext?$i HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $c->read_response(timeout => 10);
        $ok++ if $r && $r->status == 200 && $r->body eq 'Hello, World!';
    }
    is($ok, 200, '200 keep-alive requests on one connection');
    $c->close;
}

# pipelined: 16 in one write, 16 answers in order
{
    my $req = join '', map { "GET /plaintext?$_ HTTP/1.1\r\nHost: x\r\n\r\n" }
        1 .. 16;
    my $raw = $t->raw($req, responses => 16, timeout => 10);
    my @r = FastdTest::parse_responses($raw);
    is(scalar(grep { $_->status == 200 } @r), 16, '16 pipelined requests');
}

# Connection: close, many times: every socket is closed (the worker's
# descriptors come back to where they were)
{
    my %before = map { $_ => (ring_fds($_))[1] } @w;
    my $ok = 0;
    for my $i (1 .. 100) {
        my $r = $t->get("/plaintext?c$i", Connection => 'close');
        $ok++ if $r->{status} == 200;
    }
    is($ok, 100, '100 Connection: close requests');
    my $settled = FastdTest::wait_for(sub {
        !grep { (ring_fds($_))[1] > $before{$_} } @w
    }, 10, 0.05);
    ok($settled, 'the workers hold no more descriptors than before')
        or diag(join ' ', map { "$_: " . (ring_fds($_))[1]
                                . " (was $before{$_})" } @w);
}

# a 2 MB file, whole, and read slowly
{
    my $r = $t->get('/big.txt', timeout => 20);
    is($r->{status}, 200, 'a 2 MB file');
    ok($r->{body} eq $big, 'every byte of it');
    my $c = $t->connect;
    $c->send("GET /big.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    select(undef, undef, undef, 0.5); # the socket fills, the worker waits
    my $resp = $c->read_response(timeout => 20);
    ok($resp && $resp->body eq $big, 'and to a client that reads late');
    $c->close;
}

# a client that goes away mid-response, and one that resets
{
    my $c = $t->connect;
    $c->send("GET /big.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    $c->close;
    is($t->get('/plaintext')->{status}, 200, 'served after a client left');
}

$t->stop;
$t->no_alerts;

# --- parking: an idle keep-alive connection keeps nothing but its ring
# slot, and wakes as itself --------------------------------------------------
{
    my $p = FastdTest->new(conf => FastdTest::base_conf(
        events    => { backend => 'io_uring' },
        http      => { keepalive_timeout => '3s' },
        locations => "[location = /conn]\n"
                   . "return = 200 \$connection \$connection_requests\n\n"
                   . "[location = /status]\nhandler = status\n\n"));
    $p->start;
    my $gauge = sub {
        my $r = $p->get('/status');
        return $r && $r->body =~ /"$_[0]":\s*(\d+)/ ? $1 : -1;
    };
    my $ask = sub {
        my ($c, $req) = @_;
        $c->send($req // "GET /conn HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $c->read_response(timeout => 10);
        return $r && $r->status == 200 ? $r->body : '';
    };
    my @c = map { $p->connect } 1 .. 50;
    my @id = map { ($ask->($_) =~ /^(\d+) 1$/)[0] } @c;
    is(scalar(grep { defined } @id), 50, '50 connections, one request each');
    ok(FastdTest::wait_for(sub { $gauge->('parked') >= 50 }, 10),
       'all 50 parked (status: connections.parked)')
        or diag('parked: ' . $gauge->('parked'));
    cmp_ok($gauge->('idle'), '>=', 50, 'and counted idle all along');

    my $same = grep { $ask->($c[$_]) eq "$id[$_] 2" } 0 .. $#c;
    is($same, 50, 'each woke as itself: its connection number, its 2nd '
                  . 'request');
    # two requests in one write to a parked connection, then a request in
    # two writes (the first wakes it, the second finds it awake)
    ok(FastdTest::wait_for(sub { $gauge->('parked') >= 50 }, 10),
       'parked again');
    $c[0]->send("GET /conn HTTP/1.1\r\nHost: x\r\n\r\n" x 2);
    my @r = map { $c[0]->read_response(timeout => 10) } 1 .. 2;
    is(join(',', map { $_ ? $_->body : '' } @r), "$id[0] 3,$id[0] 4",
       'a pipelined pair wakes it');
    $c[1]->send("GET /conn HTTP/1.1\r\n");
    select(undef, undef, undef, 0.2);
    is($ask->($c[1], "Host: x\r\n\r\n"), "$id[1] 3", 'a request in two '
       . 'writes');

    # a client that leaves while parked: closed, the count follows
    $c[2]->close;
    ok(FastdTest::wait_for(sub { $gauge->('active') == 50 }, 10),
       'a parked connection whose client left is closed (49 + the '
       . 'status request)');

    # the keep-alive timeout (3 s) reaches the parked
    ok($c[3]->wait_eof(10), 'keepalive_timeout closes a parked connection');
    ok(FastdTest::wait_for(sub { $gauge->('active') == 1 }, 10),
       'all of them') or diag('active: ' . $gauge->('active'));
    is($gauge->('parked'), 0, 'none parked then');

    # a graceful stop with parked connections: they are closed, the
    # worker ends
    my @d = map { $p->connect } 1 .. 20;
    is(scalar(grep { $ask->($_) =~ /^\d+ 1$/ } @d), 20, '20 more');
    ok(FastdTest::wait_for(sub { $gauge->('parked') >= 20 }, 10),
       'parked');
    $p->signal('QUIT');
    ok(defined $p->wait_exit(15), 'a graceful stop ends with them parked');
    is(scalar(grep { $_->wait_eof(5) } @d), 20, 'every one closed');
    $p->no_alerts;
}

# --- a parked connection behind a PROXY header keeps the client it named,
# and its place in max_conns_per_ip -------------------------------------------
{
    my $p = FastdTest->new(conf => FastdTest::base_conf(
        events    => { backend => 'io_uring' },
        server    => { listen => '127.0.0.1:%%PORT%% proxy_protocol',
                       max_conns_per_ip => 2 },
        locations => "[location = /who]\n"
                   . "return = 200 \$remote_addr \$connection_requests\n\n"
                   . "[location = /status]\nhandler = status\n\n"));
    $p->start;
    my $parked = sub {
        my $c = $p->connect;
        $c->send("PROXY TCP4 192.0.2.9 127.0.0.1 5000 80\r\n"
                 . "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close"
                 . "\r\n\r\n");
        my $r = $c->read_response(timeout => 10);
        return $r && $r->body =~ /"parked":\s*(\d+)/ ? $1 : -1;
    };
    my $ask = sub {
        my ($c, $head) = @_;
        $c->send(($head // '') . "GET /who HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $c->read_response(timeout => 10);
        return $r ? $r->status . ' ' . $r->body : '';
    };
    my @c = map { $p->connect } 1 .. 2;
    my @first = map {
        $ask->($c[$_], "PROXY TCP4 198.51.100.7 127.0.0.1 400$_ 80\r\n")
    } 0 .. 1;
    is("@first", '200 198.51.100.7 1 200 198.51.100.7 1',
       'two connections behind PROXY headers, from one client');
    ok(FastdTest::wait_for(sub { $parked->() >= 2 }, 10), 'both parked');
    is($ask->($c[0]), '200 198.51.100.7 2', 'woken: the client its header '
       . 'named');
    # a third from the same client is over max_conns_per_ip = 2: the two
    # parked ones count
    ok(FastdTest::wait_for(sub { $parked->() >= 2 }, 10), 'parked again');
    my $d = $p->connect;
    like($ask->($d, "PROXY TCP4 198.51.100.7 127.0.0.1 4009 80\r\n"),
         qr/^503 /, 'a third from that client is over the limit ... ');
    is($ask->($c[1]), '200 198.51.100.7 2', '... and a parked one still '
       . 'serves');
    $p->stop;
    $p->no_alerts;
}

# --- a seccomp filter refuses io_uring: epoll, and one warning per worker --
my $cc = `command -v cc 2>/dev/null`;
chomp $cc;
SKIP: {
    skip 'no C compiler for the seccomp helper', 4 unless $cc;
    my $helper = $t->dir . '/noring';
    system($cc, '-O', '-o', $helper, "$FindBin::Bin/lib/noring.c") == 0
        or skip 'the seccomp helper did not build', 4;
    truncate $t->log_file, 0;
    $t->start({ wrap => [$helper] });
    my @w = $t->workers;
    is($t->get('/plaintext')->{status}, 200, 'seccomp: served (on epoll)');
    is(scalar(grep { (ring_fds($_))[0] } @w), 0, 'no worker has a ring');
    my @warn = $t->error_log =~ /\[warn\][^\n]*io_uring is not available/g;
    is(scalar @warn, 2, 'one [warn] line per worker');
    like($t->error_log, qr/using epoll/, 'it says what it uses instead');
    $t->stop;
}

$t->no_alerts;
done_testing();
