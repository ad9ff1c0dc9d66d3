package H2Up;

# Backends for the HTTP/2 upstream tests (h2_upstream.t, grpc.t): a
# process started with its output in a file, ready once it printed READY
# (or, for nghttpd, once its port accepts), stopped when the test ends.

use strict;
use warnings;

use IO::Socket::INET;
use POSIX ();
use FastdTest;

my @procs;

# Run @cmd (stdout and stderr into $log); wait for READY in $log, or for
# $o{port} to accept when $o{ready} is 'port'. Returns its pid.
sub start {
    my ($log, $cmd, %o) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', $log or POSIX::_exit(127);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(127);
        exec @$cmd or POSIX::_exit(127);
    }
    push @procs, $pid;
    my $ok = FastdTest::wait_for(sub {
        return 0 if waitpid($pid, POSIX::WNOHANG()) == $pid;
        if (($o{ready} // '') eq 'port') {
            my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                          PeerPort => $o{port},
                                          Proto => 'tcp');
            return $s ? 1 : 0;
        }
        return (FastdTest::slurp($log) // '') =~ /^READY/m;
    }, 20);
    die "backend @$cmd did not start: " . (FastdTest::slurp($log) // '')
        unless $ok;
    return $pid;
}

sub stop {
    my ($pid) = @_;
    kill 'KILL', $pid;
    waitpid($pid, 0);
    @procs = grep { $_ != $pid } @procs;
}

# Whether $pid has exited (reaped here)
sub gone {
    my ($pid) = @_;
    return waitpid($pid, POSIX::WNOHANG()) == $pid;
}

END {
    local $?; # the test's exit status, not a backend's
    for my $pid (@procs) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
}

1;
