/* SPDX-License-Identifier: MIT */
/*
 * Per-layer attention windows (pkv_engine_params.layer_windows), as a
 * model that mixes windowed and full layers runs them. Three layers with
 * windows of 5 tokens (not a multiple of the 4-token block), none (full
 * attention) and 4 (one block), prompts longer than every window, and
 * every path that moves KV: chunked prefill across the window edge,
 * prefix hits, fork, preemption (recompute and swap), truncate,
 * speculative rows, export/import and the saved prefix cache. ch_step
 * checks every output row of every layer against dense attention over
 * that layer's window, every token kept (PKV_KV_MEMORY_EVERY_TOKEN). The
 * same with hybrid memory, the default (a group of layers per window,
 * windowed groups dropping the blocks behind their windows): the same
 * rows, fewer blocks; asked for by kv_memory, whose num_blocks counts
 * blocks over every layer, and by 0.2.0's hybrid_memory, whose num_blocks
 * counts the pool's. Built twice: test_windows (CPU backend) and
 * test_windows_opencl.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv_layout.h"
#include "engine.h"
#include "seqs.h"
#include "check_host_cmocka.h"
#include "hash_model.h"

#include <stdlib.h>
#include <string.h>

#ifdef PKV_HAVE_OPENCL
static const int32_t backend = PKV_BACKEND_KIND_OPENCL;
#else
static const int32_t backend = PKV_BACKEND_KIND_CPU;
#endif

enum { PROMPT = 13, SEQS = 4, NEW = 12 };

static const uint32_t windows[3] = {5, 0, 4};

static pkv_engine_params window_params(int32_t dtype, int32_t mode)
{
    pkv_engine_params p = hm_params(backend);
    p.num_layers = 3;
    p.layer_windows = windows;
    p.kv_dtype = dtype;
    p.preempt_mode = mode;
    p.swap_bytes = 1 << 20;
    p.watermark = 0;
    p.long_prefill_threshold = 3; /* chunks cross the window edges */
    p.num_blocks = 17;            /* 16 usable: the sequences preempt */
    p.kv_memory = PKV_KV_MEMORY_EVERY_TOKEN; /* unless a test asks */
    return p;
}

/* A sequence of h moved into h as a copy (export, import). */
static void move_copy(ch_host *h, pkv_seq_id id)
{
    pkv_seq_id copy = 0;
    assert_int_equal(ch_move(h, id, &copy), PKV_OK);
}

/* h's prefix cache saved (*size bytes, the caller frees them), then h
 * idle, freed and made again with p: a restart. */
static void *restart(ch_host *h, const pkv_engine_params *p, int32_t dtype,
                     size_t *size)
{
    assert_int_equal(pkv_engine_save_prefix_cache(h->engine, NULL, 0, size),
                     PKV_OK);
    void *data = malloc(*size);
    assert_non_null(data);
    assert_int_equal(
        pkv_engine_save_prefix_cache(h->engine, data, *size, size), PKV_OK);
    ch_check_idle(h);
    ch_free(h);
    ch_cmocka_init(h, p, hm_tolerance(dtype));
    return data;
}

/* The most blocks a windowed group of the engine holds for one sequence
 * (hybrid memory), over the running sequences. */
static uint32_t most_windowed_blocks(const pkv_engine *e)
{
    uint32_t most = 0;
    for (uint32_t i = 0; i < e->seqs.running.count; i++) {
        const pkv__seq *s = e->seqs.running.items[i];
        for (uint32_t g = 0; g < e->kv.groups.num_groups; g++)
            if (pkv__groups_window(&e->kv.groups, g) != 0 &&
                pkv__table_held(pkv__kv_table(&s->kv, g)) > most)
                most = pkv__table_held(pkv__kv_table(&s->kv, g));
    }
    return most;
}

/* hybrid: hybrid memory. */
static void workload(int32_t dtype, int32_t mode, int hybrid)
{
    pkv_engine_params p = window_params(dtype, mode);
    if (hybrid) { /* 0.2.0's switch */
        p.kv_memory = PKV_KV_MEMORY_HYBRID;
        p.hybrid_memory = 1;
        p.num_blocks = 33; /* of one layer each: the sequences preempt */
    }
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    int32_t *prompts[SEQS];
    pkv_seq_id ids[SEQS];
    for (uint32_t i = 0; i < SEQS; i++) {
        prompts[i] = hm_prompt(PROMPT, 60 + i);
        if (i == 1) /* a prefix hit on prompt 0's blocks, added later */
            memcpy(prompts[1], prompts[0], 9 * sizeof *prompts[0]);
        else
            ids[i] = ch_add_prompt(&h, prompts[i], PROMPT, NEW, 0, 0);
    }
    if (hybrid)
        assert_int_equal(h.engine->kv.groups.num_groups, 3);
    uint32_t most = 0;
    for (int s = 0; s < 6; s++) {
        ch_step(&h, NULL);
        if (most_windowed_blocks(h.engine) > most)
            most = most_windowed_blocks(h.engine);
    }
    ids[1] = ch_add_prompt(&h, prompts[1], PROMPT, NEW, 0, 0);
    pkv_seq_id child;
    const pkv__seq *es = pkv__seqs_find(&h.engine->seqs, ids[0]);
    if (es != NULL && es->state == PKV__SEQ_RUNNING &&
        es->num_generated > 0) {
        assert_int_equal(ch_fork(&h, ids[0], -1, &child), PKV_OK);
    }
    for (int s = 0; s < 3; s++)
        ch_step(&h, NULL);
    /* A cut inside the first window, then speculative rows. */
    es = pkv__seqs_find(&h.engine->seqs, ids[2]);
    if (es != NULL && es->state == PKV__SEQ_RUNNING) {
        assert_int_equal(ch_truncate(&h, ids[2], 9), PKV_OK);
    }
    ch_step(&h, NULL);
    es = pkv__seqs_find(&h.engine->seqs, ids[3]);
    if (es != NULL && es->state == PKV__SEQ_RUNNING &&
        es->num_computed + 1 == es->num_tokens) {
        const ch_seq *r = ch_find(&h, ids[3]);
        int32_t drafts[3];
        int32_t last = r->tokens[r->num_tokens - 1];
        for (uint32_t k = 0; k < 3; k++) {
            drafts[k] = hm_sample(last, r->num_tokens - 1 + k, p.vocab_size);
            last = drafts[k];
        }
        drafts[2] = (drafts[2] + 1) % (int32_t)p.vocab_size; /* rejected */
        assert_int_equal(ch_propose(&h, ids[3], drafts, 3), PKV_OK);
    }
    ch_step(&h, NULL);
    es = pkv__seqs_find(&h.engine->seqs, ids[1]);
    if (es != NULL && es->state == PKV__SEQ_RUNNING)
        move_copy(&h, ids[1]);
    if (es != NULL && es->state == PKV__SEQ_RUNNING && hybrid)
        /* A cut behind the 4- and 5-token windows: computed again. */
        assert_int_equal(ch_truncate(&h, ids[1], 2), PKV_OK);
    for (int s = 0; pkv_engine_has_work(h.engine); s++) {
        assert_true(s < 500);
        ch_step(&h, NULL);
        ch_check(&h);
        if (most_windowed_blocks(h.engine) > most)
            most = most_windowed_blocks(h.engine);
    }
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_true(st.prefix_hit_tokens > 0);
    assert_true(st.preemptions > 0);
    assert_true((st.swap_outs > 0) == (mode == PKV_PREEMPT_MODE_SWAP));
    /* Between steps, a windowed group holds what its next row sees: 5
     * tokens reach at most 2 blocks of 4, where 25 tokens take 7. */
    if (hybrid)
        assert_int_equal(most, 2);
    else
        assert_true(most == 0);
    /* The groups' counts add up to the pool's. */
    assert_int_equal(st.kv_groups, hybrid ? 3 : 1);
    assert_int_equal(st.group_layers, hybrid ? 1 : 3);
    uint64_t blocks = 0, tokens = 0;
    /* Full layers first, then the windows in increasing order; without
     * hybrid memory one group keeps every token. */
    const uint32_t group_windows[3] = {0, 4, 5};
    for (uint32_t g = 0; g < st.kv_groups; g++) {
        uint32_t window;
        uint64_t b, t;
        assert_int_equal(
            pkv_engine_get_group_stats(h.engine, g, &window, &b, &t), PKV_OK);
        assert_int_equal(window, group_windows[g]);
        blocks += b;
        tokens += t;
    }
    assert_int_equal(blocks + 1, st.blocks_used);
    assert_int_equal(tokens, st.tokens_stored);

    /* Prompt 0 again, so that its blocks are the cache's newest; then the
     * saved prefix cache in a new engine: prompt 0 hits it (with hybrid
     * memory, when its windowed groups' blocks at the prompt's end
     * outlived the pressure of this small pool: they are dropped as it
     * decodes, first in line for eviction; hybrid_hits has the hit with
     * room). */
    ch_add_prompt(&h, prompts[0], PROMPT, NEW, 0, 0);
    ch_run(&h, 100);
    size_t size = 0;
    void *data = restart(&h, &p, dtype, &size);
    uint32_t loaded = 0;
    assert_int_equal(
        pkv_engine_load_prefix_cache(h.engine, data, size, &loaded), PKV_OK);
    assert_true(loaded > 0);
    ch_add_prompt(&h, prompts[0], PROMPT, NEW, 0, 0);
    ch_run(&h, 100);
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_true(st.prefix_hit_tokens > 0 || hybrid);
    ch_check_idle(&h);
    ch_free(&h);
    free(data);
    for (uint32_t i = 0; i < SEQS; i++)
        free(prompts[i]);
}

static void test_mixed_windows(void **state)
{
    (void)state;
    const int32_t modes[] = {PKV_PREEMPT_MODE_RECOMPUTE, PKV_PREEMPT_MODE_SWAP};
    for (size_t m = 0; m < 2; m++) {
        workload(PKV_KV_DTYPE_F32, modes[m], 0);
        workload(PKV_KV_DTYPE_F16, modes[m], 0);
    }
}

/* Hybrid memory's prefix hits with room for every block: a prompt run to
 * its first token, then again (its windowed groups' last blocks hit with
 * its full group's), then from a saved prefix cache in a new engine. */
static void hybrid_hits(int32_t dtype)
{
    pkv_engine_params p = window_params(dtype, PKV_PREEMPT_MODE_RECOMPUTE);
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    p.num_blocks = 22; /* over every layer: 66 of one layer each */
    int32_t *prompt = hm_prompt(PROMPT, 77);
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    for (int run = 0; run < 2; run++) {
        ch_add_prompt(&h, prompt, PROMPT, 1, 0, 0);
        ch_run(&h, 100);
    }
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    /* 13 tokens in blocks of 4: the second run computes only its last. */
    assert_int_equal(st.prefix_hit_tokens, 12);
    size_t size = 0;
    void *data = restart(&h, &p, dtype, &size);
    uint32_t loaded = 0;
    assert_int_equal(
        pkv_engine_load_prefix_cache(h.engine, data, size, &loaded), PKV_OK);
    /* The 3 full blocks of the full group and of both windowed ones. */
    assert_int_equal(loaded, 9);
    ch_add_prompt(&h, prompt, PROMPT, 1, 0, 0);
    ch_run(&h, 100);
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_int_equal(st.prefix_hit_tokens, 12);
    ch_check_idle(&h);
    ch_free(&h);
    /* Into an engine without groups: its blocks hold other layers. */
    p.kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
    p.num_blocks = 17;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    assert_int_equal(
        pkv_engine_load_prefix_cache(h.engine, data, size, &loaded),
        PKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(pkv_engine_last_error(h.engine), "groups"));
    ch_free(&h);
    free(data);
    free(prompt);
}

/* An export from hybrid memory keeps its KV in an engine grouped the same
 * way; one without groups, and a hybrid engine given an export without
 * them, take the tokens and compute the KV again. */
static void hybrid_moves(int32_t dtype)
{
    pkv_engine_params p = window_params(dtype, PKV_PREEMPT_MODE_RECOMPUTE);
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    p.num_blocks = 22; /* over every layer: 66 of one layer each */
    int32_t *prompt = hm_prompt(PROMPT, 91);
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    pkv_seq_id id = ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
    for (int s = 0; s < 8; s++)
        ch_step(&h, NULL);
    const pkv__seq *es = pkv__seqs_find(&h.engine->seqs, id);
    assert_non_null(es);
    uint32_t computed = es->num_computed;
    assert_true(computed > 8); /* past both windows */
    size_t size = 0;
    assert_int_equal(pkv_seq_export(h.engine, id, NULL, 0, &size), PKV_OK);
    uint8_t *data = malloc(size);
    assert_non_null(data);
    assert_int_equal(pkv_seq_export(h.engine, id, data, size, &size),
                     PKV_OK);
    const int hybrid[2] = {1, 0};
    for (int k = 0; k < 2; k++) {
        pkv_engine_params q = p;
        q.kv_memory = hybrid[k] ? PKV_KV_MEMORY_HYBRID
                                : PKV_KV_MEMORY_EVERY_TOKEN;
        pkv_engine *e = NULL;
        assert_int_equal(pkv_engine_create(&q, &e), PKV_OK);
        pkv_seq_id copy = 0;
        assert_int_equal(pkv_seq_import(e, NULL, data, size, &copy),
                         PKV_OK);
        const pkv__seq *c = pkv__seqs_find(&e->seqs, copy);
        assert_non_null(c);
        assert_int_equal(c->num_computed, hybrid[k] ? computed : 0);
        if (!hybrid[k]) { /* and back: a hybrid engine computes it again */
            size_t plain_size = 0;
            assert_int_equal(
                pkv_seq_export(e, copy, NULL, 0, &plain_size), PKV_OK);
            uint8_t *plain = malloc(plain_size);
            assert_non_null(plain);
            assert_int_equal(
                pkv_seq_export(e, copy, plain, plain_size, &plain_size),
                PKV_OK);
            pkv_engine *g = NULL;
            assert_int_equal(pkv_engine_create(&p, &g), PKV_OK);
            pkv_seq_id back = 0;
            assert_int_equal(
                pkv_seq_import(g, NULL, plain, plain_size, &back), PKV_OK);
            assert_int_equal(pkv__seqs_find(&g->seqs, back)->num_computed,
                             0);
            pkv_engine_destroy(g);
            free(plain);
        }
        pkv_engine_destroy(e);
    }
    /* The same engine: the copy resumes with its KV, every row checked. */
    pkv_seq_id copy = 0;
    assert_int_equal(ch_move(&h, id, &copy), PKV_OK);
    assert_int_equal(pkv__seqs_find(&h.engine->seqs, copy)->num_computed,
                     computed);
    ch_run(&h, 200);
    ch_check_idle(&h);
    ch_free(&h);
    free(data);
    free(prompt);
}

/* The same outputs with hybrid memory as without, bit for bit on the CPU
 * backend (every row reads the same KV in the same order), over a prompt
 * chunked across the windows and its decoding. */
static void hybrid_exact(int32_t dtype)
{
    ch_host h[2];
    int32_t *prompt = hm_prompt(PROMPT, 5);
    pkv_seq_id id[2];
    for (int k = 0; k < 2; k++) {
        pkv_engine_params p =
            window_params(dtype, PKV_PREEMPT_MODE_RECOMPUTE);
        p.kv_memory = k ? PKV_KV_MEMORY_HYBRID : PKV_KV_MEMORY_EVERY_TOKEN;
        p.num_blocks = 64;
        ch_cmocka_init(&h[k], &p, hm_tolerance(dtype));
        h[k].record_samples = 1;
        id[k] = ch_add_prompt(&h[k], prompt, PROMPT, NEW, 0, 0);
        ch_run(&h[k], 100);
    }
    const ch_seq *a = ch_find(&h[0], id[0]), *b = ch_find(&h[1], id[1]);
    assert_true(a != NULL && b != NULL);
    assert_int_equal(a->record_capacity, b->record_capacity);
    size_t per = (size_t)h[0].params.num_layers * h[0].params.num_q_heads *
                 h[0].params.head_dim;
    uint32_t compared = 0;
    for (uint32_t pos = 0; pos < a->record_capacity; pos++) {
        assert_int_equal(a->recorded[pos], b->recorded[pos]);
        if (!a->recorded[pos])
            continue;
        assert_memory_equal(a->sample_out + pos * per,
                            b->sample_out + pos * per, per * sizeof(float));
        compared++;
    }
    assert_true(compared >= NEW);
    for (int k = 0; k < 2; k++) {
        ch_check_idle(&h[k]);
        ch_free(&h[k]);
    }
    free(prompt);
}

static void test_hybrid_memory(void **state)
{
    (void)state;
    if (backend == PKV_BACKEND_KIND_CPU) {
        hybrid_exact(PKV_KV_DTYPE_F32);
        hybrid_exact(PKV_KV_DTYPE_U8);
    }
    hybrid_hits(PKV_KV_DTYPE_F32);
    hybrid_hits(PKV_KV_DTYPE_U8);
    hybrid_moves(PKV_KV_DTYPE_F16);
    hybrid_moves(PKV_KV_DTYPE_U4);
    const int32_t modes[] = {PKV_PREEMPT_MODE_RECOMPUTE, PKV_PREEMPT_MODE_SWAP};
    for (size_t m = 0; m < 2; m++) {
        workload(PKV_KV_DTYPE_F32, modes[m], 1);
        workload(PKV_KV_DTYPE_F16, modes[m], 1);
        workload(PKV_KV_DTYPE_U8, modes[m], 1);
        workload(PKV_KV_DTYPE_U4, modes[m], 1);
    }
}

/* Hybrid memory with no full layer (a window on every layer, the
 * windows different: Mistral's sliding window on every layer, with
 * another on half of them): group 0, whose blocks carry the prefix
 * cache's chain, is windowed too. In the step that admits a sequence
 * with a prefix hit, no windowed group holds a hit block wholly behind
 * the window of the first row the step computes: pkv.h's give-back
 * promise holds from the admission, not only from the step's end. */
static void test_hit_behind_window(void **state)
{
    (void)state;
    static const uint32_t two_windows[2] = {4, 8};
    pkv_engine_params p = hm_params(backend);
    p.layer_windows = two_windows;
    p.hybrid_memory = 1;
    p.num_blocks = 64;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    int32_t *prompt = hm_prompt(20, 31);
    ch_add_prompt(&h, prompt, 16, 1, 0, 0);
    ch_run(&h, 100);
    /* The same 16 tokens and 4 more: a hit of 4 blocks; the first row
     * computed, token 16, sees tokens 13..16 in the 4-token window, so
     * logical blocks 0..2 are wholly behind it, and 9..16 in the other,
     * blocks 0..1. */
    pkv_seq_id id = ch_add_prompt(&h, prompt, 20, 2, 0, 0);
    ch_begin(&h);
    assert_int_equal(h.batch->num_seqs, 1);
    assert_int_equal(h.batch->context_lens[0] -
                         (h.batch->query_start[1] - h.batch->query_start[0]),
                     16);
    const uint32_t *blocks = NULL;
    uint32_t nb = 0, nt = 0;
    assert_int_equal(
        pkv_engine_get_block_table(h.engine, id, &blocks, &nb, &nt), PKV_OK);
    assert_int_equal(nb, 5);
    for (uint32_t j = 0; j < 3; j++)
        assert_int_equal(blocks[j], 0);
    assert_int_not_equal(blocks[3], 0);
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    /* Held now: blocks 3 and 4 of the 4-token window, 2..4 of the other;
     * block 3's of both windows from the hit. */
    uint64_t held = 0;
    for (uint32_t g = 0; g < st.kv_groups; g++) {
        uint32_t window;
        uint64_t b, t;
        assert_int_equal(
            pkv_engine_get_group_stats(h.engine, g, &window, &b, &t), PKV_OK);
        held += b;
    }
    assert_int_equal(held, 2 + 3);
    ch_attend(&h, UINT32_MAX, 0);
    ch_end(&h, NULL);
    ch_run(&h, 100);
    ch_check_idle(&h);
    ch_free(&h);
    free(prompt);
}

/* A sequence swapped in (an import comes in as one) to an engine with no
 * full layer starts with an empty prefix chain, and its windowed group 0
 * holds only the blocks its row sees: the blocks it dropped are nobody's
 * KV, and its chain, which has no block of its own for them, stops there.
 * A prompt that shares its tokens then computes them. It never hits the
 * null block as a cached block: with an 8-token window over its first
 * block, a step refused with "block 0 is id 0" again and again; with a
 * 1-token window, the null block given back to the pool as a cached
 * block when the window moves on, then handed out, and tokens_stored
 * above the slots that hold them. */
static void swap_in_chain(uint32_t window)
{
    const uint32_t two_windows[2] = {window, 64};
    pkv_engine_params p = hm_params(backend);
    p.layer_windows = two_windows;
    p.hybrid_memory = 1;
    p.num_blocks = 64;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    int32_t *prompt = hm_prompt(24, 41);
    pkv_seq_id id = ch_add_prompt(&h, prompt, 24, 6, 0, 0);
    for (int s = 0; s < 3; s++)
        ch_step(&h, NULL);
    /* Its copy, under another salt, so that no cached block of the
     * original links its chain. */
    size_t size = 0;
    assert_int_equal(pkv_seq_export(h.engine, id, NULL, 0, &size), PKV_OK);
    uint8_t *data = malloc(size);
    assert_non_null(data);
    assert_int_equal(pkv_seq_export(h.engine, id, data, size, &size), PKV_OK);
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.cache_salt = 1;
    pkv_seq_id copy = 0;
    assert_int_equal(pkv_seq_import(h.engine, &sp, data, size, &copy),
                     PKV_OK);
    ch_record_import(&h, copy, ch_find(&h, id));
    free(data);
    for (int s = 0; s < 3; s++)
        ch_step(&h, NULL);
    /* The prompt's first 8 tokens under the copy's salt: the chain
     * stopped before its first block, so it hits nothing. */
    ch_add_salted(&h, prompt, 8, 2, 1);
    pkv_engine_stats st;
    for (int s = 0; pkv_engine_has_work(h.engine); s++) {
        assert_true(s < 100);
        ch_step(&h, NULL);
        pkv_engine_stats_init(&st);
        assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
        assert_true(st.tokens_stored <= st.slots_allocated);
        ch_check(&h);
    }
    assert_int_equal(st.prefix_hit_tokens, 0);
    ch_check_idle(&h);
    ch_free(&h);
    free(prompt);
}

static void test_swap_in_chain(void **state)
{
    (void)state;
    swap_in_chain(8);
    swap_in_chain(1);
}

/* U8 apart, so that the oclgrind pass in tests/run.sh can run it alone:
 * its staging tails and freezes meet the windows there. PKV_TEST_QUICK
 * (ch_test_quick): each dtype and each preemption mode once. */
static void test_mixed_windows_u8(void **state)
{
    (void)state;
    workload(PKV_KV_DTYPE_U8, PKV_PREEMPT_MODE_RECOMPUTE, 0);
    if (!ch_test_quick())
        workload(PKV_KV_DTYPE_U8, PKV_PREEMPT_MODE_SWAP, 0);
    workload(PKV_KV_DTYPE_U4, PKV_PREEMPT_MODE_SWAP, 0);
}

/* Decode steps of long contexts (the decode kernels on OpenCL), with
 * head_dim 256 and 4 query heads on 1 kv head, a model's shape: one
 * sequence of 40 tokens decoding 30 more. */
static void test_decode_windows(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
#ifdef PKV_HAVE_OPENCL
        /* The prompt's prefill step on the GPU-shaped prefill kernels in
         * turn (Intel's where the device has its subgroups, else the
         * tiled one); CPU devices run the rows kernel in every other
         * test. */
        setenv("PKV_OPENCL_PREFILL", d % 2 ? "tiles" : "intel", 1);
#endif
        pkv_engine_params p =
            window_params(dtypes[d], PKV_PREEMPT_MODE_RECOMPUTE);
        p.num_q_heads = 4;
        p.num_kv_heads = 1;
        p.head_dim = 256;
        p.block_size = 16;
        p.num_blocks = 64;
        p.long_prefill_threshold = 0;
        /* Every other dtype with hybrid memory: the windowed groups' null
         * blocks in the decode kernels' tables. */
        p.kv_memory =
            d % 2 ? PKV_KV_MEMORY_HYBRID : PKV_KV_MEMORY_EVERY_TOKEN;
        static const uint32_t model_windows[3] = {24, 0, 16};
        p.layer_windows = model_windows;
        ch_host h;
        ch_cmocka_init(&h, &p, hm_tolerance(dtypes[d]));
        int32_t *prompt = hm_prompt(40, 9);
        ch_add_prompt(&h, prompt, 40, 30, 0, 0);
        ch_run(&h, 100);
        ch_check_idle(&h);
        ch_free(&h);
        free(prompt);
    }
#ifdef PKV_HAVE_OPENCL
    unsetenv("PKV_OPENCL_PREFILL");
#endif
}

#ifndef PKV_HAVE_OPENCL
static void test_errors(void **state)
{
    (void)state;
    pkv_engine_params p =
        window_params(PKV_KV_DTYPE_F32, PKV_PREEMPT_MODE_RECOMPUTE);
    p.sliding_window = 8; /* and layer_windows: ambiguous */
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
    assert_null(e);
    assert_non_null(strstr(pkv_last_error(), "layer_windows"));
    /* The engine keeps its own copy of the windows. */
    uint32_t given[3] = {5, 0, 4};
    p.sliding_window = 0;
    p.layer_windows = given;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    given[0] = 99;
    assert_int_equal(e->layer_windows[0], 5);
    pkv_engine_destroy(e);
    /* Hybrid memory: a switch that is not one, a kv_memory that is not a
     * pkv_kv_memory, and 0.2.0's switch on with every token asked for. */
    p.hybrid_memory = 2;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
    p.hybrid_memory = 0;
    p.kv_memory = 2;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
    p.kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
    p.hybrid_memory = 1;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_last_error(), "kv_memory"));
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    /* One window for every layer: one group, as without it. */
    static const uint32_t same[3] = {5, 5, 5};
    p.layer_windows = same;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_OK);
    assert_int_equal(e->kv.groups.num_groups, 1);
    pkv_engine_destroy(e);
}

/* The counters of an engine made with p (which must succeed). */
static pkv_engine_stats made(const pkv_engine_params *p)
{
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(p, &e), PKV_OK);
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(e, &st), PKV_OK);
    pkv_engine_destroy(e);
    return st;
}

/* What the cache keeps and how its pool is sized (pkv.h, kv_memory):
 * hybrid memory by default when the windows differ, num_blocks counting
 * blocks over every layer (three groups of one layer: three times as many
 * blocks of the pool) and cache_bytes the same bytes; every token when
 * asked; a caller built against 0.2.0 (its params end at seal_key) keeps
 * 0.2.0's meaning, every token by default and num_blocks counting the
 * pool's blocks under hybrid_memory, which a newer caller may still set;
 * windows that would need more than 64 groups keep every token. */
static void test_memory_params(void **state)
{
    (void)state;
    pkv_engine_params init;
    pkv_engine_params_init(&init);
    assert_int_equal(init.kv_memory, PKV_KV_MEMORY_HYBRID);
    pkv_engine_params p =
        window_params(PKV_KV_DTYPE_F32, PKV_PREEMPT_MODE_RECOMPUTE);
    pkv_engine_stats every = made(&p);
    assert_int_equal(every.kv_groups, 1);
    assert_int_equal(every.group_layers, 3);
    assert_int_equal(every.blocks_total, 17);
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    pkv_engine_stats hybrid = made(&p);
    assert_int_equal(hybrid.kv_groups, 3);
    assert_int_equal(hybrid.group_layers, 1);
    assert_int_equal(hybrid.blocks_total, 3 * 17);
    assert_int_equal(hybrid.blocks_total * hybrid.block_bytes,
                     every.blocks_total * every.block_bytes);
    /* cache_bytes: as many blocks of the pool as fit, either way. */
    p.num_blocks = 0;
    p.cache_bytes = 17 * every.block_bytes + 1;
    assert_int_equal(made(&p).blocks_total, 3 * 17);
    p.kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
    assert_int_equal(made(&p).blocks_total, 17);
    /* 0.2.0's switch: the pool's blocks, from a newer caller too. */
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    p.num_blocks = 33;
    p.hybrid_memory = 1;
    hybrid = made(&p);
    assert_int_equal(hybrid.kv_groups, 3);
    assert_int_equal(hybrid.blocks_total, 33);
    /* A caller built against 0.2.0: its params end at seal_key, and
     * kv_memory (beyond them) is whatever its memory holds there. */
    pkv_engine_params old = p;
    old.struct_size =
        (uint32_t)(offsetof(pkv_engine_params, seal_key) + sizeof(void *));
    old.kv_memory = 7;
    assert_int_equal(made(&old).blocks_total, 33);
    assert_int_equal(made(&old).kv_groups, 3);
    old.hybrid_memory = 0;
    assert_int_equal(made(&old).kv_groups, 1);
    assert_int_equal(made(&old).blocks_total, 33);
    /* 65 windows, a group each: more than 64 groups keep every token;
     * 0.2.0's switch refuses them, as 0.2.0 did. */
    uint32_t many[65];
    for (uint32_t l = 0; l < 65; l++)
        many[l] = l + 1;
    p.num_layers = 65;
    p.layer_windows = many;
    p.hybrid_memory = 0;
    assert_int_equal(made(&p).kv_groups, 1);
    p.hybrid_memory = 1;
    pkv_engine *e = NULL;
    assert_int_equal(pkv_engine_create(&p, &e), PKV_ERR_UNSUPPORTED);
    assert_null(e);
}

/* Each group's block table (pkv_engine_get_group_block_table): the same
 * tokens in every group, the first group's the one
 * pkv_engine_get_block_table gives, a windowed group's holding the null
 * block where it gave blocks back. */
static void test_group_block_table(void **state)
{
    (void)state;
    pkv_engine_params p =
        window_params(PKV_KV_DTYPE_F32, PKV_PREEMPT_MODE_RECOMPUTE);
    p.kv_memory = PKV_KV_MEMORY_HYBRID;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(p.kv_dtype));
    int32_t *prompt = hm_prompt(PROMPT, 3);
    pkv_seq_id id = ch_add_prompt(&h, prompt, PROMPT, NEW, 0, 0);
    for (int s = 0; s < 8; s++)
        ch_step(&h, NULL);
    const pkv__seq *s = pkv__seqs_find(&h.engine->seqs, id);
    assert_non_null(s);
    const uint32_t *first = NULL;
    uint32_t first_blocks = 0, first_tokens = 0;
    assert_int_equal(pkv_engine_get_block_table(h.engine, id, &first,
                                                &first_blocks, &first_tokens),
                     PKV_OK);
    uint32_t dropped = 0;
    for (uint32_t g = 0; g < 3; g++) {
        const uint32_t *blocks = NULL;
        uint32_t nb = 0, nt = 0, window;
        uint64_t used, stored;
        assert_int_equal(pkv_engine_get_group_block_table(h.engine, id, g,
                                                          &blocks, &nb, &nt),
                         PKV_OK);
        assert_int_equal(pkv_engine_get_group_stats(h.engine, g, &window,
                                                    &used, &stored),
                         PKV_OK);
        assert_int_equal(nb, first_blocks);
        assert_int_equal(nt, first_tokens);
        assert_ptr_equal(blocks, pkv__kv_table(&s->kv, g)->blocks);
        if (g == 0)
            assert_ptr_equal(blocks, first);
        uint32_t seen = window == 0 || s->num_computed + 1 <= window
                            ? 0
                            : (s->num_computed + 1 - window) / 4;
        for (uint32_t j = 0; j < nb; j++)
            assert_true((blocks[j] == 0) == (j < seen));
        dropped += seen;
    }
    assert_true(dropped > 0);
    const uint32_t *blocks = NULL;
    uint32_t nb = 0, nt = 0;
    assert_int_equal(
        pkv_engine_get_group_block_table(h.engine, id, 3, &blocks, &nb, &nt),
        PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_get_group_block_table(h.engine, id + 99, 1,
                                                      &blocks, &nb, &nt),
                     PKV_ERR_NOT_FOUND);
    ch_run(&h, 100);
    ch_check_idle(&h);
    ch_free(&h);
    free(prompt);
}
#endif

int main(void)
{
#ifdef PKV_HAVE_OPENCL
    int start = ch_opencl_start();
    if (start != 0)
        return start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_windows),
        cmocka_unit_test(test_mixed_windows_u8),
        cmocka_unit_test(test_decode_windows),
        cmocka_unit_test(test_hybrid_memory),
        cmocka_unit_test(test_hit_behind_window),
        cmocka_unit_test(test_swap_in_chain),
    };
#else
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_windows),
        cmocka_unit_test(test_mixed_windows_u8),
        cmocka_unit_test(test_decode_windows),
        cmocka_unit_test(test_hybrid_memory),
        cmocka_unit_test(test_hit_behind_window),
        cmocka_unit_test(test_swap_in_chain),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_memory_params),
        cmocka_unit_test(test_group_block_table),
    };
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
