/* SPDX-License-Identifier: MIT */
/*
 * KV events (pkv_engine_params.kv_events) and pkv_engine_reset_prefix_cache,
 * with hybrid memory's groups (three layers: windows of 5 tokens, none and
 * 4, in 4-token blocks) and a pool small enough that prompts evict each
 * other. The callback keeps a mirror of the prefix cache from the events
 * alone; after every step it must hold exactly the blocks the engine
 * caches, with their hashes and groups: every block announced stored
 * once, before its removal, and removed once. Each stored block's hash is
 * that of its parent and tokens (group 0), or a group-0 hash mixed with
 * its group, and its parent was announced before it. Then the same
 * through a saved prefix cache loaded into a new engine (announced at
 * the next step's end, those its admission did not evict first), and a
 * reset.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check_host_cmocka.h"
#include "engine.h"
#include "hash_model.h"
#include "kv/prefix_groups.h"

#include <stdlib.h>
#include <string.h>

enum { PROMPT = 13, NEW = 6, MAX_BLOCKS = 512, MAX_EVER = 4096 };

static const uint32_t windows[3] = {5, 0, 4};

/* The prefix cache as the events tell it. */
typedef struct mirror {
    uint8_t held[MAX_BLOCKS];
    uint64_t hash[MAX_BLOCKS];
    uint32_t group[MAX_BLOCKS];
    uint64_t ever[MAX_EVER]; /* group-0 hashes ever announced */
    uint32_t num_ever;
    uint64_t stored, removed, cleared, calls;
} mirror;

static int announced(const mirror *m, uint64_t hash, uint32_t group)
{
    for (uint32_t i = 0; i < m->num_ever; i++)
        if ((group == 0 ? m->ever[i]
                        : pkv__prefix_group_hash(m->ever[i], group)) == hash)
            return 1;
    return 0;
}

static void on_events(void *user, const pkv_kv_event *events, uint32_t count)
{
    mirror *m = user;
    m->calls++;
    assert_true(count >= 1 && count <= 256);
    for (uint32_t i = 0; i < count; i++) {
        const pkv_kv_event *e = &events[i];
        assert_int_equal(e->block_size, 4);
        if (e->kind == PKV_KV_EVENT_ALL_CLEARED) {
            memset(m->held, 0, sizeof m->held);
            m->cleared++;
            continue;
        }
        assert_true(e->block < MAX_BLOCKS);
        assert_true(e->group < 3);
        /* Groups: the full layer first, then the windows in order. */
        assert_int_equal(e->window, e->group == 0 ? 0 : e->group == 1 ? 4 : 5);
        if (e->kind == PKV_KV_EVENT_REMOVED) {
            assert_true(m->held[e->block]);
            assert_true(m->hash[e->block] == e->hash);
            assert_int_equal(m->group[e->block], e->group);
            assert_null(e->token_ids);
            m->held[e->block] = 0;
            m->removed++;
            continue;
        }
        assert_int_equal(e->kind, PKV_KV_EVENT_STORED);
        assert_false(m->held[e->block]); /* once, before its removal */
        assert_non_null(e->token_ids);
        int has_parent = (e->flags & PKV_KV_EVENT_HAS_PARENT) != 0;
        if (!has_parent)
            assert_true(e->parent_hash == 0);
        if (e->group == 0) {
            uint64_t want = pkv__prefix_hash(has_parent ? e->parent_hash : 0,
                                             e->token_ids, 4, 0);
            assert_true(e->hash == want);
            assert_true(m->num_ever < MAX_EVER);
            m->ever[m->num_ever++] = e->hash;
        } else {
            assert_true(announced(m, e->hash, e->group));
        }
        if (has_parent)
            assert_true(announced(m, e->parent_hash, e->group));
        m->held[e->block] = 1;
        m->hash[e->block] = e->hash;
        m->group[e->block] = e->group;
        m->stored++;
    }
}

/* The mirror holds exactly the engine's cached blocks. */
static void check_mirror(const mirror *m, const pkv_engine *e)
{
    const pkv__pool *pool = &e->kv.pool;
    assert_true(pool->num_blocks <= MAX_BLOCKS);
    for (uint32_t b = 1; b < pool->num_blocks; b++) {
        assert_int_equal(m->held[b], pool->blocks[b].cached);
        if (!m->held[b])
            continue;
        assert_true(m->hash[b] == e->kv.prefix.entries[b].hash);
        assert_int_equal(m->group[b], pool->blocks[b].group);
    }
}

static pkv_engine_params event_params(mirror *m)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_layers = 3;
    p.layer_windows = windows;
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    p.num_blocks = 16; /* over every layer: 48 of one layer each */
    p.watermark = 0;
    p.kv_events = on_events;
    p.kv_events_user = m;
    return p;
}

/* Step until idle, the mirror checked after each step. */
static void run_checked(ch_host *h, const mirror *m)
{
    for (int steps = 0; pkv_engine_has_work(h->engine); steps++) {
        assert_true(steps < 1000);
        ch_step(h, NULL);
        check_mirror(m, h->engine);
    }
}

static void test_events_follow_the_cache(void **state)
{
    (void)state;
    mirror *m = calloc(1, sizeof *m);
    assert_non_null(m);
    pkv_engine_params p = event_params(m);
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    /* Prompts that share leading blocks (seeds repeat), two at a time,
     * more than the pool holds: hits, and evictions. */
    for (uint32_t round = 0; round < 12; round++) {
        for (uint32_t k = 0; k < 2; k++) {
            int32_t *prompt = hm_prompt(PROMPT, 1 + (round * 2 + k) % 5);
            if (round % 3 == 2)
                prompt[PROMPT - 2] = (int32_t)round; /* a new last block */
            ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
            free(prompt);
        }
        run_checked(&h, m);
    }
    assert_true(m->stored > 0);
    assert_true(m->removed > 0); /* evictions were announced */
    assert_int_equal(m->cleared, 0);
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_true(st.prefix_hit_tokens > 0);

    /* A saved prefix cache loaded into a new engine is announced at its
     * next step's end. */
    size_t size = 0;
    assert_int_equal(pkv_engine_save_prefix_cache(h.engine, NULL, 0, &size),
                     PKV_OK);
    void *data = malloc(size);
    assert_non_null(data);
    assert_int_equal(pkv_engine_save_prefix_cache(h.engine, data, size, &size),
                     PKV_OK);
    ch_check_idle(&h);
    ch_free(&h);
    mirror *m2 = calloc(1, sizeof *m2);
    assert_non_null(m2);
    p = event_params(m2);
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    uint32_t loaded = 0;
    assert_int_equal(
        pkv_engine_load_prefix_cache(h.engine, data, size, &loaded), PKV_OK);
    assert_true(loaded > 0);
    assert_int_equal(m2->calls, 0); /* delivered at a step's end */
    int32_t *prompt = hm_prompt(PROMPT, 1);
    ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
    run_checked(&h, m2);
    assert_true(m2->stored > 0);

    /* A reset: refused while a sequence holds blocks, then everything
     * cleared in one event, nothing removed one by one. */
    ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
    ch_step(&h, NULL);
    assert_int_equal(pkv_engine_reset_prefix_cache(h.engine),
                     PKV_ERR_BAD_STATE);
    run_checked(&h, m2);
    uint64_t removed = m2->removed;
    assert_int_equal(pkv_engine_reset_prefix_cache(h.engine), PKV_OK);
    assert_int_equal(m2->cleared, 1);
    assert_int_equal(m2->removed, removed);
    check_mirror(m2, h.engine);
    assert_int_equal(h.engine->kv.pool.num_cached_free, 0);
    /* The prompt misses now, and is announced again. */
    uint64_t stored = m2->stored;
    ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
    run_checked(&h, m2);
    assert_true(m2->stored > stored);
    assert_int_equal(pkv_engine_reset_prefix_cache(NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    free(prompt);
    free(data);
    ch_check_idle(&h);
    ch_free(&h);
    free(m);
    free(m2);
}

/* Without the callback nothing is kept for events. */
static void test_no_events_no_memory(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    assert_null(h.engine->kv.events.state);
    assert_null(h.engine->kv.prefix.events);
    int32_t *prompt = hm_prompt(PROMPT, 3);
    ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
    ch_run(&h, 100);
    assert_int_equal(pkv_engine_reset_prefix_cache(h.engine), PKV_OK);
    assert_int_equal(h.engine->kv.pool.num_cached_free, 0);
    free(prompt);
    ch_check_idle(&h);
    ch_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_follow_the_cache),
        cmocka_unit_test(test_no_events_no_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
