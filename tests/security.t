#!/usr/bin/perl
# Security basics (issue 7): nothing a client sends can become a response
# header or a raw log line, a configuration value cannot carry CR/LF into
# a response, and the version is not announced. (Workers running as
# `user`: tests/user.t; framing: tests/conformance.t, tests/smuggling.t.)

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

# --- configuration values with control characters ---------------------------
for my $case (["server_header = fa\rstd", 'CR in a value', qr/:5: control character 0x0d in "server_header"/],
              ["server_header = a\x01b", 'a control byte in a value', qr/:5: control character 0x01/],
              ["[location /a\x01b]", 'a control byte in a section header',
               qr/:5: control character 0x01 in the section header/]) {
    my ($line, $name, $want) = @$case;
    my $u = FastdTest->new(conf => "[main]\ndaemon = off\npid = off\n[http]\n$line\n"
                                 . "[server]\nlisten = 127.0.0.1:1\n");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $u->conf_file);
    is($rc, 1, "$name: the configuration is refused");
    like($out, $want, "$name: the error names file:line");
}
{
    # CRLF line ends are not control characters in a value
    my $u = FastdTest->new(conf => "[main]\r\ndaemon = off\r\npid = off\r\n[http]\r\n"
                                 . "server_header = crlf\r\n[server]\r\nlisten = 127.0.0.1:1\r\n");
    my ($rc, $out) = FastdTest::run_fastd('-t', '-c', $u->conf_file);
    is($rc, 0, 'a file with CRLF line ends loads') or diag($out);
}

# --- server_tokens: on (the default, as nginx) announces the version --------
{
    my $v = FastdTest->new(conf => FastdTest::base_conf());
    $v->start;
    my $r = $v->get('/plaintext');
    like($r->header('server'), qr{^fastd/\d+\.\d+\.\d+$}, 'server_tokens on: Server: fastd/VERSION');
    my $e = $v->get('/missing-page');
    like($e->{body}, qr{<center>fastd/\d+\.\d+\.\d+</center>}, '... and error pages carry it');
    $v->stop;
}

my $t = FastdTest->new(conf => FastdTest::base_conf(
    http => { server_tokens => 'off' },
    locations => "[location /r/]\nreturn = 302 http://example.com\$uri\n\n",
));
$t->start;

# --- server_tokens = off: the version is not announced ---------------------
{
    my $r = $t->get('/plaintext');
    is($r->header('server'), 'fastd', 'server_tokens off: Server: fastd, without a version');
    my $e = $t->get('/missing-page');
    is($e->status, 404, '... a missing page is 404');
    unlike($e->{body}, qr/\d+\.\d+\.\d+/, '... and error pages carry no version');
}

# --- request data cannot become a header ---------------------------------------
{
    my $raw = $t->raw("GET /r/a%0d%0aSet-Cookie:%20evil=1 HTTP/1.1\r\nHost: x\r\n\r\n",
                      timeout => 3, responses => 1);
    my ($head) = split /\r\n\r\n/, $raw, 2;
    unlike($head, qr/^Set-Cookie/mi, 'a decoded %0d%0a in the path does not start a header');
    like($head, qr/^Location: \S+$/m, '... the Location is one line');
}
for my $v ("a\rb", "a\nb", "a\0b") {
    my ($raw, $eof) = $t->raw("GET /plaintext HTTP/1.1\r\nHost: x\r\nX-A: $v\r\n\r\n", timeout => 3);
    like($raw, qr{^HTTP/1\.1 400 }, 'a header value with ' . sprintf('0x%02x', ord substr($v, 1, 1))
                                     . ': 400');
}

$t->stop;
$t->no_alerts;
done_testing;
