/* SPDX-License-Identifier: MIT */
/* The hash model's rows, samples and geometry (no test framework: the
 * fuzz target links it too). */
#include "hash_model.h"

#include "rng.h"

#include <stdlib.h>

float hm_value(int kind, int32_t token, uint32_t position, uint32_t layer,
               uint32_t head, uint32_t dim)
{
    uint64_t h = test_mix((uint64_t)(uint32_t)token * 0x9e3779b97f4a7c15ull ^
                          ((uint64_t)kind << 56));
    h = test_mix(h ^ ((uint64_t)position << 20) ^ layer);
    h = test_mix(h ^ ((uint64_t)head << 32) ^ dim);
    return (float)((double)(h >> 40) / (double)(1 << 23) - 1.0);
}

void hm_row(int kind, int32_t token, uint32_t position, uint32_t layer,
            uint32_t heads, uint32_t head_dim, float *row)
{
    for (uint32_t h = 0; h < heads; h++)
        for (uint32_t d = 0; d < head_dim; d++)
            row[h * head_dim + d] =
                hm_value(kind, token, position, layer, h, d);
}

int32_t hm_sample(int32_t last_token, uint32_t position, uint32_t vocab)
{
    return (int32_t)(test_mix((uint64_t)(uint32_t)last_token << 32 |
                              position) %
                     vocab);
}

float hm_tolerance(int32_t dtype)
{
    if (dtype == PKV_KV_DTYPE_U4 || dtype == PKV_KV_DTYPE_U8K_U4V)
        return 0.5f;
    return dtype == PKV_KV_DTYPE_U8    ? 0.05f
           : dtype == PKV_KV_DTYPE_F16 ? 2e-3f
                                       : 1e-4f;
}

pkv_engine_params hm_params(int32_t backend)
{
    pkv_engine_params p;
    /* Cannot fail: p is not NULL. */
    (void)pkv_engine_params_init(&p);
    p.num_layers = 2;
    p.num_q_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 8;
    p.block_size = 4;
    p.num_blocks = 256;
    p.kv_dtype = PKV_KV_DTYPE_F32;
    p.vocab_size = 1000;
    p.max_model_len = 1024;
    p.backend = backend;
    return p;
}

int32_t *hm_prompt(uint32_t len, uint32_t seed)
{
    int32_t *t = malloc((len ? len : 1) * sizeof *t);
    if (t == NULL)
        abort(); /* a test without memory for its prompt cannot go on */
    for (uint32_t i = 0; i < len; i++)
        t[i] = (int32_t)((seed * 7919u + i * 104729u) % 1000u);
    return t;
}
