/* SPDX-License-Identifier: MIT */
/*
 * pkv_seq_add must not touch the sequence once it has queued it: from the
 * inbox unlock on, the stepping thread may drain it, end it (an abort from
 * any thread) and free it. test_threads finds this under ThreadSanitizer
 * now and then; this test makes the interleaving certain on one thread:
 * pthread_mutex_unlock (src/lock.h) is interposed (the executable's
 * definition comes before libc's; the real one is found with dlsym), and
 * right after the unlock that
 * queues the new sequence it plays the stepping thread: abort the new id,
 * run a step, which reports the sequence and frees it. pkv_seq_add must
 * still hand back the right id (and ASan sees no use after free).
 */
#define _GNU_SOURCE /* RTLD_NEXT */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#if defined(__GLIBC__)

static pkv_engine *engine;
static int armed;
static uint32_t reported;

/* Play the stepping thread: abort the newest id and run a step. */
static void step_now(void)
{
    pkv_seq_id newest = engine->inbox.last_id;
    if (pkv_seq_abort(engine, newest) != PKV_OK)
        return;
    const pkv_batch *b = NULL;
    if (pkv_engine_step_begin(engine, &b) != PKV_OK)
        return;
    for (uint32_t i = 0; i < b->num_finished; i++)
        reported += b->finished[i].id == newest;
    pkv_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    t.rows = b->num_tokens;
    t.head_dim = engine->params.head_dim;
    for (uint32_t layer = 0; layer < engine->params.num_layers; layer++) {
        pkv_tensor q = t, kv = t;
        q.heads = engine->params.num_q_heads;
        kv.heads = engine->params.num_kv_heads;
        pkv_engine_attend(engine, layer, &q, &kv, &kv, &q);
    }
    pkv_engine_step_end(engine, NULL, NULL, 0);
}

static int (*real_unlock)(pthread_mutex_t *);

static void find_real_unlock(void)
{
    void *sym = dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    memcpy(&real_unlock, &sym, sizeof sym);
}

int pthread_mutex_unlock(pthread_mutex_t *m)
{
    if (real_unlock == NULL)
        find_real_unlock();
    int st = real_unlock(m);
    if (armed && engine != NULL && m == engine->inbox.lock &&
        engine->inbox.adds_head != NULL) {
        armed = 0;
        step_now();
    }
    return st;
}

static void test_add_returns_id_of_freed_sequence(void **state)
{
    (void)state;
    pkv_engine_params p;
    assert_int_equal(pkv_engine_params_init(&p), PKV_OK);
    p.num_layers = 1;
    p.num_q_heads = 1;
    p.num_kv_heads = 1;
    p.head_dim = 4;
    p.block_size = 4;
    p.num_blocks = 8;
    p.kv_dtype = PKV_KV_DTYPE_F32;
    p.backend = PKV_BACKEND_KIND_CPU;
    assert_int_equal(pkv_engine_create(&p, &engine), PKV_OK);

    int32_t prompt[3] = {1, 2, 3};
    pkv_seq_params sp;
    assert_int_equal(pkv_seq_params_init(&sp), PKV_OK);
    sp.prompt = prompt;
    sp.prompt_len = 3;
    pkv_seq_id id = 0;
    armed = 1;
    assert_int_equal(pkv_seq_add(engine, &sp, &id), PKV_OK);
    assert_int_equal(armed, 0);
    assert_int_equal(reported, 1); /* the step freed it inside the add */
    assert_int_equal(id, 1);
    assert_int_equal(pkv_engine_has_work(engine), 0);
    pkv_engine_destroy(engine);
    engine = NULL;
}

int main(void)
{
    find_real_unlock();
    if (real_unlock == NULL)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_returns_id_of_freed_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void)
{
    return 77; /* skipped: the interposition needs glibc */
}

#endif
