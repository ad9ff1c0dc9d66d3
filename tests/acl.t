#!/usr/bin/perl
# allow/deny: deny all, allow 127.0.0.1, first match wins, CIDR, IPv6
# rules (not matching an IPv4 client), inheritance from [server], a
# location's own rules replacing it, and rewrite into a denied location.
# A malformed rule (a signed or spaced prefix length, host bits below the
# prefix) is a config error naming file:line, never a rule that allows.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $locations = <<'EOF';
[location /closed]
handler = plaintext
deny = all

[location /mine]
handler = plaintext
allow = 127.0.0.1
deny = all

[location /order-deny-first]
handler = plaintext
deny = 127.0.0.0/8
allow = all

[location /order-allow-first]
handler = plaintext
allow = 127.0.0.0/8
deny = 127.0.0.1

[location /other-net]
handler = plaintext
allow = 10.0.0.0/8
deny = all

[location /cidr]
handler = plaintext
allow = 127.0.0.0/8
deny = all

[location /mapped]
handler = plaintext
allow = ::ffff:127.0.0.0/104
deny = all

[location /v6]
handler = plaintext
allow = ::1
allow = 2001:db8::/32
deny = all

[location /v6-deny]
handler = plaintext
deny = ::/0
allow = all

[location /inherit]
handler = plaintext

[location /sneak]
rewrite = ^/sneak$ /closed last

EOF

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server    => { deny => '192.0.2.0/24' },
    locations => $locations,
));
$t->start;

sub st { my $r = $t->get($_[0]); return $r ? $r->status : 0 }

is(st('/closed'), 403, 'deny = all: 403');
like($t->get('/closed')->body, qr/403 Forbidden/, '403 error page');
is(st('/mine'), 200, 'allow = 127.0.0.1 before deny all: 200');
is(st('/order-deny-first'), 403, 'first match wins: deny 127/8 then allow');
is(st('/order-allow-first'), 200, 'first match wins: allow 127/8 then deny');
is(st('/other-net'), 403, 'a client outside the allowed net: 403');
is(st('/cidr'), 200, 'allow = 127.0.0.0/8 lets 127.0.0.1 in');
is(st('/mapped'), 200, 'an IPv4-mapped IPv6 rule matches an IPv4 client');
is(st('/v6'), 403, 'IPv6 rules do not match an IPv4 client');
is(st('/v6-deny'), 200, 'deny ::/0 does not match an IPv4 client');
is(st('/inherit'), 200, '[server] rules inherited (not matching: 200)');
is(st('/sneak'), 403, 'rewrite last into a denied location: 403');
is(st('/plaintext'), 200, 'locations without rules: 200');

# --- [server] deny all, a location allows ----------------------------------
my $t2 = FastdTest->new(conf => FastdTest::base_conf(
    server    => { deny => 'all' },
    locations => "[location /open]\nhandler = plaintext\nallow = all\n\n",
));
$t2->start;
is($t2->get('/plaintext')->status, 403, '[server] deny = all applies to '
   . 'locations without rules');
is($t2->get('/open')->status, 200, 'a location\'s own rules replace the '
   . 'server\'s');
is($t2->get('/nothing-here')->status, 403, 'and to the server\'s implicit '
   . 'location');

# --- an IPv6 client --------------------------------------------------------
SKIP: {
    eval { require IO::Socket::IP; 1 } or skip('no IO::Socket::IP', 5);
    IO::Socket::IP->new(LocalHost => '::1', LocalPort => 0, Listen => 1)
        or skip('no IPv6 loopback', 5);
    my $v6locs = join "\n",
        "[location /v6]\nhandler = plaintext\nallow = ::1\ndeny = all\n",
        "[location /v6net]\nhandler = plaintext\nallow = 2001:db8::/32\n"
            . "deny = all\n",
        "[location /v4only]\nhandler = plaintext\nallow = 127.0.0.1\n"
            . "deny = all\n",
        "[location /v6all]\nhandler = plaintext\ndeny = ::/0\nallow = all\n";
    my $t3 = FastdTest->new(conf => FastdTest::base_conf(
        server => { listen => '[::1]:%%PORT%%' }, locations => $v6locs));
    $t3->start({ nowait => 1 });
    my $get6 = sub {
        my ($path) = @_;
        my $s = IO::Socket::IP->new(PeerHost => '::1',
                                    PeerPort => $t3->port, Timeout => 5)
            or return 0;
        print $s "GET $path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        local $/;
        my $resp = <$s> // '';
        return $resp =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
    };
    FastdTest::wait_for(sub { $get6->('/v6') }, 10);
    is($get6->('/v6'), 200, 'IPv6 client: allow = ::1');
    is($get6->('/v6net'), 403, 'IPv6 client outside 2001:db8::/32: 403');
    is($get6->('/v4only'), 403, 'IPv4 rules do not match an IPv6 client');
    is($get6->('/v6all'), 403, 'deny = ::/0 matches an IPv6 client');
    $t3->stop;
    $t3->no_alerts;
}

# --- the typo that allowed everyone ------------------------------------------
# allow = 10.0.0.0/-0 was read as 10.0.0.0/0 (strtol takes the sign), so
# "deny = all" after it denied nobody. It must not start, and no client of
# an outside network may get through.
{
    my $conf = FastdTest::base_conf(locations =>
        "[location /private]\nhandler = plaintext\nallow = 10.0.0.0/-0\n"
      . "deny = all\n\n");
    my $t4 = FastdTest->new(conf => $conf);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t4->conf_file);
    isnt($rc, 0, 'allow = 10.0.0.0/-0: fastd -t fails');
    my $line = 0;
    my @l = split /\n/, $t4->subst($conf);
    for my $i (0 .. $#l) { $line = $i + 1 if $l[$i] =~ m{^allow = 10\.0\.0\.0/-0} }
    like($out, qr/\Q${\ $t4->conf_file}\E:$line: allow: bad prefix length/,
         '... naming file:line') or diag($out);
    # and if it starts anyway (it must not), a client outside 10/8 is denied
    if ($rc == 0) {
        $t4->start;
        is($t4->get('/private')->status, 403,
           '127.0.0.1 is not in 10.0.0.0/8: 403');
        $t4->stop;
    }
}

# --- config errors -----------------------------------------------------------
# each value is refused by -t with file:line; none becomes a rule
for my $bad ('10.0.0.0/33', 'not-an-ip', '::1/129', '10.0.0.1/x',
             '10.0.0.0/-0', '10.0.0.0/+8', '10.0.0.0/ 8', '10.0.0.0 /8',
             '10.0.0.0/8 x', '1.2.3.4/', '/8', '10.0.0.0/8/8', '10.0.0.0//8',
             '010.0.0.0/8', '10.0.0/8', '10.0.0.0/0x8', '10.0.0.0/99999999999',
             '::/-0', '2001:db8::/ 32', '10.1.2.3/8', '10.0.0.1/0',
             '2001:db8::1/32', 'ALL', 'all 10.0.0.0/8', '"10.0.0.0/8"') {
    my $path = $t->write_conf(FastdTest::base_conf(
        locations => "[location /x]\n\ndeny = $bad\n"), 'bad.conf');
    my $line = 0;
    my @l = split /\n/, $t->subst(FastdTest::base_conf(
        locations => "[location /x]\n\ndeny = $bad\n"));
    for my $i (0 .. $#l) { $line = $i + 1 if $l[$i] eq "deny = $bad" }
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "deny = $bad is a config error");
    like($out, qr/bad\.conf:$line: deny: /, '... naming file:line')
        or diag($out);
}
like((FastdTest::run_fastd('-t', '-c', $t->write_conf(FastdTest::base_conf(
        locations => "[location /x]\nallow = 10.1.2.3/8\n"), 'bad.conf')))[1],
     qr{write 10\.0\.0\.0/8 for the network or 10\.1\.2\.3 for the one},
     'host bits below the prefix: the error says what to write');
# the forms that are fine stay fine
for my $good ('10.0.0.0/8', '10.0.0.0/08', '0.0.0.0/0', '10.1.2.3/32',
              '10.1.2.3', '::/0', '::1', '2001:db8::/32', 'all', ' 10.0.0.0/8 ') {
    my $path = $t->write_conf(FastdTest::base_conf(
        locations => "[location /x]\ndeny = $good\n"), 'good.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    is($rc, 0, "deny = $good is accepted") or diag($out);
}

$t->stop;
$t2->stop;
$t->no_alerts;
$t2->no_alerts;
done_testing;
