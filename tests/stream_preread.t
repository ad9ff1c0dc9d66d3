#!/usr/bin/perl
# [stream] ssl_preread: TLS passthrough by SNI. Three TLS servers (python
# ssl) behind one listener: an exact name, a *.DOMAIN route, and pass for
# the rest (another name, no SNI at all); the servers finish the TLS
# handshake themselves with the client (fastd never decrypts), see the
# name and the client's ALPN; a ClientHello sent in pieces, a client that
# is not TLS (its bytes passed on to pass), one that stops mid-hello
# (preread_timeout, 400), no route and no pass (502), the access log's
# name, and bad lines.

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

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $crt = $pki->server('localhost');
my %be = map { $_ => backend('tls', $crt->{crt}, $crt->{key}, $_) } qw(A B C);
my $echo = backend('echo');
my ($p, $pn, $pe, $pa) = map { $t->another_port } 1 .. 4;

$t->write_conf(FastdTest::base_conf(extra => <<"C"));
[upstream b_pool]
server = 127.0.0.1:$be{B}

[stream tls]
listen = 127.0.0.1:$p
ssl_preread = on
sni = a.test 127.0.0.1:$be{A}
sni = *.b.test b_pool
sni = *.deep.b.test 127.0.0.1:$be{A}
pass = 127.0.0.1:$be{C}
access_log = $dir/stream.log

[stream nopass]
listen = 127.0.0.1:$pn
ssl_preread = on
preread_timeout = 500ms
sni = a.test 127.0.0.1:$be{A}
access_log = $dir/stream.log

[stream alpn]
listen = 127.0.0.1:$pa
ssl_preread = on
alpn = acme-tls/1 127.0.0.1:$be{B}
alpn = h2 127.0.0.1:$be{A}
sni = x.test 127.0.0.1:$be{A}
pass = 127.0.0.1:$be{C}

[stream plain]
listen = 127.0.0.1:$pe
ssl_preread = on
sni = a.test 127.0.0.1:$be{A}
pass = 127.0.0.1:$echo
C
$t->start;
ok(FastdTest::wait_for(sub { $t->port_open($_) }, 5), "listening on $_")
    for $p, $pn, $pe, $pa;

sub hello {
    my ($port, $sni, $alpn, @piece) = @_;
    my ($rc, $out) = TLS::run([ '/usr/bin/python3', $PY, 'hello', $port,
                                $sni, $alpn // '-', @piece ], timeout => 20);
    chomp $out;
    return $out;
}

is(hello($p, 'a.test', 'h2,http/1.1'), 'A sni=a.test alpn=h2',
   'an exact name: its server, which sees the name and the ALPN offered');
is(hello($p, 'A.Test'), 'A sni=A.Test alpn=',
   'names match without regard to case');
is(hello($p, 'x.b.test', 'http/1.1'), 'B sni=x.b.test alpn=http/1.1',
   '*.b.test: a name under it, to an [upstream] group');
is(hello($p, 'y.x.b.test'), 'B sni=y.x.b.test alpn=', '... any depth under it');
is(hello($p, 'q.deep.b.test'), 'A sni=q.deep.b.test alpn=',
   'the longest *.DOMAIN that covers the name wins');
is(hello($p, 'b.test'), 'C sni=b.test alpn=',
   '*.b.test does not cover b.test itself: pass');
is(hello($p, 'other.test'), 'C sni=other.test alpn=', 'another name: pass');
is(hello($p, '-'), 'C sni= alpn=', 'no SNI: pass');
is(hello($p, 'a.test', 'h2', 50), 'A sni=a.test alpn=h2',
   'a ClientHello sent 50 bytes at a time, 50 ms apart');

# alpn routes: a protocol offered, before the sni routes
is(hello($pa, 'x.test', 'acme-tls/1'), 'B sni=x.test alpn=',
   'alpn: acme-tls/1 offered goes to its route, before sni');
is(hello($pa, 'y.test', 'http/1.1,h2'), 'A sni=y.test alpn=h2',
   'alpn: h2 anywhere in the list');
is(hello($pa, 'y.test', 'http/1.1'), 'C sni=y.test alpn=http/1.1',
   'alpn: a list with none of them: sni, then pass');
is(hello($pa, 'y.test', 'h2c'), 'C sni=y.test alpn=',
   'alpn: a protocol is matched whole (h2c is not h2)');

# not TLS: the bytes go to pass as they came
my $c = FastdTest::Conn->new($pe, timeout => 10);
$c->send("hello, plain\n");
ok($c->wait_for_bytes(qr/hello, plain\n/), 'a client that is not TLS goes to pass, bytes intact');
$c->close;

# a client that stops in the middle of its hello
$c = FastdTest::Conn->new($pn, timeout => 10);
$c->send("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
ok($c->wait_eof(5), 'a hello that stops: closed after preread_timeout');
$c->close;

is(hello($pn, 'a.test'), 'A sni=a.test alpn=', 'no pass: a routed name');
is(hello($pn, 'z.test'), 'closed', 'no pass: another name is closed');

ok(FastdTest::wait_for(sub {
    (FastdTest::slurp("$dir/stream.log") // '') =~ /TCP 502 .* nopass "z\.test"$/m }, 5),
   'the access log: 502 and the name') or diag(FastdTest::slurp("$dir/stream.log"));
my $log = FastdTest::slurp("$dir/stream.log");
like($log, qr/^127\.0\.0\.1 \[[^\]]+\] TCP 200 \d+ \d+ \d+\.\d{3} "127\.0\.0\.1:$be{A}" tls "a\.test"$/m,
     'a passed connection: its server and name');
like($log, qr/TCP 400 0 0 \S+ "-" nopass ""$/m, 'the stopped hello: 400');
like($t->error_log, qr/no whole TLS ClientHello in preread_timeout 500ms/,
     'logged');
ok($t->running, 'fastd still running');
$t->stop;
$t->no_alerts;

# bad lines
for my $bad (["listen = 127.0.0.1:1\npass = 127.0.0.1:2\nsni = a.test 127.0.0.1:3\n",
              qr/sni routes need ssl_preread = on/],
             ["listen = 127.0.0.1:1\nssl_preread = on\nsni = a.test\n",
              qr/sni = NAME TARGET/],
             ["listen = 127.0.0.1:1\nssl_preread = on\nsni = a/b 127.0.0.1:3\n",
              qr/"a\/b" is not a host name/],
             ["listen = 127.0.0.1:1\nssl_preread = on\nsni = * 127.0.0.1:3\n",
              qr/is not a host name|names no domain/],
             ["listen = 127.0.0.1:1\nssl_preread = on\nsni = a.test nosuch\n",
              qr/sni = a\.test nosuch: no \[upstream nosuch\]/],
             ["listen = 127.0.0.1:1\nalpn = h2 127.0.0.1:2\npass = 127.0.0.1:2\n",
              qr/alpn routes need ssl_preread = on/],
             ["listen = 127.0.0.1:1\nssl_preread = on\nalpn = h2,http/1.1 127.0.0.1:2\n",
              qr/"h2,http\/1\.1" is not one protocol name/]) {
    my ($body, $re) = @$bad;
    my $file = "$dir/bad.conf";
    FastdTest::spew($file, "[main]\ndaemon = off\nerror_log = $dir/bad.log\n\n[stream s]\n$body");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re, "a config error: $re") or diag($out);
}

done_testing;
