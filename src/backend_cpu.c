/* SPDX-License-Identifier: MIT */
/*
 * The CPU reference backend: the oracle every kernel is tested against and
 * the fallback without an OpenCL device. Plain C, one thread.
 *
 * Attention walks, per sequence and kv head, the blocks its rows can see;
 * each block's K and V rows are read once as f32 (straight from an f32
 * arena or a u8 staging tail, else converted into a scratch tile) and used
 * for every query row and every query head of the kv head's group. The
 * online softmax is updated once per block: all of the block's scores, one
 * rescale, then the V sums.
 */
#include "backend.h"

#include "error.h"
#include "half.h"
#include "kv_layout.h"
#include "quant.h"

#include <math.h>
#include <string.h>

/* Running state of one (query row, query head): max score, denominator;
 * the numerator accumulates in the output row itself. */
typedef struct softmax_state {
    float m;
    float l;
} softmax_state;

struct pkv__backend {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    size_t layer_block_bytes;
    size_t head_bytes;   /* one kv head of one block: K part, V part */
    size_t k_part_bytes; /* offset of the V part within a head */
    size_t arena_bytes;  /* one layer */
    uint8_t **arenas;    /* [num_layers] */
    float *stages;       /* [num_stages][layer][kv head][K, V][token][ch] */
    size_t stage_floats; /* one tail over every layer */
    float *tile;         /* [K, V][block_size][head_dim]: converted rows */
    pkv__step step;      /* borrowed from begin_step */
    int have_step;
    pkv__tables_seen checked; /* block-table rows begin_step checked */
    softmax_state *state; /* attend's per-row softmax state, grown to
                             the longest run of rows seen: no
                             allocation per layer */
    size_t state_capacity;
};

static void cpu_destroy(pkv__backend *b)
{
    if (b == NULL)
        return;
    pkv__allocator a = b->alloc;
    if (b->arenas != NULL)
        for (uint32_t l = 0; l < b->cfg.num_layers; l++)
            pkv__free(&a, b->arenas[l], b->arena_bytes, 1);
    pkv__free(&a, b->arenas, b->cfg.num_layers, sizeof *b->arenas);
    pkv__free(&a, b->stages, b->cfg.num_stages, b->stage_floats * 4);
    pkv__free(&a, b->tile, 2u * b->cfg.block_size * b->cfg.head_dim,
              sizeof(float));
    pkv__free(&a, b->state, b->state_capacity, sizeof *b->state);
    pkv__tables_seen_release(&b->checked, &a);
    pkv__free(&a, b, 1, sizeof *b);
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
    int overflow = b->layer_block_bytes > SIZE_MAX / c->num_blocks;
    b->arena_bytes = overflow ? 0 : b->layer_block_bytes * c->num_blocks;
    b->arenas = overflow ? NULL
                         : pkv__calloc(alloc, c->num_layers, sizeof *b->arenas);
    int ok = b->arenas != NULL;
    for (uint32_t l = 0; ok && l < c->num_layers; l++) {
        b->arenas[l] = pkv__calloc(alloc, b->arena_bytes, 1);
        ok = b->arenas[l] != NULL;
    }
    if (ok && c->num_stages > 0) {
        b->stages = pkv__calloc(alloc, c->num_stages, b->stage_floats * 4);
        ok = b->stages != NULL;
    }
    if (ok)
        ok = pkv__tables_seen_init(&b->checked, alloc, c->max_step_seqs) ==
             PKV_OK;
    if (ok) {
        b->tile = pkv__calloc(alloc, 2u * c->block_size * c->head_dim,
                              sizeof(float));
        ok = b->tile != NULL;
    }
    if (!ok) {
        pkv_status fail = pkv__fail(
            PKV_ERR_OUT_OF_MEMORY,
            "cpu backend: no memory for %u layers of %u blocks of %zu bytes",
            (unsigned)c->num_layers, (unsigned)c->num_blocks,
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

/* The K (kv 0) or V (kv 1) part of kv head h of block blk. */
static uint8_t *part_at(const pkv__backend *b, uint32_t layer, uint64_t blk,
                        uint32_t h, int kv)
{
    return b->arenas[layer] + blk * b->layer_block_bytes +
           h * b->head_bytes + (kv ? b->k_part_bytes : 0);
}

/* The K or V rows of kv head h in a staging tail. */
static float *stage_at(const pkv__backend *b, uint32_t stage, uint32_t layer,
                       uint32_t h, int kv)
{
    const pkv__backend_config *c = &b->cfg;
    size_t rows = (((size_t)layer * c->num_kv_heads + h) * 2u + (size_t)kv);
    return b->stages + stage * b->stage_floats +
           rows * c->block_size * c->head_dim;
}

static void store_row(pkv__backend *b, uint32_t layer, uint32_t seq,
                      uint32_t row, uint32_t h, int kv, const float *src)
{
    uint64_t slot = b->step.slots[row];
    const pkv__backend_config *c = &b->cfg;
    uint64_t blk = slot / c->block_size;
    uint32_t off = (uint32_t)(slot % c->block_size);
    uint32_t d = c->head_dim;
    if (c->kv_dtype == PKV_KV_F32) {
        memcpy(part_at(b, layer, blk, h, kv) + (size_t)off * d * 4, src,
               (size_t)d * 4);
    } else if (c->kv_dtype == PKV_KV_F16) {
        uint16_t half_row[PKV_LAYOUT_MAX_HEAD_DIM];
        pkv__f32_to_f16_n(src, half_row, d);
        memcpy(part_at(b, layer, blk, h, kv) + (size_t)off * d * 2,
               half_row, (size_t)d * 2);
    } else {
        float *tail = stage_at(b, b->step.stages[seq], layer, h, kv);
        memcpy(tail + (size_t)off * d, src, (size_t)d * 4);
        if (off != c->block_size - 1)
            return;
        /* The block is full: seal it, keeping its rows in the window. */
        pkv__qformat f = pkv__backend_qformat(c, kv);
        pkv__quant_part(tail, c->block_size, d, &f,
                        part_at(b, layer, blk, h, kv));
        const uint32_t *windows = b->step.windows;
        if (windows != NULL && windows[row] != PKV__NO_STAGE)
            memcpy(stage_at(b, windows[row], layer, h, kv), tail,
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

/* K or V rows [0, n) of kv head h of the sequence's logical block j, as
 * f32 [n][head_dim]: in place where the cache holds f32, else converted
 * into dst. A U8 sequence's last block (`last`) is read from its staging
 * tail, also when this step sealed it: a step's rows see the block they
 * write as plain decoding's one row does. */
static const float *load_rows(const pkv__backend *b, uint32_t layer,
                              uint32_t seq, uint32_t j, uint32_t n, int last,
                              uint32_t h, int kv, float *dst)
{
    const pkv__backend_config *c = &b->cfg;
    const pkv__step *s = &b->step;
    uint32_t blk = s->block_tables[seq][j];
    const uint8_t *part = part_at(b, layer, blk, h, kv);
    if (c->kv_dtype == PKV_KV_F32)
        return (const float *)(const void *)part;
    if (c->kv_dtype == PKV_KV_F16) {
        uint16_t row[PKV_LAYOUT_MAX_HEAD_DIM];
        for (uint32_t t = 0; t < n; t++) {
            memcpy(row, part + (size_t)t * c->head_dim * 2,
                   (size_t)c->head_dim * 2);
            pkv__f16_to_f32_n(row, dst + (size_t)t * c->head_dim,
                              c->head_dim);
        }
        return dst;
    }
    if (last)
        return stage_at(b, s->stages[seq], layer, h, kv);
    pkv__qformat f = pkv__backend_qformat(c, kv);
    pkv__dequant_part(part, c->block_size, c->head_dim, &f, dst);
    return dst;
}

/* The loops below work in fixed runs of 4 (head_dim is a multiple of 4)
 * so that the compiler vectorises them at -O2 without an epilogue or alias
 * versioning; dot's four independent sums are also more accurate than one
 * long chain. */
static float dot(const float *restrict a, const float *restrict b, uint32_t n)
{
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (uint32_t i = 0; i < n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    return (s0 + s2) + (s1 + s3);
}

/* acc += p * x */
static void add_scaled(float *restrict acc, float p, const float *restrict x,
                       uint32_t n)
{
    for (uint32_t i = 0; i < n; i += 4) {
        acc[i] += p * x[i];
        acc[i + 1] += p * x[i + 1];
        acc[i + 2] += p * x[i + 2];
        acc[i + 3] += p * x[i + 3];
    }
}


/* Fold tokens [j0, j1) of one block into one (row, head). */
static void attend_block(const float *q, const float *k, const float *v,
                         uint32_t j0, uint32_t j1, uint32_t d, float scale,
                         softmax_state *st, float *acc)
{
    float sc[PKV_LAYOUT_MAX_BLOCK_SIZE];
    float mb = -INFINITY;
    for (uint32_t j = j0; j < j1; j++) {
        sc[j] = dot(q, k + (size_t)j * d, d) * scale;
        mb = sc[j] > mb ? sc[j] : mb;
    }
    /* The first block finds m = -inf and a zero accumulator: nothing to
     * rescale (and expf(-inf - -inf) would be NaN). */
    if (mb > st->m) {
        if (st->m != -INFINITY) {
            float keep = expf(st->m - mb);
            st->l *= keep;
            for (uint32_t c = 0; c < d; c++)
                acc[c] *= keep;
        }
        st->m = mb;
    }
    for (uint32_t j = j0; j < j1; j++) {
        float p = expf(sc[j] - st->m);
        st->l += p;
        add_scaled(acc, p, v + (size_t)j * d, d);
    }
}

static void attend_seq(pkv__backend *b, uint32_t layer, uint32_t seq,
                       const float *q, float *out, float scale,
                       uint32_t window, softmax_state *state)
{
    const pkv__backend_config *c = &b->cfg;
    const pkv__step *s = &b->step;
    uint32_t q0 = s->query_start[seq], nq = s->query_start[seq + 1] - q0;
    uint32_t ctx = s->context_lens[seq], first = ctx - nq;
    uint32_t hq = c->num_q_heads, group = hq / c->num_kv_heads;
    uint32_t d = c->head_dim, bs = c->block_size;
    /* Row r is token first + r and sees [lo_r, first + r]. */
    uint32_t lo0 = window > 0 && first + 1 > window ? first + 1 - window : 0;
    float *ktile = b->tile, *vtile = b->tile + (size_t)bs * d;
    for (uint32_t h = 0; h < c->num_kv_heads; h++) {
        for (uint32_t i = 0; i < nq * group; i++) {
            state[i].m = -INFINITY;
            state[i].l = 0.0f;
        }
        for (uint32_t r = 0; r < nq; r++)
            memset(out + ((size_t)(q0 + r) * hq + h * group) * d, 0,
                   (size_t)group * d * sizeof(float));
        for (uint32_t j = lo0 / bs; j * bs < ctx; j++) {
            uint32_t b0 = j * bs;
            uint32_t n = ctx - b0 < bs ? ctx - b0 : bs;
            int last = b0 + bs >= ctx;
            const float *k = load_rows(b, layer, seq, j, n, last, h, 0, ktile);
            const float *v = load_rows(b, layer, seq, j, n, last, h, 1, vtile);
            for (uint32_t r = 0; r < nq; r++) {
                uint32_t tok = first + r;
                uint32_t lo =
                    window > 0 && tok + 1 > window ? tok + 1 - window : 0;
                uint32_t j0 = lo > b0 ? lo - b0 : 0;
                uint32_t j1 = tok + 1 - b0 < n ? tok + 1 - b0 : n;
                if (tok < b0 || j0 >= j1)
                    continue;
                for (uint32_t g = 0; g < group; g++) {
                    size_t row = ((size_t)(q0 + r) * hq + h * group + g) * d;
                    attend_block(q + row, k, v, j0, j1, d, scale,
                                 &state[r * group + g], out + row);
                }
            }
        }
        /* Every row sees at least its own token, so l >= 1. */
        for (uint32_t r = 0; r < nq; r++)
            for (uint32_t g = 0; g < group; g++) {
                float *o = out + ((size_t)(q0 + r) * hq + h * group + g) * d;
                float inv = 1.0f / state[r * group + g].l;
                for (uint32_t x = 0; x < d; x++)
                    o[x] *= inv;
            }
    }
}

static pkv_status cpu_attend(pkv__backend *b, uint32_t layer, const float *q,
                             float *out, float scale, uint32_t sliding_window)
{
    pkv_status st = pkv__backend_layer_check(
        &b->cfg, b->have_step ? &b->step : NULL, layer, q, out);
    if (st != PKV_OK)
        return st;
    if (!(scale >= 0.0f) || isinf(scale))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "attend: scale must be finite and >= 0");
    const pkv__step *s = &b->step;
    /* Softmax state for the step's longest run of rows, grown here rather
     * than at begin_step, which never fails once the engine has planned. */
    uint32_t max_rows = 0;
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t n = s->query_start[i + 1] - s->query_start[i];
        max_rows = n > max_rows ? n : max_rows;
    }
    size_t need = (size_t)max_rows * (b->cfg.num_q_heads / b->cfg.num_kv_heads);
    void *grown;
    if (pkv__grow(&b->alloc, b->state, &b->state_capacity, 0, need,
                  sizeof *b->state, &grown) != PKV_OK)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "attend: no memory");
    b->state = grown;
    if (scale == 0.0f)
        scale = 1.0f / sqrtf((float)b->cfg.head_dim);
    for (uint32_t i = 0; i < s->num_seqs; i++)
        if (s->query_start[i + 1] > s->query_start[i])
            attend_seq(b, layer, i, q, out, scale, sliding_window,
                       b->state);
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
        for (uint32_t l = 0; l < b->cfg.num_layers; l++)
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
        for (uint32_t l = 0; l < b->cfg.num_layers; l++, host += bytes) {
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
    cpu_append,     cpu_attend,   cpu_copy_blocks, cpu_copy_stages,
    cpu_swap_out,   cpu_swap_in,  cpu_stage_out,   cpu_stage_in,
    NULL, /* append_attend: append and attend do not wait for anything */
    NULL, /* attend_device: host memory only */
};
