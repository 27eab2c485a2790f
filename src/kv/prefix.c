/* SPDX-License-Identifier: MIT */
/* The prefix cache (prefix.h): chained block hashes, verified lookup,
 * registration. */
#include "prefix.h"

#include <string.h>

/* splitmix64's finalizer: a bijection with full avalanche. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t pkv__prefix_hash(uint64_t parent_hash, const int32_t *tokens,
                          uint32_t count, uint64_t salt)
{
    uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ salt);
    for (uint32_t i = 0; i < count; i++)
        h = mix64(h + (uint32_t)tokens[i]);
    return h;
}

static void forget_block(void *ctx, uint32_t block);

pkv_status pkv__prefix_init(pkv__prefix *prefix, pkv__pool *pool)
{
    uint32_t n = pool->num_blocks;
    uint32_t buckets = 1;
    /* Capped so that the doubling cannot wrap past 2^31 blocks. */
    while (buckets < n && buckets < (UINT32_C(1) << 31))
        buckets <<= 1;
    memset(prefix, 0, sizeof *prefix);
    prefix->entries = pkv__calloc(&pool->alloc, n, sizeof *prefix->entries);
    prefix->tokens = pkv__calloc(&pool->alloc, (size_t)n * pool->block_size,
                                 sizeof *prefix->tokens);
    prefix->buckets = pkv__calloc(&pool->alloc, buckets,
                                  sizeof *prefix->buckets);
    if (!prefix->entries || !prefix->tokens || !prefix->buckets) {
        prefix->pool = pool;
        prefix->bucket_mask = buckets - 1; /* release frees this many */
        pkv__prefix_release(prefix);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < buckets; i++)
        prefix->buckets[i] = PKV__NO_BLOCK;
    prefix->pool = pool;
    prefix->bucket_mask = buckets - 1;
    prefix->hash_mask = UINT64_MAX;
    pool->on_uncache = forget_block;
    pool->on_uncache_ctx = prefix;
    return PKV_OK;
}

void pkv__prefix_release(pkv__prefix *prefix)
{
    pkv__pool *pool = prefix->pool;
    uint32_t n = pool->num_blocks;
    pkv__free(&pool->alloc, prefix->entries, n, sizeof *prefix->entries);
    pkv__free(&pool->alloc, prefix->tokens, (size_t)n * pool->block_size,
              sizeof *prefix->tokens);
    pkv__free(&pool->alloc, prefix->buckets, (size_t)prefix->bucket_mask + 1,
              sizeof *prefix->buckets);
    if (pool->on_uncache_ctx == prefix) {
        pool->on_uncache = NULL;
        pool->on_uncache_ctx = NULL;
    }
    memset(prefix, 0, sizeof *prefix);
}

static uint32_t *bucket_of(const pkv__prefix *prefix, uint64_t masked_hash)
{
    return &prefix->buckets[masked_hash & prefix->bucket_mask];
}

static void forget_block(void *ctx, uint32_t block)
{
    pkv__prefix *prefix = ctx;
    uint32_t *link = bucket_of(prefix, prefix->entries[block].hash);
    while (*link != block)
        link = &prefix->entries[*link].bucket_next;
    *link = prefix->entries[block].bucket_next;
    prefix->entries[block].bucket_next = PKV__NO_BLOCK;
    if (prefix->events != NULL)
        pkv__kv_events_removed(prefix->events, block,
                               prefix->pool->blocks[block].group);
}

uint32_t pkv__prefix_find(const pkv__prefix *prefix, uint64_t hash,
                          const int32_t *tokens, uint64_t salt, uint32_t parent,
                          uint32_t parent_generation)
{
    return pkv__prefix_find_group(prefix, 0, hash, tokens, salt, parent,
                                  parent_generation);
}

uint32_t pkv__prefix_find_group(const pkv__prefix *prefix, uint32_t group,
                                uint64_t hash, const int32_t *tokens,
                                uint64_t salt, uint32_t parent,
                                uint32_t parent_generation)
{
    const pkv__pool *pool = prefix->pool;
    uint64_t masked = hash & prefix->hash_mask;
    size_t bytes = pool->block_size * sizeof *tokens;
    for (uint32_t b = *bucket_of(prefix, masked); b != PKV__NO_BLOCK;
         b = prefix->entries[b].bucket_next) {
        const pkv__prefix_entry *e = &prefix->entries[b];
        if (e->hash == masked && e->salt == salt && e->parent == parent &&
            e->parent_generation == parent_generation &&
            pool->blocks[b].group == group &&
            memcmp(prefix->tokens + (size_t)b * pool->block_size, tokens,
                   bytes) == 0)
            return b;
    }
    return PKV__NO_BLOCK;
}

void pkv__prefix_hashes(const int32_t *tokens, uint32_t n,
                        uint32_t block_size, uint64_t salt, uint64_t *hashes)
{
    uint64_t parent_hash = 0;
    for (uint32_t j = 0; j < n; j++) {
        parent_hash = pkv__prefix_hash(
            parent_hash, tokens + (size_t)j * block_size, block_size, salt);
        hashes[j] = parent_hash;
    }
}

void pkv__prefix_lookup(const pkv__prefix *prefix, const int32_t *tokens,
                        uint32_t n_tokens, uint64_t salt,
                        const uint64_t *hashes, uint32_t num_hashes,
                        pkv__chain_link *links, uint32_t *n_hit)
{
    const pkv__pool *pool = prefix->pool;
    uint32_t bs = pool->block_size;
    uint32_t n_max = n_tokens ? (n_tokens - 1) / bs : 0;
    uint64_t parent_hash = 0;
    uint32_t parent = PKV__NULL_BLOCK;
    uint32_t parent_generation = pool->blocks[PKV__NULL_BLOCK].generation;
    uint32_t j = 0;
    for (; j < n_max; j++) {
        const int32_t *block_tokens = tokens + (size_t)j * bs;
        uint64_t h = j < num_hashes ? hashes[j]
                                    : pkv__prefix_hash(parent_hash,
                                                       block_tokens, bs, salt);
        uint32_t b = pkv__prefix_find(prefix, h, block_tokens, salt, parent,
                                     parent_generation);
        if (b == PKV__NO_BLOCK)
            break;
        links[j].hash = h;
        links[j].block = b;
        links[j].generation = pool->blocks[b].generation;
        parent_hash = h;
        parent = b;
        parent_generation = links[j].generation;
    }
    *n_hit = j;
}

void pkv__prefix_chain_init(pkv__prefix_chain *chain)
{
    memset(chain, 0, sizeof *chain);
}

void pkv__prefix_chain_release(pkv__prefix_chain *chain,
                               const pkv__pool *pool)
{
    pkv__free(&pool->alloc, chain->links, chain->capacity,
              sizeof *chain->links);
    pkv__prefix_chain_init(chain);
}

pkv_status pkv__prefix_chain_reserve(pkv__prefix_chain *chain,
                                     const pkv__pool *pool, uint32_t needed)
{
    void *links;
    size_t capacity = chain->capacity;
    pkv_status st = pkv__grow(&pool->alloc, chain->links, &capacity,
                              chain->num_links, needed, sizeof *chain->links,
                              &links);
    chain->links = links;
    chain->capacity = (uint32_t)capacity; /* < 2 * max_model_len <= 2^25 */
    return st;
}

pkv_status pkv__prefix_chain_adopt(pkv__prefix_chain *chain,
                                   const pkv__pool *pool,
                                   const pkv__chain_link *links, uint32_t n)
{
    if (chain->num_links != 0)
        return PKV_ERR_INVALID_ARGUMENT;
    pkv_status st = pkv__prefix_chain_reserve(chain, pool, n);
    if (st != PKV_OK)
        return st;
    if (n)
        memcpy(chain->links, links, n * sizeof *links);
    chain->num_links = n;
    return PKV_OK;
}

void pkv__prefix_insert(pkv__prefix *prefix, uint32_t block, uint64_t hash,
                        const int32_t *tokens, uint64_t salt, uint32_t parent,
                        uint32_t parent_generation,
                        const uint64_t *parent_hash)
{
    uint32_t bs = prefix->pool->block_size;
    pkv__prefix_entry *e = &prefix->entries[block];
    e->hash = hash & prefix->hash_mask;
    e->salt = salt;
    e->parent = parent;
    e->parent_generation = parent_generation;
    memcpy(prefix->tokens + (size_t)block * bs, tokens, bs * sizeof *tokens);
    uint32_t *head = bucket_of(prefix, e->hash);
    e->bucket_next = *head;
    *head = block;
    pkv__pool_mark_cached(prefix->pool, block);
    if (prefix->events != NULL)
        pkv__kv_events_stored(prefix->events, block, hash, parent_hash);
}

pkv_status pkv__prefix_register(pkv__prefix *prefix, pkv__prefix_chain *chain,
                                const pkv__table *table, const int32_t *tokens,
                                uint64_t salt)
{
    pkv__pool *pool = prefix->pool;
    uint32_t bs = pool->block_size;
    if (!pkv__prefix_chain_behind(chain, table->num_tokens, bs))
        return PKV_OK;
    uint32_t full = table->num_tokens / bs;
    pkv_status st = pkv__prefix_chain_reserve(chain, pool, full);
    if (st != PKV_OK)
        return st;
    for (uint32_t j = chain->num_links; j < full; j++) {
        const pkv__chain_link *up = j ? &chain->links[j - 1] : NULL;
        uint64_t parent_hash = up ? up->hash : 0;
        uint32_t parent = up ? up->block : PKV__NULL_BLOCK;
        uint32_t parent_generation =
            up ? up->generation : pool->blocks[PKV__NULL_BLOCK].generation;
        const int32_t *block_tokens = tokens + (size_t)j * bs;
        uint64_t h = pkv__prefix_hash(parent_hash, block_tokens, bs, salt);
        uint32_t b = pkv__prefix_find(prefix, h, block_tokens, salt, parent,
                                     parent_generation);
        if (b == PKV__NO_BLOCK) {
            b = table->blocks[j];
            /* Cached under another parent: it cannot also stand for this
             * chain, so the chain stops growing here. So it does at a
             * block a windowed group 0 dropped (its chain starts empty
             * after a swap-in or an import): the null block holds
             * nobody's KV. */
            if (b == PKV__NULL_BLOCK || pool->blocks[b].cached)
                break;
            pkv__prefix_insert(prefix, b, h, block_tokens, salt, parent,
                               parent_generation, up ? &parent_hash : NULL);
        }
        chain->links[j].hash = h;
        chain->links[j].block = b;
        chain->links[j].generation = pool->blocks[b].generation;
        chain->num_links = j + 1;
    }
    return PKV_OK;
}

void pkv__prefix_chain_truncate(pkv__prefix_chain *chain,
                                uint32_t n_full_blocks)
{
    if (n_full_blocks < chain->num_links)
        chain->num_links = n_full_blocks;
}
