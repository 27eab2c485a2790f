/* SPDX-License-Identifier: MIT */
/* The CPU backend's attention arithmetic, portable C, and the choice of
 * version (attend_math.h). */
#include "attend_math.h"

#include "half.h"

#include <stddef.h>
#include <string.h>

/* Runs of 4 (head_dim is a multiple of 4), so that the compiler vectorises
 * them at -O2 without an epilogue or alias versioning; the four sums of a
 * dot are also more accurate than one long chain. */
static float dot(const float *restrict a, const float *restrict b, uint32_t n)
{
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (uint32_t i = 0; i < n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    return (s0 + s2) + (s1 + s3);
}

static void scores(const float *const *q, uint32_t nq, const float *k,
                   uint32_t n, uint32_t d, float *s, uint32_t stride)
{
    for (uint32_t i = 0; i < nq; i++)
        for (uint32_t j = 0; j < n; j++)
            s[i * stride + j] = dot(q[i], k + (size_t)j * d, d);
}

static void accumulate(const float *p, uint32_t stride, uint32_t nq,
                       const float *v, uint32_t n, uint32_t d,
                       float *const *acc)
{
    for (uint32_t i = 0; i < nq; i++) {
        float *restrict a = acc[i];
        for (uint32_t j = 0; j < n; j++) {
            const float *restrict x = v + (size_t)j * d;
            float w = p[i * stride + j];
            for (uint32_t c = 0; c < d; c += 4) {
                a[c] += w * x[c];
                a[c + 1] += w * x[c + 1];
                a[c + 2] += w * x[c + 2];
                a[c + 3] += w * x[c + 3];
            }
        }
    }
}

static void widen(const uint8_t *src, float *dst, uint32_t n)
{
    uint16_t run[64];
    for (uint32_t i = 0; i < n; i += 64) {
        uint32_t m = n - i < 64 ? n - i : 64;
        memcpy(run, src + 2 * (size_t)i, 2 * (size_t)m);
        pkv__f16_to_f32_n(run, dst + i, m);
    }
}

const pkv__attend_math pkv__attend_math_portable = {"portable", scores,
                                                    accumulate, widen};

const pkv__attend_math *pkv__attend_math_for(uint32_t d)
{
#ifdef PKV_HAVE_AVX2
    __builtin_cpu_init();
    if (d % 8 == 0 && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return &pkv__attend_math_avx2;
#else
    (void)d;
#endif
    return &pkv__attend_math_portable;
}
