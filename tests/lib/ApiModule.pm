package ApiModule;
# Modules built as a user builds one: make install into a test's scratch
# prefix (fastd.h and fastd.pc), then cc -shared against pkg-config's
# flags. For tests/modules*.t.

use strict;
use warnings;
use Test::More;
use FastdTest;

# Skips the whole test without pkg-config or jansson (the example uses
# it). Returns the prefix, after checking make install put the header and
# the pkg-config file there; PKG_CONFIG_PATH points into it after.
sub install {
    my ($dir) = @_;
    my $root = FastdTest::root();
    chomp(my $pc = `command -v pkg-config 2>/dev/null`);
    plan skip_all => 'pkg-config is not installed' unless $pc;
    plan skip_all => 'jansson is not installed (libjansson-dev)'
        if system('pkg-config --exists jansson') != 0;
    my $prefix = "$dir/prefix";
    my $out = `make -s -C '$root' install PREFIX='$prefix' LOGROTATE_DIR='$dir/lr' FASTD_USER=nobody 2>&1`;
    is($?, 0, 'make install into a scratch prefix') or diag($out);
    ok(-f "$prefix/include/fastd/fastd.h", 'include/fastd/fastd.h installed');
    ok(-f "$prefix/lib/pkgconfig/fastd.pc", 'lib/pkgconfig/fastd.pc installed');
    $ENV{PKG_CONFIG_PATH} = "$prefix/lib/pkgconfig";
    return $prefix;
}

sub cflags { my $f = `pkg-config --cflags fastd jansson`; chomp $f; $f }
sub libs   { my $l = `pkg-config --libs jansson`; chomp $l; $l }

# cc -shared src -o so with the installed API's flags (and jansson's):
# '' when it built, else the compiler's words.
sub build {
    my ($so, $src, @defs) = @_;
    my ($cflags, $libs) = (cflags(), libs());
    my $out = `cc -shared -fPIC -Wall -Wextra -Werror @defs $cflags '$src' $libs -o '$so' 2>&1`;
    return $? == 0 ? '' : $out || 'failed';
}

# A copy of the tree in $dir/src (FastdTest::copy_tree), configured with
# --with-NAME=dynamic for each of @mods and built: checks that configure
# says so and that each objs/fd_NAME.so is built. Returns the copy's root.
sub dynamic_tree {
    my ($dir, @mods) = @_;
    my $src = "$dir/src";
    eval { FastdTest::copy_tree($src); 1 } or BAIL_OUT($@);
    my $with = join ' ', map { "--with-$_=dynamic" } @mods;
    my $out = `cd '$src' && ./configure $with 2>&1`;
    is($?, 0, "./configure $with") or diag($out);
    my ($dyn) = $out =~ /^dynamic modules \(objs\/fd_NAME\.so\): (.*)$/m;
    is(join(' ', sort split ' ', $dyn // ''), join(' ', sort @mods),
       '... says they are shared objects');
    $out = `make -s -C '$src' -j2 2>&1`;
    is($?, 0, 'make') or diag($out);
    for my $m (@mods) {
        ok(-f "$src/objs/fd_$m.so", "objs/fd_$m.so built");
        like(`nm -D --defined-only '$src/objs/fd_$m.so' 2>&1`,
             qr/\bfastd_module\b/, "... defining fastd_module");
    }
    return $src;
}

1;
