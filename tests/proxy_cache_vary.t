#!/usr/bin/perl
# proxy_cache and Vary: one entry per set of values of the fields the
# response varies on, each answered to the requests that send those
# values (in both workers); "Vary: *" is never stored; with
# proxy_ignore_headers = Vary one entry answers everyone.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Backend;
use Test::More;

my $be = Backend->new(handler => sub {
    my ($req, $c) = @_;
    my $p = $req->{path};
    my %h = %{ $req->{headers} };
    my $lang = $h{'x-lang'} // '-';
    my $dev = $h{'x-dev'} // '-';
    my $vary = $p =~ m{^/two/} ? 'X-Lang, X-Dev'
             : $p =~ m{^/star/} ? '*'
             : 'X-Lang';
    return Backend::response(200, "$p lang=$lang dev=$dev #$req->{n}",
                             'Cache-Control' => 'max-age=60',
                             'Vary' => $vary);
});
my $bp = $be->port;

my $t = FastdTest->new(conf => FastdTest::base_conf(
    main => { workers => 2 },
    locations => <<"L",
[location /]
handler = proxy
upstream = be
proxy_cache = one
add_header = X-Cache-Status \$upstream_cache_status always

[location /ignore/]
handler = proxy
pass = http://be/v/
proxy_cache = one
proxy_cache_key = ignore\$request_uri
proxy_ignore_headers = Vary
add_header = X-Cache-Status \$upstream_cache_status always
L
    extra => "[upstream be]\nserver = 127.0.0.1:$bp\nkeepalive = 8\n\n"
           . "[cache one]\npath = %%DIR%%/cache\nkeys_zone = 1m\n\n"));
$t->start;

sub get { my ($p, %h) = @_; return $t->get($p, %h) }
sub cs  { my ($r) = @_; return $r ? ($r->header('x-cache-status') // '') : 'none' }

# ($status, $body) of a request with these headers
sub probe {
    my ($p, %h) = @_;
    my $r = get($p, %h);
    return (cs($r), $r ? $r->body : '');
}

$be->reset_log;
my ($s, $en) = probe('/v/a', 'X-Lang' => 'en');
is($s, 'MISS', 'en: MISS');
like($en, qr/lang=en/, 'en: the en body');
($s, my $fr) = probe('/v/a', 'X-Lang' => 'fr');
is($s, 'MISS', 'fr: a variant of its own, MISS');
like($fr, qr/lang=fr/, 'fr: the fr body');
my $ok = 1;
for (1 .. 10) {
    my ($s1, $b1) = probe('/v/a', 'X-Lang' => 'en');
    my ($s2, $b2) = probe('/v/a', 'X-Lang' => 'fr');
    $ok &&= $s1 eq 'HIT' && $b1 eq $en && $s2 eq 'HIT' && $b2 eq $fr;
}
ok($ok, 'then en and fr are each a HIT of their own, in both workers');
($s, my $none) = probe('/v/a');
is($s, 'MISS', 'no X-Lang at all: a variant too, MISS');
like($none, qr/lang=-/, '... its body');
($s, my $none2) = probe('/v/a');
is($s, 'HIT', '... then a HIT');
is($none2, $none, '... of it');
is($be->requests, 3, 'three variants, three upstream requests');
my @files = glob($t->dir . '/cache/*');
is(scalar(grep { !/\.tmp$/ } @files), 3, 'three files');

# the field's values as sent, in order, joined
{
    my $raw = $t->raw("GET /v/multi HTTP/1.1\r\nHost: localhost\r\n"
                      . "X-Lang: en\r\nX-Lang: de\r\nConnection: close\r\n\r\n");
    like($raw, qr/X-Cache-Status: MISS/, 'two X-Lang lines: MISS');
    $raw = $t->raw("GET /v/multi HTTP/1.1\r\nHost: localhost\r\n"
                   . "X-Lang: en\r\nX-Lang: de\r\nConnection: close\r\n\r\n");
    like($raw, qr/X-Cache-Status: HIT/, '... the same two: HIT');
    ($s) = probe('/v/multi', 'X-Lang' => 'en,de');
    is($s, 'HIT', '... "en,de" in one line is the same value set');
    ($s) = probe('/v/multi', 'X-Lang' => 'en');
    is($s, 'MISS', '... "en" alone is another');
}

# two fields
{
    my %seen;
    for my $l ('en', 'fr') {
        for my $d ('phone', 'desk') {
            my ($s1, $b1) = probe('/two/a', 'X-Lang' => $l, 'X-Dev' => $d);
            $seen{"$l/$d"} = $b1;
            is($s1, 'MISS', "Vary on two fields: $l/$d MISS");
        }
    }
    my $all = 1;
    for my $l ('en', 'fr') {
        for my $d ('phone', 'desk') {
            my ($s1, $b1) = probe('/two/a', 'X-Lang' => $l, 'X-Dev' => $d);
            $all &&= $s1 eq 'HIT' && $b1 eq $seen{"$l/$d"}
                     && $b1 =~ /lang=$l dev=$d/;
        }
    }
    ok($all, '... then each of the four a HIT of its own');
}

# HEAD is answered from its variant's entry
{
    my $r = get('/v/a', method => 'HEAD', 'X-Lang' => 'fr');
    is(cs($r), 'HIT', 'HEAD: a HIT from its variant');
    is($r->header('content-length'), length $fr, '... with its length');
}

# Vary: * is never stored
{
    my ($s1) = probe('/star/a');
    my ($s2) = probe('/star/a');
    is("$s1 $s2", 'MISS MISS', 'Vary: * is never stored');
}

# proxy_ignore_headers = Vary: one entry for everyone
{
    my ($s1, $b1) = probe('/ignore/i', 'X-Lang' => 'en');
    my ($s2, $b2) = probe('/ignore/i', 'X-Lang' => 'fr');
    is("$s1 $s2", 'MISS HIT', 'Vary ignored: one entry');
    is($b2, $b1, '... answering every value');
}

$t->stop;
ok($t->no_alerts, 'no alerts');
done_testing;
