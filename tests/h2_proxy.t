#!/usr/bin/perl
# The proxy over HTTP/2 to an HTTP/1.1 backend (tests/lib/Backend.pm):
# GET, POST bodies with and without content-length (curl, and DATA frames
# of the python client), large bodies both ways past the 64k windows, a
# chunked backend response, the backend's connection-specific headers
# never reaching the client; then a graceful reload (SIGHUP) and stop
# (SIGQUIT) with a slow proxied stream in flight: it finishes, the client
# sees GOAWAY, and a new connection after the reload is served.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use H2;
use Test::More;
use Time::HiRes qw(time sleep);

plan skip_all => H2::why_not() if H2::why_not();

my $bigresp = join '', map { sprintf "%07d:%s\n", $_, 'r' x ($_ % 40) } 1 .. 20000;
my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    if ($p eq '/p/hop') {
        return Backend::response(200, "hop\n", 'Connection' => 'keep-alive',
                                 'Keep-Alive' => 'timeout=5',
                                 'Proxy-Connection' => 'keep-alive',
                                 'Upgrade' => 'h2c', 'X-Up' => 'yes');
    }
    if ($p eq '/p/chunked') {
        $c->write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                  . "Transfer-Encoding: chunked\r\n\r\n"
                  . "6\r\nfirst \r\n7\r\nsecond \r\n5\r\nthird\r\n0\r\n\r\n");
        return '';
    }
    if ($p eq '/p/big') {
        return Backend::response(200, $bigresp, 'Content-Type' => 'text/x-big',
                                 'ETag' => '"big-1"', 'x-tag' => 'tag-value-1');
    }
    if ($p =~ m{^/p/tag/(\d+)}) {
        # small, complete in one read: the proxy's buffer goes back at once
        return Backend::response(200, "t$1", 'x-tag' => "tag-$1-" . ('z' x 200),
                                 'ETag' => "\"e$1\"");
    }
    if ($p =~ m{^/p/slow}) {
        sleep 2;
        return Backend::response(200, "slow done\n");
    }
    my $b = Backend::echo($req);
    $b =~ s/\r\n\r\n/\r\nX-Sum: @{[ unpack('%32C*', $req->{body}) ]}\r\n\r\n/;
    return $b;
});
my $t = FastdTest->new(conf => H2::conf(
    main => { shutdown_timeout => '10s' },
    locations => FastdTest::proxy_locations('p')
               . "[upstream p]\nserver = " . $be->addr . "\n\n"));
$t->start;
my $dir = $t->dir;

# --- GET, headers ---------------------------------------------------------
my $r = H2::curl($t, '/p/echo?a=1', args => [ '-H', 'X-Client: one' ]);
is($r->{code}, 200, 'proxied GET over h2c');
is($r->{version}, '2', 'over HTTP/2');
like($r->{body}, qr{^GET /p/echo\?a=1 HTTP/1\.1\n}, 'the backend got an HTTP/1.1 request');
like($r->{body}, qr{^host: 127\.0\.0\.1:\d+$}mi, 'with Host from :authority');
like($r->{body}, qr{^x-client: one$}mi, 'and the client header');
unlike($r->{body}, qr{^:}m, 'no pseudo-header reached the backend');

my $o = H2::py($t, <<'PY');
c = Raw()
c.req(1, '/p/hop')
r = c.response(1)
done(r=r)
PY
my @names = map { $_->[0] } @{ $o->{r}{headers} || [] };
is($o->{r}{status}, 200, 'a backend response with hop-by-hop headers');
ok((grep { $_ eq 'x-up' } @names), 'its own header passes') or diag("@names");
my @bad = grep { /^(connection|keep-alive|proxy-connection|upgrade|transfer-encoding)$/ } @names;
ok(!@bad, 'no connection-specific header reaches the HTTP/2 client') or diag("@bad");
ok(!(grep { /[A-Z]/ } @names), 'header names lower case') or diag("@names");

# --- bodies ---------------------------------------------------------------
my $up = join '', map { chr(33 + ($_ * 7) % 90) } 0 .. 199_999;
my $sum = unpack('%32C*', $up);
FastdTest::spew("$dir/up.bin", $up);
$r = H2::curl($t, '/p/post', args => [ '--data-binary', "\@$dir/up.bin" ]);
is($r->{code}, 200, 'POST 200 KB with content-length');
like($r->{body}, qr{^content-length: 200000$}mi, 'the backend got its length');
like($r->{body}, qr{^body-length: 200000$}m, 'and every byte');
is(H2::hval($r, 'x-sum'), $sum, 'intact');

$r = H2::curl($t, '/p/put', args => [ '-T', '-' ], in => $up);
is($r->{code}, 200, 'PUT 200 KB from stdin: no content-length, DATA until END_STREAM');
like($r->{body}, qr{^body-length: 200000$}m, 'the backend got every byte');
is(H2::hval($r, 'x-sum'), $sum, 'intact');

# a POST without content-length in DATA frames, END_STREAM on an empty
# last one: the HEADERS alone first (0.3 s before the DATA), and all the
# frames in one write (the server reads them in one go: the END_STREAM is
# known before the request starts, yet a body came)
for my $split (1, 0) {
    $o = H2::py($t, <<'PY', args => [ $split ]);
split = ARGS[0] == '1'
c = Raw()
c.until(lambda: c.settings, 5)
b = c.req(1, '/p/frames', method='POST', end_stream=False, send=False)
if split:
    c.send(b)
    b = b''
    time.sleep(0.3)
for i in range(3):
    b += c.data(1, b'%d' % i * 1000, send=False)
b += c.data(1, b'', end_stream=True, send=False)
c.send(b)
r = c.response(1, timeout=10)
done(r=r)
PY
    like($o->{r}{body} // '', qr{^body-length: 3000$}m,
         'a POST of three DATA frames, no content-length, '
         . ($split ? 'HEADERS first: ' : 'all in one write: ')
         . 'the backend gets the 3000 bytes') or diag(H2::explain($o));
}

$r = H2::curl($t, '/p/big');
is($r->{code}, 200, 'a 700 KB backend response');
ok($r->{body} eq $bigresp, 'intact') or diag(length $r->{body});
# the header fields are slices of the proxy's read buffer, which the next
# read overwrites before the HEADERS frame is encoded at the turn's end:
# nghttp2 must have copied them
is(join(' ', map { H2::hval($r, $_) // '-' } qw(content-type etag x-tag)),
   'text/x-big "big-1" tag-value-1', 'its header fields intact');

# 3 x 30 small proxied streams at once on one connection: each response
# completes in one upstream read and its buffer goes back to the proxy's
# cache (or to free()) while its HEADERS wait for the turn's end; the
# next stream's read must not show up in them
$o = H2::py($t, <<'PY');
c = Raw()
bad = []
n = 0
for rnd in range(3):
    ids = [1 + 2 * (rnd * 100 + i) for i in range(30)]
    for k, sid in enumerate(ids):
        c.req(sid, '/p/tag/%d' % sid)
    for sid in ids:
        r = c.response(sid, timeout=10)
        h = dict((k, v) for k, v in r['headers'])
        n += 1
        want = ('tag-%d-' % sid) + 'z' * 200
        if r['status'] != 200 or h.get('x-tag') != want or \
           h.get('etag') != '"e%d"' % sid or r['body'] != 't%d' % sid:
            bad.append([sid, r['status'], h.get('x-tag', '')[:40], h.get('etag')])
done(n=n, bad=bad[:5], nbad=len(bad))
PY
is($o->{n}, 90, '90 small proxied streams answered')
    or diag($o->{error}, ' ', substr($o->{output} // '', 0, 600));
is($o->{nbad}, 0, 'each with its own header fields')
    or diag(explain($o->{bad}));

# request trailers: not request fields (an x-forwarded-for in them must
# not reach the backend, nor realip), and their END_STREAM ends the body;
# all in one write, so they come in the read of the request's HEADERS
$o = H2::py($t, <<'PY');
c = Raw()
c.until(lambda: c.settings, 5)
t = HeadersFrame(1, block([('x-forwarded-for', '10.9.9.9'), ('x-trailer', 'yes')]))
t.flags.add('END_HEADERS')
t.flags.add('END_STREAM')
c.send(c.req(1, '/p/echo', method='POST', end_stream=False, send=False)
       + c.data(1, b'abc', send=False) + t.serialize())
r = c.response(1, timeout=10)
done(r=r)
PY
is($o->{r} && $o->{r}{status}, 200, 'a POST ended by trailers: answered')
    or diag(H2::explain($o));
like($o->{r} ? $o->{r}{body} : '', qr{^x-forwarded-for: 127\.0\.0\.1$}mi,
     '... the backend saw fastd\'s X-Forwarded-For');
unlike($o->{r} ? $o->{r}{body} : '', qr{10\.9\.9\.9|x-trailer}i,
       '... and nothing of the trailers');

# 300 cookie fields (RFC 9113 8.2.3): joined with "; " in order
$o = H2::py($t, <<'PY');
c = Raw()
c.until(lambda: c.settings, 5)
c.req(1, '/p/echo', headers=[('cookie', 'c%d=v' % i) for i in range(300)])
r = c.response(1, timeout=10)
done(r=r)
PY
my $want = join '; ', map { "c$_=v" } 0 .. 299;
like($o->{r} ? $o->{r}{body} : '', qr{^cookie: \Q$want\E$}mi,
     '300 cookie fields: one Cookie, joined in order') or diag(H2::explain($o));

$r = H2::curl($t, '/p/chunked');
is($r->{body}, 'first second third', 'a chunked backend response, de-chunked');
ok(!defined H2::hval($r, 'transfer-encoding'), 'no transfer-encoding over HTTP/2');

# several proxied streams at once on one connection
$o = H2::py($t, <<'PY');
c = Raw()
for i in range(6):
    c.req(1 + 2 * i, '/p/m%d' % i)
out = [c.response(1 + 2 * i, timeout=10) for i in range(6)]
done(s=[r['status'] for r in out], ok=[int(r['body'].startswith('GET /p/m%d ' % i))
                                        for i, r in enumerate(out)])
PY
is_deeply($o->{s}, [ (200) x 6 ], 'six proxied streams at once') or diag(H2::explain($o));
is_deeply($o->{ok}, [ (1) x 6 ], 'each with its own answer');

# --- graceful reload with a stream in flight ------------------------------
my $inflight = <<'PY';
c = Raw()
c.req(1, '/p/slow-' + ARGS[0])
r = c.response(1, timeout=15)
c.until(lambda: c.goaway is not None, 10)
closed = c.wait_close(10)
done(r=r, closed=closed, **c.summary())
PY
sub in_flight {
    my ($name) = @_;
    $be->reset_log;
    my $h = H2::py_start($t, $inflight, args => [ $name ], timeout => 40);
    my $seen = FastdTest::wait_for(sub {
        grep { m{^req .* /p/slow-$name} } $be->log_lines }, 10);
    ok($seen, "$name: the slow request reached the backend");
    return $h;
}

my %old = map { $_ => 1 } $t->workers;
my $h = in_flight('reload');
$t->signal('HUP');
$o = H2::py_wait($h, 40);
is($o->{r}{status}, 200, 'reload: the stream in flight finished') or diag(H2::explain($o));
is($o->{r}{body}, "slow done\n", 'reload: with its whole body');
is($o->{goaway} && $o->{goaway}[1], 0, 'reload: the client saw GOAWAY NO_ERROR')
    or diag(H2::explain($o));
ok(defined $o->{closed}, 'reload: and the old worker closed the connection');
ok(FastdTest::wait_for(sub { my @w = $t->workers; @w && !grep { $old{$_} } @w }, 10),
   'reload: the old worker is gone');
my @w = H2::serving($t);
ok($w[0], 'after the reload a new connection is served') or diag($w[2]);

# --- graceful stop with a stream in flight -------------------------------
$h = in_flight('quit');
$t->signal('QUIT');
$o = H2::py_wait($h, 40);
is($o->{r}{status}, 200, 'quit: the stream in flight finished') or diag(H2::explain($o));
is($o->{r}{body}, "slow done\n", 'quit: with its whole body');
is($o->{goaway} && $o->{goaway}[1], 0, 'quit: the client saw GOAWAY NO_ERROR')
    or diag(H2::explain($o));
my $st = $t->wait_exit(15);
ok(defined $st, 'quit: the master exited');
is($t->exit_code, 0, 'quit: with status 0');

$t->no_alerts;
done_testing();
