#!/usr/bin/perl
# static files longer than one frame: the header and the first 64000 bytes
# leave at once, the rest at the end of the loop turn (fd_outq_flush). Sizes
# around that boundary, keep-alive and pipelined requests, many connections
# at once, multipart ranges with large parts, clients that leave mid-file,
# and the same with level-triggered events (which do not defer).

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IO::Select;
use Socket qw(SOL_SOCKET SO_LINGER);
use Test::More;
use Time::HiRes qw(time);

my %files;
sub body_of {
    my ($n, $seed) = @_;
    my $unit = join '', map { chr(($_ * 31 + $seed) % 251) } 0 .. 250;
    return substr($unit x (int($n / 251) + 1), 0, $n);
}
# 64000 is the frame: the header shares it, so 63000 fits, 63950 may not
my @sizes = (63000, 63950, 64000, 64001, 102400, 300000, 2 * 1024 * 1024);

sub server {
    my (%events) = @_;
    my $t = FastdTest->new(conf => FastdTest::base_conf(
        events => \%events,
        server => { root => '%%DIR%%/www' },
    ));
    mkdir $t->dir . '/www' or die "mkdir: $!";
    for my $i (0 .. $#sizes) {
        my $n = $sizes[$i];
        $files{$n} //= body_of($n, $i);
        FastdTest::spew($t->dir . "/www/f$n.bin", $files{$n});
    }
    $t->start;
    return $t;
}

# One keep-alive connection, every size in turn (twice: the second time
# the open file cache serves it).
sub sequential {
    my ($t, $tag) = @_;
    my $c = $t->connect(timeout => 10);
    my $ok = 0;
    for my $n (@sizes, @sizes) {
        $c->send("GET /f$n.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
        my $r = $c->read_response;
        $ok++ if $r && $r->status == 200 && $r->body eq $files{$n}
            && $r->header('content-length') == $n;
    }
    $c->close;
    is($ok, 2 * @sizes, "$tag: each size on one keep-alive connection");
}

# Three requests in one write: three whole responses, in order.
sub pipelined {
    my ($t, $tag) = @_;
    my @want = (102400, 64001, 300000);
    my $c = $t->connect(timeout => 10);
    $c->send(join '', map { "GET /f$_.bin HTTP/1.1\r\nHost: localhost\r\n\r\n" }
             @want);
    my @r = $c->read_responses(3);
    $c->close;
    ok(@r == 3 && !grep({ $r[$_]->body ne $files{ $want[$_] } } 0 .. 2),
       "$tag: three pipelined large files, in order");
}

# $conns connections, each asking for $each files one after the other, all
# at once: every response whole (a deferred rest that woke the wrong
# connection, or none, fails here).
sub concurrent {
    my ($t, $tag, $conns, $each) = @_;
    my @pick = (64001, 102400, 300000, 63000, 102400);
    my (%c, %want, %got);
    my $sel = IO::Select->new;
    for my $i (1 .. $conns) {
        my $c = $t->connect(timeout => 20) or next;
        $c->{i} = $i;
        $c->{left} = $each;
        $c->{sock}->blocking(0);
        $c{ $c->{sock} } = $c;
        $sel->add($c->{sock});
    }
    my $ask = sub {
        my ($c) = @_;
        my $n = $pick[ ($c->{i} + $c->{left}) % @pick ];
        $c->{want} = $n;
        $c->send("GET /f$n.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
    };
    $ask->($_) for values %c;
    my ($good, $bad) = (0, 0);
    my $deadline = time + 60;
    while ($sel->count && time < $deadline) {
        for my $s ($sel->can_read(1)) {
            my $c = $c{$s};
            my $n = sysread($s, my $chunk, 262144);
            if (!$n) {
                $bad++;                      # closed before its answers
                $sel->remove($s);
                next;
            }
            $c->{buf} .= $chunk;
            while (my ($r, $len) = FastdTest::parse_one(\$c->{buf})) {
                substr($c->{buf}, 0, $len) = '';
                if ($r->status == 200 && $r->body eq $files{ $c->{want} }) {
                    $good++;
                } else {
                    $bad++;
                }
                if (--$c->{left} > 0) {
                    $ask->($c);
                } else {
                    $sel->remove($s);
                    last;
                }
            }
        }
    }
    $_->close for values %c;
    is($good, $conns * $each, "$tag: $conns connections x $each large files "
       . "at once, every body whole") or diag("$bad bad, "
       . $sel->count . " connections still waiting");
}

# Several ranges, each longer than a frame: one multipart body.
sub multipart {
    my ($t, $tag) = @_;
    my $f = $files{300000};
    my $r = $t->get('/f300000.bin',
                    Range => 'bytes=0-99999,100000-179999,200000-299999');
    my ($b) = ($r->header('content-type') // '') =~ /boundary=(\S+)/;
    my @parts = defined $b ? split(/\r\n--\Q$b\E(?:--)?\r\n/, $r->body) : ();
    shift @parts;                                      # before the first
    my @bodies = map { (split /\r\n\r\n/, $_, 2)[1] } @parts;
    ok($r->status == 206 && @bodies == 3
       && $bodies[0] eq substr($f, 0, 100000)
       && $bodies[1] eq substr($f, 100000, 80000)
       && $bodies[2] eq substr($f, 200000, 100000),
       "$tag: three large ranges in one multipart body");
    $r = $t->get('/f2097152.bin', Range => 'bytes=1000-1500999');
    ok($r->status == 206 && $r->body eq substr($files{2097152}, 1000, 1500000),
       "$tag: one large range from the middle");
}

# Clients that ask for 2 MB and leave: some at once (RST), some after the
# first bytes. The worker lives on and the next client is served.
sub leavers {
    my ($t, $tag) = @_;
    my @w0 = $t->workers;
    for my $i (1 .. 20) {
        my $c = $t->connect or next;
        $c->send("GET /f2097152.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"
                 . ($i % 2 ? "GET /f102400.bin HTTP/1.1\r\nHost: x\r\n\r\n"
                           : ''));
        if ($i % 4 == 0) {
            $c->wait_for_bytes(qr/\r\n\r\n/, 5);
        } else {
            setsockopt($c->{sock}, SOL_SOCKET, SO_LINGER, pack('ii', 1, 0));
        }
        $c->close;
    }
    my $r = $t->get('/f300000.bin', timeout => 10);
    ok($r && $r->body eq $files{300000}, "$tag: served after 20 clients left "
       . "mid-file");
    is_deeply([ $t->workers ], \@w0, "$tag: the same worker");
}

for my $mode ([ 'edge-triggered', {} ],
              [ 'level-triggered', { edge_triggered => 'off' } ]) {
    my ($tag, $ev) = @$mode;
    my $t = server(%$ev);
    my $r = $t->get('/f102400.bin', method => 'HEAD');
    ok($r && $r->status == 200 && $r->header('content-length') == 102400
       && $r->body eq '', "$tag: HEAD of a large file, no body");
    sequential($t, $tag);
    pipelined($t, $tag);
    concurrent($t, $tag, 32, 6);
    multipart($t, $tag);
    leavers($t, $tag);
    $t->no_alerts;
    $t->stop;
}

done_testing();
