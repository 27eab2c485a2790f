/* SPDX-License-Identifier: MIT */
/* Shared helpers for the memory-manager tests: a plain allocator and pool
 * snapshots for before/after comparisons. */
#ifndef PKV_TESTS_MEM_UTIL_H
#define PKV_TESTS_MEM_UTIL_H

#include "alloc.h"
#include "kv/pool.h"

#include <string.h>

/* A plain malloc-backed allocator, resolved. */
static inline pkv__allocator plain_allocator(void)
{
    pkv_allocator none;
    pkv__allocator a;
    memset(&none, 0, sizeof none);
    pkv__allocator_resolve(&none, &a);
    return a;
}

/* Everything observable about a pool, for before/after comparisons. */
typedef struct pool_snapshot {
    uint32_t num_free, num_cached_free, num_used;
    uint64_t tokens_stored;
    pkv__queue free_queue, lru_queue;
    pkv__block blocks[256];
} pool_snapshot;

static inline void pool_snap(const pkv__pool *pool, pool_snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->num_free = pool->num_free;
    s->num_cached_free = pool->num_cached_free;
    s->num_used = pool->num_used;
    s->tokens_stored = pool->tokens_stored;
    s->free_queue = pool->free_queue;
    s->lru_queue = pool->lru_queue;
    memcpy(s->blocks, pool->blocks, pool->num_blocks * sizeof *pool->blocks);
}

static inline int pool_snap_equal(const pool_snapshot *a,
                                  const pool_snapshot *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

#endif
