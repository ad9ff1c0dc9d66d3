#!/usr/bin/perl
# make install into a scratch prefix: the files, the systemd unit (checked
# by systemd-analyze when present: verify, and the offline security
# exposure), and conf/fastd.logrotate run by the real logrotate against a
# running fastd: the access log is rotated, fastd reopens it, and no line is
# lost.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Temp;
use Test::More;

my $root = FastdTest::root();
my $tmp  = File::Temp->newdir('fastd-install-XXXXXX', TMPDIR => 1,
                              CLEANUP => !$ENV{FASTD_KEEP});
my $prefix = "$tmp/prefix";
my $lr_dir = "$tmp/logrotate.d";

# --- make install -------------------------------------------------------------
{
    # FASTD_USER=nobody: an existing user, so a root run creates no account
    my $out = `make -s -C '$root' install PREFIX='$prefix' LOGROTATE_DIR='$lr_dir' FASTD_USER=nobody 2>&1`;
    is($?, 0, 'make install into a scratch prefix') or diag($out);
    ok(-x "$prefix/sbin/fastd", 'sbin/fastd');
    ok(-f "$prefix/conf/fastd.conf" && -f "$prefix/conf/fastd.conf.default",
       'conf/fastd.conf and fastd.conf.default');
    ok(-f "$prefix/conf/mime.types", 'conf/mime.types');
    ok(-f "$prefix/html/index.html", 'html/');
    ok(-d "$prefix/logs", 'logs/');
    ok(-f "$prefix/conf/README.md" && -f "$prefix/conf/doc/proxy.md",
       'the manual: conf/README.md and conf/doc/');
    for my $man ('man8/fastd.8', 'man5/fastd.conf.5') {
        my $text = -f "$prefix/share/man/$man"
            ? `MANWIDTH=80 man -l '$prefix/share/man/$man' 2>&1` : '';
        like($text, $man =~ /conf/ ? qr/keepalive_timeout/ : qr/SIGNALS/,
             "share/man/$man installed and readable with man -l");
    }
    ok(!-e "$prefix/conf/fastd.service" && !-e "$prefix/conf/fastd.logrotate",
       'the unit and the logrotate policy are not copied as config');
    # conf/fastd.conf's ssl address needs a certificate: install makes one
    ok(-f "$prefix/conf/cert/fastd.crt", 'conf/cert/fastd.crt, self-signed');
    my $mode = (stat "$prefix/conf/cert/fastd.key")[2] // 0;
    is(sprintf('%o', $mode & 0777), '600', 'conf/cert/fastd.key, owner only');
    my $rc = system("'$prefix/sbin/fastd' -t -c '$prefix/conf/fastd.conf' > /dev/null 2>&1");
    is($rc, 0, 'the installed fastd accepts the installed config');
}

# --- the systemd unit ---------------------------------------------------------
my $unit = FastdTest::slurp("$prefix/lib/systemd/system/fastd.service") // '';
{
    unlike($unit, qr/@[A-Z]+@/, 'unit: every placeholder is filled in');
    like($unit, qr{^ExecStart=\Q$prefix\E/sbin/fastd -g -c \Q$prefix\E/conf/fastd\.conf$}m,
         'unit: ExecStart in the foreground on the installed config');
    like($unit, qr/^Type=notify$/m, 'unit: Type=notify');
    like($unit, qr{^ExecReload=/bin/kill -HUP \$MAINPID$}m, 'unit: reload is SIGHUP');
    like($unit, qr/^KillSignal=SIGQUIT$/m, 'unit: stop is the graceful SIGQUIT');
    like($unit, qr/^User=nobody$/m, 'unit: runs as FASTD_USER');
    like($unit, qr/^AmbientCapabilities=CAP_NET_BIND_SERVICE$/m,
         'unit: may bind low ports without root');
    like($unit, qr/^CapabilityBoundingSet=CAP_NET_BIND_SERVICE$/m, 'unit: and nothing else');
    like($unit, qr/^NoNewPrivileges=yes$/m, 'unit: NoNewPrivileges');
    like($unit, qr/^ProtectSystem=strict$/m, 'unit: ProtectSystem=strict');
    like($unit, qr{^ReadWritePaths=\Q$prefix\E/logs$}m, 'unit: only logs/ is writable');
}

SKIP: {
    my $sa = `command -v systemd-analyze 2>/dev/null`;
    chomp $sa;
    skip 'systemd-analyze is not installed', 3 unless $sa;
    my $out = `'$sa' verify '$prefix/lib/systemd/system/fastd.service' 2>&1`;
    is($?, 0, 'systemd-analyze verify accepts the unit') or diag($out);
    $out = `'$sa' security --offline=yes '$prefix/lib/systemd/system/fastd.service' 2>&1`;
    my ($level) = $out =~ /Overall exposure level for fastd\.service: ([\d.]+)/;
    ok(defined $level, 'systemd-analyze security rates the unit') or diag($out);
    # 10 is an unhardened service; below 4 is "OK" in systemd's scale
    cmp_ok($level // 10, '<', 4, "exposure level " . ($level // '?') . " is below 4");
}

# --- logrotate ----------------------------------------------------------------
{
    my $policy = FastdTest::slurp("$lr_dir/fastd") // '';
    like($policy, qr{^\Q$prefix\E/logs/\*\.log \{$}m, 'logrotate policy installed for PREFIX/logs');
    like($policy, qr{kill -USR1 "\$\(cat \Q$prefix\E/logs/fastd\.pid\)"}, '... reopens with SIGUSR1');
}

SKIP: {
    my $lr = -x '/usr/sbin/logrotate' ? '/usr/sbin/logrotate' : `command -v logrotate 2>/dev/null`;
    chomp $lr;
    skip 'logrotate is not installed', 6 unless $lr;

    my $t = FastdTest->new(conf => FastdTest::base_conf(
        main => { pid => '%%DIR%%/logs/fastd.pid' },
        http => { access_log => '%%DIR%%/logs/access.log buffer=4k flush=1s' },
    ));
    my $dir = $t->dir;
    mkdir "$dir/logs";
    # the shipped policy with this test's prefix, user and group
    my $user  = getpwuid($<) // 'root';
    my $group = getgrgid((split ' ', $()[0]) // 'root';
    my $text = FastdTest::slurp("$root/conf/fastd.logrotate");
    $text =~ s/\@PREFIX\@/$dir/g;
    $text =~ s/\@USER\@ adm/$user $group/g;
    $text =~ s/\@USER\@/$user/g;
    FastdTest::spew("$dir/logrotate.conf", $text);
    chmod 0644, "$dir/logrotate.conf";

    $t->start;
    FastdTest::wait_for(sub { -s "$dir/logs/fastd.pid" }, 10);
    my $n = 0;
    my $get = sub {
        my ($tag, $count) = @_;
        for (1 .. $count) {
            my $r = $t->get("/plaintext?$tag-$_");
            $n++ if $r && $r->status == 200;
        }
    };
    $get->('before', 150);
    my $out = `'$lr' -f -s '$dir/logrotate.state' '$dir/logrotate.conf' 2>&1`;
    is($?, 0, 'logrotate ran the shipped policy') or diag($out);
    ok(-f "$dir/logs/access.log.1", 'the access log was rotated to access.log.1');
    $get->('after', 150);
    # the reopen is asynchronous: wait until the new file gets lines
    my $fresh = FastdTest::wait_for(sub {
        $get->('late', 1);
        my $s = FastdTest::slurp("$dir/logs/access.log") // '';
        return $s =~ /late-/;
    }, 15, 0.2);
    ok($fresh, 'after the reopen, new lines go to the new access.log');
    $t->stop;

    my @lines;
    for my $f ("$dir/logs/access.log.1", "$dir/logs/access.log") {
        my $s = FastdTest::slurp($f) // '';
        push @lines, grep { /GET \/plaintext\?/ } split /\n/, $s;
    }
    is(scalar @lines, $n, "every request is logged once across both files ($n)");
    my %seen;
    $seen{$_}++ for map { /\?(\w+-\d+)/ ? $1 : () } @lines;
    is(scalar(grep { $seen{"before-$_"} } 1 .. 150), 150, 'no line lost from before the rotation');
    is(scalar(grep { $seen{"after-$_"} } 1 .. 150), 150, 'no line lost from around the reopen');
    $t->no_alerts;
}

done_testing;
