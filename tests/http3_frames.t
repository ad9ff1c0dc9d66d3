#!/usr/bin/perl
# HTTP/3 attacks and bad input below what an ngtcp2 or nghttp3 client can
# be made to send (issue 39; tests/http3_attacks.t has those that can):
# tests/lib/quicraw.c does the handshake with ngtcp2's client, then sends
# 1-RTT packets of its own making, each case's frames in them, and prints
# the code of the server's CONNECTION_CLOSE (or of its RESET_STREAM, for
# a stream's error). Each code is the one RFC 9000, 9114 or 9204 names,
# and after each case another client is served by the same worker.
# Rapid reset without requests: request streams nghttp3 never sees
# (ended empty, or opened by RESET_STREAM) and GETs stopped as sent,
# past HTTP/2's budget of unanswered resets, end the connection with
# H3_EXCESSIVE_LOAD. Legal, and so nothing may end: every connection ID
# retired in turn,
# three times the pool over, from one port and then from a new port each
# time (each path validated, each a migration in /status).
#
# The ASan stage runs it too. quicraw (and h3load, the client that is
# served) are compiled here.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use IO::Socket::INET;
use JSON::PP;
use Test::More;

my $flags = TLS::quic_client_flags();
my $t = FastdTest->new;
my $dir = $t->dir;
my ($quicraw, $h3load) = TLS::quic_clients($dir, $flags,
    'tests/lib/quicraw.c', 'tests/bench/h3load.c');
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
# an upstream that never answers (its connections wait in the backlog,
# never accepted): GET / stays unanswered
my $mute = IO::Socket::INET->new(Listen => 1024, LocalAddr => '127.0.0.1',
                                 LocalPort => 0, Proto => 'tcp')
    or die "listen: $!";
my $mute_port = $mute->sockport;
$t->write_conf(<<"CONF");
@{[ FastdTest::main_section() ]}
[http]
http3_max_concurrent_streams = 64
http3_stream_buffer_size = 128k

[server]
@{[ TLS::quic_server_keys($cert) ]}
[location = /plaintext]
handler = plaintext

[location = /]
handler = proxy
pass = http://127.0.0.1:$mute_port

[location = /status]
handler = status
CONF
$t->start;
my $port = $t->port;
my ($worker) = $t->workers;

sub served {
    my $out = `$h3load -n1 -v https://127.0.0.1:$port/plaintext 2>&1`;
    return $out =~ /^status 200\nHello, World!\nend$/m;
}

ok(served(), 'an HTTP/3 request is served');
like(`$quicraw 127.0.0.1 $port params 2>&1`,
     qr/^params: streams 64 stream_data 131072$/m,
     'http3_max_concurrent_streams and http3_stream_buffer_size: the '
     . 'transport parameters');

my @cases = (
    # RFC 9000
    [streams => 'transport 0x4',
     'a bidi stream past MAX_STREAMS: STREAM_LIMIT_ERROR'],
    [uni_streams => 'transport 0x4',
     'a uni stream past MAX_STREAMS: STREAM_LIMIT_ERROR'],
    [stream_data => 'transport 0x3',
     'a stream past MAX_STREAM_DATA: FLOW_CONTROL_ERROR'],
    [max_data => 'transport 0x3',
     'streams together past MAX_DATA: FLOW_CONTROL_ERROR'],
    [final_size => 'transport 0x6',
     'a FIN moved back: FINAL_SIZE_ERROR'],
    [reset_size => 'transport 0x6',
     'RESET_STREAM below the FIN\'s size: FINAL_SIZE_ERROR'],
    [cid_limit => 'transport 0x9',
     'NEW_CONNECTION_ID past active_connection_id_limit: '
     . 'CONNECTION_ID_LIMIT_ERROR'],
    [retire_current => 'transport 0xa',
     'RETIRE_CONNECTION_ID of the packet\'s own ID: PROTOCOL_VIOLATION'],
    [retire_unissued => 'transport 0xa',
     'RETIRE_CONNECTION_ID of an ID never issued: PROTOCOL_VIOLATION'],
    [server_stream => 'transport 0x5',
     'STREAM on the server\'s send-only control stream: STREAM_STATE_ERROR'],
    [handshake_done => 'transport 0xa',
     'HANDSHAKE_DONE from a client: PROTOCOL_VIOLATION'],
    [new_token => 'transport 0xa',
     'NEW_TOKEN from a client: PROTOCOL_VIOLATION'],
    [unknown_frame => 'transport 0x7',
     'an unknown frame type: FRAME_ENCODING_ERROR'],
    [truncated => 'transport 0x7',
     'a STREAM frame longer than its packet: FRAME_ENCODING_ERROR'],
    [cid_length => 'transport 0x7',
     'a 21-byte connection ID: FRAME_ENCODING_ERROR'],
    [max_streams => 'transport 0x7',
     'MAX_STREAMS over 2^60: FRAME_ENCODING_ERROR'],
    # RFC 9114, RFC 9204
    [control2 => 'application 0x103',
     'a second control stream: H3_STREAM_CREATION_ERROR'],
    [settings2 => 'application 0x105',
     'SETTINGS twice: H3_FRAME_UNEXPECTED'],
    [h2frame => 'application 0x105',
     'HTTP/2\'s PING frame type on the control stream: H3_FRAME_UNEXPECTED'],
    [h2setting => 'application 0x109',
     'HTTP/2\'s SETTINGS_ENABLE_PUSH in SETTINGS: H3_SETTINGS_ERROR'],
    [goaway => 'application 0x108',
     'a GOAWAY raising the previous one\'s ID: H3_ID_ERROR'],
    # RFC 9114 7.2.7 names H3_ID_ERROR; nghttp3 answers H3_FRAME_ERROR
    # (conf/doc/http3.md, "Not supported yet")
    [max_push_id => 'application 0x106',
     'a MAX_PUSH_ID below the previous one: H3_FRAME_ERROR (nghttp3\'s)'],
    [qpack_static => 'application 0x200',
     'a field line of static entry 200 (of 99): QPACK_DECOMPRESSION_FAILED'],
    [close_control => 'application 0x104',
     'the control stream ended: H3_CLOSED_CRITICAL_STREAM'],
    [reset_control => 'application 0x104',
     'the control stream reset: H3_CLOSED_CRITICAL_STREAM'],
    [qpack_ref => 'application 0x201',
     'a QPACK Duplicate of an entry not in the table: '
     . 'QPACK_ENCODER_STREAM_ERROR'],
);
for my $c (@cases) {
    my ($case, $code, $what) = @$c;
    my $out = `$quicraw 127.0.0.1 $port $case 2>&1`;
    like($out, qr/^closed: \Q$code\E$/m, "$case: $what") or diag($out);
    ok(served(), "$case: the next client is served");
}

# a stream's errors: the server resets the stream, and the connection
# lives on (a PING after it is acknowledged)
for my $c (
    [empty_request => 'reset: stream 0 0x10d',
     'a request stream ended before HEADERS: H3_REQUEST_INCOMPLETE'],
    [no_method => 'reset: stream 0 0x10e',
     'a request without :method: H3_MESSAGE_ERROR'],
) {
    my ($case, $reset, $what) = @$c;
    my $out = `$quicraw 127.0.0.1 $port $case 2>&1`;
    like($out, qr/^\Q$reset\E\nalive$/m, "$case: $what, on the stream only")
        or diag($out);
}

# rapid reset without a request answered (CVE-2023-44487): request
# streams nghttp3 never sees, ended empty or opened by their
# RESET_STREAM, and GETs stopped (STOP_SENDING) as soon as sent, each
# give the client its MAX_STREAMS credit back at once; as over HTTP/2,
# 2 x http3_max_concurrent_streams (128) of them unanswered end the
# connection with H3_EXCESSIVE_LOAD, before three times the first grant
for my $c (
    [empty_flood => 'request streams ended empty'],
    [reset_flood => 'request streams opened by RESET_STREAM'],
    [stop_flood => 'GETs (to an upstream that never answers) stopped by '
                   . 'STOP_SENDING as sent'],
) {
    my ($case, $what) = @$c;
    my $out = `$quicraw 127.0.0.1 $port $case 2>&1`;
    my ($n) = $out =~ /^(\d+) streams, MAX_STREAMS \d+ \(from \d+\)$/m;
    like($out, qr/^closed: application 0x107$/m,
         "$case: $what: H3_EXCESSIVE_LOAD") or diag($out);
    cmp_ok($n // 0, '>', 128, "$case: past the budget of 128, not before")
        or diag($out);
    ok(served(), "$case: the next client is served");
}

sub migrations {
    my ($rc, $out) = TLS::run([TLS::curl(), '-sk',
                               "https://127.0.0.1:$port/status"]);
    return ((eval { decode_json($out) } // {})->{quic} // {})->{migrations};
}

# legal, and nothing may end: 24 connection IDs (three times the 8 the
# server keeps issued) retired in turn, each packet to the next one
# acknowledged; then the same from a new port each time, each path
# validated
my $out = `$quicraw 127.0.0.1 $port retire 2>&1`;
like($out, qr/^cycled 24$/m,
     'retire: 24 connection IDs retired in turn, the packet to each next '
     . 'one acknowledged') or diag($out);
ok(served(), 'retire: the next client is served');
my $before = migrations() // -1;
$out = `$quicraw 127.0.0.1 $port migrate 2>&1`;
like($out, qr/^cycled 24$/m,
     'migrate: the same from 24 ports, each path validated') or diag($out);
is(migrations(), $before + 24, 'migrate: /status counts 24 migrations');
ok(served(), 'migrate: the next client is served');

is_deeply([$t->workers], [$worker], 'the same worker all along');
$t->stop;
$t->no_alerts;
done_testing;
