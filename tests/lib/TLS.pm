package TLS;

# The TLS tests' tools (tests/tls_*.t): a throw-away PKI made with the
# openssl CLI in a test's temporary directory, the fastd configuration of a
# TLS server, and real clients: openssl s_client (one-shot, or kept open
# as a connection the test writes requests into), curl --cacert, and a
# lookup of the worker that holds a client's connection. Core perl only;
# every process started here is waited for or stopped here, by pid.
#
#   my $pki = TLS->new($t->dir);
#   my $a = $pki->server('a.test');                 # ECDSA P-256
#   my $r = $pki->server('a.test', type => 'rsa');  # RSA 2048
#   my $c = $pki->client('client.test');            # clientAuth, same CA
#   my $m = $pki->mismatch('bad.test');             # crt and another key
#   my $x = $pki->expired_client('old.test');       # clientAuth, expired
#   my $der = $pki->ocsp($a);                       # an OCSP response
#   $a->{crt}, $a->{key}, $a->{serial}; $pki->ca

use strict;
use warnings;

use File::Path ();
use File::Temp ();
use IO::Socket::INET;
use IO::Select;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time);
use FastdTest;

sub openssl { (grep { -x } qw(/usr/bin/openssl /usr/local/bin/openssl))[0] }
sub curl    { (grep { -x } qw(/usr/bin/curl /usr/local/bin/curl))[0] }

# Run a command to completion, stdin from $o{in} (bytes) or /dev/null,
# stdout and stderr into one file; returns (exit code, output), -1 when
# killed at the $o{timeout} (default 10 s).
sub run {
    my ($cmd, %o) = @_;
    my $tmp = File::Temp->new(UNLINK => 1);
    my $in = File::Temp->new(UNLINK => 1);
    print $in $o{in} // '';
    close $in;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', $in->filename or POSIX::_exit(126);
        open STDOUT, '>', $tmp->filename or POSIX::_exit(126);
        if ($o{stderr}) { open STDERR, '>', $o{stderr} }
        else { open STDERR, '>&', \*STDOUT }
        { no warnings 'exec'; exec @$cmd; }
        POSIX::_exit(127);
    }
    my $status;
    FastdTest::wait_for(sub {
        $status = $? if waitpid($pid, WNOHANG) == $pid;
        defined $status;
    }, $o{timeout} // 10, 0.01);
    unless (defined $status) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
        return (-1, FastdTest::slurp($tmp->filename) // '');
    }
    my $rc = WIFEXITED($status) ? WEXITSTATUS($status) : -1;
    return ($rc, FastdTest::slurp($tmp->filename) // '');
}

sub ossl {
    my ($self, @args) = @_;
    my ($rc, $out) = run([ openssl(), @args ], timeout => 30);
    die "openssl @args: exit $rc\n$out" if $rc != 0;
    return $out;
}

# ---------------------------------------------------------------------------
# the PKI

# A CA (ECDSA P-256, valid two days) under DIR/pki.
sub new {
    my ($class, $dir) = @_;
    my $self = bless { dir => "$dir/pki", serial => 1000 }, $class;
    mkdir $self->{dir} or die "mkdir $self->{dir}: $!";
    my $d = $self->{dir};
    $self->ossl(qw(req -x509 -new -newkey ec -pkeyopt
                   ec_paramgen_curve:P-256 -nodes -sha256 -days 2
                   -subj), '/O=fastd tests/CN=fastd test CA',
                '-addext', 'basicConstraints=critical,CA:TRUE',
                '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
                '-keyout', "$d/ca.key", '-out', "$d/ca.crt");
    return $self;
}

sub ca  { "$_[0]{dir}/ca.crt" }
sub dir { $_[0]{dir} }

sub newkey {
    my ($self, $type, $path) = @_;
    my @alg = $type eq 'rsa' ? qw(-algorithm RSA -pkeyopt rsa_keygen_bits:2048)
            : qw(-algorithm EC -pkeyopt ec_paramgen_curve:P-256);
    $self->ossl('genpkey', @alg, '-out', $path);
}

# A certificate for $cn signed by the CA. %o: type (ec, rsa), names (the
# SAN DNS names, default [$cn]), usage (serverAuth, clientAuth), key (an
# existing key file: a renewal), file (base name, default "$cn-$type").
# Returns { crt, key, serial (a number), cn }.
sub issue {
    my ($self, $cn, %o) = @_;
    my $type = $o{type} // 'ec';
    my $d = $self->{dir};
    my $base = "$d/" . ($o{file} // "$cn-$type");
    my $key = $o{key} // "$base.key";
    $self->newkey($type, $key) unless $o{key};
    my $serial = ++$self->{serial};
    my @san = map { "DNS:$_" } @{ $o{names} || [$cn] };
    push @san, 'IP:127.0.0.1' if ($o{usage} // 'serverAuth') eq 'serverAuth';
    FastdTest::spew("$base.ext",
        "basicConstraints = CA:FALSE\n"
        . "keyUsage = critical, digitalSignature"
        . ($type eq 'rsa' ? ", keyEncipherment\n" : "\n")
        . "extendedKeyUsage = " . ($o{usage} // 'serverAuth') . "\n"
        . "subjectAltName = " . join(', ', @san) . "\n");
    $self->ossl('req', '-new', '-key', $key, '-subj', "/O=fastd tests/CN=$cn",
                '-out', "$base.csr");
    $self->ossl(qw(x509 -req -sha256 -days 2), '-in', "$base.csr",
                '-CA', "$d/ca.crt", '-CAkey', "$d/ca.key",
                '-set_serial', $serial, '-extfile', "$base.ext",
                '-out', "$base.crt");
    return { crt => "$base.crt", key => $key,
             serial => $serial, cn => $cn };
}

sub server { my ($self, $cn, %o) = @_; $self->issue($cn, %o) }

sub client {
    my ($self, $cn, %o) = @_;
    return $self->issue($cn, usage => 'clientAuth', %o);
}

# A client certificate for $cn from the CA that expired a day ago (the
# openssl 3.0 CLI cannot backdate one: Debian's python3-cryptography makes
# it), or undef without that module. Returns { crt, key, cn }.
sub expired_client {
    my ($self, $cn) = @_;
    my $d = $self->{dir};
    my ($crt, $key) = ("$d/$cn-expired.crt", "$d/$cn-expired.key");
    $self->newkey('ec', $key);
    my ($rc, $out) = run([ '/usr/bin/python3', '-c', <<'PY', "$d/ca.crt",
import datetime, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
ca_crt, ca_key, key, cn, serial, out = sys.argv[1:]
ca = x509.load_pem_x509_certificate(open(ca_crt, 'rb').read())
cak = serialization.load_pem_private_key(open(ca_key, 'rb').read(), None)
k = serialization.load_pem_private_key(open(key, 'rb').read(), None)
now = datetime.datetime.now(datetime.timezone.utc)
name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, 'fastd tests'),
                  x509.NameAttribute(NameOID.COMMON_NAME, cn)])
crt = (x509.CertificateBuilder().subject_name(name)
       .issuer_name(ca.subject).public_key(k.public_key())
       .serial_number(int(serial))
       .not_valid_before(now - datetime.timedelta(days=3))
       .not_valid_after(now - datetime.timedelta(days=1))
       .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
       .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                      False)
       .sign(cak, hashes.SHA256()))
open(out, 'wb').write(crt.public_bytes(serialization.Encoding.PEM))
PY
        "$d/ca.key", $key, $cn, ++$self->{serial}, $crt ]);
    return undef if $rc != 0;
    return { crt => $crt, key => $key, cn => $cn };
}

# A valid certificate whose key file holds another key.
sub mismatch {
    my ($self, $cn) = @_;
    my $c = $self->issue($cn, file => "$cn-mismatch");
    $self->newkey('ec', "$self->{dir}/$cn-other.key");
    $c->{key} = "$self->{dir}/$cn-other.key";
    return $c;
}

# A DER OCSP response for $c signed by the CA (status good, valid a day),
# as `openssl ocsp -respout` writes it for ssl_stapling_file; its path.
sub ocsp {
    my ($self, $c) = @_;
    my $d = $self->{dir};
    my $end = $self->ossl('x509', '-in', $c->{crt}, '-noout', '-enddate');
    $end =~ s/^notAfter=//;
    chomp $end;
    my (undef, $when) = run([ 'date', '-u', '-d', $end, '+%y%m%d%H%M%SZ' ]);
    chomp $when;
    # the CA database "openssl ocsp -index" answers from
    FastdTest::spew("$d/index.txt",
        sprintf("V\t%s\t\t%04X\tunknown\t/O=fastd tests/CN=%s\n",
                $when, $c->{serial}, $c->{cn}));
    my $base = $c->{crt} =~ s/\.crt$//r;
    $self->ossl(qw(ocsp -no_nonce -issuer), $self->ca, '-cert', $c->{crt},
                '-reqout', "$base.ocspreq");
    $self->ossl(qw(ocsp -ndays 1 -index), "$d/index.txt", '-rsigner',
                $self->ca, '-rkey', "$d/ca.key", '-CA', $self->ca,
                '-reqin', "$base.ocspreq", '-respout', "$base.ocsp");
    return "$base.ocsp";
}

# ---------------------------------------------------------------------------
# fastd configuration

# The keys of a TLS [server]: listen ADDR ssl and its certificate pairs.
# %o: names (server_name), certs ([pairs]), listen_opt ("ssl default"),
# more (extra "key = value" lines).
sub server_keys {
    my (%o) = @_;
    my $s = "listen = 127.0.0.1:" . ($o{port} // '%%PORT%%') . " "
          . ($o{listen_opt} // 'ssl') . "\n";
    $s .= "server_name = $o{names}\n" if $o{names};
    for my $c (@{ $o{certs} }) {
        $s .= "ssl_certificate = $c->{crt}\nssl_certificate_key = $c->{key}\n";
    }
    $s .= $o{more} // '';
    return $s;
}

# The keys of an HTTP/3 [server]: listen ADDR ssl and ADDR quic (the same
# port) with one certificate pair. %o as server_keys (more: extra lines).
sub quic_server_keys {
    my ($cert, %o) = @_;
    return server_keys(%o, certs => [$cert],
                       more => "listen = 127.0.0.1:"
                             . ($o{port} // '%%PORT%%') . " quic\n"
                             . ($o{more} // ''));
}

# The HTTP/3 tests that move a file at a set rate (a download spanning a
# reload, a worker stopped): $words 32-bit words of a file no compression
# or range mix-up could fake, as DIR/www/f.bin, and the [server] that
# serves it under /rated/ at $rate (HTTPS and QUIC on %%PORT%%), with a
# /status location when $o{status}. Returns the file's bytes and that
# [server]'s text.
sub quic_rated_file {
    my ($dir, $cert, $words, $rate, %o) = @_;
    File::Path::make_path("$dir/www");
    my $file = join '', map { pack('N', $_ * 2654435761 % 4294967296) }
                            1 .. $words;
    FastdTest::spew("$dir/www/f.bin", $file);
    my $conf = "[server]\n" . quic_server_keys($cert)
             . "root = %%DIR%%/www\n\n[location /rated/]\n"
             . "alias = %%DIR%%/www/\nlimit_rate = $rate\n";
    $conf .= "\n[location = /status]\nhandler = status\n" if $o{status};
    return ($file, $conf);
}

# GET https://127.0.0.1:$port/status: its JSON decoded ({} when it is not),
# or with $prom the Prometheus text.
sub status {
    my ($port, $prom) = @_;
    my ($rc, $out) = run([curl(), '-sk', "https://127.0.0.1:$port/status"
                                         . ($prom ? '?format=prometheus'
                                                  : '')]);
    return $out if $prom;
    require JSON::PP;
    return eval { JSON::PP::decode_json($out) } // {};
}

# An HTTP/3 test's first skips (plan skip_all): a fastd without HTTP/3, no
# openssl CLI.
sub http3_fastd_or_skip {
    require Test::More;
    my $root = FastdTest::root();
    my $cfg = FastdTest::slurp("$root/objs/fd_auto_config.h") // '';
    Test::More::plan(skip_all =>
        'fastd built without HTTP/3 (./configure --with-http3)')
        unless $cfg =~ /^#define FD_HTTP3 1/m;
    Test::More::plan(skip_all => 'the openssl CLI is not installed')
        unless openssl();
}

# Those, and one without Debian's pycurl on a libcurl with HTTP/3 (for
# tests/lib/h3get.py): returns the python that has it.
sub http3_or_skip {
    http3_fastd_or_skip();
    my $py = '/usr/bin/python3';
    Test::More::plan(skip_all => 'python3-pycurl on libcurl with HTTP/3 is '
                               . 'not installed')
        unless system($py, '-c', 'import pycurl, sys; sys.exit(0 if '
                      . '"nghttp3" in pycurl.version else 1)') == 0;
    return $py;
}

# The compiler flags of the HTTP/3 tests' own clients (tests/bench/h3load.c,
# tests/lib/quicraw.c); the test is skipped (plan skip_all) when fastd has
# no HTTP/3, or the openssl CLI or ngtcp2, nghttp3 or GnuTLS headers are
# missing.
sub quic_client_flags {
    http3_fastd_or_skip();
    my $flags = `pkg-config --cflags --libs libngtcp2 libngtcp2_crypto_gnutls libnghttp3 gnutls 2>/dev/null`;
    Test::More::plan(skip_all =>
        'no ngtcp2, nghttp3 or gnutls development files')
        unless $flags =~ /ngtcp2/;
    chomp $flags;
    return $flags;
}

# Compile those clients (paths below the tree's root) into $dir, each
# named as its source without .c; returns their paths. A failure bails out.
sub quic_clients {
    my ($dir, $flags, @srcs) = @_;
    my $root = FastdTest::root();
    my @bins;
    for my $src (@srcs) {
        my ($name) = $src =~ m{([^/]+)\.c$};
        system("cc -O2 -o $dir/$name $root/$src $flags") == 0
            or Test::More::BAIL_OUT("cc $src failed");
        push @bins, "$dir/$name";
    }
    return @bins;
}

# A whole configuration: FastdTest::base_conf with its first [server] on
# an ssl address with these certificates. %o: certs, names, more (server
# keys), main/http/events (as base_conf), locations, extra.
sub conf {
    my (%o) = @_;
    my $text = FastdTest::base_conf(
        map({ exists $o{$_} ? ($_ => $o{$_}) : () }
            qw(main http events locations extra)));
    my $keys = server_keys(%o);
    # base_conf's [server] section: its listen line becomes ours
    $text =~ s/^listen = 127\.0\.0\.1:%%PORT%%\n/$keys/m
        or die "base_conf has no listen line";
    return $text;
}

# ---------------------------------------------------------------------------
# clients

# One s_client run to completion: with $o{in}, its bytes are sent and
# s_client waits for the server to close (-ign_eof); without, it ends
# after the handshake. %o: port, name
# (-servername; undef: -noservername), ca (default the test CA: the
# server's certificate must verify), noverify (it need not), cert (a
# client certificate: { crt, key }), args (more s_client options), in,
# timeout. Returns (exit code, everything s_client printed).
sub s_client {
    my ($self, %o) = @_;
    return run([ openssl(), 's_client', s_client_args($self, %o),
                 defined $o{in} ? '-ign_eof' : () ],
               in => $o{in}, timeout => $o{timeout} // 10);
}

sub s_client_args {
    my ($self, %o) = @_;
    my @a = ('-connect', "127.0.0.1:$o{port}");
    push @a, defined $o{name} ? ('-servername', $o{name}) : '-noservername';
    push @a, '-CAfile', $o{ca} // $self->ca;
    push @a, '-verify_return_error' unless $o{noverify};
    push @a, '-cert', $o{cert}{crt}, '-key', $o{cert}{key} if $o{cert};
    push @a, @{ $o{args} || [] };
    return @a;
}

# The first HTTP response in what s_client printed (its report of a TLS
# 1.3 session ticket may come just before it, on the same line), or undef.
sub response {
    my ($out) = @_;
    my $at = index($out, 'HTTP/1.');
    return undef if $at < 0;
    my $buf = substr($out, $at);
    my ($r) = FastdTest::parse_one(\$buf);
    return $r && !$r->{error} ? $r : undef;
}

# The peer certificate s_client printed: (subject CN, serial), via x509.
sub peer_cert {
    my ($self, $out) = @_;
    my $pem_re = qr/-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----/s;
    my ($pem) = $out =~ /($pem_re)/ or return ();
    my ($rc, $x) = run([ openssl(), qw(x509 -noout -subject -serial
                                       -nameopt RFC2253) ], in => "$pem\n");
    my ($cn) = $x =~ /^subject=.*?CN=([^,\n]+)/m;
    my ($serial) = $x =~ /^serial=([0-9A-F]+)/m;
    return ($cn, defined $serial ? hex $serial : undef);
}

# curl over https, verifying against the CA; name resolves to 127.0.0.1.
# $path may be a list of paths, fetched in one curl run (one connection
# when the server keeps it alive). %o: port, name (default localhost), ca,
# args (more curl options). Returns { rc, code (the last status), codes,
# connects (new connections made), headers, bodies, body (the last), err
# (curl's stderr) }.
sub curl_get {
    my ($self, $path, %o) = @_;
    my $name = $o{name} // 'localhost';
    my $d = $self->{dir};
    my @paths = ref $path ? @$path : ($path);
    my @cmd = (curl(), qw(-sS --http1.1 --max-time 20), '--cacert',
               $o{ca} // $self->ca, '--resolve', "$name:$o{port}:127.0.0.1",
               '-D', "$d/curl.head", '-w', '%{http_code} %{num_connects}\n',
               @{ $o{args} || [] });
    unlink "$d/curl.head", "$d/curl.err", glob("$d/curl.body.*");
    for my $i (0 .. $#paths) {
        push @cmd, '-o', "$d/curl.body.$i", "https://$name:$o{port}$paths[$i]";
    }
    my ($rc, $out) = run(\@cmd, stderr => "$d/curl.err", timeout => 30);
    my (@codes, $connects);
    for (split /\n/, $out) {
        my ($c, $n) = /^(\d+) (\d+)$/ or next;
        push @codes, $c + 0;
        $connects += $n;
    }
    return { rc => $rc, codes => \@codes, code => $codes[-1] // 0,
             connects => $connects // 0,
             headers => FastdTest::slurp("$d/curl.head") // '',
             bodies => [ map { FastdTest::slurp("$d/curl.body.$_") // '' }
                         0 .. $#paths ],
             body => FastdTest::slurp("$d/curl.body.$#paths") // '',
             err => FastdTest::slurp("$d/curl.err") // '' };
}

# A connection kept open: s_client with pipes, the test writes requests
# and reads responses (FastdTest's parser). %o as s_client; quiet (default
# 1: only the application's bytes on stdout), commands (s_client's R and
# Q commands on).
sub connect {
    my ($self, %o) = @_;
    return TLS::Conn->new($self, %o);
}

# Which worker (of the fastd $t) holds the server side of the TCP
# connection from local port $cport to $sport: its socket inode in
# /proc/net/tcp, then the process with that inode among its fds.
sub worker_of {
    my ($t, $cport, $sport) = @_;
    my $inode;
    for my $l (split /\n/, FastdTest::slurp('/proc/net/tcp') // '') {
        my @f = split ' ', $l;
        next unless @f > 9 && $f[1] =~ /:([0-9A-F]{4})$/;
        my $lport = hex $1;
        my ($rport) = $f[2] =~ /:([0-9A-F]{4})$/ or next;
        next unless $lport == $sport;
        if (hex $rport == $cport && $f[3] eq '01') {   # ESTABLISHED
            $inode = $f[9];
            last;
        }
    }
    return undef unless $inode;
    for my $w ($t->workers) {
        my $links = FastdTest::fd_links($w);
        return $w if grep { $_ eq "socket:[$inode]" } values %$links;
    }
    return undef;
}

# The local port of $pid's (s_client's) TCP connection to $port.
sub client_port {
    my ($pid, $port) = @_;
    my %inodes = map { /socket:\[(\d+)\]/ ? ($1 => 1) : () }
                 values %{ FastdTest::fd_links($pid) };
    for my $l (split /\n/, FastdTest::slurp('/proc/net/tcp') // '') {
        my @f = split ' ', $l;
        next unless @f > 9 && $inodes{ $f[9] };
        my ($rport) = $f[2] =~ /:([0-9A-F]{4})$/ or next;
        next unless hex $rport == $port;
        my ($lport) = $f[1] =~ /:([0-9A-F]{4})$/;
        return hex $lport;
    }
    return undef;
}

# The bytes of a real ClientHello record (s_client's, %o as s_client):
# caught on a listener of our own, that s_client never gets an answer from.
sub client_hello {
    my ($self, %o) = @_;
    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 1, Proto => 'tcp')
        or die "listen: $!";
    my $c = $self->connect(%o, port => $ls->sockport);
    my $sel = IO::Select->new($ls);
    my $rec = '';
    if ($sel->can_read(10)) {
        my $s = $ls->accept;
        my $deadline = time + 10;
        my $want = 5;
        while (length $rec < $want && time < $deadline) {
            IO::Select->new($s)->can_read($deadline - time) or last;
            sysread($s, $rec, $want - length $rec, length $rec) or last;
            $want = 5 + unpack('n', substr($rec, 3, 2)) if length $rec == 5;
        }
        close $s;
    }
    $c->close;
    close $ls;
    die "no ClientHello from s_client" unless length $rec > 5
        && substr($rec, 0, 1) eq "\x16";
    return $rec;
}

# ---------------------------------------------------------------------------
package TLS::Conn;

# s_client as a connection: requests go to its stdin, the server's bytes
# come from its stdout (with quiet => 0, after s_client's own report).
# FastdTest::Conn's reading and parsing methods work on it.

our @ISA = ('FastdTest::Conn');

use POSIX qw(:sys_wait_h);

sub new {
    my ($class, $pki, %o) = @_;
    my @args = TLS::s_client_args($pki, %o);
    # -quiet: no report on stdout, and s_client's commands off (it implies
    # -ign_eof); commands: R and Q work (and the end of input quits)
    push @args, '-quiet' if $o{quiet} // 1;
    push @args, '-ign_eof' unless $o{commands};
    pipe(my $in_r, my $in_w) or die "pipe: $!";
    pipe(my $out_r, my $out_w) or die "pipe: $!";
    my $err = "$pki->{dir}/s_client." . ++$pki->{conns} . '.err';
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $in_w;
        close $out_r;
        open STDIN, '<&', $in_r or POSIX::_exit(126);
        open STDOUT, '>&', $out_w or POSIX::_exit(126);
        open STDERR, '>', $err or POSIX::_exit(126);
        { no warnings 'exec'; exec TLS::openssl(), 's_client', @args; }
        POSIX::_exit(127);
    }
    close $in_r;
    close $out_w;
    binmode $in_w;
    binmode $out_r;
    $out_r->blocking(0);
    my $self = bless {
        sock => $out_r, in => $in_w, pid => $pid, errfile => $err,
        port => $o{port}, buf => '', raw => '', eof => 0, reset => 0,
        timeout => $o{timeout} // 5, owner => $$,
    }, $class;
    return $self;
}

sub pid { $_[0]{pid} }

# What s_client said on stderr (verification, handshake errors).
sub stderr { FastdTest::slurp($_[0]{errfile}) // '' }

sub send {
    my ($self, $data) = @_;
    local $SIG{PIPE} = 'IGNORE';
    return 0 unless $self->{in};
    my $n = syswrite($self->{in}, $data);
    return defined $n && $n == length $data;
}

sub shut_wr {
    my ($self) = @_;
    close $self->{in} if $self->{in};
    $self->{in} = undef;
}

# Has s_client connected (the TCP connection exists)? Its local port.
sub local_port {
    my ($self) = @_;
    return $self->{lport} //= TLS::client_port($self->{pid}, $self->{port});
}

# The worker of fastd $t serving this connection (after the handshake).
sub worker {
    my ($self, $t) = @_;
    my $w;
    FastdTest::wait_for(sub {
        my $p = $self->local_port or return 0;
        $w = TLS::worker_of($t, $p, $self->{port});
    }, 5, 0.01);
    return $w;
}

# s_client ended (it exits when the server closes)? Reap it.
sub exited {
    my ($self) = @_;
    return 1 if defined $self->{status};
    return 0 unless waitpid($self->{pid}, WNOHANG) == $self->{pid};
    $self->{status} = $?;
    return 1;
}

sub close {
    my ($self) = @_;
    return if $self->{owner} != $$;
    $self->shut_wr;
    if (!$self->exited) {
        kill 'TERM', $self->{pid};
        FastdTest::wait_for(sub { $self->exited }, 5, 0.01)
            or do { kill 'KILL', $self->{pid}; waitpid($self->{pid}, 0);
                    $self->{status} = -1 };
    }
    close $self->{sock} if $self->{sock};
    $self->{sock} = undef;
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->close if $self->{pid} && !defined $self->{status};
}

1;
