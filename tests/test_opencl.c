/* SPDX-License-Identifier: MIT */
/*
 * The OpenCL backend against the CPU reference backend, op by op, on
 * identical inputs: the grid of the quantizer issue (head_dim 64/80/128/
 * 256, (Hq, Hkv) (8,8)/(32,8)/(9,3), block size 8/16/32, mixed batches
 * (seqs, rows) (1,1)/(1,1000)/(17,17)/(3,16)/(98,1145), random
 * non-contiguous block tables), contexts up to 8192, f32/f16/u8/u4/u8k_u4v
 * caches (u4 per-token groups of 32 channels, 16 at head_dim 80, 8 at
 * head_dim 8).
 *
 * Tolerances:
 * - Cache contents (every block of every layer, read back with swap_out,
 *   and the valid rows of u8 staging tails) must be byte-identical. f32
 *   and f16 stores are exact copies or the same integer f16 rounding; the
 *   u8 freeze computes its parameters exactly as quant.c does and its codes
 *   with a correctly rounded division (PoCL has one; a device without it
 *   may move a code at an exact rounding tie by one, see docs/design.md).
 * - Attention outputs, absolute (outputs are convex combinations of V
 *   values, |v| < 6 here): the generic kernel within 2e-5. Both backends
 *   read the same stored values and perform the same f32 operations in the
 *   same order (the dot product in four lanes, one softmax rescale per
 *   block, 1 / l at the end); they differ only in exp(), which OpenCL
 *   allows 3 ulp: a weight's relative error is a few 1e-7, an output's a
 *   few 1e-6 at most (observed 5e-7). All-decode steps run on the split-K
 *   decode kernels (paged_decode.cl), which sum in another order and fold
 *   the u8 parameters into the query: within 1e-4, the bound their author
 *   gives for u8 at |v| <= 1, and 20x what they reach here (observed 5e-6
 *   at 8192 tokens). An indexing or masking bug shows as 1e-2 or more.
 *
 * Hybrid memory (test_groups): layers in groups with their own block
 * tables, slots and windows, over arenas the groups share.
 *
 * To keep the run short (PoCL compiles kernels with LLVM), one program
 * serves every case (geometry is passed as kernel arguments, and pkv
 * shares its programs across the process), and the grid is sampled: every
 * head_dim x heads x block size combination once, each with one batch
 * shape and one dtype in rotation, so that every shape meets every dtype.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend.h"
#include "check_host_cmocka.h"
#include "opencl/opencl.h"
#include "kv_layout.h"
#include "mem_util.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATTEND_TOL 2e-5        /* the generic kernel */
#define ATTEND_TOL_DECODE 1e-4 /* the split-K decode kernels */

static double max_seen; /* the largest attend difference, reported */
/* The device of the last run_case and the decode kernel variant of the
 * last one that ran a decode step, for the log. */
static char last_device[512], last_variant[512], last_prefill[512];

typedef struct geo {
    uint32_t d, hq, hkv, bs;
    int32_t dtype, kq, vq;
    uint32_t layers;
    uint32_t u4g; /* u4 groups; 0: 32, or 16 or 8 where 32 does not divide d */
} geo;

/* Both backends on one config. */
typedef struct pair {
    pkv__backend_config cfg;
    pkv__allocator alloc;
    pkv__backend *cpu, *ocl;
} pair;

/* The config of geometry g (pair_config), then both backends on it
 * (pair_create): pair_init. */
static void pair_config(pair *p, const geo *g, uint32_t num_blocks,
                        uint32_t num_stages)
{
    memset(p, 0, sizeof *p);
    p->alloc = plain_allocator();
    p->cfg.num_layers = g->layers;
    p->cfg.num_q_heads = g->hq;
    p->cfg.num_kv_heads = g->hkv;
    p->cfg.head_dim = g->d;
    p->cfg.block_size = g->bs;
    p->cfg.num_blocks = num_blocks;
    p->cfg.kv_dtype = g->dtype;
    p->cfg.key_quant = g->kq;
    p->cfg.value_quant = g->vq;
    p->cfg.u4_group = g->u4g != 0        ? g->u4g
                      : g->d % 32 == 0 ? 32
                      : g->d % 16 == 0 ? 16
                                       : 8;
    p->cfg.num_stages = PKV_LAYOUT_QUANTIZED(g->dtype) ? num_stages : 0;
}

static void pair_create(pair *p)
{
    assert_int_equal(pkv__backend_cpu.create(&p->cfg, &p->alloc, &p->cpu),
                     PKV_OK);
    pkv_status st = pkv__backend_opencl.create(&p->cfg, &p->alloc, &p->ocl);
    if (st != PKV_OK)
        fail_msg("opencl create: %s", pkv_last_error());
}

static void pair_init(pair *p, const geo *g, uint32_t num_blocks,
                      uint32_t num_stages)
{
    pair_config(p, g, num_blocks, num_stages);
    pair_create(p);
}

static void pair_free(pair *p)
{
    pkv__backend_cpu.destroy(p->cpu);
    pkv__backend_opencl.destroy(p->ocl);
}

/* One step's arrays. */
typedef struct batch {
    uint32_t num_seqs, num_tokens, max_blocks;
    uint32_t *query_start, *context_lens, *tables, *stages;
    const uint32_t **rows; /* [num_seqs]: each sequence's row of tables */
    uint64_t *slots;
} batch;

static void batch_free(batch *b)
{
    free(b->query_start);
    free(b->context_lens);
    free(b->tables);
    free(b->rows);
    free(b->stages);
    free(b->slots);
    memset(b, 0, sizeof *b);
}

/* rows[i] new rows after prior[i] tokens for sequence i, whose blocks are
 * tables[i * max_blocks ...]. */
static void batch_make(batch *b, uint32_t n, const uint32_t *prior,
                       const uint32_t *rows, const uint32_t *tables,
                       uint32_t max_blocks, uint32_t bs)
{
    memset(b, 0, sizeof *b);
    b->num_seqs = n;
    b->max_blocks = max_blocks;
    b->query_start = calloc(n + 1, sizeof *b->query_start);
    b->context_lens = calloc(n, sizeof *b->context_lens);
    b->stages = calloc(n, sizeof *b->stages);
    b->tables = calloc((size_t)n * max_blocks, sizeof *b->tables);
    b->rows = calloc(n + 1, sizeof *b->rows);
    uint32_t t = 0;
    for (uint32_t i = 0; i < n; i++)
        t += rows[i];
    b->num_tokens = t;
    b->slots = calloc(t + 1, sizeof *b->slots);
    assert_true(b->query_start && b->context_lens && b->stages && b->tables &&
                b->rows && b->slots);
    memcpy(b->tables, tables, (size_t)n * max_blocks * sizeof *tables);
    for (uint32_t i = 0; i < n; i++)
        b->rows[i] = b->tables + (size_t)i * max_blocks;
    t = 0;
    for (uint32_t i = 0; i < n; i++) {
        b->query_start[i] = t;
        b->context_lens[i] = prior[i] + rows[i];
        b->stages[i] = i;
        for (uint32_t r = 0; r < rows[i]; r++, t++) {
            uint32_t tok = prior[i] + r;
            b->slots[t] = (uint64_t)tables[(size_t)i * max_blocks + tok / bs] *
                              bs +
                          tok % bs;
        }
    }
    b->query_start[n] = t;
}

static pkv__step batch_step(const batch *b, int u8)
{
    pkv__step s;
    memset(&s, 0, sizeof s);
    s.num_seqs = b->num_seqs;
    s.num_tokens = b->num_tokens;
    s.query_start = b->query_start;
    s.context_lens = b->context_lens;
    s.block_tables = b->rows;
    s.max_blocks_per_seq = b->max_blocks;
    s.slots = b->slots;
    s.stages = u8 ? b->stages : NULL;
    return s;
}

/* n floats, zeroed. */
static float *tensor_alloc(size_t n)
{
    size_t bytes = (n + 1) * sizeof(float);
    float *x = malloc(bytes);
    assert_non_null(x);
    memset(x, 0, bytes);
    return x;
}

static float *normals(uint64_t *rng, size_t n)
{
    float *x = tensor_alloc(n);
    test_normal_fill(rng, x, n);
    return x;
}

static void check_ok(pkv_status st, const char *what)
{
    if (st != PKV_OK)
        fail_msg("%s: %s (%s)", what, pkv_status_name(st), pkv_last_error());
}

/* Whether a step of these rows runs on the split-K decode kernels: one
 * row per sequence, and the kernels not turned off. */
static int decode_kernels(const uint32_t *query_start, uint32_t num_seqs,
                          uint32_t num_tokens)
{
    const char *variant = getenv("PKV_OPENCL_DECODE");
    int decode = num_tokens == num_seqs &&
                 (variant == NULL || strcmp(variant, "off") != 0);
    for (uint32_t i = 0; i < num_seqs; i++)
        decode &= query_start[i + 1] - query_start[i] == 1;
    return decode;
}

/* Attention of `layer` over the step both backends began, on the same
 * random queries; the outputs must agree within the tolerance of the
 * kernels that ran (decode: the split-K ones). Returns the largest
 * difference. */
static double attend_both(pair *p, uint32_t layer, uint32_t num_tokens,
                          int decode, uint32_t window, uint64_t *rng)
{
    const pkv__backend_config *c = &p->cfg;
    size_t qn = (size_t)num_tokens * c->num_q_heads * c->head_dim;
    float *q = normals(rng, qn);
    float *o1 = tensor_alloc(qn), *o2 = tensor_alloc(qn);
    check_ok(pkv__backend_cpu.attend(p->cpu, layer, q, o1, 0.0f, window),
             "cpu attend");
    check_ok(pkv__backend_opencl.attend(p->ocl, layer, q, o2, 0.0f, window),
             "ocl attend");
    double worst = 0;
    for (size_t i = 0; i < qn; i++) {
        double e = fabs((double)o1[i] - (double)o2[i]);
        if (!(e <= worst))
            worst = e; /* NaN sticks */
    }
    double tol = decode ? ATTEND_TOL_DECODE : ATTEND_TOL;
    max_seen = worst > max_seen ? worst : max_seen;
    if (!(worst <= tol))
        fail_msg("layer %u: attend differs by %g (tolerance %g)",
                 (unsigned)layer, worst, tol);
    free(q);
    free(o1);
    free(o2);
    return worst;
}

/* Run one step on both backends: append on `layer`, and attention when
 * `attend`; compare the outputs. Returns the largest difference. */
static double run_step(pair *p, const batch *b, uint32_t layer, int attend,
                       uint32_t window, uint64_t *rng)
{
    const pkv__backend_config *c = &p->cfg;
    pkv__step s = batch_step(b, PKV_LAYOUT_QUANTIZED(c->kv_dtype));
    check_ok(pkv__backend_cpu.begin_step(p->cpu, &s), "cpu begin_step");
    check_ok(pkv__backend_opencl.begin_step(p->ocl, &s), "ocl begin_step");
    size_t kvn = (size_t)b->num_tokens * c->num_kv_heads * c->head_dim;
    float *k = normals(rng, kvn), *v = normals(rng, kvn);
    check_ok(pkv__backend_cpu.append(p->cpu, layer, k, v), "cpu append");
    check_ok(pkv__backend_opencl.append(p->ocl, layer, k, v), "ocl append");
    double worst = 0;
    if (attend)
        worst = attend_both(
            p, layer, b->num_tokens,
            decode_kernels(b->query_start, b->num_seqs, b->num_tokens),
            window, rng);
    free(k);
    free(v);
    return worst;
}

/* Every used block of every layer, and the valid rows of every tail, must
 * be byte-identical. */
static void compare_caches(pair *p, const uint32_t *blocks, uint32_t nb,
                           const uint32_t *ctx, uint32_t nseqs)
{
    const pkv__backend_config *c = &p->cfg;
    size_t bytes = pkv__backend_swap_block_bytes(c) * nb;
    uint8_t *h1 = malloc(bytes + 1), *h2 = malloc(bytes + 1);
    assert_true(h1 && h2);
    check_ok(pkv__backend_cpu.swap_out(p->cpu, blocks, nb, h1), "cpu swap");
    check_ok(pkv__backend_opencl.swap_out(p->ocl, blocks, nb, h2),
             "ocl swap");
    for (size_t i = 0; i < bytes; i++)
        if (h1[i] != h2[i])
            fail_msg("cache byte %zu of %zu differs: %u vs %u", i, bytes,
                     h1[i], h2[i]);
    free(h1);
    free(h2);
    if (!PKV_LAYOUT_QUANTIZED(c->kv_dtype))
        return;
    size_t sb = pkv__backend_stage_bytes(c);
    float *t1 = malloc(sb), *t2 = malloc(sb);
    assert_true(t1 && t2);
    size_t rows = (size_t)c->block_size * c->head_dim;
    for (uint32_t i = 0; i < nseqs; i++) {
        check_ok(pkv__backend_cpu.stage_out(p->cpu, i, t1), "cpu stage");
        check_ok(pkv__backend_opencl.stage_out(p->ocl, i, t2), "ocl stage");
        size_t valid = (size_t)(ctx[i] % c->block_size) * c->head_dim;
        for (size_t part = 0; part < 2u * c->num_layers * c->num_kv_heads;
             part++)
            if (memcmp(t1 + part * rows, t2 + part * rows, valid * 4) != 0)
                fail_msg("staging tail %u part %zu differs", i, part);
    }
    free(t1);
    free(t2);
}

/* A mixed batch of `seqs` sequences and `rows` rows: one row each, the
 * rest spread over about a tenth of them (prefill chunks); contexts before
 * the step are random, some empty. Runs a step that writes the earlier
 * context, then the batch, and compares. */
static void run_case(const geo *g, uint32_t seqs, uint32_t rows,
                     uint32_t max_prior, uint32_t window, uint64_t seed)
{
    uint64_t rng = seed;
    uint32_t *prior = calloc(seqs, sizeof *prior);
    uint32_t *nq = calloc(seqs, sizeof *nq);
    assert_true(prior && nq);
    uint32_t chunked = seqs / 10 ? seqs / 10 : 1;
    for (uint32_t i = 0; i < seqs; i++) {
        nq[i] = 1;
        prior[i] = (uint32_t)(test_rand(&rng) % (max_prior + 1));
    }
    for (uint32_t left = rows - seqs; left > 0; left--)
        nq[test_rand(&rng) % chunked]++;
    uint32_t max_blocks = 1, total = 1;
    for (uint32_t i = 0; i < seqs; i++) {
        uint32_t nb = (prior[i] + nq[i] + g->bs - 1) / g->bs;
        max_blocks = nb > max_blocks ? nb : max_blocks;
        total += nb;
    }
    /* Random, non-contiguous placement: a shuffled pool twice the size. */
    uint32_t num_blocks = 2 * total + 2;
    uint32_t *perm = malloc(num_blocks * sizeof *perm);
    uint32_t *tables = calloc((size_t)seqs * max_blocks, sizeof *tables);
    uint32_t *used = malloc(total * sizeof *used);
    assert_true(perm && tables && used);
    for (uint32_t i = 0; i < num_blocks - 1; i++)
        perm[i] = i + 1;
    for (uint32_t i = num_blocks - 2; i > 0; i--) {
        uint32_t j = (uint32_t)(test_rand(&rng) % (i + 1));
        uint32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    uint32_t nused = 0;
    for (uint32_t i = 0; i < seqs; i++) {
        uint32_t nb = (prior[i] + nq[i] + g->bs - 1) / g->bs;
        for (uint32_t j = 0; j < nb; j++, nused++) {
            tables[(size_t)i * max_blocks + j] = perm[nused];
            used[nused] = perm[nused];
        }
    }
    pair p;
    pair_init(&p, g, num_blocks, seqs);
    uint32_t layer = g->layers - 1;
    uint32_t *zero = calloc(seqs, sizeof *zero);
    uint32_t *ctx = calloc(seqs, sizeof *ctx);
    assert_true(zero && ctx);
    batch b;
    /* The earlier context; attention too when the case is about more than
     * the decode kernels and it is cheap: under 5M multiply-adds of queries
     * and keys, a few seconds under oclgrind (tests/run.sh), whose time
     * grows with them (26.7M at head_dim 256, block 64, U4 values: 190 s). */
    uint64_t work = 0;
    for (uint32_t i = 0; i < seqs; i++)
        work += (uint64_t)prior[i] * prior[i] / 2;
    batch_make(&b, seqs, zero, prior, tables, max_blocks, g->bs);
    run_step(&p, &b, layer,
             rows > seqs && work * g->hq * g->d < 5000000u, window, &rng);
    batch_free(&b);
    batch_make(&b, seqs, prior, nq, tables, max_blocks, g->bs);
    run_step(&p, &b, layer, 1, window, &rng);
    for (uint32_t i = 0; i < seqs; i++)
        ctx[i] = prior[i] + nq[i];
    compare_caches(&p, used, nused, ctx, seqs);
    batch_free(&b);
    snprintf(last_device, sizeof last_device, "%s",
             pkv__ocl_ops(p.ocl)->name);
    const char *variant = pkv__ocl_decode_variant(p.ocl);
    snprintf(last_variant, sizeof last_variant, "%s",
             variant != NULL ? variant : "(none)");
    const char *prefill = pkv__ocl_prefill_variant(p.ocl);
    snprintf(last_prefill, sizeof last_prefill, "%s",
             prefill != NULL ? prefill : "(none)");
    pair_free(&p);
    free(prior);
    free(nq);
    free(perm);
    free(tables);
    free(used);
    free(zero);
    free(ctx);
}

static const uint32_t dims[] = {64, 80, 128, 256};
static const uint32_t heads[][2] = {{8, 8}, {32, 8}, {9, 3}};
static const uint32_t sizes[] = {8, 16, 32};
static const uint32_t shapes[][2] = {
    {1, 1}, {1, 1000}, {17, 17}, {3, 16}, {98, 1145}};
static const int32_t dtypes[] = {PKV_KV_DTYPE_F32, PKV_KV_DTYPE_F16,
                                 PKV_KV_DTYPE_U8, PKV_KV_DTYPE_U4,
                                 PKV_KV_DTYPE_U8K_U4V};
#define NUM_DTYPES (sizeof dtypes / sizeof dtypes[0])

static geo make_geo(uint32_t d, uint32_t hq, uint32_t hkv, uint32_t bs,
                    int32_t dtype, int flip_quant)
{
    geo g = {d,
             hq,
             hkv,
             bs,
             dtype,
             PKV_QUANT_GROUP_PER_CHANNEL,
             PKV_QUANT_GROUP_PER_TOKEN,
             2,
             0};
    if (flip_quant) {
        g.kq = PKV_QUANT_GROUP_PER_TOKEN;
        g.vq = PKV_QUANT_GROUP_PER_CHANNEL;
    }
    return g;
}

static void test_large_grid(void **state)
{
    (void)state;
    unsigned idx = 0;
    for (unsigned di = 0; di < 4; di++)
        for (unsigned hi = 0; hi < 3; hi++)
            for (unsigned si = 0; si < 3; si++, idx++) {
                const uint32_t *shape = shapes[idx % 5];
                int32_t dtype = dtypes[(idx / 5 + idx) % NUM_DTYPES];
                uint32_t hq = heads[hi][0], hkv = heads[hi][1];
                uint32_t d = dims[di];
                /* The long prefills with the widest heads would dominate
                 * the run on the CPU reference (under ASan): narrow the
                 * heads there, keeping the GQA ratio. */
                while (shape[1] >= 1000 && hq * d > 1024) {
                    if (hq > 9) {
                        hq /= 4;
                        hkv /= 4;
                    } else {
                        d /= 2;
                    }
                }
                geo g = make_geo(d, hq, hkv, sizes[si], dtype, idx % 2);
                uint32_t window = idx % 4 == 3 ? 37 : 0;
                /* A third of the cases on each prefill kernel (Intel's
                 * where the device has its subgroups, else the tiled
                 * one). */
                static const char *const prefills[] = {"rows", "tiles",
                                                       "intel"};
                setenv("PKV_OPENCL_PREFILL", prefills[idx % 3], 1);
                run_case(&g, shape[0], shape[1], 3 * sizes[si] + 5, window,
                         1000 + idx);
            }
    unsetenv("PKV_OPENCL_PREFILL");
    print_message("grid: largest |opencl - cpu| attend difference %g\n",
                  max_seen);
}

/* test_small_variants' geometries. quick 1: run by PKV_TEST_QUICK=1 too
 * (tests/run.sh's default oclgrind runs), a subset that holds every KV
 * dtype, per-token and per-channel keys, windows, several partitions,
 * head_dims 8 to 512 and off 32, U4 groups other than the default,
 * blocks of 1 to 32 and each split (GQA 12, 16, 32), at a third of the
 * whole's time under oclgrind; blocks of 64 and the rest run in the
 * whole (PKV_TEST_FULL=1 there). */
static const struct {
    uint32_t d, hq, hkv, bs;
    int32_t dtype;
    int flip;
    uint32_t window, prior; /* prior 0: 2 * bs + 5 */
    uint32_t u4g;           /* 0: geo's default */
    int quick;
} small_cases[] = {
    {64, 4, 4, 8, PKV_KV_DTYPE_F32, 0, 0, 0, 0, 1},
    {96, 8, 2, 16, PKV_KV_DTYPE_F16, 0, 0, 0, 0, 1},
    {128, 8, 1, 32, PKV_KV_DTYPE_U8, 0, 0, 0, 0, 0},
    {64, 8, 2, 64, PKV_KV_DTYPE_U8, 1, 0, 0, 0, 0},
    {128, 4, 1, 16, PKV_KV_DTYPE_U8, 0, 21, 0, 0, 1},
    {96, 8, 1, 8, PKV_KV_DTYPE_U8, 1, 0, 0, 0, 1},
    {128, 4, 4, 64, PKV_KV_DTYPE_F16, 0, 9, 0, 0, 0},
    {64, 16, 2, 32, PKV_KV_DTYPE_F32, 0, 0, 0, 0, 0},
    /* The smallest and the largest head_dim the header allows. */
    {8, 4, 2, 16, PKV_KV_DTYPE_U8, 0, 0, 0, 0, 1},
    {512, 2, 1, 8, PKV_KV_DTYPE_F16, 0, 0, 0, 0, 1},
    /* Up to three partitions of 256 tokens, and the reduce kernel. */
    {64, 2, 1, 8, PKV_KV_DTYPE_U8, 0, 0, 600, 0, 1},
    /* U4: per-channel keys and per-token value groups, the reverse, and
     * U8 keys with U4 values; groups of 32 channels (8 at head_dim 8). */
    {128, 8, 2, 16, PKV_KV_DTYPE_U4, 0, 0, 0, 0, 0},
    {256, 4, 1, 16, PKV_KV_DTYPE_U4, 0, 0, 0, 0, 1},
    {96, 8, 1, 32, PKV_KV_DTYPE_U4, 1, 17, 0, 0, 1},
    {64, 8, 8, 8, PKV_KV_DTYPE_U8K_U4V, 0, 0, 0, 0, 1},
    {256, 8, 1, 64, PKV_KV_DTYPE_U8K_U4V, 1, 0, 0, 0, 0},
    {8, 4, 2, 16, PKV_KV_DTYPE_U4, 0, 0, 0, 0, 0},
    {64, 2, 1, 8, PKV_KV_DTYPE_U4, 0, 0, 600, 0, 0},
    /* U4 groups other than the default: 8 at head_dim 128 with per-token
     * keys (every key group folded on its own), 24 at 96 (not a multiple
     * of 16: the CPU-shaped variant's narrower vectors), and a whole row;
     * block 8 with GQA 4. */
    {128, 8, 2, 16, PKV_KV_DTYPE_U4, 1, 0, 0, 8, 1},
    {96, 8, 2, 16, PKV_KV_DTYPE_U8K_U4V, 0, 0, 0, 24, 0},
    {64, 8, 2, 8, PKV_KV_DTYPE_U4, 0, 0, 0, 64, 1},
    /* GQA 8 with per-token u4 values: the Intel variant's lanes own one
     * pair each and a run keeps its parameters as floats. */
    {128, 8, 1, 16, PKV_KV_DTYPE_U4, 0, 0, 0, 0, 0},
    /* More than 8 query heads a kv head: the GPU and Intel variants split
     * them among work-groups (GQA 12: 2 of 6 heads, 16: 2 of 8, 32: 4 of
     * 8), here with head_dims that are not multiples of 32 (the GPU
     * variant's on Intel GPUs) and blocks of 1 and 4 tokens. */
    {80, 12, 1, 4, PKV_KV_DTYPE_U4, 0, 0, 0, 0, 1},
    {128, 16, 1, 1, PKV_KV_DTYPE_U8, 1, 0, 0, 0, 1},
    {20, 32, 1, 16, PKV_KV_DTYPE_U8K_U4V, 0, 0, 0, 20, 1},
    {64, 32, 2, 8, PKV_KV_DTYPE_U4, 1, 0, 0, 0, 0},
};

#define NUM_SMALL (sizeof small_cases / sizeof small_cases[0])

static geo small_geo(unsigned i)
{
    geo g = make_geo(small_cases[i].d, small_cases[i].hq, small_cases[i].hkv,
                     small_cases[i].bs, small_cases[i].dtype,
                     small_cases[i].flip);
    g.u4g = small_cases[i].u4g;
    return g;
}

/* Small shapes over the kernel variants' axes: head_dim 64/96/128, block
 * size 8/16/32/64, GQA group 1/4/8, every dtype and u8 grouping, sliding
 * window; each geometry a decode-only step on every decode variant and a
 * mixed prefill + decode step on both prefill kernels. Small enough for
 * oclgrind (tests/run.sh); PKV_TEST_QUICK=1 runs the cases marked quick
 * only. */
static void test_small_variants(void **state)
{
    (void)state;
    /* Each decode variant the device can run: the CPU-shaped and the
     * portable GPU-shaped ones everywhere, Intel's where its extensions
     * are (forced through PKV_OPENCL_DECODE). PKV_TEST_DECODE, a list such
     * as "gpu" or "cpu,intel", runs fewer (tests/run.sh under oclgrind). */
    static const char *const variants[] = {"cpu", "gpu", "intel"};
    int quick = ch_test_quick();
    const char *only = getenv("PKV_TEST_DECODE");
    const char *only_prefill = getenv("PKV_TEST_PREFILL");
    /* Either list alone runs its kernels only. */
    if (only == NULL && only_prefill != NULL)
        only = "";
    if (only_prefill == NULL && only != NULL)
        only_prefill = "";
    for (unsigned v = 0; v < 3; v++) {
        if (only != NULL && strstr(only, variants[v]) == NULL)
            continue;
        setenv("PKV_OPENCL_DECODE", variants[v], 1);
        for (unsigned i = 0; i < NUM_SMALL; i++) {
            if (quick && !small_cases[i].quick)
                continue;
            geo g = small_geo(i);
            uint32_t prior = small_cases[i].prior > 0
                                 ? small_cases[i].prior
                                 : 2 * small_cases[i].bs + 5;
            run_case(&g, 5, 5, prior, small_cases[i].window, 300 + i);
            if (strncmp(last_variant, "off:", 4) == 0 &&
                strstr(last_variant, ", but ") != NULL) {
                print_message("%s, head_dim %u: no %s decode variant: %s\n",
                              last_device, (unsigned)small_cases[i].d,
                              variants[v], last_variant);
                continue;
            }
            if (strncmp(last_variant, variants[v], strlen(variants[v])) != 0)
                fail_msg("asked for the %s decode variant, got %s",
                         variants[v], last_variant);
            if (i == 0)
                print_message("%s, head_dim %u: decode kernel %s\n",
                              last_device, (unsigned)small_cases[i].d,
                              last_variant);
        }
    }
    unsetenv("PKV_OPENCL_DECODE");
    /* Mixed steps run on the prefill kernels, whatever the decode variant:
     * the CPU-shaped rows kernel, the GPU-shaped tiled one and Intel's
     * where the device has its subgroups (forced through
     * PKV_OPENCL_PREFILL). PKV_TEST_PREFILL, a list such as
     * "tiles", runs fewer. */
    static const char *const prefills[] = {"rows", "tiles", "intel"};
    for (unsigned v = 0; v < 3; v++) {
        if (only_prefill != NULL && strstr(only_prefill, prefills[v]) == NULL)
            continue;
        setenv("PKV_OPENCL_PREFILL", prefills[v], 1);
        for (unsigned i = 0; i < NUM_SMALL; i++) {
            if (quick && !small_cases[i].quick)
                continue;
            geo g = small_geo(i);
            run_case(&g, 3, 16, 2 * small_cases[i].bs + 5,
                     small_cases[i].window, 400 + i);
            if (strncmp(last_prefill, prefills[v], strlen(prefills[v])) == 0)
                continue;
            /* Only Intel's may be refused, and only for a device
             * without its subgroups (it takes every geometry pkv
             * accepts), never because it did not build. Such a device
             * runs the tiled kernel: once is enough. */
            if (v != 2 || strstr(last_prefill, "lacks") == NULL)
                fail_msg("asked for the %s prefill kernel, got %s",
                         prefills[v], last_prefill);
            print_message("%s, head_dim %u: %s\n", last_device,
                          (unsigned)small_cases[i].d, last_prefill);
            break;
        }
    }
    unsetenv("PKV_OPENCL_PREFILL");
    print_message("small variants: largest attend difference so far %g\n",
                  max_seen);
}

/* The geometries the intel prefill kernel took last, forced through
 * PKV_OPENCL_PREFILL=intel where the device has Intel's subgroups (a
 * device without them gets the tiled kernel: one case then): head_dim
 * 80 and 20 (channels padded to a multiple of 32), 512; GQA 12 and 71
 * (head slices of 8, the last part empty) and 16; blocks 1, 2 and 4
 * (chunks across blocks, each token's staging tail rule its own); every
 * dtype, windows; random prior contexts, so that the quantized ones read
 * frozen blocks and staging tails in one chunk. A case on another kernel
 * than Intel's fails. */
static void test_intel_prefill_geometries(void **state)
{
    (void)state;
    static const struct {
        uint32_t d, hq, hkv, bs;
        int32_t dtype;
        int flip;
        uint32_t window, rows;
    } cases[] = {
        {80, 8, 2, 16, PKV_KV_DTYPE_U8, 0, 0, 24},
        {20, 12, 1, 4, PKV_KV_DTYPE_F16, 0, 9, 20},
        {512, 2, 1, 16, PKV_KV_DTYPE_U4, 0, 0, 12},
        {64, 32, 2, 2, PKV_KV_DTYPE_U8K_U4V, 0, 0, 12},
        {128, 24, 2, 1, PKV_KV_DTYPE_U8, 1, 21, 12},
        {96, 71, 1, 8, PKV_KV_DTYPE_F32, 0, 0, 9},
        {80, 4, 4, 4, PKV_KV_DTYPE_U4, 1, 13, 20},
        {36, 8, 4, 1, PKV_KV_DTYPE_F32, 0, 5, 24},
    };
    setenv("PKV_OPENCL_PREFILL", "intel", 1);
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        geo g = make_geo(cases[i].d, cases[i].hq, cases[i].hkv, cases[i].bs,
                         cases[i].dtype, cases[i].flip);
        run_case(&g, 3, cases[i].rows, 3 * cases[i].bs + 7,
                 cases[i].window, 700 + i);
        if (strstr(last_prefill, "lacks cl_intel_subgroups") != NULL) {
            print_message("%s: %s\n", last_device, last_prefill);
            break;
        }
        if (strncmp(last_prefill, "intel:", 6) != 0)
            fail_msg("head_dim %u, GQA %u, block %u: asked for the intel "
                     "prefill kernel, got %s",
                     (unsigned)cases[i].d,
                     (unsigned)(cases[i].hq / cases[i].hkv),
                     (unsigned)cases[i].bs, last_prefill);
    }
    unsetenv("PKV_OPENCL_PREFILL");
    print_message("intel prefill geometries on %s: largest attend "
                  "difference so far %g\n",
                  last_device, max_seen);
}

/* Long contexts: two decode rows over 8191 and 5000 tokens, and a short
 * prefill chunk at the end of a 4000-token context, every dtype; then a
 * decode step (with a window), on the device's own decode variant, and for
 * u8 and u4 (to keep the run short) on the generic kernel and the
 * GPU-shaped variant too. */
static void test_large_contexts(void **state)
{
    (void)state;
    for (unsigned run = 0; run < 9; run++) {
        /* f32, f16, u8, u4, u8k_u4v; then u8 and u4 on off and gpu. */
        unsigned i = run < 5 ? run : run < 7 ? 2 : 3;
        if (run >= 5)
            setenv("PKV_OPENCL_DECODE", run % 2 == 1 ? "off" : "gpu", 1);
        geo g = make_geo(128, 32, 8, 16, dtypes[i], 0);
        g.layers = 1;
        uint64_t rng = 77 + i;
        uint32_t prior[3] = {8191, 5000, 4000}, nq[3] = {1, 1, 9};
        uint32_t max_blocks = (8192 + 15) / 16, total = 0;
        uint32_t *tables = calloc(3 * (size_t)max_blocks, sizeof *tables);
        uint32_t *used = malloc(3 * (size_t)max_blocks * sizeof *used);
        assert_true(tables && used);
        /* Blocks in reverse order with gaps: never contiguous. */
        uint32_t next = 3 * max_blocks * 2;
        for (uint32_t s = 0; s < 3; s++)
            for (uint32_t j = 0; j * 16 < prior[s] + nq[s]; j++) {
                tables[(size_t)s * max_blocks + j] = next;
                used[total++] = next;
                next -= 2;
            }
        pair p;
        pair_init(&p, &g, 3 * max_blocks * 2 + 1, 3);
        uint32_t zero[3] = {0, 0, 0}, ctx[3];
        batch b;
        batch_make(&b, 3, zero, prior, tables, max_blocks, 16);
        run_step(&p, &b, 0, 0, 0, &rng);
        batch_free(&b);
        batch_make(&b, 3, prior, nq, tables, max_blocks, 16);
        run_step(&p, &b, 0, 1, 0, &rng);
        batch_free(&b);
        /* And a decode step, one row per sequence, with a sliding
         * window. Sequence 0 is full at 8192: its row rewrites token 8191
         * with new values (the same on both backends). */
        for (uint32_t s = 0; s < 3; s++) {
            prior[s] += nq[s] - (s == 0);
            nq[s] = 1;
            ctx[s] = prior[s] + 1;
        }
        batch_make(&b, 3, prior, nq, tables, max_blocks, 16);
        run_step(&p, &b, 0, 1, 1000, &rng);
        batch_free(&b);
        compare_caches(&p, used, total, ctx, 3);
        pair_free(&p);
        free(tables);
        free(used);
    }
    unsetenv("PKV_OPENCL_DECODE");
    print_message("long contexts: largest attend difference so far %g\n",
                  max_seen);
}

/* The same block copies on both backends. */
static void copy_both(pair *p, const pkv__block_copy *pairs, uint32_t n)
{
    check_ok(pkv__backend_cpu.copy_blocks(p->cpu, pairs, n), "cpu copy");
    check_ok(pkv__backend_opencl.copy_blocks(p->ocl, pairs, n), "ocl copy");
}

/* Blocks out_ids swapped out of the OpenCL cache and into in_ids of both:
 * the OpenCL bytes, and their layout, must be the CPU backend's. */
static void swap_both(pair *p, const uint32_t *out_ids,
                      const uint32_t *in_ids, uint32_t n)
{
    uint8_t *host = malloc(n * pkv__backend_swap_block_bytes(&p->cfg));
    assert_non_null(host);
    check_ok(pkv__backend_opencl.swap_out(p->ocl, out_ids, n, host),
             "ocl swap out");
    check_ok(pkv__backend_opencl.swap_in(p->ocl, host, in_ids, n),
             "ocl swap in");
    check_ok(pkv__backend_cpu.swap_in(p->cpu, host, in_ids, n),
             "cpu swap in");
    free(host);
}

/* copy_blocks, copy_stages, swap and stage round trips: the OpenCL cache
 * must follow the CPU cache through each. */
static void test_copy_and_swap(void **state)
{
    (void)state;
    for (unsigned i = 0; i < NUM_DTYPES; i++) {
        geo g = make_geo(64, 8, 4, 8, dtypes[i], 0);
        uint64_t rng = 5 + i;
        pair p;
        pair_init(&p, &g, 32, 4);
        uint32_t prior[2] = {0, 0}, nq[2] = {21, 13}, max_blocks = 3;
        uint32_t tables[6] = {5, 9, 2, 11, 3, 0};
        batch b;
        batch_make(&b, 2, prior, nq, tables, max_blocks, 8);
        run_step(&p, &b, 0, 1, 0, &rng);
        run_step(&p, &b, 1, 1, 0, &rng);
        batch_free(&b);
        pkv__block_copy pairs[2] = {{5, 20}, {9, 21}};
        copy_both(&p, pairs, 2);
        /* A chain: in order, 23 gets what 20 held (the OpenCL backend
         * copies these one by one, independent pairs in one launch). */
        pkv__block_copy chain[2] = {{20, 22}, {22, 23}};
        copy_both(&p, chain, 2);
        pkv__block_copy tails[1] = {{1, 3}};
        if (PKV_LAYOUT_QUANTIZED(g.dtype)) {
            check_ok(pkv__backend_cpu.copy_stages(p.cpu, tails, 1), "cpu");
            check_ok(pkv__backend_opencl.copy_stages(p.ocl, tails, 1),
                     "ocl copy stages");
        }
        /* Swap blocks 11 and 3 out of the OpenCL cache and into 25, 26 of
         * both; stage 0 out and into stage 2. */
        uint32_t out_ids[2] = {11, 3}, in_ids[2] = {25, 26};
        swap_both(&p, out_ids, in_ids, 2);
        if (PKV_LAYOUT_QUANTIZED(g.dtype)) {
            float *t = malloc(pkv__backend_stage_bytes(&p.cfg));
            assert_non_null(t);
            check_ok(pkv__backend_opencl.stage_out(p.ocl, 0, t), "stage out");
            check_ok(pkv__backend_opencl.stage_in(p.ocl, t, 2), "stage in");
            check_ok(pkv__backend_cpu.stage_in(p.cpu, t, 2), "stage in");
            free(t);
        }
        uint32_t all[31];
        for (uint32_t j = 0; j < 31; j++)
            all[j] = j + 1;
        uint32_t ctx[4] = {21, 13, 21, 13};
        compare_caches(&p, all, 31, ctx, PKV_LAYOUT_QUANTIZED(g.dtype) ? 4 : 0);
        /* Bad ids: the same status as the CPU backend, nothing written. */
        pkv__block_copy bad = {1, 0};
        assert_int_equal(pkv__backend_opencl.copy_blocks(p.ocl, &bad, 1),
                         PKV_ERR_INVALID_ARGUMENT);
        uint32_t bad_id = 32;
        assert_int_equal(pkv__backend_opencl.swap_out(p.ocl, &bad_id, 1,
                                                      all),
                         PKV_ERR_INVALID_ARGUMENT);
        pair_free(&p);
    }
}

/* Hybrid memory: 4 layers in 2 groups (layers 0 and 2: no window;
 * 1 and 3: a window of GWIN tokens), each group's layers in arenas 0 and
 * 1, so that arena 0 holds layers 0 and 1 with each group's own blocks.
 * Every group has its own random block tables, the windowed one the null
 * block behind the window of each sequence's first row. A layer that
 * read another group's tables or slots, or another arena, would read or
 * write other blocks than the CPU backend does. */
#define GSEQS 3
#define GMAXB 8
#define GWIN 9
/* Blocks 1..GPOOL: each group's tables, the windowed group's moved ones,
 * and as many more, so that the tables' blocks lie apart. */
#define GPOOL (6 * GSEQS * GMAXB)
static const uint32_t g_layer_group[4] = {0, 1, 0, 1};
static const uint32_t g_layer_arena[4] = {0, 0, 1, 1};
static const uint32_t g_windows[2] = {0, GWIN};

/* One step of both backends over the 4 layers, append then attention of
 * each: rows[i] rows after prior[i] tokens of sequence i, whose blocks in
 * group g are tables[g][i] (stamped versions[g][i]). */
static void grouped_step(pair *p, const uint32_t *prior, const uint32_t *rows,
                         uint32_t tables[2][GSEQS][GMAXB],
                         uint64_t versions[2][GSEQS], uint64_t *rng)
{
    const pkv__backend_config *c = &p->cfg;
    uint32_t bs = c->block_size, qs[GSEQS + 1], ctx[GSEQS], stages[GSEQS];
    uint32_t step_tables[2][GSEQS][GMAXB];
    const uint32_t *step_rows[2 * GSEQS];
    uint32_t t = 0;
    for (uint32_t i = 0; i < GSEQS; i++) {
        qs[i] = t;
        t += rows[i];
        ctx[i] = prior[i] + rows[i];
        stages[i] = i;
    }
    qs[GSEQS] = t;
    uint64_t *slots = calloc(2 * (size_t)t, sizeof *slots);
    assert_non_null(slots);
    for (uint32_t g = 0; g < 2; g++)
        for (uint32_t i = 0; i < GSEQS; i++) {
            /* The blocks no row reads: wholly behind the window of the
             * sequence's first row. */
            uint32_t lo = g_windows[g] > 0 && prior[i] + 1 > g_windows[g]
                              ? prior[i] + 1 - g_windows[g]
                              : 0;
            for (uint32_t j = 0; j < GMAXB; j++)
                step_tables[g][i][j] = j < lo / bs ? 0 : tables[g][i][j];
            step_rows[g * GSEQS + i] = step_tables[g][i];
            for (uint32_t r = 0; r < rows[i]; r++) {
                uint32_t tok = prior[i] + r;
                slots[(size_t)g * t + qs[i] + r] =
                    (uint64_t)tables[g][i][tok / bs] * bs + tok % bs;
            }
        }
    pkv__step s;
    memset(&s, 0, sizeof s);
    s.num_seqs = GSEQS;
    s.num_tokens = t;
    s.query_start = qs;
    s.context_lens = ctx;
    s.block_tables = step_rows;
    s.max_blocks_per_seq = GMAXB;
    s.table_versions = &versions[0][0];
    s.slots = slots;
    s.stages = PKV_LAYOUT_QUANTIZED(c->kv_dtype) ? stages : NULL;
    check_ok(pkv__backend_cpu.begin_step(p->cpu, &s), "cpu begin_step");
    check_ok(pkv__backend_opencl.begin_step(p->ocl, &s), "ocl begin_step");
    size_t kvn = (size_t)t * c->num_kv_heads * c->head_dim;
    int decode = decode_kernels(qs, GSEQS, t);
    for (uint32_t l = 0; l < c->num_layers; l++) {
        float *k = normals(rng, kvn), *v = normals(rng, kvn);
        check_ok(pkv__backend_cpu.append(p->cpu, l, k, v), "cpu append");
        check_ok(pkv__backend_opencl.append(p->ocl, l, k, v), "ocl append");
        attend_both(p, l, t, decode, g_windows[g_layer_group[l]], rng);
        free(k);
        free(v);
    }
    free(slots);
}

/* Every dtype on two of the prefill kernels (rows, tiles, Intel's in
 * turn): a prefill step, a mixed one and a decode step, in which the
 * windowed group's blocks have moved (copied to new blocks, new tables):
 * only that group's table rows are uploaded again, and a stale one would
 * miss the step's token. Then copies and a swap round trip over both
 * arenas. */
static void test_groups(void **state)
{
    (void)state;
    static const char *const prefills[] = {"rows", "tiles", "intel"};
    for (unsigned run = 0; run < 2 * NUM_DTYPES; run++) {
        setenv("PKV_OPENCL_PREFILL", prefills[run % 3], 1);
        geo g = make_geo(64, 4, 2, 8, dtypes[run / 2], run % 4 >= 2);
        g.layers = 4;
        uint64_t rng = 900 + run;
        pair p;
        pair_config(&p, &g, GPOOL + 1, GSEQS);
        p.cfg.max_step_seqs = GSEQS;
        p.cfg.max_seq_tokens = GMAXB * g.bs;
        p.cfg.num_groups = 2;
        p.cfg.num_arenas = 2;
        p.cfg.layer_arena = g_layer_arena;
        p.cfg.layer_group = g_layer_group;
        p.cfg.group_windows = g_windows;
        pair_create(&p);
        /* Blocks: each group's, then the windowed group's new ones, from
         * one shuffled pool; the rest are free. */
        uint32_t pool[GPOOL], all[GPOOL];
        for (uint32_t i = 0; i < GPOOL; i++)
            pool[i] = all[i] = i + 1;
        for (uint32_t i = GPOOL - 1; i > 0; i--) {
            uint32_t j = (uint32_t)(test_rand(&rng) % (i + 1)), x = pool[i];
            pool[i] = pool[j];
            pool[j] = x;
        }
        uint32_t tables[2][GSEQS][GMAXB], moved[GSEQS][GMAXB], next = 0;
        for (uint32_t i = 0; i < GSEQS; i++)
            for (uint32_t j = 0; j < GMAXB; j++) {
                tables[0][i][j] = pool[next++];
                tables[1][i][j] = pool[next++];
                moved[i][j] = pool[next++];
            }
        uint64_t versions[2][GSEQS];
        for (uint32_t i = 0; i < GSEQS; i++) {
            versions[0][i] = 100 + i;
            versions[1][i] = 200 + i;
        }
        uint32_t prior[GSEQS] = {0, 0, 0}, rows[GSEQS] = {27, 5, 40};
        grouped_step(&p, prior, rows, tables, versions, &rng);
        /* Mixed: decode rows and a chunk of 9, the windowed group's
         * tables now with null blocks (new versions). */
        uint32_t prior2[GSEQS] = {27, 5, 40}, rows2[GSEQS] = {1, 9, 1};
        for (uint32_t i = 0; i < GSEQS; i++)
            versions[1][i] += 10;
        grouped_step(&p, prior2, rows2, tables, versions, &rng);
        /* Decode, the windowed group's blocks moved. */
        uint32_t prior3[GSEQS] = {28, 14, 41}, rows3[GSEQS] = {1, 1, 1};
        pkv__block_copy copies[GSEQS * GMAXB];
        for (uint32_t i = 0; i < GSEQS; i++)
            for (uint32_t j = 0; j < GMAXB; j++) {
                copies[i * GMAXB + j].src = tables[1][i][j];
                copies[i * GMAXB + j].dst = moved[i][j];
                tables[1][i][j] = moved[i][j];
            }
        copy_both(&p, copies, GSEQS * GMAXB);
        for (uint32_t i = 0; i < GSEQS; i++)
            versions[1][i] += 10;
        uint64_t words = pkv__ocl_table_words(p.ocl);
        grouped_step(&p, prior3, rows3, tables, versions, &rng);
        /* The unwindowed group's rows, same versions and block counts,
         * stay on the device: one stride-16 row per sequence is sent. */
        assert_int_equal(pkv__ocl_table_words(p.ocl) - words, GSEQS * 16);
        uint32_t ctx[GSEQS] = {29, 15, 42};
        compare_caches(&p, all, GPOOL, ctx, GSEQS);
        /* Copies and a swap round trip: every arena of each block. */
        pkv__block_copy pairs[2] = {{tables[0][2][1], pool[next]},
                                    {tables[1][0][3], pool[next + 1]}};
        copy_both(&p, pairs, 2);
        uint32_t out_ids[2] = {tables[0][0][2], tables[1][2][4]};
        uint32_t in_ids[2] = {pool[next + 2], pool[next + 3]};
        assert_int_equal(pkv__backend_swap_block_bytes(&p.cfg),
                         2 * pkv__backend_layer_block_bytes(&p.cfg));
        swap_both(&p, out_ids, in_ids, 2);
        compare_caches(&p, all, GPOOL, ctx, GSEQS);
        snprintf(last_device, sizeof last_device, "%s",
                 pkv__ocl_ops(p.ocl)->name);
        pair_free(&p);
    }
    unsetenv("PKV_OPENCL_PREFILL");
    print_message("groups on %s: largest attend difference so far %g\n",
                  last_device, max_seen);
}

/* The checks every backend shares: the same statuses as the CPU backend. */
static void test_validation(void **state)
{
    (void)state;
    geo g = make_geo(64, 8, 8, 16, PKV_KV_DTYPE_F16, 0);
    pair p;
    pair_init(&p, &g, 16, 0);
    float x[8 * 64];
    memset(x, 0, sizeof x);
    assert_int_equal(pkv__backend_opencl.append(p.ocl, 0, x, x),
                     PKV_ERR_BAD_STATE);
    uint32_t prior = 0, nq = 1, table[2] = {3, 0};
    batch b;
    batch_make(&b, 1, &prior, &nq, table, 2, 16);
    b.slots[0] = 99; /* not where the table puts the token */
    pkv__step s = batch_step(&b, 0);
    assert_int_equal(pkv__backend_opencl.begin_step(p.ocl, &s),
                     PKV_ERR_INVALID_ARGUMENT);
    b.slots[0] = 3 * 16;
    check_ok(pkv__backend_opencl.begin_step(p.ocl, &s), "begin_step");
    assert_int_equal(pkv__backend_opencl.append(p.ocl, 2, x, x),
                     PKV_ERR_INVALID_ARGUMENT);
    assert_int_equal(pkv__backend_opencl.attend(p.ocl, 0, x, x + 1, -1.0f, 0),
                     PKV_ERR_INVALID_ARGUMENT);
    batch_free(&b);
    pair_free(&p);
    /* A geometry the backends refuse, refused alike. */
    pkv__backend_config c = p.cfg;
    c.head_dim = 66;
    pkv__backend *bk = (pkv__backend *)&c;
    assert_int_equal(pkv__backend_opencl.create(&c, &p.alloc, &bk),
                     PKV_ERR_UNSUPPORTED);
    assert_null(bk);
}

int main(void)
{
    /* PKV_TEST_FILTER as every OpenCL test takes it; PKV_TEST_SKIP: skip
     * the tests that match (ctest runs the large grid as a test of its
     * own, beside the rest). */
    int skipped = ch_opencl_start();
    if (skipped != 0)
        return skipped;
    const char *skip = getenv("PKV_TEST_SKIP");
    if (skip != NULL)
        cmocka_set_skip_filter(skip);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_copy_and_swap),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_small_variants),
        cmocka_unit_test(test_intel_prefill_geometries),
        cmocka_unit_test(test_large_grid),
        cmocka_unit_test(test_large_contexts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
