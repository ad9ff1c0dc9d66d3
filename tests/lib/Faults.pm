package Faults;

# Helpers for the fault tests (tests/faults_*.t) and tests/soak: a wrk run
# in the background and its report, and per-process figures read from
# /proc (children, established connections, CPU time, RSS, open fds).
# Core perl modules only; every process started here is stopped here.

use strict;
use warnings;

use File::Temp ();
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return undef;
    local $/;
    my $s = <$fh>;
    close $fh;
    return $s;
}

sub wrk_path {
    my ($d) = grep { -x "$_/wrk" } split /:/, $ENV{PATH};
    return $d ? "$d/wrk" : undef;
}

# Start wrk: %o url, threads (1), conns (16), duration (s), timeout (5),
# script (a Lua file), latency (1: --latency). Returns a handle.
sub wrk_start {
    my (%o) = @_;
    my $wrk = wrk_path() or die "wrk not installed";
    my $out = File::Temp->new(UNLINK => 1);
    my @cmd = ($wrk, '-t' . ($o{threads} // 1), '-c' . ($o{conns} // 16),
               '-d' . ($o{duration} // 5) . 's', '--timeout',
               ($o{timeout} // 5) . 's');
    push @cmd, '--latency' if $o{latency};
    push @cmd, '-s', $o{script} if $o{script};
    push @cmd, $o{url};
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out->filename or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT;
        { no warnings 'exec'; exec @cmd; }
        POSIX::_exit(127);
    }
    return bless { pid => $pid, out => $out, t0 => time,
                   duration => $o{duration} // 5 }, 'Faults::Wrk';
}

# Parse a wrk report: requests, socket errors, non-2xx, latency percentiles
# (ms) when --latency was given.
sub wrk_parse {
    my ($text) = @_;
    my %r = (text => $text, requests => 0, connect => 0, read => 0,
             write => 0, timeout => 0, non2xx => 0);
    $r{requests} = $1 if $text =~ /(\d+) requests in/;
    if ($text =~ /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/) {
        @r{qw(connect read write timeout)} = ($1, $2, $3, $4);
    }
    $r{non2xx} = $1 if $text =~ /Non-2xx or 3xx responses: (\d+)/;
    $r{rps} = $1 if $text =~ /Requests\/sec:\s+([\d.]+)/;
    while ($text =~ /^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$/mg) {
        my ($p, $v, $u) = ($1, $2, $3);
        $r{"p$p"} = $u eq 'us' ? $v / 1000 : $u eq 's' ? $v * 1000 : $v;
    }
    $r{errors} = $r{connect} + $r{read} + $r{write} + $r{timeout};
    return \%r;
}

# Live children of $pid (the kernel's list: no /proc scan).
sub children {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/task/$pid/children") // '';
    return grep { my $st = slurp("/proc/$_/stat") // ''; $st !~ /\)\s+[ZX]\s/ }
        split ' ', $s;
}

# Socket inodes a process holds.
sub socket_inodes {
    my ($pid) = @_;
    my %ino;
    opendir my $dh, "/proc/$pid/fd" or return {};
    for my $f (readdir $dh) {
        my $l = readlink("/proc/$pid/fd/$f") // next;
        $ino{$1} = 1 if $l =~ /^socket:\[(\d+)\]$/;
    }
    closedir $dh;
    return \%ino;
}

# Established TCP connections to local $port held by $pid.
sub established {
    my ($pid, $port) = @_;
    my $ino = socket_inodes($pid);
    my $hex = sprintf '%04X', $port;
    my $n = 0;
    for my $f ('/proc/net/tcp', '/proc/net/tcp6') {
        for my $l (split /\n/, slurp($f) // '') {
            my @x = split ' ', $l;
            next unless @x > 9 && $x[1] =~ /:$hex$/ && $x[3] eq '01';
            $n++ if $ino->{ $x[9] };
        }
    }
    return $n;
}

# CPU seconds (user + system) used by a process so far.
sub cpu_seconds {
    my ($pid) = @_;
    my $st = slurp("/proc/$pid/stat") // return undef;
    $st =~ s/^.*\)\s+//s;
    my @f = split ' ', $st;
    # after the comm: state is field 3, utime 14, stime 15 (1-based)
    return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

sub rss_kb {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/status") // return undef;
    return $s =~ /^VmRSS:\s+(\d+)/m ? $1 : undef;
}

sub fd_count {
    my ($pid) = @_;
    opendir my $dh, "/proc/$pid/fd" or return undef;
    my $n = grep { /^\d+$/ } readdir $dh;
    closedir $dh;
    return $n;
}

package Faults::Wrk;

use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

sub running {
    my ($self) = @_;
    return 0 if defined $self->{status};
    my $r = waitpid($self->{pid}, WNOHANG);
    if ($r == $self->{pid}) {
        $self->{status} = $?;
        return 0;
    }
    return 1;
}

# Wait for wrk to end (its duration plus $slack seconds), then parse.
# End a run before its duration: wrk stops on SIGINT and still reports.
sub stop {
    my ($self) = @_;
    kill 'INT', $self->{pid} if $self->running;
    return $self->finish(-$self->{duration} + (time - $self->{t0}) + 10);
}

sub finish {
    my ($self, $slack) = @_;
    my $deadline = $self->{t0} + $self->{duration} + ($slack // 15);
    sleep 0.05 while $self->running && time < $deadline;
    if ($self->running) {
        kill 'TERM', $self->{pid};
        sleep 0.5;
        kill 'KILL', $self->{pid} if $self->running;
        waitpid($self->{pid}, 0);
        $self->{status} //= -1;
        $self->{overran} = 1;
    }
    my $r = Faults::wrk_parse(Faults::slurp($self->{out}->filename) // '');
    $r->{overran} = $self->{overran};
    return $r;
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    if (!defined $self->{status} && $self->{pid}) {
        kill 'KILL', $self->{pid};
        waitpid($self->{pid}, 0);
    }
}

1;
