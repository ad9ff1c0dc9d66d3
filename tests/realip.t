#!/usr/bin/perl
# The client behind a load balancer, from request headers: set_real_ip_from,
# real_ip_header = X-Forwarded-For | X-Real-IP, real_ip_recursive. Trusted
# and untrusted peers, recursive on and off, malformed X-Forwarded-For
# elements (garbage, ports, brackets, empty elements, spaces: an invalid
# one stops the walk), IPv6, several headers, acl by the real address, the
# access log and the X-Forwarded-For a real upstream receives, the keys in
# [http] as every [server]'s default, and bad config lines naming
# file:line.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $addr = "[location /addr]\nreturn = 200 \"\$remote_addr\"\n\n"
         . "[location /hop]\nreturn = 200 \"\$remote_addr \$remote_port "
         . "\$realip_remote_addr\"\n\n";
my $t = FastdTest->new(conf => FastdTest::base_conf(
    server => { set_real_ip_from => ['127.0.0.0/8', '10.0.0.0/8',
                                     '2001:db8::/32'],
                real_ip_header => 'X-Forwarded-For',
                real_ip_recursive => 'on' },
    locations => $addr
        . "[location /acl]\nhandler = plaintext\nallow = 1.2.3.0/24\n"
        . "deny = all\n\n",
    extra =>
        # the last element only
        "[server]\nlisten = 127.0.0.1:%%PORT2%%\nroot = %%HTML%%\n"
      . "set_real_ip_from = 127.0.0.1\nreal_ip_header = x-forwarded-for\n"
      . "access_log = %%DIR%%/access.log format=mine buffer=0\n"
      . "log_format = mine \$remote_addr \"\$request\"\n\n$addr"));
$t->start;
my $t2port = $t->port2;

sub addr {
    my ($port, @h) = @_;
    my $req = "GET /addr HTTP/1.1\r\nHost: x\r\n";
    $req .= "$_\r\n" for @h;
    my $r = $t->http("$req\r\n", port => $port);
    return $r ? $r->body : 'no response';
}

my $p = $t->port;
is(addr($p), '127.0.0.1', 'no header: the peer');
is(addr($p, 'X-Forwarded-For: 1.2.3.4'), '1.2.3.4', 'a trusted peer: XFF');
is(addr($p, 'X-Forwarded-For: 1.2.3.4, 10.0.0.1'), '1.2.3.4',
   'recursive: trusted hops skipped right to left');
is(addr($p, 'X-Forwarded-For: 1.2.3.4, 10.0.0.2, 10.0.0.1'), '1.2.3.4',
   'recursive: two trusted hops');
is(addr($p, 'X-Forwarded-For: 9.9.9.9, 1.2.3.4, 10.0.0.1'), '1.2.3.4',
   'recursive: stops at the first untrusted address');
is(addr($p, 'X-Forwarded-For: 10.0.0.3, 10.0.0.1'), '10.0.0.3',
   'all trusted: the leftmost');
is(addr($p, 'X-Forwarded-For: 1.2.3.4', 'X-Forwarded-For: 10.0.0.1'),
   '1.2.3.4', 'several headers read as one list');
is(addr($p, 'X-Forwarded-For: 1.2.3.4, garbage, 10.0.0.1'), '10.0.0.1',
   'garbage stops the walk: the last good address stays');
is(addr($p, 'X-Forwarded-For: 999.1.1.1'), '127.0.0.1',
   'an invalid last element: the peer stays');
is(addr($p, 'X-Forwarded-For: 1.2.3.4, 10.0.0.1:8080'), '1.2.3.4',
   'an address with a port is an address');
is(addr($p, 'X-Forwarded-For: 1.2.3.4:0'), '127.0.0.1', 'port 0: invalid');
is(addr($p, 'X-Forwarded-For: 1.2.3.4:99999'), '127.0.0.1',
   'port > 65535: invalid');
is(addr($p, 'X-Forwarded-For: [2001:db8::1]:443'), '2001:db8::1',
   'IPv6 in brackets with a port');
is(addr($p, 'X-Forwarded-For: 1.2.3.4, [2001:db8::1]'), '127.0.0.1',
   'brackets without a port: invalid');
is(addr($p, 'X-Forwarded-For: [1.2.3.4]:80'), '127.0.0.1',
   'IPv4 in brackets: invalid');
is(addr($p, 'X-Forwarded-For: 1.2.3.4, 2001:db8::7'), '1.2.3.4',
   'a trusted IPv6 hop (2001:db8::/32) skipped');
is(addr($p, 'X-Forwarded-For: 2001:db9::5, 10.0.0.1'), '2001:db9::5',
   'an IPv6 client');
is(addr($p, 'X-Forwarded-For: 1.2.3.4,, ,  10.0.0.1 ,'), '1.2.3.4',
   'empty elements and spaces are skipped');
is(addr($p, 'X-Forwarded-For: 1.2.3.4 10.0.0.1'), '1.2.3.4',
   'a space separates elements');
is(addr($p, 'X-Forwarded-For:'), '127.0.0.1', 'an empty header: the peer');
{
    my $r = $t->get('/hop', 'X-Forwarded-For' => '[2001:db8::3]:4321');
    is($r && $r->body, '2001:db8::3 4321 127.0.0.1',
       '$realip_remote_addr keeps the hop, $remote_port the header\'s port');
}
is(addr($p, 'X-Real-IP: 5.6.7.8'), '127.0.0.1',
   'real_ip_header = X-Forwarded-For: X-Real-IP is not read');

# recursive off: the last element, whatever it is
is(addr($t2port, 'X-Forwarded-For: 1.2.3.4, 10.0.0.1'), '10.0.0.1',
   'recursive off: the last element');
is(addr($t2port, 'X-Forwarded-For: 1.2.3.4, bad'), '127.0.0.1',
   'recursive off: an invalid last element changes nothing');

# the access log shows the real address
addr($t2port, 'X-Forwarded-For: 198.51.100.7');
ok(FastdTest::wait_for(sub {
    (FastdTest::slurp($t->dir . '/access.log') // '') =~
        m{^198\.51\.100\.7 "GET /addr HTTP/1\.1"$}m }, 5),
   'the access log shows the real address')
    or diag(FastdTest::slurp($t->dir . '/access.log'));

# acl by the real address
sub acl {
    my @h = @_;
    my $req = "GET /acl HTTP/1.1\r\nHost: x\r\n";
    $req .= "$_\r\n" for @h;
    my $r = $t->http("$req\r\n");
    return $r ? $r->status : 0;
}
is(acl('X-Forwarded-For: 1.2.3.4'), 200, 'acl: a real client inside 1.2.3.0/24');
is(acl('X-Forwarded-For: 9.9.9.9'), 403, 'acl: a real client outside');
is(acl(), 403, 'acl: the balancer itself is outside');

# --- HTTP/2: the address is the request's, stream by stream -----------------
SKIP: {
    my $py = <<'PY';
import socket, sys, h2.connection, h2.events
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)
c = h2.connection.H2Connection()
c.initiate_connection()
# three streams at once on one connection, each from another client
for sid, xff in ((1, '192.0.2.1'), (3, '192.0.2.2'), (5, None)):
    h = [(':method', 'GET'), (':path', '/addr'), (':scheme', 'http'),
         (':authority', 'x')]
    if xff:
        h.append(('x-forwarded-for', xff))
    c.send_headers(sid, h, end_stream=True)
s.sendall(c.data_to_send())
body, ended = {}, set()
while len(ended) < 3:
    data = s.recv(65536)
    if not data:
        break
    for e in c.receive_data(data):
        if isinstance(e, h2.events.DataReceived):
            body[e.stream_id] = body.get(e.stream_id, b'') + e.data
            c.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
        elif isinstance(e, h2.events.StreamEnded):
            ended.add(e.stream_id)
    s.sendall(c.data_to_send())
print(' '.join(body.get(i, b'-').decode() for i in (1, 3, 5)))
PY
    system('/usr/bin/python3', '-c', 'import h2.connection') == 0
        or skip('no python3-h2', 1);
    my $h = FastdTest->new(conf => FastdTest::base_conf(
        server => { listen => '127.0.0.1:%%PORT%% http2',
                    set_real_ip_from => '127.0.0.1',
                    real_ip_header => 'X-Forwarded-For' },
        locations => $addr));
    $h->start;
    $h->write_file('streams.py', $py);
    my $out = `/usr/bin/python3 ${\ $h->dir}/streams.py ${\ $h->port} 2>&1`;
    chomp $out;
    is($out, '192.0.2.1 192.0.2.2 127.0.0.1',
       'HTTP/2: concurrent streams on one connection, each its own address');
    $h->stop;
    $h->no_alerts;
}

# --- an untrusted peer: a forged header changes nothing ----------------------
my $u = FastdTest->new(conf => FastdTest::base_conf(
    server => { set_real_ip_from => '10.0.0.0/8',
                real_ip_header => 'X-Forwarded-For',
                real_ip_recursive => 'on' },
    locations => $addr
        . "[location /acl]\nhandler = plaintext\nallow = 1.2.3.0/24\n"
        . "deny = all\n\n"));
$u->start;
my $r = $u->get('/addr', 'X-Forwarded-For' => '1.2.3.4');
is($r && $r->body, '127.0.0.1', 'an untrusted peer: XFF ignored');
$r = $u->get('/acl', 'X-Forwarded-For' => '1.2.3.4');
is($r && $r->status, 403, 'an untrusted peer cannot forge its way past acl');

# --- [http] as every [server]'s default ------------------------------------
# the first server takes [http]'s trust; the second's own set_real_ip_from
# replaces it (10.9.0.0/16 only: 127.0.0.1 is untrusted there)
my $hd = FastdTest->new(conf => FastdTest::base_conf(
    http => { set_real_ip_from => '127.0.0.1',
              real_ip_header => 'X-Forwarded-For' },
    locations => $addr,
    extra => "[server]\nlisten = 127.0.0.1:%%PORT2%%\nroot = %%HTML%%\n"
           . "set_real_ip_from = 10.9.0.0/16\n\n$addr"));
$hd->start;
$r = $hd->get('/addr', 'X-Forwarded-For' => '198.51.100.9');
is($r && $r->body, '198.51.100.9', '[http] set_real_ip_from and '
   . 'real_ip_header: a [server] without its own takes them');
$r = $hd->http("GET /addr HTTP/1.1\r\nHost: x\r\n"
               . "X-Forwarded-For: 198.51.100.9\r\n\r\n", port => $hd->port2);
is($r && $r->body, '127.0.0.1',
   'a [server]\'s own set_real_ip_from replaces [http]\'s');
$hd->stop;
$hd->no_alerts;
{
    my $path = $hd->write_conf(FastdTest::base_conf(
        http => { set_real_ip_from => '10.0.0.0/+8' }), 'bad-http.conf');
    my $line = FastdTest::line_of(FastdTest::slurp($path),
                                  qr/^set_real_ip_from = 10\.0\.0\.0\/\+8$/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/bad-http\.conf:$line: "set_real_ip_from": bad address/,
         'a bad set_real_ip_from in [http] names its file:line') or diag($out);
    $path = $hd->write_conf(FastdTest::base_conf(
        http => { max_conns_per_ip => 3 }), 'bad-http2.conf');
    ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    like($out, qr/unknown key "max_conns_per_ip" in \[http\]: it belongs in \[server\]/,
         'other [server] keys stay out of [http]') or diag($out);
}

# --- a [location]'s own keys ----------------------------------------------
# each key is inherited on its own; a location's set_real_ip_from replaces
# the server's list; its keys decide for the requests routed to it (acl too)
{
    my $ret = "return = 200 \"\$remote_addr\"\n";
    my $lt = FastdTest->new(conf => FastdTest::base_conf(
        server => { set_real_ip_from => '127.0.0.1',
                    real_ip_header => 'X-Forwarded-For' },
        locations => $addr
            . "[location /xri]\nreal_ip_header = X-Real-IP\n$ret\n"
            . "[location /other]\nset_real_ip_from = 10.0.0.0/8\n$ret\n"
            . "[location /acl2]\nreal_ip_header = X-Real-IP\n"
            . "handler = plaintext\nallow = 1.2.3.0/24\ndeny = all\n\n",
        extra => "[server]\nlisten = 127.0.0.1:%%PORT2%%\nroot = %%HTML%%\n\n"
               . "$addr\n[location /trust]\nset_real_ip_from = 127.0.0.1\n"
               . "$ret\n"));
    $lt->start;
    my %both = ('X-Forwarded-For' => '198.51.100.1',
                'X-Real-IP' => '198.51.100.2');
    my $b = sub { my $r = $lt->get(@_); $r ? $r->body : 'no response' };
    is($b->('/addr', %both), '198.51.100.1', 'the server\'s keys: XFF');
    is($b->('/xri', %both), '198.51.100.2', 'a location\'s real_ip_header, '
       . 'with the server\'s set_real_ip_from inherited');
    is($b->('/other', %both), '127.0.0.1',
       'a location\'s own set_real_ip_from replaces the server\'s list');
    my $r = $lt->get('/acl2', 'X-Real-IP' => '1.2.3.4',
                     'X-Forwarded-For' => '9.9.9.9');
    is($r && $r->status, 200, 'acl sees the location\'s real address');
    $r = $lt->get('/acl2', 'X-Real-IP' => '9.9.9.9',
                  'X-Forwarded-For' => '1.2.3.4');
    is($r && $r->status, 403, 'acl: the server\'s header is not the '
       . 'location\'s');
    my $p2 = sub {
        my $r = $lt->http("GET $_[0] HTTP/1.1\r\nHost: x\r\n"
                          . "X-Real-IP: 198.51.100.3\r\n\r\n",
                          port => $lt->port2);
        $r ? $r->body : 'no response';
    };
    is($p2->('/trust'), '198.51.100.3',
       'a server with no trust: a location\'s set_real_ip_from');
    is($p2->('/addr'), '127.0.0.1', '... and only that location');
    $lt->stop;
    $lt->no_alerts;
}

# --- X-Real-IP (the default header) -------------------------------------------
my $x = FastdTest->new(conf => FastdTest::base_conf(
    server => { set_real_ip_from => '127.0.0.1' }, locations => $addr));
$x->start;
sub xr { my $r = $x->get('/addr', @_); $r ? $r->body : '' }
is(xr('X-Real-IP' => '5.6.7.8'), '5.6.7.8', 'X-Real-IP by default');
is(xr('X-Real-IP' => '5.6.7.8:1234'), '5.6.7.8', 'X-Real-IP with a port');
is(xr('X-Real-IP' => '5.6.7.8, 9.9.9.9'), '127.0.0.1',
   'X-Real-IP is one address, not a list');
is(xr('X-Forwarded-For' => '5.6.7.8'), '127.0.0.1',
   'X-Real-IP by default: XFF is not read');

# --- the X-Forwarded-For a real upstream receives ---------------------------
{
    my $be = Backend->new(handler => sub {
        my ($req) = @_;
        return Backend::response(200,
            'xff=' . ($req->{headers}{'x-forwarded-for'} // ''));
    });
    my $pconf = FastdTest::base_conf(
        server => { set_real_ip_from => '127.0.0.1',
                    real_ip_header => 'X-Forwarded-For' },
        locations => "[location /up]\nhandler = proxy\nupstream = app\n\n",
        extra => "[upstream app]\nserver = 127.0.0.1:" . $be->port
               . "\nbalance = hash\n\n");
    my $pt = FastdTest->new(conf => $pconf);
    $pt->start;
    my $pr = $pt->get('/up', 'X-Forwarded-For' => '203.0.113.9');
    is($pr && $pr->body, 'xff=203.0.113.9, 203.0.113.9',
       'upstream X-Forwarded-For: the header, then $remote_addr (the real '
       . 'client), as nginx\'s $proxy_add_x_forwarded_for')
        or diag($pr ? $pr->body : 'no response');
    $pt->stop;
    $pt->no_alerts;
}

# --- config errors name file:line ---------------------------------------------
for my $bad (['set_real_ip_from', '10.0.0.1/33'],
             ['set_real_ip_from', '10.1.0.0/8'],
             ['set_real_ip_from', 'not-an-ip'],
             ['set_real_ip_from', '10.0.0.0/x'],
             ['set_real_ip_from', '2001:db8::1/32'],
             ['real_ip_header', 'X-Client-IP'],
             ['real_ip_recursive', 'maybe']) {
    my ($k, $v) = @$bad;
    my $conf = FastdTest::base_conf(server => { $k => $v });
    my $path = $t->write_conf($conf, 'bad.conf');
    my $line = FastdTest::line_of($t->subst($conf), qr/^\Q$k = $v\E$/);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $path);
    isnt($rc, 0, "$k = $v is a config error");
    like($out, qr/bad\.conf:$line: /, '... naming file:line') or diag($out);
}

$_->stop for $t, $u, $x;
$_->no_alerts for $t, $u, $x;
done_testing;
