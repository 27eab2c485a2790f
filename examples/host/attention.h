/* SPDX-License-Identifier: MIT */
/* One layer's attention through pkv for the example hosts: their q, k, v
 * and out, host f32 arrays, as pkv_engine_attend's tensors. */
#ifndef PKV_EXAMPLE_HOST_ATTENTION_H
#define PKV_EXAMPLE_HOST_ATTENTION_H

#include <pkv/pkv.h>

#include <stdint.h>

/* q and out [rows][q_heads][head_dim], k and v [rows][kv_heads][head_dim].
 * 0, or -1 after printing the engine's message to stderr. */
int host_attend_pkv(pkv_engine *e, uint32_t layer, uint32_t rows,
                    const float *q, const float *k, const float *v,
                    float *out, uint32_t q_heads, uint32_t kv_heads,
                    uint32_t head_dim);

#endif
