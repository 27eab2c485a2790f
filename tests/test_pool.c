/* SPDX-License-Identifier: MIT */
/* Block pool: allocation order, LRU eviction of cached blocks, ref counts,
 * exhaustion as a pure check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "mem_util.h"

static pkv__pool make_pool(uint32_t n)
{
    pkv__allocator a = plain_allocator();
    pkv__pool pool;
    assert_int_equal(pkv__pool_init(&pool, &a, n, 4), PKV_OK);
    return pool;
}

static void check_counts(const pkv__pool *pool)
{
    assert_int_equal(pool->num_free + pool->num_cached_free + pool->num_used,
                     pool->num_blocks);
}

static void test_init(void **state)
{
    (void)state;
    pkv__allocator a = plain_allocator();
    pkv__pool pool;
    assert_int_equal(pkv__pool_init(&pool, &a, 1, 4),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv__pool_init(&pool, &a, 8, 0),
                     PKV_ERR_INVALID_ARGUMENT);
    pool = make_pool(8);
    assert_int_equal(pool.num_free, 7);
    assert_int_equal(pool.num_used, 1); /* the null block */
    assert_int_equal(pool.blocks[PKV__NULL_BLOCK].state, PKV__BLOCK_RESERVED);
    assert_int_equal(pkv__pool_available(&pool), 7);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_alloc_never_hands_out_null_block(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(5);
    uint32_t got[4];
    assert_int_equal(pkv__pool_alloc(&pool, 4, got), PKV_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(got[i], (uint32_t)i + 1); /* FIFO from init */
        assert_int_equal(pool.blocks[got[i]].ref_count, 1);
        assert_int_equal(pool.blocks[got[i]].state, PKV__BLOCK_USED);
    }
    assert_int_equal(pkv__pool_available(&pool), 0);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_exhaustion_is_pure(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(6);
    uint32_t got[8];
    assert_int_equal(pkv__pool_alloc(&pool, 3, got), PKV_OK);
    pool_snapshot before, after;
    pool_snap(&pool, &before);
    uint32_t poison[8] = {77, 77, 77, 77, 77, 77, 77, 77};
    assert_int_equal(pkv__pool_alloc(&pool, 3, poison), PKV_ERR_NO_BLOCKS);
    pool_snap(&pool, &after);
    assert_true(pool_snap_equal(&before, &after));
    assert_int_equal(poison[0], 77); /* nothing written either */
    assert_int_equal(pkv__pool_alloc(&pool, 2, got + 3), PKV_OK);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_freed_blocks_reused_fifo(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(5);
    uint32_t got[4];
    assert_int_equal(pkv__pool_alloc(&pool, 4, got), PKV_OK);
    pkv__pool_decref(&pool, 3);
    pkv__pool_decref(&pool, 1);
    uint32_t again[2];
    assert_int_equal(pkv__pool_alloc(&pool, 2, again), PKV_OK);
    assert_int_equal(again[0], 3);
    assert_int_equal(again[1], 1);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_uncached_free_blocks_before_cached(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(5);
    uint32_t got[4];
    assert_int_equal(pkv__pool_alloc(&pool, 4, got), PKV_OK);
    pkv__pool_mark_cached(&pool, 1);
    pkv__pool_mark_cached(&pool, 2);
    /* Cached blocks freed first, plain ones after: plain ones still go
     * first, then the cached ones in the order they were freed (LRU). */
    pkv__pool_decref(&pool, 2);
    pkv__pool_decref(&pool, 1);
    pkv__pool_decref(&pool, 4);
    assert_int_equal(pool.num_cached_free, 2);
    assert_int_equal(pool.num_free, 1);
    assert_int_equal(pool.blocks[1].state, PKV__BLOCK_CACHED_FREE);
    uint32_t again[3];
    assert_int_equal(pkv__pool_alloc(&pool, 3, again), PKV_OK);
    assert_int_equal(again[0], 4);
    assert_int_equal(again[1], 2); /* least recently freed cached block */
    assert_int_equal(again[2], 1);
    assert_false(pool.blocks[2].cached); /* eviction left the cache */
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_revive_cached_block(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(4);
    uint32_t got[3];
    assert_int_equal(pkv__pool_alloc(&pool, 3, got), PKV_OK);
    pkv__pool_set_fill(&pool, 2, 4);
    pkv__pool_mark_cached(&pool, 2);
    pkv__pool_mark_cached(&pool, 3);
    pkv__pool_decref(&pool, 2);
    pkv__pool_decref(&pool, 3);
    assert_int_equal(pool.tokens_stored, 0);
    uint32_t gen = pool.blocks[2].generation;
    /* A prefix hit revives block 2 out of the LRU queue, contents kept. */
    pkv__pool_incref(&pool, 2);
    assert_int_equal(pool.blocks[2].state, PKV__BLOCK_USED);
    assert_int_equal(pool.blocks[2].generation, gen);
    assert_int_equal(pool.tokens_stored, 4);
    assert_int_equal(pool.num_cached_free, 1);
    /* Free it again: it becomes the most recently used, so block 3 is
     * evicted first. */
    pkv__pool_decref(&pool, 2);
    uint32_t b;
    assert_int_equal(pkv__pool_alloc(&pool, 1, &b), PKV_OK);
    assert_int_equal(b, 3);
    assert_int_equal(pkv__pool_alloc(&pool, 1, &b), PKV_OK);
    assert_int_equal(b, 2);
    assert_int_not_equal(pool.blocks[2].generation, gen);
    assert_int_equal(pool.blocks[2].fill, 0);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_ref_counts(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(3);
    uint32_t b;
    assert_int_equal(pkv__pool_alloc(&pool, 1, &b), PKV_OK);
    pkv__pool_incref(&pool, b);
    pkv__pool_incref(&pool, b);
    assert_int_equal(pool.blocks[b].ref_count, 3);
    pkv__pool_decref(&pool, b);
    pkv__pool_decref(&pool, b);
    assert_int_equal(pool.blocks[b].state, PKV__BLOCK_USED);
    pkv__pool_decref(&pool, b);
    assert_int_equal(pool.blocks[b].state, PKV__BLOCK_FREE);
    assert_int_equal(pool.num_free, 2);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

static void test_uncache_free_block_becomes_plain_free(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(3);
    uint32_t b[2];
    assert_int_equal(pkv__pool_alloc(&pool, 2, b), PKV_OK);
    pkv__pool_mark_cached(&pool, b[0]);
    pkv__pool_decref(&pool, b[0]);
    assert_int_equal(pool.num_cached_free, 1);
    uint32_t gen = pool.blocks[b[0]].generation;
    pkv__pool_uncache(&pool, b[0]);
    assert_int_equal(pool.num_cached_free, 0);
    assert_int_equal(pool.num_free, 1);
    assert_int_equal(pool.blocks[b[0]].state, PKV__BLOCK_FREE);
    assert_int_not_equal(pool.blocks[b[0]].generation, gen);
    check_counts(&pool);
    pkv__pool_release(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_alloc_never_hands_out_null_block),
        cmocka_unit_test(test_exhaustion_is_pure),
        cmocka_unit_test(test_freed_blocks_reused_fifo),
        cmocka_unit_test(test_uncached_free_blocks_before_cached),
        cmocka_unit_test(test_revive_cached_block),
        cmocka_unit_test(test_ref_counts),
        cmocka_unit_test(test_uncache_free_block_becomes_plain_free),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
