#!/usr/bin/perl
# Routing: [server] by listen address and Host (exact, *.suffix, prefix.*,
# default), [location = /x], [location /prefix] (longest wins) and
# [location ~ regex] in nginx's order: exact, then regexes in file order
# over the longest prefix. Also every events.accept mode serves.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;
use File::Path qw(make_path);

my $conf = FastdTest::main_section() . <<'C';
[server]
listen = 127.0.0.1:%%PORT%%
server_name = default.test
root = %%DIR%%/default

[location = /exact]
root = %%DIR%%/exact

[location /p]
root = %%DIR%%/short

[location /p/longer]
root = %%DIR%%/long

[location ~ \.txt$]
root = %%DIR%%/regex1

[location ~* \.TXT$]
root = %%DIR%%/regex2

[location = /plain]
handler = plaintext

[location ^~ /stop]
root = %%DIR%%/stop

[server]
listen = 127.0.0.1:%%PORT%%
server_name = a.test www.a.test dot.test.
root = %%DIR%%/a

[server]
listen = 127.0.0.1:%%PORT%%
server_name = *.wild.test
root = %%DIR%%/wild

[server]
listen = 127.0.0.1:%%PORT%%
server_name = pre.*
root = %%DIR%%/pre

[server]
listen = 127.0.0.1:%%PORT2%%
root = %%DIR%%/second
C

my $t = FastdTest->new(conf => $conf);
my $d = $t->dir;
my %files = (
    'default/who'          => 'default',
    'default/p/x'          => 'default-p',
    'exact/exact'          => 'exact',
    'exact/exactly'        => 'exact-file-under-exact-root',
    'default/exactly'      => 'default-exactly',
    'short/p/x'            => 'short',
    'long/p/longer/x'      => 'long',
    'long/p/longer/y.txt'  => 'long-txt',
    'regex1/p/longer/y.txt' => 'regex1',
    'regex2/p/longer/Y.TXT' => 'regex2',
    'stop/stop/y.txt'      => 'stop',
    'regex1/stop/y.txt'    => 'regex-over-stop',
    'a/who'                => 'a',
    'wild/who'             => 'wild',
    'pre/who'              => 'pre',
    'second/who'           => 'second',
);
for my $f (keys %files) {
    my ($dir) = $f =~ m{^(.*)/};
    make_path("$d/$dir");
    FastdTest::spew("$d/$f", $files{$f});
}
$t->start;

sub body_of {
    my ($path, $host, $port) = @_;
    my $r = $t->http("GET $path HTTP/1.1\r\nHost: $host\r\nConnection: close\r\n\r\n",
                     port => $port);
    return $r ? ($r->{status} == 200 ? $r->{body} : $r->{status}) : 'none';
}

# locations
is(body_of('/exact', 'default.test'), 'exact', '= /exact matches exactly');
is(body_of('/exactly', 'default.test'), 'default-exactly',
   '= /exact does not match a longer path');
is(body_of('/p/x', 'default.test'), 'short', 'prefix /p');
is(body_of('/p/longer/x', 'default.test'), 'long', 'the longest prefix wins');
is(body_of('/p/longer/y.txt', 'default.test'), 'regex1',
   'a regex beats the longest prefix');
is(body_of('/p/longer/Y.TXT', 'default.test'), 'regex2',
   '~ is case-sensitive, ~* is not');
is(body_of('/plain', 'default.test'), 'Hello, World!', 'exact handler');
is(body_of('/stop/y.txt', 'default.test'), 'stop',
   '^~ prefix: regexes are not checked');
is(body_of('/who', 'default.test'), 'default', 'no location: the server root');

# servers by Host
is(body_of('/who', 'a.test'), 'a', 'Host a.test');
is(body_of('/who', 'A.TEST:8080'), 'a', 'Host is case-insensitive, port stripped');
is(body_of('/who', 'www.a.test'), 'a', 'second server_name');
is(body_of('/who', 'x.wild.test'), 'wild', '*.suffix');
is(body_of('/who', 'pre.anything'), 'pre', 'prefix.*');
is(body_of('/who', 'unknown.test'), 'default', 'unknown Host: the first server');
is(body_of('/who', 'a.test', $t->port2), 'second',
   'the listen address picks the server first');
is(body_of('/who', 'dot.test'), 'a', 'server_name dot.test. (a trailing dot) is dot.test');
is(body_of('/who', 'dot.test.'), 'a', '... and so is Host: dot.test.');
unlike($t->error_log, qr/never chosen/, 'distinct names: no warning');

# a [server] another one always takes first: a warning naming both
{
    my $dup = <<"C";
[main]
daemon = off
error_log = %%DIR%%/dup.log
[server]
listen = 127.0.0.1:%%PORT%%
server_name = same.test
[server]
listen = 127.0.0.1:%%PORT%%
server_name = other.test SAME.test.
[server]
listen = 127.0.0.1:%%PORT2%%
[server]
listen = 127.0.0.1:%%PORT2%% default
C
    my $f = $t->write_conf($dup, 'dup.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $f);
    is($rc, 0, 'a shadowed [server] is a warning, not an error') or diag($out);
    like($out, qr/\[warn\].*\Qdup.conf:7: [server] on 127.0.0.1:\E\d+ with server_name "same\.test" is never chosen: the one at \S+dup\.conf:4 takes it first/,
         'the same server_name twice: both file:lines');
    like($out, qr/\[warn\].*\Qdup.conf:10: [server] on 127.0.0.1:\E\d+ without server_name is never chosen: the one at \S+dup\.conf:12 takes it first/,
         'two without server_name, the second "default": the first is the one lost');
}

# every accept mode serves
for my $mode (qw(reuseport exclusive shared)) {
    my $u = FastdTest->new(conf => FastdTest::base_conf(
        main => { workers => 2 }, events => { accept => $mode }));
    $u->start;
    my $ok = 0;
    for (1 .. 20) {
        my $r = $u->get('/plaintext');
        $ok++ if $r && $r->{status} == 200;
    }
    is($ok, 20, "events.accept = $mode: 20 requests served by 2 workers");
    $u->stop;
    $u->no_alerts;
}

$t->no_alerts;
done_testing();
