/* SPDX-License-Identifier: MIT */
/* f16 conversion and the U8 quantizer: exactness of the conversions and the
 * per-element bound |x - x'| <= scale / 2 + tolerance (quant.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "half.h"
#include "kv_layout.h"
#include "quant.h"
#include "test_rng.h"

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

/* Quantize a part, read it back, and check every element against the
 * bound with its group's stored parameters. Returns the worst error over
 * scale (<= 0.5 + tolerance). */
static double check_part(const float *src, uint32_t bs, uint32_t d,
                         int32_t group)
{
    size_t bytes = PKV_LAYOUT_PART_BYTES((size_t)PKV_LAYOUT_U8, (size_t)group,
                                         (size_t)bs, (size_t)d);
    uint8_t *part = malloc(bytes);
    float *back = malloc((size_t)bs * d * sizeof *back);
    assert_non_null(part);
    assert_non_null(back);
    pkv__quant_part(src, bs, d, group, part);
    pkv__dequant_part(part, bs, d, group, back);
    uint32_t groups = PKV_LAYOUT_U8_GROUPS(group, bs, d);
    double worst = 0.0;
    for (uint32_t g = 0; g < groups; g++) {
        uint16_t l16, s16;
        memcpy(&l16, part + PKV_LAYOUT_U8_LO_OFFSET(bs, d) + 2u * g, 2);
        memcpy(&s16, part + PKV_LAYOUT_U8_SCALE_OFFSET(group, bs, d) + 2u * g,
               2);
        double lo = pkv__f16_to_f32(l16), scale = pkv__f16_to_f32(s16);
        assert_true(scale > 0.0 && isfinite(scale) && isfinite(lo));
        double tol = ldexp(fabs(lo) + 256.0 * scale, -20);
        uint32_t n = group == PKV_QUANT_PER_CHANNEL ? bs : d;
        double mn = INFINITY, mx = -INFINITY;
        for (uint32_t i = 0; i < n; i++) {
            size_t at = group == PKV_QUANT_PER_CHANNEL ? (size_t)i * d + g
                                                       : (size_t)g * d + i;
            double x = src[at], err = fabs(x - (double)back[at]);
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
            assert_true(err <= scale / 2 + tol);
            worst = err / scale > worst ? err / scale : worst;
        }
        /* The stored range covers the group: lo rounded down, scale up. */
        assert_true(lo <= mn);
        assert_true(lo + 255.0 * scale >= mx);
    }
    free(part);
    free(back);
    return worst;
}

static const uint32_t BLOCK_SIZES[] = {1, 8, 16, 32, 128};
static const uint32_t HEAD_DIMS[] = {4, 64, 80, 128, 256};

typedef float (*gen_fn)(uint64_t *rng, uint32_t token, uint32_t channel);

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
            check_part(src, bs, d, PKV_QUANT_PER_CHANNEL);
            check_part(src, bs, d, PKV_QUANT_PER_TOKEN);
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
 * code 0 and the smallest positive scale. */
static void quant_constant_exact(void **state)
{
    (void)state;
    uint16_t lo, scale;
    pkv__quant_params(-2.5f, -2.5f, &lo, &scale);
    assert_true(pkv__f16_to_f32(lo) == -2.5f);
    assert_int_equal(scale, 0x0001u);
    assert_int_equal(pkv__quant_code(-2.5f, -2.5f, pkv__f16_to_f32(scale)),
                     0);
    pkv__quant_params(0.0f, 0.0f, &lo, &scale);
    assert_true(pkv__f16_to_f32(lo) == 0.0f);
    assert_int_equal(scale, 0x0001u);
    /* Full f16 range: the largest span there is. */
    pkv__quant_params(-65504.0f, 65504.0f, &lo, &scale);
    assert_true(pkv__f16_to_f32(lo) == -65504.0f);
    assert_true(-65504.0 + 255.0 * pkv__f16_to_f32(scale) >= 65504.0);
}

/* Per-channel groups put an outlier channel's range on that channel only;
 * per-token groups spread it over every channel of the token. */
static void quant_per_channel_isolates_outliers(void **state)
{
    (void)state;
    uint32_t bs = 16, d = 64;
    float src[16 * 64];
    uint64_t rng = 7;
    for (uint32_t i = 0; i < bs * d; i++)
        src[i] = gen_outlier_channels(&rng, i / d, i % d);
    uint8_t part[16 * 64 + 4 * 64];
    float back[16 * 64];
    double err[2];
    for (int g = 0; g < 2; g++) {
        int32_t group = g ? PKV_QUANT_PER_TOKEN : PKV_QUANT_PER_CHANNEL;
        pkv__quant_part(src, bs, d, group, part);
        pkv__dequant_part(part, bs, d, group, back);
        double e = 0.0;
        for (uint32_t i = 0; i < bs * d; i++)
            if (i % d % 16 != 3) /* the ordinary channels */
                e += fabs((double)src[i] - back[i]);
        err[g] = e;
    }
    assert_true(err[0] * 5.0 < err[1]);
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
        cmocka_unit_test(quant_per_channel_isolates_outliers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
