#!/usr/bin/perl
# Big configurations load in linear time and memory: a list key repeated
# 100,000 times (a blocklist of deny lines, set_real_ip_from, allow,
# add_header) passes fastd -t within a generous address-space limit (each
# append used to copy the whole list: 20,000 deny lines took 3.7 GB), and
# the rules still work in order. And what is not a configuration file is
# refused with file:line instead of read forever: include = /dev/zero, a
# FIFO, a directory, a file over 16m, and the same as the main file.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use POSIX qw(mkfifo);
use Test::More;

my $t = FastdTest->new;
my $dir = $t->dir;
my $asan = `$FastdTest::BIN -v 2>&1` =~ /--with-sanitizers/;

sub net { my ($i) = @_; sprintf '10.%d.%d.%d', ($i >> 16) & 255, ($i >> 8) & 255, $i & 255 }
sub lines { my ($key, $n, $fmt) = @_; join '', map { "$key = " . $fmt->($_) . "\n" } 0 .. $n - 1 }

# --- 100,000 deny lines ------------------------------------------------------
# [server]'s lines are every location's (each applies them again), so two
# locations make three copies; the others are spread over the levels
my $big = FastdTest::base_conf(
    locations => "[location /a]\nhandler = plaintext\n"
               . lines('add_header', 20_000, sub { "X-H$_[0] v" })
               . "[location /b]\nhandler = plaintext\n"
               . lines('allow', 20_000, sub { net($_[0]) })
               . "allow = 127.0.0.1\ndeny = all\n");
$big =~ s/^\[http\]\n/"[http]\n" . lines('set_real_ip_from', 20_000, sub { net($_[0]) })/me;
$big =~ s/^(root = .*\n)/$1 . lines('deny', 100_000, sub { net($_[0]) }) . "deny = 127.0.0.1\n"/me;
$t->write_conf($big);
{
    # 512 MB of address space, several times what the load takes (under
    # 100 MB); the old quadratic load needed tens of gigabytes. An
    # AddressSanitizer build reserves terabytes of address space up front.
    my $limit = $asan ? '' : 'ulimit -v 524288 && ';
    my $out = `sh -c '${limit}exec "\$0" -t -c "\$1"' $FastdTest::BIN ${\ $t->conf_file} 2>&1`;
    is($?, 0, '-t: 100,000 deny, 20,000 each of set_real_ip_from, allow, '
       . 'add_header' . ($asan ? '' : ', within 512 MB of address space'))
        or diag(substr($out, 0, 2000));
    like($out, qr/test is successful/, '... "test is successful"');
}
$t->start;
is($t->get('/')->{status}, 403, 'the 100,001st deny line, 127.0.0.1, denies');
is($t->get('/a')->{status}, 403, '... in a location that inherits them');
is($t->get('/b')->{status}, 200,
   'a location with rules of its own: its 20,001st allow line allows');
$t->stop;

# --- what is not a configuration file -------------------------------------------
mkfifo("$dir/fifo", 0600) or die "mkfifo: $!";
mkdir "$dir/adir" or die "mkdir: $!";
my $comment = '#' x 1023 . "\n";
FastdTest::spew("$dir/big.conf", $comment x (16 * 1024 + 1)); # 16m + 1k

sub refused {
    my ($name, $args, $re) = @_;
    my ($rc, $out) = FastdTest::run_fastd({ timeout => 20 }, '-t', @$args);
    is($rc, 1, "$name: -t exits 1 (at once, not after reading forever)")
        or diag($out);
    like($out, $re, "$name: says why, where") or diag($out);
}

for my $c (['/dev/zero', qr{include "/dev/zero" is not a regular file}],
           ['fifo', qr{include "\Q$dir\E/fifo" is not a regular file}],
           ['adir', qr{include "\Q$dir\E/adir" is a directory}],
           ['big.conf', qr{include "\Q$dir\E/big\.conf" is larger than 16m}]) {
    my ($inc, $why) = @$c;
    my $text = FastdTest::base_conf(server => { include => $inc });
    my $file = $t->write_conf($text, 'inc.conf');
    my $line = FastdTest::line_of($t->subst($text), qr/^include/);
    refused("include = $inc", ['-c', $file], qr/\Q$file\E:$line: $why/);
}
refused('-c /dev/zero', ['-c', '/dev/zero'],
        qr{/dev/zero: is not a regular file});
refused('-c FIFO', ['-c', "$dir/fifo"],
        qr{\Q$dir\E/fifo: is not a regular file});
refused('-c a file over 16m', ['-c', "$dir/big.conf"],
        qr{\Q$dir\E/big\.conf: is larger than 16m});

done_testing();
