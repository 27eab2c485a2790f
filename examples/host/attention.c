/* SPDX-License-Identifier: MIT */
/* Attention through pkv for the example hosts (attention.h). */
#include "attention.h"

#include <stdio.h>
#include <string.h>

static pkv_tensor f32_tensor(const float *data, uint32_t rows,
                             uint32_t heads, uint32_t head_dim)
{
    pkv_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.dtype = PKV_TENSOR_F32;
    t.memory = PKV_MEMORY_HOST;
    t.rows = rows;
    t.heads = heads;
    t.head_dim = head_dim;
    t.data = (void *)(uintptr_t)data; /* pkv only reads q, k and v */
    return t;
}

int host_attend_pkv(pkv_engine *e, uint32_t layer, uint32_t rows,
                    const float *q, const float *k, const float *v,
                    float *out, uint32_t q_heads, uint32_t kv_heads,
                    uint32_t head_dim)
{
    pkv_tensor tq = f32_tensor(q, rows, q_heads, head_dim);
    pkv_tensor tk = f32_tensor(k, rows, kv_heads, head_dim);
    pkv_tensor tv = f32_tensor(v, rows, kv_heads, head_dim);
    pkv_tensor to = f32_tensor(out, rows, q_heads, head_dim);
    if (pkv_engine_attend(e, layer, &tq, &tk, &tv, &to) != PKV_OK) {
        fprintf(stderr, "attend: %s\n", pkv_engine_last_error(e));
        return -1;
    }
    return 0;
}
