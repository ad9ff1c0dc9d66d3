#!/usr/bin/perl
# Session resumption with tickets, two workers: a session saved by
# openssl s_client -sess_out resumes (-sess_in shows "Reused") also when
# the second connection lands on the other worker (seen in /proc: which
# worker holds the server side of the connection), and still after a
# reload (the ticket keys live in the master and survive it). With
# ssl_session_tickets = off a session does not resume.
# /status counts the handshakes and the resumptions.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use JSON::PP;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('a.test');
my $port3 = $t->another_port;

# port: TLS with tickets; port2: plain HTTP for /status; port3: TLS
# without tickets
my $conf = TLS::conf(
    main => { workers => 2 }, certs => [$cert], names => 'a.test',
    extra => "[server]\nlisten = 127.0.0.1:%%PORT2%%\n\n"
           . "[location = /status]\nhandler = status\n\n"
           . "[server]\n"
           . TLS::server_keys(port => $port3, certs => [$cert],
                              names => 'a.test',
                              more => "ssl_session_tickets = off\n")
           . "\n[location /plaintext]\nhandler = plaintext\n");
$t->write_conf($conf);
$t->start;
my $port = $t->port;

# One connection: -sess_out FILE or -sess_in FILE; a request with
# Connection: close (a TLS 1.3 ticket comes after the handshake: the
# response comes after it). Returns { reused, new, worker, status }.
my $n = 0;
sub conn {
    my ($p, @args) = @_;
    my $c = $pki->connect(port => $p, name => 'a.test', quiet => 0,
                          args => \@args);
    my $how = $c->wait_for_bytes(qr/^(New|Reused), TLSv1\.\d/m, 10);
    my $w = $c->worker($t);
    $c->send("GET /plaintext?" . ++$n . " HTTP/1.1\r\nHost: a.test\r\n"
           . "Connection: close\r\n\r\n");
    $c->wait_eof(10);
    $c->close;
    my $r = TLS::response($c->{raw});
    return { how => $how // '', worker => $w, status => $r ? $r->status : 0,
             out => $c->{raw} . $c->stderr };
}

my $sess = $t->dir . '/sess.pem';
my (%workers, $cross, $reused, $tries);
for my $i (1 .. 20) {
    $tries = $i;
    unlink $sess;
    my $first = conn($port, '-sess_out', $sess);
    is($first->{how}, 'New', "try $i: a new session") or diag($first->{out})
        if $i == 1;
    last unless -s $sess && $first->{status} == 200;
    my $second = conn($port, '-sess_in', $sess);
    $workers{$_}++ for grep { defined } $first->{worker}, $second->{worker};
    unless ($second->{how} eq 'Reused' && $second->{status} == 200) {
        diag("try $i: the session was not resumed\n$second->{out}");
        $reused = 0;
        last;
    }
    $reused = 1;
    if (defined $first->{worker} && defined $second->{worker}
        && $first->{worker} != $second->{worker}) {
        $cross = 1;
        last;
    }
}
ok(-s $sess, 's_client -sess_out saved a session ticket');
ok($reused, 'every -sess_in connection shows "Reused" and is served');
# the kernel spreads connections over the workers' reuseport sockets by a
# hash of the client's port: twenty pairs all on one worker would be a
# 2^-20 chance, or a worker that never accepts
ok($cross, "a session resumed on the other worker ($tries tries, workers "
   . join(' ', sort keys %workers) . ")");

# A resumed TLS 1.3 connection gets a ticket of its own (RFC 8446 C.4: one
# use each), so a client that always resumes with its last ticket never
# falls back to a full handshake (wrk did, every other connection)
{
    my ($s1, $s2) = map { $t->dir . "/chain$_.pem" } 1, 2;
    unlink $s1, $s2;
    conn($port, '-sess_out', $s1);
    my $r1 = conn($port, '-sess_in', $s1, '-sess_out', $s2);
    is($r1->{how}, 'Reused', 'a resumed connection ...');
    ok(-s $s2, '... is sent a new ticket');
    my $r2 = -s $s2 ? conn($port, '-sess_in', $s2) : {how => ''};
    is($r2->{how}, 'Reused', 'which resumes the next one') or diag($r2->{out});
}

# --- across a reload --------------------------------------------------------
unlink $sess;
my $before = conn($port, '-sess_out', $sess);
is($before->{status}, 200, 'a session before the reload');
my %old = map { $_ => 1 } $t->workers;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    my @w = $t->workers;
    @w == 2 && !grep { $old{$_} } @w;
}, 15), 'the reload replaced both workers');
my $after = conn($port, '-sess_in', $sess);
is($after->{status}, 200, 'after the reload: served');
is($after->{how}, 'Reused', 'a ticket from before the reload still resumes')
    or diag($after->{out});
ok(defined $after->{worker} && !$old{ $after->{worker} },
   'on a worker of the new generation');

# --- tickets off (and no session cache: the default) ------------------------
my ($off_new, $off_reused) = (0, 0);
for my $i (1 .. 4) {
    unlink $sess;
    conn($port3, '-sess_out', $sess);
    my $second = conn($port3, '-sess_in', $sess);
    $off_new++ if $second->{how} eq 'New' && $second->{status} == 200;
    $off_reused++ if $second->{how} eq 'Reused';
}
is($off_new, 4, 'ssl_session_tickets = off: -sess_in connections are served');
is($off_reused, 0, 'with new sessions: none resumes');

# --- /status ------------------------------------------------------------------
sub tls_status {
    my $r = $t->http("GET /status HTTP/1.1\r\nHost: x\r\n\r\n", port => $t->port2);
    my $st = $r && $r->status == 200 ? eval { decode_json($r->body) } : undef;
    return $st && $st->{tls};
}
my $s0 = tls_status();
ok($s0, '/status has a tls object');
unlink $sess;
conn($port, '-sess_out', $sess);
my $again = conn($port, '-sess_in', $sess);
my $s1 = tls_status();
is($again->{how}, 'Reused', 'one more new and one resumed session');
cmp_ok(($s1->{handshakes} // 0) - ($s0->{handshakes} // 0), '>=', 2,
       '/status counts both handshakes');
cmp_ok(($s1->{resumed} // 0) - ($s0->{resumed} // 0), '>=', 1,
       'and the resumption');
cmp_ok(($s1->{protocols}{'TLSv1.3'} // 0) - ($s0->{protocols}{'TLSv1.3'} // 0),
       '>=', 2, 'as TLSv1.3');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
