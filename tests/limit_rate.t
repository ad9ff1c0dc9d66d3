#!/usr/bin/perl
# limit_rate and limit_rate_after: a response leaves at the rate once its
# first limit_rate_after bytes have, whole and in order; per request (the
# next request on a kept-alive connection, to a location without a limit,
# is not slowed), for static files (sendfile), proxied (streamed) bodies
# and HTTP/2 streams (each stream its own rate); other clients are served
# meanwhile; bad values are config errors naming file:line.
#
# Durations are checked from below (a limited transfer cannot be faster
# than its rate allows, however idle the machine); from above only where
# the limit is off, and then with room for a busy machine.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Digest::MD5 qw(md5_hex);
use File::Path qw(make_path);
use Test::More;
use Time::HiRes qw(time);

my $size = 300 * 1024;
my $blob = join '', map { sprintf "%07d %s\n", $_, 'r' x ($_ % 53) } 1 .. 20000;
$blob = substr($blob x 2, 0, $size);

my $be = Backend->new(handler => sub {
    my ($req) = @_;
    return Backend::response(200, $blob, 'Content-Type' => 'text/plain');
});

my $t = FastdTest->new;
my $h2port = $t->another_port;
$t->write_conf(FastdTest::base_conf(
    server => { root => '%%DIR%%/www' },
    locations => <<"L",
[location /slow/]
alias = %%DIR%%/www/
limit_rate = 100k

[location /after/]
alias = %%DIR%%/www/
limit_rate = 100k
limit_rate_after = 200k

[location /free/]
alias = %%DIR%%/www/

[location /p/]
handler = proxy
pass = http://127.0.0.1:@{[$be->port]}/
limit_rate = 150k

L
    extra => "[server]\nlisten = 127.0.0.1:$h2port http2\n"
           . "root = %%DIR%%/www\nlimit_rate = 100k\n\n"));
make_path($t->dir . '/www');
FastdTest::spew($t->dir . '/www/blob.txt', $blob);
$t->start;
my $port = $t->port;

# curl over one connection: [seconds, http code, md5 of the body] per URL
my $nout = 0;
sub fetch {
    my (@urls) = @_;
    my @files = map { $t->dir . '/out' . $nout++ } @urls;
    my @args = map { ('-o', $files[$_], $urls[$_]) } 0 .. $#urls;
    open my $fh, '-|', 'curl', '-s', '--max-time', '60',
        '-w', '%{http_code} %{time_total}\n', @args or die "curl: $!";
    my @lines = <$fh>;
    close $fh;
    return () unless @lines == @urls;
    return map {
        my ($code, $secs) = $lines[$_] =~ /^(\d+) ([\d.]+)$/;
        [$secs, $code, md5_hex(FastdTest::slurp($files[$_]) // '')]
    } 0 .. $#urls;
}

my $want = md5_hex($blob);
my ($r) = fetch("http://127.0.0.1:$port/slow/blob.txt");
ok($r, 'curl ran') or BAIL_OUT('no curl');
is($r->[1], 200, 'limited: 200');
is($r->[2], $want, 'limited: the body whole and in order');
# 300 KB at 100 KB/s, the first 10 KB at once: 2.9 s at the least
cmp_ok($r->[0], '>=', 2.4, "limited: 300 KB at 100k took $r->[0] s (>= 2.4)");

($r) = fetch("http://127.0.0.1:$port/after/blob.txt");
is($r->[2], $want, 'limit_rate_after: the body whole');
# 200 KB at once, the 100 KB left at 100 KB/s: 0.9 s at the least
cmp_ok($r->[0], '>=', 0.7, "limit_rate_after: $r->[0] s (>= 0.7)");

# one kept-alive connection: a limited response, then a free one
my @two = fetch("http://127.0.0.1:$port/slow/blob.txt",
                "http://127.0.0.1:$port/free/blob.txt");
is(scalar @two, 2, 'two responses on one connection');
is($two[1][2], $want, 'the second, unlimited, whole');
cmp_ok($two[0][0], '>=', 2.4, 'the first limited');
# at full speed this is milliseconds; 2 s is room for a busy machine
# (curl's time_total is each transfer's own)
cmp_ok($two[1][0], '<', 2,
       "the next request on the connection is not limited ($two[1][0] s)");

# others are served while a limited download runs
my $pid = fork // die;
if ($pid == 0) {
    exec 'curl', '-s', '--max-time', '60', '-o', '/dev/null',
         "http://127.0.0.1:$port/slow/blob.txt";
    exit 127;
}
my $t0 = time;
my $pl = $t->get('/plaintext');
is($pl && $pl->status, 200, 'a request beside a limited download: 200');
cmp_ok(time - $t0, '<', 2, 'and not held up by it');
waitpid($pid, 0);
is($?, 0, 'the limited download completed');

# a proxied body (streamed from the upstream)
($r) = fetch("http://127.0.0.1:$port/p/x");
is($r->[1], 200, 'proxy: 200');
is($r->[2], $want, 'proxy: the body whole');
# 300 KB at 150 KB/s, 15 KB at once: 1.9 s at the least
cmp_ok($r->[0], '>=', 1.5, "proxy limited: $r->[0] s (>= 1.5)");

# HTTP/2: two streams at once, each at its own rate
SKIP: {
    my $nghttp = (grep { -x } qw(/usr/bin/nghttp))[0];
    skip 'nghttp (nghttp2-client) is not installed', 2 unless $nghttp;
    my $t1 = time;
    my $out = `$nghttp -s http://127.0.0.1:$h2port/blob.txt http://127.0.0.1:$h2port/blob.txt?2 2>&1`;
    my $secs = time - $t1;
    # nghttp -s: "id responseEnd requestStart process code size path"
    my @rows = $out =~ /^\s*\d+\s+\S+\s+\S+\s+\S+\s+(\d+)\s+(\S+)\s+\/blob/mg;
    is("@rows", '200 300K 200 300K', 'h2: both streams 200 with 300 KB')
        or diag($out);
    # each stream 2.9 s at least; side by side, not one after the other
    # (5.8 s)
    cmp_ok($secs, '>=', 2.4, "h2: limited per stream ($secs s)");
    cmp_ok($secs, '<', 5.5, 'h2: the streams ran side by side');
}

$t->stop;
$t->no_alerts;

# --- config errors -----------------------------------------------------------
for my $bad ('limit_rate = fast', 'limit_rate_after = -1') {
    my $path = $t->write_conf(FastdTest::base_conf(
        locations => "[location /x]\n$bad\n"), 'bad.conf');
    my $line = FastdTest::line_of(FastdTest::slurp($path), qr/^\Q$bad\E$/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "\"$bad\" fails the config test");
    like($out, qr/bad\.conf:$line:/, "\"$bad\": the error names file:line")
        or diag($out);
}

done_testing;
