#!/usr/bin/perl
# Every benchmark profile (conf/profiles/NAME.conf + NAME.bench) passes the
# runner's correctness check, `tests/bench/run NAME --check`: fastd started
# with the profile answers as TechEmpower's verifier wants (status, Server,
# an RFC 1123 Date that changes, Content-Type, framing, body, fortunes
# table). A profile whose module is not built is skipped (the runner exits
# 77). No timing: CI does not run the timed benchmarks.
#
# Also: the check can fail (a profile made wrong by an override is caught),
# and the noparse ceiling probe still builds and answers pipelined requests.

use strict;
use warnings;

use lib 'tests/lib';
use FastdTest;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Test::More;

# the profiles' answers, checked in stage 1 with the same code: a minute
# more in the stage that ends CI
FastdTest::skip_in_sanitizer_stage('the bench profiles answer as they should');
use Time::HiRes qw(time sleep);

my $root   = FastdTest::root();
my $runner = "$root/tests/bench/run";
my $pdir   = "$root/conf/profiles";

plan skip_all => 'python3 is needed by tests/bench/run'
    unless grep { -x "$_/python3" } split /:/, $ENV{PATH};
plan skip_all => 'no fastd binary (make first)' unless -x FastdTest::bin();

# Run a command with a deadline; returns (exit code or -1, output).
sub run_cmd {
    my ($timeout, @cmd) = @_;
    my $dir = tempdir(CLEANUP => 1);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN,  '<', '/dev/null';
        open STDOUT, '>', "$dir/out" or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT;
        exec @cmd or POSIX::_exit(127);
    }
    my $deadline = time + $timeout;
    my $status;
    while (time < $deadline) {
        if (waitpid($pid, WNOHANG) == $pid) { $status = $?; last }
        sleep 0.05;
    }
    if (!defined $status) {
        kill 'TERM', $pid;   # the runner stops what it started
        sleep 0.5;
        kill 'KILL', $pid;
        waitpid($pid, 0);
        return (-1, (FastdTest::slurp("$dir/out") // '') . "\n[timed out]");
    }
    my $code = WIFEXITED($status) ? WEXITSTATUS($status) : -1;
    return ($code, FastdTest::slurp("$dir/out") // '');
}

opendir my $dh, $pdir or die "$pdir: $!";
my @names = sort map { /^(.+)\.bench$/ ? $1 : () } readdir $dh;
closedir $dh;
my @confs = sort map { m{([^/]+)\.conf$} ? $1 : () } glob "$pdir/*.conf";

is_deeply(\@names, \@confs, 'every profile has a .conf and a .bench');
for my $want (qw(plaintext json static proxy fortunes queue offload)) {
    ok((grep { $_ eq $want } @names), "profile $want exists");
}

my $bin = FastdTest::bin();
for my $name (@names) {
    my ($rc, $out) = run_cmd(60, $runner, $name, '--check', '--bin', $bin);
    SKIP: {
        skip "$name: " . ($out =~ /^SKIP \S+ (.*)$/m ? $1 : 'skipped'), 1
            if $rc == 77;
        ok($rc == 0, "tests/bench/run $name --check") or diag($out);
    }
}

# The check catches a wrong server: no Server header.
{
    my ($rc, $out) = run_cmd(60, $runner, 'plaintext', '--check', '--bin',
                             $bin, '--set', 'http.server_header=');
    is($rc, 1, 'check fails when Server is missing') or diag($out);
    like($out, qr/no Server header/, 'and says why');
}

# The noparse probe builds on its own (never through the main build) and
# answers 16 pipelined requests with 16 responses.
SKIP: {
    my $cc = (grep { -x "$_/cc" } split /:/, $ENV{PATH}) ? 'cc' : undef;
    skip 'no cc', 2 unless $cc;
    my $dir = tempdir(CLEANUP => 1);
    my ($rc, $out) = run_cmd(60, $cc, qw(-O2 -Wall -Wextra -Werror -o),
                             "$dir/noparse", "$root/tests/bench/noparse.c");
    is($rc, 0, 'noparse.c compiles cleanly') or diag($out);
    skip 'noparse did not build', 1 if $rc;
    my $port = FastdTest::free_port();
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', '/dev/null';
        exec "$dir/noparse", $port or POSIX::_exit(127);
    }
    my $s;
    FastdTest::wait_for(sub {
        $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                                   Timeout => 1);
    }, 5);
    my $got = '';
    if ($s) {
        print $s "GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n" x 16;
        my $deadline = time + 5;
        while (time < $deadline) {
            my @n = $got =~ /Hello, World!/g;
            last if @n >= 16;
            my $r = sysread($s, my $buf, 65536);
            last unless $r;
            $got .= $buf;
        }
    }
    my @n = $got =~ m{HTTP/1\.1 200 OK\r\n.*?\r\n\r\nHello, World!}sg;
    is(scalar @n, 16, 'noparse: 16 pipelined requests, 16 responses');
    kill 'TERM', $pid;
    waitpid($pid, 0);
}

done_testing();
