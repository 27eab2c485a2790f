/* SPDX-License-Identifier: MIT */
/* A llama-architecture model: weights and the forward pass (model.h). */
#include "model.h"
#include "sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        w[i] = (float)(host_normal(rng) * stddev);
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

/*
 * The batched matmul: out[r][o] = x[r] . w[o] for rows x of width in.
 *
 * Weight-stationary: the outer loop walks W's output rows, MM_O at a time,
 * and the inner loop runs every batch row of a block against them, so a
 * step of T <= MM_ROWS rows reads each weight from memory once, whatever T
 * is (as a GPU's decode does). Beyond MM_ROWS rows (prompt chunks) the
 * weights are read once per block of MM_ROWS rows, which keep the x panel
 * in L2.
 *
 * Every product x[r] . w[o] is summed the same way whatever the tile it
 * falls in: MM_LANES partial sums over i, reduced in a fixed tree, then the
 * tail. A row's result therefore never depends on the batch (the test
 * compares pkv against dense attention token for token). The micro-tile is
 * MM_R x MM_O products, whose MM_LANES-wide accumulators fit the vector
 * registers; edge tiles repeat their last row or weight row and drop the
 * extra results.
 */
#define MM_LANES 16
#define MM_R 4
#define MM_O 4
#define MM_ROWS 64

/* On x86-64 GCC builds the kernel is compiled for AVX-512, AVX2 and the
 * baseline, picked at load time: the same C, wider vectors. ISO C mode
 * does not contract a * b + c into an FMA, so every variant rounds alike. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__linux__) && !defined(PKV_NO_TARGET_CLONES)
#define MM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MM_CLONES
#endif
/* Unrolled, the tile's accumulators live in registers. */
#if defined(__GNUC__) && !defined(__clang__)
#define MM_UNROLL _Pragma("GCC unroll 16")
#else
#define MM_UNROLL
#endif

_Static_assert(MM_LANES == 16, "reduce_lanes sums 16 lanes");

static float reduce_lanes(const float *a)
{
    return (((a[0] + a[8]) + (a[4] + a[12])) +
            ((a[2] + a[10]) + (a[6] + a[14]))) +
           (((a[1] + a[9]) + (a[5] + a[13])) +
            ((a[3] + a[11]) + (a[7] + a[15])));
}

/* MM_LANES floats in one value: a vector register on GCC and Clang, an
 * array elsewhere. Lane j of an accumulator sums products i = j mod
 * MM_LANES in either case, so both round alike. */
#if defined(__GNUC__)
typedef float mm_vec __attribute__((vector_size(MM_LANES * sizeof(float))));
#define MM_MAC(acc, a, b) ((acc) += (a) * (b))
#define MM_PREFETCH(p) __builtin_prefetch(p)
#else
#define MM_PREFETCH(p) ((void)(p))
typedef struct mm_vec {
    float v[MM_LANES];
} mm_vec;
#define MM_MAC(acc, a, b)                                                   \
    do {                                                                    \
        for (uint32_t j_ = 0; j_ < MM_LANES; j_++)                          \
            (acc).v[j_] += (a).v[j_] * (b).v[j_];                           \
    } while (0)
#endif

/* out[r * ostride + o] for MM_R rows x and MM_O weight rows w. With pf,
 * the MM_O * in floats from pf on (the next weight rows) are prefetched:
 * the rows of w jump from page to page, where hardware prefetchers stop. */
MM_CLONES
static void mm_tile(const float *const *x, const float *const *w, uint32_t in,
                    float *out, size_t ostride, uint32_t nr, uint32_t no,
                    const float *pf)
{
    mm_vec acc[MM_R][MM_O];
    memset(acc, 0, sizeof acc);
    uint32_t i = 0;
    for (; i + MM_LANES <= in; i += MM_LANES) {
        if (pf != NULL)
            MM_UNROLL for (uint32_t o = 0; o < MM_O; o++)
                MM_PREFETCH(pf + (size_t)i * MM_O + o * MM_LANES);
        mm_vec wv[MM_O];
        MM_UNROLL for (uint32_t o = 0; o < MM_O; o++)
            memcpy(&wv[o], w[o] + i, sizeof wv[o]);
        MM_UNROLL for (uint32_t r = 0; r < MM_R; r++) {
            mm_vec xv;
            memcpy(&xv, x[r] + i, sizeof xv);
            MM_UNROLL for (uint32_t o = 0; o < MM_O; o++)
                MM_MAC(acc[r][o], xv, wv[o]);
        }
    }
    for (uint32_t r = 0; r < nr; r++)
        for (uint32_t o = 0; o < no; o++) {
            float lanes[MM_LANES];
            memcpy(lanes, &acc[r][o], sizeof lanes);
            float sum = reduce_lanes(lanes);
            for (uint32_t t = i; t < in; t++)
                sum += x[r][t] * w[o][t];
            out[(size_t)r * ostride + o] = sum;
        }
}

static void matmul(float *out, const float *x, const float *w, uint32_t rows,
                   uint32_t in, uint32_t outs)
{
    for (uint32_t r0 = 0; r0 < rows; r0 += MM_ROWS) {
        uint32_t r1 = rows - r0 < MM_ROWS ? rows : r0 + MM_ROWS;
        for (uint32_t o = 0; o < outs; o += MM_O) {
            uint32_t no = outs - o < MM_O ? outs - o : MM_O;
            const float *wp[MM_O];
            for (uint32_t k = 0; k < MM_O; k++)
                wp[k] = w + (size_t)(o + (k < no ? k : no - 1)) * in;
            const float *pf =
                outs - o > MM_O ? w + (size_t)(o + MM_O) * in : NULL;
            for (uint32_t r = r0; r < r1; r += MM_R) {
                uint32_t nr = r1 - r < MM_R ? r1 - r : MM_R;
                const float *xp[MM_R];
                for (uint32_t k = 0; k < MM_R; k++)
                    xp[k] = x + (size_t)(r + (k < nr ? k : nr - 1)) * in;
                mm_tile(xp, wp, in, out + (size_t)r * outs + o, outs, nr, no,
                        r == r0 ? pf : NULL);
            }
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
    /* The classifier over every sampled row at once, max_rows at a time. */
    for (uint32_t j0 = 0; j0 < num_logits; j0 += s->max_rows) {
        uint32_t n = num_logits - j0 < s->max_rows ? num_logits - j0
                                                   : s->max_rows;
        for (uint32_t j = 0; j < n; j++)
            rmsnorm(s->xb + (size_t)j * d,
                    s->x + (size_t)logit_rows[j0 + j] * d, w->rms_final, d);
        matmul(logits + (size_t)j0 * c->vocab_size, s->xb, w->classifier, n,
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
