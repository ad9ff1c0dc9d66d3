#!/usr/bin/perl
# autoindex_exact_size and autoindex_localtime (as nginx's): the HTML
# listing's sizes in bytes (the default) or rounded to K, M, G above 9999
# bytes, half up; its dates in UTC (the default) or the server's time zone
# (TZ); the JSON form keeps bytes and GMT whatever they say; bad values.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

# a zone without tzdata: POSIX "name offset", 3 hours east of UTC
local $ENV{TZ} = 'FDT-3';

my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
make_path("$dir/www/d");
my %sizes = (small => 9999, k10 => 10000, k15 => 15 * 1024 + 511,
             k16 => 15 * 1024 + 512, m2 => 1024 * 1024 * 3 / 2,
             m1 => 1024 * 1024 + 524287);
my $when = 1700000000; # Tue, 14 Nov 2023 22:13:20 GMT
for my $f (keys %sizes) {
    my $p = "$dir/www/d/$f.bin";
    open my $fh, '>', $p or die "$p: $!";
    truncate $fh, $sizes{$f} or die "truncate: $!";
    close $fh;
    utime $when, $when, $p or die "utime: $!";
}

$t->write_conf(FastdTest::base_conf(locations => <<"CONF"));
[location /exact/]
alias = $dir/www/d/
autoindex = on

[location /round/]
alias = $dir/www/d/
autoindex = on
autoindex_exact_size = off

[location /local/]
alias = $dir/www/d/
autoindex = on
autoindex_localtime = on

[location /json/]
alias = $dir/www/d/
autoindex = on
autoindex_format = json
autoindex_exact_size = off
autoindex_localtime = on
CONF
$t->start;

sub entry {
    my ($body, $name) = @_;
    my ($line) = $body =~ m{^(<a href="\Q$name\E">.*)$}m;
    return $line // '';
}

my $b = $t->get('/exact/')->body;
like(entry($b, 'k10.bin'), qr{ 14-Nov-2023 22:13 10000$},
     'default: bytes, and UTC');
like(entry($b, 'm2.bin'), qr{ 1572864$}, 'default: bytes for MBs too');

$b = $t->get('/round/')->body;
like(entry($b, 'small.bin'), qr{ 9999$}, 'exact_size off: 9999 stays bytes');
like(entry($b, 'k10.bin'), qr{ 10K$}, '... 10000 is 10K (half up)');
like(entry($b, 'k15.bin'), qr{ 15K$}, '... 15K + 511 is 15K');
like(entry($b, 'k16.bin'), qr{ 16K$}, '... 15K + 512 is 16K');
like(entry($b, 'm1.bin'), qr{ 1M$}, '... 1M + 512K - 1 is 1M');
like(entry($b, 'm2.bin'), qr{ 2M$}, '... 1.5M is 2M');

$b = $t->get('/local/')->body;
like(entry($b, 'k10.bin'), qr{ 15-Nov-2023 01:13 10000$},
     'localtime on: the dates in TZ (UTC+3)');

$b = $t->get('/json/')->body;
like($b, qr{"name":"m2\.bin","type":"file","mtime":"Tue, 14 Nov 2023 22:13:20 GMT","size":1572864},
     'JSON: bytes and GMT whatever the flags say');

$t->stop;
$t->no_alerts;

my $bad = FastdTest::base_conf(
    locations => "[location /x/]\nautoindex = on\nautoindex_exact_size = maybe\n");
my $path = $t->write_conf($bad, 'bad.conf');
my $line = FastdTest::line_of($bad, qr/autoindex_exact_size/);
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
isnt($rc, 0, 'a bad autoindex_exact_size fails the config test');
like($out, qr/bad\.conf:$line: /, '... naming file:line') or diag($out);

done_testing;
