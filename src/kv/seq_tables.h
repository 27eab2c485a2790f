/* SPDX-License-Identifier: MIT */
/*
 * A sequence's block tables, one per group of layers (groups.h), changed
 * together: every group holds the same tokens, and a windowed group drops
 * the blocks behind its window. With one group these are table.h's
 * functions on the sequence's table.
 */
#ifndef PKV_SEQ_TABLES_H
#define PKV_SEQ_TABLES_H

#include "groups.h"
#include "seq.h"

/* Blocks the sequence holds references on, over every group. */
uint32_t pkv__seq_held(const pkv__seq *seq);

/* Release every table (table.h). */
void pkv__seq_tables_release(pkv__seq *seq, pkv__pool *pool);

/* Room for n block ids in every table. */
pkv_status pkv__seq_tables_reserve(pkv__seq *seq, const pkv__pool *pool,
                                   uint32_t n);

/* Keep the first n_tokens tokens in every table. */
void pkv__seq_tables_truncate(pkv__seq *seq, pkv__pool *pool,
                              uint32_t n_tokens);

/* Make the empty tables of dst share every block of src's. All or
 * nothing. */
pkv_status pkv__seq_tables_fork(pkv__seq *dst, const pkv__seq *src,
                                pkv__pool *pool);

/* Give slots to n_new more tokens in every table; copies[g] is group g's
 * copy-on-write (table.h). All or nothing for the pool. */
pkv_status pkv__seq_tables_append(pkv__seq *seq, pkv__pool *pool,
                                  uint32_t n_new, pkv__block_copy *copies);

/* Blocks the append of n_new tokens takes, over every group
 * (pkv__table_blocks_needed). */
uint32_t pkv__seq_tables_needed(const pkv__seq *seq, const pkv__pool *pool,
                                uint32_t n_new, pkv__ref_reader refs,
                                const void *context);

/* In each windowed group, drop the blocks that lie wholly behind the
 * window of the row at token `next` (the sequence's next row): no later
 * row can see them. Returns the blocks dropped. */
uint32_t pkv__seq_tables_slide(pkv__seq *seq, pkv__pool *pool,
                               const pkv__groups *groups, uint32_t next);

/* Whether a row at token `next` would see a block a windowed group has
 * dropped (a cut back to `next` then needs the KV computed again). */
int pkv__seq_window_lost(const pkv__seq *seq, const pkv__groups *groups,
                         uint32_t block_size, uint32_t next);

/* Blocks a sequence whose next row is at token `next` holds in all its
 * groups once its tables reach `tokens` tokens, each windowed group from
 * the first block that row sees (a swap's: out and back in). */
uint32_t pkv__groups_blocks_from(const pkv__groups *groups,
                                 uint32_t block_size, uint32_t next,
                                 uint32_t tokens);

/* Give the empty tables slots for `tokens` tokens, each windowed group's
 * from the first block the row at token `next` sees (the blocks before
 * are dropped): a swapped sequence coming back. All or nothing. */
pkv_status pkv__seq_tables_swap_in(pkv__seq *seq, pkv__pool *pool,
                                   const pkv__groups *groups, uint32_t next,
                                   uint32_t tokens);

/* The most blocks a sequence of `tokens` tokens holds at once, over every
 * group, when it computes at most `chunk` rows a step: every block in a
 * group without a window, the window's and a chunk's in a windowed one. */
uint64_t pkv__groups_peak_blocks(const pkv__groups *groups,
                                 uint32_t block_size, uint64_t tokens,
                                 uint32_t chunk);

#endif
