/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the pkv kernels (OpenCL C 1.2, no extension). The host
 * builds one program from src/kv_layout.h, src/kv_step.h, this file,
 * tensor_io.cl, kv_append.cl, paged_attention.cl, paged_attention_tiled.cl
 * and block_copy.cl, in that order.
 *
 * Contraction is off for the whole program: the kernels then round every
 * product and sum as the CPU reference (src/backend_cpu.c, src/quant.c)
 * does, so f32 and f16 caches and the u8 freeze match it bit for bit, and
 * attention differs from it only by exp() (a few ulps allowed by OpenCL).
 */
#pragma OPENCL FP_CONTRACT OFF

/* f16 bits <-> f32 in integer arithmetic, the exact algorithm of
 * src/half.c, so that the stored bytes never depend on the device's
 * rounding of vstore_half or its denormal mode. */
static inline float pkv_f16_to_f32(uint h)
{
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 0x1fu)
        return as_float(sign | 0x7f800000u | (m << 13));
    if (e != 0u)
        return as_float(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0u)
        return as_float(sign);
    e = 113u;
    while ((m & 0x400u) == 0u) {
        m <<= 1;
        e--;
    }
    return as_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

static inline uint pkv_f32_to_f16(float x)
{
    uint u = as_uint(x);
    uint sign = (u >> 16) & 0x8000u;
    uint a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u);
    if (a >= 0x477ff000u)
        return sign | 0x7c00u;
    if (a < 0x38800000u) {
        uint e = a >> 23;
        if (e < 102u)
            return sign;
        uint m = (a & 0x7fffffu) | 0x800000u;
        uint shift = 126u - e;
        uint q = m >> shift;
        uint r = m & ((1u << shift) - 1u);
        uint half_way = 1u << (shift - 1u);
        if (r > half_way || (r == half_way && (q & 1u)))
            q++;
        return sign | q;
    }
    uint q = (a >> 13) - (112u << 10);
    uint r = a & 0x1fffu;
    if (r > 0x1000u || (r == 0x1000u && (q & 1u)))
        q++;
    return sign | q;
}

static inline uint pkv_f16_down(float x)
{
    uint h = pkv_f32_to_f16(x);
    if (x == x && pkv_f16_to_f32(h) > x)
        h = h == 0x0000u ? 0x8001u : ((h & 0x8000u) ? h + 1u : h - 1u);
    return h;
}

static inline uint pkv_f16_up(float x)
{
    uint h = pkv_f32_to_f16(x);
    if (x == x && pkv_f16_to_f32(h) < x)
        h = h == 0x8000u ? 0x0001u : ((h & 0x8000u) ? h - 1u : h + 1u);
    return h;
}
