/* SPDX-License-Identifier: MIT */
/*
 * Inside the GGUF host's model: the logits, the output matrix times the
 * last layer's normed rows. ggml computes them, except for a few rows of
 * a Q8_0 matrix on an x86 CPU with AVX2, which logits.c computes itself
 * with the same operations in the same order as ggml's AVX2 product (the
 * set-up builds ggml for the CPU it runs on): bit for bit ggml's.
 *
 * Why: ggml's product of 2 to 8 rows (llamafile's tinyBLAS, tiles of 4
 * matrix rows by up to 4 rows, a second pass over the matrix for the rows
 * past 4) takes far longer than its one-row product, and an output matrix
 * is past the cache (Gemma 3's 262,144 x 640 in Q8_0, 178 MB): a step of
 * 2 rows cost 1.7x one row's. logits.c goes down the matrix a row at a
 * time, as the one-row product does, for all the rows at once: a step of
 * 2 rows now costs about one row's (pkv-bench serve's step costs).
 */
#ifndef PKV_EXAMPLE_GGUF_LOGITS_H
#define PKV_EXAMPLE_GGUF_LOGITS_H

#include <ggml.h>

#include <stdbool.h>
#include <stdint.h>

/* Whether gg_logits computes `rows` rows of `output` itself rather than
 * through ggml_mul_mat: 2 to 8 rows, a Q8_0 matrix of at most 2,048
 * columns, this CPU with AVX2, FMA and F16C. */
bool gg_logits_own(const struct ggml_tensor *output, uint32_t rows);

/* The node of the logits of x's rows (F32, contiguous, a row per column
 * of the result): ggml_mul_mat(output, x), or logits.c's node where
 * gg_logits_own says so. Either gives the same bits. */
struct ggml_tensor *gg_logits(struct ggml_context *ctx,
                              struct ggml_tensor *output,
                              struct ggml_tensor *x);

#endif
