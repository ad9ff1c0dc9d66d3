#!/usr/bin/perl
# Python's ssl module as the client, verifying against the test CA
# (check_hostname on): http.client over one TLS connection for several
# keep-alive requests with TLS 1.3 and with TLS 1.2 at most; a server
# name the certificate does not carry fails verification; a session
# resumes with python's own session object.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use JSON::PP;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();
my ($py) = grep { -x } map { "$_/python3" } split /:/, $ENV{PATH};
plan skip_all => 'python3 is not installed' unless $py;

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('a.test');
$t->write_conf(TLS::conf(certs => [$cert], names => 'a.test'));
$t->start;

my $client = $t->write_file('client.py', <<'PY');
import http.client, json, socket, ssl, sys

port, ca, name, maxver = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
if maxver == "1.2":
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
out = {}
try:
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                    timeout=10)
    # verify the name asked for, connect to the loopback address
    c.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                      timeout=10),
                             server_hostname=name)
    out["version"] = c.sock.version()
    out["cipher"] = c.sock.cipher()[0]
    out["peer"] = dict(x[0] for x in c.sock.getpeercert()["subject"])
    out["responses"] = []
    for path in ("/plaintext", "/json", "/plaintext?x=1"):
        c.request("GET", path, headers={"Host": name})
        r = c.getresponse()
        out["responses"].append([r.status, r.read().decode()])
    session = c.sock.session
    c.close()
    # resume: the session python kept (TLS 1.3 tickets arrive after the
    # handshake; they were read with the responses)
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port),
                                                 timeout=10),
                        server_hostname=name, session=session)
    s.sendall(("GET /plaintext HTTP/1.1\r\nHost: %s\r\n"
               "Connection: close\r\n\r\n" % name).encode())
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    out["reused"] = s.session_reused
    out["resumed_status"] = data.split(b" ")[1].decode() if data else ""
    s.close()
except ssl.SSLCertVerificationError as e:
    out["verify_error"] = e.verify_message
print(json.dumps(out))
PY

sub py {
    my ($name, $maxver) = @_;
    my ($rc, $out) = TLS::run([ $py, $client, $t->port, $pki->ca, $name,
                                $maxver // '1.3' ], timeout => 30);
    my $r = eval { decode_json($out) };
    diag("python: $rc $out") unless $r;
    return $r || {};
}

for my $v ('1.3', '1.2') {
    my $r = py('a.test', $v);
    is($r->{version}, "TLSv$v", "python ssl, TLS $v at most: TLSv$v");
    like($r->{cipher} // '', $v eq '1.3' ? qr/^TLS_/ : qr/^ECDHE-ECDSA-/,
         "a TLS $v suite ($r->{cipher})");
    is($r->{peer}{commonName}, 'a.test', 'the certificate verified for a.test');
    is_deeply($r->{responses},
              [ [200, 'Hello, World!'], [200, '{"message":"Hello, World!"}'],
                [200, 'Hello, World!'] ],
              'three keep-alive requests on one verified connection');
    ok($r->{reused}, "the session resumed (python's session object)");
    is($r->{resumed_status}, '200', 'and served');
}

my $r = py('b.test');
like($r->{verify_error} // '', qr/hostname|IP address/i,
     'a name the certificate does not carry: verification fails');
ok(!$r->{responses}, 'nothing sent');

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
