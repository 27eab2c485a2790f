/* SPDX-License-Identifier: MIT */
/* Gemma 3 on pkv (host.h). */
#include "host.h"

#include "attention.h"

#include <stdio.h>

void g3_engine_params(pkv_engine_params *p, const g3_model *m,
                      uint32_t max_model_len)
{
    const g3_file_config *c = &m->config;
    pkv_engine_params_init(p);
    p->num_layers = c->num_layers;
    p->num_q_heads = c->num_heads;
    p->num_kv_heads = c->num_kv_heads;
    p->head_dim = c->key_len;
    p->layer_windows = m->layer_windows;
    p->vocab_size = c->vocab_size;
    p->max_model_len = max_model_len;
    /* The default scale, 1 / sqrt(head_dim), is Gemma 3's (model.h). */
    /* The CPU backend's attention on ggml's threads (lend.h). */
    p->parallel = g3_lend_parallel;
    p->parallel_user = m->lend;
    p->parallel_workers = m->num_threads;
}

void g3_engine_hybrid(pkv_engine_params *p, const g3_model *m, int hybrid)
{
    p->hybrid_memory = (uint32_t)hybrid;
    if (!hybrid)
        return;
    /* The engine's groups (pkv.h): the greatest common divisor of the
     * windowed and the full layers' counts, layers per group. */
    uint32_t layers = m->config.num_layers, windowed = 0;
    for (uint32_t l = 0; l < layers; l++)
        windowed += m->layer_windows[l] != 0;
    uint32_t a = windowed, b = layers - windowed;
    while (b != 0) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    p->num_blocks = (p->num_blocks - 1) * (layers / a) + 1;
}

int g3_attend_pkv(void *user, uint32_t layer, uint32_t rows, const float *q,
                  const float *k, const float *v, float *out)
{
    g3_pkv_attend *a = user;
    const g3_file_config *c = a->config;
    /* key_len == value_len (model.c checks). */
    return host_attend_pkv(a->engine, layer, rows, q, k, v, out,
                           c->num_heads, c->num_kv_heads, c->key_len);
}

static int host_forward(void *self, pkv_engine *e, const pkv_batch *b,
                        float *logits)
{
    g3_host *h = self;
    g3_pkv_attend a = {e, &h->weights->config};
    if (g3_forward(h->weights, &h->scratch, b->num_tokens, b->token_ids,
                   b->positions, g3_attend_pkv, &a, b->sample_rows,
                   b->num_samples, logits) != 0) {
        fprintf(stderr, "gemma3: forward pass failed\n");
        return -1;
    }
    return 0;
}

int g3_host_init(g3_host *h, g3_model *m, uint32_t max_rows)
{
    h->weights = m;
    h->model.vocab_size = m->config.vocab_size;
    h->model.max_rows = max_rows;
    h->model.forward = host_forward;
    h->model.self = h;
    return g3_scratch_init(&h->scratch, m, max_rows);
}

void g3_host_free(g3_host *h)
{
    g3_scratch_free(&h->scratch);
}
