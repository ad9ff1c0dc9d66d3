#!/usr/bin/perl
# The live dashboard in a real browser: headless Chromium (Debian's
# chromium) loads /status.html from a fastd under load. The charts must
# update (the request counter differs between polls and the rate chart
# gets points), no console error may occur, and a screenshot is saved to
# objs/dashboard.png.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;
use POSIX qw(_exit WNOHANG);
use Time::HiRes qw(time sleep);

my $chromium = FastdTest::chromium();
plan skip_all => 'chromium is not installed (apt-get install chromium)'
    unless $chromium;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    locations => "[location = /status]\nhandler = status\n\n"
               . "[location = /db]\nhandler = db\n\n"
               . "[database world]\nurl = sqlite:%%DIR%%/world.db\ninit = "
               . FastdTest::root() . "/conf/world.sqlite.sql\n"));
$t->start;
is($t->get('/db')->status, 200, 'a database query, for its panel') for 1 .. 3;
my $port = $t->port;
my $dir = $t->dir;

# load: a child making plaintext requests until told to stop (bounded)
my $load = fork // die "fork: $!";
if ($load == 0) {
    my $end = time + 40;
    while (time < $end) {
        my $r = eval { $t->get('/plaintext') };
        sleep 0.005;
    }
    _exit(0);
}

sub browse { FastdTest::browse($dir, @_) }

my $url = "http://127.0.0.1:$port/status.html";
my $dom = browse('--virtual-time-budget=6000', '--dump-dom', $url);
my ($polls) = $dom =~ /data-polls="(\d+)"/;
my ($seen) = $dom =~ /data-requests="([\d ]+)"/;
my ($points) = $dom =~ /data-rate-points="(\d+)"/;
ok(defined $polls && $polls >= 3, 'the page polled /status several times')
    or diag(substr($dom, 0, 2000));
my @v = split ' ', $seen // '';
my %distinct = map { $_ => 1 } @v;
ok(@v >= 3 && keys(%distinct) >= 2, "the request counter changes between polls (@v)");
ok(@v && $v[-1] > $v[0], 'and grows');
ok(defined $points && $points >= 2, 'the rate chart has points');
like($dom, qr/database world.*busy \d+ \/ \d+ connections.*queries \d+/s,
     'the database panel: connections, queries');
unlike($dom, qr/<[^>]*id="state"[^>]*class="err"|<[^>]*class="err"[^>]*id="state"/,
       'no fetch error shown on the page');

mkdir 'objs' unless -d 'objs';
my $png = FastdTest::root() . '/objs/dashboard.png';
unlink $png;
browse('--virtual-time-budget=4000', '--window-size=1280,1000',
       "--screenshot=$png", $url);
ok(-s $png, "screenshot saved to objs/dashboard.png");

my $console = FastdTest::slurp("$dir/console.log") // '';
my @errors = grep { /CONSOLE/ && /(Uncaught|Error|error)/ } split /\n/, $console;
is(scalar @errors, 0, 'no console error') or diag(join "\n", @errors);

kill 'TERM', $load;
waitpid($load, 0);
$t->no_alerts;
done_testing();
