#!/usr/bin/perl
# The access phase runs before a buffered request body is read (as nginx):
# a refused client is answered without uploading its body and is never
# sent "100 Continue"; a body already in the buffer is skipped so the
# connection stays usable; a request held by a queue reads its body when
# it is let in (also a body that arrives during the wait, and
# 100-continue only then); a rewrite's answer skips the body too.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;
use Time::HiRes qw(time);

my $locations = <<'EOF';
[location = /status]
handler = status

[location /deny]
handler = plaintext
deny = all
max_body_size = 64m

[location /ok]
handler = plaintext

[location = /held]
handler = delay
delay = 500ms
queue = one

[location = /after]
handler = plaintext
queue = one

[location /moved]
return = 301 /ok

EOF

my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => $locations,
    extra     => "[queue one]\nmax_concurrent = 1\nqueue_limit = 4\n"));
$t->start;

sub post {
    my ($path, $len, %h) = @_;
    my $req = "POST $path HTTP/1.1\r\nHost: localhost\r\nContent-Length: $len\r\n";
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    return "$req\r\n";
}

sub wait_q { $t->wait_queue('one', @_) }

# --- refused before the body ------------------------------------------------
{
    my $c = $t->connect;
    my $t0 = time;
    $c->send(post('/deny', 50_000_000) . 'x' x 10);
    my $r = $c->read_response(timeout => 5);
    is($r && $r->status, 403, 'a refused POST of 50 MB is answered at once');
    ok(time - $t0 < 4, '... without waiting for its body');
    like($r && $r->header('connection') // '', qr/close/i,
         '... and the connection closes (the body is not in the buffer)');
}
{
    my $c = $t->connect;
    $c->send(post('/deny', 100, Expect => '100-continue'));
    my $r = $c->read_response(timeout => 5);
    is($r && $r->status, 403, 'Expect: 100-continue to a refused location: 403');
    unlike($c->{raw}, qr/^HTTP\/1\.1 100/m, '... and no 100 Continue first');
}
{
    # the small body is in the buffer: skipped, the next request answered
    my $c = $t->connect;
    $c->send(post('/deny', 5) . 'hello' .
             "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $r1 = $c->read_response(timeout => 5);
    my $r2 = $c->read_response(timeout => 5);
    is($r1 && $r1->status, 403, 'refused POST with its body in one write: 403');
    is($r2 && $r2->status, 200, '... and the pipelined GET behind it: 200');
    is($r2 && $r2->body, 'Hello, World!', '... its body');
}
{
    my $c = $t->connect;
    $c->send(post('/moved', 4) . 'abcd' .
             "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $r1 = $c->read_response(timeout => 5);
    my $r2 = $c->read_response(timeout => 5);
    is($r1 && $r1->status, 301, 'a return = 301 location answers a POST');
    is($r2 && $r2->status, 200, '... skips its body and serves the next one');
}
{
    # allowed: the body is read as before
    my $c = $t->connect;
    $c->send(post('/ok', 5) . 'hello' .
             "GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $r1 = $c->read_response(timeout => 5);
    my $r2 = $c->read_response(timeout => 5);
    is($r1 && $r1->status, 200, 'an allowed POST: 200');
    is($r2 && $r2->status, 200, '... and the one behind it');
}

# --- held by a queue: the body is read when the request is let in ----------
{
    my $a = $t->connect;
    $a->send("GET /held HTTP/1.1\r\nHost: localhost\r\n\r\n");
    ok(wait_q(sub { $_[0]{active} == 1 }), 'A holds the only slot');

    # B: header only; its body comes while it waits
    my $b = $t->connect;
    $b->send(post('/after', 6));
    ok(wait_q(sub { $_[0]{waiting} == 1 }), 'B (a POST) waits in the queue');
    $b->send('waited');
    $b->send("GET /ok HTTP/1.1\r\nHost: localhost\r\n\r\n");

    # C: asks for 100-continue; it must not come while C waits
    my $c = $t->connect;
    $c->send(post('/after', 3, Expect => '100-continue'));
    ok(wait_q(sub { $_[0]{waiting} == 2 }), 'C (Expect: 100-continue) waits');

    my $ra = $a->read_response(timeout => 5);
    is($ra && $ra->status, 200, 'A done');
    my $rb = $b->read_response(timeout => 5);
    is($rb && $rb->status, 200, 'B let in: its body read, 200');
    my $rb2 = $b->read_response(timeout => 5);
    is($rb2 && $rb2->status, 200, "B's pipelined request behind the body: 200");

    my $deadline = time + 5;
    $c->_fill($deadline) until $c->{raw} =~ /\r\n\r\n/ || time > $deadline;
    like($c->{raw}, qr/^HTTP\/1\.1 100 Continue\r\n\r\n/,
         'C let in: now 100 Continue');
    $c->send('abc');
    my $rc = $c->read_response(timeout => 5);   # the 100 Continue
    $rc = $c->read_response(timeout => 5) while $rc && $rc->status < 200;
    is($rc && $rc->status, 200, 'C sends its body: 200');
    ok(wait_q(sub { $_[0]{active} == 0 && $_[0]{waiting} == 0 }),
       'the slot is given back');
}

$t->no_alerts;
done_testing;
