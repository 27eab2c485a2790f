/* SPDX-License-Identifier: MIT */
/*
 * Speculative decoding (pkv_seq_propose). The same workload runs twice:
 * plain decoding, and with drafts from a "draft model" that guesses each
 * next token right with probability p. Greedy verification keeps exactly
 * the tokens plain decoding gives, so both runs must end with the same
 * tokens for every sequence, while ch_step checks every output row of both
 * (draft rows too, and every row after a rollback) against dense attention
 * over the sequence's tokens: KV a rejected draft left behind fails it.
 * The workload has a fork, a prefix hit and preemption (by recompute and
 * by swap), for f32, f16 and u8 caches and blocks of 1, 4 and 16 tokens.
 */
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
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PROMPT = 11, NEW = 24, SEQS = 4 };

typedef struct spec_case {
    int32_t backend;
    int32_t dtype;
    uint32_t block_size;
    int32_t preempt_mode;
    double p;   /* a draft token is right with this probability */
    uint32_t k; /* drafts per step */
    uint32_t window; /* u8_rollback_blocks */
    int hybrid;      /* windows of 6 and 0 tokens, in hybrid memory */
} spec_case;

/* Drafts for a decoding sequence: the true next tokens (hm_sample), each
 * replaced by a wrong one with probability 1 - p, at most k and what
 * max_new_tokens leaves. */
static uint32_t make_drafts(ch_host *h, const pkv__seq *es, const spec_case *c,
                            uint64_t *rng, int32_t *out)
{
    uint32_t vocab = h->params.vocab_size;
    uint32_t room = es->max_new_tokens - es->num_generated - 1;
    uint32_t k = c->k < room ? c->k : room;
    int32_t last = es->tokens[es->num_tokens - 1];
    uint32_t pos = es->num_tokens - 1;
    for (uint32_t i = 0; i < k; i++, pos++) {
        int32_t truth = hm_sample(last, pos, vocab);
        int right = (double)(test_rand(rng) % 1000) < c->p * 1000.0;
        out[i] = right ? truth : (int32_t)(((uint32_t)truth + 1) % vocab);
        last = out[i];
    }
    return k;
}

/* The workload; speculative: propose drafts before every step. */
static void run(const spec_case *c, int speculative, ch_host *h)
{
    pkv_engine_params p = hm_params(c->backend);
    p.kv_dtype = c->dtype;
    p.block_size = c->block_size;
    p.preempt_mode = c->preempt_mode;
    p.u8_rollback_blocks = c->window;
    static const uint32_t windows[2] = {6, 0};
    if (c->hybrid) {
        p.layer_windows = windows;
        p.hybrid_memory = 1;
    }
    p.swap_bytes = 1 << 20;
    p.watermark = 0;
    /* Room for about 3 of the 6 sequences at their full length. */
    uint32_t per_seq = (PROMPT + NEW + c->k + c->block_size - 1) /
                       c->block_size;
    p.num_blocks = 3 * per_seq + 1;
    if (c->hybrid) /* a block is one layer's: 3 at their full length */
        p.num_blocks = 2 * 3 * per_seq + 1;
    ch_cmocka_init(h, &p, hm_tolerance(c->dtype));
    int32_t *prompts[SEQS];
    for (uint32_t i = 0; i < SEQS; i++) {
        prompts[i] = hm_prompt(PROMPT, 40 + i);
        if (i == 1) /* shares a prefix with prompt 0 */
            memcpy(prompts[1], prompts[0], 8 * sizeof *prompts[0]);
        ch_add_prompt(h, prompts[i], PROMPT, NEW, 0, 0);
    }
    ch_step(h, NULL);
    /* A fork of the first sequence after its first token. */
    pkv_seq_id child;
    assert_int_equal(ch_fork(h, 1, -1, &child), PKV_OK);
    uint64_t rng = 777;
    for (int step = 0; step < 1000 && pkv_engine_has_work(h->engine);
         step++) {
        if (step == 3) /* the first prompt again: a prefix hit */
            ch_add_prompt(h, prompts[0], PROMPT, NEW, 0, 0);
        for (pkv_seq_id id = 1; speculative && id <= h->last_id; id++) {
            const pkv__seq *es = pkv__seqs_find(&h->engine->seqs, id);
            if (es == NULL || es->state != PKV__SEQ_RUNNING ||
                es->num_computed + 1 != es->num_tokens)
                continue;
            int32_t drafts[PKV_MAX_DRAFTS];
            uint32_t n = make_drafts(h, es, c, &rng, drafts);
            assert_int_equal(ch_propose(h, id, drafts, n), PKV_OK);
        }
        ch_step(h, NULL);
    }
    assert_false(pkv_engine_has_work(h->engine));
    for (uint32_t i = 0; i < SEQS; i++)
        free(prompts[i]);
}

static void same_outputs(const spec_case *c)
{
    ch_host plain, spec;
    run(c, 0, &plain);
    run(c, 1, &spec);
    assert_int_equal(plain.last_id, spec.last_id);
    for (pkv_seq_id id = 1; id <= plain.last_id; id++) {
        const ch_seq *a = ch_find(&plain, id), *b = ch_find(&spec, id);
        assert_true(a != NULL && b != NULL);
        assert_int_equal(a->reason, PKV_FINISH_REASON_LENGTH);
        assert_int_equal(b->reason, PKV_FINISH_REASON_LENGTH);
        assert_int_equal(a->num_tokens, b->num_tokens);
        assert_memory_equal(a->tokens, b->tokens,
                            a->num_tokens * sizeof *a->tokens);
    }
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(spec.engine, &st), PKV_OK);
    /* U8 drafts stay inside their row's block: at block size 1 none run. */
    if (PKV_LAYOUT_QUANTIZED(c->dtype) && c->block_size == 1) {
        assert_int_equal(st.draft_tokens, 0);
    } else {
        if (st.draft_tokens == 0 ||
            (c->p > 0.0 && st.draft_tokens_accepted == 0) ||
            (c->p == 0.0 && st.draft_tokens_accepted > 0) ||
            (c->p < 1.0 && st.draft_tokens_accepted >= st.draft_tokens))
            fail_msg("drafts run %llu, accepted %llu",
                     (unsigned long long)st.draft_tokens,
                     (unsigned long long)st.draft_tokens_accepted);
        /* Fewer steps than one per token, unless nothing is accepted. */
        assert_true(c->p == 0.0 || spec.steps < plain.steps);
    }
    ch_check_idle(&plain);
    ch_check_idle(&spec);
    ch_free(&plain);
    ch_free(&spec);
}

#ifndef PKV_HAVE_OPENCL
static void test_same_tokens(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    const uint32_t sizes[] = {1, 4, 16};
    const int32_t modes[] = {PKV_PREEMPT_MODE_RECOMPUTE, PKV_PREEMPT_MODE_SWAP};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t b = 0; b < 3; b++)
            for (size_t m = 0; m < 2; m++) {
                spec_case c = {PKV_BACKEND_KIND_CPU,
                               dtypes[d],
                               sizes[b],
                               modes[m],
                               0.7,
                               4,
                               0,
                               0};
                same_outputs(&c);
                if (PKV_LAYOUT_QUANTIZED(dtypes[d])) { /* a rollback window */
                    c.window = 2;
                    same_outputs(&c);
                }
            }
    /* Hybrid memory: a windowed group's blocks come and go with the
     * drafts and their rollback. */
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t b = 1; b < 3; b++) {
            spec_case c = {PKV_BACKEND_KIND_CPU,
                           dtypes[d],
                           sizes[b],
                           modes[b - 1],
                           0.7,
                           4,
                           PKV_LAYOUT_QUANTIZED(dtypes[d]) ? 2 : 0,
                           1};
            same_outputs(&c);
        }
    /* Acceptance from none to all. */
    const double ps[] = {0.0, 0.5, 0.9, 1.0};
    for (size_t i = 0; i < 4; i++) {
        spec_case c = {PKV_BACKEND_KIND_CPU,
                       PKV_KV_DTYPE_F32,
                       4,
                       PKV_PREEMPT_MODE_RECOMPUTE,
                       ps[i],
                       6,
                       0,
                       0};
        same_outputs(&c);
    }
}
#else
/* The OpenCL backend: draft rows run as a mixed batch's rows. */
static void test_same_tokens_opencl(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_U8,
                              PKV_KV_DTYPE_U4};
    const uint32_t sizes[] = {4, 16};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t b = 0; b < 2; b++) {
            spec_case c = {PKV_BACKEND_KIND_OPENCL,
                           dtypes[d],
                           sizes[b],
                           (int32_t)(b % 2 ? PKV_PREEMPT_MODE_SWAP
                                           : PKV_PREEMPT_MODE_RECOMPUTE),
                           0.7,
                           4,
                           PKV_LAYOUT_QUANTIZED(dtypes[d]) ? 2u : 0u,
                           0};
            same_outputs(&c);
        }
}
#endif

/* The worst difference between the sample rows the plain run (h[0]) and
 * the speculative run (h[1]) kept for sequence id; both must have kept
 * one at the same positions. */
static double committed_difference(ch_host *h, pkv_seq_id id)
{
    const ch_seq *a = ch_find(&h[0], id), *b = ch_find(&h[1], id);
    assert_int_equal(a->num_tokens, b->num_tokens);
    assert_memory_equal(a->tokens, b->tokens,
                        a->num_tokens * sizeof *a->tokens);
    const pkv_engine_params *p = &h[0].params;
    size_t n = (size_t)p->num_layers * p->num_q_heads * p->head_dim;
    double worst = 0.0;
    uint32_t rows = 0;
    for (uint32_t pos = 0; pos + 1 < a->num_tokens; pos++) {
        int in_a = pos < a->record_capacity && a->recorded[pos];
        int in_b = pos < b->record_capacity && b->recorded[pos];
        assert_int_equal(in_a, in_b);
        for (size_t x = 0; in_a && x < n; x++) {
            double e = fabs((double)a->sample_out[pos * n + x] -
                            (double)b->sample_out[pos * n + x]);
            worst = e > worst ? e : worst;
        }
        rows += (uint32_t)in_a;
    }
    assert_int_equal(rows, NEW); /* the prompt's last row and NEW - 1 */
    return worst;
}

/* Every committed row of a speculative run is plain decoding's (pkv.h:
 * the sequence holds what plain decoding gives it; the README: greedy
 * outputs equal plain decoding's). One sequence, head_dim 64, 2 query
 * heads on one kv head: the plain run decodes a row a step, the other
 * proposes 4 drafts (each right with probability 0.6) before every step.
 * The output rows, every layer, of every sample the sequences kept must
 * be the same bits on the CPU backend, where a row's arithmetic does not
 * depend on the rest of the batch; on OpenCL, where plain decoding runs
 * the decode kernels and drafts the mixed-batch kernel, they agree to
 * float rounding. With U8, drafts fill and freeze blocks, and a rejected
 * one is cut inside a frozen block (recomputed, or kept by a window). */
static void committed_rows(int32_t backend, int32_t dtype, uint32_t bs,
                           uint32_t window)
{
    ch_host h[2];
    pkv_seq_id id = 0;
    int32_t *prompt = hm_prompt(PROMPT, 21);
    for (int i = 0; i < 2; i++) {
        pkv_engine_params p = hm_params(backend);
        p.kv_dtype = dtype;
        p.block_size = bs;
        p.u8_rollback_blocks = window;
        p.num_q_heads = 2;
        p.num_kv_heads = 1;
        p.head_dim = 64;
        ch_cmocka_init(&h[i], &p, hm_tolerance(dtype));
        h[i].record_samples = 1;
        id = ch_add_prompt(&h[i], prompt, PROMPT, NEW, 0, 0);
    }
    ch_run(&h[0], 1000);
    spec_case c = {backend, dtype, bs, 0, 0.6, 4, window, 0};
    uint64_t rng = 99;
    for (int step = 0; step < 1000 && pkv_engine_has_work(h[1].engine);
         step++) {
        const pkv__seq *es = pkv__seqs_find(&h[1].engine->seqs, id);
        if (es != NULL && es->state == PKV__SEQ_RUNNING &&
            es->num_computed + 1 == es->num_tokens) {
            int32_t drafts[PKV_MAX_DRAFTS];
            assert_int_equal(
                ch_propose(&h[1], id, drafts,
                           make_drafts(&h[1], es, &c, &rng, drafts)),
                PKV_OK);
        }
        ch_step(&h[1], NULL);
    }
    assert_false(pkv_engine_has_work(h[1].engine));
    double worst = committed_difference(h, id);
    double allowed = backend == PKV_BACKEND_KIND_CPU ? 0.0 : 1e-5;
    if (!(worst <= allowed))
        fail_msg("backend %d dtype %d block %u window %u: a committed row "
                 "differs from plain decoding's by %g",
                 (int)backend, (int)dtype, (unsigned)bs, (unsigned)window,
                 worst);
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h[1].engine, &st), PKV_OK);
    assert_true(st.draft_tokens_accepted > 0 &&
                st.draft_tokens_accepted < st.draft_tokens);
    for (int i = 0; i < 2; i++) {
        ch_check_idle(&h[i]);
        ch_free(&h[i]);
    }
    free(prompt);
}

static void test_committed_rows(void **state)
{
    (void)state;
#ifdef PKV_HAVE_OPENCL
    committed_rows(PKV_BACKEND_KIND_OPENCL, PKV_KV_DTYPE_F32, 8, 0);
    committed_rows(PKV_BACKEND_KIND_OPENCL, PKV_KV_DTYPE_U8, 8, 0);
    committed_rows(PKV_BACKEND_KIND_OPENCL, PKV_KV_DTYPE_U8, 16, 1);
    committed_rows(PKV_BACKEND_KIND_OPENCL, PKV_KV_DTYPE_U4, 16, 1);
#else
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    const uint32_t sizes[] = {4, 8, 16};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t b = 0; b < 3; b++) {
            committed_rows(PKV_BACKEND_KIND_CPU, dtypes[d], sizes[b], 0);
            if (PKV_LAYOUT_QUANTIZED(dtypes[d]))
                committed_rows(PKV_BACKEND_KIND_CPU, dtypes[d], sizes[b], 1);
        }
#endif
}

/* Sequence id's stored KV that a cut can keep: the bytes of its frozen
 * blocks (swap layout) and the f32 rows of its unfrozen last block, from
 * the staging tail. */
static uint8_t *stored_kv(pkv_engine *e, pkv_seq_id id, size_t *size)
{
    const pkv__seq *s = pkv__seqs_find(&e->seqs, id);
    const pkv__backend_config *c = &e->backend_config;
    uint32_t bs = c->block_size, d = c->head_dim;
    uint32_t frozen = s->num_computed / bs, rows = s->num_computed % bs;
    size_t blocks = frozen * pkv__backend_swap_block_bytes(c);
    size_t tail_rows = (size_t)c->num_layers * c->num_kv_heads * 2 * rows;
    *size = blocks + tail_rows * d * sizeof(float);
    uint8_t *kv = malloc(*size + 1);
    float *stage = malloc(pkv__backend_stage_bytes(c));
    assert_non_null(kv);
    assert_non_null(stage);
    assert_int_equal(e->device.ops->swap_out(
                         e->device.backend, s->kv.tables[0].blocks, frozen, kv),
                     PKV_OK);
    assert_int_equal(e->device.ops->stage_out(e->device.backend,
                                              pkv__kv_stage(&s->kv), stage),
                     PKV_OK);
    uint8_t *at = kv + blocks;
    /* [layer][kv head][K, V] parts of block_size rows each. */
    for (size_t part = 0; part < tail_rows / (rows ? rows : 1) && rows > 0;
         part++, at += (size_t)rows * d * sizeof(float))
        memcpy(at, stage + part * bs * d, (size_t)rows * d * sizeof(float));
    free(stage);
    return kv;
}

/* U8 or U4 (dtype) with every draft wrong, in lockstep with plain decoding
 * (both gain one token per step): after every step the stored KV must be the
 * same bytes, so a rollback keeps every element's bound. With a window that
 * covers every block a step freezes, no step computes a row twice (its
 * first row is the last sampled token); without one, some step does. */
static void window_case(int32_t backend, int32_t dtype, uint32_t bs,
                        uint32_t k, uint32_t window, int expect_recompute)
{
    ch_host h[2];
    for (int i = 0; i < 2; i++) {
        pkv_engine_params p = hm_params(backend);
        p.kv_dtype = dtype;
        p.block_size = bs;
        p.u8_rollback_blocks = window;
        ch_cmocka_init(&h[i], &p, hm_tolerance(dtype));
    }
    int32_t *prompt = hm_prompt(PROMPT, 5);
    pkv_seq_id id = 0;
    for (int i = 0; i < 2; i++)
        id = ch_add_prompt(&h[i], prompt, PROMPT, NEW, 0, 0);
    int recomputed = 0;
    for (int step = 0; step < (int)NEW - 1; step++) {
        ch_seq *plain = ch_find(&h[0], id), *spec = ch_find(&h[1], id);
        const pkv__seq *es = pkv__seqs_find(&h[1].engine->seqs, id);
        /* After the prompt's step, a step that does not start at the last
         * sampled token computes again what a rollback dropped. */
        if (step > 0 && es->num_computed + 1 != es->num_tokens)
            recomputed = 1;
        else if (step > 0) {
            int32_t drafts[PKV_MAX_DRAFTS];
            spec_case c = {backend, dtype, bs, 0, 0.0, k, window, 0};
            uint64_t rng = 1;
            assert_int_equal(
                ch_propose(&h[1], id, drafts,
                           make_drafts(&h[1], es, &c, &rng, drafts)),
                PKV_OK);
        }
        ch_step(&h[0], NULL);
        ch_step(&h[1], NULL);
        assert_int_equal(plain->num_tokens, spec->num_tokens);
        assert_memory_equal(plain->tokens, spec->tokens,
                            plain->num_tokens * sizeof *plain->tokens);
        size_t na, nb;
        uint8_t *a = stored_kv(h[0].engine, id, &na);
        uint8_t *c = stored_kv(h[1].engine, id, &nb);
        assert_true(expect_recompute || na == nb);
        if (na == nb) /* the same tokens computed */
            assert_memory_equal(a, c, na);
        free(a);
        free(c);
    }
    assert_int_equal(recomputed, expect_recompute);
    for (int i = 0; i < 2; i++)
        ch_free(&h[i]);
    free(prompt);
}

static int32_t window_backend(void)
{
#ifdef PKV_HAVE_OPENCL
    return PKV_BACKEND_KIND_OPENCL;
#else
    return PKV_BACKEND_KIND_CPU;
#endif
}

/* U8 drafts stay inside their row's block, so a step freezes at most one
 * block and a window of 1 covers every cut (8 drafts at block 4 run up to
 * 3). PKV_TEST_QUICK (ch_test_quick): U8's 8 drafts at block 4 and U4's
 * 6 at block 8. */
static void test_u8_window(void **state)
{
    (void)state;
    int quick = ch_test_quick();
    for (int32_t dtype = PKV_KV_DTYPE_U8; dtype <= PKV_KV_DTYPE_U4; dtype++) {
        if (!quick)
            window_case(window_backend(), dtype, 4, 2, 1, 0);
        if (!quick || dtype == PKV_KV_DTYPE_U8)
            window_case(window_backend(), dtype, 4, 8, 1, 0);
        if (!quick || dtype == PKV_KV_DTYPE_U4)
            window_case(window_backend(), dtype, 8, 6, 1, 0);
    }
}

/* Without a window, a cut inside the frozen block recomputes it. */
static void test_u8_no_window(void **state)
{
    (void)state;
    for (int32_t dtype = PKV_KV_DTYPE_U8; dtype <= PKV_KV_DTYPE_U4; dtype++) {
        window_case(window_backend(), dtype, 4, 2, 0, 1);
        window_case(window_backend(), dtype, 4, 8, 0, 1);
    }
}

#ifndef PKV_HAVE_OPENCL
static void test_errors(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(PROMPT, 3);
    pkv_seq_id id = ch_add_prompt(&h, prompt, PROMPT, 8, 0, 0);
    int32_t drafts[PKV_MAX_DRAFTS + 1] = {0};
    /* Not seen by a step; then decoding. */
    assert_int_equal(pkv_seq_propose(h.engine, id, drafts, 1),
                     PKV_ERR_BAD_STATE);
    ch_step(&h, NULL);
    assert_int_equal(pkv_seq_propose(h.engine, id, NULL, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_propose(h.engine, id, drafts, PKV_MAX_DRAFTS + 1),
                     PKV_ERR_INVALID_ARGUMENT);
    drafts[0] = (int32_t)p.vocab_size;
    assert_int_equal(pkv_seq_propose(h.engine, id, drafts, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_propose(h.engine, 999, drafts, 1),
                     PKV_ERR_NOT_FOUND);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(h.engine, &b), PKV_OK);
    drafts[0] = 1;
    assert_int_equal(pkv_seq_propose(h.engine, id, drafts, 1),
                     PKV_ERR_BAD_STATE);
    ch_free(&h); /* destroys the engine mid-step */
    free(prompt);
}

#endif

/* The states in which pkv_seq_propose takes drafts. */
static void test_propose_states(void **state)
{
    (void)state;
#ifdef PKV_HAVE_OPENCL
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
#else
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
#endif
    p.block_size = 8;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    int32_t *prompt = hm_prompt(13, 5);
    pkv_seq_id a = ch_add_prompt(&h, prompt, 13, 20, 0, 0);
    for (int i = 0; i < 7; i++)
        ch_step(&h, NULL);
    /* A truncate that drops the sampled token keeps the KV of every kept
     * token but the last, which is the next input row as a sampled token
     * is: drafts follow it. */
    ch_seq *ra = ch_find(&h, a);
    assert_int_equal(ch_truncate(&h, a, 10), PKV_OK);
    int32_t next = hm_sample(ra->tokens[9], 9, p.vocab_size);
    assert_int_equal(ch_propose(&h, a, &next, 1), PKV_OK);
    ch_step(&h, NULL);
    assert_int_equal(ra->num_tokens, 12); /* the draft and a sample */
    ch_free(&h);

    /* U8: drafts that fill a block freeze it in their step; rejected, the
     * rollback drops that block (no window) and the next step computes
     * its kept rows again. Until then the sequence does not decode, and
     * pkv_seq_propose says so and why; pkv_engine_get_block_table shows
     * it (fewer stored tokens than all but the last). */
    p.kv_dtype = PKV_KV_DTYPE_U8;
    p.u8_rollback_blocks = 0;
    ch_cmocka_init(&h, &p, hm_tolerance(PKV_KV_DTYPE_U8));
    pkv_seq_id b = ch_add_prompt(&h, prompt, 3, 20, 0, 0);
    ch_step(&h, NULL);
    ch_seq *rb = ch_find(&h, b);
    ch_propose_wrong(&h, b, 4);
    ch_step(&h, NULL);
    const uint32_t *blocks;
    uint32_t nb, stored;
    assert_int_equal(
        pkv_engine_get_block_table(h.engine, b, &blocks, &nb, &stored),
        PKV_OK);
    assert_true(stored + 1 < rb->num_tokens);
    int32_t draft = 1;
    assert_int_equal(pkv_seq_propose(h.engine, b, &draft, 1),
                     PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_engine_last_error(h.engine), "recompute"));
    ch_step(&h, NULL);
    assert_int_equal(
        pkv_engine_get_block_table(h.engine, b, &blocks, &nb, &stored),
        PKV_OK);
    assert_int_equal(stored + 1, rb->num_tokens);
    ch_propose_wrong(&h, b, 1);
    ch_step(&h, NULL);
    ch_free(&h);
    free(prompt);
}

/* Built twice: test_speculative (CPU) and test_speculative_opencl
 * (labelled opencl). */
int main(void)
{
#ifdef PKV_HAVE_OPENCL
    int start = ch_opencl_start();
    if (start != 0)
        return start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_tokens_opencl),
        cmocka_unit_test(test_u8_window),
        cmocka_unit_test(test_u8_no_window),
        cmocka_unit_test(test_committed_rows),
        cmocka_unit_test(test_propose_states),
    };
#else
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_tokens),
        cmocka_unit_test(test_u8_window),
        cmocka_unit_test(test_u8_no_window),
        cmocka_unit_test(test_committed_rows),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_propose_states),
    };
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
