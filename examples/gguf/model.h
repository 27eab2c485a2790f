/* SPDX-License-Identifier: MIT */
/*
 * The GGUF host's model: the file's weights as stored, and the forward
 * pass over a ragged batch of rows as one ggml graph a step on ggml's CPU
 * backend, built for the file's architecture (gemma3.c, llama.c: graph.h).
 * Attention is a callback that the graph calls between each layer's QKV
 * and its output projection, so the same model runs over pkv's paged
 * cache or any other. tests/gemma3/reference.py and
 * tests/smollm2/reference.py, independent numpy forward passes over
 * gguf's own dequantization, check the host's logits.
 */
#ifndef PKV_EXAMPLE_GGUF_MODEL_H
#define PKV_EXAMPLE_GGUF_MODEL_H

#include "lend.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

struct ggml_backend;
struct ggml_context;
struct ggml_gallocr;
struct ggml_tensor;
struct ggml_threadpool;

/* A layer's tensors; Gemma 3's four norms besides attn_norm and ffn_norm
 * are NULL in a llama model. */
typedef struct gg_layer {
    struct ggml_tensor *attn_norm, *q_norm, *k_norm, *post_attn_norm;
    struct ggml_tensor *ffn_norm, *post_ffw_norm;
    struct ggml_tensor *wq, *wk, *wv, *wo; /* as stored: Q5_0, Q8_0, ... */
    struct ggml_tensor *gate, *up, *down;
} gg_layer;

typedef struct gg_model {
    gg_file file;
    gg_file_config config;
    uint32_t *layer_windows; /* [layers]: 0 full attention, else the window */
    float *rope_base;        /* [layers] */
    gg_layer *layers;
    struct ggml_tensor *embedding; /* [vocab][dim] */
    /* [vocab][dim]: output.weight, or the embedding where the file has
     * none (tied, as Gemma 3's and SmolLM2's). */
    struct ggml_tensor *output;
    struct ggml_tensor *output_norm;
    /* ggml's worker threads, started once for every pass of the run. */
    struct ggml_threadpool *threads;
    uint32_t num_threads;
    /* The threads lent to pkv inside attention nodes (lend.h). */
    gg_lend *lend;
    uint64_t passes; /* forward passes so far: their nodes' keys */
} gg_model;

/* Read the GGUF (weights.h) and start the threads; threads 0 uses every
 * core. 0, or -1 with a message. */
int gg_model_load(gg_model *m, const char *path, uint32_t threads, char *err,
                  size_t err_size);
void gg_model_free(gg_model *m);

/*
 * Attention of one layer for the batch's rows: q [rows][heads][key_len],
 * k [rows][kv_heads][key_len], v [rows][kv_heads][value_len] (normed and
 * rotated), out [rows][heads][value_len], all in the graph's own memory.
 * Called on the thread that called gg_forward, while the pool's other
 * threads wait in the node to run tasks given to gg_lend_parallel on the
 * model's lend (pkv_engine_params.parallel). 0, or -1 to abort the pass.
 */
typedef int (*gg_attend_fn)(void *user, uint32_t layer, uint32_t rows,
                            const float *q, const float *k, const float *v,
                            float *out);

struct gg_scratch;

/* What a layer's attention node calls back with. */
typedef struct gg_attend_node {
    struct gg_scratch *scratch;
    uint32_t layer;
} gg_attend_node;

/* A forward pass's state for up to max_rows rows: ggml's CPU backend on
 * the model's threads, the graph's memory (reused from step to step,
 * grown only when a step needs more) and the context each step's graph is
 * described in (allocated once, emptied each step). */
typedef struct gg_scratch {
    uint32_t max_rows;
    struct ggml_backend *backend;
    struct ggml_gallocr *alloc;
    struct ggml_context *graph;
    size_t graph_size; /* nodes */
    gg_attend_node *nodes; /* [layers] */
    gg_lend *lend;         /* the model's */
    /* The pass under way; its nodes' keys follow key_base. */
    uint64_t key_base;
    gg_attend_fn attend;
    void *attend_user;
    int failed;
} gg_scratch;

/* 0, or -1 out of memory. */
int gg_scratch_init(gg_scratch *s, const gg_model *m, uint32_t max_rows);
void gg_scratch_free(gg_scratch *s);

/*
 * The forward pass of rows tokens at their positions. Writes the logits of
 * the rows listed in logit_rows ([num_logits]) to logits[0..num_logits)
 * [vocab]. logits holds num_logits rows rounded up to a multiple of 4
 * (at most the scratch's max_rows): more than 4 rows may be computed in a
 * multiple of 4, the rows past num_logits then overwritten (model.c says
 * why). A row's result depends on its own inputs and its attention only,
 * never on how rows are batched. 0, or -1 when attend failed, rows
 * exceeds the scratch or a token is out of the vocabulary.
 */
int gg_forward(gg_model *m, gg_scratch *s, uint32_t rows,
               const int32_t *tokens, const uint32_t *positions,
               gg_attend_fn attend, void *attend_user,
               const uint32_t *logit_rows, uint32_t num_logits,
               float *logits);

#endif
