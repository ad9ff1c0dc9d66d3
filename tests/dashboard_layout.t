#!/usr/bin/perl
# The dashboard's layout in headless Chromium, with several upstreams of
# long names, health checks and a cache: at 1280x800, 1200x900 and a
# phone's 390x844 no card (and not the page) overflows horizontally, no
# header of the Upstreams and Cache tables breaks over lines, and at 390
# those tables scroll sideways inside their card. A test page frames
# /status.html at the window's width, measures every card's scrollWidth
# against its clientWidth and each header's lines, and writes the verdict
# into its own DOM. Screenshots of the page, 2400 px high, are saved to
# objs/dashboard-WIDTHxHEIGHT.png.

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
  /* a header on more than one line (broken letter by letter when the
   * table was squeezed into its card) */
  var broken = [], heads = 0, scroll = [];
  d.querySelectorAll("#upstreams th, #caches th").forEach(function (th) {
    var r = d.createRange();
    r.selectNodeContents(th);
    heads++;
    if (r.getClientRects().length !== 1) broken.push(th.textContent);
  });
  ["upstreams", "caches"].forEach(function (id) {
    var w = d.querySelector("#" + id + " .scroll");
    scroll.push(id + ":" + (w && w.scrollWidth > w.clientWidth ? "scrolls"
                                                               : "fits"));
  });
  document.getElementById("out").textContent = "RESULT rows=" +
    d.querySelectorAll("#upstreams tr").length + " heads=" + heads +
    " broken=" + broken.join(",") + " scroll=" + scroll.join(",") +
    " bad=" + bad.join("; ");
}, 3000);
</script></body></html>
HTML

# health checks (their check_* columns) on half the groups, and a cache
my ($locs, $ups) = ('', '');
for my $i (1 .. 6) {
    my $name = "application-backend-pool-number-$i";
    $locs .= "[location /u$i/]\nhandler = proxy\nupstream = $name\n"
           . ($i == 1 ? "proxy_cache = responses-of-the-application\n" : '')
           . "\n";
    $ups .= "[upstream $name]\nserver = 127.0.0.1:" . (40000 + $i)
          . "\nserver = 127.0.0.1:" . (41000 + $i) . "\n"
          . ($i % 2 ? "health_check = /healthz interval=200ms\n" : '')
          . "\n";
}
$t->write_conf(FastdTest::base_conf(
    locations => "[location = /status]\nhandler = status\n\n"
               . "[location = /layout.html]\nroot = $dir/www\n\n$locs",
    extra => $ups . "[cache responses-of-the-application]\n"
           . "path = $dir/cache\n\n"));
$t->start;
my $port = $t->port;
# some traffic, so the tables have failures and times in them
$t->get("/u$_/x") for 1 .. 6;
# the probes' verdicts, so the table has its check_* columns
ok(FastdTest::wait_for(sub {
    my $r = $t->get('/status');
    return $r && $r->body =~ /"check_status"/;
}, 15, 0.05), 'the health checks reported');

sub browse { FastdTest::browse($dir, @_) }

mkdir FastdTest::root() . '/objs' unless -d FastdTest::root() . '/objs';
for my $size ('1280,800', '1200,900', '390,844') {
    my $dom = browse('--virtual-time-budget=8000', "--window-size=$size",
                     '--dump-dom', "http://127.0.0.1:$port/layout.html");
    my ($rows, $heads, $broken, $scroll, $bad) = $dom =~
        /RESULT rows=(\d+) heads=(\d+) broken=(.*?) scroll=(\S*) bad=([^<]*)/;
    ok(defined $rows && $rows >= 13, "$size: the Upstreams table has its 12 servers")
        or diag(substr($dom, -1500));
    is($bad, '', "$size: no card overflows horizontally");
    ok($heads && $heads > 20, "$size: the Upstreams (check_* too) and Cache "
       . "headers (" . ($heads // 0) . ")");
    is($broken, '', "$size: every header on one line");
    is($scroll, 'upstreams:scrolls,caches:scrolls',
       "$size: the Upstreams and Cache tables scroll sideways in their card")
        if $size eq '390,844';
    (my $png = FastdTest::root() . "/objs/dashboard-$size.png") =~ s/,/x/;
    unlink $png;
    # the whole page, down to the Upstreams and Cache cards
    (my $tall = $size) =~ s/,\d+/,2400/;
    browse('--virtual-time-budget=4000', "--window-size=$tall",
           "--screenshot=$png", "http://127.0.0.1:$port/status.html");
    ok(-s $png, "$size: screenshot $png");
}

$t->stop;
$t->no_alerts(allow => qr/connect\(\) failed|health/);
done_testing();
