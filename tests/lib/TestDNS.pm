package TestDNS;

# A DNS server for the tests, on 127.0.0.1 (UDP): it answers A and AAAA
# queries from a table file the test rewrites while it runs, with a TTL of
# 1 s, and logs every query it gets. Core perl modules only. Lines of the
# table (read again for each query):
#   NAME A 127.0.0.2          an address (as many lines as addresses)
#   NAME AAAA ::1
#   NAME SERVFAIL             answer that rcode (or NXDOMAIN, REFUSED)
#   NAME DROP                 no answer at all (a timeout)
#   NAME DELAY 0.3            answer that many seconds late
# A name without a line is NXDOMAIN; a name with only A lines answers
# AAAA with no records (NOERROR), as a real zone does.
#
#   my $dns = TestDNS->new(table => "$dir/zone", log => "$dir/dns.log");
#   $dns->port; $dns->set("app.test A 127.0.0.2\n"); $dns->queries;
#   $dns->stop; $dns->start (the same port again)

use strict;
use warnings;
use IO::Socket::INET;
use POSIX ();
use Socket qw(inet_aton inet_pton AF_INET6);
use Time::HiRes ();

my %RCODE = (NOERROR => 0, SERVFAIL => 2, NXDOMAIN => 3, REFUSED => 5);

sub new {
    my ($class, %o) = @_;
    my $self = bless { table => $o{table}, log => $o{log}, port => 0,
                       owner_pid => $$ }, $class;
    $self->set($o{zone} // '');
    $self->start;
    return $self;
}

sub port { $_[0]{port} }
sub addr { "127.0.0.1:$_[0]{port}" }

# Replace the table: written beside and renamed, so that a query never
# reads half of it.
sub set {
    my ($self, $text) = @_;
    open my $fh, '>', "$self->{table}.new" or die "$self->{table}: $!";
    print $fh $text;
    close $fh;
    rename "$self->{table}.new", $self->{table} or die "rename: $!";
}

sub queries {
    my ($self) = @_;
    open my $fh, '<', $self->{log} or return 0;
    my @l = <$fh>;
    return scalar @l;
}

sub start {
    my ($self) = @_;
    my $s;
    for (1 .. 100) {
        $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                   LocalPort => $self->{port},
                                   Proto => 'udp', ReuseAddr => 1);
        last if $s;
        Time::HiRes::sleep(0.05);
    }
    die "dns: cannot bind: $!" unless $s;
    $self->{port} = $s->sockport;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        $SIG{TERM} = 'DEFAULT';
        $SIG{CHLD} = 'IGNORE';
        while (1) {
            my $peer = $s->recv(my $q, 4096) // next;
            my ($a, $delay) = $self->answer($q);
            next unless defined $a;
            if (!$delay) {
                $s->send($a, 0, $peer);
                next;
            }
            # late, without holding up the other queries
            next if fork // 1;
            Time::HiRes::sleep($delay);
            $s->send($a, 0, $peer);
            POSIX::_exit(0);
        }
    }
    close $s;
    $self->{pid} = $pid;
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'KILL', $self->{pid}; # a late answer's child sends and exits
    waitpid($self->{pid}, 0);
    $self->{pid} = undef;
}

sub DESTROY {
    my ($self) = @_;
    local ($?, $!, $@);
    $self->stop if $self->{pid} && $self->{owner_pid} == $$;
}

sub answer {
    my ($self, $q) = @_;
    return undef if length $q < 12;
    my ($id, $flags, $qd) = unpack 'n n n', $q;
    return undef if $flags & 0x8000 || $qd != 1;
    my ($pos, @labels) = (12);
    while (1) {
        return undef if $pos >= length $q;
        my $len = ord substr $q, $pos++, 1;
        last if $len == 0;
        return undef if $len > 63;
        push @labels, substr $q, $pos, $len;
        $pos += $len;
    }
    return undef if $pos + 4 > length $q;
    my ($qtype, $qclass) = unpack 'n n', substr $q, $pos, 4;
    my $question = substr $q, 12, $pos + 4 - 12;
    my $name = lc join '.', @labels;
    if (open my $l, '>>', $self->{log}) {
        syswrite $l, "$name $qtype\n";
        close $l;
    }

    my (%rr, $rcode, $known, $delay);
    if (open my $fh, '<', $self->{table}) {
        while (my $line = <$fh>) {
            my ($n, $what, $v) = split ' ', $line;
            next unless defined $what && lc $n eq $name;
            $known = 1;
            if ($what eq 'A' || $what eq 'AAAA') {
                push @{ $rr{$what} }, $v;
            } elsif ($what eq 'DROP') {
                return undef;
            } elsif ($what eq 'DELAY') {
                $delay = $v;
            } elsif (exists $RCODE{$what}) {
                $rcode = $RCODE{$what};
            }
        }
    }
    $rcode //= $known ? 0 : 3;
    my @ans;
    if ($rcode == 0 && $qclass == 1) {
        for my $v ($qtype == 1 ? @{ $rr{A} || [] } : ()) {
            push @ans, pack('n n n N n', 0xc00c, 1, 1, 1, 4) . inet_aton($v);
        }
        for my $v ($qtype == 28 ? @{ $rr{AAAA} || [] } : ()) {
            push @ans, pack('n n n N n', 0xc00c, 28, 1, 1, 16)
                     . inet_pton(AF_INET6, $v);
        }
    }
    # QR, AA, RA, RD as asked
    my $rf = 0x8000 | 0x0400 | 0x0080 | ($flags & 0x0100) | $rcode;
    return (pack('n n n n n n', $id, $rf, 1, scalar @ans, 0, 0)
            . $question . join('', @ans), $delay);
}

1;
