/* SPDX-License-Identifier: MIT */
/* A sequence's block tables over the groups (seq_tables.h). */
#include "seq_tables.h"

uint32_t pkv__seq_held(const pkv__seq *seq)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++)
        n += pkv__table_held(pkv__seq_table_c(seq, g));
    return n;
}

void pkv__seq_tables_release(pkv__seq *seq, pkv__pool *pool)
{
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++)
        pkv__table_release(pkv__seq_table(seq, g), pool);
}

pkv_status pkv__seq_tables_reserve(pkv__seq *seq, const pkv__pool *pool,
                                   uint32_t n)
{
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++) {
        pkv__table *t = pkv__seq_table(seq, g);
        if (n > t->capacity) {
            pkv_status st = pkv__table_reserve(t, pool, n);
            if (st != PKV_OK)
                return st;
        }
    }
    return PKV_OK;
}

void pkv__seq_tables_truncate(pkv__seq *seq, pkv__pool *pool,
                              uint32_t n_tokens)
{
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++)
        pkv__table_truncate(pkv__seq_table(seq, g), pool, n_tokens);
}

pkv_status pkv__seq_tables_fork(pkv__seq *dst, const pkv__seq *src,
                                pkv__pool *pool)
{
    for (uint32_t g = 0; g < pkv__seq_groups(src); g++) {
        pkv_status st = pkv__table_fork(pkv__seq_table(dst, g),
                                        pkv__seq_table_c(src, g), pool);
        if (st != PKV_OK) {
            pkv__seq_tables_truncate(dst, pool, 0);
            return st;
        }
    }
    return PKV_OK;
}

uint32_t pkv__seq_tables_needed(const pkv__seq *seq, const pkv__pool *pool,
                                uint32_t n_new, pkv__ref_reader refs,
                                const void *context)
{
    uint32_t n = 0;
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++)
        n += pkv__table_blocks_needed(pkv__seq_table_c(seq, g), pool, n_new,
                                      refs, context);
    return n;
}

pkv_status pkv__seq_tables_append(pkv__seq *seq, pkv__pool *pool,
                                  uint32_t n_new, pkv__block_copy *copies)
{
    uint32_t groups = pkv__seq_groups(seq);
    if (groups > 1 && pkv__seq_tables_needed(seq, pool, n_new, NULL, NULL) >
                          pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t g = 0; g < groups; g++) {
        pkv__table *t = pkv__seq_table(seq, g);
        uint32_t before = t->num_blocks;
        pkv_status st = pkv__table_append(t, pool, n_new, &copies[g]);
        /* Only memory for the ids can fail here, and the plan reserved
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

uint32_t pkv__seq_tables_slide(pkv__seq *seq, pkv__pool *pool,
                               const pkv__groups *groups, uint32_t next)
{
    uint32_t dropped = 0;
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++)
        dropped += pkv__table_drop_front(
            pkv__seq_table(seq, g), pool,
            pkv__groups_first_seen(groups, g, pool->block_size, next));
    return dropped;
}

int pkv__seq_window_lost(const pkv__seq *seq, const pkv__groups *groups,
                         uint32_t block_size, uint32_t next)
{
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++)
        if (pkv__seq_table_c(seq, g)->first_held >
            pkv__groups_first_seen(groups, g, block_size, next))
            return 1;
    return 0;
}

uint32_t pkv__groups_blocks_from(const pkv__groups *groups,
                                 uint32_t block_size, uint32_t next,
                                 uint32_t tokens)
{
    uint32_t n = 0, all = pkv__blocks_for(tokens, block_size);
    for (uint32_t g = 0; g < groups->num_groups; g++)
        n += all - pkv__groups_first_seen(groups, g, block_size, next);
    return n;
}

pkv_status pkv__seq_tables_swap_in(pkv__seq *seq, pkv__pool *pool,
                                   const pkv__groups *groups, uint32_t next,
                                   uint32_t tokens)
{
    if (pkv__groups_blocks_from(groups, pool->block_size, next, tokens) >
        pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    for (uint32_t g = 0; g < pkv__seq_groups(seq); g++) {
        pkv__table *t = pkv__seq_table(seq, g);
        uint32_t first =
            pkv__groups_first_seen(groups, g, pool->block_size, next);
        pkv__block_copy none;
        pkv_status st = pkv__table_adopt_from(t, pool, NULL, first, first);
        if (st == PKV_OK)
            st = pkv__table_append(t, pool, tokens - first * pool->block_size,
                                   &none);
        if (st != PKV_OK) {
            pkv__seq_tables_truncate(seq, pool, 0);
            return st;
        }
        for (uint32_t i = first; g > 0 && i < t->num_blocks; i++)
            pkv__pool_set_group(pool, t->blocks[i], g);
    }
    return PKV_OK;
}

uint64_t pkv__groups_peak_blocks(const pkv__groups *groups,
                                 uint32_t block_size, uint64_t tokens,
                                 uint32_t chunk)
{
    uint64_t all = pkv__blocks_for(tokens, block_size);
    uint64_t n = 0;
    for (uint32_t g = 0; g < groups->num_groups; g++) {
        uint32_t w = pkv__groups_window(groups, g);
        /* A chunk's rows and the window of its first row, plus a block
         * each end may start inside. */
        uint64_t windowed =
            pkv__blocks_for((uint64_t)w + chunk, block_size) + 1;
        n += w == 0 || windowed > all ? all : windowed;
    }
    return n;
}
