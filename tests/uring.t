#!/usr/bin/perl
# [events] backend = io_uring: the worker runs on a ring (its descriptors
# show one), serves keep-alive, pipelined, Connection: close and large
# responses, closes what it closes (no socket is held open by a request
# left armed in the ring), and falls back to epoll with one [warn] per
# worker where a seccomp filter refuses io_uring_setup(). The rest of the
# suite runs on io_uring too in CI (FASTD_TEST_BACKEND=io_uring).

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
is(scalar(grep { (ring_fds($_))[0] >= 1 } @w), 2, 'each runs on a ring');
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
