#!/usr/bin/perl
# QUIC address validation by Retry (quic_retry = on), with two workers:
# a real client (libcurl, which follows a Retry by itself) is served after
# one; a client's Initial without a token gets a Retry; its token brought
# back from the same address and port makes a connection, and brought
# back from another port, altered, or after its 3 s are over, ends the
# attempt with INVALID_TOKEN; an Initial under 1200 bytes gets nothing.
# A token from before a reload is still good after it (the key is the
# master's, kept across reloads). A client's connection brings it a
# NEW_TOKEN token, with which its next one skips the Retry (gtlsclient). /status counts the Retries, the
# addresses they validated and the Initials refused, the old workers'
# too.
#
# The Initials the test writes carry no valid TLS (their payload is
# random): the server looks at the token before it decrypts anything.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use Time::HiRes qw(time sleep);
use Test::More;

my $root = FastdTest::root();
my $cfg = FastdTest::slurp("$root/objs/fd_auto_config.h") // '';
plan skip_all => 'fastd built without HTTP/3 (./configure --with-http3)'
    unless $cfg =~ /^#define FD_HTTP3 1/m;
my $py = '/usr/bin/python3';
plan skip_all => 'python3-pycurl on libcurl with HTTP/3 is not installed'
    unless system($py, '-c', 'import pycurl, sys; '
                . 'sys.exit(0 if "nghttp3" in pycurl.version else 1)') == 0;
plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $dir = $t->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('localhost');
mkdir "$dir/www";
FastdTest::spew("$dir/www/index.html", "hello\n");
$t->write_conf(<<"CONF");
@{[ FastdTest::main_section(workers => 2, level => 'debug') ]}
[server]
@{[ TLS::quic_server_keys($cert) ]}quic_retry = on
root = %%DIR%%/www

[location = /status]
handler = status
CONF
$t->start;
my $port = $t->port;

sub h3_ok {
    my $out = `$py $FindBin::Bin/lib/h3get.py localhost:$port:127.0.0.1 https://localhost:$port/index.html`;
    my ($j) = grep { /^\{/ } split /\n/, $out;
    my $r = $j ? decode_json($j) : {};
    return ($r->{status} // 0) == 200 && ($r->{body} // '') eq "hello\n";
}

sub count { my $re = shift; scalar(() = $t->error_log =~ /$re/g) }

# waits for the log to have more than $n lines matching $re
sub log_grows {
    my ($re, $n) = @_;
    return FastdTest::wait_for(sub { count($re) > $n }, 10);
}

sub rnd { join '', map { chr int rand 256 } 1 .. $_[0] }

sub udp {
    my $s = IO::Socket::INET->new(Proto => 'udp', PeerAddr => '127.0.0.1',
                                  PeerPort => $port) or die "udp: $!";
    return $s;
}

# a QUIC v1 Initial of 1200 bytes: DCID, SCID, token, a random payload
sub initial {
    my ($dcid, $scid, $token) = @_;
    my $h = chr(0xc3) . pack('N', 1) . chr(length $dcid) . $dcid
          . chr(length $scid) . $scid
          . pack('n', 0x4000 | length $token) . $token;
    my $rest = 1200 - length($h) - 2;
    return $h . pack('n', 0x4000 | $rest) . rnd($rest);
}

# the next datagram on $s, undef after 10 s
sub reply {
    my ($s) = @_;
    return undef unless IO::Select->new($s)->can_read(10);
    my $buf;
    $s->recv($buf, 65536);
    return $buf;
}

# the packet's long-header type: 0 Initial .. 3 Retry
sub type { (ord($_[0]) >> 4) & 3 }

# a Retry's SCID and token (its last 16 bytes are the integrity tag)
sub retry_parts {
    my ($p) = @_;
    my $dl = ord substr($p, 5, 1);
    my $sl = ord substr($p, 6 + $dl, 1);
    my $scid = substr($p, 7 + $dl, $sl);
    my $token = substr($p, 7 + $dl + $sl, length($p) - 7 - $dl - $sl - 16);
    return ($scid, $token);
}

# a Retry for a new Initial from $s: (its SCID, its token)
sub get_token {
    my ($s) = @_;
    my ($dcid, $scid) = (chr(0) . rnd(15), rnd(8));
    $s->send(initial($dcid, $scid, ''));
    my $r = reply($s) // return;
    return unless type($r) == 3 && substr($r, 6, 8) eq $scid;
    return (retry_parts($r), $scid);
}

my $retries = count(qr/QUIC Retry sent/);
my $valid = count(qr/QUIC address validated by a Retry token/);
ok(h3_ok(), 'a real client is served with quic_retry = on');
is(count(qr/QUIC Retry sent/), $retries + 1, 'after one Retry');
is(count(qr/QUIC address validated/), $valid + 1,
   'and its token validated its address');

my $s = udp();
my ($rscid, $token, $cscid) = get_token($s);
ok(defined $token && length $token > 16,
   'an Initial without a token gets a Retry carrying one');
is(ord(substr($rscid // "\xff", 0, 1)), 0,
   'its new connection ID names the worker that steered it');

# an Initial under 1200 bytes: nothing (an answer never outgrows what
# could have been spoofed); the next full one's Retry is the first reply
{
    my ($dcid, $scid) = (chr(0) . rnd(15), rnd(8));
    my $h = chr(0xc3) . pack('N', 1) . chr(16) . chr(0) . rnd(15) . chr(8)
          . rnd(8) . chr(0);
    my $short = $h . pack('n', 0x4000 | (600 - length($h) - 2))
              . rnd(600 - length($h) - 2);
    $s->send($short);
    $s->send(initial($dcid, $scid, ''));
    my $r = reply($s) // '';
    ok(type($r) == 3 && substr($r, 6, 8) eq $scid,
       'no Retry for an Initial of 600 bytes');
}

# altered: refused at once, with a CONNECTION_CLOSE in an Initial
my $refused = count(qr/QUIC Retry token refused: not one of ours/);
my $bad = $token // '';
substr($bad, 20, 1) = chr(ord(substr($bad, 20, 1)) ^ 1) if length $bad > 20;
$s->send(initial($rscid // '', rnd(8), $bad));
my $r = reply($s);
ok(defined $r && type($r) == 0, 'an altered token: an Initial back '
                              . '(INVALID_TOKEN), not a Retry');
ok(log_grows(qr/QUIC Retry token refused: not one of ours/, $refused),
   'logged as not ours');

# another port: refused too (bound to the client's address and port)
my $other = udp();
my $expired = count(qr/QUIC Retry token refused: expired/);
$other->send(initial($rscid // '', rnd(8), $token // ''));
$r = reply($other);
ok(defined $r && type($r) == 0, 'the token from another port: refused');
ok(log_grows(qr/QUIC Retry token refused: expired, or for another/,
             $expired), 'logged as for another address');

# the right one (a new one: the checks above may have taken its 3 s on a
# busy machine): a connection is made
($rscid, $token) = get_token($s);
$valid = count(qr/QUIC address validated/);
$s->send(initial($rscid // '', rnd(8), $token // ''));
ok(log_grows(qr/QUIC address validated/, $valid),
   'the token from its own address and port validates it');

# after its 3 s: refused
($rscid, $token) = get_token($s);
sleep 3.5;
$expired = count(qr/QUIC Retry token refused: expired/);
$s->send(initial($rscid // '', rnd(8), $token // ''));
$r = reply($s);
ok(defined $r && type($r) == 0, 'an expired token: refused');
ok(log_grows(qr/QUIC Retry token refused: expired/, $expired),
   'logged as expired');

# a token from before a reload is good after it
($rscid, $token) = get_token($s);
my $got = time;
my @old = $t->workers;
$t->signal('HUP');
ok(FastdTest::wait_for(sub {
    my %o = map { $_ => 1 } @old;
    my @w = $t->workers;
    !(grep { $o{$_} } @w) && @w >= 2;
}, 15), 'the reload replaced both workers');
SKIP: {
    skip 'the reload took most of the token\'s 3 s', 1 if time - $got > 2.5;
    $valid = count(qr/QUIC address validated/);
    $s->send(initial($rscid // '', rnd(8), $token // ''));
    ok(log_grows(qr/QUIC address validated/, $valid),
       'a token from before the reload validates after it');
}
$retries = count(qr/QUIC Retry sent/);
ok(h3_ok(), 'a real client is served after the reload');
is(count(qr/QUIC Retry sent/), $retries + 1, 'after a Retry');

# NEW_TOKEN: a client's connection brings it a token for the next one
# from its address, which skips the Retry (gtlsclient keeps it in a file)
my $gtls = '/usr/bin/gtlsclient';
SKIP: {
    skip 'ngtcp2-client (gtlsclient) is not installed', 5 unless -x $gtls;
    my $get = sub {
        system("timeout 20 $gtls -q --exit-on-all-streams-close "
             . "--token-file=$dir/token 127.0.0.1 $port "
             . "https://localhost:$port/index.html >/dev/null 2>&1") == 0;
    };
    $retries = count(qr/QUIC Retry sent/);
    ok($get->() && -s "$dir/token", 'a client keeps its NEW_TOKEN token');
    is(count(qr/QUIC Retry sent/), $retries + 1,
       'its first connection came after a Retry');
    my $accepted = count(qr/QUIC NEW_TOKEN token accepted/);
    ok($get->(), 'its next connection is served');
    is(count(qr/QUIC Retry sent/), $retries + 1,
       'without a Retry: the token validated its address');
    is(count(qr/QUIC NEW_TOKEN token accepted/), $accepted + 1,
       'the token accepted (logged at debug)');
}

# the figures, of the workers before the reload too: every Retry and
# validation the log has, and the Initials refused (the 600-byte one,
# the altered, other port's and expired tokens)
my ($rc, $out) = TLS::run([TLS::curl(), '-sk',
                           "https://127.0.0.1:$port/status"]);
my $q = (eval { decode_json($out) } // {})->{quic} // {};
is($q->{retries}, count(qr/QUIC Retry sent/), '/status: the Retries sent');
is($q->{retries_validated}, count(qr/QUIC address validated/),
   '/status: the addresses their tokens validated');
cmp_ok($q->{dropped_initials} // 0, '>=', 4,
       '/status: the Initials refused');

$t->stop;
$t->no_alerts;
done_testing;
