/* SPDX-License-Identifier: MIT */
/* The prefix cache as seen from outside the step (kv.h): a prompt's
 * cached prefix looked up from any thread, the KV events delivered to
 * the host, and the cache emptied. */
#include "kv/kv.h"
#include "kv/prefix_groups.h"

pkv_status pkv__kv_probe(const pkv__kv *kv, const pkv__allocator *alloc,
                         const int32_t *tokens, uint32_t n, uint64_t salt,
                         uint32_t *blocks)
{
    uint32_t bs = kv->pool.block_size, groups = kv->groups.num_groups;
    uint32_t full = n > 0 ? (n - 1) / bs : 0;
    *blocks = 0;
    if (full == 0)
        return PKV_OK;
    size_t num_ids = (size_t)full * (groups - 1);
    uint64_t *hashes = pkv__calloc(alloc, full, sizeof *hashes);
    pkv__chain_link *links = pkv__calloc(alloc, full, sizeof *links);
    uint32_t *ids =
        num_ids > 0 ? pkv__calloc(alloc, num_ids, sizeof *ids) : NULL;
    pkv_status st = PKV_ERR_OUT_OF_MEMORY;
    if (hashes != NULL && links != NULL && (num_ids == 0 || ids != NULL)) {
        /* The hashes need no lock: the lock covers only the index. */
        pkv__prefix_hashes(tokens, full, bs, salt, hashes);
        uint32_t h = 0, n_ids = 0;
        pkv__kv_lock(kv);
        pkv__prefix_lookup(&kv->prefix, tokens, n, salt, hashes, full, links,
                           &h);
        *blocks = pkv__prefix_group_hits(&kv->prefix, &kv->groups, links, h,
                                         tokens, salt, ids, &n_ids);
        pkv__kv_unlock(kv);
        st = PKV_OK;
    }
    pkv__free(alloc, hashes, full, sizeof *hashes);
    pkv__free(alloc, links, full, sizeof *links);
    pkv__free(alloc, ids, num_ids, sizeof *ids);
    return st;
}

void pkv__kv_deliver_events(pkv__kv *kv)
{
    pkv__kv_events_deliver(&kv->events, kv->prefix.tokens,
                           kv->pool.block_size, kv->pool.blocks,
                           &kv->groups);
}

void pkv__kv_clear(pkv__kv *kv)
{
    for (uint32_t b = 1; b < kv->pool.num_blocks; b++)
        pkv__pool_uncache(&kv->pool, b);
    if (kv->events.fn != NULL)
        pkv__kv_events_clear(&kv->events);
}
