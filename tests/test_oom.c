/* SPDX-License-Identifier: MIT */
/* Out-of-memory sweep: a counting allocator fails the Nth allocation, for
 * every N until the call succeeds. Each failure must return
 * PKV_ERR_OUT_OF_MEMORY, leak nothing, and leave every object as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv/prefix.h"

#include <stdlib.h>
#include <string.h>

enum { BS = 4, NUM_BLOCKS = 32, NSEQ = 4, MAX_TOKENS = 64, MAX_N = 64 };

/* ---------------------------------------------------- counting allocator */

typedef struct counter {
    long calls;      /* alloc calls so far */
    long fail_at;    /* the call number that fails; 0: none */
    int fail_after;  /* also fail every later call */
    long failures;
    long live;       /* allocations not yet freed */
    size_t bytes;    /* bytes not yet freed */
    long bad_frees;  /* frees with a size other than the one allocated */
} counter;

/* Each block carries its size in front, so that free can check the size
 * it is given. */
typedef union header {
    size_t size;
    max_align_t align;
} header;

static void *count_alloc(void *user, size_t size)
{
    counter *c = user;
    c->calls++;
    if (c->fail_at != 0 &&
        (c->calls == c->fail_at || (c->fail_after && c->calls > c->fail_at))) {
        c->failures++;
        return NULL;
    }
    header *h = malloc(sizeof *h + size);
    if (h == NULL)
        return NULL;
    h->size = size;
    c->live++;
    c->bytes += size;
    return h + 1;
}

static void count_free(void *user, void *ptr, size_t size)
{
    counter *c = user;
    header *h = (header *)ptr - 1;
    if (h->size != size)
        c->bad_frees++;
    c->live--;
    c->bytes -= h->size;
    free(h);
}

static counter C;

static pkv__allocator counting_allocator(void)
{
    pkv__allocator a = {count_alloc, count_free, &C};
    return a;
}

static void arm(long n, int fail_after)
{
    C.fail_at = C.calls + n;
    C.fail_after = fail_after;
    C.failures = 0;
}

static void disarm(void)
{
    C.fail_at = 0;
}

static void assert_no_leak(void)
{
    assert_int_equal(C.live, 0);
    assert_int_equal(C.bytes, 0);
    assert_int_equal(C.bad_frees, 0);
}

/* ---------------------------------------------------------------- fixture */

typedef struct seq {
    pkv__table table;
    pkv__prefix_chain chain;
    int32_t tokens[MAX_TOKENS];
    uint64_t salt;
} seq;

typedef struct fixture {
    pkv__pool pool;
    pkv__prefix prefix;
    seq seqs[NSEQ];
    pkv__chain_link links[MAX_TOKENS];
    uint32_t hit_blocks[MAX_TOKENS];
    uint32_t n_hit;
} fixture;

static fixture F;

static void fill_tokens(int32_t *tokens, uint32_t from, uint32_t to,
                        int32_t base)
{
    for (uint32_t i = from; i < to; i++)
        tokens[i] = base + (int32_t)i;
}

static void append(fixture *f, seq *s, uint32_t n, int reg)
{
    pkv__block_copy copy;
    assert_int_equal(pkv__table_append(&s->table, &f->pool, n, &copy),
                     PKV_OK);
    if (reg)
        assert_int_equal(pkv__prefix_register(&f->prefix, &s->chain,
                                              &s->table, s->tokens, s->salt),
                         PKV_OK);
}

/* A pool with used, shared, cached and cached-free blocks:
 *   seqs[0]: 15 tokens (4 blocks, the last partial and shared with seqs[1]),
 *            registered; its table is at capacity.
 *   seqs[1]: a fork of seqs[0].
 *   seqs[2]: the first 8 tokens of seqs[0], then 12 of its own, not
 *            registered (a register of it finds 2 blocks and adds 3).
 *   a freed prompt of 16 tokens, registered: 4 cached-free blocks.
 *   seqs[3]: empty. */
static void build(fixture *f)
{
    disarm();
    pkv__allocator a = counting_allocator();
    memset(f, 0, sizeof *f);
    assert_int_equal(pkv__pool_init(&f->pool, &a, NUM_BLOCKS, BS), PKV_OK);
    assert_int_equal(pkv__prefix_init(&f->prefix, &f->pool), PKV_OK);
    for (int i = 0; i < NSEQ; i++) {
        pkv__table_init(&f->seqs[i].table);
        pkv__prefix_chain_init(&f->seqs[i].chain);
        f->seqs[i].salt = 5;
    }
    seq *d = &f->seqs[3];
    fill_tokens(d->tokens, 0, 16, 1000);
    append(f, d, 16, 1);
    pkv__table_release(&d->table, &f->pool);
    pkv__prefix_chain_release(&d->chain, &f->pool);
    assert_int_equal(f->pool.num_cached_free, 4);

    seq *s0 = &f->seqs[0];
    fill_tokens(s0->tokens, 0, 15, 0);
    append(f, s0, 15, 1);
    assert_int_equal(s0->table.capacity, s0->table.num_blocks);
    assert_int_equal(pkv__table_fork(&f->seqs[1].table, &s0->table, &f->pool),
                     PKV_OK);
    memcpy(f->seqs[1].tokens, s0->tokens, sizeof s0->tokens);

    seq *s2 = &f->seqs[2];
    fill_tokens(s2->tokens, 0, 8, 0);
    fill_tokens(s2->tokens, 8, 20, 500);
    append(f, s2, 20, 0);
}

static void teardown_fixture(fixture *f)
{
    disarm();
    for (int i = 0; i < NSEQ; i++) {
        pkv__table_release(&f->seqs[i].table, &f->pool);
        pkv__prefix_chain_release(&f->seqs[i].chain, &f->pool);
    }
    pkv__prefix_release(&f->prefix);
    pkv__pool_release(&f->pool);
    assert_no_leak();
}

/* --------------------------------------------------------------- snapshot */

typedef struct snapshot {
    pkv__pool pool;
    pkv__block blocks[NUM_BLOCKS];
    pkv__prefix prefix;
    pkv__prefix_entry entries[NUM_BLOCKS];
    int32_t tokens[NUM_BLOCKS * BS];
    uint32_t buckets[NUM_BLOCKS];
    pkv__table tables[NSEQ];
    uint32_t table_blocks[NSEQ][MAX_TOKENS];
    pkv__prefix_chain chains[NSEQ];
    pkv__chain_link chain_links[NSEQ][MAX_TOKENS];
} snapshot;

static void take(const fixture *f, snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->pool = f->pool;
    memcpy(s->blocks, f->pool.blocks, sizeof s->blocks);
    s->prefix = f->prefix;
    memcpy(s->entries, f->prefix.entries, sizeof s->entries);
    memcpy(s->tokens, f->prefix.tokens, sizeof s->tokens);
    memcpy(s->buckets, f->prefix.buckets,
           ((size_t)f->prefix.bucket_mask + 1) * sizeof *s->buckets);
    for (int i = 0; i < NSEQ; i++) {
        const seq *q = &f->seqs[i];
        s->tables[i] = q->table;
        if (q->table.num_blocks)
            memcpy(s->table_blocks[i], q->table.blocks,
                   q->table.num_blocks * sizeof(uint32_t));
        s->chains[i] = q->chain;
        if (q->chain.num_links)
            memcpy(s->chain_links[i], q->chain.links,
                   q->chain.num_links * sizeof(pkv__chain_link));
    }
}

static void assert_block_equal(const pkv__block *a, const pkv__block *b)
{
    assert_int_equal(a->ref_count, b->ref_count);
    assert_int_equal(a->prev, b->prev);
    assert_int_equal(a->next, b->next);
    assert_int_equal(a->fill, b->fill);
    assert_int_equal(a->generation, b->generation);
    assert_int_equal(a->state, b->state);
    assert_int_equal(a->cached, b->cached);
}

static void assert_unchanged(const fixture *f, const snapshot *s)
{
    const pkv__pool *p = &f->pool;
    assert_ptr_equal(p->blocks, s->pool.blocks);
    assert_int_equal(p->num_blocks, s->pool.num_blocks);
    assert_int_equal(p->block_size, s->pool.block_size);
    assert_int_equal(p->free_queue.head, s->pool.free_queue.head);
    assert_int_equal(p->free_queue.tail, s->pool.free_queue.tail);
    assert_int_equal(p->lru_queue.head, s->pool.lru_queue.head);
    assert_int_equal(p->lru_queue.tail, s->pool.lru_queue.tail);
    assert_int_equal(p->num_free, s->pool.num_free);
    assert_int_equal(p->num_cached_free, s->pool.num_cached_free);
    assert_int_equal(p->num_used, s->pool.num_used);
    assert_int_equal(p->tokens_stored, s->pool.tokens_stored);
    assert_true(p->on_uncache == s->pool.on_uncache);
    assert_ptr_equal(p->on_uncache_ctx, s->pool.on_uncache_ctx);
    for (uint32_t b = 0; b < NUM_BLOCKS; b++)
        assert_block_equal(&p->blocks[b], &s->blocks[b]);

    const pkv__prefix *x = &f->prefix;
    assert_ptr_equal(x->entries, s->prefix.entries);
    assert_ptr_equal(x->tokens, s->prefix.tokens);
    assert_ptr_equal(x->buckets, s->prefix.buckets);
    assert_int_equal(x->bucket_mask, s->prefix.bucket_mask);
    assert_true(x->hash_mask == s->prefix.hash_mask);
    for (uint32_t b = 0; b < NUM_BLOCKS; b++) {
        const pkv__prefix_entry *e = &x->entries[b];
        const pkv__prefix_entry *o = &s->entries[b];
        assert_true(e->hash == o->hash && e->salt == o->salt);
        assert_int_equal(e->bucket_next, o->bucket_next);
        assert_int_equal(e->parent, o->parent);
        assert_int_equal(e->parent_generation, o->parent_generation);
    }
    assert_memory_equal(x->tokens, s->tokens, sizeof s->tokens);
    assert_memory_equal(x->buckets, s->buckets,
                        ((size_t)x->bucket_mask + 1) * sizeof *s->buckets);

    for (int i = 0; i < NSEQ; i++) {
        const pkv__table *t = &f->seqs[i].table;
        assert_ptr_equal(t->blocks, s->tables[i].blocks);
        assert_int_equal(t->num_blocks, s->tables[i].num_blocks);
        assert_int_equal(t->capacity, s->tables[i].capacity);
        assert_int_equal(t->num_tokens, s->tables[i].num_tokens);
        if (t->num_blocks)
            assert_memory_equal(t->blocks, s->table_blocks[i],
                                t->num_blocks * sizeof(uint32_t));
        const pkv__prefix_chain *c = &f->seqs[i].chain;
        assert_ptr_equal(c->links, s->chains[i].links);
        assert_int_equal(c->num_links, s->chains[i].num_links);
        assert_int_equal(c->capacity, s->chains[i].capacity);
        for (uint32_t j = 0; j < c->num_links; j++) {
            assert_true(c->links[j].hash == s->chain_links[i][j].hash);
            assert_int_equal(c->links[j].block, s->chain_links[i][j].block);
            assert_int_equal(c->links[j].generation,
                             s->chain_links[i][j].generation);
        }
    }
}

/* ------------------------------------------------------------------ sweep */

typedef pkv_status (*call_fn)(fixture *f);

/* For N = 1, 2, ...: build the fixture, fail the Nth allocation of the call
 * (and, with fail_after, every later one), check the failure left no trace.
 * Stops at the first N for which the call succeeds; returns that N. */
static long sweep_one(call_fn call, int fail_after)
{
    for (long n = 1; n <= MAX_N; n++) {
        build(&F);
        snapshot *before = test_malloc(sizeof *before);
        take(&F, before);
        long live = C.live;
        size_t bytes = C.bytes;
        arm(n, fail_after);
        pkv_status st = call(&F);
        disarm();
        if (st == PKV_OK) {
            test_free(before);
            teardown_fixture(&F);
            assert_true(n > 1); /* the call does allocate */
            return n;
        }
        assert_int_equal(st, PKV_ERR_OUT_OF_MEMORY);
        assert_true(C.failures > 0);
        assert_int_equal(C.live, live);
        assert_int_equal(C.bytes, bytes);
        assert_unchanged(&F, before);
        test_free(before);
        teardown_fixture(&F);
    }
    fail_msg("the call never succeeded");
    return 0;
}

static void sweep(call_fn call)
{
    long n = sweep_one(call, 0);
    assert_int_equal(sweep_one(call, 1), n);
}

static pkv_status call_append_grow(fixture *f)
{
    /* Grows the table array and copies the shared partial last block. */
    seq *s = &f->seqs[0];
    fill_tokens(s->tokens, 15, 17, 0);
    pkv__block_copy copy;
    pkv_status st = pkv__table_append(&s->table, &f->pool, 2, &copy);
    if (st == PKV_OK)
        assert_int_not_equal(copy.dst, PKV__NULL_BLOCK);
    else
        assert_int_equal(copy.dst, PKV__NULL_BLOCK);
    return st;
}

static pkv_status call_fork(fixture *f)
{
    return pkv__table_fork(&f->seqs[3].table, &f->seqs[0].table, &f->pool);
}

/* Look up the freed prompt: its blocks are cached-free. */
static void lookup_freed(fixture *f)
{
    int32_t prompt[17];
    fill_tokens(prompt, 0, 17, 1000);
    pkv__prefix_lookup(&f->prefix, prompt, 17, 5, NULL, 0, f->links,
                       &f->n_hit);
    assert_int_equal(f->n_hit, 4);
    for (uint32_t j = 0; j < f->n_hit; j++) {
        f->hit_blocks[j] = f->links[j].block;
        assert_int_equal(f->pool.blocks[f->links[j].block].state,
                         PKV__BLOCK_CACHED_FREE);
    }
}

/* lookup allocates nothing, so the armed failure falls in adopt. */
static pkv_status call_adopt(fixture *f)
{
    lookup_freed(f);
    return pkv__table_adopt(&f->seqs[3].table, &f->pool, f->hit_blocks,
                            f->n_hit);
}

static pkv_status call_chain_adopt(fixture *f)
{
    lookup_freed(f);
    return pkv__prefix_chain_adopt(&f->seqs[3].chain, &f->pool, f->links,
                                   f->n_hit);
}

static pkv_status call_register(fixture *f)
{
    seq *s = &f->seqs[2];
    pkv_status st = pkv__prefix_register(&f->prefix, &s->chain, &s->table,
                                         s->tokens, s->salt);
    if (st == PKV_OK) {
        /* Two blocks found in the cache, three added. */
        assert_int_equal(s->chain.num_links, 5);
        assert_int_equal(s->chain.links[0].block, f->seqs[0].table.blocks[0]);
        assert_int_equal(s->chain.links[2].block, s->table.blocks[2]);
        assert_true(f->pool.blocks[s->table.blocks[4]].cached);
    }
    return st;
}

#define SWEEP_TEST(name, call)        \
    static void name(void **state) \
    {                              \
        (void)state;               \
        sweep(call);               \
    }

SWEEP_TEST(test_table_append, call_append_grow)
SWEEP_TEST(test_table_fork, call_fork)
SWEEP_TEST(test_table_adopt, call_adopt)
SWEEP_TEST(test_prefix_chain_adopt, call_chain_adopt)
SWEEP_TEST(test_prefix_register, call_register)

/* ----------------------------------------------- init and engine creation */

static void test_pool_init(void **state)
{
    (void)state;
    pkv__allocator a = counting_allocator();
    for (int after = 0; after <= 1; after++) {
        for (long n = 1;; n++) {
            assert_true(n <= MAX_N);
            pkv__pool pool;
            memset(&pool, 0xa5, sizeof pool);
            pkv__pool same;
            memcpy(&same, &pool, sizeof same);
            arm(n, after);
            pkv_status st = pkv__pool_init(&pool, &a, NUM_BLOCKS, BS);
            disarm();
            if (st == PKV_OK) {
                assert_true(n > 1);
                pkv__pool_release(&pool);
                assert_no_leak();
                break;
            }
            assert_int_equal(st, PKV_ERR_OUT_OF_MEMORY);
            assert_memory_equal(&pool, &same, sizeof pool);
            assert_no_leak();
        }
    }
}

static void test_prefix_init(void **state)
{
    (void)state;
    pkv__allocator a = counting_allocator();
    for (int after = 0; after <= 1; after++) {
        long n = 1;
        for (;; n++) {
            assert_true(n <= MAX_N);
            disarm();
            pkv__pool pool;
            assert_int_equal(pkv__pool_init(&pool, &a, NUM_BLOCKS, BS),
                             PKV_OK);
            pkv__pool same = pool;
            long live = C.live;
            size_t bytes = C.bytes;
            pkv__prefix prefix;
            arm(n, after);
            pkv_status st = pkv__prefix_init(&prefix, &pool);
            disarm();
            if (st == PKV_OK) {
                assert_true(pool.on_uncache_ctx == &prefix);
                pkv__prefix_release(&prefix);
                assert_null(pool.on_uncache_ctx);
                pkv__pool_release(&pool);
                assert_no_leak();
                break;
            }
            assert_int_equal(st, PKV_ERR_OUT_OF_MEMORY);
            assert_int_equal(C.live, live);
            assert_int_equal(C.bytes, bytes);
            assert_int_equal(C.bad_frees, 0);
            assert_memory_equal(&pool, &same, sizeof pool);
            pkv__pool_release(&pool);
            assert_no_leak();
        }
        /* entries, tokens, buckets: three allocations. */
        assert_int_equal(n, 4);
    }
}

/* Regression: the bucket count was doubled in 32 bits until it reached the
 * block count, which never ends past 2^31 blocks. Every allocation fails
 * here, so no memory that large is touched. */
static void test_prefix_init_huge_pool(void **state)
{
    (void)state;
    pkv__pool pool;
    memset(&pool, 0, sizeof pool);
    pool.alloc = counting_allocator();
    pool.num_blocks = UINT32_C(0x80000001);
    pool.block_size = 1;
    pkv__prefix prefix;
    arm(1, 1);
    assert_int_equal(pkv__prefix_init(&prefix, &pool), PKV_ERR_OUT_OF_MEMORY);
    disarm();
    assert_no_leak();
}

static void test_engine_create(void **state)
{
    (void)state;
    pkv_engine_params params;
    assert_int_equal(pkv_engine_params_init(&params), PKV_OK);
    params.num_layers = 2;
    params.num_q_heads = 4;
    params.num_kv_heads = 2;
    params.head_dim = 8;
    params.num_blocks = 64;
    params.allocator.alloc = count_alloc;
    params.allocator.free = count_free;
    params.allocator.user = &C;
    /* With a deployment key too (its seal is one more allocation). */
    static const uint8_t key[32] = {1, 2, 3};
    for (int step = 0; step < 4; step++) {
        int after = step % 2;
        params.seal_key = step >= 2 ? key : NULL;
        for (long n = 1;; n++) {
            assert_true(n <= MAX_N);
            pkv_engine *engine = (pkv_engine *)&params; /* must become NULL */
            arm(n, after);
            pkv_status st = pkv_engine_create(&params, &engine);
            disarm();
            if (st == PKV_OK) {
                assert_true(n > 1);
                assert_non_null(engine);
                pkv_engine_destroy(engine);
                assert_no_leak();
                break;
            }
            assert_int_equal(st, PKV_ERR_OUT_OF_MEMORY);
            assert_null(engine);
            assert_true(C.failures > 0);
            assert_no_leak();
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_init),
        cmocka_unit_test(test_prefix_init),
        cmocka_unit_test(test_prefix_init_huge_pool),
        cmocka_unit_test(test_table_append),
        cmocka_unit_test(test_table_fork),
        cmocka_unit_test(test_table_adopt),
        cmocka_unit_test(test_prefix_register),
        cmocka_unit_test(test_prefix_chain_adopt),
        cmocka_unit_test(test_engine_create),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
