/* SPDX-License-Identifier: MIT */
/*
 * pkv_seq_truncate. After every cut the sequence goes on under ch_step,
 * which checks every output row against dense attention over the tokens
 * the host kept (the run without the feature), so KV left behind by a cut
 * fails the test. The rows of the first step after a cut show what KV the
 * cut kept: f32/f16 everything before the last kept token, U8 everything
 * before the frozen block the cut falls in (unless the rollback window
 * holds it). Cuts go into the prompt, the sampled tokens, a block
 * boundary, a frozen block and the unfrozen tail; into blocks shared by a
 * fork and by the prefix cache, which stay as they were (both backends);
 * and into a swapped-out sequence.
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

#include <stdlib.h>
#include <string.h>

enum { PROMPT = 13, GROWN = 23 };

/* pkv_seq_truncate, the host's record cut the same way. */
static void cut(ch_host *h, pkv_seq_id id, uint32_t n)
{
    assert_int_equal(ch_truncate(h, id, n), PKV_OK);
}

/* Step until sequence id holds n tokens. */
static void grow_to(ch_host *h, pkv_seq_id id, uint32_t n)
{
    for (int i = 0; i < 100 && ch_find(h, id)->num_tokens < n; i++)
        ch_step(h, NULL);
    assert_int_equal(ch_find(h, id)->num_tokens, n);
}

#ifndef PKV_HAVE_OPENCL
/* The KV a cut to n keeps, as pkv.h states it, for a sequence whose KV
 * covers its tokens but the last, with a U8 rollback window of `window`
 * blocks: it holds the last blocks frozen. */
static uint32_t expected_kept(int32_t dtype, uint32_t bs, uint32_t window,
                              uint32_t computed, uint32_t n)
{
    uint32_t keep = n - 1 < computed ? n - 1 : computed;
    uint32_t start = keep / bs * bs;
    uint32_t frozen = computed / bs; /* blocks 0 .. frozen - 1 */
    if (PKV_LAYOUT_QUANTIZED(dtype) && keep > start && start + bs <= computed &&
        start / bs + window < frozen)
        keep = start;
    return keep;
}

/* One sequence grown to GROWN tokens, cut to n, then run to its end. */
static void cut_once(int32_t dtype, uint32_t bs, uint32_t window, uint32_t n)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.kv_dtype = dtype;
    p.block_size = bs;
    p.u8_rollback_blocks = window;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    int32_t *prompt = hm_prompt(PROMPT, 7);
    pkv_seq_id id = ch_add_prompt(&h, prompt, PROMPT, 20, 0, 0);
    grow_to(&h, id, GROWN);
    cut(&h, id, n);
    uint32_t kept = expected_kept(dtype, bs, window, GROWN - 1, n);
    const pkv_batch *b;
    ch_step(&h, &b);
    if (ch_rows_of(b, id) != n - kept)
        fail_msg("dtype %d, block %u, window %u, cut to %u: %u rows, "
                 "expected %u",
                 (int)dtype, (unsigned)bs, (unsigned)window, (unsigned)n,
                 (unsigned)ch_rows_of(b, id), (unsigned)(n - kept));
    ch_run(&h, 100);
    /* 20 sampled tokens, counted from the cut: n - min(n, PROMPT) kept. */
    ch_seq *s = ch_find(&h, id);
    assert_int_equal(s->reason, PKV_FINISH_REASON_LENGTH);
    uint32_t prompt_kept = n < PROMPT ? n : PROMPT;
    assert_int_equal(s->num_tokens, prompt_kept + 20);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

static void test_cut_points(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    const uint32_t sizes[] = {4, 16};
    /* 1 token; in the prompt; a block boundary; just after one; in a
     * frozen block; in the last, unfrozen block; all but one. */
    const uint32_t cuts[] = {1, 6, 8, 9, 14, 17, 21, 22};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t s = 0; s < 2; s++)
            for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++)
                cut_once(dtypes[d], sizes[s], 0, cuts[c]);
    /* U8 and U4 with a rollback window of 1, 2 and 4 blocks: a cut inside
     * one of the last frozen blocks keeps its rows. */
    for (int32_t dtype = PKV_KV_DTYPE_U8; dtype <= PKV_KV_DTYPE_U4; dtype++)
        for (uint32_t w = 1; w <= 4; w *= 2)
            for (size_t s = 0; s < 2; s++)
                for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++)
                    cut_once(dtype, sizes[s], w, cuts[c]);
}

#endif

/* A U8 (and U4) sequence without a rollback window whose cut fell back
 * to a frozen block's start, by pkv_seq_truncate or by drafts rejected in
 * the step that froze the block, must compute that block's kept tokens
 * again: it still forks (pkv.h lists no such refusal), and the child
 * computes the same rows again in its first step. Both then run to their
 * ends, every row checked. */
static void fork_recompute(int32_t backend, int32_t dtype, int drafts)
{
    pkv_engine_params p = hm_params(backend);
    p.kv_dtype = dtype;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    int32_t *prompt = hm_prompt(5, 13);
    pkv_seq_id id = ch_add_prompt(&h, prompt, 5, 10, 0, 0);
    ch_step(&h, NULL); /* rows 0..4: token 5 sampled */
    if (drafts) {
        /* Rows 5, 6, 7: block 1 fills (frozen), the drafts rejected. */
        ch_propose_wrong(&h, id, 2);
        ch_step(&h, NULL);
    } else {
        grow_to(&h, id, 9); /* rows 5..7: block 1 frozen */
        cut(&h, id, 7);     /* KV of 0..5 kept: inside block 1 */
    }
    const pkv__seq *s = pkv__seqs_find(&h.engine->seqs, id);
    assert_int_equal(s->num_computed, 4); /* back to block 1's start */
    assert_true(s->num_tokens > 5);
    uint32_t again = s->num_tokens - s->num_computed;
    pkv_seq_id child = 0;
    assert_int_equal(ch_fork(&h, id, -1, &child), PKV_OK);
    const pkv_batch *b;
    ch_step(&h, &b);
    assert_int_equal(ch_rows_of(b, id), again);
    assert_int_equal(ch_rows_of(b, child), again);
    ch_run(&h, 100);
    assert_int_equal(ch_find(&h, child)->num_tokens,
                     ch_find(&h, id)->num_tokens);
    assert_memory_equal(ch_find(&h, child)->tokens, ch_find(&h, id)->tokens,
                        ch_find(&h, id)->num_tokens * sizeof(int32_t));
    ch_check_idle(&h);
    ch_free(&h);
    free(prompt);
}

static void test_fork_recompute(void **state)
{
    (void)state;
#ifdef PKV_HAVE_OPENCL
    const int32_t backend = PKV_BACKEND_KIND_OPENCL;
#else
    const int32_t backend = PKV_BACKEND_KIND_CPU;
#endif
    for (int drafts = 0; drafts < 2; drafts++) {
        fork_recompute(backend, PKV_KV_DTYPE_U8, drafts);
        fork_recompute(backend, PKV_KV_DTYPE_U4, drafts);
    }
}

/* A fork shares the parent's blocks: cutting the parent inside a shared
 * block must leave the child's KV as it was, and the prefix cache's blocks
 * too, which a later prompt then hits. f32/f16 keep the parent's rows of
 * that block (its next append copies it); U8 drops the block, which is
 * frozen and outside the rollback window. */
static void cut_shared(int32_t backend, int32_t dtype)
{
    pkv_engine_params p = hm_params(backend);
    p.kv_dtype = dtype;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    int32_t *prompt = hm_prompt(PROMPT, 9);
    pkv_seq_id parent = ch_add_prompt(&h, prompt, PROMPT, 16, 0, 0);
    grow_to(&h, parent, 18);
    pkv_seq_id child;
    assert_int_equal(ch_fork(&h, parent, -1, &child), PKV_OK);
    /* Token 10 is in the third block of 4, full and shared. */
    cut(&h, parent, 11);
    const pkv_batch *b;
    ch_step(&h, &b);
    assert_int_equal(ch_rows_of(b, parent),
                     PKV_LAYOUT_QUANTIZED(dtype) ? 3 : 1);
    ch_run(&h, 100);
    /* The same prompt again: its full blocks come from the cache. */
    pkv_seq_id again = ch_add_prompt(&h, prompt, PROMPT, 4, 0, 0);
    ch_step(&h, &b);
    assert_int_equal(ch_rows_of(b, again), 1); /* 12 of 13 tokens hit */
    ch_run(&h, 100);
    assert_int_equal(ch_find(&h, child)->reason, PKV_FINISH_REASON_LENGTH);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

static uint64_t prefix_hit_tokens(const ch_host *h)
{
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    assert_int_equal(pkv_engine_get_stats(h->engine, &st), PKV_OK);
    return st.prefix_hit_tokens;
}

/* A cut inside a block that came from a prefix hit leaves the cached block
 * as it was: the prompt that cached it hits all its blocks again. */
static void cut_prefix_hit(int32_t backend, int32_t dtype)
{
    pkv_engine_params p = hm_params(backend);
    p.kv_dtype = dtype;
    p.block_size = 8;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(dtype));
    int32_t *p0 = hm_prompt(24, 11), *p1 = hm_prompt(24, 12);
    memcpy(p1, p0, 20 * sizeof *p1);
    ch_add_prompt(&h, p0, 24, 3, 0, 0);
    ch_run(&h, 100);
    /* p1 shares 20 tokens: it hits blocks 0 and 1, and is cut inside 1. */
    pkv_seq_id id = ch_add_prompt(&h, p1, 24, 3, 0, 0);
    ch_step(&h, NULL);
    assert_int_equal(prefix_hit_tokens(&h), 16);
    cut(&h, id, 11);
    const pkv_batch *b;
    ch_step(&h, &b);
    assert_int_equal(ch_rows_of(b, id), PKV_LAYOUT_QUANTIZED(dtype) ? 3 : 1);
    ch_run(&h, 100);
    ch_add_prompt(&h, p0, 24, 3, 0, 0);
    ch_run(&h, 100);
    if (prefix_hit_tokens(&h) != 32)
        fail_msg("dtype %d: p0 hit %llu tokens again, not 16", (int)dtype,
                 (unsigned long long)(prefix_hit_tokens(&h) - 16));
    ch_check_idle(&h);
    free(p0);
    free(p1);
    ch_free(&h);
}

#ifdef PKV_HAVE_OPENCL
static const int32_t backend = PKV_BACKEND_KIND_OPENCL;
#else
static const int32_t backend = PKV_BACKEND_KIND_CPU;
#endif

static void test_cut_shared_blocks(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        cut_shared(backend, dtypes[d]);
}

static void test_cut_prefix_hit(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        cut_prefix_hit(backend, dtypes[d]);
}

#ifndef PKV_HAVE_OPENCL
/* A swapped-out sequence is cut and recomputed. */
static void test_cut_swapped(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_blocks = 17; /* 16 usable blocks of 4 tokens */
    p.watermark = 0;
    p.preempt_mode = PKV_PREEMPT_MODE_SWAP;
    p.swap_bytes = 1 << 20;
    ch_host h;
    ch_cmocka_init(&h, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    pkv_seq_id ids[4];
    for (uint32_t i = 0; i < 4; i++) {
        int32_t *prompt = hm_prompt(PROMPT, 20 + i);
        ids[i] = ch_add_prompt(&h, prompt, PROMPT, 12, 0, 0);
        free(prompt);
    }
    pkv__seq *swapped = NULL;
    for (int step = 0; step < 100 && swapped == NULL; step++) {
        ch_step(&h, NULL);
        for (uint32_t i = 0; i < 4 && swapped == NULL; i++) {
            pkv__seq *s = pkv__seqs_find(&h.engine->seqs, ids[i]);
            if (s != NULL && s->state == PKV__SEQ_SWAPPED &&
                s->num_tokens > PROMPT + 1)
                swapped = s;
        }
    }
    assert_non_null(swapped);
    pkv_seq_id id = swapped->id;
    cut(&h, id, PROMPT + 1);
    assert_int_equal(swapped->state, PKV__SEQ_WAITING);
    assert_null(pkv__kv_swapped(&swapped->kv));
    ch_run(&h, 200);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(ch_find(&h, ids[i])->reason, PKV_FINISH_REASON_LENGTH);
    ch_check_idle(&h);
    ch_free(&h);
}

static void test_cut_errors(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(PROMPT, 3);
    pkv_seq_id id = ch_add_prompt(&h, prompt, PROMPT, 4, 0, 0);
    /* Not seen by a step yet. */
    assert_int_equal(pkv_seq_truncate(h.engine, id, 3), PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_seq_truncate(NULL, id, 3),
                     PKV_ERR_INVALID_ARGUMENT);
    ch_step(&h, NULL);
    assert_int_equal(pkv_seq_truncate(h.engine, id, 0),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(h.engine), "keep 0"));
    assert_int_equal(pkv_seq_truncate(h.engine, id, PROMPT + 2),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_truncate(h.engine, id + 100, 3),
                     PKV_ERR_NOT_FOUND);
    /* All of its tokens: nothing changes. */
    assert_int_equal(pkv_seq_truncate(h.engine, id, PROMPT + 1), PKV_OK);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(h.engine, &b), PKV_OK);
    assert_int_equal(pkv_seq_truncate(h.engine, id, 3), PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_engine_last_error(h.engine), "during a step"));
    /* Finish the step the test began (zero rows; the host's record of
     * the sequence is not kept up to date from here). */
    for (uint32_t l = 0; l < p.num_layers; l++) {
        size_t n = (size_t)b->num_tokens * p.num_q_heads * p.head_dim;
        size_t nkv = (size_t)b->num_tokens * p.num_kv_heads * p.head_dim;
        float *q = calloc(n, sizeof *q), *o = calloc(n, sizeof *o);
        float *kv = calloc(nkv, sizeof *kv);
        pkv_tensor tq =
            pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32, b->num_tokens,
                            p.num_q_heads, p.head_dim);
        pkv_tensor tk =
            pkv_tensor_host(kv, 0, PKV_TENSOR_DTYPE_F32, b->num_tokens,
                            p.num_kv_heads, p.head_dim);
        pkv_tensor to =
            pkv_tensor_host(o, 0, PKV_TENSOR_DTYPE_F32, b->num_tokens,
                            p.num_q_heads, p.head_dim);
        assert_int_equal(pkv_engine_attend(h.engine, l, &tq, &tk, &tk, &to),
                         PKV_OK);
        free(q);
        free(o);
        free(kv);
    }
    int32_t sampled = 1;
    assert_int_equal(pkv_engine_step_end(h.engine, &sampled, NULL, 1),
                     PKV_OK);
    free(prompt);
    ch_free(&h);
}

#endif

int main(void)
{
#ifdef PKV_HAVE_OPENCL
    int start = ch_opencl_start();
    if (start != 0)
        return start;
    /* The CPU build runs the rest; these run on both backends. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_shared_blocks),
        cmocka_unit_test(test_cut_prefix_hit),
        cmocka_unit_test(test_fork_recompute),
    };
#else
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cut_points),
        cmocka_unit_test(test_cut_shared_blocks),
        cmocka_unit_test(test_cut_prefix_hit),
        cmocka_unit_test(test_cut_swapped),
        cmocka_unit_test(test_fork_recompute),
        cmocka_unit_test(test_cut_errors),
    };
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
