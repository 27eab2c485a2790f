/* SPDX-License-Identifier: MIT */
/*
 * U8 asymmetric quantizer (reference), the contract of DESIGN.md section 4.
 *
 * A group of values x (one channel over a block's tokens, or one token over
 * a head's channels) is stored as codes q in 0..255 and two f16 parameters,
 * lo and scale, with x' = lo + q * scale. The parameters are rounded to f16
 * first (lo down, scale up, so that lo + 255 * scale >= max(x) still holds
 * exactly) and the codes are computed against the stored values, so
 *
 *     |x - x'| <= scale / 2 + 2^-20 * (|lo| + 256 * scale)
 *
 * for every element, with scale the stored (f16) scale. The second term is
 * the f32 rounding of the quantizer's (x - lo) / scale and of the reader's
 * lo + q * scale; it is below 2^-12 * scale + 2^-20 * |lo|.
 *
 * Inputs must be finite and within +-65504 (the f16 range, so that lo is
 * representable): the engine zeroes every K or V row that is not before
 * a backend sees it (mark_bad_rows in engine_step.c).
 */
#ifndef PKV_QUANT_H
#define PKV_QUANT_H

#include "pkv/pkv.h"

#include <stddef.h>
#include <stdint.h>

/* The stored parameters (f16 bits) for a group whose values span
 * [lo, hi], lo <= hi, both finite and within +-65504. scale is never 0:
 * a constant group that lo represents exactly gets the smallest f16
 * subnormal (2^-24), and its codes are all 0. */
void pkv__quant_params(float lo, float hi, uint16_t *lo16, uint16_t *scale16);

/* The code of x against stored parameters (as f32). */
uint8_t pkv__quant_code(float x, float lo, float scale);

/* The value a code stands for: lo + q * scale in f32, as every reader
 * (CPU and kernels) computes it. */
float pkv__quant_value(uint8_t q, float lo, float scale);

/* Quantize one full block part: src holds block_size tokens of head_dim
 * f32 values ([token][channel]), finite and within +-65504; part receives
 * codes and parameters laid out as kv_layout.h says, for group
 * PKV_QUANT_PER_CHANNEL or PKV_QUANT_PER_TOKEN.
 * block_size <= 256, head_dim <= 512. */
void pkv__quant_part(const float *src, uint32_t block_size,
                     uint32_t head_dim, int32_t group, uint8_t *part);

/* Dequantize one full block part into dst ([token][channel] f32). */
void pkv__dequant_part(const uint8_t *part, uint32_t block_size,
                       uint32_t head_dim, int32_t group, float *dst);

#endif
