/* SPDX-License-Identifier: MIT */
/*
 * A deterministic model for the engine loop: the Q, K and V rows of a
 * token are a hash of (token id, position, layer), so the output of every
 * row of every step can be recomputed densely from the sequence's token
 * history and compared, whatever the engine did in between (chunked
 * prefill, prefix hits, forks, preemption, swap). check_host.h does that.
 */
#ifndef PKV_TESTS_HASH_MODEL_H
#define PKV_TESTS_HASH_MODEL_H

#include "pkv/pkv.h"

#include <stdint.h>

enum { HM_Q = 0, HM_K = 1, HM_V = 2 };

/* One element in [-1, 1). */
float hm_value(int kind, int32_t token, uint32_t position, uint32_t layer,
               uint32_t head, uint32_t dim);

/* Fill row [heads][head_dim] of kind for (token, position, layer). */
void hm_row(int kind, int32_t token, uint32_t position, uint32_t layer,
            uint32_t heads, uint32_t head_dim, float *row);

/* The token the host "samples" for a sequence after `position`: a fixed
 * function of the sequence's last token and position, below vocab. */
int32_t hm_sample(int32_t last_token, uint32_t position, uint32_t vocab);

/* The small geometry the engine-loop tests start from (2 layers, 4 query
 * heads over 2 kv heads, head_dim 8, 4-token blocks, 256 blocks, f32 KV,
 * vocabulary 1000, max_model_len 1024) on the given backend. */
pkv_engine_params hm_params(int32_t backend);

/* The most |output - dense f64 reference| a cache of dtype allows on the
 * model's values (uniform in [-1, 1), head_dim 8): f32 1e-4, f16 2e-3, U8
 * 0.05, and 0.5 with U4 parts, from the bound of docs/design.md
 * ("Attention error bounds": U4's step, 2/15, perturbs a score by up to
 * 0.19 and a value by 0.07). */
float hm_tolerance(int32_t dtype);

/* A prompt of len tokens below 1000, a fixed function of seed (malloc'd). */
int32_t *hm_prompt(uint32_t len, uint32_t seed);

#endif
