/* SPDX-License-Identifier: MIT */
/*
 * kv_append: write one layer's K or V rows of a step into the cache.
 *
 * f32/f16 caches: each row goes to its slot (pkv_kv_append).
 * u8 and u4 caches (DESIGN.md section 4): a block is quantized once, when
 * it is full. The host lists the blocks this step fills (freezes);
 * pkv_kv_freeze quantizes each from the tokens already in its sequence's
 * staging tail plus this step's rows, and runs first; then pkv_kv_append
 * writes the rows of blocks still partly filled into the tails. Doing it
 * in that order lets a long prefill freeze many blocks of one sequence at
 * once without the rows of one block overwriting the tail another still
 * needs.
 *
 * The freeze follows src/quant.c exactly: lo rounded down and scale rounded
 * up to f16 (scale the smallest f16 with lo + L * scale >= max, checked
 * exactly; L = 255 for u8, 15 for u4), codes floor((x - lo) / scale + 0.5)
 * against the stored values.
 * With a correctly rounded f32 division (the host asks for it when the
 * device has it) the frozen bytes equal the CPU backend's.
 *
 * One work-item per (row or frozen block, kv head), one launch for K and
 * one for V. Each work-item streams one contiguous row (append) or one
 * block part (freeze).
 */

/* Value i of a K/V source tensor, f32 or f16. */
static inline float pkv_load1(__global const float *t, ulong i, uint is_f16)
{
    if (is_f16)
        return vload_half(0, (__global const half *)t + i);
    return t[i];
}

/* lo + n * s >= hi, exactly (n = 255 or 15): n * s is exact in f32 (an
 * f16 mantissa times 8 bits), and TwoSum gives the rounding error of the
 * sum. */
static inline int pkv_covers(float lo, float s, float hi, float n)
{
    float p = n * s;
    float sum = lo + p;
    float bb = sum - lo;
    float err = (lo - (sum - bb)) + (p - bb);
    return sum > hi || (sum == hi && err >= 0.0f);
}

/* src/quant.c pkv__quant_params: the smallest positive f16 scale that
 * covers [lo16, hi] with codes 0..n. */
static inline void pkv_quant_params(float mn, float mx, float n, uint *lo16,
                                    uint *scale16)
{
    uint l = pkv_f16_down(mn);
    float lf = pkv_f16_to_f32(l);
    uint s = pkv_f16_up((mx - lf) / n);
    if (s == 0u)
        s = 1u;
    while (!pkv_covers(lf, pkv_f16_to_f32(s), mx, n))
        s++;
    while (s > 1u && pkv_covers(lf, pkv_f16_to_f32(s - 1u), mx, n))
        s--;
    *lo16 = l;
    *scale16 = s;
}

static inline uchar pkv_quant_code(float x, float lo, float scale, float n)
{
    float t = floor((x - lo) / scale + 0.5f);
    if (t <= 0.0f)
        return (uchar)0;
    if (t >= n)
        return (uchar)n;
    return (uchar)t;
}

/* Token t, channel c of the block being frozen. */
#define PKV_FREEZE_VALUE(t, c)                                               \
    ((t) < in_tail ? tail[(ulong)(t) * d + (c)]                              \
                   : pkv_load1(src,                                          \
                               src_off + ((ulong)(first_row + (t) - in_tail) \
                                              * hkv + h) * d + (c),          \
                               src_f16))

/* Store code q of token t, channel c: a byte (u8), or a nibble (u4, the
 * even channel low; the odd channel of a pair always follows its even
 * one, so the first write of a byte may drop what it held). */
static inline void pkv_put_code(__global uchar *part, uint pd, uint t,
                                uint c, uint d, uchar q)
{
    if (pd != PKV_LAYOUT_U4) {
        part[(ulong)t * d + c] = q;
        return;
    }
    __global uchar *byte = part + (ulong)t * (d / 2u) + c / 2u;
    *byte = c % 2u == 0u ? q : (uchar)(*byte | (q << 4));
}

/* Freeze the listed blocks: one work-item per (block, kv head) quantizes one
 * part of dtype pd (u8 or u4) with group `group` (u4g: channels of a u4
 * per-token group). */
__kernel void pkv_kv_freeze(__global uchar *arena, __global float *stages,
                            __global const float *src, ulong src_off,
                            uint src_f16, __global const uint *step,
                            uint num_freezes, uint kv, uint pd, uint group,
                            uint u4g, uint hkv, uint d, uint bs,
                            uint head_bytes, uint k_part_bytes,
                            uint layer_block_bytes, uint stage_floats,
                            uint layer)
{
    uint s = (uint)get_global_id(0), h = (uint)get_global_id(1);
    if (s >= num_freezes || h >= hkv)
        return;
    __global const uint *freeze =
        step + step[PKV_STEP_FREEZES] + s * PKV_FREEZE_WORDS;
    ulong blk = freeze[PKV_FREEZE_BLOCK];
    ulong stage = freeze[PKV_FREEZE_STAGE];
    uint in_tail = freeze[PKV_FREEZE_IN_TAIL];
    uint first_row = freeze[PKV_FREEZE_FIRST_ROW];
    uint window = freeze[PKV_FREEZE_WINDOW];
    __global uchar *part = arena + blk * layer_block_bytes +
                           (ulong)h * head_bytes + (kv ? k_part_bytes : 0u);
    __global const float *tail =
        stages + stage * stage_floats +
        ((ulong)(layer * hkv + h) * 2u + kv) * bs * d;
    __global ushort *lo_p =
        (__global ushort *)(part + PKV_LAYOUT_Q_LO_OFFSET(pd, bs, d));
    __global ushort *scale_p = (__global ushort *)(
        part + PKV_LAYOUT_Q_SCALE_OFFSET(pd, group, u4g, bs, d));
    float n = (float)PKV_LAYOUT_Q_LEVELS(pd);
    uint lo16, scale16;
    if (group == PKV_LAYOUT_PER_CHANNEL) {
        for (uint c = 0; c < d; c++) {
            float mn = PKV_FREEZE_VALUE(0u, c), mx = mn;
            for (uint t = 1; t < bs; t++) {
                float x = PKV_FREEZE_VALUE(t, c);
                mn = x < mn ? x : mn;
                mx = x > mx ? x : mx;
            }
            pkv_quant_params(mn, mx, n, &lo16, &scale16);
            lo_p[c] = (ushort)lo16;
            scale_p[c] = (ushort)scale16;
            float lo = pkv_f16_to_f32(lo16), sc = pkv_f16_to_f32(scale16);
            for (uint t = 0; t < bs; t++)
                pkv_put_code(part, pd, t, c, d,
                             pkv_quant_code(PKV_FREEZE_VALUE(t, c), lo, sc, n));
        }
    } else {
        uint w = PKV_LAYOUT_Q_WIDTH(pd, u4g, d);
        for (uint t = 0; t < bs; t++)
            for (uint c0 = 0; c0 < d; c0 += w) {
                float mn = PKV_FREEZE_VALUE(t, c0), mx = mn;
                for (uint c = c0 + 1u; c < c0 + w; c++) {
                    float x = PKV_FREEZE_VALUE(t, c);
                    mn = x < mn ? x : mn;
                    mx = x > mx ? x : mx;
                }
                pkv_quant_params(mn, mx, n, &lo16, &scale16);
                uint g = t * (d / w) + c0 / w;
                lo_p[g] = (ushort)lo16;
                scale_p[g] = (ushort)scale16;
                float lo = pkv_f16_to_f32(lo16);
                float sc = pkv_f16_to_f32(scale16);
                for (uint c = c0; c < c0 + w; c++)
                    pkv_put_code(
                        part, pd, t, c, d,
                        pkv_quant_code(PKV_FREEZE_VALUE(t, c), lo, sc, n));
            }
    }
    /* The rollback window: the block's f32 rows, for an exact cut. */
    if (window != PKV_STEP_NO_TAIL) {
        __global float *keep =
            stages + (ulong)window * stage_floats +
            ((ulong)(layer * hkv + h) * 2u + kv) * bs * d;
        for (uint t = 0; t < bs; t++)
            for (uint c = 0; c < d; c++)
                keep[(ulong)t * d + c] = PKV_FREEZE_VALUE(t, c);
    }
}

__kernel void pkv_kv_append(__global uchar *arena, __global float *stages,
                            __global const float *src, ulong src_off,
                            uint src_f16, __global const uint *step,
                            uint num_tokens, uint kv, uint dtype, uint hkv,
                            uint d, uint bs, uint head_bytes,
                            uint k_part_bytes, uint layer_block_bytes,
                            uint stage_floats, uint layer)
{
    uint r = (uint)get_global_id(0), h = (uint)get_global_id(1);
    if (r >= num_tokens || h >= hkv)
        return;
    ulong in = src_off + ((ulong)r * hkv + h) * d;
    __global const uint *slot2 = step + step[PKV_STEP_SLOTS] + 2u * r;
    ulong slot = (ulong)slot2[0] | ((ulong)slot2[1] << 32);
    ulong blk = slot / bs;
    uint off = (uint)(slot % bs);
    __global uchar *part = arena + blk * layer_block_bytes +
                           (ulong)h * head_bytes + (kv ? k_part_bytes : 0u);
    if (dtype == PKV_LAYOUT_F32) {
        __global float *dst = (__global float *)part + (ulong)off * d;
        for (uint c = 0; c < d; c += 4u)
            vstore4(pkv_load4(src, in + c, src_f16), 0, dst + c);
    } else if (dtype == PKV_LAYOUT_F16) {
        __global ushort *dst = (__global ushort *)part + (ulong)off * d;
        for (uint c = 0; c < d; c += 4u) {
            float4 x = pkv_load4(src, in + c, src_f16);
            ushort4 y = (ushort4)(
                (ushort)pkv_f32_to_f16(x.x), (ushort)pkv_f32_to_f16(x.y),
                (ushort)pkv_f32_to_f16(x.z), (ushort)pkv_f32_to_f16(x.w));
            vstore4(y, 0, dst + c);
        }
    } else {
        uint tail = step[step[PKV_STEP_ROW_TAIL] + r];
        if (tail == PKV_STEP_NO_TAIL)
            return;
        __global float *dst =
            stages + (ulong)tail * stage_floats +
            (((ulong)(layer * hkv + h) * 2u + kv) * bs + off) * d;
        for (uint c = 0; c < d; c += 4u)
            vstore4(pkv_load4(src, in + c, src_f16), 0, dst + c);
    }
}
