#!/usr/bin/perl
# TLS configuration errors and certificate renewal: fastd -t fails naming
# file:line for a certificate whose key does not match, a missing
# certificate or key file, an unknown protocol name, an ssl address
# without a certificate, and ssl_verify_client without a CA; a reload with
# a bad certificate keeps the old configuration serving; a reload with a
# renewed certificate serves it on new connections while a request in
# flight on a connection of the old certificate completes.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('a.test');
my $bad = $pki->mismatch('bad.test');

# a backend that holds its answer until the test creates $dir/release
my $be = Backend->new(handler => sub {
    FastdTest::wait_for(sub { -e "$dir/release" }, 30);
    return Backend::response(200, 'held');
});
my $held = "[location /held]\nhandler = proxy\nupstream = be\n\n"
         . "[upstream be]\nserver = 127.0.0.1:${\ $be->port}\n\n";

# -t on $text: (exit code, output, file, the text as written)
sub conf_test {
    my ($text) = @_;
    my $file = $t->write_conf($text, 'bad.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    return ($rc, $out, $file, $t->subst($text));
}

# --- -t -------------------------------------------------------------------
{
    my ($rc, $out) = conf_test(TLS::conf(certs => [$cert]));
    is($rc, 0, '-t: a valid TLS configuration') or diag($out);
    like($out, qr/test is successful/, 'test is successful');
}

sub bad {
    my ($name, $text, $re, $also) = @_;
    my ($rc, $out, $file, $written) = conf_test($text);
    my @lines = map { FastdTest::line_of($written, $_) } ref $re eq 'ARRAY' ? @$re : ($re);
    my $lines = join '|', @lines;
    is($rc, 1, "$name: -t fails");
    like($out, qr/\Q$file\E:($lines)\b/, "$name: names $file:" . join(' or ', @lines))
        or diag($out);
    like($out, $also, "$name: and says what") if $also;
}

bad('a certificate and key that do not match', TLS::conf(certs => [$bad]),
    [ qr/^ssl_certificate_key = /, qr/^ssl_certificate = / ],
    qr/\Q$bad->{key}\E|\Q$bad->{crt}\E|match/i);
bad('a missing certificate file',
    TLS::conf(certs => [{ crt => "$dir/nope.crt", key => $cert->{key} }]),
    qr/^ssl_certificate = /, qr/nope\.crt/);
bad('a missing key file',
    TLS::conf(certs => [{ crt => $cert->{crt}, key => "$dir/nope.key" }]),
    qr/^ssl_certificate_key = /, qr/nope\.key/);
bad('a key file that is not a key',
    TLS::conf(certs => [{ crt => $cert->{crt}, key => $cert->{crt} }]),
    qr/^ssl_certificate_key = /);
bad('an unknown protocol',
    TLS::conf(certs => [$cert], more => "ssl_protocols = TLSv1.2 TLSv9\n"),
    qr/^ssl_protocols = /, qr/TLSv9/);
bad('ssl_verify_client = on without ssl_client_certificate',
    TLS::conf(certs => [$cert], more => "ssl_verify_client = on\n"),
    [ qr/^ssl_verify_client = /, qr/^listen = /, qr/^\[server\]/ ]);
bad('an ssl address without a certificate', TLS::conf(certs => []),
    [ qr/^listen = /, qr/^\[server\]/ ]);

# --- reloads --------------------------------------------------------------------
my $good = TLS::conf(certs => [$cert], names => 'a.test', extra => $held);
$t->write_conf($good);
$t->start;
my $port = $t->port;

sub serial_now {
    my ($rc, $out) = $pki->s_client(port => $port, name => 'a.test',
        in => "GET /plaintext HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    my (undef, $serial) = $pki->peer_cert($out);
    my $r = TLS::response($out);
    return ($serial // 0, $r ? $r->status : 0);
}

my ($serial, $st) = serial_now();
is($serial, $cert->{serial}, 'the certificate served');
is($st, 200, 'and a request served');

for my $case ([ 'a mismatched key', [$bad],
                qr/^ssl_certificate_key = /, qr/^ssl_certificate = / ],
              [ 'a missing certificate',
                [{ crt => "$dir/gone.crt", key => $cert->{key} }],
                qr/^ssl_certificate = / ]) {
    my ($name, $certs, @re) = @$case;
    my @before = $t->workers;
    my $text = TLS::conf(certs => $certs, names => 'a.test', extra => $held);
    $t->write_conf($text);
    my $lines = join '|', map { FastdTest::line_of($t->subst($text), $_) } @re;
    my $file = $t->conf_file;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { $t->error_log =~ /\Q$file\E:($lines)\b/ }, 10),
       "reload with $name: the error log names $file:LINE")
        or diag($t->error_log);
    is_deeply([ $t->workers ], \@before, "$name: the old workers keep serving");
    ($serial, $st) = serial_now();
    is($st, 200, "$name: requests are served");
    is($serial, $cert->{serial}, "$name: with the old certificate");
}

# --- renewal, with a request in flight --------------------------------------------
{
    my $c = $pki->connect(port => $port, name => 'a.test', quiet => 0);
    ok($c->wait_for_bytes(qr/^(New|Reused), TLSv1/m, 10), 'a connection');
    my (undef, $old_serial) = $pki->peer_cert($c->{raw});
    is($old_serial, $cert->{serial}, 'with the current certificate');
    $c->send("GET /plaintext HTTP/1.1\r\nHost: a.test\r\n\r\n");
    ok($c->wait_for_bytes(qr/Hello, World!/, 10), 'a first request on it');
    $c->send("GET /held HTTP/1.1\r\nHost: a.test\r\n\r\n");
    ok(FastdTest::wait_for(sub { $be->requests >= 1 }, 10),
       'a second request in flight at the backend');

    my $renewed = $pki->server('a.test', key => $cert->{key}, file => 'a.test-ec');
    isnt($renewed->{serial}, $cert->{serial}, 'the certificate renewed in place');
    $t->write_conf($good);
    my %old = map { $_ => 1 } $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { grep { !$old{$_} } $t->workers }, 10),
       'the reload started a new worker');
    ok(FastdTest::wait_for(sub { (serial_now())[0] == $renewed->{serial} }, 10),
       'new connections get the renewed certificate');
    FastdTest::spew("$dir/release", '');
    ok($c->wait_for_bytes(qr/held/, 10),
       'the request in flight on the old connection is answered');
    $c->close;
}

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
