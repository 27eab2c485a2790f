/* SPDX-License-Identifier: MIT */
/* A sequence's KV (kv.h): its tables over the groups, changed together,
 * and its chain. */
#include "kv/kv.h"
#include "kv/prefix_groups.h"

#include <stddef.h>
#include <string.h>

/* Bytes of a record with `groups` tables. */
static size_t record_bytes(uint32_t groups)
{
    return offsetof(pkv__kv_record, tables) + groups * sizeof(pkv__table);
}

pkv_status pkv__kv_seq_init(const pkv__kv *kv, pkv__kv_seq *s,
                            const pkv__allocator *alloc,
                            const int32_t *prompt, uint32_t prompt_len,
                            uint64_t salt)
{
    uint32_t bs = kv->pool.block_size, groups = kv->groups.num_groups;
    uint32_t n = prompt_len > 0 ? (prompt_len - 1) / bs : 0;
    memset(s, 0, sizeof *s);
    s->stage = PKV__NO_STAGE;
    /* calloc: every table empty, as pkv__table_init leaves it. */
    pkv__kv_record *r = pkv__calloc(alloc, 1, record_bytes(groups));
    uint64_t *hashes =
        n > 0 ? pkv__calloc(alloc, n, sizeof *hashes) : NULL;
    if (r == NULL || (n > 0 && hashes == NULL)) {
        pkv__free(alloc, r, 1, record_bytes(groups));
        pkv__free(alloc, hashes, n, sizeof *hashes);
        return PKV_ERR_OUT_OF_MEMORY;
    }
    r->groups = groups;
    r->salt = salt;
    r->prompt_hashes = hashes;
    r->num_prompt_hashes = n;
    r->prompt_hashes_size = n;
    if (n > 0)
        pkv__prefix_hashes(prompt, n, bs, salt, hashes);
    s->record = r;
    s->tables = r->tables;
    return PKV_OK;
}

void pkv__kv_seq_free(pkv__kv_seq *s, const pkv__allocator *alloc)
{
    pkv__kv_record *r = s->record;
    if (r == NULL)
        return;
    pkv__free(alloc, r->prompt_hashes, r->prompt_hashes_size,
              sizeof *r->prompt_hashes);
    pkv__free(alloc, r->swap, r->swap_size, 1);
    pkv__free(alloc, r->swap_blocks, r->swap_num_blocks,
              sizeof *r->swap_blocks);
    pkv__free(alloc, r, 1, record_bytes(r->groups));
    memset(s, 0, sizeof *s);
}

pkv_status pkv__kv_reserve(const pkv__kv *kv, pkv__kv_seq *s, uint32_t n,
                           uint32_t links)
{
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
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

uint32_t pkv__kv_chain_lookup(const pkv__kv *kv, const pkv__kv_seq *s,
                              const int32_t *tokens, uint32_t n,
                              pkv__chain_link *links)
{
    const pkv__kv_record *r = s->record;
    uint32_t h = 0;
    pkv__prefix_lookup(&kv->prefix, tokens, n, r->salt, r->prompt_hashes,
                       r->num_prompt_hashes, links, &h);
    return h;
}

uint64_t pkv__kv_chain_hash(const pkv__kv *kv, const pkv__kv_seq *s,
                            uint32_t j, uint64_t parent_hash,
                            const int32_t *block_tokens)
{
    const pkv__kv_record *r = s->record;
    return j < r->num_prompt_hashes
               ? r->prompt_hashes[j]
               : pkv__prefix_hash(parent_hash, block_tokens,
                                  kv->pool.block_size, r->salt);
}

pkv__kv_hit pkv__kv_lookup(const pkv__kv *kv, const pkv__kv_seq *s,
                           const int32_t *tokens, uint32_t n,
                           pkv__chain_link *links, uint32_t *ids)
{
    uint32_t bs = kv->pool.block_size, group_ids = 0;
    uint32_t h = pkv__kv_chain_lookup(kv, s, tokens, n, links);
    /* The other groups' blocks after group 0's: written past where group
     * 0's land once h is known. */
    uint32_t room = n / bs + 1;
    h = pkv__prefix_group_hits(&kv->prefix, &kv->groups, links, h, tokens,
                               s->record->salt, ids + room, &group_ids);
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
    for (uint32_t g = 0; st == PKV_OK && g < kv->groups.num_groups; g++) {
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
    for (uint32_t g = 0; g < kv->groups.num_groups; g++)
        pkv__table_truncate(&s->tables[g], &kv->pool, n_tokens);
}

uint32_t pkv__kv_needed(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t n_new, pkv__ref_reader refs,
                        const void *context)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++)
        n += pkv__table_blocks_needed(&s->tables[g], &kv->pool, n_new, refs,
                                      context);
    return n;
}

uint32_t pkv__kv_copied(const pkv__kv *kv, const pkv__kv_seq *s,
                        uint32_t n_new, pkv__ref_reader refs,
                        const void *context, uint32_t *blocks)
{
    uint32_t n = 0, bs = kv->pool.block_size;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
        const pkv__table *t = &s->tables[g];
        uint32_t grow =
            pkv__blocks_for((uint64_t)t->num_tokens + n_new, bs) -
            t->num_blocks;
        if (n_new > 0 && pkv__table_blocks_needed(t, &kv->pool, n_new, refs,
                                                  context) > grow)
            blocks[n++] = t->blocks[t->num_blocks - 1];
    }
    return n;
}

pkv_status pkv__kv_append(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_new,
                          pkv__block_copy *copies)
{
    pkv__pool *pool = &kv->pool;
    /* All or nothing over the groups: one table's append checks only its
     * own need. The exact need is counted only when the pool holds
     * fewer blocks than the most it can be: every table growing as far
     * and copying its last block. */
    uint32_t groups = kv->groups.num_groups;
    uint64_t grow = pkv__blocks_for((uint64_t)pkv__kv_tokens(s) + n_new,
                                    pool->block_size) -
                    pkv__kv_blocks(s);
    if ((grow + 1) * groups > pkv__pool_available(pool) &&
        pkv__kv_needed(kv, s, n_new, NULL, NULL) > pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t g = 0; g < kv->groups.num_groups; g++) {
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
        /* A quantized cache's partly filled block is in the sequence's
         * tail, not in the arena: a copy-on-write has nothing to copy. */
        if (kv->stage_bytes != 0)
            copies[g].src = copies[g].dst = PKV__NULL_BLOCK;
    }
    return PKV_OK;
}

pkv_status pkv__kv_register(pkv__kv *kv, pkv__kv_seq *s,
                            const int32_t *tokens, uint32_t *first_new)
{
    *first_new = s->chain.num_links;
    pkv_status st = pkv__prefix_register(&kv->prefix, &s->chain,
                                         &s->tables[0], tokens,
                                         s->record->salt);
    pkv__prefix_register_groups(&kv->prefix, &kv->groups, s, tokens,
                                *first_new);
    return st;
}

uint32_t pkv__kv_slide_windows(pkv__kv *kv, pkv__kv_seq *s, uint32_t next)
{
    uint32_t dropped = 0, bs = kv->pool.block_size;
    /* A group without a window sees every block: only the windowed ones
     * slide. */
    for (uint32_t g = kv->groups.first_windowed; g < kv->groups.num_groups;
         g++) {
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
    for (uint32_t g = 0; g < kv->groups.num_groups; g++)
        if (s->tables[g].first_held >
            pkv__groups_first_seen(&kv->groups, g, bs, next))
            return 1;
    return 0;
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

uint32_t pkv__kv_cut(pkv__kv *kv, pkv__kv_seq *s, uint32_t computed,
                     uint32_t keep)
{
    uint32_t bs = kv->pool.block_size;
    uint32_t start = keep / bs * bs; /* of the block the cut falls in */
    /* A quantized block's rows exist only quantised once it is frozen;
     * without a window holding them the cut drops the block. A block
     * others hold (a fork, the prefix cache) stays as it is: the next
     * append copies it. */
    if (keep > start && kv->max_stages > 0 && start + bs <= computed &&
        !pkv__rollback_restore(&kv->rollback, kv->device, s->stage,
                               start / bs))
        keep = start;
    /* A row at `keep` would see blocks a windowed group dropped. */
    if (pkv__kv_window_lost(kv, s, keep))
        keep = 0;
    pkv__rollback_forget_from(&kv->rollback, s->stage, keep / bs);
    pkv__kv_truncate(kv, s, keep);
    pkv__prefix_chain_truncate(&s->chain, keep / bs);
    return keep;
}

void pkv__kv_forget_tokens(pkv__kv *kv, pkv__kv_seq *s, uint32_t n_tokens)
{
    uint32_t whole = n_tokens / kv->pool.block_size;
    if (s->record->num_prompt_hashes > whole)
        s->record->num_prompt_hashes = whole;
}

