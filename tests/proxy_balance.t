#!/usr/bin/perl
# proxy: how requests spread over the servers of an upstream: weighted
# round robin, least_conn, consistent hashing (stable keys, and losing a
# server moves only its keys), backup and down servers.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;
use Time::HiRes qw(sleep time);

my $handler = sub {
    my ($req) = @_;
    # long enough that 20 quick requests finish first on a loaded CI box
    sleep 4 if $req->{path} =~ m{/slow$};
    return Backend::response(200, "port=$req->{port}",
                             'X-Backend-Port' => $req->{port});
};
my @be = map { Backend->new(handler => $handler) } 1 .. 4;
my @port = map { $_->port } @be;

sub upstreams {
    my (%o) = @_;
    my $s = '';
    $s .= "[upstream rr]\n"
        . "server = 127.0.0.1:$port[0] weight=1\n"
        . "server = 127.0.0.1:$port[1] weight=2\n"
        . "server = 127.0.0.1:$port[2] weight=3\n"
        . "server = 127.0.0.1:$port[3] down\n"
        . "keepalive = 8\n\n";
    $s .= "[upstream lc]\nbalance = least_conn\n"
        . "server = 127.0.0.1:$port[0]\nserver = 127.0.0.1:$port[1]\n\n";
    $s .= "[upstream hash]\nbalance = hash\nhash_key = \$uri\n"
        . join('', map { "server = 127.0.0.1:$_\n" }
                   @port[0 .. ($o{hash_servers} // 3) - 1]) . "\n";
    $s .= "[upstream hh]\nbalance = hash\nhash_key = \$http_x_user\n"
        . "server = 127.0.0.1:$port[0]\nserver = 127.0.0.1:$port[1]\n"
        . "server = 127.0.0.1:$port[2]\n\n";
    $s .= "[upstream bk]\nserver = 127.0.0.1:$port[0]\n"
        . "server = 127.0.0.1:$port[1] backup\n\n";
    return $s;
}

my $locations = FastdTest::proxy_locations(qw(rr lc hash hh bk));

my $t = FastdTest->new(conf => FastdTest::base_conf(
    locations => $locations, extra => upstreams()));
$t->start;

# which backend answered a request, over one keep-alive connection
my $conn;
sub port_of {
    my ($path, %h) = @_;
    for (1 .. 2) {
        $conn ||= $t->connect(timeout => 10);
        my $req = "GET $path HTTP/1.1\r\nHost: x\r\n";
        $req .= "$_: $h{$_}\r\n" for sort keys %h;
        $conn->send("$req\r\n");
        my $r = $conn->read_response(timeout => 10);
        return $r->header('X-Backend-Port') // "status " . $r->status if $r;
        $conn = undef;
    }
    return 'none';
}

# --- weighted round robin ---------------------------------------------------------
my %n;
$n{ port_of("/rr/$_") }++ for 1 .. 600;
is($n{$port[0]} // 0, 100, 'weight=1 got 1/6 of 600');
is($n{$port[1]} // 0, 200, 'weight=2 got 2/6');
is($n{$port[2]} // 0, 300, 'weight=3 got 3/6');
ok(!$n{$port[3]}, 'a server marked down got none');
# smooth: the heaviest never takes more than its share in a row
my @seq = map { port_of("/rr/s$_") } 1 .. 12;
my ($run, $max) = (0, 0);
for my $i (0 .. $#seq) {
    $run = $i && $seq[$i] eq $seq[$i - 1] ? $run + 1 : 1;
    $max = $run if $run > $max;
}
ok($max <= 2, "smooth round robin: at most 2 in a row to one server ($max)");

# --- least_conn -----------------------------------------------------------------------
{
    $_->reset_log for @be[0, 1];
    my $slow = $t->connect(timeout => 10);
    my $start = time;
    $slow->send("GET /lc/slow HTTP/1.1\r\nHost: x\r\n\r\n");
    # the slow one is in progress on one server: every quick request that
    # starts meanwhile goes to the other
    ok(FastdTest::wait_for(sub { grep { $_->requests } @be[0, 1] }, 5),
       'the slow request reached a backend');
    my %q;
    $q{ port_of("/lc/q$_") }++ for 1 .. 20;
    my $elapsed = time - $start;
    my $sr = $slow->read_response(timeout => 10);
    my $busy = $sr ? $sr->header('X-Backend-Port') : 'none';
    my ($other) = grep { $_ != $busy } @port[0, 1];
    ok($elapsed < 4, 'the quick requests ran while the slow one was in progress')
        or diag("took $elapsed s");
    is($q{$other} // 0, 20, "least_conn: all 20 went to the idle server") or diag(explain [\%q, $busy, \@port]);
    # with nothing in progress, it alternates again
    %q = ();
    $q{ port_of("/lc/e$_") }++ for 1 .. 20;
    is_deeply([ sort { $a <=> $b } values %q ], [ 10, 10 ],
              'least_conn: equal loads alternate');
}

# --- consistent hashing ---------------------------------------------------------------
my @keys = map { "/hash/key$_" } 1 .. 300;
my %map1 = map { $_ => port_of($_) } @keys;
my %map2 = map { $_ => port_of($_) } @keys;
is_deeply(\%map2, \%map1, 'hash: the same key goes to the same server');
my %share;
$share{$_}++ for values %map1;
ok(keys %share == 3 && !grep({ $_ < 50 } values %share),
   'hash: keys spread over the 3 servers') or diag(explain \%share);

is(port_of('/hh/a', 'X-User' => 'alice'), port_of('/hh/b', 'X-User' => 'alice'),
   'hash on $http_x_user: same user, same server, any URI');

# a configuration without the third server: only its keys move
{
    my $t2 = FastdTest->new(conf => FastdTest::base_conf(
        locations => $locations, extra => upstreams(hash_servers => 2)));
    $t2->start;
    my $c2;
    my %map3;
    for my $k (@keys) {
        $c2 ||= $t2->connect(timeout => 10);
        $c2->send("GET $k HTTP/1.1\r\nHost: x\r\n\r\n");
        my $r = $c2->read_response(timeout => 10);
        $map3{$k} = $r ? $r->header('X-Backend-Port') : 'none';
    }
    my @moved = grep { $map1{$_} != $port[2] && $map3{$_} ne $map1{$_} } @keys;
    is(scalar @moved, 0, 'hash: with a server removed, keys of the others stay');
    ok(!grep({ $map3{$_} eq $port[2] } @keys), 'hash: its own keys went elsewhere');
    $t2->stop;
    $t2->no_alerts;
}

# the third server fails: its keys move, nothing else does
$be[2]->stop;
my %map4 = map { $_ => port_of($_) } @keys;
my @moved = grep { $map1{$_} != $port[2] && $map4{$_} ne $map1{$_} } @keys;
is(scalar @moved, 0, 'hash: a failed server moves only its own keys');
ok(!grep({ $map4{$_} !~ /^\d+$/ } @keys), 'hash: and every request was answered');
$be[2]->start;

# --- backup ---------------------------------------------------------------------------------
%n = ();
$n{ port_of("/bk/$_") }++ for 1 .. 10;
is($n{$port[0]} // 0, 10, 'backup: unused while the primary works');
$be[0]->stop;
%n = ();
$n{ port_of("/bk/d$_") }++ for 1 .. 10;
is($n{$port[1]} // 0, 10, 'backup: takes over when the primary is down');
$be[0]->start;

$t->stop;
$t->no_alerts;
done_testing;
