#!/usr/bin/perl
# events.edge_triggered x events.read_until_eagain: every combination
# serves, pipelines, reassembles small writes, and answers a peer that sends
# its request and FIN together.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $plain = "GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n";

for my $et (qw(on off)) {
    for my $rue (qw(on off)) {
        my $tag = "edge_triggered=$et read_until_eagain=$rue";
        my $t = FastdTest->new(conf => FastdTest::base_conf(
            events => { edge_triggered => $et, read_until_eagain => $rue },
        ));
        $t->start;

        my $r = $t->get('/plaintext');
        is($r && $r->{status}, 200, "$tag: plaintext 200");

        {
            my $c = $t->connect;
            $c->send($plain x 16);
            my @r = $c->read_responses(16, timeout => 5);
            is(scalar(grep { $_->{status} == 200 } @r), 16,
               "$tag: 16 pipelined answered");
            $c->close;
        }

        {
            # a ~4 KB request in 64-byte writes
            my $req = "GET /json HTTP/1.1\r\nHost: localhost\r\n"
                . join('', map { sprintf "X-Pad-%03d: %s\r\n", $_, 'p' x 40 } 1 .. 70)
                . "\r\n";
            my $c = $t->connect;
            $c->sock->setsockopt(Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
            $c->send_slowly($req, size => 64, delay => 0.002);
            my $x = $c->read_response(timeout => 5);
            is($x && $x->{status}, 200,
               "$tag: a " . length($req) . "-byte request in 64-byte writes");
            $c->close;
        }

        {
            # a 4 KB body in 100-byte writes, then a pipelined request
            my $body = 'b' x 4000;
            my $t2 = $t;
            my $c = $t->connect;
            $c->sock->setsockopt(Socket::IPPROTO_TCP(), Socket::TCP_NODELAY(), 1);
            my $req = "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n"
                . $body . $plain;
            $c->send_slowly($req, size => 100, delay => 0.002);
            my @x = $c->read_responses(2, timeout => 5);
            is(scalar(grep { $_->{status} == 200 } @x), 2,
               "$tag: a body in 100-byte writes, then a pipelined request");
            $c->close;
        }

        {
            # data and FIN together
            my $c = $t->connect;
            $c->send($plain);
            $c->shut_wr;
            my $x = $c->read_response(timeout => 5);
            is($x && $x->{status}, 200, "$tag: request + FIN: full response");
            is($x && $x->{body}, 'Hello, World!', "$tag: request + FIN: body");
            ok($c->wait_eof(5), "$tag: request + FIN: then the server closes");
            $c->close;
        }

        {
            # 16 pipelined + FIN
            my ($raw, $eof) = $t->raw($plain x 16, shut_wr => 1, timeout => 5);
            my @x = FastdTest::parse_responses($raw);
            is(scalar(grep { $_->{status} == 200 } @x), 16,
               "$tag: 16 pipelined + FIN: 16 responses");
            ok($eof, "$tag: 16 pipelined + FIN: then closed");
        }

        {
            # a partial request + FIN: closed, no hang
            my ($raw, $eof) = $t->raw("GET /plaintext HTTP/1.1\r\nHo",
                                      shut_wr => 1, timeout => 5);
            ok($eof, "$tag: partial request + FIN: closed without waiting for a timeout");
        }

        {
            # FIN alone on a fresh connection
            my ($raw, $eof) = $t->raw('', shut_wr => 1, timeout => 5);
            ok($eof && $raw eq '', "$tag: FIN alone: closed silently");
        }

        is($t->get('/json')->{status}, 200, "$tag: still serving");
        $t->stop;
        $t->no_alerts;
    }
}

done_testing;
