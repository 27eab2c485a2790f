/* SPDX-License-Identifier: MIT */
/*
 * The two attentions a llama_forward can run on: pkv's paged cache
 * (pkv_engine_attend on host f32 tensors) and a plain dense cache, the
 * reference, with the loop that generates one sequence on it.
 */
#ifndef PKV_EXAMPLE_LLAMA_ATTEND_H
#define PKV_EXAMPLE_LLAMA_ATTEND_H

#include "model.h"
#include "serve.h"

#include <pkv/pkv.h>

/* pkv_engine_params_init, then the model's geometry: layers, heads,
 * head_dim, max_model_len (seq_len) and vocab_size. */
void llama_engine_params(pkv_engine_params *p, const llama_config *c);

/* llama_attend_fn over pkv: user is a llama_pkv_attend. Prints the engine's
 * message to stderr on failure. */
typedef struct llama_pkv_attend {
    pkv_engine *engine;
    const llama_config *config;
} llama_pkv_attend;

int llama_attend_pkv(void *user, uint32_t layer, uint32_t rows,
                     const float *q, const float *k, const float *v,
                     float *out);

/* The model as the serving loop's host_model (serve.h): the forward pass
 * of a step's batch over pkv, on its own scratch of max_rows rows. */
typedef struct llama_host {
    host_model model; /* self points to this struct */
    const llama_model *weights;
    llama_scratch scratch;
} llama_host;

/* 0, or -1 out of memory. */
int llama_host_init(llama_host *h, const llama_model *m, uint32_t max_rows);
void llama_host_free(llama_host *h);

/* A dense K/V cache of one sequence, seq_len rows per layer. */
typedef struct llama_dense_cache {
    const llama_config *config;
    float *k, *v; /* [layers][seq_len][kv_dim] */
    const uint32_t *positions; /* of the rows being attended */
} llama_dense_cache;

int llama_dense_cache_init(llama_dense_cache *d, const llama_config *c);
void llama_dense_cache_free(llama_dense_cache *d);

/* llama_attend_fn over a dense cache: user is a llama_dense_cache whose
 * positions are the rows' positions. */
int llama_attend_dense(void *user, uint32_t layer, uint32_t rows,
                       const float *q, const float *k, const float *v,
                       float *out);

/*
 * Generate one sequence with dense attention: the prompt in one pass, then
 * one token per pass, until max_new tokens, the stop token (counted) or
 * seq_len. s must hold seq_len rows. Writes the tokens to out (max_new
 * entries) and adds the rows run to *processed. Returns the number of
 * tokens, or -1 on failure.
 */
int llama_dense_generate(const llama_model *m, llama_scratch *s,
                         llama_dense_cache *d, const int32_t *prompt,
                         uint32_t prompt_len, uint32_t max_new,
                         float temperature, uint64_t *rng, int32_t stop,
                         int32_t *out, uint64_t *processed);

#endif
