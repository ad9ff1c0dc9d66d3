#!/usr/bin/perl
# conf/examples/php-fpm.conf as shipped (tests/lib/Examples.pm) with a
# real php-fpm on the example's socket path: / and /admin/ run their
# index.php (index = index.php), a path that is no file runs the front
# controller with the client's REQUEST_URI, a .php file runs with its
# query, a 3 MB upload reaches it, files are files; a .php path that is not a file is a 404
# that PHP never sees (not even an "image" holding PHP code), nothing
# under /uploads/ runs, dot-files are refused, and no answer ever holds
# PHP source. Skips only when php-fpm is not installed.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use PhpFpm;
use Examples;
use File::Path qw(make_path);
use POSIX ();
use Test::More;

plan skip_all => 'php-fpm not installed (apt-get install php-fpm)'
    unless PhpFpm::binary();

my $ex = Examples->new('php-fpm');
my $dir = $ex->dir;
my ($sock) = $ex->conf =~ m{^server = unix:(\S+)}m or die 'no socket';
my $pub = $ex->www . '/blog/public';
make_path(map { "$pub/$_" } qw(admin img uploads .git));
my %file = (
    'index.php' => <<'PHP',
<?php echo 'front controller: ', $_SERVER['REQUEST_URI'], ' as ',
           $_SERVER['SCRIPT_NAME'], "\n";
PHP
    'admin/index.php' => "<?php echo \"admin home\\n\";\n",
    'info.php' => <<'PHP',
<?php echo 'info, query ', $_SERVER['QUERY_STRING'], "\n";
PHP
    'upload.php' => <<'PHP',
<?php echo 'got ', strlen(file_get_contents('php://input')), ' bytes', "\n";
PHP
    'style.css' => "body { color: #333 }\n",
    'img/cat.jpg' => "\xff\xd8\xff<?php echo 'ran the image';\n",
    'uploads/cat.jpg' => "\xff\xd8\xff<?php echo 'ran the upload';\n",
    'uploads/shell.php' => "<?php echo 'ran the uploaded script';\n",
    '.env' => "DB_PASSWORD=secret\n",
    '.git/config' => "[core]\n",
);
FastdTest::spew("$pub/$_", $file{$_}) for keys %file;

my $php = PhpFpm->start($dir, <<"FPM");
[www]
listen = $sock
pm = static
pm.max_children = 3
catch_workers_output = no
php_admin_flag[display_errors] = off
FPM
ok(FastdTest::wait_for(sub { -S $sock }, 20, 0.05),
   'php-fpm listens on the example\'s socket')
    or diag($php->output);

$ex->start;
my $t = $ex->t;
sub get { $ex->get(80, $_[0], Host => 'blog.example.com') }

# every answer: never PHP source
my @answers;
sub got {
    my ($path) = @_;
    my $r = get($path);
    push @answers, [ $path, $r ];
    return $r;
}

my $r = got('/');
ok($r && $r->status == 200
   && $r->body eq "front controller: / as /index.php\n",
   '/ runs index.php (index = index.php)')
    or diag($r ? $r->status . ' ' . $r->body : 'no response');
$r = got('/admin/');
ok($r && $r->status == 200 && $r->body eq "admin home\n",
   '/admin/ runs admin/index.php')
    or diag($r ? $r->status . ' ' . $r->body : 'no response');

$r = got('/2024/05/hello-world?utm=x');
ok($r && $r->status == 200 && $r->body eq
   "front controller: /2024/05/hello-world?utm=x as /index.php\n",
   'a path that is no file runs the front controller, with the client\'s '
   . 'REQUEST_URI') or diag($r ? $r->status . ' ' . $r->body : 'no response');
$r = got('/index.php');
ok($r && $r->status == 200 && $r->body =~ /^front controller: \/index\.php /,
   '/index.php runs');
$r = got('/info.php?page=2');
ok($r && $r->status == 200 && $r->body eq "info, query page=2\n",
   '/info.php?page=2 runs info.php with its query')
    or diag($r ? $r->status . ' ' . $r->body : 'no response');
my $body = 'x' x (3 << 20);   # over the 1m default, under the 64m
$r = $t->http("POST /upload.php HTTP/1.1\r\nHost: blog.example.com\r\n"
              . "Content-Type: application/octet-stream\r\n"
              . "Content-Length: " . length($body) . "\r\n\r\n$body",
              port => $ex->port(80), timeout => 30);
ok($r && $r->status == 200 && $r->body eq "got ${\ length $body} bytes\n",
   'a 3 MB upload reaches PHP whole')
    or diag($r ? $r->status . ' ' . $r->body : 'no response');
$r = got('/style.css');
ok($r && $r->status == 200 && $r->body eq $file{'style.css'}
   && $r->header('content-type') =~ m{^text/css}, 'a file is a file');

$r = got('/nothere.php');
is($r && $r->status, 404, 'a .php path that is no file: 404');
$r = got('/img/cat.jpg/x.php');
is($r && $r->status, 404, 'an image with PHP inside, as /img/cat.jpg/x.php: 404');
$r = got('/uploads/shell.php');
is($r && $r->status, 403, 'a script under /uploads/: 403');
$r = got('/uploads/cat.jpg/x.php');
is($r && $r->status, 403, '/uploads/cat.jpg/x.php: 403');
for my $p ('/.env', '/.git/config') {
    $r = got($p);
    is($r && $r->status, 403, "$p: 403");
}
ok(!grep({ ($_->[1] && $_->[1]->body // '') =~ /ran the|DB_PASSWORD/ }
         @answers), 'no upload, image or secret ever ran or leaked');
# / and /admin/ run their index.php (issue 34 item 2)
# send index.php's source until then
my @source = grep { ($_->[1] && $_->[1]->body // '') =~ /<\?php/ } @answers;
ok(!@source, 'no answer holds PHP source')
    or diag('source in: ' . join ' ', map { $_->[0] } @source);

$t->no_alerts;
done_testing;
