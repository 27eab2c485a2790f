/* SPDX-License-Identifier: MIT */
/*
 * Sampling for pkv's example hosts: a seeded random stream and the choice of
 * the next token from a row of logits.
 */
#ifndef PKV_EXAMPLE_HOST_SAMPLE_H
#define PKV_EXAMPLE_HOST_SAMPLE_H

#include <stdint.h>

/* splitmix64, and a uniform in (0, 1) and a normal drawn from it. */
uint64_t host_rand(uint64_t *state);
double host_uniform(uint64_t *state);
double host_normal(uint64_t *state);
/* A lognormal length with this median and sigma, clipped to [lo, hi]: the
 * synthetic workloads' prompt and output lengths. */
uint32_t host_lognormal_len(uint64_t *state, double median, double sigma,
                            uint32_t lo, uint32_t hi);

/*
 * The next token from one row of logits: the argmax when temperature <= 0
 * (rng unused, may be NULL); otherwise drawn from softmax(logits /
 * temperature) restricted to the nucleus, the most likely tokens whose
 * probabilities add up to top_p (1 or more: every token). rng is the
 * caller's splitmix64 state: one per sequence makes the draw independent
 * of batching.
 */
int32_t host_sample(const float *logits, uint32_t vocab, float temperature,
                    float top_p, uint64_t *rng);

#endif
