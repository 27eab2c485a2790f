/* SPDX-License-Identifier: MIT */
/* Shared helpers for the memory-manager tests. */
#ifndef PKV_TEST_UTIL_H
#define PKV_TEST_UTIL_H

#include "alloc.h"
#include "pool.h"

#include <string.h>

/* splitmix64: a small seeded generator, identical on every platform. */
static inline uint64_t test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static inline double test_uniform(uint64_t *state)
{
    return ((double)(test_rand(state) >> 11) + 0.5) / 9007199254740992.0;
}

/* A plain malloc-backed allocator, resolved. */
static inline pkv__allocator test_allocator(void)
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
