/* SPDX-License-Identifier: MIT */
/*
 * pkv_engine_save_prefix_cache and pkv_engine_load_prefix_cache. Prompts
 * run to their end on one engine; its prefix cache is saved and loaded
 * into a new engine (the restart), whose first requests for the same
 * prompts must hit (only their last token computed) with every output row
 * checked against dense attention under ch_step, while a prompt with
 * another salt must not. A pool too small loads a parents-first part;
 * bad input changes nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kv_layout.h"
#include "engine.h"
#include "check_host_cmocka.h"
#include "forge.h"
#include "hash_model.h"
#include "seal.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

enum { PROMPT = 21 }; /* 5 full blocks of 4 before the last token */

static pkv_seq_id add_salted(ch_host *h, const int32_t *prompt, uint64_t salt)
{
    return ch_add_salted(h, prompt, PROMPT, 3, salt);
}

/* The saved prefix cache of a host whose prompts (salts 0 and 1) ran to
 * their end (malloc'd). */
/* The engine's prefix cache, saved (malloc'd, *size bytes). */
static uint8_t *save(pkv_engine *e, size_t *size)
{
    size_t need = 0, got = 0;
    assert_int_equal(pkv_engine_save_prefix_cache(e, NULL, 0, &need), PKV_OK);
    uint8_t *data = malloc(need);
    assert_non_null(data);
    assert_int_equal(pkv_engine_save_prefix_cache(e, data, need, &got),
                     PKV_OK);
    assert_int_equal(got, need);
    *size = need;
    return data;
}

/* The saved prefix cache of a host whose prompts (salts 0 and 1) ran to
 * their end (malloc'd); with `again`, saved a second time there. */
static uint8_t *saved_twice(const pkv_engine_params *p, const int32_t *prompt,
                            size_t *size, uint8_t **again)
{
    ch_host a;
    ch_cmocka_init(&a, p, hm_tolerance(p->kv_dtype));
    add_salted(&a, prompt, 0);
    add_salted(&a, prompt, 1);
    ch_run(&a, 100);
    uint8_t *data = save(a.engine, size);
    if (again != NULL) {
        size_t again_size;
        *again = save(a.engine, &again_size);
        assert_int_equal(again_size, *size);
    }
    ch_check_idle(&a);
    ch_free(&a);
    return data;
}

static uint8_t *saved_cache(const pkv_engine_params *p, const int32_t *prompt,
                            size_t *size)
{
    return saved_twice(p, prompt, size, NULL);
}

/* Saved from pa, loaded into a new engine pb: the same prompt hits with
 * salts 0 and 1 and misses with salt 2. */
static void reload_once(const pkv_engine_params *pa,
                        const pkv_engine_params *pb)
{
    int32_t *prompt = hm_prompt(PROMPT, 11);
    size_t size;
    uint8_t *data = saved_cache(pa, prompt, &size);
    ch_host b;
    ch_cmocka_init(&b, pb, hm_tolerance(pb->kv_dtype));
    uint32_t loaded = 0;
    assert_int_equal(
        pkv_engine_load_prefix_cache(b.engine, data, size, &loaded), PKV_OK);
    /* Every saved block: the header's count. */
    uint32_t saved = (uint32_t)data[44] | (uint32_t)data[45] << 8 |
                     (uint32_t)data[46] << 16 | (uint32_t)data[47] << 24;
    assert_true(saved >= 10); /* 5 prompt blocks for each salt */
    assert_int_equal(loaded, saved);
    assert_int_equal(
        pkv_engine_load_prefix_cache(b.engine, data, size, &loaded), PKV_OK);
    assert_int_equal(loaded, 0); /* all cached already */
    pkv_seq_id hit0 = add_salted(&b, prompt, 0);
    pkv_seq_id hit1 = add_salted(&b, prompt, 1);
    pkv_seq_id miss = add_salted(&b, prompt, 2);
    const pkv_batch *batch;
    ch_step(&b, &batch);
    assert_int_equal(ch_rows_of(batch, hit0), 1);
    assert_int_equal(ch_rows_of(batch, hit1), 1);
    assert_int_equal(ch_rows_of(batch, miss), PROMPT);
    ch_run(&b, 100);
    ch_check_idle(&b);
    ch_free(&b);
    free(data);
    free(prompt);
}

static pkv_engine_params params_of(int32_t backend, int32_t dtype)
{
    pkv_engine_params p = hm_params(backend);
    p.kv_dtype = dtype;
    return p;
}

#ifndef PKV_HAVE_OPENCL
static void test_reload(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, dtypes[d]);
        reload_once(&p, &p);
    }
}

/* A pool with 3 free blocks loads 3, parents first: the prompt then hits
 * its first blocks. Blocks the engine holds are not taken. */
static void test_small_pool(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F32);
    int32_t *prompt = hm_prompt(PROMPT, 12);
    size_t size;
    uint8_t *data = saved_cache(&p, prompt, &size);
    p.num_blocks = 10; /* 9 usable; the running prompt holds 6 */
    p.watermark = 0;
    ch_host b;
    ch_cmocka_init(&b, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    int32_t *other = hm_prompt(PROMPT, 13);
    ch_add_prompt(&b, other, PROMPT, 3, 0, 0);
    ch_step(&b, NULL);
    uint32_t loaded = 0;
    assert_int_equal(
        pkv_engine_load_prefix_cache(b.engine, data, size, &loaded), PKV_OK);
    assert_int_equal(loaded, 3);
    ch_run(&b, 100);
    pkv_seq_id id = add_salted(&b, prompt, 0);
    const pkv_batch *batch;
    ch_step(&b, &batch);
    uint32_t rows = ch_rows_of(batch, id);
    if (rows == PROMPT || rows == 1)
        fail_msg("%u rows: expected a hit of 1 to 4 blocks", (unsigned)rows);
    ch_run(&b, 100);
    ch_check_idle(&b);
    ch_free(&b);
    free(data);
    free(prompt);
    free(other);
}

static pkv_status try_load(pkv_engine *e, const uint8_t *data, size_t n)
{
    uint32_t loaded = 7;
    pkv_status st = pkv_engine_load_prefix_cache(e, data, n, &loaded);
    assert_int_equal(loaded, 0);
    return st;
}

static void test_bad_input(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F32);
    int32_t *prompt = hm_prompt(PROMPT, 14);
    size_t size;
    uint8_t *data = saved_cache(&p, prompt, &size);
    ch_host b;
    ch_cmocka_init(&b, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    pkv_engine_stats before, after;
    before.struct_size = after.struct_size = sizeof before;
    assert_int_equal(pkv_engine_get_stats(b.engine, &before), PKV_OK);

    size_t got = 0;
    assert_int_equal(pkv_engine_save_prefix_cache(b.engine, NULL, 0, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    uint8_t small[8];
    assert_int_equal(pkv_engine_save_prefix_cache(b.engine, small, 8, &got),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(got, 64); /* an empty cache: the header */
    assert_int_equal(try_load(b.engine, NULL, size), PKV_ERR_INVALID_ARGUMENT);
    uint8_t *copy = malloc(size + 1);
    assert_non_null(copy);
    for (size_t n = 0; n < size; n++)
        assert_int_equal(try_load(b.engine, data, n),
                         PKV_ERR_INVALID_ARGUMENT);
    memcpy(copy, data, size);
    copy[size] = 0;
    assert_int_equal(try_load(b.engine, copy, size + 1),
                     PKV_ERR_INVALID_ARGUMENT);
    for (size_t i = 0; i < size; i++) {
        copy[i] ^= 0x04;
        pkv_status st = try_load(b.engine, copy, size);
        if (st != PKV_ERR_INVALID_ARGUMENT && st != PKV_ERR_UNSUPPORTED)
            fail_msg("byte %zu flipped: status %d", i, (int)st);
        copy[i] ^= 0x04;
    }
    /* A version from the future; an older pkv's 1 and 2 (their checksum
     * another), refused as such. */
    const uint8_t versions[] = {5, 1, 2};
    for (size_t i = 0; i < sizeof versions; i++) {
        copy[8] = versions[i];
        assert_int_equal(try_load(b.engine, copy, size),
                         PKV_ERR_UNSUPPORTED);
        assert_int_equal(strstr(pkv_engine_last_error(b.engine),
                                "made by an older pkv") != NULL,
                         versions[i] < 3);
    }
    free(copy);
    assert_int_equal(pkv_engine_get_stats(b.engine, &after), PKV_OK);
    assert_int_equal(after.blocks_cached_free, before.blocks_cached_free);
    assert_int_equal(after.blocks_free, before.blocks_free);

    /* Another block size or dtype. */
    pkv_engine_params other[2] = {p, p};
    other[0].block_size = 8;
    other[1].kv_dtype = PKV_KV_DTYPE_F16;
    for (int i = 0; i < 2; i++) {
        ch_host c;
        ch_cmocka_init(&c, &other[i], 1e-4f);
        assert_int_equal(try_load(c.engine, data, size), PKV_ERR_UNSUPPORTED);
        ch_free(&c);
    }
    /* During a step. */
    const pkv_batch *batch;
    assert_int_equal(pkv_engine_step_begin(b.engine, &batch), PKV_OK);
    assert_int_equal(try_load(b.engine, data, size), PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_engine_save_prefix_cache(b.engine, NULL, 0, &got),
                     PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_engine_step_end(b.engine, NULL, NULL, 0), PKV_OK);
    ch_check_idle(&b);
    ch_free(&b);
    free(data);
    free(prompt);
}

/* forge.h's load: a prefix cache's. */
static pkv_status forge_load(pkv_engine *e, const uint8_t *data, size_t n)
{
    return try_load(e, data, n);
}

/* With a seal key: saved sealed (no token in the clear) and loaded into
 * a new engine with the key, whose prompt then hits. Refused with
 * PKV_ERR_INVALID_ARGUMENT, nothing loaded (forge.h): every byte flipped,
 * every cut, extensions, another seal's salt, nonce, tag, header or
 * content, the file twice, the file under another key, a sealed export
 * given as a prefix cache, an unsealed file (and one forged with its
 * checksum recomputed); refused with PKV_ERR_UNSUPPORTED by an engine
 * without a key. */
static void test_sealed(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F32);
    pkv_engine_params other = p, plain = p;
    p.seal_key = ch_seal_key;
    other.seal_key = ch_other_seal_key;
    int32_t *prompt = hm_prompt(PROMPT, 15);
    size_t size, plain_size, other_size, export_size;
    uint8_t *again;
    uint8_t *data = saved_twice(&p, prompt, &size, &again);
    uint8_t *unsealed = saved_cache(&plain, prompt, &plain_size);
    uint8_t *other_data = saved_cache(&other, prompt, &other_size);
    uint8_t *exported = forge_export_of(&p, prompt, PROMPT, &export_size);
    assert_int_equal(size, plain_size + PKV__SEAL_HEADER_BYTES);
    assert_memory_equal(data, "PKVSEAL\n", 8);
    uint8_t tokens[16];
    for (uint32_t i = 0; i < 4; i++)
        pkv__put_u32(tokens + 4 * i, (uint32_t)prompt[i]);
    for (size_t at = 0; at + sizeof tokens <= size; at++)
        assert_memory_not_equal(data + at, tokens, sizeof tokens);
    ch_host b, d;
    ch_cmocka_init(&b, &p, hm_tolerance(p.kv_dtype));
    ch_cmocka_init(&d, &plain, hm_tolerance(p.kv_dtype));
const forge_set f = {data, size, again, other_data, other_size,
                         exported, export_size, unsealed, plain_size};
    forge_refused(&f, forge_load, b.engine, "prefix cache");
    unsealed[plain_size - 1] ^= 0x40; /* forged KV, checksum recomputed */
    pkv__put_u64(unsealed + 56, pkv__checksum(unsealed, plain_size, 56));
    assert_int_equal(try_load(b.engine, unsealed, plain_size),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(try_load(d.engine, data, size), PKV_ERR_UNSUPPORTED);
    /* The file itself loads, and the prompt hits. */
    uint32_t loaded = 0;
    assert_int_equal(pkv_engine_load_prefix_cache(b.engine, data, size,
                                                  &loaded),
                     PKV_OK);
    assert_true(loaded >= 10);
    pkv_seq_id hit = add_salted(&b, prompt, 0);
    const pkv_batch *batch;
    ch_step(&b, &batch);
    assert_int_equal(ch_rows_of(batch, hit), 1);
    ch_run(&b, 100);
    ch_check_idle(&b);
    ch_free(&b);
    ch_free(&d);
    free(data);
    free(again);
    free(unsealed);
    free(other_data);
    free(exported);
    free(prompt);
}

#else
/* Saved on one backend, loaded on the other. */
static void test_reload_across_backends(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        pkv_engine_params cpu = params_of(PKV_BACKEND_KIND_CPU, dtypes[d]);
        pkv_engine_params ocl = params_of(PKV_BACKEND_KIND_OPENCL, dtypes[d]);
        reload_once(&cpu, &ocl);
        reload_once(&ocl, &cpu);
    }
}
#endif

/* Built twice: test_prefix_file (CPU) and test_prefix_file_opencl
 * (labelled opencl). */
int main(void)
{
#ifdef PKV_HAVE_OPENCL
    int start = ch_opencl_start();
    if (start != 0)
        return start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload_across_backends),
    };
#else
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reload),
        cmocka_unit_test(test_small_pool),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_sealed),
    };
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
