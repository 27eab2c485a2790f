/* SPDX-License-Identifier: MIT */
/*
 * Gemma 3's part of the graph on ggml (graph.h). The architecture follows
 * llama.cpp at commit 0c1e570 (vendor/llama.cpp of PyPI's
 * llama-cpp-python 0.3.36 source package; file:line in that tree):
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
 */
#include "graph.h"

#include <ggml.h>

#define FULL_ATTENTION_EVERY 6 /* layers 5, 11, 17, ... */
#define WINDOWED_ROPE_BASE 10000.0f

/* Layer i's four norms besides attn_norm and ffn_norm, and each layer's
 * window and RoPE base. */
static int load(gg_loader *l)
{
    gg_model *m = l->m;
    const gg_file_config *c = &m->config;
    for (uint32_t i = 0; i < c->num_layers; i++) {
        gg_layer *y = &m->layers[i];
        if (!(y->q_norm = gg_load_layer_tensor(l, i, "attn_q_norm",
                                               c->key_len, 0)) ||
            !(y->k_norm = gg_load_layer_tensor(l, i, "attn_k_norm",
                                               c->key_len, 0)) ||
            !(y->post_attn_norm = gg_load_layer_tensor(
                  l, i, "post_attention_norm", c->dim, 0)) ||
            !(y->post_ffw_norm = gg_load_layer_tensor(l, i, "post_ffw_norm",
                                                      c->dim, 0)))
            return -1;
        int full = i % FULL_ATTENTION_EVERY == FULL_ATTENTION_EVERY - 1;
        m->layer_windows[i] = full ? 0 : c->sliding_window;
        m->rope_base[i] = full ? c->rope_base : WINDOWED_ROPE_BASE;
    }
    return 0;
}

/* The rest of layer l after attention: x + post_norm(att), then the
 * feed-forward half, down(gelu_tanh(gate) * up), post-normed and added. */
static struct ggml_tensor *feed_forward(gg_builder *b, uint32_t l,
                                        struct ggml_tensor *x,
                                        struct ggml_tensor *att)
{
    const gg_layer *y = &b->m->layers[l];
    struct ggml_tensor *sa =
        ggml_add(b->ctx, gg_graph_norm(b, att, y->post_attn_norm), x);
    struct ggml_tensor *cur = gg_graph_norm(b, sa, y->ffn_norm);
    cur = ggml_geglu_split(b->ctx, ggml_mul_mat(b->ctx, y->gate, cur),
                           ggml_mul_mat(b->ctx, y->up, cur));
    cur = gg_graph_norm(b, ggml_mul_mat(b->ctx, y->down, cur),
                        y->post_ffw_norm);
    return ggml_add(b->ctx, cur, sa);
}

const gg_arch gg_arch_gemma3 = {load, GGML_ROPE_TYPE_NEOX, 1, feed_forward};
