/* SPDX-License-Identifier: MIT */
/*
 * Inside the GGUF host's model: the logits, the output matrix times the
 * last layer's normed rows. ggml computes them, except for a few rows of
 * a Q8_0 matrix on an x86 CPU with AVX-512 VNNI, which logits.c computes
 * itself with the same sums in the same order (bit for bit ggml's).
 *
 * Why: ggml's product of 2 to 7 rows (llamafile's tinyBLAS) goes over
 * the matrix more than once, and an output matrix is past the cache
 * (Gemma 3's 262,144 x 640 in Q8_0, 178 MB): 2 rows took 1.9x one row's
 * time. logits.c reads each block of the matrix once for all the rows.
 */
#ifndef PKV_EXAMPLE_GGUF_LOGITS_H
#define PKV_EXAMPLE_GGUF_LOGITS_H

#include <ggml.h>

#include <stdbool.h>
#include <stdint.h>

/* Whether gg_logits computes `rows` rows of `output` itself rather than
 * through ggml_mul_mat: 2 to 8 rows, a Q8_0 matrix of at most 2,048
 * columns, this CPU with AVX2, FMA, F16C, AVX512VL and AVX512-VNNI. */
bool gg_logits_own(const struct ggml_tensor *output, uint32_t rows);

/* The node of the logits of x's rows (F32, contiguous, a row per column
 * of the result): ggml_mul_mat(output, x), or logits.c's node where
 * gg_logits_own says so. Either gives the same bits. */
struct ggml_tensor *gg_logits(struct ggml_context *ctx,
                              struct ggml_tensor *output,
                              struct ggml_tensor *x);

#endif
