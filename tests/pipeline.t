#!/usr/bin/perl
# Pipelining: many requests in one packet, answered in order.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => '%%DIR%%/www' }));
mkdir $t->dir . '/www';
$t->write_file('www/two-k.txt', 'y' x 2048);
$t->start;

my $plain = "GET /plaintext HTTP/1.1\r\nHost: localhost\r\n\r\n";
my $json  = "GET /json HTTP/1.1\r\nHost: localhost\r\n\r\n";

# 16 in one send
{
    my $c = $t->connect;
    $c->send($plain x 16);
    my @r = $c->read_responses(16, timeout => 5);
    is(scalar @r, 16, '16 pipelined requests: 16 responses');
    is(scalar(grep { $_->{status} == 200 && $_->{body} eq 'Hello, World!' } @r),
       16, 'all 16 are 200 Hello, World!');
    is(scalar(grep { $_->{error} } @r), 0, 'all 16 parse cleanly');
    ok(!$c->wait_eof(0.3), 'connection stays open after the batch');
    is($c->{buf}, '', 'no extra bytes after the 16 responses');
    # and the connection still works
    $c->send($json);
    my $x = $c->read_response;
    is($x && $x->{status}, 200, 'a request after the batch is answered');
    $c->close;
}

# mixed, in order (404s mark positions)
{
    my @paths = map { ('/plaintext', '/json', "/missing-$_") } 1 .. 6;
    my $req = join '', map { "GET $_ HTTP/1.1\r\nHost: localhost\r\n\r\n" } @paths;
    my $c = $t->connect;
    $c->send($req);
    my @r = $c->read_responses(scalar @paths, timeout => 5);
    is(scalar @r, scalar @paths, 'mixed pipeline: all answered');
    my @want = map { /plaintext/ ? 'plain' : /json/ ? 'json' : 404 } @paths;
    my @got = map {
        $_->{status} == 404 ? 404
      : $_->{body} eq 'Hello, World!' ? 'plain'
      : $_->{body} =~ /"message"/ ? 'json' : "?$_->{status}"
    } @r;
    is_deeply(\@got, \@want, 'mixed pipeline: responses in request order');
    $c->close;
}

# HEAD in the middle of a pipeline
{
    my $req = $plain . "HEAD /plaintext HTTP/1.1\r\nHost: x\r\n\r\n" . $json;
    my $c = $t->connect;
    $c->send($req);
    my @r = $c->read_responses(3, head => [0, 1, 0]);
    is(scalar @r, 3, 'pipeline with HEAD: 3 responses');
    ok(@r == 3 && $r[1]{body} eq '' && $r[2]{body} =~ /message/,
       'pipeline with HEAD: HEAD has no body, next one intact');
    $c->close;
}

# the last request split across two sends
{
    my $all = $plain x 16;
    my $cut = length($all) - 20;
    my $c = $t->connect;
    $c->send(substr($all, 0, $cut));
    my @r = $c->read_responses(15, timeout => 5);
    is(scalar @r, 15, 'split pipeline: 15 complete requests answered first');
    ok(!defined $c->read_response(timeout => 0.3),
       'split pipeline: no answer to the incomplete request yet');
    $c->send(substr($all, $cut));
    my @r2 = $c->read_responses(1, timeout => 5);
    is(scalar @r2, 1, 'split pipeline: the completed 16th is answered');
    is($r2[0] && $r2[0]{body}, 'Hello, World!', 'split pipeline: 16th body');
    $c->close;
}

# split in the middle of the header section, at the CRLF CRLF
{
    my $all = $plain x 3;
    my $c = $t->connect;
    my $cut = length($plain) * 2 + length($plain) - 2;   # before the last CRLF
    $c->send(substr($all, 0, $cut));
    my @r = $c->read_responses(2);
    $c->send(substr($all, $cut));
    push @r, $c->read_responses(1);
    is(scalar @r, 3, 'split at the final CRLF: 3 responses');
    $c->close;
}

# a batch larger than one read buffer
{
    my $n = 200;
    my $req = join '', map { $_ % 2 ? $json : $plain } 0 .. $n - 1;
    my $c = $t->connect;
    $c->send($req);
    my @r = $c->read_responses($n, timeout => 10);
    is(scalar @r, $n, "$n pipelined requests (" . length($req) . " bytes): all answered");
    my $bad = grep {
        my $want = $_ % 2 ? qr/"message"/ : qr/^Hello, World!$/;
        !($r[$_] && $r[$_]{status} == 200 && $r[$_]{body} =~ $want)
    } 0 .. $n - 1;
    is($bad, 0, "$n pipelined requests: in order");
    $c->close;
}

# A batch that fits in one read but whose answers pass the output
# high-water mark (64 KB): the engine stops, writes, and must go on with
# the requests still in its buffer although the socket holds nothing new
# (edge-triggered: no event would come for them).
{
    my $n = 120;   # 120 x 2 KB of answers; the requests fit in one read
    my $req = "GET /two-k.txt HTTP/1.1\r\nHost: x\r\n\r\n" x $n;
    my $c = $t->connect;
    $c->send($req);
    my @r = $c->read_responses($n, timeout => 10);
    is(scalar @r, $n, "$n pipelined requests for 2 KB each (" . length($req)
                      . " bytes, one read): all answered past the high-water mark");
    is(scalar(grep { $_->{status} == 200 && length $_->{body} == 2048 } @r), $n,
       '... each whole');
    $c->close;
}

# 16 in one send, followed by Connection: close in the last one
{
    my $req = ($plain x 15)
        . "GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    my ($raw, $eof) = $t->raw($req, timeout => 5);
    my @r = FastdTest::parse_responses($raw);
    is(scalar @r, 16, 'pipeline ending with Connection: close: 16 responses');
    ok($eof, '... then the server closes');
}

# requests after a Connection: close in a pipeline are not answered
{
    my $req = $plain . "GET /plaintext HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        . $plain;
    my ($raw, $eof) = $t->raw($req, timeout => 5);
    my @r = FastdTest::parse_responses($raw);
    is(scalar @r, 2, 'nothing answered after Connection: close');
    ok($eof, '... and the connection is closed');
}

$t->stop;
$t->no_alerts;
done_testing;
