/* SPDX-License-Identifier: MIT */
/* Attention over pkv and over a dense cache (attend.h). */
#include "attend.h"

#include "attention.h"
#include "sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void llama_engine_params(pkv_engine_params *p, const llama_config *c)
{
    pkv_engine_params_init(p);
    p->num_layers = c->num_layers;
    p->num_q_heads = c->num_heads;
    p->num_kv_heads = c->num_kv_heads;
    p->head_dim = llama_head_dim(c);
    p->max_model_len = c->seq_len;
    p->vocab_size = c->vocab_size;
    /* 16-token blocks on every device: the demo's 48-token system prompt
     * then spans three shareable blocks, and its pool sizes count them. */
    p->block_size = 16;
}

int llama_attend_pkv(void *user, uint32_t layer, uint32_t rows,
                     const float *q, const float *k, const float *v,
                     float *out)
{
    llama_pkv_attend *a = user;
    const llama_config *c = a->config;
    return host_attend_pkv(a->engine, layer, rows, q, k, v, out,
                           c->num_heads, c->num_kv_heads, llama_head_dim(c));
}

static int host_forward(void *self, pkv_engine *e, const pkv_batch *b,
                        float *logits)
{
    llama_host *h = self;
    llama_pkv_attend a = {e, &h->weights->config};
    return llama_forward(h->weights, &h->scratch, b->num_tokens, b->token_ids,
                         b->positions, llama_attend_pkv, &a, b->sample_rows,
                         b->num_samples, logits);
}

int llama_host_init(llama_host *h, const llama_model *m, uint32_t max_rows)
{
    h->weights = m;
    h->model.vocab_size = m->config.vocab_size;
    h->model.max_rows = max_rows;
    h->model.forward = host_forward;
    h->model.self = h;
    return llama_scratch_init(&h->scratch, &m->config, max_rows);
}

void llama_host_free(llama_host *h)
{
    llama_scratch_free(&h->scratch);
}

int llama_dense_cache_init(llama_dense_cache *d, const llama_config *c)
{
    size_t n = (size_t)c->num_layers * c->seq_len * llama_kv_dim(c);
    d->config = c;
    d->k = malloc(n * sizeof *d->k);
    d->v = malloc(n * sizeof *d->v);
    d->positions = NULL;
    if (d->k == NULL || d->v == NULL) {
        llama_dense_cache_free(d);
        return -1;
    }
    return 0;
}

void llama_dense_cache_free(llama_dense_cache *d)
{
    free(d->k);
    free(d->v);
    d->k = d->v = NULL;
}

int llama_attend_dense(void *user, uint32_t layer, uint32_t rows,
                       const float *q, const float *k, const float *v,
                       float *out)
{
    llama_dense_cache *d = user;
    const llama_config *c = d->config;
    size_t kv = llama_kv_dim(c), base = (size_t)layer * c->seq_len * kv;
    /* Every row's K and V first: rows of one pass attend causally. */
    for (uint32_t r = 0; r < rows; r++) {
        memcpy(d->k + base + d->positions[r] * kv, k + r * kv,
               kv * sizeof(float));
        memcpy(d->v + base + d->positions[r] * kv, v + r * kv,
               kv * sizeof(float));
    }
    for (uint32_t r = 0; r < rows; r++)
        llama_attend_dense_row(c, q + (size_t)r * c->dim, d->k + base,
                               d->v + base, d->positions[r] + 1,
                               out + (size_t)r * c->dim);
    return 0;
}

int llama_dense_generate(const llama_model *m, llama_scratch *s,
                         llama_dense_cache *d, const int32_t *prompt,
                         uint32_t prompt_len, uint32_t max_new,
                         float temperature, uint64_t *rng, int32_t stop,
                         int32_t *out, uint64_t *processed)
{
    const llama_config *c = &m->config;
    uint32_t *positions = malloc(c->seq_len * sizeof *positions);
    float *logits = malloc(c->vocab_size * sizeof *logits);
    if (positions == NULL || logits == NULL || prompt_len == 0 ||
        prompt_len >= c->seq_len || prompt_len > s->max_rows) {
        free(positions);
        free(logits);
        return -1;
    }
    for (uint32_t t = 0; t < c->seq_len; t++)
        positions[t] = t;
    const int32_t *rows_tokens = prompt;
    uint32_t first = 0, len = prompt_len, n = 0;
    while (n < max_new) {
        uint32_t last = len - first - 1;
        d->positions = positions + first;
        if (llama_forward(m, s, len - first, rows_tokens, positions + first,
                          llama_attend_dense, d, &last, 1, logits) != 0) {
            n = 0;
            break;
        }
        *processed += len - first;
        out[n] = host_sample(logits, c->vocab_size, temperature, 1.0f,
                             rng);
        rows_tokens = &out[n];
        if (out[n++] == stop || len + 1 >= c->seq_len)
            break;
        first = len++;
    }
    free(positions);
    free(logits);
    return n > 0 ? (int)n : -1;
}
