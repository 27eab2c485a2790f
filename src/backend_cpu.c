/* SPDX-License-Identifier: MIT */
/*
 * The CPU reference backend: the oracle every kernel is tested against and
 * the fallback without an OpenCL device. Plain C, with SIMD versions of
 * its attention arithmetic chosen at run time; attention runs on the
 * host's threads when it lends them (pkv_engine_params.parallel), else on
 * the caller's. This file holds the backend object, the cache's storage,
 * append with the freeze of full U8/U4 blocks, copies and swap; attention
 * is backend_cpu_attend.c's.
 */
#include "backend_cpu.h"

#include "error.h"
#include "half.h"
#include "kv_layout.h"
#include "quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A task's (row, head) pairs at most. */
static size_t scratch_pairs(const pkv__backend *b)
{
    return (size_t)b->tile_rows * (b->cfg.num_q_heads / b->cfg.num_kv_heads);
}

static void cpu_destroy(pkv__backend *b)
{
    if (b == NULL)
        return;
    pkv__allocator a = b->alloc;
    if (b->arenas != NULL)
        for (uint32_t l = 0; l < b->num_arenas; l++)
            pkv__free(&a, b->arenas[l], b->arena_bytes, 1);
    pkv__free(&a, b->arenas, b->num_arenas, sizeof *b->arenas);
    pkv__free(&a, b->stages, b->cfg.num_stages, b->stage_floats * 4);
    if (b->scratch != NULL)
        for (uint32_t w = 0; w < b->workers; w++)
            pkv__cpu_scratch_free(&a, &b->scratch[w], scratch_pairs(b),
                                  &b->cfg);
    pkv__free(&a, b->scratch, b->workers, sizeof *b->scratch);
    pkv__free(&a, b->tasks, b->tasks_capacity, sizeof *b->tasks);
    pkv__free(&a, b->part_state, b->part_state_capacity,
              sizeof *b->part_state);
    pkv__free(&a, b->part_acc, b->part_acc_capacity,
              (size_t)b->cfg.head_dim * sizeof(float));
    pkv__free(&a, b->merges, b->merges_capacity, sizeof *b->merges);
    pkv__tables_seen_release(&b->checked, &a);
    pkv__free(&a, b, 1, sizeof *b);
}

/* How part kv stores its rows, and where its parameters start. */
static void part_format(pkv__backend *b, int kv)
{
    const pkv__backend_config *c = &b->cfg;
    pkv__qformat f = pkv__backend_qformat(c, kv);
    uint32_t d = c->head_dim, bs = c->block_size;
    b->formats[kv] = (pkv__rows_format){
        f.dtype, f.group,
        PKV_LAYOUT_Q_WIDTH((uint32_t)f.dtype, f.u4_group, d)};
    b->lo_at[kv] = PKV_LAYOUT_Q_LO_OFFSET((uint32_t)f.dtype, bs, d);
    b->scale_at[kv] = PKV_LAYOUT_Q_SCALE_OFFSET(
        (uint32_t)f.dtype, f.group, f.u4_group, bs, d);
}

/* The attention arithmetic: the processor's fastest for the cache's
 * formats, or the version PKV_CPU_ATTEND names (portable, avx2, avx512:
 * for benchmarks and tests), refused where it cannot run. */
static pkv_status choose_math(pkv__backend *b)
{
    uint32_t d = b->cfg.head_dim;
    const char *name = getenv("PKV_CPU_ATTEND");
    if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) {
        b->math = pkv__attend_math_for(d, &b->formats[0], &b->formats[1]);
        return PKV_OK;
    }
    for (size_t i = 0; pkv__attend_math_versions[i] != NULL; i++) {
        const pkv__attend_math *m = pkv__attend_math_versions[i];
        if (strcmp(name, m->name) != 0)
            continue;
        if (!pkv__attend_math_takes(m, d, &b->formats[0], &b->formats[1]))
            return pkv__fail(PKV_ERR_UNSUPPORTED,
                             "PKV_CPU_ATTEND=%s: this processor, head_dim %u "
                             "or the cache's formats do not take it",
                             name, (unsigned)d);
        b->math = m;
        return PKV_OK;
    }
    return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                     "PKV_CPU_ATTEND=%s: expected auto, avx512, avx2 or "
                     "portable",
                     name);
}

static pkv_status cpu_create(const pkv__backend_config *config,
                             const pkv__allocator *alloc, pkv__backend **out)
{
    *out = NULL;
    pkv_status st = pkv__backend_config_check(config);
    if (st != PKV_OK)
        return st;
    pkv__backend *b = pkv__calloc(alloc, 1, sizeof *b);
    if (b == NULL)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "cpu backend: no memory");
    b->cfg = *config;
    b->alloc = *alloc;
    const pkv__backend_config *c = &b->cfg;
    b->layer_block_bytes = pkv__backend_layer_block_bytes(c);
    b->head_bytes = b->layer_block_bytes / c->num_kv_heads;
    b->k_part_bytes = pkv__backend_part_bytes(c, 0);
    b->stage_floats = pkv__backend_stage_bytes(c) / sizeof(float);
    part_format(b, 0);
    part_format(b, 1);
    if ((st = choose_math(b)) != PKV_OK) {
        pkv__free(alloc, b, 1, sizeof *b);
        return st;
    }
    b->tail_format = (pkv__rows_format){PKV_KV_DTYPE_F32, 0, c->head_dim};
    int overflow = b->layer_block_bytes > SIZE_MAX / c->num_blocks;
    b->arena_bytes = overflow ? 0 : b->layer_block_bytes * c->num_blocks;
    b->num_arenas = pkv__backend_num_arenas(c);
    b->arenas = overflow ? NULL
                         : pkv__calloc(alloc, b->num_arenas, sizeof *b->arenas);
    int ok = b->arenas != NULL;
    for (uint32_t l = 0; ok && l < b->num_arenas; l++) {
        b->arenas[l] = pkv__calloc(alloc, b->arena_bytes, 1);
        ok = b->arenas[l] != NULL;
    }
    if (ok && c->num_stages > 0) {
        b->stages = pkv__calloc(alloc, c->num_stages, b->stage_floats * 4);
        ok = b->stages != NULL;
    }
    if (ok)
        ok = pkv__tables_seen_init(&b->checked, alloc,
                                   c->max_step_seqs *
                                       pkv__backend_num_groups(c)) == PKV_OK;
    b->workers = c->workers > 0 ? c->workers : 1;
    b->tile_rows = pkv__cpu_tile_rows(c->num_q_heads / c->num_kv_heads);
    if (ok) {
        b->scratch = pkv__calloc(alloc, b->workers, sizeof *b->scratch);
        ok = b->scratch != NULL;
    }
    for (uint32_t w = 0; ok && w < b->workers; w++)
        ok = pkv__cpu_scratch_init(alloc, &b->scratch[w], scratch_pairs(b),
                                   c) == PKV_OK;
    if (!ok) {
        pkv_status fail = pkv__fail(
            PKV_ERR_OUT_OF_MEMORY,
            "cpu backend: no memory for %u arenas of %u blocks of %zu bytes",
            (unsigned)b->num_arenas, (unsigned)c->num_blocks,
            b->layer_block_bytes);
        cpu_destroy(b);
        return fail;
    }
    *out = b;
    return PKV_OK;
}

static pkv_status cpu_begin_step(pkv__backend *b, const pkv__step *step)
{
    pkv_status st = pkv__backend_step_check(&b->cfg, step, &b->checked);
    if (st != PKV_OK)
        return st;
    b->step = *step;
    b->have_step = 1;
    return PKV_OK;
}

static void store_row(pkv__backend *b, uint32_t layer, uint32_t seq,
                      uint32_t row, uint32_t h, int kv, const float *src)
{
    const pkv__backend_config *c = &b->cfg;
    uint64_t slot = b->step.slots[(size_t)pkv__backend_group(c, layer) *
                                      b->step.num_tokens +
                                  row];
    uint64_t blk = slot / c->block_size;
    uint32_t off = (uint32_t)(slot % c->block_size);
    uint32_t d = c->head_dim;
    if (c->kv_dtype == PKV_KV_DTYPE_F32) {
        memcpy(pkv__cpu_part(b, layer, blk, h, kv) + (size_t)off * d * 4, src,
               (size_t)d * 4);
    } else if (c->kv_dtype == PKV_KV_DTYPE_F16) {
        uint16_t half_row[PKV_LAYOUT_MAX_HEAD_DIM];
        b->math->to_f16(src, half_row, d);
        memcpy(pkv__cpu_part(b, layer, blk, h, kv) + (size_t)off * d * 2,
               half_row, (size_t)d * 2);
    } else {
        float *tail = pkv__cpu_stage(b, b->step.stages[seq], layer, h, kv);
        memcpy(tail + (size_t)off * d, src, (size_t)d * 4);
        if (off != c->block_size - 1)
            return;
        /* The block is full: freeze it, keeping its rows in the window. */
        pkv__qformat f = pkv__backend_qformat(c, kv);
        pkv__quant_part(tail, c->block_size, d, &f,
                        pkv__cpu_part(b, layer, blk, h, kv));
        const uint32_t *windows = b->step.windows;
        if (windows != NULL && windows[row] != PKV__NO_STAGE)
            memcpy(pkv__cpu_stage(b, windows[row], layer, h, kv), tail,
                   (size_t)c->block_size * d * sizeof *tail);
    }
}

static pkv_status cpu_append(pkv__backend *b, uint32_t layer, const float *k,
                             const float *v)
{
    pkv_status st = pkv__backend_layer_check(
        &b->cfg, b->have_step ? &b->step : NULL, layer, k, v);
    if (st != PKV_OK)
        return st;
    const pkv__step *s = &b->step;
    uint32_t hk = b->cfg.num_kv_heads, d = b->cfg.head_dim;
    for (uint32_t i = 0; i < s->num_seqs; i++)
        for (uint32_t t = s->query_start[i]; t < s->query_start[i + 1]; t++)
            for (uint32_t h = 0; h < hk; h++) {
                size_t row = ((size_t)t * hk + h) * d;
                store_row(b, layer, i, t, h, 0, k + row);
                store_row(b, layer, i, t, h, 1, v + row);
            }
    return PKV_OK;
}

static pkv_status cpu_copy_blocks(pkv__backend *b,
                                  const pkv__block_copy *pairs, uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 1);
    if (st != PKV_OK)
        return st;
    size_t bytes = b->layer_block_bytes;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t l = 0; l < b->num_arenas; l++)
            if (pairs[i].src != pairs[i].dst)
                memcpy(b->arenas[l] + pairs[i].dst * bytes,
                       b->arenas[l] + pairs[i].src * bytes, bytes);
    return PKV_OK;
}

static pkv_status cpu_copy_stages(pkv__backend *b,
                                  const pkv__block_copy *pairs, uint32_t n)
{
    pkv_status st = pkv__backend_pairs_check(&b->cfg, pairs, n, 0);
    if (st != PKV_OK)
        return st;
    size_t floats = b->stage_floats;
    for (uint32_t i = 0; i < n; i++)
        if (pairs[i].src != pairs[i].dst)
            memcpy(b->stages + pairs[i].dst * floats,
                   b->stages + pairs[i].src * floats, floats * sizeof(float));
    return PKV_OK;
}

/* Copy blocks between the arenas and host memory (in: host to arenas). */
static void swap_copy(pkv__backend *b, const uint32_t *blocks, uint32_t n,
                      uint8_t *host, int in)
{
    size_t bytes = b->layer_block_bytes;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t l = 0; l < b->num_arenas; l++, host += bytes) {
            uint8_t *block = b->arenas[l] + blocks[i] * bytes;
            memcpy(in ? block : host, in ? host : block, bytes);
        }
}

static pkv_status cpu_swap_out(pkv__backend *b, const uint32_t *blocks,
                               uint32_t n, void *host)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, 0);
    if (st == PKV_OK)
        swap_copy(b, blocks, n, host, 0);
    return st;
}

static pkv_status cpu_swap_in(pkv__backend *b, const void *host,
                              const uint32_t *blocks, uint32_t n)
{
    pkv_status st = pkv__backend_ids_check(&b->cfg, blocks, n, 1);
    /* swap_copy only reads host when copying in. */
    if (st == PKV_OK)
        swap_copy(b, blocks, n, (uint8_t *)(uintptr_t)host, 1);
    return st;
}

static pkv_status stage_id_check(const pkv__backend *b, uint32_t stage)
{
    if (stage >= b->cfg.num_stages)
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "staging tail %u of %u", (unsigned)stage,
                         (unsigned)b->cfg.num_stages);
    return PKV_OK;
}

static pkv_status cpu_stage_out(pkv__backend *b, uint32_t stage, void *host)
{
    pkv_status st = stage_id_check(b, stage);
    if (st == PKV_OK)
        memcpy(host, b->stages + stage * b->stage_floats,
               b->stage_floats * sizeof(float));
    return st;
}

static pkv_status cpu_stage_in(pkv__backend *b, const void *host,
                               uint32_t stage)
{
    pkv_status st = stage_id_check(b, stage);
    if (st == PKV_OK)
        memcpy(b->stages + stage * b->stage_floats, host,
               b->stage_floats * sizeof(float));
    return st;
}

const pkv__backend_ops pkv__backend_cpu = {
    "cpu",          cpu_create,   cpu_destroy,     cpu_begin_step,
    cpu_append,     pkv__cpu_attend,   cpu_copy_blocks, cpu_copy_stages,
    cpu_swap_out,   cpu_swap_in,  cpu_stage_out,   cpu_stage_in,
    NULL, /* append_attend: append and attend do not wait for anything */
    NULL, /* attend_device: host memory only */
};
