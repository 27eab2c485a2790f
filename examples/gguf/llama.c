/* SPDX-License-Identifier: MIT */
/*
 * The llama architecture's part of the graph on ggml (graph.h): Llama 2
 * and 3 without RoPE scaling, SmolLM, Mistral-style models. It follows
 * llama.cpp at commit 0c1e570 (vendor/llama.cpp of PyPI's
 * llama-cpp-python 0.3.36 source package; file:line in that tree),
 * src/models/llama.cpp:100-245:
 * - pre-norm layers: x + attention(rms_norm(x) * attn_norm), then
 *   x + ffn(rms_norm(x) * ffn_norm);
 * - RoPE in the normal form (adjacent pairs 2i and 2i + 1 over the whole
 *   head: src/llama-model.cpp:3052, LLAMA_ROPE_TYPE_NORM; llama.cpp's
 *   converter permuted q and k for it), base rope.freq_base, no scaling;
 * - the query scaled by 1 / sqrt(head_dim) (llama.cpp:122, the file has no
 *   attention.scale): pkv's default scale; grouped-query attention;
 * - feed-forward down(silu(gate(x)) * up(x)) (llama.cpp:189-194);
 * - no window: every layer attends to every earlier token;
 * - logits from output.weight, or the token embedding where the file has
 *   none (llama.cpp:39-45: SmolLM2's are tied).
 * Refused: Llama 3.1's RoPE frequency factors (rope_freqs.weight) and
 * mixtures of experts, which this graph does not build.
 */
#include "graph.h"

#include <ggml.h>

/* The llama layers have nothing besides what every architecture has;
 * what this graph cannot run is refused, and no layer has a window. */
static int load(gg_loader *l)
{
    gg_model *m = l->m;
    const gg_file_config *c = &m->config;
    if (ggml_get_tensor(m->file.tensors, "rope_freqs.weight") != NULL ||
        ggml_get_tensor(m->file.tensors, "blk.0.ffn_gate_inp.weight") !=
            NULL)
        return gg_fail(l->err, l->err_size, "RoPE frequency factors or "
                       "experts: a llama model this host does not run");
    for (uint32_t i = 0; i < c->num_layers; i++) {
        m->layer_windows[i] = 0;
        m->rope_base[i] = c->rope_base;
    }
    return 0;
}

/* x + att, then the feed-forward half, down(silu(gate) * up), added. */
static struct ggml_tensor *feed_forward(gg_builder *b, uint32_t l,
                                        struct ggml_tensor *x,
                                        struct ggml_tensor *att)
{
    const gg_layer *y = &b->m->layers[l];
    struct ggml_tensor *sa = ggml_add(b->ctx, att, x);
    struct ggml_tensor *cur = gg_graph_norm(b, sa, y->ffn_norm);
    cur = ggml_swiglu_split(b->ctx, ggml_mul_mat(b->ctx, y->gate, cur),
                            ggml_mul_mat(b->ctx, y->up, cur));
    return ggml_add(b->ctx, ggml_mul_mat(b->ctx, y->down, cur), sa);
}

const gg_arch gg_arch_llama = {load, GGML_ROPE_TYPE_NORMAL, 0,
                               feed_forward};
