#!/usr/bin/perl
# [http] ssl_session_ticket_key = FILE [OLD]: instances given the same key
# file resume each other's TLS 1.3 sessions (openssl s_client -sess_out
# on one, -sess_in on the other shows "Reused"); one with another key
# does not; after a rotation by hand (a new FILE, the old one as OLD, a
# reload) a ticket of the old key still resumes and the new ones do on
# both. A file that is not 80 bytes, and three files, are config errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use TLS;
use Test::More;

my @t = map { FastdTest->new } 1 .. 3;
my $dir = $t[0]->dir;
my $pki = TLS->new($dir);
my $cert = $pki->server('a.test');

sub key_file {
    my ($name) = @_;
    my $f = "$dir/$name.key80";
    system("openssl rand 80 > '$f'") == 0 or die "openssl rand";
    return $f;
}
my ($k1, $k2, $k3) = map { key_file($_) } qw(k1 k2 k3);

sub conf_with {
    my ($keys) = @_;
    return TLS::conf(main => { workers => 2 }, certs => [$cert],
                     names => 'a.test',
                     http => { ssl_session_ticket_key => $keys });
}

$t[0]->write_conf(conf_with($k1));
$t[1]->write_conf(conf_with($k1));
$t[2]->write_conf(conf_with($k3));
$_->start for @t;

my $n = 0;
sub conn {
    my ($t, @args) = @_;
    my $c = $pki->connect(port => $t->port, name => 'a.test', quiet => 0,
                          args => \@args);
    my $how = $c->wait_for_bytes(qr/^(New|Reused), TLSv1\.\d/m, 10);
    $c->send("GET /plaintext?" . ++$n . " HTTP/1.1\r\nHost: a.test\r\n"
           . "Connection: close\r\n\r\n");
    $c->wait_eof(10);
    $c->close;
    my $r = TLS::response($c->{raw});
    return { how => $how // '', status => $r ? $r->status : 0,
             out => $c->{raw} . $c->stderr };
}

my $sess = "$dir/sess.pem";
my $first = conn($t[0], '-sess_out', $sess);
is($first->{how}, 'New', 'A: a new session') or diag($first->{out});
ok(-s $sess, 'its ticket saved');
for my $try (1 .. 2) {
    my $r = conn($t[1], '-sess_in', $sess);
    is($r->{how}, 'Reused', "B (same key file) resumes A's session ($try)")
        or diag($r->{out});
    is($r->{status}, 200, 'and serves it');
}
my $other = conn($t[2], '-sess_in', $sess);
is($other->{how}, 'New', 'C (another key) makes a full handshake');

# rotation by hand: B and then A take k2, k1 still decrypting
$t[1]->write_conf(conf_with("$k2 $k1"));
$t[0]->write_conf(conf_with("$k2 $k1"));
for my $t (@t[0, 1]) {
    my @old = $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub {
        my @w = $t->workers;
        my %o = map { $_ => 1 } @old;
        @w == 2 && !grep { $o{$_} } @w;
    }, 15), 'reloaded with a new key');
}
my $r = conn($t[1], '-sess_in', $sess);
is($r->{how}, 'Reused', 'a ticket under the old key still resumes')
    or diag($r->{out});
my $sess2 = "$dir/sess2.pem";
my $new = conn($t[1], '-sess_out', $sess2);
$r = conn($t[0], '-sess_in', $sess2);
is($r->{how}, 'Reused', 'a ticket under the new key from B resumes on A')
    or diag($r->{out});

$_->no_alerts for @t;
$_->stop for @t;

# bad lines
my $short = "$dir/short.key";
system("openssl rand 48 > '$short'");
for my $bad ([$short, qr/is not 80 bytes/], ["$k1 $k2 $k3", qr/two files at most/],
             ["$dir/none", qr/cannot open/]) {
    my ($v, $re) = @$bad;
    (my $text = conf_with($v)) =~ s/%%(\w+)%%/$1 eq 'PORT' ? $t[0]->port : $dir/ge;
    my $file = "$dir/bad.conf";
    FastdTest::spew($file, $text);
    my $line = FastdTest::line_of($text, qr/^ssl_session_ticket_key/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    ok($rc != 0 && $out =~ $re && $out =~ /bad\.conf:$line\b/,
       "bad: $re at bad.conf:$line") or diag($out);
}

done_testing();
