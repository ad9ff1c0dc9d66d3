package Examples;

# conf/examples/NAME.conf as the tests run it: the file as shipped, with
# the few values that name a real machine replaced by the test's own, by
# the table below (and nothing else), so that what is tested is what a user
# copies. Core perl only.
#
#   my $ex = Examples->new('load-balancer',
#       backends => { '10.0.1.11:8080' => $b1->addr, ... });
#   $ex->t (the FastdTest), $ex->dir, $ex->www ("/var/www" here),
#   $ex->port(80) (where the example's port 80 listens), $ex->start
#
# The substitution table, in order:
#   user = ...                 root when the tests run as root (their files
#                                are root's), else dropped
#   workers = auto             1: per-worker figures (round robin, passive
#                              health) are then exact
#   listen = 0.0.0.0:N ...     127.0.0.1:P, a free port for each N (the
#                              first one is the harness's port, which start
#                              waits for); the options after it stay
#   server = ADDR (upstreams)  the test's backend for ADDR (backends =>);
#                              an address the test does not map is an error
#                              once it gives any (-t alone keeps them all)
#   /etc/letsencrypt/live/NAME/fullchain.pem, privkey.pem
#                              a self-signed certificate for NAME and *.NAME
#                              made with openssl in the test's directory (NAME.crt,
#                              NAME.key; curl --cacert NAME.crt trusts it)
#   /var/log/fastd/            DIR/ (error.log where the harness reads it)
#   /var/www/ /var/cache/fastd/ /run/
#                              DIR/www/, DIR/cache/, DIR/run/ (each root =
#                              directory is made, empty: fastd checks roots
#                              at load; a test puts its files there), and
#                              each error_page file, a placeholder page
# fastd runs with -g (the examples leave daemon at its default, on).
# A path under /etc, /var, /run, /srv, /opt, /usr or /home, or an address
# 0.0.0.0 or [::], left after the table is an error: an example that
# names a new one makes the table grow, never the test touch the machine.

use strict;
use warnings;

use File::Path qw(make_path);
use FastdTest;
use TLS ();

our $DIR = FastdTest::root() . '/conf/examples';

# every example's name (NAME of conf/examples/NAME.conf), sorted
sub names {
    opendir my $dh, $DIR or die "opendir $DIR: $!";
    my @n = sort map { /^(.+)\.conf$/ ? $1 : () } readdir $dh;
    closedir $dh;
    return @n;
}

sub text { FastdTest::slurp("$DIR/$_[0].conf") // die "no example $_[0]" }

sub new {
    my ($class, $name, %o) = @_;
    my $t = FastdTest->new;
    my $self = bless { name => $name, t => $t, dir => $t->dir, ports => {} },
        $class;
    my $dir = $self->{dir};
    make_path(map { "$dir/$_" } qw(www cache run/php));
    $self->{conf} = $self->rewrite(text($name), $o{backends});
    my $root = '';
    for (split /\n/, $self->{conf}) {
        $root = '' if /^\[server\]/;
        make_path($root = $1) if /^root\s*=\s*(\S+)/;
        FastdTest::spew("$root$1", "<h1>error page</h1>\n")
            if /^error_page\s*=.*?(\/\S+)\s*$/ && !-e "$root$1";
    }
    $t->write_conf($self->{conf});
    return $self;
}

sub t    { $_[0]{t} }
sub dir  { $_[0]{dir} }
sub conf { $_[0]{conf} }
sub www  { "$_[0]{dir}/www" }
sub port {
    my ($self, $n) = @_;
    return $self->{ports}{$n} // die "the example listens on no port $n";
}

sub rewrite {
    my ($self, $text, $backends) = @_;
    my ($t, $dir) = ($self->{t}, $self->{dir});
    my @free = ($t->port, $t->port2);

    $text =~ s/^user\s*=.*\n//mg;
    if ($> == 0) {
        $text = "[main]\n" . $text unless $text =~ /^\[main\]/m;
        $text =~ s/^\[main\]\n/[main]\nuser = root\n/m;
    }
    $text =~ s/^(workers\s*=\s*)auto\b/${1}1/mg;
    $text =~ s{^(listen\s*=\s*)(?:0\.0\.0\.0|\[::\]):(\d+)}{
        $1 . '127.0.0.1:'
           . ($self->{ports}{$2} //= @free ? shift @free : $t->another_port)
    }mge;
    if ($backends) {
        my $section = '';
        my @lines = split /\n/, $text, -1;
        for (@lines) {
            $section = $1 if /^\[(\S+)/;
            next unless $section eq 'upstream'
                && /^(server\s*=\s*)(\S+)(.*)$/;
            my $to = $backends->{$2}
                // die "$self->{name}: the test maps no backend for $2\n";
            $_ = "$1$to$3";
        }
        $text = join "\n", @lines;
    }
    $text =~ s{/etc/letsencrypt/live/([^/\s]+)/(fullchain|privkey)\.pem}{
        my ($host, $what) = ($1, $2);
        self_signed("$dir/$host", $host) unless -e "$dir/$host.crt";
        "$dir/$host." . ($what eq 'fullchain' ? 'crt' : 'key')
    }ge;
    $text =~ s{/var/log/fastd/}{$dir/}g;
    $text =~ s{/var/www/}{$dir/www/}g;
    $text =~ s{/var/cache/fastd/}{$dir/cache/}g;
    $text =~ s{(?<![\w/.-])/run/}{$dir/run/}g;

    # nothing of the machine's may be left
    for my $l (split /\n/, $text) {
        next if $l =~ /^\s*[;#]/;
        die "$self->{name}: no substitution for: $l\n"
            if $l =~ m{(?<![\w/.-])/(?:etc|var|run|srv|opt|usr|home)/}
            || $l =~ /0\.0\.0\.0|\[::\]/;
    }
    return $text;
}

# A self-signed ECDSA certificate for $name and *.$name (www.$name): $path.crt
# and its key $path.key
sub self_signed {
    my ($path, $name) = @_;
    my ($rc, $out) = TLS::run([ TLS::openssl(), qw(req -x509 -newkey ec
        -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj), "/CN=$name",
        '-addext', "subjectAltName=DNS:$name,DNS:*.$name",
        '-keyout', "$path.key", '-out', "$path.crt" ]);
    die "openssl req: $out" if $rc != 0;
}

# fastd -t on the rewritten file: (exit code, output)
sub check {
    my ($self) = @_;
    return FastdTest::run_fastd('-t', '-c', $self->{t}->conf_file);
}

# curl ARGS...: the last response (of a redirect chain, or the one) as a
# FastdTest::Response, with ->{version} "1.1" or "2"; undef when curl
# fails (its message in $self->{curl_error})
sub curl {
    my ($self, @args) = @_;
    my ($h, $b) = ("$self->{dir}/curl.head", "$self->{dir}/curl.body");
    unlink $h, $b;
    my ($rc, $out) = TLS::run(
        [ TLS::curl(), '-sS', '--max-time', '20', '-D', $h, '-o', $b, @args ]);
    $self->{curl_error} = $out;
    return undef if $rc != 0;
    my @blocks = grep { length } split /\r\n\r\n/, FastdTest::slurp($h) // '';
    my $head = $blocks[-1] // return undef;
    my ($version) = $head =~ m{^HTTP/([\d.]+)} or return undef;
    $head =~ s{^HTTP/2 }{HTTP/2.0 };   # the parser wants N.N
    my ($resp) = FastdTest::parse_one(\"$head\r\n\r\n", head => 1);
    return undef unless $resp && $resp->{status};
    $resp->{version} = $version;
    $resp->{body} = FastdTest::slurp($b) // '';
    return $resp;
}

# GET (or method =>) $path on the example's port $n: the response; %h are
# header fields (Host: localhost unless given)
sub get {
    my ($self, $n, $path, %h) = @_;
    my $method = delete $h{method} // 'GET';
    $h{Host} //= 'localhost';
    my $req = "$method $path HTTP/1.1\r\n";
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    return $self->{t}->http("$req\r\n", port => $self->port($n));
}

sub start {
    my ($self, %o) = @_;
    return $self->{t}->start({ %o }, '-g');
}

1;
