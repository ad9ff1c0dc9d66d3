#!/usr/bin/perl
# conf/examples/: every example passes fastd -t (rewritten by the table in
# tests/lib/Examples.pm: ports, backends, paths; nothing else), opens with
# the comment block its users need (when to use it, what it does, what to
# change), is listed in conf/examples/README.md, and has an integration
# test of its own (tests/examples_NAME.t) that starts it against real
# backends.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Examples;
use Test::More;

my @names = Examples::names();
ok(@names >= 7, scalar(@names) . ' examples in conf/examples/');

my $index = FastdTest::slurp("$Examples::DIR/README.md") // '';
my %listed = map { $_ => 1 } $index =~ /^\| \[([\w.-]+)\.conf\]/mg;

for my $name (@names) {
    my $text = Examples::text($name);
    my ($head) = $text =~ /\A((?:;[^\n]*\n)+)/;
    $head //= '';
    like($head, qr/^; When to use it:/m, "$name: says when to use it");
    like($head, qr/^; What it does:/m, "$name: says what it does");
    like($head, qr/^; What to change:/m, "$name: says what to change");
    ok(delete $listed{$name}, "$name: listed in conf/examples/README.md");
    (my $test = "examples_$name.t") =~ tr/-/_/;
    ok(-f "$FindBin::Bin/$test", "$name: tested by tests/$test");

    my $ex = Examples->new($name);
    my ($rc, $out) = $ex->check;
    is($rc, 0, "$name: fastd -t") or diag($out);
}
ok(!%listed, 'README.md lists no example that is not there')
    or diag(join ' ', sort keys %listed);

# the table leaves nothing of the machine's: a path it does not know is
# an error, not a file the test would read or write
my $ex = Examples->new('static-https');
ok(!eval { $ex->rewrite("[main]\npid = /var/run/x.pid\n"); 1 }
   && $@ =~ /no substitution for: pid = \/var\/run\/x\.pid/,
   'a path the table does not know stops the test');
ok(!eval { $ex->rewrite("[upstream a]\nserver = 10.9.9.9:80\n", {}); 1 }
   && $@ =~ /maps no backend for 10\.9\.9\.9:80/,
   'so does a backend the test does not map');

done_testing;
