#!/usr/bin/perl
# conf/README.md's configuration reference is what the binary documents: the
# lines between "<!-- fastd -k -->" and "<!-- end fastd -k -->" are
# `fastd -k` (the .doc beside each key's declaration), so a key added,
# moved or changed without `auto/readme-keys` fails here.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $readme = FastdTest::slurp("$FindBin::Bin/../conf/README.md");
my ($block) = $readme =~ /<!-- fastd -k -->\n(.*?)<!-- end fastd -k -->/s;
ok(defined $block, 'conf/README.md has the key reference markers');
my ($rc, $keys) = FastdTest::run_fastd('-k');
is($rc, 0, 'fastd -k exits 0');
my @want = split /\n/, $keys;
my @have = split /\n/, $block // '';
my $i = 0;
$i++ while $i < @want && $i < @have && $want[$i] eq $have[$i];
ok(@want == @have && $i == @want,
   'conf/README.md\'s key reference is fastd -k (run auto/readme-keys)')
    or diag("first difference at line " . ($i + 1) . " of the block:\n"
            . "  fastd -k: " . ($want[$i] // '(end)') . "\n"
            . "  README:   " . ($have[$i] // '(end)'));
done_testing();
