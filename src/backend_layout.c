/* SPDX-License-Identifier: MIT */
/* A backend config's layout (backend.h): the bytes of a block, a part, a
 * staging tail and a swap, and each layer's arena and group; the lookups
 * every backend and the KV-cache manager make on the hot path. */
#include "backend.h"

#include "kv_layout.h"
#include "quant.h"

size_t pkv__backend_layer_block_bytes(const pkv__backend_config *c)
{
    return PKV_LAYOUT_LAYER_BLOCK_BYTES(
        (size_t)c->kv_dtype, (size_t)c->key_quant, (size_t)c->value_quant,
        (size_t)c->u4_group, (size_t)c->block_size, (size_t)c->head_dim,
        (size_t)c->num_kv_heads);
}

int pkv__backend_quantized(const pkv__backend_config *c)
{
    return PKV_LAYOUT_QUANTIZED(c->kv_dtype);
}

int32_t pkv__backend_part_dtype(const pkv__backend_config *c, int kv)
{
    return kv ? PKV_LAYOUT_VALUE_DTYPE(c->kv_dtype)
              : PKV_LAYOUT_KEY_DTYPE(c->kv_dtype);
}

pkv__qformat pkv__backend_qformat(const pkv__backend_config *c, int kv)
{
    pkv__qformat f = {pkv__backend_part_dtype(c, kv),
                      kv ? c->value_quant : c->key_quant, c->u4_group};
    return f;
}

size_t pkv__backend_part_bytes(const pkv__backend_config *c, int kv)
{
    pkv__qformat f = pkv__backend_qformat(c, kv);
    return PKV_LAYOUT_PART_BYTES((size_t)f.dtype, (size_t)f.group,
                                 (size_t)f.u4_group, (size_t)c->block_size,
                                 (size_t)c->head_dim);
}

uint32_t pkv__backend_num_arenas(const pkv__backend_config *c)
{
    return c->layer_arena != NULL ? c->num_arenas : c->num_layers;
}

uint32_t pkv__backend_num_groups(const pkv__backend_config *c)
{
    return c->layer_group != NULL ? c->num_groups : 1;
}

uint32_t pkv__backend_arena(const pkv__backend_config *c, uint32_t layer)
{
    return c->layer_arena != NULL ? c->layer_arena[layer] : layer;
}

uint32_t pkv__backend_group(const pkv__backend_config *c, uint32_t layer)
{
    return c->layer_group != NULL ? c->layer_group[layer] : 0;
}

size_t pkv__backend_swap_block_bytes(const pkv__backend_config *c)
{
    return pkv__backend_layer_block_bytes(c) * pkv__backend_num_arenas(c);
}

size_t pkv__backend_stage_bytes(const pkv__backend_config *c)
{
    return (size_t)c->num_layers * c->num_kv_heads * 2u * c->block_size *
           c->head_dim * sizeof(float);
}

size_t pkv__backend_swap_bytes(const pkv__backend_config *c,
                               uint32_t num_blocks)
{
    size_t size = num_blocks * pkv__backend_swap_block_bytes(c);
    if (pkv__backend_quantized(c))
        size += pkv__backend_stage_bytes(c);
    return size;
}
