/* SPDX-License-Identifier: MIT */
/* Perplexity and top-1 agreement through pkv (score.h). */
#include "score.h"

#include "host.h"
#include "prompts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows per step: every scored row's logits are held at once (1 MB each
 * at a 262k vocabulary). */
#define SCORE_ROWS 128
#define AGREEMENT_PROMPTS 8

static const char *dtype_name(const gg_kv_choice *kv)
{
    if (kv->dtype == PKV_KV_DTYPE_F32)
        return "f32";
    if (kv->dtype == PKV_KV_DTYPE_F16)
        return "f16";
    int token_keys = kv->key_quant == PKV_QUANT_GROUP_PER_TOKEN;
    if (kv->dtype == PKV_KV_DTYPE_U4)
        return token_keys ? "u4-token-keys" : "u4";
    if (kv->dtype == PKV_KV_DTYPE_U8K_U4V)
        return token_keys ? "u8k-u4v-token-keys" : "u8k-u4v";
    return token_keys ? "u8-token-keys" : "u8";
}

/* Sequences to run through an engine, each scored from position first:
 * the logits at position p predict tokens[p + 1]. */
typedef struct score_seqs {
    uint32_t n;
    int32_t **tokens;
    uint32_t *len;
    uint32_t *first; /* the first position scored */
    uint32_t *last;  /* the last position scored */
} score_seqs;

/* Called with the logits of every scored row. */
typedef void (*score_fn)(void *user, uint32_t seq, uint32_t position,
                         const float *logits);

/* *kv_peak: the most bytes of KV the engine held at once. */
static int run_seqs(gg_model *m, const score_seqs *s, const gg_kv_choice *kv,
                    score_fn fn, void *user, char *backend, size_t size,
                    uint64_t *kv_peak)
{
    uint32_t longest = 0, blocks = 1;
    for (uint32_t i = 0; i < s->n; i++) {
        longest = s->len[i] > longest ? s->len[i] : longest;
        blocks += (s->len[i] + GG_BLOCK_SIZE) / GG_BLOCK_SIZE;
    }
    pkv_engine_params p;
    pkv_engine *e = gg_engine_create(&p, m, kv, longest + 1, blocks,
                                     SCORE_ROWS, NULL);
    if (e == NULL)
        return 1;
    snprintf(backend, size, "%s", pkv_engine_backend_name(e));
    gg_scratch scratch;
    float *logits = malloc((size_t)SCORE_ROWS * m->config.vocab_size *
                           sizeof *logits);
    uint32_t rows[SCORE_ROWS], row_seq[SCORE_ROWS];
    int32_t sampled[SCORE_ROWS] = {0};
    int rc = 1;
    if (logits == NULL || gg_scratch_init(&scratch, m, SCORE_ROWS) != 0) {
        fprintf(stderr, "pkv-gguf: out of memory\n");
        free(logits);
        pkv_engine_destroy(e);
        return 1;
    }
    for (uint32_t i = 0; i < s->n; i++) {
        pkv_seq_params sp;
        pkv_seq_params_init(&sp);
        sp.prompt = s->tokens[i];
        sp.prompt_len = s->len[i];
        sp.max_new_tokens = 1;
        sp.user_data = &s->len[i]; /* its index: &len[i] - len */
        pkv_seq_id id;
        if (pkv_seq_add(e, &sp, &id) != PKV_OK) {
            fprintf(stderr, "pkv-gguf: %s\n", pkv_last_error());
            goto out;
        }
    }
    while (pkv_engine_has_work(e)) {
        const pkv_batch *b;
        pkv_engine_stats st;
        pkv_engine_stats_init(&st);
        if (pkv_engine_step_begin(e, &b) != PKV_OK ||
            pkv_engine_get_stats(e, &st) != PKV_OK) {
            fprintf(stderr, "pkv-gguf: %s\n", pkv_engine_last_error(e));
            goto out;
        }
        if ((st.blocks_used - 1) * st.block_bytes > *kv_peak)
            *kv_peak = (st.blocks_used - 1) * st.block_bytes;
        uint32_t n = 0;
        for (uint32_t q = 0; q < b->num_seqs; q++) {
            uint32_t seq = (uint32_t)((const uint32_t *)b->seq_user_data[q] -
                                      s->len);
            for (uint32_t r = b->query_start[q]; r < b->query_start[q + 1];
                 r++) {
                uint32_t pos = b->positions[r];
                if (pos >= s->first[seq] && pos <= s->last[seq]) {
                    rows[n] = r;
                    row_seq[n++] = seq;
                }
            }
        }
        gg_pkv_attend a = {e, &m->config};
        if (gg_forward(m, &scratch, b->num_tokens, b->token_ids,
                       b->positions, gg_attend_pkv, &a, rows, n,
                       logits) != 0) {
            fprintf(stderr, "pkv-gguf: forward pass failed\n");
            goto out;
        }
        for (uint32_t j = 0; j < n; j++)
            fn(user, row_seq[j], b->positions[rows[j]],
               logits + (size_t)j * m->config.vocab_size);
        if (pkv_engine_step_end(e, sampled, NULL, b->num_samples) !=
            PKV_OK) {
            fprintf(stderr, "pkv-gguf: %s\n", pkv_engine_last_error(e));
            goto out;
        }
    }
    rc = 0;
out:
    free(logits);
    gg_scratch_free(&scratch);
    pkv_engine_destroy(e);
    return rc;
}

/* ------------------------------------------------------------ perplexity */

typedef struct nll_sum {
    const score_seqs *seqs;
    uint32_t vocab;
    double sum;
    uint64_t count;
} nll_sum;

static void add_nll(void *user, uint32_t seq, uint32_t position,
                    const float *logits)
{
    nll_sum *a = user;
    int32_t target = a->seqs->tokens[seq][position + 1];
    float top = logits[0];
    for (uint32_t i = 1; i < a->vocab; i++)
        top = logits[i] > top ? logits[i] : top;
    double z = 0;
    for (uint32_t i = 0; i < a->vocab; i++)
        z += exp((double)logits[i] - top);
    a->sum += log(z) + top - logits[target];
    a->count++;
}

int gg_score_perplexity(gg_model *m, const gg_tokenizer *tok,
                        const char *name, const char *text, size_t len,
                        unsigned flags, uint32_t ctx, uint32_t max_tokens,
                        const gg_kv_choice *kv)
{
    if (len > GG_MAX_TEXT) {
        fprintf(stderr, "pkv-gguf: %s: %zu bytes, more than the tokenizer "
                        "reads (%zu)\n",
                name, len, GG_MAX_TEXT);
        return 1;
    }
    flags |= tok->add_bos;
    uint32_t most = gg_tokenize_bound(tok, len, flags);
    int32_t *all = malloc(most * sizeof *all);
    int n = all ? gg_tokenize(tok, text, len, flags, all, most) : -1;
    if (n < 0) {
        fprintf(stderr, "pkv-gguf: %s: cannot tokenize (out of memory, "
                        "or a byte with no token)\n",
                name);
        free(all);
        return 1;
    }
    uint32_t chunks = (uint32_t)n / ctx;
    if (chunks > max_tokens / ctx)
        chunks = max_tokens / ctx;
    if (chunks == 0) {
        fprintf(stderr, "pkv-gguf: %s: %d tokens, not one chunk of %u "
                        "(--max-tokens %u)\n",
                name, n, ctx, max_tokens);
        free(all);
        return 1;
    }
    int32_t **ptrs = malloc(chunks * sizeof *ptrs);
    uint32_t *lens = malloc(3 * (size_t)chunks * sizeof *lens);
    if (ptrs == NULL || lens == NULL) {
        fprintf(stderr, "pkv-gguf: out of memory\n");
        free(ptrs);
        free(lens);
        free(all);
        return 1;
    }
    uint32_t *first = lens + chunks, *last = first + chunks;
    for (uint32_t c = 0; c < chunks; c++) {
        ptrs[c] = all + (size_t)c * ctx;
        /* llama.cpp replaces each chunk's first token with BOS where the
         * file asks for BOS (no chunk reads another's tokens: each one's
         * last target is before the next one's first token). */
        if (tok->add_bos)
            ptrs[c][0] = m->config.bos;
        lens[c] = ctx - 1; /* the last token is only a target */
        first[c] = ctx / 2;
        last[c] = ctx - 2;
    }
    score_seqs s = {chunks, ptrs, lens, first, last};
    nll_sum acc = {&s, m->config.vocab_size, 0, 0};
    char backend[256];
    double t0 = host_now_s();
    uint64_t kv_peak = 0;
    int rc = run_seqs(m, &s, kv, add_nll, &acc, backend, sizeof backend,
                      &kv_peak);
    /* nll to the last bit (17 digits): runs that must agree exactly
     * (hybrid memory or every token) are compared on it. */
    if (rc == 0)
        printf("{\"perplexity\": %.4f, \"nll\": %.17g, \"scored\": %llu, "
               "\"ctx\": %u, \"chunks\": %u, \"text_tokens\": %d, "
               "\"kv\": \"%s\", \"kv_memory\": \"%s\", "
               "\"kv_peak_bytes\": %llu, \"backend\": \"%s\", "
               "\"seconds\": %.1f}\n",
               exp(acc.sum / (double)acc.count),
               acc.sum / (double)acc.count, (unsigned long long)acc.count,
               ctx, chunks, n, dtype_name(kv),
               kv->every_token ? "every-token" : "hybrid",
               (unsigned long long)kv_peak, backend, host_now_s() - t0);
    free(ptrs);
    free(lens);
    free(all);
    return rc;
}

/* ---------------------------------------------------------------- logits */

typedef struct logits_out {
    FILE *f;
    uint32_t vocab;
    int failed;
} logits_out;

static void write_logits(void *user, uint32_t seq, uint32_t position,
                         const float *logits)
{
    logits_out *o = user;
    (void)seq;
    (void)position; /* rows come in position order: one sequence */
    if (fwrite(logits, sizeof *logits, o->vocab, o->f) != o->vocab)
        o->failed = 1;
}

int gg_score_logits(gg_model *m, int32_t *ids, uint32_t n, uint32_t from,
                    const gg_kv_choice *kv, const char *path)
{
    if (n == 0 || from >= n) {
        fprintf(stderr, "pkv-gguf: --logits-from %u: the prompt has %u "
                        "tokens\n",
                from, n);
        return 1;
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, "pkv-gguf: cannot write %s\n", path);
        return 1;
    }
    uint32_t last = n - 1;
    score_seqs s = {1, &ids, &n, &from, &last};
    logits_out o = {f, m->config.vocab_size, 0};
    char backend[256];
    uint64_t kv_peak = 0;
    int rc = run_seqs(m, &s, kv, write_logits, &o, backend, sizeof backend,
                      &kv_peak);
    if (fclose(f) != 0 || o.failed) {
        fprintf(stderr, "pkv-gguf: cannot write %s\n", path);
        rc = 1;
    }
    return rc;
}

/* ------------------------------------------------------------- agreement */

typedef struct argmax_hits {
    const score_seqs *seqs;
    uint32_t vocab;
    uint64_t same, count;
} argmax_hits;

static void count_argmax(void *user, uint32_t seq, uint32_t position,
                         const float *logits)
{
    argmax_hits *a = user;
    uint32_t best = 0;
    for (uint32_t i = 1; i < a->vocab; i++)
        best = logits[i] > logits[best] ? i : best;
    a->same += (int32_t)best == a->seqs->tokens[seq][position + 1];
    a->count++;
}

typedef struct generated {
    int32_t **tokens;
    uint32_t *len;
} generated;

static void keep_token(void *user, uint32_t index, int32_t token)
{
    generated *g = user;
    g->tokens[index][g->len[index]++] = token;
}

/* Greedy decoding with an f32 cache on the CPU backend: each prompt's
 * tokens followed by max_new generated ones. */
static int generate_f32(gg_model *m, host_request *reqs, uint32_t n,
                        generated *g)
{
    uint32_t longest = 0, blocks = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = g->len[i] + reqs[i].max_new;
        longest = len > longest ? len : longest;
        blocks += len / GG_BLOCK_SIZE + 1;
    }
    gg_kv_choice f32 = {.dtype = PKV_KV_DTYPE_F32,
                        .key_quant = PKV_QUANT_GROUP_DEFAULT,
                        .backend = PKV_BACKEND_KIND_CPU};
    pkv_engine_params p;
    pkv_engine *e = gg_engine_create(&p, m, &f32, longest, blocks,
                                     SCORE_ROWS, NULL);
    if (e == NULL)
        return 1;
    gg_host h;
    if (gg_host_init(&h, m, SCORE_ROWS) != 0) {
        pkv_engine_destroy(e);
        return 1;
    }
    host_serve_options so = {0};
    so.top_p = 1;
    so.on_token = keep_token;
    so.user = g;
    host_serve_result r;
    int rc = host_serve(e, &h.model, reqs, n, &so, &r);
    gg_host_free(&h);
    pkv_engine_destroy(e);
    return rc;
}

int gg_score_agreement(gg_model *m, const gg_tokenizer *tok,
                       uint32_t max_new, uint32_t max_len,
                       const gg_kv_choice *kv)
{
    enum { N = AGREEMENT_PROMPTS };
    host_request reqs[N];
    int32_t *tokens[N] = {0};
    uint32_t len[N], first[N], last[N];
    generated g = {tokens, len};
    int rc = 1;
    memset(reqs, 0, sizeof reqs);
    for (uint32_t i = 0; i < N; i++) {
        char prompt[512];
        size_t plen = gg_demo_text(i, 0, prompt, sizeof prompt);
        /* The count first: the answer's room depends on it. */
        int got = gg_tokenize(tok, prompt, plen, tok->add_bos, NULL, 0);
        /* Room for an answer of at least one token in max_len. */
        if (got < 0 || (uint32_t)got >= max_len) {
            fprintf(stderr, "pkv-gguf: demo prompt %u: %s\n", i + 1,
                    got < 0 ? "cannot tokenize" : "longer than --ctx");
            goto out;
        }
        uint32_t room = max_len - (uint32_t)got;
        reqs[i].max_new = max_new < room ? max_new : room;
        tokens[i] =
            malloc(((size_t)got + reqs[i].max_new) * sizeof *tokens[i]);
        if (tokens[i] == NULL ||
            gg_tokenize(tok, prompt, plen, tok->add_bos, tokens[i],
                        (uint32_t)got) != got) {
            fprintf(stderr, "pkv-gguf: out of memory\n");
            goto out;
        }
        reqs[i].prompt = tokens[i];
        reqs[i].prompt_len = len[i] = (uint32_t)got;
        first[i] = len[i] - 1;
    }
    double t0 = host_now_s();
    if (generate_f32(m, reqs, N, &g) != 0)
        goto out;
    /* Teacher-forced: the last generated token is only a target. */
    for (uint32_t i = 0; i < N; i++) {
        last[i] = len[i] - 2;
        len[i]--;
    }
    score_seqs s = {N, tokens, len, first, last};
    argmax_hits hits = {&s, m->config.vocab_size, 0, 0};
    char backend[256];
    uint64_t kv_peak = 0;
    if (run_seqs(m, &s, kv, count_argmax, &hits, backend, sizeof backend,
                 &kv_peak) != 0)
        goto out;
    printf("{\"agreement\": %.4f, \"same\": %llu, \"tokens\": %llu, "
           "\"prompts\": %u, \"kv\": \"%s\", \"backend\": \"%s\", "
           "\"seconds\": %.1f}\n",
           (double)hits.same / (double)hits.count,
           (unsigned long long)hits.same, (unsigned long long)hits.count, N,
           dtype_name(kv), backend, host_now_s() - t0);
    rc = 0;
out:
    for (uint32_t i = 0; i < N; i++)
        free(tokens[i]);
    return rc;
}
