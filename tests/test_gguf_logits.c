/* SPDX-License-Identifier: MIT */
/* The GGUF host's logits (examples/gguf/logits.h): where the host computes
 * them itself, the same bits as ggml_mul_mat's, at every row count it
 * takes and on each side of it; and which products it takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "logits.h"
#include "rng.h"

#include <ggml-cpu.h>
#include <ggml.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MATRIX_ROWS = 1001, MAX_X_ROWS = 10 };

/* A Q8_0 matrix of MATRIX_ROWS rows of k columns in ctx: normal values,
 * one row in 7 scaled by 100 so that the rows' sums span magnitudes (an
 * order of additions other than ggml's then shows in the low bits). */
static struct ggml_tensor *q8_matrix(struct ggml_context *ctx, int64_t k,
                                     uint64_t *rng)
{
    struct ggml_tensor *w =
        ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, k, MATRIX_ROWS);
    float *row = malloc((size_t)k * sizeof *row);
    assert_non_null(row);
    for (int64_t r = 0; r < MATRIX_ROWS; r++) {
        test_normal_fill(rng, row, (size_t)k);
        if (r % 7 == 0)
            for (int64_t i = 0; i < k; i++)
                row[i] *= 100.0f;
        ggml_quantize_chunk(GGML_TYPE_Q8_0, row,
                            (char *)w->data + (size_t)r * w->nb[1], 0, 1, k,
                            NULL);
    }
    free(row);
    return w;
}

/* gg_logits against ggml_mul_mat for 1 to MAX_X_ROWS rows of normal
 * values, with 2 threads (the matrix's rows split between them, an odd
 * count): the same bits. Returns how many row counts gg_logits took. */
static int compare_logits(int64_t k, uint64_t seed)
{
    uint64_t rng = seed;
    /* Every row count's x, both products and graph, in one context, and
     * each compute's work buffer (x quantized) beside them. */
    size_t all_rows = MAX_X_ROWS * (MAX_X_ROWS + 1) / 2;
    size_t bytes = ggml_row_size(GGML_TYPE_Q8_0, k) * MATRIX_ROWS +
                   all_rows * ((size_t)k + 2u * MATRIX_ROWS) * sizeof(float) +
                   all_rows * ggml_row_size(GGML_TYPE_Q8_0, k) +
                   MAX_X_ROWS * (8 * ggml_tensor_overhead() +
                                 ggml_graph_overhead() + (1u << 16)) +
                   (1u << 20);
    struct ggml_init_params p = {bytes, NULL, false};
    struct ggml_context *ctx = ggml_init(p);
    assert_non_null(ctx);
    struct ggml_tensor *w = q8_matrix(ctx, k, &rng);
    int own = 0;
    for (int64_t n = 1; n <= MAX_X_ROWS; n++) {
        struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n);
        test_normal_fill(&rng, x->data, (size_t)(k * n));
        struct ggml_tensor *want = ggml_mul_mat(ctx, w, x);
        struct ggml_tensor *got = gg_logits(ctx, w, x);
        own += gg_logits_own(w, (uint32_t)n);
        struct ggml_cgraph *g = ggml_new_graph(ctx);
        ggml_build_forward_expand(g, want);
        ggml_build_forward_expand(g, got);
        assert_int_equal(ggml_graph_compute_with_ctx(ctx, g, 2),
                         GGML_STATUS_SUCCESS);
        assert_int_equal(got->ne[0], MATRIX_ROWS);
        assert_int_equal(got->ne[1], n);
        size_t differ = 0;
        const float *a = want->data, *b = got->data;
        for (int64_t i = 0; i < MATRIX_ROWS * n; i++)
            differ += memcmp(&a[i], &b[i], sizeof *a) != 0;
        if (differ != 0)
            fprintf(stderr, "k %lld, %lld rows: %zu logits differ\n",
                    (long long)k, (long long)n, differ);
        assert_int_equal(differ, 0);
    }
    ggml_free(ctx);
    return own;
}

/* Gemma 3's width (20 blocks) and SmolLM2's (18). */
static void same_bits_as_ggml(void **state)
{
    (void)state;
    int own = compare_logits(640, 1);
    assert_int_equal(compare_logits(576, 2), own);
    if (own == 0)
        skip(); /* this CPU lacks AVX2: ggml's product throughout */
    assert_int_equal(own, 7); /* 2 to 8 rows */
}

/* The widest matrix the host takes (64 blocks) and one block past it
 * (ggml's). */
static void widest_matrix(void **state)
{
    (void)state;
    int own = compare_logits(2048, 3);
    assert_int_equal(compare_logits(2080, 4), 0);
    if (own == 0)
        skip();
    assert_int_equal(own, 7);
}

/* Which products the host takes: one row is ggml's (its one-row product
 * reads the matrix once already), 9 rows or more are, a matrix wider
 * than 2,048 columns is, and any type but Q8_0 is. */
static void what_it_takes(void **state)
{
    (void)state;
    struct ggml_init_params p = {16 * ggml_tensor_overhead(), NULL, true};
    struct ggml_context *ctx = ggml_init(p);
    assert_non_null(ctx);
    struct ggml_tensor *q8 = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, 640, 64);
    struct ggml_tensor *q4 = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, 640, 64);
    struct ggml_tensor *f32 = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 640, 64);
    struct ggml_tensor *wide =
        ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, 2080, 64);
    assert_false(gg_logits_own(q8, 0));
    assert_false(gg_logits_own(q8, 1));
    assert_false(gg_logits_own(q8, 9));
    for (uint32_t n = 1; n <= 9; n++) {
        assert_false(gg_logits_own(q4, n));
        assert_false(gg_logits_own(f32, n));
        assert_false(gg_logits_own(wide, n));
    }
    bool own = gg_logits_own(q8, 2);
    for (uint32_t n = 3; n <= 8; n++)
        assert_int_equal(gg_logits_own(q8, n), own);
    ggml_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_bits_as_ggml),
        cmocka_unit_test(widest_matrix),
        cmocka_unit_test(what_it_takes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
