#!/usr/bin/perl
# The dashboard's layout in headless Chromium, with several upstreams of
# long names: at 1280x800, 1200x900 and a phone's 390x844 no card (and not
# the page) overflows horizontally. A test page frames /status.html at the
# window's width, measures every card's scrollWidth against its
# clientWidth, and writes the verdict into its own DOM. Screenshots are
# saved to objs/dashboard-WIDTHxHEIGHT.png.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;


my $chromium = FastdTest::chromium();
plan skip_all => 'chromium is not installed (apt-get install chromium)'
    unless $chromium;

my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
mkdir "$dir/www" or die "mkdir: $!";
FastdTest::spew("$dir/www/layout.html", <<'HTML');
<!DOCTYPE html>
<html><head><style>body { margin: 0 } iframe { border: 0; width: 100%;
height: 100vh; display: block }</style></head>
<body><iframe id="f" src="/status.html"></iframe><pre id="out">pending</pre>
<script>
setTimeout(function () {
  var d = document.getElementById("f").contentDocument, bad = [];
  d.querySelectorAll("section").forEach(function (s) {
    if (s.scrollWidth > s.clientWidth)
      bad.push(s.querySelector("h2").firstChild.textContent.trim() + " " +
               s.scrollWidth + ">" + s.clientWidth);
  });
  var de = d.documentElement;
  if (de.scrollWidth > de.clientWidth)
    bad.push("page " + de.scrollWidth + ">" + de.clientWidth);
  document.getElementById("out").textContent = "RESULT rows=" +
    d.querySelectorAll("#upstreams tr").length + " bad=" + bad.join("; ");
}, 3000);
</script></body></html>
HTML

my ($locs, $ups) = ('', '');
for my $i (1 .. 6) {
    my $name = "application-backend-pool-number-$i";
    $locs .= "[location /u$i/]\nhandler = proxy\nupstream = $name\n\n";
    $ups .= "[upstream $name]\nserver = 127.0.0.1:" . (40000 + $i)
          . "\nserver = 127.0.0.1:" . (41000 + $i) . "\n\n";
}
$t->write_conf(FastdTest::base_conf(
    locations => "[location = /status]\nhandler = status\n\n"
               . "[location = /layout.html]\nroot = $dir/www\n\n$locs",
    extra => $ups));
$t->start;
my $port = $t->port;
# some traffic, so the tables have failures and times in them
$t->get("/u$_/x") for 1 .. 6;

sub browse { FastdTest::browse($dir, @_) }

mkdir FastdTest::root() . '/objs' unless -d FastdTest::root() . '/objs';
for my $size ('1280,800', '1200,900', '390,844') {
    my $dom = browse('--virtual-time-budget=8000', "--window-size=$size",
                     '--dump-dom', "http://127.0.0.1:$port/layout.html");
    my ($rows, $bad) = $dom =~ /RESULT rows=(\d+) bad=([^<]*)/;
    ok(defined $rows && $rows >= 13, "$size: the Upstreams table has its 12 servers")
        or diag(substr($dom, -1500));
    is($bad, '', "$size: no card overflows horizontally");
    (my $png = FastdTest::root() . "/objs/dashboard-$size.png") =~ s/,/x/;
    unlink $png;
    browse('--virtual-time-budget=4000', "--window-size=$size",
           "--screenshot=$png", "http://127.0.0.1:$port/status.html");
    ok(-s $png, "$size: screenshot $png");
}

$t->stop;
$t->no_alerts(allow => qr/connect\(\) failed/);
done_testing();
