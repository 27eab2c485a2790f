/* SPDX-License-Identifier: MIT */
/* Gemma 3: weights and the forward pass (model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0) {
        float f = ldexpf((float)mantissa, -24); /* zero or subnormal */
        return sign ? -f : f;
    }
    uint32_t bits = exponent == 31
                        ? sign | 0x7f800000u | mantissa << 13
                        : sign | (exponent + 112) << 23 | mantissa << 13;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---------------------------------------------------------------- loading */

/* A matrix to convert from the file's f16 to f32 storage. */
typedef struct convert_job {
    const uint16_t *src;
    float *dst;
} convert_job;

enum { CONVERT_CHUNK = 1 << 16 };

typedef struct convert_all {
    const convert_job *jobs;
    const uint64_t *ends; /* cumulative element counts */
    uint32_t num_jobs;
} convert_all;

static void convert_task(void *arg, uint32_t begin, uint32_t end)
{
    const convert_all *c = arg;
    uint64_t from = (uint64_t)begin * CONVERT_CHUNK;
    uint64_t to = (uint64_t)end * CONVERT_CHUNK;
    uint64_t start = 0;
    for (uint32_t j = 0; j < c->num_jobs; start = c->ends[j++]) {
        uint64_t lo = from > start ? from : start;
        uint64_t hi = to < c->ends[j] ? to : c->ends[j];
        for (uint64_t i = lo; i < hi; i++)
            c->jobs[j].dst[i - start] = f16_to_f32(c->jobs[j].src[i - start]);
    }
}

/* The matrices of the model, in storage order. */
enum { MATRICES_PER_LAYER = 7 };

typedef struct loader {
    g3_model *m;
    char *err;
    size_t err_size;
    convert_job *jobs;
    uint64_t *ends;
    uint32_t num_jobs;
} loader;

static const float *vector(loader *l, const char *name, uint64_t n)
{
    const g3_tensor *t =
        g3_file_tensor(&l->m->file, name, G3_F32, 1, &n, l->err, l->err_size);
    return t ? t->data : NULL;
}

/* Queue the conversion of an f16 matrix [rows][cols] into *dst, placed at
 * the next free element of storage. */
static int matrix(loader *l, const char *name, uint64_t rows, uint64_t cols,
                  float **dst)
{
    uint64_t shape[2] = {rows, cols};
    const g3_tensor *t = g3_file_tensor(&l->m->file, name, G3_F16, 2, shape,
                                        l->err, l->err_size);
    if (t == NULL)
        return -1;
    uint64_t start = l->num_jobs ? l->ends[l->num_jobs - 1] : 0;
    *dst = l->m->storage + start;
    l->jobs[l->num_jobs].src = t->data;
    l->jobs[l->num_jobs].dst = *dst;
    l->ends[l->num_jobs] = start + rows * cols;
    l->num_jobs++;
    return 0;
}

static int load_layer(loader *l, uint32_t i)
{
    const g3_file_config *c = &l->m->config;
    g3_layer *y = &l->m->layers[i];
    uint64_t d = c->dim, qd = (uint64_t)c->num_heads * c->key_len;
    uint64_t kd = (uint64_t)c->num_kv_heads * c->key_len;
    uint64_t vd = (uint64_t)c->num_kv_heads * c->value_len;
    uint64_t od = (uint64_t)c->num_heads * c->value_len;
    char n[64];
#define NAME(s) (snprintf(n, sizeof n, "blk.%u." s ".weight", i), n)
    if (!(y->attn_norm = vector(l, NAME("attn_norm"), d)) ||
        !(y->q_norm = vector(l, NAME("attn_q_norm"), c->key_len)) ||
        !(y->k_norm = vector(l, NAME("attn_k_norm"), c->key_len)) ||
        !(y->post_attn_norm = vector(l, NAME("post_attention_norm"), d)) ||
        !(y->ffn_norm = vector(l, NAME("ffn_norm"), d)) ||
        !(y->post_ffw_norm = vector(l, NAME("post_ffw_norm"), d)))
        return -1;
    if (matrix(l, NAME("attn_q"), qd, d, &y->wq) != 0 ||
        matrix(l, NAME("attn_k"), kd, d, &y->wk) != 0 ||
        matrix(l, NAME("attn_v"), vd, d, &y->wv) != 0 ||
        matrix(l, NAME("attn_output"), d, od, &y->wo) != 0 ||
        matrix(l, NAME("ffn_gate"), c->ffn_dim, d, &y->gate) != 0 ||
        matrix(l, NAME("ffn_up"), c->ffn_dim, d, &y->up) != 0 ||
        matrix(l, NAME("ffn_down"), d, c->ffn_dim, &y->down) != 0)
        return -1;
#undef NAME
    return 0;
}

/* Sizes the forward pass relies on: whole 8-float vectors, one key and
 * value length, whole GQA groups, even heads for RoPE. */
static int config_ok(const g3_file_config *c, char *err, size_t err_size)
{
    if (c->num_layers == 0 || c->num_layers > 1024 || c->dim == 0 ||
        c->dim % 8 || c->ffn_dim == 0 || c->ffn_dim % 8 ||
        c->num_heads == 0 || c->num_kv_heads == 0 ||
        c->num_heads % c->num_kv_heads || c->key_len != c->value_len ||
        c->key_len == 0 || c->key_len % 8 ||
        c->key_len > G3_MAX_HEAD_DIM || c->dim > 65536 ||
        c->ffn_dim > 262144 || c->num_heads * c->key_len > 65536)
        return g3_fail(err, err_size,
                    "unsupported geometry: dim %u, ffn %u, heads %u/%u, "
                    "key %u, value %u",
                    c->dim, c->ffn_dim, c->num_heads, c->num_kv_heads,
                    c->key_len, c->value_len);
    return 0;
}

int g3_model_load(g3_model *m, const char *path, uint32_t threads, char *err,
                  size_t err_size)
{
    memset(m, 0, sizeof *m);
    if (g3_file_open(&m->file, path, err, err_size) != 0)
        return -1;
    m->config = m->file.config;
    const g3_file_config *c = &m->config;
    if (config_ok(c, err, err_size) != 0 ||
        g3_pool_init(&m->pool, threads) != 0) {
        if (m->pool.num_threads == 0)
            g3_fail(err, err_size, "cannot start threads");
        g3_file_close(&m->file);
        return -1;
    }
    uint64_t d = c->dim;
    uint64_t per_layer = d * (uint64_t)(c->num_heads + 2 * c->num_kv_heads) *
                             c->key_len +
                         d * c->num_heads * c->value_len + 3 * d * c->ffn_dim;
    uint64_t total = c->vocab_size * d + c->num_layers * per_layer;
    uint32_t jobs = 1 + MATRICES_PER_LAYER * c->num_layers;
    loader l = {m, err, err_size, calloc(jobs, sizeof *l.jobs),
                calloc(jobs, sizeof *l.ends), 0};
    m->layers = calloc(c->num_layers, sizeof *m->layers);
    m->layer_windows = calloc(c->num_layers, sizeof *m->layer_windows);
    m->rope_base = calloc(c->num_layers, sizeof *m->rope_base);
    m->storage = malloc(total * sizeof *m->storage);
    m->num_floats = (size_t)total;
    int rc = -1;
    if (!l.jobs || !l.ends || !m->layers || !m->layer_windows ||
        !m->rope_base || !m->storage) {
        g3_fail(err, err_size, "out of memory (%llu MB of weights)",
             (unsigned long long)(total * 4 >> 20));
        goto out;
    }
    if (!(m->output_norm = vector(&l, "output_norm.weight", d)) ||
        matrix(&l, "token_embd.weight", c->vocab_size, d, &m->embedding))
        goto out;
    for (uint32_t i = 0; i < c->num_layers; i++) {
        if (load_layer(&l, i) != 0)
            goto out;
        int full = i % G3_FULL_ATTENTION_EVERY == G3_FULL_ATTENTION_EVERY - 1;
        m->layer_windows[i] = full ? 0 : c->sliding_window;
        m->rope_base[i] = full ? c->rope_base : G3_WINDOWED_ROPE_BASE;
    }
    convert_all all = {l.jobs, l.ends, l.num_jobs};
    uint64_t chunks = (total + CONVERT_CHUNK - 1) / CONVERT_CHUNK;
    g3_pool_run(&m->pool, convert_task, &all, (uint32_t)chunks, 16);
    rc = 0;
out:
    free(l.jobs);
    free(l.ends);
    if (rc != 0)
        g3_model_free(m);
    return rc;
}

void g3_model_free(g3_model *m)
{
    if (m->pool.num_threads)
        g3_pool_free(&m->pool);
    free(m->layers);
    free(m->layer_windows);
    free(m->rope_base);
    free(m->storage);
    g3_file_close(&m->file);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------ matrix products */

/* Y[r][o] = sum_i W[o][i] X[r][i] for rows r, split over output rows.
 * Each task's W rows stay in cache while every X row passes them: the
 * batch's rows share each weight read. */
typedef struct matmul {
    const float *w, *x;
    float *y;
    uint32_t in, out, rows;
} matmul;

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
/* AVX2 and FMA where the CPU has them, baseline SSE2 elsewhere. */
#define G3_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define G3_CLONES
#endif

typedef float v8 __attribute__((vector_size(32)));

enum { MATMUL_ROW_TILE = 32, MATMUL_OUT_CHUNK = 64 };

/* Four outputs of W (rows o..o+3) for X rows r and r + 1 (r + 1 only when
 * two is set). */
G3_CLONES static void dot_4x2(const matmul *a, uint32_t o, uint32_t r,
                              int two)
{
    const float *w0 = a->w + (size_t)o * a->in, *x0 = a->x + (size_t)r * a->in;
    const float *x1 = two ? x0 + a->in : x0;
    v8 acc[4][2];
    memset(acc, 0, sizeof acc);
    for (uint32_t i = 0; i < a->in; i += 8) {
        v8 xa, xb;
        memcpy(&xa, x0 + i, sizeof xa);
        memcpy(&xb, x1 + i, sizeof xb);
        for (int k = 0; k < 4; k++) {
            v8 wk;
            memcpy(&wk, w0 + (size_t)k * a->in + i, sizeof wk);
            acc[k][0] += wk * xa;
            acc[k][1] += wk * xb;
        }
    }
    for (uint32_t k = 0; k < 4; k++) {
        for (uint32_t j = 0; j < (two ? 2u : 1u); j++) {
            float sum = 0;
            for (int lane = 0; lane < 8; lane++)
                sum += acc[k][j][lane];
            a->y[(size_t)(r + j) * a->out + o + k] = sum;
        }
    }
}

static void matmul_task(void *arg, uint32_t begin, uint32_t end)
{
    const matmul *a = arg;
    uint32_t o_begin = begin * MATMUL_OUT_CHUNK;
    uint32_t o_end = end * MATMUL_OUT_CHUNK;
    if (o_end > a->out)
        o_end = a->out;
    for (uint32_t r0 = 0; r0 < a->rows; r0 += MATMUL_ROW_TILE) {
        uint32_t r1 = a->rows - r0 < MATMUL_ROW_TILE ? a->rows
                                                     : r0 + MATMUL_ROW_TILE;
        for (uint32_t o = o_begin; o < o_end; o += 4)
            for (uint32_t r = r0; r < r1; r += 2)
                dot_4x2(a, o, r, r + 1 < r1);
    }
}

/* out is a multiple of 4 and in of 8 (config_ok). */
static void matmul_run(g3_model *m, const float *w, const float *x, float *y,
                       uint32_t in, uint32_t out, uint32_t rows)
{
    matmul a = {w, x, y, in, out, rows};
    uint32_t chunks = (out + MATMUL_OUT_CHUNK - 1) / MATMUL_OUT_CHUNK;
    g3_pool_run(&m->pool, matmul_task, &a, chunks, 1);
}

/* ---------------------------------------------------------- the layers */

/* out = x / sqrt(mean(x^2) + eps) * w, over n values. */
static void rms_norm(float *out, const float *x, const float *w, uint32_t n,
                     float eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (uint32_t i = 0; i < n; i++)
        out[i] = x[i] * inv * w[i];
}

/* The angles of a position: cos and sin of pos * base^(-2i / n) for the
 * n / 2 pairs, computed once per row and layer for all its heads. */
static void rope_angles(float *cs, float *sn, uint32_t n, uint32_t pos,
                        float base)
{
    for (uint32_t i = 0; i < n / 2; i++) {
        double theta = pos * pow(base, -2.0 * i / n);
        cs[i] = (float)cos(theta);
        sn[i] = (float)sin(theta);
    }
}

/* NEOX RoPE of one head: channel i pairs with i + n / 2. */
static void rope(float *h, uint32_t n, const float *cs, const float *sn)
{
    uint32_t half = n / 2;
    for (uint32_t i = 0; i < half; i++) {
        float a = h[i], b = h[i + half];
        h[i] = a * cs[i] - b * sn[i];
        h[i + half] = a * sn[i] + b * cs[i];
    }
}

static float gelu_tanh(float x)
{
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

int g3_scratch_init(g3_scratch *s, const g3_model *m, uint32_t max_rows)
{
    const g3_file_config *c = &m->config;
    size_t r = max_rows, qd = (size_t)c->num_heads * c->key_len;
    size_t kd = (size_t)c->num_kv_heads * c->key_len;
    size_t wide = qd > c->dim ? qd : c->dim;
    memset(s, 0, sizeof *s);
    s->max_rows = max_rows;
    s->x = malloc(r * c->dim * sizeof(float));
    s->xb = malloc(r * wide * sizeof(float));
    s->q = malloc(r * qd * sizeof(float));
    s->k = malloc(r * kd * sizeof(float));
    s->v = malloc(r * kd * sizeof(float));
    s->att = malloc(r * qd * sizeof(float));
    s->gate = malloc(r * c->ffn_dim * sizeof(float));
    s->up = malloc(r * c->ffn_dim * sizeof(float));
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->gate ||
        !s->up) {
        g3_scratch_free(s);
        return -1;
    }
    return 0;
}

void g3_scratch_free(g3_scratch *s)
{
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->gate);
    free(s->up);
    memset(s, 0, sizeof *s);
}

/* The residual add of a half layer: x += rms_norm(xb) * norm (Gemma's
 * post-norm, gemma3.cpp:123-195). */
static void add_normed(const g3_model *m, g3_scratch *s, uint32_t rows,
                       const float *norm)
{
    uint32_t d = m->config.dim;
    for (uint32_t r = 0; r < rows; r++) {
        float *o = s->xb + (size_t)r * d, *x = s->x + (size_t)r * d;
        rms_norm(o, o, norm, d, m->config.rms_eps);
        for (uint32_t i = 0; i < d; i++)
            x[i] += o[i];
    }
}

/* Attention half of layer l: x += post_norm(o(attend(rope(norm(q, k))))). */
static int attention(g3_model *m, g3_scratch *s, uint32_t l, uint32_t rows,
                     const uint32_t *positions, g3_attend_fn attend,
                     void *user)
{
    const g3_file_config *c = &m->config;
    const g3_layer *y = &m->layers[l];
    uint32_t d = c->dim, hd = c->key_len;
    uint32_t qd = c->num_heads * hd, kd = c->num_kv_heads * hd;
    for (uint32_t r = 0; r < rows; r++)
        rms_norm(s->xb + (size_t)r * d, s->x + (size_t)r * d, y->attn_norm,
                 d, c->rms_eps);
    matmul_run(m, y->wq, s->xb, s->q, d, qd, rows);
    matmul_run(m, y->wk, s->xb, s->k, d, kd, rows);
    matmul_run(m, y->wv, s->xb, s->v, d, kd, rows);
    float cs[G3_MAX_HEAD_DIM / 2], sn[G3_MAX_HEAD_DIM / 2];
    for (uint32_t r = 0; r < rows; r++) {
        rope_angles(cs, sn, hd, positions[r], m->rope_base[l]);
        for (uint32_t h = 0; h < c->num_heads; h++) {
            float *qh = s->q + (size_t)r * qd + (size_t)h * hd;
            rms_norm(qh, qh, y->q_norm, hd, c->rms_eps);
            rope(qh, hd, cs, sn);
        }
        for (uint32_t h = 0; h < c->num_kv_heads; h++) {
            float *kh = s->k + (size_t)r * kd + (size_t)h * hd;
            rms_norm(kh, kh, y->k_norm, hd, c->rms_eps);
            rope(kh, hd, cs, sn);
        }
    }
    if (attend(user, l, rows, s->q, s->k, s->v, s->att) != 0)
        return -1;
    matmul_run(m, y->wo, s->att, s->xb, qd, d, rows);
    add_normed(m, s, rows, y->post_attn_norm);
    return 0;
}

/* Feed-forward half of layer l: x += post_norm(down(gelu(gate) * up)). */
static void feed_forward(g3_model *m, g3_scratch *s, uint32_t l,
                         uint32_t rows)
{
    const g3_file_config *c = &m->config;
    const g3_layer *y = &m->layers[l];
    uint32_t d = c->dim, f = c->ffn_dim;
    for (uint32_t r = 0; r < rows; r++)
        rms_norm(s->xb + (size_t)r * d, s->x + (size_t)r * d, y->ffn_norm, d,
                 c->rms_eps);
    matmul_run(m, y->gate, s->xb, s->gate, d, f, rows);
    matmul_run(m, y->up, s->xb, s->up, d, f, rows);
    for (size_t i = 0; i < (size_t)rows * f; i++)
        s->gate[i] = gelu_tanh(s->gate[i]) * s->up[i];
    matmul_run(m, y->down, s->gate, s->xb, f, d, rows);
    add_normed(m, s, rows, y->post_ffw_norm);
}

int g3_forward(g3_model *m, g3_scratch *s, uint32_t rows,
               const int32_t *tokens, const uint32_t *positions,
               g3_attend_fn attend, void *attend_user,
               const uint32_t *logit_rows, uint32_t num_logits,
               float *logits)
{
    const g3_file_config *c = &m->config;
    uint32_t d = c->dim;
    if (rows > s->max_rows || num_logits > s->max_rows)
        return -1;
    float scale = sqrtf((float)d);
    for (uint32_t r = 0; r < rows; r++) {
        if (tokens[r] < 0 || (uint32_t)tokens[r] >= c->vocab_size)
            return -1;
        const float *e = m->embedding + (size_t)tokens[r] * d;
        for (uint32_t i = 0; i < d; i++)
            s->x[(size_t)r * d + i] = e[i] * scale;
    }
    for (uint32_t l = 0; l < c->num_layers; l++) {
        if (attention(m, s, l, rows, positions, attend, attend_user) != 0)
            return -1;
        feed_forward(m, s, l, rows);
    }
    for (uint32_t j = 0; j < num_logits; j++) {
        if (logit_rows[j] >= rows)
            return -1;
        rms_norm(s->xb + (size_t)j * d, s->x + (size_t)logit_rows[j] * d,
                 m->output_norm, d, c->rms_eps);
    }
    matmul_run(m, m->embedding, s->xb, logits, d, c->vocab_size, num_logits);
    return 0;
}
