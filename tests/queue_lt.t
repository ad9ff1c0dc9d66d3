#!/usr/bin/perl
# tests/queue.t again with events.edge_triggered = off: waiting requests,
# aborts and the hammer on a level-triggered loop (which registers only the
# events a connection can act on, and must still hear a waiter leave).
use strict;
use warnings;
use FindBin;
$ENV{FASTD_TEST_LT} = 1;
do "$FindBin::Bin/queue.t" or die($@ || $!);
