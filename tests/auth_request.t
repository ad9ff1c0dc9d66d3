#!/usr/bin/perl
# auth_request: a subrequest to a proxied auth service decides each
# request. 2xx lets it through (auth_request_set carrying the service's
# X-User to the application and the access log), 401 (with the
# service's WWW-Authenticate) and 403 are the answer, anything else is
# 500: a redirect, the service down, the service too slow. The service
# sees the request's header (not its body) and $request_uri; allow/deny
# refuses before any subrequest; a client that leaves mid-check stops
# it; over HTTP/1.1, HTTP/2 and TLS; configuration errors name file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Test::More;

my $auth = Backend->new(name => 'auth', handler => sub {
    my ($req) = @_;
    my $h = $req->{headers};
    $req->{backend}->logit("auth $req->{method} $req->{target} "
        . "orig=" . ($h->{'x-original-uri'} // '-')
        . " cl=" . ($h->{'content-length'} // '-')
        . " body=" . length($req->{body} // ''));
    my $a = $h->{authorization} // '';
    $a = "Bearer $1" if ($h->{cookie} // '') =~ /session=(\w+)/;
    return Backend::response(200, 'ok', 'X-User' => 'alice')
        if $a eq 'Bearer good';
    return Backend::response(401, 'no', 'WWW-Authenticate' => 'Bearer realm="t"')
        if $a eq 'Bearer bad';
    return Backend::response(403, 'forbidden') if $a eq 'Bearer forbidden';
    return Backend::response(302, '', Location => '/login') if $a eq 'Bearer weird';
    if ($a eq 'Bearer slow') {
        sleep 3;
        return Backend::response(200, 'late');
    }
    return Backend::response(401, 'who');
});
my $app = Backend->new(name => 'app', handler => sub {
    my ($req) = @_;
    my $u = $req->{headers}{'x-user'} // '-';
    return Backend::response(200, "app $req->{method} $req->{target} user=$u "
                                  . "body=" . ($req->{body} // ''));
});
my $dead = FastdTest::free_port();

my $dir = tempdir(CLEANUP => 1);
FastdTest::self_signed("$dir/cert", 'localhost');
my $locations = <<"EOF";
[location /_auth]
handler = proxy
pass = http://127.0.0.1:@{[$auth->port]}/check
set_header = X-Original-URI: \$request_uri
read_timeout = 1s

[upstream authk]
server = 127.0.0.1:@{[$auth->port]}
keepalive = 4

[location /_authk]
handler = proxy
pass = http://authk/check

[location /kept/]
auth_request = /_authk
handler = plaintext

[location /_authc]
handler = proxy
pass = http://127.0.0.1:@{[$auth->port]}/cached
proxy_cache = authc
proxy_cache_key = \$cookie_session
proxy_cache_valid = 200 401 403 1m
proxy_ignore_headers = Cache-Control

[location /cached/]
auth_request = /_authc
handler = plaintext

[location /_authdown]
handler = proxy
pass = http://127.0.0.1:$dead

[location /app/]
auth_request = /_auth
auth_request_set = \$user \$upstream_http_x_user
auth_request_set = \$auth_status \$status
handler = proxy
pass = http://127.0.0.1:@{[$app->port]}
set_header = X-User: \$user
add_header = X-Auth-Status \$auth_status always

[location /down/]
auth_request = /_authdown
handler = plaintext

[location /closed/]
deny = all
auth_request = /_auth
handler = plaintext

[location /open/]
auth_request = off
handler = plaintext

EOF
my $tls_port = FastdTest::free_port();
my $t = FastdTest->new(conf => FastdTest::base_conf(
    http   => { access_log => '%%DIR%%/access.log format=au buffer=0',
                log_format => 'au $uri $status user=$user' },
    server => { listen => "127.0.0.1:%%PORT%%\nlisten = 127.0.0.1:%%PORT2%% "
                        . "http2\nlisten = 127.0.0.1:$tls_port ssl http2",
                ssl_certificate => "$dir/cert.crt",
                ssl_certificate_key => "$dir/cert.key",
                auth_request => '/_auth' },
    locations => $locations,
    extra => "[cache authc]\npath = %%DIR%%/cache\nkeys_zone = 1m\n\n"));
$t->start;

sub auth_log { join "\n", grep { /^auth / } split /\n/, FastdTest::slurp($auth->{log}) // '' }
sub get { my ($path, $tok, %h) = @_; $t->get($path, ($tok ? (Authorization => "Bearer $tok") : ()), %h) }

# --- the answers ----------------------------------------------------------------
my $r = get('/app/x?q=1', 'good');
is($r->status, 200, '2xx: through');
like($r->body, qr{^app GET /app/x\?q=1 user=alice }, '... to the application, with '
     . 'auth_request_set\'s $user in its header');
is($r->header('x-auth-status'), '200', '$status read in the subrequest');
like(auth_log(), qr{^auth GET /check orig=/app/x\?q=1 cl=- body=0$}m,
     'the service got a GET of its path, $request_uri, no body');
ok(FastdTest::wait_for(sub {
       (FastdTest::slurp($t->dir . '/access.log') // '') =~ m{^/app/x 200 user=alice$}m
   }, 5), 'the access log reads $user; the subrequest is not logged')
    or diag(FastdTest::slurp($t->dir . '/access.log'));
unlike(FastdTest::slurp($t->dir . '/access.log') // '', qr{^/_auth}m,
       '... no line of its own');

$r = get('/app/x', 'bad');
is($r->status, 401, '401: the answer');
is($r->header('www-authenticate'), 'Bearer realm="t"', '... with the service\'s WWW-Authenticate');
is(get('/app/x', 'forbidden')->status, 403, '403: the answer');
is(get('/app/x', 'weird')->status, 500, 'a redirect from the service: 500');
my $t0 = time;
is(get('/app/x', 'slow')->status, 500, 'a service slower than read_timeout: 500');
ok(time - $t0 < 3, '... answered at the timeout, not when the service woke');
is(get('/down/', 'good')->status, 500, 'the service down: 500, never through');
is(get('/plaintext', 'good')->status, 200, 'a server-wide auth_request: through');
is(get('/plaintext')->status, 401, '... and refused');
is(get('/open/', undef)->status, 200, 'auth_request = off in a location');

# a body: the application gets it, the service does not
$r = $t->http("POST /app/p HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good\r\n"
              . "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
like($r->body, qr{^app POST /app/p user=alice body=hello$}, 'POST: the body reaches the application');
like(auth_log(), qr{^auth GET /check orig=/app/p cl=- body=0$}m, '... not the service');

# the auth answers cached by the credentials: one question per token
{
    my $n = sub { my $tok = shift; scalar(() = auth_log() =~ m{^auth GET /cached }mg) };
    my $c = sub { $t->get($_[0], Cookie => "session=$_[1]")->status };
    is($c->('/cached/a', 'good'), 200, 'cached auth: through');
    is($c->('/cached/b', 'good'), 200, '... again');
    is($c->('/cached/c', 'bad'), 401, '... another session: refused');
    is($c->('/cached/d', 'bad'), 401, '... again');
    is($n->(), 2, 'the service was asked once per token (the proxy cache on '
       . 'the auth location)') or diag(auth_log());
}

# a kept-alive connection to the service stays in step: the answers'
# bodies are read (and dropped), never taken for the next answer
my $conns = $auth->connections;
for my $i (1 .. 6) {
    my $tok = $i % 2 ? 'good' : 'bad';
    is(get("/kept/$i", $tok)->status, $i % 2 ? 200 : 401,
       "keep-alive to the service, request $i");
}
ok($auth->connections - $conns < 6, 'the service\'s connection was reused')
    or diag($auth->connections - $conns);

# allow/deny first: no subrequest for a refused client
my $before = () = auth_log() =~ /^auth /mg;
is(get('/closed/', 'good')->status, 403, 'deny = all: 403');
my $after = () = auth_log() =~ /^auth /mg;
is($after, $before, '... before any subrequest');

# --- HTTP/2 and TLS -----------------------------------------------------------------
SKIP: {
    skip 'no curl', 4 unless -x '/usr/bin/curl';
    my $p2 = $t->port2;
    my $out = `curl -sS -D - --http2-prior-knowledge -H 'Authorization: Bearer good' http://127.0.0.1:$p2/app/h2 2>&1`;
    like($out, qr{^HTTP/2 200.*app GET /app/h2 user=alice}ms, 'HTTP/2: through');
    $out = `curl -sS -D - --http2-prior-knowledge -H 'Authorization: Bearer bad' http://127.0.0.1:$p2/app/h2 2>&1`;
    like($out, qr{^HTTP/2 401.*www-authenticate: Bearer realm="t"}msi, 'HTTP/2: 401');
    $out = `curl -sS -k -D - --http2 -H 'Authorization: Bearer good' https://127.0.0.1:$tls_port/app/tls 2>&1`;
    like($out, qr{^HTTP/2 200.*app GET /app/tls user=alice}ms, 'TLS + HTTP/2: through');
    $out = `curl -sS -k -D - --http1.1 -H 'Authorization: Bearer forbidden' https://127.0.0.1:$tls_port/app/tls 2>&1`;
    like($out, qr{^HTTP/1.1 403}m, 'TLS: 403');
}

# --- a client that leaves while the service thinks --------------------------------
{
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port)
        or die;
    print $s "GET /app/gone HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer slow\r\n\r\n";
    ok(FastdTest::wait_for(sub { auth_log() =~ m{orig=/app/gone} }, 5),
       'the subrequest reached the service');
    close $s;
    ok(FastdTest::wait_for(sub { $t->error_log =~ /client closed the connection while proxying/ }, 5),
       'the client left: its subrequest to the service was stopped');
    # the next requests are served, on HTTP/1.1 and HTTP/2, and nothing broke
    is(get('/app/after', 'good')->status, 200, 'after a client left mid-check: served');
    SKIP: {
        skip 'no curl', 1 unless -x '/usr/bin/curl';
        my $p2 = $t->port2;
        # an HTTP/2 stream reset while its check runs
        system("curl -sS -m 0.3 --http2-prior-knowledge -H 'Authorization: Bearer slow' "
             . "http://127.0.0.1:$p2/app/h2gone >/dev/null 2>&1");
        is(get('/app/after2', 'good')->status, 200, '... and after an HTTP/2 stream left mid-check');
    }
}
$t->no_alerts;
unlike($t->error_log, qr/\[(alert|crit|emerg)\]/, 'no alert in the error log');

# --- configuration errors ---------------------------------------------------------------
sub conf_error {
    my ($loc, $re, $name) = @_;
    my $d = tempdir(CLEANUP => 1);
    my $conf = FastdTest::base_conf(locations => $loc);
    $conf =~ s/%%PORT%%/1/g;
    $conf =~ s/%%\w+%%/$d/g;
    FastdTest::spew("$d/fastd.conf", $conf);
    my ($code, $out) = FastdTest::run_fastd('-t', '-c', "$d/fastd.conf");
    isnt($code, 0, "$name: -t fails");
    like($out, $re, "$name: the message") or diag $out;
}
conf_error("[location /x]\nauth_request = check\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: auth_request: "check" is not a path/, 'a relative path');
conf_error("[location /x]\nauth_request_set = user \$status\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: auth_request_set needs \$VARIABLE VALUE/, 'no $');
conf_error("[location /x]\nauth_request_set = \$host \$status\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: \$host is fastd's own variable/, 'a core variable');
conf_error("[location /x]\nauth_request_set = \$u \$nosuch\nhandler = plaintext\n",
           qr/fastd\.conf:\d+: auth_request_set: unknown variable "\$nosuch"/, 'an unknown variable');

done_testing;
