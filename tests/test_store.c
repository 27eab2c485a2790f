/* SPDX-License-Identifier: MIT */
/*
 * The engine with a KV store (pkv_engine_params.store), through the
 * in-process store of store_fake.h. One engine computes prompts and saves
 * their blocks; a second engine, sharing the store, must load them (its
 * first request for the prompt computes only the last token), with every
 * output row checked against dense attention under ch_step. Then every
 * way a value can be wrong (each byte flipped, truncated, extended, from
 * another geometry, salt, block or prompt) and every way the store can
 * fail (refused, failed, never answering, evicting, aborted or truncated
 * sequences while loading): no wrong row, no lost sequence, no operation
 * left in flight, and the stats say what happened.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine.h"
#include "kv_layout.h"
#include "seal.h"
#include "store/digest.h"
#include "store/engine_store.h"
#include "struct_sizes.h"
#include "wire.h"
#include "store_fake.h"
#include "check_host_cmocka.h"
#include "hash_model.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PROMPT = 41 }; /* 10 full blocks of 4 before the last token */

static pkv_engine_params params_of(int32_t dtype)
{
#ifdef PKV_HAVE_OPENCL
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_OPENCL);
#else
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
#endif
    p.kv_dtype = dtype;
    return p;
}

/* A host whose engine uses a fake connector over data. */
typedef struct store_host {
    ch_host host;
    fs_store fs;
    pkv_store store;
} store_host;

/* The connector, whose fields a test may change before sh_start. */
static void sh_connect(store_host *h, fs_data *data)
{
    assert_int_equal(pkv_store_init(&h->store), PKV_OK);
    fs_connect(&h->fs, data, &h->store);
}

static void sh_start(store_host *h, pkv_engine_params p)
{
    p.store = &h->store;
    ch_cmocka_init(&h->host, &p, hm_tolerance(p.kv_dtype));
}

static void sh_init(store_host *h, pkv_engine_params p, fs_data *data)
{
    sh_connect(h, data);
    sh_start(h, p);
}

static void sh_free(store_host *h)
{
    ch_free(&h->host);
    fs_free(&h->fs); /* the engine cancelled what was in flight */
}

static pkv_engine_stats stats_of(store_host *h)
{
    pkv_engine_stats s;
    pkv_engine_stats_init(&s);
    assert_int_equal(pkv_engine_get_stats(h->host.engine, &s), PKV_OK);
    return s;
}

static void sh_run(store_host *h)
{
    ch_run_idle(&h->host);
}

static pkv_seq_id add(store_host *h, const int32_t *prompt, uint64_t salt)
{
    return ch_add_salted(&h->host, prompt, PROMPT, 3, salt);
}

/* Run prompt (salt) on an engine of params p that saves into data. */
static void fill(fs_data *data, pkv_engine_params p, const int32_t *prompt,
                 uint64_t salt)
{
    store_host a;
    sh_init(&a, p, data);
    add(&a, prompt, salt);
    sh_run(&a);
    pkv_engine_stats s = stats_of(&a);
    assert_int_equal(s.store_saves, PROMPT / 4);
    assert_int_equal(s.store_save_failures + s.store_saves_skipped, 0);
    sh_free(&a);
}

static uint32_t first_rows(store_host *h, pkv_seq_id id)
{
    return ch_first_rows(&h->host, id);
}

/* A second engine's first request for a prompt another engine computed
 * loads all its blocks: one row computed; then each engine's outputs are
 * the dense reference's (ch_step checks every row). */
static void test_share(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    int32_t *prompt = hm_prompt(PROMPT, 7);
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        fs_data data = {0};
        fill(&data, params_of(dtypes[d]), prompt, 0);
        store_host b;
        sh_init(&b, params_of(dtypes[d]), &data);
        pkv_seq_id id = add(&b, prompt, 0);
        const pkv_batch *batch;
        ch_step(&b.host, &batch); /* asks; the seq waits for its blocks */
        assert_int_equal(ch_rows_of(batch, id), 0);
        assert_int_equal(stats_of(&b).num_loading, 1);
        assert_int_equal(first_rows(&b, id), 1);
        sh_run(&b);
        pkv_engine_stats s = stats_of(&b);
        assert_int_equal(s.store_lookups, 1);
        assert_int_equal(s.store_query_blocks, PROMPT / 4);
        assert_int_equal(s.store_hit_blocks, PROMPT / 4);
        assert_int_equal(s.store_hit_tokens, PROMPT / 4 * 4);
        assert_int_equal(s.num_loading, 0);
        assert_true(s.store_load_bytes > 0);
        /* Loaded blocks are not sent back. */
        assert_int_equal(s.store_saves, 0);
        assert_int_equal(s.store_damaged + s.store_mismatched +
                             s.store_load_failures + s.store_timeouts,
                         0);
        sh_free(&b);
        fs_data_free(&data);
    }
    free(prompt);
}

/* Blocks the prefix cache holds are not asked for: a prompt sharing its
 * first 3 blocks with one computed locally asks for the other 7. */
static void test_local_first(void **state)
{
    (void)state;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    int32_t *other = hm_prompt(PROMPT, 8);
    memcpy(other, prompt, 12 * sizeof *other);
    fs_data data = {0};
    fill(&data, params_of(PKV_KV_DTYPE_F16), prompt, 0);
    store_host b;
    sh_init(&b, params_of(PKV_KV_DTYPE_F16), &data);
    add(&b, other, 0);
    sh_run(&b);
    uint64_t asked = stats_of(&b).store_query_blocks;
    pkv_seq_id id = add(&b, prompt, 0);
    assert_int_equal(first_rows(&b, id), 1);
    sh_run(&b);
    pkv_engine_stats s = stats_of(&b);
    assert_int_equal(s.store_query_blocks - asked, PROMPT / 4 - 3);
    /* 3 blocks loaded for the first prompt, 7 for the second. */
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    sh_free(&b);
    fs_data_free(&data);
    free(prompt);
    free(other);
}

/* Run prompt on a fresh engine over data; returns its stats after the
 * first request ran to its end, checking every row. *rows gets the rows
 * its first step computed. */
static pkv_engine_stats serve(fs_data *data, pkv_engine_params p,
                              const int32_t *prompt, uint64_t salt,
                              uint32_t *rows)
{
    store_host b;
    sh_init(&b, p, data);
    pkv_seq_id id = add(&b, prompt, salt);
    uint32_t r = first_rows(&b, id);
    if (rows != NULL)
        *rows = r;
    sh_run(&b);
    pkv_engine_stats s = stats_of(&b);
    sh_free(&b);
    return s;
}

/* Hybrid memory (a window of 6 tokens on one layer of two, the default):
 * the full group's blocks and the windowed group's last ones go to the
 * store, each group's under its own names; a second engine loads them all
 * and computes one row, every row checked against dense attention. */
static void test_hybrid_memory(void **state)
{
    (void)state;
    static const uint32_t windows[2] = {6, 0};
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_U8};
    int32_t *prompt = hm_prompt(PROMPT, 7);
    for (size_t d = 0; d < 2; d++) {
        pkv_engine_params p = params_of(dtypes[d]);
        p.layer_windows = windows;
        fs_data data = {0};
        store_host a;
        sh_init(&a, p, &data);
        add(&a, prompt, 0);
        sh_run(&a);
        pkv_engine_stats s = stats_of(&a);
        assert_int_equal(s.kv_groups, 2);
        /* The full group's 10 blocks and the windowed group's it held
         * when the prompt's last full block was computed. */
        assert_true(s.store_saves > PROMPT / 4);
        assert_int_equal(s.store_save_failures + s.store_saves_skipped, 0);
        sh_free(&a);
        store_host b;
        sh_init(&b, p, &data);
        pkv_seq_id id = add(&b, prompt, 0);
        assert_int_equal(first_rows(&b, id), 1);
        sh_run(&b);
        s = stats_of(&b);
        /* The full group's 10 and the windowed group's 2 its row sees. */
        assert_int_equal(s.store_hit_blocks, PROMPT / 4 + 2);
        assert_int_equal(s.store_damaged + s.store_mismatched, 0);
        sh_free(&b);
        /* An engine without groups names other values: it misses them. */
        pkv_engine_params q = p;
        q.kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
        uint32_t rows;
        s = serve(&data, q, prompt, 0, &rows);
        assert_int_equal(rows, PROMPT);
        assert_int_equal(s.store_hit_blocks + s.store_damaged, 0);
        fs_data_free(&data);
    }
    free(prompt);
}

/* The entry of a table filled with one prompt that holds block j (the
 * value's index field, docs/design.md "KV store"). */
static fs_entry *entry_at(fs_data *data, uint32_t j)
{
    for (size_t i = 0; i < data->count; i++) {
        const uint8_t *v = data->entries[i].value;
        uint32_t index = (uint32_t)v[44] | (uint32_t)v[45] << 8 |
                         (uint32_t)v[46] << 16 | (uint32_t)v[47] << 24;
        if (index == j)
            return &data->entries[i];
    }
    fail_msg("no block %u", (unsigned)j);
    return NULL;
}

/* Serve prompt over data, which holds its blocks but a bad block 2:
 * blocks 0 and 1 load, 2 is computed and counted as `kind`. */
static void expect_bad_block2(fs_data *data, pkv_engine_params p,
                              const int32_t *prompt, int damaged)
{
    uint32_t rows;
    pkv_engine_stats s = serve(data, p, prompt, 0, &rows);
    assert_int_equal(rows, PROMPT - 8);
    assert_int_equal(s.store_hit_blocks, 2);
    assert_int_equal(s.store_damaged, damaged ? 1 : 0);
    assert_int_equal(s.store_mismatched, damaged ? 0 : 1);
}

/* Every byte of a value flipped in turn (CPU build; the OpenCL build
 * flips a few), and the value truncated or extended: damaged. */
static void test_damaged_values(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_U8);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0);
    fs_entry *e = entry_at(&data, 2);
    size_t size = e->size;
#ifdef PKV_HAVE_OPENCL
    size_t step = size / 7;
#else
    size_t step = 1;
#endif
    uint8_t *whole = malloc(size + 1);
    assert_non_null(whole);
    memcpy(whole, e->value, size);
    whole[size] = 0;
    char key[PKV_STORE_KEY_MAX];
    strcpy(key, e->key);
    /* Each serve computes block 2 again and saves it, mending the store:
     * every flip starts from the intact value. */
    for (size_t i = 0; i < size; i += step) {
        whole[i] ^= (uint8_t)(1u << (i % 8));
        fs_put(&data, key, whole, size);
        whole[i] ^= (uint8_t)(1u << (i % 8));
        expect_bad_block2(&data, p, prompt, 1);
        assert_memory_equal(fs_get(&data, key)->value, whole, size);
    }
    const size_t cuts[] = {0, 1, size / 2, size - 1, size + 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        fs_put(&data, key, whole, cuts[c]);
        if (cuts[c] == 0) {
            /* An empty value reads as missing: a plain miss. */
            uint32_t rows;
            pkv_engine_stats s = serve(&data, p, prompt, 0, &rows);
            assert_int_equal(s.store_hit_blocks, 2);
            assert_int_equal(rows, PROMPT - 8);
            continue;
        }
        expect_bad_block2(&data, p, prompt, 1);
    }
    fs_put(&data, key, whole, size);
    uint32_t rows;
    serve(&data, p, prompt, 0, &rows);
    assert_int_equal(rows, 1); /* whole again */
    free(whole);
    fs_data_free(&data);
    free(prompt);
}

/* A value forged with a valid checksum (wire.c is public code) but a
 * non-finite number where the KV is read (an f32/f16 element; a quantized
 * part's lo or scale): damaged, never used, as a host tensor with one is
 * refused. The number is put in the last layer's last kv head's V part. */
static void test_forged_non_finite(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    int32_t *prompt = hm_prompt(PROMPT, 7);
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        pkv_engine_params p = params_of(dtypes[i]);
        fs_data data = {0};
        fill(&data, p, prompt, 0);
        fs_entry *e = entry_at(&data, 2);
        size_t kv = 128 + 4 * (size_t)p.block_size; /* value.c's layout */
        uint32_t bs = p.block_size, d = p.head_dim;
        uint32_t u4g = d % 32 == 0 ? 32 : d; /* pkv.h's default */
        size_t head = PKV_LAYOUT_HEAD_BYTES(
            p.kv_dtype, PKV_LAYOUT_PER_CHANNEL, PKV_LAYOUT_PER_TOKEN, u4g,
            bs, d);
        int kd = PKV_LAYOUT_KEY_DTYPE(p.kv_dtype);
        int vd = PKV_LAYOUT_VALUE_DTYPE(p.kv_dtype);
        size_t v_part = kv +
                        (size_t)(p.num_layers * p.num_kv_heads - 1) * head +
                        PKV_LAYOUT_PART_BYTES(kd, PKV_LAYOUT_PER_CHANNEL,
                                              u4g, bs, d);
        uint8_t *at = e->value + v_part;
        if (vd == PKV_LAYOUT_F32) {
            memcpy(at + 4, "\x00\x00\xc0\x7f", 4); /* NaN */
        } else if (vd == PKV_LAYOUT_F16) {
            memcpy(at + 2, "\x00\x7c", 2); /* +Inf */
        } else {
            /* The first scale of a per-token part (pkv.h's default for
             * values): after the codes and the lo of every group. */
            size_t scale = PKV_LAYOUT_Q_SCALE_OFFSET(
                vd, PKV_LAYOUT_PER_TOKEN, u4g, bs, d);
            memcpy(at + scale, "\x00\xfc", 2); /* -Inf */
        }
        pkv__put_u64(e->value + 120, pkv__checksum(e->value, e->size, 120));
        expect_bad_block2(&data, p, prompt, 1);
        fs_data_free(&data);
    }
    free(prompt);
}

/* A copy of entry x's value under key in data (x may be one of data's
 * own entries, which fs_put may move). */
static void put_entry(fs_data *data, const char *key, const fs_entry *x)
{
    uint8_t *copy = malloc(x->size);
    assert_non_null(copy);
    memcpy(copy, x->value, x->size);
    fs_put(data, key, copy, x->size);
    free(copy);
}

/* Intact values of other blocks under block 2's key: another geometry of
 * the same size, another salt, another block of the prompt, another
 * prompt's block 2 (a forced collision): mismatched, computed. */
static void test_other_blocks(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    int32_t *other = hm_prompt(PROMPT, 9);
    fs_data data = {0}, salted = {0}, shaped = {0}, foreign = {0};
    fill(&data, p, prompt, 0);
    fill(&salted, p, prompt, 1);
    fill(&foreign, p, other, 0);
    pkv_engine_params q = p; /* the same KV bytes per block */
    q.num_layers = 4;
    q.num_kv_heads = 1;
    q.num_q_heads = 2;
    fill(&shaped, q, prompt, 0);
    char key[PKV_STORE_KEY_MAX];
    strcpy(key, entry_at(&data, 2)->key);
    fs_entry *good = entry_at(&data, 2);
    size_t size = good->size;
    uint8_t *kept = malloc(size);
    assert_non_null(kept);
    memcpy(kept, good->value, size);
    fs_entry *imposters[] = {entry_at(&shaped, 2), entry_at(&salted, 2),
                             entry_at(&data, 3), entry_at(&foreign, 2)};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(imposters[i]->size, size);
        put_entry(&data, key, imposters[i]);
        expect_bad_block2(&data, p, prompt, 0);
        fs_put(&data, key, kept, size);
    }
    /* The salted engine's blocks are under other keys: no hit either. */
    uint32_t rows;
    pkv_engine_stats s = serve(&salted, p, prompt, 0, &rows);
    assert_int_equal(rows, PROMPT);
    assert_int_equal(s.store_hit_blocks + s.store_mismatched, 0);
    free(kept);
    fs_data_free(&data);
    fs_data_free(&salted);
    fs_data_free(&shaped);
    fs_data_free(&foreign);
    free(prompt);
    free(other);
}

/* Engines of different models (pkv_store.model) share nothing, though
 * geometry, prompt and salt are equal. */
static void test_models_apart(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0); /* model NULL: "" */
    const char *names[] = {"llama-3-8b@abc", ""};
    for (int i = 0; i < 2; i++) {
        store_host b;
        sh_connect(&b, &data);
        b.store.model = names[i];
        sh_start(&b, p);
        pkv_seq_id id = add(&b, prompt, 0);
        assert_int_equal(first_rows(&b, id), i == 0 ? PROMPT : 1);
        sh_run(&b);
        pkv_engine_stats s = stats_of(&b);
        assert_int_equal(s.store_hit_blocks, i == 0 ? 0 : PROMPT / 4);
        assert_int_equal(s.store_mismatched + s.store_damaged, 0);
        sh_free(&b);
    }
    fs_data_free(&data);
    free(prompt);
}

/* A block evicted from the store: the blocks before it load, the rest
 * are computed (and saved again). */
static void test_evicted(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0);
    char key[PKV_STORE_KEY_MAX];
    strcpy(key, entry_at(&data, 5)->key);
    fs_delete(&data, key);
    uint32_t rows;
    pkv_engine_stats s = serve(&data, p, prompt, 0, &rows);
    assert_int_equal(rows, PROMPT - 20);
    assert_int_equal(s.store_hit_blocks, 5);
    assert_int_equal(s.store_saves, 5); /* blocks 5..9 again */
    assert_non_null(fs_get(&data, key));
    fs_data_free(&data);
    free(prompt);
}

/* The connector refuses, fails, answers late or never: every prompt is
 * computed and served, the stats name the failure. */
static void test_connector_faults(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0);
    for (int fault = 0; fault < 6; fault++) {
        store_host b;
        sh_connect(&b, &data);
        b.store.timeout_ms = 30;
        b.fs.refuse_loads = fault == 0;
        b.fs.fail_loads = fault == 1;
        b.fs.hang_loads = fault == 2;
        b.fs.delay_polls = fault == 3 ? 3 : 0;
        b.fs.refuse_saves = fault == 4;
        b.fs.fail_saves = fault == 4;
        if (fault == 5)
            b.store.max_save_bytes = 1;
        sh_start(&b, p);
        int32_t *fresh = hm_prompt(PROMPT, 100 + (uint32_t)fault);
        pkv_seq_id id = add(&b, prompt, 0);
        add(&b, fresh, 0); /* saves, when the store takes them */
        uint32_t rows = first_rows(&b, id);
        sh_run(&b);
        pkv_engine_stats s = stats_of(&b);
        int hit = fault >= 3;
        assert_int_equal(rows, hit ? 1 : PROMPT);
        assert_int_equal(s.store_hit_blocks, hit ? PROMPT / 4 : 0);
        assert_int_equal(s.store_load_failures, fault <= 1 ? 2 : 0);
        assert_int_equal(s.store_timeouts, fault == 2 ? 2 : 0);
        assert_true(fault != 2 || s.store_wait_us >= 2 * 30000);
        assert_int_equal(s.store_save_failures, fault == 4 ? PROMPT / 4 : 0);
        assert_int_equal(s.store_saves_skipped, fault == 5 ? PROMPT / 4 : 0);
        /* Both prompts' blocks when the first one missed. */
        assert_int_equal(s.store_saves, fault >= 4  ? 0
                                        : hit      ? PROMPT / 4
                                                   : 2 * PROMPT / 4);
        assert_int_equal(b.fs.cancels, fault == 2 ? 2 : 0);
        sh_free(&b);
        free(fresh);
    }
    fs_data_free(&data);
    free(prompt);
}

/* A sequence aborted or truncated while its blocks load: the load is
 * cancelled (the fake store checks nothing is left in flight); destroy
 * cancels what is still in flight. */
static void test_cancel(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0);
    store_host b;
    sh_init(&b, p, &data);
    b.fs.hang_loads = 1;
    pkv_seq_id gone = add(&b, prompt, 0);
    const pkv_batch *batch;
    ch_step(&b.host, &batch);
    assert_int_equal(b.fs.num_ops, 1);
    ch_abort(&b.host, gone);
    ch_step(&b.host, &batch);
    assert_int_equal(b.fs.cancels, 1);
    assert_int_equal(b.fs.num_ops, 0);
    /* Truncated while loading: asked again for its shorter prompt. */
    pkv_seq_id cut = add(&b, prompt, 0);
    ch_step(&b.host, &batch);
    assert_int_equal(b.fs.num_ops, 1);
    b.fs.hang_loads = 0;
    assert_int_equal(ch_truncate(&b.host, cut, 21), PKV_OK);
    assert_int_equal(b.fs.cancels, 2);
    uint32_t rows = first_rows(&b, cut);
    assert_int_equal(rows, 1);
    sh_run(&b);
    assert_int_equal(stats_of(&b).store_hit_blocks, 5);
    /* Destroyed while loading. */
    b.fs.hang_loads = 1;
    add(&b, prompt, 0);
    ch_step(&b.host, &batch);
    assert_int_equal(b.fs.num_ops, 1);
    pkv_engine_destroy(b.host.engine);
    b.host.engine = NULL;
    assert_int_equal(b.fs.num_ops, 0);
    ch_free(&b.host);
    fs_free(&b.fs);
    fs_data_free(&data);
    free(prompt);
}

/* An allocator that fails its Nth allocation once armed and checks that
 * every free is given the size that was asked for (pkv.h's promise). */
typedef struct sized_alloc {
    int armed;
    long calls, fail_at;
    long bad_frees;
} sized_alloc;

enum { HEADER = 16 }; /* the size, keeping malloc's alignment */

static void *sized_alloc_fn(void *user, size_t size)
{
    sized_alloc *a = user;
    if (a->armed && ++a->calls == a->fail_at)
        return NULL;
    unsigned char *p = malloc(size + HEADER);
    if (p == NULL)
        return NULL;
    memcpy(p, &size, sizeof size);
    return p + HEADER;
}

static void sized_free_fn(void *user, void *ptr, size_t size)
{
    sized_alloc *a = user;
    unsigned char *p = (unsigned char *)ptr - HEADER;
    size_t asked;
    memcpy(&asked, p, sizeof asked);
    a->bad_frees += asked != size;
    free(p);
}

/* A host over data whose engine allocates through a. */
static void sh_start_sized(store_host *b, pkv_engine_params p, fs_data *data,
                           sized_alloc *a)
{
    sh_connect(b, data);
    p.allocator.alloc = sized_alloc_fn;
    p.allocator.free = sized_free_fn;
    p.allocator.user = a;
    sh_start(b, p);
}

/* The backend's swap_in (how a load's blocks are written) fails once. */
static const pkv__backend_ops *real_ops;
static pkv__backend_ops failing_ops;
static int swap_in_failures;

static pkv_status failing_swap_in(pkv__backend *b, const void *host,
                                  const uint32_t *blocks, uint32_t n)
{
    if (swap_in_failures > 0) {
        swap_in_failures--;
        return PKV_ERR_DEVICE;
    }
    return real_ops->swap_in(b, host, blocks, n);
}

/* A second engine's hit with its Nth allocation failed, for every N the
 * workload makes, then with the install's swap_in failed: every row
 * right (ch_step; a failed step_begin is called again), nothing leaked
 * (ch_check_idle, the fake store's check), every free of the right
 * size. */
static void test_store_faults(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_U8);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0);
    long made = 0;
    for (long n = 1;; n++) {
        sized_alloc a = {0, 0, n, 0};
        store_host b;
        sh_start_sized(&b, p, &data, &a);
        b.host.retry = 1;
        pkv_seq_id id = add(&b, prompt, 0);
        a.armed = 1; /* from the first step on: asks, loads, installs */
        uint32_t rows = first_rows(&b, id);
        sh_run(&b);
        a.armed = 0;
        pkv_engine_stats s = stats_of(&b);
        assert_true(rows == 1 || rows == PROMPT);
        assert_int_equal(s.store_hit_blocks, rows == 1 ? PROMPT / 4 : 0);
        sh_free(&b);
        assert_int_equal(a.bad_frees, 0);
        made = a.calls;
        if (a.calls < n)
            break; /* the workload made fewer: every one was failed */
    }
    assert_true(made > 5);
    for (int install = 0; install < 2; install++) {
        sized_alloc a = {0, 0, 0, 0};
        store_host b;
        sh_start_sized(&b, p, &data, &a);
        pkv_engine *e = b.host.engine;
        real_ops = e->device.ops;
        failing_ops = *real_ops;
        failing_ops.swap_in = failing_swap_in;
        e->device.ops = &failing_ops;
        swap_in_failures = 1;
        pkv_seq_id id = add(&b, prompt, 0);
        assert_int_equal(first_rows(&b, id), PROMPT);
        sh_run(&b);
        pkv_engine_stats s = stats_of(&b);
        assert_int_equal(s.store_hit_blocks, 0);
        assert_int_equal(s.store_load_failures, 1);
        e->device.ops = real_ops;
        sh_free(&b);
        assert_int_equal(a.bad_frees, 0);
    }
    fs_data_free(&data);
    free(prompt);
}

/* The load budget: a prompt asks for as many blocks as fit. */
static void test_load_budget(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, p, prompt, 0);
    store_host b;
    sh_connect(&b, &data);
    b.store.max_load_bytes = 3 * data.entries[0].size;
    sh_start(&b, p);
    pkv_seq_id id = add(&b, prompt, 0);
    assert_int_equal(first_rows(&b, id), PROMPT - 12);
    sh_run(&b);
    assert_int_equal(stats_of(&b).store_hit_blocks, 3);
    sh_free(&b);
    fs_data_free(&data);
    free(prompt);
}

/* A store without every callback, with unknown flags, a zero timeout,
 * another struct_size or a non-zero reserved word is refused at create,
 * the message naming the field. */
static void test_bad_store(void **state)
{
    (void)state;
    static const char *const says[] = {"load, save, poll and cancel",
                                       "flags is 0x2", "timeout_ms is 0",
                                       "struct_size is 8", "reserved0 is 1"};
    fs_data data = {0};
    fs_store fs;
    for (int c = 0; c < 5; c++) {
        pkv_store st;
        assert_int_equal(pkv_store_init(&st), PKV_OK);
        fs_connect(&fs, &data, &st);
        if (c == 0)
            st.cancel = NULL;
        if (c == 1)
            st.flags = 2;
        if (c == 2)
            st.timeout_ms = 0;
        if (c == 3)
            st.struct_size = 8;
        if (c == 4)
            st.reserved0 = 1;
        pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
        p.store = &st;
        pkv_engine *e = NULL;
        pkv_status want = c == 3 ? PKV_ERR_STRUCT_SIZE
                                 : PKV_ERR_INVALID_ARGUMENT;
        assert_int_equal(pkv_engine_create(&p, &e), want);
        assert_null(e);
        assert_true(strstr(pkv_last_error(), "store") != NULL);
        if (strstr(pkv_last_error(), says[c]) == NULL)
            fail_msg("case %d: \"%s\" does not say \"%s\"", c,
                     pkv_last_error(), says[c]);
        fs_free(&fs);
    }
    assert_int_equal(pkv_store_init(NULL), PKV_ERR_INVALID_ARGUMENT);
}

/* A connector whose poll always fills the array (its own reports, then
 * tickets the engine never gave): each step_begin polls a bounded number
 * of times, and the prompt is served as with an honest one. */
typedef struct flood {
    uint32_t (*honest)(void *user, pkv_store_done *done, uint32_t capacity);
    void *user;
    uint64_t calls;
} flood;

static flood flood_of_test;

static uint32_t flood_poll(void *user, pkv_store_done *done,
                           uint32_t capacity)
{
    (void)user;
    flood *f = &flood_of_test;
    /* Past any bound an engine could need: let a spinning one go, so the
     * test fails by its count instead of hanging. */
    if (++f->calls > 100000)
        return 0;
    uint32_t n = f->honest(f->user, done, capacity);
    for (; n < capacity; n++) {
        done[n].ticket = UINT64_MAX - n;
        done[n].status = PKV_OK;
        done[n].reserved0 = 0;
    }
    return capacity;
}

static void test_poll_flood(void **state)
{
    (void)state;
    fs_data data = {0};
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fill(&data, p, prompt, 0);
    store_host b;
    sh_connect(&b, &data);
    flood_of_test.honest = b.store.poll;
    flood_of_test.user = b.store.user;
    flood_of_test.calls = 0;
    b.store.poll = flood_poll;
    sh_start(&b, p);
    add(&b, prompt, 0);
    sh_run(&b);
    pkv_engine_stats s = stats_of(&b);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    /* One op in flight at most here: two polls a step. */
    assert_true(flood_of_test.calls <= 2 * s.steps);
    sh_free(&b);
    free(prompt);
    fs_data_free(&data);
}

/* SHA-256 (libcrypto's, through digest.h) against FIPS 180-4's
 * examples. */
static void test_sha256(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *hex;
    } cases[] = {
        {"",
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc",
         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    EVP_MD *md;
    assert_int_equal(pkv__digest_fetch(&md), PKV_OK);
    for (size_t c = 0; c < 3; c++) {
        pkv__sha256 h;
        uint8_t d[PKV__DIGEST_BYTES];
        char hex[65];
        /* Fed one byte at a time and whole: the same. */
        for (int whole = 0; whole < 2; whole++) {
            pkv__sha256_begin(&h, md);
            size_t n = strlen(cases[c].text);
            if (whole)
                pkv__sha256_add(&h, cases[c].text, n);
            else
                for (size_t i = 0; i < n; i++)
                    pkv__sha256_add(&h, cases[c].text + i, 1);
            assert_int_equal(pkv__sha256_end(&h, d), PKV_OK);
            pkv__digest_hex(d, sizeof d, hex);
            assert_string_equal(hex, cases[c].hex);
        }
    }
    /* One million 'a's. */
    pkv__sha256 h;
    uint8_t d[PKV__DIGEST_BYTES];
    char a[1000];
    memset(a, 'a', sizeof a);
    pkv__sha256_begin(&h, md);
    for (int i = 0; i < 1000; i++)
        pkv__sha256_add(&h, a, sizeof a);
    assert_int_equal(pkv__sha256_end(&h, d), PKV_OK);
    assert_int_equal(d[0], 0xcd);
    assert_int_equal(d[1], 0xc7);
    assert_int_equal(d[31], 0xd0);
    EVP_MD_free(md);
}

/* The names an older pkv gave a prompt's blocks: the digest chain from a
 * root tagged "pkv-store-key-1" (digest.c), hashed here with the same
 * SHA-256. Block j's key into key. */
static void older_key_of(const pkv_engine *e, const int32_t *prompt,
                         uint32_t j, char *key)
{
    static const char tag[16] = "pkv-store-key-1";
    static const uint8_t magic[8] = {0};
    uint8_t words[PKV__AT_FORMAT_FIELDS], salt[8] = {0};
    uint8_t root[PKV__DIGEST_BYTES], d[PKV__DIGEST_BYTES];
    char fingerprint[17];
    pkv__wire_put_header(words, sizeof words, magic, 0, &e->backend_config);
    pkv__sha256 h;
    pkv__sha256_begin(&h, e->store->sha256);
    pkv__sha256_add(&h, tag, sizeof tag);
    pkv__sha256_add(&h, e->store->model, PKV__DIGEST_BYTES);
    pkv__sha256_add(&h, words + PKV__AT_KV_DTYPE,
                    PKV__AT_FORMAT_FIELDS - PKV__AT_KV_DTYPE);
    pkv__sha256_add(&h, salt, sizeof salt);
    assert_int_equal(pkv__sha256_end(&h, root), PKV_OK);
    pkv__digest_hex(root, 8, fingerprint);
    memcpy(d, root, sizeof d);
    for (uint32_t b = 0; b <= j; b++)
        assert_int_equal(pkv__digest_block(e->store->sha256, d,
                                           prompt + (size_t)b * 4, 4, d),
                         PKV_OK);
    snprintf(key, PKV_STORE_KEY_MAX, "pkv1:%s:", fingerprint);
    pkv__digest_hex(d, sizeof d, key + 22);
}

/* Values an older pkv saved (format version 1, its own checksum) are
 * misses: under their older names they are never asked for, nothing is
 * counted; under this pkv's names they fail the checks, counted. */
static void test_older_values(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0}, older = {0};
    fill(&data, p, prompt, 0);
    store_host h;
    sh_init(&h, p, &data);
    for (uint32_t j = 0; j < PROMPT / 4; j++) {
        const fs_entry *x = entry_at(&data, j);
        char key[PKV_STORE_KEY_MAX];
        older_key_of(h.host.engine, prompt, j, key);
        assert_string_not_equal(key, x->key);
        uint8_t *v = malloc(x->size);
        assert_non_null(v);
        memcpy(v, x->value, x->size);
        pkv__put_u32(v + PKV__AT_VERSION, 1);
        fs_put(&older, key, v, x->size);
        free(v);
    }
    sh_free(&h);
    uint32_t rows;
    pkv_engine_stats s = serve(&older, p, prompt, 0, &rows);
    assert_int_equal(rows, PROMPT);
    assert_int_equal(s.store_hit_blocks + s.store_damaged +
                         s.store_mismatched,
                     0);
    /* Block 2 as version 1 under its name (each serve saves the block it
     * computed again): with any other checksum, damaged; with this pkv's,
     * the header differs. */
    for (int ours = 0; ours < 2; ours++) {
        fs_entry *e = entry_at(&data, 2);
        pkv__put_u32(e->value + PKV__AT_VERSION, 1);
        if (ours)
            pkv__put_u64(e->value + 120,
                         pkv__checksum(e->value, e->size, 120));
        expect_bad_block2(&data, p, prompt, !ours);
    }
    fs_data_free(&data);
    fs_data_free(&older);
    free(prompt);
}

/* ------------------------------------------------------------- sealing */

static pkv_engine_params sealed_params(const uint8_t *key)
{
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
    p.seal_key = key;
    return p;
}

/* The key under which an engine of params p stores block j of prompt
 * (salt): the chain of digests, then pkv__store_key. */
static void key_of(pkv_engine_params p, fs_data *data, const int32_t *prompt,
                   uint64_t salt, uint32_t j, char *key)
{
    store_host h;
    sh_init(&h, p, data);
    const pkv_engine *e = h.host.engine;
    const EVP_MD *md = e->store->sha256;
    uint8_t d[PKV__DIGEST_BYTES];
    assert_int_equal(pkv__digest_root(md, e->store->model,
                                      &e->backend_config, &e->kv.groups,
                                      salt, d),
                     PKV_OK);
    for (uint32_t b = 0; b <= j; b++)
        assert_int_equal(
            pkv__digest_block(md, d, prompt + (size_t)b * 4, 4, d), PKV_OK);
    assert_int_equal(pkv__store_key(e->store, d, key), PKV_OK);
    sh_free(&h);
}

/* Whether the 16 bytes of block j's token ids (u32 little-endian) occur
 * in n bytes at v. */
static int holds_tokens(const uint8_t *v, size_t n, const int32_t *prompt,
                        uint32_t j)
{
    uint8_t t[16];
    for (uint32_t i = 0; i < 4; i++)
        pkv__put_u32(t + 4 * i, (uint32_t)prompt[4 * j + i]);
    for (size_t at = 0; at + sizeof t <= n; at++)
        if (memcmp(v + at, t, sizeof t) == 0)
            return 1;
    return 0;
}

/* With a seal key: a second engine with the key loads every block; names
 * are "pkvs:" HMACs, none of them an unsealed name of the same blocks,
 * and no value holds its tokens in the clear (an unsealed one does). */
static void test_sealed_share(void **state)
{
    (void)state;
    pkv_engine_params p = sealed_params(ch_seal_key);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0}, plain = {0};
    fill(&data, p, prompt, 0);
    fill(&plain, params_of(PKV_KV_DTYPE_F16), prompt, 0);
    assert_int_equal(data.count, PROMPT / 4);
    for (size_t i = 0; i < data.count; i++) {
        const fs_entry *x = &data.entries[i];
        assert_memory_equal(x->key, "pkvs:", 5);
        assert_int_equal(strlen(x->key), 86);
        for (size_t k = 0; k < plain.count; k++) {
            assert_string_not_equal(x->key, plain.entries[k].key);
            /* Not even the fingerprint, which names the model. */
            assert_memory_not_equal(x->key + 5, plain.entries[k].key + 5,
                                    16);
        }
        for (uint32_t j = 0; j < PROMPT / 4; j++)
            assert_false(holds_tokens(x->value, x->size, prompt, j));
    }
    char key[PKV_STORE_KEY_MAX];
    key_of(params_of(PKV_KV_DTYPE_F16), &plain, prompt, 0, 2, key);
    assert_true(holds_tokens(fs_get(&plain, key)->value,
                             fs_get(&plain, key)->size, prompt, 2));
    uint32_t rows;
    pkv_engine_stats s = serve(&data, p, prompt, 0, &rows);
    assert_int_equal(rows, 1);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    assert_int_equal(s.store_damaged + s.store_mismatched, 0);
    /* Engines with another key or none ask under other names: misses. */
    const pkv_engine_params others[] = {sealed_params(ch_other_seal_key),
                                        params_of(PKV_KV_DTYPE_F16)};
    for (size_t i = 0; i < 2; i++) {
        s = serve(&data, others[i], prompt, 0, &rows);
        assert_int_equal(rows, PROMPT);
        assert_int_equal(s.store_hit_blocks + s.store_damaged, 0);
    }
    fs_data_free(&data);
    fs_data_free(&plain);
    free(prompt);
}

/* pkv_engine_create with p; its status, the engine destroyed. */
static pkv_status try_create(const pkv_engine_params *p)
{
    pkv_engine *e = NULL;
    pkv_status st = pkv_engine_create(p, &e);
    pkv_engine_destroy(e);
    return st;
}

/* The key's length (seal_key_size): a 16-byte key (an AES-128 habit) in
 * a buffer of its own size is refused without a byte of it read (the
 * sanitizer build would see a read past it), as are other sizes, a size
 * without a key and an all-zero key. 32, or 0 from a host that sets the
 * key alone (or was built before the field), seal alike: an engine with
 * one hits what an engine with the other saved. */
static void test_seal_key_size(void **state)
{
    (void)state;
    pkv_engine_params p = sealed_params(NULL);
    uint8_t *short_key = malloc(16);
    assert_non_null(short_key);
    memcpy(short_key, ch_seal_key, 16);
    p.seal_key = short_key;
    p.seal_key_size = 16;
    assert_int_equal(try_create(&p), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_last_error(), "seal_key_size is 16"));
    free(short_key);
    const uint32_t sizes[] = {1, 31, 33, 64};
    p.seal_key = ch_seal_key;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        p.seal_key_size = sizes[i];
        assert_int_equal(try_create(&p), PKV_ERR_INVALID_ARGUMENT);
    }
    p.seal_key = NULL;
    p.seal_key_size = 32;
    assert_int_equal(try_create(&p), PKV_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(pkv_last_error(), "seal_key is NULL"));
    static const uint8_t zeros[32];
    p.seal_key = zeros;
    for (uint32_t size = 0; size <= 32; size += 32) {
        p.seal_key_size = size;
        assert_int_equal(try_create(&p), PKV_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(pkv_last_error(), "all zeros"));
    }
    /* A host built before the field: its params end at seal_key. */
    p = sealed_params(ch_seal_key);
    p.struct_size = (uint32_t)PKV__END_OF(pkv_engine_params, seal_key);
    assert_int_equal(try_create(&p), PKV_OK);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    fill(&data, sealed_params(ch_seal_key), prompt, 0); /* size 0 */
    p = sealed_params(ch_seal_key);
    p.seal_key_size = 32;
    uint32_t rows;
    pkv_engine_stats s = serve(&data, p, prompt, 0, &rows);
    assert_int_equal(rows, 1);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    fs_data_free(&data);
    free(prompt);
}

/* With a seal key, block 2's value replaced by: itself with a byte
 * flipped (a sample of places: the seal's header and tag, the content,
 * the last byte), truncated, another block's value of the same prompt
 * (moved), another prompt's block 2 after the same two blocks (replayed
 * under this prompt), the same block under another salt, block 2 sealed
 * under another key, block 2 unsealed: each a miss counted damaged,
 * blocks 0 and 1 loaded, block 2 computed (every row checked). */
static void test_sealed_refusals(void **state)
{
    (void)state;
    pkv_engine_params p = sealed_params(ch_seal_key);
    int32_t *prompt = hm_prompt(PROMPT, 7);
    int32_t *other = hm_prompt(PROMPT, 9);
    memcpy(other, prompt, 8 * sizeof *other); /* blocks 0 and 1 shared */
    fs_data data = {0}, foreign = {0}, salted = {0}, keyed = {0},
            plain = {0};
    fill(&data, p, prompt, 0);
    fill(&foreign, p, other, 0);
    fill(&salted, p, prompt, 1);
    fill(&keyed, sealed_params(ch_other_seal_key), prompt, 0);
    fill(&plain, params_of(PKV_KV_DTYPE_F16), prompt, 0);
    char key[PKV_STORE_KEY_MAX], k3[PKV_STORE_KEY_MAX],
        kf[PKV_STORE_KEY_MAX], ks[PKV_STORE_KEY_MAX], ko[PKV_STORE_KEY_MAX],
        kp[PKV_STORE_KEY_MAX];
    key_of(p, &data, prompt, 0, 2, key);
    key_of(p, &data, prompt, 0, 3, k3);
    key_of(p, &data, other, 0, 2, kf);
    key_of(p, &data, prompt, 1, 2, ks);
    key_of(sealed_params(ch_other_seal_key), &data, prompt, 0, 2, ko);
    key_of(params_of(PKV_KV_DTYPE_F16), &data, prompt, 0, 2, kp);
    size_t size = fs_get(&data, key)->size;
    uint8_t *whole = malloc(size);
    assert_non_null(whole);
    memcpy(whole, fs_get(&data, key)->value, size);

    const size_t flips[] = {0, 9, 20, 30, 40, 50, 63, 64, 100, 200,
                            size / 2, size - 1};
    for (size_t f = 0; f < sizeof flips / sizeof flips[0]; f++) {
        whole[flips[f]] ^= 0x10;
        fs_put(&data, key, whole, size);
        whole[flips[f]] ^= 0x10;
        expect_bad_block2(&data, p, prompt, 1);
    }
    fs_put(&data, key, whole, size - 1);
    expect_bad_block2(&data, p, prompt, 1);
    const fs_entry *imposters[] = {fs_get(&data, k3), fs_get(&foreign, kf),
                                   fs_get(&salted, ks), fs_get(&keyed, ko),
                                   fs_get(&plain, kp)};
    for (size_t i = 0; i < sizeof imposters / sizeof imposters[0]; i++) {
        assert_non_null(imposters[i]);
        put_entry(&data, key, imposters[i]);
        expect_bad_block2(&data, p, prompt, 1);
    }
    fs_put(&data, key, whole, size);
    uint32_t rows;
    serve(&data, p, prompt, 0, &rows);
    assert_int_equal(rows, 1); /* whole again */
    free(whole);
    fs_data_free(&data);
    fs_data_free(&foreign);
    fs_data_free(&salted);
    fs_data_free(&keyed);
    fs_data_free(&plain);
    free(prompt);
    free(other);
}

/* A saved chain's head is written last, so a store that evicts the least
 * recently written evicts it from its end: prompts in one step and in
 * chunks of 8 tokens over six steps (blocks registered in five of them),
 * each block written before its parent. */
static void test_save_order(void **state)
{
    (void)state;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    const uint32_t chunks[] = {0, 8};
    for (size_t c = 0; c < 2; c++) {
        pkv_engine_params p = params_of(PKV_KV_DTYPE_F16);
        p.long_prefill_threshold = chunks[c];
        fs_data data = {0};
        fill(&data, p, prompt, 0);
        uint64_t later = UINT64_MAX;
        for (uint32_t j = 0; j < PROMPT / 4; j++) {
            char key[PKV_STORE_KEY_MAX];
            key_of(p, &data, prompt, 0, j, key);
            const fs_entry *x = fs_get(&data, key);
            assert_non_null(x);
            assert_true(x->written < later);
            later = x->written;
        }
        fs_data_free(&data);
    }
    free(prompt);
}

/* A prompt whose chain links to another sequence's blocks (registered
 * first in the same step), which are evicted and reused before the
 * prompt's last chunk: its blocks, saved at that chunk, carry its own KV,
 * not what the reused blocks hold now. A (the prompt's first 9 tokens)
 * and B (all of it) prefill 8 tokens a step side by side in a pool of
 * B's 11 blocks, so that B takes A's cached blocks once A ends; then C
 * loads B's blocks (every row checked against dense attention). */
static void test_save_after_eviction(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_KV_DTYPE_F32);
    p.long_prefill_threshold = 8;
    p.num_blocks = 12;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    fs_data data = {0};
    store_host a;
    sh_init(&a, p, &data);
    ch_add_salted(&a.host, prompt, 9, 1, 0);
    ch_add_salted(&a.host, prompt, PROMPT, 1, 0);
    sh_run(&a);
    pkv_engine_stats s = stats_of(&a);
    assert_int_equal(s.prefix_hit_tokens, 0); /* B linked, not hit */
    sh_free(&a);
    uint32_t rows;
    p.num_blocks = 256;
    s = serve(&data, p, prompt, 0, &rows);
    assert_int_equal(rows, 1);
    assert_int_equal(s.store_hit_blocks, PROMPT / 4);
    fs_data_free(&data);
    free(prompt);
}

/* HMAC-SHA-256 (libcrypto's, through seal.h) against RFC 4231's test
 * cases 1 to 3 and 6 (a key longer than SHA-256's block), each message
 * hashed twice under one keyed context. */
static void test_hmac(void **state)
{
    (void)state;
    uint8_t k1[20], k3[20], d3[50], k6[131], out[32];
    memset(k1, 0x0b, sizeof k1);
    memset(k3, 0xaa, sizeof k3);
    memset(d3, 0xdd, sizeof d3);
    memset(k6, 0xaa, sizeof k6);
    static const char d6[] =
        "Test Using Larger Than Block-Size Key - Hash Key First";
    const struct {
        const uint8_t *key;
        size_t key_n;
        const uint8_t *data;
        size_t n;
        const char *hex;
    } cases[] = {
        {k1, 20, (const uint8_t *)"Hi There", 8,
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {(const uint8_t *)"Jefe", 4,
         (const uint8_t *)"what do ya want for nothing?", 28,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {k3, 20, d3, 50,
         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k6, 131, (const uint8_t *)d6, sizeof d6 - 1,
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
    };
    for (size_t c = 0; c < 4; c++) {
        EVP_MAC_CTX *mac;
        assert_int_equal(pkv__hmac_key(cases[c].key, cases[c].key_n, &mac),
                         PKV_OK);
        for (int again = 0; again < 2; again++) {
            char hex[65];
            memset(out, 0, sizeof out);
            assert_int_equal(
                pkv__hmac_sha256(mac, cases[c].data, cases[c].n, out),
                PKV_OK);
            pkv__digest_hex(out, sizeof out, hex);
            assert_string_equal(hex, cases[c].hex);
        }
        EVP_MAC_CTX_free(mac);
    }
}

/* libcrypto's allocations (CRYPTO_set_mem_functions, in main: before its
 * first), counted, the fail_at-th failed (0: none). */
static struct {
    long count, fail_at;
    int attached; /* the connector's attaches less its detaches */
} CM;

static void *crypto_malloc(size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    return ++CM.count == CM.fail_at ? NULL : malloc(n);
}

static void *crypto_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    return ++CM.count == CM.fail_at ? NULL : realloc(p, n);
}

static void crypto_free(void *p, const char *file, int line)
{
    (void)file;
    (void)line;
    free(p);
}

static void count_attach(void *user)
{
    (void)user;
    CM.attached++;
}

static void count_detach(void *user)
{
    (void)user;
    CM.attached--;
}

/* Each of libcrypto's allocations failed in turn (digests, names, the
 * seal), without and with a key: a create fails cleanly
 * (PKV_ERR_OUT_OF_MEMORY, the connector never left attached); a prompt
 * over a store holding all its blocks gets every row right (checked),
 * whatever loads or saves the failure cost, and without a key no value
 * is counted damaged or mismatched for it. */
static void test_crypto_failures(void **state)
{
    (void)state;
    int32_t *prompt = hm_prompt(PROMPT, 7);
    for (int sealed = 0; sealed < 2; sealed++) {
        pkv_engine_params p = sealed ? sealed_params(ch_seal_key)
                                     : params_of(PKV_KV_DTYPE_F16);
        fs_data data = {0};
        fill(&data, p, prompt, 0);
        long n = 1, refused = 0;
        for (;; n++) {
            store_host h;
            sh_connect(&h, &data);
            h.store.attach = count_attach;
            h.store.detach = count_detach;
            p.store = &h.store;
            pkv_engine *e = NULL;
            CM.count = 0;
            CM.fail_at = n;
            pkv_status st = pkv_engine_create(&p, &e);
            CM.fail_at = 0;
            pkv_engine_destroy(e);
            fs_free(&h.fs);
            assert_int_equal(CM.attached, 0);
            if (CM.count < n) { /* nothing failed */
                assert_int_equal(st, PKV_OK);
                break;
            }
            /* libcrypto absorbs some failures of its own. */
            if (st != PKV_OK) {
                assert_int_equal(st, PKV_ERR_OUT_OF_MEMORY);
                assert_null(e);
                refused++;
            }
        }
        assert_true(refused > 0);
        for (n = 1;; n++) {
            store_host h;
            sh_init(&h, p, &data);
            CM.count = 0;
            CM.fail_at = n;
            add(&h, prompt, 0);
            sh_run(&h);
            CM.fail_at = 0;
            pkv_engine_stats s = stats_of(&h);
            sh_free(&h);
            assert_int_equal(s.store_mismatched, 0);
            if (!sealed)
                assert_int_equal(s.store_damaged, 0);
            if (CM.count < n) {
                assert_int_equal(s.store_hit_blocks, PROMPT / 4);
                break;
            }
        }
        assert_true(n > 1);
        fs_data_free(&data);
    }
    free(prompt);
}

int main(void)
{
    /* Before libcrypto allocates anything (test_crypto_failures). */
    if (CRYPTO_set_mem_functions(crypto_malloc, crypto_realloc,
                                 crypto_free) != 1)
        return 1;
#ifdef PKV_HAVE_OPENCL
    int skip = ch_opencl_start();
    if (skip)
        return skip;
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_hybrid_memory),
        cmocka_unit_test(test_local_first),
        cmocka_unit_test(test_damaged_values),
        cmocka_unit_test(test_other_blocks),
        cmocka_unit_test(test_models_apart),
        cmocka_unit_test(test_evicted),
        cmocka_unit_test(test_connector_faults),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_load_budget),
        cmocka_unit_test(test_store_faults),
        cmocka_unit_test(test_bad_store),
        cmocka_unit_test(test_poll_flood),
        cmocka_unit_test(test_forged_non_finite),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_older_values),
        cmocka_unit_test(test_hmac),
        cmocka_unit_test(test_sealed_share),
        cmocka_unit_test(test_seal_key_size),
        cmocka_unit_test(test_sealed_refusals),
        cmocka_unit_test(test_crypto_failures),
        cmocka_unit_test(test_save_order),
        cmocka_unit_test(test_save_after_eviction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
