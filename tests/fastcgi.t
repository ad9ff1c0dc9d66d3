#!/usr/bin/perl
# handler = fastcgi against a real php-fpm the test starts itself (its own
# pool config in the test's directory, on a free loopback port): params
# (SCRIPT_FILENAME, QUERY_STRING, a header, PATH_INFO through
# fastcgi_split_path_info), a 50 MB upload and a 20 MB response checked
# by md5, keep-alive reuse (one connection for many requests), 200
# concurrent requests, the read timeout (504), a PHP fatal error (500, its
# stderr a warning in the log), php-fpm stopped (502); and a fake FastCGI
# server sending broken records (502, and the next request still works).
# Skips only when php-fpm is not installed.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use PhpFpm;
use File::Path qw(make_path);
use H2;
use Digest::MD5 qw(md5_hex);
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time);

plan skip_all => 'php-fpm not installed (apt-get install php-fpm)'
    unless PhpFpm::binary();
my $curl = (grep { -x } qw(/usr/bin/curl))[0] or die "curl needed";

# --- a fake FastCGI server: reads one request, answers by SCRIPT_NAME ----

sub rec { my ($type, $data, %o) = @_;
    my $len = $o{len} // length $data;
    return pack('CCnnCC', $o{version} // 1, $type, 1, $len, 0, 0) . $data }
my $cgi_ok = "Content-Type: text/plain\r\n\r\nfake ok";
my $end = rec(3, pack('NCx3', 0, 0));
my %fake = (
    '/bad/good.php'    => rec(6, $cgi_ok) . rec(6, '') . $end,
    '/bad/version.php' => rec(6, $cgi_ok, version => 2) . $end,
    '/bad/type.php'    => rec(9, 'xxxxxxxx') . $end,
    # the record says 1000 bytes, 40 come, then the close
    '/bad/long.php'    => rec(6, "Content-Type: text/plain\r\n\r\npartial", len => 1000),
    '/bad/after.php'   => rec(6, $cgi_ok) . $end . rec(6, 'smuggled'),
    '/bad/nohdr.php'   => rec(6, "no header line\r\n\r\nbody") . $end,
    '/bad/early.php'   => $end,
    '/bad/stderr.php'  => rec(7, "first line\nsecond line\n") . rec(6, $cgi_ok) . $end,
);

my $fake_l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 64, Proto => 'tcp', ReuseAddr => 1)
    or die "listen: $!";
my $fake_port = $fake_l->sockport;
my $fake_pid = fork // die;
if ($fake_pid == 0) {
    $SIG{CHLD} = 'IGNORE';
    while (my $c = $fake_l->accept) {
        if (fork) { close $c; next }
        my ($buf, %p, $params) = ('', ());
        $params = '';
        # records until the empty STDIN one
        while (1) {
            while (length $buf < 8) { sysread($c, $buf, 65536, length $buf) or exit 0 }
            my ($v, $t, $id, $len, $pad) = unpack('CCnnC', $buf);
            while (length $buf < 8 + $len + $pad) { sysread($c, $buf, 65536, length $buf) or exit 0 }
            my $data = substr($buf, 8, $len);
            substr($buf, 0, 8 + $len + $pad) = '';
            $params .= $data if $t == 4;
            last if $t == 5 && $len == 0;
        }
        while (length $params) {
            my @l;
            for (1, 2) {
                my $n = unpack('C', $params);
                if ($n & 0x80) { $n = unpack('N', $params) & 0x7fffffff; substr($params, 0, 4) = '' }
                else { substr($params, 0, 1) = '' }
                push @l, $n;
            }
            my $k = substr($params, 0, $l[0], '');
            $p{$k} = substr($params, 0, $l[1], '');
        }
        syswrite($c, $fake{$p{SCRIPT_NAME} // ''} // rec(6, $cgi_ok) . $end);
        shutdown($c, 1);
        sysread($c, my $x, 1); # until fastd closes
        exit 0;
    }
    exit 0;
}
close $fake_l;

# --- php-fpm --------------------------------------------------------------

my $fpm_port = FastdTest::free_port();
my $t0 = FastdTest->new;
my $dir = $t0->dir;
my $html = "$dir/html";
mkdir $html or die;
mkdir "$html/php" or die;
FastdTest::spew("$html/php/params.php", <<'PHP');
<?php
header('X-From-PHP: yes');
foreach (['SCRIPT_FILENAME', 'SCRIPT_NAME', 'QUERY_STRING', 'PATH_INFO',
          'HTTP_X_HELLO', 'REQUEST_METHOD', 'REQUEST_URI', 'DOCUMENT_ROOT',
          'SERVER_PROTOCOL', 'GATEWAY_INTERFACE', 'REMOTE_ADDR',
          'SERVER_PORT', 'HTTP_PROXY', 'HTTP_HOST'] as $k)
    echo $k, '=', $_SERVER[$k] ?? '(unset)', "\n";
PHP
FastdTest::spew("$html/php/pid.php", "<?php echo getmypid();\n");
make_path("$html/g/up.jpg");
FastdTest::spew("$html/g/t.php", "<?php echo 'guarded ', \$_SERVER['PATH_INFO'] ?? '';\n");
FastdTest::spew("$html/php/hello.php", "<?php echo 'Hello, World!';\n");
FastdTest::spew("$html/php/upload.php", <<'PHP');
<?php
$h = hash_init('md5');
$n = hash_update_stream($h, fopen('php://input', 'rb'));
echo hash_final($h), ' ', $n, ' ', $_SERVER['CONTENT_LENGTH'];
PHP
FastdTest::spew("$html/php/big.php", <<'PHP');
<?php
for ($i = 0; $i < 20480; $i++)
    echo str_pad($i, 1024, '.');
PHP
FastdTest::spew("$html/php/slow.php", "<?php sleep(4); echo 'late';\n");
FastdTest::spew("$html/php/fatal.php",
                "<?php echo 'before'; no_such_function_here();\n");
FastdTest::spew("$html/php/redirect.php",
                "<?php header('Location: /elsewhere'); echo 'moved';\n");
FastdTest::spew("$html/php/status.php",
                "<?php header('Status: 404 Not Here'); echo 'none';\n");
mkdir "$html/php/dir" or die;
FastdTest::spew("$html/php/dir/index.php", "<?php echo 'index ', \$_SERVER['SCRIPT_NAME'];\n");

my $php = PhpFpm->start($dir, <<"FPM");
[test]
listen = 127.0.0.1:$fpm_port
listen.backlog = 1024
pm = static
pm.max_children = 6
catch_workers_output = no
php_admin_flag[display_errors] = off
php_admin_flag[log_errors] = on
php_admin_value[post_max_size] = 100M
php_admin_value[memory_limit] = 256M
php_admin_value[max_execution_time] = 30

[unix]
listen = $dir/fpm.sock
pm = static
pm.max_children = 1
FPM

my $fpm_up = FastdTest::wait_for(sub {
    IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $fpm_port,
                          Proto => 'tcp');
}, 20, 0.05);
$fpm_up &&= FastdTest::wait_for(sub { -S "$dir/fpm.sock" }, 20, 0.05);
ok($fpm_up, 'php-fpm accepts connections (TCP and unix socket)')
    or diag($php->output);

END {
    kill 'TERM', $fake_pid if $fake_pid;
}

my $dead = FastdTest::free_port();
my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { root => $html, listen => '127.0.0.1:%%PORT%% http2' },
    locations => <<"L",
[location ~ ^/php/.+\\.php(/|\$)]
handler = fastcgi
pass = fastcgi://php
fastcgi_split_path_info = ^(.+\\.php)(/.*)\$
max_body_size = 100m

[location ^~ /g/]
handler = fastcgi
pass = fastcgi://php
fastcgi_split_path_info = ^(.+\\.php)(/.*)\$
try_files = \$fastcgi_script_name =404

[location ^~ /php/dir/]
handler = fastcgi
pass = fastcgi://127.0.0.1:$fpm_port
fastcgi_index = index.php

[location ^~ /slow/]
handler = fastcgi
pass = fastcgi://127.0.0.1:$fpm_port
fastcgi_param = SCRIPT_FILENAME $html/php/slow.php
fastcgi_read_timeout = 1s

[location ^~ /unix/]
handler = fastcgi
pass = fastcgi://unix:$dir/fpm.sock
fastcgi_param = SCRIPT_FILENAME $html/php/hello.php

[location ^~ /up/]
handler = fastcgi
pass = fastcgi://127.0.0.1:$fpm_port
fastcgi_param = SCRIPT_FILENAME $html/php/hello.php
add_header = X-Up "\$upstream_addr|\$upstream_status|\$upstream_response_time"

[location ^~ /bad/]
handler = fastcgi
pass = fastcgi://127.0.0.1:$fake_port

[location ^~ /dead/]
handler = fastcgi
pass = fastcgi://127.0.0.1:$dead
L
    extra => <<"U"));
[upstream php]
server = 127.0.0.1:$fpm_port
keepalive = 2
U
$t->start;
my $port = $t->port;

sub curl {
    my (@args) = @_;
    open my $fh, '-|', $curl, '-s', '--no-progress-meter', '-m', '60', @args
        or die;
    local $/;
    my $out = <$fh>;
    close $fh;
    return $out;
}

# connections from fastd to php-fpm, by state: established and time-wait
sub fpm_conns {
    my %n;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        open my $fh, '<', $f or next;
        while (<$fh>) {
            my @c = split;
            next unless $c[2] && $c[2] =~ /:([0-9A-F]{4})$/ && hex($1) == $fpm_port;
            $n{hex $c[3]}++;
        }
    }
    return ($n{1} // 0) + ($n{6} // 0); # ESTABLISHED, TIME_WAIT
}

# --- params ---------------------------------------------------------------

my $r = $t->get('/php/params.php/extra/info?a=1&b=two', 'X-Hello' => 'world',
                'Proxy' => 'http://evil:1/');
is($r->{status}, 200, 'params.php: 200');
my $b = $r->{body} // '';
like($b, qr{^SCRIPT_FILENAME=\Q$html\E/php/params\.php$}m,
     'SCRIPT_FILENAME is the root and the split script name');
like($b, qr{^SCRIPT_NAME=/php/params\.php$}m, 'SCRIPT_NAME');
like($b, qr{^QUERY_STRING=a=1&b=two$}m, 'QUERY_STRING');
like($b, qr{^PATH_INFO=/extra/info$}m, 'PATH_INFO from fastcgi_split_path_info');
like($b, qr{^HTTP_X_HELLO=world$}m, 'a request header as HTTP_X_HELLO');
like($b, qr{^REQUEST_URI=/php/params\.php/extra/info\?a=1&b=two$}m, 'REQUEST_URI');
like($b, qr{^GATEWAY_INTERFACE=CGI/1\.1$}m, 'GATEWAY_INTERFACE');
like($b, qr{^SERVER_PORT=$port$}m, 'SERVER_PORT');
like($b, qr{^HTTP_PROXY=\(unset\)$}m, 'no HTTP_PROXY (httpoxy)');
like($b, qr{^HTTP_HOST=localhost$}m, 'HTTP_HOST from Host');
SKIP: {
    skip H2::why_not(), 1 if H2::why_not();
    # HTTP/2 has no Host field, only :authority
    my $h = H2::curl($t, '/php/params.php');
    like($h->{body} // '', qr{^HTTP_HOST=127\.0\.0\.1:$port$}m,
         'over HTTP/2: HTTP_HOST from :authority') or diag($h->{body});
}
is($r->{headers}{'x-from-php'}, 'yes', 'a header the script set');
like($r->{headers}{'content-type'} // '', qr{^text/html}, 'Content-Type');
is($r->{headers}{'content-length'}, length($b), 'a small body has its length');

# try_files = $fastcgi_script_name =404, nginx's guard against running
# what is not a script: the split is there before the handler runs
# (a file found moves the URI to it, so PATH_INFO is gone then, as in
# nginx, whose docs keep it in a variable first)
$r = $t->get('/g/t.php/info');
like(($r->{status} // 0) . ' ' . ($r->{body} // ''), qr{^200 guarded},
     'try_files = $fastcgi_script_name: an existing script runs');
is($t->get('/g/up.jpg/x.php')->{status}, 404, '... a path that is no script: 404');
is($t->get('/g/none.php/x')->{status}, 404, '... a missing script: 404');

$r = $t->get('/unix/x');
is($r->{body}, 'Hello, World!', 'pass = fastcgi://unix:/path, and a fastcgi_param replacing a default');
$r = $t->get('/php/dir/');
is($r->{body}, 'index /php/dir/index.php', 'fastcgi_index for a URI ending in /');
# the upstream engine's variables, for FastCGI as for the proxy
$r = $t->get('/up/x');
like($r->{headers}{'x-up'} // '', qr/^127\.0\.0\.1:$fpm_port\|200\|\d+\.\d{3}$/,
     '$upstream_addr, $upstream_status, $upstream_response_time for FastCGI');
$r = $t->get('/php/redirect.php');
is($r->{status}, 302, 'Location without Status is a 302');
is($r->{headers}{location}, '/elsewhere', '... with its Location');
$r = $t->get('/php/status.php');
is($r->{status}, 404, 'Status: 404 is the status');
$r = $t->http("HEAD /php/big.php HTTP/1.1\r\nHost: x\r\n\r\n");
is($r->{status}, 200, 'HEAD: 200');
is($r->{body} // '', '', '... with no body');

# --- keep-alive: many requests, one connection to php-fpm -----------------

my %pids;
$t->get('/php/pid.php'); # one connection in the pool
my $conns = fpm_conns();
for (1 .. 20) {
    my $x = $t->get('/php/pid.php');
    $pids{$x->{body} // 'fail'}++ if $x->{status} == 200;
}
is(scalar(keys %pids), 1, '20 requests in a row: one php-fpm child (one kept-alive connection)');
is(fpm_conns() - $conns, 0, '... and fastd made no new connection to php-fpm');

# --- bodies ---------------------------------------------------------------

my $up = "$dir/upload.bin";
{
    open my $fh, '>', $up or die;
    my $chunk = join '', map { chr(($_ * 7 + 3) % 256) } 0 .. 65535;
    print $fh $chunk for 1 .. 800; # 50 MiB
    close $fh;
}
my $want = do { open my $fh, '<', $up; binmode $fh; Digest::MD5->new->addfile($fh)->hexdigest };
my $size = -s $up;
my $out = curl('-H', 'Content-Type: application/octet-stream',
               '--data-binary', "\@$up", "http://127.0.0.1:$port/php/upload.php");
is($out, "$want $size $size", '50 MB upload: PHP read every byte (md5 and length)');

my $exp = Digest::MD5->new;
$exp->add($_ . ('.' x (1024 - length $_))) for 0 .. 20479;
my $got = "$dir/big.out";
my $t1 = time;
curl('--limit-rate', '8M', '-o', $got, "http://127.0.0.1:$port/php/big.php");
my $dl = do { open my $fh, '<', $got; binmode $fh; Digest::MD5->new->addfile($fh)->hexdigest };
is(-s $got, 20480 * 1024, '20 MB response: every byte, read slowly (back-pressure)');
is($dl, $exp->hexdigest, '20 MB response: md5');
unlink $up, $got;

# --- 200 concurrent --------------------------------------------------------

my @urls = map { "http://127.0.0.1:$port/php/hello.php?n=$_" } 1 .. 200;
my $codes = curl('-Z', '--parallel-max', '200',
                 '-w', '%{http_code}\n', (map { ('-o', '/dev/null', $_) } @urls));
my @c = split /\n/, $codes // '';
is(scalar(grep { $_ eq '200' } @c), 200, '200 concurrent requests: all 200')
    or diag("codes: " . join(',', @c));

# --- errors ---------------------------------------------------------------

$t1 = time;
$r = $t->get('/slow/x.php', timeout => 15);
is($r->{status}, 504, 'a script past fastcgi_read_timeout: 504');
ok(time - $t1 < 3.5, '... after about the timeout, not the script');

$r = $t->get('/php/fatal.php');
is($r->{status}, 500, 'a PHP fatal error: 500 from php');
ok(FastdTest::wait_for(sub { $t->error_log =~ /\[warn\].*sent in stderr: .*PHP Fatal error.*no_such_function_here/ }, 5),
   '... its stderr is a warning in the error log');

for my $case (qw(version type long after nohdr early)) {
    $r = $t->get("/bad/$case.php");
    is($r->{status}, 502, "fake FastCGI server, $case: 502");
}
$r = $t->get('/bad/good.php');
is($r->{body}, 'fake ok', 'the fake server answers a good response');
$r = $t->get('/bad/stderr.php');
is($r->{body}, 'fake ok', 'a response with stderr records');
like($t->error_log, qr/\[warn\].*sent in stderr: second line/, '... each stderr line logged');
like($t->error_log, qr/sent data after END_REQUEST/, 'stdout after END_REQUEST is named');

$r = $t->get('/dead/x.php');
is($r->{status}, 502, 'nothing listening: 502');

$php->stop;
$r = $t->get('/php/hello.php');
is($r->{status}, 502, 'php-fpm stopped: 502');
$r = $t->get('/plaintext');
is($r->{status}, 200, 'the server goes on');

# --- configuration errors -------------------------------------------------

sub conf_err {
    my ($loc) = @_;
    my $f = "$dir/bad.conf";
    FastdTest::spew($f, $t->subst(FastdTest::base_conf(locations => $loc)));
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $f);
    return $rc ? $o : '';
}
like(conf_err("[location /a]\nhandler = fastcgi\npass = http://127.0.0.1:1\n"),
     qr/must be fastcgi:/, 'pass = http:// for handler = fastcgi is an error');
like(conf_err("[location /a]\npass = fastcgi://127.0.0.1:1\nhandler = static\n"),
     qr/"pass" is a key of handler = proxy, fastcgi/, 'pass in a static location is an error');
like(conf_err("[location /a]\nhandler = fastcgi\npass = fastcgi://localhost\n"),
     qr/needs its port/, 'a HOST without a port');
like(conf_err("[location /a]\nhandler = fastcgi\npass = fastcgi://127.0.0.1:1\nfastcgi_split_path_info = ^(.+)\$\n"),
     qr/two captures/, 'fastcgi_split_path_info needs two captures');
like(conf_err("[location /a]\nhandler = fastcgi\n"),
     qr/needs "pass = fastcgi/, 'handler = fastcgi without pass');
is(conf_err("[location /a]\npass = fastcgi://127.0.0.1:1\nhandler = fastcgi\n[location /b]\nhandler = proxy\npass = http://127.0.0.1:1/\n"),
   '', 'pass before handler, and proxy and fastcgi side by side');

$t->no_alerts;
$t->stop;
done_testing;
