#!/usr/bin/perl
# The session ticket key rotates on ssl_session_ticket_rotate's schedule,
# in the master: a ticket made under one key resumes while that key is
# the current one and after one rotation (the previous key still
# decrypts), and no longer after two (a full handshake, served). Each
# rotation is seen as the master's "session ticket key rotated" line, so
# the test waits for rotations rather than for time.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $every = 4; # seconds: a window wide enough for one connection
my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('a.test');
$t->write_conf(TLS::conf(
    certs => [$cert], names => 'a.test',
    http => { ssl_session_ticket_rotate => "${every}s" },
    more => "ssl_session_timeout = 1h\n"));
$t->start;
my $port = $t->port;

sub rotations { scalar(() = $t->error_log =~ /session ticket key rotated/g) }

# wait for the next rotation: the key that made a ticket now was new then
sub next_rotation {
    my $n = rotations();
    return FastdTest::wait_for(sub { rotations() > $n }, 3 * $every);
}

my $n = 0;
sub conn {
    my (@args) = @_;
    my $c = $pki->connect(port => $port, name => 'a.test', quiet => 0,
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

my $sess = $t->dir . '/sess.pem';
ok(next_rotation(), "the master rotates the key every ${every}s");
my $first = conn('-sess_out', $sess);
is($first->{how}, 'New', 'a new session, its ticket under the new key')
    or diag($first->{out});
ok(-s $sess, 'the ticket is saved');

my $now = conn('-sess_in', $sess);
is($now->{how}, 'Reused', 'it resumes under the same key') or diag($now->{out});

ok(next_rotation(), 'one rotation later');
my $once = conn('-sess_in', $sess);
is($once->{how}, 'Reused', 'the previous key still decrypts it: it resumes')
    or diag($once->{out});
is($once->{status}, 200, 'and the request is served');

ok(next_rotation(), 'two rotations later');
my $twice = conn('-sess_in', $sess);
is($twice->{how}, 'New', 'its key is gone: a full handshake')
    or diag($twice->{out});
is($twice->{status}, 200, 'and the request is served all the same');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
