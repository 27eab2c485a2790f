/* SPDX-License-Identifier: MIT */
/* The tests' one seeded generator, splitmix64, and what is drawn from it:
 * every run and platform sees the same data. No pkv header, so fuzz
 * drivers and pkv-fidelity include it too. Named rng.h because
 * bench/fidelity.c includes it by that name. */
#ifndef PKV_TESTS_TEST_RNG_H
#define PKV_TESTS_TEST_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* splitmix64's finalizer: a bijection with full avalanche, also a hash. */
static inline uint64_t test_mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* splitmix64's next value. */
static inline uint64_t test_rand(uint64_t *state)
{
    return test_mix(*state += 0x9e3779b97f4a7c15ull);
}

/* Uniform in (0, 1). */
static inline double test_uniform(uint64_t *state)
{
    return ((double)(test_rand(state) >> 11) + 0.5) / 9007199254740992.0;
}

/* n N(0,1) values (Box-Muller, both halves of each pair used). */
static inline void test_normal_fill(uint64_t *state, float *x, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = test_uniform(state), u2 = test_uniform(state);
        double r = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(a));
    }
}

static inline float test_normal(uint64_t *state)
{
    float x;
    test_normal_fill(state, &x, 1);
    return x;
}

#endif
