/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention arithmetic with AVX2, FMA and F16C
 * (attend_math.h), compiled with -mavx2 -mfma -mf16c and called only where
 * the processor has all three.
 * Scores: 4 queries against 2 rows at a time, 8 channels a step, so that
 * each load feeds more than one multiply-add (fewer queries: one at a
 * time, the same sums). Accumulation: 16 channels of
 * 4 accumulators held in registers over every row.
 */
#include "attend_math.h"

#include <stddef.h>

#include <immintrin.h>

static float hsum(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v),
                          _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* One query's scores, 2 rows at a time: the same sums, in the same order,
 * as the 4-query kernel's. */
static void one_query(const float *q0, const float *k, uint32_t n,
                      uint32_t d, float *s)
{
    uint32_t j = 0;
    for (; j + 2 <= n; j += 2) {
        const float *k0 = k + (size_t)j * d, *k1 = k0 + d;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (uint32_t c = 0; c < d; c += 8) {
            __m256 y = _mm256_loadu_ps(q0 + c);
            a0 = _mm256_fmadd_ps(y, _mm256_loadu_ps(k0 + c), a0);
            a1 = _mm256_fmadd_ps(y, _mm256_loadu_ps(k1 + c), a1);
        }
        s[j] = hsum(a0);
        s[j + 1] = hsum(a1);
    }
    if (j < n) {
        const float *k0 = k + (size_t)j * d;
        __m256 a0 = _mm256_setzero_ps();
        for (uint32_t c = 0; c < d; c += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + c),
                                 _mm256_loadu_ps(k0 + c), a0);
        s[j] = hsum(a0);
    }
}

static void scores(const float *const *q, uint32_t nq, const float *k,
                   uint32_t n, uint32_t d, float *s, uint32_t stride)
{
    if (nq < PKV__QUAD) { /* a quad's last slots unused: no work for them */
        for (uint32_t i = 0; i < nq; i++)
            one_query(q[i], k, n, d, s + i * stride);
        return;
    }
    const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3];
    uint32_t j = 0;
    for (; j + 2 <= n; j += 2) {
        const float *k0 = k + (size_t)j * d, *k1 = k0 + d;
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
        __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        for (uint32_t c = 0; c < d; c += 8) {
            __m256 x0 = _mm256_loadu_ps(k0 + c), x1 = _mm256_loadu_ps(k1 + c);
            __m256 y = _mm256_loadu_ps(q0 + c);
            a00 = _mm256_fmadd_ps(y, x0, a00);
            a01 = _mm256_fmadd_ps(y, x1, a01);
            y = _mm256_loadu_ps(q1 + c);
            a10 = _mm256_fmadd_ps(y, x0, a10);
            a11 = _mm256_fmadd_ps(y, x1, a11);
            y = _mm256_loadu_ps(q2 + c);
            a20 = _mm256_fmadd_ps(y, x0, a20);
            a21 = _mm256_fmadd_ps(y, x1, a21);
            y = _mm256_loadu_ps(q3 + c);
            a30 = _mm256_fmadd_ps(y, x0, a30);
            a31 = _mm256_fmadd_ps(y, x1, a31);
        }
        s[j] = hsum(a00);
        s[j + 1] = hsum(a01);
        s[stride + j] = hsum(a10);
        s[stride + j + 1] = hsum(a11);
        s[2 * stride + j] = hsum(a20);
        s[2 * stride + j + 1] = hsum(a21);
        s[3 * stride + j] = hsum(a30);
        s[3 * stride + j + 1] = hsum(a31);
    }
    if (j < n) { /* the same sums as a pair's, for the last row alone */
        const float *k0 = k + (size_t)j * d;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (uint32_t c = 0; c < d; c += 8) {
            __m256 x0 = _mm256_loadu_ps(k0 + c);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + c), x0, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + c), x0, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + c), x0, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + c), x0, a3);
        }
        s[j] = hsum(a0);
        s[stride + j] = hsum(a1);
        s[2 * stride + j] = hsum(a2);
        s[3 * stride + j] = hsum(a3);
    }
}

/* Channels [c, c + 8 * W) of every accumulator, W = 1 or 2. */
#define ACCUMULATE(W)                                                       \
    do {                                                                    \
        __m256 o[PKV__QUAD][W];                                             \
        for (uint32_t i = 0; i < PKV__QUAD; i++)                            \
            for (uint32_t w = 0; w < (W); w++)                              \
                o[i][w] = i < nq ? _mm256_loadu_ps(acc[i] + c + 8 * w)      \
                                 : _mm256_setzero_ps();                     \
        for (uint32_t j = 0; j < n; j++) {                                  \
            const float *x = v + (size_t)j * d + c;                         \
            for (uint32_t w = 0; w < (W); w++) {                            \
                __m256 y = _mm256_loadu_ps(x + 8 * w);                      \
                for (uint32_t i = 0; i < PKV__QUAD; i++)                    \
                    o[i][w] = _mm256_fmadd_ps(                              \
                        _mm256_broadcast_ss(&p[i * stride + j]), y,         \
                        o[i][w]);                                           \
            }                                                               \
        }                                                                   \
        for (uint32_t i = 0; i < nq; i++)                                   \
            for (uint32_t w = 0; w < (W); w++)                              \
                _mm256_storeu_ps(acc[i] + c + 8 * w, o[i][w]);              \
    } while (0)

static void accumulate(const float *p, uint32_t stride, uint32_t nq,
                       const float *v, uint32_t n, uint32_t d,
                       float *const *acc)
{
    uint32_t c = 0;
    for (; c + 16 <= d; c += 16)
        ACCUMULATE(2);
    for (; c < d; c += 8)
        ACCUMULATE(1);
}

static void widen(const uint8_t *src, float *dst, uint32_t n)
{
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      (const __m128i *)(src + 2 * i))));
    if (i < n) /* 4 left: n is a multiple of 4 */
        _mm_storeu_ps(dst + i, _mm_cvtph_ps(_mm_loadl_epi64(
                                   (const __m128i *)(src + 2 * i))));
}

const pkv__attend_math pkv__attend_math_avx2 = {"avx2", scores, accumulate,
                                                widen};
