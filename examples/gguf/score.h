/* SPDX-License-Identifier: MIT */
/*
 * How much a KV format changes a model's predictions, measured through
 * pkv (docs/fidelity.md): perplexity over a text, and top-1 agreement of
 * greedy decoding with an f32 cache. Each prints one JSON line.
 */
#ifndef PKV_EXAMPLE_GGUF_SCORE_H
#define PKV_EXAMPLE_GGUF_SCORE_H

#include "host.h"
#include "model.h"
#include "tokenizer.h"

/*
 * Perplexity of text[0, len) (read from the file name), as llama.cpp's
 * llama-perplexity computes it: the text tokenized (with flags,
 * gg_tokenize's, and BOS where the model's file asks for it), cut into
 * chunks of ctx >= 4 tokens (at most max_tokens in all), each chunk's
 * first token replaced by BOS where the file asks for it, and the
 * predictions
 * of its second half scored (positions ctx/2 .. ctx - 2). Every chunk is
 * a sequence in one engine. 0, or 1 after printing why.
 */
int gg_score_perplexity(gg_model *m, const gg_tokenizer *tok,
                        const char *name, const char *text, size_t len,
                        unsigned flags, uint32_t ctx, uint32_t max_tokens,
                        const gg_kv_choice *kv);

/*
 * The logits of positions from .. n - 1 of one prompt of n token ids, in
 * order, as f32 rows of vocab_size values written to path (the tests
 * compare them with an independent reference). 0, or 1 after printing why.
 */
int gg_score_logits(gg_model *m, int32_t *ids, uint32_t n, uint32_t from,
                    const gg_kv_choice *kv, const char *path);

/*
 * Top-1 agreement with an f32 cache: greedy decoding of max_new tokens
 * (fewer where a prompt and its answer would pass max_len tokens) from
 * each of 8 demo prompts with an f32 cache on the CPU backend, then the
 * same tokens run through the cache under test, counting the positions
 * where its argmax is the token f32 chose. 0, or 1 after printing why.
 */
int gg_score_agreement(gg_model *m, const gg_tokenizer *tok,
                       uint32_t max_new, uint32_t max_len,
                       const gg_kv_choice *kv);

#endif
