#!/usr/bin/perl
# handler = fortunes: TechEmpower Fortunes on SQLite ([database world]
# url = sqlite:..., the techempower module on the public API). The
# database is created from conf/world.sqlite.sql on first start; the page is compared byte for byte
# with the benchmark's expected output (13 rows sorted by message, escaped,
# UTF-8 intact); concurrent requests; the engine's own dispatch
# (inline_completions = off); a database without the table is a config
# error.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Select;
use JSON::PP;
use Test::More;
use Time::HiRes qw(time);

# The benchmark's rows, as bytes (UTF-8).
my @rows = (
    [1,  'fortune: No such file or directory'],
    [2,  "A computer scientist is someone who fixes things that aren't broken."],
    [3,  'After enough decimal places, nobody gives a damn.'],
    [4,  'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'],
    [5,  'A computer program does what you tell it to do, not what you want it to do.'],
    [6,  "Emacs is a nice operating system, but I prefer UNIX. \xe2\x80\x94 Tom Christaensen"],
    [7,  'Any program that runs right is obsolete.'],
    [8,  "A list is only as strong as its weakest link. \xe2\x80\x94 Donald Knuth"],
    [9,  'Feature: A bug with seniority.'],
    [10, 'Computers make very fast, very accurate mistakes.'],
    [11, '<script>alert("This should not be displayed in a browser alert box.");</script>'],
    [12, "\xe3\x83\x95\xe3\x83\xac\xe3\x83\xbc\xe3\x83\xa0\xe3\x83\xaf\xe3\x83\xbc"
       . "\xe3\x82\xaf\xe3\x81\xae\xe3\x83\x99\xe3\x83\xb3\xe3\x83\x81\xe3\x83\x9e"
       . "\xe3\x83\xbc\xe3\x82\xaf"],
    [0,  'Additional fortune added at request time.'],
);

sub esc {
    my ($s) = @_;
    $s =~ s/&/&amp;/g;
    $s =~ s/</&lt;/g;
    $s =~ s/>/&gt;/g;
    $s =~ s/"/&quot;/g;
    $s =~ s/'/&#39;/g;
    return $s;
}

my $expected = '<!DOCTYPE html><html><head><title>Fortunes</title></head><body>'
    . '<table><tr><th>id</th><th>message</th></tr>'
    . join('', map { "<tr><td>$_->[0]</td><td>" . esc($_->[1]) . '</td></tr>' }
               sort { $a->[1] cmp $b->[1] } @rows)
    . '</table></body></html>';

my $init = FastdTest::root() . '/conf/world.sqlite.sql';
sub database { my ($url) = @_; "[database world]\nurl = sqlite:$url\ninit = $init\n\n" }
my $locations = <<'END' . database('%%DIR%%/data/new/world.db');
[location = /fortunes]
handler = fortunes

[location = /status]
handler = status

END

my $t = FastdTest->new(conf => FastdTest::base_conf(locations => $locations));
my $db = $t->dir . '/data/new/world.db';
ok(!-e $db, 'no database before the first start');
{
    # a configuration test has no side effect on disk
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
    is($rc, 0, '-t with a missing database passes') or diag($out);
    ok(!-e $t->dir . '/data', '-t created neither the database nor its directory');
    my $path = $t->write_conf(FastdTest::base_conf(
        locations => "[location = /f]\nhandler = fortunes\n\n"
                   . database('/etc/passwd/world.db')), 'nodir.conf');
    ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, '-t: a database that could not be created fails');
    like($out, qr{nodir\.conf:\d+: \[database world\]: /etc/passwd/world\.db cannot be created \(/etc/passwd: Not a directory\)},
         '... naming file:line and why');
}
$t->start;
ok(-s $db, 'first start created the database (and its directory)');
like($t->error_log . $t->stderr_log, qr/database world: \Q$db\E created from \Q$init\E/,
     'its creation is logged');

my $r = $t->get('/fortunes');
is($r && $r->status, 200, 'GET /fortunes: 200');
is($r && $r->header('content-type'), 'text/html; charset=utf-8',
   'Content-Type: text/html; charset=utf-8');
ok($r && $r->header('date') && $r->header('server')
   && $r->header('content-length') == length($r->body),
   'Server, Date and Content-Length present');
my $body = $r ? $r->body : '';
is($body, $expected, 'the page equals the expected page byte for byte');
my @ids = $body =~ m{<tr><td>(\d+)</td>}g;
is(scalar @ids, 13, '13 rows (12 + the one added at request time)');
my @msgs = $body =~ m{<td>\d+</td><td>(.*?)</td></tr>}g;
is_deeply(\@msgs, [sort @msgs], 'rows sorted by message (byte order)');
like($body, qr{<td>11</td><td>&lt;script&gt;alert\(&quot;This should not be displayed in a browser alert box\.&quot;\);&lt;/script&gt;</td>},
     'the <script> row is escaped');
unlike($body, qr/<script>/, 'no raw <script> in the page');
like($body, qr{<td>12</td><td>\xe3\x83\x95\xe3\x83\xac\xe3\x83\xbc\xe3\x83\xa0},
     'the Japanese row is intact UTF-8');
like($body, qr{<td>0</td><td>Additional fortune added at request time\.</td>},
     'the request-time row is there');
like($body, qr{aren&#39;t broken}, "the apostrophe is escaped");

# HEAD and a wrong method
$r = $t->http("HEAD /fortunes HTTP/1.1\r\nHost: x\r\n\r\n");
ok($r && $r->status == 200 && $r->body eq ''
   && $r->header('content-length') == length($expected), 'HEAD: length, no body');
$r = $t->http("POST /fortunes HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
is($r && $r->status, 405, 'POST /fortunes: 405');

# concurrent: 20 connections x 5 keep-alive requests
{
    my @c = map { $t->connect } 1 .. 20;
    my $req = "GET /fortunes HTTP/1.1\r\nHost: localhost\r\n\r\n";
    $_->send($req x 5) for @c;
    my ($good, $n) = (0, 0);
    for my $c (@c) {
        for my $x ($c->read_responses(5, timeout => 10)) {
            $n++;
            $good++ if $x->{status} == 200 && $x->{body} eq $expected;
        }
        $c->close;
    }
    is($n, 100, 'concurrent: 100 responses');
    is($good, 100, 'concurrent: all 100 are the expected page');
}

# every query went through the pool: in batches, a loop turn's in one job
{
    my $s = eval { decode_json($t->get('/status')->body) };
    my $p = $s && $s->{modules}{offload}[0];
    my ($d) = grep { $_->{database} eq 'world' } @{ $s->{modules}{database} // [] };
    ok($p && $p->{completed} >= 1, 'the pool ran them (offload completed)')
        or diag(explain $p);
    ok($d && $d->{queries} >= 102 && !$d->{errors_other}, '102 queries of database world, no error')
        or diag(explain $d);
}

# a restart keeps the existing database
my $mtime = (stat $db)[9];
$t->stop;
$t->start;
$r = $t->get('/fortunes');
is($r && $r->body, $expected, 'restart: the same page from the kept database');
is((stat $db)[9], $mtime, 'restart: the database was not rewritten');
$t->stop;
$t->no_alerts;

# inline_completions = off: the engine dispatches the handler itself
{
    my $t2 = FastdTest->new(conf => FastdTest::base_conf(
        http      => { inline_completions => 'off' },
        locations => "[location = /fortunes]\nhandler = fortunes\n\n"
                   . database($db)));
    $t2->start;
    my $ok = 0;
    for (1 .. 10) {
        my $x = $t2->get('/fortunes');
        $ok++ if $x && $x->status == 200 && $x->body eq $expected;
    }
    is($ok, 10, 'inline_completions = off: the same page');
    $t2->stop;
    $t2->no_alerts;
}

# the key of before databases: refused, saying what to write now
{
    my $path = $t->write_conf(FastdTest::base_conf(
        locations => "[location = /f]\nhandler = fortunes\nfortunes_db = x.db\n"), 'old.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/old\.conf:\d+: "fortunes_db" is not a key here any more: use "\[database world\] url = sqlite:PATH"/,
         'fortunes_db: refused, with the way to say it now');
}

# a database without the fortune table is a configuration error
{
    my $bad = $t->dir . '/empty.db';
    FastdTest::spew($bad, '');
    my $path = $t->write_conf(FastdTest::base_conf(
        locations => "[location = /f]\nhandler = fortunes\n\n"
                   . "[database world]\nurl = sqlite:$bad\n"),
        'bad.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, 'a database without the table: -t fails');
    like($out, qr/\[database world\]: statement te_\w+: no such table: (World|Fortune)/,
         'and says why');
}

done_testing;
