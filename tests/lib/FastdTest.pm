package FastdTest;

# Integration test harness: starts a real fastd on free loopback ports from a
# config the test writes, talks raw HTTP to it, and checks its error log.
# Core perl modules only.

use strict;
use warnings;

use Cwd qw(abs_path);
use Errno qw(EAGAIN EINTR EWOULDBLOCK ECONNRESET);
use File::Basename qw(dirname);
use File::Temp ();
use IO::Select;
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Socket qw(SOL_SOCKET SO_REUSEADDR SHUT_WR);
use Time::HiRes qw(time sleep);
use Test::More;

our $ROOT = abs_path(dirname(__FILE__) . '/../..');
our $BIN  = $ENV{FASTD_BIN} || "$ROOT/objs/fastd";

# error_log verbosity used by base_conf (the level key name of fastd)
our $LOG_LEVEL_KEY = 'error_log_level';

sub root { $ROOT }

# .ci/run's sanitizer stage (ASAN_OPTIONS set) runs every test again on
# the sanitized fastd and io_uring. A test whose subject is a fastd it
# builds itself from a copy of the tree (plain, not sanitized), or one
# stage 1 checked with the same code, only adds minutes there: it says
# why and skips.
sub skip_in_sanitizer_stage {
    my ($why) = @_;
    Test::More::plan(skip_all => "checked in stage 1: $why")
        if $ENV{ASAN_OPTIONS};
}
sub bin  { $BIN }

# A copy of the tree in $dest, for a test that configures and builds a
# fastd of its own there: the sources and, when there is one, the build
# under test (objs/, less its unit tests, fuzzers and benchmarks), so
# make rebuilds only what the copy's configuration changes (objects
# depend on objs/cflags, rewritten only when the flags change:
# auto/make), as in CI's --without-MODULE builds: a --with-NAME=dynamic
# compiles those modules and links, not the whole tree again. Other
# flags (objs/ of a sanitizer or --with-debug build) rebuild everything.
sub copy_tree {
    my ($dest) = @_;
    mkdir $dest or die "mkdir $dest: $!";
    my $objs = -f "$ROOT/objs/cflags" ? 'objs' : '';
    system("cd '$ROOT' && tar --exclude=objs/tests --exclude=objs/fuzz "
           . "--exclude=objs/bench --exclude='objs/*.png' "
           . "--exclude=objs/testrules.yml -cf - configure Makefile auto "
           . "core modules conf html $objs | tar -xf - -C '$dest'") == 0
        or die "cannot copy the tree to $dest\n";
}

# ---------------------------------------------------------------------------
# helpers

# Poll $cond every $interval seconds until it returns true or $timeout
# passes. Returns the condition's last value.
sub wait_for {
    my ($cond, $timeout, $interval) = @_;
    $timeout  //= 5;
    $interval //= 0.02;
    my $deadline = time + $timeout;
    while (1) {
        my $v = $cond->();
        return $v if $v;
        return $v if time >= $deadline;
        sleep $interval;
    }
}

# A port for a listener the test starts next. It lies below the kernel's
# ephemeral range (ip_local_port_range): between this probe and the
# server's bind() no client connect() of this test or of one running
# beside it (make test runs two at a time) can take it, as it could take a
# port that bind(0) handed out.
sub free_port {
    my $low = 32768;
    if (open my $fh, '<', '/proc/sys/net/ipv4/ip_local_port_range') {
        ($low) = split ' ', scalar <$fh>;
        close $fh;
    }
    my $base = 10000;
    if ($low - $base >= 2000) {
        for (1 .. 200) {
            my $port = $base + int(rand($low - $base));
            my $s = IO::Socket::INET->new(
                LocalAddr => '127.0.0.1',
                LocalPort => $port,
                Proto     => 'tcp',
                Listen    => 1,
            ) or next;
            close $s;
            return $port;
        }
    }
    my $s = IO::Socket::INET->new(
        LocalAddr => '127.0.0.1',
        LocalPort => 0,
        Proto     => 'tcp',
        Listen    => 1,
    ) or die "cannot bind a free port: $!";
    my $port = $s->sockport;
    close $s;
    return $port;
}

# A port whose connects are refused for the whole test: bound and never
# listened on, so no test running beside this one (make test runs two at
# a time) can take it, as it could take a free_port() nobody holds.
my @held_ports;
sub dead_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp')
        or die "cannot bind a port: $!";
    push @held_ports, $s;
    return $s->sockport;
}

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or return undef;
    binmode $fh;
    local $/;
    my $s = <$fh>;
    close $fh;
    return $s;
}

sub spew {
    my ($path, $data) = @_;
    open my $fh, '>', $path or die "open $path: $!";
    binmode $fh;
    print $fh $data;
    close $fh or die "close $path: $!";
}

# A self-signed ECDSA P-256 certificate for $name (subject and DNS name)
# as README's first command makes one: $path.crt and its key $path.key.
sub self_signed {
    my ($path, $name) = @_;
    system("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
         . "-nodes -days 2 -subj /CN=$name -addext subjectAltName=DNS:$name "
         . "-keyout '$path.key' -out '$path.crt' 2>/dev/null") == 0
        or die "openssl req failed";
}

# Is a process alive (and not a zombie)?
sub pid_alive {
    my ($pid) = @_;
    return 0 unless $pid && $pid > 0;
    my $stat = slurp("/proc/$pid/stat");
    return 0 unless defined $stat;
    my ($state) = $stat =~ /\)\s+(\S)/s;
    return 0 if !defined $state || $state eq 'Z' || $state eq 'X';
    return 1;
}

# What $pid's descriptors point at: { fd => readlink target }.
sub fd_links {
    my ($pid) = @_;
    my %l;
    opendir my $dh, "/proc/$pid/fd" or return {};
    for my $fd (grep { /^\d+$/ } readdir $dh) {
        my $t = readlink("/proc/$pid/fd/$fd");
        $l{$fd} = $t if defined $t;
    }
    closedir $dh;
    return \%l;
}

# Live (non-zombie) children of $ppid, sorted.
sub children_of {
    my ($ppid) = @_;
    my @kids;
    opendir my $dh, '/proc' or return ();
    for my $p (readdir $dh) {
        next unless $p =~ /^\d+$/;
        my $stat = slurp("/proc/$p/stat") // next;
        # "pid (comm) state ppid ...": comm may hold spaces and parens
        my ($state, $pp) = $stat =~ /.*\)\s+(\S)\s+(\d+)/s or next;
        next if $state eq 'Z' || $state eq 'X';
        push @kids, $p + 0 if $pp == $ppid;
    }
    closedir $dh;
    @kids = sort { $a <=> $b } @kids;
    return @kids;
}

# RFC 1123 date as required by HTTP ("Sun, 06 Nov 1994 08:49:37 GMT")
sub is_http_date {
    my ($d) = @_;
    return defined $d
        && $d =~ /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$/;
}

# Run the fastd binary to completion (-t, -s, -v, daemon launch), output to
# a file (a daemon that keeps our stdout must not hang us). Returns
# (exit code or -1 on timeout/signal, output).
sub run_fastd {
    my (@args) = @_;
    my %o;
    %o = %{ shift @args } if ref $args[0] eq 'HASH';
    my $timeout = $o{timeout} // 10;
    my $out = File::Temp->new(UNLINK => 1);
    my $outname = $out->filename;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $outname or POSIX::_exit(126);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(126);
        local %ENV = (%ENV, %{ $o{env} || {} });
        { no warnings "exec"; exec { $BIN } $BIN, @args; }
        POSIX::_exit(127);
    }
    my $status;
    wait_for(sub {
        my $r = waitpid($pid, WNOHANG);
        $status = $? if $r == $pid;
        defined $status;
    }, $timeout, 0.01);
    if (!defined $status) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
        return (-1, (slurp($outname) // '') . "\n[harness: timed out after ${timeout}s]");
    }
    my $code = WIFEXITED($status) ? WEXITSTATUS($status) : -1;
    return ($code, slurp($outname) // '');
}

# DESIGN.md's [http] access_log key; until the server knows it, leave it out
# (and say so once) rather than fail every test on it.
my $access_log_supported;
# `fastd -t` on base_conf(%o) (no server started; %%PORT%% and the other
# placeholders filled in): (exit code, output, the configuration's text).
sub test_conf {
    my (%o) = @_;
    my $d = File::Temp::tempdir(CLEANUP => 1);
    my $conf = base_conf(%o);
    $conf =~ s/%%PORT%%/1/g;
    $conf =~ s/%%\w+%%/$d/g;
    spew("$d/fastd.conf", $conf);
    return (run_fastd('-t', '-c', "$d/fastd.conf"), $conf);
}

sub access_log_supported {
    return $access_log_supported if defined $access_log_supported;
    return $access_log_supported = 1 unless -x $BIN;
    my $tmp = File::Temp->new(SUFFIX => '.conf', UNLINK => 1);
    print $tmp "[main]\ndaemon = off\nworkers = 1\n[http]\naccess_log = off\n"
             . "[server]\nlisten = 127.0.0.1:1\n";
    close $tmp;
    my ($rc, $out) = run_fastd('-t', '-c', $tmp->filename);
    $access_log_supported = $out =~ /unknown key "?access_log/ ? 0 : 1;
    diag('NOTE: fastd does not know [http] access_log yet; left out of base_conf')
        unless $access_log_supported;
    return $access_log_supported;
}

# A complete config: [main] [events] [http] [server] and two locations.
# %o: main/events/http/server => { key => value (undef drops the key) },
#     locations => extra text after the server's locations,
#     extra => text appended at the end.
sub base_conf {
    my (%o) = @_;
    my @sections = (
        [ main => [
            daemon         => 'off',
            workers        => 1,
            cpu_affinity   => 'off',
            pid            => '%%DIR%%/fastd.pid',
            error_log      => '%%DIR%%/error.log',
            $LOG_LEVEL_KEY => 'info',
            # a root master's workers run as nobody without user =, and
            # nobody cannot reach a test's files (its directory is 0700)
            $> == 0 ? (user => 'root') : (),
            # FASTD_TEST_LOAD=PATH.so: a test of a built-in module run
            # against a fastd built with --with-NAME=dynamic
            $ENV{FASTD_TEST_LOAD} ? (load_module => $ENV{FASTD_TEST_LOAD})
                                  : (),
        ] ],
        # FASTD_TEST_LT=1: the same test with level-triggered events
        [ events => [ max_connections => 1024,
                      $ENV{FASTD_TEST_LT} ? (edge_triggered => 'off') : () ] ],
        # FASTD_TEST_INLINE_OFF=1: handlers dispatched through the pool
        [ http   => [ access_log_supported() ? (access_log => 'off') : (),
                      $ENV{FASTD_TEST_INLINE_OFF}
                          ? (inline_completions => 'off') : () ] ],
        [ server => [ listen => '127.0.0.1:%%PORT%%', root => '%%HTML%%' ] ],
    );
    my $text = '';
    for my $s (@sections) {
        my ($name, $kv) = @$s;
        my @pairs = @$kv;
        my %over = %{ $o{$name} || {} };
        $text .= "[$name]\n";
        my %seen;
        while (my ($k, $v) = splice @pairs, 0, 2) {
            $seen{$k} = 1;
            $v = $over{$k} if exists $over{$k};
            $text .= "$k = $v\n" if defined $v;
        }
        for my $k (sort keys %over) {
            next if $seen{$k} || !defined $over{$k};
            my $v = $over{$k};
            $text .= "$k = $_\n" for ref $v eq 'ARRAY' ? @$v : ($v);
        }
        $text .= "\n";
    }
    $text .= "[location /plaintext]\nhandler = plaintext\n\n";
    $text .= "[location /json]\nhandler = json\n\n";
    $text .= $o{locations} if defined $o{locations};
    $text .= $o{extra} if defined $o{extra};
    return $text;
}

# The [main] section of a configuration written by hand (tests with
# several [server] sections): one worker, the error log in the test's
# directory at level info; FASTD_TEST_LOAD's module loaded, as
# base_conf's.
# The [main] section of a test's own configuration: one worker, logs at
# info, unless workers => N or level => 'debug' say otherwise.
sub main_section {
    my (%o) = @_;
    my ($workers, $level) = ($o{workers} // 1, $o{level} // 'info');
    return "[main]\ndaemon = off\nworkers = $workers\n"
         . "pid = %%DIR%%/fastd.pid\n"
         . "error_log = %%DIR%%/error.log\n$LOG_LEVEL_KEY = $level\n"
         . ($> == 0 ? "user = root\n" : '')
         . ($ENV{FASTD_TEST_LOAD} ? "load_module = $ENV{FASTD_TEST_LOAD}\n"
                                  : '') . "\n";
}

# Line number (1-based) of the first line of $text matching $re.
sub line_of {
    my ($text, $re) = @_;
    my @l = split /\n/, $text;
    for my $i (0 .. $#l) { return $i + 1 if $l[$i] =~ $re }
    die "no line matches $re";
}

# A response not content-encoded, with the body $want (when defined).
sub is_plain {
    my ($r, $want, $name) = @_;
    my $ok = $r && !defined $r->header('content-encoding')
        && (!defined $want || $r->body eq $want);
    ok($ok, $name) or diag($r ? "status $r->{status}, encoding "
        . ($r->header('content-encoding') // 'none') : 'no response');
}

# A process's resident memory in kB (0 when it is gone).
sub rss_kb {
    my ($pid) = @_;
    my $s = slurp("/proc/$pid/status") // '';
    return $s =~ /^VmRSS:\s+(\d+)/m ? $1 : 0;
}

# A gzip body's text, or what went wrong.
sub unzip {
    my ($data) = @_;
    require IO::Uncompress::Gunzip;
    my $out;
    IO::Uncompress::Gunzip::gunzip(\$data => \$out)
        or return "gunzip failed: $IO::Uncompress::Gunzip::GunzipError";
    return $out;
}

# [location /NAME/] handing its requests to [upstream NAME], for each name.
sub proxy_locations {
    return join '', map { "[location /$_/]\nhandler = proxy\nupstream = $_\n\n" } @_;
}

# Headless Chromium (Debian's chromium), or undef; browse(DIR, ARGS...):
# run it with the flags a closed network needs and a profile under DIR
# (its stderr goes to DIR/console.log); returns what it printed.
sub chromium { (grep { -x } qw(/usr/bin/chromium /usr/bin/chromium-browser))[0] }

sub browse {
    my ($dir, @args) = @_;
    my @flags = (qw(--headless --no-sandbox --disable-gpu --disable-quic
                    --no-first-run --disable-background-networking
                    --disable-component-update --disable-sync
                    --disable-default-apps --hide-scrollbars
                    --enable-logging=stderr --v=0),
                 "--user-data-dir=$dir/chromium");
    my $bin = chromium() or return '';
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if ($pid == 0) {
        open(STDERR, '>>', "$dir/console.log");
        { no warnings 'exec'; exec($bin, @flags, @args); }
        POSIX::_exit(127);
    }
    local $/;
    my $out = <$fh>;
    close $fh;
    return $out // '';
}

# ---------------------------------------------------------------------------
# the server under test

sub new {
    my ($class, %o) = @_;
    BAIL_OUT("fastd binary missing: $BIN (run make)") unless -x $BIN;
    my $self = bless {
        tmp   => File::Temp->newdir('fastd-test-XXXXXX', TMPDIR => 1,
                                    CLEANUP => !$ENV{FASTD_KEEP}),
        port  => free_port(),
        port2 => free_port(),
        pid   => undef,
        owner => $$,
    }, $class;
    $self->{port2} = free_port() while $self->{port2} == $self->{port};
    $self->{dir} = $self->{tmp}->dirname;
    diag("fastd test dir: $self->{dir}") if $ENV{FASTD_KEEP};
    $self->write_conf($o{conf} // base_conf());
    return $self;
}

sub dir       { $_[0]{dir} }
sub port      { $_[0]{port} }
sub port2     { $_[0]{port2} }
# a free port besides port and port2 (a new one each call), for a test
# that listens on one more address
sub another_port {
    my ($self) = @_;
    my $p = free_port();
    $p = free_port() while $p == $self->{port} || $p == $self->{port2};
    return $p;
}
sub pid       { $_[0]{pid} }
sub conf_file { "$_[0]{dir}/fastd.conf" }
sub pid_file  { "$_[0]{dir}/fastd.pid" }
sub log_file  { "$_[0]{dir}/error.log" }

sub subst {
    my ($self, $text) = @_;
    $text =~ s/%%PORT%%/$self->{port}/g;
    $text =~ s/%%PORT2%%/$self->{port2}/g;
    $text =~ s/%%DIR%%/$self->{dir}/g;
    $text =~ s/%%HTML%%/$ROOT\/html/g;
    $text =~ s/%%CONF%%/$ROOT\/conf/g;
    return $text;
}

# Write (or rewrite, before a reload) the config; returns its path.
# FASTD_TEST_BACKEND=io_uring: every fastd config a test writes gets
# "[events] backend = io_uring" at its end (after its last line, so that
# the file:line of any error it tests stays where it was).
sub write_conf {
    my ($self, $text, $name) = @_;
    my $path = "$self->{dir}/" . ($name // 'fastd.conf');
    $text = $self->subst($text);
    if (my $b = $ENV{FASTD_TEST_BACKEND}) {
        $text .= "\n" if length $text && $text !~ /\n\z/;
        # not where the test chose a backend itself
        $text .= "[events]\nbackend = $b\n"
            if $text =~ /^\[(main|server|http)\]/m
               && $text !~ /^\s*backend\s*=/m;
    }
    spew($path, $text);
    return $path;
}

sub write_file {
    my ($self, $name, $data) = @_;
    my $path = "$self->{dir}/$name";
    spew($path, $data);
    return $path;
}

sub error_log  { slurp($_[0]->log_file) // '' }
sub stderr_log { slurp("$_[0]{dir}/stderr.log") // '' }

sub diag_logs {
    my ($self) = @_;
    diag("--- stderr.log ---\n" . $self->stderr_log);
    diag("--- error.log ---\n" . $self->error_log);
}

# Can a TCP connection to our port be made right now?
sub port_open {
    my ($self, $port) = @_;
    my $s = IO::Socket::INET->new(
        PeerAddr => '127.0.0.1',
        PeerPort => $port // $self->{port},
        Proto    => 'tcp',
        Timeout  => 1,
    );
    return 0 unless $s;
    close $s;
    return 1;
}

# Run fastd in the foreground; wait until it accepts connections.
sub start {
    my ($self, @extra) = @_;
    my %o;
    %o = %{ shift @extra } if ref $extra[0] eq 'HASH';
    die "fastd already running" if $self->{pid} && !$self->{exited};
    my $conf = $self->conf_file;
    my $log  = "$self->{dir}/stderr.log";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log
            or do { print STDERR "harness: open $log: $!\n"; POSIX::_exit(126) };
        open STDERR, '>&', \*STDOUT or POSIX::_exit(126);
        # wrap => [PROGRAM, ARGS]: run fastd under it (tests/uring.t)
        my @cmd = ($o{wrap} ? @{ $o{wrap} } : (), $BIN);
        { no warnings "exec"; exec { $cmd[0] } @cmd, '-c', $conf, @extra; }
        print STDERR "harness: exec $BIN: $!\n";
        POSIX::_exit(127);
    }
    $self->{pid}    = $pid;
    $self->{exited} = 0;
    $self->{status} = undef;
    return $pid if $o{nowait};

    my $ready = wait_for(sub {
        return -1 if $self->_reap;
        return $self->port_open($o{port}) ? 1 : 0;
    }, $o{timeout} // 10, 0.02);
    if (!$ready || $ready < 0) {
        my $why = $self->{exited}
            ? "fastd exited with status " . ($self->{status} >> 8)
                . " (signal " . ($self->{status} & 127) . ")"
            : "fastd did not accept connections in 10 s";
        diag($why);
        $self->diag_logs;
        $self->stop unless $self->{exited};
        die "fastd failed to start: $why\n";
    }
    # the master listens before it forks: on a busy machine the port can
    # be open before every worker exists. Wait for as many as the config
    # names (tests look workers up right after start; one for "auto"); a
    # run without workers just goes on.
    my $want = 1;
    if (defined(my $text = slurp($conf))) {
        $want = $1 if $text =~ /^\s*workers\s*=\s*(\d+)\s*$/m && $1 > 0;
    }
    wait_for(sub { $self->_reap || children_of($pid) >= $want },
             $o{timeout} // 10, 0.01);
    return $pid;
}

# Reap our child if it exited; 1 if it has.
sub _reap {
    my ($self) = @_;
    return 1 if $self->{exited};
    return 0 unless $self->{pid};
    if ($self->{not_child}) {
        return 0 if pid_alive($self->{pid});
        $self->{exited} = 1;
        return 1;
    }
    my $r = waitpid($self->{pid}, WNOHANG);
    if ($r == $self->{pid} || $r < 0) {
        $self->{status} = $r < 0 ? -1 : $?;
        $self->{exited} = 1;
        return 1;
    }
    return 0;
}

sub running { my ($self) = @_; return $self->{pid} && !$self->_reap }

# Send a signal to the master we started.
sub signal {
    my ($self, $sig) = @_;
    die "no fastd running" unless $self->running;
    return kill $sig, $self->{pid};
}

# Wait for the master to exit by itself; returns the wait status (or 0 for
# a process that is not our child), undef on timeout.
sub wait_exit {
    my ($self, $timeout) = @_;
    return undef unless $self->{pid};
    wait_for(sub { $self->_reap }, $timeout // 10, 0.02) or return undef;
    return $self->{status} // 0;
}

# The master's exit code when it exited normally, else undef.
sub exit_code {
    my ($self) = @_;
    my $s = $self->{status};
    return undef unless defined $s && $s >= 0 && WIFEXITED($s);
    return WEXITSTATUS($s);
}

# Fast stop: SIGTERM, 10 s bound, then SIGKILL.
sub stop {
    my ($self) = @_;
    return $self->{status} if !$self->{pid} || $self->_reap;
    return undef if $self->{owner} != $$;
    kill 'TERM', $self->{pid};
    my $st = $self->wait_exit(10);
    return $st if defined $st;
    diag("fastd $self->{pid} ignored SIGTERM for 10 s, killing it");
    my @kids = children_of($self->{pid});
    kill 'KILL', $self->{pid};
    kill 'KILL', @kids if @kids;   # orphans of the master we started
    return $self->wait_exit(5);
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->stop if $self->{owner} && $self->{owner} == $$;
}

sub workers {
    my ($self) = @_;
    return () unless $self->{pid};
    return children_of($self->{pid});
}

# ---------------------------------------------------------------------------
# error log checks

# Lines at crit/alert/emerg, except those matching $o{allow} (regex or list).
sub alerts {
    my ($self, %o) = @_;
    my @allow = ref $o{allow} eq 'ARRAY' ? @{ $o{allow} }
              : defined $o{allow} ? ($o{allow}) : ();
    my @bad;
    for my $line (split /\n/, $self->error_log . "\n" . $self->stderr_log) {
        next unless $line =~ /\[(alert|emerg|crit)\]/;
        next if grep { $line =~ $_ } @allow;
        push @bad, $line;
    }
    return @bad;
}

sub no_alerts {
    my ($self, %o) = @_;
    my @bad = $self->alerts(%o);
    my $ok = ok(!@bad, 'error log has no [crit]/[alert]/[emerg] lines');
    diag(join "\n", @bad) unless $ok;
    return $ok;
}

# The entry of [queue NAME] in the JSON a /status location gives, or undef;
# wait_queue: until $cond->(entry) holds (or $timeout seconds, default 5).
sub queue_status {
    my ($self, $name) = @_;
    my $r = $self->get('/status');
    return undef unless $r && $r->status == 200;
    require JSON::PP;
    my $s = eval { JSON::PP::decode_json($r->body) } or return undef;
    my ($q) = grep { ($_->{queue} // '') eq $name }
              @{ $s->{modules}{queue} || [] };
    return $q;
}

sub wait_queue {
    my ($self, $name, $cond, $timeout) = @_;
    return wait_for(sub {
        my $q = $self->queue_status($name);
        return $q && $cond->($q) ? $q : undef;
    }, $timeout // 5, 0.01);
}

# ---------------------------------------------------------------------------
# clients

sub connect {
    my ($self, %o) = @_;
    return FastdTest::Conn->new($o{port} // $self->{port}, %o);
}

# One request, one parsed response (1xx interim responses skipped and kept
# in ->{interim}). %o: timeout, head (auto from the method), port.
sub http {
    my ($self, $req, %o) = @_;
    my $c = $self->connect(%o) or return undef;
    $c->send($req);
    $c->shut_wr if $o{shut_wr};
    my $head = $o{head} // ($req =~ /^HEAD /);
    my @interim;
    while (1) {
        my $r = $c->read_response(head => $head, timeout => $o{timeout});
        return undef unless $r;
        if ($r->{status} && $r->{status} >= 100 && $r->{status} < 200) {
            push @interim, $r;
            next;
        }
        $r->{interim} = \@interim;
        $c->close;
        return $r;
    }
}

# One request, its response: %h are headers, but for method => (GET)
# and timeout => (http()'s).
sub get {
    my ($self, $path, %h) = @_;
    my $method = delete $h{method} // 'GET';
    my %o = exists $h{timeout} ? (timeout => delete $h{timeout}) : ();
    my $req = "$method $path HTTP/1.1\r\nHost: localhost\r\n";
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    return $self->http("$req\r\n", %o);
}

# Send bytes (a string, or a list of pieces with $o{delay} seconds between
# them), optionally shut down our write side, then read until the server
# closes, $o{responses} responses were parsed, or $o{timeout} (default 5 s)
# passes. Returns the raw bytes, and in list context (raw, eof seen).
sub raw {
    my ($self, $bytes, %o) = @_;
    my $c = $self->connect(%o) or return wantarray ? ('', 0) : '';
    my @pieces = ref $bytes eq 'ARRAY' ? @$bytes : ($bytes);
    for my $i (0 .. $#pieces) {
        sleep $o{delay} if $i && $o{delay};
        $c->send($pieces[$i]);
    }
    $c->shut_wr if $o{shut_wr};
    my $deadline = time + ($o{timeout} // 5);
    while (!$c->{eof}) {
        if ($o{responses}) {
            my @r = parse_responses($c->{raw}, eof => 0);
            last if @r >= $o{responses};
        }
        my $n = $c->_fill($deadline);
        last unless defined $n;
    }
    my ($raw, $eof) = ($c->{raw}, $c->{eof});
    $c->close;
    return wantarray ? ($raw, $eof) : $raw;
}

# ---------------------------------------------------------------------------
# response parsing

# Parse one response at the start of $$buf. Returns (response, consumed
# bytes) or () when more input is needed. %o: head (no body), eof (the
# stream ended: a close-delimited body ends here).
sub parse_one {
    my ($buf, %o) = @_;
    my $end = index($$buf, "\r\n\r\n");
    return () if $end < 0;
    my $hdr = substr($$buf, 0, $end);
    my $pos = $end + 4;
    my @lines = split /\r\n/, $hdr, -1;
    my $sl = shift @lines;
    my $r = bless { headers => {}, hlist => [], body => '' },
        'FastdTest::Response';
    if ($sl =~ m{^(HTTP/\d\.\d) (\d\d\d)(?: (.*))?$}) {
        @$r{qw(version status reason)} = ($1, $2 + 0, $3 // '');
    } else {
        $r->{error} = "bad status line: $sl";
        $r->{raw} = $$buf;
        return ($r, length $$buf);
    }
    for my $l (@lines) {
        my ($n, $v) = $l =~ /^([^:\s]+):[ \t]*(.*?)[ \t]*$/ or do {
            $r->{error} = "bad header line: $l";
            next;
        };
        $n = lc $n;
        push @{ $r->{hlist} }, [ $n, $v ];
        $r->{headers}{$n} //= $v;
    }
    my $st = $r->{status};
    my $te = $r->{headers}{'transfer-encoding'};
    my $cl = $r->{headers}{'content-length'};
    if ($o{head} || $st < 200 || $st == 204 || $st == 304) {
        # no body
    } elsif (defined $te && $te =~ /chunked\s*$/i) {
        my $body = '';
        while (1) {
            my $le = index($$buf, "\r\n", $pos);
            return () if $le < 0;
            my $szline = substr($$buf, $pos, $le - $pos);
            my ($hex) = $szline =~ /^([0-9a-fA-F]+)/ or do {
                $r->{error} = "bad chunk size: $szline";
                last;
            };
            my $sz = hex $hex;
            $pos = $le + 2;
            if ($sz == 0) {
                # trailers up to an empty line
                while (1) {
                    my $te2 = index($$buf, "\r\n", $pos);
                    return () if $te2 < 0;
                    my $empty = $te2 == $pos;
                    $pos = $te2 + 2;
                    last if $empty;
                }
                last;
            }
            return () if length($$buf) < $pos + $sz + 2;
            $body .= substr($$buf, $pos, $sz);
            $pos += $sz + 2;
        }
        $r->{body} = $body;
    } elsif (defined $cl) {
        return () unless $cl =~ /^\d+$/;
        return () if length($$buf) < $pos + $cl;
        $r->{body} = substr($$buf, $pos, $cl);
        $pos += $cl;
    } else {
        return () unless $o{eof};
        $r->{body} = substr($$buf, $pos);
        $pos = length $$buf;
    }
    $r->{raw} = substr($$buf, 0, $pos);
    return ($r, $pos);
}

# Split a raw byte stream into parsed responses. %o: head => [bools by
# index] for HEAD requests, eof => 1 (default) when the stream is complete.
sub parse_responses {
    my ($raw, %o) = @_;
    my $buf = $raw // '';
    my $eof = $o{eof} // 1;
    my @out;
    while (length $buf) {
        my $head = ref $o{head} eq 'ARRAY' ? $o{head}[@out] : $o{head};
        my ($r, $n) = parse_one(\$buf, head => $head, eof => $eof);
        last unless $r;
        push @out, $r;
        substr($buf, 0, $n) = '';
        last if $r->{error} && $r->{error} =~ /status line/;
    }
    return @out;
}

# ---------------------------------------------------------------------------
package FastdTest::Response;

sub status  { $_[0]{status} }
sub body    { $_[0]{body} }
sub header  { $_[0]{headers}{ lc $_[1] } }
sub header_all {
    my ($self, $name) = @_;
    $name = lc $name;
    return map { $_->[1] } grep { $_->[0] eq $name } @{ $self->{hlist} };
}

# ---------------------------------------------------------------------------
package FastdTest::Conn;

use Errno qw(EAGAIN EINTR EWOULDBLOCK);
use IO::Select;
use IO::Socket::INET;
use Socket qw(SHUT_WR);
use Time::HiRes qw(time);

sub new {
    my ($class, $port, %o) = @_;
    my $s = IO::Socket::INET->new(
        PeerAddr => '127.0.0.1',
        PeerPort => $port,
        Proto    => 'tcp',
        Timeout  => 5,
    ) or return undef;
    binmode $s;
    $s->blocking(0);
    return bless {
        sock    => $s,
        buf     => '',   # unparsed input
        raw     => '',   # everything received
        eof     => 0,
        reset   => 0,
        timeout => $o{timeout} // 5,
    }, $class;
}

sub sock { $_[0]{sock} }

# Write everything (bounded by the timeout); false when the peer is gone.
sub send {
    my ($self, $data, %o) = @_;
    local $SIG{PIPE} = 'IGNORE';
    my $deadline = time + ($o{timeout} // $self->{timeout});
    my $off = 0;
    my $sel = IO::Select->new($self->{sock});
    while ($off < length $data) {
        my $n = syswrite($self->{sock}, $data, length($data) - $off, $off);
        if (defined $n) {
            $off += $n;
            next;
        }
        if ($! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR) {
            my $left = $deadline - time;
            return 0 if $left <= 0;
            $sel->can_write($left);
            next;
        }
        $self->{werr} = "$!";
        return 0;
    }
    return 1;
}

# Send $data one piece of $o{size} bytes every $o{delay} seconds.
sub send_slowly {
    my ($self, $data, %o) = @_;
    my $size = $o{size} // 1;
    for (my $i = 0; $i < length $data; $i += $size) {
        Time::HiRes::sleep($o{delay}) if $i && $o{delay};
        $self->send(substr($data, $i, $size)) or return 0;
    }
    return 1;
}

sub shut_wr { shutdown($_[0]{sock}, SHUT_WR) }

sub close {
    my ($self) = @_;
    close $self->{sock} if $self->{sock};
    $self->{sock} = undef;
}

# One read, waiting until $deadline: bytes read, 0 at EOF, -1 when
# interrupted, undef on timeout.
sub _fill {
    my ($self, $deadline) = @_;
    return 0 if $self->{eof};
    my $left = $deadline - time;
    return undef if $left <= 0;
    my $sel = IO::Select->new($self->{sock});
    return undef unless $sel->can_read($left);
    my $n = sysread($self->{sock}, my $chunk, 65536);
    if (!defined $n) {
        return -1 if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
        $self->{rerr}  = "$!";
        $self->{reset} = 1;
        $self->{eof}   = 1;
        return 0;
    }
    if ($n == 0) {
        $self->{eof} = 1;
        return 0;
    }
    $self->{buf} .= $chunk;
    $self->{raw} .= $chunk;
    return $n;
}

# The next complete response, or undef (timeout, or EOF first).
# %o: head, timeout.
sub read_response {
    my ($self, %o) = @_;
    my $deadline = time + ($o{timeout} // $self->{timeout});
    while (1) {
        my ($r, $n) = FastdTest::parse_one(\$self->{buf}, head => $o{head},
                                           eof => $self->{eof});
        if ($r) {
            substr($self->{buf}, 0, $n) = '';
            return $r;
        }
        return undef if $self->{eof};
        defined $self->_fill($deadline) or return undef;
    }
}

sub read_responses {
    my ($self, $count, %o) = @_;
    my $deadline = time + ($o{timeout} // $self->{timeout});
    my @out;
    while (@out < $count) {
        my $left = $deadline - time;
        last if $left <= 0;
        my $head = ref $o{head} eq 'ARRAY' ? $o{head}[@out] : $o{head};
        my $r = $self->read_response(head => $head, timeout => $left)
            or last;
        push @out, $r;
    }
    return @out;
}

# Read (keeping the bytes) until the server closes; true if it did within
# the timeout. Returns the elapsed time in ->{eof_after}.
sub wait_eof {
    my ($self, $timeout) = @_;
    my $t0 = time;
    my $deadline = $t0 + ($timeout // $self->{timeout});
    while (!$self->{eof}) {
        defined $self->_fill($deadline) or last;
    }
    $self->{eof_after} = time - $t0;
    return $self->{eof};
}

# Read until $re matches the received bytes; the match or undef.
sub wait_for_bytes {
    my ($self, $re, $timeout) = @_;
    my $deadline = time + ($timeout // $self->{timeout});
    while (1) {
        return $1 // 1 if $self->{raw} =~ $re;
        return undef if $self->{eof};
        defined $self->_fill($deadline) or return undef;
    }
}

1;
