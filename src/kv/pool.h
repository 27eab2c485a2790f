/* SPDX-License-Identifier: MIT */
/*
 * Block pool: N fixed-size blocks, block 0 reserved as the null block.
 *
 * Every block is in exactly one state:
 *   used         ref_count > 0 (or the reserved null block)
 *   free         ref_count 0, holds no cached prefix: in the free queue
 *   cached-free  ref_count 0, holds a cached prefix: in the LRU queue
 *
 * Allocation takes free blocks first (FIFO), then evicts cached-free blocks
 * least recently freed first. Both queues are intrusive doubly linked lists
 * over the block array, so allocate, free and revive are O(1).
 */
#ifndef PKV_POOL_H
#define PKV_POOL_H

#include "alloc.h"

#include <stdint.h>

#define PKV__NULL_BLOCK 0u
#define PKV__NO_BLOCK UINT32_MAX
/* The most groups of layers an engine makes (groups.h): the pool counts
 * each one's blocks. */
#define PKV__MAX_GROUPS 64u

enum pkv__block_state {
    PKV__BLOCK_RESERVED = 0,
    PKV__BLOCK_FREE = 1,
    PKV__BLOCK_CACHED_FREE = 2,
    PKV__BLOCK_USED = 3
};

typedef struct pkv__block {
    uint32_t ref_count;
    uint32_t prev; /* queue links while free or cached-free */
    uint32_t next;
    uint32_t fill;       /* tokens held, 0..block_size (a table truncated
                            inside a shared or cached block uses fewer) */
    uint32_t generation; /* changes whenever the contents may change or the
                            block leaves the prefix cache (see prefix.h) */
    uint8_t state;       /* enum pkv__block_state */
    uint8_t cached;      /* registered in the prefix cache */
    uint8_t group;       /* the group of layers whose KV it holds */
} pkv__block;

typedef struct pkv__queue {
    uint32_t head;
    uint32_t tail;
} pkv__queue;

/* Called when a cached block leaves the prefix cache (evicted for reuse or
 * about to be overwritten), so the index can forget it. */
typedef void (*pkv__uncache_fn)(void *ctx, uint32_t block);

typedef struct pkv__pool {
    pkv__allocator alloc;
    pkv__block *blocks;
    uint32_t num_blocks;
    uint32_t block_size;
    pkv__queue free_queue;
    pkv__queue lru_queue;
    uint32_t num_free;
    uint32_t num_cached_free;
    uint32_t num_used; /* includes the null block */
    uint64_t tokens_stored; /* sum of fill over used blocks */
    /* num_used (null block aside) and tokens_stored per group. */
    uint32_t group_used[PKV__MAX_GROUPS];
    uint64_t group_tokens[PKV__MAX_GROUPS];
    pkv__uncache_fn on_uncache;
    void *on_uncache_ctx;
    /* Block-table edits so far: each edit stamps its table with the next
     * count (pkv__table.version), so a version names one table's blocks
     * at one moment. */
    uint64_t table_edits;
} pkv__pool;

/* num_blocks >= 2 (the null block and one more); block_size >= 1. */
pkv_status pkv__pool_init(pkv__pool *pool, const pkv__allocator *alloc,
                          uint32_t num_blocks, uint32_t block_size);
void pkv__pool_release(pkv__pool *pool);

/* Blocks an allocation can take: free plus cached-free. */
uint32_t pkv__pool_available(const pkv__pool *pool);

/* Take n blocks (ref_count 1, fill 0) into out[0..n). All or nothing:
 * PKV_ERR_NO_BLOCKS with nothing changed when fewer than n are available. */
pkv_status pkv__pool_alloc(pkv__pool *pool, uint32_t n, uint32_t *out);

/* Add a reference. A cached-free block is revived out of the LRU queue. */
void pkv__pool_incref(pkv__pool *pool, uint32_t block);

/* Drop a reference. At zero the block joins the free queue, or the tail of
 * the LRU queue if it holds a cached prefix. */
void pkv__pool_decref(pkv__pool *pool, uint32_t block);

/* The group of a used block that take gave to group 0 (counted there
 * until now). */
void pkv__pool_set_group(pkv__pool *pool, uint32_t block, uint32_t group);

/* Set how many tokens a used block holds (keeps tokens_stored exact). */
void pkv__pool_set_fill(pkv__pool *pool, uint32_t block, uint32_t fill);

/* Mark a block as holding a cached prefix (the prefix index calls this). */
void pkv__pool_mark_cached(pkv__pool *pool, uint32_t block);

/* Drop a block from the prefix cache: the index is told through on_uncache,
 * the generation changes, and a cached-free block becomes free. */
void pkv__pool_uncache(pkv__pool *pool, uint32_t block);

#endif
