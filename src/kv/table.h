/* SPDX-License-Identifier: MIT */
/*
 * Block table of one sequence: logical block i holds the sequence's tokens
 * [i * block_size, (i + 1) * block_size). Tables grow on demand, one block at
 * a time, so a sequence never holds more than one partly filled block.
 *
 * Blocks may be shared with other tables (fork, prefix hits). A shared block
 * is never written: the first append into a shared, partly filled last block
 * copies it (copy-on-write) and reports the pair the backend must copy.
 */
#ifndef PKV_TABLE_H
#define PKV_TABLE_H

#include "pool.h"

typedef struct pkv__table {
    uint32_t *blocks;
    /* Stamped by every change to blocks[0 .. num_blocks) with a count no
     * other table state ever had (pkv__pool.table_edits), so that a
     * backend holding a copy of the blocks knows whether it is current
     * without comparing them. 0: empty since pkv__table_init. */
    uint64_t version;
    uint32_t capacity; /* ids blocks has room for (32 bits: a sequence's
                          step fields fit two cache lines, seq.h) */
    uint32_t num_blocks;
    uint32_t num_tokens; /* tokens that have slots */
    /* Blocks [0, first_held) were dropped behind a window
     * (pkv__table_drop_front): PKV__NULL_BLOCK, holding nothing. 0 in a
     * table of a group without a window. */
    uint32_t first_held;
} pkv__table;

/* Blocks the table holds references on. */
static inline uint32_t pkv__table_held(const pkv__table *table)
{
    return table->num_blocks - table->first_held;
}

/* Blocks that hold `tokens` tokens. */
static inline uint32_t pkv__blocks_for(uint64_t tokens, uint32_t block_size)
{
    return (uint32_t)((tokens + block_size - 1) / block_size);
}

/* A block copy the backend must perform before writing into dst. */
typedef struct pkv__block_copy {
    uint32_t src;
    uint32_t dst;
} pkv__block_copy;

void pkv__table_init(pkv__table *table);

/* Drop every block, tail first (so that when cached blocks are later
 * evicted in LRU order, a chain loses its tail before its head), and
 * release the table's memory. The table is left empty and reusable. */
void pkv__table_release(pkv__table *table, pkv__pool *pool);

/* Room for n block ids, so that appends up to that many blocks, an adopt
 * of n or a fork of n cannot fail for memory. Nothing observable changes
 * on failure. */
pkv_status pkv__table_reserve(pkv__table *table, const pkv__pool *pool,
                              uint32_t n);

/* A block's reference count as a caller counts them (the scheduler, as
 * they will be once its plan is applied). */
typedef uint64_t (*pkv__ref_reader)(const void *context, uint32_t block);

/* Blocks an append of n_new tokens would take from the pool, copy-on-write
 * included, with references read by refs(context, block) (refs NULL: the
 * pool's counts). Pure. */
uint32_t pkv__table_blocks_needed(const pkv__table *table,
                                  const pkv__pool *pool, uint32_t n_new,
                                  pkv__ref_reader refs, const void *context);

/* Give slots to n_new more tokens. If the last block is shared and partly
 * filled it is first replaced by a private copy, reported in *copy
 * (copy->dst == PKV__NULL_BLOCK when there is none); a private one is
 * written in place and leaves the prefix cache. All or nothing:
 * PKV_ERR_NO_BLOCKS or PKV_ERR_OUT_OF_MEMORY leave table and pool as
 * they were. */
pkv_status pkv__table_append(pkv__table *table, pkv__pool *pool,
                             uint32_t n_new, pkv__block_copy *copy);

/* Keep the first n_tokens tokens (n_tokens <= num_tokens) and release the
 * blocks past them, tail first. A cached block that becomes partly filled
 * and is not shared leaves the prefix cache, since it will be written. */
void pkv__table_truncate(pkv__table *table, pkv__pool *pool,
                         uint32_t n_tokens);

/* Make the empty table dst share every block of src. All or nothing. */
pkv_status pkv__table_fork(pkv__table *dst, const pkv__table *src,
                           pkv__pool *pool);

/* Start the empty table with n full blocks found in the prefix cache,
 * taking a reference on each. All or nothing. */
pkv_status pkv__table_adopt(pkv__table *table, pkv__pool *pool,
                            const uint32_t *blocks, uint32_t n);

/* Drop the blocks before block n that the table still holds (a windowed
 * group's blocks that no later row can see): their references go back to
 * the pool and their ids become PKV__NULL_BLOCK. Returns how many it
 * dropped. */
uint32_t pkv__table_drop_front(pkv__table *table, pkv__pool *pool,
                               uint32_t n);

/* The same for a windowed group's table: blocks [0, first) are dropped
 * (PKV__NULL_BLOCK), blocks [first, n) are blocks[0 .. n - first). */
pkv_status pkv__table_adopt_from(pkv__table *table, pkv__pool *pool,
                                 const uint32_t *blocks, uint32_t first,
                                 uint32_t n);

/* The cache slot (block * block_size + offset) of the token at position. */
uint64_t pkv__table_slot(const pkv__table *table, const pkv__pool *pool,
                         uint32_t position);

#endif
