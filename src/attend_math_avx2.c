/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention arithmetic with AVX2, FMA and F16C: 8 floats
 * a vector (attend_math_simd.h holds the body). Compiled with -mavx2
 * -mfma -mf16c and called only where the processor has all three.
 */
#include "attend_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <immintrin.h>

#define LANES 8u
/* Score steps: 4 queries over 2 rows (8 accumulators, 2 rows and a
 * query in 16 registers), fewer queries over 4 rows. */
#define ROWS(nq) ((nq) > 2 ? 2u : 4u)
#define VERSION pkv__attend_math_avx2
#define VERSION_NAME "avx2"
#define RUNS                                                            \
    (__builtin_cpu_init(), __builtin_cpu_supports("avx2") &&            \
                               __builtin_cpu_supports("fma") &&         \
                               __builtin_cpu_supports("f16c"))

typedef __m256 vf;

static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float x) { return _mm256_set1_ps(x); }
static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vf x) { _mm256_storeu_ps(p, x); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }

static inline vf v_f16(const uint8_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline void v_store_f16(uint16_t *p, vf x)
{
    _mm_storeu_si128(
        (__m128i *)(void *)p,
        _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline int v_any_nan(vf x)
{
    return _mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0;
}

static inline vf v_u8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
        _mm_loadl_epi64((const __m128i *)(const void *)p)));
}

static inline vf v_u4(const uint8_t *p)
{
    int32_t bytes;
    memcpy(&bytes, p, 4);
    __m128i x = _mm_cvtsi32_si128(bytes), nibble = _mm_set1_epi8(15);
    __m128i even = _mm_and_si128(x, nibble);
    __m128i odd = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(even, odd)));
}

/* e^x = 2^n * e^r, n = round(x / ln 2), |r| <= ln 2 / 2, e^r by Cephes'
 * expf polynomial (about 1 ulp); below -87 (where e^x < 2^-125) 0. */
static inline vf v_exp(vf x)
{
    vf dead = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    /* max(-87, x) keeps a NaN x (the second operand wins) */
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
    vf n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    vf y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r),
                        _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(dead, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

static inline vf v_range(vf x, uint32_t j, uint32_t a, uint32_t z)
{
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)j),
                                   _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i in = _mm256_and_si256(
        _mm256_cmpgt_epi32(idx, _mm256_set1_epi32((int)a - 1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)z), idx));
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), x,
                            _mm256_castsi256_ps(in));
}

/* ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)) */
static inline float v_sum(vf x)
{
    vf h = _mm256_hadd_ps(x, x);
    h = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h),
                                    _mm256_extractf128_ps(h, 1)));
}

static inline void v_sum4(vf a, vf b, vf c, vf d, float *out)
{
    vf h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h),
                                  _mm256_extractf128_ps(h, 1)));
}

static inline float v_top(vf x)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x),
                          _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

#include "attend_math_simd.h"
