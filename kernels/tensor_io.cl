/* SPDX-License-Identifier: MIT */
/*
 * Reading what every program reads (OpenCL C 1.2): the host's q and out
 * tensors, f32 or f16 when the host hands a half-precision cl_mem, and the
 * cache's K and V rows, from a block part (kv_layout.h) or a U8 staging
 * tail. Part of the generic program and of every decode program
 * (src/opencl/program.c).
 */

/* The programs concatenate kv_layout.h before this file; pkv-bench's
 * kernel builds include it. */
#ifndef PKV_KV_LAYOUT_H
#include "kv_layout.h"
#endif

/* Element i of an attend tensor: f32, or f16 when is_f16 (the host's
 * cl_mem tensors may be either; host tensors arrive as f32). */
static inline float4 pkv_load4(__global const float *t, ulong i, uint is_f16)
{
    if (is_f16)
        return vload_half4(0, (__global const half *)t + i);
    return vload4(0, t + i);
}

static inline void pkv_store4(float4 x, __global float *t, ulong i,
                              uint is_f16)
{
    if (is_f16)
        vstore_half4_rte(x, 0, (__global half *)t + i);
    else
        vstore4(x, 0, t + i);
}

/* The four u4 codes of channels 4x .. 4x + 3 in a row of codes (two a
 * byte, the even channel in the low nibble: kv_layout.h). */
static inline float4 pkv_u4_codes4(__global const uchar *row, uint x)
{
    uchar2 b = vload2(x, row);
    return convert_float4((uchar4)(b.x & 15, b.x >> 4, b.y & 15, b.y >> 4));
}

/* Channels 4x .. 4x + 3 of token t of a block part stored as pd
 * (PKV_LAYOUT_F32, _F16, _U8 or _U4; a staging tail holds F32 rows),
 * quantized parts dequantised with their group parameters (u4g: the
 * channels of a u4 per-token group). */
static inline float4 pkv_kv_row4(__global const uchar *part, int pd,
                                 int group, uint u4g, uint t, uint x, uint d,
                                 uint bs)
{
    if (pd == PKV_LAYOUT_F32)
        return vload4(x, (__global const float *)part + (ulong)t * d);
    if (pd == PKV_LAYOUT_F16)
        return vload_half4(x, (__global const half *)part + (ulong)t * d);
    float4 code = pd == PKV_LAYOUT_U4
                      ? pkv_u4_codes4(part + (ulong)t * (d / 2u), x)
                      : convert_float4(vload4(x, part + (ulong)t * d));
    __global const half *lo =
        (__global const half *)(part + PKV_LAYOUT_Q_LO_OFFSET(pd, bs, d));
    __global const half *sc =
        (__global const half *)(part + PKV_LAYOUT_Q_SCALE_OFFSET(
                                           pd, group, u4g, bs, d));
    if (group == PKV_LAYOUT_PER_CHANNEL)
        return fma(code, vload_half4(x, sc), vload_half4(x, lo));
    uint w = PKV_LAYOUT_Q_WIDTH(pd, u4g, d);
    uint g = t * (d / w) + 4u * x / w;
    return fma(code, (float4)vload_half(g, sc), (float4)vload_half(g, lo));
}

/* The f32 K rows of kv head h in staging tail `stage`, whose layer starts
 * layer_offset floats in (V rows follow at bs * d). */
static inline __global const float *
pkv_tail_rows(__global const float *stages, ulong stage, uint stage_floats,
              ulong layer_offset, uint h, uint bs, uint d)
{
    return stages + stage * stage_floats + layer_offset +
           (ulong)h * 2u * bs * d;
}
