/* SPDX-License-Identifier: MIT */
/* A sequence's KV (kv.h): its tables over the groups, changed together,
 * and its chain. */
#include "kv/kv.h"
#include "kv/prefix_groups.h"

#include <string.h>

pkv_status pkv__kv_seq_init(const pkv__kv *kv, pkv__kv_seq *s,
                            const pkv__allocator *alloc,
                            const int32_t *prompt, uint32_t prompt_len,
                            uint64_t salt)
{
    uint32_t bs = kv->pool.block_size;
    uint32_t n = prompt_len > 0 ? (prompt_len - 1) / bs : 0;
    memset(s, 0, sizeof *s);
    /* calloc: every table empty, as pkv__table_init leaves it. */
    s->tables = pkv__calloc(alloc, kv->groups.num_groups, sizeof *s->tables);
    s->prompt_hashes =
        n > 0 ? pkv__calloc(alloc, n, sizeof *s->prompt_hashes) : NULL;
    if (s->tables == NULL || (n > 0 && s->prompt_hashes == NULL)) {
        pkv__free(alloc, s->tables, kv->groups.num_groups, sizeof *s->tables);
        pkv__free(alloc, s->prompt_hashes, n, sizeof *s->prompt_hashes);
        memset(s, 0, sizeof *s);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    s->groups = kv->groups.num_groups;
    s->salt = salt;
    s->num_prompt_hashes = n;
    s->prompt_hashes_size = n;
    if (n > 0)
        pkv__prefix_hashes(prompt, n, bs, salt, s->prompt_hashes);
    return PKV_OK;
}

void pkv__kv_seq_free(pkv__kv_seq *s, const pkv__allocator *alloc)
{
    pkv__free(alloc, s->tables, s->groups, sizeof *s->tables);
    pkv__free(alloc, s->prompt_hashes, s->prompt_hashes_size,
              sizeof *s->prompt_hashes);
    memset(s, 0, sizeof *s);
}

uint32_t pkv__kv_held(const pkv__kv_seq *s)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < s->groups; g++)
        n += pkv__table_held(&s->tables[g]);
    return n;
}

void pkv__kv_drop(pkv__kv *kv, pkv__kv_seq *s)
{
    for (uint32_t g = 0; g < s->groups; g++)
        pkv__table_release(&s->tables[g], &kv->pool);
    pkv__prefix_chain_release(&s->chain, &kv->pool);
}

pkv_status pkv__kv_reserve(const pkv__kv *kv, pkv__kv_seq *s, uint32_t n,
                           uint32_t links)
{
    for (uint32_t g = 0; g < s->groups; g++) {
        pkv__table *t = &s->tables[g];
        if (n > t->capacity) {
            pkv_status st = pkv__table_reserve(t, &kv->pool, n);
            if (st != PKV_OK)
                return st;
        }
    }
    return links > s->chain.capacity
               ? pkv__prefix_chain_reserve(&s->chain, &kv->pool, links)
               : PKV_OK;
}

pkv__kv_hit pkv__kv_lookup(const pkv__kv *kv, const pkv__kv_seq *s,
                           const int32_t *tokens, uint32_t n,
                           pkv__chain_link *links, uint32_t *ids)
{
    uint32_t bs = kv->pool.block_size, h = 0, group_ids = 0;
    pkv__prefix_lookup(&kv->prefix, tokens, n, s->salt, s->prompt_hashes,
                       s->num_prompt_hashes, links, &h);
    /* The other groups' blocks after group 0's: written past where group
     * 0's land once h is known. */
    uint32_t room = n / bs + 1;
    h = pkv__prefix_group_hits(&kv->prefix, &kv->groups, links, h, tokens,
                               s->salt, ids + room, &group_ids);
    uint32_t first = pkv__groups_first_seen(&kv->groups, 0, bs, h * bs);
    for (uint32_t j = first; j < h; j++)
        ids[j - first] = links[j].block;
    memmove(ids + (h - first), ids + room, group_ids * sizeof *ids);
    pkv__kv_hit hit = {h, h - first + group_ids};
    return hit;
}

pkv_status pkv__kv_adopt(pkv__kv *kv, pkv__kv_seq *s,
                         const pkv__chain_link *links, const uint32_t *ids,
                         uint32_t blocks)
{
    uint32_t bs = kv->pool.block_size;
    pkv_status st = PKV_OK;
    for (uint32_t g = 0; st == PKV_OK && g < s->groups; g++) {
        uint32_t first = pkv__groups_first_seen(&kv->groups, g, bs,
                                                blocks * bs);
        st = pkv__table_adopt_from(&s->tables[g], &kv->pool, ids, first,
                                   blocks);
        ids += blocks - first;
    }
    if (st == PKV_OK)
        st = pkv__prefix_chain_adopt(&s->chain, &kv->pool, links, blocks);
    return st;
}

void pkv__kv_truncate(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_tokens)
{
    for (uint32_t g = 0; g < s->groups; g++)
        pkv__table_truncate(&s->tables[g], &kv->pool, n_tokens);
}

pkv_status pkv__kv_fork(pkv__kv *kv, pkv__kv_seq *dst,
                        const pkv__kv_seq *src)
{
    pkv_status st = PKV_OK;
    for (uint32_t g = 0; st == PKV_OK && g < src->groups; g++)
        st = pkv__table_fork(&dst->tables[g], &src->tables[g], &kv->pool);
    if (st == PKV_OK)
        st = pkv__prefix_chain_adopt(&dst->chain, &kv->pool,
                                     src->chain.links, src->chain.num_links);
    if (st != PKV_OK)
        pkv__kv_drop(kv, dst);
    return st;
}

uint32_t pkv__kv_needed(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t n_new, pkv__ref_reader refs,
                        const void *context)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < s->groups; g++)
        n += pkv__table_blocks_needed(&s->tables[g], &kv->pool, n_new, refs,
                                      context);
    return n;
}

pkv_status pkv__kv_append(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_new,
                          pkv__block_copy *copies)
{
    pkv__pool *pool = &kv->pool;
    /* All or nothing over the groups: one table's append checks only its
     * own need. */
    if (pkv__kv_needed(kv, s, n_new, NULL, NULL) > pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t g = 0; g < s->groups; g++) {
        pkv__table *t = &s->tables[g];
        uint32_t before = t->num_blocks;
        pkv_status st = pkv__table_append(t, pool, n_new, &copies[g]);
        /* Only memory for the ids can fail here, and the caller reserved
         * it (a debug build traps a pkv bug in the caller). */
        if (st != PKV_OK)
            return st;
        /* The pool counts the new blocks as group 0's until told. */
        for (uint32_t i = before; g > 0 && i < t->num_blocks; i++)
            pkv__pool_set_group(pool, t->blocks[i], g);
        if (g > 0 && copies[g].dst != PKV__NULL_BLOCK)
            pkv__pool_set_group(pool, copies[g].dst, g);
    }
    return PKV_OK;
}

pkv_status pkv__kv_register(pkv__kv *kv, pkv__kv_seq *s,
                            const int32_t *tokens, uint32_t *first_new)
{
    *first_new = s->chain.num_links;
    pkv_status st = pkv__prefix_register(&kv->prefix, &s->chain,
                                         &s->tables[0], tokens, s->salt);
    pkv__prefix_register_groups(&kv->prefix, &kv->groups, s, tokens,
                                *first_new);
    return st;
}

uint32_t pkv__kv_slide(pkv__kv *kv, pkv__kv_seq *s, uint32_t next)
{
    uint32_t dropped = 0, bs = kv->pool.block_size;
    for (uint32_t g = 0; g < s->groups; g++) {
        /* A group without a window sees every block: its table is not
         * read. */
        uint32_t first = pkv__groups_first_seen(&kv->groups, g, bs, next);
        if (first > 0)
            dropped += pkv__table_drop_front(&s->tables[g], &kv->pool, first);
    }
    return dropped;
}

int pkv__kv_window_lost(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t next)
{
    uint32_t bs = kv->pool.block_size;
    for (uint32_t g = 0; g < s->groups; g++)
        if (s->tables[g].first_held >
            pkv__groups_first_seen(&kv->groups, g, bs, next))
            return 1;
    return 0;
}

uint32_t pkv__kv_blocks_from(const pkv__kv *kv, uint32_t next,
                             uint32_t tokens)
{
    uint32_t bs = kv->pool.block_size;
    uint32_t n = 0, all = pkv__blocks_for(tokens, bs);
    for (uint32_t g = 0; g < kv->groups.num_groups; g++)
        n += all - pkv__groups_first_seen(&kv->groups, g, bs, next);
    return n;
}

pkv_status pkv__kv_swap_in(pkv__kv *kv, pkv__kv_seq *s, uint32_t next,
                           uint32_t tokens)
{
    pkv__pool *pool = &kv->pool;
    uint32_t bs = pool->block_size;
    if (pkv__kv_blocks_from(kv, next, tokens) > pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t g = 0; g < s->groups; g++) {
        pkv__table *t = &s->tables[g];
        uint32_t first = pkv__groups_first_seen(&kv->groups, g, bs, next);
        pkv__block_copy none;
        pkv_status st = pkv__table_adopt_from(t, pool, NULL, first, first);
        if (st == PKV_OK)
            st = pkv__table_append(t, pool, tokens - first * bs, &none);
        if (st != PKV_OK) {
            pkv__kv_truncate(kv, s, 0);
            return st;
        }
        for (uint32_t i = first; g > 0 && i < t->num_blocks; i++)
            pkv__pool_set_group(pool, t->blocks[i], g);
    }
    return PKV_OK;
}

uint64_t pkv__kv_peak_blocks(const pkv__kv *kv, uint64_t tokens,
                             uint32_t chunk)
{
    uint32_t bs = kv->pool.block_size;
    uint64_t all = pkv__blocks_for(tokens, bs);
    uint64_t n = 0;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
        uint32_t w = pkv__groups_window(&kv->groups, g);
        /* A chunk's rows and the window of its first row, plus a block
         * each end may start inside. */
        uint64_t windowed = pkv__blocks_for((uint64_t)w + chunk, bs) + 1;
        n += w == 0 || windowed > all ? all : windowed;
    }
    return n;
}
