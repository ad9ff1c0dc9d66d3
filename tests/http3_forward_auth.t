#!/usr/bin/perl
# The QUIC forwarding socket (core/event/fd_quic_fwd.c) takes datagrams
# only from fastd's own workers: another process of the workers' user
# (nobody, where fastd starts as root without user) that writes a
# well-formed message to a worker's socket must not have it answer the
# address the message claims. tests/lib/quic_forge_fwd.py sends one, a
# short-header packet for a connection nobody has, which a worker would
# answer with a stateless reset, to every generation's socket of worker
# 0, and waits 2 s for any datagram at the claimed client address.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

TLS::http3_or_skip();
my $t = FastdTest->new;
my $dir = $t->dir;
my $cert = TLS->new($dir)->server('localhost');
$t->write_conf(<<"CONF");
@{[ FastdTest::main_section() ]}
[server]
@{[ TLS::quic_server_keys($cert) ]}
[location = /plaintext]
handler = plaintext
CONF
$t->start;
my $port = $t->port;
my $out = `/usr/bin/python3 $FindBin::Bin/lib/quic_forge_fwd.py @{[ $t->pid ]} $port 2>&1`;
like($out, qr/^sent [1-9]\d*, /, 'the forged message reached a worker\'s forwarding socket')
    or diag($out);
like($out, qr/, none$/, '... which answered nothing: only its workers may forward')
    or diag($out);
$t->stop;
$t->no_alerts;
done_testing;
