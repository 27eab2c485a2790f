/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention arithmetic over one block's K or V rows as
 * the cache stores them: f32, f16, or U8/U4 codes with their f16
 * parameters (kv_layout.h). For up to PKV__QUAD queries at a time (the
 * (row, head) pairs of a kv head's group): their scores against the rows,
 * the online softmax's update over the block, and the rows weighted into
 * their accumulators. Nothing is widened into an f32 tile: f16 halves and
 * codes are converted in registers, and a quantized element
 * x = lo + code * scale is never formed where its parameters fold out:
 *
 *   keys, per-channel:        s = q.lo + (q * scale).code   (q * scale and
 *                             q.lo once per block and query)
 *   keys, per-token (a group spanning the row):
 *                             s = lo * sum(q) + scale * (q.code)
 *   values, per-token (a group spanning the row):
 *                             acc += (p * scale) code + p * lo, the p * lo
 *                             of a block's rows summed once
 *   values, per-channel:      acc += lo * sum(p) + scale * (sum p code)
 *
 * Only U4 groups narrower than the row (u4_group < head_dim) form x, in
 * registers, one multiply-add per code shared by the quad's queries.
 *
 * Versions: portable C, and AVX2 + FMA + F16C and AVX-512 built from one
 * body (attend_math_simd.h), chosen at run time by processor and format.
 * Each (query, row) score, each query's softmax state and each
 * accumulator is computed in an order fixed by head_dim, the format and
 * the block's rows alone, so a query's results do not depend on which
 * other queries share its quad or which rows a call takes (below);
 * versions differ from each other in rounding only
 * (tests/test_backend_cpu.c checks each against f64 sums).
 */
#ifndef PKV_ATTEND_MATH_H
#define PKV_ATTEND_MATH_H

#include <stdint.h>

#define PKV__QUAD 4

/* How one part's rows are stored: dtype PKV_KV_DTYPE_F32, _F16, _U8 or
 * _U4 (the part's own), and for U8/U4 the group (pkv_quant_group) and
 * the channels of a per-token group (U8: head_dim). */
typedef struct pkv__rows_format {
    int32_t dtype;
    int32_t group;
    uint32_t width;
} pkv__rows_format;

/* One block part's rows: f32 or f16 rows [row][channel], or U8/U4 codes
 * [row][row bytes] with the part's f16 lo and scale arrays (kv_layout.h:
 * per-channel, head_dim of each; per-token, row j's groups from index
 * j * head_dim / width). Parameter arrays may be 2-byte aligned only.
 * values: NULL, or the rows' f16 values or codes as f32 ([row][channel],
 * convert's), read instead of data: the same numbers, so the same
 * results, without converting them again for every quad. */
typedef struct pkv__rows {
    const uint8_t *data;
    const uint8_t *lo;
    const uint8_t *scale;
    const float *values;
} pkv__rows;

/* The online softmax state of one (row, head) pair: the largest scaled
 * score folded so far (-inf: none) and the sum of its weights. */
typedef struct pkv__softmax {
    float m;
    float l;
} pkv__softmax;

/*
 * Rows are numbered within the block; s and p hold a row's value at its
 * number (i * stride + j, stride >= the block's rows rounded up to 16).
 * Vector lanes and batches of rows align to those numbers, so the rows a
 * call takes beyond a query's own range, which weigh 0, change none of
 * its sums: a query's results do not depend on the other queries' ranges.
 */
typedef struct pkv__attend_math {
    const char *name;
    /* Floats a vector holds: head_dim, and U4 groups narrower than the
     * row, must be multiples of it. */
    uint32_t lanes;
    /* Whether this processor runs the version. */
    int (*runs)(void);
    /* s[i * stride + j] = q[i] . row j, for i < nq (1 to PKV__QUAD),
     * j in [j0, j0 + n). */
    void (*scores)(const pkv__rows_format *f, const pkv__rows *k,
                   uint32_t j0, uint32_t n, uint32_t d,
                   const float *const *q, uint32_t nq, float *s,
                   uint32_t stride);
    /* The online softmax over a block of n rows for slot i < nq: its
     * scores s[i * stride + j], j in [a[i], z[i]) (an empty range: none),
     * times scale, fold into st[i]; s then holds each row's weight,
     * exactly 0 for every j < n outside the range (and s up to n rounded
     * up to 16 may be written), and keep[i] the factor the slot's
     * accumulator must be multiplied by first (1 when its max did not
     * change). */
    void (*weigh)(float *s, uint32_t stride, uint32_t nq, uint32_t n,
                  const uint32_t *a, const uint32_t *z, float scale,
                  pkv__softmax *const *st, float *keep);
    /* acc[i] = acc[i] * keep[i] + sum over j in [j0, j0 + n) of
     * p[i * stride + j] * row j, for i < nq (1 to PKV__QUAD). */
    void (*accumulate)(const pkv__rows_format *f, const pkv__rows *v,
                       uint32_t j0, uint32_t n, uint32_t d, const float *p,
                       uint32_t stride, uint32_t nq, const float *keep,
                       float *const *acc);
    /* dst[j * d + c] = row j's value (f16) or code (U8, U4) at channel c,
     * exactly, for j < n: what pkv__rows.values holds. */
    void (*convert)(const pkv__rows_format *f, const pkv__rows *r,
                    uint32_t n, uint32_t d, float *dst);
    /* dst[c] = src[c] as binary16, c < d: pkv__f32_to_f16's bits (a NaN
     * too), for an f16 cache's stored rows. */
    void (*to_f16)(const float *src, uint16_t *dst, uint32_t d);
} pkv__attend_math;

/* Whether this processor runs version m for head_dim d with parts of
 * formats k and v. */
int pkv__attend_math_takes(const pkv__attend_math *m, uint32_t d,
                           const pkv__rows_format *k,
                           const pkv__rows_format *v);

/* The fastest version this processor runs for head_dim d and the cache's
 * K and V formats (the portable one takes everything). */
const pkv__attend_math *pkv__attend_math_for(uint32_t d,
                                             const pkv__rows_format *k,
                                             const pkv__rows_format *v);

/* Every version this build has, fastest first, NULL-terminated (the
 * processor may not run all of them: pkv__attend_math_takes). */
extern const pkv__attend_math *const pkv__attend_math_versions[];

extern const pkv__attend_math pkv__attend_math_portable;
#ifdef PKV_HAVE_AVX2
extern const pkv__attend_math pkv__attend_math_avx2;
extern const pkv__attend_math pkv__attend_math_avx512;
#endif

#endif
