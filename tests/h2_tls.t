#!/usr/bin/perl
# HTTP/2 over TLS: ALPN offers h2 then http/1.1 on "listen ... ssl http2"
# (a client offering only http/1.1 gets HTTP/1.1), never h2 on an ssl
# address without http2; curl --http2, openssl s_client -alpn, the python
# frame client, h2load and headless Chromium (nextHopProtocol is "h2");
# a large file through the TLS write path; an almost-right preface after
# ALPN h2 ends in GOAWAY PROTOCOL_ERROR or a close, and the worker serves on.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use H2;
use TLS;
use File::Path qw(make_path);
use Test::More;

plan skip_all => H2::why_not() if H2::why_not();
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
my $ca = $pki->ca;
$t->write_conf(H2::conf(
    cert => $cert,
    server => { root => '%%DIR%%/www', mime_types => '%%CONF%%/mime.types' },
    extra => "[server]\nlisten = 127.0.0.1:%%PORT2%% ssl\n"
           . "ssl_certificate = $cert->{crt}\nssl_certificate_key = $cert->{key}\n"
           . "root = %%DIR%%/www\n\n"));
make_path("$dir/www");
my $big = join '', map { sprintf "%08d %s\n", $_, 'z' x ($_ % 70) } 1 .. 30000;
FastdTest::spew("$dir/www/big.txt", $big);
FastdTest::spew("$dir/www/h2.html", <<'HTML');
<!doctype html>
<html><head><title>h2</title></head><body><p id="proto">none</p>
<script>
var e = performance.getEntriesByType('navigation')[0];
document.getElementById('proto').textContent = 'proto=' + (e ? e.nextHopProtocol : 'unknown');
</script></body></html>
HTML
$t->start;
my $port = $t->port;
my $port2 = $t->port2;

# --- ALPN -------------------------------------------------------------------
sub alpn {
    my ($p, $offer) = @_;
    my ($rc, $out) = $pki->s_client(port => $p, name => 'localhost',
                                    args => [ '-alpn', $offer ]);
    return $out =~ /^ALPN protocol: (\S+)/m ? $1
         : $out =~ /No ALPN negotiated/ ? 'none' : "? (exit $rc)";
}
is(alpn($port, 'h2,http/1.1'), 'h2', 'ssl http2: ALPN h2,http/1.1 selects h2');
is(alpn($port, 'http/1.1,h2'), 'h2', 'ssl http2: the server prefers h2');
is(alpn($port, 'http/1.1'), 'http/1.1', 'ssl http2: a client offering http/1.1 gets it');
my $a2 = alpn($port2, 'h2,http/1.1');
ok($a2 eq 'http/1.1' || $a2 eq 'none', "ssl without http2: h2 is never selected ($a2)");

# --- curl -----------------------------------------------------------------
my $r = H2::curl($t, '/plaintext', ca => $ca);
is($r->{code}, 200, 'curl --http2 over TLS: 200') or diag($r->{err});
is($r->{version}, '2', 'curl: %{http_version} is 2');
is($r->{body}, 'Hello, World!', 'the plaintext body');

$r = H2::curl($t, '/plaintext', ca => $ca, http => '--http1.1');
is("$r->{code} $r->{version}", '200 1.1', 'curl --http1.1 on the same port: HTTP/1.1');

$r = H2::curl($t, '/h2.html', ca => $ca, port => $port2);
is("$r->{code} $r->{version}", '200 1.1',
   'curl --http2 on an ssl address without http2: HTTP/1.1');

$r = H2::curl($t, [ '/big.txt', '/plaintext', '/h2.html' ], ca => $ca);
is_deeply($r->{codes}, [200, 200, 200], 'three requests, one curl run');
is($r->{connects}, 1, 'on one connection');
ok($r->{bodies}[0] eq $big, 'a ' . length($big) . '-byte file over TLS, intact')
    or diag(length $r->{bodies}[0]);

# --- the python client over TLS -------------------------------------------------
my $o = H2::py($t, <<'PY', ca => $ca);
c = Raw(tls=CA)
c.req(1, '/big.txt')
c.req(3, '/plaintext')
r1 = c.response(1, timeout=10)
r3 = c.response(3)
done(alpn=c.alpn, s=[r1['status'], r3['status']], len1=len(r1['body']),
     names=[n for n, v in r1['headers']], **c.summary())
PY
is($o->{alpn}, 'h2', 'python over TLS: ALPN h2') or diag(H2::explain($o));
is_deeply($o->{s}, [200, 200], 'two streams');
is($o->{len1}, length $big, 'the big file complete');
ok(!(grep { /[A-Z]/ || /^(connection|keep-alive|transfer-encoding|upgrade)$/ }
     @{ $o->{names} || [] }), 'lower-case names, no connection-specific ones');

# --- an almost-right preface after ALPN h2 ----------------------------------
$o = H2::py($t, <<'PY', ca => $ca);
c = Raw(tls=CA, preface=False)
c.send(b'PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n' + SettingsFrame(0).serialize()
       + c.req(1, '/plaintext', send=False))
closed = c.wait_close(5)
st = c.streams.get(1) or {}
done(alpn=c.alpn, closed=closed, answered=bool(st.get('headers')),
     **c.summary())
PY
ok(($o->{goaway} && $o->{goaway}[1] == 1) || (!$o->{goaway} && ($o->{eof} || $o->{reset})),
   'a bad preface over TLS: GOAWAY PROTOCOL_ERROR or a close ('
   . ($o->{goaway_name} // ($o->{eof} || $o->{reset} ? 'closed' : 'open')) . ')')
    or diag(H2::explain($o));
ok($o->{eof} || $o->{reset}, 'the connection is closed') or diag(H2::explain($o));
ok(!$o->{answered}, 'and the request after it is not answered');
my @w = H2::serving($t, ca => $ca);
ok($w[0], 'the worker serves a new TLS client') or diag($w[2]);

# --- h2load ---------------------------------------------------------------
SKIP: {
    skip 'h2load is not installed (nghttp2-client)', 3 unless H2::h2load();
    my ($rc, $out) = TLS::run([ H2::h2load(), qw(-n 2000 -c 4 -m 8),
                                "https://127.0.0.1:$port/plaintext" ],
                              timeout => 50);
    like($out, qr/^Application protocol: h2$/m, 'h2load over TLS: h2') or diag($out);
    like($out, qr/^requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored, 0 timeout/m,
         'h2load -n 2000 -c 4 -m 8 over TLS: all succeeded') or diag($out);
    like($out, qr/^status codes: 2000 2xx/m, 'all 2xx');
}

# --- Chromium ---------------------------------------------------------------
SKIP: {
    skip 'chromium is not installed', 1 unless FastdTest::chromium();
    my $dom = FastdTest::browse($dir, '--ignore-certificate-errors',
                                '--virtual-time-budget=3000', '--dump-dom',
                                "https://127.0.0.1:$port/h2.html");
    my ($proto) = $dom =~ m{<p id="proto">([^<]*)</p>};
    is($proto, 'proto=h2', 'Chromium loaded the page over h2 (nextHopProtocol)')
        or diag(substr($dom, 0, 1000) . "\n"
                . substr(FastdTest::slurp("$dir/console.log") // '', -2000));
}

$t->no_alerts;
done_testing();
