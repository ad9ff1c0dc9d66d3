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
rewrite = ^/args/none$ /b/none? last

[location /chain/]
rewrite = ^/chain/one$ /chain/two
rewrite = ^/chain/two$ /b/three

[location /enc/]
rewrite = ^/enc/(.*)$ /e/$1 redirect

[location /ret-after/]
rewrite = ^/ret-after/(\w+)$ /x/$1
return = 200 now=$uri cap=$1

[location /long/]
return = 301 http://$host$request_uri

[location /pct/]
rewrite = ^/pct/(.*)$ http://$host/x/$1/$1/$1$uri redirect

[location /caps/]
rewrite = ^/caps/(.)(.)(.)(.)(.)(.)(.)(.)(.)(?<ten>.*)$ /b/$9$8$7$6$5$4$3$2$1-${ten}-$0 last

[location /intl/]
rewrite = ^/intl/(.*)$ /b/$1$1 last

[location /hdr/]
return = 302 http://$host/$http_x_long?h=$http_x_long

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
# $host is one variable for every module now: lower case, as nginx's
is($r->header('location'), 'https://example.com/old/x/y?a=1&b=2',
   'Location from $host (port stripped, lower case) and $request_uri');

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
is(req('/args/none?y=2')->body, 'b:/b/none?',
   'a replacement that is only "?" at its end drops them and adds none');

is(req('/chain/one')->body, 'b:/b/three?',
   'rules without a flag chain, then the new URI is routed');

$r = req('/ret-after/abc');
is($r->body, 'now=/x/abc cap=abc',
   'return after a rewrite sees the new $uri and its captures');

# --- hostile input: long values, many captures, bytes to escape --------------
# Every expansion is built by a growing builder; the response header goes
# through its in-place builder, and one larger than the output area (16k)
# through the rebuild in the request pool. The exact bytes are checked.

# the escaping of a Location (ESC_PATH): controls, space, DEL and up, and
# "#%<>?\^`{|} as %XX
sub esc_path {
    my ($s) = @_;
    $s =~ s{([\x00-\x20\x7f-\xff"#%<>?\\^`{|}])}{sprintf('%%%02X', ord $1)}ge;
    return $s;
}

my $host = 'h' x 7000;
$r = req('/long/x?q=1', host => $host);
is($r->status, 301, 'a 7000-byte Host: 301');
is($r->header('location'), "http://$host/long/x?q=1",
   '... the whole Host in the Location');

# a target that fills the request head to the byte (max_header_size 8k:
# "GET " TARGET " HTTP/1.1\r\nHost: localhost\r\n\r\n" is 8192 bytes)
my $fill = '/long/%25' . ('u' x (8192 - 34 - 9));
$r = req($fill);
is($r->status, 301, 'a request head of exactly 8k: 301');
is($r->header('location'), "http://localhost$fill",
   '... its whole target in the Location');
is(req("${fill}u")->status, 431, 'one byte more: 431');

# a path of 2000 "%"s: each $1 and $uri escaped back to %25 (6000 bytes
# each), a Location of 24k, larger than the output area
my $pcts = '%' x 2000;
$r = req('/pct/' . ('%25' x 2000));
is($r->status, 302, 'a path of 2000 %25: 302');
my $e = esc_path($pcts);
is(length($r->header('location') // ''), 19 + 4 * 6000 + 7,
   '... a 24k Location');
is($r->header('location'), "http://localhost/x/$e/$e/$e/pct/$e",
   '... every capture and $uri escaped, nothing cut');

$r = req('/caps/abcdefghijKLM');
is($r->body, 'b:/b/ihgfedcba-jKLM-/caps/abcdefghijKLM?',
   'nine numbered captures, a named tenth and $0');
my $zs = 'z' x 5000;
$r = req("/caps/abcdefghi$zs");
is($r->body, "b:/b/ihgfedcba-$zs-/caps/abcdefghi$zs?",
   '... with a 5000-byte tenth');

$r = req('/intl/' . ('%25' x 2500));
is($r->status, 200, 'an internal rewrite to 5000 "%"s: 200');
is($r->body, 'b:/b/' . ('%' x 5000) . '?',
   '... $1$1 kept literal through the new URI');

my $v = 'v"<>' x 1500;
$r = req('/hdr/', 'X-Long' => $v);
is($r->status, 302, 'a 6000-byte header in a return: 302');
$e = esc_path($v);
is($r->header('location'), "http://localhost/$e?h=$e",
   '... escaped (30k), in full');

$r = req('/enc/%01%0d%09%7f%ff%20%22');
is($r->header('location'), '/e/%01%0D%09%7F%FF%20%22',
   'CR, controls and high bytes in a capture: escaped in the Location');
$r = req('/hdr/', 'X-Long' => "a\x80\xff\tb");
is($r->header('location'), 'http://localhost/a%80%FF%09b?h=a%80%FF%09b',
   'a header value\'s high bytes and tab: escaped in the Location');
$r = req('/text/%01%0d%0a%7f');
is($r->body, "uri=/text/\x01\r\n\x7f args=",
   'a text return carries the decoded bytes as they are');

# a large header between two small ones on one connection: each whole,
# in order (the rebuilt header is queued where the in-place one would be)
{
    my $big = '/pct/' . ('%25' x 2000);
    my $raw = $t->raw("GET /plaintext HTTP/1.1\r\nHost: a\r\n\r\n"
                      . "GET $big HTTP/1.1\r\nHost: a\r\n\r\n"
                      . "GET /plaintext HTTP/1.1\r\nHost: a\r\n"
                      . "Connection: close\r\n\r\n");
    my @rs = FastdTest::parse_responses($raw, eof => 1);
    is(scalar @rs, 3, 'pipelined: three responses');
    is(join(' ', map { $_->status } @rs), '200 302 200', '... in order');
    is($rs[1] && length($rs[1]->header('location') // ''), 11 + 4 * 6000 + 7,
       '... the large one whole');
    is($rs[2] && $rs[2]->body, 'Hello, World!', '... and the next intact');
}

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
