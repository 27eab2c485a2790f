/* SPDX-License-Identifier: MIT */
/* The CPU backend against the f64 dense reference: a grid of geometries,
 * with f32 KV within 1e-4 and f16/u8/u4 within the bound derived from their
 * storage error (docs/design.md, "Attention error bounds"); and every other
 * op: validation, non-finite rejection, copy, swap, staging tails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backend.h"
#include "dense_ref.h"
#include "half.h"
#include "kv_layout.h"
#include "quant.h"
#include "mem_util.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F32_TOL 1e-4

typedef struct seq_spec {
    uint32_t rows; /* query rows this step */
    uint32_t ctx;  /* context once they are written */
} seq_spec;

/* One test case: geometry, data, block tables, and the backend. */
typedef struct scenario {
    pkv__backend_config cfg;
    uint32_t num_seqs;
    seq_spec seqs[8];
    float *k[8], *v[8], *q[8]; /* per sequence, contiguous: [tok][head][d] */
    uint32_t *tables;          /* [num_seqs][max_blocks] */
    const uint32_t *rows[8];   /* each sequence's row of tables */
    uint32_t max_blocks;
    pkv__backend *be;
    pkv__allocator alloc;
} scenario;

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    assert_non_null(p);
    return p;
}

/* Fill every block and every staging tail with NaN bytes, so that a read
 * of a slot that was never written shows up in the output. */
static void poison(scenario *s)
{
    size_t bytes = pkv__backend_swap_block_bytes(&s->cfg);
    uint8_t *junk = xcalloc(bytes, 1);
    memset(junk, 0xff, bytes);
    for (uint32_t b = 1; b < s->cfg.num_blocks; b++)
        assert_int_equal(pkv__backend_cpu.swap_in(s->be, junk, &b, 1),
                         PKV_OK);
    free(junk);
    size_t stage_bytes = pkv__backend_stage_bytes(&s->cfg);
    uint8_t *tail = xcalloc(stage_bytes, 1);
    memset(tail, 0xff, stage_bytes);
    for (uint32_t i = 0; i < s->cfg.num_stages; i++)
        assert_int_equal(pkv__backend_cpu.stage_in(s->be, tail, i), PKV_OK);
    free(tail);
}

static void scenario_init(scenario *s, uint32_t d, uint32_t hq, uint32_t hkv,
                          uint32_t bs, int32_t dtype, int32_t kq, int32_t vq,
                          const seq_spec *seqs, uint32_t n, uint64_t seed,
                          uint32_t layers)
{
    memset(s, 0, sizeof *s);
    s->alloc = plain_allocator();
    s->num_seqs = n;
    memcpy(s->seqs, seqs, n * sizeof *seqs);
    uint64_t rng = seed;
    uint32_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nb = (seqs[i].ctx + bs - 1) / bs;
        total += nb;
        s->max_blocks = nb > s->max_blocks ? nb : s->max_blocks;
        size_t kv = (size_t)seqs[i].ctx * hkv * d,
               qn = (size_t)seqs[i].rows * hq * d;
        s->k[i] = xcalloc(kv, sizeof(float));
        s->v[i] = xcalloc(kv, sizeof(float));
        s->q[i] = xcalloc(qn, sizeof(float));
        test_normal_fill(&rng, s->k[i], kv);
        test_normal_fill(&rng, s->v[i], kv);
        test_normal_fill(&rng, s->q[i], qn);
    }
    s->max_blocks += 1; /* a spare column: tables are wider than needed */
    /* Twice the blocks needed, handed out in a random order: tables are
     * non-contiguous and unused blocks sit between them. */
    uint32_t nblocks = 2 * total + 2;
    uint32_t *perm = xcalloc(nblocks, sizeof *perm);
    for (uint32_t b = 0; b < nblocks - 1; b++)
        perm[b] = b + 1;
    for (uint32_t b = nblocks - 2; b > 0; b--) {
        uint32_t j = (uint32_t)(test_rand(&rng) % (b + 1));
        uint32_t t = perm[b];
        perm[b] = perm[j];
        perm[j] = t;
    }
    s->tables = xcalloc((size_t)n * s->max_blocks, sizeof *s->tables);
    uint32_t next = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j * bs < seqs[i].ctx; j++)
            s->tables[(size_t)i * s->max_blocks + j] = perm[next++];
    for (uint32_t i = 0; i < n; i++)
        s->rows[i] = s->tables + (size_t)i * s->max_blocks;
    free(perm);
    /* Quantized: a second tail per sequence, for the fork test. U4
     * groups of 32 channels, or 16 where 32 does not divide head_dim. */
    pkv__backend_config cfg = {
        .num_layers = layers,
        .num_q_heads = hq,
        .num_kv_heads = hkv,
        .head_dim = d,
        .block_size = bs,
        .num_blocks = nblocks,
        .kv_dtype = dtype,
        .key_quant = kq,
        .value_quant = vq,
        .u4_group = d % 32 == 0 ? 32 : 16,
        .num_stages = PKV_LAYOUT_QUANTIZED(dtype) ? 2 * n : 0,
    };
    s->cfg = cfg;
    assert_int_equal(pkv__backend_cpu.create(&s->cfg, &s->alloc, &s->be),
                     PKV_OK);
    poison(s);
}

static void scenario_free(scenario *s)
{
    pkv__backend_cpu.destroy(s->be);
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        free(s->k[i]);
        free(s->v[i]);
        free(s->q[i]);
    }
    free(s->tables);
}

/* The step arrays for tokens [from[i], to[i]) of each sequence. */
typedef struct step_arrays {
    pkv__step step;
    uint32_t query_start[9];
    uint32_t context_lens[8];
    uint32_t stages[8];
    uint64_t *slots;
    float *k, *v, *q, *out;
} step_arrays;

static void step_build(const scenario *s, step_arrays *a,
                       const uint32_t *from, const uint32_t *to)
{
    const pkv__backend_config *c = &s->cfg;
    uint32_t t = 0;
    a->query_start[0] = 0;
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        t += to[i] - from[i];
        a->query_start[i + 1] = t;
        a->context_lens[i] = to[i];
        a->stages[i] = i;
    }
    size_t kvrow = (size_t)c->num_kv_heads * c->head_dim;
    size_t qrow = (size_t)c->num_q_heads * c->head_dim;
    a->slots = xcalloc(t, sizeof *a->slots);
    a->k = xcalloc(t * kvrow, sizeof(float));
    a->v = xcalloc(t * kvrow, sizeof(float));
    a->q = xcalloc(t * qrow, sizeof(float));
    a->out = xcalloc(t * qrow, sizeof(float));
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t row = a->query_start[i];
        for (uint32_t tok = from[i]; tok < to[i]; tok++, row++) {
            uint32_t blk =
                s->tables[(size_t)i * s->max_blocks + tok / c->block_size];
            a->slots[row] = (uint64_t)blk * c->block_size + tok % c->block_size;
            memcpy(a->k + row * kvrow, s->k[i] + tok * kvrow,
                   kvrow * sizeof(float));
            memcpy(a->v + row * kvrow, s->v[i] + tok * kvrow,
                   kvrow * sizeof(float));
            /* q rows exist for the sequence's last rows only */
            uint32_t qr = tok + s->seqs[i].rows - s->seqs[i].ctx;
            if (tok + s->seqs[i].rows >= s->seqs[i].ctx)
                memcpy(a->q + row * qrow, s->q[i] + qr * qrow,
                       qrow * sizeof(float));
        }
    }
    pkv__step step = {s->num_seqs,
                      t,
                      a->query_start,
                      a->context_lens,
                      s->rows,
                      s->max_blocks,
                      NULL,
                      a->slots,
                      PKV_LAYOUT_QUANTIZED(c->kv_dtype) ? a->stages : NULL,
                      NULL};
    a->step = step;
}

static void step_free(step_arrays *a)
{
    free(a->slots);
    free(a->k);
    free(a->v);
    free(a->q);
    free(a->out);
}

/* Layer 0 holds the scenario's K and V; every other layer holds them
 * swapped (V as keys, K as values), so that layers can be told apart. */
static void append_layers(scenario *s, const step_arrays *a)
{
    for (uint32_t l = 0; l < s->cfg.num_layers; l++)
        assert_int_equal(pkv__backend_cpu.append(s->be, l, l ? a->v : a->k,
                                                 l ? a->k : a->v),
                         PKV_OK);
}

/* Write the history (every token before this step's rows) in one step,
 * then this step's rows, and attend. a holds the last step. */
static void scenario_run(scenario *s, step_arrays *a, uint32_t window)
{
    uint32_t from[8], to[8];
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        from[i] = 0;
        to[i] = s->seqs[i].ctx - s->seqs[i].rows;
    }
    step_arrays hist;
    step_build(s, &hist, from, to);
    assert_int_equal(pkv__backend_cpu.begin_step(s->be, &hist.step), PKV_OK);
    append_layers(s, &hist);
    step_free(&hist);
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        from[i] = to[i];
        to[i] = s->seqs[i].ctx;
    }
    step_build(s, a, from, to);
    assert_int_equal(pkv__backend_cpu.begin_step(s->be, &a->step), PKV_OK);
    append_layers(s, a);
    assert_int_equal(
        pkv__backend_cpu.attend(s->be, 0, a->q, a->out, 0.0f, window),
        PKV_OK);
}

/* Per-element storage error bound of one cached tensor ([ctx][hkv][d]):
 * f16 rounding (half an ulp), or u8/u4 scale / 2 plus the quantizer's f32
 * tolerance in frozen blocks and 0 in the staging tail. */
static double *storage_bounds(const scenario *s, const float *x, uint32_t ctx,
                              int kv)
{
    const pkv__backend_config *c = &s->cfg;
    uint32_t hkv = c->num_kv_heads, d = c->head_dim, bs = c->block_size;
    double *e = xcalloc((size_t)ctx * hkv * d, sizeof *e);
    if (c->kv_dtype == PKV_KV_DTYPE_F32)
        return e;
    if (c->kv_dtype == PKV_KV_DTYPE_F16) {
        for (size_t i = 0; i < (size_t)ctx * hkv * d; i++) {
            double r = ldexp(fabs((double)x[i]), -11);
            e[i] = r > ldexp(1.0, -25) ? r : ldexp(1.0, -25);
        }
        return e;
    }
    uint32_t frozen = ctx / bs * bs;
    pkv__qformat f = pkv__backend_qformat(c, kv);
    int per_channel = f.group == PKV_QUANT_GROUP_PER_CHANNEL;
    uint32_t width = PKV_LAYOUT_Q_WIDTH((uint32_t)f.dtype, f.u4_group, d);
    uint32_t per_row = d / width; /* per-token groups of a row */
    uint32_t gs = per_channel ? bs : width;
    uint32_t levels = pkv__quant_levels(f.dtype);
    for (uint32_t h = 0; h < hkv; h++)
        for (uint32_t t0 = 0; t0 < frozen; t0 += bs)
            for (uint32_t g = 0; g < (per_channel ? d : bs * per_row); g++) {
                /* Element i of group g: its index in x and e. */
                size_t at[PKV_LAYOUT_MAX_HEAD_DIM]; /* >= bs and width */
                float mn = INFINITY, mx = -INFINITY;
                for (uint32_t i = 0; i < gs; i++) {
                    uint32_t tok = per_channel ? t0 + i : t0 + g / per_row;
                    uint32_t ch = per_channel ? g : g % per_row * width + i;
                    at[i] = ((size_t)tok * hkv + h) * d + ch;
                    mn = x[at[i]] < mn ? x[at[i]] : mn;
                    mx = x[at[i]] > mx ? x[at[i]] : mx;
                }
                uint16_t l16, s16;
                pkv__quant_params(mn, mx, levels, &l16, &s16);
                double lo = pkv__f16_to_f32(l16), sc = pkv__f16_to_f32(s16);
                double bound = sc / 2 + ldexp(fabs(lo) + 256.0 * sc, -20);
                for (uint32_t i = 0; i < gs; i++)
                    e[at[i]] = bound;
            }
    return e;
}

typedef struct check_stats {
    double max_err;   /* worst absolute error */
    double max_ratio; /* worst error / allowed */
    uint64_t checked;
} check_stats;

/* Compare the step's output with the f64 reference on a sample of rows
 * (all rows of short sequences; every 8th and the last of long ones),
 * against the bound of docs/design.md plus the f32 arithmetic allowance. */
/* The rows of sequence i that are checked: all rows of short sequences;
 * every 16th and the last of long ones. */
static uint32_t checked_rows(uint32_t nq, uint32_t *rows)
{
    uint32_t n = 0;
    for (uint32_t r = 0; r < nq; r++)
        if (nq <= 17 || r % 16 == 0 || r == nq - 1)
            rows[n++] = r;
    return n;
}

/* The f64 reference outputs of the checked rows, per sequence. */
static void scenario_reference(const scenario *s, uint32_t window,
                               double **ref)
{
    const pkv__backend_config *c = &s->cfg;
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t rows[64];
        uint32_t n_rows = checked_rows(s->seqs[i].rows, rows);
        ref[i] = xcalloc((size_t)n_rows * c->num_q_heads * c->head_dim,
                         sizeof *ref[i]);
        dense_ref_attention(s->q[i], s->k[i], s->v[i], s->seqs[i].rows,
                            s->seqs[i].ctx, c->num_q_heads, c->num_kv_heads,
                            c->head_dim, 0.0, window, rows, n_rows, ref[i]);
    }
}

static void scenario_check(const scenario *s, const step_arrays *a,
                           uint32_t window, double *const *refs,
                           check_stats *st)
{
    const pkv__backend_config *c = &s->cfg;
    uint32_t hq = c->num_q_heads, hkv = c->num_kv_heads, d = c->head_dim;
    uint32_t group = hq / hkv;
    double scale = 1.0 / sqrt((double)d);
    for (uint32_t i = 0; i < s->num_seqs; i++) {
        uint32_t nq = s->seqs[i].rows, ctx = s->seqs[i].ctx;
        uint32_t rows[64];
        uint32_t n_rows = checked_rows(nq, rows);
        const double *ref = refs[i];
        double *ek = storage_bounds(s, s->k[i], ctx, 0);
        double *ev = storage_bounds(s, s->v[i], ctx, 1);
        double *vmin = xcalloc(d, sizeof *vmin);
        double *vmax = xcalloc(d, sizeof *vmax);
        double *evmax = xcalloc(d, sizeof *evmax);
        for (uint32_t x = 0; x < n_rows; x++) {
            uint32_t tok = ctx - nq + rows[x];
            uint32_t lo = window > 0 && tok + 1 > window ? tok + 1 - window : 0;
            for (uint32_t g = 0; g < hkv; g++) {
                /* The range of V and its largest storage error over the
                 * tokens the row sees. */
                for (uint32_t ch = 0; ch < d; ch++) {
                    vmin[ch] = INFINITY;
                    vmax[ch] = -INFINITY;
                    evmax[ch] = 0.0;
                }
                for (uint32_t j = lo; j <= tok; j++) {
                    const float *vr = s->v[i] + ((size_t)j * hkv + g) * d;
                    const double *er = ev + ((size_t)j * hkv + g) * d;
                    for (uint32_t ch = 0; ch < d; ch++) {
                        vmin[ch] = vr[ch] < vmin[ch] ? vr[ch] : vmin[ch];
                        vmax[ch] = vr[ch] > vmax[ch] ? vr[ch] : vmax[ch];
                        evmax[ch] = er[ch] > evmax[ch] ? er[ch] : evmax[ch];
                    }
                }
                for (uint32_t h = g * group; h < (g + 1) * group; h++) {
                    const float *qr = s->q[i] + ((size_t)rows[x] * hq + h) * d;
                    /* Delta: the largest score perturbation. */
                    double delta = 0.0;
                    for (uint32_t j = lo;
                         c->kv_dtype != PKV_KV_DTYPE_F32 && j <= tok; j++) {
                        const double *e = ek + ((size_t)j * hkv + g) * d;
                        double sum = 0.0;
                        for (uint32_t ch = 0; ch < d; ch++)
                            sum += fabs((double)qr[ch]) * e[ch];
                        delta = sum * scale > delta ? sum * scale : delta;
                    }
                    double grow = expm1(2.0 * delta);
                    const float *o =
                        a->out +
                        ((size_t)(a->query_start[i] + rows[x]) * hq + h) * d;
                    const double *r = ref + ((size_t)x * hq + h) * d;
                    for (uint32_t ch = 0; ch < d; ch++) {
                        double allowed = grow * (vmax[ch] - vmin[ch]) / 2 +
                                         evmax[ch] + F32_TOL;
                        double err = fabs((double)o[ch] - r[ch]);
                        if (!(err <= allowed))
                            fail_msg("seq %u row %u head %u ch %u: |%g - %g| "
                                     "= %g > %g (d %u hq %u hkv %u bs %u "
                                     "dtype %d)",
                                     i, rows[x], h, ch, (double)o[ch], r[ch],
                                     err, allowed, d, hq, hkv, c->block_size,
                                     (int)c->kv_dtype);
                        st->max_err = err > st->max_err ? err : st->max_err;
                        double ratio = err / allowed;
                        st->max_ratio =
                            ratio > st->max_ratio ? ratio : st->max_ratio;
                        st->checked++;
                    }
                }
            }
        }
        free(vmin);
        free(vmax);
        free(evmax);
        free(ek);
        free(ev);
    }
}

static const seq_spec GRID_BATCH[] = {
    {1, 1}, {1, 1000}, {17, 17}, {3, 16}, {98, 1145}};
static const uint32_t GRID_HEAD_DIMS[] = {64, 80, 128, 256};
static const uint32_t GRID_HEADS[][2] = {{8, 8}, {32, 8}, {9, 3}};
static const uint32_t GRID_BLOCKS[] = {8, 16, 32};

/*
 * The grid (for the head dims given by index): every (head_dim, heads)
 * pair draws one data set and computes its f64 reference once; the three
 * block sizes then run it with the five KV dtypes in rotation (dtype
 * (di + hi + bi) % 5), so that every dtype meets every head_dim, every
 * heads pair and every block size. The quantized dtypes alternate their
 * groups (keys per-channel and values per-token, then the reverse); U4
 * per-token groups are 32 channels (16 at head_dim 80).
 */
static void run_grid(const size_t *head_dims, size_t n_head_dims)
{
    check_stats st[5];
    memset(st, 0, sizeof st);
    for (size_t x = 0; x < n_head_dims; x++)
        for (size_t hi = 0; hi < 3; hi++) {
            size_t di = head_dims[x];
            uint64_t seed = 1 + di * 3 + hi;
            double *ref[5];
            for (size_t bi = 0; bi < 3; bi++) {
                int32_t dtype = (int32_t)((di + hi + bi) % 5);
                int swap = di % 2 == 1;
                int32_t kq = swap ? PKV_QUANT_GROUP_PER_TOKEN
                                  : PKV_QUANT_GROUP_PER_CHANNEL;
                int32_t vq = swap ? PKV_QUANT_GROUP_PER_CHANNEL
                                  : PKV_QUANT_GROUP_PER_TOKEN;
                scenario s;
                step_arrays a;
                scenario_init(&s, GRID_HEAD_DIMS[di], GRID_HEADS[hi][0],
                              GRID_HEADS[hi][1], GRID_BLOCKS[bi], dtype, kq,
                              vq, GRID_BATCH, 5, seed, 1);
                if (bi == 0)
                    scenario_reference(&s, 0, ref);
                scenario_run(&s, &a, 0);
                scenario_check(&s, &a, 0, ref, &st[dtype]);
                step_free(&a);
                scenario_free(&s);
            }
            for (size_t i = 0; i < 5; i++)
                free(ref[i]);
        }
    for (int dt = 0; dt < 5; dt++)
        print_message("kv dtype %d: %llu outputs, max |err| %.3g, max "
                      "err/allowed %.3g\n",
                      dt, (unsigned long long)st[dt].checked, st[dt].max_err,
                      st[dt].max_ratio);
}

/* The grid in two halves by head_dim, {64, 256} and {80, 128}, built as
 * two executables (GRID_SECOND_HALF) so that ctest -j runs them side by
 * side: under ASan the whole grid takes over a minute. */
#ifndef GRID_SECOND_HALF
static void grid_first_half(void **state)
{
    (void)state;
    static const size_t head_dims[] = {0, 3};
    run_grid(head_dims, 2);
}
#else
static void grid_second_half(void **state)
{
    (void)state;
    static const size_t head_dims[] = {1, 2};
    run_grid(head_dims, 2);
}
#endif

#ifndef GRID_SECOND_HALF
/* Reference and check of the step's output (layer 0) in one call. */
static void verify(const scenario *s, const step_arrays *a, uint32_t window)
{
    double *ref[8];
    check_stats st = {0, 0, 0};
    scenario_reference(s, window, ref);
    scenario_check(s, a, window, ref, &st);
    for (uint32_t i = 0; i < s->num_seqs; i++)
        free(ref[i]);
    assert_true(st.checked > 0);
}

static const seq_spec SMALL_BATCH[] = {{3, 21}, {1, 9}, {5, 5}, {40, 140}};

static void sliding_window(void **state)
{
    (void)state;
    static const uint32_t windows[] = {1, 7, 16, 50};
    for (int32_t dtype = 0; dtype < 3; dtype++)
        for (size_t w = 0; w < 4; w++) {
            scenario s;
            step_arrays a;
            scenario_init(&s, 64, 8, 2, 16, dtype, PKV_QUANT_GROUP_PER_CHANNEL,
                          PKV_QUANT_GROUP_PER_TOKEN, SMALL_BATCH, 4, 100 + w,
                          1);
            scenario_run(&s, &a, windows[w]);
            verify(&s, &a, windows[w]);
            step_free(&a);
            scenario_free(&s);
        }
}

/* pkv_parallel_fn for the tests: the tasks in reverse order, on the
 * workers in turn, counted. */
typedef struct fake_pool {
    uint32_t workers, calls, tasks;
} fake_pool;

static void fake_parallel(void *user, pkv_task_fn task, void *arg,
                          uint32_t count)
{
    fake_pool *p = user;
    p->calls++;
    p->tasks += count;
    for (uint32_t i = count; i > 0; i--)
        task(arg, i - 1, (count - i) % p->workers);
}

/* A scenario's backend made again with the host's threads lent:
 * fake_parallel on `workers` workers. */
static void lend_workers(scenario *s, fake_pool *pool)
{
    pkv__backend_cpu.destroy(s->be);
    s->cfg.parallel = fake_parallel;
    s->cfg.parallel_user = pool;
    s->cfg.workers = pool->workers;
    assert_int_equal(pkv__backend_cpu.create(&s->cfg, &s->alloc, &s->be),
                     PKV_OK);
    poison(s);
}

/* Attention cut into tasks run in another order on 2 or 3 workers gives
 * the same bytes as the caller running them in order, for every format,
 * GQA 1 to 8, head_dims 64 to 256 and windows; and where few tiles hold
 * long contexts (decode), the cut splits them by context chunk, and a
 * second round merges the chunks: the same bytes again, and right
 * against the reference. */
static const seq_spec LONG_BATCH[] = {{1, 1000}, {3, 600}};

static void parallel_same_result(void **state)
{
    (void)state;
    static const uint32_t windows[] = {0, 7, 300};
    static const uint32_t shapes[][3] = {
        {64, 8, 8}, {128, 8, 2}, {256, 4, 1}, {64, 16, 2}, {80, 9, 3}};
    for (size_t x = 0; x < 5 * 3 * 2; x++) {
        const uint32_t *g = shapes[(x + x / 5) % 5];
        int32_t dtype = (int32_t)(x % 5);
        uint32_t window = windows[x / 5 % 3];
        int long_batch = (int)(x / 15);
        int32_t kq = x % 2 ? PKV_QUANT_GROUP_PER_TOKEN
                           : PKV_QUANT_GROUP_PER_CHANNEL;
        int32_t vq = x % 2 ? PKV_QUANT_GROUP_PER_CHANNEL
                           : PKV_QUANT_GROUP_PER_TOKEN;
        const seq_spec *batch = long_batch ? LONG_BATCH : SMALL_BATCH;
        uint32_t nseq = long_batch ? 2 : 4;
        scenario s;
        step_arrays a;
        scenario_init(&s, g[0], g[1], g[2], 16, dtype, kq, vq, batch, nseq,
                      200 + x, 1);
        scenario_run(&s, &a, window);
        verify(&s, &a, window);
        for (uint32_t workers = 2; workers <= 3; workers++) {
            scenario t;
            step_arrays b;
            fake_pool pool = {workers, 0, 0};
            scenario_init(&t, g[0], g[1], g[2], 16, dtype, kq, vq, batch,
                          nseq, 200 + x, 1);
            lend_workers(&t, &pool);
            scenario_run(&t, &b, window);
            assert_int_equal(a.step.num_tokens, b.step.num_tokens);
            assert_memory_equal(a.out, b.out,
                                (size_t)a.step.num_tokens * g[1] * g[0] *
                                    sizeof(float));
            /* Long contexts over fewer than 4 tiles a worker: the tasks,
             * then the merges (a window of 7 keeps each row in one chunk:
             * nothing to split). */
            uint32_t tiles = nseq * g[2];
            if (long_batch && window != 7 && tiles < 4 * workers) {
                assert_int_equal(pool.calls, 2);
                assert_true(pool.tasks > 2 * tiles);
            } else {
                assert_int_equal(pool.calls, 1);
            }
            step_free(&b);
            scenario_free(&t);
        }
        step_free(&a);
        scenario_free(&s);
    }
}

/* Layer l > 0 holds K and V swapped: attention there equals the reference
 * with the roles swapped, and writing it left layer 0 alone. */
static void layers_are_separate(void **state)
{
    (void)state;
    for (int32_t dtype = 0; dtype < 3; dtype++) {
        scenario s;
        step_arrays a;
        scenario_init(&s, 80, 9, 3, 8, dtype, PKV_QUANT_GROUP_PER_TOKEN,
                      PKV_QUANT_GROUP_PER_CHANNEL, SMALL_BATCH, 4, 7, 3);
        scenario_run(&s, &a, 0);
        verify(&s, &a, 0);
        for (uint32_t l = 1; l < 3; l++) {
            assert_int_equal(
                pkv__backend_cpu.attend(s.be, l, a.q, a.out, 0.0f, 0),
                PKV_OK);
            for (uint32_t i = 0; i < s.num_seqs; i++) {
                float *t = s.k[i];
                s.k[i] = s.v[i];
                s.v[i] = t;
            }
            /* swap the quant groups with them for the bound */
            int32_t kq = s.cfg.key_quant;
            s.cfg.key_quant = s.cfg.value_quant;
            s.cfg.value_quant = kq;
            verify(&s, &a, 0);
            for (uint32_t i = 0; i < s.num_seqs; i++) {
                float *t = s.k[i];
                s.k[i] = s.v[i];
                s.v[i] = t;
            }
            s.cfg.value_quant = s.cfg.key_quant;
            s.cfg.key_quant = kq;
        }
        step_free(&a);
        scenario_free(&s);
    }
}

/* Copy every block of every sequence to a free block and its tail to a
 * second tail (a fork), point the step at the copies, poison the
 * originals: attention gives the same bytes. Then swap the copies out,
 * poison them, swap them back in: the same bytes again. */
static void copy_fork_and_swap(void **state)
{
    (void)state;
    for (int32_t dtype = 0; dtype <= PKV_KV_DTYPE_U8K_U4V; dtype++) {
        scenario s;
        step_arrays a;
        scenario_init(&s, 64, 8, 4, 16, dtype, PKV_QUANT_GROUP_PER_CHANNEL,
                      PKV_QUANT_GROUP_PER_TOKEN, SMALL_BATCH, 4, 11, 2);
        scenario_run(&s, &a, 0);
        size_t out_bytes = (size_t)a.step.num_tokens * 8 * 64 * sizeof(float);
        float *first = xcalloc(out_bytes, 1);
        memcpy(first, a.out, out_bytes);

        uint8_t *used = xcalloc(s.cfg.num_blocks, 1);
        size_t cells = (size_t)s.num_seqs * s.max_blocks;
        for (size_t x = 0; x < cells; x++)
            used[s.tables[x]] = 1;
        pkv__block_copy *pairs = xcalloc(cells, sizeof *pairs);
        uint32_t n = 0, next = 1;
        for (size_t x = 0; x < cells; x++) {
            if (s.tables[x] == 0)
                continue;
            while (used[next])
                next++;
            pairs[n].src = s.tables[x];
            pairs[n].dst = next++;
            s.tables[x] = pairs[n++].dst;
        }
        assert_int_equal(pkv__backend_cpu.copy_blocks(s.be, pairs, n), PKV_OK);
        for (uint32_t t = 0; t < a.step.num_tokens; t++) {
            uint64_t blk = a.slots[t] / 16, off = a.slots[t] % 16;
            for (uint32_t i = 0; i < n; i++)
                if (pairs[i].src == blk) {
                    a.slots[t] = (uint64_t)pairs[i].dst * 16 + off;
                    break;
                }
        }
        if (PKV_LAYOUT_QUANTIZED(dtype)) {
            pkv__block_copy forks[4];
            for (uint32_t i = 0; i < 4; i++) {
                forks[i].src = i;
                forks[i].dst = 4 + i;
                a.stages[i] = 4 + i;
            }
            assert_int_equal(pkv__backend_cpu.copy_stages(s.be, forks, 4),
                             PKV_OK);
        }
        /* Poison the originals (blocks and tails). */
        size_t bb = pkv__backend_swap_block_bytes(&s.cfg);
        size_t sb = pkv__backend_stage_bytes(&s.cfg);
        uint8_t *junk = xcalloc(bb > sb ? bb : sb, 1);
        memset(junk, 0xff, bb > sb ? bb : sb);
        for (uint32_t i = 0; i < n; i++)
            assert_int_equal(
                pkv__backend_cpu.swap_in(s.be, junk, &pairs[i].src, 1),
                PKV_OK);
        for (uint32_t i = 0; PKV_LAYOUT_QUANTIZED(dtype) && i < 4; i++)
            assert_int_equal(pkv__backend_cpu.stage_in(s.be, junk, i), PKV_OK);
        assert_int_equal(pkv__backend_cpu.begin_step(s.be, &a.step), PKV_OK);
        assert_int_equal(pkv__backend_cpu.attend(s.be, 0, a.q, a.out, 0, 0),
                         PKV_OK);
        assert_memory_equal(first, a.out, out_bytes);

        /* Swap the copies (and tails) out and back in over poison. */
        uint32_t *ids = xcalloc(n, sizeof *ids);
        for (uint32_t i = 0; i < n; i++)
            ids[i] = pairs[i].dst;
        uint8_t *host = xcalloc(n, bb);
        uint8_t *tails = xcalloc(4, sb);
        assert_int_equal(pkv__backend_cpu.swap_out(s.be, ids, n, host),
                         PKV_OK);
        for (uint32_t i = 0; PKV_LAYOUT_QUANTIZED(dtype) && i < 4; i++)
            assert_int_equal(
                pkv__backend_cpu.stage_out(s.be, 4 + i, tails + i * sb),
                PKV_OK);
        for (uint32_t i = 0; i < n; i++)
            assert_int_equal(pkv__backend_cpu.swap_in(s.be, junk, &ids[i], 1),
                             PKV_OK);
        for (uint32_t i = 0; PKV_LAYOUT_QUANTIZED(dtype) && i < 4; i++) {
            assert_int_equal(pkv__backend_cpu.stage_in(s.be, junk, 4 + i),
                             PKV_OK);
            assert_int_equal(
                pkv__backend_cpu.stage_in(s.be, tails + i * sb, 4 + i),
                PKV_OK);
        }
        assert_int_equal(pkv__backend_cpu.swap_in(s.be, host, ids, n), PKV_OK);
        memset(a.out, 0, out_bytes);
        assert_int_equal(pkv__backend_cpu.attend(s.be, 0, a.q, a.out, 0, 0),
                         PKV_OK);
        assert_memory_equal(first, a.out, out_bytes);

        free(ids);
        free(host);
        free(tails);
        free(junk);
        free(pairs);
        free(used);
        free(first);
        step_free(&a);
        scenario_free(&s);
    }
}

static void rejects_bad_config(void **state)
{
    (void)state;
    pkv__allocator al = plain_allocator();
    pkv__backend_config ok = {
        .num_layers = 2,
        .num_q_heads = 8,
        .num_kv_heads = 2,
        .head_dim = 64,
        .block_size = 16,
        .num_blocks = 10,
        .kv_dtype = PKV_KV_DTYPE_U8,
        .key_quant = PKV_QUANT_GROUP_PER_CHANNEL,
        .value_quant = PKV_QUANT_GROUP_PER_TOKEN,
        .num_stages = 4,
    };
    pkv__backend *be = (pkv__backend *)&al; /* must come back NULL */
    struct {
        pkv__backend_config c;
        pkv_status want;
    } cases[10];
    for (int i = 0; i < 10; i++)
        cases[i].c = ok;
    cases[0].c.num_q_heads = 9; /* not a multiple of 2 */
    cases[0].want = PKV_ERR_UNSUPPORTED;
    cases[1].c.head_dim = 66;
    cases[1].want = PKV_ERR_UNSUPPORTED;
    cases[2].c.block_size = 24;
    cases[2].want = PKV_ERR_UNSUPPORTED;
    cases[3].c.kv_dtype = 5;
    cases[3].want = PKV_ERR_INVALID_ARGUMENT;
    cases[4].c.key_quant = PKV_QUANT_GROUP_DEFAULT;
    cases[4].want = PKV_ERR_INVALID_ARGUMENT;
    cases[5].c.kv_dtype = PKV_KV_DTYPE_F16; /* tails with a float cache */
    cases[5].want = PKV_ERR_INVALID_ARGUMENT;
    cases[6].c.num_blocks = 1;
    cases[6].want = PKV_ERR_INVALID_ARGUMENT;
    cases[7].c.head_dim = 1024;
    cases[7].want = PKV_ERR_UNSUPPORTED;
    cases[8].c.kv_dtype = PKV_KV_DTYPE_U4; /* U4 groups of 0 channels */
    cases[8].want = PKV_ERR_INVALID_ARGUMENT;
    cases[9].c.kv_dtype = PKV_KV_DTYPE_U8K_U4V; /* 12 does not divide 64 */
    cases[9].c.u4_group = 12;
    cases[9].want = PKV_ERR_INVALID_ARGUMENT;
    for (int i = 0; i < 10; i++) {
        be = (pkv__backend *)&al;
        assert_int_equal(pkv__backend_cpu.create(&cases[i].c, &al, &be),
                         cases[i].want);
        assert_null(be);
    }
    assert_int_equal(pkv__backend_cpu.create(&ok, &al, &be), PKV_OK);
    float q[8 * 64] = {0}, out[8 * 64];
    /* No step yet. */
    assert_int_equal(pkv__backend_cpu.attend(be, 0, q, out, 0, 0),
                     PKV_ERR_BAD_STATE);
    assert_int_equal(pkv__backend_cpu.append(be, 0, q, q), PKV_ERR_BAD_STATE);
    pkv__backend_cpu.destroy(be);
    pkv__backend_cpu.destroy(NULL);
}

/* A row's block ids are checked once per table version: a step whose
 * row has the version an earlier step checked costs nothing per block,
 * while a new version, more blocks or no version (0) is checked again. */
static void checks_each_table_version_once(void **state)
{
    (void)state;
    scenario s;
    step_arrays a;
    scenario_init(&s, 64, 4, 2, 8, PKV_KV_DTYPE_F32,
                  PKV_QUANT_GROUP_PER_CHANNEL, PKV_QUANT_GROUP_PER_TOKEN,
                  SMALL_BATCH, 4, 5, 1);
    pkv__backend_cpu.destroy(s.be);
    s.cfg.max_step_seqs = s.num_seqs; /* rows to remember */
    assert_int_equal(pkv__backend_cpu.create(&s.cfg, &s.alloc, &s.be),
                     PKV_OK);
    scenario_run(&s, &a, 0);
    uint64_t versions[8] = {11, 12, 13, 14, 15, 16, 17, 18};
    pkv__step step = a.step;
    step.table_versions = versions;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &step), PKV_OK);
    /* Row 0's first id becomes the null block (its step rows are in its
     * third block: no slot points there). Its version says nothing
     * changed, so the check does not look: a stale version would be the
     * engine's bug, which its invariant check is there to catch. */
    uint32_t keep = s.tables[0];
    s.tables[0] = 0;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &step), PKV_OK);
    /* A new version is checked. */
    versions[0] = 21;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &step),
                     PKV_ERR_INVALID_ARGUMENT);
    /* So is a row with no version. */
    versions[0] = 0;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &step),
                     PKV_ERR_INVALID_ARGUMENT);
    s.tables[0] = keep;
    versions[0] = 22;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &step), PKV_OK);
    step_free(&a);
    scenario_free(&s);
}

static void rejects_bad_step(void **state)
{
    (void)state;
    scenario s;
    step_arrays a;
    scenario_init(&s, 64, 4, 2, 8, PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_CHANNEL,
                  PKV_QUANT_GROUP_PER_TOKEN, SMALL_BATCH, 4, 5, 1);
    scenario_run(&s, &a, 0);
    pkv__step bad = a.step;
    /* A slot that is not where the table puts the row's token. */
    a.slots[0] += 1;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    a.slots[0] -= 1;
    /* Rows beyond the context. */
    a.context_lens[2] = 4;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    a.context_lens[2] = 5;
    /* The null block, and an id past the pool, in a table. */
    uint32_t keep = s.tables[0];
    s.tables[0] = 0;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    s.tables[0] = s.cfg.num_blocks;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    s.tables[0] = keep;
    /* A staging tail that does not exist; none at all for u8. */
    a.stages[1] = s.cfg.num_stages;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    a.stages[1] = 1;
    bad.stages = NULL;
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    bad = a.step;
    bad.num_tokens -= 1; /* query_start no longer ends at num_tokens */
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &bad),
                     PKV_ERR_INVALID_ARGUMENT);
    /* Layer out of range, copies into the null block or past the end. */
    assert_int_equal(pkv__backend_cpu.begin_step(s.be, &a.step), PKV_OK);
    assert_int_equal(pkv__backend_cpu.attend(s.be, 1, a.q, a.out, 0, 0),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv__backend_cpu.attend(s.be, 0, a.q, a.out, NAN, 0),
                     PKV_ERR_INVALID_ARGUMENT);
    pkv__block_copy pair = {1, 0};
    assert_int_equal(pkv__backend_cpu.copy_blocks(s.be, &pair, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    pair.dst = s.cfg.num_blocks;
    assert_int_equal(pkv__backend_cpu.copy_blocks(s.be, &pair, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    pair.src = 0;
    pair.dst = s.cfg.num_stages;
    assert_int_equal(pkv__backend_cpu.copy_stages(s.be, &pair, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    uint32_t zero = 0;
    uint8_t one;
    assert_int_equal(pkv__backend_cpu.swap_in(s.be, &one, &zero, 1),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv__backend_cpu.stage_out(s.be, s.cfg.num_stages, &one),
                     PKV_ERR_INVALID_ARGUMENT);
    step_free(&a);
    scenario_free(&s);
}

#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifndef GRID_SECOND_HALF
        cmocka_unit_test(rejects_bad_config),
        cmocka_unit_test(rejects_bad_step),
        cmocka_unit_test(checks_each_table_version_once),
        cmocka_unit_test(sliding_window),
        cmocka_unit_test(parallel_same_result),
        cmocka_unit_test(layers_are_separate),
        cmocka_unit_test(copy_fork_and_swap),
        cmocka_unit_test(grid_first_half),
#else
        cmocka_unit_test(grid_second_half),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
