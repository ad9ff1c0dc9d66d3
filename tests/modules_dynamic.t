#!/usr/bin/perl
# A module of the tree written on the public API builds into the binary
# or as a shared object: ./configure --with-plaintext=dynamic
# --with-json=dynamic --with-status=dynamic --with-fastcgi=dynamic (in a
# copy of the tree) builds objs/fd_plaintext.so, objs/fd_json.so,
# objs/fd_status.so and objs/fd_fastcgi.so (a backend protocol on
# fastd_upstream.h; its configuration checked here, its requests by
# FASTD_TEST_LOAD=.../fd_fastcgi.so FASTD_BIN=... prove tests/fastcgi.t)
# instead of
# linking them in, make install puts them in PREFIX/modules/, and that
# fastd, which has none of them of its own, answers with them after
# load_module exactly as the fastd under test (built in) does: status,
# Content-Type, Content-Length, body, for GET, HEAD and POST, over
# HTTP/1.1 (/status's figures, numbers aside). A module not on the public
# API, or not in auto/modules, cannot be made dynamic.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

FastdTest::skip_in_sanitizer_stage('it builds a plain fastd of its own');

plan skip_all => 'jansson is not installed (libjansson-dev)'
    if system('pkg-config --exists jansson 2>/dev/null') != 0;

my $root = FastdTest::root();
my $status = "[location /status]\nhandler = status\n\n";
my $t = FastdTest->new;  # the fastd under test: the three built in
$t->write_conf(FastdTest::base_conf(locations => $status));
my $dir = $t->dir;
my $src = "$dir/src";
my $prefix = "$dir/prefix";

# a copy of the tree, configured and built with both modules dynamic
mkdir $src or die "mkdir $src: $!";
system("cd '$root' && tar -cf - configure Makefile auto core modules conf html | tar -xf - -C '$src'") == 0
    or BAIL_OUT('cannot copy the tree');
my $out = `cd '$src' && ./configure --prefix='$prefix' --with-plaintext=dynamic --with-json=dynamic --with-status=dynamic --with-fastcgi=dynamic 2>&1`;
is($?, 0, './configure --with-plaintext=dynamic --with-json=dynamic --with-status=dynamic --with-fastcgi=dynamic') or diag($out);
like($out, qr/^dynamic modules \(objs\/fd_NAME\.so\): plaintext json status fastcgi$/m,
     '... says which modules are shared objects');
unlike((grep { /^\s*modules:/ } split /\n/, $out)[0] // '', qr/\b(plaintext|json|status|fastcgi)\b/,
       '... and that they are not linked in');
$out = `make -s -C '$src' -j2 2>&1`;
is($?, 0, 'make') or diag($out);
ok(-f "$src/objs/fd_plaintext.so" && -f "$src/objs/fd_json.so"
   && -f "$src/objs/fd_status.so" && -f "$src/objs/fd_fastcgi.so",
   'objs/fd_plaintext.so, fd_json.so, fd_status.so and fd_fastcgi.so built');
like(`nm -D --defined-only '$src/objs/fd_plaintext.so' 2>&1`, qr/\bfastd_module\b/,
     'fd_plaintext.so defines fastd_module, as a module built outside the tree');
$out = `make -s -C '$src' install PREFIX='$prefix' LOGROTATE_DIR='$dir/lr' FASTD_USER=nobody 2>&1`;
is($?, 0, 'make install') or diag($out);
ok(-f "$prefix/modules/fd_plaintext.so" && -f "$prefix/modules/fd_json.so",
   'installed in PREFIX/modules/');

# the dynamic build's fastd: without load_module it has no such handler
my $bin = "$prefix/sbin/fastd";
my $d = FastdTest->new;
$d->write_conf(FastdTest::base_conf());
{
    local $FastdTest::BIN = $bin;
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    isnt($rc, 0, 'that fastd alone: handler = plaintext is unknown');
}
$d->write_conf(FastdTest::base_conf(
    main => { load_module => [ "$prefix/modules/fd_plaintext.so",
                               "$prefix/modules/fd_json.so",
                               "$prefix/modules/fd_status.so" ] },
    locations => $status));
{
    local $FastdTest::BIN = $bin;
    my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $d->conf_file);
    is($rc, 0, 'with load_module = PREFIX/modules/fd_plaintext.so, fd_json.so and fd_status.so: -t passes')
        or diag($o);
    # FastCGI, a backend protocol on the public API alone: its keys
    # (pass to a group of one server, its params' variables) and their
    # checks are the loaded module's
    my $fcgi = "[location ~ \\.php\$]\nhandler = fastcgi\n"
             . "pass = fastcgi://127.0.0.1:9\nfastcgi_param = X \$fastcgi_path_info\n";
    my @pj = ("$prefix/modules/fd_plaintext.so",
              "$prefix/modules/fd_json.so");
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
    $d->write_conf(FastdTest::base_conf(
        main => { load_module => [ "$prefix/modules/fd_plaintext.so",
                                   "$prefix/modules/fd_json.so",
                                   "$prefix/modules/fd_status.so" ] },
        locations => $status));
    $d->start;
}
$t->start;

sub answer {
    my ($srv, $req) = @_;
    my $r = $srv->http($req) or return 'none';
    return join ' | ', $r->{status}, map({ "$_: " . ($r->{headers}{$_} // '-') }
                                         qw(content-type content-length)),
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

# only a module written on the public API can be a shared object
$out = `cd '$src' && ./configure --with-static=dynamic 2>&1`;
isnt($?, 0, '--with-static=dynamic: refused');
like($out, qr/fd_static_module\.c is not written on the public API/, '... saying why');
$out = `cd '$src' && ./configure --with-nosuch=dynamic 2>&1`;
like($out, qr/no module "nosuch" in auto\/modules/, '--with-nosuch=dynamic: no such module');

done_testing;
