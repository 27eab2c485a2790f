/* SPDX-License-Identifier: MIT */
/*
 * pkv_seq_export and pkv_seq_import. A sequence runs on one engine, moves
 * to another (other block size, other backend) and finishes there, while
 * the original goes on where it was: under ch_step every output row of
 * both is checked against dense attention over the sequence's tokens, so
 * KV lost or garbled on the way fails the test, and both must sample the
 * same tokens. The moved sequence's first step computes only the rows
 * the export had no KV for (nothing is recomputed); U8 blocks arrive with
 * their stored bytes. Bad input (every truncation, every flipped byte,
 * another version or geometry) is refused and changes nothing.
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
#include "forge.h"
#include "hash_model.h"
#include "seal.h"
#include "wire.h"

#include <stdlib.h>
#include <string.h>

enum { PROMPT = 13, HEADER = 80 };

/* The export of sequence id (malloc'd), its size in *size. */
static uint8_t *export_seq(ch_host *h, pkv_seq_id id, size_t *size)
{
    size_t need = 0, got = 0;
    assert_int_equal(pkv_seq_export(h->engine, id, NULL, 0, &need), PKV_OK);
    assert_true(need > HEADER);
    uint8_t *data = malloc(need);
    assert_non_null(data);
    assert_int_equal(pkv_seq_export(h->engine, id, data, need, &got),
                     PKV_OK);
    assert_int_equal(got, need);
    *size = need;
    return data;
}

/* Import into h a sequence whose history is from's; returns its id. */
static pkv_seq_id import_seq(ch_host *h, const ch_seq *from,
                             const uint8_t *data, size_t size)
{
    pkv_seq_id id = 0;
    pkv_status st = pkv_seq_import(h->engine, NULL, data, size, &id);
    if (st != PKV_OK)
        fail_msg("import: %s", pkv_engine_last_error(h->engine));
    ch_record_import(h, id, from);
    return id;
}

/* Both ran to their end with the same tokens. */
static void assert_same_run(ch_host *a, pkv_seq_id ia, ch_host *b,
                            pkv_seq_id ib)
{
    const ch_seq *x = ch_find(a, ia), *y = ch_find(b, ib);
    assert_true(x->ended && y->ended);
    assert_int_equal(x->reason, PKV_FINISH_REASON_LENGTH);
    assert_int_equal(y->reason, PKV_FINISH_REASON_LENGTH);
    assert_int_equal(x->num_tokens, y->num_tokens);
    assert_memory_equal(x->tokens, y->tokens,
                        x->num_tokens * sizeof *x->tokens);
}

/* Run both engines to the end, check that the original and the moved
 * sequence sampled the same tokens and that both engines are idle, and
 * free both hosts. */
static void finish_both(ch_host *a, pkv_seq_id ia, ch_host *b,
                        pkv_seq_id ib)
{
    ch_run(a, 200);
    ch_run(b, 200);
    assert_same_run(a, ia, b, ib);
    ch_check_idle(a);
    ch_check_idle(b);
    ch_free(a);
    ch_free(b);
}

/* The block bytes of a U8 export: its first `blocks` blocks. */
static const uint8_t *u8_blocks(const uint8_t *data)
{
    uint32_t tokens = (uint32_t)data[44] | (uint32_t)data[45] << 8 |
                      (uint32_t)data[46] << 16 | (uint32_t)data[47] << 24;
    return data + HEADER + (size_t)tokens * 4;
}

/* A sequence runs on a (steps steps after its first), moves to b, and
 * both run to the end. A neighbour on a keeps the step a real batch. */
static void move_once(const pkv_engine_params *pa,
                      const pkv_engine_params *pb, uint32_t steps)
{
    ch_host a, b;
    ch_cmocka_init(&a, pa, hm_tolerance(pa->kv_dtype));
    ch_cmocka_init(&b, pb, hm_tolerance(pb->kv_dtype));
    int32_t *prompt = hm_prompt(PROMPT, 7), *other = hm_prompt(9, 8);
    ch_add_prompt(&a, other, 9, 6, 0, 0);
    pkv_seq_id id = ch_add_prompt(&a, prompt, PROMPT, 20, 0, 0);
    for (uint32_t i = 0; i <= steps; i++)
        ch_step(&a, NULL);
    const pkv__seq *s = pkv__seqs_find(&a.engine->seqs, id);
    assert_non_null(s);
    uint32_t computed = s->num_computed, tokens = s->num_tokens;
    size_t size;
    uint8_t *data = export_seq(&a, id, &size);
    pkv_seq_id moved = import_seq(&b, ch_find(&a, id), data, size);

    const pkv_batch *batch;
    ch_step(&b, &batch);
    uint32_t rows = ch_rows_of(batch, moved), want = tokens - computed;
    /* U8: a step that fills a staged block stops at its end (sched.c). */
    uint32_t bs = pb->block_size;
    if (PKV_LAYOUT_QUANTIZED(pb->kv_dtype) && computed % bs != 0 &&
        want > bs - computed % bs)
        want = bs - computed % bs;
    if (rows != want)
        fail_msg("dtype %d, blocks %u -> %u, backends %d -> %d: %u rows "
                 "after the import, expected %u",
                 (int)pa->kv_dtype, (unsigned)pa->block_size,
                 (unsigned)pb->block_size, (int)pa->backend,
                 (int)pb->backend, (unsigned)rows, (unsigned)want);
    if (PKV_LAYOUT_QUANTIZED(pa->kv_dtype)) {
        /* The frozen blocks arrived as stored: export again and compare. */
        size_t size2;
        uint8_t *again = export_seq(&b, moved, &size2);
        size_t frozen = computed / pa->block_size *
                        pkv__backend_swap_block_bytes(&b.engine->
                                                      backend_config);
        assert_memory_equal(u8_blocks(data), u8_blocks(again), frozen);
        free(again);
    }
    finish_both(&a, id, &b, moved);
    free(data);
    free(prompt);
    free(other);
}

static pkv_engine_params params_of(int32_t backend, int32_t dtype,
                                   uint32_t block_size)
{
    pkv_engine_params p = hm_params(backend);
    p.kv_dtype = dtype;
    p.block_size = block_size;
    return p;
}

#ifndef PKV_HAVE_OPENCL
/* CPU to CPU: every dtype, mid-prompt (a chunked prefill) and decoding,
 * the same block size and, for f32 and f16, another one. */
static void test_move_cpu(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    const uint32_t steps[] = {0, 1, 6, 7};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t s = 0; s < 4; s++) {
            pkv_engine_params pa =
                params_of(PKV_BACKEND_KIND_CPU, dtypes[d], 4);
            pa.long_prefill_threshold = 5; /* the prompt in 3 steps */
            pkv_engine_params pb = pa;
            pb.long_prefill_threshold = 0;
            move_once(&pa, &pb, steps[s]);
            if (!PKV_LAYOUT_QUANTIZED(dtypes[d])) {
                pb.block_size = 16;
                move_once(&pa, &pb, steps[s]);
                pa.block_size = 8;
                pb.block_size = 4;
                move_once(&pa, &pb, steps[s]);
            }
        }
}

#else
/* CPU to OpenCL and back: the export holds the KV as stored, whatever
 * backend stored it. */
static void test_move_across_backends(void **state)
{
    (void)state;
    const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                              PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                              PKV_KV_DTYPE_U8K_U4V};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        pkv_engine_params cpu = params_of(PKV_BACKEND_KIND_CPU, dtypes[d], 4);
        pkv_engine_params ocl =
            params_of(PKV_BACKEND_KIND_OPENCL, dtypes[d], 4);
        move_once(&cpu, &ocl, 1);
        move_once(&ocl, &cpu, 6);
        if (!PKV_LAYOUT_QUANTIZED(dtypes[d])) {
            ocl.block_size = 16;
            move_once(&cpu, &ocl, 6);
        }
    }
}
#endif

#ifndef PKV_HAVE_OPENCL
/* A swapped-out sequence exports its host copy; a waiting one (no KV
 * yet) exports its tokens and is computed on arrival. */
static void test_move_swapped_and_waiting(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    p.num_blocks = 17; /* 16 usable blocks of 4 tokens */
    p.watermark = 0;
    p.preempt_mode = PKV_PREEMPT_MODE_SWAP;
    p.swap_bytes = 1 << 20;
    p.max_num_seqs = 3;
    ch_host a, b;
    ch_cmocka_init(&a, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    pkv_engine_params pb = hm_params(PKV_BACKEND_KIND_CPU);
    ch_cmocka_init(&b, &pb, hm_tolerance(PKV_KV_DTYPE_F32));
    pkv_seq_id ids[5];
    for (uint32_t i = 0; i < 5; i++) {
        int32_t *prompt = hm_prompt(PROMPT, 20 + i);
        ids[i] = ch_add_prompt(&a, prompt, PROMPT, 12, 0, 0);
        free(prompt);
    }
    ch_step(&a, NULL);
    pkv__seq *waiting = pkv__seqs_find(&a.engine->seqs, ids[4]);
    assert_non_null(waiting);
    assert_int_equal(waiting->state, PKV__SEQ_WAITING);
    assert_int_equal(waiting->num_computed, 0);
    size_t size;
    uint8_t *data = export_seq(&a, ids[4], &size);
    assert_int_equal(size, HEADER + 4 * PROMPT);
    pkv_seq_id moved_waiting = import_seq(&b, ch_find(&a, ids[4]), data,
                                          size);
    free(data);

    pkv__seq *swapped = NULL;
    for (int step = 0; step < 100 && swapped == NULL; step++) {
        ch_step(&a, NULL);
        for (uint32_t i = 0; i < 5 && swapped == NULL; i++) {
            pkv__seq *s = pkv__seqs_find(&a.engine->seqs, ids[i]);
            if (s != NULL && s->state == PKV__SEQ_SWAPPED &&
                s->num_tokens > PROMPT + 1)
                swapped = s;
        }
    }
    assert_non_null(swapped);
    pkv_seq_id id = swapped->id;
    data = export_seq(&a, id, &size);
    pkv_seq_id moved = import_seq(&b, ch_find(&a, id), data, size);
    free(data);
    ch_run(&a, 300);
    ch_run(&b, 300);
    assert_same_run(&a, id, &b, moved);
    assert_same_run(&a, ids[4], &b, moved_waiting);
    ch_check_idle(&a);
    ch_check_idle(&b);
    ch_free(&a);
    ch_free(&b);
}

static pkv_status try_import(pkv_engine *e, const uint8_t *data, size_t n)
{
    pkv_seq_id id = 99;
    pkv_status st = pkv_seq_import(e, NULL, data, n, &id);
    if (st != PKV_OK)
        assert_int_equal(id, 0);
    return st;
}

/* Bad input gives a clear status and changes nothing. */
static void test_bad_input(void **state)
{
    (void)state;
    pkv_engine_params p = hm_params(PKV_BACKEND_KIND_CPU);
    ch_host a, b;
    ch_cmocka_init(&a, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    ch_cmocka_init(&b, &p, hm_tolerance(PKV_KV_DTYPE_F32));
    int32_t *prompt = hm_prompt(PROMPT, 5);
    pkv_seq_id id = ch_add_prompt(&a, prompt, PROMPT, 8, 0, 0);
    /* Not seen by a step yet. */
    size_t size = 1;
    assert_int_equal(pkv_seq_export(a.engine, id, NULL, 0, &size),
                     PKV_ERR_BAD_STATE);
    assert_int_equal(size, 0);
    for (int i = 0; i < 3; i++)
        ch_step(&a, NULL);
    uint8_t *data = export_seq(&a, id, &size);

    /* Arguments. */
    size_t got = 0;
    assert_int_equal(pkv_seq_export(a.engine, id, data, size - 1, &got),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(got, size);
    assert_int_equal(pkv_seq_export(a.engine, id, NULL, 0, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv_seq_export(a.engine, 12345, NULL, 0, &got),
                     PKV_ERR_NOT_FOUND);
    pkv_seq_id out = 7;
    assert_int_equal(pkv_seq_import(b.engine, NULL, NULL, size, &out),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(out, 0);
    assert_int_equal(pkv_seq_import(b.engine, NULL, data, size, NULL),
                     PKV_ERR_INVALID_ARGUMENT);
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = PROMPT;
    assert_int_equal(pkv_seq_import(b.engine, &sp, data, size, &out),
                     PKV_ERR_INVALID_ARGUMENT);

    /* Every truncation, one byte more, every flipped byte. */
    uint8_t *copy = malloc(size + 1);
    assert_non_null(copy);
    for (size_t n = 0; n < size; n++)
        assert_int_equal(try_import(b.engine, data, n),
                         PKV_ERR_INVALID_ARGUMENT);
    memcpy(copy, data, size);
    copy[size] = 0;
    assert_int_equal(try_import(b.engine, copy, size + 1),
                     PKV_ERR_INVALID_ARGUMENT);
    for (size_t i = 0; i < size; i++) {
        copy[i] ^= 0x10;
        pkv_status st = try_import(b.engine, copy, size);
        if (st != PKV_ERR_INVALID_ARGUMENT && st != PKV_ERR_UNSUPPORTED)
            fail_msg("byte %zu flipped: status %d", i, (int)st);
        copy[i] ^= 0x10;
    }
    /* A block size or groups that no pkv layout has, checksummed: the
     * header's own checks refuse them. */
    const uint32_t bad[][2] = {{PKV__AT_BLOCK_SIZE, 0},
                               {PKV__AT_BLOCK_SIZE, 3},
                               {PKV__AT_BLOCK_SIZE, 512},
                               {PKV__AT_KEY_QUANT, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memcpy(copy, data, size);
        pkv__put_u32(copy + bad[i][0], bad[i][1]);
        pkv__put_u64(copy + 72, pkv__checksum(copy, size, 72));
        assert_int_equal(try_import(b.engine, copy, size),
                         PKV_ERR_INVALID_ARGUMENT);
    }
    memcpy(copy, data, size);
    /* A version from the future; an older pkv's 1 and 2 (their checksum
     * another), refused as such. */
    const uint8_t versions[] = {5, 1, 2};
    for (size_t i = 0; i < sizeof versions; i++) {
        copy[8] = versions[i];
        assert_int_equal(try_import(b.engine, copy, size),
                         PKV_ERR_UNSUPPORTED);
        assert_int_equal(strstr(pkv_engine_last_error(b.engine),
                                "made by an older pkv") != NULL,
                         versions[i] < 3);
    }
    free(copy);
    assert_false(pkv_engine_has_work(b.engine));

    /* Another geometry or dtype; a pool too small. */
    pkv_engine_params other[3] = {p, p, p};
    other[0].head_dim = 16;
    other[1].kv_dtype = PKV_KV_DTYPE_F16;
    other[2].num_blocks = 4;
    for (int i = 0; i < 3; i++) {
        ch_host c;
        ch_cmocka_init(&c, &other[i], 1e-4f);
        assert_int_equal(try_import(c.engine, data, size),
                         i == 2 ? PKV_ERR_NO_BLOCKS : PKV_ERR_UNSUPPORTED);
        assert_false(pkv_engine_has_work(c.engine));
        ch_free(&c);
    }

    /* During a step. */
    const pkv_batch *batch;
    assert_int_equal(pkv_engine_step_begin(b.engine, &batch), PKV_OK);
    assert_int_equal(try_import(b.engine, data, size), PKV_ERR_BAD_STATE);
    assert_int_equal(pkv_engine_step_end(b.engine, NULL, NULL, 0), PKV_OK);

    /* The same bytes, untouched, still import. */
    pkv_seq_id moved = import_seq(&b, ch_find(&a, id), data, size);
    finish_both(&a, id, &b, moved);
    free(data);
    free(prompt);
}

/* U8 and U4 blocks are never re-quantised: into another block size or
 * other groups (U4: also other per-token group widths) a sequence moves
 * without its KV, and computes it again (every token in its first step),
 * to the same tokens. */
static void block_size_case(int32_t dtype)
{
    pkv_engine_params pa = params_of(PKV_BACKEND_KIND_CPU, dtype, 4);
    pa.head_dim = 16; /* U4 groups of 16 by default; 8 is the other one */
    pkv_engine_params pb[3] = {pa, pa, pa};
    pb[0].block_size = 8;
    pb[1].key_quant = PKV_QUANT_GROUP_PER_TOKEN;
    pb[2].u4_group = 8;
    for (int i = 0; i < (dtype == PKV_KV_DTYPE_U4 ? 3 : 2); i++) {
        ch_host a, b;
        ch_cmocka_init(&a, &pa, hm_tolerance(dtype));
        ch_cmocka_init(&b, &pb[i], hm_tolerance(dtype));
        int32_t *prompt = hm_prompt(PROMPT, 9);
        pkv_seq_id id = ch_add_prompt(&a, prompt, PROMPT, 8, 0, 0);
        for (int step = 0; step < 3; step++)
            ch_step(&a, NULL);
        uint32_t tokens = ch_find(&a, id)->num_tokens;
        size_t size;
        uint8_t *data = export_seq(&a, id, &size);
        pkv_seq_id moved = import_seq(&b, ch_find(&a, id), data, size);
        const pkv_batch *batch;
        ch_step(&b, &batch);
        assert_int_equal(ch_rows_of(batch, moved), tokens);
        finish_both(&a, id, &b, moved);
        free(data);
        free(prompt);
    }
}

static void test_quantized_block_size(void **state)
{
    (void)state;
    block_size_case(PKV_KV_DTYPE_U8);
    block_size_case(PKV_KV_DTYPE_U4);
}

#endif

/* The export of sequence id of h (malloc'd, *size bytes). */
static uint8_t *export_of(ch_host *h, pkv_seq_id id, size_t *size)
{
    assert_int_equal(pkv_seq_export(h->engine, id, NULL, 0, size), PKV_OK);
    uint8_t *bytes = malloc(*size);
    assert_non_null(bytes);
    assert_int_equal(pkv_seq_export(h->engine, id, bytes, *size, size),
                     PKV_OK);
    return bytes;
}

/* Two U8 (or U4) sequences that hold the same tokens and the same stored KV
 * export the same bytes, whatever they held before: one decoded plainly,
 * the other ran rejected drafts that filled and froze its block (and,
 * with a rollback window, rolled that freeze back), or was truncated
 * inside its unfrozen block. */
static void test_u8_canonical(void **state)
{
    (void)state;
#ifdef PKV_HAVE_OPENCL
    int32_t backend = PKV_BACKEND_KIND_OPENCL;
#else
    int32_t backend = PKV_BACKEND_KIND_CPU;
#endif
    for (uint32_t run = 0; run < 4; run++) {
        uint32_t window = run % 2 * 2;
        int32_t dtype = run < 2 ? PKV_KV_DTYPE_U8 : PKV_KV_DTYPE_U4;
        pkv_engine_params p = params_of(backend, dtype, 8);
        p.u8_rollback_blocks = window;
        int32_t *prompt = hm_prompt(3, 9);
        ch_host plain, spec, cut;
        ch_cmocka_init(&plain, &p, hm_tolerance(dtype));
        ch_cmocka_init(&spec, &p, hm_tolerance(dtype));
        ch_cmocka_init(&cut, &p, hm_tolerance(dtype));
        pkv_seq_id a = ch_add_prompt(&plain, prompt, 3, 20, 0, 0);
        pkv_seq_id b = ch_add_prompt(&spec, prompt, 3, 20, 0, 0);
        pkv_seq_id c = ch_add_prompt(&cut, prompt, 3, 20, 0, 0);
        ch_step(&spec, NULL);
        ch_seq *rb = ch_find(&spec, b);
        ch_propose_wrong(&spec, b, 4);
        for (int i = 0; i < 3; i++)
            ch_step(&spec, NULL);
        for (int i = 0; i < 5; i++) /* one token more, block unfrozen */
            ch_step(&cut, NULL);
        ch_seq *rc = ch_find(&cut, c);
        assert_int_equal(ch_truncate(&cut, c, rb->num_tokens), PKV_OK);
        ch_seq *ra = ch_find(&plain, a);
        while (ra->num_tokens < rb->num_tokens)
            ch_step(&plain, NULL);
        /* All three hold the same tokens, all but the last stored. */
        const uint32_t *blocks;
        uint32_t nb, stored[3];
        pkv_engine_get_block_table(plain.engine, a, &blocks, &nb, &stored[0]);
        pkv_engine_get_block_table(spec.engine, b, &blocks, &nb, &stored[1]);
        pkv_engine_get_block_table(cut.engine, c, &blocks, &nb, &stored[2]);
        assert_int_equal(ra->num_tokens, rc->num_tokens);
        assert_memory_equal(ra->tokens, rb->tokens,
                            ra->num_tokens * sizeof *ra->tokens);
        assert_memory_equal(ra->tokens, rc->tokens,
                            ra->num_tokens * sizeof *ra->tokens);
        for (int i = 0; i < 3; i++)
            assert_int_equal(stored[i] + 1, ra->num_tokens);
        size_t sa, sb, sc;
        uint8_t *ea = export_of(&plain, a, &sa);
        uint8_t *eb = export_of(&spec, b, &sb);
        uint8_t *ec = export_of(&cut, c, &sc);
        assert_int_equal(sa, sb);
        assert_int_equal(sa, sc);
        assert_memory_equal(ea, eb, sa);
        assert_memory_equal(ea, ec, sa);
        free(ea);
        free(eb);
        free(ec);
        ch_free(&plain);
        ch_free(&spec);
        ch_free(&cut);
        free(prompt);
    }
}

#ifndef PKV_HAVE_OPENCL
/* forge.h's load: an import. */
static pkv_status forge_load(pkv_engine *e, const uint8_t *data, size_t n)
{
    return try_import(e, data, n);
}

/* With a seal key: a move between engines with the key (mid-prompt and
 * decoding) goes as in test_move_cpu. The export is sealed: no token in
 * the clear. Refused with PKV_ERR_INVALID_ARGUMENT, nothing imported
 * (forge.h): every byte flipped, every cut, extensions, another seal's
 * salt, nonce, tag, header or content, the export twice, the export
 * under another key, a sealed prefix cache given as an export, an
 * unsealed export (and one forged with its checksum recomputed); refused
 * with PKV_ERR_UNSUPPORTED by an engine without a key. */
static void test_sealed(void **state)
{
    (void)state;
    pkv_engine_params p = params_of(PKV_BACKEND_KIND_CPU, PKV_KV_DTYPE_F16,
                                    4);
    p.seal_key = ch_seal_key;
    move_once(&p, &p, 1);
    move_once(&p, &p, 6);
    pkv_engine_params other = p, plain = p;
    other.seal_key = ch_other_seal_key;
    plain.seal_key = NULL;
    ch_host a, b, c, d;
    ch_cmocka_init(&a, &p, hm_tolerance(PKV_KV_DTYPE_F16));
    ch_cmocka_init(&b, &p, hm_tolerance(PKV_KV_DTYPE_F16));
    ch_cmocka_init(&c, &other, hm_tolerance(PKV_KV_DTYPE_F16));
    ch_cmocka_init(&d, &plain, hm_tolerance(PKV_KV_DTYPE_F16));
    int32_t *prompt = hm_prompt(PROMPT, 5);
    pkv_seq_id id = ch_add_prompt(&a, prompt, PROMPT, 8, 0, 0);
    pkv_seq_id id_plain = ch_add_prompt(&d, prompt, PROMPT, 8, 0, 0);
    pkv_seq_id id_other = ch_add_prompt(&c, prompt, PROMPT, 8, 0, 0);
    for (int i = 0; i < 3; i++) {
        ch_step(&a, NULL);
        ch_step(&c, NULL);
        ch_step(&d, NULL);
    }
    size_t size, again_size, plain_size, other_size, cache_size;
    uint8_t *data = export_seq(&a, id, &size);
    uint8_t *again = export_seq(&a, id, &again_size);
    uint8_t *unsealed = export_seq(&d, id_plain, &plain_size);
    uint8_t *other_data = export_seq(&c, id_other, &other_size);
    uint8_t *cache = forge_prefix_cache_of(&p, prompt, PROMPT, &cache_size);
    assert_int_equal(again_size, size);
    assert_int_equal(size, plain_size + PKV__SEAL_HEADER_BYTES);
    assert_memory_equal(data, "PKVSEAL\n", 8);
    uint8_t tokens[4 * PROMPT];
    for (uint32_t i = 0; i < PROMPT; i++)
        pkv__put_u32(tokens + 4 * i, (uint32_t)prompt[i]);
    for (size_t at = 0; at + 16 <= size; at++)
        assert_memory_not_equal(data + at, tokens, 16);
const forge_set f = {data, size, again, other_data, other_size,
                         cache, cache_size, unsealed, plain_size};
    forge_refused(&f, forge_load, b.engine, "export");
    unsealed[plain_size - 1] ^= 0x40; /* forged KV, checksum recomputed */
    pkv__put_u64(unsealed + 72, pkv__checksum(unsealed, plain_size, 72));
    assert_int_equal(try_import(b.engine, unsealed, plain_size),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(try_import(d.engine, data, size), PKV_ERR_UNSUPPORTED);
    /* Nothing of the refusals stayed: b imports it intact and finishes
     * as a does. */
    pkv_seq_id moved = import_seq(&b, ch_find(&a, id), data, size);
    ch_run(&c, 200);
    ch_run(&d, 200);
    ch_free(&c);
    ch_free(&d);
    finish_both(&a, id, &b, moved);
    free(data);
    free(again);
    free(unsealed);
    free(other_data);
    free(cache);
    free(prompt);
}
#endif

/* Built twice: test_export (CPU) and test_export_opencl (labelled opencl,
 * so that it runs on every OpenCL runtime the tests cover). */
int main(void)
{
#ifdef PKV_HAVE_OPENCL
    int start = ch_opencl_start();
    if (start != 0)
        return start;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_move_across_backends),
        cmocka_unit_test(test_u8_canonical),
    };
#else
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_move_cpu),
        cmocka_unit_test(test_move_swapped_and_waiting),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_quantized_block_size),
        cmocka_unit_test(test_u8_canonical),
        cmocka_unit_test(test_sealed),
    };
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
