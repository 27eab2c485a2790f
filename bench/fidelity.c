/* SPDX-License-Identifier: MIT */
/*
 * pkv-fidelity: relative L2 error of paged attention over an f16 or u8
 * cache against the f64 dense reference, per quantization grouping, on
 * Gaussian data and on data whose keys have a few outlier channels. The
 * table it prints is recorded in docs/fidelity.md.
 *
 * Usage: pkv-fidelity [--quick]   (--quick: contexts 128 and 1024 only)
 */
#include "backend.h"
#include "dense_ref.h"
#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEAD_DIM 128
#define Q_HEADS 32
#define KV_HEADS 8
#define BLOCK 16
#define ROWS 8           /* query rows: the context's last 8 tokens */
#define SEQS 4           /* sequences averaged per cell */
#define OUTLIER_EVERY 32 /* channels 0, 32, 64, 96 of each kv head */
#define OUTLIER_GAIN 20.0f

typedef struct kv_config {
    const char *name;
    int32_t dtype, key_quant, value_quant;
} kv_config;

static const kv_config CONFIGS[] = {
    {"f32", PKV_KV_DTYPE_F32, 0, 0},
    {"f16", PKV_KV_DTYPE_F16, 0, 0},
    {"u8 K-chan V-tok", PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_TOKEN},
    {"u8 K-tok V-tok", PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_TOKEN,
     PKV_QUANT_GROUP_PER_TOKEN},
    {"u8 K-chan V-chan", PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_CHANNEL,
     PKV_QUANT_GROUP_PER_CHANNEL},
    {"u8 K-tok V-chan", PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_TOKEN,
     PKV_QUANT_GROUP_PER_CHANNEL},
};
#define NUM_CONFIGS (sizeof CONFIGS / sizeof CONFIGS[0])

/* One sequence of ctx tokens: K, V [ctx][KV_HEADS][HEAD_DIM], Q for its
 * last ROWS tokens. */
typedef struct sequence {
    uint32_t ctx;
    float *k, *v, *q;
} sequence;

static void *must_calloc(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        fprintf(stderr, "pkv-fidelity: out of memory\n");
        exit(1);
    }
    return p;
}

static void sequence_make(sequence *s, uint32_t ctx, int outliers,
                          uint64_t *rng)
{
    size_t kv = (size_t)ctx * KV_HEADS * HEAD_DIM;
    size_t qn = (size_t)ROWS * Q_HEADS * HEAD_DIM;
    s->ctx = ctx;
    s->k = must_calloc(kv, sizeof(float));
    s->v = must_calloc(kv, sizeof(float));
    s->q = must_calloc(qn, sizeof(float));
    test_normal_fill(rng, s->k, kv);
    test_normal_fill(rng, s->v, kv);
    test_normal_fill(rng, s->q, qn);
    for (size_t i = 0; outliers && i < kv; i += OUTLIER_EVERY)
        s->k[i] *= OUTLIER_GAIN; /* channel i % HEAD_DIM, every token */
}

/* Write the sequence into a fresh cache (history, then the last ROWS
 * tokens in a second step), attend, and return the squared L2 error and
 * the squared L2 norm of the reference. */
static int run(const kv_config *kc, const sequence *s, const double *ref,
               double *err2, double *norm2)
{
    uint32_t nb = (s->ctx + BLOCK - 1) / BLOCK;
    pkv_allocator none = {NULL, NULL, NULL};
    pkv__allocator alloc;
    pkv__allocator_resolve(&none, &alloc);
    pkv__backend_config cfg = {
        .num_layers = 1,
        .num_q_heads = Q_HEADS,
        .num_kv_heads = KV_HEADS,
        .head_dim = HEAD_DIM,
        .block_size = BLOCK,
        .num_blocks = nb + 1,
        .kv_dtype = kc->dtype,
        .key_quant = kc->key_quant,
        .value_quant = kc->value_quant,
        .u4_group = 32,
        .num_stages = kc->dtype == PKV_KV_DTYPE_U8 ? 1u : 0u,
    };
    pkv__backend *be;
    if (pkv__backend_cpu.create(&cfg, &alloc, &be) != PKV_OK)
        return -1;
    uint32_t *table = must_calloc(nb, sizeof *table);
    uint64_t *slots = must_calloc(s->ctx, sizeof *slots);
    for (uint32_t j = 0; j < nb; j++)
        table[j] = nb - j; /* reversed: not contiguous in the arena */
    for (uint32_t t = 0; t < s->ctx; t++)
        slots[t] = (uint64_t)table[t / BLOCK] * BLOCK + t % BLOCK;
    size_t row = (size_t)KV_HEADS * HEAD_DIM;
    float *out = must_calloc((size_t)ROWS * Q_HEADS * HEAD_DIM, sizeof *out);
    uint32_t split[3] = {0, s->ctx - ROWS, s->ctx}, stage = 0;
    const uint32_t *tables[1] = {table}; /* read until the attend */
    int rc = 0;
    for (int step = 0; step < 2 && rc == 0; step++) {
        uint32_t qs[2] = {0, split[step + 1] - split[step]};
        pkv__step st = {1,
                        qs[1],
                        qs,
                        &split[step + 1],
                        tables,
                        nb,
                        NULL,
                        slots + split[step],
                        kc->dtype == PKV_KV_DTYPE_U8 ? &stage : NULL,
                        NULL};
        rc |= pkv__backend_cpu.begin_step(be, &st) != PKV_OK;
        rc |= pkv__backend_cpu.append(be, 0, s->k + split[step] * row,
                                      s->v + split[step] * row) != PKV_OK;
    }
    if (rc == 0)
        rc = pkv__backend_cpu.attend(be, 0, s->q, out, 0.0f, 0) != PKV_OK;
    for (size_t i = 0; i < (size_t)ROWS * Q_HEADS * HEAD_DIM; i++) {
        double e = (double)out[i] - ref[i];
        *err2 += e * e;
        *norm2 += ref[i] * ref[i];
    }
    free(out);
    free(slots);
    free(table);
    pkv__backend_cpu.destroy(be);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (argc > 2 || (argc == 2 && !quick)) {
        fprintf(stderr, "usage: pkv-fidelity [--quick]\n");
        return 2;
    }
    static const uint32_t contexts[] = {128, 1024, 4096};
    size_t n_ctx = quick ? 2 : 3;
    printf("relative L2 error of attention output vs f64 dense reference\n"
           "head_dim %d, Hq %d, Hkv %d, block %d, %d query rows x %d "
           "sequences per cell; outliers: key channels 0,32,64,96 x%g\n\n",
           HEAD_DIM, Q_HEADS, KV_HEADS, BLOCK, ROWS, SEQS,
           (double)OUTLIER_GAIN);
    printf("| data | context |");
    for (size_t c = 0; c < NUM_CONFIGS; c++)
        printf(" %s |", CONFIGS[c].name);
    printf("\n|---|---:|");
    for (size_t c = 0; c < NUM_CONFIGS; c++)
        printf("---:|");
    printf("\n");
    uint32_t rows[ROWS];
    for (uint32_t r = 0; r < ROWS; r++)
        rows[r] = r;
    for (int outliers = 0; outliers < 2; outliers++)
        for (size_t ci = 0; ci < n_ctx; ci++) {
            double err2[NUM_CONFIGS] = {0}, norm2[NUM_CONFIGS] = {0};
            uint64_t rng = 1000u * contexts[ci] + (uint64_t)outliers;
            for (int sq = 0; sq < SEQS; sq++) {
                sequence s;
                sequence_make(&s, contexts[ci], outliers, &rng);
                double *ref = must_calloc((size_t)ROWS * Q_HEADS * HEAD_DIM,
                                          sizeof *ref);
                dense_ref_attention(s.q, s.k, s.v, ROWS, s.ctx, Q_HEADS,
                                    KV_HEADS, HEAD_DIM, 0.0, 0, rows, ROWS,
                                    ref);
                for (size_t c = 0; c < NUM_CONFIGS; c++)
                    if (run(&CONFIGS[c], &s, ref, &err2[c], &norm2[c]) != 0) {
                        fprintf(stderr, "pkv-fidelity: backend failed: %s\n",
                                pkv_last_error());
                        return 1;
                    }
                free(ref);
                free(s.k);
                free(s.v);
                free(s.q);
            }
            printf("| %s | %u |", outliers ? "outlier keys" : "gaussian",
                   (unsigned)contexts[ci]);
            for (size_t c = 0; c < NUM_CONFIGS; c++)
                printf(" %.2e |", sqrt(err2[c] / norm2[c]));
            printf("\n");
        }
    return 0;
}
