/* SPDX-License-Identifier: MIT */
/* Attention through pkv for the example hosts (attention.h). */
#include "attention.h"

#include <stdio.h>

int host_attend_pkv(pkv_engine *e, uint32_t layer, uint32_t rows,
                    const float *q, const float *k, const float *v,
                    float *out, uint32_t q_heads, uint32_t kv_heads,
                    uint32_t head_dim)
{
    pkv_tensor tq =
        pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32, rows, q_heads, head_dim);
    pkv_tensor tk =
        pkv_tensor_host(k, 0, PKV_TENSOR_DTYPE_F32, rows, kv_heads, head_dim);
    pkv_tensor tv =
        pkv_tensor_host(v, 0, PKV_TENSOR_DTYPE_F32, rows, kv_heads, head_dim);
    pkv_tensor to =
        pkv_tensor_host(out, 0, PKV_TENSOR_DTYPE_F32, rows, q_heads, head_dim);
    if (pkv_engine_attend(e, layer, &tq, &tk, &tv, &to) != PKV_OK) {
        fprintf(stderr, "attend: %s\n", pkv_engine_last_error(e));
        return -1;
    }
    return 0;
}
