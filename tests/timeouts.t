#!/usr/bin/perl
# header_timeout, keepalive_timeout, keepalive_requests, and a slow but
# in-time client.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;
use Time::HiRes qw(time);

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { header_timeout => '1s', keepalive_timeout => '1s',
              keepalive_requests => 3 },
));
$t->start;

# A closed connection may carry a 408 first, nothing else.
sub only_408 {
    my ($c) = @_;
    return 1 if $c->{raw} eq '';
    my @r = FastdTest::parse_responses($c->{raw});
    return @r == 1 && $r[0]{status} == 408;
}

# --- header_timeout ------------------------------------------------------------
{
    my $c = $t->connect;
    $c->send("GET /plain");
    my $closed = $c->wait_eof(6);
    ok($closed, 'partial request line: closed by header_timeout');
    ok($closed && $c->{eof_after} >= 0.5 && $c->{eof_after} <= 3.5,
       sprintf('... after %.2f s (header_timeout = 1s)', $c->{eof_after}));
    ok(only_408($c), '... with nothing but an optional 408')
        or diag("raw: $c->{raw}");
    $c->close;
}
{
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\nX-Partial: ");
    my $closed = $c->wait_eof(6);
    ok($closed && $c->{eof_after} <= 3.5,
       sprintf('partial headers: closed after %.2f s', $c->{eof_after}));
    ok(only_408($c), '... with nothing but an optional 408');
    $c->close;
}
{
    my $c = $t->connect;
    my $closed = $c->wait_eof(6);
    ok($closed && $c->{eof_after} >= 0.5 && $c->{eof_after} <= 3.5,
       sprintf('connection that never sends: closed after %.2f s',
               $c->{eof_after}));
    is($c->{raw}, '', '... without a response');
    $c->close;
}
{
    # header_timeout is a deadline for the whole header, not per read
    my $c = $t->connect;
    my $t0 = time;
    for (1 .. 40) {
        last if $c->{eof};
        $c->send('X') or last;
        $c->wait_eof(0.1);
    }
    my $closed = $c->wait_eof(3);
    my $after = time - $t0;
    ok($closed && $after <= 3.5,
       sprintf('a trickle of bytes does not extend header_timeout (closed after %.2f s)',
               $after));
    $c->close;
}

# --- keepalive_timeout ---------------------------------------------------------
{
    my $c = $t->connect;
    $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
    my $r = $c->read_response;
    is($r && $r->{status}, 200, 'keep-alive: first response');
    my $closed = $c->wait_eof(6);
    ok($closed, 'idle keep-alive connection closed by keepalive_timeout');
    ok($closed && $c->{eof_after} >= 0.5 && $c->{eof_after} <= 3.5,
       sprintf('... after %.2f s (keepalive_timeout = 1s)', $c->{eof_after}));
    is($c->{buf}, '', '... with nothing sent');
    $c->close;
}
{
    # activity restarts the idle timer
    my $c = $t->connect;
    my $ok = 1;
    for (1 .. 2) {
        $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $c->read_response;
        $ok &&= $r && $r->{status} == 200;
        $ok &&= !$c->wait_eof(0.6);
    }
    ok($ok, 'requests 0.6 s apart keep a 1 s keep-alive connection open');
    $c->close;
}

# --- keepalive_requests ------------------------------------------------------------
{
    my $c = $t->connect;
    my @r;
    for (1 .. 3) {
        $c->send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n");
        push @r, $c->read_response;
    }
    is(scalar(grep { $_ && $_->{status} == 200 } @r), 3,
       'keepalive_requests = 3: three answers');
    unlike($r[1] ? ($r[1]->header('connection') // '') : 'close', qr/close/i,
           '... the 2nd keeps the connection');
    like($r[2] ? ($r[2]->header('connection') // '') : '', qr/^close$/i,
         '... the 3rd says Connection: close');
    ok($c->wait_eof(3), '... and the connection closes');
    $c->close;
}
{
    my $req = "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n" x 5;
    my ($raw, $eof) = $t->raw($req, timeout => 5);
    my @r = FastdTest::parse_responses($raw);
    is(scalar @r, 3, 'keepalive_requests = 3, 5 pipelined: 3 answers');
    ok($eof, '... then close');
    like(@r == 3 ? ($r[2]->header('connection') // '') : '', qr/^close$/i,
         '... the last with Connection: close');
}

$t->stop;
$t->no_alerts;

# --- a slow client within header_timeout -------------------------------------------
my $t2 = FastdTest->new(conf => FastdTest::base_conf(
    http => { header_timeout => '5s' },
));
$t2->start;
{
    my $req = "GET /json HTTP/1.1\r\nHost:x\r\n\r\n";   # 30 bytes: 3 s
    my $c = $t2->connect;
    my $t0 = time;
    $c->send_slowly($req, size => 1, delay => 0.1);
    my $r = $c->read_response(timeout => 5);
    is($r && $r->{status}, 200,
       sprintf('one byte every 100 ms (%.1f s in all, header_timeout = 5s): 200',
               time - $t0));
    $c->close;
}
{
    # and the body, too
    my $c = $t2->connect;
    $c->send("POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n");
    $c->send_slowly('0123456789', size => 1, delay => 0.1);
    my $r = $c->read_response(timeout => 5);
    is($r && $r->{status}, 200, 'a body one byte every 100 ms: 200');
    $c->close;
}
$t2->stop;
$t2->no_alerts;

done_testing;
