#!/usr/bin/perl
# API 1.8 from a shared object built outside the tree (tests/modules/
# pemzone.c, modules/README.md's example): certificates a module provides
# (fastd_tls.h: ssl_certificate = pemzone:PATH), swapped at a handshake
# without a reload once its helper process puts a new one in a shared
# zone, refused until there is one; an ALPN protocol the module answers in
# the handshake; the helper process itself (its name in ps, started again
# when it dies, replaced at a reload); a hook before routing; a figure of
# what the workers share, once; a command of fastd -s.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use Test::More;

plan skip_all => 'the openssl CLI is not installed'
    if system('openssl version >/dev/null 2>&1') != 0;

my $root = FastdTest::root();
my $t = FastdTest->new(conf => 'placeholder');
my $dir = $t->dir;
my $prefix = ApiModule::install($dir);
ok(-f "$prefix/include/fastd/fastd_tls.h", 'include/fastd/fastd_tls.h installed');
is(ApiModule::build("$dir/pemzone.so", "$root/tests/modules/pemzone.c"), '',
   'pemzone.so (API 1.8, fastd_tls.h) builds against the installed API');

# a module built for 1.7: its descriptor ends before .early
FastdTest::spew("$dir/v17.c", qq{#include <fastd.h>
#include <stddef.h>
static int h(fd_request_t *r) { fd_resp_body(r, "v17", 3); return 0; }
FD_API_MODULE = { FD_API_HEADER, .api_minor = 7,
                  .size = offsetof(fd_api_module_t, early),
                  .name = "v17", .handler = h };\n});
is(ApiModule::build("$dir/v17.so", "$dir/v17.c", '-Wno-override-init'), '',
   'a module built for API 1.7');

my $https = FastdTest::free_port();
$t->write_conf(FastdTest::base_conf(
    main => { load_module => ["$dir/pemzone.so", "$dir/v17.so"],
              workers => 2 },
    locations => "[location /status]\nhandler = status\n\n"
               . "[location = /v17]\nhandler = v17\n\n",
    extra => "[server]\nlisten = 127.0.0.1:$https ssl\n"
           . "server_name = z.test\n"
           . "ssl_certificate = pemzone:%%DIR%%/site.pem\n\n"));
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
is($rc, 0, '-t passes') or diag($out);
ok(!-e "$dir/site.pem", '... and has nothing to serve yet');
$t->start;

# The helper: the master's child named "pemzone helper"
sub helper {
    for my $p (FastdTest::children_of($t->pid)) {
        my $cmd = FastdTest::slurp("/proc/$p/cmdline") // '';
        return $p if $cmd =~ /pemzone helper/;
    }
    return undef;
}
my $h1;
ok(FastdTest::wait_for(sub { $h1 = helper() }, 10, 0.1),
   'the helper runs beside the workers, "pemzone helper" in ps');
ok(FastdTest::wait_for(sub { $t->error_log =~ /pemzone: helper started/ },
                       10, 0.1), '... its init ran, its log is the error log');
is(scalar(grep { $_ != $h1 } $t->workers), 2, '... and the two workers');

# The CN of the certificate a handshake gets ('' when it fails)
sub served {
    my ($alpn) = @_;
    my $a = $alpn ? "-alpn $alpn" : '';
    my $s = `echo | openssl s_client -connect 127.0.0.1:$https -servername z.test $a 2>&1`;
    my ($cn) = $s =~ /^subject=.*?CN ?= ?([\w.]+)/m;
    my ($proto) = $s =~ /^ALPN protocol: (\S+)/m;
    return wantarray ? ($cn // '', $proto // '') : $cn // '';
}
is(served(), '', 'no certificate yet: the handshake fails');

sub put_cert {
    my ($name) = @_;
    FastdTest::self_signed("$dir/$name", $name);
    # written whole, then renamed: the helper never reads half of it
    FastdTest::spew("$dir/site.tmp", FastdTest::slurp("$dir/$name.crt")
                    . FastdTest::slurp("$dir/$name.key"));
    rename("$dir/site.tmp", "$dir/site.pem") or die "rename: $!";
}
put_cert('a.test');
ok(FastdTest::wait_for(sub { served() eq 'a.test' }, 10, 0.1),
   'the helper put one in the zone: served at the next handshake');
put_cert('b.test');
ok(FastdTest::wait_for(sub { served() eq 'b.test' }, 10, 0.1),
   'a new one: served without a reload');
unlike($t->error_log, qr/reloading/, '... (none happened)');

my ($cn, $proto) = served('x-pemzone');
is($proto, 'x-pemzone', 'ALPN x-pemzone: the module answers it');
is($cn, 'b.test', '... with the certificate it gave');
like($t->error_log, qr/pemzone: x-pemzone for "z\.test"/, '... for the SNI name');
($cn, $proto) = served('http/1.1');
is($proto, 'http/1.1', 'another protocol: as usual');

# before routing: no location has /.pemzone
my $r = $t->get('/.pemzone');
is($r && $r->status, 200, 'the early hook answers before routing');
like($r && $r->body, qr/^gen 2 worker [01]$/, '... with the generation');
$r = $t->get('/v17');
is($r && $r->body, 'v17', 'the 1.7 module beside it answers');
$r = $t->get('/.pemzone-not');
is($r && $r->status, 404, 'another path goes on to the locations');

$r = $t->get('/status', Accept => 'text/plain;version=0.0.4');
my @g = ($r && $r->body // '') =~ /^fastd_pemzone_generation (\d+)$/mg;
is("@g", '2', "what the workers share: one figure, not one a worker");

($rc, $out) = FastdTest::run_fastd('-s', 'pemzone', 'hello', '-c',
                                   $t->conf_file);
is($rc, 0, 'fastd -s pemzone hello: the module\'s command');
like($out, qr/^pemzone hello, master ${\ $t->pid}$/m,
     '... which knows the running master');

# the helper dies: the master starts another (one that dies within 2 s
# of its start is not: wait until it is older)
my $hz = `getconf CLK_TCK` || 100;
sub age {
    my ($pid) = @_;
    my ($start) = (FastdTest::slurp("/proc/$pid/stat") // '') =~ /\)\s+(?:\S+\s+){19}(\d+)/;
    my ($up) = (FastdTest::slurp('/proc/uptime') // '') =~ /^([\d.]+)/;
    return defined $start && defined $up ? $up - $start / $hz : 0;
}
ok(FastdTest::wait_for(sub { age($h1) > 2.5 }, 10, 0.1),
   'the helper has run for more than 2 s');
kill 'KILL', $h1;
my $h2;
ok(FastdTest::wait_for(sub { $h2 = helper(); $h2 && $h2 != $h1 }, 10, 0.1),
   'a helper that dies is started again');
like($t->error_log, qr/pemzone helper process $h1 exited \(signal 9\)/,
     '... said in the log');
put_cert('c.test');
ok(FastdTest::wait_for(sub { served() eq 'c.test' }, 10, 0.1),
   '... and it keeps the certificates current');

# a reload: the new configuration's helper, the old one stopped
$t->signal('HUP');
my $h3;
ok(FastdTest::wait_for(sub { $h3 = helper(); $h3 && $h3 != $h2
                             && !FastdTest::pid_alive($h2) }, 10, 0.1),
   'a reload stops the helper and starts the new configuration\'s');
is(served(), 'c.test', '... the certificate still served');
is(scalar(() = $t->error_log =~ /pemzone: helper started/g), 3,
   '... three helpers in all');

$t->stop;
ok(FastdTest::wait_for(sub { !FastdTest::pid_alive($h3) }, 10, 0.1),
   'the helper goes with the master');
is_deeply([$t->alerts(allow => qr/pemzone helper process \d+ exited/)], [],
          'no other alert');

done_testing();
