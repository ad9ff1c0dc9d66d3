#!/usr/bin/perl
# HTTP/3 over QUIC (listen ... quic beside the ssl listener of the same
# [server]): ngtcp2's own client (gtlsclient) and libcurl's HTTP/3 through
# Debian's pycurl fetch /plaintext, a static file of several MB (byte for
# byte), a proxied response and a POST body through the proxy (its digest
# from the backend); 100 streams at once on one connection; TCP responses
# carry Alt-Svc; the access log says HTTP/3.0; max_body_size holds for a
# body with and without a Content-Length. Bad input -- garbage
# datagrams, a truncated Initial, an Initial that does not decrypt, an
# unknown version (answered with Version Negotiation) -- breaks nothing.
# /status and Prometheus count QUIC connections, streams, the Initials
# dropped and a client's migration (gtlsclient --change-local-addr).
# Each on the epoll and the io_uring backend (the latter with quic_gso =
# off: one datagram a message).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TLS;
use Digest::SHA qw(sha256_hex);
use File::Path qw(make_path);
use IO::Socket::INET;
use JSON::PP;
use POSIX ();
use Test::More;
use Time::HiRes qw(time);

my $root = FastdTest::root();
my $cfg = FastdTest::slurp("$root/objs/fd_auto_config.h") // '';
plan skip_all => 'fastd built without HTTP/3 (./configure --with-http3)'
    unless $cfg =~ /^#define FD_HTTP3 1/m;
my $py = '/usr/bin/python3';
plan skip_all => 'python3-pycurl on libcurl with HTTP/3 is not installed'
    unless system($py, '-c', 'import pycurl, sys; '
                . 'sys.exit(0 if "nghttp3" in pycurl.version else 1)') == 0;
my $gtls = '/usr/bin/gtlsclient';
plan skip_all => 'ngtcp2-client (gtlsclient) is not installed' unless -x $gtls;
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $h3get = "$FindBin::Bin/lib/h3get.py";

# the backend: GET echoes the request, POST answers its body's digest
my $be = Backend->new(handler => sub {
    my ($req) = @_;
    if ($req->{path} =~ m{/slow$}) {
        # a response that takes a second: in flight at a graceful stop
        select(undef, undef, undef, 1);
        return Backend::response(200, "slow answer\n");
    }
    return Backend::response(200, "sha256=" . sha256_hex($req->{body})
                                  . " length=" . length($req->{body}) . "\n")
        if $req->{method} eq 'POST';
    return Backend::echo($req);
});

# JSON lines from h3get.py: h3($t, [OPTIONS], PATH...)
sub h3 {
    my ($t, @args) = @_;
    my $port = $t->port;
    my @opts = ref $args[0] ? @{ shift @args } : ();
    open my $fh, '-|', $py, $h3get, @opts, "localhost:$port:127.0.0.1",
        map { "https://localhost:$port$_" } @args
        or die "h3get: $!";
    my @r = map { decode_json($_) } grep { /^\{/ } <$fh>;
    close $fh;
    return wantarray ? @r : $r[0];
}

# A datagram to the QUIC port; the answer (or undef after 2 s).
sub udp {
    my ($port, $data, $wait) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                  Proto => 'udp') or die "udp: $!";
    $s->send($data) or die "send: $!";
    return undef unless $wait;
    my $rin = '';
    vec($rin, fileno($s), 1) = 1;
    return undef unless select(my $rout = $rin, undef, undef, 2);
    my $buf;
    $s->recv($buf, 65536);
    return $buf;
}

# /status over TCP: its "quic" object (Prometheus text with $prom)
sub quic_status {
    my ($t, $prom) = @_;
    my ($rc, $out) = TLS::run([TLS::curl(), '-sk', 'https://127.0.0.1:'
        . $t->port . '/status' . ($prom ? '?format=prometheus' : '')]);
    return $out if $prom;
    my $s = eval { decode_json($out) } // {};
    return $s->{quic} // {};
}

# A QUIC long header: type (0: Initial), version, the IDs, then payload
sub long_header {
    my ($version, $dcid, $scid, $rest) = @_;
    return pack('C N C a* C a*', 0xc0, $version, length $dcid, $dcid,
                length $scid, $scid) . $rest;
}

for my $backend ('epoll', 'io_uring') {
    # GSO on the epoll pass (the default), one datagram a message on the
    # io_uring one
    my $gso = $backend eq 'epoll' ? 'on' : 'off';
    my $t = FastdTest->new;
    my $dir = $t->dir;
    my $pki = TLS->new($dir);
    my $cert = $pki->server('localhost');
    my $bp = $be->port;
    make_path("$dir/www");
    my $big = join '', map { pack('N', $_ * 2654435761 % 4294967296) }
                           1 .. 1_500_000; # 6 MB, no two blocks alike
    FastdTest::spew("$dir/www/big.bin", $big);
    FastdTest::spew("$dir/www/small.txt", "small file\n");
    my $mid = substr($big, 0, 1_500_000);
    FastdTest::spew("$dir/www/mid.bin", $mid);
    my $post = join '', map { chr(($_ * 7 + ($_ >> 8)) % 256) } 1 .. 300_000;
    FastdTest::spew("$dir/post.bin", $post);
    $t->write_conf(<<"CONF");
@{[ FastdTest::main_section() ]}
[events]
backend = $backend

[http]
log_format = proto \$server_protocol \$status \$request_uri \$scheme
access_log = %%DIR%%/access.log format=proto buffer=0
quic_gso = $gso

[server]
@{[ TLS::quic_server_keys($cert) ]}root = %%DIR%%/www

[location /plaintext]
handler = plaintext

[location /limited/]
handler = plaintext
max_body_size = 64

[location = /status]
handler = status

[location /rated/]
alias = %%DIR%%/www/
limit_rate = 500k

[location /proxy/]
handler = proxy
pass = http://127.0.0.1:$bp
CONF
    $t->start;
    my $port = $t->port;
    my $ca = $pki->ca;

    # --- ngtcp2's client ----------------------------------------------------
    my $out = `timeout 20 $gtls --exit-on-all-streams-close --sni=localhost 127.0.0.1 $port https://localhost:$port/plaintext 2>&1`;
    like($out, qr/\[:status: 200\]/, "$backend: gtlsclient gets 200 for /plaintext");
    like($out, qr/Hello, World!|48 65 6c 6c 6f 2c 20 57/, "$backend: gtlsclient gets the body");

    # --- libcurl over HTTP/3 -------------------------------------------------
    my $r = h3($t, ['--cafile', $ca], '/plaintext');
    is($r->{status}, 200, "$backend: pycurl /plaintext: 200");
    is($r->{version}, 30, "$backend: pycurl /plaintext: over HTTP/3");
    is($r->{body}, 'Hello, World!', "$backend: pycurl /plaintext: the body");

    $r = h3($t, '/big.bin');
    is($r->{status}, 200, "$backend: a 6 MB static file: 200");
    is($r->{length}, length $big, "$backend: the static file: every byte");
    is($r->{sha256}, sha256_hex($big), "$backend: the static file: byte for byte");
    is($r->{headers}{'content-length'}, length $big, "$backend: with its Content-Length");
    ok(!exists $r->{headers}{'alt-svc'}, "$backend: no Alt-Svc over HTTP/3 itself");

    $r = h3($t, '/small.txt');
    is($r->{body}, "small file\n", "$backend: a small static file");

    $r = h3($t, '/proxy/x?y=1');
    is($r->{status}, 200, "$backend: proxied GET: 200");
    like($r->{body} // '', qr{^GET /proxy/x\?y=1 HTTP/1\.1\n}, "$backend: proxied GET reached the backend");
    like($r->{body} // '', qr{^X-Forwarded-Proto: https$}mi, "$backend: proxied: X-Forwarded-Proto https (QUIC is TLS)");

    $r = h3($t, ['--post', "$dir/post.bin"], '/proxy/upload');
    is($r->{status}, 200, "$backend: POST of 300 KB through the proxy: 200");
    is($r->{body}, "sha256=" . sha256_hex($post) . " length=300000\n",
       "$backend: the backend got the POST body byte for byte");

    # max_body_size, whether or not the body says its length: a body of
    # unknown length once got up to 4 KB past it (the first buffer)
    FastdTest::spew("$dir/100.bin", 'x' x 100);
    FastdTest::spew("$dir/60.bin", 'x' x 60);
    $r = h3($t, ['--post', "$dir/100.bin"], '/limited/');
    is($r->{status}, 413, "$backend: 100 bytes over max_body_size 64, with its length: 413");
    $r = h3($t, ['--post-unsized', "$dir/100.bin"], '/limited/');
    is($r->{status}, 413, "$backend: and without (a body of unknown length): 413");
    $r = h3($t, ['--post-unsized', "$dir/60.bin"], '/limited/');
    is($r->{status}, 200, "$backend: 60 bytes without a length: 200");

    # --- many streams on one connection ------------------------------------------
    my @rs = h3($t, ['--streams', 100], '/plaintext', '/small.txt');
    is(scalar @rs, 200, "$backend: 200 requests at once");
    is(scalar(grep { $_->{status} == 200 && $_->{version} == 30 } @rs), 200,
       "$backend: each answered over HTTP/3");
    is(scalar(grep { ($_->{body} // '') eq 'Hello, World!' || ($_->{body} // '') eq "small file\n" } @rs),
       200, "$backend: each with its own body");
    my $conns = 0;
    $conns += $_->{connects} for @rs;
    is($conns, 1, "$backend: on one QUIC connection");
    @rs = h3($t, ['--streams', 3], '/big.bin');
    is(scalar(grep { $_->{sha256} eq sha256_hex($big) } @rs), 3,
       "$backend: three large files at once, interleaved, byte for byte");

    # --- Alt-Svc on TCP -------------------------------------------------------------
    my ($rc, $hdr) = TLS::run([TLS::curl(), '-sk', '-o', '/dev/null', '-D',
                               '-', "https://127.0.0.1:$port/small.txt"]);
    like($hdr, qr/^Alt-Svc: h3=":$port"; ma=86400\r?$/mi,
         "$backend: responses over TCP carry Alt-Svc");

    # --- the access log ----------------------------------------------------------
    FastdTest::wait_for(sub {
        (FastdTest::slurp("$dir/access.log") // '') =~ m{HTTP/3\.0 200 /proxy/upload https}
    }, 5);
    like(FastdTest::slurp("$dir/access.log") // '', qr{^HTTP/3\.0 200 /plaintext https$}m,
         "$backend: \$server_protocol is HTTP/3.0 and \$scheme https");

    # --- bad input -------------------------------------------------------------------
    my $q0 = quic_status($t);
    my @before = $t->workers;
    udp($port, "\x00" x 3);
    udp($port, join('', map { chr(rand 256) } 1 .. 1200));
    udp($port, "\x40" . ("\xab" x 40)); # a short header nobody owns
    # a truncated Initial: the header, a Length past the datagram's end
    udp($port, long_header(1, 'D' x 8, 'S' x 8, "\x00\x44\xd0" . "\x01" x 20));
    # an Initial that cannot be decrypted (random payload, right size)
    udp($port, long_header(1, 'E' x 8, 'T' x 8, "\x00\x44\xd0"
                           . join('', map { chr(rand 256) } 1 .. 1200)));
    # an unknown version: Version Negotiation, listing version 1
    my $vn = udp($port, long_header(0x1a2a3a4a, 'abcdefgh', 'ijklmnop',
                                    "\x00" x 1200), 1);
    ok(defined $vn, "$backend: an unknown version is answered");
    if (defined $vn) {
        my ($b0, $ver, $dl) = unpack('C N C', $vn);
        my $dcid = substr($vn, 6, $dl);
        my $sl = ord substr($vn, 6 + $dl, 1);
        my $scid = substr($vn, 7 + $dl, $sl);
        my @versions = unpack('N*', substr($vn, 7 + $dl + $sl));
        ok(($b0 & 0x80) && $ver == 0, "$backend: with a Version Negotiation packet");
        is("$dcid/$scid", 'ijklmnop/abcdefgh', "$backend: to the client's IDs, swapped");
        ok((grep { $_ == 1 } @versions), "$backend: offering QUIC version 1");
    } else {
        fail("$backend: Version Negotiation") for 1 .. 3;
    }
    ok(!defined udp($port, long_header(0x1a2a3a4a, 'abcdefgh', 'ijklmnop',
                                       "\x00" x 100), 1),
       "$backend: a short datagram of an unknown version gets no answer");
    $r = h3($t, '/plaintext');
    is($r->{status}, 200, "$backend: after the bad datagrams the worker serves on");
    is(join(',', $t->workers), join(',', @before),
       "$backend: and the worker is the same one, alive");

    # --- the figures ----------------------------------------------------------------
    # a client that moves to a new port after its handshake, then asks
    $out = `timeout 20 $gtls -q --exit-on-all-streams-close --change-local-addr=10ms --delay-stream=200ms 127.0.0.1 $port https://localhost:$port/plaintext 2>&1`;
    my $q = quic_status($t);
    cmp_ok($q->{dropped_initials} // 0, '>=', ($q0->{dropped_initials} // 0)
           + 2, "$backend: /status: the truncated and the undecryptable "
           . 'Initials dropped');
    cmp_ok($q->{migrations} // 0, '>', $q0->{migrations} // 0,
           "$backend: /status: a client's migration");
    # h3get.py's 200 + 6 streams above on their own connections, gtlsclient's
    cmp_ok($q->{streams} // 0, '>=', 206, "$backend: /status: streams");
    cmp_ok($q->{connections} // 0, '>=', 10, "$backend: /status: connections");
    is($q->{active_connections} // -1, ($q->{connections} // 0)
       - ($q->{closed_connections} // 0),
       "$backend: /status: open connections: made less ended");
    # the 6 MB downloads above: trains of datagrams in one send with GSO,
    # none without
    if ($gso eq 'on') {
        cmp_ok($q->{gso_sends} // 0, '>', 0,
               "$backend: /status: quic_gso = on sends GSO trains");
    } else {
        is($q->{gso_sends}, 0,
           "$backend: /status: quic_gso = off sends no GSO train");
    }
    is($q->{forward_dropped_datagrams}, 0,
       "$backend: /status: no forwarded datagram dropped");
    my $prom = quic_status($t, 1);
    is(scalar(() = $prom =~ /^fastd_quic_(?:connections|closed_connections|
        streams|retries|retries_validated|lost_packets|migrations|
        stateless_resets|dropped_initials|forwarded_datagrams|
        forward_dropped_datagrams|gso_sends)_total\ \d+$/mgx),
       12, "$backend: Prometheus: the twelve QUIC counters");
    like($prom, qr/^fastd_quic_active_connections \d+$/m,
         "$backend: Prometheus: the open QUIC connections");

    # --- clients that give up --------------------------------------------------------
    my @ab = h3($t, ['--streams', 4, '--abort-after', 200_000], '/big.bin');
    is(scalar(grep { $_->{error} } @ab), 4,
       "$backend: four downloads reset by the client midway");
    $r = h3($t, ['--timeout-ms', 300], '/proxy/slow');
    ok($r->{error}, "$backend: a proxied request the client resets while the upstream works");
    @rs = h3($t, ['--streams', 20], '/plaintext', '/big.bin');
    is(scalar(grep { !$_->{error} && $_->{status} == 200 } @rs), 40,
       "$backend: and the worker serves on");

    # --- limit_rate ----------------------------------------------------------------
    my $t0 = time;
    $r = h3($t, '/rated/mid.bin');
    my $took = time - $t0;
    is($r->{sha256}, sha256_hex($mid), "$backend: limit_rate: the body, byte for byte");
    # 1.5 MB at 500 KB/s: about 3 s; well under that means no limit
    cmp_ok($took, '>', 1.5, "$backend: limit_rate paces the stream's DATA");

    # --- a graceful stop lets a stream in flight finish -----------------------------
    my $res = "$dir/slow.json";
    my $kid = fork // die "fork: $!";
    if ($kid == 0) {
        open STDOUT, '>', $res or POSIX::_exit(1);
        { no warnings 'exec'; exec $py, $h3get, "localhost:$port:127.0.0.1",
            "https://localhost:$port/proxy/slow?$backend"; }
        POSIX::_exit(127);
    }
    # this request's own line: an earlier one the client gave up on may be
    # logged late on a loaded machine
    ok(FastdTest::wait_for(sub {
           grep { m{^req \d+ GET /proxy/slow\?$backend$} } $be->log_lines
       }, 10),
       "$backend: a slow proxied request is in flight");
    $t->signal('QUIT');
    waitpid($kid, 0);
    my ($j) = grep { /^\{/ } split /\n/, FastdTest::slurp($res) // '';
    $r = $j ? decode_json($j) : {};
    is($r->{status}, 200, "$backend: after SIGQUIT the stream in flight is answered")
        or diag(($r->{error} // 'no result') . "\n" . $t->error_log);
    is($r->{body}, "slow answer\n", "$backend: with its whole body");
    ok(defined $t->wait_exit(15), "$backend: then fastd exits");
    $t->no_alerts;
}

# --- SNI: two servers, two certificates on one quic address ---------------------
{
    my $t = FastdTest->new;
    my $dir = $t->dir;
    my $pki = TLS->new($dir);
    my %c = map { $_ => $pki->server($_) } qw(a.test b.test);
    make_path("$dir/a", "$dir/b");
    FastdTest::spew("$dir/a/who.txt", "server a\n");
    FastdTest::spew("$dir/b/who.txt", "server b\n");
    my $conf = "[main]\ndaemon = off\nworkers = 1\npid = %%DIR%%/fastd.pid\n"
             . "error_log = %%DIR%%/error.log\n"
             . "$FastdTest::LOG_LEVEL_KEY = info\n"
             . ($> == 0 ? "user = root\n" : '');
    for my $n ('a', 'b') {
        $conf .= "\n[server]\nlisten = 127.0.0.1:%%PORT%% ssl\n"
               . "listen = 127.0.0.1:%%PORT%% quic\nserver_name = $n.test\n"
               . "ssl_certificate = $c{\"$n.test\"}{crt}\n"
               . "ssl_certificate_key = $c{\"$n.test\"}{key}\n"
               . "root = %%DIR%%/$n\n";
    }
    $t->write_conf($conf);
    $t->start;
    my $port = $t->port;
    for my $n ('a', 'b') {
        my $out = `$py $h3get --cafile @{[ $pki->ca ]} $n.test:$port:127.0.0.1 https://$n.test:$port/who.txt`;
        my ($j) = grep { /^\{/ } split /\n/, $out;
        my $r = $j ? decode_json($j) : {};
        ok(!$r->{error}, "SNI $n.test: the certificate for $n.test verifies")
            or diag($r->{error});
        is($r->{body}, "server $n\n", "SNI $n.test: server $n answers");
    }
    $t->stop;
    $t->no_alerts;
}

done_testing;
