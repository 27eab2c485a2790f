/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention arithmetic over one block of K and V rows,
 * for a quad of query vectors at a time: their scores against every row,
 * and the rows weighted into their accumulators; and f16 rows widened to
 * f32. A portable version, and one for x86 processors with AVX2, FMA and
 * F16C (attend_math_avx2.c, built where the compiler can), chosen at run
 * time.
 *
 * Each (query, key) score and each accumulator sums in an order fixed by
 * head_dim and by the row alone, so a query's results do not depend on
 * which other queries share its quad.
 */
#ifndef PKV_ATTEND_MATH_H
#define PKV_ATTEND_MATH_H

#include <stdint.h>

#define PKV__QUAD 4

typedef struct pkv__attend_math {
    const char *name;
    /* s[i * stride + j] = dot(q[i], k row j) for i < nq (1 to
     * PKV__QUAD), j < n; k is [n][d]. */
    void (*scores)(const float *const *q, uint32_t nq, const float *k,
                   uint32_t n, uint32_t d, float *s, uint32_t stride);
    /* acc[i] += sum over j < n of p[i * stride + j] * v row j, for
     * i < nq (1 to PKV__QUAD); v is [n][d]. */
    void (*accumulate)(const float *p, uint32_t stride, uint32_t nq,
                       const float *v, uint32_t n, uint32_t d,
                       float *const *acc);
    /* dst[i] = the f16 value in bytes 2i, 2i + 1 of src (little-endian),
     * i < n, n a multiple of 4: exact. */
    void (*widen)(const uint8_t *src, float *dst, uint32_t n);
} pkv__attend_math;

/* The fastest this processor runs for head_dim d. */
const pkv__attend_math *pkv__attend_math_for(uint32_t d);

extern const pkv__attend_math pkv__attend_math_portable;
#ifdef PKV_HAVE_AVX2
extern const pkv__attend_math pkv__attend_math_avx2; /* d % 8 == 0 */
#endif

#endif
