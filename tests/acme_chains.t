#!/usr/bin/perl
# preferred_chain: pebble offers two chains to two roots
# (PEBBLE_ALTERNATE_ROOTS=1: Link rel="alternate"); fastd serves the one
# whose root has the common name asked for, which verifies against that
# root (and not the other); a name no chain leads to gets the CA's first
# chain, with a warning.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Pebble;
use Test::More;

plan skip_all => Pebble::missing() if Pebble::missing();

my $t = FastdTest->new;
my $dir = $t->dir;
my ($http, $https) = ($t->port, $t->port2);
my $pb = Pebble->new(dir => $dir, http_port => $http, tls_port => $https,
                     env => { PEBBLE_ALTERNATE_ROOTS => 1 });
my ($r0, $r1) = ($pb->root(0), $pb->root(1));
sub cn_of { my $s = `openssl x509 -noout -subject -nameopt multiline -in $_[0]`; $s =~ /commonName\s*=\s*(.+)/ ? $1 : '' }
my ($cn0, $cn1) = (cn_of($r0), cn_of($r1));
ok($cn0 && $cn1 && $cn0 ne $cn1, "two roots: \"$cn0\", \"$cn1\"");

sub conf {
    my ($pref, $state) = @_;
    return FastdTest::main_section() . <<"EOF";
[server]
listen = 127.0.0.1:$http
server_name = chains.test

[server]
listen = 127.0.0.1:$https ssl
server_name = chains.test
ssl_certificate = acme:pebble
return = 200 "ok"

[acme pebble]
directory = @{[ $pb->directory ]}
accept_terms = on
ca_certificate = @{[ $pb->ca_file ]}
state_path = $dir/$state
preferred_chain = $pref
retry_interval = 1s
retry_max = 2s
EOF
}

sub verifies {
    my ($root) = @_;
    my $out = `echo | openssl s_client -connect 127.0.0.1:$https -servername chains.test -CAfile $root -verify_return_error 2>&1`;
    return $out =~ /Verify return code: 0 \(ok\)/ ? 1 : 0;
}

# the alternate: root 1
$t->write_conf(conf($cn1, 'a'));
$t->start;
ok(FastdTest::wait_for(sub { $t->error_log =~ /acme: chains\.test: new certificate/ }, 90, 0.2),
   'a certificate') or do { $t->diag_logs; diag($pb->log) };
like($t->error_log, qr/the chain to "\Q$cn1\E" \(an alternate\)/, 'the alternate chain was taken');
ok(FastdTest::wait_for(sub { verifies($r1) }, 10, 0.2), "the chain served verifies to \"$cn1\"");
ok(!verifies($r0), "and not to \"$cn0\"");
$t->stop;
$t->no_alerts;

# a root no chain leads to: the first, with a warning
$t->write_conf(conf('No Such Root', 'b'));
my $mark = length $t->error_log;
$t->start;
ok(FastdTest::wait_for(sub { substr($t->error_log, $mark) =~ /acme: chains\.test: new certificate/ }, 90, 0.2),
   'a certificate') or $t->diag_logs;
like(substr($t->error_log, $mark), qr/no chain of the CA's leads to "No Such Root" \(preferred_chain\): serving its first/,
     'no chain to that root: a warning');
ok(FastdTest::wait_for(sub { verifies($r0) }, 10, 0.2), "the CA's first chain, to \"$cn0\"");
$t->stop;
$t->no_alerts;
done_testing;
