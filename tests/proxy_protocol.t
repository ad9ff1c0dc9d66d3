#!/usr/bin/perl
# listen ... proxy_protocol: PROXY v1 (curl --haproxy-protocol, and by
# hand with other addresses), v2 built here (IPv4, IPv6, TLVs skipped,
# LOCAL keeps the peer), a header split across reads, truncated, missing
# (a plain request closes), malformed, the timeout; before a TLS handshake
# and before the h2c preface; acl, max_conns_per_ip and the access log by
# the PROXY header's address; bad listen lines naming file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use IO::Socket::INET;
use POSIX ();
use Test::More;

my $locs = "[location /addr]\nreturn = 200 \"\$remote_addr\"\n\n"
         . "[location /hop]\nreturn = 200 \"\$remote_addr \$remote_port "
         . "\$realip_remote_addr\"\n\n"
         . "[location /acl]\nhandler = plaintext\nallow = 192.0.2.0/24\n"
         . "deny = all\n\n";
my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { listen => '127.0.0.1:%%PORT%% proxy_protocol http2',
                proxy_protocol_timeout => '1s',
                max_conns_per_ip => 2,
                access_log => '%%DIR%%/access.log format=mine buffer=0',
                log_format => 'mine $remote_addr "$request"' },
    locations => $locs));
$t->start({ nowait => 1 });
our $port = $t->port;

# bytes on a new connection; everything the server sends until it closes
sub talk {
    my (@pieces) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Timeout => 5) or return undef;
    for my $i (0 .. $#pieces) {
        # a pause between pieces, so that they arrive in separate reads
        select(undef, undef, undef, 0.2) if $i;
        syswrite($s, $pieces[$i]);
    }
    shutdown($s, 1) unless @pieces && $pieces[-1] =~ /\r\n\r\n$/;
    my ($all, $buf) = ('');
    $s->blocking(1);
    local $SIG{ALRM} = sub { die "timeout\n" };
    eval {
        alarm 8;
        $all .= $buf while sysread($s, $buf, 65536);
        alarm 0;
    };
    return $all;
}
sub body { my ($raw) = @_; $raw =~ /\r\n\r\n(.*)\z/s ? $1 : "<$raw>" }

my $get = "GET /addr HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
FastdTest::wait_for(sub { (talk("PROXY UNKNOWN\r\n$get") // "") =~ /^HTTP/ }, 10);

# --- v1 ----------------------------------------------------------------------
is(body(talk("PROXY TCP4 192.0.2.7 127.0.0.1 5555 80\r\n$get")), '192.0.2.7',
   'v1 TCP4: the source address is $remote_addr');
is(body(talk("PROXY TCP6 2001:db8::9 ::1 5555 80\r\n$get")), '2001:db8::9',
   'v1 TCP6');
is(body(talk("PROXY UNKNOWN\r\n$get")), '127.0.0.1', 'v1 UNKNOWN: the peer');
is(body(talk("PROXY TCP4 192.0.2.7 127.0.0.1 5555 80\r\n"
             . "GET /hop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")),
   '192.0.2.7 5555 127.0.0.1',
   '$remote_port from the header, $realip_remote_addr the balancer');
is(body(talk("PROXY UNKNOWN ff ee\r\n$get")), '127.0.0.1',
   'v1 UNKNOWN with fields: the peer');
is(body(talk("PROXY TCP4 192.0.2.8 127.0.0.1 5555 80\r\n", $get)),
   '192.0.2.8', 'the header and the request in two reads');
is(body(talk("PROX", "Y TCP4 192.0.2.", "9 127.0.0.1 5555 80\r", "\n$get")),
   '192.0.2.9', 'a header split across four reads');
SKIP: {
    my $curl = TLS::curl() or skip('no curl', 1);
    my ($rc, $out) = TLS::run([$curl, '-s', '--haproxy-protocol',
                               "http://127.0.0.1:$port/addr"]);
    is($out, '127.0.0.1', 'curl --haproxy-protocol');
}

# --- v2 ----------------------------------------------------------------------
my $sig = "\r\n\r\n\0\r\nQUIT\n";
sub v2 {
    my ($cmd, $fam, $addrs, $tlv) = @_;
    $tlv //= '';
    return $sig . pack('CCn', 0x20 | $cmd, $fam, length($addrs . $tlv))
         . $addrs . $tlv;
}
my $v4 = pack('C4C4nn', 192, 0, 2, 20, 127, 0, 0, 1, 4444, 80);
is(body(talk(v2(1, 0x11, $v4) . $get)), '192.0.2.20', 'v2 TCP4');
my $v6 = pack('n8n8nn', 0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x21,
              0, 0, 0, 0, 0, 0, 0, 1, 4444, 80);
is(body(talk(v2(1, 0x21, $v6) . $get)), '2001:db8::21', 'v2 TCP6');
my $tlvs = pack('Cn', 0x04, 3) . 'abc' . pack('Cn', 0x01, 2) . 'h2'
         . pack('Cn', 0xEE, 200) . ('x' x 200);
is(body(talk(v2(1, 0x11, $v4, $tlvs) . $get)), '192.0.2.20',
   'v2 with TLVs: skipped');
is(body(talk(v2(0, 0x11, $v4) . $get)), '127.0.0.1',
   'v2 LOCAL: the peer\'s address stays');
is(body(talk(v2(1, 0x00, '') . $get)), '127.0.0.1', 'v2 UNSPEC: the peer');
my $h = v2(1, 0x11, $v4, $tlvs);
is(body(talk(substr($h, 0, 5), substr($h, 5, 12), substr($h, 17), $get)),
   '192.0.2.20', 'v2 split across reads (in the signature, the length)');

# --- bad, truncated, missing ---------------------------------------------------
is(talk($get), '', 'no PROXY header (a plain request): closed, no answer');
is(talk("PROXY TCP4 192.0.2.7 127.0.0.1 5555\r\n$get"), '',
   'v1 with a field missing: closed');
is(talk("PROXY TCP4 192.0.2.300 127.0.0.1 5555 80\r\n$get"), '',
   'v1 with a bad address: closed');
is(talk("PROXY TCP4 2001:db8::1 127.0.0.1 5555 80\r\n$get"), '',
   'v1 TCP4 with an IPv6 address: closed');
is(talk("PROXY TCP4 192.0.2.7 127.0.0.1 5555 99999\r\n$get"), '',
   'v1 with a bad port: closed');
is(talk("PROXY TCP4 192.0.2.7 127.0.0.1 5555 80\n$get"), '',
   'v1 ending in a bare LF: closed');
is(talk('PROXY ' . ('A' x 120) . "\r\n$get"), '', 'v1 too long: closed');
is(talk("PROXY TCP4 192.0.2.7"), '', 'v1 truncated (then EOF): closed');
is(talk(substr($h, 0, 20)), '', 'v2 truncated (then EOF): closed');
is(talk(substr(v2(1, 0x11, $v4), 0, 12) . "\x31" . substr(v2(1, 0x11, $v4), 13)
        . $get), '', 'v2 with version 3: closed');
is(talk($sig . pack('CCn', 0x21, 0x11, 4) . 'abcd' . $get), '',
   'v2 with addresses shorter than their family: closed');

# the timeout: a connection that sends nothing is closed by
# proxy_protocol_timeout (1 s), well before the header timeout
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Timeout => 5) or die;
    my $t0 = time;
    my $buf;
    local $SIG{ALRM} = sub { die "timeout\n" };
    my $n = eval { alarm 15; my $n = sysread($s, $buf, 10); alarm 0; $n };
    is($n, 0, 'silent client: closed by proxy_protocol_timeout');
    cmp_ok(time - $t0, '<', 10, '... within a bounded time');
    ok(FastdTest::wait_for(sub { $t->error_log =~
        /timed out sending the PROXY protocol header/ }, 5),
       '... logged at info');
}
like($t->error_log, qr/\[info\].*bad PROXY protocol header/,
     'a bad header is logged at info');
like($t->error_log, qr/\[info\].*truncated PROXY protocol header/,
     'a truncated header is logged at info');

# --- acl, the access log, max_conns_per_ip ------------------------------------
my $acl = "GET /acl HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
like(talk("PROXY TCP4 192.0.2.1 127.0.0.1 5555 80\r\n$acl"), qr/^HTTP\/1\.1 200/,
     'acl: the real client inside 192.0.2.0/24 passes');
like(talk("PROXY TCP4 198.51.100.1 127.0.0.1 5555 80\r\n$acl"),
     qr/^HTTP\/1\.1 403/, 'acl: a real client outside is denied');
like(talk("PROXY UNKNOWN\r\n$acl"), qr/^HTTP\/1\.1 403/,
     'acl: the balancer itself is denied');
ok(FastdTest::wait_for(sub {
    (FastdTest::slurp($t->dir . '/access.log') // '') =~
        m{^192\.0\.2\.1 "GET /acl HTTP/1\.1"$}m }, 5),
   'the access log shows the PROXY header\'s address');
{
    # two idle keep-alive connections of 192.0.2.50: a third is refused,
    # while another client behind the same balancer is served
    my @held;
    for (1 .. 2) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $port) or die;
        syswrite($s, "PROXY TCP4 192.0.2.50 127.0.0.1 5555 80\r\n"
                   . "GET /addr HTTP/1.1\r\nHost: x\r\n\r\n");
        my $buf = '';
        sysread($s, $buf, 4096) until $buf =~ /192\.0\.2\.50$/;
        push @held, $s;
    }
    like(talk("PROXY TCP4 192.0.2.50 127.0.0.1 5555 80\r\n$get"),
         qr/^HTTP\/1\.1 503/, 'max_conns_per_ip counts the real address');
    is(body(talk("PROXY TCP4 192.0.2.51 127.0.0.1 5555 80\r\n$get")),
       '192.0.2.51', '... not the balancer\'s');
}

# --- h2c (prior knowledge) after the PROXY header -----------------------------
SKIP: {
    my $curl = TLS::curl() or skip('no curl', 1);
    my ($rc, $out) = TLS::run([$curl, '-s', '--haproxy-protocol',
                               '--http2-prior-knowledge', '-o', '/dev/null',
                               '-w', '%{http_version}',
                               "http://127.0.0.1:$port/addr"]);
    is($out, '2', 'h2c prior knowledge after the PROXY header');
}

# --- TLS: the header comes before the handshake -------------------------------
SKIP: {
    skip('no openssl', 4) unless TLS::openssl();
    eval { require IO::Socket::SSL; 1 } or skip('no IO::Socket::SSL', 4);
    my $ts = FastdTest->new;
    my $pki = TLS->new($ts->dir);
    my $cert = $pki->server('localhost');
    $ts->write_conf(TLS::conf(certs => [$cert], names => 'localhost',
                              listen_opt => 'ssl proxy_protocol http2',
                              locations => $locs));
    $ts->start({ nowait => 1 });
    my $tls = sub {
        my ($hdr) = @_;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $ts->port) or return '';
        syswrite($s, $hdr);
        IO::Socket::SSL->start_SSL($s, SSL_verify_mode => 0,
                                   SSL_hostname => 'localhost',
                                   Timeout => 5) or return 'no handshake';
        print $s $get;
        local $/;
        my $r = <$s> // '';
        return $r;
    };
    FastdTest::wait_for(sub { $tls->("PROXY UNKNOWN\r\n") =~ /^HTTP/ }, 10);
    is(body($tls->("PROXY TCP4 192.0.2.77 127.0.0.1 5555 443\r\n")),
       '192.0.2.77', 'TLS: a v1 header before the handshake');
    is(body($tls->(v2(1, 0x11, $v4, $tlvs))), '192.0.2.20',
       'TLS: a v2 header with TLVs before the handshake');
    is($tls->(''), 'no handshake', 'TLS: no PROXY header, no handshake');
    SKIP: {
        my $curl = TLS::curl() or skip('no curl', 1);
        my ($rc, $out) = TLS::run([$curl, '-s', '--haproxy-protocol',
            '--cacert', $pki->ca, '--http2', '-w', ' %{http_version}',
            'https://localhost:' . $ts->port . '/addr']);
        is($out, '127.0.0.1 2', 'curl --haproxy-protocol over TLS with h2');
    }
    $ts->stop;
    $ts->no_alerts;
}

# --- proxy_protocol = on in [upstream]: the header a real upstream gets --------
{
    # an upstream that reads a PROXY header, then the request, and answers
    # with what the header said (v2: in hex) and the X-Forwarded-For
    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 16, ReuseAddr => 1) or die $!;
    my $bport = $ls->sockport;
    my $pid = fork // die;
    if ($pid == 0) {
        while (my $c = $ls->accept) {
            # the header may come in a write of its own, and v2's
            # signature itself holds "\r\n\r\n": read past the header,
            # then to the end of the request's
            my $in = '';
            my $head_len = sub {
                return length($1) if $in =~ /\A(PROXY [^\r]*\r\n)/;
                return 16 + unpack('n', substr($in, 14, 2))
                    if length($in) >= 16 && substr($in, 0, 12) eq $sig;
                return length($in) >= 16 ? 0 : undef;
            };
            for (;;) {
                my $h = $head_len->();
                last if defined $h && index($in, "\r\n\r\n", $h) >= 0;
                my $n = sysread($c, $in, 4096, length $in);
                last unless $n;
            }
            my ($hdr) = $in =~ /\A(PROXY [^\r]*)\r\n/;
            if (!defined $hdr && substr($in, 0, 12) eq $sig) {
                my $len = unpack('n', substr($in, 14, 2));
                $hdr = 'v2 ' . unpack('H*', substr($in, 12, 4 + $len));
            }
            my ($xff) = $in =~ /^X-Forwarded-For: ([^\r]*)/mi;
            my $body = ($hdr // 'none') . '|' . ($xff // '');
            print $c "HTTP/1.1 200 OK\r\nContent-Length: " . length($body)
                   . "\r\nConnection: close\r\n\r\n$body";
            close $c;
        }
        POSIX::_exit(0);
    }
    close $ls;
    my $up = FastdTest->new(conf => FastdTest::base_conf(
        server => { listen => '127.0.0.1:%%PORT%% proxy_protocol',
                    set_real_ip_from => '192.0.2.0/24',
                    real_ip_header => 'X-Forwarded-For' },
        locations => "[location /v1]\nhandler = proxy\nupstream = v1\n\n"
                   . "[location /v2]\nhandler = proxy\nupstream = v2\n\n",
        extra => "[upstream v1]\nserver = 127.0.0.1:$bport\n"
               . "proxy_protocol = on\n\n"
               . "[upstream v2]\nserver = 127.0.0.1:$bport\n"
               . "proxy_protocol = on\nproxy_protocol_version = 2\n\n"));
    $up->start({ nowait => 1 });
    local $port = $up->port;
    my $g = sub { "GET $_[0] HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  . ($_[1] // '') . "\r\n" };
    FastdTest::wait_for(sub { (talk("PROXY UNKNOWN\r\n" . $g->('/v1'))
                               // '') =~ /^HTTP/ }, 10);
    my $b = body(talk("PROXY TCP4 192.0.2.60 127.0.0.1 5555 80\r\n"
                      . $g->('/v1')));
    like($b, qr/^PROXY TCP4 192\.0\.2\.60 127\.0\.0\.1 \d+ $port\|192\.0\.2\.60$/,
         'upstream proxy_protocol = on: v1 with the client (PROXY in), '
         . 'and X-Forwarded-For') or diag($b);
    $b = body(talk("PROXY TCP4 192.0.2.61 127.0.0.1 5555 80\r\n"
                   . $g->('/v1', "X-Forwarded-For: 203.0.113.5\r\n")));
    like($b, qr/^PROXY TCP4 203\.0\.113\.5 127\.0\.0\.1 \d+ $port\|203\.0\.113\.5, 203\.0\.113\.5$/,
         '... the real client after X-Forwarded-For from a trusted hop')
        or diag($b);
    $b = body(talk("PROXY TCP4 192.0.2.62 127.0.0.1 5555 80\r\n"
                   . $g->('/v2')));
    is($b, sprintf('v2 2111000cc000023e7f000001%04x%04x|192.0.2.62', 5555,
                   $port),
       'proxy_protocol_version = 2: a binary header with the client and '
       . 'its port') or diag($b);
    $up->stop;
    $up->no_alerts;
    kill 'TERM', $pid;
    waitpid($pid, 0);
}

# proxy_protocol_timeout's default (30s) applies when the key is absent:
# it was 0 (the [server] keys' defaults were never set), which reset a
# connection whose header came in two pieces (the accept waits for the
# first bytes: TCP_DEFER_ACCEPT)
{
    my $d = FastdTest->new(conf => FastdTest::base_conf(
        server => { listen => '127.0.0.1:%%PORT%% proxy_protocol' },
        locations => $locs));
    $d->start({ nowait => 1 });
    local $port = $d->port;
    FastdTest::wait_for(sub { $d->port_open($port) }, 10);
    my $late = talk('PROX', "Y TCP4 192.0.2.9 192.0.2.1 5000 80\r\n$get");
    is(body($late // ''), '192.0.2.9',
       'no proxy_protocol_timeout: a header in two pieces, 0.2 s apart')
        or diag($late);
    $d->stop;
    $d->no_alerts;
}

# --- config errors -----------------------------------------------------------
{
    my $conf = FastdTest::base_conf(
        server => { listen => '127.0.0.1:%%PORT%% proxy_protocl' });
    my $path = $t->write_conf($conf, 'bad.conf');
    my $line = FastdTest::line_of($t->subst($conf), qr/^listen = /);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, 'an unknown listen option is an error');
    like($out, qr/bad\.conf:$line: .*proxy_protocl/, '... naming file:line')
        or diag($out);
    $conf = FastdTest::main_section()
          . "[server]\nlisten = 127.0.0.1:%%PORT%% proxy_protocol\n\n"
          . "[server]\nlisten = 127.0.0.1:%%PORT%%\nserver_name = b\n";
    $path = $t->write_conf($conf, 'bad.conf');
    ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, 'one address with and without proxy_protocol is an error');
    like($out, qr/bad\.conf:\d+: listen .*proxy_protocol/, '... naming file:line')
        or diag($out);
    $conf = FastdTest::base_conf(server => { proxy_protocol_timeout => '0' });
    $path = $t->write_conf($conf, 'bad.conf');
    $line = FastdTest::line_of($t->subst($conf), qr/^proxy_protocol_timeout/);
    ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/bad\.conf:$line: /, 'proxy_protocol_timeout = 0: an error')
        or diag($out);
}

{
    my $conf = FastdTest::base_conf(extra => "[upstream u]\n"
        . "server = 127.0.0.1:1\nproxy_protocol = on\nkeepalive = 4\n");
    my $path = $t->write_conf($conf, 'bad.conf');
    my $line = FastdTest::line_of($t->subst($conf), qr/^keepalive = 4/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/bad\.conf:$line: .*keepalive with proxy_protocol/,
         'an upstream with keepalive and proxy_protocol: an error')
        or diag($out);
    $conf = FastdTest::base_conf(extra => "[upstream u]\n"
        . "server = 127.0.0.1:1\nproxy_protocol_version = 3\n");
    $path = $t->write_conf($conf, 'bad.conf');
    $line = FastdTest::line_of($t->subst($conf), qr/^proxy_protocol_version/);
    ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/bad\.conf:$line: /, 'proxy_protocol_version = 3: an error')
        or diag($out);
}

$t->stop;
$t->no_alerts;
done_testing;
