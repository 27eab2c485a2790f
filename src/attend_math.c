/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's attention arithmetic in portable C, a row at a time
 * (the SIMD versions convert in registers instead), and the choice of
 * version (attend_math.h).
 */
#include "attend_math.h"

#include "half.h"
#include "kv_layout.h"
#include "pkv/pkv.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* Runs of 4 (head_dim is a multiple of 4); the four sums of a dot are
 * also more accurate than one long chain. */
static float dot(const float *restrict a, const float *restrict b, uint32_t n)
{
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    for (uint32_t i = 0; i < n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    return (s0 + s2) + (s1 + s3);
}

static float sum(const float *a, uint32_t n)
{
    float s = 0.0f;
    for (uint32_t i = 0; i < n; i++)
        s += a[i];
    return s;
}

/* Where a part's parameters fold out of the sums (attend_math.h). */
enum { DIRECT, PER_CHANNEL, PER_ROW };

static int fold_of(const pkv__rows_format *f, uint32_t d)
{
    if (f->dtype != PKV_KV_DTYPE_U8 && f->dtype != PKV_KV_DTYPE_U4)
        return DIRECT;
    if (f->group == PKV_QUANT_GROUP_PER_CHANNEL)
        return PER_CHANNEL;
    return f->width == d ? PER_ROW : DIRECT;
}

/* n f16 parameters from index first of an array. */
static void params(const uint8_t *at, uint32_t first, uint32_t n, float *out)
{
    uint16_t h[PKV_LAYOUT_MAX_HEAD_DIM];
    memcpy(h, at + 2u * first, 2u * n);
    pkv__f16_to_f32_n(h, out, n);
}

/* Row j's lo and scale of a PER_ROW part. */
static void row_params(const pkv__rows *r, uint32_t j, float *lo, float *sc)
{
    params(r->lo, j, 1, lo);
    params(r->scale, j, 1, sc);
}

/* Row j's values (f16) or codes (U8, U4) as f32 in buf. */
static void convert_row(const pkv__rows_format *f, const pkv__rows *r,
                        uint32_t j, uint32_t d, float *buf)
{
    if (f->dtype == PKV_KV_DTYPE_F16) {
        uint16_t h[PKV_LAYOUT_MAX_HEAD_DIM];
        memcpy(h, r->data + 2 * (size_t)j * d, 2 * (size_t)d);
        pkv__f16_to_f32_n(h, buf, d);
    } else if (f->dtype == PKV_KV_DTYPE_U8) {
        const uint8_t *codes = r->data + (size_t)j * d;
        for (uint32_t c = 0; c < d; c++)
            buf[c] = (float)codes[c];
    } else {
        const uint8_t *codes = r->data + (size_t)j * d / 2;
        for (uint32_t c = 0; c < d; c += 2) {
            buf[c] = (float)(codes[c / 2] & 15u);
            buf[c + 1] = (float)(codes[c / 2] >> 4);
        }
    }
}

/* Row j of a part as f32, in place or in buf: values (f32, f16), codes
 * (a folded U8/U4 format), or lo + code * scale (U4 groups narrower than
 * the row). */
static const float *row_at(const pkv__rows_format *f, const pkv__rows *r,
                           uint32_t j, uint32_t d, float *buf)
{
    if (f->dtype == PKV_KV_DTYPE_F32)
        return (const float *)(const void *)r->data + (size_t)j * d;
    const float *x = buf;
    if (r->values != NULL)
        x = r->values + (size_t)j * d;
    else
        convert_row(f, r, j, d, buf);
    if (fold_of(f, d) != DIRECT || f->dtype == PKV_KV_DTYPE_F16)
        return x;
    uint32_t groups = d / f->width;
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], sc[PKV_LAYOUT_MAX_HEAD_DIM];
    params(r->lo, j * groups, groups, lo);
    params(r->scale, j * groups, groups, sc);
    for (uint32_t c = 0; c < d; c++)
        buf[c] = lo[c / f->width] + x[c] * sc[c / f->width];
    return buf;
}

static void convert(const pkv__rows_format *f, const pkv__rows *r,
                    uint32_t n, uint32_t d, float *dst)
{
    for (uint32_t j = 0; j < n; j++)
        convert_row(f, r, j, d, dst + (size_t)j * d);
}

static void scores(const pkv__rows_format *f, const pkv__rows *k, uint32_t j0,
                   uint32_t n, uint32_t d, const float *const *q, uint32_t nq,
                   float *s, uint32_t stride)
{
    float buf[PKV_LAYOUT_MAX_HEAD_DIM];
    const float *qs[PKV__QUAD];
    float qlo[PKV__QUAD] = {0}, qsum[PKV__QUAD] = {0};
    float folded_q[PKV__QUAD][PKV_LAYOUT_MAX_HEAD_DIM];
    int per_channel = fold_of(f, d) == PER_CHANNEL;
    int per_row = fold_of(f, d) == PER_ROW;
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], sc[PKV_LAYOUT_MAX_HEAD_DIM];
    if (per_channel) {
        params(k->lo, 0, d, lo);
        params(k->scale, 0, d, sc);
    }
    for (uint32_t i = 0; i < nq; i++) {
        qs[i] = q[i];
        if (per_channel) {
            for (uint32_t c = 0; c < d; c++)
                folded_q[i][c] = q[i][c] * sc[c];
            qs[i] = folded_q[i];
            qlo[i] = dot(q[i], lo, d);
        } else if (per_row) {
            qsum[i] = sum(q[i], d);
        }
    }
    for (uint32_t j = 0; j < n; j++) {
        const float *x = row_at(f, k, j0 + j, d, buf);
        float rlo = 0.0f, rsc = 0.0f;
        if (per_row)
            row_params(k, j0 + j, &rlo, &rsc);
        for (uint32_t i = 0; i < nq; i++) {
            float t = dot(qs[i], x, d);
            s[i * stride + j0 + j] = per_channel ? qlo[i] + t
                                : per_row   ? rlo * qsum[i] + rsc * t
                                            : t;
        }
    }
}

static void weigh(float *s, uint32_t stride, uint32_t nq, uint32_t n,
                  const uint32_t *a, const uint32_t *z, float scale,
                  pkv__softmax *const *st, float *keep)
{
    for (uint32_t i = 0; i < nq; i++) {
        float *p = s + i * stride;
        pkv__softmax *t = st[i];
        float mb = -INFINITY;
        for (uint32_t j = a[i]; j < z[i]; j++) {
            p[j] *= scale;
            mb = p[j] > mb ? p[j] : mb;
        }
        keep[i] = 1.0f;
        if (mb > t->m) {
            /* The first block finds m = -inf and an empty accumulator:
             * keep 0 (expf(-inf - mb) is 0 too, but -inf - -inf is NaN
             * when both are). */
            keep[i] = t->m == -INFINITY ? 0.0f : expf(t->m - mb);
            t->l *= keep[i];
            t->m = mb;
        }
        for (uint32_t j = 0; j < n; j++) {
            int in = j >= a[i] && j < z[i];
            p[j] = in ? expf(p[j] - t->m) : 0.0f;
            t->l += p[j];
        }
    }
}

static void accumulate(const pkv__rows_format *f, const pkv__rows *v,
                       uint32_t j0, uint32_t n, uint32_t d, const float *p,
                       uint32_t stride, uint32_t nq, const float *keep,
                       float *const *acc)
{
    float buf[PKV_LAYOUT_MAX_HEAD_DIM];
    int per_channel = fold_of(f, d) == PER_CHANNEL;
    int per_row = fold_of(f, d) == PER_ROW;
    /* Per-channel: sum p code per channel, folded in at the end. */
    float t[PKV__QUAD][PKV_LAYOUT_MAX_HEAD_DIM];
    float bias[PKV__QUAD] = {0}, psum[PKV__QUAD] = {0};
    for (uint32_t i = 0; i < nq; i++) {
        if (keep[i] != 1.0f)
            for (uint32_t c = 0; c < d; c++)
                acc[i][c] *= keep[i];
        if (per_channel)
            memset(t[i], 0, d * sizeof(float));
    }
    for (uint32_t j = 0; j < n; j++) {
        const float *x = row_at(f, v, j0 + j, d, buf);
        float rlo = 0.0f, rsc = 1.0f;
        if (per_row)
            row_params(v, j0 + j, &rlo, &rsc);
        for (uint32_t i = 0; i < nq; i++) {
            float w = p[i * stride + j0 + j];
            float *restrict o = per_channel ? t[i] : acc[i];
            psum[i] += w;
            bias[i] += w * rlo;
            if (per_row)
                w *= rsc;
            for (uint32_t c = 0; c < d; c++)
                o[c] += w * x[c];
        }
    }
    if (per_row)
        for (uint32_t i = 0; i < nq; i++)
            for (uint32_t c = 0; c < d; c++)
                acc[i][c] += bias[i];
    if (per_channel) {
        float lo[PKV_LAYOUT_MAX_HEAD_DIM], sc[PKV_LAYOUT_MAX_HEAD_DIM];
        params(v->lo, 0, d, lo);
        params(v->scale, 0, d, sc);
        for (uint32_t i = 0; i < nq; i++)
            for (uint32_t c = 0; c < d; c++)
                acc[i][c] = (acc[i][c] + lo[c] * psum[i]) + sc[c] * t[i][c];
    }
}

static int runs_anywhere(void)
{
    return 1;
}

const pkv__attend_math pkv__attend_math_portable = {
    "portable", 4,          runs_anywhere, scores,
    weigh,      accumulate, convert,       pkv__f32_to_f16_n,
};

const pkv__attend_math *const pkv__attend_math_versions[] = {
#ifdef PKV_HAVE_AVX2
    &pkv__attend_math_avx512,
    &pkv__attend_math_avx2,
#endif
    &pkv__attend_math_portable,
    NULL,
};

/* Whether format f's rows split into vectors of `lanes` channels with one
 * set of parameters each. */
static int format_fits(const pkv__rows_format *f, uint32_t d, uint32_t lanes)
{
    if (f->dtype != PKV_KV_DTYPE_U4 || f->group != PKV_QUANT_GROUP_PER_TOKEN)
        return 1;
    return f->width == d || f->width % lanes == 0;
}

int pkv__attend_math_takes(const pkv__attend_math *m, uint32_t d,
                           const pkv__rows_format *k,
                           const pkv__rows_format *v)
{
    return d % m->lanes == 0 && format_fits(k, d, m->lanes) &&
           format_fits(v, d, m->lanes) && m->runs();
}

const pkv__attend_math *pkv__attend_math_for(uint32_t d,
                                             const pkv__rows_format *k,
                                             const pkv__rows_format *v)
{
    for (size_t i = 0; pkv__attend_math_versions[i] != NULL; i++)
        if (pkv__attend_math_takes(pkv__attend_math_versions[i], d, k, v))
            return pkv__attend_math_versions[i];
    return &pkv__attend_math_portable;
}
