/* SPDX-License-Identifier: MIT */
/*
 * A llama-architecture model for pkv host programs: weights (seeded random
 * or a llama2.c checkpoint) and the forward pass over a ragged batch of rows.
 * Attention is a callback, so the same model runs over pkv's paged cache
 * (pkv_engine_attend) or over a plain dense cache (the reference).
 *
 * Layout follows llama2.c: matrices are row-major [out][in]; RoPE rotates
 * adjacent pairs (2i, 2i + 1) of each head with theta 10000.
 */
#ifndef PKV_EXAMPLE_LLAMA_MODEL_H
#define PKV_EXAMPLE_LLAMA_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct llama_config {
    uint32_t dim;        /* model width */
    uint32_t hidden_dim; /* SwiGLU width */
    uint32_t num_layers;
    uint32_t num_heads;
    uint32_t num_kv_heads; /* grouped-query attention: divides num_heads */
    uint32_t vocab_size;
    uint32_t seq_len;    /* the longest sequence (prompt + output) */
    int shared_classifier; /* the classifier is the token embedding */
} llama_config;

typedef struct llama_weights {
    float *token_embedding; /* [vocab][dim] */
    float *rms_att;         /* [layers][dim] */
    float *wq;              /* [layers][dim][dim] */
    float *wk;              /* [layers][kv_dim][dim] */
    float *wv;              /* [layers][kv_dim][dim] */
    float *wo;              /* [layers][dim][dim] */
    float *rms_ffn;         /* [layers][dim] */
    float *w1;              /* [layers][hidden][dim] */
    float *w2;              /* [layers][dim][hidden] */
    float *w3;              /* [layers][hidden][dim] */
    float *rms_final;       /* [dim] */
    float *classifier;      /* [vocab][dim], token_embedding when shared */
} llama_weights;

typedef struct llama_model {
    llama_config config;
    llama_weights w;
    float *storage; /* every weight, one allocation */
    size_t num_floats;
} llama_model;

/* dim / num_heads and num_kv_heads * head_dim. */
uint32_t llama_head_dim(const llama_config *c);
uint32_t llama_kv_dim(const llama_config *c);

/* The default demo geometry: dim 256, 4 layers, 8 heads, 2 kv heads,
 * hidden 512, vocab 512, seq_len 1024, a separate classifier (a tied one
 * on random weights mostly predicts the input token again). */
llama_config llama_default_config(void);

/* Seeded random weights (scaled so activations stay O(1) through the
 * layers). 0 on success, -1 on a bad config or out of memory. */
int llama_model_init_random(llama_model *m, const llama_config *c,
                            uint64_t seed);

/* Load a llama2.c checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate
 * classifier follows), then the float32 weights in the order of
 * llama_weights, with the legacy RoPE tables (2 x seq_len * head_dim / 2
 * floats) between rms_final and the classifier. 0 on success, -1 with a
 * message in err (err_size bytes) on failure. */
int llama_model_load(llama_model *m, const char *path, char *err,
                     size_t err_size);

/* Release the weights; a zeroed model is a no-op. */
void llama_model_free(llama_model *m);

/*
 * Attention of one layer for the batch's rows: q [rows][heads][head_dim],
 * k and v [rows][kv_heads][head_dim] (RoPE applied), out like q. Returns 0
 * or -1 to abort the forward pass.
 */
typedef int (*llama_attend_fn)(void *user, uint32_t layer, uint32_t rows,
                               const float *q, const float *k, const float *v,
                               float *out);

/* Scratch buffers of the forward pass for up to max_rows rows. */
typedef struct llama_scratch {
    uint32_t max_rows;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2;
} llama_scratch;

int llama_scratch_init(llama_scratch *s, const llama_config *c,
                       uint32_t max_rows);
void llama_scratch_free(llama_scratch *s);

/*
 * The forward pass of rows tokens at their positions. Writes the logits of
 * the rows listed in logit_rows ([num_logits], ascending or not) to logits
 * [num_logits][vocab]. Each row's result depends on its own inputs and
 * attention only, never on how rows are batched. 0 on success, -1 when
 * attend failed or rows exceeds the scratch.
 */
int llama_forward(const llama_model *m, llama_scratch *s, uint32_t rows,
                  const int32_t *tokens, const uint32_t *positions,
                  llama_attend_fn attend, void *attend_user,
                  const uint32_t *logit_rows, uint32_t num_logits,
                  float *logits);

/* Plain causal softmax attention of one query row (all heads) over ctx
 * cached rows of K and V ([ctx][kv_heads][head_dim] each): the dense
 * reference. */
void llama_attend_dense_row(const llama_config *c, const float *q,
                            const float *k_cache, const float *v_cache,
                            uint32_t ctx, float *out);

#endif
