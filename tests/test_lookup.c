/* SPDX-License-Identifier: MIT */
/*
 * pkv_engine_lookup_prefix: a prompt's cached prefix, asked without adding
 * it. What it answers is what the admission of that prompt then takes
 * from the cache (pkv_engine_stats.prefix_hit_tokens), with hybrid
 * memory's groups (windows of 5 tokens, none and 4, in 4-token blocks)
 * and a pool small enough to evict; it changes nothing (the pool's
 * blocks, queues and the index are the same bytes after it); tenants'
 * salts stay apart; bad prompts are refused as pkv_seq_add refuses them.
 * Then from another thread while the main thread steps (run under
 * ThreadSanitizer: the threads label).
 */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check_host_cmocka.h"
#include "engine.h"
#include "hash_model.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { PROMPT = 13, NEW = 6 };

static const uint32_t windows[3] = {5, 0, 4};

static pkv_engine_params lookup_params(void)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_layers = 3;
    p.layer_windows = windows;
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    p.num_blocks = 22; /* over every layer: 66 of one layer each */
    p.watermark = 0;
    return p;
}

static uint32_t lookup(pkv_engine *e, const int32_t *t, uint32_t n,
                       uint64_t salt)
{
    uint32_t cached = UINT32_MAX;
    assert_int_equal(pkv_engine_lookup_prefix(e, t, n, salt, &cached), PKV_OK);
    return cached;
}

static uint64_t hit_tokens(const pkv_engine *e)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(e, &st), PKV_OK);
    return st.prefix_hit_tokens;
}

/* The pool's and index's bytes, to show a lookup changes none. */
typedef struct snapshot {
    pkv__block *blocks;
    pkv__prefix_entry *entries;
    pkv__pool pool;
} snapshot;

static snapshot take(const pkv_engine *e)
{
    const pkv__pool *pool = &e->kv.pool;
    snapshot s = {malloc(pool->num_blocks * sizeof *s.blocks),
                  malloc(pool->num_blocks * sizeof *s.entries), *pool};
    assert_non_null(s.blocks);
    assert_non_null(s.entries);
    memcpy(s.blocks, pool->blocks, pool->num_blocks * sizeof *s.blocks);
    memcpy(s.entries, e->kv.prefix.entries,
           pool->num_blocks * sizeof *s.entries);
    return s;
}

static void same(const pkv_engine *e, snapshot *s)
{
    const pkv__pool *pool = &e->kv.pool;
    assert_memory_equal(s->blocks, pool->blocks,
                        pool->num_blocks * sizeof *s->blocks);
    assert_memory_equal(s->entries, e->kv.prefix.entries,
                        pool->num_blocks * sizeof *s->entries);
    assert_memory_equal(&s->pool, pool, sizeof *pool);
    free(s->blocks);
    free(s->entries);
}

static void test_lookup_is_admission(void **state)
{
    (void)state;
    pkv_engine_params p = lookup_params();
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    uint32_t tried = 0, hits = 0;
    /* Prompts that share leading blocks, one at a time: before each, the
     * lookup; after it ran, what its admission took. */
    for (uint32_t round = 0; round < 30; round++) {
        int32_t *prompt = hm_prompt(PROMPT, 1 + (round * 7) % 4);
        if (round % 3 == 1)
            prompt[6] = (int32_t)round; /* differs from its second block */
        uint32_t n = round % 5 == 4 ? 9 : PROMPT;
        snapshot s = take(h.engine);
        uint32_t cached = lookup(h.engine, prompt, n, 0);
        same(h.engine, &s);
        assert_int_equal(cached % 4, 0);
        assert_true(cached < n);
        /* Another tenant's salt finds nothing of this one's. */
        assert_int_equal(lookup(h.engine, prompt, n, 99), 0);
        uint64_t before = hit_tokens(h.engine);
        ch_add_prompt(&h, prompt, n, NEW, 0, 0);
        ch_run(&h, 200);
        assert_int_equal(hit_tokens(h.engine) - before, cached);
        tried++;
        hits += cached > 0;
        free(prompt);
    }
    assert_true(hits > 0 && hits < tried);
    ch_check_idle(&h);
    ch_free(&h);
}

static void test_lookup_errors(void **state)
{
    (void)state;
    pkv_engine_params p = lookup_params();
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    int32_t t[4] = {1, 2, 3, 4};
    uint32_t cached = 7;
    assert_int_equal(pkv_engine_lookup_prefix(NULL, t, 4, 0, &cached),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(cached, 0);
    assert_int_equal(pkv_engine_lookup_prefix(h.engine, t, 4, 0, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_lookup_prefix(h.engine, NULL, 4, 0, &cached),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_lookup_prefix(h.engine, t, 0, 0, &cached),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_lookup_prefix(h.engine, t, p.max_model_len,
                                              0, &cached),
                     PKV_ERR_INVALID_ARGUMENT);
    t[2] = 1000; /* vocab_size */
    assert_int_equal(pkv_engine_lookup_prefix(h.engine, t, 4, 0, &cached),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_last_error(), "prompt[2]"));
    t[2] = 3;
    /* A prompt shorter than two blocks has nothing to take. */
    assert_int_equal(lookup(h.engine, t, 4, 0), 0);
    ch_free(&h);
}

/* Lookups from another thread while this one steps. */
typedef struct prober {
    pkv_engine *engine;
    atomic_int stop;
    atomic_ulong lookups;
    int bad; /* an answer out of range, or a failed call */
} prober;

static void *probe(void *arg)
{
    prober *pr = arg;
    int32_t *prompts[4];
    for (uint32_t i = 0; i < 4; i++)
        prompts[i] = hm_prompt(PROMPT, 1 + i);
    while (!atomic_load(&pr->stop)) {
        for (uint32_t i = 0; i < 4; i++) {
            uint32_t cached = UINT32_MAX;
            if (pkv_engine_lookup_prefix(pr->engine, prompts[i], PROMPT, 0,
                                         &cached) != PKV_OK ||
                cached % 4 != 0 || cached >= PROMPT)
                pr->bad = 1;
            atomic_fetch_add(&pr->lookups, 1);
        }
    }
    for (uint32_t i = 0; i < 4; i++)
        free(prompts[i]);
    return NULL;
}

static void test_lookup_while_stepping(void **state)
{
    (void)state;
    pkv_engine_params p = lookup_params();
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    prober pr = {h.engine, 0, 0, 0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, probe, &pr), 0);
    for (uint32_t round = 0; round < 20; round++) {
        for (uint32_t k = 0; k < 2; k++) {
            int32_t *prompt = hm_prompt(PROMPT, 1 + (round + k) % 6);
            ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
            free(prompt);
        }
        ch_run(&h, 200);
    }
    /* A starved thread may not have run yet: one lookup at least. */
    while (atomic_load(&pr.lookups) == 0)
        sched_yield();
    atomic_store(&pr.stop, 1);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_false(pr.bad);
    assert_true(atomic_load(&pr.lookups) > 0);
    ch_check_idle(&h);
    ch_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup_is_admission),
        cmocka_unit_test(test_lookup_errors),
        cmocka_unit_test(test_lookup_while_stepping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
