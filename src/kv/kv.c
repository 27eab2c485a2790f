/* SPDX-License-Identifier: MIT */
/* The KV-cache manager (kv.h): its making and release. */
#include "kv/kv.h"

#include <string.h>

pkv_status pkv__kv_init(pkv__kv *kv, const pkv__allocator *alloc,
                        const pkv_engine_params *params)
{
    memset(kv, 0, sizeof *kv);
    return pkv__groups_init(&kv->groups, alloc, params);
}

pkv_status pkv__kv_init_pool(pkv__kv *kv, const pkv__allocator *alloc,
                             uint32_t num_blocks, uint32_t block_size)
{
    pkv_status st = pkv__pool_init(&kv->pool, alloc, num_blocks, block_size);
    if (st == PKV_OK)
        st = pkv__prefix_init(&kv->prefix, &kv->pool);
    return st;
}

void pkv__kv_release(pkv__kv *kv, const pkv__allocator *alloc)
{
    if (kv->prefix.pool != NULL)
        pkv__prefix_release(&kv->prefix);
    if (kv->pool.blocks != NULL)
        pkv__pool_release(&kv->pool);
    pkv__groups_release(&kv->groups, alloc);
}
