#!/usr/bin/perl
# What an idle TLS keep-alive connection costs the worker: 200
# connections each make a request whose 40 KB response fills the record
# and wire buffers, then stay open, idle. Those buffers go back (OpenSSL's
# SSL_MODE_RELEASE_BUFFERS, then tls_idle() at keep-alive), so the worker
# grows by the connections' SSL state only: 16 KB each here, asserted
# under 32 KB. Holding the buffers (or giving them back late, which lets
# the next connections' small objects split the freed blocks) measured
# about 59 KB. Then each is served again.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
my ($py) = grep { -x } map { "$_/python3" } split /:/, $ENV{PATH};
plan skip_all => 'python3 is not installed' unless $py;

my $N = 200;
my $asan = `$FastdTest::BIN -v 2>&1` =~ /--with-sanitizers/;
my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('a.test');
mkdir $t->dir . '/html';
$t->write_file('html/big.txt', 'x' x 40000);
$t->write_conf(TLS::conf(
    certs => [$cert], names => 'a.test',
    http => { keepalive_timeout => '60s' },
    locations => "[location /]\nhandler = static\nroot = %%DIR%%/html\n\n"));
my $master = $t->start;
my ($w) = $t->workers;
ok($w, 'one worker');

# A client holding connections: "go" opens N and makes one request on
# each (after a warm-up connection before the base figure), "again" one
# more on every connection; a line per step on stdout.
my $client = $t->write_file('client.py', <<'PY');
import socket, ssl, sys

port, n = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE

def conn():
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                 timeout=20),
                        server_hostname="a.test")
    return s

def get(s):
    s.sendall(b"GET /big.txt HTTP/1.1\r\nHost: a.test\r\n\r\n")
    data = b""
    while True:
        i = data.find(b"\r\n\r\n")
        if i >= 0:
            head = data[:i].decode()
            cl = [int(l.split(":")[1]) for l in head.split("\r\n")
                  if l.lower().startswith("content-length:")][0]
            if len(data) >= i + 4 + cl:
                return head.split(" ")[1]
        d = s.recv(65536)
        if not d:
            return "closed"
        data += d

warm = conn()
print("warm", get(warm), flush=True)
socks = []
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "go":
        more = [conn() for _ in range(n)]
        st = [get(s) for s in more]
        socks += more
    elif cmd == "again":
        st = [get(s) for s in socks]
    else:
        break
    print(cmd, sum(1 for x in st if x == "200"), flush=True)
PY

use IPC::Open2;
my $pid = open2(my $out, my $in, $py, $client, $t->port, $N);
$in->autoflush(1);
like(scalar <$out>, qr/^warm 200/, 'a warm-up connection');
my $base = FastdTest::rss_kb($w);

print $in "go\n";
is(scalar <$out>, "go $N\n", "$N TLS connections, a 40 KB response on each");
SKIP: {
    skip 'RSS is not meaningful under AddressSanitizer', 1 if $asan;
    # given back as each response ended, before the client read it
    my $per = (FastdTest::rss_kb($w) - $base) * 1024 / $N;
    cmp_ok($per, '<', 32 * 1024,
           sprintf('idle, each costs %.0f bytes: no TLS buffers kept', $per));
}

print $in "again\n";
is(scalar <$out>, "again $N\n", 'each is served again after it');

print $in "end\n";
close $in;
waitpid $pid, 0;
$t->no_alerts;
done_testing;
