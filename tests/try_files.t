#!/usr/bin/perl
# try_files and named locations, through real clients: the SPA fallback (a
# deep link gets index.html, an asset its own type, a missing asset 404 by
# =404), a directory by $uri/, @backend proxying to a real backend with
# the client's URI and query, the access phase and rewrite of the location
# a request falls back to, "?args" of the last URI, no escape by "..",
# a variable or a symlink, a cycle ending in 500, HEAD, and config errors
# naming file:line; the same over HTTP/2 (h2c).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use H2;
use File::Path qw(make_path);
use Test::More;
use Time::HiRes qw(time);

my $be = Backend->new;
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $site = "$dir/site";
make_path("$site/assets", "$site/docs", "$site/api", "$site/x");
my $index = "<!DOCTYPE html><title>spa</title><p>SPA index</p>\n";
FastdTest::spew("$site/index.html", $index);
FastdTest::spew("$site/assets/app.js", "console.log('app');\n");
FastdTest::spew("$site/docs/index.html", "docs index\n");
FastdTest::spew("$site/api/static.json", "{\"on\":\"disk\"}\n");
FastdTest::spew("$dir/secret.txt", "SECRET\n");
symlink("../../secret.txt", "$site/assets/link.js") or die "symlink: $!";

my $locations = <<"EOF";
[location /]
root = $site
try_files = \$uri \$uri/ /index.html

[location /assets/]
root = $site
try_files = \$uri =404

[location /api/]
root = $site
try_files = \$uri \@backend

[location \@backend]
handler = proxy
upstream = app

[location /private/]
root = $site
deny = all
try_files = \$uri \@backend

[location /guarded/]
root = $site
try_files = \$uri \@denied

[location \@denied]
handler = proxy
upstream = app
deny = all

[location /rw/]
root = $site
try_files = \$uri /rewritten/x

[location /rewritten/]
rewrite = ^/rewritten/(.*)\$ /echo/rw-\$1 last

[location /two/]
root = $site
rewrite = ^/two/fallback\$ /echo/two-rewritten last
try_files = \$uri /two/fallback

[location /echo/]
return = 200 "uri=\$uri args=\$args"

[location /args/]
root = $site
try_files = \$uri /echo/new?tf=1&was=\$args

[location /keep/]
root = $site
try_files = \$uri /echo/kept

[location /q/]
root = $site
try_files = \$uri /upq?path=\$uri&\$args

[location = /upq]
handler = proxy
upstream = app

[location /var/]
root = $site
try_files = /x/\$arg_f =404

[location /al]
alias = $site/assets
try_files = \$uri =404

[location /loop/]
root = $site
try_files = \$uri /loop/again

[location /code/]
root = $site
try_files = \$uri =204

EOF
$t->write_conf(FastdTest::base_conf(
    server => { listen => '127.0.0.1:%%PORT%% http2' },
    locations => $locations,
    extra => "[upstream app]\nserver = " . $be->addr . "\n"));
$t->start;

# --- the SPA fallback ----------------------------------------------------------
my $r = $t->get('/app/route/x');
is($r->status, 200, 'a deep link: 200');
is($r->body, $index, '... with index.html');
like($r->header('content-type') // '', qr{^text/html}, '... as text/html');

$r = $t->get('/assets/app.js');
is($r->status, 200, 'an asset that exists: 200');
is($r->body, "console.log('app');\n", '... itself');
like($r->header('content-type') // '', qr{javascript}, '... with its type');

$r = $t->get('/assets/missing.js');
is($r->status, 404, 'a missing asset: 404 by =404, not index.html');
unlike($r->body, qr/SPA index/, '... not the SPA page');

$r = $t->get('/index.html');
is($r->body, $index, 'the fallback file itself');

# --- $uri/ ---------------------------------------------------------------------
$r = $t->get('/docs');
is($r->status, 200, '/docs: a directory by $uri/');
is($r->body, "docs index\n", '... served with its index');
$r = $t->get('/docs/');
is($r->body, "docs index\n", '/docs/ too');

# --- HEAD -----------------------------------------------------------------------
$r = $t->get('/app/route/x', method => 'HEAD');
is($r->status, 200, 'HEAD of a deep link: 200');
is($r->header('content-length'), length($index), '... the length of index.html');
is($r->body, '', '... and no body');
$r = $t->get('/assets/missing.js', method => 'HEAD');
is($r->status, 404, 'HEAD of a missing asset: 404');

# --- @backend ---------------------------------------------------------------------
my $before = $be->requests;
$r = $t->get('/api/users/7?x=1&y=%20z');
is($r->status, 200, '@backend: proxied');
like($r->body, qr{^GET /api/users/7\?x=1&y=%20z HTTP/1\.1$}m,
     '... with the client\'s URI and query as they came') or diag($r->body);
is($be->requests, $before + 1, '... one request to the backend');

$r = $t->get('/api/static.json');
is($r->body, "{\"on\":\"disk\"}\n", 'a file under /api/ is served from disk');
is($be->requests, $before + 1, '... the backend not asked');

$r = $t->http("POST /api/form HTTP/1.1\r\nHost: localhost\r\n"
              . "Content-Length: 5\r\n\r\nhello");
is($r->status, 200, 'POST falls back to @backend (static would say 405)');
like($r->body, qr{^POST /api/form HTTP/1\.1$}m, '... as a POST');
like($r->body, qr{^body-length: 5$}m, '... with its body');

$before = $be->requests;
$r = $t->get('/@backend');
is($r->body, $index, '"/@backend" never reaches the named location');
is($be->requests, $before, '... the backend not asked');
$r = $t->get('/%40backend');
is($r->body, $index, '"/%40backend" neither');

# --- the access phase and rewrite run again -------------------------------------
$before = $be->requests;
$r = $t->get('/private/x');
is($r->status, 403, 'the location\'s own acl runs before try_files');
$r = $t->get('/guarded/x');
is($r->status, 403, 'the named location\'s acl runs after the fallback');
is($be->requests, $before, '... and nothing reached the backend');

$r = $t->get('/rw/nothing');
is($r->body, 'uri=/echo/rw-x args=',
   'the fallback URI\'s location runs its rewrite (and return)');

$r = $t->get('/two/nothing');
is($r->body, 'uri=/echo/two-rewritten args=',
   'a fallback to the same location runs its rewrite again, on the new URI');

# --- the last URI's arguments ------------------------------------------------------
$r = $t->get('/args/none?a=b');
is($r->body, 'uri=/echo/new args=tf=1&was=a=b', '"?args" replace the request\'s');
$r = $t->get('/keep/none?a=b');
is($r->body, 'uri=/echo/kept args=a=b', 'without "?" they are kept');

# a decoded $uri in the fallback's query, to a proxy: its CR LF, SP, "&"
# and "%" are escaped, so they neither split the upstream request nor add
# arguments ($args, already encoded, goes as it is)
{
    my $before = $be->requests;
    $r = $t->get('/q/x%0d%0aX-Injected:%20yes%0d%0aFoo:%20%26a=%2541?k=v');
    is($r->status, 200, 'try_files to a proxy with $uri in the query: 200');
    like($r->body, qr{^GET /upq\?path=/q/x%0D%0AX-Injected:%20yes%0D%0AFoo:%20%26a=%2541&k=v HTTP/1\.1$}mi,
         '... the upstream request line holds it escaped') or diag($r->body);
    unlike($r->body, qr{^X-Injected:}mi, '... and no injected header');
    is($be->requests, $before + 1, '... one request upstream');
}

# --- no way out of the root -----------------------------------------------------------
$r = $t->get('/var/?f=../secret.txt');
is($r->status, 404, 'a variable with ".." stays under the root');
$r = $t->get('/var/?f=../../secret.txt');
is($r->status, 404, 'a variable with ".." above "/" is no file');
$r = $t->get('/var/?f=..%2F..%2Fsecret.txt');
is($r->status, 404, 'an encoded one is not decoded');
$r = $t->get('/al../secret.txt');
isnt($r->status, 200, 'an alias location\'s "/al../" is not the parent');
unlike($r->body // '', qr/SECRET/, '... and no secret');
$r = $t->get('/al/app.js');
is($r->body, "console.log('app');\n", 'an alias location finds its files');
$r = $t->get('/assets/link.js');
is($r->status, 404, 'a symlink out of the root is not a file to try');
unlike($r->body, qr/SECRET/, '... nothing of it is served');
$r = $t->get('/%2e%2e/secret.txt');
unlike($r->body // '', qr/SECRET/, '"/%2e%2e/" does not get out either');

# --- a cycle ---------------------------------------------------------------------------
my $t0 = time;
$r = $t->get('/loop/x', timeout => 30);
is($r && $r->status, 500, 'try_files back to itself: 500');
cmp_ok(time - $t0, '<', 20, '... at once, not a hang');
ok(FastdTest::wait_for(sub { $t->error_log =~ /internal redirection cycle/ }),
   '... logged as a cycle');
is($t->get('/plaintext')->body, 'Hello, World!', 'the worker still answers');

$r = $t->get('/code/none');
is($r->status, 204, '=204 answers 204');

# --- over HTTP/2: one request type, whichever protocol carried it ---------------
SKIP: {
    skip(H2::why_not(), 9) if H2::why_not();
    my $h = H2::curl($t, '/app/route/x');
    is($h->{version}, '2', 'h2c: HTTP/2');
    is($h->{code}, 200, 'h2c: a deep link: 200');
    is($h->{body}, $index, '... with index.html');
    $h = H2::curl($t, '/assets/missing.js');
    is($h->{code}, 404, 'h2c: a missing asset: 404 by =404');
    my $before = $be->requests;
    $h = H2::curl($t, '/api/users/7?x=1');
    like($h->{body}, qr{^GET /api/users/7\?x=1 HTTP/1\.1$}m,
         'h2c: @backend proxied with the client\'s URI') or diag($h->{body});
    is($be->requests, $before + 1, '... one request to the backend');
    $h = H2::curl($t, '/api/form', args => ['--data-binary', 'hello']);
    like($h->{body}, qr{^body-length: 5$}m,
         'h2c: a POST falls back to @backend with its body')
        or diag($h->{body});
    $h = H2::curl($t, '/loop/x');
    is($h->{code}, 500, 'h2c: a cycle: 500');
    is($h->{rc}, 0, '... and the stream ends cleanly') or diag($h->{err});
}

$t->stop;
$t->no_alerts;

# --- not inherited: [server]'s is for the requests no location matches -----------
my $t2 = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => $site, try_files => '$uri /index.html' },
    locations => "[location /sub/]\nroot = $site\n\n"));
$t2->start;
$r = $t2->get('/no/such');
is($r->body, $index, '[server] try_files: a path no location takes falls back');
$r = $t2->get('/sub/no/such');
is($r->status, 404, '... a [location] does not inherit it');
is($t2->get('/plaintext')->body, 'Hello, World!', '... nor does a handler\'s');
$t2->stop;
$t2->no_alerts;

# --- config errors ----------------------------------------------------------------------
sub conf_error {
    my ($extra, $needle) = @_;
    my $text = FastdTest::base_conf(locations => $extra);
    my $path = $t->write_conf($text, 'bad.conf');
    my $line = FastdTest::line_of(FastdTest::slurp($path), qr/\Q$needle\E/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    return ($rc, $out, $line);
}

my ($rc, $out, $line) = conf_error(
    "[location /a/]\ntry_files = \$uri \@nosuch\n\n[location \@other]\n"
    . "handler = plaintext\n", 'try_files');
isnt($rc, 0, 'an unknown @name fails the config test');
like($out, qr/bad\.conf:$line: .*\@nosuch/, '... naming it at file:line')
    or diag($out);

($rc, $out, $line) = conf_error(
    "[location \@b]\nhandler = plaintext\n\n[location \@b]\nhandler = json\n",
    '[location @b]');
isnt($rc, 0, 'a named location twice is an error');
like($out, qr/twice/, '... saying so') or diag($out);

($rc, $out, $line) = conf_error("[location \@no/slash]\nhandler = json\n",
                                '@no/slash');
like($out, qr/bad\.conf:$line: .*named location/, 'a bad @name') or diag($out);

($rc, $out, $line) = conf_error("[location /a/]\ntry_files = \$uri\n",
                                'try_files');
like($out, qr/bad\.conf:$line: .*try_files needs/, 'one argument')
    or diag($out);

($rc, $out, $line) = conf_error("[location /a/]\ntry_files = \$uri =99\n",
                                'try_files');
like($out, qr/bad\.conf:$line: .*=CODE/, '=99') or diag($out);

($rc, $out, $line) = conf_error("[location /a/]\ntry_files = \$nosuch =404\n",
                                'try_files');
like($out, qr/bad\.conf:$line: .*\$nosuch/, 'an unknown variable')
    or diag($out);

($rc, $out, $line) = conf_error("[location \@n]\nalias = $site\n", 'alias');
like($out, qr/bad\.conf:$line: .*named location/, 'alias in a named location')
    or diag($out);

($rc, $out, $line) = conf_error("[location ~ ^/r/(.*)\$]\nalias = $site/\$1\n"
                                . "try_files = \$uri =404\n", 'alias');
like($out, qr/bad\.conf:$line: .*regex location/,
     'alias with try_files in a regex location') or diag($out);

($rc, $out) = conf_error("[location /a/]\ntry_files = \$uri \@ok\n\n"
                         . "[location \@ok]\nhandler = plaintext\n", 'x');
is($rc, 0, 'a named location after its user is fine') or diag($out);

done_testing;
