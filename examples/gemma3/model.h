/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3 (the 270M base model) for pkv host programs: the GGUF's weights
 * as stored, and the forward pass over a ragged batch of rows as one ggml
 * graph a step on ggml's CPU backend. Attention is a callback that the
 * graph calls between each layer's QKV and its output projection, so the
 * same model runs over pkv's paged cache or any other.
 *
 * The architecture follows llama.cpp at commit 0c1e570 (vendor/llama.cpp of
 * PyPI's llama-cpp-python 0.3.36 source package; file:line in that tree):
 * - every sixth layer (5, 11, 17) attends to every earlier token, the
 *   others to their last sliding_window (512) tokens, their own included
 *   (src/models/gemma3.cpp:4-7 and src/llama-hparams.cpp:14-16: is_swa =
 *   il % 6 < 5; src/llama-hparams.h:475-486: masked when p1 - p0 >= 512);
 * - RoPE in the NEOX form (pairs i and i + head_dim / 2, over the whole
 *   head: src/llama-model.cpp:3177), base 10,000 on the windowed layers
 *   (llama-hparams.h:151, the file has no freq_base_swa) and the file's
 *   1e6 on the full ones (llama-model.cpp:2329-2335), no scaling at 270M;
 * - the query scaled by 1 / sqrt(key_len) (gemma3.cpp:29-31, every size
 *   but 27B): pkv's default scale;
 * - the embedding times sqrt(dim), in f32 (gemma3.cpp:91);
 * - RMSNorm of each head's q and k before RoPE (gemma3.cpp:131-142), and of
 *   the attention and feed-forward outputs before each residual add
 *   (gemma3.cpp:123-195); the norm weights already hold Gemma's "1 +"
 *   (conversion/gemma.py:131-132, 173-178: data_torch + 1);
 * - feed-forward down(gelu_tanh(gate(x)) * up(x)) (gemma3.cpp:178-182);
 * - logits from the token embedding (tied), no soft-capping: the file has
 *   no final_logit_softcapping (gemma3.cpp:14-15).
 * tests/gemma3/reference.py, an independent numpy forward pass over gguf's
 * own dequantization, checks the host's logits.
 */
#ifndef PKV_EXAMPLE_GEMMA3_MODEL_H
#define PKV_EXAMPLE_GEMMA3_MODEL_H

#include "lend.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

struct ggml_backend;
struct ggml_context;
struct ggml_gallocr;
struct ggml_tensor;
struct ggml_threadpool;

#define G3_FULL_ATTENTION_EVERY 6  /* layers 5, 11, 17, ... */
#define G3_WINDOWED_ROPE_BASE 10000.0f

typedef struct g3_layer {
    struct ggml_tensor *attn_norm, *q_norm, *k_norm, *post_attn_norm;
    struct ggml_tensor *ffn_norm, *post_ffw_norm;
    struct ggml_tensor *wq, *wk, *wv, *wo; /* as stored: Q5_0, Q8_0, ... */
    struct ggml_tensor *gate, *up, *down;
} g3_layer;

typedef struct g3_model {
    g3_file file;
    g3_file_config config;
    uint32_t *layer_windows; /* [layers]: 0 full attention, else the window */
    float *rope_base;        /* [layers] */
    g3_layer *layers;
    struct ggml_tensor *embedding; /* [vocab][dim], also the output matrix */
    struct ggml_tensor *output_norm;
    /* ggml's worker threads, started once for every pass of the run. */
    struct ggml_threadpool *threads;
    uint32_t num_threads;
    /* The threads lent to pkv inside attention nodes (lend.h). */
    g3_lend *lend;
    uint64_t passes; /* forward passes so far: their nodes' keys */
} g3_model;

/* Read the GGUF (weights.h) and start the threads; threads 0 uses every
 * core. 0, or -1 with a message. */
int g3_model_load(g3_model *m, const char *path, uint32_t threads, char *err,
                  size_t err_size);
void g3_model_free(g3_model *m);

/*
 * Attention of one layer for the batch's rows: q [rows][heads][key_len],
 * k [rows][kv_heads][key_len], v [rows][kv_heads][value_len] (normed and
 * rotated), out [rows][heads][value_len], all in the graph's own memory.
 * Called on the thread that called g3_forward, while the pool's other
 * threads wait in the node to run tasks given to g3_lend_parallel on the
 * model's lend (pkv_engine_params.parallel). 0, or -1 to abort the pass.
 */
typedef int (*g3_attend_fn)(void *user, uint32_t layer, uint32_t rows,
                            const float *q, const float *k, const float *v,
                            float *out);

struct g3_scratch;

/* What a layer's attention node calls back with. */
typedef struct g3_attend_node {
    struct g3_scratch *scratch;
    uint32_t layer;
} g3_attend_node;

/* A forward pass's state for up to max_rows rows: ggml's CPU backend on
 * the model's threads, the graph's memory (reused from step to step,
 * grown only when a step needs more) and the context each step's graph is
 * described in (allocated once, emptied each step). */
typedef struct g3_scratch {
    uint32_t max_rows;
    struct ggml_backend *backend;
    struct ggml_gallocr *alloc;
    struct ggml_context *graph;
    size_t graph_size; /* nodes */
    g3_attend_node *nodes; /* [layers] */
    g3_lend *lend;         /* the model's */
    /* The pass under way; its nodes' keys follow key_base. */
    uint64_t key_base;
    g3_attend_fn attend;
    void *attend_user;
    int failed;
} g3_scratch;

/* 0, or -1 out of memory. */
int g3_scratch_init(g3_scratch *s, const g3_model *m, uint32_t max_rows);
void g3_scratch_free(g3_scratch *s);

/*
 * The forward pass of rows tokens at their positions. Writes the logits of
 * the rows listed in logit_rows ([num_logits]) to logits
 * [num_logits][vocab]. A row's result depends on its own inputs and its
 * attention only, never on how rows are batched. 0, or -1 when attend
 * failed, rows exceeds the scratch or a token is out of the vocabulary.
 */
int g3_forward(g3_model *m, g3_scratch *s, uint32_t rows,
               const int32_t *tokens, const uint32_t *positions,
               g3_attend_fn attend, void *attend_user,
               const uint32_t *logit_rows, uint32_t num_logits,
               float *logits);

#endif
