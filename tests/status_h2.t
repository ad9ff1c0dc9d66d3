#!/usr/bin/perl
# status: the HTTP/2 figures. /status has an "http2" object in the totals
# and per worker, Prometheus the five fastd_http2_* families; the
# dashboard's HTTP/2 card shows what a document holds (from fixtures, in
# headless Chromium), and the HTTP/3 card beside it. Then, when fastd speaks HTTP/2 (h2c, prior
# knowledge; python3-h2 on /usr/bin/python3), real connections move the
# counters: streams, a client reset, a connection held open (the gauge),
# and a GOAWAY fastd sends for a protocol error.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use IPC::Open2;
use JSON::PP;
use Test::More;

my $t = FastdTest->new;
my $dir = $t->dir;
mkdir "$dir/www" and mkdir "$dir/www/fx" or die "mkdir: $!";
$t->write_conf(FastdTest::base_conf(
    server    => { listen => '127.0.0.1:%%PORT%% http2' },
    locations => "[location = /status]\nhandler = status\n\n"
                 . "[location /fx/]\nroot = $dir/www\n\n"));
$t->start;
my $port = $t->port;

my $why = '';
sub status {
    my $r = $t->get('/status');
    if (!$r || $r->status != 200) {
        $why = $r ? 'status ' . $r->status : 'no response';
        return undef;
    }
    my $s = eval { decode_json($r->body) };
    $why = $@ ? "bad JSON: $@" : '';
    return $s;
}

my @F = qw(connections active streams resets goaways);

# --- the documents ----------------------------------------------------------
my $s = status() // {};
ok(ref $s->{http2} eq 'HASH', '/status: an "http2" object') or diag($why);
for my $f (@F) {
    like($s->{http2}{$f} // '', qr/^\d+$/, "http2.$f is a number");
}
my ($w) = grep { $_->{alive} } @{ $s->{workers} || [] };
ok($w && ref $w->{http2} eq 'HASH'
   && !grep({ ($w->{http2}{$_} // '') !~ /^\d+$/ } @F),
   'and per worker, with the same five members');

my $r = $t->get('/status?format=prometheus');
my $prom = $r ? $r->body : '';
for my $m (['fastd_http2_connections_total', 'counter'],
           ['fastd_http2_active_connections', 'gauge'],
           ['fastd_http2_streams_total', 'counter'],
           ['fastd_http2_resets_total', 'counter'],
           ['fastd_http2_goaways_total', 'counter']) {
    my ($name, $type) = @$m;
    like($prom, qr/^# HELP \Q$name\E \S.*\n# TYPE \Q$name\E \Q$type\E\n\Q$name\E \d+$/m,
         "Prometheus: $name ($type) with HELP and TYPE");
}
like($prom, qr/^fastd_worker_http2_streams_total\{worker="\d+"\} \d+$/m,
     'Prometheus: per worker too');

# --- the dashboard card, from fixtures ---------------------------------------
SKIP: {
    skip 'chromium is not installed (apt-get install chromium)', 10
        unless FastdTest::chromium();
    my %doc = (connections => { active => 9 }, requests => 1, workers => []);
    FastdTest::spew("$dir/www/fx/h2.json", encode_json({ %doc,
        http2 => { connections => 1234, active => 5, streams => 40000,
                   resets => 7, goaways => 2 },
        quic => { connections => 300, active_connections => 12,
                  closed_connections => 288, streams => 9000, retries => 40,
                  retries_validated => 38, lost_packets => 17,
                  migrations => 3, stateless_resets => 4,
                  dropped_initials => 6 } }));
    FastdTest::spew("$dir/www/fx/none.json", encode_json({ %doc,
        http2 => { map { $_ => 0 } @F } }));

    my $dom = FastdTest::browse($dir, '--virtual-time-budget=3000',
        '--dump-dom', "http://127.0.0.1:$port/status.html?src=/fx/h2.json");
    my ($polls) = $dom =~ /data-polls="(\d+)"/;
    ok($polls, 'the page rendered the fixture') or diag(substr($dom, 0, 2000));
    like($dom, qr{id="h2-connections"[^>]*>1234<}, 'the card: 1234 connections');
    my ($card) = $dom =~ m{<div id="h2"[^>]*>(.*?)</div>\s*</section>}s;
    $card //= '';
    like($card, qr/open\s+5 of 9 connections/, 'open of all open');
    like($card, qr/streams\s+40\.0k\s+\(32\.4 per connection\)/,
         'streams, per connection');
    like($card, qr/reset by clients\s+7.*GOAWAY for an error\s+2/s,
         'client resets and GOAWAYs');
    like($dom, qr{id="h3-connections"[^>]*>300<}, 'the HTTP/3 card: 300 '
         . 'QUIC connections');
    ($card) = $dom =~ m{<div id="h3"[^>]*>(.*?)</div>\s*</section>}s;
    like($card // '', qr/open\s+12,\ ended\ 288 .* streams\s+9000\s+
         \(30\ per\ connection\) .* Retry\ sent\s+40,\ validated\ 38 .*
         packets\ lost\s+17 .* migrations\s+3 .* stateless\ resets\s+4 .*
         Initials\ dropped\s+6/sx,
         'open, streams, Retry, losses, migrations, resets, drops');

    $dom = FastdTest::browse($dir, '--virtual-time-budget=3000',
        '--dump-dom', "http://127.0.0.1:$port/status.html?src=/fx/none.json");
    like($dom, qr{<div id="h2" class="mute">no HTTP/2 connections</div>},
         'zero connections: "no HTTP/2 connections"');
    like($dom, qr{<div id="h3" class="mute">no QUIC connections</div>},
         'no "quic" object: "no QUIC connections"');

    my $console = FastdTest::slurp("$dir/console.log") // '';
    my @errors = grep { /CONSOLE/ && /(Uncaught|Error|error)/ }
                 split /\n/, $console;
    is(scalar @errors, 0, 'no console error') or diag(join "\n", @errors);
}

# --- real HTTP/2 connections ---------------------------------------------------
# The client: N concurrent GET streams on one h2c connection, then a POST
# it resets before sending its body; it holds the connection until told
# "goaway", then sends a DATA frame on stream 0 (a connection error) and
# reports the GOAWAY.
my $N = 20;
my $PY = <<'PY';
import socket, sys
try:
    import h2.config, h2.connection, h2.events
except ImportError:
    print("NOLIB", flush=True)
    sys.exit(0)
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
s.sendall(c.data_to_send())
first = s.recv(65536)
if first.startswith(b"HTTP/1."):
    print("NOH2", flush=True)
    sys.exit(0)
hdrs = [(":method", "GET"), (":scheme", "http"),
        (":authority", "127.0.0.1"), (":path", "/plaintext")]
ids = []
for i in range(n):
    sid = c.get_next_available_stream_id()
    c.send_headers(sid, hdrs, end_stream=True)
    ids.append(sid)
s.sendall(c.data_to_send())
status, body, ended = {}, {}, set()
data = first
for _ in range(10000):
    for e in c.receive_data(data):
        if isinstance(e, h2.events.ResponseReceived):
            status[e.stream_id] = dict(e.headers).get(b":status")
        elif isinstance(e, h2.events.DataReceived):
            body[e.stream_id] = body.get(e.stream_id, b"") + e.data
            c.acknowledge_received_data(e.flow_controlled_length,
                                        e.stream_id)
        elif isinstance(e, h2.events.StreamEnded):
            ended.add(e.stream_id)
    s.sendall(c.data_to_send())
    if ended >= set(ids):
        break
    data = s.recv(65536)
    if not data:
        break
good = sum(1 for i in ids if status.get(i) == b"200"
           and body.get(i) == b"Hello, World!")
sid = c.get_next_available_stream_id()
c.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                     (":authority", "127.0.0.1"), (":path", "/plaintext"),
                     ("content-length", "100")])
c.reset_stream(sid, error_code=8)  # CANCEL
s.sendall(c.data_to_send())
print("OK %d" % good, flush=True)
sys.stdin.readline()
s.sendall(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00")  # DATA on stream 0
code = None
try:
    for _ in range(1000):
        data = s.recv(65536)
        if not data:
            break
        try:
            evs = c.receive_data(data)
        except Exception:
            break
        for e in evs:
            if isinstance(e, h2.events.ConnectionTerminated):
                code = int(e.error_code)
        if code is not None:
            break
except OSError:
    pass
print("GOAWAY %s" % code, flush=True)
PY

SKIP: {
    skip 'no /usr/bin/python3', 12 unless -x '/usr/bin/python3';
    FastdTest::spew("$dir/h2client.py", $PY);
    my $pid = open2(my $out, my $in, '/usr/bin/python3', "$dir/h2client.py",
                    $port, $N);
    my $line = '';
    {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 30;
        $line = eval { <$out> } // '';
        alarm 0;
    }
    chomp $line;
    if ($line ne '' && $line !~ /^OK/) {
        close $in;
        waitpid($pid, 0);
        skip 'python3 cannot import h2 (apt-get install python3-h2)', 12
            if $line eq 'NOLIB';
        skip 'this fastd does not speak HTTP/2 yet (HTTP/1.1 answered the '
             . 'preface)', 12 if $line eq 'NOH2';
    }
    is($line, "OK $N", "$N streams on one h2c connection answered");

    # counters are written as streams end: poll
    my $open = FastdTest::wait_for(sub {
        my $s = status();
        return $s && ($s->{http2}{streams} // 0) >= $N
               && ($s->{http2}{resets} // 0) >= 1 ? $s : undef;
    }, 10) // status() // {};
    my $h = $open->{http2} || {};
    cmp_ok($h->{connections} // 0, '>=', 1, 'http2.connections counts it');
    is($h->{active} // 0, 1, 'http2.active: the connection held open');
    cmp_ok($h->{streams} // 0, '>=', $N, "http2.streams >= $N");
    cmp_ok($h->{resets} // 0, '>=', 1, 'http2.resets: the stream reset');
    my ($wk) = grep { $_->{alive} } @{ $open->{workers} || [] };
    is(($wk && $wk->{http2}{active}) // 0, 1, 'and in the worker');

    print $in "goaway\n";
    close $in;
    my $g = '';
    {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 30;
        $g = eval { <$out> } // '';
        alarm 0;
    }
    waitpid($pid, 0);
    chomp $g;
    is($g, 'GOAWAY 1', 'DATA on stream 0: GOAWAY PROTOCOL_ERROR');

    my $after = FastdTest::wait_for(sub {
        my $s = status();
        return $s && ($s->{http2}{active} // 1) == 0 ? $s : undef;
    }, 10) // status() // {};
    $h = $after->{http2} || {};
    is($h->{active} // -1, 0, 'http2.active back to 0');
    $r = $t->get('/status?format=prometheus');
    $prom = $r ? $r->body : '';
    my ($pc) = $prom =~ /^fastd_http2_streams_total (\d+)$/m;
    cmp_ok($pc // 0, '>=', $N, 'Prometheus: the streams');
    # a GOAWAY nghttp2 sends by itself (this connection error) counts
    cmp_ok($h->{goaways} // 0, '>=', 1, 'http2.goaways counts it');
    my ($pg) = $prom =~ /^fastd_http2_goaways_total (\d+)$/m;
    cmp_ok($pg // 0, '>=', 1, 'Prometheus: the GOAWAY');
    like($prom, qr/^fastd_http2_active_connections 0$/m,
         'Prometheus: no open HTTP/2 connection');
}

$t->no_alerts;
done_testing();
