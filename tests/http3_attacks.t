#!/usr/bin/perl
# HTTP/3 attacks and bad input (issue 39), each by a client that speaks
# QUIC and HTTP/3 (tests/bench/h3load.c -A CASE, on ngtcp2 and nghttp3)
# and misbehaves once the handshake is over. Each ends in the error code
# RFC 9114 or RFC 9204 names, in the server's CONNECTION_CLOSE, and the
# worker (the same process) serves the next client:
#
#   a request stream that starts with DATA     H3_FRAME_UNEXPECTED 0x105
#   a control stream without SETTINGS first    H3_MISSING_SETTINGS 0x10a
#   a push stream from the client              H3_STREAM_CREATION_ERROR 0x103
#   a SETTINGS frame cut inside a value        H3_FRAME_ERROR 0x106
#   a QPACK encoder stream setting a table
#     over the server's 4 KB                   QPACK_ENCODER_STREAM_ERROR 0x201
#   120 requests blocked on QPACK inserts
#     that never come (the server allows 100)  QPACK_DECOMPRESSION_FAILED 0x200
#   requests reset as soon as sent (rapid
#     reset, CVE-2023-44487)                   H3_EXCESSIVE_LOAD 0x107
#
# and a client that never acknowledges: the server sends what its
# congestion window allows (not the 4 MB asked for), then ends the
# connection at its idle timeout, and /status counts it closed.
#
# The ASan stage runs it too. The load client is compiled here (as the
# bench runner does) from tests/bench/h3load.c.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use JSON::PP;
use Test::More;

my $flags = TLS::quic_client_flags();
my $t = FastdTest->new;
my $dir = $t->dir;
my ($h3load) = TLS::quic_clients($dir, $flags, 'tests/bench/h3load.c');
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
mkdir "$dir/www";
open my $fh, '>', "$dir/www/big" or die;
print $fh 'x' x (4 << 20);
close $fh;
$t->write_conf(<<"CONF");
@{[ FastdTest::main_section() ]}
[http]
http2_idle_timeout = 1s

[server]
@{[ TLS::quic_server_keys($cert) ]}root = %%DIR%%/www

[location = /plaintext]
handler = plaintext

; answers late: a reset request is still unanswered when it comes
[location = /slow]
handler = delay
delay = 200ms

[location = /status]
handler = status
CONF
$t->start;
my $port = $t->port;
my $url = "https://127.0.0.1:$port";
my ($worker) = $t->workers;

sub h3load {
    my $out = `$h3load @_ 2>&1`;
    return $out;
}

sub served {
    my $out = h3load('-n1', '-v', "$url/plaintext");
    return $out =~ /^status 200\nHello, World!\nend$/m;
}

sub status {
    my ($rc, $out) = TLS::run([TLS::curl(), '-sk', "$url/status"]);
    return (eval { decode_json($out) } // {})->{quic} // {};
}

ok(served(), 'an HTTP/3 request is served');

my @cases = (
    [unexpected => '/plaintext', 'application 0x105',
     'DATA before HEADERS: H3_FRAME_UNEXPECTED'],
    [nosettings => '/plaintext', 'application 0x10a',
     'a control stream without SETTINGS first: H3_MISSING_SETTINGS'],
    [push => '/plaintext', 'application 0x103',
     'a push stream from a client: H3_STREAM_CREATION_ERROR'],
    [frame => '/plaintext', 'application 0x106',
     'a SETTINGS frame cut inside a value: H3_FRAME_ERROR'],
    [qpack => '/plaintext', 'application 0x201',
     'a QPACK table over the server\'s capacity: '
     . 'QPACK_ENCODER_STREAM_ERROR'],
    [blocked => '/plaintext', 'application 0x200',
     '120 streams blocked on QPACK (100 allowed): '
     . 'QPACK_DECOMPRESSION_FAILED'],
    [reset => '/slow', 'application 0x107',
     'requests reset as soon as sent (rapid reset): H3_EXCESSIVE_LOAD'],
);
for my $c (@cases) {
    my ($case, $path, $code, $what) = @$c;
    my $out = h3load('-A', $case, '-m100', '-D5', "$url$path");
    like($out, qr/^closed: \Q$code\E$/m, $what)
        or diag($out);
    ok(served(), "$case: the next client is served");
}

# never an ACK: the server stops at its congestion window and ends the
# connection at the idle timeout (1 s)
my $before = status()->{closed_connections} // 0;
my $out = h3load('-A', 'noack', '-D3', "$url/big");
my ($got) = $out =~ /^received (\d+) bytes/m;
ok(defined $got && $got < 512 * 1024,
   "a client that never acknowledges gets a window's worth, not the file "
   . "(@{[ $got // 'nothing' ]} bytes of 4 MB)");
ok(FastdTest::wait_for(sub {
    my $q = status();
    ($q->{active_connections} // 1) == 0
        && ($q->{closed_connections} // 0) > $before;
}, 10), 'and its connection is gone at the idle timeout');
ok(served(), 'noack: the next client is served');

is_deeply([$t->workers], [$worker], 'the same worker all along');
like($t->error_log, qr/HTTP\/3 client reset too many streams/,
     'the rapid reset is logged');
$t->stop;
$t->no_alerts;
done_testing;
