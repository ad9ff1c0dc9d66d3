#!/usr/bin/perl
# Session tickets over QUIC survive a rotation of the shared ticket key
# as over TCP (tests/tls_ticket_rotate.t): a ticket made under one key
# resumes while that key is the current one and after one rotation (the
# previous key still decrypts), and no longer after two (a full
# handshake, served). Then the fleet's way: ssl_session_ticket_key
# files, and a reload that puts a new key first and the old one second;
# a ticket made under the old key resumes after the reload.
#
# The client is ngtcp2's gtlsclient, which keeps its session (the last
# ticket it got) in --session-file; the server says whether the
# connection resumed ($ssl_session_reused). Rotations are seen as the
# master's "session ticket key rotated" lines: the test waits for them
# rather than for time.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

TLS::http3_fastd_or_skip();
my $gtls = '/usr/bin/gtlsclient';
plan skip_all => 'ngtcp2-client (gtlsclient) is not installed' unless -x $gtls;

my $every = 6; # seconds: a window wide enough for two connections
my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('localhost');
my @tk = map { my $f = $t->dir . "/ticket$_.key";
               system("openssl rand 80 > '$f'") == 0 or die; $f } 1 .. 2;

sub conf {
    my (%http) = @_;
    return TLS::conf(
        certs => [$cert], names => 'localhost',
        main => { workers => 2 },
        http => \%http,
        more => "listen = 127.0.0.1:%%PORT%% quic\n"
              . "ssl_session_timeout = 1h\n",
        locations => "[location /]\nreturn = 200 \$ssl_session_reused\n");
}
$t->write_conf(conf(ssl_session_ticket_rotate => "${every}s"));
$t->start;
my $port = $t->port;

# One connection with the session in $file: "r" (resumed), "." (a full
# handshake) or "failed"; gtlsclient saves the ticket it gets there.
my $sess = $t->dir . '/quic.sess';
sub conn {
    my ($rc, $out) = TLS::run([ $gtls, '--exit-on-all-streams-close',
                                '--timeout=10s', "--session-file=$sess",
                                '127.0.0.1', $port,
                                "https://localhost:$port/" ], timeout => 20);
    return 'failed' unless $out =~ /\[:status: 200\]/;
    my ($hex) = $out =~ /body \d+ bytes\n[0-9a-f]{8}  ([0-9a-f ]+?) *\|/;
    return pack('H*', ($hex // '') =~ s/ //gr);
}

# a reload: two new workers (the old ones may still be finishing the
# last connections, which new ones do not reach)
sub reload {
    my ($name) = @_;
    my %old = map { $_ => 1 } $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { (grep { !$old{$_} } $t->workers) == 2 },
                           15), $name);
}

sub rotations { scalar(() = $t->error_log =~ /session ticket key rotated/g) }

# wait for the next rotation: the key that makes a ticket now is new
sub next_rotation {
    my $n = rotations();
    return FastdTest::wait_for(sub { rotations() > $n }, 3 * $every);
}

ok(next_rotation(), "the master rotates the key every ${every}s");
is(conn(), '.', 'a new session, its ticket under the new key');
ok(-s $sess, 'the ticket is saved');
is(conn(), 'r', 'it resumes under the same key');

ok(next_rotation(), 'one rotation later');
is(conn(), 'r', 'the previous key still decrypts it: it resumes');

ok(next_rotation(), 'two rotations later');
is(conn(), '.', 'its key is gone: a full handshake, served');

# ssl_session_ticket_key files, as a fleet shares them: the second file
# is the previous key
unlink $sess;
$t->write_conf(conf(ssl_session_ticket_key => $tk[0]));
reload('reload: one key file');
is(conn(), '.', 'a new session under the file\'s key');
is(conn(), 'r', 'which resumes');
$t->write_conf(conf(ssl_session_ticket_key => "$tk[1] $tk[0]"));
reload('reload: a new key first, the old one second');
is(conn(), 'r', 'a ticket under the old key resumes after the reload');
$t->write_conf(conf(ssl_session_ticket_key => $tk[1]));
reload('reload: the old key dropped');
is(conn(), '.', 'its ticket no longer resumes: a full handshake, served');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
