/* SPDX-License-Identifier: MIT */
/* The scheduler and the engine loop on the CPU backend, every output row
 * checked against a dense recomputation (check_host.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv_layout.h"
#include "check_host_cmocka.h"
#include "hash_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_single_sequence_decodes(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(10, 1);
    pkv_seq_id id = ch_add_prompt(&h, prompt, 10, 5, 0, 0);
    ch_run(&h, 100);
    ch_seq *s = ch_find(&h, id);
    assert_true(s->ended);
    assert_int_equal(s->reason, PKV_FINISH_REASON_LENGTH);
    assert_int_equal(s->num_tokens, 15);
    /* 1 prefill step + 4 decode steps + 1 to report the end. */
    assert_int_equal(h.steps, 6);
    assert_int_equal(h.rows_checked, 2 * (10 + 4));
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

/* vLLM's test_scheduler.py: with a threshold of 400 and a budget of 1024,
 * three long prompts get 400, 400 and 224 rows in the first step. */
static void test_long_prefill_threshold(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_layers = 1;
    p.max_batch_tokens = 1024;
    p.long_prefill_threshold = 400;
    p.num_blocks = 1024;
    p.max_model_len = 2048;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompts[3];
    for (uint32_t i = 0; i < 3; i++) {
        prompts[i] = hm_prompt(1000, 10 + i);
        ch_add_prompt(&h, prompts[i], 1000, 2, 0, 0);
    }
    const pkv_batch *b;
    ch_step(&h, &b);
    assert_int_equal(b->num_seqs, 3);
    assert_int_equal(b->query_start[1], 400);
    assert_int_equal(b->query_start[2], 800);
    assert_int_equal(b->query_start[3], 1024);
    assert_int_equal(b->num_samples, 0);
    ch_run(&h, 100);
    ch_check_idle(&h);
    for (uint32_t i = 0; i < 3; i++)
        free(prompts[i]);
    ch_free(&h);
}

static void test_fcfs_order_and_max_num_seqs(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.max_num_seqs = 2;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(6, 3);
    pkv_seq_id ids[4];
    for (int i = 0; i < 4; i++)
        ids[i] = ch_add_prompt(&h, prompt, 6, 3, 0, 0);
    const pkv_batch *b;
    ch_step(&h, &b);
    assert_int_equal(b->num_seqs, 2);
    assert_true(b->seq_ids[0] == ids[0] && b->seq_ids[1] == ids[1]);
    ch_run(&h, 100);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ch_find(&h, ids[i])->reason, PKV_FINISH_REASON_LENGTH);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

static void test_prefix_hit_is_used_and_correct(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(19, 4);
    ch_add_prompt(&h, prompt, 19, 2, 0, 0);
    ch_run(&h, 100);
    /* The same prompt again: 4 full blocks (16 tokens) hit, 3 computed. */
    pkv_seq_id id = ch_add_prompt(&h, prompt, 19, 2, 0, 0);
    const pkv_batch *b;
    ch_step(&h, &b);
    assert_int_equal(b->num_tokens, 3);
    assert_int_equal(b->positions[0], 16);
    assert_int_equal(b->context_lens[0], 19);
    assert_int_equal(b->seq_ids[0], id);
    ch_run(&h, 100);
    pkv_engine_stats s;
    s.struct_size = sizeof s;
    assert_int_equal(pkv_engine_get_stats(h.engine, &s), PKV_OK);
    assert_int_equal(s.prefix_hit_tokens, 16);
    assert_int_equal(s.prefix_query_tokens, 38);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}


/* A pool too small for everyone: sequences are preempted, resumed, and
 * every row stays equal to the dense reference. */
static void run_tiny_pool(int32_t mode, int32_t kv_dtype, float tol)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_blocks = 13; /* 12 usable blocks of 4 tokens */
    p.watermark = 0;
    p.preempt_mode = mode;
    p.kv_dtype = kv_dtype;
    p.swap_bytes = 1 << 20;
    ch_host h;
    ch_cmocka_init(&h, &p, tol);
    int32_t *prompts[4];
    pkv_seq_id ids[4];
    for (uint32_t i = 0; i < 4; i++) {
        prompts[i] = hm_prompt(9, 20 + i);
        ids[i] = ch_add_prompt(&h, prompts[i], 9, 12, 0, 0);
    }
    ch_run(&h, 500);
    for (uint32_t i = 0; i < 4; i++) {
        ch_seq *s = ch_find(&h, ids[i]);
        assert_int_equal(s->reason, PKV_FINISH_REASON_LENGTH);
        assert_int_equal(s->num_tokens, 21);
        free(prompts[i]);
    }
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_true(st.preemptions > 0);
    assert_int_equal(h.preempted_reports, st.preemptions);
    if (mode == PKV_PREEMPT_MODE_SWAP) {
        assert_true(st.swap_outs > 0);
        assert_int_equal(st.swap_ins, st.swap_outs);
    } else {
        assert_int_equal(st.swap_outs, 0);
    }
    ch_check_idle(&h);
    ch_free(&h);
}

static void test_preempt_recompute(void **state)
{
    (void)state;
    run_tiny_pool(PKV_PREEMPT_MODE_RECOMPUTE, PKV_KV_DTYPE_F32, 1e-4f);
}

static void test_preempt_swap(void **state)
{
    (void)state;
    run_tiny_pool(PKV_PREEMPT_MODE_SWAP, PKV_KV_DTYPE_F32, 1e-4f);
}

static void test_preempt_swap_u8(void **state)
{
    (void)state;
    /* U8 and U4 tails live in the staging area: swap carries them too. */
    run_tiny_pool(PKV_PREEMPT_MODE_SWAP, PKV_KV_DTYPE_U8,
                  hm_tolerance(PKV_KV_DTYPE_U8));
    run_tiny_pool(PKV_PREEMPT_MODE_SWAP, PKV_KV_DTYPE_U4,
                  hm_tolerance(PKV_KV_DTYPE_U4));
}

static void test_preempt_recompute_f16(void **state)
{
    (void)state;
    run_tiny_pool(PKV_PREEMPT_MODE_RECOMPUTE, PKV_KV_DTYPE_F16, 5e-3f);
}

/* PRIORITY: when blocks run out, the lowest-priority running sequence is
 * the one preempted, even though it arrived first. */
static void test_priority_preemption(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.policy = PKV_SCHED_POLICY_PRIORITY;
    p.num_blocks = 9; /* 8 usable */
    p.watermark = 0;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *a = hm_prompt(8, 30), *b = hm_prompt(8, 31);
    pkv_seq_id low = ch_add_prompt(&h, a, 8, 12, 5, 0);
    pkv_seq_id high = ch_add_prompt(&h, b, 8, 12, 1, 0);
    const pkv_batch *batch;
    ch_step(&h, &batch);
    /* Priority order: the high-priority one is admitted first. */
    assert_int_equal(batch->seq_ids[0], high);
    int low_preempted = 0;
    while (pkv_engine_has_work(h.engine)) {
        ch_step(&h, &batch);
        for (uint32_t i = 0; i < batch->num_preempted; i++) {
            assert_int_equal(batch->preempted[i], low);
            low_preempted = 1;
        }
    }
    assert_true(low_preempted);
    assert_int_equal(ch_find(&h, high)->reason, PKV_FINISH_REASON_LENGTH);
    assert_int_equal(ch_find(&h, low)->reason, PKV_FINISH_REASON_LENGTH);
    ch_check_idle(&h);
    free(a);
    free(b);
    ch_free(&h);
}

/* Abort in every state: queued, waiting, mid-prefill, running, swapped. */
static void test_abort_every_state(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.long_prefill_threshold = 4;
    p.max_batch_tokens = 8;
    p.num_blocks = 11;
    p.watermark = 0;
    p.preempt_mode = PKV_PREEMPT_MODE_SWAP;
    p.swap_bytes = 1 << 20;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(12, 40);

    /* Queued: aborted before any step sees it. */
    pkv_seq_id queued = ch_add_prompt(&h, prompt, 12, 4, 0, 0);
    ch_abort(&h, queued);
    ch_step(&h, NULL);
    assert_int_equal(ch_find(&h, queued)->reason, PKV_FINISH_REASON_ABORTED);

    /* Mid-prefill: 12 tokens, 4 per step. */
    pkv_seq_id mid = ch_add_prompt(&h, prompt, 12, 4, 0, 0);
    ch_step(&h, NULL);
    const uint32_t *blocks;
    uint32_t nb, nt;
    assert_int_equal(pkv_engine_get_block_table(h.engine, mid, &blocks, &nb,
                                                &nt),
                     PKV_OK);
    assert_int_equal(nt, 4);
    ch_abort(&h, mid);
    ch_step(&h, NULL);
    assert_int_equal(ch_find(&h, mid)->reason, PKV_FINISH_REASON_ABORTED);
    assert_int_equal(pkv_engine_get_block_table(h.engine, mid, &blocks, &nb,
                                                &nt),
                     PKV_ERR_NOT_FOUND);

    /* Waiting behind max_num_seqs... and running, and swapped: fill the
     * pool with two decoding sequences so the younger is swapped out. */
    pkv_seq_id a = ch_add_prompt(&h, prompt, 12, 40, 0, 0);
    pkv_seq_id b = ch_add_prompt(&h, prompt, 12, 40, 0, 0);
    pkv_seq_id swapped = 0;
    for (int i = 0; i < 60 && !swapped; i++) {
        const pkv_batch *batch;
        ch_step(&h, &batch);
        if (batch->num_preempted)
            swapped = batch->preempted[0];
    }
    assert_int_equal(swapped, b);
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_int_equal(st.num_swapped, 1);
    pkv_seq_id waiting = ch_add_prompt(&h, prompt, 12, 4, 0, 0);
    ch_abort(&h, swapped);
    ch_abort(&h, a); /* running */
    ch_step(&h, NULL);
    assert_int_equal(ch_find(&h, a)->reason, PKV_FINISH_REASON_ABORTED);
    assert_int_equal(ch_find(&h, b)->reason, PKV_FINISH_REASON_ABORTED);
    ch_abort(&h, waiting);
    ch_run(&h, 100);
    assert_int_equal(ch_find(&h, waiting)->reason, PKV_FINISH_REASON_ABORTED);
    /* Ended ids: abort is a no-op; never-issued ids: not found. */
    ch_abort(&h, a);
    ch_abort(&h, 9999);
    ch_abort(&h, 0);
    ch_run(&h, 10);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

/* Fork after the first sample, then diverge: the child shares every block
 * of the prompt, its outputs stay exact, and only the shared partly filled
 * block is copied. */
static void test_fork_then_diverge(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (int k = 0; k < (int)(sizeof dtypes / sizeof dtypes[0]); k++) {
        pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
        p.kv_dtype = dtypes[k];
        ch_host h;
        ch_cmocka_init(&h, &p, hm_tolerance(dtypes[k]));
        int32_t *prompt = hm_prompt(10, 50);
        pkv_seq_id parent = ch_add_prompt(&h, prompt, 10, 8, 0, 0);
        ch_step(&h, NULL); /* prefill and first sample */
        pkv_seq_id kids[3];
        for (int i = 0; i < 3; i++) {
            assert_int_equal(ch_fork(&h, parent, 100 + i, &kids[i]),
                             PKV_OK);
        }
        const uint32_t *pb, *cb;
        uint32_t pn, cn, pt, ct;
        assert_int_equal(
            pkv_engine_get_block_table(h.engine, parent, &pb, &pn, &pt),
            PKV_OK);
        assert_int_equal(
            pkv_engine_get_block_table(h.engine, kids[0], &cb, &cn, &ct),
            PKV_OK);
        assert_int_equal(pn, cn);
        for (uint32_t i = 0; i < pn; i++)
            assert_int_equal(pb[i], cb[i]);
        pkv_engine_stats before, after;
        before.struct_size = after.struct_size = sizeof before;
        assert_int_equal(pkv_engine_get_stats(h.engine, &before), PKV_OK);
        ch_step(&h, NULL); /* every sample writes its own copy of block 2 */
        assert_int_equal(pkv_engine_get_stats(h.engine, &after), PKV_OK);
        assert_int_equal(after.blocks_used - before.blocks_used, 3);
        ch_run(&h, 100);
        ch_check_idle(&h);
        free(prompt);
        ch_free(&h);
    }
}

/* A parent with a partly filled last block and its fork both decode in a
 * full pool: the parent copies the block, which leaves it the child's
 * alone, so the child writes in place and needs no block. A plan that
 * forgot the copy drops the parent's reference charged the child a second
 * copy and preempted it. */
static void test_fork_copy_frees_the_sharer(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_blocks = 4; /* null + 3: the parent's 2, 1 for its copy */
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(6, 1);
    pkv_seq_id parent = ch_add_prompt(&h, prompt, 6, 8, 0, 0);
    const pkv_batch *b;
    ch_step(&h, &b); /* prefill: a full block and 2 of 4 rows */
    assert_int_equal(b->num_tokens, 6);
    pkv_seq_id child;
    assert_int_equal(ch_fork(&h, parent, -1, &child), PKV_OK);
    ch_step(&h, &b);
    assert_int_equal(b->num_preempted, 0);
    assert_int_equal(b->num_seqs, 2);
    ch_run(&h, 100);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

static void test_fork_bad_input(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.max_num_seqs = 2;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(10, 60);
    pkv_seq_id id = ch_add_prompt(&h, prompt, 10, 8, 0, 0);
    pkv_seq_id child = 7;
    /* Added, not yet seen by a step: it has not sampled. */
    assert_int_equal(pkv_seq_fork(h.engine, id, -1, &child), PKV_ERR_BAD_STATE);
    assert_int_equal(child, 0);
    ch_step(&h, NULL);
    assert_int_equal(pkv_seq_fork(h.engine, 999, -1, &child),
                     PKV_ERR_NOT_FOUND);
    assert_int_equal(pkv_seq_fork(h.engine, id, 5000, &child),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_fork(h.engine, id, -1, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(h.engine, &b), PKV_OK);
    assert_int_equal(pkv_seq_fork(h.engine, id, -1, &child),
                     PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_engine_last_error(h.engine), "during a step"));
    /* Finish that step by hand. */
    float buf[4 * 8] = {0};
    pkv_tensor q =
        pkv_tensor_host(buf, 0, PKV_TENSOR_DTYPE_F32, 1, 4, 8);
    pkv_tensor kv = q;
    kv.heads = 2;
    float out[4 * 8];
    pkv_tensor o = q;
    o.data = out;
    for (uint32_t l = 0; l < 2; l++)
        assert_int_equal(pkv_engine_attend(h.engine, l, &q, &kv, &kv, &o),
                         PKV_OK);
    int32_t tok = 1;
    assert_int_equal(pkv_engine_step_end(h.engine, &tok, NULL, 1), PKV_OK);
    ch_sampled(&h, id, 1);
    assert_int_equal(ch_fork(&h, id, -1, &child), PKV_OK);
    /* max_num_seqs is 2. */
    pkv_seq_id third;
    assert_int_equal(pkv_seq_fork(h.engine, id, -1, &third),
                     PKV_ERR_BAD_STATE);
    /* The hand-made step wrote zeros as KV: drop these sequences. */
    ch_abort(&h, id);
    ch_abort(&h, child);
    ch_run(&h, 10);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

/* Count preemptions per sequence from the batches. */
typedef struct preempt_count {
    pkv_seq_id id;
    uint32_t count;
} preempt_count;

static uint32_t record_preemptions(preempt_count *counts, uint32_t n,
                                   const pkv_batch *b)
{
    uint32_t worst = 0;
    for (uint32_t i = 0; i < b->num_preempted; i++)
        for (uint32_t j = 0; j < n; j++)
            if (counts[j].id == b->preempted[i] && ++counts[j].count > worst)
                worst = counts[j].count;
    return worst;
}

/* Three times more KV than the pool holds, all at once: every sequence
 * finishes with exact outputs, and none is preempted more than twice. */
static void test_workload_three_times_the_pool(void **state)
{
    (void)state;
    const int32_t modes[] = {PKV_PREEMPT_MODE_RECOMPUTE, PKV_PREEMPT_MODE_SWAP};
    for (int m = 0; m < 2; m++) {
        pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
        p.num_blocks = 65; /* 64 usable blocks = 256 tokens */
        p.max_num_seqs = 16;
        p.preempt_mode = modes[m];
        p.swap_bytes = 1 << 16;
        ch_host h;
        ch_cmocka_init(&h, &p, 1e-4f);
        enum { N = 24 };
        preempt_count counts[N];
        uint64_t final_blocks = 0;
        int32_t *prompts[N];
        for (uint32_t i = 0; i < N; i++) {
            uint32_t len = 10 + (i * 5) % 17, gen = 10 + (i * 3) % 11;
            prompts[i] = hm_prompt(len, 70 + i);
            counts[i].id = ch_add_prompt(&h, prompts[i], len, gen, 0, 0);
            counts[i].count = 0;
            final_blocks += (len + gen + 3) / 4;
        }
        assert_true(final_blocks >= 3 * 64);
        uint32_t worst = 0;
        while (pkv_engine_has_work(h.engine)) {
            const pkv_batch *b;
            ch_step(&h, &b);
            uint32_t w = record_preemptions(counts, N, b);
            worst = w > worst ? w : worst;
            assert_true(h.steps < 2000);
        }
        for (uint32_t i = 0; i < N; i++) {
            assert_int_equal(ch_find(&h, counts[i].id)->reason,
                             PKV_FINISH_REASON_LENGTH);
            free(prompts[i]);
        }
        print_message("3x pool (%s): %llu steps, %llu preemptions, at most "
                      "%u per sequence\n",
                      m ? "swap" : "recompute", (unsigned long long)h.steps,
                      (unsigned long long)h.preempted_reports, worst);
        assert_true(worst <= 2);
        ch_check_idle(&h);
        ch_free(&h);
    }
}

/* Fill and squeeze: tenant 1 floods long requests, tenant 2 sends short
 * ones one at a time. Returns the worst number of steps tenant 2 waited
 * from its add to its first sampled token. */
static uint32_t squeeze(uint32_t tenant_quota, int32_t preempt_mode,
                        uint32_t *short_done)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_blocks = 65; /* 64 usable */
    p.max_num_seqs = 32;
    p.max_blocks_per_tenant = tenant_quota;
    p.preempt_mode = preempt_mode;
    p.swap_bytes = 1 << 24;
    p.num_layers = 1;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *flood = hm_prompt(40, 80), *shorty = hm_prompt(4, 81);
    for (int i = 0; i < 30; i++)
        ch_add_prompt(&h, flood, 40, 60, 0, 1);
    uint32_t worst = 0;
    *short_done = 0;
    for (uint32_t round = 0; round < 12; round++) {
        pkv_seq_id id = ch_add_prompt(&h, shorty, 4, 4, 0, 2);
        uint32_t waited = 0;
        for (;;) {
            const pkv_batch *b;
            ch_step(&h, &b);
            waited++;
            int sampled = 0;
            for (uint32_t j = 0; j < b->num_samples; j++)
                sampled |= b->sample_seq_ids[j] == id;
            if (sampled || waited >= 400)
                break;
        }
        worst = waited > worst ? waited : worst;
        for (int i = 0; i < 6; i++)
            ch_step(&h, NULL);
        *short_done += (uint32_t)ch_find(&h, id)->ended;
    }
    ch_run(&h, 20000);
    ch_check_idle(&h);
    free(flood);
    free(shorty);
    ch_free(&h);
    return worst;
}

static void test_fill_and_squeeze(void **state)
{
    (void)state;
    /* In both preemption modes: a flooding tenant's sequence swapped out
     * and unable to come back under its quota must not hold up others. */
    const int32_t modes[2] = {PKV_PREEMPT_MODE_RECOMPUTE,
                              PKV_PREEMPT_MODE_SWAP};
    for (int m = 0; m < 2; m++) {
        uint32_t done_with, done_without;
        uint32_t with_quota = squeeze(48, modes[m], &done_with);
        uint32_t without = squeeze(0, modes[m], &done_without);
        print_message("fill-and-squeeze (%s): steps to first token of the "
                      "short tenant: %u with a 48-block tenant quota, %u "
                      "without; short requests done within 6 more steps: "
                      "%u/12 vs %u/12\n",
                      m ? "swap" : "recompute", with_quota, without,
                      done_with, done_without);
        /* With the quota the short tenant's requests start at once. */
        assert_true(with_quota <= 2);
        assert_int_equal(done_with, 12);
        assert_true(without > 10 * with_quota);
    }
}

/* max_model_len well past 32,768 with nothing reserved for it up front:
 * one sequence of 32,800 prompt tokens decodes past 32,768. */
static void test_long_context(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_layers = 1;
    p.num_q_heads = 1;
    p.num_kv_heads = 1;
    p.head_dim = 4;
    p.block_size = 16;
    p.max_model_len = 131072;
    p.max_batch_tokens = 8192;
    p.num_blocks = 2100;
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    h.check_stride = 4099;
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(h.engine, &st), PKV_OK);
    assert_int_equal(st.blocks_used, 1); /* nothing per max_model_len */
    int32_t *prompt = hm_prompt(32760, 90);
    pkv_seq_id id = ch_add_prompt(&h, prompt, 32760, 16, 0, 0);
    ch_run(&h, 100);
    ch_seq *s = ch_find(&h, id);
    assert_int_equal(s->reason, PKV_FINISH_REASON_LENGTH);
    assert_int_equal(s->num_tokens, 32776);
    assert_true(h.rows_checked >= 20);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

/* max_model_len ends a sequence; a prompt that cannot fit the pool fails
 * with a status instead of waiting forever. */
static void test_limits_end_sequences(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.max_model_len = 16;
    p.num_blocks = 4; /* 3 usable blocks = 12 tokens */
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(14, 91);
    pkv_seq_id too_big = ch_add_prompt(&h, prompt, 14, 0, 0, 0);
    pkv_seq_id ok = ch_add_prompt(&h, prompt, 6, 0, 0, 0);
    ch_run(&h, 100);
    assert_int_equal(ch_find(&h, too_big)->reason, PKV_FINISH_REASON_FAILED);
    assert_int_equal(ch_find(&h, too_big)->status, PKV_ERR_NO_BLOCKS);
    /* 6 tokens + samples until the pool (12 tokens) runs out: fails once it
     * cannot grow, since nobody else can be preempted. */
    ch_seq *s = ch_find(&h, ok);
    assert_int_equal(s->reason, PKV_FINISH_REASON_FAILED);
    assert_int_equal(s->status, PKV_ERR_NO_BLOCKS);
    ch_check_idle(&h);
    ch_free(&h);

    p.num_blocks = 64;
    ch_cmocka_init(&h, &p, 1e-4f);
    ok = ch_add_prompt(&h, prompt, 6, 0, 0, 0);
    ch_run(&h, 100);
    assert_int_equal(ch_find(&h, ok)->reason, PKV_FINISH_REASON_MAX_MODEL_LEN);
    assert_int_equal(ch_find(&h, ok)->num_tokens, 16);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

/* Per-sequence quota: a sequence that outgrows it fails with
 * PKV_ERR_QUOTA; the others are unaffected. */
static void test_sequence_quota(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.max_blocks_per_seq = 4; /* 16 tokens */
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    int32_t *prompt = hm_prompt(10, 92);
    pkv_seq_id big = ch_add_prompt(&h, prompt, 10, 20, 0, 0);
    pkv_seq_id small = ch_add_prompt(&h, prompt, 10, 4, 0, 0);
    ch_run(&h, 100);
    assert_int_equal(ch_find(&h, big)->status, PKV_ERR_QUOTA);
    assert_int_equal(ch_find(&h, small)->reason, PKV_FINISH_REASON_LENGTH);
    ch_check_idle(&h);
    free(prompt);
    ch_free(&h);
}

static void snap_stats(pkv_engine *e, pkv_engine_stats *s)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    assert_int_equal(pkv_engine_get_stats(e, s), PKV_OK);
}

static void expect_unchanged(pkv_engine *e, const pkv_engine_stats *before)
{
    pkv_engine_stats after;
    snap_stats(e, &after);
    assert_memory_equal(before, &after, sizeof after);
}

/* Every public call with bad input: a clear status, a message, nothing
 * changed. */
static void test_bad_input_everywhere(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host h;
    ch_cmocka_init(&h, &p, 1e-4f);
    pkv_engine *e = h.engine;
    int32_t prompt[5] = {1, 2, 3, 4, 5};
    pkv_seq_params sp;
    pkv_seq_id id = 99;
    pkv_engine_stats before;
    snap_stats(e, &before);

    assert_int_equal(pkv_seq_params_init(NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_params_init(&sp), PKV_OK);
    sp.prompt = prompt;
    sp.prompt_len = 5;
    assert_int_equal(pkv_seq_add(NULL, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_add(e, NULL, &id), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(id, 0);
    assert_int_equal(pkv_seq_add(e, &sp, NULL), PKV_ERR_INVALID_ARGUMENT);
    sp.struct_size = 8;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_STRUCT_SIZE);
    sp.struct_size = sizeof sp;
    sp.flags = 2;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    sp.flags = 0;
    sp.prompt = NULL;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    sp.prompt = prompt;
    sp.prompt_len = 0;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    sp.prompt_len = p.max_model_len;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    sp.prompt_len = 5;
    prompt[3] = -1;
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_last_error(), "prompt[3] is -1"));
    prompt[3] = 1000; /* vocab_size is 1000 */
    assert_int_equal(pkv_seq_add(e, &sp, &id), PKV_ERR_INVALID_ARGUMENT);
    prompt[3] = 4;
    assert_false(pkv_engine_has_work(e));
    assert_int_equal(pkv_seq_abort(NULL, 1), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_abort(e, 1), PKV_ERR_NOT_FOUND);

    /* Calls out of order. */
    float buf[4 * 8];
    pkv_tensor t = pkv_tensor_host(buf, 0, PKV_TENSOR_DTYPE_F32, 0, 4, 8);
    assert_int_equal(pkv_engine_attend(e, 0, &t, &t, &t, &t),
                     PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_engine_last_error(e), "step_begin"));
    assert_int_equal(pkv_engine_step_end(e, NULL, NULL, 0), PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_engine_step_begin(e, NULL), PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_step_begin(NULL, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    expect_unchanged(e, &before);

    /* A real step, and bad calls inside it. */
    pkv_seq_id seq = ch_add_prompt(&h, prompt, 5, 3, 0, 0);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(e, &b), PKV_OK);
    assert_int_equal(b->num_tokens, 5);
    const pkv_batch *b2 = NULL;
    assert_int_equal(pkv_engine_step_begin(e, &b2), PKV_ERR_BAD_STATE);
    assert_null(b2);
    snap_stats(e, &before);
    float q[5 * 4 * 8], kv[5 * 2 * 8], out[5 * 4 * 8];
    memset(q, 0, sizeof q);
    memset(kv, 0, sizeof kv);
    pkv_tensor tq =
        pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32, 5, 4, 8);
    pkv_tensor tkv = tq, to = tq;
    tkv.heads = 2;
    tkv.data = kv;
    to.data = out;
    pkv_tensor bad = tq;
    bad.rows = 4;
    assert_int_equal(pkv_engine_attend(e, 0, &bad, &tkv, &tkv, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_engine_last_error(e), "q is [4][4][8]"));
    bad = tkv;
    bad.heads = 4;
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &bad, &tkv, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    bad = tq;
    bad.head_dim = 16;
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tkv, &tkv, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    bad = tkv;
    bad.dtype = 9;
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tkv, &bad, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    bad.dtype = PKV_TENSOR_DTYPE_F32;
    bad.memory = PKV_TENSOR_MEMORY_OPENCL;
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tkv, &bad, &to),
                     PKV_ERR_UNSUPPORTED);
    bad = tq;
    bad.struct_size = 12;
    assert_int_equal(pkv_engine_attend(e, 0, &bad, &tkv, &tkv, &to),
                     PKV_ERR_STRUCT_SIZE);
    bad = tq;
    bad.data = NULL;
    assert_int_equal(pkv_engine_attend(e, 0, &bad, &tkv, &tkv, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_attend(e, 0, NULL, &tkv, &tkv, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_attend(e, 2, &tq, &tkv, &tkv, &to),
                     PKV_ERR_INVALID_ARGUMENT);
    int32_t tok = 1;
    assert_int_equal(pkv_engine_step_end(e, &tok, NULL, 1), PKV_ERR_BAD_STATE);
    assert_non_null(strstr(pkv_engine_last_error(e), "2 layers not"));
    expect_unchanged(e, &before);
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tkv, &tkv, &to), PKV_OK);
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tkv, &tkv, &to),
                     PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_engine_attend(e, 1, &tq, &tkv, &tkv, &to), PKV_OK);
    assert_int_equal(pkv_engine_step_end(e, &tok, NULL, 0),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_step_end(e, NULL, NULL, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    tok = 1000;
    assert_int_equal(pkv_engine_step_end(e, &tok, NULL, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    tok = -3;
    assert_int_equal(pkv_engine_step_end(e, &tok, NULL, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    tok = 7;
    assert_int_equal(pkv_engine_step_end(e, &tok, NULL, 1), PKV_OK);
    ch_sampled(&h, seq, tok);

    const uint32_t *blocks = (const uint32_t *)1;
    uint32_t nb = 5, nt = 5;
    assert_int_equal(pkv_engine_get_block_table(e, seq, NULL, &nb, &nt),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_engine_get_block_table(e, 12345, &blocks, &nb, &nt),
                     PKV_ERR_NOT_FOUND);
    assert_null(blocks);
    assert_int_equal(nb, 0);
    assert_int_equal(pkv_engine_get_block_table(e, seq, &blocks, &nb, &nt),
                     PKV_OK);
    assert_int_equal(nb, 2);
    assert_int_equal(nt, 5);
    /* The zero rows written by hand are this sequence's own: drop it. */
    ch_abort(&h, seq);
    ch_run(&h, 10);
    ch_check_idle(&h);
    ch_free(&h);
    assert_int_equal(pkv_engine_has_work(NULL), 0);
}

/* A NaN or an infinity in one sequence's K fails that sequence alone; the
 * others' outputs stay exact and nothing it wrote is cached. */
static void non_finite_case(float bad_value, int32_t kv_dtype, float tol)
{
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_layers = 1;
    p.kv_dtype = kv_dtype;
    ch_host h;
    ch_cmocka_init(&h, &p, tol);
    pkv_engine *e = h.engine;
    int32_t prompt[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    pkv_seq_id good = ch_add_prompt(&h, prompt, 8, 2, 0, 0);
    pkv_seq_id bad = ch_add_prompt(&h, prompt, 8, 2, 0, 0);
    const pkv_batch *b;
    assert_int_equal(pkv_engine_step_begin(e, &b), PKV_OK);
    assert_int_equal(b->num_tokens, 16);
    assert_int_equal(b->seq_ids[1], bad);
    uint32_t T = 16, hq = 4, hkv = 2, d = 8;
    float q[16 * 4 * 8], k[16 * 2 * 8], v[16 * 2 * 8], out[16 * 4 * 8];
    for (uint32_t r = 0; r < T; r++) {
        hm_row(HM_Q, b->token_ids[r], b->positions[r], 0, hq, d,
               q + r * hq * d);
        hm_row(HM_K, b->token_ids[r], b->positions[r], 0, hkv, d,
               k + r * hkv * d);
        hm_row(HM_V, b->token_ids[r], b->positions[r], 0, hkv, d,
               v + r * hkv * d);
    }
    k[12 * hkv * d + 3] = bad_value; /* row 12: the second sequence */
    pkv_tensor tq =
        pkv_tensor_host(q, 0, PKV_TENSOR_DTYPE_F32, T, hq, d);
    pkv_tensor tk = tq, tv = tq, to = tq;
    tk.heads = tv.heads = hkv;
    tk.data = k;
    tv.data = v;
    to.data = out;
    assert_int_equal(pkv_engine_attend(e, 0, &tq, &tk, &tv, &to), PKV_OK);
    for (uint32_t i = 0; i < 8 * hq * d; i++)
        assert_true(out[i] == out[i]); /* the good rows hold no NaN */
    int32_t sampled[2] = {1, 2};
    assert_int_equal(b->num_samples, 2);
    assert_int_equal(pkv_engine_step_end(e, sampled, NULL, 2), PKV_OK);
    ch_sampled(&h, good, 1); /* bad's sample goes with it */
    ch_run(&h, 10);
    assert_int_equal(ch_find(&h, bad)->status, PKV_ERR_NON_FINITE);
    assert_int_equal(ch_find(&h, good)->reason, PKV_FINISH_REASON_LENGTH);
    /* Only the good sequence's full blocks were cached. */
    pkv_seq_id again = ch_add_prompt(&h, prompt, 8, 1, 0, 0);
    const pkv_batch *b3;
    ch_step(&h, &b3);
    assert_int_equal(b3->seq_ids[0], again);
    assert_int_equal(b3->positions[0], 4);
    ch_run(&h, 10);
    ch_check_idle(&h);
    ch_free(&h);
}

static void test_non_finite_fails_one_sequence(void **state)
{
    (void)state;
    const float bad[3] = {(float)NAN, (float)INFINITY, -(float)INFINITY};
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < (int)(sizeof dtypes / sizeof dtypes[0]); j++)
            non_finite_case(bad[i], dtypes[j], hm_tolerance(dtypes[j]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_sequence_decodes),
        cmocka_unit_test(test_long_prefill_threshold),
        cmocka_unit_test(test_fcfs_order_and_max_num_seqs),
        cmocka_unit_test(test_prefix_hit_is_used_and_correct),
        cmocka_unit_test(test_preempt_recompute),
        cmocka_unit_test(test_preempt_swap),
        cmocka_unit_test(test_preempt_swap_u8),
        cmocka_unit_test(test_preempt_recompute_f16),
        cmocka_unit_test(test_priority_preemption),
        cmocka_unit_test(test_abort_every_state),
        cmocka_unit_test(test_fork_then_diverge),
        cmocka_unit_test(test_fork_copy_frees_the_sharer),
        cmocka_unit_test(test_fork_bad_input),
        cmocka_unit_test(test_workload_three_times_the_pool),
        cmocka_unit_test(test_fill_and_squeeze),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_limits_end_sequences),
        cmocka_unit_test(test_sequence_quota),
        cmocka_unit_test(test_bad_input_everywhere),
        cmocka_unit_test(test_non_finite_fails_one_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
