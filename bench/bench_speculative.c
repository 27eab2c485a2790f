/* SPDX-License-Identifier: MIT */
/*
 * pkv-bench serve --speculative: decode tokens/s with drafts
 * (pkv_seq_propose) against plain decoding, at draft acceptance rates
 * 0.5, 0.7 and 0.9. The host is the llama example's model (random
 * weights, big enough that a step reads its weights from memory, as
 * decoding does), greedy, on the CPU backend with f16 KV, decoding one
 * sequence: the latency case drafts are for (on a CPU each extra row of a
 * step costs arithmetic, so a batch that already fills the step gains
 * nothing; docs/performance.md). The draft model is simulated: a plain
 * run records the sequence's tokens, and a draft is the recorded token
 * with probability p, a wrong one otherwise; its own cost is not counted.
 * Greedy verification must give the plain run's tokens exactly.
 */
#include "attend.h"
#include "bench.h"
#include "bench_llama.h"
#include "model.h"
#include "sample.h"

#include "pkv/pkv.h"

#include <stdlib.h>
#include <string.h>

enum { SEQS = 1, PROMPT = 32, NEW = 128, DRAFTS = 4 };
enum { MAX_ROWS = SEQS * PROMPT };

/* What one run produced: every sequence's tokens, the time and the drafts
 * run and accepted. */
typedef struct spec_run {
    int32_t tokens[SEQS][PROMPT + NEW];
    double seconds;
    uint64_t drafts, accepted, steps, rows;
} spec_run;

/* The KV cache of a run: dtype and U8 rollback window. */
typedef struct spec_kv {
    int32_t dtype;
    uint32_t window;
} spec_kv;

/* Decode SEQS prompts to NEW tokens each. truth NULL: plainly; else
 * drafts from truth, right with probability p. 0 on success. */
static int run(const llama_model *m, llama_scratch *s, float *logits,
               spec_kv kv, const spec_run *truth, double p, spec_run *out)
{
    const llama_config *c = &m->config;
    pkv_engine_params params;
    llama_engine_params(&params, c);
    params.kv_dtype = kv.dtype;
    params.u8_rollback_blocks = kv.window;
    params.backend = PKV_BACKEND_KIND_CPU;
    params.max_batch_tokens = MAX_ROWS;
    pkv_engine *e = NULL;
    if (pkv_engine_create(&params, &e) != PKV_OK)
        return 1;
    llama_pkv_attend actx = {e, c};
    uint32_t len[SEQS];
    pkv_seq_id ids[SEQS];
    uint64_t rng = 11;
    for (uint32_t i = 0; i < SEQS; i++) {
        for (uint32_t t = 0; t < PROMPT; t++)
            out->tokens[i][t] = (int32_t)(host_rand(&rng) % c->vocab_size);
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = out->tokens[i];
        sp.prompt_len = PROMPT;
        sp.max_new_tokens = NEW;
        if (pkv_seq_add(e, &sp, &ids[i]) != PKV_OK)
            return 1;
        len[i] = PROMPT;
    }
    int32_t sampled[MAX_ROWS];
    uint64_t draw = 3;
    int rc = 0;
    double t0 = bench_now_s();
    while (rc == 0 && pkv_engine_has_work(e)) {
        for (uint32_t i = 0; truth != NULL && i < SEQS; i++) {
            /* Decoding (a sampled token without KV) and room for drafts. */
            if (len[i] <= PROMPT || len[i] + DRAFTS >= PROMPT + NEW)
                continue;
            int32_t drafts[DRAFTS];
            for (uint32_t k = 0; k < DRAFTS; k++) {
                int32_t right = truth->tokens[i][len[i] + k];
                int ok = (double)(host_rand(&draw) % 1000) < p * 1000.0;
                drafts[k] = ok ? right
                               : (int32_t)(((uint32_t)right + 1) %
                                           c->vocab_size);
            }
            /* BAD_STATE: not decoding in the next step (preempted). */
            pkv_status st = pkv_seq_propose(e, ids[i], drafts, DRAFTS);
            if (st != PKV_OK && st != PKV_ERR_BAD_STATE)
                rc = 1;
        }
        const pkv_batch *b;
        if (rc != 0 || pkv_engine_step_begin(e, &b) != PKV_OK ||
            llama_forward(m, s, b->num_tokens, b->token_ids, b->positions,
                          llama_attend_pkv, &actx, b->sample_rows,
                          b->num_samples, logits) != 0) {
            rc = 1;
            break;
        }
        out->rows += b->num_tokens;
        for (uint32_t j = 0; j < b->num_samples; j++)
            sampled[j] = host_sample(logits + (size_t)j * c->vocab_size,
                                      c->vocab_size, 0.0f, 1.0f, NULL);
        if (pkv_engine_step_end(e, sampled, NULL, b->num_samples) != PKV_OK) {
            rc = 1;
            break;
        }
        /* The host's copy of each sequence's tokens. */
        for (uint32_t j = 0; j < b->num_samples;) {
            uint32_t i = 0;
            while (ids[i] != b->sample_seq_ids[j])
                i++;
            uint32_t n = 1;
            while (j + n < b->num_samples &&
                   b->sample_seq_ids[j + n] == ids[i])
                n++;
            /* The engine's rule: drafts the samples confirm, then one. */
            uint32_t first = b->sample_rows[j] + 1, a = 0;
            while (a + 1 < n && sampled[j + a] == b->token_ids[first + a])
                a++;
            for (uint32_t k = 0; k < a; k++)
                out->tokens[i][len[i]++] = b->token_ids[first + k];
            out->tokens[i][len[i]++] = sampled[j + a];
            j += n;
        }
    }
    out->seconds = bench_now_s() - t0;
    pkv_engine_stats st;
    st.struct_size = sizeof st;
    pkv_engine_get_stats(e, &st);
    out->drafts = st.draft_tokens;
    out->accepted = st.draft_tokens_accepted;
    out->steps = st.steps;
    pkv_engine_destroy(e);
    return rc;
}

/* The U8 runs: plain, p 0.7 without a window, p 0.7 with one block
 * (bench_speculative fails unless each gives the plain run's tokens). */
static void print_u8_window(const bench_options *opt, const spec_run *u8,
                            double tokens)
{
    printf("u8 KV, drafts right with probability 0.7: rows computed with "
           "and without a rollback window (u8_rollback_blocks)\n");
    printf("%-10s %8s %8s %10s %8s\n", "u8", "steps", "rows", "tokens/s",
           "speedup");
    const char *names[3] = {"plain", "window 0", "window 1"};
    for (int w = 0; w < 3; w++) {
        const spec_run *r = &u8[w];
        printf("%-10s %8llu %8llu %10.1f %7.2fx\n", names[w],
               (unsigned long long)r->steps, (unsigned long long)r->rows,
               tokens / r->seconds, u8[0].seconds / r->seconds);
        if (opt->json && w > 0)
            fprintf(opt->json,
                    "{\"bench\":\"speculative_u8\",\"p\":0.70,"
                    "\"window\":%d,\"steps\":%llu,\"rows\":%llu,"
                    "\"plain_rows\":%llu,\"tokens_per_s\":%.2f,"
                    "\"plain_tokens_per_s\":%.2f,\"speedup\":%.3f}\n",
                    w - 1, (unsigned long long)r->steps,
                    (unsigned long long)r->rows,
                    (unsigned long long)u8[0].rows, tokens / r->seconds,
                    tokens / u8[0].seconds, u8[0].seconds / r->seconds);
    }
}

int bench_speculative(const bench_options *opt)
{
    llama_config c = bench_serve_config();
    llama_model m;
    if (llama_model_init_random(&m, &c, 3) != 0)
        return 1;
    llama_scratch s;
    float *logits = malloc((size_t)MAX_ROWS * c.vocab_size * sizeof *logits);
    spec_run *runs = calloc(7, sizeof *runs);
    if (logits == NULL || runs == NULL ||
        llama_scratch_init(&s, &c, MAX_ROWS) != 0)
        return 1;
    static const double ps[3] = {0.5, 0.7, 0.9};
    int rc = 0;
    const spec_kv f16 = {PKV_KV_DTYPE_F16, 0};
    bench_progress("speculative: plain decoding");
    rc = run(&m, &s, logits, f16, NULL, 0.0, &runs[0]);
    for (int i = 0; i < (opt->quick ? 1 : 3) && rc == 0; i++) {
        double p = opt->quick ? 0.7 : ps[i];
        bench_progress("speculative: drafts right with probability %.1f", p);
        rc = run(&m, &s, logits, f16, &runs[0], p, &runs[i + 1]);
        if (rc == 0 && memcmp(runs[0].tokens, runs[i + 1].tokens,
                              sizeof runs[0].tokens) != 0) {
            fprintf(stderr, "speculative: tokens differ from plain "
                            "decoding at p %.1f\n",
                    p);
            rc = 1;
        }
    }
    /* U8 KV at p 0.7, without and with a rollback window of one block:
     * a cut inside the block a step froze recomputes the block's rows
     * without one. The drafts come from U8's plain run. */
    for (uint32_t w = 0; w < 3 && rc == 0; w++) {
        spec_kv u8 = {PKV_KV_DTYPE_U8, w == 2 ? 1u : 0u};
        bench_progress("speculative: u8 KV, %s", w == 0 ? "plain"
                                                 : w == 1 ? "no window"
                                                          : "window 1");
        rc = run(&m, &s, logits, u8, w == 0 ? NULL : &runs[4], 0.7,
                 &runs[4 + w]);
        if (rc == 0 && memcmp(runs[4].tokens, runs[4 + w].tokens,
                              sizeof runs[4].tokens) != 0) {
            fprintf(stderr, "speculative: u8 tokens differ from plain "
                            "decoding (window %u)\n",
                    w - 1);
            rc = 1;
        }
    }
    if (rc != 0)
        fprintf(stderr, "speculative: %s\n", pkv_last_error());
    double tokens = (double)SEQS * NEW;
    if (rc == 0) {
        printf("speculative: %u sequence, %u-token prompt, %u new tokens, "
               "%u drafts per step; llama dim %u, %u layers, f16 KV, CPU "
               "backend, greedy\n",
               SEQS, PROMPT, NEW, DRAFTS, c.dim, c.num_layers);
        printf("%-10s %8s %10s %10s %8s\n", "drafts", "steps", "tokens/s",
               "accepted", "speedup");
        printf("%-10s %8llu %10.1f %10s %8s\n", "none",
               (unsigned long long)runs[0].steps, tokens / runs[0].seconds,
               "-", "1.00x");
        for (int i = 0; i < (opt->quick ? 1 : 3); i++) {
            const spec_run *r = &runs[i + 1];
            double p = opt->quick ? 0.7 : ps[i];
            double acc = r->drafts ? (double)r->accepted / (double)r->drafts
                                   : 0.0;
            char name[16];
            snprintf(name, sizeof name, "p %.1f", p);
            printf("%-10s %8llu %10.1f %10.2f %7.2fx\n", name,
                   (unsigned long long)r->steps, tokens / r->seconds, acc,
                   runs[0].seconds / r->seconds);
            if (opt->json)
                fprintf(opt->json,
                        "{\"bench\":\"speculative\",\"p\":%.2f,"
                        "\"drafts\":%u,\"steps\":%llu,\"plain_steps\":%llu,"
                        "\"tokens_per_s\":%.2f,\"plain_tokens_per_s\":%.2f,"
                        "\"acceptance\":%.3f,\"speedup\":%.3f}\n",
                        p, DRAFTS, (unsigned long long)r->steps,
                        (unsigned long long)runs[0].steps,
                        tokens / r->seconds, tokens / runs[0].seconds, acc,
                        runs[0].seconds / r->seconds);
        }
        print_u8_window(opt, runs + 4, tokens);
    }
    llama_scratch_free(&s);
    free(logits);
    free(runs);
    llama_model_free(&m);
    return rc;
}
