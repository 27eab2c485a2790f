/* SPDX-License-Identifier: MIT */
/*
 * Every version of the CPU backend's attention arithmetic this processor
 * runs (attend_math.h), for every way a part stores its rows: scores,
 * softmax weights and accumulators against f64 sums over the stored
 * values, within a bound on f32 rounding; and a query's results the same
 * bits whatever queries share its call, whatever rows the call takes
 * beyond the query's own, and whether the rows were converted first;
 * and each version's f16 rows for the cache the portable conversion's
 * bits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "attend_math.h"
#include "half.h"
#include "kv_layout.h"
#include "quant.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 37u   /* a part's rows: not a multiple of any batch */
#define STRIDE 48u /* >= ROWS rounded up to 16 */
#define EPS 5.960464477539063e-8 /* 2^-24 */

/* One part: its format, its bytes (f32, f16 or quantized), and the values
 * it stores as f64. */
typedef struct part {
    pkv__rows_format f;
    uint8_t *bytes;
    pkv__rows rows;
    double x[ROWS * PKV_LAYOUT_MAX_HEAD_DIM];
    double lo[ROWS * PKV_LAYOUT_MAX_HEAD_DIM]; /* each element's lo */
    double code_term[ROWS * PKV_LAYOUT_MAX_HEAD_DIM]; /* |code * scale| */
} part;

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    assert_non_null(p);
    return p;
}

/* Fill p with format f over head_dim d from N(0,1) data (some channels
 * offset, as keys' outliers are). */
static void part_make(part *p, pkv__rows_format f, uint32_t d, uint64_t *rng)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    float *src = xcalloc((size_t)ROWS * d, sizeof *src);
    test_normal_fill(rng, src, (size_t)ROWS * d);
    for (uint32_t c = 0; c < d; c += 7)
        for (uint32_t j = 0; j < ROWS; j++)
            src[(size_t)j * d + c] += 3.0f;
    if (f.dtype == PKV_KV_DTYPE_F32) {
        p->bytes = (uint8_t *)src;
        for (size_t i = 0; i < (size_t)ROWS * d; i++)
            p->x[i] = src[i], p->code_term[i] = fabs(src[i]);
    } else if (f.dtype == PKV_KV_DTYPE_F16) {
        p->bytes = xcalloc((size_t)ROWS * d, 2);
        for (size_t i = 0; i < (size_t)ROWS * d; i++) {
            uint16_t h = pkv__f32_to_f16(src[i]);
            memcpy(p->bytes + 2 * i, &h, 2);
            p->x[i] = pkv__f16_to_f32(h);
            p->code_term[i] = fabs(p->x[i]);
        }
        free(src);
    } else {
        pkv__qformat q = {f.dtype, f.group, f.width};
        size_t bytes = PKV_LAYOUT_PART_BYTES((uint32_t)f.dtype, f.group,
                                             f.width, ROWS, d);
        p->bytes = xcalloc(bytes, 1);
        pkv__quant_part(src, ROWS, d, &q, p->bytes);
        size_t lo_at = PKV_LAYOUT_Q_LO_OFFSET((uint32_t)f.dtype, ROWS, d);
        size_t sc_at = PKV_LAYOUT_Q_SCALE_OFFSET((uint32_t)f.dtype, f.group,
                                                 f.width, ROWS, d);
        p->rows.lo = p->bytes + lo_at;
        p->rows.scale = p->bytes + sc_at;
        uint32_t row_bytes = f.dtype == PKV_KV_DTYPE_U4 ? d / 2 : d;
        for (uint32_t j = 0; j < ROWS; j++)
            for (uint32_t c = 0; c < d; c++) {
                uint32_t g = f.group == PKV_QUANT_GROUP_PER_CHANNEL
                                 ? c
                                 : j * (d / f.width) + c / f.width;
                uint16_t l16, s16;
                memcpy(&l16, p->rows.lo + 2 * g, 2);
                memcpy(&s16, p->rows.scale + 2 * g, 2);
                double lo = pkv__f16_to_f32(l16), sc = pkv__f16_to_f32(s16);
                uint8_t code = pkv__quant_code_at(p->bytes + j * row_bytes,
                                                  f.dtype, c);
                size_t i = (size_t)j * d + c;
                p->x[i] = lo + code * sc;
                p->lo[i] = lo;
                p->code_term[i] = code * sc;
            }
        free(src);
    }
    p->rows.data = p->bytes;
}

static void part_free(part *p)
{
    free(p->bytes);
}

/* The formats: f32, f16, and U8/U4 per channel and per token (U4 groups
 * of 8, 16 and 32 channels where they divide d, and the whole row). */
static uint32_t formats_for(uint32_t d, pkv__rows_format *out)
{
    uint32_t n = 0;
    out[n++] = (pkv__rows_format){PKV_KV_DTYPE_F32, 0, d};
    out[n++] = (pkv__rows_format){PKV_KV_DTYPE_F16, 0, d};
    for (int32_t dt = PKV_KV_DTYPE_U8; dt <= PKV_KV_DTYPE_U4; dt++) {
        out[n++] = (pkv__rows_format){dt, PKV_QUANT_GROUP_PER_CHANNEL, d};
        out[n++] = (pkv__rows_format){dt, PKV_QUANT_GROUP_PER_TOKEN, d};
    }
    static const uint32_t widths[] = {8, 16, 32};
    for (size_t w = 0; w < 3; w++)
        if (widths[w] < d && d % widths[w] == 0)
            out[n++] = (pkv__rows_format){PKV_KV_DTYPE_U4,
                                          PKV_QUANT_GROUP_PER_TOKEN,
                                          widths[w]};
    return n;
}

/* The versions that take d and f on this processor. */
static uint32_t versions_for(uint32_t d, const pkv__rows_format *f,
                             const pkv__attend_math **out)
{
    uint32_t n = 0;
    for (size_t i = 0; pkv__attend_math_versions[i] != NULL; i++)
        if (pkv__attend_math_takes(pkv__attend_math_versions[i], d, f, f))
            out[n++] = pkv__attend_math_versions[i];
    return n;
}

/* Scores of 4 queries against rows [j0, j0 + n) of p, each against the
 * f64 dot over the stored values, within (d / 4 + 16) 2^-24 of the sum of
 * the terms' magnitudes (lo and code * scale apart where they fold). */
static void check_scores(const pkv__attend_math *m, const part *p, uint32_t d,
                         const float *const *q, uint32_t j0, uint32_t n,
                         float *s)
{
    m->scores(&p->f, &p->rows, j0, n, d, q, PKV__QUAD, s, STRIDE);
    for (uint32_t i = 0; i < PKV__QUAD; i++)
        for (uint32_t j = j0; j < j0 + n; j++) {
            double want = 0.0, size = 0.0;
            for (uint32_t c = 0; c < d; c++) {
                size_t at = (size_t)j * d + c;
                want += (double)q[i][c] * p->x[at];
                size += fabs(q[i][c]) * (fabs(p->lo[at]) + p->code_term[at]);
            }
            double got = s[i * STRIDE + j];
            if (!(fabs(got - want) <= (d / 4.0 + 16.0) * EPS * size))
                fail_msg("%s dtype %d group %d width %u d %u: score %u,%u "
                         "%.9g vs %.9g",
                         m->name, (int)p->f.dtype, (int)p->f.group,
                         (unsigned)p->f.width, (unsigned)d, (unsigned)i,
                         (unsigned)j, got, want);
        }
}

/* Weights of 4 slots over ROWS rows, each slot its own range (one
 * empty), against exp in f64 of the scaled score less the max; 0 exactly
 * outside the range; the states and keep factors. */
static void check_weigh(const pkv__attend_math *m, const float *scores_in)
{
    static const uint32_t a[PKV__QUAD] = {0, 5, 20, 9};
    static const uint32_t z[PKV__QUAD] = {ROWS, 17, 20, 10};
    float s[PKV__QUAD * STRIDE];
    memcpy(s, scores_in, sizeof s);
    pkv__softmax st[PKV__QUAD] = {{-INFINITY, 0.0f}, {0.5f, 2.0f},
                                  {1.0f, 1.0f}, {20.0f, 3.0f}};
    pkv__softmax before[PKV__QUAD];
    memcpy(before, st, sizeof st);
    pkv__softmax *sts[PKV__QUAD] = {&st[0], &st[1], &st[2], &st[3]};
    float keep[PKV__QUAD];
    const float scale = 0.125f;
    m->weigh(s, STRIDE, PKV__QUAD, ROWS, a, z, scale, sts, keep);
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        double mb = -INFINITY;
        for (uint32_t j = a[i]; j < z[i]; j++) {
            double x = (double)(scores_in[i * STRIDE + j] * scale);
            mb = x > mb ? x : mb;
        }
        double m_new = mb > before[i].m ? mb : before[i].m;
        double want_keep = mb > before[i].m
                               ? (before[i].m == -INFINITY
                                      ? 0.0
                                      : exp(before[i].m - m_new))
                               : 1.0;
        assert_true(fabs(keep[i] - want_keep) <= 4 * EPS * want_keep);
        assert_true(st[i].m == (float)m_new);
        double l = before[i].l * want_keep;
        for (uint32_t j = 0; j < ROWS; j++) {
            double w = 0.0;
            if (j >= a[i] && j < z[i]) {
                float x = scores_in[i * STRIDE + j] * scale;
                w = exp((double)x - (double)st[i].m);
            }
            l += w;
            /* The exponent x - m is rounded to f32 first: |x - m| 2^-24
             * more (relative) than exp's own few ulp. */
            double arg = w > 0.0 ? -log(w) : 0.0;
            if (w == 0.0)
                assert_true(s[i * STRIDE + j] == 0.0f);
            else if (!(fabs(s[i * STRIDE + j] - w) <= (8 + arg) * EPS * w))
                fail_msg("%s: weight %u,%u %.9g vs %.9g", m->name,
                         (unsigned)i, (unsigned)j, s[i * STRIDE + j], w);
        }
        assert_true(fabs(st[i].l - l) <= (ROWS + 8) * EPS * l);
    }
}

/* Accumulators of 4 slots over rows [j0, j0 + n) of p with weights w
 * (scaled by keep first), against the f64 sums within
 * (ROWS + 16) 2^-24 of the terms' magnitudes. */
static void check_accumulate(const pkv__attend_math *m, const part *p,
                             uint32_t d, const float *w, uint32_t j0,
                             uint32_t n, const float *acc0)
{
    static const float keep[PKV__QUAD] = {1.0f, 0.5f, 0.0f, 0.75f};
    float *acc[PKV__QUAD];
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        acc[i] = xcalloc(d, sizeof(float));
        memcpy(acc[i], acc0 + (size_t)i * d, d * sizeof(float));
    }
    m->accumulate(&p->f, &p->rows, j0, n, d, w, STRIDE, PKV__QUAD, keep,
                  acc);
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        for (uint32_t c = 0; c < d; c++) {
            double base = (double)acc0[(size_t)i * d + c] * keep[i];
            double want = base, size = fabs(base);
            for (uint32_t j = j0; j < j0 + n; j++) {
                size_t at = (size_t)j * d + c;
                double pw = w[i * STRIDE + j];
                want += pw * p->x[at];
                size += fabs(pw) * (fabs(p->lo[at]) + p->code_term[at]);
            }
            if (!(fabs(acc[i][c] - want) <= (ROWS + 16.0) * EPS * size))
                fail_msg("%s dtype %d group %d width %u d %u: acc %u,%u "
                         "%.9g vs %.9g",
                         m->name, (int)p->f.dtype, (int)p->f.group,
                         (unsigned)p->f.width, (unsigned)d, (unsigned)i,
                         (unsigned)c, acc[i][c], want);
        }
        free(acc[i]);
    }
}

/* The rows converted to f32 once (pkv__rows.values): exact, and the
 * same scores and accumulators, bit for bit, as from the stored rows. */
static void check_converted(const pkv__attend_math *m, const part *p,
                            uint32_t d, const float *const *q, const float *w)
{
    if (p->f.dtype == PKV_KV_DTYPE_F32)
        return;
    float *values = xcalloc((size_t)ROWS * d, sizeof(float));
    m->convert(&p->f, &p->rows, ROWS, d, values);
    pkv__rows conv = p->rows;
    conv.values = values;
    float a[PKV__QUAD * STRIDE], b[PKV__QUAD * STRIDE];
    m->scores(&p->f, &p->rows, 2, ROWS - 2, d, q, PKV__QUAD, a, STRIDE);
    m->scores(&p->f, &conv, 2, ROWS - 2, d, q, PKV__QUAD, b, STRIDE);
    for (uint32_t i = 0; i < PKV__QUAD; i++)
        assert_memory_equal(a + i * STRIDE + 2, b + i * STRIDE + 2,
                            (ROWS - 2) * sizeof(float));
    static const float keep[PKV__QUAD] = {1.0f, 0.5f, 0.0f, 0.75f};
    float *x[PKV__QUAD], *y[PKV__QUAD];
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        x[i] = xcalloc(d, sizeof(float));
        y[i] = xcalloc(d, sizeof(float));
    }
    m->accumulate(&p->f, &p->rows, 1, ROWS - 1, d, w, STRIDE, PKV__QUAD,
                  keep, x);
    m->accumulate(&p->f, &conv, 1, ROWS - 1, d, w, STRIDE, PKV__QUAD, keep,
                  y);
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        assert_memory_equal(x[i], y[i], d * sizeof(float));
        free(x[i]);
        free(y[i]);
    }
    free(values);
}

/* Query i alone in its call, in another slot, beside other queries, and
 * over more rows than its own with those weighing 0: the same bits. */
static void check_same_bits(const pkv__attend_math *m, const part *p,
                            uint32_t d, const float *const *q)
{
    float all[PKV__QUAD * STRIDE], one[PKV__QUAD * STRIDE];
    m->scores(&p->f, &p->rows, 0, ROWS, d, q, PKV__QUAD, all, STRIDE);
    for (uint32_t i = 0; i < PKV__QUAD; i++) {
        const float *q1[PKV__QUAD] = {q[i]};
        m->scores(&p->f, &p->rows, 3, ROWS - 3, d, q1, 1, one, STRIDE);
        assert_memory_equal(one + 3, all + i * STRIDE + 3,
                            (ROWS - 3) * sizeof(float));
        const float *q3[PKV__QUAD] = {q[(i + 1) % PKV__QUAD],
                                      q[(i + 2) % PKV__QUAD], q[i]};
        m->scores(&p->f, &p->rows, 0, ROWS, d, q3, 3, one, STRIDE);
        assert_memory_equal(one + 2 * STRIDE, all + i * STRIDE,
                            ROWS * sizeof(float));
    }
    /* Weights: slot 0 over rows [5, 30), alone and beside a slot that
     * sees [0, ROWS). */
    float w1[PKV__QUAD * STRIDE], w2[PKV__QUAD * STRIDE];
    memcpy(w1, all, sizeof w1);
    memcpy(w2 + STRIDE, all, STRIDE * sizeof(float));
    memcpy(w2, all + STRIDE, STRIDE * sizeof(float));
    pkv__softmax s1 = {0.25f, 1.5f}, s2[2] = {{-INFINITY, 0.0f}, s1};
    pkv__softmax *p1[1] = {&s1}, *p2[2] = {&s2[0], &s2[1]};
    uint32_t a1[1] = {5}, z1[1] = {30}, a2[2] = {0, 5}, z2[2] = {ROWS, 30};
    float k1[1], k2[2];
    m->weigh(w1, STRIDE, 1, ROWS, a1, z1, 0.2f, p1, k1);
    m->weigh(w2, STRIDE, 2, ROWS, a2, z2, 0.2f, p2, k2);
    assert_memory_equal(w1, w2 + STRIDE, ROWS * sizeof(float));
    assert_memory_equal(&s1, &s2[1], sizeof s1);
    assert_memory_equal(&k1[0], &k2[1], sizeof(float));
    /* Accumulators: slot 0's weights over rows [5, 30) only, in a call
     * over those rows and in one over every row. */
    float *x1 = xcalloc(d, sizeof(float)), *x2 = xcalloc(d, sizeof(float));
    float *y2 = xcalloc(d, sizeof(float));
    float *acc1[1] = {x1}, *acc2[2] = {y2, x2};
    for (uint32_t c = 0; c < d; c++)
        x1[c] = x2[c] = (float)c * 0.01f;
    m->accumulate(&p->f, &p->rows, 5, 25, d, w1, STRIDE, 1, k1, acc1);
    m->accumulate(&p->f, &p->rows, 0, ROWS, d, w2, STRIDE, 2, k2, acc2);
    assert_memory_equal(x1, x2, d * sizeof(float));
    free(x1);
    free(x2);
    free(y2);
}

static void versions_against_f64(void **state)
{
    (void)state;
    static const uint32_t dims[] = {16, 32, 64, 80, 128, 256, 512};
    uint64_t rng = 77;
    uint32_t checked = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        uint32_t d = dims[di];
        float *q = xcalloc(PKV__QUAD * (size_t)d, sizeof *q);
        test_normal_fill(&rng, q, PKV__QUAD * (size_t)d);
        const float *qs[PKV__QUAD] = {q, q + d, q + 2 * d, q + 3 * d};
        float w[PKV__QUAD * STRIDE], acc0[PKV__QUAD * PKV_LAYOUT_MAX_HEAD_DIM];
        test_normal_fill(&rng, acc0, PKV__QUAD * (size_t)d);
        for (size_t i = 0; i < PKV__QUAD * STRIDE; i++)
            w[i] = (float)test_uniform(&rng);
        pkv__rows_format formats[16];
        uint32_t nf = formats_for(d, formats);
        for (uint32_t fi = 0; fi < nf; fi++) {
            part *p = xcalloc(1, sizeof *p);
            part_make(p, formats[fi], d, &rng);
            const pkv__attend_math *vs[8];
            uint32_t nv = versions_for(d, &formats[fi], vs);
            assert_true(nv >= 1); /* portable takes everything */
            for (uint32_t v = 0; v < nv; v++) {
                float s[PKV__QUAD * STRIDE];
                check_scores(vs[v], p, d, qs, 0, ROWS, s);
                check_scores(vs[v], p, d, qs, 7, 19, s);
                check_weigh(vs[v], s);
                check_accumulate(vs[v], p, d, w, 0, ROWS, acc0);
                check_accumulate(vs[v], p, d, w, 3, 30, acc0);
                check_same_bits(vs[v], p, d, qs);
                check_converted(vs[v], p, d, qs, w);
                checked++;
            }
            part_free(p);
            free(p);
        }
        free(q);
    }
    print_message("%u (version, head_dim, format) cases\n",
                  (unsigned)checked);
}

/* Every version's to_f16 gives pkv__f32_to_f16's bits: every f32 whose
 * bits are a multiple of 61 (every exponent, signs, payloads; f16's
 * subnormals, the rounding ties near them and the overflow edge among
 * them), the edges themselves, and NaNs of several payloads inside
 * vectors of ordinary values. */
static void to_f16_bits(void **state)
{
    (void)state;
    enum { N = 64 };
    static const uint32_t edges[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x33000000u, 0x33000001u,
        0x33800000u, 0x387fc000u, 0x387fe000u, 0x38800000u, 0x477fe000u,
        0x477fefffu, 0x477ff000u, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
        0x7f800001u, 0x7fc00000u, 0xffc12345u, 0x7fbfffffu, 0x3f800000u};
    float src[N];
    uint16_t want[N], got[N];
    uint32_t checked = 0;
    for (size_t v = 0; pkv__attend_math_versions[v] != NULL; v++) {
        const pkv__attend_math *m = pkv__attend_math_versions[v];
        if (!m->runs())
            continue;
        uint64_t bits = 0;
        for (int done = 0; !done;) {
            for (uint32_t i = 0; i < N; i++, bits += 61) {
                uint32_t u = (uint32_t)bits;
                memcpy(&src[i], &u, sizeof u);
            }
            done = bits >= (1ull << 32);
            pkv__f32_to_f16_n(src, want, N);
            m->to_f16(src, got, N);
            assert_memory_equal(got, want, sizeof got);
        }
        for (size_t e = 0; e < sizeof edges / sizeof *edges; e++) {
            for (uint32_t i = 0; i < N; i++)
                src[i] = (float)i * 0.37f - 9.0f;
            memcpy(&src[(e * 7) % N], &edges[e], sizeof edges[e]);
            pkv__f32_to_f16_n(src, want, N);
            m->to_f16(src, got, N);
            assert_memory_equal(got, want, sizeof got);
        }
        checked++;
    }
    print_message("to_f16: %u versions\n", (unsigned)checked);
}

/* The version chosen is one this processor runs and takes the formats;
 * the portable one takes every geometry pkv accepts. */
static void choice(void **state)
{
    (void)state;
    pkv__rows_format k = {PKV_KV_DTYPE_U8, PKV_QUANT_GROUP_PER_CHANNEL, 64};
    pkv__rows_format v = {PKV_KV_DTYPE_U4, PKV_QUANT_GROUP_PER_TOKEN, 8};
    const pkv__attend_math *m = pkv__attend_math_for(64, &k, &v);
    assert_true(pkv__attend_math_takes(m, 64, &k, &v));
    assert_true(pkv__attend_math_takes(&pkv__attend_math_portable, 20, &k,
                                       &v));
    m = pkv__attend_math_for(20, &k, &v);
    assert_ptr_equal(m, &pkv__attend_math_portable);
    for (size_t i = 0; pkv__attend_math_versions[i] != NULL; i++)
        print_message("%s: %s\n", pkv__attend_math_versions[i]->name,
                      pkv__attend_math_versions[i]->runs() ? "runs here"
                                                           : "not here");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(versions_against_f64),
        cmocka_unit_test(to_f16_bits),
        cmocka_unit_test(choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
