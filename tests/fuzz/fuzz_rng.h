/*
 * The harnesses' read splits: xorshift32, seeded from the input (set
 * rng_state), so a split is reproducible from the input alone.
 */
#ifndef FUZZ_RNG_H
#define FUZZ_RNG_H

#include <stdint.h>

static uint32_t rng_state;

static inline uint32_t rng(void)
{
    uint32_t x = rng_state ? rng_state : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    rng_state = x;
    return x;
}

#endif
