#!/usr/bin/perl
# static alias: a prefix location's prefix, or a regex location's whole
# path ($1..$9), stands for another directory; confined beneath it as root
# is (.., encoded dots, NUL, symlinks); its configuration errors.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

my $locations = <<'EOF2';
[location /i/]
alias = %%DIR%%/data/img/

[location /j]
alias = %%DIR%%/data/img

[location = /logo]
alias = %%DIR%%/data/img/a.gif

[location ~ ^/u/(\w+)/(.+)$]
alias = %%DIR%%/data/$1/$2

[location ~ ^/cap/(.*)$]
alias = %%DIR%%/data/img/$1

[location /f/]
alias = %%DIR%%/data/img/
follow_symlinks = on

[location ~ ^/o/(sub/)?(.+)$]
alias = %%DIR%%/data/img/$1$2

EOF2

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => '%%DIR%%/www' }, locations => $locations));
my $dir = $t->dir;
make_path("$dir/www", "$dir/data/img/sub", "$dir/data/doc");
FastdTest::spew("$dir/data/img/a.gif", "GIF a\n");
FastdTest::spew("$dir/data/img/index.html", "img index\n");
FastdTest::spew("$dir/data/img/sub/b.txt", "b\n");
FastdTest::spew("$dir/data/doc/x.txt", "doc x\n");
FastdTest::spew("$dir/data/secret.txt", "TOP SECRET\n");
FastdTest::spew("$dir/secret.txt", "TOP SECRET\n");
FastdTest::spew("$dir/www/i.txt", "in root\n");
symlink("../secret.txt", "$dir/data/img/out.txt") or die "symlink: $!";
symlink("a.gif", "$dir/data/img/in.gif") or die "symlink: $!";
symlink("sub", "$dir/data/img/linkdir") or die "symlink: $!";
$t->start;

sub get { my ($p, %h) = @_; return $t->get($p, %h) }

# --- mapping ---------------------------------------------------------------------
my $r = get('/i/a.gif');
is($r->status, 200, 'prefix alias: 200');
is($r->body, "GIF a\n", 'prefix alias: the aliased file');
is($r->header('content-type'), 'image/gif', 'prefix alias: type of the file');
is(get('/i/')->body, "img index\n", 'prefix alias: index file');
is(get('/i/sub/b.txt')->body, "b\n", 'prefix alias: subdirectory');
is(get('/i/nope')->status, 404, 'prefix alias: missing file 404');
is(get('/i.txt')->body, "in root\n", 'other paths still use root');
is(get('/j/a.gif')->body, "GIF a\n", 'alias without a slash: /j/a.gif');
$r = get('/j');
is($r->status, 301, 'the aliased directory itself: 301');
is($r->header('location'), '/j/', '... to the path with a slash');
is(get('/j/')->body, "img index\n", '/j/: index');
is(get('/i/sub')->header('location'), '/i/sub/', 'subdirectory: 301');
is(get('/logo')->body, "GIF a\n", 'exact location aliased to a file');
is(get('/u/doc/x.txt')->body, "doc x\n", 'regex alias: $1/$2');
is(get('/u/img/sub/b.txt')->body, "b\n", 'regex alias: $2 with a slash');
is(get('/u/none/x.txt')->status, 404, 'regex alias: missing dir 404');
is(get('/cap/a.gif')->body, "GIF a\n", 'regex alias: $1');
is(get('/o/a.gif')->body, "GIF a\n", 'regex alias: an unset group is empty');
is(get('/o/sub/b.txt')->body, "b\n", 'regex alias: the same group set');
$r = $t->http("HEAD /i/a.gif HTTP/1.1\r\nHost: x\r\n\r\n");
ok($r->status == 200 && $r->header('content-length') == 6 && $r->body eq '',
   'HEAD through an alias');
is(get('/i/a.gif', Range => 'bytes=0-2')->body, 'GIF', 'range through alias');

# --- escapes: nothing outside the alias's directory --------------------------------
my $secret_re = qr/TOP SECRET|root:.*:0:0:/;
for my $p ('/i/../secret.txt', '/i/%2e%2e/secret.txt', '/i/..%2fsecret.txt',
           '/i/%2E%2E/%2e%2e/secret.txt', '/i/.%2e/secret.txt',
           '/j../secret.txt', '/j..%2fsecret.txt', '/j/../../secret.txt',
           '/j%2f..%2f..%2fsecret.txt', '/i/a.gif%00.html', '/i/%00',
           '/u/img/..%2f..%2fsecret.txt', '/u/img/%2e%2e/secret.txt',
           '/u/..%2fimg/a.gif', '/cap/../secret.txt', '/cap/..%2fsecret.txt',
           '/cap/%2e%2e/%2e%2e/etc/passwd', '/f/../secret.txt',
           '/i/out.txt', '/i/linkdir/b.txt', '/cap/out.txt') {
    my $raw = $t->raw("GET $p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    my ($status) = $raw =~ m{^HTTP/1\.1 (\d{3})};
    ok(defined $status && $status =~ /^(400|403|404)$/,
       "escape $p: refused ($status)") or diag(substr($raw, 0, 200));
    unlike($raw, $secret_re, "escape $p: nothing outside the alias");
}
is(get('/i/out.txt')->status, 403, 'symlink out of the alias: 403');
is(get('/i/in.gif')->status, 403, 'symlink inside the alias: 403 (as root)');
is(get('/i/linkdir/b.txt')->status, 403, 'symlinked directory: 403');
is(get('/j../secret.txt')->status, 404, 'prefix ending inside a segment: 404');
is(get('/f/in.gif')->body, "GIF a\n", 'follow_symlinks = on: link followed');
is(get('/f/out.txt')->body, "TOP SECRET\n",
   'follow_symlinks = on: as root, a link out is followed');

$t->no_alerts;
$t->stop;

# --- on the offload pool ----------------------------------------------------------
{
    my $o = FastdTest->new(conf => FastdTest::base_conf(
        http => { inline_completions => 'off' },
        server => { root => '%%DIR%%' },
        locations => "[location /i/]\nalias = $dir/data/img/\n\n"
                   . "[location ~ ^/c/(.*)\$]\nalias = $dir/data/img/\$1\n"));
    $o->start;
    is($o->get('/i/a.gif')->body, "GIF a\n", 'offload: alias');
    is($o->get('/c/sub/b.txt')->body, "b\n", 'offload: regex alias');
    is($o->get('/i/out.txt')->status, 403, 'offload: symlink refused');
    $o->no_alerts;
}

# --- configuration errors ------------------------------------------------------------
sub conf_error {
    my ($name, $locs, $re, $line_re, %o) = @_;
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        server => { root => '%%DIR%%', %{ $o{server} || {} } },
        locations => $locs));
    make_path($c->dir . "/d");
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    my $text = FastdTest::slurp($c->conf_file);
    my $line = FastdTest::line_of($text, $line_re);
    is($code, 1, "$name: config error");
    like($out, qr/fastd\.conf:$line: .*$re/, "$name: names file:line")
        or diag($out);
}
conf_error('root and alias', "[location /a/]\nalias = %%DIR%%/d/\nroot = %%DIR%%/d/.\n",
           qr/"root" and "alias" in one location/, qr{^root = .*/d/\.$});
conf_error('alias and root', "[location /a/]\nroot = %%DIR%%/d\nalias = %%DIR%%/d/\n",
           qr/"root" and "alias" in one location/, qr{^root = .*/d$});
conf_error('$1 in a prefix location', "[location /a/]\nalias = %%DIR%%/d/\$1\n",
           qr/needs a regex location/, qr/^alias/);
conf_error('$x', "[location ~ ^/a/(.*)]\nalias = %%DIR%%/d/\$x\n",
           qr/only \$1\.\.\$9/, qr/^alias/);
conf_error('missing directory', "[location /a/]\nalias = %%DIR%%/nope/\n",
           qr/No such file/, qr/^alias/);
conf_error('alias in [server]', '', qr/only valid in a \[location\]/,
           qr/^alias/, server => { alias => '%%DIR%%/d/' });

# the server's root with a location's alias is the usual case: fine
{
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        server => { root => '%%DIR%%' },
        locations => "[location /a/]\nalias = %%DIR%%/\n"));
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    is($code, 0, 'server root + location alias: valid') or diag($out);
}

done_testing;
