#!/usr/bin/perl
# gRPC clients get gRPC errors: a request whose content-type is
# application/grpc(+...) that fastd itself answers (a dead upstream, an
# upstream timeout, a limit_req, limit_conn or queue refusal, no such
# method) gets a
# "Trailers-Only" response (HTTP 200, grpc-status and grpc-message in the
# one header block, no DATA), read by a real client (python3-grpcio's
# generic API, raw bytes) over h2c and over TLS (ALPN h2). Other requests
# to the same places keep their HTML error pages.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use H2;
use TLS;
use IO::Socket::INET;
use JSON::PP ();
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
my ($grc) = TLS::run([ H2::python(), '-c', 'import grpc' ]);
plan skip_all => 'python3-grpcio is not installed' if $grc != 0;

# a port nothing listens on, and one that accepts and never answers
my $dead = FastdTest::dead_port();
my $stuck = IO::Socket::INET->new(Listen => 16, LocalAddr => '127.0.0.1',
                                  LocalPort => 0, ReuseAddr => 1)
    or die "listen: $!";
my $stuck_port = $stuck->sockport;

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
my $ca = $pki->ca;
# each server its own zone: the first call passes, the second is refused
sub locs {
    my ($zone) = @_;
    return <<"L";
[location /dead.Svc/]
handler = proxy
pass = http://127.0.0.1:$dead

[location /stuck.Svc/]
handler = proxy
pass = http://127.0.0.1:$stuck_port
read_timeout = 1s

[location /queued.Svc/]
handler = proxy
pass = http://127.0.0.1:$stuck_port
read_timeout = 2s
queue = $zone

[location /conns.Svc/]
handler = proxy
pass = http://127.0.0.1:$stuck_port
read_timeout = 2s
limit_conn = $zone 1

[location /limited.Svc/]
handler = proxy
pass = http://127.0.0.1:$dead
limit_req = $zone burst=0 nodelay

L
}
$t->write_conf(H2::conf(
    locations => locs('one'),
    extra => "[server]\nlisten = 127.0.0.1:%%PORT2%% ssl http2\n"
           . "ssl_certificate = $cert->{crt}\nssl_certificate_key = $cert->{key}\n"
           . "root = %%HTML%%\n\n" . locs('two')
           . "[limit_req one]\nrate = 1r/m\n\n[limit_req two]\nrate = 1r/m\n\n"
           . "[queue one]\nmax_concurrent = 1\nqueue_limit = 0\n\n"
           . "[queue two]\nmax_concurrent = 1\nqueue_limit = 0\n\n"
           . "[limit_conn one]\n\n[limit_conn two]\n\n"));
$t->start;

# One unary call per argument (METHOD[=TARGET]): [code name, details].
my $client = <<'PY';
import grpc, json, sys
port, ca = sys.argv[1], sys.argv[2]
out = []
if ca:
    creds = grpc.ssl_channel_credentials(open(ca, 'rb').read())
    ch = grpc.secure_channel('localhost:' + port, creds)
else:
    ch = grpc.insecure_channel('127.0.0.1:' + port)
for m in sys.argv[3:]:
    call = ch.unary_unary(m)
    try:
        call(b'\x08\x01', timeout=10)
        out.append(['OK', ''])
    except grpc.RpcError as e:
        out.append([e.code().name, e.details()])
print('RESULT ' + json.dumps(out), flush=True)
PY
FastdTest::spew("$dir/grpc_client.py", $client);

sub calls {
    my ($port, $ca, @methods) = @_;
    my ($rc, $out) = TLS::run([ H2::python(), "$dir/grpc_client.py", $port,
                                $ca // '', @methods ], timeout => 60);
    my ($json) = $out =~ /^RESULT (.*)$/m;
    return $json ? JSON::PP::decode_json($json) : do { diag($out); [] };
}

for my $case ([ 'h2c', $t->port, undef ], [ 'TLS', $t->port2, $ca ]) {
    my ($name, $port, $cafile) = @$case;
    my $r = calls($port, $cafile, '/dead.Svc/Call', '/stuck.Svc/Call',
                  '/limited.Svc/Call', '/limited.Svc/Call', '/no.Svc/Call');
    is_deeply($r->[0], [ 'UNAVAILABLE', '502 Bad Gateway' ],
              "$name: a dead upstream is UNAVAILABLE (502)");
    is_deeply($r->[1], [ 'DEADLINE_EXCEEDED', '504 Gateway Timeout' ],
              "$name: an upstream read timeout is DEADLINE_EXCEEDED (504)");
    is($r->[2][0], 'UNAVAILABLE', "$name: limit_req lets the first call by");
    is_deeply($r->[3], [ 'RESOURCE_EXHAUSTED', '503 Service Unavailable' ],
              "$name: limit_req's refusal (its 503) is RESOURCE_EXHAUSTED");
    is($r->[4][0], 'UNIMPLEMENTED',
       "$name: a method no location serves is UNIMPLEMENTED");
}

# a queue's or limit_conn's refusal (their 503): one call holds the only
# slot (an upstream that never answers, 2 s), the other is refused meanwhile
my $q = <<'PY';
import grpc, json, sys
ch = grpc.insecure_channel('127.0.0.1:' + sys.argv[1])
call = ch.unary_unary(sys.argv[2])
def code(f):
    try:
        f.result()
        return 'OK'
    except grpc.RpcError as e:
        return e.code().name
a = call.future(b'\x08\x01', timeout=10)
b = call.future(b'\x08\x01', timeout=10)
print('RESULT ' + json.dumps(sorted([code(a), code(b)])), flush=True)
PY
FastdTest::spew("$dir/grpc_queue.py", $q);
for my $c ([ '/queued.Svc/Call', 'a queue' ], [ '/conns.Svc/Call', 'limit_conn' ]) {
    my ($rc, $out) = TLS::run([ H2::python(), "$dir/grpc_queue.py", $t->port,
                                $c->[0] ], timeout => 60);
    my ($json) = $out =~ /^RESULT (.*)$/m;
    is_deeply($json ? JSON::PP::decode_json($json) : $out,
              [ 'DEADLINE_EXCEEDED', 'RESOURCE_EXHAUSTED' ],
              "$c->[1]'s refusal is RESOURCE_EXHAUSTED (the call it let in "
              . 'times out upstream)');
}

# the frames: one HEADERS with END_STREAM, no DATA, the fields as gRPC's
# PROTOCOL-HTTP2 says; and the same place without gRPC keeps its page
my $o = H2::py($t, <<'PY');
c = Raw()
c.req(1, '/dead.Svc/Call', method='POST', end_stream=False,
      headers=[('content-type', 'application/grpc+proto'), ('te', 'trailers')])
c.data(1, b'\0\0\0\0\0', end_stream=True)
a = c.response(1)
c.req(3, '/dead.Svc/Call', method='POST',
      headers=[('content-type', 'application/grpc-web')])
b = c.response(3)
done(a=a, b=b, frames=c.summary()['frames'])
PY
my %h = map { $_->[0] => $_->[1] } @{ $o->{a}{headers} || [] };
is($o->{a}{status}, 200, 'Trailers-Only: :status 200') or diag(H2::explain($o));
is($h{'content-type'}, 'application/grpc', 'content-type application/grpc');
is($h{'grpc-status'}, '14', 'grpc-status 14');
is($h{'grpc-message'}, '502 Bad Gateway', 'grpc-message');
ok($o->{a}{end} && $o->{a}{data_frames} == 0,
   'the one header block ends the stream: no DATA');
is($o->{b}{status}, 502, 'gRPC-Web (not this) keeps the HTTP status');
like($o->{b}{body}, qr/<html>/, '... and the HTML page');

my $r = H2::curl($t, '/dead.Svc/Call');
is($r->{code}, 502, 'a plain request: 502');
like($r->{body}, qr/502 Bad Gateway/, '... with its page');

$t->stop;
$t->no_alerts;
done_testing;
