#!/usr/bin/perl
# API 1.5 from shared objects: limit_conn and limit_req, moved onto the
# public API (shared memory every worker maps, its spin lock, keys hashed
# with a random key, a script's whole value, a repeatable key whose
# nearest lines replace the others', enums, figures folded by name, a
# request counted once), build with ./configure --with-limit_conn=dynamic
# --with-limit_req=dynamic (in a copy of the tree) as objs/fd_NAME.so,
# linked in no more. fastd refuses their keys alone; with load_module they
# limit as the built-in ones do, across two workers (one table they
# share), and limit_conn keeps its table, and its counts, across a
# reload.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use ApiModule;
use IO::Socket::INET;
use Test::More;

FastdTest::skip_in_sanitizer_stage('it builds a plain fastd of its own');

my $t = FastdTest->new;
my $dir = $t->dir;
my @mods = qw(limit_conn limit_req);
my $src = ApiModule::dynamic_tree($dir, @mods);
local $FastdTest::BIN = "$src/objs/fastd";

sub conf {
    my ($load) = @_;
    (my $text = FastdTest::main_section()) =~ s/^workers = 1$/workers = 2/m;
    $text .= "load_module = $src/objs/fd_$_.so\n" for $load ? @mods : ();
    $text .= "\n[limit_conn addr]\nsize = 64k\n"
           . "\n[limit_req one]\nrate = 1r/m\non_error = deny\n"
           . "\n[http]\nlimit_conn = addr 5\n"
           . "\n[server]\nlisten = 127.0.0.1:%%PORT%%\nroot = %%HTML%%\n"
           . "add_header = X-LC \$limit_conn_status always\n"
           . "\n[location /plaintext]\nhandler = plaintext\n"
           . "\n[location /status]\nhandler = status\nlimit_conn = off\n"
           . "\n[location /slow]\nlimit_conn = addr 1\nhandler = delay\n"
           . "delay = 1500ms\n"
           . "\n[location /one]\nlimit_req = one\nhandler = plaintext\n";
    return $text;
}

$t->write_conf(conf(0));
my ($rc, $o) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
isnt($rc, 0, 'without load_module: -t fails');
like($o, qr/unknown|no module/i, '... on a key or section of theirs')
    or diag($o);

$t->write_conf(conf(1));
($rc, $o) = FastdTest::run_fastd('-t', '-c', $t->conf_file);
is($rc, 0, 'with load_module: -t passes') or diag($o);
$t->start;

# n requests to path at once, each on its own connection: their statuses
sub at_once {
    my ($n, $path) = @_;
    my @s = map {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $t->port) or die "connect: $!";
        print $s "GET $path HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        $s
    } 1 .. $n;
    my @st;
    for my $s (@s) {
        local $/;
        my $resp = <$s> // '';
        push @st, $resp =~ m{^HTTP/1\.1 (\d+)} ? $1 : 0;
    }
    return join ',', sort @st;
}

is(at_once(3, '/slow'), '200,503,503',
   'limit_conn = addr 1 (the [location]\'s line replaces [http]\'s): one in progress, two refused');
my $r = $t->get('/plaintext');
is($r->status . ' ' . ($r->header('x-lc') // ''), '200 PASSED',
   '[http]\'s limit_conn = addr 5 elsewhere, $limit_conn_status');
$r = $t->get('/status?format=prometheus');
like($r->body, qr/^fastd_limit_conn_rejected_total\{zone="addr"\} 2$/m,
     'its figures in /status, summed over the workers') or diag($r->body);

is(join(',', map { $t->get('/one')->status } 1 .. 3), '200,503,503',
   'limit_req = one at 1r/m: one passes, the next are rejected');
like($t->get('/status?format=prometheus')->body,
     qr/^fastd_limit_req_rejected_total\{zone="one"\} 2$/m,
     '... and counted');

# a request in progress across a reload: still counted by the new workers
my $held = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $t->port)
    or die "connect: $!";
print $held "GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
select(undef, undef, undef, 0.3);
my %old = map { $_ => 1 } $t->workers;
$t->signal('HUP');
ok(FastdTest::wait_for(sub { (grep { !$old{$_} } $t->workers) == 2 }, 15),
   'reload: two new workers');
is(at_once(1, '/slow'), '503', 'after a reload the table and its count are kept');
{
    local $/;
    my $resp = <$held> // '';
    like($resp, qr{^HTTP/1\.1 200}, 'the request held across it is answered');
}
is(at_once(1, '/slow'), '200', '... and gave its count back');

$t->stop;
$t->no_alerts;
done_testing;
