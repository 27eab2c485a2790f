/* SPDX-License-Identifier: MIT */
/* Seeded random numbers and token sampling (sample.h). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>

uint64_t host_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double host_uniform(uint64_t *state)
{
    return ((double)(host_rand(state) >> 11) + 0.5) / 9007199254740992.0;
}

double host_normal(uint64_t *state)
{
    double u1 = host_uniform(state), u2 = host_uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint32_t host_lognormal_len(uint64_t *state, double median, double sigma,
                            uint32_t lo, uint32_t hi)
{
    double x = median * exp(sigma * host_normal(state));
    return x < lo ? lo : x > hi ? hi : (uint32_t)x;
}

typedef struct candidate {
    double p;
    int32_t id;
} candidate;

static int by_p_descending(const void *a, const void *b)
{
    double pa = ((const candidate *)a)->p, pb = ((const candidate *)b)->p;
    return pa < pb ? 1 : pa > pb ? -1 : 0;
}

/* Draw from the nucleus of probabilities p (summing to 1). A token whose
 * probability is below (1 - top_p) / (vocab - 1) can never be in it (the
 * others would already add up to top_p), so only the rest is sorted:
 * llama2.c's cut, which keeps this fast at a 262k vocabulary. */
static int32_t sample_nucleus(const double *p, uint32_t vocab, double top_p,
                              uint64_t *rng, int32_t fallback)
{
    candidate *c = malloc(vocab * sizeof *c);
    if (c == NULL)
        return fallback;
    double cutoff = vocab > 1 ? (1.0 - top_p) / (vocab - 1) : 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < vocab; i++)
        if (p[i] >= cutoff)
            c[n++] = (candidate){p[i], (int32_t)i};
    if (n == 0) { /* top_p near 0 over a flat distribution: the argmax */
        free(c);
        return fallback;
    }
    qsort(c, n, sizeof *c, by_p_descending);
    double mass = 0;
    uint32_t kept = 0;
    while (kept < n && (kept == 0 || mass < top_p))
        mass += c[kept++].p;
    double target = host_uniform(rng) * mass, acc = 0;
    int32_t chosen = c[kept - 1].id;
    for (uint32_t i = 0; i < kept; i++) {
        acc += c[i].p;
        if (acc >= target) {
            chosen = c[i].id;
            break;
        }
    }
    free(c);
    return chosen;
}

/* The first index of the largest logit. Runs of 8 are first compared as
 * a whole (a loop the compiler vectorises): at a 262k vocabulary the
 * plain loop was 2% of a decode step. */
static int32_t argmax(const float *logits, uint32_t vocab)
{
    uint32_t best = 0, i = 1;
    float top = logits[0];
    for (; i + 8 <= vocab; i += 8) {
        int above = 0;
        for (uint32_t k = 0; k < 8; k++)
            above |= logits[i + k] > top;
        if (!above)
            continue;
        for (uint32_t k = 0; k < 8; k++)
            if (logits[i + k] > top) {
                top = logits[i + k];
                best = i + k;
            }
    }
    for (; i < vocab; i++)
        if (logits[i] > top) {
            top = logits[i];
            best = i;
        }
    return (int32_t)best;
}

int32_t host_sample(const float *logits, uint32_t vocab, float temperature,
                    float top_p, uint64_t *rng)
{
    int32_t best = argmax(logits, vocab);
    if (!(temperature > 0))
        return best;
    double *p = malloc(vocab * sizeof *p);
    if (p == NULL)
        return best;
    double sum = 0;
    for (uint32_t i = 0; i < vocab; i++)
        sum += p[i] = exp((double)(logits[i] - logits[best]) / temperature);
    int32_t chosen = best;
    if (top_p < 1) {
        for (uint32_t i = 0; i < vocab; i++)
            p[i] /= sum;
        chosen = sample_nucleus(p, vocab, top_p, rng, chosen);
    } else {
        double target = host_uniform(rng) * sum, acc = 0;
        for (uint32_t i = 0; i < vocab; i++) {
            acc += p[i];
            if (acc >= target) {
                chosen = (int32_t)i;
                break;
            }
        }
    }
    free(p);
    return chosen;
}
