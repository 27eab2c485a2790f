/* SPDX-License-Identifier: MIT */
/* pkv-bench memory, hybrid memory's part: how many sequences of 2k, 8k and
 * 32k tokens fit in 1 GiB of KV with and without hybrid memory
 * (pkv_engine_params.kv_memory), for Gemma 3 270M's geometry (18
 * layers, 1 kv head of 256 dims, 15 of them windowed at 512 tokens) and a
 * Llama-like geometry without windows, f16 and U8.
 *
 * Both figures come from engines, none from a formula: the blocks a
 * sequence holds are counted by running it (a prompt of the context, then
 * a decode step) through an engine with the model's pattern of windows,
 * its block size and its chunk of prompt per step, over one small head
 * (the count does not depend on heads or on how many layers share a
 * pattern: Gemma 3's 3 full and 15 windowed layers make 6 groups of 3,
 * 1 full and 5 windowed make 6 groups of 1); the blocks 1 GiB holds come
 * from an engine with the model's whole geometry. */
#include "bench.h"

#include "pkv/pkv.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE 16u /* a GPU's (pkv__backend_default_block_size) */
#define BUDGET (1ull << 30)

typedef struct model_shape {
    const char *name;
    uint32_t layers, q_heads, kv_heads, head_dim;
    /* The pattern of windows, reduced: layers per pattern. */
    uint32_t pattern_layers;
    const uint32_t *pattern; /* [pattern_layers] */
    const uint32_t *windows; /* [layers]: the model's, or NULL */
} model_shape;

/* Gemma 3: five windowed layers, then a full one. */
static const uint32_t gemma_pattern[6] = {512, 512, 512, 512, 512, 0};
static uint32_t gemma_windows[18];
static const uint32_t full_pattern[1] = {0};

/* The blocks one sequence of ctx tokens holds between steps once it
 * decodes (*held) and at most during its prompt (*peak). */
static int count_blocks(const model_shape *m, uint32_t ctx, int hybrid,
                        uint64_t *held, uint64_t *peak)
{
    pkv_engine_params p;
    pkv_engine_params_init(&p);
    p.num_layers = m->pattern_layers;
    p.num_q_heads = 1;
    p.num_kv_heads = 1;
    p.head_dim = 4;
    p.kv_dtype = PKV_KV_DTYPE_F32;
    p.block_size = BLOCK_SIZE;
    p.max_model_len = ctx + 16;
    p.layer_windows = m->pattern;
    p.kv_memory = hybrid ? PKV_KV_MEMORY_HYBRID : PKV_KV_MEMORY_EVERY_TOKEN;
    p.num_blocks = ctx / BLOCK_SIZE + 5; /* over every layer: room */
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "memory: %s\n", pkv_last_error());
        return 1;
    }
    int32_t *prompt = malloc((size_t)ctx * sizeof *prompt);
    size_t rows = p.max_batch_tokens;
    float *x = calloc(rows * 4, sizeof *x), *out = calloc(rows * 4, 4);
    int rc = prompt == NULL || x == NULL || out == NULL;
    for (uint32_t t = 0; rc == 0 && t < ctx; t++)
        prompt[t] = (int32_t)(t % 1000);
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = ctx;
    sp.max_new_tokens = 8; /* still running after its first decode */
    pkv_seq_id id;
    rc = rc || pkv_seq_add(e, &sp, &id) != PKV_OK;
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    *peak = 0;
    /* The prompt in chunks of max_batch_tokens, then one decode step. */
    for (int decoded = 0; rc == 0 && !decoded;) {
        const pkv_batch *b;
        rc = pkv_engine_step_begin(e, &b) != PKV_OK;
        rc = rc || pkv_engine_get_stats(e, &st) != PKV_OK;
        if (rc == 0 && st.blocks_used - 1 > *peak)
            *peak = st.blocks_used - 1;
        pkv_tensor t =
            pkv_tensor_host(x, 0, PKV_TENSOR_DTYPE_F32, b->num_tokens, 1, 4);
        pkv_tensor o = t;
        o.data = out;
        for (uint32_t l = 0; rc == 0 && l < p.num_layers; l++)
            rc = pkv_engine_attend(e, l, &t, &t, &t, &o) != PKV_OK;
        int32_t sampled[1] = {7};
        decoded = rc == 0 && b->num_tokens == 1;
        rc = rc || pkv_engine_step_end(e, sampled, NULL, b->num_samples) !=
                       PKV_OK;
    }
    rc = rc || pkv_engine_get_stats(e, &st) != PKV_OK;
    if (rc != 0)
        fprintf(stderr, "memory: %s\n", pkv_last_error());
    *held = st.blocks_used - 1;
    free(prompt);
    free(x);
    free(out);
    pkv_engine_destroy(e);
    return rc;
}

/* The blocks 1 GiB holds for the model's whole geometry, and their
 * bytes. */
static int budget_blocks(const model_shape *m, int32_t dtype, int hybrid,
                         uint64_t *blocks, uint64_t *block_bytes)
{
    pkv_engine_params p;
    pkv_engine_params_init(&p);
    p.num_layers = m->layers;
    p.num_q_heads = m->q_heads;
    p.num_kv_heads = m->kv_heads;
    p.head_dim = m->head_dim;
    p.kv_dtype = dtype;
    p.block_size = BLOCK_SIZE;
    p.cache_bytes = BUDGET;
    p.max_num_seqs = 16; /* U8 staging tails: few */
    p.layer_windows = m->windows;
    p.kv_memory = hybrid ? PKV_KV_MEMORY_HYBRID : PKV_KV_MEMORY_EVERY_TOKEN;
    p.backend = PKV_BACKEND_KIND_CPU;
    pkv_engine *e;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "memory: %s\n", pkv_last_error());
        return 1;
    }
    pkv_engine_stats st;
    pkv_engine_stats_init(&st);
    int rc = pkv_engine_get_stats(e, &st) != PKV_OK;
    *blocks = st.blocks_total - 1;
    *block_bytes = st.block_bytes;
    pkv_engine_destroy(e);
    return rc;
}

int bench_hybrid_memory(const bench_options *opt)
{
    for (uint32_t l = 0; l < 18; l++)
        gemma_windows[l] = gemma_pattern[l % 6];
    const model_shape models[2] = {
        {"gemma3-270m", 18, 4, 1, 256, 6, gemma_pattern, gemma_windows},
        {"llama-like", 22, 32, 4, 64, 1, full_pattern, NULL},
    };
    const int32_t dtypes[2] = {PKV_KV_DTYPE_F16, PKV_KV_DTYPE_U8};
    const char *dtype_names[2] = {"f16", "u8"};
    const uint32_t contexts[3] = {2048, 8192, 32768};
    printf("hybrid memory: sequences that fit in 1 GiB of KV, block %u, "
           "chunks of the default max_batch_tokens (one sequence's blocks "
           "counted by running it)\n",
           BLOCK_SIZE);
    printf("%-12s %4s %6s %12s %12s %10s %10s %7s %7s %6s\n", "model", "kv",
           "ctx", "MiB/seq", "MiB/seq hyb", "peak MiB", "peak hyb", "fit",
           "fit hyb", "ratio");
    int rc = 0;
    for (size_t m = 0; m < 2 && rc == 0; m++) {
        /* [dtype][hybrid] */
        uint64_t budget[2][2], block_bytes[2][2];
        for (size_t d = 0; d < 2 && rc == 0; d++)
            for (int h = 0; h < 2 && rc == 0; h++)
                rc = budget_blocks(&models[m], dtypes[d], h, &budget[d][h],
                                   &block_bytes[d][h]);
        for (size_t c = 0; c < 3 && rc == 0; c++) {
            if (opt->quick && contexts[c] > 8192)
                continue;
            uint64_t held[2], peak[2];
            for (int h = 0; h < 2 && rc == 0; h++)
                rc = count_blocks(&models[m], contexts[c], h, &held[h],
                                  &peak[h]);
            for (size_t d = 0; d < 2 && rc == 0; d++) {
                const uint64_t *blocks = budget[d], *bytes = block_bytes[d];
                double mib[2], peak_mib[2];
                uint64_t fit[2];
                for (int h = 0; h < 2; h++) {
                    mib[h] = (double)(held[h] * bytes[h]) / (1 << 20);
                    peak_mib[h] = (double)(peak[h] * bytes[h]) / (1 << 20);
                    fit[h] = blocks[h] / held[h];
                }
                double ratio =
                    fit[0] ? (double)fit[1] / (double)fit[0] : 0.0;
                printf("%-12s %4s %6u %12.2f %12.2f %10.2f %10.2f %7llu "
                       "%7llu %5.2fx\n",
                       models[m].name, dtype_names[d], contexts[c], mib[0],
                       mib[1], peak_mib[0], peak_mib[1],
                       (unsigned long long)fit[0], (unsigned long long)fit[1],
                       ratio);
                if (opt->json)
                    fprintf(opt->json,
                            "{\"bench\":\"memory\",\"workload\":\"hybrid\","
                            "\"model\":\"%s\",\"kv\":\"%s\",\"ctx\":%u,"
                            "\"mib_per_seq\":%.3f,\"mib_per_seq_hybrid\":%.3f,"
                            "\"peak_mib\":%.3f,\"peak_mib_hybrid\":%.3f,"
                            "\"fit\":%llu,\"fit_hybrid\":%llu,"
                            "\"ratio\":%.3f}\n",
                            models[m].name, dtype_names[d], contexts[c],
                            mib[0], mib[1], peak_mib[0], peak_mib[1],
                            (unsigned long long)fit[0],
                            (unsigned long long)fit[1], ratio);
            }
        }
    }
    return rc;
}
