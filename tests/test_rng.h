/* SPDX-License-Identifier: MIT */
/* Normal draws for the attention and quantizer tests, on top of the seeded
 * splitmix64 of test_util.h, so every run and platform sees the same data. */
#ifndef PKV_TESTS_TEST_RNG_H
#define PKV_TESTS_TEST_RNG_H

#include "test_util.h"

#include <math.h>
#include <stddef.h>

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
