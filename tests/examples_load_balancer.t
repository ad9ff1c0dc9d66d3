#!/usr/bin/perl
# conf/examples/load-balancer.conf as shipped (tests/lib/Examples.pm), over
# three real servers: requests go to all three in turn; one that stops, or
# one that answers 503, costs no request (the next server answers it), and
# after three failures it is left out for a while.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Examples;
use File::Temp ();
use Test::More;

my $flags = File::Temp->newdir;   # DIR/NAME.503: NAME answers 503
my $dir = $flags->dirname;
my %be = map {
    my $name = $_;
    $name => Backend->new(name => $name, handler => sub {
        my ($req) = @_;
        return Backend::response(503, "busy $name") if -e "$dir/$name.503";
        return Backend::response(200, "from $name");
    });
} qw(web1 web2 web3);

my $ex = Examples->new('load-balancer', backends => {
    '10.0.1.11:8080' => $be{web1}->addr,
    '10.0.1.12:8080' => $be{web2}->addr,
    '10.0.1.13:8080' => $be{web3}->addr });
$ex->start;
my $t = $ex->t;

sub spread {
    my ($n) = @_;
    my %from;
    for (1 .. $n) {
        my $r = $ex->get(80, "/item/$_", Host => 'www.example.com');
        my $who = $r && $r->status == 200 && $r->body =~ /^from (\w+)/
                ? $1 : 'error:' . ($r ? $r->status : 'none');
        $from{$who}++;
    }
    return \%from;
}

my $from = spread(9);
is_deeply($from, { web1 => 3, web2 => 3, web3 => 3 },
          'nine requests: three to each server') or diag(explain($from));

FastdTest::spew("$dir/web2.503", '');
$from = spread(9);
is_deeply([ sort keys %$from ], [qw(web1 web3)],
          'web2 answers 503: every request is answered by another server')
    or diag(explain($from));
ok($t->error_log =~ /server \Q${\ $be{web2}->addr }\E temporarily disabled/,
   '  three failures: web2 is left out for a while');
$be{web2}->reset_log;
$from = spread(6);
is($be{web2}->requests, 0, '  and gets no request meanwhile');
unlink "$dir/web2.503";

$be{web3}->stop;
$from = spread(9);
is($from->{web3} // 0, 0, 'web3 stops');
ok(!grep(/^error/, keys %$from), '  no request fails') or diag(explain($from));

$t->no_alerts;
done_testing;
