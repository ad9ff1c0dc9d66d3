package Redis;

# A redis-server of the test's own (Debian's redis-server), never the
# system's: in the test's directory, on a free port (or the address
# given), without persistence, started and waited for (PING answered),
# stopped by its pid. kill9 and start again on the same address for a
# Redis that dies under load; netns => NAME runs it in a network
# namespace (ip netns exec). cli(...) runs redis-cli against it.
#
#   my $r = Redis->new(dir => $t->dir) or plan skip_all => Redis::missing();
#   $r->url;  # redis://127.0.0.1:PORT/0

use strict;
use warnings;
use FastdTest;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);

our $SERVER = '/usr/bin/redis-server';
our $CLI    = '/usr/bin/redis-cli';

sub missing {
    return -x $SERVER && -x $CLI ? undef
        : "redis-server is not installed (apt-get install redis-server)";
}

sub new {
    my ($class, %o) = @_;
    return undef if missing();
    my $self = bless {
        dir   => $o{dir},
        host  => $o{host} // '127.0.0.1',
        port  => $o{port} // FastdTest::free_port(),
        netns => $o{netns},
        name  => $o{name} // 'redis',
        owner => $$,
    }, $class;
    return $self->start ? $self : undef;
}

sub host { $_[0]{host} }
sub port { $_[0]{port} }
sub pid  { $_[0]{pid} }
sub url  { "redis://$_[0]{host}:$_[0]{port}/0" }

sub _ns { my ($self) = @_; $self->{netns} ? ('ip', 'netns', 'exec', $self->{netns}) : () }

sub start {
    my ($self) = @_;
    my $log = "$self->{dir}/$self->{name}.log";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', $log;
        open STDERR, '>&', \*STDOUT;
        exec $self->_ns, $SERVER, '--port', $self->{port}, '--bind',
            $self->{host}, '--save', '', '--appendonly', 'no',
            '--daemonize', 'no', '--protected-mode', 'no',
            '--enable-debug-command', 'yes', '--dir', $self->{dir};
        exit 127;
    }
    $self->{pid} = $pid;
    my $up = FastdTest::wait_for(sub {
        return 0 if waitpid($pid, WNOHANG) == $pid;
        my $r = $self->cli('PING') // '';
        return $r =~ /PONG/;
    }, 10, 0.05);
    return $up ? 1 : 0;
}

sub cli {
    my ($self, @args) = @_;
    my $out = '';
    # (quiet: "Could not connect" while it starts is expected)
    open my $fh, '-|', 'sh', '-c', '"$@" 2>/dev/null', 'sh', $self->_ns,
        $CLI, '-h', $self->{host}, '-p', $self->{port}, '--raw', @args
        or return undef;
    local $/;
    $out = <$fh> // '';
    close $fh;
    return $out;
}

# stop it hard (SIGKILL), as a crash
sub kill9 {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
    $self->{pid} = undef;
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'TERM', $self->{pid};
    my $pid = $self->{pid};
    FastdTest::wait_for(sub { waitpid($pid, WNOHANG) == $pid }, 5)
        or do { kill 'KILL', $pid; waitpid($pid, 0) };
    $self->{pid} = undef;
}

# a forked child of the test leaves the server alone
sub DESTROY { $_[0]->stop if $_[0]{owner} == $$ }

1;
