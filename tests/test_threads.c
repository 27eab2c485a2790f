/* SPDX-License-Identifier: MIT */
/*
 * pkv_seq_add and pkv_seq_abort from four threads while the main thread
 * steps the engine (the host loop of DESIGN.md section 1), every output row
 * checked against the dense reference (check_host.h, learn mode: the main
 * thread learns each sequence's tokens from the batches, and unique cache
 * salts rule out prefix hits across sequences). At the end every added
 * sequence has ended exactly once, only aborted ones as aborted, and the
 * pool is idle. Once more with the host's threads lent to the CPU
 * backend's attention (pkv_engine_params.parallel). Run under
 * ThreadSanitizer in CI (tests/run.sh).
 */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "check_host_cmocka.h"
#include "hash_model.h"
#include "lent_pool.h"
#include "rng.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum {
    NUM_THREADS = 4,
    ADDS_PER_THREAD = 40,
    MAX_NEW_TOKENS = 6,
    MAX_PROMPT = 24,
    VOCAB = 1000
};

typedef struct worker {
    pkv_engine *engine;
    uint32_t index;
    uint64_t rng;
    pkv_seq_id ids[ADDS_PER_THREAD];
    uint32_t num_ids;
    pkv_seq_id aborted[2 * ADDS_PER_THREAD];
    uint32_t num_aborted;
    int error; /* a call returned an unexpected status */
} worker;

static atomic_uint workers_done;
/* Steps run by the main thread: workers pace their adds on it, so that adds
 * and aborts land between and during steps, not all before the first. */
static atomic_uint steps_done;

static void *work(void *arg)
{
    worker *w = arg;
    for (uint32_t i = 0; i < ADDS_PER_THREAD; i++) {
        for (uint32_t spin = 0;
             atomic_load(&steps_done) < i / 2 && spin < 1000000; spin++)
            sched_yield();
        int32_t prompt[MAX_PROMPT];
        uint32_t len = 1u + (uint32_t)(test_rand(&w->rng) % MAX_PROMPT);
        for (uint32_t t = 0; t < len; t++)
            prompt[t] = (int32_t)(test_rand(&w->rng) % VOCAB);
        pkv_seq_params p;
        pkv_seq_params_init(&p);
        p.prompt = prompt;
        p.prompt_len = len;
        p.max_new_tokens = MAX_NEW_TOKENS;
        p.tenant = w->index;
        /* No prefix is shared between sequences: the main thread learns
         * every sequence's tokens from its rows, from position 0. */
        p.cache_salt = ((uint64_t)w->index << 32) | (i + 1u);
        pkv_seq_id id = 0;
        if (pkv_seq_add(w->engine, &p, &id) != PKV_OK || id == 0) {
            w->error = 1;
            break;
        }
        w->ids[w->num_ids++] = id;
        uint64_t r = test_rand(&w->rng);
        if (r % 3 == 0) {
            /* One of its own, maybe long gone, maybe just added. */
            pkv_seq_id victim = w->ids[(r >> 8) % w->num_ids];
            if (pkv_seq_abort(w->engine, victim) != PKV_OK)
                w->error = 1;
            w->aborted[w->num_aborted++] = victim;
        } else if (r % 3 == 1 && (r >> 8) % 2 == 0) {
            /* Probably another thread's, maybe not issued yet. */
            pkv_status st = pkv_seq_abort(w->engine, id + 1);
            if (st == PKV_OK)
                w->aborted[w->num_aborted++] = id + 1;
            else if (st != PKV_ERR_NOT_FOUND)
                w->error = 1;
        } else if (r % 7 == 1) {
            /* Never issued: nothing changes. */
            if (pkv_seq_abort(w->engine, (pkv_seq_id)1 << 40) !=
                    PKV_ERR_NOT_FOUND ||
                strstr(pkv_last_error(), "1099511627776 was never added") ==
                    NULL)
                w->error = 1;
        }
        if (r % 4 == 0)
            sched_yield();
    }
    atomic_fetch_add(&workers_done, 1u);
    return NULL;
}

static int was_aborted(const worker *workers, pkv_seq_id id)
{
    for (uint32_t t = 0; t < NUM_THREADS; t++)
        for (uint32_t i = 0; i < workers[t].num_aborted; i++)
            if (workers[t].aborted[i] == id)
                return 1;
    return 0;
}

/* The host's threads lent to pkv: POOL_THREADS threads and the caller. */
enum { POOL_THREADS = 3 };
static lent_pool pool;

static void run(int32_t preempt_mode, uint64_t swap_bytes, int lend)
{
    pkv_engine_params p;
    assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
    p.num_layers = 2;
    p.num_q_heads = 4;
    p.num_kv_heads = 2;
    p.head_dim = 8;
    p.block_size = 4;
    p.num_blocks = 24; /* small: preemption happens */
    p.kv_dtype = PKV_KV_DTYPE_F32;
    p.vocab_size = VOCAB;
    p.max_model_len = 64;
    p.max_num_seqs = 6;
    p.max_batch_tokens = 32;
    p.long_prefill_threshold = 8;
    p.preempt_mode = preempt_mode;
    p.swap_bytes = swap_bytes;
    p.backend = PKV_BACKEND_KIND_CPU;
    if (lend) {
        assert_int_equal(lent_pool_start(&pool, POOL_THREADS), 0);
        p.parallel = lent_pool_parallel;
        p.parallel_user = &pool;
        p.parallel_workers = POOL_THREADS + 1;
    }

    static ch_host host;
    ch_cmocka_init(&host, &p, 1e-4);
    host.learn = 1;
    host.learn_max_new_tokens = MAX_NEW_TOKENS;

    static worker workers[NUM_THREADS];
    pthread_t threads[NUM_THREADS];
    atomic_store(&workers_done, 0u);
    atomic_store(&steps_done, 0u);
    for (uint32_t t = 0; t < NUM_THREADS; t++) {
        memset(&workers[t], 0, sizeof workers[t]);
        workers[t].engine = host.engine;
        workers[t].index = t;
        workers[t].rng = 0x706b76u + t;
        assert_int_equal(pthread_create(&threads[t], NULL, work, &workers[t]),
                         0);
    }
    /* The host loop: step while anyone may still add, or work is left. */
    uint64_t steps = 0;
    while (atomic_load(&workers_done) < NUM_THREADS ||
           pkv_engine_has_work(host.engine)) {
        if (!pkv_engine_has_work(host.engine)) {
            sched_yield();
            continue;
        }
        ch_step(&host, NULL);
        ch_check(&host);
        /* The workers' failed aborts write the engine's message while this
         * thread reads it (ThreadSanitizer watches the lock). */
        const char *m = pkv_engine_last_error(host.engine);
        if (m[0] != '\0' && strstr(m, "was never added") == NULL)
            fail_msg("%s", m);
        atomic_fetch_add(&steps_done, 1u);
        assert_true(++steps < 100000);
    }
    for (uint32_t t = 0; t < NUM_THREADS; t++)
        assert_int_equal(pthread_join(threads[t], NULL), 0);
    ch_drain(&host, 10000);

    uint64_t added = 0;
    for (uint32_t t = 0; t < NUM_THREADS; t++) {
        const worker *w = &workers[t];
        assert_int_equal(w->error, 0);
        assert_int_equal(w->num_ids, ADDS_PER_THREAD);
        added += w->num_ids;
        for (uint32_t i = 0; i < w->num_ids; i++) {
            const ch_seq *s = ch_find(&host, w->ids[i]);
            assert_non_null(s);
            assert_true(s->ended);
            if (!was_aborted(workers, w->ids[i]))
                assert_int_equal(s->reason, PKV_FINISH_REASON_LENGTH);
        }
    }
    /* Ids are 1..added, each ended once (ch_host fails on a second end). */
    assert_int_equal(host.last_id, added);
    assert_int_equal(host.ended, added);
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    assert_int_equal(pkv_engine_get_stats(host.engine, &st), PKV_OK);
    print_message("%llu sequences, %llu steps, %llu rows checked, %llu "
                  "preemptions, %llu swap-outs\n",
                  (unsigned long long)added, (unsigned long long)st.steps,
                  (unsigned long long)host.rows_checked,
                  (unsigned long long)st.preemptions,
                  (unsigned long long)st.swap_outs);
    assert_true(host.rows_checked > 0);
    ch_free(&host);
    if (lend)
        lent_pool_stop(&pool);
}

static void test_threads_recompute(void **state)
{
    (void)state;
    run(PKV_PREEMPT_MODE_RECOMPUTE, 0, 0);
}

static void test_threads_swap(void **state)
{
    (void)state;
    run(PKV_PREEMPT_MODE_SWAP, 1u << 16, 0);
}

static void test_threads_lent(void **state)
{
    (void)state;
    run(PKV_PREEMPT_MODE_RECOMPUTE, 0, 1);
}

/* Decode of two long sequences on lent threads: few tiles, so the CPU
 * backend splits each context into chunks that the threads fold, then
 * merges them (backend_cpu_attend.c); every row against the dense
 * reference, U8 and f32. */
static void test_threads_split_decode(void **state)
{
    (void)state;
    enum { PROMPT = 700, NEW = 5 };
    static const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_U8};
    for (size_t d = 0; d < 2; d++) {
        pkv_engine_params p;
        assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
        p.num_layers = 2;
        p.num_q_heads = 2;
        p.num_kv_heads = 1;
        p.head_dim = 16;
        p.block_size = 16;
        p.num_blocks = 2 * (PROMPT + NEW) / 16 + 8;
        p.kv_dtype = dtypes[d];
        p.vocab_size = VOCAB;
        p.max_model_len = PROMPT + NEW;
        p.backend = PKV_BACKEND_KIND_CPU;
        assert_int_equal(lent_pool_start(&pool, POOL_THREADS), 0);
        p.parallel = lent_pool_parallel;
        p.parallel_user = &pool;
        p.parallel_workers = POOL_THREADS + 1;
        static ch_host host;
        ch_cmocka_init(&host, &p, hm_tolerance(dtypes[d]));
        int32_t prompt[PROMPT];
        uint64_t rng = 5 + d;
        for (uint32_t i = 0; i < 2; i++) {
            for (uint32_t t = 0; t < PROMPT; t++)
                prompt[t] = (int32_t)(test_rand(&rng) % VOCAB);
            ch_add_prompt(&host, prompt, PROMPT - 100 * i, NEW, 0, 0);
        }
        ch_run(&host, 1000);
        assert_true(host.rows_checked > 0);
        ch_free(&host);
        lent_pool_stop(&pool);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_recompute),
        cmocka_unit_test(test_threads_swap),
        cmocka_unit_test(test_threads_lent),
        cmocka_unit_test(test_threads_split_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
