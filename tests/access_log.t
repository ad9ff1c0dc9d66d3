#!/usr/bin/perl
# access_log: the combined line, JSON lines, a custom log_format, escaping,
# access_log = off per location, buffering (flushed within the interval,
# unbuffered when buffer=0, at exit), and log rotation with two workers:
# rename, reopen (fastd -s reopen, then SIGUSR1), no line lost.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time);

sub lines {
    my ($path) = @_;
    my $s = FastdTest::slurp($path) // '';
    return split /\n/, $s;
}

# --- a body that arrives after the header ----------------------------------------
# The read buffer is reused for the body; the logged request line and Host
# must still be the request's own (the header is copied out first).
sub delayed_body_line {
    my ($t, $dir) = @_;
    my $body = 'Z' x 3000;
    my $c = $t->connect;
    $c->send("POST /late/x?x=1 HTTP/1.1\r\nHost: late.example\r\n"
             . "Content-Length: " . length($body) . "\r\n\r\n");
    select(undef, undef, undef, 0.2);
    $c->send($body);
    my $r = $c->read_response;
    is($r && $r->{status}, 200, 'POST with a late body answered');
    my @l;
    FastdTest::wait_for(sub { @l = grep { /late/ } lines("$dir/late.log"); @l }, 5);
    like($l[0] // '', qr{^200\|POST\|/late/x\|x=1\|-\|[\d.]+\|-\|late\.example\|13$},
         'the log line names the request, not the body bytes') or diag($l[0]);
}

# --- formats -----------------------------------------------------------------
my $locations = <<'EOF';
[location /j/]
handler = json
access_log = %%DIR%%/json.log format=json buffer=0

[location /custom/]
handler = plaintext
access_log = %%DIR%%/custom.log format=mine buffer=0

[location /quiet/]
handler = plaintext
access_log = off

[location /late/]
handler = plaintext
access_log = %%DIR%%/late.log format=mine buffer=0

[location /h/]
handler = plaintext
access_log = %%DIR%%/hostile.log format=hostile buffer=4k flush=1h

[location /hj/]
handler = plaintext
access_log = %%DIR%%/hostile.json format=hostilej buffer=0

EOF
my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { log_format => [
        'mine $status|$method|$uri|$args|$http_x_test|$request_time|'
        . '$upstream_addr|$host|$body_bytes_sent',
        'hostile $host|$request|$uri|$http_user_agent|$status',
        'hostilej json $host $request $uri $http_user_agent' ] },
    server => { access_log => '%%DIR%%/access.log flush=1s' },
    locations => $locations,
));
my $dir = $t->dir;
$t->start;

my $r = $t->get('/plaintext?a=1', Referer => 'http://ref/x',
                'User-Agent' => 'test-agent/1.0');
is($r->status, 200, 'a request to log');
delayed_body_line($t, $dir);
my $t0 = time;
is(-s "$dir/access.log" // 0, 0, 'the line waits in the buffer');
my @l = ();
FastdTest::wait_for(sub { @l = lines("$dir/access.log"); @l }, 5);
my $after = time - $t0;
is(scalar @l, 1, 'one line after the flush interval');
ok($after < 3, sprintf('flushed %.2f s after the request (flush=1s)',
                       $after));
like($l[0], qr{^127\.0\.0\.1 - - \[\d\d/[A-Z][a-z][a-z]/\d{4}:\d\d:\d\d:\d\d [-+]\d{4}\] "GET /plaintext\?a=1 HTTP/1\.1" 200 13 "http://ref/x" "test-agent/1\.0"$},
     'combined format') or diag($l[0]);

$t->get('/quiet/x');
$t->get('/plaintext', 'User-Agent' => "q\"uote\\back");
$t->http("GET /nothing-here HTTP/1.0\r\n\r\n");
FastdTest::wait_for(sub { @l = lines("$dir/access.log"); @l >= 3 }, 5);
is(scalar @l, 3, 'access_log = off in a location: not logged');
like($l[1], qr{"q\\x22uote\\x5Cback"$}, '" and \\ escaped as \\xHH')
    or diag($l[1]);
like($l[2], qr{"GET /nothing-here HTTP/1\.0" 404 \d+ "-" "-"$},
     'HTTP/1.0, a 404, absent headers as "-"') or diag($l[2]);

# JSON
$t->get('/j/a?b=c', 'User-Agent' => "ua\t\"x\xc3\xa9");
@l = lines("$dir/json.log");
is(scalar @l, 1, 'buffer=0: the line is written before the response');
my $o = eval { JSON::PP->new->decode($l[0]) };
ok($o, 'the JSON line decodes') or diag($l[0]);
is($o->{status}, 200, 'json: status is a number');
is($o->{request}, 'GET /j/a?b=c HTTP/1.1', 'json: request');
is($o->{remote_addr}, '127.0.0.1', 'json: remote_addr');
is($o->{http_user_agent}, "ua\t\"x\xc3\xa9", 'json: a tab, a quote and '
   . 'bytes over 0x7f escaped, one byte per \\u00XX');
is($o->{uri}, '/j/a', 'json: uri');
is($o->{args}, 'b=c', 'json: args');
is($o->{upstream_addr}, '-', 'json: no upstream: "-"');
like($l[0], qr/"request_time":\d+\.\d{3}[,}]/,
     'json: request_time a number, s.mmm');
ok(exists $o->{$_}, "json: $_") for qw(time_local body_bytes_sent
    http_referer upstream_status upstream_response_time host method);

# custom
$t->http("POST /custom/p?x=1 HTTP/1.1\r\nHost: Some.Host:99\r\n"
         . "X-Test: hello\r\nContent-Length: 3\r\n\r\nabc");
@l = lines("$dir/custom.log");
like($l[0] // '', qr{^200\|POST\|/custom/p\|x=1\|hello\|\d+\.\d{3}\|-\|some\.host\|13$},
     'custom log_format with $http_x_test and $host') or diag($l[0]);

# --- hostile input -------------------------------------------------------------
# Long values (a 7000-byte Host, a target near the header limit whose
# decoded $uri escapes to 10k) and bytes to escape, checked byte for byte;
# lines larger than the 4k buffer are written alone, in order.
sub esc_text {
    my ($s) = @_;
    $s =~ s{([\x00-\x1f\x7f-\xff"\\])}{sprintf('\\x%02X', ord $1)}ge;
    return $s;
}
sub esc_json {
    my ($s) = @_;
    $s =~ s{(["\\])}{\\$1}g;
    $s =~ s{([\x00-\x1f\x7f-\xff])}{sprintf('\\u00%02X', ord $1)}ge;
    return $s;
}
{
    my $host = 'H' x 7000;
    my $ua = "ua\t\x80\xff\"\\" . join("", map { chr } 0x20 .. 0x7e, 0x80 .. 0xff);
    # every byte but NUL and '/', percent-encoded, at every alignment
    my @all = grep { $_ != 0x2f } 1 .. 255;
    my $allq = join('', map { sprintf('%%%02x', $_) } @all);
    my $all = join('', map { chr } @all);
    # [target after /h, Host, the decoded $uri after /h, the logged $host]
    my @req = (['/' . ('%7f' x 2500), 'a', '/' . ("\x7f" x 2500), 'a'],
               ['/x%01%22%5c%0d?q=%0a', 'b.example', "/x\x01\"\\\r",
                'b.example'],
               ['/y', $host, '/y', lc $host],
               ["/z$allq", 'Mixed.Case:8080', "/z$all", 'mixed.case'],
               ["/$allq$allq", 'c', "/$all$all", 'c']);
    for my $q (@req) {
        my $r = $t->http("GET /h$q->[0] HTTP/1.1\r\nHost: $q->[1]\r\n"
                         . "User-Agent: $ua\r\n\r\n");
        is($r && $r->status, 200, 'hostile request ' . length($q->[0]));
    }
    $t->signal('USR1'); # reopen: flushes the buffered lines
    my @got;
    FastdTest::wait_for(sub { @got = lines("$dir/hostile.log");
                              @got >= @req }, 5);
    is(scalar @got, scalar @req, 'a line for each hostile request');
    for my $i (0 .. $#req) {
        my $q = $req[$i];
        my $want = esc_text($q->[3]) . "|GET /h$q->[0] HTTP/1.1|"
            . esc_text("/h$q->[2]") . '|' . esc_text($ua) . '|200';
        is(length($got[$i] // ''), length($want),
           "line $i: length " . length($want));
        ok(($got[$i] // '') eq $want, "line $i: the exact bytes")
            or diag(substr($got[$i] // '', 0, 300));
    }

    # lines of every length over a range, through the 4k buffer: the
    # buffer's end falls at every place in a line, escaped or not
    my $before = () = lines("$dir/hostile.log");
    my @many;
    for my $k (1 .. 60) {
        my $path = '/m' . ('%22' x $k) . ('u' x ($k % 7));
        $t->http("GET /h$path HTTP/1.1\r\nHost: m\r\n"
                 . "User-Agent: $ua\r\n\r\n");
        push @many, "m|GET /h$path HTTP/1.1|"
            . esc_text("/h/m" . ('"' x $k) . ('u' x ($k % 7))) . '|'
            . esc_text($ua) . '|200';
    }
    $t->signal('USR1');
    FastdTest::wait_for(sub { @got = lines("$dir/hostile.log");
                              @got >= $before + 60 }, 5);
    my @mine = @got[$before .. $#got];
    is(scalar @mine, 60, '60 lines of growing length');
    is(scalar(grep { ($mine[$_] // '') ne $many[$_] } 0 .. 59), 0,
       '... each exact, wherever the buffer filled');

    for my $q (@req) {
        $t->http("GET /hj$q->[0] HTTP/1.1\r\nHost: $q->[1]\r\n"
                 . "User-Agent: $ua\r\n\r\n");
    }
    @got = lines("$dir/hostile.json");
    is(scalar @got, scalar @req, 'a JSON line for each hostile request');
    for my $i (0 .. $#req) {
        my $q = $req[$i];
        my $want = '{"host":"' . esc_json($q->[3]) . '","request":"'
            . esc_json("GET /hj$q->[0] HTTP/1.1") . '","uri":"'
            . esc_json("/hj$q->[2]") . '","http_user_agent":"'
            . esc_json($ua) . '"}';
        ok(($got[$i] // '') eq $want, "json line $i: the exact bytes")
            or diag(substr($got[$i] // '', 0, 300));
        my $o = eval { JSON::PP->new->decode($got[$i]) };
        is($o && $o->{uri}, "/hj$q->[2]", "json line $i decodes to \$uri");
    }
}

# --- flushed at exit --------------------------------------------------------
{
    my $t2 = FastdTest->new(conf => FastdTest::base_conf(
        server => { access_log => '%%DIR%%/exit.log buffer=1m flush=1h' }));
    $t2->start;
    $t2->get("/plaintext?n=$_") for 1 .. 5;
    is(scalar(lines($t2->dir . '/exit.log')), 0, 'buffered (flush=1h)');
    $t2->signal('QUIT');
    $t2->wait_exit(10);
    is(scalar(lines($t2->dir . '/exit.log')), 5, 'written at worker exit');
    $t2->no_alerts;
}

# --- rotation ---------------------------------------------------------------
{
    my $t3 = FastdTest->new(conf => FastdTest::base_conf(
        main   => { workers => 2 },
        server => { access_log => '%%DIR%%/rot.log buffer=64k flush=100ms' },
    ));
    my $log = $t3->dir . '/rot.log';
    $t3->start;
    my $n = 0;
    my $burst = sub { $t3->get("/plaintext?id=" . ++$n) for 1 .. $_[0] };

    $burst->(40);
    rename $log, "$log.1" or die "rename: $!";
    $burst->(40);      # still going to the renamed file, or buffered
    my ($rc, $out) = FastdTest::run_fastd('-s', 'reopen', '-c',
                                          $t3->conf_file);
    is($rc, 0, 'fastd -s reopen') or diag($out);
    ok(FastdTest::wait_for(sub { -e $log }, 5), 'the log is created again');
    $burst->(40);

    rename $log, "$log.2" or die "rename: $!";
    $burst->(40);
    $t3->signal('USR1');
    ok(FastdTest::wait_for(sub { -e $log }, 5), 'SIGUSR1: created again');
    $burst->(40);

    $t3->stop;         # flushes what is buffered
    my %seen;
    my $bad = 0;
    for my $f ("$log.1", "$log.2", $log) {
        for (lines($f)) {
            if (m{"GET /plaintext\?id=(\d+) HTTP/1\.1" 200 }) { $seen{$1}++ }
            else { $bad++ }
        }
    }
    is($bad, 0, 'every line is whole');
    is(scalar(keys %seen), $n, "all $n requests logged across the files");
    ok(!grep({ $_ != 1 } values %seen), 'none twice');
    ok(scalar(lines($log)) > 0, 'the newest file has lines');
    ok(scalar(lines("$log.1")) >= 40, 'lines before the reopen stay in the '
       . 'renamed file');
    $t3->no_alerts;
}

# --- config errors -----------------------------------------------------------
for my $case (['/nonexistent/dir/a.log', qr/directory "\/nonexistent\/dir" does not exist/],
              ['%%DIR%%/a.log format=nosuch', qr/unknown log_format "nosuch"/],
              ['%%DIR%%/a.log buffer=huge', qr/bad buffer size/],
              ['%%DIR%%/a.log color=red', qr/unknown option "color=red"/]) {
    my $path = $t->write_conf(FastdTest::base_conf(
        server => { access_log => $case->[0] }), 'bad.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "access_log = $case->[0]: config error");
    like($out, $case->[1], '... saying why') or diag($out);
}
{
    my $path = $t->write_conf(FastdTest::base_conf(
        http => { log_format => 'x $nosuch' }), 'bad.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/bad\.conf:\d+: log_format: unknown variable "\$nosuch"/,
         'log_format with an unknown variable') or diag($out);
}

$t->stop;
$t->no_alerts;
done_testing;
