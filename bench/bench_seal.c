/* SPDX-License-Identifier: MIT */
/*
 * pkv-bench seal: what sealing under a deployment key
 * (pkv_engine_params.seal_key) costs a KV store's saves and installs,
 * against the same without a key, in one run. Values of 1 MiB of f16 KV
 * (16 layers of 8 kv heads of 128 channels, blocks of 16 tokens), through
 * the tests' in-process store (tests/store_fake.c), so that no network is
 * timed: a save is the step_end that reads a prompt's blocks out of the
 * pool, checksums and (with a key) seals them and hands them to the
 * store; an install is the step_begin that verifies (with a key, opens)
 * them and writes them into a second engine's pool. CPU backend; the
 * host's q, k and v are fixed numbers, which the attention does not care
 * about. Then the two hashes of the path on their own: a block's digest
 * (the store's names, SHA-256 through libcrypto) and the checksum of an
 * unsealed value (XXH3).
 */
#include "bench.h"

#include "pkv/pkv.h"
#include "store/digest.h" /* src/ */
#include "store_fake.h"   /* tests/ */
#include "wire.h"         /* src/ */

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

enum {
    LAYERS = 16,
    KV_HEADS = 8,
    HEAD_DIM = 128,
    BLOCK = 16,
    VALUES = 8, /* the prompt's full blocks: values saved and installed */
    PROMPT = VALUES * BLOCK + 1,
    ROUNDS = 9,
    ROUNDS_QUICK = 3,
    CHAIN = 4096 /* blocks chained per round of the digest's timing */
};

/* Any 32 bytes: what is measured does not depend on them. */
static const uint8_t KEY[32] = {
    0x3c, 0x91, 0x0e, 0x5a, 0x77, 0x02, 0xd4, 0x6b, 0x18, 0xe9, 0xa0,
    0x4f, 0x62, 0xb3, 0x85, 0x1d, 0xc7, 0x39, 0xfe, 0x20, 0x54, 0x8a,
    0x6d, 0x13, 0xb8, 0x47, 0x0c, 0xe5, 0x9a, 0x71, 0x26, 0xdf};

typedef struct host {
    fs_store fs;
    pkv_store store;
    pkv_engine *engine;
    float *qkv, *out; /* PROMPT rows of LAYERS x KV_HEADS x HEAD_DIM */
} host;

static pkv_engine_params params_of(const uint8_t *key)
{
    pkv_engine_params p;
    pkv_engine_params_init(&p);
    p.num_layers = LAYERS;
    p.num_q_heads = KV_HEADS;
    p.num_kv_heads = KV_HEADS;
    p.head_dim = HEAD_DIM;
    p.block_size = BLOCK;
    p.kv_dtype = PKV_KV_DTYPE_F16;
    p.backend = PKV_BACKEND_KIND_CPU;
    p.num_blocks = 2 * VALUES + 4;
    p.seal_key = key;
    return p;
}

static int start(host *h, fs_data *data, const uint8_t *key)
{
    memset(h, 0, sizeof *h);
    pkv_store_init(&h->store);
    fs_connect(&h->fs, data, &h->store);
    pkv_engine_params p = params_of(key);
    p.store = &h->store;
    size_t n = (size_t)PROMPT * KV_HEADS * HEAD_DIM;
    h->qkv = malloc(n * sizeof *h->qkv);
    h->out = malloc(n * sizeof *h->out);
    if (h->qkv == NULL || h->out == NULL ||
        pkv_engine_create(&p, &h->engine) != PKV_OK)
        return 1;
    for (size_t i = 0; i < n; i++)
        h->qkv[i] = (float)(i % 61) / 61.0f - 0.5f;
    return 0;
}

static void stop(host *h)
{
    pkv_engine_destroy(h->engine); /* cancels what is in flight */
    fs_free(&h->fs);
    free(h->qkv);
    free(h->out);
}

/* Run prompt to its one sampled token. *save: seconds of the step_end
 * that computed the prompt's blocks (it sends them); *install: of the
 * slowest step_begin (the one that installs loaded blocks). 0 on
 * success. */
static int serve(host *h, const int32_t *prompt, double *save,
                 double *install)
{
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = PROMPT;
    sp.max_new_tokens = 1;
    pkv_seq_id id;
    if (pkv_seq_add(h->engine, &sp, &id) != PKV_OK)
        return 1;
    *save = 0;
    *install = 0;
    while (pkv_engine_has_work(h->engine)) {
        const pkv_batch *b;
        double t0 = bench_now_s();
        if (pkv_engine_step_begin(h->engine, &b) != PKV_OK)
            return 1;
        double t1 = bench_now_s();
        if (t1 - t0 > *install)
            *install = t1 - t0;
        uint32_t rows = b->num_tokens;
        pkv_tensor t = pkv_tensor_host(h->qkv, 0, PKV_TENSOR_DTYPE_F32, rows,
                                       KV_HEADS, HEAD_DIM);
        pkv_tensor o = pkv_tensor_host(h->out, 0, PKV_TENSOR_DTYPE_F32, rows,
                                       KV_HEADS, HEAD_DIM);
        for (uint32_t l = 0; rows > 0 && l < LAYERS; l++)
            if (pkv_engine_attend(h->engine, l, &t, &t, &t, &o) != PKV_OK)
                return 1;
        int32_t tokens[1] = {0};
        double t2 = bench_now_s();
        if (pkv_engine_step_end(h->engine, tokens, NULL, b->num_samples) !=
            PKV_OK)
            return 1;
        if (rows == PROMPT)
            *save = bench_now_s() - t2;
    }
    return 0;
}

/* One round of mode (key NULL: none): a first engine computes and saves
 * the prompt, a second installs it. Seconds per value in *save and
 * *install. 0 on success. */
static int round_of(const uint8_t *key, const int32_t *prompt, double *save,
                    double *install)
{
    fs_data data = {0};
    host a, b;
    double unused;
    int rc = start(&a, &data, key) || serve(&a, prompt, save, &unused);
    stop(&a);
    rc = rc || data.count != VALUES || start(&b, &data, key) ||
         serve(&b, prompt, &unused, install);
    pkv_engine_stats s;
    pkv_engine_stats_init(&s);
    if (!rc && (pkv_engine_get_stats(b.engine, &s) != PKV_OK ||
                s.store_hit_blocks != VALUES))
        rc = 1;
    stop(&b);
    fs_data_free(&data);
    *save /= VALUES;
    *install /= VALUES;
    return rc;
}

/* Seconds per block of the digest chain (pkv__digest_block) for blocks
 * of block_size tokens: a chain of CHAIN blocks per round, the median of
 * rounds. -1 when libcrypto fails. */
static double digest_cost(const EVP_MD *md, uint32_t block_size,
                          const int32_t *tokens, size_t rounds)
{
    double t[ROUNDS];
    uint8_t d[PKV__DIGEST_BYTES] = {0};
    for (size_t r = 0; r < rounds; r++) {
        double t0 = bench_now_s();
        for (uint32_t b = 0; b < CHAIN; b++)
            if (pkv__digest_block(md, d, tokens, block_size, d) != PKV_OK)
                return -1;
        t[r] = (bench_now_s() - t0) / CHAIN;
    }
    return bench_median(t, rounds);
}

/* Seconds for the checksum of n bytes at v (pkv__checksum, as a store
 * value's): the median of rounds. */
static double checksum_cost(const uint8_t *v, size_t n, size_t rounds)
{
    double t[ROUNDS];
    volatile uint64_t sink = 0;
    for (size_t r = 0; r < rounds; r++) {
        double t0 = bench_now_s();
        sink ^= pkv__checksum(v, n, 120);
        t[r] = bench_now_s() - t0;
    }
    (void)sink;
    return bench_median(t, rounds);
}

/* The hashes on their own: a block's digest for blocks of 16 and 64
 * tokens, and the checksum of one value of the size above. */
static int hashes(const bench_options *opt, const int32_t *prompt,
                  size_t rounds)
{
    EVP_MD *md;
    if (pkv__digest_fetch(&md) != PKV_OK) {
        fprintf(stderr, "seal: libcrypto has no SHA-256\n");
        return 1;
    }
    double d16 = digest_cost(md, 16, prompt, rounds);
    double d64 = digest_cost(md, 64, prompt, rounds);
    EVP_MD_free(md);
    size_t n = 128 + 4 * BLOCK + (size_t)1024 * 1024;
    uint8_t *v = malloc(n);
    if (d16 < 0 || d64 < 0 || v == NULL) {
        free(v);
        fprintf(stderr, "seal: the hashes could not be timed\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)(i * 131u);
    double c = checksum_cost(v, n, rounds);
    free(v);
    printf("digest of a block (SHA-256): %.0f ns for 16 tokens, %.0f ns "
           "for 64\nchecksum of an unsealed value of %zu bytes (XXH3): "
           "%.1f us, %.1f GB/s\n",
           1e9 * d16, 1e9 * d64, n, 1e6 * c, (double)n / c / 1e9);
    if (opt->json)
        fprintf(opt->json,
                "{\"bench\":\"seal_hashes\",\"digest_16_ns\":%.1f,"
                "\"digest_64_ns\":%.1f,\"checksum_bytes\":%zu,"
                "\"checksum_us\":%.2f,\"checksum_gbps\":%.2f}\n",
                1e9 * d16, 1e9 * d64, n, 1e6 * c, (double)n / c / 1e9);
    return 0;
}

int bench_seal(const bench_options *opt)
{
    int32_t prompt[PROMPT];
    for (uint32_t i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(i * 7919u % 32000u);
    size_t rounds = opt->quick ? ROUNDS_QUICK : ROUNDS;
    double save[2][ROUNDS], install[2][ROUNDS];
    for (size_t r = 0; r < rounds; r++)
        for (int sealed = 0; sealed < 2; sealed++) {
            bench_progress("seal: round %zu of %zu, %s", r + 1, rounds,
                           sealed ? "sealed" : "unsealed");
            if (round_of(sealed ? KEY : NULL, prompt, &save[sealed][r],
                         &install[sealed][r]) != 0) {
                fprintf(stderr, "seal: round %zu failed: %s\n", r + 1,
                        pkv_last_error());
                return 1;
            }
        }
    double s[2], in[2];
    for (int k = 0; k < 2; k++) {
        s[k] = bench_median(save[k], rounds);
        in[k] = bench_median(install[k], rounds);
    }
    const double mib = 1024.0 * 1024.0;
    printf("seal: %d values of 1 MiB of f16 KV per round, medians of %zu "
           "rounds\n"
           "%-9s %12s %12s %13s %13s\n",
           VALUES, rounds, "key", "save ms", "install ms", "save GiB/s",
           "install GiB/s");
    for (int k = 0; k < 2; k++)
        printf("%-9s %12.3f %12.3f %13.2f %13.2f\n", k ? "sealed" : "none",
               1e3 * s[k], 1e3 * in[k], mib / s[k] / (1024.0 * mib),
               mib / in[k] / (1024.0 * mib));
    printf("sealed / none: save %.2fx, install %.2fx\n", s[1] / s[0],
           in[1] / in[0]);
    if (opt->json)
        fprintf(opt->json,
                "{\"bench\":\"seal\",\"kv\":\"f16\",\"kv_bytes\":%d,"
                "\"values\":%d,\"rounds\":%zu,\"save_ms\":%.4f,"
                "\"save_sealed_ms\":%.4f,\"install_ms\":%.4f,"
                "\"install_sealed_ms\":%.4f,\"save_ratio\":%.3f,"
                "\"install_ratio\":%.3f}\n",
                (int)mib, VALUES, rounds, 1e3 * s[0], 1e3 * s[1],
                1e3 * in[0], 1e3 * in[1], s[1] / s[0], in[1] / in[0]);
    return hashes(opt, prompt, rounds);
}
