#!/usr/bin/perl
# conf/examples/reverse-proxy-websocket.conf as shipped (tests/lib/
# Examples.pm), in front of two real instances: requests go to both, with
# X-Forwarded-For; /ws/ upgrades to a WebSocket tunnel that carries bytes
# both ways, while an Upgrade elsewhere is not passed on; an instance whose
# /healthz fails (while it still answers everything else, so only the
# health check can tell) is taken out by the check (as /status shows) and
# comes back when it passes again; an instance that stops is never a
# user's error.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Examples;
use Test::More;

use File::Temp ();
my $flags = File::Temp->newdir;   # DIR/NAME.sick: NAME's /healthz fails
my $dir = $flags->dirname;

# an instance: /healthz 200, or 503 while DIR/NAME.sick exists; a
# WebSocket echo; else its name and what it got
sub instance {
    my ($name) = @_;
    return Backend->new(name => $name, handler => sub {
        my ($req, $c) = @_;
        return Backend::response(-e "$dir/$name.sick" ? 503 : 200, 'ok')
            if $req->{path} eq '/healthz';
        return Backend::websocket_echo($c)
            if ($req->{headers}{upgrade} // '') eq 'websocket';
        my $b = "from $name\n";
        $b .= "$_->[0]: $_->[1]\n" for @{ $req->{hlist} };
        return Backend::response(200, $b);
    });
}
my %be = map { $_ => instance($_) } qw(a b);

my $ex = Examples->new('reverse-proxy-websocket', backends => {
    '127.0.0.1:3000' => $be{a}->addr, '127.0.0.1:3001' => $be{b}->addr });
$ex->start;
my $t = $ex->t;

sub get { $ex->get(80, $_[0], Host => 'app.example.com', @_[1 .. $#_]) }

# who answered N requests: { a => n, b => n, 'error:STATUS' => n }
sub spread {
    my ($n) = @_;
    my %from;
    for (1 .. $n) {
        my $r = get("/page/$_");
        my $who = $r && $r->status == 200 && $r->body =~ /^from (\w+)/
                ? $1 : 'error:' . ($r ? $r->status : 'none');
        $from{$who}++;
    }
    return \%from;
}
sub log_has {
    my ($re) = @_;
    return FastdTest::wait_for(sub { $t->error_log =~ $re }, 20, 0.1);
}

# --- proxying ----------------------------------------------------------------

my $from = spread(10);
is_deeply($from, { a => 5, b => 5 }, 'requests go to both instances in turn')
    or diag(explain($from));
my $r = get('/who', 'X-Forwarded-For' => '198.51.100.1');
like($r && $r->body, qr/^X-Forwarded-For: 198\.51\.100\.1, 127\.0\.0\.1$/mi,
     'the instance sees X-Forwarded-For with the client');
like($r && $r->body, qr/^X-Real-IP: 127\.0\.0\.1$/mi, '  and X-Real-IP');

# --- WebSocket -----------------------------------------------------------------

my $upgrade = "Host: app.example.com\r\nUpgrade: websocket\r\n"
            . "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            . "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
my $c = $t->connect(port => $ex->port(80));
$c->send("GET /ws/chat HTTP/1.1\r\n$upgrade");
ok($c->wait_for_bytes(qr/\r\n\r\n/), 'a WebSocket upgrade on /ws/ is answered');
like($c->{raw}, qr{^HTTP/1\.1 101 }, '  101 Switching Protocols');
my $mark = length $c->{raw};
$c->send("\x81\x05hello");   # a text frame (the instance echoes bytes)
ok($c->wait_for_bytes(qr/\x81\x05hello\z/), 'bytes go through the tunnel both ways');
$c->send("\x81\x03bye");
ok($c->wait_for_bytes(qr/\x81\x03bye\z/), '  and again');
$c->close;

$r = $t->http("GET /page HTTP/1.1\r\n$upgrade", port => $ex->port(80));
is($r && $r->status, 200, 'an Upgrade outside /ws/: no tunnel, a 200');
unlike($r && $r->body, qr/^Upgrade:/mi, '  the instance never saw the Upgrade');

# --- health checks -----------------------------------------------------------

FastdTest::spew("$dir/b.sick", '');
my $bname = qr/server \Q${\ $be{b}->addr }\E/;
ok(log_has(qr/$bname failed its health check \(status[^)]*\): taken out/),
   'b answers /healthz with 503: the health check takes it out');
$from = spread(6);
is_deeply($from, { a => 6 }, '  requests go to a alone (b still answers them)')
    or diag(explain($from));
$r = get('/status?format=prometheus');
my $prom = $r && $r->status == 200 ? $r->body : '';
like($prom, qr/^fastd_upstream_check_up\{upstream="app",server="\Q${\ $be{b}->addr }\E"\} 0$/m,
     '  /status says b is down');
like($prom, qr/^fastd_upstream_check_up\{upstream="app",server="\Q${\ $be{a}->addr }\E"\} 1$/m,
     '  and a is up');

unlink "$dir/b.sick";
ok(log_has(qr/$bname passed its health check: back in the group/),
   'b passes again: back in the group');
$from = spread(6);
is_deeply($from, { a => 3, b => 3 }, '  requests go to both again')
    or diag(explain($from));

$be{a}->stop;
$from = spread(6);
is_deeply($from, { b => 6 }, 'a stops: no request fails, b answers them all')
    or diag(explain($from));
ok(log_has(qr/server \Q${\ $be{a}->addr }\E failed its health check/),
   '  and the health check takes a out');

$t->no_alerts;
done_testing;
