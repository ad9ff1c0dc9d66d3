#!/usr/bin/perl
# TLS configuration: fastd -t accepts a good ssl server and names file:line
# for a missing certificate, a key that does not match its certificate, a
# refused or unknown protocol, and ssl and plain servers on one address; a
# reload whose certificate went bad keeps the old configuration serving
# and logs the file:line. (The TLS traffic tests are tests/tls*.t.)

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new(conf => FastdTest::base_conf());
my $dir = $t->dir;

FastdTest::self_signed("$dir/$_", $_) for qw(a b);

sub ssl_conf {
    my (%o) = @_;
    my $extra = $o{extra} // '';
    return FastdTest::base_conf(server => {
        listen => "127.0.0.1:%%PORT%% ssl",
        ssl_certificate => $o{cert} // "$dir/a.crt",
        ssl_certificate_key => $o{key} // "$dir/a.key",
        %{ $o{server} || {} },
    }, extra => $extra);
}

{
    my $file = $t->write_conf(ssl_conf(), 'good.conf');
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    is($rc, 0, 'an ssl server: -t exits 0') or diag($out);
    like($out, qr/test is successful/, 'an ssl server: test is successful');
}

sub bad_conf {
    my ($name, $text, $mark, $also) = @_;
    my $file = $t->write_conf($text, 'bad.conf');
    my $line = FastdTest::line_of($t->subst($text), $mark);
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $file);
    is($rc, 1, "$name: -t exits 1");
    like($out, qr/\Q$file\E:$line: /, "$name: names $file:$line") or diag($out);
    like($out, $also, "$name: says why") or diag($out);
}

bad_conf('a missing certificate', ssl_conf(cert => "$dir/none.crt"),
         qr/^ssl_certificate = .*none\.crt/, qr/No such file or directory/);
bad_conf('a key that does not match', ssl_conf(key => "$dir/b.key"),
         qr/^ssl_certificate_key = .*b\.key/, qr/does not match/);
bad_conf('TLSv1.1', ssl_conf(server => { ssl_protocols => 'TLSv1.1 TLSv1.2' }),
         qr/^ssl_protocols/, qr/TLSv1\.1 is not supported/);
bad_conf('an unknown protocol', ssl_conf(server => { ssl_protocols => 'TLSv2' }),
         qr/^ssl_protocols/, qr/unknown protocol "TLSv2"/);
bad_conf('ssl and plain on one address',
         ssl_conf(extra => "[server]\nserver_name = other\n"
                         . "listen = 127.0.0.1:%%PORT%%\n"),
         qr/^listen = 127\.0\.0\.1:\d+$/, qr/without ssl/);

# --- a reload with a bad certificate keeps the old configuration ---------------
{
    my $r = FastdTest->new(conf => ssl_conf());
    $r->start;
    my @before = $r->workers;
    my $conf = $r->conf_file;
    my $line = FastdTest::line_of($r->subst(ssl_conf()), qr/^ssl_certificate_key/);
    FastdTest::spew("$dir/a.key", FastdTest::slurp("$dir/b.key"));
    $r->signal('HUP');
    ok(FastdTest::wait_for(sub { $r->error_log =~ /reload failed/ }),
       'a reload with a mismatched key fails');
    like($r->error_log, qr/reload failed, the old configuration keeps serving: \Q$conf\E:$line: .*does not match/,
         'and logs the file:line');
    ok($r->running, 'the master still runs');
    my @w = $r->workers;
    is("@w", "@before", 'the old worker keeps serving');
    $r->stop;
    unlike($r->error_log, qr/\[(?:alert|crit|emerg)\]/, 'no alerts');
}

done_testing();
