package PhpFpm;
# A php-fpm of a test's own: its pools (the text of their sections) in a
# configuration file under the test's directory, run in the foreground
# (root: -R), its output in DIR/fpm.out, stopped by pid when the object
# goes (or by ->stop). The test waits for its listener, which it knows.

use strict;
use warnings;
use POSIX ();
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
