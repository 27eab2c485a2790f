/* SPDX-License-Identifier: MIT */
/* The prefix cache's blocks through the manager (kv.h): which block holds
 * a chain link's KV, and blocks that come from outside the engine (a KV
 * store's values) joining the cache as registrations would have put
 * them. */
#include "kv/kv.h"
#include "kv/prefix_groups.h"

uint32_t pkv__kv_chain_block(const pkv__kv *kv, const pkv__kv_seq *s,
                             uint32_t j)
{
    const pkv__chain_link *link = &s->chain.links[j];
    return kv->pool.blocks[link->block].generation == link->generation
               ? link->block
               : s->tables[0].blocks[j];
}

pkv_status pkv__kv_copy_blocks(const pkv__kv *kv, const pkv__block_copy *pairs,
                               uint32_t n)
{
    const pkv__device *dev = kv->device;
    return dev->ops->copy_blocks(dev->backend, pairs, n);
}

pkv_status pkv__kv_read_blocks(const pkv__kv *kv, const uint32_t *blocks,
                               uint32_t n, uint8_t *host)
{
    const pkv__device *dev = kv->device;
    return dev->ops->swap_out(dev->backend, blocks, n, host);
}

uint32_t pkv__kv_install(pkv__kv *kv, const pkv__kv_seq *s,
                         const int32_t *tokens, const pkv__chain_link *links,
                         uint32_t from, uint32_t n, const uint8_t *bytes,
                         uint32_t *ids, pkv_status *status)
{
    const pkv__device *dev = kv->device;
    pkv__pool *pool = &kv->pool;
    uint32_t bs = pool->block_size;
    *status = PKV_OK;
    /* Pin the blocks they follow, so that taking blocks for them cannot
     * evict those. */
    for (uint32_t h = 0; h < from; h++)
        pkv__pool_incref(pool, links[h].block);
    if (n > pkv__pool_available(pool))
        n = pkv__pool_available(pool); /* the rest: a miss for want of room */
    if (n > 0) {
        pkv__pool_alloc(pool, n, ids); /* n <= available: cannot fail */
        *status = dev->ops->swap_in(dev->backend, bytes, ids, n);
        if (*status != PKV_OK) {
            for (uint32_t i = n; i-- > 0;)
                pkv__pool_decref(pool, ids[i]);
            n = 0;
        }
    }
    uint64_t parent_hash = from ? links[from - 1].hash : 0;
    uint32_t parent = from ? links[from - 1].block : PKV__NULL_BLOCK;
    for (uint32_t i = 0; i < n; i++) {
        const int32_t *t = tokens + (size_t)(from + i) * bs;
        uint64_t h = pkv__kv_chain_hash(kv, s, from + i, parent_hash, t);
        pkv__pool_set_fill(pool, ids[i], bs);
        pkv__prefix_insert(&kv->prefix, ids[i], h, t, s->record->salt,
                           parent, pool->blocks[parent].generation,
                           from + i ? &parent_hash : NULL);
        parent_hash = h;
        parent = ids[i];
    }
    /* Deepest first into the LRU queue: evicted before their parents. */
    for (uint32_t i = n; i-- > 0;)
        pkv__pool_decref(pool, ids[i]);
    for (uint32_t h = from; h-- > 0;)
        pkv__pool_decref(pool, links[h].block);
    return n;
}

int pkv__kv_group_cached(const pkv__kv *kv, const pkv__kv_seq *s,
                         const int32_t *tokens, const pkv__chain_link *link,
                         uint32_t j, uint32_t g)
{
    const int32_t *t = tokens + (size_t)j * kv->pool.block_size;
    return pkv__prefix_find_group(&kv->prefix, g,
                                  pkv__prefix_group_hash(link->hash, g), t,
                                  s->record->salt, link->block,
                                  link->generation) != PKV__NO_BLOCK;
}

pkv_status pkv__kv_install_group(pkv__kv *kv, const pkv__kv_seq *s,
                                 const int32_t *tokens,
                                 const pkv__chain_link *links, uint32_t j,
                                 uint32_t g, const uint8_t *bytes,
                                 uint32_t *id)
{
    const pkv__device *dev = kv->device;
    const pkv__chain_link *link = &links[j];
    pkv__pool *pool = &kv->pool;
    uint32_t bs = pool->block_size;
    /* Its parent is pinned while a block is taken for it. */
    pkv__pool_incref(pool, link->block);
    pkv_status st = pkv__pool_alloc(pool, 1, id);
    if (st == PKV_OK) {
        st = dev->ops->swap_in(dev->backend, bytes, id, 1);
        if (st == PKV_OK) {
            const int32_t *t = tokens + (size_t)j * bs;
            uint64_t parent_hash =
                j ? pkv__prefix_group_hash(links[j - 1].hash, g) : 0;
            pkv__pool_set_group(pool, *id, g);
            pkv__pool_set_fill(pool, *id, bs);
            pkv__prefix_insert(&kv->prefix, *id,
                               pkv__prefix_group_hash(link->hash, g), t,
                               s->record->salt, link->block,
                               link->generation, j ? &parent_hash : NULL);
        }
        /* Cached and unreferenced, or free again. */
        pkv__pool_decref(pool, *id);
    }
    pkv__pool_decref(pool, link->block);
    return st;
}
