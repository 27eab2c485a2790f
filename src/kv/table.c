/* SPDX-License-Identifier: MIT */
/* A sequence's block table (table.h): append, truncate, fork,
 * copy-on-write. */
#include "table.h"

#include <string.h>

void pkv__table_init(pkv__table *table)
{
    memset(table, 0, sizeof *table);
}

/* blocks[0 .. num_blocks) changed. */
static void stamp(pkv__table *table, pkv__pool *pool)
{
    table->version = ++pool->table_edits;
}

pkv_status pkv__table_reserve(pkv__table *table, const pkv__pool *pool,
                              uint32_t needed)
{
    void *blocks;
    size_t capacity = table->capacity;
    pkv_status st = pkv__grow(&pool->alloc, table->blocks, &capacity,
                              table->num_blocks, needed,
                              sizeof *table->blocks, &blocks);
    /* A table never needs more than max_model_len (at most 2^24) ids, so
     * its capacity stays far below 2^32. */
    table->blocks = blocks;
    table->capacity = (uint32_t)capacity;
    return st;
}

void pkv__table_release(pkv__table *table, pkv__pool *pool)
{
    pkv__table_truncate(table, pool, 0);
    pkv__free(&pool->alloc, table->blocks, table->capacity,
              sizeof *table->blocks);
    pkv__table_init(table);
}

/* Whether an append must first copy the last block: it is partly filled
 * (by this table's count) and someone else holds it too (refs > 1), or
 * the prefix cache does (a truncate inside a block of a prefix hit). */
static int needs_copy(const pkv__table *table, const pkv__pool *pool,
                      pkv__ref_reader refs, const void *context)
{
    if (table->num_tokens % pool->block_size == 0)
        return 0;
    uint32_t b = table->blocks[table->num_blocks - 1];
    uint64_t n = refs != NULL ? refs(context, b) : pool->blocks[b].ref_count;
    return n > 1 || pool->blocks[b].cached;
}

uint32_t pkv__table_blocks_needed(const pkv__table *table,
                                  const pkv__pool *pool, uint32_t n_new,
                                  pkv__ref_reader refs, const void *context)
{
    if (n_new == 0)
        return 0;
    uint64_t tokens = (uint64_t)table->num_tokens + n_new;
    uint32_t grow =
        pkv__blocks_for(tokens, pool->block_size) - table->num_blocks;
    return grow + (uint32_t)needs_copy(table, pool, refs, context);
}

pkv_status pkv__table_append(pkv__table *table, pkv__pool *pool,
                             uint32_t n_new, pkv__block_copy *copy)
{
    copy->src = PKV__NULL_BLOCK;
    copy->dst = PKV__NULL_BLOCK;
    if (n_new == 0)
        return PKV_OK;
    uint64_t tokens = (uint64_t)table->num_tokens + n_new;
    if (tokens > UINT32_MAX)
        return PKV_ERR_INVALID_ARGUMENT;
    uint32_t bs = pool->block_size;
    uint32_t target = pkv__blocks_for(tokens, bs);
    uint32_t grow = target - table->num_blocks;
    int cow = needs_copy(table, pool, NULL, NULL);
    /* Every check comes before the first change. */
    if (grow + (uint32_t)cow > pkv__pool_available(pool))
        return PKV_ERR_NO_BLOCKS;
    pkv_status st = pkv__table_reserve(table, pool, target);
    if (st != PKV_OK)
        return st;

    if (cow) {
        uint32_t last = table->num_blocks - 1;
        uint32_t src = table->blocks[last];
        uint32_t dst;
        pkv__pool_alloc(pool, 1, &dst);
        pkv__pool_decref(pool, src);
        table->blocks[last] = dst;
        copy->src = src;
        copy->dst = dst;
    }
    pkv__pool_alloc(pool, grow, table->blocks + table->num_blocks);
    table->num_blocks = target;
    table->num_tokens = (uint32_t)tokens;
    if (cow || grow > 0)
        stamp(table, pool);

    /* Update the fill of every block the new tokens touch. */
    uint32_t first = (uint32_t)((tokens - n_new) / bs);
    for (uint32_t i = first; i < target; i++) {
        uint64_t end = (uint64_t)(i + 1) * bs;
        uint32_t fill = end <= tokens ? bs : (uint32_t)(tokens % bs);
        pkv__pool_set_fill(pool, table->blocks[i], fill);
    }
    return PKV_OK;
}

void pkv__table_truncate(pkv__table *table, pkv__pool *pool,
                         uint32_t n_tokens)
{
    if (n_tokens >= table->num_tokens)
        return;
    uint32_t bs = pool->block_size;
    uint32_t keep = pkv__blocks_for(n_tokens, bs);
    if (table->num_blocks > keep)
        stamp(table, pool);
    while (table->num_blocks > keep) {
        uint32_t b = table->blocks[--table->num_blocks];
        if (b != PKV__NULL_BLOCK) /* dropped behind a window */
            pkv__pool_decref(pool, b);
    }
    if (table->first_held > keep)
        table->first_held = keep;
    table->num_tokens = n_tokens;
    uint32_t tail_fill = n_tokens % bs;
    if (keep == 0 || tail_fill == 0)
        return;
    uint32_t last = table->blocks[keep - 1];
    /* A block someone else holds, or the prefix cache, keeps its contents
     * and fill; our next append copies it (needs_copy). */
    if (!needs_copy(table, pool, NULL, NULL))
        pkv__pool_set_fill(pool, last, tail_fill);
}

pkv_status pkv__table_fork(pkv__table *dst, const pkv__table *src,
                           pkv__pool *pool)
{
    if (dst->num_blocks != 0 || dst->num_tokens != 0)
        return PKV_ERR_INVALID_ARGUMENT;
    pkv_status st = pkv__table_reserve(dst, pool, src->num_blocks);
    if (st != PKV_OK)
        return st;
    for (uint32_t i = 0; i < src->num_blocks; i++) {
        dst->blocks[i] = src->blocks[i];
        if (i >= src->first_held)
            pkv__pool_incref(pool, src->blocks[i]);
    }
    dst->num_blocks = src->num_blocks;
    dst->num_tokens = src->num_tokens;
    dst->first_held = src->first_held;
    stamp(dst, pool);
    return PKV_OK;
}

pkv_status pkv__table_adopt(pkv__table *table, pkv__pool *pool,
                            const uint32_t *blocks, uint32_t n)
{
    return pkv__table_adopt_from(table, pool, blocks, 0, n);
}

pkv_status pkv__table_adopt_from(pkv__table *table, pkv__pool *pool,
                                 const uint32_t *blocks, uint32_t first,
                                 uint32_t n)
{
    if (table->num_blocks != 0 || table->num_tokens != 0 || first > n ||
        (uint64_t)n * pool->block_size > UINT32_MAX)
        return PKV_ERR_INVALID_ARGUMENT;
    pkv_status st = pkv__table_reserve(table, pool, n);
    if (st != PKV_OK)
        return st;
    for (uint32_t i = 0; i < first; i++)
        table->blocks[i] = PKV__NULL_BLOCK;
    for (uint32_t i = first; i < n; i++) {
        table->blocks[i] = blocks[i - first];
        pkv__pool_incref(pool, blocks[i - first]);
    }
    table->first_held = first;
    table->num_blocks = n;
    table->num_tokens = n * pool->block_size;
    stamp(table, pool);
    return PKV_OK;
}

uint32_t pkv__table_drop_front(pkv__table *table, pkv__pool *pool,
                               uint32_t n)
{
    if (n > table->num_blocks)
        n = table->num_blocks;
    if (n <= table->first_held)
        return 0;
    uint32_t dropped = n - table->first_held;
    for (uint32_t i = table->first_held; i < n; i++) {
        pkv__pool_decref(pool, table->blocks[i]);
        table->blocks[i] = PKV__NULL_BLOCK;
    }
    table->first_held = n;
    stamp(table, pool);
    return dropped;
}

uint64_t pkv__table_slot(const pkv__table *table, const pkv__pool *pool,
                         uint32_t position)
{
    uint32_t bs = pool->block_size;
    return (uint64_t)table->blocks[position / bs] * bs + position % bs;
}
