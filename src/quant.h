/* SPDX-License-Identifier: MIT */
/*
 * U8 and U4 asymmetric quantizer (reference), the contract of DESIGN.md
 * section 4.
 *
 * A group of values x (one channel over a block's tokens, or one token's
 * channels: all of a head's for U8, u4_group of them for U4) is stored as
 * codes q in 0..L (L = 255 for U8, 15 for U4) and two f16 parameters, lo
 * and scale, with x' = lo + q * scale. The parameters are rounded to f16
 * first (lo down, scale up, so that lo + L * scale >= max(x) still holds
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

/* How one quantized part stores its values: dtype PKV_KV_DTYPE_U8 or
 * PKV_KV_DTYPE_U4 (a part's own, kv_layout.h), group
 * PKV_QUANT_GROUP_PER_CHANNEL or _PER_TOKEN, and u4_group, the channels
 * of a U4 per-token group (a multiple of 4 dividing head_dim; ignored
 * otherwise). */
typedef struct pkv__qformat {
    int32_t dtype;
    int32_t group;
    uint32_t u4_group;
} pkv__qformat;

/* Whether width channels can form a U4 per-token group of a head_dim-wide
 * row: a multiple of 8 dividing head_dim (kernels read codes 8 at a
 * time), or the whole row. */
int pkv__u4_group_ok(uint32_t width, uint32_t head_dim);

/* The largest code of dtype: 255 (U8) or 15 (U4). */
uint32_t pkv__quant_levels(int32_t dtype);

/* The stored parameters (f16 bits) for a group whose values span
 * [lo, hi], lo <= hi, both finite and within +-65504, with codes
 * 0..levels. scale is never 0: a constant group that lo represents
 * exactly gets the smallest f16 subnormal (2^-24), and its codes are
 * all 0. */
void pkv__quant_params(float lo, float hi, uint32_t levels, uint16_t *lo16,
                       uint16_t *scale16);

/* The code of x against stored parameters (as f32), in 0..levels. */
uint8_t pkv__quant_code(float x, float lo, float scale, uint32_t levels);

/* The value a code stands for: lo + q * scale in f32, as every reader
 * (CPU and kernels) computes it. */
float pkv__quant_value(uint8_t q, float lo, float scale);

/* Quantize one full block part: src holds block_size tokens of head_dim
 * f32 values ([token][channel]), finite and within +-65504; part receives
 * codes and parameters laid out as kv_layout.h says for format f.
 * block_size <= 256, head_dim <= 512. */
void pkv__quant_part(const float *src, uint32_t block_size,
                     uint32_t head_dim, const pkv__qformat *f, uint8_t *part);

/* Dequantize one full block part into dst ([token][channel] f32). */
void pkv__dequant_part(const uint8_t *part, uint32_t block_size,
                       uint32_t head_dim, const pkv__qformat *f, float *dst);

/* Code of channel c of a part's row (U4: its nibble). */
uint8_t pkv__quant_code_at(const uint8_t *row, int32_t dtype, uint32_t c);

#endif
