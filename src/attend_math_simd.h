/* SPDX-License-Identifier: MIT */
/*
 * The body of the SIMD versions of attend_math.h, written once over a
 * vector of LANES floats (attend_math_avx2.c: 8, attend_math_avx512.c:
 * 16). The including file defines LANES, ROWS(nq) (the K rows a score
 * step takes at once for nq queries, at most 4), VERSION (the table's
 * name) and VERSION_NAME, RUNS (whether the processor runs it), the type
 * vf and these operations, then includes this file once:
 *
 *   v_zero, v_set1, v_load (unaligned), v_store, v_fma (a * b + c),
 *   v_mul, v_add, v_sub, v_max;
 *   v_f16(p): LANES f16 at p; v_store_f16(p, x): x as LANES f16 at p,
 *   rounded to nearest even; v_any_nan(x): whether a lane is a NaN;
 *   v_u8(p): LANES codes; v_u4(p): LANES
 *   codes from LANES / 2 bytes (channel 2i in the low nibble of byte i);
 *   v_exp(x): e^x for x <= 0, exactly 0 below -87 (and for -inf), NaN
 *   for NaN;
 *   v_range(x, j, a, z): x in the lanes l with a <= j + l < z, -inf in
 *   the others;
 *   v_sum(x): the sum of the lanes; v_sum4(a, b, c, d, out): the four
 *   sums, each added in the order v_sum adds it; v_top(x): the largest
 *   lane.
 *
 * Every function here is specialised by the compiler for a constant
 * format and query count (FORCE_INLINE callees, switch dispatch), so
 * the inner loops hold their accumulators in registers.
 */
#ifndef LANES
#error "define LANES and the vector operations before including this file"
#endif

#include "half.h"
#include "kv_layout.h"
#include "pkv/pkv.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define FORCE_INLINE static inline __attribute__((always_inline))

/* How a vector of a part's row is read. */
enum { X_F32, X_F16, X_U8, X_U4 };

/* What the codes of a quantized part stand for in a loop. */
enum {
    PLAIN,   /* the values themselves (f32, f16), or codes whose
                parameters are folded outside the loop */
    GROUPED, /* U4 groups narrower than the row: lo + code * scale formed
                in registers from the row's group parameters */
};

/* Rows of a part whose per-token parameters a call converts at a time. */
#define GROUP_ROWS 16u

/* How rows r of format f are read, and from where. */
FORCE_INLINE int x_kind(const pkv__rows_format *f, const pkv__rows *r)
{
    return r->values != NULL || f->dtype == PKV_KV_DTYPE_F32 ? X_F32
           : f->dtype == PKV_KV_DTYPE_F16 ? X_F16
           : f->dtype == PKV_KV_DTYPE_U8  ? X_U8
                                          : X_U4;
}

FORCE_INLINE const uint8_t *rows_data(const pkv__rows *r)
{
    return r->values != NULL ? (const uint8_t *)(const void *)r->values
                             : r->data;
}

/* Channels [c, c + LANES) of row j. */
FORCE_INLINE vf load_x(int kind, const uint8_t *data, uint32_t j, uint32_t c,
                       uint32_t d)
{
    size_t at = (size_t)j * d + c;
    switch (kind) {
    case X_F32:
        return v_load((const float *)(const void *)data + at);
    case X_F16:
        return v_f16(data + 2 * at);
    case X_U8:
        return v_u8(data + at);
    default:
        return v_u4(data + at / 2);
    }
}

/* n parameters (f16) from index first of an array, as f32: per-channel
 * ones (n = head_dim, a multiple of LANES) in vectors. */
static void params_f32(const uint8_t *at, uint32_t first, uint32_t n,
                       float *out)
{
    if (n % LANES == 0) {
        for (uint32_t i = 0; i < n; i += LANES)
            v_store(out + i, v_f16(at + 2u * (first + i)));
        return;
    }
    uint16_t h[GROUP_ROWS * PKV_LAYOUT_MAX_HEAD_DIM / 8];
    memcpy(h, at + 2u * first, 2u * n);
    pkv__f16_to_f32_n(h, out, n);
}

/* Group parameters of rows [j, j + rows) of a GROUPED part: lo and scale
 * of row j + t's group g at [t * groups + g]. */
typedef struct group_params {
    float lo[GROUP_ROWS * PKV_LAYOUT_MAX_HEAD_DIM / 8];
    float sc[GROUP_ROWS * PKV_LAYOUT_MAX_HEAD_DIM / 8];
} group_params;

static void group_params_load(const pkv__rows *r, uint32_t groups,
                              uint32_t j, uint32_t rows, group_params *gp)
{
    params_f32(r->lo, j * groups, rows * groups, gp->lo);
    params_f32(r->scale, j * groups, rows * groups, gp->sc);
}

/* Channels [c, c + LANES) of row j as a value: lo + code * scale for a
 * GROUPED part (row t of gp's rows), the loaded vector otherwise. */
FORCE_INLINE vf value_x(int kind, int mode, const uint8_t *data, uint32_t j,
                        uint32_t c, uint32_t d, const group_params *gp,
                        uint32_t t, uint32_t width)
{
    vf x = load_x(kind, data, j, c, d);
    if (mode == GROUPED) {
        uint32_t at = t * (d / width) + c / width;
        x = v_fma(x, v_set1(gp->sc[at]), v_set1(gp->lo[at]));
    }
    return x;
}

/* ---------------------------------------------------------------- scores */

/* s[i * stride + j + t] = q[i] . row (j + t), t < R, for i < NQ. */
FORCE_INLINE void dot_rows(int kind, int mode, uint32_t NQ, uint32_t R,
                           const uint8_t *data, uint32_t j, uint32_t d,
                           const group_params *gp, uint32_t gt,
                           uint32_t width, const float *const *q, float *s,
                           uint32_t stride)
{
    vf acc[PKV__QUAD][4];
    for (uint32_t i = 0; i < NQ; i++)
        for (uint32_t t = 0; t < R; t++)
            acc[i][t] = v_zero();
    for (uint32_t c = 0; c < d; c += LANES) {
        vf x[4];
        for (uint32_t t = 0; t < R; t++)
            x[t] = value_x(kind, mode, data, j + t, c, d, gp, gt + t, width);
        for (uint32_t i = 0; i < NQ; i++) {
            vf y = v_load(q[i] + c);
            for (uint32_t t = 0; t < R; t++)
                acc[i][t] = v_fma(y, x[t], acc[i][t]);
        }
    }
    /* Four sums at a time, in (i, t) order; the rest one by one: each
     * added as v_sum adds it. */
    uint32_t k = 0;
    for (; k + 4 <= NQ * R; k += 4) {
        float out[4];
        v_sum4(acc[k / R][k % R], acc[(k + 1) / R][(k + 1) % R],
               acc[(k + 2) / R][(k + 2) % R], acc[(k + 3) / R][(k + 3) % R],
               out);
        for (uint32_t x = 0; x < 4; x++)
            s[(k + x) / R * stride + j + (k + x) % R] = out[x];
    }
    for (; k < NQ * R; k++)
        s[k / R * stride + j + k % R] = v_sum(acc[k / R][k % R]);
}

/* s[i * stride + j] = q[i] . row j, j in [j0, j0 + n), for i < NQ. */
FORCE_INLINE void dots(int kind, int mode, uint32_t NQ,
                       const pkv__rows_format *f, const pkv__rows *k,
                       uint32_t j0, uint32_t n, uint32_t d,
                       const float *const *q, float *s, uint32_t stride)
{
    const uint32_t R = ROWS(NQ);
    group_params gp;
    uint32_t groups = mode == GROUPED ? d / f->width : 0;
    for (uint32_t b = 0; b < n; b += GROUP_ROWS) {
        uint32_t end = n - b < GROUP_ROWS ? n : b + GROUP_ROWS;
        if (mode == GROUPED)
            group_params_load(k, groups, j0 + b, end - b, &gp);
        uint32_t t = b;
        for (; t + R <= end; t += R)
            dot_rows(kind, mode, NQ, R, rows_data(k), j0 + t, d, &gp, t - b,
                     f->width, q, s, stride);
        for (; t < end; t++)
            dot_rows(kind, mode, NQ, 1, rows_data(k), j0 + t, d, &gp, t - b,
                     f->width, q, s, stride);
    }
}

FORCE_INLINE void dots_nq(int kind, int mode, const pkv__rows_format *f,
                          const pkv__rows *k, uint32_t j0, uint32_t n,
                          uint32_t d, const float *const *q, uint32_t nq,
                          float *s, uint32_t stride)
{
    switch (nq) {
    case 1:
        dots(kind, mode, 1, f, k, j0, n, d, q, s, stride);
        break;
    case 2:
        dots(kind, mode, 2, f, k, j0, n, d, q, s, stride);
        break;
    case 3:
        dots(kind, mode, 3, f, k, j0, n, d, q, s, stride);
        break;
    default:
        dots(kind, mode, 4, f, k, j0, n, d, q, s, stride);
        break;
    }
}

static void dots_any(int kind, int mode, const pkv__rows_format *f,
                     const pkv__rows *k, uint32_t j0, uint32_t n, uint32_t d,
                     const float *const *q, uint32_t nq, float *s,
                     uint32_t stride)
{
    switch (kind * 2 + mode) {
    case X_F32 * 2 + PLAIN:
        dots_nq(X_F32, PLAIN, f, k, j0, n, d, q, nq, s, stride);
        break;
    case X_F16 * 2 + PLAIN:
        dots_nq(X_F16, PLAIN, f, k, j0, n, d, q, nq, s, stride);
        break;
    case X_U8 * 2 + PLAIN:
        dots_nq(X_U8, PLAIN, f, k, j0, n, d, q, nq, s, stride);
        break;
    case X_U4 * 2 + PLAIN:
        dots_nq(X_U4, PLAIN, f, k, j0, n, d, q, nq, s, stride);
        break;
    case X_F32 * 2 + GROUPED:
        dots_nq(X_F32, GROUPED, f, k, j0, n, d, q, nq, s, stride);
        break;
    default:
        dots_nq(X_U4, GROUPED, f, k, j0, n, d, q, nq, s, stride);
        break;
    }
}

/* A per-channel part's parameters folded into NQ queries, in one pass
 * over the channels: qs[i] = q[i] * scale, qlo[i] = q[i] . lo. */
FORCE_INLINE void fold_nq(uint32_t NQ, const pkv__rows *k, uint32_t d,
                          const float *const *q,
                          float qs[][PKV_LAYOUT_MAX_HEAD_DIM], float *qlo)
{
    vf t[PKV__QUAD];
    for (uint32_t i = 0; i < NQ; i++)
        t[i] = v_zero();
    for (uint32_t c = 0; c < d; c += LANES) {
        vf lo = v_f16(k->lo + 2u * c), sc = v_f16(k->scale + 2u * c);
        for (uint32_t i = 0; i < NQ; i++) {
            vf y = v_load(q[i] + c);
            v_store(qs[i] + c, v_mul(y, sc));
            t[i] = v_fma(y, lo, t[i]);
        }
    }
    for (uint32_t i = 0; i < NQ; i++)
        qlo[i] = v_sum(t[i]);
}

static void fold_channels(const pkv__rows *k, uint32_t d,
                          const float *const *q, uint32_t nq,
                          float qs[][PKV_LAYOUT_MAX_HEAD_DIM], float *qlo)
{
    switch (nq) {
    case 1:
        fold_nq(1, k, d, q, qs, qlo);
        break;
    case 2:
        fold_nq(2, k, d, q, qs, qlo);
        break;
    case 3:
        fold_nq(3, k, d, q, qs, qlo);
        break;
    default:
        fold_nq(4, k, d, q, qs, qlo);
        break;
    }
}

/* The sum of a in vectors, summed as v_sum sums. */
static float vtotal(const float *a, uint32_t d)
{
    vf acc = v_zero();
    for (uint32_t c = 0; c < d; c += LANES)
        acc = v_add(acc, v_load(a + c));
    return v_sum(acc);
}

static void scores(const pkv__rows_format *f, const pkv__rows *k, uint32_t j0,
                   uint32_t n, uint32_t d, const float *const *q, uint32_t nq,
                   float *s, uint32_t stride)
{
    int kind = x_kind(f, k);
    if (f->dtype == PKV_KV_DTYPE_F32 || f->dtype == PKV_KV_DTYPE_F16) {
        dots_any(kind, PLAIN, f, k, j0, n, d, q, nq, s, stride);
        return;
    }
    if (f->group == PKV_QUANT_GROUP_PER_CHANNEL) {
        /* s = q.lo + (q * scale).code */
        float qs[PKV__QUAD][PKV_LAYOUT_MAX_HEAD_DIM], qlo[PKV__QUAD];
        const float *qp[PKV__QUAD] = {qs[0], qs[1], qs[2], qs[3]};
        fold_channels(k, d, q, nq, qs, qlo);
        dots_any(kind, PLAIN, f, k, j0, n, d, qp, nq, s, stride);
        for (uint32_t i = 0; i < nq; i++) {
            float *row = s + i * stride;
            for (uint32_t j = j0; j < j0 + n; j++)
                row[j] = qlo[i] + row[j];
        }
        return;
    }
    if (f->width != d) {
        dots_any(kind, GROUPED, f, k, j0, n, d, q, nq, s, stride);
        return;
    }
    /* Per-token over the whole row: s = lo * sum(q) + scale * (q.code) */
    dots_any(kind, PLAIN, f, k, j0, n, d, q, nq, s, stride);
    float lo[PKV_LAYOUT_MAX_BLOCK_SIZE], sc[PKV_LAYOUT_MAX_BLOCK_SIZE];
    params_f32(k->lo, j0, n, lo);
    params_f32(k->scale, j0, n, sc);
    for (uint32_t i = 0; i < nq; i++) {
        float qsum = vtotal(q[i], d);
        float *row = s + i * stride + j0;
        for (uint32_t j = 0; j < n; j++)
            row[j] = lo[j] * qsum + sc[j] * row[j];
    }
}

/* ---------------------------------------------------------------- weigh */

static void weigh(float *s, uint32_t stride, uint32_t nq, uint32_t n,
                  const uint32_t *a, const uint32_t *z, float scale,
                  pkv__softmax *const *st, float *keep)
{
    vf vscale = v_set1(scale);
    for (uint32_t i = 0; i < nq; i++) {
        float *p = s + i * stride;
        pkv__softmax *t = st[i];
        keep[i] = 1.0f;
        if (a[i] >= z[i]) {
            for (uint32_t j = 0; j < n; j++)
                p[j] = 0.0f;
            continue;
        }
        /* Lanes outside [a, z), and past n, are -inf: weight 0. */
        vf top = v_set1(-INFINITY);
        for (uint32_t j = 0; j < n; j += LANES) {
            vf x = v_range(v_mul(v_load(p + j), vscale), j, a[i], z[i]);
            v_store(p + j, x);
            top = v_max(top, x);
        }
        float mb = v_top(top);
        if (mb > t->m) {
            /* The first block finds m = -inf and an empty accumulator:
             * keep 0 (-inf - -inf would be NaN). */
            keep[i] = t->m == -INFINITY ? 0.0f : expf(t->m - mb);
            t->l *= keep[i];
            t->m = mb;
        }
        vf m = v_set1(t->m), l = v_zero();
        for (uint32_t j = 0; j < n; j += LANES) {
            vf w = v_exp(v_sub(v_load(p + j), m));
            v_store(p + j, w);
            l = v_add(l, w);
        }
        t->l += v_sum(l);
    }
}

/* ------------------------------------------------------------ accumulate */

/* How a part's values reach the accumulators. */
enum {
    V_PLAIN,   /* f32, f16: acc += p * x */
    V_ROW,     /* per-token over the row: acc += (p * scale) code, then
                  the rows' p * lo */
    V_CHANNEL, /* per-channel: t = sum p code, acc += lo * sum(p) + scale * t */
    V_GROUPED, /* U4 groups narrower than the row: acc += p * x */
};

/* Channels [c, c + CW * LANES) of the NQ accumulators over rows
 * [j, j + rows): w the rows' weights (i * stride + t), keep the factors
 * of the block's first rows (NULL after them), add[i] the rows' sum of
 * p * lo (V_ROW) or of p (V_CHANNEL), lo and sc the per-channel
 * parameters (V_CHANNEL). */
FORCE_INLINE void acc_chunk(int kind, int vmode, uint32_t NQ, uint32_t CW,
                            const uint8_t *data, uint32_t j, uint32_t rows,
                            uint32_t d, uint32_t c, const float *w,
                            uint32_t stride, const float *keep,
                            const float *add, const float *lo, const float *sc,
                            const group_params *gp, uint32_t width,
                            float *const *acc)
{
    int xmode = vmode == V_GROUPED ? GROUPED : PLAIN;
    vf o[PKV__QUAD][2];
    for (uint32_t i = 0; i < NQ; i++)
        for (uint32_t x = 0; x < CW; x++) {
            vf a = v_load(acc[i] + c + x * LANES);
            if (keep != NULL)
                a = v_mul(a, v_set1(keep[i]));
            o[i][x] = vmode == V_CHANNEL ? v_zero() : a;
        }
    for (uint32_t t = 0; t < rows; t++) {
        vf x[2];
        for (uint32_t y = 0; y < CW; y++)
            x[y] = value_x(kind, xmode, data, j + t, c + y * LANES, d, gp, t,
                           width);
        for (uint32_t i = 0; i < NQ; i++) {
            vf wv = v_set1(w[i * stride + t]);
            for (uint32_t y = 0; y < CW; y++)
                o[i][y] = v_fma(wv, x[y], o[i][y]);
        }
    }
    for (uint32_t i = 0; i < NQ; i++)
        for (uint32_t x = 0; x < CW; x++) {
            float *dst = acc[i] + c + x * LANES;
            if (vmode == V_ROW) {
                o[i][x] = v_add(o[i][x], v_set1(add[i]));
            } else if (vmode == V_CHANNEL) {
                vf a = v_load(dst);
                if (keep != NULL)
                    a = v_mul(a, v_set1(keep[i]));
                vf base = v_fma(v_load(lo + c + x * LANES), v_set1(add[i]), a);
                o[i][x] = v_fma(v_load(sc + c + x * LANES), o[i][x], base);
            }
            v_store(dst, o[i][x]);
        }
}

FORCE_INLINE void acc_rows(int kind, int vmode, uint32_t NQ,
                           const uint8_t *data, uint32_t j, uint32_t rows,
                           uint32_t d, const float *w, uint32_t stride,
                           const float *keep, const float *add,
                           const float *lo, const float *sc,
                           const group_params *gp, uint32_t width,
                           float *const *acc)
{
    uint32_t c = 0;
    for (; c + 2 * LANES <= d; c += 2 * LANES)
        acc_chunk(kind, vmode, NQ, 2, data, j, rows, d, c, w, stride, keep,
                  add, lo, sc, gp, width, acc);
    if (c < d)
        acc_chunk(kind, vmode, NQ, 1, data, j, rows, d, c, w, stride, keep,
                  add, lo, sc, gp, width, acc);
}

#define ACC_NQ(kind, vmode)                                                \
    do {                                                                   \
        switch (nq) {                                                      \
        case 1:                                                            \
            acc_rows(kind, vmode, 1, data, j, rows, d, w, stride, keep,    \
                     add, lo, sc, gp, width, acc);                         \
            break;                                                         \
        case 2:                                                            \
            acc_rows(kind, vmode, 2, data, j, rows, d, w, stride, keep,    \
                     add, lo, sc, gp, width, acc);                         \
            break;                                                         \
        case 3:                                                            \
            acc_rows(kind, vmode, 3, data, j, rows, d, w, stride, keep,    \
                     add, lo, sc, gp, width, acc);                         \
            break;                                                         \
        default:                                                           \
            acc_rows(kind, vmode, 4, data, j, rows, d, w, stride, keep,    \
                     add, lo, sc, gp, width, acc);                         \
            break;                                                         \
        }                                                                  \
    } while (0)

static void acc_any(int kind, int vmode, uint32_t nq, const uint8_t *data,
                    uint32_t j, uint32_t rows, uint32_t d, const float *w,
                    uint32_t stride, const float *keep, const float *add,
                    const float *lo, const float *sc, const group_params *gp,
                    uint32_t width, float *const *acc)
{
    switch (kind * 4 + vmode) {
    case X_F32 * 4 + V_PLAIN:
        ACC_NQ(X_F32, V_PLAIN);
        break;
    case X_F16 * 4 + V_PLAIN:
        ACC_NQ(X_F16, V_PLAIN);
        break;
    case X_U8 * 4 + V_ROW:
        ACC_NQ(X_U8, V_ROW);
        break;
    case X_U8 * 4 + V_CHANNEL:
        ACC_NQ(X_U8, V_CHANNEL);
        break;
    case X_U4 * 4 + V_ROW:
        ACC_NQ(X_U4, V_ROW);
        break;
    case X_U4 * 4 + V_CHANNEL:
        ACC_NQ(X_U4, V_CHANNEL);
        break;
    case X_F32 * 4 + V_ROW:
        ACC_NQ(X_F32, V_ROW);
        break;
    case X_F32 * 4 + V_CHANNEL:
        ACC_NQ(X_F32, V_CHANNEL);
        break;
    case X_F32 * 4 + V_GROUPED:
        ACC_NQ(X_F32, V_GROUPED);
        break;
    default:
        ACC_NQ(X_U4, V_GROUPED);
        break;
    }
}

static void accumulate(const pkv__rows_format *f, const pkv__rows *v,
                       uint32_t j0, uint32_t n, uint32_t d, const float *p,
                       uint32_t stride, uint32_t nq, const float *keep,
                       float *const *acc)
{
    int kind = x_kind(f, v);
    int vmode = f->dtype == PKV_KV_DTYPE_F32 || f->dtype == PKV_KV_DTYPE_F16
                    ? V_PLAIN
                : f->group == PKV_QUANT_GROUP_PER_CHANNEL ? V_CHANNEL
                : f->width == d                        ? V_ROW
                                                       : V_GROUPED;
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], sc[PKV_LAYOUT_MAX_HEAD_DIM];
    if (vmode == V_CHANNEL) {
        params_f32(v->lo, 0, d, lo);
        params_f32(v->scale, 0, d, sc);
    }
    group_params gp;
    /* Batches of GROUP_ROWS rows aligned to the block's rows, so that
     * rows of weight 0 a call also takes change no sum. */
    float wrow[PKV__QUAD * GROUP_ROWS];
    const float *first_keep = keep;
    for (uint32_t b = j0 / GROUP_ROWS * GROUP_ROWS; b < j0 + n;
         b += GROUP_ROWS) {
        uint32_t lo_row = b > j0 ? b : j0;
        uint32_t hi_row = b + GROUP_ROWS < j0 + n ? b + GROUP_ROWS : j0 + n;
        uint32_t rows = hi_row - lo_row;
        const float *w = p + lo_row;
        uint32_t wstride = stride;
        float add[PKV__QUAD] = {0};
        if (vmode == V_ROW) {
            float rlo[GROUP_ROWS], rsc[GROUP_ROWS];
            params_f32(v->lo, lo_row, rows, rlo);
            params_f32(v->scale, lo_row, rows, rsc);
            for (uint32_t i = 0; i < nq; i++)
                for (uint32_t t = 0; t < rows; t++) {
                    float pt = p[i * stride + lo_row + t];
                    wrow[i * GROUP_ROWS + t] = pt * rsc[t];
                    add[i] += pt * rlo[t];
                }
            w = wrow;
            wstride = GROUP_ROWS;
        } else if (vmode == V_CHANNEL) {
            for (uint32_t i = 0; i < nq; i++)
                for (uint32_t t = 0; t < rows; t++)
                    add[i] += p[i * stride + lo_row + t];
        } else if (vmode == V_GROUPED) {
            group_params_load(v, d / f->width, lo_row, rows, &gp);
        }
        acc_any(kind, vmode, nq, rows_data(v), lo_row, rows, d, w, wstride,
                first_keep, add, lo, sc, &gp, f->width, acc);
        first_keep = NULL;
    }
}

/* ------------------------------------------------------------- convert */

static void convert(const pkv__rows_format *f, const pkv__rows *r,
                    uint32_t n, uint32_t d, float *dst)
{
    int kind = x_kind(f, r);
    for (uint32_t j = 0; j < n; j++)
        for (uint32_t c = 0; c < d; c += LANES)
            v_store(dst + (size_t)j * d + c, load_x(kind, r->data, j, c, d));
}

/* -------------------------------------------------------------- to_f16 */

/* The processor's conversion rounds to nearest even as pkv__f32_to_f16
 * does, overflow and subnormals included; a NaN's payload it keeps where
 * pkv__f32_to_f16 drops it, so a vector holding one goes the portable
 * way. */
static void to_f16(const float *src, uint16_t *dst, uint32_t d)
{
    for (uint32_t c = 0; c < d; c += LANES) {
        vf x = v_load(src + c);
        if (v_any_nan(x))
            pkv__f32_to_f16_n(src + c, dst + c, LANES);
        else
            v_store_f16(dst + c, x);
    }
}

static int runs(void)
{
    return RUNS;
}

const pkv__attend_math VERSION = {
    VERSION_NAME, LANES, runs, scores, weigh, accumulate, convert, to_f16,
};
