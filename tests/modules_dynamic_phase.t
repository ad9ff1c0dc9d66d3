#!/usr/bin/perl
# The tree's phase modules, its database and its response filter, moved
# onto the public API (API 1.4: scripts and rerouting for rewrite,
# sections for queue and database, a log's files for access_log, response
# and body filters for gzip), build as shared objects too: ./configure
# --with-rewrite=dynamic --with-queue=dynamic --with-access_log=dynamic
# --with-database=dynamic --with-gzip=dynamic (in a copy of the tree)
# builds objs/fd_NAME.so for each and links none of them in. That fastd
# refuses their keys and sections alone, and with load_module of the five
# it rewrites (a redirect, an internal rewrite with a capture, a return
# with a variable), queues (a queue's figures in /status; a full queue
# answers reject_status with Retry-After), compresses (gzip, and brotli
# for a client that prefers it), logs each request as a json line, and
# makes an SQLite database's file with its statement checked.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use Test::More;

FastdTest::skip_in_sanitizer_stage('it builds a plain fastd of its own');

my $t = FastdTest->new;
my $dir = $t->dir;
my @mods = qw(rewrite queue access_log database gzip);
my $src = ApiModule::dynamic_tree($dir, @mods);
local $FastdTest::BIN = "$src/objs/fastd";

my $logs = "$dir/logs";
mkdir $logs or die "mkdir $logs: $!";
sub conf {
    my ($load) = @_;
    my $text = FastdTest::main_section();
    $text .= "load_module = $src/objs/fd_$_.so\n" for $load ? @mods : ();
    $text .= "\n[queue one]\nmax_concurrent = 1\nqueue_limit = 0\n"
           . "reject_status = 429\nretry_after = 2s\n"
           . "\n[database lite]\nurl = sqlite:$dir/db/lite.db\n"
           . "prepare = one SELECT 1\n"
           . "\n[http]\naccess_log = $logs/access.log format=json\n"
           . "\n[server]\nlisten = 127.0.0.1:%%PORT%%\nroot = %%HTML%%\n"
           . "\n[location /plaintext]\nhandler = plaintext\n"
           . "\n[location /status]\nhandler = status\n"
           . "\n[location /old/]\nrewrite = ^/old/(.*)\$ /new/\$1 permanent\n"
           . "\n[location /in/]\nrewrite = ^/in/(plain)text\$ /\$1text last\n"
           . "\n[location /t]\nreturn = 200 \"x=\$arg_x\"\n"
           . "\n[location /z]\ngzip = on\nbrotli = on\n"
           . "return = 200 \"" . ('word ' x 100) . "\"\n"
           . "\n[location /q]\nqueue = one\nhandler = delay\ndelay = 2s\n";
    return $text;
}

# without load_module: their keys and sections are unknown
$t->write_conf(conf(0));
my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
isnt($rc, 0, 'without load_module: -t fails');
like($o, qr/unknown|no module/i, '... on a key or section of theirs') or diag($o);

$t->write_conf(conf(1));
($rc, $o) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
is($rc, 0, 'with load_module of the five: -t passes') or diag($o);
ok(!-e "$dir/db/lite.db", '... and -t makes no database file');
$t->start;
ok(-f "$dir/db/lite.db", 'at start the SQLite file is made');

my $r = $t->get('/old/a%20b?k=v');
is($r->status, 301, 'rewrite ... permanent: 301');
is($r->header('location'), '/new/a%20b?k=v',
   '... Location with the capture escaped and the arguments kept');
$r = $t->get('/in/plaintext');
is($r->status . ' ' . $r->body, '200 Hello, World!',
   'rewrite ... last: routed to /plaintext');
$r = $t->get('/t?x=42');
is($r->status . ' ' . $r->body, '200 x=42', 'return with $arg_x');

$r = $t->get('/z', 'Accept-Encoding' => 'gzip');
is($r->header('content-encoding'), 'gzip', 'gzip: Content-Encoding: gzip');
is(FastdTest::unzip($r->body), 'word ' x 100, '... which unzips to the body');
like($r->header('vary') // '', qr/Accept-Encoding/, '... with Vary');
$r = $t->get('/z', 'Accept-Encoding' => 'gzip, br');
is($r->header('content-encoding'), 'br', 'brotli for a client that takes br');
$r = $t->get('/z');
ok(!defined $r->header('content-encoding') && $r->body eq 'word ' x 100,
   'none for a client that takes neither');

# the queue: one slot, no waiting place; the second is refused
my $c = $t->connect;
$c->send("GET /q HTTP/1.1\r\nHost: x\r\n\r\n");
ok($t->wait_queue('one', sub { $_[0]{active} == 1 }),
   'a request holds the queue\'s slot (its figures in /status)');
$r = $t->get('/q');
is($r->status, 429, 'the next is refused with reject_status');
is($r->header('retry-after'), '2', '... and Retry-After');
my $first = $c->read_response(timeout => 10);
is($first && $first->status, 200, 'the first is answered');
$c->close;

$t->stop;
my @lines = split /\n/, FastdTest::slurp("$logs/access.log") // '';
my @json = grep { /^\{"remote_addr":"127\.0\.0\.1",.*"status":\d+,/ } @lines;
cmp_ok(scalar @json, '>=', 8, 'each request is a json line in the access log')
    or diag(join "\n", @lines);
ok((grep { m{"request":"GET /old/a%20b\?k=v HTTP/1\.1","status":301} } @lines),
   '... the redirect\'s among them');
$t->no_alerts;
done_testing;
