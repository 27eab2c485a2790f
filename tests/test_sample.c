/* SPDX-License-Identifier: MIT */
/* The example hosts' sampling (examples/host/sample.c): greedy, the
 * nucleus cut of top-p, and draws that follow the softmax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sample.h"

#include <math.h>

/* Probabilities 0.5, 0.25, 0.125, 0.0625, ... as logits (log p). */
static void halving(float *logits, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        logits[i] = (float)(-(double)(i + 1) * log(2.0));
}

static void test_greedy(void **state)
{
    (void)state;
    float logits[5] = {0.1f, 2.0f, -1.0f, 1.99f, 0.0f};
    assert_int_equal(host_sample(logits, 5, 0.0f, 1.0f, NULL), 1);
    assert_int_equal(host_sample(logits, 5, 0.0f, 0.5f, NULL), 1);
    /* Past the runs of 8 that greedy compares at once: the first of two
     * equal maxima, one in the tail, one at index 0. */
    float many[101];
    for (uint32_t i = 0; i < 101; i++)
        many[i] = (float)((i * 37u) % 101u) / 101.0f;
    many[42] = 5.0f;
    many[77] = 5.0f;
    assert_int_equal(host_sample(many, 101, 0.0f, 1.0f, NULL), 42);
    many[100] = 6.0f;
    assert_int_equal(host_sample(many, 101, 0.0f, 1.0f, NULL), 100);
    many[0] = 7.0f;
    assert_int_equal(host_sample(many, 101, 0.0f, 1.0f, NULL), 0);
}

/* top_p 0.7 over 0.5, 0.25, 0.125, ...: the nucleus is the first two
 * tokens (0.75 >= 0.7), drawn 2:1. */
static void test_top_p_nucleus(void **state)
{
    (void)state;
    float logits[16];
    halving(logits, 16);
    uint64_t rng = 7;
    uint32_t counts[16] = {0};
    for (int i = 0; i < 30000; i++)
        counts[host_sample(logits, 16, 1.0f, 0.7f, &rng)]++;
    for (int t = 2; t < 16; t++)
        assert_int_equal(counts[t], 0);
    double ratio = (double)counts[0] / counts[1];
    assert_true(ratio > 1.85 && ratio < 2.15);
}

/* top_p 1: every token, in proportion (token 2 at 1/8 of the draws). */
static void test_temperature_follows_softmax(void **state)
{
    (void)state;
    float logits[16];
    halving(logits, 16);
    uint64_t rng = 11;
    uint32_t counts[16] = {0};
    for (int i = 0; i < 40000; i++)
        counts[host_sample(logits, 16, 1.0f, 1.0f, &rng)]++;
    double p2 = counts[2] / 40000.0;
    assert_true(p2 > 0.115 && p2 < 0.135);
    assert_true(counts[5] > 0);
}

/* A tiny top_p keeps the most likely token only. */
static void test_tiny_top_p_is_greedy(void **state)
{
    (void)state;
    float logits[16];
    halving(logits, 16);
    uint64_t rng = 3;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(host_sample(logits, 16, 1.0f, 1e-6f, &rng), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_top_p_nucleus),
        cmocka_unit_test(test_temperature_follows_softmax),
        cmocka_unit_test(test_tiny_top_p_is_greedy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
