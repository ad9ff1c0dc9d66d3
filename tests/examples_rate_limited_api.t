#!/usr/bin/perl
# conf/examples/rate-limited-api.conf as shipped (tests/lib/Examples.pm),
# behind a "balancer" (this test, sending each connection's PROXY header)
# and in front of two real API servers: the API servers see the client
# the header names (X-Real-IP, X-Forwarded-For), a connection without the
# header is closed unanswered, a client past its rate and burst gets 429
# while another client behind the same balancer keeps its own allowance,
# /healthz is never limited, requests reach both API servers, and the
# access log names the clients, not the balancer.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Examples;
use Test::More;

my %api = map {
    my $name = $_;
    $name => Backend->new(name => $name, handler => sub {
        my ($req) = @_;
        my $b = "from $name\n";
        $b .= "$_->[0]: $_->[1]\n" for @{ $req->{hlist} };
        return Backend::response(200, $b);
    });
} qw(api1 api2);
my $ex = Examples->new('rate-limited-api', backends => {
    '10.0.3.21:9000' => $api{api1}->addr,
    '10.0.3.22:9000' => $api{api2}->addr });
$ex->start;
my $t = $ex->t;
my $port = $ex->port(8080);

# $n requests from client $ip at once, each on its own connection as the
# balancer opens them (its PROXY header first); their responses, in order
sub from {
    my ($ip, $n, $path) = @_;
    my @c = map { $t->connect(port => $port) } 1 .. $n;
    for my $i (0 .. $#c) {
        $c[$i]->send("PROXY TCP4 $ip 192.0.2.10 " . (40000 + $i) . " 8080\r\n"
                     . "GET " . ($path // "/v1/items/$i") . " HTTP/1.1\r\n"
                     . "Host: api.example.com\r\nConnection: close\r\n\r\n");
    }
    my @r = map { $_->read_response(timeout => 10) } @c;
    $_->close for @c;
    return @r;
}
sub statuses {
    my %n;
    $n{ $_ ? $_->status : 'none' }++ for @_;
    return \%n;
}

my ($r) = from('203.0.113.7', 1, '/v1/me');
ok($r && $r->status == 200, 'a request through the balancer');
like($r && $r->body, qr/^X-Real-IP: 203\.0\.113\.7$/m,
     '  the API server sees the client of the PROXY header (X-Real-IP)');
like($r && $r->body, qr/^X-Forwarded-For: 203\.0\.113\.7$/m,
     '  and X-Forwarded-For');

my $c = $t->connect(port => $port);
$c->send("GET /v1/me HTTP/1.1\r\nHost: api.example.com\r\n\r\n");
ok($c->wait_eof(10) && $c->{raw} eq '',
   'a connection without the PROXY header is closed unanswered');
$c->close;

# 60 at once: 10 r/s with a burst of 20 lets 21 and a few more through
# (however slow the machine, not all 60), and refuses the rest with 429
my $one = statuses(from('203.0.113.7', 60));
ok(($one->{429} // 0) >= 1, "a client past its rate gets 429 ($one->{429} of 60)")
    or diag(explain($one));
ok(($one->{200} // 0) >= 20, '  after its burst passed') or diag(explain($one));
is(($one->{200} // 0) + ($one->{429} // 0), 60, '  and nothing else')
    or diag(explain($one));

my $two = statuses(from('198.51.100.9', 15));
is_deeply($two, { 200 => 15 },
          'another client behind the same balancer keeps its own allowance')
    or diag(explain($two));

my $h = statuses(from('203.0.113.7', 30, '/healthz'));
is_deeply($h, { 200 => 30 }, '/healthz is never limited')
    or diag(explain($h));

ok($api{api1}->requests > 0 && $api{api2}->requests > 0,
   'requests reach both API servers');
# the access log (buffered: written within a second, or at the stop)
my $log = "" . $ex->dir . '/access.log';
my $seen = FastdTest::wait_for(sub {
    my $l = FastdTest::slurp($log) // '';
    return $l =~ /^203\.0\.113\.7 .*" 429 /m && $l =~ /^198\.51\.100\.9 .*" 200 /m;
}, 10, 0.1);
ok($seen, 'the access log names the clients, the limited one with its 429')
    or diag(FastdTest::slurp($log) // 'no access log');
unlike(FastdTest::slurp($log) // '', qr/^127\.0\.0\.1 .*"GET \/v1\//m,
       '  never the balancer');

$t->no_alerts;
done_testing;
