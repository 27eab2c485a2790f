/* SPDX-License-Identifier: MIT */
/* Gemma 3: weights and the forward pass on ggml (model.h). */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include "model.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 64
/* Nodes of one step's graph: about 30 a layer, a few around them. */
#define NODES_PER_LAYER 48
#define NODES_OUTSIDE 32

/* ---------------------------------------------------------------- loading */

typedef struct loader {
    g3_model *m;
    char *err;
    size_t err_size;
} loader;

static struct ggml_tensor *vector(loader *l, const char *name, int64_t n)
{
    return g3_file_tensor(&l->m->file, name, 1, &n, 1, l->err, l->err_size);
}

/* A matrix with a row of in values per output, in its stored type. */
static struct ggml_tensor *matrix(loader *l, const char *name, int64_t in,
                                  int64_t out)
{
    int64_t ne[2] = {in, out};
    return g3_file_tensor(&l->m->file, name, 2, ne, 0, l->err, l->err_size);
}

static int load_layer(loader *l, uint32_t i)
{
    const g3_file_config *c = &l->m->config;
    g3_layer *y = &l->m->layers[i];
    int64_t d = c->dim, qd = (int64_t)c->num_heads * c->key_len;
    int64_t kd = (int64_t)c->num_kv_heads * c->key_len;
    int64_t vd = (int64_t)c->num_kv_heads * c->value_len;
    int64_t od = (int64_t)c->num_heads * c->value_len;
    char n[64];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u." s ".weight", i), n)
    if (!(y->attn_norm = vector(l, NAME("attn_norm"), d)) ||
        !(y->q_norm = vector(l, NAME("attn_q_norm"), c->key_len)) ||
        !(y->k_norm = vector(l, NAME("attn_k_norm"), c->key_len)) ||
        !(y->post_attn_norm = vector(l, NAME("post_attention_norm"), d)) ||
        !(y->ffn_norm = vector(l, NAME("ffn_norm"), d)) ||
        !(y->post_ffw_norm = vector(l, NAME("post_ffw_norm"), d)) ||
        !(y->wq = matrix(l, NAME("attn_q"), d, qd)) ||
        !(y->wk = matrix(l, NAME("attn_k"), d, kd)) ||
        !(y->wv = matrix(l, NAME("attn_v"), d, vd)) ||
        !(y->wo = matrix(l, NAME("attn_output"), od, d)) ||
        !(y->gate = matrix(l, NAME("ffn_gate"), d, c->ffn_dim)) ||
        !(y->up = matrix(l, NAME("ffn_up"), d, c->ffn_dim)) ||
        !(y->down = matrix(l, NAME("ffn_down"), c->ffn_dim, d)))
        return -1;
#undef NAME
    return 0;
}

/* Sizes the pass relies on: one key and value length (pkv's head_dim),
 * whole GQA groups, even heads for RoPE. */
static int config_ok(const g3_file_config *c, char *err, size_t err_size)
{
    if (c->num_heads % c->num_kv_heads || c->key_len != c->value_len ||
        c->key_len % 2 || (uint64_t)c->num_heads * c->key_len > 65536)
        return g3_fail(err, err_size,
                       "unsupported geometry: heads %u/%u, key %u, value %u",
                       c->num_heads, c->num_kv_heads, c->key_len,
                       c->value_len);
    return 0;
}

static uint32_t online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (uint32_t)n;
}

int g3_model_load(g3_model *m, const char *path, uint32_t threads, char *err,
                  size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (g3_file_open(&m->file, path, err, err_size) != 0)
        return -1;
    m->config = m->file.config;
    const g3_file_config *c = &m->config;
    loader l = {m, err, err_size};
    if (config_ok(c, err, err_size) != 0)
        goto fail;
    m->layers = calloc(c->num_layers, sizeof *m->layers);
    m->layer_windows = calloc(c->num_layers, sizeof *m->layer_windows);
    m->rope_base = calloc(c->num_layers, sizeof *m->rope_base);
    if (!m->layers || !m->layer_windows || !m->rope_base) {
        g3_fail(err, err_size, "out of memory");
        goto fail;
    }
    if (!(m->output_norm = vector(&l, "output_norm.weight", c->dim)) ||
        !(m->embedding = matrix(&l, "token_embd.weight", c->dim,
                                c->vocab_size)))
        goto fail;
    for (uint32_t i = 0; i < c->num_layers; i++) {
        if (load_layer(&l, i) != 0)
            goto fail;
        int full = i % G3_FULL_ATTENTION_EVERY == G3_FULL_ATTENTION_EVERY - 1;
        m->layer_windows[i] = full ? 0 : c->sliding_window;
        m->rope_base[i] = full ? c->rope_base : G3_WINDOWED_ROPE_BASE;
    }
    m->num_threads = threads == 0              ? online_cpus()
                     : threads > MAX_THREADS ? MAX_THREADS
                                               : threads;
    struct ggml_threadpool_params tp =
        ggml_threadpool_params_default((int)m->num_threads);
    m->threads = ggml_threadpool_new(&tp);
    m->lend = calloc(1, sizeof *m->lend);
    if (m->threads == NULL || m->lend == NULL) {
        g3_fail(err, err_size, "cannot start %u threads", m->num_threads);
        goto fail;
    }
    return 0;
fail:
    g3_model_free(m);
    return -1;
}

void g3_model_free(g3_model *m)
{
    if (m->threads != NULL)
        ggml_threadpool_free(m->threads);
    free(m->lend);
    free(m->layers);
    free(m->layer_windows);
    free(m->rope_base);
    g3_file_close(&m->file);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- scratch */

static bool failed(void *data)
{
    return ((g3_scratch *)data)->failed != 0;
}

int g3_scratch_init(g3_scratch *s, const g3_model *m, uint32_t max_rows)
{
    memset(s, 0, sizeof *s);
    s->max_rows = max_rows;
    size_t nodes = (size_t)m->config.num_layers * NODES_PER_LAYER +
                   NODES_OUTSIDE;
    s->graph_size = nodes;
    /* Descriptions only: the data is the graph allocator's. */
    struct ggml_init_params p = {ggml_tensor_overhead() * nodes +
                                     ggml_graph_overhead_custom(nodes, false),
                                 NULL, true};
    s->graph = ggml_init(p);
    s->nodes = calloc(m->config.num_layers, sizeof *s->nodes);
    s->backend = ggml_backend_cpu_init();
    if (s->graph == NULL || s->nodes == NULL || s->backend == NULL) {
        g3_scratch_free(s);
        return -1;
    }
    ggml_backend_cpu_set_n_threads(s->backend, (int)m->num_threads);
    ggml_backend_cpu_set_threadpool(s->backend, m->threads);
    /* A failed attend stops the graph at its next node. */
    ggml_backend_cpu_set_abort_callback(s->backend, failed, s);
    s->alloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(
        s->backend));
    if (s->alloc == NULL) {
        g3_scratch_free(s);
        return -1;
    }
    for (uint32_t l = 0; l < m->config.num_layers; l++)
        s->nodes[l] = (g3_attend_node){s, l};
    s->lend = m->lend;
    return 0;
}

void g3_scratch_free(g3_scratch *s)
{
    if (s->alloc != NULL)
        ggml_gallocr_free(s->alloc);
    if (s->backend != NULL)
        ggml_backend_free(s->backend);
    if (s->graph != NULL)
        ggml_free(s->graph);
    free(s->nodes);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ the graph */

/* The attention node of a layer: the host's attend on the graph's q, k and
 * v, writing straight into the node's output. Every thread of the pool
 * passes through a node: the first one (the one that called g3_forward)
 * calls attend, the others run the tasks it lends them (lend.h). */
static void attend_node(struct ggml_tensor *dst, int ith, int nth,
                        void *user)
{
    (void)nth;
    const g3_attend_node *node = user;
    g3_scratch *s = node->scratch;
    uint64_t key = s->key_base + node->layer;
    if (ith != 0) {
        g3_lend_help(s->lend, key, (uint32_t)ith);
        return;
    }
    g3_lend_open(s->lend, key);
    const struct ggml_tensor *q = dst->src[0], *k = dst->src[1];
    const struct ggml_tensor *v = dst->src[2];
    if (!s->failed &&
        s->attend(s->attend_user, node->layer, (uint32_t)dst->ne[1], q->data,
                  k->data, v->data, dst->data) != 0)
        s->failed = 1;
    g3_lend_close(s->lend);
}

typedef struct builder {
    struct ggml_context *ctx;
    const g3_model *m;
    g3_scratch *s;
} builder;

/* rms_norm(x) * w along the first dimension. */
static struct ggml_tensor *norm(builder *b, struct ggml_tensor *x,
                                struct ggml_tensor *w)
{
    return ggml_mul(b->ctx, ggml_rms_norm(b->ctx, x, b->m->config.rms_eps), w);
}

/* q or k of layer l: projected, each head RMS-normed, rotated (NEOX). */
static struct ggml_tensor *head_proj(builder *b, uint32_t l,
                                     struct ggml_tensor *x,
                                     struct ggml_tensor *w,
                                     struct ggml_tensor *head_norm,
                                     uint32_t heads,
                                     struct ggml_tensor *pos)
{
    const g3_file_config *c = &b->m->config;
    struct ggml_tensor *h = ggml_reshape_3d(b->ctx, ggml_mul_mat(b->ctx, w, x),
                                            c->key_len, heads, x->ne[1]);
    return ggml_rope_ext(b->ctx, norm(b, h, head_norm), pos, NULL,
                         (int)c->key_len, GGML_ROPE_TYPE_NEOX,
                         (int)c->context_length, b->m->rope_base[l], 1.0f,
                         0.0f, 1.0f, 0.0f, 0.0f);
}

/* Layer l's attention half: the projected output of pkv's attention over
 * rotated q and k, before the post-attention norm. */
static struct ggml_tensor *attention(builder *b, uint32_t l,
                                     struct ggml_tensor *x,
                                     struct ggml_tensor *pos)
{
    const g3_file_config *c = &b->m->config;
    const g3_layer *y = &b->m->layers[l];
    struct ggml_tensor *cur = norm(b, x, y->attn_norm);
    struct ggml_tensor *args[3] = {
        head_proj(b, l, cur, y->wq, y->q_norm, c->num_heads, pos),
        head_proj(b, l, cur, y->wk, y->k_norm, c->num_kv_heads, pos),
        ggml_reshape_3d(b->ctx, ggml_mul_mat(b->ctx, y->wv, cur),
                        c->value_len, c->num_kv_heads, x->ne[1])};
    struct ggml_tensor *att = ggml_custom_4d(
        b->ctx, GGML_TYPE_F32, (int64_t)c->num_heads * c->value_len,
        x->ne[1], 1, 1, args, 3, attend_node, GGML_N_TASKS_MAX,
        &b->s->nodes[l]);
    return ggml_mul_mat(b->ctx, y->wo, att);
}

/* The rest of layer l after attention: x + post_norm(att), then the
 * feed-forward half, down(gelu_tanh(gate) * up), post-normed and added. */
static struct ggml_tensor *feed_forward(builder *b, uint32_t l,
                                        struct ggml_tensor *x,
                                        struct ggml_tensor *att)
{
    const g3_layer *y = &b->m->layers[l];
    struct ggml_tensor *sa = ggml_add(b->ctx, norm(b, att, y->post_attn_norm),
                                      x);
    struct ggml_tensor *cur = norm(b, sa, y->ffn_norm);
    cur = ggml_geglu_split(b->ctx, ggml_mul_mat(b->ctx, y->gate, cur),
                           ggml_mul_mat(b->ctx, y->up, cur));
    cur = norm(b, ggml_mul_mat(b->ctx, y->down, cur), y->post_ffw_norm);
    return ggml_add(b->ctx, cur, sa);
}

/* One step's graph: every layer for every row (each layer's attention
 * writes the rows' K and V), and the logits of the out rows only, whose
 * last feed-forward is all that the logits need. Its inputs: tok and pos
 * [rows], out [num_out] (NULL when no row is sampled). */
static struct ggml_tensor *build(builder *b, struct ggml_tensor *tok,
                                 struct ggml_tensor *pos,
                                 struct ggml_tensor *out)
{
    const g3_model *m = b->m;
    uint32_t layers = m->config.num_layers;
    struct ggml_tensor *x = ggml_scale(b->ctx,
                                       ggml_get_rows(b->ctx, m->embedding, tok),
                                       sqrtf((float)m->config.dim));
    for (uint32_t l = 0; l < layers; l++) {
        struct ggml_tensor *att = attention(b, l, x, pos);
        if (l + 1 == layers) {
            if (out == NULL)
                return att;
            att = ggml_get_rows(b->ctx, att, out);
            x = ggml_get_rows(b->ctx, x, out);
        }
        x = feed_forward(b, l, x, att);
    }
    return ggml_mul_mat(b->ctx, m->embedding,
                        norm(b, x, m->output_norm));
}

int g3_forward(g3_model *m, g3_scratch *s, uint32_t rows,
               const int32_t *tokens, const uint32_t *positions,
               g3_attend_fn attend, void *attend_user,
               const uint32_t *logit_rows, uint32_t num_logits,
               float *logits)
{
    if (rows > s->max_rows || num_logits > rows)
        return -1;
    if (rows == 0) /* a step that only reports finished sequences */
        return 0;
    for (uint32_t r = 0; r < rows; r++)
        if (tokens[r] < 0 || (uint32_t)tokens[r] >= m->config.vocab_size)
            return -1;
    for (uint32_t j = 0; j < num_logits; j++)
        if (logit_rows[j] >= rows)
            return -1;
    ggml_reset(s->graph);
    builder b = {s->graph, m, s};
    struct ggml_tensor *tok = ggml_new_tensor_1d(b.ctx, GGML_TYPE_I32, rows);
    struct ggml_tensor *pos = ggml_new_tensor_1d(b.ctx, GGML_TYPE_I32, rows);
    struct ggml_tensor *out =
        num_logits ? ggml_new_tensor_1d(b.ctx, GGML_TYPE_I32, num_logits)
                   : NULL;
    ggml_set_input(tok);
    ggml_set_input(pos);
    if (out != NULL)
        ggml_set_input(out);
    struct ggml_tensor *result = build(&b, tok, pos, out);
    /* The logits land in the caller's array, not the graph's memory. */
    if (out != NULL)
        result->data = logits;
    struct ggml_cgraph *gf = ggml_new_graph_custom(b.ctx, s->graph_size,
                                                   false);
    ggml_build_forward_expand(gf, result);
    if (!ggml_gallocr_alloc_graph(s->alloc, gf))
        return -1;
    memcpy(tok->data, tokens, rows * sizeof *tokens);
    int32_t *at = pos->data;
    for (uint32_t r = 0; r < rows; r++)
        at[r] = (int32_t)positions[r];
    if (out != NULL) {
        int32_t *o = out->data;
        for (uint32_t j = 0; j < num_logits; j++)
            o[j] = (int32_t)logit_rows[j];
    }
    s->attend = attend;
    s->attend_user = attend_user;
    s->failed = 0;
    /* Keys 1, 2, ...: never 0, never one an earlier node had. */
    s->key_base = ++m->passes * m->config.num_layers + 1;
    return ggml_backend_graph_compute(s->backend, gf) == GGML_STATUS_SUCCESS &&
                   !s->failed
               ? 0
               : -1;
}
