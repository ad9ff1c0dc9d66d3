#!/usr/bin/perl
# [upstream NAME] sections are the core's, not the proxy module's: a fastd
# built --without-proxy (in a copy of the tree) still takes them, and
# handler = fastcgi with pass = fastcgi://NAME balances over the group
# against a real php-fpm: a first server that refuses connections is
# failed over to the next, the request answered by PHP, and /status
# reports the group's servers. Skips only when php-fpm is not installed.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use PhpFpm;
use IO::Socket::INET;
use Test::More;

FastdTest::skip_in_sanitizer_stage('it builds a plain fastd of its own');

plan skip_all => 'php-fpm not installed (apt-get install php-fpm)'
    unless PhpFpm::binary();

my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $src = "$dir/src";

# a copy of the tree (with the objects of the fastd under test: make
# compiles no more than the module list and links), built without the
# proxy
eval { FastdTest::copy_tree($src); 1 } or BAIL_OUT($@);
my $out = `cd '$src' && ./configure --without-proxy 2>&1`;
is($?, 0, './configure --without-proxy') or diag($out);
unlike((grep { /^\s*modules:/ } split /\n/, $out)[0] // '', qr/\bproxy\b/,
       '... builds no proxy');
$out = `make -s -C '$src' -j2 build 2>&1`;
is($?, 0, 'make') or diag($out);
my $bin = "$src/objs/fastd";
ok(-x $bin, 'objs/fastd built') or BAIL_OUT('no binary');

my $fpm_port = FastdTest::free_port();
my $dead_port = FastdTest::dead_port();
my $html = "$dir/html";
mkdir $html or die;
FastdTest::spew("$html/hello.php",
                "<?php echo 'php says ', \$_SERVER['SCRIPT_NAME'];\n");
my $php = PhpFpm->start_tcp($dir, $fpm_port);
ok($php->up, 'php-fpm accepts connections') or diag($php->output);

my $conf = FastdTest::base_conf(
    server => { root => $html },
    locations => <<"L");
[location ~ \\.php\$]
handler = fastcgi
pass = fastcgi://php

[location = /status]
handler = status
L
$conf .= <<"U";
[upstream php]
server = 127.0.0.1:$dead_port
server = 127.0.0.1:$fpm_port
U
$t->write_conf($conf);
{
    local $FastdTest::BIN = $bin;
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
    is($rc, 0, 'without the proxy: [upstream php] and pass = fastcgi://php load')
        or diag($o);
    $t->start;
}

for my $i (1 .. 4) {
    my $r = $t->get('/hello.php');
    is("$r->{status} $r->{body}", '200 php says /hello.php',
       "request $i: answered by php-fpm through the group");
}
my $st = $t->get('/status?format=prometheus')->{body} // '';
like($st, qr/fastd_upstream_requests_total\{upstream="php",server="127\.0\.0\.1:$fpm_port"\} [1-9]/,
     '/status counts the group\'s live server');
like($st, qr/fastd_upstream_fails_total\{upstream="php",server="127\.0\.0\.1:$dead_port"\} [1-9]/,
     '... and the refusing one\'s failure');
$t->stop;
$php->stop;
done_testing;
