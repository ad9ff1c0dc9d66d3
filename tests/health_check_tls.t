#!/usr/bin/perl
# Health checks of a group reached over TLS (pass = https://): the probes
# speak TLS with the location's proxy_ssl_* settings, as its requests do
# (they once sent plain HTTP to the TLS port, and every such server was
# taken out). A server whose /healthz says 503 is taken out and comes
# back; one whose certificate does not verify fails its checks with the
# reason in the log; port= keeps probes plain on a separate port. And a
# group with proxy_protocol = on: each probe starts with a PROXY header
# (LOCAL), as a backend that demands one (fastd with listen ...
# proxy_protocol here) closes anything else.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TLS;
use POSIX ();
use Test::More;

my $python = (grep { -x } qw(/usr/bin/python3 /usr/local/bin/python3))[0];
plan skip_all => 'needs the openssl CLI and python3'
    unless TLS::openssl() && $python;

my $t = FastdTest->new;
my $d = $t->dir;
my $pki = TLS->new($d);
my $up = $pki->server('up.test');
my $cafile = $pki->ca;
mkdir "$d/other" or die "mkdir: $!";
my $other = TLS->new("$d/other");
my $wrong = $other->server('up.test');   # another CA's certificate

# /healthz: 503 while NAME.sick exists; every request is logged
FastdTest::spew("$d/backend.py", <<'PY');
import http.server, os, ssl, sys
cert, key, portfile, logfile, sick = sys.argv[1:6]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        with open(logfile, 'a') as f:
            f.write(self.path + '\n')
        code = 503 if self.path == '/healthz' and os.path.exists(sick) else 200
        out = ('tls %s\n' % self.path).encode()
        self.send_response(code)
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
srv.daemon_threads = True
srv.socket = ctx.wrap_socket(srv.socket, server_side=True,
                             do_handshake_on_connect=False)
with open(portfile + '.tmp', 'w') as f:
    f.write(str(srv.server_address[1]))
os.rename(portfile + '.tmp', portfile)
srv.serve_forever()
PY

my @pids;
sub backend {
    my ($name, $cert) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', "$d/$name.out";
        open STDERR, '>&', \*STDOUT;
        { no warnings 'exec';
          exec $python, "$d/backend.py", $cert->{crt}, $cert->{key},
               "$d/$name.port", "$d/$name.log", "$d/$name.sick"; }
        POSIX::_exit(127);
    }
    push @pids, $pid;
    FastdTest::wait_for(sub { -s "$d/$name.port" }, 10, 0.02)
        or die "backend $name did not start";
    return FastdTest::slurp("$d/$name.port");
}
END {
    local $?;
    kill 'TERM', $_ for @pids;
    waitpid($_, 0) for @pids;
}
my $pg = backend('good', $up);
# a backend that demands a PROXY header first
my $ppb = FastdTest->new(conf => FastdTest::base_conf(
    server => { listen => '127.0.0.1:%%PORT%% proxy_protocol' },
    locations => "[location = /healthz]\nreturn = 200 pp ok\n"));
$ppb->start;
my $pw = backend('wrong', $wrong);
# a plain health port beside the TLS one
my $plain = Backend->new(handler => sub {
    Backend::response($_[0]{path} eq '/healthz' ? 200 : 404, 'plain ok') });

$t->write_conf(FastdTest::base_conf(
    locations => <<"L",
[location /]
handler = proxy
pass = https://good/
proxy_ssl_trusted_certificate = $cafile
proxy_ssl_name = up.test

[location /wrong/]
handler = proxy
pass = https://wrong/
proxy_ssl_trusted_certificate = $cafile
proxy_ssl_name = up.test

[location /port/]
handler = proxy
pass = https://byport/
proxy_ssl_trusted_certificate = $cafile
proxy_ssl_name = up.test

[location /pp/]
handler = proxy
pass = http://pp/

[location = /status]
handler = status
L
    extra => "[upstream good]\nserver = 127.0.0.1:$pg max_fails=0\n"
           . "health_check = /healthz interval=300ms timeout=2s fails=2 "
           . "passes=1\n\n"
           . "[upstream wrong]\nserver = 127.0.0.1:$pw max_fails=0\n"
           . "health_check = /healthz interval=300ms timeout=2s fails=2 "
           . "passes=1\n\n"
           . "[upstream byport]\nserver = 127.0.0.1:$pw max_fails=0\n"
           . "health_check = /healthz interval=300ms timeout=2s fails=2 "
           . "passes=1 port=" . $plain->port . "\n\n"
           . "[upstream pp]\nserver = 127.0.0.1:" . $ppb->port
           . " max_fails=0\nproxy_protocol = on\n"
           . "health_check = /healthz interval=300ms timeout=2s fails=1 "
           . "passes=1\n"));
$t->start;

sub probes_seen {
    my ($name) = @_;
    my $log = FastdTest::slurp("$d/$name.log") // '';
    return scalar(() = $log =~ m{^/healthz$}mg);
}
sub check_up {
    my ($up) = @_;
    my $r = $t->get('/status?format=prometheus');
    return $r && $r->body =~ /^fastd_upstream_check_up\{upstream="$up",[^}]*\} (\d)$/m
        ? $1 : undef;
}

ok(FastdTest::wait_for(sub { probes_seen('good') >= 3 }, 15, 0.1),
   'the probes reach the TLS backend as HTTP over TLS (3 seen)');
is(check_up('good'), 1, 'and it stays up');
my $r = $t->get('/x');
is($r->status, 200, 'a request through it: 200');
like($r->body, qr/^tls \/x/, '... from the TLS backend');

# sick: taken out, then back
FastdTest::spew("$d/good.sick", '');
ok(FastdTest::wait_for(sub { (check_up('good') // 1) == 0 }, 15, 0.1),
   '/healthz 503 over TLS: taken out');
like($t->error_log, qr/upstream "good" server .* failed its health check \(status 503, not 200-399\)/,
     '... with a [warn]');
is($t->get('/x')->status, 502, '... its only server: 502');
unlink "$d/good.sick";
ok(FastdTest::wait_for(sub { (check_up('good') // 0) == 1 }, 15, 0.1),
   'healthy again: back');
is($t->get('/x')->status, 200, '... 200');

# a certificate that does not verify
ok(FastdTest::wait_for(sub { (check_up('wrong') // 1) == 0 }, 15, 0.1),
   'a certificate from another CA: the checks fail');
like($t->error_log, qr/upstream "wrong" server .* failed its health check \(SSL handshake failed: certificate verify failed/,
     '... the reason in the log');
is(probes_seen('wrong'), 0, '... and no request went over it');

# port=: a plain health port, while the requests go over TLS
ok(FastdTest::wait_for(sub { defined check_up('byport') && $plain->requests >= 2 }, 15, 0.1),
   'port=: probes go plain to the health port');
is(check_up('byport'), 1, '... which says 200: up');

# proxy_protocol = on: the probes carry the header
{
    my $prom = sub { my $r = $t->get('/status?format=prometheus'); $r ? $r->body : '' };
    ok(FastdTest::wait_for(sub {
        $prom->() =~ /^fastd_upstream_check_probes(?:_total)?\{upstream="pp",[^}]*\} ([2-9]|\d\d+)$/m
    }, 15, 0.1), 'a PROXY-protocol backend: probes made');
    like($prom->(), qr/^fastd_upstream_check_status\{upstream="pp",[^}]*\} 200$/m,
         'proxy_protocol = on: the last probe got 200 (PROXY LOCAL first)');
    is(check_up('pp'), 1, '... up');
    is($t->get('/pp/healthz')->status, 200, '... and a request through it');
}

$ppb->stop;
$t->stop;
ok($t->no_alerts, 'no alerts');
done_testing;
