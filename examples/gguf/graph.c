/* SPDX-License-Identifier: MIT */
/* The graph every architecture shares (graph.h). */
#include "graph.h"
#include "logits.h"

#include <ggml.h>

#include <math.h>

/* The attention node of a layer: the host's attend on the graph's q, k and
 * v, writing straight into the node's output. Every thread of the pool
 * passes through a node: the first one (the one that called gg_forward)
 * calls attend, the others run the tasks it lends them (lend.h). */
static void attend_node(struct ggml_tensor *dst, int ith, int nth,
                        void *user)
{
    (void)nth;
    const gg_attend_node *node = user;
    gg_scratch *s = node->scratch;
    uint64_t key = s->key_base + node->layer;
    if (ith != 0) {
        gg_lend_help(s->lend, key, (uint32_t)ith);
        return;
    }
    gg_lend_open(s->lend, key);
    const struct ggml_tensor *q = dst->src[0], *k = dst->src[1];
    const struct ggml_tensor *v = dst->src[2];
    if (!s->failed &&
        s->attend(s->attend_user, node->layer, (uint32_t)dst->ne[1], q->data,
                  k->data, v->data, dst->data) != 0)
        s->failed = 1;
    gg_lend_close(s->lend);
}

struct ggml_tensor *gg_graph_norm(gg_builder *b, struct ggml_tensor *x,
                                  struct ggml_tensor *w)
{
    return ggml_mul(b->ctx, ggml_rms_norm(b->ctx, x, b->m->config.rms_eps),
                    w);
}

/* q or k of layer l: projected, each head RMS-normed where the layer has
 * a norm for it (Gemma 3), rotated. */
static struct ggml_tensor *head_proj(gg_builder *b, const gg_arch *a,
                                     uint32_t l, struct ggml_tensor *x,
                                     struct ggml_tensor *w,
                                     struct ggml_tensor *head_norm,
                                     uint32_t heads,
                                     struct ggml_tensor *pos)
{
    const gg_file_config *c = &b->m->config;
    struct ggml_tensor *h = ggml_reshape_3d(b->ctx, ggml_mul_mat(b->ctx, w, x),
                                            c->key_len, heads, x->ne[1]);
    if (head_norm != NULL)
        h = gg_graph_norm(b, h, head_norm);
    return ggml_rope_ext(b->ctx, h, pos, NULL, (int)c->key_len, a->rope_mode,
                         (int)c->context_length, b->m->rope_base[l], 1.0f,
                         0.0f, 1.0f, 0.0f, 0.0f);
}

/* Layer l's attention: the output projection of the host's attend over
 * the rotated q and k and the v of the normed x. */
static struct ggml_tensor *attention(gg_builder *b, const gg_arch *a,
                                     uint32_t l, struct ggml_tensor *x,
                                     struct ggml_tensor *pos)
{
    const gg_file_config *c = &b->m->config;
    const gg_layer *y = &b->m->layers[l];
    struct ggml_tensor *cur = gg_graph_norm(b, x, y->attn_norm);
    struct ggml_tensor *args[3] = {
        head_proj(b, a, l, cur, y->wq, y->q_norm, c->num_heads, pos),
        head_proj(b, a, l, cur, y->wk, y->k_norm, c->num_kv_heads, pos),
        ggml_reshape_3d(b->ctx, ggml_mul_mat(b->ctx, y->wv, cur),
                        c->value_len, c->num_kv_heads, x->ne[1])};
    struct ggml_tensor *att = ggml_custom_4d(
        b->ctx, GGML_TYPE_F32, (int64_t)c->num_heads * c->value_len,
        x->ne[1], 1, 1, args, 3, attend_node, GGML_N_TASKS_MAX,
        &b->s->nodes[l]);
    return ggml_mul_mat(b->ctx, y->wo, att);
}

struct ggml_tensor *gg_graph_build(gg_builder *b, const gg_arch *a,
                                   struct ggml_tensor *tok,
                                   struct ggml_tensor *pos,
                                   struct ggml_tensor *out)
{
    const gg_model *m = b->m;
    uint32_t layers = m->config.num_layers;
    struct ggml_tensor *x = ggml_get_rows(b->ctx, m->embedding, tok);
    if (a->scale_embedding)
        x = ggml_scale(b->ctx, x, sqrtf((float)m->config.dim));
    for (uint32_t l = 0; l < layers; l++) {
        struct ggml_tensor *att = attention(b, a, l, x, pos);
        if (l + 1 == layers) {
            if (out == NULL)
                return att;
            att = ggml_get_rows(b->ctx, att, out);
            x = ggml_get_rows(b->ctx, x, out);
        }
        x = a->feed_forward(b, l, x, att);
    }
    return gg_logits(b->ctx, m->output, gg_graph_norm(b, x, m->output_norm));
}
