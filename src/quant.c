/* SPDX-License-Identifier: MIT */
/* The U8 quantizer, the reference every kernel follows (quant.h). */
#include "quant.h"

#include "half.h"
#include "kv_layout.h"

#include <math.h>
#include <string.h>

void pkv__quant_params(float lo, float hi, uint16_t *lo16, uint16_t *scale16)
{
    uint16_t l = pkv__f32_to_f16_down(lo);
    double lf = (double)pkv__f16_to_f32(l);
    /* The f32 quotient may land just below the exact one; rounding up to
     * f16 then usually covers it, and the exact check below (lf + 255 * s
     * is exact in double: an f16 times 255 plus an f16) settles the rest. */
    uint16_t s = pkv__f32_to_f16_up((float)(((double)hi - lf) / 255.0));
    if (s == 0)
        s = 1; /* hi == lo exactly: any positive scale; codes are all 0 */
    while (lf + 255.0 * (double)pkv__f16_to_f32(s) < (double)hi)
        s++; /* positive finite f16 bits grow with the value */
    *lo16 = l;
    *scale16 = s;
}

uint8_t pkv__quant_code(float x, float lo, float scale)
{
    float t = floorf((x - lo) / scale + 0.5f);
    if (t <= 0.0f)
        return 0;
    if (t >= 255.0f)
        return 255;
    return (uint8_t)t;
}

float pkv__quant_value(uint8_t q, float lo, float scale)
{
    return lo + (float)q * scale;
}

/* Parameters of each group, stored and as f32, plus the min/max scan. */
static void group_params(const float *src, uint32_t block_size,
                         uint32_t head_dim, int32_t group, uint16_t *lo16,
                         uint16_t *scale16, float *lo, float *scale)
{
    uint32_t groups = PKV_LAYOUT_U8_GROUPS(group, block_size, head_dim);
    float mn[PKV_LAYOUT_MAX_HEAD_DIM];
    float mx[PKV_LAYOUT_MAX_HEAD_DIM];
    if (group == PKV_QUANT_PER_CHANNEL) {
        memcpy(mn, src, head_dim * sizeof *mn);
        memcpy(mx, src, head_dim * sizeof *mx);
        for (uint32_t t = 1; t < block_size; t++) {
            const float *row = src + (size_t)t * head_dim;
            for (uint32_t c = 0; c < head_dim; c++) {
                mn[c] = row[c] < mn[c] ? row[c] : mn[c];
                mx[c] = row[c] > mx[c] ? row[c] : mx[c];
            }
        }
    } else {
        for (uint32_t t = 0; t < block_size; t++) {
            const float *row = src + (size_t)t * head_dim;
            float a = row[0], b = row[0];
            for (uint32_t c = 1; c < head_dim; c++) {
                a = row[c] < a ? row[c] : a;
                b = row[c] > b ? row[c] : b;
            }
            mn[t] = a;
            mx[t] = b;
        }
    }
    for (uint32_t g = 0; g < groups; g++) {
        pkv__quant_params(mn[g], mx[g], &lo16[g], &scale16[g]);
        lo[g] = pkv__f16_to_f32(lo16[g]);
        scale[g] = pkv__f16_to_f32(scale16[g]);
    }
}

void pkv__quant_part(const float *src, uint32_t block_size,
                     uint32_t head_dim, int32_t group, uint8_t *part)
{
    uint32_t groups = PKV_LAYOUT_U8_GROUPS(group, block_size, head_dim);
    uint16_t lo16[PKV_LAYOUT_MAX_HEAD_DIM], scale16[PKV_LAYOUT_MAX_HEAD_DIM];
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], scale[PKV_LAYOUT_MAX_HEAD_DIM];
    group_params(src, block_size, head_dim, group, lo16, scale16, lo, scale);
    int per_channel = group == PKV_QUANT_PER_CHANNEL;
    for (uint32_t t = 0; t < block_size; t++) {
        const float *row = src + (size_t)t * head_dim;
        uint8_t *codes = part + (size_t)t * head_dim;
        for (uint32_t c = 0; c < head_dim; c++) {
            uint32_t g = per_channel ? c : t;
            codes[c] = pkv__quant_code(row[c], lo[g], scale[g]);
        }
    }
    /* memcpy: the parameter arrays are only 2-byte aligned. */
    memcpy(part + PKV_LAYOUT_U8_LO_OFFSET(block_size, head_dim), lo16,
           groups * sizeof *lo16);
    memcpy(part + PKV_LAYOUT_U8_SCALE_OFFSET(group, block_size, head_dim),
           scale16, groups * sizeof *scale16);
}

void pkv__dequant_part(const uint8_t *part, uint32_t block_size,
                       uint32_t head_dim, int32_t group, float *dst)
{
    uint32_t groups = PKV_LAYOUT_U8_GROUPS(group, block_size, head_dim);
    uint16_t h[PKV_LAYOUT_MAX_HEAD_DIM];
    float lo[PKV_LAYOUT_MAX_HEAD_DIM], scale[PKV_LAYOUT_MAX_HEAD_DIM];
    memcpy(h, part + PKV_LAYOUT_U8_LO_OFFSET(block_size, head_dim),
           groups * sizeof *h);
    pkv__f16_to_f32_n(h, lo, groups);
    memcpy(h, part + PKV_LAYOUT_U8_SCALE_OFFSET(group, block_size, head_dim),
           groups * sizeof *h);
    pkv__f16_to_f32_n(h, scale, groups);
    int per_channel = group == PKV_QUANT_PER_CHANNEL;
    for (uint32_t t = 0; t < block_size; t++) {
        const uint8_t *codes = part + (size_t)t * head_dim;
        float *out = dst + (size_t)t * head_dim;
        if (per_channel) {
            for (uint32_t c = 0; c < head_dim; c++)
                out[c] = pkv__quant_value(codes[c], lo[c], scale[c]);
        } else {
            for (uint32_t c = 0; c < head_dim; c++)
                out[c] = pkv__quant_value(codes[c], lo[t], scale[t]);
        }
    }
}
