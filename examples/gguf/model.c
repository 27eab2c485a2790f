/* SPDX-License-Identifier: MIT */
/* The GGUF host's model: weights and the forward pass on ggml (model.h),
 * the graph by architecture (graph.h). */
#define _POSIX_C_SOURCE 200809L /* sysconf */
#include "graph.h"
#include "logits.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 64
/* Nodes of one step's graph: about 30 a layer, a few around them. */
#define NODES_PER_LAYER 48
#define NODES_OUTSIDE 32

/* ---------------------------------------------------------------- loading */

/* Layer i's tensors that every architecture has. */
static int load_layer(gg_loader *l, uint32_t i)
{
    const gg_file_config *c = &l->m->config;
    gg_layer *y = &l->m->layers[i];
    int64_t d = c->dim, qd = (int64_t)c->num_heads * c->key_len;
    int64_t kd = (int64_t)c->num_kv_heads * c->key_len;
    int64_t vd = (int64_t)c->num_kv_heads * c->value_len;
    int64_t od = (int64_t)c->num_heads * c->value_len;
    if (!(y->attn_norm = gg_load_layer_tensor(l, i, "attn_norm", d, 0)) ||
        !(y->ffn_norm = gg_load_layer_tensor(l, i, "ffn_norm", d, 0)) ||
        !(y->wq = gg_load_layer_tensor(l, i, "attn_q", d, qd)) ||
        !(y->wk = gg_load_layer_tensor(l, i, "attn_k", d, kd)) ||
        !(y->wv = gg_load_layer_tensor(l, i, "attn_v", d, vd)) ||
        !(y->wo = gg_load_layer_tensor(l, i, "attn_output", od, d)) ||
        !(y->gate = gg_load_layer_tensor(l, i, "ffn_gate", d, c->ffn_dim)) ||
        !(y->up = gg_load_layer_tensor(l, i, "ffn_up", d, c->ffn_dim)) ||
        !(y->down = gg_load_layer_tensor(l, i, "ffn_down", c->ffn_dim, d)))
        return -1;
    return 0;
}

static const gg_arch *arch_of(const gg_model *m)
{
    return m->config.arch == GG_ARCH_GEMMA3 ? &gg_arch_gemma3
                                            : &gg_arch_llama;
}

/* Sizes the pass relies on: one key and value length (pkv's head_dim),
 * whole GQA groups, even heads for RoPE. */
static int config_ok(const gg_file_config *c, char *err, size_t err_size)
{
    if (c->num_heads % c->num_kv_heads || c->key_len != c->value_len ||
        c->key_len % 2 || (uint64_t)c->num_heads * c->key_len > 65536)
        return gg_fail(err, err_size,
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

int gg_model_load(gg_model *m, const char *path, uint32_t threads, char *err,
                  size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (gg_file_open(&m->file, path, err, err_size) != 0)
        return -1;
    m->config = m->file.config;
    const gg_file_config *c = &m->config;
    gg_loader l = {m, err, err_size};
    if (config_ok(c, err, err_size) != 0)
        goto fail;
    m->layers = calloc(c->num_layers, sizeof *m->layers);
    m->layer_windows = calloc(c->num_layers, sizeof *m->layer_windows);
    m->rope_base = calloc(c->num_layers, sizeof *m->rope_base);
    if (!m->layers || !m->layer_windows || !m->rope_base) {
        gg_fail(err, err_size, "out of memory");
        goto fail;
    }
    if (!(m->output_norm = gg_load_tensor(&l, "output_norm.weight", c->dim,
                                          0)) ||
        !(m->embedding = gg_load_tensor(&l, "token_embd.weight", c->dim,
                                        c->vocab_size)))
        goto fail;
    m->output = m->embedding;
    if (ggml_get_tensor(m->file.tensors, "output.weight") != NULL &&
        !(m->output = gg_load_tensor(&l, "output.weight", c->dim,
                                     c->vocab_size)))
        goto fail;
    for (uint32_t i = 0; i < c->num_layers; i++)
        if (load_layer(&l, i) != 0)
            goto fail;
    if (arch_of(m)->load(&l) != 0)
        goto fail;
    m->num_threads = threads == 0              ? online_cpus()
                     : threads > MAX_THREADS ? MAX_THREADS
                                               : threads;
    struct ggml_threadpool_params tp =
        ggml_threadpool_params_default((int)m->num_threads);
    m->threads = ggml_threadpool_new(&tp);
    m->lend = calloc(1, sizeof *m->lend);
    if (m->threads == NULL || m->lend == NULL) {
        gg_fail(err, err_size, "cannot start %u threads", m->num_threads);
        goto fail;
    }
    return 0;
fail:
    gg_model_free(m);
    return -1;
}

void gg_model_free(gg_model *m)
{
    if (m->threads != NULL)
        ggml_threadpool_free(m->threads);
    free(m->lend);
    free(m->layers);
    free(m->layer_windows);
    free(m->rope_base);
    gg_file_close(&m->file);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------- scratch */

static bool failed(void *data)
{
    return ((gg_scratch *)data)->failed != 0;
}

int gg_scratch_init(gg_scratch *s, const gg_model *m, uint32_t max_rows)
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
        gg_scratch_free(s);
        return -1;
    }
    ggml_backend_cpu_set_n_threads(s->backend, (int)m->num_threads);
    ggml_backend_cpu_set_threadpool(s->backend, m->threads);
    /* A failed attend stops the graph at its next node. */
    ggml_backend_cpu_set_abort_callback(s->backend, failed, s);
    s->alloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(
        s->backend));
    if (s->alloc == NULL) {
        gg_scratch_free(s);
        return -1;
    }
    for (uint32_t l = 0; l < m->config.num_layers; l++)
        s->nodes[l] = (gg_attend_node){s, l};
    s->lend = m->lend;
    return 0;
}

void gg_scratch_free(gg_scratch *s)
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

/* ------------------------------------------------------------ the pass */

/* The logit rows a pass computes for num_logits sample rows. ggml's
 * products of a Q8_0, Q4_0, Q5_0 or IQ4_NL matrix on x86 (llamafile's
 * tinyBLAS) take the rows in tiles of 4 and then go over the whole matrix
 * once more for the 1 to 3 rows left: for an output matrix past the cache
 * (Gemma 3's 262,144 x 640 in Q8_0, 178 MB) that second pass costs more
 * than 4 rows do, and 13 rows take longer than 16 (pkv-bench serve's step
 * costs). So more than 4 rows that ggml computes are computed in a
 * multiple of 4, the last repeated, within the scratch; the rows the
 * host computes itself (logits.h) are not padded. */
static uint32_t logit_rows_computed(const gg_model *m, const gg_scratch *s,
                                    uint32_t num_logits)
{
#if defined(__x86_64__) || defined(__i386__)
    enum ggml_type t = m->output->type;
    uint32_t padded = (num_logits + 3) / 4 * 4;
    if (num_logits > 4 && padded <= s->max_rows &&
        !gg_logits_own(m->output, num_logits) &&
        (t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 ||
         t == GGML_TYPE_Q5_0 || t == GGML_TYPE_IQ4_NL))
        return padded;
#else
    (void)m;
    (void)s;
#endif
    return num_logits;
}

int gg_forward(gg_model *m, gg_scratch *s, uint32_t rows,
               const int32_t *tokens, const uint32_t *positions,
               gg_attend_fn attend, void *attend_user,
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
    uint32_t computed = logit_rows_computed(m, s, num_logits);
    ggml_reset(s->graph);
    gg_builder b = {s->graph, m, s};
    struct ggml_tensor *tok = ggml_new_tensor_1d(b.ctx, GGML_TYPE_I32, rows);
    struct ggml_tensor *pos = ggml_new_tensor_1d(b.ctx, GGML_TYPE_I32, rows);
    struct ggml_tensor *out =
        num_logits ? ggml_new_tensor_1d(b.ctx, GGML_TYPE_I32, computed)
                   : NULL;
    ggml_set_input(tok);
    ggml_set_input(pos);
    if (out != NULL)
        ggml_set_input(out);
    struct ggml_tensor *result = gg_graph_build(&b, arch_of(m), tok, pos,
                                                out);
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
        for (uint32_t j = 0; j < computed; j++)
            o[j] = (int32_t)logit_rows[j < num_logits ? j : num_logits - 1];
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
