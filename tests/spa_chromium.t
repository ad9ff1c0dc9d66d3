#!/usr/bin/perl
# A single-page application served with try_files, in headless Chromium:
# a deep link (/app/route/x, no such file) gets index.html, whose script
# (/assets/app.js, found by $uri) runs and writes into the DOM what it
# saw; --dump-dom shows that text, so the page, its script and its type
# all arrived. A script under a missing name fails to load (404 by =404)
# instead of loading the HTML page.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Path qw(make_path);
use Test::More;

my $chromium = FastdTest::chromium();
plan skip_all => 'chromium is not installed (apt-get install chromium)'
    unless $chromium;

my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $site = "$dir/site";
make_path("$site/assets");
FastdTest::spew("$site/index.html", <<'HTML');
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>spa</title>
<script src="/assets/app.js"></script>
</head>
<body><p id="out">not run</p><p id="miss">pending</p>
<script src="/assets/missing.js"
  onerror="document.getElementById('miss').textContent = 'MISSING errored'"
  onload="document.getElementById('miss').textContent = 'MISSING loaded'">
</script></body></html>
HTML
FastdTest::spew("$site/assets/app.js", <<'JS');
document.addEventListener('DOMContentLoaded', function () {
  document.getElementById('out').textContent =
    'SPA RAN at ' + location.pathname + location.search;
});
JS
$t->write_conf(FastdTest::base_conf(locations => <<"CONF"));
[location /]
root = $site
try_files = \$uri \$uri/ /index.html

[location /assets/]
root = $site
try_files = \$uri =404
CONF
$t->start;
my $port = $t->port;

my $dom = FastdTest::browse($dir, '--virtual-time-budget=5000', '--dump-dom',
                            "http://127.0.0.1:$port/app/route/x?tab=2");
like($dom, qr{<p id="out">SPA RAN at /app/route/x\?tab=2</p>},
     'the deep link loaded index.html and its script ran')
    or diag(substr($dom, 0, 1500) . "\n"
            . (FastdTest::slurp("$dir/console.log") // ''));
like($dom, qr{<p id="miss">MISSING errored</p>},
     'a missing script is an error (404 by =404), not index.html loaded');

$t->stop;
$t->no_alerts;
done_testing;
