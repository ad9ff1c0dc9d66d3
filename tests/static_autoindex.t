#!/usr/bin/perl
# autoindex: a directory without an index file listed as HTML or JSON;
# hostile names (<script>, quotes, spaces, non-UTF-8 bytes) harmless;
# directories first, sorted, dot-files and symlinks hidden, sizes and
# dates; off by default (403); HEAD; 10,000 entries; HTTP/2; bad values.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use H2;
use File::Path qw(make_path);
use JSON::PP ();
use Test::More;

my $locations = <<'EOF2';
[location /h/]
alias = %%DIR%%/www/d/
autoindex = on

[location /j/]
alias = %%DIR%%/www/d/
autoindex = on
autoindex_format = json

[location /big/]
autoindex = on
autoindex_format = json

[location /bigh/]
alias = %%DIR%%/www/big/
autoindex = on

[location /idx/]
autoindex = on

EOF2

my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => '%%DIR%%/www' }, locations => $locations));
my $dir = $t->dir;
my $d = "$dir/www/d";
make_path("$d/sub dir", "$d/a<dir>", "$d/.hiddendir", "$dir/www/idx", "$dir/www/big");
my %files = ('<script>alert(1)' => 5, 'quote"and\'apos' => 1,
             'sp ace.txt' => 12, "bad\xff\xfe.bin" => 3, 'z.txt' => 100,
             'A.txt' => 7, 'a&b?c#d:e.txt' => 2, '%2e%2e' => 4);
FastdTest::spew("$d/$_", 'x' x $files{$_}) for keys %files;
FastdTest::spew("$d/.secret", "hidden\n");
FastdTest::spew("$dir/www/idx/index.html", "the index\n");
FastdTest::spew("$dir/outside.txt", "outside\n");
symlink("../../outside.txt", "$d/link.txt") or die "symlink: $!";
my $t0 = 784111777;    # Sun, 06 Nov 1994 08:49:37 GMT
utime $t0, $t0, "$d/z.txt" or die "utime: $!";
for my $i (1 .. 10000) {
    open my $fh, '>', sprintf("$dir/www/big/f%05d", $i) or die "create: $!";
    close $fh;
}
$t->start;

sub get { my ($p, %h) = @_; return $t->get($p, %h) }

# --- off by default --------------------------------------------------------------------
is(get('/d/')->status, 403, 'autoindex off (default): 403 as before');
is(get('/idx/')->body, "the index\n", 'an index file wins over the listing');

# --- HTML ---------------------------------------------------------------------------------
my $r = get('/h/');
is($r->status, 200, 'html: 200');
is($r->header('content-type'), 'text/html; charset=utf-8', 'html: type');
my $html = $r->body;
unlike($html, qr/<script>/, 'html: no raw <script>');
like($html, qr{<a href="%3Cscript%3Ealert%281%29">&lt;script&gt;alert\(1\)</a>},
     'html: <script> escaped in the link and the text');
like($html, qr{<a href="quote%22and%27apos">quote&quot;and&#39;apos</a>}, 'html: quotes escaped');
like($html, qr{<a href="sp%20ace.txt">sp ace.txt</a> \S+ \S+ 12\n}, 'html: space, size');
like($html, qr{<a href="bad%FF%FE.bin">bad&#xfffd;&#xfffd;.bin</a>}, 'html: non-UTF-8 bytes');
like($html, qr{<a href="a%26b%3Fc%23d%3Ae.txt">a&amp;b\?c#d:e.txt</a>}, 'html: & ? # : escaped in href');
like($html, qr{<a href="%252e%252e">%2e%2e</a>}, 'html: a % in a name');
like($html, qr{<a href="z.txt">z.txt</a> 06-Nov-1994 08:49 100\n}, 'html: mtime in UTC');
like($html, qr{<a href="sub%20dir/">sub dir/</a> \S+ \S+ -\n}, 'html: directory marked with /');
like($html, qr{<a href="\.\./">\.\./</a>}, 'html: a link up');
unlike($html, qr/secret|hidden/, 'html: dot-files hidden');
unlike($html, qr/link\.txt/, 'html: a symlink (not servable) hidden');
my @names = $html =~ m{<a href="[^"]*">([^<]*)</a>}g;
shift @names;    # ../
is_deeply(\@names, ['a&lt;dir&gt;/', 'sub dir/', '%2e%2e', '&lt;script&gt;alert(1)', 'A.txt',
                    'a&amp;b?c#d:e.txt', 'bad&#xfffd;&#xfffd;.bin', 'quote&quot;and&#39;apos',
                    'sp ace.txt', 'z.txt'], 'html: directories first, then by name');
like($html, qr{<title>Index of /h/</title>}, 'html: title');
is(get('/h/sub%20dir/')->status, 200, 'a listed subdirectory lists too');
is(get('/h/sub%20dir')->status, 301, 'without the slash: 301');

$r = $t->http("HEAD /h/ HTTP/1.1\r\nHost: x\r\n\r\n");
is($r->status, 200, 'HEAD: 200');
is($r->header('content-length'), length $html, 'HEAD: the GET\'s length');
is($r->body, '', 'HEAD: no body');

# --- JSON -----------------------------------------------------------------------------------
$r = get('/j/');
is($r->header('content-type'), 'application/json', 'json: type');
FastdTest::spew("$dir/list.json", $r->body);
my $py = `python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d)); print(d[0]["type"]); print(sum(1 for e in d if e["name"] == "<script>alert(1)" and e["size"] == 5))' $dir/list.json 2>&1`;
is($py, "10\ndirectory\n1\n", 'json: python3 parses it; entries, types, names') or diag($py);
my $j = JSON::PP->new->utf8->decode($r->body);
my ($z) = grep { $_->{name} eq 'z.txt' } @$j;
is_deeply($z, { name => 'z.txt', type => 'file', size => 100,
                mtime => 'Sun, 06 Nov 1994 08:49:37 GMT' }, 'json: a file entry');
my ($sd) = grep { $_->{name} eq 'sub dir' } @$j;
ok($sd && $sd->{type} eq 'directory' && !exists $sd->{size}, 'json: a directory entry');
ok((grep { $_->{name} eq "bad\x{fffd}\x{fffd}.bin" } @$j), 'json: non-UTF-8 as U+FFFD');
ok(!(grep { $_->{name} =~ /^\./ } @$j), 'json: dot-files hidden');

# --- 10,000 entries ----------------------------------------------------------------------------
$r = get('/big/');
is($r->status, 200, '10,000 entries: 200');
$j = JSON::PP->new->decode($r->body);
is(scalar @$j, 10000, '10,000 entries: all listed');
is($j->[0]{name}, 'f00001', '10,000 entries: sorted (first)');
is($j->[-1]{name}, 'f10000', '10,000 entries: sorted (last)');
ok(!defined $r->header('x-autoindex-cut'), '10,000 entries: nothing cut');
$r = get('/bigh/');
my $n = () = $r->body =~ /<a href="f\d{5}">/g;
is($n, 10000, '10,000 entries: html');

$t->no_alerts;
$t->stop;

# --- HTTP/2 ----------------------------------------------------------------------------------
SKIP: {
    skip H2::why_not(), 3 if H2::why_not();
    my $h = FastdTest->new(conf => H2::conf(
        server => { root => "$dir/www" },
        locations => "[location /h/]\nalias = $d/\nautoindex = on\n"));
    $h->start;
    my $c = H2::curl($h, '/h/');
    is($c->{code}, 200, 'h2: 200') or diag($c->{err});
    is($c->{version}, '2', 'h2: HTTP/2 was spoken');
    is($c->{body}, $html, 'h2: the same listing');
    $h->no_alerts;
}

# --- bad values ---------------------------------------------------------------------------------
for my $bad ('autoindex_format = xml', 'autoindex = maybe') {
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        locations => "[location /x/]\n$bad\n"));
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', $c->conf_file);
    my $line = FastdTest::line_of(FastdTest::slurp($c->conf_file), qr/^\Q$bad\E$/);
    is($code, 1, "$bad: config error");
    my ($key) = $bad =~ /^(\w+)/;
    like($out, qr/fastd\.conf:$line: .*$key/, "$bad: names file:line") or diag($out);
}

done_testing;
