#!/usr/bin/perl
# [map], [geo] and [split_clients]: variables made from variables. Exact
# names (case-insensitive), hostname wildcards, regexes with captures,
# defaults, a map reading another's target, a map reading itself (empty,
# logged, nothing else breaks), networks with the longest match and
# trusted proxies, MurmurHash2 parts; used before and after their
# sections in the file, in add_header, return and the access log, over
# HTTP/1.1 and HTTP/2. The same tables in nginx give the same answers
# (when nginx is installed), and every configuration error names its
# file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Temp qw(tempdir);
use POSIX ();
use Test::More;

# the tables, in fastd's words (nginx's below)
my $maps = <<'EOF';
[map $arg_x $y]
match = Foo yes
match = ~^BAR(.*) re$1
default = no

[map $arg_h $hy]
hostnames = on
match = .example.com dot
match = *.a.example.com star
match = www.example.* tail
match = exact.example.com exact
default = no

[split_clients "${arg_k}AAA" $sp]
part = 0.5% .one
part = 2.0% .two
part = 50% half
part = * rest

[map $uri $api]
match = ~^/m/v(?<ver>\d+)/(.*)$ "v$ver:$2"
match = ~*^/m/UP upper
match = /m/plain plain
default = none

[geo $arg_ip $g]
match = 10.0.0.0/8 ten
match = 10.1.0.0/16 ten-one
match = 10.1.2.3 host
match = 2001:db8::/32 doc6
default = far

[geo $arg_ip $g0]
match = 0.0.0.0/0 all
match = 128.0.0.0/1 upper
match = 192.0.2.128/25 half
match = 192.0.2.255/32 top

[geo $gx]
proxy = 127.0.0.0/8
proxy_recursive = on
match = 192.0.2.0/24 test-net
match = 127.0.0.1 loopback
default = other

[map $y $chain]
match = yes chained-yes
default = "chained-$y"

[map $arg_e $e]
match = "" empty
default = nonempty

[map $c2 $c1]
default = one-$c2

[map $c1 $c2]
default = two-$c1

[map $arg_v $vol]
volatile = on
match = a A
default = B

EOF

my $locations = <<'EOF';
[location /m/]
return = 200 "y=$y hy=$hy sp=$sp api=$api chain=$chain e=$e vol=$vol"

[location /geo]
return = 200 "g=$g gx=$gx"

[location /geo0]
return = 200 "g0=$g0"

[location /loop]
return = 200 "c1=$c1"

EOF

my $conf = FastdTest::base_conf(
    http => { add_header => 'X-Conn $connection_upgrade always',
              access_log => '%%DIR%%/access.log format=maps buffer=0',
              log_format => 'maps "$uri $y $g"' },
    server => { listen => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% "
                        . "http2" },
    # the map [http] uses comes after everything that uses it
    locations => $locations,
    extra => $maps . "[map \$http_upgrade \$connection_upgrade]\n"
                   . "default = upgrade\nmatch = \"\" close\n\n");
my $t = FastdTest->new(conf => $conf);
$t->start;

sub body { my ($path, @h) = @_; my $r = $t->get($path, @h); $r->body }

# --- map: names, regexes and captures, default -----------------------------
like(body('/m/?x=foo'), qr/^y=yes /, 'a name matches');
like(body('/m/?x=FOO'), qr/^y=yes /, '... case-insensitively, as nginx');
like(body('/m/?x=BARz'), qr/^y=rez /, 'a regex, its capture in the value');
like(body('/m/?x=barz'), qr/^y=no /, 'a regex is case-sensitive with ~');
like(body('/m/?x=zzz'), qr/^y=no /, 'nothing matches: the default');
like(body('/m/v2/users'), qr/ api=v2:users /,
     'named and numbered captures in a value');
like(body('/m/up/x'), qr/ api=upper /, '~*: case-insensitive regex');
like(body('/m/plain'), qr/ api=plain /, 'a name wins before the regexes');
like(body('/m/other'), qr/ api=none /, 'the default');

# --- hostnames ----------------------------------------------------------------
my %host = ('example.com' => 'dot', 'a.example.com' => 'dot',
            'b.a.example.com' => 'star', 'www.example.org' => 'tail',
            'EXAMPLE.COM.' => 'dot', 'exact.example.com' => 'exact',
            'example.org' => 'no');
for my $h (sort keys %host) {
    like(body("/m/?h=$h"), qr/ hy=$host{$h} /, "hostnames: $h");
}

# --- map of a map, empty source, volatile ------------------------------------
like(body('/m/?x=foo'), qr/ chain=chained-yes /, 'a map reads another map');
like(body('/m/?x=q'), qr/ chain=chained-no /,
     '... and its value in a default');
like(body('/m/'), qr/ e=empty /, '"" matches the empty source');
like(body('/m/?e=1'), qr/ e=nonempty /, 'and not a set one');
like(body('/m/?v=a'), qr/ vol=A$/m, 'volatile = on works as a map');

# --- a map that reads itself: empty, logged, the worker goes on ---------------
my $r = $t->get('/loop');
is($r->status, 200, 'a loop of maps: the request is answered');
is($r->body, 'c1=one-two-', '... the read of itself is empty');
ok(FastdTest::wait_for(sub { $t->error_log =~ /\$c1 reads itself/ }, 5),
   '... and logged');
is($t->get('/m/?x=foo')->status, 200, 'the next request is served');

# --- add_header with a map declared after [http], over HTTP/1.1 and h2 -------
$r = $t->get('/plaintext');
is($r->header('x-conn'), 'close', 'no Upgrade: close (match = "")');
$r = $t->get('/plaintext', Upgrade => 'websocket');
is($r->header('x-conn'), 'upgrade', 'Upgrade: the default');
SKIP: {
    skip 'no nghttp', 1 unless -x '/usr/bin/nghttp';
    my $out = `nghttp -v http://127.0.0.1:@{[$t->port2]}/m/?x=Foo 2>&1`;
    like($out, qr/y=yes /, 'over HTTP/2');
}

# --- the access log ------------------------------------------------------------
$t->get('/m/?x=foo&ip=10.1.2.3');
ok(FastdTest::wait_for(sub {
       (FastdTest::slurp($t->dir . '/access.log') // '')
           =~ m{^"?/m/ yes host"?$}m }, 5),
   'map and geo targets in a log_format')
    or diag(FastdTest::slurp($t->dir . '/access.log'));

# --- geo -------------------------------------------------------------------------
my %geo = ('10.2.3.4' => 'ten', '10.1.9.9' => 'ten-one', '10.1.2.3' => 'host',
           '2001:db8::1' => 'doc6', '2001:db9::1' => 'far',
           '8.8.8.8' => 'far', 'nonsense' => 'far', '' => 'far',
           '[2001:db8::5]:80' => 'doc6');
for my $ip (sort keys %geo) {
    like(body("/geo?ip=$ip"), qr/^g=$geo{$ip} /, "geo: '$ip' is $geo{$ip}");
}
# short prefixes, /0 to /32 (IPv4 is compared as one number)
my %g0 = ('1.2.3.4' => 'all', '127.255.255.255' => 'all',
          '128.0.0.0' => 'upper', '200.1.1.1' => 'upper',
          '192.0.2.127' => 'upper', '192.0.2.128' => 'half',
          '192.0.2.254' => 'half', '192.0.2.255' => 'top');
for my $ip (sort keys %g0) {
    like(body("/geo0?ip=$ip"), qr/^g0=$g0{$ip}$/, "geo: '$ip' is $g0{$ip}");
}
like(body('/geo'), qr/ gx=loopback$/m, 'geo of $remote_addr');
like(body('/geo', 'X-Forwarded-For' => '192.0.2.7'), qr/ gx=test-net$/m,
     'from a trusted proxy: X-Forwarded-For\'s address');
like(body('/geo', 'X-Forwarded-For' => '192.0.2.7, 127.0.0.5'),
     qr/ gx=test-net$/m, 'proxy_recursive: past the trusted ones');
like(body('/geo', 'X-Forwarded-For' => '8.8.8.8, 192.0.2.9'),
     qr/ gx=test-net$/m, '... to the last untrusted one');
like(body('/geo', 'X-Forwarded-For' => 'garbage'), qr/ gx=loopback$/m,
     'a header that is no address: the peer\'s');

# --- split_clients: the parts, and nginx's buckets ---------------------------------
my %count;
my @keys = map { "k$_" } 1 .. 300;
my %fastd_sp;
for my $k (@keys) {
    my ($sp) = body("/m/?k=$k") =~ / sp=(\S*) /;
    $fastd_sp{$k} = $sp;
    $count{$sp}++;
}
ok(($count{half} // 0) > 100 && ($count{rest} // 0) > 100,
   'split_clients: about half and half of 300 keys') or diag explain \%count;

# --- nginx, with the same tables, answers the same ---------------------------------
SKIP: {
    my $nginx = (grep { -x } qw(/usr/sbin/nginx /usr/bin/nginx))[0];
    skip 'no nginx', 3 unless $nginx;
    my $dir = tempdir(CLEANUP => 1);
    my $port = FastdTest::free_port();
    FastdTest::spew("$dir/nginx.conf", <<"EOF");
daemon off; worker_processes 1; error_log $dir/error.log; pid $dir/nginx.pid;
events {}
http {
  access_log off;
  map \$arg_x \$y { Foo yes; ~^BAR(.*) "re\$1"; default no; }
  map \$arg_h \$hy { hostnames; .example.com dot; *.a.example.com star;
                    www.example.* tail; exact.example.com exact; default no; }
  split_clients "\${arg_k}AAA" \$sp { 0.5% .one; 2.0% .two; 50% half; * rest; }
  server { listen 127.0.0.1:$port;
           location / { return 200 "y=\$y hy=\$hy sp=\$sp\\n"; } }
}
EOF
    my $pid = fork // die;
    if ($pid == 0) {
        open STDERR, '>', "$dir/stderr";
        { no warnings 'exec'; exec $nginx, '-c', "$dir/nginx.conf", '-p', $dir; }
        POSIX::_exit(127);
    }
    ok(FastdTest::wait_for(sub { $t->port_open($port) }, 10),
       'nginx started') or do { kill 'TERM', $pid; skip 'nginx', 2 };
    my $ng = sub {
        my $r = $t->http("GET $_[0] HTTP/1.1\r\nHost: localhost\r\n\r\n",
                         port => $port);
        $r ? $r->body : '';
    };
    my @diff;
    for my $k (@keys) {
        my ($sp) = $ng->("/?k=$k") =~ / sp=(\S*)/;
        push @diff, "$k: fastd $fastd_sp{$k}, nginx " . ($sp // '?')
            if ($sp // '') ne $fastd_sp{$k};
    }
    is(scalar @diff, 0, 'split_clients: every key in nginx\'s bucket')
        or diag join "\n", @diff[0 .. ($#diff < 9 ? $#diff : 9)];
    my @mdiff;
    for my $q ((map { "x=$_" } qw(foo Foo FOO BARz barz zzz)),
               (map { "h=$_" } sort keys %host)) {
        my ($fy, $fh) = body("/m/?$q") =~ /^y=(\S*) hy=(\S*) /;
        my ($ny, $nh) = $ng->("/?$q")
            =~ /^y=(\S*) hy=(\S*) /;
        push @mdiff, "$q: fastd $fy/$fh, nginx " . ($ny // '?') . '/'
            . ($nh // '?') if "$fy/$fh" ne ($ny // '') . '/' . ($nh // '');
    }
    is(scalar @mdiff, 0, 'map and hostnames: nginx\'s answers')
        or diag join "\n", @mdiff;
    kill 'QUIT', $pid;
    waitpid $pid, 0;
}

# --- reloads: a bad map keeps the old ones serving; a new one serves ---------
{
    (my $bad = $conf) =~ s/^\[map \$arg_x \$y\]$/[map \$arg_x \$host]/m;
    $t->write_conf($bad);
    my %old = map { $_ => 1 } $t->workers;
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { $t->error_log =~ /reload failed.*\$host is fastd's own/ }, 10),
       'reload with a bad map: refused, with the reason');
    like(body('/m/?x=foo'), qr/^y=yes /, '... the old maps serve on');
    (my $new = $conf) =~ s/^default = no$/default = changed/m;
    $t->write_conf($new);
    $t->signal('HUP');
    ok(FastdTest::wait_for(sub { my @w = $t->workers; @w && !grep { $old{$_} } @w }, 10),
       'a good reload: new workers');
    like(body('/m/?x=zzz'), qr/^y=changed /, '... with the new map');
    like(body('/m/?x=Foo'), qr/^y=yes /, '... and its other lines');
}

$t->no_alerts;

# --- configuration errors name their file:line ------------------------------------
sub conf_error {
    my ($extra, $re, $name, %o) = @_;
    my $dir = tempdir(CLEANUP => 1);
    my $conf = FastdTest::base_conf(locations => $o{locations} // '',
                                    extra => $extra);
    $conf =~ s/%%PORT%%/1/g;
    $conf =~ s/%%\w+%%/$dir/g;
    FastdTest::spew("$dir/fastd.conf", $conf);
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', "$dir/fastd.conf");
    isnt($code, 0, "$name: -t fails");
    like($out, $re, "$name: the message") or diag $out;
}
conf_error("[map \$arg_a \$host]\ndefault = x\n",
           qr/fastd\.conf:\d+: \$host is fastd's own variable/,
           'a target that is a core variable');
conf_error("[map \$arg_a \$t]\ndefault = x\n[map \$arg_b \$t]\n",
           qr/fastd\.conf:\d+: \$t is declared twice/, 'a target twice');
conf_error("[map \$nosuch \$t]\ndefault = x\n",
           qr/fastd\.conf:\d+: map: unknown variable "\$nosuch"/,
           'an unknown source');
conf_error("[map \$arg_a \$t]\nmatch = ~(unclosed x\n",
           qr/fastd\.conf:\d+: match: regex "\(unclosed" at offset/,
           'a bad regex');
conf_error("[map \$arg_a \$t]\nmatch = ~^(?<n>a) \$m\n",
           qr/fastd\.conf:\d+: match: unknown variable "\$m" \(not a known/,
           'a capture name the regex lacks');
conf_error("[map \$arg_a \$t]\nmatch = a 1\nmatch = A 2\n",
           qr/fastd\.conf:\d+: match "a" twice in \[map .*first at line/,
           'a name twice');
conf_error("[map \$arg_a \$t]\nmatch = a 1\nhostnames = on\n",
           qr/fastd\.conf:\d+: hostnames must come before the first match/,
           'hostnames after a match');
conf_error("[map \$arg_a]\n", qr/fastd\.conf:\d+: \[map \$arg_a\] needs a source/,
           'a map without a target');
conf_error("[map \$arg_a t]\n", qr/fastd\.conf:\d+: \[map\]: "t" is not a \$variable/,
           'a target without "$"');
conf_error("[map \$arg_a \$t]\nmatch = lonely\n",
           qr/fastd\.conf:\d+: match needs PATTERN VALUE/, 'a match without value');
conf_error("[geo \$g]\nmatch = 10.0.0.1/8 x\n",
           qr/fastd\.conf:\d+: match: bad network "10\.0\.0\.1\/8"/,
           'a network with bits past its length');
conf_error("[geo \$g]\nmatch = 10.0.0.0/8 x\nmatch = 10.0.0.0/8 y\n",
           qr/fastd\.conf:\d+: match: network 10\.0\.0\.0\/8 twice/,
           'a network twice');
conf_error("[split_clients \$arg_a \$s]\npart = 60% a\npart = 50% b\n",
           qr/fastd\.conf:\d+: part: the parts add up to more than 100%/,
           'parts over 100%');
conf_error("[split_clients \$arg_a \$s]\npart = 1.234% a\n",
           qr/fastd\.conf:\d+: part: "1\.234%" is not a percentage/,
           'three decimals');
conf_error("[split_clients \$arg_a \$s]\npart = * a\npart = 5% b\n",
           qr/fastd\.conf:\d+: part after "\*"/, 'a part after *');
conf_error('', qr/fastd\.conf:\d+: unknown variable "\$nomap"/,
           'a target no section declares',
           locations => "[location /x]\nreturn = 200 \$nomap\n");

done_testing;
