package Pebble;

# Let's Encrypt's test ACME server for the tests: pebble-challtestsrv as
# its DNS (every name resolves to 127.0.0.1, no AAAA), and pebble on free
# ports with its own HTTPS certificate (made here) and PEBBLE_VA_NOSLEEP.
# Pebble really validates: its http-01 checks go to 127.0.0.1:http_port,
# its tls-alpn-01 checks to 127.0.0.1:tls_port (fastd's listeners).
# PEBBLE_WFE_NONCEREJECT stays at its default (5% of nonces are refused
# with badNonce), PEBBLE_VA_ALWAYS_VALID is never set.
#
#   my $pb = Pebble->new(dir => $t->dir, http_port => P, tls_port => Q,
#                        validity => 3600);
#   $pb->directory; $pb->ca_file (its HTTPS's certificate, for
#   ca_certificate); $pb->root (the root its certificates chain to, PEM);
#   $pb->stop; $pb->start (again, same ports)

use strict;
use warnings;
use POSIX ();
use FastdTest;
use FindBin;
use IO::Socket::INET;

sub missing {
    return 'pebble is not installed (apt-get install pebble)'
        unless -x '/usr/bin/pebble' && -x '/usr/bin/pebble-challtestsrv';
    return undef;
}

sub new {
    my ($class, %o) = @_;
    my $self = bless {
        dir      => $o{dir},
        port     => FastdTest::free_port(),
        mgmt     => FastdTest::free_port(),
        dns      => FastdTest::free_port(),
        dnsmgmt  => FastdTest::free_port(),
        http     => $o{http_port},
        tls      => $o{tls_port},
        validity => $o{validity},
        env      => $o{env} // {},
        eab      => $o{eab},      # { KID => HMAC key }: EAB required
        pids     => [],
    }, $class;
    my $d = $self->{dir};
    # openssl req says "-----" on stderr: not the test's output
    open(my $err, '>&', \*STDERR) or die;
    open(STDERR, '>', '/dev/null') or die;
    my $rc = system('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
           'ec_paramgen_curve:P-256', '-nodes', '-days', '2', '-subj',
           '/CN=pebble', '-addext',
           'subjectAltName=IP:127.0.0.1,DNS:localhost',
           '-keyout', "$d/pebble.key", '-out', "$d/pebble.crt");
    open(STDERR, '>&', $err) or die;
    $rc == 0 or die "openssl req failed\n";
    my $v = defined $self->{validity}
        ? qq(,\n    "certificateValidityPeriod": $self->{validity}) : '';
    my $eab = 'false';
    if (my $e = $self->{eab}) {
        $eab = "true,\n    \"externalAccountMACKeys\": {"
             . join(',', map { qq("$_": "$e->{$_}") } sort keys %$e) . '}';
    }
    FastdTest::spew("$d/pebble.json", <<"EOF");
{
  "pebble": {
    "listenAddress": "127.0.0.1:$self->{port}",
    "managementListenAddress": "127.0.0.1:$self->{mgmt}",
    "certificate": "$d/pebble.crt",
    "privateKey": "$d/pebble.key",
    "httpPort": $self->{http},
    "tlsPort": $self->{tls},
    "ocspResponderURL": "",
    "externalAccountBindingRequired": $eab$v
  }
}
EOF
    $self->start;
    return $self;
}

sub _spawn {
    my ($self, $log, $env, @cmd) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(126);
        $ENV{$_} = $env->{$_} for keys %$env;
        { no warnings 'exec'; exec @cmd; }
        POSIX::_exit(127);
    }
    push @{ $self->{pids} }, $pid;
    return $pid;
}

sub _port_open {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 1);
    return $s ? (close($s), 1)[1] : 0;
}

sub start {
    my ($self) = @_;
    my $d = $self->{dir};
    if (!$self->{cts} || !FastdTest::pid_alive($self->{cts})) {
        $self->{cts} = $self->_spawn("$d/challtestsrv.log", {},
            '/usr/bin/pebble-challtestsrv', '-defaultIPv4', '127.0.0.1',
            '-defaultIPv6', '', '-dns01', "127.0.0.1:$self->{dns}",
            '-http01', '', '-https01', '', '-tlsalpn01', '',
            '-management', "127.0.0.1:$self->{dnsmgmt}");
        FastdTest::wait_for(sub { _port_open($self->{dnsmgmt}) && _port_open($self->{dns}) }, 20, 0.05)
            or die "pebble-challtestsrv did not start:\n"
                   . (FastdTest::slurp("$d/challtestsrv.log") // '');
    }
    $self->{pid} = $self->_spawn("$d/pebble.log",
        { PEBBLE_VA_NOSLEEP => 1, %{ $self->{env} } },
        '/usr/bin/pebble', '-config', "$d/pebble.json", '-dnsserver',
        "127.0.0.1:$self->{dns}");
    FastdTest::wait_for(sub { _port_open($self->{port}) }, 20, 0.05)
        or die "pebble did not listen on $self->{port}:\n"
               . (FastdTest::slurp("$d/pebble.log") // '');
    FastdTest::wait_for(sub { _port_open($self->{mgmt}) }, 20, 0.05);
    return $self;
}

# pebble only (challtestsrv stays): a CA that is down
sub stop {
    my ($self) = @_;
    local $?;
    my $pid = delete $self->{pid} or return;
    kill 'TERM', $pid;
    waitpid($pid, 0);
    @{ $self->{pids} } = grep { $_ != $pid } @{ $self->{pids} };
}

sub port      { $_[0]{port} }
sub directory { "https://127.0.0.1:$_[0]{port}/dir" }
sub ca_file   { "$_[0]{dir}/pebble.crt" }
sub log       { FastdTest::slurp("$_[0]{dir}/pebble.log") // '' }

# The root pebble signs with now (a new one each start), PEM, written to
# DIR/root.pem; its path. root(N): the Nth (PEBBLE_ALTERNATE_ROOTS: the
# alternate chains' roots), DIR/rootN.pem.
sub root {
    my ($self, $n) = @_;
    my $out = "$self->{dir}/root" . ($n // '') . ".pem";
    system('curl', '-sf', '--cacert', $self->ca_file, '-o', $out,
           "https://127.0.0.1:$self->{mgmt}/roots/" . ($n // 0)) == 0
        or die "cannot fetch pebble's root\n";
    return $out;
}

# tests/lib/acme_stub.py in front of pebble (its own HTTPS certificate is
# pebble's, so ca_file still verifies it); stub_set(NAME, TEXT) writes its
# mode, ari or other.pem file; stub_directory is the URL to give fastd.
sub stub {
    my ($self) = @_;
    my $d = "$self->{dir}/stub";
    mkdir $d;
    unlink "$d/ready";
    $self->{stub_port} = FastdTest::free_port();
    $self->{stub_pid} = $self->_spawn("$d/stdout.log", {}, 'python3',
        "$FindBin::Bin/lib/acme_stub.py", $self->{stub_port}, $self->{port},
        "$self->{dir}/pebble.crt", "$self->{dir}/pebble.key",
        "$self->{dir}/pebble.crt", $d);
    FastdTest::wait_for(sub { -e "$d/ready" && _port_open($self->{stub_port}) }, 20, 0.05)
        or die "the ACME stub did not start:\n"
               . (FastdTest::slurp("$d/stdout.log") // '');
    return $self;
}
sub stub_directory { "https://127.0.0.1:$_[0]{stub_port}/dir" }
# whole or not at all: the stub reads the file at each request, and one
# read between spew's truncation and its write answered an empty "ari"
# (forwarded to pebble, whose Retry-After put the next ARI check hours
# away: acme_ca_answers.t #22 waited 60 s for nothing on a busy machine)
sub stub_set {
    my ($self, $name, $text) = @_;
    my $path = "$self->{dir}/stub/$name";
    FastdTest::spew("$path.tmp", $text);
    rename("$path.tmp", $path) or die "rename $path: $!";
}
sub stub_file { FastdTest::slurp("$_[0]{dir}/stub/$_[1]") // '' }

sub DESTROY {
    my ($self) = @_;
    local $?; # the test's exit status is not pebble's
    for my $pid (@{ $self->{pids} || [] }) {
        kill 'TERM', $pid;
        waitpid($pid, 0);
    }
}

1;
