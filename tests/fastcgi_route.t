#!/usr/bin/perl
# Which location runs a file that an index or try_files finds, against a
# real php-fpm: "/php/" with index = index.php runs /php/index.php through
# the "\.php$" FastCGI location (before, the static location sent its
# source), over HTTP/1.1, HTTP/2 and with the static handler on the
# offload pool; try_files = $uri $uri/index.php =404 likewise; a plain
# index.html is still served as a file, a directory without '/' still
# gets its 301, and an index that leads back to its directory is a cycle
# ended by a 500. Skips only when php-fpm is not installed.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use PhpFpm;
use H2;
use IO::Socket::INET;
use POSIX ();
use Test::More;

plan skip_all => 'php-fpm not installed (apt-get install php-fpm)'
    unless PhpFpm::binary();

my $fpm_port = FastdTest::free_port();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $html = "$dir/html";
mkdir "$html" or die;
mkdir "$html/$_" or die for qw(php static tf tf/sub off both loop);
my $script = "<?php echo 'ran ', \$_SERVER['SCRIPT_NAME'], ' for ', "
           . "\$_SERVER['HTTP_HOST'] ?? '-';\n";
FastdTest::spew("$html/$_/index.php", $script) for qw(php tf tf/sub off both);
FastdTest::spew("$html/static/index.html", "static index\n");
FastdTest::spew("$html/both/index.html", "not this one\n");
FastdTest::spew("$html/loop/index.html", "never\n");

my $php = PhpFpm->start_tcp($dir, $fpm_port);
ok($php->up, 'php-fpm accepts connections') or diag($php->output);

# the README's FastCGI example, with the index of [server]
$t->write_conf(FastdTest::base_conf(
    server => { root => $html, listen => '127.0.0.1:%%PORT%% http2',
                index => ['index.php', 'index.html'] },
    locations => <<"L"));
[location ~ \\.php(/|\$)]
handler = fastcgi
pass = fastcgi://127.0.0.1:$fpm_port
fastcgi_split_path_info = ^(.+\\.php)(/.*)\$

[location /off/]
offload = on

[location /tf/]
index = index.html
try_files = \$uri \$uri/index.php =404

[location = /loop/index.html]
rewrite = ^ /loop/ last
L
$t->start;

my $r = $t->get('/php/');
is($r->{status}, 200, 'index = index.php: /php/ is 200');
is($r->{body}, 'ran /php/index.php for localhost',
   '... run by the FastCGI location, not sent as its source');
like($r->{headers}{'content-type'} // '', qr{^text/html},
     '... as PHP\'s text/html, not a file\'s octet-stream');
$r = $t->get('/php/?a=1');
is($r->{body}, 'ran /php/index.php for localhost', '... with a query too');
is($t->get('/both/')->{body}, 'ran /both/index.php for localhost',
   'the first index name that exists: index.php before index.html');
$r = $t->get('/off/');
is($r->{body}, 'ran /off/index.php for localhost',
   'the static handler on the offload pool redirects the same way');

$r = $t->get('/static/');
is($r->{status}, 200, 'a plain index.html is still served');
is($r->{body}, "static index\n", '... as the file');
like($r->{headers}{'content-type'} // '', qr{^text/html}, '... text/html');
$r = $t->get('/php');
is($r->{status}, 301, 'a directory without its / still gets a 301');
like($r->{headers}{location} // '', qr{/php/$}, '... to the directory');

$r = $t->get('/tf/');
is($r->{body}, 'ran /tf/index.php for localhost',
   'try_files = $uri $uri/index.php: the script found runs as PHP');
$r = $t->get('/tf/sub');
is($r->{body}, 'ran /tf/sub/index.php for localhost',
   '... for a directory without its / too');
is($t->get('/tf/none')->{status}, 404, '... and nothing found is =404');

$r = $t->get('/loop/');
is($r->{status}, 500, 'an index redirected back to its directory: 500');
ok(FastdTest::wait_for(sub { $t->error_log =~ /internal redirection cycle/ }),
   '... logged as a cycle');

SKIP: {
    skip H2::why_not(), 2 if H2::why_not();
    my $h = H2::curl($t, '/php/');
    is($h->{code}, 200, 'HTTP/2: /php/ is 200');
    is($h->{body}, "ran /php/index.php for 127.0.0.1:" . $t->port,
       '... run by PHP');
}

# --- HTTP_HOST is the host fastd routed on --------------------------------

$r = $t->http("GET http://shop.test/php/index.php HTTP/1.1\r\n"
            . "Host: evil.example\r\n\r\n");
is($r->{body}, 'ran /php/index.php for shop.test',
   'absolute-form: HTTP_HOST is the target\'s authority, not the Host field');
SKIP: {
    skip H2::why_not(), 4 if H2::why_not();
    my $h = H2::py($t, <<'PY', timeout => 60);
c = Raw()
c.req(1, path='/php/index.php', authority='shop.test',
      headers=[('host', 'evil.example')])
r1 = c.response(1, timeout=20)
c.req(3, path='/php/index.php', authority='shop.test',
      headers=[('host', 'SHOP.test')])
r3 = c.response(3, timeout=20)
c.req(5, path='/php/index.php', authority='shop.test')
r5 = c.response(5, timeout=20)
done(s1=r1['status'], b1=r1['body'], s3=r3['status'], b3=r3['body'],
     s5=r5['status'], b5=r5['body'], **c.summary())
PY
    is($h->{s1}, 400, 'HTTP/2: a host field other than :authority is 400')
        or diag(H2::explain($h));
    unlike($h->{b1} // '', qr/ran/, '... and never reaches the application');
    is($h->{b3}, 'ran /php/index.php for shop.test',
       '... one equal to it but for case is served, on the same connection');
    is($h->{b5}, 'ran /php/index.php for shop.test',
       '... and :authority alone is HTTP_HOST');
}

$t->no_alerts;
done_testing;
