/* SPDX-License-Identifier: MIT */
/*
 * Device-fault sweep: a backend that fails its Nth call, for every N of a
 * workload with prefix hits, a fork, preemption (swap and recompute) and a
 * U8 cache. The host calls again after each failure (tm_host.retry); every
 * sequence must still end by length with the tokens a fault-free run
 * gives, every output row must match the dense reference (so no sequence
 * ever attends over KV that was not written, from a prefix hit or
 * otherwise), the invariant check must hold after every step, and the
 * pool must end idle.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check.h"
#include "engine.h"
#include "test_model.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ the failing backend */

static const pkv__backend_ops *real;
static pkv__backend_ops faulty;
static long calls, fail_at;

static pkv_status fault(void)
{
    return ++calls == fail_at
               ? pkv__fail(PKV_ERR_DEVICE, "injected fault (call %ld)", calls)
               : PKV_OK;
}

static pkv_status f_begin_step(pkv__backend *b, const pkv__step *s)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->begin_step(b, s);
}

static pkv_status f_append(pkv__backend *b, uint32_t layer, const float *k,
                           const float *v)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->append(b, layer, k, v);
}

static pkv_status f_attend(pkv__backend *b, uint32_t layer, const float *q,
                           float *out, float scale, uint32_t window)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->attend(b, layer, q, out, scale, window);
}

static pkv_status f_copy_blocks(pkv__backend *b, const pkv__block_copy *p,
                                uint32_t n)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->copy_blocks(b, p, n);
}

static pkv_status f_copy_stages(pkv__backend *b, const pkv__block_copy *p,
                                uint32_t n)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->copy_stages(b, p, n);
}

static pkv_status f_swap_out(pkv__backend *b, const uint32_t *blocks,
                             uint32_t n, void *host)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->swap_out(b, blocks, n, host);
}

static pkv_status f_swap_in(pkv__backend *b, const void *host,
                            const uint32_t *blocks, uint32_t n)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->swap_in(b, host, blocks, n);
}

static pkv_status f_stage_out(pkv__backend *b, uint32_t stage, void *host)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->stage_out(b, stage, host);
}

static pkv_status f_stage_in(pkv__backend *b, const void *host,
                             uint32_t stage)
{
    pkv_status st = fault();
    return st != PKV_OK ? st : real->stage_in(b, host, stage);
}

static void make_faulty(pkv_engine *e)
{
    real = e->ops;
    faulty = *real;
    faulty.begin_step = f_begin_step;
    faulty.append = f_append;
    faulty.attend = f_attend;
    faulty.copy_blocks = f_copy_blocks;
    faulty.copy_stages = f_copy_stages;
    faulty.swap_out = f_swap_out;
    faulty.swap_in = f_swap_in;
    faulty.stage_out = f_stage_out;
    faulty.stage_in = f_stage_in;
    e->ops = &faulty;
}

/* ------------------------------------------------------- the workload */

enum { NSEQ = 5, PROMPT = 11, NEW = 10, SHARED = 8 };

typedef struct outcome {
    int32_t tokens[NSEQ + 1][PROMPT + NEW];
    uint32_t num_tokens[NSEQ + 1];
    uint32_t faults;
} outcome;

/* Run the workload with the Nth backend call failing (0: none); record
 * every sequence's tokens, in order of id. Returns the backend calls. */
static long run(int32_t backend, int32_t mode, int32_t dtype, long fail,
                outcome *o)
{
    pkv_engine_params p = tm_params(backend);
    p.num_blocks = 17; /* 16 usable blocks of 4 tokens: preemption */
    p.watermark = 0;
    p.preempt_mode = mode;
    p.kv_dtype = dtype;
    p.swap_bytes = 1 << 20;
    tm_host h;
    tm_host_init(&h, &p, dtype == PKV_KV_U8 ? 0.05f : 1e-4f);
    h.retry = 1;
    make_faulty(h.engine);
    calls = 0;
    fail_at = fail;
    /* Prompts share SHARED tokens (two blocks): later ones hit the
     * prefix cache once the first has run. */
    int32_t *shared = tm_prompt(SHARED, 1);
    pkv_seq_id ids[NSEQ + 1];
    for (uint32_t i = 0; i < NSEQ; i++) {
        int32_t *prompt = tm_prompt(PROMPT, 40 + i);
        memcpy(prompt, shared, SHARED * sizeof *prompt);
        ids[i] = tm_add(&h, prompt, PROMPT, NEW, 0, 0);
        free(prompt);
    }
    free(shared);
    int forked = 0;
    for (uint32_t step = 0; step < 400 && pkv_engine_has_work(h.engine);
         step++) {
        tm_step(&h, NULL);
        tm_seq *first = tm_find(&h, ids[0]);
        /* Fork the first sequence once it has sampled two tokens. */
        if (!forked && !first->ended && first->num_tokens >= PROMPT + 2 &&
            first->num_tokens < PROMPT + NEW) {
            pkv_seq_id child;
            pkv_status st = pkv_seq_fork(h.engine, ids[0], -1, &child);
            if (st == PKV_OK) {
                tm_record_fork(&h, ids[0], child, -1);
                ids[NSEQ] = child;
                forked = 1;
            } else if (st == PKV_ERR_DEVICE) {
                h.faults++; /* the injected fault: fork again next step */
            } else {
                assert_int_equal(st, PKV_ERR_BAD_STATE); /* swapped out */
            }
        }
        char why[256];
        if (pkv__engine_check(h.engine, why, sizeof why) != NULL)
            fail_msg("fail_at %ld, step %u: %s", fail, step, why);
    }
    assert_true(forked);
    for (uint32_t i = 0; i <= NSEQ; i++) {
        tm_seq *s = tm_find(&h, ids[i]);
        if (!s->ended || s->finish_reason != PKV_FINISH_LENGTH)
            fail_msg("fail_at %ld: seq %llu ended %d, reason %d, status %d",
                     fail, (unsigned long long)ids[i], s->ended,
                     s->finish_reason, s->finish_status);
        o->num_tokens[i] = s->num_tokens;
        memcpy(o->tokens[i], s->tokens, s->num_tokens * sizeof *s->tokens);
    }
    o->faults = h.faults;
    tm_check_idle(&h);
    tm_host_free(&h);
    return calls;
}

static void sweep(int32_t backend, int32_t mode, int32_t dtype)
{
    outcome clean, faulted;
    long absorbed = 0;
    memset(&clean, 0, sizeof clean);
    long total = run(backend, mode, dtype, 0, &clean);
    assert_int_equal(clean.faults, 0);
    for (long n = 1; n <= total; n++) {
        memset(&faulted, 0, sizeof faulted);
        assert_true(run(backend, mode, dtype, n, &faulted) >= n);
        /* A failed swap or copy costs its sequence the step, not the call:
         * the host sees no error then. */
        assert_true(faulted.faults <= 1);
        absorbed += faulted.faults == 0;
        for (uint32_t i = 0; i <= NSEQ; i++) {
            assert_int_equal(faulted.num_tokens[i], clean.num_tokens[i]);
            if (memcmp(faulted.tokens[i], clean.tokens[i],
                       clean.num_tokens[i] * sizeof *clean.tokens[i]) != 0)
                fail_msg("fail_at %ld: seq %u's tokens differ", n, i);
        }
    }
    print_message("%ld backend calls, each failed once (%ld absorbed by the "
                  "engine)\n",
                  total, absorbed);
}

static void test_faults_swap_f32(void **state)
{
    (void)state;
    sweep(PKV_BACKEND_CPU, PKV_PREEMPT_SWAP, PKV_KV_F32);
}

static void test_faults_recompute_f32(void **state)
{
    (void)state;
    sweep(PKV_BACKEND_CPU, PKV_PREEMPT_RECOMPUTE, PKV_KV_F32);
}

static void test_faults_swap_u8(void **state)
{
    (void)state;
    sweep(PKV_BACKEND_CPU, PKV_PREEMPT_SWAP, PKV_KV_U8);
}

/* The same engine paths over real device buffers (PoCL in tests/run.sh):
 * the faults are injected at the backend's interface, around the OpenCL
 * backend's own calls. Skipped without an OpenCL device. */
static void test_faults_opencl_swap_u8(void **state)
{
    (void)state;
    pkv_engine_params p = tm_params(PKV_BACKEND_OPENCL);
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        print_message("no OpenCL device: %s\n", pkv_last_error());
        skip();
    }
    pkv_engine_destroy(e);
    sweep(PKV_BACKEND_OPENCL, PKV_PREEMPT_SWAP, PKV_KV_U8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faults_swap_f32),
        cmocka_unit_test(test_faults_recompute_f32),
        cmocka_unit_test(test_faults_swap_u8),
        cmocka_unit_test(test_faults_opencl_swap_u8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
