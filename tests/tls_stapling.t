#!/usr/bin/perl
# OCSP stapling from a file: ssl_stapling_file (a DER response made with
# openssl ocsp, signed by the test CA) is sent to a client that asks
# (s_client -status): "good" for the server's certificate; a client that
# does not ask gets none, a server without the key staples nothing; a
# file that is not an OCSP response is a configuration error naming
# file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

plan skip_all => 'the openssl CLI is not installed' unless TLS::openssl();

my $t = FastdTest->new;
my $pki = TLS->new($t->dir);
my $cert = $pki->server('a.test');
my $der = $pki->ocsp($cert);

$t->write_conf(TLS::conf(
    certs => [$cert], names => 'a.test',
    more => "ssl_stapling_file = $der\n",
    extra => "[server]\n"
           . TLS::server_keys(port => '%%PORT2%%', certs => [$cert],
                              names => 'a.test')));
$t->start;

sub hello {
    my ($port, @args) = @_;
    my ($rc, $out) = $pki->s_client(port => $port, name => 'a.test',
                                    args => \@args);
    return $out;
}

my $out = hello($t->port, '-status');
like($out, qr/^\s*OCSP Response Status: successful/m, '-status: a response is stapled')
    or diag($out);
like($out, qr/^\s*Cert Status: good/m, 'it says good');
like($out, qr/^\s*Serial Number: 0*\Q${\ sprintf('%X', $cert->{serial})}\E$/m,
     'for the server\'s certificate');

$out = hello($t->port);
unlike($out, qr/OCSP Response Status/, 'no -status: nothing stapled');
$out = hello($t->port2, '-status');
like($out, qr/OCSP response: no response sent/,
     'a server without ssl_stapling_file: none sent')
    or diag($out);

# a file that is not a DER OCSP response
my $junk = $t->write_file('junk.der', "not an OCSP response\n");
my $text = TLS::conf(certs => [$cert], more => "ssl_stapling_file = $junk\n");
my $path = $t->write_conf($text, 'bad.conf');
my @lines = split /\n/, $t->subst($text);
my ($line) = grep { $lines[$_ - 1] =~ /^ssl_stapling_file/ } 1 .. @lines;
my ($brc, $bout) = FastdTest::run_fastd('-t', '-c', $path);
is($brc, 1, 'ssl_stapling_file with junk: -t fails');
like($bout, qr/\Q$path\E:$line\b/, "naming $path:$line") or diag($bout);

ok($t->running, 'fastd still running');
$t->no_alerts;
done_testing();
