/* SPDX-License-Identifier: MIT */
/*
 * pkv-bench restart: time to first token of a 2,000-token shared prompt
 * (a system prompt every request starts with) on a cold engine against an
 * engine restarted with the prefix cache the first one saved
 * (pkv_engine_save_prefix_cache / pkv_engine_load_prefix_cache). The host
 * is the llama example's model (random weights) on the CPU backend, f16
 * KV: what a restart saves is the prompt's forward pass and attention.
 * Both runs sample greedily and must give the same first token.
 */
#include "attend.h"
#include "bench.h"
#include "bench_llama.h"
#include "model.h"
#include "sample.h"

#include "pkv/pkv.h"

#include <stdlib.h>
#include <string.h>

enum { PROMPT_LEN = 2000, CHUNK = 512 };

static pkv_engine *create(const llama_config *c)
{
    pkv_engine_params p;
    llama_engine_params(&p, c);
    p.kv_dtype = PKV_KV_DTYPE_F16;
    p.backend = PKV_BACKEND_KIND_CPU;
    p.max_batch_tokens = CHUNK;
    p.num_blocks = 2 * (PROMPT_LEN / 16) + 8;
    pkv_engine *e = NULL;
    if (pkv_engine_create(&p, &e) != PKV_OK) {
        fprintf(stderr, "restart: %s\n", pkv_last_error());
        return NULL;
    }
    return e;
}

/* Seconds from adding the prompt to its first sampled token, which goes
 * to *first; the sequence then ends (one new token). 0 on success. */
static int first_token(const llama_model *m, llama_scratch *s, float *logits,
                       pkv_engine *e, const int32_t *prompt, double *seconds,
                       int32_t *first)
{
    const llama_config *c = &m->config;
    llama_pkv_attend actx = {e, c};
    pkv_seq_params sp;
    pkv_seq_params_init(&sp);
    sp.prompt = prompt;
    sp.prompt_len = PROMPT_LEN;
    sp.max_new_tokens = 1;
    pkv_seq_id id;
    double t0 = bench_now_s();
    if (pkv_seq_add(e, &sp, &id) != PKV_OK)
        return 1;
    *first = -1;
    while (pkv_engine_has_work(e)) {
        const pkv_batch *b;
        if (pkv_engine_step_begin(e, &b) != PKV_OK ||
            llama_forward(m, s, b->num_tokens, b->token_ids, b->positions,
                          llama_attend_pkv, &actx, b->sample_rows,
                          b->num_samples, logits) != 0)
            return 1;
        int32_t sampled = 0;
        if (b->num_samples == 1) {
            sampled = host_sample(logits, c->vocab_size, 0.0f, 1.0f, NULL);
            if (*first < 0) {
                *first = sampled;
                *seconds = bench_now_s() - t0;
            }
        }
        if (pkv_engine_step_end(e, &sampled, NULL, b->num_samples) != PKV_OK)
            return 1;
    }
    return *first < 0;
}

int bench_restart(const bench_options *opt)
{
    llama_config c = bench_restart_config();
    llama_model m;
    if (llama_model_init_random(&m, &c, 7) != 0)
        return 1;
    llama_scratch s;
    float *logits = malloc((size_t)c.vocab_size * sizeof *logits);
    int32_t *prompt = malloc(PROMPT_LEN * sizeof *prompt);
    if (logits == NULL || prompt == NULL ||
        llama_scratch_init(&s, &c, CHUNK) != 0)
        return 1;
    uint64_t rng = 5;
    for (uint32_t i = 0; i < PROMPT_LEN; i++)
        prompt[i] = (int32_t)(host_rand(&rng) % c.vocab_size);
    int reps = opt->quick ? 1 : 5;
    double cold[5], load[5], warm[5];
    size_t bytes = 0;
    int rc = 0;
    for (int r = 0; r < reps && rc == 0; r++) {
        bench_progress("restart: round %d of %d", r + 1, reps);
        pkv_engine *a = create(&c), *b = create(&c);
        int32_t first_cold, first_warm;
        void *saved = NULL;
        uint32_t loaded = 0;
        rc = a == NULL || b == NULL ||
             first_token(&m, &s, logits, a, prompt, &cold[r], &first_cold) ||
             pkv_engine_save_prefix_cache(a, NULL, 0, &bytes) != PKV_OK ||
             (saved = malloc(bytes)) == NULL ||
             pkv_engine_save_prefix_cache(a, saved, bytes, &bytes) != PKV_OK;
        if (rc == 0) {
            /* The restart: a new engine loads what the old one saved. */
            double t0 = bench_now_s();
            rc = pkv_engine_load_prefix_cache(b, saved, bytes, &loaded) !=
                 PKV_OK;
            load[r] = bench_now_s() - t0;
        }
        if (rc == 0)
            rc = first_token(&m, &s, logits, b, prompt, &warm[r],
                             &first_warm);
        if (rc == 0 && first_warm != first_cold) {
            fprintf(stderr, "restart: first token %d after the reload, %d "
                            "cold\n",
                    (int)first_warm, (int)first_cold);
            rc = 1;
        }
        if (rc != 0)
            fprintf(stderr, "restart: %s\n", pkv_last_error());
        free(saved);
        pkv_engine_destroy(a);
        pkv_engine_destroy(b);
    }
    if (rc == 0) {
        double tc = bench_median(cold, (size_t)reps);
        double tl = bench_median(load, (size_t)reps);
        double tw = bench_median(warm, (size_t)reps);
        printf("restart: first token of a %u-token prompt (llama dim %u, %u "
               "layers, f16 KV, CPU backend), median of %d\n",
               (unsigned)PROMPT_LEN, (unsigned)c.dim, (unsigned)c.num_layers,
               reps);
        printf("  cold engine          %9.1f ms\n", 1e3 * tc);
        printf("  load saved cache     %9.1f ms (%zu bytes)\n", 1e3 * tl,
               bytes);
        printf("  reloaded engine      %9.1f ms\n", 1e3 * tw);
        printf("  cold / (load + reloaded) %5.1fx\n", tc / (tl + tw));
        if (opt->json)
            fprintf(opt->json,
                    "{\"bench\":\"restart\",\"prompt_tokens\":%u,"
                    "\"cold_ms\":%.3f,\"load_ms\":%.3f,\"reloaded_ms\":%.3f,"
                    "\"saved_bytes\":%zu,\"speedup\":%.2f}\n",
                    (unsigned)PROMPT_LEN, 1e3 * tc, 1e3 * tl, 1e3 * tw, bytes,
                    tc / (tl + tw));
    }
    llama_scratch_free(&s);
    free(logits);
    free(prompt);
    llama_model_free(&m);
    return rc;
}
