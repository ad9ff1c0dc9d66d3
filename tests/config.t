#!/usr/bin/perl
# fastd -t: success message, file:line for every kind of error (range
# checks, overflowing values, module checks made after the key was read),
# include, profiles (every one is checked), repeated keys, the renamed
# Server header key, and "did you mean" for unknown names.

use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use FastdTest;
use Test::More;

my $t = FastdTest->new(conf => FastdTest::base_conf());
my $dir = $t->dir;

sub conf_test {
    my ($file, @extra) = @_;
    return FastdTest::run_fastd('-t', '-c', $file, @extra);
}

# --- a valid file ------------------------------------------------------------
{
    my $file = $t->conf_file;
    my ($rc, $out) = conf_test($file);
    is($rc, 0, '-t on a valid file exits 0') or diag($out);
    like($out, qr/configuration file \Q$file\E test is successful/,
         '-t prints "configuration file FILE test is successful"');
    ok(!-e $t->pid_file, '-t does not write the pid file');
    ok(!$t->port_open, '-t does not start a server');
}

# --- errors with file:line ----------------------------------------------------
sub bad_conf {
    my ($name, $text, $mark, %o) = @_;
    my $file = $t->write_conf($text, 'bad.conf');
    my $line = FastdTest::line_of($t->subst($text), $mark);
    my ($rc, $out) = conf_test($file, @{ $o{args} || [] });
    is($rc, 1, "$name: -t exits 1");
    like($out, qr/\Q$file\E:$line\b/, "$name: names $file:$line")
        or diag($out);
    like($out, $o{also}, "$name: message mentions it") if $o{also};
    unlike($out, qr/test is successful/, "$name: no success message");
}

bad_conf('unknown key in [http]',
    FastdTest::base_conf(http => { no_such_key => 1 }),
    qr/^no_such_key/, also => qr/no_such_key/);
bad_conf('unknown key in [main]',
    FastdTest::base_conf(main => { bogus => 'yes' }),
    qr/^bogus/, also => qr/bogus/);
bad_conf('unknown key in a location',
    FastdTest::base_conf(locations => "[location /x]\nhandler = plaintext\nfrobnicate = 3\n"),
    qr/^frobnicate/, also => qr/frobnicate/);
bad_conf('unknown section',
    FastdTest::base_conf(extra => "\n[nosuch]\nkey = value\n"),
    qr/^\[nosuch\]/, also => qr/nosuch/);
bad_conf('unknown section without keys',
    FastdTest::base_conf(extra => "\n[nosuch2]\n"),
    qr/^\[nosuch2\]/, also => qr/nosuch2/);
bad_conf('keepalive_timeout = abc',
    FastdTest::base_conf(http => { keepalive_timeout => 'abc' }),
    qr/^keepalive_timeout/, also => qr/keepalive_timeout|abc/);
bad_conf('workers = -3',
    FastdTest::base_conf(main => { workers => -3 }),
    qr/^workers/, also => qr/workers|-3/);
bad_conf('edge_triggered = maybe',
    FastdTest::base_conf(events => { edge_triggered => 'maybe' }),
    qr/^edge_triggered/, also => qr/edge_triggered|maybe/);
bad_conf('max_header_size = 12q',
    FastdTest::base_conf(http => { max_header_size => '12q' }),
    qr/^max_header_size/);
bad_conf('server_header of 257 bytes',
    FastdTest::base_conf(http => { server_header => 'x' x 257 }),
    qr/^server_header/, also => qr/"server_header" is longer than 256 bytes/);
bad_conf('max_header_size = 100 (below its range)',
    FastdTest::base_conf(http => { max_header_size => '100' }),
    qr/^max_header_size/, also => qr/"max_header_size" must be 256 \.\. 1m/);
bad_conf('max_header_size = 2m (above its range)',
    FastdTest::base_conf(http => { max_header_size => '2m' }),
    qr/^max_header_size/);
bad_conf('open_file_cache = 70000 in [server]',
    FastdTest::base_conf(server => { open_file_cache => 70000 }),
    qr/^open_file_cache/, also => qr/open_file_cache.*65536/);
bad_conf('open_file_cache = 70000 in a location (the key\'s line, not the header)',
    FastdTest::base_conf(locations => "[location /x]\n\nopen_file_cache = 70000\n"),
    qr/^open_file_cache/);
bad_conf('max_ranges = 65 in a location (the key\'s line, not the header)',
    FastdTest::base_conf(locations => "[location /x]\n\nmax_ranges = 65\n"),
    qr/^max_ranges/, also => qr/"max_ranges" is at most 64/);
bad_conf('mime_types that cannot be read, in [server] (checked after the key)',
    FastdTest::base_conf(server => { mime_types => '/nonexistent/mime.types' }),
    qr/^mime_types/, also => qr/cannot read mime_types/);
bad_conf('mime_types that cannot be read, in a location: the key\'s line',
    FastdTest::base_conf(locations => "[location /x]\n\nmime_types = /nonexistent/m\n"),
    qr/^mime_types/, also => qr/cannot read mime_types/);
bad_conf('a duration that overflows',
    FastdTest::base_conf(http => { keepalive_timeout =>
        '4611686018427387s4611686018427387s4611686018427387s' }),
    qr/^keepalive_timeout/, also => qr/needs a duration/);
bad_conf('a duration over the bound (two parts)',
    FastdTest::base_conf(http => { keepalive_timeout =>
        '4611686018427387s4611686018427387s' }),
    qr/^keepalive_timeout/);
bad_conf('a size that overflows',
    FastdTest::base_conf(http => { max_body_size => '99999999999999999999k' }),
    qr/^max_body_size/);
bad_conf('listen port with a sign',
    FastdTest::base_conf(server => { listen => '127.0.0.1:+%%PORT%%' }),
    qr/^listen/, also => qr/bad listen address/);
bad_conf('workers = +2',
    FastdTest::base_conf(main => { workers => '+2' }),
    qr/^workers/);
if (FastdTest::access_log_supported()) {
    bad_conf('access_log with an unknown format in [server]',
        FastdTest::base_conf(server => { access_log => '%%DIR%%/a.log format=nosuch' }),
        qr/^access_log = .*nosuch/, also => qr/unknown log_format "nosuch"/);
    bad_conf('access_log with an unknown format in a location',
        FastdTest::base_conf(locations => "[location /x]\nhandler = plaintext\n\n"
                                        . "access_log = %%DIR%%/a.log format=nosuch\n"),
        qr/^access_log = .*nosuch/, also => qr/unknown log_format "nosuch"/);
}
bad_conf('[http] server_name: the old name of the Server header key',
    FastdTest::base_conf(http => { server_name => 'fastd' }),
    qr/^server_name/, also => qr/use "server_header"/);
bad_conf('send_timeout in a location: the old proxy key',
    FastdTest::base_conf(locations => "[location /x]\nhandler = proxy\n"
                                    . "send_timeout = 1s\n"),
    qr/^send_timeout/, also => qr/use "proxy_send_timeout"/);
bad_conf('unknown handler, one letter off',
    FastdTest::base_conf(locations => "[location /x]\nhandler = plaintxt\n"),
    qr/^handler = plaintxt/, also => qr/did you mean "plaintext"\?/);
bad_conf('unknown key, two letters swapped',
    FastdTest::base_conf(locations => "[location /x]\nhanlder = plaintext\n"),
    qr/^hanlder/, also => qr/did you mean "handler"\?/);
bad_conf('unknown [http] key, a letter missing',
    FastdTest::base_conf(http => { keepalive_timout => '5s' }),
    qr/^keepalive_timout/, also => qr/did you mean "keepalive_timeout"\?/);
bad_conf('a [server] key in a location',
    FastdTest::base_conf(locations => "[location /x]\nserver_name = a.example\n"),
    qr/^server_name = a/, also => qr/belongs in \[server\]/);
bad_conf('an unknown section, misspelt',
    FastdTest::base_conf(extra => "\n[sever]\nlisten = 1\n"),
    qr/^\[sever\]/, also => qr/did you mean \[server\]\?/);
bad_conf('listen ADDR:PORT without "=" (inih splits at the colon)',
    FastdTest::base_conf(server => { listen => undef },
                         extra => "") =~ s/^\[server\]\n/[server]\nlisten 127.0.0.1:%%PORT%%\n/mr,
    qr/^listen 127/, also => qr/unknown key "listen 127\.0\.0\.1" in \[server\]: missing "=" after "listen"\?/);
bad_conf('root DIR without "=" (no delimiter at all)',
    FastdTest::base_conf(locations => "[location /x]\nroot %%DIR%%\n"),
    qr/^root \//, also => qr/syntax error .*; missing "=" after "root"\?/);
bad_conf('[stream] without a name',
    FastdTest::base_conf(extra => "\n[stream]\nlisten = 1\n"),
    qr/^\[stream\]/, also => qr/\[stream\] needs a name: \[stream NAME\]/);
# a [stream]'s TLS terms: each error at its own key's line
for my $c (['ssl_protocols = TLSv9', qr/unknown protocol "TLSv9"/],
           ['ssl_ciphers = NO-SUCH-CIPHER', qr/selects no cipher/],
           ['ssl_certificate = %%DIR%%/none.pem', qr/\[stream s\]: .*none\.pem/]) {
    my ($line, $re) = @$c;
    my $key = (split / /, $line)[0];
    my %keys = (ssl_certificate => '%%DIR%%/c.pem',
                ssl_certificate_key => '%%DIR%%/k.pem',
                ssl_protocols => 'TLSv1.2 TLSv1.3', $key => undef);
    my $extra = "\n[stream s]\nlisten = 127.0.0.1:%%PORT2%% ssl\n"
        . join('', map { defined $keys{$_} ? "$_ = $keys{$_}\n" : '' }
                       sort keys %keys)
        . "$line\npass = 127.0.0.1:9\n";
    bad_conf("[stream] $key: at its line",
             FastdTest::base_conf(extra => $extra),
             qr/^\Q$key\E = (?:TLSv9|NO-|.*none)/,
             also => $re);
}
bad_conf('limit_conn_zone (nginx): points to [limit_conn NAME]',
    FastdTest::base_conf(locations => "[location /x]\nlimit_conn_zone = addr 10\n"),
    qr/^limit_conn_zone/, also => qr/unknown key "limit_conn_zone" in \[location \/x\]: fastd's is a \[limit_conn NAME\] section/);
bad_conf('a bad key after a 900-byte line (line numbers stay right)',
    FastdTest::base_conf(server => { server_name => join(' ', map { "h$_.example" } 1 .. 80),
                                     zzz_bogus => 1 }),
    qr/^zzz_bogus/, also => qr/zzz_bogus/);
bad_conf('accept = sideways',
    FastdTest::base_conf(events => { accept => 'sideways' }),
    qr/^accept/);
bad_conf('unknown handler',
    FastdTest::base_conf(locations => "[location /x]\nhandler = nosuchhandler\n"),
    qr/^handler = nosuchhandler/, also => qr/nosuchhandler/);

# an error in an included file names that file and its line
{
    my $inc = $t->write_file('inc-bad.conf',
        "; included\n[http]\nkeepalive_timeout = 5s\nnot_a_key = 1\n");
    my $text = FastdTest::base_conf(main => { include => $inc });
    my $file = $t->write_conf($text, 'main-inc.conf');
    my ($rc, $out) = conf_test($file);
    is($rc, 1, 'include with an error: exits 1');
    like($out, qr/\Q$inc\E:4\b/, 'include with an error: names the included file:line')
        or diag($out);
}
{
    my $inc = $t->write_file('inc-good.conf', "[http]\nkeepalive_timeout = 5s\n");
    my $file = $t->write_conf(FastdTest::base_conf(main => { include => $inc }),
                              'main-inc-good.conf');
    my ($rc, $out) = conf_test($file);
    is($rc, 0, 'a valid include is accepted') or diag($out);
}
{
    mkdir "$dir/conf.d";
    FastdTest::spew("$dir/conf.d/a.conf", "[http]\nkeepalive_requests = 10\n");
    FastdTest::spew("$dir/conf.d/b.conf", "[events]\n\nbad_events_key = 1\n");
    my $file = $t->write_conf(FastdTest::base_conf(main => { include => "$dir/conf.d/*.conf" }),
                              'main-glob.conf');
    my ($rc, $out) = conf_test($file);
    is($rc, 1, 'include glob with an error in the 2nd file: exits 1');
    like($out, qr/\Q$dir\E\/conf\.d\/b\.conf:3\b/, '... names conf.d/b.conf:3')
        or diag($out);
    unlink "$dir/conf.d/b.conf";
    ($rc, $out) = conf_test($file);
    is($rc, 0, 'include glob of valid files is accepted') or diag($out);
}

# --- profiles -------------------------------------------------------------------
{
    my $text = FastdTest::base_conf(extra =>
        "\n[profile bench]\nevents.read_until_eagain = off\nhttp.keepalive_requests = 5\n"
      . "\n[profile broken]\nevents.no_such_key = 1\n");
    my $file = $t->write_conf($text, 'prof.conf');
    my $okfile = $t->write_conf(FastdTest::base_conf(extra =>
        "\n[profile bench]\nevents.read_until_eagain = off\n"
      . "http.keepalive_requests = 5\n"), 'prof-ok.conf');
    my ($rc, $out) = conf_test($okfile, '-p', 'bench');
    is($rc, 0, '-p bench: accepted') or diag($out);
    like($out, qr/test is successful/, '-p bench: success message');
    ($rc, $out) = conf_test($okfile);
    is($rc, 0, 'no -p: the same file is accepted') or diag($out);
    ($rc, $out) = conf_test($file, '-p', 'nosuch');
    is($rc, 1, '-p nosuch: fails');
    like($out, qr/nosuch/, '-p nosuch: the message names the profile') or diag($out);
    my $line = FastdTest::line_of($t->subst($text), qr/^events\.no_such_key/);
    ($rc, $out) = conf_test($file, '-p', 'broken');
    is($rc, 1, '-p broken (bad key in the profile): fails');
    like($out, qr/\Q$file\E:$line\b/, "-p broken: names $file:$line") or diag($out);
    ($rc, $out) = conf_test($file);
    is($rc, 1, 'no profile selected: -t still checks [profile broken]');
    like($out, qr/\Q$file\E:$line\b.*\[profile broken\]/,
         "... naming $file:$line and the profile") or diag($out);
    ($rc, $out) = conf_test($file, '-p', 'bench');
    is($rc, 1, '-p bench: -t checks the other profiles too');
    like($out, qr/\Q$file\E:$line\b/, "... naming $file:$line") or diag($out);

    # an error a profile brings into a section it extends (a value, not a
    # key name) is found as well
    my $text4 = FastdTest::base_conf(extra =>
        "\n[profile fast]\nhttp.keepalive_timeout = 5s\n"
      . "\n[profile slow]\nhttp.max_header_size = 64\n");
    my $file4 = $t->write_conf($text4, 'prof4.conf');
    my $line4 = FastdTest::line_of($t->subst($text4), qr/^http\.max_header_size/);
    ($rc, $out) = conf_test($file4);
    is($rc, 1, 'a bad value in an unselected profile: -t fails');
    like($out, qr/\Q$file4\E:$line4\b/, "... naming $file4:$line4") or diag($out);
    my $text5 = FastdTest::base_conf(extra =>
        "\n[profile fast]\nhttp.keepalive_timeout = 5s\n"
      . "\n[profile slow]\nhttp.keepalive_timeout = 90s\n");
    ($rc, $out) = conf_test($t->write_conf($text5, 'prof5.conf'));
    is($rc, 0, 'every profile valid: -t passes') or diag($out);

    my $text2 = FastdTest::base_conf(main => { profile => 'bench' }, extra =>
        "\n[profile bench]\nevents.read_until_eagain = off\n");
    my $file2 = $t->write_conf($text2, 'prof2.conf');
    ($rc, $out) = conf_test($file2);
    is($rc, 0, 'profile = bench in [main]: accepted') or diag($out);
    my $text3 = FastdTest::base_conf(main => { profile => 'missing' });
    my $file3 = $t->write_conf($text3, 'prof3.conf');
    ($rc, $out) = conf_test($file3);
    is($rc, 1, 'profile = missing in [main]: fails');
    like($out, qr/missing/, '... naming the profile');
}

# --- repeated keys are lists ------------------------------------------------------
{
    mkdir "$dir/www";
    FastdTest::spew("$dir/www/b.html", "<p>second index</p>\n");
    my $text = FastdTest::base_conf(server => {
        root  => '%%DIR%%/www',
        index => [ 'a.html', 'b.html' ],
    });
    like($text, qr/index = a\.html\nindex = b\.html/, 'the config repeats index');
    $t->write_conf($text);
    my ($rc, $out) = conf_test($t->conf_file);
    is($rc, 0, 'repeated index key accepted') or diag($out);
    $t->start;
    my $r = $t->get('/');
    is($r && $r->{status}, 200, 'GET / with index = a.html, b.html (only b exists)');
    is($r && $r->{body}, "<p>second index</p>\n", '... serves the second index file');
    $t->stop;
    $t->no_alerts;
}

# --- misc -------------------------------------------------------------------------
{
    my ($rc, $out) = conf_test("$dir/does-not-exist.conf");
    is($rc, 1, '-t on a missing file exits 1');
    like($out, qr/does-not-exist\.conf/, '... naming the file');
    ($rc, $out) = FastdTest::run_fastd('-v');
    is($rc, 0, '-v exits 0');
    like($out, qr/fastd/i, '-v prints the name/version');
}

done_testing;
