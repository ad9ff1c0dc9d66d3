#!/usr/bin/perl
# proxy: TLS to upstreams (pass = https://). A throw-away CA (TLS.pm)
# signs the backends' certificate (up.test, 127.0.0.1) and a client
# certificate; the backends are python's ssl under http.server,
# answering with what the TLS connection was (its number, whether its
# session was resumed, SNI, the client certificate's CN). Checked: GET and
# POST over https with verification, SNI from proxy_ssl_name, a wrong name
# and an untrusted CA (502, the reason in the error log), verify off,
# keep-alive over TLS (several requests on one connection), session reuse
# on reconnect (and not with proxy_ssl_session_reuse = off), a client
# certificate the backend requires, an HTTP server behind https:// (502,
# and the next server of a group), a WebSocket tunnel over TLS, a
# handshake that never ends (504 after connect_timeout), and fastd -t on
# bad settings (file:line and why).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use IO::Socket::INET;
use POSIX ();
use Test::More;

my $python = (grep { -x } qw(/usr/bin/python3 /usr/local/bin/python3))[0];
plan skip_all => 'needs the openssl CLI and python3'
    unless TLS::openssl() && $python;

my $t = FastdTest->new;
my $d = $t->dir;

# the CA, the backends' certificate (up.test and IP 127.0.0.1), a client
# certificate; another CA that signed none of them
my $pki = TLS->new($d);
my $up = $pki->server('up.test');
my $client = $pki->client('client.test');
mkdir "$d/other" or die "mkdir: $!";
my $other = TLS->new("$d/other")->ca;
my $cafile = $pki->ca;

FastdTest::spew("$d/backend.py", <<'PY');
import http.server, os, ssl, sys, threading

cert, key, portfile, logfile = sys.argv[1:5]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
if len(sys.argv) > 5:
    ctx.load_verify_locations(sys.argv[5])
    ctx.verify_mode = ssl.CERT_REQUIRED
names = {}
ctx.sni_callback = lambda sock, name, c: names.__setitem__(id(sock), name)
lock = threading.Lock()
conns = [0]

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def setup(self):
        super().setup()
        with lock:
            conns[0] += 1
            self.conn_no = conns[0]
    def answer(self):
        s = self.connection
        if self.headers.get('Upgrade') == 'websocket':
            # a tunnel: upper-cased echo until the proxy's FIN, then ours
            self.send_response(101)
            self.send_header('Upgrade', 'websocket')
            self.send_header('Connection', 'Upgrade')
            self.end_headers()
            self.wfile.flush()
            while True:
                data = s.recv(65536)
                if not data:
                    break
                s.sendall(data.upper())
            self.close_connection = True
            return
        n = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(n) if n else b''
        cn = ''.join(v for rdn in (s.getpeercert() or {}).get('subject', ())
                     for k, v in rdn if k == 'commonName')
        info = 'conn=%d reused=%d sni=%s client=%s %s %s' % (
            self.conn_no, s.session_reused, names.get(id(s)) or '-',
            cn or '-', self.command, self.path)
        with lock, open(logfile, 'a') as f:
            f.write(info + '\n')
        out = (info + '\n').encode() + body
        self.send_response(200)
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = answer
    def log_message(self, *a):
        pass

srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
srv.daemon_threads = True
# the handshake in the connection's thread: one that fails stops no other
srv.socket = ctx.wrap_socket(srv.socket, server_side=True,
                             do_handshake_on_connect=False)
with open(portfile + '.tmp', 'w') as f:
    f.write(str(srv.server_address[1]))
os.rename(portfile + '.tmp', portfile)
srv.serve_forever()
PY

my @backends;

# A backend; its port once it listens
sub backend {
    my ($name, @ca) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', "$d/$name.out";
        open STDERR, '>&', \*STDOUT;
        { no warnings 'exec';
          exec $python, "$d/backend.py", $up->{crt}, $up->{key},
               "$d/$name.port", "$d/$name.log", @ca; }
        POSIX::_exit(127);
    }
    push @backends, $pid;
    FastdTest::wait_for(sub { -s "$d/$name.port" }, 10, 0.02)
        or die "backend $name did not start:\n"
               . (FastdTest::slurp("$d/$name.out") // '');
    return FastdTest::slurp("$d/$name.port");
}

END {
    local $?; # the test's exit status, not the backends'
    kill 'TERM', $_ for @backends;
    waitpid($_, 0) for @backends;
}

my $pa = backend('a');
my $pm = backend('m', $cafile);
# an HTTP server: answers 400 to the ClientHello, as one would
my $plain = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 8, Proto => 'tcp')
    or die "listen: $!";
my $hpid = fork // die "fork: $!";
if ($hpid == 0) {
    while (my $c = $plain->accept) {
        print $c "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
               . "Connection: close\r\n\r\n";
        close $c;
    }
    POSIX::_exit(0);
}
push @backends, $hpid;
# connects (the kernel's backlog), then never answers
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 8, Proto => 'tcp')
    or die "listen: $!";
my ($pp, $ps) = ($plain->sockport, $silent->sockport);

my $ca = "proxy_ssl_trusted_certificate = $cafile\n";
$t->write_conf(FastdTest::base_conf(extra => <<"CONF"));
[upstream tls]
server = 127.0.0.1:$pa
keepalive = 4

[upstream mixed]
server = 127.0.0.1:$pp
server = 127.0.0.1:$pa

[location /v/]
handler = proxy
pass = https://127.0.0.1:$pa/
$ca
[location /sni/]
handler = proxy
pass = https://127.0.0.1:$pa/
proxy_ssl_name = up.test
$ca
[location /ka/]
handler = proxy
pass = https://tls/
proxy_ssl_name = up.test
$ca
[location /badname/]
handler = proxy
pass = https://127.0.0.1:$pa/
proxy_ssl_name = wrong.test
$ca
[location /badca/]
handler = proxy
pass = https://127.0.0.1:$pa/
proxy_ssl_trusted_certificate = $other

[location /noverify/]
handler = proxy
pass = https://127.0.0.1:$pa/
proxy_ssl_trusted_certificate = $other
proxy_ssl_name = wrong.test
proxy_ssl_verify = off

[location /noreuse/]
handler = proxy
pass = https://127.0.0.1:$pa/
proxy_ssl_name = up.test
proxy_ssl_session_reuse = off
$ca
[location /mtls/]
handler = proxy
pass = https://127.0.0.1:$pm/
proxy_ssl_name = up.test
proxy_ssl_certificate = $client->{crt}
proxy_ssl_certificate_key = $client->{key}
$ca
[location /mtls-none/]
handler = proxy
pass = https://127.0.0.1:$pm/
proxy_ssl_name = up.test
$ca
[location /plain/]
handler = proxy
pass = https://127.0.0.1:$pp/
$ca
[location /mixed/]
handler = proxy
pass = https://mixed/
proxy_ssl_name = up.test
$ca
[location /ws/]
handler = proxy
pass = https://127.0.0.1:$pa/
proxy_ssl_name = up.test
websocket = on
$ca
[location /silent/]
handler = proxy
pass = https://127.0.0.1:$ps/
connect_timeout = 1s
$ca
CONF
$t->start;

# GET PATH: status and the backend's line about its connection
sub fetch {
    my ($path, $body) = @_;
    my $req = defined $body
        ? "POST $path HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
          . length($body) . "\r\n\r\n$body"
        : "GET $path HTTP/1.1\r\nHost: localhost\r\n\r\n";
    my $r = $t->http($req);
    return $r ? ($r->status, $r->body) : (0, '');
}

sub info { my ($body) = @_; my %h = $body =~ /(\w+)=(\S+)/g; return \%h }

my ($st, $b) = fetch('/v/x');
is($st, 200, 'GET over https, verified against the IP address SAN');
my $i = info($b);
like($b, qr{ GET /x\n}, 'the backend answered /x');
is($i->{sni}, '-', 'no SNI for an IP address');
is($i->{reused}, 0, 'a full handshake first');
($st, $b) = fetch('/v/post', 'a body over TLS');
is($st, 200, 'POST over https');
like($b, qr{ POST /post\na body over TLS$}, 'its body arrived');
is(info($b)->{reused}, 1, 'the next connection resumed the session');
isnt(info($b)->{conn}, $i->{conn}, 'on a new connection (keepalive = 0)');

($st, $b) = fetch('/sni/y');
is($st, 200, 'proxy_ssl_name up.test: verified');
is(info($b)->{sni}, 'up.test', 'and sent as SNI');
is(info($b)->{reused}, 0, "127.0.0.1's session is not offered for up.test");
($st, $b) = fetch('/sni/y');
is(info($b)->{reused}, 1, "up.test's own is");

($st, $b) = fetch('/noreuse/z');
is($st, 200, 'proxy_ssl_session_reuse = off');
($st, $b) = fetch('/noreuse/z');
is(info($b)->{reused}, 0, 'no session is offered');

my @conns;
for my $n (1 .. 3) {
    ($st, $b) = fetch("/ka/$n");
    is($st, 200, "keep-alive group over TLS: request $n");
    push @conns, info($b)->{conn};
}
is(scalar(keys %{ { map { $_ => 1 } @conns } }), 1,
   'all three on one TLS connection to the backend');

($st, $b) = fetch('/badname/q');
is($st, 502, 'a certificate not valid for proxy_ssl_name: 502');
ok(FastdTest::wait_for(sub { $t->error_log =~ /\[error\].*SSL handshake failed: certificate verify failed: hostname mismatch/ }, 5, 0.02),
   'the reason in the error log at [error]');
($st, $b) = fetch('/badca/q');
is($st, 502, 'an untrusted CA: 502');
ok(FastdTest::wait_for(sub { $t->error_log =~ /\[error\].*SSL handshake failed: certificate verify failed: unable to get local issuer certificate/ }, 5, 0.02),
   'the reason in the error log');

($st, $b) = fetch('/noverify/q');
is($st, 200, 'proxy_ssl_verify = off: any certificate, any name');
is(info($b)->{sni}, 'wrong.test', 'SNI is still proxy_ssl_name');

($st, $b) = fetch('/mtls/c');
is($st, 200, 'a backend that requires a client certificate');
is(info($b)->{client}, 'client.test', 'it saw proxy_ssl_certificate');
($st, $b) = fetch('/mtls-none/c');
is($st, 502, 'without one: 502');
# TLS 1.3: the client's handshake ends before the backend judges its
# certificate, so the request's send() may meet the closed connection
# before the backend's alert is read (a busy machine, io_uring): either
# is the refusal logged
like($t->error_log, qr/alert certificate required|127\.0\.0\.1:$pm: send\(\) failed \((?:32: Broken pipe|104: Connection reset by peer)\)/,
     "the backend's refusal in the error log");

($st, $b) = fetch('/plain/p');
is($st, 502, 'an upstream that does not speak TLS: 502');
like($t->error_log, qr/\[error\].*127\.0\.0\.1:$pp: SSL handshake failed: /,
     'its handshake failure logged');
for my $n (1 .. 2) {
    ($st, $b) = fetch("/mixed/$n");
    is($st, 200, "a group with a plain server first: request $n goes on to "
       . "the TLS one");
}
{
    my $c = $t->connect;
    $c->send("GET /ws/ HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
             . "Connection: Upgrade\r\n\r\n");
    ok($c->wait_for_bytes(qr/^HTTP\/1\.1 101 .*?\r\n\r\n/s, 5),
       'a WebSocket tunnel to an https upstream is up');
    $c->send('ping');
    ok($c->wait_for_bytes(qr/PING\z/, 5), 'its bytes go through TLS both ways');
    $c->send('x' x 100000);
    ok($c->wait_for_bytes(qr/PINGX{50000}X{50000}\z/, 10),
       '100 kB too, in records of 16k');
    $c->shut_wr;
    ok($c->wait_eof(5), "the client's FIN ends it");
    $c->close;
}

($st, $b) = fetch('/silent/s');
is($st, 504, 'a handshake that never ends: 504 after connect_timeout');
like($t->error_log, qr/\[error\].*:$ps: SSL handshake timed out/,
     'logged as such');

$t->no_alerts;
$t->stop;

# bad settings: fastd -t fails, naming the line (the last one here) and why
for my $case (
    [ "proxy_ssl_trusted_certificate = $d/none.crt",
      qr/proxy_ssl_trusted_certificate .*No such file/, 'a missing CA file' ],
    [ "proxy_ssl_certificate = $client->{crt}\n"
      . "proxy_ssl_certificate_key = $up->{key}",
      qr/proxy_ssl_certificate_key .*does not match/,
      'a client key that does not match its certificate' ],
    [ "proxy_ssl_protocols = TLSv1.1", qr/proxy_ssl_protocols: TLSv1\.1 is not/,
      'TLSv1.1' ],
    [ "proxy_ssl_name =", qr/empty name/, 'an empty proxy_ssl_name' ],
) {
    my ($keys, $why, $name) = @$case;
    my $path = $t->write_conf(FastdTest::base_conf(
        extra => "[location /p/]\nhandler = proxy\n"
               . "pass = https://127.0.0.1:$pa/\n$keys\n"), 'bad.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    # the line of the bad key (the file may go on: FASTD_TEST_BACKEND)
    my $text = FastdTest::slurp($path);
    my $line = 1 + (() = substr($text, 0, index($text, "$keys\n")
                                          + length $keys) =~ /\n/g);
    isnt($rc, 0, "fastd -t: $name");
    like($out, qr/\Q$path\E:$line: .*$why/, '... with file:line and why')
        or diag($out);
}

done_testing();
