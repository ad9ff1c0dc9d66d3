#!/usr/bin/perl
# mirror: each request of a location is copied to a shadow service through
# a proxied location: the copy has the request's method, target (with its
# query, as $request_uri), header and body (also a chunked one), and the
# client gets the main backend's answer unchanged. A mirror service that
# is down, hangs or answers 500 changes nothing for the client; copies over
# mirror_max_in_flight are dropped and counted in /status; a hanging copy
# is stopped at mirror_timeout; keep-alive, HTTP/2 and TLS clients;
# mirror = off; configuration errors name file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use JSON::PP;
use Test::More;

my $app = Backend->new(name => 'app', handler => sub {
    my ($req) = @_;
    return Backend::response(200, "app $req->{method} $req->{target} "
                                  . "body=" . ($req->{body} // ''),
                             'X-App' => 'yes');
});
my $shadow = Backend->new(name => 'shadow', handler => sub {
    my ($req) = @_;
    my $h = $req->{headers};
    $req->{backend}->logit("copy $req->{method} $req->{target} "
        . "x-test=" . ($h->{'x-test'} // '-')
        . " ct=" . ($h->{'content-type'} // '-')
        . " cl=" . ($h->{'content-length'} // '-')
        . " te=" . ($h->{'transfer-encoding'} // '-')
        . " body=" . ($req->{body} // ''));
    $req->{backend}->logit("orig $h->{'x-orig'}") if $h->{'x-orig'};
    return Backend::response(200, 'shadow answer, dropped');
});
my $hang = Backend->new(name => 'hang', handler => sub {
    my ($req) = @_;
    $req->{backend}->logit("hang $req->{target}");
    sleep 60;
    return undef;
});
my $err = Backend->new(name => 'err', handler => sub {
    my ($req) = @_;
    $req->{backend}->logit("err $req->{target}");
    return Backend::response(500, 'broken');
});
my $dead = FastdTest::free_port();

my $dir = tempdir(CLEANUP => 1);
FastdTest::self_signed("$dir/cert", 'localhost');
my ($ap, $sp, $hp, $ep) = map { $_->port } $app, $shadow, $hang, $err;
my $locations = <<"EOF";
[location = /status]
handler = status

[location /_mirror/]
handler = proxy
pass = http://127.0.0.1:$sp

[location /_uri_mirror/]
handler = proxy
pass = http://127.0.0.1:$sp/shadow/
set_header = X-Orig: \$request_uri \$uri \$args

[location /_hang/]
handler = proxy
pass = http://127.0.0.1:$hp
read_timeout = 60s

[location /_err/]
handler = proxy
pass = http://127.0.0.1:$ep

[location /_dead/]
handler = proxy
pass = http://127.0.0.1:$dead

[location /app/]
mirror = /_mirror/
handler = proxy
pass = http://127.0.0.1:$ap

[location /twice/]
mirror = /_mirror/
mirror = /_uri_mirror/
handler = proxy
pass = http://127.0.0.1:$ap

[location /nobody/]
mirror = /_mirror/
mirror_request_body = off
handler = proxy
pass = http://127.0.0.1:$ap

[location /hang/]
mirror = /_hang/
handler = proxy
pass = http://127.0.0.1:$ap

[location /err/]
mirror = /_err/
handler = proxy
pass = http://127.0.0.1:$ap

[location /dead/]
mirror = /_dead/
handler = proxy
pass = http://127.0.0.1:$ap

[location /named/]
mirror = \@shadow
handler = proxy
pass = http://127.0.0.1:$ap

[location \@shadow]
handler = proxy
pass = http://127.0.0.1:$sp
set_header = X-Orig: \$request_uri \$uri \$args

[location /off/]
mirror = off
handler = plaintext

[location /static/]
handler = plaintext

[location = /index.html]
handler = plaintext
EOF
my $tls_port = FastdTest::free_port();
my $t = FastdTest->new(conf => FastdTest::base_conf(
    http   => { mirror_timeout => '60s' },
    server => { listen => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% "
                        . "http2\nlisten = 127.0.0.1:$tls_port ssl http2",
                ssl_certificate => "$dir/cert.crt",
                ssl_certificate_key => "$dir/cert.key",
                mirror => '/_mirror/' },
    locations => $locations));
$t->start;

sub copies { grep { /^copy / } $shadow->log_lines }
sub wait_copy {
    my ($re) = @_;
    return FastdTest::wait_for(sub { grep { $_ =~ $re } copies() }, 10);
}
sub status_of {
    my ($t) = @_;
    my $r = $t->get('/status');
    return {} unless $r && $r->status == 200;
    my $s = eval { decode_json($r->body) } or return {};
    return ($s->{modules}{mirror} || [])->[0] || {};
}

# --- what a copy carries ----------------------------------------------------------
my $r = $t->get('/app/a?x=1&y=2', 'X-Test' => 'get1');
is($r->status, 200, 'GET: the main answer');
is($r->body, 'app GET /app/a?x=1&y=2 body=', '... unchanged');
is($r->header('x-app'), 'yes', '... with its header');
ok(wait_copy(qr{^copy GET /app/a\?x=1&y=2 x-test=get1 ct=- cl=- te=- body=$}),
   'the copy: method, $request_uri with the query, header, no body')
    or diag(join "\n", copies());

$r = $t->http("POST /app/p?q=z HTTP/1.1\r\nHost: x\r\nX-Test: post1\r\n"
              . "Content-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world");
is($r->body, 'app POST /app/p?q=z body=hello world', 'POST: the application gets the body');
ok(wait_copy(qr{^copy POST /app/p\?q=z x-test=post1 ct=text/plain cl=11 te=- body=hello world$}),
   '... and the copy, with its length and type') or diag(join "\n", copies());

$r = $t->http("POST /app/c HTTP/1.1\r\nHost: x\r\nX-Test: chunk1\r\n"
              . "Transfer-Encoding: chunked\r\n\r\n"
              . "5\r\nhello\r\n6\r\n chunk\r\n0\r\n\r\n");
is($r->body, 'app POST /app/c body=hello chunk', 'a chunked body: the application gets it');
ok(wait_copy(qr{^copy POST /app/c x-test=chunk1 ct=- cl=11 te=- body=hello chunk$}),
   '... the copy too, with a Content-Length') or diag(join "\n", copies());

$r = $t->http("PUT /nobody/n HTTP/1.1\r\nHost: x\r\nX-Test: nobody\r\n"
              . "Content-Length: 4\r\n\r\nbody");
is($r->body, 'app PUT /nobody/n body=body', 'mirror_request_body = off: the application gets the body');
ok(wait_copy(qr{^copy PUT /nobody/n x-test=nobody ct=- cl=- te=- body=$}),
   '... the copy has none') or diag(join "\n", copies());

$r = $t->get('/twice/t?k=v', 'X-Test' => 'twice');
is($r->body, 'app GET /twice/t?k=v body=', 'two mirrors: one answer');
ok(wait_copy(qr{^copy GET /twice/t\?k=v x-test=twice }), '... a copy to the first');
ok(wait_copy(qr{^copy GET /shadow/\?k=v x-test=twice }),
   '... and to the second, whose pass has a URI: that URI and the query')
    or diag(join "\n", copies());
ok(FastdTest::wait_for(sub { grep { $_ eq 'orig /twice/t?k=v /_uri_mirror/ k=v' } $shadow->log_lines }, 10),
   '... its $request_uri is the client\'s, $uri the mirror path, $args the client\'s')
    or diag(join "\n", $shadow->log_lines);

$r = $t->get('/named/n?m=1', 'X-Test' => 'named');
is($r->body, 'app GET /named/n?m=1 body=', 'mirror = @name: the main answer');
ok(wait_copy(qr{^copy GET /named/n\?m=1 x-test=named }), '... the copy went to the named location');
ok(FastdTest::wait_for(sub { grep { $_ eq 'orig /named/n?m=1 /named/n m=1' } $shadow->log_lines }, 10),
   '... there $uri is the client\'s path') or diag(join "\n", $shadow->log_lines);
is($t->get('/@shadow')->status, 404, 'a client cannot reach the named location');

# --- inheritance and off ----------------------------------------------------------
my $n = copies();
is($t->get('/static/s', 'X-Test' => 'inherit')->status, 200, 'the server\'s mirror in a location without one');
ok(wait_copy(qr{^copy GET /static/s x-test=inherit }), '... is inherited');
is($t->get('/', 'X-Test' => 'index')->status, 200, 'a directory: its index served (an internal redirect)');
is($t->get('/off/o', 'X-Test' => 'off')->status, 200, 'mirror = off: answered');
is($t->get('/app/after-off', 'X-Test' => 'marker')->status, 200, 'a marker request');
ok(wait_copy(qr{x-test=marker}), '... copied');
ok(!grep({ /x-test=off/ } copies()), 'mirror = off: no copy') or diag(join "\n", copies());
is(scalar(grep { /x-test=index/ } copies()), 1, 'a request moved by its handler is copied once')
    or diag(join "\n", copies());

# --- mirror services that fail: the client never notices ---------------------------
for my $case (['hang', 'a mirror that never answers'],
              ['err', 'a mirror that answers 500'],
              ['dead', 'a mirror that is down']) {
    my ($loc, $what) = @$case;
    my $r = $t->get("/$loc/x?i=1");
    is($r->status, 200, "$what: the client's answer");
    is($r->body, "app GET /$loc/x?i=1 body=", '... unchanged');
}
ok(FastdTest::wait_for(sub { grep { m{^hang /hang/x\?i=1$} } $hang->log_lines }, 10),
   'the hanging mirror got its copy');
# while it hangs, the same connection goes on (keep-alive after a mirrored request)
{
    my $c = $t->connect;
    for my $i (1 .. 3) {
        $c->send("POST /hang/k$i HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
        my $r = $c->read_response;
        is($r && $r->body, "app POST /hang/k$i body=abc", "keep-alive: request $i while its copy hangs");
    }
    $c->send("GET /app/k4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    $r = $c->read_response;
    is($r && $r->body, 'app GET /app/k4 body=', '... and a mirrored request after them');
    $c->close;
}
ok(FastdTest::wait_for(sub { (status_of($t)->{failed} // 0) >= 2 }, 10),
   '/status counts the copies that failed (500, down)')
    or diag(explain(status_of($t)));
my $st = status_of($t);
ok(($st->{sent} // 0) >= 10, '/status counts the copies sent') or diag(explain($st));
ok(($st->{active} // 0) >= 4, '... and those in flight (the hanging ones)') or diag(explain($st));

# a client that leaves right after its request: its copy lives on
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port) or die;
    print $s "POST /app/gone HTTP/1.1\r\nHost: x\r\nX-Test: gone\r\nContent-Length: 4\r\n\r\ngone";
    close $s;
    ok(wait_copy(qr{^copy POST /app/gone x-test=gone .* body=gone$}),
       'a client that closed at once: its copy still went');
}

# --- HTTP/2 and TLS ------------------------------------------------------------------
SKIP: {
    skip 'no curl', 7 unless -x '/usr/bin/curl';
    my $p2 = $t->port2;
    my $out = `curl -sS -D - --http2-prior-knowledge -H 'X-Test: h2get' 'http://127.0.0.1:$p2/app/h2?a=b' 2>&1`;
    like($out, qr{^HTTP/2 200.*app GET /app/h2\?a=b body=}ms, 'HTTP/2: the main answer');
    ok(wait_copy(qr{^copy GET /app/h2\?a=b x-test=h2get }), '... copied');
    $out = `curl -sS -D - --http2-prior-knowledge -H 'X-Test: h2post' --data-binary h2body 'http://127.0.0.1:$p2/app/h2p' 2>&1`;
    like($out, qr{app POST /app/h2p body=h2body}, 'HTTP/2 POST: the application gets the body');
    ok(wait_copy(qr{^copy POST /app/h2p x-test=h2post .*body=h2body$}), '... and the copy');
    $out = `curl -sS -D - --http2-prior-knowledge 'http://127.0.0.1:$p2/hang/h2' 'http://127.0.0.1:$p2/hang/h2b' 2>&1`;
    like($out, qr{app GET /hang/h2 body=.*app GET /hang/h2b body=}s,
         'HTTP/2: two streams of one connection answered while their copies hang');
    $out = `curl -sS -k -D - --http2 -H 'X-Test: tls2' --data-binary tlsbody https://127.0.0.1:$tls_port/app/tls 2>&1`;
    like($out, qr{^HTTP/2 200.*app POST /app/tls body=tlsbody}ms, 'TLS + HTTP/2: the main answer');
    ok(wait_copy(qr{^copy POST /app/tls x-test=tls2 .*body=tlsbody$}), '... copied');
}

# the engine is healthy afterwards, and nothing alarming was logged
is($t->get('/app/last')->status, 200, 'served after all that');
$t->no_alerts;

# --- the in-flight limit, and mirror_timeout ------------------------------------------
{
    my $t2 = FastdTest->new(conf => FastdTest::base_conf(
        http => { mirror_max_in_flight => 2, mirror_timeout => '2s' },
        locations => <<"EOF"));
[location = /status]
handler = status

[location /_hang/]
handler = proxy
pass = http://127.0.0.1:$hp
read_timeout = 60s

[location /hang/]
mirror = /_hang/
handler = proxy
pass = http://127.0.0.1:$ap
EOF
    $t2->start;
    my $ok = 0;
    for my $i (1 .. 6) {
        my $r = $t2->get("/hang/l$i");
        $ok++ if $r && $r->status == 200 && $r->body eq "app GET /hang/l$i body=";
    }
    is($ok, 6, 'over mirror_max_in_flight: every request answered');
    my $s = status_of($t2);
    is($s->{sent}, 2, 'two copies sent') or diag(explain($s));
    is($s->{dropped}, 4, 'the other four dropped and counted');
    like($t2->error_log, qr/copies in flight \(mirror_max_in_flight\): this one is dropped/,
         '... and logged');
    ok(FastdTest::wait_for(sub { my $s = status_of($t2);
                                 ($s->{active} // -1) == 0 && ($s->{failed} // 0) == 2 }, 20),
       'mirror_timeout stops the hanging copies: none in flight, both failed')
        or diag(explain(status_of($t2)));
    like($t2->error_log, qr/still running at mirror_timeout: stopped/, '... logged');
    is($t2->get('/hang/again')->status, 200, 'a request after them');
    ok(FastdTest::wait_for(sub { (status_of($t2)->{sent} // 0) == 3 }, 10),
       '... is copied again');
    $t2->no_alerts;
    $t2->stop;
}

# --- configuration errors -------------------------------------------------------------
sub conf_error {
    my ($loc, $re, $name) = @_;
    my ($code, $out) = FastdTest::test_conf(locations => $loc);
    isnt($code, 0, "$name: -t fails");
    like($out, $re, "$name: the message") or diag $out;
}
conf_error("[location /x]\nmirror = shadow\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: mirror: "shadow" is not a path/, 'a relative path');
conf_error("[location /x]\nhandler = plaintext\nmirror = \@nosuch\n",
           qr/fastd\.conf:\d+: mirror: no \[location \@nosuch\] in this \[server\]/, 'an unknown @name');
{
    my ($code, $out, $conf) = FastdTest::test_conf(
        locations => "[location /x]\nhandler = plaintext\nmirror = \@nosuch\n");
    my @l = split /\n/, $conf;
    my ($n) = grep { $l[$_ - 1] eq 'mirror = @nosuch' } 1 .. @l;
    like($out, qr/fastd\.conf:$n: mirror: no/, '... at the line of its mirror key') or diag $out;
}
conf_error("[location /x]\nmirror = /m?a=1\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: mirror: "\/m\?a=1" is not a path/, 'a query');
conf_error("[location /x]\nmirror = /m\nmirror_max_in_flight = 0\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: .*mirror_max_in_flight/, 'a limit of 0');
conf_error("[location /x]\nmirror_request_body = maybe\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: .*mirror_request_body/, 'a bad flag');
{
    # a path no location takes is not an error (as nginx): its copies get
    # the server's default answer
    my ($code, $out) = FastdTest::test_conf(
        locations => "[location /x]\nmirror = /nowhere\nhandler = plaintext\n");
    is($code, 0, 'a mirror path no location takes: accepted') or diag $out;
}

done_testing;
