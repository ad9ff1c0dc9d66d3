#!/usr/bin/perl
# TLS basics with real clients: curl --cacert GETs plaintext, json, a
# static file with Range and a proxied location over https; the variables
# ($scheme $https $ssl_protocol $ssl_cipher $ssl_server_name) and the
# proxy's X-Forwarded-Proto, over https and (empty, http) over a plain
# server of the same fastd; many keep-alive requests on one connection;
# requests pipelined in one write over one TLS connection come back all
# and in order; a several-MB static file arrives byte-exact.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use TLS;
use Digest::SHA qw(sha256_hex);
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
plan skip_all => 'curl is not installed' unless TLS::curl();

my $be = Backend->new(handler => sub {
    my ($req) = @_;
    return Backend::response(200, "backend $req->{path} proto="
                             . ($req->{headers}{'x-forwarded-proto'} // '-'));
});

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('localhost', names => ['localhost', 'a.test']);

mkdir $t->dir . '/files' or die;
# a file whose every 4 KB block differs: a misplaced piece shows
my $big = join '', map { sprintf("%08d", $_) x 512 } 0 .. 1023;
$big x= 2;                                       # 8 MB
$t->write_file('files/big.bin', $big);
$t->write_file('files/abc.txt', join('', 'a' .. 'z') x 4);

$t->write_conf(TLS::conf(
    certs => [$cert], names => 'localhost a.test',
    locations => <<"L"));
[location /files/]
root = %%DIR%%

[location /vars]
return = 200 \$scheme|\$https|\$ssl_protocol|\$ssl_cipher|\$ssl_server_name|

[location /be/]
handler = proxy
upstream = be

[server]
listen = 127.0.0.1:%%PORT2%%

[location /vars]
return = 200 \$scheme|\$https|\$ssl_protocol|\$ssl_cipher|\$ssl_server_name|

[location /be/]
handler = proxy
upstream = be

[upstream be]
server = 127.0.0.1:${\ $be->port}

L
$t->start;
my $port = $t->port;

sub get { $pki->curl_get($_[0], port => $port, @_[1 .. $#_]) }

# --- curl over https -----------------------------------------------------
my $r = get('/plaintext');
is($r->{code}, 200, 'https GET /plaintext: 200') or diag($r->{err});
is($r->{body}, 'Hello, World!', 'the body');
like($r->{headers}, qr/^content-type: text\/plain/mi, 'Content-Type');

$r = get('/json');
is($r->{code}, 200, 'https GET /json: 200') or diag($r->{err});
like($r->{body}, qr/^\{"message":\s*"Hello, World!"\}$/, 'the JSON body');

$r = get('/files/abc.txt', args => ['-r', '3-9']);
is($r->{code}, 206, 'a Range request over https: 206') or diag($r->{err});
is($r->{body}, 'defghij', 'the range');
like($r->{headers}, qr/^content-range: bytes 3-9\/104\r?$/mi, 'Content-Range');

$r = get('/be/x');
is($r->{code}, 200, 'a proxied location over https: 200') or diag($r->{err});
is($r->{body}, 'backend /be/x proto=https',
   'the backend answered, told X-Forwarded-Proto: https');

$r = get('/vars', name => 'a.test');
is($r->{code}, 200, 'GET /vars') or diag($r->{err});
like($r->{body}, qr/^https\|on\|TLSv1\.3\|TLS_[A-Z0-9_]+\|a\.test\|$/,
     '$scheme $https $ssl_protocol $ssl_cipher $ssl_server_name')
    or diag($r->{body});

# the same on a plain HTTP server of the same fastd
my $plain = $t->http("GET /vars HTTP/1.1\r\nHost: a.test\r\n\r\n", port => $t->port2);
is($plain && $plain->body, 'http|||||',
   'over plain HTTP: $scheme http, the TLS ones empty');
$plain = $t->http("GET /be/y HTTP/1.1\r\nHost: a.test\r\n\r\n", port => $t->port2);
is($plain && $plain->body, 'backend /be/y proto=http', 'and X-Forwarded-Proto: http');

# --- keep-alive: 50 requests on one connection -----------------------------
$r = get([ map { "/plaintext?n=$_" } 1 .. 50 ]);
is(scalar(grep { $_ == 200 } @{ $r->{codes} }), 50, '50 keep-alive requests: 200 each')
    or diag("@{ $r->{codes} } $r->{err}");
is($r->{connects}, 1, 'over one TLS connection');

# --- pipelining: 32 requests in one write ----------------------------------
{
    my $c = $pki->connect(port => $port, name => 'localhost');
    my $n = 32;
    my $req = join '', map {
        my $p = $_ % 2 ? "/plaintext?i=$_" : "/files/abc.txt?i=$_";
        "GET $p HTTP/1.1\r\nHost: localhost\r\n\r\n"
    } 1 .. $n;
    ok($c->send($req), "$n pipelined requests written at once");
    my @res = $c->read_responses($n, timeout => 15);
    is(scalar @res, $n, "$n responses") or diag($c->stderr);
    my @want = map { $_ % 2 ? 'Hello, World!' : join('', 'a' .. 'z') x 4 } 1 .. $n;
    is_deeply([ map { $_->body } @res ], [ @want[0 .. $#res] ],
              'in order, each with its own body');
    is(scalar(grep { $_->status == 200 } @res), $n, 'every one 200');
    # and the connection still serves after the batch
    $c->send("GET /json HTTP/1.1\r\nHost: localhost\r\n\r\n");
    my $after = $c->read_response;
    is($after && $after->status, 200, 'the connection serves on after the batch');
    $c->close;
}

# --- a large file arrives byte-exact ---------------------------------------
$r = get('/files/big.bin');
is($r->{code}, 200, 'GET an 8 MB file over https: 200') or diag($r->{err});
is(length $r->{body}, length $big, 'all of its bytes');
is(sha256_hex($r->{body}), sha256_hex($big), 'byte-exact (sha256)');

# twice at once on one keep-alive connection, then a range of it
$r = get(['/files/big.bin', '/files/big.bin']);
is_deeply($r->{codes}, [200, 200], 'the large file twice on one connection');
is($r->{connects}, 1, 'one connection');
is(sha256_hex($r->{body}), sha256_hex($big), 'the last copy byte-exact');
$r = get('/files/big.bin', args => ['-r', '4000000-4100000']);
is($r->{code}, 206, 'a range in the middle of the large file');
is($r->{body}, substr($big, 4000000, 100001), 'byte-exact');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
