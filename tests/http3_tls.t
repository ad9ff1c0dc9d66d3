#!/usr/bin/perl
# TLS over QUIC behaves as over TCP: the same client (libcurl-gnutls
# through pycurl, tests/lib/h3get.py) asks the same [server]s over
# HTTP/1.1 on the ssl address and over HTTP/3 on the quic one, and both
# must give the same answers, which are also checked against what TCP's
# rules say they must be:
#
#   - client certificates: none, the CA's, another CA's, an expired one,
#     against ssl_verify_client = on (the address's default server),
#     optional and off, chosen by SNI; $ssl_client_verify (OpenSSL's
#     words for a failure on both) and $ssl_client_s_dn;
#   - a client that sends no SNI is held to the default server's rules
#     (verify on), and a Host naming a server with other TLS terms than
#     the handshake's gets 421, with or without SNI;
#   - $ssl_protocol, $ssl_cipher, $ssl_server_name;
#   - session resumption: the second connection of a client resumes
#     ($ssl_session_reused r), over QUIC too, keeping its verification;
#     a session made with one server does not resume on one with other
#     terms (over TCP: another SNI name; gtlsclient's SNI is always
#     localhost, so over both: a reload that made it verify clients);
#   - a reload after the certificate files were replaced serves the new
#     certificate on both; tickets made before a reload resume after it;
#   - ssl_protocols without TLSv1.3 on a quic address fails -t.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use JSON::PP;
use Test::More;

my $py = TLS::http3_or_skip();

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my %srv = map { $_ => $pki->server("$_.test", file => "$_-test") }
          qw(on opt off);
$srv{localhost} = $pki->server('localhost');
my $good = $pki->client('client.test');
my $expired = $pki->expired_client('old.test');
plan skip_all => 'python3-cryptography (for an expired certificate) is not '
               . 'installed' unless $expired;
mkdir $t->dir . '/other' or die;
my $stranger = TLS->new($t->dir . '/other')->client('stranger.test');
my $ca = $pki->ca;

# each server answers what it knows of the connection
my $vars = join '|', map { "\$$_" } qw(ssl_client_verify ssl_client_s_dn
    ssl_protocol ssl_cipher ssl_server_name ssl_session_reused);
# servers on.test (the default), opt.test and off.test by their
# ssl_verify_client; localhost (what gtlsclient sends as SNI) verifies as
# $lh says, optional at first
my %verify = (on => "ssl_client_certificate = $ca\nssl_verify_client = on\n",
              opt => "ssl_client_certificate = $ca\n"
                     . "ssl_verify_client = optional\n",
              off => '');
sub conf {
    my ($lh) = @_;
    my $conf = FastdTest::main_section();
    for my $n (qw(on opt off localhost)) {
        $conf .= "[server]\nlisten = 127.0.0.1:%%PORT%% ssl\n"
               . "listen = 127.0.0.1:%%PORT%% quic\nserver_name = "
               . ($n eq 'localhost' ? $n : "$n.test") . "\n"
               . "ssl_certificate = $srv{$n}{crt}\n"
               . "ssl_certificate_key = $srv{$n}{key}\n"
               . $verify{ $n eq 'localhost' ? $lh : $n } . "\n"
               . "[location /]\nreturn = 200 $n|$vars\n\n";
    }
    return $conf;
}
$t->write_conf(conf('opt'));
$t->start;
my $port = $t->port;
my $resolve = join ',', map { "$_.test:$port:127.0.0.1" } qw(on opt off);

# h3get.py's answers, over $how (tcp or quic): ([OPTIONS], URL...) with
# URLs as NAME/PATH, NAME "-" for 127.0.0.1 (no SNI)
sub get {
    my ($how, @args) = @_;
    my @opts = ref $args[0] ? @{ shift @args } : ();
    my @urls = map { my ($n, $p) = split m{/}, $_, 2;
                     'https://' . ($n eq '-' ? '127.0.0.1' : "$n.test")
                     . ":$port/" . ($p // '') } @args;
    my ($rc, $out) = TLS::run([ $py, "$FindBin::Bin/lib/h3get.py",
                                '--cafile', $ca,
                                $how eq 'tcp' ? '--tcp' : (), @opts,
                                $resolve, @urls ], timeout => 60);
    my @r = map { decode_json($_) } grep { /^\{/ } split /\n/, $out;
    diag("h3get: $out") unless @r == @urls;
    return @r;
}

sub cert_opts { $_[0] ? [ '--cert', $_[0]{crt}, '--key', $_[0]{key} ] : [] }

# What an answer says: "STATUS SERVER|VERIFY|DN" (the variables of the
# client certificate), or "failed" when the handshake was refused
sub verdict {
    my ($r) = @_;
    return 'failed' if !$r->{status};
    my @f = split /\|/, $r->{body} // '', -1;
    return "$r->{status}" . ($r->{status} == 200 ? " $f[0]|$f[1]|$f[2]" : '');
}

my $dn = 'CN=client.test,O=fastd tests';
my $issuer = 'FAILED:unable to verify the first certificate';
# cert => [no SNI, on.test, opt.test, off.test]
my %want = (
    none     => [ 'failed', 'failed', '200 opt|NONE|', '200 off|NONE|' ],
    good     => [ "200 on|SUCCESS|$dn", "200 on|SUCCESS|$dn",
                  "200 opt|SUCCESS|$dn", '200 off|NONE|' ],
    stranger => [ 'failed', 'failed',
                  "200 opt|$issuer|CN=stranger.test,O=fastd tests",
                  '200 off|NONE|' ],
    expired  => [ 'failed', 'failed',
                  '200 opt|FAILED:certificate has expired|'
                  . 'CN=old.test,O=fastd tests', '200 off|NONE|' ],
);
my %cert = (none => undef, good => $good, stranger => $stranger,
            expired => $expired);
my @names = ('no SNI', 'SNI on.test (verify on)',
             'SNI opt.test (optional)', 'SNI off.test (off)');

# --- client certificates by verify mode, and no SNI -----------------------
for my $c (qw(none good stranger expired)) {
    my %got;
    for my $how (qw(tcp quic)) {
        $got{$how} = [ map { verdict($_) }
                       get($how, cert_opts($cert{$c}), qw(- on opt off)) ];
    }
    for my $i (0 .. 3) {
        is($got{tcp}[$i], $want{$c}[$i], "$c certificate, $names[$i]: TCP");
        is($got{quic}[$i], $got{tcp}[$i],
           "$c certificate, $names[$i]: QUIC as TCP");
    }
}

# --- a Host naming a server with other terms than the handshake's ---------
# no SNI: the default server (verify on) made the handshake
for my $case (
    [ 'no SNI, Host off.test, no certificate', undef, '-', 'off.test',
      'failed' ],
    [ 'no SNI, Host off.test, the CA\'s certificate', $good, '-', 'off.test',
      '421' ],
    [ 'SNI off.test, Host on.test, no certificate', undef, 'off', 'on.test',
      '421' ],
    [ 'SNI opt.test, Host on.test, no certificate', undef, 'opt', 'on.test',
      '421' ],
    [ 'SNI opt.test, Host on.test, the CA\'s certificate', $good, 'opt',
      'on.test', '421' ],
) {
    my ($name, $c, $sni, $host, $want) = @$case;
    my ($tcp) = get('tcp', [ @{ cert_opts($c) }, '--host', $host ], $sni);
    my ($quic) = get('quic', [ @{ cert_opts($c) }, '--host', $host ], $sni);
    is(verdict($tcp), $want, "$name: TCP");
    is(verdict($quic), verdict($tcp), "$name: QUIC as TCP");
}

# --- the other variables ----------------------------------------------------
{
    my %f;
    for my $how (qw(tcp quic)) {
        my @r = get($how, cert_opts($good), qw(opt -));
        $f{$how} = [ map { [ split /\|/, $_->{body} // '', -1 ] } @r ];
    }
    for my $how (qw(tcp quic)) {
        my ($sni, $none) = @{ $f{$how} };
        is($sni->[3], 'TLSv1.3', "$how: \$ssl_protocol");
        like($sni->[4], qr/^TLS_(AES_128_GCM_SHA256|AES_256_GCM_SHA384|CHACHA20_POLY1305_SHA256)$/,
             "$how: \$ssl_cipher, an IANA TLS 1.3 name");
        is($sni->[5], 'opt.test', "$how: \$ssl_server_name");
        is($none->[5], '', "$how: \$ssl_server_name without SNI");
        is($sni->[6], '.', "$how: \$ssl_session_reused . on a first connection");
    }
}

# --- session resumption -------------------------------------------------------
for my $how (qw(tcp quic)) {
    my @r = get($how, ['--resume'], qw(opt/1 opt/2 opt/3));
    my @reused = map { (split /\|/, $_->{body} // '', -1)[6] // '' } @r;
    is($reused[0], '.', "$how: a first connection is a full handshake");
    is("@reused[1, 2]", 'r r', "$how: the next ones resume its session");
}

# with a client certificate: the resumed session keeps its verification
for my $how (qw(tcp quic)) {
    my @r = get($how, [ '--resume', @{ cert_opts($good) } ], qw(on/1 on/2));
    is(join(' ', map { my @f = split /\|/, $_->{body} // '', -1;
                       "$f[1]$f[6]" } @r), 'SUCCESS. SUCCESSr',
       "$how: a session made with a client certificate resumes verified");
}

# A session resumes only on the server it was made for: with opt.test's
# offered to on.test (s_client keeps it in a file), on.test's verification
# still applies
{
    my $sess = $t->dir . '/opt.sess';
    my $req = "GET / HTTP/1.1\r\nHost: opt.test\r\nConnection: close\r\n\r\n";
    $pki->s_client(port => $port, name => 'opt.test',
                   args => [ '-sess_out', $sess ], in => $req);
    my (undef, $out) = $pki->s_client(port => $port, name => 'opt.test',
                                      args => [ '-sess_in', $sess ],
                                      in => $req);
    like($out, qr/^Reused/m, 'TCP: an opt.test session resumes on opt.test');
    (undef, $out) = $pki->s_client(port => $port, name => 'on.test',
                                   args => [ '-sess_in', $sess ],
                                   in => $req =~ s/opt\.test/on.test/r);
    is(TLS::response($out), undef,
       'TCP: offered to on.test, without a certificate: not served');
}

# Sessions kept in files across reloads, over TCP (s_client) and QUIC
# (gtlsclient, whose SNI is always localhost): what each says of
# $ssl_session_reused and $ssl_client_verify, or "failed"
sub lh_session {
    my ($how, $file, $save) = @_;
    my ($rc, $out);
    if ($how eq 'tcp') {
        ($rc, $out) = $pki->s_client(port => $port, name => 'localhost',
            args => [ $save ? '-sess_out' : '-sess_in', $file ],
            in => "GET / HTTP/1.1\r\nHost: localhost\r\n"
                . "Connection: close\r\n\r\n");
        my $r = TLS::response($out);
        return 'failed' unless $r && $r->status == 200;
        my @f = split /\|/, $r->body, -1;
        return "$f[1] $f[6]";
    }
    ($rc, $out) = TLS::run([ '/usr/bin/gtlsclient',
                             '--exit-on-all-streams-close', '--timeout=10s',
                             "--session-file=$file", '127.0.0.1', $port,
                             "https://localhost:$port/" ], timeout => 20);
    return 'failed' unless $out =~ /\[:status: 200\]/;
    # the body, as a hex dump
    my ($dump) = $out =~ /body \d+ bytes\n((?:[0-9a-f]{8}  .*\n)+)/;
    my $hex = join '', map { /^[0-9a-f]{8}  ([0-9a-f ]+?) *\|/ ? $1 : () }
                       split /\n/, $dump // '';
    my $body = pack('H*', $hex =~ s/ //gr);
    my @f = split /\|/, $body, -1;
    return "$f[1] " . ($f[6] // '');
}
my %lh = (tcp => $t->dir . '/lh.tcp.sess', quic => $t->dir . '/lh.quic.sess');
for my $how (qw(tcp quic)) {
    is(lh_session($how, $lh{$how}, 1), 'NONE .',
       "$how: a session with localhost (optional), no certificate");
    ok(-s $lh{$how}, "$how: its ticket kept");
    is(lh_session($how, $lh{$how}), 'NONE r', "$how: which resumes");
}

# SIGHUP; passes once the one worker is a new one
sub reload {
    my ($name) = @_;
    my %old = map { $_ => 1 } $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub {
        my @w = $t->workers;
        @w == 1 && !grep { $old{$_} } @w;
    }, 15), $name);
}

# --- a reload reads the certificate files again -----------------------------
{
    my @before = map { get($_, 'on') } qw(tcp quic);
    my $old = sprintf '%x', $srv{on}{serial};
    is($before[0]{serial}, $old, 'TCP: the certificate before the reload');
    is($before[1]{serial}, $old, 'QUIC: the certificate before the reload');
    my $new = $pki->server('on.test', file => 'on-test');
    reload('the reload replaced the worker');
    my @after = map { get($_, cert_opts($good), 'on') } qw(tcp quic);
    my $serial = sprintf '%x', $new->{serial};
    is($after[0]{serial}, $serial, 'TCP: the new certificate after it');
    is($after[1]{serial}, $serial, 'QUIC: the new certificate after it');
    is(verdict($after[1]), "200 on|SUCCESS|$dn",
       'QUIC: and the same client verification');
}

# the tickets survive the reload (their keys are the master's)
for my $how (qw(tcp quic)) {
    is(lh_session($how, $lh{$how}), 'NONE r',
       "$how: a session from before the reload resumes after it");
}

# a reload that makes localhost verify clients: its old sessions, made
# without a certificate, no longer resume there
{
    $t->write_conf(conf('on'));
    reload('a reload with ssl_verify_client = on for localhost');
    for my $how (qw(tcp quic)) {
        is(lh_session($how, $lh{$how}), 'failed',
           "$how: its session from before is not resumed past the "
           . 'verification');
    }
}

# QUIC is TLS 1.3: a server on a quic address whose ssl_protocols leaves
# it out is a configuration error, not a handshake TCP would refuse
{
    my $f = $t->dir . '/tls12.conf';
    FastdTest::spew($f, "[server]\nlisten = 127.0.0.1:1 ssl\n"
        . "listen = 127.0.0.1:1 quic\nssl_certificate = $srv{on}{crt}\n"
        . "ssl_certificate_key = $srv{on}{key}\nssl_protocols = TLSv1.2\n");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $f);
    isnt($rc, 0, 'ssl_protocols = TLSv1.2 on a quic address: -t fails');
    like($out, qr/tls12\.conf:1: .*quic.*ssl_protocols has no TLSv1\.3/,
         'naming the server and why') or diag($out);
}

ok($t->running, 'fastd still running');
$t->stop;
$t->no_alerts;
done_testing;
