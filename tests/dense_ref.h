/* SPDX-License-Identifier: MIT */
/* Dense attention in f64 over contiguous, unquantized K/V: the reference the
 * paged backends are checked against (tests and pkv-bench only). */
#ifndef PKV_TESTS_DENSE_REF_H
#define PKV_TESTS_DENSE_REF_H

#include <stdint.h>

/*
 * One sequence: k and v hold its ctx tokens, [ctx][hkv][d]; q holds its nq
 * query rows, [nq][hq][d], which are the last nq tokens of the context
 * (causal, aligned to the end). Only the rows listed in rows[0..n_rows)
 * are computed, into out[i][hq][d] for the i-th listed row. window 0: none;
 * else row at token p sees [p - window + 1, p]. scale 0: 1/sqrt(d).
 */
void dense_ref_attention(const float *q, const float *k, const float *v,
                         uint32_t nq, uint32_t ctx, uint32_t hq, uint32_t hkv,
                         uint32_t d, double scale, uint32_t window,
                         const uint32_t *rows, uint32_t n_rows, double *out);

#endif
