/* SPDX-License-Identifier: MIT */
/*
 * The CPU reference backend: the oracle every kernel is tested against and
 * the fallback without an OpenCL device. Plain C; attention runs on the
 * host's threads when it lends them (pkv_engine_params.parallel), else on
 * the caller's.
 *
 * Attention is cut into tasks of up to TASK_ROWS query rows of one
 * sequence and one kv head. A task walks the blocks its rows can see; each
 * block's K and V rows are read once as f32 (straight from an f32 arena or
 * a u8 staging tail, else converted into its worker's scratch tile) and
 * used for every row and every query head of the kv head's group, four
 * (row, head) pairs at a time (attend_math.h: AVX2 and FMA where the
 * processor has them). The online softmax is updated once per block: all
 * of the block's scores, one rescale, then the V sums. A row's result does
 * not depend on the task cut, the threads or the rows beside it: each
 * (row, head) folds the same blocks in the same order with the same
 * arithmetic.
 */
#include "backend.h"

#include "attend_math.h"
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

/* Query rows per attention task: enough to share each converted block
 * among many (row, head) pairs, few enough that a long prompt makes many
 * tasks for the host's threads. */
#define TASK_ROWS 16u

/* One task: rows [r0, r1) of sequence seq, kv head h. */
typedef struct attend_task {
    uint32_t seq, h, r0, r1;
} attend_task;

/* A worker's scratch: converted K and V rows, and the softmax state of a
 * task's (row, head) pairs. */
typedef struct worker_scratch {
    float *tile;          /* [K, V][block_size][head_dim] */
    softmax_state *state; /* [TASK_ROWS][group] */
} worker_scratch;

struct pkv__backend {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    size_t layer_block_bytes;
    size_t head_bytes;   /* one kv head of one block: K part, V part */
    size_t k_part_bytes; /* offset of the V part within a head */
    size_t arena_bytes;  /* one arena: a layer, or a slot of a group */
    uint32_t num_arenas;
    uint8_t **arenas;    /* [num_arenas] (backend.h) */
    float *stages;       /* [num_stages][layer][kv head][K, V][token][ch] */
    size_t stage_floats; /* one tail over every layer */
    const pkv__attend_math *math; /* the processor's fastest */
    uint32_t workers;
    worker_scratch *scratch; /* [workers] */
    pkv__step step;      /* borrowed from begin_step */
    int have_step;
    pkv__tables_seen checked; /* block-table rows begin_step checked */
    attend_task *tasks;  /* a layer's tasks, grown to the most a step has
                            needed: no allocation per layer */
    size_t tasks_capacity;
};

static size_t tile_floats(const pkv__backend_config *c)
{
    return 2u * (size_t)c->block_size * c->head_dim;
}

static size_t state_count(const pkv__backend_config *c)
{
    return (size_t)TASK_ROWS * (c->num_q_heads / c->num_kv_heads);
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
        for (uint32_t w = 0; w < b->workers; w++) {
            pkv__free(&a, b->scratch[w].tile, tile_floats(&b->cfg),
                      sizeof(float));
            pkv__free(&a, b->scratch[w].state, state_count(&b->cfg),
                      sizeof(softmax_state));
        }
    pkv__free(&a, b->scratch, b->workers, sizeof *b->scratch);
    pkv__free(&a, b->tasks, b->tasks_capacity, sizeof *b->tasks);
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
    b->math = pkv__attend_math_for(c->head_dim);
    b->workers = c->workers > 0 ? c->workers : 1;
    if (ok) {
        b->scratch = pkv__calloc(alloc, b->workers, sizeof *b->scratch);
        ok = b->scratch != NULL;
    }
    for (uint32_t w = 0; ok && w < b->workers; w++) {
        b->scratch[w].tile = pkv__calloc(alloc, tile_floats(c), sizeof(float));
        b->scratch[w].state =
            pkv__calloc(alloc, state_count(c), sizeof(softmax_state));
        ok = b->scratch[w].tile != NULL && b->scratch[w].state != NULL;
    }
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

/* The K (kv 0) or V (kv 1) part of kv head h of block blk. */
static uint8_t *part_at(const pkv__backend *b, uint32_t layer, uint64_t blk,
                        uint32_t h, int kv)
{
    return b->arenas[pkv__backend_arena(&b->cfg, layer)] +
           blk * b->layer_block_bytes +
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
    const pkv__backend_config *c = &b->cfg;
    uint64_t slot = b->step.slots[(size_t)pkv__backend_group(c, layer) *
                                      b->step.num_tokens +
                                  row];
    uint64_t blk = slot / c->block_size;
    uint32_t off = (uint32_t)(slot % c->block_size);
    uint32_t d = c->head_dim;
    if (c->kv_dtype == PKV_KV_DTYPE_F32) {
        memcpy(part_at(b, layer, blk, h, kv) + (size_t)off * d * 4, src,
               (size_t)d * 4);
    } else if (c->kv_dtype == PKV_KV_DTYPE_F16) {
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
    uint32_t g = pkv__backend_group(c, layer);
    uint32_t blk = s->block_tables[g * s->num_seqs + seq][j];
    const uint8_t *part = part_at(b, layer, blk, h, kv);
    if (c->kv_dtype == PKV_KV_DTYPE_F32)
        return (const float *)(const void *)part;
    if (c->kv_dtype == PKV_KV_DTYPE_F16) {
        b->math->widen(part, dst, n * c->head_dim);
        return dst;
    }
    if (last)
        return stage_at(b, s->stages[seq], layer, h, kv);
    pkv__qformat f = pkv__backend_qformat(c, kv);
    pkv__dequant_part(part, c->block_size, c->head_dim, &f, dst);
    return dst;
}

/* Fold one block into a quad of (row, head) pairs: tokens [j0[i], j1[i])
 * of it (relative to b0) for slot i < nq, an empty range for a slot that
 * sees none of it. The online softmax: the slot's scores, one rescale of
 * its sums when the block raises its max, then the V rows weighted. */
static void fold_quad(const pkv__attend_math *math, const float *const *q,
                      float *const *acc, softmax_state *const *st,
                      uint32_t nq, const uint32_t *j0, const uint32_t *j1,
                      const float *k, const float *v, uint32_t d,
                      float scale)
{
    float sc[PKV__QUAD * PKV_LAYOUT_MAX_BLOCK_SIZE];
    const uint32_t stride = PKV_LAYOUT_MAX_BLOCK_SIZE;
    /* The rows any slot sees: [lo, hi). */
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t i = 0; i < nq; i++)
        if (j0[i] < j1[i]) {
            lo = j0[i] < lo ? j0[i] : lo;
            hi = j1[i] > hi ? j1[i] : hi;
        }
    if (lo >= hi)
        return;
    uint32_t n = hi - lo;
    math->scores(q, nq, k + (size_t)lo * d, n, d, sc, stride);
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        float *p = sc + i * stride;
        uint32_t a = i < nq && j0[i] < j1[i] ? j0[i] - lo : n;
        uint32_t z = i < nq && j0[i] < j1[i] ? j1[i] - lo : n;
        float mb = -INFINITY;
        for (uint32_t j = a; j < z; j++) {
            p[j] *= scale;
            mb = p[j] > mb ? p[j] : mb;
        }
        softmax_state *t = i < nq ? st[i] : NULL;
        /* The first block finds m = -inf and a zero accumulator: nothing
         * to rescale (and expf(-inf - -inf) would be NaN). */
        if (a < z && mb > t->m) {
            if (t->m != -INFINITY) {
                float keep = expf(t->m - mb);
                t->l *= keep;
                for (uint32_t c = 0; c < d; c++)
                    acc[i][c] *= keep;
            }
            t->m = mb;
        }
        /* Rows outside the slot's range weigh 0: its sums stay as they
         * are (every V value is finite). */
        for (uint32_t j = 0; j < a; j++)
            p[j] = 0.0f;
        for (uint32_t j = a; j < z; j++) {
            p[j] = expf(p[j] - t->m);
            t->l += p[j];
        }
        for (uint32_t j = z; j < n; j++)
            p[j] = 0.0f;
    }
    math->accumulate(sc, stride, nq, v + (size_t)lo * d, n, d, acc);
}

/* One task: rows [t->r0, t->r1) of sequence t->seq over kv head t->h,
 * on worker scratch w. Its (row, head) pairs, row-major, go through the
 * blocks in quads. */
static void attend_rows(const pkv__backend *b, uint32_t layer,
                        const attend_task *t, const float *q, float *out,
                        float scale, uint32_t window, worker_scratch *w)
{
    const pkv__backend_config *c = &b->cfg;
    const pkv__step *s = &b->step;
    uint32_t q0 = s->query_start[t->seq];
    uint32_t nq = s->query_start[t->seq + 1] - q0;
    uint32_t ctx = s->context_lens[t->seq], first = ctx - nq;
    uint32_t hq = c->num_q_heads, group = hq / c->num_kv_heads;
    uint32_t d = c->head_dim, bs = c->block_size, h = t->h;
    uint32_t pairs = (t->r1 - t->r0) * group;
    /* Row r is token first + r and sees [lo_r, first + r]. */
    uint32_t tok0 = first + t->r0, end = first + t->r1; /* tokens < end */
    uint32_t lo0 = window > 0 && tok0 + 1 > window ? tok0 + 1 - window : 0;
    float *ktile = w->tile, *vtile = w->tile + (size_t)bs * d;
    for (uint32_t i = 0; i < pairs; i++) {
        w->state[i].m = -INFINITY;
        w->state[i].l = 0.0f;
    }
    for (uint32_t r = t->r0; r < t->r1; r++)
        memset(out + ((size_t)(q0 + r) * hq + h * group) * d, 0,
               (size_t)group * d * sizeof(float));
    for (uint32_t j = lo0 / bs; j * bs < end; j++) {
        uint32_t b0 = j * bs;
        uint32_t n = ctx - b0 < bs ? ctx - b0 : bs;
        int last = b0 + bs >= ctx;
        const float *k = load_rows(b, layer, t->seq, j, n, last, h, 0, ktile);
        const float *v = load_rows(b, layer, t->seq, j, n, last, h, 1, vtile);
        for (uint32_t x = 0; x < pairs; x += PKV__QUAD) {
            uint32_t m = pairs - x < PKV__QUAD ? pairs - x : PKV__QUAD;
            const float *qs[PKV__QUAD];
            float *acc[PKV__QUAD];
            softmax_state *st[PKV__QUAD];
            uint32_t j0[PKV__QUAD], j1[PKV__QUAD];
            for (uint32_t i = 0; i < m; i++) {
                uint32_t r = t->r0 + (x + i) / group, g = (x + i) % group;
                uint32_t tok = first + r;
                uint32_t lo =
                    window > 0 && tok + 1 > window ? tok + 1 - window : 0;
                size_t row = ((size_t)(q0 + r) * hq + h * group + g) * d;
                qs[i] = q + row;
                acc[i] = out + row;
                st[i] = &w->state[x + i];
                j0[i] = lo > b0 ? lo - b0 : 0;
                j1[i] = tok < b0 ? 0 : tok + 1 - b0 < n ? tok + 1 - b0 : n;
            }
            fold_quad(b->math, qs, acc, st, m, j0, j1, k, v, d, scale);
        }
    }
    /* Every row sees at least its own token, so l >= 1. */
    for (uint32_t i = 0; i < pairs; i++) {
        uint32_t r = t->r0 + i / group, g = i % group;
        float *o = out + ((size_t)(q0 + r) * hq + h * group + g) * d;
        float inv = 1.0f / w->state[i].l;
        for (uint32_t x = 0; x < d; x++)
            o[x] *= inv;
    }
}

/* A layer's attention as the tasks' shared argument. */
typedef struct attend_job {
    const pkv__backend *b;
    uint32_t layer;
    const float *q;
    float *out;
    float scale;
    uint32_t window;
} attend_job;

static void run_task(void *arg, uint32_t index, uint32_t worker)
{
    const attend_job *job = arg;
    const pkv__backend *b = job->b;
    attend_rows(b, job->layer, &b->tasks[index], job->q, job->out,
                job->scale, job->window, &b->scratch[worker]);
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
    uint32_t hk = b->cfg.num_kv_heads;
    /* The tasks, grown here rather than at begin_step, which never fails
     * once the engine has planned. */
    size_t count = 0;
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t n = s->query_start[i + 1] - s->query_start[i];
        count += (size_t)(n + TASK_ROWS - 1) / TASK_ROWS * hk;
    }
    if (count > UINT32_MAX)
        return pkv__fail(PKV_ERR_UNSUPPORTED, "attend: %zu tasks", count);
    void *grown;
    if (pkv__grow(&b->alloc, b->tasks, &b->tasks_capacity, 0, count,
                  sizeof *b->tasks, &grown) != PKV_OK)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "attend: no memory");
    b->tasks = grown;
    /* A sequence's last rows see the most tokens: their tasks go first, so
     * that threads taking tasks in order end together. */
    attend_task *t = b->tasks;
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t n = s->query_start[i + 1] - s->query_start[i];
        for (uint32_t c = (n + TASK_ROWS - 1) / TASK_ROWS; c > 0; c--)
            for (uint32_t h = 0; h < hk; h++) {
                uint32_t r0 = (c - 1) * TASK_ROWS;
                *t++ = (attend_task){i, h, r0,
                                     n - r0 < TASK_ROWS ? n : r0 + TASK_ROWS};
            }
    }
    if (scale == 0.0f)
        scale = 1.0f / sqrtf((float)b->cfg.head_dim);
    attend_job job = {b, layer, q, out, scale, sliding_window};
    if (b->cfg.parallel != NULL && count > 1)
        b->cfg.parallel(b->cfg.parallel_user, run_task, &job,
                        (uint32_t)count);
    else
        for (uint32_t i = 0; i < (uint32_t)count; i++)
            run_task(&job, i, 0);
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
    cpu_append,     cpu_attend,   cpu_copy_blocks, cpu_copy_stages,
    cpu_swap_out,   cpu_swap_in,  cpu_stage_out,   cpu_stage_in,
    NULL, /* append_attend: append and attend do not wait for anything */
    NULL, /* attend_device: host memory only */
};
