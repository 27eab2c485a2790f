/* SPDX-License-Identifier: MIT */
/* The prefix cache with groups of layers (prefix_groups.h). */
#include "prefix_groups.h"

uint64_t pkv__prefix_group_hash(uint64_t hash, uint32_t g)
{
    return pkv__prefix_hash(hash, NULL, 0, 0x9e3779b97f4a7c15ull * g);
}

/* Group g's cached block for chain link j (tokens: the block's), or
 * PKV__NO_BLOCK. */
static uint32_t find(const pkv__prefix *prefix, uint32_t g,
                     const pkv__chain_link *link, const int32_t *tokens,
                     uint64_t salt)
{
    return pkv__prefix_find_group(prefix, g,
                                  pkv__prefix_group_hash(link->hash, g),
                                  tokens, salt, link->block,
                                  link->generation);
}

uint32_t pkv__prefix_group_hits(const pkv__prefix *prefix,
                                const pkv__groups *groups,
                                const pkv__chain_link *links, uint32_t n,
                                const int32_t *tokens, uint64_t salt,
                                uint32_t *ids, uint32_t *n_ids)
{
    uint32_t bs = prefix->pool->block_size;
    uint32_t h = n;
    /* The highest block a hit of h would need and no cache holds: a hit
     * must then stop before it. Each try looks at h's windows, below
     * the last miss. */
    for (int missed = 1; missed && h > 0;) {
        missed = 0;
        for (uint32_t g = 1; g < groups->num_groups && !missed; g++) {
            uint32_t lo = pkv__groups_first_seen(groups, g, bs, h * bs);
            for (uint32_t j = h; j-- > lo;)
                if (find(prefix, g, &links[j], tokens + (size_t)j * bs,
                         salt) == PKV__NO_BLOCK) {
                    h = j;
                    missed = 1;
                    break;
                }
        }
    }
    uint32_t k = 0;
    for (uint32_t g = 1; g < groups->num_groups; g++)
        for (uint32_t j = pkv__groups_first_seen(groups, g, bs, h * bs); j < h;
             j++)
            ids[k++] = find(prefix, g, &links[j], tokens + (size_t)j * bs,
                            salt);
    *n_ids = k;
    return h;
}

void pkv__prefix_register_groups(pkv__prefix *prefix,
                                 const pkv__groups *groups,
                                 const pkv__kv_seq *s, const int32_t *tokens,
                                 uint32_t from)
{
    const pkv__pool *pool = prefix->pool;
    uint32_t bs = pool->block_size;
    const pkv__prefix_chain *chain = &s->chain;
    for (uint32_t g = 1; g < groups->num_groups; g++) {
        const pkv__table *t = pkv__kv_table(s, g);
        uint32_t j = from > t->first_held ? from : t->first_held;
        for (; j < chain->num_links; j++) {
            const int32_t *block_tokens = tokens + (size_t)j * bs;
            uint32_t b = t->blocks[j];
            if (pool->blocks[b].cached ||
                find(prefix, g, &chain->links[j], block_tokens,
                     s->record->salt) != PKV__NO_BLOCK)
                continue;
            uint64_t parent_hash =
                j ? pkv__prefix_group_hash(chain->links[j - 1].hash, g) : 0;
            pkv__prefix_insert(
                prefix, b, pkv__prefix_group_hash(chain->links[j].hash, g),
                block_tokens, s->record->salt, chain->links[j].block,
                chain->links[j].generation, j ? &parent_hash : NULL);
        }
    }
}
