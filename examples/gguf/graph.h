/* SPDX-License-Identifier: MIT */
/*
 * Inside the GGUF host's model: the graph of one step on ggml, which
 * every architecture shares (graph.c: the embedding, each layer's
 * attention through the host's attend, the logits), and what each adds
 * (gemma3.c, llama.c: its layers' own tensors and windows, its RoPE, its
 * embedding scale and its feed-forward half).
 */
#ifndef PKV_EXAMPLE_GGUF_GRAPH_H
#define PKV_EXAMPLE_GGUF_GRAPH_H

#include "load.h"
#include "model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct gg_builder {
    struct ggml_context *ctx;
    const gg_model *m;
    gg_scratch *s;
} gg_builder;

/* rms_norm(x) * w along the first dimension. */
struct ggml_tensor *gg_graph_norm(gg_builder *b, struct ggml_tensor *x,
                                  struct ggml_tensor *w);

/* What an architecture adds to the shared graph. */
typedef struct gg_arch {
    /* Its layers' tensors besides those every architecture has (the two
     * norms, q, k, v, output, gate, up, down: loaded already), its
     * windows and RoPE bases (m->layer_windows, m->rope_base). 0 or -1
     * with a message. */
    int (*load)(gg_loader *l);
    int rope_mode;        /* GGML_ROPE_TYPE_* */
    int scale_embedding;  /* the embedding times sqrt(dim) */
    /* The rest of layer l after its attention's output projection att:
     * the residual adds and the feed-forward half. */
    struct ggml_tensor *(*feed_forward)(gg_builder *b, uint32_t l,
                                        struct ggml_tensor *x,
                                        struct ggml_tensor *att);
} gg_arch;

extern const gg_arch gg_arch_gemma3, gg_arch_llama;

/* One step's graph: every layer for the rows tok at positions pos (each
 * layer's attention node writes the rows' K and V), and the logits of the
 * rows out only (NULL: none, the graph then ends at the last attention),
 * whose last feed-forward is all that the logits need. */
struct ggml_tensor *gg_graph_build(gg_builder *b, const gg_arch *a,
                                   struct ggml_tensor *tok,
                                   struct ggml_tensor *pos,
                                   struct ggml_tensor *out);

#endif
