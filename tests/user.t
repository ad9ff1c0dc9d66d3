#!/usr/bin/perl
# user = drops the workers' privileges; the master keeps root (for reloads
# and binding). Needs root to start with.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

plan skip_all => 'needs root' if $> != 0;
my $nobody = getpwnam('nobody');
plan skip_all => 'no user nobody' unless defined $nobody;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { user => 'nobody', workers => 2 }));
chmod 0755, $t->dir;
$t->start;

my @w;
FastdTest::wait_for(sub { @w = $t->workers; @w == 2 }, 10);
is(scalar @w, 2, 'two workers');
sub uid_of { (FastdTest::slurp("/proc/$_[0]/status") // '') =~ /^Uid:\s+(\d+)/m; $1 }
for my $pid (@w) {
    # a worker drops them right after fork(), before its loop starts; a
    # slow initgroups() (a sanitizer build) can show it still root for a
    # moment after it appears
    FastdTest::wait_for(sub { (uid_of($pid) // -1) == $nobody }, 10);
    is(uid_of($pid), $nobody, "worker $pid runs as nobody");
}
my ($muid) = (FastdTest::slurp('/proc/' . $t->pid . '/status') // '') =~ /^Uid:\s+(\d+)/m;
is($muid, 0, 'the master keeps root');
is($t->get('/plaintext')->{status}, 200, 'workers serve');

# a reload still works: the master (root) re-reads and forks
$t->signal('HUP');
FastdTest::wait_for(sub { my @n = $t->workers; @n == 2 && !grep { my $o = $_; grep { $_ == $o } @w } @n }, 10);
is($t->get('/plaintext')->{status}, 200, 'served after a reload');

# a [cache] whose path (and its parent) the root master makes: the
# directories go to the workers' user, or nothing could ever be stored
{
    my $be = Backend->new(handler => sub {
        Backend::response(200, "cached body\n", 'Cache-Control' => 'max-age=60');
    });
    my $c = FastdTest->new(conf => FastdTest::base_conf(
        main => { user => 'nobody', workers => 1 },
        locations => "[location /c/]\nhandler = proxy\nupstream = be\n"
                   . "proxy_cache = one\n"
                   . "add_header = X-Cache-Status \$upstream_cache_status always\n\n",
        extra => "[upstream be]\nserver = 127.0.0.1:" . $be->port . "\n\n"
               . "[cache one]\npath = %%DIR%%/made/cache\nlevels = 1:2\n"
               . "keys_zone = 64k\n\n"));
    chmod 0755, $c->dir;
    $c->start;
    my $a = $c->get('/c/x');
    my $b = $c->get('/c/x');
    is(($a ? $a->header('x-cache-status') // '' : '') . ' '
       . ($b ? $b->header('x-cache-status') // '' : ''), 'MISS HIT',
       '[cache] path made by the master: the workers store there (MISS, HIT)');
    my @own = map { (stat $_)[4] // -1 } ($c->dir . '/made', $c->dir . '/made/cache');
    is("@own", "$nobody $nobody", '... it and its parent belong to user nobody');
    $c->stop;
}

# no user =: a root master's workers run as nobody, and say so; user =
# root keeps them root
for my $c ([undef, $nobody, 'no user: the workers run as nobody'],
           ['root', 0, 'user = root: the workers stay root']) {
    my ($user, $want, $name) = @$c;
    my $n = FastdTest->new(conf => FastdTest::base_conf(
        main => { user => $user, workers => 1 },
        http => { access_log => '%%DIR%%/access.log' }));
    chmod 0755, $n->dir;
    $n->start;
    my @nw;
    FastdTest::wait_for(sub { @nw = $n->workers; @nw == 1 }, 10);
    FastdTest::wait_for(sub { (uid_of($nw[0] // 0) // -1) == $want }, 10);
    is(uid_of($nw[0] // 0), $want, $name);
    is($n->get('/plaintext')->{status}, 200, '... and serve');
    if (defined $user) {
        unlike($n->error_log, qr/no \[main\] user/, '... no notice');
    } else {
        like($n->error_log, qr/\[notice\] .*no \[main\] user: the workers run as "nobody" \(user = root keeps them root\)/,
             '... a notice says so');
        is((FastdTest::slurp('/proc/' . $n->pid . '/status') // '') =~ /^Uid:\s+(\d+)/m ? $1 : -1,
           0, '... the master keeps root');
        # a rotated error log: the worker (nobody) reopens the new file
        # the root master made, which the master gave to nobody
        my $log = $n->log_file;
        rename $log, "$log.1" or die "rename: $!";
        $n->signal('USR1');
        ok(FastdTest::wait_for(sub {
               grep { $_ eq $log } values %{ FastdTest::fd_links($nw[0]) };
           }, 10),
           '... after SIGUSR1 the worker writes to the new error log')
            or diag(explain(FastdTest::fd_links($nw[0])));
        is((stat $log)[4], $nobody, '... which belongs to nobody');
        # the access log in root's directory: the master makes it for
        # the worker, at start and before a reopen
        my $alog = $n->dir . '/access.log';
        ok(FastdTest::wait_for(sub {
               $n->get('/plaintext?before');
               (FastdTest::slurp($alog) // '') =~ /before/;
           }, 10), '... the worker writes the access log in a directory of root\'s');
        rename $alog, "$alog.1" or die "rename: $!";
        $n->signal('USR1');
        ok(FastdTest::wait_for(sub {
               $n->get('/plaintext?after');
               (FastdTest::slurp($alog) // '') =~ /after/;
           }, 10), '... and the new one after a rotation');
        $n->no_alerts;
    }
    $n->stop;
}

# a document root the fallback user cannot enter (the test's directory
# is 0700 and root's, as a checkout under /root is) is said at load, not
# found out by a 403 for every file; README's first command keeps root
# with conf/fastd.conf's [profile checkout]
{
    my $w = FastdTest->new(conf => FastdTest::base_conf(
        main => { user => undef }, server => { root => '%%DIR%%' }));
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $w->conf_file);
    is($rc, 0, 'a root nobody may not read: -t still succeeds');
    like($out, qr/\[warn\] .*root "\Q${\ $w->dir}\E" \(server\) is not readable by user "nobody", the workers' user: its files will be 403/,
         '... with a warning naming the root and the user') or diag($out);
    # a copy of conf/fastd.conf in a prefix of its own, with the
    # certificate README's first command makes there (a fresh clone has
    # none)
    my $pre = $w->dir . '/checkout';
    mkdir $pre;
    mkdir "$pre/$_" for qw(conf conf/cert html logs);
    FastdTest::spew("$pre/conf/$_", FastdTest::slurp(FastdTest::root() . "/conf/$_"))
        for qw(fastd.conf world.sqlite.sql);
    FastdTest::self_signed("$pre/conf/cert/fastd", 'localhost');
    for my $f (glob FastdTest::root() . '/html/*.html') {
        (my $b = $f) =~ s{.*/}{};
        FastdTest::spew("$pre/html/$b", FastdTest::slurp($f));
    }
    my $conf = "$pre/conf/fastd.conf";
    ($rc, $out) = FastdTest::run_fastd('-t', '-p', 'checkout', '-c', $conf);
    is($rc, 0, 'conf/fastd.conf -p checkout (README\'s first command) tests fine')
        or diag($out);
}

# an unknown user is a startup error, not a silent root worker
my $u = FastdTest->new(conf => FastdTest::base_conf(main => { user => 'no-such-user-xyz' }));
my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $u->conf_file);
is($rc, 1, 'an unknown user is a configuration error');
like($out, qr/fastd\.conf:\d+: user "no-such-user-xyz" does not exist/,
     '... naming file:line');
$t->no_alerts;
done_testing();
