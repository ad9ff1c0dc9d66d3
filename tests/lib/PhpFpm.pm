package PhpFpm;
# A php-fpm of a test's own: its pools (the text of their sections) in a
# configuration file under the test's directory, run in the foreground
# (root: -R), its output in DIR/fpm.out, stopped by pid when the object
# goes (or by ->stop). The test waits for its listener, which it knows.

use strict;
use warnings;
use POSIX ();
use IO::Socket::INET;
use FastdTest;

# Debian's php-fpm, or undef (the tests skip then)
sub binary {
    return (grep { -x } map { ("/usr/sbin/$_", "/usr/bin/$_") }
            qw(php-fpm8.2 php-fpm))[0];
}

sub start {
    my ($class, $dir, $pools) = @_;
    my $bin = binary() or die 'php-fpm is not installed';
    FastdTest::spew("$dir/fpm.conf", "[global]\nerror_log = $dir/fpm.log\n"
                    . "daemonize = no\npid = $dir/fpm.pid\n\n$pools");
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', "$dir/fpm.out";
        open STDERR, '>&', \*STDOUT;
        { no warnings 'exec';
          exec $bin, '-F', '-y', "$dir/fpm.conf", '-p', $dir,
               $> == 0 ? ('-R') : (); }
        POSIX::_exit(127);
    }
    return bless { pid => $pid, dir => $dir }, $class;
}

# The tests' usual one: a pool "test" of two children on 127.0.0.1:$port,
# started and waited for (up to 20 s). ->up says whether it listens.
sub start_tcp {
    my ($class, $dir, $port) = @_;
    my $self = $class->start($dir, "[test]\nlisten = 127.0.0.1:$port\n"
                             . "pm = static\npm.max_children = 2\n"
                             . "catch_workers_output = no\n");
    $self->{up} = FastdTest::wait_for(sub {
        IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                              Proto => 'tcp') }, 20, 0.05);
    return $self;
}

sub up     { $_[0]{up} }
sub pid    { $_[0]{pid} }
sub output { FastdTest::slurp("$_[0]{dir}/fpm.out") // '' }

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'TERM', $self->{pid};
    waitpid($self->{pid}, 0);
    $self->{pid} = 0;
}

sub DESTROY { $_[0]->stop }

1;
