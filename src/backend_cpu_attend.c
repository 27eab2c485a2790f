/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention (backend_cpu.h).
 *
 * A layer is cut into tiles of up to tile_rows query rows of one sequence
 * and one kv head. A tile walks the blocks its rows see; each block's K
 * and V rows are read as stored (f32, f16, U8/U4 codes, or a U8/U4
 * sequence's f32 staging tail for its last block) and used for every row
 * and query head of the kv head's group, four (row, head) pairs at a time
 * (attend_math.h: the processor's fastest version for the cache's
 * formats).
 *
 * Split-K. A sequence's context is folded in chunks of CHUNK_TOKENS
 * tokens, counted from its first token, each from an empty softmax state,
 * and the chunks merged in order by the online-softmax rule. Which task
 * folds a chunk changes no byte, so the cut is free to follow the work:
 * when a layer has few tiles for the lent threads (decode of a few long
 * sequences), each tile of at most SPLIT_ROWS rows becomes a task per
 * chunk writing a partial result, and a second round of tasks, one per
 * such tile, merges them; otherwise a tile's task folds every chunk
 * itself. A row's result therefore does not depend on the cut, the
 * threads or the rows beside it: each (row, head) folds the same blocks
 * in the same chunks with the same arithmetic.
 */
#include "backend_cpu.h"

#include "error.h"
#include "kv_layout.h"

#include <math.h>
#include <string.h>

/* Tokens of a context chunk: a multiple of every block size, so that a
 * block lies in one chunk; long enough that a chunk's work dwarfs its
 * merge (head_dim multiply-adds a query head). */
#define CHUNK_TOKENS 256u
/* A tile's (row, head) pairs at most, and its rows: enough to share each
 * block among many pairs while the block is in the core's cache, few
 * enough that a worker's scratch (a chunk's accumulators) stays small. */
#define TILE_PAIRS 128u
#define TILE_ROWS_MAX 32u
/* Tiles of at most this many rows (decode, drafts) are split by chunk
 * when the layer has fewer than SPLIT_TILES tiles a worker. */
#define SPLIT_ROWS 8u
#define SPLIT_TILES 4u
/* Score rows of a quad: a block's rows at most. */
#define STRIDE PKV_LAYOUT_MAX_BLOCK_SIZE
/* A task with more quads than this converts each block's rows to f32
 * once (pkv__rows.values) rather than in every quad. */
#define CONVERT_QUADS 2u

uint32_t pkv__cpu_tile_rows(uint32_t group)
{
    uint32_t rows = TILE_PAIRS / group;
    return rows < 1 ? 1 : rows > TILE_ROWS_MAX ? TILE_ROWS_MAX : rows;
}

static size_t tile_floats(const pkv__backend_config *c)
{
    return 2u * (size_t)c->block_size * c->head_dim;
}

void pkv__cpu_scratch_free(const pkv__allocator *a, pkv__cpu_scratch *s,
                           size_t pairs, const pkv__backend_config *c)
{
    pkv__free(a, s->total, pairs, sizeof *s->total);
    pkv__free(a, s->chunk, pairs, sizeof *s->chunk);
    pkv__free(a, s->acc, pairs, (size_t)c->head_dim * sizeof(float));
    pkv__free(a, s->tile, tile_floats(c), sizeof(float));
}

pkv_status pkv__cpu_scratch_init(const pkv__allocator *a,
                                 pkv__cpu_scratch *s, size_t pairs,
                                 const pkv__backend_config *c)
{
    s->total = pkv__calloc(a, pairs, sizeof *s->total);
    s->chunk = pkv__calloc(a, pairs, sizeof *s->chunk);
    s->acc = pkv__calloc(a, pairs, (size_t)c->head_dim * sizeof(float));
    s->tile = pkv__calloc(a, tile_floats(c), sizeof(float));
    return s->total != NULL && s->chunk != NULL && s->acc != NULL &&
                   s->tile != NULL
               ? PKV_OK
               : PKV_ERR_OUT_OF_MEMORY;
}

/* A layer's attention as the tasks' shared argument. */
typedef struct attend_job {
    const pkv__backend *b;
    uint32_t layer;
    uint32_t window;
    const float *q;
    float *out;
    float scale;
} attend_job;

/* The first token a row at token tok sees. */
static uint32_t window_start(uint32_t tok, uint32_t window)
{
    return window > 0 && tok + 1 > window ? tok + 1 - window : 0;
}

/* A task's rows as tokens of its sequence, and its (row, head) pairs. */
typedef struct tile_view {
    uint32_t q0;    /* the sequence's first row in the step */
    uint32_t first; /* the token of the sequence's first row */
    uint32_t ctx;
    uint32_t pairs;
} tile_view;

static tile_view view_of(const pkv__backend *b, const pkv__cpu_task *t)
{
    const pkv__step *s = &b->step;
    uint32_t q0 = s->query_start[t->seq];
    uint32_t rows = s->query_start[t->seq + 1] - q0;
    uint32_t group = b->cfg.num_q_heads / b->cfg.num_kv_heads;
    return (tile_view){q0, s->context_lens[t->seq] - rows,
                       s->context_lens[t->seq], (t->r1 - t->r0) * group};
}

/* Pair i of task t: its query (and output) row in q's layout. */
static size_t pair_row(const pkv__backend *b, const pkv__cpu_task *t,
                       const tile_view *v, uint32_t i)
{
    uint32_t group = b->cfg.num_q_heads / b->cfg.num_kv_heads;
    uint32_t r = t->r0 + i / group, g = i % group;
    return ((size_t)(v->q0 + r) * b->cfg.num_q_heads + t->h * group + g) *
           b->cfg.head_dim;
}

/* The chunks rows [r0, r1) of sequence seq see: [*c0, *c1). */
static void chunks_seen(const pkv__backend *b, uint32_t seq, uint32_t r0,
                        uint32_t r1, uint32_t window, uint32_t *c0,
                        uint32_t *c1)
{
    const pkv__step *s = &b->step;
    uint32_t rows = s->query_start[seq + 1] - s->query_start[seq];
    uint32_t first = s->context_lens[seq] - rows;
    *c0 = window_start(first + r0, window) / CHUNK_TOKENS;
    *c1 = (first + r1 - 1) / CHUNK_TOKENS + 1;
}

/* Block j's K or V rows as stored: its part, or for a quantized cache's
 * last block the sequence's f32 staging tail (also when this step froze
 * it: a step's rows see the block they write as plain decoding's one row
 * does). */
static pkv__rows rows_of(const pkv__backend *b, uint32_t layer, uint32_t seq,
                         uint32_t blk, int tail, uint32_t h, int kv,
                         const pkv__rows_format **format)
{
    if (tail) {
        *format = &b->tail_format;
        const float *rows =
            pkv__cpu_stage(b, b->step.stages[seq], layer, h, kv);
        return (pkv__rows){(const uint8_t *)(const void *)rows, NULL, NULL,
                           NULL};
    }
    *format = &b->formats[kv];
    const uint8_t *part = pkv__cpu_part(b, layer, blk, h, kv);
    return (pkv__rows){part, part + b->lo_at[kv], part + b->scale_at[kv],
                       NULL};
}

/* Rows r converted once into tile for a task's many quads (f32 rows are
 * read in place). */
static void convert_once(const pkv__backend *b, const pkv__rows_format *f,
                         pkv__rows *r, uint32_t n, float *tile)
{
    if (f->dtype == PKV_KV_DTYPE_F32)
        return;
    b->math->convert(f, r, n, b->cfg.head_dim, tile);
    r->values = tile;
}

/* Fold chunk k of task t's context into st and acc (per pair, each
 * started empty): block by block, the pairs four at a time; tile: the
 * worker's scratch for converted rows. */
static void fold_chunk(const attend_job *job, const pkv__cpu_task *t,
                       const tile_view *v, uint32_t k, pkv__softmax *st,
                       float *acc, float *tile)
{
    const pkv__backend *b = job->b;
    const pkv__backend_config *c = &b->cfg;
    const pkv__step *s = &b->step;
    const pkv__attend_math *math = b->math;
    uint32_t group = c->num_q_heads / c->num_kv_heads;
    uint32_t d = c->head_dim, bs = c->block_size;
    for (uint32_t i = 0; i < v->pairs; i++)
        st[i] = (pkv__softmax){-INFINITY, 0.0f};
    memset(acc, 0, (size_t)v->pairs * d * sizeof(float));
    uint32_t from = window_start(v->first + t->r0, job->window);
    uint32_t to = v->first + t->r1; /* tokens before it */
    from = from > k * CHUNK_TOKENS ? from : k * CHUNK_TOKENS;
    to = to < (k + 1) * CHUNK_TOKENS ? to : (k + 1) * CHUNK_TOKENS;
    const uint32_t *table =
        s->block_tables[pkv__backend_group(c, job->layer) * s->num_seqs +
                        t->seq];
    int quantized = pkv__backend_quantized(c);
    float sc[PKV__QUAD * STRIDE];
    for (uint32_t j = from / bs; j * bs < to; j++) {
        uint32_t b0 = j * bs;
        uint32_t n = v->ctx - b0 < bs ? v->ctx - b0 : bs;
        int tail = quantized && b0 + bs >= v->ctx;
        const pkv__rows_format *kf, *vf;
        pkv__rows kr = rows_of(b, job->layer, t->seq, table[j], tail, t->h,
                               0, &kf);
        pkv__rows vr = rows_of(b, job->layer, t->seq, table[j], tail, t->h,
                               1, &vf);
        if (v->pairs > CONVERT_QUADS * PKV__QUAD) {
            convert_once(b, kf, &kr, n, tile);
            convert_once(b, vf, &vr, n, tile + (size_t)bs * d);
        }
        for (uint32_t x = 0; x < v->pairs; x += PKV__QUAD) {
            uint32_t m = v->pairs - x < PKV__QUAD ? v->pairs - x : PKV__QUAD;
            const float *qs[PKV__QUAD];
            float *accs[PKV__QUAD];
            pkv__softmax *sts[PKV__QUAD];
            uint32_t a[PKV__QUAD], z[PKV__QUAD], lo = n, hi = 0;
            float keep[PKV__QUAD];
            for (uint32_t i = 0; i < m; i++) {
                uint32_t tok = v->first + t->r0 + (x + i) / group;
                uint32_t start = window_start(tok, job->window);
                qs[i] = job->q + pair_row(b, t, v, x + i);
                accs[i] = acc + (size_t)(x + i) * d;
                sts[i] = &st[x + i];
                a[i] = start > b0 ? start - b0 : 0;
                z[i] = tok < b0 ? 0 : tok + 1 - b0 < n ? tok + 1 - b0 : n;
                if (a[i] < z[i]) {
                    lo = a[i] < lo ? a[i] : lo;
                    hi = z[i] > hi ? z[i] : hi;
                }
            }
            if (lo >= hi)
                continue;
            math->scores(kf, &kr, lo, hi - lo, d, qs, m, sc, STRIDE);
            math->weigh(sc, STRIDE, m, n, a, z, job->scale, sts, keep);
            math->accumulate(vf, &vr, lo, hi - lo, d, sc, STRIDE, m, keep,
                             accs);
        }
    }
}

/* Fold a chunk's state and accumulator into a running total: the online
 * softmax's merge. A chunk the pair saw nothing of (l = 0: a chunk that
 * saw a token has l >= 1, or NaN from a NaN query) changes nothing; an
 * empty total takes the chunk as it is. */
static void merge(pkv__softmax *total, float *acc_total,
                  const pkv__softmax *chunk, const float *acc_chunk,
                  uint32_t d)
{
    if (chunk->l == 0.0f)
        return;
    if (total->l == 0.0f) {
        *total = *chunk;
        memcpy(acc_total, acc_chunk, (size_t)d * sizeof(float));
        return;
    }
    float m = total->m > chunk->m ? total->m : chunk->m;
    float kt = expf(total->m - m), kc = expf(chunk->m - m);
    total->l = total->l * kt + chunk->l * kc;
    total->m = m;
    for (uint32_t x = 0; x < d; x++)
        acc_total[x] = acc_total[x] * kt + acc_chunk[x] * kc;
}

/* Every row sees at least its own token, so l >= 1 (or NaN). */
static void normalize(float *o, const pkv__softmax *total, uint32_t d)
{
    float inv = 1.0f / total->l;
    for (uint32_t x = 0; x < d; x++)
        o[x] *= inv;
}

static void run_task(void *arg, uint32_t index, uint32_t worker)
{
    const attend_job *job = arg;
    const pkv__backend *b = job->b;
    const pkv__cpu_task *t = &b->tasks[index];
    pkv__cpu_scratch *w = &b->scratch[worker];
    uint32_t d = b->cfg.head_dim;
    tile_view v = view_of(b, t);
    if (t->part != PKV__NO_PART) {
        for (uint32_t k = t->c0; k < t->c1; k++) {
            size_t slot = t->part + (size_t)(k - t->c0) * v.pairs;
            fold_chunk(job, t, &v, k, b->part_state + slot,
                       b->part_acc + slot * d, w->tile);
        }
        return;
    }
    for (uint32_t i = 0; i < v.pairs; i++)
        w->total[i] = (pkv__softmax){-INFINITY, 0.0f};
    for (uint32_t k = t->c0; k < t->c1; k++) {
        fold_chunk(job, t, &v, k, w->chunk, w->acc, w->tile);
        for (uint32_t i = 0; i < v.pairs; i++)
            merge(&w->total[i], job->out + pair_row(b, t, &v, i),
                  &w->chunk[i], w->acc + (size_t)i * d, d);
    }
    for (uint32_t i = 0; i < v.pairs; i++)
        normalize(job->out + pair_row(b, t, &v, i), &w->total[i], d);
}

/* A split tile's partial results merged in chunk order into its rows. */
static void run_merge(void *arg, uint32_t index, uint32_t worker)
{
    const attend_job *job = arg;
    const pkv__backend *b = job->b;
    const pkv__cpu_merge *mg = &b->merges[index];
    const pkv__cpu_task *t = &b->tasks[mg->task];
    uint32_t d = b->cfg.head_dim;
    tile_view v = view_of(b, t);
    (void)worker;
    for (uint32_t i = 0; i < v.pairs; i++) {
        pkv__softmax total = {-INFINITY, 0.0f};
        float *o = job->out + pair_row(b, t, &v, i);
        for (uint32_t k = 0; k < mg->chunks; k++) {
            size_t slot = t->part + (size_t)k * v.pairs + i;
            merge(&total, o, &b->part_state[slot], b->part_acc + slot * d,
                  d);
        }
        normalize(o, &total, d);
    }
}

/* What a layer's cut needs: tasks, partial results, split tiles. */
typedef struct cut_size {
    size_t tasks, parts, merges;
} cut_size;

/* Cut the layer into tasks (write: fill b's arrays, which are large
 * enough; else only count into *size). A sequence's last rows see the
 * most tokens: their tiles go first, so that threads taking tasks in
 * order end together. */
static void cut(pkv__backend *b, uint32_t window, int split, int write,
                cut_size *size)
{
    const pkv__step *s = &b->step;
    uint32_t hk = b->cfg.num_kv_heads, tile = b->tile_rows;
    uint32_t group = b->cfg.num_q_heads / hk;
    *size = (cut_size){0, 0, 0};
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t n = s->query_start[i + 1] - s->query_start[i];
        for (uint32_t c = (n + tile - 1) / tile; c > 0; c--)
            for (uint32_t h = 0; h < hk; h++) {
                uint32_t r0 = (c - 1) * tile;
                uint32_t r1 = n - r0 < tile ? n : r0 + tile;
                uint32_t c0, c1;
                chunks_seen(b, i, r0, r1, window, &c0, &c1);
                if (!split || r1 - r0 > SPLIT_ROWS || c1 - c0 < 2) {
                    if (write)
                        b->tasks[size->tasks] = (pkv__cpu_task){
                            i, h, r0, r1, c0, c1, PKV__NO_PART};
                    size->tasks++;
                    continue;
                }
                size_t pairs = (size_t)(r1 - r0) * group;
                if (write)
                    b->merges[size->merges] = (pkv__cpu_merge){
                        (uint32_t)size->tasks, c1 - c0};
                size->merges++;
                for (uint32_t k = c0; k < c1; k++) {
                    if (write)
                        b->tasks[size->tasks] = (pkv__cpu_task){
                            i, h, r0, r1, k, k + 1, (uint32_t)size->parts};
                    size->tasks++;
                    size->parts += pairs;
                }
            }
    }
}

static pkv_status grow(pkv__backend *b, void *array, size_t *capacity,
                       size_t needed, size_t size, void **out)
{
    if (pkv__grow(&b->alloc, array, capacity, 0, needed, size, out) != PKV_OK)
        return pkv__fail(PKV_ERR_OUT_OF_MEMORY, "attend: no memory");
    return PKV_OK;
}

pkv_status pkv__cpu_attend(pkv__backend *b, uint32_t layer, const float *q,
                           float *out, float scale, uint32_t sliding_window)
{
    pkv_status st = pkv__backend_layer_check(
        &b->cfg, b->have_step ? &b->step : NULL, layer, q, out);
    if (st != PKV_OK)
        return st;
    if (!(scale >= 0.0f) || isinf(scale))
        return pkv__fail(PKV_ERR_INVALID_ARGUMENT,
                         "attend: scale must be finite and >= 0");
    /* Split only where the lent threads would otherwise wait. */
    cut_size size;
    cut(b, sliding_window, 0, 0, &size);
    int split = b->cfg.parallel != NULL && b->workers > 1 &&
                size.tasks < (size_t)SPLIT_TILES * b->workers;
    if (split)
        cut(b, sliding_window, 1, 0, &size);
    if (size.tasks > UINT32_MAX || size.parts > UINT32_MAX)
        return pkv__fail(PKV_ERR_UNSUPPORTED, "attend: %zu tasks",
                         size.tasks);
    /* The arrays, grown here rather than at begin_step, which never
     * fails once the engine has planned. */
    void *grown;
    if ((st = grow(b, b->tasks, &b->tasks_capacity, size.tasks,
                   sizeof *b->tasks, &grown)) != PKV_OK)
        return st;
    b->tasks = grown;
    if ((st = grow(b, b->part_state, &b->part_state_capacity, size.parts,
                   sizeof *b->part_state, &grown)) != PKV_OK)
        return st;
    b->part_state = grown;
    if ((st = grow(b, b->part_acc, &b->part_acc_capacity, size.parts,
                   (size_t)b->cfg.head_dim * sizeof(float), &grown)) !=
        PKV_OK)
        return st;
    b->part_acc = grown;
    if ((st = grow(b, b->merges, &b->merges_capacity, size.merges,
                   sizeof *b->merges, &grown)) != PKV_OK)
        return st;
    b->merges = grown;
    cut(b, sliding_window, split, 1, &size);
    if (scale == 0.0f)
        scale = 1.0f / sqrtf((float)b->cfg.head_dim);
    attend_job job = {b, layer, sliding_window, q, out, scale};
    uint32_t tasks = (uint32_t)size.tasks, merges = (uint32_t)size.merges;
    if (b->cfg.parallel != NULL && tasks > 1) {
        b->cfg.parallel(b->cfg.parallel_user, run_task, &job, tasks);
        if (merges > 0)
            b->cfg.parallel(b->cfg.parallel_user, run_merge, &job, merges);
        return PKV_OK;
    }
    for (uint32_t i = 0; i < tasks; i++)
        run_task(&job, i, 0);
    for (uint32_t i = 0; i < merges; i++)
        run_merge(&job, i, 0);
    return PKV_OK;
}
