/* SPDX-License-Identifier: MIT */
/* f16 conversion and the U8 and U4 quantizer: exactness of the conversions and
 * the per-element bound |x - x'| <= scale / 2 + tolerance (quant.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "half.h"
#include "kv_layout.h"
#include "quant.h"
#include "rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---------------------------------------------------------------- half */

static void half_roundtrip_every_f16(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float x = pkv__f16_to_f32((uint16_t)h);
        if (isnan(x)) {
            assert_true((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0);
            assert_true(isnan(pkv__f16_to_f32(pkv__f32_to_f16(x))));
            continue;
        }
        assert_int_equal(pkv__f32_to_f16(x), h);
        assert_int_equal(pkv__f32_to_f16_down(x), h);
        assert_int_equal(pkv__f32_to_f16_up(x), h);
    }
    assert_true(pkv__f16_to_f32(0x0001u) == ldexpf(1.0f, -24));
    assert_true(pkv__f16_to_f32(0x7bffu) == 65504.0f);
    assert_true(pkv__f16_to_f32(0x0400u) == ldexpf(1.0f, -14));
}

/* The f16 values just below and above x, by scanning the ordered finite
 * values (test oracle, slow but obviously right). */
static void f16_neighbours(float x, double *below, double *above)
{
    *below = -INFINITY;
    *above = INFINITY;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        double f = pkv__f16_to_f32((uint16_t)h);
        if (isnan(f) || isinf(f))
            continue;
        if (f <= x && f > *below)
            *below = f;
        if (f >= x && f < *above)
            *above = f;
    }
}

static void check_conversions(float x)
{
    double lo, hi;
    f16_neighbours(x, &lo, &hi);
    double down = pkv__f16_to_f32(pkv__f32_to_f16_down(x));
    double up = pkv__f16_to_f32(pkv__f32_to_f16_up(x));
    assert_true(down == lo);
    assert_true(up == hi);
    double near = pkv__f16_to_f32(pkv__f32_to_f16(x));
    if (fabs(x) >= 65520.0) {
        assert_true(isinf(near));
        return;
    }
    assert_true(near == lo || near == hi);
    double dl = (double)x - lo, dh = hi - (double)x;
    if (dl < dh)
        assert_true(near == lo);
    else if (dh < dl)
        assert_true(near == hi);
    else if (lo != hi) /* a tie: the even one */
        assert_int_equal(pkv__f32_to_f16((float)near) & 1u, 0);
}

static void half_rounding_modes(void **state)
{
    (void)state;
    static const float edge[] = {
        0.0f, 1.0f, 1.0004883f, 1.00048828125f, 1.0009766f, 65504.0f,
        65519.99f, 65520.0f, 1e5f, -1e5f, 2.9802322e-8f, 5.9604645e-8f,
        2.98e-8f, 8.940697e-8f, 6.1035156e-5f, 6.1e-5f, 1e-40f, -1e-40f,
        -0.0f, -3.14159f, 1e-7f, 3.0517578e-5f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        check_conversions(edge[i]);
    uint64_t rng = 1;
    for (int i = 0; i < 300; i++) {
        /* Any finite f32 within and a little beyond the f16 range. */
        uint32_t u = (uint32_t)test_rand(&rng);
        uint32_t e = 90u + (uint32_t)(test_rand(&rng) % 58u); /* 2^-37..2^20 */
        check_conversions(bits_f32((u & 0x807fffffu) | (e << 23)));
    }
    assert_int_equal(pkv__f32_to_f16_down(-1e5f), 0xfc00u); /* -inf */
    assert_int_equal(pkv__f32_to_f16_up(1e5f), 0x7c00u);
    assert_int_equal(pkv__f32_to_f16_up(1e-30f), 0x0001u);
    assert_int_equal(pkv__f32_to_f16_down(-1e-30f), 0x8001u);
    assert_true(isnan(pkv__f16_to_f32(pkv__f32_to_f16(NAN))));
    assert_int_equal(pkv__f32_to_f16(INFINITY), 0x7c00u);
}

/* ---------------------------------------------------------------- quant */

/* Quantize a part of format f, read it back, and check every element
 * against the bound with its group's stored parameters. Returns the worst
 * error over scale (<= 0.5 + tolerance). */
static double check_part(const float *src, uint32_t bs, uint32_t d,
                         const pkv__qformat *f)
{
    uint32_t pd = (uint32_t)f->dtype, w = f->u4_group;
    size_t bytes = PKV_LAYOUT_PART_BYTES(pd, (uint32_t)f->group, w, bs, d);
    uint8_t *part = malloc(bytes);
    float *back = malloc((size_t)bs * d * sizeof *back);
    assert_non_null(part);
    assert_non_null(back);
    pkv__quant_part(src, bs, d, f, part);
    pkv__dequant_part(part, bs, d, f, back);
    uint32_t groups = PKV_LAYOUT_Q_GROUPS(pd, f->group, w, bs, d);
    uint32_t width = PKV_LAYOUT_Q_WIDTH(pd, w, d);
    double levels = pd == PKV_KV_DTYPE_U4 ? 15.0 : 255.0;
    double worst = 0.0;
    for (uint32_t g = 0; g < groups; g++) {
        uint16_t l16, s16;
        memcpy(&l16, part + PKV_LAYOUT_Q_LO_OFFSET(pd, bs, d) + 2u * g, 2);
        memcpy(&s16,
               part + PKV_LAYOUT_Q_SCALE_OFFSET(pd, f->group, w, bs, d) +
                   2u * g,
               2);
        double lo = pkv__f16_to_f32(l16), scale = pkv__f16_to_f32(s16);
        assert_true(scale > 0.0 && isfinite(scale) && isfinite(lo));
        double tol = ldexp(fabs(lo) + 256.0 * scale, -20);
        int per_channel = f->group == PKV_QUANT_GROUP_PER_CHANNEL;
        uint32_t n = per_channel ? bs : width;
        double mn = INFINITY, mx = -INFINITY;
        for (uint32_t i = 0; i < n; i++) {
            /* Per token: group g is token g / (d / width), channels from
             * (g % (d / width)) * width. */
            size_t at = per_channel ? (size_t)i * d + g
                                    : (size_t)(g / (d / width)) * d +
                                          (g % (d / width)) * width + i;
            double x = src[at], err = fabs(x - (double)back[at]);
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
            assert_true(err <= scale / 2 + tol);
            worst = err / scale > worst ? err / scale : worst;
        }
        /* The stored range covers the group: lo rounded down, scale up. */
        assert_true(lo <= mn);
        assert_true(lo + levels * scale >= mx);
    }
    free(part);
    free(back);
    return worst;
}

static const uint32_t BLOCK_SIZES[] = {1, 8, 16, 32, 128};
static const uint32_t HEAD_DIMS[] = {4, 64, 80, 128, 256};

typedef float (*gen_fn)(uint64_t *rng, uint32_t token, uint32_t channel);

/* Every format on one block: U8 and U4 per channel, per token (U4 with
 * groups of 8, 32 and a whole row, where they divide d). */
static void check_formats(const float *src, uint32_t bs, uint32_t d)
{
    for (int32_t group = 1; group <= 2; group++) {
        pkv__qformat u8 = {PKV_KV_DTYPE_U8, group, 0};
        check_part(src, bs, d, &u8);
        const uint32_t widths[] = {8, 32, d};
        for (size_t i = 0; i < 3; i++) {
            if (d % widths[i] != 0 ||
                (group == PKV_QUANT_GROUP_PER_CHANNEL && i > 0))
                continue;
            pkv__qformat u4 = {PKV_KV_DTYPE_U4, group, widths[i]};
            check_part(src, bs, d, &u4);
        }
    }
}

static void check_all_shapes(gen_fn gen)
{
    uint64_t rng = 42;
    for (size_t bi = 0; bi < 5; bi++)
        for (size_t di = 0; di < 5; di++) {
            uint32_t bs = BLOCK_SIZES[bi], d = HEAD_DIMS[di];
            float *src = malloc((size_t)bs * d * sizeof *src);
            assert_non_null(src);
            for (uint32_t t = 0; t < bs; t++)
                for (uint32_t c = 0; c < d; c++)
                    src[(size_t)t * d + c] = gen(&rng, t, c);
            check_formats(src, bs, d);
            free(src);
        }
}

static float gen_normal(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)t;
    (void)c;
    return test_normal(rng);
}

static float gen_constant(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)rng;
    (void)t;
    (void)c;
    return 1000.3f; /* not an f16: lo rounds down to 1000 */
}

static float gen_constant_per_channel(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)rng;
    (void)t;
    return (float)c * 0.37f - 3.0f;
}

static float gen_huge(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)t;
    (void)c;
    return (float)(2e4 * test_uniform(rng) - 1e4);
}

static float gen_extremes(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)rng;
    return (t + c) % 2 ? 65504.0f : -65504.0f;
}

static float gen_denormal(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)t;
    /* f32 subnormals (below 2^-126), f16 subnormals, and zeros. */
    float x = (float)test_uniform(rng);
    return c % 3 == 0 ? x * 1e-40f : c % 3 == 1 ? x * 1e-6f : 0.0f;
}

static float gen_outlier_channels(uint64_t *rng, uint32_t t, uint32_t c)
{
    (void)t;
    float x = test_normal(rng);
    return c % 16 == 3 ? 20.0f * x + 40.0f : x;
}

static void quant_bound_normal(void **state)
{
    (void)state;
    check_all_shapes(gen_normal);
}

static void quant_bound_constant(void **state)
{
    (void)state;
    check_all_shapes(gen_constant);
    check_all_shapes(gen_constant_per_channel);
}

static void quant_bound_huge_ranges(void **state)
{
    (void)state;
    check_all_shapes(gen_huge);
    check_all_shapes(gen_extremes);
}

static void quant_bound_denormals(void **state)
{
    (void)state;
    check_all_shapes(gen_denormal);
}

static void quant_bound_outlier_channels(void **state)
{
    (void)state;
    check_all_shapes(gen_outlier_channels);
}

/* A constant group that f16 holds exactly comes back exact, with every
 * code 0 and the smallest positive scale; U8 and U4 alike. */
static void quant_constant_exact(void **state)
{
    (void)state;
    for (uint32_t levels = 15; levels <= 255; levels += 240) {
        uint16_t lo, scale;
        pkv__quant_params(-2.5f, -2.5f, levels, &lo, &scale);
        assert_true(pkv__f16_to_f32(lo) == -2.5f);
        assert_int_equal(scale, 0x0001u);
        assert_int_equal(pkv__quant_code(-2.5f, -2.5f,
                                         pkv__f16_to_f32(scale), levels),
                         0);
        pkv__quant_params(0.0f, 0.0f, levels, &lo, &scale);
        assert_true(pkv__f16_to_f32(lo) == 0.0f);
        assert_int_equal(scale, 0x0001u);
        /* Full f16 range: the largest span there is. */
        pkv__quant_params(-65504.0f, 65504.0f, levels, &lo, &scale);
        assert_true(pkv__f16_to_f32(lo) == -65504.0f);
        assert_true(-65504.0 + levels * (double)pkv__f16_to_f32(scale) >=
                    65504.0);
        /* Codes saturate at the top level. */
        assert_int_equal(pkv__quant_code(1e9f, 0.0f, 1.0f, levels), levels);
    }
}

/* U4 codes: two a byte, channel 2i in the low nibble of byte i
 * (kv_layout.h), the layout every kernel reads. */
static void quant_u4_nibble_order(void **state)
{
    (void)state;
    enum { BS = 2, D = 8 };
    float src[BS * D];
    for (uint32_t i = 0; i < BS * D; i++)
        src[i] = (float)(i % D); /* channel c holds c in every token */
    /* Per token, one group of 8: lo 0, scale 7/15 rounded up to f16. */
    pkv__qformat f = {PKV_KV_DTYPE_U4, PKV_QUANT_GROUP_PER_TOKEN, 8};
    uint8_t part[PKV_LAYOUT_PART_BYTES(PKV_LAYOUT_U4, 2, 8, BS, D)];
    pkv__quant_part(src, BS, D, &f, part);
    for (uint32_t t = 0; t < BS; t++)
        for (uint32_t c = 0; c < D; c++) {
            uint8_t code =
                pkv__quant_code_at(part + t * D / 2, PKV_KV_DTYPE_U4, c);
            uint8_t byte = part[t * D / 2 + c / 2];
            assert_int_equal(code, c % 2 ? byte >> 4 : byte & 15);
        }
    /* Channel 7 is the group's max: code 15 in the high nibble of byte 3. */
    assert_int_equal(part[3] >> 4, 15);
    assert_int_equal(part[0] & 15, 0);
}

/* Per-channel groups put an outlier channel's range on that channel only;
 * per-token groups spread it over every channel of the token (U8: the
 * whole row; U4: the group of 32 channels that holds it). */
static void quant_per_channel_isolates_outliers(void **state)
{
    (void)state;
    uint32_t bs = 16, d = 64;
    float src[16 * 64];
    uint64_t rng = 7;
    for (uint32_t i = 0; i < bs * d; i++)
        src[i] = gen_outlier_channels(&rng, i / d, i % d);
    uint8_t part[16 * 64 + 4 * 64]; /* the largest: U8 per channel */
    float back[16 * 64];
    for (int32_t dtype = PKV_KV_DTYPE_U8; dtype <= PKV_KV_DTYPE_U4; dtype++) {
        double err[2];
        for (int g = 0; g < 2; g++) {
            pkv__qformat f = {dtype,
                              g ? PKV_QUANT_GROUP_PER_TOKEN
                                : PKV_QUANT_GROUP_PER_CHANNEL,
                              32};
            pkv__quant_part(src, bs, d, &f, part);
            pkv__dequant_part(part, bs, d, &f, back);
            double e = 0.0;
            for (uint32_t i = 0; i < bs * d; i++)
                if (i % d % 16 != 3) /* the ordinary channels */
                    e += fabs((double)src[i] - back[i]);
            err[g] = e;
        }
        assert_true(err[0] * 3.0 < err[1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_roundtrip_every_f16),
        cmocka_unit_test(half_rounding_modes),
        cmocka_unit_test(quant_bound_normal),
        cmocka_unit_test(quant_bound_constant),
        cmocka_unit_test(quant_bound_huge_ranges),
        cmocka_unit_test(quant_bound_denormals),
        cmocka_unit_test(quant_bound_outlier_channels),
        cmocka_unit_test(quant_constant_exact),
        cmocka_unit_test(quant_u4_nibble_order),
        cmocka_unit_test(quant_per_channel_isolates_outliers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
