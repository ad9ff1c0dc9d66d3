package Backend;

# A real HTTP/1.1 backend for the proxy tests: a forked listener that forks
# a child per connection (blocking I/O, so a handler may sleep, stream or
# close as it likes). Every connection and request is logged to a file, so
# a test can count them. Core perl modules only.
#
#   my $b = Backend->new(handler => sub {
#       my ($req, $c) = @_;   # $req: method path target version headers
#                             #       (lc name => value) hlist body conn n
#                             #       backend (this object: ->logit)
#       return Backend::response(200, "hi", 'X-A' => 1);  # bytes to send
#       # or undef: close without answering; or '' after writing with $c
#   });
#   $b->port; $b->connections; $b->requests; $b->stop; $b->start;
#   Backend->new(host => "127.0.0.2", port => P): on another loopback
#   address (several backends on one port: what a DNS name gives)

use strict;
use warnings;

use Errno qw(EINTR);
use File::Temp ();
use IO::Socket::INET;
use POSIX ();
use Socket qw(SOL_SOCKET SO_REUSEADDR);
use Time::HiRes ();

sub new {
    my ($class, %o) = @_;
    my $self = bless {
        handler => $o{handler} || \&echo,
        host    => $o{host} // '127.0.0.1', # another loopback: 127.0.0.2
        port    => $o{port} || 0,
        logf    => File::Temp->new(UNLINK => 1),
        name    => $o{name} // 'backend',
        stream_body => $o{stream_body},
        owner_pid   => $$,
    }, $class;
    $self->{log} = $self->{logf}->filename;
    $self->start;
    return $self;
}

sub port { $_[0]{port} }
sub name { $_[0]{name} }
sub host { $_[0]{host} }
sub addr { "$_[0]{host}:$_[0]{port}" }

sub start {
    my ($self) = @_;
    my $ls;
    # the port may be in TIME_WAIT use after a stop: retry the bind
    for (1 .. 100) {
        $ls = IO::Socket::INET->new(
            LocalAddr => $self->{host},
            LocalPort => $self->{port},
            Listen    => 1024,
            ReuseAddr => 1,
            Proto     => 'tcp',
        );
        last if $ls;
        Time::HiRes::sleep(0.05);
    }
    die "backend: cannot listen on $self->{port}: $!" unless $ls;
    $self->{port} = $ls->sockport;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        setpgrp(0, 0);
        $SIG{CHLD} = 'IGNORE';
        $SIG{PIPE} = 'IGNORE';
        $SIG{TERM} = 'DEFAULT';
        while (1) {
            my $c = $ls->accept;
            next unless $c;
            my $k = fork;
            if (defined $k && $k == 0) {
                close $ls;
                $self->serve($c);
                POSIX::_exit(0);
            }
            close $c;
        }
    }
    close $ls;
    $self->{pid} = $pid;
    return $self;
}

# Kill the listener and every connection it serves.
sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'KILL', -$self->{pid};
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
    $self->{pid} = undef;
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->stop if $self->{pid} && $self->{owner_pid} == $$;
}

sub log_lines {
    my ($self) = @_;
    open my $fh, '<', $self->{log} or return ();
    my @l = <$fh>;
    close $fh;
    chomp @l;
    return @l;
}

sub connections { scalar grep { /^conn / } $_[0]->log_lines }
sub requests    { scalar grep { /^req / } $_[0]->log_lines }
sub closed      { scalar grep { /^end / } $_[0]->log_lines }
sub reset_log   { open my $fh, '>', $_[0]{log}; close $fh }

sub logit {
    my ($self, $line) = @_;
    # O_APPEND and one write: lines of concurrent children do not mix
    open my $fh, '>>', $self->{log} or return;
    syswrite $fh, "$line\n";
    close $fh;
}

sub response {
    my ($status, $body, @h) = @_;
    $body //= '';
    my $r = "HTTP/1.1 $status X\r\n";
    my $has_ct;
    while (my ($k, $v) = splice @h, 0, 2) {
        $r .= "$k: $v\r\n";
        $has_ct = 1 if lc $k eq 'content-type';
    }
    $r .= "Content-Type: text/plain\r\n" unless $has_ct;
    $r .= "Content-Length: " . length($body) . "\r\n\r\n" . $body;
    return $r;
}

# The default handler: the request as the backend saw it.
sub echo {
    my ($req) = @_;
    my $b = "$req->{method} $req->{target} HTTP/$req->{version}\n";
    $b .= "$_->[0]: $_->[1]\n" for @{ $req->{hlist} };
    $b .= "body-length: " . length($req->{body}) . "\n";
    return response(200, $b, 'X-Backend-Port' => $req->{port});
}

# A handler's answer as a stream of server-sent events: a first event at
# once, a second one a second later, chunked.
sub sse {
    my ($c) = @_;
    $c->write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              . "Transfer-Encoding: chunked\r\n\r\n");
    $c->write("d\r\ndata: first\n\n\r\n");
    Time::HiRes::sleep(1);
    $c->write("e\r\ndata: second\n\n\r\n0\r\n\r\n");
    return '';
}

# A handler's answer to an Upgrade: websocket request: 101 (with the
# extra header lines given), then a raw echo, every byte back (those sent
# with the request first) until the client's FIN, then a FIN back.
sub websocket_echo {
    my ($c, @headers) = @_;
    $c->write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              . "Connection: Upgrade\r\n" . join('', map { "$_\r\n" } @headers)
              . "\r\n");
    $c->write($c->{buf}) if length $c->{buf};
    $c->{buf} = '';
    while (1) {
        my $n = sysread($c->sock, my $b, 65536);
        last unless $n;
        $c->write($b) or last;
    }
    shutdown($c->sock, 1);
    return undef;
}

# --- the connection child ---------------------------------------------------

package Backend::Conn;

sub new { bless { s => $_[1], buf => '' }, $_[0] }

# Read more into the buffer; 0 at EOF.
sub fill {
    my ($self) = @_;
    my $n = sysread($self->{s}, my $chunk, 65536);
    return 0 unless $n;
    $self->{buf} .= $chunk;
    return $n;
}

sub write {
    my ($self, $data) = @_;
    my $off = 0;
    while ($off < length $data) {
        my $n = syswrite($self->{s}, $data, length($data) - $off, $off);
        return 0 unless defined $n;
        $off += $n;
    }
    return 1;
}

sub close { close $_[0]{s} }
sub sock  { $_[0]{s} }

# Read exactly $n body bytes, optionally passing them on to $sink.
sub read_bytes {
    my ($self, $n, $sink) = @_;
    my $got = '';
    while ($n > 0) {
        if (!length $self->{buf}) { $self->fill or return undef }
        my $k = $n < length $self->{buf} ? $n : length $self->{buf};
        my $piece = substr($self->{buf}, 0, $k, '');
        $sink ? $sink->($piece) : ($got .= $piece);
        $n -= $k;
    }
    return $got;
}

sub read_line {
    my ($self) = @_;
    while ((my $i = index($self->{buf}, "\r\n")) < 0) {
        $self->fill or return undef;
    }
    my $i = index($self->{buf}, "\r\n");
    my $l = substr($self->{buf}, 0, $i);
    substr($self->{buf}, 0, $i + 2) = '';
    return $l;
}

package Backend;

sub serve {
    my ($self, $s) = @_;
    binmode $s;
    my $c = Backend::Conn->new($s);
    my $n = 0;
    $self->logit("conn $$");
    while (1) {
        while (index($c->{buf}, "\r\n\r\n") < 0) {
            next if $c->fill;
            $self->logit("end $$"); # the peer closed between requests
            return;
        }
        my $end = index($c->{buf}, "\r\n\r\n");
        my $head = substr($c->{buf}, 0, $end);
        substr($c->{buf}, 0, $end + 4) = '';
        my ($rl, @lines) = split /\r\n/, $head;
        my ($method, $target, $version) = $rl =~ m{^(\S+) (\S+) HTTP/(\d\.\d)$}
            or return;
        my (%h, @hl);
        for (@lines) {
            my ($k, $v) = /^([^:]+):\s*(.*?)\s*$/ or next;
            push @hl, [ $k, $v ];
            $h{ lc $k } = exists $h{ lc $k } ? "$h{lc $k}, $v" : $v;
        }
        my $req = {
            method => $method, target => $target, version => $version,
            headers => \%h, hlist => \@hl, body => '', conn => $$,
            n => ++$n, port => $self->{port}, c => $c, backend => $self,
        };
        ($req->{path}) = $target =~ m{^([^?]*)};
        $self->logit("req $$ $method $target");
        # the body: a handler may take it itself (big uploads), with
        # body_mode => 'stream' in its request check
        my $stream = $self->{stream_body} && $self->{stream_body}->($req);
        if (!$stream) {
            if (defined $h{'transfer-encoding'} && $h{'transfer-encoding'} =~ /chunked/i) {
                while (1) {
                    my $sz = $c->read_line // return;
                    $sz = hex(($sz =~ /^([0-9a-fA-F]+)/)[0] // return);
                    if ($sz == 0) {
                        while (1) { my $t = $c->read_line // return; last if $t eq '' }
                        last;
                    }
                    $req->{body} .= $c->read_bytes($sz) // return;
                    $c->read_line // return;
                }
                $req->{chunked} = 1;
            } elsif ($h{'content-length'}) {
                $req->{body} = $c->read_bytes($h{'content-length'}) // return;
            }
        }
        my $out = $self->{handler}->($req, $c);
        return unless defined $out;
        # HEAD: whatever the handler built, only the header goes out
        $out = substr($out, 0, index($out, "\r\n\r\n") + 4)
            if $method eq 'HEAD' && index($out, "\r\n\r\n") >= 0;
        $c->write($out) or return if length $out;
        return if ($h{connection} // '') =~ /close/i;
    }
}

1;
