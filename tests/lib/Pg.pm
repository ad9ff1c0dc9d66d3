package Pg;
# A PostgreSQL cluster of a test's own (Debian's postgresql: the newest
# /usr/lib/postgresql/N/bin), never the system's service. The server will
# not run as root, so its directory belongs to an unprivileged user
# (postgres, else nobody): initdb runs as that user, then the postgres
# binary in the foreground as a child of ours, listening on 127.0.0.1:PORT
# and a unix socket in the directory, with what a test wants of it
# (fsync, synchronous_commit and full_page_writes off; max_connections).
# Readiness is polled (pg_isready) up to a deadline. The role
# benchmarkdbuser (password benchmarkdbpass, over TCP: scram-sha-256) owns
# the database hello_world, TechEmpower's names, which holds World and
# Fortune (tests/bench/world-db). Stopped by pid: SIGINT (a fast
# shutdown), then waited for; its directory is removed.
#
#   my $pg = Pg->new or plan skip_all => Pg::missing();
#   $pg->url;             postgresql://benchmarkdbuser:...@127.0.0.1:PORT/hello_world
#   $pg->psql($sql);      the rows, "|"-separated, one a line (as postgres)
#   $pg->kill9; $pg->start;   the database dies, then comes back on the
#                             same port and directory (crash recovery)
#   $pg->stop;            also when the object goes
#
# As a command, for the benchmark runner (tests/bench/run), which stops it
# by its pid with SIGTERM:
#   perl -Itests/lib tests/lib/Pg.pm --url-file F [--cpus LIST]
#                                    [--max-connections N] [--set K=V]...
# starts a cluster with the tables, writes its URL into F once it is
# ready, and stops the cluster on SIGTERM, SIGINT or SIGHUP.

use strict;
use warnings;

use File::Path qw(remove_tree);
use File::Temp ();
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use FastdTest;

our $USER = 'benchmarkdbuser';
our $PASS = 'benchmarkdbpass';
our $DB   = 'hello_world';

# The directory of the newest PostgreSQL's binaries, or undef.
sub bindir {
    my @d = sort { ($b =~ /(\d+)/)[0] <=> ($a =~ /(\d+)/)[0] }
            grep { -x "$_/postgres" && -x "$_/initdb" && -x "$_/pg_isready" }
            glob '/usr/lib/postgresql/*/bin';
    return $d[0];
}

# Why there can be no cluster here (undef: there can).
sub missing {
    return 'PostgreSQL is not installed (apt-get install postgresql)'
        unless bindir();
    return 'psql is not installed (postgresql-client)'
        unless grep { -x "$_/psql" } split /:/, $ENV{PATH} || '/usr/bin';
    return 'no unprivileged user (postgres or nobody) to run PostgreSQL'
        if $> == 0 && !_owner();
    return undef;
}

# The user the server runs as when we are root: [name, uid, gid].
sub _owner {
    for my $name (qw(postgres nobody)) {
        my @pw = getpwnam($name) or next;
        return [$name, $pw[2], $pw[3]];
    }
    return undef;
}

# Options: port (a free one), max_connections (100), cpus (a taskset
# list the server is pinned to), settings ({name => value}: more -c),
# world (1: create the role, the database and the tables). Returns undef
# when missing() says why; dies when the cluster does not come up.
sub new {
    my ($class, %o) = @_;
    return undef if missing();
    my $self = bless {
        bin      => bindir(),
        port     => $o{port} || FastdTest::free_port(),
        max_conn => $o{max_connections} || 100,
        cpus     => $o{cpus},
        settings => $o{settings} || {},
        pid      => 0,
        owner    => $> == 0 ? _owner() : undef,
    }, $class;
    $self->{dir} = File::Temp::tempdir('fastd-pg.XXXXXX', TMPDIR => 1);
    $self->{data} = "$self->{dir}/data";
    $self->{sock} = "$self->{dir}/sock";
    mkdir $self->{sock} or die "mkdir $self->{sock}: $!";
    if (my $ow = $self->{owner}) {
        chown $ow->[1], $ow->[2], $self->{dir}, $self->{sock}
            or die "chown $self->{dir}: $!";
    }
    chmod 0700, $self->{dir};
    $self->_initdb;
    $self->start;
    $self->setup_world if $o{world} // 1;
    return $self;
}

sub port    { $_[0]{port} }
sub dir     { $_[0]{dir} }
sub sockdir { $_[0]{sock} }
sub pid     { $_[0]{pid} }
sub log     { FastdTest::slurp("$_[0]{dir}/postgres.log") // '' }

sub url {
    my ($self) = @_;
    return "postgresql://$USER:$PASS\@127.0.0.1:$self->{port}/$DB";
}

# Fork, drop to the owner (when root), run @cmd with its output appended
# to the cluster's log. Returns the pid.
sub _spawn {
    my ($self, @cmd) = @_;
    my $pid = fork // die "fork: $!";
    return $pid if $pid;
    open STDIN, '<', '/dev/null';
    open STDOUT, '>>', "$self->{dir}/postgres.log" or POSIX::_exit(126);
    open STDERR, '>&', \*STDOUT;
    if (my $ow = $self->{owner}) {
        # groups first, then the ids (real and effective) for good
        $) = "$ow->[2] $ow->[2]";
        POSIX::setgid($ow->[2]) or POSIX::_exit(126);
        POSIX::setuid($ow->[1]) or POSIX::_exit(126);
        $ENV{HOME} = $self->{dir};
    }
    # our process group: a ^C reaches the server too (a fast shutdown)
    { no warnings qw(exec syntax); exec @cmd; }
    POSIX::_exit(127);
}

sub _initdb {
    my ($self) = @_;
    my $pw = "$self->{dir}/pw";
    FastdTest::spew($pw, "$PASS\n");
    chown $self->{owner}[1], $self->{owner}[2], $pw if $self->{owner};
    # the superuser "postgres" by a unix socket without a password (the
    # harness's psql), everyone else over TCP by password
    my $pid = $self->_spawn("$self->{bin}/initdb", '-D', $self->{data},
                            '-U', 'postgres', '-E', 'UTF8', '--locale=C',
                            '--auth-local=trust',
                            '--auth-host=scram-sha-256', '--pwfile', $pw,
                            '--no-sync');
    waitpid($pid, 0);
    unlink $pw;
    die "initdb failed:\n" . $self->log if $?;
}

# Start the server (again, after kill9 or stop: the same port and
# directory) and wait until it accepts connections.
sub start {
    my ($self) = @_;
    return if $self->{pid};
    my %set = (listen_addresses => '127.0.0.1', fsync => 'off',
               synchronous_commit => 'off', full_page_writes => 'off',
               max_connections => $self->{max_conn},
               unix_socket_permissions => '0777',
               %{$self->{settings}});
    my @cmd = ("$self->{bin}/postgres", '-D', $self->{data},
               '-k', $self->{sock}, '-p', $self->{port},
               map { ('-c', "$_=$set{$_}") } sort keys %set);
    unshift @cmd, 'taskset', '-c', $self->{cpus} if $self->{cpus};
    $self->{pid} = $self->_spawn(@cmd);
    my $ready = FastdTest::wait_for(sub {
        return -1 if waitpid($self->{pid}, WNOHANG) == $self->{pid};
        return system("$self->{bin}/pg_isready", '-q', '-U', 'postgres',
                      '-h', $self->{sock}, '-p', $self->{port}) == 0;
    }, 60, 0.05);
    if (!$ready || $ready == -1) {
        kill 'KILL', $self->{pid} if $ready != -1;
        waitpid($self->{pid}, 0) if $ready != -1;
        $self->{pid} = 0;
        die "PostgreSQL did not start on port $self->{port}:\n" . $self->log;
    }
}

# psql as the superuser over the unix socket; dies on an error. Returns
# the output: unaligned rows, "|" between columns.
sub psql {
    my ($self, $sql, %o) = @_;
    my $db = $o{db} // $DB;
    my $out = "$self->{dir}/psql.out";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT;
        { no warnings qw(exec syntax);
          exec 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
               '-h', $self->{sock}, '-p', $self->{port}, '-U', 'postgres',
               '-d', $db, '-c', $sql; }
        POSIX::_exit(127);
    }
    waitpid($pid, 0);
    my $text = FastdTest::slurp($out) // '';
    unlink $out;
    die "psql ($sql): $text" if $?;
    chomp $text;
    return $text;
}

# The role, the database and the tables.
sub setup_world {
    my ($self) = @_;
    $self->psql("CREATE ROLE $USER LOGIN PASSWORD '$PASS'", db => 'postgres');
    $self->psql("CREATE DATABASE $DB OWNER $USER", db => 'postgres');
    my $r = system(FastdTest::root() . '/tests/bench/world-db', $self->url);
    die "tests/bench/world-db failed\n" if $r;
    # synchronous_commit is off: a commit reaches the WAL's file within
    # wal_writer_delay, so a kill9 right after would lose the tables
    $self->psql('CHECKPOINT', db => 'postgres');
}

# The server's processes: the postmaster and its children.
sub processes {
    my ($self) = @_;
    return () unless $self->{pid};
    return ($self->{pid}, FastdTest::children_of($self->{pid}));
}

# Wait until none of @pids is alive (a killed postmaster's backends leave
# when they see it gone: until then the data directory is still in use).
sub _wait_gone {
    my (@pids) = @_;
    FastdTest::wait_for(sub { !grep { FastdTest::pid_alive($_) } @pids },
                        30, 0.02);
}

# The database dies at once (SIGKILL to the postmaster, as the OOM killer
# would); returns when its last backend has gone.
sub kill9 {
    my ($self) = @_;
    return unless $self->{pid};
    my @pids = $self->processes;
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
    $self->{pid} = 0;
    _wait_gone(@pids);
}

# A fast shutdown (SIGINT), waited for; SIGKILL after 30 s.
sub shutdown {
    my ($self) = @_;
    return unless $self->{pid};
    my @pids = $self->processes;
    kill 'INT', $self->{pid};
    my $gone = FastdTest::wait_for(
        sub { waitpid($self->{pid}, WNOHANG) == $self->{pid} }, 30, 0.02);
    if (!$gone) {
        kill 'KILL', @pids;
        waitpid($self->{pid}, 0);
    }
    $self->{pid} = 0;
    _wait_gone(@pids);
}

# Shut down and remove the directory.
sub stop {
    my ($self) = @_;
    $self->shutdown;
    remove_tree($self->{dir}) if $self->{dir} && -d $self->{dir};
    $self->{dir} = undef;
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->stop if $self->{dir};
}

# ---------------------------------------------------------------------------
# as a command (tests/bench/run)

sub main {
    my @argv = @_;
    my ($url_file, %o, %set);
    while (@argv) {
        my $a = shift @argv;
        if    ($a eq '--url-file')        { $url_file = shift @argv }
        elsif ($a eq '--cpus')            { $o{cpus} = shift @argv }
        elsif ($a eq '--max-connections') { $o{max_connections} = shift @argv }
        elsif ($a eq '--set' && ($argv[0] // '') =~ /^([\w.]+)=(.*)$/) {
            $set{$1} = $2;
            shift @argv;
        }
        else { die "Pg.pm: unknown argument $a\n" }
    }
    die "Pg.pm: --url-file FILE is needed\n" unless $url_file;
    if (my $why = missing()) {
        print STDERR "Pg.pm: $why\n";
        exit 77;
    }
    my $stop = 0;
    $SIG{$_} = sub { $stop = 1 } for qw(TERM INT HUP);
    my $pg = Pg->new(%o, settings => \%set);
    FastdTest::spew("$url_file.tmp", $pg->url . "\n");
    rename "$url_file.tmp", $url_file or die "rename $url_file: $!";
    print STDERR "Pg.pm: ready on port ", $pg->port, ", pid ", $pg->pid,
                 "\n";
    sleep 0.2 until $stop || waitpid($pg->pid, WNOHANG) == $pg->pid;
    my $died = !$stop;
    $pg->{pid} = 0 if $died;
    $pg->stop;
    die "Pg.pm: PostgreSQL exited on its own\n" if $died;
    exit 0;
}

main(@ARGV) unless caller;

1;
