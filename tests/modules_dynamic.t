#!/usr/bin/perl
# A module of the tree written on the public API builds into the binary
# or as a shared object: ./configure --with-plaintext=dynamic
# --with-json=dynamic --with-status=dynamic --with-static=dynamic
# --with-fastcgi=dynamic --with-cluster=dynamic --with-acme=dynamic
# --with-stream=dynamic --with-proxy=dynamic (in
# a copy of the tree)
# builds objs/fd_plaintext.so, objs/fd_json.so, objs/fd_status.so,
# objs/fd_static.so, objs/fd_fastcgi.so (a backend protocol on
# fastd_upstream.h; its configuration checked here, its requests by
# FASTD_TEST_LOAD=.../fd_fastcgi.so FASTD_BIN=... prove tests/fastcgi.t)
# objs/fd_cluster.so (the Redis client, its [cluster] section without
# a name checked here; its client by FASTD_TEST_LOAD=.../fd_cluster.so
# with tests/cluster.t), objs/fd_acme.so (automatic HTTPS: its
# [acme NAME] and the acme: certificates it provides checked here; its
# orders by FASTD_TEST_LOAD=.../fd_acme.so with tests/acme*.t) and
# objs/fd_stream.so (the L4 proxy on fastd_stream.h: a [stream] proxies
# a connection here; the rest by FASTD_TEST_LOAD=.../fd_stream.so with
# tests/stream*.t) and objs/fd_proxy.so (the reverse proxy and its
# [cache NAME]: a request proxied and a second one answered from the
# cache here; the rest by FASTD_TEST_LOAD=.../fd_proxy.so with
# tests/proxy*.t)
# instead of linking them in, make install puts them in PREFIX/modules/,
# and that fastd, which has none of them of its own, answers with them
# after load_module exactly as the fastd under test (built in) does:
# status, Content-Type, Content-Length, body, for GET, HEAD and POST,
# over HTTP/1.1 (/status's figures, numbers aside; static's files with
# their ETag, ranges, conditionals, index, listing and precompressed
# variant). A module not on the public API (one of the test's own: every
# module of the tree is on it), or not in auto/modules, cannot be made
# dynamic.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

FastdTest::skip_in_sanitizer_stage('it builds a plain fastd of its own');

plan skip_all => 'jansson is not installed (libjansson-dev)'
    if system('pkg-config --exists jansson 2>/dev/null') != 0;
plan skip_all => 'libcurl is not installed (libcurl4-openssl-dev: acme)'
    if system('pkg-config --exists libcurl 2>/dev/null') != 0;

# an echo server for the loaded [stream] (tests/lib/stream_backend.py)
# (a package variable: a file's lexical handle would be closed, waiting
# for the server, before END kills it)
our $echo_fh;
my $echo_pid = open($echo_fh, '-|', '/usr/bin/python3',
                    "$FindBin::Bin/lib/stream_backend.py", 'echo')
    or die "python3: $!";
my $echo = <$echo_fh>;
die 'the echo backend did not start' unless defined $echo;
chomp $echo;
END { local $?; if ($echo_pid) { kill 'KILL', $echo_pid; waitpid $echo_pid, 0 } }

my $t = FastdTest->new;  # the fastd under test: the four built in
my $dir = $t->dir;
# static's files, the same for both
mkdir "$dir/files"; mkdir "$dir/files/sub"; mkdir "$dir/files/list";
$t->write_file("files/a.txt", "abcdefgh\n");
$t->write_file("files/g.txt", "to be compressed\n");
$t->write_file("files/g.txt.gz", "not really gzip\n");
$t->write_file("files/sub/index.html", "<p>index</p>\n");
$t->write_file("files/list/x.txt", "x\n");
my $status = "[location /status]\nhandler = status\n\n"
    . "[location /f/]\nalias = $dir/files/\nautoindex = on\n"
    . "gzip_static = on\n\n";
$t->write_conf(FastdTest::base_conf(locations => $status));
my $src = "$dir/src";
my $prefix = "$dir/prefix";

# a copy of the tree, configured and built with those modules dynamic;
# installed with make install PREFIX= (as ApiModule::install), not
# configured --prefix: that is compiled in (objs/fd_auto_config.h, the
# default configuration's path) and would compile every object again
eval { FastdTest::copy_tree($src); 1 } or BAIL_OUT($@);
my $out = `cd '$src' && ./configure --with-plaintext=dynamic --with-json=dynamic --with-status=dynamic --with-static=dynamic --with-fastcgi=dynamic --with-cluster=dynamic --with-acme=dynamic --with-stream=dynamic --with-proxy=dynamic 2>&1`;
is($?, 0, './configure --with-plaintext=dynamic --with-json=dynamic --with-status=dynamic --with-static=dynamic --with-fastcgi=dynamic --with-cluster=dynamic --with-acme=dynamic --with-stream=dynamic --with-proxy=dynamic') or diag($out);
like($out, qr/^dynamic modules \(objs\/fd_NAME\.so\): plaintext json static status proxy stream fastcgi cluster acme$/m,
     '... says which modules are shared objects');
unlike((grep { /^\s*modules:/ } split /\n/, $out)[0] // '', qr/\b(plaintext|json|status|static|fastcgi|cluster|acme|stream|proxy)\b/,
       '... and that they are not linked in');
$out = `make -s -C '$src' -j2 2>&1`;
is($?, 0, 'make') or diag($out);
ok(-f "$src/objs/fd_plaintext.so" && -f "$src/objs/fd_json.so"
   && -f "$src/objs/fd_status.so" && -f "$src/objs/fd_static.so"
   && -f "$src/objs/fd_fastcgi.so" && -f "$src/objs/fd_cluster.so"
   && -f "$src/objs/fd_acme.so" && -f "$src/objs/fd_stream.so"
   && -f "$src/objs/fd_proxy.so",
   'objs/fd_plaintext.so, fd_json.so, fd_status.so, fd_static.so, fd_fastcgi.so, fd_cluster.so, fd_acme.so, fd_stream.so and fd_proxy.so built');
like(`nm -D --defined-only '$src/objs/fd_plaintext.so' 2>&1`, qr/\bfastd_module\b/,
     'fd_plaintext.so defines fastd_module, as a module built outside the tree');
$out = `make -s -C '$src' install PREFIX='$prefix' LOGROTATE_DIR='$dir/lr' FASTD_USER=nobody 2>&1`;
is($?, 0, 'make install') or diag($out);
ok(-f "$prefix/modules/fd_plaintext.so" && -f "$prefix/modules/fd_json.so",
   'installed in PREFIX/modules/');

# the dynamic build's fastd: without load_module it has no such handler
my $bin = "$prefix/sbin/fastd";
my $d = FastdTest->new;
my $proxy;  # the loaded proxy's fastd, started once $t is
$d->write_conf(FastdTest::base_conf());
{
    local $FastdTest::BIN = $bin;
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    isnt($rc, 0, 'that fastd alone: handler = plaintext is unknown');
}
# the four shared objects every configuration below loads
my @loads = map { "$prefix/modules/fd_$_.so" } qw(plaintext json status static);
$d->write_conf(FastdTest::base_conf(main => { load_module => [@loads] },
                                    locations => $status));
{
    local $FastdTest::BIN = $bin;
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    is($rc, 0, 'with load_module = PREFIX/modules/fd_plaintext.so, fd_json.so, fd_status.so and fd_static.so: -t passes')
        or diag($o);
    # FastCGI, a backend protocol on the public API alone: its keys
    # (pass to a group of one server, its params' variables) and their
    # checks are the loaded module's
    my $fcgi = "[location ~ \\.php\$]\nhandler = fastcgi\n"
             . "pass = fastcgi://127.0.0.1:9\nfastcgi_param = X \$fastcgi_path_info\n";
    my @pj = ("$prefix/modules/fd_plaintext.so",
              "$prefix/modules/fd_json.so",
              "$prefix/modules/fd_static.so");
    $d->write_conf(FastdTest::base_conf(main => { load_module => [@pj] },
                                        locations => $fcgi));
    isnt((FastdTest::run_fastd('-t', '-c', $d->conf_file))[0], 0,
         'handler = fastcgi without its load_module: refused');
    $d->write_conf(FastdTest::base_conf(
        main => { load_module => [ @pj, "$prefix/modules/fd_fastcgi.so" ] },
        locations => $fcgi));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    is($rc, 0, 'with load_module = PREFIX/modules/fd_fastcgi.so: -t passes')
        or diag($o);
    # [cluster], a section without a name, is the loaded module's
    my $cl = "[cluster]\nredis = redis://127.0.0.1:6379/0\n";
    $d->write_conf(FastdTest::base_conf(main => { load_module => [@pj] },
                                        extra => $cl));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    ok($rc != 0 && $o =~ /unknown section \[cluster\]/,
       '[cluster] without its load_module: refused') or diag($o);
    my @pc = (@pj, "$prefix/modules/fd_cluster.so");
    $d->write_conf(FastdTest::base_conf(main => { load_module => [@pc] },
                                        extra => $cl));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    is($rc, 0, 'with load_module = PREFIX/modules/fd_cluster.so: -t passes')
        or diag($o);
    $d->write_conf(FastdTest::base_conf(main => { load_module => [@pc] },
                                        extra => "[cluster x]\n"
                                                 . "redis = unix:/x\n"));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    ok($rc != 0 && $o =~ /\[cluster\] takes no name/,
       '... and [cluster x] is refused: the section has no name')
        or diag($o);
    # automatic HTTPS: [acme NAME] and ssl_certificate = acme:NAME are
    # the loaded module's (fastd_tls.h)
    my $https = $d->another_port; # not the [server] base_conf adds
    my $acme = "[acme le]\ndirectory = https://127.0.0.1:9/dir\n"
             . "accept_terms = on\nstate_path = %%DIR%%/acme\n\n"
             . "[server]\nlisten = 127.0.0.1:$https ssl\n"
             . "server_name = a.test\nssl_certificate = acme:le\n";
    $d->write_conf(FastdTest::base_conf(main => { load_module => [@pj] },
                                        extra => $acme));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    ok($rc != 0 && $o =~ /unknown section \[acme le\]/,
       '[acme NAME] without its load_module: refused') or diag($o);
    $d->write_conf(FastdTest::base_conf(
        main => { load_module => [ @pj, "$prefix/modules/fd_acme.so" ] },
        extra => $acme));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    is($rc, 0, 'with load_module = PREFIX/modules/fd_acme.so: -t passes')
        or diag($o);
    $acme =~ s/acme:le/acme:none/;
    $d->write_conf(FastdTest::base_conf(
        main => { load_module => [ @pj, "$prefix/modules/fd_acme.so" ] },
        extra => $acme));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    ok($rc != 0 && $o =~ /ssl_certificate "acme:none": no \[acme none\] section/,
       '... and its attach refuses an issuer not there, at the line')
        or diag($o);
    # [stream], an L4 proxy on fastd_stream.h: its section, its
    # listener and its connections are the loaded module's (a fastd of
    # its own: a loaded module's figures come last on /status, after
    # the built-in ones the documents below compare)
    my $e = FastdTest->new;
    my $sp = $e->another_port;
    my $st = "[stream echo]\nlisten = 127.0.0.1:$sp\npass = 127.0.0.1:$echo\n";
    $e->write_conf(FastdTest::base_conf(main => { load_module => [@pj] },
                                        extra => $st));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $e->conf_file);
    ok($rc != 0 && $o =~ /\[stream echo\] is not supported/,
       '[stream] without its load_module: refused') or diag($o);
    $e->write_conf(FastdTest::base_conf(
        main => { load_module => [ @pj, "$prefix/modules/fd_stream.so" ] },
        extra => $st));
    $e->start;
    ok(FastdTest::wait_for(sub { $e->port_open($sp) }, 5),
       'with load_module = PREFIX/modules/fd_stream.so: [stream echo] listens');
    my $c = FastdTest::Conn->new($sp, timeout => 10);
    ok($c && $c->send("through the loaded stream\n")
       && $c->wait_for_bytes(qr/through the loaded stream\n/),
       '... and proxies a connection to its server, byte for byte');
    $c->close if $c;
    $e->stop;
    $e->no_alerts;

    # the reverse proxy and a [cache NAME] of its own, loaded: the fastd
    # under test ($t, started below) is its server
    my $px = "[location /p/]\nhandler = proxy\npass = http://127.0.0.1:"
           . $t->port . "/\nproxy_cache = c\nproxy_cache_valid = 1m\n"
           . "add_header = X-Cache \$upstream_cache_status\n\n";
    my $cache = "[cache c]\npath = $dir/cache\n";
    $e = FastdTest->new;
    $e->write_conf(FastdTest::base_conf(main => { load_module => [@pj] },
                                        locations => $px, extra => $cache));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $e->conf_file);
    ok($rc != 0 && $o =~ /unknown section \[cache c\]/,
       'handler = proxy without its load_module: refused') or diag($o);
    $e->write_conf(FastdTest::base_conf(
        main => { load_module => [ @pj, "$prefix/modules/fd_proxy.so" ] },
        locations => $px, extra => $cache));
    ($rc, $o) = FastdTest::run_fastd('-t', '-c', $e->conf_file);
    is($rc, 0, 'with load_module = PREFIX/modules/fd_proxy.so: -t passes')
        or diag($o);
    $proxy = $e;
    $d->write_conf(FastdTest::base_conf(main => { load_module => [@loads] },
                                        locations => $status));
    $d->start;
}
$t->start;
# the proxy loaded: a MISS from $t, then a HIT from its cache
{
    local $FastdTest::BIN = $bin;
    $proxy->start;
}
like(answer($proxy, "GET /p/plaintext HTTP/1.1\r\nHost: x\r\n\r\n", 'x-cache'),
     qr{^200 \| content-type: text/plain \| content-length: 13 \| x-cache: MISS \| Hello, World!$},
     'the loaded proxy: a request proxied to its server (MISS)');
like(answer($proxy, "GET /p/plaintext HTTP/1.1\r\nHost: x\r\n\r\n", 'x-cache'),
     qr{^200 \| content-type: text/plain \| content-length: 13 \| x-cache: HIT \| Hello, World!$},
     '... and the same again from its [cache c] (HIT)');
$proxy->no_alerts;
$proxy->stop;

sub answer {
    my ($srv, $req, @more) = @_;
    my $r = $srv->http($req) or return 'none';
    return join ' | ', $r->{status}, map({ "$_: " . ($r->{headers}{$_} // '-') }
                                         qw(content-type content-length), @more),
                       $r->{body} // '';
}
for my $req ("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n",
             "HEAD /plaintext HTTP/1.1\r\nHost: x\r\n\r\n",
             "POST /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
             "PUT /plaintext HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
             "GET /json HTTP/1.1\r\nHost: x\r\n\r\n",
             "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc") {
    my ($line) = $req =~ /^(\S+ \S+)/;
    my $builtin = answer($t, $req);
    is(answer($d, $req), $builtin, "$line: loaded as a .so, the built-in's answer ($builtin)");
}
# static: the file, its validators, a range, a 304, a variant, the index,
# the 301, the listing, the 404's page, the 405
my ($etag) = (answer($t, "HEAD /f/a.txt HTTP/1.1\r\nHost: x\r\n\r\n", 'etag')
              =~ /etag: (\S+)/);
for my $req ("GET /f/a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
             "HEAD /f/a.txt HTTP/1.1\r\nHost: x\r\n\r\n",
             "GET /f/a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=2-4\r\n\r\n",
             "GET /f/a.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: $etag\r\n\r\n",
             "GET /f/g.txt HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n",
             "GET /f/sub/ HTTP/1.1\r\nHost: x\r\n\r\n",
             "GET /f/sub HTTP/1.1\r\nHost: x\r\n\r\n",
             "GET /f/list/ HTTP/1.1\r\nHost: x\r\n\r\n",
             "GET /f/nope HTTP/1.1\r\nHost: x\r\n\r\n",
             "POST /f/a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n") {
    my ($line) = $req =~ /^(\S+ \S+)/;
    my $builtin = answer($t, $req, qw(etag content-encoding content-range location));
    is(answer($d, $req, qw(etag content-encoding content-range location)), $builtin,
       "$line: static loaded as a .so, the built-in's answer");
}
like(answer($d, "GET /f/a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=2-4\r\n\r\n"),
     qr{^206 \| content-type: text/plain \| content-length: 3 \| cde$},
     '... which is the range asked for');

# the figures differ (pids, times, counts): their documents, numbers aside
for my $req ("GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
             "GET /status?format=prometheus HTTP/1.1\r\nHost: x\r\n\r\n",
             "GET /status HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\n"
             . "Accept: text/plain;version=0.0.4\r\n\r\n",
             "HEAD /status HTTP/1.1\r\nHost: x\r\n\r\n",
             "POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n") {
    my ($line) = $req =~ /^(\S+ \S+)/;
    (my $builtin = answer($t, $req)) =~ s/\d+/N/g;
    (my $loaded = answer($d, $req)) =~ s/\d+/N/g;
    ok($loaded eq $builtin && $builtin =~ /^N \| content-type: \S/,
       "$line: loaded as a .so, the built-in's document")
        or diag("loaded:\n$loaded\nbuilt in:\n$builtin");
}
like(answer($d, "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"),
     qr{^200 \| content-type: text/plain \| content-length: 13 \| Hello, World!$},
     '... which is the plaintext answer');
$d->no_alerts;
$d->stop;
$t->stop;

# only a module written on the public API can be a shared object: one
# on the engine's structures (the test's own, as modules were before the
# API) cannot
$t->write_file("src/modules/fd_engine_module.c",
               "#include \"fd_module.h\"\nfd_module_t fd_engine_module = {.name = \"engine\"};\n");
open(my $am, '>>', "$src/auto/modules") or die "auto/modules: $!";
print $am "engine\n";
close $am;
$out = `cd '$src' && ./configure --with-engine=dynamic 2>&1`;
isnt($?, 0, '--with-engine=dynamic: refused');
like($out, qr/fd_engine_module\.c is not written on the public API/, '... saying why');
$out = `cd '$src' && ./configure --with-nosuch=dynamic 2>&1`;
like($out, qr/no module "nosuch" in auto\/modules/, '--with-nosuch=dynamic: no such module');

done_testing;
