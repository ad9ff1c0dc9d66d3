#!/usr/bin/perl
# add_header, add_header_inherit and expires: headers on 2xx/3xx only,
# "always" on errors too, a location's headers adding to the server's
# (and replacing them with add_header_inherit = off), variables in
# values (escaped so a decoded $uri cannot split a header), every kind
# of handler (plaintext, json, static, return), HTTP/2, and the config
# errors, each naming file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

my $locations = <<'EOF';
[location /plaintext/own]
handler = plaintext
add_header_inherit = off
add_header = X-Own own

[location /plaintext/more]
handler = plaintext
add_header = X-Loc "loc $uri"
add_header = X-Empty $arg_none
add_header = X-Arg a=$arg_x

[location /ret]
return = 200 returned

[location /moved]
return = 301 /elsewhere

[location /gone]
return = 410

[location /exp/epoch]
handler = plaintext
expires = epoch

[location /exp/max]
handler = plaintext
expires = max

[location /exp/neg]
handler = plaintext
expires = -1

[location /exp/off]
handler = plaintext
expires = off

[location /static/]
add_header = X-Static yes
add_header = X-U $uri always

EOF
my $t = FastdTest->new(conf => FastdTest::base_conf(
    http   => { add_header => 'X-Http h' },
    server => {
        # two lines: the base's listen, then an HTTP/2 one
        listen     => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% http2",
        root       => '%%DIR%%/www',
        add_header => ['X-Srv "srv $request_method"',
                       'Strict-Transport-Security "max-age=31536000" always'],
        expires    => '1h',
    },
    locations => $locations));
make_path($t->dir . '/www/static');
FastdTest::spew($t->dir . '/www/static/a.txt', "static file\n");
$t->start;

# --- on a 200: the server's, then the location's --------------------------
my $r = $t->get('/plaintext');
is($r->status, 200, 'plaintext');
is($r->header('x-srv'), 'srv GET', 'a server add_header with a variable');
is($r->header('strict-transport-security'), 'max-age=31536000',
   'a quoted value, the quotes stripped');
is($r->header('x-http'), 'h', 'an [http] add_header reaches every location');
is($r->header('cache-control'), 'max-age=3600', 'expires = 1h: max-age');
ok(FastdTest::is_http_date($r->header('expires') // ''),
   'expires = 1h: an HTTP date');

$r = $t->get('/plaintext/more?x=7');
is($r->header('x-srv'), 'srv GET', 'a location inherits the server\'s ...');
is($r->header('x-loc'), 'loc /plaintext/more', '... and adds its own');
is($r->header('x-arg'), 'a=7', '$arg_NAME in a value');
ok(!defined $r->header('x-empty'), 'a value that comes out empty adds nothing');

$r = $t->get('/plaintext/own');
is($r->header('x-own'), 'own', 'add_header_inherit = off: its own header');
ok(!defined $r->header('x-srv') && !defined $r->header('x-http') &&
   !defined $r->header('strict-transport-security'),
   'add_header_inherit = off: none of the server\'s nor [http]\'s');

# --- every handler ----------------------------------------------------------
$r = $t->get('/json');
is($r->header('x-srv'), 'srv GET', 'json handler');
$r = $t->get('/ret');
is($r->body, 'returned', 'return 200');
is($r->header('x-srv'), 'srv GET', 'return 200 gets it');
$r = $t->get('/moved');
is($r->status, 301, 'return 301');
is($r->header('x-srv'), 'srv GET', 'a 301 gets it');
$r = $t->get('/static/a.txt');
is($r->body, "static file\n", 'static file');
is($r->header('x-static'), 'yes', 'static handler');
is($r->header('x-u'), '/static/a.txt', '$uri');
my $lm = $r->header('last-modified');
$r = $t->get('/static/a.txt', 'If-Modified-Since' => $lm);
is($r->status, 304, 'a 304');
is($r->header('x-static'), 'yes', 'a 304 gets it');
is($r->header('cache-control'), 'max-age=3600', 'a 304 gets expires');

# --- errors: only "always" ----------------------------------------------------
$r = $t->get('/static/missing');
is($r->status, 404, 'a 404');
ok(!defined $r->header('x-static') && !defined $r->header('x-srv'),
   'without always: not on a 404');
is($r->header('strict-transport-security'), 'max-age=31536000',
   'always: on a 404 too');
is($r->header('x-u'), '/static/missing', 'always in a location: on a 404');
ok(!defined $r->header('expires') && !defined $r->header('cache-control'),
   'expires: not on a 404');
$r = $t->get('/gone');
is($r->status, 410, 'return 410');
ok(!defined $r->header('x-srv') &&
   defined $r->header('strict-transport-security'),
   'return 410: only the always one');

# a decoded CR LF in $uri cannot make a header of its own
$r = $t->get('/static/x%0d%0aX-Injected:%20yes');
ok(!defined $r->header('x-injected'), 'no header injected through $uri');
is($r->header('x-u'), '/static/x%0D%0AX-Injected: yes',
   'the controls written escaped');

# --- expires ------------------------------------------------------------------
$r = $t->get('/exp/epoch');
is($r->header('expires'), 'Thu, 01 Jan 1970 00:00:01 GMT', 'epoch: Expires');
is($r->header('cache-control'), 'no-cache', 'epoch: no-cache');
$r = $t->get('/exp/max');
is($r->header('expires'), 'Thu, 31 Dec 2037 23:55:55 GMT', 'max: Expires');
is($r->header('cache-control'), 'max-age=315360000', 'max: ten years');
$r = $t->get('/exp/neg');
is($r->header('cache-control'), 'no-cache', '-1: no-cache');
ok(FastdTest::is_http_date($r->header('expires') // ''), '-1: a date');
$r = $t->get('/exp/off');
ok(!defined $r->header('expires') && !defined $r->header('cache-control'),
   'off in a location: none of the server\'s expires');
my @cc = grep { /^cache-control:/i } split /\r\n/, $t->raw(
    "GET /exp/max HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") // '';
is(scalar @cc, 1, 'one Cache-Control');

# --- HTTP/2 -------------------------------------------------------------------
SKIP: {
    my $curl = `curl --version 2>/dev/null`;
    skip 'curl without HTTP/2', 3 unless $curl =~ /HTTP2/;
    my $head = `curl -sS -o /dev/null -D - --http2-prior-knowledge "http://127.0.0.1:@{[$t->port2]}/plaintext/more?x=2"`;
    like($head, qr{^HTTP/2 200}m, 'HTTP/2 request');
    like($head, qr{^x-loc: loc /plaintext/more\r?$}m,
         'HTTP/2: the location\'s header, the name lower case');
    like($head, qr{^x-srv: srv GET\r?$}m, 'HTTP/2: the server\'s header');
}

$t->stop;
$t->no_alerts;

# --- config errors: each names file:line -------------------------------------
sub conf_error {
    my ($loc, $needle) = @_;
    my $text = FastdTest::base_conf(locations => "[location /x]\n$loc\n");
    my $path = $t->write_conf($text, 'bad.conf');
    my $line = FastdTest::line_of(FastdTest::slurp($path),
                                  qr/\Q$needle\E/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "\"$loc\" fails the config test");
    return ($out, $line);
}

my ($out, $line) = conf_error("add_header = X-Only", 'X-Only');
like($out, qr/bad\.conf:$line: add_header needs NAME VALUE/,
     'a missing value') or diag($out);
($out, $line) = conf_error("add_header = X-V \$hots", 'X-V');
like($out, qr/bad\.conf:$line: add_header: unknown variable "\$hots"; did you mean "\$host"\?/,
     'an unknown variable, with a did you mean') or diag($out);
($out, $line) = conf_error("add_header = \"X Y\" v", 'X Y');
like($out, qr/bad\.conf:$line: add_header: bad header name/,
     'a header name with a space') or diag($out);
($out, $line) = conf_error("add_header = X\x01Y v", "X\x01Y");
# the reader refuses a control character in any line, naming it
like($out, qr/bad\.conf:$line: control character 0x01 in "add_header"/,
     'a header name with a control character') or diag($out);
($out, $line) = conf_error("add_header = Content-Length 5", 'Content-Length');
like($out, qr/bad\.conf:$line: add_header: Content-Length is the server's/,
     'a framing header') or diag($out);
($out, $line) = conf_error("expires = banana", 'banana');
like($out, qr/bad\.conf:$line: expires must be off, epoch, max or a duration/,
     'expires = banana') or diag($out);
($out, $line) = conf_error("add_header_inherit = maybe", 'maybe');
like($out, qr/bad\.conf:$line:/, 'add_header_inherit = maybe') or diag($out);

done_testing;
