/* SPDX-License-Identifier: MIT */
/* The GGUF host's model on pkv (host.h). */
#include "host.h"

#include "attention.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gg_engine_params(pkv_engine_params *p, const gg_model *m,
                      uint32_t max_model_len)
{
    const gg_file_config *c = &m->config;
    pkv_engine_params_init(p);
    p->num_layers = c->num_layers;
    p->num_q_heads = c->num_heads;
    p->num_kv_heads = c->num_kv_heads;
    p->head_dim = c->key_len;
    p->layer_windows = m->layer_windows;
    p->vocab_size = c->vocab_size;
    p->max_model_len = max_model_len;
    /* The default scale, 1 / sqrt(head_dim), is Gemma 3's and llama's
     * (gemma3.c, llama.c). */
    /* The CPU backend's attention on ggml's threads (lend.h). */
    p->parallel = gg_lend_parallel;
    p->parallel_user = m->lend;
    p->parallel_workers = m->num_threads;
}

pkv_engine *gg_engine_create(pkv_engine_params *p, const gg_model *m,
                             const gg_kv_choice *kv, uint32_t max_model_len,
                             uint32_t blocks, uint32_t max_rows,
                             const pkv_store *store)
{
    gg_engine_params(p, m, max_model_len);
    p->kv_dtype = kv->dtype;
    p->key_quant = kv->key_quant;
    p->backend = kv->backend;
    p->block_size = GG_BLOCK_SIZE;
    /* Blocks over every layer, whatever groups the engine makes of the
     * layers (pkv.h: num_blocks). */
    p->num_blocks = blocks;
    if (kv->every_token)
        p->kv_memory = PKV_KV_MEMORY_EVERY_TOKEN;
    p->max_batch_tokens = max_rows;
    p->log = host_log_stderr;
    p->log_level = PKV_LOG_LEVEL_WARN;
    p->store = store;
    p->kv_events = kv->events;
    p->kv_events_user = kv->events_user;
    pkv_engine *e = NULL;
    if (pkv_engine_create(p, &e) != PKV_OK) {
        fprintf(stderr, "pkv-gguf: engine: %s\n", pkv_last_error());
        return NULL;
    }
    return e;
}

void gg_store_model_name(const gg_model *m, const char *weights, char *name,
                         size_t size)
{
    const char *base = strrchr(weights, '/');
    snprintf(name, size, "%s/%s-on-ggml",
             m->config.arch == GG_ARCH_GEMMA3 ? "gemma3" : "llama",
             base ? base + 1 : weights);
}

int gg_attend_pkv(void *user, uint32_t layer, uint32_t rows, const float *q,
                  const float *k, const float *v, float *out)
{
    gg_pkv_attend *a = user;
    const gg_file_config *c = a->config;
    /* key_len == value_len (model.c checks). */
    return host_attend_pkv(a->engine, layer, rows, q, k, v, out,
                           c->num_heads, c->num_kv_heads, c->key_len);
}

static int host_forward(void *self, pkv_engine *e, const pkv_batch *b,
                        float *logits)
{
    gg_host *h = self;
    gg_pkv_attend a = {e, &h->weights->config};
    if (gg_forward(h->weights, &h->scratch, b->num_tokens, b->token_ids,
                   b->positions, gg_attend_pkv, &a, b->sample_rows,
                   b->num_samples, logits) != 0) {
        fprintf(stderr, "pkv-gguf: forward pass failed\n");
        return -1;
    }
    return 0;
}

int gg_host_init(gg_host *h, gg_model *m, uint32_t max_rows)
{
    h->weights = m;
    h->model.vocab_size = m->config.vocab_size;
    h->model.max_rows = max_rows;
    h->model.forward = host_forward;
    h->model.self = h;
    return gg_scratch_init(&h->scratch, m, max_rows);
}

void gg_host_free(gg_host *h)
{
    gg_scratch_free(&h->scratch);
}

int gg_load(gg_loaded *l, const char *program, const char *name,
            const char *weights, uint32_t threads)
{
    l->path = weights ? NULL : gg_default_weights_path(name ? name : "gemma3");
    l->weights = weights ? weights : l->path;
    char err[512];
    if (l->weights == NULL ||
        gg_model_load(&l->model, l->weights, threads, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n(sh examples/gguf/setup.sh downloads the "
                        "models)\n",
                program, l->weights ? err : "out of memory");
        free(l->path);
        return -1;
    }
    if (gg_tokenizer_init(&l->tok, &l->model.file, err, sizeof err) != 0) {
        fprintf(stderr, "%s: tokenizer: %s\n", program, err);
        gg_model_free(&l->model);
        free(l->path);
        return -1;
    }
    return 0;
}

void gg_unload(gg_loaded *l)
{
    gg_tokenizer_free(&l->tok);
    gg_model_free(&l->model);
    free(l->path);
}
