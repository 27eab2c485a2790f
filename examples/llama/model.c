/* SPDX-License-Identifier: MIT */
/* A llama-architecture model: weights and the forward pass (model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t llama_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double llama_uniform(uint64_t *state)
{
    return ((double)(llama_rand(state) >> 11) + 0.5) / 9007199254740992.0;
}

double llama_normal(uint64_t *state)
{
    double u1 = llama_uniform(state), u2 = llama_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint32_t llama_head_dim(const llama_config *c)
{
    return c->dim / c->num_heads;
}

uint32_t llama_kv_dim(const llama_config *c)
{
    return c->num_kv_heads * llama_head_dim(c);
}

llama_config llama_default_config(void)
{
    llama_config c;
    c.dim = 256;
    c.hidden_dim = 512;
    c.num_layers = 4;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.vocab_size = 512;
    c.seq_len = 1024;
    c.shared_classifier = 0;
    return c;
}

static int config_ok(const llama_config *c)
{
    return c->dim > 0 && c->hidden_dim > 0 && c->num_layers > 0 &&
           c->num_heads > 0 && c->num_kv_heads > 0 && c->vocab_size > 0 &&
           c->seq_len > 0 && c->dim % c->num_heads == 0 &&
           c->num_heads % c->num_kv_heads == 0 &&
           llama_head_dim(c) % 2 == 0 && c->dim <= 65536 &&
           c->hidden_dim <= 262144 && c->num_layers <= 1024 &&
           c->vocab_size <= (1u << 24) && c->seq_len <= (1u << 24);
}

/* Floats of every weight, in checkpoint order; rope_floats is the legacy
 * RoPE table size (0 for random weights). */
static size_t weight_floats(const llama_config *c, size_t rope_floats)
{
    size_t d = c->dim, h = c->hidden_dim, l = c->num_layers;
    size_t kv = llama_kv_dim(c), v = c->vocab_size;
    return v * d + l * d + l * d * d + 2 * l * kv * d + l * d * d + l * d +
           3 * l * h * d + d + rope_floats + (c->shared_classifier ? 0 : v * d);
}

/* Point the weights into storage, in checkpoint order. */
static void assign(llama_model *m, size_t rope_floats)
{
    const llama_config *c = &m->config;
    size_t d = c->dim, h = c->hidden_dim, l = c->num_layers;
    size_t kv = llama_kv_dim(c), v = c->vocab_size;
    float *p = m->storage;
    m->w.token_embedding = p;
    p += v * d;
    m->w.rms_att = p;
    p += l * d;
    m->w.wq = p;
    p += l * d * d;
    m->w.wk = p;
    p += l * kv * d;
    m->w.wv = p;
    p += l * kv * d;
    m->w.wo = p;
    p += l * d * d;
    m->w.rms_ffn = p;
    p += l * d;
    m->w.w1 = p;
    p += l * h * d;
    m->w.w2 = p;
    p += l * d * h;
    m->w.w3 = p;
    p += l * h * d;
    m->w.rms_final = p;
    p += d;
    p += rope_floats;
    m->w.classifier = c->shared_classifier ? m->w.token_embedding : p;
}

static int alloc_model(llama_model *m, const llama_config *c,
                       size_t rope_floats)
{
    memset(m, 0, sizeof *m);
    if (!config_ok(c))
        return -1;
    m->config = *c;
    m->num_floats = weight_floats(c, rope_floats);
    m->storage = malloc(m->num_floats * sizeof *m->storage);
    if (m->storage == NULL)
        return -1;
    assign(m, rope_floats);
    return 0;
}

static void fill_normal(float *w, size_t n, double stddev, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(llama_normal(rng) * stddev);
}

static void fill_const(float *w, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        w[i] = value;
}

int llama_model_init_random(llama_model *m, const llama_config *c,
                            uint64_t seed)
{
    if (alloc_model(m, c, 0) != 0)
        return -1;
    size_t d = c->dim, h = c->hidden_dim, l = c->num_layers;
    size_t kv = llama_kv_dim(c), v = c->vocab_size;
    uint64_t rng = seed;
    /* Logits of a normalised row against the embedding have a standard
     * deviation of 3: sampling at temperature 1 is neither uniform nor
     * greedy, and greedy picks are clear of ties. */
    fill_normal(m->w.token_embedding, v * d, 3.0 / sqrt((double)d), &rng);
    fill_const(m->w.rms_att, l * d, 1.0f);
    fill_normal(m->w.wq, l * d * d, 1.0 / sqrt((double)d), &rng);
    fill_normal(m->w.wk, l * kv * d, 1.0 / sqrt((double)d), &rng);
    fill_normal(m->w.wv, l * kv * d, 1.0 / sqrt((double)d), &rng);
    fill_normal(m->w.wo, l * d * d, 0.5 / sqrt((double)d), &rng);
    fill_const(m->w.rms_ffn, l * d, 1.0f);
    fill_normal(m->w.w1, l * h * d, 1.0 / sqrt((double)d), &rng);
    fill_normal(m->w.w2, l * d * h, 0.5 / sqrt((double)h), &rng);
    fill_normal(m->w.w3, l * h * d, 1.0 / sqrt((double)d), &rng);
    fill_const(m->w.rms_final, d, 1.0f);
    if (!c->shared_classifier)
        fill_normal(m->w.classifier, v * d, 3.0 / sqrt((double)d), &rng);
    return 0;
}

int llama_model_load(llama_model *m, const char *path, char *err,
                     size_t err_size)
{
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_size, "cannot open %s", path);
        return -1;
    }
    int32_t h[7];
    if (fread(h, sizeof h[0], 7, f) != 7) {
        snprintf(err, err_size, "%s: no 28-byte config header", path);
        fclose(f);
        return -1;
    }
    llama_config c;
    for (int i = 0; i < 7; i++) {
        if ((i == 5 ? (h[i] == 0 || h[i] == INT32_MIN) : h[i] <= 0)) {
            snprintf(err, err_size, "%s: config field %d is %d", path, i,
                     (int)h[i]);
            fclose(f);
            return -1;
        }
    }
    c.dim = (uint32_t)h[0];
    c.hidden_dim = (uint32_t)h[1];
    c.num_layers = (uint32_t)h[2];
    c.num_heads = (uint32_t)h[3];
    c.num_kv_heads = (uint32_t)h[4];
    c.shared_classifier = h[5] > 0;
    c.vocab_size = (uint32_t)(h[5] > 0 ? h[5] : -h[5]);
    c.seq_len = (uint32_t)h[6];
    if (!config_ok(&c)) {
        snprintf(err, err_size,
                 "%s: unsupported config (dim %u, heads %u, kv heads %u)",
                 path, c.dim, c.num_heads, c.num_kv_heads);
        fclose(f);
        return -1;
    }
    size_t rope = (size_t)c.seq_len * llama_head_dim(&c);
    if (alloc_model(m, &c, rope) != 0) {
        snprintf(err, err_size, "%s: out of memory for %zu floats", path,
                 weight_floats(&c, rope));
        fclose(f);
        return -1;
    }
    size_t got = fread(m->storage, sizeof *m->storage, m->num_floats, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (got != m->num_floats || extra) {
        snprintf(err, err_size,
                 "%s: %s weights: expected %zu floats for this config",
                 path, extra ? "trailing bytes after the" : "truncated",
                 m->num_floats);
        llama_model_free(m);
        return -1;
    }
    return 0;
}

void llama_model_free(llama_model *m)
{
    free(m->storage);
    memset(m, 0, sizeof *m);
}

int llama_scratch_init(llama_scratch *s, const llama_config *c,
                       uint32_t max_rows)
{
    memset(s, 0, sizeof *s);
    size_t r = max_rows ? max_rows : 1, d = c->dim, h = c->hidden_dim;
    size_t kv = llama_kv_dim(c);
    s->max_rows = (uint32_t)r;
    s->x = malloc(r * d * sizeof(float));
    s->xb = malloc(r * d * sizeof(float));
    s->q = malloc(r * d * sizeof(float));
    s->k = malloc(r * kv * sizeof(float));
    s->v = malloc(r * kv * sizeof(float));
    s->att = malloc(r * d * sizeof(float));
    s->hb = malloc(r * h * sizeof(float));
    s->hb2 = malloc(r * h * sizeof(float));
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->hb ||
        !s->hb2) {
        llama_scratch_free(s);
        return -1;
    }
    return 0;
}

void llama_scratch_free(llama_scratch *s)
{
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->hb);
    free(s->hb2);
    memset(s, 0, sizeof *s);
}

/* Eight partial sums in a fixed order: the compiler may keep them in
 * vector registers, and a row's result never depends on the batch. */
static float dot(const float *a, const float *b, uint32_t n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
                ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++)
        sum += a[i] * b[i];
    return sum;
}

/* dot() of one x against four weight rows at once: x is loaded once for
 * four products. Each result is summed exactly as dot() sums it. */
static void dot4(const float *x, const float *w0, const float *w1,
                 const float *w2, const float *w3, uint32_t n, float *out,
                 size_t stride)
{
    float a0[8] = {0}, a1[8] = {0}, a2[8] = {0}, a3[8] = {0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (uint32_t j = 0; j < 8; j++) {
            float xv = x[i + j];
            a0[j] += xv * w0[i + j];
            a1[j] += xv * w1[i + j];
            a2[j] += xv * w2[i + j];
            a3[j] += xv * w3[i + j];
        }
    }
    float *acc[4] = {a0, a1, a2, a3};
    const float *w[4] = {w0, w1, w2, w3};
    for (int k = 0; k < 4; k++) {
        const float *a = acc[k];
        float sum = ((a[0] + a[4]) + (a[1] + a[5])) +
                    ((a[2] + a[6]) + (a[3] + a[7]));
        for (uint32_t t = i; t < n; t++)
            sum += x[t] * w[k][t];
        out[(size_t)k * stride] = sum;
    }
}

/* Rows per tile of matmul: a tile of x stays in L1 while the weights
 * stream past it, once per tile. */
#define ROW_TILE 16

/* out[r][o] = x[r] . w[o] for rows x of width in. */
static void matmul(float *out, const float *x, const float *w, uint32_t rows,
                   uint32_t in, uint32_t outs)
{
    for (uint32_t r0 = 0; r0 < rows; r0 += ROW_TILE) {
        uint32_t r1 = rows - r0 < ROW_TILE ? rows : r0 + ROW_TILE;
        uint32_t o = 0;
        for (; o + 4 <= outs; o += 4) {
            const float *wo = w + (size_t)o * in;
            for (uint32_t r = r0; r < r1; r++)
                dot4(x + (size_t)r * in, wo, wo + in, wo + 2 * (size_t)in,
                     wo + 3 * (size_t)in, in, out + (size_t)r * outs + o, 1);
        }
        for (; o < outs; o++) {
            const float *wo = w + (size_t)o * in;
            for (uint32_t r = r0; r < r1; r++)
                out[(size_t)r * outs + o] = dot(x + (size_t)r * in, wo, in);
        }
    }
}

static void rmsnorm(float *out, const float *x, const float *weight,
                    uint32_t n)
{
    float ss = 0;
    for (uint32_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    ss = 1.0f / sqrtf(ss / (float)n + 1e-5f);
    for (uint32_t i = 0; i < n; i++)
        out[i] = weight[i] * (ss * x[i]);
}

/* Rotate adjacent pairs of every head of q (dim) and k (kv_dim). */
static void rope(const llama_config *c, float *q, float *k, uint32_t pos)
{
    uint32_t hs = llama_head_dim(c), kv = llama_kv_dim(c);
    for (uint32_t i = 0; i < c->dim; i += 2) {
        float freq =
            1.0f / powf(10000.0f, (float)(i % hs) / (float)hs);
        float val = (float)pos * freq, fcr = cosf(val), fci = sinf(val);
        for (int which = 0; which < (i < kv ? 2 : 1); which++) {
            float *vec = which == 0 ? q : k;
            float v0 = vec[i], v1 = vec[i + 1];
            vec[i] = v0 * fcr - v1 * fci;
            vec[i + 1] = v0 * fci + v1 * fcr;
        }
    }
}

int llama_forward(const llama_model *m, llama_scratch *s, uint32_t rows,
                  const int32_t *tokens, const uint32_t *positions,
                  llama_attend_fn attend, void *attend_user,
                  const uint32_t *logit_rows, uint32_t num_logits,
                  float *logits)
{
    const llama_config *c = &m->config;
    const llama_weights *w = &m->w;
    uint32_t d = c->dim, hd = c->hidden_dim, kv = llama_kv_dim(c);
    if (rows > s->max_rows)
        return -1;
    for (uint32_t r = 0; r < rows; r++)
        memcpy(s->x + (size_t)r * d,
               w->token_embedding + (size_t)tokens[r] * d, d * sizeof(float));
    for (uint32_t l = 0; l < c->num_layers; l++) {
        for (uint32_t r = 0; r < rows; r++)
            rmsnorm(s->xb + (size_t)r * d, s->x + (size_t)r * d,
                    w->rms_att + (size_t)l * d, d);
        matmul(s->q, s->xb, w->wq + (size_t)l * d * d, rows, d, d);
        matmul(s->k, s->xb, w->wk + (size_t)l * kv * d, rows, d, kv);
        matmul(s->v, s->xb, w->wv + (size_t)l * kv * d, rows, d, kv);
        for (uint32_t r = 0; r < rows; r++)
            rope(c, s->q + (size_t)r * d, s->k + (size_t)r * kv,
                 positions[r]);
        if (attend(attend_user, l, rows, s->q, s->k, s->v, s->att) != 0)
            return -1;
        matmul(s->xb, s->att, w->wo + (size_t)l * d * d, rows, d, d);
        for (size_t i = 0; i < (size_t)rows * d; i++)
            s->x[i] += s->xb[i];
        for (uint32_t r = 0; r < rows; r++)
            rmsnorm(s->xb + (size_t)r * d, s->x + (size_t)r * d,
                    w->rms_ffn + (size_t)l * d, d);
        matmul(s->hb, s->xb, w->w1 + (size_t)l * hd * d, rows, d, hd);
        matmul(s->hb2, s->xb, w->w3 + (size_t)l * hd * d, rows, d, hd);
        for (size_t i = 0; i < (size_t)rows * hd; i++) {
            float g = s->hb[i];
            s->hb[i] = g / (1.0f + expf(-g)) * s->hb2[i];
        }
        matmul(s->xb, s->hb, w->w2 + (size_t)l * d * hd, rows, hd, d);
        for (size_t i = 0; i < (size_t)rows * d; i++)
            s->x[i] += s->xb[i];
    }
    for (uint32_t j = 0; j < num_logits; j++) {
        rmsnorm(s->xb, s->x + (size_t)logit_rows[j] * d, w->rms_final, d);
        matmul(logits + (size_t)j * c->vocab_size, s->xb, w->classifier, 1,
               d, c->vocab_size);
    }
    return 0;
}

void llama_attend_dense_row(const llama_config *c, const float *q,
                            const float *k_cache, const float *v_cache,
                            uint32_t ctx, float *out)
{
    uint32_t hs = llama_head_dim(c), kv = llama_kv_dim(c);
    uint32_t group = c->num_heads / c->num_kv_heads;
    float scale = 1.0f / sqrtf((float)hs);
    float *scores = malloc((ctx ? ctx : 1) * sizeof *scores);
    if (scores == NULL) {
        memset(out, 0, c->dim * sizeof *out);
        return;
    }
    for (uint32_t h = 0; h < c->num_heads; h++) {
        const float *qh = q + (size_t)h * hs;
        uint32_t kvh = h / group;
        float mx = -INFINITY;
        for (uint32_t t = 0; t < ctx; t++) {
            scores[t] =
                dot(qh, k_cache + (size_t)t * kv + (size_t)kvh * hs, hs) *
                scale;
            if (scores[t] > mx)
                mx = scores[t];
        }
        float sum = 0;
        for (uint32_t t = 0; t < ctx; t++) {
            scores[t] = expf(scores[t] - mx);
            sum += scores[t];
        }
        float *oh = out + (size_t)h * hs;
        memset(oh, 0, hs * sizeof *oh);
        for (uint32_t t = 0; t < ctx; t++) {
            const float *vt = v_cache + (size_t)t * kv + (size_t)kvh * hs;
            float wgt = scores[t] / sum;
            for (uint32_t i = 0; i < hs; i++)
                oh[i] += wgt * vt[i];
        }
    }
    free(scores);
}

int32_t llama_sample(const float *logits, uint32_t vocab, float temperature,
                     uint64_t *rng)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    if (!(temperature > 0))
        return (int32_t)best;
    double sum = 0;
    for (uint32_t i = 0; i < vocab; i++)
        sum += exp((double)(logits[i] - logits[best]) / temperature);
    double target = llama_uniform(rng) * sum, acc = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        acc += exp((double)(logits[i] - logits[best]) / temperature);
        if (acc >= target)
            return (int32_t)i;
    }
    return (int32_t)best;
}
