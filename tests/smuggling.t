#!/usr/bin/perl
# Request smuggling through the proxy. The upstreams are deliberately
# naive victims that log every byte they receive: one frames a body by
# Content-Length when it has one (the TE.CL victim), the other by any
# Transfer-Encoding that mentions "chunked" (the CL.TE victim); both take
# bare LF line ends and "Name : value". The classic CL.TE, TE.CL, TE.TE and
# CL.CL payloads go to fastd; each must be answered 400 (501 for an unknown
# coding) with the connection closed, the marker of the smuggled request
# must never reach an upstream, and the next client on the (kept-alive)
# upstream connection must get its own answer.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use File::Temp ();
use IO::Socket::INET;
use POSIX ();
use Test::More;
use Time::HiRes qw(sleep time);

plan skip_all => 'the proxy module is not built'
    unless `$FastdTest::BIN -k 2>/dev/null` =~ /module proxy/;

# --- the victim upstream ------------------------------------------------------

# Start a forking listener; returns { pid, port, log }. Every received byte
# is appended to the log; every request it frames is answered 200 with
# "you asked for METHOD TARGET".
sub victim {
    my ($prefer) = @_;    # 'cl' or 'te'
    my $log = File::Temp->new(UNLINK => 1);
    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 128, ReuseAddr => 1, Proto => 'tcp')
        or die "listen: $!";
    my $port = $ls->sockport;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        setpgrp(0, 0);
        $SIG{CHLD} = 'IGNORE';
        $SIG{PIPE} = 'IGNORE';
        while (1) {
            my $c = $ls->accept or next;
            my $k = fork;
            if (defined $k && $k == 0) {
                close $ls;
                victim_serve($c, $prefer, $log->filename);
                POSIX::_exit(0);
            }
            close $c;
        }
    }
    close $ls;
    return { pid => $pid, port => $port, log => $log,
             logname => $log->filename };
}

sub victim_serve {
    my ($s, $prefer, $logname) = @_;
    binmode $s;
    my $buf = '';
    my $fill = sub {
        my $n = sysread($s, my $chunk, 65536);
        return 0 unless $n;
        open my $fh, '>>', $logname or return 0;
        binmode $fh;
        syswrite $fh, $chunk;    # O_APPEND, one write
        close $fh;
        $buf .= $chunk;
        return 1;
    };
    my $line = sub {
        while ($buf !~ /\n/) { $fill->() or return undef }
        $buf =~ s/^([^\n]*)\n// or return undef;
        (my $l = $1) =~ s/\r$//;
        return $l;
    };
    while (1) {
        my $rl = $line->() // return;
        next if $rl eq '';
        my ($m, $target) = split / /, $rl;
        my ($cl, $te);
        while (1) {
            my $h = $line->() // return;
            last if $h eq '';
            my ($k, $v) = $h =~ /^\s*([^:]+?)\s*:\s*(.*)$/ or next;
            $cl = $v if lc $k eq 'content-length';
            $te = $v if lc $k eq 'transfer-encoding' && $v =~ /chunked/i;
        }
        my $use_te = defined $te && !($prefer eq 'cl' && defined $cl);
        if ($use_te) {
            while (1) {
                my $sz = $line->() // return;
                my ($hex) = $sz =~ /^\s*([0-9a-fA-F]+)/;
                $sz = hex($hex // 0);
                last if $sz == 0;
                while (length $buf < $sz + 2) { $fill->() or return }
                substr($buf, 0, $sz + 2) = '';
            }
            while (1) { my $t = $line->() // return; last if $t eq '' }
        } elsif (defined $cl && $cl =~ /^\s*(\d+)/) {
            my $n = $1;
            while (length $buf < $n) { $fill->() or return }
            substr($buf, 0, $n) = '';
        }
        my $body = "you asked for $m $target";
        my $resp = "HTTP/1.1 200 OK\r\nContent-Length: " . length($body)
                 . "\r\n\r\n$body";
        syswrite($s, $resp) or return;
    }
}

sub victim_stop {
    my ($v) = @_;
    kill 'KILL', -$v->{pid};
    kill 'KILL', $v->{pid};
    waitpid($v->{pid}, 0);
}

sub victim_bytes { FastdTest::slurp($_[0]{logname}) // '' }

my %v = (cl => victim('cl'), te => victim('te'));

# An upstream that answers with broken framing (response smuggling and
# desync): the answer for /resp/NAME is $bad{NAME}; anything else gets
# "own answer for PATH". The connection stays open after each answer.
my %bad = (
    'cl-and-te' => "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                 . "0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled",
    'two-cl'    => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\nok"
                 . "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled",
    'cl-sign'   => "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
    'bare-lf'   => "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    'obs-fold'  => "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
    'nul'       => "HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 2\r\n\r\nok",
    'space-colon' => "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
    'status'    => "HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
    'chunk-overflow' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 . "10000000000000002\r\nok\r\n0\r\n\r\n",
    'extra-response' => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                 . "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled",
    'extra-after-chunked' => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 . "2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled",
);
require Backend;
my $rb = Backend->new(handler => sub {
    my ($req) = @_;
    my ($name) = $req->{path} =~ m{^/resp/(.+)$};
    return $bad{$name} if defined $name && exists $bad{$name};
    return Backend::response(200, "own answer for $req->{path}");
});
END { local $?; victim_stop($_) for grep { $_ && $_->{pid} } values %v }

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { max_body_size => '64k' },
    locations => FastdTest::proxy_locations(qw(cl te resp)) . <<"L",
[upstream resp]
server = ${\ $rb->addr } max_fails=0
keepalive = 4

[upstream cl]
server = 127.0.0.1:$v{cl}{port}
keepalive = 4

[upstream te]
server = 127.0.0.1:$v{te}{port}
keepalive = 4
L
));
$t->start;

# --- the baseline: pipelining through the proxy is not smuggling -----------

for my $u (qw(cl te)) {
    my $inner = "GET /$u/smuggled-in-body HTTP/1.1\r\nHost: x\r\n\r\n";
    my $req = "POST /$u/a HTTP/1.1\r\nHost: x\r\nContent-Length: "
            . length($inner) . "\r\n\r\n$inner"
            . "POST /$u/b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            . sprintf("%x\r\n%s\r\n0\r\n\r\n", length $inner, $inner)
            . "GET /$u/c HTTP/1.1\r\nHost: x\r\n\r\n";
    my $c = $t->connect;
    $c->send($req);
    my @r = $c->read_responses(3, timeout => 5);
    is_deeply([ map { $_->{body} } @r ],
              [ map { "you asked for $_" } "POST /$u/a", "POST /$u/b", "GET /$u/c" ],
              "$u victim: two bodies holding requests, then a GET: three answers, in order");
    $c->close;
    my $got = victim_bytes($v{$u});
    my $n = () = $got =~ m{^(?:GET|POST) /$u/[abc] HTTP/1\.1\r$}mg;
    is($n, 3, "$u victim: received exactly the three requests");
}

# --- the payloads -------------------------------------------------------------

my $S = "GET /PFX/smuggled HTTP/1.1\r\nHost: x\r\n\r\n";   # the smuggled request
my $SB = length $S;

# [ name, request template (PFX: the victim's prefix), statuses ]
my @payloads = (
    ['CL.TE: CL covers the smuggled request, TE ends before it',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nContent-Length: " . (5 + $SB) . "\r\n"
     . "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n$S", [400]],
    ['TE.CL: TE covers the smuggled request, CL ends before it',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
     . "Transfer-Encoding: chunked\r\n\r\n" . sprintf("%x\r\n", $SB) . "$S\r\n0\r\n\r\n",
     [400]],
    ['CL.TE with TE before CL',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     . "Content-Length: " . (5 + $SB) . "\r\n\r\n0\r\n\r\n$S", [400]],
    ['TE.TE: "Transfer-Encoding: xchunked"',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n"
     . "Content-Length: 5\r\n\r\n0\r\n\r\n$S", [400, 501]],
    ['TE.TE: "Transfer-Encoding : chunked" (space before the colon)',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n"
     . "Content-Length: 5\r\n\r\n0\r\n\r\n$S", [400]],
    ['TE.TE: chunked, then a second TE: x',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
     . "Transfer-Encoding: x\r\n\r\n0\r\n\r\n$S", [400]],
    ['TE.TE: "chunked, identity"',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n"
     . "\r\n0\r\n\r\n$S", [400]],
    ['TE.TE: obs-folded TE hides chunked',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: x\r\n chunked\r\n"
     . "Content-Length: 5\r\n\r\n0\r\n\r\n$S", [400]],
    ['TE.TE: TE after a bare-LF line',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nX: y\nTransfer-Encoding: chunked\r\n"
     . "Content-Length: 5\r\n\r\n0\r\n\r\n$S", [400]],
    ['TE.TE: TE with a vertical tab',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\x0bchunked\r\n"
     . "Content-Length: 5\r\n\r\n0\r\n\r\n$S", [400]],
    ['CL.CL: two different Content-Length',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
     . "Content-Length: $SB\r\n\r\n$S", [400]],
    ['CL.CL: "Content-Length: 0, 40"',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nContent-Length: 0, $SB\r\n\r\n$S", [400]],
    ['CL with a plus sign',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nContent-Length: +$SB\r\n\r\n$S", [400]],
    ['CL after a bare-LF line',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nX: y\nContent-Length: $SB\r\n\r\n$S", [400]],
    ['CL with "Content-Length : " (space before the colon)',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nContent-Length : $SB\r\n\r\n$S", [400]],
    ['chunk size overflowing to a small number',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     . "1000000000000000" . sprintf("%x", $SB) . "\r\n$S\r\n0\r\n\r\n", [400]],
    ['chunk size with a bare LF',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     . "0\n\r\n$S", [400]],
    ['TE in HTTP/1.0',
     "POST /PFX/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n"
     . "Content-Length: " . (5 + $SB) . "\r\n\r\n0\r\n\r\n$S", [400]],
    ['bare CR line end hides a CL',
     "POST /PFX/ HTTP/1.1\r\nHost: x\r\nX: y\rContent-Length: $SB\r\n\r\n$S", [400]],
);

for my $p (@payloads) {
    my ($name, $tmpl, $want) = @$p;
    for my $u (qw(cl te)) {
        (my $req = $tmpl) =~ s/PFX/$u/g;
        my $before = length victim_bytes($v{$u});
        my ($raw, $eof) = $t->raw($req, timeout => 5);
        my @r = FastdTest::parse_responses($raw, eof => $eof);
        my $st = @r ? $r[0]{status} : 'none';
        ok((grep { $st == $_ } @$want) && @r == 1 && $eof,
           "$u: $name: " . join('/', @$want) . ", one answer, closed")
            or diag("got $st, " . scalar(@r) . " answers, eof $eof; raw: "
                    . substr($raw, 0, 200));
        # the next client, probably on the same pooled upstream connection
        my $r = $t->http("GET /$u/next HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 5);
        is($r && $r->{body}, "you asked for GET /$u/next",
           "$u: $name: the next client gets its own answer");
        my $got = substr(victim_bytes($v{$u}), $before);
        unlike($got, qr/smuggled/, "$u: $name: the smuggled request never reached the upstream")
            or diag("upstream received: " . substr($got, 0, 400));
    }
}

# --- the other direction: broken upstream responses -------------------------

# [ name, statuses the client may see ]. A broken header is a 502; a body
# whose framing breaks after the header went out is cut (no status then).
my %resp_want = (
    'cl-and-te' => [502], 'two-cl' => [502], 'cl-sign' => [502],
    'bare-lf' => [502], 'obs-fold' => [502], 'nul' => [502],
    'space-colon' => [502], 'status' => [502],
    'chunk-overflow' => [502, 'cut'],
    'extra-response' => [200], 'extra-after-chunked' => [200],
);
for my $name (sort keys %bad) {
    my $c = $t->connect;
    $c->send("GET /resp/$name HTTP/1.1\r\nHost: x\r\n\r\n");
    my $r = $c->read_response(timeout => 5);
    my $st = $r ? $r->{status} : 'cut';
    ok((grep { $st eq $_ } @{ $resp_want{$name} }),
       "upstream response '$name': the client sees " . join('/', @{ $resp_want{$name} }))
        or diag("got $st: " . substr($c->{raw}, 0, 200));
    unlike($c->{raw}, qr/smuggled/, "upstream response '$name': nothing after it reaches the client");
    # the same client connection, then a new one: their own answers
    my $r2;
    if ($r && !$c->{eof}) {
        $c->send("GET /resp/next-$name HTTP/1.1\r\nHost: x\r\n\r\n");
        $r2 = $c->read_response(timeout => 5);
        is($r2 && $r2->{body}, "own answer for /resp/next-$name",
           "upstream response '$name': the same client's next request gets its own answer");
    }
    $c->close;
    my $r3 = $t->http("GET /resp/other-$name HTTP/1.1\r\nHost: x\r\n\r\n", timeout => 5);
    is($r3 && $r3->{body}, "own answer for /resp/other-$name",
       "upstream response '$name': another client's request gets its own answer");
}

# Nothing smuggled ever reached either victim, in any form.
unlike(victim_bytes($v{$_}), qr{/$_/smuggled HTTP}, "$_ victim: no smuggled request line at all")
    for qw(cl te);

$t->stop;
$rb->stop;
$t->no_alerts;
done_testing;
