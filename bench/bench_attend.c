/* SPDX-License-Identifier: MIT */
/*
 * pkv-bench attend: the CPU backend's attention (src/backend_cpu_attend.c),
 * what every step of `pkv-gguf --backend cpu` runs per layer: decode
 * (one row) at depths 2k, 8k and 32k, and the attention of a 2,048-token
 * prompt (every row in one step), for each KV format, each version of the
 * arithmetic this processor runs (PKV_CPU_ATTEND), on 1 and 2 threads
 * (the tests' pool lent as pkv_engine_params.parallel). ms per attend
 * (median), for decode the KV GB/s read (the bytes a token stores,
 * parameters included) against the machine's memory read bandwidth
 * measured first, and each format's time over f16's in the same run.
 * Geometries: Gemma 3 270M's (head_dim 256, 4 query heads on 1 kv head)
 * and SmolLM2-135M's (64, 9 on 3), blocks of 16 tokens (the hosts'),
 * tables in a random order. The cache is filled once per format and
 * context and moved into each (version, threads) backend by swap_in.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "bench.h"
#include "bench_bandwidth.h"

#include "backend.h"   /* src/ */
#include "kv_layout.h" /* src/ */
#include "attend_math.h"
#include "lent_pool.h" /* tests/ */
#include "rng.h"       /* tests/ */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BLOCK = 16, FILL_ROWS = 2048, REPS = 7, REPS_QUICK = 3 };

typedef struct geometry {
    const char *name;
    uint32_t head_dim, hq, hkv;
} geometry;

static const geometry GEOMETRIES[] = {
    {"gemma3", 256, 4, 1},
    {"smollm2", 64, 9, 3},
};

typedef struct kv_format {
    const char *name;
    int32_t dtype, key_quant, value_quant;
} kv_format;

static const kv_format FORMATS[] = {
    {"f16", PKV_KV_DTYPE_F16, 0, 0},
    {"u8", PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_TOKEN},
    {"u8-token-keys", PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_TOKEN,
     PKV_QUANT_GROUP_PER_TOKEN},
    {"u4", PKV_KV_DTYPE_U4, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_TOKEN},
    {"u8k-u4v", PKV_KV_DTYPE_U8K_U4V, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_TOKEN},
};
#define NUM_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

/* One measured shape: `rows` query rows ending a context of ctx tokens. */
typedef struct shape {
    const char *name;
    uint32_t ctx, rows;
} shape;

static const shape SHAPES[] = {
    {"decode", 2048, 1},
    {"decode", 8192, 1},
    {"decode", 32768, 1},
    {"prompt", 2048, 2048},
};

/* A filled cache of one format and shape, as swap_out left it, and the
 * step whose rows end it. */
typedef struct filled {
    pkv__backend_config cfg;
    uint8_t *blocks; /* swap_out of blocks 1 .. num_blocks - 1 */
    uint8_t *tail;   /* stage_out of tail 0 (quantized) */
    uint32_t *ids;   /* 1 .. num_blocks - 1 */
    uint32_t *table; /* the sequence's blocks, in a random order */
    uint32_t query_start[2], context_len, stage;
    uint64_t *slots;
    float *q, *out;
} filled;

static pkv__backend_config config_for(const geometry *g, const kv_format *f,
                                       uint32_t ctx)
{
    pkv__backend_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = 1;
    c.num_q_heads = g->hq;
    c.num_kv_heads = g->hkv;
    c.head_dim = g->head_dim;
    c.block_size = BLOCK;
    c.num_blocks = (ctx + BLOCK - 1) / BLOCK + 1;
    c.kv_dtype = f->dtype;
    c.key_quant = f->key_quant;
    c.value_quant = f->value_quant;
    c.u4_group = g->head_dim % 32 == 0 ? 32 : g->head_dim;
    c.num_stages = PKV_LAYOUT_QUANTIZED(f->dtype) ? 1 : 0;
    return c;
}

/* The step of rows [from, to) of the one sequence. */
static void step_of(filled *x, uint32_t from, uint32_t to,
                    const uint32_t *const *tables, pkv__step *s)
{
    x->query_start[0] = 0;
    x->query_start[1] = to - from;
    x->context_len = to;
    x->stage = 0;
    for (uint32_t t = from; t < to; t++)
        x->slots[t - from] =
            (uint64_t)x->table[t / BLOCK] * BLOCK + t % BLOCK;
    pkv__step step = {1,
                      to - from,
                      x->query_start,
                      &x->context_len,
                      tables,
                      x->cfg.num_blocks - 1,
                      NULL,
                      x->slots,
                      x->cfg.num_stages > 0 ? &x->stage : NULL,
                      NULL};
    *s = step;
}

static void filled_free(filled *x)
{
    free(x->blocks);
    free(x->tail);
    free(x->ids);
    free(x->table);
    free(x->slots);
    free(x->q);
    free(x->out);
}

/* Fill a cache of format f with ctx tokens of N(0,1) K and V, the last
 * `rows` of them the measured step's; 0 on success. */
static int fill(const geometry *g, const kv_format *f, const shape *sh,
                uint64_t *rng, filled *x)
{
    memset(x, 0, sizeof *x);
    x->cfg = config_for(g, f, sh->ctx);
    pkv_allocator plain = {NULL, NULL, NULL};
    pkv__allocator alloc;
    pkv__allocator_resolve(&plain, &alloc);
    pkv__backend *be = NULL;
    if (pkv__backend_cpu.create(&x->cfg, &alloc, &be) != PKV_OK)
        return -1;
    uint32_t nb = x->cfg.num_blocks - 1;
    size_t kv_row = (size_t)g->hkv * g->head_dim;
    size_t q_row = (size_t)g->hq * g->head_dim;
    x->ids = calloc(nb, sizeof *x->ids);
    x->table = calloc(nb, sizeof *x->table);
    x->slots = calloc(FILL_ROWS, sizeof *x->slots);
    x->q = calloc((size_t)sh->rows * q_row, sizeof(float));
    x->out = calloc((size_t)sh->rows * q_row, sizeof(float));
    float *k = calloc(FILL_ROWS * kv_row, sizeof(float));
    float *v = calloc(FILL_ROWS * kv_row, sizeof(float));
    x->blocks = malloc(pkv__backend_swap_bytes(&x->cfg, nb));
    x->tail = malloc(pkv__backend_stage_bytes(&x->cfg) + 1);
    int ok = x->ids && x->table && x->slots && x->q && x->out && k && v &&
             x->blocks && x->tail;
    for (uint32_t i = 0; ok && i < nb; i++)
        x->ids[i] = x->table[i] = i + 1;
    for (uint32_t i = nb; ok && i > 1; i--) {
        uint32_t j = (uint32_t)(test_rand(rng) % i), t = x->table[i - 1];
        x->table[i - 1] = x->table[j];
        x->table[j] = t;
    }
    if (ok)
        test_normal_fill(rng, x->q, (size_t)sh->rows * q_row);
    /* The history, then the measured rows, in steps of FILL_ROWS (the
     * measured rows of a prompt in one step of their own). */
    uint32_t first = sh->ctx - sh->rows;
    for (uint32_t from = 0; ok && from < sh->ctx;) {
        uint32_t to = from < first ? (first - from < FILL_ROWS
                                          ? first
                                          : from + FILL_ROWS)
                                   : sh->ctx;
        pkv__step s;
        const uint32_t *tables[1] = {x->table};
        step_of(x, from, to, tables, &s);
        test_normal_fill(rng, k, (size_t)(to - from) * kv_row);
        test_normal_fill(rng, v, (size_t)(to - from) * kv_row);
        ok = pkv__backend_cpu.begin_step(be, &s) == PKV_OK &&
             pkv__backend_cpu.append(be, 0, k, v) == PKV_OK;
        from = to;
    }
    if (ok)
        ok = pkv__backend_cpu.swap_out(be, x->ids, nb, x->blocks) == PKV_OK &&
             (x->cfg.num_stages == 0 ||
              pkv__backend_cpu.stage_out(be, 0, x->tail) == PKV_OK);
    pkv__backend_cpu.destroy(be);
    free(k);
    free(v);
    if (!ok)
        filled_free(x);
    return ok ? 0 : -1;
}

/* A backend of version `version` on `threads` threads holding x's cache,
 * its step begun; NULL when the version does not take the geometry. */
static pkv__backend *load(filled *x, const char *version, uint32_t threads,
                          lent_pool *pool, const uint32_t *const *tables)
{
    pkv__backend_config c = x->cfg;
    if (threads > 1) {
        c.parallel = lent_pool_parallel;
        c.parallel_user = pool;
        c.workers = threads;
    }
    pkv_allocator plain = {NULL, NULL, NULL};
    pkv__allocator alloc;
    pkv__allocator_resolve(&plain, &alloc);
    setenv("PKV_CPU_ATTEND", version, 1);
    pkv__backend *be = NULL;
    pkv_status st = pkv__backend_cpu.create(&c, &alloc, &be);
    unsetenv("PKV_CPU_ATTEND");
    if (st != PKV_OK)
        return NULL;
    uint32_t nb = c.num_blocks - 1;
    pkv__step s;
    step_of(x, x->context_len - x->query_start[1], x->context_len, tables,
            &s);
    if (pkv__backend_cpu.swap_in(be, x->blocks, x->ids, nb) != PKV_OK ||
        (c.num_stages > 0 &&
         pkv__backend_cpu.stage_in(be, x->tail, 0) != PKV_OK) ||
        pkv__backend_cpu.begin_step(be, &s) != PKV_OK) {
        pkv__backend_cpu.destroy(be);
        return NULL;
    }
    return be;
}

/* Bytes a token stores in one layer, parameters included. */
static double token_bytes(const pkv__backend_config *c)
{
    return (double)pkv__backend_layer_block_bytes(c) / c->block_size;
}

int bench_attend(const bench_options *opt)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int cpus = ncpu > 0 ? (int)ncpu : 1;
    double bw = 0.0;
    void *buf = bench_bw_buffer();
    if (buf != NULL) {
        bw = bench_read_gbps(buf, cpus, (size_t)1 << 20, 0);
        free(buf);
    }
    printf("CPU backend attention, blocks of %d tokens in a random order\n"
           "memory read bandwidth: %.1f GB/s (C, %d pthreads, vectorized "
           "sum over 1 GiB, best of 5)\n",
           BLOCK, bw, cpus);
    uint32_t max_threads = cpus > 1 ? 2 : 1;
    lent_pool pool;
    if (max_threads > 1 && lent_pool_start(&pool, max_threads - 1) != 0) {
        fprintf(stderr, "pkv-bench attend: cannot start a thread\n");
        return 1;
    }
    int reps = opt->quick ? REPS_QUICK : REPS;
    uint64_t rng = 7;
    int failed = 0;
    size_t ng = opt->quick ? 1 : sizeof GEOMETRIES / sizeof GEOMETRIES[0];
    size_t nsh = sizeof SHAPES / sizeof SHAPES[0];
    for (size_t gi = 0; gi < ng && !failed; gi++)
        for (size_t si = 0; si < nsh && !failed; si++) {
            const geometry *g = &GEOMETRIES[gi];
            const shape *sh = &SHAPES[si];
            if (opt->quick && !(sh->ctx == 8192 || sh->rows > 1))
                continue;
            filled x[NUM_FORMATS];
            size_t nf = 0;
            for (; nf < NUM_FORMATS; nf++) {
                bench_progress("attend: %s %s ctx %u: filling %s", g->name,
                               sh->name, (unsigned)sh->ctx,
                               FORMATS[nf].name);
                if (fill(g, &FORMATS[nf], sh, &rng, &x[nf]) != 0)
                    break;
            }
            failed = nf < NUM_FORMATS;
            for (size_t vi = 0;
                 !failed && pkv__attend_math_versions[vi] != NULL; vi++)
                for (uint32_t threads = 1; threads <= max_threads;
                     threads++) {
                    const pkv__attend_math *m = pkv__attend_math_versions[vi];
                    const char *version = m->name;
                    if (!m->runs() ||
                        (opt->quick && (vi > 0 || threads < max_threads)))
                        continue;
                    pkv__backend *be[NUM_FORMATS];
                    const uint32_t *tables[NUM_FORMATS][1];
                    int loaded = 1;
                    for (size_t f = 0; f < NUM_FORMATS; f++) {
                        tables[f][0] = x[f].table;
                        be[f] = load(&x[f], version, threads, &pool,
                                     tables[f]);
                        loaded &= be[f] != NULL;
                    }
                    /* The formats take turns, rep by rep. */
                    double t[NUM_FORMATS][REPS];
                    for (int r = 0; loaded && r < reps; r++)
                        for (size_t f = 0; f < NUM_FORMATS; f++) {
                            double t0 = bench_now_s();
                            if (pkv__backend_cpu.attend(be[f], 0, x[f].q,
                                                        x[f].out, 0.0f, 0) !=
                                PKV_OK)
                                loaded = 0;
                            t[f][r] = bench_now_s() - t0;
                        }
                    if (loaded) {
                        printf("\n%s %s, %u row%s at context %u, %s, %u "
                               "thread%s\n%-14s %10s %9s %9s %9s\n",
                               g->name, sh->name, (unsigned)sh->rows,
                               sh->rows > 1 ? "s" : "", (unsigned)sh->ctx,
                               version, (unsigned)threads,
                               threads > 1 ? "s" : "", "format",
                               "ms/attend", "KV GB/s", "% of bw",
                               "time/f16");
                        double f16 = bench_median(t[0], (size_t)reps);
                        for (size_t f = 0; f < NUM_FORMATS; f++) {
                            double s = bench_median(t[f], (size_t)reps);
                            double gbps =
                                sh->rows == 1 ? token_bytes(&x[f].cfg) *
                                                    sh->ctx / s / 1e9
                                              : 0.0;
                            printf("%-14s %10.3f %9.2f %8.0f%% %9.2f\n",
                                   FORMATS[f].name, s * 1e3, gbps,
                                   bw > 0 ? 100.0 * gbps / bw : 0.0,
                                   s / f16);
                            if (opt->json)
                                fprintf(opt->json,
                                        "{\"bench\":\"attend\",\"geometry\":"
                                        "\"%s\",\"shape\":\"%s\",\"ctx\":%u,"
                                        "\"rows\":%u,\"version\":\"%s\","
                                        "\"threads\":%u,\"format\":\"%s\","
                                        "\"ms\":%.4f,\"kv_gbps\":%.3f,"
                                        "\"mem_read_gbps\":%.3f,"
                                        "\"time_over_f16\":%.4f}\n",
                                        g->name, sh->name, (unsigned)sh->ctx,
                                        (unsigned)sh->rows, version,
                                        (unsigned)threads, FORMATS[f].name,
                                        s * 1e3, gbps, bw, s / f16);
                        }
                    }
                    for (size_t f = 0; f < NUM_FORMATS; f++)
                        pkv__backend_cpu.destroy(be[f]);
                }
            for (size_t f = 0; f < nf; f++)
                filled_free(&x[f]);
        }
    if (max_threads > 1)
        lent_pool_stop(&pool);
    if (failed)
        fprintf(stderr, "pkv-bench attend: out of memory\n");
    return failed;
}
