/* SPDX-License-Identifier: MIT */
/* Prefix cache: hits, misses, partial blocks, the prompt_len - 1 cap, forced
 * hash collisions, salt isolation, eviction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv/prefix.h"
#include "mem_util.h"

enum { BS = 4, MAX_TOKENS = 64 };

typedef struct fixture {
    pkv__pool pool;
    pkv__prefix prefix;
} fixture;

typedef struct seq {
    pkv__table table;
    pkv__prefix_chain chain;
    int32_t tokens[MAX_TOKENS];
    uint32_t n;
    uint64_t salt;
} seq;

static int setup(void **state)
{
    static fixture f;
    pkv__allocator a = plain_allocator();
    if (pkv__pool_init(&f.pool, &a, 32, BS) != PKV_OK ||
        pkv__prefix_init(&f.prefix, &f.pool) != PKV_OK)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    pkv__prefix_release(&f->prefix);
    pkv__pool_release(&f->pool);
    return 0;
}

/* Admit a prompt: look up its prefix, adopt the hits, allocate the rest,
 * "compute" it and register its full blocks. Returns the hit count. */
static uint32_t admit(fixture *f, seq *s, const int32_t *prompt, uint32_t n,
                      uint64_t salt)
{
    pkv__table_init(&s->table);
    pkv__prefix_chain_init(&s->chain);
    memcpy(s->tokens, prompt, n * sizeof *prompt);
    s->n = n;
    s->salt = salt;
    pkv__chain_link links[MAX_TOKENS / BS];
    uint32_t hits = 0;
    uint64_t hashes[MAX_TOKENS / BS];
    uint32_t full = n ? (n - 1) / BS : 0;
    pkv__prefix_hashes(prompt, full, BS, salt, hashes);
    pkv__prefix_lookup(&f->prefix, prompt, n, salt, hashes, full, links,
                       &hits);
    uint32_t blocks[MAX_TOKENS / BS];
    for (uint32_t i = 0; i < hits; i++)
        blocks[i] = links[i].block;
    assert_int_equal(pkv__table_adopt(&s->table, &f->pool, blocks, hits),
                     PKV_OK);
    assert_int_equal(
        pkv__prefix_chain_adopt(&s->chain, &f->pool, links, hits), PKV_OK);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&s->table, &f->pool,
                                       n - s->table.num_tokens, &copy),
                     PKV_OK);
    assert_int_equal(pkv__prefix_register(&f->prefix, &s->chain, &s->table,
                                          s->tokens, salt),
                     PKV_OK);
    return hits;
}

static void drop(fixture *f, seq *s)
{
    pkv__table_release(&s->table, &f->pool);
    pkv__prefix_chain_release(&s->chain, &f->pool);
}

/* The hits of a lookup; with every number of precomputed hashes (as
 * pkv_seq_add keeps them), the same links. */
static uint32_t lookup(fixture *f, const int32_t *prompt, uint32_t n,
                       uint64_t salt)
{
    pkv__chain_link links[MAX_TOKENS / BS], again[MAX_TOKENS / BS];
    uint32_t hits = 0;
    pkv__prefix_lookup(&f->prefix, prompt, n, salt, NULL, 0, links, &hits);
    uint64_t hashes[MAX_TOKENS / BS];
    uint32_t full = n ? (n - 1) / BS : 0;
    pkv__prefix_hashes(prompt, full, BS, salt, hashes);
    for (uint32_t given = 1; given <= full; given++) {
        uint32_t hits_again = 0;
        pkv__prefix_lookup(&f->prefix, prompt, n, salt, hashes, given, again,
                           &hits_again);
        assert_int_equal(hits_again, hits);
        assert_memory_equal(again, links, hits * sizeof *links);
    }
    return hits;
}

static const int32_t PROMPT[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

static void test_hit_and_miss(void **state)
{
    fixture *f = *state;
    seq a, b, c;
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    assert_int_equal(a.chain.num_links, 3); /* full blocks only */
    /* Same prompt: 3 full blocks cached, all hit (12 <= 13 - 1). */
    assert_int_equal(admit(f, &b, PROMPT, 13, 0), 3);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(b.table.blocks[i], a.table.blocks[i]);
        assert_int_equal(f->pool.blocks[a.table.blocks[i]].ref_count, 2);
    }
    assert_int_not_equal(b.table.blocks[3], a.table.blocks[3]);
    /* Diverging in the second block: only the first hits. */
    int32_t other[13];
    memcpy(other, PROMPT, sizeof other);
    other[5] = 99;
    assert_int_equal(admit(f, &c, other, 13, 0), 1);
    /* Same tokens in block 2 after another block 1: no hit past 1. */
    int32_t other2[13];
    memcpy(other2, PROMPT, sizeof other2);
    other2[6] = 98;
    assert_int_equal(lookup(f, other2, 13, 0), 1);
    int32_t first_differs[13];
    memcpy(first_differs, PROMPT, sizeof first_differs);
    first_differs[0] = 42;
    assert_int_equal(lookup(f, first_differs, 13, 0), 0);
    drop(f, &a);
    drop(f, &b);
    drop(f, &c);
    assert_int_equal(f->pool.num_used, 1);
}

static void test_cap_and_partial_blocks(void **state)
{
    fixture *f = *state;
    seq a;
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    /* Exactly 12 tokens: at most (12 - 1) / 4 = 2 blocks, so the last
     * token is computed again. */
    assert_int_equal(lookup(f, PROMPT, 12, 0), 2);
    assert_int_equal(lookup(f, PROMPT, 9, 0), 2);
    assert_int_equal(lookup(f, PROMPT, 8, 0), 1);
    assert_int_equal(lookup(f, PROMPT, 1, 0), 0);
    assert_int_equal(lookup(f, PROMPT, 0, 0), 0);
    /* The partly filled 4th block (token 13) is never registered: a longer
     * prompt starting with all 13 tokens hits 3 blocks, not 4. */
    int32_t longer[17];
    memcpy(longer, PROMPT, sizeof PROMPT);
    longer[13] = 14;
    longer[14] = 15;
    longer[15] = 16;
    longer[16] = 17;
    assert_int_equal(lookup(f, longer, 17, 0), 3);
    drop(f, &a);
}

static void test_salt_isolates_tenants(void **state)
{
    fixture *f = *state;
    seq a, b;
    assert_int_equal(admit(f, &a, PROMPT, 13, 7), 0);
    assert_int_equal(lookup(f, PROMPT, 13, 7), 3);
    assert_int_equal(lookup(f, PROMPT, 13, 8), 0);
    assert_int_equal(admit(f, &b, PROMPT, 13, 8), 0);
    assert_int_not_equal(b.table.blocks[0], a.table.blocks[0]);
    drop(f, &a);
    drop(f, &b);
}

static void test_forced_collision_is_rejected(void **state)
{
    fixture *f = *state;
    f->prefix.hash_mask = 0; /* every block hashes to the same value */
    seq a, b;
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    int32_t other[13];
    for (int i = 0; i < 13; i++)
        other[i] = 100 + i;
    /* Every candidate has the same hash; token verification refuses all. */
    assert_int_equal(admit(f, &b, other, 13, 0), 0);
    assert_int_equal(b.chain.num_links, 3);
    /* Same tokens in block 1 after a different block 0: refused by the
     * parent check although hash and tokens of that block match. */
    int32_t mixed[13];
    memcpy(mixed, other, sizeof mixed);
    memcpy(mixed + 4, PROMPT + 4, 4 * sizeof *mixed);
    assert_int_equal(lookup(f, mixed, 13, 0), 1);
    /* The genuine prompts still hit fully. */
    assert_int_equal(lookup(f, PROMPT, 13, 0), 3);
    assert_int_equal(lookup(f, other, 13, 0), 3);
    drop(f, &a);
    drop(f, &b);
    f->prefix.hash_mask = UINT64_MAX;
}

/* Hybrid memory: a block is found only for the group of layers whose KV
 * it holds, even when hash, tokens, salt and parent all match. */
static void test_collision_across_groups_is_rejected(void **state)
{
    fixture *f = *state;
    f->prefix.hash_mask = 0;
    uint32_t b;
    assert_int_equal(pkv__pool_alloc(&f->pool, 1, &b), PKV_OK);
    pkv__pool_set_group(&f->pool, b, 1);
    uint32_t null_gen = f->pool.blocks[PKV__NULL_BLOCK].generation;
    pkv__prefix_insert(&f->prefix, b, 42, PROMPT, 0, PKV__NULL_BLOCK,
                       null_gen, NULL);
    assert_int_equal(pkv__prefix_find(&f->prefix, 42, PROMPT, 0,
                                      PKV__NULL_BLOCK, null_gen),
                     PKV__NO_BLOCK);
    assert_int_equal(pkv__prefix_find_group(&f->prefix, 1, 42, PROMPT, 0,
                                            PKV__NULL_BLOCK, null_gen),
                     b);
    assert_int_equal(pkv__prefix_find_group(&f->prefix, 2, 42, PROMPT, 0,
                                            PKV__NULL_BLOCK, null_gen),
                     PKV__NO_BLOCK);
    pkv__pool_decref(&f->pool, b);
    pkv__pool_uncache(&f->pool, b);
    f->prefix.hash_mask = UINT64_MAX;
}

static void test_freed_prefix_hits_until_evicted(void **state)
{
    fixture *f = *state;
    seq a, b;
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    uint32_t head = a.table.blocks[0];
    drop(f, &a);
    assert_int_equal(f->pool.num_cached_free, 3);
    assert_int_equal(lookup(f, PROMPT, 13, 0), 3);
    /* A hit revives the cached-free blocks. */
    assert_int_equal(admit(f, &b, PROMPT, 13, 0), 3);
    assert_int_equal(b.table.blocks[0], head);
    assert_int_equal(f->pool.num_cached_free, 0);
    drop(f, &b);
    /* Fill the pool: the cached blocks are evicted, tail first. */
    pkv__table hog;
    pkv__table_init(&hog);
    pkv__block_copy copy;
    uint32_t avail = pkv__pool_available(&f->pool);
    assert_int_equal(
        pkv__table_append(&hog, &f->pool, (avail - 1) * BS, &copy), PKV_OK);
    assert_int_equal(f->pool.num_cached_free, 1);
    assert_int_equal(f->pool.lru_queue.head, head); /* the head survived */
    assert_int_equal(lookup(f, PROMPT, 13, 0), 1);
    assert_int_equal(pkv__table_append(&hog, &f->pool, BS, &copy), PKV_OK);
    assert_int_equal(lookup(f, PROMPT, 13, 0), 0);
    pkv__table_release(&hog, &f->pool);
}

static void test_child_of_evicted_parent_is_unreachable(void **state)
{
    fixture *f = *state;
    seq a;
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    uint32_t b0 = a.table.blocks[0];
    drop(f, &a);
    /* Evict only the head of the chain (uncache it directly); the children
     * stay cached, but they were computed after a block that is gone. */
    pkv__pool_uncache(&f->pool, b0);
    assert_int_equal(lookup(f, PROMPT, 13, 0), 0);
    /* Recomputing the prompt registers a new head; the old children
     * recorded the old head's generation, so they are not reused. */
    seq b;
    assert_int_equal(admit(f, &b, PROMPT, 13, 0), 0);
    assert_int_equal(lookup(f, PROMPT, 13, 0), 3);
    drop(f, &b);
}

static void test_duplicate_blocks_link_to_the_cached_one(void **state)
{
    fixture *f = *state;
    /* Two sequences compute the same prompt before either registers. */
    seq a, b;
    pkv__table_init(&b.table);
    pkv__prefix_chain_init(&b.chain);
    memcpy(b.tokens, PROMPT, sizeof PROMPT);
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&b.table, &f->pool, 13, &copy),
                     PKV_OK);
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    assert_int_equal(pkv__prefix_register(&f->prefix, &b.chain, &b.table,
                                          b.tokens, 0),
                     PKV_OK);
    assert_int_equal(b.chain.num_links, 3);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(b.chain.links[i].block, a.table.blocks[i]);
        assert_false(f->pool.blocks[b.table.blocks[i]].cached);
    }
    drop(f, &a);
    drop(f, &b);
}

static void test_truncate_keeps_cache_and_chain_follows(void **state)
{
    fixture *f = *state;
    seq a;
    assert_int_equal(admit(f, &a, PROMPT, 13, 0), 0);
    uint32_t second = a.table.blocks[1];
    pkv__table_truncate(&a.table, &f->pool, 6);
    pkv__prefix_chain_truncate(&a.chain, 6 / BS);
    assert_int_equal(a.chain.num_links, 1);
    /* The cut falls inside a cached block: it stays cached and whole. */
    assert_true(f->pool.blocks[second].cached);
    assert_int_equal(lookup(f, PROMPT, 13, 0), 3);
    /* Rewrite different tokens and register again: the append copies the
     * cached block, so the old prompt still hits all its blocks. */
    pkv__block_copy copy;
    a.tokens[6] = 77;
    assert_int_equal(pkv__table_append(&a.table, &f->pool, 6, &copy),
                     PKV_OK);
    assert_int_equal(copy.src, second);
    assert_int_equal(pkv__prefix_register(&f->prefix, &a.chain, &a.table,
                                          a.tokens, 0),
                     PKV_OK);
    assert_int_equal(lookup(f, PROMPT, 13, 0), 3);
    assert_int_equal(lookup(f, a.tokens, 12, 0), 2);
    drop(f, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hit_and_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap_and_partial_blocks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_salt_isolates_tenants, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_forced_collision_is_rejected,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_collision_across_groups_is_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_freed_prefix_hits_until_evicted,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_child_of_evicted_parent_is_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_duplicate_blocks_link_to_the_cached_one, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_truncate_keeps_cache_and_chain_follows, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
