#!/usr/bin/perl
# rewrite and return: redirects with variables, text bodies, rewrite
# last/break/redirect/permanent, $1 and named captures, regex location
# captures, arguments, server-level rules, the loop limit, config errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

my $locations = <<'EOF';
[location /old/]
return = 301 https://$host$request_uri

[location /forbidden]
return = 403 go away

[location /text]
return = 200 "uri=$uri args=$args"

[location /nobody]
return = 404

[location /a/]
rewrite = ^/a/(.*)$ /b/$1 last

[location /b/]
return = 200 b:$uri?$args

[location /brk/]
root = %%DIR%%/www
rewrite = ^/brk/(.*)$ /static/$1 break

[location /static/]
return = 500 "break must not re-route"

[location /named/]
rewrite = ^/named/(?<id>\d+)/(?<rest>.*)$ /b/item-$id-${rest} last

[location ~ ^/user/(\d+)/(?<tab>\w+)$]
return = 200 user=$1 tab=$tab

[location /loop/]
rewrite = ^/loop/(.*)$ /loop/$1 last

[location /redir/]
rewrite = ^/redir/(.*)$ /new/$1 redirect

[location /perm/]
rewrite = ^/perm/(.*)$ /new/$1 permanent

[location /abs/]
rewrite = ^/abs/(.*)$ http://other.example/$1

[location /args/]
rewrite = ^/args/keep$ /b/keep?x=1 last
rewrite = ^/args/drop$ /b/drop?x=1? last

[location /chain/]
rewrite = ^/chain/one$ /chain/two
rewrite = ^/chain/two$ /b/three

[location /enc/]
rewrite = ^/enc/(.*)$ /e/$1 redirect

[location /ret-after/]
rewrite = ^/ret-after/(\w+)$ /x/$1
return = 200 now=$uri cap=$1

EOF

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server    => { rewrite => '^/srv/(.*)$ /b/srv-$1' },
    locations => $locations,
));
make_path($t->dir . '/www/static');
FastdTest::spew($t->dir . '/www/static/file.txt', "static file\n");
$t->start;

sub req {
    my ($path, %h) = @_;
    my $host = delete $h{host} // 'localhost';
    my $method = delete $h{method} // 'GET';
    my $req = "$method $path HTTP/1.1\r\nHost: $host\r\n";
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    return $t->http("$req\r\n");
}

# --- return -----------------------------------------------------------------
my $r = req('/old/x/y?a=1&b=2', host => 'Example.com:8080');
is($r->status, 301, 'return 301');
is($r->header('location'), 'https://Example.com/old/x/y?a=1&b=2',
   'Location from $host (port stripped) and $request_uri');

$r = req('/forbidden');
is($r->status, 403, 'return 403 TEXT: 403');
is($r->body, 'go away', 'return 403 TEXT: the text is the body');
like($r->header('content-type') // '', qr{^text/plain}, 'text/plain');

$r = req('/text/p%20q?z=9');
is($r->status, 200, 'return 200 with variables');
is($r->body, 'uri=/text/p q args=z=9', '$uri is decoded, $args raw; '
   . 'the quotes are stripped');

$r = req('/text', method => 'HEAD');
is($r->status, 200, 'HEAD of a return: 200');
is($r->body, '', 'HEAD of a return: no body');

$r = req('/nobody');
is($r->status, 404, 'return 404 without text: 404');
like($r->body, qr/404 Not Found/, '... with the error page');

# --- rewrite ----------------------------------------------------------------
$r = req('/a/xyz?q=1');
is($r->status, 200, 'rewrite last: 200 from the other location');
is($r->body, 'b:/b/xyz?q=1', 'rewrite last: $1 and the arguments kept');

$r = req('/brk/file.txt');
is($r->status, 200, 'rewrite break: the location\'s handler runs');
is($r->body, "static file\n", 'rewrite break: on the new path, same '
   . 'location (not re-routed)');

$r = req('/named/42/more/stuff');
is($r->body, 'b:/b/item-42-more/stuff?', 'named captures $id and ${rest}');

$r = req('/user/7/posts');
is($r->status, 200, 'regex location with return');
is($r->body, 'user=7 tab=posts', 'regex location captures $1 and $tab in '
   . 'return');
is(req('/user/x/posts')->status, 404, 'regex not matched: 404');

$r = req('/loop/x');
is($r->status, 500, 'a rewrite loop ends with 500');
like($t->error_log, qr/rewrite or internal redirection cycle/,
     'the loop is logged');

$r = req('/redir/p?k=v');
is($r->status, 302, 'rewrite redirect: 302');
is($r->header('location'), '/new/p?k=v', 'redirect: Location keeps args');

$r = req('/perm/p');
is($r->status, 301, 'rewrite permanent: 301');
is($r->header('location'), '/new/p', 'permanent: Location');

$r = req('/abs/z');
is($r->status, 302, 'replacement with http://: a redirect');
is($r->header('location'), 'http://other.example/z', 'absolute Location');

$r = req('/enc/a%20b%3Fc');
is($r->header('location'), '/e/a%20b%3Fc',
   'captures are escaped again in a Location');

is(req('/args/keep?y=2')->body, 'b:/b/keep?x=1&y=2',
   'new arguments first, the request\'s after');
is(req('/args/drop?y=2')->body, 'b:/b/drop?x=1',
   'a replacement ending in "?" drops the request\'s arguments');

is(req('/chain/one')->body, 'b:/b/three?',
   'rules without a flag chain, then the new URI is routed');

$r = req('/ret-after/abc');
is($r->body, 'now=/x/abc cap=abc',
   'return after a rewrite sees the new $uri and its captures');

# --- [server] rules ----------------------------------------------------------
$r = req('/srv/thing');
is($r->status, 200, '[server] rewrite routes the new URI');
is($r->body, 'b:/b/srv-thing?', '[server] rewrite applied before the '
   . 'location\'s');

# --- plain locations are not touched ----------------------------------------
is(req('/plaintext')->body, 'Hello, World!', 'other locations unaffected');

# --- config errors ------------------------------------------------------------
sub conf_error {
    my ($extra, $needle) = @_;
    my $text = FastdTest::base_conf(locations => $extra);
    my $path = $t->write_conf($text, 'bad.conf');
    my @lines = split /\n/, FastdTest::slurp($path);
    my ($line) = grep { index($lines[$_], $needle) >= 0 } 0 .. $#lines;
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    return ($rc, $out, $line + 1);
}

my ($rc, $out, $line) = conf_error("[location /x]\nrewrite = ^/(bad /y\n",
                                   'rewrite = ^/(bad');
isnt($rc, 0, 'a bad regex fails the config test');
like($out, qr/bad\.conf:$line: .*missing closing parenthesis/,
     'the error names file:line and the PCRE2 message') or diag($out);

($rc, $out, $line) = conf_error("[location /x]\nreturn = 200 \$nosuch\n",
                                'return = 200 $nosuch');
isnt($rc, 0, 'an unknown variable fails the config test');
like($out, qr/bad\.conf:$line: .*\$nosuch/, '... naming it') or diag($out);

($rc, $out) = conf_error("[location /x]\nrewrite = ^/x /y sideways\n", 'x');
like($out, qr/unknown flag "sideways"/, 'a bad flag is an error');

($rc, $out) = conf_error("[location /x]\nreturn = 301\n", 'x');
like($out, qr/return 301 needs a URL/, 'return 301 without a URL');

$t->stop;
$t->no_alerts;
done_testing;
