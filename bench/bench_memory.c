/* SPDX-License-Identifier: MIT */
/* pkv-bench memory: how much KV memory requests really use, under static
 * max-length allocation (one max_model_len slab per request, as servers did
 * before paging) and under pkv's paged block tables; how much n parallel
 * samples of one prompt share; and what each KV format costs per token.
 * Host-side only: no device is touched. */
#include "bench.h"
#include "sample.h"

#include "kv_layout.h"
#include "kv/table.h"

#include <math.h>
#include <stdlib.h>

/* A Llama-3-8B-like geometry, f16 KV: 32 layers x 8 kv heads x 128 dims x
 * (K + V) x 2 bytes = 128 KiB per token. */
#define BYTES_PER_TOKEN (32ull * 8 * 128 * 2 * 2)
#define MAX_MODEL_LEN 4096u
#define BLOCK_SIZE 16u
/* The fixed budget of the "fit" column: 8 GiB of KV. */
#define BUDGET_TOKENS ((8ull << 30) / BYTES_PER_TOKEN)

typedef struct memory_result {
    uint64_t tokens, static_slots, paged_slots;
    uint32_t static_fit, paged_fit;
} memory_result;

/* Lognormal total lengths (prompt + output), median 400, sigma 1,
 * clipped to [1, MAX_MODEL_LEN]. */
static uint32_t draw_length(uint64_t *rng)
{
    double len = exp(log(400.0) + host_normal(rng));
    return len < 1 ? 1 : len > MAX_MODEL_LEN ? MAX_MODEL_LEN : (uint32_t)len;
}

static int run_lognormal(uint32_t requests, memory_result *r)
{
    uint64_t rng = 2026;
    uint32_t *len = malloc(requests * sizeof *len);
    pkv__table *tables = malloc(requests * sizeof *tables);
    if (len == NULL || tables == NULL) {
        free(len);
        free(tables);
        return 1;
    }
    uint64_t max_blocks = 0;
    r->tokens = 0;
    for (uint32_t i = 0; i < requests; i++) {
        len[i] = draw_length(&rng);
        r->tokens += len[i];
        max_blocks += (len[i] + BLOCK_SIZE - 1) / BLOCK_SIZE;
        pkv__table_init(&tables[i]);
    }
    r->static_slots = (uint64_t)requests * MAX_MODEL_LEN;

    /* Every request at its full length, all resident at once. */
    pkv_allocator none = {NULL, NULL, NULL};
    pkv__allocator alloc;
    pkv__allocator_resolve(&none, &alloc);
    pkv__pool pool;
    int rc = 1;
    if (pkv__pool_init(&pool, &alloc, (uint32_t)max_blocks + 1, BLOCK_SIZE) !=
        PKV_OK)
        goto out;
    pkv__block_copy copy;
    for (uint32_t i = 0; i < requests; i++)
        if (pkv__table_append(&tables[i], &pool, len[i], &copy) != PKV_OK)
            goto out_pool;
    r->paged_slots = (uint64_t)(pool.num_used - 1) * BLOCK_SIZE;
    for (uint32_t i = 0; i < requests; i++)
        pkv__table_release(&tables[i], &pool);
    pkv__pool_release(&pool);

    /* How many of these requests, in arrival order, fit the fixed budget. */
    uint64_t budget_blocks = BUDGET_TOKENS / BLOCK_SIZE;
    if (pkv__pool_init(&pool, &alloc, (uint32_t)budget_blocks + 1,
                       BLOCK_SIZE) != PKV_OK)
        goto out;
    r->paged_fit = 0;
    for (uint32_t i = 0; i < requests; i++) {
        if (pkv__table_append(&tables[i], &pool, len[i], &copy) != PKV_OK)
            break;
        r->paged_fit++;
    }
    uint64_t static_fit = BUDGET_TOKENS / MAX_MODEL_LEN;
    r->static_fit = (uint32_t)(static_fit < requests ? static_fit : requests);
    for (uint32_t i = 0; i < requests; i++)
        pkv__table_release(&tables[i], &pool);
    rc = 0;
out_pool:
    pkv__pool_release(&pool);
out:
    free(len);
    free(tables);
    return rc;
}

/* n samples of one prompt: the prompt is computed once, every sample forks
 * its table and decodes its own tokens (copy-on-write of the shared tail). */
static int run_parallel_samples(uint32_t n, uint32_t prompt, uint32_t gen,
                                uint64_t *used, uint64_t *unshared,
                                uint64_t *bound)
{
    pkv_allocator none = {NULL, NULL, NULL};
    pkv__allocator alloc;
    pkv__allocator_resolve(&none, &alloc);
    pkv__pool pool;
    uint32_t per_seq = (prompt + gen + BLOCK_SIZE - 1) / BLOCK_SIZE;
    if (pkv__pool_init(&pool, &alloc, n * per_seq + 2, BLOCK_SIZE) != PKV_OK)
        return 1;
    pkv__table parent, *samples = malloc(n * sizeof *samples);
    if (samples == NULL) {
        pkv__pool_release(&pool);
        return 1;
    }
    pkv__table_init(&parent);
    pkv__block_copy copy;
    int rc = pkv__table_append(&parent, &pool, prompt, &copy) != PKV_OK;
    for (uint32_t i = 0; i < n && !rc; i++) {
        pkv__table_init(&samples[i]);
        rc = pkv__table_fork(&samples[i], &parent, &pool) != PKV_OK;
    }
    pkv__table_release(&parent, &pool);
    for (uint32_t t = 0; t < gen && !rc; t++)
        for (uint32_t i = 0; i < n && !rc; i++)
            rc = pkv__table_append(&samples[i], &pool, 1, &copy) != PKV_OK;
    *used = pool.num_used - 1;
    *unshared = (uint64_t)n * per_seq;
    uint32_t prompt_blocks = (prompt + BLOCK_SIZE - 1) / BLOCK_SIZE;
    uint32_t gen_blocks = (gen + BLOCK_SIZE - 1) / BLOCK_SIZE;
    *bound = prompt_blocks + (uint64_t)n * (gen_blocks + 1);
    for (uint32_t i = 0; i < n; i++)
        pkv__table_release(&samples[i], &pool);
    free(samples);
    pkv__pool_release(&pool);
    return rc;
}

/* The formats table's model: sequences of FORMAT_SEQ_LEN tokens in
 * FORMAT_LAYERS layers of FORMAT_KV_HEADS kv heads (Llama-3-8B's at
 * head_dim 128). */
#define FORMAT_LAYERS 32u
#define FORMAT_KV_HEADS 8u
#define FORMAT_SEQ_LEN 1024u
#define FORMAT_U4_GROUP 32u

/* One KV format: its pkv_kv_dtype and K / V groups. */
typedef struct kv_format {
    const char *name;
    uint32_t dtype, key_group, value_group;
} kv_format;

/* Bytes per token of every format at head_dim 128 and 256 and block 16,
 * 32 and 64 (one kv head of one layer, K and V, parameters and padding
 * included), and how many FORMAT_SEQ_LEN-token sequences of the format's
 * model fit in a GiB (a fraction: the point is the ratio), a quantized
 * format's staging tail (one block of f32 K and V, all layers) counted per
 * sequence. */
static void formats_table(const bench_options *opt)
{
    static const kv_format formats[] = {
        {"f16", PKV_LAYOUT_F16, PKV_LAYOUT_PER_CHANNEL,
         PKV_LAYOUT_PER_CHANNEL},
        {"u8", PKV_LAYOUT_U8, PKV_LAYOUT_PER_CHANNEL, PKV_LAYOUT_PER_TOKEN},
        {"u8 token keys", PKV_LAYOUT_U8, PKV_LAYOUT_PER_TOKEN,
         PKV_LAYOUT_PER_TOKEN},
        {"u8k-u4v", PKV_LAYOUT_U8K_U4V, PKV_LAYOUT_PER_CHANNEL,
         PKV_LAYOUT_PER_TOKEN},
        {"u4", PKV_LAYOUT_U4, PKV_LAYOUT_PER_CHANNEL, PKV_LAYOUT_PER_TOKEN},
        {"u4 token keys", PKV_LAYOUT_U4, PKV_LAYOUT_PER_TOKEN,
         PKV_LAYOUT_PER_TOKEN},
    };
    static const uint32_t dims[] = {128, 256}, blocks[] = {16, 32, 64};
    printf("\nformats: bytes per token of one kv head (K + V), and sequences "
           "of %u tokens per GiB (%u layers x %u kv heads, u4 groups of %u)\n",
           FORMAT_SEQ_LEN, FORMAT_LAYERS, FORMAT_KV_HEADS, FORMAT_U4_GROUP);
    printf("%-14s %5s %5s %12s %8s %12s\n", "format", "dim", "block",
           "bytes/token", "vs f16", "seqs/GiB");
    for (size_t di = 0; di < 2; di++)
        for (size_t bi = 0; bi < 3; bi++)
            for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
                const kv_format *k = &formats[f];
                uint64_t d = dims[di], bs = blocks[bi];
                uint64_t head = PKV_LAYOUT_HEAD_BYTES(
                    (uint64_t)k->dtype, (uint64_t)k->key_group,
                    (uint64_t)k->value_group, (uint64_t)FORMAT_U4_GROUP, bs,
                    d);
                uint64_t f16 = 2 * 2 * d;
                uint64_t heads = (uint64_t)FORMAT_LAYERS * FORMAT_KV_HEADS;
                uint64_t nblocks = (FORMAT_SEQ_LEN + bs - 1) / bs;
                uint64_t tail = PKV_LAYOUT_QUANTIZED(k->dtype)
                                    ? heads * 2 * bs * d * 4
                                    : 0;
                uint64_t seq = nblocks * head * heads + tail;
                double per_token = (double)head / (double)bs;
                double fit = (double)(1ull << 30) / (double)seq;
                printf("%-14s %5llu %5llu %12.1f %7.2fx %12.2f\n", k->name,
                       (unsigned long long)d, (unsigned long long)bs,
                       per_token, (double)f16 / per_token, fit);
                if (opt->json)
                    fprintf(opt->json,
                            "{\"bench\":\"memory\",\"workload\":"
                            "\"formats\",\"format\":\"%s\","
                            "\"head_dim\":%llu,\"block_size\":%llu,"
                            "\"bytes_per_token\":%.2f,\"vs_f16\":%.3f,"
                            "\"seqs_per_gib\":%.3f}\n",
                            k->name, (unsigned long long)d,
                            (unsigned long long)bs, per_token,
                            (double)f16 / per_token, fit);
            }
}

int bench_memory(const bench_options *opt)
{
    printf("memory: lognormal lengths (median 400, sigma 1, max %u), "
           "block %u, %llu KiB of f16 KV per token, budget %llu tokens\n",
           MAX_MODEL_LEN, BLOCK_SIZE,
           (unsigned long long)(BYTES_PER_TOKEN >> 10),
           (unsigned long long)BUDGET_TOKENS);
    printf("%9s %14s %14s %14s %8s %8s %11s %10s %6s\n", "requests",
           "used GiB", "static GiB", "paged GiB", "static%", "paged%",
           "static fit", "paged fit", "ratio");
    const uint32_t sizes[] = {100, 10000};
    FILE *plot = bench_plot_open(opt, "memory");
    for (size_t k = 0; k < 2; k++) {
        memory_result r;
        if (run_lognormal(sizes[k], &r) != 0) {
            fprintf(stderr, "memory: lognormal %u failed\n", sizes[k]);
            return 1;
        }
        double gib = (double)BYTES_PER_TOKEN / (double)(1ull << 30);
        double su = (double)r.tokens / (double)r.static_slots;
        double pu = (double)r.tokens / (double)r.paged_slots;
        double ratio = (double)r.paged_fit / (double)r.static_fit;
        printf("%9u %14.1f %14.1f %14.1f %7.1f%% %7.1f%% %11u %10u %5.1fx\n",
               sizes[k], (double)r.tokens * gib,
               (double)r.static_slots * gib, (double)r.paged_slots * gib,
               100 * su, 100 * pu, r.static_fit, r.paged_fit, ratio);
        if (plot != NULL)
            fprintf(plot, "\"%u requests\" %.2f %.2f\n", sizes[k], 100 * su,
                    100 * pu);
        if (opt->json)
            fprintf(opt->json,
                    "{\"bench\":\"memory\",\"workload\":\"lognormal\","
                    "\"requests\":%u,\"tokens\":%llu,\"static_slots\":%llu,"
                    "\"paged_slots\":%llu,\"static_utilization\":%.5f,"
                    "\"paged_utilization\":%.5f,\"static_fit\":%u,"
                    "\"paged_fit\":%u,\"concurrency_ratio\":%.3f}\n",
                    sizes[k], (unsigned long long)r.tokens,
                    (unsigned long long)r.static_slots,
                    (unsigned long long)r.paged_slots, su, pu, r.static_fit,
                    r.paged_fit, ratio);
    }

    bench_plot_close(opt, plot, "memory",
                     "set style data histograms\n"
                     "set style fill solid 0.8\n"
                     "set yrange [0:100]\n"
                     "set ylabel 'KV utilisation (% of allocated slots)'\n"
                     "plot data using 2:xtic(1) title 'static max-length', "
                     "'' using 3 title 'paged (block 16)'");
    const uint32_t n = 8, prompt = 1000, gen = 200;
    uint64_t used, unshared, bound;
    if (run_parallel_samples(n, prompt, gen, &used, &unshared, &bound)) {
        fprintf(stderr, "memory: parallel samples failed\n");
        return 1;
    }
    printf("parallel samples: n=%u, prompt %u, %u tokens each: %llu blocks "
           "used, %llu unshared (%.2fx less), bound %llu: %s\n",
           n, prompt, gen, (unsigned long long)used,
           (unsigned long long)unshared, (double)unshared / (double)used,
           (unsigned long long)bound, used <= bound ? "met" : "MISSED");
    if (opt->json)
        fprintf(opt->json,
                "{\"bench\":\"memory\",\"workload\":\"parallel_samples\","
                "\"requests\":%u,\"prompt_tokens\":%u,\"generated_tokens\":%u,"
                "\"blocks_used\":%llu,\"blocks_unshared\":%llu,"
                "\"blocks_bound\":%llu}\n",
                n, prompt, gen, (unsigned long long)used,
                (unsigned long long)unshared, (unsigned long long)bound);
    formats_table(opt);
    if (bench_hybrid_memory(opt) != 0)
        return 1;
    return used <= bound ? 0 : 1;
}
