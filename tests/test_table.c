/* SPDX-License-Identifier: MIT */
/* Block tables: on-demand growth, all-or-nothing failure, fork and
 * copy-on-write, truncate, free order, utilisation on a lognormal workload. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv/table.h"
#include "mem_util.h"
#include "rng.h"

#include <math.h>

static pkv__pool make_pool(uint32_t n, uint32_t block_size)
{
    pkv__allocator a = plain_allocator();
    pkv__pool pool;
    assert_int_equal(pkv__pool_init(&pool, &a, n, block_size), PKV_OK);
    return pool;
}

static void test_append_allocates_only_the_difference(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(16, 4);
    pkv__table t;
    pkv__table_init(&t);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_blocks_needed(&t, &pool, 5, NULL, NULL), 2);
    assert_int_equal(pkv__table_append(&t, &pool, 5, &copy), PKV_OK);
    assert_int_equal(copy.dst, PKV__NULL_BLOCK);
    assert_int_equal(t.num_blocks, 2);
    assert_int_equal(t.num_tokens, 5);
    /* 3 more tokens fit the partly filled block: no new block. */
    assert_int_equal(pkv__table_blocks_needed(&t, &pool, 3, NULL, NULL), 0);
    assert_int_equal(pkv__table_append(&t, &pool, 3, &copy), PKV_OK);
    assert_int_equal(t.num_blocks, 2);
    assert_int_equal(pkv__table_append(&t, &pool, 1, &copy), PKV_OK);
    assert_int_equal(t.num_blocks, 3);
    assert_int_equal(pool.tokens_stored, 9);
    assert_int_equal(pool.blocks[t.blocks[0]].fill, 4);
    assert_int_equal(pool.blocks[t.blocks[2]].fill, 1);
    /* Slot of position 5: second block, offset 1. */
    assert_int_equal(pkv__table_slot(&t, &pool, 5),
                     (uint64_t)t.blocks[1] * 4 + 1);
    pkv__table_release(&t, &pool);
    assert_int_equal(pool.num_used, 1);
    assert_int_equal(pool.tokens_stored, 0);
    pkv__pool_release(&pool);
}

static void test_failed_append_changes_nothing(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(4, 4); /* 3 usable blocks */
    pkv__table t;
    pkv__table_init(&t);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&t, &pool, 6, &copy), PKV_OK);
    pkv__table before = t;
    uint32_t before_blocks[2] = {t.blocks[0], t.blocks[1]};
    pool_snapshot ps, ps_after;
    pool_snap(&pool, &ps);
    /* 6 + 7 tokens need 4 blocks: 2 more, only 1 is free. */
    assert_int_equal(pkv__table_blocks_needed(&t, &pool, 7, NULL, NULL), 2);
    assert_int_equal(pkv__table_append(&t, &pool, 7, &copy),
                     PKV_ERR_NO_BLOCKS);
    pool_snap(&pool, &ps_after);
    assert_true(pool_snap_equal(&ps, &ps_after));
    assert_int_equal(t.num_blocks, before.num_blocks);
    assert_int_equal(t.num_tokens, before.num_tokens);
    assert_int_equal(t.blocks[0], before_blocks[0]);
    assert_int_equal(t.blocks[1], before_blocks[1]);
    pkv__table_release(&t, &pool);
    pkv__pool_release(&pool);
}

static void test_fork_shares_and_copy_on_write(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(16, 4);
    pkv__table a, b;
    pkv__table_init(&a);
    pkv__table_init(&b);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&a, &pool, 6, &copy), PKV_OK);
    assert_int_equal(pkv__table_fork(&b, &a, &pool), PKV_OK);
    assert_int_equal(b.num_tokens, 6);
    for (uint32_t i = 0; i < a.num_blocks; i++) {
        assert_int_equal(b.blocks[i], a.blocks[i]);
        assert_int_equal(pool.blocks[a.blocks[i]].ref_count, 2);
    }
    assert_int_equal(pool.num_used, 3);
    assert_int_equal(pool.tokens_stored, 6); /* shared tokens count once */

    /* b writes into the shared partly filled block: it gets a copy. */
    uint32_t shared_tail = a.blocks[1];
    assert_int_equal(pkv__table_blocks_needed(&b, &pool, 1, NULL, NULL), 1);
    assert_int_equal(pkv__table_append(&b, &pool, 1, &copy), PKV_OK);
    assert_int_equal(copy.src, shared_tail);
    assert_int_not_equal(copy.dst, PKV__NULL_BLOCK);
    assert_int_equal(b.blocks[1], copy.dst);
    assert_int_equal(pool.blocks[copy.dst].ref_count, 1);
    assert_int_equal(pool.blocks[copy.dst].fill, 3);
    assert_int_equal(pool.blocks[shared_tail].ref_count, 1);
    assert_int_equal(pool.blocks[a.blocks[0]].ref_count, 2); /* full: kept */

    /* a now owns its tail alone: it writes in place. */
    assert_int_equal(pkv__table_append(&a, &pool, 1, &copy), PKV_OK);
    assert_int_equal(copy.dst, PKV__NULL_BLOCK);
    assert_int_equal(a.blocks[1], shared_tail);

    /* A fork at a block boundary needs no copy. */
    pkv__table c;
    pkv__table_init(&c);
    assert_int_equal(pkv__table_fork(&c, &a, &pool), PKV_OK);
    assert_int_equal(c.num_tokens, 7);
    assert_int_equal(pkv__table_append(&c, &pool, 1, &copy), PKV_OK);
    assert_int_not_equal(copy.dst, PKV__NULL_BLOCK); /* 7 % 4 != 0 */
    pkv__table_release(&c, &pool);

    pkv__table_release(&a, &pool);
    pkv__table_release(&b, &pool);
    assert_int_equal(pool.num_used, 1);
    assert_int_equal(pool.num_free, 15);
    pkv__pool_release(&pool);
}

static void test_copy_on_write_needs_a_free_block(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(3, 4); /* 2 usable */
    pkv__table a, b;
    pkv__table_init(&a);
    pkv__table_init(&b);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&a, &pool, 6, &copy), PKV_OK);
    assert_int_equal(pkv__table_fork(&b, &a, &pool), PKV_OK);
    pool_snapshot ps, ps_after;
    pool_snap(&pool, &ps);
    assert_int_equal(pkv__table_append(&b, &pool, 1, &copy),
                     PKV_ERR_NO_BLOCKS);
    pool_snap(&pool, &ps_after);
    assert_true(pool_snap_equal(&ps, &ps_after));
    assert_int_equal(copy.dst, PKV__NULL_BLOCK);
    assert_int_equal(b.num_tokens, 6);
    pkv__table_release(&a, &pool);
    pkv__table_release(&b, &pool);
    pkv__pool_release(&pool);
}

static void test_release_frees_tail_first(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(8, 2);
    pkv__table t;
    pkv__table_init(&t);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&t, &pool, 6, &copy), PKV_OK);
    uint32_t head = t.blocks[0], mid = t.blocks[1], tail = t.blocks[2];
    for (uint32_t i = 0; i < 3; i++)
        pkv__pool_mark_cached(&pool, t.blocks[i]);
    pkv__table_release(&t, &pool);
    /* LRU order: tail evicted first, head last. */
    assert_int_equal(pool.lru_queue.head, tail);
    assert_int_equal(pool.blocks[tail].next, mid);
    assert_int_equal(pool.lru_queue.tail, head);
    pkv__pool_release(&pool);
}

static void test_truncate(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(16, 4);
    pkv__table t;
    pkv__table_init(&t);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&t, &pool, 12, &copy), PKV_OK);
    uint32_t second = t.blocks[1];
    pkv__pool_mark_cached(&pool, second);
    pkv__table_truncate(&t, &pool, 6);
    assert_int_equal(t.num_blocks, 2);
    assert_int_equal(t.num_tokens, 6);
    assert_int_equal(pool.num_used, 3);
    /* The cached block stays cached and whole; the next append copies it
     * and writes the copy. */
    assert_true(pool.blocks[second].cached);
    assert_int_equal(pool.blocks[second].fill, 4);
    assert_int_equal(pool.tokens_stored, 8);
    pkv__table_truncate(&t, &pool, 9); /* longer: no-op */
    assert_int_equal(t.num_tokens, 6);
    assert_int_equal(pkv__table_blocks_needed(&t, &pool, 1, NULL, NULL), 1);
    assert_int_equal(pkv__table_append(&t, &pool, 1, &copy), PKV_OK);
    assert_int_equal(copy.src, second);
    assert_int_not_equal(t.blocks[1], second);
    assert_int_equal(pool.blocks[t.blocks[1]].fill, 3);
    assert_true(pool.blocks[second].cached);
    assert_int_equal(pool.blocks[second].ref_count, 0); /* cached-free */
    assert_int_equal(pool.blocks[second].fill, 4);
    pkv__table_truncate(&t, &pool, 0);
    assert_int_equal(t.num_blocks, 0);
    assert_int_equal(pool.num_used, 1);

    /* Truncating into a shared block keeps it for the other holder. */
    pkv__table a, b;
    pkv__table_init(&a);
    pkv__table_init(&b);
    assert_int_equal(pkv__table_append(&a, &pool, 8, &copy), PKV_OK);
    pkv__pool_mark_cached(&pool, a.blocks[1]);
    assert_int_equal(pkv__table_fork(&b, &a, &pool), PKV_OK);
    pkv__table_truncate(&b, &pool, 5);
    assert_true(pool.blocks[a.blocks[1]].cached);
    assert_int_equal(pool.blocks[a.blocks[1]].fill, 4);
    assert_int_equal(pkv__table_append(&b, &pool, 1, &copy), PKV_OK);
    assert_int_equal(copy.src, a.blocks[1]);
    assert_int_equal(pool.blocks[copy.dst].fill, 2);
    pkv__table_release(&a, &pool);
    pkv__table_release(&b, &pool);
    pkv__table_release(&t, &pool);
    pkv__pool_release(&pool);
}

static void test_adopt(void **state)
{
    (void)state;
    pkv__pool pool = make_pool(8, 4);
    pkv__table a, b;
    pkv__table_init(&a);
    pkv__table_init(&b);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&a, &pool, 8, &copy), PKV_OK);
    assert_int_equal(pkv__table_adopt(&b, &pool, a.blocks, 2), PKV_OK);
    assert_int_equal(b.num_tokens, 8);
    assert_int_equal(pool.blocks[a.blocks[1]].ref_count, 2);
    assert_int_equal(pkv__table_adopt(&b, &pool, a.blocks, 1),
                     PKV_ERR_INVALID_ARGUMENT); /* only into empty tables */
    pkv__table_release(&a, &pool);
    pkv__table_release(&b, &pool);
    assert_int_equal(pool.num_used, 1);
    pkv__pool_release(&pool);
}

/* Box-Muller normal from a fixed-seed generator. */
static double normal(uint64_t *seed)
{
    double u1 = test_uniform(seed);
    double u2 = test_uniform(seed);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* 1,000 sequences with lognormal lengths (median 256, sigma 1), grown by a
 * prompt then token by token in interleaved order, as a scheduler would. */
static void test_lognormal_utilisation(void **state)
{
    (void)state;
    enum { SEQS = 1000, BS = 16 };
    uint64_t seed = 12345;
    static uint32_t target[SEQS];
    static pkv__table tables[SEQS];
    uint64_t total_tokens = 0, max_blocks = 0;
    for (int i = 0; i < SEQS; i++) {
        double len = exp(log(256.0) + normal(&seed));
        target[i] = len < 1 ? 1 : len > 16384 ? 16384 : (uint32_t)len;
        total_tokens += target[i];
        max_blocks += (target[i] + BS - 1) / BS;
        pkv__table_init(&tables[i]);
    }
    pkv__allocator a = plain_allocator();
    pkv__pool pool;
    assert_int_equal(pkv__pool_init(&pool, &a, (uint32_t)max_blocks + 1, BS),
                     PKV_OK);
    pkv__block_copy copy;
    /* Prompts take the first half, then everyone decodes one at a time. */
    for (int i = 0; i < SEQS; i++)
        assert_int_equal(pkv__table_append(&tables[i], &pool,
                                           (target[i] + 1) / 2, &copy),
                         PKV_OK);
    for (int more = 1; more;) {
        more = 0;
        for (int i = 0; i < SEQS; i++) {
            if (tables[i].num_tokens == target[i])
                continue;
            assert_int_equal(pkv__table_append(&tables[i], &pool, 1, &copy),
                             PKV_OK);
            more = 1;
        }
    }
    uint64_t slots = 0;
    for (int i = 0; i < SEQS; i++) {
        uint32_t waste = tables[i].num_blocks * BS - tables[i].num_tokens;
        assert_true(waste < BS); /* under one block, exactly */
        assert_int_equal(tables[i].num_blocks, (target[i] + BS - 1) / BS);
        slots += (uint64_t)tables[i].num_blocks * BS;
    }
    assert_int_equal(pool.tokens_stored, total_tokens);
    assert_int_equal((uint64_t)(pool.num_used - 1) * BS, slots);
    double utilisation = (double)total_tokens / (double)slots;
    print_message("lognormal: %d seqs, %llu tokens, %llu slots, "
                  "utilisation %.4f\n",
                  SEQS, (unsigned long long)total_tokens,
                  (unsigned long long)slots, utilisation);
    assert_true(utilisation >= 0.96);
    for (int i = 0; i < SEQS; i++)
        pkv__table_release(&tables[i], &pool);
    assert_int_equal(pool.num_used, 1);
    assert_int_equal(pool.tokens_stored, 0);
    pkv__pool_release(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_allocates_only_the_difference),
        cmocka_unit_test(test_failed_append_changes_nothing),
        cmocka_unit_test(test_fork_shares_and_copy_on_write),
        cmocka_unit_test(test_copy_on_write_needs_a_free_block),
        cmocka_unit_test(test_release_frees_tail_first),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_adopt),
        cmocka_unit_test(test_lognormal_utilisation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
