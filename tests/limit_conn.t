#!/usr/bin/perl
# limit_conn: requests in progress per key, shared by the workers. Past
# the number: limit_conn_status; idle keep-alive connections do not count,
# HTTP/2 streams count one each; a count comes back when its request
# ends, also when the client left mid-request; several zones in one
# location give back what the first took when the second refuses; a
# dry run lets everything through; $limit_conn_status; configuration
# errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use IO::Select;
use Test::More;

my $slow = Backend->new(handler => sub {
    my ($req) = @_;
    # long: held until its client leaves (20 s: past any busy machine's
    # delay between the requests of the test that uses it)
    select(undef, undef, undef, $req->{target} =~ /long/ ? 20 : 0.8);
    return Backend::response(200, "slow\n");
});
my $sp = $slow->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    server => { listen => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% http2",
                add_header => 'X-LC $limit_conn_status always' },
    locations => <<"EOF",
[location /slow/]
limit_conn = addr 2
handler = proxy
pass = http://127.0.0.1:$sp

[location /keyed/]
limit_conn = bykey 2
limit_conn_status = 429
handler = proxy
pass = http://127.0.0.1:$sp

[location /fast/]
limit_conn = addr 2
handler = plaintext

[location /two/]
limit_conn = bykey 5
limit_conn = addr 1
handler = proxy
pass = http://127.0.0.1:$sp

[location /dry/]
limit_conn = addr 1
limit_conn_dry_run = on
handler = proxy
pass = http://127.0.0.1:$sp

[location /off/]
limit_conn = off
handler = plaintext

[location = /status]
handler = status

EOF
    extra => "[limit_conn addr]\n\n[limit_conn bykey]\nkey = \$http_x_key\nsize = 64k\n\n"));
$t->start;

# n requests sent at once, each on its own connection; their statuses
sub at_once {
    my ($n, $path, %h) = @_;
    my @s;
    for (1 .. $n) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port)
            or die "connect: $!";
        print $s "GET $path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            . join('', map { "$_: $h{$_}\r\n" } sort keys %h) . "\r\n";
        push @s, $s;
    }
    my @st;
    for my $s (@s) {
        local $/;
        my $resp = <$s> // '';
        push @st, $resp =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
        close $s;
    }
    return join ',', sort @st;
}

is(at_once(4, '/slow/a'), '200,200,503,503', '4 at once, limit 2: two refused with 503');
is(at_once(2, '/slow/b'), '200,200', 'their counts came back: 2 more pass');
is(at_once(3, '/keyed/a', 'X-Key' => 'k1'), '200,200,429',
   'a key of a header, limit_conn_status = 429');
is(at_once(4, '/keyed/b'), '200,200,200,200', 'an empty key is not counted');
my $r = $t->get('/slow/c');
is($r->header('x-lc'), 'PASSED', '$limit_conn_status PASSED');

# idle keep-alive connections hold nothing
{
    my @idle;
    for (1 .. 3) {
        my $c = $t->connect;
        $c->send("GET /fast/ HTTP/1.1\r\nHost: x\r\n\r\n");
        my $resp = $c->read_response;
        is($resp && $resp->{status}, 200, "keep-alive connection $_: served");
        push @idle, $c;
    }
    is(at_once(2, '/slow/d'), '200,200', 'three idle keep-alive connections count nothing');
    $_->close for @idle;
}

# HTTP/2: every stream counts
SKIP: {
    skip 'no curl', 1 unless -x '/usr/bin/curl';
    my $u = "http://127.0.0.1:@{[$t->port2]}/slow/h2";
    my $out = `curl -s --http2-prior-knowledge -Z --parallel-immediate --parallel-max 4 -w '%{http_code}\\n' -o /dev/null $u -o /dev/null $u -o /dev/null $u -o /dev/null $u 2>&1`;
    my @codes = sort grep { /^\d+$/ } split /\n/, $out;
    is(join(',', @codes), '200,200,503,503', 'four streams at once: two refused')
        or diag $out;
}

# a client that leaves mid-request gives its count back
{
    my @s;
    # the backend's count so far: earlier sections' requests are in it,
    # and ">= 2" alone was true before these two reached it
    my $before = $slow->requests;
    for (1 .. 2) {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port) or die;
        print $s "GET /slow/long HTTP/1.1\r\nHost: x\r\n\r\n";
        push @s, $s;
    }
    ok(FastdTest::wait_for(sub { $slow->requests >= $before + 2 }, 5), 'two long requests in progress');
    is(at_once(1, '/slow/e'), '503', 'a third is refused');
    close $_ for @s;
    ok(FastdTest::wait_for(sub { $t->error_log =~ /client closed the connection while proxying.*\n.*client closed/s }, 5),
       'both clients left');
    is(at_once(2, '/slow/f'), '200,200', 'their counts came back at once');
}

# two zones: the second refuses, the first's count is given back
is(at_once(2, '/two/a', 'X-Key' => 'z'), '200,503', 'two zones: the second (1) refuses');
is(at_once(1, '/two/b', 'X-Key' => 'z'), '200', 'the first zone\'s count was given back');

# dry run
is(at_once(3, '/dry/a'), '200,200,200', 'dry run: all through');
like($t->error_log, qr/limiting connections, dry run, by zone "addr"/, '... and logged');
$r = $t->get('/off/');
is($r->status, 200, 'limit_conn = off');

# the figures
# the figures, of both workers together
ok(FastdTest::wait_for(sub {
       my $m = $t->get('/status?format=prometheus');
       $m && $m->body =~ /fastd_limit_conn_rejected_total\{zone="addr"\} ([0-9]+)/ && $1 >= 4
   }, 5), '/status counts the rejections');
$t->no_alerts;

# --- configuration errors --------------------------------------------------------
sub conf_error {
    my ($extra, $loc, $re, $name) = @_;
    my $d = tempdir(CLEANUP => 1);
    my $conf = FastdTest::base_conf(locations => $loc, extra => $extra);
    $conf =~ s/%%PORT%%/1/g;
    $conf =~ s/%%\w+%%/$d/g;
    FastdTest::spew("$d/fastd.conf", $conf);
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', "$d/fastd.conf");
    isnt($code, 0, "$name: -t fails");
    like($out, $re, "$name: the message") or diag $out;
}
conf_error('', "[location /x]\nlimit_conn = nosuch 1\n",
           qr/fastd\.conf:\d+: unknown limit_conn "nosuch"/, 'an unknown zone');
conf_error("[limit_conn a]\n", "[location /x]\nlimit_conn = a many\n",
           qr/fastd\.conf:\d+: limit_conn needs NAME NUMBER/, 'a bad number');
conf_error("[limit_conn a]\n", "[location /x]\nlimit_conn = a 1\nlimit_conn = a 2\n",
           qr/fastd\.conf:\d+: limit_conn "a" twice/, 'a zone twice');
conf_error("[limit_conn a]\nkey = \$nosuch\n", '',
           qr/fastd\.conf:\d+: key: unknown variable "\$nosuch"/, 'an unknown variable');

done_testing;
