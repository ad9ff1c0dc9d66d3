#!/usr/bin/perl
# tests/basic.t again with http.inline_completions = off: every thread-safe
# handler (plaintext, json) runs on the offload pool.
use strict;
use warnings;
use FindBin;
$ENV{FASTD_TEST_INLINE_OFF} = 1;
do "$FindBin::Bin/basic.t" or die($@ || $!);
