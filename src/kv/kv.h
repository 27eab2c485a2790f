/* SPDX-License-Identifier: MIT */
/*
 * The KV-cache manager: one object that owns the blocks. It holds the
 * block pool, the prefix cache and its chained hashes, the groups of
 * layers, and through each sequence's pkv__kv_seq that sequence's block
 * tables, one per group; the rest of the engine asks it to look up a
 * prompt's cached prefix, give a step's rows their slots, register and
 * slide, fork, cut, release and swap, and reads a sequence's tables per
 * group. One group of every layer is the case N = 1 of the same code.
 * (docs/design.md, "The KV-cache manager"; vLLM's KVCacheManager and
 * KVCacheCoordinator, llama.cpp's llama_kv_cache_iswa play this part in
 * their engines.)
 */
#ifndef PKV_KV_KV_H
#define PKV_KV_KV_H

#include "kv/groups.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "kv/table.h"

typedef struct pkv__kv {
    pkv__groups groups;
    pkv__pool pool;
    pkv__prefix prefix;
} pkv__kv;

/* The groups of validated params (their layer windows set): the layout,
 * which the backend's arenas follow, and nothing proportional to the
 * blocks yet. PKV_ERR_OUT_OF_MEMORY. */
pkv_status pkv__kv_init(pkv__kv *kv, const pkv__allocator *alloc,
                        const pkv_engine_params *params);

/* The pool of num_blocks blocks of block_size tokens and its prefix
 * index: once the backend holds the arenas, so that a cache too large for
 * the machine fails before this host memory is spent. */
pkv_status pkv__kv_init_pool(pkv__kv *kv, const pkv__allocator *alloc,
                             uint32_t num_blocks, uint32_t block_size);

/* Release what the inits made (any of it). */
void pkv__kv_release(pkv__kv *kv, const pkv__allocator *alloc);

#endif
