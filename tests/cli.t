#!/usr/bin/perl
# The command line: -h/--help (usage on stdout, exit 0, every option and
# command listed), --version, a bad option or command (exit 2), and the
# one-line commands reverse-proxy, file-server and respond: their --help,
# --print-config (a file fastd -t -c accepts), their bad arguments (exit 2),
# and each one serving in the foreground until SIGINT (exit 0).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use POSIX qw(:sys_wait_h);
use Test::More;

my $t = FastdTest->new;    # a directory and free ports; no server of its own
my $dir = $t->dir;
my $bin = FastdTest::bin();
# a self-signed certificate is kept under $HOME: the test's, not the user's
my %env = (HOME => $dir, XDG_DATA_HOME => '');

sub fastd { FastdTest::run_fastd({ env => \%env }, @_) }

# --- fastd -h ---
for my $h ('-h', '--help') {
    my ($rc, $out) = fastd($h);
    is($rc, 0, "$h exits 0");
    for my $o (qw(-c -p -g -t -s -k -v -V --version -h --help)) {
        like($out, qr/^\s+(?:-\w, )*\Q$o\E\b/m, "$h lists $o");
    }
    like($out, qr/^usage: fastd \[-c FILE\] \[-p PROFILE\] \[-g\] \[-t\] \[-s SIGNAL\] \[-k\] \[-v\] \[-h\]$/m,
         "$h: the synopsis has every option");
    for my $c (qw(reverse-proxy file-server respond)) {
        like($out, qr/^\s+fastd \Q$c\E /m, "$h: the synopsis has $c");
        like($out, qr/^  \Q$c\E\s+\w/m, "$h: $c is described");
    }
}
for my $v ('-v', '--version') {
    my ($rc, $out) = fastd($v);
    is($rc, 0, "$v exits 0");
    like($out, qr{^fastd/\d+\.\d+\.\d+$}m, "$v prints the version");
}
{
    my ($rc, $out) = fastd('--bogus');
    is($rc, 2, 'an unknown option exits 2');
    like($out, qr/unrecognized option '--bogus'.*see fastd -h/s, '... and says so');
    ($rc, $out) = fastd('-x');
    is($rc, 2, 'an unknown short option exits 2');
    ($rc, $out) = fastd('serve-all');
    is($rc, 2, 'an unknown command exits 2');
    like($out, qr/unknown command "serve-all"/, '... and names it');
    ($rc, $out) = fastd('-c', $t->conf_file, 'stray');
    is($rc, 2, 'a stray argument exits 2');
    like($out, qr/unexpected argument "stray"/, '... and names it');
}

# --- each command's --help ---
my %own = ('reverse-proxy' => [qw(--from --to --change-host-header)],
           'file-server'   => [qw(--root --listen --browse)],
           'respond'       => [qw(--listen --status)]);
for my $c (sort keys %own) {
    my ($rc, $out) = fastd($c, '--help');
    is($rc, 0, "$c --help exits 0");
    like($out, qr/^usage: fastd \Q$c\E /, "$c --help: its usage");
    for my $o (@{ $own{$c} }, qw(--cert --key --workers --access-log
                                 --print-config --help)) {
        like($out, qr/^\s+(?:-h, )?\Q$o\E\b/m, "$c --help lists $o");
    }
    ($rc, $out) = fastd($c, '-h');
    is($rc, 0, "$c -h exits 0");
}

# --- bad arguments: exit 2 and a message naming the problem ---
for my $case (
    [['reverse-proxy'], qr/--to ADDR is required/],
    [['reverse-proxy', '--to', '1.2.3.4:99999'], qr/port must be 1\.\.65535/],
    [['reverse-proxy', '--to', 'http://a/b'], qr/an address has no path/],
    [['reverse-proxy', '--to', '::1:80'], qr/IPv6 address goes in brackets/],
    [['reverse-proxy', '--to', ':1', '--to', 'https://x:2'], qr/every backend http/],
    [['reverse-proxy', '--to', ':1', '--bogus'], qr/unrecognized option '--bogus'/],
    [['file-server', '--root', "$dir/none"], qr/--root "\Q$dir\E\/none": No such file/],
    [['file-server', '--status', '200'], qr/unrecognized option '--status'/],
    [['respond', '--status', '99'], qr/--status "99": 200\.\.599/],
    [['respond', 'a', 'b'], qr/unexpected argument "b"/],
    [['respond', 'a ; b'], qr/cannot hold " ;"/],
    [['respond', "a\nb"], qr/a control character/],
    [['respond', '--listen', ':80', '--cert', "$dir/x.crt"], qr/--cert and --key are for an https/],
    [['respond', '--workers', 'many'], qr/--workers "many"/],
) {
    my ($args, $re) = @$case;
    my ($rc, $out) = fastd(@$args);
    my $name = join ' ', map { s/\n/\\n/gr } @$args;
    is($rc, 2, "$name: exits 2");
    like($out, $re, "$name: says why");
}

# what the loader refuses in a built configuration: exit 1, as a file's error
{
    my ($rc, $out) = fastd('respond', 'hi $nosuchvar');
    is($rc, 1, 'a configuration error in a built configuration: exit 1');
    like($out, qr/^fastd: \[emerg\] respond:\d+: unknown variable "\$nosuchvar".*\n.*--print-config/m,
         '... naming the line of the INI text --print-config shows');
}

# no home to keep a self-signed certificate in (nobody's is /nonexistent):
# exit 1, and no home made
{
    my ($rc, $out) = FastdTest::run_fastd({ env => { HOME => "$dir/nohome", XDG_DATA_HOME => '' } },
                                          'respond', '--listen', 'https://localhost:8443');
    is($rc, 1, 'https:// without a home: exit 1');
    like($out, qr/no home directory to keep a self-signed certificate in: give --cert and --key/,
         '... and says what to do');
    ok(!-e "$dir/nohome", '... and makes no home');
}

# --- --print-config: a configuration file fastd -t -c takes ---
FastdTest::self_signed("$dir/given", 'localhost');
mkdir "$dir/www";
mkdir "$dir/print";
FastdTest::spew("$dir/www/hello.txt", "hello file\n");
mkdir "$dir/www/sub";
FastdTest::spew("$dir/www/sub/inner.txt", "x");
for my $args (
    ['reverse-proxy', '--from', ':8080', '--to', '127.0.0.1:3000', '--to', 'http://127.0.0.1:3001'],
    ['reverse-proxy', '--from', 'https://localhost:8443', '--to', 'https://localhost:3000',
     '--change-host-header', '--access-log'],
    ['file-server', '--root', "$dir/www", '--browse', '--listen', '127.0.0.1:8080'],
    ['respond', '--status', '201', "it's \$uri"],
    ['respond', '--listen', 'https://localhost:8443', '--cert', "$dir/given.crt",
     '--key', "$dir/given.key", 'hi'],
) {
    # a home of its own: the serving tests below see a certificate made
    my ($rc, $ini) = FastdTest::run_fastd({ env => { %env, HOME => "$dir/print" } },
                                          @$args, '--print-config');
    is($rc, 0, "@$args --print-config exits 0");
    # run_fastd joins stderr ("made a self-signed certificate") to stdout
    $ini =~ s/^fastd .*\n//mg;
    like($ini, qr/^\[main\]\ndaemon = off\nworkers = auto\npid = off\nerror_log = stderr$/m,
         '... foreground, no pid file, errors on stderr');
    my $f = $t->write_file('printed.conf', $ini);
    my ($trc, $tout) = fastd('-t', '-c', $f);
    is($trc, 0, '... and fastd -t -c takes it') or diag("$ini\n$tout");
}
{
    my ($rc, $ini) = fastd('file-server', '--print-config');
    require Cwd;
    my $cwd = Cwd::getcwd();
    like($ini, qr/^root = \Q$cwd\E$/m, 'file-server serves the current directory by default');
    like($ini, qr/^listen = 0\.0\.0\.0:8080$/m, '... on :8080');
    ($rc, $ini) = fastd('respond', '--listen', '[::1]:9000', '--print-config');
    like($ini, qr/^listen = \[::1\]:9000$/m, 'an IPv6 address');
    ($rc, $ini) = fastd('respond', '--listen', 'example.com', '--print-config');
    like($ini, qr/^listen = 0\.0\.0\.0:80\nserver_name = example\.com$/m,
         'a name: every address, port 80, the name as server_name');
    ($rc, $ini) = fastd('respond', '--listen', '9001', '--print-config');
    like($ini, qr/^listen = 0\.0\.0\.0:9001$/m, 'a port alone');
}

# --- the commands serve, in the foreground, until SIGINT ---

# Start fastd ARGS in the background (stdout and stderr to files); returns
# the pid once $port accepts connections.
my $run = 0;
sub start_cli {
    my ($port, @args) = @_;
    $run++;
    my ($out, $err) = ("$dir/out$run.log", "$dir/err$run.log");
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        setpgrp(0, 0); # a group of its own, as a shell's job
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out or POSIX::_exit(126);
        open STDERR, '>', $err or POSIX::_exit(126);
        @ENV{keys %env} = values %env;
        { no warnings 'exec'; exec { $bin } $bin, @args; }
        POSIX::_exit(127);
    }
    my $ready = FastdTest::wait_for(sub {
        return -1 if waitpid($pid, WNOHANG) == $pid;
        return $t->port_open($port) ? 1 : 0;
    }, 10, 0.02);
    if (!$ready || $ready < 0) {
        diag("fastd @args did not start:\n" . (FastdTest::slurp($err) // ''));
        kill 'KILL', $pid if $ready == 0;
        return undef;
    }
    return { pid => $pid, out => $out, err => $err };
}

# SIGINT to the process group, as Ctrl-C on a terminal (the master and
# its workers get it): it exits 0 within 10 s.
sub interrupt {
    my ($p, $name) = @_;
    kill 'INT', -$p->{pid};
    my $status;
    FastdTest::wait_for(sub {
        my $r = waitpid($p->{pid}, WNOHANG);
        $status = $? if $r == $p->{pid};
        defined $status;
    }, 10, 0.02);
    if (!defined $status) {
        kill 'KILL', $p->{pid};
        waitpid($p->{pid}, 0);
    }
    ok(defined $status && WIFEXITED($status) && WEXITSTATUS($status) == 0,
       "$name: SIGINT stops it, exit 0");
    my $err = FastdTest::slurp($p->{err}) // '';
    like($err, qr/\[notice\] .*fastd [\d.]+ started/, "$name: its log on stderr");
    unlike($err, qr/\[(alert|crit|emerg)\]/, "$name: no alerts") or diag($err);
}

sub curl {
    my (@args) = @_;
    my $out = `curl -s --max-time 10 -o - -w '\n%{http_code}' @args 2>/dev/null`;
    my ($body, $code) = $out =~ /^(.*)\n(\d+)$/s or return ('', 0);
    return ($code, $body);
}

my $port = $t->port;

# respond
{
    my $p = start_cli($port, 'respond', '--listen', "127.0.0.1:$port",
                      '--status', '201', '--workers', '1', 'hi from $uri');
    ok($p, 'respond starts');
    my ($code, $body) = curl("http://127.0.0.1:$port/some/path");
    is($code, 201, 'respond: the status');
    is($body, 'hi from /some/path', 'respond: the text, $uri expanded');
    is(FastdTest::slurp($p->{out}), '', 'respond: no access log by default');
    # a reload reads the configuration from memory again
    kill 'HUP', $p->{pid};
    ok(FastdTest::wait_for(sub {
        (FastdTest::slurp($p->{err}) // '') =~ /configuration reloaded/ }, 10),
       'respond: SIGHUP reloads') or diag(FastdTest::slurp($p->{err}));
    ($code, $body) = curl("http://127.0.0.1:$port/again");
    is($body, 'hi from /again', '... the same configuration');
    interrupt($p, 'respond') if $p;
}

# file-server, with and without --browse
{
    my $p = start_cli($port, 'file-server', '--root', "$dir/www", '--listen',
                      ":$port", '--workers', '1', '--access-log');
    ok($p, 'file-server starts');
    my ($code, $body) = curl("http://127.0.0.1:$port/hello.txt");
    is($code, 200, 'file-server: a file');
    is($body, "hello file\n", 'file-server: its bytes');
    ($code) = curl("http://127.0.0.1:$port/sub/");
    is($code, 403, 'file-server: no listing without --browse');
    ok(FastdTest::wait_for(sub { (FastdTest::slurp($p->{out}) // '') =~ m{"GET /hello\.txt HTTP/1\.1" 200} }, 10),
       'file-server --access-log: a line per request on stdout');
    interrupt($p, 'file-server') if $p;

    $p = start_cli($port, 'file-server', '--root', "$dir/www", '--listen',
                   ":$port", '--browse');
    ($code, $body) = curl("http://127.0.0.1:$port/sub/");
    is($code, 200, 'file-server --browse: a directory is listed');
    like($body, qr/inner\.txt/, '... with its files');
    interrupt($p, 'file-server --browse') if $p;
}

# reverse-proxy over two backends, balanced
{
    my @b = map { my $n = $_; Backend->new(handler => sub {
        Backend::response(200, "from $n") }) } qw(one two);
    my $p = start_cli($port, 'reverse-proxy', '--from', ":$port", '--workers', '1',
                      map { ('--to', $_->addr) } @b);
    ok($p, 'reverse-proxy starts');
    my %seen;
    for (1 .. 4) {
        my ($code, $body) = curl("http://127.0.0.1:$port/x");
        $seen{$body}++ if $code == 200;
    }
    is_deeply(\%seen, { 'from one' => 2, 'from two' => 2 },
              'reverse-proxy: four requests, two to each backend');
    interrupt($p, 'reverse-proxy') if $p;

    # --from https://: a certificate made for the host, kept for the next run
    $p = start_cli($port, 'reverse-proxy', '--from', "https://localhost:$port",
                   '--to', 'http://' . $b[0]->addr, '--workers', '1');
    ok($p, 'reverse-proxy --from https:// starts');
    my ($code, $body) = curl('-k', "https://localhost:$port/x");
    is($code, 200, 'https with the self-signed certificate (curl -k)');
    is($body, 'from one', '... proxied');
    my $crt = "$dir/.local/share/fastd/self-signed-localhost.crt";
    ok(-f $crt, '... kept in ~/.local/share/fastd');
    ($code) = curl('--cacert', $crt, "https://localhost:$port/x");
    is($code, 200, '... and valid for localhost');
    interrupt($p, 'reverse-proxy https') if $p;
    like(FastdTest::slurp($p->{err}), qr/made a self-signed certificate for localhost/,
         '... and says it made one');
    my $mtime = (stat $crt)[9];

    # --cert/--key given
    $p = start_cli($port, 'respond', '--listen', "https://localhost:$port",
                   '--cert', "$dir/given.crt", '--key', "$dir/given.key", 'ok');
    ($code) = curl('--cacert', "$dir/given.crt", "https://localhost:$port/");
    is($code, 200, 'https with --cert and --key');
    interrupt($p, 'respond --cert') if $p;

    $p = start_cli($port, 'respond', '--listen', "https://localhost:$port", 'ok');
    ($code) = curl('--cacert', $crt, "https://localhost:$port/");
    is($code, 200, 'the kept certificate serves the next run');
    is((stat $crt)[9], $mtime, '... unchanged');
    interrupt($p, 'respond https') if $p;
}

# a start error names its reason on stderr, and exits 1
{
    my $squat = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port,
                                      Listen => 5, ReuseAddr => 1) or die $!;
    my ($rc, $out) = fastd('respond', '--listen', "127.0.0.1:$port");
    is($rc, 1, 'a taken port: exit 1');
    like($out, qr/bind\(\) to 127\.0\.0\.1:$port failed.*Address already in use/,
         '... and stderr says why');
    close $squat;
}

done_testing;
