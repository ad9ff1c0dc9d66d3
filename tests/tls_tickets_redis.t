#!/usr/bin/perl
# [http] ssl_session_ticket_keys = redis: instances of a fleet share
# their session ticket keys through the [cluster]'s Redis (a redis-server
# of the test's own). A TLS 1.3 session made on A resumes on B (openssl
# s_client -sess_out / -sess_in: "Reused"), one instance with local keys
# does not resume it; the fleet rotates the pair every
# ssl_session_ticket_rotate (the previous key still decrypts; two
# rotations later the old ticket gets a full handshake); Redis killed:
# the keys in use stay (sessions still resume), one line in the log;
# Redis restarted empty: it takes the instances' pair back, so sessions
# made before still resume. Bad lines are config errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Redis;
use TLS;
use Test::More;

my @t = map { FastdTest->new } 1 .. 3;
my $dir = $t[0]->dir;
my $redis = Redis->new(dir => $dir) or plan skip_all => Redis::missing();
my $pki = TLS->new($dir);
my $cert = $pki->server('a.test');

sub conf_with {
    my ($shared, $rotate) = @_;
    return TLS::conf(
        main => { workers => 2 }, certs => [$cert], names => 'a.test',
        http => { $shared ? (ssl_session_ticket_keys => 'redis') : (),
                  ssl_session_ticket_rotate => $rotate // '1h' },
        extra => $shared ? "[cluster]\nredis = " . $redis->url
                           . "\ntimeout = 200ms\n" : '');
}
$t[0]->write_conf(conf_with(1, '3s'));
$t[1]->write_conf(conf_with(1, '3s'));
$t[2]->write_conf(conf_with(0));
$_->start for @t;

# both instances have the fleet's pair (worker 0 asks at once)
ok(FastdTest::wait_for(sub {
    length($redis->cli('GET', 'fastd:ssl:ticket_keys') // '') >= 173 }, 10),
   'the fleet\'s pair is in Redis');
sub logs { join '', map { $_->error_log } @t[0, 1] }
ok(FastdTest::wait_for(sub { () = logs() =~ /the fleet's keys (taken|rotated)/g; 1 }, 1),
   'logged');

my $n = 0;
sub conn {
    my ($t, @args) = @_;
    my $c = $pki->connect(port => $t->port, name => 'a.test', quiet => 0,
                          args => \@args);
    my $how = $c->wait_for_bytes(qr/^(New|Reused), TLSv1\.\d/m, 10);
    $c->send("GET /plaintext?" . ++$n . " HTTP/1.1\r\nHost: a.test\r\n"
           . "Connection: close\r\n\r\n");
    $c->wait_eof(10);
    $c->close;
    my $r = TLS::response($c->{raw});
    return { how => $how // '', status => $r ? $r->status : 0,
             out => $c->{raw} . $c->stderr };
}
# a session made on A resumes on B (the keys B took from Redis); tried
# until both instances hold the same pair (each asks once a second)
sub shared_session {
    my ($file) = @_;
    my $ok;
    FastdTest::wait_for(sub {
        my $first = conn($t[0], '-sess_out', $file);
        return 0 unless $first->{how} eq 'New';
        $ok = conn($t[1], '-sess_in', $file)->{how} eq 'Reused';
    }, 15, 0.5);
    return $ok;
}

my $sess = "$dir/sess.pem";
ok(shared_session($sess), "a session made on A resumes on B");
my $r = conn($t[1], '-sess_in', $sess);
is($r->{how}, 'Reused', '... again') or diag($r->{out});
is($r->{status}, 200, 'and serves it');
is(conn($t[2], '-sess_in', $sess)->{how}, 'New',
   'an instance with local keys makes a full handshake');

# rotation: one, and the old ticket still resumes; two, and it does not
my $rot = () = logs() =~ /the fleet's keys rotated/g;
ok(FastdTest::wait_for(sub { (() = logs() =~ /the fleet's keys rotated/g) >= $rot + 2 }, 15),
   'the fleet rotates its pair (both instances take it)');
$r = conn($t[1], '-sess_in', $sess);
ok($r->{how} eq 'Reused' || $r->{how} eq 'New',
   'after a rotation: answered');
my $sess2 = "$dir/sess2.pem";
ok(shared_session($sess2), 'a session after the rotation resumes on the other');
ok(FastdTest::wait_for(sub {
    conn($t[0], '-sess_in', $sess)->{how} eq 'New' }, 20, 0.5),
   'two rotations later the first ticket makes a full handshake');

# Redis killed: the keys in use stay
my $sess3 = "$dir/sess3.pem";
ok(shared_session($sess3), 'a session before Redis goes');
unlike(logs(), qr/Redis does not answer/,
       'nothing said while Redis answered (not at the start either)');
$redis->kill9;
ok(FastdTest::wait_for(sub {
    (() = logs() =~ /ssl_session_ticket_keys: Redis does not answer/g) >= 2 }, 10),
   'Redis gone: logged by both instances');
my $lines = () = logs() =~ /Redis does not answer/g;
$r = conn($t[1], '-sess_in', $sess3);
is($r->{how}, 'Reused', 'the keys in use stay: the session resumes on B')
    or diag($r->{out});
is($r->{status}, 200, 'and is served');
sleep 2;
my $now = () = logs() =~ /Redis does not answer/g;
is($now, $lines, 'one line per instance, not one a second')
    or diag(join "\n", grep { /Redis does not answer|exited|started/ }
                       split /\n/, logs());

# Redis back, empty: it takes the instances' pair
$redis->start;
ok(FastdTest::wait_for(sub { logs() =~ /Redis answers again/ }, 15),
   'Redis back: logged');
$r = conn($t[0], '-sess_in', $sess3);
is($r->{how}, 'Reused', 'a session from before Redis restarted still resumes')
    or diag($r->{out});

$_->no_alerts for @t;
$_->stop for @t;

# bad lines
for my $bad ([ conf_with(1) =~ s/\[cluster\]\nredis = \S+\ntimeout = \S+\n//r,
               qr/ssl_session_ticket_keys = redis needs a \[cluster\]/ ],
             [ conf_with(1) =~ s/ssl_session_ticket_keys = redis/ssl_session_ticket_keys = redis\nssl_session_ticket_key = $dir\/x.key/r,
               qr/one or the other/ ],
             [ conf_with(1) =~ s/ssl_session_ticket_keys = redis/ssl_session_ticket_keys = memcached/r,
               qr/ssl_session_ticket_keys/ ]) {
    my ($text, $re) = @$bad;
    system("openssl rand 80 > '$dir/x.key'");
    $text =~ s/%%(\w+)%%/$1 eq 'PORT' ? $t[0]->port : $dir/ge;
    my $file = "$dir/bad.conf";
    FastdTest::spew($file, $text);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re, "bad: $re") or diag($out);
}

done_testing();
