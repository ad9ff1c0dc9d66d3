#!/usr/bin/perl
# [stream] listen = ADDR ssl: TLS ends at fastd and the server gets the
# plaintext (an echo server behind; openssl s_client in front): bytes
# both ways over TLS 1.3 and 1.2, a session resumed by its ticket, a
# client that is not TLS and one that never finishes its handshake
# (ssl_handshake_timeout) closed with 400 in the access log, and bad
# lines.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

my $PY = "$FindBin::Bin/lib/stream_backend.py";
my (@kids, @pipes);
sub backend {
    my (@args) = @_;
    my $pid = open(my $fh, '-|', '/usr/bin/python3', $PY, @args)
        or die "python3: $!";
    push @kids, $pid;
    push @pipes, $fh;
    my $port = <$fh>;
    die "backend @args did not start" unless defined $port;
    chomp $port;
    return $port;
}
END { local $?; kill "KILL", @kids if @kids; waitpid $_, 0 for @kids }

my $echo = backend('echo');
my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $crt = $pki->server('echo.test');
my $p = $t->another_port;
$t->write_conf(FastdTest::base_conf(extra => <<"C"));
[stream tls]
listen = 127.0.0.1:$p ssl
pass = 127.0.0.1:$echo
ssl_certificate = $crt->{crt}
ssl_certificate_key = $crt->{key}
ssl_handshake_timeout = 500ms
access_log = $dir/stream.log
C
$t->start;
ok(FastdTest::wait_for(sub { $t->port_open($p) }, 5), 'listening');

for my $v ('-tls1_3', '-tls1_2') {
    my $c = $pki->connect(port => $p, name => 'echo.test', args => [$v]);
    $c->send("hello over TLS $v\n");
    ok($c->wait_for_bytes(qr/hello over TLS \Q$v\E\n/, 10),
       "$v: bytes through TLS to the plain server and back");
    my $big = join '', map { chr(65 + $_ % 26) } 1 .. 300_000;
    $c->send("$big\n");
    ok($c->wait_for_bytes(qr/\Q$big\E\n/, 20), "$v: 300 KB and back, in order");
    $c->close;
}

# resumption: the ticket of the first connection
my $sess = "$dir/sess.pem";
my $c = $pki->connect(port => $p, name => 'echo.test', quiet => 0,
                      args => ['-tls1_3', '-sess_out', $sess]);
$c->send("a\n");
ok($c->wait_for_bytes(qr/^a$/m, 10), 'a first session');
$c->close;
$c = $pki->connect(port => $p, name => 'echo.test', quiet => 0,
                   args => ['-tls1_3', '-sess_in', $sess]);
ok($c->wait_for_bytes(qr/^Reused, TLSv1\.3/m, 10), 'resumed by its ticket');
$c->close;

# not TLS, and a handshake that never ends
my $plain = FastdTest::Conn->new($p, timeout => 10);
$plain->send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
ok($plain->wait_eof(5), 'plain HTTP to the TLS port: closed');
$plain->close;
my $mute = FastdTest::Conn->new($p, timeout => 10);
ok($mute->wait_eof(5), 'no handshake: closed after ssl_handshake_timeout');
$mute->close;
ok(FastdTest::wait_for(sub {
    (() = (FastdTest::slurp("$dir/stream.log") // '') =~ /TCP 400 /g) >= 2 }, 5),
   'both logged 400') or diag(FastdTest::slurp("$dir/stream.log"));
like($t->error_log, qr/no TLS handshake in ssl_handshake_timeout 500ms/, 'the timeout in the error log');
like(FastdTest::slurp("$dir/stream.log") // '',
     qr/TCP 200 \d+ \d+ \S+ "127\.0\.0\.1:$echo" tls$/m, 'a TLS session logged 200');
ok($t->running, 'fastd still running');
$t->stop;
$t->no_alerts;

# bad lines
for my $bad (["listen = 127.0.0.1:1 ssl\npass = 127.0.0.1:2\n",
              qr/listen \.\.\. ssl needs ssl_certificate and ssl_certificate_key/],
             ["listen = 127.0.0.1:1 ssl\npass = 127.0.0.1:2\nssl_certificate = $crt->{crt}\nssl_certificate_key = $crt->{crt}\n",
              qr/\[stream s\]: .*(key|PEM|no start line)/i],
             ["listen = 127.0.0.1:1\npass = 127.0.0.1:2\nssl_certificate = $crt->{crt}\n",
              qr/a certificate without listen = ADDR ssl/],
             ["listen = 127.0.0.1:1 ssl\npass = 127.0.0.1:2\nssl_preread = on\nssl_certificate = $crt->{crt}\nssl_certificate_key = $crt->{key}\n",
              qr/goes with neither udp nor ssl_preread/]) {
    my ($body, $re) = @$bad;
    my $file = "$dir/bad.conf";
    FastdTest::spew($file, "[main]\ndaemon = off\nerror_log = $dir/bad.log\n\n[stream s]\n$body");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re, "a config error: $re") or diag($out);
}
done_testing;
