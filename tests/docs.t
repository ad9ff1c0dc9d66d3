#!/usr/bin/perl
# The documentation holds together: every relative link in the Markdown
# pages (README.md, conf/, core/, modules/) reaches a file that exists,
# and an #anchor a heading of that page; every module in auto/modules has
# its section, with an example, in conf/README.md; both manual pages
# render without a warning from groff.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Find;
use File::Basename qw(dirname);
use Test::More;

my $root = "$FindBin::Bin/..";
chdir $root or die "chdir $root: $!";

my @pages = ('README.md');
find({ no_chdir => 1, wanted => sub {
    push @pages, $File::Find::name
        if /\.md$/ && !m{/(?:tmp|cert)/};
} }, grep { -d } qw(conf core modules tests/bench));
@pages = sort @pages;

# GitHub's anchors: lower case, punctuation but - and _ dropped, spaces
# made dashes; a repeated one gets -1, -2, ...
my %anchors;
sub anchors {
    my ($page) = @_;
    return $anchors{$page} if $anchors{$page};
    my (%a, %seen);
    my $in_code = 0;
    for (split /\n/, FastdTest::slurp($page) // '') {
        $in_code = !$in_code if /^```/;
        next if $in_code || !/^#{1,6}\s+(.*?)\s*$/;
        my $s = lc $1;
        $s =~ s/[^a-z0-9 _-]//g;
        $s =~ s/ /-/g;
        my $n = $seen{$s}++;
        $a{$n ? "$s-$n" : $s} = 1;
    }
    return $anchors{$page} = \%a;
}

my ($links, @bad) = (0);
for my $page (@pages) {
    my $text = FastdTest::slurp($page);
    $text =~ s/^```.*?^```//msg;     # links in code blocks are not links
    while ($text =~ /\]\(([^)\s]+)\)/g) {
        my $l = $1;
        next if $l =~ m{^[a-z]+:}i;  # http:, https:, mailto:
        $links++;
        my ($path, $frag) = $l =~ /^([^#]*)(?:#(.*))?$/;
        my $target = $path eq '' ? $page : dirname($page) . "/$path";
        if (!-e $target) {
            push @bad, "$page: $l (no such file)";
        } elsif (defined $frag && -f $target && $target =~ /\.md$/
                 && !anchors($target)->{$frag}) {
            push @bad, "$page: $l (no such heading)";
        }
    }
}
cmp_ok($links, '>', 50, "the pages link to each other ($links links)");
ok(!@bad, 'every relative link and anchor resolves')
    or diag(join "\n", @bad);

# conf/README.md: a "### NAME" section per module, each with an example
my $conf = FastdTest::slurp('conf/README.md');
my @modules = map { /^\s*([a-z_0-9]+)/ ? $1 : () }
              grep { !/^\s*#/ } split /\n/, FastdTest::slurp('auto/modules');
ok(@modules > 10, 'auto/modules lists the modules');
for my $m (@modules) {
    my ($sec) = $conf =~ /^### [^\n]*\b\Q$m\E\b[^\n]*\n(.*?)(?=^##)/ms;
    ok(defined $sec && $sec =~ /```ini\n/,
       "conf/README.md has a section with an example for module $m");
}

# the manual pages
SKIP: {
    skip 'groff is not installed', 3 unless -x '/usr/bin/groff';
    my $bin = FastdTest::bin();
    my $man5 = "$FindBin::Bin/tmp/fastd.conf.5";
    mkdir "$FindBin::Bin/tmp";
    system("auto/man-conf '$bin' > '$man5'");
    is($?, 0, 'auto/man-conf makes fastd.conf(5)');
    for my $page ('core/fastd.8', $man5) {
        my $out = `groff -man -ww -z '$page' 2>&1`;
        is($out, '', "$page renders without a warning") or diag($out);
    }
    unlink $man5;
}

done_testing();
