/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention arithmetic with AVX-512 (F, DQ, BW, VL),
 * FMA and F16C: 16 floats a vector (attend_math_simd.h holds the body).
 * Compiled with those flags and called only where the processor has them
 * all (and the system saves the 512-bit registers, which
 * __builtin_cpu_supports checks).
 */
#include "attend_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <immintrin.h>

#define LANES 16u
/* Score steps: up to 4 queries over 4 rows (16 accumulators, 4 rows and
 * a query in 32 registers). */
#define ROWS(nq) 4u
#define VERSION pkv__attend_math_avx512
#define VERSION_NAME "avx512"
#define RUNS                                                            \
    (__builtin_cpu_init(), __builtin_cpu_supports("avx512f") &&         \
                               __builtin_cpu_supports("avx512dq") &&    \
                               __builtin_cpu_supports("avx512bw") &&    \
                               __builtin_cpu_supports("avx512vl") &&    \
                               __builtin_cpu_supports("fma") &&         \
                               __builtin_cpu_supports("f16c"))

typedef __m512 vf;

static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float x) { return _mm512_set1_ps(x); }
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf x) { _mm512_storeu_ps(p, x); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }

static inline vf v_f16(const uint8_t *p)
{
    return _mm512_cvtph_ps(
        _mm256_loadu_si256((const __m256i *)(const void *)p));
}

static inline void v_store_f16(uint16_t *p, vf x)
{
    _mm256_storeu_si256(
        (__m256i *)(void *)p,
        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline int v_any_nan(vf x)
{
    return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0;
}

static inline vf v_u8(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
        _mm_loadu_si128((const __m128i *)(const void *)p)));
}

static inline vf v_u4(const uint8_t *p)
{
    __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __m128i nibble = _mm_set1_epi8(15);
    __m128i even = _mm_and_si128(x, nibble);
    __m128i odd = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(even, odd)));
}

/* As attend_math_avx2.c's: 2^n * e^r, Cephes' polynomial, 0 below -87. */
static inline vf v_exp(vf x)
{
    __mmask16 dead = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f),
                                        _CMP_LT_OQ);
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
    vf n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    vf y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r),
                        _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps((__mmask16)~dead, y, _mm512_castsi512_ps(e));
}

static inline vf v_range(vf x, uint32_t j, uint32_t a, uint32_t z)
{
    __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32((int)j),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                          15));
    __mmask16 in =
        _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32((int)a)) &
        _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32((int)z));
    return _mm512_mask_blend_ps(in, _mm512_set1_ps(-INFINITY), x);
}

/* Lanes k and k + 8 first, then as the AVX2 version sums 8. */
static inline __m256 fold_half(vf x)
{
    return _mm256_add_ps(_mm512_castps512_ps256(x),
                         _mm512_extractf32x8_ps(x, 1));
}

static inline float v_sum(vf x)
{
    __m256 h = fold_half(x);
    h = _mm256_hadd_ps(h, h);
    h = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h),
                                    _mm256_extractf128_ps(h, 1)));
}

static inline void v_sum4(vf a, vf b, vf c, vf d, float *out)
{
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(fold_half(a), fold_half(b)),
                              _mm256_hadd_ps(fold_half(c), fold_half(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h),
                                  _mm256_extractf128_ps(h, 1)));
}

static inline float v_top(vf x)
{
    return _mm512_reduce_max_ps(x);
}

#include "attend_math_simd.h"
