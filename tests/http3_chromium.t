#!/usr/bin/perl
# Headless Chromium over HTTP/3: fastd listens on an ssl and a quic
# address of one port, Chromium is told to speak QUIC to it
# (--origin-to-force-quic-on) and to trust its certificate by the hash of
# its public key (--ignore-certificate-errors-spki-list, which Chromium
# honours for QUIC too), and loads a page whose script, a second request,
# writes into the DOM. --dump-dom shows that text; Chromium's net log
# shows a QUIC session to fastd that both requests were bound to, and
# the HTTP/3 response headers it decoded on it; fastd's
# access log has both requests as HTTP/3.0 and none over TCP. Chromium
# runs bounded
# (--virtual-time-budget, and killed by its pid after 60 s).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Digest::SHA qw(sha256);
use MIME::Base64 qw(encode_base64);
use JSON::PP;
use Test::More;

TLS::http3_fastd_or_skip();
my $chromium = FastdTest::chromium();
plan skip_all => 'chromium is not installed (apt-get install chromium)'
    unless $chromium;

my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');

# the certificate's SubjectPublicKeyInfo, hashed, for Chromium
$pki->ossl('x509', '-in', $cert->{crt}, '-noout', '-pubkey',
           '-out', "$dir/pub.pem");
$pki->ossl('pkey', '-pubin', '-in', "$dir/pub.pem", '-outform', 'DER',
           '-out', "$dir/spki.der");
my $spki = encode_base64(sha256(FastdTest::slurp("$dir/spki.der")), '');

mkdir "$dir/www" or die "mkdir: $!";
FastdTest::spew("$dir/www/index.html", <<'HTML');
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>h3</title>
<script src="/app.js"></script></head>
<body><p id="out">not run</p></body></html>
HTML
FastdTest::spew("$dir/www/app.js", <<'JS');
document.addEventListener('DOMContentLoaded', function () {
  document.getElementById('out').textContent = 'SCRIPT RAN over QUIC';
});
JS

$t->write_conf(<<"CONF");
@{[ FastdTest::main_section() ]}
[http]
log_format = proto \$server_protocol \$status \$request_uri
access_log = %%DIR%%/access.log format=proto buffer=0

[server]
@{[ TLS::quic_server_keys($cert, more => "server_name = localhost\n") ]}root = %%DIR%%/www
CONF
$t->start;
my $port = $t->port;

my $netlog = "$dir/netlog.json";
my ($rc, $dom) = TLS::run([
    $chromium, qw(--headless --no-sandbox --disable-gpu --no-first-run
                  --disable-background-networking --disable-component-update
                  --disable-sync --disable-default-apps --hide-scrollbars
                  --enable-quic),
    "--user-data-dir=$dir/chromium",
    "--origin-to-force-quic-on=localhost:$port",
    "--host-resolver-rules=MAP localhost 127.0.0.1",
    "--ignore-certificate-errors-spki-list=$spki",
    "--log-net-log=$netlog", '--net-log-capture-mode=Default',
    '--virtual-time-budget=5000', '--dump-dom',
    "https://localhost:$port/"], timeout => 60,
    stderr => "$dir/chromium.log");
is($rc, 0, 'Chromium ran to its end')
    or diag(FastdTest::slurp("$dir/chromium.log") // '');
like($dom, qr{<p id="out">SCRIPT RAN over QUIC</p>},
     'the page and its script arrived, and the script ran')
    or diag(substr($dom, 0, 1500));

# the net log: JSON, complete once Chromium has exited. Its events name
# their type and their source's by numbers its constants map.
my $j = eval { decode_json(FastdTest::slurp($netlog) // '') } // {};
my %type = reverse %{ $j->{constants}{logEventTypes} // {} };
my (%session, %url, %bound, $ok200);
for my $e (@{ $j->{events} // [] }) {
    my ($n, $p, $src) = ($type{ $e->{type} } // '', $e->{params} // {},
                         $e->{source}{id});
    $session{$src} = 1 if $n eq 'QUIC_SESSION'
        && ($p->{host} // '') eq 'localhost' && ($p->{port} // 0) == $port;
    $url{$src} = $p->{url} if $n eq 'URL_REQUEST_START_JOB' && $p->{url};
    $bound{$src} = $p->{source_dependency}{id}
        if $n eq 'HTTP_STREAM_REQUEST_BOUND_TO_QUIC_SESSION';
    $ok200++ if $n eq 'HTTP3_HEADERS_DECODED' && $session{$src}
        && grep { $_ eq ':status: 200' } @{ $p->{headers} // [] };
}
is(scalar keys %session, 1, 'the net log has one QUIC session to fastd')
    or diag("net log: " . (-s $netlog // 'none') . " bytes");
for my $path ('/', '/app.js') {
    my ($req) = grep { $url{$_} eq "https://localhost:$port$path" }
                keys %url;
    ok($req && defined $bound{$req} && $session{ $bound{$req} },
       "Chromium sent $path over that QUIC session");
}
ok(($ok200 // 0) >= 2, 'and decoded HTTP/3 response headers with 200 for '
   . 'both (' . ($ok200 // 0) . ')');

# fastd's side: both requests over HTTP/3
my $access = '';
FastdTest::wait_for(sub {
    $access = FastdTest::slurp("$dir/access.log") // '';
    $access =~ m{app\.js};
}, 10);
like($access, qr{^HTTP/3\.0 200 /$}m, 'the page was served over HTTP/3');
like($access, qr{^HTTP/3\.0 200 /app\.js$}m,
     'the script too');
unlike($access, qr{^HTTP/(?:1|2)}m, 'no request over another protocol');

$t->stop;
$t->no_alerts;
done_testing;
